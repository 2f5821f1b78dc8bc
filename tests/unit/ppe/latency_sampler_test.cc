// ppe/src/latency_sampler.h: the engine's side of the latency breakdown,
// driven by hand (TEST FIXTURE clock and port counter; the DTI engine's
// trace states set as its poll() would): the countdown, a complete trace's
// stages from the stamps, and samples with a missing stage (no readable
// event, no reply) counted as such, never recorded as zero.
#include "latency_sampler.h"

#include <gtest/gtest.h>

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

    explicit Loop(uint64_t every)
    {
        s.setup(&trace, nullptr, every, &tx, [](const void *c) { return *static_cast<const uint64_t *>(c); }, &clock);
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
        if (command && trace.state == Trace::kWantCommand) trace.state = Trace::kCommandSeen;
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

} // namespace
