// ppe/src/rx_wake.cc: see rx_wake.h.
#include "rx_wake.h"

#include <dirent.h>
#include <linux/if_packet.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#ifndef AF_XDP
#define AF_XDP 44
#endif

namespace ppe {

namespace {

int socket_domain(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return -1;
    int domain = -1;
    socklen_t len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return -1;
    return domain;
}

// The interface index an AF_PACKET socket is bound to (0: none).
uint32_t bound_ifindex(int fd, int domain)
{
    if (domain == AF_PACKET) {
        sockaddr_ll a{};
        socklen_t len = sizeof a;
        if (getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0) return 0;
        return a.sll_ifindex > 0 ? uint32_t(a.sll_ifindex) : 0;
    }
    return 0;
}

} // namespace

RxWakeFds find_rx_wake_fds(const char *driver, uint32_t if_index, uint16_t queue, uint16_t n_queues)
{
    RxWakeFds out;
    const bool is_xdp = driver && std::strcmp(driver, "net_af_xdp") == 0;
    const bool is_packet = driver && std::strcmp(driver, "net_af_packet") == 0;
    if (!is_xdp && !is_packet) return out;
    DIR *dir = opendir("/proc/self/fd");
    if (!dir) return out;
    std::vector<int> packet, xdp;
    const int self = dirfd(dir);
    while (dirent *e = readdir(dir)) {
        char *end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (*e->d_name == 0 || *end != 0 || fd == self) continue;
        const int domain = socket_domain(int(fd));
        if (is_packet && domain == AF_PACKET && if_index && bound_ifindex(int(fd), domain) == if_index)
            packet.push_back(int(fd));
        else if (is_xdp && domain == AF_XDP)
            xdp.push_back(int(fd)); // XSKs do not tell their interface (no getsockname): every one
    }
    closedir(dir);
    std::vector<int> &found = is_xdp ? xdp : packet;
    if (found.empty()) return out;
    out.kind = is_xdp ? "af_xdp" : "af_packet";
    std::sort(found.begin(), found.end());
    if (found.size() == n_queues && queue < n_queues) out.fds = {found[queue]};
    else out.fds = found;
    return out;
}

} // namespace ppe
