// eta-perf's dti echo step (ppe/src/dti_echo.h) against the fixture engine,
// with the context's command queue full: every byte is echoed exactly once.
#include "../../../ppe/src/dti_echo.h"
#include "../dti/test_util.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using dti::test::Attached;
using ppe::EchoState;
using ppe::EchoStatus;

class DtiEcho : public Attached {
  protected:
    // Prepares (never submits) n NOPs: unpublished commands hold queue slots
    // the engine cannot take, so the queue stays full until submit.
    // Completions still in flight (a watch whose bytes were already there
    // when wait_readable() returned) are reaped first: each holds a credit.
    void hold_queue(unsigned n)
    {
        dti_cqe e[16];
        while (dti_inflight(c_) > 0) {
            ASSERT_EQ(dti_wait(c_, 5000), 1);
            dti_reap(c_, e, 16);
        }
        for (unsigned i = 0; i < n; i++)
            ASSERT_EQ(dti_prep_nop(c_, 100 + i), 0);
    }
    // Publishes the held NOPs and reaps their completions.
    void free_queue(unsigned n)
    {
        dti_submit(c_);
        dti_cqe e[64];
        unsigned got = 0;
        while (got < n) {
            ASSERT_EQ(dti_wait(c_, 5000), 1);
            unsigned k = dti_reap(c_, e, 64);
            for (unsigned i = 0; i < k; i++)
                got += e[i].kind == DTI_CQE_COMPLETION && e[i].op == DTI_OP_NOP;
        }
    }
    // Waits (on POLLIN events) until the server socket has n readable bytes.
    void wait_readable(dti_sock_t s, size_t n)
    {
        ASSERT_EQ(dti_prep_watch(c_, s, DTI_POLLIN, 1), 0);
        dti_submit(c_);
        dti_iov in[2];
        dti_cqe e[16];
        for (int rounds = 0; dti_recv_borrow(c_, s, in) < ssize_t(n); rounds++) {
            ASSERT_LT(rounds, 100) << "the bytes never arrived";
            ASSERT_EQ(dti_wait(c_, 5000), 1);
            dti_reap(c_, e, 16);
        }
    }
    // Reads exactly n bytes from the client, then checks nothing more comes.
    std::string read_echo(dti_sock_t client, size_t n)
    {
        std::string got(n, '\0');
        size_t have = 0;
        while (have < n) {
            ssize_t r = dti_recv_wait(c_, client, got.data() + have, n - have, 5000);
            EXPECT_GT(r, 0) << dti_strerror(int(r));
            if (r <= 0)
                break;
            have += size_t(r);
        }
        return got;
    }
};

// The whole queue held: neither the send nor the release fits. The step
// must stop (not spin, not release unsent bytes) and finish after a reap.
TEST_F(DtiEcho, QueueFullBeforeSendLosesNothing)
{
    dti_sock_t client, server;
    pair(&client, &server);
    const std::string msg(100, 'a');
    ASSERT_EQ(dti_send_all(c_, client, msg.data(), msg.size(), 5000), ssize_t(msg.size()));
    wait_readable(server, msg.size());

    hold_queue(64);
    EchoState st;
    EXPECT_EQ(ppe::echo_some(c_, server, st), EchoStatus::kQueueFull);
    EXPECT_EQ(st.release_owed, 0u);
    dti_iov in[2];
    EXPECT_EQ(dti_recv_borrow(c_, server, in), ssize_t(msg.size())); // still there, unreleased

    free_queue(64);
    EXPECT_EQ(ppe::echo_some(c_, server, st), EchoStatus::kDrained);
    EXPECT_EQ(read_echo(client, msg.size()), msg);
    // Exactly once: one more message comes back alone.
    const std::string next(10, 'b');
    ASSERT_EQ(dti_send_all(c_, client, next.data(), next.size(), 5000), ssize_t(next.size()));
    wait_readable(server, next.size());
    EXPECT_EQ(ppe::echo_some(c_, server, st), EchoStatus::kDrained);
    EXPECT_EQ(read_echo(client, next.size()), next);
}

// One slot left: the send fits, the release may not (the engine may or may
// not have taken the published commands by then). Either way the bytes go
// back once and are released once.
TEST_F(DtiEcho, QueueFullAfterSendEchoesOnce)
{
    dti_sock_t client, server;
    pair(&client, &server);
    const std::string msg(100, 'c');
    ASSERT_EQ(dti_send_all(c_, client, msg.data(), msg.size(), 5000), ssize_t(msg.size()));
    wait_readable(server, msg.size());

    hold_queue(63);
    EchoState st;
    EchoStatus r = ppe::echo_some(c_, server, st);
    EXPECT_TRUE(r == EchoStatus::kQueueFull || r == EchoStatus::kDrained);
    free_queue(63);
    EXPECT_EQ(ppe::echo_some(c_, server, st), EchoStatus::kDrained);
    EXPECT_EQ(st.release_owed, 0u);
    dti_iov in[2];
    EXPECT_EQ(dti_recv_borrow(c_, server, in), -EAGAIN); // released, once

    const std::string next(10, 'd');
    ASSERT_EQ(dti_send_all(c_, client, next.data(), next.size(), 5000), ssize_t(next.size()));
    wait_readable(server, next.size());
    EXPECT_EQ(ppe::echo_some(c_, server, st), EchoStatus::kDrained);
    EXPECT_EQ(read_echo(client, msg.size() + next.size()), msg + next);
}

} // namespace
