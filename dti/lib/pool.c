/* libdti layer 1, link (link.h): the region buffer pool of one engine's
 * region (dti_buf_alloc, dti_buf_alloc_for, dti_buf_free) and the offsets
 * commands carry for its buffers. */
#include "link.h"

#include <errno.h>

/* ---- region buffer pool ------------------------------------------------------------- */

static bool block_used(const struct dti_attachment *d, uint32_t i) { return d->pool_bitmap[i / 64] >> (i % 64) & 1; }

static void set_blocks(struct dti_attachment *d, uint32_t first, uint32_t n, bool used)
{
    for (uint32_t i = first; i < first + n; i++) {
        if (used)
            d->pool_bitmap[i / 64] |= 1ull << (i % 64);
        else
            d->pool_bitmap[i / 64] &= ~(1ull << (i % 64));
    }
}

/* Offsets name the engine whose region holds the buffer in their top bits
 * (engine 0: the plain offset); commands carry the plain offset. */
#define BUF_ENGINE_SHIFT 56

static int buf_alloc(struct dti_attachment *d, uint32_t len, struct dti_buf *out)
{
    if (len == 0 || !out)
        return -EINVAL;
    uint32_t need = (len + DTI_POOL_BLOCK - 1) / DTI_POOL_BLOCK;
    pthread_mutex_lock(&d->lock);
    uint32_t run = 0;
    for (uint32_t i = 0; i < d->pool_blocks; i++) {
        run = block_used(d, i) ? 0 : run + 1;
        if (run == need) {
            uint32_t first = i + 1 - need;
            set_blocks(d, first, need, true);
            pthread_mutex_unlock(&d->lock);
            uint64_t off = d->hdr->pool_offset + (uint64_t)first * DTI_POOL_BLOCK;
            *out = (struct dti_buf){d->base + off, off | (uint64_t)d->engine << BUF_ENGINE_SHIFT,
                                    need * DTI_POOL_BLOCK};
            return 0;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return -ENOMEM;
}

int dti_buf_alloc(dti_t *d, uint32_t len, struct dti_buf *out) { return buf_alloc(d, len, out); }

int dti_buf_alloc_for(dti_t *d, dti_sock_t s, uint32_t len, struct dti_buf *out)
{
    uint32_t e = dti__engine_of(s);
    if (s == DTI_SOCK_INVALID || e >= (d->n_links ? d->n_links : 1))
        return -DTI_E_BAD_HANDLE;
    return buf_alloc(d->links[e], len, out);
}

uint64_t dti__buf_offset(const struct dti_attachment *link, const struct dti_buf *b)
{
    if (b->offset >> BUF_ENGINE_SHIFT != link->engine)
        return UINT64_MAX;
    return b->offset & ((1ull << BUF_ENGINE_SHIFT) - 1);
}

void dti_buf_free(dti_t *d, const struct dti_buf *b)
{
    if (!b)
        return;
    uint64_t e = b->offset >> BUF_ENGINE_SHIFT;
    if (e >= (d->n_links ? d->n_links : 1))
        return;
    d = d->links[e];
    uint64_t off = b->offset & ((1ull << BUF_ENGINE_SHIFT) - 1);
    if (off < d->hdr->pool_offset)
        return;
    uint64_t first = (off - d->hdr->pool_offset) / DTI_POOL_BLOCK;
    uint64_t n = (b->len + DTI_POOL_BLOCK - 1) / DTI_POOL_BLOCK;
    if (first + n > d->pool_blocks)
        return;
    pthread_mutex_lock(&d->lock);
    set_blocks(d, (uint32_t)first, (uint32_t)n, false);
    pthread_mutex_unlock(&d->lock);
}
