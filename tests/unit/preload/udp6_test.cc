// UDP over IPv6 in the shim (preload/src/udp6_addr.c, udp_cmsg.c, decide.c):
// an AF_INET6 UDP socket's addresses read as Linux's udpv6_sendmsg and
// ip6_datagram_connect read them (the errno values measured on the kernel
// this was written on, 6.x: sendto AF_INET 16 bytes ok, 15 EINVAL; AF_INET6
// 24 ok, 23 EINVAL; AF_UNIX EINVAL; AF_UNSPEC no destination; IPv4 from an
// IPV6_V6ONLY socket ENETUNREACH; connect AF_INET from one EAFNOSUPPORT,
// AF_UNIX EAFNOSUPPORT), the senders' names, the control messages of an
// IPv6 datagram and of an IPv4 one on a dual-stack socket in Linux's order
// (the timestamp, IPV6_PKTINFO, then IP_* or IPV6_HOPLIMIT, IPV6_TCLASS),
// the control messages of a send by the destination's family, and which
// destinations the PPE takes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <gtest/gtest.h>
#include <vector>

extern "C" {
#include "decide.h"
#include "udp6_addr.h"
#include "udp_cmsg.h"
}

namespace {

sockaddr_in6 in6(const char *ip, uint16_t port)
{
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return a;
}

sockaddr_in in4(const char *ip, uint16_t port)
{
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

std::string text(const uint8_t ip[16])
{
    char b[INET6_ADDRSTRLEN];
    return inet_ntop(AF_INET6, ip, b, sizeof b);
}

TEST(Udp6Addr, SendDestinationsAsLinuxReadsThem)
{
    dti_addr6 d{};
    auto a6 = in6("2001:2:0:1::2", 53);
    EXPECT_EQ(eta_udp6_dst(&a6, sizeof a6, false, &d), 0);
    EXPECT_EQ(text(d.ip), "2001:2:0:1::2");
    EXPECT_EQ(d.port, 53);
    EXPECT_EQ(eta_udp6_dst(&a6, 24, false, &d), 0); // SIN6_LEN_RFC2133: no scope id
    EXPECT_EQ(eta_udp6_dst(&a6, 23, false, &d), EINVAL);
    EXPECT_EQ(eta_udp6_dst(&a6, 1, false, &d), EINVAL);
    auto m = in6("::ffff:198.18.1.2", 9);
    EXPECT_EQ(eta_udp6_dst(&m, sizeof m, false, &d), 0);
    EXPECT_EQ(text(d.ip), "::ffff:198.18.1.2");
    EXPECT_EQ(eta_udp6_dst(&m, sizeof m, true, &d), ENETUNREACH);
    auto a4 = in4("198.18.1.2", 9); // Linux's UDPv6 takes AF_INET: IPv4
    EXPECT_EQ(eta_udp6_dst(&a4, sizeof a4, false, &d), 0);
    EXPECT_EQ(text(d.ip), "::ffff:198.18.1.2");
    EXPECT_EQ(d.port, 9);
    EXPECT_EQ(eta_udp6_dst(&a4, 15, false, &d), EINVAL);
    EXPECT_EQ(eta_udp6_dst(&a4, sizeof a4, true, &d), ENETUNREACH); // before the length
    EXPECT_EQ(eta_udp6_dst(&a4, 15, true, &d), ENETUNREACH);
    sockaddr_in6 other = a6;
    other.sin6_family = AF_UNIX;
    EXPECT_EQ(eta_udp6_dst(&other, sizeof other, false, &d), EINVAL);
    other.sin6_family = AF_UNSPEC;
    EXPECT_EQ(eta_udp6_dst(&other, sizeof other, false, &d), ETA_UDP6_NO_DST);
}

TEST(Udp6Addr, ConnectPeersAsLinuxReadsThem)
{
    dti_addr6 d{};
    auto a6 = in6("2001:2:0:1::2", 53);
    EXPECT_EQ(eta_udp6_peer(&a6, sizeof a6, false, &d), 0);
    EXPECT_EQ(eta_udp6_peer(&a6, 24, false, &d), 0);
    EXPECT_EQ(eta_udp6_peer(&a6, 23, false, &d), EINVAL);
    auto a4 = in4("198.18.1.2", 9);
    EXPECT_EQ(eta_udp6_peer(&a4, sizeof a4, false, &d), 0);
    EXPECT_EQ(text(d.ip), "::ffff:198.18.1.2");
    EXPECT_EQ(eta_udp6_peer(&a4, sizeof a4, true, &d), EAFNOSUPPORT);
    EXPECT_EQ(eta_udp6_peer(&a4, 15, false, &d), EINVAL);
    auto m = in6("::ffff:198.18.1.2", 9);
    EXPECT_EQ(eta_udp6_peer(&m, sizeof m, true, &d), ENETUNREACH);
    sockaddr_in6 other = a6;
    other.sin6_family = AF_UNIX;
    EXPECT_EQ(eta_udp6_peer(&other, sizeof other, false, &d), EAFNOSUPPORT);
    EXPECT_EQ(eta_udp6_peer(&other, 20, false, &d), EINVAL);
}

TEST(Udp6Addr, NamesAndMapping)
{
    uint8_t ip[16];
    eta_udp6_map(0xc6120102, ip); // 198.18.1.2
    EXPECT_EQ(text(ip), "::ffff:198.18.1.2");
    uint32_t v4 = 0;
    EXPECT_TRUE(eta_udp6_unmap(ip, &v4));
    EXPECT_EQ(v4, 0xc6120102u);
    auto g = in6("2001:2::1", 1);
    EXPECT_FALSE(eta_udp6_unmap(g.sin6_addr.s6_addr, &v4));
    sockaddr_in6 n = eta_udp6_name(g.sin6_addr.s6_addr, 4242, 7);
    EXPECT_EQ(n.sin6_family, AF_INET6);
    EXPECT_EQ(ntohs(n.sin6_port), 4242);
    EXPECT_EQ(n.sin6_scope_id, 0u); // a global address has no scope
    EXPECT_EQ(n.sin6_flowinfo, 0u);
    auto ll = in6("fe80::1", 1);
    EXPECT_EQ(eta_udp6_name(ll.sin6_addr.s6_addr, 1, 7).sin6_scope_id, 7u);
    EXPECT_EQ(eta_udp6_name(ip, 1, 7).sin6_scope_id, 0u);
}

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

TEST(Udp6Cmsg, AnIpv6DatagramInLinuxOrder)
{
    eta_udp_rx_meta m{};
    m.real_ns = 1'700'000'000'000'000'123ull;
    m.ip6 = true;
    auto dst = in6("2001:2:0:1::1", 0);
    memcpy(m.dst6, dst.sin6_addr.s6_addr, 16);
    m.ifindex = 0;
    m.ttl = 64;   // the hop limit
    m.tos = 0xb8; // the traffic class
    uint8_t buf[ETA_UDP_CMSG_MAX];
    int mf = 0;
    // The IPv4 options asked too: an IPv6 datagram has none of them (Linux).
    const unsigned want = ETA_RX_TSNS | ETA_RX_PKTINFO6 | ETA_RX_HOPLIMIT6 | ETA_RX_TCLASS6 | ETA_RX_TTL | ETA_RX_TOS;
    size_t n = eta_udp_put_cmsgs(buf, sizeof buf, want, &m, &mf);
    EXPECT_EQ(mf, 0);
    EXPECT_EQ(n, CMSG_SPACE(sizeof(timespec)) + CMSG_SPACE(sizeof(in6_pktinfo)) + 2 * CMSG_SPACE(sizeof(int)));
    Parsed p = parse(buf, n);
    ASSERT_EQ(p.hdrs.size(), 4u);
    EXPECT_EQ(p.hdrs[0].cmsg_level, SOL_SOCKET);
    EXPECT_EQ(p.hdrs[1].cmsg_level, SOL_IPV6);
    EXPECT_EQ(p.hdrs[1].cmsg_type, IPV6_PKTINFO);
    in6_pktinfo pi{};
    memcpy(&pi, p.data[1].data(), sizeof pi);
    EXPECT_EQ(text(pi.ipi6_addr.s6_addr), "2001:2:0:1::1");
    EXPECT_EQ(pi.ipi6_ifindex, 0u);
    EXPECT_EQ(p.hdrs[2].cmsg_type, IPV6_HOPLIMIT);
    int v = 0;
    memcpy(&v, p.data[2].data(), sizeof v);
    EXPECT_EQ(v, 64);
    EXPECT_EQ(p.hdrs[3].cmsg_type, IPV6_TCLASS);
    memcpy(&v, p.data[3].data(), sizeof v);
    EXPECT_EQ(v, 0xb8);
}

TEST(Udp6Cmsg, AnIpv4DatagramOnADualStackSocket)
{
    eta_udp_rx_meta m{};
    m.dst_ip = 0xc6120101; // 198.18.1.1
    m.spec_dst = 0xc6120101;
    m.ifindex = 3;
    m.ttl = 63;
    uint8_t buf[ETA_UDP_CMSG_MAX];
    int mf = 0;
    // IPV6_PKTINFO v4-mapped first (ip6_datagram_recv_common_ctl), then
    // IP_PKTINFO and IP_TTL; no IPV6_HOPLIMIT for an IPv4 datagram.
    size_t n = eta_udp_put_cmsgs(buf, sizeof buf, ETA_RX_PKTINFO6 | ETA_RX_HOPLIMIT6 | ETA_RX_PKTINFO | ETA_RX_TTL,
                                 &m, &mf);
    Parsed p = parse(buf, n);
    ASSERT_EQ(p.hdrs.size(), 3u);
    EXPECT_EQ(p.hdrs[0].cmsg_level, SOL_IPV6);
    in6_pktinfo pi{};
    memcpy(&pi, p.data[0].data(), sizeof pi);
    EXPECT_EQ(text(pi.ipi6_addr.s6_addr), "::ffff:198.18.1.1");
    EXPECT_EQ(pi.ipi6_ifindex, 3u);
    EXPECT_EQ(p.hdrs[1].cmsg_level, SOL_IP);
    EXPECT_EQ(p.hdrs[1].cmsg_type, IP_PKTINFO);
    EXPECT_EQ(p.hdrs[2].cmsg_type, IP_TTL);
    // Cut: the IPv6 message does not fit in 30 bytes.
    mf = 0;
    n = eta_udp_put_cmsgs(buf, 30, ETA_RX_PKTINFO6, &m, &mf);
    EXPECT_EQ(mf, MSG_CTRUNC);
    EXPECT_EQ(n, 30u);
}

std::vector<uint8_t> cmsg(int level, int type, const void *data, size_t len)
{
    std::vector<uint8_t> b(CMSG_SPACE(len));
    cmsghdr h{};
    h.cmsg_len = CMSG_LEN(len);
    h.cmsg_level = level;
    h.cmsg_type = type;
    memcpy(b.data(), &h, sizeof h);
    memcpy(b.data() + CMSG_LEN(0), data, len);
    return b;
}

TEST(Udp6Cmsg, SendToAnIpv6Destination)
{
    uint8_t spec[16];
    int ifx = -1, tos = 0;
    in6_pktinfo pi{};
    inet_pton(AF_INET6, "2001:2:0:1::1", &pi.ipi6_addr);
    pi.ipi6_ifindex = 4;
    auto b = cmsg(SOL_IPV6, IPV6_PKTINFO, &pi, sizeof pi);
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), 0);
    EXPECT_EQ(text(spec), "2001:2:0:1::1");
    EXPECT_EQ(ifx, 4);
    b = cmsg(SOL_IPV6, IPV6_PKTINFO, &pi, 16); // short: Linux's EINVAL
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), EINVAL);
    const int hl = 5;
    b = cmsg(SOL_IPV6, IPV6_HOPLIMIT, &hl, sizeof hl); // Linux takes it; not carried
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), EOPNOTSUPP);
    b = cmsg(SOL_IPV6, IPV6_TCLASS, &hl, sizeof hl); // this datagram's traffic class
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), 0);
    EXPECT_EQ(tos, 5);
    const int dflt = -1, bad = 256;
    b = cmsg(SOL_IPV6, IPV6_TCLASS, &dflt, sizeof dflt); // -1: the socket's
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), 0);
    EXPECT_EQ(tos, -1);
    b = cmsg(SOL_IPV6, IPV6_TCLASS, &bad, sizeof bad); // past 255: EINVAL
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), EINVAL);
    b = cmsg(SOL_IPV6, 200, &hl, sizeof hl); // unknown: ip6_datagram_send_ctl's EINVAL
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), EINVAL);
    b = cmsg(SOL_IP, 200, &hl, sizeof hl); // SOL_IP: skipped on an IPv6 send
    EXPECT_EQ(eta_udp_read_send_cmsgs6(b.data(), b.size(), spec, &ifx, &tos), 0);
}

TEST(Udp6Cmsg, SendToAnIpv4DestinationOfAnInet6Socket)
{
    uint32_t spec = 0;
    int ifx = -1, tos = 0;
    in6_pktinfo pi{};
    inet_pton(AF_INET6, "::ffff:198.18.1.1", &pi.ipi6_addr);
    auto b = cmsg(SOL_IPV6, IPV6_PKTINFO, &pi, sizeof pi);
    EXPECT_EQ(eta_udp_read_send_cmsgs_mapped(b.data(), b.size(), &spec, &ifx, &tos), 0);
    EXPECT_EQ(spec, 0xc6120101u);
    memset(&pi.ipi6_addr, 0, sizeof pi.ipi6_addr); // :: is not v4-mapped: Linux's EINVAL
    b = cmsg(SOL_IPV6, IPV6_PKTINFO, &pi, sizeof pi);
    EXPECT_EQ(eta_udp_read_send_cmsgs_mapped(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
    const int hl = 5;
    b = cmsg(SOL_IPV6, IPV6_HOPLIMIT, &hl, sizeof hl); // skipped (ip_cmsg_send)
    EXPECT_EQ(eta_udp_read_send_cmsgs_mapped(b.data(), b.size(), &spec, &ifx, &tos), 0);
    b = cmsg(SOL_IP, 200, &hl, sizeof hl);
    EXPECT_EQ(eta_udp_read_send_cmsgs_mapped(b.data(), b.size(), &spec, &ifx, &tos), EINVAL);
    // an AF_INET socket skips SOL_IPV6 altogether
    b = cmsg(SOL_IPV6, IPV6_PKTINFO, &pi, sizeof pi);
    EXPECT_EQ(eta_udp_read_send_cmsgs(b.data(), b.size(), &spec, &ifx, &tos), 0);
}

TEST(Udp6Decide, WhichDestinationsThePpeTakes)
{
    eta_net n{};
    char why[128];
    ASSERT_EQ(eta_net_parse("port 198.18.1.1/24\nport6 2001:2:0:1::1/64\n", &n, why, sizeof why), 0) << why;
    auto ip = [](const char *a) {
        static sockaddr_in6 s;
        s = in6(a, 0);
        return s.sin6_addr.s6_addr;
    };
    EXPECT_EQ(eta_decide_udp6(&n, ip("2001:2:0:1::2"), 0), ETA_R_NONE);        // on-link
    EXPECT_EQ(eta_decide_udp6(&n, ip("2001:2:0:1::1"), 0), ETA_R_INET6);       // the PPE's own
    EXPECT_EQ(eta_decide_udp6(&n, ip("2001:2:0:9::2"), 0), ETA_R_NOT_ROUTED);  // off-link
    EXPECT_EQ(eta_decide_udp6(&n, ip("fe80::2"), 0), ETA_R_INET6);             // link-local: the kernel's
    EXPECT_EQ(eta_decide_udp6(&n, ip("::1"), 0), ETA_R_LOOPBACK);
    EXPECT_EQ(eta_decide_udp6(&n, ip("ff02::1"), 0), ETA_R_INET6);
    EXPECT_EQ(eta_decide_udp6(&n, ip("::ffff:198.18.1.2"), 0), ETA_R_NONE);    // IPv4's rule
    EXPECT_EQ(eta_decide_udp6(&n, ip("::ffff:127.0.0.1"), 0), ETA_R_LOOPBACK);
    EXPECT_EQ(eta_decide_udp6(&n, ip("::ffff:10.1.1.1"), 0), ETA_R_NOT_ROUTED);
    ASSERT_EQ(eta_net_parse("port 198.18.1.1/24\nport6 2001:2:0:1::1/64\nself shared\n", &n, why, sizeof why), 0);
    // A shared port (session 53): the engine's too, its port held in the
    // kernel (udp6.c eta_udp6_hold); the PPE's own address the kernel's (`local`).
    EXPECT_EQ(eta_decide_udp6(&n, ip("2001:2:0:1::2"), 0), ETA_R_NONE);
    EXPECT_EQ(eta_decide_udp6(&n, ip("2001:2:0:1::1"), 0), ETA_R_LOCAL); // the kernel loops it (issue 29)
    EXPECT_EQ(eta_decide_udp6(&n, ip("2001:2:0:9::2"), 0), ETA_R_NOT_ROUTED);
    EXPECT_EQ(eta_decide_udp6(&n, ip("::ffff:198.18.1.1"), 0), ETA_R_LOCAL); // IPv4's rule: the kernel holds it
}

} // namespace
