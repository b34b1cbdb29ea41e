/*
 * moe.c — the CPU backend's mixture-of-experts FFN (be_ops.moe_ffn): routing, grouping the rows
 * by expert, the experts as grouped matmuls over the thread pool, and the weighted sum.
 *
 * A pass takes up to MOE_PASS_ROWS routed rows (token × chosen expert; a prefill chunk of many
 * tokens takes several passes):
 *   1. route every token (be_moe_route, backend.h: the one definition the GPU shares);
 *   2. count the rows of each expert and lay them out expert by expert: the token of each routed
 *      row is copied into xg, so an expert's rows are contiguous;
 *   3. gate and up of every chosen expert as one grouped matmul (cpu__matmul_grouped: one
 *      parallel for, the activations converted once), the activation, then down the same way:
 *      each chosen expert's weights are read once per pass, and an expert no token chose is not
 *      read at all — a decode step of one token reads k experts of n_expert;
 *   4. out[t] = Σ_j w_j · y[row of (t, j)], in selection order (llama.cpp's order of the sum).
 * The pass's buffers live in the backend's moe scratch; the routing and the gather run on the
 * calling thread (they are a few copies of rows), the matmuls and the activation on the pool.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "model/model.h"

/* Routed rows per pass: bounds the scratch (rows × (2 dim + 2 n_ff) floats) on long prefills. */
#define MOE_PASS_ROWS 4096

/* The pass's scratch, carved from c->moe. */
typedef struct moe_pass {
    int32_t *ids;   /* [n_tok][k] chosen experts */
    float *w;       /* [n_tok][k] their weights */
    int32_t *row;   /* [n_tok][k] the grouped row of (token, j) */
    int32_t *start; /* [n_expert + 1] first grouped row of each expert */
    float *route;   /* 3 × n_expert: be_moe_route's scratch */
    float *xg;      /* [rows][dim] the routed rows' inputs, expert by expert */
    float *g, *u;   /* [rows][n_ff] gate (then the activation) and up */
    float *y;       /* [rows][dim] the experts' outputs */
    cpu__mm_group *grp; /* [2 × n_expert] */
} moe_pass;

static size_t moe_align(size_t bytes)
{
    return (bytes + 63) & ~(size_t)63;
}

/* Carves the pass's buffers for n_tok tokens; 0 or -ENOMEM. */
static int moe_scratch(cpu__backend *c, const be_moe *m, int n_tok, int dim, int ff, moe_pass *p)
{
    int E = m->rule.n_expert, k = m->rule.n_used;
    size_t rows = (size_t)n_tok * k;
    size_t sz[] = {rows * 4, rows * 4, rows * 4, (size_t)(E + 1) * 4, (size_t)3 * E * 4, rows * dim * 4,
                   rows * ff * 4, rows * ff * 4, rows * dim * 4, (size_t)2 * E * sizeof(cpu__mm_group)};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) total += moe_align(sz[i]);
    if (cpu__scratch_reserve(&c->moe, total)) return -ENOMEM;
    char *at = c->moe.p;
    void **dst[] = {(void **)&p->ids, (void **)&p->w, (void **)&p->row, (void **)&p->start, (void **)&p->route,
                    (void **)&p->xg, (void **)&p->g, (void **)&p->u, (void **)&p->y, (void **)&p->grp};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        *dst[i] = at;
        at += moe_align(sz[i]);
    }
    return 0;
}

/* Routes n_tok tokens and lays out their rows expert by expert (the inputs copied into xg; each
 * expert's rows are p->start[e] .. p->start[e + 1]). */
static void moe_group(const be_moe *m, const float *x, const float *logits, int n_tok, int dim, moe_pass *p)
{
    int E = m->rule.n_expert, k = m->rule.n_used;
    const float *bias = m->sel_bias ? m->sel_bias->data : NULL;
    memset(p->start, 0, (size_t)(E + 1) * sizeof *p->start);
    for (int t = 0; t < n_tok; t++) {
        be_moe_route(&m->rule, logits + (size_t)t * E, bias, p->ids + (size_t)t * k, p->w + (size_t)t * k, p->route);
        for (int j = 0; j < k; j++) p->start[p->ids[t * k + j] + 1]++;
    }
    for (int e = 0; e < E; e++) p->start[e + 1] += p->start[e];
    int32_t *next = (int32_t *)p->route; /* reused: the next free row of each expert */
    for (int e = 0; e < E; e++) next[e] = p->start[e];
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < k; j++) {
            int32_t r = next[p->ids[t * k + j]]++;
            p->row[t * k + j] = r;
            memcpy(p->xg + (size_t)r * dim, x + (size_t)t * dim, (size_t)dim * sizeof(float));
        }
}

/* The groups of one projection (w[e], bias[e]) over the chosen experts' rows into g[]; returns
 * how many (an expert no token chose has none: its weights are not read). */
static int moe_groups(const be_moe *m, const be_weight *w, const be_weight *b, float *out, const moe_pass *p,
                      cpu__mm_group *g)
{
    int n = 0;
    for (int e = 0; e < m->rule.n_expert; e++) {
        int r0 = p->start[e], nr = p->start[e + 1] - r0;
        if (nr)
            g[n++] = (cpu__mm_group){.w = &w[e], .bias = b ? &b[e] : NULL, .row0 = r0, .n_rows = nr,
                                     .out = out + (size_t)r0 * w[e].n_out};
    }
    return n;
}

typedef struct act_task {
    const cpu__kern *k;
    const be_moe *m;
    float *g;
    const float *u;
    int ff;
} act_task;

static void act_run(void *v, int64_t lo, int64_t hi, int ith)
{
    act_task *t = v;
    (void)ith;
    float *g = t->g + lo * t->ff;
    const float *u = t->u + lo * t->ff;
    int64_t n = (hi - lo) * t->ff;
    if (t->m->act != MODEL_ACT_SWIGLU_OAI) {
        t->k->silu_mul(g, u, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) g[i] = be_swiglu_oai(g[i], u[i], t->m->alpha, t->m->limit);
}

/* One pass over n_tok tokens; 0 or -ENOMEM. */
static int moe_pass_run(cpu__backend *c, const float *x, int n_tok, const float *logits, const be_moe *m,
                        float *out)
{
    int dim = (int)m->gate[0].n_in, ff = (int)m->gate[0].n_out, k = m->rule.n_used;
    moe_pass p;
    if (moe_scratch(c, m, n_tok, dim, ff, &p)) return -ENOMEM;
    moe_group(m, x, logits, n_tok, dim, &p);
    int rows = n_tok * k;
    /* gate and up in one grouped matmul, then the activation, then down */
    int ng = moe_groups(m, m->gate, m->b_gate, p.g, &p, p.grp);
    ng += moe_groups(m, m->up, m->b_up, p.u, &p, p.grp + ng);
    int rc = cpu__matmul_grouped(c, p.xg, rows, ng, p.grp);
    if (rc) return rc;
    act_task at = {&c->k, m, p.g, p.u, ff};
    if ((int64_t)rows * ff < 32768) act_run(&at, 0, rows, 0);
    else cpu__pool_for(c->pool, rows, 1 + 8192 / ff, act_run, &at);
    ng = moe_groups(m, m->down, m->b_down, p.y, &p, p.grp);
    if ((rc = cpu__matmul_grouped(c, p.g, rows, ng, p.grp))) return rc;
    for (int t = 0; t < n_tok; t++) { /* the weighted sum, in selection order */
        float *o = out + (size_t)t * dim;
        const float *y0 = p.y + (size_t)p.row[t * k] * dim;
        float w0 = p.w[t * k];
        for (int i = 0; i < dim; i++) o[i] = y0[i] * w0;
        for (int j = 1; j < k; j++) {
            const float *y = p.y + (size_t)p.row[t * k + j] * dim;
            float wj = p.w[t * k + j];
            for (int i = 0; i < dim; i++) o[i] += y[i] * wj;
        }
    }
    return 0;
}

void cpu__moe_ffn(cpu__backend *c, const float *x, int n_rows, const float *logits, const be_moe *m, float *out)
{
    int dim = (int)m->gate[0].n_in, E = m->rule.n_expert, step = MOE_PASS_ROWS / m->rule.n_used;
    if (step < 1) step = 1;
    for (int t0 = 0; t0 < n_rows; t0 += step) {
        int n = n_rows - t0 < step ? n_rows - t0 : step;
        if (moe_pass_run(c, x + (size_t)t0 * dim, n, logits + (size_t)t0 * E, m, out + (size_t)t0 * dim)) {
            /* out of memory for the pass's scratch: poison the rows rather than crash */
            for (size_t i = 0; i < (size_t)n * dim; i++) out[(size_t)t0 * dim + i] = NAN;
        }
    }
}
