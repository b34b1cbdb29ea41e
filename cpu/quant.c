/*
 * quant.c — the scalar reference matmul kernels of the quantised weight types other than Q8_0
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K … Q6_K, IQ4_NL, IQ4_XS), as entries of the kernel table
 * (cpu/internal.h): no level has SIMD kernels for them yet, so every level runs these.
 *
 * The plain run takes units of outputs; for each output it dequantises the weight row once into
 * its scratch (dt_to_f32, exact) and dots it with every activation row in f32, left to right,
 * so a row's result does not depend on the batch or the thread count. It serves every number
 * of rows (min_rows 1); the row dot product (block by block through a stack buffer) is the
 * table's required fallback. The weights stay as the file stores them (the mapping): nothing is
 * copied or expanded at upload.
 */
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "engine/dtype.h"

/* Elements of the largest block (the K-quants' 256). */
#define MAX_BLOCK 256

static void quant_run(void *arg, int64_t lo_unit, int64_t hi_unit, int ith)
{
    const cpu__mm_task *t = arg;
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t rb = dt_row_bytes(w->type, n_in);
    float *row = t->c->scratch[ith].p;
    int64_t lo = lo_unit * t->unit, hi = hi_unit * t->unit < n_out ? hi_unit * t->unit : n_out;
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

static size_t quant_scratch(const be_weight *w, int n_rows)
{
    return (size_t)w->n_in * sizeof(float);
}

/* One weight row against one f32 activation row: each block dequantised, then dotted. */
static float quant_dot(int type, const void *w, const float *x, int64_t n)
{
    int qk = dt_block_elems(type);
    size_t bb = dt_row_bytes(type, qk);
    float tmp[MAX_BLOCK], s = 0;
    for (int64_t b = 0; b < n / qk; b++) {
        dt_to_f32(type, (const char *)w + (size_t)b * bb, tmp, qk);
        for (int i = 0; i < qk; i++) s += tmp[i] * x[b * qk + i];
    }
    return s;
}

#define QUANT_DOT(T)                                                                               \
    static float dot_##T(const void *w, const void *x, int64_t n)                                   \
    {                                                                                              \
        return quant_dot(DT_##T, w, x, n);                                                         \
    }
QUANT_DOT(Q4_0)
QUANT_DOT(Q4_1)
QUANT_DOT(Q5_0)
QUANT_DOT(Q5_1)
QUANT_DOT(Q2_K)
QUANT_DOT(Q3_K)
QUANT_DOT(Q4_K)
QUANT_DOT(Q5_K)
QUANT_DOT(Q6_K)
QUANT_DOT(IQ4_NL)
QUANT_DOT(IQ4_XS)

void cpu__quant_fill_scalar(cpu__kern *k)
{
    static const struct {
        int type;
        float (*dot)(const void *, const void *, int64_t);
    } types[] = {{DT_Q4_0, dot_Q4_0}, {DT_Q4_1, dot_Q4_1}, {DT_Q5_0, dot_Q5_0}, {DT_Q5_1, dot_Q5_1},
                 {DT_Q2_K, dot_Q2_K}, {DT_Q3_K, dot_Q3_K}, {DT_Q4_K, dot_Q4_K}, {DT_Q5_K, dot_Q5_K},
                 {DT_Q6_K, dot_Q6_K}, {DT_IQ4_NL, dot_IQ4_NL}, {DT_IQ4_XS, dot_IQ4_XS}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (!dt_is_supported(types[i].type) || dt_block_elems(types[i].type) > MAX_BLOCK) continue;
        k->mm[types[i].type] = (cpu__mm_kern){
            .act = CPU__ACT_F32, .dot_isa = CPU_ISA_SCALAR, .dot = types[i].dot,
            .plain = {.isa = CPU_ISA_SCALAR, .min_rows = 1, .align = 1, .scratch = quant_scratch, .run = quant_run}};
    }
}
