// sd_notify without libsystemd (ppe/src/notify.h) against datagram sockets
// this test binds itself (a fake NOTIFY_SOCKET), and the watchdog gate that
// turns the engines' heartbeat into WATCHDOG=1.
#include "notify.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace {

// A bound datagram socket at `name` (path, or @abstract).
int bind_listener(const std::string &name)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, name.data(), name.size());
    if (name[0] == '@') sa.sun_path[0] = 0;
    socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + name.size());
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&sa), len) != 0) return -1;
    return fd;
}

std::string recv_one(int fd)
{
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

TEST(Notify, WithoutNotifySocketEverythingIsANoOp)
{
    unsetenv("NOTIFY_SOCKET");
    ppe::Notifier n;
    std::string err;
    ASSERT_TRUE(n.open_from_environment(&err)) << err;
    EXPECT_FALSE(n.enabled());
    EXPECT_TRUE(n.ready("x", &err));
    EXPECT_EQ(n.watchdog_usec(), 0u);
}

TEST(Notify, AbstractSocketGetsReadyStatusWatchdogStopping)
{
    const std::string name = "@eta-notify-test-" + std::to_string(getpid());
    int l = bind_listener(name);
    ASSERT_GE(l, 0);
    setenv("NOTIFY_SOCKET", name.c_str(), 1);
    setenv("WATCHDOG_USEC", "2000000", 1);
    setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
    ppe::Notifier n;
    std::string err;
    ASSERT_TRUE(n.open_from_environment(&err)) << err;
    EXPECT_TRUE(n.enabled());
    EXPECT_EQ(n.watchdog_usec(), 2000000u);
    // The variables are gone: nothing eta-ppe starts speaks for it.
    EXPECT_EQ(getenv("NOTIFY_SOCKET"), nullptr);
    EXPECT_EQ(getenv("WATCHDOG_USEC"), nullptr);
    ASSERT_TRUE(n.ready("serving on /run/eta/ppe.sock\nsecond line", &err)) << err;
    EXPECT_EQ(recv_one(l), "READY=1\nSTATUS=serving on /run/eta/ppe.sock second line\n");
    ASSERT_TRUE(n.status("2 application(s)", &err)) << err;
    EXPECT_EQ(recv_one(l), "STATUS=2 application(s)\n");
    ASSERT_TRUE(n.watchdog(&err)) << err;
    EXPECT_EQ(recv_one(l), "WATCHDOG=1\n");
    ASSERT_TRUE(n.stopping(&err)) << err;
    EXPECT_EQ(recv_one(l), "STOPPING=1\n");
    close(l);
}

TEST(Notify, PathSocketAndAnotherProcesssWatchdog)
{
    char dir[] = "/tmp/eta-notify-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string path = std::string(dir) + "/notify";
    int l = bind_listener(path);
    ASSERT_GE(l, 0);
    setenv("NOTIFY_SOCKET", path.c_str(), 1);
    setenv("WATCHDOG_USEC", "1000000", 1);
    setenv("WATCHDOG_PID", "1", 1); // meant for another process: no watchdog here
    ppe::Notifier n;
    std::string err;
    ASSERT_TRUE(n.open_from_environment(&err)) << err;
    EXPECT_EQ(n.watchdog_usec(), 0u);
    ASSERT_TRUE(n.ready("up", &err)) << err;
    EXPECT_EQ(recv_one(l), "READY=1\nSTATUS=up\n");
    close(l);
    unlink(path.c_str());
    rmdir(dir);
}

TEST(Notify, BadNotifySocketSaysWhat)
{
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    ppe::Notifier n;
    std::string err;
    EXPECT_FALSE(n.open_from_environment(&err));
    EXPECT_NE(err.find("NOTIFY_SOCKET=\"relative/path\""), std::string::npos) << err;
    setenv("NOTIFY_SOCKET", "/nonexistent-eta/notify", 1);
    ppe::Notifier m;
    EXPECT_FALSE(m.open_from_environment(&err));
    EXPECT_NE(err.find("No such file"), std::string::npos) << err;
}

TEST(WatchdogGate, PetsOnlyWhileEveryEngineTurns)
{
    ppe::WatchdogGate g;
    const uint64_t s = 1000000000ull;
    g.start(2000000, 0, 2); // 2 s: pets at least 0.5 s apart
    uint64_t loops[2] = {10, 10};
    EXPECT_FALSE(g.due(loops, 2, s / 4)); // too soon
    EXPECT_TRUE(g.due(loops, 2, s));
    EXPECT_FALSE(g.due(loops, 2, 2 * s)); // nobody turned since
    loops[0] = 20;
    EXPECT_FALSE(g.due(loops, 2, 3 * s)); // engine 1 hangs: no pet, ever
    EXPECT_FALSE(g.due(loops, 2, 30 * s));
    loops[1] = 11;
    EXPECT_TRUE(g.due(loops, 2, 31 * s));
    ppe::WatchdogGate off;
    off.start(0, 0, 1);
    EXPECT_FALSE(off.due(loops, 1, 100 * s)); // no WatchdogSec=: never
}

} // namespace
