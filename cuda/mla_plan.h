/*
 * mla_plan.h — the launch shapes and arguments of multi-head latent attention's kernels
 * (cuda/mla_kernels.h), for the kernel table (kern.h), the launchers and the emulation. Host and
 * device code alike; nothing here touches the runtime.
 */
#ifndef KVSERVE_CUDA_MLA_PLAN_H
#define KVSERVE_CUDA_MLA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/launch.h"
#include "engine/backend.h"

#define CUDA_MLA_THREADS 128
#define CUDA_MLA_TK 16   /* keys per shared-memory tile */
#define CUDA_MLA_ROWS 16 /* heads per block */
#define CUDA_MLA_MAX_SPLITS 32 /* partitions of one token's keys (split-K) */

/* The latent prep of one layer. */
typedef struct cuda__mla_prep_args {
    const float *q, *kv;  /* [n][H][nope + rope], [n][kv_lora + rope] */
    const float *norm;    /* [kv_lora] */
    float *q_lat, *k_lat; /* [n][H][kv_lora + rope], [n][kv_lora + rope] */
    const int32_t *pos;   /* [n] */
    int n_heads, nope, rope, kv_lora;
    float eps;
    be_rope rope_q, rope_k; /* over the rope dims; head_dim is set to the buffers' head strides */
} cuda__mla_prep_args;

/* The latent attention of one layer. */
typedef struct cuda__mla_attn_args {
    const float *q;      /* [n][H][head_dim] */
    float *out;          /* [n][H][head_dim] */
    const int32_t *q_start, *ctx_len, *block_table;
    int n_seqs, bt_stride, block_size, n_heads, head_dim;
    int32_t tile_elems;  /* elements of one (block, head) tile */
    float scale;
    /* split-K (cuda__mla_splits): splits > 1 cuts each token's keys into partitions of
     * part_keys; each block writes its rows' partials (o, m, l) to part and the last of a
     * (token, head chunk)'s partitions merges them, counting on sem (zero between launches) */
    int splits;
    int32_t part_keys;
    float *part;         /* cuda__mla_part_floats */
    int32_t *sem;        /* [n_tokens][head chunks] */
} cuda__mla_attn_args;

/* Head chunks of n_heads heads (the blocks per token and partition). */
static inline CUDA_HD int cuda__mla_chunks(int n_heads)
{
    return (n_heads + CUDA_MLA_ROWS - 1) / CUDA_MLA_ROWS;
}

/* Key partitions for a step of n_tokens tokens over at most max_ctx keys (a bound that depends on
 * the step's shape alone where a CUDA graph replays it) on n_sm SMs. A decode of one long
 * sequence is a handful of blocks (one per head chunk): the keys are then cut into partitions of
 * *part_keys (whole tiles, at least 4 of them) until the grid has about two blocks per SM. 1
 * (no split, *part_keys 0) when the grid fills the GPU already or the keys are few. */
static inline CUDA_HD int cuda__mla_splits(int n_tokens, int n_heads, int32_t max_ctx, int n_sm, int32_t *part_keys)
{
    int blocks = n_tokens * cuda__mla_chunks(n_heads), splits = 1;
    if (blocks < n_sm && max_ctx >= 8 * CUDA_MLA_TK) {
        splits = (2 * n_sm + blocks - 1) / blocks;
        int most = max_ctx / (4 * CUDA_MLA_TK);
        if (splits > most) splits = most;
        if (splits > CUDA_MLA_MAX_SPLITS) splits = CUDA_MLA_MAX_SPLITS;
    }
    int32_t per = (max_ctx + splits - 1) / splits;
    *part_keys = splits > 1 ? (per + CUDA_MLA_TK - 1) / CUDA_MLA_TK * CUDA_MLA_TK : 0;
    return splits;
}

/* Floats of the split partials: a record of CUDA_MLA_ROWS rows × (head_dim + 2) (o, then m and
 * l) per (token, head chunk, partition). */
static inline CUDA_HD size_t cuda__mla_part_floats(int n_tokens, int n_heads, int splits, int head_dim)
{
    return (size_t)n_tokens * cuda__mla_chunks(n_heads) * splits * CUDA_MLA_ROWS * (head_dim + 2);
}

/* Shared memory of one block: the key tile, the rows' queries and outputs, their scores and
 * online-softmax state (floats). */
static inline CUDA_HD size_t cuda__mla_smem(int head_dim)
{
    return ((size_t)CUDA_MLA_TK * head_dim + 2 * (size_t)CUDA_MLA_ROWS * head_dim + (size_t)CUDA_MLA_ROWS * CUDA_MLA_TK +
            3 * CUDA_MLA_ROWS) * sizeof(float);
}

#endif
