/*
 * kv_kernels.h — the kernels of the K/V store: one token's K and V rows written into the paged
 * arena at its slot, as f32 / f16 / bf16 values or, for int8 and fp8 arenas, as codes with one
 * f16 scale per head vector (the rule of cache/kv.h); with RoPE, K is rotated first (the fused
 * rope + store of cuda_rope_store_kv). Kept apart from the launcher (cuda/kv.cu) so that the
 * same source compiles under the CPU emulation of cuda/check/emu_cuda.h, which checks the
 * quantising store without a GPU (cuda/check/attn_emu.cc).
 *
 * Expects the CUDA built-ins (or their emulation) and __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_KV_KERNELS_H
#define KVSERVE_CUDA_KV_KERNELS_H

#include "cuda/device.h"
#include "cuda/kv_layout.h"
#include "cuda/norm_rope_kernels.h"

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

/* Quantises head h of one token's K or V row, xh [head_dim] (of type S: f32 or activations), into
 * slot `slot` of the (layer, kind) plane `plane` of a quantised arena (T = int8_t: int8 codes,
 * uint8_t: e4m3 codes), by the rule of cache/kv.h: the warp finds the head's largest magnitude,
 * lane 0 writes the f16 scale after the tile's values, the lanes write the codes. Called by all
 * 32 lanes of a warp. */
template <typename T, typename S>
static __device__ void cuda__store_q_head(const S *xh, T *plane, const cuda_kv_layout &l, int32_t slot, int h)
{
    const int lane = threadIdx.x & 31;
    const int dtype = sizeof(T) == 1 && (T)-1 < (T)0 ? KV_I8 : KV_FP8;
    const int32_t blk = slot / l.block_size;
    const int off = slot % l.block_size;
    float amax = 0.0f;
    for (int d = lane; d < l.head_dim; d += 32) amax = fmaxf(amax, fabsf(cuda__ld(xh[d])));
    amax = cuda__warp_max(amax);
    float inv;
    uint16_t sc = cuda_kv_scale(dtype, amax, &inv);
    int64_t t = cuda_kv_tile_index(&l, 0, 0, blk, h);
    T *row = plane + t + (int64_t)off * l.head_dim;
    for (int d = lane; d < l.head_dim; d += 32) row[d] = cuda__kv_encode<T>(cuda__ld(xh[d]), inv);
    if (lane == 0) {
        uint8_t *p = (uint8_t *)(plane + cuda_kv_scale_index(&l, 0, 0, blk, h, off));
        p[0] = (uint8_t)(sc & 0xffu);
        p[1] = (uint8_t)(sc >> 8);
    }
}

/* Quantises one token's K or V row x [n_kv_heads][head_dim] (of type S) into slot `slot` of a
 * quantised plane: one warp per kv head (cuda__store_q_head). Every thread of the block calls it
 * (blockDim.x a multiple of 32). */
template <typename T, typename S>
static __device__ void cuda__store_q_row(const S *x, T *plane, cuda_kv_layout l, int32_t slot)
{
    const int nw = blockDim.x >> 5;
    for (int h = threadIdx.x >> 5; h < l.n_kv_heads; h += nw) cuda__store_q_head(x + (int64_t)h * l.head_dim, plane, l, slot, h);
}

/* ---- the store kernels: one block per token ------------------------------------------------ */

/* Writes token t's k and v rows (activations of type A) into the arena planes of one layer at
 * its slot; with rope (r.rope_dims > 0) k is rotated first, in place, and the rotated values are
 * stored. */
template <typename T, typename A>
static __global__ void cuda__store_kv_k(A *k, const A *v, T *kp, T *vp, const int32_t *slots, const int32_t *pos,
                                        cuda_kv_layout l, be_rope r, const float *ff)
{
    int t = blockIdx.x;
    int kv_dim = l.n_kv_heads * l.head_dim;
    A *kt = k + (int64_t)t * kv_dim;
    if (r.rope_dims > 0) {
        cuda__rope_row(kt, pos[t], r, ff);
        __syncthreads();
    }
    int32_t slot = slots[t];
    if (slot < 0) return;
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        int h = i / l.head_dim, d = i % l.head_dim;
        int64_t o = cuda_kv_slot_index(&l, 0, 0, slot, h, d);
        kp[o] = cuda__st<T>(cuda__ld(kt[i]));
        vp[o] = cuda__st<T>(cuda__ld(v[(int64_t)t * kv_dim + i]));
    }
}

/* The same for a quantised arena (T = int8_t or uint8_t codes, see cuda__store_q_row). */
template <typename T, typename A>
static __global__ void cuda__store_kv_q_k(A *k, const A *v, T *kp, T *vp, const int32_t *slots, const int32_t *pos,
                                          cuda_kv_layout l, be_rope r, const float *ff)
{
    int t = blockIdx.x;
    int kv_dim = l.n_kv_heads * l.head_dim;
    A *kt = k + (int64_t)t * kv_dim;
    if (r.rope_dims > 0) {
        cuda__rope_row(kt, pos[t], r, ff);
        __syncthreads();
    }
    int32_t slot = slots[t];
    if (slot < 0) return;
    cuda__store_q_row(kt, kp, l, slot);
    cuda__store_q_row(v + (int64_t)t * kv_dim, vp, l, slot);
}

#endif
