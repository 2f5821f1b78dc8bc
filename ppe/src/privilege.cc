// eta-ppe's privileges (privilege.h). Runs once at start, before DPDK.
#include "privilege.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <grp.h>
#include <pwd.h>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace ppe {

namespace {

constexpr int kCapNetAdmin = 12, kCapNetRaw = 13;

std::string group_name(uint32_t gid)
{
    const struct group *g = getgrgid(gid_t(gid));
    return g ? std::string(g->gr_name) : std::to_string(gid);
}

} // namespace

bool refuse_root(bool allow_root, std::string *error)
{
    if (geteuid() != 0 || allow_root) return true;
    const char *env = std::getenv("ETA_PPE_ALLOW_ROOT");
    if (env && std::strcmp(env, "1") == 0) return true;
    *error = "refusing to run as root: eta-ppe needs only a few capabilities (ppe/README.md \"Privileges\"); "
             "start it from its systemd unit (systemctl start eta-ppe: user eta with those capabilities), "
             "or pass --allow-root (or set ETA_PPE_ALLOW_ROOT=1) to run it as root anyway";
    return false;
}

uint64_t effective_capabilities()
{
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("CapEff:", 0) == 0) return std::strtoull(line.c_str() + 7, nullptr, 16);
    return 0;
}

namespace {

// A DPDK devargs value ("framecnt=512"), or 0.
uint64_t devarg_number(const std::string &dev, const std::string &key)
{
    const size_t at = dev.find("," + key + "=");
    return at == std::string::npos ? 0 : std::strtoull(dev.c_str() + at + key.size() + 2, nullptr, 10);
}

} // namespace

// Measured in the lab (ppe/README.md "Privileges"), as user nobody with
// exactly the capabilities named:
//  - net_af_packet: socket(AF_PACKET) needs CAP_NET_RAW; starting the port
//    (promiscuous mode, SIOCSIFHWADDR) needs CAP_NET_ADMIN; its rx and tx
//    rings (framecnt x framesz each, per queue pair) are locked memory: with
//    RLIMIT_MEMLOCK below that, mmap fails with EAGAIN (1 MiB failed, 2 MiB
//    started one engine at 512 x 2048), unless CAP_IPC_LOCK.
//  - net_af_xdp: also CAP_SYS_ADMIN (libxdp reads its dispatcher's BTF;
//    CAP_BPF + CAP_PERFMON were not enough), and its UMEM is locked memory
//    (8 MiB was not enough): CAP_IPC_LOCK or a large LimitMEMLOCK=.
//  - net_tap, and kernel = "shared" (its tap, kernel_tap.h): CAP_NET_ADMIN. PCI devices: root (check_devices).
bool check_capabilities(const Config &c, uint32_t n_engines, std::string *error, std::string *warning)
{
    constexpr int kCapIpcLock = 14, kCapSysAdmin = 21;
    std::vector<CapNeed> needs;
    auto need = [&](int cap, const char *name, const std::string &why) {
        for (auto &n : needs)
            if (n.cap == cap) return;
        needs.push_back({cap, name, why});
    };
    uint64_t locked = 0; // bytes the af_packet rings lock
    bool xdp = false;
    for (size_t i = 0; i < c.ports.size(); i++) {
        const PortConfig &p = c.ports[i];
        const std::string driver = p.device.substr(0, p.device.find(','));
        const std::string what = "port[" + std::to_string(i) + "] (" + driver + ")";
        if (!vnet_iface(p.device).empty()) {
            need(kCapNetRaw, "CAP_NET_RAW", what + " opens packet sockets");
            need(kCapNetAdmin, "CAP_NET_ADMIN", what + " sizes its sockets' buffers past net.core.rmem_max");
        } else if (driver.rfind("net_af_packet", 0) == 0) {
            need(kCapNetRaw, "CAP_NET_RAW", what + " opens packet sockets");
            need(kCapNetAdmin, "CAP_NET_ADMIN", what + " sets its interface promiscuous");
            uint64_t frame = devarg_number(p.device, "framesz");
            if (!frame) frame = p.mtu <= 1900 ? 2048 : (uint64_t(p.mtu) + 18 + 128 + 2047) / 2048 * 2048;
            uint64_t count = devarg_number(p.device, "framecnt");
            if (!count) count = 512;
            uint64_t queues = devarg_number(p.device, "qpairs");
            if (!queues) queues = n_engines;
            locked += queues * 2 * count * frame;
        } else if (driver.rfind("net_af_xdp", 0) == 0) {
            need(kCapNetRaw, "CAP_NET_RAW", what + " opens XDP sockets");
            need(kCapNetAdmin, "CAP_NET_ADMIN", what + " attaches its XDP program to the interface");
            need(kCapSysAdmin, "CAP_SYS_ADMIN", what + ": libxdp reads its XDP dispatcher's BTF");
            xdp = true;
        } else if (driver.rfind("net_tap", 0) == 0) {
            need(kCapNetAdmin, "CAP_NET_ADMIN", what + " creates a tap interface");
        }
        if (p.kernel_shared)
            need(kCapNetAdmin, "CAP_NET_ADMIN", what + " with kernel = \"shared\" creates its kernel interface " +
                                                    p.kernel_iface);
    }
    const uint64_t have = effective_capabilities();
    std::string missing;
    for (auto &n : needs) {
        if ((have >> n.cap) & 1) continue;
        missing += std::string(missing.empty() ? "" : "; ") + n.name + " (" + n.why + ")";
    }
    if (!missing.empty()) {
        *error = "missing capabilit" + std::string(missing.find(';') == std::string::npos ? "y" : "ies") + ": " +
                 missing + "; the eta-ppe.service unit grants them (AmbientCapabilities=, CapabilityBoundingSet=), "
                 "or run it with setpriv --inh-caps/--ambient-caps or capsh";
        return false;
    }
    if ((have >> kCapIpcLock) & 1) return true;
    rlimit rl{};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return true;
    if (locked > rl.rlim_cur) {
        *error = "RLIMIT_MEMLOCK is " + std::to_string(rl.rlim_cur >> 10) + " KiB, and the net_af_packet rings lock " +
                 std::to_string(locked >> 10) + " KiB (rx and tx, framecnt x framesz per queue pair); raise it "
                 "(LimitMEMLOCK=infinity in the unit, prlimit --memlock, ulimit -l) or grant CAP_IPC_LOCK";
        return false;
    }
    if (xdp && warning)
        *warning = "RLIMIT_MEMLOCK is " + std::to_string(rl.rlim_cur >> 10) + " KiB without CAP_IPC_LOCK: "
                   "net_af_xdp's UMEM is locked memory and may not fit (8 MiB did not in the lab); "
                   "LimitMEMLOCK=infinity in the unit, or grant CAP_IPC_LOCK";
    return true;
}

bool apply_socket_group(const Config &c, std::string *error)
{
    if (c.socket_gid == uint32_t(getegid())) return true;
    for (const std::string &path : {c.socket, c.stats_path(), c.cores_path(), c.socket + ".net"}) {
        if (chown(path.c_str(), uid_t(-1), gid_t(c.socket_gid)) != 0) {
            *error = (c.group_line ? c.path + ":" + std::to_string(c.group_line) + ": " : c.path + ": ") + "control.group: cannot give " + path + " to group \"" + group_name(c.socket_gid) +
                     "\": " + std::strerror(errno) +
                     (errno == EPERM ? " (eta-ppe's user must be a member of that group, or name its own group)" : "");
            return false;
        }
    }
    return true;
}

bool user_reaches_socket(uint32_t uid, uint32_t mode, uint32_t owner, uint32_t group, std::string *why)
{
    if (uid == 0)
        return true;
    bool in_group = false;
    const passwd *pw = getpwuid(uid);
    if (pw) {
        int n = 64;
        std::vector<gid_t> groups(static_cast<size_t>(n));
        if (getgrouplist(pw->pw_name, pw->pw_gid, groups.data(), &n) < 0) {
            groups.resize(size_t(n));
            getgrouplist(pw->pw_name, pw->pw_gid, groups.data(), &n);
        }
        for (int i = 0; i < n && size_t(i) < groups.size(); i++)
            in_group = in_group || groups[size_t(i)] == group;
    }
    const bool ok = uid == owner ? (mode & 0200) : in_group ? (mode & 0020) : (mode & 0002);
    if (!ok && why) {
        char m[8];
        std::snprintf(m, sizeof m, "%04o", mode);
        const struct group *g = getgrgid(gid_t(group));
        *why = std::string("mode ") + m + " lets " +
               ((mode & 0002) ? "everyone" : (mode & 0020) ? "its owner (uid " + std::to_string(owner) + ") and group " +
                                    (g ? std::string(g->gr_name) : std::to_string(group)) : "its owner (uid " + std::to_string(owner) + ")") +
               " connect";
    }
    return ok;
}

} // namespace ppe
