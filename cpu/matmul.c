/*
 * matmul.c — out[r][o] = Σ_i x[r][i] · W[o][i] (+ bias[o]) for F32, F16, BF16 and Q8_0 weights;
 * the other quantised types go to quant.c.
 *
 * Three shapes of work, by the number of activation rows:
 *  - GEMV (1-3 rows: decode). Memory-bound: every weight row is streamed once and dotted
 *    against each activation row while it is in L1.
 *  - 4 × 4 dot tiles (4-15 rows; 4-7 for Q8_0): four weight rows against four activation rows,
 *    no packing. Used where a packed panel would not be reused enough to pay for itself.
 *  - Packed-panel GEMM (many rows: prefill, batched decode), in gemm.c (F32/F16/BF16: f32
 *    panels, 6 × 32 FMA microkernel) and gemm_q8.c (Q8_0: int8 panels, 8 × 16 VNNI microkernel).
 * Threads take units of outputs (whole column tiles for the GEMMs) from the pool's counter.
 *
 * Matrices uploaded through the backend carry a copy packed once for the GEMMs (be_weight.extra:
 * f32/f16/bf16 panels for gemm.c with AVX-512, int8 tiles for gemm_q8.c with VNNI); with it every
 * number of rows, one included, runs that GEMM with no packing per call, so a batched decode
 * step reads each weight byte once and a row's result does not depend on the batch. The three
 * shapes above remain for weights without the copy (other CPUs, or a be_weight made by hand).
 *
 * Q8_0: activations are quantised once per matmul to int8 blocks of 32 with an f32 scale
 * (max-abs / 127, round to nearest even). The GEMV and the dot tiles multiply them with the
 * weights' int8 blocks by AVX512-VNNI vpdpbusd (unsigned × signed: the weight's sign is moved
 * onto the activation with the abs/sign trick), scale by d_w · d_x per block and sum in f32.
 *
 * SIMD is chosen when compiling (the build uses -march=native): AVX-512 (+VNNI for Q8_0) where
 * the target has it; otherwise AVX2+FMA+F16C for the GEMV dot products and the panel GEMM
 * (Q8_0 via maddubs); and a portable scalar path for everything else and for tails. The tests
 * pass with each of the three (-march=native, x86-64-v3, x86-64-v2).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/internal.h"
#include "engine/dtype.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define HAVE_AVX512 1
#endif
#if defined(HAVE_AVX512) && defined(__AVX512VNNI__)
#define HAVE_VNNI 1
#endif
#if !defined(HAVE_AVX512) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define HAVE_AVX2 1 /* the fallback for CPUs without AVX-512 */
#endif

#if defined(HAVE_AVX512) || defined(HAVE_AVX2)
static inline float hsum256(__m256 a)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
#endif

/* Activation rows from which the 4 x 4 tile GEMM is taken, and from which F32/F16/BF16 weights
 * are packed into panels (packing costs about as much as 16 rows of arithmetic). */
#define GEMM_MIN_ROWS 4
#define PANEL_MIN_ROWS 16
#define Q8_PANEL_MIN_ROWS 8

typedef cpu__q8x q8x;
typedef cpu__mm_task mm_task;

/* ---- activation quantisation --------------------------------------------------------------- */

/* Per block of 32: d = max|x| / 127, q = round-to-nearest-even(x / d) (the scalar and the SIMD
 * paths agree exactly: both multiply by the same reciprocal and round in the default mode). */
static void quantise_row(const float *x, q8x *out, int64_t n)
{
#ifdef HAVE_AVX512
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        __m512 vid = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        out[b].d = d;
        _mm_storeu_si128((void *)out[b].q, _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((void *)(out[b].q + 16), _mm512_cvtsepi32_epi8(q1));
    }
#else
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        out[b].d = d;
        for (int i = 0; i < 32; i++) out[b].q[i] = (int8_t)lrintf(xb[i] * id);
    }
#endif
}

/* ---- dot products (GEMV) ------------------------------------------------------------------- */

static float dot_f32(const float *w, const float *x, int64_t n)
{
    int64_t i = 0;
    float s = 0;
#ifdef HAVE_AVX512
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#elif defined(HAVE_AVX2)
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    s = hsum256(_mm256_add_ps(a0, a1));
#endif
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    int64_t i = 0;
    float s = 0;
#ifdef HAVE_AVX512
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    /* 64-byte loads of the weights: measurably faster streaming from DRAM than 32-byte ones. */
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (; i + 64 <= n; i += 64) {
        __m512i v0 = _mm512_loadu_si512((const void *)(w + i));
        __m512i v1 = _mm512_loadu_si512((const void *)(w + i + 32));
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(v0)), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v0, 1)), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(v1)), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v1, 1)), _mm512_loadu_ps(x + i + 48), a3);
    }
    a0 = _mm512_add_ps(a0, a2);
    a1 = _mm512_add_ps(a1, a3);
    for (; i + 32 <= n; i += 32) {
        __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(w + i)));
        __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(w + i + 16)));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const void *)(w + i))),
                             _mm512_loadu_ps(x + i), a0);
    s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#elif defined(HAVE_AVX2)
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const void *)(w + i))), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const void *)(w + i + 8))),
                             _mm256_loadu_ps(x + i + 8), a1);
    }
    s = hsum256(_mm256_add_ps(a0, a1));
#endif
    for (; i < n; i++) s += dt_f16_to_f32(w[i]) * x[i];
    return s;
}

#ifdef HAVE_AVX512
static inline __m512 bf16x16_to_f32(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
#endif

static float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    int64_t i = 0;
    float s = 0;
#ifdef HAVE_AVX512
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) { /* one 64-byte load per 32 weights (see dot_f16) */
        __m512i v = _mm512_loadu_si512((const void *)(w + i));
        __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
        __m512 w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(bf16x16_to_f32(w + i), _mm512_loadu_ps(x + i), a0);
    s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#elif defined(HAVE_AVX2)
    __m256 a0 = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(w + i)));
        a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), _mm256_loadu_ps(x + i), a0);
    }
    s = hsum256(a0);
#endif
    for (; i < n; i++) s += dt_bf16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_q8(const dt_block_q8_0 *w, const q8x *x, int64_t nb)
{
    int64_t b = 0;
    float s = 0;
#ifdef HAVE_VNNI
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        __m256i w0 = _mm256_loadu_si256((const void *)w[b].q);
        __m256i w1 = _mm256_loadu_si256((const void *)w[b + 1].q);
        __m256i x0 = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b].q), w0);
        __m256i x1 = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b + 1].q), w1);
        __m256i p0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w0), x0);
        __m256i p1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w1), x1);
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                             _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * x[b + 1].d), a1);
    }
    s = hsum256(_mm256_add_ps(a0, a1));
#elif defined(HAVE_AVX2)
    /* maddubs: |w| (unsigned) × x with w's sign (signed) → int16 pairs → int32. */
    __m256 a0 = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (; b < nb; b++) {
        __m256i wq = _mm256_loadu_si256((const void *)w[b].q);
        __m256i xs = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b].q), wq);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), xs), ones);
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), a0);
    }
    s = hsum256(a0);
#endif
    for (; b < nb; b++) {
        int32_t acc = 0;
        for (int i = 0; i < 32; i++) acc += (int32_t)w[b].q[i] * x[b].q[i];
        s += (float)acc * dt_f16_to_f32(w[b].d) * x[b].d;
    }
    return s;
}

/* ---- matmul task --------------------------------------------------------------------------- */

/* GEMV: outputs [lo, hi) for every row. */
static void gemv_range(const mm_task *t, int64_t lo, int64_t hi)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t rb = dt_row_bytes(w->type, n_in);
    for (int64_t o = lo; o < hi; o++) {
        const void *wr = (const char *)w->data + (size_t)o * rb;
        float bo = t->bias ? t->bias[o] : 0.0f;
        for (int r = 0; r < t->n_rows; r++) {
            float s;
            switch (w->type) {
            case DT_F32: s = dot_f32(wr, t->x + (size_t)r * n_in, n_in); break;
            case DT_F16: s = dot_f16(wr, t->x + (size_t)r * n_in, n_in); break;
            case DT_BF16: s = dot_bf16(wr, t->x + (size_t)r * n_in, n_in); break;
            default: s = dot_q8(wr, t->xq + (size_t)r * (n_in / 32), n_in / 32); break;
            }
            t->out[(size_t)r * n_out + o] = s + bo;
        }
    }
}

/* Takes units of t->unit outputs until none are left. */
static void gemv_run(void *v, int64_t lo_unit, int64_t hi_unit, int ith)
{
    mm_task *t = v;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < t->w->n_out ? lo + t->unit : t->w->n_out;
        gemv_range(t, lo, hi);
    }
}

typedef struct quant_task {
    const float *x;
    int64_t n_in;
    int n_rows;
    q8x *xq;
    int32_t *xsum; /* NULL, or [n_rows][n_in / 32]: -128 × Σ q per block, for the VNNI GEMM */
} quant_task;

static void quant_run(void *v, int64_t lo, int64_t hi, int ith)
{
    quant_task *t = v;
    int64_t nb = t->n_in / 32;
    for (int64_t r = lo; r < hi; r++) {
        quantise_row(t->x + r * t->n_in, t->xq + r * nb, t->n_in);
        if (t->xsum)
            for (int64_t b = 0; b < nb; b++) {
                int32_t s = 0;
                for (int i = 0; i < 32; i++) s += t->xq[r * nb + b].q[i];
                t->xsum[r * nb + b] = -128 * s;
            }
    }
}

static void gemm_run(void *v, int64_t lo_unit, int64_t hi_unit, int ith);

/* Units of work for n outputs: about 8 per thread (so a late thread's share can be taken by
 * the others), each a multiple of align outputs. */
static void set_units(mm_task *t, int64_t n, int64_t align, int nth)
{
    int64_t unit = (n + 8 * nth - 1) / (8 * nth);
    unit = (unit + align - 1) / align * align;
    if (unit < align) unit = align;
    t->unit = unit;
    t->n_units = (n + unit - 1) / unit;
}

void cpu__matmul(cpu__backend *c, const float *x, int n_rows, const be_weight *w,
                 const be_weight *bias, float *out)
{
    mm_task t = {.c = c, .x = x, .n_rows = n_rows, .w = w, .out = out,
                 .bias = bias && bias->data ? bias->data : NULL};
    if (cpu__quant_handles(w->type)) {
        if (cpu__quant_matmul(c, &t)) goto oom;
        return;
    }
    int nth = c->n_threads;
    int small = (int64_t)n_rows * w->n_in * w->n_out < 65536; /* not worth waking the workers */
    int q8_pre = w->type == DT_Q8_0 && w->extra;
    int q8_panel = w->type == DT_Q8_0 && n_rows >= Q8_PANEL_MIN_ROWS && cpu__gemm_q8_available();
    if (w->type == DT_Q8_0) {
        size_t nbk = (size_t)n_rows * (size_t)(w->n_in / 32);
        size_t qbytes = (nbk * sizeof(q8x) + 63) & ~(size_t)63;
        if (cpu__scratch_reserve(&c->shared, qbytes + nbk * sizeof(int32_t))) goto oom;
        int32_t *xsum = q8_panel || q8_pre ? (int32_t *)((char *)c->shared.p + qbytes) : NULL;
        quant_task qt = {x, w->n_in, n_rows, c->shared.p, xsum};
        t.xsum = xsum;
        if (small) quant_run(&qt, 0, n_rows, 0);
        else cpu__pool_for(c->pool, n_rows, 1 + 32768 / w->n_in, quant_run, &qt);
        t.xq = c->shared.p;
    }
    if (w->extra && w->type != DT_Q8_0) {
        if (w->type != DT_F32 && n_rows > CPU__PANEL_MR)
            for (int i = 0; i < nth; i++)
                if (cpu__scratch_reserve(&c->scratch[i], cpu__gemm_panel_scratch_bytes())) goto oom;
        set_units(&t, w->n_out, CPU__PANEL_NR, small ? 1 : nth);
        if (small) cpu__gemm_panel_prepacked_run(&t, 0, t.n_units, 0);
        else cpu__pool_for(c->pool, t.n_units, 1, cpu__gemm_panel_prepacked_run, &t);
    } else if (q8_pre) {
        set_units(&t, w->n_out, cpu__gemm_q8_align(n_rows), small ? 1 : nth);
        if (small) cpu__gemm_q8_prepacked_run(&t, 0, t.n_units, 0);
        else cpu__pool_for(c->pool, t.n_units, 1, cpu__gemm_q8_prepacked_run, &t);
    } else if (q8_panel) {
        for (int i = 0; i < nth; i++)
            if (cpu__scratch_reserve(&c->scratch[i], cpu__gemm_q8_scratch_bytes())) goto oom;
        set_units(&t, w->n_out, 16, nth);
        cpu__pool_for(c->pool, t.n_units, 1, cpu__gemm_q8_run, &t);
    } else if (n_rows >= PANEL_MIN_ROWS && w->type != DT_Q8_0) {
        for (int i = 0; i < nth; i++)
            if (cpu__scratch_reserve(&c->scratch[i], cpu__gemm_panel_scratch_bytes())) goto oom;
        set_units(&t, w->n_out, CPU__PANEL_NR, nth);
        cpu__pool_for(c->pool, t.n_units, 1, cpu__gemm_panel_run, &t);
    } else if (n_rows >= GEMM_MIN_ROWS) {
        set_units(&t, w->n_out, 4, nth);
        cpu__pool_for(c->pool, t.n_units, 1, gemm_run, &t);
    } else if (small) {
        set_units(&t, w->n_out, w->n_out, 1);
        gemv_run(&t, 0, t.n_units, 0);
    } else {
        set_units(&t, w->n_out, 16, nth);
        cpu__pool_for(c->pool, t.n_units, 1, gemv_run, &t);
    }
    return;
oom:
    for (size_t i = 0; i < (size_t)n_rows * w->n_out; i++) out[i] = NAN;
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

/* Outputs per column block: the block's weight rows stay in L2 while every 4-row group of
 * activations passes over them. */
#define COL_BLOCK 64

/* One output (r, o) by the GEMV dot products: tails of the 4 × 4 tiles. */
static float dot_one(const mm_task *t, int64_t r, int64_t o)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in;
    const void *wr = (const char *)w->data + (size_t)o * dt_row_bytes(w->type, n_in);
    switch (w->type) {
    case DT_F32: return dot_f32(wr, t->x + r * n_in, n_in);
    case DT_F16: return dot_f16(wr, t->x + r * n_in, n_in);
    case DT_BF16: return dot_bf16(wr, t->x + r * n_in, n_in);
    default: return dot_q8(wr, t->xq + r * (n_in / 32), n_in / 32);
    }
}

#ifdef HAVE_AVX512
/* 16 weights from element i of a row, as f32; lanes at or past n are zero. */
static inline __attribute__((always_inline)) __m512 load_w16(int type, const void *row, int64_t i,
                                                             __mmask16 m)
{
    switch (type) {
    case DT_F32: return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    case DT_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    default: {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    }
}

/* out[r][c] = x[r] · W[c] for a 4 × 4 tile; w points at the first of 4 rows of rb bytes each. */
static inline __attribute__((always_inline)) void tile44_float(int type, const char *w, size_t rb,
                                                               const float *x, int64_t n,
                                                               float *out, int64_t ldo)
{
    __m512 acc[4][4];
#pragma GCC unroll 16
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 wv[4];
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) wv[c] = load_w16(type, w + c * rb, i, m);
#pragma GCC unroll 16
        for (int r = 0; r < 4; r++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + r * n + i);
#pragma GCC unroll 16
            for (int c = 0; c < 4; c++) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);
}

#endif

#ifdef HAVE_VNNI
/* Q8_0 4 × 4 tile: w at the first of 4 weight rows of nb blocks, x at 4 quantised rows. */
static void tile44_q8(const dt_block_q8_0 *w, int64_t nb, const q8x *x, float *out, int64_t ldo)
{
    __m256 acc[4][4];
#pragma GCC unroll 16
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wa[4], wq[4];
        __m256 dw[4];
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) {
            wq[c] = _mm256_loadu_si256((const void *)w[c * nb + b].q);
            wa[c] = _mm256_abs_epi8(wq[c]);
            dw[c] = _mm256_set1_ps(_cvtsh_ss(w[c * nb + b].d));
        }
#pragma GCC unroll 16
        for (int r = 0; r < 4; r++) {
            __m256i xq = _mm256_loadu_si256((const void *)x[r * nb + b].q);
            __m256 dx = _mm256_set1_ps(x[r * nb + b].d);
#pragma GCC unroll 16
            for (int c = 0; c < 4; c++) {
                __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wa[c],
                                                _mm256_sign_epi8(xq, wq[c]));
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw[c], dx), acc[r][c]);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) out[r * ldo + c] = hsum256(acc[r][c]);
}
#endif

/* Rows [r0, r0+4) × outputs [o0, o0+4) when both are full; returns 0 when no SIMD tile applies. */
static int tile44(const mm_task *t, int64_t r0, int64_t o0)
{
#if defined(HAVE_AVX512) || defined(HAVE_VNNI)
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t rb = dt_row_bytes(w->type, n_in);
    const char *wr = (const char *)w->data + (size_t)o0 * rb;
    float *out = t->out + r0 * n_out + o0;
    switch (w->type) {
#ifdef HAVE_AVX512
    case DT_F32: tile44_float(DT_F32, wr, rb, t->x + r0 * n_in, n_in, out, n_out); return 1;
    case DT_F16: tile44_float(DT_F16, wr, rb, t->x + r0 * n_in, n_in, out, n_out); return 1;
    case DT_BF16: tile44_float(DT_BF16, wr, rb, t->x + r0 * n_in, n_in, out, n_out); return 1;
#endif
#ifdef HAVE_VNNI
    case DT_Q8_0:
        tile44_q8((const dt_block_q8_0 *)wr, n_in / 32, t->xq + r0 * (n_in / 32), out, n_out);
        return 1;
#endif
    default: return 0;
    }
#else
    return 0;
#endif
}

/* All rows × outputs [lo, hi): column blocks, then 4-row groups, then 4 × 4 tiles. */
static void gemm_range(const mm_task *t, int64_t lo, int64_t hi)
{
    int64_t n_out = t->w->n_out;
    for (int64_t cb = lo; cb < hi; cb += COL_BLOCK) {
        int64_t ce = cb + COL_BLOCK < hi ? cb + COL_BLOCK : hi;
        for (int64_t r0 = 0; r0 < t->n_rows; r0 += 4) {
            int64_t re = r0 + 4 < t->n_rows ? r0 + 4 : t->n_rows;
            for (int64_t o0 = cb; o0 < ce; o0 += 4) {
                int64_t oe = o0 + 4 < ce ? o0 + 4 : ce;
                if (re - r0 == 4 && oe - o0 == 4 && tile44(t, r0, o0)) continue;
                for (int64_t r = r0; r < re; r++)
                    for (int64_t o = o0; o < oe; o++) t->out[r * n_out + o] = dot_one(t, r, o);
            }
        }
        if (t->bias)
            for (int64_t r = 0; r < t->n_rows; r++)
                for (int64_t o = cb; o < ce; o++) t->out[r * n_out + o] += t->bias[o];
    }
}

static void gemm_run(void *v, int64_t lo_unit, int64_t hi_unit, int ith)
{
    mm_task *t = v;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < t->w->n_out ? lo + t->unit : t->w->n_out;
        gemm_range(t, lo, hi);
    }
}
