/* Which sockets go to the PPE and which to the kernel: pure functions over
 * the PPE's addresses and routes, so they can be tested on their own. */
#ifndef ETA_PRELOAD_DECIDE_H
#define ETA_PRELOAD_DECIDE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Why a socket went to the kernel. ETA_R_NONE: it did not. The names (for
 * logs and eta-stat) are in eta_reason_name(); keep both in step with
 * preload/include/eta/preload_stats.h. */
enum eta_reason {
    ETA_R_NONE = 0,
    ETA_R_NOT_INET,        /* AF_UNIX, AF_NETLINK, AF_PACKET, ... */
    ETA_R_INET6,           /* IPv6 the shim leaves to the kernel (preload/README.md "IPv6 connects") */
    ETA_R_NOT_STREAM,      /* UDP, raw, SEQPACKET */
    ETA_R_PROTOCOL,        /* SOCK_STREAM with a protocol other than TCP (e.g. MPTCP, SCTP) */
    ETA_R_NO_PPE,          /* no PPE could be attached */
    ETA_R_NOT_ROUTED,      /* connect() to a destination the PPE does not route */
    ETA_R_LOOPBACK,        /* connect()/bind() to 127.0.0.0/8 */
    ETA_R_KERNEL_ADDR,     /* bind() to an address that is not the PPE's */
    ETA_R_PPE_REFUSED,     /* the PPE refused the socket (limit reached, engine gone) */
    ETA_R_FD_RANGE,        /* descriptor number beyond the shim's table */
    ETA_R_FORK_CHILD,      /* inherited across fork: this PPE cannot share it (see README) */
    ETA_R_DISABLED,        /* ETA_DISABLE=1 */
    ETA_R_LOCAL,           /* connect() to one of the PPE's own addresses on a port shared with the
                            * kernel: through the kernel (its loopback), which holds them too */
    ETA_R_COUNT
};

const char *eta_reason_name(enum eta_reason r);

#define ETA_NET_MAX_PORTS 8
#define ETA_NET_MAX_ROUTES 32

/* The PPE's view of the network: its own addresses (one per port, with the
 * subnet directly reachable through it) and extra routes through gateways.
 * Addresses in host byte order. */
struct eta_net {
    unsigned n_ports;
    struct {
        uint32_t ip;
        uint8_t prefix;
    } port[ETA_NET_MAX_PORTS];
    unsigned n_routes;
    struct {
        uint32_t dest;
        uint8_t prefix;
    } route[ETA_NET_MAX_ROUTES];
    unsigned n_ports6;     /* IPv6 (issue 31): the port's address6, network order, each prefix on-link */
    struct {
        uint8_t ip[16];
        uint8_t prefix;
    } port6[ETA_NET_MAX_PORTS];
    unsigned n_routes6;    /* IPv6 destination prefixes the PPE routes beyond the port6 prefixes (issue 31) */
    struct {
        uint8_t dest[16];  /* network order */
        uint8_t prefix;
    } route6[ETA_NET_MAX_ROUTES];
    bool self_unreachable; /* the PPE cannot carry a connection to its own addresses */
    bool self_shared;      /* the kernel holds the PPE's addresses too (kernel = "shared"): one port
                            * space; a local connection nobody in the engine takes goes through the kernel */
    bool self_local;       /* the engine carries connections to its own addresses (issue 29: both
                            * ends in MARS, no wire) */
    bool self_local6;      /* ... and to its own IPv6 addresses (`port6`) */
    /* Not parsed: the shim fills them (port_ifindex.c, at attach, on a
     * shared port only). The kernel interface naming the port for
     * link-local addresses (a shared port's tap: a scope id a program
     * gives; 0 none), and the PPE's link-local address it holds. */
    int link6_ifindex;
    bool has_link6;
    uint8_t link6[16];
};

/* Parses the PPE's network description: lines (or ';'-separated items) of
 *   port A.B.C.D/P        an address the PPE owns and the subnet behind it
 *   port6 ADDR/P          an IPv6 address the PPE owns and its on-link prefix
 *   route A.B.C.D/P       a destination prefix the PPE routes (via a gateway)
 *   route6 ADDR/P         an IPv6 destination prefix the PPE routes (`via G` may follow, as `route`'s)
 *   self unreachable      a connection to one of its own addresses cannot work
 *   self shared           the kernel holds its addresses too (a port shared with the kernel)
 *   self local            the engine carries a connection to its own addresses itself
 *   self local6           the same for its IPv6 addresses (the `port6` lines)
 * '#' starts a comment. Returns 0, or -1 with a message in `why`. */
int eta_net_parse(const char *text, struct eta_net *out, char *why, size_t why_len);

/* True when `ip` (host order) is one of the PPE's own addresses. */
bool eta_net_is_local(const struct eta_net *n, uint32_t ip);
/* True when traffic to `ip` (host order) leaves through a PPE port. */
bool eta_net_routes(const struct eta_net *n, uint32_t ip);

/* The PPE address a socket connecting to `ip` (host order) leaves from: the
 * port whose subnet holds it, else the first port's (a route's gateway is
 * reached through it: eta-ppe publishes the first port only). 0: no port. */
uint32_t eta_net_source(const struct eta_net *n, uint32_t ip);

/* socket(domain, type, protocol): ETA_R_NONE when it may be accelerated
 * later (an AF_INET stream socket), else why it is the kernel's for good. */
enum eta_reason eta_decide_socket(int domain, int type, int protocol);

/* connect(): ETA_R_NONE to go through the PPE, else why not. On a shared
 * port one of the PPE's own addresses is ETA_R_LOCAL (the kernel's). */
enum eta_reason eta_decide_connect(const struct eta_net *n, const struct sockaddr *addr, socklen_t len);
/* True when ip (16 bytes, network order) is one of the PPE's IPv6 addresses (`port6`). */
bool eta_net_is_local6(const struct eta_net *n, const uint8_t ip[16]);
/* True when a global ip (16 bytes, network order) off every port6 prefix
 * lies inside a `route6` prefix and the PPE has an IPv6 address to send
 * from: the engine routes it through a gateway (issue 31). */
bool eta_net_routes6(const struct eta_net *n, const uint8_t ip[16]);
/* The PPE IPv6 address a connect to dest leaves from, into src: dest itself
 * when it is the PPE's, else the first port6 whose prefix holds dest (on
 * link), else (routed) the port6 sharing the longest prefix with dest
 * (RFC 6724 rule 8), the first of equals. False when the PPE has no IPv6
 * address. */
bool eta_net_source6(const struct eta_net *n, const uint8_t dest[16], uint8_t src[16]);

/* connect() of an AF_INET6 socket to a native IPv6 address (issue 31):
 * ETA_R_NONE for an on-link destination of a port6 prefix, and for a
 * link-local one (fe80::/10) whose scope id is the port's interface
 * (`link6_ifindex`, non-zero: a shared port's tap; the PPE's own link-local
 * address there ETA_R_LOCAL, the kernel holds it too; any other scope, or
 * none, ETA_R_INET6: the kernel's, which refuses scope 0 with EINVAL),
 * and for the PPE's own address where the engine carries local connections
 * (`self local6`; without it ETA_R_LOCAL on a shared port, ETA_R_INET6 on
 * one that is not), ETA_R_LOOPBACK for ::1, ETA_R_NONE off-link inside a
 * `route6` prefix (the engine routes it), ETA_R_NOT_ROUTED for the rest
 * off-link, ETA_R_INET6 for the rest (multicast, v4-mapped): the
 * kernel's. On a shared port as on one that is not (issue 29: the shim
 * holds the ports in the kernel). */
enum eta_reason eta_decide_connect6(const struct eta_net *n, const struct sockaddr *addr, socklen_t len);

/* Whether a UDP datagram to ip (host order) from an accelerated socket goes
 * through the engine: eta_net_routes, but the PPE's own addresses on a
 * shared port are the kernel's (eta_decide_udp; udp.c sends them through
 * the socket's kernel half). */
bool eta_net_udp_routes(const struct eta_net *n, uint32_t ip);

/* connect() or the first send of an AF_INET UDP socket to addr (issues 29
 * and 31): as eta_decide_connect, but the PPE's own address on a port
 * shared with the kernel is ETA_R_LOCAL even where the engine carries local
 * connections (`self local`): the kernel holds every eta UDP socket's port
 * there (its placeholder, which the shim reads) and a plain program's, so
 * its loopback reaches both. Not shared, the engine carries it (MARS's
 * local loop; ICMP port unreachable where no socket of it holds the port). */
enum eta_reason eta_decide_udp(const struct eta_net *n, const struct sockaddr *addr, socklen_t len);

/* connect() or the first send of an AF_INET6 UDP socket to ip (16 bytes,
 * network order; the caller read the address as Linux does: udp6_addr.h)
 * with scope id `scope` (a link-local destination's, as eta_decide_connect6):
 * a v4-mapped one by the IPv4 rule (eta_decide_udp); an IPv6 one
 * ETA_R_NONE when on-link of a port6 prefix; the PPE's own addresses
 * ETA_R_LOCAL on a shared port (the kernel's, as IPv4's), ETA_R_NONE where
 * the engine carries frames to itself (`self local6`: its local loop),
 * else ETA_R_INET6; otherwise as eta_decide_connect6 (on a port shared with
 * the kernel too: the shim holds the port in the kernel) (multicast:
 * ETA_R_INET6; ::1 ETA_R_LOOPBACK; off-link ETA_R_NONE inside a `route6`
 * prefix, else ETA_R_NOT_ROUTED). */
enum eta_reason eta_decide_udp6(const struct eta_net *n, const uint8_t ip[16], uint32_t scope);

enum eta_bind_target {
    ETA_BIND_KERNEL, /* bind in the kernel only */
    ETA_BIND_PPE,    /* a PPE address: the PPE only */
    ETA_BIND_BOTH,   /* INADDR_ANY: the PPE and the kernel */
};
/* bind(): where the socket is bound; *why says why it is the kernel's. An
 * address that is not AF_INET is the kernel's (it will refuse it). */
enum eta_bind_target eta_decide_bind(const struct eta_net *n, const struct sockaddr *addr, socklen_t len,
                                     enum eta_reason *why);

/* bind() of an AF_INET6 socket to a native IPv6 address: ETA_BIND_PPE for
 * one of the PPE's IPv6 addresses without a scope (on a shared port its
 * kernel placeholder binds it too, TCP and UDP alike), else
 * ETA_BIND_KERNEL. `dgram`: kept for the callers, no longer decisive. */
enum eta_bind_target eta_decide_bind6(const struct eta_net *n, const struct sockaddr *addr, socklen_t len,
                                      bool dgram);

#ifdef __cplusplus
}
#endif

#endif
