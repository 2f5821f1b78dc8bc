// testing/stack_access.cc: the test access (stack_access.h). Built into
// mars_testing, which only tests and benchmarks link.
#include "testing/stack_access.h"

#include <cstring>

namespace mars {

void StackAccess::segment_input(Stack &st, TcpSegment &seg, uint64_t now_ns)
{
    StackImpl &s = impl(st);
    if (now_ns > s.now_ns_) s.now_ns_ = now_ns;
    if (s.copies_in_flight()) s.reap_copies(true); // as input_frame: the rules see every byte landed
    FlowNode *node = s.flows_.lookup(FlowKey{s.cfg_.ip, seg.src_ip, seg.dport, seg.sport});
    const bool held = s.tcp_rules(node ? StackImpl::sock_of(node) : nullptr, seg);
    if (!held && seg.frame) s.release(*seg.frame);
    s.flush_rx_done();
    s.flush_output();
    s.link_.flush();
}

const Sock *StackAccess::find_conn(const Stack &st, uint32_t remote_ip, uint16_t local_port, uint16_t remote_port)
{
    const StackImpl &s = impl(st);
    const FlowKey key{s.cfg_.ip, remote_ip, local_port, remote_port};
    const uint32_t hash = flow_hash(key);
    FlowNode *node = FlowTable::find_from(*s.flows_.bucket(hash), key, hash);
    return node ? StackImpl::sock_of(node) : nullptr;
}

std::string StackAccess::stale_state(const Stack &st)
{
    const StackImpl &m = impl(st);
    std::string stale;
    auto check = [&](bool as_new, const char *what) {
        if (!as_new) stale += std::string(stale.empty() ? "" : ", ") + what;
    };
    // A table as new has made no block yet (made ones were destroyed).
    const bool socks_new = m.socks_.made() == 0 && m.socks_.free_listed() == 0 &&
                           m.socks_.capacity() == m.cfg_.max_sockets;
    check(socks_new, "sockets");
    check(m.flows_.size() == 0 && !m.flows_.cached() && m.flows_.cache_hits == 0 && m.flows_.cache_misses == 0,
          "connection table");
    check(m.flows6_.size() == 0 && m.flows6_.cache_hits == 0 && m.flows6_.cache_misses == 0, "IPv6 connection table");
    check(m.listeners_.empty(), "listeners");
    check(m.wheel_.armed_count() == 0 && m.wheel_.next_due_ns() == UINT64_MAX, "timers");
    check(m.ooo_pool_.as_new(), "out-of-order pool");
    check(m.event_list_.empty() && m.event_pos_ == 0 && m.closed_events_.empty(), "events");
    check(m.flush_list_.empty() && !m.link_.pending() && m.rx_done_n_ == 0, "output or release batch");
    check(m.arp_.is_clear(), "ARP");
    check(m.now_ns_ == 0, "clock");
    StackStats counters{};
    counters.strands = m.cfg_.strands;
    check(std::memcmp(&m.stats_, &counters, sizeof counters) == 0, "counters");
    check(m.pending_head_ == 0 && m.pending_tail_ == 0 && !m.doorbell_due_, "copies");
    const StackConfig &c = m.cfg_;
    check(m.next_ephemeral_ == uint16_t(c.ephemeral_lo + (c.isn_secret[0] % (c.ephemeral_hi - c.ephemeral_lo + 1u))),
          "ports");
    return stale;
}

} // namespace mars
