// strands.h: the receive pipeline's strand scheduler (seed 003, MARS).
//
// A strand is one frame of a burst on its way through the stack, written as a
// hand-made stage machine: each stage ends by issuing a prefetch for the
// memory the next stage needs and yielding, so that while that line comes
// from DRAM the core works on other strands (the idea of DPDK's pipelined
// bulk hash lookups, generalised to the connection block and the receive
// ring). Up to `width` strands are in flight; the scheduler visits them round
// robin and runs one stage of each in turn.
//
// Order: the last step of a strand (`retire`, the protocol processing that
// changes connection state) runs strictly in arrival order: a strand whose
// stages are done waits until every older frame has retired. So two
// segments of one connection are never reordered or processed concurrently,
// while the memory waits of different frames (any connection) overlap.
// Stages before `retire` only read and prefetch; anything they find is
// re-validated at retirement (an older frame of the burst may have changed it).
//
// No heap, no syscalls: the strand slots live on the caller's stack.
#pragma once

#include <cstdint>

namespace mars {

struct StrandCounters {
    uint64_t yields = 0; // stages that ended by yielding to another strand
};

// Ops provides:
//   using State = ...;                        per-strand scratch
//   bool step(uint16_t item, uint8_t stage, State &st);
//       runs stage `stage` (0, 1, ...) of frame `item`; true when the strand
//       is ready to retire, false when it yielded (a prefetch is in flight)
//   void retire(uint16_t item, State &st);    in arrival order
// kMaxWidth bounds `width` (the caller validated it).
template <unsigned kMaxWidth, class Ops>
inline void run_strands(Ops &ops, uint16_t n, unsigned width, StrandCounters &counters)
{
    struct Slot {
        uint16_t item;
        uint8_t stage;
        bool ready;
        bool busy;
        typename Ops::State st;
    };
    Slot slots[kMaxWidth];
    if (width > kMaxWidth) width = kMaxWidth;
    if (width > n) width = n;
    uint16_t next_item = 0, next_retire = 0;
    for (unsigned k = 0; k < width; k++) slots[k] = Slot{next_item++, 0, false, true, {}};
    uint64_t yields = 0;
    while (next_retire < n) {
        for (unsigned k = 0; k < width; k++) {
            Slot &sl = slots[k];
            if (!sl.busy) continue;
            if (!sl.ready) {
                sl.ready = ops.step(sl.item, sl.stage++, sl.st);
                if (!sl.ready) yields++;
                continue;
            }
            // Done with its stages: retire only in arrival order, else wait a round.
            if (sl.item != next_retire) continue;
            ops.retire(sl.item, sl.st);
            next_retire++;
            if (next_item < n) {
                sl = Slot{next_item++, 0, false, true, {}};
            } else {
                sl.busy = false;
            }
        }
    }
    counters.yields += yields;
}

} // namespace mars
