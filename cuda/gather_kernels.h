/*
 * gather_kernels.h — kernels that copy whole rows by index: the embedding rows of a batch's tokens
 * (f32 / f16 / bf16 tables, and the quantised types decoded to f32) and the hidden rows whose
 * logits are wanted. One block per row. Kept apart from their launchers (cuda/gather.cu) so that
 * they compile under the CPU emulation of cuda/check/emu_cuda.h too (cuda/check/quant_emu.cc
 * checks the quantised embedding).
 *
 * Expects the CUDA built-ins (or their emulation) and __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_GATHER_KERNELS_H
#define KVSERVE_CUDA_GATHER_KERNELS_H

#include "cuda/device.h"
#include "cuda/quant_formats.h"

/* out[t][:] = row tokens[t] of an f32 / f16 / bf16 embedding table (dim values a row), one block
 * per token. */
template <typename T>
static __global__ void cuda__embed_k(const T *emb, int64_t dim, const int32_t *tokens, float *out)
{
    int t = blockIdx.x;
    const T *row = emb + (int64_t)tokens[t] * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[(int64_t)t * dim + i] = cuda__ld(row[i]);
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

/* out[j][:] = x[rows[j]][:] (dim floats a row), one block per gathered row. */
static __global__ void cuda__gather_k(const float *x, int dim, const int32_t *rows, float *out)
{
    int j = blockIdx.x;
    const float *src = x + (int64_t)rows[j] * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[(int64_t)j * dim + i] = src[i];
}

#endif
