// tests/unit/mars/sim/sim_wire.cc: TEST FIXTURE. See sim_wire.h.
#include "sim_wire.h"

#include "frame.h"

#include <sanitizer/asan_interface.h>

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
    for (ExactBlock &b : exact_blocks_) {
        ASAN_UNPOISON_MEMORY_REGION(b.mem, kExactRoom); // the allocator's own checks expect it so
        std::free(b.mem);
    }
}

PacketRef FramePool::get_exact(const uint8_t *bytes, size_t len)
{
    len = std::min<size_t>(len, 0xffff);
    uint32_t i;
    if (exact_free_.size() - exact_free_head_ < kExactIdle) {
        auto *mem = static_cast<uint8_t *>(std::malloc(kExactRoom));
        if (mem == nullptr) throw std::bad_alloc();
        ASAN_POISON_MEMORY_REGION(mem, kExactRoom);
        i = uint32_t(exact_blocks_.size());
        exact_blocks_.push_back(ExactBlock{mem, 0, false});
    } else {
        i = exact_free_[exact_free_head_++];
        if (exact_free_head_ >= 4 * kExactIdle) { // drop the taken front (a move, no allocation)
            exact_free_.erase(exact_free_.begin(), exact_free_.begin() + long(exact_free_head_));
            exact_free_head_ = 0;
        }
    }
    ExactBlock &b = exact_blocks_[i];
    // The frame's bytes become readable; the rest of the block stays
    // poisoned, the granule of the last byte included (ASan's shadow says
    // how many of a granule's 8 bytes are addressable), and the block's
    // start is the allocation's (its left redzone catches reads before it).
    ASAN_UNPOISON_MEMORY_REGION(b.mem, len);
    if (len) std::memcpy(b.mem, bytes, len);
    b.len = uint16_t(len);
    b.busy = true;
    return PacketRef{reinterpret_cast<void *>(uintptr_t(capacity_) + 1 + i), b.mem, uint16_t(len), 0, 0};
}

bool FramePool::put_exact(uintptr_t handle)
{
    const uintptr_t i = handle - capacity_ - 1;
    if (handle <= capacity_ || i >= exact_blocks_.size() || !exact_blocks_[i].busy) return false;
    ExactBlock &b = exact_blocks_[i];
    ASAN_POISON_MEMORY_REGION(b.mem, b.len); // a read after put() is reported
    b.busy = false;
    exact_free_.push_back(uint32_t(i));
    return true;
}

void FramePool::put(const PacketRef &f)
{
    uintptr_t h = reinterpret_cast<uintptr_t>(f.handle);
    if (h > capacity_) {
        if (!put_exact(h)) bad_releases_++;
        return;
    }
    if (h == 0 || !busy_[h - 1]) {
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

bool SimPort::attach_external(PacketRef &frame, const uint8_t *payload, uint16_t len, uint32_t *refs)
{
    if (!(offloads_ & kOffloadTxExternal) || len == 0 || len > frame.room) return false;
    attached_.push_back(External{frame.handle, payload, len, refs, {}});
    frame.flags |= kTxExternal;
    return true;
}

bool SimPort::take_external(const PacketRef &f, External *out)
{
    for (size_t i = 0; i < attached_.size(); i++) {
        if (attached_[i].handle != f.handle) continue;
        *out = std::move(attached_[i]);
        attached_.erase(attached_.begin() + long(i));
        return true;
    }
    return false;
}

// A frame with an attached payload dropped or released unsent: the
// reference goes with it.
void SimPort::drop_external(const PacketRef &f)
{
    External e;
    if ((f.flags & kTxExternal) && take_external(f, &e)) --*e.refs;
}

size_t SimPort::release_external(size_t n)
{
    size_t done = 0;
    for (; done < n && !held_.empty(); done++) {
        External &e = held_.front();
        if (std::memcmp(e.sent.data(), e.payload, e.len) != 0) external_changed++;
        --*e.refs;
        held_.pop_front();
    }
    return done;
}

uint16_t SimPort::transmit(PacketRef *frames, uint16_t n)
{
    for (uint16_t i = 0; i < n; i++) {
        PacketRef &f = frames[i];
        if (f.flags & kTxExternal) {
            // The device reads the payload after the headers in the buffer.
            External e;
            if (!take_external(f, &e) || f.len + e.len > f.room) {
                tx_invalid++;
                if (e.refs) --*e.refs;
                pool_.put(f);
                continue;
            }
            if (external_read_) {
                std::memcpy(f.data + f.len, e.payload, e.len);
                f.len = uint16_t(f.len + e.len);
            }
            f.flags &= ~uint32_t(kTxExternal);
            external_frames++;
            if (hold_external_) {
                e.sent.assign(e.payload, e.payload + e.len);
                held_.push_back(std::move(e));
            } else {
                --*e.refs;
            }
        }
        uint32_t asked = f.flags & (kTxIpCsum | kTxTcpCsum);
        bool offload_ok = (!(asked & kTxIpCsum) || (offloads_ & kOffloadTxIpCsum)) &&
                          (!(asked & kTxTcpCsum) || (offloads_ & kOffloadTxTcpCsum));
        if (f.len == 0 || (f.room != 0 && f.len > f.room) || !offload_ok) {
            tx_invalid++;
            pool_.put(f);
            continue;
        }
        if (f.flags & kTxTcpSeg) {
            if (!segment(f)) tx_invalid++;
            continue;
        }
        deliver(f);
    }
    return n;
}

void SimPort::deliver(PacketRef &f)
{
    if (emulate_offload_) apply_tx_offload(f);
    tx_frames++;
    sink_(f);
}

uint16_t SimPort::alloc_tso(PacketRef *out, uint16_t n)
{
    uint16_t got = 0;
    while (large_ && !alloc_fails_ && got < n && large_->get(&out[got])) got++;
    return got;
}

namespace {

uint16_t get16(const uint8_t *p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t *p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
void put16(uint8_t *p, uint16_t v)
{
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}
void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = uint8_t(v >> (24 - 8 * i));
}

// The folded, uninverted pseudo-header sum (mars/checksum_offload.h): IPv4's,
// or IPv6's (v6: the 128-bit addresses, RFC 8200 8.1).
uint16_t pseudo_seed(const uint8_t *ip, uint16_t tcp_len, bool v6 = false)
{
    uint32_t sum = 6u + tcp_len;
    if (v6) {
        for (int i = 8; i < 40; i += 2) sum += get16(ip + i);
    } else {
        sum += get16(ip + 12) + get16(ip + 14) + get16(ip + 16) + get16(ip + 18);
    }
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(sum);
}

} // namespace

// What a TSO NIC does with one large frame, into ordinary frames that ask
// for checksum offload (so they look exactly like segments MARS built).
bool SimPort::segment(PacketRef &big)
{
    // IPv6 (EtherType 0x86dd, TCP right after the 40-byte header): no IP
    // checksum to ask for, the payload length instead of the total length.
    const bool v6 = big.len > 14 + 40 && get16(big.data + 12) == 0x86dd;
    const uint32_t needs = kOffloadTxTcpSeg | kOffloadTxTcpCsum | (v6 ? 0u : uint32_t(kOffloadTxIpCsum));
    const uint32_t asks = kTxTcpCsum | (v6 ? 0u : uint32_t(kTxIpCsum));
    const uint8_t *ip = big.data + 14;
    bool ok = (offloads_ & needs) == needs && large_ && big.len > 14 + 20 &&
              (v6 ? (ip[0] >> 4) == 6 && ip[6] == 6 : (ip[0] >> 4) == 4 && ip[9] == 6) &&
              (big.flags & (kTxIpCsum | kTxTcpCsum)) == asks && tx_seg_size(big) > 0 && big.len <= tso_max_;
    const uint32_t l3 = !ok ? 0 : v6 ? 40u : (ip[0] & 0x0f) * 4u;
    const uint8_t *th = ip + l3;
    const uint32_t hdr = ok ? 14 + l3 + (th[12] >> 4) * 4u : 0;
    ok = ok && hdr < big.len && get16(th + 16) == pseudo_seed(ip, 0, v6) &&
         (v6 ? get16(ip + 4) == big.len - 14 - 40 : get16(ip + 2) == big.len - 14 && get16(ip + 10) == 0);
    if (!ok) {
        large_->put(big);
        return false;
    }
    tso_frames++;
    if (v6) tso_frames6++;
    tso_seg_size = tx_seg_size(big);
    const uint32_t payload = big.len - hdr;
    const uint32_t seq = get32(th + 4);
    for (uint32_t off = 0; off < payload; off += tx_seg_size(big)) {
        const uint32_t len = std::min<uint32_t>(tx_seg_size(big), payload - off);
        const bool last = off + len == payload;
        PacketRef f;
        if (!pool_.get(&f)) break; // a NIC would not lose them; tests size the pool
        std::memcpy(f.data, big.data, hdr);
        std::memcpy(f.data + hdr, big.data + hdr + off, len);
        uint8_t *fip = f.data + 14, *fth = fip + l3;
        if (v6) put16(fip + 4, uint16_t(hdr - 14 - l3 + len));
        else put16(fip + 2, uint16_t(hdr - 14 + len));
        put32(fth + 4, seq + off);
        if (!last) fth[13] &= uint8_t(~(0x08 | 0x01)); // PSH, FIN on the last segment only
        put16(fth + 16, pseudo_seed(fip, uint16_t(hdr - 14 - l3 + len), v6));
        f.len = uint16_t(hdr + len);
        f.flags = asks;
        tso_segments++;
        deliver(f);
    }
    large_->put(big);
    return true;
}

void SimPort::release(PacketRef *frames, uint16_t n)
{
    for (uint16_t i = 0; i < n; i++) {
        drop_external(frames[i]);
        pool_.put(frames[i]);
    }
}

void SimPort::unclaimed(PacketRef &frame, Unclaimed why)
{
    unclaimed_frames.push_back(UnclaimedFrame{std::vector<uint8_t>(frame.data, frame.data + frame.len), why});
    release(&frame, 1);
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
    // IPv6 packets only with corrupt_ipv6 (their header has no checksum).
    if ((ethertype == kEtherIpv4 || (p_.corrupt_ipv6 && ethertype == 0x86dd)) && f.len > kEthLen &&
        rng_.chance(p_.corrupt)) {
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

const char *state_name(TcpState s)
{
    static const char *names[] = {"CLOSED",      "LISTEN",     "SYN-SENT",   "SYN-RECEIVED", "ESTABLISHED", "FIN-WAIT-1",
                                  "FIN-WAIT-2",  "CLOSE-WAIT", "CLOSING",    "LAST-ACK",     "TIME-WAIT"};
    unsigned i = unsigned(s);
    return i < sizeof names / sizeof names[0] ? names[i] : "?";
}

} // namespace mars::sim
