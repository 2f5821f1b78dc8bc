// ppe/src/rx_wake.h: what wakes a sleeping engine when frames arrive.
//
// Most vdevs have no rx interrupt DPDK can hand out, so an idle engine used to
// nap in bounded steps and look again (ppe/README.md "Idle sleep"): a frame
// that arrived during a nap waited for its end, up to max_sleep_us. But the
// software devices the lab and many VMs use sit on kernel sockets that do
// signal arrival: net_af_packet reads a PACKET_MMAP ring of an AF_PACKET
// socket, net_af_xdp an AF_XDP socket's rx ring, and both sockets become
// readable (poll) when the kernel puts a frame there. An engine that adds a
// poll of its queue's socket to the same io_uring wait as its doorbells
// sleeps until the first frame instead of the end of a nap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ppe {

struct RxWakeFds {
    std::vector<int> fds; // pollable for POLLIN when frames reach the queue (may be shared by queues)
    std::string kind;     // "af_packet", "af_xdp", or "" when none was found
};

// The kernel sockets behind queue `queue` of `n_queues` of a DPDK port
// (rte_eth_dev_info's driver_name and if_index), found among this process's
// descriptors: for net_af_packet the AF_PACKET sockets bound to that
// interface, for net_af_xdp every AF_XDP socket (an XSK cannot tell its
// interface: with two af_xdp ports, either one's frames wake the engine).
// When there is one per queue they are taken in descriptor order (the PMDs
// open them queue by queue); else every one found is returned (a frame on
// another queue then only wakes this engine early). Empty for other drivers
// (a PCI NIC on vfio). Control path only: it reads /proc/self/fd.
RxWakeFds find_rx_wake_fds(const char *driver, uint32_t if_index, uint16_t queue, uint16_t n_queues);

} // namespace ppe
