// tests/unit/mars/sim/transfer_app.h: TEST FIXTURE. Applications on both
// ends of a SimNet that move patterned byte streams in both directions over
// many connections at once and verify every byte, then close gracefully.
// Event driven: they act only on the stack's events, so a missing event shows
// up as a stalled transfer.
#pragma once

#include "sim_wire.h"

#include <cerrno>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace mars::sim {

class TransferApp {
  public:
    struct Options {
        uint16_t port = 5001;
        uint32_t conns = 1;
        uint64_t bytes_a_to_b = 4 << 20; // per connection
        uint64_t bytes_b_to_a = 4 << 20;
        bool copy_api = false;   // send()/recv() instead of the ring views
        uint32_t write_chunk = 0; // at most this much per tx_commit (0: all the view)
        // Over IPv6 (issue 31): b listens on [::]:port (dual-stack) and a
        // connects to b6, one of b's IPv6 addresses.
        bool ipv6 = false;
        Ip6Addr b6{};
    };

    // One end of one connection.
    struct End {
        SockId sock = kNoSock;
        uint64_t seed = 0;      // the stream this end sends
        uint64_t peer_seed = 0; // the stream it receives (the other end's seed)
        uint64_t to_send = 0, sent = 0, expect = 0, received = 0;
        bool shut = false, peer_fin = false, close_called = false, closed = false;
    };
    struct Conn {
        End end[2]; // [0] on host a (client), [1] on host b (accepted)
    };

    TransferApp(SimNet &net, Options o) : net_(net), o_(o) {}

    // Opens the listener on b and connects every connection from a.
    bool start()
    {
        net_.on_event = [this](int h, const SockEvent &e) { on_event(h, e); };
        int64_t l = net_.stack(1).open(kListenerTag);
        if (l < 0) return fail("open listener: " + std::to_string(l));
        listener_ = SockId(l);
        const int brc = o_.ipv6 ? net_.stack(1).bind6(listener_, Endpoint6{Ip6Addr{}, o_.port}, false)
                                : net_.stack(1).bind(listener_, net_.addr(1, o_.port));
        if (brc != 0) return fail("bind: " + std::to_string(brc));
        if (int rc = net_.stack(1).listen(listener_, 1024); rc != 0) return fail("listen: " + std::to_string(rc));
        conns_.resize(o_.conns);
        for (uint32_t i = 0; i < o_.conns; i++) {
            Conn &c = conns_[i];
            c.end[0].seed = 1000 + i * 2;
            c.end[1].seed = 1001 + i * 2;
            c.end[0].peer_seed = c.end[1].seed;
            c.end[1].peer_seed = c.end[0].seed;
            c.end[0].to_send = c.end[1].expect = o_.bytes_a_to_b;
            c.end[1].to_send = c.end[0].expect = o_.bytes_b_to_a;
            int64_t s = net_.stack(0).open(tag(i, 0));
            if (s < 0) return fail("open: " + std::to_string(s));
            c.end[0].sock = SockId(s);
            const int crc = o_.ipv6 ? net_.stack(0).connect6(c.end[0].sock, Endpoint6{o_.b6, o_.port}, net_.now())
                                    : net_.stack(0).connect(c.end[0].sock, net_.addr(1, o_.port), net_.now());
            if (crc != 0) return fail("connect: " + std::to_string(crc));
        }
        return true;
    }

    bool done() const { return !failure_.empty() || finished_ == o_.conns * 2; }
    const std::string &failure() const { return failure_; }
    uint32_t accepted() const { return accepted_; }
    std::vector<Conn> &conns() { return conns_; }
    SockId listener() const { return listener_; }

    std::string progress() const
    {
        std::string s;
        for (size_t i = 0; i < conns_.size() && i < 4; i++) {
            for (int h = 0; h < 2; h++) {
                const End &e = conns_[i].end[h];
                char b[300];
                SockInfo in{};
                int rc = e.sock == kNoSock || e.closed ? -1 : net_.stack(h).info(e.sock, &in);
                std::snprintf(b, sizeof b,
                              "conn %zu host %c: sent %llu/%llu received %llu/%llu shut %d peer_fin %d closed %d | "
                              "state %s rx_readable %u tx_unacked %u snd_wnd %u cwnd %u rto_us %u\n",
                              i, 'a' + h, (unsigned long long)e.sent, (unsigned long long)e.to_send,
                              (unsigned long long)e.received, (unsigned long long)e.expect, e.shut, e.peer_fin, e.closed,
                              rc == 0 ? state_name(in.state) : "-", in.rx_readable, in.tx_unacked, in.snd_wnd, in.cwnd,
                              in.rto_us);
                s += b;
            }
        }
        return s + (failure_.empty() ? "" : "failure: " + failure_ + "\n");
    }

  private:
    static constexpr uint64_t kListenerTag = 0xfeed;
    static uint64_t tag(uint32_t conn, int h) { return (uint64_t(conn) << 1) | uint64_t(h); }

    bool fail(const std::string &why)
    {
        if (failure_.empty()) failure_ = why;
        return false;
    }

    void on_event(int h, const SockEvent &e)
    {
        if (h == 1 && e.sock == listener_) {
            if (e.bits & kEvAcceptable) accept_all();
            return;
        }
        auto it = by_sock_[h].find(e.sock);
        uint32_t ci;
        if (it != by_sock_[h].end()) {
            ci = it->second;
        } else if (h == 0 && e.user / 2 < conns_.size() && conns_[e.user / 2].end[0].sock == e.sock) {
            ci = uint32_t(e.user / 2);
            by_sock_[0][e.sock] = ci;
        } else {
            fail("event for an unknown socket " + std::to_string(e.sock) + " on host " + char('a' + h));
            return;
        }
        End &end = conns_[ci].end[h];
        if (end.closed) {
            fail("event after kEvClosed on host " + std::string(1, char('a' + h)));
            return;
        }
        if (e.bits & (kEvReset | kEvError)) {
            SockInfo in{};
            net_.stack(h).info(e.sock, &in);
            fail("connection " + std::to_string(ci) + " on host " + char('a' + h) + " got " +
                 ((e.bits & kEvReset) ? "reset" : "error") + " (error " + std::to_string(in.error) + ")");
            return;
        }
        if (e.bits & (kEvConnected | kEvWritable)) pump_send(h, end);
        if (e.bits & (kEvReadable | kEvPeerClosed)) pump_recv(h, end);
        if (e.bits & kEvPeerClosed) {
            end.peer_fin = true;
            if (end.received != end.expect)
                fail("peer closed after " + std::to_string(end.received) + " of " + std::to_string(end.expect) + " bytes");
        }
        maybe_close(h, end);
        if (e.bits & kEvClosed) {
            end.closed = true;
            finished_++;
        }
    }

    void accept_all()
    {
        for (int guard = 0; guard < 100000; guard++) {
            uint64_t user = 0x1000 + accepted_;
            int64_t s = net_.stack(1).accept(listener_, user);
            if (s == -EAGAIN) return;
            if (s < 0) {
                fail("accept: " + std::to_string(s));
                return;
            }
            // Match by the client's port: accepted order need not be connect order.
            SockInfo in{};
            net_.stack(1).info(SockId(s), &in);
            uint32_t ci = UINT32_MAX;
            for (uint32_t i = 0; i < conns_.size(); i++) {
                SockInfo ci_in{};
                if (conns_[i].end[1].sock == kNoSock && net_.stack(0).info(conns_[i].end[0].sock, &ci_in) == 0 &&
                    ci_in.local.port == in.remote.port) {
                    ci = i;
                    break;
                }
            }
            if (ci == UINT32_MAX) {
                fail("accepted a connection from port " + std::to_string(in.remote.port) + " nobody opened");
                return;
            }
            accepted_++;
            End &end = conns_[ci].end[1];
            end.sock = SockId(s);
            by_sock_[1][end.sock] = ci;
            pump_send(1, end);
            pump_recv(1, end); // data may have arrived before the accept
        }
    }

    void pump_send(int h, End &e)
    {
        Stack &st = net_.stack(h);
        for (int guard = 0; guard < 64 && e.sent < e.to_send; guard++) {
            if (o_.copy_api) {
                uint8_t buf[16384];
                size_t n = size_t(std::min<uint64_t>(sizeof buf, e.to_send - e.sent));
                pattern_fill(e.seed, e.sent, buf, n);
                int64_t w = st.send(e.sock, buf, n);
                if (w == -EAGAIN || w == 0) break;
                if (w < 0) {
                    fail("send: " + std::to_string(w));
                    return;
                }
                e.sent += uint64_t(w);
                continue;
            }
            RingSpan sp{};
            if (int rc = st.tx_view(e.sock, &sp); rc != 0) {
                fail("tx_view: " + std::to_string(rc));
                return;
            }
            uint64_t want = e.to_send - e.sent;
            if (o_.write_chunk) want = std::min<uint64_t>(want, o_.write_chunk);
            uint32_t n = 0;
            for (int k = 0; k < 2 && want > n; k++) {
                uint32_t m = uint32_t(std::min<uint64_t>(sp.n[k], want - n));
                pattern_fill(e.seed, e.sent + n, sp.p[k], m);
                n += m;
            }
            if (n == 0) break;
            if (int rc = st.tx_commit(e.sock, n, false); rc < 0) {
                fail("tx_commit: " + std::to_string(rc));
                return;
            }
            e.sent += n;
        }
        if (e.sent == e.to_send && !e.shut) {
            e.shut = true;
            if (int rc = st.shutdown(e.sock, false, true); rc != 0) fail("shutdown: " + std::to_string(rc));
        }
    }

    void pump_recv(int h, End &e)
    {
        Stack &st = net_.stack(h);
        for (int guard = 0; guard < 64; guard++) {
            if (o_.copy_api) {
                uint8_t buf[16384];
                int64_t r = st.recv(e.sock, buf, sizeof buf);
                if (r == -EAGAIN || r == 0) return;
                if (r < 0) {
                    fail("recv: " + std::to_string(r));
                    return;
                }
                if (!verify(e, buf, size_t(r))) return;
                continue;
            }
            RingSpan sp{};
            if (int rc = st.rx_view(e.sock, &sp); rc != 0) {
                fail("rx_view: " + std::to_string(rc));
                return;
            }
            if (sp.total() == 0) return;
            for (int k = 0; k < 2; k++) {
                if (sp.n[k] && !verify(e, sp.p[k], sp.n[k])) return;
            }
            if (int rc = st.rx_consume(e.sock, sp.total()); rc != 0) {
                fail("rx_consume: " + std::to_string(rc));
                return;
            }
        }
    }

    bool verify(End &e, const uint8_t *p, size_t n)
    {
        if (e.received + n > e.expect) {
            fail("received " + std::to_string(e.received + n) + " bytes, more than the " + std::to_string(e.expect) + " sent");
            return false;
        }
        size_t bad = pattern_check(e.peer_seed, e.received, p, n);
        if (bad != n) {
            fail("byte " + std::to_string(e.received + bad) + " of stream " + std::to_string(e.peer_seed) + " differs");
            return false;
        }
        e.received += n;
        return true;
    }

    void maybe_close(int h, End &e)
    {
        if (e.close_called || !e.shut || !e.peer_fin || e.received != e.expect) return;
        e.close_called = true;
        if (int rc = net_.stack(h).close(e.sock); rc != 0) fail("close: " + std::to_string(rc));
    }

    SimNet &net_;
    Options o_;
    SockId listener_ = kNoSock;
    std::vector<Conn> conns_;
    std::map<SockId, uint32_t> by_sock_[2];
    uint32_t accepted_ = 0, finished_ = 0;
    std::string failure_;
};

} // namespace mars::sim
