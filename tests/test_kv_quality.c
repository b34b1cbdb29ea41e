/*
 * test_kv_quality.c — what a smaller KV cache costs in quality, on a real trained model
 * (stories260K, tests/data) and a text it sampled itself (tests/data/stories260K.sampled.txt:
 * 8 segments of 500 tokens at temperature 1), teacher-forced through the scheduler and the CPU
 * backend:
 *
 *   - int8 KV: the perplexity of the first 2,000 tokens (4 segments, each within the context)
 *     within 1% of f16 KV's;
 *   - attention sinks + window: the 4,000-token text as one stream (past the context of 512)
 *     with 4 sinks + 252 recent tokens (blocks of 4) keeps a perplexity within 1.1 × that of a
 *     sliding-window recompute of the same 256 tokens (every predicted token recomputed from its
 *     last 256 tokens alone), over the positions the two differ at; the plain window without
 *     sinks is printed for contrast (StreamingLLM's result: it loses the first tokens' attention
 *     mass); and the KV blocks in use stay at one window.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kv.h"
#include "cpu/cpu.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/sched.h"
#include "model/model.h"
#include "tests/sched_harness.h"
#include "tests/test_util.h"

#define TQ_SEG 500
#define TQ_NSEG 8
#define TQ_N (TQ_SEG * TQ_NSEG)

/* The sampled text: TQ_N token ids. */
static void tq_text(int32_t *toks)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K.sampled.txt", tu_data_dir());
    char *txt = tu_read_file(path, NULL);
    cr_assert_not_null(txt, "%s", path);
    int n = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        for (char *p = line, *e; n < TQ_N; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p) break;
            toks[n++] = (int32_t)v;
        }
    }
    free(txt);
    cr_assert_eq(n, TQ_N, "%s: %d token ids, expected %d", path, n, TQ_N);
}

static model *tq_model(void)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    model *m;
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
    return m;
}

/* The model under the scheduler (tests/sched_harness.h): fwd_run, then the NLL of the next token at every logit row (its position p scores
 * toks[p + 1]); the peak of KV blocks in use. */
typedef struct tq_run {
    fwd *f;
    const int32_t *toks;
    int n;         /* tokens in toks: the last position has no next token to score */
    int n_vocab;
    double *nll;   /* [n] NLL of toks[p + 1] given the stream up to p; NAN when not scored */
    float *logits; /* [max rows][n_vocab] */
    block_pool *bp;
    int32_t peak;
} tq_run;

static double tq_nll(const float *row, int n_vocab, int32_t tok)
{
    double mx = row[0], z = 0;
    for (int v = 1; v < n_vocab; v++) mx = fmax(mx, row[v]);
    for (int v = 0; v < n_vocab; v++) z += exp(row[v] - mx);
    return log(z) + mx - row[tok];
}

static int tq_runner(void *ud, const be_batch *b, float *logits)
{
    tq_run *w = ud;
    int rc = fwd_run(w->f, b, logits);
    for (int j = 0; !rc && j < b->n_logits; j++) {
        int p = b->positions[b->logit_rows[j]];
        if (p + 1 >= w->n) continue;
        w->nll[p] = tq_nll(logits + (size_t)j * w->n_vocab, w->n_vocab, w->toks[p + 1]);
    }
    if (w->bp) {
        int32_t used = bp_num_blocks(w->bp) - bp_num_free(w->bp);
        w->peak = used > w->peak ? used : w->peak;
    }
    return rc;
}

static void tq_copy(void *ud, int group, int32_t src, int32_t dst)
{
    backend *be = fwd_backend(((tq_run *)ud)->f);
    be->ops->kv_copy_block(be, group, src, dst);
}

/* Scores toks[0 .. n) as one teacher-forced prompt: nll[p] for p < n - 1. rule: the group's
 * retention (window 0: keep all), with KV dtype kv_dtype and block size bs. Returns the peak of
 * KV blocks in use. */
static int32_t tq_score(const model *m, const int32_t *toks, int n, kv_rule rule, int bs, int kv_dtype, double *nll)
{
    backend *be = cpu_backend_create(2);
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, bs, kv_dtype);
    g.rule[0] = rule;
    int32_t n_blocks = rule.keep == KV_KEEP_ALL ? (n + bs - 1) / bs + 2 : (rule.window + bs - 1) / bs + 2;
    char err[512];
    tq_run w = {.toks = toks, .n = n, .n_vocab = m->hp.n_vocab, .nll = nll};
    w.f = fwd_create(m, be, &g, &n_blocks, 256, sched_max_logits(1), err, sizeof err);
    cr_assert_not_null(w.f, "%s", err);
    int32_t eog = -1;
    sched_config sc = {.block_size = bs, .n_blocks = n_blocks, .n_groups = 1, .max_seqs = 1, .max_batch_tokens = 256,
                       .n_ctx = m->hp.n_ctx_train, .eog_ids = &eog, .n_eog = 1};
    sc.rule[0] = rule;
    sched *sch = sched_create(&sc);
    cr_assert_not_null(sch);
    sh_step h;
    sh_init(&h, sch, &sc, m->hp.n_vocab, (sh_model){tq_runner, tq_copy, &w});
    w.bp = sched_pool(sch);
    seq *s = seq_create(toks, n, 0);
    s->prompt_logprobs = 1;
    s->sp.n_logprobs = 1;
    cr_assert_eq(sched_add(sch, s), 0);
    for (int p = 0; p < n; p++) nll[p] = NAN;
    for (;;) {
        sampling_out *sm;
        int k = sh_step_run(&h, &sm);
        if (k == -EAGAIN) break;
        cr_assert_geq(k, 0);
    }
    for (int p = 0; p < n - 1; p++) cr_assert(isfinite(nll[p]), "position %d not scored", p);
    seq_destroy(s);
    sh_fini(&h);
    sched_destroy(sch);
    fwd_destroy(w.f);
    be_destroy(be);
    return w.peak;
}

/* exp(mean NLL) over positions [from, to) taking every step-th. */
static double tq_ppl(const double *nll, int from, int to, int step)
{
    double s = 0;
    int k = 0;
    for (int p = from; p < to; p += step, k++) s += nll[p];
    return exp(s / k);
}

Test(kv_quality, int8_perplexity_within_one_percent_of_f16, .timeout = 120)
{
    model *m = tq_model();
    static int32_t toks[TQ_N];
    static double nll16[TQ_SEG], nll8[TQ_SEG];
    tq_text(toks);
    kv_rule all = {KV_KEEP_ALL, 0, 0};
    double s16 = 0, s8 = 0;
    for (int seg = 0; seg < 4; seg++) { /* 2,000 tokens, each segment within the context of 512 */
        tq_score(m, toks + seg * TQ_SEG, TQ_SEG, all, 16, KV_F16, nll16);
        tq_score(m, toks + seg * TQ_SEG, TQ_SEG, all, 16, KV_I8, nll8);
        for (int p = 0; p < TQ_SEG - 1; p++) s16 += nll16[p], s8 += nll8[p];
    }
    double ppl16 = exp(s16 / (4 * (TQ_SEG - 1))), ppl8 = exp(s8 / (4 * (TQ_SEG - 1)));
    printf("kv_quality: stories260K perplexity over 2000 sampled tokens: f16 KV %.4f, int8 KV %.4f (%+.3f%%)\n", ppl16,
           ppl8, 100 * (ppl8 / ppl16 - 1));
    cr_assert(fabs(ppl8 / ppl16 - 1) <= 0.01, "int8 KV perplexity %.4f vs f16 %.4f", ppl8, ppl16);
    model_destroy(m);
}

/* NLL of toks[p + 1] for p = from, from + step, … < to, each from a fresh run over the last
 * `window` tokens toks[p − window + 1 .. p] alone (positions 0 .. window − 1). */
static void tq_recompute(const model *m, const int32_t *toks, int from, int to, int step, int window, double *nll)
{
    backend *be = cpu_backend_create(2);
    const int bs = 16;
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, bs, KV_F32);
    int32_t n_blocks = (window + bs - 1) / bs, bt[64], pos[512], slots[512], q_start[2] = {0, window}, row = window - 1;
    char err[512];
    fwd *f = fwd_create(m, be, &g, &n_blocks, window, 1, err, sizeof err);
    cr_assert_not_null(f, "%s", err);
    for (int i = 0; i < n_blocks; i++) bt[i] = i;
    for (int i = 0; i < window; i++) pos[i] = slots[i] = i;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    for (int p = from; p < to; p += step) {
        int32_t ctx = window;
        be_batch b = {.n_tokens = window, .tokens = toks + p - window + 1, .positions = pos, .n_seqs = 1,
                      .q_start = q_start, .n_logits = 1, .logit_rows = &row, .n_kv = 1,
                      .kv = {{.slots = slots, .ctx_len = &ctx, .block_table = bt, .bt_stride = n_blocks}}};
        cr_assert_eq(fwd_run(f, &b, logits), 0);
        nll[p] = tq_nll(logits, m->hp.n_vocab, toks[p + 1]);
    }
    free(logits);
    fwd_destroy(f);
    be_destroy(be);
}

Test(kv_quality, sinks_window_streams_4000_tokens, .timeout = 240)
{
    model *m = tq_model();
    static int32_t toks[TQ_N];
    static double sink[TQ_N], plain[TQ_N], recompute[TQ_N];
    tq_text(toks);
    const int W = 256, bs = 4, step = 16;
    kv_rule with_sinks = {KV_KEEP_SINKS, W, 4}, no_sinks = {KV_KEEP_SINKS, W, 0};
    int32_t peak = tq_score(m, toks, TQ_N, with_sinks, bs, KV_F32, sink);
    tq_score(m, toks, TQ_N, no_sinks, bs, KV_F32, plain);
    tq_recompute(m, toks, W, TQ_N - 1, step, W, recompute);
    double ps = tq_ppl(sink, W, TQ_N - 1, step), pp = tq_ppl(plain, W, TQ_N - 1, step);
    double pr = tq_ppl(recompute, W, TQ_N - 1, step);
    printf("kv_quality: 4000-token stream, window %d (blocks of %d), perplexity at every %dth position past the first "
           "window: 4 sinks + 252 %.4f, no sinks %.4f, sliding-window recompute %.4f; KV blocks in use at most %d\n",
           W, bs, step, ps, pp, pr, (int)peak);
    cr_assert(ps <= 1.1 * pr, "sinks + window perplexity %.4f > 1.1 x the recompute's %.4f", ps, pr);
    cr_assert_leq(peak, W / bs, "KV blocks in use grew past one window");
    model_destroy(m);
}
