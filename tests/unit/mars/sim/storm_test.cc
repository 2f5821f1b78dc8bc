// Connection setup/teardown storms across the simulated wire: many
// connections opening, moving a little data and closing at once, round after
// round; aborts; refusals when ring memory runs out; socket table limits.
// After each storm every socket, ring and frame must be back.
#include "sim_wire.h"
#include "transfer_app.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>

namespace mars::sim {
namespace {

constexpr uint64_t kSec = 1'000'000'000;

SimNetConfig storm_config(uint32_t ring_slots)
{
    SimNetConfig cfg = default_simnet_config();
    for (HostConfig *h : {&cfg.a, &cfg.b}) {
        h->stack.tcp.rcvbuf = 16384;
        h->stack.tcp.sndbuf = 16384;
        h->ring_slots = ring_slots;
    }
    cfg.a_to_b.delay_ns = cfg.b_to_a.delay_ns = 100'000;
    return cfg;
}

void expect_all_returned(SimNet &net, uint64_t listeners_on_b)
{
    for (int h = 0; h < 2; h++) {
        EXPECT_EQ(net.stack(h).stats().conns_open, h == 1 ? listeners_on_b : 0u) << "host " << h;
        EXPECT_EQ(net.host(h).rings->outstanding(), 0u) << "host " << h;
        EXPECT_EQ(net.stack(h).stats().ooo_frames_used, 0u);
    }
    EXPECT_EQ(net.pool().in_use(), 0u);
    EXPECT_EQ(net.pool().bad_releases(), 0u);
}

TEST(Storm, RoundsOfManyShortConnections)
{
    SimNetConfig cfg = storm_config(300);
    cfg.a_to_b.loss = cfg.b_to_a.loss = 0.01;
    SimNet net(cfg);
    for (int round = 0; round < 3; round++) {
        TransferApp::Options o;
        o.port = uint16_t(6000 + round);
        o.conns = 256;
        o.bytes_a_to_b = 20000;
        o.bytes_b_to_a = 5000;
        TransferApp app(net, o);
        ASSERT_TRUE(app.start()) << app.failure();
        ASSERT_TRUE(net.run_until([&] { return app.done(); }, 300 * kSec))
            << "round " << round << ": " << net.stall_report() << "\n" << app.progress();
        ASSERT_EQ(app.failure(), "") << "round " << round << "\n" << app.progress();
        EXPECT_EQ(app.accepted(), o.conns);
        EXPECT_EQ(net.stack(1).close(app.listener()), 0);
        // Let TIME-WAIT run out so the next round has its rings back.
        net.run_for(cfg.a.stack.tcp.time_wait_ns + kSec);
    }
    net.run_for(cfg.a.stack.tcp.time_wait_ns + kSec);
    expect_all_returned(net, 0);
    EXPECT_GE(net.stack(0).stats().tcp_active_opens, 3u * 256);
    EXPECT_GE(net.stack(1).stats().tcp_passive_opens, 3u * 256);
}

// Collects every event per (host, socket).
struct EventLog {
    std::map<std::pair<int, SockId>, uint32_t> bits;
    void attach(SimNet &net)
    {
        net.on_event = [this](int h, const SockEvent &e) { bits[{h, e.sock}] |= e.bits; };
    }
    uint32_t of(int h, SockId s) const
    {
        auto it = bits.find({h, s});
        return it == bits.end() ? 0 : it->second;
    }
};

SockId listen_on(SimNet &net, int h, uint16_t port, int backlog = 1024)
{
    int64_t l = net.stack(h).open(7);
    EXPECT_GE(l, 0);
    EXPECT_EQ(net.stack(h).bind(SockId(l), net.addr(h, port)), 0);
    EXPECT_EQ(net.stack(h).listen(SockId(l), backlog), 0);
    return SockId(l);
}

std::vector<SockId> connect_many(SimNet &net, int n, uint16_t port)
{
    std::vector<SockId> v;
    for (int i = 0; i < n; i++) {
        int64_t s = net.stack(0).open(uint64_t(i));
        EXPECT_GE(s, 0);
        EXPECT_EQ(net.stack(0).connect(SockId(s), net.addr(1, port), net.now()), 0);
        v.push_back(SockId(s));
    }
    return v;
}

TEST(Storm, AbortManyEstablishedConnections)
{
    SimNet net(storm_config(200));
    EventLog log;
    log.attach(net);
    SockId l = listen_on(net, 1, 7000);
    auto clients = connect_many(net, 150, 7000);
    std::vector<SockId> servers;
    ASSERT_TRUE(net.run_until(
        [&] {
            for (int64_t s; (s = net.stack(1).accept(l, 9)) >= 0;) servers.push_back(SockId(s));
            return servers.size() == clients.size();
        },
        30 * kSec));
    for (SockId s : clients) ASSERT_TRUE(log.of(0, s) & kEvConnected);
    for (SockId s : clients) EXPECT_EQ(net.stack(0).abort(s), 0);
    ASSERT_TRUE(net.run_until(
        [&] {
            for (SockId s : servers) {
                if (!(log.of(1, s) & kEvReset)) return false;
            }
            return true;
        },
        30 * kSec))
        << "not every server saw the RST of an abort";
    for (SockId s : servers) {
        SockInfo in{};
        ASSERT_EQ(net.stack(1).info(s, &in), 0);
        EXPECT_EQ(in.error, ECONNRESET);
        EXPECT_EQ(net.stack(1).close(s), 0);
    }
    net.run_for(2 * kSec);
    EXPECT_GE(net.stack(0).stats().tcp_resets_out, clients.size());
    EXPECT_GE(net.stack(1).stats().tcp_resets_in, clients.size());
    EXPECT_EQ(net.stack(1).close(l), 0);
    net.run_for(kSec);
    expect_all_returned(net, 0);
}

TEST(Storm, ListenerClosedWithUnacceptedConnections)
{
    SimNet net(storm_config(100));
    EventLog log;
    log.attach(net);
    SockId l = listen_on(net, 1, 7100);
    auto clients = connect_many(net, 40, 7100);
    ASSERT_TRUE(net.run_until(
        [&] {
            for (SockId s : clients) {
                if (!(log.of(0, s) & kEvConnected)) return false;
            }
            return true;
        },
        30 * kSec));
    // A client is connected when the SYN-ACK arrives; its ACK reaches the
    // listener one delay later. Virtual time: this wait is deterministic.
    net.run_for(kSec);
    EXPECT_TRUE(log.of(1, l) & kEvAcceptable);
    // Nobody accepts; closing the listener resets what waits in its queue.
    EXPECT_EQ(net.stack(1).close(l), 0);
    ASSERT_TRUE(net.run_until(
        [&] {
            for (SockId s : clients) {
                if (!(log.of(0, s) & kEvReset)) return false;
            }
            return true;
        },
        30 * kSec))
        << "clients of a closed listener were not reset";
    for (SockId s : clients) EXPECT_EQ(net.stack(0).close(s), 0);
    net.run_for(2 * kSec);
    expect_all_returned(net, 0);
}

TEST(Storm, RingMemoryExhaustionRefusesAndCounts)
{
    SimNetConfig cfg = storm_config(64);
    cfg.b.ring_slots = 3;
    SimNet net(cfg);
    EventLog log;
    log.attach(net);
    SockId l = listen_on(net, 1, 7200);
    auto clients = connect_many(net, 10, 7200);
    ASSERT_TRUE(net.run_until(
        [&] {
            for (SockId s : clients) {
                if (!(log.of(0, s) & (kEvConnected | kEvReset | kEvError))) return false;
            }
            return true;
        },
        120 * kSec));
    // Refusals happen when the handshake's last ACK reaches b (rings are
    // taken then, not at the SYN): let those ACKs and the RSTs cross.
    net.run_for(kSec);
    int connected = 0, refused = 0;
    for (SockId s : clients) {
        uint32_t b = log.of(0, s);
        if ((b & kEvConnected) && !(b & (kEvReset | kEvError))) connected++;
        if (b & (kEvReset | kEvError)) refused++;
    }
    EXPECT_EQ(connected, 3);
    EXPECT_EQ(refused, 7);
    EXPECT_EQ(net.host(1).rings->refused(), 7u);
    for (SockId s : clients) net.stack(0).close(s);
    int64_t s;
    while ((s = net.stack(1).accept(l, 1)) >= 0) net.stack(1).close(SockId(s));
    net.stack(1).close(l);
    net.run_for(cfg.a.stack.tcp.time_wait_ns + kSec);
    expect_all_returned(net, 0);
}

TEST(Storm, SocketTableLimit)
{
    SimNetConfig cfg = storm_config(16);
    cfg.a.stack.max_sockets = 8;
    SimNet net(cfg);
    std::vector<SockId> socks;
    for (int i = 0; i < 8; i++) {
        int64_t s = net.stack(0).open(uint64_t(i));
        ASSERT_GE(s, 0) << "open #" << i;
        socks.push_back(SockId(s));
    }
    EXPECT_EQ(net.stack(0).open(99), -EMFILE);
    EXPECT_EQ(net.stack(0).close(socks.back()), 0);
    net.run_for(kSec);
    int64_t again = net.stack(0).open(100);
    EXPECT_GE(again, 0) << "a closed, never-connected socket must free its slot";
}

} // namespace
} // namespace mars::sim
