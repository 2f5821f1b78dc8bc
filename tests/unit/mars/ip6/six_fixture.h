// six_fixture.h: TEST FIXTURE for TCP over IPv6 through a whole stack on
// sim::RawPeer (coalesce6_test, strands6_test): a stack on 2001:2::1 with a
// dual-stack listener on [::]:80 and connections over IPv6 that the test plays
// the peer of, their frames built here byte by byte (the fixture's parser
// reads IPv4 only), the checksum with this file's own RFC 1071 sum.
#pragma once

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
    // registration); else that many, with prefetching when > 1 (prefetch
    // -1) or as prefetch says (0, 1).
    explicit Six(bool coalesce, int conns = 1, bool ts = true, uint32_t strands = 1, int prefetch = -1) : ts_(ts)
    {
        sim::RawPeer::Options o;
        o.stack.addr6[0] = Ip6Prefix{kOurIp, 64};
        o.stack.n_addr6 = 1;
        o.stack.tcp.rx_coalesce = coalesce;
        o.stack.tcp.timestamps = ts;
        if (strands) {
            o.stack.strands = strands;
            o.stack.prefetch = prefetch < 0 ? strands > 1 : prefetch == 1;
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
        if (l < 0 || st.bind6(SockId(l), Endpoint6{Ip6Addr{}, 80}, false) != 0 || st.listen(SockId(l), 64) != 0)
            throw std::runtime_error("listener");
        listener_ = SockId(l);
        for (int i = 0; i < conns; i++) conns_.push_back(open(SockId(l), uint16_t(40000 + i), 1000u * uint32_t(i + 1)));
        p.take_raw();
        p.take_events();
    }
    sim::RawPeer &peer() { return *p_; }
    Stack &stack() { return p_->stack(); }
    // The listener on [::]:80 (dual stack: it takes IPv4 too).
    SockId listener() const { return listener_; }
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
    SockId listener_ = kNoSock;
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

} // namespace
