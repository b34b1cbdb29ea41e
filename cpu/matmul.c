/*
 * matmul.c — out[r][o] = Σ_i x[r][i] · W[o][i] (+ bias[o]) for every weight type the backend's
 * kernel table knows: the driver, and the scalar reference kernels of F32, F16, BF16 and Q8_0
 * (quant.c has those of the other quantised types).
 *
 * The driver converts the activations once into the format the weight type's kernels read
 * (cpu__act: f32 as they are, or Q8_0 blocks with their sums), then picks one of three shapes
 * of work from the table entry k->mm[type]:
 *  - packed: the matrix carries a copy packed once at upload (be_weight.extra) in the level's
 *    own layout; its GEMM serves every number of rows, one included, so a batched decode step
 *    reads each weight byte once and a row's result does not depend on the batch;
 *  - plain: a GEMM over the file's layout (packing per call) from plain.min_rows rows on;
 *  - dots: column blocks of COL_BLOCK outputs, each weight row dotted against ROW_GROUP rows
 *    while it is in L1 — the GEMV of decode, and the fallback for every shape.
 * Threads take units of outputs (multiples of the kernel's alignment) from the pool's counter;
 * a matmul too small to pay for waking the workers runs on the calling thread.
 *
 * Q8_0 activations: per block of 32, d = max|x| / 127 and q = round-to-nearest-even(x / d);
 * every level's quantiser gives exactly the scalar result (the same reciprocal, the default
 * rounding mode), so Q8_0 results agree across levels up to f32 summation order.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "model/dtype.h"

/* Outputs per column block of the dot-product shape: the block's weight rows stay in L2 while
 * every activation row passes over them. */
#define COL_BLOCK 64
/* Activation rows dotted against each weight row while it is in L1. */
#define ROW_GROUP 4

typedef cpu__q8x q8x;
typedef cpu__mm_task mm_task;

/* ---- scalar reference kernels ---------------------------------------------------------------- */

static void quantise_q8_scalar(const float *x, q8x *out, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++) out[b].d = cpu__quantise_block(x + b * 32, 32, out[b].q);
}

static float dot_f32_scalar(const void *w, const void *x, int64_t n)
{
    const float *a = w, *b = x;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f16_scalar(const void *w, const void *x, int64_t n)
{
    const uint16_t *a = w;
    const float *b = x;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += dt_f16_to_f32(a[i]) * b[i];
    return s;
}

static float dot_bf16_scalar(const void *w, const void *x, int64_t n)
{
    const uint16_t *a = w;
    const float *b = x;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += dt_bf16_to_f32(a[i]) * b[i];
    return s;
}

static float dot_q8_scalar(const void *w, const void *x, int64_t n)
{
    const dt_block_q8_0 *wb = w;
    const q8x *xb = x;
    float s = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        int32_t acc = 0;
        for (int i = 0; i < 32; i++) acc += (int32_t)wb[b].q[i] * xb[b].q[i];
        s += (float)acc * dt_f16_to_f32(wb[b].d) * xb[b].d;
    }
    return s;
}

void cpu__matmul_fill_scalar(cpu__kern *k)
{
    k->quantise_q8 = quantise_q8_scalar;
    k->mm[DT_F32] = (cpu__mm_kern){.act = CPU__ACT_F32, .dot_isa = CPU_ISA_SCALAR, .dot = dot_f32_scalar};
    k->mm[DT_F16] = (cpu__mm_kern){.act = CPU__ACT_F32, .dot_isa = CPU_ISA_SCALAR, .dot = dot_f16_scalar};
    k->mm[DT_BF16] = (cpu__mm_kern){.act = CPU__ACT_F32, .dot_isa = CPU_ISA_SCALAR, .dot = dot_bf16_scalar};
    k->mm[DT_Q8_0] = (cpu__mm_kern){.act = CPU__ACT_Q8_0, .dot_isa = CPU_ISA_SCALAR, .dot = dot_q8_scalar};
}

/* ---- the dot-product shape ------------------------------------------------------------------- */

/* Row r of the activations in the weight type's format. */
static const void *act_row(const mm_task *t, int64_t r, int act)
{
    if (act == CPU__ACT_Q8_0) return t->xq + r * (t->w->n_in / 32);
    if (act == CPU__ACT_Q8S || act == CPU__ACT_Q8S_H) return t->xs + r * (t->w->n_in / 32);
    if (act == CPU__ACT_Q8K) return t->xk + r * (t->w->n_in / 256);
    return t->x + r * t->w->n_in;
}

/* All rows × outputs [lo, hi), column block by column block. */
static void dots_range(const mm_task *t, int64_t lo, int64_t hi)
{
    const be_weight *w = t->w;
    const cpu__mm_kern *mk = &t->c->k.mm[w->type];
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t rb = dt_row_bytes(w->type, n_in);
    for (int64_t cb = lo; cb < hi; cb += COL_BLOCK) {
        int64_t ce = cb + COL_BLOCK < hi ? cb + COL_BLOCK : hi;
        for (int64_t r0 = 0; r0 < t->n_rows; r0 += ROW_GROUP) {
            int64_t re = r0 + ROW_GROUP < t->n_rows ? r0 + ROW_GROUP : t->n_rows;
            for (int64_t o = cb; o < ce; o++) {
                const void *wr = (const char *)w->data + (size_t)o * rb;
                for (int64_t r = r0; r < re; r++)
                    t->out[r * n_out + o] = mk->dot(wr, act_row(t, r, mk->act), n_in) +
                                            (t->bias ? t->bias[o] : 0.0f);
            }
        }
    }
}

static void dots_run(void *v, int64_t lo_unit, int64_t hi_unit, int ith)
{
    mm_task *t = v;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < t->w->n_out ? lo + t->unit : t->w->n_out;
        dots_range(t, lo, hi);
    }
}

/* ---- activations ----------------------------------------------------------------------------- */

typedef struct quant_task {
    const cpu__kern *k;
    const float *x;
    int64_t n_in;
    q8x *xq;
    int32_t *xsum; /* [n_rows][n_in / 32]: -128 × Σ q per block (offset GEMMs use it), or NULL */
} quant_task;

static void quant_run(void *v, int64_t lo, int64_t hi, int ith)
{
    quant_task *t = v;
    int64_t nb = t->n_in / 32;
    for (int64_t r = lo; r < hi; r++) {
        t->k->quantise_q8(t->x + r * t->n_in, t->xq + r * nb, t->n_in);
        for (int64_t b = 0; t->xsum && b < nb; b++) {
            int32_t s = 0;
            for (int i = 0; i < 32; i++) s += t->xq[r * nb + b].q[i];
            t->xsum[r * nb + b] = -128 * s;
        }
    }
}

/* Activations quantised row by row into one block format (Q8_0 blocks with sums, Q8_K). */
typedef struct rows_task {
    const cpu__kern *k;
    const float *x;
    int64_t n_in;
    char *out;
    size_t row_bytes;
    void (*row)(const cpu__kern *k, const float *x, void *out, int64_t n);
} rows_task;

static void rows_run(void *v, int64_t lo, int64_t hi, int ith)
{
    rows_task *t = v;
    (void)ith;
    for (int64_t r = lo; r < hi; r++) t->row(t->k, t->x + r * t->n_in, t->out + r * t->row_bytes, t->n_in);
}

static void row_q8s(const cpu__kern *k, const float *x, void *out, int64_t n)
{
    cpu__q8s_quantise(k, x, out, n);
}

static void row_q8s_h(const cpu__kern *k, const float *x, void *out, int64_t n)
{
    cpu__q8s_quantise_h(k, x, out, n);
}

static void row_q8k(const cpu__kern *k, const float *x, void *out, int64_t n)
{
    k->quantise_q8k(x, out, n);
}

/* fn over the n_rows rows: on the caller alone when small, else in chunks of about 32 K inputs. */
static void for_rows(cpu__backend *c, int n_rows, int64_t n_in, int small, cpu__range_fn fn, void *arg)
{
    if (small) fn(arg, 0, n_rows, 0);
    else cpu__pool_for(c->pool, n_rows, 1 + 32768 / n_in, fn, arg);
}

/* Converts x into t's activation format (in c->shared), with the block sums too when xsum. 0
 * or -ENOMEM. */
static int convert_activations(cpu__backend *c, mm_task *t, int act, int xsum, int small)
{
    int64_t n_in = t->w->n_in;
    if (act == CPU__ACT_Q8K || act == CPU__ACT_Q8S || act == CPU__ACT_Q8S_H) {
        int k8 = act == CPU__ACT_Q8K;
        size_t rb = k8 ? (size_t)(n_in / 256) * sizeof(cpu__q8k) : (size_t)(n_in / 32) * sizeof(cpu__q8s);
        if (cpu__scratch_reserve(&c->shared, (size_t)t->n_rows * rb)) return -1;
        rows_task rt = {&c->k, t->x, n_in, c->shared.p, rb, k8 ? row_q8k : act == CPU__ACT_Q8S_H ? row_q8s_h : row_q8s};
        for_rows(c, t->n_rows, n_in, small, rows_run, &rt);
        if (k8) t->xk = c->shared.p;
        else t->xs = c->shared.p;
        return 0;
    }
    if (act != CPU__ACT_Q8_0) return 0;
    size_t nbk = (size_t)t->n_rows * (size_t)(n_in / 32);
    size_t qbytes = (nbk * sizeof(q8x) + 63) & ~(size_t)63;
    if (cpu__scratch_reserve(&c->shared, qbytes + (xsum ? nbk * sizeof(int32_t) : 0))) return -1;
    quant_task qt = {&c->k, t->x, n_in, c->shared.p, xsum ? (int32_t *)((char *)c->shared.p + qbytes) : NULL};
    for_rows(c, t->n_rows, n_in, small, quant_run, &qt);
    t->xq = qt.xq;
    t->xsum = qt.xsum;
    return 0;
}

/* ---- driver ---------------------------------------------------------------------------------- */

/* Units of work for n outputs: about 16 per thread, each a multiple of align outputs. The pool
 * hands them out in guided chunks of consecutive units (cpu__pool_for_guided): a thread's first
 * take is a long run, so each tile's prefetch of the next one stays within its own work, and the
 * last takes are single units, so the threads finish close together and a late thread's share
 * is taken by the others. (Fixed chunks of 8 units per thread measured 2-6% slower: longer
 * tails.) */
static void set_units(mm_task *t, int64_t n, int64_t align, int nth)
{
    int64_t unit = (n + 16 * nth - 1) / (16 * nth);
    unit = (unit + align - 1) / align * align;
    if (unit < align) unit = align;
    t->unit = unit;
    t->n_units = (n + unit - 1) / unit;
}

/* How one matmul runs: its task (units included), the body the pool runs, the per-thread
 * scratch that body needs and whether it reads the activations' block sums. */
typedef struct mm_plan {
    mm_task t;
    cpu__range_fn run;
    size_t scratch;
    int xsum;
} mm_plan;

static void plan_matmul(cpu__backend *c, const float *x, int n_rows, const be_weight *w, const be_weight *bias,
                        float *out, int small, mm_plan *p)
{
    const cpu__mm_kern *mk = &c->k.mm[w->type];
    *p = (mm_plan){.t = {.c = c, .x = x, .n_rows = n_rows, .w = w, .out = out,
                         .bias = bias && bias->data ? bias->data : NULL},
                   .run = dots_run};
    int64_t align = 16;
    if (w->extra) {
        p->xsum = mk->packed.xsum;
        p->run = mk->packed.run;
        align = mk->packed.align(n_rows);
        p->scratch = mk->packed.scratch ? mk->packed.scratch(w, n_rows) : 0;
    } else if (mk->plain.run && n_rows >= mk->plain.min_rows) {
        p->run = mk->plain.run;
        align = mk->plain.align;
        p->scratch = mk->plain.scratch ? mk->plain.scratch(w, n_rows) : 0;
    } else if (small) {
        align = w->n_out; /* one unit */
    }
    set_units(&p->t, w->n_out, align, small ? 1 : c->n_threads);
}

/* The units of several matmuls, numbered one after the other, as one parallel for. */
typedef struct mm_multi {
    int n;
    mm_plan *p;
    int64_t first[BE_MATMUL_MULTI_MAX + 1]; /* first[i]: the global number of plan i's unit 0 */
} mm_multi;

static void multi_run(void *v, int64_t lo, int64_t hi, int ith)
{
    mm_multi *m = v;
    for (int i = 0; i < m->n; i++) {
        int64_t a = lo > m->first[i] ? lo : m->first[i], b = hi < m->first[i + 1] ? hi : m->first[i + 1];
        if (a < b) m->p[i].run(&m->p[i].t, a - m->first[i], b - m->first[i], ith);
    }
}

void cpu__matmul_multi(cpu__backend *c, const float *x, int n_rows, int n, const be_weight *const *w,
                       const be_weight *const *bias, float *const *out)
{
    int act = n > 0 ? c->k.mm[w[0]->type].act : 0, same = n > 0 && n <= BE_MATMUL_MULTI_MAX;
    int64_t work = 0;
    for (int i = 0; i < n && same; i++) {
        same = c->k.mm[w[i]->type].act == act && w[i]->n_in == w[0]->n_in;
        work += (int64_t)n_rows * w[i]->n_in * w[i]->n_out;
    }
    if (!same) { /* activations in different formats or lengths: one at a time */
        for (int i = 0; i < n; i++) cpu__matmul_multi(c, x, n_rows, 1, &w[i], &bias[i], &out[i]);
        return;
    }
    int small = work < 65536; /* not worth waking the workers */
    mm_plan p[BE_MATMUL_MULTI_MAX];
    mm_multi m = {.n = n, .p = p};
    int xsum = 0;
    size_t scratch = 0;
    for (int i = 0; i < n; i++) {
        plan_matmul(c, x, n_rows, w[i], bias[i], out[i], small, &p[i]);
        xsum |= p[i].xsum;
        if (p[i].scratch > scratch) scratch = p[i].scratch;
        m.first[i + 1] = m.first[i] + p[i].t.n_units;
    }
    if (convert_activations(c, &p[0].t, act, xsum, small)) goto oom;
    for (int i = 1; i < n; i++) {
        p[i].t.xq = p[0].t.xq;
        p[i].t.xsum = p[0].t.xsum;
        p[i].t.xs = p[0].t.xs;
        p[i].t.xk = p[0].t.xk;
    }
    for (int i = 0; i < (small ? 1 : c->n_threads) && scratch; i++)
        if (cpu__scratch_reserve(&c->scratch[i], scratch)) goto oom;
    if (small) multi_run(&m, 0, m.first[n], 0);
    else cpu__pool_for_guided(c->pool, m.first[n], 1, multi_run, &m);
    return;
oom:
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < (size_t)n_rows * w[i]->n_out; j++) out[i][j] = NAN;
}

void cpu__matmul(cpu__backend *c, const float *x, int n_rows, const be_weight *w,
                 const be_weight *bias, float *out)
{
    cpu__matmul_multi(c, x, n_rows, 1, &w, &bias, &out);
}

/* ---- grouped matmuls ------------------------------------------------------------------------ */

/* The units of any number of plans, numbered one after the other (multi_run's for a list that
 * may be long: a binary search finds the first plan of a take). */
typedef struct mm_grouped {
    int n;
    mm_plan *p;
    int64_t *first; /* [n + 1] */
} mm_grouped;

static void grouped_run(void *v, int64_t lo, int64_t hi, int ith)
{
    mm_grouped *m = v;
    int a = 0, b = m->n; /* the last plan whose first unit is ≤ lo */
    while (b - a > 1) {
        int mid = (a + b) / 2;
        if (m->first[mid] <= lo) a = mid;
        else b = mid;
    }
    for (int i = a; i < m->n && m->first[i] < hi; i++) {
        int64_t s = lo > m->first[i] ? lo : m->first[i], e = hi < m->first[i + 1] ? hi : m->first[i + 1];
        if (s < e) m->p[i].run(&m->p[i].t, s - m->first[i], e - m->first[i], ith);
    }
}

int cpu__matmul_grouped(cpu__backend *c, const float *x, int n_rows, int n, const cpu__mm_group *g)
{
    if (n <= 0) return 0;
    int act = c->k.mm[g[0].w->type].act;
    int64_t work = 0;
    for (int i = 0; i < n; i++) {
        if (c->k.mm[g[i].w->type].act != act || g[i].w->n_in != g[0].w->n_in) return -EINVAL;
        work += (int64_t)g[i].n_rows * g[i].w->n_in * g[i].w->n_out;
    }
    int small = work < 65536;
    if (cpu__scratch_reserve(&c->groups, (size_t)n * sizeof(mm_plan) + (size_t)(n + 1) * sizeof(int64_t)))
        return -ENOMEM;
    mm_plan *p = c->groups.p;
    mm_grouped m = {.n = n, .p = p, .first = (int64_t *)(p + n)};
    m.first[0] = 0;
    int xsum = 0;
    size_t scratch = 0;
    for (int i = 0; i < n; i++) {
        plan_matmul(c, x + (size_t)g[i].row0 * g[i].w->n_in, g[i].n_rows, g[i].w, g[i].bias, g[i].out, small, &p[i]);
        xsum |= p[i].xsum;
        if (p[i].scratch > scratch) scratch = p[i].scratch;
        m.first[i + 1] = m.first[i] + p[i].t.n_units;
    }
    /* the activations of all rows once, each group pointing at its own */
    mm_task all = {.c = c, .x = x, .n_rows = n_rows, .w = g[0].w};
    if (convert_activations(c, &all, act, xsum, small)) return -ENOMEM;
    int64_t nb = g[0].w->n_in / 32, nk = g[0].w->n_in / 256;
    for (int i = 0; i < n; i++) {
        int64_t r = g[i].row0;
        p[i].t.xq = all.xq ? all.xq + r * nb : NULL;
        p[i].t.xsum = all.xsum ? all.xsum + r * nb : NULL;
        p[i].t.xs = all.xs ? all.xs + r * nb : NULL;
        p[i].t.xk = all.xk ? all.xk + r * nk : NULL;
    }
    for (int i = 0; i < (small ? 1 : c->n_threads) && scratch; i++)
        if (cpu__scratch_reserve(&c->scratch[i], scratch)) return -ENOMEM;
    if (small) grouped_run(&m, 0, m.first[n], 0);
    else cpu__pool_for_guided(c->pool, m.first[n], 1, grouped_run, &m);
    return 0;
}
