/*
 * test_cpu_quant.c — the CPU backend's matmul on the quantised weight types (cpu/quant*.c).
 *
 *  - cpu__qblock_decode (the blocks-of-32 formulation of quant.h) reconstructs every weight of
 *    random blocks as S·v + W, and cpu__qk_values + cpu__qk_scales (the super-block one) as
 *    d·sc·v + e·m, within the roundings of dt_to_f32's own products;
 *  - the scalar references cpu__qdot_ref (blocks of 32) and cpu__qkdot_ref (super-blocks) equal
 *    the float64 product of the dequantised weights and the quantised activations within the f32
 *    roundings they and the dequantisation perform, on random blocks and activations;
 *  - every level's Q8_K quantiser gives the scalar one's bytes (all-zero blocks included);
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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/quant.h"
#include "engine/backend.h"
#include "model/dtype.h"
#include "base/rng.h"
#include "tests/test_util.h"

#define tq_types cpu__quant_types
#define TQ_N_TYPES CPU__QUANT_N_TYPES

/* The scalar table: its quantisers are what every level's equal. */
static const cpu__kern *tq_scalar(void)
{
    static cpu__kern k;
    static int done;
    if (!done) cpu__kern_init(&k, CPU_ISA_SCALAR, 0), done = 1;
    return &k;
}

/* The activations of a blocks-of-32 type in its format (d rounded to f16 for MXFP4, as
 * llama.cpp's Q8_0 activations are). */
static void tq_quantise(int type, const float *x, cpu__q8s *out, int64_t n)
{
    if (tq_scalar()->mm[type].act == CPU__ACT_Q8S_H) cpu__q8s_quantise_h(tq_scalar(), x, out, n);
    else cpu__q8s_quantise(tq_scalar(), x, out, n);
}

static void tq_quantise_k(const float *x, cpu__q8k *out, int64_t n)
{
    tq_scalar()->quantise_q8k(x, out, n);
}

/* The scalar reference of one output in its type's activation format (row r of xs or xk). */
static float tq_ref(int type, const uint8_t *w, const cpu__q8s *xs, const cpu__q8k *xk, int64_t n_in, int r)
{
    return cpu__qk_is_super(type) ? cpu__qkdot_ref(type, w, xk + (size_t)r * (n_in / 256), n_in)
                                  : cpu__qdot_ref(type, w, xs + (size_t)r * (n_in / 32), n_in);
}

static float tq_unif(uint64_t *rng) /* [-1, 1) */
{
    return (float)((rng_splitmix64(rng) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* A random row of n_out × n_in weights of type; every 5th block has all its value and scale
 * bytes 0x00, 0xFF or 0x80 in turn (the extremes of every layout's values and integer scales:
 * e.g. Q6_K's int8 scale −128), with random f16 factors. */
static uint8_t *tq_weights(int type, int64_t n_in, int64_t n_out, uint64_t *rng)
{
    size_t rb = dt_row_bytes(type, n_in), bb = dt_block_bytes(type);
    int64_t nb = n_out * (n_in / dt_block_elems(type));
    uint8_t *w = malloc(rb * (size_t)n_out);
    tu_random_blocks(type, nb, rng, w);
    for (int64_t b = 0; b < nb; b += 5) {
        static const uint8_t fill[3] = {0x00, 0xFF, 0x80};
        memset(w + (size_t)b * bb, fill[(b / 5) % 3], bb);
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
            dt_to_f32(type, blk, deq, be);
            if (cpu__qk_is_super(type)) {
                int16_t sc[16], m[16];
                float d, e;
                cpu__qk_values(type, blk, v);
                cpu__qk_scales(type, blk, sc, m, &d, &e);
                for (int i = 0; i < 256; i++) {
                    double t1 = (double)d * sc[i / 16] * v[i], t2 = (double)e * m[i / 16];
                    double tol = 0x1p-22 * (fabs(t1) + fabs(t2));
                    cr_assert(fabs(t1 + t2 - deq[i]) <= tol, "%s block %d weight %d: d·sc·v + e·m = %.9g, dequantised %.9g",
                              dt_name(type), it, i, t1 + t2, (double)deq[i]);
                }
                continue;
            }
            cpu__qblock_decode(type, blk, v, S, W);
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

/* The float64 product of the dequantised row w (n_in weights) with the Q8_K activations, and
 * Σ_i (|d·sc·v_i| + |e·m_i|)·|d_x·q_i| (for the tolerance). */
static double tq_exact_k(int type, const uint8_t *w, const cpu__q8k *x, int64_t n_in, double *mag)
{
    double s = 0, m = 0;
    for (int64_t b = 0; b < n_in / 256; b++) {
        const uint8_t *blk = w + b * dt_block_bytes(type);
        int8_t v[256];
        int16_t sc[16], mn[16];
        float d, e, deq[256];
        cpu__qk_values(type, blk, v);
        cpu__qk_scales(type, blk, sc, mn, &d, &e);
        dt_to_f32(type, blk, deq, 256);
        for (int i = 0; i < 256; i++) {
            double xq = (double)x[b].d * x[b].q[i];
            s += (double)deq[i] * xq;
            m += (fabs((double)d * sc[i / 16] * v[i]) + fabs((double)e * mn[i / 16])) * fabs(xq);
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
    static cpu__q8k xk[N / 256];
    for (int t = 0; t < TQ_N_TYPES; t++) {
        int type = tq_types[t], super = cpu__qk_is_super(type);
        for (int it = 0; it < 20; it++) {
            uint8_t *w = tq_weights(type, N, 1, &rng);
            for (int i = 0; i < N; i++) x[i] = it % 3 == 0 && i < 256 ? 0.0f : 3 * tq_unif(&rng);
            tq_quantise(type, x, xq, N);
            tq_quantise_k(x, xk, N);
            double mag, want, tol, u = 0x1p-24;
            if (super) {
                /* per super-block: (float)isum, d·d_x, e·d_x rounded once each (≤ u of their
                 * term) and two fused multiply-adds (≤ u of the running sum each); the f32
                 * dequantisation carries ≤ 4u of each weight's terms */
                want = tq_exact_k(type, w, xk, N, &mag);
                tol = (2.0 * (N / 256) + 8) * u * mag;
            } else {
                /* per group: S·d rounded once, then up to two fused multiply-adds into acc: each
                 * term carries ≤ 2u of itself and each accumulation ≤ u of the running sum */
                want = tq_formula(type, w, xq, N, &mag);
                tol = (2.0 * (N / cpu__qtraits_of(type).group) + 4) * u * mag;
            }
            float got = tq_ref(type, w, xq, xk, N, 0);
            cr_assert(fabs(got - want) <= tol, "%s it %d: %.9g vs %.9g (tol %.3g)", dt_name(type), it, (double)got,
                      want, tol);
            free(w);
        }
    }
    /* the quantisers: d = max|x| / 127, q = round(x / d), sums exact */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.25f;
    tq_quantise(DT_Q4_0, x, xq, 32);
    cr_assert_eq(xq[0].d, 4.0f / 127.0f);
    cr_assert_eq(xq[0].q[0], -127);
    cr_assert_eq(xq[0].q[16], 0);
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += xq[0].q[i];
    cr_assert_eq(xq[0].s32, s);
    cr_assert_eq(xq[0].xs[2], xq[0].d * (float)s);
    for (int i = 0; i < 256; i++) x[i] = (float)(i - 128) * 0.5f;
    tq_quantise_k(x, xk, 256);
    cr_assert_eq(xk[0].d, 64.0f / 127.0f);
    cr_assert_eq(xk[0].q[0], -127);
    cr_assert_eq(xk[0].q[128], 0);
    for (int h = 0; h < 16; h++) {
        int32_t bs = 0;
        for (int i = 0; i < 16; i++) bs += xk[0].q[16 * h + i];
        cr_assert_eq(xk[0].bsum[h], bs);
    }
}

/* Every level's Q8_K quantiser against the scalar one, byte for byte: random rows (with an
 * all-zero block, and blocks at ±max) of several lengths. */
Test(cpu_quant, q8k_quantiser_equal_at_every_level)
{
    uint64_t seed = 0x8C8C, rng = seed;
    cr_log_info("seed %#llx", (unsigned long long)seed);
    enum { N = 2048 };
    static float x[N];
    static cpu__q8k want[N / 256], got[N / 256];
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int it = 0; it < 50; it++) {
        float scale = ldexpf(1.0f, (int)(rng_splitmix64(&rng) % 40) - 20);
        for (int i = 0; i < N; i++) x[i] = scale * tq_unif(&rng);
        for (int i = 0; i < 256; i++) x[256 * (it % 8) + i] = 0.0f;            /* max|x| = 0 */
        for (int i = 0; i < 256; i++) x[256 * ((it + 3) % 8) + i] = i % 2 ? scale : -scale; /* every |q| = 127 */
        int64_t n = 256 * (1 + it % 8);
        memset(want, 0x5A, sizeof want);
        tq_quantise_k(x, want, n);
        for (int l = 0; l < n_lv; l++) {
            cpu__kern k;
            cpu__kern_init(&k, lv[l].isa, lv[l].features);
            memset(got, 0xA5, sizeof got);
            k.quantise_q8k(x, got, n);
            for (int64_t b = 0; b < n / 256; b++)
                cr_assert(!memcmp(&got[b], &want[b], offsetof(cpu__q8k, d) + sizeof(float)),
                          "level %s it %d block %lld: quantised differently", lv[l].name, it, (long long)b);
        }
    }
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
    cpu__q8k *xk = malloc((size_t)(MAX_ROWS * (n_in / 256) + 1) * sizeof *xk);
    for (int64_t o = 0; o < n_out; o++) bias[o] = tq_unif(&rng);
    for (int64_t i = 0; i < MAX_ROWS * n_in; i++) x[i] = 2 * tq_unif(&rng);
    for (int64_t i = 0; i < 256 && i < n_in; i++) x[n_in + i] = 0.0f; /* row 1 starts with max|x| = 0 */
    for (int r = 0; r < MAX_ROWS; r++) tq_quantise(type, x + r * n_in, xq + r * (n_in / 32), n_in);
    if (cpu__qk_is_super(type))
        for (int r = 0; r < MAX_ROWS; r++) tq_quantise_k(x + r * n_in, xk + r * (n_in / 256), n_in);
    for (int r = 0; r < MAX_ROWS; r++)
        for (int64_t o = 0; o < n_out; o++) ref[r * n_out + o] = tq_ref(type, data + o * rb, xq, xk, n_in, r);
    /* The end-to-end sanity check, on row 0: |Σ w·x − Σ w·d·q| ≤ Σ |w|·d/2 (each q is x/d
     * rounded to an integer) plus the f32 roundings; with d rounded to f16 after q was chosen,
     * also |q|·|Δd| ≤ 127 · 2^-11 · d more. */
    double half = tq_scalar()->mm[type].act == CPU__ACT_Q8S_H ? 0.5 + 127.0 * 0x1p-11 * 1.001 : 0.5;
    for (int64_t o = 0; o < n_out; o++) {
        dt_to_f32(type, data + o * rb, deq, n_in);
        double exact = 0, bound = 0, mag = 0;
        for (int64_t i = 0; i < n_in; i++) {
            exact += (double)deq[i] * x[i];
            bound += fabs(deq[i]) * (cpu__qk_is_super(type) ? xk[i / 256].d : xq[i / 32].d) * half;
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
    free(data), free(bias), free(x), free(out), free(ref), free(deq), free(xq), free(xk);
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
