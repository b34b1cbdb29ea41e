/*
 * moe_kernels.h — the kernels of the mixture-of-experts FFN (cuda/moe.cu) and of the per-head
 * projections of latent attention (cuda/mla.cu), kept apart from their launchers so that the same
 * source compiles under the CPU emulation of cuda/check/emu_cuda.h (cuda/check/moe_emu.cc).
 *
 * A MoE layer on the GPU, for n tokens routed to k experts each (R = n·k routed rows):
 *   route    one block per token: be_moe_route (engine/backend.h, the definition the CPU shares)
 *            writes the token's experts and weights and counts each expert's rows (atomics);
 *   group    one block: each expert's first row (a prefix sum of the counts) and the list of the
 *            experts with rows; then one thread per
 *            routed row takes the next row of its expert and copies the token's input there, so
 *            an expert's rows are contiguous (their order within an expert is whatever the
 *            atomics give: each row's result depends on that row alone);
 *   gemv     the grouped projection: grid (output tiles, experts); a block whose expert has no
 *            rows returns at once, so an expert no token chose is not read. Quantised and MXFP4
 *            experts take the integer path (cuda__moe_mmvq_k): the grouped rows quantised once
 *            to 8-bit blocks (qact_kernels.h), then mmvq's 16 × 8 tile on the integer tensor
 *            cores (qmatvec_kernels.h) over each expert's own matrix, 8 rows per pass, the input
 *            dimension split over blocks at decode. F32 / F16 / BF16 experts take the f32 kernel
 *            (cuda__moe_gemv_k): each warp computes one output for all of its expert's rows, 8
 *            rows per pass over the weight row, in any weight type (the quantised ones decoded by
 *            cuda_q_dequant8: the reference the integer path is checked against). The f32 kernel
 *            with strided rows and per-group offsets is MLA's per-head projection (a group per
 *            head, every token a row);
 *   act      SiLU × up, or gpt-oss's clamped SwiGLU, element-wise;
 *   combine  one block per token: out = Σ_j w_j · y[row of (token, j)], in selection order.
 * MXFP4 experts see their activations as llama.cpp's Q8_0 blocks (q8h: per 32 values, codes of
 * amax / 127 and that scale rounded to f16): on the integer path the quantiser's codes with the
 * scale rounded where the tile reads it (cuda__qmma_dx); for the f32 kernel, applied to the rows
 * before the matvec (cuda__q8h_k).
 */
#ifndef KVSERVE_CUDA_MOE_KERNELS_H
#define KVSERVE_CUDA_MOE_KERNELS_H

#include "cuda/device.h"
#include "cuda/formats.h"
#include "cuda/launch.h"
#include "cuda/moe_plan.h"
#include "cuda/qmatvec_kernels.h"
#include "cuda/quant_formats.h"

/* 8 weights i0 .. i0+7 of a weight row of type T (i0 a multiple of 8). */
template <int T>
static __device__ __forceinline__ void cuda__moe_w8(const uint8_t *row, int64_t i0, float *v)
{
    if (T == DT_F32) {
        const float *p = (const float *)row + i0;
        for (int k = 0; k < 8; k++) v[k] = p[k];
    } else if (T == DT_F16 || T == DT_BF16) {
        const uint16_t *p = (const uint16_t *)row + i0;
        for (int k = 0; k < 8; k++) v[k] = T == DT_F16 ? cuda_f16_to_f32(p[k]) : cuda_bf16_to_f32(p[k]);
    } else {
        cuda_q_dequant8(T, row, i0, v);
    }
}

/* The grouped matvec: grid (⌈n_out / 4⌉, n_groups), CUDA_MOE_THREADS threads; n_in % 8 == 0. */
template <int T>
static __global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda__moe_gemv_k(cuda__moe_proj p, const float *x, float *out)
{
    const int e = blockIdx.y, lane = threadIdx.x & 31;
    const int r0 = p.start ? p.start[e] : 0, r1 = p.start ? p.start[e + 1] : p.n_rows;
    if (r0 >= r1) return; /* no row chose this expert: its weights are not read */
    const int64_t o = (int64_t)blockIdx.x * (CUDA_MOE_THREADS / 32) + (threadIdx.x >> 5);
    if (o >= p.n_out) return; /* the whole warp */
    const uint8_t *row = (const uint8_t *)p.w[e] + (size_t)o * p.row_bytes;
    const float *xe = x + e * p.x_goff;
    float *oe = out + e * p.o_goff;
    for (int rb = r0; rb < r1; rb += CUDA_MOE_ROWS) {
        const int nr = r1 - rb < CUDA_MOE_ROWS ? r1 - rb : CUDA_MOE_ROWS;
        float acc[CUDA_MOE_ROWS];
#pragma unroll
        for (int r = 0; r < CUDA_MOE_ROWS; r++) acc[r] = 0.0f;
        for (int64_t i0 = (int64_t)lane * 8; i0 < p.n_in; i0 += 32 * 8) {
            float v[8];
            cuda__moe_w8<T>(row, i0, v);
#pragma unroll
            for (int r = 0; r < CUDA_MOE_ROWS; r++) {
                if (r >= nr) break;
                const float *xr = xe + (int64_t)(rb + r) * p.x_stride + i0;
#pragma unroll
                for (int k = 0; k < 8; k++) acc[r] += v[k] * xr[k];
            }
        }
        for (int r = 0; r < nr; r++) {
            float s = cuda__warp_sum(acc[r]);
            if (lane == 0) oe[(int64_t)(rb + r) * p.o_stride + o] = s + (p.b && p.b[e] ? p.b[e][o] : 0.0f);
        }
    }
}

/* The grouped matvec of quantised experts on the integer path: grid (⌈n_out / 16⌉, slots,
 * split), CUDA_MMVQ_WARPS warps, slots ≥ the experts with rows (min(n_groups, n_rows) covers
 * every routing), so that a step's grid holds about as many blocks as there is work rather than
 * one row of blocks per expert. A block past the list of experts with rows returns before
 * reading a byte; otherwise it runs mmvq's tile (qmatvec_kernels.h) over its expert's matrix for
 * its rows, 8 at a time, its warps (and the split's blocks) taking the weight blocks in turn. */
template <int T>
static __global__ void __launch_bounds__(CUDA_MMVQ_WARPS * 32) cuda__moe_mmvq_k(cuda__moe_qproj p)
{
    /* blockIdx.y: a slot of the list of experts with rows (cuda__moe_scan_k); past its end, or
     * for an expert without rows, the block returns at once */
    if ((int)blockIdx.y >= p.start[p.n_groups + 1]) return;
    const int e = p.start[p.n_groups + 2 + blockIdx.y];
    const int r0 = p.start[e], r1 = p.start[e + 1];
    if (r0 >= r1) return; /* no row chose this expert: its weights are not read */
    const int warp = threadIdx.x >> 5, split = (int)gridDim.z, y = (int)blockIdx.z;
    const int64_t o0 = (int64_t)blockIdx.x * 16, n_blocks = p.n_in / cuda_q_block_elems(T);
    const uint8_t *w = (const uint8_t *)p.w[e];
    const float *bias = p.b ? p.b[e] : NULL;
    int row, col;
    cuda__mmvq_elem(threadIdx.x, &row, &col); /* this thread's element of the 16 × 8 tile */
    for (int rb = r0; rb < r1; rb += CUDA_QGEMV_MAX_ROWS) {
        const int nr = min(r1 - rb, CUDA_QGEMV_MAX_ROWS);
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        cuda__mmvq_tile<T>(w, p.row_bytes, p.n_in, p.n_out, o0, p.xq + (int64_t)rb * p.n_in,
                           p.xd + (int64_t)rb * n_blocks, nr, (int64_t)y * CUDA_MMVQ_WARPS + warp,
                           (int64_t)split * CUDA_MMVQ_WARPS, acc);
        float s = cuda__mmvq_reduce(acc);
        const int valid = o0 + row < p.n_out && col < nr;
        const int64_t at = valid ? (int64_t)(rb + col) * p.n_out + o0 + row : 0;
        if (split > 1 && !cuda__mmvq_join(&s, valid, p.part + at, (int64_t)p.n_rows * p.n_out, y, split,
                                          &p.ticket[(int64_t)blockIdx.y * gridDim.x + blockIdx.x]))
            return; /* one pass only: the split needs groups of at most 8 rows */
        if (valid) p.out[at] = s + (bias ? bias[o0 + row] : 0.0f);
    }
}

/* ---- routing and grouping ----------------------------------------------------------------- */

/* One block per token (32 threads; lane 0 routes): ids/w [n][k], cnt[e] += the token's rows of e. */
static __global__ void cuda__moe_route_k(be_moe_rule r, const float *logits, const float *sel_bias, int32_t *ids,
                                         float *w, int32_t *cnt)
{
    static __shared__ float scr[3 * CUDA_MOE_MAX_EXPERTS];
    const int t = blockIdx.x, k = r.n_used;
    if (threadIdx.x != 0) return;
    be_moe_route(&r, logits + (int64_t)t * r.n_expert, sel_bias, ids + (int64_t)t * k, w + (int64_t)t * k, scr);
    for (int j = 0; j < k; j++) atomicAdd(&cnt[ids[(int64_t)t * k + j]], 1);
}

/* One block: start[e] = Σ_{e' < e} cnt[e'] (start[E] = all rows), fill[e] = start[e]; then the
 * experts with rows: their number at start[E + 1] and their ids, in order, from start[E + 2]. */
static __global__ void cuda__moe_scan_k(const int32_t *cnt, int n_expert, int32_t *start, int32_t *fill)
{
    if (threadIdx.x != 0) return;
    int32_t s = 0, n_act = 0;
    for (int e = 0; e < n_expert; e++) {
        start[e] = fill[e] = s;
        s += cnt[e];
        if (cnt[e]) start[n_expert + 2 + n_act++] = e;
    }
    start[n_expert] = s;
    start[n_expert + 1] = n_act;
}

/* One block per routed row (t, j): its expert's next row gets the token's input; row[t·k + j]
 * records where. */
static __global__ void cuda__moe_scatter_k(const int32_t *ids, int k, const float *x, int64_t dim, int32_t *fill,
                                           int32_t *row, float *xg)
{
    static __shared__ int32_t at;
    const int64_t i = blockIdx.x;
    if (threadIdx.x == 0) {
        at = atomicAdd(&fill[ids[i]], 1);
        row[i] = at;
    }
    __syncthreads();
    const float *src = x + (i / k) * dim;
    float *dst = xg + (int64_t)at * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) dst[d] = src[d];
}

/* g[i] = act(g[i], u[i]) for n elements: SiLU × up (swiglu 0) or SwiGLU-OAI (swiglu 1). */
static __global__ void cuda__moe_act_k(float *g, const float *u, int64_t n, int swiglu, float alpha, float limit)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        g[i] = swiglu ? be_swiglu_oai(g[i], u[i], alpha, limit) : cuda_silu_mul(g[i], u[i]);
}

/* One block per token: out[t] = Σ_j w[t·k + j] · y[row[t·k + j]], j in selection order. */
static __global__ void cuda__moe_combine_k(const float *y, const int32_t *row, const float *w, int k, int64_t dim,
                                           float *out)
{
    const int64_t t = blockIdx.x;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            float term = y[(int64_t)row[t * k + j] * dim + d] * w[t * k + j];
            acc = j ? acc + term : term;
        }
        out[t * dim + d] = acc;
    }
}

/* ---- llama.cpp's 8-bit activations for MXFP4 --------------------------------------------- */

/* x rounded through a Q8_0 block with an f16 scale (what llama.cpp's MXFP4 product sees): per 32
 * values, d = amax / 127, q = round-half-even(x / d) with the reciprocal of d, then q · f16(d). */
static inline CUDA_HD float cuda_q8h_value(float x, float amax)
{
    float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    return rintf(x * id) * cuda_f16_to_f32(cuda_f32_to_f16(d));
}

/* In place over n / 32 blocks of 32 values: one warp per block, a lane per value. */
static __global__ void cuda__q8h_k(float *x, int64_t n_blocks)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t b = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); b < n_blocks; b += warps) {
        float v = x[b * 32 + lane];
        float amax = cuda__warp_max(fabsf(v));
        x[b * 32 + lane] = cuda_q8h_value(v, amax);
    }
}

#endif
