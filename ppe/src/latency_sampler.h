// ppe/src/latency_sampler.h: where a sampled request's time goes in the
// engine (issue 33; stats.h "Latency", ppe/README.md "Latency breakdown").
//
// One in `[engine] latency_sample` received frames starts a trace: the
// countdown is decremented per rx burst (`due`), so an unsampled burst costs
// a subtraction and a branch. The trace follows the request that burst
// carried through the loop, one trace in flight at a time, stamped with the
// engine's clock (TscClock: rdtsc and a multiply, no system call;
// CLOCK_MONOTONIC through the vDSO costs more and falls back to a system
// call where the clock source has no vDSO path):
//   rx      -> stack     MARS's input of the sampled burst
//   stack   -> event     the DTI poll that published the socket's readable event
//   event   -> command   the program (woken by the engine, or polling) until the
//                        DTI poll that took its SEND on that socket began
//   command -> tx        until the pass in which the port took a frame more than
//                        before that poll (the reply, or its first segment)
//                        began: the frame was handed to the port after this;
//   port                 that pass's own time (MARS's output and the port's tx
//                        burst: on net_af_packet a send system call in which the
//                        kernel may deliver the frame to its receiver, so the
//                        reply can arrive before the pass ends)
// The program's side of event -> command comes from the program's own TSC
// stamps, which the reply's SEND carries (Trace::read_tsc...; libdti, see
// dti_abi.h dti_sock_shared.trace): woken, data read, reply submitted. They
// are hints: a stamp from before the DTI poll that published the event
// began is not this request's (counted prog_missing, as none at all is); a
// stamp after the poll that took the command ended is a lie (prog_bad).
// Usable ones are clamped into [event, command] and split that stage into
// program_wake / program_read / program_reply / program_taken, which add up
// to it exactly. A complete trace also enters the slow-request log
// (stats.h SlowLog) when it is among the interval's slowest.
// A stage that never comes is counted (no_event, no_reply), not recorded.
// The loop (ppe::Engine::poll_once, and benchmarks/ppe/engine_driver.cc):
//
//   if (sampler.due(n)) sampler.input_sampled(app_stack, n, [&] { stack.input(...); });
//   else stack.input(...);
//   const bool traced = sampler.on(); uint64_t t = 0;  // one load; kept in a register
//   if (traced) t = sampler.before_dti();
//   dti.poll();
//   if (traced) sampler.after_dti(t, !dti.wakeups().empty());
//   if (traced) sampler.before_output();
//   stack.poll(now);
//   if (traced) sampler.after_output();
#pragma once

#include "stats.h"

#include <dti/engine.h>

#include <cstdint>
#include <cstring>
#include <memory>

namespace ppe {

class LatencySampler {
  public:
    using Trace = dti::engine::Trace;
    using Clock = uint64_t (*)(const void *ctx); // nanoseconds
    using TscToNs = uint64_t (*)(const void *ctx, uint64_t tsc); // a TSC reading on the Clock's scale

    // `block`: the engine's Latency block in the stats region (nullptr: a
    // private one); `tx_packets`: the app port's count of frames it took.
    // `to_ns`: nullptr: the program's stamps cannot be read (counted missing).
    void setup(Trace *trace, stats::Latency *block, uint64_t every, const uint64_t *tx_packets, Clock clock,
               const void *clock_ctx, TscToNs to_ns = nullptr)
    {
        to_ns_ = to_ns;
        trace_ = trace;
        if (!block) {
            private_ = std::make_unique<stats::Latency>();
            block = private_.get();
        }
        lat_ = block;
        std::memset(static_cast<void *>(lat_), 0, sizeof *lat_);
        every_ = every;
        __atomic_store_n(&lat_->c.sample_every, every, __ATOMIC_RELAXED);
        __atomic_store_n(&lat_->slow.interval_ns, stats::kSlowIntervalNs, __ATOMIC_RELAXED);
        left_ = every ? int64_t(every) : INT64_MAX;
        tx_ = tx_packets;
        clock_ = clock;
        clock_ctx_ = clock_ctx;
    }

    // n frames received: true when the sample is among them.
    bool due(uint16_t n) { return (left_ -= n) <= 0; }
    // Runs `input` (the stack's input of the burst), stamped when it starts a trace.
    template <typename Input>
    void input_sampled(bool app_stack, uint16_t n, Input &&input)
    {
        left_ = int64_t(every_);
        if (on_ && now() - t_rx_ > kReplyWaitNs) {
            bump(&lat_->c.no_reply);
            drop();
        }
        if (!n) return;
        if (on_ || !app_stack) { // one trace at a time; programs' sockets are on the app stack
            input();
            return;
        }
        t_rx_ = now();
        input();
        t_stack_ = now();
        for (uint64_t &v : cur_) v = 0;
        flags_ = 0;
        trace_->state = Trace::kWantEvent;
        on_ = true;
        bump(&lat_->c.traces);
    }
    bool on() const { return on_; }
    bool await_tx() const { return await_tx_; }
    uint64_t before_dti()
    {
        if (trace_->state == Trace::kWantCommand) tx_mark_ = *tx_;
        return now();
    }
    // After the DTI poll; `woken`: it listed a sleeping program's wakeup.
    void after_dti(uint64_t t_poll, bool woken);
    void before_output()
    {
        if (await_tx_) t_out_ = now();
    }
    // After the stacks' output: has the port taken a frame since the command?
    void after_output()
    {
        if (await_tx_) check_sent();
    }

    const stats::Latency &block() const { return *lat_; }

  private:
    static constexpr uint64_t kReplyWaitNs = 1'000'000'000; // a reply later than this is given up
    static void bump(uint64_t *c) { __atomic_store_n(c, *c + 1, __ATOMIC_RELAXED); }
    uint64_t now() const { return clock_(clock_ctx_); }
    void record(uint32_t stage, uint64_t ns)
    {
        cur_[stage] = ns;
        eta_hist_record(&lat_->stages[stage], ns);
    }
    void program_stamps(uint64_t t_end);
    void log_slow();
    void drop()
    {
        trace_->state = Trace::kIdle;
        on_ = false;
        await_tx_ = false;
    }

    int64_t left_ = INT64_MAX;
    uint64_t every_ = 0;
    bool on_ = false, await_tx_ = false, woken_ = false;
    Trace *trace_ = nullptr;
    stats::Latency *lat_ = nullptr;
    std::unique_ptr<stats::Latency> private_;
    const uint64_t *tx_ = nullptr;
    Clock clock_ = nullptr;
    TscToNs to_ns_ = nullptr;
    uint64_t cur_[stats::kLatencyStages] = {}; // this trace's stages (the slow-request log)
    uint32_t flags_ = 0;                       // stats::kSlowWoken, kSlowStamped
    uint64_t t_pub_ = 0;                       // the start of the poll that published the event
    const void *clock_ctx_ = nullptr;
    void check_sent();
    void finish(uint64_t t_send, uint64_t t_done);
    uint64_t t_rx_ = 0, t_stack_ = 0, t_event_ = 0, t_cmd_ = 0, t_out_ = 0, tx_mark_ = 0;
};

} // namespace ppe
