/* libdti layer 0, base: what every layer uses and that calls nothing of
 * libdti. The atomics' spellings, handle bits, the clock, error texts and
 * libdti's own descriptors (base.c; system calls: sys.h).
 *
 * libdti's layers, each a header that says what it offers; a layer calls only
 * the layers below it (dti/README.md has the file map):
 *   4 public calls  api.h    attach and contexts, commands, the blocking layer, the data path, exec, passing
 *   3 routing       route.h  over the PPE's engines: links, listener groups, moved sockets
 *   2 queues        queue.h  queue pairs: producer, consumer, wake protocol, socket slots, handle table
 *   1 link          link.h   one engine's attachment: control connection, region, liveness, pool
 *   0 base          base.h   (this), sys.h
 * A public call that is exactly one layer's primitive (dti_submit, dti_reap,
 * dti_getsockname, dti_buf_alloc, ...) is defined in that layer. */
#ifndef DTI_LIB_BASE_H
#define DTI_LIB_BASE_H

#include <dti/dti.h>

#include "dti_abi.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DTI_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define DTI_LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define DTI_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
/* Dekker-style handshakes (wake word, doorbell) use sequentially consistent
 * stores and loads on both sides rather than fences: same guarantee, and
 * ThreadSanitizer understands them. */
#define DTI_STORE_SC(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define DTI_LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)

/* A handle's parts (dti_abi.h: engine << 28 | gen << 20 | slot). */
static inline uint32_t dti__slot(dti_sock_t s) { return s & DTI_SLOT_MASK; }
static inline uint32_t dti__gen(dti_sock_t s) { return s >> DTI_SLOT_BITS; }
static inline uint32_t dti__engine_of(dti_sock_t s) { return s >> DTI_ENGINE_SHIFT; }

#pragma GCC visibility push(hidden)

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t dti__now_ns(void);
/* A descriptor libdti made, moved out of the program's way (above a floor
 * under RLIMIT_NOFILE, its close-on-exec flag kept); fd itself when it
 * cannot move (or is < 0). */
int dti__fd_aside(int fd);
/* fd moved to another number (above the floor when one is free there):
 * the new number, or -errno. */
int dti__fd_move_forced(int fd);

#pragma GCC visibility pop

#endif
