/*
 * qgemm_kernels.h — the kernel of the quantised GEMM (prefill on quantised weights): rows of a
 * matrix decoded into F16 (which cuBLAS then multiplies on tensor cores) or F32. Kept apart from
 * its launcher (cuda/qgemm.cu) so that the same source also compiles against the CPU emulation of
 * cuda/check/emu_cuda.h, which checks it without a GPU (cuda/check/quant_emu.cc). Expects the
 * CUDA built-ins.
 */
#ifndef KVSERVE_CUDA_QGEMM_KERNELS_H
#define KVSERVE_CUDA_QGEMM_KERNELS_H

#include "cuda/formats.h"
#include "cuda/quant_formats.h"

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

#endif
