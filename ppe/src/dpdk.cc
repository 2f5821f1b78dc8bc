// ppe/src/dpdk.cc: EAL bring-up, port configuration, and MbufIo.
#include "dpdk.h"
#include "mbuf_packets.h"

#include "log.h"
#include "steer.h"
#include "xdp_pool.h"

#include <dti_abi.h>

#include <mars/checksum_offload.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_prefetch.h>

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ppe {

std::string device_name(const std::string &device)
{
    std::string name = device.substr(0, device.find(','));
    if (name.rfind("net_", 0) != 0 && name.size() == 7) name = "0000:" + name;
    return name;
}

namespace {

bool is_af_packet(const PortConfig &p) { return p.device.rfind("net_af_packet", 0) == 0; }
bool is_af_xdp(const PortConfig &p) { return p.device.rfind("net_af_xdp", 0) == 0; }

// Buffers a queue's device holds whatever the engine does: the rx and tx
// descriptors, except on net_af_xdp, whose rx side always keeps its fill
// count and whose sent buffers wait in its completion ring (xdp_pool.h).
uint32_t device_held_mbufs(const PortConfig &p, uint16_t rx_desc, uint16_t tx_desc)
{
    if (is_af_xdp(p)) return kAfXdpFillBuffers + tx_desc + kAfXdpCompletionEntries;
    return uint32_t(rx_desc) + tx_desc;
}

// af_packet's ring frame: the device string's framesz, else 2048 (its
// default), or for jumbo MTUs the frame plus af_packet's header rounded up to
// 2 KiB (9000 -> 10240).
uint32_t af_packet_frame(const PortConfig &p)
{
    const size_t at = p.device.find("framesz=");
    if (at != std::string::npos) return uint32_t(std::strtoul(p.device.c_str() + at + 8, nullptr, 10));
    if (p.mtu <= 1900) return 2048;
    return (uint32_t(p.mtu) + 18u + 128u + 2047u) / 2048u * 2048u;
}

// af_packet's default frame of 2048 bytes cannot carry jumbo frames; give it
// frames large enough for the MTU unless the device string says otherwise
// (a block holds two frames: a multiple of the page size).
// Several engines: one queue pair per engine (af_packet: one socket each in
// a fanout group; af_xdp: one AF_XDP socket per netdev queue), unless the
// device string names its own count.
std::string device_args(const PortConfig &p, uint32_t n_engines)
{
    std::string dev = p.device;
    if (is_af_packet(p) && p.mtu > 1900 && dev.find("framesz=") == std::string::npos) {
        const uint32_t frame = af_packet_frame(p);
        dev += ",framesz=" + std::to_string(frame) + ",blocksz=" + std::to_string(2 * frame) + ",framecnt=512";
    }
    if (n_engines > 1) {
        if (is_af_packet(p) && dev.find("qpairs=") == std::string::npos)
            dev += ",qpairs=" + std::to_string(n_engines);
        if (dev.rfind("net_af_xdp", 0) == 0 && dev.find("queue_count=") == std::string::npos)
            dev += ",queue_count=" + std::to_string(n_engines);
    }
    return dev;
}

const char *eal_log_level(LogLevel l)
{
    switch (l) {
    case LogLevel::kDebug: return "*:info";
    case LogLevel::kInfo: return "*:warning";
    default: return "*:error";
    }
}

} // namespace

bool Eal::init(const Config &c, bool use_huge, const std::vector<int> &control_pus, uint32_t n_engines,
               std::string *error)
{
    prefix_ = c.file_prefix.empty() ? "eta-ppe-" + std::to_string(getpid()) : c.file_prefix;
    huge_ = use_huge;
    std::vector<std::string> args = {"eta-ppe", "--file-prefix", prefix_, "--log-level", eal_log_level(c.log_level),
                                     "--lcores", "0@(" + format_cpu_list(control_pus) + ")",
                                     "-m", std::to_string(c.memory_mb)};
    if (use_huge) {
        args.push_back("--in-memory");
    } else {
        // --in-memory cannot be combined with --no-huge; --no-shconf keeps
        // the runtime state private, and cleanup() removes its directory.
        args.insert(args.end(), {"--no-huge", "--no-shconf", "--no-telemetry"});
    }
    bool any_pci = false;
    for (auto &p : c.ports) {
        if (!vnet_iface(p.device).empty()) continue; // ours, not DPDK's (vnet_port.h)
        if (p.device.rfind("net_", 0) == 0) {
            args.insert(args.end(), {"--vdev", device_args(p, n_engines)});
        } else {
            any_pci = true;
            args.insert(args.end(), {"-a", p.device});
        }
    }
    // [copy] devices: "dma_*" names are virtual devices we create; a PCI
    // address (an idxd one may carry the dmadev's "-qN" queue suffix) is
    // allowed for probing; other names (a DSA work queue, "wq0.0") come from
    // DPDK's dsa bus scan of /dev/dsa, with nothing to add here.
    if (c.copy_engine == CopyKind::kDmadev) {
        for (const std::string &d : c.copy_devices) {
            const std::string bdf = dmadev_name(d).substr(0, dmadev_name(d).find("-q"));
            if (dmadev_is_vdev(d)) {
                args.insert(args.end(), {"--vdev", d});
            } else if (looks_like_pci_address(bdf)) {
                any_pci = true;
                args.insert(args.end(), {"-a", bdf});
            }
        }
    }
    if (!any_pci) args.push_back("--no-pci");
    args.insert(args.end(), c.eal_args.begin(), c.eal_args.end());

    std::string line;
    for (auto &a : args) line += " " + a;
    log(LogLevel::kDebug, "EAL arguments:%s", line.c_str());
    // EAL's own threads (interrupts, control) take the process affinity
    // minus the lcores' CPUs; restricting it to the control CPUs first keeps
    // them off the engine cores. Engine threads pin themselves explicitly.
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int pu : control_pus) CPU_SET(pu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        *error = "cannot restrict the control thread to CPU " + format_cpu_list(control_pus) + ": " + std::strerror(errno);
        return false;
    }
    std::vector<char *> argv;
    for (auto &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (rte_eal_init(int(args.size()), argv.data()) < 0) {
        *error = "DPDK could not start (EAL arguments:" + line + "): " + rte_strerror(rte_errno);
        cleanup();
        return false;
    }
    up_ = true;
    return true;
}

void Eal::cleanup()
{
    if (up_) rte_eal_cleanup();
    up_ = false;
    if (!prefix_.empty()) {
        std::error_code ec;
        std::filesystem::remove_all("/var/run/dpdk/" + prefix_, ec);
    }
}

// A queue's buffers for whole TSO frames (at most 64 KiB: an IPv4 packet),
// appended to pools; false with the reason in *error.
static bool add_tso_pool(uint16_t id, uint16_t q, int socket, const std::string &what,
                         std::vector<rte_mempool *> *pools, std::string *error)
{
    const std::string name = "t" + std::to_string(id) + "q" + std::to_string(q);
    rte_mempool *tp = rte_pktmbuf_pool_create(name.c_str(), Port::kTsoBuffers, 32, 0, UINT16_MAX, socket);
    if (!tp) {
        *error = what + ": cannot allocate " + std::to_string(Port::kTsoBuffers) + " TSO buffers of 64 KiB: " +
                 rte_strerror(rte_errno) + " (raise dpdk.memory_mb, or set tso = false in [[port]])";
        return false;
    }
    pools->push_back(tp);
    return true;
}

bool Port::open_vnet(const PortConfig &pc, const std::vector<EngineCore> &engines, uint32_t mbufs_per_queue,
                     uint16_t index, std::string *error)
{
    const std::string what = "port \"" + pc.name + "\" (" + pc.device + ")";
    id = uint16_t(kVnetIdBase + index);
    queues = uint16_t(engines.size());
    std::vector<int> numa;
    for (const EngineCore &e : engines) numa.push_back(e.numa_node);
    // Receive buffers: frames MARS holds (out of order, at most
    // ooo_frames_per_conn each, and in steering rings) plus the slots and a
    // burst in flight; when they run out a frame is received through a
    // bounce buffer (vnet_port.cc), so a stack holding them all cannot
    // starve its own connection. 64 KiB each.
    const uint32_t rx_buffers = std::min<uint32_t>(mbufs_per_queue, 1024) + 256;
    if (!vnet.open(pc, numa, rx_buffers, mac.b, error)) return false;
    // The kernel takes checksum requests and TSO frames (GSO) from a packet
    // socket with a virtio_net_hdr, and hands over its verdict on each
    // received frame's checksum.
    offloads = mars::kOffloadRxCsum | mars::kOffloadTxIpCsum | mars::kOffloadTxTcpCsum;
    if (pc.tso) offloads |= mars::kOffloadTxTcpSeg;
    // Transmit by reference: sendmmsg() copies each frame into the kernel's
    // skb, its payload straight from the application's send ring (two
    // pieces of one message), instead of the engine building the frame
    // first (vnet_port.h).
    if (pc.tx_zerocopy) offloads |= mars::kOffloadTxExternal;
    const uint32_t room = uint32_t(pc.mtu) + 18u + 64u;
    for (uint16_t q = 0; q < queues; q++) {
        const int socket = engines[q].numa_node >= 0 ? engines[q].numa_node : SOCKET_ID_ANY;
        const std::string pool_name = "p" + std::to_string(id) + "q" + std::to_string(q);
        rte_mempool *pool = rte_pktmbuf_pool_create(pool_name.c_str(), mbufs_per_queue + 512, 256, 0,
                                                    uint16_t(std::max<uint32_t>(room, RTE_MBUF_DEFAULT_DATAROOM) +
                                                             RTE_PKTMBUF_HEADROOM),
                                                    socket);
        if (!pool) {
            *error = what + ": cannot allocate " + std::to_string(mbufs_per_queue + 512) + " packet buffers: " +
                     rte_strerror(rte_errno) + " (raise dpdk.memory_mb)";
            return false;
        }
        pools.push_back(pool);
        if ((offloads & mars::kOffloadTxTcpSeg) && !add_tso_pool(id, q, socket, what, &tso_pools, error))
            return false;
    }
    return true;
}

bool Port::open(const PortConfig &pc, const std::vector<EngineCore> &engines, uint32_t mbufs_per_queue,
                std::string *error, uint16_t index)
{
    config = pc;
    if (!vnet_iface(pc.device).empty()) return open_vnet(pc, engines, mbufs_per_queue, index, error);
    const std::string name = device_name(pc.device);
    const std::string what = "port \"" + pc.name + "\" (" + pc.device + ")";
    if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) {
        *error = what + ": DPDK found no such device after start; check the device string";
        return false;
    }
    if (rte_eth_dev_info_get(id, &info) != 0) {
        *error = what + ": cannot query the device";
        return false;
    }
    queues = uint16_t(engines.size());
    if (info.max_rx_queues < queues || info.max_tx_queues < queues) {
        *error = what + ": " + std::to_string(engines.size()) + " engines need as many queues but the device offers " +
                 std::to_string(info.max_rx_queues) + " rx / " + std::to_string(info.max_tx_queues) +
                 " tx (for net_af_packet add qpairs=N to the device string)";
        return false;
    }
    if (info.max_mtu < pc.mtu || (info.min_mtu && info.min_mtu > pc.mtu)) {
        *error = what + ": mtu " + std::to_string(pc.mtu) + " is outside what the device allows (" +
                 std::to_string(info.min_mtu) + " to " + std::to_string(info.max_mtu) + ")";
        return false;
    }

    // flow_isolate = true (flow_rules.h): isolated mode first, before
    // rte_eth_dev_configure, as rte_flow.h asks (flow_apply.h); the rules
    // are made once the port runs (below).
    if (pc.flow_isolate && !flow::enter_isolated_mode(id, what, error)) return false;

    rte_eth_conf conf{};
    // Some vdevs (net_af_packet) report the Ethernet maximum as their largest
    // frame yet take a larger MTU through rte_eth_dev_set_mtu() once their
    // frames are big enough: configure within what the device reports, then
    // raise the MTU (below).
    const uint32_t overhead = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    conf.rxmode.mtu = info.max_rx_pktlen > overhead ? std::min<uint32_t>(pc.mtu, info.max_rx_pktlen - overhead)
                                                    : pc.mtu;
    // Checksums: take every one the device offers; MARS skips what the NIC did.
    const uint64_t rx_csum = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
    if ((info.rx_offload_capa & rx_csum) == rx_csum) {
        conf.rxmode.offloads |= rx_csum;
        offloads |= mars::kOffloadRxCsum;
    }
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) {
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
        offloads |= mars::kOffloadTxIpCsum;
    }
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_TCP_CKSUM) {
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
        offloads |= mars::kOffloadTxTcpCsum;
    }
    // TCP segmentation offload where the device has it with both checksum
    // offloads (an IPv4 TSO frame always needs them; an IPv6 one the TCP
    // checksum's: DPDK has one TCP_TSO capability for both families, and
    // TCP_CKSUM covers TCP over IPv6 too, RTE_MBUF_F_TX_IPV6 with l3_len 40,
    // mbuf_packets.h). net_af_packet and net_af_xdp
    // (DPDK 22.11) do not report it, so the lab's ports never take this.
    // MARS then hands over frames of several segments (mars/checksum_offload.h)
    // in large single-segment mbufs from a pool of their own (tso_pools).
    const uint64_t tso_needs = RTE_ETH_TX_OFFLOAD_TCP_TSO | RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
    if (pc.tso && (info.tx_offload_capa & tso_needs) == tso_needs) {
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_TCP_TSO;
        offloads |= mars::kOffloadTxTcpSeg;
    }
    // Transmit by reference (tx_zerocopy): a frame is a header mbuf chained
    // to one whose buffer is external (the application's send ring), so the
    // device must take chains. net_af_packet (DPDK 22.11) does: its tx copies
    // each segment into the kernel's ring and frees the chain in
    // rte_eth_tx_burst(); net_af_xdp does not report it (its copy-mode tx
    // reads the first segment only), so there the key has no effect.
    // Vdevs only: a PCI device would read the payload by DMA, and the
    // applications' regions are not registered for DMA (see attach_external).
    const bool vdev = pc.device.rfind("net_", 0) == 0;
    if (pc.tx_zerocopy && vdev && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)) {
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
        offloads |= mars::kOffloadTxExternal;
    } else if (pc.tx_zerocopy) {
        log(LogLevel::kWarn, "%s: tx_zerocopy = true, but %s: payloads are copied into the frames", what.c_str(),
            vdev ? "the device does not take multi-segment frames" : "by reference is for virtual devices only");
    }
    // Fast free: a queue only ever sends mbufs its engine allocated from its
    // own pool, refcnt 1 (received frames, steered or shared ARP ones
    // included, are released, never sent). Not with TSO: its large mbufs
    // come from a second pool, and fast free needs one pool per queue. Not
    // by reference either: fast free skips the detach that calls the
    // external buffer's free callback.
    if ((info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE) &&
        !(offloads & (mars::kOffloadTxTcpSeg | mars::kOffloadTxExternal)))
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
    // More than one engine: RSS puts each flow on its owner's queue where the
    // device has it (the key and table below are what dti_flow_owner()
    // computes, dti_abi.h), so no segment needs a hop between engines.
    // Correctness does not depend on it: every engine steers segments of
    // flows it does not own to their owner (steer.h), so a device without
    // RSS (net_af_packet spreads by the kernel's fanout hash) works.
    // In isolated mode global RSS settings have no effect (rte_flow.h): the
    // tcp4 rule's RSS action carries the same key and spread instead.
    if (queues > 1 && !pc.flow_isolate) {
        // IPv6 TCP too (dti_flow_owner6: the same key over the 36-byte
        // input), where the device hashes it; one that does not leaves IPv6
        // to software steering.
        const uint64_t hf = info.flow_type_rss_offloads & (RTE_ETH_RSS_NONFRAG_IPV4_TCP | RTE_ETH_RSS_IPV4 |
                                                           RTE_ETH_RSS_NONFRAG_IPV6_TCP | RTE_ETH_RSS_IPV6);
        if ((hf & RTE_ETH_RSS_NONFRAG_IPV4_TCP) && info.reta_size != 0) {
            // 0x6d5a repeated: the symmetric Toeplitz key (both directions
            // of a flow hash alike), of the length the device takes (40
            // bytes on most, 52 on i40e); a key of another length would be
            // ignored and the device's own, asymmetric one used.
            const size_t key_len = info.hash_key_size ? std::min<size_t>(info.hash_key_size, sizeof rss_key)
                                                      : 40;
            rss_fill_key(rss_key, key_len);
            conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_key = rss_key;
            conf.rx_adv_conf.rss_conf.rss_key_len = uint8_t(key_len);
            conf.rx_adv_conf.rss_conf.rss_hf = hf;
            rss = true;
        }
    }
    int rc = rte_eth_dev_configure(id, queues, queues, &conf);
    if (rc < 0) {
        *error = what + ": configure failed: " + rte_strerror(-rc);
        return false;
    }
    uint16_t rx_desc = pc.rx_desc, tx_desc = pc.tx_desc;
    rte_eth_dev_adjust_nb_rx_tx_desc(id, &rx_desc, &tx_desc);

    // mbufs large enough for a whole frame of this MTU: one segment each,
    // which is what PacketRef describes.
    // (af_packet copies a whole ring frame into one mbuf: room for that.)
    uint32_t room = std::max<uint32_t>(RTE_MBUF_DEFAULT_DATAROOM, uint32_t(pc.mtu) + 18u + 64u);
    if (is_af_packet(pc)) room = std::max(room, af_packet_frame(pc));
    for (uint16_t q = 0; q < queues; q++) {
        const int socket = engines[q].numa_node >= 0 ? engines[q].numa_node : SOCKET_ID_ANY;
        const std::string pool_name = "p" + std::to_string(id) + "q" + std::to_string(q);
        // A shared port's tap queue pair (kernel_tap.h) takes its buffers
        // from this pool too: what its rx ring holds, and frames in flight.
        const uint32_t n = mbufs_per_queue + device_held_mbufs(pc, rx_desc, tx_desc) +
                           (pc.kernel_shared ? 2u * KernelTap::kDesc + 128u : 0u);
        const uint16_t data_room = uint16_t(room + RTE_PKTMBUF_HEADROOM);
        // net_af_xdp lends the pool's buffers to the kernel by their offset in
        // a UMEM it assumes contiguous: a pool laid out for it, checked
        // object by object (a buffer outside is lost to the kernel for good).
        rte_mempool *pool = is_af_xdp(pc) ? create_xdp_pool(pool_name, n, 256, data_room, socket)
                                          : rte_pktmbuf_pool_create(pool_name.c_str(), n, 256, 0, data_room, socket);
        if (!pool) {
            *error = what + ": cannot allocate " + std::to_string(n) + " packet buffers of " + std::to_string(room) +
                     " bytes: " + rte_strerror(rte_errno) + " (raise dpdk.memory_mb)";
            return false;
        }
        pools.push_back(pool);
        std::string why;
        if (is_af_xdp(pc) && !xdp_umem_covers_pool(pool, &why)) {
            *error = what + ": its packet buffers do not fit net_af_xdp's UMEM: " + why +
                     "; the kernel would drop those buffers (raise dpdk.memory_mb so the pool fits in one area)";
            return false;
        }
        if ((offloads & mars::kOffloadTxTcpSeg) && !add_tso_pool(id, q, socket, what, &tso_pools, error))
            return false;
        rc = rte_eth_rx_queue_setup(id, q, rx_desc, unsigned(socket), nullptr, pool);
        if (rc == 0) rc = rte_eth_tx_queue_setup(id, q, tx_desc, unsigned(socket), nullptr);
        if (rc < 0) {
            *error = what + ": queue " + std::to_string(q) + " setup failed: " + rte_strerror(-rc);
            return false;
        }
    }
    rc = rte_eth_dev_set_mtu(id, pc.mtu);
    // net_af_packet (DPDK 22.11) reports the Ethernet maximum to ethdev and
    // refuses a larger MTU there, but its data path is bounded only by its
    // ring frames, sized for the MTU above: the interface's own MTU (set in
    // the kernel) and the stack's MSS do the rest.
    const bool ring_carries_mtu = is_af_packet(pc) && af_packet_frame(pc) >= uint32_t(pc.mtu) + 18u + 64u;
    if (rc < 0 && ring_carries_mtu) rc = 0;
    if (rc < 0 && (rc != -ENOTSUP || conf.rxmode.mtu < pc.mtu)) {
        *error = what + ": cannot set mtu " + std::to_string(pc.mtu) + ": " + rte_strerror(-rc);
        return false;
    }
    if (rss) {
        reta.resize(info.reta_size);
        std::vector<rte_eth_rss_reta_entry64> conf64((info.reta_size + 63) / 64);
        for (uint32_t i = 0; i < info.reta_size; i++) {
            reta[i] = rss_queue_of_entry(i, queues);
            conf64[i / 64].mask |= 1ull << (i % 64);
            conf64[i / 64].reta[i % 64] = reta[i];
        }
        rc = rte_eth_dev_rss_reta_update(id, conf64.data(), info.reta_size);
        if (rc < 0) {
            *error = what + ": cannot program the RSS table: " + rte_strerror(-rc);
            return false;
        }
        if (!rss_table_matches_owner(info.reta_size))
            log(LogLevel::kWarn,
                "%s: its RSS table has %u entries, not a multiple of %u: some flows arrive on another "
                "engine's queue and are steered in software (eta-stat: steered in/out)",
                what.c_str(), unsigned(info.reta_size), DTI_FLOW_RETA_SPAN);
    }
    rc = rte_eth_dev_start(id);
    if (rc < 0) {
        *error = what + ": start failed: " + rte_strerror(-rc);
        return false;
    }
    rte_ether_addr addr;
    rte_eth_macaddr_get(id, &addr);
    std::memcpy(mac.b, addr.addr_bytes, 6);
    // Multicast: the groups UDP sockets join (IGMP, MLD) and IPv6's
    // solicited-node groups reach the engine only past the NIC's filter.
    // Every group is let in (MARS takes those joined and hands the rest to
    // the kernel's interface where the port is shared); a port that cannot
    // (ENOTSUP) and is not promiscuous (af_packet's is) still has its
    // unicast and broadcast, and says so.
    // An af_packet port sees what its kernel interface receives: on a veth
    // every frame; on a NIC the groups the kernel's own filter passes
    // (`ip link set DEV allmulticast on` passes every one).
    rc = rte_eth_allmulticast_enable(id);
    if (rc < 0 && rte_eth_allmulticast_get(id) != 1 && rte_eth_promiscuous_get(id) != 1 && !is_af_packet(pc))
        log(LogLevel::kWarn,
            "%s: cannot receive every multicast group (%s): joined groups and IPv6 neighbour discovery "
            "reach eta only if the NIC passes them",
            what.c_str(), rte_strerror(-rc));
    if (pc.flow_isolate) {
        const flow::PortTraffic t = flow::traffic_of(pc, queues);
        const std::vector<flow::Rule> rules = flow::rules_for(t);
        if (!flow::apply_rules(id, rules, what, &flows, error)) return false;
        for (const flow::Rule &r : rules) log(LogLevel::kInfo, "%s: flow rule %s", what.c_str(), flow::describe(r).c_str());
        log(LogLevel::kInfo, "%s: flow_isolate: left to the kernel's netdev: %s", what.c_str(),
            flow::left_to_kernel(t).c_str());
        const std::string holder = flow::kernel_holder(pc.ip);
        if (!holder.empty())
            log(LogLevel::kWarn,
                "%s: flow_isolate = true, but the kernel holds %s on %s: its TCP, UDP, ICMP and ARP now reach eta, "
                "not the kernel; give the host an address of its own on the NIC and remove this one from %s "
                "(ip addr del %s/%u dev %s)",
                what.c_str(), format_ipv4(pc.ip).c_str(), holder.c_str(), holder.c_str(), format_ipv4(pc.ip).c_str(),
                unsigned(pc.prefix), holder.c_str());
    }
    if (pc.kernel_shared && !kernel.open(pc, mac, pools, error)) return false;
    return true;
}

void Port::close()
{
    if (!vnet_iface(config.device).empty()) {
        vnet.close();
        for (rte_mempool *p : pools) rte_mempool_free(p);
        pools.clear();
        for (rte_mempool *p : tso_pools) rte_mempool_free(p);
        tso_pools.clear();
        return;
    }
    kernel.close();
    flow::remove_rules(id, &flows);
    rte_eth_dev_stop(id);
    rte_eth_dev_close(id);
    for (rte_mempool *p : pools) rte_mempool_free(p);
    pools.clear();
    for (rte_mempool *p : tso_pools) rte_mempool_free(p);
    tso_pools.clear();
}

MbufIo::MbufIo(const Port &port, uint16_t queue, uint16_t burst)
    : port_(port.id), queue_(queue), burst_(burst), pool_(port.pools[queue]),
      tso_pool_(queue < port.tso_pools.size() ? port.tso_pools[queue] : nullptr), offloads_(port.offloads)
{}

uint32_t MbufIo::tso_max_frame() const
{
    return tso_pool_ ? std::min<uint32_t>(UINT16_MAX - RTE_PKTMBUF_HEADROOM, UINT16_MAX) : 0;
}

uint16_t MbufIo::alloc_tso(mars::PacketRef *out, uint16_t n)
{
    return alloc_packets_each(tso_pool_, out, n);
}

// The IOVA without a lookup (rte_mem_virt2iova may read pagemap, a
// syscall): in VA mode it is the address; otherwise the region is not
// DMA-mapped (a PCI NIC would need rte_extmem_register() and
// rte_dev_dma_map() of the application's region first, not done yet), so
// the port was not offered by reference (Port::open).
bool MbufIo::attach_external(mars::PacketRef &frame, const uint8_t *payload, uint16_t len, uint32_t *refs)
{
    if (!(offloads_ & mars::kOffloadTxExternal) || len == 0) return false;
    return attach_external_mbuf(pool_, frame, payload, len, refs);
}

uint16_t MbufIo::receive(mars::PacketRef *out, uint16_t n)
{
    rte_mbuf *m[256];
    if (n > 256) n = 256;
    const uint16_t got = rte_eth_rx_burst(port_, queue_, m, n);
    // A NIC writes descriptors and frames by DMA, so the mbufs' first lines
    // and the frames' headers are cold: ask for them kAhead mbufs before
    // this loop reads them (and one frame before the stack does).
    constexpr uint16_t kAhead = 4;
    if (prefetch_)
        for (uint16_t i = 0; i < got && i < kAhead; i++) rte_prefetch0(m[i]);
    uint16_t k = 0;
    for (uint16_t i = 0; i < got; i++) {
        if (prefetch_) {
            if (i + kAhead < got) rte_prefetch0(m[i + kAhead]);
            if (i + 1 < got) rte_prefetch0(rte_pktmbuf_mtod(m[i + 1], void *));
        }
        if (m[i]->nb_segs != 1) {
            // Larger than one mbuf: cannot happen with buffers sized for the
            // MTU, but a PacketRef is contiguous, so never hand one up.
            rx_dropped_multiseg++;
            rte_pktmbuf_free(m[i]);
            continue;
        }
        out[k++] = packet_of(m[i]);
    }
    rx_packets += k;
    return k;
}

uint16_t MbufIo::alloc(mars::PacketRef *out, uint16_t n)
{
    return alloc_packets(pool_, out, n);
}

uint16_t MbufIo::transmit(mars::PacketRef *frames, uint16_t n)
{
    rte_mbuf *m[256];
    if (n > 256) n = 256;
    for (uint16_t i = 0; i < n; i++) {
        rte_mbuf *mb = static_cast<rte_mbuf *>(frames[i].handle);
        mb->data_len = frames[i].len;
        mb->pkt_len = frames[i].len;
        if (frames[i].flags & mars::kTxExternal) mb->pkt_len += mb->next->data_len;
        mb->ol_flags = 0;
        // The fields are as DPDK wants them (mars/checksum_offload.h):
        // only the offsets and flags are ours to set, IPv4 or IPv6.
        if (frames[i].flags & (mars::kTxIpCsum | mars::kTxTcpCsum)) mbuf_tx_offload(mb, frames[i]);
        m[i] = mb;
    }
    const uint16_t sent = rte_eth_tx_burst(port_, queue_, m, n);
    if (sent < n) {
        rte_pktmbuf_free_bulk(m + sent, n - sent);
        tx_dropped += n - sent;
    }
    tx_packets += sent;
    return sent;
}

void MbufIo::release(mars::PacketRef *frames, uint16_t n)
{
    free_packets(frames, n);
}

// ---- a port shared with the kernel (kernel_tap.h) ----------------------------

void MbufIo::unclaimed(mars::PacketRef &frame, mars::Unclaimed why)
{
    rte_mbuf *m = static_cast<rte_mbuf *>(frame.handle);
    // Every engine's stack sees each ARP frame and IPv6 neighbour solicitation
    // or advertisement (steer.h shares them); one engine hands it on, or the
    // kernel would get one copy per engine.
    const bool shared = why == mars::Unclaimed::kArp ||
                        (why == mars::Unclaimed::kIpv6 && frame_for_every_engine(frame.data, frame.len));
    if (!kcount_ || (shared && !kernel_arp_)) {
        rte_pktmbuf_free(m);
        return;
    }
    const unsigned r = unsigned(why) < mars::kUnclaimedReasons ? unsigned(why) : mars::kUnclaimedReasons - 1;
    kcount_->to_frames[r]++;
    kcount_->to_bytes[r] += frame.len;
    if (n_to_kernel_ == kKernelBurst) flush_kernel();
    to_kernel_[n_to_kernel_++] = m;
}

void MbufIo::flush_kernel()
{
    if (!n_to_kernel_) return;
    const uint16_t sent = rte_eth_tx_burst(tap_, queue_, to_kernel_, n_to_kernel_);
    if (sent < n_to_kernel_) {
        kcount_->to_drops += n_to_kernel_ - sent;
        rte_pktmbuf_free_bulk(to_kernel_ + sent, n_to_kernel_ - sent);
    }
    n_to_kernel_ = 0;
}

uint16_t MbufIo::forward_from_kernel(uint16_t max)
{
    rte_mbuf *m[kKernelBurst];
    if (max > kKernelBurst) max = kKernelBurst;
    const uint16_t got = rte_eth_rx_burst(tap_, queue_, m, max);
    if (!got) return 0;
    uint64_t bytes = 0;
    for (uint16_t i = 0; i < got; i++) {
        bytes += m[i]->pkt_len;
        m[i]->ol_flags = 0; // the kernel filled its checksums; nothing for the NIC to do
    }
    kcount_->from_frames += got;
    kcount_->from_bytes += bytes;
    const uint16_t sent = rte_eth_tx_burst(port_, queue_, m, got);
    if (sent < got) {
        kcount_->from_drops += got - sent;
        rte_pktmbuf_free_bulk(m + sent, got - sent);
    }
    return got;
}

} // namespace ppe
