/*
 * qmatvec_kernels.h — the matrix-vector kernel of the quantised weight types (Q8_0, the legacy
 * and K-quants, IQ4_NL, IQ4_XS), whose blocks stay on the device as the file stores them: the
 * decode GEMV. One warp per output row: lane l decodes the 8-weight runs l, l + 32, … of the row
 * (cuda_q_dequant8: the runs of neighbouring lanes are neighbouring bytes, so a warp reads the
 * row's blocks in contiguous spans) and multiplies them with the activations of up to
 * CUDA_QGEMV_MAX_ROWS rows; the 32 partial sums of each row are reduced with warp shuffles. The
 * weights are streamed once per step whatever the number of rows.
 *
 * Kept apart from its launcher (cuda/qmatvec.cu) so that the same source also compiles against
 * the CPU emulation of cuda/check/emu_cuda.h, which checks it without a GPU
 * (cuda/check/quant_emu.cc). Expects the CUDA built-ins.
 */
#ifndef KVSERVE_CUDA_QMATVEC_KERNELS_H
#define KVSERVE_CUDA_QMATVEC_KERNELS_H

#include "cuda/device.h"
#include "cuda/launch.h"
#include "cuda/quant_formats.h"

/* The GEMV's block: 4 warps (it runs up to CUDA_QGEMV_MAX_ROWS rows, quant_formats.h). */
#define CUDA_QGEMV_THREADS 128

/* out[r][o] = Σ_i W[o][i] · x[r][i] (+ bias[o]) for n_rows ≤ CUDA_QGEMV_MAX_ROWS rows; one warp
 * per output o = blockIdx.x · 4 + warp. T is the weight type (a cuda_q_is_quant type); X and O
 * the element types of x and out (f32, or the activations'). */
template <int T, typename X, typename O>
static __global__ void __launch_bounds__(CUDA_QGEMV_THREADS)
    cuda__qgemv_k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t n_out, const X *x, int n_rows,
                  const float *bias, O *out)
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
            const X *xr = x + (int64_t)r * n_in + i0;
#pragma unroll
            for (int k = 0; k < 8; k++) acc[r] += v[k] * cuda__ld(xr[k]);
        }
    }
#pragma unroll
    for (int r = 0; r < CUDA_QGEMV_MAX_ROWS; r++) {
        if (r >= n_rows) break;
        float s = acc[r];
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) out[(int64_t)r * n_out + o] = cuda__st<O>(s + (bias ? bias[o] : 0.0f));
    }
}

#endif
