/*
 * kern.cu — the kernel table of a compute capability (cuda/kern.h): filled from the baseline up,
 * each fill function setting the entries its file implements, and checked for empty entries.
 * Needs no device: the table is plain host data.
 */
#include <string.h>

#include "cuda/internal.h"
#include "cuda/quant_formats.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

void cuda__kern_init(cuda__kern *k, int cc)
{
    memset(k, 0, sizeof *k);
    /* The sm_80 baseline, for every capability. A variant's fill for capability XX goes after
     * it, under `if (cc >= XX)`, newest last (kern.h). */
    cuda__attn_fill_sm80(k);
    cuda__attn_mma_fill_sm80(k);
    cuda__attn_decode_fill_sm80(k);
    cuda__gemm_fill_sm80(k);
    cuda__gemv_fill_sm80(k);
    cuda__fused_fill_sm80(k);
    cuda__qmatvec_fill_sm80(k);
    cuda__qgemm_fill_sm80(k);
    cuda__norm_rope_fill_sm80(k);
    cuda__kv_fill_sm80(k);
    cuda__elementwise_fill_sm80(k);
    cuda__gather_fill_sm80(k);
    cuda__sample_fill_sm80(k);
    cuda__moe_fill_sm80(k);
    cuda__mla_fill_sm80(k);
    if (cc >= 90) cuda__gemv_fill_sm90(k);
    k->cc = cc;
}

const char *cuda__kern_missing(const cuda__kern *k)
{
#define CUDA__KERN_NEED(e) \
    if (!k->e) return #e
    CUDA__KERN_NEED(attention);
    CUDA__KERN_NEED(attn_reduce);
    CUDA__KERN_NEED(attn_prefill);
    CUDA__KERN_NEED(attn_decode);
    CUDA__KERN_NEED(gemm);
    CUDA__KERN_NEED(gemv_max_rows);
    CUDA__KERN_NEED(gemv);
    CUDA__KERN_NEED(convert_rows);
    CUDA__KERN_NEED(conv);
    CUDA__KERN_NEED(bias);
    CUDA__KERN_NEED(qmatvec_max_rows);
    CUDA__KERN_NEED(qact);
    CUDA__KERN_NEED(qgemm);
    CUDA__KERN_NEED(rmsnorm);
    CUDA__KERN_NEED(rope);
    CUDA__KERN_NEED(rope_shift);
    CUDA__KERN_NEED(store_kv);
    CUDA__KERN_NEED(qkv_post);
    CUDA__KERN_NEED(ew);
    CUDA__KERN_NEED(glu);
    CUDA__KERN_NEED(embed);
    CUDA__KERN_NEED(gather_rows);
    CUDA__KERN_NEED(argmax);
    CUDA__KERN_NEED(sample_rows);
    CUDA__KERN_NEED(resolve_tokens);
    CUDA__KERN_NEED(moe_route);
    CUDA__KERN_NEED(moe_group);
    CUDA__KERN_NEED(moe_act);
    CUDA__KERN_NEED(moe_combine);
    CUDA__KERN_NEED(q8h_round);
    CUDA__KERN_NEED(mla_prep);
    CUDA__KERN_NEED(mla_attention);
    CUDA__KERN_NEED(moe_gemv[DT_F32]);
    CUDA__KERN_NEED(moe_gemv[DT_F16]);
    CUDA__KERN_NEED(moe_gemv[DT_BF16]);
    CUDA__KERN_NEED(moe_gemv[DT_MXFP4]);
    CUDA__KERN_NEED(moe_mmvq[DT_MXFP4]);
    /* Every quantised type the backend accepts (cuda_q_is_quant) has its per-type entries. */
    for (int t = 0; t < 2 * CUDA__W_TYPES; t++) {
        if (!cuda_q_is_quant(t)) continue;
        if (t >= CUDA__W_TYPES) return "CUDA__W_TYPES (a quantised type past the per-type entries)";
        CUDA__KERN_NEED(mmvq[t]);
        CUDA__KERN_NEED(mmq[t]);
        CUDA__KERN_NEED(qdequant[t]);
        CUDA__KERN_NEED(qembed[t]);
        CUDA__KERN_NEED(moe_gemv[t]);
        CUDA__KERN_NEED(moe_mmvq[t]);
    }
#undef CUDA__KERN_NEED
    return NULL;
}

extern "C" const char *cuda_kern_missing(int cc)
{
    cuda__kern k;
    cuda__kern_init(&k, cc);
    return cuda__kern_missing(&k);
}
