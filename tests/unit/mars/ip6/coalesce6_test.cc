// Receive coalescing over IPv6 (mars/src/rx/rx_coalesce6.cc, issue 31) and
// LRO frames over IPv6: which segments of a burst are taken as one group
// (never across a gap, a flag other than ACK/PSH, a header change, a bad
// checksum or another connection's frame), that the application gets the
// bytes and the peer the frames (ACKs, SACK blocks, windows, timestamps) it
// gets with coalescing off, and that a segment longer than the MSS (a port's
// super-frame) is taken on the fast path and acknowledged as the segments it
// stands for. The frames are built here byte by byte, the checksum with this
// file's own RFC 1071 sum.
#include "ip6_fixture.h"
#include "raw_peer.h"

#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

using namespace mars;
using namespace mars::test;

constexpr uint32_t kNicChecked = kRxIpCsumGood | kRxL4CsumGood;

void put16(uint8_t *p, uint16_t v)
{
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}
void put32(uint8_t *p, uint32_t v)
{
    put16(p, uint16_t(v >> 16));
    put16(p + 2, uint16_t(v));
}
uint32_t get32(const uint8_t *p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
uint16_t get16(const uint8_t *p) { return uint16_t(p[0] << 8 | p[1]); }

// RFC 1071 over the IPv6 pseudo-header (RFC 8200 8.1) and the segment.
uint16_t ref_csum6(const Ip6Addr &src, const Ip6Addr &dst, const std::vector<uint8_t> &seg)
{
    uint64_t sum = 0;
    auto add = [&](const uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i += 2) sum += uint32_t(p[i]) << 8 | (i + 1 < n ? p[i + 1] : 0);
    };
    add(src.b, 16);
    add(dst.b, 16);
    sum += seg.size() + 6;
    add(seg.data(), seg.size());
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}

std::vector<uint8_t> eth6(const MacAddr &dst, const MacAddr &src, const std::vector<uint8_t> &packet)
{
    std::vector<uint8_t> f(wire::kEthLen + packet.size());
    std::memcpy(f.data(), dst.b, 6);
    std::memcpy(f.data() + 6, src.b, 6);
    f[12] = 0x86;
    f[13] = 0xdd;
    std::memcpy(f.data() + wire::kEthLen, packet.data(), packet.size());
    return f;
}

std::vector<uint8_t> pattern(uint32_t conn, uint32_t k, size_t n)
{
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i++) v[i] = uint8_t(conn * 37 + k * 11 + i + (i >> 8));
    return v;
}

// The TCP segment a test sends, before its checksum: header fields to edit.
struct Seg {
    uint16_t sport, dport = 80;
    uint32_t seq, ack;
    uint8_t flags = wire::kAck;
    uint16_t win = 4096;
    std::vector<uint8_t> opts;
    std::vector<uint8_t> payload;
    uint8_t hop = 64;
    uint8_t tclass = 0;
    bool corrupt = false; // a payload bit flipped after the checksum
};

// One stack with an IPv6 address and a few connections over IPv6 that the
// test plays the peer of (passive opens on [::]:80 from ports 40000+i).
class Six {
  public:
    struct Conn {
        SockId sock = kNoSock;
        uint16_t port = 0;
        uint32_t peer_nxt = 0, stack_nxt = 0;
        uint32_t tsval = 0, tsecr = 0;
    };

    // strands 0: the pipeline from the environment (the _strands
    // registration); else that many, with prefetching when > 1.
    explicit Six(bool coalesce, int conns = 1, bool ts = true, uint32_t strands = 1) : ts_(ts)
    {
        sim::RawPeer::Options o;
        o.stack.addr6[0] = Ip6Prefix{kOurIp, 64};
        o.stack.n_addr6 = 1;
        o.stack.tcp.rx_coalesce = coalesce;
        o.stack.tcp.timestamps = ts;
        if (strands) {
            o.stack.strands = strands;
            o.stack.prefetch = strands > 1;
        }
        o.keep_raw = true;
        p_ = std::make_unique<sim::RawPeer>(o);
        sim::RawPeer &p = *p_;
        p.stack().announce(p.now);
        p.advance(kSec);
        const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
        p.inject(eth6(ip6::multicast_mac(sn.b), p.peer_mac,
                      packet6(kPeerIp, sn, wire::kProtoIcmp6,
                              icmp6(kPeerIp, sn, wire::kNdNeighborSolicit, 0, 0,
                                    nd_body(kOurIp, wire::kNdOptSourceLla, p.peer_mac)),
                              255)));
        p.take_raw();
        Stack &st = p.stack();
        const int64_t l = st.open(1);
        if (l < 0 || st.bind6(SockId(l), Endpoint6{Ip6Addr{}, 80}, false) != 0 || st.listen(SockId(l), 16) != 0)
            throw std::runtime_error("listener");
        for (int i = 0; i < conns; i++) conns_.push_back(open(SockId(l), uint16_t(40000 + i), 1000u * uint32_t(i + 1)));
        p.take_raw();
        p.take_events();
    }
    sim::RawPeer &peer() { return *p_; }
    Stack &stack() { return p_->stack(); }
    Conn &conn(int i) { return conns_[size_t(i)]; }
    const StackStats &stats() { return p_->stack().stats(); }

    // A segment of connection i at its next sequence number (advanced).
    Seg seg(int i, uint32_t k, size_t n, uint8_t flags = wire::kAck)
    {
        Conn &c = conn(i);
        Seg s;
        s.sport = c.port;
        s.seq = c.peer_nxt;
        s.ack = c.stack_nxt;
        s.flags = flags;
        if (ts_) s.opts = ts_opt(c.tsval, c.tsecr);
        s.payload = pattern(uint32_t(i), k, n);
        c.peer_nxt += uint32_t(n) + ((flags & wire::kFin) ? 1 : 0);
        return s;
    }
    std::vector<uint8_t> frame(const Seg &s)
    {
        std::vector<uint8_t> t(20);
        put16(&t[0], s.sport);
        put16(&t[2], s.dport);
        put32(&t[4], s.seq);
        put32(&t[8], s.ack);
        t[12] = uint8_t(((20 + s.opts.size()) / 4) << 4);
        t[13] = s.flags;
        put16(&t[14], s.win);
        t.insert(t.end(), s.opts.begin(), s.opts.end());
        t.insert(t.end(), s.payload.begin(), s.payload.end());
        put16(&t[16], ref_csum6(kPeerIp, kOurIp, t));
        if (s.corrupt) t[t.size() - 1] ^= 0x10;
        std::vector<uint8_t> ip = packet6(kPeerIp, kOurIp, wire::kProtoTcp, t, s.hop);
        ip[0] = uint8_t(0x60 | s.tclass >> 4);
        ip[1] = uint8_t(s.tclass << 4 | (ip[1] & 0x0f));
        return eth6(p_->stack_mac, p_->peer_mac, ip);
    }
    std::vector<uint8_t> data(int i, uint32_t k, size_t n, uint8_t flags = wire::kAck,
                              const std::function<void(Seg &)> &edit = nullptr)
    {
        Seg s = seg(i, k, n, flags);
        if (edit) edit(s);
        return frame(s);
    }
    void burst(const std::vector<std::vector<uint8_t>> &frames, uint32_t flags) { p_->input_burst(frames, flags); }

    // The TCP frames the stack sent, one line each, per connection.
    std::map<uint16_t, std::vector<std::string>> sent()
    {
        std::map<uint16_t, std::vector<std::string>> out;
        for (const auto &f : p_->take_raw()) {
            if (f.size() < 74 || f[12] != 0x86 || f[13] != 0xdd || f[20] != wire::kProtoTcp) continue;
            const uint8_t *t = f.data() + 54;
            const unsigned doff = (t[12] >> 4) * 4u;
            std::ostringstream o;
            o << "seq " << get32(t + 4) << " ack " << get32(t + 8) << " flags " << int(t[13]) << " win "
              << get16(t + 14) << " len " << f.size() - 54 - doff << " opts";
            for (unsigned j = 20; j < doff; j++) o << " " << int(t[j]);
            out[get16(t + 2)].push_back(o.str());
        }
        return out;
    }
    // Every ACK number the stack sent to connection i.
    std::vector<uint32_t> acks(int i)
    {
        std::vector<uint32_t> a;
        const std::vector<std::string> lines = sent()[conn(i).port];
        for (const std::string &line : lines) a.push_back(uint32_t(std::stoul(line.substr(line.find("ack ") + 4))));
        return a;
    }
    std::string read(int i)
    {
        std::string got(1 << 20, '\0');
        const int64_t n = stack().recv(conn(i).sock, got.data(), got.size());
        got.resize(n > 0 ? size_t(n) : 0);
        return got;
    }

    // Everything observable: frames sent and events per connection, the
    // bytes read, the counters coalescing must leave unchanged.
    std::string outcome()
    {
        p_->poll();
        std::ostringstream o;
        for (const auto &[port, lines] : sent())
            for (const std::string &l : lines) o << port << ": " << l << "\n";
        std::map<SockId, uint32_t> ev = p_->take_events();
        for (const auto &[sock, bits] : ev) o << "event " << sock << " " << bits << "\n";
        for (int i = 0; i < int(conns_.size()); i++) {
            const std::string got = read(i);
            o << "conn " << i << " read " << got.size() << " hash " << std::hash<std::string>{}(got) << "\n";
            SockInfo si{};
            stack().info(conn(i).sock, &si);
            o << "  state " << int(si.state) << " segs_in " << si.segs_in << " bytes_in " << si.bytes_in << " rcv_wnd "
              << si.rcv_wnd << " ooo " << si.ooo_frames << "\n";
        }
        const StackStats &s = stats();
        o << "fastpath " << s.fastpath_hits << "/" << s.fastpath_misses << " csum " << s.drop_tcp_csum << " ooo "
          << s.tcp_ooo_segments << " dsack " << s.tcp_dsacks_sent << " ip6_in " << s.ip6_in << " rx " << s.rx_frames
          << "/" << s.rx_bytes << " tx " << s.tx_frames << "\n";
        return o.str();
    }

  private:
    static std::vector<uint8_t> ts_opt(uint32_t val, uint32_t ecr)
    {
        std::vector<uint8_t> o{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0};
        put32(&o[4], val);
        put32(&o[8], ecr);
        return o;
    }
    Conn open(SockId l, uint16_t port, uint32_t isn)
    {
        sim::RawPeer &p = *p_;
        Conn c;
        c.port = port;
        c.tsval = 5000 + port;
        Seg syn;
        syn.sport = port;
        syn.seq = isn;
        syn.ack = 0;
        syn.flags = wire::kSyn;
        syn.win = 65535;
        syn.opts = {2, 4, 0x05, 0xa0, 4, 2, 1, 3, 3, 7}; // MSS 1440, SACK permitted, WS 7
        if (ts_) {
            const std::vector<uint8_t> t = ts_opt(c.tsval, 0);
            syn.opts.insert(syn.opts.end(), t.begin(), t.end());
        }
        while (syn.opts.size() % 4) syn.opts.push_back(1);
        p.input_only({frame(syn)}, 0);
        p.poll();
        bool got = false;
        for (const auto &f : p.take_raw()) {
            if (f.size() < 74 || f[12] != 0x86 || f[13] != 0xdd || f[20] != 6 || f[67] != (wire::kSyn | wire::kAck) ||
                get16(&f[56]) != port)
                continue;
            c.stack_nxt = get32(&f[58]) + 1;
            const unsigned doff = (f[66] >> 4) * 4u;
            for (unsigned j = 74; j < 54 + doff && f[j] != 0;) {
                if (f[j] == 1) {
                    j++;
                    continue;
                }
                if (f[j] == 8) c.tsecr = get32(&f[j + 2]);
                j += std::max<unsigned>(2, f[j + 1]);
            }
            got = true;
        }
        if (!got) throw std::runtime_error("no SYN-ACK over IPv6");
        c.peer_nxt = isn + 1;
        Seg ack;
        ack.sport = port;
        ack.seq = c.peer_nxt;
        ack.ack = c.stack_nxt;
        if (ts_) ack.opts = ts_opt(c.tsval, c.tsecr);
        p.input_only({frame(ack)}, 0);
        p.poll();
        const int64_t a = p.stack().accept(l, 2);
        if (a < 0) throw std::runtime_error("accept");
        c.sock = SockId(a);
        return c;
    }

    bool ts_;
    std::unique_ptr<sim::RawPeer> p_;
    std::vector<Conn> conns_;
};

std::string bytes_of(Six &, int i, std::initializer_list<uint32_t> ks, size_t n)
{
    std::string s;
    for (uint32_t k : ks) {
        const std::vector<uint8_t> v = pattern(uint32_t(i), k, n);
        s.append(v.begin(), v.end());
    }
    return s;
}

// ---- what merges -------------------------------------------------------------

TEST(Coalesce6, InOrderSegmentsAreOneGroupAndOneAck)
{
    for (const uint32_t flags : {kNicChecked, 0u}) { // vouched for, and summed in the copy
        for (const bool ts : {true, false}) {
            SCOPED_TRACE(std::string(flags ? "NIC-checked" : "summed") + (ts ? ", timestamps" : ", no options"));
            Six b(true, 1, ts);
            const StackStats before = b.stats();
            std::vector<std::vector<uint8_t>> burst;
            for (uint32_t k = 0; k < 16; k++) burst.push_back(b.data(0, k, 1000));
            b.burst(burst, flags);
            b.peer().poll();
            EXPECT_EQ(b.stats().rx_coalesce_groups - before.rx_coalesce_groups, 1u);
            EXPECT_EQ(b.stats().rx_coalesce_segments - before.rx_coalesce_segments, 16u);
            EXPECT_EQ(b.stats().fastpath_hits - before.fastpath_hits, 16u);
            EXPECT_EQ(b.stats().ip6_in - before.ip6_in, 16u);
            EXPECT_EQ(b.stats().drop_tcp_csum, 0u);
            const std::vector<uint32_t> acks = b.acks(0);
            ASSERT_EQ(acks.size(), 1u) << "one ACK for the burst";
            EXPECT_EQ(acks[0], b.conn(0).peer_nxt);
            EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 1000));
        }
    }
}

TEST(Coalesce6, FlagsEndOrBreakGroups)
{
    // PSH may end a group: 0 1(PSH) | 2 3.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100), b.data(0, 1, 100, wire::kAck | wire::kPsh), b.data(0, 2, 100), b.data(0, 3, 100)},
                kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 4u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2, 3}, 100));
    }
    // A PSH never starts one: 0(PSH) | 1 2.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100, wire::kAck | wire::kPsh), b.data(0, 1, 100), b.data(0, 2, 100)}, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    }
    // URG in the middle: nothing merges around it.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100), b.data(0, 1, 100, wire::kAck | wire::kUrg), b.data(0, 2, 100)}, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 0u);
    }
    // FIN: the segments before it are a group, the FIN is taken alone.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100), b.data(0, 1, 100), b.data(0, 2, 100, wire::kAck | wire::kFin)}, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2}, 100));
        SockInfo si{};
        b.stack().info(b.conn(0).sock, &si);
        EXPECT_TRUE(si.peer_closed);
    }
}

TEST(Coalesce6, NeverAcrossAGap)
{
    Six b(true);
    std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 500), b.data(0, 1, 500)};
    b.conn(0).peer_nxt += 500; // segment 2 is missing
    burst.push_back(b.data(0, 3, 500));
    burst.push_back(b.data(0, 4, 500));
    b.burst(burst, kNicChecked);
    b.peer().poll();
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 2u) << "only the two before the gap";
    EXPECT_EQ(b.stats().tcp_ooo_segments, 2u);
    const std::vector<std::string> lines = b.sent()[b.conn(0).port];
    ASSERT_FALSE(lines.empty());
    std::ostringstream want;
    want << "ack " << b.conn(0).peer_nxt - 1500 << " ";
    EXPECT_NE(lines.back().find(want.str()), std::string::npos) << lines.back();
    EXPECT_NE(lines.back().find(" 5 10 "), std::string::npos) << "a SACK block: " << lines.back();
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 500));
}

TEST(Coalesce6, BadChecksumEndsTheGroupAndIsDropped)
{
    Six b(true);
    std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 700), b.data(0, 1, 700),
                                            b.data(0, 2, 700, wire::kAck, [](Seg &s) { s.corrupt = true; }),
                                            b.data(0, 3, 700), b.data(0, 4, 700)};
    b.burst(burst, 0); // no verdict: summed in the copy
    b.peer().poll();
    EXPECT_EQ(b.stats().drop_tcp_csum, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    EXPECT_EQ(b.stats().tcp_ooo_segments, 2u) << "3 and 4 wait behind the dropped one";
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 700));
    // Its retransmission fills the gap.
    b.conn(0).peer_nxt -= 3 * 700;
    b.burst({b.data(0, 2, 700)}, 0);
    b.conn(0).peer_nxt += 2 * 700;
    b.peer().poll();
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {2, 3, 4}, 700));
    EXPECT_EQ(b.acks(0).back(), b.conn(0).peer_nxt);
}

TEST(Coalesce6, InterleavedConnectionsAreGathered)
{
    // A A B B A A: three groups (a frame the next continues is taken with
    // it at once, no look further: as IPv4's).
    {
        Six b(true, 2);
        b.burst({b.data(0, 0, 300), b.data(0, 1, 300), b.data(1, 0, 300), b.data(1, 1, 300), b.data(0, 2, 300),
                 b.data(0, 3, 300)},
                kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 3u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 6u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2, 3}, 300));
        EXPECT_EQ(b.read(1), bytes_of(b, 1, {0, 1}, 300));
    }
    // A B C A B C A B C: three groups of three (round robin).
    {
        Six b(true, 3);
        std::vector<std::vector<uint8_t>> f;
        for (uint32_t k = 0; k < 3; k++)
            for (int i = 0; i < 3; i++) f.push_back(b.data(i, k, 300));
        b.burst(f, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 3u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 9u);
        EXPECT_EQ(b.stats().fastpath_hits, 9u);
        for (int i = 0; i < 3; i++) EXPECT_EQ(b.read(i), bytes_of(b, i, {0, 1, 2}, 300));
    }
    // An ICMPv6 message between (it may concern the connection: packet too
    // big) ends the look: A B ICMPv6 A B gathers nothing past it.
    {
        Six b(true, 2);
        std::vector<std::vector<uint8_t>> f{b.data(0, 0, 300), b.data(1, 0, 300)};
        f.push_back(eth6(b.peer().stack_mac, b.peer().peer_mac,
                         packet6(kPeerIp, kOurIp, wire::kProtoIcmp6,
                                 icmp6(kPeerIp, kOurIp, 128, 0, 0x12340001, std::vector<uint8_t>(8, 1)))));
        f.push_back(b.data(0, 1, 300));
        f.push_back(b.data(1, 1, 300));
        b.burst(f, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 0u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 300));
        EXPECT_EQ(b.read(1), bytes_of(b, 1, {0, 1}, 300));
    }
}

TEST(Coalesce6, HeaderChangesBreakTheRun)
{
    // Segment 0 as sent, then 1 and 2 with the change: 0 never joins them;
    // 1 and 2 are a group of their own when the fast path takes such a
    // segment, none when it does not (an older TSval fails PAWS' look, a
    // SACK option is not the fast path's layout).
    struct Edit {
        const char *what;
        std::function<void(Seg &)> edit;
        uint64_t group_of_the_changed; // 2: they merge with each other, 0: not
    };
    const std::vector<Edit> edits{
        {"window", [](Seg &s) { s.win = 4000; }, 2},
        {"hop limit", [](Seg &s) { s.hop = 63; }, 2},
        {"traffic class (ECN CE)", [](Seg &s) { s.tclass = 3; }, 2},
        {"TSecr", [](Seg &s) { s.opts[11] ^= 1; }, 2},
        {"older TSval", [](Seg &s) { s.opts[7] -= 1; }, 0},
        {"a SACK option", [](Seg &s) { s.opts = {1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2}; }, 0},
    };
    for (const Edit &e : edits) {
        SCOPED_TRACE(e.what);
        Six b(true);
        b.burst({b.data(0, 0, 200), b.data(0, 1, 200, wire::kAck, e.edit), b.data(0, 2, 200, wire::kAck, e.edit)},
                kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_segments, e.group_of_the_changed);
        b.peer().poll();
        // Whatever the full rules make of the change, segment 0's bytes are there.
        EXPECT_EQ(b.read(0).substr(0, 200), bytes_of(b, 0, {0}, 200));
    }
}

// ---- the same outcome as one by one -------------------------------------------

// Bursts mixing in-order data, a gap, a duplicate, reordering, a bad
// checksum, PSH, two connections and a FIN: with coalescing on, the peer
// gets the same frames and the application the same bytes as with it off.
std::string mixed_run(bool coalesce, uint32_t flags, uint32_t strands)
{
    Six b(coalesce, 2, true, strands);
    std::ostringstream o;
    auto step = [&](const std::vector<std::vector<uint8_t>> &frames) {
        b.burst(frames, flags);
        o << b.outcome();
    };
    std::vector<std::vector<uint8_t>> f;
    for (uint32_t k = 0; k < 8; k++) f.push_back(b.data(0, k, 1000));
    for (uint32_t k = 0; k < 3; k++) f.push_back(b.data(1, k, 600));
    f.push_back(b.data(0, 8, 1000, wire::kAck | wire::kPsh));
    f.push_back(b.data(0, 9, 1000));
    step(f);
    // A gap, then what follows it, then the missing one and a duplicate.
    f.clear();
    Six::Conn &c = b.conn(0);
    const uint32_t gap = c.peer_nxt;
    c.peer_nxt += 1000;
    for (uint32_t k = 11; k < 15; k++) f.push_back(b.data(0, k, 1000));
    step(f);
    f.clear();
    const uint32_t end = c.peer_nxt;
    c.peer_nxt = gap;
    f.push_back(b.data(0, 10, 1000));
    c.peer_nxt = gap;
    f.push_back(b.data(0, 10, 1000));
    c.peer_nxt = end;
    for (uint32_t k = 15; k < 19; k++) f.push_back(b.data(0, k, 1000));
    step(f);
    // A corrupted segment inside a run (dropped where no NIC vouches), then the rest.
    f.clear();
    for (uint32_t k = 19; k < 25; k++)
        f.push_back(b.data(0, k, 1000, wire::kAck, [&](Seg &s) { s.corrupt = k == 21; }));
    for (uint32_t k = 3; k < 9; k++) f.push_back(b.data(1, k, 600));
    step(f);
    // The two connections interleaved (gathered), one of them with a gap.
    f.clear();
    for (uint32_t k = 0; k < 6; k++) {
        f.push_back(b.data(0, 25 + k, 1000));
        if (k == 3) b.conn(1).peer_nxt += 600; // conn 1's segment 12 is missing
        f.push_back(b.data(1, 9 + k, 600));
    }
    step(f);
    f.clear();
    const uint32_t end1 = b.conn(1).peer_nxt;
    b.conn(1).peer_nxt -= 4 * 600; // the gap
    f.push_back(b.data(1, 12, 600));
    b.conn(1).peer_nxt = end1;
    step(f);
    // The FIN after data.
    f.clear();
    f.push_back(b.data(1, 9, 600));
    f.push_back(b.data(1, 10, 600, wire::kAck | wire::kFin));
    step(f);
    return o.str();
}

TEST(Coalesce6, SameOutcomeAsOneByOne)
{
    for (const uint32_t flags : {kNicChecked, 0u}) {
        SCOPED_TRACE(flags ? "NIC-checked" : "summed in the copy");
        const std::string on = mixed_run(true, flags, 0), off = mixed_run(false, flags, 0);
        EXPECT_EQ(on, off);
    }
}

TEST(Coalesce6, SameOutcomeThroughStrands)
{
    const std::string on = mixed_run(true, 0, 8), off = mixed_run(false, 0, 1);
    EXPECT_EQ(on, off);
}

// ---- LRO frames over IPv6 -------------------------------------------------------

// A port's super-frame (a GRO'd skb, the vnet port's GSO_TCPV6 frame): one
// segment of 20 MSS (1,428 bytes with timestamps) is taken on the fast path
// (express over IPv6), acknowledged at the burst's end as the 20 segments it
// stands for would be (not after the delayed-ACK timer), byte exact; two in
// one burst are one group; without the port's verdict it is summed, and a
// bad one dropped.
TEST(Lro6, SuperFrameTakenOnTheFastPathAndAckedAtOnce)
{
    for (const bool coalesce : {true, false}) {
        SCOPED_TRACE(coalesce ? "coalescing" : "one by one");
        Six b(coalesce);
        // Past quick-ACK mode (at most 16 ACKs at once at the start), where
        // a lone full segment waits for the delayed-ACK timer.
        for (uint32_t k = 0; k < 20; k++) {
            b.burst({b.data(0, 1000 + k, 1428)}, kNicChecked);
            b.peer().poll();
            b.read(0);
        }
        b.peer().poll();
        b.sent();
        const StackStats before = b.stats();
        b.burst({b.data(0, 0, 20 * 1428)}, kNicChecked);
        b.peer().poll(); // the burst's end: no time passes
        EXPECT_EQ(b.stats().fastpath_hits - before.fastpath_hits, 1u);
        EXPECT_EQ(b.stats().fastpath_misses - before.fastpath_misses, 0u);
        const std::vector<uint32_t> acks = b.acks(0);
        ASSERT_FALSE(acks.empty()) << "a frame of 20 segments waited for the delayed-ACK timer";
        EXPECT_EQ(acks.back(), b.conn(0).peer_nxt);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0}, 20 * 1428));
    }
}

TEST(Lro6, TwoSuperFramesAreOneGroup)
{
    Six b(true);
    b.burst({b.data(0, 0, 20 * 1428), b.data(0, 1, 20 * 1428)}, kNicChecked);
    b.peer().poll();
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    const std::vector<uint32_t> acks = b.acks(0);
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back(), b.conn(0).peer_nxt);
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 20 * 1428));
}

TEST(Lro6, NotVouchedIsSummedAndABadOneDropped)
{
    for (const bool coalesce : {true, false}) {
        SCOPED_TRACE(coalesce ? "coalescing" : "one by one");
        Six b(coalesce);
        b.burst({b.data(0, 0, 40 * 1428), b.data(0, 1, 40 * 1428, wire::kAck, [](Seg &s) { s.corrupt = true; })}, 0);
        b.peer().poll();
        EXPECT_EQ(b.stats().drop_tcp_csum, 1u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0}, 40 * 1428));
        EXPECT_EQ(b.acks(0).back(), b.conn(0).peer_nxt - 40 * 1428);
    }
}

} // namespace
