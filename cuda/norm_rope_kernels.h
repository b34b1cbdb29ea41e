/*
 * norm_rope_kernels.h — the kernels of RMSNorm (with its fused residual add) and of RoPE
 * (adjacent-pair and NEOX layouts, partial rotation, linear / YaRN scaling, frequency factors;
 * the rotation by a sequence's sink shift), kept apart from their launchers (cuda/norm_rope.cu)
 * so that the source compiles under the CPU emulation of cuda/check/emu_cuda.h too. The K/V
 * store (cuda/kv_kernels.h) rotates K with cuda__rope_row before storing it.
 *
 * Expects the CUDA built-ins (or their emulation).
 */
#ifndef KVSERVE_CUDA_NORM_ROPE_KERNELS_H
#define KVSERVE_CUDA_NORM_ROPE_KERNELS_H

#include "cuda/device.h"
#include "cuda/formats.h"
#include "engine/backend.h"

/* ---- RMSNorm ----------------------------------------------------------------------------- */

/* One block per row. With res != NULL, x[r] += res[r] first (written back), then the norm of the
 * sum goes to out. Sum of squares in f32 across the block, as the CPU reference does per row. */
static __global__ void cuda__rmsnorm_k(float *x, const float *res, const float *w, float eps, int dim, float *out)
{
    int64_t r = blockIdx.x;
    float *xr = x + r * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (res) {
            v += res[r * dim + i];
            xr[i] = v;
        }
        ss += v * v;
    }
    ss = cuda__block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[r * dim + i] = xr[i] * inv * w[i];
}

/* ---- RoPE -------------------------------------------------------------------------------- */

#define CUDA_ROPE_MAX_PAIRS 512

/* Rotates the rope_dims leading dims of every head of token row x at position pos (r: the layer's
 * rope with n_heads heads; ff: its frequency factors in device memory, or NULL); the whole block
 * calls it. Angles are computed once per pair in double (as on the CPU, through the same
 * be_rope_freq), then applied to every head in f32. */
static __device__ void cuda__rope_row(float *x, int pos, const be_rope &r, const float *ff)
{
    static __shared__ float cs[CUDA_ROPE_MAX_PAIRS], sn[CUDA_ROPE_MAX_PAIRS];
    int half = r.rope_dims / 2;
    if (half > CUDA_ROPE_MAX_PAIRS) half = CUDA_ROPE_MAX_PAIRS; /* head_dim > 1024 is not a real model */
    float ms = be_rope_mscale(&r);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos((double)pos * be_rope_freq(&r, i, ff ? ff[i] : 1.0f), &s, &c);
        cs[i] = (float)c * ms;
        sn[i] = (float)s * ms;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < r.n_heads * half; idx += blockDim.x) {
        int h = idx / half, i = idx % half, a, b;
        cuda_rope_pair(r.neox, r.rope_dims, i, &a, &b);
        float *xh = x + (int64_t)h * r.head_dim;
        float x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * cs[i] - x1 * sn[i];
        xh[b] = x0 * sn[i] + x1 * cs[i];
    }
}

static __global__ void cuda__rope_k(float *x, const int32_t *pos, be_rope r, const float *ff)
{
    int t = blockIdx.x;
    cuda__rope_row(x + (int64_t)t * r.n_heads * r.head_dim, pos[t], r, ff);
}

/* out row t = x row t rotated by −shift of its sequence (sinks NULL: 0), a pure rotation (r's
 * mscale is 1). The sequence of token t: the last s with q_start[s] ≤ t. */
static __global__ void cuda__rope_shift_k(const float *x, float *out, const int32_t *q_start, int n_seqs,
                                          const int32_t *sinks, const int32_t *shift, be_rope r, const float *ff)
{
    int t = blockIdx.x, lo = 0, hi = n_seqs - 1;
    while (lo < hi) { /* binary search: q_start is increasing */
        int mid = (lo + hi + 1) / 2;
        if (q_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    int64_t row = (int64_t)r.n_heads * r.head_dim;
    const float *xs = x + t * row;
    float *o = out + t * row;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) o[i] = xs[i];
    __syncthreads();
    int sh = sinks ? shift[lo] : 0;
    if (sh) cuda__rope_row(o, -sh, r, ff);
}

#endif
