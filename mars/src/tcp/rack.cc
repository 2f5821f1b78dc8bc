// rack.cc: loss recovery of a SACK connection. RACK-TLP (RFC 8985):
// time-based loss detection with a reordering window, and the tail loss
// probe; Proportional Rate Reduction (RFC 6937, PRR-SSRB) paces what
// recovery sends. Connections without SACK keep NewReno (tcp_sync.cc).
//
// The lost set is not stored byte by byte: an entry of the transmission log
// (rack.h) is marked lost as a whole (its bytes share one send time), and
// what is still to resend is what of a lost entry is neither ACKed, SACKed
// nor sent again by a later entry.
#include "tcp/recovery.h"
#include "tcp/sender.h"
#include "tcp/timers.h"

#include <algorithm>

namespace mars::tcp {

using namespace wire;

namespace {

bool before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
bool at_or_before(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }
// a strictly later than b, in microseconds modulo 2^32
bool us_after(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }

constexpr uint64_t kWcDelAckNs = 200'000'000; // RFC 8985 7.2 WCDelAckT
constexpr uint64_t kPtoFloorNs = 10'000'000;  // as Linux: no probe sooner than 10 ms
constexpr uint64_t kPtoNoRttNs = 1'000'000'000;

} // namespace

// ---- RACK -------------------------------------------------------------------

void rack_sent(Env &e, Sock &s, uint32_t seq, uint32_t len, bool rtx)
{
    RackVars &r = s.rack;
    if (s.flags & kFInRecovery) r.prr_out += len;
    r.last_data_ns = e.now_ns_;
    if (!r.log.record(seq, seq + len, e.now_us(), rtx, s.snd_una)) {
        // No room (only retransmissions are refused before they are sent,
        // so this is new data): the oldest entry's bytes lose their time and
        // are left to the retransmission timer.
        r.log.drop_oldest();
        r.log.record(seq, seq + len, e.now_us(), rtx, s.snd_una);
    }
}

// RFC 8985 6.2 step 4.
uint64_t rack_reo_wnd(const Conn &s)
{
    const RackVars &r = s.rack;
    if (!r.reordering_seen &&
        ((s.flags & kFInRecovery) || s.rec.sack.sacked_bytes() >= SackScoreboard::kDupThresh * s.mss))
        return 0;
    return std::min<uint64_t>(uint64_t(r.reo_wnd_mult) * s.min_rtt_ns / 4, s.srtt_ns);
}

// RFC 8985 6.2 steps 1-3 for one ACK: the latest transmission it delivers
// becomes RACK's reference; a never-resent hole filled below what was
// already delivered is reordering.
void rack_update(Env &e, Sock &s, uint32_t old_una, const TcpOptions &opt)
{
    RackVars &r = s.rack;
    const uint32_t now = e.now_us();
    auto consider = [&](uint32_t start, uint32_t end) {
        if (!before(start, end)) return;
        const int i = r.log.latest_overlapping(start, end);
        if (i < 0) return;
        const TxMark &m = r.log.at(i);
        // A retransmission answered sooner than the path's minimum RTT was
        // the original's delivery (RFC 8985 6.2 step 2).
        if (r.log.is_rtx(i) && uint64_t(uint32_t(now - m.first_us)) * 1000 < s.min_rtt_ns) return;
        if (!r.valid || us_after(m.first_us, r.xmit_us) || (m.first_us == r.xmit_us && before(r.end_seq, m.end))) {
            r.xmit_us = m.first_us;
            r.end_seq = before(end, m.end) ? end : m.end; // what was delivered of it
            r.rtt_ns = uint64_t(uint32_t(now - m.first_us)) * 1000;
            r.valid = true;
        }
    };
    // Unless something above the old snd_una was SACKed, the forward-most
    // delivered byte is the old snd_una (fack itself may be stale by any
    // amount, or never set: comparing it would find reordering on half of
    // all ISNs).
    if (!r.fack_ahead) r.fack = old_una;
    // The byte at the old snd_una was never SACKed: if it was sent once and
    // something above it had been delivered already, it came late.
    if (before(old_una, s.snd_una) && before(old_una, r.fack) && r.valid) {
        const int i = r.log.latest_overlapping(old_una, old_una + 1);
        if (i >= 0 && !r.log.is_rtx(i)) r.reordering_seen = true;
    }
    consider(old_una, s.snd_una);
    for (int k = 0; k < opt.n_sack; ++k) consider(opt.sack[k].start, opt.sack[k].end);
    if (before(r.fack, s.snd_una)) r.fack = s.snd_una;
    const uint32_t high = s.rec.sack.high_sacked(s.snd_una);
    if (before(r.fack, high)) r.fack = high;
    r.fack_ahead = before(s.snd_una, r.fack);
}

// RFC 8985 6.2 step 5: marks what was sent before RACK's reference and has
// had rtt + reo_wnd to arrive. Arms the reordering timer for the rest.
// Returns whether anything was newly marked lost.
bool rack_detect(Env &e, Sock &s)
{
    RackVars &r = s.rack;
    if (!r.valid) return false;
    const uint64_t reo = rack_reo_wnd(s);
    const uint32_t now = e.now_us();
    bool newly = false;
    int64_t wait_us = 0;
    TxLog &log = r.log;
    for (int i = 0; i < log.size(); ++i) {
        if (log.is_lost(i)) continue;
        const TxMark &m = log.at(i);
        // Sent before RACK's reference: earlier, or in the same burst below
        // its end (RFC 8985 RACK_sent_after's tie-break on sequence).
        const bool same_time = m.last_us == r.xmit_us;
        const bool sent_before = us_after(r.xmit_us, m.last_us) || (same_time && before(m.start, r.end_seq));
        if (!sent_before) continue;
        SeqRange p;
        if (!log.piece(i, m.start, s.snd_una, s.rec.sack, &p)) continue;
        if (same_time && !before(p.start, r.end_seq)) continue;
        const int64_t remaining = int64_t(int32_t(m.last_us - now)) + int64_t((r.rtt_ns + reo) / 1000);
        if (remaining <= 0) {
            // Only the part below the reference is lost.
            if (same_time && before(r.end_seq, m.end) && !log.split(i, r.end_seq, s.snd_una)) continue;
            log.mark_lost(i);
            e.stats_.tcp_rack_lost++;
            newly = true;
        } else {
            wait_us = std::max(wait_us, remaining);
        }
    }
    if (wait_us > 0) {
        r.timer_is_pto = false;
        e.wheel_.arm(&s.rack_timer, e.now_ns_ + uint64_t(wait_us) * 1000);
    } else if (!r.timer_is_pto) {
        TimerWheel::cancel(&s.rack_timer);
    }
    return newly;
}

uint32_t rack_lost_bytes(const Conn &s)
{
    const TxLog &log = s.rack.log;
    uint32_t lost = 0;
    for (int i = 0; i < log.size(); ++i) {
        if (!log.is_lost(i)) continue;
        SeqRange p;
        for (uint32_t from = log.at(i).start; log.piece(i, from, s.snd_una, s.rec.sack, &p); from = p.end)
            lost += p.end - p.start;
    }
    return lost;
}

// RFC 6675 SetPipe with RACK's lost set: outstanding bytes neither SACKed
// nor lost-and-not-yet-resent.
uint32_t rack_pipe(const Conn &s)
{
    const uint32_t out = s.snd_max - s.snd_una;
    const uint32_t gone = s.rec.sack.sacked_bytes() + rack_lost_bytes(s);
    return out > gone ? out - gone : 0;
}

// The lowest lost byte range not yet resent, at most one MSS.
bool rack_next_lost(const Conn &s, SeqRange *out, uint32_t *piece_end)
{
    const TxLog &log = s.rack.log;
    bool found = false;
    for (int i = 0; i < log.size(); ++i) {
        SeqRange p;
        if (!log.is_lost(i) || !log.piece(i, log.at(i).start, s.snd_una, s.rec.sack, &p)) continue;
        if (!found || before(p.start, out->start)) *out = p, found = true;
    }
    if (found && piece_end) *piece_end = out->end;
    if (found && out->end - out->start > s.mss) out->end = out->start + s.mss;
    return found;
}

// Fast recovery starts: congestion response once, PRR from here on.
void enter_sack_recovery(Env &e, Sock &s)
{
    RackVars &r = s.rack;
    const uint32_t flight = s.snd_max - s.snd_una;
    s.flags |= kFInRecovery;
    s.recover = s.snd_max;
    s.cca->on_congestion(s.cc, flight, e.now_ns_);
    e.stats_.tcp_fast_retransmits++;
    s.rtt_start_ns = 0;
    r.prr_delivered = 0;
    r.prr_out = 0;
    r.recover_fs = std::max(flight, s.mss);
    if (r.recoveries_left && --r.recoveries_left == 0) r.reo_wnd_mult = 1; // RFC 8985 6.2 step 4
    if (r.timer_is_pto) TimerWheel::cancel(&s.rack_timer);
    s.flags &= ~kFTlpOut;
}

// RFC 6937 on each ACK in recovery: how much may be sent now, as
// cwnd = pipe + sndcnt (the sending loop then sends sndcnt).
void prr_on_ack(Env &, Sock &s, uint32_t delivered, bool entering)
{
    RackVars &r = s.rack;
    r.prr_delivered += delivered;
    const uint32_t pipe = rack_pipe(s);
    const uint32_t ssthresh = s.cc.ssthresh;
    int64_t sndcnt;
    if (pipe > ssthresh) {
        // Proportional part: spread the reduction over the recovery.
        sndcnt = int64_t((uint64_t(r.prr_delivered) * ssthresh + r.recover_fs - 1) / r.recover_fs) - r.prr_out;
    } else {
        // Slow-start reduction bound (PRR-SSRB).
        const int64_t limit = std::max<int64_t>(int64_t(r.prr_delivered) - r.prr_out, delivered) + s.mss;
        sndcnt = std::min<int64_t>(int64_t(ssthresh) - pipe, limit);
    }
    if (sndcnt < 0) sndcnt = 0;
    if (entering && sndcnt < int64_t(s.mss)) sndcnt = s.mss; // the fast retransmit itself
    s.cc.cwnd = pipe + uint32_t(sndcnt);
}

// Everything RACK-TLP and PRR do with one ACK of a SACK connection (after the
// scoreboard and snd_una moved). delivered: bytes newly ACKed or SACKed.
void rack_on_ack(Env &e, Sock &s, uint32_t old_una, const TcpOptions &opt, uint32_t delivered, bool dsack)
{
    RackVars &r = s.rack;
    if (dsack) {
        e.stats_.tcp_dsacks_in++;
        // RFC 8985 6.2 step 4: a D-SACK says we resent too early; widen the
        // reordering window, once per round trip.
        r.reordering_seen = true;
        if (at_or_before(r.dsack_round_end, s.snd_una)) {
            if (r.reo_wnd_mult < 255) r.reo_wnd_mult++;
            r.dsack_round_end = s.snd_max;
            r.recoveries_left = 16;
        }
    }
    if (s.flags & kFTlpOut) tlp_on_ack(e, s, opt, dsack);
    rack_update(e, s, old_una, opt);
    r.log.prune(s.snd_una);
    const bool lost = rack_detect(e, s);
    bool entering = false;
    if (lost && !(s.flags & kFInRecovery) && !((s.flags & kFRtoRecovery) && before(s.snd_una, s.recover))) {
        enter_sack_recovery(e, s);
        entering = true;
    }
    if (s.flags & kFInRecovery) {
        prr_on_ack(e, s, delivered, entering);
        e.want_output(s);
    } else if (lost) {
        e.want_output(s); // go-back-N after a timeout: resend what RACK found lost too
    }
}

// The reordering timer or the probe timer.
void rack_timeout(Env &e, Sock &s)
{
    if (s.rack.timer_is_pto) {
        s.rack.timer_is_pto = false;
        tlp_fire(e, s);
        return;
    }
    if (s.snd_una == s.snd_max) return;
    if (rack_detect(e, s)) {
        const bool entering = !(s.flags & kFInRecovery);
        if (entering && !((s.flags & kFRtoRecovery) && before(s.snd_una, s.recover))) enter_sack_recovery(e, s);
        if (s.flags & kFInRecovery) prr_on_ack(e, s, 0, entering);
        tcp_output(e, s);
        e.link_.flush();
    }
}

// ---- TLP (RFC 8985 7) --------------------------------------------------------

uint64_t tlp_pto(const Conn &s)
{
    uint64_t pto = s.srtt_ns ? 2 * s.srtt_ns : kPtoNoRttNs;
    if (s.snd_max - s.snd_una <= s.mss) pto += kWcDelAckNs; // a lone segment may wait for a delayed ACK
    pto = std::max(pto, kPtoFloorNs);
    return std::min(pto, s.rto_ns);
}

bool tlp_allowed(const Conn &s)
{
    return (s.flags & kFSackOk) && (s.state == TcpState::kEstablished || s.state == TcpState::kCloseWait) &&
           !(s.flags & (kFInRecovery | kFRtoRecovery | kFTlpOut)) && s.snd_una != s.snd_max && s.rec.sack.empty();
}

// After new data went out: a probe is due one PTO after the last forward
// progress unless ACKs move things along first (checked when it fires).
void tlp_arm(Env &e, Sock &s)
{
    if (!tlp_allowed(s) || (TimerWheel::armed(&s.rack_timer))) return;
    s.rack.timer_is_pto = true;
    e.wheel_.arm(&s.rack_timer, e.now_ns_ + tlp_pto(s));
}

void tlp_fire(Env &e, Sock &s)
{
    if (!tlp_allowed(s)) return;
    // Lazily restarted: ACKs that moved snd_una since it was armed moved
    // first_rtx_ns (the fast path does not touch this timer).
    const uint64_t due = std::max(s.first_rtx_ns, s.rack.last_data_ns) + tlp_pto(s);
    if (due > e.now_ns_) {
        s.rack.timer_is_pto = true;
        e.wheel_.arm(&s.rack_timer, due);
        return;
    }
    const uint32_t data_end = s.iss + 1 + s.tx_tail;
    const uint32_t unsent = before(s.snd_nxt, data_end) ? data_end - s.snd_nxt : 0;
    const uint32_t wnd_edge = s.snd_una + s.snd_wnd;
    const uint32_t by_wnd = before(s.snd_nxt, wnd_edge) ? wnd_edge - s.snd_nxt : 0;
    RackVars &r = s.rack;
    if (unsent && by_wnd >= std::min(unsent, s.mss)) {
        // New data as the probe.
        const uint32_t len = std::min({s.mss, unsent, by_wnd});
        if (!send_segment(e, s, s.snd_nxt, len, uint8_t(kAck | push_flag(s, len == unsent)), false)) return;
        s.snd_nxt += len;
        if (before(s.snd_max, s.snd_nxt)) s.snd_max = s.snd_nxt;
        r.tlp_is_rtx = false;
    } else {
        // The highest segment sent, again (a FIN alone is left to the RTO).
        const uint32_t top = before(data_end, s.snd_max) ? data_end : s.snd_max;
        if (!before(s.snd_una, top)) return;
        const uint32_t start = (top - s.snd_una > s.mss) ? top - s.mss : s.snd_una;
        if (!send_segment(e, s, start, top - start, kAck, true)) return;
        r.tlp_is_rtx = true;
    }
    r.tlp_end = s.snd_max;
    s.flags |= kFTlpOut;
    e.stats_.tcp_tlp_probes++;
    arm_rtx(e, s); // the probe restarts the retransmission timer
    e.link_.flush();
}

// RFC 8985 7.4.2: did the probe repair a loss? Then react as to a loss.
void tlp_on_ack(Env &e, Sock &s, const TcpOptions &opt, bool dsack)
{
    RackVars &r = s.rack;
    const uint32_t ack = s.snd_una;
    bool done = false, loss = false;
    if (!r.tlp_is_rtx) {
        done = at_or_before(r.tlp_end, ack);
    } else if (dsack) {
        done = true; // the original and the probe both arrived
    } else if (before(r.tlp_end, ack)) {
        done = loss = true;
    } else if (ack == r.tlp_end && opt.n_sack == 0 && s.snd_una == s.snd_max) {
        // Everything is acked and no D-SACK came with it: the probe (not the
        // original) was delivered.
        done = loss = true;
    }
    if (!done) return;
    s.flags &= ~kFTlpOut;
    if (loss) {
        e.stats_.tcp_tlp_recoveries++;
        s.cca->on_congestion(s.cc, s.snd_max - s.snd_una + s.mss, e.now_ns_);
        s.cc.cwnd = std::max(s.cc.ssthresh, s.mss);
    }
}

} // namespace mars::tcp
