// MARS under several engines (StackConfig::steer, steer6, owner_of): an
// active open, IPv4 or IPv6, takes only ephemeral ports whose flow its engine
// owns; a SO_REUSEPORT
// group spreads incoming connections over its members by a hash of the
// 4-tuple (every member gets some, the same flow always the same member);
// and only sockets of one owner (uid) may share a port.
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace mars::sim {
namespace {

// A stand-in for the PPE's dti_flow_owner: any function of the 4-tuple.
uint32_t toy_owner(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, void *arg)
{
    const uint32_t n = *static_cast<uint32_t *>(arg);
    return ((lip ^ rip) + lport * 31u + rport) % n;
}

uint32_t never_me(uint32_t, uint16_t, uint32_t, uint16_t, void *) { return 7; }

// The same over IPv6 (StackConfig::steer6; the PPE's is dti_flow_owner6).
uint32_t toy_owner6(const uint8_t *lip, uint16_t lport, const uint8_t *rip, uint16_t rport, void *arg)
{
    const uint32_t n = *static_cast<uint32_t *>(arg);
    return ((lip[15] ^ rip[15]) + lport * 31u + rport) % n;
}

// user tag -> owner: the tag's high 32 bits (the test's "uid").
uint32_t uid_of_tag(uint64_t user, void *) { return uint32_t(user >> 32); }

TEST(MarsEngines, EphemeralPortsAreOnesThisEngineOwns)
{
    static uint32_t n = 3;
    RawPeer::Options o;
    o.stack.engine = 2;
    o.stack.steer = toy_owner;
    o.stack.steer_arg = &n;
    RawPeer peer(o);
    std::set<uint16_t> ports;
    for (int i = 0; i < 40; i++) {
        const int64_t s = peer.stack().open(1);
        ASSERT_GE(s, 0);
        ASSERT_EQ(peer.stack().connect(SockId(s), {peer.peer_ip, 80}, peer.now), 0);
        peer.poll();
        auto syns = peer.take_tcp();
        ASSERT_EQ(syns.size(), 1u);
        EXPECT_EQ(toy_owner(peer.stack_ip, syns[0].sport, peer.peer_ip, 80, &n), 2u)
            << "port " << syns[0].sport << " belongs to another engine";
        ports.insert(syns[0].sport);
    }
    EXPECT_EQ(ports.size(), 40u) << "every connection its own port";
}

TEST(MarsEngines, Ipv6EphemeralPortsAreOnesThisEngineOwns)
{
    static uint32_t n = 3;
    Ip6Addr ours{}, theirs{};
    ours.b[0] = theirs.b[0] = 0x20, ours.b[1] = theirs.b[1] = 0x01, ours.b[3] = theirs.b[3] = 0x02;
    ours.b[15] = 1, theirs.b[15] = 2;
    RawPeer::Options o;
    o.stack.engine = 2;
    o.stack.steer = toy_owner;
    o.stack.steer6 = toy_owner6;
    o.stack.steer_arg = &n;
    o.stack.addr6[0] = Ip6Prefix{ours, 64};
    o.stack.n_addr6 = 1;
    RawPeer peer(o);
    peer.poll();
    peer.stack().announce(peer.now); // DAD: a lone stack, preferred a second later
    peer.advance(2'000'000'000ull);
    std::set<uint16_t> ports;
    for (int i = 0; i < 40; i++) {
        const int64_t s = peer.stack().open(1);
        ASSERT_GE(s, 0);
        ASSERT_EQ(peer.stack().connect6(SockId(s), Endpoint6{theirs, 80}, peer.now), 0);
        SockInfo si;
        ASSERT_EQ(peer.stack().info(SockId(s), &si), 0);
        ASSERT_TRUE(si.ipv6);
        EXPECT_EQ(toy_owner6(ours.b, si.local6.port, theirs.b, 80, &n), 2u)
            << "port " << si.local6.port << " belongs to another engine";
        ports.insert(si.local6.port);
    }
    EXPECT_EQ(ports.size(), 40u) << "every connection its own port";
}

TEST(MarsEngines, NoPortThisEngineOwnsMeansAddressNotAvailable)
{
    RawPeer::Options o;
    o.stack.engine = 0;
    o.stack.steer = never_me;
    RawPeer peer(o);
    const int64_t s = peer.stack().open(1);
    ASSERT_GE(s, 0);
    EXPECT_EQ(peer.stack().connect(SockId(s), {peer.peer_ip, 80}, peer.now), -EADDRNOTAVAIL);
}

// Completes a handshake from peer_port to port 8080 and returns which of the
// listeners has it waiting (-1: none or several).
int landed_on(RawPeer &peer, const std::vector<SockId> &members, uint16_t peer_port)
{
    RawPeer::Conn c;
    c.peer_port = peer_port;
    c.stack_port = 8080;
    c.peer_nxt = 1000u + peer_port;
    TcpSpec syn = peer.seg(c, kSyn);
    syn.opts.mss = 1460;
    c.peer_nxt++;
    peer.inject(syn);
    auto got = peer.take_conn(c);
    if (got.size() != 1 || !got[0].has(kSyn | kAck)) return -1;
    peer.send(c, kAck);
    int where = -1;
    for (size_t m = 0; m < members.size(); m++) {
        const int64_t a = peer.stack().accept(members[m], 500 + peer_port);
        if (a < 0) continue;
        if (where >= 0) return -1;
        where = int(m);
        peer.stack().abort(SockId(a));
        peer.poll();
        peer.take_tcp(); // the RST
    }
    return where;
}

TEST(MarsEngines, ReusePortGroupSpreadsByFlowHash)
{
    RawPeer::Options o;
    o.ring_slots = 512;
    RawPeer peer(o);
    std::vector<SockId> members;
    for (int m = 0; m < 4; m++) {
        const int64_t s = peer.stack().open(uint64_t(1000) << 32 | uint64_t(m + 1));
        ASSERT_GE(s, 0);
        ASSERT_EQ(peer.stack().set_option(SockId(s), SockOpt::kReusePort, 1), 0);
        ASSERT_EQ(peer.stack().bind(SockId(s), {0, 8080}), 0) << "member " << m;
        ASSERT_EQ(peer.stack().listen(SockId(s), 256), 0);
        members.push_back(SockId(s));
    }
    std::map<int, int> per_member;
    for (uint16_t p = 20000; p < 20200; p++) {
        const int m = landed_on(peer, members, p);
        ASSERT_GE(m, 0) << "peer port " << p;
        per_member[m]++;
    }
    for (int m = 0; m < 4; m++)
        EXPECT_GE(per_member[m], 25) << "member " << m << " of 4 got " << per_member[m] << " of 200 connections";
    // The choice is a function of the flow: the same 4-tuple again (after
    // the abort freed it) lands on the same member.
    for (uint16_t p = 20000; p < 20010; p++) {
        const int first = landed_on(peer, members, uint16_t(p + 1000));
        EXPECT_EQ(landed_on(peer, members, uint16_t(p + 1000)), first) << "peer port " << p + 1000;
    }
}

TEST(MarsEngines, ReusePortOnlyAmongOneOwner)
{
    RawPeer::Options o;
    o.stack.owner_of = uid_of_tag;
    RawPeer peer(o);
    auto reuse_listener = [&](uint32_t uid, uint16_t port) -> int {
        const int64_t s = peer.stack().open(uint64_t(uid) << 32 | 1);
        if (s < 0) return int(s);
        peer.stack().set_option(SockId(s), SockOpt::kReusePort, 1);
        if (int rc = peer.stack().bind(SockId(s), {0, port}); rc != 0) return rc;
        return peer.stack().listen(SockId(s), 16);
    };
    EXPECT_EQ(reuse_listener(1000, 9000), 0);
    EXPECT_EQ(reuse_listener(1000, 9000), 0) << "same uid: joins the group";
    EXPECT_EQ(reuse_listener(1001, 9000), -EADDRINUSE) << "another uid may not join (Linux: same effective uid)";
    EXPECT_EQ(reuse_listener(1001, 9001), 0) << "another port is free for it";
}

} // namespace
} // namespace mars::sim
