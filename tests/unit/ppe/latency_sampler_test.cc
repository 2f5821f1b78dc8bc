// ppe/src/latency_sampler.h: the engine's side of the latency breakdown,
// driven by hand (TEST FIXTURE clock and port counter; the DTI engine's
// trace states set as its poll() would): the countdown, a complete trace's
// stages from the stamps, and samples with a missing stage (no readable
// event, no reply) counted as such, never recorded as zero.
#include "latency_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace {

using ppe::LatencySampler;
using Trace = dti::engine::Trace;
namespace st = ppe::stats;

struct Loop {
    uint64_t clock = 1'000'000;
    uint64_t tx = 0;
    Trace trace;
    LatencySampler s;
    int inputs = 0;

    // The program's stamps its reply's SEND carries (as libdti writes
    // them; TEST FIXTURE: the "TSC" is the fixture clock, to_ns the identity).
    struct Stamps {
        uint64_t read_tsc = 0;
        uint32_t submit_ticks = 0, woken_ticks = 0;
    } stamps;

    explicit Loop(uint64_t every)
    {
        s.setup(&trace, nullptr, every, &tx, [](const void *c) { return *static_cast<const uint64_t *>(c); }, &clock,
                [](const void *, uint64_t tsc) { return tsc; });
    }
    // One rx burst of n frames; the stack's input takes `input_ns`.
    void receive(uint16_t n, uint64_t input_ns)
    {
        auto input = [&] { inputs++, clock += input_ns; };
        if (!s.due(n)) input();
        else s.input_sampled(true, n, input);
    }
    // One DTI poll taking poll_ns; `event`/`command`: what it did for the traced socket.
    void dti_poll(uint64_t poll_ns, bool event, bool command, bool woken = false, bool sends = false)
    {
        uint64_t t = 0;
        if (s.on()) t = s.before_dti();
        clock += poll_ns;
        if (event && trace.state == Trace::kWantEvent) trace.state = Trace::kEventSeen, trace.sock = 7;
        if (command && trace.state == Trace::kWantCommand) {
            trace.state = Trace::kCommandSeen;
            trace.read_tsc = stamps.read_tsc, trace.submit_ticks = stamps.submit_ticks;
            trace.woken_ticks = stamps.woken_ticks;
        }
        if (sends) tx++;
        if (s.on()) s.after_dti(t, woken);
    }
    void output(uint64_t ns, bool sends)
    {
        const bool traced = s.on();
        if (traced) s.before_output();
        clock += ns;
        if (sends) tx++;
        if (traced) s.after_output();
    }
    uint64_t count(uint32_t stage) const { return eta_hist_count(&s.block().stages[stage]); }
    uint64_t max(uint32_t stage) const { return s.block().stages[stage].max; }
};

TEST(LatencySampler, CountsDownPerFrame)
{
    Loop l(10);
    for (int i = 0; i < 4; i++) l.receive(2, 100); // 8 frames: none sampled
    EXPECT_EQ(l.s.block().c.traces, 0u);
    EXPECT_FALSE(l.s.on());
    l.receive(3, 100); // the 10th frame is in this burst
    EXPECT_EQ(l.s.block().c.traces, 1u);
    EXPECT_TRUE(l.s.on());
    EXPECT_EQ(l.trace.state, Trace::kWantEvent);
    EXPECT_EQ(l.inputs, 5); // the sampled burst went in as well
    EXPECT_EQ(l.s.block().c.sample_every, 10u);
}

TEST(LatencySampler, OffNeverSamples)
{
    Loop l(0);
    for (int i = 0; i < 100000; i++) l.receive(32, 1);
    EXPECT_EQ(l.s.block().c.traces, 0u);
    EXPECT_EQ(l.inputs, 100000);
}

TEST(LatencySampler, CompleteTraceRecordsEachStage)
{
    Loop l(1);
    l.receive(1, 300);                 // stack: 300
    l.dti_poll(200, true, false, true); // event: 200, a wakeup listed
    l.output(50, false);
    l.dti_poll(1000, false, false);    // the program is still working
    l.dti_poll(400, false, true);      // its SEND: taken at the start of this poll (t = 300+200+50+1000 after rx)
    EXPECT_TRUE(l.s.await_tx());
    l.output(80, true);                // the reply leaves in this output pass: transmit 400, port 80
    EXPECT_FALSE(l.s.on());
    const st::Latency &b = l.s.block();
    EXPECT_EQ(b.c.completed, 1u);
    EXPECT_EQ(b.c.woken, 1u);
    EXPECT_EQ(l.max(st::kStageStack), 300u);
    EXPECT_EQ(l.max(st::kStageEvent), 200u);
    EXPECT_EQ(l.max(st::kStageProgramWoken), 50u + 1000u);
    EXPECT_EQ(l.count(st::kStageProgramSpin), 0u);
    EXPECT_EQ(l.max(st::kStageTransmit), 400u);
    EXPECT_EQ(l.max(st::kStagePort), 80u);
    EXPECT_EQ(l.max(st::kStageEngine), 300u + 200u + 400u);
    EXPECT_EQ(l.max(st::kStageRequest), 300u + 200u + 50u + 1000u + 400u);
    EXPECT_EQ(b.stages[st::kStageRequest].sum, 1950u);
}

TEST(LatencySampler, ReplySentInsideTheCommandPoll)
{
    Loop l(1);
    l.receive(1, 10);
    l.dti_poll(10, true, false); // spinning program: no wakeup
    l.dti_poll(30, false, true, false, /*sends=*/true);
    EXPECT_FALSE(l.s.on());
    EXPECT_EQ(l.s.block().c.completed, 1u);
    EXPECT_EQ(l.count(st::kStageProgramSpin), 1u);
    EXPECT_EQ(l.count(st::kStageTransmit), 1u);
    EXPECT_EQ(l.max(st::kStageTransmit), 0u); // handed over in the very poll that took the command
    EXPECT_EQ(l.max(st::kStagePort), 30u);
}

TEST(LatencySampler, NoEventIsCountedNotRecorded)
{
    Loop l(1);
    l.receive(1, 100);        // an ACK: no readable event in the poll after it
    l.dti_poll(10, false, false);
    EXPECT_FALSE(l.s.on());
    EXPECT_EQ(l.s.block().c.no_event, 1u);
    for (uint32_t i = 0; i < st::kLatencyStages; i++) EXPECT_EQ(l.count(i), 0u) << i;
}

TEST(LatencySampler, NoReplyWithinASecondIsCounted)
{
    Loop l(1);
    l.receive(1, 100);
    l.dti_poll(10, true, false);
    EXPECT_EQ(l.count(st::kStageStack), 1u); // the stages it had are kept
    l.clock += 999'000'000;
    l.dti_poll(10, false, false);
    EXPECT_TRUE(l.s.on()); // not yet a second
    l.clock += 2'000'000;
    l.dti_poll(10, false, false);
    EXPECT_FALSE(l.s.on());
    EXPECT_EQ(l.s.block().c.no_reply, 1u);
    EXPECT_EQ(l.count(st::kStageTransmit), 0u);
    EXPECT_EQ(l.count(st::kStageRequest), 0u);
    EXPECT_EQ(l.count(st::kStageProgramSpin) + l.count(st::kStageProgramWoken), 0u);
    // A later sample starts afresh.
    l.receive(1, 5);
    EXPECT_EQ(l.s.block().c.traces, 2u);
    EXPECT_EQ(l.trace.state, Trace::kWantEvent);
}

TEST(LatencySampler, OneTraceAtATime)
{
    Loop l(1);
    l.receive(1, 10);
    l.dti_poll(10, true, false);
    l.receive(1, 10); // due, but a trace is in flight
    EXPECT_EQ(l.s.block().c.traces, 1u);
    EXPECT_EQ(l.trace.state, Trace::kWantCommand);
}

// One complete trace: stack 100, event poll 100 (published in
// [t_pub, t_event) = [rx + 100, rx + 200)), the program 1000 (its command
// taken at t_cmd = rx + 1200), the reply out in the next output pass.
// `stamp(t_pub, t_event, t_cmd)` sets the program's stamps before the
// command poll; `request_extra`: the program's stage takes that much longer.
template <typename F>
void one_trace(Loop &l, F &&stamp, uint64_t request_extra = 0, bool woken = true)
{
    const uint64_t rx = l.clock;
    l.receive(1, 100);
    l.dti_poll(100, true, false, woken);
    l.clock += 1000 + request_extra;
    stamp(rx + 100, rx + 200, rx + 1200 + request_extra);
    l.dti_poll(10, false, true);
    l.output(5, true);
}

TEST(LatencySampler, ProgramStampsSplitTheProgramStage)
{
    Loop l(1);
    one_trace(l, [&](uint64_t, uint64_t ev, uint64_t) {
        l.stamps = {ev + 300, 600, 200}; // woke at ev + 100, read at ev + 300, submitted at ev + 900
    });
    const st::Latency &b = l.s.block();
    EXPECT_EQ(b.c.completed, 1u);
    EXPECT_EQ(b.c.prog_stamped, 1u);
    EXPECT_EQ(b.c.prog_missing + b.c.prog_bad, 0u);
    EXPECT_EQ(l.max(st::kStageProgWake), 100u);
    EXPECT_EQ(l.max(st::kStageProgRead), 200u);
    EXPECT_EQ(l.max(st::kStageProgReply), 600u);
    EXPECT_EQ(l.max(st::kStageProgTaken), 100u);
    // The split adds up to the program's stage exactly.
    EXPECT_EQ(b.stages[st::kStageProgWake].sum + b.stages[st::kStageProgRead].sum +
                  b.stages[st::kStageProgReply].sum + b.stages[st::kStageProgTaken].sum,
              b.stages[st::kStageProgramWoken].sum);
}

TEST(LatencySampler, ASleepTheEngineDidNotWakeIsPartOfTheRead)
{
    // The engine saw a polling program (no wakeup listed), yet its stamps say a
    // sleep ended in the window (it went to sleep after the publish and its wait
    // returned at once on the data). The split follows the engine: no
    // program_wake (a part of program_woken only), the read from the event.
    Loop l(1);
    one_trace(l, [&](uint64_t, uint64_t ev, uint64_t) { l.stamps = {ev + 300, 600, 200}; }, 0, false);
    const st::Latency &b = l.s.block();
    EXPECT_EQ(b.c.prog_stamped, 1u);
    EXPECT_EQ(l.count(st::kStageProgramSpin), 1u);
    EXPECT_EQ(l.count(st::kStageProgWake), 0u);
    EXPECT_EQ(l.max(st::kStageProgRead), 300u);
    EXPECT_EQ(b.stages[st::kStageProgRead].sum + b.stages[st::kStageProgReply].sum +
                  b.stages[st::kStageProgTaken].sum,
              b.stages[st::kStageProgramSpin].sum);
}

TEST(LatencySampler, ProgramStampsWithinThePublishingPollAreClamped)
{
    // A polling program may read while the publishing poll still runs (the
    // event is out before the engine's stamp after that poll): read counts 0.
    Loop l(1);
    one_trace(l, [&](uint64_t pub, uint64_t, uint64_t) { l.stamps = {pub + 50, 400, 0}; });
    EXPECT_EQ(l.s.block().c.prog_stamped, 1u);
    EXPECT_EQ(l.count(st::kStageProgWake), 0u); // it did not sleep
    EXPECT_EQ(l.max(st::kStageProgRead), 0u);
    EXPECT_EQ(l.max(st::kStageProgReply), 350u); // from the event (clamped) to pub + 450
    EXPECT_EQ(l.max(st::kStageProgTaken), 1200u - 450u - 100u);
}

TEST(LatencySampler, MissingProgramStampsAreCountedNotRecorded)
{
    Loop l(1);
    one_trace(l, [&](uint64_t, uint64_t, uint64_t) { l.stamps = {}; }); // an older libdti: zeros
    // A stamp from before the request's event: an earlier read, not this request's.
    one_trace(l, [&](uint64_t pub, uint64_t, uint64_t) { l.stamps = {pub - 1, 10, 0}; });
    const st::Latency &b = l.s.block();
    EXPECT_EQ(b.c.completed, 2u);
    EXPECT_EQ(b.c.prog_missing, 2u);
    EXPECT_EQ(b.c.prog_stamped + b.c.prog_bad, 0u);
    for (uint32_t i : {st::kStageProgWake, st::kStageProgRead, st::kStageProgReply, st::kStageProgTaken})
        EXPECT_EQ(l.count(i), 0u) << i;
    EXPECT_EQ(l.count(st::kStageProgramWoken), 2u); // the engine's own stages stand
    EXPECT_EQ(l.count(st::kStageRequest), 2u);
}

TEST(LatencySampler, HostileProgramStampsAreRefused)
{
    Loop l(1);
    // Submitted after the engine's poll that took it ended: impossible.
    one_trace(l, [&](uint64_t, uint64_t ev, uint64_t cmd) { l.stamps = {ev, uint32_t(cmd - ev + 1000), 0}; });
    // A saturated gap (the program claims more than 2^32 ticks).
    one_trace(l, [&](uint64_t, uint64_t ev, uint64_t) { l.stamps = {ev, UINT32_MAX, 0}; });
    // A read stamp far in the future (or a wrapped one): not this request's.
    one_trace(l, [&](uint64_t, uint64_t, uint64_t) { l.stamps = {UINT64_MAX - 5, UINT32_MAX, UINT32_MAX}; });
    const st::Latency &b = l.s.block();
    EXPECT_EQ(b.c.completed, 3u);
    EXPECT_EQ(b.c.prog_bad, 2u);
    EXPECT_EQ(b.c.prog_missing, 1u);
    EXPECT_EQ(b.c.prog_stamped, 0u);
    for (uint32_t i : {st::kStageProgWake, st::kStageProgRead, st::kStageProgReply, st::kStageProgTaken})
        EXPECT_EQ(l.count(i), 0u) << i;
    // A wakeup claimed before the event (or before the read's own clock)
    // is no wakeup of this request: usable, no program_wake.
    one_trace(l, [&](uint64_t pub, uint64_t ev, uint64_t) { l.stamps = {ev + 10, 20, uint32_t(ev + 10 - pub + 5)}; });
    one_trace(l, [&](uint64_t, uint64_t ev, uint64_t) { l.stamps = {ev + 10, 20, UINT32_MAX}; });
    EXPECT_EQ(b.c.prog_stamped, 2u);
    EXPECT_EQ(l.count(st::kStageProgWake), 0u);
    EXPECT_EQ(l.count(st::kStageProgRead), 2u);
}

TEST(LatencySampler, SlowLogKeepsTheIntervalsSlowest)
{
    Loop l(1);
    // 12 traces, the program's stage 1000 + 100 * (i * 7 % 12): the 8
    // slowest are kept, whatever their order.
    for (uint64_t i = 0; i < 12; i++)
        one_trace(l, [&](uint64_t, uint64_t ev, uint64_t) { l.stamps = {ev + 1, 1, 0}; }, 100 * (i * 7 % 12));
    const st::SlowLog &g = l.s.block().slow;
    EXPECT_EQ(g.interval_ns, st::kSlowIntervalNs);
    EXPECT_EQ(g.done_start_ns, 0u);
    std::vector<uint64_t> kept;
    for (const st::SlowRequest &r : g.open) {
        ASSERT_NE(r.at_ns, 0u);
        EXPECT_EQ(r.seq % 2, 0u);
        EXPECT_EQ(r.flags, st::kSlowWoken | st::kSlowStamped);
        // Its stages add up to the request (stack + event + program + transmit).
        EXPECT_EQ(r.stage_ns[st::kStageStack] + r.stage_ns[st::kStageEvent] + r.stage_ns[st::kStageProgramWoken] +
                      r.stage_ns[st::kStageTransmit],
                  r.stage_ns[st::kStageRequest]);
        EXPECT_EQ(r.stage_ns[st::kStageProgWake] + r.stage_ns[st::kStageProgRead] +
                      r.stage_ns[st::kStageProgReply] + r.stage_ns[st::kStageProgTaken],
                  r.stage_ns[st::kStageProgramWoken]);
        kept.push_back(r.stage_ns[st::kStageProgramWoken]);
    }
    std::sort(kept.begin(), kept.end());
    for (uint64_t k = 0; k < st::kSlowRequests; k++) EXPECT_EQ(kept[k], 1000u + 100 * (k + 4)) << k;
    // Past the interval: the open one is done, the next trace opens a new one.
    const uint64_t first = g.open_start_ns;
    l.clock += st::kSlowIntervalNs;
    one_trace(l, [&](uint64_t, uint64_t, uint64_t) { l.stamps = {}; });
    EXPECT_EQ(g.done_start_ns, first);
    uint32_t open = 0, done = 0;
    for (uint32_t i = 0; i < st::kSlowRequests; i++) open += g.open[i].at_ns != 0, done += g.done[i].at_ns != 0;
    EXPECT_EQ(open, 1u);
    EXPECT_EQ(done, st::kSlowRequests);
    for (const st::SlowRequest &r : g.open)
        if (r.at_ns) {
            EXPECT_EQ(r.flags, st::kSlowWoken); // no stamps: not kSlowStamped
        }
}

} // namespace
