/*
 * fused.cu — the fused ops of engine/backend.h, which cut a decode layer to about eight launches:
 *
 *   add_rmsnorm  the previous branch added to the f32 residual stream and the next branch's norm,
 *                written in the activation type: one kernel (norm_rope_kernels.h)
 *   qkv          the projection over the stacked [Wq; Wk; Wv] into f32 products (one matmul per
 *                stacked piece: one for most models), then one epilogue kernel (fused_kernels.h):
 *                biases, q/k norms, RoPE of q and k, q out, K and V into the cache
 *   glu          gate and up in one matrix-vector kernel with the activation in its epilogue
 *                (gemv.cu) up to gemv_max_rows rows; else the stacked product, then the gated
 *                activation kernel (elementwise.cu)
 *   lm_head      the logit rows gathered, the pending branch added and the final norm (one
 *                kernel), then the LM head with f32 logits and the soft-cap in its epilogue
 *
 * Scratch (cuda_backend: qkv32, glu, lmx and matmul's mm32) grows with the rows of a step, and is
 * sized before a graph capture for the captured rows (cuda__fused_reserve), so that no buffer
 * moves inside a graph.
 */
#include "cuda/internal.h"
#include "cuda/fused_kernels.h"
#include "cuda/gemv_kernels.h"
#include "cuda/quant_formats.h"

/* ---- the sm_80 kernels' launchers ---------------------------------------------------------- */

template <typename T, typename A>
static void cuda__qkv_post_launch(cudaStream_t s, const cuda_qkv_args *a, int n_tokens)
{
    dim3 grid((unsigned)n_tokens, (unsigned)cuda_div_up(a->n_heads + 2 * a->n_kv_heads, CUDA_QKV_WARPS));
    cuda__qkv_post_k<T, A><<<grid, CUDA_QKV_THREADS, 0, s>>>(*a);
}

template <typename A>
static void cuda__qkv_post_kv(cudaStream_t s, int kv_dtype, const cuda_qkv_args *a, int n_tokens)
{
    switch (kv_dtype) {
    case KV_F32: cuda__qkv_post_launch<float, A>(s, a, n_tokens); break;
    case KV_BF16: cuda__qkv_post_launch<__nv_bfloat16, A>(s, a, n_tokens); break;
    case KV_I8: cuda__qkv_post_launch<int8_t, A>(s, a, n_tokens); break;
    case KV_FP8: cuda__qkv_post_launch<uint8_t, A>(s, a, n_tokens); break;
    default: cuda__qkv_post_launch<__half, A>(s, a, n_tokens); break;
    }
}

static void cuda__qkv_post_sm80(cudaStream_t s, int kv_dtype, int act, const cuda_qkv_args *a, int n_tokens)
{
    if (act == DT_BF16) cuda__qkv_post_kv<__nv_bfloat16>(s, kv_dtype, a, n_tokens);
    else cuda__qkv_post_kv<float>(s, kv_dtype, a, n_tokens);
}

void cuda__fused_fill_sm80(cuda__kern *k)
{
    k->qkv_post = cuda__qkv_post_sm80;
}

/* ---- scratch ------------------------------------------------------------------------------- */

int cuda__fused_reserve(cuda_backend *cb, int rows)
{
    size_t as = cb->act == DT_F32 ? 4 : 2, r = (size_t)rows;
    /* a chunk of any GEMM of these rows: at most the rows × the widest output, at most the cap */
    size_t mm = r * (size_t)cb->max_n_out * 4;
    if (mm > CUDA_MM32_BYTES) mm = CUDA_MM32_BYTES;
    if (!cuda__scratch(cb, &cb->qkv32, r * (size_t)cb->max_qkv_cols * 4) ||
        !cuda__scratch(cb, &cb->glu, r * (size_t)cb->max_glu_cols * as) ||
        !cuda__scratch(cb, &cb->lmx, r * (size_t)cb->max_lm_dim * as) || !cuda__scratch(cb, &cb->mm32, mm))
        return -ENOMEM;
    return cuda__fail(cb, cuda__grow(cb, &cb->conv, &cb->conv_bytes, r * (size_t)cb->max_n_in * 4));
}

/* ---- add + RMSNorm ------------------------------------------------------------------------- */

void cuda__op_add_rmsnorm(backend *be, float *x, const void *y, const be_weight *w, float eps, int n_rows, int dim,
                          void *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb) || n_rows <= 0) return;
    cb->k.rmsnorm(cb->stream, cb->act, 1, x, y, NULL, 1, (const float *)w->data, eps, n_rows, dim, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- QKV ----------------------------------------------------------------------------------- */

/* Where column col of the stacked [q; k; v] product lies among the pieces' products: *p and
 * its row stride *ld. base[j], n_out[j]: piece j's product (rows n_out[j] apart). */
static const float *cuda__qkv_col(const float *const *base, const int64_t *n_out, int n_w, int64_t col, int64_t *ld)
{
    int64_t start = 0;
    for (int j = 0; j < n_w; j++) {
        if (col < start + n_out[j]) {
            *ld = n_out[j];
            return base[j] + (col - start);
        }
        start += n_out[j];
    }
    *ld = 0;
    return NULL;
}

/* The bias of column col (as for cuda__qkv_col), or NULL when that piece has none. */
static const float *cuda__qkv_bias(const be_qkv *p, int64_t col)
{
    int64_t start = 0;
    for (int j = 0; j < p->n_w; j++) {
        if (col < start + p->w[j]->n_out) return p->b[j] ? (const float *)p->b[j]->data + (col - start) : NULL;
        start += p->w[j]->n_out;
    }
    return NULL;
}

void cuda__op_qkv(backend *be, int layer, const void *x, int n, const be_qkv *p, void *q)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb) || n <= 0 || cb->error) return;
    const be_rope *rq = p->rope_q;
    const int H = rq->n_heads, KVH = p->rope_k->n_heads, D = rq->head_dim;
    const int64_t q_dim = (int64_t)H * D, kv_dim = (int64_t)KVH * D, cols = q_dim + 2 * kv_dim;
    if (D > CUDA_QKV_MAX_HEAD_DIM || rq->rope_dims / 2 > CUDA_ROPE_MAX_PAIRS || D != cb->kv.head_dim ||
        KVH != cb->kv.n_kv_heads) {
        fprintf(stderr, "kvserve: CUDA qkv: head dim %d / %d kv heads not supported by the fused kernel\n", D, KVH);
        cuda__fail(cb, -EINVAL);
        return;
    }
    if (cols > cb->max_qkv_cols) cb->max_qkv_cols = cols;
    float *s = (float *)cuda__scratch(cb, &cb->qkv32, (size_t)n * cols * 4);
    if (!s) return;
    const float *base[3];
    int64_t n_out[3], off = 0;
    for (int j = 0; j < p->n_w; j++) { /* piece j's product [n][its rows] after the previous ones */
        base[j] = s + off;
        n_out[j] = p->w[j]->n_out;
        cuda__matmul(cb, x, n, p->w[j], NULL, s + off, DT_F32, 0.0f);
        off += (int64_t)n * n_out[j];
    }
    cuda_qkv_args a;
    memset(&a, 0, sizeof a);
    a.q = cuda__qkv_col(base, n_out, p->n_w, 0, &a.ldq);
    a.k = cuda__qkv_col(base, n_out, p->n_w, q_dim, &a.ldk);
    a.v = cuda__qkv_col(base, n_out, p->n_w, q_dim + kv_dim, &a.ldv);
    a.bq = cuda__qkv_bias(p, 0), a.bk = cuda__qkv_bias(p, q_dim), a.bv = cuda__qkv_bias(p, q_dim + kv_dim);
    a.q_norm = p->q_norm ? (const float *)p->q_norm->data : NULL;
    a.k_norm = p->k_norm ? (const float *)p->k_norm->data : NULL;
    a.eps = p->eps;
    a.rope = *rq;
    a.rope.freq_factors = NULL; /* a host pointer: the kernel gets the factors' device data instead */
    a.ff = cuda__rope_ff(rq);
    a.n_heads = H, a.n_kv_heads = KVH, a.head_dim = D;
    a.q_out = q;
    cuda__kv_target(cb, layer, &a.kp, &a.vp, NULL, &a.slots, &a.pos);
    a.l = cb->kvg[cb->kv_group[layer]];
    if (!a.q || !a.k || !a.v) {
        cuda__fail(cb, -EINVAL);
        return;
    }
    cb->k.qkv_post(cb->stream, cb->kv_dtype, cb->act, &a, n);
    CB_CHECK_LAUNCH(cb);
}

/* ---- gate / up ----------------------------------------------------------------------------- */

void cuda__op_glu(backend *be, const void *x, int n, const be_glu *p, void *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb) || n <= 0 || cb->error) return;
    const be_weight *w0 = p->w[0], *w1 = p->n_w == 2 ? p->w[1] : NULL;
    const int64_t ff = p->n_w == 1 ? w0->n_out / 2 : w0->n_out;
    const float *b0 = p->b[0] ? (const float *)p->b[0]->data : NULL;
    const float *bg = b0, *bu = p->n_w == 1 ? (b0 ? b0 + ff : NULL) : p->b[1] ? (const float *)p->b[1]->data : NULL;
    int dense = w0->type == DT_F32 || w0->type == DT_F16 || w0->type == DT_BF16;
    if (w0->n_in > cb->max_n_in) cb->max_n_in = w0->n_in;
    if (dense && n <= cb->k.gemv_max_rows && (!w1 || w1->type == w0->type)) {
        size_t row = dt_row_bytes(w0->type, w0->n_in);
        cuda_gemv_args a;
        memset(&a, 0, sizeof a);
        a.w = w0->data, a.w2 = w1 ? w1->data : (const char *)w0->data + (size_t)ff * row;
        a.n_in = w0->n_in, a.n_out = ff, a.x = x, a.n_rows = n, a.bias = bg, a.bias2 = bu, a.out = out;
        a.gelu = p->gelu;
        cb->k.gemv(cb->stream, w0->type, cb->act, cb->act, &a, cb->n_sm);
        CB_CHECK_LAUNCH(cb);
        return;
    }
    if (2 * ff > cb->max_glu_cols) cb->max_glu_cols = 2 * ff;
    size_t as = cb->act == DT_F32 ? 4 : 2;
    char *s = (char *)cuda__scratch(cb, &cb->glu, (size_t)n * 2 * ff * as);
    if (!s) return;
    const char *g = s, *u = s + (size_t)ff * as; /* stacked: [n][2 ff] */
    int64_t ld = 2 * ff;
    cuda__matmul(cb, x, n, w0, NULL, s, cb->act, 0.0f);
    if (w1) { /* apart: [n][ff] then [n][ff] */
        u = s + (size_t)n * ff * as;
        ld = ff;
        cuda__matmul(cb, x, n, w1, NULL, (void *)u, cb->act, 0.0f);
    }
    cb->k.glu(cb->stream, cb->act, g, u, ld, ff, n, bg, bu, p->gelu, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- final norm and LM head ----------------------------------------------------------------- */

void cuda__op_lm_head(backend *be, const float *x, const void *y, const be_weight *norm, float eps,
                      const be_weight *w, const be_weight *bias, float softcap, float *logits)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb) || cb->error) return;
    int nl = cb->meta.n_logits, dim = (int)w->n_in;
    if (nl <= 0) return;
    if (dim > cb->max_lm_dim) cb->max_lm_dim = dim;
    void *h = cuda__scratch(cb, &cb->lmx, (size_t)nl * dim * (cb->act == DT_F32 ? 4 : 2));
    if (!h) return;
    cb->k.rmsnorm(cb->stream, cb->act, 1, (void *)x, y, cuda__meta(cb, cb->meta.logit_rows), 0,
                  (const float *)norm->data, eps, nl, dim, h);
    if (CB_CHECK_LAUNCH(cb)) return;
    cuda__matmul(cb, h, nl, w, bias && bias->data ? (const float *)bias->data : NULL, logits, DT_F32, softcap);
}
