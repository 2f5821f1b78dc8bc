// ooo.h: out-of-order segments in the anonymous buffer pool (ETA's term).
//
// A segment that arrives beyond rcv.nxt is kept as the received frame itself
// (no copy) in a per-connection queue, sorted by sequence number with
// overlaps trimmed. The frames are counted against a stack-wide pool and a
// per-connection share, so no input can make the stack hold more than
// ooo_pool_frames frames. When the gap fills, the queued payload is copied
// into the receive ring in order and the frames are released.
//
// The queue also keeps the SACK blocks to report (RFC 2018 section 4): the
// maximal runs of queued data most recently added to, latest first, updated
// on insert and drain, so an ACK copies them instead of walking the queue.
#pragma once

#include "tcp/sack.h"

#include <mars/packet.h>

#include <cstdint>
#include <memory>

namespace mars {

struct OooSeg {
    uint32_t seq;      // sequence number of payload[0]
    uint32_t len;      // payload bytes (after trimming)
    uint8_t *payload;  // inside frame.data
    PacketRef frame;
    bool fin;          // FIN follows the last payload byte
    uint32_t next;     // pool index of the next segment in the queue, or kNil
};

// The stack-wide pool of segment slots (one slot per held frame).
class OooPool {
  public:
    static constexpr uint32_t kNil = 0xffffffffu;
    bool init(uint32_t frames); // allocates (setup only)
    // Every slot free again, as init() left them, on the same memory (the
    // frames they held were released by their queues). For Stack::reset().
    void clear();
    uint32_t capacity() const { return capacity_; }
    uint32_t used() const { return used_; }
    // As clear() leaves it: every slot free, listed in index order
    // (Stack::reset()'s check; walks the whole list).
    bool as_new() const;
    // (slot allocation is used by OooQueue; fields chosen by the implementation)

  private:
    friend class OooQueue;
    bool full() const { return used_ == capacity_; }
    uint32_t alloc(); // a free slot, or kNil
    void free(uint32_t slot);
    OooSeg &seg(uint32_t slot) { return segs_[slot]; }
    const OooSeg &seg(uint32_t slot) const { return segs_[slot]; }

    std::unique_ptr<OooSeg[]> segs_;
    uint32_t capacity_ = 0;
    uint32_t used_ = 0;
    uint32_t free_ = kNil; // free slots, linked through OooSeg::next
};

class OooQueue {
  public:
    enum class Insert : uint8_t {
        kQueued,    // the frame is now held by the queue (do not release it)
        kDuplicate, // everything in it is already queued: caller releases the frame
        kNoRoom,    // pool or this connection's share is full: caller drops and counts
    };
    // Queues [seq, seq+len) (+FIN). rcv_nxt < seq must hold. Overlaps with
    // queued data keep the older bytes; a segment whose new bytes are only a
    // part is trimmed, a queued segment fully covered by the new one is freed
    // (its frame goes to io.release()).
    Insert insert(OooPool &pool, PacketIo &io, uint32_t seq, uint8_t *payload, uint32_t len,
                  bool fin, const PacketRef &frame, uint32_t max_frames);

    // Delivers everything now contiguous with rcv_nxt: calls
    // deliver(const uint8_t *p, uint32_t n) for each in-order piece (bytes
    // before rcv_nxt are skipped), releases the frames, and returns the new
    // rcv_nxt. *fin is set when a FIN became in order.
    template <class F>
    uint32_t drain(OooPool &pool, PacketIo &io, uint32_t rcv_nxt, bool *fin, F &&deliver);

    // Frees everything (connection gone).
    void clear(OooPool &pool, PacketIo &io);

    bool empty() const { return head_ == OooPool::kNil; }
    uint32_t frames() const { return frames_; }
    // Up to max SACK blocks for our ACKs (RFC 2018 section 4): the run
    // holding the most recent arrival first, then the runs most recently
    // reported before it, at most kRecentRuns. A run that other arrivals
    // pushed out of the list was reported in earlier ACKs. (pool: unused,
    // kept for the callers' signature.)
    int sack_blocks(const OooPool &pool, SeqRange *out, int max) const;
    // True when [seq, ...) would extend the run that the next ACK reports
    // first: the ACK then still reports it in its first block.
    bool extends_latest_run(uint32_t seq) const { return n_recent_ > 0 && recent_[0].end == seq; }

    // The most SACK blocks an ACK carries (4 without timestamps).
    static constexpr int kRecentRuns = 4;

  private:
    // Collects frames for io.release() in bursts.
    struct ReleaseBatch {
        static constexpr uint16_t kMax = 32;
        PacketRef frames[kMax];
        uint16_t n = 0;
        void add(PacketIo &io, const PacketRef &f) {
            if (n == kMax) flush(io);
            frames[n++] = f;
        }
        void flush(PacketIo &io) {
            if (n > 0) io.release(frames, n);
            n = 0;
        }
    };
    static bool seq_before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
    // Unlinks the first segment, frees its slot and returns its frame.
    PacketRef pop_head(OooPool &pool);
    Insert insert_fin_only(OooPool &pool, uint32_t seq, const PacketRef &frame,
                           uint32_t max_frames);
    bool attach_fin(OooPool &pool, uint32_t fin_seq);
    bool has_room(const OooPool &pool, uint32_t freed, uint32_t max_frames) const;
    void link_new(OooPool &pool, uint32_t slot, uint32_t prev, uint32_t next);
    // The maximal run of queued data that ends with segment slot / starts
    // with segment slot: from the recent runs when listed there, else by a
    // walk of the queue.
    uint32_t run_start_ending_at(const OooPool &pool, uint32_t slot) const;
    uint32_t run_end_starting_at(const OooPool &pool, uint32_t slot) const;
    // The maximal run holding seq (queued data), by a walk from the head.
    SeqRange run_holding(const OooPool &pool, uint32_t seq) const;
    // Puts run first among the recent runs, dropping the ones it covers.
    void note_run(SeqRange run);
    // Drops the recent runs that drain() delivered (at or below rcv_nxt).
    void forget_delivered(uint32_t rcv_nxt);

    uint32_t head_ = OooPool::kNil;
    uint32_t tail_ = OooPool::kNil; // last segment: after a loss, arrivals append here in O(1)
    uint32_t frames_ = 0;
    // Maximal runs of queued data, the one most recently added to first
    // (each exactly as queued now: an insert that joins runs replaces them).
    SeqRange recent_[kRecentRuns];
    int n_recent_ = 0;
};

template <class F>
uint32_t OooQueue::drain(OooPool &pool, PacketIo &io, uint32_t rcv_nxt, bool *fin, F &&deliver) {
    *fin = false;
    ReleaseBatch done;
    while (head_ != OooPool::kNil) {
        const OooSeg &s = pool.seg(head_);
        if (seq_before(rcv_nxt, s.seq)) break; // still a gap before it
        uint32_t end = s.seq + s.len;
        if (seq_before(rcv_nxt, end)) {
            uint32_t skip = rcv_nxt - s.seq;
            deliver(static_cast<const uint8_t *>(s.payload + skip), s.len - skip);
            rcv_nxt = end;
        }
        bool fin_in_order = s.fin && end == rcv_nxt;
        done.add(io, pop_head(pool));
        if (fin_in_order) {
            *fin = true; // nothing after a FIN can be in order
            break;
        }
    }
    done.flush(io);
    forget_delivered(rcv_nxt);
    return rcv_nxt;
}

} // namespace mars
