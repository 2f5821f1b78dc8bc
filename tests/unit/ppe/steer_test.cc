// ppe::Steering (ppe/src/steer.h): the owner of every TCP flow is
// dti_flow_owner(4-tuple, N) in both directions; a received burst keeps what
// its engine owns, hands the rest to the owner over that pair's ring in
// order, shares ARP with every engine by reference count (no copy), keeps
// ICMP and malformed frames where they arrived, and counts a full ring's
// drops; IPv6 alike (dti_flow_owner6, neighbour discovery shared like ARP).
// Real mbufs from a real mempool: the EAL runs in-process without
// hugepages, devices or shared files (no root needed).
#include "steer.h"

#include <dti_abi.h>

#include <rte_eal.h>
#include <rte_mbuf.h>
#include <rte_thash.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace {

rte_mempool *g_pool = nullptr;

class EalEnv : public ::testing::Environment {
  public:
    void SetUp() override
    {
        prefix = "steer-test-" + std::to_string(getpid());
        std::vector<std::string> args = {"steer_test", "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry",
                                         "--in-memory", "-m", "64", "--iova-mode=va", "--log-level=*:error",
                                         "--file-prefix", prefix, "-l", "0"};
        // --in-memory and --no-huge do not combine; --no-shconf is enough.
        args.erase(std::find(args.begin(), args.end(), "--in-memory"));
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        ASSERT_GE(rte_eal_init(int(argv.size()), argv.data()), 0) << "EAL could not start without hugepages";
        g_pool = rte_pktmbuf_pool_create("steer_test", 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
        ASSERT_NE(g_pool, nullptr);
    }
    void TearDown() override
    {
        // The EAL leaves its runtime directory behind even with --no-shconf
        // (/var/run/dpdk/<prefix> as root, under $XDG_RUNTIME_DIR or /tmp otherwise).
        const std::string runtime_dir = rte_eal_get_runtime_dir();
        rte_eal_cleanup();
        std::error_code ec;
        if (runtime_dir.find(prefix) != std::string::npos) std::filesystem::remove_all(runtime_dir, ec);
    }

  private:
    std::string prefix;
};

constexpr uint32_t kLocal = 0xc6120001u;  // 198.18.0.1 (host order)
constexpr uint32_t kRemote = 0xc6120002u; // 198.18.0.2

void put16(uint8_t *p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }
void put32(uint8_t *p, uint32_t v) { put16(p, uint16_t(v >> 16)), put16(p + 2, uint16_t(v)); }

rte_mbuf *frame(uint16_t ether, uint8_t proto, uint32_t src, uint16_t sport, uint32_t dst, uint16_t dport,
                uint16_t frag = 0, uint16_t len = 54)
{
    rte_mbuf *m = rte_pktmbuf_alloc(g_pool);
    EXPECT_NE(m, nullptr);
    uint8_t *f = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(m, len));
    std::memset(f, 0, len);
    put16(f + 12, ether);
    if (ether == 0x0800 && len >= 34) {
        f[14] = 0x45;
        put16(f + 14 + 6, frag);
        f[14 + 9] = proto;
        put32(f + 14 + 12, src);
        put32(f + 14 + 16, dst);
        if (len >= 38) {
            put16(f + 34, sport);
            put16(f + 36, dport);
        }
    }
    return m;
}
rte_mbuf *tcp(uint32_t src, uint16_t sport, uint32_t dst, uint16_t dport) { return frame(0x0800, 6, src, sport, dst, dport); }
rte_mbuf *arp() { return frame(0x0806, 0, 0, 0, 0, 0); }

// IPv6: 2001:2::1 (the local address), 2001:2::<host> remote.
struct Ip6 {
    uint8_t b[16];
};
Ip6 ip6(uint16_t host)
{
    Ip6 a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[3] = 0x02;
    put16(a.b + 14, host);
    return a;
}
const Ip6 kLocal6 = ip6(1), kRemote6 = ip6(2);

// An IPv6 frame: next header `nh`, then l4 (the first bytes of what follows
// the fixed header), len bytes of frame in all.
rte_mbuf *frame6(uint8_t nh, const Ip6 &src, const Ip6 &dst, const std::vector<uint8_t> &l4, uint16_t len = 0)
{
    if (!len) len = uint16_t(14 + 40 + l4.size());
    rte_mbuf *m = rte_pktmbuf_alloc(g_pool);
    EXPECT_NE(m, nullptr);
    uint8_t *f = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(m, len));
    std::memset(f, 0, len);
    put16(f + 12, 0x86dd);
    if (len >= 54) {
        f[14] = 0x60;
        put16(f + 14 + 4, uint16_t(l4.size()));
        f[14 + 6] = nh;
        f[14 + 7] = 64;
        std::memcpy(f + 14 + 8, src.b, 16);
        std::memcpy(f + 14 + 24, dst.b, 16);
        std::memcpy(f + 54, l4.data(), std::min<size_t>(l4.size(), len - 54));
    }
    return m;
}
std::vector<uint8_t> ports(uint16_t sport, uint16_t dport)
{
    return {uint8_t(sport >> 8), uint8_t(sport), uint8_t(dport >> 8), uint8_t(dport), 0, 0, 0, 0};
}
rte_mbuf *tcp6(const Ip6 &src, uint16_t sport, const Ip6 &dst, uint16_t dport)
{
    return frame6(6, src, dst, ports(sport, dport));
}
// ICMPv6 of `type`; for an error, `quoted` is the invoking packet's IPv6
// header and its first bytes.
rte_mbuf *icmp6(uint8_t type, const std::vector<uint8_t> &quoted = {})
{
    std::vector<uint8_t> m = {type, 0, 0, 0, 0, 0, 0, 0};
    m.insert(m.end(), quoted.begin(), quoted.end());
    return frame6(58, kRemote6, kLocal6, m);
}
// What an error quotes: our segment (or datagram) to the remote.
std::vector<uint8_t> quote(uint8_t nh, uint16_t sport, uint16_t dport)
{
    std::vector<uint8_t> q(40);
    q[0] = 0x60;
    q[6] = nh;
    std::memcpy(q.data() + 8, kLocal6.b, 16);
    std::memcpy(q.data() + 24, kRemote6.b, 16);
    const auto p = ports(sport, dport);
    q.insert(q.end(), p.begin(), p.end());
    return q;
}

uint32_t owner_of(rte_mbuf *m, uint32_t n) { return ppe::frame_owner(rte_pktmbuf_mtod(m, uint8_t *), m->data_len, n); }

// A remote port whose flow to local port 80 the given engine owns.
uint16_t port_owned_by(uint32_t engine, uint32_t n, uint16_t from = 1024)
{
    for (uint16_t p = from;; p++)
        if (dti_flow_owner(kRemote, p, kLocal, 80, n) == engine) return p;
}

TEST(SteerOwner, SymmetricAndSpread)
{
    std::mt19937 rng(7);
    uint32_t per_engine[4] = {};
    for (int i = 0; i < 4000; i++) {
        const uint32_t a = rng(), b = rng();
        const uint16_t pa = uint16_t(rng()), pb = uint16_t(rng());
        for (uint32_t n : {2u, 3u, 4u, 8u})
            ASSERT_EQ(dti_flow_owner(a, pa, b, pb, n), dti_flow_owner(b, pb, a, pa, n)) << "n=" << n;
        per_engine[dti_flow_owner(kLocal, 80, kRemote, uint16_t(32768 + i), 4)]++;
        // A frame in each direction lands on the same engine.
        rte_mbuf *in = tcp(a, pa, b, pb), *out = tcp(b, pb, a, pa);
        ASSERT_EQ(owner_of(in, 4), owner_of(out, 4));
        ASSERT_EQ(owner_of(in, 4), dti_flow_owner(a, pa, b, pb, 4));
        rte_pktmbuf_free(in);
        rte_pktmbuf_free(out);
    }
    // Ephemeral ports of one client spread over the engines (each >= 15%).
    for (uint32_t e = 0; e < 4; e++) EXPECT_GT(per_engine[e], 600u) << "engine " << e;
}

// What an RSS NIC does with the key and table eta-ppe programs (steer.h):
// DPDK's software Toeplitz (rte_softrss, the reference for the NICs' hash)
// indexes the table by the hash's low bits. Its choice of queue must be the
// flow's owner for every table size a NIC has, every engine count, and both
// directions, so that no segment needs a hop between engines.
TEST(SteerOwner, RssNicPutsEveryFlowOnItsOwnersQueue)
{
    for (size_t key_len : {40u, 52u}) {
        uint8_t key[64];
        ppe::rss_fill_key(key, key_len);
        std::mt19937 rng(11);
        for (uint32_t reta_size : {64u, 128u, 512u, 2048u}) {
            ASSERT_TRUE(ppe::rss_table_matches_owner(reta_size));
            for (uint16_t queues : {2, 3, 4, 8}) {
                for (int i = 0; i < 2000; i++) {
                    const uint32_t src = rng(), dst = rng();
                    const uint16_t sport = uint16_t(rng()), dport = uint16_t(rng());
                    uint32_t tuple[3] = {src, dst, uint32_t(sport) << 16 | dport};
                    const uint32_t hash = rte_softrss(tuple, 3, key);
                    ASSERT_EQ(hash, dti_flow_hash(src, sport, dst, dport)) << "key " << key_len;
                    const uint16_t nic_queue = ppe::rss_queue_of_entry(hash % reta_size, queues);
                    ASSERT_EQ(nic_queue, dti_flow_owner(src, sport, dst, dport, queues))
                        << "table " << reta_size << ", " << queues << " queues";
                    uint32_t back[3] = {dst, src, uint32_t(dport) << 16 | sport};
                    ASSERT_EQ(rte_softrss(back, 3, key), hash) << "the key is not symmetric";
                }
            }
        }
    }
    EXPECT_FALSE(ppe::rss_table_matches_owner(32));
    EXPECT_FALSE(ppe::rss_table_matches_owner(100));
}

TEST(SteerOwner, ClassifiesFrames)
{
    struct Case {
        const char *what;
        rte_mbuf *m;
        uint32_t want;
    } cases[] = {
        {"ARP", arp(), ppe::kSteerEvery},
        {"ICMP", frame(0x0800, 1, kRemote, 0, kLocal, 0), ppe::kSteerHere},
        {"UDP (engine 0 holds every UDP socket)", frame(0x0800, 17, kRemote, 1, kLocal, 2), ppe::kUdpEngine},
        {"IGMP (memberships are engine 0's)", frame(0x0800, 2, kRemote, 0, kLocal, 0), ppe::kUdpEngine},
        {"IPv6 runt (no IPv6 header: engine 0)", frame(0x86dd, 6, kRemote, 1, kLocal, 2, 0, 14), ppe::kUdpEngine},
        {"TCP fragment (offset)", frame(0x0800, 6, kRemote, 1, kLocal, 2, 0x0010), ppe::kSteerHere},
        {"TCP fragment (MF)", frame(0x0800, 6, kRemote, 1, kLocal, 2, 0x2000), ppe::kSteerHere},
        {"TCP header cut before the ports", frame(0x0800, 6, kRemote, 1, kLocal, 2, 0, 36), ppe::kSteerHere},
        {"runt", frame(0x0800, 6, kRemote, 1, kLocal, 2, 0, 10), ppe::kSteerHere},
    };
    for (auto &c : cases) {
        EXPECT_EQ(owner_of(c.m, 2), c.want) << c.what;
        EXPECT_EQ(owner_of(c.m, 1), ppe::kSteerHere) << c.what << ": one engine handles everything";
        rte_pktmbuf_free(c.m);
    }
    rte_mbuf *m = tcp(kRemote, 5555, kLocal, 80);
    EXPECT_EQ(owner_of(m, 2), dti_flow_owner(kLocal, 80, kRemote, 5555, 2)) << "DF set still steers";
    rte_pktmbuf_free(m);
}

// The RSS input of an IPv6 TCP segment (RFC: Microsoft RSS, "IPv6 TCP"):
// source address, destination address, source port, destination port, 36
// bytes, hashed bit by bit with the key 0x6d5a repeated. No fold: the plain
// definition, which dti_flow_hash6's fold must equal.
uint32_t toeplitz_bitwise(const uint8_t *in, size_t len)
{
    uint8_t key[52];
    ppe::rss_fill_key(key, sizeof key);
    auto key_bit = [&](size_t i) { return (key[i / 8] >> (7 - i % 8)) & 1u; };
    uint32_t h = 0;
    for (size_t bit = 0; bit < len * 8; bit++) {
        if (!((in[bit / 8] >> (7 - bit % 8)) & 1u)) continue;
        uint32_t window = 0;
        for (size_t k = 0; k < 32; k++) window = window << 1 | key_bit(bit + k);
        h ^= window;
    }
    return h;
}

TEST(SteerOwner, Ipv6FoldEqualsToeplitzOverTheWholeInput)
{
    std::mt19937 rng(13);
    for (int i = 0; i < 20000; i++) {
        uint8_t in[36];
        for (auto &b : in) b = uint8_t(rng());
        const uint16_t sport = uint16_t(in[32] << 8 | in[33]), dport = uint16_t(in[34] << 8 | in[35]);
        const uint32_t h = dti_flow_hash6(in, sport, in + 16, dport);
        ASSERT_EQ(h, toeplitz_bitwise(in, sizeof in)) << "input " << i;
        ASSERT_EQ(h, dti_flow_hash6(in + 16, dport, in, sport)) << "not symmetric";
        for (uint32_t n : {2u, 3u, 4u, 8u})
            ASSERT_EQ(dti_flow_owner6(in, sport, in + 16, dport, n), (h % DTI_FLOW_RETA_SPAN) % n);
    }
    // And the IPv4 one likewise, over its 12 bytes.
    for (int i = 0; i < 2000; i++) {
        const uint32_t src = rng(), dst = rng();
        const uint16_t sport = uint16_t(rng()), dport = uint16_t(rng());
        uint8_t in[12];
        put32(in, src), put32(in + 4, dst), put16(in + 8, sport), put16(in + 10, dport);
        ASSERT_EQ(dti_flow_hash(src, sport, dst, dport), toeplitz_bitwise(in, sizeof in));
    }
}

// An RSS NIC hashing IPv6 TCP (RTE_ETH_RSS_NONFRAG_IPV6_TCP, dpdk.cc) puts
// each flow on its owner's queue, as for IPv4 (DPDK's software Toeplitz).
TEST(SteerOwner, RssNicPutsEveryIpv6FlowOnItsOwnersQueue)
{
    uint8_t key[40];
    ppe::rss_fill_key(key, sizeof key);
    std::mt19937 rng(17);
    for (int i = 0; i < 4000; i++) {
        Ip6 src, dst;
        for (auto &b : src.b) b = uint8_t(rng());
        for (auto &b : dst.b) b = uint8_t(rng());
        const uint16_t sport = uint16_t(rng()), dport = uint16_t(rng());
        uint32_t words[9];
        for (int w = 0; w < 4; w++) {
            words[w] = uint32_t(src.b[4 * w]) << 24 | uint32_t(src.b[4 * w + 1]) << 16 |
                       uint32_t(src.b[4 * w + 2]) << 8 | src.b[4 * w + 3];
            words[4 + w] = uint32_t(dst.b[4 * w]) << 24 | uint32_t(dst.b[4 * w + 1]) << 16 |
                           uint32_t(dst.b[4 * w + 2]) << 8 | dst.b[4 * w + 3];
        }
        words[8] = uint32_t(sport) << 16 | dport;
        const uint32_t hash = rte_softrss(words, 9, key);
        ASSERT_EQ(hash, dti_flow_hash6(src.b, sport, dst.b, dport));
        for (uint16_t queues : {2, 3, 4, 8})
            for (uint32_t reta_size : {64u, 512u})
                ASSERT_EQ(ppe::rss_queue_of_entry(hash % reta_size, queues),
                          dti_flow_owner6(src.b, sport, dst.b, dport, queues));
    }
}

TEST(SteerOwner, ClassifiesIpv6Frames)
{
    const uint16_t sport = 40000;
    const uint32_t owner = dti_flow_owner6(kLocal6.b, 80, kRemote6.b, sport, 2);
    // A flow engine 1 owns and one engine 0 owns, so each case means something.
    uint16_t p0 = 1024, p1 = 1024;
    while (dti_flow_owner6(kRemote6.b, p0, kLocal6.b, 80, 2) != 0) p0++;
    while (dti_flow_owner6(kRemote6.b, p1, kLocal6.b, 80, 2) != 1) p1++;
    struct Case {
        const char *what;
        rte_mbuf *m;
        uint32_t want;
    } cases[] = {
        {"TCP to engine 1's flow", tcp6(kRemote6, p1, kLocal6, 80), 1},
        {"TCP to engine 0's flow", tcp6(kRemote6, p0, kLocal6, 80), 0},
        {"TCP, other direction", tcp6(kLocal6, 80, kRemote6, p1), 1},
        {"TCP cut before the ports", frame6(6, kRemote6, kLocal6, ports(p1, 80), 14 + 40 + 3), ppe::kUdpEngine},
        {"UDP (engine 0 holds every datagram socket)", frame6(17, kRemote6, kLocal6, ports(p1, 80)), ppe::kUdpEngine},
        {"hop-by-hop first (MLD; no extension header walk)", frame6(0, kRemote6, kLocal6, ports(p1, 80)),
         ppe::kUdpEngine},
        {"neighbour solicitation (every engine's neighbour cache)", icmp6(135), ppe::kSteerEvery},
        {"neighbour advertisement", icmp6(136), ppe::kSteerEvery},
        {"echo request (answered where received)", icmp6(128), ppe::kSteerHere},
        {"echo reply", icmp6(129), ppe::kSteerHere},
        {"MLD query", icmp6(130), ppe::kUdpEngine},
        {"router advertisement", icmp6(134), ppe::kUdpEngine},
        {"packet too big quoting engine 1's segment", icmp6(2, quote(6, 80, p1)), 1},
        {"packet too big quoting engine 0's segment", icmp6(2, quote(6, 80, p0)), 0},
        {"unreachable quoting engine 1's segment", icmp6(1, quote(6, 80, p1)), 1},
        {"time exceeded quoting engine 1's segment", icmp6(3, quote(6, 80, p1)), 1},
        {"error quoting a datagram", icmp6(1, quote(17, 80, p1)), ppe::kUdpEngine},
        {"error quoting too little", icmp6(2, std::vector<uint8_t>(30)), ppe::kUdpEngine},
        {"ICMPv6 cut before its type", frame6(58, kRemote6, kLocal6, {}, 14 + 40), ppe::kUdpEngine},
    };
    for (auto &c : cases) {
        EXPECT_EQ(owner_of(c.m, 2), c.want) << c.what;
        EXPECT_EQ(owner_of(c.m, 1), ppe::kSteerHere) << c.what << ": one engine handles everything";
        const uint8_t *f = rte_pktmbuf_mtod(c.m, uint8_t *);
        EXPECT_EQ(ppe::frame_for_every_engine(f, c.m->data_len), c.want == ppe::kSteerEvery) << c.what;
        rte_pktmbuf_free(c.m);
    }
    rte_mbuf *m = tcp6(kRemote6, sport, kLocal6, 80);
    EXPECT_EQ(owner_of(m, 2), owner);
    rte_pktmbuf_free(m);
    rte_mbuf *a = arp();
    EXPECT_TRUE(ppe::frame_for_every_engine(rte_pktmbuf_mtod(a, uint8_t *), a->data_len));
    rte_pktmbuf_free(a);
}

// Many connections of one IPv6 client spread over the engines (the point of
// it all: an IPv6 server on N engines runs on N).
TEST(SteerOwner, Ipv6FlowsSpread)
{
    uint32_t per_engine[4] = {};
    for (uint16_t p = 32768; p < 32768 + 4000; p++) per_engine[dti_flow_owner6(kLocal6.b, 80, kRemote6.b, p, 4)]++;
    for (uint32_t e = 0; e < 4; e++) EXPECT_GT(per_engine[e], 600u) << "engine " << e;
}

// Neighbour solicitations reach every engine by reference, as ARP does, and
// count as such.
TEST(Steering, NeighbourDiscoveryReachesEveryEngine)
{
    ppe::SteerMesh mesh;
    std::string err;
    ASSERT_TRUE(mesh.create(2, 64, &err)) << err;
    ppe::Steering e0(mesh, 0), e1(mesh, 1);
    const unsigned avail0 = rte_mempool_avail_count(g_pool);
    rte_mbuf *ns = icmp6(135);
    mars::PacketRef burst[1] = {ppe::packet_of(ns)};
    ASSERT_EQ(e1.sort(burst, 1), 1) << "the receiver handles it too";
    EXPECT_EQ(e1.flush(), 1u);
    EXPECT_EQ(rte_mbuf_refcnt_read(ns), 2);
    mars::PacketRef got[2];
    ASSERT_EQ(e0.drain(got, 2), 1);
    EXPECT_EQ(got[0].handle, ns);
    EXPECT_EQ(e1.counters().arp_out, 1u);
    EXPECT_EQ(e0.counters().arp_in, 1u);
    EXPECT_EQ(e0.counters().in, 0u);
    rte_pktmbuf_free(ns);
    rte_pktmbuf_free(ns);
    EXPECT_EQ(rte_mempool_avail_count(g_pool), avail0);
}

TEST(Steering, HandsSegmentsToTheirOwnerInOrder)
{
    ppe::SteerMesh mesh;
    std::string err;
    ASSERT_TRUE(mesh.create(2, 1024, &err)) << err;
    ppe::Steering e0(mesh, 0), e1(mesh, 1);
    const unsigned avail0 = rte_mempool_avail_count(g_pool);
    const uint16_t mine = port_owned_by(0, 2), theirs = port_owned_by(1, 2), theirs2 = port_owned_by(1, 2, theirs + 1);

    // A burst as engine 0's queue received it: interleaved flows, ARP, ICMP.
    std::vector<rte_mbuf *> sent;
    mars::PacketRef burst[64];
    uint16_t n = 0;
    std::vector<rte_mbuf *> want_kept, want_moved;
    for (int i = 0; i < 20; i++) {
        rte_mbuf *a = tcp(kRemote, mine, kLocal, 80), *b = tcp(kRemote, theirs, kLocal, 80),
                 *c = tcp(kRemote, theirs2, kLocal, 80);
        burst[n++] = ppe::packet_of(a);
        burst[n++] = ppe::packet_of(b);
        burst[n++] = ppe::packet_of(c);
        want_kept.push_back(a);
        want_moved.push_back(b);
        want_moved.push_back(c);
    }
    rte_mbuf *a = arp(), *icmp = frame(0x0800, 1, kRemote, 0, kLocal, 0);
    burst[n++] = ppe::packet_of(a);
    burst[n++] = ppe::packet_of(icmp);
    want_kept.push_back(a);
    want_kept.push_back(icmp);

    const uint16_t kept = e0.sort(burst, n);
    ASSERT_EQ(kept, want_kept.size());
    for (uint16_t i = 0; i < kept; i++) EXPECT_EQ(burst[i].handle, want_kept[i]) << "kept frames keep their order";
    EXPECT_EQ(rte_mbuf_refcnt_read(a), 2) << "ARP: one reference per engine, no copy";
    mars::PacketRef got[64];
    EXPECT_EQ(e1.drain(got, 64), 0) << "nothing moves before flush()";
    EXPECT_FALSE(e1.has_incoming());
    EXPECT_EQ(e0.flush(), 1u << 1) << "flush() names the engines that got frames";
    EXPECT_TRUE(e1.has_incoming()) << "engine 1 must not nap now";
    EXPECT_FALSE(e0.has_incoming());
    const uint16_t moved = e1.drain(got, 64);
    ASSERT_EQ(moved, want_moved.size() + 1);
    for (size_t i = 0; i < want_moved.size(); i++) EXPECT_EQ(got[i].handle, want_moved[i]) << "arrival order kept";
    EXPECT_EQ(got[moved - 1].handle, a) << "the same ARP mbuf reaches engine 1";
    EXPECT_EQ(got[0].data, rte_pktmbuf_mtod(want_moved[0], uint8_t *));
    EXPECT_EQ(got[0].len, 54);
    EXPECT_EQ(e0.drain(got + moved, 8), 0) << "nothing comes back to the sender";

    EXPECT_EQ(e0.counters().out, 40u);
    EXPECT_EQ(e0.counters().arp_out, 1u);
    EXPECT_EQ(e1.counters().in, 40u);
    EXPECT_EQ(e1.counters().arp_in, 1u);
    EXPECT_EQ(e0.counters().drops, 0u);

    // Each engine's stack releases what it got; the ARP frame returns to the
    // pool only with the last release.
    for (uint16_t i = 0; i < kept; i++) rte_pktmbuf_free(static_cast<rte_mbuf *>(burst[i].handle));
    EXPECT_EQ(rte_mbuf_refcnt_read(a), 1);
    for (uint16_t i = 0; i < moved; i++) rte_pktmbuf_free(static_cast<rte_mbuf *>(got[i].handle));
    EXPECT_EQ(rte_mempool_avail_count(g_pool), avail0) << "every mbuf back in its pool";
}

TEST(Steering, ArpReachesEveryEngine)
{
    ppe::SteerMesh mesh;
    std::string err;
    ASSERT_TRUE(mesh.create(4, 64, &err)) << err;
    ppe::Steering e[4] = {{mesh, 0}, {mesh, 1}, {mesh, 2}, {mesh, 3}};
    const unsigned avail0 = rte_mempool_avail_count(g_pool);
    rte_mbuf *a = arp();
    mars::PacketRef burst[1] = {ppe::packet_of(a)};
    ASSERT_EQ(e[2].sort(burst, 1), 1) << "the receiver handles ARP too";
    EXPECT_EQ(e[2].flush(), 0b1011u);
    EXPECT_EQ(e[2].flush(), 0u) << "nothing new";
    EXPECT_EQ(rte_mbuf_refcnt_read(a), 4);
    for (uint32_t i : {0u, 1u, 3u}) {
        mars::PacketRef got[4];
        ASSERT_EQ(e[i].drain(got, 4), 1) << "engine " << i;
        EXPECT_EQ(got[0].handle, a);
        rte_pktmbuf_free(a);
    }
    rte_pktmbuf_free(a);
    EXPECT_EQ(rte_mempool_avail_count(g_pool), avail0);
}

TEST(Steering, FullRingDropsAndCounts)
{
    ppe::SteerMesh mesh;
    std::string err;
    ASSERT_TRUE(mesh.create(2, 8, &err)) << err; // holds 7
    ppe::Steering e0(mesh, 0), e1(mesh, 1);
    const unsigned avail0 = rte_mempool_avail_count(g_pool);
    const uint16_t theirs = port_owned_by(1, 2);
    mars::PacketRef burst[20];
    for (auto &f : burst) f = ppe::packet_of(tcp(kRemote, theirs, kLocal, 80));
    EXPECT_EQ(e0.sort(burst, 20), 0);
    e0.flush();
    EXPECT_EQ(e0.counters().out, 20u);
    EXPECT_EQ(e0.counters().drops, 13u) << "what the ring could not take is dropped and counted";
    mars::PacketRef got[20];
    EXPECT_EQ(e1.drain(got, 20), 7);
    for (int i = 0; i < 7; i++) rte_pktmbuf_free(static_cast<rte_mbuf *>(got[i].handle));
    EXPECT_EQ(rte_mempool_avail_count(g_pool), avail0) << "dropped frames were freed";
}

TEST(Steering, OneEngineIsAPassThrough)
{
    ppe::SteerMesh mesh;
    std::string err;
    ASSERT_TRUE(mesh.create(1, 64, &err)) << err;
    ppe::Steering e(mesh, 0);
    EXPECT_FALSE(e.active());
    rte_mbuf *m = tcp(kRemote, 1, kLocal, 2), *a = arp();
    mars::PacketRef burst[2] = {ppe::packet_of(m), ppe::packet_of(a)};
    EXPECT_EQ(e.sort(burst, 2), 2);
    EXPECT_EQ(rte_mbuf_refcnt_read(a), 1);
    rte_pktmbuf_free(m);
    rte_pktmbuf_free(a);
}

TEST(SteerMesh, RejectsASizeThatIsNotAPowerOfTwo)
{
    ppe::SteerMesh mesh;
    std::string err;
    EXPECT_FALSE(mesh.create(2, 1000, &err));
    EXPECT_NE(err.find("power of two"), std::string::npos) << err;
}

// The control thread's routing of a new attach by its peeked HELLO.
TEST(RouteHello, ByTheEngineItNames)
{
    dti_ctl_msg m{};
    m.magic = DTI_CTL_MAGIC;
    m.type = DTI_CTL_HELLO;
    m.engine = DTI_ENGINE_ANY;
    EXPECT_EQ(ppe::route_hello(&m, sizeof m, 2).kind, ppe::HelloRoute::kAny);
    m.engine = 1;
    auto r = ppe::route_hello(&m, sizeof m, 2);
    EXPECT_EQ(r.kind, ppe::HelloRoute::kEngine);
    EXPECT_EQ(r.engine, 1u);
    m.engine = 2;
    r = ppe::route_hello(&m, sizeof m, 2);
    EXPECT_EQ(r.kind, ppe::HelloRoute::kNoSuchEngine) << "an index >= N is refused";
    EXPECT_EQ(r.engine, 2u);
    m.engine = 0;
    EXPECT_EQ(ppe::route_hello(&m, sizeof m, 1).kind, ppe::HelloRoute::kEngine);
    EXPECT_EQ(ppe::route_hello(&m, sizeof m - 1, 2).kind, ppe::HelloRoute::kNotHello) << "short message";
    m.type = DTI_CTL_OPEN_CTX;
    EXPECT_EQ(ppe::route_hello(&m, sizeof m, 2).kind, ppe::HelloRoute::kNotHello);
    m.type = DTI_CTL_HELLO;
    m.magic = 0;
    EXPECT_EQ(ppe::route_hello(&m, sizeof m, 2).kind, ppe::HelloRoute::kNotHello);
}

TEST(SteerOwner, HookForMarsIsTheSameFunction)
{
    uint32_t n = 2;
    for (uint16_t p = 32768; p < 32868; p++) {
        EXPECT_EQ(ppe::flow_owner_hook(kLocal, p, kRemote, 80, &n), dti_flow_owner(kRemote, 80, kLocal, p, 2));
        EXPECT_EQ(ppe::flow_owner6_hook(kLocal6.b, p, kRemote6.b, 80, &n),
                  dti_flow_owner6(kRemote6.b, 80, kLocal6.b, p, 2));
    }
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new EalEnv);
    return RUN_ALL_TESTS();
}
