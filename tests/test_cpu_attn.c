/*
 * test_cpu_attn.c — the CPU backend's paged KV cache: store_kv, causal GQA attention over
 * random (non-contiguous) block tables, and kv_copy_block, against a float64 reference; with the
 * per-layer attention parameters too (scale, soft-cap, sliding windows of 1 to more than the
 * context, also across block boundaries and shared-prefix groups).
 *
 * The batch mixes the cases the engine produces in one step: a prefill chunk on top of a cached
 * prefix, decode tokens of other sequences, a fresh prefill, a one-token sequence and a long
 * chunk (more new tokens than the kernel's query tile), at every SIMD level this machine
 * supports. The reference sees the K/V values after rounding to the arena's dtype (quantising
 * int8 / e4m3 vectors by the rule of cache/kv.h), so the tolerance only covers f32 arithmetic,
 * derived from it (cpua_tol); attention sinks met by their own queries too, learned per-head sink
 * logits (gpt-oss) and the latent layout of MLA (one vector per token that is key and value).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kv.h"
#include "cpu/internal.h"
#include "engine/backend.h"
#include "model/dtype.h"
#include "tests/test_util.h"

static uint64_t cpua_rng;

static float cpua_rand(void)
{
    cpua_rng ^= cpua_rng << 13;
    cpua_rng ^= cpua_rng >> 7;
    cpua_rng ^= cpua_rng << 17;
    float f = (float)((cpua_rng >> 20) % 2000001u) / 1000000.0f - 1.0f;
    return f == 0.0f ? 0.25f : f;
}

static float cpua_round(int dtype, float f)
{
    if (dtype == KV_F16) return dt_f16_to_f32(dt_f32_to_f16(f));
    if (dtype == KV_BF16) return dt_bf16_to_f32(dt_f32_to_bf16(f));
    return f;
}

/* A copy of n_rows rows of kv_dim values as an arena of dtype holds them: rounded element by
 * element, or quantised per head vector of hd by the rule of cache/kv.h (the scale max|x| / QMAX
 * rounded up to an f16, int8 or e4m3 codes); a code times its f16 scale is exact in f32. */
static float *cpua_kv_rounded(int dtype, const float *src, int n_rows, int kv_dim, int hd)
{
    float *dst = malloc((size_t)n_rows * kv_dim * sizeof *dst);
    for (int r = 0; r < n_rows; r++)
        for (int h = 0; h < kv_dim / hd; h++) {
            const float *x = src + (size_t)r * kv_dim + (size_t)h * hd;
            float *y = dst + (size_t)r * kv_dim + (size_t)h * hd, amax = 0;
            if (!kv_dtype_is_quant(dtype)) {
                for (int e = 0; e < hd; e++) y[e] = cpua_round(dtype, x[e]);
                continue;
            }
            for (int e = 0; e < hd; e++) amax = fmaxf(amax, fabsf(x[e]));
            float sq = kv_quant_scale(dtype, amax);
            uint16_t hs = dt_f32_to_f16(sq);
            if (dt_f16_to_f32(hs) < sq) hs++;
            float d = dt_f16_to_f32(hs), inv = d > 0 ? 1 / d : 0;
            for (int e = 0; e < hd; e++)
                y[e] = d * (dtype == KV_I8 ? (float)kv_i8_encode(x[e], inv) : kv_e4m3_decode(kv_e4m3_encode(x[e] * inv)));
        }
    return dst;
}

typedef struct cpua_case {
    int head_dim, gqa, block_size, dtype, threads;
    float scale;   /* 0: 1/sqrt(head_dim) */
    float softcap; /* 0: off */
    int window;    /* 0: full causal */
    int sinks;     /* > 0: sequences longer than this meet their first `sinks` entries with q_sink */
    int learned;   /* 1: a learned sink logit per head (be_attn.head_sinks) */
    int latent;    /* > 0: the latent layout (one kv head, the vector is also the value) */
} cpua_case;

static be_attn cpua_attn(const cpua_case *tc, int n_heads)
{
    be_attn a = {n_heads, tc->scale > 0 ? tc->scale : 1.0f / sqrtf((float)tc->head_dim), tc->softcap,
                 tc->window, NULL, NULL};
    return a;
}

static double cpua_gamma(double n)
{
    const double u = 0x1p-24;
    return n * u / (1 - n * u);
}

/* Reference attention of one query row in float64 and its error bound. q [hd]; the query at KV
 * index last sees keys first .. last (first > 0 in a window), whose K and V are at kr[j] and
 * vr[j] (rounded here to the arena's dtype). Scores are f32 sums of hd products scaled once
 * (γ_{hd+3} of scale · Σ|q k|, the subtraction of the running max included); a soft-cap
 * (derivative ≤ 1) passes that on and adds a division, tanhf and a product (3u · cap). The
 * softmax and P·V are f32 sums over n keys with an exp of a few ulp and one rescale per chunk
 * of 16 or more keys (γ_{n + n/16 + 16}); an error δ in a score moves the output by at most
 * 2δ · Σ p|v|. Writes out_ref[hd] and tol[hd]. */
static void cpua_ref_row(const cpua_case *tc, const float *q, const float *qs, int n_sink, int last,
                         const float *const *kr, const float *const *vr, const float *hsink, double *sc,
                         double *out_ref, double *tol)
{
    int hd = tc->head_dim, dtype = kv_dtype_is_quant(tc->dtype) ? KV_F32 : tc->dtype; /* quantised: kr is rounded */
    double scale = tc->scale > 0 ? tc->scale : 1.0 / sqrt((double)hd), m = -INFINITY, l = 0, mag = 0;
    int first = tc->window > 0 && last - tc->window + 1 > 0 ? last - tc->window + 1 : 0, n = last + 1 - first;
    for (int j = first; j <= last; j++) {
        double d = 0, a = 0;
        const float *qq = j < n_sink ? qs : q; /* attention sinks meet their own queries */
        for (int e = 0; e < hd; e++) {
            double k = cpua_round(dtype, kr[j][e]);
            d += (double)qq[e] * k;
            a += fabs((double)qq[e] * k);
        }
        sc[j] = d * scale;
        if (tc->softcap > 0) sc[j] = tc->softcap * tanh(sc[j] / tc->softcap);
        mag = fmax(mag, a * scale);
        m = fmax(m, sc[j]);
    }
    if (hsink) m = fmax(m, *hsink);
    for (int j = first; j <= last; j++) l += exp(sc[j] - m);
    if (hsink) l += exp(*hsink - m); /* a learned sink: mass in the denominator, no value */
    double ds = cpua_gamma(hd + 3) * mag + (tc->softcap > 0 ? 3 * 0x1p-24 * tc->softcap : 0);
    double dr = cpua_gamma(n + n / 16 + 16);
    for (int e = 0; e < hd; e++) {
        double r = 0, w = 0;
        for (int j = first; j <= last; j++) {
            double p = exp(sc[j] - m) / l, v = cpua_round(dtype, vr[j][e]);
            r += p * v;
            w += p * fabs(v);
        }
        out_ref[e] = r;
        tol[e] = w * (2 * ds + 2 * dr) + 1e-30;
    }
}

#define CPUA_NSEQ 5


static void cpua_run(const cpua_case *tc)
{
    const int ctx[CPUA_NSEQ] = {23, 300, 5, 1, 150}, n_new[CPUA_NSEQ] = {7, 1, 5, 1, 37}; /* 300: > 256 keys */
    int n_kv = tc->latent ? 1 : 2, n_heads = n_kv * tc->gqa, hd = tc->head_dim, bs = tc->block_size;
    int kv_dim = n_kv * hd, q_dim = n_heads * hd;
    cpua_rng = 0x1234567ull + (uint64_t)(hd * 131 + tc->gqa * 17 + bs * 3 + tc->dtype + 5 * tc->learned) * 7919;
    uint64_t seed = cpua_rng;
    float hsink[64];
    for (int h = 0; h < n_heads; h++) hsink[h] = 3.0f * cpua_rand(); /* of the scores' order */

    /* Random block tables: a shuffled list of block ids dealt to the sequences. */
    int bt_stride = 0, n_blocks = 2; /* 2 spare blocks for the copy test */
    for (int s = 0; s < CPUA_NSEQ; s++) {
        int nb = (ctx[s] + bs - 1) / bs;
        n_blocks += nb;
        if (nb > bt_stride) bt_stride = nb;
    }
    int32_t *perm = malloc((size_t)n_blocks * 4), *bt = calloc((size_t)CPUA_NSEQ * bt_stride, 4);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)((cpua_rng >> 11) % (uint64_t)(i + 1));
        cpua_rand();
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int used = 0;
    for (int s = 0; s < CPUA_NSEQ; s++)
        for (int b = 0; b < (ctx[s] + bs - 1) / bs; b++) bt[s * bt_stride + b] = perm[used++];
    int32_t spare = perm[used];

    /* Every KV entry's K and V (as the arena will hold them), and every entry's slot. */
    int total = 0, q_start[CPUA_NSEQ + 1], base[CPUA_NSEQ];
    for (int s = 0; s < CPUA_NSEQ; s++) {
        base[s] = total;
        total += ctx[s];
    }
    float *K = malloc((size_t)total * kv_dim * 4), *V = malloc((size_t)total * kv_dim * 4);
    int32_t *slot = malloc((size_t)total * 4);
    for (int s = 0; s < CPUA_NSEQ; s++)
        for (int j = 0; j < ctx[s]; j++) {
            slot[base[s] + j] = bt[s * bt_stride + j / bs] * bs + j % bs;
            for (int d = 0; d < kv_dim; d++) {
                K[(size_t)(base[s] + j) * kv_dim + d] = cpua_rand() * 2.0f;
                V[(size_t)(base[s] + j) * kv_dim + d] = cpua_rand();
                if (tc->latent) V[(size_t)(base[s] + j) * kv_dim + d] = K[(size_t)(base[s] + j) * kv_dim + d];
            }
        }

    /* The cached prefixes (every entry but the new tokens) and the step's new tokens. */
    int n_hist = 0, n_tok = 0;
    float *hk = malloc((size_t)total * kv_dim * 4), *hv = malloc((size_t)total * kv_dim * 4);
    int32_t *hslot = malloc((size_t)total * 4);
    for (int s = 0; s < CPUA_NSEQ; s++)
        for (int j = 0; j < ctx[s] - n_new[s]; j++, n_hist++) {
            memcpy(hk + (size_t)n_hist * kv_dim, K + (size_t)(base[s] + j) * kv_dim, (size_t)kv_dim * 4);
            memcpy(hv + (size_t)n_hist * kv_dim, V + (size_t)(base[s] + j) * kv_dim, (size_t)kv_dim * 4);
            hslot[n_hist] = slot[base[s] + j];
        }
    float *nk = malloc((size_t)total * kv_dim * 4), *nv = malloc((size_t)total * kv_dim * 4);
    int32_t *nslot = malloc((size_t)total * 4), *pos = malloc((size_t)total * 4);
    for (int s = 0; s < CPUA_NSEQ; s++) {
        q_start[s] = n_tok;
        for (int j = ctx[s] - n_new[s]; j < ctx[s]; j++, n_tok++) {
            memcpy(nk + (size_t)n_tok * kv_dim, K + (size_t)(base[s] + j) * kv_dim, (size_t)kv_dim * 4);
            memcpy(nv + (size_t)n_tok * kv_dim, V + (size_t)(base[s] + j) * kv_dim, (size_t)kv_dim * 4);
            nslot[n_tok] = slot[base[s] + j];
            pos[n_tok] = j;
        }
    }
    q_start[CPUA_NSEQ] = n_tok;
    float *q = malloc((size_t)n_tok * q_dim * 4), *out = malloc((size_t)n_tok * q_dim * 4);
    float *qs = malloc((size_t)n_tok * q_dim * 4);
    for (size_t i = 0; i < (size_t)n_tok * q_dim; i++) q[i] = cpua_rand();
    for (size_t i = 0; i < (size_t)n_tok * q_dim; i++) qs[i] = cpua_rand();
    int32_t sinks[CPUA_NSEQ], shift[CPUA_NSEQ] = {0};
    for (int s = 0; s < CPUA_NSEQ; s++) sinks[s] = tc->sinks > 0 && ctx[s] > tc->sinks ? tc->sinks : 0;
    float *KR = cpua_kv_rounded(tc->dtype, K, total, kv_dim, hd), *VR = cpua_kv_rounded(tc->dtype, V, total, kv_dim, hd);

    /* Reference in double over the rounded K/V, once for every level. */
    double *ref = malloc((size_t)n_tok * q_dim * sizeof(double)), *tol = malloc((size_t)n_tok * q_dim * sizeof(double));
    double *sc = malloc((size_t)total * sizeof(double));
    const float **kr = malloc((size_t)total * sizeof *kr), **vr = malloc((size_t)total * sizeof *vr);
    for (int s = 0; s < CPUA_NSEQ; s++)
        for (int i = q_start[s]; i < q_start[s + 1]; i++)
            for (int h = 0; h < n_heads; h++) {
                size_t at = ((size_t)i * n_heads + h) * hd;
                for (int j = 0; j <= pos[i]; j++) {
                    kr[j] = KR + (size_t)(base[s] + j) * kv_dim + (h / tc->gqa) * hd;
                    vr[j] = VR + (size_t)(base[s] + j) * kv_dim + (h / tc->gqa) * hd;
                }
                cpua_ref_row(tc, q + at, qs + at, sinks[s], pos[i], kr, vr, tc->learned ? &hsink[h] : NULL, sc,
                             ref + at, tol + at);
            }

    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++) {
        backend *be = tu_cpu_backend(&lv[li], tc->threads);
        kv_geom g = {.n_layers = 2, .n_kv_heads = n_kv, .head_dim = hd, .block_size = bs, .dtype = tc->dtype,
                     .latent = tc->latent};
        cr_assert_eq(be->ops->kv_init(be, &g, &n_blocks), 0);
        /* A store-only step writes the cached prefixes; layer 0 gets different values so that
         * a layer mix-up shows. */
        be_batch hb = {.n_tokens = n_hist, .n_seqs = 0, .n_kv = 1, .kv = {{.slots = hslot}}};
        cr_assert_eq(be->ops->begin(be, &hb), 0);
        be->ops->store_kv(be, 1, hk, tc->latent ? NULL : hv);
        be->ops->store_kv(be, 0, hv, tc->latent ? NULL : hk);
        /* The step: new tokens of every sequence, their K/V stored, then attention. */
        be_batch b = {.n_tokens = n_tok, .tokens = pos, .positions = pos, .n_seqs = CPUA_NSEQ, .q_start = q_start, .n_logits = 0, .logit_rows = pos, .n_kv = 1, .kv = {{.slots = nslot, .ctx_len = ctx, .block_table = bt, .bt_stride = bt_stride}}};
        if (tc->sinks) b.kv[0].sinks = sinks, b.kv[0].sink_shift = shift;
        cr_assert_eq(be->ops->begin(be, &b), 0);
        be->ops->store_kv(be, 1, nk, tc->latent ? NULL : nv);
        be->ops->store_kv(be, 0, nv, tc->latent ? NULL : nk);
        for (size_t i = 0; i < (size_t)n_tok * q_dim; i++) out[i] = NAN;
        be_attn at = cpua_attn(tc, n_heads);
        at.q_sink = qs;
        be_weight hs = {.type = 0, .n_in = n_heads, .n_out = 1, .data = hsink};
        if (tc->learned) at.head_sinks = &hs;
        be->ops->attention(be, 1, q, &at, out);
        for (size_t e = 0; e < (size_t)n_tok * q_dim; e++)
            cr_assert(fabs(out[e] - ref[e]) <= tol[e],
                      "attention at %s hd=%d gqa=%d bs=%d dtype=%s threads=%d scale %g cap %g window %d sinks %d "
                      "seed=%lu: token %zu head %zu dim %zu: got %g want %g (tolerance %g)",
                      lv[li].name, hd, tc->gqa, bs, kv_dtype_name(tc->dtype), tc->threads, (double)at.scale,
                      (double)tc->softcap, tc->window, tc->sinks, (unsigned long)seed,
                      e / q_dim, e % q_dim / hd, e % hd, (double)out[e], ref[e], tol[e]);

        /* kv_copy_block: moving sequence 1's first block to a spare block changes nothing. */
        float *out2 = malloc((size_t)n_tok * q_dim * 4);
        for (size_t i = 0; i < (size_t)n_tok * q_dim; i++) out2[i] = NAN;
        int32_t keep = bt[1 * bt_stride];
        be->ops->kv_copy_block(be, 0, keep, spare);
        bt[1 * bt_stride] = spare;
        cr_assert_eq(be->ops->begin(be, &b), 0);
        be->ops->attention(be, 1, q, &at, out2);
        cr_assert_eq(memcmp(out, out2, (size_t)n_tok * q_dim * 4), 0, "kv_copy_block at %s", lv[li].name);
        bt[1 * bt_stride] = keep;
        free(out2);
        be_destroy(be);
    }
    free(perm), free(bt), free(K), free(V), free(slot), free(hk), free(hv), free(hslot);
    free(nk), free(nv), free(nslot), free(pos), free(q), free(out), free(sc), free(ref), free(tol);
    free(kr), free(vr), free(qs), free(KR), free(VR);
}

Test(cpu, attention_paged_gqa)
{
    const int hds[] = {8, 64, 80}, gqas[] = {1, 2, 4, 8}, bss[] = {16, 1, 7};
    const int dtypes[] = {KV_F16, KV_F32, KV_BF16};
    int k = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 3; c++)
                for (int d = 0; d < 3; d++, k++) {
                    cpua_case tc = {hds[a], gqas[b], bss[c], dtypes[d], 1 + k % 3, 0, 0, 0, 0, 0, 0};
                    cpua_run(&tc);
                }
}

/* Sliding windows (1 token, shorter than a block, across blocks, longer than every context),
 * soft-capping and a scale other than 1/sqrt(head_dim), alone and together. */
Test(cpu, attention_window_softcap_scale)
{
    const struct {
        float scale, cap;
        int window;
    } v[] = {{0, 0, 1}, {0, 0, 5}, {0, 0, 16}, {0, 0, 37}, {0, 0, 1000}, {0, 20, 0}, {0.3f, 0, 0},
             {0.3f, 2.5f, 23}, {0, 50, 64}};
    const int hds[] = {64, 80}, gqas[] = {1, 4}, bss[] = {16, 7};
    const int dtypes[] = {KV_F16, KV_F32};
    int k = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++, k++) {
                cpua_case tc = {hds[a], gqas[b], bss[k % 2], dtypes[(k / 2) % 2], 1 + k % 3, v[i].scale, v[i].cap,
                                v[i].window, 0, 0, 0};
                cpua_run(&tc);
            }
}

/* int8 and e4m3 arenas (codes and an f16 scale per token and kv head, dequantised as the
 * kernels read them): the reference sees the quantised values, so the f32 tolerance holds. With
 * windows and soft-caps too, and block sizes whose tiles are not a multiple of 16 bytes. */
Test(cpu, attention_quantised_kv)
{
    const int hds[] = {8, 64, 80}, gqas[] = {1, 4}, bss[] = {16, 7, 1};
    int k = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++)
                for (int d = KV_I8; d <= KV_FP8; d++, k++) {
                    int w = k % 4 == 3 ? 37 : 0;
                    cpua_case tc = {hds[a], gqas[b], bss[c], d, 1 + k % 3, 0, w ? 20.0f : 0.0f, w, 0, 0, 0};
                    cpua_run(&tc);
                }
}

/* Every level's kvq_to_f32 gives exactly code value × scale for all 256 int8 and all 256 e4m3
 * codes (the e4m3 NaN codes as NaN), with per-key and per-row scales and row lengths that leave
 * vector tails: the SIMD e4m3 decoders' bit trick covers normal and subnormal codes, signs,
 * zeros and NaN. */
Test(cpu, kvq_codes_decode_exactly_at_every_level)
{
    tu_cpu_level lv[TU_MAX_LEVELS];
    int nl = tu_cpu_levels(lv);
    enum { TOTAL = 512 };
    uint8_t codes[TOTAL], scales[2 * TOTAL];
    float got[TOTAL];
    for (int i = 0; i < TOTAL; i++) codes[i] = (uint8_t)(i < 256 ? i : 255 - i % 256);
    for (int i = 0; i < TOTAL; i++) { /* f16 scales from 2^-10 to about 3 */
        uint16_t h = dt_f32_to_f16(ldexpf(1.0f + (float)(i % 7) / 7.0f, i % 12 - 10));
        scales[2 * i] = (uint8_t)(h & 0xff), scales[2 * i + 1] = (uint8_t)(h >> 8);
    }
    for (int li = 0; li < nl; li++) {
        backend *be = tu_cpu_backend(&lv[li], 1);
        const cpu__kern *k = &((cpu__backend *)be)->k;
        for (int dt = KV_I8; dt <= KV_FP8; dt++)
            for (int per_col = 0; per_col < 2; per_col++)
                for (int len = 1; len <= 269; len += len < 40 ? 1 : 23) {
                    /* per_col: one row of len codes with a scale each; else rows of len codes
                     * with a scale per row, all 256 codes among them */
                    int rows = per_col ? 1 : TOTAL / len;
                    k->kvq_to_f32(dt, codes, (size_t)len, scales, per_col, got, (size_t)len, rows, len);
                    for (int i = 0; i < rows * len; i++) {
                        int si = per_col ? i : i / len;
                        float v = dt == KV_I8 ? (float)(int8_t)codes[i] : kv_e4m3_decode(codes[i]);
                        float want = v * dt_f16_to_f32((uint16_t)(scales[2 * si] | (scales[2 * si + 1] << 8)));
                        if (isnan(want)) cr_assert(isnan(got[i]), "%s %s code %#x: %g, want NaN", lv[li].name,
                                                   kv_dtype_name(dt), codes[i], got[i]);
                        else
                            cr_assert(memcmp(&got[i], &want, 4) == 0, "%s %s per_col %d len %d code %#x: %a, want %a",
                                      lv[li].name, kv_dtype_name(dt), per_col, len, codes[i], got[i], want);
                    }
                }
        be_destroy(be);
    }
}

/* Attention sinks whose window moved: each sequence's first entries are met by be_attn.q_sink,
 * the rest by q (block-aligned sink counts and not, with prefill chunks and decode tokens). */
Test(cpu, attention_sinks_meet_their_queries)
{
    const int hds[] = {8, 64}, gqas[] = {1, 4}, sinks[] = {16, 7, 64};
    const int dtypes[] = {KV_F16, KV_I8, KV_F32};
    int k = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++, k++) {
                cpua_case tc = {hds[a], gqas[b], c == 1 ? 7 : 16, dtypes[k % 3], 1 + k % 3, 0, 0, 0, sinks[c], 0, 0};
                cpua_run(&tc);
            }
}

/* Learned sink logits per head (gpt-oss): each head's softmax gains e^(sink − m) in its
 * denominator; with GQA, windows, quantised arenas, decode rows (no fast path) and long chunks. */
Test(cpu, attention_learned_sinks)
{
    const int hds[] = {8, 64}, gqas[] = {1, 4};
    const int dtypes[] = {KV_F16, KV_I8, KV_F32};
    int k = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int d = 0; d < 3; d++, k++) {
                int w = k % 2 ? 16 : 0;
                cpua_case tc = {hds[a], gqas[b], k % 3 == 1 ? 7 : 16, dtypes[d], 1 + k % 3, 0, 0, w, 0, 1, 0};
                cpua_run(&tc);
            }
}

/* The latent layout (MLA): one plane per layer, each token's vector stored once (K read as its
 * transpose, V as stored), one kv head for up to 16 query heads; every KV dtype, odd block sizes,
 * the head sizes of the reference file (80) and of DeepSeek (576). */
Test(cpu, attention_latent_layout)
{
    const int hds[] = {80, 576}, gqas[] = {4, 16}, bss[] = {16, 7};
    const int dtypes[] = {KV_F16, KV_F32, KV_BF16, KV_I8, KV_FP8};
    int k = 0;
    for (int a = 0; a < 2; a++)
        for (int d = 0; d < 5; d++, k++) {
            cpua_case tc = {hds[a], gqas[k % 2], bss[k % 2], dtypes[d], 1 + k % 3, 0, 0, 0, 0, k % 4 == 3, hds[a] - 16};
            cpua_run(&tc);
        }
}

/* ---- sequences sharing prefix blocks ---------------------------------------------------------- */

/* Decode tokens of sequences whose block tables start with the same blocks (a shared prompt, n > 1
 * choices) are attended as a group over the common part; this checks every member — including
 * one whose context is exactly the shared blocks, one sharing only half of them, one sharing
 * another prefix, and a prefill chunk on the same prefix — against float64 reads through each
 * table. */
#define CPUA_SSEQ 8

static void cpua_shared_run(const cpua_case *tc)
{
    int n_kv = 2, n_heads = n_kv * tc->gqa, hd = tc->head_dim, bs = tc->block_size;
    int kv_dim = n_kv * hd, q_dim = n_heads * hd;
    int na = 200 / bs, nbb = 90 / bs; /* whole blocks of prefixes A and B */
    /* Per sequence: which prefix (0 A, 1 B, 2 half of A, -1 none), tokens after it, new tokens. */
    const int pre[CPUA_SSEQ] = {0, 0, 2, -1, 1, 1, 0, 0}, tail[CPUA_SSEQ] = {37, 5, 60, 150, 20, 1, 30, 0};
    const int n_new[CPUA_SSEQ] = {1, 1, 1, 1, 1, 1, 9, 1};
    cpua_rng = 0x51a7edull + (uint64_t)(hd * 131 + tc->gqa * 17 + bs * 3 + tc->dtype) * 7919;
    int ctx[CPUA_SSEQ], shared_blocks[CPUA_SSEQ], bt_stride = 0, n_blocks = na + nbb;
    for (int s = 0; s < CPUA_SSEQ; s++) {
        shared_blocks[s] = pre[s] == 0 ? na : pre[s] == 1 ? nbb : pre[s] == 2 ? na / 2 : 0;
        ctx[s] = shared_blocks[s] * bs + tail[s];
        int nb = (ctx[s] + bs - 1) / bs;
        n_blocks += nb - shared_blocks[s];
        if (nb > bt_stride) bt_stride = nb;
    }
    int32_t *bt = calloc((size_t)CPUA_SSEQ * bt_stride, 4);
    int next = na + nbb; /* blocks 0 .. na - 1 hold A, na .. na + nbb - 1 hold B */
    for (int s = 0; s < CPUA_SSEQ; s++)
        for (int b = 0; b < (ctx[s] + bs - 1) / bs; b++)
            bt[s * bt_stride + b] = b < shared_blocks[s] ? (pre[s] == 1 ? na + b : b) : next++;

    /* Every slot of the arena gets its own K/V, written by one store-only step. */
    int n_slots = n_blocks * bs;
    float *K = malloc((size_t)n_slots * kv_dim * 4), *V = malloc((size_t)n_slots * kv_dim * 4);
    int32_t *all = malloc((size_t)n_slots * 4);
    for (int i = 0; i < n_slots; i++) {
        all[i] = i;
        for (int d = 0; d < kv_dim; d++) {
            K[(size_t)i * kv_dim + d] = cpua_rand() * 2.0f;
            V[(size_t)i * kv_dim + d] = cpua_rand();
        }
    }
    int q_start[CPUA_SSEQ + 1], n_tok = 0;
    int32_t pos[CPUA_SSEQ * 9];
    for (int s = 0; s < CPUA_SSEQ; s++) {
        q_start[s] = n_tok;
        for (int j = ctx[s] - n_new[s]; j < ctx[s]; j++) pos[n_tok++] = j;
    }
    q_start[CPUA_SSEQ] = n_tok;
    float *q = malloc((size_t)n_tok * q_dim * 4), *out = malloc((size_t)n_tok * q_dim * 4);
    for (size_t i = 0; i < (size_t)n_tok * q_dim; i++) q[i] = cpua_rand();

    /* Reference: float64 reads through each sequence's own table. */
    float *KR = cpua_kv_rounded(tc->dtype, K, n_slots, kv_dim, hd), *VR = cpua_kv_rounded(tc->dtype, V, n_slots, kv_dim, hd);
    int max_ctx = bt_stride * bs;
    double *ref = malloc((size_t)n_tok * q_dim * sizeof(double)), *tol = malloc((size_t)n_tok * q_dim * sizeof(double));
    double *sc = malloc((size_t)max_ctx * sizeof(double));
    const float **kr = malloc((size_t)max_ctx * sizeof *kr), **vr = malloc((size_t)max_ctx * sizeof *vr);
    for (int s = 0; s < CPUA_SSEQ; s++)
        for (int i = q_start[s]; i < q_start[s + 1]; i++)
            for (int h = 0; h < n_heads; h++) {
                size_t at = ((size_t)i * n_heads + h) * hd;
                for (int j = 0; j <= pos[i]; j++) {
                    size_t e = (size_t)(bt[s * bt_stride + j / bs] * bs + j % bs) * kv_dim + (h / tc->gqa) * hd;
                    kr[j] = KR + e;
                    vr[j] = VR + e;
                }
                cpua_ref_row(tc, q + at, q + at, 0, pos[i], kr, vr, NULL, sc, ref + at, tol + at);
            }

    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++) {
        backend *be = tu_cpu_backend(&lv[li], tc->threads);
        kv_geom g = {.n_layers = 1, .n_kv_heads = n_kv, .head_dim = hd, .block_size = bs, .dtype = tc->dtype};
        cr_assert_eq(be->ops->kv_init(be, &g, &n_blocks), 0);
        be_batch hb = {.n_tokens = n_slots, .n_seqs = 0, .n_kv = 1, .kv = {{.slots = all}}};
        cr_assert_eq(be->ops->begin(be, &hb), 0);
        be->ops->store_kv(be, 0, K, V);
        be_batch b = {.n_tokens = n_tok, .tokens = pos, .positions = pos, .n_seqs = CPUA_SSEQ, .q_start = q_start, .n_logits = 0, .logit_rows = pos, .n_kv = 1, .kv = {{.slots = pos, .ctx_len = ctx, .block_table = bt, .bt_stride = bt_stride}}};
        cr_assert_eq(be->ops->begin(be, &b), 0);
        for (size_t i = 0; i < (size_t)n_tok * q_dim; i++) out[i] = NAN;
        be_attn at = cpua_attn(tc, n_heads);
        be->ops->attention(be, 0, q, &at, out);
        for (size_t e = 0; e < (size_t)n_tok * q_dim; e++)
            cr_assert(fabs(out[e] - ref[e]) <= tol[e],
                      "shared-prefix attention at %s hd=%d gqa=%d bs=%d dtype=%s threads=%d window %d cap %g: "
                      "token %zu head %zu dim %zu: got %g want %g (tolerance %g)",
                      lv[li].name, hd, tc->gqa, bs, kv_dtype_name(tc->dtype), tc->threads, tc->window,
                      (double)tc->softcap, e / q_dim,
                      e % q_dim / hd, e % hd, (double)out[e], ref[e], tol[e]);
        be_destroy(be);
    }
    free(bt), free(K), free(V), free(all), free(q), free(out), free(sc), free(ref), free(tol);
    free(kr), free(vr), free(KR), free(VR);
}

Test(cpu, attention_shared_prefix_groups)
{
    const int hds[] = {64, 80}, gqas[] = {1, 4}, bss[] = {16, 7, 1};
    const int dtypes[] = {KV_F16, KV_BF16, KV_F32, KV_I8};
    int k = 0;
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 2; c++)
            for (int d = 0; d < 3; d++)
                for (int e = 0; e < 4; e++, k++) {
                    /* every third run windowed (inside the shared part, or past it) and soft-capped */
                    int w = k % 3 == 1 ? 50 : k % 3 == 2 ? 300 : 0;
                    cpua_case tc = {hds[a], gqas[c], bss[d], dtypes[e], 1 + k % 4, 0, w ? 30.0f : 0.0f, w, 0, 0, 0};
                    cpua_shared_run(&tc);
                }
}
