/*
 * attention.c — the CPU backend's paged KV cache: writing new K/V into their slots and causal
 * attention over the cache with GQA grouping and an online softmax.
 *
 * KV layout (per layer, K and V separately): [n_blocks][n_kv_heads][block_size][head_dim] in the
 * arena's dtype (f16, bf16 or f32). One (block, kv head) pair is thus a contiguous
 * block_size × head_dim tile: attention converts a whole tile to f32 with a few wide loads and
 * then works from L1, and a block copy is one memcpy per layer and per K/V.
 *
 * Attention work is one task per (token, kv head): the task handles the kv head's whole group of
 * query heads (n_heads / n_kv_heads of them), so every K/V tile is loaded and converted once for
 * the group. Token i of sequence s sits at KV index ctx_len[s] - n_new[s] + i and attends to KV
 * entries 0 .. that index inclusive (the causal rule of engine/backend.h). Tasks are dealt out
 * round-robin so that the long (late) rows of a prefill chunk spread over the threads.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/internal.h"
#include "engine/dtype.h"

#if defined(__AVX512F__) || defined(__F16C__)
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

void cpu__store_kv(cpu__backend *c, int layer, const float *k, const float *v)
{
    const kv_geom *g = &c->kv;
    const be_batch *b = &c->batch;
    size_t eb = kv_dtype_bytes(g->dtype);
    int kv_dim = g->n_kv_heads * g->head_dim;
    char *kb = cpu__kv_k(c, layer), *vb = cpu__kv_v(c, layer);
    for (int i = 0; i < b->n_tokens; i++) {
        int32_t slot = b->slots[i], blk = slot / g->block_size, off = slot % g->block_size;
        for (int h = 0; h < g->n_kv_heads; h++) {
            size_t at = (((size_t)blk * g->n_kv_heads + h) * g->block_size + off) * g->head_dim * eb;
            f32_to_kv(g->dtype, k + (size_t)i * kv_dim + (size_t)h * g->head_dim, kb + at, g->head_dim);
            f32_to_kv(g->dtype, v + (size_t)i * kv_dim + (size_t)h * g->head_dim, vb + at, g->head_dim);
        }
    }
}

/* ---- attention ----------------------------------------------------------------------------- */

typedef struct attn_task {
    cpu__backend *c;
    int layer;
    const float *q;
    int n_heads;
    float *out;
} attn_task;

static float dot_f32(const float *a, const float *b, int n)
{
    int i = 0;
    float s = 0;
#ifdef __AVX512F__
    if (n >= 16) {
        __m512 acc = _mm512_setzero_ps();
        for (; i + 16 <= n; i += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
        s = _mm512_reduce_add_ps(acc);
    }
#endif
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y = y * a + p * x over n floats. */
static void scale_axpy(float *y, float a, float p, const float *x, int n)
{
    int i = 0;
#ifdef __AVX512F__
    __m512 va = _mm512_set1_ps(a), vp = _mm512_set1_ps(p);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(vp, _mm512_loadu_ps(x + i),
                                                _mm512_mul_ps(va, _mm512_loadu_ps(y + i))));
#endif
    for (; i < n; i++) y[i] = y[i] * a + p * x[i];
}

/* Size in floats of a thread's scratch for a group of gq query heads. */
static size_t attn_scratch_floats(const kv_geom *g, int gq)
{
    return 2 * (size_t)g->block_size * g->head_dim + (size_t)gq * g->block_size +
           (size_t)gq * g->head_dim + 2 * (size_t)gq + 64;
}

/* One (token, kv head) pair: the group's gq query heads over KV entries 0 .. kvpos. */
static void attn_one(const attn_task *t, float *scr, int i, int kvh)
{
    cpu__backend *c = t->c;
    const kv_geom *g = &c->kv;
    const be_batch *b = &c->batch;
    int hd = g->head_dim, bs = g->block_size, gq = t->n_heads / g->n_kv_heads;
    int s = b->n_seqs ? c->tok_seq[i] : 0, n_ctx = c->tok_kvpos[i] + 1;
    const int32_t *bt = b->block_table + (size_t)s * b->bt_stride;
    size_t eb = kv_dtype_bytes(g->dtype), tile = (size_t)bs * hd;
    const char *kb = cpu__kv_k(c, t->layer), *vb = cpu__kv_v(c, t->layer);
    float *kt = scr, *vt = kt + tile, *sc = vt + tile, *acc = sc + (size_t)gq * bs;
    float *mx = acc + (size_t)gq * hd, *l = mx + gq;
    float scale = 1.0f / sqrtf((float)hd);
    const float *q = t->q + ((size_t)i * t->n_heads + (size_t)kvh * gq) * hd;

    for (int h = 0; h < gq; h++) {
        mx[h] = -FLT_MAX;
        l[h] = 0;
    }
    memset(acc, 0, (size_t)gq * hd * sizeof(float));
    for (int j0 = 0; j0 < n_ctx; j0 += bs) {
        int n = n_ctx - j0 < bs ? n_ctx - j0 : bs;
        size_t at = ((size_t)bt[j0 / bs] * g->n_kv_heads + kvh) * tile * eb;
        kv_to_f32(g->dtype, kb + at, kt, (int64_t)n * hd);
        kv_to_f32(g->dtype, vb + at, vt, (int64_t)n * hd);
        for (int h = 0; h < gq; h++) {
            float *sh = sc + (size_t)h * bs, m = mx[h];
            for (int j = 0; j < n; j++) {
                sh[j] = dot_f32(q + (size_t)h * hd, kt + (size_t)j * hd, hd) * scale;
                if (sh[j] > m) m = sh[j];
            }
            float corr = expf(mx[h] - m), sum = 0;
            float *ah = acc + (size_t)h * hd;
            for (int j = 0; j < n; j++) {
                float p = expf(sh[j] - m);
                sum += p;
                scale_axpy(ah, j == 0 ? corr : 1.0f, p, vt + (size_t)j * hd, hd);
            }
            l[h] = l[h] * corr + sum;
            mx[h] = m;
        }
    }
    float *o = t->out + ((size_t)i * t->n_heads + (size_t)kvh * gq) * hd;
    for (int h = 0; h < gq; h++)
        for (int d = 0; d < hd; d++) o[(size_t)h * hd + d] = acc[(size_t)h * hd + d] / l[h];
}

static void attn_run(void *v, int ith, int nth)
{
    attn_task *t = v;
    int n_kv = t->c->kv.n_kv_heads;
    int64_t n_tasks = (int64_t)t->c->batch.n_tokens * n_kv;
    float *scr = t->c->scratch[ith].p;
    for (int64_t k = ith; k < n_tasks; k += nth) attn_one(t, scr, (int)(k / n_kv), (int)(k % n_kv));
}

void cpu__attention(cpu__backend *c, int layer, const float *q, int n_heads, float *out)
{
    size_t bytes = attn_scratch_floats(&c->kv, n_heads / c->kv.n_kv_heads) * sizeof(float);
    for (int i = 0; i < c->n_threads; i++) {
        int rc = cpu__scratch_reserve(&c->scratch[i], bytes);
        if (rc) {
            /* Out of memory for a few KiB of scratch: poison the output rather than crash. */
            size_t n = (size_t)c->batch.n_tokens * n_heads * c->kv.head_dim;
            for (size_t k = 0; k < n; k++) out[k] = NAN;
            return;
        }
    }
    attn_task t = {c, layer, q, n_heads, out};
    if (c->batch.n_tokens * c->kv.n_kv_heads == 1)
        attn_run(&t, 0, 1);
    else
        cpu__pool_run(c->pool, attn_run, &t);
}
