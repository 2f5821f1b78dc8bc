// tests/fuzz/mars/fuzz_input.cc: see fuzz_input.h.
#include "fuzz_input.h"

#include "frame6.h"
#include "fuzz_world.h"
#include "malformed.h"
#include "raw_peer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace mars::fuzz {

namespace {

using sim::RawPeer;

constexpr uint64_t kMs = 1'000'000;

// strands > 1: the receive pipeline (mars/src/strands.h) with prefetching,
// and frames reach the stack in bursts (see run_one).
RawPeer::Options fuzz_options(uint32_t strands = 1)
{
    RawPeer::Options o;
    o.stack.strands = strands;
    o.stack.prefetch = strands > 1;
    o.stack.max_sockets = 32;
    o.stack.ooo_pool_frames = 64;
    o.stack.ooo_frames_per_conn = 16;
    o.stack.arp_pending_frames = 8;
    o.stack.tcp.rcvbuf = 16384;
    o.stack.tcp.sndbuf = 16384;
    o.stack.tcp.syn_backlog = 4;
    o.stack.tcp.time_wait_ns = 2'000'000'000ull;
    o.stack.addr6[0] = Ip6Prefix{Ip6Addr{{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}}, 64}; // 2001:2::1/64
    o.stack.n_addr6 = 1;
    o.ring_slots = 16;
    o.pool_frames = 256;
    o.digest = true;
    return o;
}

void put32(uint8_t *p, uint32_t v)
{
    p[0] = uint8_t(v >> 24);
    p[1] = uint8_t(v >> 16);
    p[2] = uint8_t(v >> 8);
    p[3] = uint8_t(v);
}
uint32_t get32(const uint8_t *p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }

bool is_ip6(const std::vector<uint8_t> &f) { return f.size() >= 14 && f[12] == 0x86 && f[13] == 0xdd; }

// Rewrites addresses (and ports, and relative seq/ack) so the frame reaches
// the chosen socket: an IPv6 frame (EtherType 0x86dd) the world's IPv6 one
// (peer_ip6 -> addr6[0], TCP right after the 40-byte header), any other the
// IPv4 one. Touches only bytes the frame has.
void aim(std::vector<uint8_t> &f, const FuzzWorld &w, uint16_t peer_port, uint16_t stack_port, uint32_t seq_base,
         uint32_t ack_base)
{
    if (f.size() < 12) return;
    std::memcpy(f.data(), w.stack_mac().b, 6);
    std::memcpy(f.data() + 6, w.peer_mac.b, 6);
    size_t t = kIp6Tcp;
    if (is_ip6(f)) {
        if (f.size() < kIp6Tcp) return;
        std::memcpy(f.data() + sim::kEthLen + 8, FuzzWorld::peer_ip6.b, 16);
        std::memcpy(f.data() + sim::kEthLen + 24, w.stack_ip6().b, 16);
    } else {
        if (f.size() < sim::kEthLen + 20) return;
        put32(f.data() + sim::kEthLen + 12, w.peer_ip);
        put32(f.data() + sim::kEthLen + 16, w.stack_ip());
        size_t ihl = size_t(f[sim::kEthLen] & 0xf) * 4;
        t = sim::kEthLen + (ihl < 20 ? 20 : ihl);
    }
    if (f.size() < t + 12) return;
    f[t] = uint8_t(peer_port >> 8);
    f[t + 1] = uint8_t(peer_port);
    f[t + 2] = uint8_t(stack_port >> 8);
    f[t + 3] = uint8_t(stack_port);
    put32(&f[t + 4], get32(&f[t + 4]) + seq_base);
    put32(&f[t + 8], get32(&f[t + 8]) + ack_base);
}

[[noreturn]] void invariant_broken(const char *what, uint64_t a, uint64_t b)
{
    std::fprintf(stderr, "mars fuzz: invariant broken: %s (%llu vs %llu)\n", what, (unsigned long long)a, (unsigned long long)b);
    std::abort();
}

// The fixture's sockets on a sim::RawPeer, for building the seed inputs
// (their frames carry numbers from this setup, which FuzzWorld repeats).
struct SeedWorld {
    SeedWorld() : peer(fuzz_options()) {}
    RawPeer peer;
    SockId listener = kNoSock;
    RawPeer::Conn est, syn_sent;

    bool setup()
    {
        listener = peer.listen(80, 8);
        std::string why;
        if (peer.open_passive(listener, 80, 40000, &est, RawPeer::full_syn_options(0), &why) == kNoSock) return false;
        int64_t s = peer.stack().open(77);
        if (s < 0 || peer.stack().connect(SockId(s), Endpoint{peer.peer_ip, 9000}, peer.now) != 0) return false;
        peer.poll();
        for (auto &p : peer.take_tcp()) {
            if (p.flags == sim::kSyn && p.dport == 9000) {
                syn_sent.sock = SockId(s);
                syn_sent.peer_port = 9000;
                syn_sent.stack_port = p.sport;
            }
        }
        peer.take();
        return syn_sent.sock != kNoSock;
    }
};

} // namespace

void add_record(std::vector<uint8_t> *input, uint8_t ctl, const std::vector<uint8_t> &frame)
{
    size_t n = frame.size() > 0xffff ? 0xffff : frame.size();
    input->push_back(ctl);
    input->push_back(uint8_t(n));
    input->push_back(uint8_t(n >> 8));
    input->insert(input->end(), frame.begin(), frame.begin() + long(n));
}

namespace {

// One world per receive path, made on first use and reused by every input
// after it: building a RawPeer (frame pool, rings) costs far more under the
// sanitizers than the input itself. discard_worlds() drops them.
std::unique_ptr<FuzzWorld> g_worlds[2];

FuzzWorld &world_for(bool strands)
{
    std::unique_ptr<FuzzWorld> &w = g_worlds[strands];
    if (!w) {
        const RawPeer::Options o = fuzz_options(strands ? 4 : 1);
        w = std::make_unique<FuzzWorld>(o.stack, o.ring_slots, o.pool_frames);
    }
    return *w;
}

// FNV-1a over the bytes of a plain struct (the stack's counters).
uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const auto *b = static_cast<const uint8_t *>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

} // namespace

void discard_worlds()
{
    g_worlds[0].reset();
    g_worlds[1].reset();
}

namespace {

uint64_t run_input(const uint8_t *data, size_t size, bool digest, const std::function<void(FuzzWorld &)> *look = nullptr)
{
    // Inputs of odd length run the strand pipeline: their frames go to the
    // stack in bursts of up to 8, cut at a record that advances time or lets
    // the application act; even ones run each frame to completion, one by one.
    const bool strands = size & 1;
    FuzzWorld &w = world_for(strands);
    if (!w.restart(digest)) invariant_broken("fixture setup failed (or not the same as the first time)", 0, 0);
    // The burst's frames live in w.record_buffers[0, burst_n), reused.
    std::vector<std::vector<uint8_t>> &burst = w.record_buffers;
    size_t burst_n = 0;
    uint32_t burst_flags = 0;
    auto deliver = [&]() {
        if (burst_n == 0) return;
        w.input_burst(burst, burst_n, burst_flags);
        burst_n = 0;
        w.poll();
        w.observe();
        const StackStats &st = w.stack().stats();
        if (st.ooo_frames_used > w.config().ooo_pool_frames)
            invariant_broken("anonymous pool over its size", st.ooo_frames_used, w.config().ooo_pool_frames);
    };
    size_t i = 0;
    for (int records = 0; i + 3 <= size && records < 256; records++) {
        uint8_t ctl = data[i];
        size_t len = size_t(data[i + 1]) | size_t(data[i + 2]) << 8;
        i += 3;
        if (len > size - i) len = size - i;
        std::vector<uint8_t> &f = w.current_record;
        f.assign(data + i, data + i + len);
        i += len;
        if (ctl & kAdvanceTime) {
            deliver();
            w.advance(250 * kMs);
        }
        // The aim bits pick the IPv6 sockets for an IPv6 frame (fuzz_input.h).
        const bool v6 = is_ip6(f);
        const FuzzWorld::Conn &est = v6 ? w.est6 : w.est, &syn_sent = v6 ? w.syn_sent6 : w.syn_sent;
        const bool aimed = ctl & (kAimEstablished | kAimSynSent | kAimListener);
        if (ctl & kAimEstablished) {
            aim(f, w, est.peer_port, est.stack_port, est.peer_nxt, est.stack_nxt);
        } else if (ctl & kAimSynSent) {
            aim(f, w, 9000, syn_sent.stack_port, 0, (v6 ? w.syn_sent6_iss : w.syn_sent_iss) + 1);
        } else if (ctl & kAimListener) {
            const size_t sp = v6 ? kIp6Tcp : 34; // the frame's own source port
            aim(f, w, f.size() >= sp + 2 ? uint16_t(f[sp] << 8 | f[sp + 1]) : 1234, 80, 0, 0);
        }
        if ((ctl & kFixIpCsum) && aimed && v6) {
            if (f.size() >= kIp6Tcp) { // IPv6 has no header checksum: its payload length instead
                const size_t plen = std::min<size_t>(f.size() - kIp6Tcp, 0xffff);
                f[18] = uint8_t(plen >> 8);
                f[19] = uint8_t(plen);
            }
        } else if (ctl & kFixIpCsum) {
            sim::fix_ip_checksum(f.data(), f.size());
        }
        if (ctl & kFixL4Csum) sim::fix_l4_checksum(f.data(), f.size());
        const uint32_t flags = (ctl & kMarkCsumGood) ? (kRxIpCsumGood | kRxL4CsumGood) : 0;
        if (burst_n != 0 && flags != burst_flags) deliver(); // one flag set per burst
        burst_flags = flags;
        if (burst_n == burst.size()) burst.emplace_back();
        burst[burst_n++].swap(f); // buffers change places, none is allocated
        if (!strands || burst_n == 8 || (ctl & kAppActs)) deliver();
        if (ctl & kAppActs) w.app_acts();
    }
    deliver();
    // Let timers run (retransmissions, TIME-WAIT, keepalive), then tear down.
    w.advance(3000 * kMs);
    uint64_t result = 0;
    if (digest) {
        const StackStats final_stats = w.stack().stats();
        result = mix(w.tx_digest(), &final_stats, sizeof final_stats);
    }
    if (look) (*look)(w);
    w.reset_stack(); // as destroying it: every frame and ring must come back
    if (w.pool().in_use() != 0) invariant_broken("frames not returned after the stack was reset", w.pool().in_use(), 0);
    if (w.pool().bad_releases() != 0) invariant_broken("frames released twice or never given", w.pool().bad_releases(), 0);
    if (w.rings().outstanding() != 0) invariant_broken("rings not reclaimed", w.rings().outstanding(), 0);
    if (w.rings().bad_reclaims() != 0) invariant_broken("rings reclaimed twice", w.rings().bad_reclaims(), 0);
    return result;
}

} // namespace

uint64_t run_one_digest(const uint8_t *data, size_t size) { return run_input(data, size, true); }

void run_one_then(const uint8_t *data, size_t size, const std::function<void(FuzzWorld &)> &look)
{
    run_input(data, size, false, &look);
}

int run_one(const uint8_t *data, size_t size)
{
    run_input(data, size, false); // libFuzzer: no digest (the replayer checks determinism)
    return 0;
}

namespace {

// TCP over IPv6 (issue 31): segments aimed at the world's IPv6 sockets
// (fuzz_input.h: the aim bits on an IPv6 frame), and errors quoting the IPv6
// connection with its numbers after the setup (read from a FuzzWorld).
void tcp6_seeds(std::vector<std::pair<std::string, std::vector<uint8_t>>> *seeds)
{
    using namespace sim;
    FuzzWorld &w = world_for(false);
    if (!w.restart(false)) invariant_broken("fixture setup failed", 0, 0);
    const FuzzWorld::Conn est6 = w.est6, tw6 = w.tw6;
    const Ip6Addr ours = w.stack_ip6(), peer = FuzzWorld::peer_ip6;
    const MacAddr sm = w.stack_mac(), pm = w.peer_mac;
    w.reset_stack();
    const uint8_t fix = kFixIpCsum | kFixL4Csum; // on an aimed IPv6 frame: payload length, TCP checksum
    // seq/ack relative to what the aimed socket expects (0: exactly that).
    auto seg = [&](uint8_t flags, size_t n, uint32_t dseq = 0, uint32_t dack = 0, uint16_t sport = 40000) {
        TcpSpec t;
        t.src_mac = pm;
        t.dst_mac = sm;
        t.sport = sport;
        t.dport = 80;
        t.seq = dseq;
        t.ack = dack;
        t.flags = flags;
        t.payload.resize(n);
        for (size_t i = 0; i < n; i++) t.payload[i] = uint8_t(i * 5 + dseq);
        return t;
    };
    auto frame = [&](const TcpSpec &t) { return tcp6_frame(t, peer, ours); };
    // Odd inputs take the strands and bursts, even ones one frame at a time
    // (run_input): a byte past the last record (ignored) sets the parity.
    auto push = [&](const std::string &name, std::vector<uint8_t> in, bool odd) {
        if ((in.size() & 1) != size_t(odd)) in.push_back(0);
        seeds->push_back({name, in});
    };
    auto one = [&](const std::string &name, uint8_t ctl, const std::vector<uint8_t> &f, bool odd = false) {
        std::vector<uint8_t> in;
        add_record(&in, ctl, f);
        push(name, in, odd);
    };
    const uint8_t est = fix | kAimEstablished;
    one("ip6-tcp-est-data", est | kAppActs, frame(seg(kAck | kPsh, 100)));
    one("ip6-tcp-est-data-strands", est | kAppActs, frame(seg(kAck | kPsh, 100)), true);
    one("ip6-tcp-est-data-csum-flagged-good", kAimEstablished | kFixIpCsum | kMarkCsumGood | kAppActs,
        frame(seg(kAck | kPsh, 1400)));
    {
        // In-order segments in one burst: coalesced (input_run6), without
        // options and with NOP NOP TS.
        for (const bool ts : {false, true}) {
            std::vector<uint8_t> in;
            for (uint32_t k = 0; k < 6; k++) {
                TcpSpec t = seg(kAck, 1000, 1000 * k);
                if (ts) t.opts.ts = {1'000'000, 1};
                add_record(&in, est | (k == 5 ? kAppActs : 0), frame(t));
            }
            push(ts ? "ip6-tcp-est-coalesced-ts" : "ip6-tcp-est-coalesced", in, true);
        }
    }
    {
        std::vector<uint8_t> in;
        add_record(&in, est, frame(seg(kAck, 500, 1000)));
        add_record(&in, est, frame(seg(kAck, 500, 2000)));
        add_record(&in, est | kAppActs, frame(seg(kAck, 1000, 0)));
        push("ip6-tcp-est-out-of-order-then-fill", in, false);
    }
    {
        // The application sends 3000 bytes (three segments from una); the
        // peer then reports the last two by SACK in three duplicate ACKs
        // (ack una: relative to what the stack sent, -3000), so the first
        // is lost: fast retransmit, RACK.
        const uint32_t una = est6.stack_nxt;
        std::vector<uint8_t> in;
        add_record(&in, est | kAppActs, frame(seg(kAck, 0)));
        for (int i = 0; i < 3; i++) {
            TcpSpec t = seg(kAck, 0, 0, uint32_t(-3000));
            t.opts.sack = {{una + 1448, una + 3000}};
            add_record(&in, est, frame(t));
        }
        push("ip6-tcp-est-sack-dup-acks", in, false);
    }
    one("ip6-tcp-est-fin", est | kAppActs, frame(seg(kAck | kFin, 0)));
    one("ip6-tcp-est-fin-with-data", est, frame(seg(kAck | kFin | kPsh, 500)), true);
    one("ip6-tcp-est-rst-exact", est, frame(seg(kRst, 0)));
    one("ip6-tcp-est-rst-in-window", est, frame(seg(kRst, 0, 100)));
    one("ip6-tcp-est-syn", est, frame(seg(kSyn, 0, 10)));
    {
        // Packet too big (MTU 1280) quoting the connection's first unacked
        // byte, after the application sent data: the MSS drops, the data is
        // sent again in smaller segments.
        std::vector<uint8_t> in;
        add_record(&in, est | kAppActs, frame(seg(kAck, 0)));
        TcpSpec q = seg(kAck, 0, est6.stack_nxt, est6.peer_nxt);
        q.sport = 80;
        q.dport = 40000;
        const std::vector<uint8_t> quoted = tcp6_frame(q, ours, peer);
        std::vector<uint8_t> ptb = {2, 0, 0, 0, 0, 0, 0x05, 0x00};
        ptb.insert(ptb.end(), quoted.begin() + long(sim::kEthLen), quoted.end());
        add_record(&in, 0, ip6_frame(pm, sm.b, peer.b, ours.b, 58, 64, ptb, 0));
        push("ip6-tcp-est-packet-too-big", in, false);
    }
    {
        TcpSpec syn = seg(kSyn, 0, 1000, 0, 41000);
        syn.opts = RawPeer::full_syn_options(1);
        one("ip6-tcp-listener-syn", fix | kAimListener | kAppActs, frame(syn));
        std::vector<uint8_t> flood;
        for (uint16_t i = 0; i < 10; i++) {
            syn.sport = uint16_t(41000 + i);
            add_record(&flood, fix | kAimListener, frame(syn));
        }
        add_record(&flood, fix | kAimListener | kAppActs, frame(seg(kAck, 0, 1001, 0, 41000)));
        push("ip6-tcp-listener-syn-flood-cookies", flood, false);
    }
    {
        TcpSpec sa = seg(kSyn | kAck, 0, 5555);
        sa.sport = 9000;
        sa.opts = RawPeer::full_syn_options(10);
        one("ip6-tcp-synsent-synack", fix | kAimSynSent | kAppActs, frame(sa));
        TcpSpec ra = seg(kRst | kAck, 0, 5555);
        ra.sport = 9000;
        one("ip6-tcp-synsent-rst-ack", fix | kAimSynSent, frame(ra));
    }
    {
        // To the connection in TIME-WAIT (the listener's aim keeps the
        // frame's source port, 40001, and its absolute numbers): the peer's
        // FIN again (acknowledged again), a SYN above its sequence space
        // with a newer timestamp (a new connection, RFC 6191), a reset.
        const uint8_t lis = fix | kAimListener;
        TcpSpec f = seg(kAck | kFin, 0, tw6.peer_nxt - 1, tw6.stack_nxt, 40001);
        f.opts.ts = {1'000'000, 0};
        one("ip6-tcp-timewait-fin-again", lis, frame(f));
        TcpSpec syn = seg(kSyn, 0, tw6.peer_nxt + 100'000, 0, 40001);
        syn.opts = RawPeer::full_syn_options(1'000'000);
        one("ip6-tcp-timewait-syn-reopens", lis | kAppActs, frame(syn));
        one("ip6-tcp-timewait-rst", lis, frame(seg(kRst, 0, tw6.peer_nxt, 0, 40001)));
    }
}

} // namespace

std::vector<std::pair<std::string, std::vector<uint8_t>>> seed_inputs()
{
    using namespace sim;
    SeedWorld w;
    if (!w.setup()) invariant_broken("fixture setup failed", 0, 0);
    std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds;
    const uint8_t fix = kFixIpCsum | kFixL4Csum;
    // Relative segments on the established connection: seq/ack 0 mean
    // "exactly what the connection expects".
    RawPeer::Conn rel = w.est;
    rel.peer_nxt = 0;
    rel.stack_nxt = 0;
    rel.ts = false;
    auto est = [&](uint8_t flags, size_t n, uint32_t dseq = 0, uint16_t window = 65535) {
        RawPeer::Conn c = rel;
        c.peer_nxt += dseq;
        c.window = window;
        std::vector<uint8_t> payload(n);
        for (size_t i = 0; i < n; i++) payload[i] = uint8_t(i * 7);
        return build_tcp(w.peer.seg(c, flags, payload));
    };
    auto one = [&](const std::string &name, uint8_t ctl, const std::vector<uint8_t> &f) {
        std::vector<uint8_t> in;
        add_record(&in, ctl, f);
        seeds.push_back({name, in});
    };
    one("est-data", fix | kAimEstablished | kAppActs, est(kAck | kPsh, 100));
    one("est-data-csum-flagged-good", kAimEstablished | kMarkCsumGood | kAppActs, est(kAck | kPsh, 1448));
    one("est-fin", fix | kAimEstablished | kAppActs, est(kAck | kFin, 0));
    one("est-fin-with-data", fix | kAimEstablished, est(kAck | kFin | kPsh, 500));
    one("est-rst-exact", fix | kAimEstablished, est(kRst, 0));
    one("est-rst-in-window", fix | kAimEstablished, est(kRst, 0, 100));
    one("est-syn", fix | kAimEstablished, est(kSyn, 0, 10));
    one("est-zero-window", fix | kAimEstablished | kAppActs, est(kAck, 0, 0, 0));
    {
        std::vector<uint8_t> in;
        add_record(&in, fix | kAimEstablished, est(kAck, 500, 1000));
        add_record(&in, fix | kAimEstablished, est(kAck, 500, 2000));
        add_record(&in, fix | kAimEstablished | kAppActs, est(kAck, 1000, 0));
        seeds.push_back({"est-out-of-order-then-fill", in});
    }
    {
        std::vector<uint8_t> in;
        add_record(&in, fix | kAimEstablished | kAppActs, est(kAck, 0, 0, 0));
        for (int i = 0; i < 8; i++) add_record(&in, fix | kAimEstablished | kAdvanceTime, est(kAck, 0, 0, 0));
        add_record(&in, fix | kAimEstablished, est(kAck, 0));
        seeds.push_back({"est-persist-then-open", in});
    }
    {
        std::vector<uint8_t> in;
        add_record(&in, fix | kAimEstablished | kAppActs, est(kAck, 0));
        for (int i = 0; i < 3; i++) add_record(&in, fix | kAimEstablished, est(kAck, 0));
        seeds.push_back({"est-dup-acks", in});
    }
    {
        std::vector<uint8_t> in;
        add_record(&in, fix | kAimEstablished | kAppActs, est(kAck | kFin, 0));
        add_record(&in, fix | kAimEstablished | kAdvanceTime, est(kAck, 0, 1));
        seeds.push_back({"est-close-both", in});
    }
    {
        TcpSpec s = w.peer.seg(rel, kAck);
        s.opts.sack = {{1000, 2000}, {3000, 4000}};
        s.opts.ts = {5, 0};
        one("est-ack-with-sack-ts", fix | kAimEstablished, build_tcp(s));
    }
    // SYN-SENT: SYN-ACK, RST, plain SYN (simultaneous open).
    {
        RawPeer::Conn c;
        c.peer_port = 9000;
        c.stack_port = w.syn_sent.stack_port;
        c.peer_nxt = 5555;
        c.stack_nxt = 0;
        TcpSpec sa = w.peer.seg(c, kSyn | kAck);
        sa.opts = RawPeer::full_syn_options(10);
        one("synsent-synack", fix | kAimSynSent | kAppActs, build_tcp(sa));
        one("synsent-rst-ack", fix | kAimSynSent, build_tcp(w.peer.seg(c, kRst | kAck)));
        TcpSpec syn = w.peer.seg(c, kSyn);
        syn.opts = RawPeer::full_syn_options(10);
        one("synsent-simultaneous-syn", fix | kAimSynSent, build_tcp(syn));
    }
    // Listener: SYN with options, SYN flood (cookies), stray ACK.
    {
        RawPeer::Conn c;
        c.stack_port = 80;
        c.peer_port = 41000;
        c.peer_nxt = 1000;
        TcpSpec syn = w.peer.seg(c, kSyn);
        syn.opts = RawPeer::full_syn_options(1);
        one("listener-syn", fix | kAimListener | kAppActs, build_tcp(syn));
        std::vector<uint8_t> flood;
        for (uint16_t i = 0; i < 10; i++) {
            syn.sport = uint16_t(41000 + i);
            add_record(&flood, fix | kAimListener, build_tcp(syn));
        }
        c.peer_nxt = 1001;
        add_record(&flood, fix | kAimListener | kAppActs, build_tcp(w.peer.seg(c, kAck)));
        seeds.push_back({"listener-syn-flood-cookies", flood});
        one("listener-stray-ack", fix | kAimListener, build_tcp(w.peer.seg(c, kAck)));
    }
    // ARP and ICMP.
    const MacAddr bcast{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
    one("arp-request", 0, build_arp(ArpSpec{w.peer.peer_mac, bcast, 1, w.peer.peer_mac, MacAddr{}, w.peer.peer_ip, w.peer.stack_ip}));
    one("arp-reply", 0, build_arp(ArpSpec{w.peer.peer_mac, w.peer.stack_mac, 2, w.peer.peer_mac, w.peer.stack_mac, w.peer.peer_ip, w.peer.stack_ip}));
    one("arp-gratuitous", 0, build_arp(ArpSpec{mac(9), bcast, 1, mac(9), MacAddr{}, ipv4(198, 18, 0, 9), ipv4(198, 18, 0, 9)}));
    one("icmp-echo", 0, build_icmp(IcmpSpec{w.peer.peer_mac, w.peer.stack_mac, w.peer.peer_ip, w.peer.stack_ip, 8, 0, 0x10001, std::vector<uint8_t>(56, 1)}));
    {
        TcpSpec q = w.peer.seg(w.est, kAck);
        std::swap(q.src_ip, q.dst_ip);
        std::swap(q.sport, q.dport);
        auto qf = build_tcp(q);
        std::vector<uint8_t> quoted(qf.begin() + 14, qf.begin() + 14 + 28);
        one("icmp-frag-needed", 0, build_icmp(IcmpSpec{w.peer.peer_mac, w.peer.stack_mac, ipv4(198, 18, 0, 254), w.peer.stack_ip, 3, 4, 576, quoted}));
        one("icmp-port-unreachable", 0, build_icmp(IcmpSpec{w.peer.peer_mac, w.peer.stack_mac, w.peer.peer_ip, w.peer.stack_ip, 3, 3, 0, quoted}));
    }
    // IPv6 (issue 31): to the stack's link-local address (fe80:: + EUI-64 of
    // its MAC) and its groups: echo, NS, NA (a DAD conflict while the
    // address is tentative), DAD NS, hop-by-hop and routing headers, a
    // fragment, packet too big quoting one of its packets, a truncated one.
    {
        const MacAddr &sm = w.peer.stack_mac, &pm = w.peer.peer_mac;
        uint8_t ours[16] = {0xfe, 0x80}, peer[16] = {0xfe, 0x80}, sn[16] = {0xff, 0x02}, all[16] = {0xff, 0x02};
        const MacAddr *macs[2] = {&sm, &pm};
        uint8_t *addrs[2] = {ours, peer};
        for (int k = 0; k < 2; k++) {
            addrs[k][8] = uint8_t(macs[k]->b[0] ^ 2);
            addrs[k][9] = macs[k]->b[1];
            addrs[k][10] = macs[k]->b[2];
            addrs[k][11] = 0xff;
            addrs[k][12] = 0xfe;
            std::memcpy(addrs[k] + 13, macs[k]->b + 3, 3);
        }
        sn[11] = 1;
        sn[12] = 0xff;
        std::memcpy(sn + 13, ours + 13, 3);
        all[15] = 1;
        const uint8_t sn_mac[6] = {0x33, 0x33, 0xff, ours[13], ours[14], ours[15]};
        const uint8_t all_mac[6] = {0x33, 0x33, 0, 0, 0, 1};
        const uint8_t unspec[16] = {};
        std::vector<uint8_t> echo = {128, 0, 0, 0, 0x12, 0x34, 0, 1, 'e', 't', 'a'};
        one("ip6-echo", 0, ip6_frame(pm, sm.b, peer, ours, 58, 64, echo, 0));
        std::vector<uint8_t> ns = {135, 0, 0, 0, 0, 0, 0, 0};
        ns.insert(ns.end(), ours, ours + 16);
        std::vector<uint8_t> ns_dad = ns;
        const uint8_t slla[2] = {1, 1};
        ns.insert(ns.end(), slla, slla + 2);
        ns.insert(ns.end(), pm.b, pm.b + 6);
        one("ip6-nd-ns", 0, ip6_frame(pm, sn_mac, peer, sn, 58, 255, ns, 0));
        one("ip6-nd-ns-dad", 0, ip6_frame(pm, sn_mac, unspec, sn, 58, 255, ns_dad, 0));
        std::vector<uint8_t> na = {136, 0, 0, 0, 0x20, 0, 0, 0};
        na.insert(na.end(), ours, ours + 16);
        const uint8_t tlla[2] = {2, 1};
        na.insert(na.end(), tlla, tlla + 2);
        na.insert(na.end(), pm.b, pm.b + 6);
        one("ip6-nd-na-conflict", 0, ip6_frame(pm, all_mac, ours, all, 58, 255, na, 0));
        std::vector<uint8_t> hbh = {58, 0, 0x1e, 2, 0, 0, 1, 0};
        hbh.insert(hbh.end(), echo.begin(), echo.end());
        one("ip6-hop-by-hop", 0, ip6_frame(pm, sm.b, peer, ours, 0, 64, hbh, 8));
        std::vector<uint8_t> rt0 = {58, 2, 0, 1, 0, 0, 0, 0};
        rt0.insert(rt0.end(), peer, peer + 16);
        rt0.insert(rt0.end(), echo.begin(), echo.end());
        one("ip6-routing-type0", 0, ip6_frame(pm, sm.b, peer, ours, 43, 64, rt0, 24));
        std::vector<uint8_t> frag = {58, 0, 0, 1, 0, 0, 0, 7};
        frag.insert(frag.end(), echo.begin(), echo.end());
        one("ip6-fragment", 0, ip6_frame(pm, sm.b, peer, ours, 44, 64, frag, 8));
        std::vector<uint8_t> ptb = {2, 0, 0, 0, 0, 0, 0x05, 0x00};
        const std::vector<uint8_t> quoted = ip6_frame(sm, pm.b, ours, peer, 6, 64, std::vector<uint8_t>(20, 0));
        ptb.insert(ptb.end(), quoted.begin() + 14, quoted.end());
        one("ip6-packet-too-big", 0, ip6_frame(pm, sm.b, peer, ours, 58, 64, ptb, 0));
        std::vector<uint8_t> cut = ip6_frame(pm, sm.b, peer, ours, 58, 64, echo, 0);
        cut.resize(14 + 30);
        one("ip6-truncated", 0, cut);
        // TCP over IPv6 (tcp/tcp6.h): a SYN to a port nobody holds (a reset
        // back), the same with its checksum broken (dropped, counted).
        const std::vector<uint8_t> syn = {0x9c, 0x40, 0, 80, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff,
                                          0, 0, 0, 0};
        one("ip6-tcp-syn", 0, ip6_frame(pm, sm.b, peer, ours, 6, 64, syn, 0));
        std::vector<uint8_t> bad = ip6_frame(pm, sm.b, peer, ours, 6, 64, syn, 0);
        bad[14 + 40 + 16] ^= 0x5a;
        one("ip6-tcp-bad-csum", 0, bad);
        // UDP over IPv6 (udp/udp6.cc): to the world's dual-stack socket (read
        // and answered by the application, over IPv4 and IPv6), with a zero
        // checksum (refused over IPv6), to a port nobody holds (ICMPv6 port
        // unreachable).
        auto udp6 = [](uint16_t dport, size_t n) {
            std::vector<uint8_t> u(8 + n, 0x5a);
            u[0] = 0x23, u[1] = 0x45, u[2] = uint8_t(dport >> 8), u[3] = uint8_t(dport);
            u[4] = uint8_t((8 + n) >> 8), u[5] = uint8_t(8 + n), u[6] = u[7] = 0;
            return u;
        };
        one("ip6-udp-to-socket", kAppActs, ip6_frame(pm, sm.b, peer, ours, 17, 64, udp6(FuzzWorld::kUdpPort, 48), 0));
        one("ip6-udp-zero-csum", kAppActs, ip6_frame(pm, sm.b, peer, ours, 17, 64, udp6(FuzzWorld::kUdpPort, 16)));
        one("ip6-udp-no-port", 0, ip6_frame(pm, sm.b, peer, ours, 17, 64, udp6(5999, 10), 0));
        // IPv6 multicast (udp/mld.cc): to the socket's group, and MLD
        // queries (general to all-nodes, group-specific to the group) from
        // the peer's link-local address with the hop-by-hop Router Alert.
        const uint8_t *g6 = FuzzWorld::kUdpGroup6.b;
        const uint8_t g6_mac[6] = {0x33, 0x33, g6[12], g6[13], g6[14], g6[15]};
        one("ip6-udp-to-group", kAppActs, ip6_frame(pm, g6_mac, peer, g6, 17, 64, udp6(FuzzWorld::kUdpPort, 40), 0));
        auto mld_query = [&](const uint8_t *grp) {
            std::vector<uint8_t> q = {58, 0, 5, 2, 0, 0, 1, 0, 130, 0, 0, 0, 0x03, 0xe8, 0, 0};
            q.insert(q.end(), grp, grp + 16);
            q.insert(q.end(), {2, 125, 0, 0});
            return q;
        };
        one("ip6-mld-general-query", 0, ip6_frame(pm, all_mac, peer, all, 0, 1, mld_query(unspec), 8));
        one("ip6-mld-group-query", 0, ip6_frame(pm, g6_mac, peer, g6, 0, 1, mld_query(g6), 8));
    }
    // UDP (issue 31): to the world's socket (read and answered by the
    // application), to its group, to a port nobody holds (port unreachable),
    // and an IGMPv3 general query. Checksums by kFixL4Csum (IGMP's here).
    {
        auto ip_frame = [&](uint32_t dst, MacAddr dmac, uint8_t proto, const std::vector<uint8_t> &l4) {
            std::vector<uint8_t> f(14 + 20 + l4.size(), 0);
            std::memcpy(f.data(), dmac.b, 6);
            std::memcpy(f.data() + 6, w.peer.peer_mac.b, 6);
            f[12] = 0x08;
            uint8_t *ip = f.data() + 14;
            ip[0] = 0x45, ip[8] = proto == 2 ? 1 : 64, ip[9] = proto;
            ip[2] = uint8_t((20 + l4.size()) >> 8), ip[3] = uint8_t(20 + l4.size());
            for (int i = 0; i < 4; i++) {
                ip[12 + i] = uint8_t(w.peer.peer_ip >> (24 - 8 * i));
                ip[16 + i] = uint8_t(dst >> (24 - 8 * i));
            }
            std::memcpy(ip + 20, l4.data(), l4.size());
            fix_ip_checksum(f.data(), f.size());
            return f;
        };
        auto udp = [&](uint16_t dport, size_t n) {
            std::vector<uint8_t> u(8 + n, 0x33);
            u[0] = 0x9c, u[1] = 0x40, u[2] = uint8_t(dport >> 8), u[3] = uint8_t(dport);
            u[4] = uint8_t((8 + n) >> 8), u[5] = uint8_t(8 + n), u[6] = u[7] = 0;
            return u;
        };
        const uint32_t grp = FuzzWorld::kUdpGroup;
        const MacAddr gmac{{0x01, 0x00, 0x5e, uint8_t((grp >> 16) & 0x7f), uint8_t(grp >> 8), uint8_t(grp)}};
        one("udp-to-socket", fix | kAppActs, ip_frame(w.peer.stack_ip, w.peer.stack_mac, 17, udp(FuzzWorld::kUdpPort, 64)));
        one("udp-to-group", fix | kAppActs, ip_frame(grp, gmac, 17, udp(FuzzWorld::kUdpPort, 200)));
        one("udp-no-port", fix, ip_frame(w.peer.stack_ip, w.peer.stack_mac, 17, udp(5999, 10)));
        std::vector<uint8_t> q = {0x11, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        const uint16_t qc = uint16_t(~csum_fold(csum_add(0, q.data(), q.size())));
        q[2] = uint8_t(qc >> 8), q[3] = uint8_t(qc);
        one("igmp-general-query", kFixIpCsum,
            ip_frame(ipv4(224, 0, 0, 1), MacAddr{{0x01, 0x00, 0x5e, 0, 0, 1}}, 2, q));
    }
    tcp6_seeds(&seeds);
    // Every malformed class, raw (absolute numbers from this fixture).
    TcpSpec syn = w.peer.seg(w.est, kSyn);
    syn.sport = 41999;
    syn.opts = RawPeer::full_syn_options(3);
    for (auto &mc : malformed_cases(w.peer.seg(w.est, kAck | kPsh, std::vector<uint8_t>(100, 0x5a)), syn)) {
        one("malformed-" + mc.name, 0, mc.frame);
    }
    return seeds;
}

} // namespace mars::fuzz
