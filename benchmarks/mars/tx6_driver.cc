// benchmarks/mars/tx6_driver.cc: the IPv6 twin of tx_driver.cc, for
// `benchmarks/mars/tx-instructions --ip6`: a bulk send on one established
// TCP connection over IPv6 (bench_conn6.h), collection only inside the
// driver's calls into the stack (the application's commit and poll, each
// ACK's input and the segments they send). Same arguments and output as
// tx_driver.cc; the peer's ACKs are built here byte by byte (flagged
// checksum-good, as the IPv4 driver's are NIC-verified).
//
//   mars_tx6_driver BYTES [timestamps 0|1] [tx_batch 0|1] [ack_every SEGMENTS] [tso 0|1] [zerocopy 0|1] [csum 0|1]
#include "bench_conn6.h"

#include <cstdio>
#include <cstdlib>

namespace mars::bench {

// The measured region (as tx_driver.cc's). Not inlined, so callgrind can
// toggle collection on it.
template <typename F> __attribute__((noinline)) void stack_call(F &&f) { f(); }

} // namespace mars::bench

int main(int argc, char **argv)
{
    using namespace mars;
    using namespace mars::bench;
    using namespace mars::bench::v6;
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
    sim::RawPeer::Options o;
    o.stack.tcp.rcvbuf = o.stack.tcp.sndbuf = 1u << 18; // as tx_driver.cc (bench_options)
    o.pool_frames = 4096;
    o.stack.tcp.timestamps = ts;
    o.stack.tcp.tx_batch = batch;
    o.stack.max_sockets = 64;
    options6(o);
    o.ring_slots = 4;
    o.offloads = kOffloadRxCsum | (csum ? uint32_t(kOffloadTxIpCsum | kOffloadTxTcpCsum) : 0u) |
                 (tso ? uint32_t(kOffloadTxTcpSeg) : 0u) | (zerocopy ? uint32_t(kOffloadTxExternal) : 0u);
    sim::RawPeer peer(o);
    sim::FramePool large(64, 65535);
    if (tso) peer.port().enable_tso(&large, 65535);
    if (zerocopy) {
        peer.port().enable_external(false);
        peer.port().set_external_read(false);
    }
    peer.port().set_offload_emulation(false); // a NIC fills the checksums
    Stack &st = peer.stack();
    Conn6 c;
    if (!establish6(peer, ts, &c)) return 1;
    peer.set_keep_raw(false);
    const SockId conn = c.sock;
    SockInfo si{};
    if (st.info(conn, &si) != 0) {
        std::fprintf(stderr, "no connection\n");
        return 1;
    }
    const Ip6Addr ours = addr6(1), them = addr6(2);
    const std::vector<uint8_t> opts = ack_opts(ts, c);
    const uint32_t base = c.stack_isn + 1;
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
            const std::vector<uint8_t> bytes = frame6(peer.stack_mac, peer.peer_mac, them, ours, 6, 64,
                                                      tcp(c.port, c.peer_isn + 1, base + uint32_t(acked), 0x10, opts, 0));
            PacketRef f;
            if (!peer.pool().get(&f)) {
                std::fprintf(stderr, "frame pool empty\n");
                return 1;
            }
            std::memcpy(f.data, bytes.data(), bytes.size());
            f.len = uint16_t(bytes.size());
            f.room = 0;
            f.flags = kRxIpCsumGood | kRxL4CsumGood;
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
