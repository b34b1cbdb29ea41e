/*
 * device.h — device code that several kernel families share: loads and stores of the element
 * types as f32, and warp- and block-wide reductions. Header-only and free of kernels
 * (__global__), so that it compiles under the CPU emulation of cuda/check/emu_cuda.h as well
 * as under nvcc.
 *
 * Included by the kernel headers (cuda/NAME_kernels.h). Expects the CUDA built-ins (or their
 * emulation) and __half / __nv_bfloat16.
 *
 * Activations: kernels that read or write them are templated on their element type A (float or
 * __nv_bfloat16: the backend's act_type, engine/backend.h) and load and store through cuda__ld /
 * cuda__st (one element) or cuda__ldv / cuda__stv (16-byte vectors); the arithmetic is f32.
 */
#ifndef KVSERVE_CUDA_DEVICE_H
#define KVSERVE_CUDA_DEVICE_H

#include <string.h>

#include "cuda/formats.h"

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

/* The 16-bit element types' pair loads: two consecutive elements (the first in the low half of
 * bits) as f32. bf16 is the top half of an f32, so its conversion is a shift. */
template <typename T> static __device__ __forceinline__ float2 cuda__cvt2(uint32_t bits);
template <> __device__ __forceinline__ float2 cuda__cvt2<__nv_bfloat16>(uint32_t bits)
{
    return make_float2(cuda_bits_f32(bits << 16), cuda_bits_f32(bits & 0xffff0000u));
}
template <> __device__ __forceinline__ float2 cuda__cvt2<__half>(uint32_t bits)
{
    __half2 h;
    memcpy(&h, &bits, 4);
    return __half22float2(h);
}

/* Two f32 values as a pair of the 16-bit type T (round to nearest even), first in the low half. */
template <typename T> static __device__ __forceinline__ uint32_t cuda__pack2(float a, float b);
template <> __device__ __forceinline__ uint32_t cuda__pack2<__nv_bfloat16>(float a, float b)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
template <> __device__ __forceinline__ uint32_t cuda__pack2<__half>(float a, float b)
{
    __half2 h = __floats2half2_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/* 32-bit words of 16 / 8 / 4-byte vectors, whichever width a load takes. */
static __device__ __forceinline__ void cuda__words(uint4 u, uint32_t *w)
{
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
}

/* The 16 / sizeof(T) elements of T in the 16 bytes u, as f32 (a 128-bit load's register). */
template <typename T> static __device__ __forceinline__ void cuda__unpack16(uint4 u, float *o)
{
    uint32_t w[4];
    cuda__words(u, w);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if constexpr (sizeof(T) == 4) {
            o[j] = cuda_bits_f32(w[j]);
        } else {
            float2 f = cuda__cvt2<T>(w[j]);
            o[2 * j] = f.x;
            o[2 * j + 1] = f.y;
        }
    }
}

/* o[0 .. N) = p[0 .. N) as f32, in the widest loads N elements of T allow: p must be aligned to
 * N × sizeof(T) when that is 8 or a multiple of 16 bytes (the 128-bit loads of the dense
 * kernels: 8 bf16 / f16 or 4 f32 per load); other widths load element by element. */
template <typename T, int N> static __device__ __forceinline__ void cuda__ldv(const T *p, float *o)
{
    constexpr int bytes = N * (int)sizeof(T);
    if constexpr (bytes % 16 == 0) {
#pragma unroll
        for (int c = 0; c < bytes / 16; c++) {
            uint32_t w[4];
            cuda__words(((const uint4 *)p)[c], w);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if constexpr (sizeof(T) == 4) {
                    o[c * 4 + j] = cuda_bits_f32(w[j]);
                } else {
                    float2 f = cuda__cvt2<T>(w[j]);
                    o[c * 8 + 2 * j] = f.x;
                    o[c * 8 + 2 * j + 1] = f.y;
                }
            }
        }
    } else if constexpr (bytes == 8) {
        uint2 u = *(const uint2 *)p;
        uint32_t w[2] = {u.x, u.y};
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if constexpr (sizeof(T) == 4) {
                o[j] = cuda_bits_f32(w[j]);
            } else {
                float2 f = cuda__cvt2<T>(w[j]);
                o[2 * j] = f.x;
                o[2 * j + 1] = f.y;
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; j++) o[j] = cuda__ld(p[j]);
    }
}

/* p[0 .. N) = v[0 .. N) as T (round to nearest even), in 16-byte stores where N × sizeof(T) is
 * a multiple of 16 (p then aligned to it). */
template <typename T, int N> static __device__ __forceinline__ void cuda__stv(T *p, const float *v)
{
    constexpr int bytes = N * (int)sizeof(T);
    if constexpr (bytes % 16 == 0) {
#pragma unroll
        for (int c = 0; c < bytes / 16; c++) {
            uint32_t w[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if constexpr (sizeof(T) == 4) w[j] = cuda_f32_bits(v[c * 4 + j]);
                else w[j] = cuda__pack2<T>(v[c * 8 + 2 * j], v[c * 8 + 2 * j + 1]);
            }
            uint4 u;
            u.x = w[0], u.y = w[1], u.z = w[2], u.w = w[3];
            ((uint4 *)p)[c] = u;
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; j++) p[j] = cuda__st<T>(v[j]);
    }
}

/* ---- programmatic dependent launch (sm_90) ------------------------------------------------ */

/* cuda__pdl_wait: waits until the kernels this one depends on have completed and their writes
 * are visible; a kernel launched with programmatic stream serialization (the sm_90 launchers)
 * may start before them and must call it before it reads their outputs (or writes memory they
 * read). cuda__pdl_trigger: lets the next kernel on the stream launch now (it still waits for
 * this one's completion in its cuda__pdl_wait). Both are no-ops before sm_90, for a kernel
 * launched without the attribute, and under the CPU emulation (which runs launches in order). */
static __device__ __forceinline__ void cuda__pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void cuda__pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
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

/* Split-K without a second launch: once a block has written its partition's partials, 1 for the
 * block whose partition is the last of `splits` to arrive at counter *sem (it resets the counter
 * to zero for the next launch) and 0 for the others. Every thread of the block calls it; for the
 * last block every partition's partials are visible on return (read them with __ldcg). */
static __device__ inline int cuda__split_last(int32_t *sem, int splits)
{
    static __shared__ int last;
    __threadfence(); /* this block's partials are visible before its count */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(sem, 1) == splits - 1;
        if (last) *sem = 0;
    }
    __syncthreads();
    int l = last;
    if (l) __threadfence();
    return l;
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
