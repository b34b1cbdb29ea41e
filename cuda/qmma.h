/*
 * qmma.h — device code the integer quantised-weight kernels share (the activation quantiser of
 * qact_kernels.h, the matrix-vector mmvq of qmatvec_kernels.h and the GEMM mmq of
 * qgemm_kernels.h): loads and stores of the activation element types, and the two steps of the
 * integer product of cuda/quant_int.h on one 16 × 8 tile (16 weight rows, 8 activation rows):
 *
 *   cuda__qmma_chunk   one chunk of 32 weights: the mma of the codes with the activations
 *                      (k32, or two k16 for the types whose scales change every 16), scaled by
 *                      the integer sub-block scales into ci, and the mins' mma into cm;
 *   cuda__qmma_block   at the end of a weight block: acc += dx · (D · ci − DM · cm) in f32.
 *
 * Lane l = 4 g + t of a warp holds weight rows g and g + 8 and activation columns 2t, 2t + 1 of
 * the tile (the mma accumulator layout, cuda/imma.h): ci[i], cm[i], acc[i] for i = 0..3 are
 * (row g, col 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
 *
 * Header-only device code, no kernels; expects the CUDA built-ins (or their emulation) and
 * __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_QMMA_H
#define KVSERVE_CUDA_QMMA_H

#include "cuda/formats.h"
#include "cuda/imma.h"
#include "cuda/quant_int.h"

/* Eight bytes as two words, 8-byte aligned: one 64-bit load or store. */
struct alignas(8) cuda__u32x2 {
    uint32_t x, y;
};

/* ---- activation element types ------------------------------------------------------------ */

/* An activation as f32 (exact for all three types). The 16-bit ones go through their bits, which
 * the CPU emulation keeps, so that every instantiation runs there too. */
static __device__ __forceinline__ float cuda__qa_in(float v)
{
    return v;
}
static __device__ __forceinline__ float cuda__qa_in(__nv_bfloat16 v)
{
#ifdef __CUDACC__
    return __bfloat162float(v);
#else
    return cuda_bf16_to_f32(v.x);
#endif
}
static __device__ __forceinline__ float cuda__qa_in(__half v)
{
#ifdef __CUDACC__
    return __half2float(v);
#else
    return cuda_f16_to_f32(v.x);
#endif
}

/* f32 → the activation type, rounding to nearest even. */
template <typename O> static __device__ __forceinline__ O cuda__qa_out(float f);
template <> __device__ __forceinline__ float cuda__qa_out<float>(float f)
{
    return f;
}
template <> __device__ __forceinline__ __nv_bfloat16 cuda__qa_out<__nv_bfloat16>(float f)
{
#ifdef __CUDACC__
    return __float2bfloat16_rn(f);
#else
    __nv_bfloat16 h = {cuda_f32_to_bf16(f)};
    return h;
#endif
}
template <> __device__ __forceinline__ __half cuda__qa_out<__half>(float f)
{
#ifdef __CUDACC__
    return __float2half_rn(f);
#else
    __half h = {cuda_f32_to_f16(f)};
    return h;
#endif
}

/* ---- the tile steps ---------------------------------------------------------------------- */

/* An activation block's scale as type T's product takes it: MXFP4's rounded to f16 (llama.cpp's
 * 8-bit activations for it carry an f16 scale; the integers are the same), the others' as is. */
template <int T> static __device__ __forceinline__ float cuda__qmma_dx(float d)
{
    if (T != DT_MXFP4) return d;
#ifdef __CUDA_ARCH__
    return __half2float(__float2half_rn(d));
#else
    return cuda_f16_to_f32(cuda_f32_to_f16(d));
#endif
}

/* Four copies of byte v (0..255). */
static __device__ __forceinline__ uint32_t cuda__qmma_rep(uint32_t v)
{
    return v * 0x01010101u;
}

/* One chunk of a 16 × 8 tile: a = the codes of rows g, g + 8 in the m16n8k32 A layout
 * (cuda_qi_ints of row g gives a[0], a[2]; of row g + 8, a[1], a[3]), sub_lo / sub_hi their sub
 * words (cuda_qi_sub), b = the activations of column g (b[0] k 4t.., b[1] k 16+4t..).
 * ci += s · Σ q·a per half (with s = 1 the mma accumulates into ci directly), cm += m · Σ a. */
template <int T>
static __device__ __forceinline__ void cuda__qmma_chunk(const uint32_t a[4], uint32_t sub_lo, uint32_t sub_hi,
                                                        const uint32_t b[2], int ci[4], int cm[4])
{
    if (cuda_q_split16(T)) {
        int i0[4] = {0, 0, 0, 0}, i1[4] = {0, 0, 0, 0};
        const uint32_t a0[2] = {a[0], a[1]}, a1[2] = {a[2], a[3]};
        cuda__mma_s8_16816(i0, a0, b[0]);
        cuda__mma_s8_16816(i1, a1, b[1]);
        int s0l = cuda_qi_s(sub_lo, 0), s1l = cuda_qi_s(sub_lo, 1);
        int s0h = cuda_qi_s(sub_hi, 0), s1h = cuda_qi_s(sub_hi, 1);
        ci[0] += s0l * i0[0] + s1l * i1[0];
        ci[1] += s0l * i0[1] + s1l * i1[1];
        ci[2] += s0h * i0[2] + s1h * i1[2];
        ci[3] += s0h * i0[3] + s1h * i1[3];
    } else if (cuda_q_act_block(T) == 32) {
        cuda__mma_s8_16832(ci, a, b); /* legacy blocks: s = 1 */
    } else {
        int i[4] = {0, 0, 0, 0};
        cuda__mma_s8_16832(i, a, b);
        int sl = cuda_qi_s(sub_lo, 0), sh = cuda_qi_s(sub_hi, 0);
        ci[0] += sl * i[0];
        ci[1] += sl * i[1];
        ci[2] += sh * i[2];
        ci[3] += sh * i[3];
    }
    if (cuda_q_has_min(T)) {
        const uint32_t am[4] = {cuda__qmma_rep(sub_lo >> 16 & 0xFF), cuda__qmma_rep(sub_hi >> 16 & 0xFF),
                                cuda__qmma_rep(sub_lo >> 24), cuda__qmma_rep(sub_hi >> 24)};
        cuda__mma_s8_16832(cm, am, b);
    }
}

/* The end of a weight block: acc += dx[col] · (D[row] · ci − DM[row] · cm), then ci = cm = 0.
 * d_lo / dm_lo are D, DM of row g, d_hi / dm_hi of row g + 8, dx0 / dx1 the activation scales of
 * columns 2t, 2t + 1. Legacy blocks' sums stay below 2^22 (32 · 127 · 127) and convert exactly
 * on the full-rate units; a super-block's may not, and converts once per 256 weights. */
template <int T>
static __device__ __forceinline__ void cuda__qmma_block(float d_lo, float dm_lo, float d_hi, float dm_hi, float dx0,
                                                        float dx1, int ci[4], int cm[4], float acc[4])
{
    const float d[4] = {d_lo, d_lo, d_hi, d_hi}, dm[4] = {dm_lo, dm_lo, dm_hi, dm_hi}, dx[4] = {dx0, dx1, dx0, dx1};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float fi = cuda_q_act_block(T) == 32 ? cuda__i2f_small(ci[i]) : (float)ci[i];
        float v = d[i] * fi;
        if (cuda_q_has_min(T)) v -= dm[i] * (cuda_q_act_block(T) == 32 ? cuda__i2f_small(cm[i]) : (float)cm[i]);
        acc[i] += dx[i] * v;
        ci[i] = 0;
        cm[i] = 0;
    }
}

#endif
