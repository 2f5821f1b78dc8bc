// benchmarks/mars/bench_tx.h: the bulk send that tx_driver.cc (IPv4) and
// tx6_driver.cc (IPv6) count for benchmarks/mars/tx-instructions, once for
// both families: the application writes through the send ring, the peer
// acknowledges every ack_every segments (0: everything outstanding, once per
// round), each ACK a burst of its own. Collection only inside stack_call
// (the tx-instructions script toggles on its name).
#pragma once

#include "raw_peer.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace mars::bench {

// The measured region: every call into the stack of the transfer (the
// application's commit, poll, each ACK's input and what they send). Not
// inlined, so callgrind can toggle collection on it.
template <typename F> __attribute__((noinline)) void stack_call(F &&f) { f(); }

// Sends total bytes on conn and prints "payload", the segments and the runs;
// ack(acked, &f) builds the peer's ACK of the first `acked` bytes into f
// (outside the measured region; false: the frame pool is empty). Returns the
// driver's exit status: 0 when every byte was sent and acknowledged without
// a retransmission.
template <typename Ack> int bulk_send(Stack &st, sim::RawPeer &peer, SockId conn, uint64_t total, uint32_t ack_every, Ack &&ack)
{
    SockInfo si{};
    if (st.info(conn, &si) != 0) {
        std::fprintf(stderr, "no connection\n");
        return 1;
    }
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
        while (acked < si.bytes_out) {
            const uint64_t sent = si.bytes_out;
            const uint64_t step = ack_every ? std::min<uint64_t>(sent - acked, uint64_t(ack_every) * mss) : sent - acked;
            acked += step;
            PacketRef f;
            if (!ack(acked, &f)) {
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

} // namespace mars::bench
