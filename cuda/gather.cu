/*
 * gather.cu — the ops that copy rows by index (gather_kernels.h): embed (the rows of the step's
 * tokens from an f32 / f16 / bf16 table, or decoded from a quantised one) and gather_rows (the
 * hidden rows whose logits are wanted, in the batch's logit order), through the kernel table.
 */
#include "cuda/internal.h"
#include "cuda/gather_kernels.h"

/* ---- the sm_80 kernels' launchers ---------------------------------------------------------- */

template <int T>
static void cuda__launch_qembed(cudaStream_t s, const be_weight *emb, int n_tokens, const int32_t *tokens, float *out)
{
    cuda__qembed_k<T><<<n_tokens, CUDA_EW_THREADS, 0, s>>>((const uint8_t *)emb->data,
                                                           dt_row_bytes(emb->type, emb->n_in), emb->n_in, tokens, out);
}

static void cuda__embed_sm80(cudaStream_t s, const be_weight *emb, const int32_t *tok, int n, float *out)
{
    int64_t dim = emb->n_in;
    if (emb->type == DT_F32)
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, s>>>((const float *)emb->data, dim, tok, out);
    else if (emb->type == DT_F16)
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, s>>>((const __half *)emb->data, dim, tok, out);
    else
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, s>>>((const __nv_bfloat16 *)emb->data, dim, tok, out);
}

static void cuda__gather_rows_sm80(cudaStream_t s, const float *x, int dim, const int32_t *rows, int n, float *out)
{
    cuda__gather_k<<<n, CUDA_EW_THREADS, 0, s>>>(x, dim, rows, out);
}

void cuda__gather_fill_sm80(cuda__kern *k)
{
    k->embed = cuda__embed_sm80;
    CUDA_Q_FILL(k->qembed, cuda__launch_qembed);
    k->gather_rows = cuda__gather_rows_sm80;
}

/* ---- embedding --------------------------------------------------------------------------- */

void cuda__op_embed(backend *be, const be_weight *emb, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    const int32_t *tok = cuda__meta(cb, cb->meta.tokens);
    if (cuda_q_is_quant(emb->type)) cb->k.qembed[emb->type](cb->stream, emb, n, tok, out);
    else cb->k.embed(cb->stream, emb, tok, n, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- logit rows -------------------------------------------------------------------------- */

void cuda__op_gather_rows(backend *be, const float *x, int dim, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_logits;
    if (n <= 0) return;
    cb->k.gather_rows(cb->stream, x, dim, cuda__meta(cb, cb->meta.logit_rows), n, out);
    CB_CHECK_LAUNCH(cb);
}
