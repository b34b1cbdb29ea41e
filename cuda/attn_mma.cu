/*
 * attn_mma.cu — the launchers of the tensor-core prefill / mixed-step attention kernel
 * (attn_mma_kernels.h): one instance per KV type (f16, bf16, int8, e4m3), query type (f32, bf16,
 * f16) and head dim (64, 96, 128, 256), chosen at run time by the kernel table's attn_prefill
 * entry (kern.h). The dispatcher and the op are in attn.cu.
 */
#include "cuda/internal.h"
#include "cuda/attn_mma_kernels.h"

template <typename TKV, typename TQ, int D>
static int cuda__pf_launch(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp)
{
    size_t smem = cuda_attn_pf_smem(D, cuda__kv_quant<TKV>::value, a.sinks != NULL);
    if (smem > 48 * 1024 && CUDA_CHECK(cudaFuncSetAttribute(cuda__attn_pf_k<TKV, TQ, D>,
                                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
        return -EIO;
    cuda__attn_args b = a;
    for (int32_t z = 0; z < a.n_items; z += 65535) { /* grid.z holds at most 65,535 */
        b.n_items = min(a.n_items - z, (int32_t)65535);
        b.items = a.items + (size_t)z * CUDA_ATTN_ITEM_INTS;
        b.sem = a.sem + (size_t)z * a.n_kv_heads;
        b.tc_part = a.tc_part + (size_t)z * a.n_kv_heads * a.splits * CUDA_ATTN_PF_BR(D) * (D + 2);
        dim3 grid(a.splits, a.n_kv_heads, b.n_items);
        cuda__attn_pf_k<TKV, TQ, D><<<grid, CUDA_ATTN_TC_THREADS, smem, s>>>(b, (const TKV *)kp, (const TKV *)vp);
    }
    return 0;
}

template <typename TKV, typename TQ>
static int cuda__pf_by_dim(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp)
{
    switch (a.head_dim) {
    case 64: return cuda__pf_launch<TKV, TQ, 64>(s, a, kp, vp);
    case 96: return cuda__pf_launch<TKV, TQ, 96>(s, a, kp, vp);
    case 128: return cuda__pf_launch<TKV, TQ, 128>(s, a, kp, vp);
    case 256: return cuda__pf_launch<TKV, TQ, 256>(s, a, kp, vp);
    default: return -EINVAL;
    }
}

template <typename TKV>
static int cuda__pf_by_q(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp)
{
    switch (a.q_type) {
    case DT_F32: return cuda__pf_by_dim<TKV, float>(s, a, kp, vp);
    case DT_BF16: return cuda__pf_by_dim<TKV, __nv_bfloat16>(s, a, kp, vp);
    case DT_F16: return cuda__pf_by_dim<TKV, __half>(s, a, kp, vp);
    default: return -EINVAL;
    }
}

static int cuda__attn_prefill_sm80(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, const void *kp,
                                   const void *vp)
{
    switch (kv_dtype) {
    case KV_F16: return cuda__pf_by_q<__half>(s, *a, kp, vp);
    case KV_BF16: return cuda__pf_by_q<__nv_bfloat16>(s, *a, kp, vp);
    case KV_I8: return cuda__pf_by_q<int8_t>(s, *a, kp, vp);
    case KV_FP8: return cuda__pf_by_q<uint8_t>(s, *a, kp, vp);
    default: return -EINVAL;
    }
}

void cuda__attn_mma_fill_sm80(cuda__kern *k)
{
    k->attn_prefill = cuda__attn_prefill_sm80;
}
