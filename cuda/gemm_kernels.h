/*
 * gemm_kernels.h — the kernels around the dense GEMMs, which cuBLAS runs: the activations
 * converted to a weight's 16-bit type, the bias added to the output, and a model tensor's rows
 * converted between f32, f16 and bf16 at upload. Kept apart from their launchers (cuda/gemm.cu)
 * so that they compile under the CPU emulation of cuda/check/emu_cuda.h too.
 *
 * Expects the CUDA built-ins (or their emulation) and __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_GEMM_KERNELS_H
#define KVSERVE_CUDA_GEMM_KERNELS_H

#include "cuda/device.h"
#include "cuda/formats.h"
#include "model/dtype.h"

/* y[i] = x[i] converted from S to D (float, __half or __nv_bfloat16), rounding to nearest even:
 * activations into the type a cuBLAS GEMM takes. */
template <typename S, typename D> static __global__ void cuda__conv_k(const S *x, D *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = cuda__st<D>(cuda__ld(x[i]));
}

/* out[i] (+)= bias[i % n_out] for i < n: src NULL adds the bias in place; else out[i] = src[i] +
 * bias (bias NULL: + 0), the f32 product of a GEMM into the output's type O. */
template <typename O>
static __global__ void cuda__bias_k(const float *src, O *out, const float *bias, int64_t n_out, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = src ? src[i] : cuda__ld(out[i]);
        out[i] = cuda__st<O>(v + (bias ? bias[i % n_out] : 0.0f));
    }
}

/* The value of element i of the random tensor of seed: uniform in [-scale, scale), from a hash of
 * (seed, i), the same on the host and the device (the GPU check's weights made on the device). */
static inline CUDA_HD float cuda_random_value(uint64_t seed, uint64_t i, float scale)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f) * scale;
}

/* Element (r, i) of a raw float tensor of type src_type (rows row_bytes apart). */
static __device__ float cuda__raw_value(const uint8_t *src, int src_type, size_t row_bytes, int64_t r, int64_t i)
{
    const uint8_t *row = src + (size_t)r * row_bytes;
    switch (src_type) {
    case DT_F32: return ((const float *)row)[i];
    case DT_F16: return cuda_f16_to_f32(((const uint16_t *)row)[i]);
    default: return cuda_bf16_to_f32(((const uint16_t *)row)[i]);
    }
}

static __device__ void cuda__store_as(void *dst, int dst_type, int64_t e, float v)
{
    if (dst_type == DT_F32) ((float *)dst)[e] = v;
    else if (dst_type == DT_BF16) ((uint16_t *)dst)[e] = cuda_f32_to_bf16(v);
    else ((uint16_t *)dst)[e] = cuda_f32_to_f16(v);
}

/* Element e of the dst tensor (type dst_type: DT_F32, DT_F16 or DT_BF16, n_in a row, n in all)
 * from element (e / n_in, e % n_in) of src. */
static __global__ void cuda__convert_k(const uint8_t *src, int src_type, size_t row_bytes, int64_t n_in,
                                       int64_t n, void *dst, int dst_type)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        cuda__store_as(dst, dst_type, e, cuda__raw_value(src, src_type, row_bytes, e / n_in, e % n_in));
}

/* dst [n] of dst_type (DT_F32, DT_F16 or DT_BF16) = cuda_random_value(seed, i, scale). */
static __global__ void cuda__random_k(void *dst, int dst_type, int64_t n, uint64_t seed, float scale)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cuda__store_as(dst, dst_type, i, cuda_random_value(seed, (uint64_t)i, scale));
}

#endif
