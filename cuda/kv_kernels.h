/*
 * kv_kernels.h — device code both the attention kernels (attn_kernels.h) and the K/V store
 * (kernels.cu) need: warp reductions and the quantising store of int8 / fp8 rows. Header-only
 * and free of kernels (__global__), so that it also compiles under the CPU emulation of
 * cuda/check/emu_cuda.h, which checks the store without a GPU (cuda/check/attn_emu.cc).
 *
 * Expects the CUDA built-ins (or their emulation).
 */
#ifndef KVSERVE_CUDA_KV_KERNELS_H
#define KVSERVE_CUDA_KV_KERNELS_H

#include "cuda/kv_layout.h"

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

/* ---- the quantising K/V store --------------------------------------------------------------- */

template <typename T> static __device__ __forceinline__ T cuda__kv_encode(float x, float inv);
template <> __device__ __forceinline__ int8_t cuda__kv_encode<int8_t>(float x, float inv)
{
    return kv_i8_encode(x, inv);
}
template <> __device__ __forceinline__ uint8_t cuda__kv_encode<uint8_t>(float x, float inv)
{
    return kv_e4m3_encode(x * inv);
}

/* Quantises one token's K or V row x [n_kv_heads][head_dim] into slot `slot` of the (layer, kind)
 * plane `plane` of a quantised arena (T = int8_t: int8 codes, uint8_t: e4m3 codes), by the rule
 * of cache/kv.h: one warp per kv head finds the head's largest magnitude, lane 0 writes the f16
 * scale after the tile's values, the lanes write the codes. Every thread of the block calls it
 * (blockDim.x a multiple of 32). */
template <typename T>
static __device__ void cuda__store_q_row(const float *x, T *plane, cuda_kv_layout l, int32_t slot)
{
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int dtype = sizeof(T) == 1 && (T)-1 < (T)0 ? KV_I8 : KV_FP8;
    const int32_t blk = slot / l.block_size;
    const int off = slot % l.block_size;
    for (int h = threadIdx.x >> 5; h < l.n_kv_heads; h += nw) {
        const float *xh = x + (int64_t)h * l.head_dim;
        float amax = 0.0f;
        for (int d = lane; d < l.head_dim; d += 32) amax = fmaxf(amax, fabsf(xh[d]));
        amax = cuda__warp_max(amax);
        float inv;
        uint16_t sc = cuda_kv_scale(dtype, amax, &inv);
        int64_t t = cuda_kv_tile_index(&l, 0, 0, blk, h);
        T *row = plane + t + (int64_t)off * l.head_dim;
        for (int d = lane; d < l.head_dim; d += 32) row[d] = cuda__kv_encode<T>(xh[d], inv);
        if (lane == 0) {
            uint8_t *p = (uint8_t *)(plane + cuda_kv_scale_index(&l, 0, 0, blk, h, off));
            p[0] = (uint8_t)(sc & 0xffu);
            p[1] = (uint8_t)(sc >> 8);
        }
    }
}

#endif
