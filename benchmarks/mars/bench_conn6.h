// benchmarks/mars/bench_conn6.h: established TCP connections over IPv6 for
// the callgrind drivers fastpath6_driver.cc and tx6_driver.cc: made by hand
// over a sim::RawPeer (DAD run, the peer's solicitation teaching its MAC, a
// listener on [::]:80, then per connection SYN, the SYN-ACK read back, ACK),
// frames built here byte by byte (the fixture's parser reads IPv4 only).
// The peer is 2001:2::2 (port 40000, or the one asked for), the stack
// 2001:2::1 port 80; the peer's SYN offers MSS 1440, SACK, window scale 7
// and (ts) timestamps.
#pragma once

#include "raw_peer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace mars::bench {

namespace v6 {

inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}
inline void put32(uint8_t *p, uint32_t v)
{
    put16(p, uint16_t(v >> 16));
    put16(p + 2, uint16_t(v));
}
inline uint32_t get32(const uint8_t *p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// 2001:2::host (RFC 5180).
inline Ip6Addr addr6(uint8_t host)
{
    Ip6Addr a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[3] = 0x02, a.b[15] = host;
    return a;
}

// An Ethernet frame around an IPv6 packet (next header, hop limit) whose
// payload is l4; checksums are not filled (frames go in flagged verified,
// but for the solicitation, which ND checks: ICMPv6 sum below).
inline std::vector<uint8_t> frame6(const MacAddr &dst, const MacAddr &src, const Ip6Addr &sip, const Ip6Addr &dip, uint8_t next,
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
inline uint16_t csum6(const Ip6Addr &s, const Ip6Addr &d, uint8_t next, const std::vector<uint8_t> &msg)
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
inline std::vector<uint8_t> tcp(uint16_t sport, uint32_t seq, uint32_t ack, uint8_t flags,
                                 const std::vector<uint8_t> &opts, size_t payload)
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

inline std::vector<uint8_t> ts_opt(uint32_t val, uint32_t ecr)
{
    std::vector<uint8_t> o{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0};
    put32(&o[4], val);
    put32(&o[8], ecr);
    return o;
}

// What connect_one6() leaves: the accepted socket and the numbers the
// driver's frames need.
struct Conn6 {
    SockId sock = kNoSock;
    uint16_t port = 40000; // the peer's
    uint32_t peer_isn = 1000, tsval = 5000, stack_isn = 0, stack_ts = 0;
};

// The options of the peer's segments after the SYN.
inline std::vector<uint8_t> ack_opts(bool ts, const Conn6 &c)
{
    return ts ? ts_opt(c.tsval + 1, c.stack_ts) : std::vector<uint8_t>{};
}

// The stack's options for one IPv6 connection of the drivers: our address.
inline void options6(sim::RawPeer::Options &o)
{
    o.stack.addr6[0] = Ip6Prefix{addr6(1), 64};
    o.stack.n_addr6 = 1;
    o.keep_raw = true;
    o.capture = false; // the fixture parses IPv4 only
}

// A neighbour solicitation from peer (one of the peer's addresses) for our
// address: the stack learns that address's MAC (the peer's) from it.
inline void teach6(sim::RawPeer &p, const Ip6Addr &peer)
{
    const Ip6Addr ours = addr6(1);
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

// DAD, the peer's solicitation (its MAC learnt) and the listener on
// [::]:80: its id, or -1 (and a word on stderr).
inline int64_t listen6(sim::RawPeer &p, int backlog = 16)
{
    Stack &st = p.stack();
    st.announce(p.now);
    p.advance(1'000'000'000);
    teach6(p, addr6(2));
    const int64_t l = st.open(1);
    if (l < 0 || st.bind6(SockId(l), Endpoint6{Ip6Addr{}, 80}, false) != 0 || st.listen(SockId(l), backlog) != 0) {
        std::fprintf(stderr, "listener failed\n");
        return -1;
    }
    p.take_raw();
    return l;
}

// One connection from the peer's port (on peer, 2001:2::2 unless said) to
// listener l: false (and a word on stderr) when the handshake did not
// complete.
inline bool connect_one6(sim::RawPeer &p, int64_t l, bool ts, uint16_t port, Conn6 *out, const Ip6Addr &peer = addr6(2))
{
    Stack &st = p.stack();
    const Ip6Addr ours = addr6(1);
    Conn6 c;
    c.port = port;
    std::vector<uint8_t> syn_opts{2, 4, 0x05, 0xa0, 4, 2, 1, 3, 3, 7}; // MSS 1440, SACK permitted, WS 7
    if (ts) {
        const std::vector<uint8_t> t = ts_opt(c.tsval, 0);
        syn_opts.insert(syn_opts.end(), t.begin(), t.end());
    }
    while (syn_opts.size() % 4) syn_opts.push_back(1);
    p.inject(frame6(p.stack_mac, p.peer_mac, peer, ours, 6, 64, tcp(port, c.peer_isn, 0, 0x02, syn_opts, 0)),
             kRxL4CsumGood);
    bool got = false;
    for (auto &f : p.take_raw()) {
        if (f.size() < 74 || f[12] != 0x86 || f[13] != 0xdd || f[20] != 6 || f[67] != 0x12 ||
            (uint32_t(f[56]) << 8 | f[57]) != port)
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
        return false;
    }
    p.inject(frame6(p.stack_mac, p.peer_mac, peer, ours, 6, 64,
                    tcp(port, c.peer_isn + 1, c.stack_isn + 1, 0x10, ack_opts(ts, c), 0)),
             kRxL4CsumGood);
    const int64_t s = st.accept(SockId(l), 2);
    if (s < 0) {
        std::fprintf(stderr, "handshake failed\n");
        return false;
    }
    c.sock = SockId(s);
    *out = c;
    return true;
}

// The listener and one connection from port 40000 (tx6_driver.cc's).
inline bool establish6(sim::RawPeer &p, bool ts, Conn6 *out)
{
    const int64_t l = listen6(p);
    if (l < 0 || !connect_one6(p, l, ts, 40000, out)) return false;
    p.take_raw();
    return true;
}

} // namespace v6
} // namespace mars::bench
