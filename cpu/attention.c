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
 * share every K and V vector load (scores and P·V as small register-blocked products). Token i
 * of sequence s sits at KV index ctx_len[s] - n_new[s] + i and attends to KV entries 0 .. that
 * index inclusive (the causal rule of engine/backend.h). Threads take tasks one at a time, kv head by kv head and latest tile
 * first within a head, so that a head's K/V stays cached across its tiles and the long rows of
 * a prefill chunk spread evenly.
 *
 * Attention sinks (a window that moved, backend.h): a sequence's first sinks[s] entries are one
 * span met by be_attn.q_sink, the rest another met by q; such sequences take neither the decode
 * fast path nor a shared-prefix group (members' sinks would meet different queries).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "model/dtype.h"

#define KCH CPU__ATTN_KCH
#define AR CPU__ATTN_AR

/* ---- scalar reference kernels ---------------------------------------------------------------- */

static void kv_to_f32_scalar(int dtype, const void *src, size_t src_stride, float *dst, size_t dst_stride,
                             int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        float *d = dst + (size_t)r * dst_stride;
        if (dtype == KV_F32) {
            memcpy(d, (const float *)src + (size_t)r * src_stride, (size_t)n * 4);
            continue;
        }
        const uint16_t *s = (const uint16_t *)src + (size_t)r * src_stride;
        for (int i = 0; i < n; i++) d[i] = dtype == KV_F16 ? dt_f16_to_f32(s[i]) : dt_bf16_to_f32(s[i]);
    }
}

/* The value of one quantised code (int8, or e4m3 through its codec). */
static inline float kvq_code(int dtype, uint8_t c)
{
    return dtype == KV_I8 ? (float)(int8_t)c : kv_e4m3_decode(c);
}

/* The f16 scale at p (little-endian, any alignment). */
static inline float kvq_scale(const uint8_t *p)
{
    return dt_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static void kvq_to_f32_scalar(int dtype, const uint8_t *src, size_t src_stride, const uint8_t *scales, int per_col,
                              float *dst, size_t dst_stride, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const uint8_t *s = src + (size_t)r * src_stride;
        float *d = dst + (size_t)r * dst_stride, sr = per_col ? 0.0f : kvq_scale(scales + KV_SCALE_BYTES * r);
        for (int i = 0; i < n; i++) d[i] = kvq_code(dtype, s[i]) * (per_col ? kvq_scale(scales + KV_SCALE_BYTES * i) : sr);
    }
}

static void f32_to_kv_scalar(int dtype, const float *src, void *dst, int64_t n)
{
    if (dtype == KV_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = dtype == KV_F16 ? dt_f32_to_f16(src[i]) : dt_f32_to_bf16(src[i]);
}

/* Row by row: scores against the transposed chunk (soft-capped when cap > 0), the online-softmax
 * update over the keys the row sees, then P·V (keys outside get probability 0). */
static void attn_chunk_scalar(int ar, const float *const *qa, const int *lo, const int *nv, int nmax,
                              const float *kt, const float *vt, int hd, float scale, float cap, float *S,
                              float *mx, float *l, float *acc)
{
    for (int a = 0; a < ar; a++) {
        int n = nv[a], s = lo[a];
        if (s >= n) continue;
        float *sc = S + (size_t)a * KCH, m = mx[a], sum = 0;
        for (int j = s; j < n; j++) {
            float v = 0;
            for (int d = 0; d < hd; d++) v += qa[a][d] * kt[(size_t)d * KCH + j];
            v *= scale;
            sc[j] = cap > 0.0f ? be_softcap(v, cap) : v;
            m = sc[j] > m ? sc[j] : m;
        }
        float corr = m == mx[a] ? 1.0f : expf(mx[a] - m);
        for (int j = s; j < n; j++) sum += sc[j] = expf(sc[j] - m);
        l[a] = l[a] * corr + sum;
        mx[a] = m;
        float *o = acc + (size_t)a * hd;
        for (int d = 0; d < hd; d++) {
            float v = o[d] * corr;
            for (int j = s; j < n; j++) v += sc[j] * vt[(size_t)j * hd + d];
            o[d] = v;
        }
    }
}

void cpu__attention_fill_scalar(cpu__kern *k)
{
    k->kv_to_f32 = kv_to_f32_scalar;
    k->f32_to_kv = f32_to_kv_scalar;
    k->kvq_to_f32 = kvq_to_f32_scalar;
    k->attn_chunk = attn_chunk_scalar;
    k->attn_isa = CPU_ISA_SCALAR;
}

/* ---- store_kv ------------------------------------------------------------------------------ */

/* The scale rule of cache/kv.h (amax / QMAX rounded up to an f16): the f16 bits, and in *inv the
 * reciprocal of its value (0 when it is 0) that encodes the vector's codes. */
static uint16_t kvq_scale_of(int dtype, const float *x, int n, float *inv)
{
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = kv_quant_scale(dtype, amax);
    uint16_t h = dt_f32_to_f16(s);
    if (dt_f16_to_f32(h) < s && h < 0x7c00u) h++;
    float d = dt_f16_to_f32(h);
    *inv = d > 0.0f && d < INFINITY ? 1.0f / d : 0.0f;
    return h;
}

static inline uint8_t kvq_encode(int dtype, float x, float inv)
{
    return dtype == KV_I8 ? (uint8_t)kv_i8_encode(x, inv) : kv_e4m3_encode(x * inv);
}

/* One token's K and V vectors of kv head h into the quantised tiles kt and vt (each block_size
 * × head_dim codes then block_size f16 scales) at offset off: K transposed, V row-major. */
static void store_kv_quant(const kv_geom *g, uint8_t *kt, uint8_t *vt, int off, const float *kr, const float *vr)
{
    int hd = g->head_dim, bs = g->block_size;
    float inv;
    uint16_t sk = kvq_scale_of(g->dtype, kr, hd, &inv);
    for (int d = 0; d < hd; d++) kt[(size_t)d * bs + off] = kvq_encode(g->dtype, kr[d], inv);
    uint8_t *ks = kt + (size_t)bs * hd + KV_SCALE_BYTES * off;
    ks[0] = (uint8_t)(sk & 0xff), ks[1] = (uint8_t)(sk >> 8);
    uint16_t sv = kvq_scale_of(g->dtype, vr, hd, &inv);
    for (int e = 0; e < hd; e++) vt[(size_t)off * hd + e] = kvq_encode(g->dtype, vr[e], inv);
    uint8_t *vs = vt + (size_t)bs * hd + KV_SCALE_BYTES * off;
    vs[0] = (uint8_t)(sv & 0xff), vs[1] = (uint8_t)(sv >> 8);
}

#define KROW 256 /* elements of a K row converted at a time */

/* Where KV entry `off` of a block lives: K tiles are [head_dim][block_size] (element (off, d) at
 * d * block_size + off), V tiles [block_size][head_dim]; a quantised tile's block_size f16
 * scales follow its codes. */
void cpu__store_kv(cpu__backend *c, int layer, const float *k, const float *v)
{
    const kv_geom *g = &c->kv;
    const cpu__batch *b = &c->batch;
    if (kv_dtype_is_quant(g->dtype)) {
        int kv_dim = g->n_kv_heads * g->head_dim, bs = g->block_size;
        size_t tb = kv_tile_bytes(g);
        uint8_t *kb = cpu__kv_k(c, layer), *vb = cpu__kv_v(c, layer);
        for (int i = 0; i < b->n_tokens; i++) {
            int32_t slot = b->slots[i], blk = slot / bs;
            if (slot < 0) continue; /* a token that stores nothing (backend.h) */
            for (int h = 0; h < g->n_kv_heads; h++) {
                size_t at = ((size_t)blk * g->n_kv_heads + h) * tb, x = (size_t)i * kv_dim + (size_t)h * g->head_dim;
                store_kv_quant(g, kb + at, vb + at, slot % bs, k + x, v + x);
            }
        }
        return;
    }
    size_t eb = kv_dtype_bytes(g->dtype), tile = (size_t)g->block_size * g->head_dim;
    int kv_dim = g->n_kv_heads * g->head_dim, hd = g->head_dim, bs = g->block_size;
    char *kb = cpu__kv_k(c, layer), *vb = cpu__kv_v(c, layer);
    for (int i = 0; i < b->n_tokens; i++) {
        int32_t slot = b->slots[i], blk = slot / bs, off = slot % bs;
        if (slot < 0) continue;
        for (int h = 0; h < g->n_kv_heads; h++) {
            size_t at = ((size_t)blk * g->n_kv_heads + h) * tile;
            const float *kr = k + (size_t)i * kv_dim + (size_t)h * hd;
            char *kt = kb + at * eb;
            /* K is stored transposed: convert the row with the level's kernel, then scatter */
            for (int d0 = 0; d0 < hd; d0 += KROW) {
                int n = hd - d0 < KROW ? hd - d0 : KROW;
                uint32_t row[KROW];
                c->k.f32_to_kv(g->dtype, kr + d0, row, n);
                size_t e = (size_t)d0 * bs + off;
                if (eb == 4)
                    for (int d = 0; d < n; d++) ((uint32_t *)kt)[e + (size_t)d * bs] = row[d];
                else
                    for (int d = 0; d < n; d++) ((uint16_t *)kt)[e + (size_t)d * bs] = ((const uint16_t *)row)[d];
            }
            c->k.f32_to_kv(g->dtype, v + (size_t)i * kv_dim + (size_t)h * hd,
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

/* Size in floats of a thread's scratch for a group of gq query heads. */
static size_t attn_scratch_floats(const kv_geom *g, int gq)
{
    size_t hd = (size_t)g->head_dim;
    size_t general = 2 * hd * KCH + 4 * KCH /* AR rows of scores */ + 2 * (size_t)QT * gq + (size_t)QT * gq * hd;
    size_t direct = (size_t)(g->block_size > 256 ? g->block_size : 256) + hd; /* attn_row_f16 */
    return (general > direct ? general : direct) + 64;
}

/* The first KV index a query at KV index kvpos sees: kvpos − window + 1 in a sliding-window
 * layer, else 0. */
static inline int row_lo(const attn_task *t, int kvpos)
{
    int lo = t->a->window > 0 ? kvpos - t->a->window + 1 : 0;
    return lo > 0 ? lo : 0;
}

/* Converts KV entries [j0, j0 + n) of one kv head of a sequence (n ≤ KCH) into kt (transposed,
 * row stride KCH) and vt, block segment by block segment. */
static void gather_kv(const cpu__backend *c, const char *kb, const char *vb, const int32_t *bt, int kvh,
                      int j0, int n, int n_ctx, float *kt, float *vt)
{
    const kv_geom *g = &c->kv;
    int hd = g->head_dim, bs = g->block_size, quant = kv_dtype_is_quant(g->dtype);
    size_t eb = kv_dtype_bytes(g->dtype), tile = (size_t)bs * hd, tb = kv_tile_bytes(g);
    /* Blocks are scattered, so the hardware prefetcher cannot guess the next tiles: while
     * converting a block, request the one about a chunk (KCH keys) ahead, into L2. Measured
     * ~10% faster on streamed shared-prefix decodes than fetching the next chunk in a burst. */
    int ahead = KCH / bs > 1 ? KCH / bs : 1;
    for (int j = j0; j < j0 + n;) {
        int off = j % bs, len = bs - off < j0 + n - j ? bs - off : j0 + n - j;
        size_t at = ((size_t)bt[j / bs] * g->n_kv_heads + kvh) * tile;
        if ((j / bs + ahead) * bs < n_ctx) {
            size_t nx = ((size_t)bt[j / bs + ahead] * g->n_kv_heads + kvh) * tb;
            for (size_t o = 0; o < tb; o += 64) {
                __builtin_prefetch(kb + nx + o, 0, 2);
                __builtin_prefetch(vb + nx + o, 0, 2);
            }
        }
        if (quant) { /* codes times their vector's scale, straight into the f32 buffers */
            const uint8_t *kq = (const uint8_t *)kb + ((size_t)bt[j / bs] * g->n_kv_heads + kvh) * tb;
            const uint8_t *vq = (const uint8_t *)vb + ((size_t)bt[j / bs] * g->n_kv_heads + kvh) * tb;
            c->k.kvq_to_f32(g->dtype, kq + off, (size_t)bs, kq + tile + KV_SCALE_BYTES * off, 1, kt + (j - j0), KCH, hd,
                            len);
            c->k.kvq_to_f32(g->dtype, vq + (size_t)off * hd, (size_t)hd, vq + tile + KV_SCALE_BYTES * off, 0,
                            vt + (size_t)(j - j0) * hd, (size_t)hd, len, hd);
            j += len;
            continue;
        }
        c->k.kv_to_f32(g->dtype, kb + (at + (size_t)off) * eb, (size_t)bs, kt + (j - j0), KCH, hd, len);
        c->k.kv_to_f32(g->dtype, vb + (at + (size_t)off * hd) * eb, 0, vt + (size_t)(j - j0) * hd, 0, 1, len * hd);
        j += len;
    }
}

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
    for (int j0 = ja; j0 < jb; j0 += KCH) {
        int n = jb - j0 < KCH ? jb - j0 : KCH;
        gather_kv(c, kb, vb, bt, kvh, j0, n, jb, kt, vt);
        for (int r = r0; r < r1; r += AR) {
            int ar = r1 - r < AR ? r1 - r : AR, lo[AR], nv[AR], nmax = 0;
            const float *qa[AR];
            for (int a = 0; a < ar; a++) {
                int i = row_tok(rm, (r + a) / gq), v = c->tok_kvpos[i] + 1 - j0, s0 = row_lo(t, c->tok_kvpos[i]) - j0;
                nv[a] = v < 0 ? 0 : v > n ? n : v;
                lo[a] = s0 > 0 ? s0 : 0;
                nmax = nv[a] > nmax ? nv[a] : nmax;
                qa[a] = t->q + ((size_t)i * t->n_heads + (size_t)kvh * gq + (r + a) % gq) * hd;
            }
            c->k.attn_chunk(ar, qa, lo, nv, nmax, kt, vt, hd, t->a->scale, t->a->softcap, sc, mx + r, l + r,
                            acc + (size_t)r * hd);
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
    const cpu__batch *b = &c->batch;
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
        const int32_t *bt = b->block_table + (size_t)tl->seq * b->bt_stride;
        int lo = row_lo(t, c->tok_kvpos[tl->i0]), hi = c->tok_kvpos[tl->i1 - 1] + 1;
        int n_sink = b->sinks ? b->sinks[tl->seq] : 0;
        if (n_sink > lo) { /* attention sinks: met by the queries rotated to their cache position */
            attn_task ts = *t;
            ts.q = t->a->q_sink;
            attn_span(&ts, scr, &rm, kvh, bt, lo, n_sink < hi ? n_sink : hi, 0, rows, mx, l, acc);
            lo = n_sink;
        }
        if (lo < hi) attn_span(t, scr, &rm, kvh, bt, lo, hi, 0, rows, mx, l, acc);
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
 * the queue ends with the short early rows of a prefill chunk, which fill in evenly. A single
 * row without grouping takes the level's decode path when it has one for the arena's dtype. */
static void attn_run(void *v, int64_t lo, int64_t hi, int ith)
{
    attn_task *t = v;
    cpu__backend *c = t->c;
    const kv_geom *g = &c->kv;
    float *scr = c->scratch[ith].p;
    void (*decode)(const cpu__attn_row *) = g->block_size % 16 == 0 && t->n_heads == g->n_kv_heads
                                                ? c->k.attn_decode[g->dtype] : NULL;
    for (int64_t k = lo; k < hi; k++) {
        const attn_tile *tl = &t->tiles[t->n_tiles - 1 - k % t->n_tiles];
        int kvh = (int)(k / t->n_tiles);
        if (decode && !tl->shared && tl->i1 - tl->i0 == 1 && !(c->batch.sinks && c->batch.sinks[tl->seq])) {
            int i = tl->i0;
            const cpu__batch *b = &c->batch;
            cpu__attn_row a = {cpu__kv_k(c, t->layer), cpu__kv_v(c, t->layer),
                               b->block_table + (size_t)tl->seq * b->bt_stride, row_lo(t, c->tok_kvpos[i]),
                               c->tok_kvpos[i] + 1, g->head_dim, g->block_size, g->n_kv_heads, kvh,
                               t->a->scale, t->a->softcap,
                               t->q + ((size_t)i * t->n_heads + kvh) * g->head_dim,
                               t->out + ((size_t)i * t->n_heads + kvh) * g->head_dim, scr};
            decode(&a);
            continue;
        }
        attn_tile_run(t, scr, tl, kvh);
    }
}

/* ---- the per-step plan ----------------------------------------------------------------------- */

/* Rows of at most this many new tokens are computed token by token (speculative decoding's
 * verify rows: a last token and up to 16 drafts, engine/spec.h). */
#define EXACT_ROWS 17

/* Fewest KV entries worth sharing: below this a group's conversion saving does not pay for
 * giving up the single-row f16 path. */
#define GROUP_MIN_SHARED 64

typedef struct plan_ctx {
    const cpu__batch *b;
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
static size_t plan_max_tiles(const cpu__batch *b)
{
    return (size_t)b->n_tokens + (size_t)b->n_seqs;
}

static int32_t *plan_gtoks(const cpu__backend *c)
{
    return (int32_t *)((attn_tile *)c->tiles.p + plan_max_tiles(&c->batch));
}

int cpu__attention_plan(cpu__backend *c)
{
    const cpu__batch *b = &c->batch;
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
        if (b->q_start[s + 1] - b->q_start[s] == 1 && b->ctx_len[s] > GROUP_MIN_SHARED && !(b->sinks && b->sinks[s])) {
            dec[n_dec++] = s;
            continue;
        }
        /* A short row (a speculative verify row: its last token and a few drafts) is cut into
         * single tokens, so that each takes the path a one-token decode of the same position
         * takes (the level's decode path where it has one) and computes bit for bit what plain
         * decoding computes. */
        int qt = b->q_start[s + 1] - b->q_start[s] <= EXACT_ROWS ? 1 : QT;
        for (int i0 = b->q_start[s]; i0 < b->q_start[s + 1]; i0 += qt) {
            int i1 = i0 + qt < b->q_start[s + 1] ? i0 + qt : b->q_start[s + 1];
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
    const cpu__batch *b = &c->batch;
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
