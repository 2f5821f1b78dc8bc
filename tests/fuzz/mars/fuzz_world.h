// tests/fuzz/mars/fuzz_world.h: the world one fuzz input runs in — one
// mars::Stack, its frame pool, rings and port, and the peer's side of the
// fixture's sockets (fuzz_input.h) — made cheap to start over.
//
// It plays the peer exactly as sim::RawPeer does for the fuzz target (same
// frames, same calls, in the same order: the stack cannot tell them apart,
// and the replayer's digests are the same), without RawPeer's per-frame
// costs, which dominate under the sanitizers:
//   - what the stack transmits is not parsed into sim::Parsed; only the
//     numbers the target follows (the established connection's seq/ack) are
//     read, and the bytes are hashed only when a digest is asked for;
//   - the peer answers the stack's neighbour solicitations for its IPv6
//     address (peer_ip6) as it answers ARP, from the solicitation's bytes;
//   - events are drained into a fixed array (the target reads none);
//   - the setup (ARP, the peer's SYN and ACK, the active open) is built and
//     checked once; after that each restart() resets the stack and feeds it
//     the same frames, and checks that the stack answered with the same
//     bytes as the first time (so the sockets are in the same state): frame
//     by frame against the ones it kept, not by hashing them again.
#pragma once

#include "frame.h"
#include "frame6.h"
#include "sim_wire.h"

#include <memory>
#include <vector>

namespace mars::fuzz {

class FuzzWorld {
  public:
    // The peer's view of one of the fixture's connections.
    struct Conn {
        uint16_t peer_port = 0, stack_port = 0;
        uint32_t peer_nxt = 0;  // next sequence number the peer sends
        uint32_t stack_nxt = 0; // next sequence number expected from the stack
        SockId sock = kNoSock;
    };
    static constexpr uint64_t kStartNs = 1'000'000'000; // as sim::RawPeer
    const MacAddr peer_mac = sim::mac(2);
    const uint32_t peer_ip = sim::ipv4(198, 18, 0, 2);
    // The peer over IPv6 (issue 31): 2001:2::2, on the stack's prefix
    // (StackConfig::addr6[0], 2001:2::1/64 in the fuzz configuration).
    static constexpr Ip6Addr peer_ip6{{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};

    FuzzWorld(const StackConfig &config, uint32_t ring_slots, uint32_t pool_frames);
    ~FuzzWorld();
    FuzzWorld(const FuzzWorld &) = delete;
    FuzzWorld &operator=(const FuzzWorld &) = delete;

    // The fixture's initial state: the stack as created (reset when it ran
    // an input before), virtual time from kStartNs, the peer introduced by
    // ARP, the stack's IPv6 addresses (link-local, addr6[0]) through DAD, a
    // listener on port 80, an established connection (peer port 40000,
    // every option), one in SYN-SENT (to peer port 9000), a dual-stack UDP
    // socket on [::]:53 that joined 239.1.1.1, and the same three TCP
    // sockets over IPv6 between addr6[0] and peer_ip6 (listener6 on
    // [addr6[0]]:80, est6 from peer port 40000 with every option, syn_sent6
    // to [peer_ip6]:9000; the peer's MAC learnt by ND), and tw6: a second
    // IPv6 connection (peer port 40001) the stack closed first, in
    // TIME-WAIT for the fuzz configuration's 2 s.
    // digest: hash every byte transmitted from now on (tx_digest()).
    // false when the stack did not answer as it did the first time.
    bool restart(bool digest);

    Stack &stack() { return *stack_; }
    const StackConfig &config() const { return config_; }
    MacAddr stack_mac() const { return config_.mac; }
    uint32_t stack_ip() const { return config_.ip; }
    const Ip6Addr &stack_ip6() const { return config_.addr6[0].addr; }
    uint64_t now = kStartNs;
    SockId listener = kNoSock;
    Conn est, syn_sent;
    SockId listener6 = kNoSock; // bound to [stack_ip6()]:80 (an IPv6 listener: no IPv4 SYN reaches it)
    Conn est6, syn_sent6;
    uint32_t syn_sent6_iss = 0;
    Conn tw6; // in TIME-WAIT: its sock was closed (kNoSock); peer_nxt/stack_nxt after both FINs
    // A UDP socket bound to [::]:kUdpPort, dual-stack (IPv4 and IPv6), and a
    // member of kUdpGroup (issue 31) and of kUdpGroup6 (MLDv2).
    static constexpr uint16_t kUdpPort = 53;
    static constexpr uint32_t kUdpGroup = 0xef010101u; // 239.1.1.1
    static constexpr Ip6Addr kUdpGroup6{{0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}}; // ff0e::1:1
    SockId udp = kNoSock;
    uint32_t syn_sent_iss = 0;

    // The first n frames of `frames` as received bursts (one Stack::input per
    // 64), each in a block that ends, for AddressSanitizer, at the frame's
    // last byte (sim::FramePool::get_exact: reads past its end are reported).
    void input_burst(const std::vector<std::vector<uint8_t>> &frames, size_t n, uint32_t flags);
    // Buffers for an input's records, kept from one input to the next: under
    // the sanitizers every allocation costs (a fill, fresh pages while the
    // quarantine holds the freed ones), and these copies need no exact size
    // (input_burst copies each frame into a block of its own).
    std::vector<std::vector<uint8_t>> record_buffers;
    std::vector<uint8_t> current_record;
    // Stack::poll, then the peer's ARP replies, then the events drained.
    void poll();
    // After a setup frame: poll() only when the peer has ARP replies or NAs
    // to feed. Stack::input transmits its answers itself, and with virtual
    // time standing still a poll fires nothing (the setup's frames and the
    // replayer's digests are the same with or without it).
    void settle();
    // Virtual time forward by ns, every timer fired at its due time.
    void advance(uint64_t ns);
    // Follows the established connections (est, est6) from what the stack
    // sent on them since the last call (as RawPeer's take_conn + the
    // target's observe).
    void observe();
    // The application: accept, read all, send 3000 bytes on every socket;
    // read the UDP socket's datagrams and send one.
    void app_acts();
    // Stack::reset() now: every frame and ring must come back.
    void reset_stack();
    uint64_t tx_digest() const { return digest_; }
    sim::FramePool &pool() { return pool_; }
    sim::RingPool &rings() { return rings_; }

  private:
    struct Seen { // one TCP segment the stack sent on an established connection
        Conn *conn;   // &est or &est6
        uint8_t flags;
        uint32_t seq, ack, seg_len;
    };
    void seen_tcp(Conn *c, const uint8_t *tcp, size_t tcp_len);
    void on_transmit(const PacketRef &f);
    void input_one(const uint8_t *bytes, size_t len);
    void drain_events();
    bool first_setup();
    bool replay_setup();

    const StackConfig config_;
    sim::FramePool pool_;
    sim::RingPool rings_;
    sim::SimPort port_;
    std::unique_ptr<Stack> stack_;
    bool stack_clean_ = true; // as created or just reset
    bool hashing_ = true;
    uint64_t digest_ = 0;
    std::vector<Seen> seen_;
    // ARP replies and NAs to feed after the current call: the first
    // n_replies_ of arp_replies_ (buffers reused, as arp_batch_'s).
    std::vector<std::vector<uint8_t>> arp_replies_;
    std::vector<std::vector<uint8_t>> arp_batch_;
    size_t n_replies_ = 0;
    void queue_reply(const std::vector<uint8_t> &f);
    std::vector<uint8_t> na_; // the last NA built, for the solicitation's source MAC and address na_key_
    uint8_t na_key_[22] = {};
    std::vector<SockId> accepted_;
    std::vector<std::vector<uint8_t>> captured_; // the stack's frames, during first_setup() only
    bool capturing_ = false;
    // The setup, recorded by first_setup().
    std::vector<uint8_t> introduce_, syn_, ack_, syn6_, ack6_, tw_syn_, tw_ack_, tw_fin_;
    uint64_t setup_digest_ = 0;
    // Every frame the stack transmitted during first_setup(), in order; a
    // replayed setup must transmit exactly these (on_transmit compares).
    std::vector<std::vector<uint8_t>> setup_tx_;
    bool recording_setup_ = false, checking_setup_ = false, setup_same_ = true;
    size_t setup_at_ = 0;
    SockId listener0_ = kNoSock;
    SockId udp0_ = kNoSock;
    bool open_udp(); // the UDP socket (udp), then a poll (its IGMP report)
    void dad();      // the stack's IPv6 addresses through DAD (announce, a second on)
    bool first_setup6();
    bool replay_setup6();
    bool first_time_wait6(const sim::TcpSpec &syn);
    bool replay_time_wait6();
    Conn est0_, syn_sent0_, est60_, syn_sent60_, tw60_;
    SockId listener60_ = kNoSock;
    uint32_t syn_sent_iss0_ = 0, syn_sent6_iss0_ = 0;
    bool recorded_ = false;
};

} // namespace mars::fuzz
