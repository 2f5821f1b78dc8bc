// tcp/conn_table.h: the stack's connection blocks (tcp::Conn), by index.
//
// init() reserves room for `capacity` blocks (anonymous pages from mmap)
// and touches none of it: a block is constructed the first time it is
// handed out, so the blocks made are always the prefix [0, made()). A stack
// sized for 65,536 sockets (1,856 bytes each: 116 MiB) therefore starts at
// once and its memory is faulted in only as connections come; constructing
// every block up front took seconds on a busy core, and held an engine's
// start (and a restart's pause of the host's traffic on a shared port) for
// that long.
//
// Freed blocks are handed out again last-in first-out (warm in cache) before
// a new one is made. Indices are stable for a block's life and are what the
// socket ids carry; `gen` (tcp::Conn) tells an old id from a reused block.
//
// Not thread-safe: one stack, one thread. No allocation after init().
#pragma once

#include "tcp/conn.h"

#include <cstdint>
#include <cstddef>
#include <new>
#include <vector>

#include <sys/mman.h>

namespace mars {
namespace tcp {

static_assert(alignof(Conn) <= 4096, "blocks are placed in whole pages");

class ConnTable {
  public:
    ConnTable() = default;
    ConnTable(const ConnTable &) = delete;
    ConnTable &operator=(const ConnTable &) = delete;
    ~ConnTable()
    {
        reset();
        if (conns_) munmap(conns_, bytes_);
    }

    // Reserves room for `capacity` blocks (at most once). False: no memory.
    bool init(uint32_t capacity)
    {
        if (conns_ || capacity == 0) return false;
        // Anonymous pages straight from the kernel: zero, and not resident
        // until written (malloc could fill them: MALLOC_PERTURB_).
        const size_t bytes = size_t(capacity) * sizeof(Conn);
        void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return false;
        conns_ = static_cast<Conn *>(m);
        bytes_ = bytes;
        free_.reserve(capacity);
        capacity_ = capacity;
        return true;
    }

    // Destroys every block made; the table is as init() left it.
    void reset()
    {
        for (uint32_t i = made_; i-- > 0;) conns_[i].~Conn();
        made_ = 0;
        free_.clear();
    }

    // A block in its initial state (a default tcp::Conn) with `index` set,
    // `gen` kept from its last life (1 for a new block) and the flag bits in
    // `keep_flags` kept; nullptr when all `capacity` blocks are in use.
    Conn *alloc(uint32_t keep_flags)
    {
        uint32_t i, gen = 1, flags = 0;
        if (!free_.empty()) {
            i = free_.back();
            free_.pop_back();
            gen = conns_[i].gen;
            flags = conns_[i].flags & keep_flags;
            conns_[i].~Conn();
        } else if (made_ < capacity_) {
            i = made_++;
        } else {
            return nullptr;
        }
        Conn *c = new (&conns_[i]) Conn();
        c->index = i;
        c->gen = gen;
        c->flags = flags;
        return c;
    }

    // Hands block `index` back (its owner has cleaned it: not used, no
    // rings, no timers); alloc() gives it out again.
    void release(uint32_t index) { free_.push_back(index); }

    // A block made so far (index < made()).
    Conn &operator[](uint32_t index) { return conns_[index]; }
    const Conn &operator[](uint32_t index) const { return conns_[index]; }

    // The blocks made so far, in index order (used or free: check `used`).
    Conn *begin() { return conns_; }
    Conn *end() { return conns_ + made_; }
    const Conn *begin() const { return conns_; }
    const Conn *end() const { return conns_ + made_; }

    // The table's memory: never moves after init().
    Conn *data() { return conns_; }

    uint32_t made() const { return made_; }         // blocks constructed so far
    uint32_t capacity() const { return capacity_; } // blocks it can hold
    uint32_t free_listed() const { return uint32_t(free_.size()); } // made and free

  private:
    Conn *conns_ = nullptr;
    size_t bytes_ = 0;
    uint32_t capacity_ = 0;
    uint32_t made_ = 0;
    std::vector<uint32_t> free_;
};

} // namespace tcp
} // namespace mars
