/*
 * kv.h — geometry of the paged KV cache and the memory formula kvserve is built around:
 *
 *   KV bytes per token = 2 (K and V) × n_layers × n_kv_heads × head_dim × bytes_per_value
 *
 * The cache is cut into blocks of block_size tokens. A token's KV "slot" is
 * block_id × block_size + offset_in_block. Each backend lays out a block as it likes; the CPU
 * backend uses, per layer and per K/V, [n_blocks][n_kv_heads][tile], so that one (block, kv head)
 * is one contiguous tile that attention streams through: V tiles are [block_size][head_dim], K tiles
 * are transposed, [head_dim][block_size], so query·key scores are plain block_size-wide FMAs (see
 * cpu/attention.c). The CUDA backend keeps [layer][K|V][block][kv_head][block_size][head_dim].
 */
#ifndef KVSERVE_KV_H
#define KVSERVE_KV_H

#include <stddef.h>
#include <stdint.h>

enum kv_dtype { KV_F16 = 0, KV_F32 = 1, KV_BF16 = 2 };

typedef struct kv_geom {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size; /* tokens per block */
    int dtype;      /* enum kv_dtype */
} kv_geom;

static inline size_t kv_dtype_bytes(int dtype)
{
    return dtype == KV_F32 ? 4 : 2;
}

static inline const char *kv_dtype_name(int dtype)
{
    return dtype == KV_F32 ? "f32" : dtype == KV_BF16 ? "bf16" : "f16";
}

/* -1 when unknown. */
static inline int kv_dtype_parse(const char *s)
{
    if (!s) return -1;
    if (s[0] == 'f' && s[1] == '1' && s[2] == '6' && !s[3]) return KV_F16;
    if (s[0] == 'f' && s[1] == '3' && s[2] == '2' && !s[3]) return KV_F32;
    if (s[0] == 'b' && s[1] == 'f' && s[2] == '1' && s[3] == '6' && !s[4]) return KV_BF16;
    return -1;
}

/* 2 × n_layers × n_kv_heads × head_dim × bytes per value. */
static inline size_t kv_bytes_per_token(const kv_geom *g)
{
    return 2u * (size_t)g->n_layers * (size_t)g->n_kv_heads * (size_t)g->head_dim *
           kv_dtype_bytes(g->dtype);
}

static inline size_t kv_bytes_per_block(const kv_geom *g)
{
    return kv_bytes_per_token(g) * (size_t)g->block_size;
}

/* Number of whole blocks that fit in budget_bytes. */
static inline int64_t kv_blocks_for_budget(const kv_geom *g, size_t budget_bytes)
{
    size_t b = kv_bytes_per_block(g);
    return b ? (int64_t)(budget_bytes / b) : 0;
}

#endif
