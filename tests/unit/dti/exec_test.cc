// exec(): the image exec starts adopts the sockets the old one listed
// (dti_exec_prepare / dti_adopt_exec / dti_exec_abort), with the data that
// arrived before; the PPE gives the new member only sockets the old one held.
//
// The "new image" here is a second dti_t in this process, built from the
// descriptors the old one handed over (what the preload shim's constructor
// does after a real exec: tests/integration/preload/exec_test.sh).
#include "raw_app.h"
#include "test_util.h"

#include "dti_abi.h"

#include <chrono>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dti::test {
namespace {

class DtiExec : public Attached {
  protected:
    void SetUp() override
    {
        Attached::SetUp();
        if (test_engines() > 1)
            GTEST_SKIP() << "in one process the new image cannot take over the other engines' descriptors "
                            "(the handover names the old image's own); exec on two engines: preload_exec_2engines";
    }
    void TearDown() override
    {
        if (n_)
            dti_detach(n_);
        n_ = nullptr;
        Attached::TearDown();
    }
    // The new image's descriptors: the control connection is its own; the
    // region, state and doorbell are the old image's, duplicated here
    // because both images live in this one process.
    static dti_exec_fds as_new_image(const dti_exec_fds &f)
    {
        return {f.ctl_fd, dup(f.region_fd), dup(f.priv_fd), dup(f.doorbell_fd), f.links_fd};
    }
    bool processes_become(size_t n)
    {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (processes() != n)
            if (std::chrono::steady_clock::now() > until)
                return false;
        return true;
    }
    static bool cloexec(int fd) { return fcntl(fd, F_GETFD) & FD_CLOEXEC; }
    dti_t *n_ = nullptr;
};

TEST_F(DtiExec, NewImageReadsWhatArrivedBeforeAndServesTheConnection)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_send_all(c_, client, "hello world", 11, 5000), 11);
    char buf[16] = {};
    ASSERT_EQ(dti_recv_wait(c_, server, buf, 6, 5000), 6); // the old image read "hello "
    dti_exec_fds f{};
    ASSERT_EQ(dti_exec_prepare(d_, &server, 1, &f), 1);
    for (int fd : {f.ctl_fd, f.region_fd, f.priv_fd, f.doorbell_fd})
        EXPECT_FALSE(cloexec(fd)) << "exec would close " << fd;
    EXPECT_EQ(processes(), 2u);
    dti_exec_fds g = as_new_image(f);
    char why[200] = "";
    ASSERT_EQ(dti_adopt_exec(&g, &n_, why, sizeof why), 0) << why;
    // The old image is gone (its hold with it): the new one's keeps the
    // connection open.
    ASSERT_EQ(dti_close(c_, server), 0);
    int err = 0;
    dti_ctx_t *nc = dti_ctx_get(n_, &err);
    ASSERT_NE(nc, nullptr) << dti_strerror(err);
    ASSERT_EQ(dti_recv_wait(nc, server, buf, 5, 5000), 5); // where the old image stopped
    EXPECT_EQ(std::string(buf, 5), "world");
    ASSERT_EQ(dti_send_all(c_, client, "more", 4, 5000), 4); // arrives after the exec
    ASSERT_EQ(dti_recv_wait(nc, server, buf, 4, 5000), 4);
    EXPECT_EQ(std::string(buf, 4), "more");
    ASSERT_EQ(dti_send_all(nc, server, "reply", 5, 5000), 5);
    ASSERT_EQ(dti_recv_wait(c_, client, buf, 5, 5000), 5);
    EXPECT_EQ(std::string(buf, 5), "reply");
    for (int fd : {g.ctl_fd, g.region_fd, g.priv_fd, g.doorbell_fd})
        EXPECT_TRUE(cloexec(fd)) << "the adopted descriptor " << fd << " would leak into the next exec";
    // Its close is the last hold: FIN.
    ASSERT_EQ(dti_close(nc, server), 0);
    EXPECT_EQ(dti_recv_wait(c_, client, buf, 1, 5000), 0);
}

TEST_F(DtiExec, NewMemberHoldsOnlyWhatTheOldOneHeldAndListed)
{
    dti_sock_t client, server;
    pair(&client, &server);
    int closed = dti_socket(c_);
    ASSERT_GE(closed, 0);
    ASSERT_EQ(dti_close(c_, dti_sock_t(closed)), 0);
    // Listed: the server, a handle this process closed, one it never had.
    dti_sock_t keep[] = {server, dti_sock_t(closed), dti_sock_t(0x00f00123)};
    dti_exec_fds f{};
    ASSERT_EQ(dti_exec_prepare(d_, keep, 3, &f), 1) << "only the server is the old image's to give";
    dti_exec_fds g = as_new_image(f);
    char why[200] = "";
    ASSERT_EQ(dti_adopt_exec(&g, &n_, why, sizeof why), 0) << why;
    int err = 0;
    dti_ctx_t *nc = dti_ctx_get(n_, &err);
    ASSERT_NE(nc, nullptr);
    // The client was not listed: the new member cannot touch it.
    EXPECT_EQ(dti_close(nc, client), -DTI_E_BAD_HANDLE);
    EXPECT_EQ(dti_close(nc, dti_sock_t(closed)), -DTI_E_BAD_HANDLE);
    char b;
    EXPECT_EQ(dti_send_all(c_, client, "y", 1, 5000), 1); // still open, still the old image's
    EXPECT_EQ(dti_recv_wait(nc, server, &b, 1, 5000), 1);
}

TEST_F(DtiExec, ManySocketsTakeSeveralMessages)
{
    std::vector<dti_sock_t> socks;
    for (int i = 0; i < 50; i++) {
        int s = dti_socket(c_);
        ASSERT_GE(s, 0) << dti_strerror(s);
        socks.push_back(dti_sock_t(s));
    }
    dti_exec_fds f{};
    ASSERT_EQ(dti_exec_prepare(d_, socks.data(), unsigned(socks.size()), &f), 50);
    dti_exec_fds g = as_new_image(f);
    char why[200] = "";
    ASSERT_EQ(dti_adopt_exec(&g, &n_, why, sizeof why), 0) << why;
    int err = 0;
    dti_ctx_t *nc = dti_ctx_get(n_, &err);
    ASSERT_NE(nc, nullptr);
    for (dti_sock_t s : socks)
        EXPECT_EQ(dti_close(nc, s), 0) << s;
}

TEST_F(DtiExec, FailedExecDropsTheMemberAndRestoresCloseOnExec)
{
    dti_sock_t client, server;
    pair(&client, &server);
    dti_exec_fds f{};
    ASSERT_EQ(dti_exec_prepare(d_, &server, 1, &f), 1);
    EXPECT_EQ(processes(), 2u);
    dti_exec_abort(d_, &f); // as when execve() returned -1
    EXPECT_TRUE(processes_become(1));
    for (int fd : {f.region_fd, f.priv_fd, f.doorbell_fd})
        EXPECT_TRUE(cloexec(fd));
    // The member's hold went with it: the process's own close really closes.
    ASSERT_EQ(dti_close(c_, server), 0);
    char b;
    EXPECT_EQ(dti_recv_wait(c_, client, &b, 1, 5000), 0);
}

TEST_F(DtiExec, ForgedHandoverIsRefusedAndTouchesNothing)
{
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    char path[] = "/tmp/dti-exec-XXXXXX";
    int file = mkstemp(path);
    ASSERT_GE(file, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(file, 1 << 20), 0);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    char why[200] = "";
    // A pipe as the control connection; a plain file as the region; a pipe as the doorbell.
    dti_exec_fds bad[] = {{p[0], file, file, p[1]}, {sv[0], file, file, p[1]}, {-1, -1, -1, -1}, {9999, 9998, 9997, 9996}};
    for (auto &f : bad) {
        EXPECT_LT(dti_adopt_exec(&f, &n_, why, sizeof why), 0) << f.ctl_fd;
        EXPECT_EQ(n_, nullptr);
    }
    // Nothing was closed.
    for (int fd : {p[0], p[1], file, sv[0], sv[1]})
        EXPECT_GE(fcntl(fd, F_GETFD), 0) << fd;
    for (int fd : {p[0], p[1], file, sv[0], sv[1]})
        close(fd);
}

TEST_F(DtiExec, HoldsOnlyForTheMemberItsOwnExecMade)
{
    dti_sock_t client, server;
    pair(&client, &server);
    // EXEC_HOLD with no EXEC before it.
    dti_ctl_msg m{};
    m.magic = DTI_CTL_MAGIC;
    m.type = DTI_CTL_EXEC_HOLD;
    m.abi_version = DTI_ABI_VERSION;
    m.index = 1;
    std::memcpy(m.text, &server, sizeof server);
    int fd = dti_control_fd(d_);
    ASSERT_EQ(send(fd, &m, sizeof m, 0), ssize_t(sizeof m));
    dti_ctl_msg r{};
    ASSERT_EQ(recv(fd, &r, sizeof r, 0), ssize_t(sizeof r));
    EXPECT_EQ(r.type, uint32_t(DTI_CTL_REFUSED));
    // Nor once the new image has spoken (adopted): it can be given no more.
    dti_exec_fds f{};
    ASSERT_EQ(dti_exec_prepare(d_, &client, 1, &f), 1);
    dti_exec_fds g = as_new_image(f);
    char why[200] = "";
    ASSERT_EQ(dti_adopt_exec(&g, &n_, why, sizeof why), 0) << why;
    int err = 0;
    ASSERT_NE(dti_ctx_get(n_, &err), nullptr); // a round trip: the engine has read the HELLO before it
    ASSERT_EQ(send(fd, &m, sizeof m, 0), ssize_t(sizeof m));
    ASSERT_EQ(recv(fd, &r, sizeof r, 0), ssize_t(sizeof r));
    EXPECT_EQ(r.type, uint32_t(DTI_CTL_REFUSED));
    // More than one message can carry: refused, the attachment still works.
    m.type = DTI_CTL_EXEC;
    m.index = DTI_CTL_HANDLES + 1;
    int sp[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
    ASSERT_TRUE(send_ctl_with_fd(fd, m, sp[0]));
    ASSERT_EQ(recv(fd, &r, sizeof r, 0), ssize_t(sizeof r));
    EXPECT_EQ(r.type, uint32_t(DTI_CTL_REFUSED));
    close(sp[0]);
    close(sp[1]);
    char b;
    EXPECT_EQ(dti_send_all(c_, client, "z", 1, 5000), 1);
    EXPECT_EQ(dti_recv_wait(c_, server, &b, 1, 5000), 1);
}

} // namespace
} // namespace dti::test
