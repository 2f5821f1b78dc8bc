// fork(): a child joins its parent's group and keeps every socket it
// inherited, with kernel file semantics (dti_fork_prepare/parent/child).
//
// The fixture engine runs on a thread of this test process; children are
// real processes that talk to it over their own control connections. A child
// never uses gtest: it reports through its exit status (0: all good, else the
// number of the check that failed).
#include "raw_app.h"
#include "test_util.h"

#include "dti_abi.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include <sys/socket.h>
#include <sys/wait.h>

namespace dti::test {
namespace {

class DtiFork : public Attached {
  protected:
    // Forks with the hooks around it; the child runs `body` with its own
    // context and exits with what it returns.
    pid_t fork_child(const std::function<int(dti_ctx_t *)> &body)
    {
        EXPECT_EQ(dti_fork_prepare(d_), 0);
        pid_t pid = fork();
        if (pid == 0) {
            if (dti_fork_child(d_) != 0)
                _exit(100);
            int err = 0;
            dti_ctx_t *c = dti_ctx_get(d_, &err);
            if (!c)
                _exit(101);
            _exit(body(c));
        }
        dti_fork_parent(d_);
        EXPECT_GT(pid, 0);
        return pid;
    }
    static int exit_code(pid_t pid)
    {
        int st = 0;
        if (waitpid(pid, &st, 0) != pid)
            return -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 200 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
    // Waits (bounded) until the engine serves `n` processes.
    bool attachments_become(size_t n)
    {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (processes() != n)
            if (std::chrono::steady_clock::now() > until)
                return false;
        return true;
    }
    static int recv_byte(dti_ctx_t *c, dti_sock_t s)
    {
        char b = 0;
        ssize_t n = dti_recv_wait(c, s, &b, 1, 5000);
        return n == 1 ? b : int(n);
    }
};

TEST_F(DtiFork, ChildAndParentBothAcceptOnTheInheritedListener)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    pid_t child = fork_child([&](dti_ctx_t *c) {
        int s = dti_accept(c, l, nullptr, 5000);
        if (s < 0)
            return 1;
        if (dti_send_all(c, dti_sock_t(s), "C", 1, 5000) != 1)
            return 2;
        return dti_close(c, dti_sock_t(s)) == 0 ? 0 : 3;
    });
    dti_addr to{0x7f000001, port};
    int c1 = dti_socket(c_), c2 = dti_socket(c_);
    ASSERT_GE(c1, 0);
    ASSERT_GE(c2, 0);
    ASSERT_EQ(dti_connect(c_, dti_sock_t(c1), &to, 5000), 0);
    ASSERT_EQ(dti_connect(c_, dti_sock_t(c2), &to, 5000), 0);
    int s = dti_accept(c_, l, nullptr, 5000);
    ASSERT_GE(s, 0) << dti_strerror(s);
    ASSERT_EQ(dti_send_all(c_, dti_sock_t(s), "P", 1, 5000), 1);
    std::set<int> who{recv_byte(c_, dti_sock_t(c1)), recv_byte(c_, dti_sock_t(c2))};
    EXPECT_EQ(who, (std::set<int>{'C', 'P'}));
    EXPECT_EQ(exit_code(child), 0);
}

TEST_F(DtiFork, ChildServesAnInheritedConnectionTheParentClosed)
{
    dti_sock_t client, server;
    pair(&client, &server);
    pid_t child = fork_child([&](dti_ctx_t *c) {
        char buf[8] = {};
        if (dti_recv_wait(c, server, buf, 4, 5000) != 4 || std::memcmp(buf, "ping", 4) != 0)
            return 1;
        if (dti_send_all(c, server, "pong", 4, 5000) != 4)
            return 2;
        return dti_close(c, server) == 0 ? 0 : 3;
    });
    // The parent lets go at once (a forking server): the child's hold keeps
    // the connection open.
    ASSERT_EQ(dti_close(c_, server), 0);
    ASSERT_EQ(dti_send_all(c_, client, "ping", 4, 5000), 4);
    char buf[8] = {};
    ASSERT_EQ(dti_recv_wait(c_, client, buf, 4, 5000), 4);
    EXPECT_EQ(std::string(buf, 4), "pong");
    // The child's close was the last: FIN, not a reset.
    EXPECT_EQ(dti_recv_wait(c_, client, buf, 1, 5000), 0);
    EXPECT_EQ(exit_code(child), 0);
}

TEST_F(DtiFork, ChildExitDropsOnlyItsHoldsAndClosesWhatOnlyItHeld)
{
    dti_sock_t client, server;
    pair(&client, &server);
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    pid_t child = fork_child([&](dti_ctx_t *c) {
        // A connection of its own, left open at exit; and a last send on the
        // inherited one.
        int s = dti_socket(c);
        dti_addr to{0x7f000001, port};
        if (s < 0 || dti_connect(c, dti_sock_t(s), &to, 5000) != 0)
            return 1;
        if (dti_send_all(c, dti_sock_t(s), "x", 1, 5000) != 1)
            return 2;
        return dti_send_all(c, client, "y", 1, 5000) == 1 ? 0 : 3;
    });
    EXPECT_EQ(exit_code(child), 0);
    EXPECT_TRUE(attachments_become(1));
    // Its own socket nobody else held: closed as at a kernel exit (data, then EOF).
    int s = dti_accept(c_, l, nullptr, 5000);
    ASSERT_GE(s, 0) << dti_strerror(s);
    EXPECT_EQ(recv_byte(c_, dti_sock_t(s)), 'x');
    EXPECT_EQ(recv_byte(c_, dti_sock_t(s)), 0);
    // The inherited pair is untouched: its last byte arrived, and both
    // directions still work.
    EXPECT_EQ(recv_byte(c_, server), 'y');
    ASSERT_EQ(dti_send_all(c_, server, "z", 1, 5000), 1);
    EXPECT_EQ(recv_byte(c_, client), 'z');
    struct dti_sock_info st;
    ASSERT_EQ(dti_sock_status(c_, client, &st), 0);
    EXPECT_EQ(st.state & (DTI_STATE_RESET | DTI_STATE_RD_CLOSED), 0u);
}

TEST_F(DtiFork, ParentLeavingKeepsTheChildsSocketsWorking)
{
    dti_sock_t client, server;
    pair(&client, &server);
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    pid_t child = fork_child([&](dti_ctx_t *c) {
        char b;
        if (read(go[0], &b, 1) != 1)
            return 1;
        if (dti_send_all(c, client, "abc", 3, 5000) != 3)
            return 2;
        char buf[4] = {};
        if (dti_recv_wait(c, server, buf, 3, 5000) != 3 || std::memcmp(buf, "abc", 3) != 0)
            return 3;
        return dti_engine_alive(dti_ctx_owner(c)) == 1 ? 0 : 4;
    });
    dti_detach(d_); // the parent goes (as at its exit)
    d_ = nullptr;
    EXPECT_TRUE(attachments_become(1));
    ASSERT_EQ(write(go[1], "g", 1), 1);
    EXPECT_EQ(exit_code(child), 0);
    EXPECT_TRUE(attachments_become(0));
    close(go[0]);
    close(go[1]);
}

TEST_F(DtiFork, SequentialWritersShareTheStream)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_send_all(c_, client, "a", 1, 5000), 1);
    pid_t child = fork_child([&](dti_ctx_t *c) { return dti_send_all(c, client, "b", 1, 5000) == 1 ? 0 : 1; });
    ASSERT_EQ(exit_code(child), 0);
    ASSERT_EQ(dti_send_all(c_, client, "c", 1, 5000), 1);
    char buf[4] = {};
    size_t got = 0;
    while (got < 3) {
        ssize_t n = dti_recv_wait(c_, server, buf + got, 3 - got, 5000);
        ASSERT_GT(n, 0);
        got += size_t(n);
    }
    EXPECT_EQ(std::string(buf, 3), "abc");
}

TEST_F(DtiFork, ChildCannotUseSocketsItDoesNotHold)
{
    // Another application (group) with a socket of its own.
    dti_attach_opts opts{path_.c_str(), "other"};
    dti_t *other = nullptr;
    char msg[256] = "";
    ASSERT_EQ(dti_attach(&opts, &other, msg, sizeof msg), 0) << msg;
    int oerr = 0;
    dti_ctx_t *oc = dti_ctx_get(other, &oerr);
    ASSERT_NE(oc, nullptr);
    int foreign = dti_socket(oc);
    ASSERT_GE(foreign, 0);

    int to_child[2];
    ASSERT_EQ(pipe(to_child), 0);
    pid_t child = fork_child([&](dti_ctx_t *c) {
        dti_sock_t later;
        if (read(to_child[0], &later, sizeof later) != ssize_t(sizeof later))
            return 1;
        // Made by the parent after the fork: in the same region, not ours.
        if (dti_setsockopt(c, later, DTI_SO_NODELAY, 1) != -DTI_E_BAD_HANDLE)
            return 2;
        if (dti_close(c, later) != -DTI_E_BAD_HANDLE)
            return 3;
        // Another group's handle names nothing here.
        if (dti_setsockopt(c, dti_sock_t(foreign), DTI_SO_NODELAY, 1) != -DTI_E_BAD_HANDLE)
            return 4;
        return 0;
    });
    int later = dti_socket(c_);
    ASSERT_GE(later, 0);
    dti_sock_t h = dti_sock_t(later);
    ASSERT_EQ(write(to_child[1], &h, sizeof h), ssize_t(sizeof h));
    EXPECT_EQ(exit_code(child), 0);
    // Still the parent's, still open.
    EXPECT_EQ(dti_setsockopt(c_, h, DTI_SO_NODELAY, 1), 0);
    EXPECT_EQ(dti_setsockopt(oc, dti_sock_t(foreign), DTI_SO_NODELAY, 1), 0);
    dti_detach(other);
    close(to_child[0]);
    close(to_child[1]);
}

TEST_F(DtiFork, ForkRequestWithoutASocketIsRefused)
{
    // What a hostile or broken app might send: FORK with a pipe.
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    dti_ctl_msg m{};
    m.magic = DTI_CTL_MAGIC;
    m.type = DTI_CTL_FORK;
    m.abi_version = DTI_ABI_VERSION;
    int fd = dti_control_fd(d_);
    ASSERT_TRUE(send_ctl_with_fd(fd, m, p[0]));
    dti_ctl_msg r{};
    ASSERT_EQ(recv(fd, &r, sizeof r, 0), ssize_t(sizeof r));
    EXPECT_EQ(r.type, uint32_t(DTI_CTL_REFUSED));
    EXPECT_EQ(r.status, DTI_E_PROTOCOL);
    close(p[0]);
    close(p[1]);
    EXPECT_EQ(processes(), 1u);
    int s = dti_socket(c_); // the attachment still works
    EXPECT_GE(s, 0) << dti_strerror(s);
}

TEST_F(DtiFork, FailedForkDropsTheMemberAndItsHolds)
{
    dti_sock_t client, server;
    pair(&client, &server);
    ASSERT_EQ(dti_fork_prepare(d_), 0);
    EXPECT_EQ(processes(), 2u);
    dti_fork_parent(d_); // as when fork() returned -1
    EXPECT_TRUE(attachments_become(1));
    // The snapshot's hold went with it: closing the server really closes.
    ASSERT_EQ(dti_close(c_, server), 0);
    char b;
    EXPECT_EQ(dti_recv_wait(c_, client, &b, 1, 5000), 0);
}

// An application that is done sending and exits (the last process of its
// group) must not lose its unsent tail: a socket it closed, or shut down for
// writing and then left open at exit (socat does that), is finished like the
// kernel finishes it: the data, then EOF, no reset. The child attaches on its
// own (a plain fork without the hooks), so its exit is its group's end. It
// sends more than our receive ring holds and we read only after the engine
// has seen it go, so part of the data is still unsent at its exit.
TEST_F(DtiFork, LastProcessExitFinishesSocketsItWasDoneWith)
{
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    for (int how = 0; how < 2; how++) { // 0: close() then exit; 1: shutdown(WR), exit without close
        pid_t pid = fork();
        if (pid == 0) {
            dti_attach_opts opts{path_.c_str(), "exit-test"};
            dti_t *d = nullptr;
            if (dti_attach(&opts, &d, nullptr, 0) != 0)
                _exit(1);
            int err = 0;
            dti_ctx_t *c = dti_ctx_get(d, &err);
            int s = c ? dti_socket(c) : -1;
            dti_addr to{0x7f000001, port};
            if (s < 0 || dti_connect(c, dti_sock_t(s), &to, 5000) != 0)
                _exit(2);
            static char buf[24 * 1024]; // 16 KiB receive ring here + 8 KiB left in its send ring
            for (size_t i = 0; i < sizeof buf; i++)
                buf[i] = char('a' + i % 23);
            if (dti_send_all(c, dti_sock_t(s), buf, sizeof buf, 5000) != ssize_t(sizeof buf))
                _exit(3);
            if (how == 0 ? dti_close(c, dti_sock_t(s)) != 0 : dti_shutdown(c, dti_sock_t(s), DTI_SHUT_WR) != 0)
                _exit(4);
            _exit(0); // no detach, no close: the engine sees the hang-up
        }
        ASSERT_GT(pid, 0);
        int a = dti_accept(c_, l, nullptr, 5000);
        ASSERT_GE(a, 0) << dti_strerror(a);
        EXPECT_EQ(exit_code(pid), 0) << "how " << how;
        ASSERT_TRUE(attachments_become(1)) << "the engine did not see the child go";
        std::string got;
        char b[65536];
        for (;;) {
            ssize_t n = dti_recv_wait(c_, dti_sock_t(a), b, sizeof b, 5000);
            ASSERT_GE(n, 0) << "how " << how << ": " << dti_strerror(int(n)) << " after " << got.size() << " bytes";
            if (n == 0)
                break;
            got.append(b, size_t(n));
        }
        ASSERT_EQ(got.size(), sizeof(char[24 * 1024])) << "how " << how;
        for (size_t i = 0; i < got.size(); i++)
            ASSERT_EQ(got[i], char('a' + i % 23)) << "how " << how << " byte " << i;
        dti_close(c_, dti_sock_t(a));
    }
}

} // namespace
} // namespace dti::test
