/*
 * kv_layout.h — the CUDA backend's paged KV arena: where each (layer, K|V, block, kv head, slot,
 * dimension) lives, where a quantised row keeps its f16 scale and how that scale is chosen, and
 * the chunks the second KV tier copies. Host and device code alike (CUDA_HD, launch.h).
 *
 * Callers: the KV arena, the K/V store and reads of the backend, the attention kernels,
 * tests/test_cuda_host.c (bijectivity, agreement with the CPU layout), cuda/check/attn_emu.cc.
 */
#ifndef KVSERVE_CUDA_KV_LAYOUT_H
#define KVSERVE_CUDA_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "cache/kv.h"
#include "cuda/formats.h"
#include "cuda/launch.h"

/* The arena is one allocation of elements (f32, f16, bf16, or bytes for int8 / fp8):
 *   [n_layers][n_kinds][n_blocks][n_kv_heads][tile]
 * kind 0 = K, 1 = V; the latent layout of MLA (cache/kv.h) has one kind, its vectors (one kv
 * head), which the attention reads as key and value alike. One (block, kv head) is a contiguous tile: block_size × head_dim values
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
    int n_kinds;    /* planes per layer: 2 (K and V), or 1 for the latent layout (0 means 2) */
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
    l.n_kinds = kv_n_vecs(g);
    return l;
}

/* Planes per layer (K and V, or the latent's one). */
static inline CUDA_HD int cuda_kv_kinds(const cuda_kv_layout *l)
{
    return l->n_kinds == 1 ? 1 : 2;
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
    return cuda_kv_kinds(l) * (int64_t)l->n_layers * cuda_kv_plane_elems(l);
}

/* Element index of the first value of tile (block, head) in plane (layer, kind). */
static inline CUDA_HD int64_t cuda_kv_tile_index(const cuda_kv_layout *l, int layer, int kind, int32_t block,
                                                 int head)
{
    int64_t plane = (int64_t)(layer * cuda_kv_kinds(l) + kind) * cuda_kv_plane_elems(l);
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
 * p = kinds × layer + kind of a group's arena (layers counted within the group), the block's
 * n_kv_heads tiles — values and, for int8 / fp8, their scales — are one contiguous chunk of
 * cuda_kv_block_chunk_bytes, at byte cuda_kv_block_chunk_at of the arena and at p × that size in
 * the host copy: kinds × n_layers chunks, kv_group_bytes_per_block bytes in all, in the CPU
 * backend's order (each layer's K, then its V; the latent's one plane). es: bytes per arena
 * element (kv_dtype_bytes). */
static inline size_t cuda_kv_block_chunk_bytes(const cuda_kv_layout *l, size_t es)
{
    return (size_t)l->n_kv_heads * (size_t)cuda_kv_tile_elems(l) * es;
}

static inline size_t cuda_kv_block_chunk_at(const cuda_kv_layout *l, size_t es, int32_t block, int p)
{
    return (size_t)cuda_kv_tile_index(l, p / cuda_kv_kinds(l), p % cuda_kv_kinds(l), block, 0) * es;
}

/* Slot of KV entry j of a sequence with block-table row bt. */
static inline CUDA_HD int32_t cuda_kv_entry_slot(const int32_t *bt, int block_size, int32_t j)
{
    return bt[j / block_size] * block_size + j % block_size;
}

/* ---- quantised rows' scales ---------------------------------------------------------------- */

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

#endif
