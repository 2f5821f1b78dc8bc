// benchmarks/mars/fastpath6_driver.cc: the IPv6 twin of fastpath_driver.cc,
// for `benchmarks/mars/fastpath-instructions --ip6`: N in-order data segments
// into an established TCP connection over IPv6, counted with callgrind inside
// feed_segments() only. The connection is made by hand over a sim::RawPeer
// (DAD run, the peer's solicitation teaching its MAC, SYN, the SYN-ACK read
// back, ACK), frames built here byte by byte; they are flagged
// kRxL4CsumGood (no checksum, as the IPv4 driver's) and the port offers
// transmit checksum offload. Receive coalescing (rx_coalesce6.cc) as
// TcpConfig::rx_coalesce says (on by default; coalesce 0: one by one).
//
// flows F: F connections (ports 40000..), segment i on connection i mod F,
// as the IPv4 driver's --flows.
//
//   mars_fastpath6_driver N [timestamps 0|1] [burst] [coalesce 0|1] [flows]
// Prints the fast-path hit count, "payload P", and fails unless every byte
// was queued.
#include "raw_peer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace mars::bench {

namespace {

void put16(uint8_t *p, uint16_t v)
{
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}
void put32(uint8_t *p, uint32_t v)
{
    put16(p, uint16_t(v >> 16));
    put16(p + 2, uint16_t(v));
}
uint32_t get32(const uint8_t *p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// 2001:2::host (RFC 5180).
Ip6Addr addr6(uint8_t host)
{
    Ip6Addr a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[3] = 0x02, a.b[15] = host;
    return a;
}

// An Ethernet frame around an IPv6 packet (next header, hop limit) whose
// payload is l4; checksums are not filled (frames go in flagged verified,
// but for the solicitation, which ND checks: ICMPv6 sum below).
std::vector<uint8_t> frame6(const MacAddr &dst, const MacAddr &src, const Ip6Addr &sip, const Ip6Addr &dip, uint8_t next,
                            uint8_t hop, const std::vector<uint8_t> &l4)
{
    std::vector<uint8_t> f(14 + 40);
    std::memcpy(&f[0], dst.b, 6);
    std::memcpy(&f[6], src.b, 6);
    put16(&f[12], 0x86dd);
    put32(&f[14], 0x60000000u);
    put16(&f[18], uint16_t(l4.size()));
    f[20] = next;
    f[21] = hop;
    std::memcpy(&f[22], sip.b, 16);
    std::memcpy(&f[38], dip.b, 16);
    f.insert(f.end(), l4.begin(), l4.end());
    return f;
}

// RFC 1071 over the IPv6 pseudo-header and msg (for the solicitation).
uint16_t csum6(const Ip6Addr &s, const Ip6Addr &d, uint8_t next, const std::vector<uint8_t> &msg)
{
    std::vector<uint8_t> b(s.b, s.b + 16);
    b.insert(b.end(), d.b, d.b + 16);
    b.insert(b.end(), {uint8_t(msg.size() >> 24), uint8_t(msg.size() >> 16), uint8_t(msg.size() >> 8),
                       uint8_t(msg.size()), 0, 0, 0, next});
    b.insert(b.end(), msg.begin(), msg.end());
    if (b.size() & 1) b.push_back(0);
    uint32_t sum = 0;
    for (size_t i = 0; i < b.size(); i += 2) sum += uint32_t(b[i]) << 8 | b[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}

// A TCP header (ports sport -> 80) with options, then payload bytes.
std::vector<uint8_t> tcp(uint16_t sport, uint32_t seq, uint32_t ack, uint8_t flags, const std::vector<uint8_t> &opts,
                         size_t payload)
{
    std::vector<uint8_t> t(20);
    put16(&t[0], sport);
    put16(&t[2], 80);
    put32(&t[4], seq);
    put32(&t[8], ack);
    t[12] = uint8_t(((20 + opts.size()) / 4) << 4);
    t[13] = flags;
    put16(&t[14], 65535);
    t.insert(t.end(), opts.begin(), opts.end());
    t.insert(t.end(), payload, 0x42);
    return t;
}

std::vector<uint8_t> ts_opt(uint32_t val, uint32_t ecr)
{
    std::vector<uint8_t> o{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0};
    put32(&o[4], val);
    put32(&o[8], ecr);
    return o;
}

// The measured region: frame in, payload queued. Not inlined, so callgrind
// can toggle collection on it.
__attribute__((noinline)) void feed_segments(Stack &st, PacketRef *frames, uint32_t n, uint16_t burst, uint64_t now)
{
    for (uint32_t i = 0; i < n; i += burst) st.input(frames + i, uint16_t(std::min<uint32_t>(burst, n - i)), now);
}

} // namespace

} // namespace mars::bench

int main(int argc, char **argv)
{
    using namespace mars;
    using namespace mars::bench;
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s N [timestamps 0|1] [burst] [coalesce 0|1]\n", argv[0]);
        return 2;
    }
    const uint32_t n = uint32_t(std::strtoul(argv[1], nullptr, 10));
    const bool ts = argc > 2 && std::atoi(argv[2]) != 0;
    const uint16_t burst = uint16_t(argc > 3 ? std::max(1, std::atoi(argv[3])) : 32);
    const bool coalesce = argc <= 4 || std::atoi(argv[4]) != 0;
    const uint32_t flows = uint32_t(argc > 5 ? std::max(1, std::atoi(argv[5])) : 1);
    const size_t payload = ts ? 1428 : 1440; // MSS over IPv6: 1500 - 60 (less 12 for timestamps)
    uint32_t ring = 1u << 16;
    while (ring < uint64_t(n / flows + 1) * payload) ring <<= 1;
    const Ip6Addr ours = addr6(1), peer = addr6(2);

    sim::RawPeer::Options o;
    o.stack.tcp.rcvbuf = o.stack.tcp.sndbuf = ring;
    o.stack.tcp.timestamps = ts;
    o.stack.tcp.rx_coalesce = coalesce;
    o.stack.max_sockets = 64;
    o.stack.addr6[0] = Ip6Prefix{ours, 64};
    o.stack.n_addr6 = 1;
    o.ring_slots = flows + 4;
    o.pool_frames = n + 256;
    o.offloads = kOffloadRxCsum | kOffloadTxIpCsum | kOffloadTxTcpCsum;
    o.keep_raw = true;
    o.capture = false; // the fixture parses IPv4 only
    sim::RawPeer p(o);
    Stack &st = p.stack();
    // DAD, then the peer's solicitation (its MAC learnt).
    st.announce(p.now);
    p.advance(1'000'000'000);
    {
        Ip6Addr sn{};
        sn.b[0] = 0xff, sn.b[1] = 0x02, sn.b[11] = 1, sn.b[12] = 0xff;
        std::memcpy(sn.b + 13, ours.b + 13, 3);
        std::vector<uint8_t> m{135, 0, 0, 0, 0, 0, 0, 0};
        m.insert(m.end(), ours.b, ours.b + 16);
        m.insert(m.end(), {1, 1});
        m.insert(m.end(), p.peer_mac.b, p.peer_mac.b + 6);
        put16(&m[2], csum6(peer, sn, 58, m));
        const MacAddr mmac{{0x33, 0x33, 0xff, ours.b[13], ours.b[14], ours.b[15]}};
        p.inject(frame6(mmac, p.peer_mac, peer, sn, 58, 255, m));
    }
    const int64_t l = st.open(1);
    if (l < 0 || st.bind6(SockId(l), Endpoint6{Ip6Addr{}, 80}, false) != 0 || st.listen(SockId(l), 16) != 0) {
        std::fprintf(stderr, "listener failed\n");
        return 1;
    }
    p.take_raw();
    const uint32_t peer_isn = 1000, tsval = 5000;
    std::vector<uint8_t> syn_opts{2, 4, 0x05, 0xa0, 4, 2, 1, 3, 3, 7}; // MSS 1440, SACK permitted, WS 7
    if (ts) {
        const std::vector<uint8_t> t = ts_opt(tsval, 0);
        syn_opts.insert(syn_opts.end(), t.begin(), t.end());
    }
    while (syn_opts.size() % 4) syn_opts.push_back(1);
    struct Flow {
        uint16_t port;
        uint32_t stack_isn, stack_ts;
        int64_t sock;
    };
    std::vector<Flow> conns;
    for (uint32_t k = 0; k < flows; k++) {
        Flow c{uint16_t(40000 + k), 0, 0, -1};
        p.inject(frame6(p.stack_mac, p.peer_mac, peer, ours, 6, 64, tcp(c.port, peer_isn, 0, 0x02, syn_opts, 0)),
                 kRxL4CsumGood);
        bool got = false;
        for (auto &f : p.take_raw()) {
            if (f.size() < 74 || f[12] != 0x86 || f[13] != 0xdd || f[20] != 6 || f[67] != 0x12 ||
                (uint32_t(f[56]) << 8 | f[57]) != c.port)
                continue;
            c.stack_isn = get32(&f[58]);
            const unsigned doff = (f[66] >> 4) * 4u;
            for (unsigned i = 74; i + 1 < 54 + doff && f[i] != 0;) {
                if (f[i] == 1) {
                    i++;
                    continue;
                }
                if (f[i] == 8 && i + 10 <= 54 + doff) c.stack_ts = get32(&f[i + 2]);
                i += std::max<unsigned>(2, f[i + 1]);
            }
            got = true;
        }
        if (!got) {
            std::fprintf(stderr, "no SYN-ACK over IPv6\n");
            return 1;
        }
        const std::vector<uint8_t> ack_opts = ts ? ts_opt(tsval + 1, c.stack_ts) : std::vector<uint8_t>{};
        p.inject(frame6(p.stack_mac, p.peer_mac, peer, ours, 6, 64,
                        tcp(c.port, peer_isn + 1, c.stack_isn + 1, 0x10, ack_opts, 0)),
                 kRxL4CsumGood);
        c.sock = st.accept(SockId(l), 2);
        if (c.sock < 0) {
            std::fprintf(stderr, "handshake failed\n");
            return 1;
        }
        conns.push_back(c);
    }
    p.take_raw();
    p.set_keep_raw(false);
    std::vector<PacketRef> frames(n);
    for (uint32_t i = 0; i < n; i++) {
        const Flow &c = conns[i % flows];
        const std::vector<uint8_t> data_opts = ts ? ts_opt(tsval + 1, c.stack_ts) : std::vector<uint8_t>{};
        const std::vector<uint8_t> f =
            frame6(p.stack_mac, p.peer_mac, peer, ours, 6, 64,
                   tcp(c.port, peer_isn + 1 + uint32_t(i / flows * payload), c.stack_isn + 1, 0x10, data_opts, payload));
        if (!p.pool().get(&frames[i])) {
            std::fprintf(stderr, "frame pool empty\n");
            return 1;
        }
        std::memcpy(frames[i].data, f.data(), f.size());
        frames[i].len = uint16_t(f.size());
        frames[i].room = 0;
        frames[i].flags = kRxIpCsumGood | kRxL4CsumGood;
    }
    const StackStats before = st.stats();
    feed_segments(st, frames.data(), n, burst, p.now);
    const StackStats &after = st.stats();
    uint64_t readable = 0;
    for (const Flow &c : conns) {
        SockInfo in{};
        st.info(SockId(c.sock), &in);
        readable += in.rx_readable;
    }
    std::printf("segments %u fastpath_hits %llu fastpath_misses %llu coalesced %llu in %llu groups readable %u expected %zu\n", n,
                (unsigned long long)(after.fastpath_hits - before.fastpath_hits),
                (unsigned long long)(after.fastpath_misses - before.fastpath_misses),
                (unsigned long long)(after.rx_coalesce_segments - before.rx_coalesce_segments),
                (unsigned long long)(after.rx_coalesce_groups - before.rx_coalesce_groups), unsigned(readable),
                size_t(n) * payload);
    std::printf("payload %zu\n", payload);
    return readable == uint64_t(n) * payload ? 0 : 1;
}
