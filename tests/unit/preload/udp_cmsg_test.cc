// UDP's ancillary data in the shim (preload/src/udp_cmsg.c, issue 31): the
// control messages of a received datagram as Linux's put_cmsg lays them out
// (order, lengths, CMSG_SPACE steps, truncation and MSG_CTRUNC), and the
// control messages of a send read as Linux's ip_cmsg_send reads them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <cstring>
#include <gtest/gtest.h>
#include <vector>

extern "C" {
#include "udp_cmsg.h"
}

namespace {

eta_udp_rx_meta meta()
{
    eta_udp_rx_meta m{};
    m.real_ns = 1'700'000'123'456'789'012ull;
    m.dst_ip = 0xc6120001;   // 198.18.0.1
    m.spec_dst = 0xc6120001;
    m.ifindex = 7;
    m.tos = 0xb8;
    m.ttl = 63;
    return m;
}

// Walks what was written with the libc's CMSG macros, as a program does.
struct Parsed {
    std::vector<cmsghdr> hdrs;
    std::vector<std::vector<uint8_t>> data;
};

Parsed parse(uint8_t *buf, size_t len)
{
    msghdr mh{};
    mh.msg_control = buf;
    mh.msg_controllen = len;
    Parsed p;
    for (cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        p.hdrs.push_back(*c);
        const uint8_t *d = CMSG_DATA(c);
        p.data.emplace_back(d, d + (c->cmsg_len - CMSG_LEN(0)));
    }
    return p;
}

TEST(UdpCmsg, AllOfThemInLinuxOrder)
{
    uint8_t buf[ETA_UDP_CMSG_MAX];
    int mf = 0;
    const auto m = meta();
    size_t n = eta_udp_put_cmsgs(buf, sizeof buf, ETA_RX_TSNS | ETA_RX_PKTINFO | ETA_RX_TTL | ETA_RX_TOS, &m, &mf);
    EXPECT_EQ(mf, 0);
    // Linux: the timestamp (sock_recv_cmsgs), then ip_cmsg_recv's PKTINFO, TTL, TOS.
    EXPECT_EQ(n, CMSG_SPACE(sizeof(timespec)) + CMSG_SPACE(sizeof(in_pktinfo)) + CMSG_SPACE(sizeof(int)) +
                     CMSG_SPACE(1));
    auto p = parse(buf, n);
    ASSERT_EQ(p.hdrs.size(), 4u);
    EXPECT_EQ(p.hdrs[0].cmsg_level, SOL_SOCKET);
    EXPECT_EQ(p.hdrs[0].cmsg_type, SCM_TIMESTAMPNS);
    timespec ts;
    ASSERT_EQ(p.data[0].size(), sizeof ts);
    memcpy(&ts, p.data[0].data(), sizeof ts);
    EXPECT_EQ(ts.tv_sec, 1'700'000'123);
    EXPECT_EQ(ts.tv_nsec, 456'789'012);
    EXPECT_EQ(p.hdrs[1].cmsg_level, IPPROTO_IP);
    EXPECT_EQ(p.hdrs[1].cmsg_type, IP_PKTINFO);
    in_pktinfo pi;
    ASSERT_EQ(p.data[1].size(), sizeof pi);
    memcpy(&pi, p.data[1].data(), sizeof pi);
    EXPECT_EQ(pi.ipi_ifindex, 7);
    EXPECT_EQ(ntohl(pi.ipi_addr.s_addr), 0xc6120001u);
    EXPECT_EQ(ntohl(pi.ipi_spec_dst.s_addr), 0xc6120001u);
    EXPECT_EQ(p.hdrs[2].cmsg_type, IP_TTL);
    int ttl;
    ASSERT_EQ(p.data[2].size(), sizeof ttl);
    memcpy(&ttl, p.data[2].data(), sizeof ttl);
    EXPECT_EQ(ttl, 63);
    EXPECT_EQ(p.hdrs[3].cmsg_type, IP_TOS);
    ASSERT_EQ(p.data[3].size(), 1u);
    EXPECT_EQ(p.data[3][0], 0xb8);
}

// Merged datagrams (UDP_GRO): their segment size as an int at SOL_UDP, after
// the timestamp and before IP_PKTINFO (udp_recvmsg: udp_cmsg_recv before
// ip_cmsg_recv_offset); none for a single datagram.
TEST(UdpCmsg, GroSegmentSizeAfterTheTimestamp)
{
    uint8_t buf[ETA_UDP_CMSG_MAX];
    int mf = 0;
    auto m = meta();
    m.gro_size = 1200;
    size_t n = eta_udp_put_cmsgs(buf, sizeof buf, ETA_RX_TSNS | ETA_RX_PKTINFO | ETA_RX_GRO, &m, &mf);
    auto p = parse(buf, n);
    ASSERT_EQ(p.hdrs.size(), 3u);
    EXPECT_EQ(p.hdrs[0].cmsg_type, SCM_TIMESTAMPNS);
    EXPECT_EQ(p.hdrs[1].cmsg_level, SOL_UDP);
    EXPECT_EQ(p.hdrs[1].cmsg_type, UDP_GRO);
    int g = 0;
    ASSERT_EQ(p.data[1].size(), sizeof g);
    memcpy(&g, p.data[1].data(), sizeof g);
    EXPECT_EQ(g, 1200);
    EXPECT_EQ(p.hdrs[2].cmsg_type, IP_PKTINFO);
    m.gro_size = 0;
    n = eta_udp_put_cmsgs(buf, sizeof buf, ETA_RX_GRO, &m, &mf);
    EXPECT_EQ(n, 0u) << "one datagram: no UDP_GRO message, as Linux";
}

TEST(UdpCmsg, TimevalForSoTimestamp)
{
    uint8_t buf[64];
    int mf = 0;
    const auto m = meta();
    size_t n = eta_udp_put_cmsgs(buf, sizeof buf, ETA_RX_TS, &m, &mf);
    ASSERT_EQ(n, CMSG_SPACE(sizeof(timeval)));
    auto p = parse(buf, n);
    ASSERT_EQ(p.hdrs.size(), 1u);
    EXPECT_EQ(p.hdrs[0].cmsg_type, SCM_TIMESTAMP);
    timeval tv;
    memcpy(&tv, p.data[0].data(), sizeof tv);
    EXPECT_EQ(tv.tv_sec, 1'700'000'123);
    EXPECT_EQ(tv.tv_usec, 456'789);
    // The time64 variant: its own type, the same 16 bytes on LP64.
    n = eta_udp_put_cmsgs(buf, sizeof buf, ETA_RX_TS | ETA_RX_TS_NEW, &m, &mf);
    EXPECT_EQ(parse(buf, n).hdrs.at(0).cmsg_type, 63 /* SO_TIMESTAMP_NEW */);
}

TEST(UdpCmsg, NothingAskedNothingWritten)
{
    uint8_t buf[64];
    int mf = 0;
    const auto m = meta();
    EXPECT_EQ(eta_udp_put_cmsgs(buf, sizeof buf, 0, &m, &mf), 0u);
    EXPECT_EQ(mf, 0);
}

// put_cmsg: a message whose header fits but not its data is cut (cmsg_len
// what fits), MSG_CTRUNC; no room for a header: left out, MSG_CTRUNC; the
// program's msg_controllen comes back as the bytes used.
TEST(UdpCmsg, TooSmallIsTruncatedAndFlagged)
{
    const auto m = meta();
    uint8_t buf[ETA_UDP_CMSG_MAX];
    int mf = 0;
    // room for the timestamp and half of the pktinfo
    const size_t cap = CMSG_SPACE(sizeof(timespec)) + CMSG_LEN(4);
    size_t n = eta_udp_put_cmsgs(buf, cap, ETA_RX_TSNS | ETA_RX_PKTINFO, &m, &mf);
    EXPECT_EQ(mf, MSG_CTRUNC);
    EXPECT_EQ(n, cap);
    cmsghdr second;
    memcpy(&second, buf + CMSG_SPACE(sizeof(timespec)), sizeof second);
    EXPECT_EQ(second.cmsg_len, CMSG_LEN(4));
    EXPECT_EQ(second.cmsg_type, IP_PKTINFO);

    mf = 0; // smaller than a header: nothing, flagged
    EXPECT_EQ(eta_udp_put_cmsgs(buf, sizeof(cmsghdr) - 1, ETA_RX_PKTINFO, &m, &mf), 0u);
    EXPECT_EQ(mf, MSG_CTRUNC);
    mf = 0; // no buffer at all (msg_control NULL)
    EXPECT_EQ(eta_udp_put_cmsgs(nullptr, 0, ETA_RX_PKTINFO, &m, &mf), 0u);
    EXPECT_EQ(mf, MSG_CTRUNC);
    mf = MSG_TRUNC; // the datagram's own flag stays
    EXPECT_EQ(eta_udp_put_cmsgs(buf, sizeof buf, ETA_RX_PKTINFO, &m, &mf), CMSG_SPACE(sizeof(in_pktinfo)));
    EXPECT_EQ(mf, MSG_TRUNC);
}

std::vector<uint8_t> cmsgs(std::initializer_list<std::tuple<int, int, std::vector<uint8_t>>> list)
{
    std::vector<uint8_t> out;
    for (auto &[level, type, data] : list) {
        size_t at = out.size();
        out.resize(at + CMSG_SPACE(data.size()));
        cmsghdr h{};
        h.cmsg_len = CMSG_LEN(data.size());
        h.cmsg_level = level;
        h.cmsg_type = type;
        memcpy(out.data() + at, &h, sizeof h);
        memcpy(out.data() + at + CMSG_LEN(0), data.data(), data.size());
    }
    return out;
}

std::vector<uint8_t> pktinfo(uint32_t spec_dst, int ifindex)
{
    in_pktinfo pi{};
    pi.ipi_ifindex = ifindex;
    pi.ipi_spec_dst.s_addr = htonl(spec_dst);
    std::vector<uint8_t> v(sizeof pi);
    memcpy(v.data(), &pi, sizeof pi);
    return v;
}

TEST(UdpCmsg, SendPktinfoIsRead)
{
    auto b = cmsgs({{IPPROTO_IP, IP_PKTINFO, pktinfo(0xc6120001, 3)}});
    uint32_t spec = 1;
    int ifx = 1, tos = 7;
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), 0);
    EXPECT_EQ(tos, -1) << "no IP_TOS: the socket's";
    EXPECT_EQ(spec, 0xc6120001u);
    EXPECT_EQ(ifx, 3);
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), 0, &spec, &ifx, &tos), 0); // none
    EXPECT_EQ(spec, 0u);
    // other levels are skipped, as on Linux's IPv4 socket (an IPV6_PKTINFO)
    b = cmsgs({{IPPROTO_IPV6, IPV6_PKTINFO, std::vector<uint8_t>(20)}, {IPPROTO_IP, IP_PKTINFO, pktinfo(0, 0)}});
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), 0);
}

// IP_TOS: this datagram's TOS (ip_cmsg_send: an int or a byte, 0..255).
TEST(UdpCmsg, SendTosIsRead)
{
    uint32_t spec;
    int ifx, tos = -1;
    const int v = 0x2e;
    std::vector<uint8_t> iv(4);
    memcpy(iv.data(), &v, 4);
    auto b = cmsgs({{IPPROTO_IP, IP_TOS, iv}});
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), 0);
    EXPECT_EQ(tos, 0x2e);
    b = cmsgs({{IPPROTO_IP, IP_TOS, std::vector<uint8_t>{0x03}}}); // a byte (ECN CE)
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), 0);
    EXPECT_EQ(tos, 3);
    b = cmsgs({{IPPROTO_IP, IP_TOS, std::vector<uint8_t>(2)}}); // neither: EINVAL
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
    const int big = 256;
    memcpy(iv.data(), &big, 4);
    b = cmsgs({{IPPROTO_IP, IP_TOS, iv}});
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
}

// UDP_SEGMENT (GSO): a u16 the send splits its buffer by; the last one of
// several counts (Linux reads them in order); none: -1, the socket's option.
TEST(UdpCmsg, SendSegmentSizeIsRead)
{
    uint32_t spec;
    int ifx, tos;
    uint8_t spec6[16];
    const uint16_t g = 1200, g2 = 1350;
    std::vector<uint8_t> v(2), v2(2);
    memcpy(v.data(), &g, 2);
    memcpy(v2.data(), &g2, 2);
    auto b = cmsgs({{SOL_UDP, UDP_SEGMENT, v}});
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), 0);
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec6, &ifx, &tos), 0);
    EXPECT_EQ(eta_udp_cmsg_gso(b.data(), b.size()), 1200);
    b = cmsgs({{SOL_UDP, UDP_SEGMENT, v}, {IPPROTO_IP, IP_TOS, std::vector<uint8_t>{0x02}}, {SOL_UDP, UDP_SEGMENT, v2}});
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), 0);
    EXPECT_EQ(eta_udp_cmsg_gso(b.data(), b.size()), 1350);
    EXPECT_EQ(tos, 2);
    b = cmsgs({{IPPROTO_IP, IP_TOS, std::vector<uint8_t>{0x02}}});
    EXPECT_EQ(eta_udp_cmsg_gso(b.data(), b.size()), -1);
    EXPECT_EQ(eta_udp_cmsg_gso(nullptr, 0), -1);
}

TEST(UdpCmsg, SendRefusesWhatItCannotCarry)
{
    uint32_t spec;
    int ifx, tos;
    auto b = cmsgs({{IPPROTO_IP, IP_PKTINFO, std::vector<uint8_t>(8)}}); // wrong length: Linux EINVAL
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
    b = cmsgs({{IPPROTO_IP, 12345, std::vector<uint8_t>(4)}}); // an unknown IP_* type: EINVAL
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
    b = cmsgs({{IPPROTO_IP, IP_TTL, std::vector<uint8_t>(4)}}); // Linux's, not carried: never dropped silently
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), EOPNOTSUPP);
    b = cmsgs({{SOL_UDP, UDP_SEGMENT, std::vector<uint8_t>(4)}}); // not a u16: Linux's EINVAL
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
    b = cmsgs({{IPPROTO_IP, IP_PKTINFO, pktinfo(1, 0)}});
    cmsghdr h;
    memcpy(&h, b.data(), sizeof h);
    h.cmsg_len = b.size() + 8; // longer than the buffer: CMSG_OK fails
    memcpy(b.data(), &h, sizeof h);
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
}

} // namespace
