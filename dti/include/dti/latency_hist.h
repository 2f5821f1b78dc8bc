/* dti/include/dti/latency_hist.h: a latency histogram with log-linear buckets
 * (HdrHistogram-style), header-only, C11 and C++20, libc only.
 *
 * Values are unsigned nanoseconds. Below 16 every value has its own bucket;
 * above, each power of two [2^e, 2^(e+1)) is cut into 16 equal buckets, so a
 * bucket is at most 1/16 (6.25%) of the values it holds wide: the "resolution"
 * any figure read from it has. The last power of two kept is 2^35 (34 s);
 * larger values land in one overflow bucket (counted, and `max` keeps the
 * true value).
 *
 *   bucket index of v:  v < 16 : v
 *                       else   : e = floor(log2 v) (4..35), sub = the 4 bits
 *                                below the top one; index = (e - 3) * 16 + sub
 *   16 + 32 * 16 = 528 buckets, then the overflow bucket (index 528).
 *
 * Recording is O(1) and allocates nothing: one count-leading-zeros, a shift,
 * and four stores. One writer per histogram (an engine thread, or one thread
 * of a program); readers (eta-stat, in another process, through shared
 * memory) read it any time without stopping the writer: every word is
 * written and read whole (relaxed atomics), counts only grow, so a copy taken
 * during a record is off by at most that one sample. Readers therefore take
 * the number of samples from the buckets they copied (eta_hist_count), never
 * from a separate counter.
 *
 * Merging (engines into one view, intervals into one) adds bucket by bucket;
 * percentiles walk the buckets and answer the highest value of the bucket
 * holding the wanted rank (never below the truth, at most one bucket above it),
 * capped by `max`.
 */
#ifndef DTI_LATENCY_HIST_H
#define DTI_LATENCY_HIST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ETA_HIST_SUB_BITS 4u
#define ETA_HIST_SUB (1u << ETA_HIST_SUB_BITS)   /* 16 buckets per power of two */
#define ETA_HIST_TOP_EXP 35u                     /* last power of two with buckets: 2^35 ns */
#define ETA_HIST_LINEAR ETA_HIST_SUB             /* values 0..15: one bucket each */
#define ETA_HIST_OVERFLOW (ETA_HIST_LINEAR + (ETA_HIST_TOP_EXP - ETA_HIST_SUB_BITS + 1u) * ETA_HIST_SUB) /* 528 */
#define ETA_HIST_BUCKETS (ETA_HIST_OVERFLOW + 1u) /* 529 */

/* Plain data, 8-byte words only: it can sit in a shared region and be
 * copied word by word. */
struct eta_hist {
    uint64_t sum;                        /* of all values recorded (ns) */
    uint64_t max;                        /* largest value recorded (ns) */
    uint64_t buckets[ETA_HIST_BUCKETS];  /* counts */
    uint64_t pad_;                       /* the size a multiple of 16 */
};

static inline uint32_t eta_hist_index(uint64_t v)
{
    if (v < ETA_HIST_LINEAR)
        return (uint32_t)v;
    const uint32_t e = 63u - (uint32_t)__builtin_clzll(v);
    if (e > ETA_HIST_TOP_EXP)
        return ETA_HIST_OVERFLOW;
    const uint32_t sub = (uint32_t)(v >> (e - ETA_HIST_SUB_BITS)) & (ETA_HIST_SUB - 1u);
    return (e - ETA_HIST_SUB_BITS + 1u) * ETA_HIST_SUB + sub;
}

/* The smallest value bucket i holds. The overflow bucket: 2^36. */
static inline uint64_t eta_hist_lowest(uint32_t i)
{
    if (i < ETA_HIST_LINEAR)
        return i;
    const uint32_t e = i / ETA_HIST_SUB + ETA_HIST_SUB_BITS - 1u;
    const uint64_t sub = i % ETA_HIST_SUB;
    return (ETA_HIST_SUB + sub) << (e - ETA_HIST_SUB_BITS);
}

/* The largest value bucket i holds (the overflow bucket: UINT64_MAX). */
static inline uint64_t eta_hist_highest(uint32_t i)
{
    if (i >= ETA_HIST_OVERFLOW)
        return UINT64_MAX;
    return eta_hist_lowest(i + 1u) - 1u;
}

/* One writer only. */
static inline void eta_hist_record(struct eta_hist *h, uint64_t v)
{
    uint64_t *b = &h->buckets[eta_hist_index(v)];
    __atomic_store_n(b, __atomic_load_n(b, __ATOMIC_RELAXED) + 1u, __ATOMIC_RELAXED);
    __atomic_store_n(&h->sum, __atomic_load_n(&h->sum, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
    if (v > __atomic_load_n(&h->max, __ATOMIC_RELAXED))
        __atomic_store_n(&h->max, v, __ATOMIC_RELAXED);
}

/* A copy of a histogram another thread or process may be writing. */
static inline void eta_hist_copy(struct eta_hist *dst, const struct eta_hist *src)
{
    const uint64_t *s = (const uint64_t *)src;
    uint64_t *d = (uint64_t *)dst;
    for (uint32_t i = 0; i < sizeof(struct eta_hist) / 8u; i++)
        d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

static inline void eta_hist_merge(struct eta_hist *into, const struct eta_hist *from)
{
    into->sum += from->sum;
    if (from->max > into->max)
        into->max = from->max;
    for (uint32_t i = 0; i < ETA_HIST_BUCKETS; i++)
        into->buckets[i] += from->buckets[i];
}

static inline uint64_t eta_hist_count(const struct eta_hist *h)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < ETA_HIST_BUCKETS; i++)
        n += h->buckets[i];
    return n;
}

/* Values counted in buckets wholly at or below `v` (Prometheus's le). */
static inline uint64_t eta_hist_count_upto(const struct eta_hist *h, uint64_t v)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < ETA_HIST_BUCKETS && eta_hist_highest(i) <= v; i++)
        n += h->buckets[i];
    return n;
}

/* The value at quantile q (0..1; p99.9 is 0.999): the highest value of the
 * bucket holding the sample of rank ceil(q * count) (at least 1), capped by
 * max. 0 for an empty histogram. */
static inline uint64_t eta_hist_quantile(const struct eta_hist *h, double q)
{
    const uint64_t count = eta_hist_count(h);
    if (count == 0)
        return 0;
    if (q < 0)
        q = 0;
    if (q > 1)
        q = 1;
    double r = q * (double)count;
    uint64_t rank = (uint64_t)r;
    if ((double)rank < r)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < ETA_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            const uint64_t hi = eta_hist_highest(i);
            return hi < h->max ? hi : h->max;
        }
    }
    return h->max;
}

#ifdef __cplusplus
}
#endif

#endif /* DTI_LATENCY_HIST_H */
