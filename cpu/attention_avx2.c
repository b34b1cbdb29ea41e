/*
 * attention_avx2.c — the AVX2 + FMA + F16C kernels of attention.c: K/V conversions, the chunk
 * step of the online softmax for up to CPU__ATTN_AR query rows, and the single-row f16, int8 and
 * e4m3 decode paths. The same algorithms as attention_avx512.c with 8-float vectors and 16 registers:
 *
 *  - scores: 4 rows × 16 keys per pass (8 accumulators): per dimension two K vectors are loaded
 *    from the transposed chunk and each row's broadcast q[d] feeds two FMAs;
 *  - P·V: 4 rows × 16 dimensions per pass: per key two V vectors serve every row;
 *  - the softmax step over each row's scores with the polynomial e^x of simd_x86.h.
 * Tails (keys or dimensions not a multiple of 8) use masked loads and stores (vmaskmovps), so
 * nothing outside a buffer's valid part is read or written; conversions finish tails in scalar
 * code.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "model/dtype.h"

#define KCH CPU__ATTN_KCH
#define AR CPU__ATTN_AR

#define mask8 cpu__mask8

/* ---- conversions --------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) __m256 load8(int dtype, const void *p)
{
    if (dtype == KV_F32) return _mm256_loadu_ps(p);
    __m128i h = _mm_loadu_si128(p);
    if (dtype == KV_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void rows_to_f32(int dtype, const void *src, size_t src_stride,
                                                              float *dst, size_t dst_stride, int rows, int n)
{
    size_t eb = kv_dtype_bytes(dtype);
    for (int r = 0; r < rows; r++) {
        const char *s = (const char *)src + (size_t)r * src_stride * eb;
        float *d = dst + (size_t)r * dst_stride;
        int i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, load8(dtype, s + (size_t)i * eb));
        for (; i < n; i++)
            d[i] = dtype == KV_F32   ? ((const float *)s)[i]
                   : dtype == KV_F16 ? dt_f16_to_f32(((const uint16_t *)s)[i])
                                     : dt_bf16_to_f32(((const uint16_t *)s)[i]);
    }
}

static void kv_to_f32(int dtype, const void *src, size_t src_stride, float *dst, size_t dst_stride, int rows, int n)
{
    switch (dtype) {
    case KV_F16: rows_to_f32(KV_F16, src, src_stride, dst, dst_stride, rows, n); break;
    case KV_BF16: rows_to_f32(KV_BF16, src, src_stride, dst, dst_stride, rows, n); break;
    default: rows_to_f32(KV_F32, src, src_stride, dst, dst_stride, rows, n); break;
    }
}

static void f32_to_kv(int dtype, const float *src, void *dst, int64_t n)
{
    int64_t i = 0;
    if (dtype == KV_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    uint16_t *d = dst;
    if (dtype == KV_F16)
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((void *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = dtype == KV_F16 ? dt_f32_to_f16(src[i]) : dt_f32_to_bf16(src[i]);
}

/* ---- the softmax step ---------------------------------------------------------------------- */

/* max(m, sc[0 .. nv)). */
static float max_of(const float *sc, int nv, float m)
{
    __m256 v = _mm256_set1_ps(m);
    int j = 0;
    for (; j + 8 <= nv; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(sc + j));
    float r = cpu__hmax256(v);
    for (; j < nv; j++) r = sc[j] > r ? sc[j] : r;
    return r;
}

/* sc[j] = exp(sc[j] - m) for j < nv; returns their sum. */
static float exp_shift(float *sc, int nv, float m)
{
    __m256 sum = _mm256_setzero_ps(), vm = _mm256_set1_ps(m);
    for (int j = 0; j < nv; j += 8) {
        __m256i k = mask8(nv - j);
        __m256 e = cpu__exp256(_mm256_sub_ps(_mm256_maskload_ps(sc + j, k), vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(k));
        _mm256_maskstore_ps(sc + j, k, e);
        sum = _mm256_add_ps(sum, e);
    }
    return cpu__hsum256(sum);
}

/* One online-softmax step of a query row over the scores sc[0 .. nv) of a chunk, of which only
 * sc[s .. nv) are keys the row sees: soft-caps those (cap > 0), folds them into the running
 * max *m and sum *l, leaves their probabilities in sc[s .. nv) and 0 in sc[0 .. s). Returns the
 * factor that rescales the row's accumulator. */
static float softmax_step(float *sc, int s, int nv, float cap, float *m, float *l)
{
    if (s > nv) s = nv;
    for (int j = 0; j < s; j++) sc[j] = 0.0f;
    if (s == nv) return 1.0f;
    if (cap > 0.0f)
        for (int j = s; j < nv; j++) sc[j] = be_softcap(sc[j], cap);
    float mn = max_of(sc + s, nv - s, *m);
    float corr = mn == *m ? 1.0f : expf(*m - mn);
    *l = *l * corr + exp_shift(sc + s, nv - s, mn);
    *m = mn;
    return corr;
}

/* ---- the chunk step -------------------------------------------------------------------------- */

/* Two vectors from p: plain loads when both are whole (full), else masked by m0, m1. */
static inline __attribute__((always_inline)) void load2(int full, const float *p, __m256i m0, __m256i m1,
                                                        __m256 *v0, __m256 *v1)
{
    *v0 = full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m0);
    *v1 = full ? _mm256_loadu_ps(p + 8) : _mm256_maskload_ps(p + 8, m1);
}

/* Scores of 16 keys from jc (see scores_rows). */
static inline __attribute__((always_inline)) void scores16(int ar, int full, const float *const *qa,
                                                           const float *kt, int hd, int jc, int nv, float scale,
                                                           float *S)
{
    __m256i m0 = mask8(nv - jc), m1 = mask8(nv - jc - 8);
    __m256 acc[AR][2];
#pragma GCC unroll 4
    for (int a = 0; a < ar; a++) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 k0, k1;
        load2(full, kt + (size_t)d * KCH + jc, m0, m1, &k0, &k1);
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++) {
            __m256 qv = _mm256_broadcast_ss(qa[a] + d);
            acc[a][0] = _mm256_fmadd_ps(qv, k0, acc[a][0]);
            acc[a][1] = _mm256_fmadd_ps(qv, k1, acc[a][1]);
        }
    }
    __m256 vs = _mm256_set1_ps(scale);
#pragma GCC unroll 4
    for (int a = 0; a < ar; a++) {
        _mm256_storeu_ps(S + a * KCH + jc, _mm256_mul_ps(acc[a][0], vs));
        _mm256_storeu_ps(S + a * KCH + jc + 8, _mm256_mul_ps(acc[a][1], vs));
    }
}

/* S[a][j] = scale · q_a · K[j] for rows a < ar and keys j < nv of the transposed chunk kt
 * [hd][KCH], 16 keys per pass (S has room for KCH per row, so whole vectors are stored). */
static inline __attribute__((always_inline)) void scores_rows(int ar, const float *const *qa, const float *kt,
                                                              int hd, int nv, float scale, float *S)
{
    for (int jc = 0; jc < nv; jc += 16) {
        if (nv - jc >= 16) scores16(ar, 1, qa, kt, hd, jc, nv, scale, S);
        else scores16(ar, 0, qa, kt, hd, jc, nv, scale, S);
    }
}

/* P·V of 16 dimensions from dc (see pv_rows). */
static inline __attribute__((always_inline)) void pv16(int ar, int full, float *acc, const float *corr,
                                                       const float *S, const float *vt, int nv, int hd, int dc)
{
    __m256i m0 = mask8(hd - dc), m1 = mask8(hd - dc - 8);
    __m256 x[AR][2];
#pragma GCC unroll 4
    for (int a = 0; a < ar; a++) {
        __m256 c = _mm256_set1_ps(corr[a]);
        load2(full, acc + (size_t)a * hd + dc, m0, m1, &x[a][0], &x[a][1]);
        x[a][0] = _mm256_mul_ps(x[a][0], c);
        x[a][1] = _mm256_mul_ps(x[a][1], c);
    }
    for (int j = 0; j < nv; j++) {
        __m256 v0, v1;
        load2(full, vt + (size_t)j * hd + dc, m0, m1, &v0, &v1);
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++) {
            __m256 p = _mm256_broadcast_ss(S + a * KCH + j);
            x[a][0] = _mm256_fmadd_ps(p, v0, x[a][0]);
            x[a][1] = _mm256_fmadd_ps(p, v1, x[a][1]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < ar; a++) {
        _mm256_maskstore_ps(acc + (size_t)a * hd + dc, m0, x[a][0]);
        _mm256_maskstore_ps(acc + (size_t)a * hd + dc + 8, m1, x[a][1]);
    }
}

/* acc[a] = acc[a] · corr[a] + Σ_j S[a][j] · V[j] for rows a < ar (accumulators hd apart) and
 * keys j < nv of the f32 chunk vt [nv][hd], 16 dimensions per pass. */
static inline __attribute__((always_inline)) void pv_rows(int ar, float *acc, const float *corr, const float *S,
                                                          const float *vt, int nv, int hd)
{
    for (int dc = 0; dc < hd; dc += 16) {
        if (hd - dc >= 16) pv16(ar, 1, acc, corr, S, vt, nv, hd, dc);
        else pv16(ar, 0, acc, corr, S, vt, nv, hd, dc);
    }
}

static void rows_any(int ar, const float *const *qa, const float *kt, const float *vt, int hd, int nv,
                     float scale, float *S, float *acc, const float *corr, int pass)
{
    switch (ar) {
    case 4: pass ? pv_rows(4, acc, corr, S, vt, nv, hd) : scores_rows(4, qa, kt, hd, nv, scale, S); break;
    case 3: pass ? pv_rows(3, acc, corr, S, vt, nv, hd) : scores_rows(3, qa, kt, hd, nv, scale, S); break;
    case 2: pass ? pv_rows(2, acc, corr, S, vt, nv, hd) : scores_rows(2, qa, kt, hd, nv, scale, S); break;
    default: pass ? pv_rows(1, acc, corr, S, vt, nv, hd) : scores_rows(1, qa, kt, hd, nv, scale, S); break;
    }
}

static void attn_chunk(int ar, const float *const *qa, const int *lo, const int *nv, int nmax, const float *kt,
                       const float *vt, int hd, float scale, float cap, float *S, float *mx, float *l, float *acc)
{
    float corr[AR] = {1.0f, 1.0f, 1.0f, 1.0f};
    if (nmax == 0) return;
    rows_any(ar, qa, kt, vt, hd, nmax, scale, S, acc, corr, 0);
    for (int a = 0; a < ar; a++) {
        float *sa = S + a * KCH;
        corr[a] = softmax_step(sa, lo[a], nv[a], cap, &mx[a], &l[a]);
        for (int j = nv[a] > 0 ? nv[a] : 0; j < nmax; j++) sa[j] = 0.0f; /* past the row's causal limit */
    }
    rows_any(ar, qa, kt, vt, hd, nmax, scale, S, acc, corr, 1);
}

/* ---- the single-row decode path ---------------------------------------------------------------- */

/* Keys per softmax step of the decode path (a multiple of the block size): see
 * attention_avx512.c. */
#define DCH 256

static int direct_chunk(int bs)
{
    return bs >= DCH ? bs : DCH / bs * bs;
}

/* sc[0 .. nv) = scale · q · K[j] for the keys of one transposed f16 tile kt [hd][bs] (bs a
 * multiple of 16; keys past nv are computed from the tile's stale slots and not stored). Per 16
 * keys, two dimensions at a time: four FMA chains. */
static inline __attribute__((always_inline)) void scores_f16(const float *q, const uint16_t *kt, int bs, int hd,
                                                             int nv, float scale, float *sc, const char *pk,
                                                             const char *pv, int lines)
{
    int it = 0;
    for (int jc = 0; jc < nv; jc += 16) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int d = 0;
        for (; d + 2 <= hd; d += 2, it++) {
            if (it < lines) {
                if (pk) _mm_prefetch(pk + (size_t)it * 64, _MM_HINT_T0);
                _mm_prefetch(pv + (size_t)it * 64, _MM_HINT_T1);
            }
            const uint16_t *k = kt + (size_t)d * bs + jc;
            __m256 q0 = _mm256_broadcast_ss(q + d), q1 = _mm256_broadcast_ss(q + d + 1);
            a0 = _mm256_fmadd_ps(q0, _mm256_cvtph_ps(_mm_loadu_si128((const void *)k)), a0);
            a1 = _mm256_fmadd_ps(q0, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(k + 8))), a1);
            a2 = _mm256_fmadd_ps(q1, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(k + bs))), a2);
            a3 = _mm256_fmadd_ps(q1, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(k + bs + 8))), a3);
        }
        if (d < hd) {
            const uint16_t *k = kt + (size_t)d * bs + jc;
            __m256 q0 = _mm256_broadcast_ss(q + d);
            a0 = _mm256_fmadd_ps(q0, _mm256_cvtph_ps(_mm_loadu_si128((const void *)k)), a0);
            a1 = _mm256_fmadd_ps(q0, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(k + 8))), a1);
        }
        __m256 vs = _mm256_set1_ps(scale);
        __m256 s0 = _mm256_mul_ps(_mm256_add_ps(a0, a2), vs), s1 = _mm256_mul_ps(_mm256_add_ps(a1, a3), vs);
        _mm256_maskstore_ps(sc + jc, mask8(nv - jc), s0);
        _mm256_maskstore_ps(sc + jc + 8, mask8(nv - jc - 8), s1);
    }
}

/* 8 int8 codes from p as f32. */
static inline __m256 load8_i8(const int8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const void *)p)));
}

/* 8 e4m3 codes from p as f32, exactly kv_e4m3_decode: a code's low 7 bits shifted up by 7 are
 * an f16 with exponent field e and mantissa m, worth 2^(e-15)(1 + m/8), or m · 2^-17 (an f16
 * subnormal) when e = 0: in both cases the code's value times 2^-8, so F16C and one exact
 * multiply by 256 give it. The sign moves to bit 15 and the NaN codes (S.1111.111) become an
 * f16 NaN. */
static inline __m256 load8_e4m3(const uint8_t *p)
{
    __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const void *)p));
    __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
    __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
    h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7e00)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

/* 8 codes of a quantised arena (q: KV_I8 or KV_FP8) as f32. */
static inline __attribute__((always_inline)) __m256 load8_q(const uint8_t *p, int q)
{
    return q == KV_FP8 ? load8_e4m3(p) : load8_i8((const int8_t *)p);
}

/* sc[0 .. nv) = scale · ks[j] · Σ_d q[d] · K[d][j] for one transposed tile kt [hd][bs] of
 * int8 or e4m3 codes (qt: KV_I8, KV_FP8; bs a multiple of 16) and its keys' f16 scales ks[bs].
 * pk, pv and lines as for scores_f16 (what is left after the last step goes in one burst). */
static inline __attribute__((always_inline)) void scores_q(const float *q, const uint8_t *kt, const uint16_t *ks,
                                                           int bs, int hd, int nv, float scale, float *sc, int qt,
                                                           const char *pk, const char *pv, int lines)
{
    int it = 0;
    for (int jc = 0; jc < nv; jc += 16) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int d = 0;
        for (; d + 2 <= hd; d += 2, it++) {
            if (it < lines) {
                if (pk) _mm_prefetch(pk + (size_t)it * 64, _MM_HINT_T0);
                _mm_prefetch(pv + (size_t)it * 64, _MM_HINT_T1);
            }
            const uint8_t *k = kt + (size_t)d * bs + jc;
            __m256 q0 = _mm256_broadcast_ss(q + d), q1 = _mm256_broadcast_ss(q + d + 1);
            a0 = _mm256_fmadd_ps(q0, load8_q(k, qt), a0);
            a1 = _mm256_fmadd_ps(q0, load8_q(k + 8, qt), a1);
            a2 = _mm256_fmadd_ps(q1, load8_q(k + bs, qt), a2);
            a3 = _mm256_fmadd_ps(q1, load8_q(k + bs + 8, qt), a3);
        }
        if (d < hd) {
            const uint8_t *k = kt + (size_t)d * bs + jc;
            __m256 q0 = _mm256_broadcast_ss(q + d);
            a0 = _mm256_fmadd_ps(q0, load8_q(k, qt), a0);
            a1 = _mm256_fmadd_ps(q0, load8_q(k + 8, qt), a1);
        }
        __m256 vs = _mm256_set1_ps(scale);
        __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(ks + jc)));
        __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(ks + jc + 8)));
        __m256 s0 = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(a0, a2), k0), vs);
        __m256 s1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(a1, a3), k1), vs);
        _mm256_maskstore_ps(sc + jc, mask8(nv - jc), s0);
        _mm256_maskstore_ps(sc + jc + 8, mask8(nv - jc - 8), s1);
    }
    for (; it < lines; it++) {
        if (pk) _mm_prefetch(pk + (size_t)it * 64, _MM_HINT_T0);
        _mm_prefetch(pv + (size_t)it * 64, _MM_HINT_T1);
    }
}

/* 8 values of a V row from p as f32: f16 values (dt KV_F16), or int8 or e4m3 codes (KV_I8,
 * KV_FP8) as they are; n < 8 reads only the first n (the rest are 0). */
static inline __attribute__((always_inline)) __m256 load8_v(const uint8_t *p, int n, int dt)
{
    uint8_t tmp[16] = {0};
    if (n < 8) {
        memcpy(tmp, p, (size_t)n * (dt != KV_F16 ? 1 : 2));
        p = tmp;
    }
    return dt != KV_F16 ? load8_q(p, dt) : _mm256_cvtph_ps(_mm_loadu_si128((const void *)p));
}

/* acc[0 .. hd) = acc · corr + Σ_j p[j] · V[j] over the rows of the chunk's blocks: f16 rows, or
 * rows of codes (dt KV_I8, KV_FP8; each p[j] then already times its row's scale). */
static inline __attribute__((always_inline)) void pv_decode(const cpu__attn_row *a, int j0, int nch, const float *p,
                                                            float corr, float *acc, int dt)
{
    int hd = a->head_dim, bs = a->block_size, qz = dt != KV_F16;
    size_t es = qz ? 1 : 2, tile = (size_t)bs * hd, tb = qz ? tile + KV_SCALE_BYTES * (size_t)bs : tile * 2;
    const uint8_t *vb = a->v;
    int dc = 0;
    /* 32 dimensions at a time: four FMA chains, kept in registers (the partial pass below has
     * its own loop so that nothing here indexes them by a run-time count) */
    for (; dc + 32 <= hd; dc += 32) {
        __m256 vc = _mm256_set1_ps(corr);
        __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(acc + dc), vc), x1 = _mm256_mul_ps(_mm256_loadu_ps(acc + dc + 8), vc);
        __m256 x2 = _mm256_mul_ps(_mm256_loadu_ps(acc + dc + 16), vc), x3 = _mm256_mul_ps(_mm256_loadu_ps(acc + dc + 24), vc);
        for (int jb = 0; jb < nch; jb += bs) {
            const uint8_t *vt = vb + ((size_t)a->bt[(j0 + jb) / bs] * a->n_kv_heads + a->kvh) * tb + dc * es;
            int nv = nch - jb < bs ? nch - jb : bs;
            for (int j = 0; j < nv; j++) {
                __m256 pj = _mm256_broadcast_ss(p + jb + j);
                const uint8_t *v = vt + (size_t)j * hd * es;
                x0 = _mm256_fmadd_ps(pj, load8_v(v, 8, dt), x0);
                x1 = _mm256_fmadd_ps(pj, load8_v(v + 8 * es, 8, dt), x1);
                x2 = _mm256_fmadd_ps(pj, load8_v(v + 16 * es, 8, dt), x2);
                x3 = _mm256_fmadd_ps(pj, load8_v(v + 24 * es, 8, dt), x3);
            }
        }
        _mm256_storeu_ps(acc + dc, x0);
        _mm256_storeu_ps(acc + dc + 8, x1);
        _mm256_storeu_ps(acc + dc + 16, x2);
        _mm256_storeu_ps(acc + dc + 24, x3);
    }
    for (; dc < hd; dc += 8) { /* the last dimensions: one vector at a time, the final one partial */
        int n = hd - dc < 8 ? hd - dc : 8;
        __m256i mk = mask8(n);
        __m256 x = _mm256_mul_ps(_mm256_maskload_ps(acc + dc, mk), _mm256_set1_ps(corr));
        for (int jb = 0; jb < nch; jb += bs) {
            const uint8_t *vt = vb + ((size_t)a->bt[(j0 + jb) / bs] * a->n_kv_heads + a->kvh) * tb + dc * es;
            int nv = nch - jb < bs ? nch - jb : bs;
            for (int j = 0; j < nv; j++)
                x = _mm256_fmadd_ps(_mm256_broadcast_ss(p + jb + j), load8_v(vt + (size_t)j * hd * es, n, dt), x);
        }
        _mm256_maskstore_ps(acc + dc, mk, x);
    }
}

/* Decode path for a single query row over an arena of dt KV_F16, or of int8 or e4m3 codes
 * (KV_I8, KV_FP8; 16-aligned blocks): every K/V element is used exactly once, so it is
 * converted inside the FMAs instead of through f32 buffers; K codes are scaled by their key's
 * scale after the dot product, each probability by its V row's scale before P·V. */
static inline __attribute__((always_inline)) void attn_decode_vec(const cpu__attn_row *a, int dt)
{
    int hd = a->head_dim, bs = a->block_size, n_ctx = a->n_ctx, ch = direct_chunk(bs), h = a->kvh, qz = dt != KV_F16;
    int lo = a->lo, start = lo / bs * bs; /* whole blocks from the window's first */
    size_t tile = (size_t)bs * hd, tb = qz ? tile + KV_SCALE_BYTES * (size_t)bs : tile * 2;
    const uint8_t *kb = a->k, *vb = a->v;
    float *sc = a->scr, *acc = sc + ch, mx = -FLT_MAX, l = 0;
    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int j0 = start; j0 < n_ctx; j0 += ch) {
        int nch = n_ctx - j0 < ch ? n_ctx - j0 : ch;
        for (int jb = 0; jb < nch; jb += bs) {
            size_t at = ((size_t)a->bt[(j0 + jb) / bs] * a->n_kv_heads + h) * tb;
            /* the next K tile is elsewhere, and this V tile is needed after the chunk's scores:
             * ask for both now, a line of each per step of the scores, so the requests trickle
             * out instead of stalling the core on full line-fill buffers */
            const char *nk = j0 + jb + bs < n_ctx
                                 ? (const char *)kb + ((size_t)a->bt[(j0 + jb) / bs + 1] * a->n_kv_heads + h) * tb
                                 : NULL;
            int nv = nch - jb < bs ? nch - jb : bs;
            if (qz)
                scores_q(a->q, kb + at, (const uint16_t *)(kb + at + tile), bs, hd, nv, a->scale, sc + jb, dt, nk,
                         (const char *)(vb + at), (int)((tb + 63) / 64));
            else
                scores_f16(a->q, (const uint16_t *)(kb + at), bs, hd, nv, a->scale, sc + jb, nk,
                           (const char *)(vb + at), (int)(tb / 64));
        }
        float corr = softmax_step(sc, lo - j0 > 0 ? lo - j0 : 0, nch, a->softcap, &mx, &l);
        for (int jb = 0; qz && jb < nch; jb += bs) { /* fold each V row's scale into its probability */
            const uint16_t *vs = (const uint16_t *)(vb + ((size_t)a->bt[(j0 + jb) / bs] * a->n_kv_heads + h) * tb + tile);
            int nv = nch - jb < bs ? nch - jb : bs;
            for (int j = 0; j < nv; j++) sc[jb + j] *= dt_f16_to_f32(vs[j]);
        }
        pv_decode(a, j0, nch, sc, corr, acc, dt);
    }
    float inv = 1.0f / l;
    for (int d = 0; d < hd; d++) a->out[d] = acc[d] * inv;
}

/* The decode fast paths of f16, int8 and e4m3 arenas. */
static void attn_decode_f16(const cpu__attn_row *a)
{
    attn_decode_vec(a, KV_F16);
}

static void attn_decode_i8(const cpu__attn_row *a)
{
    attn_decode_vec(a, KV_I8);
}

static void attn_decode_fp8(const cpu__attn_row *a)
{
    attn_decode_vec(a, KV_FP8);
}

/* int8 or e4m3 codes times their vector's scale (kvq_to_f32 of cpu__kern), 8 at a time. */
static void kvq_to_f32(int dtype, const uint8_t *src, size_t src_stride, const uint8_t *scales, int per_col,
                       float *dst, size_t dst_stride, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const uint8_t *s = src + (size_t)r * src_stride;
        float *d = dst + (size_t)r * dst_stride;
        float rs = per_col ? 0.0f : dt_f16_to_f32((uint16_t)(scales[KV_SCALE_BYTES * r] | (scales[KV_SCALE_BYTES * r + 1] << 8)));
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 c = load8_q(s + i, dtype);
            __m256 sc = per_col ? _mm256_cvtph_ps(_mm_loadu_si128((const void *)(scales + KV_SCALE_BYTES * i)))
                                : _mm256_set1_ps(rs);
            _mm256_storeu_ps(d + i, _mm256_mul_ps(c, sc));
        }
        for (; i < n; i++) {
            const uint8_t *sp = scales + KV_SCALE_BYTES * i;
            float si = per_col ? dt_f16_to_f32((uint16_t)(sp[0] | (sp[1] << 8))) : rs;
            d[i] = (dtype == KV_I8 ? (float)(int8_t)s[i] : kv_e4m3_decode(s[i])) * si;
        }
    }
}

void cpu__attention_fill_avx2(cpu__kern *k)
{
    k->kv_to_f32 = kv_to_f32;
    k->f32_to_kv = f32_to_kv;
    k->attn_chunk = attn_chunk;
    k->attn_isa = CPU_ISA_AVX2;
    k->attn_decode[KV_F16] = attn_decode_f16;
    k->attn_decode[KV_I8] = attn_decode_i8;
    k->attn_decode[KV_FP8] = attn_decode_fp8;
    k->kvq_to_f32 = kvq_to_f32;
}
