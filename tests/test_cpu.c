/*
 * test_cpu.c — every op of the CPU backend against a naive float64 reference, on random non-zero
 * inputs (fixed, printed seeds), odd sizes, 1, 2 and 3 threads, at every SIMD level this machine
 * supports (tu_cpu_levels). Outputs are NaN-poisoned before each run so an element an op
 * forgets to write fails the comparison.
 *
 * Tolerances come from the arithmetic, not from what one machine happened to produce: a sum
 * of n f32 terms formed in any order (any vector width, any number of accumulators, with or
 * without FMA) is within γ_n · Σ|terms| of the exact sum, γ_n = n·u / (1 - n·u), u = 2^-24.
 *
 * Fixtures are synthetic: weight matrices are made here from random floats and converted to the
 * tested type with the exact conversions of model/dtype.h; no model file is needed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "engine/backend.h"
#include "model/dtype.h"
#include "tests/test_util.h"

static uint64_t cput_rng;

static void cput_seed(uint64_t s)
{
    cput_rng = s * 0x9E3779B97F4A7C15ull + 1;
}

static uint32_t cput_u32(void)
{
    cput_rng ^= cput_rng << 13;
    cput_rng ^= cput_rng >> 7;
    cput_rng ^= cput_rng << 17;
    return (uint32_t)(cput_rng >> 16);
}

/* Uniform in [-1, 1), never exactly zero. */
/* γ_n of the f32 unit roundoff: the bound on the relative error of an n-term sum. */
static double cput_gamma(double n)
{
    const double u = 0x1p-24;
    return n * u / (1 - n * u);
}

static float cput_rand(void)
{
    float f = (float)(cput_u32() % 2000001u) / 1000000.0f - 1.0f;
    return f == 0.0f ? 0.37f : f;
}

static void cput_fill(float *p, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) p[i] = cput_rand() * scale;
}

static void cput_poison(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/* A weight of the given type made from random floats; *deq receives the exact dequantised
 * values [n_out][n_in] (the reference's view of the weights). Caller frees data and *deq. */
static model_tensor cput_tensor(int type, int64_t n_in, int64_t n_out, float **deq)
{
    model_tensor t = {.name = "w", .type = type, .ne = {n_in, n_out}};
    t.row_bytes = dt_row_bytes(type, n_in);
    cr_assert(t.row_bytes > 0);
    char *data = malloc(t.row_bytes * (size_t)n_out + 64);
    float *row = malloc((size_t)n_in * sizeof(float));
    *deq = malloc((size_t)n_in * (size_t)n_out * sizeof(float));
    for (int64_t o = 0; o < n_out; o++) {
        cput_fill(row, (size_t)n_in, 1.0f);
        char *dst = data + (size_t)o * t.row_bytes;
        for (int64_t i = 0; i < n_in; i++) {
            if (type == DT_F32) ((float *)dst)[i] = row[i];
            if (type == DT_F16) ((uint16_t *)dst)[i] = dt_f32_to_f16(row[i]);
            if (type == DT_BF16) ((uint16_t *)dst)[i] = dt_f32_to_bf16(row[i]);
        }
        if (type == DT_Q8_0) {
            dt_block_q8_0 *b = (dt_block_q8_0 *)dst;
            for (int64_t k = 0; k < n_in / 32; k++) {
                float amax = 0;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(row[k * 32 + i]));
                float d = amax / 127.0f;
                b[k].d = dt_f32_to_f16(d);
                for (int i = 0; i < 32; i++) b[k].q[i] = (int8_t)lrintf(row[k * 32 + i] / d);
            }
        }
        dt_to_f32(type, dst, *deq + (size_t)o * n_in, n_in);
    }
    free(row);
    t.data = data;
    return t;
}

/* ---- matmul -------------------------------------------------------------------------------- */

static void cput_check_matmul(int type, int64_t n_in, int64_t n_out, const int *rows, int n_rows_cases,
                              int with_bias)
{
    uint64_t seed = (uint64_t)(type * 1000003 + n_in * 1009 + n_out * 7 + with_bias);
    cput_seed(seed);
    float *deq;
    model_tensor mt = cput_tensor(type, n_in, n_out, &deq);
    float *bias = malloc((size_t)n_out * sizeof(float));
    cput_fill(bias, (size_t)n_out, 0.5f);
    int max_rows = 0;
    for (int k = 0; k < n_rows_cases; k++) max_rows = rows[k] > max_rows ? rows[k] : max_rows;
    float *x = malloc((size_t)max_rows * n_in * sizeof(float));
    float *out = malloc((size_t)max_rows * n_out * sizeof(float));
    float *one = malloc((size_t)max_rows * n_out * sizeof(float));
    double *ref = malloc((size_t)max_rows * n_out * sizeof(double));
    double *tol = malloc((size_t)max_rows * n_out * sizeof(double));
    cput_fill(x, (size_t)max_rows * n_in, 2.0f);
    for (int r = 0; r < max_rows; r++) {
        for (int64_t o = 0; o < n_out; o++) {
            double s = with_bias ? bias[o] : 0, mag = fabs(s), qerr = 0;
            for (int64_t i = 0; i < n_in; i++) {
                double w = deq[o * n_in + i], xv = x[(size_t)r * n_in + i];
                s += w * xv;
                mag += fabs(w * xv);
            }
            if (type == DT_Q8_0) {
                /* The kernel rounds activations to int8 steps of amax/127 per block. Exactly:
                 * within 1% of the exact result (statistically: 6 sigma of the rounding noise)
                 * — that is not tight enough to catch a wrong scale, so the reference is the
                 * dot product with the activations quantised the same way, and the tolerance
                 * allows f32 arithmetic plus a few rounding ties going the other way. */
                double sq = 0, sim = with_bias ? bias[o] : 0, wmax = 0, dmax = 0;
                for (int64_t b = 0; b < n_in / 32; b++) {
                    const float *xb = x + (size_t)r * n_in + b * 32;
                    float amax = 0;
                    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
                    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
                    for (int i = 0; i < 32; i++) {
                        double w = deq[o * n_in + b * 32 + i];
                        sim += w * d * (double)lrintf(xb[i] * id);
                        sq += w * w * (double)d * d / 12.0;
                        wmax = fmax(wmax, fabs(w));
                    }
                    dmax = fmax(dmax, d);
                }
                cr_assert(fabs(sim - s) <= 6 * sqrt(sq) + 1e-6 * mag && fabs(sim - s) <= 0.01 * mag,
                          "q8_0 activation quantisation error too large");
                qerr = 3 * wmax * dmax;
                s = sim;
            }
            /* n_in products and the bias, summed in f32; a Q8_0 product is exact in int32 and
             * its block scale adds two more roundings per block. */
            ref[(size_t)r * n_out + o] = s;
            tol[(size_t)r * n_out + o] = cput_gamma((double)n_in + 4) * mag + qerr + 1e-30;
        }
    }
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++)
        for (int th = 1; th <= 3; th++) {
            backend *be = tu_cpu_backend(&lv[li], th);
            be_weight w, bw = {0};
            cr_assert_eq(be->ops->weight_upload(be, &mt, &w), 0);
            if (with_bias) bw = (be_weight){.type = DT_F32, .n_in = n_out, .n_out = 1, .data = bias};
            /* Weights with a packed copy are also run without it (extra = NULL), through the
             * kernels that read the file's layout: both are checked. */
            be_weight plain = w;
            plain.extra = NULL;
            /* The packed GEMM's rows are batch-invariant (a speculative verify row must compute
             * what a one-token decode computes): each row alone, to compare bit for bit. */
            if (w.extra)
                for (int r = 0; r < max_rows; r++)
                    be->ops->matmul(be, x + (size_t)r * n_in, 1, &w, with_bias ? &bw : NULL, one + (size_t)r * n_out);
            for (int k = 0; k < 2 * n_rows_cases; k++) {
                int nr = rows[k % n_rows_cases];
                if (k >= n_rows_cases && !w.extra) break;
                cput_poison(out, (size_t)nr * n_out);
                be->ops->matmul(be, x, nr, k < n_rows_cases ? &w : &plain, with_bias ? &bw : NULL, out);
                for (size_t e = 0; e < (size_t)nr * n_out; e++)
                    cr_assert(fabs(out[e] - ref[e]) <= tol[e],
                              "matmul %s%s at %s n_in=%ld n_out=%ld rows=%d threads=%d seed=%lu: "
                              "out[%zu]=%g ref=%g tol=%g",
                              dt_name(type), k < n_rows_cases ? "" : " (unpacked)", lv[li].name, (long)n_in,
                              (long)n_out, nr, th, (unsigned long)seed, e, (double)out[e], ref[e], tol[e]);
                if (k < n_rows_cases && w.extra)
                    cr_assert(!memcmp(out, one, (size_t)nr * n_out * sizeof(float)),
                              "matmul %s at %s n_in=%ld n_out=%ld: %d rows at once differ from one at a time "
                              "(threads=%d)", dt_name(type), lv[li].name, (long)n_in, (long)n_out, nr, th);
            }
            be->ops->weight_free(be, &w);
            be_destroy(be);
        }
    free((void *)mt.data);
    free(deq);
    free(bias);
    free(x);
    free(out);
    free(one);
    free(ref);
    free(tol);
}

static const int cput_rows[] = {1, 2, 3, 7, 64, 5, 4, 6, 17, 23, 8, 16};
#define CPUT_NROWS ((int)(sizeof cput_rows / sizeof cput_rows[0]))

Test(cpu, matmul_float_types)
{
    const int types[] = {DT_F32, DT_F16, DT_BF16};
    const int64_t n_ins[] = {172, 64, 33};
    const int64_t n_outs[] = {1, 17, 513};
    for (int t = 0; t < 3; t++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) cput_check_matmul(types[t], n_ins[a], n_outs[b], cput_rows, CPUT_NROWS, b == 1);
}

Test(cpu, matmul_q8_0)
{
    const int64_t n_ins[] = {64, 96, 2048};
    const int64_t n_outs[] = {1, 17, 513};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) cput_check_matmul(DT_Q8_0, n_ins[a], n_outs[b], cput_rows, CPUT_NROWS, b == 2);
}

/* matmul_multi is matmul n times, to the bit: for sets of matrices of one activation format
 * (run as one parallel for on activations converted once) and of several (run one by one), of
 * different output counts, with and without biases, packed and not, at every level and thread
 * count. */
Test(cpu, matmul_multi_equals_matmul)
{
    static const int sets[][3] = {{DT_Q8_0, DT_Q8_0, DT_Q8_0}, {DT_F16, DT_F32, DT_BF16}, {DT_Q8_0, DT_F16, DT_Q8_0}};
    const int64_t n_in = 96, n_outs[3] = {40, 17, 129};
    const int rows[] = {1, 3, 16, 37};
    cput_seed(77);
    float *x = malloc((size_t)37 * n_in * sizeof(float)), *bias = malloc(129 * sizeof(float));
    cput_fill(x, (size_t)37 * n_in, 2.0f);
    cput_fill(bias, 129, 0.5f);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int si = 0; si < 3; si++) {
        model_tensor mt[3];
        float *deq[3];
        for (int i = 0; i < 3; i++) mt[i] = cput_tensor(sets[si][i], n_in, n_outs[i], &deq[i]);
        for (int li = 0; li < n_lv; li++)
            for (int th = 1; th <= 3; th += 2) {
                backend *be = tu_cpu_backend(&lv[li], th);
                cr_assert(be->ops->matmul_multi);
                be_weight w[3], bw = {.type = DT_F32, .n_in = 129, .n_out = 1, .data = bias};
                for (int i = 0; i < 3; i++) cr_assert_eq(be->ops->weight_upload(be, &mt[i], &w[i]), 0);
                for (int packed = 1; packed >= 0; packed--) {
                    be_weight u[3];
                    for (int i = 0; i < 3; i++) {
                        u[i] = w[i];
                        if (!packed) u[i].extra = NULL;
                    }
                    for (int ri = 0; ri < 4; ri++) {
                        int nr = rows[ri];
                        float *one[3], *many[3];
                        for (int i = 0; i < 3; i++) {
                            one[i] = malloc((size_t)nr * n_outs[i] * sizeof(float));
                            many[i] = malloc((size_t)nr * n_outs[i] * sizeof(float));
                            cput_poison(many[i], (size_t)nr * n_outs[i]);
                        }
                        const be_weight *bs[3] = {NULL, &bw, NULL};
                        for (int i = 0; i < 3; i++) be->ops->matmul(be, x, nr, &u[i], bs[i], one[i]);
                        be->ops->matmul_multi(be, x, nr, 3, (const be_weight *[]){&u[0], &u[1], &u[2]}, bs, (void *const *)many);
                        for (int i = 0; i < 3; i++) {
                            cr_assert(!memcmp(one[i], many[i], (size_t)nr * n_outs[i] * sizeof(float)),
                                      "matmul_multi set %d matrix %d (%s) at %s, %d threads, %d rows%s differs from matmul",
                                      si, i, dt_name(sets[si][i]), lv[li].name, th, nr, packed ? "" : " (unpacked)");
                            free(one[i]);
                            free(many[i]);
                        }
                    }
                }
                for (int i = 0; i < 3; i++) be->ops->weight_free(be, &w[i]);
                be_destroy(be);
            }
        for (int i = 0; i < 3; i++) {
            free((void *)mt[i].data);
            free(deq[i]);
        }
    }
    free(x);
    free(bias);
}

/* ---- embed, rmsnorm, rope, silu_mul, add, gather_rows -------------------------------------- */

static be_batch cput_flat_batch(int n_tokens, int32_t *tokens, int32_t *pos)
{
    static int32_t q_start[2], ctx[1], bt[1], rows[1];
    q_start[0] = 0;
    q_start[1] = n_tokens;
    ctx[0] = n_tokens;
    return (be_batch){.n_tokens = n_tokens, .tokens = tokens, .positions = pos, 
                      .n_seqs = 1, .q_start = q_start,  
                       .n_logits = 0, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = pos, .ctx_len = ctx, .block_table = bt, .bt_stride = 1}}};
}

Test(cpu, embed)
{
    const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0};
    cput_seed(11);
    for (int t = 0; t < 4; t++) {
        int64_t dim = types[t] == DT_Q8_0 ? 96 : 37, vocab = 50;
        float *deq;
        model_tensor mt = cput_tensor(types[t], dim, vocab, &deq);
        int32_t tokens[9], pos[9];
        for (int i = 0; i < 9; i++) {
            tokens[i] = (int32_t)(cput_u32() % vocab);
            pos[i] = i;
        }
        tu_cpu_level lv[TU_MAX_LEVELS];
        int n_lv = tu_cpu_levels(lv);
        for (int run = 0; run < 3 * n_lv; run++) {
            backend *be = tu_cpu_backend(&lv[run / 3], 1 + run % 3);
            be_weight w;
            cr_assert_eq(be->ops->weight_upload(be, &mt, &w), 0);
            be_batch b = cput_flat_batch(9, tokens, pos);
            cr_assert_eq(be->ops->begin(be, &b), 0);
            float out[9 * 96];
            cput_poison(out, 9 * 96);
            be->ops->embed(be, &w, out);
            for (int i = 0; i < 9; i++)
                for (int64_t d = 0; d < dim; d++)
                    cr_assert_eq(out[i * dim + d], deq[tokens[i] * dim + d], "embed %s at %s", dt_name(types[t]), lv[run / 3].name);
            be_destroy(be);
        }
        free((void *)mt.data);
        free(deq);
    }
}

Test(cpu, rmsnorm)
{
    const int dims[] = {8, 37, 768};
    const int rows[] = {1, 3, 64};
    cput_seed(12);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int run = 0; run < 3 * n_lv; run++) {
        backend *be = tu_cpu_backend(&lv[run / 3], 1 + run % 3);
        for (int a = 0; a < 3; a++)
            for (int r = 0; r < 3; r++) {
                int dim = dims[a], n = rows[r];
                float *x = malloc((size_t)n * dim * 4), *out = malloc((size_t)n * dim * 4);
                float *wv = malloc((size_t)dim * 4);
                cput_fill(x, (size_t)n * dim, 3.0f);
                cput_fill(wv, (size_t)dim, 1.0f);
                be_weight w = {.type = DT_F32, .n_in = dim, .n_out = 1, .data = wv};
                cput_poison(out, (size_t)n * dim);
                be->ops->rmsnorm(be, x, &w, 1e-5f, n, dim, out);
                for (int i = 0; i < n; i++) {
                    double ss = 0;
                    for (int d = 0; d < dim; d++) ss += (double)x[i * dim + d] * x[i * dim + d];
                    double sc = 1.0 / sqrt(ss / dim + 1e-5);
                    for (int d = 0; d < dim; d++) {
                        double ref = x[i * dim + d] * sc * wv[d];
                        /* Σx² in f32 (γ_dim relative), then a few correctly rounded steps. */
                        cr_assert(fabs(out[i * dim + d] - ref) <= (cput_gamma(dim) + 8 * 0x1p-24) * fabs(ref) + 1e-30,
                                  "rmsnorm dim %d at %s: got %g want %g", dim, lv[run / 3].name,
                                  (double)out[i * dim + d], ref);
                    }
                }
                be->ops->rmsnorm(be, x, &w, 1e-5f, n, dim, x); /* in place */
                cr_assert_eq(memcmp(x, out, (size_t)n * dim * 4), 0);
                free(x);
                free(out);
                free(wv);
            }
        be_destroy(be);
    }
}

/* The angle of rotation pair p at position pos under r, written out from ggml's rope_yarn (and
 * llama.cpp's frequency factors) independently of be_rope_freq. */
static double cput_rope_angle(const be_rope *r, const float *ff, int pos, int p)
{
    double theta = pos * pow(r->base, -2.0 * p / r->rope_dims) / (ff ? ff[p] : 1.0);
    double fs = r->freq_scale ? r->freq_scale : 1.0, interp = fs * theta;
    if (r->ext_factor == 0) return interp;
    double y = (p - r->corr_lo) / fmax(0.001, r->corr_hi - r->corr_lo);
    double mix = (1 - fmin(1, fmax(0, y))) * r->ext_factor;
    return interp * (1 - mix) + theta * mix;
}

Test(cpu, rope)
{
    cput_seed(13);
    const int head_dims[] = {8, 64, 64, 80};
    const int rope_dims[] = {8, 64, 32, 48};
    float ff[40];
    for (int i = 0; i < 40; i++) ff[i] = 1.0f + (float)((i * 5) % 7);
    be_weight fw = {.type = DT_F32, .n_in = 40, .n_out = 1, .data = ff};
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int run = 0; run < 3 * n_lv; run++) {
        backend *be = tu_cpu_backend(&lv[run / 3], 1 + run % 3);
        for (int k = 0; k < 4; k++)
            for (int neox = 0; neox <= 1; neox++) {
                int n = 600, nh = 3, hd = head_dims[k], rd = rope_dims[k];
                int32_t *pos = malloc((size_t)n * 4), *tok = calloc((size_t)n, 4);
                for (int i = 0; i < n; i++) pos[i] = (int32_t)(cput_u32() % 4096);
                be_batch b = cput_flat_batch(n, tok, pos);
                cr_assert_eq(be->ops->begin(be, &b), 0);
                float *x = malloc((size_t)n * nh * hd * 4), *orig = malloc((size_t)n * nh * hd * 4);
                cput_fill(orig, (size_t)n * nh * hd, 1.0f);
                memcpy(x, orig, (size_t)n * nh * hd * 4);
                be_rope r = {.n_heads = nh, .head_dim = hd, .rope_dims = rd, .base = 10000.0f, .neox = neox};
                if (k == 3) { /* YaRN (factor 4, ramp over pairs 3..9), frequency factors, mscale */
                    r.freq_scale = 0.25f, r.ext_factor = 1.0f, r.corr_lo = 3.0f, r.corr_hi = 9.0f;
                    r.mscale = 1.138629f, r.freq_factors = &fw;
                }
                double ms = k == 3 ? r.mscale : 1.0;
                be->ops->rope(be, x, &r);
                for (int i = 0; i < n; i++)
                    for (int h = 0; h < nh; h++) {
                        const float *o = orig + ((size_t)i * nh + h) * hd;
                        const float *y = x + ((size_t)i * nh + h) * hd;
                        for (int p = 0; p < rd / 2; p++) {
                            int i0 = neox ? p : 2 * p, i1 = neox ? p + rd / 2 : 2 * p + 1;
                            double th_ = cput_rope_angle(&r, k == 3 ? ff : NULL, pos[i], p);
                            double r0 = ms * (o[i0] * cos(th_) - o[i1] * sin(th_));
                            double r1 = ms * (o[i0] * sin(th_) + o[i1] * cos(th_));
                            /* cos and sin rounded to f32 and scaled by mscale (2 roundings), two
                             * products and a sum: terms of size ms·|a|, ms·|b|. */
                            double tol = 6 * 0x1p-24 * ms * (fabs(o[i0]) + fabs(o[i1])) + 1e-30;
                            cr_assert(fabs(y[i0] - r0) <= tol && fabs(y[i1] - r1) <= tol,
                                      "rope neox=%d hd=%d at %s: pos %d pair %d: %g %g want %g %g", neox, hd,
                                      lv[run / 3].name, pos[i], p, (double)y[i0], (double)y[i1], r0, r1);
                        }
                        for (int d = rd; d < hd; d++) cr_assert_eq(y[d], o[d]);
                    }
                free(pos);
                free(tok);
                free(x);
                free(orig);
            }
        be_destroy(be);
    }
}

Test(cpu, elementwise_and_rows)
{
    cput_seed(14);
    const int64_t sizes[] = {1, 17, 100003};
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int run = 0; run < 3 * n_lv; run++) {
        backend *be = tu_cpu_backend(&lv[run / 3], 1 + run % 3);
        for (int k = 0; k < 3; k++) {
            int64_t n = sizes[k];
            float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4), *g0 = malloc((size_t)n * 4);
            cput_fill(g, (size_t)n, 6.0f);
            cput_fill(u, (size_t)n, 2.0f);
            memcpy(g0, g, (size_t)n * 4);
            be->ops->silu_mul(be, g, u, n);
            for (int64_t i = 0; i < n; i++) {
                double ref = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
                /* e^-g within a few ulp (the vector exp polynomials), then 3 roundings. */
                cr_assert(fabs(g[i] - ref) <= 16 * 0x1p-24 * fabs(ref) + 1e-30, "silu_mul at %s: %g: got %g want %g",
                          lv[run / 3].name, (double)g0[i], (double)g[i], ref);
            }
            memcpy(g, g0, (size_t)n * 4);
            be->ops->gelu_mul(be, g, u, n);
            for (int64_t i = 0; i < n; i++) {
                double x = g0[i], in = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
                double ref = 0.5 * x * (1 + tanh(in)) * u[i];
                /* the cubic, tanhf and the products in f32: a few roundings of 0.5·|x·u| · (1 + t),
                 * t's error growing with the argument's size */
                double tol = 16 * 0x1p-24 * 0.5 * fabs(x * u[i]) * (2 + fabs(in)) + 1e-30;
                cr_assert(fabs(g[i] - ref) <= tol, "gelu_mul at %s %g: %g vs %g", lv[run / 3].name, x, g[i], ref);
            }
            memcpy(g, g0, (size_t)n * 4);
            be->ops->scale(be, g, 0.37f, n);
            for (int64_t i = 0; i < n; i++) cr_assert_eq(g[i], g0[i] * 0.37f, "scale");
            memcpy(g, g0, (size_t)n * 4);
            be->ops->softcap(be, g, 2.5f, n);
            for (int64_t i = 0; i < n; i++) {
                double ref = 2.5 * tanh(g0[i] / 2.5);
                /* a division, tanhf (within an ulp or two) and a product */
                cr_assert(fabs(g[i] - ref) <= 4e-7 * 2.5, "softcap %g: %g vs %g", g0[i], g[i], ref);
            }
            memcpy(g, g0, (size_t)n * 4);
            be->ops->add(be, g, u, n);
            for (int64_t i = 0; i < n; i++) cr_assert_eq(g[i], g0[i] + u[i], "add");
            free(g);
            free(u);
            free(g0);
        }
        /* gather_rows and to_host */
        int32_t tok[10] = {0}, pos[10] = {0}, rows[3] = {9, 0, 4};
        be_batch b = cput_flat_batch(10, tok, pos);
        b.n_logits = 3;
        b.logit_rows = rows;
        cr_assert_eq(be->ops->begin(be, &b), 0);
        float x[10 * 5], out[3 * 5], host[15];
        cput_fill(x, 50, 1.0f);
        cput_poison(out, 15);
        be->ops->gather_rows(be, x, 5, out);
        cr_assert_eq(be->ops->to_host(be, out, 15, host), 0);
        cr_assert_eq(be->ops->sync(be), 0);
        for (int j = 0; j < 3; j++)
            for (int d = 0; d < 5; d++) cr_assert_eq(host[j * 5 + d], x[rows[j] * 5 + d]);
        float *a = be->ops->alloc(be, 1000);
        cr_assert(a && ((uintptr_t)a % 64) == 0);
        be->ops->free(be, a);
        cr_assert_eq(be->ops->mem_available(be), 0);
        cr_assert(strstr(be->desc, "thread"));
        be_destroy(be);
    }
}

/* ---- thread pool --------------------------------------------------------------------------- */

typedef struct cput_pool_arg {
    _Atomic int *hits; /* [n] times each item ran */
    int nth;
    _Atomic int bad_ith;
} cput_pool_arg;

static void cput_pool_body(void *v, int64_t lo, int64_t hi, int ith)
{
    cput_pool_arg *a = v;
    if (ith < 0 || ith >= a->nth) atomic_fetch_add(&a->bad_ith, 1);
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&a->hits[i], 1);
}

/* Every item of every op runs exactly once, whatever the chunking (fixed or guided), across
 * thousands of back-to-back ops (which exercises workers that join late or skip an op). */
Test(cpu, pool_for_runs_every_item_once)
{
    const int64_t sizes[] = {0, 1, 7, 64, 1000, 20000};
    const int64_t chunks[] = {1, 3, 64, 5000};
    _Atomic int *hits = calloc(20000, sizeof *hits);
    for (int nth = 1; nth <= 4; nth++) {
        cpu__pool *p = cpu__pool_create(nth);
        cr_assert(p);
        cr_assert_eq(cpu__pool_size(p), nth);
        for (int rep = 0; rep < 300; rep++)
            for (int a = 0; a < 6; a++) {
                int64_t n = sizes[a], chunk = chunks[(rep + a) % 4];
                if (n > 1000 && rep % 10) continue;
                for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
                cput_pool_arg arg = {hits, nth, 0};
                int guided = rep % 2; /* shrinking chunks, at least `chunk` long */
                if (guided) cpu__pool_for_guided(p, n, chunk, cput_pool_body, &arg);
                else cpu__pool_for(p, n, chunk, cput_pool_body, &arg);
                cr_assert_eq(atomic_load(&arg.bad_ith), 0);
                for (int64_t i = 0; i < n; i++)
                    cr_assert_eq(atomic_load(&hits[i]), 1, "threads %d n %ld chunk %ld%s item %ld", nth,
                                 (long)n, (long)chunk, guided ? " guided" : "", (long)i);
            }
        cpu__pool_destroy(p);
    }
    free(hits);
}

/* A sibling backend (a speculative draft's) runs on its origin's workers, computes what its
 * origin computes, and works on after the origin is destroyed (the last owner stops them). */
Test(cpu, sibling_shares_the_workers)
{
    cput_seed(5);
    float *deq;
    model_tensor mt = cput_tensor(DT_Q8_0, 96, 40, &deq);
    float x[3 * 96], a[3 * 40], b[3 * 40];
    cput_fill(x, 3 * 96, 1.0f);
    backend *be = cpu_backend_create(3);
    cr_assert(be && be->ops->sibling);
    backend *sib = be->ops->sibling(be);
    cr_assert(sib);
    cr_assert_eq(((cpu__backend *)sib)->pool, ((cpu__backend *)be)->pool, "the sibling has workers of its own");
    cr_assert_str_eq(sib->desc, be->desc);
    be_weight w, w2;
    cr_assert_eq(be->ops->weight_upload(be, &mt, &w), 0);
    cr_assert_eq(sib->ops->weight_upload(sib, &mt, &w2), 0);
    be->ops->matmul(be, x, 3, &w, NULL, a);
    be->ops->weight_free(be, &w);
    be_destroy(be);
    for (int rep = 0; rep < 3; rep++) {
        cput_poison(b, 3 * 40);
        sib->ops->matmul(sib, x, 3, &w2, NULL, b);
        cr_assert(!memcmp(a, b, sizeof a), "the sibling computes differently after its origin went");
    }
    sib->ops->weight_free(sib, &w2);
    be_destroy(sib);
    free((void *)mt.data);
    free(deq);
}

/* ---- the Q8_0 activation quantiser --------------------------------------------------------- */

/* Every level's quantiser gives exactly the scalar blocks (matmul results then agree across
 * levels up to f32 summation order): random rows, rows with exact rounding ties (x·(1/d) = k +
 * 1/2), zero blocks and blocks with one non-zero value. */
Test(cpu, quantise_q8_is_exact_at_every_level)
{
    enum { N = 32 * 40 };
    float *x = malloc(N * sizeof *x);
    cput_seed(21);
    for (int i = 0; i < N; i++) x[i] = cput_rand() * 3.0f;
    for (int i = 32 * 10; i < 32 * 20; i++) /* max 63.5: d = 0.5, and x / d = m + 1/2 exactly */
        x[i] = i % 32 == 0 ? 63.5f : ((float)((int)(cput_u32() % 254) - 127) + 0.5f) * 0.5f;
    for (int i = 32 * 20; i < 32 * 21; i++) x[i] = 0.0f;
    for (int i = 32 * 21; i < 32 * 22; i++) x[i] = i == 32 * 21 + 7 ? -1e-3f : 0.0f;
    cpu__kern ref, k;
    cpu__kern_init(&ref, CPU_ISA_SCALAR, 0);
    cpu__q8x *a = malloc(N / 32 * sizeof *a), *b = malloc(N / 32 * sizeof *b);
    ref.quantise_q8(x, a, N);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++) {
        cpu__kern_init(&k, lv[li].isa, lv[li].features);
        memset(b, 0x55, N / 32 * sizeof *b);
        k.quantise_q8(x, b, N);
        for (int blk = 0; blk < N / 32; blk++) {
            cr_assert_eq(memcmp(&a[blk].d, &b[blk].d, sizeof a[blk].d), 0, "%s block %d: scale %g vs %g", lv[li].name,
                         blk, (double)b[blk].d, (double)a[blk].d);
            cr_assert_eq(memcmp(a[blk].q, b[blk].q, 32), 0, "%s block %d: quantised values differ", lv[li].name, blk);
        }
    }
    free(x), free(a), free(b);
}

/* rope_heads at every level is the scalar rotation to the bit: both pair layouts, rotated
 * dimensions that are and are not a multiple of the vector width, partial rotary (half <
 * head_dim / 2), and the values a real table holds (cos, sin of assorted angles). */
Test(cpu, rope_heads_is_exact_at_every_level)
{
    static const int shapes[][3] = {{64, 32, 4}, {64, 13, 3}, {128, 16, 2}, {96, 48, 5}, {80, 20, 1}};
    cpu__kern ref, k;
    cpu__kern_init(&ref, CPU_ISA_SCALAR, 0);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    cput_seed(31);
    for (int si = 0; si < 5; si++) {
        int hd = shapes[si][0], half = shapes[si][1], nh = shapes[si][2];
        float cs[64], sn[64], *x = malloc((size_t)nh * hd * sizeof *x), *a = malloc((size_t)nh * hd * sizeof *a),
                              *b = malloc((size_t)nh * hd * sizeof *b);
        for (int i = 0; i < half; i++) {
            double ang = 37.0 * pow(10000.0, -2.0 * i / (2.0 * half)) + cput_rand();
            cs[i] = (float)cos(ang) * 1.1f;
            sn[i] = (float)sin(ang) * 1.1f;
        }
        cput_fill(x, (size_t)nh * hd, 3.0f);
        for (int neox = 0; neox < 2; neox++) {
            memcpy(a, x, (size_t)nh * hd * sizeof *a);
            ref.rope_heads(a, nh, hd, half, neox, cs, sn);
            for (int li = 0; li < n_lv; li++) {
                cpu__kern_init(&k, lv[li].isa, lv[li].features);
                memcpy(b, x, (size_t)nh * hd * sizeof *b);
                k.rope_heads(b, nh, hd, half, neox, cs, sn);
                cr_assert(!memcmp(a, b, (size_t)nh * hd * sizeof *a), "rope_heads %s head_dim %d half %d neox %d differs from scalar",
                          lv[li].name, hd, half, neox);
            }
        }
        free(x), free(a), free(b);
    }
}

/* ---- packed copies release the mapping ------------------------------------------------------- */

/* Resident kB of the mapping that starts at p (from /proc/self/smaps), or -1. */
static long cput_rss_kb(const void *p)
{
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return -1;
    char line[512];
    long rss = -1;
    int in = 0;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = lo == (unsigned long)(uintptr_t)p;
            continue;
        }
        if (in && sscanf(line, "Rss: %ld kB", &rss) == 1) break;
    }
    fclose(fp);
    return rss;
}

/* A matrix read from a file mapping (as the model's tensors are): after upload the backend owns
 * every byte it reads (a packed copy, or a plain one where the level has no packed layout, and
 * embed_upload's rows), the mapping's pages are dropped from this process, and the weights still
 * work once the mapping is gone altogether (a server detaches the model file: a truncated or
 * replaced file can no longer fault it). */
Test(cpu, weights_own_their_bytes_and_release_the_mapping)
{
    int64_t n_in = 512, n_out = 96; /* 1 KiB rows: 24 pages of 4 KiB */
    float *deq;
    cput_seed(31);
    model_tensor heap = cput_tensor(DT_F16, n_in, n_out, &deq);
    const char *tmp = getenv("TMPDIR");
    char tpath[512];
    snprintf(tpath, sizeof tpath, "%s/kvserve_cput_map_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(tpath);
    cr_assert_geq(fd, 0);
    size_t bytes = heap.row_bytes * (size_t)n_out;
    cr_assert_eq(write(fd, heap.data, bytes), (ssize_t)bytes);
    unlink(tpath);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++) {
        void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        cr_assert_neq(map, MAP_FAILED);
        volatile const char *v = map;
        for (size_t i = 0; i < bytes; i += 4096) (void)v[i]; /* fault every page in */
        long before = cput_rss_kb(map);
        cr_assert_geq(before, (long)(bytes / 1024) - 4, "the mapping is not resident (%ld kB)", before);
        backend *be = tu_cpu_backend(&lv[li], 1);
        model_tensor mt = heap;
        mt.data = map;
        be_weight w, we;
        cr_assert_eq(be->ops->weight_upload(be, &mt, &w), 0);
        long after = cput_rss_kb(map);
        cr_assert_leq(after, 8, "%s: %ld kB of the mapping still resident after upload", lv[li].name, after);
        if (!w.extra)
            cr_assert(!((const char *)w.data >= (const char *)map && (const char *)w.data < (const char *)map + bytes),
                      "%s: without a packed copy, matmul reads the mapping", lv[li].name);
        for (size_t i = 0; i < bytes; i += 4096) (void)v[i];
        cr_assert_eq(be->ops->embed_upload(be, &mt, &we), 0);
        cr_assert_leq(cput_rss_kb(map), 8, "%s: embed_upload kept the mapping resident", lv[li].name);
        munmap(map, bytes); /* the file is gone: embed reads the backend's own rows */
        int32_t tokens[3] = {0, 95, 41}, pos[3] = {0, 1, 2};
        be_batch b = cput_flat_batch(3, tokens, pos);
        cr_assert_eq(be->ops->begin(be, &b), 0);
        float out[3 * 512];
        be->ops->embed(be, &we, out);
        for (int i = 0; i < 3; i++)
            for (int64_t d = 0; d < n_in; d++) cr_assert_eq(out[i * n_in + d], deq[tokens[i] * n_in + d]);
        be->ops->weight_free(be, &w);
        be->ops->weight_free(be, &we);
        be_destroy(be);
    }
    close(fd);
    free((void *)heap.data);
    free(deq);
}

/* Bytes of layer group g's arena on the CPU backend: each of its layers' K then V. */
static size_t cput_group_arena_bytes(const cpu__backend *c, int g)
{
    return 2 * (size_t)kv_group_layers(&c->kv, g) * c->kv_layer_bytes[g];
}

/* kv_block_out / kv_block_in (the second KV tier's copies): with several layer groups and a
 * quantised dtype, a block's host copy is exactly kv_group_bytes_per_block bytes — every tile
 * of every layer of its group, K and V, scales included, in layer order — and copying it into
 * another block reproduces those bytes there and changes nothing else, in any group. The arena
 * is filled with random bytes first, so the scales' bytes are as checked as the values'. */
Test(cpu, kv_block_out_in_every_byte_of_every_group)
{
    const int dtypes[] = {KV_I8, KV_FP8, KV_F16, KV_F32, KV_BF16};
    cput_seed(77);
    for (size_t di = 0; di < sizeof dtypes / sizeof *dtypes; di++) {
        kv_geom g = kv_geom_make(5, 3, 24, 7, dtypes[di]);
        g.n_groups = 3;
        static const uint8_t lg[5] = {0, 1, 0, 2, 1};
        memcpy(g.layer_group, lg, sizeof lg);
        for (int k = 0; k < 3; k++) g.rule[k] = (kv_rule){KV_KEEP_ALL, 0, 0};
        const int32_t n_blocks[3] = {4, 3, 5};
        tu_cpu_level lv[TU_MAX_LEVELS];
        tu_cpu_levels(lv);
        backend *be = tu_cpu_backend(&lv[0], 1);
        cr_assert_eq(be->ops->kv_init(be, &g, n_blocks), 0, "kv_init %s", kv_dtype_name(g.dtype));
        cpu__backend *c = (cpu__backend *)be;
        char *before[3];
        for (int k = 0; k < 3; k++) {
            size_t n = cput_group_arena_bytes(c, k);
            for (size_t i = 0; i < n; i++) ((unsigned char *)c->kv_mem[k])[i] = (unsigned char)cput_u32();
            before[k] = malloc(n);
            memcpy(before[k], c->kv_mem[k], n);
        }
        size_t tile_set = (size_t)g.n_kv_heads * kv_tile_bytes(&g); /* one (layer, K|V) of a block */
        for (int k = 0; k < 3; k++) {
            size_t bb = kv_group_bytes_per_block(&g, k);
            cr_assert_eq(bb, 2 * (size_t)kv_group_layers(&g, k) * tile_set);
            int32_t src = 1, dst = n_blocks[k] - 1;
            unsigned char *buf = malloc(bb + 64);
            memset(buf, 0xA5, bb + 64);
            cr_assert_eq(be->ops->kv_block_out(be, k, src, buf), 0);
            for (int i = 0; i < 64; i++) cr_assert_eq(buf[bb + i], 0xA5, "%s group %d: written past the block",
                                                      kv_dtype_name(g.dtype), k);
            size_t off = 0; /* the host copy, walked independently: layer order, K then V */
            for (int l = 0; l < g.n_layers; l++) {
                if (kv_group_of(&g, l) != k) continue;
                const char *kk = (const char *)cpu__kv_k(c, l) + (size_t)src * tile_set;
                const char *vv = (const char *)cpu__kv_v(c, l) + (size_t)src * tile_set;
                cr_assert_eq(memcmp(buf + off, kk, tile_set), 0, "%s group %d layer %d: K", kv_dtype_name(g.dtype), k, l);
                cr_assert_eq(memcmp(buf + off + tile_set, vv, tile_set), 0, "%s layer %d: V", kv_dtype_name(g.dtype), l);
                off += 2 * tile_set;
            }
            cr_assert_eq(off, bb);
            cr_assert_eq(be->ops->kv_block_in(be, k, dst, buf), 0);
            /* now dst is a copy of src in this group; every other byte of every group is as it was */
            for (int l = 0; l < g.n_layers; l++) {
                int gl = kv_group_of(&g, l);
                if (gl != k) continue;
                for (int kind = 0; kind < 2; kind++) {
                    char *base = kind ? cpu__kv_v(c, l) : cpu__kv_k(c, l);
                    size_t at = (size_t)(base - (char *)c->kv_mem[k]);
                    memcpy(before[k] + at + (size_t)dst * tile_set, before[k] + at + (size_t)src * tile_set, tile_set);
                }
            }
            for (int k2 = 0; k2 < 3; k2++)
                cr_assert_eq(memcmp(before[k2], c->kv_mem[k2], cput_group_arena_bytes(c, k2)), 0,
                             "%s: copying group %d's block %d into %d changed other bytes of group %d",
                             kv_dtype_name(g.dtype), k, src, dst, k2);
            cr_assert_eq(be->ops->kv_block_out(be, k, n_blocks[k], buf), -EINVAL, "a block past the group's");
            free(buf);
        }
        cr_assert_eq(be->ops->kv_block_out(be, 3, 0, before[0]), -EINVAL, "a group past the geometry's");
        for (int k = 0; k < 3; k++) free(before[k]);
        be_destroy(be);
    }
}
