/*
 * pool.c — pooling of a prefill-only sequence's hidden states and the classification head of
 * rerankers (see pool.h). Sums are kept in double: a mean over thousands of rows keeps the
 * precision of its terms. Called by the engine thread (engine.c) after each forward, and by the
 * server at start-up (pool_head_init, to refuse rank pooling a model cannot do).
 */
#include "engine/pool.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the accumulator ------------------------------------------------------------------------ */

pool_acc *pool_acc_create(int kind, int dim, int n_prompt, int rank_last)
{
    if (kind < MODEL_POOL_MEAN || kind > MODEL_POOL_RANK || dim <= 0 || n_prompt <= 0) return NULL;
    pool_acc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->sum = calloc((size_t)dim, sizeof *a->sum);
    if (!a->sum) {
        free(a);
        return NULL;
    }
    a->kind = kind;
    a->dim = dim;
    a->n_prompt = n_prompt;
    int last = kind == MODEL_POOL_LAST || (kind == MODEL_POOL_RANK && rank_last);
    a->row = last ? n_prompt - 1 : 0;
    return a;
}

void pool_acc_destroy(pool_acc *a)
{
    if (!a) return;
    free(a->sum);
    free(a);
}

void pool_acc_add(pool_acc *a, const float *rows, int n, int first)
{
    if (a->kind == MODEL_POOL_MEAN) {
        /* positions below next were summed already (a recomputation after a preemption) */
        for (int p = a->next > first ? a->next : first; p < first + n && p < a->n_prompt; p++) {
            const float *r = rows + (size_t)(p - first) * a->dim;
            for (int i = 0; i < a->dim; i++) a->sum[i] += r[i];
            a->next = p + 1;
        }
        return;
    }
    if (a->have || a->row < first || a->row >= first + n) return;
    const float *r = rows + (size_t)(a->row - first) * a->dim;
    for (int i = 0; i < a->dim; i++) a->sum[i] = r[i];
    a->have = 1;
}

int pool_acc_done(const pool_acc *a)
{
    return a->kind == MODEL_POOL_MEAN ? a->next == a->n_prompt : a->have;
}

int pool_acc_wants(const pool_acc *a, int first, int n)
{
    if (a->kind == MODEL_POOL_MEAN) return first + n > a->next && a->next < a->n_prompt;
    return !a->have && a->row >= first && a->row < first + n;
}

int pool_acc_whole(const pool_acc *a)
{
    return a->row == 0 || a->kind == MODEL_POOL_MEAN;
}

void pool_acc_result(const pool_acc *a, float *out)
{
    double k = a->kind == MODEL_POOL_MEAN && a->next > 0 ? 1.0 / a->next : 1.0;
    for (int i = 0; i < a->dim; i++) out[i] = (float)(a->sum[i] * k);
}

void pool_acc_check(const pool_acc *a)
{
    assert(a->kind >= MODEL_POOL_MEAN && a->kind <= MODEL_POOL_RANK);
    assert(a->dim > 0 && a->n_prompt > 0 && a->sum);
    assert(a->next >= 0 && a->next <= a->n_prompt);
    assert(a->kind == MODEL_POOL_MEAN || a->next == 0);
    assert(a->kind != MODEL_POOL_MEAN || !a->have);
    assert(a->row == 0 || a->row == a->n_prompt - 1);
    assert(a->kind != MODEL_POOL_CLS || a->row == 0);
    assert(a->kind != MODEL_POOL_LAST || a->row == a->n_prompt - 1);
    (void)a;
}

/* ---- the classification head ---------------------------------------------------------------- */

/* Rows [0 .. n) of matrix t dequantised into a new [n][t->ne[0]] array (rows[]: their indices,
 * or NULL for 0 .. n-1). NULL on -ENOMEM. */
static float *head_rows(const model_tensor *t, const int32_t *rows, int n)
{
    size_t d = (size_t)t->ne[0];
    float *v = malloc(sizeof *v * d * (size_t)n);
    for (int r = 0; v && r < n; r++) model_tensor_row_f32(t, rows ? rows[r] : r, v + (size_t)r * d);
    return v;
}

/* An F32 vector's elements [idx[i]] (idx NULL: all n), or NULL when t is absent. */
static float *head_vec(const model_tensor *t, const int32_t *idx, int n, int *oom)
{
    if (!t->data) return NULL;
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v) {
        *oom = 1;
        return NULL;
    }
    const float *src = t->data;
    for (int i = 0; i < n; i++) memcpy(&v[i], src + (idx ? idx[i] : i), sizeof *v);
    return v;
}

int pool_head_init(pool_head *h, const model *m, const tokenizer *tok, char *err, size_t err_len)
{
    memset(h, 0, sizeof *h);
    const model_hparams *hp = &m->hp;
    h->dim = hp->n_embd;
    int oom = 0;
    if (m->cls_out.data || m->cls.data) {
        /* llama.cpp: qwen3 rerankers pool the last token and softmax their outputs */
        int qwen3 = hp->arch == MODEL_ARCH_QWEN3;
        h->last = h->softmax = qwen3;
        h->n_out = m->cls_out.data ? (int)m->cls_out.ne[1] : h->dim;
        if (m->cls.data && !(h->cls = head_rows(&m->cls, NULL, h->dim))) oom = 1;
        h->cls_b = head_vec(&m->cls_b, NULL, h->dim, &oom);
        if (m->cls_out.data && !(h->out = head_rows(&m->cls_out, NULL, h->n_out))) oom = 1;
        h->out_b = head_vec(&m->cls_out_b, NULL, h->n_out, &oom);
    } else {
        int32_t ids[2] = {tok ? tok_find(tok, "yes") : -1, tok ? tok_find(tok, "no") : -1};
        if (ids[0] < 0 || ids[1] < 0 || ids[0] >= hp->n_vocab || ids[1] >= hp->n_vocab) {
            snprintf(err, err_len, "the model is no reranker: it has no classification head (cls.output.weight) "
                     "and its vocabulary no \"yes\" and \"no\" tokens whose logits could score relevance");
            return -EINVAL;
        }
        h->n_out = 2;
        h->last = h->softmax = 1;
        h->softcap = hp->final_softcap;
        if (!(h->out = head_rows(&m->output, ids, 2))) oom = 1;
        h->out_b = head_vec(&m->output_b, ids, 2, &oom);
    }
    if (oom) {
        pool_head_fini(h);
        snprintf(err, err_len, "out of memory for the classification head");
        return -ENOMEM;
    }
    return 0;
}

void pool_head_fini(pool_head *h)
{
    free(h->cls);
    free(h->cls_b);
    free(h->out);
    free(h->out_b);
    memset(h, 0, sizeof *h);
}

void pool_head_apply(const pool_head *h, const float *row, float *scores)
{
    int d = h->dim;
    double *x = malloc(sizeof *x * (size_t)d);
    if (!x) {
        for (int o = 0; o < h->n_out; o++) scores[o] = NAN;
        return;
    }
    for (int i = 0; i < d; i++) x[i] = row[i];
    if (h->cls) {
        double *y = malloc(sizeof *y * (size_t)d);
        for (int o = 0; y && o < d; o++) {
            double s = h->cls_b ? h->cls_b[o] : 0;
            for (int i = 0; i < d; i++) s += (double)h->cls[(size_t)o * d + i] * x[i];
            y[o] = tanh(s);
        }
        if (y) memcpy(x, y, sizeof *x * (size_t)d);
        free(y);
    }
    double mx = -INFINITY;
    for (int o = 0; o < h->n_out; o++) {
        double s = h->out ? (h->out_b ? h->out_b[o] : 0) : x[o];
        for (int i = 0; h->out && i < d; i++) s += (double)h->out[(size_t)o * d + i] * x[i];
        if (h->softcap > 0) s = h->softcap * tanh(s / h->softcap);
        scores[o] = (float)s;
        if (s > mx) mx = s;
    }
    free(x);
    if (!h->softmax) return;
    double z = 0;
    for (int o = 0; o < h->n_out; o++) z += exp((double)scores[o] - mx);
    for (int o = 0; o < h->n_out; o++) scores[o] = (float)(exp((double)scores[o] - mx) / z);
}

/* ---- a step's rows -------------------------------------------------------------------------- */

int pool_step(fwd *f, const batch_entry *e, int n, int dim, pool_rows *buf)
{
    int hi = 0, off = 0;
    for (int i = 0; i < n; off += e[i++].n_new)
        if (e[i].s->pool && pool_acc_wants(e[i].s->pool, e[i].s->n_computed, e[i].n_new)) hi = off + e[i].n_new;
    if (!hi) return 0;
    if (hi > buf->cap) {
        float *v = realloc(buf->v, sizeof *v * (size_t)hi * (size_t)dim);
        if (!v) return -ENOMEM;
        buf->v = v;
        buf->cap = hi;
    }
    int rc = fwd_hidden(f, hi, buf->v);
    if (rc) return rc;
    off = 0;
    for (int i = 0; i < n && off < hi; off += e[i++].n_new)
        if (e[i].s->pool) pool_acc_add(e[i].s->pool, buf->v + (size_t)off * dim, e[i].n_new, e[i].s->n_computed);
    return 0;
}
