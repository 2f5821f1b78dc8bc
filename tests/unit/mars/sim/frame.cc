// tests/unit/mars/sim/frame.cc: TEST FIXTURE. Raw frame builder and parser.
#include "frame.h"

#include <cstdio>
#include <cstring>

namespace mars::sim {

namespace {

void put16(uint8_t *p, uint16_t v)
{
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}
void put32(uint8_t *p, uint32_t v)
{
    p[0] = uint8_t(v >> 24);
    p[1] = uint8_t(v >> 16);
    p[2] = uint8_t(v >> 8);
    p[3] = uint8_t(v);
}
uint16_t get16(const uint8_t *p) { return uint16_t((p[0] << 8) | p[1]); }
uint32_t get32(const uint8_t *p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }

void put_eth(uint8_t *p, const MacAddr &dst, const MacAddr &src, uint16_t type)
{
    std::memcpy(p, dst.b, 6);
    std::memcpy(p + 6, src.b, 6);
    put16(p + 12, type);
}

// Options in wire form, padded with NOPs/EOL to a multiple of four bytes.
std::vector<uint8_t> encode_options(const TcpOptions &o)
{
    std::vector<uint8_t> v;
    if (o.mss) {
        v.insert(v.end(), {2, 4, uint8_t(*o.mss >> 8), uint8_t(*o.mss)});
    }
    if (o.sack_permitted) {
        v.insert(v.end(), {1, 1, 4, 2});
    }
    if (o.ts) {
        uint8_t b[10] = {8, 10};
        put32(b + 2, o.ts->first);
        put32(b + 6, o.ts->second);
        v.insert(v.end(), {1, 1});
        v.insert(v.end(), b, b + 10);
    }
    if (o.wscale) {
        v.insert(v.end(), {1, 3, 3, *o.wscale});
    }
    if (!o.sack.empty()) {
        v.insert(v.end(), {1, 1, 5, uint8_t(2 + 8 * o.sack.size())});
        for (auto [l, r] : o.sack) {
            uint8_t b[8];
            put32(b, l);
            put32(b + 4, r);
            v.insert(v.end(), b, b + 8);
        }
    }
    v.insert(v.end(), o.raw.begin(), o.raw.end());
    while (v.size() % 4) v.push_back(0);
    return v;
}

} // namespace

bool operator==(const MacAddr &a, const MacAddr &b) { return std::memcmp(a.b, b.b, 6) == 0; }

uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t len)
{
    uint64_t s = sum;
    size_t i = 0;
    for (; i + 1 < len; i += 2) s += uint32_t(p[i] << 8 | p[i + 1]);
    if (i < len) s += uint32_t(p[i] << 8);
    while (s >> 32) s = (s & 0xffffffffu) + (s >> 32);
    return uint32_t(s);
}

uint16_t csum_fold(uint32_t sum)
{
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(sum);
}

void fix_ip_checksum(uint8_t *f, size_t len)
{
    if (len < kEthLen + 20) return;
    uint8_t *ip = f + kEthLen;
    size_t ihl = size_t(ip[0] & 0xf) * 4;
    if (ihl < 20 || kEthLen + ihl > len) ihl = 20;
    put16(ip + 10, 0);
    put16(ip + 10, uint16_t(~csum_fold(csum_add(0, ip, ihl))));
}

void fix_l4_checksum(uint8_t *f, size_t len)
{
    if (len < kEthLen + 20) return;
    uint8_t *ip = f + kEthLen;
    if (get16(f + 12) == 0x86dd) {
        // TCP right after the IPv6 header (what MARS sends): over the IPv6
        // pseudo-header (RFC 8200 8.1).
        const size_t l4len = len >= kEthLen + 40 ? get16(ip + 4) : 0;
        if (ip[6] != 6 || l4len < 20 || kEthLen + 40 + l4len > len) return;
        uint8_t *l4 = ip + 40;
        put16(l4 + 16, 0);
        uint32_t s = csum_add(0, ip + 8, 32);
        s += 6u + uint32_t(l4len);
        s = csum_add(s, l4, l4len);
        put16(l4 + 16, uint16_t(~csum_fold(s)));
        return;
    }
    size_t ihl = size_t(ip[0] & 0xf) * 4;
    size_t total = get16(ip + 2);
    if (ihl < 20 || total < ihl || kEthLen + total > len) return;
    uint8_t *l4 = ip + ihl;
    size_t l4len = total - ihl;
    if (ip[9] == 6) {
        if (l4len < 20) return;
        put16(l4 + 16, 0);
        uint8_t pseudo[12];
        std::memcpy(pseudo, ip + 12, 8);
        pseudo[8] = 0;
        pseudo[9] = 6;
        put16(pseudo + 10, uint16_t(l4len));
        uint32_t s = csum_add(0, pseudo, 12);
        s = csum_add(s, l4, l4len);
        put16(l4 + 16, uint16_t(~csum_fold(s)));
    } else if (ip[9] == 1) {
        if (l4len < 8) return;
        put16(l4 + 2, 0);
        put16(l4 + 2, uint16_t(~csum_fold(csum_add(0, l4, l4len))));
    } else if (ip[9] == 17) { // UDP (RFC 768): over its own length field, when that fits
        if (l4len < 8) return;
        const size_t ulen = get16(l4 + 4);
        if (ulen < 8 || ulen > l4len) return;
        put16(l4 + 6, 0);
        uint8_t pseudo[12];
        std::memcpy(pseudo, ip + 12, 8);
        pseudo[8] = 0;
        pseudo[9] = 17;
        put16(pseudo + 10, uint16_t(ulen));
        const uint16_t c = uint16_t(~csum_fold(csum_add(csum_add(0, pseudo, 12), l4, ulen)));
        put16(l4 + 6, c ? c : 0xffff);
    }
}

size_t build_tcp(const TcpSpec &s, uint8_t *buf, size_t room)
{
    std::vector<uint8_t> opts = encode_options(s.opts);
    size_t tcp_len = 20 + opts.size() + s.payload.size();
    size_t len = kEthLen + 20 + tcp_len;
    if (len > room || opts.size() > 40 || 20 + tcp_len > 0xffff) return 0;
    put_eth(buf, s.dst_mac, s.src_mac, kEtherIpv4);
    uint8_t *ip = buf + kEthLen;
    ip[0] = 0x45;
    ip[1] = s.tos;
    put16(ip + 2, uint16_t(20 + tcp_len));
    put16(ip + 4, s.ip_id);
    put16(ip + 6, s.df ? 0x4000 : 0);
    ip[8] = s.ttl;
    ip[9] = 6;
    put32(ip + 12, s.src_ip);
    put32(ip + 16, s.dst_ip);
    uint8_t *t = ip + 20;
    put16(t, s.sport);
    put16(t + 2, s.dport);
    put32(t + 4, s.seq);
    put32(t + 8, s.ack);
    t[12] = uint8_t(((20 + opts.size()) / 4) << 4);
    t[13] = s.flags;
    put16(t + 14, s.window);
    put16(t + 16, 0);
    put16(t + 18, 0);
    if (!opts.empty()) std::memcpy(t + 20, opts.data(), opts.size());
    if (!s.payload.empty()) std::memcpy(t + 20 + opts.size(), s.payload.data(), s.payload.size());
    fix_ip_checksum(buf, len);
    fix_l4_checksum(buf, len);
    return len;
}

std::vector<uint8_t> build_tcp(const TcpSpec &s)
{
    std::vector<uint8_t> v(kEthLen + 60 + 60 + s.payload.size());
    v.resize(build_tcp(s, v.data(), v.size()));
    return v;
}

std::vector<uint8_t> build_arp(const ArpSpec &s)
{
    std::vector<uint8_t> v(kEthLen + 28, 0);
    uint8_t *f = v.data();
    if (f == nullptr) return v;
    put_eth(f, s.eth_dst, s.eth_src, kEtherArp);
    uint8_t *a = f + kEthLen;
    put16(a, 1);      // Ethernet
    put16(a + 2, kEtherIpv4);
    a[4] = 6;
    a[5] = 4;
    put16(a + 6, s.op);
    std::memcpy(a + 8, s.sha.b, 6);
    put32(a + 14, s.spa);
    std::memcpy(a + 18, s.tha.b, 6);
    put32(a + 24, s.tpa);
    return v;
}

std::vector<uint8_t> build_icmp(const IcmpSpec &s)
{
    size_t icmp_len = 8 + s.payload.size();
    std::vector<uint8_t> v(kEthLen + 20 + icmp_len, 0);
    uint8_t *f = v.data();
    if (f == nullptr) return v; // (never: the size is at least 42; keeps GCC's bounds analysis quiet)
    put_eth(f, s.dst_mac, s.src_mac, kEtherIpv4);
    uint8_t *ip = f + kEthLen;
    ip[0] = 0x45;
    put16(ip + 2, uint16_t(20 + icmp_len));
    ip[8] = 64;
    ip[9] = 1;
    put32(ip + 12, s.src_ip);
    put32(ip + 16, s.dst_ip);
    uint8_t *c = ip + 20;
    c[0] = s.type;
    c[1] = s.code;
    put32(c + 4, s.rest);
    if (!s.payload.empty()) std::memcpy(c + 8, s.payload.data(), s.payload.size());
    fix_ip_checksum(v.data(), v.size());
    fix_l4_checksum(v.data(), v.size());
    return v;
}

namespace {

// Parses the TCP option list; false when it is malformed (length 0/1, past
// the end of the header).
bool parse_options(const uint8_t *p, size_t n, TcpOptions *o)
{
    size_t i = 0;
    while (i < n) {
        uint8_t kind = p[i];
        if (kind == 0) break;
        if (kind == 1) {
            i++;
            continue;
        }
        if (i + 1 >= n) return false;
        uint8_t l = p[i + 1];
        if (l < 2 || i + l > n) return false;
        const uint8_t *d = p + i + 2;
        if (kind == 2 && l == 4) o->mss = get16(d);
        else if (kind == 3 && l == 3) o->wscale = d[0];
        else if (kind == 4 && l == 2) o->sack_permitted = true;
        else if (kind == 8 && l == 10) o->ts = {get32(d), get32(d + 4)};
        else if (kind == 5 && l >= 10 && (l - 2) % 8 == 0) {
            for (size_t k = 0; k < size_t(l - 2) / 8; k++) o->sack.push_back({get32(d + 8 * k), get32(d + 8 * k + 4)});
        }
        i += l;
    }
    return true;
}

} // namespace

bool parse_frame(const uint8_t *p, size_t len, Parsed *o)
{
    *o = Parsed{};
    o->len = len;
    if (len < kEthLen) return false;
    std::memcpy(o->eth_dst.b, p, 6);
    std::memcpy(o->eth_src.b, p + 6, 6);
    o->ethertype = get16(p + 12);
    if (o->ethertype == kEtherArp) {
        if (len < kEthLen + 28) return false;
        const uint8_t *a = p + kEthLen;
        o->is_arp = true;
        o->arp_op = get16(a + 6);
        std::memcpy(o->arp_sha.b, a + 8, 6);
        o->arp_spa = get32(a + 14);
        std::memcpy(o->arp_tha.b, a + 18, 6);
        o->arp_tpa = get32(a + 24);
        return true;
    }
    if (o->ethertype != kEtherIpv4 || len < kEthLen + 20) return false;
    const uint8_t *ip = p + kEthLen;
    o->ihl = ip[0] & 0xf;
    o->tos = ip[1];
    o->ip_total = get16(ip + 2);
    o->ip_frag = get16(ip + 6);
    o->ttl = ip[8];
    o->proto = ip[9];
    o->src_ip = get32(ip + 12);
    o->dst_ip = get32(ip + 16);
    size_t ihl = size_t(o->ihl) * 4;
    if ((ip[0] >> 4) != 4 || ihl < 20 || o->ip_total < ihl || kEthLen + o->ip_total > len) return false;
    o->is_ip = true;
    o->ip_csum_ok = csum_fold(csum_add(0, ip, ihl)) == 0xffff;
    const uint8_t *l4 = ip + ihl;
    size_t l4len = o->ip_total - ihl;
    if (o->proto == 1) {
        if (l4len < 8) return false;
        o->is_icmp = true;
        o->icmp_type = l4[0];
        o->icmp_code = l4[1];
        o->payload.assign(l4 + 8, l4 + l4len);
        return true;
    }
    if (o->proto != 6 || l4len < 20) return false;
    size_t doff = size_t(l4[12] >> 4) * 4;
    if (doff < 20 || doff > l4len) return false;
    o->is_tcp = true;
    o->sport = get16(l4);
    o->dport = get16(l4 + 2);
    o->seq = get32(l4 + 4);
    o->ack = get32(l4 + 8);
    o->flags = l4[13];
    o->window = get16(l4 + 14);
    uint8_t pseudo[12];
    std::memcpy(pseudo, ip + 12, 8);
    pseudo[8] = 0;
    pseudo[9] = 6;
    put16(pseudo + 10, uint16_t(l4len));
    o->tcp_csum_ok = csum_fold(csum_add(csum_add(0, pseudo, 12), l4, l4len)) == 0xffff;
    o->opts_ok = parse_options(l4 + 20, doff - 20, &o->opts);
    o->payload.assign(l4 + doff, l4 + l4len);
    return true;
}

std::string flags_str(uint8_t f)
{
    std::string s;
    const char *names[] = {"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"};
    for (int i = 0; i < 8; i++) {
        if (f & (1 << i)) {
            if (!s.empty()) s += '|';
            s += names[i];
        }
    }
    return s.empty() ? "none" : s;
}

std::string Parsed::describe() const
{
    char b[256];
    if (is_arp) {
        std::snprintf(b, sizeof b, "ARP op %u spa %08x tpa %08x", arp_op, arp_spa, arp_tpa);
    } else if (is_tcp) {
        std::snprintf(b, sizeof b, "TCP %u->%u %s seq %u ack %u win %u len %zu%s", sport, dport, flags_str(flags).c_str(),
                      seq, ack, window, payload.size(), tcp_csum_ok && ip_csum_ok ? "" : " BAD-CSUM");
    } else if (is_icmp) {
        std::snprintf(b, sizeof b, "ICMP type %u code %u", icmp_type, icmp_code);
    } else {
        std::snprintf(b, sizeof b, "frame len %zu ethertype %04x", len, ethertype);
    }
    return b;
}

} // namespace mars::sim
