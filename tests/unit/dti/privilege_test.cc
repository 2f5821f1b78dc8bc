// The engine applies the kernel's rule for privileged ports: binding a port
// below net.ipv4.ip_unprivileged_port_start needs CAP_NET_BIND_SERVICE in
// the attaching process's effective set (read by the engine from /proc at
// attach, never from the region). Through the fixture engine.
#include "test_util.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <grp.h>
#include <linux/capability.h>
#include <sys/stat.h>
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
