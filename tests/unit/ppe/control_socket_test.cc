// eta-ppe tells a live holder of its control socket from a dying one
// (ppe/src/system.h: process_state, probe_socket_holder,
// wait_for_socket_free; issue 35). Real processes hold real sockets: a live
// one, a stopped one (SIGSTOP), one that has exited (a zombie) while its
// socket lives on; and hand-made /proc entries (a TEST FIXTURE directory)
// for the states a test cannot hold still (PF_EXITING, SIGKILL pending).
// No verdict depends on timing: each wait is for an event (waitpid, the
// wait's own note), and each bound is far above any honest delay.
#include "system.h"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

namespace {

using ppe::HolderState;
namespace fs = std::filesystem;

struct TempDir {
    fs::path p;
    TempDir()
    {
        char t[] = "/tmp/eta-ctlsock-XXXXXX";
        EXPECT_NE(mkdtemp(t), nullptr);
        p = t;
    }
    ~TempDir()
    {
        std::error_code ec;
        fs::remove_all(p, ec);
    }
};

int listen_at(const std::string &path)
{
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    if (bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 || listen(fd, 16) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// A child that listens at `path` and then waits on a pipe until the test
// closes it (or kills it). Returns its pid once it listens.
struct Holder {
    pid_t pid = -1;
    int hold = -1; // the write end: closing it ends the child
    explicit Holder(const std::string &path)
    {
        int ready[2], wait_fds[2];
        EXPECT_EQ(pipe(ready), 0);
        EXPECT_EQ(pipe(wait_fds), 0);
        pid = fork();
        if (pid == 0) {
            close(ready[0]);
            close(wait_fds[1]);
            const int fd = listen_at(path);
            char c = fd >= 0 ? 'y' : 'n';
            if (write(ready[1], &c, 1) != 1) _exit(2);
            while (read(wait_fds[0], &c, 1) < 0 && errno == EINTR) {
            }
            _exit(0);
        }
        close(ready[1]);
        close(wait_fds[0]);
        hold = wait_fds[1];
        char c = 0;
        EXPECT_EQ(read(ready[0], &c, 1), 1);
        EXPECT_EQ(c, 'y') << "the holder could not listen at " << path;
        close(ready[0]);
    }
    ~Holder()
    {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        if (hold >= 0) close(hold);
    }
};

TEST(ControlSocket, NobodyListeningIsFree)
{
    TempDir d;
    const std::string path = (d.p / "ppe.sock").string();
    std::string err;
    EXPECT_TRUE(ppe::wait_for_socket_free(path, std::chrono::seconds(60), nullptr, &err)) << err;
    // A stale file: bound once, its listener closed.
    const int fd = listen_at(path);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_TRUE(fs::exists(path));
    EXPECT_EQ(ppe::probe_socket_holder(path).state, HolderState::kFree);
    EXPECT_TRUE(ppe::wait_for_socket_free(path, std::chrono::seconds(60), nullptr, &err)) << err;
}

TEST(ControlSocket, LiveHolderIsRefusedAtOnceByPid)
{
    TempDir d;
    const std::string path = (d.p / "ppe.sock").string();
    Holder h(path);
    const ppe::SocketHolder got = ppe::probe_socket_holder(path);
    EXPECT_EQ(got.state, HolderState::kServing);
    EXPECT_EQ(got.pid, h.pid);
    std::string err;
    bool noted = false;
    EXPECT_FALSE(ppe::wait_for_socket_free(path, std::chrono::seconds(60), [&](const std::string &) { noted = true; },
                                           &err));
    EXPECT_FALSE(noted) << "a live holder was waited for";
    EXPECT_NE(err.find("(pid " + std::to_string(h.pid) + ") is already serving " + path), std::string::npos) << err;
    EXPECT_NE(err.find("kill " + std::to_string(h.pid)), std::string::npos) << err;
}

TEST(ControlSocket, StoppedHolderIsAliveAndRefusedAtOnce)
{
    TempDir d;
    const std::string path = (d.p / "ppe.sock").string();
    Holder h(path);
    ASSERT_EQ(kill(h.pid, SIGSTOP), 0);
    int st = 0;
    ASSERT_EQ(waitpid(h.pid, &st, WUNTRACED), h.pid); // the event: it has stopped
    ASSERT_TRUE(WIFSTOPPED(st));
    EXPECT_EQ(ppe::process_state(h.pid), HolderState::kStopped);
    std::string err;
    bool noted = false;
    EXPECT_FALSE(ppe::wait_for_socket_free(path, std::chrono::seconds(60), [&](const std::string &) { noted = true; },
                                           &err));
    EXPECT_FALSE(noted) << "a stopped holder was waited for as if it were exiting";
    EXPECT_NE(err.find("(pid " + std::to_string(h.pid) + "), which serves " + path + ", is stopped"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("kill -CONT " + std::to_string(h.pid)), std::string::npos) << err;
    kill(h.pid, SIGCONT);
}

// The listener has exited (a zombie, not yet reaped) while its socket lives
// on, held here as the kernel holds a killed PPE's while it tears down its
// mappings: eta-ppe waits, naming the pid, and starts as soon as the socket
// is released.
TEST(ControlSocket, ExitingHolderIsWaitedForUntilItReleases)
{
    TempDir d;
    const std::string path = (d.p / "ppe.sock").string();
    int sp[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp), 0);
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = listen_at(path);
        if (fd < 0) _exit(2);
        char b = 'l';
        iovec iov{&b, 1};
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
        _exit(sendmsg(sp[1], &m, 0) == 1 ? 0 : 3);
    }
    close(sp[1]);
    // Take the listener over.
    char b = 0;
    iovec iov{&b, 1};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ASSERT_EQ(recvmsg(sp[0], &m, MSG_CMSG_CLOEXEC), 1);
    close(sp[0]);
    int held = -1;
    std::memcpy(&held, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof held);
    ASSERT_GE(held, 0);
    // The event: the listener has exited (left a zombie: WNOWAIT).
    siginfo_t si{};
    ASSERT_EQ(waitid(P_PID, id_t(pid), &si, WEXITED | WNOWAIT), 0);
    ASSERT_EQ(si.si_status, 0);

    const ppe::SocketHolder got = ppe::probe_socket_holder(path);
    EXPECT_EQ(got.state, HolderState::kExiting);
    EXPECT_EQ(got.pid, pid);

    // The wait releases the socket when its note says it waits: no sleep.
    std::promise<std::string> noted;
    std::atomic<bool> once{false};
    std::string err;
    auto waiting = std::async(std::launch::async, [&] {
        const bool ok = ppe::wait_for_socket_free(
            path, std::chrono::seconds(120),
            [&](const std::string &n) {
                if (!once.exchange(true)) noted.set_value(n);
            },
            &err);
        if (!once.exchange(true)) noted.set_value("(returned without waiting)");
        return ok;
    });
    const std::string note = noted.get_future().get();
    EXPECT_NE(note.find("waiting for"), std::string::npos) << note;
    EXPECT_NE(note.find("(pid " + std::to_string(pid) + "), which is exiting, to release " + path), std::string::npos)
        << note;
    close(held);
    EXPECT_TRUE(waiting.get()) << err;
    waitpid(pid, nullptr, 0);
}

// An exiting holder that does not let go within the bound: refused, naming it.
TEST(ControlSocket, ExitingHolderThatNeverReleasesIsRefusedAfterTheBound)
{
    TempDir d;
    const std::string path = (d.p / "ppe.sock").string();
    Holder h(path);
    // Hand-made /proc for the holder: running, but SIGKILL pending.
    TempDir proc;
    fs::create_directories(proc.p / std::to_string(h.pid));
    std::ofstream(proc.p / std::to_string(h.pid) / "stat") << h.pid << " (eta-ppe) R 1 1 1 0 -1 4194560 0 0\n";
    std::ofstream(proc.p / std::to_string(h.pid) / "status") << "Name:\teta-ppe\nSigPnd:\t0000000000000100\n";
    std::ofstream(proc.p / std::to_string(h.pid) / "comm") << "eta-ppe\n";
    std::string err, note;
    EXPECT_FALSE(ppe::wait_for_socket_free(
        path, std::chrono::milliseconds(100), [&](const std::string &n) { note = n; }, &err, proc.p.string()));
    EXPECT_NE(note.find("waiting for eta-ppe (pid " + std::to_string(h.pid) + "), which is exiting"),
              std::string::npos)
        << note;
    EXPECT_NE(err.find("eta-ppe (pid " + std::to_string(h.pid) + ") is exiting but still holds " + path +
                       " after 100 ms"),
              std::string::npos)
        << err;
}

void write_proc(const fs::path &root, int pid, const std::string &stat, const std::string &status)
{
    fs::create_directories(root / std::to_string(pid));
    std::ofstream(root / std::to_string(pid) / "stat") << stat << "\n";
    std::ofstream(root / std::to_string(pid) / "status") << status;
}

TEST(ControlSocket, ProcessStateFromProc)
{
    TempDir proc;
    // flags 4194560 = 0x400100 (PF_FORKNOEXEC | PF_RANDOMIZE): an ordinary live process.
    write_proc(proc.p, 10, "10 (eta-ppe) S 1 10 10 0 -1 4194560 1 2", "SigPnd:\t0000000000000000\nShdPnd:\t0\n");
    write_proc(proc.p, 11, "11 (eta-ppe) T 1 11 11 0 -1 4194560 1 2", "SigPnd:\t0000000000000000\n");
    write_proc(proc.p, 12, "12 (eta-ppe) Z 1 12 12 0 -1 4227076 1 2", "");
    write_proc(proc.p, 13, "13 (eta-ppe) D 1 13 13 0 -1 4194564 1 2", ""); // PF_EXITING
    write_proc(proc.p, 14, "14 (eta-ppe) R 1 14 14 0 -1 4194560 1 2", "ShdPnd:\t0000000000000100\n");
    write_proc(proc.p, 15, "15 (a) b) (c) T 1 15 15 0 -1 4194560 1 2", "SigPnd:\t0000000000000100\n");
    write_proc(proc.p, 16, "16 (x) X 1 16 16 0 -1 4194560 1 2", "");
    EXPECT_EQ(ppe::process_state(10, proc.p.string()), HolderState::kServing);
    EXPECT_EQ(ppe::process_state(11, proc.p.string()), HolderState::kStopped);
    EXPECT_EQ(ppe::process_state(12, proc.p.string()), HolderState::kExiting) << "a zombie";
    EXPECT_EQ(ppe::process_state(13, proc.p.string()), HolderState::kExiting) << "PF_EXITING";
    EXPECT_EQ(ppe::process_state(14, proc.p.string()), HolderState::kExiting) << "SIGKILL pending";
    EXPECT_EQ(ppe::process_state(15, proc.p.string()), HolderState::kExiting)
        << "stopped with SIGKILL pending (comm with parentheses and spaces)";
    EXPECT_EQ(ppe::process_state(16, proc.p.string()), HolderState::kExiting) << "dead";
    EXPECT_EQ(ppe::process_state(99, proc.p.string()), HolderState::kExiting) << "reaped: gone";
    // This process, for real.
    EXPECT_EQ(ppe::process_state(getpid()), HolderState::kServing);
}

} // namespace
