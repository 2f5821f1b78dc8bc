// frame_check: captures the IPv4 frames one sender puts on an interface and
// checks them, bounded in frames and time. It sees what the receiving stack
// would see before that stack drops anything, so tests can observe corruption
// (bad IPv4 header or ICMP/UDP/TCP checksums) and reordering (ICMP echo
// replies arriving out of sequence) directly.
//
//   frame_check --iface IF --src-mac MAC [--frames N] [--timeout SECONDS]
//
// Prints READY once capturing, then at the end one line of KEY=VALUE counts:
//   frames ipv4 bad_ip bad_l4 unchecked echo_replies seq_inversions
// Exit status 0 when it ran (whatever it counted), 2 on setup errors.
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace
{

struct Counts {
    unsigned long frames = 0, ipv4 = 0, bad_ip = 0, bad_l4 = 0, unchecked = 0;
    unsigned long echo_replies = 0, seq_inversions = 0;
    int max_seq = -1;
};

// RFC 1071 one's complement sum over 16-bit words.
std::uint32_t sum16(const std::uint8_t *p, std::size_t n, std::uint32_t acc = 0)
{
    for (; n > 1; p += 2, n -= 2)
        acc += static_cast<std::uint32_t>(p[0] << 8 | p[1]);
    if (n) acc += static_cast<std::uint32_t>(p[0] << 8);
    return acc;
}

std::uint16_t fold(std::uint32_t acc)
{
    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return static_cast<std::uint16_t>(acc);
}

void check_ipv4(const std::uint8_t *ip, std::size_t len, bool csum_ready, Counts &c)
{
    ++c.ipv4;
    if (len < 20 || (ip[0] >> 4) != 4) {
        ++c.bad_ip;
        return;
    }
    std::size_t ihl = (ip[0] & 0xf) * 4u;
    std::size_t total = static_cast<std::size_t>(ip[2] << 8 | ip[3]);
    if (ihl < 20 || ihl > len || total < ihl || total > len || fold(sum16(ip, ihl)) != 0xffff) {
        ++c.bad_ip;
        return;
    }
    const std::uint8_t *l4 = ip + ihl;
    std::size_t l4_len = total - ihl;
    std::uint8_t proto = ip[9];
    if (!csum_ready) {
        ++c.unchecked; // offloaded checksum, not yet computed: nothing to verify
        return;
    }
    bool ok = true;
    if (proto == IPPROTO_ICMP) {
        ok = fold(sum16(l4, l4_len)) == 0xffff;
    } else if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) {
        std::uint32_t pseudo = sum16(ip + 12, 8) + proto + static_cast<std::uint32_t>(l4_len);
        bool udp_without_sum = proto == IPPROTO_UDP && l4_len >= 8 && l4[6] == 0 && l4[7] == 0;
        ok = udp_without_sum || fold(sum16(l4, l4_len, pseudo)) == 0xffff;
    } else {
        ++c.unchecked;
        return;
    }
    if (!ok) {
        ++c.bad_l4;
        return;
    }
    if (proto == IPPROTO_ICMP && l4_len >= 8 && l4[0] == 0 /* echo reply */) {
        ++c.echo_replies;
        int seq = l4[6] << 8 | l4[7];
        if (seq < c.max_seq) ++c.seq_inversions;
        if (seq > c.max_seq) c.max_seq = seq;
    }
}

bool parse_mac(const std::string &s, std::uint8_t mac[6])
{
    unsigned v[6];
    if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
        return false;
    for (int i = 0; i < 6; ++i)
        mac[i] = static_cast<std::uint8_t>(v[i]);
    return true;
}

} // namespace

int main(int argc, char **argv)
{
    std::string iface, mac_text;
    unsigned long want = 100;
    double timeout_s = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--iface")
            iface = v;
        else if (k == "--src-mac")
            mac_text = v;
        else if (k == "--frames")
            want = std::stoul(v);
        else if (k == "--timeout")
            timeout_s = std::stod(v);
        else {
            std::fprintf(stderr, "frame_check: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    std::uint8_t src_mac[6];
    if (iface.empty() || !parse_mac(mac_text, src_mac)) {
        std::fprintf(stderr,
                     "usage: frame_check --iface IF --src-mac MAC [--frames N] [--timeout S]\n");
        return 2;
    }
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) {
        std::perror("frame_check: AF_PACKET socket");
        return 2;
    }
    int one = 1;
    setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
    if (sll.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr *>(&sll), sizeof sll) < 0) {
        std::fprintf(stderr, "frame_check: cannot capture on %s: %s\n", iface.c_str(),
                     std::strerror(errno));
        return 2;
    }
    std::printf("READY\n");
    std::fflush(stdout);

    Counts c;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::uint8_t frame[65536];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(tpacket_auxdata))];
    while (c.frames < want) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
        iovec iov{frame, sizeof frame};
        sockaddr_ll from{};
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = sizeof from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
        if (n < 14 || from.sll_pkttype == PACKET_OUTGOING) continue;
        if (std::memcmp(frame + 6, src_mac, 6) != 0) continue;
        bool csum_ready = true;
        for (cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level == SOL_PACKET && cm->cmsg_type == PACKET_AUXDATA) {
                tpacket_auxdata aux;
                std::memcpy(&aux, CMSG_DATA(cm), sizeof aux);
                if (aux.tp_status & TP_STATUS_CSUMNOTREADY) csum_ready = false;
            }
        }
        ++c.frames;
        if ((frame[12] << 8 | frame[13]) == ETH_P_IP)
            check_ipv4(frame + 14, static_cast<std::size_t>(n) - 14, csum_ready, c);
    }
    std::printf("frames=%lu ipv4=%lu bad_ip=%lu bad_l4=%lu unchecked=%lu echo_replies=%lu "
                "seq_inversions=%lu\n",
                c.frames, c.ipv4, c.bad_ip, c.bad_l4, c.unchecked, c.echo_replies,
                c.seq_inversions);
    return 0;
}
