// libdti on a PPE with several engines (the fixture PPE runs two): sockets
// spread over the engines, a listener is one handle over a group of
// listeners (one per engine), waiting accepts and watches cover every engine,
// handles and pool buffers name their engine.
#include "test_util.h"

#include "dti_abi.h"

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace dti::test {
namespace {

class DtiEngines : public Attached {
  protected:
    void SetUp() override { start(small_limits(), 2); }

    static uint32_t engine_of(dti_sock_t s) { return s >> DTI_ENGINE_SHIFT; }

    // A new socket of this context that lives on `engine` (sockets spread
    // over the engines in turn); the others made on the way are closed.
    dti_sock_t socket_on(uint32_t engine)
    {
        for (int i = 0; i < 8; i++) {
            int s = dti_socket(c_);
            EXPECT_GE(s, 0) << dti_strerror(s);
            if (s < 0)
                break;
            if (engine_of(dti_sock_t(s)) == engine)
                return dti_sock_t(s);
            EXPECT_EQ(dti_close(c_, dti_sock_t(s)), 0);
        }
        ADD_FAILURE() << "no socket on engine " << engine;
        return DTI_SOCK_INVALID;
    }

    dti_sock_t connect_from(uint32_t engine, uint16_t port)
    {
        dti_sock_t s = socket_on(engine);
        dti_addr to{0x7f000001, port};
        EXPECT_EQ(dti_connect(c_, s, &to, 5000), 0);
        return s;
    }
};

TEST_F(DtiEngines, AttachmentHasAQueuePairAndALinkOnEveryEngine)
{
    EXPECT_EQ(ppe_->attachments(0), 1u);
    EXPECT_EQ(ppe_->attachments(1), 1u);
    std::set<uint32_t> engines;
    for (int i = 0; i < 4; i++) {
        int s = dti_socket(c_);
        ASSERT_GE(s, 0);
        engines.insert(engine_of(dti_sock_t(s)));
    }
    EXPECT_EQ(engines, (std::set<uint32_t>{0, 1})); // a context spreads its sockets
}

TEST_F(DtiEngines, ListenerAcceptsConnectionsOfEveryEngineThroughOneHandle)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    std::vector<dti_sock_t> clients;
    for (uint32_t i = 0; i < 4; i++)
        clients.push_back(connect_from(i % 2, port));
    std::set<uint32_t> engines;
    std::vector<dti_sock_t> served;
    for (int i = 0; i < 4; i++) {
        int s = dti_accept(c_, l, nullptr, 5000);
        ASSERT_GE(s, 0) << dti_strerror(s);
        served.push_back(dti_sock_t(s));
        engines.insert(engine_of(dti_sock_t(s)));
    }
    EXPECT_EQ(engines, (std::set<uint32_t>{0, 1}));
    EXPECT_EQ(dti_accept(c_, l, nullptr, 0), -ETIMEDOUT);
    // Each connection carries its own bytes, both ways, on its own engine.
    for (size_t i = 0; i < clients.size(); i++) {
        std::string msg = "client " + std::to_string(i);
        ASSERT_EQ(dti_send_all(c_, clients[i], msg.data(), msg.size(), 5000), ssize_t(msg.size()));
    }
    std::set<std::string> got;
    for (dti_sock_t s : served) {
        char buf[64] = {};
        ssize_t n = dti_recv_wait(c_, s, buf, sizeof buf, 5000);
        ASSERT_GT(n, 0);
        got.insert(std::string(buf, size_t(n)));
        ASSERT_EQ(dti_send_all(c_, s, buf, size_t(n), 5000), n);
    }
    EXPECT_EQ(got, (std::set<std::string>{"client 0", "client 1", "client 2", "client 3"}));
    for (size_t i = 0; i < clients.size(); i++) {
        char buf[64] = {};
        ssize_t n = dti_recv_wait(c_, clients[i], buf, sizeof buf, 5000);
        EXPECT_EQ(std::string(buf, size_t(n > 0 ? n : 0)), "client " + std::to_string(i));
    }
}

TEST_F(DtiEngines, WatchOnTheListenerReportsEveryEnginesConnectionsAsTheListener)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    ASSERT_EQ(dti_prep_watch(c_, l, DTI_POLLIN, 5), 0);
    dti_submit(c_);
    dti_cqe e;
    ASSERT_EQ(dti_wait_cqe(c_, 5, &e, 5000), 1);
    ASSERT_EQ(e.res, 0);
    uint32_t other = 1 - engine_of(l);
    dti_sock_t cl = connect_from(other, port);
    bool seen = false;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!seen && std::chrono::steady_clock::now() < until) {
        ASSERT_GE(dti_wait(c_, 100), 0);
        dti_cqe ev[8];
        unsigned n = dti_reap(c_, ev, 8);
        for (unsigned i = 0; i < n; i++) {
            if (ev[i].kind != DTI_CQE_EVENT)
                continue;
            // Every event names a handle the application knows.
            EXPECT_TRUE(ev[i].sock == l || ev[i].sock == cl) << std::hex << ev[i].sock;
            seen |= ev[i].sock == l && (ev[i].events & DTI_POLLIN);
        }
    }
    EXPECT_TRUE(seen);
    dti_sock_info st;
    ASSERT_EQ(dti_sock_status(c_, l, &st), 0);
    EXPECT_EQ(st.accept_ready, 1u);
    int s = dti_accept(c_, l, nullptr, 5000);
    ASSERT_GE(s, 0);
    EXPECT_EQ(engine_of(dti_sock_t(s)), other);
}

TEST_F(DtiEngines, WaitingAcceptIsAnsweredByAnyEngineAndKeepsLaterConnections)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    ASSERT_EQ(dti_prep_accept(c_, l, 1, DTI_ACCEPT_WAIT, 9), 0);
    EXPECT_EQ(dti_prep_accept(c_, l, 1, DTI_ACCEPT_WAIT, 10), -EBUSY); // one waiting accept per listener
    dti_submit(c_);
    uint32_t other = 1 - engine_of(l);
    connect_from(other, port);
    dti_cqe e;
    ASSERT_EQ(dti_wait_cqe(c_, 9, &e, 5000), 1);
    ASSERT_EQ(e.res, 1);
    EXPECT_EQ(e.sock, l);
    EXPECT_EQ(engine_of(e.accepted[0]), other);
    // The listener's own engine still has a waiting accept: the next
    // connection there is taken by it and kept for the next accept.
    connect_from(engine_of(l), port);
    int s = dti_accept(c_, l, nullptr, 5000);
    ASSERT_GE(s, 0) << dti_strerror(s);
    EXPECT_EQ(engine_of(dti_sock_t(s)), engine_of(l));
    EXPECT_EQ(dti_accept(c_, l, nullptr, 0), -ETIMEDOUT);
}

TEST_F(DtiEngines, ClosingTheListenerClosesItOnEveryEngine)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    ASSERT_EQ(dti_close(c_, l), 0);
    for (uint32_t engine = 0; engine < 2; engine++) {
        dti_sock_t s = socket_on(engine);
        dti_addr to{0x7f000001, port};
        EXPECT_EQ(dti_connect(c_, s, &to, 5000), -ECONNREFUSED) << "engine " << engine;
    }
    // And the port is free on both: a new listener group binds it.
    int again = dti_socket(c_);
    ASSERT_GE(again, 0);
    dti_addr at{0, port};
    EXPECT_EQ(dti_bind(c_, dti_sock_t(again), &at), 0);
    EXPECT_EQ(dti_listen(c_, dti_sock_t(again), 4), 0);
}

TEST_F(DtiEngines, ListenerSiblingsTakeTheSocketsOptions)
{
    int l = dti_socket(c_);
    ASSERT_GE(l, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(l), DTI_SO_REUSEPORT, 1), 0);
    dti_addr any{0, 0};
    ASSERT_EQ(dti_bind(c_, dti_sock_t(l), &any), 0);
    ASSERT_EQ(dti_listen(c_, dti_sock_t(l), 8), 0);
    dti_addr name{};
    ASSERT_EQ(dti_getsockname(c_, dti_sock_t(l), &name), 0);
    // A second SO_REUSEPORT listener on the same port succeeds on every
    // engine only if the first one's siblings took SO_REUSEPORT too.
    int l2 = dti_socket(c_);
    ASSERT_GE(l2, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(l2), DTI_SO_REUSEPORT, 1), 0);
    dti_addr same{0, name.port};
    ASSERT_EQ(dti_bind(c_, dti_sock_t(l2), &same), 0);
    EXPECT_EQ(dti_listen(c_, dti_sock_t(l2), 8), 0);
    // Without it, the port is taken.
    int l3 = dti_socket(c_);
    ASSERT_GE(l3, 0);
    int rc = dti_bind(c_, dti_sock_t(l3), &same);
    if (rc == 0)
        rc = dti_listen(c_, dti_sock_t(l3), 8);
    EXPECT_EQ(rc, -EADDRINUSE);
}

// TCP_MAXSEG set on a listener before listen() holds for the connections
// every sibling accepts (issue 35: before, only the application socket's
// engine had it, and the other engines' SYN-ACKs advertised MTU - 40).
TEST_F(DtiEngines, ListenerSiblingsTakeTheMaxSeg)
{
    int l = dti_socket(c_);
    ASSERT_GE(l, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(l), DTI_SO_MAXSEG, 1100), 0);
    dti_addr any{0, 0};
    ASSERT_EQ(dti_bind(c_, dti_sock_t(l), &any), 0);
    ASSERT_EQ(dti_listen(c_, dti_sock_t(l), 16), 0);
    dti_addr name{};
    ASSERT_EQ(dti_getsockname(c_, dti_sock_t(l), &name), 0);
    std::vector<dti_sock_t> clients;
    for (uint32_t i = 0; i < 4; i++)
        clients.push_back(connect_from(i % 2, name.port));
    std::set<uint32_t> engines;
    for (int i = 0; i < 4; i++) {
        int s = dti_accept(c_, dti_sock_t(l), nullptr, 5000);
        ASSERT_GE(s, 0) << dti_strerror(s);
        engines.insert(engine_of(dti_sock_t(s)));
        int64_t v = 0;
        ASSERT_EQ(dti_getsockopt(c_, dti_sock_t(s), DTI_SO_MAXSEG, &v), 0);
        EXPECT_EQ(v, 1100) << "accepted on engine " << engine_of(dti_sock_t(s));
        EXPECT_EQ(dti_close(c_, dti_sock_t(s)), 0);
    }
    EXPECT_EQ(engines, (std::set<uint32_t>{0, 1}));
    for (dti_sock_t c : clients)
        EXPECT_EQ(dti_close(c_, c), 0);
    EXPECT_EQ(dti_close(c_, dti_sock_t(l)), 0);
}

// A socket bound to a port before it connects has its flow, and so its
// engine, decided by that port: libdti makes it again on the owner (options
// and address kept) and the application's handle follows it.
TEST_F(DtiEngines, BoundSocketConnectsFromTheEngineThatOwnsItsFlow)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    for (uint32_t creator = 0; creator < 2; creator++) {
        for (uint32_t owner = 0; owner < 2; owner++) {
            dti_sock_t s = socket_on(creator);
            uint16_t lport = 0;
            for (uint16_t p = 50000 + uint16_t(creator * 1000 + owner * 100); p < 60000 && !lport; p++)
                if (dti_flow_owner(0x7f000001, p, 0x7f000001, port, 2) == owner)
                    lport = p;
            ASSERT_NE(lport, 0);
            ASSERT_EQ(dti_setsockopt(c_, s, DTI_SO_NODELAY, 1), 0);
            dti_addr at{0, lport};
            ASSERT_EQ(dti_bind(c_, s, &at), 0);
            dti_addr to{0x7f000001, port};
            ASSERT_EQ(dti_connect(c_, s, &to, 5000), 0) << "creator " << creator << " owner " << owner;
            dti_addr peer{};
            int srv = dti_accept(c_, l, &peer, 5000);
            ASSERT_GE(srv, 0) << dti_strerror(srv);
            EXPECT_EQ(engine_of(dti_sock_t(srv)), owner) << "the connection lives on its flow's owner";
            EXPECT_EQ(peer.port, lport);
            dti_addr name{};
            ASSERT_EQ(dti_getsockname(c_, s, &name), 0);
            EXPECT_EQ(name.port, lport);
            int64_t nodelay = 0;
            ASSERT_EQ(dti_getsockopt(c_, s, DTI_SO_NODELAY, &nodelay), 0);
            EXPECT_EQ(nodelay, 1) << "options move with the socket";
            // The application's handle carries the connection both ways.
            ASSERT_EQ(dti_send_all(c_, s, "ping", 4, 5000), 4);
            char buf[8] = {};
            ASSERT_EQ(dti_recv_wait(c_, dti_sock_t(srv), buf, sizeof buf, 5000), 4);
            ASSERT_EQ(dti_send_all(c_, dti_sock_t(srv), "pong", 4, 5000), 4);
            ASSERT_EQ(dti_recv_wait(c_, s, buf, sizeof buf, 5000), 4);
            EXPECT_EQ(std::string(buf, 4), "pong");
            ASSERT_EQ(dti_close(c_, s), 0);
            EXPECT_EQ(dti_recv_wait(c_, dti_sock_t(srv), buf, sizeof buf, 5000), 0); // EOF
            ASSERT_EQ(dti_close(c_, dti_sock_t(srv)), 0);
        }
    }
}

// Several moved sockets alive at once: each keeps its own handle (the slot
// each was made in stays taken until it is closed).
TEST_F(DtiEngines, ManyBoundSocketsMoveAndKeepTheirHandles)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    std::vector<dti_sock_t> clients, served;
    uint16_t p = 52000;
    for (int i = 0; i < 6; i++) {
        dti_sock_t s = socket_on(0);
        while (dti_flow_owner(0x7f000001, p, 0x7f000001, port, 2) != 1)
            p++;
        dti_addr at{0, p++};
        ASSERT_EQ(dti_bind(c_, s, &at), 0);
        dti_addr to{0x7f000001, port};
        ASSERT_EQ(dti_connect(c_, s, &to, 5000), 0);
        int srv = dti_accept(c_, l, nullptr, 5000);
        ASSERT_GE(srv, 0);
        EXPECT_EQ(engine_of(dti_sock_t(srv)), 1u);
        clients.push_back(s);
        served.push_back(dti_sock_t(srv));
    }
    for (size_t i = 0; i < clients.size(); i++) {
        std::string msg = "moved " + std::to_string(i);
        ASSERT_EQ(dti_send_all(c_, clients[i], msg.data(), msg.size(), 5000), ssize_t(msg.size())) << i;
        char buf[32] = {};
        ssize_t n = dti_recv_wait(c_, served[i], buf, sizeof buf, 5000);
        EXPECT_EQ(std::string(buf, size_t(n > 0 ? n : 0)), msg);
    }
    for (dti_sock_t s : clients)
        EXPECT_EQ(dti_close(c_, s), 0);
}

TEST_F(DtiEngines, HandlesAndBuffersNameTheirEngine)
{
    dti_sock_t bogus = (5u << DTI_ENGINE_SHIFT) | 1u << DTI_SLOT_BITS;
    dti_sock_info st;
    EXPECT_EQ(dti_sock_status(c_, bogus, &st), -DTI_E_BAD_HANDLE);
    EXPECT_EQ(dti_send(c_, bogus, "x", 1, 0), -DTI_E_BAD_HANDLE);
    dti_buf b{};
    EXPECT_EQ(dti_buf_alloc_for(d_, bogus, 100, &b), -DTI_E_BAD_HANDLE);
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    dti_sock_t on0 = engine_of(cl) == 0 ? cl : sv;
    dti_sock_t on1 = engine_of(cl) == 1 ? cl : sv;
    if (engine_of(cl) == engine_of(sv)) { // both ends on one engine: make one elsewhere
        on1 = socket_on(1 - engine_of(cl));
        on0 = engine_of(on1) == 0 ? on1 : cl;
        on1 = engine_of(on1) == 1 ? on1 : cl;
    }
    ASSERT_EQ(dti_buf_alloc_for(d_, on1, 100, &b), 0);
    EXPECT_EQ(dti_prep_recv_into(c_, on0, &b, 1), -EXDEV);
    EXPECT_EQ(dti_prep_send_from(c_, on0, &b, 10, 0, 2), -EXDEV);
    dti_buf_free(d_, &b);
}

} // namespace
} // namespace dti::test
