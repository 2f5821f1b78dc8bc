// ppe/src/vnet_port.cc: the "vnet:<ifname>" port (vnet_port.h).
#include "vnet_port.h"
#include "mbuf_packets.h"

#include <mars/checksum_offload.h>

#include <rte_errno.h>
#include <rte_ip.h>
#include <rte_malloc.h>

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace ppe {

namespace {

constexpr uint32_t kEth = mars::checksum_offload::kL2Len;
constexpr int kSocketBuffer = 32 << 20; // a burst of 64 KiB frames must fit (kernel truesize ~ 1.1x)

int ifreq_ioctl(int fd, unsigned long req, const std::string &iface, ifreq *ifr)
{
    std::memset(ifr, 0, sizeof *ifr);
    std::strncpy(ifr->ifr_name, iface.c_str(), IFNAMSIZ - 1);
    return ioctl(fd, req, ifr);
}

// Socket buffers the size of a burst of super-frames: the FORCE variants
// (CAP_NET_ADMIN) pass net.core.rmem_max / wmem_max; without it the
// kernel's maximum is what we get.
void size_buffer(int fd, int force, int plain)
{
    const int v = kSocketBuffer;
    if (setsockopt(fd, SOL_SOCKET, force, &v, sizeof v) != 0) setsockopt(fd, SOL_SOCKET, plain, &v, sizeof v);
}

} // namespace

bool VnetPortState::open(const PortConfig &pc, const std::vector<int> &numa_of_queue, uint32_t rx_buffers,
                         uint8_t mac_out[6], std::string *error)
{
    iface = vnet_iface(pc.device);
    const std::string what = "port \"" + pc.name + "\" (" + pc.device + ")";
    if_index = int(if_nametoindex(iface.c_str()));
    if (if_index == 0) {
        *error = what + ": interface \"" + iface + "\" does not exist (ip link lists the interfaces)";
        return false;
    }
    const uint16_t queues = uint16_t(numa_of_queue.size());
    // Fanout groups are per network namespace; an id of our own per port.
    const int fanout_id = (getpid() ^ (if_index << 7)) & 0xffff;
    for (uint16_t q = 0; q < queues; q++) {
        const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0); // protocol 0: nothing arrives before bind
        if (fd < 0) {
            *error = what + ": cannot open a packet socket: " + std::strerror(errno) +
                     (errno == EPERM ? " (needs root or CAP_NET_RAW: run eta-ppe from its systemd unit or with sudo)"
                                     : "");
            close();
            return false;
        }
        fds.push_back(fd);
        if (q == 0) {
            ifreq ifr;
            if (ifreq_ioctl(fd, SIOCGIFMTU, iface, &ifr) != 0) {
                *error = what + ": cannot read the interface's MTU: " + std::strerror(errno);
                close();
                return false;
            }
            mtu = uint32_t(ifr.ifr_mtu);
            if (pc.mtu > mtu) {
                *error = what + ": mtu " + std::to_string(pc.mtu) + " is larger than interface \"" + iface +
                         "\"'s (" + std::to_string(mtu) + "); lower [[port]] mtu or raise the interface's (ip link set dev " +
                         iface + " mtu " + std::to_string(pc.mtu) + ")";
                close();
                return false;
            }
            if (ifreq_ioctl(fd, SIOCGIFFLAGS, iface, &ifr) != 0 || !(ifr.ifr_flags & IFF_UP)) {
                *error = what + ": interface \"" + iface + "\" is down (ip link set dev " + iface + " up)";
                close();
                return false;
            }
            if (ifreq_ioctl(fd, SIOCGIFHWADDR, iface, &ifr) != 0 || ifr.ifr_hwaddr.sa_family != 1 /* ARPHRD_ETHER */) {
                *error = what + ": interface \"" + iface + "\" is not an Ethernet interface";
                close();
                return false;
            }
            std::memcpy(mac_out, ifr.ifr_hwaddr.sa_data, 6);
        }
        const int one = 1;
        if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
            *error = what + ": the kernel refuses PACKET_VNET_HDR: " + std::strerror(errno);
            close();
            return false;
        }
        // Our own frames are not received back; transmit skips the qdisc
        // (the engine is the only sender on the socket and paces itself).
        setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
        setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
        size_buffer(fd, SO_RCVBUFFORCE, SO_RCVBUF);
        size_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
        sockaddr_ll sll{};
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(ETH_P_ALL);
        sll.sll_ifindex = if_index;
        if (bind(fd, reinterpret_cast<sockaddr *>(&sll), sizeof sll) != 0) {
            *error = what + ": cannot bind a packet socket to \"" + iface + "\": " + std::strerror(errno);
            close();
            return false;
        }
        if (queues > 1) {
            const int arg = fanout_id | (PACKET_FANOUT_HASH << 16);
            if (setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &arg, sizeof arg) != 0) {
                *error = what + ": cannot join the sockets of its " + std::to_string(queues) +
                         " queues in a fanout group: " + std::strerror(errno);
                close();
                return false;
            }
        }
    }
    counters = static_cast<VnetCounters *>(rte_zmalloc("vnet_counters", sizeof(VnetCounters) * queues, 64));
    if (!counters) {
        *error = what + ": cannot allocate its counters (raise dpdk.memory_mb)";
        close();
        return false;
    }
    for (uint16_t q = 0; q < queues; q++) {
        const std::string name = "v" + std::to_string(if_index) + "r" + std::to_string(q);
        rte_mempool *p = rte_pktmbuf_pool_create(name.c_str(), rx_buffers, 32, 0, UINT16_MAX,
                                                 numa_of_queue[q] >= 0 ? numa_of_queue[q] : SOCKET_ID_ANY);
        if (!p) {
            *error = what + ": cannot allocate " + std::to_string(rx_buffers) + " receive buffers of 64 KiB: " +
                     rte_strerror(rte_errno) + " (raise dpdk.memory_mb)";
            close();
            return false;
        }
        rx_pools.push_back(p);
    }
    return true;
}

void VnetPortState::close()
{
    for (int fd : fds) ::close(fd);
    fds.clear();
    for (rte_mempool *p : rx_pools) rte_mempool_free(p);
    rx_pools.clear();
    rte_free(counters);
    counters = nullptr;
}

void VnetPortState::link(bool *up, uint64_t *speed_mbps) const
{
    auto first_line = [&](const char *file) {
        std::ifstream in("/sys/class/net/" + iface + "/" + file);
        std::string line;
        std::getline(in, line);
        return line;
    };
    *up = first_line("carrier") == "1";
    const long speed = std::atol(first_line("speed").c_str());
    *speed_mbps = speed > 0 ? uint64_t(speed) : 0;
}

VnetCounters VnetPortState::sum() const
{
    VnetCounters s;
    if (!counters) return s;
    for (size_t q = 0; q < fds.size(); q++) {
        const VnetCounters &c = counters[q];
        s.rx_frames += c.rx_frames;
        s.rx_bytes += c.rx_bytes;
        s.rx_lro_frames += c.rx_lro_frames;
        s.rx_lro_segments += c.rx_lro_segments;
        s.rx_csum_valid += c.rx_csum_valid;
        s.rx_csum_partial += c.rx_csum_partial;
        s.rx_csum_unknown += c.rx_csum_unknown;
        s.rx_dropped += c.rx_dropped;
        s.rx_nombuf += c.rx_nombuf;
        s.tx_frames += c.tx_frames;
        s.tx_bytes += c.tx_bytes;
        s.tx_tso_frames += c.tx_tso_frames;
        s.tx_tso_segments += c.tx_tso_segments;
        s.tx_errors += c.tx_errors;
    }
    return s;
}

uint64_t VnetPortState::socket_drops() const
{
    for (int fd : fds) {
        tpacket_stats st{};
        socklen_t len = sizeof st;
        if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) socket_drops_ += st.tp_drops;
    }
    return socket_drops_;
}

uint32_t vnet_tx_prepare(const mars::PacketRef &f, virtio_net_hdr *h, uint32_t ext_len)
{
    std::memset(h, 0, sizeof *h);
    const uint32_t frame_len = f.len + ext_len; // the headers (and payload) here, the rest attached
    if (!(f.flags & (mars::kTxIpCsum | mars::kTxTcpCsum)) || f.len < kEth + 20) return 1;
    uint8_t *ip = f.data + kEth;
    // IPv6 (the version nibble): TCP right after the 40-byte header, no IP
    // header checksum (mars/checksum_offload.h).
    const bool v6 = (ip[0] >> 4) == 6;
    const uint32_t ihl = v6 ? mars::checksum_offload::kIp6Len : (ip[0] & 0x0fu) * 4u;
    if (!v6 && (f.flags & mars::kTxIpCsum)) {
        // The kernel takes the IPv4 header as it is (its GSO fills each
        // segment's, but the receiver checks the super-frame's too).
        ip[10] = ip[11] = 0;
        const uint16_t c = rte_raw_cksum(ip, ihl);
        const uint16_t v = c == 0xffff ? c : uint16_t(~c);
        std::memcpy(ip + 10, &v, 2);
    }
    if (!(f.flags & mars::kTxTcpCsum) || f.len < kEth + ihl + 20) return 1;
    uint8_t *tcp = ip + ihl;
    h->flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h->csum_start = uint16_t(kEth + ihl);
    h->csum_offset = mars::checksum_offload::kTcpCsumOffset;
    if (!(f.flags & mars::kTxTcpSeg)) return 1;
    // TSO: MARS's seed is the pseudo-header sum without the TCP length (as
    // DPDK wants); the kernel's (CHECKSUM_PARTIAL, and its GSO, which swaps
    // the whole length for each segment's) includes it. The same over IPv6
    // (its pseudo-header's upper-layer length, below 64 KiB here).
    const uint32_t tcp_len = frame_len - kEth - ihl;
    uint32_t sum = (uint32_t(tcp[16]) << 8 | tcp[17]) + tcp_len;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    tcp[16] = uint8_t(sum >> 8);
    tcp[17] = uint8_t(sum);
    const uint32_t hdr = kEth + ihl + (tcp[12] >> 4) * 4u;
    const uint32_t mss = mars::tx_seg_size(f);
    const uint32_t payload = frame_len > hdr ? frame_len - hdr : 0;
    if (mss == 0 || payload <= mss) return 1;
    h->gso_type = v6 ? VIRTIO_NET_HDR_GSO_TCPV6 : VIRTIO_NET_HDR_GSO_TCPV4;
    h->gso_size = uint16_t(mss);
    h->hdr_len = uint16_t(hdr);
    return (payload + mss - 1) / mss;
}

uint32_t vnet_rx_flags(const virtio_net_hdr &h, const uint8_t *frame, uint32_t len, uint32_t *lro_segs)
{
    *lro_segs = 0;
    uint32_t flags = 0;
    if (h.flags & (VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID)) flags |= mars::kRxL4CsumGood;
    if ((h.gso_type & ~VIRTIO_NET_HDR_GSO_ECN) != VIRTIO_NET_HDR_GSO_NONE && h.gso_size && len >= kEth + 40) {
        // The IP header's length: IPv4's IHL, or IPv6's 40 (GSO_TCPV6; an
        // extension header before TCP, which Linux's TCP never sends, is
        // counted as payload: the count is an upper bound then).
        const bool v6 = frame[12] == 0x86 && frame[13] == 0xdd;
        const uint32_t ihl = v6 ? 40u : (frame[kEth] & 0x0fu) * 4u;
        const bool tcp = v6 ? frame[kEth + 6] == IPPROTO_TCP : true;
        if (len >= kEth + ihl + 20) {
            const uint32_t hdr = kEth + ihl + (tcp ? (frame[kEth + ihl + 12] >> 4) * 4u : 0u);
            const uint32_t payload = len > hdr ? len - hdr : 0;
            *lro_segs = (payload + h.gso_size - 1) / h.gso_size;
        }
    }
    return flags;
}

VnetIo::VnetIo(int fd, rte_mempool *rx_pool, rte_mempool *tx_pool, rte_mempool *tso_pool, uint16_t port_id,
               uint32_t offloads, VnetCounters *counters)
    : fd_(fd), rx_pool_(rx_pool), tx_pool_(tx_pool), tso_pool_(tso_pool), port_id_(port_id), offloads_(offloads),
      c_(counters)
{
    std::memset(rx_msg_, 0, sizeof rx_msg_);
    std::memset(tx_msg_, 0, sizeof tx_msg_);
    for (uint16_t i = 0; i < kBurst; i++) {
        rx_iov_[i][0] = iovec{&rx_hdr_[i], sizeof(virtio_net_hdr)};
        rx_msg_[i].msg_hdr.msg_iov = rx_iov_[i];
        rx_msg_[i].msg_hdr.msg_iovlen = 2;
        tx_iov_[i][0] = iovec{&tx_hdr_[i], sizeof(virtio_net_hdr)};
        tx_msg_[i].msg_hdr.msg_iov = tx_iov_[i];
    }
    bounce_ = static_cast<uint8_t *>(std::malloc(UINT16_MAX + 1));
}

VnetIo::~VnetIo()
{
    for (rte_mbuf *&m : slot_)
        if (m) rte_pktmbuf_free(m);
    std::free(bounce_);
}

uint16_t VnetIo::receive(mars::PacketRef *out, uint16_t n)
{
    if (n > kBurst) n = kBurst;
    uint16_t m = 0;
    for (; m < n; m++) {
        if (slot_[m]) continue;
        rte_mbuf *mb = rte_pktmbuf_alloc(rx_pool_);
        if (!mb) break;
        slot_[m] = mb;
        rx_iov_[m][1] = iovec{rte_pktmbuf_mtod(mb, uint8_t *), kVnetRxRoom};
    }
    if (m == 0) return receive_bounce(out);
    const int got = recvmmsg(fd_, rx_msg_, m, MSG_DONTWAIT, nullptr);
    if (got <= 0) return 0;
    uint16_t k = 0;
    for (int i = 0; i < got; i++) {
        const uint32_t total = rx_msg_[i].msg_len;
        if ((rx_msg_[i].msg_hdr.msg_flags & MSG_TRUNC) || total < sizeof(virtio_net_hdr) + kEth) {
            c_->rx_dropped++; // the slot keeps its buffer
            continue;
        }
        rte_mbuf *mb = slot_[i];
        slot_[i] = nullptr;
        const uint16_t len = uint16_t(total - sizeof(virtio_net_hdr));
        mb->data_len = len;
        mb->pkt_len = len;
        mb->port = port_id_;
        uint8_t *data = rte_pktmbuf_mtod(mb, uint8_t *);
        uint32_t segs;
        const uint32_t flags = vnet_rx_flags(rx_hdr_[i], data, len, &segs);
        // The verdict rides in ol_flags too: a frame steered to another
        // engine is read back by packet_of() (steer.h).
        mb->ol_flags = (flags & mars::kRxL4CsumGood) ? RTE_MBUF_F_RX_L4_CKSUM_GOOD : 0;
        if (rx_hdr_[i].flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) c_->rx_csum_partial++;
        else if (rx_hdr_[i].flags & VIRTIO_NET_HDR_F_DATA_VALID) c_->rx_csum_valid++;
        else c_->rx_csum_unknown++;
        if (segs) {
            c_->rx_lro_frames++;
            c_->rx_lro_segments += segs;
        }
        c_->rx_bytes += len;
        out[k++] = mars::PacketRef{mb, data, len, 0, flags};
    }
    c_->rx_frames += k;
    rx_packets += k;
    return k;
}

// The receive pool is dry (MARS holds its buffers: out-of-order data,
// frames in other engines' steering rings): one frame through the bounce
// buffer, into a small buffer when it fits one. A gap is filled by a
// retransmission of one segment after a timeout, so the connection that
// holds the buffers gets them back; a super-frame waits or is dropped.
uint16_t VnetIo::receive_bounce(mars::PacketRef *out)
{
    c_->rx_nombuf++;
    if (!bounce_) return 0;
    virtio_net_hdr h;
    iovec iov[2] = {{&h, sizeof h}, {bounce_, UINT16_MAX}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    const ssize_t got = recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (got < ssize_t(sizeof h + kEth)) return 0;
    const uint32_t len = uint32_t(got) - sizeof h;
    rte_mbuf *mb = (msg.msg_flags & MSG_TRUNC) ? nullptr : rte_pktmbuf_alloc(tx_pool_);
    if (mb && rte_pktmbuf_tailroom(mb) < len) {
        rte_pktmbuf_free(mb);
        mb = nullptr;
    }
    if (!mb) {
        c_->rx_dropped++;
        return 0;
    }
    uint8_t *data = rte_pktmbuf_mtod(mb, uint8_t *);
    std::memcpy(data, bounce_, len);
    mb->data_len = uint16_t(len);
    mb->pkt_len = len;
    mb->port = port_id_;
    uint32_t segs;
    const uint32_t flags = vnet_rx_flags(h, data, len, &segs);
    mb->ol_flags = (flags & mars::kRxL4CsumGood) ? RTE_MBUF_F_RX_L4_CKSUM_GOOD : 0;
    c_->rx_frames++;
    c_->rx_bytes += len;
    rx_packets++;
    out[0] = mars::PacketRef{mb, data, uint16_t(len), 0, flags};
    return 1;
}

uint16_t VnetIo::alloc(mars::PacketRef *out, uint16_t n)
{
    return alloc_packets(tx_pool_, out, n);
}

uint16_t VnetIo::alloc_tso(mars::PacketRef *out, uint16_t n)
{
    return alloc_packets_each(tso_pool_, out, n);
}

// The attached payload is read once, by sendmmsg() in transmit(), which
// frees the chain right after: the reference is dropped within the call.
bool VnetIo::attach_external(mars::PacketRef &frame, const uint8_t *payload, uint16_t len, uint32_t *refs)
{
    if (!(offloads_ & mars::kOffloadTxExternal) || len == 0) return false;
    return attach_external_mbuf(tx_pool_, frame, payload, len, refs);
}

uint16_t VnetIo::transmit(mars::PacketRef *frames, uint16_t n)
{
    uint16_t taken = 0;
    for (uint16_t done = 0; done < n;) {
        const uint16_t k = std::min<uint16_t>(uint16_t(n - done), kBurst);
        uint32_t segs[kBurst], bytes[kBurst];
        for (uint16_t i = 0; i < k; i++) {
            const mars::PacketRef &f = frames[done + i];
            const rte_mbuf *ext =
                (f.flags & mars::kTxExternal) ? static_cast<const rte_mbuf *>(f.handle)->next : nullptr;
            const uint32_t ext_len = ext ? ext->data_len : 0;
            segs[i] = vnet_tx_prepare(f, &tx_hdr_[i], ext_len);
            tx_iov_[i][1] = iovec{f.data, f.len};
            if (ext) tx_iov_[i][2] = iovec{rte_pktmbuf_mtod(ext, void *), ext_len};
            tx_msg_[i].msg_hdr.msg_iovlen = ext ? 3 : 2;
            bytes[i] = f.len + ext_len;
        }
        uint16_t sent = 0;
        while (sent < k) {
            const int r = sendmmsg(fd_, tx_msg_ + sent, k - sent, MSG_DONTWAIT);
            if (r <= 0) break;
            sent = uint16_t(sent + r);
        }
        rte_mbuf *m[kBurst];
        for (uint16_t i = 0; i < k; i++) {
            m[i] = static_cast<rte_mbuf *>(frames[done + i].handle);
            if (i < sent) {
                c_->tx_bytes += bytes[i];
                if (segs[i] > 1) {
                    c_->tx_tso_frames++;
                    c_->tx_tso_segments += segs[i];
                }
            }
        }
        c_->tx_frames += sent;
        c_->tx_errors += k - sent;
        tx_dropped += k - sent;
        rte_pktmbuf_free_bulk(m, k); // the kernel copied what it took (attached payloads' references dropped)
        taken = uint16_t(taken + sent);
        done = uint16_t(done + k);
    }
    tx_packets += taken;
    return taken;
}

void VnetIo::release(mars::PacketRef *frames, uint16_t n)
{
    free_packets(frames, n);
}

} // namespace ppe
