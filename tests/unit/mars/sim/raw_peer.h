// tests/unit/mars/sim/raw_peer.h: TEST FIXTURE. One mars::Stack whose peer is
// played by the test: crafted frames go in through Stack::input, everything
// the stack transmits is captured and parsed. For conformance tests of odd
// cases (packetdrill style), malformed-frame tests, the fuzz target and the
// benchmarks. Virtual time only.
#pragma once

#include "frame.h"
#include "sim_wire.h"

#include <map>
#include <memory>
#include <vector>

namespace mars::sim {

class RawPeer {
  public:
    struct Options {
        StackConfig stack = test_stack_config(1);
        uint32_t ring_slots = 64;
        uint32_t pool_frames = 4096;
        uint32_t offloads = 0;
        // Answer the stack's ARP requests for the peer at once.
        bool auto_arp = true;
        // Teach the stack the peer's MAC at start with an ARP request.
        bool introduce = true;
        // Parse captured frames (off for benchmarks: they are just released).
        bool capture = true;
        // open_passive() waits this long before its final ACK, so the stack's
        // first RTT sample (and min RTT) is this round trip.
        uint64_t handshake_rtt_ns = 0;
        // Ring memory from elsewhere (benchmarks with very many idle
        // connections); nullptr: a RingPool of ring_slots slots.
        BufferProvider *provider = nullptr;
        // Keep tx_digest(): a hash of every byte the stack transmits (the
        // fuzz target's determinism check).
        bool digest = false;
        // Keep every transmitted frame's bytes (take_raw()).
        bool keep_raw = false;
    };
    RawPeer();
    explicit RawPeer(const Options &o);
    ~RawPeer();

    Stack &stack() { return *stack_; }
    // Destroys the stack now (to check that it returned every frame and ring).
    void destroy_stack() { stack_.reset(); }
    // Starts over as the constructor left things, keeping the frame pool, the
    // rings and the port (so one RawPeer serves many fuzz inputs): the stack
    // is reset (Stack::reset; created again after destroy_stack()), virtual
    // time, captured frames, events and tx_digest() start over, and the peer
    // introduces itself again.
    void restart();
    // Resets the stack now (Stack::reset): every frame and ring goes back.
    void reset_stack() { stack_->reset(); }
    // FNV-1a over the bytes of every frame transmitted since construction or
    // restart() (Options::digest; without it, a constant).
    uint64_t tx_digest() const { return digest_; }
    // Every frame transmitted since the last take, byte for byte (Options::keep_raw).
    std::vector<std::vector<uint8_t>> take_raw() { return std::move(raw_); }
    FramePool &pool() { return pool_; }
    RingPool &rings() { return *rings_; } // only without Options::provider
    // Stops (or resumes) parsing what the stack sends; frames are released at once.
    void set_capture(bool on) { opt_.capture = on; }
    // Stops (or resumes) keeping transmitted frames' bytes (Options::keep_raw).
    void set_keep_raw(bool on) { opt_.keep_raw = on; }
    SimPort &port() { return *port_; }
    static constexpr uint64_t kStartNs = 1'000'000'000;
    uint64_t now = kStartNs;

    MacAddr peer_mac = mac(2);
    uint32_t peer_ip = ipv4(198, 18, 0, 2);
    MacAddr stack_mac;
    uint32_t stack_ip;

    // Feeds a frame (flags: PacketFlags for the rx side), then polls.
    void inject(const std::vector<uint8_t> &frame, uint32_t flags = 0);
    void inject(const TcpSpec &s, uint32_t flags = 0) { inject(build_tcp(s), flags); }
    // Feeds frames without polling (burst input).
    void input_only(const std::vector<std::vector<uint8_t>> &frames, uint32_t flags = 0);
    // Feeds frames as received bursts (one input() call per 64 frames), without polling.
    void input_burst(const std::vector<std::vector<uint8_t>> &frames, uint32_t flags = 0);
    void poll();
    // Moves virtual time forward by ns, firing the stack's timers in order.
    void advance(uint64_t ns);

    // Captured frames (oldest first) since the last take.
    std::vector<Parsed> take();
    std::vector<Parsed> take_tcp();
    // Events seen so far, per socket (OR of bits); take_events() clears them.
    uint32_t events_of(SockId s) const;
    std::map<SockId, uint32_t> take_events();
    bool stalled() const { return stalled_; }

    // A connection as the peer sees it.
    struct Conn {
        uint16_t peer_port = 0, stack_port = 0;
        uint32_t peer_nxt = 0;  // next sequence number the peer sends
        uint32_t stack_nxt = 0; // next sequence number expected from the stack
        bool ts = false;        // timestamps negotiated
        uint32_t peer_tsval = 1000;
        uint32_t stack_tsval = 0; // last TSval seen from the stack (TSecr to echo)
        uint16_t window = 65535;
        uint32_t stack_window = 0; // last window the stack advertised (unscaled)
        uint8_t stack_wscale = 0;  // what the stack announced in its SYN / SYN-ACK
        uint16_t stack_mss = 0;
        SockId sock = kNoSock;
    };
    // A segment from the peer on c with its current seq/ack (and timestamps).
    TcpSpec seg(const Conn &c, uint8_t flags, std::vector<uint8_t> payload = {}) const;
    // Injects seg(c, ...) and advances c.peer_nxt.
    void send(Conn &c, uint8_t flags, std::vector<uint8_t> payload = {});
    // Updates c from a segment the stack sent on it (ack point, TSval, window).
    void observe(Conn &c, const Parsed &p) const;
    // Takes the captured TCP frames of connection c (others stay captured) and observes them.
    std::vector<Parsed> take_conn(Conn &c);

    // Opens a listener on port. Returns its id or kNoSock.
    SockId listen(uint16_t port, int backlog = 16, uint64_t user = 1);
    // Runs a three-way handshake from the peer to a listener and accepts the
    // connection. Returns the accepted id (kNoSock on failure, with *why set).
    SockId open_passive(SockId listener, uint16_t stack_port, uint16_t peer_port, Conn *c,
                        const TcpOptions &syn_opts, std::string *why);
    // Default SYN options: MSS 1460, SACK permitted, timestamps, wscale 7.
    static TcpOptions full_syn_options(uint32_t tsval);
    // Connects from the stack to the peer, which answers with SYN-ACK.
    SockId open_active(uint16_t peer_port, Conn *c, const TcpOptions &synack_opts, std::string *why);

  private:
    void start();
    void on_transmit(const PacketRef &f);
    void drain_pending();
    void drain_events();
    Options opt_;
    FramePool pool_;
    std::unique_ptr<RingPool> rings_;
    std::unique_ptr<SimPort> port_;
    std::unique_ptr<Stack> stack_;
    std::vector<Parsed> out_;
    std::vector<std::vector<uint8_t>> raw_;
    std::vector<std::vector<uint8_t>> pending_; // ARP replies to feed after the current call
    std::map<SockId, uint32_t> events_;
    bool stalled_ = false;
    static constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
    uint64_t digest_ = kFnvOffset;
};

} // namespace mars::sim
