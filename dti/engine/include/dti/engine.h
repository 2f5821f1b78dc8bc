// dti/engine.h: the engine side of the DTI, the half eta-ppe links.
//
// dti::engine::Server is the DTI server one of eta-ppe's engine threads runs
// (that thread is ppe::Engine; libdti is the client half). One Server per
// engine thread; it is single-threaded (no locks, no atomics
// except on the shared region) and owns the attachments the PPE gives it.
// It never depends on DPDK or on MARS: it drives a dti::engine::Transport,
// a small interface whose two families of calls mirror mars::Stack's socket
// calls (stream sockets) and mars::UdpSockets' (datagram sockets); the PPE
// adapts its mars::Stack to it (forwarding calls one to one) and forwards MARS's
// BufferProvider hook to Server::provide()/reclaim().
//
// Loop the PPE runs on the engine thread:
//
//   for (;;) {
//     transport input/timers ...           (mars: input(), poll())
//     server.poll();                       // commands -> transport, transport events -> apps
//     for (int fd : server.wakeups()) ...  // eventfd writes: one io_uring submission
//     server.clear_wakeups();
//     if idle: if (server.prepare_sleep()) { wait on doorbell_fds()/control fds/timers;
//                                             server.end_sleep(); }
//   }
//   control fd of an attachment readable or hung up -> server.control(id)
//   new connection on the PPE's UNIX socket, readable -> server.attach(fd, &why)
//
// Everything an application can write is treated as hostile: commands are
// copied once into private memory and validated; indices, handles, offsets
// and lengths are checked; app pointers are never followed; a corrupt region
// breaks only its own attachment (DTI_ENGINE_BROKEN, then detach).
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace dti::engine {

// ---- the transport the engine drives (mirrors mars::Stack, mars::UdpSockets) --

using SockId = uint32_t;
constexpr SockId kNoSock = 0xffffffffu;

struct Endpoint { // host byte order
    uint32_t ip = 0;
    uint16_t port = 0;
};

// An IPv6 endpoint (DTI_OP_BIND6/CONNECT6): the address in network byte
// order, the port in host order (mars::Endpoint6's layout, by contract).
struct Endpoint6 {
    uint8_t ip[16] = {};
    uint16_t port = 0;
};

struct RingMemory {
    uint8_t *rx = nullptr;
    uint32_t rx_size = 0;
    uint8_t *tx = nullptr;
    uint32_t tx_size = 0;
};

struct RingSpan {
    uint8_t *p[2] = {nullptr, nullptr};
    uint32_t n[2] = {0, 0};
    uint32_t total() const { return n[0] + n[1]; }
};

// What rx_view() and tx_view() would say of a socket, less the pointers: each
// view's return value and, where that is 0, its total (bytes readable, room
// to write). The engine reads both for every socket that changed in a poll.
struct RingLevels {
    int rx_rc = -1, tx_rc = -1;
    uint32_t readable = 0, writable = 0;
};

// Same values as mars::SockEventBits.
enum EventBits : uint32_t {
    kEvConnected = 1u << 0,
    kEvAcceptable = 1u << 1,
    kEvReadable = 1u << 2,
    kEvWritable = 1u << 3,
    kEvPeerClosed = 1u << 4,
    kEvReset = 1u << 5,
    kEvError = 1u << 6,
    kEvClosed = 1u << 7,
};

struct TransportEvent {
    SockId sock;
    uint32_t bits;
    uint64_t user;
};

// Same order as mars::SockOpt.
enum class Option : uint16_t {
    kNoDelay, kCork, kKeepAlive, kKeepIdleSec, kKeepIntvlSec, kKeepCnt, kMaxSeg,
    kUserTimeoutMs, kLingerSec, kReuseAddr, kReusePort, kTos, kRcvLowat,
    kRcvBuf, // the receive buffer (SO_RCVBUF set: the transport stops autotuning it)
    kNotsentLowat, // TCP_NOTSENT_LOWAT: ring_levels().writable stops at the mark (mars::SockOpt)
    kTclass,       // IPV6_TCLASS: an IPv6 connection's traffic class (kTos: an IPv4 one's TOS)
    kMulticastAll, // IP_MULTICAST_ALL: a datagram socket's (mars::SockOpt::kMulticastAll)
    kTtl,          // IP_TTL of a datagram socket's unicast IPv4 datagrams
    kHopLimit,     // IPV6_UNICAST_HOPS of its unicast IPv6 ones
    kMulticastTtl,   // IP_MULTICAST_TTL of its IPv4 datagrams to groups
    kMulticastHops,  // IPV6_MULTICAST_HOPS of its IPv6 ones
    kMulticastLoop,  // IP_MULTICAST_LOOP: its group datagrams also to the host's members
    kMulticastLoop6, // IPV6_MULTICAST_LOOP
};

struct SockInfo {
    Endpoint local, remote;
    int error = 0;          // positive errno, 0 if none (a datagram socket: the latest asynchronous one)
    bool peer_closed = false;
    // An IPv6 socket (either kind): its addresses are local6/remote6 (an
    // IPv4 one v4-mapped; local/remote then carry only the ports that
    // matter). Transports without IPv6 leave it false.
    bool ipv6 = false;
    Endpoint6 local6, remote6;
    // A datagram socket: its asynchronous errors (an ICMP error about a
    // datagram it sent, reported with kEvError) since it was opened; error
    // is the latest. The engine publishes both (dti_abi.h err_seq).
    uint32_t errors = 0;
};

// The calls come in two families, one per kind of socket. The engine knows
// each socket's kind from the moment it makes it (DTI_SOCK_STREAM: open(),
// accept(); DTI_SOCK_DGRAM: dgram_open()) and calls only that kind's family
// for its id; events() is the one call they share. So a transport never has
// to find out which kind an id is, and the stream calls, which carry every
// byte of a connection, carry no test for a datagram socket.
//
// Contract (what the engine relies on; mars::Stack's documented behaviour):
//  - errors are negative errno values;
//  - ring memory is obtained through the engine's provide() when a socket
//    comes to exist (a connection: active open at connect(), passive open
//    before accept; a datagram socket: at dgram_open()) and returned through
//    reclaim() before the id is freed;
//  - events() coalesces: a socket appears at most once per drain;
//  - the stream family's rx_view() points p[0] at the read position even when
//    nothing is readable, and tx_view() at the write position (so ring
//    offsets can be derived);
//  - close() is followed, eventually, by an event with kEvClosed for that id;
//    abort() frees the id at once (no kEvClosed); dgram_close() frees the
//    datagram socket at once, and kEvClosed follows;
//  - tx_commit() refuses (an error, nothing queued) n larger than tx_view()'s
//    total, and wherever tx_view() fails: the engine does not ask tx_view()
//    before committing what an application claims to have written.
class Transport {
  public:
    virtual ~Transport() = default;

    // Both kinds: what happened to which socket since the last call.
    virtual uint16_t events(TransportEvent *out, uint16_t max) = 0;

    // ---- stream sockets (TCP: mars::Stack) --------------------------------
    // Called only with ids that open() or accept() returned.
    virtual int64_t open(uint64_t user) = 0;
    virtual int bind(SockId s, Endpoint local) = 0;
    virtual int listen(SockId s, int backlog) = 0;
    virtual int64_t accept(SockId listener, uint64_t user) = 0;
    virtual int connect(SockId s, Endpoint remote) = 0;
    // IPv6 (mars::Stack::bind6/connect6): an address of the port's or ::
    // (v6only false: also every IPv4 address, one listener for both
    // families); connect6 as connect(). A v4-mapped address acts as the
    // IPv4 call. A transport without IPv6 keeps these defaults.
    virtual int bind6(SockId s, const Endpoint6 &local, bool v6only)
    {
        (void)s, (void)local, (void)v6only;
        return -EAFNOSUPPORT;
    }
    virtual int connect6(SockId s, const Endpoint6 &remote)
    {
        (void)s, (void)remote;
        return -EAFNOSUPPORT;
    }
    virtual int shutdown(SockId s, bool rd, bool wr) = 0;
    virtual int close(SockId s) = 0;
    virtual int abort(SockId s) = 0;
    virtual int set_option(SockId s, Option opt, int64_t value) = 0;
    virtual int get_option(SockId s, Option opt, int64_t *value) = 0;
    virtual int info(SockId s, SockInfo *out) = 0;
    virtual void set_user(SockId s, uint64_t user) = 0;
    virtual int rx_view(SockId s, RingSpan *out) = 0;
    virtual int rx_consume(SockId s, uint32_t n) = 0;
    virtual int tx_view(SockId s, RingSpan *out) = 0;
    virtual int tx_commit(SockId s, uint32_t n, bool more) = 0;
    // rx_view() and tx_view() in one call. This default makes both calls; a
    // transport where each call looks the socket up should answer it with
    // one lookup (mars::Stack::ring_levels).
    // The send ring of s is now `size` bytes (a larger power of two; the
    // memory is the same, grown in place), the engine's answer to the
    // application's DTI_OP_TX_GROW: positions run on, offsets become
    // position & (size - 1) (every byte the transport may still read was
    // copied there by the application). Refused (an error, nothing changed)
    // while frames the port still reads point into the ring. This default:
    // no growth.
    virtual int tx_grow(SockId s, uint32_t size)
    {
        (void)s, (void)size;
        return -EOPNOTSUPP;
    }
    virtual void ring_levels(SockId s, RingLevels *out)
    {
        RingSpan v;
        out->rx_rc = rx_view(s, &v);
        out->readable = out->rx_rc == 0 ? v.total() : 0;
        out->tx_rc = tx_view(s, &v);
        out->writable = out->tx_rc == 0 ? v.total() : 0;
    }

    // ---- datagram sockets (UDP over IPv4: mars::UdpSockets) ---------------
    // Called only with ids that dgram_open() returned. A transport without
    // datagram sockets keeps these defaults: dgram_open() answers
    // -EPROTONOSUPPORT, so no other call of the family is ever made. The
    // receive ring is a ring of records (the dti_dgram layout) that the
    // application reads in place; the send ring is the engine's alone:
    // dgram_send() is given each datagram, so there is no tx_view/tx_commit.
    virtual int64_t dgram_open(uint64_t user)
    {
        (void)user;
        return -EPROTONOSUPPORT;
    }
    // Port 0: an ephemeral one.
    virtual int dgram_bind(SockId s, Endpoint local)
    {
        (void)s, (void)local;
        return -EPROTONOSUPPORT;
    }
    // The default peer; {0, 0} dissolves it.
    virtual int dgram_connect(SockId s, Endpoint remote)
    {
        (void)s, (void)remote;
        return -EPROTONOSUPPORT;
    }
    // kReuseAddr, kReusePort, kTos (IPv4 sends), kTclass (IPv6 sends); others -ENOPROTOOPT.
    virtual int dgram_set_option(SockId s, Option opt, int64_t value)
    {
        (void)s, (void)opt, (void)value;
        return -ENOPROTOOPT;
    }
    virtual int dgram_get_option(SockId s, Option opt, int64_t *value)
    {
        (void)s, (void)opt, (void)value;
        return -ENOPROTOOPT;
    }
    // Local and remote (the default peer; 0: none); error and peer_closed 0.
    virtual int dgram_info(SockId s, SockInfo *out)
    {
        (void)s, (void)out;
        return -EPROTONOSUPPORT;
    }
    // The records waiting (p[0] at the first even when there are none), and
    // consuming n bytes of them: whole records only, else an error and
    // nothing consumed.
    virtual int dgram_rx_view(SockId s, RingSpan *out)
    {
        (void)s, (void)out;
        return -EPROTONOSUPPORT;
    }
    virtual int dgram_rx_consume(SockId s, uint32_t n)
    {
        (void)s, (void)n;
        return -EPROTONOSUPPORT;
    }
    // One datagram (dst nullptr: the connected peer), copied at once: len or
    // a negative errno (mars::UdpSockets::send_to). tos 0..255: this
    // datagram's TOS (IPv4) or traffic class (IPv6) instead of the socket's
    // (a control message's); -1: the socket's.
    virtual int64_t dgram_send(SockId s, const Endpoint *dst, const void *data, size_t len, int tos)
    {
        (void)s, (void)dst, (void)data, (void)len, (void)tos;
        return -EPROTONOSUPPORT;
    }
    // IPv6 (mars::UdpSockets::bind6, connect6, send_to6): the socket
    // becomes an IPv6 one (dgram_info: ipv6, local6/remote6). A transport
    // without IPv6 keeps these defaults.
    virtual int dgram_bind6(SockId s, const Endpoint6 &local, bool v6only)
    {
        (void)s, (void)local, (void)v6only;
        return -EAFNOSUPPORT;
    }
    virtual int dgram_connect6(SockId s, const Endpoint6 &remote)
    {
        (void)s, (void)remote;
        return -EAFNOSUPPORT;
    }
    virtual int64_t dgram_send6(SockId s, const Endpoint6 *dst, const void *data, size_t len, int tos)
    {
        (void)s, (void)dst, (void)data, (void)len, (void)tos;
        return -EAFNOSUPPORT;
    }
    // IP_ADD_MEMBERSHIP (join) / IP_DROP_MEMBERSHIP; source 0: any source.
    virtual int dgram_membership(SockId s, uint32_t group, uint32_t source, bool join)
    {
        (void)s, (void)group, (void)source, (void)join;
        return -EPROTONOSUPPORT;
    }
    // IPV6_JOIN_GROUP (join) / IPV6_LEAVE_GROUP of the group's 16 bytes
    // (network order); source :: any source, else the source-specific call.
    virtual int dgram_membership6(SockId s, const uint8_t group[16], const uint8_t source[16], bool join)
    {
        (void)s, (void)group, (void)source, (void)join;
        return -EAFNOSUPPORT;
    }
    // Frees the socket at once (memberships left, ring reclaimed); kEvClosed
    // follows. A datagram socket has nothing to finish: close and abort are
    // this one call.
    virtual int dgram_close(SockId s)
    {
        (void)s;
        return -EPROTONOSUPPORT;
    }
};

// ---- configuration and counters -----------------------------------------

struct Limits {
    uint32_t max_attachments = 256;     // per Server
    uint32_t max_contexts = 64;         // queue pairs per attachment (<= 64)
    uint32_t max_sockets = 1024;        // per attachment
    uint32_t cmdq_entries = 256;        // power of two
    uint32_t evq_entries = 512;         // power of two, >= 2 * cmdq_entries
    uint32_t rx_ring_size = 64 * 1024;  // power of two: each socket's receive ring to start with
    // Receive rings grow in place (Server::grow_rx, asked by the transport's
    // autotuning) up to this power of two, which each socket slot reserves in
    // the region; 0 or <= rx_ring_size: rings keep rx_ring_size. Reserved
    // pages the ring never reached cost no memory (the region is a memfd):
    // max_region_bytes bounds what rings use now, not what slots reserve.
    uint32_t rx_ring_max = 0;
    uint32_t tx_ring_size = 64 * 1024;  // power of two: each socket's send ring without SO_SNDBUF
    // Each slot reserves this power of two for its send ring: a socket whose
    // DTI_SO_SNDBUF was set before its rings came gets a ring holding that
    // size (up to this); 0 or <= tx_ring_size: every ring is tx_ring_size.
    // A ring larger than tx_ring_size is charged against max_region_bytes.
    uint32_t tx_ring_max = 0;
    uint64_t pool_size = 1 << 20;       // region buffer pool bytes
    // Memory per attachment: the region with every ring at its starting size
    // must fit, and a ring grows only while the region's rings (their sizes
    // now) and the rest still fit. The region's address space may be larger.
    uint64_t max_region_bytes = 1ull << 30;
    std::vector<uint32_t> allowed_uids; // empty: anyone who can reach the socket
    uint32_t commands_per_poll = 64;    // per context per poll(), for fairness
    // Which engine of the PPE this DTI engine is, and how many there are:
    // told to each application in WELCOME (it attaches to every engine).
    uint32_t engine_index = 0;
    uint32_t n_engines = 1;
    // The address applications' sockets use (host order), told in the region
    // header: libdti computes flow owners with it (a bound socket connecting).
    uint32_t app_ip = 0;
    // The IPv6 address a socket bound to :: connects from (to a destination
    // that is not link-local; network order, all 0: none), likewise.
    uint8_t app_ip6[16] = {};
    // ... and to a link-local destination: the port's link-local address.
    uint8_t app_ll6[16] = {};
    // Posted receives into the process's memory (DTI_OP_RECV_POST): false
    // answers every post -EOPNOTSUPP (counted as a fallback; libdti then
    // copies from the ring), as when the engine may not write into a process.
    bool posted_receive = true;
};

struct Stats {
    uint64_t commands = 0, completions = 0, events_posted = 0, events_dropped = 0;
    uint64_t doorbells_seen = 0, wakeups = 0, polls = 0;
    uint64_t rejected_commands = 0; // failed validation (counted, answered -EINVAL)
    uint64_t broken_regions = 0, attaches = 0, refusals = 0, detaches = 0;
    uint64_t forks = 0; // members that joined a group at fork
    // Payload digests (DTI_OP_DIGEST): bytes run through CRC32C per
    // direction (a byte counts once per range covering it), ranges asked
    // for, and checked ranges whose digest did not match.
    uint64_t digest_rx_bytes = 0, digest_tx_bytes = 0, digest_ranges = 0, digest_mismatches = 0;
    // Posted receives into the process's memory (DTI_OP_RECV_POST): posts
    // taken, bytes written, process_vm_writev calls, posts answered
    // -EOPNOTSUPP (the engine cannot write into that process: the app copies
    // from the ring instead) and -EFAULT (bad address).
    uint64_t posts = 0, posted_bytes = 0, posted_writes = 0, post_fallbacks = 0, post_faults = 0;
    // Receive rings grown in place (grow_rx), and grows refused because the
    // application's rings would pass max_region_bytes.
    uint64_t rx_ring_grows = 0, rx_grow_refusals = 0;
    // Send rings made larger than tx_ring_size for SO_SNDBUF, and those
    // refused (the socket got tx_ring_size) because the application's rings
    // would pass max_region_bytes.
    uint64_t tx_ring_sized = 0, tx_size_refusals = 0;
    // Send rings grown while their sockets lived (DTI_OP_TX_GROW: autotuning
    // or SO_SNDBUF on a connected socket), and grows refused: a size that is
    // no larger power of two within the slot's reserve (a confused or
    // hostile application), frames in flight pointing into the ring
    // (transmit by reference), or no transport support. A grow past
    // max_region_bytes counts in tx_size_refusals.
    uint64_t tx_ring_grows = 0, tx_grow_refusals = 0;
    // Datagram sockets (DTI_SOCK_DGRAM): sockets opened, datagrams the
    // transport took from send rings, datagrams it refused (EMSGSIZE,
    // ENETUNREACH, ...), and SEND_DGRAMS/RECV_RELEASE whose records did not
    // make sense (the application's memory: the rest of the batch dropped).
    uint64_t dgram_sockets = 0, dgram_sent = 0, dgram_send_errors = 0, dgram_bad_records = 0;
};

// Latency sampling (eta-ppe's stage timestamps, ppe/README.md "Latency
// breakdown"): the engine's loop arms a trace for a sampled frame; poll()
// notes the socket whose readable event it then publishes, and later the
// reply: a SEND that commits bytes of that socket. The DTI engine reads no
// clock; the loop stamps around poll(). Unarmed, it costs a compare per
// transport event and per committed SEND.
struct Trace {
    enum State : uint32_t {
        kIdle = 0,
        kWantEvent,   // armed by the loop: the next readable event's socket is the one
        kEventSeen,   // poll() published a readable event for `sock`
        kWantCommand, // the loop stamped the event; waiting for the socket's reply
        kCommandSeen, // poll() committed a SEND of `sock`
    };
    uint32_t state = kIdle;
    SockId sock = 0;
    // The program's stamps (dti_abi.h dti_cmd.trace_*) of the SEND that
    // made kCommandSeen, as written (0: none: an older libdti, or the reply
    // went by a SEND that carried none); the loop checks them.
    uint64_t read_tsc = 0;
    uint32_t submit_ticks = 0, woken_ticks = 0;
    uint32_t token = 0; // the last token stored in a socket's dti_sock_shared.trace
};

// One per attached process. Processes forked from an attached one share its
// region (group) and show the same `group`.
struct AttachmentInfo {
    int id;
    uint32_t uid, pid;
    std::string name;
    uint32_t contexts, sockets; // its queue pairs; the sockets it holds
    uint64_t region_bytes;
    bool broken;
    int group;
};

// Answers a control connection no engine will take (all busy, shutting
// down) with the protocol's REFUSED message: `code` (an errno or DTI_E_*
// value) and `why`, which the application's dti_attach() reports. Does not
// close fd. Callers outside the engine need not know the wire format.
void refuse_connection(int fd, int code, const std::string &why);

// ---- the engine -----------------------------------------------------------

class Server {
  public:
    // Returns nullptr and a message when the limits are unusable.
    static std::unique_ptr<Server> create(Transport &transport, const Limits &limits,
                                          std::string *error);
    virtual ~Server() = default;

    // -- control plane (engine thread) --
    // `fd` is a connected SOCK_SEQPACKET UNIX socket whose HELLO is readable
    // (or will be: -EAGAIN means call again when it is). Checks SO_PEERCRED
    // and the limits, creates the region, answers WELCOME or REFUSED.
    // Returns the attachment id (>= 0; the engine now owns fd) or a negative
    // error with *why set (the caller closes fd).
    virtual int attach(int fd, std::string *why) = 0;
    // The attachment's control fd is readable or hung up: handles context
    // open/close and fork requests; on EOF detaches. Never blocks. A fork
    // request creates a new attachment (the child process) in the same
    // group: take_joined() returns its id, so its control fd gets watched.
    virtual void control(int id) = 0;
    // Ids of attachments that control() created since the last call.
    virtual std::vector<int> take_joined() = 0;
    // The attachment (process) leaves its group: its contexts close and its
    // holds on sockets drop; a socket nobody holds any more is closed. The
    // group's last attachment takes the region with it: every socket left is
    // aborted and the memory reclaimed (once the transport has returned
    // every ring); its fds are closed.
    virtual void detach(int id) = 0;
    // Server shutdown: marks every region GONE and detaches everything.
    virtual void shutdown() = 0;
    virtual int control_fd(int id) const = 0;
    virtual std::vector<AttachmentInfo> attachments() const = 0;

    // -- data plane --
    // One pass: each context's command queue (bounded burst), transport
    // events, socket table updates, completions and events. Returns the
    // amount of work done (0: idle).
    virtual unsigned poll() = 0;
    // Eventfds of armed contexts that got entries since the last clear,
    // deduplicated: write 1 (8 bytes) to each, e.g. in one io_uring submit.
    virtual std::span<const int> wakeups() const = 0;
    virtual void clear_wakeups() = 0;
    // Convenience: write() each wakeup, then clear.
    virtual void flush_wakeups() = 0;
    // Sleep protocol: sets "engine sleeping" in every region, fences and
    // re-checks; false (and the flags cleared) when commands arrived meanwhile.
    virtual bool prepare_sleep() = 0;
    virtual void end_sleep() = 0;
    // Doorbell eventfds apps write while the engine sleeps (one per group).
    virtual std::vector<int> doorbell_fds() const = 0;
    // The doorbell of this attachment's group (shared with the processes
    // forked from it); -1 for an unknown id.
    virtual int doorbell_fd(int id) const = 0;

    // -- MARS BufferProvider hook: forward mars::BufferProvider here --
    virtual bool provide(uint64_t user, RingMemory *out) = 0;
    virtual void reclaim(uint64_t user, const RingMemory &mem) = 0;
    // mars::BufferProvider::grow_rx: the receive ring `mem` (as provided,
    // or as last grown) becomes the power of two that holds `want`, in place,
    // at most Limits::rx_ring_max. The caller guarantees the ring holds no
    // unread byte and no copy writes into it. False (nothing changed) when
    // it is already that large, the memory limit would be passed, or mem is
    // not a ring of ours.
    virtual bool grow_rx(uint64_t user, RingMemory *mem, uint32_t want) = 0;
    // mars::BufferProvider::want_tx: send-buffer autotuning would like the
    // send ring `mem` (as provided or last grown) to hold `want` bytes. The
    // engine publishes the size (dti_sock_shared.tx_want) for the writer,
    // which grows the ring when it next needs room (DTI_OP_TX_GROW, then the
    // transport's tx_grow()); nothing when SO_SNDBUF was set (Linux's
    // SOCK_SNDBUF_LOCK) or the ring is that large already.
    virtual void want_tx(uint64_t user, const RingMemory &mem, uint32_t want) = 0;

    virtual const Stats &stats() const = 0;
    // The latency trace (above): the engine's loop arms and reads it.
    virtual Trace &trace() = 0;

    // -- tests and the fuzzer: serve a region in caller-owned memory, laid
    // out by layout_region(), with `contexts` queue pairs open, no fds and no
    // control socket. Returns the attachment id or a negative error.
    virtual int attach_memory(void *region, uint64_t size, uint32_t contexts) = 0;
};

// Size of a region for these limits (0 if they are unusable): its address
// space, with every slot's receive ring reserved at Limits::rx_ring_max.
uint64_t region_bytes(const Limits &limits);
// The memory such a region uses with every ring at its starting size (what
// max_region_bytes must hold; grown rings add to it while they still fit).
uint64_t region_bytes_in_use(const Limits &limits);
// Writes the header (engine-owned fields) of a fresh region of that size.
void layout_region(void *region, uint64_t size, const Limits &limits);

} // namespace dti::engine
