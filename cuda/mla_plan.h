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
} cuda__mla_attn_args;

/* Shared memory of one block: the key tile, the rows' queries and outputs, their scores and
 * online-softmax state (floats). */
static inline CUDA_HD size_t cuda__mla_smem(int head_dim)
{
    return ((size_t)CUDA_MLA_TK * head_dim + 2 * (size_t)CUDA_MLA_ROWS * head_dim + (size_t)CUDA_MLA_ROWS * CUDA_MLA_TK +
            3 * CUDA_MLA_ROWS) * sizeof(float);
}

#endif
