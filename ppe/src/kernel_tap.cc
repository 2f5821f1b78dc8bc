// ppe/src/kernel_tap.cc: see kernel_tap.h.
#include "kernel_tap.h"

#include "config.h"
#include "log.h"

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace ppe {

namespace {

int tap_serial = 0;

std::string mac_text(const mars::MacAddr &m)
{
    char b[18];
    std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m.b[0], m.b[1], m.b[2], m.b[3], m.b[4], m.b[5]);
    return b;
}

// A stale tap of our name (left persistent, or by a PPE that died while
// another holds it): attach to it and drop its persistence, so it goes when
// we close it. EBUSY: a live process still holds every queue of it.
bool remove_stale_tap(const std::string &iface, std::string *error)
{
    unsigned flags = 0;
    std::ifstream f("/sys/class/net/" + iface + "/tun_flags");
    f >> std::hex >> flags;
    const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) return true; // open() reports it below
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = short(flags ? flags : (IFF_TAP | IFF_NO_PI | IFF_MULTI_QUEUE));
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
        const int e = errno;
        ::close(fd);
        *error = "the kernel interface " + iface + " exists and cannot be taken over (" + std::strerror(e) +
                 (e == EBUSY ? ": a process still holds it, perhaps an eta-ppe that is exiting; wait for it, or "
                               "remove the interface (ip link del " + iface + ")"
                             : "; remove it (ip link del " + iface + ") or set kernel_iface to another name") + ")";
        return false;
    }
    ioctl(fd, TUNSETPERSIST, 0);
    ::close(fd); // not persistent any more: it goes with this, its last file
    log(LogLevel::kWarn, "kernel interface %s was left over (a killed eta-ppe?); replaced", iface.c_str());
    return true;
}

// Makes the tap persistent (1) or not (0) through a queue of our own,
// attached for the call. False with errno when the kernel refuses.
bool set_persistent(const std::string &iface, int on)
{
    unsigned flags = 0;
    std::ifstream f("/sys/class/net/" + iface + "/tun_flags");
    f >> std::hex >> flags;
    const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) return false;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = short(flags ? flags : (IFF_TAP | IFF_NO_PI | IFF_MULTI_QUEUE));
    bool ok = ioctl(fd, TUNSETIFF, &ifr) == 0 && ioctl(fd, TUNSETPERSIST, on) == 0;
    const int e = errno;
    ::close(fd);
    errno = e;
    return ok;
}

bool set_address(const std::string &iface, uint32_t ip, uint8_t prefix, std::string *error)
{
    const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        *error = std::string("socket: ") + std::strerror(errno);
        return false;
    }
    auto fail = [&](const char *what) {
        *error = "cannot " + std::string(what) + " of the kernel interface " + iface + ": " + std::strerror(errno);
        ::close(s);
        return false;
    };
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
    auto *sin = reinterpret_cast<sockaddr_in *>(&ifr.ifr_addr);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(ip);
    if (ioctl(s, SIOCSIFADDR, &ifr) != 0) return fail("set the address");
    sin->sin_addr.s_addr = htonl(prefix ? ~uint32_t(0) << (32 - prefix) : 0);
    if (ioctl(s, SIOCSIFNETMASK, &ifr) != 0) return fail("set the netmask");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) return fail("read the flags");
    ifr.ifr_flags = short(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) return fail("bring up");
    ::close(s);
    return true;
}

// Linux's struct in6_ifreq (linux/ipv6.h, which clashes with glibc's
// netinet/in.h): SIOCSIFADDR / SIOCDIFADDR on an AF_INET6 socket.
struct In6Ifreq {
    in6_addr addr;
    uint32_t prefixlen;
    int ifindex;
};

bool is_link_local6(const in6_addr &a) { return a.s6_addr[0] == 0xfe && (a.s6_addr[1] & 0xc0) == 0x80; }

uint8_t prefix_of(const sockaddr *mask)
{
    uint8_t n = 0;
    if (!mask) return 128;
    const auto *m = reinterpret_cast<const sockaddr_in6 *>(mask);
    for (uint8_t byte : m->sin6_addr.s6_addr)
        for (int bit = 7; bit >= 0 && (byte >> bit & 1); bit--) n++;
    return n;
}

// The port's IPv6 addresses on the kernel's interface (issue 29/31): each
// of pc.addr6 added (one already there, from the last run's persistent tap,
// stays), and the global addresses a past config put there that this one
// does not list removed; the link-local address is the kernel's own (from
// the MAC, as MARS derives its own). The kernel runs duplicate address
// detection on each new one (about a second) before it uses it.
bool set_address6(const std::string &iface, const std::vector<mars::Ip6Prefix> &want, std::string *error)
{
    const unsigned index = if_nametoindex(iface.c_str());
    if (index == 0) {
        *error = "the kernel interface " + iface + " is gone";
        return false;
    }
    std::string disabled;
    std::ifstream("/proc/sys/net/ipv6/conf/" + iface + "/disable_ipv6") >> disabled;
    if (want.empty() && disabled != "0") return true;
    if (disabled != "0") {
        *error = "the kernel has IPv6 disabled on " + iface + " (net.ipv6.conf." + iface +
                 ".disable_ipv6 is not 0), so it cannot hold the port's address6; enable it (sysctl -w "
                 "net.ipv6.conf.default.disable_ipv6=0 before eta-ppe starts, or net.ipv6.conf." + iface +
                 ".disable_ipv6=0), or remove address6 from the port";
        return false;
    }
    // The addresses stay while the tap is down (eta-ppe stopped or killed,
    // its tap persistent), as its IPv4 address does; Linux would otherwise
    // drop them with the link.
    if (!want.empty()) {
        std::ofstream keep("/proc/sys/net/ipv6/conf/" + iface + "/keep_addr_on_down");
        keep << "1\n";
        keep.flush();
        if (!keep)
            log(LogLevel::kWarn, "kernel interface %s: cannot set keep_addr_on_down (%s): its IPv6 addresses go while "
                "eta-ppe is down", iface.c_str(), std::strerror(errno));
    }
    const int s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        *error = std::string("socket(AF_INET6): ") + std::strerror(errno) + "; the kernel needs IPv6 for address6";
        return false;
    }
    auto listed = [&](const in6_addr &a, uint8_t prefix) {
        for (const mars::Ip6Prefix &w : want)
            if (std::memcmp(w.addr.b, a.s6_addr, 16) == 0 && w.prefix == prefix) return true;
        return false;
    };
    ifaddrs *all = nullptr;
    if (getifaddrs(&all) == 0) {
        for (ifaddrs *i = all; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 || iface != i->ifa_name) continue;
            const in6_addr a = reinterpret_cast<const sockaddr_in6 *>(i->ifa_addr)->sin6_addr;
            const uint8_t prefix = prefix_of(i->ifa_netmask);
            if (is_link_local6(a) || listed(a, prefix)) continue;
            In6Ifreq r{a, prefix, int(index)};
            char text[INET6_ADDRSTRLEN];
            inet_ntop(AF_INET6, &a, text, sizeof text);
            if (ioctl(s, SIOCDIFADDR, &r) == 0)
                log(LogLevel::kInfo, "kernel interface %s: removed %s/%u, which the config no longer lists",
                    iface.c_str(), text, unsigned(prefix));
            else
                log(LogLevel::kWarn, "kernel interface %s: cannot remove %s/%u (%s)", iface.c_str(), text,
                    unsigned(prefix), std::strerror(errno));
        }
        freeifaddrs(all);
    }
    for (const mars::Ip6Prefix &w : want) {
        In6Ifreq r{};
        std::memcpy(r.addr.s6_addr, w.addr.b, 16);
        r.prefixlen = w.prefix;
        r.ifindex = int(index);
        if (ioctl(s, SIOCSIFADDR, &r) != 0 && errno != EEXIST) {
            const int e = errno;
            ::close(s);
            *error = "cannot add " + format_ipv6(w) + " to the kernel interface " + iface + ": " + std::strerror(e);
            return false;
        }
    }
    ::close(s);
    return true;
}

} // namespace

bool interface_exists(const std::string &iface, bool *is_tap)
{
    if (if_nametoindex(iface.c_str()) == 0) return false;
    *is_tap = access(("/sys/class/net/" + iface + "/tun_flags").c_str(), F_OK) == 0;
    return true;
}

bool KernelTap::open(const PortConfig &pc, const mars::MacAddr &mac, const std::vector<rte_mempool *> &pools,
                     std::string *error)
{
    iface_ = pc.kernel_iface;
    const std::string what = "port \"" + pc.name + "\": kernel = \"shared\": ";
    const int tun = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (tun < 0) {
        const int e = errno;
        *error = what + "cannot open /dev/net/tun (" + std::strerror(e) + "): " +
                 (e == ENOENT ? "the kernel has no tun device here; load it (modprobe tun) or, in a container, "
                                "pass /dev/net/tun in"
                              : "eta-ppe's user may not use it") +
                 ", or set kernel = \"none\" (the host loses this port's address)";
        return false;
    }
    ::close(tun);
    bool is_tap = false;
    const bool existed = interface_exists(iface_, &is_tap);
    if (existed && !is_tap) {
        *error = what + "an interface called " + iface_ + " exists and is not a tap; remove it or set "
                 "kernel_iface to another name";
        return false;
    }
    // The tap outlives eta-ppe (persistent, below), so the kernel's state on
    // it (addresses, routes, sockets bound to the address, neighbours) holds
    // across a restart: the last run's tap is taken over as it is. Only one
    // net_tap cannot attach to is replaced.
    vdev_ = "net_tap_eta" + std::to_string(tap_serial++);
    const std::string args = "iface=" + iface_ + ",mac=" + mac_text(mac);
    int rc = rte_eal_hotplug_add("vdev", vdev_.c_str(), args.c_str()); // (EAL's hotplug: no link to the vdev bus library)
    if (rc != 0 && existed) {
        if (!remove_stale_tap(iface_, error)) {
            *error = what + *error;
            vdev_.clear();
            return false;
        }
        rc = rte_eal_hotplug_add("vdev", vdev_.c_str(), args.c_str());
    } else if (existed) {
        log(LogLevel::kInfo, "%s: kernel interface %s taken over from the last run (its addresses and routes stay)",
            pc.name.c_str(), iface_.c_str());
    }
    if (rc != 0) {
        *error = what + "DPDK's net_tap could not make the kernel interface " + iface_ + " (" +
                 rte_strerror(rc < 0 ? -rc : rc) + "); it needs CAP_NET_ADMIN (the eta-ppe.service unit grants it: "
                 "AmbientCapabilities=CAP_NET_ADMIN) and /dev/net/tun; or set kernel = \"none\"";
        vdev_.clear();
        return false;
    }
    if (rte_eth_dev_get_port_by_name(vdev_.c_str(), &id_) != 0) {
        *error = what + "net_tap made no port";
        close();
        return false;
    }
    const uint16_t queues = uint16_t(pools.size());
    rte_eth_conf conf{};
    conf.intr_conf.rxq = 1; // each queue's fd can end an idle sleep (wake_fd)
    rc = rte_eth_dev_configure(id_, queues, queues, &conf);
    if (rc < 0) {
        conf.intr_conf.rxq = 0;
        rc = rte_eth_dev_configure(id_, queues, queues, &conf);
    }
    if (rc < 0) {
        *error = what + "cannot configure the tap: " + rte_strerror(-rc);
        close();
        return false;
    }
    for (uint16_t q = 0; q < queues; q++) {
        rc = rte_eth_rx_queue_setup(id_, q, kDesc, unsigned(SOCKET_ID_ANY), nullptr, pools[q]);
        if (rc == 0) rc = rte_eth_tx_queue_setup(id_, q, kDesc, unsigned(SOCKET_ID_ANY), nullptr);
        if (rc < 0) {
            *error = what + "tap queue " + std::to_string(q) + " setup failed: " + rte_strerror(-rc);
            close();
            return false;
        }
    }
    rc = rte_eth_dev_set_mtu(id_, pc.mtu);
    if (rc < 0)
        log(LogLevel::kWarn, "%s: cannot set the kernel interface's mtu to %u (%s)", pc.name.c_str(), unsigned(pc.mtu),
            rte_strerror(-rc));
    rc = rte_eth_dev_start(id_);
    if (rc < 0) {
        *error = what + "cannot start the tap: " + rte_strerror(-rc);
        close();
        return false;
    }
    up_ = true;
    if (!set_address(iface_, pc.ip, pc.prefix, error)) {
        *error = what + *error + " (needs CAP_NET_ADMIN)";
        close();
        return false;
    }
    if (!set_address6(iface_, pc.addr6, error)) {
        *error = what + *error;
        close();
        return false;
    }
    if (!set_persistent(iface_, 1))
        log(LogLevel::kWarn, "%s: cannot make the kernel interface %s persistent (%s): it goes with eta-ppe, and the "
            "kernel's routes through it with it", pc.name.c_str(), iface_.c_str(), std::strerror(errno));
    return true;
}

int KernelTap::wake_fd(uint16_t queue) const
{
    if (!up_) return -1;
    const int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(id_, queue);
    return fd >= 0 ? fd : -1;
}

void KernelTap::close()
{
    if (vdev_.empty()) return;
    if (up_) rte_eth_dev_stop(id_);
    up_ = false;
    rte_eth_dev_close(id_);
    rte_eal_hotplug_remove("vdev", vdev_.c_str());
    vdev_.clear();
}

} // namespace ppe
