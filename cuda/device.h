/*
 * device.h — device code that several kernel families share: loads and stores of the element
 * types as f32, and warp- and block-wide reductions. Header-only and free of kernels
 * (__global__), so that it compiles under the CPU emulation of cuda/check/emu_cuda.h as well
 * as under nvcc.
 *
 * Included by the kernel headers (cuda/NAME_kernels.h). Expects the CUDA built-ins (or their
 * emulation) and __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_DEVICE_H
#define KVSERVE_CUDA_DEVICE_H

/* ---- element loads and stores ------------------------------------------------------------ */

static __device__ __forceinline__ float cuda__ld(float v)
{
    return v;
}
static __device__ __forceinline__ float cuda__ld(__half v)
{
    return __half2float(v);
}
static __device__ __forceinline__ float cuda__ld(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T> static __device__ __forceinline__ T cuda__st(float f);
template <> __device__ __forceinline__ float cuda__st<float>(float f)
{
    return f;
}
template <> __device__ __forceinline__ __half cuda__st<__half>(float f)
{
    return __float2half_rn(f);
}
template <> __device__ __forceinline__ __nv_bfloat16 cuda__st<__nv_bfloat16>(float f)
{
    return __float2bfloat16_rn(f);
}

/* ---- reductions -------------------------------------------------------------------------- */

static __device__ __forceinline__ float cuda__warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float cuda__warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Block-wide sum (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result. */
static __device__ inline float cuda__block_sum(float v)
{
    static __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = lane < nw ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
