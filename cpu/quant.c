/*
 * quant.c — matmul for the quantised weight types that have no SIMD kernel of their own yet
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K … Q6_K, IQ4_NL, IQ4_XS): the portable reference path.
 *
 * Each thread takes units of outputs; for each output it dequantises the weight row once into
 * its scratch (dt_to_f32, exact) and dots it with every activation row in f32, left to right,
 * so a row's result does not depend on the batch or the thread count. The weights stay as the
 * file stores them (the mapping): nothing is copied or expanded at upload.
 *
 * Called by matmul.c for the types cpu__quant_handles accepts.
 */
#include <errno.h>

#include "cpu/internal.h"
#include "engine/dtype.h"

int cpu__quant_handles(int type)
{
    return dt_is_supported(type) && dt_block_elems(type) > 1 && type != DT_Q8_0;
}

typedef struct quant_mm {
    const cpu__mm_task *t;
    int64_t unit; /* outputs per unit */
} quant_mm;

static void quant_run(void *arg, int64_t lo_unit, int64_t hi_unit, int ith)
{
    const quant_mm *q = arg;
    const cpu__mm_task *t = q->t;
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t rb = dt_row_bytes(w->type, n_in);
    float *row = t->c->scratch[ith].p;
    int64_t lo = lo_unit * q->unit, hi = hi_unit * q->unit < n_out ? hi_unit * q->unit : n_out;
    for (int64_t o = lo; o < hi; o++) {
        dt_to_f32(w->type, (const char *)w->data + (size_t)o * rb, row, n_in);
        float b = t->bias ? t->bias[o] : 0.0f;
        for (int r = 0; r < t->n_rows; r++) {
            const float *x = t->x + (size_t)r * n_in;
            float s = 0;
            for (int64_t i = 0; i < n_in; i++) s += row[i] * x[i];
            t->out[(size_t)r * n_out + o] = s + b;
        }
    }
}

int cpu__quant_matmul(cpu__backend *c, const cpu__mm_task *t)
{
    int nth = c->n_threads;
    for (int i = 0; i < nth; i++)
        if (cpu__scratch_reserve(&c->scratch[i], (size_t)t->w->n_in * sizeof(float))) return -ENOMEM;
    quant_mm q = {t, (t->w->n_out + 8 * nth - 1) / (8 * nth)};
    int64_t n_units = (t->w->n_out + q.unit - 1) / q.unit;
    if ((int64_t)t->n_rows * t->w->n_in * t->w->n_out < 65536)
        quant_run(&q, 0, n_units, 0);
    else
        cpu__pool_for(c->pool, n_units, 1, quant_run, &q);
    return 0;
}
