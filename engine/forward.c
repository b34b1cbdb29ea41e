/*
 * forward.c — the model graph of every architecture, once, against the backend ops of backend.h.
 *
 * One block with per-architecture switches taken from the hyperparameters (model.h): biases
 * where the file has them, q/k RMSNorm per head (qwen3, gemma3), RoPE per layer (partial,
 * NeoX or adjacent pairs, a second base and no scaling on gemma3's sliding layers, linear /
 * YaRN scaling, rope_freqs), attention with the layer's scale, soft-cap and window,
 * post-attention / post-FFN norms (gemma), SwiGLU or GeGLU, the embedding scale and the final
 * soft-cap. Fused tensors arrive as views (model.c), so the graph always sees q/k/v and gate/up.
 *
 * fwd_create uploads every weight, allocates the KV arena and the activation scratch (sized for
 * max_tokens rows and max_logits logit rows); fwd_run walks one varlen batch through the layers.
 * forward.c never touches activation memory itself: it only passes backend pointers to ops, so
 * the same graph drives the CPU and the CUDA backend.
 *
 * Invariants: a fwd's weights and scratch belong to its backend for the fwd's lifetime; the model
 * and backend are borrowed. Called by the engine thread (scheduler steps) and by `kvserve
 * generate`; one thread at a time.
 */
#include "engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fwd_layer {
    be_weight attn_norm;      /* [dim] */
    be_weight wq, wk, wv, wo; /* [dim → q_dim], [dim → kv_dim] ×2, [q_dim → dim] */
    be_weight bq, bk, bv, bo; /* biases; data NULL when absent */
    be_weight q_norm, k_norm; /* [head_dim] (qwen3, gemma3); data NULL when absent */
    be_weight post_attn_norm; /* [dim] (gemma) */
    be_weight ffn_norm;       /* [dim] */
    be_weight w_gate, w_up;   /* [dim → n_ff] */
    be_weight w_down;         /* [n_ff → dim] */
    be_weight b_gate, b_up, b_down; /* FFN biases (llama, optional) */
    be_weight post_ffn_norm;  /* [dim] (gemma) */
    be_rope rope_q, rope_k;   /* this layer's RoPE for q and k */
    be_attn attn;             /* this layer's scale, soft-cap and window */
} fwd_layer;

/* The model_tensor ↔ be_weight pairs of a layer, in one order for upload and free. */
#define FWD_LAYER_WEIGHTS 20

struct fwd {
    const model *m; /* borrowed */
    backend *be;    /* borrowed */
    kv_geom geom;
    int max_tokens, max_logits;
    int q_dim, kv_dim;
    const be_batch *b;     /* the batch of the step being run (borrowed during fwd_run) */

    be_weight tok_embd;    /* [dim × n_vocab] */
    be_weight output_norm; /* [dim] */
    be_weight output;      /* [dim → n_vocab]; a copy of tok_embd's handle when tied */
    be_weight output_b;    /* [n_vocab] LM-head bias, or data NULL */
    be_weight rope_freqs;  /* [rope_dims / 2] frequency divisors, or data NULL */
    int output_shared;     /* 1: output is tok_embd's upload (free once) */
    fwd_layer *layers;     /* [n_layers] */

    /* activation scratch in backend memory, f32 row-major */
    float *x;      /* [max_tokens][dim]     residual stream */
    float *xb;     /* [max_tokens][dim]     normed input / projection output */
    float *q;      /* [max_tokens][q_dim] */
    float *qs;     /* [max_tokens][q_dim]   the queries as they meet attention sinks */
    float *k, *v;  /* [max_tokens][kv_dim] */
    float *att;    /* [max_tokens][q_dim]   attention output */
    float *hb;     /* [max_tokens][n_ff]    gate, then silu(gate) * up */
    float *hb2;    /* [max_tokens][n_ff]    up */
    float *lx;     /* [max_logits][dim]     the logit rows' hidden states */
    float *logits; /* [max_logits][n_vocab] */
};

static int fwd__upload(fwd *f, const model_tensor *t, be_weight *w)
{
    memset(w, 0, sizeof *w);
    if (!t->data) return 0; /* optional tensor (bias) absent */
    return f->be->ops->weight_upload(f->be, t, w);
}

static void fwd__wfree(fwd *f, be_weight *w)
{
    if (w->data || w->extra) f->be->ops->weight_free(f->be, w);
    memset(w, 0, sizeof *w);
}

/* The layer's weights and their model tensors, FWD_LAYER_WEIGHTS of each. */
static void fwd__layer_pairs(const model_layer *ml, fwd_layer *l, const model_tensor **src, be_weight **dst)
{
    const model_tensor *s[FWD_LAYER_WEIGHTS] = {
        &ml->attn_norm, &ml->wq,     &ml->wk,     &ml->wv,       &ml->wo,     &ml->bq,     &ml->bk,
        &ml->bv,        &ml->bo,     &ml->q_norm, &ml->k_norm,   &ml->post_attn_norm, &ml->ffn_norm,
        &ml->w_gate,    &ml->w_up,   &ml->w_down, &ml->b_gate,   &ml->b_up,   &ml->b_down, &ml->post_ffn_norm};
    be_weight *d[FWD_LAYER_WEIGHTS] = {&l->attn_norm, &l->wq,     &l->wk,     &l->wv,       &l->wo,
                                       &l->bq,        &l->bk,     &l->bv,     &l->bo,       &l->q_norm,
                                       &l->k_norm,    &l->post_attn_norm,     &l->ffn_norm, &l->w_gate,
                                       &l->w_up,      &l->w_down, &l->b_gate, &l->b_up,     &l->b_down,
                                       &l->post_ffn_norm};
    memcpy(src, s, sizeof s);
    memcpy(dst, d, sizeof d);
}

static int fwd__upload_layer(fwd *f, const model_layer *ml, fwd_layer *l)
{
    const model_tensor *src[FWD_LAYER_WEIGHTS];
    be_weight *dst[FWD_LAYER_WEIGHTS];
    fwd__layer_pairs(ml, l, src, dst);
    for (size_t i = 0; i < FWD_LAYER_WEIGHTS; i++) {
        int rc = fwd__upload(f, src[i], dst[i]);
        if (rc) return rc;
    }
    return 0;
}

static void fwd__free_layer(fwd *f, const model_layer *ml, fwd_layer *l)
{
    const model_tensor *src[FWD_LAYER_WEIGHTS];
    be_weight *dst[FWD_LAYER_WEIGHTS];
    fwd__layer_pairs(ml, l, src, dst);
    for (size_t i = 0; i < FWD_LAYER_WEIGHTS; i++) fwd__wfree(f, dst[i]);
}

/* Layer li's RoPE (for q and k) and attention parameters, from the hyperparameters. */
static void fwd__layer_params(fwd *f, int li, fwd_layer *l)
{
    const model_hparams *hp = &f->m->hp;
    model_rope mr;
    model_layer_rope(hp, li, &mr);
    be_rope r = {.n_heads = hp->n_heads, .head_dim = hp->head_dim, .rope_dims = mr.dims, .base = mr.base,
                 .neox = mr.neox, .freq_scale = mr.freq_scale, .ext_factor = mr.ext_factor,
                 .corr_lo = mr.corr_lo, .corr_hi = mr.corr_hi, .mscale = mr.mscale,
                 .freq_factors = f->rope_freqs.data ? &f->rope_freqs : NULL};
    l->rope_q = r;
    l->rope_k = r;
    l->rope_k.n_heads = hp->n_kv_heads;
    l->attn = (be_attn){.n_heads = hp->n_heads, .scale = model_attn_scale(hp), .softcap = hp->attn_softcap,
                        .window = model_layer_window(hp, li)};
}

/* Allocates every scratch buffer; 0 or -ENOMEM. */
static int fwd__alloc_scratch(fwd *f)
{
    const model_hparams *hp = &f->m->hp;
    size_t T = (size_t)f->max_tokens, L = (size_t)f->max_logits;
    size_t wide = (size_t)(hp->n_embd > f->q_dim ? hp->n_embd : f->q_dim);
    struct {
        float **p;
        size_t n;
    } s[] = {
        {&f->x, T * hp->n_embd},       {&f->xb, T * wide},      {&f->q, T * f->q_dim}, {&f->qs, T * f->q_dim},
        {&f->k, T * f->kv_dim},        {&f->v, T * f->kv_dim},  {&f->att, T * f->q_dim},
        {&f->hb, T * hp->n_ff},        {&f->hb2, T * hp->n_ff}, {&f->lx, L * hp->n_embd},
        {&f->logits, L * hp->n_vocab},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        *s[i].p = f->be->ops->alloc(f->be, s[i].n);
        if (!*s[i].p) return -ENOMEM;
    }
    return 0;
}

void fwd_destroy(fwd *f)
{
    if (!f) return;
    float *bufs[] = {f->x, f->xb, f->q, f->qs, f->k, f->v, f->att, f->hb, f->hb2, f->lx, f->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) f->be->ops->free(f->be, bufs[i]);
    if (f->layers)
        for (int l = 0; l < f->m->hp.n_layers; l++)
            fwd__free_layer(f, &f->m->layers[l], &f->layers[l]);
    free(f->layers);
    if (!f->output_shared) fwd__wfree(f, &f->output);
    fwd__wfree(f, &f->output_b);
    fwd__wfree(f, &f->rope_freqs);
    fwd__wfree(f, &f->output_norm);
    fwd__wfree(f, &f->tok_embd);
    free(f);
}

fwd *fwd_create(const model *m, backend *be, const kv_geom *g, const int32_t *n_blocks, int max_tokens,
                int max_logits, char *err, size_t err_len)
{
    const model_hparams *hp = &m->hp;
    int blocks_ok = 1;
    size_t kv_bytes = 0;
    for (int k = 0; k < kv_n_groups(g); k++) {
        blocks_ok &= n_blocks[k] > 0;
        kv_bytes += kv_group_bytes_per_block(g, k) * (size_t)n_blocks[k];
    }
    if (g->n_layers != hp->n_layers || g->n_kv_heads != hp->n_kv_heads || g->n_layers > KV_MAX_LAYERS ||
        g->head_dim != hp->head_dim || g->block_size <= 0 || !blocks_ok || max_tokens <= 0 || max_logits <= 0) {
        snprintf(err, err_len,
                 "forward: KV geometry (%d layers, %d kv heads, head dim %d, block %d, "
                 "%d blocks) does not fit the model (%d, %d, %d) or a size is not positive",
                 g->n_layers, g->n_kv_heads, g->head_dim, g->block_size, (int)n_blocks[0],
                 hp->n_layers, hp->n_kv_heads, hp->head_dim);
        return NULL;
    }
    fwd *f = calloc(1, sizeof *f);
    if (!f) goto oom;
    f->m = m;
    f->be = be;
    f->geom = *g;
    f->max_tokens = max_tokens;
    f->max_logits = max_logits;
    f->q_dim = hp->n_heads * hp->head_dim;
    f->kv_dim = hp->n_kv_heads * hp->head_dim;
    f->layers = calloc((size_t)hp->n_layers, sizeof *f->layers);
    if (!f->layers) goto oom;

    /* A backend with embed_upload keeps embed's rows apart from the LM head's layout, also for
     * tied embeddings (then uploaded twice): no backend reads the model's mapping after this. */
    f->output_shared = (hp->tied_output || m->output.data == m->tok_embd.data) && !be->ops->embed_upload;
    int rc;
    if (be->ops->embed_upload) { /* embed is its only reader */
        memset(&f->tok_embd, 0, sizeof f->tok_embd);
        rc = be->ops->embed_upload(be, &m->tok_embd, &f->tok_embd);
    } else {
        rc = fwd__upload(f, &m->tok_embd, &f->tok_embd);
    }
    if (!rc) rc = fwd__upload(f, &m->output_norm, &f->output_norm);
    if (!rc) {
        if (f->output_shared)
            f->output = f->tok_embd;
        else
            rc = fwd__upload(f, &m->output, &f->output);
    }
    if (!rc) rc = fwd__upload(f, &m->output_b, &f->output_b);
    if (!rc) rc = fwd__upload(f, &m->rope_freqs, &f->rope_freqs);
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = fwd__upload_layer(f, &m->layers[l], &f->layers[l]);
        fwd__layer_params(f, l, &f->layers[l]);
    }
    if (rc) {
        snprintf(err, err_len, "forward: uploading the weights to the %s backend failed (%s)",
                 be->name, strerror(-rc));
        fwd_destroy(f);
        return NULL;
    }
    rc = be->ops->kv_init(be, g, n_blocks);
    if (rc) {
        snprintf(err, err_len, "forward: allocating %d KV blocks (%zu bytes) failed (%s)",
                 (int)n_blocks[0], kv_bytes, strerror(-rc));
        fwd_destroy(f);
        return NULL;
    }
    if (fwd__alloc_scratch(f)) {
        snprintf(err, err_len, "forward: out of memory for activations of %d tokens", max_tokens);
        fwd_destroy(f);
        return NULL;
    }
    return f;
oom:
    if (f) free(f->layers);
    free(f);
    snprintf(err, err_len, "forward: out of memory");
    return NULL;
}

backend *fwd_backend(fwd *f)
{
    return f->be;
}

/* A bias argument for matmul: NULL when the weight has none. */
static const be_weight *fwd__bias(const be_weight *b)
{
    return b->data ? b : NULL;
}

/* out[i] = x · w[i] (+ b[i]) for n matrices over the same rows: one op where the backend has it. */
static void fwd__matmuls(fwd *f, const float *x, int n_rows, int n, const be_weight *const *w,
                         const be_weight *const *b, float *const *out)
{
    const be_ops *op = f->be->ops;
    if (op->matmul_multi) op->matmul_multi(f->be, x, n_rows, n, w, b, out);
    else
        for (int i = 0; i < n; i++) op->matmul(f->be, x, n_rows, w[i], b[i], out[i]);
}

/* One transformer block over the batch's n rows of f->x (in place). */
static void fwd__layer(fwd *f, int li, int n)
{
    const model_hparams *hp = &f->m->hp;
    const fwd_layer *l = &f->layers[li];
    const be_ops *op = f->be->ops;
    backend *be = f->be;
    int dim = hp->n_embd;

    /* attention: x += post_norm(Wo · attn(rope(qk_norm(Wq·n(x))), rope(qk_norm(Wk·n(x))), Wv·n(x))) */
    op->rmsnorm(be, f->x, &l->attn_norm, hp->rms_eps, n, dim, f->xb);
    fwd__matmuls(f, f->xb, n, 3, (const be_weight *[]){&l->wq, &l->wk, &l->wv},
                 (const be_weight *[]){fwd__bias(&l->bq), fwd__bias(&l->bk), fwd__bias(&l->bv)},
                 (float *[]){f->q, f->k, f->v});
    if (l->q_norm.data) { /* per head: rows of head_dim */
        op->rmsnorm(be, f->q, &l->q_norm, hp->rms_eps, n * hp->n_heads, hp->head_dim, f->q);
        op->rmsnorm(be, f->k, &l->k_norm, hp->rms_eps, n * hp->n_kv_heads, hp->head_dim, f->k);
    }
    op->rope(be, f->q, &l->rope_q);
    op->rope(be, f->k, &l->rope_k);
    op->store_kv(be, li, f->k, f->v);
    be_attn at = l->attn;
    at.q_sink = NULL;
    int grp = kv_group_of(&f->geom, li);
    if (be_batch_kv(f->b, grp)->sinks) { /* attention sinks whose window has moved */
        op->rope_shift(be, f->q, f->qs, &l->rope_q, grp);
        at.q_sink = f->qs;
    }
    op->attention(be, li, f->q, &at, f->att);
    op->matmul(be, f->att, n, &l->wo, fwd__bias(&l->bo), f->xb);
    if (l->post_attn_norm.data) op->rmsnorm(be, f->xb, &l->post_attn_norm, hp->rms_eps, n, dim, f->xb);
    op->add(be, f->x, f->xb, (int64_t)n * dim);

    /* feed-forward: x += post_norm(Wdown · (act(Wgate·n(x)) * Wup·n(x))) */
    op->rmsnorm(be, f->x, &l->ffn_norm, hp->rms_eps, n, dim, f->xb);
    fwd__matmuls(f, f->xb, n, 2, (const be_weight *[]){&l->w_gate, &l->w_up},
                 (const be_weight *[]){fwd__bias(&l->b_gate), fwd__bias(&l->b_up)}, (float *[]){f->hb, f->hb2});
    if (hp->ffn_act == MODEL_ACT_GELU_TANH)
        op->gelu_mul(be, f->hb, f->hb2, (int64_t)n * hp->n_ff);
    else
        op->silu_mul(be, f->hb, f->hb2, (int64_t)n * hp->n_ff);
    op->matmul(be, f->hb, n, &l->w_down, fwd__bias(&l->b_down), f->xb);
    if (l->post_ffn_norm.data) op->rmsnorm(be, f->xb, &l->post_ffn_norm, hp->rms_eps, n, dim, f->xb);
    op->add(be, f->x, f->xb, (int64_t)n * dim);
}

int fwd_run(fwd *f, const be_batch *b, float *logits)
{
    const model_hparams *hp = &f->m->hp;
    const be_ops *op = f->be->ops;
    backend *be = f->be;
    if (b->n_tokens <= 0 || b->n_tokens > f->max_tokens || b->n_logits < 0 ||
        b->n_logits > f->max_logits || b->n_seqs <= 0)
        return -EINVAL;
    int rc = op->begin(be, b);
    if (rc) return rc;
    int n = b->n_tokens;
    f->b = b;

    op->embed(be, &f->tok_embd, f->x);
    if (model_embd_scale(hp) != 1.0f) op->scale(be, f->x, model_embd_scale(hp), (int64_t)n * hp->n_embd);
    for (int l = 0; l < hp->n_layers; l++)
        fwd__layer(f, l, n);
    if (b->n_logits == 0) return op->sync(be);

    /* final norm and LM head only on the rows that sample */
    op->gather_rows(be, f->x, hp->n_embd, f->lx);
    op->rmsnorm(be, f->lx, &f->output_norm, hp->rms_eps, b->n_logits, hp->n_embd, f->lx);
    op->matmul(be, f->lx, b->n_logits, &f->output, fwd__bias(&f->output_b), f->logits);
    if (hp->final_softcap > 0)
        op->softcap(be, f->logits, hp->final_softcap, (int64_t)b->n_logits * hp->n_vocab);
    return op->to_host(be, f->logits, (size_t)b->n_logits * hp->n_vocab, logits);
}

int fwd_hidden(fwd *f, int n_rows, float *out)
{
    const model_hparams *hp = &f->m->hp;
    if (n_rows <= 0 || n_rows > f->max_tokens) return -EINVAL;
    f->be->ops->rmsnorm(f->be, f->x, &f->output_norm, hp->rms_eps, n_rows, hp->n_embd, f->xb);
    return f->be->ops->to_host(f->be, f->xb, (size_t)n_rows * hp->n_embd, out);
}
