// Helpers shared by the dti unit tests.
#pragma once

#include "loopback.h"

#include <dti/dti.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace dti::test {

inline std::string temp_socket_path()
{
    static std::atomic<int> n{0};
    return "/tmp/dti-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
}

// Engines of the fixture PPE: 1, or what $DTI_TEST_ENGINES says (the suite
// runs once with each: libdti must behave the same on several engines).
inline uint32_t test_engines()
{
    const char *e = getenv("DTI_TEST_ENGINES");
    return e && atoi(e) > 0 ? uint32_t(atoi(e)) : 1u;
}

inline engine::Limits small_limits()
{
    engine::Limits l;
    l.max_contexts = 16;
    l.max_sockets = 64;
    l.cmdq_entries = 64;
    l.evq_entries = 128;
    l.rx_ring_size = 16 * 1024;
    l.tx_ring_size = 16 * 1024;
    l.pool_size = 64 * 1024;
    return l;
}

// A running fixture engine and one attachment to it.
class Attached : public ::testing::Test {
  protected:
    void SetUp() override { start(small_limits()); }
    void start(const engine::Limits &l, uint32_t engines = test_engines())
    {
        path_ = temp_socket_path();
        fixture::TestPpe::Options o;
        o.limits = l;
        o.engines = engines;
        o.grow_rx_to = grow_rx_to_;
        o.grow_tx_to = grow_tx_to_;
        o.reread_sent = reread_sent_;
        ppe_ = std::make_unique<fixture::TestPpe>(path_, o);
        std::string why;
        ASSERT_TRUE(ppe_->start(&why)) << why;
        dti_attach_opts opts{path_.c_str(), "unit-test"};
        char msg[256] = "";
        ASSERT_EQ(dti_attach(&opts, &d_, msg, sizeof msg), 0) << msg;
        int err = 0;
        c_ = dti_ctx_get(d_, &err);
        ASSERT_NE(c_, nullptr) << dti_strerror(err);
    }
    void TearDown() override
    {
        if (d_)
            dti_detach(d_);
        d_ = nullptr;
        if (ppe_)
            ppe_->stop();
    }
    // Processes the fixture PPE serves: each is attached to every engine, so
    // all engines must agree (SIZE_MAX while they do not).
    size_t processes()
    {
        size_t n = ppe_->attachments(0);
        for (uint32_t e = 1; e < test_engines(); e++)
            if (ppe_->attachments(e) != n)
                return SIZE_MAX;
        return n;
    }
    // A listener on an ephemeral port; returns it and its port.
    dti_sock_t listener(uint16_t *port)
    {
        int l = dti_socket(c_);
        EXPECT_GE(l, 0) << dti_strerror(l);
        dti_addr any{0, 0};
        EXPECT_EQ(dti_bind(c_, dti_sock_t(l), &any), 0);
        EXPECT_EQ(dti_listen(c_, dti_sock_t(l), 16), 0);
        dti_addr name{};
        EXPECT_EQ(dti_getsockname(c_, dti_sock_t(l), &name), 0);
        *port = name.port;
        return dti_sock_t(l);
    }
    // A connected pair (client, server) through the fixture, accepted on a
    // new listener that stays open: *l, on port *port.
    void pair_on_listener(dti_sock_t *l, uint16_t *port, dti_sock_t *client, dti_sock_t *server)
    {
        *l = listener(port);
        int cs = dti_socket(c_);
        ASSERT_GE(cs, 0);
        dti_addr to{0x7f000001, *port};
        ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
        int s = dti_accept(c_, *l, nullptr, 5000);
        ASSERT_GE(s, 0) << dti_strerror(s);
        *client = dti_sock_t(cs);
        *server = dti_sock_t(s);
    }
    // A connected pair (client, server) through the fixture.
    void pair(dti_sock_t *client, dti_sock_t *server)
    {
        dti_sock_t l = DTI_SOCK_INVALID;
        uint16_t port = 0;
        ASSERT_NO_FATAL_FAILURE(pair_on_listener(&l, &port, client, server));
        ASSERT_EQ(dti_close(c_, l), 0);
    }

    std::string path_;
    uint32_t grow_rx_to_ = 0; // the fixture transport's autotuning (TestPpe::Options::grow_rx_to)
    uint32_t grow_tx_to_ = 0; // its send-buffer autotuning (TestPpe::Options::grow_tx_to)
    bool reread_sent_ = false; // its retransmission stand-in (TestPpe::Options::reread_sent)
    std::unique_ptr<fixture::TestPpe> ppe_;
    dti_t *d_ = nullptr;
    dti_ctx_t *c_ = nullptr;
};

} // namespace dti::test
