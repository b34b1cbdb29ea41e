/*
 * test_cpu_quant.c — the CPU backend's matmul on the quantised weight types (cpu/quant*.c)
 * against a float64 reference over the exactly dequantised weights (dt_to_f32), on random
 * blocks (random bytes, random finite scales: tu_random_blocks), odd output counts, 1 to 3
 * threads and row counts from decode (1) to prefill. Outputs are NaN-poisoned before each run.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/internal.h"
#include "engine/backend.h"
#include "engine/dtype.h"
#include "engine/sampler.h"
#include "tests/test_util.h"

static const int tq_types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K,
                               DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS};
#define TQ_N_TYPES (int)(sizeof tq_types / sizeof tq_types[0])

static float tq_unif(uint64_t *rng) /* [-1, 1) */
{
    return (float)((smp_splitmix64(rng) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* One matmul shape of one type: every row count, with and without bias, on 1-3 threads. */
static void tq_check(int type, int64_t n_in, int64_t n_out, uint64_t seed)
{
    uint64_t rng = seed;
    static const int rows[] = {1, 2, 3, 5, 8, 16, 33};
    enum { MAX_ROWS = 33 };
    size_t rb = dt_row_bytes(type, n_in);
    cr_assert_gt(rb, 0);
    model_tensor mt = {.name = "w", .type = type, .ne = {n_in, n_out}, .row_bytes = rb};
    void *data = malloc(rb * (size_t)n_out);
    tu_random_blocks(type, n_out * (n_in / dt_block_elems(type)), &rng, data);
    mt.data = data;
    float *deq = malloc((size_t)(n_in * n_out) * sizeof *deq), *bias = malloc((size_t)n_out * sizeof *bias);
    float *x = malloc((size_t)(MAX_ROWS * n_in) * sizeof *x), *out = malloc((size_t)(MAX_ROWS * n_out) * sizeof *out);
    double *ref = malloc((size_t)(MAX_ROWS * n_out) * sizeof *ref), *mag = malloc((size_t)(MAX_ROWS * n_out) * sizeof *mag);
    for (int64_t o = 0; o < n_out; o++) {
        dt_to_f32(type, (const char *)data + (size_t)o * rb, deq + o * n_in, n_in);
        bias[o] = tq_unif(&rng);
    }
    for (int64_t i = 0; i < MAX_ROWS * n_in; i++) x[i] = 2 * tq_unif(&rng);
    for (int r = 0; r < MAX_ROWS; r++)
        for (int64_t o = 0; o < n_out; o++) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < n_in; i++) {
                double p = (double)deq[o * n_in + i] * x[r * n_in + i];
                s += p;
                m += fabs(p);
            }
            ref[r * n_out + o] = s;
            mag[r * n_out + o] = m;
        }
    /* f32 accumulation of n_in products (each rounded once) in any order: |error| ≤ γ(n_in + 1)
     * Σ |w x| with γ(n) = n u / (1 − n u), u = 2^-24; plus the bias add. */
    double u = 0x1p-24, gamma = (n_in + 2) * u / (1 - (n_in + 2) * u);
    for (int th = 1; th <= 3; th++) {
        backend *be = cpu_backend_create(th);
        cr_assert_not_null(be);
        be_weight w;
        cr_assert_eq(be->ops->weight_upload(be, &mt, &w), 0);
        be_weight bw = {.type = DT_F32, .n_in = n_out, .n_out = 1, .data = bias};
        for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
            for (int wb = 0; wb < 2; wb++) {
                int nr = rows[k];
                for (int64_t e = 0; e < nr * n_out; e++) out[e] = NAN;
                be->ops->matmul(be, x, nr, &w, wb ? &bw : NULL, out);
                for (int64_t e = 0; e < nr * n_out; e++) {
                    double want = ref[e] + (wb ? bias[e % n_out] : 0);
                    double tol = gamma * (mag[e] + (wb ? fabs(bias[e % n_out]) : 0)) + 1e-30;
                    cr_assert(fabs(out[e] - want) <= tol,
                              "%s n_in %lld n_out %lld rows %d threads %d bias %d seed %#llx: out[%lld] = %.9g, "
                              "want %.9g (tol %.3g)", dt_name(type), (long long)n_in, (long long)n_out, nr, th, wb,
                              (unsigned long long)seed, (long long)e, (double)out[e], want, tol);
                }
            }
        be->ops->weight_free(be, &w);
        be_destroy(be);
    }
    free(data), free(deq), free(bias), free(x), free(out), free(ref), free(mag);
}

Test(cpu_quant, matmul_every_type_against_float64)
{
    for (int t = 0; t < TQ_N_TYPES; t++) {
        int type = tq_types[t];
        int be = dt_block_elems(type);
        uint64_t seed = 0xC0DE00 + (uint64_t)type;
        cr_log_info("cpu_quant %s seed %#llx", dt_name(type), (unsigned long long)seed);
        tq_check(type, be == 32 ? 96 : 512, 67, seed);
        tq_check(type, be == 32 ? 256 : 256, 1, seed + 1);
        tq_check(type, be == 32 ? 32 : 768, 17, seed + 2);
    }
}
