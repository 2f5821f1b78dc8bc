// benchmarks/mars/rtx_driver.cc: loss recovery of consecutive lost segments
// on one established connection, for benchmarks/mars/rtx-instructions to
// count the instructions per retransmitted segment with callgrind
// (collection only inside recover(): the peer's ACKs and the timer that
// make the stack retransmit, and the retransmissions; the warm-up and the
// first transmission are not counted). The port offers checksum offload.
//
//   mars_rtx_driver SEGMENTS LOST [sack 0|1] [tx_batch 0|1] [rounds R] [tso 0|1]
// Each round the application writes SEGMENTS full segments, which leave at
// once (the warm-up opened cwnd); the first LOST of them are lost. With SACK
// the peer SACKs the rest in one ACK: RACK marks the LOST lost, recovery
// resends them (within PRR's budget), the peer then acknowledges all.
// Without SACK nothing comes back until the retransmission timeout, whose
// go-back-N resends from the first lost segment in slow start; the peer
// acknowledges everything once the hole is filled. Prints "retransmitted N"
// and fails unless every byte was acknowledged. tso: the port also offers
// TCP segmentation offload (the fixture's emulation cuts the frames; new
// data and retransmission runs leave as TSO frames).
#include "bench_conn.h"

#include <cstdio>
#include <cstdlib>

namespace mars::bench {

// The measured region. Not inlined, so callgrind can toggle collection on it.
template <typename F> __attribute__((noinline)) void recover(F &&f) { f(); }

} // namespace mars::bench

int main(int argc, char **argv)
{
    using namespace mars;
    using namespace mars::bench;
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s SEGMENTS LOST [sack 0|1] [tx_batch 0|1] [rounds R]\n", argv[0]);
        return 2;
    }
    const uint32_t segments = uint32_t(std::strtoul(argv[1], nullptr, 10));
    const uint32_t lost = uint32_t(std::strtoul(argv[2], nullptr, 10));
    const bool sack = argc > 3 ? std::atoi(argv[3]) != 0 : true;
    const bool batch = argc > 4 ? std::atoi(argv[4]) != 0 : true;
    const int rounds = argc > 5 ? std::max(1, std::atoi(argv[5])) : 10;
    const bool tso = argc > 6 && std::atoi(argv[6]) != 0;
    if (segments < 2 || lost == 0 || lost >= segments || segments > 400) {
        std::fprintf(stderr, "need 0 < LOST < SEGMENTS <= 400\n");
        return 2;
    }
    RawPeer::Options opts = bench_options(1u << 20, 4096, false);
    opts.offloads = kOffloadRxCsum | kOffloadTxIpCsum | kOffloadTxTcpCsum | (tso ? uint32_t(kOffloadTxTcpSeg) : 0u);
    opts.stack.tcp.tx_batch = batch;
    RawPeer peer(opts);
    sim::FramePool large(64, 65535);
    if (tso) peer.port().enable_tso(&large, 65535);
    peer.port().set_offload_emulation(false); // a NIC fills the checksums
    SockId l = peer.listen(80, 16);
    RawPeer::Conn c;
    sim::TcpOptions syn = syn_options(false);
    syn.sack_permitted = sack;
    std::string why;
    const SockId s = peer.open_passive(l, 80, 40000, &c, syn, &why);
    if (s == kNoSock) {
        std::fprintf(stderr, "handshake failed: %s\n", why.c_str());
        return 1;
    }
    c.window = 65535; // scaled by 128: 8 MiB
    peer.take();
    peer.set_capture(false);
    Stack &st = peer.stack();
    SockInfo si{};
    st.info(s, &si);
    const uint32_t mss = si.snd_mss;
    const uint32_t base = c.stack_nxt;
    uint64_t written = 0;
    auto ack = [&](uint64_t upto, uint64_t sack_from, uint64_t sack_to) {
        c.stack_nxt = base + uint32_t(upto);
        sim::TcpSpec a = peer.seg(c, sim::kAck);
        if (sack_to > sack_from) a.opts.sack.emplace_back(base + uint32_t(sack_from), base + uint32_t(sack_to));
        PacketRef f;
        if (!prepare(peer.pool(), sim::build_tcp(a), c.peer_nxt, c.stack_nxt, false, 0, true, &f)) return false;
        // prepare() set the ACK number; the SACK option came from the spec.
        st.input(&f, 1, peer.now);
        return true;
    };
    auto write = [&](uint64_t n) {
        std::vector<uint8_t> data(size_t(n), 0x6b);
        const int64_t sent = st.send(s, data.data(), data.size());
        if (sent != int64_t(n)) {
            std::fprintf(stderr, "send took %lld of %llu\n", (long long)sent, (unsigned long long)n);
            return false;
        }
        written += n;
        st.poll(peer.now);
        return true;
    };
    uint64_t rtx = 0;
    for (int round = 0; round < rounds; round++) {
        // Warm-up: cwnd grows past SEGMENTS again (every byte acknowledged
        // at once), and nothing is left unsent or unacknowledged.
        for (int i = 0; i < 200; i++) {
            st.info(s, &si);
            if (si.tx_unacked == 0 && si.bytes_out == written && si.cwnd >= uint64_t(segments + 1) * mss) break;
            if (si.bytes_out == written && si.tx_unacked == 0 && !write(uint64_t(segments) * mss)) return 1;
            peer.now += 1'000'000;
            st.info(s, &si);
            if (!ack(si.bytes_out, 0, 0)) return 1;
            st.poll(peer.now);
        }
        const uint64_t start = written;
        if (!write(uint64_t(segments) * mss)) {
            std::fprintf(stderr, "write failed\n");
            return 1;
        }
        st.info(s, &si);
        if (si.bytes_out != written) {
            std::fprintf(stderr, "round %d: only %llu of %llu bytes left at once\n", round,
                         (unsigned long long)si.bytes_out, (unsigned long long)written);
            return 1;
        }
        const uint64_t before = si.total_retransmits;
        const uint64_t hole_end = start + uint64_t(lost) * mss;
        bool ok = true;
        recover([&] {
            peer.now += 1'000'000;
            if (sack) {
                ok = ack(start, hole_end, written);     // the rest SACKed: RACK finds the hole lost
                peer.now += 1'000'000;
                st.poll(peer.now);                      // RACK's timer, PRR's sending
            } else {
                peer.now += 1'500'000'000;              // past the RTO: go-back-N
                st.poll(peer.now);
            }
            // The peer acknowledges what the retransmissions filled, until all.
            for (int i = 0; ok && i < 64; i++) {
                SockInfo x{};
                st.info(s, &x);
                if (x.tx_unacked == 0) break;
                const uint64_t resent_to = start + (x.total_retransmits - before) * mss;
                peer.now += 1'000'000;
                ok = ack(resent_to >= hole_end ? written : resent_to, sack ? hole_end : 0, sack ? written : 0);
                st.poll(peer.now);
            }
        });
        st.info(s, &si);
        if (!ok || si.tx_unacked != 0) {
            std::fprintf(stderr, "round %d: not every byte acknowledged\n", round);
            return 1;
        }
        rtx += si.total_retransmits - before;
        peer.now += 1'000'000;
    }
    const StackStats &stats = st.stats();
    std::printf("retransmitted %llu\nrun segments %llu in %llu runs, %llu TSO frames\n", (unsigned long long)rtx,
                (unsigned long long)stats.tx_run_segments, (unsigned long long)stats.tx_runs,
                (unsigned long long)stats.tx_tso_frames);
    return rtx > 0 ? 0 : 1;
}
