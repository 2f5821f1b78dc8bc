// cc.cc: congestion control algorithms: NewReno (RFC 5681 with RFC 3465
// byte counting) and CUBIC (RFC 9438 with the Reno-friendly region and fast
// convergence). Each keeps its private state in CcVars::priv.
#include "tcp/cc.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace mars {

namespace {

constexpr uint32_t kInfinite = 0xffffffffu; // "arbitrarily high" ssthresh
constexpr uint32_t kCwndCap = 1u << 31;     // far above any TCP window (2^30)
constexpr uint32_t kAbcLimit = 2;           // RFC 3465 L: at most 2 mss per ACK in slow start

uint32_t cap(uint64_t v) { return v > kCwndCap ? kCwndCap : uint32_t(v); }
uint32_t cap_double(double v) {
    if (!(v > 0)) return 0;
    return v >= double(kCwndCap) ? kCwndCap : uint32_t(v);
}

// RFC 6928 / 5681 initial window.
uint32_t initial_window(uint32_t mss) {
    uint64_t iw = uint64_t(mss) * 10, floor = uint64_t(mss) * 2;
    uint64_t cap14600 = floor > 14600 ? floor : 14600;
    return cap(iw < cap14600 ? iw : cap14600);
}

// The sender was limited by cwnd, not by the application or the peer's
// window (RFC 7661): grow only then, or cwnd would lose touch with the path.
bool cwnd_limited(const CcVars &cc, uint32_t in_flight) { return in_flight >= cc.cwnd / 2; }

// RFC 5681 slow start with RFC 3465 limit L = 2. Returns the acked bytes
// left over after cwnd reached ssthresh (for congestion avoidance).
uint32_t slow_start(CcVars &cc, uint32_t acked) {
    uint64_t inc = acked;
    uint64_t limit = uint64_t(kAbcLimit) * cc.mss;
    if (inc > limit) inc = limit;
    uint64_t room = uint64_t(cc.ssthresh) - cc.cwnd;
    if (inc <= room) {
        cc.cwnd = cap(uint64_t(cc.cwnd) + inc);
        return 0;
    }
    cc.cwnd = cap(cc.ssthresh);
    return acked > room ? uint32_t(acked - room) : 0;
}

uint32_t scale(uint32_t v, uint32_t from_mss, uint32_t to_mss) {
    if (from_mss == 0) return v;
    return cap(uint64_t(v) * to_mss / from_mss);
}

template <class T>
T load(const CcVars &cc) {
    static_assert(sizeof(T) <= sizeof(cc.priv) && alignof(T) <= 8);
    static_assert(std::is_trivially_copyable_v<T>);
    T t;
    std::memcpy(&t, cc.priv, sizeof(T));
    return t;
}

template <class T>
void store(CcVars &cc, const T &t) {
    std::memcpy(cc.priv, &t, sizeof(T));
}

// ---- NewReno -----------------------------------------------------------------

struct RenoState {
    uint64_t bytes_acked; // RFC 5681 section 3.1 byte counting in congestion avoidance
};

void reno_init(CcVars &cc, uint32_t mss, uint64_t) {
    cc.mss = mss;
    cc.cwnd = initial_window(mss);
    cc.ssthresh = kInfinite;
    std::memset(cc.priv, 0, sizeof(cc.priv));
    store(cc, RenoState{0});
}

void reno_on_ack(CcVars &cc, uint32_t acked, uint32_t in_flight, uint64_t, uint64_t, uint64_t) {
    if (acked == 0 || !cwnd_limited(cc, in_flight)) return;
    if (cc.cwnd < cc.ssthresh) {
        acked = slow_start(cc, acked);
        if (acked == 0) return;
    }
    RenoState st = load<RenoState>(cc);
    st.bytes_acked += acked;
    if (st.bytes_acked >= cc.cwnd) {
        st.bytes_acked -= cc.cwnd;
        if (st.bytes_acked >= cc.cwnd) st.bytes_acked = 0; // one mss per ACK at most
        cc.cwnd = cap(uint64_t(cc.cwnd) + cc.mss);
    }
    store(cc, st);
}

uint32_t half_flight(const CcVars &cc, uint32_t in_flight) {
    uint64_t half = in_flight / 2, floor = uint64_t(cc.mss) * 2;
    return cap(half > floor ? half : floor);
}

void reno_on_congestion(CcVars &cc, uint32_t in_flight, uint64_t) {
    cc.ssthresh = half_flight(cc, in_flight);
    cc.cwnd = cc.ssthresh;
    store(cc, RenoState{0});
}

void reno_on_recovery_exit(CcVars &cc, uint64_t) {
    if (cc.cwnd > cc.ssthresh) cc.cwnd = cc.ssthresh; // deflate what the core inflated
}

void reno_on_rto(CcVars &cc, uint32_t in_flight, uint64_t) {
    cc.ssthresh = half_flight(cc, in_flight);
    cc.cwnd = cc.mss;
    store(cc, RenoState{0});
}

// RFC 5681 4.1: restart from min(IW, cwnd); remember the old window in
// ssthresh (RFC 2861) so slow start gets back quickly.
void idle_restart_common(CcVars &cc) {
    uint32_t iw = initial_window(cc.mss);
    if (cc.cwnd <= iw) return;
    uint32_t three_quarters = cap(uint64_t(cc.cwnd) * 3 / 4);
    if (cc.ssthresh < three_quarters) cc.ssthresh = three_quarters;
    cc.cwnd = iw;
}

void reno_on_idle_restart(CcVars &cc, uint64_t) {
    idle_restart_common(cc);
    store(cc, RenoState{0});
}

void mss_change_common(CcVars &cc, uint32_t mss) {
    cc.cwnd = scale(cc.cwnd, cc.mss, mss);
    if (cc.cwnd < mss) cc.cwnd = mss;
    if (cc.ssthresh != kInfinite) cc.ssthresh = scale(cc.ssthresh, cc.mss, mss);
    cc.mss = mss;
}

void reno_on_mss_change(CcVars &cc, uint32_t mss) {
    if (mss == 0) return;
    mss_change_common(cc, mss);
}

constexpr CcAlgo kNewReno = {
    "newreno",          reno_init,   reno_on_ack,          reno_on_congestion,
    reno_on_recovery_exit, reno_on_rto, reno_on_idle_restart, reno_on_mss_change,
};

// ---- CUBIC -------------------------------------------------------------------

constexpr double kC = 0.4;    // segments / s^3
constexpr double kBeta = 0.7; // multiplicative decrease
// Reno-friendly additive increase before W_est reaches the old window.
constexpr double kAlphaCubic = 3.0 * (1.0 - kBeta) / (1.0 + kBeta);

struct CubicState {
    double w_max;      // bytes; 0: take the window at the epoch start
    double k_sec;      // seconds from the epoch start until W_cubic == w_max
    double w_est;      // Reno-friendly window, bytes
    double cwnd_prior; // cwnd before the last reduction, bytes
    double frac;       // fractional bytes of cwnd not yet applied
    uint64_t epoch_ns; // start of the congestion avoidance epoch
    bool in_epoch;
};

double w_cubic(const CubicState &st, uint32_t mss, double t_sec) {
    double d = t_sec - st.k_sec;
    return kC * d * d * d * mss + st.w_max;
}

void cubic_init(CcVars &cc, uint32_t mss, uint64_t) {
    cc.mss = mss;
    cc.cwnd = initial_window(mss);
    cc.ssthresh = kInfinite;
    std::memset(cc.priv, 0, sizeof(cc.priv));
    store(cc, CubicState{});
}

void cubic_start_epoch(const CcVars &cc, CubicState &st, uint64_t now_ns) {
    double cwnd = double(cc.cwnd);
    st.in_epoch = true;
    st.epoch_ns = now_ns;
    st.frac = 0;
    if (st.w_max <= cwnd) {
        // No loss yet, after an RTO, or already past the old maximum: the
        // curve starts at its plateau (K = 0, W_max = cwnd_epoch).
        st.w_max = cwnd;
        st.k_sec = 0;
    } else {
        st.k_sec = std::cbrt((st.w_max - cwnd) / (kC * cc.mss));
    }
    st.w_est = cwnd;
    if (st.cwnd_prior <= 0) st.cwnd_prior = cwnd;
}

// Congestion avoidance on one ACK (RFC 9438 sections 4.2 to 4.5).
void cubic_avoid(CcVars &cc, CubicState &st, uint32_t acked, uint64_t rtt_ns,
                 uint64_t min_rtt_ns, uint64_t now_ns) {
    if (!st.in_epoch) cubic_start_epoch(cc, st, now_ns);
    const double mss = cc.mss;
    const double cwnd = double(cc.cwnd) + st.frac;
    double t = now_ns > st.epoch_ns ? double(now_ns - st.epoch_ns) * 1e-9 : 0.0;
    double rtt = double(min_rtt_ns ? min_rtt_ns : rtt_ns) * 1e-9;

    double alpha = st.w_est >= st.cwnd_prior ? 1.0 : kAlphaCubic;
    st.w_est += alpha * mss * double(acked) / cwnd;

    double next;
    if (w_cubic(st, cc.mss, t) < st.w_est) {
        next = st.w_est > cwnd ? st.w_est : cwnd; // Reno-friendly region
    } else {
        double target = w_cubic(st, cc.mss, t + rtt);
        if (target < cwnd) target = cwnd;
        if (target > 1.5 * cwnd) target = 1.5 * cwnd;
        next = cwnd + (target - cwnd) * double(acked) / cwnd;
    }
    if (next >= double(kCwndCap)) {
        cc.cwnd = kCwndCap;
        st.frac = 0;
        return;
    }
    double whole = std::floor(next);
    cc.cwnd = cap_double(whole);
    st.frac = next - whole;
}

void cubic_on_ack(CcVars &cc, uint32_t acked, uint32_t in_flight, uint64_t rtt_ns,
                  uint64_t min_rtt_ns, uint64_t now_ns) {
    if (acked == 0 || !cwnd_limited(cc, in_flight)) return;
    if (cc.cwnd < cc.ssthresh) {
        acked = slow_start(cc, acked);
        if (acked == 0) return;
    }
    CubicState st = load<CubicState>(cc);
    cubic_avoid(cc, st, acked, rtt_ns, min_rtt_ns, now_ns);
    store(cc, st);
}

// ssthresh = max(in_flight * beta, 2 mss), in integers (beta = 7/10).
uint32_t beta_flight(const CcVars &cc, uint32_t in_flight) {
    static_assert(kBeta == 0.7);
    uint32_t floor = cap(uint64_t(cc.mss) * 2);
    uint32_t v = cap(uint64_t(in_flight) * 7 / 10);
    return v > floor ? v : floor;
}

void cubic_on_congestion(CcVars &cc, uint32_t in_flight, uint64_t) {
    CubicState st = load<CubicState>(cc);
    double cwnd = double(cc.cwnd);
    // Fast convergence: a flow whose window keeps shrinking gives way.
    st.w_max = cwnd < st.w_max ? cwnd * (1.0 + kBeta) / 2.0 : cwnd;
    st.cwnd_prior = cwnd;
    st.in_epoch = false;
    st.frac = 0;
    cc.ssthresh = beta_flight(cc, in_flight);
    cc.cwnd = cc.ssthresh;
    store(cc, st);
}

void cubic_on_recovery_exit(CcVars &cc, uint64_t) {
    if (cc.cwnd > cc.ssthresh) cc.cwnd = cc.ssthresh;
    CubicState st = load<CubicState>(cc);
    st.in_epoch = false; // the epoch starts with the first ACK after recovery
    st.frac = 0;
    store(cc, st);
}

void cubic_on_rto(CcVars &cc, uint32_t in_flight, uint64_t) {
    CubicState st = load<CubicState>(cc);
    // RFC 9438 4.8: after a timeout the next epoch has K = 0 and W_max =
    // the window at its start.
    st.w_max = 0;
    st.cwnd_prior = 0;
    st.in_epoch = false;
    st.frac = 0;
    cc.ssthresh = beta_flight(cc, in_flight);
    cc.cwnd = cc.mss;
    store(cc, st);
}

void cubic_on_idle_restart(CcVars &cc, uint64_t) {
    idle_restart_common(cc);
    CubicState st = load<CubicState>(cc);
    st.in_epoch = false; // idle time must not count as epoch time
    st.frac = 0;
    store(cc, st);
}

void cubic_on_mss_change(CcVars &cc, uint32_t mss) {
    if (mss == 0) return;
    CubicState st = load<CubicState>(cc);
    if (cc.mss != 0) {
        double ratio = double(mss) / double(cc.mss);
        st.w_max *= ratio;
        st.w_est *= ratio;
        st.cwnd_prior *= ratio;
    }
    st.frac = 0;
    mss_change_common(cc, mss);
    store(cc, st);
}

constexpr CcAlgo kCubic = {
    "cubic",          cubic_init,  cubic_on_ack,          cubic_on_congestion,
    cubic_on_recovery_exit, cubic_on_rto, cubic_on_idle_restart, cubic_on_mss_change,
};

static_assert(sizeof(RenoState) <= sizeof(CcVars::priv));
static_assert(sizeof(CubicState) <= sizeof(CcVars::priv));

} // namespace

const CcAlgo &cc_newreno() { return kNewReno; }
const CcAlgo &cc_cubic() { return kCubic; }

const CcAlgo &cc_algo(CongestionControl which) {
    return which == CongestionControl::kNewReno ? kNewReno : kCubic;
}

CubicView cc_cubic_view(const CcVars &cc) {
    CubicState st = load<CubicState>(cc);
    return CubicView{st.w_max, st.k_sec, st.w_est, st.in_epoch, st.epoch_ns};
}

} // namespace mars
