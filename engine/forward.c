/*
 * forward.c — the model graph of every architecture, once, against the backend ops of backend.h.
 *
 * One block with per-architecture switches taken from the hyperparameters (model.h): biases
 * where the file has them, q/k RMSNorm per head (qwen3, gemma3), RoPE per layer (partial,
 * NeoX or adjacent pairs, a second base and no scaling on gemma3's sliding layers, linear /
 * YaRN scaling, rope_freqs), attention with the layer's scale, soft-cap and window,
 * post-attention / post-FFN norms (gemma), SwiGLU or GeGLU, the embedding scale and the final
 * soft-cap, learned attention sinks (gpt-oss). Fused tensors arrive as views (model.c), so the
 * graph always sees q/k/v and gate/up. Two pieces live in their own files, behind one call each:
 * a mixture-of-experts FFN (forward_moe.c) and multi-head latent attention (forward_mla.c).
 *
 * Fused ops: where the backend has them (backend.h, all optional), a layer is add + RMSNorm,
 * the QKV projection with its biases, q/k norms, RoPE and KV store, attention, the output
 * projection, add + RMSNorm, the gate/up projection with its activation, the down projection;
 * each residual add is deferred into the next norm (the branch output stays "pending"), the
 * last one into the LM head. Q/K/V and gate/up are stacked into one matrix at upload
 * (weight_upload_cat) where their types allow. Without the fused ops, the same graph runs op by
 * op: the same arithmetic in the same order, so the CPU backend's results do not depend on it.
 *
 * fwd_create uploads every weight, allocates the KV arena and the activation scratch (sized for
 * max_tokens rows and max_logits logit rows, rounded up to the rows a backend may pad a decode
 * step to); fwd_run walks one varlen batch through the layers. forward.c never touches
 * activation memory itself: it only passes backend pointers (of the backend's act_type, the
 * residual stream and logits f32) to ops, so the same graph drives the CPU and the CUDA backend.
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

#include "engine/forward_mla.h"
#include "engine/forward_moe.h"

typedef struct fwd_layer {
    be_weight attn_norm;      /* [dim] */
    be_weight qkv_w[3];       /* Q, K, V as n_qkv row blocks stacking to [Wq; Wk; Wv] (be_qkv) */
    be_weight qkv_b[3];       /* their biases (data NULL when absent) */
    int n_qkv;                /* 3: apart (no fused qkv op); 1 or 2: stacked at upload */
    be_weight wo, bo;         /* [q_dim → dim]; bias or data NULL */
    be_weight q_norm, k_norm; /* [head_dim] (qwen3, gemma3); data NULL when absent */
    be_weight post_attn_norm; /* [dim] (gemma) */
    be_weight ffn_norm;       /* [dim] */
    be_weight glu_w[2];       /* gate, up as n_glu row blocks stacking to [Wgate; Wup] (be_glu) */
    be_weight glu_b[2];       /* their biases (data NULL when absent) */
    int n_glu;                /* 2: apart; 1: stacked at upload */
    be_weight w_down, b_down; /* [n_ff → dim]; bias or data NULL */
    be_weight post_ffn_norm;  /* [dim] (gemma) */
    be_weight sinks;          /* [n_heads] learned sink logits (gpt-oss); data NULL when absent */
    be_rope rope_q, rope_k;   /* this layer's RoPE for q and k */
    be_attn attn;             /* this layer's scale, soft-cap and window */
} fwd_layer;

/* The model_tensor ↔ be_weight pairs of a layer that are never stacked, in one order for upload
 * and free. */
#define FWD_LAYER_WEIGHTS 11

struct fwd {
    const model *m; /* borrowed */
    backend *be;    /* borrowed */
    kv_geom geom;
    int max_tokens, max_logits;
    int pad_rows;   /* rows a step may be padded to (be->pad_rows_max while this fwd runs) */
    int q_dim, kv_dim;
    const be_batch *b;     /* the batch of the step being run (borrowed during fwd_run) */
    const void *pending;   /* after fwd_run: the last branch not yet added to x, or NULL */
    int n_rows;            /* after fwd_run: the rows of the step (padded rows included) */

    be_weight tok_embd;    /* [dim × n_vocab] */
    be_weight output_norm; /* [dim] */
    be_weight output;      /* [dim → n_vocab]; a copy of tok_embd's handle when tied */
    be_weight output_b;    /* [n_vocab] LM-head bias, or data NULL */
    be_weight rope_freqs;  /* [rope_dims / 2] frequency divisors, or data NULL */
    int output_shared;     /* 1: output is tok_embd's upload (free once) */
    float *host_norm;      /* [dim] the final norm's weights on the host (fwd_hidden with 16-bit
                            * activations), copied at creation: nothing reads the model's mapping
                            * later (model/gguf.h gguf_detach); NULL for f32 activations */
    fwd_layer *layers;     /* [n_layers] */
    fwd_moe *moe;          /* the experts of the MoE layers, or NULL (a dense model) */
    fwd_mla *mla;          /* latent attention, or NULL */

    /* activation scratch in backend memory: act_type unless marked f32; NULL when the backend's
     * fused ops make a buffer unnecessary */
    float *x;      /* [rows][dim]       f32 residual stream */
    void *xb;      /* [rows][max(dim, q_dim)] the normed input of a branch */
    void *br;      /* [rows][dim]       a branch's output (a MoE or MLA layer's too), until the
                      next norm adds it to x */
    void *q;       /* [rows][q_dim] */
    void *qs;      /* [rows][q_dim]     the queries as they meet attention sinks */
    void *k, *v;   /* [rows][kv_dim]    (unfused qkv only) */
    void *att;     /* [rows][q_dim]     attention output */
    void *hb;      /* [rows][n_ff]      gate, then act(gate) * up */
    void *hb2;     /* [rows][n_ff]      up (unfused glu only) */
    float *lx;     /* [logit rows][dim] f32 hidden states of the logit rows (unfused LM head) */
    float *logits; /* [logit rows][n_vocab] f32 */
};

static int fwd__upload(fwd *f, const model_tensor *t, be_weight *w)
{
    return be_weight_upload_opt(f->be, t, w);
}

static void fwd__wfree(fwd *f, be_weight *w)
{
    be_weight_release(f->be, w);
}

/* The layer's weights that are never stacked and their model tensors, FWD_LAYER_WEIGHTS of each. */
static void fwd__layer_pairs(const model_layer *ml, fwd_layer *l, const model_tensor **src, be_weight **dst)
{
    const model_tensor *s[FWD_LAYER_WEIGHTS] = {&ml->attn_norm, &ml->wo,          &ml->bo,        &ml->q_norm,
                                                &ml->k_norm,    &ml->post_attn_norm, &ml->ffn_norm, &ml->w_down,
                                                &ml->b_down,    &ml->post_ffn_norm, &ml->sinks};
    be_weight *d[FWD_LAYER_WEIGHTS] = {&l->attn_norm, &l->wo,          &l->bo,        &l->q_norm,
                                       &l->k_norm,    &l->post_attn_norm, &l->ffn_norm, &l->w_down,
                                       &l->b_down,    &l->post_ffn_norm, &l->sinks};
    memcpy(src, s, sizeof s);
    memcpy(dst, d, sizeof d);
}

/* Uploads n matrices (w) and their biases (b, each data NULL when absent) as groups: consecutive
 * pieces of one type, input width and bias presence are stacked into one matrix (and their
 * biases into one vector) when stack is set (the backend has the fused op that takes stacks).
 * Writes the groups to dw / db and their count to *n_out. 0 or a negative errno. */
static int fwd__upload_stacked(fwd *f, const model_tensor *const *w, const model_tensor *const *b, int n, int stack,
                               be_weight *dw, be_weight *db, int *n_out)
{
    backend *be = f->be;
    int g = 0, rc = 0;
    for (int i = 0; i < n && !rc; g++) {
        int j = i + 1;
        while (stack && j < n && w[i]->data && w[j]->data && w[j]->type == w[i]->type && w[j]->ne[0] == w[i]->ne[0] &&
               !b[j]->data == !b[i]->data)
            j++;
        memset(&dw[g], 0, sizeof dw[g]);
        memset(&db[g], 0, sizeof db[g]);
        if (j - i == 1) {
            rc = fwd__upload(f, w[i], &dw[g]);
            if (!rc) rc = fwd__upload(f, b[i], &db[g]);
        } else {
            rc = be->ops->weight_upload_cat(be, w + i, j - i, &dw[g]);
            if (!rc && b[i]->data) rc = be->ops->weight_upload_cat(be, b + i, j - i, &db[g]);
        }
        i = j;
    }
    *n_out = g;
    return rc;
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
    const be_ops *op = f->be->ops;
    const model_tensor *qw[3] = {&ml->wq, &ml->wk, &ml->wv}, *qb[3] = {&ml->bq, &ml->bk, &ml->bv};
    const model_tensor *gw[2] = {&ml->w_gate, &ml->w_up}, *gb[2] = {&ml->b_gate, &ml->b_up};
    int rc = fwd__upload_stacked(f, qw, qb, 3, op->qkv && op->weight_upload_cat, l->qkv_w, l->qkv_b, &l->n_qkv);
    if (!rc) rc = fwd__upload_stacked(f, gw, gb, 2, op->glu && op->weight_upload_cat, l->glu_w, l->glu_b, &l->n_glu);
    return rc;
}

static void fwd__free_layer(fwd *f, const model_layer *ml, fwd_layer *l)
{
    const model_tensor *src[FWD_LAYER_WEIGHTS];
    be_weight *dst[FWD_LAYER_WEIGHTS];
    fwd__layer_pairs(ml, l, src, dst);
    for (size_t i = 0; i < FWD_LAYER_WEIGHTS; i++) fwd__wfree(f, dst[i]);
    for (int i = 0; i < 3; i++) fwd__wfree(f, &l->qkv_w[i]), fwd__wfree(f, &l->qkv_b[i]);
    for (int i = 0; i < 2; i++) fwd__wfree(f, &l->glu_w[i]), fwd__wfree(f, &l->glu_b[i]);
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
                        .window = model_layer_window(hp, li), .head_sinks = l->sinks.data ? &l->sinks : NULL};
}

/* Rows a step of up to n rows may be padded to: the next power of two up to 256 (the batch
 * sizes a backend captures graphs for), else n. */
static int fwd__pad_rows(int n)
{
    int p = 1;
    while (p < n) p *= 2;
    return p <= 256 ? p : n;
}

/* Allocates the scratch buffers the backend's ops need; 0 or -ENOMEM. */
static int fwd__alloc_scratch(fwd *f)
{
    const model_hparams *hp = &f->m->hp;
    const be_ops *op = f->be->ops;
    size_t T = (size_t)fwd__pad_rows(f->max_tokens), L = (size_t)fwd__pad_rows(f->max_logits);
    f->pad_rows = (int)(T < L ? T : L);
    size_t wide = (size_t)(hp->n_embd > f->q_dim ? hp->n_embd : f->q_dim);
    struct {
        void **p;
        size_t n;
        int f32, need;
    } s[] = {
        {(void **)&f->x, T * hp->n_embd, 1, 1},     {&f->xb, T * wide, 0, 1},
        {&f->br, T * hp->n_embd, 0, 1},             {&f->q, T * f->q_dim, 0, 1},
        {&f->qs, T * f->q_dim, 0, 1},               {&f->k, T * f->kv_dim, 0, !op->qkv},
        {&f->v, T * f->kv_dim, 0, !op->qkv},        {&f->att, T * f->q_dim, 0, 1},
        {&f->hb, T * hp->n_ff, 0, 1},               {&f->hb2, T * hp->n_ff, 0, !op->glu},
        {(void **)&f->lx, L * hp->n_embd, 1, !op->lm_head}, {(void **)&f->logits, L * hp->n_vocab, 1, 1},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        if (!s[i].need) continue;
        *s[i].p = s[i].f32 ? (void *)be_alloc_f32(f->be, s[i].n) : op->alloc(f->be, s[i].n);
        if (!*s[i].p) return -ENOMEM;
    }
    return 0;
}

void fwd_destroy(fwd *f)
{
    if (!f) return;
    fwd_moe_destroy(f->moe);
    fwd_mla_destroy(f->mla);
    void *bufs[] = {f->x, f->xb, f->br, f->q, f->qs, f->k, f->v, f->att, f->hb, f->hb2, f->lx, f->logits};
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
    free(f->host_norm);
    free(f);
}

/* Checks the geometry against the model and the backend's ops against its activation type;
 * 0, or -EINVAL with the reason in err. */
static int fwd__check(const model *m, const backend *be, const kv_geom *g, const int32_t *n_blocks, int max_tokens,
                      int max_logits, char *err, size_t err_len)
{
    const model_hparams *hp = &m->hp;
    int blocks_ok = 1;
    for (int k = 0; k < kv_n_groups(g); k++) blocks_ok &= n_blocks[k] > 0;
    if (g->n_layers != hp->n_layers || g->n_kv_heads != hp->n_kv_heads || g->n_layers > KV_MAX_LAYERS ||
        g->head_dim != hp->head_dim || g->latent != (hp->mla ? hp->kv_lora_rank : 0) || g->block_size <= 0 ||
        !blocks_ok || max_tokens <= 0 || max_logits <= 0) {
        snprintf(err, err_len,
                 "forward: KV geometry (%d layers, %d kv heads, head dim %d, block %d, "
                 "%d blocks) does not fit the model (%d, %d, %d) or a size is not positive",
                 g->n_layers, g->n_kv_heads, g->head_dim, g->block_size, (int)n_blocks[0],
                 hp->n_layers, hp->n_kv_heads, hp->head_dim);
        return -EINVAL;
    }
    if (be->act_type != DT_F32 && (!be->ops->add_rmsnorm || !be->ops->lm_head)) {
        snprintf(err, err_len, "forward: the %s backend's activations are not f32 but it lacks add_rmsnorm or lm_head",
                 be->name);
        return -EINVAL;
    }
    return 0;
}

/* Uploads the model's weights; 0 or a negative errno. */
static int fwd__upload_all(fwd *f)
{
    const model *m = f->m;
    backend *be = f->be;
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
    for (int l = 0; !rc && l < m->hp.n_layers; l++) {
        rc = fwd__upload_layer(f, &m->layers[l], &f->layers[l]);
        fwd__layer_params(f, l, &f->layers[l]);
    }
    return rc;
}

fwd *fwd_create(const model *m, backend *be, const kv_geom *g, const int32_t *n_blocks, int max_tokens,
                int max_logits, char *err, size_t err_len)
{
    const model_hparams *hp = &m->hp;
    if (fwd__check(m, be, g, n_blocks, max_tokens, max_logits, err, err_len)) return NULL;
    size_t kv_bytes = 0;
    for (int k = 0; k < kv_n_groups(g); k++) kv_bytes += kv_group_bytes_per_block(g, k) * (size_t)n_blocks[k];
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
    int rc = fwd__upload_all(f);
    if (!rc && be->act_type != DT_F32) {
        if (!(f->host_norm = malloc((size_t)hp->n_embd * sizeof *f->host_norm))) goto oom;
        model_tensor_row_f32(&m->output_norm, 0, f->host_norm);
    }
    if (rc) {
        snprintf(err, err_len, "forward: uploading the weights to the %s backend failed (%s)",
                 be->name, strerror(-rc));
        fwd_destroy(f);
        return NULL;
    }
    if ((hp->n_expert && !(f->moe = fwd_moe_create(m, be, fwd__pad_rows(max_tokens), err, err_len))) ||
        (hp->mla && !(f->mla = fwd_mla_create(m, be, fwd__pad_rows(max_tokens), err, err_len)))) {
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

/* Bytes of one weight as the backend stores it. */
static double fwd__wbytes(const be_weight *w)
{
    return w->data ? (double)dt_row_bytes(w->type, w->n_in) * (double)w->n_out : 0.0;
}

double fwd_weight_bytes_per_token(const fwd *f)
{
    double b = fwd__wbytes(&f->output) + fwd__wbytes(&f->output_b) + fwd__wbytes(&f->output_norm) +
               (double)dt_row_bytes(f->tok_embd.type, f->tok_embd.n_in); /* one embedding row */
    for (int l = 0; l < f->m->hp.n_layers; l++) {
        const fwd_layer *L = &f->layers[l];
        const be_weight *w[] = {&L->attn_norm, &L->wo,       &L->bo,          &L->q_norm,    &L->k_norm,
                                &L->post_attn_norm, &L->ffn_norm, &L->w_down, &L->b_down, &L->post_ffn_norm};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) b += fwd__wbytes(w[i]);
        for (int i = 0; i < L->n_qkv; i++) b += fwd__wbytes(&L->qkv_w[i]) + fwd__wbytes(&L->qkv_b[i]);
        for (int i = 0; i < L->n_glu; i++) b += fwd__wbytes(&L->glu_w[i]) + fwd__wbytes(&L->glu_b[i]);
        b += fwd__wbytes(&L->sinks);
    }
    if (f->moe) b += fwd_moe_bytes_per_token(f->moe);
    if (f->mla) b += fwd_mla_bytes_per_token(f->mla);
    return b;
}

/* A bias argument for matmul: NULL when the weight has none. */
static const be_weight *fwd__bias(const be_weight *b)
{
    return b->data ? b : NULL;
}

/* out[i] = x · w[i] (+ b[i]) for n matrices over the same rows: one op where the backend has it. */
static void fwd__matmuls(fwd *f, const void *x, int n_rows, int n, const be_weight *const *w,
                         const be_weight *const *b, void *const *out)
{
    const be_ops *op = f->be->ops;
    if (op->matmul_multi) op->matmul_multi(f->be, x, n_rows, n, w, b, out);
    else
        for (int i = 0; i < n; i++) op->matmul(f->be, x, n_rows, w[i], b[i], out[i]);
}

/* out = rmsnorm(x += pending) · w over n rows: the residual add of the previous branch (pending,
 * or NULL) and the norm of the next, fused where the backend can. */
static void fwd__add_norm(fwd *f, const void *pending, const be_weight *w, int n, void *out)
{
    const model_hparams *hp = &f->m->hp;
    const be_ops *op = f->be->ops;
    if (op->add_rmsnorm) {
        op->add_rmsnorm(f->be, f->x, pending, w, hp->rms_eps, n, hp->n_embd, out);
        return;
    }
    if (pending) op->add(f->be, f->x, pending, (int64_t)n * hp->n_embd);
    op->rmsnorm(f->be, f->x, w, hp->rms_eps, n, hp->n_embd, out);
}

/* q (and, into the KV cache, k and v) of layer li from the normed input xb: the projections with
 * their biases, q/k norms, RoPE and the K/V store; one op where the backend has it. */
static void fwd__qkv(fwd *f, int li, int n)
{
    const model_hparams *hp = &f->m->hp;
    const fwd_layer *l = &f->layers[li];
    const be_ops *op = f->be->ops;
    backend *be = f->be;
    if (op->qkv) {
        be_qkv p = {.n_w = l->n_qkv, .eps = hp->rms_eps, .rope_q = &l->rope_q, .rope_k = &l->rope_k,
                    .q_norm = l->q_norm.data ? &l->q_norm : NULL, .k_norm = l->k_norm.data ? &l->k_norm : NULL};
        for (int i = 0; i < l->n_qkv; i++) p.w[i] = &l->qkv_w[i], p.b[i] = fwd__bias(&l->qkv_b[i]);
        op->qkv(be, li, f->xb, n, &p, f->q);
        return;
    }
    fwd__matmuls(f, f->xb, n, 3, (const be_weight *[]){&l->qkv_w[0], &l->qkv_w[1], &l->qkv_w[2]},
                 (const be_weight *[]){fwd__bias(&l->qkv_b[0]), fwd__bias(&l->qkv_b[1]), fwd__bias(&l->qkv_b[2])},
                 (void *[]){f->q, f->k, f->v});
    if (l->q_norm.data) { /* per head: rows of head_dim */
        op->rmsnorm(be, f->q, &l->q_norm, hp->rms_eps, n * hp->n_heads, hp->head_dim, f->q);
        op->rmsnorm(be, f->k, &l->k_norm, hp->rms_eps, n * hp->n_kv_heads, hp->head_dim, f->k);
    }
    op->rope(be, f->q, &l->rope_q);
    op->rope(be, f->k, &l->rope_k);
    op->store_kv(be, li, f->k, f->v);
}

/* hb = act(xb · Wgateᵀ) × (xb · Wupᵀ) (with biases); one op where the backend has it. */
static void fwd__glu(fwd *f, int li, int n)
{
    const model_hparams *hp = &f->m->hp;
    const fwd_layer *l = &f->layers[li];
    const be_ops *op = f->be->ops;
    int gelu = hp->ffn_act == MODEL_ACT_GELU_TANH;
    if (op->glu) {
        be_glu p = {.n_w = l->n_glu, .gelu = gelu};
        for (int i = 0; i < l->n_glu; i++) p.w[i] = &l->glu_w[i], p.b[i] = fwd__bias(&l->glu_b[i]);
        op->glu(f->be, f->xb, n, &p, f->hb);
        return;
    }
    fwd__matmuls(f, f->xb, n, 2, (const be_weight *[]){&l->glu_w[0], &l->glu_w[1]},
                 (const be_weight *[]){fwd__bias(&l->glu_b[0]), fwd__bias(&l->glu_b[1])}, (void *[]){f->hb, f->hb2});
    if (gelu)
        op->gelu_mul(f->be, f->hb, f->hb2, (int64_t)n * hp->n_ff);
    else
        op->silu_mul(f->be, f->hb, f->hb2, (int64_t)n * hp->n_ff);
}

static void fwd__ffn(fwd *f, int li, int n, const void **pending);

/* One transformer block over the step's n rows. *pending is the previous branch's output not
 * yet added to f->x (NULL before the first layer); on return it is this block's FFN output. */
static void fwd__layer(fwd *f, int li, int n, const void **pending)
{
    const model_hparams *hp = &f->m->hp;
    const fwd_layer *l = &f->layers[li];
    const be_ops *op = f->be->ops;
    backend *be = f->be;
    int dim = hp->n_embd;

    /* attention: x += post_norm(Wo · attn(rope(qk_norm(Wq·n(x))), rope(qk_norm(Wk·n(x))), Wv·n(x))) */
    fwd__add_norm(f, *pending, &l->attn_norm, n, f->xb);
    if (f->mla) { /* latent attention (forward_mla.c), then the FFN below */
        fwd_mla_attention(f->mla, li, f->xb, n, &l->qkv_w[0], &l->wo, &l->attn, f->br);
        fwd__ffn(f, li, n, pending);
        return;
    }
    fwd__qkv(f, li, n);
    be_attn at = l->attn;
    at.q_sink = NULL;
    int grp = kv_group_of(&f->geom, li);
    if (be_batch_kv(f->b, grp)->sinks) { /* attention sinks whose window has moved */
        op->rope_shift(be, f->q, f->qs, &l->rope_q, grp);
        at.q_sink = f->qs;
    }
    op->attention(be, li, f->q, &at, f->att);
    op->matmul(be, f->att, n, &l->wo, fwd__bias(&l->bo), f->br);
    if (l->post_attn_norm.data) op->rmsnorm(be, f->br, &l->post_attn_norm, hp->rms_eps, n, dim, f->br);
    fwd__ffn(f, li, n, pending);
}

/* The feed-forward half of layer li over the step's n rows, the attention branch f->br pending:
 * post_norm(Wdown · (act(Wgate·n(x)) * Wup·n(x))), or the mixture of experts of a MoE layer,
 * becomes *pending in f->br. */
static void fwd__ffn(fwd *f, int li, int n, const void **pending)
{
    const model_hparams *hp = &f->m->hp;
    const fwd_layer *l = &f->layers[li];
    const be_ops *op = f->be->ops;
    backend *be = f->be;
    int dim = hp->n_embd;
    fwd__add_norm(f, f->br, &l->ffn_norm, n, f->xb);
    *pending = f->br;
    if (model_layer_is_moe(hp, li)) {
        fwd_moe_ffn(f->moe, li, f->xb, n, f->x, f->br); /* the shared experts go straight into x */
        return;
    }
    fwd__glu(f, li, n);
    op->matmul(be, f->hb, n, &l->w_down, fwd__bias(&l->b_down), f->br);
    if (l->post_ffn_norm.data) op->rmsnorm(be, f->br, &l->post_ffn_norm, hp->rms_eps, n, dim, f->br);
}

/* The final norm and LM head on the n_logits logit rows of the step, pending the last branch. */
static void fwd__logits(fwd *f, const void *pending, int n, int n_logits)
{
    const model_hparams *hp = &f->m->hp;
    const be_ops *op = f->be->ops;
    backend *be = f->be;
    if (op->lm_head) {
        op->lm_head(be, f->x, pending, &f->output_norm, hp->rms_eps, &f->output, fwd__bias(&f->output_b),
                    hp->final_softcap, f->logits);
        return;
    }
    if (pending) op->add(be, f->x, pending, (int64_t)n * hp->n_embd);
    f->pending = NULL;
    op->gather_rows(be, f->x, hp->n_embd, f->lx);
    op->rmsnorm(be, f->lx, &f->output_norm, hp->rms_eps, n_logits, hp->n_embd, f->lx);
    op->matmul(be, f->lx, n_logits, &f->output, fwd__bias(&f->output_b), f->logits);
    if (hp->final_softcap > 0) op->softcap(be, f->logits, hp->final_softcap, (int64_t)n_logits * hp->n_vocab);
}

int fwd_begin(fwd *f, const be_batch *b)
{
    if (b->n_tokens <= 0 || b->n_tokens > f->max_tokens || b->n_logits < 0 ||
        b->n_logits > f->max_logits || b->n_seqs <= 0)
        return -EINVAL;
    f->be->pad_rows_max = f->pad_rows;
    int rc = f->be->ops->begin(f->be, b);
    if (!rc) f->b = b;
    return rc;
}

int fwd_launch(fwd *f, const float **logits)
{
    const model_hparams *hp = &f->m->hp;
    const be_ops *op = f->be->ops;
    backend *be = f->be;
    const be_batch *b = f->b;
    /* a padded step (a captured decode shape) runs every op over its padded rows */
    int n = be->step_rows > b->n_tokens ? be->step_rows : b->n_tokens;
    int n_logits = b->n_logits + (n - b->n_tokens);
    *logits = NULL;

    op->embed(be, &f->tok_embd, f->x);
    if (model_embd_scale(hp) != 1.0f) op->scale(be, f->x, model_embd_scale(hp), (int64_t)n * hp->n_embd);
    const void *pending = NULL;
    for (int l = 0; l < hp->n_layers; l++)
        fwd__layer(f, l, n, &pending);
    f->pending = pending; /* fwd_hidden adds it when a pooled sequence asks for the hidden states */
    f->n_rows = n;
    if (b->n_logits == 0) return 0;

    /* final norm and LM head only on the rows that sample */
    fwd__logits(f, pending, n, n_logits);
    *logits = f->logits;
    return 0;
}

int fwd_run(fwd *f, const be_batch *b, float *logits)
{
    const float *dev = NULL;
    int rc = fwd_begin(f, b);
    if (!rc) rc = fwd_launch(f, &dev);
    if (rc) return rc;
    if (!dev) return f->be->ops->sync(f->be);
    return f->be->ops->to_host(f->be, dev, (size_t)b->n_logits * f->m->hp.n_vocab, logits);
}

/* RMSNorm of n rows of dim (the final norm, weights w) on the host, in place. */
static void fwd__host_norm(float *x, int n, int dim, const float *w, float eps)
{
    for (int r = 0; r < n; r++) {
        float *row = x + (size_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)row[i] * row[i];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) row[i] = (float)(row[i] * inv * w[i]);
    }
}

int fwd_hidden(fwd *f, int n_rows, float *out)
{
    const model_hparams *hp = &f->m->hp;
    const be_ops *op = f->be->ops;
    if (n_rows <= 0 || n_rows > f->max_tokens || n_rows > f->n_rows) return -EINVAL;
    if (f->pending) { /* the last layer's branch, not added to the residual stream yet */
        op->add(f->be, f->x, f->pending, (int64_t)f->n_rows * hp->n_embd);
        f->pending = NULL;
    }
    if (f->be->act_type == DT_F32) { /* the backend's own norm, in f32 */
        op->rmsnorm(f->be, f->x, &f->output_norm, hp->rms_eps, n_rows, hp->n_embd, f->xb);
        return op->to_host(f->be, f->xb, (size_t)n_rows * hp->n_embd, out);
    }
    /* 16-bit activations: the f32 residual comes to the host and is normalised there, so that a
     * pooled embedding keeps f32 precision */
    int rc = op->to_host(f->be, f->x, (size_t)n_rows * hp->n_embd, out);
    if (!rc) fwd__host_norm(out, n_rows, hp->n_embd, f->host_norm, hp->rms_eps);
    return rc;
}
