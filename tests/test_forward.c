/*
 * test_forward.c — the whole forward pass against the float64 reference (tests/ref_forward.c).
 *
 * For synthetic models of several weight types and every architecture (with shapes and options
 * the reference files do not have: other head sizes, partial RoPE, windows shorter than a
 * block and across blocks, soft-caps, RoPE scaling with rope_freqs, fused tensors, random norm
 * weights), the logits of a 37-token
 * prefill plus 20 greedy decode steps must agree with the reference whether the prompt goes in
 * (a) at once, (b) in chunks of 7, or (c) interleaved with two other sequences of different
 * lengths in the same batches, with shuffled (non-contiguous) block tables, for a block size of
 * 16 and an odd one (5), at every SIMD level this machine supports. Agreement across (a), (b),
 * (c) is the proof that the paged KV and the varlen batch are right. Output buffers are
 * poisoned before every step.
 *
 * The tolerance (tf_tol) follows from the arithmetic: every value on the way from the embedding
 * to a logit is an f32 reduction whose error is at most γ_n of its terms' magnitudes, so the
 * logits' error relative to their scale is bounded by about u × the sum of the reduction
 * lengths along the path, whatever the summation order of the level's kernels. (An f16 KV
 * arena adds rounding flips: a K/V value an ulp of f32 away from the reference's may round to
 * the neighbouring f16, which this bound still covers with margin at these shapes.)
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/block_pool.h"
#include "cache/kv.h"
#include "cpu/cpu.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/sched.h"
#include "model/dtype.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "tests/ref_forward.h"
#include "tests/sched_harness.h"
#include "tests/test_util.h"

#define TF_MAX_SEQS 3
#define TF_PROMPT 37
#define TF_DECODE 20

static uint64_t tf_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A sequence: its whole token list (prompt + greedy continuation from the reference), the
 * reference logits at every position, and its share of the KV blocks. */
typedef struct tf_seq {
    int n_prompt, n_total; /* n_total = n_prompt + decode steps */
    int32_t toks[128];
    double *ref;    /* [n_total][n_vocab] reference logits after feeding toks[p] */
    int32_t bt[64]; /* block table */
    int fed;        /* tokens already run through fwd */
    int chunk;      /* prefill chunk size; 0 = all at once; -1 = random 1..11 */
} tf_seq;

typedef struct tf_ctx {
    model *m;
    rf_model *rf;
    int n_vocab;
    char path[512];
} tf_ctx;

/* Tolerance of an f16 arena for models with q/k norms. A K or V value that lies within f32
 * rounding of an f16 rounding point can round the other way than the reference's (which rounds
 * from float64): q/k-normed keys are O(1), so one such flip moves one key by an f16 half-ulp
 * (2^-11 ≈ 5e-4) and the logits by that times the attention's gain (O(1) at these shapes, over
 * logits of O(1)); 3e-4 of max |logit| allows a few flips, not a wrong op (a missing window,
 * norm or base moves them by 1e-2 and more). */
#define TF_KV16_NORMED_TOL 3e-4

/* The test's base shape: 3 layers, 64 wide, 8 heads over 2 kv heads, vocab 300, context 256. */
static void tf_params(mkm_params *p, const char *arch, int type, int ffn, uint64_t seed)
{
    mkm_params_default(p);
    p->arch = arch;
    p->dim = 64;
    p->layers = 3;
    p->heads = 8;
    p->kv_heads = 2;
    p->ffn = ffn;
    p->vocab = 300;
    p->context = 256;
    p->type = type;
    p->seed = seed;
}

static void tf_open_p(tf_ctx *c, const mkm_params *p)
{
    tu_write_mkmodel(p, "forward", c->path, sizeof c->path);
    char err[512];
    cr_assert_eq(model_load(c->path, &c->m, err, sizeof err), 0, "model_load: %s", err);
    c->n_vocab = c->m->hp.n_vocab;
    c->rf = NULL;
}

static void tf_open(tf_ctx *c, const char *arch, int type, int ffn, uint64_t seed)
{
    mkm_params p;
    tf_params(&p, arch, type, ffn, seed);
    tf_open_p(c, &p);
}

static void tf_close(tf_ctx *c)
{
    rf_destroy(c->rf);
    model_destroy(c->m);
    unlink(c->path);
}

/* Random prompt of n_prompt tokens, then n_decode greedy tokens chosen by the reference. */
static void tf_seq_make(tf_ctx *c, tf_seq *s, int n_prompt, int n_decode, uint64_t *rng)
{
    memset(s, 0, sizeof *s);
    s->n_prompt = n_prompt;
    s->n_total = n_prompt + n_decode;
    s->ref = malloc((size_t)s->n_total * c->n_vocab * sizeof *s->ref);
    rf_seq *rs = rf_seq_create(c->rf, s->n_total);
    for (int p = 0; p < s->n_total; p++) {
        if (p < n_prompt) s->toks[p] = 3 + (int32_t)(tf_rng(rng) % (uint64_t)(c->n_vocab - 3));
        rf_step(c->rf, rs, s->toks[p], s->ref + (size_t)p * c->n_vocab);
        if (p + 1 < s->n_total && p + 1 >= n_prompt)
            s->toks[p + 1] = rf_argmax(s->ref + (size_t)p * c->n_vocab, c->n_vocab);
    }
    rf_seq_destroy(rs);
}

/* How many tokens sequence s feeds in the next step. */
static int tf_next_chunk(const tf_seq *s, uint64_t *rng)
{
    int left = s->n_total - s->fed;
    if (left <= 0) return 0;
    if (s->fed >= s->n_prompt) return 1; /* decode: one token per step */
    int n = s->chunk == 0 ? s->n_prompt : s->chunk > 0 ? s->chunk : 1 + (int)(tf_rng(rng) % 11);
    int pl = s->n_prompt - s->fed;
    return n < pl ? n : pl;
}

/* Runs all sequences to the end through fwd, batching every sequence that has tokens left into
 * each step (in a rotating order), and returns the worst relative logit error vs the reference.
 * Rows: all new tokens of every sequence, except sequences fed with logits_last_only. */
static double tf_run(tf_ctx *c, fwd *f, tf_seq *seqs, int n_seqs, int bs, int logits_last_only,
                     uint64_t *rng, double *cross /* [n_seqs][n_total][n_vocab] or NULL */)
{
    enum { MAXT = 256 };
    int32_t toks[MAXT], pos[MAXT], slots[MAXT], rows[MAXT], row_seq[MAXT], row_pos[MAXT];
    int32_t q_start[TF_MAX_SEQS + 1], ctx[TF_MAX_SEQS], bt[TF_MAX_SEQS * 64];
    float *logits = malloc((size_t)MAXT * c->n_vocab * sizeof *logits);
    double worst = 0.0;
    for (int step = 0;; step++) {
        int n = 0, ns = 0, nl = 0;
        int rot = (int)(tf_rng(rng) % (uint64_t)n_seqs);
        for (int k = 0; k < n_seqs; k++) {
            int si = (k + rot) % n_seqs;
            tf_seq *s = &seqs[si];
            int m = tf_next_chunk(s, rng);
            if (!m) continue;
            q_start[ns] = n;
            memcpy(bt + ns * 64, s->bt, sizeof s->bt);
            for (int i = 0; i < m; i++) {
                int p = s->fed + i;
                toks[n] = s->toks[p];
                pos[n] = p;
                slots[n] = s->bt[p / bs] * bs + p % bs;
                /* last-only mode asks for no logits at all in its first step */
                if (!logits_last_only || (i == m - 1 && step > 0)) {
                    rows[nl] = n;
                    row_seq[nl] = si;
                    row_pos[nl++] = p;
                }
                n++;
            }
            s->fed += m;
            ctx[ns++] = s->fed;
        }
        if (!ns) break;
        q_start[ns] = n;
        be_batch b = {.n_tokens = n, .tokens = toks, .positions = pos, .n_seqs = ns, .q_start = q_start, .n_logits = nl, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = 64}}};
        for (size_t i = 0; i < (size_t)MAXT * c->n_vocab; i++)
            logits[i] = NAN;
        cr_assert_eq(fwd_run(f, &b, logits), 0);
        for (int r = 0; r < nl; r++) {
            const tf_seq *s = &seqs[row_seq[r]];
            const double *ref = s->ref + (size_t)row_pos[r] * c->n_vocab;
            const float *got = logits + (size_t)r * c->n_vocab;
            double mx = 1e-6, d = 0.0;
            for (int v = 0; v < c->n_vocab; v++) {
                mx = fmax(mx, fabs(ref[v]));
                cr_assert(isfinite(got[v]), "step %d row %d: logit %d not written", step, r, v);
                d = fmax(d, fabs(got[v] - ref[v]));
                if (cross) cross[((size_t)row_seq[r] * 128 + row_pos[r]) * c->n_vocab + v] = got[v];
            }
            worst = fmax(worst, d / mx);
        }
    }
    free(logits);
    return worst;
}

/* Gives the sequences disjoint, shuffled block tables out of a pool with spare blocks. */
static int32_t tf_tables(tf_seq *seqs, int n_seqs, int bs, uint64_t *rng)
{
    int need = 0;
    for (int i = 0; i < n_seqs; i++)
        need += (seqs[i].n_total + bs - 1) / bs;
    int32_t n_blocks = need + 5;
    block_pool *bp = bp_create(n_blocks);
    int32_t ids[512];
    cr_assert(n_blocks <= 512);
    cr_assert_eq(bp_alloc(bp, n_blocks, ids), 0);
    bp_check(bp);
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(tf_rng(rng) % (uint64_t)(i + 1));
        int32_t t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    int k = 0;
    for (int i = 0; i < n_seqs; i++) {
        seqs[i].fed = 0;
        for (int b = 0; b < (seqs[i].n_total + bs - 1) / bs; b++)
            seqs[i].bt[b] = ids[k++];
    }
    for (int i = 0; i < n_blocks; i++)
        bp_unref(bp, ids[i]);
    bp_check(bp);
    cr_assert_eq(bp_num_free(bp), n_blocks);
    bp_destroy(bp);
    return n_blocks;
}

/* The f32 bound on the logits' error relative to max |logit| for model m at context n_ctx:
 * 2 u × Σ of the reduction lengths along the path (per layer: RMSNorm over dim, the Q/K/V
 * projections over dim, scores over head_dim, softmax and P·V over the context, the output
 * projection over dim, RMSNorm, gate/up over dim, down over ffn; then the final norm and the
 * LM head over dim). */
static double tf_tol(const model *m, int n_ctx)
{
    const model_hparams *hp = &m->hp;
    /* experts: the router, the expert's own gate/up/down and the shared experts' on the way;
     * MLA: the absorbed key (qk_nope), the latent scores, the value up-projection and its heads */
    double ffn = hp->n_expert ? fmax(hp->n_ff, hp->n_expert + hp->n_ff_exp + hp->n_ff_shexp + hp->n_expert_used)
                              : hp->n_ff;
    double attn = hp->mla ? hp->qk_nope + hp->head_dim + hp->kv_lora_rank + (double)hp->n_heads * hp->v_head_dim +
                                hp->q_lora_rank
                          : hp->head_dim;
    double per_layer = 5.0 * hp->n_embd + attn + 2.0 * n_ctx + ffn;
    return 2 * 0x1p-24 * (hp->n_layers * per_layer + 2.0 * hp->n_embd);
}

/* The three modes for one model, KV dtype and block size at every level; qtol > 0 replaces
 * the f32 bound for quantised weights (relative to max |logit|). */
static void tf_modes(tf_ctx *c, int kv_dtype, int bs, double qtol, const char *what)
{
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    double tol = qtol > 0 ? qtol : tf_tol(c->m, 64);
    uint64_t rng = 0x666f7277617264ull ^ (uint64_t)bs * 7919 ^ (uint64_t)kv_dtype;
    printf("forward %s kv %s block %d seed 0x%llx\n", what, kv_dtype_name(kv_dtype), bs,
           (unsigned long long)rng);
    rf_destroy(c->rf);
    c->rf = rf_create(c->m, kv_dtype == KV_F32 ? -1 : kv_dtype);
    tf_seq seqs[3];
    tf_seq_make(c, &seqs[0], TF_PROMPT, TF_DECODE, &rng);
    tf_seq_make(c, &seqs[1], 23, 14, &rng);
    tf_seq_make(c, &seqs[2], 51, 9, &rng);
    size_t cross_n = (size_t)3 * 128 * c->n_vocab;
    double *cross[3];
    kv_geom g = model_kv_geom(&c->m->hp, bs, kv_dtype);
    for (int li = 0; li < n_lv; li++) {
        backend *be = tu_cpu_backend(&lv[li], 2);
        for (int mode = 0; mode < 3; mode++) {
            cross[mode] = calloc(cross_n, sizeof *cross[mode]);
            int n_seqs = mode == 2 ? 3 : 1;
            seqs[0].chunk = mode == 0 ? 0 : 7;
            seqs[1].chunk = -1;
            seqs[2].chunk = 13;
            int32_t n_blocks = tf_tables(seqs, n_seqs, bs, &rng);
            char err[512];
            fwd *f = fwd_create(c->m, be, &g, &n_blocks, 256, 256, err, sizeof err);
            cr_assert_not_null(f, "fwd_create: %s", err);
            double w = tf_run(c, f, seqs, n_seqs, bs, mode == 1, &rng, cross[mode]);
            printf("  %s mode %c: max relative logit error %.3g (tolerance %.3g)\n", lv[li].name, 'a' + mode,
                   w, tol);
            cr_assert(w <= tol, "%s kv %s block %d at %s mode %c: relative error %g > %g", what,
                      kv_dtype_name(kv_dtype), bs, lv[li].name, 'a' + mode, w, tol);
            fwd_destroy(f);
        }
        /* (a), (b), (c) against each other on seq 0's decode logits (rows all modes produced) */
        double dmax = 0.0, mx = 1e-6;
        for (int p = TF_PROMPT - 1; p < seqs[0].n_total; p++)
            for (int v = 0; v < c->n_vocab; v++) {
                size_t i = (size_t)p * c->n_vocab + v;
                mx = fmax(mx, fabs(cross[0][i]));
                dmax = fmax(dmax, fmax(fabs(cross[0][i] - cross[1][i]), fabs(cross[0][i] - cross[2][i])));
            }
        printf("  %s: a/b/c agree within %.3g relative\n", lv[li].name, dmax / mx);
        cr_assert(dmax / mx <= tol, "modes disagree at %s: %g", lv[li].name, dmax / mx);
        for (int i = 0; i < 3; i++) free(cross[i]);
        be_destroy(be);
    }
    for (int i = 0; i < 3; i++) free(seqs[i].ref);
}

Test(forward, llama_f32, .timeout = 120)
{
    tf_ctx c;
    tf_open(&c, "llama", DT_F32, 172, 11);
    tf_modes(&c, KV_F32, 16, 0, "llama F32");
    tf_modes(&c, KV_F32, 5, 0, "llama F32");
    tf_modes(&c, KV_F16, 5, 0, "llama F32");
    tf_close(&c);
}

Test(forward, llama_f16, .timeout = 120)
{
    tf_ctx c;
    tf_open(&c, "llama", DT_F16, 172, 12);
    tf_modes(&c, KV_F32, 16, 0, "llama F16");
    tf_modes(&c, KV_F32, 5, 0, "llama F16");
    tf_close(&c);
}

Test(forward, llama_bf16, .timeout = 120)
{
    tf_ctx c;
    tf_open(&c, "llama", DT_BF16, 172, 13);
    tf_modes(&c, KV_F32, 16, 0, "llama BF16");
    tf_close(&c);
}

Test(forward, llama_q8_0, .timeout = 120)
{
    tf_ctx c;
    tf_open(&c, "llama", DT_Q8_0, 192, 14);
    tf_modes(&c, KV_F32, 16, 3e-2, "llama Q8_0");
    tf_modes(&c, KV_F32, 5, 3e-2, "llama Q8_0");
    tf_close(&c);
}

Test(forward, qwen2_f32, .timeout = 120)
{
    tf_ctx c;
    tf_open(&c, "qwen2", DT_F32, 172, 15);
    cr_assert_eq(c.m->hp.rope_neox, 1);
    cr_assert_not_null(c.m->layers[0].bq.data, "qwen2 model without Q bias");
    tf_modes(&c, KV_F32, 16, 0, "qwen2 F32");
    tf_modes(&c, KV_F32, 5, 0, "qwen2 F32");
    tf_close(&c);
}

/* qwen3: per-head q/k norms (random norm weights, so a skipped norm shows), a head size that is
 * not dim / heads (q is 8 × 24 = 192 wide), GQA. */
Test(forward, qwen3_qk_norm_head_dim, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "qwen3", DT_F32, 96, 21);
    p.head_dim = 24;
    p.norm_std = 0.2f;
    tf_open_p(&c, &p);
    cr_assert(c.m->hp.qk_norm && c.m->hp.head_dim == 24 && c.m->layers[0].q_norm.data);
    tf_modes(&c, KV_F32, 16, 1e-5, "qwen3 F32");
    tf_modes(&c, KV_F16, 5, TF_KV16_NORMED_TOL, "qwen3 F32");
    tf_close(&c);
}

/* gemma2: GeGLU, embedding scale, post norms, attention and final soft-caps, a window of 11 on
 * layers 0 and 2 of 3 (pattern 2: windows shorter than a block of 16, across blocks of 5), head
 * size 16 with 12 rotating dims. */
Test(forward, gemma2_window_softcaps, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "gemma2", DT_F32, 96, 22);
    p.head_dim = 16;
    p.rope_dims = 12;
    p.swa_window = 11;
    p.attn_softcap = 3.0f; /* low caps so that they bite at this weight scale */
    p.final_softcap = 0.5f;
    p.norm_std = 0.3f;
    p.tied = 1;
    tf_open_p(&c, &p);
    const model_hparams *hp = &c.m->hp;
    cr_assert(model_layer_window(hp, 0) == 11 && model_layer_window(hp, 1) == 0 && model_layer_window(hp, 2) == 11);
    cr_assert(hp->ffn_act == MODEL_ACT_GELU_TANH && hp->post_norms && hp->embd_scale == 8.0f);
    tf_modes(&c, KV_F32, 16, 1e-5, "gemma2 F32");
    tf_modes(&c, KV_F32, 5, 1e-5, "gemma2 F32");
    tf_close(&c);
}

/* gemma3: q/k norms, window 9 on layers 0 and 1 of 3 (pattern 3), separate RoPE bases, linear
 * RoPE scaling on the global layer only, a final soft-cap, F16 weights. */
Test(forward, gemma3_pattern_two_bases, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "gemma3", DT_F16, 96, 23);
    p.swa_window = 9;
    p.swa_pattern = 3;
    p.rope_base = 1000000.0f;
    p.rope_base_swa = 10000.0f;
    p.rope_scaling = "linear";
    p.rope_factor = 8.0f;
    p.final_softcap = 6.0f;
    p.norm_std = 0.3f;
    tf_open_p(&c, &p);
    model_rope r0, r2;
    model_layer_rope(&c.m->hp, 0, &r0);
    model_layer_rope(&c.m->hp, 2, &r2);
    cr_assert(r0.base == 10000.0f && r0.freq_scale == 1.0f && r2.base == 1000000.0f && r2.freq_scale == 0.125f);
    tf_modes(&c, KV_F32, 16, 1e-5, "gemma3 F16");
    tf_modes(&c, KV_F16, 5, TF_KV16_NORMED_TOL, "gemma3 F16");
    tf_close(&c);
}

/* phi3: fused attn_qkv (with a fused bias) and gate+up, partial NeoX RoPE (6 of 8 dims). */
Test(forward, phi3_fused_partial_rope, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "phi3", DT_BF16, 96, 24);
    p.rope_dims = 6;
    p.qkv_bias = 1;
    tf_open_p(&c, &p);
    cr_assert(c.m->hp.fused_qkv && c.m->hp.fused_gate_up && c.m->layers[1].bk.data);
    tf_modes(&c, KV_F32, 16, 1e-5, "phi3 BF16");
    tf_modes(&c, KV_F32, 5, 1e-5, "phi3 BF16");
    tf_close(&c);
}

/* llama with Llama-3.1 rope_freqs and YaRN (factor 4 over an original context of 64, attention
 * factor 1.5), a fused qkv on Q8_0, and the same graph with linear scaling. */
Test(forward, llama_rope_scaling, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "llama", DT_Q8_0, 96, 25);
    p.rope_freqs = 1;
    p.rope_scaling = "yarn";
    p.rope_factor = 4.0f;
    p.rope_ctx_orig = 64;
    p.rope_attn_factor = 1.5f;
    p.fused_qkv = 1;
    p.rope_base = 500.0f; /* a small base puts the wavelengths across the ramp at this context */
    tf_open_p(&c, &p);
    model_rope r;
    model_layer_rope(&c.m->hp, 0, &r);
    cr_assert(c.m->hp.has_rope_freqs && r.ext_factor == 1.0f && r.corr_hi > r.corr_lo && r.mscale > 1.5f);
    tf_modes(&c, KV_F32, 16, 3e-2, "llama yarn+rope_freqs Q8_0");
    tf_close(&c);
    tf_params(&p, "llama", DT_F32, 96, 26);
    p.rope_scaling = "linear";
    p.rope_factor = 3.0f;
    tf_open_p(&c, &p);
    tf_modes(&c, KV_F32, 5, 1e-5, "llama linear F32");
    tf_close(&c);
}

/* The decode bound's numerator of an F32 model on the CPU backend (which keeps F32 weights as
 * they are): every active parameter once (model_active_elems: the routed experts at n_used of
 * n_expert, MLA's head views, sinks) and one embedding row, 4 bytes each. */
static void tf_bytes_per_token(tf_ctx *c)
{
    backend *be = cpu_backend_create(1);
    kv_geom g = model_kv_geom(&c->m->hp, 16, KV_F32);
    int32_t nb = 4;
    char err[512];
    fwd *f = fwd_create(c->m, be, &g, &nb, 8, 8, err, sizeof err);
    cr_assert_not_null(f, "fwd_create: %s", err);
    double want = 4.0 * ((double)model_active_elems(c->m) + c->m->hp.n_embd), got = fwd_weight_bytes_per_token(f);
    cr_assert(fabs(got - want) <= 1e-6 * want + 4 * c->m->hp.n_layers, "bytes per token %.0f, active weights %.0f",
              got, want);
    fwd_destroy(f);
    be_destroy(be);
}

/* qwen3moe: 8 experts of width 32, 2 used, renormalised softmax routing, q/k norms: every token's
 * two experts grouped with the other tokens' in prefill chunks, one of 8 read per decode step. */
Test(forward, qwen3moe_experts, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "qwen3moe", DT_F32, 32, 31);
    p.norm_std = 0.2f;
    tf_open_p(&c, &p);
    cr_assert(c.m->hp.n_expert == 8 && c.m->hp.n_expert_used == 2 && c.m->hp.expert_weights_norm);
    tf_bytes_per_token(&c);
    tf_modes(&c, KV_F32, 16, 0, "qwen3moe F32");
    tf_modes(&c, KV_F16, 5, TF_KV16_NORMED_TOL, "qwen3moe F32");
    tf_close(&c);
}

/* llama with experts (Mixtral-style), 6 experts of which 3, F16 and Q8_0 weights. */
Test(forward, llama_experts, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "llama", DT_F16, 64, 32);
    p.experts = 6;
    p.experts_used = 3;
    tf_open_p(&c, &p);
    cr_assert(c.m->hp.n_expert == 6 && c.m->hp.n_ff_exp == 64 && c.m->layers[2].gate_exps);
    tf_modes(&c, KV_F32, 16, 0, "llama 6 experts F16");
    tf_close(&c);
    tf_params(&p, "llama", DT_Q8_0, 64, 33);
    p.experts = 4;
    p.experts_used = 1;
    tf_open_p(&c, &p);
    tf_modes(&c, KV_F32, 5, 3e-2, "llama 4 experts Q8_0");
    tf_close(&c);
}

/* deepseek2 with MLA: the backend's absorbed latent attention against the reference's naive one
 * (every head's key and value up-projected from the cached latent), a leading dense layer,
 * shared experts, YaRN with its log factor in the q·k scale; then a q LoRA with sigmoid routing
 * over expert groups, a selection bias, renormalisation and a scale, on an f16 latent cache. */
Test(forward, deepseek2_mla_absorbed_equals_naive, .timeout = 180)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "deepseek2", DT_F32, 32, 34);
    p.heads = 4;
    p.head_dim = 16;
    p.rope_dims = 8;
    p.kv_lora = 48;
    p.v_head = 12;
    p.expert_scale = 2.0f;
    p.shared_experts = 2;
    p.rope_scaling = "yarn";
    p.rope_factor = 4.0f;
    p.rope_ctx_orig = 64;
    p.norm_std = 0.2f;
    tf_open_p(&c, &p);
    const model_hparams *hp = &c.m->hp;
    cr_assert(hp->mla && hp->n_kv_heads == 1 && hp->head_dim == 56 && hp->n_layer_dense_lead == 1 &&
              !model_layer_is_moe(hp, 0) && model_layer_is_moe(hp, 1) && hp->n_ff_shexp == 64);
    tf_bytes_per_token(&c);
    tf_modes(&c, KV_F32, 16, 0, "deepseek2 MLA F32");
    tf_modes(&c, KV_F32, 5, 0, "deepseek2 MLA F32");
    tf_close(&c);
    tf_params(&p, "deepseek2", DT_F32, 32, 35);
    p.heads = 4, p.head_dim = 16, p.rope_dims = 8, p.kv_lora = 32, p.q_lora = 24;
    p.experts = 8, p.experts_used = 3, p.expert_groups = 4, p.groups_used = 2, p.gating = 2, p.expert_norm = 1;
    p.expert_scale = 2.5f, p.sel_bias = 1;
    tf_open_p(&c, &p);
    cr_assert(c.m->hp.q_lora_rank == 24 && c.m->hp.expert_gating == MODEL_GATING_SIGMOID &&
              c.m->hp.n_expert_groups == 4 && c.m->layers[1].exp_probs_b.data && c.m->layers[0].wq_a.data);
    tf_modes(&c, KV_F32, 16, 0, "deepseek2 q-LoRA grouped sigmoid F32");
    tf_modes(&c, KV_F16, 16, TF_KV16_NORMED_TOL, "deepseek2 q-LoRA grouped sigmoid F32");
    tf_close(&c);
}

/* gpt-oss: learned sinks, a window of 11 on layers 0 and 2, q/k/v/o biases, a biased router
 * whose two best logits are softmaxed, clamped SwiGLU experts with biases. */
Test(forward, gpt_oss_sinks_window_experts, .timeout = 120)
{
    tf_ctx c;
    mkm_params p;
    tf_params(&p, "gpt-oss", DT_F32, 32, 36);
    p.swa_window = 11;
    p.norm_std = 0.2f;
    tf_open_p(&c, &p);
    const model_hparams *hp = &c.m->hp;
    cr_assert(hp->attn_sinks && model_layer_window(hp, 0) == 11 && !model_layer_window(hp, 1) &&
              hp->ffn_act == MODEL_ACT_SWIGLU_OAI && c.m->layers[1].b_down_exps && c.m->layers[0].sinks.data);
    tf_modes(&c, KV_F32, 16, 0, "gpt-oss F32");
    tf_modes(&c, KV_F32, 5, 0, "gpt-oss F32");
    tf_close(&c);
}

/* Misuse is reported, not crashed on: a KV geometry that does not fit the model, a batch larger
 * than the scratch. */
Test(forward, rejects_bad_geometry_and_oversized_batches)
{
    tf_ctx c;
    tf_open(&c, "llama", DT_F32, 172, 16);
    backend *be = cpu_backend_create(1);
    cr_assert_not_null(be);
    char err[512] = "";
    const int32_t four = 4;
    kv_geom g = kv_geom_make(c.m->hp.n_layers, c.m->hp.n_kv_heads + 1, c.m->hp.head_dim, 16, KV_F32);
    cr_assert_null(fwd_create(c.m, be, &g, &four, 8, 1, err, sizeof err));
    cr_assert(strstr(err, "geometry"), "message: %s", err);
    g.n_kv_heads = c.m->hp.n_kv_heads;
    fwd *f = fwd_create(c.m, be, &g, &four, 8, 1, err, sizeof err);
    cr_assert_not_null(f, "%s", err);
    cr_assert_eq(fwd_backend(f), be);
    int32_t toks[9] = {5, 6, 7, 8, 9, 10, 11, 12, 13}, pos[9], slots[9], q_start[2] = {0, 9},
            ctx = 9;
    int32_t bt[4] = {0, 1, 2, 3}, row = 8;
    for (int i = 0; i < 9; i++)
        pos[i] = slots[i] = i;
    be_batch b = {.n_tokens = 9, .tokens = toks, .positions = pos, .n_seqs = 1, .q_start = q_start, .n_logits = 1, .logit_rows = &row, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = &ctx, .block_table = bt, .bt_stride = 4}}};
    float *logits = malloc((size_t)c.n_vocab * sizeof *logits);
    cr_assert_eq(fwd_run(f, &b, logits), -EINVAL, "9 tokens > max_tokens 8");
    b.n_tokens = q_start[1] = ctx = 8;
    row = 7;
    cr_assert_eq(fwd_run(f, &b, logits), 0);
    free(logits);
    fwd_destroy(f);
    be_destroy(be);
    tf_close(&c);
}

/* ---- attention sinks + window through the scheduler ------------------------------------------- */

#define TW_MAX 256

/* The model under the scheduler (tests/sched_harness.h): fwd_run, recording every logit row with
 * the position it follows. */
typedef struct tw_run {
    fwd *f;
    int n_vocab;
    int n_rows;
    int32_t pos[TW_MAX];
    float *rows; /* [TW_MAX][n_vocab] */
} tw_run;

static int tw_runner(void *ud, const be_batch *b, float *logits)
{
    tw_run *w = ud;
    int rc = fwd_run(w->f, b, logits);
    for (int j = 0; !rc && j < b->n_logits && w->n_rows < TW_MAX; j++, w->n_rows++) {
        w->pos[w->n_rows] = b->positions[b->logit_rows[j]];
        memcpy(w->rows + (size_t)w->n_rows * w->n_vocab, logits + (size_t)j * w->n_vocab, (size_t)w->n_vocab * sizeof(float));
    }
    return rc;
}

static void tw_copy(void *ud, int group, int32_t src, int32_t dst)
{
    backend *be = fwd_backend(((tw_run *)ud)->f);
    be->ops->kv_copy_block(be, group, src, dst);
}

/* One greedy stream of n_prompt + n_out tokens under sinks + a window, through the scheduler and
 * the CPU backend (keys rotated at their token position, sinks met by shifted queries), against
 * the reference's literal StreamingLLM (keys rotated at their position within the cache): every
 * logit row within tol of max |logit|. The context limit is below the stream's length. */
static void tw_stream(tf_ctx *c, int window, int sinks, int bs, int n_prompt, int n_out, double tol)
{
    printf("forward window %d sinks %d block %d: %d + %d tokens\n", window, sinks, bs, n_prompt, n_out);
    backend *be = cpu_backend_create(2);
    kv_geom g = kv_geom_make(c->m->hp.n_layers, c->m->hp.n_kv_heads, c->m->hp.head_dim, bs, KV_F32);
    g.rule[0] = (kv_rule){KV_KEEP_SINKS, window, sinks};
    int32_t n_blocks = (window + bs - 1) / bs + 2;
    char err[512];
    tw_run w = {.n_vocab = c->n_vocab};
    w.f = fwd_create(c->m, be, &g, &n_blocks, 64, sched_max_logits(2), err, sizeof err);
    cr_assert_not_null(w.f, "%s", err);
    w.rows = malloc((size_t)TW_MAX * c->n_vocab * sizeof(float));
    int32_t eog = -1;
    sched_config sc = {.block_size = bs, .n_blocks = n_blocks, .n_groups = 1, .max_seqs = 2, .max_batch_tokens = 16,
                       .n_ctx = window + 8, .eog_ids = &eog, .n_eog = 1};
    sc.rule[0] = g.rule[0];
    sched *sch = sched_create(&sc);
    cr_assert_not_null(sch);
    sh_step h;
    sh_init(&h, sch, &sc, c->n_vocab, (sh_model){tw_runner, tw_copy, &w});
    uint64_t rng = 0x77696e646f77ull;
    int32_t prompt[TW_MAX];
    for (int i = 0; i < n_prompt; i++) prompt[i] = 3 + (int32_t)(tf_rng(&rng) % (uint64_t)(c->n_vocab - 3));
    seq *s = seq_create(prompt, n_prompt, n_out);
    s->sp.temperature = 0;
    s->sp.ignore_eos = 1;
    s->prompt_logprobs = 1; /* a logit row for every prompt token too */
    cr_assert_eq(sched_add(sch, s), 0);
    for (;;) {
        sampling_out *sm;
        int n = sh_step_run(&h, &sm);
        sched_check(sch);
        if (n == -EAGAIN) break;
        cr_assert_geq(n, 0);
    }
    cr_assert_eq(s->n_tokens, n_prompt + n_out, "the window lifts the context limit of %d", window + 8);
    cr_assert_eq(w.n_rows, n_prompt - 1 + n_out, "one row per prompt position and per sampled token");
    rf_seq *rs = rf_seq_create_window(c->rf, window, sinks, bs);
    double *ref = malloc((size_t)c->n_vocab * sizeof *ref), worst = 0;
    for (int p = 0, row = 0; p < s->n_tokens - 1; p++) {
        rf_step(c->rf, rs, s->tokens[p], ref);
        if (row < w.n_rows && w.pos[row] == p) {
            double mx = 1e-9, d = 0;
            for (int v = 0; v < c->n_vocab; v++) {
                mx = fmax(mx, fabs(ref[v]));
                d = fmax(d, fabs(ref[v] - w.rows[(size_t)row * c->n_vocab + v]));
            }
            worst = fmax(worst, d / mx);
            row++;
        }
    }
    printf("  max relative logit error %.3g (tolerance %.3g)\n", worst, tol);
    cr_assert(worst <= tol, "window %d sinks %d: relative error %g", window, sinks, worst);
    rf_seq_destroy(rs);
    free(ref);
    seq_destroy(s);
    sh_fini(&h);
    sched_destroy(sch);
    fwd_destroy(w.f);
    free(w.rows);
    be_destroy(be);
}

Test(forward, sinks_window_matches_streaming_reference, .timeout = 120)
{
    tf_ctx c;
    tf_open(&c, "llama", DT_F32, 172, 21);
    c.rf = rf_create(c.m, -1);
    tw_stream(&c, 24, 4, 4, 30, 50, 1e-5);  /* past the window within the prompt and the output */
    tw_stream(&c, 21, 0, 4, 10, 40, 1e-5);  /* a plain window: no sinks, a window not whole blocks */
    tw_stream(&c, 20, 5, 3, 25, 30, 1e-5);  /* sinks rounded up to blocks of 3 */
    tf_close(&c);
    tf_open(&c, "qwen2", DT_F32, 172, 22);  /* NEOX rotation */
    c.rf = rf_create(c.m, -1);
    tw_stream(&c, 24, 4, 4, 30, 50, 1e-5);
    tf_close(&c);
}
