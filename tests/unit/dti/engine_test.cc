// The engine against hand-written (and hand-corrupted) regions: validation,
// isolation between applications, the wake word.
#include "test_util.h"

#include "dti_abi.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <vector>

namespace dti::test {
namespace {

using engine::Server;
using engine::Limits;

// A region in plain memory, served through attach_memory(): the test plays
// the application by writing commands into it directly.
struct FakeApp {
    std::vector<uint8_t> mem;
    dti_region_header *hdr;
    int id = -1;
    uint32_t tag = 0;

    FakeApp(Server &e, const Limits &l)
    {
        uint64_t size = engine::region_bytes(l);
        mem.assign(size + 64, 0);
        // 64-byte alignment like a real mapping
        uint8_t *base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
        engine::layout_region(base, size, l);
        hdr = reinterpret_cast<dti_region_header *>(base);
        id = e.attach_memory(base, size, 2);
    }
    uint8_t *base() { return reinterpret_cast<uint8_t *>(hdr); }
    dti_qp_header *qp(uint32_t i) { return reinterpret_cast<dti_qp_header *>(base() + hdr->ctx_offset + hdr->ctx_stride * i); }
    dti_cmd *cmds(uint32_t i) { return reinterpret_cast<dti_cmd *>(reinterpret_cast<uint8_t *>(qp(i)) + sizeof(dti_qp_header)); }
    dti_ev *evs(uint32_t i) { return reinterpret_cast<dti_ev *>(reinterpret_cast<uint8_t *>(cmds(i)) + sizeof(dti_cmd) * hdr->cmdq_entries); }
    dti_sock_shared *sock(uint32_t slot) { return reinterpret_cast<dti_sock_shared *>(base() + hdr->sock_offset) + slot; }

    void push(uint32_t q, dti_cmd c)
    {
        if (c.op != DTI_OP_SEND && c.op != DTI_OP_RECV_RELEASE)
            c.tag = tag++ % hdr->cmdq_entries;
        dti_qp_header *h = qp(q);
        dti_cmd *slot = &cmds(q)[h->cmd_prod & (hdr->cmdq_entries - 1)];
        c.stamp = 0;
        *slot = c;
        __atomic_store_n(&slot->stamp, h->cmd_prod + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&h->cmd_prod, h->cmd_prod + 1, __ATOMIC_SEQ_CST);
    }
    // Takes every entry the engine published.
    std::vector<dti_ev> take(uint32_t q)
    {
        std::vector<dti_ev> out;
        dti_qp_header *h = qp(q);
        uint32_t prod = __atomic_load_n(&h->ev_prod, __ATOMIC_ACQUIRE);
        while (h->ev_cons != prod) {
            out.push_back(evs(q)[h->ev_cons & (hdr->evq_entries - 1)]);
            h->ev_cons++;
        }
        return out;
    }
    uint32_t state() const { return __atomic_load_n(&hdr->engine_state, __ATOMIC_ACQUIRE); }
};

dti_cmd cmd(uint16_t op, uint32_t sock = DTI_SOCK_INVALID, uint32_t a0 = 0, uint32_t a1 = 0, uint64_t ud = 0)
{
    dti_cmd c{};
    c.op = op;
    c.sock = sock;
    c.arg0 = a0;
    c.arg1 = a1;
    c.user_data = ud;
    return c;
}

class EngineRegion : public ::testing::Test {
  protected:
    void SetUp() override
    {
        lim_ = small_limits();
        std::string why;
        engine_ = Server::create(tr_, lim_, &why);
        ASSERT_TRUE(engine_) << why;
        tr_.set_provider(engine_.get());
    }
    // Creates a listening socket and a connected pair inside app `a`.
    uint32_t socket_in(FakeApp &a)
    {
        a.push(0, cmd(DTI_OP_SOCKET));
        engine_->poll();
        auto ev = a.take(0);
        EXPECT_EQ(ev.size(), 1u);
        EXPECT_GE(ev[0].res, 0);
        return uint32_t(ev[0].res);
    }
    fixture::LoopbackTransport tr_;
    Limits lim_;
    std::unique_ptr<Server> engine_;
};

TEST_F(EngineRegion, ValidCommandsComplete)
{
    FakeApp a(*engine_, lim_);
    ASSERT_GE(a.id, 0);
    uint32_t s = socket_in(a);
    EXPECT_EQ(a.sock(s & DTI_SLOT_MASK)->gen, s >> DTI_SLOT_BITS);
    a.push(0, cmd(DTI_OP_LISTEN, s, 4));
    engine_->poll();
    auto ev = a.take(0);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].res, 0);
    EXPECT_TRUE(a.sock(s & DTI_SLOT_MASK)->state & DTI_STATE_LISTENING);
}

TEST_F(EngineRegion, GarbageCommandsAreAnsweredNotObeyed)
{
    FakeApp a(*engine_, lim_);
    uint32_t s = socket_in(a);
    std::vector<dti_cmd> bad = {
        cmd(0),                                   // no such op
        cmd(200, s),                              // no such op, valid socket
        cmd(DTI_OP_LISTEN, 0x7fffffff),           // slot out of range
        cmd(DTI_OP_LISTEN, s ^ (1u << DTI_SLOT_BITS)), // wrong generation
        cmd(DTI_OP_BIND, s, 1, 70000),            // port out of range
        cmd(DTI_OP_ACCEPT, s, 0),                 // not listening, max 0
        cmd(DTI_OP_SHUTDOWN, s, 9),               // bad how
        cmd(DTI_OP_SETSOCKOPT, s, 0xdead),        // unknown option
    };
    dti_cmd recv_into = cmd(DTI_OP_RECV_INTO, s, 100);
    recv_into.offset = 0; // the header, not the pool
    bad.push_back(recv_into);
    dti_cmd send_from = cmd(DTI_OP_SEND_FROM, s, 0xffffffff);
    send_from.offset = a.hdr->pool_offset; // longer than the pool
    bad.push_back(send_from);
    for (auto &c : bad)
        a.push(0, c);
    engine_->poll();
    auto ev = a.take(0);
    ASSERT_EQ(ev.size(), bad.size());
    for (auto &e : ev)
        EXPECT_LT(e.res, 0) << "op " << e.res;
    EXPECT_EQ(a.state(), uint32_t(DTI_ENGINE_ALIVE));
    // Unsignaled data commands on a socket with nothing to send/consume are
    // dropped without an answer and counted.
    uint64_t rejected = engine_->stats().rejected_commands;
    a.push(0, cmd(DTI_OP_SEND, s, 1000));
    a.push(0, cmd(DTI_OP_RECV_RELEASE, s, 1000));
    engine_->poll();
    EXPECT_TRUE(a.take(0).empty());
    EXPECT_EQ(engine_->stats().rejected_commands, rejected + 2);
}

// TX_GROW's size comes from shared memory: one that is not a larger power
// of two within the slot's reserve is refused and counted, the ring keeps
// its size, nothing is answered but tx_grow_ack, and the engine goes on; a
// good one grows the ring (tx_size, stored before the answer).
TEST_F(EngineRegion, HostileTxGrowIsRefusedAndCounted)
{
    Limits l = lim_;
    l.tx_ring_max = 4 * l.tx_ring_size;
    std::string why;
    engine_ = Server::create(tr_, l, &why);
    ASSERT_TRUE(engine_) << why;
    tr_.set_provider(engine_.get());
    FakeApp a(*engine_, l);
    ASSERT_GE(a.id, 0);
    const uint32_t ls = socket_in(a), cs = socket_in(a);
    a.push(0, cmd(DTI_OP_BIND, ls, 0x7f000001, 0));
    a.push(0, cmd(DTI_OP_LISTEN, ls, 4));
    engine_->poll();
    const uint16_t port = a.sock(ls & DTI_SLOT_MASK)->local_port;
    ASSERT_NE(port, 0);
    a.push(0, cmd(DTI_OP_CONNECT, cs, 0x7f000001, port));
    for (int i = 0; i < 10 && !(a.sock(cs & DTI_SLOT_MASK)->state & DTI_STATE_CONNECTED); i++)
        engine_->poll();
    dti_sock_shared *sh = a.sock(cs & DTI_SLOT_MASK);
    ASSERT_TRUE(sh->state & DTI_STATE_CONNECTED);
    a.take(0);
    const uint32_t size = l.tx_ring_size;
    EXPECT_EQ(sh->tx_size, size);
    const uint32_t hostile[] = {0, 3, size, size / 2, size + 4096, 8 * size, 0x80000000u, 0xffffffffu};
    for (uint32_t v : hostile)
        a.push(0, cmd(DTI_OP_TX_GROW, cs, v));
    a.push(0, cmd(DTI_OP_TX_GROW, ls, 2 * size)); // a listener has no send ring
    engine_->poll();
    EXPECT_TRUE(a.take(0).empty()) << "TX_GROW is answered in the socket table only";
    EXPECT_EQ(engine_->stats().tx_grow_refusals, std::size(hostile) + 1);
    EXPECT_EQ(engine_->stats().tx_ring_grows, 0u);
    EXPECT_EQ(sh->tx_size, size);
    EXPECT_EQ(sh->tx_grow_ack, uint32_t(std::size(hostile)));
    EXPECT_EQ(tr_.tx_grow_calls(), 0u) << "the engine refuses them itself, before the transport";
    EXPECT_EQ(a.state(), uint32_t(DTI_ENGINE_ALIVE));
    // A good one: four times the ring (the reserve), in one step.
    a.push(0, cmd(DTI_OP_TX_GROW, cs, 4 * size));
    engine_->poll();
    EXPECT_EQ(engine_->stats().tx_ring_grows, 1u);
    EXPECT_EQ(tr_.tx_grow_calls(), 1u);
    EXPECT_EQ(sh->tx_size, 4 * size);
    EXPECT_EQ(sh->tx_grow_ack, uint32_t(std::size(hostile)) + 1);
}

TEST_F(EngineRegion, CorruptConsumerIndexBreaksOnlyThatApp)
{
    FakeApp a(*engine_, lim_), b(*engine_, lim_);
    socket_in(b);
    // a claims to have consumed entries that were never produced; the engine
    // finds out when it next needs room, and stops serving a alone.
    a.qp(0)->ev_cons = 0x80000000u;
    for (uint32_t i = 0; i < lim_.evq_entries + 1 && a.state() == DTI_ENGINE_ALIVE; i++) {
        a.push(0, cmd(DTI_OP_NOP));
        engine_->poll();
    }
    EXPECT_EQ(a.state(), uint32_t(DTI_ENGINE_BROKEN));
    EXPECT_EQ(a.hdr->broken_reason, DTI_E_BROKEN);
    EXPECT_EQ(engine_->stats().broken_regions, 1u);
    // b is served as before.
    b.push(0, cmd(DTI_OP_NOP, DTI_SOCK_INVALID, 0, 0, 5));
    engine_->poll();
    auto ev = b.take(0);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].res, 0);
    EXPECT_EQ(b.state(), uint32_t(DTI_ENGINE_ALIVE));
}

TEST_F(EngineRegion, ForgedProducerIndexOrStampsAreIgnored)
{
    FakeApp a(*engine_, lim_);
    uint64_t before = engine_->stats().commands;
    // A producer index far ahead, and a slot whose stamp is from nowhere.
    __atomic_store_n(&a.qp(0)->cmd_prod, 0x12345678u, __ATOMIC_SEQ_CST);
    a.cmds(0)[1].stamp = 2;
    engine_->poll();
    EXPECT_EQ(engine_->stats().commands, before);
    EXPECT_EQ(a.state(), uint32_t(DTI_ENGINE_ALIVE));
    // Nor does it keep the engine from sleeping.
    EXPECT_TRUE(engine_->prepare_sleep());
    engine_->end_sleep();
}

TEST_F(EngineRegion, IgnoringCreditsIsBackpressureNotLoss)
{
    FakeApp a(*engine_, lim_);
    // Fill the event queue completely without consuming, then go on.
    uint32_t total = lim_.evq_entries + 10;
    uint32_t done = 0, seen = 0;
    for (int round = 0; round < 100 && seen < total; round++) {
        while (done < total && a.qp(0)->cmd_prod - __atomic_load_n(&a.qp(0)->cmd_cons, __ATOMIC_ACQUIRE) < lim_.cmdq_entries) {
            a.push(0, cmd(DTI_OP_NOP, DTI_SOCK_INVALID, 0, 0, done));
            done++;
        }
        engine_->poll();
        if (round % 3 == 2)
            seen += uint32_t(a.take(0).size()); // reap only now and then
    }
    seen += uint32_t(a.take(0).size());
    engine_->poll();
    seen += uint32_t(a.take(0).size());
    EXPECT_EQ(a.state(), uint32_t(DTI_ENGINE_ALIVE));
    EXPECT_EQ(seen, total);
}

TEST_F(EngineRegion, RandomCommandBytesNeverCrashAndStayContained)
{
    FakeApp a(*engine_, lim_), b(*engine_, lim_);
    socket_in(a);
    uint32_t sb = socket_in(b);
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        dti_cmd c{};
        auto *w = reinterpret_cast<uint32_t *>(&c);
        for (size_t k = 0; k < sizeof c / 4; k++)
            w[k] = uint32_t(rand_r(&seed));
        if (i % 3 == 0)
            c.op = uint16_t(c.op % 20); // mostly valid ops with garbage arguments
        if (i % 5 == 0)
            c.sock = (c.sock & 0x3f) | (1u << DTI_SLOT_BITS);
        a.push(0, c);
        if (i % 32 == 31) {
            engine_->poll();
            a.take(0);
        }
    }
    engine_->poll();
    b.push(0, cmd(DTI_OP_LISTEN, sb, 1, 0, 1));
    engine_->poll();
    auto ev = b.take(0);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].res, 0);
}

TEST_F(EngineRegion, ArmedContextIsWokenOnceAndUnarmedNever)
{
    FakeApp a(*engine_, lim_);
    engine_->clear_wakeups();
    a.push(0, cmd(DTI_OP_NOP));
    engine_->poll();
    EXPECT_TRUE(engine_->wakeups().empty()); // not armed: no syscall for it
    a.take(0);
    __atomic_store_n(&a.qp(0)->armed, 1u, __ATOMIC_SEQ_CST);
    a.push(0, cmd(DTI_OP_NOP));
    a.push(0, cmd(DTI_OP_NOP));
    engine_->poll();
    // attach_memory has no eventfds, but the wake word was consumed: the
    // engine swapped it back to 0 (and would have listed the fd).
    EXPECT_EQ(__atomic_load_n(&a.qp(0)->armed, __ATOMIC_SEQ_CST), 0u);
    EXPECT_EQ(a.take(0).size(), 2u);
}

TEST_F(EngineRegion, SleepIsRefusedWhileCommandsWait)
{
    FakeApp a(*engine_, lim_);
    a.push(0, cmd(DTI_OP_NOP));
    EXPECT_FALSE(engine_->prepare_sleep());
    EXPECT_EQ(a.hdr->engine_sleeping, 0u);
    engine_->poll();
    EXPECT_TRUE(engine_->prepare_sleep());
    EXPECT_EQ(a.hdr->engine_sleeping, 1u); // apps now ring the doorbell
    engine_->end_sleep();
    EXPECT_EQ(a.hdr->engine_sleeping, 0u);
}

TEST(EngineLimits, UnusableLimitsAreRejectedWithAReason)
{
    fixture::LoopbackTransport tr;
    Limits l = small_limits();
    l.cmdq_entries = 100; // not a power of two
    std::string why;
    EXPECT_EQ(Server::create(tr, l, &why), nullptr);
    EXPECT_NE(why.find("power of two"), std::string::npos);
}

} // namespace
} // namespace dti::test
