/* UDP sockets on the PPE: the data path of an accelerated AF_INET or AF_INET6
 * SOCK_DGRAM socket (udp_sock.c decides which ones: preload/README.md "UDP"). Receive takes
 * the oldest datagram in place from the socket's receive ring (libdti's
 * dti_dgram_borrow: MARS's record, no copy in the engine) and copies it into
 * the program's buffers with the recoverable copy; send writes one record
 * into the send ring and waits for the engine's SEND_DGRAMS answer (its
 * EMSGSIZE, ENETUNREACH... are the call's). Blocking, MSG_DONTWAIT,
 * MSG_PEEK, MSG_TRUNC (in and out), SO_RCVTIMEO, as Linux's UDP. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "config.h"
#include "io.h"
#include "port_ifindex.h"
#include "real.h"
#include "signals.h"
#include "sock6.h"
#include "udp.h"
#include "udp6.h"
#include "udp6_addr.h"
#include "udp_cmsg.h"
#include "udp_gro.h"

bool eta_udp_kind(int domain, int type, int protocol)
{
    return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_DGRAM &&
           (protocol == 0 || protocol == IPPROTO_UDP);
}

/* One reader and one writer of a socket's rings at a time: a second thread
 * waits its turn (a receive or a send of one datagram: bounded). */
static void take_turn(_Atomic uint32_t *busy)
{
    uint32_t free_ = 0;
    for (unsigned spins = 0; !atomic_compare_exchange_weak(busy, &free_, 1); spins++) {
        free_ = 0;
        if (spins > 64)
            sched_yield();
    }
}

static void end_turn(_Atomic uint32_t *busy) { atomic_store_explicit(busy, 0, memory_order_release); }

/* What a look at the receive ring took since position `from` (records and
 * the pad records passed over, in ring bytes) goes into rx_taken: plus the
 * readable ring bytes, a total each arrival raises and no receive lowers,
 * which an edge-triggered epoll compares with its last report (epoll.c
 * edge_marks). Counted in datagrams, a small datagram after a large one
 * left the total lower than at the last report: never reported, its
 * server asleep for good (the local loop's UDP stall, preload/README.md). */
static void ring_taken(dti_ctx_t *c, struct eta_sock *s, uint32_t from)
{
    atomic_fetch_add_explicit(&s->rx_taken, dti_dgram_taken(c, s->h) - from, memory_order_relaxed);
}

static bool dgram_readable(void *arg)
{
    struct eta_sock *s = arg;
    dti_ctx_t *c = eta_ctx();
    return !c || (eta_sock_events(c, s) & (POLLIN | POLLERR));
}

/* An AF_INET6 socket's sender: its IPv6 address (a link-local one with the
 * scope of the PPE port's interface, as Linux's ipv6_iface_scope_id), an
 * IPv4 one v4-mapped; sockaddr_in6, 28 bytes. */
static void put_addr6(const struct dti_dgram *h, const struct dti_dgram6 *a6, struct sockaddr *from,
                      socklen_t *fromlen)
{
    uint8_t ip[16];
    if (h->flags & DTI_DGRAM_IP6)
        memcpy(ip, a6->src, 16);
    else
        eta_udp6_map(h->src_ip, ip);
    const uint32_t scope = (h->flags & DTI_DGRAM_IP6) && ip[0] == 0xfe ? (uint32_t)eta_ifindex6_of(a6->dst) : 0;
    struct sockaddr_in6 in6 = eta_udp6_name(ip, h->src_port, scope);
    socklen_t cap = *fromlen;
    socklen_t n = cap < (socklen_t)sizeof in6 ? cap : (socklen_t)sizeof in6;
    (void)uput(from, &in6, (size_t)n);
    const socklen_t full = sizeof in6;
    (void)uput(fromlen, &full, sizeof full);
}

static void put_addr(const struct eta_sock *s, const struct dti_dgram *h, const struct dti_dgram6 *a6,
                     struct sockaddr *from, socklen_t *fromlen)
{
    if (!from || !fromlen)
        return;
    if (s->v6) {
        put_addr6(h, a6, from, fromlen);
        return;
    }
    struct dti_addr a = {h->src_ip, h->src_port};
    socklen_t cap = *fromlen;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(a.port), .sin_addr = {htonl(a.ip)}};
    socklen_t n = cap < (socklen_t)sizeof in ? cap : (socklen_t)sizeof in;
    (void)uput(from, &in, (size_t)n);
    const socklen_t full = sizeof in;
    (void)uput(fromlen, &full, sizeof full);
}

/* ---- ancillary data --------------------------------------------------- */

bool eta_udp_kernel_option(int level, int name, bool hybrid)
{
    if (level == IPPROTO_IP)
        return name == IP_MTU_DISCOVER || name == IP_FREEBIND || name == IP_BIND_ADDRESS_NO_PORT;
    if (level == IPPROTO_IPV6) /* (IP_MULTICAST_IF: udp_mcast.c, whatever the socket) */
        return name == IPV6_MTU_DISCOVER || name == IPV6_DONTFRAG || name == IPV6_FREEBIND ||
               (hybrid && name == IPV6_MULTICAST_IF);
    return hybrid && level == SOL_SOCKET && name == SO_BROADCAST;
}

bool eta_udp_cmsg_option(int level, int name)
{
    if (level == SOL_SOCKET)
        return name == SO_TIMESTAMP_OLD || name == SO_TIMESTAMPNS_OLD || name == SO_TIMESTAMP_NEW ||
               name == SO_TIMESTAMPNS_NEW;
    if (level == IPPROTO_IPV6)
        return name == IPV6_RECVPKTINFO || name == IPV6_RECVHOPLIMIT || name == IPV6_RECVTCLASS;
    /* UDP_SEGMENT (read back for sends) and UDP_GRO (read back for
     * receives: udp_gro.c): the kernel keeps them. */
    if (level == SOL_UDP)
        return name == UDP_SEGMENT || name == UDP_GRO;
    return level == IPPROTO_IP && (name == IP_PKTINFO || name == IP_RECVTOS || name == IP_RECVTTL);
}

static bool kernel_flag(int fd, int level, int name)
{
    int v = 0;
    socklen_t l = sizeof v;
    return real_getsockopt(fd, level, name, &v, &l) == 0 && v;
}

void eta_udp_cmsg_refresh(int fd, struct eta_sock *s)
{
    int saved = errno;
    uint32_t w = 0;
    if (kernel_flag(fd, IPPROTO_IP, IP_PKTINFO))
        w |= ETA_RX_PKTINFO;
    if (kernel_flag(fd, IPPROTO_IP, IP_RECVTOS))
        w |= ETA_RX_TOS;
    if (kernel_flag(fd, IPPROTO_IP, IP_RECVTTL))
        w |= ETA_RX_TTL;
    if (s->v6 && kernel_flag(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO))
        w |= ETA_RX_PKTINFO6;
    if (s->v6 && kernel_flag(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT))
        w |= ETA_RX_HOPLIMIT6;
    if (s->v6 && kernel_flag(fd, IPPROTO_IPV6, IPV6_RECVTCLASS))
        w |= ETA_RX_TCLASS6;
    if (kernel_flag(fd, SOL_UDP, UDP_GRO))
        w |= ETA_RX_GRO;
    /* The kernel's flags answer one of the four at most (sock_set_timestamp). */
    if (kernel_flag(fd, SOL_SOCKET, SO_TIMESTAMPNS_OLD))
        w |= ETA_RX_TSNS;
    else if (kernel_flag(fd, SOL_SOCKET, SO_TIMESTAMPNS_NEW))
        w |= ETA_RX_TSNS | ETA_RX_TS_NEW;
    else if (kernel_flag(fd, SOL_SOCKET, SO_TIMESTAMP_OLD))
        w |= ETA_RX_TS;
    else if (kernel_flag(fd, SOL_SOCKET, SO_TIMESTAMP_NEW))
        w |= ETA_RX_TS | ETA_RX_TS_NEW;
    int gso = 0;
    socklen_t gl = sizeof gso;
    if (real_getsockopt(fd, SOL_UDP, UDP_SEGMENT, &gso, &gl) != 0 || gso < 0 || gso > 0xffff)
        gso = 0;
    atomic_store_explicit(&s->udp_gso, (uint16_t)gso, memory_order_relaxed);
    errno = saved;
    if (w & (ETA_RX_PKTINFO | ETA_RX_PKTINFO6) || s->v6)
        eta_ifindex_lookup(); /* an AF_INET6 socket's link-local senders need it too */
    atomic_store(&s->rx_cmsg, w);
}

static uint64_t clock_of(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t); /* the vDSO: no system call */
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The control messages of datagram h into the program's control buffer. */
static void put_cmsgs(struct eta_sock *s, unsigned want, const struct dti_dgram *h, const struct dti_dgram6 *a6,
                      void *control, size_t *controllen, int *mf, uint16_t gro_size)
{
    struct eta_udp_rx_meta m = {.dst_ip = h->dst_ip, .tos = DTI_DGRAM_TOS(h->flags), .ttl = DTI_DGRAM_TTL(h->flags),
                                .ip6 = (h->flags & DTI_DGRAM_IP6) != 0, .gro_size = gro_size};
    if (m.ip6) {
        memcpy(m.dst6, a6->dst, 16);
        want &= ~(unsigned)(ETA_RX_PKTINFO | ETA_RX_TTL | ETA_RX_TOS); /* IP_* options: IPv4 datagrams' */
        if (want & ETA_RX_PKTINFO6)
            m.ifindex = eta_ifindex6_of(a6->dst);
    } else if (!s->v6) {
        want &= ~(unsigned)(ETA_RX_PKTINFO6 | ETA_RX_HOPLIMIT6 | ETA_RX_TCLASS6);
    }
    if (want & (ETA_RX_TS | ETA_RX_TSNS)) {
        /* The engine stamps CLOCK_MONOTONIC's scale; the kernel's stamp is
         * CLOCK_REALTIME: the same instant on that clock. */
        const uint64_t real = clock_of(CLOCK_REALTIME), mono = clock_of(CLOCK_MONOTONIC);
        m.real_ns = real - (mono > h->ts_ns ? mono - h->ts_ns : 0);
    }
    if (!m.ip6 && (want & (ETA_RX_PKTINFO | ETA_RX_PKTINFO6))) {
        /* ipi_spec_dst: the local address a reply would come from (the
         * destination; for a group, the PPE's address on its port). */
        m.spec_dst = (h->flags & DTI_DGRAM_MULTICAST) ? (s->local.ip && !(s->local.ip >> 28 == 0xe)
                                                            ? s->local.ip : eta_net_source(&eta_net, h->src_ip))
                                                      : h->dst_ip;
        m.ifindex = eta_ifindex_of(m.spec_dst);
    }
    uint8_t buf[ETA_UDP_CMSG_MAX];
    const size_t cap = control ? (*controllen < sizeof buf ? *controllen : sizeof buf) : 0;
    size_t n = eta_udp_put_cmsgs(buf, cap, want, &m, mf);
    if (n && !uput(control, buf, n))
        n = 0; /* a buffer the program cannot write: no messages, as put_cmsg's fault */
    *controllen = n;
}

/* The kernel half of a hybrid socket (bound to INADDR_ANY: udp_sock.c): one
 * datagram if one waits, straight into the program's buffers (the kernel
 * writes the address, the control messages and the flags, as without eta).
 * -1 with EAGAIN when none waits. */
static ssize_t kernel_half_recv(int fd, const struct iovec *iov, int iovcnt, int flags, struct sockaddr *from,
                                socklen_t *fromlen, int *msg_flags, void *control, size_t *controllen)
{
    socklen_t nl = 0;
    if (from && fromlen && eta_ucopy(&nl, fromlen, sizeof nl) != 0)
        return fail(EFAULT);
    struct msghdr mh = {.msg_name = from && fromlen ? from : NULL,
                        .msg_namelen = nl,
                        .msg_iov = (struct iovec *)(uintptr_t)iov,
                        .msg_iovlen = iovcnt > 0 ? (size_t)iovcnt : 0,
                        .msg_control = controllen ? control : NULL,
                        .msg_controllen = controllen ? *controllen : 0};
    ssize_t r = real_recvmsg(fd, &mh, flags | MSG_DONTWAIT);
    if (r < 0)
        return r;
    if (from && fromlen && !uput(fromlen, &mh.msg_namelen, sizeof mh.msg_namelen))
        return fail(EFAULT);
    if (controllen)
        *controllen = mh.msg_controllen;
    if (msg_flags)
        *msg_flags = mh.msg_flags;
    return r;
}

/* Which half of a hybrid a receive looks at. The kernel half costs a system
 * call (a non-blocking recvmsg) and the PPE's none, so the kernel half is
 * looked at when the PPE's has no datagram, and besides only when there is
 * reason to: it is believed to hold one (its last look found one, or a wait
 * woke for its descriptor), then the halves take turns (neither starves
 * while both are busy); otherwise once every ETA_UDP_KERNEL_EVERY datagrams
 * of the PPE's (a datagram a program without poll leaves there waits behind
 * at most that many). A busy PPE half with an idle kernel one so pays one
 * system call per ETA_UDP_KERNEL_EVERY datagrams (the shim's counters
 * udp_kernel_looks and udp_kernel_empty count them: eta/preload_stats.h). */
#define ETA_UDP_KERNEL_EVERY 16

static bool kernel_first(struct eta_sock *s)
{
    unsigned turn = atomic_load_explicit(&s->udp_turn, memory_order_relaxed);
    return turn >= ETA_UDP_KERNEL_EVERY || (turn && atomic_load_explicit(&s->udp_kready, memory_order_relaxed));
}

/* One PPE datagram taken: the kernel half's turn comes nearer. */
static void ppe_taken(struct eta_sock *s)
{
    unsigned turn = atomic_load_explicit(&s->udp_turn, memory_order_relaxed);
    if (turn < ETA_UDP_KERNEL_EVERY)
        atomic_store_explicit(&s->udp_turn, (uint8_t)(turn + 1), memory_order_relaxed);
}

/* A look at the kernel half (kernel_half_recv), remembered and counted. */
static ssize_t kernel_look(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                           struct sockaddr *from, socklen_t *fromlen, int *msg_flags, void *control,
                           size_t *controllen)
{
    ETA_STAT_ADD(udp_kernel_looks, 1);
    atomic_store_explicit(&s->udp_turn, 0, memory_order_relaxed);
    ssize_t r = kernel_half_recv(fd, iov, iovcnt, flags, from, fromlen, msg_flags, control, controllen);
    atomic_store_explicit(&s->udp_kready, r >= 0, memory_order_relaxed); /* one came: more may wait */
    if (r < 0 && errno == EAGAIN)
        ETA_STAT_ADD(udp_kernel_empty, 1);
    return r;
}

/* What kernel_only_recv() answers when the PPE came back meanwhile and the
 * socket's PPE half with it (relisten.c): the receive starts over. */
#define UDP_PPE_BACK (-2)

/* A hybrid whose PPE half is gone (the engine died): the kernel half alone,
 * blocking as the program asked (the kernel socket itself stays
 * non-blocking: sockobj.h). A blocking one sleeps at most until the next try
 * to re-attach (eta_reattach_wait_ms()), so that its PPE half comes back
 * with the PPE (UDP_PPE_BACK). */
static ssize_t kernel_only_recv(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                                struct sockaddr *from, socklen_t *fromlen, int *msg_flags, void *control,
                                size_t *controllen)
{
    const bool nonblock = atomic_load_explicit(&s->nonblock, memory_order_relaxed) || (flags & MSG_DONTWAIT);
    const uint64_t deadline = deadline_after(s->rcvtimeo_ms);
    for (;;) {
        ssize_t r = kernel_half_recv(fd, iov, iovcnt, flags, from, fromlen, msg_flags, control, controllen);
        if (r >= 0 || errno != EAGAIN || nonblock)
            return r;
        int ms = -1;
        if (deadline) {
            const uint64_t now = eta_now_ns();
            if (now >= deadline)
                return fail(EAGAIN);
            ms = (int)((deadline - now + 999999) / 1000000);
        }
        const int cap = eta_reattach_wait_ms();
        const bool capped = cap >= 0 && (ms < 0 || cap < ms);
        struct pollfd p = {fd, POLLIN, 0};
        int w = real_poll(&p, 1, capped ? cap : ms);
        if (w < 0)
            return -1;
        if (w == 0 && capped && eta_reattach_try() && !eta_hybrid_kernel_only(s))
            return UDP_PPE_BACK;
    }
}

ssize_t eta_udp_recv(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                     struct sockaddr *from, socklen_t *fromlen, int *msg_flags, void *control, size_t *controllen)
{
    struct eta_sig_mark since = eta_sig_mark_now();
    const bool hybrid = s->hybrid && fd >= 0;
    if (eta_sock_orphaned(s) || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed)) {
        if (!hybrid)
            return fail(ECONNREFUSED);
        ssize_t r = kernel_only_recv(fd, s, iov, iovcnt, flags, from, fromlen, msg_flags, control, controllen);
        if (r != UDP_PPE_BACK)
            return r;
    }
    if (flags & MSG_OOB)
        return fail(EOPNOTSUPP);
    if (iovcnt > 0 && iovcnt <= IOV_MAX && iov_fault(iov, iovcnt))
        return fail(EFAULT);
    bool bad;
    size_t want = iov_total(iov, iovcnt, &bad);
    if (bad)
        return fail(EINVAL);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return fail(ECONNREFUSED);
    const bool nonblock = atomic_load_explicit(&s->nonblock, memory_order_relaxed) || (flags & MSG_DONTWAIT);
    const size_t room = controllen ? *controllen : 0;
    uint64_t deadline = 0;
    for (;;) {
        /* A hybrid: the kernel half first when its turn came (kernel_first). */
        bool kernel_tried = false;
        if (hybrid && kernel_first(s)) {
            ssize_t r = kernel_look(fd, s, iov, iovcnt, flags, from, fromlen, msg_flags, control, controllen);
            if (r >= 0 || errno != EAGAIN)
                return r;
            kernel_tried = true;
        }
        /* An ICMP error about a datagram it sent (a connected socket's
         * ECONNREFUSED...): answered first and once, as Linux's recv. */
        const int perr = dti_sock_take_error(c, s->h);
        if (perr < 0)
            return fail(eta_errno_from_dti(perr));
        take_turn(&s->dgram_rx_busy);
        const uint32_t pos = dti_dgram_taken(c, s->h);
        struct dti_dgram h;
        struct dti_dgram6 a6;
        const void *payload = NULL;
        ssize_t n = s->v6 ? dti_dgram_borrow6(c, s->h, &h, &a6, &payload) : dti_dgram_borrow(c, s->h, &h, &payload);
        if (n >= 0) {
            size_t take = want < h.len ? want : h.len;
            if (take && !eta_ucopy_iov(iov, iovcnt, 0, (void *)(uintptr_t)payload, take, true)) {
                ring_taken(c, s, pos);
                end_turn(&s->dgram_rx_busy);
                return fail(EFAULT); /* the datagram stays */
            }
            put_addr(s, &h, &a6, from, fromlen);
            const unsigned wantc = atomic_load_explicit(&s->rx_cmsg, memory_order_relaxed);
            unsigned segs = 1;
            size_t more = 0;
            if (!(flags & MSG_PEEK)) {
                (void)dti_dgram_consume(c, s->h);
                if ((wantc & ETA_RX_GRO) && h.len && want > h.len) /* UDP_GRO: the flow's next ones too */
                    more = eta_udp_gro_more(c, s, &h, &a6, iov, iovcnt, want, &segs);
            }
            ring_taken(c, s, pos);
            end_turn(&s->dgram_rx_busy);
            int mf = h.len > want ? MSG_TRUNC : 0;
            if (controllen) {
                *controllen = room;
                if (wantc)
                    put_cmsgs(s, wantc, &h, &a6, control, controllen, &mf, segs > 1 ? (uint16_t)h.len : 0);
                else
                    *controllen = 0;
            }
            if (msg_flags)
                *msg_flags = mf;
            if (hybrid && !(flags & MSG_PEEK))
                ppe_taken(s);
            /* MSG_TRUNC asked: the datagram's real length, as Linux's UDP. */
            return (flags & MSG_TRUNC) && segs == 1 ? (ssize_t)h.len : (ssize_t)(take + more);
        }
        ring_taken(c, s, pos);
        end_turn(&s->dgram_rx_busy);
        /* (A blocking receive on a placeholder read for host-local senders
         * alone (udp_kself) leaves that look to its wait, which watches the
         * placeholder: looked at once the wait woke for it, udp_kready.) */
        if (hybrid && !kernel_tried && n == -EAGAIN &&
            (!s->udp_kself || nonblock || atomic_load_explicit(&s->udp_kready, memory_order_relaxed))) {
            ssize_t r = kernel_look(fd, s, iov, iovcnt, flags, from, fromlen, msg_flags, control, controllen);
            if (r >= 0 || errno != EAGAIN)
                return r;
        }
        if (n == -EAGAIN && atomic_load_explicit(&s->shut_rd, memory_order_relaxed))
            return 0; /* shutdown(SHUT_RD): nothing waiting answers 0, as Linux's UDP */
        if (n != -EAGAIN)
            return fail(n == -EIO ? EIO : eta_errno_from_dti((int)n));
        if (nonblock)
            return fail(EAGAIN);
        if (!deadline && s->rcvtimeo_ms >= 0)
            deadline = deadline_after(s->rcvtimeo_ms);
        eta_watch(c, s, DTI_POLLIN);
        int w = eta_wait(c, dgram_readable, s, deadline, hybrid ? fd | (s->udp_kself ? ETA_WAIT_KFD_RARE : 0) : -1,
                         &since);
        if (w == -ETIMEDOUT)
            return fail(EAGAIN);
        if (w == -EINTR)
            return fail(EINTR);
        if (w == -EPIPE && !hybrid)
            return fail(ECONNREFUSED);
        if (w == -EPIPE) {
            ssize_t r = kernel_only_recv(fd, s, iov, iovcnt, flags, from, fromlen, msg_flags, control, controllen);
            if (r != UDP_PPE_BACK || !(c = eta_ctx()))
                return r == UDP_PPE_BACK ? fail(ECONNREFUSED) : r;
            continue;
        }
        if (hybrid && !dgram_readable(s))
            atomic_store_explicit(&s->udp_kready, true, memory_order_relaxed); /* woken by the kernel half */
    }
}

/* UDP_SEGMENT (Linux's UDP GSO, as QUIC servers send): one buffer of len
 * bytes as datagrams of gso bytes each, the last one shorter, in one batch
 * of records (dti_dgram_sendmmsg: a round trip per ring's worth). At most
 * UDP_MAX_SEGMENTS segments (EINVAL, udp_send_skb; 128 on current kernels (this
 * machine's 6.18), 64 on older ones such as Debian 12's 6.1: a program
 * written for either fits); a segment larger than the
 * path is the engine's EMSGSIZE (it never fragments). All segments sent:
 * len; some: the bytes of those; none: the engine's error. */
#define ETA_UDP_MAX_SEGMENTS 128u
static ssize_t send_segments(dti_ctx_t *c, struct eta_sock *s, const struct dti_dgram_msg *m, size_t len, size_t gso)
{
    const size_t nseg = (len + gso - 1) / gso;
    if (nseg > ETA_UDP_MAX_SEGMENTS)
        return fail(EINVAL);
    /* Each segment's pieces of the caller's iovec: a boundary splits at most
     * one piece, so n + nseg pieces in all. */
    struct dti_iov seg[m->iovcnt + nseg];
    struct dti_dgram_msg msgs[nseg];
    unsigned pi = 0, iv = 0;
    size_t ioff = 0;
    for (size_t k = 0; k < nseg; k++) {
        size_t want = len - k * gso < gso ? len - k * gso : gso;
        msgs[k] = *m;
        msgs[k].iov = &seg[pi];
        unsigned cnt = 0;
        while (want) {
            while (ioff == m->iov[iv].len) /* empty pieces and the ends of used ones */
                iv++, ioff = 0;
            size_t take = m->iov[iv].len - ioff < want ? m->iov[iv].len - ioff : want;
            seg[pi++] = (struct dti_iov){(char *)m->iov[iv].base + ioff, take};
            cnt++;
            ioff += take;
            want -= take;
        }
        msgs[k].iovcnt = cnt;
    }
    size_t sent = 0, done = 0;
    int rc = 0;
    take_turn(&s->dgram_tx_busy);
    while (done < nseg) {
        rc = dti_dgram_sendmmsg(c, s->h, msgs + done, (unsigned)(nseg - done));
        if (rc <= 0)
            break;
        for (unsigned k = 0; k < (unsigned)rc; k++)
            sent += gso < len - (done + k) * gso ? gso : len - (done + k) * gso;
        done += (size_t)rc;
    }
    end_turn(&s->dgram_tx_busy);
    if (sent) {
        atomic_fetch_add_explicit(&s->tx_committed, sent, memory_order_relaxed);
        return (ssize_t)sent;
    }
    return fail(rc == 0 ? EIO : eta_errno_from_dti(rc));
}

/* eta_udp_prepare() and eta_udp_commit() (udp.h), inlined into the plain
 * send (eta_udp_send) so that it costs what it did as one function. */
static inline __attribute__((always_inline)) int prepare(int fd, struct eta_sock *s, const struct iovec *iov,
                                                         int iovcnt, int flags, const struct sockaddr *to,
                                                         socklen_t tolen, const void *control, size_t controllen,
                                                         dti_ctx_t **cp, struct dti_dgram_msg *m,
                                                         struct eta_udp_dst *out, struct dti_iov *pieces)
{
    /* A hybrid (bound to INADDR_ANY): through the PPE to destinations it
     * routes, through the kernel half to the rest (and all of it once the
     * engine is gone); the kernel's answers are the call's. */
    if (s->hybrid && fd >= 0 && to) {
        struct sockaddr_in in;
        /* (a group: the PPE's half when IP_MULTICAST_IF named the PPE's port) */
        bool kernel = eta_hybrid_kernel_only(s) ||
                      (s->v6 ? !eta_udp6_ppe_routes(s, to, tolen) /* udp6.c */
                             : tolen < (socklen_t)sizeof in || eta_ucopy(&in, to, sizeof in) != 0 ||
                                   in.sin_family != AF_INET ||
                                   !(eta_net_udp_routes(&eta_net, ntohl(in.sin_addr.s_addr)) ||
                                     (s->mc_if4 && IN_MULTICAST(ntohl(in.sin_addr.s_addr)))));
        if (kernel)
            return ETA_UDP_KERNEL;
    }
    /* An AF_INET6 socket's destination (IPv6, or IPv4 v4-mapped), read as
     * Linux's udpv6_sendmsg reads it (udp6.c); its control messages by it. */
    bool to4 = !s->v6;
    if (s->v6) {
        int d = eta_udp6_send_dst(s, to, tolen, &out->dst6, &to4);
        if (d < 0)
            return -1;
        if (d == 1) {
            to = NULL; /* the connected peer (AF_UNSPEC too): its family reads the control messages */
            dti_ctx_t *c6 = controllen ? eta_ctx() : NULL;
            struct dti_addr6 peer;
            uint32_t ip4;
            to4 = s->local.ip != 0 || (c6 && dti_getpeername6(c6, s->h, &peer) >= 0 && eta_udp6_unmap(peer.ip, &ip4));
        }
    }
    int tos = -1; /* IP_TOS / IPV6_TCLASS of this datagram (its control messages), -1 the socket's */
    int gso = -1; /* UDP_SEGMENT of this send (a control message), -1 the socket's */
    if (controllen && eta_udp_send_cmsgs(s, control, controllen, to4, &tos, &gso) != 0)
        return -1;
    if (gso < 0)
        gso = atomic_load_explicit(&s->udp_gso, memory_order_relaxed);
    /* A send never waits for ring space (the engine frees it before it answers). */
    if (eta_sock_orphaned(s) || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return (int)fail(ECONNREFUSED);
    if (iovcnt > 0 && iovcnt <= IOV_MAX && iov_fault(iov, iovcnt))
        return (int)fail(EFAULT);
    bool bad;
    size_t len = iov_total(iov, iovcnt, &bad);
    if (bad)
        return (int)fail(EINVAL);
    if (atomic_load_explicit(&s->shut_wr, memory_order_relaxed))
        return (int)fail_pipe(flags); /* shutdown(SHUT_WR): EPIPE (and SIGPIPE), as Linux's UDP */
    if (to && !s->v6) {
        if (tolen < sizeof(struct sockaddr_in) || !uptr_readable(to, sizeof(struct sockaddr_in)))
            return (int)fail(tolen < sizeof(struct sockaddr_in) ? EINVAL : EFAULT);
        if (to->sa_family != AF_INET)
            return (int)fail(EAFNOSUPPORT);
        out->dst = to_dti(to);
    }
    if (len > (to4 ? DTI_DGRAM_MAX : DTI_DGRAM6_MAX))
        return (int)fail(EMSGSIZE);
    if (!(*cp = eta_ctx()))
        return (int)fail(ENETDOWN);
    const unsigned n = iovcnt > 0 ? (unsigned)iovcnt : 0; /* at most IOV_MAX (iov_total) */
    for (unsigned i = 0; i < n; i++)
        pieces[i] = (struct dti_iov){iov[i].iov_base, iov[i].iov_len};
    /* An AF_INET6 socket bound to a v4-mapped address is an IPv4 socket in
     * the engine (sock.c eta_bind_ppe4: dti_bind), which takes IPv4 records
     * only: its destinations go as IPv4 ones. */
    const bool as4 = s->v6 && to && to4 && s->local.ip;
    uint32_t ip4 = 0;
    if (as4 && eta_udp6_unmap(out->dst6.ip, &ip4))
        out->dst = (struct dti_addr){ip4, out->dst6.port};
    *m = (struct dti_dgram_msg){pieces, n, to && (!s->v6 || as4) ? &out->dst : NULL,
                                to && s->v6 && !as4 ? &out->dst6 : NULL, (uint8_t)(tos >= 0 ? tos : 0), tos >= 0};
    out->len = len;
    if (gso > 0 && len > (size_t)gso) {
        out->gso = (size_t)gso;
        return ETA_UDP_SEGMENTS;
    }
    return ETA_UDP_READY;
}

static inline __attribute__((always_inline)) int commit(dti_ctx_t *c, struct eta_sock *s,
                                                        const struct dti_dgram_msg *m, const struct eta_udp_dst *d,
                                                        unsigned n)
{
    take_turn(&s->dgram_tx_busy);
    int rc = dti_dgram_sendmmsg(c, s->h, m, n);
    unsigned done = rc > 0 ? (unsigned)rc : 0;
    /* Fewer than offered: the ring was full (the rest go next round), or
     * the engine refused the next one (it goes again first: its error). */
    while (rc > 0 && done < n) {
        rc = dti_dgram_sendmmsg(c, s->h, m + done, n - done);
        done += rc > 0 ? (unsigned)rc : 0;
    }
    end_turn(&s->dgram_tx_busy);
    if (!done)
        return (int)fail(rc == 0 ? EIO : eta_errno_from_dti(rc));
    size_t bytes = d[0].len;
    for (unsigned i = 1; i < done && i < n; i++)
        bytes += d[i].len;
    atomic_fetch_add_explicit(&s->tx_committed, bytes, memory_order_relaxed);
    return (int)done;
}

int eta_udp_prepare(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                    const struct sockaddr *to, socklen_t tolen, const void *control, size_t controllen,
                    dti_ctx_t **cp, struct dti_dgram_msg *m, struct eta_udp_dst *d, struct dti_iov *pieces)
{
    return prepare(fd, s, iov, iovcnt, flags, to, tolen, control, controllen, cp, m, d, pieces);
}

int eta_udp_commit(dti_ctx_t *c, struct eta_sock *s, const struct dti_dgram_msg *m, const struct eta_udp_dst *d,
                   unsigned n)
{
    return commit(c, s, m, d, n);
}

static inline __attribute__((always_inline)) ssize_t send_one(int fd, struct eta_sock *s, const struct iovec *iov,
                                                              int iovcnt, int flags, const struct sockaddr *to,
                                                              socklen_t tolen, const void *control,
                                                              size_t controllen, struct dti_iov *pieces)
{
    dti_ctx_t *c = NULL;
    struct dti_dgram_msg m;
    struct eta_udp_dst d;
    int p = prepare(fd, s, iov, iovcnt, flags, to, tolen, control, controllen, &c, &m, &d, pieces);
    if (p < 0)
        return -1;
    if (p == ETA_UDP_KERNEL) {
        struct msghdr mh = {.msg_name = (void *)(uintptr_t)to,
                            .msg_namelen = tolen,
                            .msg_iov = (struct iovec *)(uintptr_t)iov,
                            .msg_iovlen = iovcnt > 0 ? (size_t)iovcnt : 0,
                            .msg_control = (void *)(uintptr_t)control,
                            .msg_controllen = controllen};
        return real_sendmsg(fd, &mh, flags);
    }
    if (p == ETA_UDP_SEGMENTS)
        return send_segments(c, s, &m, d.len, d.gso);
    return commit(c, s, &m, &d, 1) > 0 ? (ssize_t)d.len : -1;
}

ssize_t eta_udp_send(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                     const struct sockaddr *to, socklen_t tolen, const void *control, size_t controllen)
{
    /* The datagram's pieces: a fixed array for the usual few, else one as
     * long as the iovec (IOV_MAX at most: more is prepare()'s EINVAL). */
    if (ETA_LIKELY(iovcnt <= 8)) {
        struct dti_iov few[8];
        return send_one(fd, s, iov, iovcnt, flags, to, tolen, control, controllen, few);
    }
    struct dti_iov many[iovcnt <= IOV_MAX ? iovcnt : 1];
    return send_one(fd, s, iov, iovcnt, flags, to, tolen, control, controllen, many);
}

/* IPV6_PKTINFO of a send to an IPv6 destination: as IP_PKTINFO's below,
 * the socket's own IPv6 address (bound there, or on [::] with the PPE's one
 * port6 address) or ::; the interface the shim reports for it or 0. */
static int send_pktinfo6(const struct eta_sock *s, const uint8_t spec6[16], int ifindex)
{
    static const uint8_t any[16];
    uint8_t own[16];
    const bool bound6 = eta_local6_ip(s, own);
    if (memcmp(spec6, any, 16) != 0 && !(bound6 && memcmp(spec6, own, 16) == 0)) {
        bool ppe = false;
        for (unsigned i = 0; i < eta_net.n_ports6; i++)
            ppe |= memcmp(spec6, eta_net.port6[i].ip, 16) == 0;
        if (!ppe)
            return fail(EINVAL); /* not an address of the host's: Linux's EINVAL */
        if (bound6 || eta_net.n_ports6 != 1)
            return fail(EOPNOTSUPP); /* another PPE address: the engine does not choose sources */
    }
    const bool named = memcmp(spec6, any, 16) != 0;
    if (ifindex && ifindex != eta_ifindex6_of(named ? spec6 : (bound6 ? own : eta_net.port6[0].ip)))
        return fail(ENODEV);
    return 0;
}

int eta_udp_send_cmsgs(struct eta_sock *s, const void *control, size_t controllen, bool to4, int *tos, int *gso)
{
    *tos = -1;
    *gso = -1;
    if (!controllen)
        return 0;
    uint8_t buf[1024];
    if (controllen > sizeof buf)
        return fail(ENOBUFS); /* more than the PPE reads: Linux's answer above optmem_max */
    if (!control || eta_ucopy(buf, control, controllen) != 0)
        return fail(EFAULT);
    uint32_t spec = 0;
    int ifindex = 0;
    if (s->v6 && !to4) {
        uint8_t spec6[16];
        int e6 = eta_udp_read_send_cmsgs6(buf, controllen, spec6, &ifindex, tos);
        if (!e6)
            *gso = eta_udp_cmsg_gso(buf, controllen);
        return e6 ? fail(e6) : send_pktinfo6(s, spec6, ifindex);
    }
    int e = s->v6 ? eta_udp_read_send_cmsgs_mapped(buf, controllen, &spec, &ifindex, tos)
                  : eta_udp_read_send_cmsgs(buf, controllen, &spec, &ifindex, tos);
    if (e)
        return fail(e);
    *gso = eta_udp_cmsg_gso(buf, controllen);
    /* IP_PKTINFO: the source address. The socket's own address (or "any")
     * is what it sends from anyway; another PPE address would need the
     * engine to choose it (not carried: EOPNOTSUPP, never a silent other
     * source); an address that is not ours is Linux's EINVAL. */
    if (spec && spec != s->local.ip) {
        if (!eta_net_is_local(&eta_net, spec))
            return fail(EINVAL);
        if (s->local.ip || eta_net.n_ports != 1) /* unbound, one PPE address: the one it sends from */
            return fail(EOPNOTSUPP);
    }
    if (ifindex && ifindex != eta_ifindex_of(spec ? spec : s->local.ip))
        return fail(ENODEV); /* not the PPE port's interface (Linux: ENODEV for one that does not exist) */
    return 0;
}

int eta_udp_next_len(int fd, struct eta_sock *s)
{
    dti_ctx_t *c = eta_hybrid_kernel_only(s) ? NULL : eta_ctx();
    ssize_t n = -EAGAIN;
    struct dti_dgram h;
    if (c) {
        take_turn(&s->dgram_rx_busy);
        const void *payload = NULL;
        struct dti_dgram6 a6;
        const uint32_t pos = dti_dgram_taken(c, s->h);
        n = s->v6 ? dti_dgram_borrow6(c, s->h, &h, &a6, &payload) : dti_dgram_borrow(c, s->h, &h, &payload);
        ring_taken(c, s, pos); /* pad records passed over */
        end_turn(&s->dgram_rx_busy);
    }
    if (n >= 0)
        return (int)h.len;
    int k = 0; /* a hybrid: the kernel half's next datagram */
    if (s->hybrid && real_ioctl(fd, FIONREAD, &k) != 0)
        k = 0;
    return k;
}
