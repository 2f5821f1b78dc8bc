/* preload/src/port_ifindex.c: the kernel interfaces holding the PPE's
 * addresses (port_ifindex.h), looked up once per process. */
#include "port_ifindex.h"

#include "config.h"
#include "decide.h"
#include "udp.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>

/* ipi_ifindex: the kernel interface holding the PPE address the datagram
 * came to (on a port shared with the kernel, the interface the PPE makes
 * for it: what the program sees in `ip link`), else 0 (no kernel interface
 * has the address: preload/README.md "UDP"). Looked up once per process
 * (getifaddrs): at attach on a shared port with IPv6 addresses
 * (eta_net_fill_link6), else when a socket first asks for IP_PKTINFO or
 * names an interface; never on the data path, which reads the table. */
static _Atomic uint32_t ifx_state; /* 0 not looked up, 1 being filled, 2 ready */
static unsigned ifx_n, ifx6_n;
static uint32_t ifx_ip[ETA_NET_MAX_PORTS];
static int ifx_index[ETA_NET_MAX_PORTS];
static uint8_t ifx6_ip[ETA_NET_MAX_PORTS][16]; /* the port6 addresses a kernel interface holds */
static int ifx6_index[ETA_NET_MAX_PORTS];
static uint8_t link6_ip[16]; /* the link-local address of the first one's interface */
static bool link6_has;

/* The link-local address the interface `name` holds (the kernel's, from the
 * port's MAC). */
static void link6_fill(struct ifaddrs *all, const char *name)
{
    for (struct ifaddrs *a = all; a; a = a->ifa_next) {
        struct sockaddr_in6 in6;
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET6 || strcmp(a->ifa_name, name) != 0)
            continue;
        memcpy(&in6, a->ifa_addr, sizeof in6);
        if (IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr)) {
            memcpy(link6_ip, in6.sin6_addr.s6_addr, 16);
            link6_has = true;
            return;
        }
    }
}

/* The index of a kernel interface holding address ip (network order: 4
 * bytes for AF_INET, 16 for AF_INET6) and, through *name, its name; 0: none. */
static unsigned holder(struct ifaddrs *all, int family, const void *ip, const char **name)
{
    for (struct ifaddrs *a = all; a; a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != family)
            continue;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
        const void *have;
        if (family == AF_INET6) {
            memcpy(&in6, a->ifa_addr, sizeof in6);
            have = in6.sin6_addr.s6_addr;
        } else {
            memcpy(&in, a->ifa_addr, sizeof in);
            have = &in.sin_addr.s_addr;
        }
        if (memcmp(have, ip, family == AF_INET6 ? 16 : 4) != 0)
            continue;
        unsigned x = if_nametoindex(a->ifa_name);
        if (x) {
            *name = a->ifa_name;
            return x;
        }
    }
    return 0;
}

void eta_ifindex_lookup(void)
{
    uint32_t st = 0;
    if (!atomic_compare_exchange_strong(&ifx_state, &st, 1))
        return;
    struct ifaddrs *all = NULL;
    int saved = errno;
    if (getifaddrs(&all) == 0) {
        const char *name = NULL;
        for (unsigned i = 0; i < eta_net.n_ports && ifx_n < ETA_NET_MAX_PORTS; i++) {
            const uint32_t be = htonl(eta_net.port[i].ip);
            unsigned x = holder(all, AF_INET, &be, &name);
            if (x) {
                ifx_ip[ifx_n] = eta_net.port[i].ip;
                ifx_index[ifx_n++] = (int)x;
            }
        }
        /* The port6 addresses (IPV6_PKTINFO, a link-local sender's scope),
         * and the first one's interface's link-local address. */
        for (unsigned i = 0; i < eta_net.n_ports6 && ifx6_n < ETA_NET_MAX_PORTS; i++) {
            unsigned x = holder(all, AF_INET6, eta_net.port6[i].ip, &name);
            if (x) {
                if (ifx6_n == 0)
                    link6_fill(all, name);
                memcpy(ifx6_ip[ifx6_n], eta_net.port6[i].ip, 16);
                ifx6_index[ifx6_n++] = (int)x;
            }
        }
        freeifaddrs(all);
    }
    errno = saved;
    atomic_store_explicit(&ifx_state, 2, memory_order_release);
}

int eta_ifindex_of(uint32_t ip)
{
    if (atomic_load_explicit(&ifx_state, memory_order_acquire) != 2)
        return 0;
    for (unsigned i = 0; i < ifx_n; i++)
        if (ifx_ip[i] == ip)
            return ifx_index[i];
    return 0;
}

/* ipi6_ifindex of an IPv6 datagram to ip, and a link-local sender's scope:
 * the interface holding the port6 address (a link-local destination: the
 * PPE port's, its first port6 address's), else 0. */
int eta_ifindex6_of(const uint8_t ip[16])
{
    if (atomic_load_explicit(&ifx_state, memory_order_acquire) != 2 || ifx6_n == 0)
        return 0;
    if (ip[0] == 0xfe && (ip[1] & 0xc0) == 0x80)
        return ifx6_index[0]; /* link-local: the port's interface */
    for (unsigned i = 0; i < ifx6_n; i++)
        if (memcmp(ifx6_ip[i], ip, 16) == 0)
            return ifx6_index[i];
    return 0;
}

int eta_udp_ifindex4(uint32_t ip)
{
    eta_ifindex_lookup();
    return eta_ifindex_of(ip);
}

bool eta_udp_ppe_ifindex(int ifindex)
{
    eta_ifindex_lookup();
    if (atomic_load_explicit(&ifx_state, memory_order_acquire) != 2 || ifindex <= 0)
        return false;
    for (unsigned i = 0; i < ifx_n; i++)
        if (ifx_index[i] == ifindex)
            return true;
    for (unsigned i = 0; i < ifx6_n; i++)
        if (ifx6_index[i] == ifindex)
            return true;
    return false;
}


int eta_port_ifindex6(uint8_t link6[16], bool *has_link6)
{
    eta_ifindex_lookup();
    const bool ready = atomic_load_explicit(&ifx_state, memory_order_acquire) == 2;
    if (has_link6)
        *has_link6 = ready && link6_has;
    if (link6 && ready && link6_has)
        memcpy(link6, link6_ip, 16);
    return ready && ifx6_n ? ifx6_index[0] : 0;
}

void eta_net_fill_link6(struct eta_net *n)
{
    if (!n->self_shared || !n->n_ports6)
        return; /* no kernel interface names the port (preload/README.md "IPv6 connects") */
    bool has = false;
    uint8_t ll[16];
    const int x = eta_port_ifindex6(ll, &has);
    n->link6_ifindex = x;
    n->has_link6 = x && has;
    if (n->has_link6)
        memcpy(n->link6, ll, 16);
}
