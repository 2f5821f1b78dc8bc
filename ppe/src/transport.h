// ppe/src/transport.h: MARS as the DTI engine's transport. Calls forward one
// to one (the two interfaces mirror each other); the only additions are the
// engine clock for connect() and the BufferProvider hook, which hands the
// stack's ring requests to the DTI engine (rings live in the app's region).
#pragma once

#include <dti/dti.h>
#include <dti/engine.h>
#include <mars/stack.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>

namespace ppe {

// The DTI engine calls each family of the Transport for its own kind of
// socket (dti/engine.h): the stream calls go to mars::Stack (TCP), the
// dgram_* calls to its UDP component (Stack::udp()), with no test of the id.
class MarsTransport final : public dti::engine::Transport {
  public:
    MarsTransport(mars::Stack *&stack, const uint64_t &now_ns) : stack_(stack), now_(now_ns) {}

    uint16_t events(dti::engine::TransportEvent *out, uint16_t max) override
    {
        // Same layout by contract (sock, bits, user); copied field by field
        // so a change on either side fails to compile instead of corrupting.
        mars::SockEvent evs[64];
        if (max > 64) max = 64;
        const uint16_t n = stack_->events(evs, max);
        for (uint16_t i = 0; i < n; i++) out[i] = {evs[i].sock, evs[i].bits, evs[i].user};
        return n;
    }

    // ---- stream sockets: mars::Stack ----
    int64_t open(uint64_t user) override { return stack_->open(user); }
    int bind(dti::engine::SockId s, dti::engine::Endpoint l) override { return stack_->bind(s, {l.ip, l.port}); }
    int listen(dti::engine::SockId s, int backlog) override { return stack_->listen(s, backlog); }
    int64_t accept(dti::engine::SockId l, uint64_t user) override { return stack_->accept(l, user); }
    int connect(dti::engine::SockId s, dti::engine::Endpoint r) override
    {
        return stack_->connect(s, {r.ip, r.port}, now_);
    }
    int bind6(dti::engine::SockId s, const dti::engine::Endpoint6 &l, bool v6only) override
    {
        return stack_->bind6(s, endpoint6(l), v6only);
    }
    int connect6(dti::engine::SockId s, const dti::engine::Endpoint6 &r) override
    {
        return stack_->connect6(s, endpoint6(r), now_);
    }
    int shutdown(dti::engine::SockId s, bool rd, bool wr) override { return stack_->shutdown(s, rd, wr); }
    int close(dti::engine::SockId s) override { return stack_->close(s); }
    int abort(dti::engine::SockId s) override { return stack_->abort(s); }
    int set_option(dti::engine::SockId s, dti::engine::Option o, int64_t v) override
    {
        return stack_->set_option(s, mars::SockOpt(uint16_t(o)), v);
    }
    int get_option(dti::engine::SockId s, dti::engine::Option o, int64_t *v) override
    {
        return stack_->get_option(s, mars::SockOpt(uint16_t(o)), v);
    }
    int info(dti::engine::SockId s, dti::engine::SockInfo *out) override
    {
        mars::SockInfo i;
        int r = stack_->info(s, &i);
        if (r < 0) return r;
        out->local = {i.local.ip, i.local.port};
        out->remote = {i.remote.ip, i.remote.port};
        out->error = i.error;
        out->peer_closed = i.peer_closed;
        out->ipv6 = i.ipv6;
        if (i.ipv6) {
            std::memcpy(out->local6.ip, i.local6.ip.b, 16);
            std::memcpy(out->remote6.ip, i.remote6.ip.b, 16);
            out->local6.port = i.local.port;
            out->remote6.port = i.remote.port;
        }
        return 0;
    }
    void set_user(dti::engine::SockId s, uint64_t user) override { stack_->set_user(s, user); }
    int rx_view(dti::engine::SockId s, dti::engine::RingSpan *out) override
    {
        return view(stack_->rx_view(s, &span_), out);
    }
    int rx_consume(dti::engine::SockId s, uint32_t n) override { return stack_->rx_consume(s, n); }
    int tx_view(dti::engine::SockId s, dti::engine::RingSpan *out) override
    {
        return view(stack_->tx_view(s, &span_), out);
    }
    int tx_commit(dti::engine::SockId s, uint32_t n, bool more) override { return stack_->tx_commit(s, n, more); }
    int tx_grow(dti::engine::SockId s, uint32_t size) override { return stack_->tx_grow(s, size); }
    void ring_levels(dti::engine::SockId s, dti::engine::RingLevels *out) override
    {
        mars::RingLevels l;
        stack_->ring_levels(s, &l);
        *out = {l.rx_rc, l.tx_rc, l.readable, l.writable};
    }

    // ---- datagram sockets: MARS's UDP component (Stack::udp()) ----
    int64_t dgram_open(uint64_t user) override { return stack_->udp().open(user); }
    int dgram_bind(dti::engine::SockId s, dti::engine::Endpoint l) override
    {
        return stack_->udp().bind(s, {l.ip, l.port});
    }
    int dgram_connect(dti::engine::SockId s, dti::engine::Endpoint r) override
    {
        return stack_->udp().connect(s, {r.ip, r.port});
    }
    int dgram_set_option(dti::engine::SockId s, dti::engine::Option o, int64_t v) override
    {
        return stack_->udp().set_option(s, mars::SockOpt(uint16_t(o)), v);
    }
    // MARS's UDP sockets have no option to read: the default -ENOPROTOOPT.
    int dgram_info(dti::engine::SockId s, dti::engine::SockInfo *out) override
    {
        mars::UdpInfo u;
        int r = stack_->udp().info(s, &u);
        if (r < 0) return r;
        *out = {{u.local.ip, u.local.port}, {u.remote.ip, u.remote.port}, u.error, false};
        out->errors = u.errors;
        out->ipv6 = u.ipv6;
        if (u.ipv6) {
            std::memcpy(out->local6.ip, u.local6.ip.b, 16);
            std::memcpy(out->remote6.ip, u.remote6.ip.b, 16);
            out->local6.port = u.local6.port;
            out->remote6.port = u.remote6.port;
        }
        return 0;
    }
    int dgram_bind6(dti::engine::SockId s, const dti::engine::Endpoint6 &l, bool v6only) override
    {
        return stack_->udp().bind6(s, endpoint6(l), v6only);
    }
    int dgram_connect6(dti::engine::SockId s, const dti::engine::Endpoint6 &r) override
    {
        return stack_->udp().connect6(s, endpoint6(r));
    }
    int64_t dgram_send6(dti::engine::SockId s, const dti::engine::Endpoint6 *dst, const void *data, size_t len,
                        int tos) override
    {
        const mars::Endpoint6 to = dst ? endpoint6(*dst) : mars::Endpoint6{};
        return stack_->udp().send_to6(s, dst ? &to : nullptr, data, len, tos);
    }
    int dgram_rx_view(dti::engine::SockId s, dti::engine::RingSpan *out) override
    {
        return view(stack_->udp().rx_view(s, &span_), out);
    }
    int dgram_rx_consume(dti::engine::SockId s, uint32_t n) override { return stack_->udp().rx_consume(s, n); }
    int64_t dgram_send(dti::engine::SockId s, const dti::engine::Endpoint *dst, const void *data, size_t len,
                       int tos) override
    {
        const mars::Endpoint to{dst ? dst->ip : 0, dst ? dst->port : uint16_t(0)};
        return stack_->udp().send_to(s, dst ? &to : nullptr, data, len, tos);
    }
    int dgram_membership(dti::engine::SockId s, uint32_t group, uint32_t source, bool join) override
    {
        return join ? stack_->udp().join(s, {group, source}) : stack_->udp().leave(s, {group, source});
    }
    int dgram_membership6(dti::engine::SockId s, const uint8_t group[16], const uint8_t source[16], bool join) override
    {
        mars::UdpGroup6 g;
        std::memcpy(g.group.b, group, 16);
        std::memcpy(g.source.b, source, 16);
        return join ? stack_->udp().join6(s, g) : stack_->udp().leave6(s, g);
    }
    int dgram_close(dti::engine::SockId s) override { return stack_->udp().close(s); }

  private:
    static mars::Endpoint6 endpoint6(const dti::engine::Endpoint6 &e)
    {
        mars::Endpoint6 m;
        std::memcpy(m.ip.b, e.ip, 16);
        m.port = e.port;
        return m;
    }

    int view(int r, dti::engine::RingSpan *out)
    {
        if (r < 0) return r;
        out->p[0] = span_.p[0];
        out->p[1] = span_.p[1];
        out->n[0] = span_.n[0];
        out->n[1] = span_.n[1];
        return r;
    }

    mars::Stack *&stack_;
    const uint64_t &now_;
    mars::RingSpan span_{};
};

// MARS asks for ring memory; the DTI engine takes it from the app's region.
class DtiBuffers final : public mars::BufferProvider {
  public:
    dti::engine::Server *engine = nullptr;
    bool provide(uint64_t user, mars::RingMemory *out) override
    {
        if (!engine) return false;
        dti::engine::RingMemory m;
        if (!engine->provide(user, &m)) return false;
        *out = {m.rx, m.rx_size, m.tx, m.tx_size};
        return true;
    }
    void reclaim(uint64_t user, const mars::RingMemory &mem) override
    {
        if (engine) engine->reclaim(user, {mem.rx, mem.rx_size, mem.tx, mem.tx_size});
    }
    // Autotuning: the receive ring grows in place within its slot's reserve
    // (refused at [limits] memory_per_app: the window then stays).
    bool grow_rx(uint64_t user, mars::RingMemory *mem, uint32_t want) override
    {
        if (!engine) return false;
        dti::engine::RingMemory m{mem->rx, mem->rx_size, mem->tx, mem->tx_size};
        if (!engine->grow_rx(user, &m, want)) return false;
        *mem = {m.rx, m.rx_size, m.tx, m.tx_size};
        return true;
    }
    // Send-buffer autotuning: the engine publishes the size for the writer,
    // which grows the ring (TX_GROW, then Stack::tx_grow).
    void want_tx(uint64_t user, const mars::RingMemory &mem, uint32_t want) override
    {
        if (engine) engine->want_tx(user, {mem.rx, mem.rx_size, mem.tx, mem.tx_size}, want);
    }
};

// The two interfaces mirror each other's enumerations value by value (the
// calls above convert by number), so every enumerator is checked here: an
// enumerator added, removed or reordered on one side fails to compile.
#define ETA_SAME_EVENT_BIT(name) \
    static_assert(uint32_t(dti::engine::name) == uint32_t(mars::name), "DTI and MARS event bit " #name " agree")
ETA_SAME_EVENT_BIT(kEvConnected);
ETA_SAME_EVENT_BIT(kEvAcceptable);
ETA_SAME_EVENT_BIT(kEvReadable);
ETA_SAME_EVENT_BIT(kEvWritable);
ETA_SAME_EVENT_BIT(kEvPeerClosed);
ETA_SAME_EVENT_BIT(kEvReset);
ETA_SAME_EVENT_BIT(kEvError);
ETA_SAME_EVENT_BIT(kEvClosed);
#undef ETA_SAME_EVENT_BIT
static_assert(sizeof(dti::engine::EventBits) == sizeof(mars::SockEventBits), "DTI and MARS event bits have one width");

#define ETA_SAME_OPTION(name) \
    static_assert(uint16_t(dti::engine::Option::name) == uint16_t(mars::SockOpt::name), \
                  "DTI and MARS socket option " #name " agree")
ETA_SAME_OPTION(kNoDelay);
ETA_SAME_OPTION(kCork);
ETA_SAME_OPTION(kKeepAlive);
ETA_SAME_OPTION(kKeepIdleSec);
ETA_SAME_OPTION(kKeepIntvlSec);
ETA_SAME_OPTION(kKeepCnt);
ETA_SAME_OPTION(kMaxSeg);
ETA_SAME_OPTION(kUserTimeoutMs);
ETA_SAME_OPTION(kLingerSec);
ETA_SAME_OPTION(kReuseAddr);
ETA_SAME_OPTION(kReusePort);
ETA_SAME_OPTION(kTos);
ETA_SAME_OPTION(kRcvLowat);
ETA_SAME_OPTION(kRcvBuf);
ETA_SAME_OPTION(kNotsentLowat);
ETA_SAME_OPTION(kTclass);
ETA_SAME_OPTION(kMulticastAll);
ETA_SAME_OPTION(kTtl);
ETA_SAME_OPTION(kHopLimit);
ETA_SAME_OPTION(kMulticastTtl);
ETA_SAME_OPTION(kMulticastHops);
ETA_SAME_OPTION(kMulticastLoop);
ETA_SAME_OPTION(kMulticastLoop6);
#undef ETA_SAME_OPTION
static_assert(sizeof(dti::engine::Option) == sizeof(mars::SockOpt), "DTI and MARS socket options have one width");

// A datagram socket's receive ring is MARS's ring of UdpRecords, read in
// place by the application as dti_dgram records: one layout.
static_assert(sizeof(dti_dgram) == sizeof(mars::UdpRecord) && DTI_DGRAM_ALIGN == mars::kUdpRecordAlign);
static_assert(offsetof(dti_dgram, size) == offsetof(mars::UdpRecord, size) &&
              offsetof(dti_dgram, len) == offsetof(mars::UdpRecord, len) &&
              offsetof(dti_dgram, src_ip) == offsetof(mars::UdpRecord, src_ip) &&
              offsetof(dti_dgram, dst_ip) == offsetof(mars::UdpRecord, dst_ip) &&
              offsetof(dti_dgram, src_port) == offsetof(mars::UdpRecord, src_port) &&
              offsetof(dti_dgram, dst_port) == offsetof(mars::UdpRecord, dst_port) &&
              offsetof(dti_dgram, flags) == offsetof(mars::UdpRecord, flags) &&
              offsetof(dti_dgram, ts_ns) == offsetof(mars::UdpRecord, ts_ns));
static_assert(DTI_DGRAM_PAD == mars::kUdpRecPad && DTI_DGRAM_MULTICAST == mars::kUdpRecMulticast);
static_assert(DTI_DGRAM_TOS(0xabu << mars::kUdpRecTosShift) == 0xab && DTI_DGRAM_TTL(0xcdu << mars::kUdpRecTtlShift) == 0xcd);

} // namespace ppe
