// libdti's IPv6 calls (ABI 11: lib/ip6.c, lib/slots.c) through the fixture
// engine, whose loopback transport has no IPv6 (the Transport defaults:
// -EAFNOSUPPORT): a v4-mapped address is the IPv4 call, routed as one (on
// two engines too: the listener's siblings are bound like it), and either
// family's names come back from dti_getsockname6/dti_getpeername6 (4 and
// v4-mapped for an IPv4 socket). TCP over IPv6 itself runs over MARS:
// tests/unit/ppe/ip6_mars_test.cc.
#include "test_util.h"

#include "dti_abi.h"

#include <cerrno>
#include <cstring>

namespace dti::test {
namespace {

using DtiIp6 = Attached;

dti_addr6 mapped(uint32_t ip, uint16_t port)
{
    dti_addr6 a{};
    a.ip[10] = a.ip[11] = 0xff;
    a.ip[12] = uint8_t(ip >> 24), a.ip[13] = uint8_t(ip >> 16), a.ip[14] = uint8_t(ip >> 8), a.ip[15] = uint8_t(ip);
    a.port = port;
    return a;
}

TEST_F(DtiIp6, MappedAddressesAreIpv4SocketsWithMappedNames)
{
    int l = dti_socket(c_);
    ASSERT_GE(l, 0);
    dti_addr6 any = mapped(0, 0);
    ASSERT_EQ(dti_bind6(c_, dti_sock_t(l), &any, 0), 0);
    ASSERT_EQ(dti_listen(c_, dti_sock_t(l), 4), 0);
    dti_addr6 name{};
    ASSERT_EQ(dti_getsockname6(c_, dti_sock_t(l), &name), 4);
    ASSERT_NE(name.port, 0);
    EXPECT_EQ(std::memcmp(name.ip, mapped(0, 0).ip, 16), 0);
    const uint16_t port = name.port;
    dti_addr6 none{};
    EXPECT_EQ(dti_getpeername6(c_, dti_sock_t(l), &none), -ENOTCONN);

    int cs = dti_socket(c_);
    ASSERT_GE(cs, 0);
    dti_addr6 to = mapped(0x7f000001, port);
    ASSERT_EQ(dti_connect6(c_, dti_sock_t(cs), &to, 5000), 0);
    int s = dti_accept(c_, dti_sock_t(l), nullptr, 5000);
    ASSERT_GE(s, 0) << dti_strerror(s);
    dti_addr6 peer{};
    ASSERT_EQ(dti_getpeername6(c_, dti_sock_t(cs), &peer), 4);
    EXPECT_EQ(std::memcmp(peer.ip, to.ip, 16), 0);
    EXPECT_EQ(peer.port, to.port);
    EXPECT_EQ(dti_send_all(c_, dti_sock_t(cs), "six", 3, 5000), 3);
    char buf[8] = {};
    EXPECT_EQ(dti_recv_wait(c_, dti_sock_t(s), buf, sizeof buf, 5000), 3);
    EXPECT_STREQ(buf, "six");
    EXPECT_EQ(dti_close(c_, dti_sock_t(s)), 0);
    EXPECT_EQ(dti_close(c_, dti_sock_t(cs)), 0);
    EXPECT_EQ(dti_close(c_, dti_sock_t(l)), 0);
}

TEST_F(DtiIp6, RefusalsAndATransportWithoutIpv6)
{
    int s = dti_socket(c_);
    ASSERT_GE(s, 0);
    dti_addr6 mapped_any = mapped(0, 0);
    EXPECT_EQ(dti_bind6(c_, dti_sock_t(s), &mapped_any, DTI_BIND6_V6ONLY), -EINVAL) << "IPv4 on a V6ONLY socket";
    EXPECT_EQ(dti_bind6(c_, dti_sock_t(s), nullptr, 0), -EFAULT);
    EXPECT_EQ(dti_connect6(c_, dti_sock_t(s), nullptr, 100), -EFAULT);
    dti_addr6 six{{0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 80};
    EXPECT_EQ(dti_bind6(c_, dti_sock_t(s), &six, 0), -EAFNOSUPPORT);
    dti_addr6 mcast{{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 80};
    EXPECT_EQ(dti_connect6(c_, dti_sock_t(s), &mcast, 100), -EINVAL) << "the engine's decoder";
    dti_addr6 name{};
    EXPECT_EQ(dti_getsockname6(c_, dti_sock_t(s), &name), 4) << "nothing made it an IPv6 socket";
    EXPECT_EQ(dti_getsockname6(c_, DTI_SOCK_INVALID, &name), -DTI_E_BAD_HANDLE);
    EXPECT_EQ(dti_close(c_, dti_sock_t(s)), 0);
}

} // namespace
} // namespace dti::test
