// ppe/src/dpdk.h: DPDK in eta-ppe — the EAL, ports, and the mbuf PacketIo.
#pragma once

#include "config.h"
#include "flow_apply.h"
#include "kernel_tap.h"
#include "port_io.h"
#include "stats.h"
#include "system.h"
#include "vnet_port.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ppe {

// The EAL, set up in-process with a unique file prefix. cleanup() also
// removes the runtime directory the EAL leaves behind without --in-memory.
class Eal {
  public:
    // `control_pus`: where the EAL main thread (our control thread) may run.
    // `n_engines`: queue pairs each vdev port is created with.
    bool init(const Config &c, bool use_huge, const std::vector<int> &control_pus, uint32_t n_engines,
              std::string *error);
    void cleanup();
    const std::string &prefix() const { return prefix_; }
    bool huge() const { return huge_; }

  private:
    std::string prefix_;
    bool huge_ = false;
    bool up_ = false;
};

// One configured and started port, with one rx/tx queue pair per engine.
struct Port {
    uint16_t id = 0;
    PortConfig config;
    mars::MacAddr mac;
    uint32_t offloads = 0; // mars::Offloads
    uint16_t queues = 1;
    std::vector<rte_mempool *> pools; // one per queue, on its engine's NUMA node
    std::vector<rte_mempool *> tso_pools; // with TSO: 64 KiB buffers, one pool per queue
    static constexpr uint32_t kTsoBuffers = 255;
    bool rss = false;
    uint8_t rss_key[64] = {};
    std::vector<uint16_t> reta;       // redirection table (RSS), queue per entry: with rss_key,
                                      // the NIC picks dti_flow_owner()'s engine (steer.h)
    rte_eth_dev_info info{};
    KernelTap kernel; // [[port]] kernel = "shared": the host's kernel on this port (kernel_tap.h)
    // [[port]] flow_isolate = true: the rte_flow rules made (flow_rules.h,
    // flow_apply.h), destroyed at close().
    std::vector<rte_flow *> flows;
    // device = "vnet:<ifname>" (vnet_port.h): no DPDK port; `id` is then
    // kVnetIdBase + the port's index, which no DPDK port has (mbuf->port of
    // its frames, for steering).
    VnetPortState vnet;
    bool is_vnet() const { return !vnet.fds.empty(); }
    static constexpr uint16_t kVnetIdBase = RTE_MAX_ETHPORTS;

    // Configures queues, offloads and MTU, and starts the port.
    bool open(const PortConfig &pc, const std::vector<EngineCore> &engines, uint32_t mbufs_per_queue,
              std::string *error, uint16_t index = 0);
    void close();

  private:
    bool open_vnet(const PortConfig &pc, const std::vector<EngineCore> &engines, uint32_t mbufs_per_queue,
                   uint16_t index, std::string *error);
};

// The DPDK device name in a device string ("net_af_packet0" of
// "net_af_packet0,iface=x"), as rte_eth_dev_get_port_by_name wants it.
std::string device_name(const std::string &device);

// The engine's PortIo over one DPDK (port, queue): rte_mbuf is the PacketRef
// handle, mtod() its data. No copies, no wrapper allocation; bursts end to end.
class MbufIo final : public PortIo {
  public:
    MbufIo(const Port &port, uint16_t queue, uint16_t burst);
    uint16_t receive(mars::PacketRef *out, uint16_t n) override;
    uint16_t alloc(mars::PacketRef *out, uint16_t n) override;
    uint16_t transmit(mars::PacketRef *frames, uint16_t n) override;
    void release(mars::PacketRef *frames, uint16_t n) override;
    uint32_t offloads() const override { return offloads_; }
    uint32_t tso_max_frame() const override;
    uint16_t alloc_tso(mars::PacketRef *out, uint16_t n) override;
    // Transmit by reference (kOffloadTxExternal, [[port]] tx_zerocopy): an
    // mbuf from the queue's pool is attached to the payload in place and
    // chained after the frame's header mbuf at transmit(). Its free callback
    // (on this engine's thread, when the driver frees the chain) decrements
    // *refs. The callback's shared info lives in that mbuf's own, unused
    // data room, which stays the mbuf's until the callback has run.
    bool attach_external(mars::PacketRef &frame, const uint8_t *payload, uint16_t len, uint32_t *refs) override;
    // [[port]] kernel = "shared" (kernel_tap.h): frames MARS hands back
    // (unclaimed) are gathered and written to the tap queue of this engine
    // in bursts (flush_kernel, after each input burst); forward_from_kernel
    // moves up to one burst the kernel sent on the tap out of the port.
    // `arp`: this engine hands ARP on (one engine does: every engine's stack
    // sees each ARP frame, steer.h). Counters: `counters`, the engine's.
    void set_kernel(uint16_t tap_port, bool arp, stats::KernelCounters *counters)
    {
        tap_ = tap_port;
        kernel_arp_ = arp;
        kcount_ = counters;
    }
    bool has_kernel() const { return kcount_ != nullptr; }
    void unclaimed(mars::PacketRef &frame, mars::Unclaimed why) override;
    void flush_kernel();
    uint16_t forward_from_kernel(uint16_t max);
    // [engine] prefetch: receive() prefetches the mbufs of a burst ahead of
    // the loop that reads them, and each frame's first data line (its
    // headers) for the stack.
    void set_prefetch(bool on) { prefetch_ = on; }

    uint64_t rx_dropped_multiseg = 0;

  private:
    static constexpr uint16_t kKernelBurst = 64;
    uint16_t tap_ = 0;
    bool kernel_arp_ = false;
    stats::KernelCounters *kcount_ = nullptr;
    rte_mbuf *to_kernel_[kKernelBurst];
    uint16_t n_to_kernel_ = 0;
    uint16_t port_, queue_, burst_;
    rte_mempool *pool_;
    rte_mempool *tso_pool_;
    uint32_t offloads_;
    bool prefetch_ = false;
};

} // namespace ppe
