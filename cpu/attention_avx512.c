/*
 * attention_avx512.c — the AVX-512 kernels of attention.c: K/V conversions, the chunk step of
 * the online softmax for up to CPU__ATTN_AR query rows, and the single-row f16, int8 and e4m3
 * decode paths.
 *
 * The chunk step forms the scores of all its rows first (each K vector loaded per dimension
 * serves every row: KCH / 16 vectors × AR rows of FMAs), then the per-row softmax update, then
 * P·V with each V vector loaded once for every row, 64 dimensions at a time (four FMA chains).
 * The decode path converts K/V inside the FMAs instead of through f32 buffers, since a single
 * query row uses every element once.
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
#define mask16 cpu__mask16

/* ---- conversions --------------------------------------------------------------------------- */

/* 16 elements of KV dtype from p as f32; lanes outside m are zero. */
static inline __attribute__((always_inline)) __m512 load16(int dtype, const void *p, __mmask16 m)
{
    if (dtype == KV_F32) return _mm512_maskz_loadu_ps(m, p);
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (dtype == KV_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void rows_to_f32(int dtype, const void *src, size_t src_stride,
                                                              float *dst, size_t dst_stride, int rows, int n)
{
    size_t eb = kv_dtype_bytes(dtype);
    for (int r = 0; r < rows; r++) {
        const char *s = (const char *)src + (size_t)r * src_stride * eb;
        float *d = dst + (size_t)r * dst_stride;
        int i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, load16(dtype, s + (size_t)i * eb, 0xffff));
        if (i < n) _mm512_mask_storeu_ps(d + i, mask16(n - i), load16(dtype, s + (size_t)i * eb, mask16(n - i)));
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
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((void *)(d + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = dtype == KV_F16 ? dt_f32_to_f16(src[i]) : dt_f32_to_bf16(src[i]);
}

/* ---- the chunk step -------------------------------------------------------------------------- */

/* max(m, sc[0 .. nv)). */
static float max_of(const float *sc, int nv, float m)
{
    __m512 v = _mm512_set1_ps(m);
    for (int jc = 0; jc < nv; jc += 16)
        v = _mm512_mask_max_ps(v, mask16(nv - jc), v, _mm512_maskz_loadu_ps(mask16(nv - jc), sc + jc));
    return _mm512_reduce_max_ps(v);
}

/* sc[j] = exp(sc[j] - m) for j < nv; returns their sum. */
static float exp_shift(float *sc, int nv, float m)
{
    __m512 sum = _mm512_setzero_ps(), vm = _mm512_set1_ps(m);
    for (int jc = 0; jc < nv; jc += 16) {
        __mmask16 k = mask16(nv - jc);
        __m512 e = _mm512_maskz_mov_ps(k, cpu__exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + jc), vm)));
        _mm512_mask_storeu_ps(sc + jc, k, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

/* One online-softmax step of a query row over the scores sc[0 .. nv) of a chunk, of which only
 * sc[s .. nv) are keys the row sees (the others are below its window): soft-caps those
 * (cap > 0), folds them into the row's running max *m and sum *l, and leaves their probabilities
 * in sc[s .. nv) and 0 in sc[0 .. s). Returns the factor that rescales the row's accumulator. */
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

/* S[a][j] = scale · q_a · K[j] for rows a < ar and keys j < nv ≤ KCH of the transposed f32
 * tile kt [hd][KCH]: the KCH / 16 K vectors loaded per dimension serve every row. */
static inline __attribute__((always_inline)) void scores_rows(int ar, const float *const *qa,
                                                              const float *kt, int hd, int nv,
                                                              float scale, float *S)
{
    enum { NK = KCH / 16 };
    __mmask16 m[NK];
    __m512 acc[AR][NK];
#pragma GCC unroll 4
    for (int u = 0; u < NK; u++) m[u] = nv > 16 * u ? mask16(nv - 16 * u) : 0;
#pragma GCC unroll 4
    for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
        for (int u = 0; u < NK; u++) acc[a][u] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 k[NK];
#pragma GCC unroll 4
        for (int u = 0; u < NK; u++) k[u] = _mm512_maskz_loadu_ps(m[u], kt + (size_t)d * KCH + 16 * u);
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++) {
            __m512 qv = _mm512_set1_ps(qa[a][d]);
#pragma GCC unroll 4
            for (int u = 0; u < NK; u++) acc[a][u] = _mm512_fmadd_ps(qv, k[u], acc[a][u]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
        for (int u = 0; u < NK; u++)
            _mm512_storeu_ps(S + a * KCH + 16 * u, _mm512_mul_ps(acc[a][u], _mm512_set1_ps(scale)));
}

/* acc[a] = acc[a] · corr[a] + Σ_j S[a][j] · V[j] for rows a < ar (accumulators hd apart) and
 * keys j < nv of the f32 tile vt [nv][hd]: each V vector loaded serves every row. */
static inline __attribute__((always_inline)) void pv_rows(int ar, float *acc, const float *corr,
                                                          const float *S, const float *vt, int nv,
                                                          int hd)
{
    for (int dc = 0; dc < hd; dc += 64) {
        __mmask16 mk[4];
        __m512 x[AR][4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) mk[u] = hd - dc > 16 * u ? mask16(hd - dc - 16 * u) : 0;
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                x[a][u] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[u], acc + (size_t)a * hd + dc + 16 * u),
                                        _mm512_set1_ps(corr[a]));
        for (int j = 0; j < nv; j++) {
            __m512 v[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) v[u] = _mm512_maskz_loadu_ps(mk[u], vt + (size_t)j * hd + dc + 16 * u);
#pragma GCC unroll 4
            for (int a = 0; a < ar; a++) {
                __m512 pj = _mm512_set1_ps(S[a * KCH + j]);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) x[a][u] = _mm512_fmadd_ps(pj, v[u], x[a][u]);
            }
        }
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) _mm512_mask_storeu_ps(acc + (size_t)a * hd + dc + 16 * u, mk[u], x[a][u]);
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

/* Keys per softmax step of the decode fast path (a multiple of the block size): the scores of
 * all of them are formed before one max, one exp pass and one P·V sweep, so the reductions and
 * the rescaling of the accumulator are paid once per DCH keys rather than once per block. */
#define DCH 256

static int direct_chunk(int bs)
{
    return bs >= DCH ? bs : DCH / bs * bs;
}

/* sc[0 .. nv) = scale · q · K[j] for the keys of one transposed f16 tile kt [hd][bs]. Four FMA
 * chains: with one query row the FMA latency, not throughput, is the limit. */
static inline __attribute__((always_inline)) void scores_f16(const float *q, const uint16_t *kt, int bs, int hd,
                                                             int nv, float scale, float *sc, const char *pk,
                                                             const char *pv, int lines)
{
    int it = 0; /* two lines of each tile to prefetch per step (see attn_decode_vec) */
    for (int jc = 0; jc < nv; jc += 16) {
        __mmask16 m = mask16(nv - jc);
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        int d = 0;
        for (; d + 4 <= hd; d += 4, it += 2) {
            for (int l = it; l < it + 2 && l < lines; l++) {
                if (pk) _mm_prefetch(pk + (size_t)l * 64, _MM_HINT_T0);
                _mm_prefetch(pv + (size_t)l * 64, _MM_HINT_T1);
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                a[u] = _mm512_fmadd_ps(_mm512_set1_ps(q[d + u]),
                                       _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, kt + (size_t)(d + u) * bs + jc)), a[u]);
        }
        for (; d < hd; d++)
            a[0] = _mm512_fmadd_ps(_mm512_set1_ps(q[d]),
                                   _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, kt + (size_t)d * bs + jc)), a[0]);
        __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
        _mm512_mask_storeu_ps(sc + jc, m, _mm512_mul_ps(sum, _mm512_set1_ps(scale)));
    }
}

/* 16 e4m3 codes (mask m) from p as f32, exactly kv_e4m3_decode: the F16C route of
 * attention_avx2.c's load8_e4m3 (the low 7 bits shifted up by 7 are an f16 worth the code's
 * value times 2^-8; the NaN codes become an f16 NaN). */
static inline __m512 load16_e4m3(const uint8_t *p, __mmask16 m)
{
    __m256i b = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, p));
    __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
    h = _mm256_or_si256(h, _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7e00)));
    return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
}

/* 16 codes (mask m) of a quantised arena (qt: KV_I8 or KV_FP8) as f32. */
static inline __attribute__((always_inline)) __m512 load16_q(const uint8_t *p, __mmask16 m, int qt)
{
    return qt == KV_FP8 ? load16_e4m3(p, m) : _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

/* sc[0 .. nv) = scale · ks[j] · Σ_d q[d] · K[d][j] for the keys of one transposed tile kt
 * [hd][bs] of int8 or e4m3 codes (qt) whose f16 scales ks[bs] follow the codes; pk, pv and lines
 * as for scores_f16 (what is left after the last step goes in one burst). */
static inline __attribute__((always_inline)) void scores_q(const float *q, const uint8_t *kt, const uint16_t *ks,
                                                           int bs, int hd, int nv, float scale, float *sc, int qt,
                                                           const char *pk, const char *pv, int lines)
{
    int it = 0;
    for (int jc = 0; jc < nv; jc += 16) {
        __mmask16 m = mask16(nv - jc);
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        int d = 0;
        for (; d + 4 <= hd; d += 4, it += 2) {
            for (int l = it; l < it + 2 && l < lines; l++) {
                if (pk) _mm_prefetch(pk + (size_t)l * 64, _MM_HINT_T0);
                _mm_prefetch(pv + (size_t)l * 64, _MM_HINT_T1);
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                a[u] = _mm512_fmadd_ps(_mm512_set1_ps(q[d + u]), load16_q(kt + (size_t)(d + u) * bs + jc, m, qt), a[u]);
        }
        for (; d < hd; d++)
            a[0] = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), load16_q(kt + (size_t)d * bs + jc, m, qt), a[0]);
        __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
        __m512 sk = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, ks + jc));
        _mm512_mask_storeu_ps(sc + jc, m, _mm512_mul_ps(_mm512_mul_ps(sum, sk), _mm512_set1_ps(scale)));
    }
    for (; it < lines; it++) {
        if (pk) _mm_prefetch(pk + (size_t)it * 64, _MM_HINT_T0);
        _mm_prefetch(pv + (size_t)it * 64, _MM_HINT_T1);
    }
}

/* 16 values (mask m) of a V row from p: f16 values (dt KV_F16), or int8 or e4m3 codes (KV_I8,
 * KV_FP8) as they are. */
static inline __attribute__((always_inline)) __m512 load16_v(const uint8_t *p, __mmask16 m, int dt)
{
    return dt != KV_F16 ? load16_q(p, m, dt) : _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* Decode fast path for a single query row (one token, no grouping) over an arena of dt KV_F16,
 * or of int8 or e4m3 codes (KV_I8, KV_FP8): every K/V element is used exactly once, so it is
 * converted inside the FMAs instead of through the f32 buffers. K codes are scaled by their key's
 * scale after the dot product and each probability by its V row's scale before P·V, so codes are
 * never expanded. */
static inline __attribute__((always_inline)) void attn_decode_vec(const cpu__attn_row *a, int dt)
{
    int qz = dt != KV_F16; /* a quantised arena: codes and scales */
    int hd = a->head_dim, bs = a->block_size, n_ctx = a->n_ctx, ch = direct_chunk(bs), h = a->kvh;
    int lo = a->lo, start = lo / bs * bs; /* whole blocks from the window's first */
    const int32_t *bt = a->bt;
    size_t es = qz ? 1 : 2, tile = (size_t)bs * hd, tb = qz ? tile + KV_SCALE_BYTES * (size_t)bs : tile * 2;
    const uint8_t *kb = a->k, *vb = a->v;
    const float *q = a->q;
    float *sc = a->scr, *acc = sc + ch, mx = -FLT_MAX, l = 0, scale = a->scale;
    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int j0 = start; j0 < n_ctx; j0 += ch) {
        int nch = n_ctx - j0 < ch ? n_ctx - j0 : ch;
        for (int jb = 0; jb < nch; jb += bs) {
            size_t at = ((size_t)bt[(j0 + jb) / bs] * a->n_kv_heads + h) * tb;
            /* the next K tile is elsewhere, and this V tile is needed after the chunk's scores:
             * ask for both now (f16: two lines of each per step of the scores, so the requests
             * trickle out instead of stalling the core on full line-fill buffers) */
            const char *nk = j0 + jb + bs < n_ctx
                                 ? (const char *)kb + ((size_t)bt[(j0 + jb) / bs + 1] * a->n_kv_heads + h) * tb
                                 : NULL;
            int nv = nch - jb < bs ? nch - jb : bs;
            if (qz) {
                scores_q(q, kb + at, (const uint16_t *)(kb + at + tile), bs, hd, nv, scale, sc + jb, dt, nk,
                         (const char *)(vb + at), (int)((tb + 63) / 64));
            } else {
                scores_f16(q, (const uint16_t *)(kb + at), bs, hd, nv, scale, sc + jb, nk, (const char *)(vb + at),
                           (int)(tb / 64));
            }
        }
        float corr = softmax_step(sc, lo - j0 > 0 ? lo - j0 : 0, nch, a->softcap, &mx, &l);
        for (int jb = 0; qz && jb < nch; jb += bs) { /* fold each V row's scale into its probability */
            const uint16_t *vs = (const uint16_t *)(vb + ((size_t)bt[(j0 + jb) / bs] * a->n_kv_heads + h) * tb + tile);
            int nv = nch - jb < bs ? nch - jb : bs;
            for (int jc = 0; jc < nv; jc += 16) {
                __mmask16 m = mask16(nv - jc);
                __m512 p = _mm512_maskz_loadu_ps(m, sc + jb + jc);
                _mm512_mask_storeu_ps(sc + jb + jc, m, _mm512_mul_ps(p, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, vs + jc))));
            }
        }
        for (int dc = 0; dc < hd; dc += 64) { /* 64 dimensions at a time: four FMA chains */
            __mmask16 mk[4];
            __m512 x[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                mk[u] = hd - dc > 16 * u ? mask16(hd - dc - 16 * u) : 0;
                x[u] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[u], acc + dc + 16 * u), _mm512_set1_ps(corr));
            }
            for (int jb = 0; jb < nch; jb += bs) {
                const uint8_t *vt = vb + ((size_t)bt[(j0 + jb) / bs] * a->n_kv_heads + h) * tb + dc * es;
                int nv = nch - jb < bs ? nch - jb : bs;
                for (int j = 0; j < nv; j++) {
                    __m512 pj = _mm512_set1_ps(sc[jb + j]);
                    const uint8_t *v = vt + (size_t)j * hd * es;
#pragma GCC unroll 4
                    for (int u = 0; u < 4; u++) x[u] = _mm512_fmadd_ps(pj, load16_v(v + 16 * u * es, mk[u], dt), x[u]);
                }
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) _mm512_mask_storeu_ps(acc + dc + 16 * u, mk[u], x[u]);
        }
    }
    float *o = a->out, inv = 1.0f / l;
    for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
}

/* The decode fast paths of f16, int8 and e4m3 arenas with 16-aligned blocks. */
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

/* int8 or e4m3 codes times their vector's scale (kvq_to_f32 of cpu__kern), 16 at a time. */
static void kvq_to_f32(int dtype, const uint8_t *src, size_t src_stride, const uint8_t *scales, int per_col,
                       float *dst, size_t dst_stride, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const uint8_t *s = src + (size_t)r * src_stride;
        float *d = dst + (size_t)r * dst_stride;
        __m512 row_scale = _mm512_set1_ps(0);
        if (!per_col) row_scale = _mm512_set1_ps(dt_f16_to_f32((uint16_t)(scales[KV_SCALE_BYTES * r] | (scales[KV_SCALE_BYTES * r + 1] << 8))));
        for (int i = 0; i < n; i += 16) {
            __mmask16 m = mask16(n - i);
            __m512 c = load16_q(s + i, m, dtype);
            __m512 sc = per_col ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, scales + KV_SCALE_BYTES * i)) : row_scale;
            _mm512_mask_storeu_ps(d + i, m, _mm512_mul_ps(c, sc));
        }
    }
}

void cpu__attention_fill_avx512(cpu__kern *k)
{
    k->kv_to_f32 = kv_to_f32;
    k->f32_to_kv = f32_to_kv;
    k->attn_chunk = attn_chunk;
    k->attn_isa = CPU_ISA_AVX512;
    k->attn_decode[KV_F16] = attn_decode_f16;
    k->attn_decode[KV_I8] = attn_decode_i8;
    k->attn_decode[KV_FP8] = attn_decode_fp8;
    k->kvq_to_f32 = kvq_to_f32;
}
