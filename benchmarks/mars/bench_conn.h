// benchmarks/mars/bench_conn.h: helpers shared by the mars benchmarks and the
// callgrind driver: an established connection on a RawPeer (test fixture from
// tests/unit/mars/sim) and segment frames prepared outside the timed region.
#pragma once

#include "frame.h"
#include "raw_peer.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace mars::bench {

using sim::RawPeer;

inline RawPeer::Options bench_options(uint32_t rcvbuf, uint32_t pool_frames, bool timestamps)
{
    RawPeer::Options o;
    o.stack.tcp.rcvbuf = rcvbuf;
    o.stack.tcp.sndbuf = rcvbuf;
    o.stack.tcp.timestamps = timestamps;
    o.stack.max_sockets = 64;
    o.ring_slots = 4;
    o.pool_frames = pool_frames;
    return o;
}

inline sim::TcpOptions syn_options(bool timestamps)
{
    sim::TcpOptions o = RawPeer::full_syn_options(0);
    if (!timestamps) o.ts.reset();
    return o;
}

// A passively opened connection (on listener l, else on a new listener on
// port 80); throws if the handshake fails.
inline RawPeer::Conn establish(RawPeer &peer, bool timestamps, uint16_t peer_port = 40000, SockId l = kNoSock)
{
    if (l == kNoSock) l = peer.listen(80, 1024);
    RawPeer::Conn c;
    std::string why;
    if (peer.open_passive(l, 80, peer_port, &c, syn_options(timestamps), &why) == kNoSock)
        throw std::runtime_error("handshake failed: " + why);
    c.window = 65535;
    peer.take();
    return c;
}

// Offsets in a frame built by sim::build_tcp (IHL 5).
constexpr size_t kTcpOff = sim::kEthLen + 20;

inline void set_be32(uint8_t *p, uint32_t v)
{
    p[0] = uint8_t(v >> 24);
    p[1] = uint8_t(v >> 16);
    p[2] = uint8_t(v >> 8);
    p[3] = uint8_t(v);
}

// Copies a template segment into a pool frame, with a new sequence number
// (and TSval when the template carries NOP,NOP,TS first). Checksums are
// recomputed unless the frame is flagged as NIC-verified.
inline bool prepare(sim::FramePool &pool, const std::vector<uint8_t> &tmpl, uint32_t seq, uint32_t ack, bool has_ts,
                    uint32_t tsval, bool csum_good, PacketRef *out)
{
    if (!pool.get(out)) return false;
    std::memcpy(out->data, tmpl.data(), tmpl.size());
    out->len = uint16_t(tmpl.size());
    out->room = 0;
    set_be32(out->data + kTcpOff + 4, seq);
    set_be32(out->data + kTcpOff + 8, ack);
    if (has_ts) set_be32(out->data + kTcpOff + 24, tsval);
    if (csum_good) {
        out->flags = kRxIpCsumGood | kRxL4CsumGood;
    } else {
        out->flags = 0;
        sim::fix_l4_checksum(out->data, out->len);
    }
    return true;
}

// The same for a frame of another flow than the template's: the peer's
// address and port are set too; flagged NIC-verified (no checksum to redo).
inline bool prepare_flow(sim::FramePool &pool, const std::vector<uint8_t> &tmpl, uint32_t peer_ip, uint16_t peer_port,
                         uint32_t seq, uint32_t ack, PacketRef *out)
{
    if (!prepare(pool, tmpl, seq, ack, false, 0, true, out)) return false;
    set_be32(out->data + sim::kEthLen + 12, peer_ip);
    out->data[kTcpOff] = uint8_t(peer_port >> 8);
    out->data[kTcpOff + 1] = uint8_t(peer_port);
    return true;
}

} // namespace mars::bench
