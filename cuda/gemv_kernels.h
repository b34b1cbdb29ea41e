/*
 * gemv_kernels.h — the dense matrix-vector kernels of decode: out = x · Wᵀ for 1 to
 * CUDA_GEMV_MAX_ROWS rows of activations and an F32, F16 or BF16 weight matrix, reading every
 * weight once for all the rows. A decode step is bound by the bytes of its weights, so the
 * kernels are built to stream them at the memory's rate:
 *
 *   - each lane loads 16 bytes of a weight row at a time (8 bf16 / f16 or 4 f32), the 32 lanes of
 *     a warp 512 contiguous bytes, and keeps CUDA_GEMV_LOADS such loads in flight before it uses
 *     the first;
 *   - a warp computes NO outputs (NO × G weight rows: G = 2 when each output needs a gate row and
 *     an up row) for all R activation rows, so every activation vector loaded (from L1) serves NO
 *     weight rows;
 *   - when a matrix has too few rows to give every SM enough warps, the K dimension of each
 *     output is split between ks warps of the block (split-K), reduced through shared memory.
 *
 * Modes: plain (out = x · Wᵀ + bias, optionally cap · tanh(out / cap): the LM head), and GLU
 * (out = act(x · Wgateᵀ + bg) × (x · Wupᵀ + bu) with SiLU or GELU(tanh), gate and up rows from
 * one stacked matrix or two). The output is f32 or the activation type.
 *
 * Layout of the work (cuda_gemv_plan): a block of CUDA_GEMV_THREADS threads = 4 warps = 4 / ks
 * output groups of NO outputs; warp kw of a group reads the 16-byte chunks kw·32 + lane,
 * (kw + ks)·32 + lane, ... of each of its rows, so each warp's loads are contiguous 512-byte runs.
 * A row whose length is not a whole number of 16-byte chunks (rare shapes) takes the scalar
 * kernel, one warp per output.
 *
 * Kept apart from its launcher (cuda/gemv.cu) so that the same source also runs under the CPU
 * emulation of cuda/check/emu_cuda.h (cuda/check/dense_emu.cc). Expects the CUDA built-ins (or
 * their emulation) and __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_GEMV_KERNELS_H
#define KVSERVE_CUDA_GEMV_KERNELS_H

#include "cuda/device.h"
#include "cuda/gemv_plan.h"
#include "engine/backend.h"

/* One launch's arguments (cuda_gemv_plan decides r, no, ks and the grid). */
typedef struct cuda_gemv_args {
    const void *w;        /* [n_out][n_in] (GLU: the gate rows) of the weight type */
    const void *w2;       /* GLU: the up rows [n_out][n_in], same type (w + n_out rows when stacked) */
    int64_t n_in;         /* inputs per row */
    int64_t n_out;        /* outputs per activation row */
    const void *x;        /* [n_rows][n_in] activations */
    int n_rows;           /* 1 .. CUDA_GEMV_MAX_ROWS */
    const float *bias;    /* [n_out] (GLU: the gate's), or NULL */
    const float *bias2;   /* GLU: the up's [n_out], or NULL */
    void *out;            /* [n_rows][n_out] */
    float softcap;        /* plain: > 0 caps the outputs (cap · tanh(v / cap)); 0 none */
    int gelu;             /* GLU: 1 GELU(tanh), 0 SiLU */
    int ks;               /* warps splitting each output's K: 1, 2 or 4 */
} cuda_gemv_args;

/* The output value of one (output, row) from its dot products s[0] (and the up's s[1]). */
template <int G>
static __device__ __forceinline__ float cuda__gemv_epi(const cuda_gemv_args &a, int64_t o, float s0, float s1)
{
    float v = s0 + (a.bias ? a.bias[o] : 0.0f);
    if (G == 2) {
        float u = s1 + (a.bias2 ? a.bias2[o] : 0.0f);
        return (a.gelu ? be_gelu_tanh(v) : v / (1.0f + expf(-v))) * u;
    }
    return a.softcap > 0.0f ? be_softcap(v, a.softcap) : v;
}

/* One round of loads: raw[u][j] = the 16-byte chunk c0 + u · stride of weight row wr[j] (zeros
 * past nc chunks). */
template <int NW, int U>
static __device__ __forceinline__ void cuda__gemv_round(const void *const *wr, int64_t c0, int stride, int64_t nc,
                                                        uint4 (*raw)[NW])
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t c = c0 + (int64_t)u * stride;
#pragma unroll
        for (int j = 0; j < NW; j++) {
            if (c < nc) {
                raw[u][j] = ((const uint4 *)wr[j])[c];
            } else {
                raw[u][j].x = raw[u][j].y = raw[u][j].z = raw[u][j].w = 0u;
            }
        }
    }
}

/* out[r][o] for o in this warp group's NO outputs and r < n_rows ≤ R. W, X, O: the weight,
 * activation and output element types; G = 2 for GLU (a gate and an up row per output). */
template <typename W, typename X, typename O, int R, int G>
static __global__ void __launch_bounds__(CUDA_GEMV_THREADS) cuda__gemv_k(cuda_gemv_args a)
{
    constexpr int V = 16 / (int)sizeof(W);        /* elements per 16-byte load */
    constexpr int NO = CUDA_GEMV_OUTPUTS(R, G);   /* outputs per warp group */
    constexpr int NW = NO * G;                    /* weight rows per warp group */
    constexpr int U = CUDA_GEMV_LOADS / NW > 0 ? CUDA_GEMV_LOADS / NW : 1; /* chunks per row in flight */
    constexpr int NP = NO * G * R;                /* partial sums per warp */
    static __shared__ float part[CUDA_GEMV_THREADS / 32][NP];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ks = a.ks;
    const int kw = warp % ks, grp = warp / ks;
    const int64_t o0 = ((int64_t)blockIdx.x * (CUDA_GEMV_THREADS / 32 / ks) + grp) * NO;
    const int64_t nc = a.n_in / V;
    const void *wr[NW];
    cuda__pdl_trigger(); /* the next kernel may launch: it waits for this one before reading */
#pragma unroll
    for (int j = 0; j < NW; j++) { /* rows past n_out read the last one; their sums are dropped */
        int64_t o = o0 + j / G < a.n_out ? o0 + j / G : a.n_out - 1;
        wr[j] = (const W *)(j % G ? a.w2 : a.w) + o * a.n_in;
    }
    float acc[NW][R];
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[j][r] = 0.0f;
    const X *x = (const X *)a.x;
    const int64_t step = (int64_t)32 * ks * U;
    uint4 raw[U][NW];
    cuda__gemv_round<NW, U>(wr, (int64_t)kw * 32 + lane, 32 * ks, nc, raw);
    /* The weights do not depend on the kernels before this one: their first round is in flight
     * before the wait for the previous kernel's output (programmatic dependent launch, sm_90:
     * the launch itself and the previous kernel's tail overlap this kernel's first loads). */
    cuda__pdl_wait();
    for (int64_t base = (int64_t)kw * 32 + lane; base < nc; base += step) {
        uint4 cur[U][NW];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < NW; j++) cur[u][j] = raw[u][j];
        cuda__gemv_round<NW, U>(wr, base + step, 32 * ks, nc, raw); /* the next round's loads first */
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t c = base + (int64_t)u * 32 * ks;
            if (c >= nc) break;
            float wv[NW][V];
#pragma unroll
            for (int j = 0; j < NW; j++) cuda__unpack16<W>(cur[u][j], wv[j]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= a.n_rows) break;
                float xv[V];
                cuda__ldv<X, V>(x + (int64_t)r * a.n_in + c * V, xv);
#pragma unroll
                for (int j = 0; j < NW; j++)
#pragma unroll
                    for (int e = 0; e < V; e++) acc[j][r] += wv[j][e] * xv[e];
            }
        }
    }
    /* each warp's sums, then the ks warps of a group through shared memory */
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= a.n_rows) break;
            float s = cuda__warp_sum(acc[j][r]);
            if (lane == (j * R + r) % 32) part[warp][j * R + r] = s;
        }
    __syncthreads();
    if (kw != 0) return;
    for (int p = lane; p < NO * R; p += 32) {
        int o = p / R, r = p % R;
        if (o0 + o >= a.n_out || r >= a.n_rows) continue;
        float s[2] = {0.0f, 0.0f};
#pragma unroll
        for (int g = 0; g < G; g++)
            for (int k = 0; k < ks; k++) s[g] += part[warp + k][(o * G + g) * R + r];
        ((O *)a.out)[(int64_t)r * a.n_out + o0 + o] = cuda__st<O>(cuda__gemv_epi<G>(a, o0 + o, s[0], s[1]));
    }
}

/* The same for rows that are not whole 16-byte chunks: one warp per output, element loads. */
template <typename W, typename X, typename O, int G>
static __global__ void __launch_bounds__(CUDA_GEMV_THREADS) cuda__gemv_scalar_k(cuda_gemv_args a)
{
    const int lane = threadIdx.x & 31;
    const int64_t o = (int64_t)blockIdx.x * (CUDA_GEMV_THREADS / 32) + (threadIdx.x >> 5);
    if (o >= a.n_out) return; /* the whole warp */
    const W *wr[2] = {(const W *)a.w + o * a.n_in, (const W *)(G == 2 ? a.w2 : a.w) + o * a.n_in};
    const X *x = (const X *)a.x;
    cuda__pdl_wait();
    float acc[2][CUDA_GEMV_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < CUDA_GEMV_MAX_ROWS; r++) acc[0][r] = acc[1][r] = 0.0f;
    for (int64_t i = lane; i < a.n_in; i += 32) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            float wv = cuda__ld(wr[g][i]);
#pragma unroll
            for (int r = 0; r < CUDA_GEMV_MAX_ROWS; r++) {
                if (r >= a.n_rows) break;
                acc[g][r] += wv * cuda__ld(x[(int64_t)r * a.n_in + i]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < CUDA_GEMV_MAX_ROWS; r++) {
        if (r >= a.n_rows) break;
        float s0 = cuda__warp_sum(acc[0][r]), s1 = G == 2 ? cuda__warp_sum(acc[1][r]) : 0.0f;
        if (lane == 0) ((O *)a.out)[(int64_t)r * a.n_out + o] = cuda__st<O>(cuda__gemv_epi<G>(a, o, s0, s1));
    }
}

#endif
