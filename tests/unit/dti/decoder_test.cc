// The command decoder (dti/engine/decoder.h) on its own: every opcode, every
// bound and the value on each side of it, unknown opcodes, offsets whose sum
// with the length would wrap, handles out of range; and the order of the
// checks (tag, then handle, then arguments).
#include "decoder.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

namespace {

using dti::engine::Command;
using dti::engine::CommandBounds;
using dti::engine::Decoded;
using dti::engine::decode_command;
using dti::engine::Option;
using dti::engine::Reject;

constexpr uint32_t kEntries = 256;
constexpr uint32_t kSockets = 64;
constexpr uint64_t kPoolOffset = 0x10000;
constexpr uint64_t kPoolSize = 0x4000;
constexpr CommandBounds kBounds{kEntries, kSockets, kPoolOffset, kPoolSize};

uint32_t handle_of(uint32_t slot, uint32_t gen = 1) { return gen << DTI_SLOT_BITS | slot; }

dti_cmd cmd(uint16_t op, uint32_t sock = handle_of(3), uint32_t arg0 = 0, uint32_t arg1 = 0)
{
    dti_cmd c{};
    c.op = op;
    c.sock = sock;
    c.arg0 = arg0;
    c.arg1 = arg1;
    c.tag = 7;
    return c;
}

Reject reject_of(const dti_cmd &c, const CommandBounds &b = kBounds) { return decode_command(c, b).reject; }

TEST(DtiDecoder, NopAndSocketNameNoSocket)
{
    for (uint16_t op : {uint16_t(DTI_OP_NOP), uint16_t(DTI_OP_SOCKET)}) {
        for (uint32_t sock : {0u, 0xffffffffu, handle_of(kSockets)}) {
            Decoded d = decode_command(cmd(op, sock), kBounds);
            EXPECT_TRUE(d.ok()) << op << " " << sock;
            EXPECT_EQ(d.cmd.op, op);
            EXPECT_TRUE(d.cmd.signaled);
            EXPECT_EQ(d.cmd.tag, 7u);
            EXPECT_EQ(d.cmd.handle, sock);
        }
    }
}

TEST(DtiDecoder, TagMustBeAQueueIndexWhenAnswered)
{
    dti_cmd c = cmd(DTI_OP_NOP);
    c.tag = kEntries - 1;
    EXPECT_EQ(reject_of(c), Reject::kNone);
    c.tag = kEntries;
    EXPECT_EQ(reject_of(c), Reject::kBadTag);
    c.tag = 0xffffffffu;
    EXPECT_EQ(reject_of(c), Reject::kBadTag);
    // The tag is checked before anything else: an unknown opcode on a bad
    // handle with a bad tag cannot be answered at all.
    c = cmd(999, 0);
    c.tag = kEntries;
    EXPECT_EQ(reject_of(c), Reject::kBadTag);
    // SEND and RECV_RELEASE are never answered: their tag means nothing.
    for (uint16_t op : {uint16_t(DTI_OP_SEND), uint16_t(DTI_OP_RECV_RELEASE)}) {
        c = cmd(op, handle_of(3), 10);
        c.tag = 0xffffffffu;
        Decoded d = decode_command(c, kBounds);
        EXPECT_TRUE(d.ok()) << op;
        EXPECT_FALSE(d.cmd.signaled);
    }
}

TEST(DtiDecoder, HandleSlotAndGeneration)
{
    Decoded d = decode_command(cmd(DTI_OP_CLOSE, handle_of(kSockets - 1, 5)), kBounds);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.cmd.slot, kSockets - 1);
    EXPECT_EQ(d.cmd.gen, 5u);
    EXPECT_EQ(reject_of(cmd(DTI_OP_CLOSE, handle_of(kSockets))), Reject::kBadSocket);
    EXPECT_EQ(reject_of(cmd(DTI_OP_CLOSE, handle_of(DTI_SLOT_MASK))), Reject::kBadSocket);
    EXPECT_EQ(reject_of(cmd(DTI_OP_CLOSE, handle_of(0, 0))), Reject::kBadSocket); // generation 0: never issued
    // The bits above the slot are the generation as written (another
    // engine's bits included); whether they name a live socket is the
    // engine's check, against the slot.
    d = decode_command(cmd(DTI_OP_CLOSE, 0xfff00000u | 2u), kBounds);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.cmd.gen, 0xfffu);
    EXPECT_EQ(d.cmd.slot, 2u);
    // One socket: only slot 0.
    CommandBounds one = kBounds;
    one.max_sockets = 1;
    EXPECT_EQ(reject_of(cmd(DTI_OP_CLOSE, handle_of(0)), one), Reject::kNone);
    EXPECT_EQ(reject_of(cmd(DTI_OP_CLOSE, handle_of(1)), one), Reject::kBadSocket);
}

TEST(DtiDecoder, UnknownOpcodeAfterTheHandle)
{
    for (uint16_t op : {uint16_t(0), uint16_t(DTI_OP_MCAST6 + 1), uint16_t(0x7fff), uint16_t(0xffff)}) {
        EXPECT_EQ(reject_of(cmd(op)), Reject::kUnknownOp) << op;
        EXPECT_EQ(reject_of(cmd(op, handle_of(kSockets))), Reject::kBadSocket) << op;
    }
}

TEST(DtiDecoder, BindPortUpTo65535)
{
    for (uint32_t port : {0u, 1u, 1023u, 65535u}) {
        Decoded d = decode_command(cmd(DTI_OP_BIND, handle_of(3), 0xc6120002u, port), kBounds);
        ASSERT_TRUE(d.ok()) << port;
        EXPECT_EQ(d.cmd.address.ip, 0xc6120002u);
        EXPECT_EQ(d.cmd.address.port, port);
    }
    EXPECT_EQ(reject_of(cmd(DTI_OP_BIND, handle_of(3), 0, 65536)), Reject::kBadPort);
    EXPECT_EQ(reject_of(cmd(DTI_OP_BIND, handle_of(3), 0, 0xffffffffu)), Reject::kBadPort);
}

TEST(DtiDecoder, ConnectPort1To65535)
{
    EXPECT_EQ(reject_of(cmd(DTI_OP_CONNECT, handle_of(3), 0xc6120001u, 0)), Reject::kBadPort);
    for (uint32_t port : {1u, 65535u}) {
        Decoded d = decode_command(cmd(DTI_OP_CONNECT, handle_of(3), 0xc6120001u, port), kBounds);
        ASSERT_TRUE(d.ok()) << port;
        EXPECT_EQ(d.cmd.address.ip, 0xc6120001u);
        EXPECT_EQ(d.cmd.address.port, port);
    }
    EXPECT_EQ(reject_of(cmd(DTI_OP_CONNECT, handle_of(3), 0, 65536)), Reject::kBadPort);
}

dti_cmd cmd6(uint16_t op, const uint8_t ip[16], uint32_t port, uint32_t flags = 0)
{
    dti_cmd c = cmd(op, handle_of(3), flags, port);
    dti_cmd_addr6_set(&c, ip);
    return c;
}

constexpr uint8_t kIp6[16] = {0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01}; // 2001:2::1
constexpr uint8_t kAny6[16] = {};
constexpr uint8_t kMcast6[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01}; // ff02::1

TEST(DtiDecoder, Bind6AddressPortAndFlags)
{
    for (uint32_t port : {0u, 1u, 65535u})
        for (uint32_t flags : {0u, DTI_BIND6_V6ONLY}) {
            Decoded d = decode_command(cmd6(DTI_OP_BIND6, kIp6, port, flags), kBounds);
            ASSERT_TRUE(d.ok()) << port;
            const dti::engine::Endpoint6 e = dti::engine::endpoint6_of(d.cmd);
            EXPECT_EQ(std::memcmp(e.ip, kIp6, 16), 0);
            EXPECT_EQ(e.port, port);
            EXPECT_EQ(d.cmd.flags, flags);
        }
    EXPECT_TRUE(decode_command(cmd6(DTI_OP_BIND6, kAny6, 80), kBounds).ok()) << ":: is every address";
    EXPECT_EQ(reject_of(cmd6(DTI_OP_BIND6, kIp6, 65536)), Reject::kBadPort);
    EXPECT_EQ(reject_of(cmd6(DTI_OP_BIND6, kIp6, 80, 2)), Reject::kBadAddress6);
    EXPECT_EQ(reject_of(cmd6(DTI_OP_BIND6, kIp6, 80, 0x80000001u)), Reject::kBadAddress6);
    EXPECT_TRUE(decode_command(cmd6(DTI_OP_BIND6, kMcast6, 80), kBounds).ok()) << "a group: a datagram socket's bind";
    // The handle is judged first, as for every command.
    dti_cmd bad = cmd6(DTI_OP_BIND6, kMcast6, 80);
    bad.sock = handle_of(kSockets);
    EXPECT_EQ(reject_of(bad), Reject::kBadSocket);
}

TEST(DtiDecoder, Connect6RefusesPort0UnspecifiedMulticastAndFlags)
{
    Decoded d = decode_command(cmd6(DTI_OP_CONNECT6, kIp6, 443), kBounds);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(std::memcmp(dti::engine::endpoint6_of(d.cmd).ip, kIp6, 16), 0);
    EXPECT_EQ(dti::engine::endpoint6_of(d.cmd).port, 443);
    EXPECT_EQ(reject_of(cmd6(DTI_OP_CONNECT6, kIp6, 0)), Reject::kBadPort);
    EXPECT_EQ(reject_of(cmd6(DTI_OP_CONNECT6, kIp6, 65536)), Reject::kBadPort);
    EXPECT_EQ(reject_of(cmd6(DTI_OP_CONNECT6, kAny6, 443)), Reject::kBadAddress6);
    EXPECT_EQ(reject_of(cmd6(DTI_OP_CONNECT6, kMcast6, 443)), Reject::kBadAddress6);
    EXPECT_EQ(reject_of(cmd6(DTI_OP_CONNECT6, kIp6, 443, DTI_BIND6_V6ONLY)), Reject::kBadAddress6);
}

// MCAST6: join (arg0 0) or leave (1), the group in the value and offset
// words, the source in the trace words; both come through unchanged.
TEST(DtiDecoder, Mcast6GroupSourceAndJoinOrLeave)
{
    constexpr uint8_t kSrc6[16] = {0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0x07, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0x12, 0x34};
    for (uint32_t leave : {0u, 1u}) {
        dti_cmd c = cmd6(DTI_OP_MCAST6, kMcast6, 0, leave);
        dti_cmd_source6_set(&c, kSrc6);
        Decoded d = decode_command(c, kBounds);
        ASSERT_TRUE(d.ok()) << leave;
        uint8_t g[16], s[16];
        dti::engine::mcast6_of(d.cmd, g, s);
        EXPECT_EQ(std::memcmp(g, kMcast6, 16), 0);
        EXPECT_EQ(std::memcmp(s, kSrc6, 16), 0);
        EXPECT_EQ(d.cmd.flags, leave);
        EXPECT_TRUE(d.cmd.signaled);
    }
    dti_cmd any = cmd6(DTI_OP_MCAST6, kMcast6, 0);
    Decoded d = decode_command(any, kBounds);
    ASSERT_TRUE(d.ok());
    uint8_t g[16], s[16];
    dti::engine::mcast6_of(d.cmd, g, s);
    EXPECT_EQ(std::memcmp(s, kAny6, 16), 0) << ":: any source";
    EXPECT_EQ(reject_of(cmd6(DTI_OP_MCAST6, kMcast6, 0, 2)), Reject::kBadMcast) << "neither join nor leave";
    EXPECT_EQ(reject_of(cmd6(DTI_OP_MCAST6, kIp6, 0)), Reject::kBadMcast) << "a unicast address is no group";
    EXPECT_EQ(reject_of(cmd6(DTI_OP_MCAST6, kAny6, 0)), Reject::kBadMcast);
}

TEST(DtiDecoder, ListenBacklogClampedTo65535)
{
    for (auto [asked, got] : {std::pair{0u, 0u}, {128u, 128u}, {65535u, 65535u}, {65536u, 65535u},
                              {0xffffffffu, 65535u}}) {
        Decoded d = decode_command(cmd(DTI_OP_LISTEN, handle_of(3), asked), kBounds);
        ASSERT_TRUE(d.ok()) << asked;
        EXPECT_EQ(d.cmd.count, got) << asked;
    }
}

TEST(DtiDecoder, AcceptOneToAcceptMax)
{
    EXPECT_EQ(reject_of(cmd(DTI_OP_ACCEPT, handle_of(3), 0)), Reject::kNoAcceptCount);
    for (auto [asked, got] : {std::pair{1u, 1u}, {DTI_ACCEPT_MAX, DTI_ACCEPT_MAX}, {DTI_ACCEPT_MAX + 1, DTI_ACCEPT_MAX},
                              {0xffffffffu, DTI_ACCEPT_MAX}}) {
        Decoded d = decode_command(cmd(DTI_OP_ACCEPT, handle_of(3), asked, DTI_ACCEPT_WAIT), kBounds);
        ASSERT_TRUE(d.ok()) << asked;
        EXPECT_EQ(d.cmd.count, got);
        EXPECT_EQ(d.cmd.flags, DTI_ACCEPT_WAIT);
    }
}

TEST(DtiDecoder, ShutdownDirections)
{
    struct {
        uint32_t how;
        bool rd, wr;
    } ok[] = {{DTI_SHUT_RD, true, false}, {DTI_SHUT_WR, false, true}, {DTI_SHUT_RDWR, true, true}};
    for (auto &o : ok) {
        Decoded d = decode_command(cmd(DTI_OP_SHUTDOWN, handle_of(3), o.how), kBounds);
        ASSERT_TRUE(d.ok()) << o.how;
        EXPECT_EQ(d.cmd.shut_rd, o.rd);
        EXPECT_EQ(d.cmd.shut_wr, o.wr);
    }
    for (uint32_t how : {uint32_t(DTI_SHUT_RDWR + 1), 0xffffffffu})
        EXPECT_EQ(reject_of(cmd(DTI_OP_SHUTDOWN, handle_of(3), how)), Reject::kBadShutdown) << how;
}

TEST(DtiDecoder, CloseAndAbortTakeNoArguments)
{
    for (uint16_t op : {uint16_t(DTI_OP_CLOSE), uint16_t(DTI_OP_ABORT)})
        EXPECT_TRUE(decode_command(cmd(op, handle_of(3), 0xffffffffu, 0xffffffffu), kBounds).ok()) << op;
}

TEST(DtiDecoder, SocketOptions)
{
    struct {
        uint32_t id;
        Option o;
    } known[] = {{DTI_SO_NODELAY, Option::kNoDelay},         {DTI_SO_CORK, Option::kCork},
                 {DTI_SO_KEEPALIVE, Option::kKeepAlive},     {DTI_SO_KEEPIDLE, Option::kKeepIdleSec},
                 {DTI_SO_KEEPINTVL, Option::kKeepIntvlSec},  {DTI_SO_KEEPCNT, Option::kKeepCnt},
                 {DTI_SO_MAXSEG, Option::kMaxSeg},           {DTI_SO_USER_TIMEOUT, Option::kUserTimeoutMs},
                 {DTI_SO_LINGER, Option::kLingerSec},        {DTI_SO_REUSEADDR, Option::kReuseAddr},
                 {DTI_SO_REUSEPORT, Option::kReusePort},     {DTI_SO_TOS, Option::kTos},
                 {DTI_SO_RCVLOWAT, Option::kRcvLowat},       {DTI_SO_NOTSENT_LOWAT, Option::kNotsentLowat},
                 {DTI_SO_TCLASS, Option::kTclass}, {DTI_SO_MCAST_ALL, Option::kMulticastAll},
                 {DTI_SO_TTL, Option::kTtl}, {DTI_SO_HOPLIMIT, Option::kHopLimit},
                 {DTI_SO_MCAST_TTL, Option::kMulticastTtl}, {DTI_SO_MCAST_HOPS, Option::kMulticastHops},
                 {DTI_SO_MCAST_LOOP, Option::kMulticastLoop}, {DTI_SO_MCAST_LOOP6, Option::kMulticastLoop6}};
    for (uint16_t op : {uint16_t(DTI_OP_SETSOCKOPT), uint16_t(DTI_OP_GETSOCKOPT)}) {
        for (auto &k : known) {
            dti_cmd c = cmd(op, handle_of(3), k.id);
            c.value = -5;
            Decoded d = decode_command(c, kBounds);
            ASSERT_TRUE(d.ok()) << k.id;
            EXPECT_FALSE(d.cmd.ring_option);
            EXPECT_EQ(d.cmd.transport_option, k.o);
            EXPECT_EQ(d.cmd.option, k.id);
            EXPECT_EQ(d.cmd.value, -5);
        }
        for (uint32_t id : {uint32_t(DTI_SO_RCVBUF), uint32_t(DTI_SO_SNDBUF)}) {
            Decoded d = decode_command(cmd(op, handle_of(3), id), kBounds);
            ASSERT_TRUE(d.ok()) << id;
            EXPECT_TRUE(d.cmd.ring_option);
            EXPECT_EQ(d.cmd.option, id);
        }
        for (uint32_t id : {0u, uint32_t(DTI_SO_MCAST_LOOP6) + 1, 0xffffffffu})
            EXPECT_EQ(reject_of(cmd(op, handle_of(3), id)), Reject::kUnknownOption) << id;
    }
}

TEST(DtiDecoder, WatchKeepsOnlyPollBits)
{
    const uint32_t all = DTI_POLLIN | DTI_POLLOUT | DTI_POLLERR | DTI_POLLHUP | DTI_POLLRDHUP;
    Decoded d = decode_command(cmd(DTI_OP_WATCH, handle_of(3), 0xffffffffu), kBounds);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.cmd.flags, all);
    d = decode_command(cmd(DTI_OP_WATCH, handle_of(3), 0), kBounds); // 0: stop watching
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.cmd.flags, 0u);
}

dti_cmd pool_cmd(uint16_t op, uint64_t offset, uint32_t length)
{
    dti_cmd c = cmd(op, handle_of(3), length, DTI_SEND_MORE);
    c.offset = offset;
    return c;
}

TEST(DtiDecoder, PoolRangesStayInsideThePool)
{
    const uint64_t end = kPoolOffset + kPoolSize;
    for (uint16_t op : {uint16_t(DTI_OP_RECV_INTO), uint16_t(DTI_OP_SEND_FROM)}) {
        // Inside, up to the last byte.
        for (auto [off, len] : {std::pair{kPoolOffset, 1u}, {kPoolOffset, uint32_t(kPoolSize)}, {end - 1, 1u},
                                {kPoolOffset + 100, uint32_t(kPoolSize - 100)}}) {
            Decoded d = decode_command(pool_cmd(op, off, len), kBounds);
            ASSERT_TRUE(d.ok()) << op << " " << off << "+" << len;
            EXPECT_EQ(d.cmd.offset, off);
            EXPECT_EQ(d.cmd.length, len);
        }
        // One byte over each end.
        EXPECT_EQ(reject_of(pool_cmd(op, kPoolOffset - 1, 1)), Reject::kBadPoolRange) << op;
        EXPECT_EQ(reject_of(pool_cmd(op, kPoolOffset, uint32_t(kPoolSize) + 1)), Reject::kBadPoolRange) << op;
        EXPECT_EQ(reject_of(pool_cmd(op, end - 1, 2)), Reject::kBadPoolRange) << op;
        EXPECT_EQ(reject_of(pool_cmd(op, end, 1)), Reject::kBadPoolRange) << op;
        EXPECT_EQ(reject_of(pool_cmd(op, 0, 1)), Reject::kBadPoolRange) << op;
        // offset + length wraps around 2^64: still outside.
        EXPECT_EQ(reject_of(pool_cmd(op, ~uint64_t{0}, 2)), Reject::kBadPoolRange) << op;
        EXPECT_EQ(reject_of(pool_cmd(op, ~uint64_t{0} - 0xfffe, 0xffffffffu)), Reject::kBadPoolRange) << op;
        EXPECT_EQ(reject_of(pool_cmd(op, kPoolOffset, 0xffffffffu)), Reject::kBadPoolRange) << op;
    }
    // Only RECV_INTO needs a length: SEND_FROM of nothing completes with 0.
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_RECV_INTO, kPoolOffset, 0)), Reject::kZeroLength);
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_RECV_INTO, end, 0)), Reject::kZeroLength);
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_RECV_INTO, end + 1, 0)), Reject::kBadPoolRange);
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_SEND_FROM, end, 0)), Reject::kNone);
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_SEND_FROM, end + 1, 0)), Reject::kBadPoolRange);
    EXPECT_EQ(decode_command(pool_cmd(DTI_OP_SEND_FROM, kPoolOffset, 1), kBounds).cmd.flags, DTI_SEND_MORE);
}

// RECV_POST names memory of the issuing process: any address but 0, no
// wrap past 2^64 (the kernel checks the rest when the engine writes).
TEST(DtiDecoder, PostedReceiveAddressLengthAndLeast)
{
    const uint64_t top = std::numeric_limits<uint64_t>::max();
    auto post = [](uint64_t addr, uint32_t len, uint32_t least) {
        dti_cmd c = cmd(DTI_OP_RECV_POST, handle_of(3), len, least);
        c.offset = addr;
        return c;
    };
    Decoded d = decode_command(post(0x7f0000001000, 65536, 65536), kBounds);
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d.cmd.signaled);
    EXPECT_EQ(d.cmd.offset, 0x7f0000001000u);
    EXPECT_EQ(d.cmd.length, 65536u);
    EXPECT_EQ(d.cmd.least, 65536u);
    EXPECT_EQ(decode_command(post(4096, 100, 0), kBounds).cmd.least, 1u);     // 0 means 1
    EXPECT_EQ(decode_command(post(4096, 100, 5000), kBounds).cmd.least, 100u); // at most the length
    EXPECT_EQ(reject_of(post(top - 100, 100, 1)), Reject::kNone); // end (exclusive) 2^64 - 1
    EXPECT_EQ(reject_of(post(top - 99, 100, 1)), Reject::kBadAddress); // end 2^64: wraps
    EXPECT_EQ(reject_of(post(top, 0xffffffffu, 1)), Reject::kBadAddress);
    EXPECT_EQ(reject_of(post(0, 100, 1)), Reject::kBadAddress);
    EXPECT_EQ(reject_of(post(4096, 0, 1)), Reject::kZeroLength);
    EXPECT_EQ(reject_of(post(0, 0, 1)), Reject::kZeroLength); // the length first
    EXPECT_EQ(dti::engine::reject_result(Reject::kBadAddress), -EFAULT);
    // The cancel carries nothing and is never answered (the post is).
    dti_cmd cancel = cmd(DTI_OP_RECV_CANCEL);
    cancel.tag = 0xffffffffu;
    d = decode_command(cancel, kBounds);
    EXPECT_TRUE(d.ok());
    EXPECT_FALSE(d.cmd.signaled);
    EXPECT_EQ(reject_of(cmd(DTI_OP_RECV_CANCEL, handle_of(kSockets))), Reject::kBadSocket);
}

// TX_GROW carries the send ring's new size, whatever it is (the engine
// checks it against the slot: cmd_tx_grow), and is never answered.
TEST(DtiDecoder, TxGrowIsUnsignaledAndCarriesItsSize)
{
    for (uint32_t size : {0u, 3u, 8192u, 0x80000000u}) {
        dti_cmd g = cmd(DTI_OP_TX_GROW, handle_of(3), size);
        g.tag = 0xffffffffu;
        Decoded d = decode_command(g, kBounds);
        ASSERT_TRUE(d.ok()) << size;
        EXPECT_FALSE(d.cmd.signaled);
        EXPECT_EQ(d.cmd.length, size);
    }
    EXPECT_EQ(reject_of(cmd(DTI_OP_TX_GROW, handle_of(kSockets), 8192)), Reject::kBadSocket);
}

TEST(DtiDecoder, PoolAtTheTopOfTheAddressRangeDoesNotWrap)
{
    const uint64_t top = std::numeric_limits<uint64_t>::max();
    CommandBounds high{kEntries, kSockets, top - 10, 10};
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_SEND_FROM, top - 1, 1), high), Reject::kNone);
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_SEND_FROM, top - 10, 10), high), Reject::kNone);
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_SEND_FROM, top - 1, 2), high), Reject::kBadPoolRange);
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_SEND_FROM, top, 1), high), Reject::kBadPoolRange);
    CommandBounds none{kEntries, kSockets, kPoolOffset, 0}; // no pool at all
    EXPECT_EQ(reject_of(pool_cmd(DTI_OP_RECV_INTO, kPoolOffset, 1), none), Reject::kBadPoolRange);
}

TEST(DtiDecoder, SendAndReleaseNeedBytes)
{
    for (uint16_t op : {uint16_t(DTI_OP_SEND), uint16_t(DTI_OP_RECV_RELEASE)}) {
        EXPECT_EQ(reject_of(cmd(op, handle_of(3), 0)), Reject::kZeroLength) << op;
        for (uint32_t len : {1u, 0xffffffffu}) {
            Decoded d = decode_command(cmd(op, handle_of(3), len, 0xffffffffu), kBounds);
            ASSERT_TRUE(d.ok()) << op << " " << len;
            EXPECT_EQ(d.cmd.length, len);
            // SEND keeps its known bits (MORE, and TAIL/END: what to take), no others
            EXPECT_EQ(d.cmd.flags, op == DTI_OP_SEND ? DTI_SEND_MORE | DTI_SEND_TAIL | DTI_SEND_END : 0u);
        }
        EXPECT_EQ(reject_of(cmd(op, handle_of(kSockets), 1)), Reject::kBadSocket) << op;
    }
}

TEST(DtiDecoder, DigestFlags)
{
    const uint32_t known = DTI_DIGEST_TX | DTI_DIGEST_CHECK | DTI_DIGEST_CHAIN;
    for (uint32_t flags = 0; flags <= known; flags++) {
        dti_cmd c = cmd(DTI_OP_DIGEST, handle_of(3), flags, 4096);
        c.offset = 0x1234567890ull;
        c.value = int64_t(0xabcdef0012345678ull);
        Decoded d = decode_command(c, kBounds);
        ASSERT_TRUE(d.ok()) << flags;
        EXPECT_EQ(d.cmd.flags, flags);
        EXPECT_EQ(d.cmd.length, 4096u);
        EXPECT_EQ(d.cmd.offset, 0x34567890u); // a position: the free-running 32-bit counter
        EXPECT_EQ(d.cmd.value, 0x12345678);   // a CRC32C
    }
    for (uint32_t flags : {known + 1, 8u, 0x80000000u, 0xffffffffu})
        EXPECT_EQ(reject_of(cmd(DTI_OP_DIGEST, handle_of(3), flags, 1)), Reject::kBadDigestFlags) << flags;
    // The range's length is checked with the stream's position (digest.cc),
    // in that check's own order: here any length passes.
    for (uint32_t len : {0u, 0xffffffffu})
        EXPECT_TRUE(decode_command(cmd(DTI_OP_DIGEST, handle_of(3), 0, len), kBounds).ok()) << len;
}

TEST(DtiDecoder, EveryReasonHasAResultAndAText)
{
    EXPECT_EQ(dti::engine::reject_result(Reject::kBadTag), 0); // never answered
    EXPECT_EQ(dti::engine::reject_result(Reject::kBadSocket), -DTI_E_BAD_HANDLE);
    EXPECT_EQ(dti::engine::reject_result(Reject::kUnknownOp), -EOPNOTSUPP);
    EXPECT_EQ(dti::engine::reject_result(Reject::kUnknownOption), -ENOPROTOOPT);
    for (Reject r : {Reject::kBadPort, Reject::kBadShutdown, Reject::kNoAcceptCount, Reject::kZeroLength,
                     Reject::kBadPoolRange, Reject::kBadDigestFlags})
        EXPECT_EQ(dti::engine::reject_result(r), -EINVAL) << dti::engine::reject_text(r);
    EXPECT_EQ(dti::engine::reject_result(Reject::kBadAddress6), -EINVAL);
    for (int r = 0; r <= int(Reject::kBadAddress6); r++)
        EXPECT_GT(std::string(dti::engine::reject_text(Reject(r))).size(), 1u) << r;
    EXPECT_STREQ(dti::engine::reject_text(Reject::kNone), "ok");
}

} // namespace
