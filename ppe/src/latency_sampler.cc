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
        t_event_ = now();
        woken_ = woken;
        record(stats::kStageStack, t_stack_ - t_rx_);
        record(stats::kStageEvent, t_event_ - t_stack_);
        trace_->state = Trace::kWantCommand;
        break;
    case Trace::kCommandSeen:
        t_cmd_ = t_poll;
        record(woken_ ? stats::kStageProgramWoken : stats::kStageProgramSpin, t_cmd_ - t_event_);
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
    if (woken_) bump(&lat_->c.woken);
    drop();
}

} // namespace ppe
