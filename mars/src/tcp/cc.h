// cc.h: congestion control behind a small interface.
//
// The TCP core owns loss detection and recovery (fast retransmit, NewReno
// partial ACKs, SACK pipe); an algorithm only decides cwnd and ssthresh at
// these events. State lives in the connection (CcVars), the algorithm is a
// table of functions: no allocation, no virtual dispatch on an object.
// All sizes in bytes.
#pragma once

#include <mars/stack.h>

#include <cstdint>

namespace mars {

struct CcVars {
    uint32_t cwnd = 0;
    uint32_t ssthresh = 0;
    uint32_t mss = 0;
    // Algorithm-private state (CUBIC's W_max, K, epoch, ...).
    alignas(8) uint8_t priv[64] = {};
};

struct CcAlgo {
    const char *name;
    // A new connection: initial window per RFC 6928/5681 (min(10*mss, max(2*mss, 14600))),
    // ssthresh "arbitrarily high".
    void (*init)(CcVars &cc, uint32_t mss, uint64_t now_ns);
    // New data acknowledged outside recovery. acked: bytes newly acked;
    // in_flight: bytes outstanding before this ACK; rtt_ns: a fresh RTT
    // sample or 0; min_rtt_ns: smallest seen (0 unknown).
    void (*on_ack)(CcVars &cc, uint32_t acked, uint32_t in_flight, uint64_t rtt_ns,
                   uint64_t min_rtt_ns, uint64_t now_ns);
    // Loss detected by duplicate ACKs/SACK: entering fast recovery. Sets
    // ssthresh and cwnd for recovery (the core does any inflation).
    void (*on_congestion)(CcVars &cc, uint32_t in_flight, uint64_t now_ns);
    // Recovery ended (snd.una passed the recovery point).
    void (*on_recovery_exit)(CcVars &cc, uint64_t now_ns);
    // Retransmission timeout: ssthresh from in_flight, cwnd = 1 mss.
    void (*on_rto)(CcVars &cc, uint32_t in_flight, uint64_t now_ns);
    // The connection was idle longer than an RTO (RFC 5681 4.1 restart).
    void (*on_idle_restart)(CcVars &cc, uint64_t now_ns);
    // The path MSS changed (PMTUD): keep cwnd in segments.
    void (*on_mss_change)(CcVars &cc, uint32_t mss);
};

const CcAlgo &cc_newreno();
const CcAlgo &cc_cubic(); // RFC 9438, with the Reno-friendly region
const CcAlgo &cc_algo(CongestionControl which);

// CUBIC's private state, for statistics and tests (cc must belong to CUBIC).
struct CubicView {
    double w_max;      // bytes; 0 until the first congestion avoidance epoch
    double k_sec;      // time from the epoch start to reach w_max again
    double w_est;      // the Reno-friendly estimate, bytes
    bool in_epoch;     // a congestion avoidance epoch has started
    uint64_t epoch_ns; // when it started
};
CubicView cc_cubic_view(const CcVars &cc);

} // namespace mars
