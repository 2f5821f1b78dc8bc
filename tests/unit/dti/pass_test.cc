// Passing a socket to another process (SCM_RIGHTS): the sender registers it
// with the descriptor it sends (dti_pass), the receiver claims it with the
// descriptor it received (dti_claim); the PPE matches the open files.
//
// In dti_unit_2engines every test runs on two engines: a connection is
// claimed on its own engine, a listener group on both (every sibling).
//
// The "other process" is a second attachment in this process (a group of
// its own, as an unrelated process's), claiming with a dup of the sender's
// descriptor (the same open file, as SCM_RIGHTS delivers it); the other user
// is a real child process (uid 65534) speaking the control protocol itself.
#include "raw_app.h"
#include "test_util.h"

#include "dti_abi.h"

#include <cstring>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dti::test {
namespace {

class DtiPass : public Attached {
  protected:
    void SetUp() override
    {
        Attached::SetUp();
        // What the shim would send: the socket's kernel placeholder.
        placeholder_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(placeholder_, 0);
    }
    void TearDown() override
    {
        if (joined_)
            dti_detach(joined_);
        if (other_)
            dti_detach(other_);
        joined_ = other_ = nullptr;
        if (placeholder_ >= 0)
            close(placeholder_);
        Attached::TearDown();
    }
    // An attachment of its own: another process's, to the PPE.
    dti_t *other()
    {
        if (!other_) {
            dti_attach_opts opts{path_.c_str(), "receiver"};
            char msg[256] = "";
            EXPECT_EQ(dti_attach(&opts, &other_, msg, sizeof msg), 0) << msg;
        }
        return other_;
    }
    // The receiver claims what it got (a dup: the same open file).
    int claim(dti_t *d, int fd, bool may_join, dti_sock_t *h)
    {
        int got = dup(fd);
        char why[200] = "";
        int rc = dti_claim(d, got, may_join, h, &joined_, why, sizeof why);
        close(got);
        why_ = why;
        return rc;
    }
    dti_ctx_t *joined_ctx()
    {
        int err = 0;
        dti_ctx_t *c = joined_ ? dti_ctx_get(joined_, &err) : nullptr;
        EXPECT_NE(c, nullptr) << dti_strerror(err);
        return c;
    }
    int placeholder_ = -1;
    dti_t *other_ = nullptr, *joined_ = nullptr;
    std::string why_;
};

TEST_F(DtiPass, ReceiverOfAnotherGroupJoinsAndServesTheConnection)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_send_all(c_, client, "before", 6, 5000), 6);
    char why[200] = "";
    ASSERT_EQ(dti_pass(d_, server, placeholder_, why, sizeof why), 0) << why;
    dti_sock_t h = DTI_SOCK_INVALID;
    ASSERT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
    EXPECT_EQ(h, server);
    dti_ctx_t *rc = joined_ctx();
    ASSERT_NE(rc, nullptr);
    char buf[16] = {};
    ASSERT_EQ(dti_recv_wait(rc, h, buf, 6, 5000), 6);
    EXPECT_EQ(std::string(buf, 6), "before");
    // Both hold it, as after fork: the sender's close leaves it open.
    ASSERT_EQ(dti_close(c_, server), 0);
    ASSERT_EQ(dti_send_all(c_, client, "after", 5, 5000), 5);
    ASSERT_EQ(dti_recv_wait(rc, h, buf, 5, 5000), 5);
    EXPECT_EQ(std::string(buf, 5), "after");
    ASSERT_EQ(dti_send_all(rc, h, "reply", 5, 5000), 5);
    ASSERT_EQ(dti_recv_wait(c_, client, buf, 5, 5000), 5);
    EXPECT_EQ(std::string(buf, 5), "reply");
    // The receiver's close is the last: FIN.
    ASSERT_EQ(dti_close(rc, h), 0);
    EXPECT_EQ(dti_recv_wait(c_, client, buf, 1, 5000), 0);
}

TEST_F(DtiPass, ListenerPassedAcceptsInTheReceiver)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    char why[200] = "";
    ASSERT_EQ(dti_pass(d_, l, placeholder_, why, sizeof why), 0) << why;
    dti_sock_t h = DTI_SOCK_INVALID;
    ASSERT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
    dti_ctx_t *rc = joined_ctx();
    ASSERT_NE(rc, nullptr);
    int cs = dti_socket(c_);
    ASSERT_GE(cs, 0);
    dti_addr to{0x7f000001, port};
    ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
    int s = dti_accept(rc, h, nullptr, 5000);
    ASSERT_GE(s, 0) << dti_strerror(s);
    ASSERT_EQ(dti_send_all(rc, dti_sock_t(s), "hi", 2, 5000), 2);
    char buf[2];
    ASSERT_EQ(dti_recv_wait(c_, dti_sock_t(cs), buf, 2, 5000), 2);
    EXPECT_EQ(std::string(buf, 2), "hi");
}

// The sender closes its listener once it is in flight: the receiver alone
// accepts, also connections landing on other engines than the listener's
// own (a context's sockets alternate between engines), so on several
// engines every sibling of the group must have been claimed.
TEST_F(DtiPass, ListenerPassedAcceptsOnEveryEngineAfterTheSenderClosed)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    ASSERT_EQ(dti_pass(d_, l, placeholder_, nullptr, 0), 0);
    ASSERT_EQ(dti_close(c_, l), 0);
    dti_sock_t h = DTI_SOCK_INVALID;
    ASSERT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
    dti_ctx_t *rc = joined_ctx();
    ASSERT_NE(rc, nullptr);
    uint32_t engines_seen = 0;
    for (int i = 0; i < 8; i++) {
        int cs = dti_socket(c_);
        ASSERT_GE(cs, 0);
        engines_seen |= 1u << (uint32_t(cs) >> DTI_ENGINE_SHIFT);
        dti_addr to{0x7f000001, port};
        ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0) << i;
        int s = dti_accept(rc, h, nullptr, 5000);
        ASSERT_GE(s, 0) << i << ": " << dti_strerror(s);
        char b = char('a' + i);
        ASSERT_EQ(dti_send_all(rc, dti_sock_t(s), &b, 1, 5000), 1);
        char got = 0;
        ASSERT_EQ(dti_recv_wait(c_, dti_sock_t(cs), &got, 1, 5000), 1);
        EXPECT_EQ(got, b);
        ASSERT_EQ(dti_close(rc, dti_sock_t(s)), 0);
        ASSERT_EQ(dti_close(c_, dti_sock_t(cs)), 0);
    }
    EXPECT_EQ(engines_seen, (1u << test_engines()) - 1) << "connections from every engine";
    ASSERT_EQ(dti_close(rc, h), 0);
}

TEST_F(DtiPass, SenderClosedBeforeTheClaimKeepsItOpen)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    ASSERT_EQ(dti_close(c_, server), 0); // in flight: the PPE keeps it, as the kernel keeps the file
    ASSERT_EQ(dti_send_all(c_, client, "x", 1, 5000), 1);
    dti_sock_t h = DTI_SOCK_INVALID;
    ASSERT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
    char b = 0;
    ASSERT_EQ(dti_recv_wait(joined_ctx(), h, &b, 1, 5000), 1);
    EXPECT_EQ(b, 'x');
}

// Passed to itself (a socketpair of its own), its handle closed before the
// receive: Linux keeps the socket while it is in flight and the received
// descriptor works; here the PPE keeps it, and the claim makes the handle
// this process's again (it had marked it closed: dti__sock_of refused it).
TEST_F(DtiPass, PassedToItselfAndClosedBeforeTheClaimIsUsableAgain)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    // As the shim closes: the CLOSE published, not waited for, so the
    // engine may read the claim first; it takes the claimant's published
    // commands before it (else the claim found the hold still there and the
    // CLOSE, taken after, ended the socket).
    ASSERT_EQ(dti_prep_close(c_, server, 0), 0);
    dti_submit(c_);
    struct dti_sock_info info;
    EXPECT_EQ(dti_sock_status(c_, server, &info), -DTI_E_BAD_HANDLE) << "closed here";
    ASSERT_EQ(dti_send_all(c_, client, "x", 1, 5000), 1);
    dti_sock_t h = DTI_SOCK_INVALID;
    ASSERT_EQ(claim(d_, placeholder_, false, &h), 0) << why_;
    ASSERT_EQ(dti_sock_status(c_, h, &info), 0) << "the claimed handle is this process's again";
    char b = 0;
    ASSERT_EQ(dti_recv_wait(c_, h, &b, 1, 5000), 1);
    EXPECT_EQ(b, 'x');
    ASSERT_EQ(dti_send_all(c_, h, "y", 1, 5000), 1);
    ASSERT_EQ(dti_recv_wait(c_, client, &b, 1, 5000), 1);
    EXPECT_EQ(b, 'y');
    ASSERT_EQ(dti_close(c_, h), 0); // the last hold: FIN
    EXPECT_EQ(dti_recv_wait(c_, client, &b, 1, 5000), 0);
}

TEST_F(DtiPass, WrongFileIsRefused)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    int another = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); // a socket, not the one in flight
    dti_sock_t h = DTI_SOCK_INVALID;
    EXPECT_EQ(claim(other(), another, true, &h), -ENOENT) << why_;
    EXPECT_EQ(h, DTI_SOCK_INVALID);
    close(another);
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    EXPECT_EQ(claim(other(), p[0], true, &h), -EBADF) << "not a socket";
    close(p[0]);
    close(p[1]);
    EXPECT_EQ(dti_close(dti_ctx_get(other(), nullptr), server), -DTI_E_BAD_HANDLE) << "nothing was granted";
    // The one in flight is still there for the right file.
    EXPECT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
}

TEST_F(DtiPass, ClaimTwiceIsRefused)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    dti_sock_t h = DTI_SOCK_INVALID;
    ASSERT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
    dti_t *first = std::exchange(joined_, nullptr);
    EXPECT_EQ(claim(other(), placeholder_, true, &h), -ENOENT) << "one pass, one claim";
    EXPECT_EQ(claim(first, placeholder_, false, &h), -ENOENT);
    dti_detach(first);
    // Passed twice (to two workers): two claims.
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    EXPECT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
    dti_detach(std::exchange(joined_, nullptr));
    EXPECT_EQ(claim(d_, placeholder_, false, &h), 0) << "the sender's own group: a hold, no join";
    EXPECT_EQ(joined_, nullptr);
}

TEST_F(DtiPass, WithdrawnPassIsGoneAndClosesWhatNobodyHolds)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    ASSERT_EQ(dti_close(c_, server), 0);
    ASSERT_EQ(dti_pass_withdraw(d_, server, placeholder_), 0); // the sendmsg failed
    dti_sock_t h = DTI_SOCK_INVALID;
    EXPECT_EQ(claim(other(), placeholder_, true, &h), -ENOENT);
    char b;
    EXPECT_EQ(dti_recv_wait(c_, client, &b, 1, 5000), 0) << "the last hold went: FIN";
}

TEST_F(DtiPass, OnlySocketsTheSenderHoldsPass)
{
    char why[200] = "";
    EXPECT_EQ(dti_pass(d_, dti_sock_t(0x00f00123), placeholder_, why, sizeof why), -DTI_E_BAD_HANDLE);
    int s = dti_socket(c_);
    ASSERT_GE(s, 0);
    ASSERT_EQ(dti_close(c_, dti_sock_t(s)), 0);
    EXPECT_EQ(dti_pass(d_, dti_sock_t(s), placeholder_, nullptr, 0), -DTI_E_BAD_HANDLE) << "closed";
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    s = dti_socket(c_);
    EXPECT_EQ(dti_pass(d_, dti_sock_t(s), p[0], nullptr, 0), -EBADF) << "the descriptor must be a socket";
    close(p[0]);
    close(p[1]);
}

TEST_F(DtiPass, ReceiverWithSocketsOfItsOwnCannotJoin)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    dti_sock_t h = DTI_SOCK_INVALID;
    EXPECT_EQ(claim(other(), placeholder_, false, &h), -EXDEV) << why_;
    EXPECT_EQ(claim(other(), placeholder_, true, &h), 1) << "still in flight: " << why_;
}

TEST_F(DtiPass, ReceiverOfAnotherUserIsRefused)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to run a child as another user";
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_pass(d_, server, placeholder_, nullptr, 0), 0);
    ASSERT_EQ(chmod(path_.c_str(), 0666), 0); // the child (uid 65534) must reach the socket
    // uid 65534 with the socket in its hands (as SCM_RIGHTS would give it).
    int status = -1;
    ASSERT_NO_FATAL_FAILURE(claim_as_nobody(path_, placeholder_, &status));
    EXPECT_EQ(status, 0) << kClaimAsNobodyCodes;
    // The owner's own user still may.
    dti_sock_t h = DTI_SOCK_INVALID;
    EXPECT_EQ(claim(other(), placeholder_, true, &h), 1) << why_;
}

} // namespace
} // namespace dti::test
