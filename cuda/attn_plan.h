/*
 * attn_plan.h — the arithmetic around the CUDA attention kernels that host and device share
 * (CUDA_HD, launch.h): the kernel's block shape and arguments, the work list of a step (items
 * of new tokens of one sequence), the split-K factor for long contexts, and the online-softmax
 * merge of split partials that the reduction kernel runs. Tested on the CPU by
 * tests/test_cuda_host.c.
 *
 * Callers: the attention launcher and kernels (cuda/attn.cu, cuda/attn_kernels.h), the
 * emulation (cuda/check/attn_emu.cc) and the tests.
 */
#ifndef KVSERVE_CUDA_ATTN_PLAN_H
#define KVSERVE_CUDA_ATTN_PLAN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/launch.h"
#include "engine/backend.h"

/* Threads per block of the attention kernel (4 warps) and keys per KV tile (one per lane). */
#define CUDA_ATTN_THREADS 128
#define CUDA_ATTN_TK 32
/* Target query rows (token × head pairs) per attention block. */
#define CUDA_ATTN_ROWS 32
/* Fewest keys a split-K partition covers: shorter partitions cost more to merge than they save. */
#define CUDA_ATTN_MIN_PART 256
/* Cap on the split-K partial-results scratch (bytes). */
#define CUDA_ATTN_SCRATCH_MAX ((size_t)64 << 20)

/* ---- launch geometry --------------------------------------------------------------------- */

/* New tokens of one sequence per attention block: the block covers a kv head's whole query-head
 * group (gsize heads) for each of its tokens, so rows = tokens × gsize ≈ CUDA_ATTN_ROWS. */
static inline CUDA_HD int cuda_attn_tile_tokens(int gsize)
{
    int t = CUDA_ATTN_ROWS / gsize;
    return t < 1 ? 1 : t;
}

/* Split-K factor of the attention launch. Long contexts with few (item, kv head) blocks leave most
 * multiprocessors idle, so the KV range is cut into partitions (multiples of CUDA_ATTN_TK keys, at
 * least CUDA_ATTN_MIN_PART) that run in parallel and are merged by a reduction kernel. Batches that
 * already fill the GPU (≥ 2 blocks per SM) are not split. The partial results
 * (n_tokens × n_heads × splits × (head_dim + 2) floats) stay under CUDA_ATTN_SCRATCH_MAX.
 * Returns ≥ 1; *part_keys gets the keys per partition. */
static inline CUDA_HD int cuda_attn_splits(int n_items, int n_kv_heads, int32_t max_kv, int n_sm,
                                           int n_tokens, int n_heads, int head_dim, int32_t *part_keys)
{
    int64_t blocks = (int64_t)n_items * n_kv_heads;
    int64_t s = 1;
    if (blocks > 0 && blocks < 2 * (int64_t)n_sm && max_kv > CUDA_ATTN_MIN_PART) {
        s = cuda_div_up(2 * (int64_t)n_sm, blocks);
        int64_t by_len = max_kv / CUDA_ATTN_MIN_PART; /* ≥ 1 here; keeps part ≥ the minimum */
        if (s > by_len) s = by_len;
        size_t per_split = (size_t)n_tokens * (size_t)n_heads * (size_t)(head_dim + 2) * sizeof(float);
        int64_t by_mem = per_split ? (int64_t)(CUDA_ATTN_SCRATCH_MAX / per_split) : s;
        if (s > by_mem) s = by_mem;
        if (s < 1) s = 1;
    }
    int64_t part = cuda_div_up(cuda_div_up(max_kv > 0 ? max_kv : 1, s), CUDA_ATTN_TK) * CUDA_ATTN_TK;
    /* Rounding the partition up may leave trailing splits empty: drop them. */
    s = cuda_div_up(max_kv > 0 ? max_kv : 1, part);
    if (part_keys) *part_keys = (int32_t)part;
    return (int)s;
}

/* Threads of the split-K reduction block (one per head dimension, whole warps, at most 128). */
static inline CUDA_HD int cuda_attn_reduce_threads(int head_dim)
{
    return head_dim < 128 ? 32 * (int)cuda_div_up(head_dim, 32) : 128;
}

/* Row stride (floats) of the K tile in shared memory: padded so that lanes reading different
 * keys hit different banks; by 4 when head_dim allows 16-byte accesses (then the stride in
 * 16-byte units is odd whenever head_dim % 8 == 0), else by 1. */
static inline CUDA_HD int cuda__attn_kpad(int head_dim)
{
    return head_dim % 4 == 0 ? head_dim + 4 : head_dim + 1;
}

/* Shared-memory bytes for a block of `rows` query rows. */
static inline size_t cuda__attn_smem(int rows, int head_dim)
{
    const int TK = CUDA_ATTN_TK;
    return ((size_t)TK * (cuda__attn_kpad(head_dim) + head_dim) + (size_t)rows * (2 * head_dim + TK + 3)) *
           sizeof(float);
}

/* ---- the kernel's arguments ------------------------------------------------------------- */

/* The arguments of the attention kernel (cuda/attn_kernels.h): one layer of the step. */
typedef struct cuda__attn_args {
    const void *q;           /* [n_tokens][n_heads][head_dim], activations (the backend's act_type) */
    void *out;               /* [n_tokens][n_heads][head_dim], activations like q */
    float *part;             /* [n_tokens][n_heads][splits][head_dim + 2] when splits > 1 */
    const int32_t *q_start, *ctx_len, *block_table, *items;
    int bt_stride, block_size, n_kv_heads, n_heads, head_dim, gsize, splits;
    int32_t part_keys;
    float scale;             /* multiplies q·k */
    float softcap;           /* > 0: scores soft-capped at this (be_attn) */
    int32_t window;          /* > 0: sliding window (be_attn) */
    int32_t tile_elems;      /* elements of one (block, kv head) tile (cuda_kv_tile_elems) */
    const int32_t *sinks;    /* [n_seqs] leading entries met by q_sink, or NULL (be_kv) */
    const void *q_sink;      /* with sinks: the queries that meet them, shaped and typed like q */
} cuda__attn_args;

/* ---- attention work list ----------------------------------------------------------------- */

/* One attention item: tokens t0 .. t0 + n - 1 (counted within sequence seq) of one sequence,
 * all query heads of one kv head group. Stored as 3 int32 {seq, t0, n}. */
#define CUDA_ATTN_ITEM_INTS 3

/* Number of items of the batch for tiles of tile_tokens tokens (a decode token is one item). */
static inline int32_t cuda_attn_count_items(const be_batch *b, int tile_tokens)
{
    int64_t n = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) n += cuda_div_up(b->q_start[s + 1] - b->q_start[s], tile_tokens);
    return (int32_t)n;
}

/* Writes the items into items[count * 3] and returns their number; *max_kv gets the largest
 * number of KV entries any item reads in any layer group (its last token's causal limit + 1),
 * which sizes the split-K partitions every group's attention shares. */
static inline int32_t cuda_attn_plan(const be_batch *b, int tile_tokens, int32_t *items, int32_t *max_kv)
{
    int32_t n = 0, mk = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t n_new = b->q_start[s + 1] - b->q_start[s], ctx = 0;
        for (int g = 0; g < (b->n_kv > 1 ? b->n_kv : 1); g++) ctx = b->kv[g].ctx_len[s] > ctx ? b->kv[g].ctx_len[s] : ctx;
        int32_t base = ctx - n_new;
        for (int32_t t0 = 0; t0 < n_new; t0 += tile_tokens) {
            int32_t nt = n_new - t0 < tile_tokens ? n_new - t0 : tile_tokens;
            items[n * 3 + 0] = s;
            items[n * 3 + 1] = t0;
            items[n * 3 + 2] = nt;
            if (base + t0 + nt > mk) mk = base + t0 + nt;
            n++;
        }
    }
    if (max_kv) *max_kv = mk;
    return n;
}

/* ---- online softmax ---------------------------------------------------------------------- */

/* Two partial softmax states over disjoint key sets: (m_a, l_a, o_a) and (m_b, l_b, o_b), with
 * m the running max score, l = Σ exp(s − m) and o = Σ exp(s − m) v. Their union is
 *   m = max(m_a, m_b), l = l_a·ca + l_b·cb, o = o_a·ca + o_b·cb
 * with the factors ca = exp(m_a − m), cb = exp(m_b − m) written to *ca, *cb. An empty state has
 * m = −inf and l = 0; two empty states merge to an empty one (factors 0). Returns m, updates *l_a. */
static inline CUDA_HD float cuda_softmax_merge(float m_a, float *l_a, float m_b, float l_b, float *ca, float *cb)
{
    float m = m_a > m_b ? m_a : m_b;
    if (m == -INFINITY) {
        *ca = 0.0f;
        *cb = 0.0f;
        *l_a = 0.0f;
        return m;
    }
    *ca = m_a == -INFINITY ? 0.0f : expf(m_a - m);
    *cb = m_b == -INFINITY ? 0.0f : expf(m_b - m);
    *l_a = *l_a * *ca + l_b * *cb;
    return m;
}

#endif
