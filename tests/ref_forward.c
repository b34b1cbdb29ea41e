/*
 * ref_forward.c — the float64 reference forward pass (see ref_forward.h), written as plainly as
 * the model equations: one token at a time, attention over its own K/V history. It covers every
 * architecture feature of model.h: biases, per-head q/k norms, partial / NeoX / adjacent RoPE
 * with linear and YaRN scaling and frequency factors (the ramp written out here, not through
 * backend.h), the q·k scale, soft-caps, sliding windows, post norms, GeGLU and the embedding
 * scale. Per-layer hyperparameters (window, RoPE base and scaling) come from model.h.
 */
#include "tests/ref_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kv.h"
#include "model/dtype.h"

typedef struct rf_layer {
    double *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo; /* matrices [n_out][n_in]; biases or NULL */
    double *q_norm, *k_norm, *post_attn_norm;                  /* or NULL */
    double *ffn_norm, *w_gate, *w_up, *w_down, *b_gate, *b_up, *b_down, *post_ffn_norm;
    model_rope rope;                                           /* the layer's RoPE */
    int window;                                                /* 0: full causal */
} rf_layer;

#define RF_LAYER_ARRAYS 20

struct rf_model {
    model_hparams hp;
    int kv_round;
    double *tok_embd;    /* [n_vocab][dim] */
    double *output_norm; /* [dim] */
    double *output;      /* [n_vocab][dim] */
    double *output_b;    /* [n_vocab] or NULL */
    double *rope_freqs;  /* [rope_dims / 2] or NULL */
    rf_layer *layers;
};

struct rf_seq {
    int n, max_ctx;
    double *k, *v; /* [n_layers][max_ctx][kv_dim]; with a window, K unrotated, in cache order */
    int window, sink_len, block_size; /* StreamingLLM (rf_seq_create_window); window 0: off */
    int len;       /* with a window: entries in the cache */
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

/* The arrays of a layer and the model tensors they come from, in one order. */
static void rf__layer_arrays(rf_layer *L, const model_layer *ml, double ***d, const model_tensor **t)
{
    double **dd[RF_LAYER_ARRAYS] = {&L->attn_norm, &L->wq,     &L->wk,     &L->wv,     &L->wo,
                                    &L->bq,        &L->bk,     &L->bv,     &L->bo,     &L->q_norm,
                                    &L->k_norm,    &L->post_attn_norm,     &L->ffn_norm, &L->w_gate,
                                    &L->w_up,      &L->w_down, &L->b_gate, &L->b_up,   &L->b_down,
                                    &L->post_ffn_norm};
    memcpy(d, dd, sizeof dd);
    if (!ml) return;
    const model_tensor *tt[RF_LAYER_ARRAYS] = {
        &ml->attn_norm, &ml->wq,     &ml->wk,     &ml->wv,     &ml->wo,     &ml->bq,     &ml->bk,
        &ml->bv,        &ml->bo,     &ml->q_norm, &ml->k_norm, &ml->post_attn_norm,     &ml->ffn_norm,
        &ml->w_gate,    &ml->w_up,   &ml->w_down, &ml->b_gate, &ml->b_up,   &ml->b_down, &ml->post_ffn_norm};
    memcpy(t, tt, sizeof tt);
}

rf_model *rf_create(const model *m, int kv_round)
{
    rf_model *r = calloc(1, sizeof *r);
    r->hp = m->hp;
    r->kv_round = kv_round;
    r->tok_embd = rf__deq(&m->tok_embd);
    r->output_norm = rf__deq(&m->output_norm);
    r->output = rf__deq(&m->output);
    r->output_b = rf__deq(&m->output_b);
    r->rope_freqs = rf__deq(&m->rope_freqs);
    r->layers = calloc((size_t)m->hp.n_layers, sizeof *r->layers);
    for (int l = 0; l < m->hp.n_layers; l++) {
        rf_layer *L = &r->layers[l];
        double **d[RF_LAYER_ARRAYS];
        const model_tensor *t[RF_LAYER_ARRAYS];
        rf__layer_arrays(L, &m->layers[l], d, t);
        for (int k = 0; k < RF_LAYER_ARRAYS; k++) *d[k] = rf__deq(t[k]);
        model_layer_rope(&m->hp, l, &L->rope);
        L->window = model_layer_window(&m->hp, l);
    }
    return r;
}

void rf_destroy(rf_model *r)
{
    if (!r) return;
    for (int l = 0; l < r->hp.n_layers; l++) {
        double **d[RF_LAYER_ARRAYS];
        rf__layer_arrays(&r->layers[l], NULL, d, NULL);
        for (int k = 0; k < RF_LAYER_ARRAYS; k++) free(*d[k]);
    }
    free(r->layers);
    free(r->tok_embd);
    free(r->output_norm);
    free(r->output);
    free(r->output_b);
    free(r->rope_freqs);
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

rf_seq *rf_seq_create_window(const rf_model *r, int window, int sinks, int block_size)
{
    rf_seq *s = rf_seq_create(r, window + 1);
    s->window = window;
    s->block_size = block_size;
    s->sink_len = (sinks + block_size - 1) / block_size * block_size;
    return s;
}

/* The window's release: while the cache is full, the block after the sinks leaves it. */
static void rf__window_drop(const rf_model *r, rf_seq *s)
{
    size_t kv_dim = (size_t)r->hp.n_kv_heads * r->hp.head_dim;
    while (s->len >= s->window) {
        for (int l = 0; l < r->hp.n_layers; l++) {
            double *k = s->k + (size_t)l * s->max_ctx * kv_dim, *v = s->v + (size_t)l * s->max_ctx * kv_dim;
            size_t from = (size_t)(s->sink_len + s->block_size) * kv_dim, to = (size_t)s->sink_len * kv_dim;
            size_t n = (size_t)(s->len - s->sink_len - s->block_size) * kv_dim;
            memmove(k + to, k + from, n * sizeof *k);
            memmove(v + to, v + from, n * sizeof *v);
        }
        s->len -= s->block_size;
    }
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

/* The rotation angle of pair i at position pos (ggml's rope_yarn: the interpolated angle
 * freq_scale·θ, mixed towards the extrapolated θ by the ramp between corr_lo and corr_hi). */
static double rf__angle(const rf_model *r, const model_rope *mr, int pos, int i)
{
    double theta = pos * pow((double)mr->base, -2.0 * i / mr->dims);
    if (r->rope_freqs) theta /= r->rope_freqs[i];
    double interp = mr->freq_scale * theta;
    if (mr->ext_factor == 0) return interp;
    double y = (i - mr->corr_lo) / fmax(0.001, (double)mr->corr_hi - mr->corr_lo);
    double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * mr->ext_factor;
    return interp * (1.0 - mix) + theta * mix;
}

static void rf__rope(const rf_model *r, double *x, int n_heads, const model_rope *mr, int pos)
{
    int hd = r->hp.head_dim, rd = mr->dims;
    for (int h = 0; h < n_heads; h++) {
        double *v = x + (size_t)h * hd;
        for (int i = 0; i < rd / 2; i++) {
            double theta = rf__angle(r, mr, pos, i);
            double c = cos(theta) * mr->mscale, s = sin(theta) * mr->mscale;
            int a = mr->neox ? i : 2 * i, b = mr->neox ? i + rd / 2 : 2 * i + 1;
            double x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

/* x[i] = cap · tanh(x[i] / cap) for n elements when cap > 0. */
static void rf__softcap(double *x, int n, double cap)
{
    if (cap > 0)
        for (int i = 0; i < n; i++) x[i] = cap * tanh(x[i] / cap);
}

/* Attention of one query head q [hd] over keys first .. pos of the cached k/v (row stride kv_dim). */
static void rf__attend(const rf_model *r, const double *q, const double *kc, const double *vc, int kv_dim,
                       int first, int pos, double *sc, double *out)
{
    const model_hparams *hp = &r->hp;
    int hd = hp->head_dim;
    double mx = -INFINITY, sum = 0.0;
    for (int t = first; t <= pos; t++) {
        double d = 0.0;
        for (int i = 0; i < hd; i++) d += q[i] * kc[(size_t)t * kv_dim + i];
        sc[t] = d * model_attn_scale(hp);
        if (hp->attn_softcap > 0) sc[t] = hp->attn_softcap * tanh(sc[t] / hp->attn_softcap);
        if (sc[t] > mx) mx = sc[t];
    }
    for (int t = first; t <= pos; t++) sum += sc[t] = exp(sc[t] - mx);
    for (int i = 0; i < hd; i++) {
        double acc = 0.0;
        for (int t = first; t <= pos; t++) acc += sc[t] * vc[(size_t)t * kv_dim + i];
        out[i] = acc / sum;
    }
}

static double rf__round_kv(double x, int kv_round)
{
    if (kv_round == KV_F16) return dt_f16_to_f32(dt_f32_to_f16((float)x));
    if (kv_round == KV_BF16) return dt_bf16_to_f32(dt_f32_to_bf16((float)x));
    if (kv_round == KV_F32) return (float)x;
    return x;
}

/* act(gate) * up: SiLU or tanh-GELU. */
static double rf__act(int act, double g)
{
    if (act == MODEL_ACT_GELU_TANH) return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
    return g / (1.0 + exp(-g));
}

/* x += post_norm(o) (or o itself without a post norm). */
static void rf__residual(const rf_model *r, double *x, double *o, const double *post_norm)
{
    int dim = r->hp.n_embd;
    if (post_norm) rf__rmsnorm(o, post_norm, r->hp.rms_eps, dim, o);
    for (int i = 0; i < dim; i++) x[i] += o[i];
}

void rf_step(const rf_model *r, rf_seq *s, int32_t token, double *logits)
{
    rf_step_hidden(r, s, token, logits, NULL);
}

void rf_step_hidden(const rf_model *r, rf_seq *s, int32_t token, double *logits, double *hidden)
{
    const model_hparams *hp = &r->hp;
    int dim = hp->n_embd, hd = hp->head_dim, nh = hp->n_heads, nkv = hp->n_kv_heads;
    int q_dim = nh * hd, kv_dim = nkv * hd, ff = hp->n_ff;
    if (s->window) rf__window_drop(r, s);
    int pos = s->window ? s->len : s->n; /* the query's position: within the cache with a window */
    double *x = malloc((size_t)dim * sizeof *x),
           *xb = malloc((size_t)(dim > q_dim ? dim : q_dim) * sizeof *xb);
    double *q = malloc((size_t)q_dim * sizeof *q), *att = malloc((size_t)q_dim * sizeof *att);
    double *g = malloc((size_t)ff * sizeof *g), *u = malloc((size_t)ff * sizeof *u);
    double *sc = malloc((size_t)(pos + 1) * sizeof *sc), *o = malloc((size_t)dim * sizeof *o);
    double *krot = s->window ? malloc((size_t)(pos + 1) * kv_dim * sizeof *krot) : NULL;
    for (int i = 0; i < dim; i++) x[i] = r->tok_embd[(size_t)token * dim + i] * model_embd_scale(hp);

    for (int l = 0; l < hp->n_layers; l++) {
        const rf_layer *L = &r->layers[l];
        double *kc = s->k + ((size_t)l * s->max_ctx) * kv_dim, *vc = s->v + ((size_t)l * s->max_ctx) * kv_dim;
        double *kp = kc + (size_t)pos * kv_dim, *vp = vc + (size_t)pos * kv_dim;
        rf__rmsnorm(x, L->attn_norm, hp->rms_eps, dim, xb);
        rf__matvec(L->wq, L->bq, xb, dim, q_dim, q);
        rf__matvec(L->wk, L->bk, xb, dim, kv_dim, kp);
        rf__matvec(L->wv, L->bv, xb, dim, kv_dim, vp);
        for (int h = 0; L->q_norm && h < nh; h++) rf__rmsnorm(q + h * hd, L->q_norm, hp->rms_eps, hd, q + h * hd);
        for (int h = 0; L->k_norm && h < nkv; h++) rf__rmsnorm(kp + h * hd, L->k_norm, hp->rms_eps, hd, kp + h * hd);
        rf__rope(r, q, nh, &L->rope, pos);
        if (s->window) { /* keys kept unrotated, rotated here at their position within the cache */
            memcpy(krot, kc, (size_t)(pos + 1) * kv_dim * sizeof *krot);
            for (int t = 0; t <= pos; t++) rf__rope(r, krot + (size_t)t * kv_dim, nkv, &L->rope, t);
        } else {
            rf__rope(r, kp, nkv, &L->rope, pos);
        }
        const double *ka = s->window ? krot : kc;
        for (int i = 0; i < kv_dim; i++) {
            kp[i] = rf__round_kv(kp[i], r->kv_round);
            vp[i] = rf__round_kv(vp[i], r->kv_round);
        }
        int first = L->window > 0 && pos - L->window + 1 > 0 ? pos - L->window + 1 : 0;
        for (int h = 0; h < nh; h++) {
            int kh = h / (nh / nkv);
            rf__attend(r, q + h * hd, ka + kh * hd, vc + kh * hd, kv_dim, first, pos, sc, att + h * hd);
        }
        rf__matvec(L->wo, L->bo, att, q_dim, dim, o);
        rf__residual(r, x, o, L->post_attn_norm);
        rf__rmsnorm(x, L->ffn_norm, hp->rms_eps, dim, xb);
        rf__matvec(L->w_gate, L->b_gate, xb, dim, ff, g);
        rf__matvec(L->w_up, L->b_up, xb, dim, ff, u);
        for (int i = 0; i < ff; i++) g[i] = rf__act(hp->ffn_act, g[i]) * u[i];
        rf__matvec(L->w_down, L->b_down, g, ff, dim, o);
        rf__residual(r, x, o, L->post_ffn_norm);
    }
    s->n++;
    if (s->window) s->len++;
    if (logits || hidden) rf__rmsnorm(x, r->output_norm, hp->rms_eps, dim, xb);
    if (hidden) memcpy(hidden, xb, (size_t)dim * sizeof *hidden);
    if (logits) {
        rf__matvec(r->output, r->output_b, xb, dim, hp->n_vocab, logits);
        rf__softcap(logits, hp->n_vocab, hp->final_softcap);
    }
    free(x);
    free(xb);
    free(q);
    free(att);
    free(g);
    free(u);
    free(sc);
    free(o);
    free(krot);
}
