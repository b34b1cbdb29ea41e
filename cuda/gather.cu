/*
 * gather.cu — the ops that copy rows by index (gather_kernels.h): embed (the rows of the step's
 * tokens from an f32 / f16 / bf16 table, or decoded from a quantised one) and gather_rows (the
 * hidden rows whose logits are wanted, in the batch's logit order).
 */
#include "cuda/internal.h"
#include "cuda/gather_kernels.h"

/* ---- embedding --------------------------------------------------------------------------- */

template <int T>
static void cuda__launch_qembed(cudaStream_t s, const be_weight *emb, int n_tokens, const int32_t *tokens, float *out)
{
    cuda__qembed_k<T><<<n_tokens, CUDA_EW_THREADS, 0, s>>>((const uint8_t *)emb->data,
                                                           dt_row_bytes(emb->type, emb->n_in), emb->n_in, tokens, out);
}

/* The embedding rows of n_tokens tokens from a quantised table, decoded to f32. */
static void cuda__q_embed(cuda_backend *cb, const be_weight *emb, int n_tokens, const int32_t *tokens, float *out)
{
    CUDA_Q_DISPATCH(emb->type, cuda__launch_qembed, cb->stream, emb, n_tokens, tokens, out);
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_embed(backend *be, const be_weight *emb, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    const int32_t *tok = cuda__meta(cb, cb->meta.tokens);
    int64_t dim = emb->n_in;
    if (cuda_q_is_quant(emb->type))
        cuda__q_embed(cb, emb, n, tok, out);
    else if (emb->type == DT_F32)
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>((const float *)emb->data, dim, tok, out);
    else if (emb->type == DT_F16)
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>((const __half *)emb->data, dim, tok, out);
    else
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>((const __nv_bfloat16 *)emb->data, dim, tok, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- logit rows -------------------------------------------------------------------------- */

void cuda__op_gather_rows(backend *be, const float *x, int dim, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_logits;
    if (n <= 0) return;
    cuda__gather_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>(x, dim, cuda__meta(cb, cb->meta.logit_rows), out);
    CB_CHECK_LAUNCH(cb);
}
