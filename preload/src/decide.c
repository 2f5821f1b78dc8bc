/* Decision logic: which sockets the PPE carries. See decide.h. */
#include "decide.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static const char *const reason_names[ETA_R_COUNT] = {
    [ETA_R_NONE] = "accelerated",
    [ETA_R_NOT_INET] = "not-inet",
    [ETA_R_INET6] = "ipv6",
    [ETA_R_NOT_STREAM] = "not-stream",
    [ETA_R_PROTOCOL] = "not-tcp",
    [ETA_R_NO_PPE] = "no-ppe",
    [ETA_R_NOT_ROUTED] = "not-routed",
    [ETA_R_LOOPBACK] = "loopback",
    [ETA_R_KERNEL_ADDR] = "kernel-address",
    [ETA_R_PPE_REFUSED] = "ppe-refused",
    [ETA_R_FD_RANGE] = "fd-range",
    [ETA_R_FORK_CHILD] = "fork-child",
    [ETA_R_DISABLED] = "disabled",
    [ETA_R_LOCAL] = "local",
};

const char *eta_reason_name(enum eta_reason r)
{
    return (unsigned)r < ETA_R_COUNT ? reason_names[r] : "unknown";
}

static uint32_t prefix_mask(uint8_t prefix)
{
    return prefix == 0 ? 0 : ~(uint32_t)0 << (32 - prefix);
}

static bool in_prefix(uint32_t ip, uint32_t net, uint8_t prefix)
{
    uint32_t m = prefix_mask(prefix);
    return (ip & m) == (net & m);
}

bool eta_net_is_local(const struct eta_net *n, uint32_t ip)
{
    for (unsigned i = 0; i < n->n_ports; i++)
        if (n->port[i].ip == ip)
            return true;
    return false;
}

uint32_t eta_net_source(const struct eta_net *n, uint32_t ip)
{
    for (unsigned i = 0; i < n->n_ports; i++)
        if (in_prefix(ip, n->port[i].ip, n->port[i].prefix))
            return n->port[i].ip;
    return n->n_ports ? n->port[0].ip : 0;
}

bool eta_net_routes(const struct eta_net *n, uint32_t ip)
{
    if ((ip >> 24) == 127 || ip == 0 || ip == 0xffffffffu || (ip >> 28) == 0xe)
        return false; /* loopback, unspecified, broadcast, multicast */
    for (unsigned i = 0; i < n->n_ports; i++)
        if (in_prefix(ip, n->port[i].ip, n->port[i].prefix))
            return true;
    for (unsigned i = 0; i < n->n_routes; i++)
        if (in_prefix(ip, n->route[i].dest, n->route[i].prefix))
            return true;
    return false;
}

/* Parses "A.B.C.D/P" (P defaults to 32). */
static int parse_prefix(const char *s, uint32_t *ip, uint8_t *prefix)
{
    char buf[32];
    size_t len = strcspn(s, "/");
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    struct in_addr a;
    if (inet_pton(AF_INET, buf, &a) != 1)
        return -1;
    *ip = ntohl(a.s_addr);
    *prefix = 32;
    if (s[len] == '/') {
        const char *p = s + len + 1;
        if (!isdigit((unsigned char)p[0]))
            return -1;
        unsigned v = 0;
        for (; isdigit((unsigned char)*p); p++)
            v = v * 10 + (unsigned)(*p - '0');
        if (*p != 0 || v > 32)
            return -1;
        *prefix = (uint8_t)v;
    }
    return 0;
}

/* "ADDR/P" (P defaults to 128) into ip (network order) and *prefix. */
static int parse_prefix6(const char *w, uint8_t ip[16], uint8_t *prefix)
{
    char buf[64];
    size_t len = strcspn(w, "/");
    unsigned long p = 128;
    struct in6_addr a;
    bool ok = len > 0 && len < sizeof buf;
    if (ok) {
        memcpy(buf, w, len);
        buf[len] = 0;
        ok = inet_pton(AF_INET6, buf, &a) == 1;
    }
    if (ok && w[len] == '/') {
        char *end = NULL;
        p = strtoul(w + len + 1, &end, 10);
        ok = end != w + len + 1 && *end == 0 && p <= 128;
    } else if (ok) {
        ok = w[len] == 0;
    }
    if (!ok)
        return -1;
    memcpy(ip, a.s6_addr, 16);
    *prefix = (uint8_t)p;
    return 0;
}

/* "port6 ADDR/P": an IPv6 address of the PPE's port and its on-link prefix. */
static int parse_port6(const char *w, struct eta_net *out, char *why, size_t why_len)
{
    uint8_t ip[16], prefix;
    if (parse_prefix6(w, ip, &prefix) != 0) {
        snprintf(why, why_len, "'port6' needs an IPv6 address ADDR/P, not '%s'", w);
        return -1;
    }
    if (out->n_ports6 == ETA_NET_MAX_PORTS) {
        snprintf(why, why_len, "more than %d IPv6 addresses", ETA_NET_MAX_PORTS);
        return -1;
    }
    memcpy(out->port6[out->n_ports6].ip, ip, 16);
    out->port6[out->n_ports6++].prefix = prefix;
    return 0;
}

/* "route6 D/P" or "route6 D/P via G" (issue 31): an IPv6 destination prefix
 * the PPE routes; the gateway is the PPE's business, but must be an address. */
static int parse_route6(char **words, int n, struct eta_net *out, char *why, size_t why_len)
{
    uint8_t dest[16], prefix, gw[16];
    if (n != 2 && !(n == 4 && strcmp(words[2], "via") == 0)) {
        snprintf(why, why_len, "'route6' takes 'route6 ADDR/P' or 'route6 ADDR/P via GATEWAY'");
        return -1;
    }
    if (parse_prefix6(words[1], dest, &prefix) != 0) {
        snprintf(why, why_len, "'route6' needs an IPv6 prefix ADDR/P, not '%s'", words[1]);
        return -1;
    }
    if (n == 4 && inet_pton(AF_INET6, words[3], gw) != 1) {
        snprintf(why, why_len, "'route6 ... via' needs an IPv6 gateway address, not '%s'", words[3]);
        return -1;
    }
    if (out->n_routes6 == ETA_NET_MAX_ROUTES) {
        snprintf(why, why_len, "more than %d IPv6 routes", ETA_NET_MAX_ROUTES);
        return -1;
    }
    memcpy(out->route6[out->n_routes6].dest, dest, 16);
    out->route6[out->n_routes6++].prefix = prefix;
    return 0;
}

static int parse_item(char *item, struct eta_net *out, char *why, size_t why_len)
{
    char *hash = strchr(item, '#');
    if (hash)
        *hash = 0;
    char *words[4];
    int n = 0;
    for (char *save = NULL, *w = strtok_r(item, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
        if (n == 4) {
            snprintf(why, why_len, "too many words in '%s ...'", words[0]);
            return -1;
        }
        words[n++] = w;
    }
    if (n == 0)
        return 0;
    if (n == 2 && strcmp(words[0], "self") == 0 && strcmp(words[1], "unreachable") == 0) {
        out->self_unreachable = true;
        return 0;
    }
    if (n == 2 && strcmp(words[0], "self") == 0 && strcmp(words[1], "shared") == 0) {
        out->self_shared = true;
        return 0;
    }
    if (n == 2 && strcmp(words[0], "self") == 0 && strcmp(words[1], "local") == 0) {
        out->self_local = true;
        return 0;
    }
    if (n == 2 && strcmp(words[0], "self") == 0 && strcmp(words[1], "local6") == 0) {
        out->self_local6 = true;
        return 0;
    }
    if (strcmp(words[0], "port6") == 0 && n == 2)
        return parse_port6(words[1], out, why, why_len);
    if (strcmp(words[0], "route6") == 0)
        return parse_route6(words, n, out, why, why_len);
    uint32_t ip;
    uint8_t prefix;
    if (n < 2 || parse_prefix(words[1], &ip, &prefix) != 0) {
        snprintf(why, why_len, "'%s' needs an address A.B.C.D/P", words[0]);
        return -1;
    }
    if (strcmp(words[0], "port") == 0 && n == 2) {
        if (out->n_ports == ETA_NET_MAX_PORTS) {
            snprintf(why, why_len, "more than %d ports", ETA_NET_MAX_PORTS);
            return -1;
        }
        out->port[out->n_ports].ip = ip;
        out->port[out->n_ports++].prefix = prefix;
        return 0;
    }
    /* "route D/P" or "route D/P via G": the gateway is the PPE's business. */
    if (strcmp(words[0], "route") == 0 && (n == 2 || (n == 4 && strcmp(words[2], "via") == 0))) {
        if (out->n_routes == ETA_NET_MAX_ROUTES) {
            snprintf(why, why_len, "more than %d routes", ETA_NET_MAX_ROUTES);
            return -1;
        }
        out->route[out->n_routes].dest = ip;
        out->route[out->n_routes++].prefix = prefix;
        return 0;
    }
    snprintf(why, why_len, "unknown line '%s': allowed 'port A.B.C.D/P', 'port6 ADDR/P', 'route A.B.C.D/P [via G]', 'route6 ADDR/P [via G]', 'self unreachable', 'self shared', 'self local' and 'self local6'", words[0]);
    return -1;
}

int eta_net_parse(const char *text, struct eta_net *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    char item[256];
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, "\n;");
        if (len >= sizeof item) {
            snprintf(why, why_len, "line too long");
            return -1;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (parse_item(item, out, why, why_len) != 0)
            return -1;
        p += len;
        if (*p)
            p++;
    }
    return 0;
}

enum eta_reason eta_decide_socket(int domain, int type, int protocol)
{
    if (domain == AF_INET6)
        return ETA_R_INET6;
    if (domain != AF_INET)
        return ETA_R_NOT_INET;
    if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM)
        return ETA_R_NOT_STREAM;
    if (protocol != 0 && protocol != IPPROTO_TCP)
        return ETA_R_PROTOCOL;
    return ETA_R_NONE;
}

enum eta_reason eta_decide_connect(const struct eta_net *n, const struct sockaddr *addr, socklen_t len)
{
    if (!addr || len < (socklen_t)sizeof(struct sockaddr_in) || addr->sa_family != AF_INET)
        return ETA_R_NOT_INET; /* AF_UNSPEC (dissolve) and bad input: the kernel answers */
    struct sockaddr_in in;
    memcpy(&in, addr, sizeof in);
    uint32_t ip = ntohl(in.sin_addr.s_addr);
    if ((ip >> 24) == 127)
        return ETA_R_LOOPBACK;
    /* A local connection: the engine's when it carries them (`self local`;
     * the shim turns a refusal into the kernel's try on a shared port). */
    if (n->self_shared && !n->self_local && eta_net_is_local(n, ip))
        return ETA_R_LOCAL;
    return eta_net_routes(n, ip) ? ETA_R_NONE : ETA_R_NOT_ROUTED;
}

/* The first `prefix` bits of a and b are equal. */
static bool in_prefix6(const uint8_t *a, const uint8_t *b, unsigned prefix)
{
    unsigned whole = prefix / 8, rest = prefix % 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    return rest == 0 || ((a[whole] ^ b[whole]) & (uint8_t)(0xff00 >> rest)) == 0;
}

/* How many leading bits a and b share (0 to 128). */
static unsigned common_prefix6(const uint8_t *a, const uint8_t *b)
{
    unsigned i = 0;
    while (i < 16 && a[i] == b[i])
        i++;
    if (i == 16)
        return 128;
    return i * 8 + (unsigned)__builtin_clz((unsigned)(a[i] ^ b[i]) << 24);
}

bool eta_net_is_local6(const struct eta_net *n, const uint8_t ip[16])
{
    for (unsigned i = 0; i < n->n_ports6; i++)
        if (memcmp(ip, n->port6[i].ip, 16) == 0)
            return true;
    return false;
}

bool eta_net_source6(const struct eta_net *n, const uint8_t dest[16], uint8_t src[16])
{
    if (n->n_ports6 == 0)
        return false;
    unsigned pick = 0;
    if (eta_net_is_local6(n, dest)) {
        memcpy(src, dest, 16); /* a local connection: from the address it goes to, as Linux picks */
        return true;
    }
    for (unsigned i = 0; i < n->n_ports6; i++)
        if (in_prefix6(dest, n->port6[i].ip, n->port6[i].prefix)) {
            memcpy(src, n->port6[i].ip, 16); /* on-link */
            return true;
        }
    /* Routed: the longest common prefix with dest, up to the address's own
     * prefix length (RFC 6724 rule 8), the first of equals. */
    unsigned best = 0;
    for (unsigned i = 0; i < n->n_ports6; i++) {
        unsigned len = common_prefix6(dest, n->port6[i].ip);
        if (len > n->port6[i].prefix)
            len = n->port6[i].prefix;
        if (len > best) {
            best = len;
            pick = i;
        }
    }
    memcpy(src, n->port6[pick].ip, 16);
    return true;
}

bool eta_net_routes6(const struct eta_net *n, const uint8_t ip[16])
{
    if (n->n_ports6 == 0)
        return false; /* no IPv6 address to send from */
    for (unsigned i = 0; i < n->n_routes6; i++)
        if (in_prefix6(ip, n->route6[i].dest, n->route6[i].prefix))
            return true;
    return false;
}

enum eta_reason eta_decide_connect6(const struct eta_net *n, const struct sockaddr *addr, socklen_t len)
{
    if (!addr || len < (socklen_t)sizeof(struct sockaddr_in6) || addr->sa_family != AF_INET6)
        return ETA_R_NOT_INET;
    struct sockaddr_in6 in6;
    memcpy(&in6, addr, sizeof in6);
    const uint8_t *ip = in6.sin6_addr.s6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr))
        return ETA_R_LOOPBACK;
    /* Link-local with another scope (or none), multicast: the kernel's. The PPE's own
     * addresses: a local connection inside the engine where it carries them
     * (`self local6`; on a shared port the shim turns a refusal into the
     * kernel's try), else the kernel's (a shared port's kernel holds them:
     * `local`, as IPv4's). */
    if (IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr) && n->link6_ifindex > 0 && n->has_link6 &&
        in6.sin6_scope_id == (uint32_t)n->link6_ifindex) /* the port's link (a shared port's tap) */
        return memcmp(ip, n->link6, 16) == 0 ? ETA_R_LOCAL : ETA_R_NONE;
    if (IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr) || IN6_IS_ADDR_MULTICAST(&in6.sin6_addr) ||
        IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) || IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr))
        return ETA_R_INET6;
    if (eta_net_is_local6(n, ip))
        return n->self_local6 ? ETA_R_NONE : n->self_shared ? ETA_R_LOCAL : ETA_R_INET6;
    for (unsigned i = 0; i < n->n_ports6; i++)
        if (in_prefix6(ip, n->port6[i].ip, n->port6[i].prefix))
            return ETA_R_NONE; /* on-link: what the engine reaches over IPv6 */
    /* Off-link inside a `route6` prefix: the engine sends it to the gateway (issue 31). */
    return eta_net_routes6(n, ip) ? ETA_R_NONE : ETA_R_NOT_ROUTED;
}

bool eta_net_udp_routes(const struct eta_net *n, uint32_t ip)
{
    return eta_net_routes(n, ip) && !(n->self_shared && eta_net_is_local(n, ip));
}

enum eta_reason eta_decide_udp(const struct eta_net *n, const struct sockaddr *addr, socklen_t len)
{
    struct sockaddr_in in;
    if (addr && len >= (socklen_t)sizeof in && addr->sa_family == AF_INET) {
        memcpy(&in, addr, sizeof in);
        /* The PPE's own address on a shared port: the kernel's (it loops
         * the datagram to whichever socket holds the port there: a plain
         * program's, or an eta socket's placeholder, which the shim reads). */
        if (n->self_shared && eta_net_is_local(n, ntohl(in.sin_addr.s_addr)))
            return ETA_R_LOCAL;
    }
    return eta_decide_connect(n, addr, len);
}

enum eta_reason eta_decide_udp6(const struct eta_net *n, const uint8_t ip[16], uint32_t scope)
{
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_scope_id = scope};
    memcpy(in6.sin6_addr.s6_addr, ip, 16);
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
        struct sockaddr_in in = {.sin_family = AF_INET};
        memcpy(&in.sin_addr, ip + 12, 4);
        return eta_decide_udp(n, (const struct sockaddr *)&in, sizeof in);
    }
    /* The PPE's own IPv6 addresses: the kernel's on a shared port (as
     * IPv4's, eta_decide_udp), the engine's where it carries frames to
     * itself (`self local6`: MARS's local loop), else the kernel's. The rest
     * decides as a connect (on a shared port too: the placeholder holds the
     * port in the kernel, one port space, as TCP's: own_address.c). */
    if (eta_net_is_local6(n, ip))
        return n->self_shared ? ETA_R_LOCAL : n->self_local6 ? ETA_R_NONE : ETA_R_INET6;
    return eta_decide_connect6(n, (const struct sockaddr *)&in6, sizeof in6);
}

enum eta_bind_target eta_decide_bind(const struct eta_net *n, const struct sockaddr *addr, socklen_t len,
                                     enum eta_reason *why)
{
    *why = ETA_R_NONE;
    if (!addr || len < (socklen_t)sizeof(struct sockaddr_in) || addr->sa_family != AF_INET) {
        *why = ETA_R_NOT_INET;
        return ETA_BIND_KERNEL;
    }
    struct sockaddr_in in;
    memcpy(&in, addr, sizeof in);
    uint32_t ip = ntohl(in.sin_addr.s_addr);
    if (ip == INADDR_ANY)
        return ETA_BIND_BOTH;
    if (eta_net_is_local(n, ip))
        return ETA_BIND_PPE;
    *why = (ip >> 24) == 127 ? ETA_R_LOOPBACK : ETA_R_KERNEL_ADDR;
    return ETA_BIND_KERNEL;
}

enum eta_bind_target eta_decide_bind6(const struct eta_net *n, const struct sockaddr *addr, socklen_t len,
                                      bool dgram)
{
    struct sockaddr_in6 in6;
    if (!addr || len < (socklen_t)sizeof in6 || addr->sa_family != AF_INET6)
        return ETA_BIND_KERNEL;
    memcpy(&in6, addr, sizeof in6);
    if (in6.sin6_scope_id != 0 || !eta_net_is_local6(n, in6.sin6_addr.s6_addr))
        return ETA_BIND_KERNEL;
    /* Shared: the placeholder binds the address too (one port space), TCP
     * and UDP alike. */
    (void)dgram;
    return ETA_BIND_PPE;
}
