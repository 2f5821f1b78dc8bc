// tests/unit/mars/sim/sim_wire.cc: TEST FIXTURE. See sim_wire.h.
#include "sim_wire.h"

#include "frame.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <cstring>
#include <stdexcept>

namespace mars::sim {

void pattern_fill(uint64_t seed, uint64_t offset, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = pattern_byte(seed, offset + i);
}

size_t pattern_check(uint64_t seed, uint64_t offset, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != pattern_byte(seed, offset + i)) return i;
    }
    return n;
}

// ---- FramePool -------------------------------------------------------------

FramePool::FramePool(uint32_t frames, uint16_t room)
    : capacity_(frames), room_(room), mem_(size_t(frames) * room), busy_(frames, 0)
{
    free_.reserve(frames);
    for (uint32_t i = frames; i-- > 0;) free_.push_back(i);
}

bool FramePool::get(PacketRef *out)
{
    if (free_.empty()) {
        exhausted_++;
        return false;
    }
    uint32_t i = free_.back();
    free_.pop_back();
    busy_[i] = 1;
    out->handle = reinterpret_cast<void *>(uintptr_t(i) + 1);
    out->data = mem_.data() + size_t(i) * room_;
    out->len = 0;
    out->room = room_;
    out->flags = 0;
    return true;
}

FramePool::~FramePool()
{
    for (void *b : exact_) std::free(b);
}

PacketRef FramePool::get_exact(const uint8_t *bytes, size_t len)
{
    len = std::min<size_t>(len, 0xffff);
    auto *block = static_cast<uint8_t *>(std::malloc(len ? len : 1));
    if (block == nullptr) throw std::bad_alloc();
    if (len) std::memcpy(block, bytes, len);
    exact_.insert(block);
    return PacketRef{block, block, uint16_t(len), 0, 0};
}

void FramePool::put(const PacketRef &f)
{
    if (auto it = exact_.find(f.handle); it != exact_.end()) {
        std::free(*it);
        exact_.erase(it);
        return;
    }
    uintptr_t h = reinterpret_cast<uintptr_t>(f.handle);
    if (h == 0 || h > capacity_ || !busy_[h - 1]) {
        bad_releases_++;
        return;
    }
    busy_[h - 1] = 0;
    free_.push_back(uint32_t(h - 1));
}

bool FramePool::clone(const PacketRef &f, PacketRef *out)
{
    if (!get(out)) return false;
    uint16_t n = std::min<uint16_t>(f.len, room_);
    std::memcpy(out->data, f.data, n);
    out->len = n;
    out->room = 0;
    return true;
}

// ---- SimPort ---------------------------------------------------------------

uint16_t SimPort::alloc(PacketRef *out, uint16_t n)
{
    if (alloc_fails_) return 0;
    uint16_t got = 0;
    while (got < n && pool_.get(&out[got])) got++;
    return got;
}

uint16_t SimPort::transmit(PacketRef *frames, uint16_t n)
{
    for (uint16_t i = 0; i < n; i++) {
        PacketRef &f = frames[i];
        uint32_t asked = f.flags & (kTxIpCsum | kTxTcpCsum);
        bool offload_ok = (!(asked & kTxIpCsum) || (offloads_ & kOffloadTxIpCsum)) &&
                          (!(asked & kTxTcpCsum) || (offloads_ & kOffloadTxTcpCsum));
        if (f.len == 0 || (f.room != 0 && f.len > f.room) || !offload_ok) {
            tx_invalid++;
            pool_.put(f);
            continue;
        }
        if (emulate_offload_) apply_tx_offload(f);
        tx_frames++;
        sink_(f);
    }
    return n;
}

void SimPort::release(PacketRef *frames, uint16_t n)
{
    for (uint16_t i = 0; i < n; i++) pool_.put(frames[i]);
}

void apply_tx_offload(PacketRef &f)
{
    if (f.flags & kTxIpCsum) fix_ip_checksum(f.data, f.len);
    if (f.flags & kTxTcpCsum) fix_l4_checksum(f.data, f.len);
    f.flags &= ~uint32_t(kTxIpCsum | kTxTcpCsum);
}

void apply_rx_offload(PacketRef &f)
{
    Parsed p;
    parse_frame(f.data, f.len, &p);
    if (p.is_ip && p.ip_csum_ok) f.flags |= kRxIpCsumGood;
    if (p.is_tcp && p.tcp_csum_ok) f.flags |= kRxL4CsumGood;
}

// ---- RingPool --------------------------------------------------------------

RingPool::RingPool(uint32_t slots, uint32_t rx_size, uint32_t tx_size)
    : slots_(slots), rx_size_(rx_size), tx_size_(tx_size), mem_(size_t(slots) * (rx_size + tx_size)), busy_(slots, 0)
{
    for (uint32_t i = slots; i-- > 0;) free_.push_back(i);
}

bool RingPool::provide(uint64_t, RingMemory *out)
{
    if (free_.empty()) {
        refused_++;
        return false;
    }
    uint32_t i = free_.back();
    free_.pop_back();
    busy_[i] = 1;
    uint8_t *base = mem_.data() + size_t(i) * (rx_size_ + tx_size_);
    *out = RingMemory{base, rx_size_, base + rx_size_, tx_size_};
    return true;
}

void RingPool::reclaim(uint64_t, const RingMemory &m)
{
    size_t off = size_t(m.rx - mem_.data());
    size_t stride = size_t(rx_size_) + tx_size_;
    if (m.rx < mem_.data() || off % stride != 0 || off / stride >= slots_ || !busy_[off / stride]) {
        bad_reclaims_++;
        return;
    }
    busy_[off / stride] = 0;
    free_.push_back(uint32_t(off / stride));
}

// ---- Link ------------------------------------------------------------------

std::string LinkParams::describe() const
{
    char b[200];
    std::snprintf(b, sizeof b, "loss %.3f dup %.3f reorder %.3f corrupt %.3f delay %lluus rate %llu bps queue %u seed %llu", loss,
                  duplicate, reorder, corrupt, (unsigned long long)(delay_ns / 1000), (unsigned long long)rate_bps,
                  queue_frames, (unsigned long long)seed);
    return b;
}

Link::~Link() { flush(); }

void Link::flush()
{
    while (!q_.empty()) {
        pool_.put(q_.top().f);
        q_.pop();
    }
    departures_.clear();
}

void Link::enqueue(const PacketRef &f, uint64_t at)
{
    PacketRef g = f;
    g.flags = 0;
    g.room = 0;
    q_.push(InFlight{at, order_++, g});
}

void Link::send(const PacketRef &f, uint64_t now)
{
    st_.sent++;
    if (rng_.chance(p_.loss)) {
        st_.lost++;
        pool_.put(f);
        return;
    }
    uint64_t at = now;
    if (p_.rate_bps) {
        while (!departures_.empty() && departures_.front() <= now) departures_.pop_front();
        if (p_.queue_frames && departures_.size() >= p_.queue_frames) {
            st_.queue_drops++;
            pool_.put(f);
            return;
        }
        // 24 bytes of preamble, FCS and inter-frame gap per frame on the wire.
        uint64_t ser = (uint64_t(f.len) + 24) * 8 * 1'000'000'000ull / p_.rate_bps;
        busy_until_ = std::max(now, busy_until_) + std::max<uint64_t>(ser, 1);
        departures_.push_back(busy_until_);
        at = busy_until_;
    }
    at += std::max<uint64_t>(p_.delay_ns, 1000);
    PacketRef dup{};
    bool duplicated = rng_.chance(p_.duplicate) && pool_.clone(f, &dup);
    uint16_t ethertype = f.len >= kEthLen ? uint16_t(f.data[12] << 8 | f.data[13]) : 0;
    // Corruption that slipped past the Ethernet FCS: one bit in the IP
    // packet. ARP carries no checksum of its own, so it is left alone.
    if (ethertype == kEtherIpv4 && f.len > kEthLen && rng_.chance(p_.corrupt)) {
        uint64_t bit = rng_.below(uint64_t(f.len - kEthLen) * 8);
        f.data[kEthLen + bit / 8] ^= uint8_t(1u << (bit % 8));
        st_.corrupted++;
    }
    if (rng_.chance(p_.reorder)) {
        st_.reordered++;
        at += p_.reorder_extra_ns;
    }
    enqueue(f, at);
    if (duplicated) {
        st_.duplicated++;
        enqueue(dup, at + 1000 + rng_.below(p_.reorder_extra_ns + 1));
    }
}

uint16_t Link::take_due(uint64_t now, PacketRef *out, uint16_t max)
{
    uint16_t n = 0;
    while (n < max && !q_.empty() && q_.top().at <= now) {
        out[n++] = q_.top().f;
        q_.pop();
    }
    st_.delivered += n;
    return n;
}

// ---- SimNet ----------------------------------------------------------------

StackConfig test_stack_config(uint8_t host_octet)
{
    StackConfig c;
    c.mac = mac(host_octet);
    c.ip = ipv4(198, 18, 0, host_octet);
    c.prefix = 24;
    c.max_sockets = 1024;
    c.ooo_pool_frames = 2048;
    c.ooo_frames_per_conn = 256;
    c.isn_secret[0] = 0x243f6a8885a308d3ull + host_octet;
    c.isn_secret[1] = 0x13198a2e03707344ull;
    c.tcp.time_wait_ns = 2'000'000'000ull;
    return c;
}

SimNetConfig default_simnet_config()
{
    SimNetConfig c;
    c.a.stack = test_stack_config(1);
    c.b.stack = test_stack_config(2);
    c.a_to_b.seed = 11;
    c.b_to_a.seed = 22;
    return c;
}

SimNet::SimNet(const SimNetConfig &c) : pool_(c.pool_frames)
{
    for (int h = 0; h < 2; h++) links_[h] = std::make_unique<Link>(pool_, h == 0 ? c.a_to_b : c.b_to_a);
    for (int h = 0; h < 2; h++) {
        const HostConfig &hc = h == 0 ? c.a : c.b;
        Host &host = hosts_[h];
        host.config = hc.stack;
        host.rings = std::make_unique<RingPool>(hc.ring_slots, hc.stack.tcp.rcvbuf, hc.stack.tcp.sndbuf);
        Link *out = links_[h].get();
        host.port = std::make_unique<SimPort>(pool_, [this, out](const PacketRef &f) { out->send(f, now_); }, hc.offloads);
        std::string err;
        host.stack = Stack::create(hc.stack, *host.port, *host.rings, &err);
        if (!host.stack) throw std::runtime_error("Stack::create failed: " + err);
    }
    for (auto &h : hosts_) h.stack->announce(now_);
}

SimNet::~SimNet()
{
    // Stacks go first (they hold frames and rings), then frames in flight.
    for (auto &h : hosts_) h.stack.reset();
    for (auto &l : links_) l->flush();
}

bool SimNet::step_once()
{
    bool progress = false;
    PacketRef burst[32];
    for (int h = 0; h < 2; h++) {
        Link &in = *links_[1 - h];
        uint16_t n;
        while ((n = in.take_due(now_, burst, 32)) > 0) {
            if (hosts_[h].port->offloads() & kOffloadRxCsum) {
                for (uint16_t i = 0; i < n; i++) apply_rx_offload(burst[i]);
            }
            hosts_[h].stack->input(burst, n, now_);
            progress = true;
        }
    }
    for (auto &h : hosts_) h.stack->poll(now_);
    SockEvent evs[64];
    for (int h = 0; h < 2; h++) {
        uint16_t n;
        int rounds = 0;
        while ((n = hosts_[h].stack->events(evs, 64)) > 0 && rounds++ < 1000) {
            progress = true;
            for (uint16_t i = 0; i < n; i++) {
                if (on_event) on_event(h, evs[i]);
            }
        }
    }
    if (on_tick) on_tick();
    return progress;
}

void SimNet::step_now() { step_once(); }

bool SimNet::run_until(const std::function<bool()> &done, uint64_t budget_ns)
{
    const uint64_t end = now_ + budget_ns;
    uint32_t idle_same_instant = 0;
    uint64_t busy_same_instant = 0;
    stall_report_.clear();
    while (true) {
        bool progress = step_once();
        if (done()) return true;
        uint64_t next = std::min(links_[0]->next_arrival(), links_[1]->next_arrival());
        for (auto &h : hosts_) next = std::min(next, h.stack->next_deadline_ns());
        if (next <= now_) {
            // Something claims to be due now. Progress at one instant is fine
            // for a while; a deadline that poll() never clears is a stall.
            if (progress ? ++busy_same_instant > 1'000'000 : ++idle_same_instant > 1000) {
                char b[200];
                std::snprintf(b, sizeof b, "virtual time stuck at %llu ns: deadlines a=%llu b=%llu, %s",
                              (unsigned long long)now_, (unsigned long long)hosts_[0].stack->next_deadline_ns(),
                              (unsigned long long)hosts_[1].stack->next_deadline_ns(),
                              progress ? "endless work at one instant" : "poll() does not clear its deadline");
                stall_report_ = b;
                return false;
            }
            continue;
        }
        idle_same_instant = 0;
        busy_same_instant = 0;
        if (next > end) {
            now_ = end;
            step_once();
            return done();
        }
        now_ = next;
    }
}

void SimNet::run_for(uint64_t ns)
{
    run_until([] { return false; }, ns);
}

const char *state_name(TcpState s)
{
    static const char *names[] = {"CLOSED",      "LISTEN",     "SYN-SENT",   "SYN-RECEIVED", "ESTABLISHED", "FIN-WAIT-1",
                                  "FIN-WAIT-2",  "CLOSE-WAIT", "CLOSING",    "LAST-ACK",     "TIME-WAIT"};
    unsigned i = unsigned(s);
    return i < sizeof names / sizeof names[0] ? names[i] : "?";
}

} // namespace mars::sim
