// tests/unit/mars/sim/sim_wire.h: TEST FIXTURE. A simulated wire on virtual
// time between two mars::Stack instances.
//
//   FramePool   preallocated frame memory (the stand-in for a DPDK mempool);
//               counts frames in use so tests can prove every buffer returns.
//   SimPort     a PacketIo on a FramePool; transmitted frames go to a sink
//               (a Link, or a capture list in RawPeer). Optionally emulates
//               NIC checksum offload.
//   RingPool    a BufferProvider handing out fixed ring slots from one
//               preallocated block; counts what is outstanding.
//   Link        one direction of the wire: propagation delay, serialization
//               rate with a bounded bottleneck queue, and random loss,
//               duplication, reordering and corruption (single bit flips
//               behind the Ethernet header, which the IP/TCP checksums must
//               catch), all from a seeded deterministic generator.
//   SimNet      two hosts (stack + port + rings) joined by two Links and an
//               event loop that jumps virtual time to the next thing due:
//               a frame arriving or a stack deadline (next_deadline_ns).
//
// Nothing here is production code; it exists so the stack can be tested
// byte for byte, deterministically and fast, without a NIC.
#pragma once

#include <mars/stack.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <vector>

namespace mars::sim {

// splitmix64: small, fast and the same on every platform (std distributions
// are not), so a seed reproduces a run exactly.
class Rng {
  public:
    explicit Rng(uint64_t seed) : s_(seed) {}
    uint64_t next()
    {
        uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // True with probability p.
    bool chance(double p) { return p > 0 && double(next() >> 11) * 0x1.0p-53 < p; }
    uint64_t below(uint64_t n) { return n ? next() % n : 0; }

  private:
    uint64_t s_;
};

// The byte at offset i of stream `seed`: what transfer tests send and verify.
inline uint8_t pattern_byte(uint64_t seed, uint64_t i)
{
    uint64_t z = (seed * 0x9e3779b97f4a7c15ull) ^ ((i >> 3) * 0xbf58476d1ce4e5b9ull);
    z ^= z >> 29;
    z *= 0x94d049bb133111ebull;
    z ^= z >> 32;
    return uint8_t(z >> ((i & 7) * 8));
}
void pattern_fill(uint64_t seed, uint64_t offset, uint8_t *p, size_t n);
// Index of the first byte of p[0..n) that differs from the stream, or n.
size_t pattern_check(uint64_t seed, uint64_t offset, const uint8_t *p, size_t n);

class FramePool {
  public:
    explicit FramePool(uint32_t frames, uint16_t room = 2048);
    ~FramePool();
    FramePool(const FramePool &) = delete;
    FramePool &operator=(const FramePool &) = delete;
    bool get(PacketRef *out);
    void put(const PacketRef &f);
    uint32_t in_use() const { return capacity_ - uint32_t(free_.size()) + uint32_t(exact_in_use()); }
    uint32_t capacity() const { return capacity_; }
    uint64_t exhausted() const { return exhausted_; }
    // Frames released twice, or released with a handle this pool never gave.
    uint64_t bad_releases() const { return bad_releases_; }
    // A copy of frame f's bytes in a new frame (for duplication). false when empty.
    bool clone(const PacketRef &f, PacketRef *out);
    // A frame holding a copy of bytes whose memory ends exactly after len
    // bytes: under AddressSanitizer a read past its end (or before its
    // start, or after put()) is reported. Each frame lies at the start of a
    // block of its own; the blocks are kept for reuse (so a fuzz input
    // costs no allocation, which AddressSanitizer makes expensive) and all
    // of a block but the frame is poisoned (sanitizer/asan_interface.h).
    // Released blocks wait in a queue, at least kExactIdle of them, before
    // they are used again, so a read of a released frame is caught as a
    // read of freed memory would be (ASan's quarantine does the same).
    // Without the sanitizer the bytes past len are only not the frame's.
    PacketRef get_exact(const uint8_t *bytes, size_t len);
    size_t exact_in_use() const { return exact_blocks_.size() - (exact_free_.size() - exact_free_head_); }

  private:
    uint32_t capacity_;
    uint16_t room_;
    std::vector<uint8_t> mem_;
    std::vector<uint32_t> free_;
    std::vector<uint8_t> busy_;
    // get_exact()'s blocks, each kExactRoom bytes; handle: capacity_ + 1 + index.
    static constexpr size_t kExactRoom = 0x10000;
    static constexpr size_t kExactIdle = 64;
    struct ExactBlock {
        uint8_t *mem;
        uint16_t len; // the frame's length while busy
        bool busy;
    };
    std::vector<ExactBlock> exact_blocks_;
    std::vector<uint32_t> exact_free_; // a queue: [exact_free_head_, size()) wait, oldest first
    size_t exact_free_head_ = 0;
    bool put_exact(uintptr_t handle);
    uint64_t exhausted_ = 0, bad_releases_ = 0;
};

class SimPort : public PacketIo {
  public:
    using Sink = std::function<void(const PacketRef &)>;
    SimPort(FramePool &pool, Sink sink, uint32_t offloads = 0) : pool_(pool), sink_(std::move(sink)), offloads_(offloads) {}
    uint16_t alloc(PacketRef *out, uint16_t n) override;
    uint16_t transmit(PacketRef *frames, uint16_t n) override;
    void release(PacketRef *frames, uint16_t n) override;
    uint32_t offloads() const override { return offloads_; }
    void set_offloads(uint32_t o) { offloads_ = o; }
    // Frames the stack handed back as not its own (StackConfig::pass_unclaimed),
    // kept byte for byte with their reason; the buffer is released at once.
    struct UnclaimedFrame {
        std::vector<uint8_t> bytes;
        Unclaimed why;
    };
    std::vector<UnclaimedFrame> unclaimed_frames;
    void unclaimed(PacketRef &frame, Unclaimed why) override;
    // When set, alloc() fails (as a drained mempool would).
    void set_alloc_fails(bool f) { alloc_fails_ = f; }
    // Off: frames that ask for tx checksum offload are passed on without the
    // port filling the checksums (benchmarks: a NIC does it for free).
    void set_offload_emulation(bool on) { emulate_offload_ = on; }
    // TCP segmentation offload, emulated as a NIC does it (TEST FIXTURE):
    // with kOffloadTxTcpSeg in offloads, alloc_tso() takes buffers from
    // `large` and transmit() cuts each kTxTcpSeg frame into segments of
    // tx_seg_size() payload bytes from this port's pool (mars/checksum_offload.h:
    // sequence numbers advanced, IPv4 length and checksums per segment, or
    // IPv6 payload length and TCP checksum, PSH/FIN on the last only), which
    // then go on as ordinary frames with checksum offload. A TSO frame that
    // breaks the contract is counted in tx_invalid and dropped.
    void enable_tso(FramePool *large, uint32_t max_frame)
    {
        large_ = large;
        tso_max_ = max_frame;
    }
    uint32_t tso_max_frame() const override { return large_ ? tso_max_ : 0; }
    uint16_t alloc_tso(PacketRef *out, uint16_t n) override;
    uint64_t tso_frames = 0; // kTxTcpSeg frames taken
    uint64_t tso_frames6 = 0; // ... of them IPv6 frames
    uint64_t tso_segments = 0; // segments cut from them
    uint32_t tso_seg_size = 0; // the segment size (tx_seg_size) of the last one

    // Transmit by reference (TEST FIXTURE): with kOffloadTxExternal in the
    // port's offloads (set before the stack is made: it reads them once). transmit() reads each attached payload into
    // the frame, as a NIC's DMA would, and hands it on. With hold on, the
    // port keeps the payload's reference after that, as a NIC that frees
    // its descriptors late, until release_external(): then it reads the
    // payload again, and a byte that changed meanwhile (the send ring handed
    // back to the application while a frame still pointed at it) is counted
    // in external_changed. Without hold, the reference goes at transmit().
    void enable_external(bool hold)
    {
        offloads_ |= kOffloadTxExternal;
        hold_external_ = hold;
        attached_.reserve(256); // more than a transmit burst: attaching does not allocate
    }
    bool attach_external(PacketRef &frame, const uint8_t *payload, uint16_t len, uint32_t *refs) override;
    // Lets go of the oldest n held payloads (all with n = SIZE_MAX); returns how many.
    size_t release_external(size_t n = SIZE_MAX);
    size_t external_held() const { return held_.size(); }
    // Off: transmit() hands on the headers only and does not read attached
    // payloads (benchmarks: a device's DMA is not the engine's work).
    void set_external_read(bool on) { external_read_ = on; }
    uint64_t external_frames = 0;  // frames transmitted with a payload by reference
    uint64_t external_changed = 0; // held payloads whose bytes changed before release

    uint64_t tx_frames = 0;
    // Frames handed to transmit() that no real NIC could send: empty, longer
    // than their buffer, or asking for an offload the port did not offer.
    uint64_t tx_invalid = 0;

  private:
    FramePool &pool_;
    Sink sink_;
    uint32_t offloads_;
    bool alloc_fails_ = false;
    bool emulate_offload_ = true;
    FramePool *large_ = nullptr;
    uint32_t tso_max_ = 0;
    void deliver(PacketRef &f);
    bool segment(PacketRef &big);
    struct External {
        const void *handle = nullptr;
        const uint8_t *payload = nullptr;
        uint16_t len = 0;
        uint32_t *refs = nullptr;
        std::vector<uint8_t> sent; // the bytes read at transmit (hold only)
    };
    std::vector<External> attached_; // attached, not yet transmitted
    std::deque<External> held_;
    bool hold_external_ = false;
    bool external_read_ = true;
    // The frame's attached payload, taken out of attached_ (false: none).
    bool take_external(const PacketRef &f, External *out);
    void drop_external(const PacketRef &f);
};

// Fills in checksums the way a NIC with tx offload would (the stack asked by
// setting kTxIpCsum/kTxTcpCsum); clears those flags.
void apply_tx_offload(PacketRef &f);
// Sets kRxIpCsumGood/kRxL4CsumGood when the checksums really are good (a NIC
// with rx offload); leaves the flags clear otherwise.
void apply_rx_offload(PacketRef &f);

class RingPool : public BufferProvider {
  public:
    RingPool(uint32_t slots, uint32_t rx_size, uint32_t tx_size);
    bool provide(uint64_t user, RingMemory *out) override;
    void reclaim(uint64_t user, const RingMemory &mem) override;
    uint32_t outstanding() const { return slots_ - uint32_t(free_.size()); }
    uint64_t refused() const { return refused_; }
    uint64_t bad_reclaims() const { return bad_reclaims_; }

  private:
    uint32_t slots_, rx_size_, tx_size_;
    std::vector<uint8_t> mem_;
    std::vector<uint32_t> free_;
    std::vector<uint8_t> busy_;
    uint64_t refused_ = 0, bad_reclaims_ = 0;
};

struct LinkParams {
    double loss = 0, duplicate = 0, reorder = 0, corrupt = 0;
    // corrupt applies to IPv4 packets; with this also to IPv6 ones (issue 31
    // tests: a flip in the IPv6 header's unchecked fields, traffic class,
    // flow label, hop limit, goes unnoticed and harms nothing).
    bool corrupt_ipv6 = false;
    uint64_t delay_ns = 20'000;          // propagation, at least 1 us
    uint64_t reorder_extra_ns = 300'000; // a reordered frame arrives this much later
    uint64_t rate_bps = 0;               // serialization rate; 0 = infinitely fast
    uint32_t queue_frames = 0;           // bottleneck queue (tail drop); 0 = unbounded
    uint64_t seed = 1;
    std::string describe() const;
};

struct LinkStats {
    uint64_t sent = 0, delivered = 0, lost = 0, duplicated = 0, reordered = 0, corrupted = 0, queue_drops = 0;
};

// One direction of the wire. Owns frames between send() and take_due().
class Link {
  public:
    Link(FramePool &pool, LinkParams p) : pool_(pool), p_(p), rng_(p.seed) {}
    ~Link();
    void send(const PacketRef &f, uint64_t now);
    uint64_t next_arrival() const { return q_.empty() ? UINT64_MAX : q_.top().at; }
    uint16_t take_due(uint64_t now, PacketRef *out, uint16_t max);
    const LinkStats &stats() const { return st_; }
    LinkParams &params() { return p_; }
    // Drops everything in flight (a cable pulled).
    void flush();
    size_t in_flight() const { return q_.size(); }

  private:
    struct InFlight {
        uint64_t at;
        uint64_t order;
        PacketRef f;
        bool operator>(const InFlight &o) const { return at != o.at ? at > o.at : order > o.order; }
    };
    void enqueue(const PacketRef &f, uint64_t at);
    FramePool &pool_;
    LinkParams p_;
    Rng rng_;
    std::priority_queue<InFlight, std::vector<InFlight>, std::greater<InFlight>> q_;
    std::deque<uint64_t> departures_; // when queued frames finish serializing
    uint64_t busy_until_ = 0, order_ = 0;
    LinkStats st_;
};

// A reasonable test configuration: small tables, fixed secret, 198.18.0.x.
StackConfig test_stack_config(uint8_t host_octet);

struct HostConfig {
    StackConfig stack;
    uint32_t ring_slots = 64;
    uint32_t offloads = 0;
    // Where the stack's rings come from; null: a RingPool of ring_slots
    // (tests of the DTI engine hand it the engine's provider hook).
    BufferProvider *rings = nullptr;
};

struct Host {
    // Order matters: the stack is destroyed first, then what it uses.
    std::unique_ptr<RingPool> rings;
    std::unique_ptr<SimPort> port;
    std::unique_ptr<Stack> stack;
    StackConfig config;
};

struct SimNetConfig {
    HostConfig a, b;
    LinkParams a_to_b, b_to_a;
    uint32_t pool_frames = 16384;
};
SimNetConfig default_simnet_config();

class SimNet {
  public:
    explicit SimNet(const SimNetConfig &c);
    ~SimNet();
    SimNet(const SimNet &) = delete;
    SimNet &operator=(const SimNet &) = delete;

    Stack &stack(int h) { return *hosts_[h].stack; }
    Host &host(int h) { return hosts_[h]; }
    Link &link(int from) { return *links_[from]; }
    FramePool &pool() { return pool_; }
    uint64_t now() const { return now_; }
    const StackConfig &config(int h) const { return hosts_[h].config; }
    Endpoint addr(int h, uint16_t port) const { return Endpoint{hosts_[h].config.ip, port}; }

    // Called for every socket event, with the host it came from.
    std::function<void(int host, const SockEvent &)> on_event;
    // Called once per loop iteration after events (apps that poll).
    std::function<void()> on_tick;
    // True for a host whose events the test drains itself (through an
    // adapter such as ppe::MarsTransport); the loop then leaves them queued.
    bool own_events[2] = {false, false};

    // Runs until done() is true or `budget_ns` of virtual time passed.
    // Returns done()'s last value. Fails the current test (gtest) if the
    // stacks keep asking for work at the same instant without progress.
    bool run_until(const std::function<bool()> &done, uint64_t budget_ns);
    void run_for(uint64_t ns);
    // Does everything due now (deliveries, polls, events) without advancing time.
    void step_now();
    std::string stall_report() const { return stall_report_; }

  private:
    bool step_once(); // true when something happened
    FramePool pool_;
    Host hosts_[2];
    std::unique_ptr<Link> links_[2];
    uint64_t now_ = 1'000'000; // start away from zero: zero timestamps are special in places
    std::string stall_report_;
};

const char *state_name(TcpState s);

} // namespace mars::sim
