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

/* Elements of a row one thread keeps in registers between the two passes of the norm (rows
 * longer than CUDA_NORM_THREADS × this are read twice). */
#define CUDA_NORM_KEEP 8
/* Threads of the norm's block: one block per row. */
#define CUDA_NORM_THREADS 512

/* One block per output row r, whose source row is rows[r] (rows NULL: r). The row is h = x[src]
 * (+ res[src] when res is not NULL; the sum written back to x[src] when write_back), and
 * out[r] = h / sqrt(mean(h²) + eps) · w. X, Y, O: the element types of x, res and out (the f32
 * residual stream, or activations); out may equal x only without res. Sum of squares in f32
 * across the block, as the CPU reference does per row. */
template <typename X, typename Y, typename O>
static __global__ void cuda__rmsnorm_k(X *x, const Y *res, const int32_t *rows, int write_back, const float *w,
                                       float eps, int dim, O *out)
{
    cuda__pdl_trigger(); /* a projection after the norm may launch (it waits before reading) */
    const int64_t r = blockIdx.x, src = rows ? rows[r] : r;
    X *xr = x + src * dim;
    const Y *yr = res ? res + src * dim : NULL;
    float keep[CUDA_NORM_KEEP], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < CUDA_NORM_KEEP; k++) {
        int i = threadIdx.x + k * blockDim.x;
        float v = 0.0f;
        if (i < dim) {
            v = cuda__ld(xr[i]);
            if (yr) v += cuda__ld(yr[i]);
        }
        keep[k] = v;
        ss += v * v;
    }
    for (int i = threadIdx.x + CUDA_NORM_KEEP * blockDim.x; i < dim; i += blockDim.x) {
        float v = cuda__ld(xr[i]) + (yr ? cuda__ld(yr[i]) : 0.0f);
        ss += v * v;
    }
    ss = cuda__block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    O *o = out + r * dim;
#pragma unroll
    for (int k = 0; k < CUDA_NORM_KEEP; k++) {
        int i = threadIdx.x + k * blockDim.x;
        if (i >= dim) break;
        if (yr && write_back) xr[i] = cuda__st<X>(keep[k]);
        o[i] = cuda__st<O>(keep[k] * inv * w[i]);
    }
    for (int i = threadIdx.x + CUDA_NORM_KEEP * blockDim.x; i < dim; i += blockDim.x) {
        float v = cuda__ld(xr[i]) + (yr ? cuda__ld(yr[i]) : 0.0f);
        if (yr && write_back) xr[i] = cuda__st<X>(v);
        o[i] = cuda__st<O>(v * inv * w[i]);
    }
}

/* ---- RoPE -------------------------------------------------------------------------------- */

#define CUDA_ROPE_MAX_PAIRS 512

/* The cos and sin (times mscale) of pair i < min(rope_dims / 2, CUDA_ROPE_MAX_PAIRS) of RoPE r at
 * position pos into cs[i], sn[i], by the threads of the block; angles in double (as on the CPU,
 * through the same be_rope_freq). The caller synchronises before reading them. */
static __device__ void cuda__rope_angles(int pos, const be_rope &r, const float *ff, float *cs, float *sn)
{
    int half = r.rope_dims / 2;
    if (half > CUDA_ROPE_MAX_PAIRS) half = CUDA_ROPE_MAX_PAIRS; /* head_dim > 1024 is not a real model */
    float ms = be_rope_mscale(&r);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos((double)pos * be_rope_freq(&r, i, ff ? ff[i] : 1.0f), &s, &c);
        cs[i] = (float)c * ms;
        sn[i] = (float)s * ms;
    }
}

/* Rotates the rope_dims leading dims of every head of token row x (activations of type A) at
 * position pos (r: the layer's rope with n_heads heads; ff: its frequency factors in device
 * memory, or NULL); the whole block calls it. Angles once per pair (cuda__rope_angles), then
 * applied to every head in f32. */
template <typename A> static __device__ void cuda__rope_row(A *x, int pos, const be_rope &r, const float *ff)
{
    static __shared__ float cs[CUDA_ROPE_MAX_PAIRS], sn[CUDA_ROPE_MAX_PAIRS];
    int half = r.rope_dims / 2;
    if (half > CUDA_ROPE_MAX_PAIRS) half = CUDA_ROPE_MAX_PAIRS;
    cuda__rope_angles(pos, r, ff, cs, sn);
    __syncthreads();
    for (int idx = threadIdx.x; idx < r.n_heads * half; idx += blockDim.x) {
        int h = idx / half, i = idx % half, a, b;
        cuda_rope_pair(r.neox, r.rope_dims, i, &a, &b);
        A *xh = x + (int64_t)h * r.head_dim;
        float x0 = cuda__ld(xh[a]), x1 = cuda__ld(xh[b]);
        xh[a] = cuda__st<A>(x0 * cs[i] - x1 * sn[i]);
        xh[b] = cuda__st<A>(x0 * sn[i] + x1 * cs[i]);
    }
}

template <typename A> static __global__ void cuda__rope_k(A *x, const int32_t *pos, be_rope r, const float *ff)
{
    int t = blockIdx.x;
    cuda__rope_row(x + (int64_t)t * r.n_heads * r.head_dim, pos[t], r, ff);
}

/* out row t = x row t rotated by −shift of its sequence (sinks NULL: 0), a pure rotation (r's
 * mscale is 1). The sequence of token t: the last s with q_start[s] ≤ t. */
template <typename A>
static __global__ void cuda__rope_shift_k(const A *x, A *out, const int32_t *q_start, int n_seqs,
                                          const int32_t *sinks, const int32_t *shift, be_rope r, const float *ff)
{
    int t = blockIdx.x, lo = 0, hi = n_seqs - 1;
    while (lo < hi) { /* binary search: q_start is increasing */
        int mid = (lo + hi + 1) / 2;
        if (q_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    int64_t row = (int64_t)r.n_heads * r.head_dim;
    const A *xs = x + t * row;
    A *o = out + t * row;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) o[i] = xs[i];
    __syncthreads();
    int sh = sinks ? shift[lo] : 0;
    if (sh) cuda__rope_row(o, -sh, r, ff);
}

#endif
