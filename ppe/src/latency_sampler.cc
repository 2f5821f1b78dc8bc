// ppe/src/latency_sampler.cc: the sampled trace's later stages (latency_sampler.h).
#include "latency_sampler.h"

namespace ppe {

void LatencySampler::after_dti(uint64_t t_poll, bool woken)
{
    switch (trace_->state) {
    case Trace::kWantEvent: // the sampled burst made no readable event (an ACK, a SYN...)
        bump(&lat_->c.no_event);
        drop();
        break;
    case Trace::kEventSeen:
        t_pub_ = t_poll;
        t_event_ = now();
        woken_ = woken;
        record(stats::kStageStack, t_stack_ - t_rx_);
        record(stats::kStageEvent, t_event_ - t_stack_);
        trace_->state = Trace::kWantCommand;
        break;
    case Trace::kCommandSeen:
        t_cmd_ = t_poll;
        record(woken_ ? stats::kStageProgramWoken : stats::kStageProgramSpin, t_cmd_ - t_event_);
        program_stamps(now());
        trace_->state = Trace::kIdle;
        await_tx_ = true;
        if (*tx_ != tx_mark_) finish(t_poll, now()); // this poll sent it already
        break;
    case Trace::kWantCommand:
        if (t_poll - t_rx_ > kReplyWaitNs) {
            bump(&lat_->c.no_reply);
            drop();
        }
        break;
    default:
        break;
    }
}

void LatencySampler::check_sent()
{
    if (*tx_ != tx_mark_) {
        finish(t_out_, now());
    } else if (now() - t_rx_ > kReplyWaitNs) {
        bump(&lat_->c.no_reply);
        drop();
    }
}

// The reply was handed to the port in the pass [t_send, t_done).
void LatencySampler::finish(uint64_t t_send, uint64_t t_done)
{
    record(stats::kStageTransmit, t_send - t_cmd_);
    record(stats::kStagePort, t_done - t_send);
    record(stats::kStageEngine, (t_event_ - t_rx_) + (t_send - t_cmd_));
    record(stats::kStageRequest, t_send - t_rx_);
    bump(&lat_->c.completed);
    if (woken_) bump(&lat_->c.woken), flags_ |= stats::kSlowWoken;
    log_slow();
    drop();
}

// The program's stamps of the reply (Trace::read_tsc...), checked against
// the engine's: the poll that published the event began at t_pub_, the one
// that took the command ran [t_cmd_, t_end).
void LatencySampler::program_stamps(uint64_t t_end)
{
    if (!trace_->read_tsc || !to_ns_) {
        bump(&lat_->c.prog_missing);
        return;
    }
    const uint64_t read = to_ns_(clock_ctx_, trace_->read_tsc);
    const uint64_t sub = to_ns_(clock_ctx_, trace_->read_tsc + trace_->submit_ticks);
    if (read < t_pub_ || read > t_end) { // before this request's event: not its stamp; or wrapped
        bump(&lat_->c.prog_missing);
        return;
    }
    if (sub > t_end || trace_->submit_ticks == UINT32_MAX) { // submitted after the engine took it: a lie
        bump(&lat_->c.prog_bad);
        return;
    }
    auto clamp = [](uint64_t v, uint64_t lo, uint64_t hi) { return v < lo ? lo : v > hi ? hi : v; };
    uint64_t woke = t_event_;
    // Its sleep counts only where the engine saw one too (woken_: the publishing
    // poll listed its wakeup). A program that was polling when the event was
    // published may still stamp a sleep that ended in the window (it went to
    // sleep after the publish and its wait returned at once on the data): that
    // time is its read, and program_wake stays a part of program_woken alone.
    const bool slept = woken_ && trace_->woken_ticks && trace_->woken_ticks <= trace_->read_tsc &&
                       to_ns_(clock_ctx_, trace_->read_tsc - trace_->woken_ticks) >= t_pub_;
    if (slept) woke = clamp(to_ns_(clock_ctx_, trace_->read_tsc - trace_->woken_ticks), t_event_, t_cmd_);
    const uint64_t r = clamp(read, woke, t_cmd_), s = clamp(sub, r, t_cmd_);
    if (slept) record(stats::kStageProgWake, woke - t_event_);
    record(stats::kStageProgRead, r - woke);
    record(stats::kStageProgReply, s - r);
    record(stats::kStageProgTaken, t_cmd_ - s);
    bump(&lat_->c.prog_stamped);
    flags_ |= stats::kSlowStamped;
}

namespace {
void put(uint64_t *w, uint64_t v) { __atomic_store_n(w, v, __ATOMIC_RELAXED); }
// One entry, seq odd while written (stats.h SlowLog).
void write_entry(stats::SlowRequest *e, uint64_t at, const uint64_t *stages, uint32_t flags)
{
    const uint64_t seq = e->seq | 1;
    __atomic_store_n(&e->seq, seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    put(&e->at_ns, at);
    for (uint32_t i = 0; i < stats::kLatencyStages; i++) put(&e->stage_ns[i], stages[i]);
    __atomic_store_n(&e->flags, flags, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, seq + 1, __ATOMIC_RELEASE);
}
} // namespace

// A complete trace: among the open interval's slowest? (A handful of
// compares, once per complete trace.) An entry with at_ns 0 is empty.
void LatencySampler::log_slow()
{
    static constexpr uint64_t kNone[stats::kLatencyStages] = {};
    stats::SlowLog &l = lat_->slow;
    if (!l.open_start_ns) {
        put(&l.open_start_ns, t_rx_);
    } else if (t_rx_ - l.open_start_ns >= stats::kSlowIntervalNs) { // the open interval is over: it is done
        for (uint32_t i = 0; i < stats::kSlowRequests; i++) {
            stats::SlowRequest &o = l.open[i];
            if (o.at_ns || l.done[i].at_ns) write_entry(&l.done[i], o.at_ns, o.stage_ns, o.flags);
            if (o.at_ns) write_entry(&o, 0, kNone, 0);
        }
        put(&l.done_start_ns, l.open_start_ns);
        put(&l.open_start_ns, t_rx_);
    }
    uint32_t slot = 0;
    uint64_t least = UINT64_MAX;
    for (uint32_t i = 0; i < stats::kSlowRequests; i++) {
        const stats::SlowRequest &o = l.open[i];
        if (!o.at_ns) {
            slot = i, least = 0;
            break;
        }
        if (o.stage_ns[stats::kStageRequest] < least) slot = i, least = o.stage_ns[stats::kStageRequest];
    }
    if (least != 0 && cur_[stats::kStageRequest] <= least) return;
    write_entry(&l.open[slot], t_rx_, cur_, flags_);
}

} // namespace ppe
