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
#include "bench_tx.h"

#include <cstdio>
#include <cstdlib>

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
    SockId conn = kNoSock; // establish() accepted it: the one established socket

    st.for_each_socket(
        [](SockId id, const SockInfo &info, uint64_t, void *arg) {
            if (info.state == TcpState::kEstablished) *static_cast<SockId *>(arg) = id;
        },
        &conn);
    if (conn == kNoSock) {
        std::fprintf(stderr, "no connection\n");
        return 1;
    }
    const uint32_t base = c.stack_nxt;
    // The peer's ACK of `acked` bytes (NIC-verified, as the fixture builds it).
    return bulk_send(st, peer, conn, total, ack_every, [&](uint64_t acked, PacketRef *f) {
        c.stack_nxt = base + uint32_t(acked);
        return prepare(peer.pool(), sim::build_tcp(peer.seg(c, sim::kAck)), c.peer_nxt, c.stack_nxt, false, 0, true, f);
    });
}
