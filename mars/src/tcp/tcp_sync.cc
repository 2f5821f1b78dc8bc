// tcp_sync.cc: segments for the synchronized states (RFC 9293 3.10.7.4):
// PAWS, acceptability, RST and SYN checks with RFC 5961 challenge ACKs, ACK
// processing (NewReno without SACK, RACK-TLP/PRR with it, D-SACK
// recognition), then data and FIN (tcp_data.cc); and ICMP errors about our
// segments (RFC 5927 checks, path MTU, a hard error while connecting).
#include "tcp/input.h"
#include "tcp/sender.h"
#include "tcp/timers.h"
#include "tcp/recovery.h"
#include "tcp/rcv_tune.h"
#include "tcp/tcp_rules.h"

#include <algorithm>
#include <cstring>

namespace mars::tcp {

using namespace wire;

// RFC 5961 3.2 / 4.2 / 5.2: an ACK that tells a blind attacker nothing.
// Throttled (RFC 5961 7) per connection, not per stack: a shared counter
// is itself a side channel (CVE-2016-5696). One per millisecond still lets
// a peer that lost its state resynchronise at once.
constexpr uint64_t kChallengeAckGapNs = 1'000'000;

void challenge_ack(Env &e, Sock &s)
{
    if (s.last_challenge_ns && e.now_ns_ - s.last_challenge_ns < kChallengeAckGapNs) return;
    s.last_challenge_ns = e.now_ns_;
    e.stats_.tcp_challenge_acks++;
    ack_now(e, s);
}

// A passive SYN-RECEIVED connection sees the peer's SYN again (same ISN,
// no ACK): our SYN-ACK was lost, so send it again now rather than leave the
// peer waiting for our retransmission timer (Linux does the same). Shares
// the challenge ACK's per-connection throttle: a stream of copies of the
// SYN draws at most one SYN-ACK a millisecond.
void resend_syn_ack(Env &e, Sock &s)
{
    if (s.last_challenge_ns && e.now_ns_ - s.last_challenge_ns < kChallengeAckGapNs) return;
    s.last_challenge_ns = e.now_ns_;
    s.rtt_start_ns = 0; // Karn: the ACK may answer either SYN-ACK
    send_segment(e, s, s.iss, 0, kSyn | kAck, true);
}

void tcp_sync_input(Env &e, Sock &s, const TcpSegment &seg, bool *held)
{
    // Trimming below changes these; seg keeps the segment as received (tcp_ack reads it).
    uint8_t flags = seg.flags;
    uint32_t seq = seg.seq;
    uint8_t *payload = seg.payload;
    uint32_t len = seg.len;
    const TcpOptions &opt = seg.opt;
    // Simultaneous open (RFC 9293 figure 8): in SYN-RECEIVED the peer's
    // SYN-ACK repeats its SYN and acks ours; treat it as the ACK it carries.
    if (s.state == TcpState::kSynReceived && s.lst.parent == UINT32_MAX && (flags & (kSyn | kAck)) == (kSyn | kAck) &&
        seq == s.irs) {
        flags &= uint8_t(~kSyn);
        seq++;
    }

    // PAWS (RFC 7323 5.3).
    if ((s.flags & kFTsOk) && opt.has_ts && !(flags & kRst) && paws_old(opt.tsval, s.ts_recent)) {
        if (e.now_ns_ - s.ts_recent_ns > kPawsIdleNs) {
            s.ts_recent = opt.tsval; // idle for 24 days: the old value means nothing
        } else {
            e.stats_.drop_tcp_paws++;
            ack_now(e, s);
            return;
        }
    }

    // The peer's SYN again in passive SYN-RECEIVED. It lies just before
    // rcv_nxt, so the acceptability check below would answer a bare ACK.
    // A SYN with any other sequence number is not a retransmission: it goes
    // on to the checks below (an ACK if outside the window, RFC 5961 4.2's
    // throttled challenge ACK inside it).
    if (s.state == TcpState::kSynReceived && s.lst.parent != UINT32_MAX && (flags & (kSyn | kAck | kRst)) == kSyn &&
        seq == s.irs) {
        resend_syn_ack(e, s);
        return;
    }

    // Acceptability (RFC 9293 3.10.7.4, first check).
    if (!segment_acceptable(s.rcv_nxt, s.rcv_adv - s.rcv_nxt, seq, len, flags)) {
        if (!(flags & kRst)) {
            e.stats_.drop_tcp_out_of_window++;
            // All of it is old: report it as a D-SACK (RFC 2883 4.1).
            if (len && (s.flags & kFSackOk) && seq_lt(seq, s.rcv_nxt))
                note_dsack(e, s, seq, seq + std::min(len, s.rcv_nxt - seq));
            ack_now(e, s);
        } else {
            e.stats_.drop_tcp_out_of_window++;
        }
        return;
    }

    // RST (RFC 5961 3.2): exactly rcv_nxt resets, elsewhere in the window
    // gets a challenge ACK.
    if (flags & kRst) {
        if (seq != s.rcv_nxt) {
            e.stats_.drop_tcp_bad_state++;
            challenge_ack(e, s);
            return;
        }
        e.stats_.tcp_resets_in++;
        switch (s.state) {
        case TcpState::kSynReceived:
            if (s.lst.parent != UINT32_MAX) e.conn_drop(s, ECONNREFUSED, 0); // back to LISTEN: just forget it
            else e.conn_drop(s, ECONNREFUSED, kEvReset);
            return;
        case TcpState::kClosing:
        case TcpState::kLastAck:
            e.conn_closed(s);
            if (s.used && s.state == TcpState::kClosed) s.app.error = 0;
            return;
        default:
            e.conn_drop(s, ECONNRESET, kEvReset);
            return;
        }
    }

    // SYN in a synchronized state (RFC 5961 4.2): challenge ACK.
    if (flags & kSyn) {
        e.stats_.drop_tcp_bad_state++;
        challenge_ack(e, s);
        return;
    }
    if (!(flags & kAck)) {
        e.stats_.drop_tcp_bad_state++;
        return;
    }

    // RFC 7323 4.3 (3): remember the newest timestamp of a segment that
    // starts at or before what we last acknowledged (not one past a hole),
    // so our TSecr gives the peer true RTT samples and PAWS a current bound.
    if ((s.flags & kFTsOk) && opt.has_ts && seq_le(seq, s.last_ack_sent) && seq_ge(opt.tsval, s.ts_recent)) {
        s.ts_recent = opt.tsval;
        s.ts_recent_ns = e.now_ns_;
    }

    // Trim what we already have and what is beyond the window.
    if (seq_lt(seq, s.rcv_nxt)) {
        const uint32_t dup = s.rcv_nxt - seq;
        // Data we already have: the ACK reports it as a D-SACK (RFC 2883),
        // so a sender can tell a spurious retransmission (reordering, a
        // probe that crossed its original) from a loss and undo its
        // reaction. Zero-length probes carry no byte to report.
        if (len && (s.flags & kFSackOk)) note_dsack(e, s, seq, seq + std::min(dup, len));
        if (dup >= len) {
            if (dup > len) flags &= uint8_t(~kFin); // an old FIN
            payload += len;
            len = 0;
        } else {
            payload += dup;
            len -= dup;
        }
        seq = s.rcv_nxt;
        ack_now(e, s); // a duplicate: tell the peer where we are (RFC 5681 4.2)
    }
    const uint32_t room = std::min(s.rcv_adv - seq, s.rx_free() - std::min(s.rx_free(), seq - s.rcv_nxt));
    if (len > room) {
        len = room;
        flags &= uint8_t(~kFin);
        ack_now(e, s);
    }

    // ACK processing.
    if (s.state == TcpState::kSynReceived) {
        const uint32_t ack = seg.ack;
        if (seq_le(ack, s.snd_una) || seq_gt(ack, s.snd_max)) {
            e.stats_.drop_tcp_bad_state++;
            send_raw_conn(e, s, ack, 0, kRst, 0, nullptr, 0);
            return;
        }
        s.snd_una = ack;
        s.snd_wnd = uint32_t(seg.win) << s.snd_wscale;
        s.snd_wl1 = seq;
        s.snd_wl2 = ack;
        s.max_snd_wnd = s.snd_wnd;
        if (s.rtt_start_ns && s.rtx_count == 0) rtt_sample(e, s, e.now_ns_ - s.rtt_start_ns);
        s.rtt_start_ns = 0;
        established(e, s);
        if (!s.used || s.state != TcpState::kEstablished) return; // refused for lack of memory
    } else if (!tcp_ack(e, s, seg, len)) {
        return;
    }
    if (!s.used) return;

    // Data and FIN.
    const bool fin = flags & kFin;
    switch (s.state) {
    case TcpState::kEstablished:
    case TcpState::kFinWait1:
    case TcpState::kFinWait2:
        if (len || fin) {
            tcp_data(e, s, seg.frame, seq, payload, len, fin, held);
            // RFC 9293 3.10.4: CLOSE means "no more to send"; the peer may
            // still send. Nobody reads it any more: acknowledge and discard.
            if ((s.flags & kFUserClosed) && s.used) s.rx_head = s.rx_tail;
        }
        break;
    default:
        // CLOSE-WAIT, CLOSING, LAST-ACK: the peer already sent its FIN.
        if (len) e.stats_.drop_tcp_bad_state++;
        if (fin) ack_now(e, s);
        break;
    }
}

bool tcp_ack(Env &e, Sock &s, const TcpSegment &seg, uint32_t len)
{
    const uint32_t ack = seg.ack, seq = seg.seq;
    const TcpOptions &opt = seg.opt;
    if (seq_gt(ack, s.snd_max)) {
        e.stats_.drop_tcp_bad_state++;
        ack_now(e, s);
        return false;
    }
    const uint32_t horizon = std::max<uint32_t>(s.max_snd_wnd, 65535);
    if (seq_lt(ack, s.snd_una - horizon)) {
        // Too old to be real (RFC 5961 5.2): challenge, drop.
        e.stats_.drop_tcp_bad_state++;
        challenge_ack(e, s);
        return false;
    }
    const uint32_t win = uint32_t(seg.win) << s.snd_wscale;
    const bool sack_ok = s.flags & kFSackOk;
    const uint32_t old_una = s.snd_una, sacked_before = s.rec.sack.sacked_bytes();
    const bool dsack = sack_ok && opt.n_sack && is_dsack(opt, ack);
    uint32_t newly_sacked = 0;
    if (sack_ok && opt.n_sack) {
        newly_sacked = s.rec.sack.update(s.snd_una, s.snd_max, opt.sack, opt.n_sack);
        if (!s.rec.sack.empty()) s.flags |= kFRecBusy; // header prediction hands the connection on (conn.h)
    }

    const uint32_t fin_seq = s.iss + 1 + s.tx_tail; // where our FIN sits (if sent)
    const bool fin_sent = (s.flags & kFFinQueued) && seq_gt(s.snd_max, fin_seq);
    if (seq_gt(ack, s.snd_una)) {
        const uint32_t in_flight = s.snd_max - s.snd_una;
        uint32_t acked = ack - s.snd_una;
        uint32_t data = acked;
        if (fin_sent && seq_gt(ack, fin_seq)) data--;
        s.tx_head += data;
        s.snd_una = ack;
        if (seq_lt(s.snd_nxt, ack)) s.snd_nxt = ack;
        s.rec.sack.advance(ack);
        uint64_t rtt = 0;
        if (s.rtt_start_ns && seq_ge(ack, s.rtt_seq)) {
            rtt = e.now_ns_ - s.rtt_start_ns;
            s.rtt_start_ns = 0;
            rtt_sample(e, s, rtt);
        }
        if (s.flags & kFInRecovery) {
            if (seq_ge(ack, s.recover)) {
                s.flags &= ~kFInRecovery;
                s.cca->on_recovery_exit(s.cc, e.now_ns_);
                // Recovery ends (mars/README.md "End of recovery"). SACK
                // (PRR, RFC 6937 3): cwnd = ssthresh. NewReno (RFC 6582 3.2
                // step 6, option 1): min(ssthresh, max(FlightSize, SMSS) +
                // SMSS). Never FlightSize + SMSS alone: with nothing in
                // flight that is one segment (issue 35).
                const uint32_t flight = s.snd_max - s.snd_una;
                s.cc.cwnd = sack_ok ? s.cc.ssthresh : std::min(s.cc.ssthresh, std::max(flight, s.mss) + s.mss);
                s.cc.cwnd = std::max(s.cc.cwnd, s.mss);
            } else if (!sack_ok) {
                // NewReno partial ACK: the next hole is lost too; resend it,
                // deflate by what was acked, add back one segment.
                send_segment(e, s, s.snd_una, std::min(s.mss, s.snd_max - s.snd_una), kAck, true);
                s.cc.cwnd = s.cc.cwnd > acked ? s.cc.cwnd - acked : s.mss;
                if (acked >= s.mss) s.cc.cwnd += s.mss;
                e.wheel_.arm(&s.rtx_timer, e.now_ns_ + s.rto_ns);
            }
        } else {
            s.cca->on_ack(s.cc, acked, in_flight, rtt, s.min_rtt_ns, e.now_ns_);
        }
        if ((s.flags & kFRtoRecovery) && seq_ge(ack, s.recover)) s.flags &= ~kFRtoRecovery;
        s.dupacks = 0;
        s.rtx_count = 0;
        s.probes = 0;
        if (s.snd_una == s.snd_max) {
            TimerWheel::cancel(&s.rtx_timer);
            s.first_rtx_ns = 0;
        } else if (!(s.flags & kFInRecovery) || (s.flags & kFSackOk)) {
            s.first_rtx_ns = e.now_ns_;
            e.wheel_.arm(&s.rtx_timer, e.now_ns_ + s.rto_ns);
        }
        e.raise(s, kEvWritable);
        e.want_output(s);
    } else if (ack == s.snd_una && len == 0 && !(seg.flags & kFin) && s.snd_max != s.snd_una &&
               (win == s.snd_wnd || newly_sacked)) {
        // A duplicate ACK: RFC 5681 2 (same window), or RFC 6675 2 (it SACKs
        // new data, whatever its window: receivers move their window often).
        s.dupacks++;
        if (sack_ok) {
            // Loss detection is RACK's (rack_on_ack below); the first two
            // duplicates still let new data out (RFC 3042).
            if (!(s.flags & kFInRecovery) && s.dupacks <= 2) e.want_output(s);
        } else if (!(s.flags & kFInRecovery)) {
            const bool lost = s.dupacks >= 3;
            if (lost && !((s.flags & kFRtoRecovery) && seq_lt(s.snd_una, s.recover))) {
                // Fast retransmit, then fast recovery (RFC 5681 3.2, RFC 6582, RFC 6675 5).
                s.flags |= kFInRecovery;
                s.recover = s.snd_max;
                s.cca->on_congestion(s.cc, s.snd_max - s.snd_una, e.now_ns_);
                e.stats_.tcp_fast_retransmits++;
                s.rtt_start_ns = 0;
                const uint32_t n = std::min(s.mss, s.snd_max - s.snd_una);
                send_segment(e, s, s.snd_una, n, kAck, true);
                s.high_rxt = s.snd_una + n;
                s.cc.cwnd = s.cc.ssthresh + 3 * s.mss;
                e.wheel_.arm(&s.rtx_timer, e.now_ns_ + s.rto_ns);
            } else if (s.dupacks <= 2) {
                e.want_output(s); // limited transmit (RFC 3042)
            }
        } else {
            s.cc.cwnd += s.mss; // NewReno inflation
            e.want_output(s);
        }
    }
    // RACK-TLP and PRR look at every ACK of a SACK connection with data out
    // (or just acknowledged).
    if (sack_ok && (s.snd_una != old_una || opt.n_sack || (s.flags & kFTlpOut)))
    {
        // RFC 6937 DeliveredData: what snd_una and the SACKed bytes moved by.
        const int64_t delivered = int64_t(s.snd_una - old_una) + int64_t(s.rec.sack.sacked_bytes()) - sacked_before;
        rack_on_ack(e, s, old_una, opt, uint32_t(std::max<int64_t>(delivered, 0)), dsack);
    }

    // Window update (RFC 9293 3.10.7.4, SND.WL1/WL2 rule).
    if (seq_lt(s.snd_wl1, seq) || (s.snd_wl1 == seq && seq_le(s.snd_wl2, ack))) {
        const bool opened = win > s.snd_wnd;
        s.snd_wnd = win;
        s.snd_wl1 = seq;
        s.snd_wl2 = ack;
        s.max_snd_wnd = std::max(s.max_snd_wnd, win);
        if (opened) {
            s.probes = 0;
            e.want_output(s);
        }
    }

    // Our FIN acknowledged?
    if (fin_sent && seq_gt(ack, fin_seq)) {
        switch (s.state) {
        case TcpState::kFinWait1:
            s.state = TcpState::kFinWait2;
            TimerWheel::cancel(&s.rtx_timer);
            // An orphaned FIN-WAIT-2 (the application closed) does not wait forever.
            if (s.flags & kFUserClosed) e.wheel_.arm(&s.aux_timer, e.now_ns_ + e.cfg_.tcp.time_wait_ns);
            break;
        case TcpState::kClosing:
            enter_time_wait(e, s);
            return false;
        case TcpState::kLastAck:
            e.conn_closed(s);
            return false;
        default:
            break;
        }
    }
    return true;
}

void icmp_error(Env &e, Sock &s, const IcmpTcpError &err)
{
    // RFC 5927: only believe ICMP about data we have in flight.
    if (!seq_ge(err.seq, s.snd_una) || !seq_le(err.seq, s.snd_max)) return;
    if (err.code == kIcmpCodeFragNeeded) {
        e.stats_.icmp_frag_needed_in++;
        uint32_t mtu = err.next_hop_mtu;
        if (mtu == 0) mtu = 576; // RFC 1191 5: old routers leave it 0
        mtu = std::max<uint32_t>(mtu, 576);
        if (mtu < s.path_mtu) {
            s.path_mtu = mtu;
            update_mss(e, s);
            // Resend what was lost to the smaller path at once.
            s.snd_nxt = s.snd_una;
            e.want_output(s);
        }
    } else if (s.state == TcpState::kSynSent && (err.code == 2 || err.code == kIcmpCodePort)) {
        // RFC 1122 4.2.3.9: a hard error while connecting aborts.
        e.conn_drop(s, ECONNREFUSED, kEvError);
    } else if (s.state == TcpState::kSynSent) {
        s.app.error = EHOSTUNREACH; // soft error: reported if the open times out
    }
}

void icmp6_error(Env &e, Sock &s, uint32_t seq, uint8_t type, uint8_t code, uint32_t mtu)
{
    // RFC 5927 (as icmp_error): only about data we have in flight.
    if (!seq_ge(seq, s.snd_una) || !seq_le(seq, s.snd_max)) return;
    if (type == 2) { // packet too big (RFC 8201: the layer clamped it to >= 1280)
        if (mtu < s.path_mtu) {
            s.path_mtu = mtu;
            update_mss(e, s);
            s.snd_nxt = s.snd_una; // resend what the smaller path lost, at once
            e.want_output(s);
        }
    } else if (s.state == TcpState::kSynSent && type == 1 && (code == 1 || code == 4)) {
        // Destination unreachable, administratively prohibited or port
        // unreachable: a hard error while connecting (RFC 1122 4.2.3.9).
        e.conn_drop(s, ECONNREFUSED, kEvError);
    } else if (s.state == TcpState::kSynSent && type == 1) {
        s.app.error = EHOSTUNREACH; // soft: reported if the open times out
    }
}

} // namespace mars::tcp
