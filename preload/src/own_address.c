/* The PPE's own addresses: what a socket may do with them. On a port shared
 * with the kernel (`self shared` in <socket>.net) the kernel holds each eta
 * socket's address and port too (its placeholder: one port space; TCP over
 * IPv4 and IPv6, the port's IPv6 addresses being on the kernel's tap too). A
 * connection to one of those addresses stays inside the engine where the PPE
 * carries it (`self local`: both ends in MARS), and goes through the kernel
 * where no eta listener takes it (shared port) or where the PPE is older;
 * where the PPE cannot carry one at all (`self unreachable`) it is refused at
 * once. preload/README.md "One port space and local connections on a shared
 * port". */
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>

#include "decide.h"
#include "own_address.h"
#include "real.h"
#include "shim.h"
#include "sock.h"
#include "sock6.h"
#include "sockobj.h"

/* The kernel placeholder's port after a bind: 0 when it cannot be read. */
uint16_t eta_placeholder_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    if (real_getsockname(fd, (struct sockaddr *)&ss, &l) != 0)
        return 0;
    struct sockaddr_in in;
    memcpy(&in, &ss, sizeof in); /* the port is at the same place in sockaddr_in6 */
    return ntohs(in.sin_port);
}

int eta_hold_wildcard(int fd, struct eta_sock *s)
{
    struct sockaddr_in6 any6 = {.sin6_family = AF_INET6};
    struct sockaddr_in any4 = {.sin_family = AF_INET};
    const int rc = s->v6 ? real_bind(fd, (const struct sockaddr *)&any6, sizeof any6)
                         : real_bind(fd, (const struct sockaddr *)&any4, sizeof any4);
    if (rc != 0)
        return errno == EADDRINUSE ? EADDRNOTAVAIL : errno;
    s->bound_kernel = true;
    s->kernel_port = eta_placeholder_port(fd);
    s->local = (struct dti_addr){0, s->kernel_port};
    return s->kernel_port ? 0 : EADDRNOTAVAIL;
}

/* A connect to one of the PPE's own addresses, where the PPE says it cannot
 * carry one (`self unreachable` in <socket>.net: its SYN would wait for an
 * ARP answer nobody gives, and the connect for minutes; the kernel has no
 * such address and would send the SYN out by its default route): refused
 * at once, with one warning per process. */
bool eta_connects_to_ppe_itself(const struct sockaddr *addr, socklen_t len)
{
    if (!eta_net.self_unreachable || !addr || len < (socklen_t)sizeof(struct sockaddr_in) ||
        addr->sa_family != AF_INET)
        return false;
    struct sockaddr_in in;
    memcpy(&in, addr, sizeof in);
    if (!eta_net_is_local(&eta_net, ntohl(in.sin_addr.s_addr)))
        return false;
    static _Atomic bool warned;
    char buf[32];
    if (!atomic_exchange(&warned, true))
        eta_log("warning: connect to %s refused: it is the PPE's own address, and the PPE cannot connect "
                "to itself; a local client reaches an INADDR_ANY listener at 127.0.0.1",
                fmt_addr(addr, buf, sizeof buf));
    return true;
}

/* A connect to one of the PPE's own addresses on a shared port that no eta
 * listener took (the engine refused it) goes through the kernel (its
 * loopback reaches kernel listeners); with a PPE older than `self local`
 * every local connect does. Said once per process, for information. */
void eta_note_local(const char *addr)
{
    static _Atomic bool said;
    if (!atomic_exchange(&said, true))
        eta_log("connect to %s goes through the kernel: no eta listener there, and the PPE's port is shared "
                "with the kernel (counted as 'local'; connections to eta listeners stay inside the engine)",
                addr);
}

bool eta_is_local_try(const struct sockaddr *addr, socklen_t len, bool native6)
{
    if (native6) {
        struct sockaddr_in6 in6;
        if (!eta_net.self_local6 || !addr || len < (socklen_t)sizeof in6 || addr->sa_family != AF_INET6)
            return false;
        memcpy(&in6, addr, sizeof in6);
        return eta_net_is_local6(&eta_net, in6.sin6_addr.s6_addr);
    }
    struct sockaddr_in in;
    if (!eta_net.self_local || !addr || len < (socklen_t)sizeof in || addr->sa_family != AF_INET)
        return false;
    memcpy(&in, addr, sizeof in);
    return eta_net_is_local(&eta_net, ntohl(in.sin_addr.s_addr));
}

/* Binds s's kernel placeholder to the PPE address a connect to `dest` (host
 * order) leaves from, port 0, and keeps the port the kernel picked for the
 * PPE. An AF_INET6 socket (a v4-mapped destination, IPV6_V6ONLY off) holds
 * [::] instead, both families, as Linux's autobind reserves the port: its
 * next connect after a refusal may go to an IPv6 address (a v4-mapped bind
 * would hold the port for IPv4 alone, and cannot be undone). Returns 0 or
 * an errno value (no port left: EADDRNOTAVAIL, as Linux's connect answers). */
int eta_hold_ephemeral(int fd, struct eta_sock *s, uint32_t dest)
{
    uint32_t src = eta_net_source(&eta_net, dest);
    int rc;
    if (s->v6) {
        struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
        rc = real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
    } else {
        struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(src)};
        rc = real_bind(fd, (const struct sockaddr *)&in, sizeof in);
    }
    if (rc != 0)
        return errno == EADDRINUSE ? EADDRNOTAVAIL : errno;
    s->bound_kernel = true;
    s->kernel_port = eta_placeholder_port(fd);
    return s->kernel_port ? 0 : EADDRNOTAVAIL;
}

int eta_placeholder_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    int rc = real_bind(fd, addr, len);
    if (rc == 0 || errno != EADDRNOTAVAIL || addr->sa_family != AF_INET6)
        return rc;
    /* The kernel refuses an IPv6 address it still checks for duplicates
     * (DAD: tentative, about a second after eta-ppe added it to its
     * interface, or after the interface came back up). It is the PPE's
     * address, which the engine already serves: bound with IP_FREEBIND,
     * which the program gets back as it had it. One retry, on that
     * error only, so a bind that works costs nothing more. */
    int was = 0, one = 1;
    socklen_t l = sizeof was;
    if (real_getsockopt(fd, SOL_IP, IP_FREEBIND, &was, &l) != 0 || was ||
        real_setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof one) != 0) {
        errno = EADDRNOTAVAIL;
        return -1;
    }
    rc = real_bind(fd, addr, len);
    int saved = errno;
    (void)real_setsockopt(fd, SOL_IP, IP_FREEBIND, &was, sizeof was);
    errno = saved;
    return rc;
}

int eta_hold_ephemeral6(int fd, struct eta_sock *s, const uint8_t dest[16])
{
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    if (dest[0] == 0xfe && (dest[1] & 0xc0) == 0x80) {
        /* Link-local (the port's interface, eta_decide_connect6): from the
         * PPE's link-local address there, which the tap holds too. */
        if (!eta_net.has_link6)
            return EADDRNOTAVAIL;
        memcpy(in6.sin6_addr.s6_addr, eta_net.link6, 16);
        in6.sin6_scope_id = (uint32_t)eta_net.link6_ifindex;
    } else if (!eta_net_source6(&eta_net, dest, in6.sin6_addr.s6_addr)) {
        return EADDRNOTAVAIL;
    }
    /* IPV6_V6ONLY as the program has it (its setsockopt, or
     * net.ipv6.bindv6only): the bind below makes the placeholder's 1, where
     * Linux's autobind at connect leaves it as it was. */
    int was = 0;
    socklen_t wl = sizeof was;
    if (real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &was, &wl) != 0)
        was = 1; /* unknown: the placeholder's answer, as before */
    if (eta_placeholder_bind(fd, (const struct sockaddr *)&in6, sizeof in6) != 0)
        return errno == EADDRINUSE ? EADDRNOTAVAIL : errno;
    s->v6only_read0 = !was;
    s->bound_kernel = true;
    s->kernel_port = eta_placeholder_port(fd);
    /* The address it holds: the engine's socket binds it (eta_bind_held6),
     * and a new PPE or exec sees it as a bind() there. The kernel made the
     * placeholder IPv6-only with that bind (as any specific address): the
     * engine's socket binds so, getsockopt answers what the program had. */
    s->local6 = eta_local6_of(in6.sin6_addr.s6_addr);
    s->local = (struct dti_addr){0, s->kernel_port};
    s->v6only = true;
    return s->kernel_port ? 0 : EADDRNOTAVAIL;
}

/* A kernel UDP (or raw) socket aimed at a destination the PPE routes (a
 * UDP socket bound to INADDR_ANY or a kernel address stays the kernel's:
 * README "UDP"): the PPE's port does not carry it, and the
 * kernel reaches that address only by a route of its own (where it has none,
 * its default route takes the datagrams elsewhere). iperf3 -u waited 30 s and
 * blamed its control connection; one warning per process says why. Costs a
 * system call only for the first such destination. */
void eta_warn_datagrams_to_ppe(int fd, const struct sockaddr *addr, socklen_t len)
{
    static _Atomic bool warned;
    if (ETA_LIKELY(atomic_load_explicit(&warned, memory_order_relaxed)) || !addr ||
        len < (socklen_t)sizeof(struct sockaddr_in) || addr->sa_family != AF_INET)
        return;
    struct sockaddr_in in;
    memcpy(&in, addr, sizeof in);
    if (!eta_net_udp_routes(&eta_net, ntohl(in.sin_addr.s_addr)))
        return; /* (the PPE's own address on a shared port: the kernel holds it) */
    int type = 0;
    socklen_t tl = sizeof type;
    if (real_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type == SOCK_STREAM)
        return;
    if (atomic_exchange(&warned, true))
        return;
    char buf[32];
    eta_log("warning: fd %d: %s to %s go to the kernel (this socket is the kernel's: eta carries UDP only for "
            "sockets bound to the PPE's address or unbound), not through the PPE's port: "
            "they arrive only if the kernel has a route of its own there",
            fd, type == SOCK_DGRAM ? "UDP datagrams" : "packets", fmt_addr(addr, buf, sizeof buf));
}
