// Accepting a connection the peer reset before the accept (issue 35 item 9,
// packetdrill's mss/mss-getsockopt-tcp_maxseg-server): the DTI engine over
// ppe::MarsTransport on the MARS simulator, the application's side of the
// region played by hand (region_app.h, as in digest_mars_test.cc). MARS keeps
// such a child in its accept queue with its error, as Linux does; the engine
// must hand it to the program in that state: ACCEPT answers its handle, the
// bytes that came before the reset are readable, and the socket says RESET
// with ECONNRESET (libdti: read gives the bytes, then ECONNRESET; poll
// POLLERR|POLLHUP). Before: the engine found the embryo's slot through
// tx_view(), which MARS refuses for a reset socket, aborted the connection
// and the ACCEPT waited for the next one. No root, no DPDK, virtual time.
#include "sim_wire.h"
#include "transport.h"

#include "dti_abi.h"
#include "region_app.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

namespace de = dti::engine;
using mars::sim::SimNet;
using region_test::App;

constexpr uint64_t kSec = 1'000'000'000;
constexpr uint32_t kRing = 16384;

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

class AcceptOverMars : public ::testing::Test {
  protected:
    AcceptOverMars() : net_(config(&rings_)), stack_(&net_.stack(0)), tr_(stack_, now_), app_(limits())
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
            stack_->poll(now_);
        };
    }
    ~AcceptOverMars() override
    {
        rings_.engine = nullptr;
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
        return c;
    }
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
    uint32_t listener()
    {
        const dti_ev s = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, 0, 0, 1));
        EXPECT_GE(s.res, 0);
        const uint32_t l = uint32_t(s.res);
        EXPECT_EQ(run(cmd(DTI_OP_BIND, l, 0, 5000, 2)).res, 0);
        EXPECT_EQ(run(cmd(DTI_OP_LISTEN, l, 8, 0, 3)).res, 0);
        return l;
    }

    ppe::DtiBuffers rings_;
    SimNet net_;
    mars::Stack *stack_;
    uint64_t now_ = 0;
    ppe::MarsTransport tr_;
    App app_;
    std::unique_ptr<de::Server> engine_;
};

TEST_F(AcceptOverMars, ResetBeforeAcceptIsAcceptedResetWithItsBytes)
{
    const uint32_t l = listener();
    mars::Stack &p = net_.stack(1);
    const int64_t c = p.open(9);
    ASSERT_GE(c, 0);
    ASSERT_EQ(p.connect(mars::SockId(c), net_.addr(0, 5000), net_.now()), 0);
    std::vector<uint8_t> data(1000);
    for (size_t i = 0; i < data.size(); i++)
        data[i] = uint8_t(i * 7 + 1);
    size_t sent = 0;
    // Connected, the bytes in the child's receive ring (host 0's stack holds
    // them readable), then the peer resets: all before anyone accepts.
    auto readable_on_0 = [&] {
        uint32_t n = 0;
        stack_->for_each_socket(
            [](mars::SockId, const mars::SockInfo &in, uint64_t, void *arg) { *static_cast<uint32_t *>(arg) += in.rx_readable; },
            &n);
        return n;
    };
    ASSERT_TRUE(net_.run_until(
        [&] {
            if (sent < data.size()) {
                const int64_t w = p.send(mars::SockId(c), data.data() + sent, data.size() - sent);
                if (w > 0)
                    sent += size_t(w);
            }
            return sent == data.size() && readable_on_0() == data.size();
        },
        5 * kSec))
        << "the bytes did not reach the listener's child";
    EXPECT_EQ(__atomic_load_n(&app_.sock(l)->accept_ready, __ATOMIC_ACQUIRE), 1u);
    const uint64_t resets = stack_->stats().tcp_resets_in;
    ASSERT_EQ(p.abort(mars::SockId(c)), 0);
    ASSERT_TRUE(net_.run_until([&] { return stack_->stats().tcp_resets_in > resets; }, 5 * kSec))
        << "the reset did not arrive";

    const dti_ev a = run(cmd(DTI_OP_ACCEPT, l, 1, DTI_ACCEPT_WAIT, 4));
    ASSERT_EQ(a.res, 1) << "the reset connection was not accepted";
    const uint32_t h = a.accepted[0];
    dti_sock_shared *sh = app_.sock(h);
    EXPECT_EQ(__atomic_load_n(&sh->gen, __ATOMIC_ACQUIRE), h >> DTI_SLOT_BITS) << "handle not published";
    EXPECT_TRUE(sh->state & DTI_STATE_RESET) << std::hex << sh->state;
    EXPECT_EQ(sh->error, -ECONNRESET);
    const uint32_t tail = __atomic_load_n(&sh->rx_tail, __ATOMIC_ACQUIRE);
    ASSERT_EQ(tail, data.size()) << "the bytes that came before the reset are not readable";
    std::vector<uint8_t> got(tail);
    for (uint32_t i = 0; i < tail; i++)
        got[i] = app_.rx_ring(h)[(sh->rx_base + i) & (sh->rx_size - 1)];
    EXPECT_EQ(got, data);
    const uint32_t ev = dti_events_of(sh->state, sh->error, tail, 0, 0);
    EXPECT_TRUE(ev & DTI_POLLERR);
    EXPECT_TRUE(ev & DTI_POLLHUP);
    EXPECT_TRUE(ev & DTI_POLLIN);
    // The program reads and closes it; the engine stays sound (the slot
    // goes back, a next connection is accepted).
    app_.push(cmd(DTI_OP_RECV_RELEASE, h, tail));
    EXPECT_EQ(run(cmd(DTI_OP_CLOSE, h, 0, 0, 5)).res, 0);
    const int64_t c2 = p.open(10);
    ASSERT_GE(c2, 0);
    ASSERT_EQ(p.connect(mars::SockId(c2), net_.addr(0, 5000), net_.now()), 0);
    const dti_ev b = run(cmd(DTI_OP_ACCEPT, l, 1, DTI_ACCEPT_WAIT, 6));
    ASSERT_EQ(b.res, 1);
    EXPECT_FALSE(app_.sock(b.accepted[0])->state & DTI_STATE_RESET);
    EXPECT_EQ(engine_->stats().rejected_commands, 0u);
}

} // namespace
