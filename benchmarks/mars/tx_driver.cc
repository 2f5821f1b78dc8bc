// benchmarks/mars/tx_driver.cc: a bulk send on one established connection,
// for benchmarks/mars/tx-instructions to count the transmit path's
// instructions with callgrind (collection only inside
// mars::StackImpl::tcp_output: the sending policy, segment building, frame
// allocation, the transmission log and timers; not the ACK processing that
// calls it). The port offers checksum offload (the script also subtracts the
// payload copy), and TSO when asked (SimPort's emulation; the port's own
// segmentation is the NIC's work and is not counted: it runs at transmit).
//
// With zerocopy 1 the port takes payload by reference (kOffloadTxExternal,
// SimPort not reading it: a device's DMA is not the engine's work); with
// csum 0 it offers no checksum offload (the lab's net_af_packet), so the
// stack sums the payload itself (fused with the copy on the copying path).
//
//   mars_tx_driver BYTES [timestamps 0|1] [tx_batch 0|1] [ack_every SEGMENTS] [tso 0|1] [zerocopy 0|1] [csum 0|1]
// The application writes BYTES through the send ring; the peer ACKs every
// ack_every segments (0: everything outstanding, once per round), each ACK a
// burst of its own. Prints "payload BYTES" (what was sent), the segments and
// the runs, and fails unless every byte was sent and acknowledged.
#include "bench_conn.h"

#include <cstdio>
#include <cstdlib>

namespace mars::bench {

// The measured region: every call into the stack of the transfer (the
// application's commit, poll, each ACK's input and what they send). Not
// inlined, so callgrind can toggle collection on it.
template <typename F> __attribute__((noinline)) void stack_call(F &&f) { f(); }

} // namespace mars::bench

int main(int argc, char **argv)
{
    using namespace mars;
    using namespace mars::bench;
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s BYTES [timestamps 0|1] [tx_batch 0|1] [ack_every N] [tso 0|1]\n", argv[0]);
        return 2;
    }
    const uint64_t total = std::strtoull(argv[1], nullptr, 10);
    const bool ts = argc > 2 && std::atoi(argv[2]) != 0;
    const bool batch = argc > 3 ? std::atoi(argv[3]) != 0 : true;
    const uint32_t ack_every = argc > 4 ? uint32_t(std::atoi(argv[4])) : 0;
    const bool tso = argc > 5 && std::atoi(argv[5]) != 0;
    const bool zerocopy = argc > 6 && std::atoi(argv[6]) != 0;
    const bool csum = argc > 7 ? std::atoi(argv[7]) != 0 : true;
    RawPeer::Options opts = bench_options(1u << 18, 4096, ts);
    opts.offloads = kOffloadRxCsum | (csum ? uint32_t(kOffloadTxIpCsum | kOffloadTxTcpCsum) : 0u) |
                    (tso ? uint32_t(kOffloadTxTcpSeg) : 0u) | (zerocopy ? uint32_t(kOffloadTxExternal) : 0u);
    opts.stack.tcp.tx_batch = batch;
    RawPeer peer(opts);
    sim::FramePool large(64, 65535);
    if (tso) peer.port().enable_tso(&large, 65535);
    if (zerocopy) {
        peer.port().enable_external(false);
        peer.port().set_external_read(false);
    }
    peer.port().set_offload_emulation(false); // a NIC fills the checksums
    RawPeer::Conn c = establish(peer, ts);
    c.window = 65535; // scaled by 128: 8 MiB, the window never limits
    peer.set_capture(false);
    Stack &st = peer.stack();
    SockInfo si{};
    SockId conn = kNoSock; // establish() accepted it: the one established socket

    st.for_each_socket(
        [](SockId id, const SockInfo &info, uint64_t, void *arg) {
            if (info.state == TcpState::kEstablished) *static_cast<SockId *>(arg) = id;
        },
        &conn);
    if (conn == kNoSock || st.info(conn, &si) != 0) {
        std::fprintf(stderr, "no connection\n");
        return 1;
    }
    const uint32_t base = c.stack_nxt;
    uint64_t written = 0, acked = 0;
    const uint32_t mss = si.snd_mss;
    for (int round = 0; round < 1000000 && acked < total; round++) {
        RingSpan span{};
        if (written < total && st.tx_view(conn, &span) == 0 && span.total() > 0) {
            const uint32_t n = uint32_t(std::min<uint64_t>(span.total(), total - written));
            int rc = 0;
            stack_call([&] {
                rc = st.tx_commit(conn, n, false);
                st.poll(peer.now); // sends what the window allows
            });
            if (rc != 0) return 1;
            written += n;
        }
        st.info(conn, &si);
        // The peer acknowledges what arrived, ack_every segments at a time,
        // each ACK a burst of its own (built outside the measured region).
        while (acked < si.bytes_out) {
            const uint64_t sent = si.bytes_out;
            const uint64_t step = ack_every ? std::min<uint64_t>(sent - acked, uint64_t(ack_every) * mss) : sent - acked;
            acked += step;
            c.stack_nxt = base + uint32_t(acked);
            PacketRef f;
            if (!prepare(peer.pool(), sim::build_tcp(peer.seg(c, sim::kAck)), c.peer_nxt, c.stack_nxt, false, 0, true,
                         &f)) {
                std::fprintf(stderr, "frame pool empty\n");
                return 1;
            }
            stack_call([&] { st.input(&f, 1, peer.now); });
            st.info(conn, &si);
        }
        peer.now += 1'000'000;
        stack_call([&] { st.poll(peer.now); });
    }
    const StackStats &stats = st.stats();
    std::printf("payload %llu\nsegments %llu\nrun segments %llu in %llu runs, %llu TSO frames, %llu by reference\n",
                static_cast<unsigned long long>(acked), static_cast<unsigned long long>(si.segs_out),
                static_cast<unsigned long long>(stats.tx_run_segments), static_cast<unsigned long long>(stats.tx_runs),
                static_cast<unsigned long long>(stats.tx_tso_frames),
                static_cast<unsigned long long>(stats.tx_ref_frames));
    if (acked != total || si.total_retransmits != 0) {
        std::fprintf(stderr, "sent %llu of %llu bytes, %llu retransmissions\n", static_cast<unsigned long long>(acked),
                     static_cast<unsigned long long>(total), static_cast<unsigned long long>(si.total_retransmits));
        return 1;
    }
    return 0;
}
