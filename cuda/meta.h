/*
 * meta.h — the step's batch (engine/backend.h's be_batch) as the CUDA backend uploads it: every
 * array packed at a known offset into one int32 buffer, so that begin() makes one host→device
 * copy; the checks that keep the device from indexing outside the KV arena; and the batch shape
 * CUDA graphs replay. Host code (the planning functions are plain C, tested on the CPU by
 * tests/test_cuda_host.c).
 *
 * Callers: the backend's begin(), its CUDA graphs, the ops that index the metadata, the tests.
 */
#ifndef KVSERVE_CUDA_META_H
#define KVSERVE_CUDA_META_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "cuda/launch.h"
#include "engine/backend.h"

/* Where the arrays of one layer group's KV view live in the packed metadata (offsets in int32s;
 * sinks and sink_shift -1 when the view has none). */
typedef struct cuda_meta_kv {
    int32_t bt_stride;
    int32_t slots;                     /* [n_tokens] */
    int32_t ctx_len;                   /* [n_seqs] */
    int32_t block_table;               /* [n_seqs][bt_stride] */
    int32_t sinks, sink_shift;         /* [n_seqs] each, or -1 */
    int32_t max_ctx;                   /* largest ctx_len */
} cuda_meta_kv;

/* Where each array of a batch lives in the packed int32 metadata buffer (offsets in int32s). */
typedef struct cuda_meta_layout {
    int32_t n_tokens, n_seqs, n_logits, n_kv;
    int32_t tokens, positions;         /* [n_tokens] each */
    int32_t q_start;                   /* [n_seqs + 1] */
    int32_t logit_rows;                /* [n_logits] */
    cuda_meta_kv kv[KV_MAX_GROUPS];    /* per layer group */
    int32_t total;                     /* int32s in the buffer */
    int32_t max_ctx;                   /* largest ctx_len of any group */
} cuda_meta_layout;

/* Validates b and computes its packed layout. 0, or -EINVAL when the batch breaks the rules of
 * engine/backend.h (offsets not increasing, more new tokens than context, a logit row out of range). */
static inline int cuda_meta_plan(const be_batch *b, cuda_meta_layout *L)
{
    int n_kv = b->n_kv > 1 ? b->n_kv : 1;
    if (b->n_tokens < 0 || b->n_seqs < 0 || b->n_logits < 0 || n_kv > KV_MAX_GROUPS) return -EINVAL;
    if (b->n_seqs > 0 && (!b->q_start || b->q_start[0] != 0 || b->q_start[b->n_seqs] != b->n_tokens))
        return -EINVAL;
    for (int32_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens) return -EINVAL;
    memset(L, 0, sizeof *L);
    L->n_tokens = b->n_tokens;
    L->n_seqs = b->n_seqs;
    L->n_logits = b->n_logits;
    L->n_kv = n_kv;
    int32_t o = 0;
    L->tokens = o;      o += b->n_tokens;
    L->positions = o;   o += b->n_tokens;
    L->q_start = o;     o += b->n_seqs + 1;
    L->logit_rows = o;  o += b->n_logits;
    for (int g = 0; g < n_kv; g++) {
        const be_kv *v = &b->kv[g];
        cuda_meta_kv *k = &L->kv[g];
        if (v->bt_stride < 0) return -EINVAL;
        for (int32_t s = 0; s < b->n_seqs; s++) {
            int32_t n_new = b->q_start[s + 1] - b->q_start[s];
            if (n_new < 0 || n_new > v->ctx_len[s]) return -EINVAL;
            if (v->ctx_len[s] > k->max_ctx) k->max_ctx = v->ctx_len[s];
        }
        if (k->max_ctx > L->max_ctx) L->max_ctx = k->max_ctx;
        k->bt_stride = v->bt_stride;
        k->slots = o;       o += b->n_tokens;
        k->ctx_len = o;     o += b->n_seqs;
        k->block_table = o; o += b->n_seqs * v->bt_stride;
        k->sinks = k->sink_shift = -1;
        if (v->sinks) {
            k->sinks = o;      o += b->n_seqs;
            k->sink_shift = o; o += b->n_seqs;
        }
    }
    L->total = o;
    return 0;
}

/* Checks that every KV slot and block the batch touches lies inside the arena of its layer group
 * (n_blocks[g] blocks of block_size; slots < 0 are skipped by the store): the device would
 * otherwise write out of bounds silently. 0 or -EINVAL. */
static inline int cuda_meta_check_kv(const be_batch *b, int block_size, const int32_t *n_blocks)
{
    for (int g = 0; g < (b->n_kv > 1 ? b->n_kv : 1); g++) {
        const be_kv *v = &b->kv[g];
        int64_t n_slots = (int64_t)n_blocks[g] * block_size;
        for (int32_t i = 0; i < b->n_tokens; i++)
            if (v->slots[i] >= n_slots) return -EINVAL;
        for (int32_t s = 0; s < b->n_seqs; s++) {
            int64_t used = cuda_div_up(v->ctx_len[s], block_size);
            if (used > v->bt_stride) return -EINVAL;
            for (int64_t j = 0; j < used; j++) {
                int32_t id = v->block_table[(int64_t)s * v->bt_stride + j];
                if (id < 0 || id >= n_blocks[g]) return -EINVAL;
            }
        }
    }
    return 0;
}

static inline void cuda__copy_i32(int32_t *dst, const int32_t *src, int64_t n)
{
    if (n > 0) memcpy(dst, src, (size_t)n * sizeof *dst);
}

/* Copies the batch's arrays into buf[L->total] at the offsets of L (from cuda_meta_plan). */
static inline void cuda_meta_pack(const be_batch *b, const cuda_meta_layout *L, int32_t *buf)
{
    cuda__copy_i32(buf + L->tokens, b->tokens, b->n_tokens);
    cuda__copy_i32(buf + L->positions, b->positions, b->n_tokens);
    if (b->n_seqs > 0) cuda__copy_i32(buf + L->q_start, b->q_start, b->n_seqs + 1);
    else buf[L->q_start] = 0;
    cuda__copy_i32(buf + L->logit_rows, b->logit_rows, b->n_logits);
    for (int g = 0; g < L->n_kv; g++) {
        const be_kv *v = &b->kv[g];
        const cuda_meta_kv *k = &L->kv[g];
        cuda__copy_i32(buf + k->slots, v->slots, b->n_tokens);
        cuda__copy_i32(buf + k->ctx_len, v->ctx_len, b->n_seqs);
        cuda__copy_i32(buf + k->block_table, v->block_table, (int64_t)b->n_seqs * v->bt_stride);
        if (k->sinks >= 0) {
            cuda__copy_i32(buf + k->sinks, v->sinks, b->n_seqs);
            cuda__copy_i32(buf + k->sink_shift, v->sink_shift, b->n_seqs);
        }
    }
}

/* 1 when every sequence of the batch decodes exactly one token whose logits are wanted, row i
 * for token i: the shape CUDA graphs capture and replay. */
static inline int cuda_batch_is_pure_decode(const be_batch *b)
{
    if (b->n_tokens < 1 || b->n_tokens != b->n_seqs || b->n_logits != b->n_tokens) return 0;
    for (int32_t i = 0; i < b->n_seqs; i++)
        if (b->q_start[i] != i || b->logit_rows[i] != i) return 0;
    return b->q_start[b->n_seqs] == b->n_tokens;
}

#endif
