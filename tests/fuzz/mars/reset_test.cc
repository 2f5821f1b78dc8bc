// tests/fuzz/mars/reset_test.cc: Stack::reset() leaves nothing stale.
//
// The fuzz target runs every input on one stack that is reset between
// inputs (fuzz_input.h), so a table that reset() forgets to empty would make
// an input's outcome depend on the inputs before it. The corpus replay
// compares what the stack transmits, which misses state an input never
// touches again (a neighbour in the ARP cache the input never sends to).
// Here a stack is dirtied on purpose in every table reset() empties (sockets,
// connection table, listener, timers, out-of-order pool, ARP cache and
// pending frames, events not yet drained, the transmit burst, counters,
// clock, ports), reset, and then probed so that each of those tables shows
// in what it does: the same probe on a freshly created stack must give the
// same frames (ARP requests included), events, counters and sockets.
// Some of what reset() puts back does not show in behaviour (the order of
// the out-of-order pool's free list, an events() drain cut short, the ARP
// generation, the copy markers): StackAccess::stale_state() compares every
// table with what init() leaves, and must find nothing after a reset.
// Registered twice: as configured, and with 8 strands and every payload
// through a copy engine that completes later (MARS_TEST_COPY=deferred, as
// the sim suites), so that copies were in flight before the reset.
#include "raw_peer.h"
#include "testing/stack_access.h"

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>

namespace mars::sim {
namespace {

constexpr uint64_t kMs = 1'000'000;
const MacAddr kBroadcast{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
const uint32_t kNeighbour = ipv4(198, 18, 0, 9); // learned before the reset, by gratuitous ARP
const MacAddr kNeighbourMac = mac(9);

RawPeer::Options options()
{
    RawPeer::Options o;
    o.stack.max_sockets = 16;
    o.stack.ooo_pool_frames = 32;
    o.stack.arp_pending_frames = 8;
    o.stack.tcp.time_wait_ns = 2'000'000'000ull;
    o.ring_slots = 16;
    o.pool_frames = 256;
    o.digest = true;
    return o;
}

std::vector<uint8_t> bytes(size_t n, uint8_t seed)
{
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i++) v[i] = uint8_t(seed + i * 13);
    return v;
}

// Leaves state in every table reset() must empty.
void dirty(RawPeer &p)
{
    Stack &st = p.stack();
    std::string why;
    const SockId listener = p.listen(80, 8);
    ASSERT_NE(listener, kNoSock);
    RawPeer::Conn est;
    ASSERT_NE(p.open_passive(listener, 80, 40000, &est, RawPeer::full_syn_options(0), &why), kNoSock) << why;
    // A second connection waits in the accept queue.
    RawPeer::Conn queued;
    queued.peer_port = 40001;
    queued.stack_port = 80;
    queued.peer_nxt = 777;
    p.send(queued, kSyn);
    for (auto &f : p.take_conn(queued)) {
        if (f.has(kSyn | kAck)) queued.stack_nxt = f.seq + 1;
    }
    p.send(queued, kAck);
    // A neighbour in the ARP cache.
    p.inject(build_arp(ArpSpec{kNeighbourMac, kBroadcast, 1, kNeighbourMac, MacAddr{}, kNeighbour, kNeighbour}));
    // Out-of-order data held in the anonymous pool (two segments: given back,
    // they leave the pool's free list in another order than a new pool's).
    RawPeer::Conn ahead = est;
    ahead.peer_nxt += 1000;
    p.inject(p.seg(ahead, kAck, bytes(300, 1)));
    ahead.peer_nxt += 1000;
    p.inject(p.seg(ahead, kAck, bytes(300, 5)));
    // Data in flight (ring in use, retransmission timer armed), an active
    // open to the learned neighbour, an active open to an unresolved address
    // (a frame waiting for ARP).
    const std::vector<uint8_t> out = bytes(3000, 2);
    ASSERT_EQ(st.send(est.sock, out.data(), out.size()), int64_t(out.size()));
    int64_t a = st.open(300);
    ASSERT_GE(a, 0);
    ASSERT_EQ(st.connect(SockId(a), Endpoint{kNeighbour, 9000}, p.now), 0);
    int64_t b = st.open(301);
    ASSERT_GE(b, 0);
    ASSERT_EQ(st.connect(SockId(b), Endpoint{ipv4(198, 18, 0, 77), 9001}, p.now), 0);
    p.advance(1500 * kMs); // clock moved, timers fired and re-armed, counters counted
    p.take();
    // The neighbour's MAC changes (the ARP generation moves on).
    p.inject(build_arp(ArpSpec{mac(10), kBroadcast, 1, mac(10), MacAddr{}, kNeighbour, kNeighbour}));
    // Last, without a poll: data on two connections whose events are drained
    // only in part (one of two), and whose ACKs are still to be sent.
    p.input_only({build_tcp(p.seg(est, kAck | kPsh, bytes(200, 3)))});
    p.input_only({build_tcp(p.seg(queued, kAck | kPsh, bytes(100, 4)))});
    SockEvent ev[1];
    EXPECT_EQ(st.events(ev, 1), 1);
    // A socket closed, its kEvClosed not drained yet.
    ASSERT_EQ(st.abort(SockId(b)), 0);
}

struct Probe {
    uint64_t tx_digest = 0;
    StackStats stats{};
    std::string events, sockets, frames;
};

void add_socket(SockId id, const SockInfo &i, uint64_t user, void *arg)
{
    auto *s = static_cast<std::string *>(arg);
    std::ostringstream o;
    o << std::hex << id << std::dec << " user " << user << " state " << int(i.state) << " local " << i.local.ip << ":"
      << i.local.port << " remote " << i.remote.ip << ":" << i.remote.port << "\n";
    *s += o.str();
}

// What a stack does from its initial state, given the same frames and calls:
// each step shows one table that reset() empties.
Probe probe(RawPeer &p)
{
    Stack &st = p.stack();
    Probe r;
    auto note_frames = [&]() {
        for (auto &f : p.take()) r.frames += f.describe() + "\n";
    };
    // Events left from before: none on a fresh stack.
    p.poll();
    note_frames();
    // The old listener's port and the old connection's 4-tuple: no socket
    // on a fresh stack, so RSTs.
    RawPeer::Conn old;
    old.peer_port = 40002;
    old.stack_port = 80;
    old.peer_nxt = 5000;
    p.inject(p.seg(old, kSyn));
    old.peer_port = 40000;
    old.stack_nxt = 1;
    p.inject(p.seg(old, kAck | kPsh, bytes(10, 4)));
    note_frames();
    // Connecting to the neighbour: a fresh stack does not know its MAC and
    // asks first; the first ephemeral port is the configured one.
    int64_t s = st.open(400);
    if (s >= 0) st.connect(SockId(s), Endpoint{kNeighbour, 9000}, p.now);
    p.poll();
    note_frames();
    // A listener and a connection on the same numbers as before.
    const SockId listener = p.listen(80, 8);
    RawPeer::Conn est;
    std::string why;
    p.open_passive(listener, 80, 40000, &est, RawPeer::full_syn_options(0), &why);
    note_frames();
    // Time passes: only this probe's timers fire.
    p.advance(5000 * kMs);
    note_frames();
    for (auto &[id, bits] : p.take_events()) r.events += std::to_string(id) + ":" + std::to_string(bits) + " ";
    st.for_each_socket(add_socket, &r.sockets);
    r.stats = st.stats();
    r.tx_digest = p.tx_digest();
    return r;
}

void expect_same(const Probe &fresh, const Probe &reset)
{
    EXPECT_EQ(fresh.frames, reset.frames);
    EXPECT_EQ(fresh.events, reset.events);
    EXPECT_EQ(fresh.sockets, reset.sockets);
    EXPECT_EQ(fresh.tx_digest, reset.tx_digest) << "the frames sent differ in their bytes";
    const uint64_t *f = reinterpret_cast<const uint64_t *>(&fresh.stats);
    const uint64_t *r = reinterpret_cast<const uint64_t *>(&reset.stats);
    static_assert(sizeof(StackStats) % sizeof(uint64_t) == 0);
    for (size_t i = 0; i < sizeof(StackStats) / sizeof(uint64_t); i++)
        EXPECT_EQ(f[i], r[i]) << "StackStats word " << i << " differs";
}

TEST(MarsReset, ResetStackBehavesAsAFreshOne)
{
    RawPeer fresh_peer(options());
    const Probe fresh = probe(fresh_peer);
    // (The peer answers ARP requests itself, so they show in the counters
    // and the transmitted bytes, not in the frames captured.)
    ASSERT_GE(fresh.stats.arp_requests_out, 1u) << "the probe must make a fresh stack ask for the neighbour";

    RawPeer used(options());
    dirty(used);
    used.restart(); // Stack::reset(), virtual time and capture start over
    expect_same(fresh, probe(used));
}

TEST(MarsReset, ResetLeavesEveryTableAsNew)
{
    RawPeer::Options o = options();
    o.introduce = false; // the stack as Stack::create left it
    RawPeer p(o);
    EXPECT_EQ(StackAccess::stale_state(p.stack()), "") << "the check itself must accept a new stack";
    dirty(p);
    // Not vacuous: the dirtied stack differs from a new one in every table
    // (but the output list, the transmit burst and the batch of frames to
    // release, which every call empties before it returns).
    const std::string dirty_state = StackAccess::stale_state(p.stack());
    for (const char *table : {"sockets", "connection table", "listeners", "timers", "out-of-order pool", "events", "ARP",
                              "clock", "counters", "ports"})
        EXPECT_NE(dirty_state.find(table), std::string::npos) << table << " not dirtied: " << dirty_state;
    p.reset_stack();
    EXPECT_EQ(StackAccess::stale_state(p.stack()), "");
}

TEST(MarsReset, ResetTwiceAndAfterItsOwnProbe)
{
    RawPeer fresh_peer(options());
    const Probe fresh = probe(fresh_peer);
    RawPeer used(options());
    for (int round = 0; round < 3; round++) {
        SCOPED_TRACE(round);
        dirty(used);
        used.restart();
        used.restart();
        expect_same(fresh, probe(used));
        used.restart();
    }
}

} // namespace
} // namespace mars::sim
