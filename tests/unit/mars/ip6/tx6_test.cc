// Transmit over IPv6 as over IPv4 (issue 31): runs, TSO frames, TCP checksum
// offload, and the neighbour generation that lets an IPv6 connection's
// template keep its next hop's MAC (mars/src/ip/nd.h, tcp/tcp6.h
// next_hop_mac), between two MARS stacks on the simulated wire (SimNet).
// Every transfer is checked byte for byte at the receiving stack
// (TransferApp's streams, or the pattern here); the sim port checks each
// offloaded frame against mars/checksum_offload.h (tx_invalid) and fills the
// checksums / cuts the TSO frames as a NIC does, so the receiver's own
// checksum over the IPv6 pseudo-header verifies what the sender left to the
// port. The IPv4 twins of these are tests/unit/mars/sim/tx_run_test.cc.
#include "sim_wire.h"
#include "transfer_app.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

using namespace mars;
using namespace mars::sim;

constexpr uint64_t kSec = 1'000'000'000ull;

Ip6Addr addr6(uint8_t host)
{
    Ip6Addr a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[2] = 0x00, a.b[3] = 0x02; // 2001:2::/48 (RFC 5180)
    a.b[15] = host;
    return a;
}

// Host a (the sender) with the port's transmit offloads `a_offloads`.
SimNetConfig v6_config(uint32_t a_offloads)
{
    SimNetConfig c = default_simnet_config();
    c.a.stack.addr6[0] = Ip6Prefix{addr6(1), 64};
    c.a.stack.n_addr6 = 1;
    c.b.stack.addr6[0] = Ip6Prefix{addr6(2), 64};
    c.b.stack.n_addr6 = 1;
    c.a.offloads = a_offloads;
    return c;
}

// One connection a -> b over IPv6 moving `bytes`; checks it arrived intact.
void transfer(SimNet &net, uint64_t bytes)
{
    TransferApp::Options o;
    o.conns = 1;
    o.bytes_a_to_b = bytes;
    o.bytes_b_to_a = 0;
    o.ipv6 = true;
    o.b6 = addr6(2);
    TransferApp app(net, o);
    ASSERT_TRUE(app.start()) << app.failure();
    ASSERT_TRUE(net.run_until([&] { return app.done(); }, 600 * kSec)) << net.stall_report() << "\n" << app.progress();
    ASSERT_EQ(app.failure(), "") << app.progress();
    EXPECT_EQ(app.conns()[0].end[1].received, bytes);
}

// Full segments of new data leave as runs over IPv6 (the one by one path
// counts none), with the checksum in software and offloaded.
TEST(Tx6, BulkTransferLeavesInRuns)
{
    for (uint32_t offloads : {0u, uint32_t(kOffloadTxTcpCsum | kOffloadRxCsum)}) {
        SimNet net(v6_config(offloads));
        net.run_for(2 * kSec); // DAD (b drops a's solicitations for its own addresses: not its groups)
        const uint64_t not_ours = net.stack(1).stats().drop_not_ours;
        transfer(net, 4 << 20);
        const StackStats &st = net.stack(0).stats();
        EXPECT_GT(st.tx_runs, 0u) << "offloads " << offloads;
        EXPECT_GT(st.tx_run_segments, (4u << 20) / 1428 / 2) << "most segments in runs; offloads " << offloads;
        EXPECT_EQ(net.host(0).port->tx_invalid, 0u);
        EXPECT_EQ(net.stack(1).stats().drop_tcp_csum, 0u) << "every checksum right at the receiver";
        EXPECT_EQ(net.stack(1).stats().drop_not_ours, not_ours) << "every frame to b's MAC";
    }
}

// TSO over IPv6: the port needs no IP checksum offload (IPv6 has none). The
// large frames meet the contract (payload length of the whole frame, the
// pseudo-header seed without the length, kTxTcpCsum alone: SimPort's
// checks), are cut into segments of the connection's MSS, and the bytes
// arrive intact; through loss, retransmissions go as TSO frames too.
TEST(Tx6, TsoFramesOverIpv6)
{
    for (double loss : {0.0, 0.01}) {
        SimNetConfig cfg = v6_config(kOffloadTxTcpCsum | kOffloadTxTcpSeg | kOffloadRxCsum);
        cfg.a_to_b.loss = loss;
        SimNet net(cfg);
        FramePool large(64, 65535);
        net.host(0).port->enable_tso(&large, 65535);
        net.run_for(2 * kSec);
        transfer(net, 8 << 20);
        const SimPort &port = *net.host(0).port;
        const StackStats &st = net.stack(0).stats();
        EXPECT_GT(st.tx_tso_frames, 0u) << "loss " << loss;
        EXPECT_EQ(port.tso_frames6, port.tso_frames) << "every TSO frame an IPv6 one";
        EXPECT_GT(port.tso_segments, 2 * port.tso_frames) << "several segments per frame";
        EXPECT_EQ(port.tso_seg_size, 1500u - 60 - 12) << "segment size: the MSS (path MTU - 60 - timestamps)";
        EXPECT_EQ(port.tx_invalid, 0u) << "a TSO frame broke the contract";
        EXPECT_EQ(net.stack(1).stats().drop_tcp_csum, 0u);
        if (loss > 0) {
            EXPECT_GT(st.tcp_retransmits, 0u);
        }
    }
}

// An NA (RFC 4861 7.2.5) for b's address.
std::vector<uint8_t> na_frame(const MacAddr &to, const MacAddr &from, const Ip6Addr &src, const Ip6Addr &dst,
                              const MacAddr &tlla, bool solicited)
{
    std::vector<uint8_t> f(14 + 40 + 32, 0);
    std::memcpy(&f[0], to.b, 6);
    std::memcpy(&f[6], from.b, 6);
    f[12] = 0x86, f[13] = 0xdd;
    uint8_t *ip = &f[14];
    ip[0] = 0x60;
    ip[5] = 32;      // payload length
    ip[6] = 58;      // ICMPv6
    ip[7] = 255;     // hop limit (RFC 4861 7.1.2)
    std::memcpy(ip + 8, src.b, 16);
    std::memcpy(ip + 24, dst.b, 16);
    uint8_t *m = ip + 40;
    m[0] = 136;                                     // neighbor advertisement
    m[4] = uint8_t(0x20 | (solicited ? 0x40 : 0)); // override (and solicited)
    std::memcpy(m + 8, src.b, 16);                  // target: the sender's own address
    m[24] = 2;                                      // target link-layer address option
    m[25] = 1;
    std::memcpy(m + 26, tlla.b, 6);
    uint32_t sum = 58 + 32;
    for (int i = 0; i < 32; i += 2) sum += uint32_t(ip[8 + i] << 8 | ip[9 + i]);
    for (int i = 0; i < 32; i += 2) sum += uint32_t(m[i] << 8 | m[i + 1]);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    m[2] = uint8_t(~sum >> 8), m[3] = uint8_t(~sum);
    return f;
}

void inject(SimNet &net, int h, const std::vector<uint8_t> &bytes)
{
    PacketRef f;
    ASSERT_TRUE(net.pool().get(&f));
    std::memcpy(f.data, bytes.data(), bytes.size());
    f.len = uint16_t(bytes.size());
    net.stack(h).input(&f, 1, net.now());
}

struct Conn6 {
    SockId a = kNoSock, b = kNoSock;
};

Conn6 connect6(SimNet &net)
{
    Conn6 c;
    Stack &a = net.stack(0), &b = net.stack(1);
    const int64_t l = b.open(7);
    EXPECT_EQ(b.bind6(SockId(l), Endpoint6{Ip6Addr{}, 8080}, false), 0);
    EXPECT_EQ(b.listen(SockId(l), 4), 0);
    const int64_t s = a.open(1);
    EXPECT_EQ(a.connect6(SockId(s), Endpoint6{addr6(2), 8080}, net.now()), 0);
    int64_t as = -1;
    EXPECT_TRUE(net.run_until([&] { return (as = b.accept(SockId(l), 2)) >= 0; }, 10 * kSec));
    c.a = SockId(s);
    c.b = SockId(as);
    return c;
}

// Sends the pattern from `sent` while the ring takes it and reads what b
// got, checking every byte; true once `total` bytes arrived.
struct Stream {
    uint64_t sent = 0, got = 0;
    bool step(SimNet &net, const Conn6 &c, uint64_t total, uint64_t limit = UINT64_MAX)
    {
        uint8_t buf[65536];
        const uint64_t upto = std::min(total, limit);
        while (sent < upto) {
            const size_t n = size_t(std::min<uint64_t>(sizeof buf, upto - sent));
            for (size_t i = 0; i < n; i++) buf[i] = pattern_byte(3, sent + i);
            const int64_t k = net.stack(0).send(c.a, buf, n);
            if (k <= 0) break;
            sent += uint64_t(k);
        }
        for (;;) {
            const int64_t k = net.stack(1).recv(c.b, buf, sizeof buf);
            if (k <= 0) break;
            for (int64_t i = 0; i < k; i++)
                if (buf[i] != pattern_byte(3, got + uint64_t(i))) {
                    ADD_FAILURE() << "wrong byte at " << got + uint64_t(i);
                    return true;
                }
            got += uint64_t(k);
        }
        return got >= total;
    }
};

// The neighbour's MAC changes in the middle of a transfer (a solicited NA
// with the override flag, RFC 4861 7.2.5: REACHABLE at the new MAC): the connection's next frames, runs
// included, go to the new MAC (b drops them: not its MAC), not the
// template's old one; when it changes back the transfer finishes intact.
TEST(Tx6, NeighbourChangingMacIsFollowed)
{
    SimNet net(v6_config(kOffloadTxTcpCsum | kOffloadRxCsum));
    net.run_for(2 * kSec);
    const Conn6 c = connect6(net);
    ASSERT_NE(c.b, kNoSock);
    const uint64_t total = 8 << 20;
    Stream s;
    ASSERT_TRUE(net.run_until([&] { return s.step(net, c, total, 1 << 20) || s.got >= (1 << 20); }, 30 * kSec));
    EXPECT_GT(net.stack(0).stats().tx_runs, 0u);
    const MacAddr a_mac = net.config(0).mac, b_mac = net.config(1).mac;
    const MacAddr other{{0x02, 0, 0, 0, 0, 0x77}};
    // Solicited and override: REACHABLE at once at the new MAC (no STALE
    // whose next use would go through the cache anyway).
    inject(net, 0, na_frame(a_mac, b_mac, addr6(2), addr6(1), other, true));
    const uint64_t dropped = net.stack(1).stats().drop_not_ours;
    ASSERT_TRUE(net.run_until([&] { s.step(net, c, total); return net.stack(1).stats().drop_not_ours > dropped + 10; },
                              2 * kSec))
        << "a's frames still go to b's MAC after the neighbour moved";
    const uint64_t runs = net.stack(0).stats().tx_run_segments;
    net.run_for(kSec / 10);
    inject(net, 0, na_frame(a_mac, b_mac, addr6(2), addr6(1), b_mac, true));
    ASSERT_TRUE(net.run_until([&] { return s.step(net, c, total); }, 120 * kSec)) << net.stall_report();
    EXPECT_EQ(s.got, total);
    EXPECT_GT(net.stack(0).stats().tx_run_segments, runs) << "runs again after the change";
}

// NUD with templates (RFC 4861 7.3): a connection moving data confirms its
// neighbour's reachability (7.3.1), so past ReachableTime (30 s) the entry
// goes STALE and back to REACHABLE without a probe. When the peer stops
// answering, no progress confirms it: NUD probes (unicast NS) and the
// neighbour FAILS, as it would without a prebuilt MAC.
TEST(Tx6, ProgressConfirmsTheNeighbourAndSilenceFailsIt)
{
    SimNet net(v6_config(kOffloadTxTcpCsum | kOffloadRxCsum));
    net.run_for(2 * kSec);
    const Conn6 c = connect6(net);
    ASSERT_NE(c.b, kNoSock);
    Stream s;
    const uint64_t ns_before = net.stack(0).stats().nd_ns_out;
    for (int i = 0; i < 80; i++) { // 80 s of a trickle: 10 KiB a second
        const uint64_t want = uint64_t(i + 1) * 10240;
        ASSERT_TRUE(net.run_until([&] { return s.step(net, c, want); }, 5 * kSec)) << "second " << i;
        net.run_for(kSec);
    }
    EXPECT_EQ(net.stack(0).stats().nd_ns_out, ns_before) << "a probe although TCP confirmed reachability";
    EXPECT_EQ(net.stack(0).stats().nd_failed, 0u);

    // b goes silent: nothing comes back, the data keeps trying.
    net.link(1).params().loss = 1.0;
    const uint64_t want = s.sent + 10240;
    net.run_until([&] { s.step(net, c, want); return net.stack(0).stats().nd_failed > 0; }, 120 * kSec);
    EXPECT_GT(net.stack(0).stats().nd_ns_out, ns_before) << "NUD probed";
    EXPECT_GT(net.stack(0).stats().nd_failed, 0u) << "the silent neighbour failed";
}

} // namespace
