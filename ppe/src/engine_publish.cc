// ppe/src/engine_publish.cc: what an engine shows eta-stat. Engine::publish
// writes its counters, its stacks' counters, its attached programs and (on
// request) its connection table into the shared stats region (stats.h),
// every publish interval and when it naps; the loop that calls it is in
// engine.cc. Nothing here runs per packet.
#include "engine.h"
#include "log.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include <unistd.h>

namespace ppe {

namespace {

// What a TCP entry and a UDP entry of the connection table share: the id,
// the owning process (a socket's user tag names its DTI group, bits
// 32..47, whose first member is the process that attached) and the names.
void fill_names(stats::ConnEntry *e, mars::SockId id, uint64_t user, const std::vector<int32_t> &group_pid,
                const mars::Endpoint &local, const mars::Endpoint &remote, bool ipv6, const mars::Ip6Addr &local6,
                const mars::Ip6Addr &remote6)
{
    const size_t group = size_t((user >> 32) & 0xffff);
    e->app_pid = user && group < group_pid.size() ? group_pid[group] : 0;
    e->sock = id;
    e->local_ip = local.ip;
    e->local_port = local.port;
    e->remote_ip = remote.ip;
    e->remote_port = remote.port;
    if (ipv6) {
        e->ipv6 = 1;
        std::memcpy(e->local6, local6.b, 16);
        std::memcpy(e->remote6, remote6.b, 16);
    }
}

} // namespace

void Engine::publish_apps()
{
    if (!dti_) return;
    const auto atts = dti_->attachments();
    // Every engine has its own attachment ids: engine e owns the slots
    // [e * max, (e + 1) * max) of the shared table, so no two write one slot.
    const uint32_t max = stats_.header()->max_apps / stats_.header()->n_engines;
    const uint32_t base = index_ * max;
    if (published_apps_.size() != max) published_apps_.assign(max, false);
    std::vector<bool> used(max, false);
    for (const auto &a : atts) {
        if (a.id < 0 || uint32_t(a.id) >= max) continue;
        stats::AppCounters ac{};
        ac.in_use = 1;
        ac.pid = int32_t(a.pid);
        ac.uid = a.uid;
        ac.engine = index_;
        std::strncpy(ac.comm, a.name.c_str(), sizeof ac.comm - 1);
        ac.sockets = a.sockets;
        ac.region_bytes = a.region_bytes;
        ac.memory_bytes = a.broken ? 0 : a.region_bytes;
        stats_.app(base + uint32_t(a.id))->write(ac);
        used[uint32_t(a.id)] = true;
    }
    for (uint32_t i = 0; i < max; i++) {
        if (used[i] || !published_apps_[i]) continue;
        stats::AppCounters none{};
        stats_.app(base + i)->write(none);
    }
    published_apps_ = std::move(used);
}

void Engine::publish(uint64_t now, bool with_conns)
{
    counters_.published_ns = now;
    uint32_t tentative = 0;
    for (auto &s : stacks_) tentative += s->addrs6_tentative();
    addrs6_tentative_.store(tentative, std::memory_order_release);
    const dti::engine::Stats &ds = dti_->stats();
    counters_.doorbells = ds.doorbells_seen;
    counters_.commands = ds.commands;
    counters_.events = ds.events_posted;
    counters_.digest_rx_bytes = ds.digest_rx_bytes;
    counters_.digest_tx_bytes = ds.digest_tx_bytes;
    counters_.digest_ranges = ds.digest_ranges;
    counters_.digest_mismatches = ds.digest_mismatches;
    counters_.posts = ds.posts;
    counters_.posted_bytes = ds.posted_bytes;
    counters_.post_fallbacks = ds.post_fallbacks;
    counters_.post_faults = ds.post_faults;
    counters_.rx_ring_grows = ds.rx_ring_grows;
    counters_.rx_grow_refusals = ds.rx_grow_refusals;
    counters_.tx_ring_sized = ds.tx_ring_sized;
    counters_.tx_size_refusals = ds.tx_size_refusals;
    counters_.tx_ring_grows = ds.tx_ring_grows;
    counters_.tx_grow_refusals = ds.tx_grow_refusals;
    counters_.rejected_commands = ds.rejected_commands;
    reconcile_watches();
    publish_apps();
    uint64_t rx = 0, tx = 0, dropped = 0;
    for (auto &io : ios_) {
        rx += io->rx_packets;
        tx += io->tx_packets;
        dropped += io->tx_dropped;
    }
    counters_.rx_packets = rx;
    counters_.tx_packets = tx;
    counters_.tx_dropped = dropped;
    const SteerCounters &st = steering_.counters();
    counters_.steered_out = st.out;
    counters_.steered_in = st.in;
    counters_.steer_drops = st.drops;
    counters_.arp_shared_out = st.arp_out;
    counters_.arp_shared_in = st.arp_in;
    stats_.engine(index_)->write(counters_);
    for (size_t p = 0; p < stacks_.size(); p++) {
        stats::StackCounters sc;
        sc.stack = stacks_[p]->stats();
        sc.kernel = p < kernel_counters_.size() ? kernel_counters_[p] : stats::KernelCounters{};
        stats_.stack(index_, uint32_t(p))->write(sc);
    }
    if (!with_conns) return;
    // Connection table: gathered privately, then copied under the seqlock.
    conn_scratch_.clear();
    uint32_t total = 0;
    // A socket's user tag names its DTI group (bits 32..47, dti/engine);
    // a group's first member is the process that attached.
    std::vector<int32_t> group_pid;
    if (dti_) {
        for (const auto &a : dti_->attachments()) {
            if (a.group < 0) continue;
            if (size_t(a.group) >= group_pid.size()) group_pid.resize(size_t(a.group) + 1, 0);
            if (!group_pid[size_t(a.group)]) group_pid[size_t(a.group)] = int32_t(a.pid);
        }
    }
    for (auto &s : stacks_) {
        struct Ctx {
            std::vector<stats::ConnEntry> *out;
            uint32_t *total;
            const std::vector<int32_t> *group_pid;
        } ctx{&conn_scratch_, &total, &group_pid};
        s->for_each_socket(
            [](mars::SockId id, const mars::SockInfo &i, uint64_t user, void *arg) {
                auto *c = static_cast<Ctx *>(arg);
                (*c->total)++;
                stats::ConnEntry e{};
                fill_names(&e, id, user, *c->group_pid, i.local, i.remote, i.ipv6, i.local6.ip, i.remote6.ip);
                e.state = uint8_t(i.state);
                e.rx_readable = i.rx_readable;
                e.tx_unacked = i.tx_unacked;
                e.tx_space = i.tx_space;
                e.cwnd = i.cwnd;
                e.srtt_us = i.srtt_us;
                e.ooo_frames = i.ooo_frames;
                // Listeners, closed sockets and those the application has
                // let go of (user 0: TIME-WAIT after close) hold no rings.
                const bool rings =
                    user && i.state != mars::TcpState::kListen && i.state != mars::TcpState::kClosed;
                // Both rings as they are now: they grow (autotuning,
                // SO_RCVBUF, SO_SNDBUF).
                e.memory_bytes = rings ? i.rx_ring + i.tx_ring : 0;
                e.retransmits = i.total_retransmits;
                e.bytes_in = i.bytes_in;
                e.bytes_out = i.bytes_out;
                c->out->push_back(e);
            },
            &ctx);
    }
    // Then the UDP sockets (issue 31: eta-stat shows every socket's family
    // and protocol), after the TCP ones.
    uint32_t udp_total = 0;
    for (auto &s : stacks_) {
        struct Ctx {
            std::vector<stats::ConnEntry> *out;
            uint32_t *total;
            const std::vector<int32_t> *group_pid;
        } ctx{&conn_scratch_, &udp_total, &group_pid};
        s->udp().for_each_socket(
            [](mars::SockId id, const mars::UdpInfo &i, uint64_t user, void *arg) {
                auto *c = static_cast<Ctx *>(arg);
                (*c->total)++;
                stats::ConnEntry e{};
                fill_names(&e, id, user, *c->group_pid, i.local, i.remote, i.ipv6, i.local6.ip, i.remote6.ip);
                e.proto = stats::kProtoUdp;
                e.rx_readable = i.rx_used;
                e.datagrams = i.rx_datagrams;
                e.memory_bytes = i.rx_size;
                e.drops = i.drops;
                c->out->push_back(e);
            },
            &ctx);
    }
    const stats::Header *h = stats_.header();
    const uint32_t count = uint32_t(std::min<size_t>(conn_scratch_.size(), h->conn_capacity));
    std::atomic<uint32_t> *seq = stats_.conn_seq(index_);
    const uint32_t s0 = seq->fetch_add(1, std::memory_order_acquire); // odd: readers retry
    const stats::ConnTableHeader th{count, total, udp_total, 0, now};
    stats::store_words(stats_.conn_header(index_), &th, sizeof th);
    stats::store_words(stats_.conns(index_), conn_scratch_.data(), count * sizeof(stats::ConnEntry));
    seq->store(s0 + 2, std::memory_order_release);
}

void wait_addrs6_settled(const std::vector<std::unique_ptr<Engine>> &engines, const Config &config, uint32_t max_ms)
{
    bool dad = false;
    for (const PortConfig &p : config.ports) dad |= !p.addr6.empty() && !p.kernel_shared;
    if (!dad) return;
    for (uint32_t waited = 0;; waited += 10) {
        uint32_t tentative = 0;
        for (const auto &e : engines) tentative = std::max(tentative, e->addrs6_tentative());
        if (tentative == 0) return;
        if (waited >= max_ms) {
            log(LogLevel::kWarn, "IPv6 addresses still in duplicate address detection after %u ms; ready without them",
                max_ms);
            return;
        }
        usleep(10'000); // the engines publish every 10 ms
    }
}

} // namespace ppe
