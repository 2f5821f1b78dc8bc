// Payload digests (DTI_OP_DIGEST) with the real stack under the engine: the
// DTI engine over ppe::MarsTransport on the MARS simulator, its rings in a
// region the test plays the application of (commands written by hand, as in
// tests/unit/dti/engine_test.cc). The peer's data reaches MARS lost,
// duplicated and reordered; every range's digest must still equal ISA-L's
// over the bytes the application reads, and every byte must be digested
// exactly once (retransmissions and duplicates never count twice, out-of-order
// bytes only once they are in order). No root, no DPDK, virtual time.
#include "sim_wire.h"
#include "transport.h"

#include "dti_abi.h"
#include "region_app.h"

#include <isa-l/crc.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

namespace {

namespace de = dti::engine;
using mars::sim::SimNet;

constexpr uint64_t kSec = 1'000'000'000;
constexpr uint32_t kRing = 16384;

uint32_t isal_crc32c(const uint8_t *p, size_t n) { return ~crc32_iscsi(const_cast<uint8_t *>(p), int(n), ~0u); }

using region_test::App;

dti_cmd cmd(uint16_t op, uint32_t sock, uint32_t a0 = 0, uint32_t a1 = 0, uint64_t ud = 0)
{
    dti_cmd c{};
    c.op = op;
    c.sock = sock;
    c.arg0 = a0;
    c.arg1 = a1;
    c.user_data = ud;
    return c;
}

class DigestOverMars : public ::testing::Test {
  protected:
    DigestOverMars() : net_(config(&rings_)), stack_(&net_.stack(0)), tr_(stack_, now_), app_(limits())
    {
        std::string why;
        engine_ = de::Server::create(tr_, limits(), &why);
        EXPECT_TRUE(engine_) << why;
        rings_.engine = engine_.get();
        EXPECT_GE(engine_->attach_memory(app_.base(), app_.hdr->region_size, 1), 0);
        net_.own_events[0] = true;
        net_.on_tick = [this] {
            now_ = net_.now();
            engine_->poll();
            if (tick)
                tick();
            engine_->poll();
            // What the commands queued goes out now, as in the PPE's next
            // loop (the simulator only steps to the next deadline).
            stack_->poll(now_);
        };
    }
    ~DigestOverMars() override
    {
        rings_.engine = nullptr; // the stack hands rings back as it goes, after the engine
        engine_.reset();
    }
    static de::Limits limits()
    {
        de::Limits l;
        l.max_contexts = 1;
        l.max_sockets = 8;
        l.cmdq_entries = 64;
        l.evq_entries = 128;
        l.rx_ring_size = l.tx_ring_size = kRing;
        l.pool_size = 4096;
        return l;
    }
    static mars::sim::SimNetConfig config(ppe::DtiBuffers *rings)
    {
        auto c = mars::sim::default_simnet_config();
        c.a.stack.tcp.rcvbuf = c.a.stack.tcp.sndbuf = kRing;
        c.a.rings = rings;
        // Both ways impaired: data segments and the ACKs that clock them.
        for (auto *p : {&c.a_to_b, &c.b_to_a}) {
            p->loss = 0.03;
            p->duplicate = 0.03;
            p->reorder = 0.05;
        }
        return c;
    }
    // Runs a command to its completion (the engine answers within a poll).
    dti_ev run(dti_cmd c)
    {
        const uint32_t tag = app_.push(c);
        dti_ev got{};
        bool done = false;
        EXPECT_TRUE(net_.run_until(
            [&] {
                for (auto &e : app_.take())
                    if (e.kind == DTI_CQE_COMPLETION && e.events == tag) {
                        got = e;
                        done = true;
                    }
                return done;
            },
            5 * kSec));
        return got;
    }
    // A connection from the peer (host 1) accepted by the application.
    void connect_peer(uint32_t *handle, mars::SockId *peer)
    {
        const dti_ev s = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, 0, 0, 1));
        ASSERT_GE(s.res, 0);
        const uint32_t l = uint32_t(s.res);
        ASSERT_EQ(run(cmd(DTI_OP_BIND, l, 0, 5000, 2)).res, 0);
        ASSERT_EQ(run(cmd(DTI_OP_LISTEN, l, 8, 0, 3)).res, 0);
        mars::Stack &p = net_.stack(1);
        const int64_t c = p.open(9);
        ASSERT_GE(c, 0);
        ASSERT_EQ(p.connect(mars::SockId(c), net_.addr(0, 5000), net_.now()), 0);
        const dti_ev a = run(cmd(DTI_OP_ACCEPT, l, 1, DTI_ACCEPT_WAIT, 4));
        ASSERT_EQ(a.res, 1);
        *handle = a.accepted[0];
        *peer = mars::SockId(c);
    }

    ppe::DtiBuffers rings_;
    SimNet net_;
    mars::Stack *stack_;
    uint64_t now_ = 0;
    ppe::MarsTransport tr_;
    App app_;
    std::unique_ptr<de::Server> engine_;
    std::function<void()> tick;
};

// 400 KB from the peer in 3,000-byte frames, eight digest ranges always
// asked ahead of the data, through a lossy, duplicating, reordering link.
TEST_F(DigestOverMars, ReceiveRangesExactUnderLossDuplicationReordering)
{
    uint32_t h = 0;
    mars::SockId peer = 0;
    connect_peer(&h, &peer);
    constexpr size_t kFrame = 3000, kFrames = 133, kTotal = kFrame * kFrames;
    std::vector<uint8_t> data(kTotal);
    mars::sim::pattern_fill(3, 0, data.data(), data.size());

    std::vector<uint8_t> got;
    std::vector<uint32_t> crcs(kFrames, 0);
    std::vector<int> res(kFrames, 1);
    size_t sent = 0, asked = 0, answered = 0;
    uint32_t head = 0; // the application's consumed position
    std::map<uint32_t, size_t> frame_of; // tag -> frame
    tick = [&] {
        if (sent < kTotal) {
            const int64_t w = net_.stack(1).send(peer, data.data() + sent, std::min<size_t>(20000, kTotal - sent));
            if (w > 0)
                sent += size_t(w);
        }
        // Keep eight ranges waiting, named from the consumed position.
        while (asked < kFrames && asked - answered < 8) {
            dti_cmd c = cmd(DTI_OP_DIGEST, h, DTI_DIGEST_RX, kFrame, 100 + asked);
            c.offset = uint32_t(asked * kFrame); // absolute: positions start at 0
            frame_of[app_.push(c)] = asked;
            asked++;
        }
        for (auto &e : app_.take())
            if (e.kind == DTI_CQE_COMPLETION && frame_of.count(e.events)) {
                const size_t f = frame_of[e.events];
                frame_of.erase(e.events);
                res[f] = e.res;
                crcs[f] = uint32_t(e.value);
                answered++;
            }
        // Read what is readable, release it (so the window reopens).
        const uint32_t tail = __atomic_load_n(&app_.sock(h)->rx_tail, __ATOMIC_ACQUIRE);
        const uint32_t base = app_.sock(h)->rx_base;
        const uint32_t n = tail - head;
        for (uint32_t i = 0; i < n; i++)
            got.push_back(app_.rx_ring(h)[(base + head + i) & (kRing - 1)]);
        if (n) {
            app_.push(cmd(DTI_OP_RECV_RELEASE, h, n));
            head += n;
        }
    };
    ASSERT_TRUE(net_.run_until([&] { return answered == kFrames && got.size() == kTotal; }, 120 * kSec))
        << "answered " << answered << " of " << kFrames << ", read " << got.size();
    ASSERT_TRUE(got == data) << "the stream itself differs";
    for (size_t f = 0; f < kFrames; f++) {
        ASSERT_EQ(res[f], 0) << "frame " << f;
        EXPECT_EQ(crcs[f], isal_crc32c(data.data() + f * kFrame, kFrame)) << "frame " << f;
    }
    EXPECT_EQ(engine_->stats().digest_rx_bytes, kTotal) << "a byte digested twice, or not at all";
    const auto &ls = net_.link(1).stats();
    EXPECT_GT(ls.lost, 0u);
    EXPECT_GT(ls.duplicated, 0u);
    EXPECT_GT(ls.reordered, 0u);
    EXPECT_GT(stack_->stats().tcp_ooo_segments, 0u) << "out-of-order arrival was not exercised";
}

// The send direction through the same link: a running (chained) digest of
// everything the application commits, checked against what the peer got.
TEST_F(DigestOverMars, SendRunningDigestExactUnderLoss)
{
    uint32_t h = 0;
    mars::SockId peer = 0;
    connect_peer(&h, &peer);
    std::map<uint32_t, size_t> piece_of; // tag -> piece
    constexpr size_t kPiece = 10000, kPieces = 30, kTotal = kPiece * kPieces;
    std::vector<uint8_t> data(kTotal);
    mars::sim::pattern_fill(4, 0, data.data(), data.size());
    for (size_t i = 0; i < 8; i++) {
        dti_cmd c = cmd(DTI_OP_DIGEST, h, DTI_DIGEST_TX | DTI_DIGEST_CHAIN, kPiece, 200 + i);
        c.offset = uint32_t(i * kPiece);
        piece_of[app_.push(c)] = i;
    }
    size_t asked = 8, answered = 0, put = 0;
    std::vector<uint32_t> crcs(kPieces, 0);
    std::vector<uint8_t> out;
    tick = [&] {
        for (auto &e : app_.take())
            if (e.kind == DTI_CQE_COMPLETION && piece_of.count(e.events)) {
                ASSERT_EQ(e.res, 0);
                crcs[piece_of[e.events]] = uint32_t(e.value);
                piece_of.erase(e.events);
                answered++;
                if (asked < kPieces) {
                    dti_cmd c = cmd(DTI_OP_DIGEST, h, DTI_DIGEST_TX | DTI_DIGEST_CHAIN, kPiece, 200 + asked);
                    c.offset = uint32_t(asked * kPiece);
                    piece_of[app_.push(c)] = asked;
                    asked++;
                }
            }
        // Commit what fits in the send ring.
        const uint32_t released = __atomic_load_n(&app_.sock(h)->tx_head, __ATOMIC_ACQUIRE);
        const uint32_t room = kRing - (uint32_t(put) - released);
        const uint32_t n = uint32_t(std::min<size_t>(room, kTotal - put));
        if (n) {
            const uint32_t base = app_.sock(h)->tx_base;
            for (uint32_t i = 0; i < n; i++)
                app_.tx_ring(h)[(base + put + i) & (kRing - 1)] = data[put + i];
            app_.push(cmd(DTI_OP_SEND, h, n));
            put += n;
        }
        uint8_t buf[65536];
        int64_t r;
        while ((r = net_.stack(1).recv(peer, buf, sizeof buf)) > 0)
            out.insert(out.end(), buf, buf + r);
    };
    ASSERT_TRUE(net_.run_until([&] { return answered == kPieces && out.size() == kTotal; }, 120 * kSec))
        << "answered " << answered << ", peer got " << out.size() << ", rejected " << engine_->stats().rejected_commands;
    ASSERT_TRUE(out == data);
    for (size_t i = 0; i < kPieces; i++)
        EXPECT_EQ(crcs[i], isal_crc32c(data.data(), (i + 1) * kPiece)) << "through piece " << i;
    EXPECT_EQ(engine_->stats().digest_tx_bytes, kTotal);
    EXPECT_GT(net_.link(0).stats().lost, 0u);
}

// Hostile digest commands written straight into the region: refused with
// an error, never a read outside the socket's ring, never a completion lost.
TEST_F(DigestOverMars, HostileRequestsAreRefused)
{
    uint32_t h = 0;
    mars::SockId peer = 0;
    connect_peer(&h, &peer);
    std::vector<uint8_t> data(5000);
    mars::sim::pattern_fill(5, 0, data.data(), data.size());
    ASSERT_EQ(net_.stack(1).send(peer, data.data(), data.size()), int64_t(data.size()));
    ASSERT_TRUE(net_.run_until([&] { return app_.sock(h)->rx_tail == 5000; }, 5 * kSec));
    app_.push(cmd(DTI_OP_RECV_RELEASE, h, 1000)); // the engine holds [1000, 5000) now
    auto digest = [&](uint32_t flags, uint64_t start, uint32_t len) {
        dti_cmd c = cmd(DTI_OP_DIGEST, h, flags, len, 7);
        c.offset = start;
        return run(c);
    };
    EXPECT_EQ(digest(0x80, 1000, 10).res, -EINVAL) << "unknown flag";
    EXPECT_EQ(digest(DTI_DIGEST_RX, 1000, 0).res, -EINVAL) << "empty";
    EXPECT_EQ(digest(DTI_DIGEST_RX, 1000, 0x80000001u).res, -EINVAL) << "too long";
    EXPECT_EQ(digest(DTI_DIGEST_RX, 999, 10).res, -ERANGE) << "released already";
    EXPECT_EQ(digest(DTI_DIGEST_RX, 0xfffffff0u, 10).res, -ERANGE) << "far behind (wrapped)";
    EXPECT_EQ(digest(DTI_DIGEST_RX, 0x7fffffffu, 0x7fffffffu).res, -EINVAL) << "end beyond half the counter";
    dti_cmd bad_handle = cmd(DTI_OP_DIGEST, h ^ (1u << DTI_SLOT_BITS), DTI_DIGEST_RX, 10, 8);
    EXPECT_EQ(run(bad_handle).res, -DTI_E_BAD_HANDLE);
    // The high bits of the 64-bit offset are ignored: positions are 32-bit.
    const dti_ev ok = digest(DTI_DIGEST_RX, (uint64_t{0xdead} << 32) | 1000, 4000);
    EXPECT_EQ(ok.res, 0);
    EXPECT_EQ(uint32_t(ok.value), isal_crc32c(data.data() + 1000, 4000));
}

} // namespace
