// benchmarks/mars/fastpath_driver.cc: feeds N in-order data segments into an
// established connection, for benchmarks/mars/fastpath-instructions to count
// instructions with callgrind. Everything but feed_segments() is setup:
// the script collects only inside it (--toggle-collect). Frames are flagged
// kRxIpCsumGood|kRxL4CsumGood (no software checksum) and the port offers
// transmit checksum offload (the ACKs' checksums are the NIC's); the script
// subtracts the payload copy.
//
//   mars_fastpath_driver N [timestamps 0|1] [burst] [coalesce 0|1] [flows F] [loss_every L] [rtx_after K]
// (coalesce: TcpConfig::rx_coalesce, receive coalescing; default 1 as in the stack;
// flows: F connections whose segments arrive interleaved round robin,
// segment i on connection i mod F, as a NIC burst from F busy senders)
// Prints the fast-path hit count so the script can check every segment took it.
//
// Loss mode (loss_every L > 1): segment i with i % L == L / 2 is lost on its
// first way and arrives again rtx_after K segments later (the sender's
// retransmission), so the segments between go through the out-of-order queue
// and its SACK reports; the last ones lost arrive at the end. N still counts
// unique segments (the count is per segment delivered).
#include "bench_conn.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace mars::bench {

// The measured region: frame in, payload queued. Not inlined, so callgrind
// can toggle collection on it.
__attribute__((noinline)) void feed_segments(Stack &st, PacketRef *frames, uint32_t n, uint16_t burst, uint64_t now)
{
    for (uint32_t i = 0; i < n; i += burst) st.input(frames + i, uint16_t(std::min<uint32_t>(burst, n - i)), now);
}

// The order segments arrive in: with loss_every L > 1, segment i with
// i % L == L / 2 comes only rtx_after segments later (or at the end).
std::vector<PacketRef> arrival_order(const std::vector<PacketRef> &frames, uint32_t n, uint32_t loss_every,
                                     uint32_t rtx_after)
{
    if (loss_every < 2) return std::vector<PacketRef>(frames.begin(), frames.begin() + n);
    auto lost = [&](uint32_t i) { return i % loss_every == loss_every / 2; };
    std::vector<PacketRef> order;
    std::vector<uint32_t> waiting; // lost segments, oldest first
    for (uint32_t i = 0; i < n; i++) {
        if (lost(i)) waiting.push_back(i);
        else order.push_back(frames[i]);
        while (!waiting.empty() && waiting.front() + rtx_after <= i) {
            order.push_back(frames[waiting.front()]);
            waiting.erase(waiting.begin());
        }
    }
    for (uint32_t w : waiting) order.push_back(frames[w]);
    return order;
}

} // namespace mars::bench

int main(int argc, char **argv)
{
    using namespace mars;
    using namespace mars::bench;
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s N [timestamps 0|1] [burst] [coalesce 0|1] [flows F]\n", argv[0]);
        return 2;
    }
    const uint32_t n = uint32_t(std::strtoul(argv[1], nullptr, 10));
    const bool ts = argc > 2 && std::atoi(argv[2]) != 0;
    const uint16_t burst = uint16_t(argc > 3 ? std::max(1, std::atoi(argv[3])) : 32);
    const bool coalesce = argc > 4 ? std::atoi(argv[4]) != 0 : true;
    const uint32_t flows = uint32_t(argc > 5 ? std::clamp(std::atoi(argv[5]), 1, 48) : 1);
    const uint32_t loss_every = uint32_t(argc > 6 ? std::max(0, std::atoi(argv[6])) : 0);
    const uint32_t rtx_after = uint32_t(argc > 7 ? std::max(1, std::atoi(argv[7])) : 16);
    const size_t payload = ts ? 1448 : 1460;
    // Each receive ring holds all its connection's segments: nothing is
    // consumed while measuring.
    const uint32_t per_flow = (n + flows - 1) / flows;
    uint32_t ring = 1u << 16;
    while (ring < uint64_t(per_flow + 1) * payload) ring <<= 1;
    // A NIC that verifies received checksums also fills transmitted ones:
    // the ACKs' header checksums are left to it (the count excludes checksums).
    RawPeer::Options opts = bench_options(ring, n + 256, ts);
    opts.offloads = kOffloadRxCsum | kOffloadTxIpCsum | kOffloadTxTcpCsum;
    opts.stack.tcp.rx_coalesce = coalesce;
    opts.ring_slots = 2 * flows + 4;
    RawPeer peer(opts);
    std::vector<RawPeer::Conn> conns;
    const SockId listener = peer.listen(80, 1024);
    for (uint32_t f = 0; f < flows; f++) conns.push_back(establish(peer, ts, uint16_t(40000 + f), listener));
    peer.set_capture(false);
    std::vector<PacketRef> frames(n + 1);
    for (uint32_t f = 0; f < flows; f++) {
        const RawPeer::Conn &c = conns[f];
        const std::vector<uint8_t> tmpl = sim::build_tcp(peer.seg(c, sim::kAck, std::vector<uint8_t>(payload, 0x42)));
        const uint32_t tsval = c.peer_tsval + uint32_t(peer.now / 1'000'000);
        for (uint32_t i = f, k = 0; i < n; i += flows, k++) {
            if (!prepare(peer.pool(), tmpl, c.peer_nxt + uint32_t(k * payload), c.stack_nxt, ts, tsval, true,
                         &frames[i])) {
                std::fprintf(stderr, "frame pool empty\n");
                return 1;
            }
        }
    }
    Stack &st = peer.stack();
    std::vector<PacketRef> order = arrival_order(frames, n, loss_every, rtx_after);
    const StackStats before = st.stats();
    feed_segments(st, order.data(), n, burst, peer.now);
    const StackStats &after = st.stats();
    size_t readable = 0;
    for (const RawPeer::Conn &c : conns) {
        SockInfo in{};
        st.info(c.sock, &in);
        readable += in.rx_readable;
    }
    std::printf("segments %u flows %u fastpath_hits %llu fastpath_misses %llu coalesced %llu in %llu groups readable %zu "
                "expected %zu\n",
                n, flows, (unsigned long long)(after.fastpath_hits - before.fastpath_hits),
                (unsigned long long)(after.fastpath_misses - before.fastpath_misses),
                (unsigned long long)(after.rx_coalesce_segments - before.rx_coalesce_segments),
                (unsigned long long)(after.rx_coalesce_groups - before.rx_coalesce_groups), readable,
                size_t(n) * payload);
    std::printf("payload %zu\n", payload);
    std::printf("loss_every %u rtx_after %u ooo_segments %llu ooo_full_drops %llu acks %llu\n", loss_every, rtx_after,
                (unsigned long long)(after.tcp_ooo_segments - before.tcp_ooo_segments),
                (unsigned long long)(after.drop_tcp_ooo_full - before.drop_tcp_ooo_full),
                (unsigned long long)(after.tx_frames - before.tx_frames));
    return readable == n * payload ? 0 : 1;
}
