// Datagram sockets through the DTI (issue 31): the DTI engine over
// ppe::MarsTransport on the MARS simulator, its rings in a region the test
// plays the application of (commands and records written by hand, as in
// digest_mars_test.cc), the other simulated host's MARS UDP socket as the
// peer. What the application reads is MARS's record ring in place; what it
// sends is records in its send ring and one SEND_DGRAMS per batch. No root,
// no DPDK, virtual time.
#include "sim_wire.h"
#include "transport.h"

#include "dti_abi.h"
#include "region_app.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace de = dti::engine;
using mars::sim::SimNet;

constexpr uint64_t kSec = 1'000'000'000;
constexpr uint32_t kRing = 16384;

using region_test::App;

dti_cmd cmd(uint16_t op, uint32_t sock, uint32_t a0 = 0, uint32_t a1 = 0)
{
    dti_cmd c{};
    c.op = op;
    c.sock = sock;
    c.arg0 = a0;
    c.arg1 = a1;
    return c;
}

// 2001:2::host (RFC 5180's benchmarking prefix): each simulated host's IPv6 address.
mars::Ip6Addr addr6(uint8_t host)
{
    mars::Ip6Addr a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[3] = 0x02;
    a.b[15] = host;
    return a;
}

// A datagram as the application saw it.
struct Got {
    std::string data;
    uint32_t len = 0, src_ip = 0, flags = 0;
    uint16_t src_port = 0;
    dti_dgram6 a6{}; // DTI_DGRAM_IP6: the addresses
};

class DgramOverMars : public ::testing::Test {
  protected:
    DgramOverMars() : net_(config(&rings_)), stack_(&net_.stack(0)), tr_(stack_, now_), app_(limits())
    {
        std::string why;
        engine_ = de::Server::create(tr_, limits(), &why);
        EXPECT_TRUE(engine_) << why;
        rings_.engine = engine_.get();
        EXPECT_GE(engine_->attach_memory(app_.base(), app_.hdr->region_size, 1), 0);
        net_.own_events[0] = true;
        net_.on_tick = [this] {
            now_ = net_.now();
            engine_->poll();
            for (auto &e : app_.take())
                events_.push_back(e);
            engine_->poll();
            stack_->poll(now_);
        };
    }
    ~DgramOverMars() override
    {
        rings_.engine = nullptr;
        engine_.reset();
    }
    static de::Limits limits()
    {
        de::Limits l;
        l.max_contexts = 1;
        l.max_sockets = 8;
        l.cmdq_entries = 64;
        l.evq_entries = 128;
        l.rx_ring_size = l.tx_ring_size = kRing;
        l.pool_size = 4096;
        return l;
    }
    static mars::sim::SimNetConfig config(ppe::DtiBuffers *rings)
    {
        auto c = mars::sim::default_simnet_config();
        c.a.rings = rings;
        c.a.stack.addr6[0] = mars::Ip6Prefix{addr6(1), 64};
        c.a.stack.n_addr6 = 1;
        c.b.stack.addr6[0] = mars::Ip6Prefix{addr6(2), 64};
        c.b.stack.n_addr6 = 1;
        return c;
    }
    // Runs a command to its completion.
    dti_ev run(dti_cmd c)
    {
        const uint32_t tag = app_.push(c);
        dti_ev got{};
        bool done = false;
        EXPECT_TRUE(net_.run_until(
            [&] {
                for (size_t i = 0; i < events_.size(); i++)
                    if (events_[i].kind == DTI_CQE_COMPLETION && events_[i].events == tag) {
                        got = events_[i];
                        events_.erase(events_.begin() + long(i));
                        done = true;
                        break;
                    }
                return done;
            },
            5 * kSec));
        return got;
    }
    // Lets virtual time pass (what was sent lands, what was queued leaves).
    void settle(uint64_t ns) { (void)net_.run_until([] { return false; }, ns); }
    uint32_t open_dgram(uint16_t port)
    {
        const dti_ev s = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_DGRAM));
        EXPECT_GE(s.res, 0);
        const uint32_t h = uint32_t(s.res);
        if (port) {
            EXPECT_EQ(run(cmd(DTI_OP_BIND, h, 0, port)).res, 0);
        }
        return h;
    }
    mars::SockId peer_socket(uint16_t port)
    {
        const int64_t id = net_.stack(1).udp().open(77);
        EXPECT_GE(id, 0);
        EXPECT_EQ(net_.stack(1).udp().bind(mars::SockId(id), {0, port}), 0);
        return mars::SockId(id);
    }
    // Reads every datagram waiting in h's receive ring (in place, checking
    // each record), releasing them in whole records.
    std::vector<Got> read_all(uint32_t h)
    {
        std::vector<Got> out;
        const uint32_t tail = __atomic_load_n(&app_.sock(h)->rx_tail, __ATOMIC_ACQUIRE);
        uint32_t pos = rx_head_;
        while (pos != tail) {
            const uint32_t off = pos & (kRing - 1);
            dti_dgram r;
            std::memcpy(&r, app_.rx_ring(h) + off, sizeof r);
            EXPECT_GE(r.size, DTI_DGRAM_ALIGN);
            EXPECT_LE(r.size, kRing - off) << "a record wraps";
            if (r.size < DTI_DGRAM_ALIGN || r.size > kRing - off)
                break;
            if (!(r.flags & DTI_DGRAM_PAD)) {
                EXPECT_EQ(r.size, dti_dgram_record_size(r.len, r.flags));
                Got g;
                const uint8_t *at = app_.rx_ring(h) + off + sizeof r;
                if (r.flags & DTI_DGRAM_IP6) {
                    std::memcpy(&g.a6, at, sizeof g.a6);
                    at += sizeof g.a6;
                }
                g.data.assign(reinterpret_cast<const char *>(at), r.len);
                g.len = r.len;
                g.flags = r.flags;
                g.src_ip = r.src_ip;
                g.src_port = r.src_port;
                out.push_back(g);
            } else {
                pads_seen_++;
            }
            pos += r.size;
        }
        if (pos != rx_head_) {
            app_.push(cmd(DTI_OP_RECV_RELEASE, h, pos - rx_head_));
            rx_head_ = pos;
        }
        return out;
    }
    // Room for a record of `need` bytes in h's send ring (a pad record first
    // where it would wrap): where it goes; tx_tail_ moves past it.
    uint8_t *reserve(uint32_t h, uint32_t need)
    {
        uint32_t off = tx_tail_ & (kRing - 1);
        if (need > kRing - off) {
            dti_dgram pad{};
            pad.size = kRing - off;
            pad.flags = DTI_DGRAM_PAD;
            std::memcpy(app_.tx_ring(h) + off, &pad, sizeof pad);
            tx_tail_ += pad.size;
            off = 0;
        }
        tx_tail_ += need;
        return app_.tx_ring(h) + off;
    }
    static uint32_t tos_flags(int tos) { return tos >= 0 ? DTI_DGRAM_TOS_SET | uint32_t(tos) << 8 : 0u; }
    // Writes one record into h's send ring; returns the position after it.
    uint32_t put(uint32_t h, const std::string &data, const mars::Endpoint *to, int tos = -1)
    {
        dti_dgram r{};
        r.size = dti_dgram_size(uint32_t(data.size()));
        r.len = uint32_t(data.size());
        if (to) {
            r.dst_ip = to->ip;
            r.dst_port = to->port;
            r.flags = DTI_DGRAM_TO;
        }
        r.flags |= tos_flags(tos);
        uint8_t *at = reserve(h, r.size);
        std::memcpy(at, &r, sizeof r);
        std::memcpy(at + sizeof r, data.data(), data.size());
        return tx_tail_;
    }
    // The same for an IPv6 record (to: its destination; nullptr: the
    // connected peer, DTI_DGRAM_IP6 without DTI_DGRAM_TO).
    uint32_t put6(uint32_t h, const std::string &data, const mars::Endpoint6 *to, int tos = -1)
    {
        dti_dgram r{};
        r.size = dti_dgram_record_size(uint32_t(data.size()), DTI_DGRAM_IP6);
        r.len = uint32_t(data.size());
        r.flags = DTI_DGRAM_IP6 | (to ? DTI_DGRAM_TO : 0u) | tos_flags(tos);
        dti_dgram6 a6{};
        if (to) {
            std::memcpy(a6.dst, to->ip.b, 16);
            r.dst_port = to->port;
        }
        uint8_t *at = reserve(h, r.size);
        std::memcpy(at, &r, sizeof r);
        std::memcpy(at + sizeof r, &a6, sizeof a6);
        std::memcpy(at + sizeof r + sizeof a6, data.data(), data.size());
        return tx_tail_;
    }
    static dti_cmd cmd6(uint16_t op, uint32_t sock, const mars::Ip6Addr &ip, uint16_t port, uint32_t flags = 0)
    {
        dti_cmd c = cmd(op, sock, flags, port);
        dti_cmd_addr6_set(&c, ip.b);
        return c;
    }
    int32_t send_dgrams(uint32_t h, uint32_t end)
    {
        dti_cmd c = cmd(DTI_OP_SEND_DGRAMS, h);
        c.offset = end;
        return run(c).res;
    }
    std::vector<std::string> peer_read(mars::SockId p, std::vector<mars::UdpRecord> *recs = nullptr)
    {
        std::vector<std::string> out;
        for (;;) {
            std::string buf(2048, '\0');
            mars::UdpRecord r;
            const int64_t n = net_.stack(1).udp().recv_from(p, buf.data(), buf.size(), &r, false);
            if (n < 0)
                break;
            buf.resize(size_t(n));
            out.push_back(buf);
            if (recs)
                recs->push_back(r);
        }
        return out;
    }
    static std::string pattern(size_t n, int seed)
    {
        std::string s(n, '\0');
        for (size_t i = 0; i < n; i++)
            s[i] = char((i * 7 + size_t(seed) * 13) & 0xff);
        return s;
    }

    ppe::DtiBuffers rings_;
    SimNet net_;
    mars::Stack *stack_;
    uint64_t now_ = 0;
    ppe::MarsTransport tr_;
    App app_;
    std::unique_ptr<de::Server> engine_;
    std::vector<dti_ev> events_;
    uint32_t rx_head_ = 0, tx_tail_ = 0;
    unsigned pads_seen_ = 0;
};

// 300 datagrams of varied sizes (1..1472 bytes, and empty ones) each way
// through 16 KiB rings: every datagram arrives whole and alone, in order,
// with its sender; records never wrap (pad records seen on both rings).
TEST_F(DgramOverMars, BoundariesBothWaysAcrossRingWraps)
{
    const uint32_t h = open_dgram(7000);
    EXPECT_TRUE(app_.sock(h)->state & DTI_STATE_DGRAM);
    EXPECT_EQ(app_.sock(h)->local_port, 7000);
    const mars::SockId p = peer_socket(40001);
    const mars::Endpoint app_ep = net_.addr(0, 7000), peer_ep = net_.addr(1, 40001);
    const size_t sizes[] = {1, 1472, 0, 100, 999, 31, 32, 33, 1400, 7};
    std::vector<std::string> sent, echoed;
    std::vector<Got> got;
    size_t next = 0;
    while (next < 300 || got.size() < 300) {
        // The peer sends a few, the application reads what came and sends
        // each back (one SEND_DGRAMS for the batch).
        for (int k = 0; k < 4 && next < 300; k++, next++) {
            sent.push_back(pattern(sizes[next % 10], int(next)));
            ASSERT_EQ(net_.stack(1).udp().send_to(p, &app_ep, sent.back().data(), sent.back().size()),
                      int64_t(sent.back().size()));
        }
        ASSERT_TRUE(net_.run_until([&] { return __atomic_load_n(&app_.sock(h)->rx_tail, __ATOMIC_ACQUIRE) != rx_head_; },
                                   5 * kSec));
        settle(1'000'000);
        std::vector<Got> now = read_all(h);
        uint32_t end = tx_tail_;
        for (const Got &g : now) {
            EXPECT_EQ(g.src_ip, peer_ep.ip);
            EXPECT_EQ(g.src_port, 40001);
            mars::Endpoint to{g.src_ip, g.src_port};
            end = put(h, g.data, &to);
            got.push_back(g);
        }
        if (!now.empty()) {
            ASSERT_EQ(send_dgrams(h, end), int32_t(now.size()));
        }
        EXPECT_EQ(app_.sock(h)->tx_head, end) << "the send ring is released when the batch completes";
        settle(1'000'000);
        for (auto &s : peer_read(p))
            echoed.push_back(s);
    }
    ASSERT_TRUE(net_.run_until(
        [&] {
            for (auto &s : peer_read(p))
                echoed.push_back(s);
            return echoed.size() >= 300;
        },
        5 * kSec));
    ASSERT_EQ(got.size(), 300u);
    ASSERT_EQ(echoed.size(), 300u);
    for (size_t i = 0; i < 300; i++) {
        EXPECT_EQ(got[i].data, sent[i]) << "datagram " << i << " read";
        EXPECT_EQ(got[i].len, sent[i].size());
        EXPECT_EQ(echoed[i], sent[i]) << "datagram " << i << " echoed";
    }
    EXPECT_GT(pads_seen_, 0u) << "the receive ring never wrapped";
    EXPECT_EQ(engine_->stats().dgram_sent, 300u);
    EXPECT_EQ(engine_->stats().dgram_bad_records, 0u);
    EXPECT_EQ(stack_->stats().udp_in, 300u);
    EXPECT_EQ(stack_->stats().udp_out, 300u);
}

// The transport's answers reach the application: too large, no destination,
// the connected peer as default, AF_UNSPEC; commands of the other kind.
TEST_F(DgramOverMars, ErrorsConnectAndKinds)
{
    const uint32_t h = open_dgram(0);
    const mars::SockId p = peer_socket(40002);
    const mars::Endpoint peer_ep = net_.addr(1, 40002);
    EXPECT_EQ(send_dgrams(h, put(h, pattern(1473, 1), &peer_ep)), -EMSGSIZE); // DF, no fragments
    EXPECT_EQ(send_dgrams(h, put(h, "x", nullptr)), -EDESTADDRREQ);
    EXPECT_EQ(app_.sock(h)->tx_head, tx_tail_);
    // An unbound socket's first send binds it: the address shows.
    EXPECT_EQ(send_dgrams(h, put(h, "hello", &peer_ep)), 1);
    EXPECT_NE(app_.sock(h)->local_port, 0);
    EXPECT_TRUE(app_.sock(h)->state & DTI_STATE_BOUND);
    EXPECT_EQ(run(cmd(DTI_OP_DGRAM_CONNECT, h, peer_ep.ip, peer_ep.port)).res, 0);
    EXPECT_EQ(app_.sock(h)->remote_port, 40002);
    EXPECT_EQ(send_dgrams(h, put(h, "to the peer", nullptr)), 1);
    settle(10'000'000);
    std::vector<mars::UdpRecord> recs;
    const auto got = peer_read(p, &recs);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], "hello");
    EXPECT_EQ(got[1], "to the peer");
    EXPECT_EQ(recs[1].src_port, app_.sock(h)->local_port);
    EXPECT_EQ(run(cmd(DTI_OP_DGRAM_CONNECT, h, 0, 0)).res, 0); // AF_UNSPEC
    EXPECT_EQ(app_.sock(h)->remote_port, 0);
    EXPECT_EQ(send_dgrams(h, put(h, "x", nullptr)), -EDESTADDRREQ);
    EXPECT_EQ(run(cmd(DTI_OP_DGRAM_CONNECT, h, peer_ep.ip, 0)).res, -EINVAL); // a port is needed
    // Stream commands on a datagram socket, datagram commands on a stream one.
    EXPECT_EQ(run(cmd(DTI_OP_LISTEN, h, 8)).res, -EOPNOTSUPP);
    EXPECT_EQ(run(cmd(DTI_OP_CONNECT, h, peer_ep.ip, peer_ep.port)).res, -EOPNOTSUPP);
    const dti_ev t = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_STREAM));
    ASSERT_GE(t.res, 0);
    dti_cmd sd = cmd(DTI_OP_SEND_DGRAMS, uint32_t(t.res));
    EXPECT_EQ(run(sd).res, -EOPNOTSUPP);
    EXPECT_EQ(run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, 7)).res, -EPROTONOSUPPORT);
    // Membership: a group joins and leaves; a unicast address is refused.
    dti_cmd j = cmd(DTI_OP_MCAST, h, 0xe0010203u, 0);
    EXPECT_EQ(run(j).res, 0);
    j.value = 1;
    EXPECT_EQ(run(j).res, 0);
    dti_cmd bad = cmd(DTI_OP_MCAST, h, peer_ep.ip, 0);
    EXPECT_EQ(run(bad).res, -EINVAL);
}

// Hostile send records and releases: each is refused with an answer (or
// dropped and counted), the engine keeps serving, and the socket still works.
TEST_F(DgramOverMars, HostileRecordsAndReleasesRefused)
{
    const uint32_t h = open_dgram(7001);
    const mars::SockId p = peer_socket(40003);
    const mars::Endpoint peer_ep = net_.addr(1, 40003), app_ep = net_.addr(0, 7001);
    auto raw = [&](dti_dgram r) {
        const uint32_t off = tx_tail_ & (kRing - 1);
        std::memcpy(app_.tx_ring(h) + off, &r, sizeof r);
        return off;
    };
    const uint64_t before = engine_->stats().dgram_bad_records;
    dti_dgram r{};
    r.dst_ip = peer_ep.ip;
    r.dst_port = peer_ep.port;
    r.flags = DTI_DGRAM_TO;
    // A size that is not the record's own (len 100 needs 160).
    r.size = 64, r.len = 100;
    raw(r);
    EXPECT_EQ(send_dgrams(h, tx_tail_ += 64), -EINVAL);
    // A len that wraps the size computation.
    r.size = 32, r.len = 0xffffffe0u;
    raw(r);
    EXPECT_EQ(send_dgrams(h, tx_tail_ += 32), -EINVAL);
    // A size past the command's end, and one not aligned.
    r.size = 4096, r.len = 4096 - 32;
    raw(r);
    EXPECT_EQ(send_dgrams(h, tx_tail_ += 64), -EINVAL);
    r.size = 40, r.len = 8;
    raw(r);
    EXPECT_EQ(send_dgrams(h, tx_tail_ += 64), -EINVAL);
    // An end behind what was taken, or past the ring.
    dti_cmd c = cmd(DTI_OP_SEND_DGRAMS, h);
    c.offset = tx_tail_ - 32;
    EXPECT_EQ(run(c).res, -EINVAL);
    c.offset = tx_tail_ + kRing + 32;
    EXPECT_EQ(run(c).res, -EINVAL);
    EXPECT_EQ(engine_->stats().dgram_bad_records, before + 6);
    // Still works.
    EXPECT_EQ(send_dgrams(h, put(h, "still here", &peer_ep)), 1);
    // A release that is not on a record's end changes nothing.
    const std::string d1 = pattern(50, 1), d2 = pattern(60, 2);
    net_.stack(1).udp().send_to(p, &app_ep, d1.data(), d1.size());
    net_.stack(1).udp().send_to(p, &app_ep, d2.data(), d2.size());
    ASSERT_TRUE(net_.run_until([&] { return app_.sock(h)->rx_tail - rx_head_ == dti_dgram_size(50) + dti_dgram_size(60); },
                               5 * kSec));
    app_.push(cmd(DTI_OP_RECV_RELEASE, h, 40));
    app_.push(cmd(DTI_OP_RECV_RELEASE, h, 5000));
    settle(1'000'000);
    const auto got = read_all(h);
    ASSERT_EQ(got.size(), 2u) << "a refused release consumed records";
    EXPECT_EQ(got[0].data, d1);
    EXPECT_EQ(got[1].data, d2);
    EXPECT_EQ(engine_->stats().dgram_bad_records, before + 8);
    // Everything released: the ring is empty on both sides.
    settle(1'000'000);
    ASSERT_TRUE(net_.run_until([&] { return peer_read(p).size() == 1; }, 5 * kSec));
}

// Readiness through the event path: a watch for POLLIN hears of a datagram;
// a datagram socket is writable (POLLOUT) by the shared readiness rule; a
// closed socket's port is nobody's (the peer's datagram is counted no-port).
TEST_F(DgramOverMars, WatchEventsAndClose)
{
    const uint32_t h = open_dgram(7002);
    const mars::SockId p = peer_socket(40004);
    const mars::Endpoint app_ep = net_.addr(0, 7002);
    dti_sock_shared *sh = app_.sock(h);
    EXPECT_EQ(dti_events_of(sh->state, sh->error, 0, kRing, 0) & (DTI_POLLIN | DTI_POLLOUT), DTI_POLLOUT);
    EXPECT_EQ(run(cmd(DTI_OP_WATCH, h, DTI_POLLIN)).res, 0);
    events_.clear();
    net_.stack(1).udp().send_to(p, &app_ep, "ping", 4);
    ASSERT_TRUE(net_.run_until(
        [&] {
            for (auto &e : events_)
                if (e.kind == DTI_CQE_EVENT && e.sock == h && (e.events & DTI_POLLIN))
                    return true;
            return false;
        },
        5 * kSec))
        << "no POLLIN event for the datagram";
    EXPECT_EQ(read_all(h).at(0).data, "ping");
    EXPECT_EQ(run(cmd(DTI_OP_CLOSE, h)).res, 0);
    const uint64_t no_port = stack_->stats().udp_no_port;
    net_.stack(1).udp().send_to(p, &app_ep, "gone", 4);
    ASSERT_TRUE(net_.run_until([&] { return stack_->stats().udp_no_port == no_port + 1; }, 5 * kSec))
        << "the closed socket still holds its port";
}

// An ICMP port unreachable about a datagram a connected socket sent (the
// peer's lone stack answers a port nobody holds): the engine publishes it as
// the socket's pending error (err_seq, err_last: libdti reports it once) and
// tells the watcher (POLLERR); the socket keeps working, its state as it was.
TEST_F(DgramOverMars, IcmpErrorIsPublishedAsThePendingError)
{
    const uint32_t h = open_dgram(7010);
    const mars::Endpoint nobody = net_.addr(1, 40010);
    EXPECT_EQ(run(cmd(DTI_OP_DGRAM_CONNECT, h, nobody.ip, nobody.port)).res, 0);
    EXPECT_EQ(run(cmd(DTI_OP_WATCH, h, DTI_POLLIN)).res, 0);
    dti_sock_shared *sh = app_.sock(h);
    const uint32_t state = sh->state;
    EXPECT_EQ(sh->err_seq, 0u);
    events_.clear();
    EXPECT_EQ(send_dgrams(h, put(h, "anyone?", nullptr)), 1);
    ASSERT_TRUE(net_.run_until(
        [&] {
            for (auto &e : events_)
                if (e.kind == DTI_CQE_EVENT && e.sock == h && (e.events & DTI_POLLERR))
                    return true;
            return false;
        },
        5 * kSec))
        << "no POLLERR event for the port unreachable";
    EXPECT_EQ(__atomic_load_n(&sh->err_seq, __ATOMIC_ACQUIRE), 1u);
    EXPECT_EQ(sh->err_last, -ECONNREFUSED);
    EXPECT_EQ(sh->state, state);
    EXPECT_EQ(sh->error, 0);
    // Another datagram, another error: the count moves, the socket still sends.
    events_.clear();
    EXPECT_EQ(send_dgrams(h, put(h, "still?", nullptr)), 1);
    ASSERT_TRUE(net_.run_until([&] { return __atomic_load_n(&sh->err_seq, __ATOMIC_ACQUIRE) == 2u; }, 5 * kSec));
    EXPECT_EQ(sh->state, state);
}

// UDP over IPv6 through the engine: a datagram socket bound to [::]
// (dual-stack) takes an IPv6 peer's datagrams as IPv6 records (addresses,
// hop limit) and an IPv4 peer's as IPv4 ones; IPv6 records it writes go out
// from its address; its names are published as an IPv6 socket's (name6);
// CONNECT6 makes the peer the default (records without a destination).
TEST_F(DgramOverMars, Ipv6DualStackBothWaysAndNames)
{
    settle(2 * kSec); // DAD: both addresses become usable
    const dti_ev s = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_DGRAM));
    ASSERT_GE(s.res, 0);
    const uint32_t h = uint32_t(s.res);
    ASSERT_EQ(run(cmd6(DTI_OP_BIND6, h, mars::Ip6Addr{}, 7100)).res, 0);
    dti_sock_shared *sh = app_.sock(h);
    EXPECT_EQ(__atomic_load_n(&sh->name6, __ATOMIC_ACQUIRE) & DTI_NAME6_IPV6, DTI_NAME6_IPV6);
    EXPECT_EQ(sh->local_port, 7100);
    EXPECT_TRUE(sh->state & DTI_STATE_BOUND);
    const uint8_t zero[16] = {};
    EXPECT_EQ(std::memcmp(sh->local6, zero, 16), 0) << "bound to ::";

    const int64_t pid = net_.stack(1).udp().open(78);
    ASSERT_GE(pid, 0);
    const mars::SockId p = mars::SockId(pid);
    ASSERT_EQ(net_.stack(1).udp().bind6(p, mars::Endpoint6{mars::Ip6Addr{}, 40010}, false), 0);
    const mars::Endpoint6 app6{addr6(1), 7100}, peer6{addr6(2), 40010};
    const std::string d6 = pattern(1200, 3), d4 = pattern(100, 4);
    ASSERT_EQ(net_.stack(1).udp().send_to6(p, &app6, d6.data(), d6.size()), int64_t(d6.size()));
    const mars::Endpoint app4 = net_.addr(0, 7100);
    ASSERT_EQ(net_.stack(1).udp().send_to(p, &app4, d4.data(), d4.size()), int64_t(d4.size()));
    std::vector<Got> got;
    ASSERT_TRUE(net_.run_until(
        [&] {
            for (auto &g : read_all(h))
                got.push_back(g);
            return got.size() >= 2;
        },
        5 * kSec));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].data, d6);
    EXPECT_TRUE(got[0].flags & DTI_DGRAM_IP6);
    EXPECT_EQ(std::memcmp(got[0].a6.src, addr6(2).b, 16), 0);
    EXPECT_EQ(std::memcmp(got[0].a6.dst, addr6(1).b, 16), 0);
    EXPECT_EQ(got[0].src_port, 40010);
    EXPECT_EQ(got[0].src_ip, 0u);
    EXPECT_EQ(DTI_DGRAM_TTL(got[0].flags), 64) << "the hop limit";
    EXPECT_EQ(got[1].data, d4);
    EXPECT_FALSE(got[1].flags & DTI_DGRAM_IP6) << "an IPv4 datagram keeps an IPv4 record";
    EXPECT_EQ(got[1].src_ip, net_.addr(1, 0).ip);

    // Back over IPv6, to a destination, then to the connected peer.
    EXPECT_EQ(send_dgrams(h, put6(h, "six", &peer6)), 1);
    ASSERT_EQ(run(cmd6(DTI_OP_CONNECT6, h, addr6(2), 40010)).res, 0);
    EXPECT_EQ(sh->remote_port, 40010);
    EXPECT_EQ(std::memcmp(sh->remote6, addr6(2).b, 16), 0);
    EXPECT_EQ(send_dgrams(h, put(h, "connected", nullptr)), 1);
    std::vector<mars::UdpRecord> recs;
    std::vector<std::string> back;
    ASSERT_TRUE(net_.run_until(
        [&] {
            for (auto &x : peer_read(p, &recs))
                back.push_back(x);
            return back.size() >= 2;
        },
        5 * kSec));
    EXPECT_EQ(back[0], "six");
    EXPECT_EQ(back[1], "connected");
    for (auto &r : recs) {
        EXPECT_TRUE(r.flags & mars::kUdpRecIp6);
        EXPECT_EQ(r.src_port, 7100);
    }
    // AF_UNSPEC dissolves it (DGRAM_CONNECT 0:0, as libdti sends for ::).
    EXPECT_EQ(run(cmd(DTI_OP_DGRAM_CONNECT, h, 0, 0)).res, 0);
    EXPECT_EQ(sh->remote_port, 0);
    EXPECT_EQ(send_dgrams(h, put6(h, "x", nullptr)), -EDESTADDRREQ);
    EXPECT_EQ(engine_->stats().dgram_bad_records, 0u);
}

// IPV6_V6ONLY through BIND6's flag: no IPv4 datagram reaches the socket,
// and an IPv4 socket can hold the same port beside it.
TEST_F(DgramOverMars, Ipv6OnlySocketTakesNoIpv4)
{
    settle(2 * kSec);
    const uint32_t h = uint32_t(run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_DGRAM)).res);
    ASSERT_EQ(run(cmd6(DTI_OP_BIND6, h, mars::Ip6Addr{}, 7101, DTI_BIND6_V6ONLY)).res, 0);
    EXPECT_EQ(app_.sock(h)->name6, DTI_NAME6_IPV6 | DTI_NAME6_V6ONLY);
    const uint32_t h4 = open_dgram(7101); // the IPv4 wildcard beside it: allowed
    (void)h4;
    const uint32_t h6b = uint32_t(run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_DGRAM)).res);
    EXPECT_EQ(run(cmd6(DTI_OP_BIND6, h6b, mars::Ip6Addr{}, 7101)).res, -EADDRINUSE) << "dual-stack [::] over 0.0.0.0";
    const mars::SockId p = peer_socket(40011);
    const mars::Endpoint app4 = net_.addr(0, 7101);
    const uint64_t in = stack_->stats().udp_in;
    net_.stack(1).udp().send_to(p, &app4, "v4", 2);
    ASSERT_TRUE(net_.run_until([&] { return stack_->stats().udp_in == in + 1; }, 5 * kSec));
    settle(1'000'000);
    EXPECT_TRUE(read_all(h).empty()) << "an IPv4 datagram reached a V6ONLY socket";
}

// Hostile IPv6 send records: an IPv6 record whose size leaves no room for
// its addresses, and one whose size is not its own, are refused.
TEST_F(DgramOverMars, HostileIpv6RecordsRefused)
{
    settle(2 * kSec);
    const uint32_t h = uint32_t(run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_DGRAM)).res);
    ASSERT_EQ(run(cmd6(DTI_OP_BIND6, h, mars::Ip6Addr{}, 7102)).res, 0);
    const uint64_t before = engine_->stats().dgram_bad_records;
    dti_dgram r{};
    r.flags = DTI_DGRAM_IP6 | DTI_DGRAM_TO;
    r.dst_port = 9;
    r.len = 16;
    r.size = dti_dgram_size(16); // an IPv4 record's size: the addresses do not fit
    std::memcpy(app_.tx_ring(h) + (tx_tail_ & (kRing - 1)), &r, sizeof r);
    EXPECT_EQ(send_dgrams(h, tx_tail_ += r.size), -EINVAL);
    r.size = dti_dgram_record_size(16, r.flags) + DTI_DGRAM_ALIGN; // one alignment more than its own
    std::memcpy(app_.tx_ring(h) + (tx_tail_ & (kRing - 1)), &r, sizeof r);
    EXPECT_EQ(send_dgrams(h, tx_tail_ += r.size), -EINVAL);
    EXPECT_EQ(engine_->stats().dgram_bad_records, before + 2);
    const mars::Endpoint6 to{addr6(2), 40012};
    EXPECT_EQ(send_dgrams(h, put6(h, "still here", &to)), 1);
}

// A record's own TOS (DTI_DGRAM_TOS_SET: an IP_TOS or IPV6_TCLASS control
// message) goes on that datagram alone; the next one has the socket's.
TEST_F(DgramOverMars, PerDatagramTosAndTrafficClass)
{
    settle(2 * kSec); // DAD
    const uint32_t h4 = open_dgram(7200);
    const mars::SockId p = peer_socket(40020);
    const mars::Endpoint peer4 = net_.addr(1, 40020);
    EXPECT_EQ(send_dgrams(h4, put(h4, "ce", &peer4, 0x2f)), 1);
    EXPECT_EQ(send_dgrams(h4, put(h4, "plain", &peer4)), 1);
    const uint32_t h6 = uint32_t(run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_DGRAM)).res);
    ASSERT_EQ(run(cmd6(DTI_OP_BIND6, h6, mars::Ip6Addr{}, 7201)).res, 0);
    tx_tail_ = 0; // (the fixture's send position is one socket's: h6's ring starts at 0)
    const int64_t q = net_.stack(1).udp().open(79);
    ASSERT_GE(q, 0);
    ASSERT_EQ(net_.stack(1).udp().bind6(mars::SockId(q), mars::Endpoint6{mars::Ip6Addr{}, 40021}, true), 0);
    const mars::Endpoint6 peer6{addr6(2), 40021};
    EXPECT_EQ(send_dgrams(h6, put6(h6, "ect1", &peer6, 0x01)), 1);
    EXPECT_EQ(send_dgrams(h6, put6(h6, "plain6", &peer6)), 1);
    std::vector<mars::UdpRecord> r4, r6;
    std::vector<std::string> d4, d6;
    ASSERT_TRUE(net_.run_until(
        [&] {
            for (auto &x : peer_read(p, &r4))
                d4.push_back(x);
            for (auto &x : peer_read(mars::SockId(q), &r6))
                d6.push_back(x);
            return d4.size() >= 2 && d6.size() >= 2;
        },
        5 * kSec));
    EXPECT_EQ(d4[0], "ce");
    EXPECT_EQ(DTI_DGRAM_TOS(r4[0].flags), 0x2f);
    EXPECT_EQ(DTI_DGRAM_TOS(r4[1].flags), 0) << "the next datagram: the socket's TOS";
    EXPECT_EQ(d6[0], "ect1");
    EXPECT_EQ(DTI_DGRAM_TOS(r6[0].flags), 0x01) << "the traffic class";
    EXPECT_EQ(DTI_DGRAM_TOS(r6[1].flags), 0);
}

// IPv6 multicast through the DTI (ABI 13): MCAST6 joins the group in the
// value and offset words (the source in the trace words: :: any), the
// peer's datagram to the group arrives as a multicast record, a leave ends
// it; DTI_SO_MCAST_ALL is a datagram socket's option; what the decoder or
// the stack refuses is refused.
TEST_F(DgramOverMars, Ipv6MulticastJoinLeaveAndOption)
{
    settle(2 * kSec); // DAD: both addresses become usable
    const dti_ev s = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_DGRAM));
    ASSERT_GE(s.res, 0);
    const uint32_t h = uint32_t(s.res);
    ASSERT_EQ(run(cmd6(DTI_OP_BIND6, h, mars::Ip6Addr{}, 7200)).res, 0);
    mars::Ip6Addr group{};
    group.b[0] = 0xff, group.b[1] = 0x0e, group.b[15] = 0x42; // ff0e::42
    const uint8_t any[16] = {};
    auto mcast6 = [&](uint32_t leave, const mars::Ip6Addr &g) {
        dti_cmd c = cmd(DTI_OP_MCAST6, h, leave);
        dti_cmd_addr6_set(&c, g.b);
        dti_cmd_source6_set(&c, any);
        return run(c).res;
    };
    EXPECT_EQ(mcast6(1, group), -EADDRNOTAVAIL) << "a leave without a join";
    ASSERT_EQ(mcast6(0, group), 0);
    EXPECT_EQ(mcast6(0, group), -EADDRINUSE) << "joined already";
    EXPECT_EQ(mcast6(0, addr6(2)), -EINVAL) << "a unicast address is no group";
    dti_cmd opt = cmd(DTI_OP_SETSOCKOPT, h, DTI_SO_MCAST_ALL);
    opt.value = 0;
    EXPECT_EQ(run(opt).res, 0);

    const int64_t pid = net_.stack(1).udp().open(79);
    ASSERT_GE(pid, 0);
    const mars::SockId p = mars::SockId(pid);
    const mars::Endpoint6 to{group, 7200};
    const std::string d = pattern(900, 5);
    ASSERT_EQ(net_.stack(1).udp().send_to6(p, &to, d.data(), d.size()), int64_t(d.size()));
    std::vector<Got> got;
    ASSERT_TRUE(net_.run_until(
        [&] {
            for (auto &g : read_all(h))
                got.push_back(g);
            return !got.empty();
        },
        5 * kSec));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].data, d);
    EXPECT_TRUE(got[0].flags & DTI_DGRAM_IP6);
    EXPECT_TRUE(got[0].flags & DTI_DGRAM_MULTICAST);
    EXPECT_EQ(std::memcmp(got[0].a6.dst, group.b, 16), 0);
    EXPECT_EQ(std::memcmp(got[0].a6.src, addr6(2).b, 16), 0);

    // Left: the next datagram to the group is nobody's here.
    ASSERT_EQ(mcast6(1, group), 0);
    const uint64_t mc0 = stack_->stats().udp_mcast_in;
    ASSERT_EQ(net_.stack(1).udp().send_to6(p, &to, d.data(), d.size()), int64_t(d.size()));
    settle(kSec);
    EXPECT_TRUE(read_all(h).empty());
    EXPECT_EQ(stack_->stats().udp_mcast_in, mc0);

    // A stream socket takes neither.
    const dti_ev t = run(cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, DTI_SOCK_STREAM));
    ASSERT_GE(t.res, 0);
    dti_cmd j = cmd(DTI_OP_MCAST6, uint32_t(t.res), 0);
    dti_cmd_addr6_set(&j, group.b);
    EXPECT_EQ(run(j).res, -EOPNOTSUPP);
    dti_cmd topt = cmd(DTI_OP_SETSOCKOPT, uint32_t(t.res), DTI_SO_MCAST_ALL);
    topt.value = 1;
    EXPECT_EQ(run(topt).res, -ENOPROTOOPT);
}

} // namespace
