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
#include <string.h>

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

/* The arguments of the attention kernels (cuda/attn_kernels.h, attn_mma_kernels.h,
 * attn_decode_kernels.h): one layer of the step. q, q_sink and out hold the backend's activation
 * type, q_type (a kernel is instantiated per type). */
typedef struct cuda__attn_args {
    const void *q;           /* [n_tokens][n_heads][head_dim] */
    void *out;               /* [n_tokens][n_heads][head_dim] */
    int q_type;              /* DT_F32, DT_BF16 or DT_F16: the element type of q, q_sink and out */
    float *part;             /* reference kernel: [n_tokens][n_heads][splits][head_dim + 2] when
                                splits > 1 */
    const int32_t *q_start, *ctx_len, *block_table, *items;
    int bt_stride, block_size, n_kv_heads, n_heads, head_dim, gsize, splits;
    int32_t part_keys;
    float scale;             /* multiplies q·k */
    float softcap;           /* > 0: scores soft-capped at this (be_attn) */
    int32_t window;          /* > 0: sliding window (be_attn) */
    int32_t tile_elems;      /* elements of one (block, kv head) tile (cuda_kv_tile_elems) */
    const int32_t *sinks;    /* [n_seqs] leading entries met by q_sink, or NULL (be_kv) */
    const void *q_sink;      /* with sinks: the queries that meet them, shaped like q */
    /* The tensor-core kernels' launch (cuda_attn_tc): items is the launch's own list */
    int32_t n_items;         /* items of the launch (grid.z) */
    float *tc_part;          /* [n_items][n_kv_heads][splits][rows][head_dim + 2] split partials:
                                per row its unnormalised output, running max and sum */
    int32_t *sem;            /* [n_items][n_kv_heads] partitions finished: 0 between launches (the
                                last partition of an (item, kv head) merges them and resets it) */
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

/* ---- the tensor-core kernels ------------------------------------------------------------- */

/* The tensor-core kernels (cuda/attn_mma_kernels.h, attn_decode_kernels.h) exist for these head
 * dims (one template instance each; the reference kernel serves the others). */
static inline CUDA_HD int cuda_attn_tc_head_dim_ok(int d)
{
    return d == 64 || d == 96 || d == 128 || d == 256;
}

/* Both kernels run 4 warps. The prefill kernel's block owns BR query rows (two m16 tiles per warp
 * up to head dim 128, one beyond, so the O accumulators fit the registers) and streams K/V tiles
 * of BC keys, double-buffered: 64 keys at head dim 64, 48 at 96 and 128 (whose 96 or 128 O and
 * 48 S accumulators per thread then fit sm_90's 255 registers without spilling; 64 keys
 * spilled), 32 at 256. The decode kernel's block owns up to 16 query rows (one m16 tile, every warp the same
 * rows) and streams stages of 64 keys (16 per warp), DEC_STAGES deep. */
#define CUDA_ATTN_TC_THREADS 128
#define CUDA_ATTN_PF_BR(d) ((d) <= 128 ? 128 : 64)
#define CUDA_ATTN_PF_BC(d) ((d) <= 64 ? 64 : (d) <= 128 ? 48 : 32)
#define CUDA_ATTN_DEC_ROWS 16
#define CUDA_ATTN_DEC_BC 64
#define CUDA_ATTN_DEC_STAGES(d) ((d) <= 128 ? 3 : 2)

/* Shared-memory bytes of a prefill block: the Q tile (and the sink queries' with sinks) as 16-bit
 * rows of head_dim + 8, then two K and two V tiles of BC such rows; a quantised cache instead
 * stages its codes (rows of head_dim + 16 bytes) and scales twice and keeps one converted f16
 * K and V tile. */
static inline size_t cuda_attn_pf_smem(int head_dim, int kv_quant, int sinks)
{
    size_t br = CUDA_ATTN_PF_BR(head_dim), bc = CUDA_ATTN_PF_BC(head_dim), row = 2 * (size_t)(head_dim + 8);
    size_t q = br * row * (sinks ? 2 : 1);
    if (!kv_quant) return q + 4 * bc * row;
    return q + 2 * (2 * bc * (size_t)(head_dim + 16) + 2 * bc * 2) + 2 * bc * row;
}

/* Shared-memory bytes of a decode block: the 16 query rows in fragment order (twice with sinks),
 * then DEC_STAGES stages of 64 K and 64 V rows of head_dim × es + 16 bytes (and their scales for
 * a quantised cache), reused at the end for the four warps' states (4 × 16 × (head_dim + 2)
 * floats). es: bytes per cache element (2, or 1 for int8 / e4m3). */
static inline size_t cuda_attn_dec_smem(int head_dim, int es, int sinks)
{
    size_t q = (size_t)head_dim * 32 * (sinks ? 2 : 1);
    size_t stage = 2 * (size_t)CUDA_ATTN_DEC_BC * ((size_t)head_dim * es + 16) + (es == 1 ? 4 * CUDA_ATTN_DEC_BC : 0);
    size_t st = (size_t)CUDA_ATTN_DEC_STAGES(head_dim) * stage, merge = 4 * 16 * ((size_t)head_dim + 2) * 4;
    return q + (st > merge ? st : merge);
}

/* Why the tensor-core kernels cannot serve a KV geometry (head_dim, kv_dtype of enum kv_dtype,
 * block_size, tile_bytes: one (block, kv head) tile with its scales) on a GPU that gives a block
 * smem_optin bytes of shared memory, or NULL when they can. An f32 cache asks for f32 products:
 * the reference kernel keeps them. */
static inline const char *cuda_attn_tc_refusal(int head_dim, int kv_dtype, int block_size, size_t tile_bytes,
                                               size_t smem_optin)
{
    if (!cuda_attn_tc_head_dim_ok(head_dim)) return "its head dim has no tensor-core kernel (64, 96, 128, 256)";
    if (kv_dtype == KV_F32) return "an f32 cache keeps f32 products";
    if (tile_bytes % 16) return "its KV tiles are not 16-byte aligned";
    int quant = kv_dtype == KV_I8 || kv_dtype == KV_FP8;
    if (quant && block_size % 2) return "a quantised cache needs an even block size";
    size_t pf = cuda_attn_pf_smem(head_dim, quant, 1), dec = cuda_attn_dec_smem(head_dim, quant ? 1 : 2, 1);
    if ((pf > dec ? pf : dec) > smem_optin) return "their tiles need more shared memory than this GPU gives a block";
    return NULL;
}

/* The tensor-core plan of one step: the work list is its decode items (rows ≤ 16: a sequence's
 * new tokens × the GQA group), then its prefill items (a sequence's rows cut into runs of BR),
 * each {seq, first row, rows} with row = new token × gsize + head within the group; a kind's
 * items share one split factor. */
typedef struct cuda_attn_tc {
    int32_t n_dec, n_pre;       /* items of each kind (decode first in the list) */
    int dec_splits, pre_splits; /* split-K partitions of each kind (1: none) */
    int32_t dec_part, pre_part; /* keys per partition: a multiple of the kind's tile */
    size_t dec_floats, pre_floats; /* scratch floats of each kind's partials */
} cuda_attn_tc;

/* Split-K factor for `blocks` blocks of up to max_kv keys: as cuda_attn_splits, for blocks whose
 * partials take bytes_per_split bytes, with partitions of whole tiles. *part_keys gets the keys
 * per partition. */
static inline CUDA_HD int cuda_attn_tc_splits(int64_t blocks, int32_t max_kv, int tile, int n_sm, size_t bytes_per_split,
                                              int32_t *part_keys)
{
    int64_t s = 1;
    if (blocks > 0 && blocks < 2 * (int64_t)n_sm && max_kv > CUDA_ATTN_MIN_PART) {
        s = cuda_div_up(2 * (int64_t)n_sm, blocks);
        int64_t by_len = max_kv / CUDA_ATTN_MIN_PART;
        if (s > by_len) s = by_len;
        int64_t by_mem = bytes_per_split ? (int64_t)(CUDA_ATTN_SCRATCH_MAX / bytes_per_split) : s;
        if (s > by_mem) s = by_mem;
        if (s < 1) s = 1;
    }
    int64_t kv = max_kv > 0 ? max_kv : 1;
    int64_t part = cuda_div_up(cuda_div_up(kv, s), tile) * tile;
    s = cuda_div_up(kv, part);
    if (part_keys) *part_keys = (int32_t)part;
    return (int)s;
}

/* Writes the step's tensor-core items into items (at most 2 × (n_tokens + n_seqs) × 3 int32s when
 * gsize ≤ the prefill rows) and their plan into *p, for gsize query heads per kv head and
 * n_kv_heads kv heads of head_dim on n_sm multiprocessors. max_kv_bound > 0 sizes the partitions
 * for that many keys at least (CUDA graphs). Returns the number of items. */
static inline int32_t cuda_attn_tc_plan(const be_batch *b, int gsize, int n_kv_heads, int head_dim, int n_sm,
                                        int32_t max_kv_bound, int32_t *items, cuda_attn_tc *p)
{
    const int br = CUDA_ATTN_PF_BR(head_dim);
    int32_t n = 0, mk[2] = {0, 0};
    memset(p, 0, sizeof *p);
    for (int kind = 0; kind < 2; kind++) {
        for (int32_t s = 0; s < b->n_seqs; s++) {
            int32_t n_new = b->q_start[s + 1] - b->q_start[s], ctx = 0;
            int64_t rows = (int64_t)n_new * gsize;
            if (rows <= 0 || (rows <= CUDA_ATTN_DEC_ROWS) != (kind == 0)) continue;
            for (int g = 0; g < (b->n_kv > 1 ? b->n_kv : 1); g++) ctx = b->kv[g].ctx_len[s] > ctx ? b->kv[g].ctx_len[s] : ctx;
            for (int64_t r0 = 0; r0 < rows; r0 += br) {
                int64_t nr = rows - r0 < br ? rows - r0 : br;
                items[n * 3 + 0] = s;
                items[n * 3 + 1] = (int32_t)r0;
                items[n * 3 + 2] = (int32_t)nr;
                int32_t hi = ctx - n_new + (int32_t)((r0 + nr - 1) / gsize) + 1; /* keys its last row sees */
                if (hi > mk[kind]) mk[kind] = hi;
                n++;
            }
        }
        if (kind == 0) p->n_dec = n;
    }
    p->n_pre = n - p->n_dec;
    for (int kind = 0; kind < 2; kind++) {
        int32_t m = mk[kind] > max_kv_bound ? mk[kind] : max_kv_bound, part = 0;
        int32_t ni = kind ? p->n_pre : p->n_dec;
        size_t rows = kind ? (size_t)br : CUDA_ATTN_DEC_ROWS;
        size_t per_split = (size_t)ni * n_kv_heads * rows * (head_dim + 2) * sizeof(float);
        int tile = kind ? CUDA_ATTN_PF_BC(head_dim) : CUDA_ATTN_DEC_BC;
        int sp = cuda_attn_tc_splits((int64_t)ni * n_kv_heads, m, tile, n_sm, per_split, &part);
        if (kind) p->pre_splits = sp, p->pre_part = part, p->pre_floats = sp > 1 ? per_split / 4 * sp : 0;
        else p->dec_splits = sp, p->dec_part = part, p->dec_floats = sp > 1 ? per_split / 4 * sp : 0;
    }
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
