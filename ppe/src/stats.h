// ppe/src/stats.h: the PPE's published counters, a read-only shared region.
//
// eta-ppe creates `<control socket>.stats` (tmpfs under /run), sizes it once
// and maps it; readers (eta-stat) map it read-only, so they can never disturb
// an engine. Engines count in private memory and publish snapshots here
// every few milliseconds, each block under its own seqlock: the writer makes
// `seq` odd, copies, makes it even; a reader copies and retries while `seq`
// was odd or changed. Copies go in 8-byte atomic words (store_words,
// load_words), so even the racing copies are well-defined C++. No locks, no syscalls, and a reader's cache misses
// touch only this region.
#pragma once

#include <dti/latency_hist.h>
#include <mars/stack.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace ppe::stats {

constexpr uint64_t kMagic = 0x31544154534d5445ull; // "ETMSTAT1"
constexpr uint32_t kVersion = 20; // 20: UDP sockets in the connection table (ConnEntry::proto); 19: IPv6 addresses in ConnEntry (ipv6, local6, remote6); 18: MLD counters in mars::StackStats (mld_query_in, mld_report_in, mld_drop, mld_out); 17: rejected_commands per engine; 16: program-side latency stages (program_wake ... program_taken), prog_* counters and the slow-request log in Latency (issue 33); 15: per-engine latency block (Latency: stage histograms of sampled requests, latency_off in Header; issue 33); 14: local connection counters in mars::StackStats (local_frames, local_bytes, local_conns, drop_local_full; issue 29); 13: IPv6 addresses in PortInfo (addr6, addr6_prefix, n_addr6), IPv6/ICMPv6/ND counters in mars::StackStats (ip6_*, icmp6_*, nd_*), UDP and IGMP counters in mars::StackStats (udp_in ... igmp_out); 12: vnet port counters in PortInfo, ARP failure counters in mars::StackStats (arp_failed, drop_arp_unresolved, tcp_connects_unreachable); 11: kernel (shared port) counters per stack; 10: contended_windows per engine; 9: transmit run / TSO counters in mars::StackStats; 8: posted receive counters per engine; 7: rx_wakes per engine; 6: receive coalescing counters in mars::StackStats; 2: mars::StackStats gained the receive pipeline counters; 3: steering counters per engine; 4: digest counters; 5: copy engine in the header, below-threshold/ring-wrap copy fallbacks
constexpr uint32_t kMaxEngines = 64;
constexpr uint32_t kMaxPorts = 8;

// Copies between private memory and the shared region in 8-byte relaxed
// atomic words: the seqlock decides whether a copy is consistent, and the
// word-wise atomics keep the racing copy itself well defined.
inline void store_words(void *shared, const void *src, size_t bytes)
{
    auto *d = static_cast<uint64_t *>(shared);
    const auto *s = static_cast<const uint8_t *>(src);
    for (size_t i = 0; i < bytes / 8; i++) {
        uint64_t w;
        std::memcpy(&w, s + 8 * i, 8);
        std::atomic_ref<uint64_t>(d[i]).store(w, std::memory_order_relaxed);
    }
}

inline void load_words(void *dst, const void *shared, size_t bytes)
{
    auto *s = static_cast<uint64_t *>(const_cast<void *>(shared));
    auto *d = static_cast<uint8_t *>(dst);
    for (size_t i = 0; i < bytes / 8; i++) {
        // Acquire: the reader's closing check of `seq` cannot move above these loads.
        const uint64_t w = std::atomic_ref<uint64_t>(s[i]).load(std::memory_order_acquire);
        std::memcpy(d + 8 * i, &w, 8);
    }
}

// For a reader that may wait (eta-stat; not an engine, not the control
// loop): a writer can be descheduled with `seq` odd for as long as the
// scheduler keeps it off its CPU (a busy machine), so a fixed number of
// spins bounds nothing but luck. Retries `attempt` (one spinning read,
// true when consistent) with 50 us naps, for up to about 2 s.
template <typename F>
bool read_patiently(F &&attempt)
{
    for (int i = 0; i < 40'000; i++) {
        if (attempt()) return true;
        timespec nap{0, 50'000};
        nanosleep(&nap, nullptr);
    }
    return false;
}

enum class State : uint32_t { kStarting = 0, kRunning = 1, kStopping = 2, kStopped = 3 };

// Seqlock-protected block of plain data T.
template <typename T>
struct alignas(64) Published {
    std::atomic<uint32_t> seq;
    uint32_t pad_;
    T data;
    static_assert(sizeof(T) % 8 == 0, "published blocks are copied in 8-byte words");

    void write(const T &v)
    {
        // The acquire RMW keeps the data stores after "odd"; the release
        // store keeps them before "even". No fences (ThreadSanitizer-clean).
        const uint32_t s = seq.fetch_add(1, std::memory_order_acquire);
        store_words(&data, &v, sizeof(T));
        seq.store(s + 2, std::memory_order_release);
    }
    // Copies a consistent snapshot; false when the writer kept it busy.
    bool read(T *out) const
    {
        for (int attempt = 0; attempt < 1000; attempt++) {
            uint32_t s0 = seq.load(std::memory_order_acquire);
            if (s0 & 1) continue;
            load_words(out, &data, sizeof(T));
            if (seq.load(std::memory_order_relaxed) == s0) return true;
        }
        return false;
    }
};

struct EngineCounters {
    int32_t pu;            // the CPU the engine runs on
    uint32_t apps;         // contexts it serves now
    uint64_t loops;        // engine loop iterations
    uint64_t busy_polls;   // iterations that found work
    uint64_t idle_polls;   // iterations that found none
    uint64_t sleeps;       // idle sleeps taken
    uint64_t busy_cycles;  // TSC cycles spent in busy iterations
    uint64_t total_cycles; // TSC cycles since the engine started
    uint64_t rx_packets, tx_packets;
    uint64_t tx_dropped;   // frames the NIC did not take
    uint64_t wakeups;      // application wakeups issued
    uint64_t wake_submits; // io_uring submissions that carried them
    uint64_t doorbells;    // command batches taken from applications
    uint64_t commands;     // commands executed
    uint64_t events;       // events delivered to applications
    // Payload digests (DTI_OP_DIGEST): bytes run through CRC32C per
    // direction, ranges asked for, checked ranges that did not match.
    uint64_t digest_rx_bytes, digest_tx_bytes, digest_ranges, digest_mismatches;
    uint64_t published_ns; // when this snapshot was taken (CLOCK_MONOTONIC)
    // Flow steering between engines (ppe/src/steer.h).
    uint64_t steered_out;  // TCP segments this engine received for another engine's flow
    uint64_t steered_in;   // TCP segments other engines handed to this one
    uint64_t steer_drops;  // segments dropped because the owner's ring was full
    uint64_t arp_shared_out, arp_shared_in; // ARP frames shared with / from other engines
    uint64_t owner_kicks;  // napping owners woken after frames were steered to them
    uint64_t rx_wakes;     // idle sleeps a frame ended (a queue's kernel socket turned readable: rx_wake.h)
    // Posted receives into application memory (DTI_OP_RECV_POST): posts
    // taken, bytes written into the programs, posts refused because the
    // engine cannot write into that process (the program copies instead),
    // posts ended by an address the process cannot be written at.
    uint64_t posts, posted_bytes, post_fallbacks, post_faults;
    // Receive rings grown in place for autotuning, and grows refused because
    // the application's rings would pass limits.memory_per_app.
    uint64_t rx_ring_grows, rx_grow_refusals;
    // Send rings made larger than tcp.sndbuf for SO_SNDBUF, and those refused
    // (the default ring) because the rings would pass limits.memory_per_app.
    uint64_t tx_ring_sized, tx_size_refusals;
    // Send rings grown on live sockets (autotuning, SO_SNDBUF set after
    // connect), and grows refused (frames in flight pointing into the ring,
    // a size the engine does not take).
    uint64_t tx_ring_grows, tx_grow_refusals;
    // Housekeeping windows (10 ms) in which the engine thread waited for its
    // CPU (cpu_contention.h); an adaptive engine naps at once for a while after one.
    uint64_t contended_windows;
    // Application commands the engine refused without an answer to give:
    // a handle the issuing process does not hold, a corrupt tag, a SEND past
    // what the socket can take (its bytes stay unsent). 0 for a program that
    // keeps to the protocol (dti/README.md).
    uint64_t rejected_commands;
};

// A port shared with the kernel ([[port]] kernel = "shared", kernel_tap.h):
// what one engine handed to the kernel's interface, by reason
// (mars::Unclaimed), and took from it for the port.
struct KernelCounters {
    uint64_t to_frames[mars::kUnclaimedReasons], to_bytes[mars::kUnclaimedReasons];
    uint64_t to_drops;    // the tap did not take them (the kernel's queue full)
    uint64_t from_frames, from_bytes;
    uint64_t from_drops;  // the port did not take them
};

// One MARS stack: one per (engine, port).
struct StackCounters {
    mars::StackStats stack;
    KernelCounters kernel; // zero unless the port is shared with the kernel
};

struct PortInfo {
    char name[32];
    char device[160];
    uint8_t mac[6];
    uint16_t mtu;
    uint32_t ip, prefix, gateway;
    uint32_t rx_queues, tx_queues;
    uint32_t offloads;      // mars::Offloads the port gave us
    uint32_t link_up;
    uint64_t link_speed_mbps;
    char kernel_iface[16];  // kernel = "shared": the kernel's interface on the port; "" when not shared
    // [[port]] address6 (network byte order) and their prefix lengths; the
    // link-local address (from the MAC) is not listed.
    uint8_t addr6[mars::StackConfig::kMaxAddr6][16];
    uint8_t addr6_prefix[mars::StackConfig::kMaxAddr6];
    uint32_t n_addr6;
    // From the device (rte_eth_stats), refreshed by the control thread.
    uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
    // A vnet port's offloads at work (ppe/src/vnet_port.h; 0 on DPDK ports):
    // super-frames received and the MSS segments they stood for, the kernel's
    // checksum verdicts (verified / partial: made by the peer's kernel /
    // none: the engine checks), TSO frames sent and their segments.
    uint64_t rx_lro_frames, rx_lro_segments, rx_csum_valid, rx_csum_partial, rx_csum_unknown;
    uint64_t tx_tso_frames, tx_tso_segments;
};

// Where a sampled request's time goes (issue 33; ppe/README.md "Latency
// breakdown"). One in `sample_every` received frames (a per-engine countdown)
// starts a trace; the engine stamps it with its TSC clock (TscClock: one
// rdtsc and a multiply, no system call) at each stage it sees:
//   rx        the rx burst holding the frame returned
//   stack     MARS's input of that burst returned (segment through MARS)
//   event     the DTI poll that published the socket's readable event returned
//   command   the DTI poll that took the reply's SEND for that socket began
//   tx        the output pass (or DTI poll) in which the port took a frame more
//             (the reply) began; `port` is how long that pass held the engine
// Each stage's histogram holds the time from the stage before; a trace that
// stops early (the frame made no readable event: an ACK; no reply within 1 s)
// is counted as such and records nothing past where it stopped.
enum LatencyStage : uint32_t {
    kStageStack = 0,      // rx -> stack: the frame through MARS
    kStageEvent,          // stack -> event: the readable event published to the program
    kStageProgramWoken,   // event -> command, the program was woken (it slept)
    kStageProgramSpin,    // event -> command, no wakeup was needed (it was polling)
    kStageTransmit,       // command -> tx: until the output pass that sent the reply began
    kStagePort,           // that output pass: MARS's output and the port's tx burst (af_packet: a send system call)
    kStageEngine,         // stack + event + transmit of one request: the engine's share before the port
    kStageRequest,        // rx -> tx: request frame in to the reply handed to the port
    // The program's side, from its own stamps (libdti: the TSC, no system
    // call; dti_abi.h dti_sock_shared.trace): event -> command split where
    // the program stamped it. Each point is clamped into [event, command],
    // so the four add up to that trace's program stage exactly.
    kStageProgWake,       // event -> the program's sleep ended (only when it slept and woke after the event)
    kStageProgRead,       // (woken or event) -> the program read the request's data
    kStageProgReply,      // data read -> the reply's SEND submitted
    kStageProgTaken,      // SEND submitted -> the engine's poll that took it began
    kLatencyStages
};

struct LatencyCounters {
    uint64_t sample_every;  // [engine] latency_sample (0: sampling off)
    uint64_t traces;        // traces started
    uint64_t no_event;      // the sampled frame published no readable event (ACK, SYN, ...)
    uint64_t no_reply;      // no reply command for its socket within 1 s (or the socket went)
    uint64_t completed;     // traces with every stage
    uint64_t woken;         // of those, the program was woken by the engine
    // Complete traces by the program's stamps: usable (program_* recorded),
    // missing (none, or from before the request's event: an older libdti, a
    // reply that went by a SEND without stamps), hostile (a stamp after the
    // engine took the command, or past 1 s: nothing of them recorded).
    uint64_t prog_stamped, prog_missing, prog_bad;
    uint64_t pad_[7];
};

// The slow-request log: the kSlowRequests slowest complete traces (by
// `request`) of each interval of kSlowIntervalNs, with every stage. The
// engine writes (one writer): an entry's seq is odd while it is written
// (a reader that finds it odd, or changed across its copy, skips the entry);
// at_ns 0: an empty entry. `done` is the last complete interval, `open` the
// one under way; at the first complete trace past the open interval's end,
// open becomes done.
constexpr uint32_t kSlowRequests = 8;
constexpr uint64_t kSlowIntervalNs = 10'000'000'000ull; // 10 s
struct SlowRequest {
    uint64_t seq;                        // odd while written
    uint64_t at_ns;                      // the engine's clock when its frame came (rx); 0: empty
    uint64_t stage_ns[kLatencyStages];   // each stage's time (program_*: 0 unless stamped)
    uint32_t flags;                      // kSlowWoken, kSlowStamped
    uint32_t pad_;
};
constexpr uint32_t kSlowWoken = 1, kSlowStamped = 2;
struct SlowLog {
    uint64_t interval_ns;               // kSlowIntervalNs
    uint64_t open_start_ns;             // the engine clock's start of the open interval (0: none yet)
    uint64_t done_start_ns;             // of the done one (0: none yet)
    uint64_t pad_[5];
    SlowRequest open[kSlowRequests];
    SlowRequest done[kSlowRequests];
};

// Written in place by its engine (one writer), read any time (eta_hist_copy):
// no seqlock, every word whole, counts only grow (dti/latency_hist.h).
struct alignas(64) Latency {
    LatencyCounters c;
    SlowLog slow;
    eta_hist stages[kLatencyStages];
};

struct AppCounters {
    uint32_t in_use;
    int32_t pid;
    uint32_t uid;
    uint32_t engine;
    char comm[16];
    uint64_t attached_unix_ns;
    uint64_t sockets;       // open now
    uint64_t memory_bytes;  // region memory in use (socket rings, buffers)
    uint64_t region_bytes;  // size of its shared region
    uint64_t commands, doorbells, wakeups, events;
    uint64_t bytes_in, bytes_out;
};

// ConnEntry::proto: what the entry is.
constexpr uint8_t kProtoTcp = 0, kProtoUdp = 1;

struct ConnEntry {
    int32_t app_pid;        // 0: not tied to an application (e.g. closing)
    uint32_t sock;
    uint8_t state;          // mars::TcpState (TCP); UDP: kClosed, the entry's proto says what it is
    uint8_t ipv6;           // 1: an IPv6 socket, its addresses in local6/remote6 (local_ip/remote_ip 0)
    uint8_t proto;          // kProtoTcp or kProtoUdp (version 20)
    uint8_t pad_;
    uint32_t local_ip, remote_ip;
    uint16_t local_port, remote_port;
    uint32_t rx_readable, tx_unacked, tx_space;
    uint32_t cwnd, srtt_us;
    uint32_t ooo_frames;
    uint32_t memory_bytes;  // its two rings
    uint64_t retransmits, bytes_in, bytes_out;
    uint8_t local6[16], remote6[16]; // network byte order (version 19)
    // UDP (version 20): datagrams waiting in the receive ring (rx_readable:
    // their ring bytes; memory_bytes: the ring), datagrams dropped for a full
    // ring; a connected socket's peer in remote (port 0: not connected).
    uint32_t datagrams, pad2_;
    uint64_t drops;
};

static_assert(sizeof(ConnEntry) % 8 == 0);

struct ConnTableHeader {
    uint32_t count;         // valid entries that follow (TCP, then UDP)
    uint32_t total;         // TCP sockets the engine has (may exceed capacity)
    uint32_t udp_total;     // UDP sockets the engine has (version 20)
    uint32_t pad_;
    uint64_t published_ns;
};

struct Header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    std::atomic<uint32_t> state; // State
    int32_t pid;
    // max_apps: application slots of all engines (engine e: the e-th of
    // n_engines equal ranges); conn_capacity: entries per engine table.
    uint32_t n_engines, n_ports, max_apps, conn_capacity;
    uint64_t tsc_hz;
    uint64_t started_unix_ns;
    uint64_t size;               // bytes of the whole region
    uint64_t engines_off, stacks_off, ports_off, apps_off, conns_off, conn_stride;
    uint64_t latency_off;        // n_engines Latency blocks (version 14)
    int32_t engine_pus[kMaxEngines];
    char engine_cpus[256];       // "1" or "2-3,6": the CPUs reserved for engines
    char config_path[256];
    char socket_path[128];
    char idle_policy[16];
    char memory_mode[16];
    char copy_engine[96];        // [copy]: "cpu" or "dmadev:NAME[,NAME...]" (one device per engine)
    uint32_t copy_threshold;     // dmadev: smallest payload offloaded (bytes); 0 with "cpu"
    uint32_t pad_;
};

// Offsets of each block, computed the same way by writer and reader.
struct Layout {
    uint64_t engines_off, stacks_off, ports_off, apps_off, conns_off, conn_stride, latency_off, size;

    static constexpr uint64_t align(uint64_t v) { return (v + 4095) & ~uint64_t(4095); }

    static Layout compute(uint32_t n_engines, uint32_t n_ports, uint32_t max_apps, uint32_t conn_capacity)
    {
        Layout l{};
        l.engines_off = align(sizeof(Header));
        l.stacks_off = align(l.engines_off + n_engines * sizeof(Published<EngineCounters>));
        l.ports_off = align(l.stacks_off + uint64_t(n_engines) * n_ports * sizeof(Published<StackCounters>));
        l.apps_off = align(l.ports_off + n_ports * sizeof(Published<PortInfo>));
        l.conns_off = align(l.apps_off + max_apps * sizeof(Published<AppCounters>));
        // Each engine's table: a seqlock word, its header, then entries.
        l.conn_stride = align(64 + sizeof(ConnTableHeader) + uint64_t(conn_capacity) * sizeof(ConnEntry));
        l.latency_off = align(l.conns_off + n_engines * l.conn_stride);
        l.size = align(l.latency_off + n_engines * sizeof(Latency));
        return l;
    }
};

// Typed views of a mapped region.
struct View {
    uint8_t *base = nullptr;

    Header *header() const { return reinterpret_cast<Header *>(base); }
    Published<EngineCounters> *engine(uint32_t e) const
    {
        return reinterpret_cast<Published<EngineCounters> *>(base + header()->engines_off) + e;
    }
    Published<StackCounters> *stack(uint32_t e, uint32_t p) const
    {
        return reinterpret_cast<Published<StackCounters> *>(base + header()->stacks_off) + e * header()->n_ports + p;
    }
    Published<PortInfo> *port(uint32_t p) const
    {
        return reinterpret_cast<Published<PortInfo> *>(base + header()->ports_off) + p;
    }
    Published<AppCounters> *app(uint32_t a) const
    {
        return reinterpret_cast<Published<AppCounters> *>(base + header()->apps_off) + a;
    }
    Latency *latency(uint32_t e) const
    {
        return reinterpret_cast<Latency *>(base + header()->latency_off) + e;
    }
    // The connection table of engine e: seqlock word, header, entries.
    std::atomic<uint32_t> *conn_seq(uint32_t e) const
    {
        return reinterpret_cast<std::atomic<uint32_t> *>(base + header()->conns_off + e * header()->conn_stride);
    }
    ConnTableHeader *conn_header(uint32_t e) const
    {
        return reinterpret_cast<ConnTableHeader *>(base + header()->conns_off + e * header()->conn_stride + 64);
    }
    ConnEntry *conns(uint32_t e) const
    {
        return reinterpret_cast<ConnEntry *>(reinterpret_cast<uint8_t *>(conn_header(e)) + sizeof(ConnTableHeader));
    }
};

} // namespace ppe::stats
