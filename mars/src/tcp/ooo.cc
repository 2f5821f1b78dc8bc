// ooo.cc: the out-of-order segment pool and per-connection queue.
//
// The queue is a singly linked list of pool slots sorted by sequence number
// with no two segments overlapping: overlapping arrivals are trimmed to their
// new bytes (never split, so one segment holds exactly one frame), and queued
// segments that a new one covers completely are freed. A FIN that arrives on
// its own is kept as a zero-length segment until data reaches it.
//
// The SACK blocks come from recent_, the runs most recently added to. An
// arrival behind the last hole (the common case under loss: a window's worth
// of segments queues behind it) extends the run listed first, found without
// a walk; a retransmission that fills a hole in the middle looks its two
// neighbouring runs up in recent_ and walks the queue only when one of them
// has left the list.
#include "tcp/ooo.h"

#include <new>

namespace mars {

namespace {

bool before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
bool at_or_before(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }

} // namespace

bool OooPool::init(uint32_t frames) {
    segs_.reset(new (std::nothrow) OooSeg[frames ? frames : 1]);
    if (!segs_) return false;
    capacity_ = frames;
    clear();
    return true;
}

void OooPool::clear() {
    used_ = 0;
    free_ = kNil;
    for (uint32_t i = capacity_; i-- > 0;) {
        segs_[i] = OooSeg{};
        segs_[i].next = free_;
        free_ = i;
    }
}

bool OooPool::as_new() const {
    uint32_t expect = 0;
    for (uint32_t slot = free_; slot != kNil; slot = segs_[slot].next, ++expect) {
        if (slot != expect || expect >= capacity_) return false;
    }
    return used_ == 0 && expect == capacity_;
}

uint32_t OooPool::alloc() {
    uint32_t slot = free_;
    if (slot == kNil) return kNil;
    free_ = segs_[slot].next;
    ++used_;
    return slot;
}

void OooPool::free(uint32_t slot) {
    segs_[slot].next = free_;
    free_ = slot;
    --used_;
}

bool OooQueue::has_room(const OooPool &pool, uint32_t freed, uint32_t max_frames) const {
    if (frames_ - freed + 1 > max_frames) return false;
    return freed > 0 || !pool.full();
}

void OooQueue::link_new(OooPool &pool, uint32_t slot, uint32_t prev, uint32_t next) {
    pool.seg(slot).next = next;
    if (prev == OooPool::kNil) head_ = slot;
    else pool.seg(prev).next = slot;
    if (next == OooPool::kNil) tail_ = slot;
    ++frames_;
}

PacketRef OooQueue::pop_head(OooPool &pool) {
    uint32_t slot = head_;
    PacketRef frame = pool.seg(slot).frame;
    head_ = pool.seg(slot).next;
    if (head_ == OooPool::kNil) tail_ = OooPool::kNil;
    pool.free(slot);
    --frames_;
    return frame;
}

// Marks the FIN on the queued segment whose data ends at fin_seq.
bool OooQueue::attach_fin(OooPool &pool, uint32_t fin_seq) {
    for (uint32_t i = head_; i != OooPool::kNil; i = pool.seg(i).next) {
        OooSeg &s = pool.seg(i);
        if (s.seq + s.len == fin_seq) {
            s.fin = true;
            return true;
        }
        if (before(fin_seq, s.seq)) break;
    }
    return false;
}

OooQueue::Insert OooQueue::insert_fin_only(OooPool &pool, uint32_t seq, const PacketRef &frame,
                                           uint32_t max_frames) {
    if (attach_fin(pool, seq)) return Insert::kDuplicate;
    uint32_t prev = OooPool::kNil, cur = head_;
    while (cur != OooPool::kNil && at_or_before(pool.seg(cur).seq + pool.seg(cur).len, seq)) {
        prev = cur;
        cur = pool.seg(cur).next;
    }
    // A FIN inside queued data contradicts it: ignore the FIN.
    if (cur != OooPool::kNil && before(pool.seg(cur).seq, seq)) return Insert::kDuplicate;
    if (!has_room(pool, 0, max_frames)) return Insert::kNoRoom;
    uint32_t slot = pool.alloc();
    pool.seg(slot) = OooSeg{seq, 0, nullptr, frame, true, OooPool::kNil};
    link_new(pool, slot, prev, cur);
    return Insert::kQueued; // a FIN marker holds no byte to report
}

OooQueue::Insert OooQueue::insert(OooPool &pool, PacketIo &io, uint32_t seq, uint8_t *payload,
                                  uint32_t len, bool fin, const PacketRef &frame,
                                  uint32_t max_frames) {
    if (len == 0) {
        if (!fin) return Insert::kDuplicate;
        return insert_fin_only(pool, seq, frame, max_frames);
    }
    uint32_t start = seq, end = seq + len;
    // Skip the segments wholly before the new one. While a hole waits for
    // its retransmission, a window's worth of segments arrives in order
    // behind it: those go after the last one without a walk.
    uint32_t prev = OooPool::kNil, cur = head_;
    if (tail_ != OooPool::kNil && at_or_before(pool.seg(tail_).seq + pool.seg(tail_).len, start)) {
        prev = tail_;
        cur = OooPool::kNil;
    }
    while (cur != OooPool::kNil && at_or_before(pool.seg(cur).seq + pool.seg(cur).len, start)) {
        prev = cur;
        cur = pool.seg(cur).next;
    }
    // One queued segment may hold our first bytes: keep its copy.
    if (cur != OooPool::kNil && at_or_before(pool.seg(cur).seq, start)) {
        start = pool.seg(cur).seq + pool.seg(cur).len;
        prev = cur;
        cur = pool.seg(cur).next;
    }
    // Queued segments that fit inside what is left are replaced by it.
    uint32_t covered = 0;
    bool covered_fin = false;
    uint32_t after = cur;
    while (before(start, end) && after != OooPool::kNil &&
           at_or_before(pool.seg(after).seq + pool.seg(after).len, end)) {
        covered_fin = pool.seg(after).fin && pool.seg(after).seq + pool.seg(after).len == end;
        ++covered;
        after = pool.seg(after).next;
    }
    // The next one may hold our last bytes: keep its copy.
    bool keep_fin = fin;
    if (after != OooPool::kNil && before(pool.seg(after).seq, end)) {
        end = pool.seg(after).seq;
        keep_fin = false; // data after our FIN: the FIN cannot be right
        covered_fin = false;
    }
    if (!before(start, end)) {
        if (fin) attach_fin(pool, seq + len);
        // The ACK's first block after the D-SACK: the run that holds this
        // arrival (RFC 2883 4.1.2).
        note_run(run_holding(pool, seq));
        return Insert::kDuplicate;
    }
    if (!has_room(pool, covered, max_frames)) return Insert::kNoRoom;

    ReleaseBatch freed;
    for (uint32_t i = 0; i < covered; ++i) {
        uint32_t next = pool.seg(cur).next;
        freed.add(io, pool.seg(cur).frame);
        pool.free(cur);
        --frames_;
        cur = next;
    }
    freed.flush(io);
    uint32_t slot = pool.alloc();
    pool.seg(slot) = OooSeg{start, end - start, payload + (start - seq), frame,
                            keep_fin || covered_fin, OooPool::kNil};
    link_new(pool, slot, prev, cur);
    // Behind a hole, arrivals extend the latest run at the tail: O(1). (A
    // segment that replaced queued ones may have joined other listed runs.)
    if (cur == OooPool::kNil && covered == 0 && n_recent_ > 0 && recent_[0].end == start) {
        recent_[0].end = end;
        return Insert::kQueued;
    }
    SeqRange run{start, end};
    if (prev != OooPool::kNil && pool.seg(prev).seq + pool.seg(prev).len == start)
        run.start = run_start_ending_at(pool, prev);
    if (cur != OooPool::kNil && pool.seg(cur).seq == end) run.end = run_end_starting_at(pool, cur);
    note_run(run);
    return Insert::kQueued;
}

void OooQueue::clear(OooPool &pool, PacketIo &io) {
    ReleaseBatch done;
    while (head_ != OooPool::kNil) done.add(io, pop_head(pool));
    done.flush(io);
    n_recent_ = 0;
}

int OooQueue::sack_blocks(const OooPool &, SeqRange *out, int max) const {
    int n = max < n_recent_ ? max : n_recent_;
    for (int i = 0; i < n; ++i) out[i] = recent_[i];
    return n < 0 ? 0 : n;
}

uint32_t OooQueue::run_start_ending_at(const OooPool &pool, uint32_t slot) const {
    const uint32_t end = pool.seg(slot).seq + pool.seg(slot).len;
    for (int i = 0; i < n_recent_; ++i)
        if (recent_[i].end == end) return recent_[i].start;
    uint32_t start = pool.seg(head_).seq, reach = start;
    for (uint32_t i = head_; i != slot; i = pool.seg(i).next) {
        if (pool.seg(i).seq != reach) start = pool.seg(i).seq; // a hole before segment i
        reach = pool.seg(i).seq + pool.seg(i).len;
    }
    return pool.seg(slot).seq != reach ? pool.seg(slot).seq : start;
}

uint32_t OooQueue::run_end_starting_at(const OooPool &pool, uint32_t slot) const {
    for (int i = 0; i < n_recent_; ++i)
        if (recent_[i].start == pool.seg(slot).seq) return recent_[i].end;
    uint32_t end = pool.seg(slot).seq + pool.seg(slot).len;
    for (uint32_t i = pool.seg(slot).next; i != OooPool::kNil && pool.seg(i).seq == end;
         i = pool.seg(i).next)
        end += pool.seg(i).len;
    return end;
}

SeqRange OooQueue::run_holding(const OooPool &pool, uint32_t seq) const {
    for (int i = 0; i < n_recent_; ++i)
        if (at_or_before(recent_[i].start, seq) && before(seq, recent_[i].end)) return recent_[i];
    SeqRange run{seq, seq};
    for (uint32_t i = head_; i != OooPool::kNil; i = pool.seg(i).next) {
        const OooSeg &s = pool.seg(i);
        if (s.seq != run.end) {
            if (before(seq, run.end) && !before(seq, run.start)) break; // the run holding seq ended
            run.start = s.seq;
        }
        run.end = s.seq + s.len;
    }
    return run;
}

void OooQueue::note_run(SeqRange run) {
    if (!before(run.start, run.end)) return;
    // Keep the runs run neither covers nor touches (an insert that joins two
    // runs replaces both), in their order, after it.
    int n = 0;
    for (int i = 0; i < n_recent_; ++i) {
        const SeqRange r = recent_[i];
        const bool joined = at_or_before(r.start, run.end) && at_or_before(run.start, r.end);
        if (!joined) recent_[n++] = r;
    }
    if (n == kRecentRuns) --n; // the least recently reported one goes
    for (int i = n; i > 0; --i) recent_[i] = recent_[i - 1];
    recent_[0] = run;
    n_recent_ = n + 1;
}

void OooQueue::forget_delivered(uint32_t rcv_nxt) {
    int n = 0;
    for (int i = 0; i < n_recent_; ++i)
        if (before(rcv_nxt, recent_[i].start)) recent_[n++] = recent_[i];
    n_recent_ = n;
}

} // namespace mars
