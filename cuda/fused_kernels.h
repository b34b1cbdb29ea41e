/*
 * fused_kernels.h — the epilogue of the fused QKV op (cuda/fused.cu): after the projection (one
 * matrix-vector or GEMM over the stacked [Wq; Wk; Wv], f32 products), one kernel adds the biases,
 * normalises q and k per head (qwen3, gemma3), rotates them (RoPE: every pair layout, partial
 * rotation, YaRN, frequency factors), writes q in the activation type for attention and k and v
 * into the layer's KV cache at the tokens' slots (rounded to f16 / bf16 / f32, or quantised per
 * head vector for int8 / e4m3 caches by the rule of cache/kv.h). What the unfused graph does in
 * five to seven launches (bias, two norms, two RoPEs, the store) is one.
 *
 * Grid: (n_tokens, head groups); CUDA_QKV_THREADS threads = CUDA_QKV_WARPS warps, each warp one
 * head of the token (q heads, then k heads, then v heads), staged in shared memory as f32 so
 * that the norm's sum and RoPE's pairs (adjacent or NEOX halves) need no shuffles of elements.
 *
 * Kept apart from its launcher so that it also runs under the CPU emulation of
 * cuda/check/emu_cuda.h (cuda/check/dense_emu.cc). Expects the CUDA built-ins (or their
 * emulation) and __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_FUSED_KERNELS_H
#define KVSERVE_CUDA_FUSED_KERNELS_H

#include "cuda/device.h"
#include "cuda/kv_kernels.h"
#include "cuda/kv_layout.h"
#include "cuda/norm_rope_kernels.h"
#include "engine/backend.h"

#define CUDA_QKV_WARPS 4
#define CUDA_QKV_THREADS (32 * CUDA_QKV_WARPS)
/* The largest head the fused epilogue stages (larger ones take the unfused ops). */
#define CUDA_QKV_MAX_HEAD_DIM 512

/* The epilogue's arguments: the token rows of the three products and where the results go. */
typedef struct cuda_qkv_args {
    const float *q, *k, *v;        /* row t of each at q + t · ldq, ... (f32 products, no bias) */
    int64_t ldq, ldk, ldv;
    const float *bq, *bk, *bv;     /* [q_dim], [kv_dim], [kv_dim] biases, or NULL */
    const float *q_norm, *k_norm;  /* [head_dim] per-head RMSNorm weights, or NULL (no norm) */
    float eps;
    be_rope rope;                  /* the layer's RoPE (n_heads unused; freq_factors NULL) */
    const float *ff;               /* its frequency factors in device memory, or NULL */
    int n_heads, n_kv_heads, head_dim;
    const int32_t *pos;            /* [n_tokens] RoPE positions */
    const int32_t *slots;          /* [n_tokens] KV slots (< 0: not stored) */
    cuda_kv_layout l;              /* the layer group's layout */
    void *kp, *vp;                 /* the layer's K and V planes */
    void *q_out;                   /* [n_tokens][n_heads][head_dim] activations */
} cuda_qkv_args;

/* Head hh of token t (q heads, then k, then v): bias, per-head norm and RoPE in the warp's
 * staging row h[], then q out as A or k / v into the cache of type T. All 32 lanes call it. */
template <typename T, typename A>
static __device__ void cuda__qkv_head(const cuda_qkv_args &a, int64_t t, int hh, float *h, const float *cs,
                                      const float *sn)
{
    const int lane = threadIdx.x & 31, D = a.head_dim;
    const int kind = hh < a.n_heads ? 0 : hh < a.n_heads + a.n_kv_heads ? 1 : 2;
    const int head = kind == 0 ? hh : kind == 1 ? hh - a.n_heads : hh - a.n_heads - a.n_kv_heads;
    const float *src = kind == 0 ? a.q + t * a.ldq : kind == 1 ? a.k + t * a.ldk : a.v + t * a.ldv;
    const float *bias = kind == 0 ? a.bq : kind == 1 ? a.bk : a.bv;
    const float *nw = kind == 0 ? a.q_norm : kind == 1 ? a.k_norm : NULL;
    src += (int64_t)head * D;
    float ss = 0.0f;
    for (int d = lane; d < D; d += 32) {
        float v = src[d] + (bias ? bias[(int64_t)head * D + d] : 0.0f);
        h[d] = v;
        ss += v * v;
    }
    if (nw) { /* each lane rescales the elements it wrote */
        float inv = 1.0f / sqrtf(cuda__warp_sum(ss) / (float)D + a.eps);
        for (int d = lane; d < D; d += 32) h[d] = h[d] * inv * nw[d];
    }
    __syncwarp();
    if (kind < 2) { /* RoPE: each pair by one lane */
        int half = a.rope.rope_dims / 2;
        for (int i = lane; i < half; i += 32) {
            int pa, pb;
            cuda_rope_pair(a.rope.neox, a.rope.rope_dims, i, &pa, &pb);
            float x0 = h[pa], x1 = h[pb];
            h[pa] = x0 * cs[i] - x1 * sn[i];
            h[pb] = x0 * sn[i] + x1 * cs[i];
        }
        __syncwarp();
    }
    if (kind == 0) {
        A *o = (A *)a.q_out + (t * a.n_heads + head) * D;
        for (int d = lane; d < D; d += 32) o[d] = cuda__st<A>(h[d]);
    } else if (a.slots[t] >= 0) {
        T *plane = (T *)(kind == 1 ? a.kp : a.vp);
        if constexpr (sizeof(T) == 1) { /* int8 / e4m3 codes */
            cuda__store_q_head(h, plane, a.l, a.slots[t], head);
        } else {
            for (int d = lane; d < D; d += 32) plane[cuda_kv_slot_index(&a.l, 0, 0, a.slots[t], head, d)] = cuda__st<T>(h[d]);
        }
    }
    __syncwarp(); /* h[] is rewritten by the warp's next head */
}

/* Block (t, g): token t's heads g · CUDA_QKV_WARPS .. + CUDA_QKV_WARPS − 1, one per warp. T is the
 * KV cache's element type (float, __half, __nv_bfloat16, int8_t or uint8_t codes), A the
 * activations'. */
template <typename T, typename A>
static __global__ void __launch_bounds__(CUDA_QKV_THREADS) cuda__qkv_post_k(cuda_qkv_args a)
{
    static __shared__ float cs[CUDA_ROPE_MAX_PAIRS], sn[CUDA_ROPE_MAX_PAIRS];
    static __shared__ float stage[CUDA_QKV_WARPS][CUDA_QKV_MAX_HEAD_DIM];
    const int64_t t = blockIdx.x;
    const int warp = threadIdx.x >> 5, hh = blockIdx.y * CUDA_QKV_WARPS + warp;
    cuda__rope_angles(a.pos[t], a.rope, a.ff, cs, sn);
    __syncthreads();
    if (hh < a.n_heads + 2 * a.n_kv_heads) cuda__qkv_head<T, A>(a, t, hh, stage[warp], cs, sn);
}

#endif
