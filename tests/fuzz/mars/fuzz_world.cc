// tests/fuzz/mars/fuzz_world.cc: see fuzz_world.h. Every step mirrors
// sim::RawPeer (raw_peer.cc) as the fuzz target used it, so that the stack
// sees the same frames and calls in the same order.
#include "fuzz_world.h"

#include "raw_peer.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace mars::fuzz {

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr uint16_t kEstStackPort = 80, kEstPeerPort = 40000, kSynSentPeerPort = 9000, kTwPeerPort = 40001;
const MacAddr kBroadcast{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

uint16_t get16(const uint8_t *p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t *p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
bool same6(const uint8_t *a, const Ip6Addr &b) { return std::memcmp(a, b.b, 16) == 0; }

} // namespace

FuzzWorld::FuzzWorld(const StackConfig &config, uint32_t ring_slots, uint32_t pool_frames)
    : config_(config), pool_(pool_frames), rings_(ring_slots, config.tcp.rcvbuf, config.tcp.sndbuf),
      port_(pool_, [this](const PacketRef &f) { on_transmit(f); })
{
    std::string err;
    stack_ = Stack::create(config_, port_, rings_, &err);
    if (!stack_) throw std::runtime_error("Stack::create failed: " + err);
    seen_.reserve(1024);
    arp_replies_.reserve(16);
    accepted_.reserve(64);
}

FuzzWorld::~FuzzWorld() { stack_.reset(); }

void FuzzWorld::on_transmit(const PacketRef &f)
{
    if (hashing_) {
        uint64_t h = digest_;
        for (uint16_t i = 0; i < f.len; i++) h = (h ^ f.data[i]) * kFnvPrime;
        digest_ = (h ^ f.len) * kFnvPrime; // frame boundaries count too
    }
    if (capturing_) captured_.emplace_back(f.data, f.data + f.len);
    if (recording_setup_) {
        setup_tx_.emplace_back(f.data, f.data + f.len);
    } else if (checking_setup_) { // the setup replayed: the same frames, byte for byte
        if (setup_at_ >= setup_tx_.size() || setup_tx_[setup_at_].size() != f.len ||
            std::memcmp(setup_tx_[setup_at_].data(), f.data, f.len) != 0)
            setup_same_ = false;
        setup_at_++;
    }
    const uint8_t *p = f.data;
    const size_t len = f.len;
    if (len >= sim::kEthLen + 28 && get16(p + 12) == sim::kEtherArp) {
        // The peer answers every ARP request but one for the stack's own address.
        const uint8_t *a = p + sim::kEthLen;
        MacAddr sha;
        std::memcpy(sha.b, a + 8, 6);
        const uint32_t spa = get32(a + 14), tpa = get32(a + 24);
        if (get16(a + 6) == 1 && tpa != config_.ip)
            queue_reply(sim::build_arp(sim::ArpSpec{peer_mac, sha, 2, peer_mac, sha, tpa, spa}));
    } else if (len >= sim::kEthLen + 20 && get16(p + 12) == sim::kEtherIpv4) {
        // A TCP segment on the established connection: its numbers.
        const uint8_t *ip = p + sim::kEthLen;
        const size_t ihl = size_t(ip[0] & 0xf) * 4, total = get16(ip + 2);
        if ((ip[0] >> 4) == 4 && ihl >= 20 && total >= ihl && sim::kEthLen + total <= len && ip[9] == 6 && total - ihl >= 20)
            seen_tcp(&est, ip + ihl, total - ihl);
    } else if (len >= kIp6Tcp && get16(p + 12) == 0x86dd) {
        const uint8_t *ip = p + sim::kEthLen;
        const size_t plen = get16(ip + 4);
        if (kIp6Tcp + plen <= len) {
            if (ip[6] == 58 && plen >= 24 && ip[40] == 135 && same6(ip + 48, peer_ip6) && !same6(ip + 8, Ip6Addr{})) {
                // A neighbour solicitation for the peer's address: the peer answers.
                // The same solicitation (from the same MAC and address) gets
                // the advertisement built for it last time.
                uint8_t key[22];
                std::memcpy(key, p + 6, 6);
                std::memcpy(key + 6, ip + 8, 16);
                if (na_.empty() || std::memcmp(key, na_key_, sizeof key) != 0) {
                    MacAddr to;
                    std::memcpy(to.b, p + 6, 6);
                    na_ = nd_advert(peer_mac, peer_ip6, to, ip + 8);
                    std::memcpy(na_key_, key, sizeof key);
                }
                queue_reply(na_);
            } else if (ip[6] == 6 && plen >= 20 && same6(ip + 8, stack_ip6()) && same6(ip + 24, peer_ip6)) {
                seen_tcp(&est6, ip + 40, plen); // TCP on the IPv6 connection
            }
        }
    }
    pool_.put(f);
}

void FuzzWorld::queue_reply(const std::vector<uint8_t> &f)
{
    if (n_replies_ == arp_replies_.size()) arp_replies_.emplace_back();
    arp_replies_[n_replies_++].assign(f.begin(), f.end());
}

void FuzzWorld::seen_tcp(Conn *c, const uint8_t *tcp, size_t tcp_len)
{
    const size_t doff = size_t(tcp[12] >> 4) * 4;
    if (doff >= 20 && doff <= tcp_len && get16(tcp) == kEstStackPort && get16(tcp + 2) == kEstPeerPort) {
        const uint8_t flags = tcp[13];
        const uint32_t seg_len = uint32_t(tcp_len - doff) + ((flags & sim::kSyn) ? 1 : 0) + ((flags & sim::kFin) ? 1 : 0);
        seen_.push_back(Seen{c, flags, get32(tcp + 4), get32(tcp + 8), seg_len});
    }
}

void FuzzWorld::input_one(const uint8_t *bytes, size_t len)
{
    PacketRef p = pool_.get_exact(bytes, len);
    stack_->input(&p, 1, now);
}

void FuzzWorld::input_burst(const std::vector<std::vector<uint8_t>> &frames, size_t count, uint32_t flags)
{
    constexpr size_t kMax = 64;
    for (size_t at = 0; at < count; at += kMax) {
        PacketRef burst[kMax];
        const size_t n = std::min(kMax, count - at);
        for (size_t i = 0; i < n; i++) {
            burst[i] = pool_.get_exact(frames[at + i].data(), frames[at + i].size());
            burst[i].flags = flags;
        }
        stack_->input(burst, uint16_t(n), now);
    }
}

void FuzzWorld::drain_events()
{
    SockEvent evs[64];
    int rounds = 0;
    while (stack_->events(evs, 64) > 0 && rounds++ < 1000) {
    }
}

void FuzzWorld::poll()
{
    stack_->poll(now);
    // ARP replies queued while the stack was transmitting (never re-enter it).
    for (int rounds = 0; n_replies_ != 0 && rounds < 16; rounds++) {
        arp_batch_.swap(arp_replies_); // both keep their buffers
        const size_t n = n_replies_;
        n_replies_ = 0;
        for (size_t i = 0; i < n; i++) input_one(arp_batch_[i].data(), arp_batch_[i].size());
        stack_->poll(now);
    }
    drain_events();
}

void FuzzWorld::settle()
{
    if (n_replies_ != 0) poll();
}

void FuzzWorld::advance(uint64_t ns)
{
    const uint64_t target = now + ns;
    int same = 0;
    for (int i = 0; i < 10'000'000; i++) {
        const uint64_t d = stack_->next_deadline_ns();
        if (d > target) break;
        if (d <= now) {
            if (++same > 1000) break;
        } else {
            same = 0;
            now = d;
        }
        poll();
    }
    now = target;
    poll();
}

void FuzzWorld::observe()
{
    for (const Seen &s : seen_) {
        Conn &c = *s.conn;
        const uint32_t end = s.seq + s.seg_len;
        if ((s.flags & sim::kSyn) || int32_t(end - c.stack_nxt) > 0) c.stack_nxt = end;
        if (s.flags & sim::kAck) c.peer_nxt = s.ack;
    }
    seen_.clear();
}

void FuzzWorld::app_acts()
{
    Stack &st = *stack_;
    for (int i = 0; i < 8; i++) {
        const int64_t a = st.accept(listener, 500 + uint64_t(i));
        if (a < 0) break;
        accepted_.push_back(SockId(a));
    }
    for (int i = 0; i < 8; i++) {
        const int64_t a = st.accept(listener6, 600 + uint64_t(i));
        if (a < 0) break;
        accepted_.push_back(SockId(a));
    }
    uint8_t buf[4096];
    auto serve = [&](SockId s) {
        for (int i = 0; i < 8 && st.recv(s, buf, sizeof buf) > 0; i++) {
        }
        std::memset(buf, 0x61, sizeof buf);
        st.send(s, buf, 3000);
    };
    for (SockId s : accepted_) serve(s);
    serve(est.sock);
    serve(syn_sent.sock);
    serve(est6.sock);
    serve(syn_sent6.sock);
    UdpRecord rec;
    bool v6 = false;
    for (int i = 0; i < 8 && st.udp().recv_from(udp, buf, 100, &rec, false) >= 0; i++) v6 |= (rec.flags & kUdpRecIp6) != 0;
    const Endpoint to{peer_ip, 9053};
    st.udp().send_to(udp, &to, buf, 100);
    if (v6) { // an answer over IPv6 too: to the peer's link-local address (ND first)
        Endpoint6 to6;
        to6.ip.b[0] = 0xfe, to6.ip.b[1] = 0x80, to6.ip.b[15] = 2;
        to6.port = 9053;
        st.udp().send_to6(udp, &to6, buf, 100);
    }
}

bool FuzzWorld::open_udp()
{
    Stack &st = *stack_;
    const int64_t u = st.udp().open(88);
    if (u < 0 || st.udp().bind6(SockId(u), Endpoint6{Ip6Addr{}, kUdpPort}, false) != 0 ||
        st.udp().join(SockId(u), UdpGroup{kUdpGroup, 0}) != 0 ||
        st.udp().join6(SockId(u), UdpGroup6{kUdpGroup6, {}}) != 0)
        return false;
    udp = SockId(u);
    poll();
    return true;
}

// Duplicate address detection of the stack's IPv6 addresses (its
// link-local one) run out: usable, so IPv6 upper protocols (TCP, UDP) are
// delivered to it, not only neighbour discovery.
void FuzzWorld::dad()
{
    stack_->announce(now);
    poll();
    now += config_.arp_retrans_ns + 1'000'000;
    poll();
}

void FuzzWorld::reset_stack()
{
    stack_->reset();
    stack_clean_ = true;
}

bool FuzzWorld::restart(bool digest)
{
    now = kStartNs;
    n_replies_ = 0;
    seen_.clear();
    accepted_.clear();
    if (!stack_clean_) stack_->reset();
    stack_clean_ = false;
    digest_ = kFnvOffset;
    // The first setup is hashed and its frames kept; a replayed one is
    // checked against those frames byte for byte (and, when a digest is
    // asked for, hashed too, as every byte transmitted is). Hashing every
    // setup byte under the coverage hooks cost more than comparing them.
    hashing_ = digest || !recorded_;
    const bool replay = recorded_;
    recording_setup_ = !replay;
    checking_setup_ = replay;
    setup_at_ = 0;
    setup_same_ = true;
    bool ok = replay ? replay_setup() : first_setup();
    if (replay) ok = ok && setup_same_ && setup_at_ == setup_tx_.size() && (!digest || digest_ == setup_digest_);
    recording_setup_ = checking_setup_ = false;
    seen_.clear();
    hashing_ = digest;
    if (!digest) digest_ = kFnvOffset;
    return ok;
}

// As RawPeer's constructor (introduce), listen(80, 8) and open_passive(...,
// full_syn_options(0)), then the target's active open, with every frame
// built and every answer parsed; the frames and the outcome are kept for
// replay_setup().
bool FuzzWorld::first_setup()
{
    using namespace sim;
    Stack &st = *stack_;
    introduce_ = build_arp(ArpSpec{peer_mac, kBroadcast, 1, peer_mac, MacAddr{}, peer_ip, config_.ip});
    input_one(introduce_.data(), introduce_.size());
    settle();
    dad();
    const int64_t l = st.open(1);
    if (l < 0 || st.bind(SockId(l), Endpoint{config_.ip, kEstStackPort}) != 0 || st.listen(SockId(l), 8) != 0) return false;
    listener = SockId(l);
    // The peer's SYN.
    TcpSpec syn;
    syn.src_mac = peer_mac;
    syn.dst_mac = config_.mac;
    syn.src_ip = peer_ip;
    syn.dst_ip = config_.ip;
    syn.sport = kEstPeerPort;
    syn.dport = kEstStackPort;
    syn.seq = 0x10000000u + kEstPeerPort * 7919u;
    syn.flags = kSyn;
    syn.window = 65535;
    syn.opts = RawPeer::full_syn_options(0);
    const uint32_t peer_tsval = 1000 + uint32_t(now / 1'000'000);
    syn.opts.ts = {peer_tsval, 0};
    syn_ = build_tcp(syn);
    capturing_ = true;
    captured_.clear();
    input_one(syn_.data(), syn_.size());
    settle();
    capturing_ = false;
    Parsed sa;
    if (captured_.size() != 1 || !parse_frame(captured_[0].data(), captured_[0].size(), &sa) || !sa.has(kSyn | kAck) ||
        sa.ack != syn.seq + 1 || !sa.opts.ts)
        return false;
    // The peer's ACK of the SYN-ACK.
    TcpSpec ack = syn;
    ack.seq = syn.seq + 1;
    ack.ack = sa.seq + 1;
    ack.flags = kAck;
    ack.opts = TcpOptions{};
    ack.opts.ts = {peer_tsval, sa.opts.ts->first};
    ack_ = build_tcp(ack);
    input_one(ack_.data(), ack_.size());
    settle();
    const int64_t e = st.accept(listener, 100 + kEstPeerPort);
    if (e < 0) return false;
    est = Conn{kEstPeerPort, kEstStackPort, ack.seq, ack.ack, SockId(e)};
    // The active open.
    const int64_t s = st.open(77);
    if (s < 0) return false;
    capturing_ = true;
    captured_.clear();
    if (st.connect(SockId(s), Endpoint{peer_ip, kSynSentPeerPort}, now) != 0) return false;
    poll();
    capturing_ = false;
    for (auto &f : captured_) {
        Parsed p;
        if (parse_frame(f.data(), f.size(), &p) && p.is_tcp && p.flags == kSyn && p.dport == kSynSentPeerPort) {
            syn_sent = Conn{kSynSentPeerPort, p.sport, 0, 0, SockId(s)};
            syn_sent_iss = p.seq;
        }
    }
    captured_.clear();
    if (syn_sent.sock == kNoSock) return false;
    if (!open_udp()) return false;
    udp0_ = udp;
    if (!first_setup6()) return false;
    setup_digest_ = digest_;
    listener0_ = listener;
    est0_ = est;
    syn_sent0_ = syn_sent;
    syn_sent_iss0_ = syn_sent_iss;
    recorded_ = true;
    return true;
}

// The same steps with the recorded frames; the stack must answer with the
// same bytes (setup_tx_, checked by on_transmit; restart() also compares
// setup_digest_ when it hashes) and give the same socket ids.
bool FuzzWorld::replay_setup()
{
    Stack &st = *stack_;
    input_one(introduce_.data(), introduce_.size());
    settle();
    dad();
    const int64_t l = st.open(1);
    if (l < 0 || st.bind(SockId(l), Endpoint{config_.ip, kEstStackPort}) != 0 || st.listen(SockId(l), 8) != 0) return false;
    input_one(syn_.data(), syn_.size());
    settle();
    input_one(ack_.data(), ack_.size());
    settle();
    const int64_t e = st.accept(SockId(l), 100 + kEstPeerPort);
    const int64_t s = st.open(77);
    if (e < 0 || s < 0 || st.connect(SockId(s), Endpoint{peer_ip, kSynSentPeerPort}, now) != 0) return false;
    poll();
    if (!open_udp() || udp != udp0_ || !replay_setup6()) return false;
    listener = listener0_;
    est = est0_;
    syn_sent = syn_sent0_;
    syn_sent_iss = syn_sent_iss0_;
    return SockId(l) == listener0_ && SockId(e) == est0_.sock && SockId(s) == syn_sent0_.sock;
}

// The IPv6 sockets, after the IPv4 ones (which are set up as before they
// existed): a listener on [addr6[0]]:80, the peer's handshake to it with
// every option (the stack resolves the peer by ND first: on_transmit
// answers), the active open to [peer_ip6]:9000.
bool FuzzWorld::first_setup6()
{
    using namespace sim;
    Stack &st = *stack_;
    const int64_t l = st.open(2);
    if (l < 0 || st.bind6(SockId(l), Endpoint6{stack_ip6(), kEstStackPort}, true) != 0 || st.listen(SockId(l), 8) != 0)
        return false;
    listener6 = SockId(l);
    TcpSpec syn;
    syn.src_mac = peer_mac;
    syn.dst_mac = config_.mac;
    syn.sport = kEstPeerPort;
    syn.dport = kEstStackPort;
    syn.seq = 0x20000000u + kEstPeerPort * 7919u;
    syn.flags = kSyn;
    syn.window = 65535;
    syn.opts = RawPeer::full_syn_options(0);
    const uint32_t peer_tsval = 1000 + uint32_t(now / 1'000'000);
    syn.opts.ts = {peer_tsval, 0};
    syn6_ = tcp6_frame(syn, peer_ip6, stack_ip6());
    capturing_ = true;
    captured_.clear();
    input_one(syn6_.data(), syn6_.size());
    poll();
    capturing_ = false;
    Parsed sa;
    bool got = false;
    for (auto &f : captured_) got = got || (parse_tcp6(f.data(), f.size(), &sa) && sa.has(kSyn | kAck));
    if (!got || sa.ack != syn.seq + 1 || !sa.opts.ts || !sa.opts.sack_permitted || !sa.opts.wscale) return false;
    TcpSpec ack = syn;
    ack.seq = syn.seq + 1;
    ack.ack = sa.seq + 1;
    ack.flags = kAck;
    ack.opts = TcpOptions{};
    ack.opts.ts = {peer_tsval, sa.opts.ts->first};
    ack6_ = tcp6_frame(ack, peer_ip6, stack_ip6());
    input_one(ack6_.data(), ack6_.size());
    settle();
    const int64_t e = st.accept(listener6, 200 + kEstPeerPort);
    if (e < 0) return false;
    est6 = Conn{kEstPeerPort, kEstStackPort, ack.seq, ack.ack, SockId(e)};
    const int64_t s = st.open(78);
    if (s < 0) return false;
    capturing_ = true;
    captured_.clear();
    if (st.connect6(SockId(s), Endpoint6{peer_ip6, kSynSentPeerPort}, now) != 0) return false;
    poll();
    capturing_ = false;
    for (auto &f : captured_) {
        Parsed p;
        if (parse_tcp6(f.data(), f.size(), &p) && p.flags == kSyn && p.dport == kSynSentPeerPort) {
            syn_sent6 = Conn{kSynSentPeerPort, p.sport, 0, 0, SockId(s)};
            syn_sent6_iss = p.seq;
        }
    }
    captured_.clear();
    if (syn_sent6.sock == kNoSock || !first_time_wait6(syn)) return false;
    listener60_ = listener6;
    est60_ = est6;
    syn_sent60_ = syn_sent6;
    syn_sent6_iss0_ = syn_sent6_iss;
    return true;
}

// tw6: the peer's handshake from port 40001 (as est6's), the stack closes
// first (its FIN), the peer acknowledges it with its own FIN: the stack
// acknowledges that and the connection waits in TIME-WAIT.
bool FuzzWorld::first_time_wait6(const sim::TcpSpec &syn0)
{
    using namespace sim;
    Stack &st = *stack_;
    TcpSpec syn = syn0;
    syn.sport = kTwPeerPort;
    syn.seq = 0x30000000u + kTwPeerPort * 7919u;
    tw_syn_ = tcp6_frame(syn, peer_ip6, stack_ip6());
    capturing_ = true;
    captured_.clear();
    input_one(tw_syn_.data(), tw_syn_.size());
    settle();
    Parsed sa;
    bool got = false;
    for (auto &f : captured_) got = got || (parse_tcp6(f.data(), f.size(), &sa) && sa.has(kSyn | kAck));
    if (!got || sa.ack != syn.seq + 1 || !sa.opts.ts) return false;
    TcpSpec ack = syn;
    ack.seq = syn.seq + 1;
    ack.ack = sa.seq + 1;
    ack.flags = kAck;
    ack.opts = TcpOptions{};
    ack.opts.ts = {syn.opts.ts->first, sa.opts.ts->first};
    tw_ack_ = tcp6_frame(ack, peer_ip6, stack_ip6());
    input_one(tw_ack_.data(), tw_ack_.size());
    settle();
    const int64_t t = st.accept(listener6, 200 + kTwPeerPort);
    captured_.clear();
    if (t < 0 || st.close(SockId(t)) != 0) return false;
    poll();
    Parsed fin;
    got = false;
    for (auto &f : captured_) got = got || (parse_tcp6(f.data(), f.size(), &fin) && fin.has(kFin) && fin.dport == kTwPeerPort);
    capturing_ = false;
    captured_.clear();
    if (!got || fin.seq != sa.seq + 1) return false;
    ack.ack = fin.seq + 1;
    ack.flags = kAck | kFin;
    ack.opts.ts = {syn.opts.ts->first + 1, fin.opts.ts ? fin.opts.ts->first : 0};
    tw_fin_ = tcp6_frame(ack, peer_ip6, stack_ip6());
    input_one(tw_fin_.data(), tw_fin_.size());
    settle();
    tw6 = Conn{kTwPeerPort, kEstStackPort, ack.seq + 1, fin.seq + 1, kNoSock};
    tw60_ = tw6;
    return true;
}

bool FuzzWorld::replay_time_wait6()
{
    Stack &st = *stack_;
    input_one(tw_syn_.data(), tw_syn_.size());
    settle();
    input_one(tw_ack_.data(), tw_ack_.size());
    settle();
    const int64_t t = st.accept(listener60_, 200 + kTwPeerPort);
    if (t < 0 || st.close(SockId(t)) != 0) return false;
    poll();
    input_one(tw_fin_.data(), tw_fin_.size());
    settle();
    tw6 = tw60_;
    return true;
}

bool FuzzWorld::replay_setup6()
{
    Stack &st = *stack_;
    const int64_t l = st.open(2);
    if (l < 0 || st.bind6(SockId(l), Endpoint6{stack_ip6(), kEstStackPort}, true) != 0 || st.listen(SockId(l), 8) != 0)
        return false;
    input_one(syn6_.data(), syn6_.size());
    poll();
    input_one(ack6_.data(), ack6_.size());
    settle();
    const int64_t e = st.accept(SockId(l), 200 + kEstPeerPort);
    const int64_t s = st.open(78);
    if (e < 0 || s < 0 || st.connect6(SockId(s), Endpoint6{peer_ip6, kSynSentPeerPort}, now) != 0) return false;
    poll();
    if (!replay_time_wait6()) return false;
    listener6 = listener60_;
    est6 = est60_;
    syn_sent6 = syn_sent60_;
    syn_sent6_iss = syn_sent6_iss0_;
    return SockId(l) == listener60_ && SockId(e) == est60_.sock && SockId(s) == syn_sent60_.sock;
}

} // namespace mars::fuzz
