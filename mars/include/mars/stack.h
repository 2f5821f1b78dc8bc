// mars/stack.h: the public interface of one MARS stack instance.
//
// One Stack per engine core, shared with nothing (no locks, no atomics). The
// engine drives it with bursts:
//
//   n = rx_burst(...);            stack.input(frames, n, now);
//   ...commands from applications: stack.open/connect/send/...
//   stack.poll(now);              // timers, deferred ACKs, flushes output
//   k = stack.events(evs, max);   // coalesced per-socket events for the DTI
//
// Errors are returned errno-style: a negative errno value (-EAGAIN, -EINVAL,
// ...), never an exception, never a crash on bad arguments.
//
// Socket data lives in two byte rings per connection (receive and send) whose
// memory the owner supplies through a BufferProvider. In eta the rings are
// the socket data areas inside an application's DTI shared region: MARS
// copies received payload from the frame straight into the receive ring and
// builds segments straight from the send ring, so there is one copy each way
// between the wire and application-visible memory.
#pragma once

#include <mars/packet.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mars {

class CopyEngine;

// IPv4 addresses and ports are in host byte order throughout this API.
struct Endpoint {
    uint32_t ip = 0;
    uint16_t port = 0;
};

struct MacAddr {
    uint8_t b[6] = {};
};

// An IPv6 address, network byte order (as on the wire), and one of a port's
// addresses with its prefix length (issue 31).
struct Ip6Addr {
    uint8_t b[16] = {};
};

// An IPv6 transport address (issue 31): the address in network order, the
// port in host order, as Endpoint's. A v4-mapped address (::ffff:a.b.c.d)
// names the IPv4 address a.b.c.d (bind6/connect6 then act as bind/connect).
struct Endpoint6 {
    Ip6Addr ip;
    uint16_t port = 0;
};

struct Ip6Prefix {
    Ip6Addr addr;
    uint8_t prefix = 64;
};

struct Route {
    uint32_t dest = 0;    // network
    uint8_t prefix = 0;   // 0 with dest 0: the default route
    uint32_t gateway = 0; // 0: on-link
};

// An IPv6 route (issue 31): destinations in dest/prefix go through gateway,
// a neighbour on the port's link (its link-local address, as routers
// advertise themselves, or a global one in one of the port's on-link
// prefixes); gateway :: means the prefix is on-link. prefix 0 with dest ::
// is the default route. The port's own prefixes (StackConfig::addr6) and
// fe80::/64 are always on-link; the longest matching prefix wins.
struct Route6 {
    Ip6Addr dest;
    uint8_t prefix = 0;
    Ip6Addr gateway;
};

enum class CongestionControl : uint8_t { kCubic, kNewReno };

struct TcpConfig {
    uint32_t rcvbuf = 256 * 1024; // receive ring size (power of two); with autotuning, the starting buffer
    // Receive-buffer autotuning (mars/README.md "Receive-buffer autotuning"):
    // above rcvbuf, the buffer a connection offers grows to about twice what
    // the application drained per round trip, up to this many bytes (the
    // ring grows with it through BufferProvider::grow_rx). 0 or <= rcvbuf:
    // no autotuning (the window is the ring, as before). SO_RCVBUF
    // (SockOpt::kRcvBuf) fixes one socket's size, as on Linux.
    uint32_t rcvbuf_max = 0;
    uint32_t sndbuf = 256 * 1024; // send ring size (power of two)
    CongestionControl cc = CongestionControl::kCubic;
    bool sack = true;
    bool timestamps = true;
    bool window_scaling = true;
    bool syncookies = true;       // used only when the SYN queue overflows
    uint32_t syn_backlog = 1024;  // half-open connections per listener, at most
    uint64_t rto_initial_ns = 1'000'000'000;
    uint64_t rto_min_ns = 200'000'000;
    uint64_t rto_max_ns = 60'000'000'000;
    uint64_t delack_ns = 40'000'000;
    uint64_t time_wait_ns = 60'000'000'000; // 2*MSL
    uint64_t keepalive_idle_ns = 7200'000'000'000;
    uint64_t keepalive_intvl_ns = 75'000'000'000;
    uint32_t keepalive_probes = 9;
    uint32_t max_retries = 15; // retransmissions before the connection fails
    uint32_t syn_retries = 6;
    // Receive coalescing (software GRO, mars/README.md "Receive coalescing"):
    // in-order data segments of one connection within one input() burst are
    // taken as one group (one prediction, one ACK decision, one ring update).
    // The bytes and ACKs a peer sees are the same either way.
    bool rx_coalesce = true;
    // Transmit in runs (mars/README.md "Transmit in runs"): when more than
    // one full segment may go, tcp_output() builds them in one pass (one
    // header image, one bulk frame allocation, one transmission-log and
    // timer update); the frames on the wire are the same as one by one.
    bool tx_batch = true;
    // With tx_batch, and where the port offers TCP segmentation offload
    // (kOffloadTxTcpSeg), a run leaves as one large frame the port segments.
    bool tso = true;
    // With tx_batch, and where the port takes payload by reference
    // (kOffloadTxExternal): a run's full segments leave with their payload
    // attached from the send ring in place, not copied into the frame
    // (mars/README.md "Transmit by reference"). Acknowledged bytes go back
    // to the application only once the port has let go of every frame that
    // still points at them.
    bool tx_zerocopy = true;
};

struct StackConfig {
    MacAddr mac;
    uint32_t ip = 0;
    uint8_t prefix = 24;
    uint16_t mtu = 1500;
    // IPv6 (issue 31): the port's configured addresses (global or unique
    // local; each prefix is on-link). The link-local address fe80::/64 with
    // the modified EUI-64 interface id of `mac` (RFC 4291 2.5.1) is always
    // the stack's too and is not listed here. n_addr6 = 0: no configured
    // IPv6 address (the stack still has its link-local one).
    static constexpr int kMaxAddr6 = 8;
    Ip6Prefix addr6[kMaxAddr6] = {};
    int n_addr6 = 0;
    // The hop limit of the TCP segments this stack sends over IPv6 (Linux:
    // net.ipv6.conf.*.hop_limit, 64). 1..255.
    uint8_t hop_limit6 = 64;
    static constexpr int kMaxRoutes = 16;
    Route routes[kMaxRoutes] = {};
    int n_routes = 0;           // the interface's own subnet is always on-link
    // IPv6 routes (issue 31), as `routes` for IPv4: without any, only
    // on-link IPv6 destinations are reachable (ip6_drop_no_route).
    Route6 routes6[kMaxRoutes] = {};
    int n_routes6 = 0;
    uint32_t max_sockets = 65536;
    uint32_t ooo_pool_frames = 4096;  // anonymous buffer pool for out-of-order data
    uint32_t ooo_frames_per_conn = 256; // one connection's share of that pool
    uint32_t arp_pending_frames = 64; // frames waiting for ARP resolution, at most
    uint64_t arp_timeout_ns = 60'000'000'000;
    // A resolution sends arp_probes requests, arp_retrans_ns apart, and fails
    // arp_retrans_ns after the last (Linux: net.ipv4.neigh.*.mcast_solicit 3,
    // retrans_time 1 s: about 3 s). Connects waiting on a failed neighbour
    // fail with EHOSTUNREACH; established connections keep TCP's timers.
    uint32_t arp_probes = 3;
    uint64_t arp_retrans_ns = 1'000'000'000;
    uint64_t isn_secret[2] = {};      // RFC 6528 / SYN cookie key; random in production
    uint16_t ephemeral_lo = 32768, ephemeral_hi = 60999;
    // Multi-engine steering: an active open takes only a local port for which
    // steer(4-tuple) == engine. nullptr: any port.
    uint32_t engine = 0;
    uint32_t (*steer)(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, void *arg) = nullptr;
    // The same for IPv6 active opens (addresses: 16 bytes, network order;
    // ports host order); it gets steer_arg too. nullptr: any port.
    uint32_t (*steer6)(const uint8_t *lip, uint16_t lport, const uint8_t *rip, uint16_t rport, void *arg) = nullptr;
    void *steer_arg = nullptr;
    // Another stack on the same port sees every neighbour solicitation and
    // advertisement too and answers them (in eta: the first engine's, when
    // several share a port). This one learns neighbours from them and
    // resolves its own next hops, and runs DAD's states and timer as the
    // other does (so it uses no address the other may not yet, and sees the
    // same conflicts), but sends no advertisement and no DAD solicitation.
    bool nd_follower = false;
    // Who owns a socket, from its user tag (in eta: the application's uid).
    // SO_REUSEPORT lets sockets share a port only when their owners match,
    // as Linux requires of one effective uid. nullptr: one owner for all.
    uint32_t (*owner_of)(uint64_t user, void *arg) = nullptr;
    void *owner_arg = nullptr;
    // Receive latency hiding (seed 003, MARS; mars/README.md "Strands"):
    // `strands` frames of a burst are in flight in the receive pipeline at
    // once, each yielding where it would wait for memory (1: every frame runs
    // to completion, today's path); `prefetch` issues the software prefetches
    // those yields wait for. strands = 1 with prefetch = false is exactly the
    // run-to-completion path.
    static constexpr uint32_t kMaxStrands = 64;
    uint32_t strands = 1;
    bool prefetch = false;
    // Asynchronous receive copy offload (mars/copy.h): in-order payloads of
    // at least copy_threshold bytes (frames whose checksum the NIC verified)
    // go to this engine; nullptr: the core copies (today's path). The engine
    // belongs to the caller and must outlive the stack.
    CopyEngine *copy_engine = nullptr;
    uint32_t copy_threshold = 256;
    // How many empty completion polls a wait for copies in flight allows
    // before the core takes them over and abandons the engine
    // (CopyEngine::abandon, counted as stalled). 2^20 polls is a few ms; a
    // PPE whose device is a thread on a shared core wants more.
    uint32_t copy_drain_polls = 1u << 20;
    // Sharing the address with another stack (in eta: the host's kernel,
    // through the port's kernel interface; mars/README.md "Sharing the port").
    // false: every frame is the stack's (RST for TCP to a port with no
    // socket, ICMP protocol unreachable, echo answered, the rest dropped).
    // true: what no socket of this stack claims goes to PacketIo::unclaimed()
    // unanswered: TCP for no connection or listener, UDP, other protocols,
    // ICMP echo; ICMP errors and ARP are used here and then handed on too;
    // IPv6, other EtherTypes, multicast frames, IPv4 not to our address,
    // fragments. Malformed frames are dropped either way.
    bool pass_unclaimed = false;
    TcpConfig tcp;
};

using SockId = uint32_t;
constexpr SockId kNoSock = 0xffffffffu;

// Per-socket event bits. Events are coalesced: a socket appears at most once
// per events() drain with the OR of what happened (no event per ACK).
enum SockEventBits : uint32_t {
    kEvConnected = 1u << 0,   // active open completed
    kEvAcceptable = 1u << 1,  // listener has connections waiting
    kEvReadable = 1u << 2,    // new bytes in the receive ring
    kEvWritable = 1u << 3,    // send ring space opened up
    kEvPeerClosed = 1u << 4,  // FIN received: no more data will arrive
    kEvReset = 1u << 5,       // connection reset (error() says why)
    kEvError = 1u << 6,       // connection failed (timeout, unreachable, ...)
    kEvClosed = 1u << 7,      // the stack is done with the socket; its id and buffers are free
};

struct SockEvent {
    SockId sock;
    uint32_t bits;
    uint64_t user; // the tag given at open/accept
};

// Memory for a connection's two rings. Sizes are powers of two.
struct RingMemory {
    uint8_t *rx = nullptr;
    uint32_t rx_size = 0;
    uint8_t *tx = nullptr;
    uint32_t tx_size = 0;
};

// Supplies ring memory when a connection comes to exist (active open, or a
// passive open completing its handshake: data may arrive before anyone
// accepts it) and takes it back when the stack is done with the socket.
class BufferProvider {
  public:
    virtual ~BufferProvider() = default;
    // `user` is the tag of the socket that owns the connection (for a passive
    // open, the listener's tag). Returns false when no memory is available;
    // the connection is then refused (RST) and counted.
    virtual bool provide(uint64_t user, RingMemory *out) = 0;
    virtual void reclaim(uint64_t user, const RingMemory &mem) = 0;
    // Receive-buffer autotuning wants a larger receive ring (at least `want`
    // bytes). Called only while the ring holds no unread byte and no copy is
    // writing into it, so nothing the application has not read moves. On
    // true, *mem holds the connection's rings with rx/rx_size replaced (a
    // larger power of two; the same or another address; tx unchanged); MARS
    // keeps its free-running positions, so the next byte lands at
    // position & (rx_size - 1). reclaim() later gets the grown memory. The
    // default: rings cannot grow (the window stays within the ring).
    virtual bool grow_rx(uint64_t user, RingMemory *mem, uint32_t want)
    {
        (void)user, (void)mem, (void)want;
        return false;
    }
    // Send-buffer autotuning (Linux's tcp_sndbuf_expand): the application
    // keeps the send ring `mem` nearly full and the congestion window would
    // take more; `want` bytes (about twice the window) would keep it busy.
    // The owner of the ring grows it when it can (Stack::tx_grow); the
    // default: nothing.
    virtual void want_tx(uint64_t user, const RingMemory &mem, uint32_t want) { (void)user, (void)mem, (void)want; }
};

// A contiguous piece of a ring: readable bytes (rx) or writable space (tx).
// A ring region wraps at most once, so two spans describe it.
struct RingSpan {
    uint8_t *p[2];
    uint32_t n[2];
    uint32_t total() const { return n[0] + n[1]; }
};

// rx_view()'s and tx_view()'s answers without the pointers: each one's
// return value and, where that is 0, its total (see Stack::ring_levels).
struct RingLevels {
    int rx_rc, tx_rc;
    uint32_t readable, writable;
};

enum class TcpState : uint8_t {
    kClosed, kListen, kSynSent, kSynReceived, kEstablished, kFinWait1, kFinWait2,
    kCloseWait, kClosing, kLastAck, kTimeWait,
};

enum class SockOpt : uint16_t {
    kNoDelay, kCork, kKeepAlive, kKeepIdleSec, kKeepIntvlSec, kKeepCnt, kMaxSeg,
    kUserTimeoutMs, kLingerSec /* -1: off */, kReuseAddr, kReusePort, kTos, kRcvLowat,
    kRcvBuf, // receive buffer bytes; setting it stops autotuning for the socket
    // TCP_NOTSENT_LOWAT: bytes written and not yet sent the socket holds
    // before it stops taking more (UINT32_MAX, the default: no limit, only
    // the ring's size). With a limit, tx_view() and ring_levels() offer only
    // what brings the unsent bytes up to it, none while they are at or above
    // it, and kEvWritable is reported only below it (Linux's
    // tcp_stream_memory_free; tcp(7)); tx_view() still spans the ring's free
    // space (a transport finds a new connection's ring by it), so a caller
    // that writes through it reads ring_levels() first. send() honours it.
    // Inherited by accepted connections.
    kNotsentLowat,
    // IPV6_TCLASS: the traffic class of an IPv6 connection's segments
    // (-1: the default, 0; the ECN bits are TCP's), as kTos is an IPv4
    // connection's TOS: a dual-stack socket keeps both, each for its family.
    // Inherited by accepted connections.
    kTclass,
    // IP_MULTICAST_ALL / IPV6_MULTICAST_ALL (UDP; one flag for both
    // families, as Linux keeps one): 1 (the default) a socket bound to the
    // wildcard or to the group also takes the datagrams of groups it did
    // not join itself, as long as another socket of the stack joined them;
    // 0 only those of its own memberships (and their source filters).
    kMulticastAll,
    // IP_TTL / IPV6_UNICAST_HOPS (UDP): the TTL of the socket's unicast IPv4
    // datagrams and the hop limit of its unicast IPv6 ones, 1..255 (kTtl) or
    // 0..255 (kHopLimit); -1 the default (64, StackConfig::hop_limit6).
    // Datagrams to a group have their own (kMulticastTtl, kMulticastHops).
    kTtl,
    kHopLimit,
    // IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS (UDP): the TTL of the socket's
    // IPv4 datagrams to groups and the hop limit of its IPv6 ones, 0..255;
    // -1 the default, 1 (Linux's). 0 keeps them on the host: not sent to
    // the wire, looped back only (kMulticastLoop).
    kMulticastTtl,
    kMulticastHops,
    // IP_MULTICAST_LOOP / IPV6_MULTICAST_LOOP (UDP; Linux keeps one per
    // family): 1 (the default) a datagram the socket sends to a group is
    // also delivered to the stack's sockets that take that group (as if
    // received, the sender itself included when it is one); 0 it is not.
    kMulticastLoop,
    kMulticastLoop6,
};

struct SockInfo {
    TcpState state;
    Endpoint local, remote; // IPv4 sockets (ipv6 false); for IPv6 ones {0, port}
    // An IPv6 socket (bind6/connect6, or accepted by an IPv6 listener over
    // IPv6): its addresses are local6/remote6 (ports as in local/remote).
    // A dual-stack listener's IPv4 children are IPv4 sockets (ipv6 false).
    bool ipv6;
    Endpoint6 local6, remote6;
    uint32_t rx_readable;   // bytes in the receive ring
    uint32_t tx_space;      // bytes free in the send ring
    uint32_t tx_unacked;    // bytes sent and not yet acknowledged
    int error;              // pending socket error (positive errno), 0 if none
    bool peer_closed;       // FIN received and all data before it is readable
    uint32_t snd_mss, rcv_mss;
    uint32_t cwnd, ssthresh; // bytes
    uint32_t srtt_us, rttvar_us, rto_us;
    uint32_t snd_wnd, rcv_wnd;
    uint8_t snd_wscale, rcv_wscale;
    bool sack_ok, ts_ok;
    uint64_t retransmits, total_retransmits;
    uint64_t bytes_in, bytes_out, segs_in, segs_out;
    uint32_t ooo_frames;    // anonymous pool frames this connection holds
    uint32_t rcv_space;     // receive buffer offered now (autotuned, or SO_RCVBUF)
    uint32_t rx_ring;       // receive ring bytes now
    uint32_t tx_ring;       // send ring bytes now (it grows: autotuning, SO_SNDBUF)
    uint32_t ooo_share;     // out-of-order frames this connection may hold now
};

// Counters of one stack. Plain integers: only the owning core writes them.
struct StackStats {
    uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes;
    uint64_t drop_eth, drop_not_ours, drop_arp, drop_ip_header, drop_ip_csum, drop_ip_ttl,
        drop_ip_fragment, drop_ip_proto, drop_icmp, drop_tcp_header, drop_tcp_csum,
        drop_tcp_no_socket, drop_tcp_bad_state, drop_tcp_paws, drop_tcp_out_of_window,
        drop_tcp_ooo_full, drop_tx_no_buffer, drop_arp_queue_full,
        drop_arp_unresolved; // frames that waited for a neighbour whose resolution failed
    uint64_t arp_requests_in, arp_replies_in, arp_requests_out, arp_replies_out;
    uint64_t arp_failed;        // resolutions that went unanswered (neighbour FAILED)
    uint64_t tcp_connects_unreachable; // connects failed with EHOSTUNREACH: their next hop's resolution failed
    uint64_t icmp_echo_in, icmp_unreach_in, icmp_frag_needed_in, icmp_out;
    uint64_t fastpath_hits, fastpath_misses;
    uint64_t lookup_cache_hits, lookup_cache_misses;
    uint64_t tcp_active_opens, tcp_passive_opens, tcp_established, tcp_resets_in,
        tcp_resets_out, tcp_retransmits, tcp_fast_retransmits, tcp_timeouts,
        tcp_syncookies_sent, tcp_syncookies_ok, tcp_challenge_acks, tcp_ooo_segments;
    // Loss recovery (RFC 8985 RACK-TLP, RFC 2883 D-SACK).
    uint64_t tcp_rack_lost;       // transmissions RACK declared lost
    uint64_t tcp_tlp_probes;      // tail loss probes sent
    uint64_t tcp_tlp_recoveries;  // probes that repaired a loss (congestion response taken)
    uint64_t tcp_dsacks_in;       // ACKs with a D-SACK received
    uint64_t tcp_dsacks_sent;     // ACKs we sent with a D-SACK
    uint64_t conns_open;       // sockets in use now
    uint64_t ooo_frames_used;  // anonymous pool frames in use now
    // Receive pipeline (StackConfig::strands / prefetch).
    uint64_t strands;          // configured strands (1: run to completion)
    uint64_t strand_yields;    // stages a strand ended by yielding to another
    uint64_t prefetches;       // software prefetches issued (receive pipeline; transmit: next connection's header and send-ring line)
    // Asynchronous copies (StackConfig::copy_engine).
    uint64_t copies_offloaded, copy_bytes_offloaded;
    uint64_t copy_fallback_ring_full, copy_fallback_device_gone, copy_fallback_error, copy_fallback_stalled;
    // Payloads the core copied although an engine is set: shorter than
    // copy_threshold, or wrapping around the receive ring's end (one
    // delivery would need two descriptors).
    uint64_t copy_fallback_below_threshold, copy_fallback_ring_wrap;
    // Receive coalescing (TcpConfig::rx_coalesce): groups of two or more
    // segments taken at once, and the segments in them.
    uint64_t rx_coalesce_groups, rx_coalesce_segments;
    // Transmit runs (TcpConfig::tx_batch): runs of two or more full segments
    // built in one pass, the segments in them, and TSO frames handed to the
    // port (each carrying several segments).
    uint64_t tx_runs, tx_run_segments, tx_tso_frames;
    // Transmit by reference (TcpConfig::tx_zerocopy): segments whose payload
    // the port sent from the send ring in place, and their payload bytes.
    uint64_t tx_ref_frames, tx_ref_bytes;
    // Receive-buffer autotuning (TcpConfig::rcvbuf_max): times a connection's
    // receive buffer grew, and times its ring did (BufferProvider::grow_rx).
    uint64_t tcp_rcvbuf_grows, tcp_rx_ring_grows;
    // IPv6 (ip/ipv6.cc, ip/icmp6.cc, ip/nd.cc; issue 31). ip6_in: IPv6
    // packets for us past the header checks; ip6_drop_*: why others went.
    uint64_t ip6_in, ip6_drop_header, ip6_drop_not_ours, ip6_drop_ext, ip6_drop_routing, ip6_drop_fragment,
        ip6_drop_proto, ip6_drop_no_route;
    uint64_t icmp6_in, icmp6_drop, icmp6_echo_in, icmp6_unreach_in, icmp6_ptb_in, icmp6_time_exceeded_in,
        icmp6_param_problem_in, icmp6_out, icmp6_rate_limited;
    // Neighbour discovery: solicitations/advertisements in and out, malformed
    // ND dropped, resolutions FAILED, frames dropped waiting (queue full, or
    // their neighbour FAILED), our addresses found duplicate by DAD.
    uint64_t nd_ns_in, nd_na_in, nd_ns_out, nd_na_out, nd_drop_invalid, nd_failed, nd_drop_queue_full,
        nd_drop_unresolved, nd_dad_duplicates;
    // UDP (mars/src/udp, issue 31): datagrams delivered to sockets (a
    // multicast datagram once per member socket) and sent; dropped because a
    // receive ring was full (Linux's RcvbufErrors), for a port nobody holds
    // (NoPorts), for a bad checksum (InCsumErrors), for a malformed header
    // (a length field shorter than 8 or longer than the IPv4 payload);
    // port unreachables not sent for the rate limit; multicast datagrams
    // taken; IGMP messages received and reports sent. MLD (RFC 3810, IPv6
    // memberships): queries taken, reports of other hosts received (and
    // ignored), queries dropped (malformed, bad checksum, not from a
    // link-local router one hop away), reports sent.
    uint64_t udp_in, udp_out, udp_rcvbuf_errors, udp_no_port, udp_csum_errors, udp_header_errors;
    uint64_t udp_unreach_limited, udp_mcast_in, igmp_in, igmp_out;
    uint64_t mld_query_in, mld_report_in, mld_drop, mld_out;
    // Local connections (issue 29; mars/README.md "Local connections"):
    // frames the stack sent to its own address and took back in at its next
    // poll() (and their bytes, Ethernet header included), connections a
    // listener of the stack accepted from the stack itself (SYN-ACKs that
    // looped), and frames dropped because the local queue was full.
    uint64_t local_frames, local_bytes, local_conns, drop_local_full;
};

// ---- UDP (mars/src/udp, issue 31) ------------------------------------------
// A UDP socket's receive ring holds one record per datagram: this header,
// then the payload, then padding to kUdpRecordAlign. A datagram is never
// split across records nor merged with another, and a record never wraps
// around the ring's end: where the next one does not fit before the end, a
// pad record (kUdpRecPad, no datagram) fills the rest and the datagram starts
// at the ring's start. Positions are free-running; the ring's size is a
// power of two and a multiple of kUdpRecordAlign, so a pad record always
// fits. rx_view() shows whole records, rx_consume() takes whole records.
struct UdpRecord {
    uint32_t size;     // bytes of the ring this record takes (header, payload, padding)
    uint32_t len;      // the datagram's payload bytes (all stored: truncation is the reader's)
    uint32_t src_ip;   // host order
    uint32_t dst_ip;   // host order: our address, or the multicast group (IP_PKTINFO)
    uint16_t src_port, dst_port;
    uint32_t flags;    // UdpRecordFlags; bits 8..15 the IPv4 header's TOS, 16..23 its TTL
    uint64_t ts_ns;    // the stack's clock (the engine's: CLOCK_MONOTONIC) when the datagram arrived
};
static_assert(sizeof(UdpRecord) == 32);
constexpr uint32_t kUdpRecordAlign = 32;
enum UdpRecordFlags : uint32_t {
    kUdpRecPad = 1u << 0,       // no datagram: skip `size` bytes
    kUdpRecMulticast = 1u << 1, // sent to a group (dst_ip)
    kUdpRecIp6 = 1u << 3,       // an IPv6 datagram: a UdpRecord6 follows the header (src_ip, dst_ip 0)
};
constexpr uint32_t kUdpRecTosShift = 8;  // (flags >> 8) & 0xff: the TOS byte (IP_RECVTOS); IPv6: the traffic class
constexpr uint32_t kUdpRecTtlShift = 16; // (flags >> 16) & 0xff: the TTL (IP_RECVTTL); IPv6: the hop limit

// An IPv6 datagram's addresses (kUdpRecIp6), right after its UdpRecord and
// before its payload: the record is header, addresses, payload, padding.
struct UdpRecord6 {
    Ip6Addr src; // the sender
    Ip6Addr dst; // our address (IPV6_PKTINFO)
};
static_assert(sizeof(UdpRecord6) == 32);
// The ring bytes a record of a len-byte datagram takes (flags: its
// UdpRecordFlags; kUdpRecIp6 adds the addresses).
constexpr uint32_t udp_record_size(uint32_t len, uint32_t flags)
{
    const uint32_t head = uint32_t(sizeof(UdpRecord)) + ((flags & kUdpRecIp6) ? uint32_t(sizeof(UdpRecord6)) : 0u);
    return (head + len + kUdpRecordAlign - 1) & ~(kUdpRecordAlign - 1);
}

// A multicast membership (IP_ADD_MEMBERSHIP; with source != 0,
// IP_ADD_SOURCE_MEMBERSHIP: datagrams from that source only). Host order.
struct UdpGroup {
    uint32_t group = 0;
    uint32_t source = 0;
};

// An IPv6 membership (IPV6_JOIN_GROUP, MCAST_JOIN_GROUP; with a source
// that is not ::, MCAST_JOIN_SOURCE_GROUP: datagrams from it only). Network
// order, as Ip6Addr.
struct UdpGroup6 {
    Ip6Addr group;
    Ip6Addr source; // :: any source
};

struct UdpInfo {
    Endpoint local, remote; // remote: the connected peer (0: not connected)
    bool reuse_port;
    uint32_t rx_used;       // ring bytes holding records
    uint32_t rx_datagrams;  // datagrams waiting
    uint32_t rx_size;       // the ring's size
    uint64_t drops;         // datagrams dropped for a full ring (this socket)
    uint32_t groups;        // memberships held
    // An IPv6 socket (bound with bind6, or connected or sent over IPv6 first):
    // its names in IPv6 form in local6/remote6 (an IPv4 one v4-mapped, ::
    // the wildcard; remote6 :: and port 0 when not connected); local and
    // remote still carry the ports (and the IPv4 forms where they are IPv4).
    bool ipv6 = false;
    bool v6only = false;
    Endpoint6 local6, remote6;
    // Asynchronous errors (ICMP or ICMPv6 about a datagram it sent, as
    // Linux's sk_err; kEvError says one came): the latest (an errno, 0 none)
    // and how many came since open (the reader compares counts to report
    // each once).
    int error = 0;
    uint32_t errors = 0;
};

// The UDP sockets of one stack (Stack::udp()). Ids are SockIds below 2^22,
// never a TCP socket's id, and appear in Stack::events() beside TCP's:
// kEvReadable (datagrams arrived), kEvWritable (once, at open: a send never
// waits for ring space), kEvError (an ICMP error about a datagram a
// connected socket sent, as Linux reports it without IP_RECVERR: UdpInfo's
// error), kEvClosed (after close()). Sends build one frame
// from the caller's bytes at once (mars/README.md "UDP": why no send ring);
// the frame leaves with the stack's next transmit burst.
class UdpSockets {
  public:
    static constexpr uint32_t kMaxSockets = 1u << 14;
    static constexpr int kMaxGroups = 20; // per socket (Linux's igmp_max_memberships)
    // A socket; its receive ring comes from the BufferProvider (rx; tx is
    // handed back unused). -EMFILE, -ENOBUFS (no ring memory), -EINVAL (a
    // ring smaller than 2 KiB or not a power of two).
    virtual int64_t open(uint64_t user) = 0;
    // Port 0: an ephemeral port. ip: 0 or the stack's address, or a
    // multicast group (receives only that group). -EADDRINUSE unless every
    // holder of the port and this socket set kReusePort with one owner
    // (StackConfig::owner_of); then datagrams spread over the group by a hash
    // of their 4-tuple, as Linux spreads them.
    virtual int bind(SockId s, Endpoint local) = 0;
    // SockOpt::kReusePort, kReuseAddr (sockets that all set it share a
    // port, every owner; set after bind too, as Linux: it decides whether a
    // later bind of the port conflicts; a unicast datagram goes to one of them,
    // a multicast one to each member), kTos (IPv4 sends), kTclass (IPv6
    // sends: IPV6_TCLASS, -1 the default 0) and kMulticastAll (0 or 1, any
    // time; both families); others -ENOPROTOOPT.
    virtual int set_option(SockId s, SockOpt opt, int64_t value) = 0;
    // The default destination; from then on only datagrams from it are
    // received (Linux's connected UDP socket). Binds an ephemeral port when
    // unbound. remote {0, 0}: dissolves the association (AF_UNSPEC).
    virtual int connect(SockId s, Endpoint remote) = 0;
    // One datagram of len bytes to dst (nullptr: the connected peer). Returns
    // len, or -EDESTADDRREQ (unconnected, no dst), -EMSGSIZE (more than
    // mtu - 28: never fragmented), -ENETUNREACH (no route), -ENOBUFS (no
    // frame), -EINVAL (port 0). A unicast frame waits for ARP as TCP's do;
    // to a group it goes to the group's MAC with TTL 1.
    // tos 0..255: this datagram's TOS (IPv4) or traffic class (IPv6)
    // instead of the socket's kTos/kTclass (a control message's); -1: the
    // socket's. (send_to6 the same.)
    virtual int64_t send_to(SockId s, const Endpoint *dst, const void *data, size_t len, int tos = -1) = 0;
    // The oldest datagram: up to len bytes copied to data, its header to
    // *rec (may be nullptr). Returns the datagram's real length (larger than
    // len: MSG_TRUNC, the rest is gone), or -EAGAIN. peek: it stays. An IPv6
    // record (kUdpRecIp6): the payload after its addresses is copied; the
    // addresses (UdpRecord6) are read through rx_view before the call.
    virtual int64_t recv_from(SockId s, void *data, size_t len, UdpRecord *rec, bool peek) = 0;
    // The records in the ring (zero copy), and consuming n bytes of them
    // (whole records: -EINVAL otherwise).
    virtual int rx_view(SockId s, RingSpan *out) const = 0;
    virtual int rx_consume(SockId s, uint32_t n) = 0;
    // ---- IPv6 (issue 31): the same socket, an IPv6 one (Linux's AF_INET6
    // UDP socket). A v4-mapped address (::ffff:a.b.c.d) names the IPv4
    // address and acts as the IPv4 call, the socket staying an IPv6 one.
    // bind6: :: (v6only false: IPv4 datagrams too, one socket for both
    // families, conflicting with IPv4 holders of the port as Linux's
    // dual-stack socket does), or a usable address of ours, or a multicast
    // group (ff00::/8: IPv6 only, datagrams to that group only, as bind()
    // to an IPv4 group; sends from it use the source a wildcard would),
    // -EADDRNOTAVAIL otherwise; port 0 an ephemeral one; -EADDRINUSE as bind().
    virtual int bind6(SockId s, const Endpoint6 &local, bool v6only) = 0;
    // The default peer over IPv6 (binds :: dual-stack first when unbound);
    // :: with port 0 dissolves it. -EINVAL: port 0 to a real address.
    virtual int connect6(SockId s, const Endpoint6 &remote) = 0;
    // One datagram to dst over IPv6 (nullptr: the connected peer): len, or
    // -EDESTADDRREQ, -EMSGSIZE (more than the path MTU - 48: never
    // fragmented), -ENETUNREACH (off-link: no IPv6 routes; an IPv4 one from
    // a v6only socket), -ENOBUFS, -EINVAL (port 0, ::). Binds :: dual-stack
    // first when unbound. The frame waits for neighbour discovery as TCP's.
    virtual int64_t send_to6(SockId s, const Endpoint6 *dst, const void *data, size_t len, int tos = -1) = 0;
    // IP_ADD_MEMBERSHIP / IP_DROP_MEMBERSHIP (and the source variants).
    // -EINVAL: not a multicast group; -EADDRINUSE: joined already;
    // -ENOBUFS: kMaxGroups held; -EADDRNOTAVAIL: leave without a join.
    virtual int join(SockId s, UdpGroup g) = 0;
    virtual int leave(SockId s, UdpGroup g) = 0;
    // IPV6_JOIN_GROUP / IPV6_LEAVE_GROUP (and MCAST_(JOIN|LEAVE)_SOURCE_GROUP
    // over IPv6): the socket's membership of an IPv6 group, MLDv2 (RFC 3810)
    // reports from the stack. Errors as join()/leave(); -EINVAL: not a
    // multicast address (ff00::/8). A socket holds up to kMaxGroups IPv6
    // memberships beside its kMaxGroups IPv4 ones (UdpInfo::groups counts
    // both). A multicast datagram goes to every socket of its port bound to
    // :: or to the group (not connected elsewhere) whose memberships of the
    // group let its source in, or that holds none of the group and keeps
    // SockOpt::kMulticastAll (Linux's ip6_mc_sf_allow).
    virtual int join6(SockId s, const UdpGroup6 &g) = 0;
    virtual int leave6(SockId s, const UdpGroup6 &g) = 0;
    // Frees the socket at once (memberships left, ring reclaimed); kEvClosed follows.
    virtual int close(SockId s) = 0;
    virtual int info(SockId s, UdpInfo *out) const = 0;
    // Calls fn for every open socket with its id, what info() gives and its
    // user tag, in index order (eta-stat's table; the control path).
    virtual void for_each_socket(void (*fn)(SockId, const UdpInfo &, uint64_t user, void *arg), void *arg) const = 0;

  protected:
    ~UdpSockets() = default;
};

class Stack {
  public:
    // Returns nullptr and a message in *error when the config is unusable.
    static std::unique_ptr<Stack> create(const StackConfig &config, PacketIo &io,
                                         BufferProvider &buffers, std::string *error);
    virtual ~Stack() = default;

    // Returns the stack to the state create() left it in, with the same
    // config (as last changed by set_receive_pipeline() / set_copy_engine();
    // copies in flight are waited for), keeping the memory of its tables: every socket is gone without
    // a segment sent (its rings handed back through BufferProvider::reclaim),
    // every held frame is released, and timers, the ARP cache, counters,
    // ephemeral ports and the clock start over. Afterwards it behaves exactly
    // as a newly created stack. Not for the packet path: it is for harnesses
    // that run one stack through many independent inputs (the fuzz target).
    virtual void reset() = 0;

    // ---- packet path -------------------------------------------------
    // Consumes a burst of received frames. Frames are released to the
    // PacketIo (or kept in the anonymous pool while out of order). The
    // array is the stack's during the call: receive coalescing may reorder
    // its entries (never two of one connection).
    virtual void input(PacketRef *frames, uint16_t n, uint64_t now_ns) = 0;
    // Runs due timers and sends what is pending. Call once per engine loop.
    virtual void poll(uint64_t now_ns) = 0;
    // The earliest time poll() has work to do (UINT64_MAX: none): the engine
    // may sleep until then when idle.
    virtual uint64_t next_deadline_ns() const = 0;
    // Drains coalesced socket events. Returns how many were written.
    virtual uint16_t events(SockEvent *out, uint16_t max) = 0;
    // Sends a gratuitous ARP for our address.
    virtual void announce(uint64_t now_ns) = 0;
    // IPv6 addresses of ours still tentative (RFC 4862 5.4: duplicate
    // address detection, a second from announce()): a source no datagram or
    // connection may use yet; the link-local address counts too. 0 once
    // each is preferred (or found duplicate, never used), and always when
    // sharing (the kernel does DAD for what it shares).
    virtual uint32_t addrs6_tentative() const { return 0; }

    // ---- sockets -----------------------------------------------------
    // Returns a new socket id, or -errno (-EMFILE when max_sockets are open).
    virtual int64_t open(uint64_t user) = 0;
    virtual int bind(SockId s, Endpoint local) = 0;
    virtual int listen(SockId s, int backlog) = 0;
    // IPv6 (issue 31). bind6: an address of ours (any state but duplicate;
    // -EADDRNOTAVAIL otherwise) or :: (every address of ours; with
    // v6only false also every IPv4 one: one listener for both families, as
    // Linux's dual-stack socket with IPV6_V6ONLY off). A v4-mapped address
    // is bind() of its IPv4 address. -EADDRINUSE as bind(). listen() and
    // accept() are the same calls for either family; info() tells which.
    virtual int bind6(SockId s, const Endpoint6 &local, bool v6only) = 0;
    // Active open over IPv6 (on-link destinations: link-local, or within one
    // of our prefixes; -ENETUNREACH otherwise). The source is the bound
    // address, else NeighborDiscovery's choice (link-local for link-local
    // destinations, else a preferred global one: -EADDRNOTAVAIL when there
    // is none). The SYN waits for neighbour discovery as IPv4's waits for
    // ARP; a neighbour that fails to resolve fails the connect with
    // EHOSTUNREACH (kEvError). A v4-mapped address is connect() over IPv4.
    virtual int connect6(SockId s, const Endpoint6 &remote, uint64_t now_ns) = 0;
    // Takes one established connection from a listener: its id, or -EAGAIN.
    virtual int64_t accept(SockId listener, uint64_t user) = 0;
    // Starts an active open; completion is reported with kEvConnected or
    // kEvError/kEvReset. Returns 0 or -errno (-EINPROGRESS is not used).
    virtual int connect(SockId s, Endpoint remote, uint64_t now_ns) = 0;
    virtual int shutdown(SockId s, bool rd, bool wr) = 0;
    // Graceful close (FIN after pending data); the id stays valid until kEvClosed.
    virtual int close(SockId s) = 0;
    // Abortive close: RST to the peer, resources freed at once.
    virtual int abort(SockId s) = 0;
    virtual int set_option(SockId s, SockOpt opt, int64_t value) = 0;
    virtual int get_option(SockId s, SockOpt opt, int64_t *value) const = 0;
    virtual int info(SockId s, SockInfo *out) const = 0;
    virtual void set_user(SockId s, uint64_t user) = 0;

    // ---- data: zero-copy views of the rings ---------------------------
    // Readable bytes in the receive ring, in order.
    virtual int rx_view(SockId s, RingSpan *out) const = 0;
    // The application consumed n bytes from the front: frees ring space and
    // may open the advertised window.
    virtual int rx_consume(SockId s, uint32_t n) = 0;
    // Free space at the tail of the send ring.
    virtual int tx_view(SockId s, RingSpan *out) const = 0;
    // n bytes were written at the front of tx_view(): queue them for sending.
    // more=true behaves as MSG_MORE (hold a partial segment).
    virtual int tx_commit(SockId s, uint32_t n, bool more) = 0;
    // The send ring grew in place to `size` bytes (a larger power of two,
    // the same memory): positions run on, the byte at position p is now at
    // p & (size - 1) (the ring's owner copied every byte not yet acknowledged
    // there). -EBUSY (nothing changed) while frames the port reads point into
    // the ring (transmit by reference), -EINVAL for a size that is not a
    // larger power of two.
    virtual int tx_grow(SockId s, uint32_t size)
    {
        (void)s, (void)size;
        return -EOPNOTSUPP;
    }
    // rx_view() and tx_view() of one socket in one lookup, their totals only:
    // what the DTI engine reads of every socket that changed in a poll.
    virtual void ring_levels(SockId s, RingLevels *out) const = 0;

    // Copying conveniences on top of the views (tests, simple callers).
    virtual int64_t send(SockId s, const void *data, size_t len) = 0;
    virtual int64_t recv(SockId s, void *data, size_t len) = 0;

    virtual const StackStats &stats() const = 0;
    // The stack's UDP sockets (issue 31).
    virtual UdpSockets &udp() = 0;
    // Changes StackConfig::strands / prefetch between bursts (ablation,
    // tuning). -EINVAL when strands is not 1..kMaxStrands.
    virtual int set_receive_pipeline(uint32_t strands, bool prefetch) = 0;
    // Changes StackConfig::copy_engine / copy_threshold between bursts (every
    // copy in flight on the old engine lands first). nullptr: core copies.
    virtual void set_copy_engine(CopyEngine *engine, uint32_t threshold) = 0;
    // Visits every socket (for eta-stat's connection table).
    virtual void for_each_socket(void (*fn)(SockId, const SockInfo &, uint64_t user, void *arg),
                                 void *arg) const = 0;
};

} // namespace mars
