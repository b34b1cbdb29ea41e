/*
 * quant_kernels.h — the CUDA kernels of the quantised weight types (Q8_0, the legacy and
 * K-quants, IQ4_NL, IQ4_XS), whose blocks stay on the device exactly as the file stores them.
 * Kept apart from their launchers (cuda/quant.cu) so that the same source also compiles against
 * the CPU emulation of the CUDA built-ins (cuda/check/emu_cuda.h), which checks them without a
 * GPU (cuda/check/quant_emu.cc).
 *
 *  - cuda__qgemv_k: the decode GEMV. One warp per output row: lane l decodes the 8-weight runs
 *    l, l + 32, … of the row (cuda_q_dequant8: the runs of neighbouring lanes are neighbouring
 *    bytes, so a warp reads the row's blocks in contiguous spans) and multiplies them with the
 *    activations of up to CUDA_QGEMV_MAX_ROWS rows; the 32 partial sums of each row are reduced
 *    with warp shuffles. The weights are streamed once per step whatever the number of rows.
 *  - cuda__qdeq_k: decodes rows of a matrix into F16 (the prefill path: cuBLAS then multiplies
 *    the F16 tile on tensor cores) or F32.
 *  - cuda__qembed_k: the embedding rows of a batch's tokens, as f32.
 *
 * Included by cuda/quant.cu and cuda/kernels.cu (after cuda/internal.h) and by
 * cuda/check/quant_emu.cc (after the emulation header). Expects the CUDA built-ins.
 */
#ifndef KVSERVE_CUDA_QUANT_KERNELS_H
#define KVSERVE_CUDA_QUANT_KERNELS_H

#include "cuda/launch.h"
#include "cuda/quant_formats.h"

/* The GEMV's block: 4 warps (it runs up to CUDA_QGEMV_MAX_ROWS rows, quant_formats.h). */
#define CUDA_QGEMV_THREADS 128

/* out[r][o] = Σ_i W[o][i] · x[r][i] (+ bias[o]) for n_rows ≤ CUDA_QGEMV_MAX_ROWS rows; one warp
 * per output o = blockIdx.x · 4 + warp. T is the weight type (a cuda_q_is_quant type). */
template <int T>
static __global__ void __launch_bounds__(CUDA_QGEMV_THREADS)
    cuda__qgemv_k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t n_out, const float *x, int n_rows,
                  const float *bias, float *out)
{
    const int lane = threadIdx.x & 31;
    const int64_t o = (int64_t)blockIdx.x * (CUDA_QGEMV_THREADS / 32) + (threadIdx.x >> 5);
    if (o >= n_out) return; /* the whole warp: o is the same for its 32 lanes */
    const uint8_t *row = w + (size_t)o * row_bytes;
    float acc[CUDA_QGEMV_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < CUDA_QGEMV_MAX_ROWS; r++) acc[r] = 0.0f;
    for (int64_t i0 = (int64_t)lane * 8; i0 < n_in; i0 += 32 * 8) {
        float v[8];
        cuda_q_dequant8(T, row, i0, v);
#pragma unroll
        for (int r = 0; r < CUDA_QGEMV_MAX_ROWS; r++) {
            if (r >= n_rows) break;
            const float *xr = x + (int64_t)r * n_in + i0;
#pragma unroll
            for (int k = 0; k < 8; k++) acc[r] += v[k] * xr[k];
        }
    }
#pragma unroll
    for (int r = 0; r < CUDA_QGEMV_MAX_ROWS; r++) {
        if (r >= n_rows) break;
        float s = acc[r];
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) out[(int64_t)r * n_out + o] = s + (bias ? bias[o] : 0.0f);
    }
}

/* Rows [r0, r0 + n_rows) of a matrix of type T (row_bytes apart, n_in weights each) decoded into
 * dst [n_rows][n_in], F16 bits (f16 = 1) or f32: a grid-stride loop over 8-weight runs. */
template <int T>
static __global__ void cuda__qdeq_k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t n_rows,
                                    void *dst, int f16)
{
    int64_t n8 = n_rows * (n_in / 8);
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n8; g += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = g / (n_in / 8), i0 = g % (n_in / 8) * 8;
        float v[8];
        cuda_q_dequant8(T, w + (size_t)(r0 + r) * row_bytes, i0, v);
        for (int k = 0; k < 8; k++) {
            int64_t e = r * n_in + i0 + k;
            if (f16) ((uint16_t *)dst)[e] = cuda_f32_to_f16(v[k]);
            else ((float *)dst)[e] = v[k];
        }
    }
}

/* out[t][:] = row tokens[t] of the embedding matrix (type T, dim weights a row), one block per
 * token; token ids are checked by the engine before they reach a backend. */
template <int T>
static __global__ void cuda__qembed_k(const uint8_t *emb, size_t row_bytes, int64_t dim, const int32_t *tokens,
                                      float *out)
{
    const uint8_t *row = emb + (size_t)tokens[blockIdx.x] * row_bytes;
    float *o = out + (int64_t)blockIdx.x * dim;
    for (int64_t i0 = (int64_t)threadIdx.x * 8; i0 < dim; i0 += (int64_t)blockDim.x * 8) {
        float v[8];
        cuda_q_dequant8(T, row, i0, v);
        for (int k = 0; k < 8; k++) o[i0 + k] = v[k];
    }
}

/* Calls F<T>(args) for the template instance of a runtime type: the one switch every launcher
 * (and the emulator) uses. */
#define CUDA_Q_DISPATCH(type, F, ...)                                                          \
    do {                                                                                       \
        switch (type) {                                                                        \
        case DT_Q4_0: F<DT_Q4_0>(__VA_ARGS__); break;                                          \
        case DT_Q4_1: F<DT_Q4_1>(__VA_ARGS__); break;                                          \
        case DT_Q5_0: F<DT_Q5_0>(__VA_ARGS__); break;                                          \
        case DT_Q5_1: F<DT_Q5_1>(__VA_ARGS__); break;                                          \
        case DT_Q8_0: F<DT_Q8_0>(__VA_ARGS__); break;                                          \
        case DT_IQ4_NL: F<DT_IQ4_NL>(__VA_ARGS__); break;                                      \
        case DT_Q2_K: F<DT_Q2_K>(__VA_ARGS__); break;                                          \
        case DT_Q3_K: F<DT_Q3_K>(__VA_ARGS__); break;                                          \
        case DT_Q4_K: F<DT_Q4_K>(__VA_ARGS__); break;                                          \
        case DT_Q5_K: F<DT_Q5_K>(__VA_ARGS__); break;                                          \
        case DT_Q6_K: F<DT_Q6_K>(__VA_ARGS__); break;                                          \
        default: F<DT_IQ4_XS>(__VA_ARGS__); break;                                             \
        }                                                                                      \
    } while (0)

#endif
