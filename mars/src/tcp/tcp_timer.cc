// tcp_timer.cc: the per-connection timers, all on one hashed timing wheel.
//   rtx_timer    retransmission (RFC 6298, Karn, exponential backoff), SYN and
//                SYN-ACK retries, and the persist timer (zero-window probes)
//   delack_timer delayed ACK
//   aux_timer    keepalive, TIME-WAIT (2MSL) and orphaned FIN-WAIT-2
#include "tcp/timers.h"
#include "tcp/sender.h"
#include "tcp/recovery.h"
#include "tcp/input.h"

#include <algorithm>

namespace mars::tcp {

using namespace wire;

void timer_fire(Env &e, Timer *t)
{
    Sock &s = *static_cast<Sock *>(t->owner);
    if (!s.used) return;
    switch (t->kind) {
    case kTimerRtx:
        rtx_timeout(e, s);
        break;
    case kTimerDelack:
        ack_now(e, s);
        break;
    case kTimerAux:
        aux_timeout(e, s);
        break;
    case kTimerRack:
        rack_timeout(e, s);
        break;
    default:
        break;
    }
}

void arm_rtx(Env &e, Sock &s)
{
    uint64_t due = e.now_ns_ + s.rto_ns;
    // RFC 5482: the user timeout ends the connection on time, not at the
    // next backed-off retransmission.
    if (s.app.user_timeout_ns && s.first_rtx_ns) due = std::min(due, s.first_rtx_ns + s.app.user_timeout_ns);
    e.wheel_.arm(&s.rtx_timer, std::max(due, e.now_ns_ + 1));
}

void rtx_timeout(Env &e, Sock &s)
{
    const TcpConfig &t = e.cfg_.tcp;
    if (s.state == TcpState::kSynSent || s.state == TcpState::kSynReceived) {
        if (++s.rtx_count > t.syn_retries) {
            e.stats_.tcp_timeouts++;
            e.conn_drop(s, s.app.error ? s.app.error : ETIMEDOUT, kEvError);
            return;
        }
        s.rto_ns = std::min(s.rto_ns * 2, t.rto_max_ns);
        s.rtt_start_ns = 0; // Karn: no sample from a retransmitted SYN
        send_segment(e, s, s.iss, 0, s.state == TcpState::kSynSent ? kSyn : (kSyn | kAck), true);
        arm_rtx(e, s);
        e.link_.flush();
        return;
    }
    const uint32_t data_end = s.iss + 1 + s.tx_tail;
    if (s.snd_una == s.snd_max) {
        // Persist: data waits for the window (or for a useful piece of it).
        if (!seq_lt(s.snd_nxt, data_end)) return;
        if (s.snd_wnd == 0) {
            if (++s.probes > t.max_retries) {
                e.stats_.tcp_timeouts++;
                e.conn_drop(s, ETIMEDOUT, kEvError);
                return;
            }
            // A zero-length segment below the window draws an ACK with the
            // current window (the peer cannot take data anyway).
            send_segment(e, s, s.snd_una - 1, 0, kAck, false);
            const uint64_t backoff = std::min<uint64_t>(s.rto_ns << std::min<uint32_t>(s.probes, 16), t.rto_max_ns);
            e.wheel_.arm(&s.rtx_timer, e.now_ns_ + backoff);
        } else {
            // SWS override: send what the window allows now.
            const uint32_t n = std::min({s.snd_wnd, s.mss, data_end - s.snd_nxt});
            const bool last = n == data_end - s.snd_nxt;
            // PSH where the data ends, also on a MSG_MORE tail: what the
            // timer sends goes with PSH, as Linux's tcp_write_wakeup sets it.
            send_segment(e, s, s.snd_nxt, n, last ? (kAck | kPsh) : kAck, false);
            s.snd_nxt += n;
            if (seq_gt(s.snd_nxt, s.snd_max)) s.snd_max = s.snd_nxt;
            if (s.first_rtx_ns == 0) s.first_rtx_ns = e.now_ns_;
            arm_rtx(e, s);
        }
        e.link_.flush();
        return;
    }
    // Retransmission timeout (RFC 6298 5.4-5.7, RFC 5681 3.1).
    const bool user_timeout = s.app.user_timeout_ns && s.first_rtx_ns && e.now_ns_ - s.first_rtx_ns >= s.app.user_timeout_ns;
    if (user_timeout || ++s.rtx_count > t.max_retries) {
        e.stats_.tcp_timeouts++;
        e.conn_drop(s, ETIMEDOUT, kEvError);
        return;
    }
    e.stats_.tcp_timeouts++;
    s.cca->on_rto(s.cc, s.snd_max - s.snd_una, e.now_ns_);
    s.rto_ns = std::min(s.rto_ns * 2, t.rto_max_ns);
    s.flags &= ~kFInRecovery;
    s.flags |= kFRtoRecovery;
    s.recover = s.snd_max;
    s.rec.sack.clear(); // the receiver may have reneged (RFC 2018 8)
    // Go-back-N resends everything: RACK starts over from those sends.
    s.rack.log.clear();
    s.flags &= ~kFTlpOut;
    TimerWheel::cancel(&s.rack_timer);
    s.dupacks = 0;
    s.rtt_start_ns = 0;
    s.snd_nxt = s.snd_una; // go back N, paced by slow start
    tcp_output(e, s);
    if (!TimerWheel::armed(&s.rtx_timer)) arm_rtx(e, s);
    e.link_.flush();
}

void arm_keepalive(Env &e, Sock &s)
{
    if (s.state != TcpState::kEstablished && s.state != TcpState::kCloseWait) return;
    if (!(s.flags & kFKeepAlive)) {
        TimerWheel::cancel(&s.aux_timer);
        return;
    }
    const uint64_t last = s.last_recv_ns ? s.last_recv_ns : e.now_ns_;
    e.wheel_.arm(&s.aux_timer, std::max(last + s.app.keep_idle_ns, e.now_ns_ + 1));
}

void aux_timeout(Env &e, Sock &s)
{
    switch (s.state) {
    case TcpState::kTimeWait:
    case TcpState::kFinWait2:
        e.conn_closed(s);
        return;
    case TcpState::kEstablished:
    case TcpState::kCloseWait: {
        if (!(s.flags & kFKeepAlive)) return;
        // Probing starts only after keep_idle without a segment, so anything
        // received within keep_idle is newer than our first probe: the peer is
        // alive, whatever it answered with (data takes the fast path, which
        // does not look at the probe count).
        const uint64_t idle_since = s.last_recv_ns;
        if (e.now_ns_ - idle_since < s.app.keep_idle_ns) {
            s.keep_probes = 0;
            e.wheel_.arm(&s.aux_timer, idle_since + s.app.keep_idle_ns);
            return;
        }
        if (s.keep_probes >= s.app.keep_cnt) {
            e.stats_.tcp_timeouts++;
            e.conn_drop(s, ETIMEDOUT, kEvError);
            return;
        }
        // RFC 9293 3.8.4: a segment with SEG.SEQ = SND.NXT-1 and no data.
        s.keep_probes++;
        send_segment(e, s, s.snd_una - 1, 0, kAck, false);
        e.wheel_.arm(&s.aux_timer, e.now_ns_ + s.app.keep_intvl_ns);
        e.link_.flush();
        return;
    }
    default:
        return;
    }
}

void enter_time_wait(Env &e, Sock &s)
{
    s.state = TcpState::kTimeWait;
    TimerWheel::cancel(&s.rtx_timer);
    TimerWheel::cancel(&s.delack_timer);
    s.rec.ooo.clear(e.ooo_pool_, e.io_);
    e.stats_.ooo_frames_used = e.ooo_pool_.used();
    if (s.flags & kFUserClosed) e.release_user(s);
    e.wheel_.arm(&s.aux_timer, e.now_ns_ + e.cfg_.tcp.time_wait_ns);
}

void rtt_sample(Env &e, Sock &s, uint64_t r)
{
    if (r == 0) r = 1000; // below our clock's resolution: call it 1 us
    if (!s.min_rtt_ns || r < s.min_rtt_ns) s.min_rtt_ns = r;
    if (s.srtt_ns == 0) {
        s.srtt_ns = r;
        s.rttvar_ns = r / 2;
    } else {
        const uint64_t diff = s.srtt_ns > r ? s.srtt_ns - r : r - s.srtt_ns;
        s.rttvar_ns = (3 * s.rttvar_ns + diff) / 4;
        s.srtt_ns = (7 * s.srtt_ns + r) / 8;
    }
    // RFC 6298 2.3 with G = 1 ms (our timer granularity).
    const uint64_t rto = s.srtt_ns + std::max<uint64_t>(1'000'000, 4 * s.rttvar_ns);
    s.rto_ns = std::clamp(rto, e.cfg_.tcp.rto_min_ns, e.cfg_.tcp.rto_max_ns);
}

} // namespace mars::tcp
