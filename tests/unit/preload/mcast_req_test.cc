// Multicast membership requests in the shim (preload/src/mcast_req.c, issue
// 31): each option's value read as Linux reads it (ip_mreq, ip_mreqn,
// ip_mreq_source, ipv6_mreq, RFC 3678's group_req and group_source_req),
// and Linux's errors for short values and groups of the wrong family.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <gtest/gtest.h>

extern "C" {
#include "mcast_req.h"
}

namespace {

in_addr v4(const char *s)
{
    in_addr a{};
    inet_pton(AF_INET, s, &a);
    return a;
}

in6_addr v6(const char *s)
{
    in6_addr a{};
    inet_pton(AF_INET6, s, &a);
    return a;
}

sockaddr_storage ss4(const char *s)
{
    sockaddr_storage ss{};
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_addr = v4(s);
    std::memcpy(&ss, &in, sizeof in);
    return ss;
}

sockaddr_storage ss6(const char *s)
{
    sockaddr_storage ss{};
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_addr = v6(s);
    std::memcpy(&ss, &in6, sizeof in6);
    return ss;
}

TEST(McastReq, OptionsKnown)
{
    for (int n : {IP_ADD_MEMBERSHIP, IP_DROP_MEMBERSHIP, IP_ADD_SOURCE_MEMBERSHIP, IP_DROP_SOURCE_MEMBERSHIP,
                  MCAST_JOIN_GROUP, MCAST_LEAVE_GROUP, MCAST_JOIN_SOURCE_GROUP, MCAST_LEAVE_SOURCE_GROUP})
        EXPECT_TRUE(eta_mcast_membership_option(IPPROTO_IP, n)) << n;
    for (int n : {IPV6_ADD_MEMBERSHIP, IPV6_DROP_MEMBERSHIP, MCAST_JOIN_GROUP, MCAST_LEAVE_GROUP})
        EXPECT_TRUE(eta_mcast_membership_option(IPPROTO_IPV6, n)) << n;
    EXPECT_FALSE(eta_mcast_membership_option(IPPROTO_IP, IP_MULTICAST_TTL));
    EXPECT_FALSE(eta_mcast_membership_option(SOL_SOCKET, IP_ADD_MEMBERSHIP));
    EXPECT_TRUE(eta_mcast_filter_option(IPPROTO_IP, IP_BLOCK_SOURCE));
    EXPECT_TRUE(eta_mcast_filter_option(IPPROTO_IPV6, MCAST_MSFILTER));
    EXPECT_FALSE(eta_mcast_filter_option(IPPROTO_IP, IP_ADD_MEMBERSHIP));
}

// ip_mreq names the interface by address; ip_mreqn (longer) by index too.
TEST(McastReq, IpMreqAndMreqn)
{
    eta_mcast_req r;
    ip_mreq m{v4("239.1.2.3"), v4("198.18.1.1")};
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m, false, &r), 0);
    EXPECT_FALSE(r.v6);
    EXPECT_TRUE(r.join);
    EXPECT_FALSE(r.has_source);
    EXPECT_EQ(r.group4, 0xef010203u);
    EXPECT_EQ(r.if_addr4, 0xc6120101u);
    EXPECT_EQ(r.ifindex, 0);
    ip_mreqn mn{v4("239.1.2.3"), v4("0.0.0.0"), 7};
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IP, IP_DROP_MEMBERSHIP, &mn, sizeof mn, false, &r), 0);
    EXPECT_FALSE(r.join);
    EXPECT_EQ(r.ifindex, 7);
    EXPECT_EQ(r.if_addr4, 0u);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m - 1, false, &r), EINVAL);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IP, IP_ADD_MEMBERSHIP, nullptr, sizeof m, false, &r), EFAULT);
    // An IPv4 membership on an AF_INET6 socket is Linux's too (dual-stack receivers).
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m, true, &r), 0);
}

TEST(McastReq, SourceSpecific)
{
    eta_mcast_req r;
    ip_mreq_source m{};
    m.imr_multiaddr = v4("232.1.1.1");
    m.imr_interface = v4("198.18.1.1");
    m.imr_sourceaddr = v4("198.18.1.2");
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, &m, sizeof m, false, &r), 0);
    EXPECT_TRUE(r.join);
    EXPECT_TRUE(r.has_source);
    EXPECT_EQ(r.group4, 0xe8010101u);
    EXPECT_EQ(r.source4, 0xc6120102u);
    EXPECT_EQ(r.if_addr4, 0xc6120101u);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IP, IP_DROP_SOURCE_MEMBERSHIP, &m, sizeof m - 4, false, &r), EINVAL);
}

TEST(McastReq, Ipv6Mreq)
{
    eta_mcast_req r;
    ipv6_mreq m{v6("ff0e::db8:1"), 4};
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof m, true, &r), 0);
    EXPECT_TRUE(r.v6);
    EXPECT_TRUE(r.join);
    EXPECT_EQ(std::memcmp(r.group6, v6("ff0e::db8:1").s6_addr, 16), 0);
    EXPECT_EQ(r.ifindex, 4);
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IPV6, IPV6_DROP_MEMBERSHIP, &m, sizeof m, true, &r), 0);
    EXPECT_FALSE(r.join);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof m - 1, true, &r), EINVAL);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof m, false, &r), ENOPROTOOPT)
        << "SOL_IPV6 on an AF_INET socket";
}

// RFC 3678's protocol-independent calls: the group's family must be the
// level's (EINVAL at SOL_IP, EADDRNOTAVAIL at SOL_IPV6, as Linux answers).
TEST(McastReq, ProtocolIndependent)
{
    eta_mcast_req r;
    group_req g{};
    g.gr_interface = 3;
    g.gr_group = ss4("239.9.9.9");
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IP, MCAST_JOIN_GROUP, &g, sizeof g, false, &r), 0);
    EXPECT_FALSE(r.v6);
    EXPECT_TRUE(r.join);
    EXPECT_EQ(r.group4, 0xef090909u);
    EXPECT_EQ(r.ifindex, 3);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IPV6, MCAST_JOIN_GROUP, &g, sizeof g, true, &r), EADDRNOTAVAIL);
    g.gr_group = ss6("ff05::1:3");
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IPV6, MCAST_LEAVE_GROUP, &g, sizeof g, true, &r), 0);
    EXPECT_TRUE(r.v6);
    EXPECT_FALSE(r.join);
    EXPECT_EQ(std::memcmp(r.group6, v6("ff05::1:3").s6_addr, 16), 0);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IP, MCAST_JOIN_GROUP, &g, sizeof g, true, &r), EINVAL);
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IPV6, MCAST_JOIN_GROUP, &g, sizeof g - 1, true, &r), EINVAL);

    group_source_req gs{};
    gs.gsr_interface = 0;
    gs.gsr_group = ss6("ff3e::8000:1");
    gs.gsr_source = ss6("2001:2:0:1::2");
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IPV6, MCAST_JOIN_SOURCE_GROUP, &gs, sizeof gs, true, &r), 0);
    EXPECT_TRUE(r.has_source);
    EXPECT_EQ(std::memcmp(r.source6, v6("2001:2:0:1::2").s6_addr, 16), 0);
    gs.gsr_source = ss4("198.18.1.2");
    EXPECT_EQ(eta_mcast_parse(IPPROTO_IPV6, MCAST_JOIN_SOURCE_GROUP, &gs, sizeof gs, true, &r), EADDRNOTAVAIL);
    gs.gsr_group = ss4("232.1.1.1");
    ASSERT_EQ(eta_mcast_parse(IPPROTO_IP, MCAST_LEAVE_SOURCE_GROUP, &gs, sizeof gs, false, &r), 0);
    EXPECT_FALSE(r.join);
    EXPECT_EQ(r.source4, 0xc6120102u);
}

// IP_MULTICAST_IF's value by its length, as Linux's do_ip_setsockopt reads
// it: an ip_mreqn (address and index), an ip_mreq (its second address), an
// in_addr; shorter is refused.
TEST(McastReq, MulticastIfReadByLength)
{
    uint32_t a = 1;
    int idx = -1;
    ip_mreqn n{};
    n.imr_multiaddr.s_addr = htonl(0xef010101u);
    n.imr_address.s_addr = htonl(0xc6120001u);
    n.imr_ifindex = 7;
    ASSERT_EQ(eta_mcast_if_parse(&n, sizeof n, &a, &idx), 0);
    EXPECT_EQ(a, 0xc6120001u);
    EXPECT_EQ(idx, 7);
    ip_mreq m{};
    m.imr_multiaddr.s_addr = htonl(0xef010101u);
    m.imr_interface.s_addr = htonl(0xc6120002u);
    ASSERT_EQ(eta_mcast_if_parse(&m, sizeof m, &a, &idx), 0);
    EXPECT_EQ(a, 0xc6120002u) << "an ip_mreq's interface, not its group";
    EXPECT_EQ(idx, 0);
    in_addr in{htonl(0xc6120003u)};
    ASSERT_EQ(eta_mcast_if_parse(&in, sizeof in, &a, &idx), 0);
    EXPECT_EQ(a, 0xc6120003u);
    EXPECT_EQ(idx, 0);
    EXPECT_EQ(eta_mcast_if_parse(&in, sizeof in - 1, &a, &idx), EINVAL);
}

} // namespace
