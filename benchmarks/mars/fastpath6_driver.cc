// benchmarks/mars/fastpath6_driver.cc: the IPv6 twin of fastpath_driver.cc,
// for `benchmarks/mars/fastpath-instructions --ip6`: N in-order data segments
// into an established TCP connection over IPv6, counted with callgrind inside
// feed_segments() only. The connections are made by hand over a sim::RawPeer
// (bench_conn6.h: DAD run, the peer's solicitation teaching its MAC, SYN,
// the SYN-ACK read back, ACK), frames built byte by byte; they are flagged
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
#include "bench_conn6.h"
#include "raw_peer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace mars::bench {

namespace {

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
    const Ip6Addr ours = v6::addr6(1), peer = v6::addr6(2);

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
    const int64_t l = v6::listen6(p);
    if (l < 0) return 1;
    std::vector<v6::Conn6> conns(flows);
    for (uint32_t k = 0; k < flows; k++)
        if (!v6::connect_one6(p, l, ts, uint16_t(40000 + k), &conns[k])) return 1;
    p.take_raw();
    p.set_keep_raw(false);
    std::vector<PacketRef> frames(n);
    for (uint32_t i = 0; i < n; i++) {
        const v6::Conn6 &c = conns[i % flows];
        const std::vector<uint8_t> f = v6::frame6(
            p.stack_mac, p.peer_mac, peer, ours, 6, 64,
            v6::tcp(c.port, c.peer_isn + 1 + uint32_t(i / flows * payload), c.stack_isn + 1, 0x10, v6::ack_opts(ts, c),
                    payload));
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
    for (const v6::Conn6 &c : conns) {
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
