/*
 * attn_decode.cu — the launchers of the tensor-core decode attention kernel
 * (attn_decode_kernels.h): one instance per KV type (f16, bf16, int8, e4m3), query type (f32, bf16,
 * f16) and head dim (64, 96, 128, 256), chosen at run time by the kernel table's attn_decode
 * entry (kern.h). The dispatcher and the op are in attn.cu.
 */
#include "cuda/internal.h"
#include "cuda/attn_tc_launch.h"
#include "cuda/attn_decode_kernels.h"

/* One instance: the kernel's shared memory granted, then a grid per chunk of at most 65,535
 * items. */
template <typename TKV, typename TQ, int D> struct cuda__dec_launch {
    static int run(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp)
    {
        size_t smem = cuda_attn_dec_smem(D, (int)sizeof(TKV), a.sinks != NULL);
        if (smem > 48 * 1024 && CUDA_CHECK(cudaFuncSetAttribute(cuda__attn_dec_k<TKV, TQ, D>,
                                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
            return -EIO;
        for (int32_t z = 0; z < a.n_items; z += 65535) {
            cuda__attn_args b = cuda__attn_tc_chunk(a, z, CUDA_ATTN_DEC_ROWS, D);
            dim3 grid(a.splits, a.n_kv_heads, b.n_items);
            cuda__attn_dec_k<TKV, TQ, D><<<grid, CUDA_ATTN_TC_THREADS, smem, s>>>(b, (const TKV *)kp, (const TKV *)vp);
        }
        return 0;
    }
};

void cuda__attn_decode_fill_sm80(cuda__kern *k)
{
    k->attn_decode = cuda__attn_tc_by_kv<cuda__dec_launch>;
}
