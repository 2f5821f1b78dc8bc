// benchmarks/ppe/engine_driver.cc: the engine side of eta-ppe on an in-memory
// wire, for benchmarks/ppe/engine-instructions to count the engine's
// instructions per packet with callgrind. Deterministic: one thread, virtual
// time, no NIC, no root.
//
// What runs is what ppe::Engine::poll_once() runs for one port (ppe/src/engine.cc):
// a receive burst into the MARS stack (Stack::input), the DTI engine's pass
// over the application's command queue, transport events, socket table and
// completions (dti::engine::Server::poll), then the stack's timers and
// output (Stack::poll). The stack is configured from ppe::Config's defaults,
// the DTI engine from ppe::dti_limits(), the two joined by ppe::MarsTransport
// and ppe::DtiBuffers exactly as eta-ppe joins them. Only the port differs:
// instead of rte_eth_rx/tx_burst on net_af_packet, frames move by reference
// through a queue in memory (namespace wire, a TEST FIXTURE frame pool); the
// script reports those calls apart as the device's cost.
//
// The application plays libdti by hand in its region (reads the receive
// ring, RECV_RELEASE, writes the send ring, SEND with DTI_SEND_TAIL as libdti
// queues it); the remote host is a second MARS stack. Neither is counted:
// callgrind collects only inside measured_engine_poll(), which the driver
// calls only in the measured phase (a warm-up phase before it runs the same
// code uncounted).
//
//   ppe_engine_driver MODE N [offload 0|1|2 [LATENCY_SAMPLE]]
//     MODE rr:        N request/response transactions of 64 B each way
//     MODE rr6:       the same over IPv6 (both stacks with an address6, DAD
//                     done before the first transaction; a [::] listener)
//     MODE rx:        a stream from the peer, at least N data segments received
//     MODE tx:        a stream to the peer, at least N data segments sent
//                     (whole engine polls: the count printed is what they moved)
//     MODE idle:      N engine polls with nothing to do
//     offload 1:      the port verifies received checksums and fills sent ones
//                     (a NIC with offloads); 0 (default): software, as on net_af_packet;
//                     2: as 1, and TSO frames cross the wire whole (LRO frames of up
//                     to 64 KiB at the receiver, as on the vnet port)
//     LATENCY_SAMPLE: the latency breakdown's sampling (ppe/src/latency_sampler.h),
//                     one in N frames received traced, 0 off; default: [engine]
//                     latency_sample's default. The loop stamps as eta-ppe's does,
//                     with the TSC (the time read as TscClock reads it).
//
// Every byte is checked at its receiver against the stream it was sent from;
// any difference, a lost transaction or a stall fails the run (exit 1).
// Prints one line, what the measured phase did, for the script to divide by:
// "mode M offload O units U polls P frames_in F payload_in B frames_out F
// data_frames_out F payload_out B" (units: transactions, data segments in
// or out, or polls).
#include "config.h"
#include "engine.h"
#include "latency_sampler.h"
#include "sim_wire.h"
#include "transport.h"

#include "dti_abi.h"

#include <rte_cycles.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace wire {

// One direction of the cable: frames handed over by reference (both ports
// share one pool). Fixed capacity, so the cable allocates nothing.
class Queue {
  public:
    bool push(const mars::PacketRef &f)
    {
        if (tail_ - head_ == kSlots) return false;
        q_[tail_++ % kSlots] = f;
        return true;
    }
    __attribute__((noinline)) uint16_t pop(mars::PacketRef *out, uint16_t n, uint32_t rx_flags)
    {
        uint16_t k = 0;
        while (k < n && head_ != tail_) {
            out[k] = q_[head_++ % kSlots];
            // A NIC with receive offload flags the sums it verified; both
            // stacks here send correct ones (the transmit side fills them).
            out[k].flags = rx_flags ? mars::kRxIpCsumGood | mars::kRxL4CsumGood : 0;
            k++;
        }
        return k;
    }
    bool empty() const { return head_ == tail_; }

  private:
    static constexpr uint32_t kSlots = 8192;
    mars::PacketRef q_[kSlots];
    uint32_t head_ = 0, tail_ = 0;
};

// A port on the cable: what ppe::MbufIo does with rte_eth_* and the mempool.
class Port final : public mars::PacketIo {
  public:
    Port(mars::sim::FramePool &pool, Queue &out, uint32_t offloads) : pool_(pool), out_(out), offloads_(offloads) {}
    uint16_t alloc(mars::PacketRef *out, uint16_t n) override
    {
        uint16_t k = 0;
        while (k < n && pool_.get(&out[k])) k++;
        return k;
    }
    uint16_t transmit(mars::PacketRef *frames, uint16_t n) override
    {
        for (uint16_t i = 0; i < n; i++) {
            mars::PacketRef &f = frames[i];
            // LRO (offload 2): a TSO frame crosses whole, as the vnet port's
            // GSO frames do, and arrives as one LRO frame whose checksums
            // the receiving port vouches for.
            if (f.flags & mars::kTxTcpSeg) f.flags = 0;
            else mars::sim::apply_tx_offload(f); // the NIC's work where the stack asked for it
            if (const uint32_t p = tcp_payload(f)) {
                payload_frames++;
                payload_bytes += p;
            }
            if (!out_.push(f)) {
                pool_.put(f);
                dropped++;
            }
        }
        sent += n;
        return n;
    }
    void release(mars::PacketRef *frames, uint16_t n) override
    {
        for (uint16_t i = 0; i < n; i++) pool_.put(frames[i]);
    }
    uint32_t offloads() const override { return offloads_; }
    uint32_t tso_max_frame() const override { return (offloads_ & mars::kOffloadTxTcpSeg) ? 65000 : 0; }
    uint16_t alloc_tso(mars::PacketRef *out, uint16_t n) override
    {
        return (offloads_ & mars::kOffloadTxTcpSeg) ? alloc(out, n) : 0;
    }

    // TCP payload bytes of an IPv4 or IPv6 frame (0 for anything else; an
    // IPv6 one: no extension header, as MARS sends them).
    static uint32_t tcp_payload(const mars::PacketRef &f)
    {
        if (f.len >= 14 + 40 + 20 && f.data[12] == 0x86 && f.data[13] == 0xdd && f.data[20] == 6) {
            const uint32_t pl = uint32_t(f.data[18]) << 8 | f.data[19];
            const uint32_t doff = (f.data[14 + 40 + 12] >> 4) * 4u;
            return pl > doff ? pl - doff : 0;
        }
        if (f.len < 14 + 20 + 20 || f.data[12] != 0x08 || f.data[13] != 0x00 || f.data[23] != 6) return 0;
        const uint32_t ihl = (f.data[14] & 0xfu) * 4u;
        const uint32_t ip_len = uint32_t(f.data[16]) << 8 | f.data[17];
        const uint32_t doff = (f.data[14 + ihl + 12] >> 4) * 4u;
        return ip_len > ihl + doff ? ip_len - ihl - doff : 0;
    }
    uint64_t sent = 0, payload_frames = 0, payload_bytes = 0, dropped = 0;

  private:
    mars::sim::FramePool &pool_;
    Queue &out_;
    uint32_t offloads_;
};

} // namespace wire

namespace {

namespace de = dti::engine;

// offload 0: none; 1: checksums; 2: checksums and TSO frames crossing whole
// (LRO frames at the receiver, as on the vnet port).
uint32_t offload_bits(int offload)
{
    uint32_t b = offload ? mars::kOffloadRxCsum | mars::kOffloadTxIpCsum | mars::kOffloadTxTcpCsum : 0;
    if (offload >= 2) b |= mars::kOffloadTxTcpSeg;
    return b;
}

constexpr uint32_t kEngineIp = 0xc6120001u; // 198.18.0.1 (lab addresses, never on a real wire)
constexpr uint32_t kPeerIp = 0xc6120002u;   // 198.18.0.2
constexpr uint16_t kPort = 5000;
// rr6: 2001:2::1 and ::2 (RFC 5180's benchmarking prefix), /64.
constexpr mars::Ip6Addr kEngineIp6{{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
constexpr mars::Ip6Addr kPeerIp6{{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};
bool g_ip6 = false; // rr6
constexpr uint64_t kStepNs = 5'000; // virtual time per round
constexpr uint64_t kRequestSeed = 21, kResponseSeed = 22, kStreamSeed = 23;

[[noreturn]] void fail(const std::string &why)
{
    std::fprintf(stderr, "ppe_engine_driver: %s\n", why.c_str());
    std::exit(1);
}

// The application side of a region in plain memory (what libdti does,
// written by hand; tests/unit/dti/engine_test.cc does the same).
struct App {
    std::vector<uint8_t> mem;
    dti_region_header *hdr = nullptr;
    uint32_t tag = 0;
    explicit App(const de::Limits &l)
    {
        const uint64_t size = de::region_bytes(l);
        if (!size) fail("the DTI limits are unusable");
        mem.assign(size + 64, 0);
        uint8_t *base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
        de::layout_region(base, size, l);
        hdr = reinterpret_cast<dti_region_header *>(base);
    }
    uint8_t *base() { return reinterpret_cast<uint8_t *>(hdr); }
    dti_qp_header *qp() { return reinterpret_cast<dti_qp_header *>(base() + hdr->ctx_offset); }
    dti_cmd *cmds() { return reinterpret_cast<dti_cmd *>(reinterpret_cast<uint8_t *>(qp()) + sizeof(dti_qp_header)); }
    dti_ev *evs() { return reinterpret_cast<dti_ev *>(reinterpret_cast<uint8_t *>(cmds()) + sizeof(dti_cmd) * hdr->cmdq_entries); }
    dti_sock_shared *sock(uint32_t h) { return reinterpret_cast<dti_sock_shared *>(base() + hdr->sock_offset) + (h & DTI_SLOT_MASK); }
    uint8_t *rx_ring(uint32_t h) { return base() + hdr->data_offset + uint64_t(hdr->data_stride) * (h & DTI_SLOT_MASK); }
    uint8_t *tx_ring(uint32_t h) { return rx_ring(h) + hdr->rx_ring_size; }

    uint32_t push(dti_cmd c)
    {
        if (c.op != DTI_OP_SEND && c.op != DTI_OP_RECV_RELEASE) c.tag = tag++ % hdr->cmdq_entries;
        dti_qp_header *h = qp();
        if (h->cmd_prod - __atomic_load_n(&h->cmd_cons, __ATOMIC_ACQUIRE) >= hdr->cmdq_entries)
            fail("the command queue is full");
        dti_cmd *slot = &cmds()[h->cmd_prod & (hdr->cmdq_entries - 1)];
        c.stamp = 0;
        *slot = c;
        __atomic_store_n(&slot->stamp, h->cmd_prod + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&h->cmd_prod, h->cmd_prod + 1, __ATOMIC_SEQ_CST);
        return c.tag;
    }
    // Takes every event; completions are kept in `done` for run().
    std::vector<dti_ev> done;
    void take()
    {
        dti_qp_header *h = qp();
        const uint32_t prod = __atomic_load_n(&h->ev_prod, __ATOMIC_ACQUIRE);
        while (h->ev_cons != prod) {
            const dti_ev &e = evs()[h->ev_cons & (hdr->evq_entries - 1)];
            if (e.kind == DTI_CQE_COMPLETION) done.push_back(e);
            __atomic_store_n(&h->ev_cons, h->ev_cons + 1, __ATOMIC_RELEASE);
        }
    }
};

dti_cmd cmd(uint16_t op, uint32_t sock, uint32_t a0 = 0, uint32_t a1 = 0)
{
    dti_cmd c{};
    c.op = op;
    c.sock = sock;
    c.arg0 = a0;
    c.arg1 = a1;
    return c;
}

// The latency sampler's clock, as ppe::TscClock::now_ns computes it (one
// rdtsc and a 128-bit multiply), at a nominal 2 GHz: the driver's time is
// virtual, only the instructions count.
uint64_t driver_clock(const void *)
{
    return uint64_t((static_cast<ppe::u128>(rte_rdtsc()) * ((uint64_t(1'000'000'000) << 32) / 2'000'000'000)) >> 32);
}
int64_t g_latency_sample = -1; // -1: ppe::Config's default

// Everything on the engine's side of the cable.
struct EngineSide {
    ppe::Config config;
    ppe::DtiBuffers rings;
    wire::Port port;
    std::unique_ptr<mars::Stack> stack;
    mars::Stack *stack_ptr = nullptr;
    uint64_t now = 1'000'000'000;
    std::unique_ptr<ppe::MarsTransport> transport;
    std::unique_ptr<de::Server> dti;
    de::Limits limits;
    wire::Queue &in;
    uint32_t rx_flags;
    ppe::LatencySampler latency;

    EngineSide(mars::sim::FramePool &pool, wire::Queue &in_q, wire::Queue &out_q, int offload)
        : port(pool, out_q, offload_bits(offload)),
          in(in_q), rx_flags(offload ? 1 : 0)
    {
        mars::StackConfig sc;
        sc.mac = mars::MacAddr{{0x02, 0, 0, 0, 0xee, 0x01}};
        sc.ip = kEngineIp;
        sc.prefix = 24;
        sc.max_sockets = config.max_sockets;
        sc.ooo_pool_frames = config.ooo_pool_frames;
        sc.ooo_frames_per_conn = config.ooo_frames_per_conn;
        sc.isn_secret[0] = 0x243f6a8885a308d3ull; // fixed: the run is deterministic
        sc.isn_secret[1] = 0x13198a2e03707344ull;
        sc.tcp = config.tcp;
        sc.strands = config.strands;
        sc.prefetch = config.prefetch;
        if (g_ip6) {
            sc.addr6[0] = mars::Ip6Prefix{kEngineIp6, 64};
            sc.n_addr6 = 1;
        }
        std::string err;
        stack = mars::Stack::create(sc, port, rings, &err);
        if (!stack) fail("engine stack: " + err);
        stack_ptr = stack.get();
        transport = std::make_unique<ppe::MarsTransport>(stack_ptr, now);
        limits = ppe::dti_limits(config);
        limits.max_sockets = 4; // the region holds the few sockets used here
        limits.app_ip = kEngineIp;
        dti = de::Server::create(*transport, limits, &err);
        if (!dti) fail("DTI engine: " + err);
        rings.engine = dti.get();
        latency.setup(&dti->trace(), nullptr, g_latency_sample >= 0 ? uint64_t(g_latency_sample) : config.latency_sample,
                      &port.sent, driver_clock, nullptr);
    }
    ~EngineSide()
    {
        rings.engine = nullptr; // the stack hands rings back as it goes, after the engine
        dti.reset();
    }
};

// One pass of ppe::Engine::poll_once() for a single port (no steering, no
// io_uring: no application sleeps here).
inline unsigned engine_poll_body(EngineSide &e)
{
    mars::PacketRef burst[32];
    unsigned work = 0;
    const uint16_t n = e.in.pop(burst, 32, e.rx_flags);
    if (n) { // as receive_all: the countdown only where frames came
        if (!e.latency.due(n)) [[likely]] e.stack->input(burst, n, e.now);
        else e.latency.input_sampled(true, n, [&] { e.stack->input(burst, n, e.now); });
    }
    work += n;
    const bool traced = e.latency.on();
    uint64_t t_poll = 0;
    if (traced) [[unlikely]] t_poll = e.latency.before_dti();
    work += e.dti->poll();
    if (traced) [[unlikely]] e.latency.after_dti(t_poll, !e.dti->wakeups().empty());
    if (traced) [[unlikely]] e.latency.before_output();
    e.stack->poll(e.now);
    if (traced) [[unlikely]] e.latency.after_output();
    return work;
}

// The counted region (callgrind --toggle-collect). noipa: neither inlined nor
// folded with its uncounted twin (identical code would share one address).
__attribute__((noipa)) unsigned measured_engine_poll(EngineSide &e) { return engine_poll_body(e); }
__attribute__((noipa)) unsigned warmup_engine_poll(EngineSide &e) { return engine_poll_body(e); }

struct PeerSide {
    mars::sim::RingPool rings{4, 1 << 20, 1 << 20};
    wire::Port port;
    std::unique_ptr<mars::Stack> stack;
    wire::Queue &in;
    mars::SockId sock = 0;
    uint32_t rx_flags;

    PeerSide(mars::sim::FramePool &pool, wire::Queue &in_q, wire::Queue &out_q, int offload)
        : port(pool, out_q, offload_bits(offload)),
          in(in_q), rx_flags(offload ? 1 : 0)
    {
        mars::StackConfig c = mars::sim::test_stack_config(2);
        c.tcp.rcvbuf = c.tcp.sndbuf = 1 << 20;
        if (g_ip6) {
            c.addr6[0] = mars::Ip6Prefix{kPeerIp6, 64};
            c.n_addr6 = 1;
        }
        std::string err;
        stack = mars::Stack::create(c, port, rings, &err);
        if (!stack) fail("peer stack: " + err);
    }
    void step(uint64_t now)
    {
        mars::PacketRef burst[32];
        uint16_t n;
        while ((n = in.pop(burst, 32, rx_flags)) > 0) stack->input(burst, n, now);
        stack->poll(now);
        mars::SockEvent evs[64];
        while (stack->events(evs, 64)) {}
    }
};

class Driver {
  public:
    Driver(int offload)
        : pool_(offload >= 2 ? 2048 : 16384, offload >= 2 ? 65535 : 2048), eng_(pool_, to_engine_, to_peer_, offload), peer_(pool_, to_peer_, to_engine_, offload)
    {
        if (eng_.dti->attach_memory(app_.base(), app_.hdr->region_size, 1) < 0) fail("the DTI engine refused the region");
    }

    // Runs a command to its completion; returns the completion.
    dti_ev run(dti_cmd c)
    {
        const uint32_t tag = app_.push(c);
        dti_ev got{};
        bool found = false;
        for (int round = 0; round < 1000; round++) {
            round_trip(false);
            for (const dti_ev &e : app_.done)
                if (e.events == tag) got = e, found = true;
            app_.done.clear();
            if (found) return got;
        }
        fail("command " + std::to_string(c.op) + " never completed");
    }

    void connect()
    {
        const dti_ev s = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID));
        if (s.res < 0) fail("SOCKET failed");
        const uint32_t l = uint32_t(s.res);
        if (g_ip6) {
            // Both stacks' addresses through duplicate address detection
            // (a second), as eta-ppe waits for before READY; then [::].
            eng_.stack->announce(eng_.now);
            peer_.stack->announce(eng_.now);
            for (int i = 0; i < 4; i++) {
                eng_.now += 500'000'000;
                round_trip(false);
            }
            if (eng_.stack->addrs6_tentative() || peer_.stack->addrs6_tentative()) fail("DAD did not end");
            dti_cmd b = cmd(DTI_OP_BIND6, l, 0, kPort);
            const uint8_t any[16] = {};
            dti_cmd_addr6_set(&b, any);
            if (run(b).res != 0) fail("BIND6 failed");
        } else if (run(cmd(DTI_OP_BIND, l, 0, kPort)).res != 0) {
            fail("BIND failed");
        }
        if (run(cmd(DTI_OP_LISTEN, l, 8, 0)).res != 0) fail("LISTEN failed");
        mars::Stack &p = *peer_.stack;
        const int64_t c = p.open(9);
        if (c < 0 || (g_ip6 ? p.connect6(mars::SockId(c), {kEngineIp6, kPort}, eng_.now)
                            : p.connect(mars::SockId(c), {kEngineIp, kPort}, eng_.now)) != 0)
            fail("the peer cannot connect");
        peer_.sock = mars::SockId(c);
        const dti_ev a = run(cmd(DTI_OP_ACCEPT, l, 1, DTI_ACCEPT_WAIT));
        if (a.res != 1) fail("ACCEPT failed");
        h_ = a.accepted[0];
        rx_ring_ = app_.hdr->rx_ring_size;
        // The header's tx_ring_size is what each slot reserves (ABI 9); the
        // ring itself is the socket's tx_size, chosen when its rings came.
        tx_ring_ = __atomic_load_n(&app_.sock(h_)->tx_size, __ATOMIC_ACQUIRE);
        if (tx_ring_ == 0 || (tx_ring_ & (tx_ring_ - 1)) || tx_ring_ > app_.hdr->tx_ring_size)
            fail("the accepted socket has no valid send ring size");
    }

    // One round: the peer, the engine, the application (the engine's poll counted or not).
    unsigned round_trip(bool measured)
    {
        peer_.step(eng_.now);
        const unsigned w = measured ? measured_engine_poll(eng_) : warmup_engine_poll(eng_);
        if (measured) polls_++;
        eng_.now += kStepNs;
        app_.take();
        return w;
    }

    // An engine poll with nothing else in the round.
    unsigned engine_only(bool measured)
    {
        const unsigned w = measured ? measured_engine_poll(eng_) : warmup_engine_poll(eng_);
        if (measured) polls_++;
        eng_.now += kStepNs;
        return w;
    }

    // -- the application, reading and writing its rings as libdti does --
    uint32_t readable() { return __atomic_load_n(&app_.sock(h_)->rx_tail, __ATOMIC_ACQUIRE) - rx_head_; }
    // Reads n bytes, checks them against stream `seed` at offset `at`, releases them.
    void app_read(uint32_t n, uint64_t seed, uint64_t at)
    {
        std::vector<uint8_t> &buf = scratch_;
        buf.resize(n);
        const uint8_t *ring = app_.rx_ring(h_);
        const uint32_t base = app_.sock(h_)->rx_base;
        for (uint32_t i = 0; i < n; i++) buf[i] = ring[(base + rx_head_ + i) & (rx_ring_ - 1)];
        const size_t bad = mars::sim::pattern_check(seed, at, buf.data(), n);
        if (bad != n) fail("the application read a wrong byte at stream offset " + std::to_string(at + bad));
        rx_head_ += n;
        app_.push(cmd(DTI_OP_RECV_RELEASE, h_, n));
    }
    uint32_t writable() { return tx_ring_ - (tx_tail_ - __atomic_load_n(&app_.sock(h_)->tx_head, __ATOMIC_ACQUIRE)); }
    // Writes n bytes of stream `seed` from offset `at` and queues a SEND (as libdti: one SEND until the engine took it).
    void app_write(uint32_t n, uint64_t seed, uint64_t at)
    {
        std::vector<uint8_t> &buf = scratch_;
        buf.resize(n);
        mars::sim::pattern_fill(seed, at, buf.data(), n);
        uint8_t *ring = app_.tx_ring(h_);
        const uint32_t base = app_.sock(h_)->tx_base;
        for (uint32_t i = 0; i < n; i++) ring[(base + tx_tail_ + i) & (tx_ring_ - 1)] = buf[i];
        tx_tail_ += n;
        dti_sock_shared *s = app_.sock(h_);
        __atomic_store_n(&s->tx_written, tx_tail_, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&s->tx_noted, __ATOMIC_SEQ_CST) == 0) {
            __atomic_store_n(&s->tx_noted, 1u, __ATOMIC_SEQ_CST);
            app_.push(cmd(DTI_OP_SEND, h_, n, DTI_SEND_TAIL));
        }
    }
    // The peer reads what it has; checks it against stream `seed` from *at.
    void peer_read(uint64_t seed, uint64_t *at)
    {
        uint8_t buf[65536];
        int64_t r;
        while ((r = peer_.stack->recv(peer_.sock, buf, sizeof buf)) > 0) {
            const size_t bad = mars::sim::pattern_check(seed, *at, buf, size_t(r));
            if (bad != size_t(r)) fail("the peer read a wrong byte at stream offset " + std::to_string(*at + bad));
            *at += uint64_t(r);
        }
    }
    // The peer sends what fits of stream `seed` from *at, up to `end`.
    void peer_write(uint64_t seed, uint64_t *at, uint64_t end)
    {
        uint8_t buf[65536];
        while (*at < end) {
            const size_t n = size_t(std::min<uint64_t>(sizeof buf, end - *at));
            mars::sim::pattern_fill(seed, *at, buf, n);
            const int64_t w = peer_.stack->send(peer_.sock, buf, n);
            if (w <= 0) break;
            *at += uint64_t(w);
        }
    }

    // -- the modes --
    // One transaction: the request reaches the application, the response the peer.
    void transaction(bool measured, uint64_t i)
    {
        constexpr uint32_t kMsg = 64;
        uint64_t sent = i * kMsg, got = i * kMsg;
        peer_write(kRequestSeed, &sent, (i + 1) * kMsg);
        if (sent != (i + 1) * kMsg) fail("the peer could not send request " + std::to_string(i));
        int rounds = 0;
        while (readable() < kMsg)
            if (round_trip(measured), ++rounds > 100) fail("request " + std::to_string(i) + " never arrived");
        app_read(kMsg, kRequestSeed, i * kMsg);
        app_write(kMsg, kResponseSeed, i * kMsg);
        for (rounds = 0; got < (i + 1) * kMsg; rounds++) {
            if (rounds > 100) fail("response " + std::to_string(i) + " never arrived");
            round_trip(measured);
            peer_.step(eng_.now); // the response in at the peer now: no engine poll waits for it
            peer_read(kResponseSeed, &got);
        }
        if (got != (i + 1) * kMsg) fail("response " + std::to_string(i) + " has extra bytes");
    }

    // Receive stream: the peer keeps its send buffer full; the application
    // reads and releases everything each round. Runs until `segments`
    // full segments reached the engine in measured rounds.
    template <typename F, typename G>
    void stream_rx(uint64_t warm_bytes, uint64_t measure_frames, F start, G stop)
    {
        for (bool measured : {false, true}) {
            if (measured) start();
            const uint64_t frames0 = frames_in();
            uint64_t rounds = 0;
            while (measured ? frames_in() - frames0 < measure_frames : rx_at_ < warm_bytes) {
                if (++rounds > 100 * (measure_frames + warm_bytes / 1000)) fail("the receive stream stalled");
                peer_write(kStreamSeed, &peer_at_, peer_at_ + (4u << 20));
                round_trip(measured);
                if (const uint32_t n = readable()) {
                    app_read(n, kStreamSeed, rx_at_);
                    rx_at_ += n;
                }
            }
            if (measured) stop();
        }
        // Everything the peer sent arrives, byte-exact, once it stops sending.
        for (int rounds = 0; rx_at_ < peer_at_; rounds++) {
            if (rounds > 100000) fail("the receive stream's tail never arrived");
            round_trip(false);
            if (const uint32_t n = readable()) {
                app_read(n, kStreamSeed, rx_at_);
                rx_at_ += n;
            }
        }
    }

    // Send stream: the application keeps the send ring full; the peer reads.
    template <typename F, typename G>
    void stream_tx(uint64_t warm_bytes, uint64_t measure_frames, F start, G stop)
    {
        for (bool measured : {false, true}) {
            if (measured) start();
            const uint64_t frames0 = eng_.port.payload_frames;
            uint64_t rounds = 0;
            while (measured ? eng_.port.payload_frames - frames0 < measure_frames : peer_got_ < warm_bytes) {
                if (++rounds > 100 * (measure_frames + warm_bytes / 1000)) fail("the send stream stalled");
                if (const uint32_t room = writable()) {
                    app_write(room, kStreamSeed, tx_at_);
                    tx_at_ += room;
                }
                round_trip(measured);
                peer_read(kStreamSeed, &peer_got_);
            }
            if (measured) stop();
        }
        // Everything sent arrives, byte-exact, once the application stops.
        for (int rounds = 0; peer_got_ < tx_at_; rounds++) {
            if (rounds > 100000) fail("the send stream's tail never arrived");
            round_trip(false);
            peer_read(kStreamSeed, &peer_got_);
        }
    }

    uint64_t frames_in() const { return peer_.port.sent; }
    uint64_t polls() const { return polls_; }
    EngineSide &engine() { return eng_; }
    PeerSide &peer() { return peer_; }
    void reset_polls() { polls_ = 0; }

  private:
    mars::sim::FramePool pool_;
    wire::Queue to_engine_, to_peer_;
    EngineSide eng_;
    PeerSide peer_;
    App app_{eng_.limits};
    uint32_t h_ = 0, rx_ring_ = 0, tx_ring_ = 0;
    uint32_t rx_head_ = 0, tx_tail_ = 0;
    uint64_t rx_at_ = 0, peer_at_ = 0, tx_at_ = 0, peer_got_ = 0;
    uint64_t polls_ = 0;
    std::vector<uint8_t> scratch_;
};

} // namespace

int main(int argc, char **argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s rr|rr6|rx|tx|idle N [offload 0|1|2 [LATENCY_SAMPLE]]\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1];
    g_ip6 = mode == "rr6";
    const long n = std::strtol(argv[2], nullptr, 10);
    if (n < 1 || n > 10'000'000) fail("N must be 1..10000000");
    const int offload = argc > 3 ? std::atoi(argv[3]) : 0;
    if (argc > 4) g_latency_sample = std::strtol(argv[4], nullptr, 10);
    if (argc > 4 && g_latency_sample < 0) fail("LATENCY_SAMPLE must be 0 (off) or more");
    if (mode != "rr" && mode != "rr6" && mode != "rx" && mode != "tx" && mode != "idle")
        fail("unknown mode '" + mode + "' (rr, rr6, rx, tx, idle)");

    Driver d(offload);
    d.connect();
    const wire::Port &in = d.peer().port, &out = d.engine().port; // frames in = what the peer sent
    uint64_t polls = 0, in_data = 0, in_frames = 0, in_bytes = 0, out_frames = 0, out_bytes = 0, out_all = 0;
    // The measured phase's traffic; `start` marks where it begins.
    auto start = [&] {
        d.reset_polls();
        in_data = in.payload_frames, in_frames = in.sent, in_bytes = in.payload_bytes, out_frames = out.payload_frames;
        out_bytes = out.payload_bytes, out_all = out.sent;
    };
    auto stop = [&] {
        polls = d.polls();
        in_data = in.payload_frames - in_data, in_frames = in.sent - in_frames, in_bytes = in.payload_bytes - in_bytes;
        out_frames = out.payload_frames - out_frames, out_bytes = out.payload_bytes - out_bytes;
        out_all = out.sent - out_all;
    };
    uint64_t units = uint64_t(n);
    if (mode == "rr" || mode == "rr6") {
        constexpr uint64_t kWarm = 200;
        for (uint64_t i = 0; i < kWarm; i++) d.transaction(false, i);
        start();
        for (uint64_t i = kWarm; i < kWarm + uint64_t(n); i++) d.transaction(true, i);
        stop();
    } else if (mode == "rx") {
        d.stream_rx(4u << 20, uint64_t(n), start, stop);
        units = in_data;
    } else if (mode == "tx") {
        d.stream_tx(4u << 20, uint64_t(n), start, stop);
        units = out_frames;
    } else {
        for (long i = 0; i < 1000; i++) d.engine_only(false);
        start();
        for (long i = 0; i < n; i++)
            if (d.engine_only(true)) fail("an idle poll found work");
        stop();
    }
    if (in.dropped || out.dropped) fail("the cable dropped frames (its queue is too short)");
    const ppe::stats::LatencyCounters &lc = d.engine().latency.block().c;
    std::printf("mode %s offload %d units %llu polls %llu frames_in %llu payload_in %llu frames_out %llu "
                "data_frames_out %llu payload_out %llu latency_sample %llu latency_traces %llu latency_completed %llu\n",
                mode.c_str(), int(offload), (unsigned long long)units, (unsigned long long)polls,
                (unsigned long long)in_frames, (unsigned long long)in_bytes, (unsigned long long)out_all,
                (unsigned long long)out_frames, (unsigned long long)out_bytes, (unsigned long long)lc.sample_every,
                (unsigned long long)lc.traces, (unsigned long long)lc.completed);
    return 0;
}
