// region_app.h: TEST FIXTURE (unit tests only). The application side of a
// DTI region in plain memory, for tests that drive the DTI engine by hand
// (digest_mars_test.cc, dgram_mars_test.cc): commands pushed into the queue
// pair with their stamps, events taken from it, a socket's shared state and
// rings by handle.
#pragma once

#include "dti_abi.h"

#include <dti/engine.h>

#include <cstdint>
#include <vector>

namespace region_test {

// The application side of a region in plain memory.
struct App {
    std::vector<uint8_t> mem;
    dti_region_header *hdr = nullptr;
    uint32_t tag = 0;
    explicit App(const dti::engine::Limits &l)
    {
        const uint64_t size = dti::engine::region_bytes(l);
        mem.assign(size + 64, 0);
        uint8_t *base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
        dti::engine::layout_region(base, size, l);
        hdr = reinterpret_cast<dti_region_header *>(base);
    }
    uint8_t *base() { return reinterpret_cast<uint8_t *>(hdr); }
    dti_qp_header *qp() { return reinterpret_cast<dti_qp_header *>(base() + hdr->ctx_offset); }
    dti_cmd *cmds() { return reinterpret_cast<dti_cmd *>(reinterpret_cast<uint8_t *>(qp()) + sizeof(dti_qp_header)); }
    dti_ev *evs() { return reinterpret_cast<dti_ev *>(reinterpret_cast<uint8_t *>(cmds()) + sizeof(dti_cmd) * hdr->cmdq_entries); }
    dti_sock_shared *sock(uint32_t h) { return reinterpret_cast<dti_sock_shared *>(base() + hdr->sock_offset) + (h & DTI_SLOT_MASK); }
    uint8_t *rx_ring(uint32_t h) { return base() + hdr->data_offset + hdr->data_stride * (h & DTI_SLOT_MASK); }
    uint8_t *tx_ring(uint32_t h) { return rx_ring(h) + hdr->rx_ring_size; }

    // Completions carry the command's tag (libdti maps it back to
    // user_data); returns it.
    uint32_t push(dti_cmd c)
    {
        if (c.op != DTI_OP_SEND && c.op != DTI_OP_RECV_RELEASE)
            c.tag = tag++ % hdr->cmdq_entries;
        dti_qp_header *h = qp();
        dti_cmd *slot = &cmds()[h->cmd_prod & (hdr->cmdq_entries - 1)];
        c.stamp = 0;
        *slot = c;
        __atomic_store_n(&slot->stamp, h->cmd_prod + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&h->cmd_prod, h->cmd_prod + 1, __ATOMIC_SEQ_CST);
        return c.tag;
    }
    std::vector<dti_ev> take()
    {
        std::vector<dti_ev> out;
        dti_qp_header *h = qp();
        const uint32_t prod = __atomic_load_n(&h->ev_prod, __ATOMIC_ACQUIRE);
        while (h->ev_cons != prod) {
            out.push_back(evs()[h->ev_cons & (hdr->evq_entries - 1)]);
            h->ev_cons++;
        }
        return out;
    }
};

} // namespace region_test
