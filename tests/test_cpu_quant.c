/*
 * test_cpu_quant.c — the CPU backend's matmul on the quantised weight types (cpu/quant*.c).
 *
 *  - cpu__qblock_decode (the integer formulation of quant.h) reconstructs every weight of
 *    random blocks as S·v + W within the roundings of dt_to_f32's own products;
 *  - the scalar reference cpu__qdot_ref equals the formulation evaluated in float64 within the
 *    f32 roundings it performs (2 per group), on random blocks and activations;
 *  - the backend's matmul, on every path (GEMV for few rows, GEMM for many, 1 to 3 threads, with
 *    and without bias), equals cpu__qdot_ref + bias bit for bit: every kernel performs the same
 *    f32 operations in the same order (quant.h), so no tolerance is needed;
 *  - the matmul is close to the float64 product of the exact weights and activations, within the
 *    activation quantisation error (the end-to-end sanity check).
 * Random blocks are random bytes with random finite scales (tu_random_blocks), plus blocks whose
 * values sit at their extremes; seeds are printed.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/quant.h"
#include "engine/backend.h"
#include "engine/dtype.h"
#include "engine/sampler.h"
#include "tests/test_util.h"

#define tq_types cpu__quant_types
#define TQ_N_TYPES CPU__QUANT_N_TYPES

/* The scalar table: its Q8_0 quantiser is what every level's equals. */
static void tq_quantise(const float *x, cpu__q8s *out, int64_t n)
{
    static cpu__kern k;
    static int done;
    if (!done) cpu__kern_init(&k, CPU_ISA_SCALAR, 0), done = 1;
    cpu__q8s_quantise(&k, x, out, n);
}

static float tq_unif(uint64_t *rng) /* [-1, 1) */
{
    return (float)((smp_splitmix64(rng) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* A random row of n_out × n_in weights of type; every 5th block has all its value bytes 0xFF
 * or 0x00 (the extremes of every layout's values). */
static uint8_t *tq_weights(int type, int64_t n_in, int64_t n_out, uint64_t *rng)
{
    size_t rb = dt_row_bytes(type, n_in), bb = dt_block_bytes(type);
    int64_t nb = n_out * (n_in / dt_block_elems(type));
    uint8_t *w = malloc(rb * (size_t)n_out);
    tu_random_blocks(type, nb, rng, w);
    for (int64_t b = 0; b < nb; b += 5) {
        memset(w + (size_t)b * bb, (b / 5) % 2 ? 0xFF : 0x00, bb);
        tu_random_block_scales(type, 1, rng, w + (size_t)b * bb);
    }
    return w;
}

Test(cpu_quant, decode_reconstructs_dequantisation)
{
    uint64_t seed = 0xDEC0DE, rng = seed;
    cr_log_info("seed %#llx", (unsigned long long)seed);
    for (int t = 0; t < TQ_N_TYPES; t++) {
        int type = tq_types[t], be = dt_block_elems(type), G = cpu__qtraits_of(type).group;
        for (int it = 0; it < 200; it++) {
            uint8_t blk[256];
            tu_random_blocks(type, 1, &rng, blk);
            if (it % 7 == 0) { /* value bytes at an extreme, scales random */
                memset(blk, it % 2 ? 0xFF : 0x00, dt_block_bytes(type));
                tu_random_block_scales(type, 1, &rng, blk);
            }
            int8_t v[256];
            float S[16], W[16], deq[256];
            for (int g = 0; g < 16; g++) W[g] = 0;
            cpu__qblock_decode(type, blk, v, S, W);
            dt_to_f32(type, blk, deq, be);
            for (int i = 0; i < be; i++) {
                double got = (double)S[i / G] * v[i] + W[i / G];
                double tol = 0x1p-22 * (fabs((double)S[i / G] * v[i]) + fabs(W[i / G]));
                cr_assert(fabs(got - deq[i]) <= tol, "%s block %d weight %d: S·v + W = %.9g, dequantised %.9g",
                          dt_name(type), it, i, got, (double)deq[i]);
            }
        }
    }
}

/* The formulation in float64 for one output: Σ_g S_g·d·isum_g + W_g·X_g, and Σ of the terms'
 * magnitudes (for the tolerance). */
static double tq_formula(int type, const uint8_t *w, const cpu__q8s *x, int64_t n_in, double *mag)
{
    int be = dt_block_elems(type);
    cpu__qtraits tr = cpu__qtraits_of(type);
    int G = tr.group;
    double s = 0, m = 0;
    for (int64_t b = 0; b < n_in / be; b++) {
        int8_t v[256];
        float S[16], W[16];
        for (int g = 0; g < 16; g++) W[g] = 0;
        cpu__qblock_decode(type, w + b * dt_block_bytes(type), v, S, W);
        for (int g = 0; g < be / G; g++) {
            int64_t i0 = b * be + g * G;
            const cpu__q8s *xb = &x[i0 / 32];
            int64_t isum = 0;
            for (int k = 0; k < G; k++) isum += v[g * G + k] * xb->q[i0 % 32 + k];
            double t1 = (double)S[g] * xb->d * isum;
            double t2 = tr.is_signed ? 0 : (double)W[g] * xb->xs[G == 32 ? 2 : (i0 % 32) / 16];
            s += t1 + t2;
            m += fabs(t1) + fabs(t2);
        }
    }
    *mag = m;
    return s;
}

Test(cpu_quant, reference_dot_is_the_formulation)
{
    uint64_t seed = 0xF0E1, rng = seed;
    cr_log_info("seed %#llx", (unsigned long long)seed);
    enum { N = 1024 };
    static float x[N];
    static cpu__q8s xq[N / 32];
    for (int t = 0; t < TQ_N_TYPES; t++) {
        int type = tq_types[t];
        for (int it = 0; it < 20; it++) {
            uint8_t *w = tq_weights(type, N, 1, &rng);
            for (int i = 0; i < N; i++) x[i] = it % 3 == 0 && i < 64 ? 0.0f : 3 * tq_unif(&rng);
            tq_quantise(x, xq, N);
            double mag, want = tq_formula(type, w, xq, N, &mag);
            float got = cpu__qdot_ref(type, w, xq, N);
            /* per group: S·d rounded once, then up to two fused multiply-adds into acc: each
             * term carries ≤ 2u of itself and each accumulation ≤ u of the running sum */
            int n_groups = N / cpu__qtraits_of(type).group;
            double u = 0x1p-24, tol = (2 * n_groups + 4) * u * mag;
            cr_assert(fabs(got - want) <= tol, "%s it %d: %.9g vs %.9g (tol %.3g)", dt_name(type), it, (double)got,
                      want, tol);
            free(w);
        }
    }
    /* the quantiser: d = max|x| / 127, q = round(x / d), sums exact */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.25f;
    tq_quantise(x, xq, 32);
    cr_assert_eq(xq[0].d, 4.0f / 127.0f);
    cr_assert_eq(xq[0].q[0], -127);
    cr_assert_eq(xq[0].q[16], 0);
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += xq[0].q[i];
    cr_assert_eq(xq[0].s32, s);
    cr_assert_eq(xq[0].xs[2], xq[0].d * (float)s);
}

/* Every path of the backend's matmul against cpu__qdot_ref + bias, bit for bit, and against the
 * float64 product of the exact weights and activations within the quantisation error. */
static void tq_check(int type, int64_t n_in, int64_t n_out, uint64_t seed)
{
    uint64_t rng = seed;
    static const int rows[] = {1, 2, 3, 4, 5, 8, 9, 16, 33};
    enum { MAX_ROWS = 33 };
    size_t rb = dt_row_bytes(type, n_in);
    uint8_t *data = tq_weights(type, n_in, n_out, &rng);
    model_tensor mt = {.name = "w", .type = type, .ne = {n_in, n_out}, .row_bytes = rb, .data = data};
    float *bias = malloc((size_t)n_out * sizeof *bias), *x = malloc((size_t)(MAX_ROWS * n_in) * sizeof *x);
    float *out = malloc((size_t)(MAX_ROWS * n_out) * sizeof *out), *ref = malloc((size_t)(MAX_ROWS * n_out) * sizeof *ref);
    float *deq = malloc((size_t)n_in * sizeof *deq);
    cpu__q8s *xq = malloc((size_t)(MAX_ROWS * n_in / 32) * sizeof *xq);
    for (int64_t o = 0; o < n_out; o++) bias[o] = tq_unif(&rng);
    for (int64_t i = 0; i < MAX_ROWS * n_in; i++) x[i] = 2 * tq_unif(&rng);
    for (int r = 0; r < MAX_ROWS; r++) tq_quantise(x + r * n_in, xq + r * (n_in / 32), n_in);
    for (int r = 0; r < MAX_ROWS; r++)
        for (int64_t o = 0; o < n_out; o++) ref[r * n_out + o] = cpu__qdot_ref(type, data + o * rb, xq + r * (n_in / 32), n_in);
    /* The end-to-end sanity check, on row 0: |Σ w·x − Σ w·d·q| ≤ Σ |w|·d/2 (each q is x/d
     * rounded to an integer) plus the f32 roundings. */
    for (int64_t o = 0; o < n_out; o++) {
        dt_to_f32(type, data + o * rb, deq, n_in);
        double exact = 0, bound = 0, mag = 0;
        for (int64_t i = 0; i < n_in; i++) {
            exact += (double)deq[i] * x[i];
            bound += fabs(deq[i]) * xq[i / 32].d * 0.5;
            mag += fabs((double)deq[i] * x[i]);
        }
        cr_assert(fabs(ref[o] - exact) <= bound + 1e-5 * mag + 1e-30, "%s output %lld: %.9g vs exact %.9g (bound %.3g)",
                  dt_name(type), (long long)o, (double)ref[o], exact, bound);
    }
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int level = 0; level < n_lv; level++)
    for (int th = 1; th <= 3; th++) {
        backend *be = tu_cpu_backend(&lv[level], th);
        /* the level's own kernels run: VNNI on an avx512 table with VNNI, else AVX2 from avx2 up */
        const cpu__mm_plain *pl = &((cpu__backend *)be)->k.mm[type].plain;
        int lvl = lv[level].isa == CPU_ISA_AVX512 && (lv[level].features & CPU_FEAT_VNNI) ? CPU_ISA_AVX512
                   : lv[level].isa == CPU_ISA_AVX2 || lv[level].isa == CPU_ISA_AVX512 ? CPU_ISA_AVX2
                                                                                      : CPU_ISA_SCALAR;
        cr_assert_eq(pl->isa, lvl, "%s at level %s runs the kernels of level %d", dt_name(type), lv[level].name, pl->isa);
        be_weight w;
        cr_assert_eq(be->ops->weight_upload(be, &mt, &w), 0);
        be_weight bw = {.type = DT_F32, .n_in = n_out, .n_out = 1, .data = bias};
        for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
            for (int wb = 0; wb < 2; wb++) {
                int nr = rows[k];
                for (int64_t e = 0; e < nr * n_out; e++) out[e] = NAN;
                be->ops->matmul(be, x, nr, &w, wb ? &bw : NULL, out);
                for (int64_t e = 0; e < nr * n_out; e++) {
                    float want = ref[e] + (wb ? bias[e % n_out] : 0.0f);
                    cr_assert(out[e] == want,
                              "%s level %s n_in %lld n_out %lld rows %d threads %d bias %d seed %#llx: out[%lld] = "
                              "%.9g, reference %.9g", dt_name(type), lv[level].name, (long long)n_in, (long long)n_out, nr, th, wb,
                              (unsigned long long)seed, (long long)e, (double)out[e], (double)want);
                }
            }
        be->ops->weight_free(be, &w);
        be_destroy(be);
    }
    free(data), free(bias), free(x), free(out), free(ref), free(deq), free(xq);
}

Test(cpu_quant, matmul_equals_reference_on_every_path)
{
    for (int t = 0; t < TQ_N_TYPES; t++) {
        int type = tq_types[t];
        int be = dt_block_elems(type);
        uint64_t seed = 0xC0DE00 + (uint64_t)type;
        cr_log_info("cpu_quant %s seed %#llx", dt_name(type), (unsigned long long)seed);
        tq_check(type, be == 32 ? 96 : 512, 67, seed);
        tq_check(type, 256, 1, seed + 1);
        tq_check(type, be == 32 ? 32 : 768, 17, seed + 2);
    }
}
