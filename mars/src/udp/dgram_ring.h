// udp/dgram_ring.h: a datagram ring (the receive ring of a UDP socket).
// Records as mars::UdpRecord describes: a header, an IPv6 datagram's
// addresses (kUdpRecIp6: a UdpRecord6), the payload, padding to
// kUdpRecordAlign; never wrapping (a pad record fills the end instead).
// Free-running positions: head (the reader's), tail (the writer's).
#pragma once

#include <mars/stack.h>

#include <cstdint>
#include <cstring>

namespace mars::udp {

struct DgramRing {
    uint8_t *mem = nullptr;
    uint32_t size = 0;    // a power of two, a multiple of kUdpRecordAlign
    uint32_t head = 0, tail = 0;
    uint32_t datagrams = 0; // records with a datagram between head and tail

    // A record's bytes: udp_record_size (mars/stack.h), the one rule the
    // writer, sane() and the application's readers share.
    static uint32_t record_size(uint32_t payload, uint32_t flags) { return udp_record_size(payload, flags); }
    uint32_t used() const { return tail - head; }
    UdpRecord *at(uint32_t pos) const { return reinterpret_cast<UdpRecord *>(mem + (pos & (size - 1))); }

    // Room for a record of `need` bytes (whole, not wrapping) at the tail:
    // where it goes, with a pad record written before it when the end of the
    // ring is too near. nullptr: full (nothing written).
    UdpRecord *reserve(uint32_t need)
    {
        const uint32_t off = tail & (size - 1);
        const uint32_t to_end = size - off;
        const uint32_t pad = need > to_end ? to_end : 0;
        if (need > size || used() + pad + need > size) return nullptr;
        if (pad) {
            UdpRecord *p = at(tail);
            *p = UdpRecord{pad, 0, 0, 0, 0, 0, kUdpRecPad, 0};
            tail += pad;
        }
        return at(tail);
    }
    // The record reserve() gave is written: it becomes readable.
    void commit(uint32_t need)
    {
        tail += need;
        datagrams++;
    }
    // The oldest datagram record (pad records before it are consumed), or nullptr.
    // A record whose size field is not one this ring wrote (the memory is
    // the application's: it may scribble on it) ends the ring's contents:
    // everything in it is dropped, nothing reads past it.
    const UdpRecord *front()
    {
        while (head != tail) {
            const UdpRecord *r = at(head);
            if (!sane(r)) {
                head = tail;
                datagrams = 0;
                return nullptr;
            }
            if (!(r->flags & kUdpRecPad)) return r;
            head += r->size;
        }
        return nullptr;
    }
    // The record at head is one this ring could have written: its size
    // aligned, within what is readable and before the ring's end, and (but
    // for a pad) the size its length and flags give. len is checked against
    // size first so record_size() cannot wrap around 2^32 (a huge len would
    // otherwise come out as a small size and a reader would copy past it).
    bool sane(const UdpRecord *r) const
    {
        const uint32_t off = head & (size - 1);
        return r->size >= kUdpRecordAlign && !(r->size & (kUdpRecordAlign - 1)) && r->size <= used() &&
               r->size <= size - off &&
               ((r->flags & kUdpRecPad) || (r->len < r->size && record_size(r->len, r->flags) == r->size));
    }
    // Where a datagram record's payload starts (after the addresses of an
    // IPv6 one); r passed sane().
    static const uint8_t *payload(const UdpRecord *r)
    {
        return reinterpret_cast<const uint8_t *>(r + 1) + ((r->flags & kUdpRecIp6) ? sizeof(UdpRecord6) : 0);
    }
    void pop(const UdpRecord *r)
    {
        head += r->size;
        datagrams--;
    }
};

} // namespace mars::udp
