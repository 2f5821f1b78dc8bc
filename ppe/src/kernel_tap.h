// ppe/src/kernel_tap.h: a port shared with the host's kernel ([[port]]
// kernel = "shared", issue 29). eta-ppe makes a kernel interface per such
// port with DPDK's net_tap (`kernel_iface`, default eta-k<index>), with the
// port's MAC, IPv4 address and IPv6 addresses (address6), so the kernel stays a full host on the port:
// what MARS does not claim (mars::PacketIo::unclaimed: other TCP ports, UDP,
// ICMP echo, copies of ARP and ICMP errors, IPv6, other EtherTypes) is written
// to the tap, and what the kernel sends on the tap goes out the port.
//
// One tap queue pair per engine (queue i: engine i, as on the port), fed
// from the port's own packet pools, so a frame moves between the two
// devices as the same mbuf, never copied by eta (net_tap's read/write copy it
// into and out of the kernel). Setup and teardown only: nothing here runs
// per packet (the forwarding is MbufIo's, dpdk.h).
//
// The tap is persistent: it outlives eta-ppe (killed or stopped) with the
// kernel's addresses, routes and sockets on it, and the next start takes it
// over as it is; `ip link del` removes it.
#pragma once

#include <mars/stack.h>

#include <cstdint>
#include <string>
#include <vector>

struct rte_mempool;

namespace ppe {

struct PortConfig;

class KernelTap {
  public:
    // Descriptors of each tap queue; the port's pools are sized for them.
    static constexpr uint16_t kDesc = 256;

    // Makes the interface (a stale tap of that name, from a killed eta-ppe,
    // is replaced), one queue pair per pool, same MAC and MTU as the port,
    // brings it up with the port's address/prefix (ioctl SIOCSIFADDR,
    // SIOCSIFNETMASK, SIOCSIFFLAGS at start; never on the packet path) and
    // its IPv6 addresses (SIOCSIFADDR on an AF_INET6 socket; global ones a
    // past config left on a taken-over tap and this one lacks are removed).
    // False with a message saying what to do: no /dev/net/tun, no
    // CAP_NET_ADMIN, a name taken by an interface that is not a tap.
    bool open(const PortConfig &pc, const mars::MacAddr &mac, const std::vector<rte_mempool *> &pools,
              std::string *error);
    // Stops and removes the interface (the kernel also removes it when
    // eta-ppe dies: the tap is not persistent, it goes with its last file).
    void close();
    bool up() const { return up_; }
    uint16_t id() const { return id_; }
    const std::string &iface() const { return iface_; }
    // The tap queue's file descriptor, readable while frames from the kernel
    // wait (it ends an engine's idle sleep); -1 when DPDK gives none.
    int wake_fd(uint16_t queue) const;

  private:
    std::string vdev_, iface_;
    uint16_t id_ = 0;
    bool up_ = false;
};

// Whether an interface called `iface` exists, and if it does whether it is
// a tun/tap device (sysfs tun_flags).
bool interface_exists(const std::string &iface, bool *is_tap);

} // namespace ppe
