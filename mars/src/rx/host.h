// rx/host.h: what rx::Receiver may touch of the stack it is part of
// (receiver.h lists it): the tcp::Env, the flow tables (IPv4's, IPv6's), the
// IPv6 layer and TCP over IPv6's part (tcp6::Tcp6). The
// accessors are constant offsets from the Receiver's `this` (StackImpl is
// final and the bases are not virtual), so the receive path pays nothing for
// reaching the stack through them. Included by the rx/*.cc files only.
#pragma once

#include "rx/receiver.h"
#include "stack_impl.h"

namespace mars::rx {

inline tcp::Env &Receiver::env() { return static_cast<StackImpl &>(*this); }
inline const tcp::Env &Receiver::env() const { return static_cast<const StackImpl &>(*this); }
inline FlowTable &Receiver::flows() { return static_cast<StackImpl &>(*this).flows_; }
inline const FlowTable &Receiver::flows() const { return static_cast<const StackImpl &>(*this).flows_; }
inline Ipv6Layer &Receiver::ip6() { return static_cast<StackImpl &>(*this).ip6_; }
inline FlowTable6 &Receiver::flows6() { return static_cast<StackImpl &>(*this).flows6_; }
inline tcp6::Tcp6 &Receiver::tcp6() { return static_cast<StackImpl &>(*this).tcp6_part_; }

} // namespace mars::rx
