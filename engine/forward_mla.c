/*
 * forward_mla.c — multi-head latent attention in the model graph (see forward_mla.h): uploads
 * each layer's LoRA query projections, the latent's down-projection and norm, and the per-head
 * key and value up-projections (one be_weight per head view), then runs a layer as a few
 * matmuls around the backend's mla_qk, store_kv, attention and mla_out.
 *
 * Invariants: the uploads and scratch belong to the backend for the object's life; the model and
 * the backend are borrowed. Called by forward.c on the engine thread.
 */
#include "engine/forward_mla.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mla_layer {
    be_weight wq_a, q_a_norm, wq_b; /* the q LoRA (data NULL without) */
    be_weight wkv_a, kv_a_norm;
    be_weight *k_b, *v_b;           /* [n_heads] each */
    be_mla m;
    int prepared;                   /* mla_prepare succeeded: release it */
} mla_layer;

struct fwd_mla {
    const model *m; /* borrowed */
    backend *be;    /* borrowed */
    mla_layer *layers;
    /* scratch, activations of the backend's act_type */
    void *qa;    /* [T][q_lora_rank] */
    void *q;     /* [T][n_heads][qk_nope + rope] */
    void *kv;    /* [T][kv_lora + rope] */
    void *q_lat; /* [T][n_heads][kv_lora + rope] */
    void *k_lat; /* [T][kv_lora + rope] */
    void *o;     /* [T][n_heads][kv_lora + rope] the latent attention's output */
    void *ov;    /* [T][n_heads × v_head] */
};

static int mla_layer_upload(fwd_mla *x, int il, mla_layer *L)
{
    const model_hparams *hp = &x->m->hp;
    const model_layer *ml = &x->m->layers[il];
    int H = hp->n_heads, rc;
    L->k_b = calloc((size_t)H, sizeof *L->k_b);
    L->v_b = calloc((size_t)H, sizeof *L->v_b);
    if (!L->k_b || !L->v_b) return -ENOMEM;
    if ((rc = be_weight_upload_opt(x->be, &ml->wq_a, &L->wq_a)) || (rc = be_weight_upload_opt(x->be, &ml->q_a_norm, &L->q_a_norm)) ||
        (rc = be_weight_upload_opt(x->be, &ml->wq_b, &L->wq_b)) || (rc = be_weight_upload_opt(x->be, &ml->wkv_a, &L->wkv_a)) ||
        (rc = be_weight_upload_opt(x->be, &ml->kv_a_norm, &L->kv_a_norm)))
        return rc;
    for (int h = 0; h < H; h++)
        if ((rc = be_weight_upload_opt(x->be, &ml->wk_b[h], &L->k_b[h])) || (rc = be_weight_upload_opt(x->be, &ml->wv_b[h], &L->v_b[h]))) return rc;
    model_rope mr;
    model_layer_rope(hp, il, &mr);
    be_rope r = {.n_heads = H, .head_dim = hp->rope_dims, .rope_dims = hp->rope_dims, .base = mr.base,
                 .neox = mr.neox, .freq_scale = mr.freq_scale, .ext_factor = mr.ext_factor, .corr_lo = mr.corr_lo,
                 .corr_hi = mr.corr_hi, .mscale = mr.mscale};
    L->m = (be_mla){.n_heads = H, .qk_nope = hp->qk_nope, .rope = hp->rope_dims, .kv_lora = hp->kv_lora_rank,
                    .v_head = hp->v_head_dim, .eps = hp->rms_eps, .kv_norm = &L->kv_a_norm, .k_b = L->k_b,
                    .v_b = L->v_b, .rope_q = r, .rope_k = r};
    L->m.rope_k.n_heads = 1;
    if ((rc = x->be->ops->mla_prepare(x->be, &L->m))) return rc;
    L->prepared = 1;
    return 0;
}

static void mla_layer_free(fwd_mla *x, mla_layer *L)
{
    if (L->prepared) x->be->ops->mla_release(x->be, &L->m);
    for (int h = 0; h < x->m->hp.n_heads; h++) {
        if (L->k_b) be_weight_release(x->be, &L->k_b[h]);
        if (L->v_b) be_weight_release(x->be, &L->v_b[h]);
    }
    free(L->k_b);
    free(L->v_b);
    be_weight *ws[] = {&L->wq_a, &L->q_a_norm, &L->wq_b, &L->wkv_a, &L->kv_a_norm};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) be_weight_release(x->be, ws[i]);
}

void fwd_mla_destroy(fwd_mla *x)
{
    if (!x) return;
    for (int l = 0; x->layers && l < x->m->hp.n_layers; l++) mla_layer_free(x, &x->layers[l]);
    free(x->layers);
    void *bufs[] = {x->qa, x->q, x->kv, x->q_lat, x->k_lat, x->o, x->ov};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) x->be->ops->free(x->be, bufs[i]);
    free(x);
}

fwd_mla *fwd_mla_create(const model *m, backend *be, int max_tokens, char *err, size_t err_len)
{
    const model_hparams *hp = &m->hp;
    if (!be->ops->mla_qk || !be->ops->mla_out || !be->ops->mla_prepare || !be->ops->mla_release) {
        snprintf(err, err_len, "forward: the %s backend cannot run multi-head latent attention (%s)", be->name,
                 hp->arch_name);
        return NULL;
    }
    fwd_mla *x = calloc(1, sizeof *x);
    if (!x) goto oom;
    x->m = m;
    x->be = be;
    if (!(x->layers = calloc((size_t)hp->n_layers, sizeof *x->layers))) goto oom;
    size_t T = (size_t)max_tokens, H = (size_t)hp->n_heads, hl = (size_t)hp->head_dim;
    struct {
        void **p;
        size_t n;
    } s[] = {{&x->qa, T * (hp->q_lora_rank ? hp->q_lora_rank : 1)}, {&x->q, T * H * (hp->qk_nope + hp->rope_dims)},
             {&x->kv, T * hl}, {&x->q_lat, T * H * hl}, {&x->k_lat, T * hl}, {&x->o, T * H * hl},
             {&x->ov, T * H * hp->v_head_dim}};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (!(*s[i].p = be->ops->alloc(be, s[i].n))) goto oom;
    for (int l = 0; l < hp->n_layers; l++) {
        int rc = mla_layer_upload(x, l, &x->layers[l]);
        if (rc) {
            snprintf(err, err_len, "forward: uploading layer %d's latent attention to the %s backend failed (%s)", l,
                     be->name, strerror(-rc));
            fwd_mla_destroy(x);
            return NULL;
        }
    }
    return x;
oom:
    fwd_mla_destroy(x);
    snprintf(err, err_len, "forward: out of memory for the latent attention's scratch");
    return NULL;
}

static double mla_wbytes(const be_weight *w)
{
    return w->data ? (double)dt_row_bytes(w->type, w->n_in) * (double)w->n_out : 0.0;
}

double fwd_mla_bytes_per_token(const fwd_mla *x)
{
    double b = 0;
    for (int l = 0; l < x->m->hp.n_layers; l++) {
        const mla_layer *L = &x->layers[l];
        const be_weight *ws[] = {&L->wq_a, &L->q_a_norm, &L->wq_b, &L->wkv_a, &L->kv_a_norm};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) b += mla_wbytes(ws[i]);
        for (int h = 0; h < x->m->hp.n_heads; h++) b += mla_wbytes(&L->k_b[h]) + mla_wbytes(&L->v_b[h]);
    }
    return b;
}

void fwd_mla_attention(fwd_mla *x, int li, const void *h, int n, const be_weight *wq, const be_weight *wo,
                       const be_attn *at, void *out)
{
    const model_hparams *hp = &x->m->hp;
    const be_ops *op = x->be->ops;
    backend *be = x->be;
    mla_layer *L = &x->layers[li];
    if (L->wq_a.data) { /* the q LoRA: down, norm, up */
        op->matmul(be, h, n, &L->wq_a, NULL, x->qa);
        op->rmsnorm(be, x->qa, &L->q_a_norm, hp->rms_eps, n, hp->q_lora_rank, x->qa);
        op->matmul(be, x->qa, n, &L->wq_b, NULL, x->q);
        op->matmul(be, h, n, &L->wkv_a, NULL, x->kv);
    } else {
        const be_weight *w[2] = {wq, &L->wkv_a}, *b[2] = {NULL, NULL};
        void *o[2] = {x->q, x->kv};
        if (op->matmul_multi) op->matmul_multi(be, h, n, 2, w, b, o);
        else
            for (int i = 0; i < 2; i++) op->matmul(be, h, n, w[i], NULL, o[i]);
    }
    op->mla_qk(be, x->q, x->kv, &L->m, x->q_lat, x->k_lat);
    op->store_kv(be, li, x->k_lat, NULL);
    op->attention(be, li, x->q_lat, at, x->o);
    op->mla_out(be, x->o, &L->m, x->ov);
    op->matmul(be, x->ov, n, wo, NULL, out);
}
