// Unit tests of the receive pipeline's strand scheduler (mars/src/strands.h):
// every item runs its stages in order and retires exactly once, retirement is
// in arrival order (so per-flow order holds whatever the flows), stages of
// different items interleave (the point: memory waits overlap), at most
// `width` items are in flight, and an item with more stages (a long chain)
// does not let younger items overtake it.
#include "strands.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace mars {
namespace {

// A recording Ops: item i belongs to flow flows[i] and needs stages[i] steps.
struct Recorder {
    std::vector<uint32_t> flows;
    std::vector<uint8_t> stages;
    struct Event {
        uint16_t item;
        int stage; // -1: retire
    };
    std::vector<Event> log;
    std::vector<int> next_stage; // per item: the stage it must run next
    unsigned in_flight = 0, max_in_flight = 0;
    bool stage_order_ok = true;

    struct State {
        uint32_t steps = 0;
    };
    bool step(uint16_t item, uint8_t stage, State &st)
    {
        if (stage == 0) {
            in_flight++;
            max_in_flight = std::max(max_in_flight, in_flight);
        }
        if (int(stage) != next_stage[item]) stage_order_ok = false;
        next_stage[item]++;
        st.steps++;
        log.push_back({item, stage});
        return stage + 1u >= stages[item];
    }
    void retire(uint16_t item, State &st)
    {
        if (st.steps != stages[item]) stage_order_ok = false; // State belongs to its own item
        in_flight--;
        log.push_back({item, -1});
    }

    std::vector<uint16_t> retired() const
    {
        std::vector<uint16_t> r;
        for (const Event &e : log)
            if (e.stage < 0) r.push_back(e.item);
        return r;
    }
};

Recorder make(std::vector<uint32_t> flows, std::vector<uint8_t> stages)
{
    Recorder r;
    r.flows = std::move(flows);
    r.stages = std::move(stages);
    r.next_stage.assign(r.flows.size(), 0);
    return r;
}

TEST(Strands, EveryItemRetiresOnceInArrivalOrder)
{
    for (unsigned width : {1u, 2u, 3u, 8u, 32u, 64u}) {
        Recorder r = make(std::vector<uint32_t>(40, 0), std::vector<uint8_t>(40, 4));
        StrandCounters c;
        run_strands<64>(r, 40, width, c);
        std::vector<uint16_t> want(40);
        for (uint16_t i = 0; i < 40; i++) want[i] = i;
        EXPECT_EQ(r.retired(), want) << "width " << width;
        EXPECT_TRUE(r.stage_order_ok) << "width " << width;
        EXPECT_LE(r.max_in_flight, width) << "width " << width;
        EXPECT_EQ(c.yields, 40u * 3) << "three of four stages end in a yield";
    }
}

TEST(Strands, WidthOneIsRunToCompletion)
{
    Recorder r = make({1, 2, 3}, {3, 3, 3});
    StrandCounters c;
    run_strands<64>(r, 3, 1, c);
    // Item by item: all stages, then retire, then the next item.
    std::vector<int> want = {0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, -1};
    ASSERT_EQ(r.log.size(), want.size());
    for (size_t i = 0; i < want.size(); i++) {
        EXPECT_EQ(r.log[i].stage, want[i]) << i;
        EXPECT_EQ(r.log[i].item, i / 4) << i;
    }
}

TEST(Strands, StagesOfDifferentItemsInterleave)
{
    Recorder r = make(std::vector<uint32_t>{1, 2, 3, 4}, std::vector<uint8_t>(4, 3));
    StrandCounters c;
    run_strands<64>(r, 4, 4, c);
    // Round robin: stage 0 of every item before stage 1 of the first.
    for (uint16_t i = 0; i < 4; i++) {
        EXPECT_EQ(r.log[i].item, i);
        EXPECT_EQ(r.log[i].stage, 0);
    }
    EXPECT_EQ(r.log[4].item, 0);
    EXPECT_EQ(r.log[4].stage, 1);
}

// One hot flow (every other frame) mixed with cold ones, and cold frames
// that need extra stages (chain walks) or none (not TCP): per flow, the
// retirement order is the arrival order.
TEST(Strands, HotFlowMixedWithColdFlowsKeepsPerFlowOrder)
{
    std::vector<uint32_t> flows;
    std::vector<uint8_t> stages;
    for (uint32_t i = 0; i < 64; i++) {
        flows.push_back(i % 2 ? 0 : 1000 + i);
        stages.push_back(i % 2 ? 4 : uint8_t(1 + (i * 7) % 6)); // cold: 1..6 stages
    }
    for (unsigned width : {2u, 5u, 16u, 64u}) {
        Recorder r = make(flows, stages);
        StrandCounters c;
        run_strands<64>(r, 64, width, c);
        std::map<uint32_t, int> last; // flow -> last retired item
        for (uint16_t item : r.retired()) {
            auto it = last.find(r.flows[item]);
            if (it != last.end()) {
                EXPECT_LT(it->second, int(item)) << "flow " << r.flows[item] << " reordered";
            }
            last[r.flows[item]] = item;
        }
        EXPECT_EQ(r.retired().size(), 64u);
        EXPECT_TRUE(r.stage_order_ok);
        EXPECT_LE(r.max_in_flight, width);
    }
}

// An old item with many stages holds back the retirement of younger, faster
// ones, but not their stages: they run while it is still walking.
TEST(Strands, SlowItemIsNotOvertakenButDoesNotStallOthersStages)
{
    Recorder r = make({1, 2, 3}, {8, 2, 2});
    StrandCounters c;
    run_strands<64>(r, 3, 3, c);
    EXPECT_EQ(r.retired(), (std::vector<uint16_t>{0, 1, 2}));
    size_t first_retire = 0;
    while (r.log[first_retire].stage >= 0) first_retire++;
    EXPECT_EQ(r.log[first_retire].item, 0);
    // Items 1 and 2 finished both their stages before item 0 retired.
    int younger_steps = 0;
    for (size_t i = 0; i < first_retire; i++)
        if (r.log[i].item != 0) younger_steps++;
    EXPECT_EQ(younger_steps, 4);
}

TEST(Strands, EmptyBurstDoesNothing)
{
    Recorder r = make({}, {});
    StrandCounters c;
    run_strands<64>(r, 0, 8, c);
    EXPECT_TRUE(r.log.empty());
    EXPECT_EQ(c.yields, 0u);
}

} // namespace
} // namespace mars
