// ppe/src/eta_perf_dti_server.cc: eta-perf's server over eta's native API —
// one event loop over every connection (the kernel server, a thread per
// connection, and the client are in eta_perf.cc; the protocol in eta_perf.h).
#include "eta_perf.h"

#include "dti_echo.h"
#include <isa-l/crc.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using namespace eta_perf;

// ---- dti server: one event loop over every connection ---------------------

struct DtiSession {
    Hello h{};
    size_t hello_got = 0;
    uint64_t off = 0, deadline = 0;
    uint32_t crc = kCrcSeed;
    bool sending_done = false, trailer_sent = false;
    Trailer peer{};
    size_t peer_got = 0, trailer_off = 0;
    std::unique_ptr<Pattern> pat;
    ppe::EchoState echo; // a release that found the command queue full
};

class DtiServer {
  public:
    DtiServer(const Options &o) : o_(o), c_(dti_context()) {}

    int run()
    {
        int l = dti_socket(c_);
        if (l < 0) die(std::string("socket: ") + dti_strerror(l));
        listener_ = dti_sock_t(l);
        dti_addr any{0, o_.port};
        int r = dti_bind(c_, listener_, &any);
        if (r == 0) r = dti_listen(c_, listener_, 4096);
        if (r < 0) die("listen on port " + std::to_string(o_.port) + ": " + dti_strerror(r));
        dti_prep_watch(c_, listener_, DTI_POLLIN, 0);
        dti_submit(c_);
        std::printf("listening on port %u (dti)\n", o_.port);
        std::fflush(stdout);
        for (;;) {
            // Steps stopped by a full command queue go on once the engine took
            // some. A source that committed and has more to send (pending_)
            // has no watch out: it only looks, or it would sleep until some
            // unrelated event or the 1 s timeout (beside a CPU hog, where the
            // engine frees ring space while this process is switched out,
            // that was a whole send ring per second: issue 35).
            int w = dti_wait(c_, !retry_.empty() ? 1 : !pending_.empty() ? 0 : 1000);
            if (w < 0) die(std::string("the PPE went away: ") + dti_strerror(w));
            dti_cqe ev[64];
            unsigned n = dti_reap(c_, ev, 64);
            for (unsigned i = 0; i < n; i++) handle(ev[i]);
            if (!retry_.empty()) {
                pending_.insert(pending_.end(), retry_.begin(), retry_.end());
                retry_.clear();
            }
            if (!pending_.empty()) {
                // Sources keep sending while they have ring space.
                auto ids = pending_;
                pending_.clear();
                for (dti_sock_t s : ids) step(s);
            }
            if (dti_submit(c_) < 0) {}
            if (!deferred_.empty() || accept_deferred_) retry_deferred();
            if (o_.once && served_ > 0 && sessions_.empty()) return 0;
        }
    }

  private:
    void handle(const dti_cqe &e)
    {
        if (e.kind == DTI_CQE_COMPLETION) {
            if (e.op == DTI_OP_ACCEPT && e.res > 0) {
                for (int k = 0; k < e.res; k++) {
                    sessions_[e.accepted[k]] = std::make_unique<DtiSession>();
                    watch(e.accepted[k], DTI_POLLIN);
                    step(e.accepted[k]);
                }
                // The listener's event is edge-triggered and one event may
                // stand for many arrivals: a full batch means take more.
                if (unsigned(e.res) == DTI_ACCEPT_MAX) accept_more();
            }
            return;
        }
        if (e.kind == DTI_CQE_RESCAN) {
            for (auto &[s, _] : sessions_) pending_.push_back(s);
            accept_more();
            return;
        }
        if (e.sock == listener_) {
            accept_more();
            return;
        }
        step(e.sock);
    }

    // Commands that found the queue full or every credit in flight
    // (-EAGAIN) wait here and go out after the next reap: a watch that never
    // reached the engine would leave its socket without events.
    struct Deferred {
        dti_sock_t sock;
        uint32_t events;
        bool close;
    };
    void watch(dti_sock_t s, uint32_t events)
    {
        if (dti_prep_watch(c_, s, events, 0) == -EAGAIN) deferred_.push_back({s, events, false});
    }
    void accept_more()
    {
        if (dti_prep_accept(c_, listener_, DTI_ACCEPT_MAX, 0, 0) == -EAGAIN) accept_deferred_ = true;
    }
    void retry_deferred()
    {
        dti_submit(c_);
        if (accept_deferred_) {
            accept_deferred_ = false;
            accept_more();
        }
        auto todo = std::move(deferred_);
        deferred_.clear();
        for (const Deferred &d : todo) {
            if (d.close) {
                if (dti_prep_close(c_, d.sock, 0) == -EAGAIN) deferred_.push_back(d);
            } else if (sessions_.count(d.sock)) {
                watch(d.sock, d.events);
            }
        }
    }

    void finish(dti_sock_t s)
    {
        if (dti_prep_close(c_, s, 0) == -EAGAIN) deferred_.push_back({s, 0, true});
        sessions_.erase(s);
        served_++;
    }

    // Advances one connection as far as its rings allow.
    void step(dti_sock_t s)
    {
        auto it = sessions_.find(s);
        if (it == sessions_.end()) return;
        DtiSession &d = *it->second;
        dti_iov in[2], out[2];
        int err = 0;
        if (!ppe::settle_release(c_, s, d.echo, &err)) return retry_.push_back(s);
        if (err < 0) return finish(s);
        while (d.hello_got < sizeof d.h) {
            ssize_t n = take(s, d, reinterpret_cast<uint8_t *>(&d.h) + d.hello_got, sizeof d.h - d.hello_got);
            if (n == -EAGAIN) return;
            if (n <= 0) return finish(s);
            d.hello_got += size_t(n);
            if (d.hello_got == sizeof d.h) {
                if (d.h.magic != kHelloMagic) return finish(s);
                d.deadline = now_ns() + uint64_t(d.h.duration_ms) * 1'000'000;
                if (d.h.mode == kSource) d.pat = std::make_unique<Pattern>(d.h.seed);
            }
            if (d.echo.release_owed) return retry_.push_back(s);
        }
        if (d.h.mode == kEcho) {
            switch (ppe::echo_some(c_, s, d.echo)) {
            case ppe::EchoStatus::kDrained: return;
            case ppe::EchoStatus::kSendFull: return watch(s, DTI_POLLIN | DTI_POLLOUT);
            case ppe::EchoStatus::kQueueFull: return retry_.push_back(s);
            case ppe::EchoStatus::kEof:
            case ppe::EchoStatus::kError: return finish(s);
            }
        }
        if (d.h.mode == kSink) {
            for (;;) {
                ssize_t n = dti_recv_borrow(c_, s, in);
                if (n == -EAGAIN) return;
                if (n == 0 && !d.trailer_sent) {
                    Trailer t{d.off, d.crc, kTrailerHasCrc};
                    dti_send(c_, s, &t, sizeof t, 0);
                    d.trailer_sent = true;
                    if (!o_.json) std::printf("received %" PRIu64 " bytes crc32c %08x\n", d.off, d.crc);
                    std::fflush(stdout);
                }
                if (n <= 0) return finish(s);
                size_t left = size_t(n);
                for (int k = 0; k < 2 && left; k++) {
                    size_t m = std::min(left, in[k].len);
                    d.crc = crc32_iscsi(static_cast<uint8_t *>(in[k].base), int(m), d.crc);
                    left -= m;
                }
                d.off += size_t(n);
                // Counted: a release that does not fit now is owed, not redone.
                d.echo.release_owed = size_t(n);
                if (!ppe::settle_release(c_, s, d.echo, &err)) return retry_.push_back(s);
                if (err < 0) return finish(s);
            }
        }
        // Source: fill the send ring straight from the pattern.
        while (!d.sending_done) {
            if (d.h.bytes ? d.off >= d.h.bytes : now_ns() >= d.deadline) {
                // Our count and CRC as the stream's last 16 bytes.
                const Trailer t{d.off, d.crc, kTrailerHasCrc};
                while (d.trailer_off < sizeof t) {
                    ssize_t n = dti_send(c_, s, reinterpret_cast<const uint8_t *>(&t) + d.trailer_off,
                                         sizeof t - d.trailer_off, 0);
                    if (n == -EAGAIN) {
                        watch(s, DTI_POLLIN | DTI_POLLOUT);
                        return;
                    }
                    if (n < 0) return finish(s);
                    d.trailer_off += size_t(n);
                }
                dti_shutdown(c_, s, DTI_SHUT_WR);
                d.sending_done = true;
                break;
            }
            ssize_t room = dti_send_reserve(c_, s, out);
            if (room == -EAGAIN) {
                watch(s, DTI_POLLIN | DTI_POLLOUT);
                return;
            }
            if (room < 0) return finish(s);
            size_t n = size_t(room);
            if (d.h.bytes) n = size_t(std::min<uint64_t>(n, d.h.bytes - d.off));
            size_t left = n;
            uint64_t at = d.off;
            uint32_t crc = d.crc;
            for (int k = 0; k < 2 && left; k++) {
                size_t m = std::min(left, out[k].len);
                d.pat->fill(at, static_cast<uint8_t *>(out[k].base), m);
                crc = crc32_iscsi(static_cast<uint8_t *>(out[k].base), int(m), crc);
                at += m;
                left -= m;
            }
            int rc = dti_send_commit(c_, s, n, 0);
            if (rc == -EAGAIN) return retry_.push_back(s); // not queued: refilled next time
            if (rc < 0) return finish(s);
            d.crc = crc;
            d.off += n;
            if (!d.h.bytes) {
                pending_.push_back(s); // come back for the deadline even without events
                return;
            }
        }
        // Sent everything: read the receiver's report.
        while (d.peer_got < sizeof d.peer) {
            ssize_t n = take(s, d, reinterpret_cast<uint8_t *>(&d.peer) + d.peer_got, sizeof d.peer - d.peer_got);
            if (n == -EAGAIN) return;
            if (n <= 0) return finish(s);
            d.peer_got += size_t(n);
            if (d.echo.release_owed) return retry_.push_back(s);
        }
        if (!o_.json)
            std::printf("sent %" PRIu64 " bytes crc32c %08x; peer got %" PRIu64 " crc32c %08x: %s\n", d.off, d.crc,
                        d.peer.bytes, d.peer.crc, peer_verdict(d.peer, d.off, d.crc));
        std::fflush(stdout);
        finish(s);
    }

    // Copying receive whose release may not fit the command queue: the
    // bytes count anyway and d.echo.release_owed says what is still owed
    // (the caller stops until the next reap, or it would take them twice).
    ssize_t take(dti_sock_t s, DtiSession &d, uint8_t *dst, size_t len)
    {
        dti_iov in[2];
        ssize_t n = dti_recv_borrow(c_, s, in);
        if (n <= 0) return n;
        size_t got = std::min(size_t(n), len);
        size_t first = std::min(got, in[0].len);
        std::memcpy(dst, in[0].base, first);
        if (got > first) std::memcpy(dst + first, in[1].base, got - first);
        d.echo.release_owed = got;
        int err = 0;
        ppe::settle_release(c_, s, d.echo, &err);
        return err < 0 ? err : ssize_t(got);
    }

    const Options &o_;
    dti_ctx_t *c_;
    dti_sock_t listener_ = DTI_SOCK_INVALID;
    std::unordered_map<dti_sock_t, std::unique_ptr<DtiSession>> sessions_;
    std::vector<dti_sock_t> pending_;
    std::vector<dti_sock_t> retry_; // stepped again after the next reap
    std::vector<Deferred> deferred_;
    bool accept_deferred_ = false;
    uint64_t served_ = 0;
};

} // namespace

int eta_perf::run_dti_server(const Options &o)
{
    return DtiServer(o).run();
}
