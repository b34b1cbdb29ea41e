/*
 * forward_moe.c — the mixture-of-experts FFN of the model graph (see forward_moe.h): uploads
 * every MoE layer's router, experts (one be_weight per expert view of the model) and shared
 * experts, lets the backend prepare each layer (moe_prepare), and runs a layer as the router's
 * matmul, the backend's moe_ffn and, for deepseek2, the shared experts' SwiGLU added on.
 *
 * Invariants: the uploads and scratch belong to the backend for the object's life; the model and
 * the backend are borrowed. Called by forward.c on the engine thread.
 */
#include "engine/forward_moe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The experts' six projections, in the order of moe_layer.w. */
enum { MW_GATE, MW_UP, MW_DOWN, MW_BGATE, MW_BUP, MW_BDOWN, MW_N };

typedef struct moe_layer {
    be_weight router, router_b, sel_bias; /* [n_embd → n_expert], [n_expert], [n_expert] */
    be_weight *w;                         /* [MW_N][n_expert]; a bias row of NULL data when absent */
    be_weight gate_sh, up_sh, down_sh;    /* shared experts, data NULL when none */
    be_moe m;
    int prepared;                         /* moe_prepare succeeded: release it */
} moe_layer;

struct fwd_moe {
    const model *m; /* borrowed */
    backend *be;    /* borrowed */
    moe_layer *layers;  /* [n_layers]; the dense layers' are zero */
    /* activations (the backend's act_type) */
    float *logits;      /* [max_tokens][n_expert] the router's output, f32 (matmul_f32) */
    void *sh_g, *sh_u;  /* [max_tokens][n_ff_shexp] the shared experts' gate and up */
    void *sh_out;       /* [max_tokens][n_embd] their output */
};

/* Uploads layer il's tensors and fills its be_moe. 0 or a negative errno. */
static int moe_layer_upload(fwd_moe *x, int il, moe_layer *L)
{
    const model_hparams *hp = &x->m->hp;
    const model_layer *ml = &x->m->layers[il];
    int E = hp->n_expert, rc;
    if (!(L->w = calloc((size_t)MW_N * E, sizeof *L->w))) return -ENOMEM;
    if ((rc = be_weight_upload_opt(x->be, &ml->gate_inp, &L->router)) || (rc = be_weight_upload_opt(x->be, &ml->gate_inp_b, &L->router_b)) ||
        (rc = be_weight_upload_opt(x->be, &ml->exp_probs_b, &L->sel_bias)) || (rc = be_weight_upload_opt(x->be, &ml->gate_shexp, &L->gate_sh)) ||
        (rc = be_weight_upload_opt(x->be, &ml->up_shexp, &L->up_sh)) || (rc = be_weight_upload_opt(x->be, &ml->down_shexp, &L->down_sh)))
        return rc;
    const model_tensor *src[MW_N] = {ml->gate_exps, ml->up_exps, ml->down_exps, ml->b_gate_exps, ml->b_up_exps,
                                     ml->b_down_exps};
    for (int k = 0; k < MW_N; k++)
        for (int e = 0; e < E && src[k]; e++)
            if ((rc = be_weight_upload_opt(x->be, &src[k][e], &L->w[k * E + e]))) return rc;
    L->m = (be_moe){
        .rule = {.n_expert = E, .n_used = hp->n_expert_used, .gating = hp->expert_gating,
                 .norm = hp->expert_weights_norm, .scale = hp->expert_weights_scale, .n_groups = hp->n_expert_groups,
                 .n_group_used = hp->n_group_used},
        .act = hp->ffn_act == MODEL_ACT_SWIGLU_OAI ? MODEL_ACT_SWIGLU_OAI : MODEL_ACT_SILU,
        .alpha = 1.702f, .limit = 7.0f, /* gpt-oss's constants, hard-coded as in llama.cpp */
        .sel_bias = L->sel_bias.data ? &L->sel_bias : NULL,
        .gate = &L->w[MW_GATE * E], .up = &L->w[MW_UP * E], .down = &L->w[MW_DOWN * E],
        .b_gate = src[MW_BGATE] ? &L->w[MW_BGATE * E] : NULL, .b_up = src[MW_BUP] ? &L->w[MW_BUP * E] : NULL,
        .b_down = src[MW_BDOWN] ? &L->w[MW_BDOWN * E] : NULL};
    if ((rc = x->be->ops->moe_prepare(x->be, &L->m))) return rc;
    L->prepared = 1;
    return 0;
}

static void moe_layer_free(fwd_moe *x, moe_layer *L)
{
    int E = x->m->hp.n_expert;
    if (L->prepared) x->be->ops->moe_release(x->be, &L->m);
    for (int k = 0; L->w && k < MW_N * E; k++) be_weight_release(x->be, &L->w[k]);
    free(L->w);
    be_weight *ws[] = {&L->router, &L->router_b, &L->sel_bias, &L->gate_sh, &L->up_sh, &L->down_sh};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) be_weight_release(x->be, ws[i]);
}

void fwd_moe_destroy(fwd_moe *x)
{
    if (!x) return;
    for (int l = 0; x->layers && l < x->m->hp.n_layers; l++) moe_layer_free(x, &x->layers[l]);
    free(x->layers);
    void *bufs[] = {x->logits, x->sh_g, x->sh_u, x->sh_out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) x->be->ops->free(x->be, bufs[i]);
    free(x);
}

fwd_moe *fwd_moe_create(const model *m, backend *be, int max_tokens, char *err, size_t err_len)
{
    const model_hparams *hp = &m->hp;
    if (!be->ops->moe_ffn || !be->ops->moe_prepare || !be->ops->moe_release ||
        (be->act_type != DT_F32 && !be->ops->matmul_f32)) {
        snprintf(err, err_len, "forward: the %s backend cannot run mixtures of experts (%s has %d experts)", be->name,
                 hp->arch_name, hp->n_expert);
        return NULL;
    }
    fwd_moe *x = calloc(1, sizeof *x);
    if (!x) goto oom;
    x->m = m;
    x->be = be;
    if (!(x->layers = calloc((size_t)hp->n_layers, sizeof *x->layers))) goto oom;
    size_t T = (size_t)max_tokens;
    x->logits = be_alloc_f32(be, T * hp->n_expert);
    x->sh_out = be->ops->alloc(be, T * hp->n_embd);
    if (!x->logits || !x->sh_out) goto oom;
    if (hp->n_ff_shexp) {
        x->sh_g = be->ops->alloc(be, T * hp->n_ff_shexp);
        x->sh_u = be->ops->alloc(be, T * hp->n_ff_shexp);
        if (!x->sh_g || !x->sh_u) goto oom;
    }
    for (int l = 0; l < hp->n_layers; l++) {
        if (!model_layer_is_moe(hp, l)) continue;
        int rc = moe_layer_upload(x, l, &x->layers[l]);
        if (rc) {
            snprintf(err, err_len, "forward: uploading layer %d's experts to the %s backend failed (%s)", l, be->name,
                     strerror(-rc));
            fwd_moe_destroy(x);
            return NULL;
        }
    }
    return x;
oom:
    fwd_moe_destroy(x);
    snprintf(err, err_len, "forward: out of memory for the experts' scratch");
    return NULL;
}

static double moe_wbytes(const be_weight *w)
{
    return w->data ? (double)dt_row_bytes(w->type, w->n_in) * (double)w->n_out : 0.0;
}

double fwd_moe_bytes_per_token(const fwd_moe *x)
{
    const model_hparams *hp = &x->m->hp;
    double b = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        const moe_layer *L = &x->layers[l];
        if (!L->w) continue; /* a dense layer */
        const be_weight *one[] = {&L->router, &L->router_b, &L->sel_bias, &L->gate_sh, &L->up_sh, &L->down_sh};
        for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) b += moe_wbytes(one[i]);
        double e = 0;
        for (int k = 0; k < MW_N * hp->n_expert; k++) e += moe_wbytes(&L->w[k]);
        b += e * hp->n_expert_used / hp->n_expert;
    }
    return b;
}

void fwd_moe_ffn(fwd_moe *x, int li, const void *h, int n, float *resid, void *out)
{
    const model_hparams *hp = &x->m->hp;
    const be_ops *op = x->be->ops;
    backend *be = x->be;
    moe_layer *L = &x->layers[li];
    const be_weight *rb = L->router_b.data ? &L->router_b : NULL;
    if (op->matmul_f32) op->matmul_f32(be, h, n, &L->router, rb, x->logits); /* routed in f32, as the CPU */
    else op->matmul(be, h, n, &L->router, rb, x->logits);                     /* f32 activations */
    op->moe_ffn(be, h, n, x->logits, &L->m, out);
    if (!L->gate_sh.data) return;
    const be_weight *w[2] = {&L->gate_sh, &L->up_sh}, *b[2] = {NULL, NULL};
    void *o[2] = {x->sh_g, x->sh_u};
    if (op->matmul_multi) op->matmul_multi(be, h, n, 2, w, b, o);
    else
        for (int i = 0; i < 2; i++) op->matmul(be, h, n, w[i], NULL, o[i]);
    op->silu_mul(be, x->sh_g, x->sh_u, (int64_t)n * hp->n_ff_shexp);
    op->matmul(be, x->sh_g, n, &L->down_sh, NULL, x->sh_out);
    op->add(be, resid, x->sh_out, (int64_t)n * hp->n_embd);
}
