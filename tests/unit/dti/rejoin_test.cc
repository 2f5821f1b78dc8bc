// One group again after a PPE restart (issue 12): the process that makes an
// inherited listener again offers it (dti_offer, a standing PASS); every
// other process that shares the listener's kernel placeholder (a forked
// server's workers) claims it with its own descriptor of that file and joins
// the offerer's group. A process that does not hold that file, or is of
// another user, gets nothing.
//
// The "processes" are attachments of their own in this process (each a group
// of its own, as a freshly re-attached process's), claiming with a dup of
// the placeholder (the same open file, as fork leaves it); the other user is
// a real child process (uid 65534) speaking the control protocol itself. In
// dti_unit_2engines every test runs on two engines (the listener a group).
#include "raw_app.h"
#include "test_util.h"

#include "dti_abi.h"

#include <cstring>
#include <vector>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dti::test {
namespace {

class DtiRejoin : public Attached {
  protected:
    void SetUp() override
    {
        Attached::SetUp();
        placeholder_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); // the inherited listener's
        ASSERT_GE(placeholder_, 0);
    }
    void TearDown() override
    {
        for (dti_t *d : attached_)
            dti_detach(d);
        attached_.clear();
        if (placeholder_ >= 0)
            close(placeholder_);
        Attached::TearDown();
    }
    // Another process of the tree, just re-attached: a group of its own.
    dti_t *process()
    {
        dti_attach_opts opts{path_.c_str(), "worker"};
        dti_t *d = nullptr;
        char msg[256] = "";
        EXPECT_EQ(dti_attach(&opts, &d, msg, sizeof msg), 0) << msg;
        if (d)
            attached_.push_back(d);
        return d;
    }
    // d claims with fd (a dup: the same open file); *joined: the attachment
    // it joined (kept for TearDown), or d.
    int claim(dti_t *d, int fd, dti_sock_t *h, dti_t **joined)
    {
        int got = dup(fd);
        char why[200] = "";
        dti_t *j = nullptr;
        int rc = dti_claim(d, got, 1, h, &j, why, sizeof why);
        close(got);
        why_ = why;
        if (j)
            attached_.push_back(j);
        *joined = rc == 1 ? j : d;
        return rc;
    }
    // A kernel-side client connects to port; true when `in` accepts it on h.
    bool accepts(dti_t *in, dti_sock_t h, uint16_t port)
    {
        int cs = dti_socket(c_);
        dti_addr to{0x7f000001, port};
        if (cs < 0 || dti_connect(c_, dti_sock_t(cs), &to, 5000) != 0)
            return false;
        int err = 0;
        dti_ctx_t *c = dti_ctx_get(in, &err);
        int s = c ? dti_accept(c, h, nullptr, 5000) : -1;
        bool ok = s >= 0 && dti_send_all(c, dti_sock_t(s), "w", 1, 5000) == 1;
        char b = 0;
        ok = ok && dti_recv_wait(c_, dti_sock_t(cs), &b, 1, 5000) == 1 && b == 'w';
        if (s >= 0)
            dti_close(c, dti_sock_t(s));
        dti_close(c_, dti_sock_t(cs));
        return ok;
    }
    int placeholder_ = -1;
    std::vector<dti_t *> attached_;
    std::string why_;
};

TEST_F(DtiRejoin, EveryProcessSharingTheListenerJoinsAndAccepts)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port); // made again by the first process to re-attach
    char why[200] = "";
    ASSERT_EQ(dti_offer(d_, l, placeholder_, why, sizeof why), 0) << why;
    ASSERT_EQ(dti_offer(d_, l, placeholder_, why, sizeof why), 0) << "offered twice: one offer" << why;
    // Three workers, each its own group after re-attaching: each claim joins
    // the offerer's group (the offer is not used up) and accepts there.
    for (int w = 0; w < 3; w++) {
        dti_sock_t h = DTI_SOCK_INVALID;
        dti_t *in = nullptr;
        ASSERT_EQ(claim(process(), placeholder_, &h, &in), 1) << "worker " << w << ": " << why_;
        EXPECT_EQ(h, l) << "the same socket, not another";
        EXPECT_TRUE(accepts(in, h, port)) << "worker " << w;
    }
    EXPECT_TRUE(accepts(d_, l, port)) << "the offerer";
    // The offerer's own group (a fork child of it, or itself again): a hold.
    dti_sock_t h = DTI_SOCK_INVALID;
    dti_t *in = nullptr;
    EXPECT_EQ(claim(d_, placeholder_, &h, &in), 0) << why_;
    EXPECT_EQ(in, d_);
}

TEST_F(DtiRejoin, ProcessWithoutTheListenersFileIsRefused)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    ASSERT_EQ(dti_offer(d_, l, placeholder_, nullptr, 0), 0);
    // Same user, not of the group: it holds some other socket (its own
    // placeholder), never the group's file. Nothing names the group but that
    // file, so there is nothing else to present.
    int unrelated = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(unrelated, 0);
    dti_t *stranger = process();
    dti_sock_t h = DTI_SOCK_INVALID;
    dti_t *in = nullptr;
    EXPECT_EQ(claim(stranger, unrelated, &h, &in), -ENOENT) << why_;
    EXPECT_EQ(h, DTI_SOCK_INVALID);
    EXPECT_EQ(in, stranger) << "joined nothing";
    close(unrelated);
    int err = 0;
    EXPECT_EQ(dti_close(dti_ctx_get(stranger, &err), l), -DTI_E_BAD_HANDLE) << "nothing was granted";
    // The group's own file still joins.
    EXPECT_EQ(claim(process(), placeholder_, &h, &in), 1) << why_;
}

TEST_F(DtiRejoin, OfferGoesWithTheListenersLastClose)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    ASSERT_EQ(dti_offer(d_, l, placeholder_, nullptr, 0), 0);
    dti_sock_t h = DTI_SOCK_INVALID;
    dti_t *w1 = nullptr;
    ASSERT_EQ(claim(process(), placeholder_, &h, &w1), 1) << why_;
    // The offerer closes it: the worker's hold keeps it, and the offer.
    ASSERT_EQ(dti_close(c_, l), 0);
    dti_t *w2 = nullptr;
    ASSERT_EQ(claim(process(), placeholder_, &h, &w2), 1) << why_;
    EXPECT_TRUE(accepts(w2, h, port));
    int err = 0;
    ASSERT_EQ(dti_close(dti_ctx_get(w1, &err), h), 0);
    ASSERT_EQ(dti_close(dti_ctx_get(w2, &err), h), 0);
    // Closed by all: the offer is gone with it.
    dti_t *late = nullptr;
    EXPECT_EQ(claim(process(), placeholder_, &h, &late), -ENOENT) << why_;
}

TEST_F(DtiRejoin, OnlyListenersAreOffered)
{
    dti_sock_t client, server;
    pair(&client, &server);
    char why[200] = "";
    EXPECT_EQ(dti_offer(d_, server, placeholder_, why, sizeof why), -EINVAL) << why;
    EXPECT_EQ(dti_offer(d_, dti_sock_t(0x00f00123), placeholder_, why, sizeof why), -DTI_E_BAD_HANDLE);
    dti_sock_t h = DTI_SOCK_INVALID;
    dti_t *in = nullptr;
    EXPECT_EQ(claim(process(), placeholder_, &h, &in), -ENOENT) << "nothing was offered";
}

TEST_F(DtiRejoin, ProcessOfAnotherUserWithTheListenersFileIsRefused)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to run a child as another user";
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    ASSERT_EQ(dti_offer(d_, l, placeholder_, nullptr, 0), 0);
    ASSERT_EQ(chmod(path_.c_str(), 0666), 0); // the child (uid 65534) must reach the socket
    // uid 65534 holding the very file: still not of the group.
    int status = -1;
    ASSERT_NO_FATAL_FAILURE(claim_as_nobody(path_, placeholder_, &status));
    EXPECT_EQ(status, 0) << kClaimAsNobodyCodes;
    // The offer is still there for the owner's own user.
    dti_sock_t h = DTI_SOCK_INVALID;
    dti_t *in = nullptr;
    EXPECT_EQ(claim(process(), placeholder_, &h, &in), 1) << why_;
}

} // namespace
} // namespace dti::test
