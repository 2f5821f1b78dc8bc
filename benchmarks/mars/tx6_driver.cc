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
#include "bench_tx.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

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
    const Ip6Addr ours = addr6(1), them = addr6(2);
    const std::vector<uint8_t> opts = ack_opts(ts, c);
    const uint32_t base = c.stack_isn + 1;
    // The peer's ACK of `acked` bytes, byte by byte, flagged checksum-good.
    return bulk_send(st, peer, c.sock, total, ack_every, [&](uint64_t acked, PacketRef *f) {
        const std::vector<uint8_t> bytes = frame6(peer.stack_mac, peer.peer_mac, them, ours, 6, 64,
                                                  tcp(c.port, c.peer_isn + 1, base + uint32_t(acked), 0x10, opts, 0));
        if (!peer.pool().get(f)) return false;
        std::memcpy(f->data, bytes.data(), bytes.size());
        f->len = uint16_t(bytes.size());
        f->room = 0;
        f->flags = kRxIpCsumGood | kRxL4CsumGood;
        return true;
    });
}
