// ppe/src/system.cc: hwloc core resolution and the pre-start environment checks.
#include "system.h"
#include "privilege.h"

#include <hwloc.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <fstream>
#include <set>
#include <sstream>

namespace ppe {

namespace {

std::string at(const Config &c, uint32_t line)
{
    return line ? c.path + ":" + std::to_string(line) : c.path;
}

// A hwloc topology for the lifetime of one call.
struct Topology {
    hwloc_topology_t t = nullptr;
    Topology()
    {
        if (hwloc_topology_init(&t) == 0 && hwloc_topology_load(t) == 0) return;
        if (t) hwloc_topology_destroy(t);
        t = nullptr;
    }
    ~Topology()
    {
        if (t) hwloc_topology_destroy(t);
    }
};

int numa_of(hwloc_topology_t t, hwloc_const_cpuset_t set)
{
    hwloc_obj_t node = nullptr;
    while ((node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)) != nullptr)
        if (node->cpuset && hwloc_bitmap_intersects(node->cpuset, set)) return int(node->os_index);
    return -1;
}

std::string read_first_line(const std::string &path)
{
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

// The value of key=... in a DPDK devargs string ("net_af_packet0,iface=x").
std::string devarg(const std::string &device, const std::string &key)
{
    std::stringstream ss(device);
    std::string part;
    std::getline(ss, part, ','); // the driver name
    while (std::getline(ss, part, ','))
        if (part.rfind(key + "=", 0) == 0) return part.substr(key.size() + 1);
    return "";
}

bool is_pci(const std::string &device) { return device.rfind("net_", 0) != 0 && vnet_iface(device).empty(); }

std::string pci_full(const std::string &device)
{
    return device.size() == 7 ? "0000:" + device : device;
}

bool has_capability(int cap)
{
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("CapEff:", 0) != 0) continue;
        uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
        return (caps >> cap) & 1;
    }
    return false;
}

} // namespace

namespace {

Machine machine_of(hwloc_topology_t t)
{
    Machine m;
    hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(t);
    int ncores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    for (int i = 0; i < ncores; i++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, unsigned(i));
        Machine::Core c;
        c.numa_node = numa_of(t, core->cpuset);
        unsigned pu;
        hwloc_bitmap_foreach_begin(pu, core->cpuset)
        {
            if (hwloc_bitmap_isset(allowed, pu)) c.pus.push_back(int(pu));
        }
        hwloc_bitmap_foreach_end();
        m.cores.push_back(c); // a core with no allowed PU stays, empty, to keep the indexes
    }
    int npus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    for (int i = 0; i < npus; i++) {
        hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, unsigned(i));
        if (hwloc_bitmap_isset(allowed, pu->os_index)) m.pus.push_back(int(pu->os_index));
    }
    m.boot_pu = 0;
    return m;
}

} // namespace

Machine Machine::detect()
{
    Topology topo;
    if (!topo.t) {
        // Without hwloc's view every online CPU is its own core.
        Machine m;
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (int i = 0; i < n; i++) {
            m.cores.push_back(Core{{i}, -1});
            m.pus.push_back(i);
        }
        return m;
    }
    return machine_of(topo.t);
}

bool Machine::from_xml(const std::string &xml, Machine *out, std::string *error)
{
    hwloc_topology_t t = nullptr;
    if (hwloc_topology_init(&t) != 0) {
        *error = "hwloc: cannot create a topology";
        return false;
    }
    if (hwloc_topology_set_xmlbuffer(t, xml.data(), int(xml.size() + 1)) != 0 || hwloc_topology_load(t) != 0) {
        *error = "hwloc: cannot load the XML topology";
        hwloc_topology_destroy(t);
        return false;
    }
    *out = machine_of(t);
    hwloc_topology_destroy(t);
    return true;
}

namespace {

// The hwloc core (index into m.cores) a PU belongs to, -1 if none.
int core_of(const Machine &m, int pu)
{
    for (size_t i = 0; i < m.cores.size(); i++)
        if (std::find(m.cores[i].pus.begin(), m.cores[i].pus.end(), pu) != m.cores[i].pus.end()) return int(i);
    return -1;
}

// auto:N with allow_smt and more engines than usable cores: the first PU of
// every usable core (in `order`), then their second PUs, and so on. Engines
// sharing a core keep only their own PU from applications.
bool auto_with_siblings(const Machine &m, const std::vector<size_t> &order, size_t usable, const CoreSpec &spec,
                        std::vector<EngineCore> *out)
{
    const size_t first = out->size();
    for (size_t level = 0; out->size() - first < spec.n; level++) {
        bool any = false;
        for (size_t k = 0; k < usable && out->size() - first < spec.n; k++) {
            const auto &core = m.cores[order[k]];
            if (core.pus.size() <= level) continue;
            any = true;
            out->push_back(EngineCore{core.pus[level], core.pus, core.numa_node, spec.text});
        }
        if (!any) break;
    }
    for (size_t i = first; i < out->size(); i++)
        for (size_t j = first; j < out->size(); j++)
            if (i != j && core_of(m, (*out)[i].pu) == core_of(m, (*out)[j].pu)) (*out)[i].core_pus = {(*out)[i].pu};
    return out->size() - first == spec.n;
}

// Two engines on hardware threads of one physical core (pu:N entries naming
// siblings): refused unless engine.allow_smt.
bool check_no_siblings(const Config &c, const Machine &m, const std::vector<EngineCore> &e, std::string *error)
{
    for (size_t i = 0; i < e.size(); i++) {
        for (size_t j = 0; j < i; j++) {
            const int ci = core_of(m, e[i].pu);
            if (ci < 0 || ci != core_of(m, e[j].pu)) continue;
            *error = at(c, c.cores_line) + ": engine.cores: \"" + e[j].spec + "\" and \"" + e[i].spec +
                     "\" are hardware threads (SMT siblings) of one physical core (core " + std::to_string(ci) +
                     ", PUs " + format_cpu_list(m.cores[size_t(ci)].pus) +
                     "): two engines there share its execution units and caches; name PUs of different cores, or "
                     "set [engine] allow_smt = true";
            return false;
        }
    }
    return true;
}

} // namespace

std::string describe_placement(const Config &c, const Machine &m, int nic_numa, const std::vector<EngineCore> &engines)
{
    std::string s = "placement:";
    bool shared = false, far = false;
    for (size_t i = 0; i < engines.size(); i++) {
        const EngineCore &e = engines[i];
        const int ci = core_of(m, e.pu);
        s += (i ? "; " : " ") + std::string("engine ") + std::to_string(i) + " on PU " + std::to_string(e.pu) +
             " (core " + (ci < 0 ? std::string("?") : std::to_string(ci)) + ", NUMA node " +
             (e.numa_node < 0 ? std::string("unknown") : std::to_string(e.numa_node)) + ")";
        for (size_t j = 0; j < i; j++) shared |= ci >= 0 && ci == core_of(m, engines[j].pu);
        far |= nic_numa >= 0 && e.numa_node >= 0 && e.numa_node != nic_numa;
    }
    s += "; NIC on NUMA node " + (nic_numa < 0 ? std::string("unknown") : std::to_string(nic_numa));
    if (far) s += " (some engines are on another node)";
    s += shared ? "; SMT: engines share a physical core (allow_smt = true)"
                : std::string("; SMT: each engine has its own physical core (allow_smt = ") +
                      (c.allow_smt ? "true)" : "false)");
    return s;
}

bool resolve_cores(const Config &c, const Machine &m, int nic_numa, std::vector<EngineCore> *out,
                   std::string *error)
{
    out->clear();
    const bool shared_ok = c.idle != IdlePolicy::kSpin; // engines that nap may share their cores
    auto core_of_pu = [&](int pu) -> int {
        for (size_t i = 0; i < m.cores.size(); i++)
            if (std::find(m.cores[i].pus.begin(), m.cores[i].pus.end(), pu) != m.cores[i].pus.end())
                return int(i);
        return -1;
    };
    auto range = [](size_t n) { return n == 0 ? std::string("none") : n == 1 ? std::string("0") : "0-" + std::to_string(n - 1); };

    for (const CoreSpec &spec : c.cores) {
        const std::string where = at(c, spec.line) + ": engine.cores: ";
        if (spec.kind == CoreSpec::kCore) {
            if (spec.n >= m.cores.size() || m.cores[spec.n].pus.empty()) {
                *error = where + "\"" + spec.text + "\" does not exist or may not be used here; this machine has cores " +
                         range(m.cores.size()) + " (hwloc logical indexes, see lstopo)";
                return false;
            }
            const auto &core = m.cores[spec.n];
            out->push_back(EngineCore{core.pus[0], core.pus, core.numa_node, spec.text});
        } else if (spec.kind == CoreSpec::kPu) {
            if (spec.n >= m.pus.size()) {
                *error = where + "\"" + spec.text + "\" does not exist or may not be used here; this machine has PUs " +
                         range(m.pus.size()) + " (hwloc logical indexes, see lstopo)";
                return false;
            }
            int pu = m.pus[spec.n];
            int ci = core_of_pu(pu);
            out->push_back(EngineCore{pu, std::vector<int>{pu}, ci >= 0 ? m.cores[size_t(ci)].numa_node : -1, spec.text});
        } else {
            // auto:N — cores on the NIC's node first, the boot core last, and
            // among equals the highest index (furthest from housekeeping).
            std::vector<size_t> order;
            for (size_t i = 0; i < m.cores.size(); i++)
                if (!m.cores[i].pus.empty()) order.push_back(i);
            auto rank = [&](size_t i) {
                const auto &core = m.cores[i];
                bool boot = std::find(core.pus.begin(), core.pus.end(), m.boot_pu) != core.pus.end();
                bool near = nic_numa < 0 || core.numa_node == nic_numa;
                return (boot ? 2 : 0) + (near ? 0 : 1);
            };
            std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
                int ra = rank(a), rb = rank(b);
                return ra != rb ? ra < rb : a > b;
            });
            // An engine that naps when idle (adaptive, sleep) can share its
            // core with the control thread and applications, so every core may
            // be an engine (a 2-core machine with 2 engines); a spinning one
            // cannot: it would starve them.
            const size_t usable = shared_ok || order.empty() ? order.size() : order.size() - 1;
            if (spec.n > usable && c.allow_smt) {
                if (!auto_with_siblings(m, order, usable, spec, out)) {
                    *error = where + "\"" + spec.text + "\" asks for " + std::to_string(spec.n) +
                             " engines but the usable cores have " + std::to_string(out->size()) +
                             " hardware threads (PUs) in all, siblings included";
                    return false;
                }
                continue;
            }
            if (spec.n > usable) {
                size_t threads = 0;
                for (size_t k = 0; k < usable; k++) threads += m.cores[order[k]].pus.size();
                *error = where + "\"" + spec.text + "\" asks for " + std::to_string(spec.n) +
                         " engine cores but this machine has " + std::to_string(order.size()) +
                         " usable cores" +
                         (shared_ok ? std::string() : ", and with idle = \"spin\" at least one must stay for the control "
                                                      "thread and applications (adaptive or sleep engines share theirs)") +
                         (threads >= spec.n ? "; engine.allow_smt = true would also use their hardware threads "
                                              "(SMT siblings), " + std::to_string(threads) + " in all"
                                            : std::string());
                return false;
            }
            for (uint32_t k = 0; k < spec.n; k++) {
                const auto &core = m.cores[order[k]];
                out->push_back(EngineCore{core.pus[0], core.pus, core.numa_node, spec.text});
            }
        }
    }
    // No two engines on one PU, and something left for everyone else.
    std::set<int> taken;
    for (size_t i = 0; i < out->size(); i++) {
        for (size_t j = 0; j < i; j++) {
            if ((*out)[j].pu == (*out)[i].pu ||
                std::find((*out)[j].core_pus.begin(), (*out)[j].core_pus.end(), (*out)[i].pu) != (*out)[j].core_pus.end()) {
                *error = at(c, c.cores_line) + ": engine.cores: \"" + (*out)[j].spec + "\" and \"" + (*out)[i].spec +
                         "\" overlap (both use PU " + std::to_string((*out)[i].pu) + "); each engine needs its own core";
                return false;
            }
        }
        taken.insert((*out)[i].core_pus.begin(), (*out)[i].core_pus.end());
    }
    if (!c.allow_smt && !check_no_siblings(c, m, *out, error)) return false;
    bool left = false;
    for (int pu : m.pus) left |= !taken.count(pu);
    if (!left && !shared_ok) {
        *error = at(c, c.cores_line) + ": engine.cores: the engines take every PU (" + format_cpu_list(m.pus) +
                 ") and idle = \"spin\" never lets go of them; leave at least one for the control thread and "
                 "applications, or use idle = \"adaptive\" or \"sleep\" (engines then share their cores)";
        return false;
    }
    return true;
}

int device_numa_node(const std::string &device)
{
    std::string path;
    if (is_pci(device)) {
        path = "/sys/bus/pci/devices/" + pci_full(device.substr(0, device.find(','))) + "/numa_node";
    } else {
        std::string iface = vnet_iface(device).empty() ? devarg(device, "iface") : vnet_iface(device);
        if (iface.empty()) return -1;
        path = "/sys/class/net/" + iface + "/device/numa_node";
    }
    std::string v = read_first_line(path);
    if (v.empty()) return -1;
    return std::atoi(v.c_str());
}

uint64_t free_hugepage_mb()
{
    uint64_t total_kb = 0;
    for (const char *size : {"2048kB", "1048576kB"}) {
        std::string v = read_first_line(std::string("/sys/kernel/mm/hugepages/hugepages-") + size + "/free_hugepages");
        if (!v.empty()) total_kb += std::strtoull(v.c_str(), nullptr, 10) * std::strtoull(size, nullptr, 10);
    }
    return total_kb / 1024;
}

namespace {

bool hugetlbfs_mounted()
{
    std::ifstream in("/proc/mounts");
    std::string dev, dir, type;
    std::string rest;
    while (in >> dev >> dir >> type) {
        std::getline(in, rest);
        if (type == "hugetlbfs") return true;
    }
    return false;
}

bool check_devices(const Config &c, std::string *error)
{
    const bool root = geteuid() == 0;
    for (size_t i = 0; i < c.ports.size(); i++) {
        const PortConfig &p = c.ports[i];
        const std::string where = at(c, p.line) + ": port[" + std::to_string(i) + "].device: ";
        const std::string driver = p.device.substr(0, p.device.find(','));
        if (is_pci(p.device)) {
            std::string dir = "/sys/bus/pci/devices/" + pci_full(driver);
            if (access(dir.c_str(), F_OK) != 0) {
                *error = where + "no PCI device " + pci_full(driver) + " on this machine (lspci lists them)";
                return false;
            }
            if (!root) {
                *error = where + "opening PCI device " + pci_full(driver) + " needs root";
                return false;
            }
            continue;
        }
        if (!vnet_iface(p.device).empty()) {
            const std::string iface = vnet_iface(p.device);
            if (access(("/sys/class/net/" + iface).c_str(), F_OK) != 0) {
                *error = where + "interface \"" + iface + "\" does not exist (ip link lists the interfaces)";
                return false;
            }
            if (!root && !has_capability(13 /* CAP_NET_RAW */)) {
                *error = where + "opening interface \"" + iface +
                         "\" needs root or CAP_NET_RAW (run eta-ppe from its systemd unit or with sudo)";
                return false;
            }
            continue;
        }
        if (driver.rfind("net_af_packet", 0) == 0 || driver.rfind("net_af_xdp", 0) == 0) {
            std::string iface = devarg(p.device, "iface");
            if (iface.empty()) {
                *error = where + "\"" + p.device + "\" names no interface; add \",iface=NAME\"";
                return false;
            }
            if (access(("/sys/class/net/" + iface).c_str(), F_OK) != 0) {
                *error = where + "interface \"" + iface + "\" does not exist (ip link lists the interfaces)";
                return false;
            }
            if (!root && !has_capability(13 /* CAP_NET_RAW */)) {
                *error = where + "opening interface \"" + iface +
                         "\" needs root or CAP_NET_RAW (run eta-ppe from its systemd unit or with sudo)";
                return false;
            }
            continue;
        }
        if (driver.rfind("net_tap", 0) == 0 && !root && !has_capability(12 /* CAP_NET_ADMIN */)) {
            *error = where + "creating a tap device needs root or CAP_NET_ADMIN";
            return false;
        }
    }
    return true;
}

bool check_control_socket(const Config &c, std::string *error)
{
    const std::string where = at(c, c.socket_line) + ": control.socket: ";
    std::string dir = c.socket.substr(0, c.socket.rfind('/'));
    if (dir.empty()) dir = "/";
    // mkdir -p, one level at a time.
    for (size_t pos = 1; pos <= dir.size(); pos++) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        std::string part = dir.substr(0, pos);
        if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
            *error = where + "cannot create directory " + part + ": " + std::strerror(errno);
            return false;
        }
    }
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
        *error = where + "no permission to create the socket in " + dir + ": " + std::strerror(errno);
        return false;
    }
    // Every user allowed_users names must be able to reach the socket: its
    // mode decides who may connect before eta-ppe sees anyone.
    for (size_t i = 0; i < c.limits.allowed_uids.size(); i++) {
        std::string who;
        if (!user_reaches_socket(c.limits.allowed_uids[i], c.socket_mode, geteuid(), c.socket_gid, &who)) {
            *error = at(c, c.limits.allowed_users_line) + ": limits.allowed_users: user \"" +
                     c.limits.allowed_users[i] + "\" (uid " + std::to_string(c.limits.allowed_uids[i]) +
                     ") could not connect to " + c.socket + ": " + who +
                     "; allowed: a [control] mode that lets the user connect (0o666: allowed_users is checked on "
                     "top), or the user in [control] group \"" + c.socket_group + "\"";
            return false;
        }
    }
    // Another PPE already serving this socket? One that is exiting (killed,
    // its mappings still being torn down) is waited for, a bounded time.
    std::string why;
    if (wait_for_socket_free(
            c.socket, std::chrono::seconds(10),
            [&](const std::string &note) { std::fprintf(stderr, "eta-ppe: %s%s\n", where.c_str(), note.c_str()); },
            &why))
        return true;
    *error = where + why;
    return false;
}

} // namespace

bool check_environment(const Config &c, bool *use_huge, std::string *error)
{
    if (!check_devices(c, error)) return false;
    if (!check_control_socket(c, error)) return false;
    const uint64_t free_mb = free_hugepage_mb();
    const bool huge_ok = hugetlbfs_mounted() && free_mb >= c.memory_mb;
    switch (c.memory) {
    case MemoryMode::kHuge:
        if (!huge_ok) {
            *error = at(c, c.memory_line) + ": dpdk.memory: \"huge\" is forced but " +
                     (hugetlbfs_mounted() ? std::to_string(free_mb) + " MiB of hugepages are free and dpdk.memory_mb = " +
                                                std::to_string(c.memory_mb) + " are needed"
                                          : std::string("no hugetlbfs is mounted")) +
                     "; reserve hugepages (tools/eta setup --hugepages N) or allow \"auto\" or \"no-huge\"";
            return false;
        }
        *use_huge = true;
        break;
    case MemoryMode::kNoHuge: *use_huge = false; break;
    case MemoryMode::kAuto: *use_huge = huge_ok; break;
    }
    return true;
}

// ---- who holds a control socket ---------------------------------------------

HolderState process_state(pid_t pid, const std::string &proc_root)
{
    const std::string dir = proc_root + "/" + std::to_string(pid);
    std::ifstream st(dir + "/stat");
    std::string stat;
    if (!st || !std::getline(st, stat)) return HolderState::kExiting; // reaped: what holds the socket is going too
    // "PID (comm) S ppid pgrp session tty tpgid flags ...": comm may hold
    // spaces and parentheses, so fields are counted from the last ')'.
    const size_t rp = stat.rfind(')');
    if (rp == std::string::npos) return HolderState::kServing; // unreadable: never taken for dying
    std::istringstream rest(stat.substr(rp + 1));
    std::string state;
    long long ppid = 0, pgrp = 0, session = 0, tty = 0, tpgid = 0;
    unsigned long long flags = 0;
    rest >> state >> ppid >> pgrp >> session >> tty >> tpgid >> flags;
    if (!rest) return HolderState::kServing;
    constexpr unsigned long long kPfExiting = 0x4; // include/linux/sched.h
    if (state == "Z" || state == "X" || state == "x" || (flags & kPfExiting)) return HolderState::kExiting;
    // SIGKILL pending, for the thread or the whole process: it is about to exit.
    std::ifstream status(dir + "/status");
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("SigPnd:", 0) != 0 && line.rfind("ShdPnd:", 0) != 0) continue;
        const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
        if (mask & (1ull << (SIGKILL - 1))) return HolderState::kExiting;
    }
    if (state == "T" || state == "t") return HolderState::kStopped;
    return HolderState::kServing;
}

SocketHolder probe_socket_holder(const std::string &path, const std::string &proc_root)
{
    SocketHolder h;
    // What eta-ppe listens with. Non-blocking: a holder that does not accept
    // (stopped, dying) with a full queue must not hang the probe.
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return h; // cannot probe: bind() will say what is wrong
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
        const int err = errno;
        close(fd);
        // EAGAIN: a listener whose queue is full (it does not accept).
        if (err == EAGAIN) h.state = HolderState::kUnknown;
        return h; // ENOENT, ECONNREFUSED (a stale file): free
    }
    ucred cr{};
    socklen_t len = sizeof cr;
    const bool known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.pid > 0;
    close(fd);
    if (!known) {
        h.state = HolderState::kUnknown; // a listener in another PID namespace
        return h;
    }
    h.pid = cr.pid;
    h.name = read_first_line(proc_root + "/" + std::to_string(cr.pid) + "/comm");
    h.state = process_state(cr.pid, proc_root);
    return h;
}

namespace {

std::string holder_label(const SocketHolder &h)
{
    if (h.pid == 0) return "a process this PID namespace cannot see";
    return (h.name.empty() ? std::string("process") : h.name) + " (pid " + std::to_string(h.pid) + ")";
}

std::string duration_words(std::chrono::milliseconds d)
{
    if (d.count() < 1000) return std::to_string(d.count()) + " ms";
    return std::to_string(d.count() / 1000) + " s";
}

// The sentence for a holder eta-ppe will not wait for.
std::string refusal(const SocketHolder &h, const std::string &path)
{
    const std::string pid = std::to_string(h.pid);
    switch (h.state) {
    case HolderState::kServing:
        return "another " + holder_label(h) + " is already serving " + path + "; stop it (kill " + pid +
               ") or choose another socket";
    case HolderState::kStopped:
        return holder_label(h) + ", which serves " + path +
               ", is stopped (SIGSTOP or a debugger); continue it (kill -CONT " + pid + "), stop it (kill " + pid +
               ") or choose another socket";
    default:
        if (h.pid == 0)
            return "another process listens on " + path +
                   " (outside this PID namespace, or it accepts no connections); stop it or choose another socket";
        return holder_label(h) + " holds " + path + "; stop it or choose another socket";
    }
}

} // namespace

bool wait_for_socket_free(const std::string &path, std::chrono::milliseconds max_wait,
                          const std::function<void(const std::string &)> &note, std::string *error,
                          const std::string &proc_root)
{
    const SocketHolder first = probe_socket_holder(path, proc_root);
    if (first.state == HolderState::kFree) return true;
    if (first.state != HolderState::kExiting) {
        *error = refusal(first, path);
        return false;
    }
    if (note)
        note("waiting for " + holder_label(first) + ", which is exiting, to release " + path + " (at most " +
             duration_words(max_wait) + ")");
    // Nothing signals the socket's release (it can outlive the process), so
    // this looks again every 20 ms, bounded by max_wait.
    const auto deadline = std::chrono::steady_clock::now() + max_wait;
    for (;;) {
        const SocketHolder h = probe_socket_holder(path, proc_root);
        if (h.state == HolderState::kFree) return true;
        // Another process took the socket meanwhile (not the one exiting,
        // whose pid, once reaped, may be reused by anything).
        if (h.pid != first.pid && h.state != HolderState::kExiting) {
            *error = refusal(h, path);
            return false;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            *error = holder_label(first) + " is exiting but still holds " + path + " after " +
                     duration_words(max_wait) + "; wait until it is gone (ps -p " + std::to_string(first.pid) +
                     ") and start eta-ppe again";
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

bool pin_thread(int pu, std::string *error)
{
    Topology topo;
    if (!topo.t) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(pu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            *error = "cannot pin to CPU " + std::to_string(pu) + ": " + std::strerror(errno);
            return false;
        }
        return true;
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_bitmap_only(set, unsigned(pu));
    int rc = hwloc_set_cpubind(topo.t, set, HWLOC_CPUBIND_THREAD | HWLOC_CPUBIND_STRICT);
    if (rc != 0) rc = hwloc_set_cpubind(topo.t, set, HWLOC_CPUBIND_THREAD);
    if (rc != 0) {
        *error = "cannot pin to CPU " + std::to_string(pu) + ": " + std::strerror(errno);
        hwloc_bitmap_free(set);
        return false;
    }
    // Memory local to the engine's node; machines without NUMA support
    // refuse, which changes nothing about placement, so it is not an error.
    hwloc_set_membind(topo.t, set, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_THREAD);
    hwloc_bitmap_free(set);
    return true;
}

std::string format_cpu_list(std::vector<int> cpus)
{
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    std::string s;
    for (size_t i = 0; i < cpus.size();) {
        size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) j++;
        if (!s.empty()) s += ',';
        s += std::to_string(cpus[i]);
        if (j > i) s += "-" + std::to_string(cpus[j]);
        i = j + 1;
    }
    return s;
}

} // namespace ppe
