// ppe/src/steer.h: software flow steering between engines.
//
// With N engines every TCP flow has one owner, dti_flow_owner(4-tuple, N)
// (dti/abi/dti_abi.h; over IPv6 dti_flow_owner6): the engine whose stack
// holds the connection. The NIC (or af_packet's fanout) may deliver a
// segment to any engine's queue, so after each rx burst an engine keeps what
// it owns and hands the rest to the owner through a single-producer
// single-consumer rte_ring per (from, to) pair. ARP and IPv6 neighbour
// solicitations and advertisements go to every engine (each stack keeps its
// own neighbour table; the first engine alone answers ND and hands such
// frames to the kernel): the same mbuf with its reference count raised, no
// copy. UDP and IGMP (and over IPv6: UDP, MLD, anything behind an extension
// header) go to engine 0, which holds every datagram socket; an ICMPv6 error
// quoting a TCP segment to that flow's owner. ICMP, ICMPv6 echo and anything
// else stay where they were received.
//
// Nothing here locks, allocates or makes a syscall on the packet path; each
// ring's producer and consumer indexes sit on their own cache lines (rte_ring
// layout), and each engine's counters are private to it.
#pragma once

#include <mars/packet.h>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ppe {

// Where a received frame goes.
constexpr uint32_t kSteerHere = 0xffffffffu;  // handle on the engine that received it
constexpr uint32_t kSteerEvery = 0xfffffffeu; // every engine (ARP)

// The engine that holds every UDP socket (and IGMP membership).
constexpr uint32_t kUdpEngine = 0;

// The owner of a received Ethernet frame among n engines: the flow's owner
// for a TCP segment (IPv4 not a fragment; IPv6 with TCP as its next header)
// and for an ICMPv6 error quoting one, kUdpEngine for UDP and IGMP and for
// the rest of IPv6 (MLD, extension headers), kSteerEvery for ARP and IPv6
// neighbour solicitations and advertisements, kSteerHere for anything else
// (ICMP, ICMPv6 echo, malformed frames: the receiving stack counts and drops
// them). Reads only what the length covers.
uint32_t frame_owner(const uint8_t *frame, uint32_t len, uint32_t n_engines);

// Whether frame_owner() gives the frame to every engine (ARP, IPv6 NS/NA):
// the engine that hands frames on to a shared kernel passes one copy.
bool frame_for_every_engine(const uint8_t *frame, uint32_t len);

// RSS programmed so that the NIC's choice of queue is dti_flow_owner()'s
// (dti_abi.h): the key is 0x6d5a repeated (len bytes: the device's key
// size), and entry i of the indirection table holds queue
// (i mod DTI_FLOW_RETA_SPAN) mod queues. Exact for tables whose size is a
// multiple of DTI_FLOW_RETA_SPAN (every NIC with RSS we know: 64 to 2048
// entries); a smaller table still spreads, and software steering corrects
// the rest.
void rss_fill_key(uint8_t *key, size_t len);
uint16_t rss_queue_of_entry(uint32_t entry, uint16_t queues);
bool rss_table_matches_owner(uint32_t reta_size);

// mars::StackConfig::steer for an engine's stacks: the owner of a flow
// (host byte order), `arg` points to the number of engines (a uint32_t that
// outlives the stack). MARS then picks ephemeral ports its engine owns.
uint32_t flow_owner_hook(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, void *arg);
// mars::StackConfig::steer6: the same for IPv6 (dti_flow_owner6).
uint32_t flow_owner6_hook(const uint8_t *lip, uint16_t lport, const uint8_t *rip, uint16_t rport, void *arg);

// Where the control thread sends a new control connection, from the first
// message it peeked (HELLO names the engine wanted).
struct HelloRoute {
    enum Kind { kAny, kEngine, kNoSuchEngine, kNotHello } kind;
    uint32_t engine; // kEngine, kNoSuchEngine: the index asked for
};
HelloRoute route_hello(const void *msg, size_t len, uint32_t n_engines);

// The PacketRef MARS gets for a received mbuf (checksum flags from the NIC).
mars::PacketRef packet_of(rte_mbuf *m);

// How to wake an engine that naps (ppe/src/engine.h): its "sleeping" flag
// and its kick eventfd. Each engine fills its own before its thread starts;
// others read it while running, hence atomics.
struct alignas(64) EngineBell {
    std::atomic<std::atomic<uint32_t> *> sleeping{nullptr};
    std::atomic<int> fd{-1};
};

// The rings between n engines: ring(from, to) carries mbufs from engine
// `from` to engine `to`. Created before the engines start, freed after they
// stopped. Ring memory is plain aligned memory (rte_ring_init), so it needs
// no EAL memzone and unit tests can build one.
class SteerMesh {
  public:
    SteerMesh() = default;
    SteerMesh(const SteerMesh &) = delete;
    SteerMesh &operator=(const SteerMesh &) = delete;
    ~SteerMesh();
    // `entries`: per ring, a power of two.
    bool create(uint32_t n_engines, uint32_t entries, std::string *error);
    uint32_t engines() const { return n_; }
    rte_ring *ring(uint32_t from, uint32_t to) const { return rings_[from * n_ + to]; }
    EngineBell &bell(uint32_t engine) const { return bells_[engine]; }

  private:
    uint32_t n_ = 0;
    std::vector<rte_ring *> rings_;
    std::unique_ptr<EngineBell[]> bells_;
};

struct SteerCounters {
    uint64_t out = 0;      // TCP segments handed to their owner
    uint64_t in = 0;       // TCP segments other engines handed to us
    uint64_t arp_out = 0;  // ARP and IPv6 NS/NA frames shared with the other engines (one per frame)
    uint64_t arp_in = 0;   // ARP and IPv6 NS/NA frames other engines shared with us
    uint64_t drops = 0;    // segments dropped because the owner's ring was full
};

// One engine's side of the mesh.
class Steering {
  public:
    static constexpr uint32_t kBurst = 256; // frames per sort/drain call, at most

    Steering(const SteerMesh &mesh, uint32_t self);

    // Sorts a received burst in place: keeps the frames this engine handles
    // (its own flows, ARP, ICMP...) at the front and returns how many;
    // queues the others for their owners. Call flush() after.
    uint16_t sort(mars::PacketRef *frames, uint16_t n);
    // Enqueues what sort() queued, one burst per ring; frames a full ring
    // does not take are freed and counted as drops. Returns a bit mask of
    // the engines that got frames (to wake those that nap).
    uint32_t flush();
    // Takes up to max frames other engines handed to us.
    uint16_t drain(mars::PacketRef *out, uint16_t max);

    // Whether other engines left frames for us (the loop must not nap then).
    bool has_incoming() const;

    const SteerCounters &counters() const { return counters_; }
    bool active() const { return n_ > 1; }

  private:
    void queue(uint32_t to, rte_mbuf *m);
    void flush_one(uint32_t to);

    const SteerMesh &mesh_;
    const uint32_t self_, n_;
    uint32_t next_drain_ = 0; // round-robin start among the other engines
    // Frames waiting for flush(), per destination engine (fixed arrays: no
    // allocation on the packet path).
    static constexpr uint32_t kMaxEngines = 8; // DTI_MAX_ENGINES
    rte_mbuf *pending_[kMaxEngines][kBurst];
    uint16_t pending_n_[kMaxEngines] = {};
    uint32_t delivered_ = 0; // engines that got frames since the last flush()
    SteerCounters counters_;
};

} // namespace ppe
