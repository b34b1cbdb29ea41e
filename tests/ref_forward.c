/*
 * ref_forward.c — the float64 reference forward pass (see ref_forward.h), written as plainly as
 * the model equations: one token at a time, full attention over its own K/V history.
 */
#include "tests/ref_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kv.h"
#include "engine/dtype.h"

typedef struct rf_layer {
    double *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk,
        *bv; /* matrices [n_out][n_in]; biases or NULL */
    double *ffn_norm, *w_gate, *w_up, *w_down;
} rf_layer;

struct rf_model {
    model_hparams hp;
    int kv_round;
    double *tok_embd;    /* [n_vocab][dim] */
    double *output_norm; /* [dim] */
    double *output;      /* [n_vocab][dim] */
    rf_layer *layers;
};

struct rf_seq {
    int n, max_ctx;
    double *k, *v; /* [n_layers][max_ctx][kv_dim] */
};

/* Whole tensor as double [ne1][ne0]; NULL when absent. */
static double *rf__deq(const model_tensor *t)
{
    if (!t->data) return NULL;
    int64_t n0 = t->ne[0], n1 = t->ne[1];
    double *d = malloc((size_t)(n0 * n1) * sizeof *d);
    float *row = malloc((size_t)n0 * sizeof *row);
    for (int64_t r = 0; r < n1; r++) {
        model_tensor_row_f32(t, r, row);
        for (int64_t i = 0; i < n0; i++)
            d[r * n0 + i] = row[i];
    }
    free(row);
    return d;
}

rf_model *rf_create(const model *m, int kv_round)
{
    rf_model *r = calloc(1, sizeof *r);
    r->hp = m->hp;
    r->kv_round = kv_round;
    r->tok_embd = rf__deq(&m->tok_embd);
    r->output_norm = rf__deq(&m->output_norm);
    r->output = rf__deq(&m->output);
    r->layers = calloc((size_t)m->hp.n_layers, sizeof *r->layers);
    for (int l = 0; l < m->hp.n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        rf_layer *L = &r->layers[l];
        L->attn_norm = rf__deq(&ml->attn_norm);
        L->wq = rf__deq(&ml->wq);
        L->wk = rf__deq(&ml->wk);
        L->wv = rf__deq(&ml->wv);
        L->wo = rf__deq(&ml->wo);
        L->bq = rf__deq(&ml->bq);
        L->bk = rf__deq(&ml->bk);
        L->bv = rf__deq(&ml->bv);
        L->ffn_norm = rf__deq(&ml->ffn_norm);
        L->w_gate = rf__deq(&ml->w_gate);
        L->w_up = rf__deq(&ml->w_up);
        L->w_down = rf__deq(&ml->w_down);
    }
    return r;
}

void rf_destroy(rf_model *r)
{
    if (!r) return;
    for (int l = 0; l < r->hp.n_layers; l++) {
        rf_layer *L = &r->layers[l];
        double *p[] = {L->attn_norm, L->wq, L->wk,       L->wv,     L->wo,   L->bq,
                       L->bk,        L->bv, L->ffn_norm, L->w_gate, L->w_up, L->w_down};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            free(p[i]);
    }
    free(r->layers);
    free(r->tok_embd);
    free(r->output_norm);
    free(r->output);
    free(r);
}

rf_seq *rf_seq_create(const rf_model *r, int max_ctx)
{
    rf_seq *s = calloc(1, sizeof *s);
    size_t n =
        (size_t)r->hp.n_layers * (size_t)max_ctx * (size_t)(r->hp.n_kv_heads * r->hp.head_dim);
    s->max_ctx = max_ctx;
    s->k = calloc(n, sizeof *s->k);
    s->v = calloc(n, sizeof *s->v);
    return s;
}

void rf_seq_destroy(rf_seq *s)
{
    if (!s) return;
    free(s->k);
    free(s->v);
    free(s);
}

int rf_seq_len(const rf_seq *s)
{
    return s->n;
}

int rf_argmax(const double *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void rf__rmsnorm(const double *x, const double *w, double eps, int n, double *out)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * s * w[i];
}

/* out[o] = Σ_i W[o][i] x[i] (+ b[o]) */
static void rf__matvec(const double *W, const double *b, const double *x, int n_in, int n_out,
                       double *out)
{
    for (int o = 0; o < n_out; o++) {
        double acc = b ? b[o] : 0.0;
        for (int i = 0; i < n_in; i++)
            acc += W[(size_t)o * n_in + i] * x[i];
        out[o] = acc;
    }
}

static void rf__rope(double *x, int n_heads, const model_hparams *hp, int pos)
{
    int hd = hp->head_dim, rd = hp->rope_dims;
    for (int h = 0; h < n_heads; h++) {
        double *v = x + (size_t)h * hd;
        for (int i = 0; i < rd / 2; i++) {
            double theta = pos * pow((double)hp->rope_base, -2.0 * i / rd);
            double c = cos(theta), s = sin(theta);
            int a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + rd / 2 : 2 * i + 1;
            double x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

static double rf__round_kv(double x, int kv_round)
{
    if (kv_round == KV_F16) return dt_f16_to_f32(dt_f32_to_f16((float)x));
    if (kv_round == KV_BF16) return dt_bf16_to_f32(dt_f32_to_bf16((float)x));
    if (kv_round == KV_F32) return (float)x;
    return x;
}

void rf_step(const rf_model *r, rf_seq *s, int32_t token, double *logits)
{
    const model_hparams *hp = &r->hp;
    int dim = hp->n_embd, hd = hp->head_dim, nh = hp->n_heads, nkv = hp->n_kv_heads;
    int q_dim = nh * hd, kv_dim = nkv * hd, ff = hp->n_ff, pos = s->n;
    double *x = malloc((size_t)dim * sizeof *x),
           *xb = malloc((size_t)(dim > q_dim ? dim : q_dim) * sizeof *xb);
    double *q = malloc((size_t)q_dim * sizeof *q), *att = malloc((size_t)q_dim * sizeof *att);
    double *g = malloc((size_t)ff * sizeof *g), *u = malloc((size_t)ff * sizeof *u);
    double *sc = malloc((size_t)(pos + 1) * sizeof *sc), *o = malloc((size_t)dim * sizeof *o);
    memcpy(x, r->tok_embd + (size_t)token * dim, (size_t)dim * sizeof *x);

    for (int l = 0; l < hp->n_layers; l++) {
        const rf_layer *L = &r->layers[l];
        double *kc = s->k + ((size_t)l * s->max_ctx) * kv_dim,
               *vc = s->v + ((size_t)l * s->max_ctx) * kv_dim;
        rf__rmsnorm(x, L->attn_norm, hp->rms_eps, dim, xb);
        rf__matvec(L->wq, L->bq, xb, dim, q_dim, q);
        rf__matvec(L->wk, L->bk, xb, dim, kv_dim, kc + (size_t)pos * kv_dim);
        rf__matvec(L->wv, L->bv, xb, dim, kv_dim, vc + (size_t)pos * kv_dim);
        rf__rope(q, nh, hp, pos);
        rf__rope(kc + (size_t)pos * kv_dim, nkv, hp, pos);
        for (int i = 0; i < kv_dim; i++) {
            kc[(size_t)pos * kv_dim + i] = rf__round_kv(kc[(size_t)pos * kv_dim + i], r->kv_round);
            vc[(size_t)pos * kv_dim + i] = rf__round_kv(vc[(size_t)pos * kv_dim + i], r->kv_round);
        }
        for (int h = 0; h < nh; h++) {
            int kh = h / (nh / nkv);
            double mx = -INFINITY, sum = 0.0;
            for (int t = 0; t <= pos; t++) {
                double d = 0.0;
                for (int i = 0; i < hd; i++)
                    d += q[h * hd + i] * kc[(size_t)t * kv_dim + kh * hd + i];
                sc[t] = d / sqrt((double)hd);
                if (sc[t] > mx) mx = sc[t];
            }
            for (int t = 0; t <= pos; t++)
                sum += sc[t] = exp(sc[t] - mx);
            for (int i = 0; i < hd; i++) {
                double acc = 0.0;
                for (int t = 0; t <= pos; t++)
                    acc += sc[t] * vc[(size_t)t * kv_dim + kh * hd + i];
                att[h * hd + i] = acc / sum;
            }
        }
        rf__matvec(L->wo, NULL, att, q_dim, dim, o);
        for (int i = 0; i < dim; i++)
            x[i] += o[i];
        rf__rmsnorm(x, L->ffn_norm, hp->rms_eps, dim, xb);
        rf__matvec(L->w_gate, NULL, xb, dim, ff, g);
        rf__matvec(L->w_up, NULL, xb, dim, ff, u);
        for (int i = 0; i < ff; i++)
            g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
        rf__matvec(L->w_down, NULL, g, ff, dim, o);
        for (int i = 0; i < dim; i++)
            x[i] += o[i];
    }
    s->n++;
    if (logits) {
        rf__rmsnorm(x, r->output_norm, hp->rms_eps, dim, xb);
        rf__matvec(r->output, NULL, xb, dim, hp->n_vocab, logits);
    }
    free(x);
    free(xb);
    free(q);
    free(att);
    free(g);
    free(u);
    free(sc);
    free(o);
}
