// The engine applies the kernel's rule for privileged ports: binding a port
// below net.ipv4.ip_unprivileged_port_start needs CAP_NET_BIND_SERVICE in
// the binding process's effective set, read by the engine from /proc when
// the BIND comes (the process the kernel names: SO_PEERCRED at attach, a
// fork child's SCM_CREDENTIALS), never from the region or from a pid the
// application writes. Through the fixture engine.
#include "test_util.h"

#include "raw_app.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <grp.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

namespace dti::test {
namespace {

unsigned unprivileged_port_start()
{
    std::ifstream f("/proc/sys/net/ipv4/ip_unprivileged_port_start");
    unsigned v = 1024;
    f >> v;
    return v;
}

bool has_bind_service()
{
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        unsigned long long eff = 0;
        if (std::sscanf(line.c_str(), "CapEff: %llx", &eff) == 1)
            return (eff >> CAP_NET_BIND_SERVICE) & 1;
    }
    return false;
}

// Attaches and binds `port`; returns the bind result (or 100+ on setup failure).
int bind_as_attached(const std::string &path, uint16_t port)
{
    dti_attach_opts opts{path.c_str(), "privilege-test"};
    dti_t *d = nullptr;
    char msg[256] = "";
    if (dti_attach(&opts, &d, msg, sizeof msg) != 0)
        return 101;
    int err = 0;
    dti_ctx_t *c = dti_ctx_get(d, &err);
    int s = c ? dti_socket(c) : -1;
    if (s < 0)
        return 102;
    dti_addr a{0, port};
    int rc = dti_bind(c, dti_sock_t(s), &a);
    dti_detach(d);
    return rc;
}

// Sets or clears CAP_NET_BIND_SERVICE in this thread's effective set (the
// permitted set keeps it, so it can come back). False when that fails.
bool set_bind_service(bool on)
{
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[2] = {};
    if (syscall(SYS_capget, &h, d) != 0)
        return false;
    if (on)
        d[0].effective |= 1u << CAP_NET_BIND_SERVICE;
    else
        d[0].effective &= ~(1u << CAP_NET_BIND_SERVICE);
    return syscall(SYS_capset, &h, d) == 0 && has_bind_service() == on;
}

int bind_port(dti_ctx_t *c, uint16_t port)
{
    int s = dti_socket(c);
    if (s < 0)
        return 1000 + -s;
    dti_addr a{0, port};
    int rc = dti_bind(c, dti_sock_t(s), &a);
    dti_close(c, dti_sock_t(s));
    return rc;
}

// Runs `body` in a child process; its exit code (or 200 + signal).
template <typename F> int in_child(F body)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(body());
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 199;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

class DtiPrivilegeNow : public ::testing::Test {
  protected:
    void SetUp() override
    {
        start_ = unprivileged_port_start();
        if (start_ < 3)
            GTEST_SKIP() << "net.ipv4.ip_unprivileged_port_start is " << start_ << ": too few privileged ports";
        if (!has_bind_service())
            GTEST_SKIP() << "needs CAP_NET_BIND_SERVICE (root)";
        path_ = temp_socket_path();
        fixture::TestPpe::Options o{small_limits()};
        o.engines = test_engines();
        ppe_ = std::make_unique<fixture::TestPpe>(path_, o);
        std::string why;
        ASSERT_TRUE(ppe_->start(&why)) << why;
        ASSERT_EQ(chmod(path_.c_str(), 0666), 0);
    }
    void TearDown() override
    {
        if (ppe_)
            ppe_->stop();
    }
    unsigned start_ = 0;
    std::string path_;
    std::unique_ptr<fixture::TestPpe> ppe_;
};

// A process that drops the capability after attaching is refused from then
// on, and binds again once it takes the capability back.
TEST_F(DtiPrivilegeNow, DroppingBindServiceAfterAttachIsSeenAtBind)
{
    const std::string path = path_;
    const uint16_t p1 = uint16_t(start_ - 1), p2 = uint16_t(start_ - 2);
    int rc = in_child([&] {
        dti_attach_opts opts{path.c_str(), "privilege-drop"};
        dti_t *d = nullptr;
        char msg[256] = "";
        if (dti_attach(&opts, &d, msg, sizeof msg) != 0)
            return 101;
        int err = 0;
        dti_ctx_t *c = dti_ctx_get(d, &err);
        if (!c)
            return 102;
        if (bind_port(c, p1) != 0)
            return 10; // with the capability
        if (!set_bind_service(false))
            return 103;
        if (bind_port(c, p2) != -EACCES)
            return 11; // dropped after attach: must be refused now
        if (!set_bind_service(true))
            return 104;
        if (bind_port(c, p2) != 0)
            return 12; // taken back
        dti_detach(d);
        return 0;
    });
    EXPECT_EQ(rc, 0) << "10: refused with the capability; 11: bound after dropping it; 12: refused after "
                        "taking it back; 10x: set-up";
}

// A fork child (libdti's fork hooks: it shares its parent's attachment) that
// gives up root is refused, also when its BIND comes before the engine has
// read the HELLO that tells its pid; its parent still binds.
TEST_F(DtiPrivilegeNow, ForkChildThatDroppedRootIsRefused)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root (the child gives up root)";
    const std::string path = path_;
    const uint16_t p1 = uint16_t(start_ - 1), p2 = uint16_t(start_ - 2);
    int rc = in_child([&] {
        dti_attach_opts opts{path.c_str(), "privilege-fork"};
        dti_t *d = nullptr;
        char msg[256] = "";
        if (dti_attach(&opts, &d, msg, sizeof msg) != 0)
            return 101;
        if (dti_fork_prepare(d) != 0)
            return 102;
        pid_t pid = fork();
        if (pid == 0) {
            if (dti_fork_child(d) != 0)
                _exit(103);
            if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                setresuid(65534, 65534, 65534) != 0 || has_bind_service())
                _exit(104);
            int err = 0;
            dti_ctx_t *c = dti_ctx_get(d, &err);
            if (!c)
                _exit(105);
            _exit(bind_port(c, p1) == -EACCES ? 0 : 20);
        }
        dti_fork_parent(d);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
            return 106;
        if (WEXITSTATUS(status) != 0)
            return WEXITSTATUS(status);
        int err = 0;
        dti_ctx_t *c = dti_ctx_get(d, &err);
        if (!c || bind_port(c, p2) != 0)
            return 21;
        dti_detach(d);
        return 0;
    });
    EXPECT_EQ(rc, 0) << "20: the child without root bound a privileged port; 21: the parent was refused; "
                        "10x: set-up";
}

// The pid an application writes into its HELLO (informational) never picks
// whose capabilities count: a process without CAP_NET_BIND_SERVICE that
// names pid 1 is still refused.
TEST_F(DtiPrivilegeNow, PidWrittenByTheApplicationDoesNotCount)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root (the child becomes uid 65534)";
    const std::string path = path_;
    const uint16_t p1 = uint16_t(start_ - 1);
    const uint32_t engines = test_engines();
    int rc = in_child([&] {
        if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
            setresuid(65534, 65534, 65534) != 0 || has_bind_service())
            return 101;
        for (uint32_t e = 0; e < engines; e++) {
            RawApp b;
            if (!b.attach(path, e, 1))
                return 102;
            if (!b.send_msg(DTI_CTL_HELLO, 0, e)) // pid 1 (RawApp always claims it)
                return 103;
            int32_t s = b.call(0, command(DTI_OP_SOCKET, 0));
            if (s < 0)
                return 104;
            if (int32_t r = b.call(0, command(DTI_OP_BIND, uint32_t(s), 0, p1)); r != -EACCES)
                return r == 0 ? 30 : 31;
        }
        return 0;
    });
    EXPECT_EQ(rc, 0) << "30: bound a privileged port by claiming pid 1; 31: another answer; 10x: set-up";
}

TEST(DtiPrivilege, PortsBelowUnprivilegedStartNeedBindService)
{
    unsigned start = unprivileged_port_start();
    if (start == 0)
        GTEST_SKIP() << "net.ipv4.ip_unprivileged_port_start is 0: no port is privileged here";
    uint16_t privileged = uint16_t(start - 1), plain = uint16_t(start < 40000 ? 40000 : start);
    std::string path = temp_socket_path();
    fixture::TestPpe ppe(path, fixture::TestPpe::Options{small_limits()});
    std::string why;
    ASSERT_TRUE(ppe.start(&why)) << why;
    ASSERT_EQ(chmod(path.c_str(), 0666), 0); // the unprivileged child must reach it

    if (has_bind_service()) {
        EXPECT_EQ(bind_as_attached(path, privileged), 0) << "a process with CAP_NET_BIND_SERVICE was refused";
    }

    // A process without the capability: a child that drops root (when we are
    // root) or simply lacks it.
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (getuid() == 0 && (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                              setresuid(65534, 65534, 65534) != 0))
            _exit(110);
        if (has_bind_service())
            _exit(111); // cannot test the refusal here
        int low = bind_as_attached(path, privileged);
        int high = bind_as_attached(path, plain);
        _exit(low == -EACCES && high == 0 ? 0 : low == 0 ? 120 : high != 0 ? 121 : 122);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 111)
        GTEST_SKIP() << "the child kept CAP_NET_BIND_SERVICE";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "120: bound port " << privileged
                                      << " without CAP_NET_BIND_SERVICE; 121: refused port " << plain
                                      << "; 122: another answer; 101/102: attach/socket failed";
    ppe.stop();
}

} // namespace
} // namespace dti::test
