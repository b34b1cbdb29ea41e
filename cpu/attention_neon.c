/*
 * attention_neon.c — the Advanced SIMD kernels of attention.c on aarch64: K/V conversions, the
 * chunk step of the online softmax for up to CPU__ATTN_AR query rows, and the single-row f16
 * decode path. The algorithms of attention_avx2.c with 4-float vectors and 32 registers:
 * scores of 4 rows × 16 keys per pass (16 accumulators), P·V of 4 rows × 16 dimensions per
 * pass, e^x by the polynomial of simd_neon.h. Tails of keys and dimensions (not multiples of 4)
 * are finished in scalar code, so nothing outside a buffer's valid part is read or written.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_neon.h"
#include "model/dtype.h"

#define KCH CPU__ATTN_KCH
#define AR CPU__ATTN_AR

/* ---- conversions --------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) void rows_to_f32(int dtype, const void *src, size_t src_stride,
                                                              float *dst, size_t dst_stride, int rows, int n)
{
    size_t eb = kv_dtype_bytes(dtype);
    for (int r = 0; r < rows; r++) {
        const char *s = (const char *)src + (size_t)r * src_stride * eb;
        float *d = dst + (size_t)r * dst_stride;
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            const uint16_t *h = (const uint16_t *)s + i;
            vst1q_f32(d + i, dtype == KV_F32   ? vld1q_f32((const float *)s + i)
                             : dtype == KV_F16 ? cpu__f16x4_to_f32(h)
                                               : cpu__bf16x4_to_f32(h));
        }
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
    if (dtype == KV_F16) /* FCVTN rounds to nearest even, as dt_f32_to_f16 */
        for (; i + 4 <= n; i += 4) vst1_u16(d + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++) d[i] = dtype == KV_F16 ? dt_f32_to_f16(src[i]) : dt_f32_to_bf16(src[i]);
}

/* ---- the softmax step ---------------------------------------------------------------------- */

static float max_of(const float *sc, int nv, float m)
{
    float32x4_t v = vdupq_n_f32(m);
    int j = 0;
    for (; j + 4 <= nv; j += 4) v = vmaxq_f32(v, vld1q_f32(sc + j));
    float r = vmaxvq_f32(v);
    for (; j < nv; j++) r = sc[j] > r ? sc[j] : r;
    return r;
}

/* sc[j] = exp(sc[j] - m) for j < nv; returns their sum. */
static float exp_shift(float *sc, int nv, float m)
{
    float32x4_t sum = vdupq_n_f32(0), vm = vdupq_n_f32(m);
    int j = 0;
    for (; j + 4 <= nv; j += 4) {
        float32x4_t e = cpu__exp_f32x4(vsubq_f32(vld1q_f32(sc + j), vm));
        vst1q_f32(sc + j, e);
        sum = vaddq_f32(sum, e);
    }
    float tail = 0;
    if (j < nv) { /* the tail through a copy, with the same polynomial */
        float t[4] = {m, m, m, m};
        for (int i = j; i < nv; i++) t[i - j] = sc[i];
        vst1q_f32(t, cpu__exp_f32x4(vsubq_f32(vld1q_f32(t), vm)));
        for (int i = j; i < nv; i++) tail += sc[i] = t[i - j];
    }
    return vaddvq_f32(sum) + tail;
}

/* See attention_avx2.c. */
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

/* S[a][j] = scale · q_a · K[j] for rows a < ar and keys j < nv of the transposed chunk kt
 * [hd][KCH]: 16 keys per pass, then the remaining keys one by one. */
static inline __attribute__((always_inline)) void scores_rows(int ar, const float *const *qa, const float *kt,
                                                              int hd, int nv, float scale, float *S)
{
    int jc = 0;
    for (; jc + 16 <= nv; jc += 16) {
        float32x4_t acc[AR][4];
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) acc[a][u] = vdupq_n_f32(0);
        for (int d = 0; d < hd; d++) {
            const float *k = kt + (size_t)d * KCH + jc;
            float32x4_t kv[4] = {vld1q_f32(k), vld1q_f32(k + 4), vld1q_f32(k + 8), vld1q_f32(k + 12)};
#pragma GCC unroll 4
            for (int a = 0; a < ar; a++) {
                float32x4_t qv = vld1q_dup_f32(qa[a] + d);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) acc[a][u] = vfmaq_f32(acc[a][u], qv, kv[u]);
            }
        }
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) vst1q_f32(S + a * KCH + jc + 4 * u, vmulq_n_f32(acc[a][u], scale));
    }
    for (; jc < nv; jc++)
        for (int a = 0; a < ar; a++) {
            float s = 0;
            for (int d = 0; d < hd; d++) s += qa[a][d] * kt[(size_t)d * KCH + jc];
            S[a * KCH + jc] = s * scale;
        }
}

/* acc[a] = acc[a] · corr[a] + Σ_j S[a][j] · V[j] for rows a < ar (accumulators hd apart) and
 * keys j < nv of the f32 chunk vt [nv][hd]: 16 dimensions per pass, then the rest. */
static inline __attribute__((always_inline)) void pv_rows(int ar, float *acc, const float *corr, const float *S,
                                                          const float *vt, int nv, int hd)
{
    int dc = 0;
    for (; dc + 16 <= hd; dc += 16) {
        float32x4_t x[AR][4];
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) x[a][u] = vmulq_n_f32(vld1q_f32(acc + (size_t)a * hd + dc + 4 * u), corr[a]);
        for (int j = 0; j < nv; j++) {
            const float *v = vt + (size_t)j * hd + dc;
            float32x4_t vv[4] = {vld1q_f32(v), vld1q_f32(v + 4), vld1q_f32(v + 8), vld1q_f32(v + 12)};
#pragma GCC unroll 4
            for (int a = 0; a < ar; a++) {
                float32x4_t p = vld1q_dup_f32(S + a * KCH + j);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) x[a][u] = vfmaq_f32(x[a][u], p, vv[u]);
            }
        }
#pragma GCC unroll 4
        for (int a = 0; a < ar; a++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) vst1q_f32(acc + (size_t)a * hd + dc + 4 * u, x[a][u]);
    }
    for (; dc < hd; dc++)
        for (int a = 0; a < ar; a++) {
            float s = acc[(size_t)a * hd + dc] * corr[a];
            for (int j = 0; j < nv; j++) s += S[a * KCH + j] * vt[(size_t)j * hd + dc];
            acc[(size_t)a * hd + dc] = s;
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

#define DCH 256

static int direct_chunk(int bs)
{
    return bs >= DCH ? bs : DCH / bs * bs;
}

/* sc[0 .. nv) = scale · q · K[j] for the keys of one transposed f16 tile kt [hd][bs] (bs a
 * multiple of 16; keys past nv are computed from the tile's stale slots and not stored). */
static void scores_f16(const float *q, const uint16_t *kt, int bs, int hd, int nv, float scale, float *sc)
{
    for (int jc = 0; jc < nv; jc += 16) {
        float32x4_t a[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
        for (int d = 0; d < hd; d++) {
            const uint16_t *k = kt + (size_t)d * bs + jc;
            float32x4_t qv = vld1q_dup_f32(q + d);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) a[u] = vfmaq_f32(a[u], qv, cpu__f16x4_to_f32(k + 4 * u));
        }
        float t[16];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) vst1q_f32(t + 4 * u, vmulq_n_f32(a[u], scale));
        memcpy(sc + jc, t, (size_t)(nv - jc < 16 ? nv - jc : 16) * sizeof(float));
    }
}

/* acc[0 .. hd) = acc · corr + Σ_j p[j] · V[j] over the f16 rows of the chunk's blocks. */
static void pv_f16(const cpu__attn_row *a, int j0, int nch, const float *p, float corr, float *acc)
{
    int hd = a->head_dim, bs = a->block_size, d4 = hd / 4 * 4;
    size_t tile = (size_t)bs * hd;
    const uint16_t *vb = a->v;
    for (int d = 0; d < hd; d++) acc[d] *= corr;
    for (int jb = 0; jb < nch; jb += bs) {
        const uint16_t *vt = vb + ((size_t)a->bt[(j0 + jb) / bs] * a->n_kv_heads + a->kvh) * tile;
        int nv = nch - jb < bs ? nch - jb : bs;
        for (int j = 0; j < nv; j++) {
            const uint16_t *v = vt + (size_t)j * hd;
            float pj = p[jb + j];
            int d = 0;
            for (; d < d4; d += 4) vst1q_f32(acc + d, vfmaq_n_f32(vld1q_f32(acc + d), cpu__f16x4_to_f32(v + d), pj));
            for (; d < hd; d++) acc[d] += pj * dt_f16_to_f32(v[d]);
        }
    }
}

/* Decode path for an f16 arena with 16-aligned blocks and a single query row. */
static void attn_decode_f16(const cpu__attn_row *a)
{
    int hd = a->head_dim, bs = a->block_size, n_ctx = a->n_ctx, ch = direct_chunk(bs), h = a->kvh;
    int lo = a->lo, start = lo / bs * bs;
    size_t tile = (size_t)bs * hd;
    const uint16_t *kb = a->k;
    float *sc = a->scr, *acc = sc + ch, mx = -FLT_MAX, l = 0;
    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int j0 = start; j0 < n_ctx; j0 += ch) {
        int nch = n_ctx - j0 < ch ? n_ctx - j0 : ch;
        for (int jb = 0; jb < nch; jb += bs) {
            size_t at = ((size_t)a->bt[(j0 + jb) / bs] * a->n_kv_heads + h) * tile;
            scores_f16(a->q, kb + at, bs, hd, nch - jb < bs ? nch - jb : bs, a->scale, sc + jb);
        }
        float corr = softmax_step(sc, lo - j0 > 0 ? lo - j0 : 0, nch, a->softcap, &mx, &l);
        pv_f16(a, j0, nch, sc, corr, acc);
    }
    float inv = 1.0f / l;
    for (int d = 0; d < hd; d++) a->out[d] = acc[d] * inv;
}

void cpu__attention_fill_neon(cpu__kern *k)
{
    k->kv_to_f32 = kv_to_f32;
    k->f32_to_kv = f32_to_kv;
    k->attn_chunk = attn_chunk;
    k->attn_isa = CPU_ISA_NEON;
    k->attn_decode[KV_F16] = attn_decode_f16;
}
