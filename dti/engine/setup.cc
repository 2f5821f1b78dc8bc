// setup.cc: the set-up commands of either family, out of the command loop
// (commands.h): BIND and BIND6, CONNECT and CONNECT6, and a socket's names
// read from the transport (IPv4 ones into the slot, IPv6 ones also into the
// table entry's second cache line: dti_sock_shared.name6/local6/remote6).
// None of this runs per byte: a connection's names are read until it is
// connected, then never again.
#include "commands.h"

#include "control.h"

#include <cerrno>

namespace dti::engine::detail {

int32_t Commands::cmd_bind(Group &group, Member &m, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    if (c.address.port != 0 && c.address.port < m.unprivileged_port_start && !control_.may_bind_privileged(m))
        return -EACCES; // as the kernel: a privileged port needs CAP_NET_BIND_SERVICE
    int32_t result;
    if (c.op == DTI_OP_BIND6) {
        const Endpoint6 local = endpoint6_of(c);
        if (!s.dgram && local.ip[0] == 0xff) {
            stats_.rejected_commands++; // a group is a datagram socket's bind; no stream has one
            return -EINVAL;
        }
        const bool v6only = (c.flags & DTI_BIND6_V6ONLY) != 0;
        result = s.dgram ? tr_.dgram_bind6(s.sid, local, v6only) : tr_.bind6(s.sid, local, v6only);
        if (result == 0) {
            s.v6only = v6only;
            if (s.dgram)
                dgram_ends(group, si); // the names now (a datagram socket's are not refreshed)
            else
                table_.mark(group, si); // the names (refresh: take_ends) before the answer is read
        }
    } else {
        result = s.dgram ? tr_.dgram_bind(s.sid, c.address) : tr_.bind(s.sid, c.address);
        if (result == 0 && s.dgram)
            dgram_ends(group, si); // the port picked for port 0
    }
    if (result == 0)
        s.state |= DTI_STATE_BOUND;
    return result;
}

bool Commands::cmd_connect(Group &group, uint16_t ci, uint32_t si, const Command &c, int32_t *result)
{
    Slot &s = group.slots[si];
    if (s.state & (DTI_STATE_CONNECTING | DTI_STATE_CONNECTED)) {
        *result = (s.state & DTI_STATE_CONNECTED) ? -EISCONN : -EALREADY;
        return false;
    }
    if (s.state & DTI_STATE_LISTENING) {
        *result = -EINVAL;
        return false;
    }
    *result = c.op == DTI_OP_CONNECT6 ? tr_.connect6(s.sid, endpoint6_of(c)) : tr_.connect(s.sid, c.address);
    if (*result == 0) {
        s.state |= DTI_STATE_CONNECTING;
        s.connect = Pending{true, ci, c.tag, 0, 0};
        table_.mark(group, si);
        return true;
    }
    // Refused at once (EADDRINUSE: the 4-tuple is taken; EADDRNOTAVAIL,
    // ENOBUFS, ENETUNREACH, ...): the socket failed, as a connect Linux
    // refuses. The shim waits on the shared state, not on this completion
    // (a blocking connect) and poll/SO_ERROR read it (a non-blocking one).
    s.error = *result;
    s.state = (s.state | DTI_STATE_FAILED) & ~DTI_STATE_CONNECTING;
    return false;
}

void Commands::take_ends(Group &group, uint32_t si, const SockInfo &info)
{
    Slot &s = group.slots[si];
    s.local = info.local;
    s.remote = info.remote;
    dti_sock_shared &sh = group.socks[si];
    if (!info.ipv6) {
        if (s.ipv6) // (an IPv4 socket never becomes an IPv6 one: a slot's first names)
            store_rlx(&sh.name6, 0u);
        s.ipv6 = false;
        return;
    }
    // The addresses, then the flag (release); the first line's seq, bumped
    // by the write_shared() this refresh ends with, covers them too.
    for (int i = 0; i < 16; i++) {
        store_rlx(&sh.local6[i], info.local6.ip[i]);
        store_rlx(&sh.remote6[i], info.remote6.ip[i]);
    }
    s.local.ip = s.remote.ip = 0;
    s.ipv6 = true;
    store_rel(&sh.name6, DTI_NAME6_IPV6 | (s.v6only ? DTI_NAME6_V6ONLY : 0u));
}

} // namespace dti::engine::detail
