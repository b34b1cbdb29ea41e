/*
 * ops.c — the CPU backend's row-wise and element-wise ops: embedding lookup, RMSNorm, RoPE (with
 * linear / YaRN scaling, frequency factors and partial rotation), SwiGLU's silu(gate) * up,
 * GeGLU's gelu_tanh(gate) * up, scaling, soft-capping and the residual add.
 *
 * These are memory-light next to the matmuls; each is split across the pool by rows (or by
 * element ranges) only when there is enough work to pay for a dispatch, and otherwise runs on
 * the calling thread. All math is f32 except RoPE's angles, which are computed in double so that
 * long positions keep their accuracy. The row kernels that depend on the SIMD level (sum of
 * squares, silu_mul, the RoPE rotation) come from the backend's table; their scalar references
 * are here.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "model/dtype.h"

/* Floats of work per chunk of a parallel op: an op smaller than one chunk runs on the calling
 * thread alone, because a dispatch would cost more than it saves. */
#define CHUNK_FLOATS 16384

static int64_t rows_per_chunk(int64_t row_floats)
{
    return row_floats >= CHUNK_FLOATS ? 1 : CHUNK_FLOATS / (row_floats > 0 ? row_floats : 1);
}

/* ---- embed --------------------------------------------------------------------------------- */

typedef struct embed_task {
    cpu__backend *c;
    const be_weight *emb;
    float *out;
} embed_task;

static void embed_run(void *v, int64_t lo, int64_t hi, int ith)
{
    embed_task *t = v;
    const cpu__batch *b = &t->c->batch;
    int64_t n_in = t->emb->n_in;
    size_t row_bytes = dt_row_bytes(t->emb->type, n_in);
    for (int64_t i = lo; i < hi; i++) {
        int32_t tok = b->tokens[i];
        const char *row = (const char *)t->emb->data + (size_t)tok * row_bytes;
        dt_to_f32(t->emb->type, row, t->out + i * n_in, n_in);
    }
}

void cpu__embed(cpu__backend *c, const be_weight *emb, float *out)
{
    embed_task t = {c, emb, out};
    cpu__pool_for(c->pool, c->batch.n_tokens, rows_per_chunk(emb->n_in), embed_run, &t);
}

/* ---- rmsnorm ------------------------------------------------------------------------------- */

typedef struct norm_task {
    const cpu__kern *k;
    const float *x;
    const float *w;
    float eps;
    int n_rows, dim;
    float *out;
} norm_task;

static void norm_run(void *v, int64_t lo, int64_t hi, int ith)
{
    norm_task *t = v;
    float (*sum_squares)(const float *, int64_t) = t->k->sum_squares;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = t->x + r * t->dim;
        float *o = t->out + r * t->dim;
        float scale = 1.0f / sqrtf(sum_squares(x, t->dim) / (float)t->dim + t->eps);
        for (int i = 0; i < t->dim; i++) o[i] = x[i] * scale * t->w[i];
    }
}

void cpu__rmsnorm(cpu__backend *c, const float *x, const be_weight *w, float eps, int n_rows,
                  int dim, float *out)
{
    norm_task t = {&c->k, x, w->data, eps, n_rows, dim, out};
    cpu__pool_for(c->pool, n_rows, rows_per_chunk(dim), norm_run, &t);
}

/* ---- rope ---------------------------------------------------------------------------------- */

typedef struct rope_task {
    cpu__backend *c;
    float *x;
    const float *src;       /* rope_shift: rows copied from here first, then rotated by −shift */
    const be_rope *r;
    const double *inv_freq; /* [half] */
    int half;               /* rotated pairs per head: rope_dims / 2 */
    float ms;
} rope_task;

/* The rotation of position pos: cs[i], sn[i] for each pair i < half. */
static void rope_angles(const double *inv_freq, int half, int32_t pos, float ms, float *cs, float *sn)
{
    for (int i = 0; i < half; i++) {
        double a = (double)pos * inv_freq[i];
        cs[i] = (float)cos(a) * ms;
        sn[i] = (float)sin(a) * ms;
    }
}

static void angles_run(void *v, int64_t lo, int64_t hi, int ith)
{
    rope_task *t = v;
    int half = t->half;
    float *tab = t->c->rope.tab.p;
    for (int64_t i = lo; i < hi; i++)
        rope_angles(t->inv_freq, half, t->c->batch.positions[i], t->ms, tab + i * 2 * half, tab + i * 2 * half + half);
}

static void rope_run(void *v, int64_t lo, int64_t hi, int ith)
{
    rope_task *t = v;
    const cpu__batch *b = &t->c->batch;
    int64_t row = (int64_t)t->r->n_heads * t->r->head_dim;
    int half = t->half;
    const float *tab = t->c->rope.tab.p;
    for (int64_t i = lo; i < hi; i++) {
        if (!t->src) {
            t->c->k.rope_heads(t->x + i * row, t->r->n_heads, t->r->head_dim, half, t->r->neox, tab + i * 2 * half,
                               tab + i * 2 * half + half);
            continue;
        }
        memcpy(t->x + i * row, t->src + i * row, (size_t)row * sizeof(float));
        int32_t shift = b->sinks ? b->sink_shift[t->c->tok_seq[i]] : 0;
        if (shift) { /* a pure rotation */
            float cs[CPU__ROPE_MAX_PAIRS], sn[CPU__ROPE_MAX_PAIRS];
            rope_angles(t->inv_freq, half, -shift, 1.0f, cs, sn);
            t->c->k.rope_heads(t->x + i * row, t->r->n_heads, t->r->head_dim, half, t->r->neox, cs, sn);
        }
    }
}

/* Makes c->rope hold this step's rotations for inv_freq and ms unless it already does. 0 or
 * -ENOMEM. */
static int rope_table(cpu__backend *c, rope_task *t, int half)
{
    if (c->rope.step && c->rope.step == c->step_gen && c->rope.half == half && c->rope.ms == t->ms &&
        !memcmp(c->rope.inv_freq, t->inv_freq, (size_t)half * sizeof(double)))
        return 0;
    int64_t n = c->batch.n_tokens;
    c->rope.step = 0;
    if (cpu__scratch_reserve(&c->rope.tab, (size_t)(n > 0 ? n : 1) * 2 * half * sizeof(float))) return -ENOMEM;
    cpu__pool_for(c->pool, n, 1 + 4096 / (half > 0 ? half : 1), angles_run, t);
    c->rope.step = c->step_gen;
    c->rope.half = half;
    c->rope.ms = t->ms;
    memcpy(c->rope.inv_freq, t->inv_freq, (size_t)half * sizeof(double));
    return 0;
}

static void rope_go(cpu__backend *c, float *x, const float *src, const be_rope *r)
{
    double inv_freq[CPU__ROPE_MAX_PAIRS];
    int half = r->rope_dims / 2;
    if (half > CPU__ROPE_MAX_PAIRS) half = CPU__ROPE_MAX_PAIRS; /* head_dim > 1024 is not a real model */
    const float *ff = r->freq_factors ? r->freq_factors->data : NULL;
    for (int i = 0; i < half; i++) inv_freq[i] = be_rope_freq(r, i, ff ? ff[i] : 1.0f);
    rope_task t = {c, x, src, r, inv_freq, half, be_rope_mscale(r)};
    if (!src && rope_table(c, &t, half)) {
        for (int64_t i = 0; i < (int64_t)c->batch.n_tokens * r->n_heads * r->head_dim; i++) x[i] = NAN;
        return;
    }
    cpu__pool_for(c->pool, c->batch.n_tokens, rows_per_chunk((int64_t)r->n_heads * r->head_dim) / 4 + 1,
                  rope_run, &t);
}

void cpu__rope(cpu__backend *c, float *x, const be_rope *r)
{
    rope_go(c, x, NULL, r);
}

void cpu__rope_shift(cpu__backend *c, const float *x, float *out, const be_rope *r)
{
    rope_go(c, out, x, r);
}

/* ---- element-wise: silu_mul, gelu_mul, scale, softcap, add ------------------------------------ */

typedef struct ew_task {
    const cpu__kern *k;
    float *a;
    const float *b;
    int64_t n;
    float s; /* scale or cap */
} ew_task;

static void silu_mul_run(void *v, int64_t lo, int64_t hi, int ith)
{
    ew_task *t = v;
    t->k->silu_mul(t->a + lo, t->b + lo, hi - lo);
}

/* GeGLU and soft-capping are portable C: they run on Gemma's FFN and logits only, where the
 * matmuls around them cost orders of magnitude more. */
static void gelu_mul_run(void *v, int64_t lo, int64_t hi, int ith)
{
    ew_task *t = v;
    for (int64_t i = lo; i < hi; i++) t->a[i] = be_gelu_tanh(t->a[i]) * t->b[i];
}

static void scale_run(void *v, int64_t lo, int64_t hi, int ith)
{
    ew_task *t = v;
    for (int64_t i = lo; i < hi; i++) t->a[i] *= t->s;
}

static void softcap_run(void *v, int64_t lo, int64_t hi, int ith)
{
    ew_task *t = v;
    for (int64_t i = lo; i < hi; i++) t->a[i] = be_softcap(t->a[i], t->s);
}

static void add_run(void *v, int64_t lo, int64_t hi, int ith)
{
    ew_task *t = v;
    for (int64_t i = lo; i < hi; i++) t->a[i] += t->b[i];
}

void cpu__silu_mul(cpu__backend *c, float *gate, const float *up, int64_t n)
{
    ew_task t = {&c->k, gate, up, n, 0.0f};
    cpu__pool_for(c->pool, n, CHUNK_FLOATS / 4, silu_mul_run, &t);
}

void cpu__gelu_mul(cpu__backend *c, float *gate, const float *up, int64_t n)
{
    ew_task t = {&c->k, gate, up, n, 0.0f};
    cpu__pool_for(c->pool, n, CHUNK_FLOATS / 8, gelu_mul_run, &t);
}

void cpu__scale(cpu__backend *c, float *x, float s, int64_t n)
{
    ew_task t = {&c->k, x, NULL, n, s};
    cpu__pool_for(c->pool, n, CHUNK_FLOATS, scale_run, &t);
}

void cpu__softcap(cpu__backend *c, float *x, float cap, int64_t n)
{
    ew_task t = {&c->k, x, NULL, n, cap};
    cpu__pool_for(c->pool, n, CHUNK_FLOATS / 8, softcap_run, &t);
}

void cpu__add(cpu__backend *c, float *x, const float *y, int64_t n)
{
    ew_task t = {&c->k, x, y, n, 0.0f};
    cpu__pool_for(c->pool, n, CHUNK_FLOATS, add_run, &t);
}

/* ---- scalar reference kernels ---------------------------------------------------------------- */

static float sum_squares_scalar(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

static void silu_mul_scalar(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void rope_heads_scalar(float *x, int n_heads, int head_dim, int half, int neox, const float *cs, const float *sn)
{
    for (int h = 0; h < n_heads; h++) {
        float *hx = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) cpu__rope_pair(hx, i, half, neox, cs, sn);
    }
}

void cpu__ops_fill_scalar(cpu__kern *k)
{
    k->sum_squares = sum_squares_scalar;
    k->silu_mul = silu_mul_scalar;
    k->rope_heads = rope_heads_scalar;
}
