/*
 * attn_tc_launch.h — what the two tensor-core attention launchers (attn_mma.cu, attn_decode.cu)
 * share: the choice of a kernel instance (KV type × query type × head dim) at run time, and the
 * cutting of a launch into grids of at most 65,535 items. Each launcher defines its instance as
 * a class template L<TKV, TQ, D> with a static run(stream, args, kp, vp), and its kernel-table
 * entry is cuda__attn_tc_by_kv<L>.
 *
 * Included by those two files only (after cuda/internal.h); host code.
 */
#ifndef KVSERVE_CUDA_ATTN_TC_LAUNCH_H
#define KVSERVE_CUDA_ATTN_TC_LAUNCH_H

#include "cuda/attn_plan.h"

/* The arguments of the chunk of a's items from z (at most 65,535: grid.z's limit): its items,
 * split counters and partials (rows_per_item query rows of head dim D per item and kv head). */
static inline cuda__attn_args cuda__attn_tc_chunk(const cuda__attn_args &a, int32_t z, int rows_per_item, int D)
{
    cuda__attn_args b = a;
    b.n_items = min(a.n_items - z, (int32_t)65535);
    b.items = a.items + (size_t)z * CUDA_ATTN_ITEM_INTS;
    b.sem = a.sem + (size_t)z * a.n_kv_heads;
    b.tc_part = a.tc_part + (size_t)z * a.n_kv_heads * a.splits * rows_per_item * (D + 2);
    return b;
}

template <template <typename, typename, int> class L, typename TKV, typename TQ>
static int cuda__attn_tc_by_dim(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp)
{
    switch (a.head_dim) {
    case 64: return L<TKV, TQ, 64>::run(s, a, kp, vp);
    case 96: return L<TKV, TQ, 96>::run(s, a, kp, vp);
    case 128: return L<TKV, TQ, 128>::run(s, a, kp, vp);
    case 256: return L<TKV, TQ, 256>::run(s, a, kp, vp);
    default: return -EINVAL;
    }
}

template <template <typename, typename, int> class L, typename TKV>
static int cuda__attn_tc_by_q(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp)
{
    switch (a.q_type) {
    case DT_F32: return cuda__attn_tc_by_dim<L, TKV, float>(s, a, kp, vp);
    case DT_BF16: return cuda__attn_tc_by_dim<L, TKV, __nv_bfloat16>(s, a, kp, vp);
    case DT_F16: return cuda__attn_tc_by_dim<L, TKV, __half>(s, a, kp, vp);
    default: return -EINVAL;
    }
}

/* The instance of L for a's KV type, query type and head dim: its result, or -EINVAL for a
 * combination the tensor-core kernels do not cover (nothing launched). */
template <template <typename, typename, int> class L>
static int cuda__attn_tc_by_kv(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, const void *kp, const void *vp)
{
    switch (kv_dtype) {
    case KV_F16: return cuda__attn_tc_by_q<L, __half>(s, *a, kp, vp);
    case KV_BF16: return cuda__attn_tc_by_q<L, __nv_bfloat16>(s, *a, kp, vp);
    case KV_I8: return cuda__attn_tc_by_q<L, int8_t>(s, *a, kp, vp);
    case KV_FP8: return cuda__attn_tc_by_q<L, uint8_t>(s, *a, kp, vp);
    default: return -EINVAL;
    }
}

#endif
