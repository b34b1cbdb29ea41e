/*
 * attention.c — the CPU backend's paged KV cache: writing new K/V into their slots and causal
 * attention over the cache with GQA grouping and an online softmax.
 *
 * KV layout (per layer, K and V separately): [n_blocks][n_kv_heads][tile] in the arena's dtype
 * (f16, bf16 or f32), so one (block, kv head) pair is a contiguous tile of
 * block_size × head_dim values and a block copy is one memcpy per layer and per K/V. Inside a
 * tile, V is [block_size][head_dim] (row-major, as the P·V product reads it) and K is transposed,
 * [head_dim][block_size]: the scores of a query against 16 keys are then 16-wide FMAs of the
 * broadcast q[d] with row d of the tile, with no horizontal sums, and converting a K tile to f32
 * is a straight run of F16C conversions. (cache/kv.h describes the untransposed K layout; the
 * transposition is private to this backend.) store_kv pays for it with strided 2-byte writes,
 * once per token.
 *
 * Work is one task per (query tile, kv head): up to QT consecutive new tokens of one sequence
 * and the kv head's whole group of query heads (n_heads / n_kv_heads of them), so every K/V tile
 * is loaded and converted once for the group and for all tokens of the tile — in a prefill chunk
 * this divides the conversion work by up to QT × group. Within a tile, AR query rows at a time
 * share every K and V vector load (scores and P·V as small register-blocked products). Token i of sequence s sits at KV index
 * ctx_len[s] - n_new[s] + i and attends to KV entries 0 .. that index inclusive (the causal rule
 * of engine/backend.h). Threads take tasks one at a time, kv head by kv head and latest tile
 * first within a head, so that a head's K/V stays cached across its tiles and the long rows of
 * a prefill chunk spread evenly.
 *
 * Per-layer parameters (be_attn): the scale of q·k, Gemma 2's soft-cap of the scores, and the
 * sliding window. A windowed row also has a lower limit (KV index − window + 1): spans start at
 * the lowest limit of their rows, so blocks that fell out of every row's window are not even
 * read, and keys below a row's own limit get probability 0 like keys past its causal limit.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/internal.h"
#include "engine/dtype.h"

#if defined(__AVX512F__) || defined(__SSE__)
#include <immintrin.h>
#endif

/* ---- conversions --------------------------------------------------------------------------- */

static void kv_to_f32(int dtype, const void *src, float *dst, int64_t n)
{
    int64_t i = 0;
    if (dtype == KV_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    const uint16_t *s = src;
    if (dtype == KV_F16) {
#ifdef __AVX512F__
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(s + i))));
#endif
        for (; i < n; i++) dst[i] = dt_f16_to_f32(s[i]);
    } else {
#ifdef __AVX512F__
        for (; i + 16 <= n; i += 16) {
            __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(s + i)));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        }
#endif
        for (; i < n; i++) dst[i] = dt_bf16_to_f32(s[i]);
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
    if (dtype == KV_F16) {
#ifdef __AVX512F__
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((void *)(d + i),
                                _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < n; i++) d[i] = dt_f32_to_f16(src[i]);
    } else {
        for (; i < n; i++) d[i] = dt_f32_to_bf16(src[i]);
    }
}

/* ---- store_kv ------------------------------------------------------------------------------ */

/* Where KV entry `off` of a block lives: K tiles are [head_dim][block_size] (element (off, d) at
 * d * block_size + off), V tiles [block_size][head_dim]. */
void cpu__store_kv(cpu__backend *c, int layer, const float *k, const float *v)
{
    const kv_geom *g = &c->kv;
    const be_batch *b = &c->batch;
    size_t eb = kv_dtype_bytes(g->dtype), tile = (size_t)g->block_size * g->head_dim;
    int kv_dim = g->n_kv_heads * g->head_dim, hd = g->head_dim, bs = g->block_size;
    char *kb = cpu__kv_k(c, layer), *vb = cpu__kv_v(c, layer);
    for (int i = 0; i < b->n_tokens; i++) {
        int32_t slot = b->slots[i], blk = slot / bs, off = slot % bs;
        for (int h = 0; h < g->n_kv_heads; h++) {
            size_t at = ((size_t)blk * g->n_kv_heads + h) * tile;
            const float *kr = k + (size_t)i * kv_dim + (size_t)h * hd;
            char *kt = kb + at * eb;
            for (int d = 0; d < hd; d++) {
                size_t e = (size_t)d * bs + off;
                if (g->dtype == KV_F32) ((float *)kt)[e] = kr[d];
                else if (g->dtype == KV_F16) ((uint16_t *)kt)[e] = dt_f32_to_f16(kr[d]);
                else ((uint16_t *)kt)[e] = dt_f32_to_bf16(kr[d]);
            }
            f32_to_kv(g->dtype, v + (size_t)i * kv_dim + (size_t)h * hd,
                      vb + (at + (size_t)off * hd) * eb, hd);
        }
    }
}

/* ---- attention ----------------------------------------------------------------------------- */

/* Query tokens per task: the K/V tiles a task converts serve all of them. 16 converted each
 * K/V chunk twice as often for the same work (5-10% slower on a 72-token chunk over 1000
 * cached keys); 24, 48 and 64 measured no faster than 32. */
#define QT 32

/* A unit of query tokens. With shared == 0: consecutive new tokens [i0, i1) of sequence seq
 * (batch indices). With shared > 0, a decode group: the one new token of each of several
 * sequences whose block tables start with the same blocks, listed in the plan's group tokens
 * [i0, i1); their first `shared` KV entries are the same memory (read through the block table of
 * sequence seq), so they are converted once and every member's query rows share each load. */
typedef struct attn_tile {
    int32_t seq, i0, i1, shared;
} attn_tile;

typedef struct attn_task {
    cpu__backend *c;
    int layer;
    const float *q;
    int n_heads;
    const be_attn *a; /* scale, soft-cap, window */
    float *out;
    const attn_tile *tiles;
    int64_t n_tiles;
    const int32_t *gtoks; /* the group tiles' tokens */
} attn_task;

/* Which batch token a query row belongs to: rows are token-major, gq query heads per token,
 * tokens either listed (toks) or consecutive from i0. */
typedef struct attn_rowmap {
    const int32_t *toks;
    int32_t i0;
} attn_rowmap;

static inline int row_tok(const attn_rowmap *rm, int token_row)
{
    return rm->toks ? rm->toks[token_row] : rm->i0 + token_row;
}

/* Keys per online-softmax step: K/V of up to KCH consecutive entries (spanning blocks) are
 * converted into f32 buffers kt [head_dim][KCH] and vt [KCH][head_dim]; the per-step softmax
 * bookkeeping (two horizontal reductions and an expf per query row) is then spread over KCH
 * keys instead of one (possibly tiny) block. 64 keys (buffers of 32 KiB at head_dim 64) measured
 * about 8% faster than 32 on a prefix-cached prefill chunk, as each K vector load of the scores
 * then serves four rows times four key vectors. Must be a multiple of 16, at most 64. */
#define KCH 64

/* Size in floats of a thread's scratch for a group of gq query heads. */
static size_t attn_scratch_floats(const kv_geom *g, int gq)
{
    size_t hd = (size_t)g->head_dim;
    size_t general = 2 * hd * KCH + 4 * KCH /* AR rows of scores */ + 2 * (size_t)QT * gq + (size_t)QT * gq * hd;
    size_t direct = (size_t)(g->block_size > 256 ? g->block_size : 256) + hd; /* attn_row_f16 */
    return (general > direct ? general : direct) + 64;
}

#ifdef __AVX512F__
static inline __mmask16 mask16(int n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

#endif

/* sc[j] = scale · q · K[j] for keys j < nv of the transposed f32 tile kt [hd][bsp] (bsp: row
 * stride). Four
 * accumulators keep four FMA chains in flight (one chain would wait on FMA latency). */
static void scores(const float *q, const float *kt, int bsp, int hd, int nv, float scale, float *sc)
{
#ifdef __AVX512F__
    for (int jc = 0; jc < nv; jc += 16) {
        __mmask16 m = mask16(nv - jc);
        const float *k = kt + jc;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int d = 0;
        for (; d + 4 <= hd; d += 4) {
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_maskz_loadu_ps(m, k + (size_t)d * bsp), a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]), _mm512_maskz_loadu_ps(m, k + (size_t)(d + 1) * bsp), a1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 2]), _mm512_maskz_loadu_ps(m, k + (size_t)(d + 2) * bsp), a2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 3]), _mm512_maskz_loadu_ps(m, k + (size_t)(d + 3) * bsp), a3);
        }
        for (; d < hd; d++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_maskz_loadu_ps(m, k + (size_t)d * bsp), a0);
        __m512 sum = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
        _mm512_mask_storeu_ps(sc + jc, m, _mm512_mul_ps(sum, _mm512_set1_ps(scale)));
    }
#else
    for (int j = 0; j < nv; j++) {
        float a = 0;
        for (int d = 0; d < hd; d++) a += q[d] * kt[(size_t)d * bsp + j];
        sc[j] = a * scale;
    }
#endif
}

/* max(m, sc[0 .. nv)). */
static float max_of(const float *sc, int nv, float m)
{
#ifdef __AVX512F__
    __m512 v = _mm512_set1_ps(m);
    for (int jc = 0; jc < nv; jc += 16)
        v = _mm512_mask_max_ps(v, mask16(nv - jc), v, _mm512_maskz_loadu_ps(mask16(nv - jc), sc + jc));
    return _mm512_reduce_max_ps(v);
#else
    for (int j = 0; j < nv; j++) m = sc[j] > m ? sc[j] : m;
    return m;
#endif
}

/* sc[j] = exp(sc[j] - m) for j < nv; returns their sum. */
static float exp_shift(float *sc, int nv, float m)
{
#ifdef __AVX512F__
    __m512 sum = _mm512_setzero_ps(), vm = _mm512_set1_ps(m);
    for (int jc = 0; jc < nv; jc += 16) {
        __mmask16 k = mask16(nv - jc);
        __m512 e = _mm512_maskz_mov_ps(k, cpu__exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + jc), vm)));
        _mm512_mask_storeu_ps(sc + jc, k, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
#else
    float sum = 0;
    for (int j = 0; j < nv; j++) sum += sc[j] = expf(sc[j] - m);
    return sum;
#endif
}

/* The first KV index a query at KV index kvpos sees: kvpos − window + 1 in a sliding-window
 * layer, else 0. */
static inline int row_lo(const attn_task *t, int kvpos)
{
    int lo = t->a->window > 0 ? kvpos - t->a->window + 1 : 0;
    return lo > 0 ? lo : 0;
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

/* acc = acc · corr + Σ_j p[j] · V[j] over nv rows of the f32 tile vt [nv][hd]. Up to 64
 * dimensions at a time: four independent FMA chains per key. */
static void pv(float *acc, float corr, const float *p, const float *vt, int nv, int hd)
{
#ifdef __AVX512F__
    __m512 vc = _mm512_set1_ps(corr);
    for (int dc = 0; dc < hd; dc += 64) {
        __mmask16 m0 = mask16(hd - dc), m1 = hd - dc > 16 ? mask16(hd - dc - 16) : 0;
        __mmask16 m2 = hd - dc > 32 ? mask16(hd - dc - 32) : 0, m3 = hd - dc > 48 ? mask16(hd - dc - 48) : 0;
        float *a = acc + dc;
        __m512 a0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, a), vc);
        __m512 a1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, a + 16), vc);
        __m512 a2 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m2, a + 32), vc);
        __m512 a3 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m3, a + 48), vc);
        for (int j = 0; j < nv; j++) {
            __m512 pj = _mm512_set1_ps(p[j]);
            const float *v = vt + (size_t)j * hd + dc;
            a0 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m0, v), a0);
            a1 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m1, v + 16), a1);
            a2 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m2, v + 32), a2);
            a3 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m3, v + 48), a3);
        }
        _mm512_mask_storeu_ps(a, m0, a0);
        _mm512_mask_storeu_ps(a + 16, m1, a1);
        _mm512_mask_storeu_ps(a + 32, m2, a2);
        _mm512_mask_storeu_ps(a + 48, m3, a3);
    }
#else
    for (int d = 0; d < hd; d++) {
        float a = acc[d] * corr;
        for (int j = 0; j < nv; j++) a += p[j] * vt[(size_t)j * hd + d];
        acc[d] = a;
    }
#endif
}

/* Converts KV entries [j0, j0 + n) of one kv head of a sequence (n ≤ KCH) into kt (transposed,
 * row stride KCH) and vt, block segment by block segment. */
static void gather_kv(const cpu__backend *c, const char *kb, const char *vb, const int32_t *bt, int kvh,
                      int j0, int n, int n_ctx, float *kt, float *vt)
{
    const kv_geom *g = &c->kv;
    int hd = g->head_dim, bs = g->block_size;
    size_t eb = kv_dtype_bytes(g->dtype), tile = (size_t)bs * hd;
    /* Blocks are scattered, so the hardware prefetcher cannot guess the next tiles: while
     * converting a block, request the one about a chunk (KCH keys) ahead, into L2. Measured
     * ~10% faster on streamed shared-prefix decodes than fetching the next chunk in a burst. */
    int ahead = KCH / bs > 1 ? KCH / bs : 1;
    for (int j = j0; j < j0 + n;) {
        int off = j % bs, len = bs - off < j0 + n - j ? bs - off : j0 + n - j;
        size_t at = ((size_t)bt[j / bs] * g->n_kv_heads + kvh) * tile;
#if defined(__AVX512F__) || defined(__SSE__)
        if ((j / bs + ahead) * bs < n_ctx) {
            size_t nx = ((size_t)bt[j / bs + ahead] * g->n_kv_heads + kvh) * tile * eb;
            for (size_t o = 0; o < tile * eb; o += 64) {
                _mm_prefetch(kb + nx + o, _MM_HINT_T1);
                _mm_prefetch(vb + nx + o, _MM_HINT_T1);
            }
        }
#endif
        const char *ks = kb + (at + (size_t)off) * eb;
        float *kd = kt + (j - j0);
#ifdef __AVX512F__
        if (g->dtype == KV_F16 && len <= 16) { /* the common case: one conversion per row */
            __mmask16 m = mask16(len);
            for (int d = 0; d < hd; d++)
                _mm512_mask_storeu_ps(kd + (size_t)d * KCH, m,
                                      _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, ks + (size_t)d * bs * eb)));
        } else
#endif
            for (int d = 0; d < hd; d++) kv_to_f32(g->dtype, ks + (size_t)d * bs * eb, kd + (size_t)d * KCH, len);
        kv_to_f32(g->dtype, vb + (at + (size_t)off * hd) * eb, vt + (size_t)(j - j0) * hd, (int64_t)len * hd);
        j += len;
    }
}

#ifdef __AVX512F__
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
static inline void scores_f16(const float *q, const uint16_t *kt, int bs, int hd, int nv, float scale,
                              float *sc)
{
    for (int jc = 0; jc < nv; jc += 16) {
        __mmask16 m = mask16(nv - jc);
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        int d = 0;
        for (; d + 4 <= hd; d += 4)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                a[u] = _mm512_fmadd_ps(_mm512_set1_ps(q[d + u]),
                                       _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, kt + (size_t)(d + u) * bs + jc)), a[u]);
        for (; d < hd; d++)
            a[0] = _mm512_fmadd_ps(_mm512_set1_ps(q[d]),
                                   _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, kt + (size_t)d * bs + jc)), a[0]);
        __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
        _mm512_mask_storeu_ps(sc + jc, m, _mm512_mul_ps(sum, _mm512_set1_ps(scale)));
    }
}

/* Decode fast path for an f16 arena with 16-aligned blocks and a single query row (one token,
 * no grouping): every K/V element is used exactly once, so it is converted inside the FMAs
 * instead of through the f32 buffers. */
static void attn_row_f16(const attn_task *t, float *scr, int i, int seq, int h)
{
    cpu__backend *c = t->c;
    const kv_geom *g = &c->kv;
    const be_batch *b = &c->batch;
    int hd = g->head_dim, bs = g->block_size, n_ctx = c->tok_kvpos[i] + 1, ch = direct_chunk(bs);
    int lo = row_lo(t, n_ctx - 1), start = lo / bs * bs; /* whole blocks from the window's first */
    const int32_t *bt = b->block_table + (size_t)seq * b->bt_stride;
    size_t tile = (size_t)bs * hd;
    const uint16_t *kb = cpu__kv_k(c, t->layer), *vb = cpu__kv_v(c, t->layer);
    const float *q = t->q + ((size_t)i * t->n_heads + h) * hd;
    float *sc = scr, *acc = sc + ch, mx = -FLT_MAX, l = 0, scale = t->a->scale;
    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int j0 = start; j0 < n_ctx; j0 += ch) {
        int nch = n_ctx - j0 < ch ? n_ctx - j0 : ch;
        for (int jb = 0; jb < nch; jb += bs) {
            size_t at = ((size_t)bt[(j0 + jb) / bs] * g->n_kv_heads + h) * tile;
            if (j0 + jb + bs < n_ctx) { /* the next K tile is elsewhere: start fetching it now */
                size_t nx = ((size_t)bt[(j0 + jb) / bs + 1] * g->n_kv_heads + h) * tile;
                for (size_t off = 0; off < tile * 2; off += 64) _mm_prefetch((const char *)(kb + nx) + off, _MM_HINT_T0);
            }
            for (size_t off = 0; off < tile * 2; off += 64) _mm_prefetch((const char *)(vb + at) + off, _MM_HINT_T1);
            scores_f16(q, kb + at, bs, hd, nch - jb < bs ? nch - jb : bs, scale, sc + jb);
        }
        float corr = softmax_step(sc, lo - j0 > 0 ? lo - j0 : 0, nch, t->a->softcap, &mx, &l);
        for (int dc = 0; dc < hd; dc += 64) { /* 64 dimensions at a time: four FMA chains */
            __mmask16 mk[4];
            __m512 x[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                mk[u] = hd - dc > 16 * u ? mask16(hd - dc - 16 * u) : 0;
                x[u] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[u], acc + dc + 16 * u), _mm512_set1_ps(corr));
            }
            for (int jb = 0; jb < nch; jb += bs) {
                const uint16_t *vt = vb + ((size_t)bt[(j0 + jb) / bs] * g->n_kv_heads + h) * tile + dc;
                int nv = nch - jb < bs ? nch - jb : bs;
                for (int j = 0; j < nv; j++) {
                    __m512 pj = _mm512_set1_ps(sc[jb + j]);
                    const uint16_t *v = vt + (size_t)j * hd;
#pragma GCC unroll 4
                    for (int u = 0; u < 4; u++)
                        x[u] = _mm512_fmadd_ps(pj, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk[u], v + 16 * u)), x[u]);
                }
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) _mm512_mask_storeu_ps(acc + dc + 16 * u, mk[u], x[u]);
        }
    }
    float *o = t->out + ((size_t)i * t->n_heads + h) * hd, inv = 1.0f / l;
    for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
}
#endif

#ifdef __AVX512F__
/* Query rows that share each K/V load in the general path. */
#define AR 4

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

/* Rows [r0, r0 + ar) of a tile over the chunk of n keys from j0: scores of all of them, the
 * online-softmax step per row (keys past a row's causal limit get probability 0), then P·V. */
static void attn_rows(const attn_task *t, const attn_rowmap *rm, int kvh, int r0, int ar, int j0, int n,
                      const float *kt, const float *vt, float *S, float *mx, float *l, float *acc)
{
    cpu__backend *c = t->c;
    int hd = c->kv.head_dim, gq = t->n_heads / c->kv.n_kv_heads, nmax = 0, nvr[AR];
    const float *qa[AR];
    float corr[AR], scale = t->a->scale;
    int sr[AR]; /* first key of the chunk each row sees (its window) */
    for (int a = 0; a < ar; a++) {
        int r = r0 + a, i = row_tok(rm, r / gq), nv = c->tok_kvpos[i] + 1 - j0;
        nvr[a] = nv < 0 ? 0 : nv > n ? n : nv;
        sr[a] = row_lo(t, c->tok_kvpos[i]) - j0;
        nmax = nvr[a] > nmax ? nvr[a] : nmax;
        qa[a] = t->q + ((size_t)i * t->n_heads + (size_t)kvh * gq + r % gq) * hd;
    }
    if (nmax == 0) return;
    rows_any(ar, qa, kt, vt, hd, nmax, scale, S, acc, corr, 0);
    for (int a = 0; a < ar; a++) {
        int r = r0 + a, nv = nvr[a];
        float *sa = S + a * KCH;
        corr[a] = softmax_step(sa, sr[a] > 0 ? sr[a] : 0, nv, t->a->softcap, &mx[r], &l[r]);
        for (int j = nv; j < nmax; j++) sa[j] = 0.0f;
    }
    rows_any(ar, qa, kt, vt, hd, nmax, scale, S, acc + (size_t)r0 * hd, corr, 1);
}
#endif

/* Online-softmax steps of query rows [r0, r1) (state mx, l, acc indexed by row) over the KV
 * entries [ja, jb) of block table bt, KCH keys at a time; a row skips keys past its causal
 * limit. */
static void attn_span(const attn_task *t, float *scr, const attn_rowmap *rm, int kvh, const int32_t *bt,
                      int ja, int jb, int r0, int r1, float *mx, float *l, float *acc)
{
    cpu__backend *c = t->c;
    int hd = c->kv.head_dim, gq = t->n_heads / c->kv.n_kv_heads;
    const char *kb = cpu__kv_k(c, t->layer), *vb = cpu__kv_v(c, t->layer);
    float *kt = scr, *vt = kt + (size_t)hd * KCH, *sc = vt + (size_t)KCH * hd;
    float scale = t->a->scale;
    for (int j0 = ja; j0 < jb; j0 += KCH) {
        int n = jb - j0 < KCH ? jb - j0 : KCH;
        gather_kv(c, kb, vb, bt, kvh, j0, n, jb, kt, vt);
#ifdef __AVX512F__
        if (KCH % 16 == 0 && KCH <= 64) {
            for (int r = r0; r < r1; r += AR)
                attn_rows(t, rm, kvh, r, r1 - r < AR ? r1 - r : AR, j0, n, kt, vt, sc, mx, l, acc);
            continue;
        }
#endif
        for (int r = r0; r < r1; r++) {
            int i = row_tok(rm, r / gq), nv = c->tok_kvpos[i] + 1 - j0;
            if (nv <= 0) continue;
            if (nv > n) nv = n;
            const float *qh = t->q + ((size_t)i * t->n_heads + (size_t)kvh * gq + r % gq) * hd;
            int s0 = row_lo(t, c->tok_kvpos[i]) - j0;
            if (s0 >= nv) continue;
            scores(qh, kt, KCH, hd, nv, scale, sc);
            float corr = softmax_step(sc, s0 > 0 ? s0 : 0, nv, t->a->softcap, &mx[r], &l[r]);
            pv(acc + (size_t)r * hd, corr, sc, vt, nv, hd);
        }
    }
}

/* One unit and one kv head (its gq query heads): the online softmax per (token, head) over each
 * token's KV entries. A decode group first runs all its rows over the shared entries, then each
 * member's rows over the rest of that member's entries. */
static void attn_tile_run(const attn_task *t, float *scr, const attn_tile *tl, int kvh)
{
    cpu__backend *c = t->c;
    const kv_geom *g = &c->kv;
    const be_batch *b = &c->batch;
    int hd = g->head_dim, gq = t->n_heads / g->n_kv_heads;
    int nt = tl->i1 - tl->i0, rows = nt * gq;
    float *mx = scr + 2 * (size_t)hd * KCH + 4 * KCH, *l = mx + rows, *acc = l + rows;

    for (int r = 0; r < rows; r++) {
        mx[r] = -FLT_MAX;
        l[r] = 0;
    }
    memset(acc, 0, (size_t)rows * hd * sizeof(float));
    attn_rowmap rm = {tl->shared ? t->gtoks + tl->i0 : NULL, tl->i0};
    if (tl->shared) {
        /* the shared entries from the lowest window start of the members, then each member's own */
        int lo = tl->shared;
        for (int m = 0; m < nt; m++) {
            int lm = row_lo(t, c->tok_kvpos[rm.toks[m]]);
            lo = lm < lo ? lm : lo;
        }
        if (lo < tl->shared)
            attn_span(t, scr, &rm, kvh, b->block_table + (size_t)tl->seq * b->bt_stride, lo, tl->shared, 0,
                      rows, mx, l, acc);
        for (int m = 0; m < nt; m++) {
            int i = rm.toks[m], lm = row_lo(t, c->tok_kvpos[i]);
            const int32_t *bt = b->block_table + (size_t)c->tok_seq[i] * b->bt_stride;
            attn_span(t, scr, &rm, kvh, bt, lm > tl->shared ? lm : tl->shared, c->tok_kvpos[i] + 1, m * gq,
                      (m + 1) * gq, mx, l, acc);
        }
    } else { /* consecutive tokens: the first has the lowest window start */
        attn_span(t, scr, &rm, kvh, b->block_table + (size_t)tl->seq * b->bt_stride,
                  row_lo(t, c->tok_kvpos[tl->i0]), c->tok_kvpos[tl->i1 - 1] + 1, 0, rows, mx, l, acc);
    }
    for (int r = 0; r < rows; r++) {
        float *o = t->out + ((size_t)row_tok(&rm, r / gq) * t->n_heads + (size_t)kvh * gq + r % gq) * hd;
        float inv = 1.0f / l[r];
        for (int d = 0; d < hd; d++) o[d] = acc[(size_t)r * hd + d] * inv;
    }
}

/* Units are (tile, kv head) pairs, kv head major and, within a head, from the last tile
 * backwards (the plan puts decode groups last, so they start first): the tiles of one sequence
 * and head follow each other, so the K/V they all read is still in cache for the next one, and
 * the queue ends with the short early rows of a prefill chunk, which fill in evenly. */
static void attn_run(void *v, int64_t lo, int64_t hi, int ith)
{
    attn_task *t = v;
    float *scr = t->c->scratch[ith].p;
#ifdef __AVX512F__
    const kv_geom *g = &t->c->kv;
    int direct = g->dtype == KV_F16 && g->block_size % 16 == 0 && t->n_heads == g->n_kv_heads;
#endif
    for (int64_t k = lo; k < hi; k++) {
        const attn_tile *tl = &t->tiles[t->n_tiles - 1 - k % t->n_tiles];
        int kvh = (int)(k / t->n_tiles);
#ifdef __AVX512F__
        if (direct && !tl->shared && tl->i1 - tl->i0 == 1) {
            attn_row_f16(t, scr, tl->i0, tl->seq, kvh);
            continue;
        }
#endif
        attn_tile_run(t, scr, tl, kvh);
    }
}

/* ---- the per-step plan ----------------------------------------------------------------------- */

/* Fewest KV entries worth sharing: below this a group's conversion saving does not pay for
 * giving up the single-row f16 path. */
#define GROUP_MIN_SHARED 64

typedef struct plan_ctx {
    const be_batch *b;
    const int32_t *nb; /* blocks of each sequence's table in use */
} plan_ctx;

/* Leading block-table entries sequences x and y have in common. */
static int bt_lcp(const plan_ctx *p, int x, int y)
{
    const int32_t *a = p->b->block_table + (size_t)x * p->b->bt_stride;
    const int32_t *e = p->b->block_table + (size_t)y * p->b->bt_stride;
    int n = p->nb[x] < p->nb[y] ? p->nb[x] : p->nb[y], k = 0;
    while (k < n && a[k] == e[k]) k++;
    return k;
}

/* Block tables of sequences x and y compared entry by entry (a prefix sorts first). */
static int bt_cmp(const plan_ctx *p, int x, int y)
{
    int k = bt_lcp(p, x, y);
    if (k < p->nb[x] && k < p->nb[y]) {
        int32_t a = p->b->block_table[(size_t)x * p->b->bt_stride + k];
        int32_t e = p->b->block_table[(size_t)y * p->b->bt_stride + k];
        return a < e ? -1 : 1;
    }
    return (p->nb[x] > p->nb[y]) - (p->nb[x] < p->nb[y]);
}

/* Stable bottom-up merge sort of v[0 .. n) by block table (tmp: n more). */
static void sort_by_table(const plan_ctx *p, int32_t *v, int32_t *tmp, int n)
{
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int a = lo, e = mid, o = lo;
            while (a < mid && e < hi) tmp[o++] = bt_cmp(p, v[e], v[a]) < 0 ? v[e++] : v[a++];
            while (a < mid) tmp[o++] = v[a++];
            while (e < hi) tmp[o++] = v[e++];
        }
        memcpy(v, tmp, (size_t)n * sizeof *v);
    }
}

/* The plan's buffer: max_tiles units, then the group tokens (one per batch token at most). */
static size_t plan_max_tiles(const be_batch *b)
{
    return (size_t)b->n_tokens + (size_t)b->n_seqs;
}

static int32_t *plan_gtoks(const cpu__backend *c)
{
    return (int32_t *)((attn_tile *)c->tiles.p + plan_max_tiles(&c->batch));
}

int cpu__attention_plan(cpu__backend *c)
{
    const be_batch *b = &c->batch;
    int bs = c->kv.block_size, ns = b->n_seqs;
    size_t bytes = plan_max_tiles(b) * sizeof(attn_tile) + (size_t)(b->n_tokens + 3 * ns + 1) * sizeof(int32_t);
    c->attn_n_tiles = 0;
    if (bs <= 0 || ns == 0) return 0; /* no KV arena yet, or a store-only step */
    if (cpu__scratch_reserve(&c->tiles, bytes)) return -ENOMEM;
    attn_tile *tiles = c->tiles.p;
    int32_t *gtoks = plan_gtoks(c), *dec = gtoks + b->n_tokens, *tmp = dec + ns, *nb = tmp + ns;
    int64_t n_tiles = 0;
    int n_dec = 0, n_gtoks = 0;

    /* Sequences decoding one token go to grouping; the others are cut into tiles of QT tokens. */
    for (int s = 0; s < ns; s++) {
        nb[s] = (b->ctx_len[s] + bs - 1) / bs;
        if (b->q_start[s + 1] - b->q_start[s] == 1 && b->ctx_len[s] > GROUP_MIN_SHARED) {
            dec[n_dec++] = s;
            continue;
        }
        for (int i0 = b->q_start[s]; i0 < b->q_start[s + 1]; i0 += QT) {
            int i1 = i0 + QT < b->q_start[s + 1] ? i0 + QT : b->q_start[s + 1];
            tiles[n_tiles++] = (attn_tile){s, i0, i1, 0};
        }
    }

    /* Sorted by block table, sequences with a common prefix are neighbours, and the common part
     * of a run of them is the smallest common part of neighbouring pairs. A run grows while the
     * next neighbour shares at least GROUP_MIN_SHARED entries and half of what the run shares so
     * far; its size is bounded so that there stay about as many units as threads. */
    plan_ctx pc = {b, nb};
    sort_by_table(&pc, dec, tmp, n_dec);
    int gmax = n_dec * c->kv.n_kv_heads / (c->n_threads > 0 ? c->n_threads : 1);
    gmax = gmax < 2 ? 2 : gmax > QT ? QT : gmax;
    for (int k = 0; k < n_dec;) {
        int s0 = dec[k], e = k + 1, shared = b->ctx_len[s0] - 1;
        while (e < n_dec && e - k < gmax) {
            int sh = bt_lcp(&pc, dec[e - 1], dec[e]) * bs;
            int lim = b->ctx_len[dec[e]] - 1 < shared ? b->ctx_len[dec[e]] - 1 : shared;
            sh = sh < lim ? sh : lim;
            if (sh < GROUP_MIN_SHARED || 2 * sh < shared) break;
            shared = sh;
            e++;
        }
        if (e - k == 1) {
            tiles[n_tiles++] = (attn_tile){s0, b->q_start[s0], b->q_start[s0] + 1, 0};
        } else {
            int g0 = n_gtoks;
            for (int m = k; m < e; m++) gtoks[n_gtoks++] = b->q_start[dec[m]];
            tiles[n_tiles++] = (attn_tile){s0, g0, n_gtoks, shared};
        }
        k = e;
    }
    c->attn_n_tiles = n_tiles;
    return 0;
}

void cpu__attention(cpu__backend *c, int layer, const float *q, const be_attn *a, float *out)
{
    int n_heads = a->n_heads;
    const be_batch *b = &c->batch;
    size_t bytes = attn_scratch_floats(&c->kv, n_heads / c->kv.n_kv_heads) * sizeof(float);
    int rc = c->batch.n_seqs && !c->attn_n_tiles ? -ENOMEM : 0; /* begin could not plan */
    for (int i = 0; i < c->n_threads && !rc; i++) rc = cpu__scratch_reserve(&c->scratch[i], bytes);
    if (rc) {
        /* Out of memory for a few KiB of scratch: poison the output rather than crash. */
        size_t n = (size_t)b->n_tokens * n_heads * c->kv.head_dim;
        for (size_t k = 0; k < n; k++) out[k] = NAN;
        return;
    }
    attn_task t = {c, layer, q, n_heads, a, out, c->tiles.p, c->attn_n_tiles, plan_gtoks(c)};
    cpu__pool_for(c->pool, t.n_tiles * c->kv.n_kv_heads, 1, attn_run, &t);
}
