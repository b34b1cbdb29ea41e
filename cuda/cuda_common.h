/*
 * cuda_common.h — the pure arithmetic of the CUDA backend, shared by host and device code.
 *
 * Everything here is a static inline function marked CUDA_HD (__host__ __device__ under nvcc,
 * nothing under a C compiler), so the same definitions run in the kernels and in the CPU unit
 * tests (tests/test_cuda_host.c), which compare them with the CPU reference on every build,
 * whether or not CUDA is built. Nothing here touches the CUDA runtime.
 *
 *   launch geometry      cuda_div_up, cuda_grid_1d, cuda_attn_tile_tokens, cuda_attn_splits,
 *                        cuda_attn_reduce_threads, cuda_batch_is_pure_decode (CUDA graphs)
 *   KV block layout      cuda_kv_index: [n_layers][2 (K,V)][n_blocks][n_kv_heads][block_size][head_dim]
 *                        (+ the f16 scales of each tile for int8 / fp8: cuda_kv_scale_index)
 *   batch metadata       cuda_meta_plan / cuda_meta_pack: one int32 buffer, one host→device copy
 *   attention work list  cuda_attn_plan: (sequence, first new token, n tokens) items
 *   online softmax       cuda_softmax_merge: combine two partial (max, sum) states
 *   RoPE                 cuda_rope_pair (the frequencies: be_rope_freq in engine/backend.h)
 *   scalar formats       f16 / bf16 bits ⇄ f32, Q8_0 element values
 *
 * Callers: the cuda/ .cu files (device and host), tests/test_cuda_host.c.
 */
#ifndef KVSERVE_CUDA_COMMON_H
#define KVSERVE_CUDA_COMMON_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/backend.h"

#ifdef __CUDACC__
#define CUDA_HD __host__ __device__
#else
#define CUDA_HD
#endif

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

static inline CUDA_HD int64_t cuda_div_up(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Blocks for a grid-stride loop over n elements with `threads` per block, at most max_blocks
 * (and at least 1, so a launch over zero elements is still valid and does nothing). */
static inline CUDA_HD unsigned cuda_grid_1d(int64_t n, int threads, unsigned max_blocks)
{
    int64_t b = cuda_div_up(n, threads);
    if (b < 1) b = 1;
    if (b > (int64_t)max_blocks) b = max_blocks;
    return (unsigned)b;
}

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

/* 1 when every sequence of the batch decodes exactly one token whose logits are wanted, row i
 * for token i: the shape CUDA graphs capture and replay. */
static inline int cuda_batch_is_pure_decode(const be_batch *b)
{
    if (b->n_tokens < 1 || b->n_tokens != b->n_seqs || b->n_logits != b->n_tokens) return 0;
    for (int32_t i = 0; i < b->n_seqs; i++)
        if (b->q_start[i] != i || b->logit_rows[i] != i) return 0;
    return b->q_start[b->n_seqs] == b->n_tokens;
}

/* ---- KV arena layout --------------------------------------------------------------------- */

/* The arena is one allocation of elements (f32, f16, bf16, or bytes for int8 / fp8):
 *   [n_layers][2][n_blocks][n_kv_heads][tile]
 * kind 0 = K, 1 = V. One (block, kv head) is a contiguous tile: block_size × head_dim values
 * (row-major, as on the CPU's V tiles), so the attention kernel streams whole rows of head_dim
 * values with coalesced loads; a quantised tile then holds the block_size f16 scales of its
 * rows (tile_extra = 2 × block_size bytes, see cache/kv.h). */
typedef struct cuda_kv_layout {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size; /* tokens per block */
    int32_t n_blocks;
    int tile_extra; /* elements after a tile's values: 2 × block_size (bytes) for int8/fp8, else 0 */
} cuda_kv_layout;

/* The layout of n_blocks blocks of geometry g. */
static inline cuda_kv_layout cuda_kv_layout_of(const kv_geom *g, int32_t n_blocks)
{
    cuda_kv_layout l;
    l.n_layers = g->n_layers;
    l.n_kv_heads = g->n_kv_heads;
    l.head_dim = g->head_dim;
    l.block_size = g->block_size;
    l.n_blocks = n_blocks;
    l.tile_extra = kv_dtype_is_quant(g->dtype) ? KV_SCALE_BYTES * g->block_size : 0;
    return l;
}

/* Elements of one (block, kv head) tile, scales included. */
static inline CUDA_HD int64_t cuda_kv_tile_elems(const cuda_kv_layout *l)
{
    return (int64_t)l->block_size * l->head_dim + l->tile_extra;
}

/* Elements in one (layer, kind) plane: n_blocks × n_kv_heads tiles. */
static inline CUDA_HD int64_t cuda_kv_plane_elems(const cuda_kv_layout *l)
{
    return (int64_t)l->n_blocks * l->n_kv_heads * cuda_kv_tile_elems(l);
}

static inline CUDA_HD int64_t cuda_kv_total_elems(const cuda_kv_layout *l)
{
    return 2 * (int64_t)l->n_layers * cuda_kv_plane_elems(l);
}

/* Element index of the first value of tile (block, head) in plane (layer, kind). */
static inline CUDA_HD int64_t cuda_kv_tile_index(const cuda_kv_layout *l, int layer, int kind, int32_t block,
                                                 int head)
{
    int64_t plane = (int64_t)(layer * 2 + kind) * cuda_kv_plane_elems(l);
    return plane + ((int64_t)block * l->n_kv_heads + head) * cuda_kv_tile_elems(l);
}

/* Element index of dimension d of kv head `head` at offset `off` in block `block`. */
static inline CUDA_HD int64_t cuda_kv_index(const cuda_kv_layout *l, int layer, int kind, int32_t block,
                                            int head, int off, int d)
{
    return cuda_kv_tile_index(l, layer, kind, block, head) + (int64_t)off * l->head_dim + d;
}

/* Byte index (in a quantised arena) of the f16 scale of the vector at `off` of tile (block, head). */
static inline CUDA_HD int64_t cuda_kv_scale_index(const cuda_kv_layout *l, int layer, int kind, int32_t block,
                                                  int head, int off)
{
    return cuda_kv_tile_index(l, layer, kind, block, head) + (int64_t)l->block_size * l->head_dim +
           KV_SCALE_BYTES * (int64_t)off;
}

/* Same, addressed by KV slot (block × block_size + offset). */
static inline CUDA_HD int64_t cuda_kv_slot_index(const cuda_kv_layout *l, int layer, int kind, int32_t slot,
                                                 int head, int d)
{
    return cuda_kv_index(l, layer, kind, slot / l->block_size, head, slot % l->block_size, d);
}

/* The second KV tier's copy of one block (kv_block_out / kv_block_in): in each (layer, K|V) plane
 * p = 2 × layer + kind of a group's arena (layers counted within the group), the block's
 * n_kv_heads tiles — values and, for int8 / fp8, their scales — are one contiguous chunk of
 * cuda_kv_block_chunk_bytes, at byte cuda_kv_block_chunk_at of the arena and at p × that size in
 * the host copy: 2 × n_layers chunks, kv_group_bytes_per_block bytes in all, in the CPU backend's
 * order (each layer's K, then its V). es: bytes per arena element (kv_dtype_bytes). */
static inline size_t cuda_kv_block_chunk_bytes(const cuda_kv_layout *l, size_t es)
{
    return (size_t)l->n_kv_heads * (size_t)cuda_kv_tile_elems(l) * es;
}

static inline size_t cuda_kv_block_chunk_at(const cuda_kv_layout *l, size_t es, int32_t block, int p)
{
    return (size_t)cuda_kv_tile_index(l, p / 2, p % 2, block, 0) * es;
}

/* Slot of KV entry j of a sequence with block-table row bt. */
static inline CUDA_HD int32_t cuda_kv_entry_slot(const int32_t *bt, int block_size, int32_t j)
{
    return bt[j / block_size] * block_size + j % block_size;
}

/* ---- batch metadata ---------------------------------------------------------------------- */

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

/* ---- RoPE -------------------------------------------------------------------------------- */

/* The two dimensions of rotation pair i: adjacent (2i, 2i+1) for llama GGUFs, halves
 * (i, i + rope_dims/2) for NEOX (qwen2). */
static inline CUDA_HD void cuda_rope_pair(int neox, int rope_dims, int i, int *a, int *b)
{
    if (neox) {
        *a = i;
        *b = i + rope_dims / 2;
    } else {
        *a = 2 * i;
        *b = 2 * i + 1;
    }
}

/* ---- scalar formats ---------------------------------------------------------------------- */

static inline CUDA_HD uint32_t cuda_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

static inline CUDA_HD float cuda_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

static inline CUDA_HD float cuda_bf16_to_f32(uint16_t h)
{
    return cuda_bits_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
static inline CUDA_HD uint16_t cuda_f32_to_bf16(float f)
{
    uint32_t x = cuda_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* Exact, subnormals included. */
static inline CUDA_HD float cuda_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: mant × 2^-24, exact in f32 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return cuda_bits_f32(sign | 0x7f800000u | (mant << 13));
    return cuda_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Round to nearest even, overflow to infinity, subnormals rounded. */
static inline CUDA_HD uint16_t cuda_f32_to_f16(float f)
{
    uint32_t x = cuda_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* f16 subnormal range: round |f| / 2^-24 to an integer, ties to even */
        float q = cuda_bits_f32(a) * 16777216.0f; /* exact: scaling by a power of two */
        uint32_t n = (uint32_t)q;
        float rem = q - (float)n;
        if (rem > 0.5f || (rem == 0.5f && (n & 1u))) n++;
        return (uint16_t)(sign | n);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* The f16 scale stored for a quantised head vector whose largest magnitude is amax (the rule of
 * cache/kv.h: amax / QMAX rounded up to an f16), and in *inv the reciprocal of its value (0 when
 * it is 0), which encodes the vector's values: kv_i8_encode(x, *inv) or kv_e4m3_encode(x * *inv). */
static inline CUDA_HD uint16_t cuda_kv_scale(int dtype, float amax, float *inv)
{
    float s = kv_quant_scale(dtype, amax);
    uint16_t h = cuda_f32_to_f16(s);
    if (cuda_f16_to_f32(h) < s && h < 0x7c00u) h++; /* the next f16 up (s ≥ 0) */
    float d = cuda_f16_to_f32(h);
    *inv = d > 0.0f && d < INFINITY ? 1.0f / d : 0.0f;
    return h;
}

/* The f16 scale at p (2 bytes, little-endian, any alignment) as f32. */
static inline CUDA_HD float cuda_kv_load_scale(const uint8_t *p)
{
    return cuda_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* Element i of a Q8_0 row (blocks of {f16 scale, int8 q[32]}, 34 bytes): scale × q. The product
 * is formed in f32, where it is exact (11-bit × 8-bit significands). */
static inline CUDA_HD float cuda_q8_0_value(const uint8_t *row, int64_t i)
{
    const uint8_t *blk = row + (i / 32) * 34;
    uint16_t d = (uint16_t)(blk[0] | (blk[1] << 8));
    int8_t q = (int8_t)blk[2 + i % 32];
    return cuda_f16_to_f32(d) * (float)q;
}

/* SiLU(g) × u, as the CPU reference computes it. */
static inline CUDA_HD float cuda_silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

#endif
