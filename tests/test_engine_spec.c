/*
 * test_engine_spec.c — speculative decoding (engine/spec.h) on the CPU backend and stories260K.
 *
 * The n-gram proposer against a brute-force model; then the engine: the same workloads run with
 * speculation off and on must give the same events, token for token, log-prob for log-prob and
 * text for text (a verify row is an ordinary sampling row keyed by its position, and a proposal is
 * accepted exactly when the target's own draw equals it), while drafts are verified and some are
 * accepted: the golden greedy cases alone, batched, under preemption, with int8 KV and with
 * sinks + a window; a mixed workload of seeded sampling with every filter and penalty, log-probs,
 * n > 1, min_tokens, prompt log-probs, stop strings and a short max_tokens; grammar-constrained
 * requests; stop_token_ids; cancellation. A seeded statistical test compares the sampled
 * distribution with speculation on against speculation off over disjoint seeds. Every block comes
 * back: rejected drafts leave the block tables and never reach the prefix cache.
 */
#include <dirent.h>
#include <math.h>
#include <unistd.h>

#include "base/clock.h"
#include "engine/spec.h"
#include "model/dtype.h"
#include "model/mkmodel.h"
#include "tests/engine_harness.h"
#include "tests/engine_streams.h"

TestSuite(engine_spec, .init = te_setup, .fini = te_teardown, .timeout = 240);

/* ---- the n-gram proposer ------------------------------------------------------------------- */

/* The obvious definition: for m from n_max down, the largest j < n - m with t[j .. j+m) equal to
 * the last m tokens; what follows it, up to k tokens and never past n. */
static int ts_lookup_model(const int32_t *t, int n, int n_min, int n_max, int k, int32_t *out)
{
    for (int m = n_max; m >= n_min; m--) {
        if (m >= n) continue;
        for (int j = n - m - 1; j >= 0; j--) {
            int eq = 1;
            for (int x = 0; x < m; x++) eq &= t[j + x] == t[n - m + x];
            if (!eq) continue;
            int c = 0;
            for (; c < k && j + m + c < n; c++) out[c] = t[j + m + c];
            return c;
        }
    }
    return 0;
}

Test(engine_spec, ngram_lookup_matches_model)
{
    unsigned seed = 34;
    printf("ngram_lookup seed %u\n", seed);
    srand(seed);
    int32_t t[200], a[16], b[16];
    int found = 0;
    for (int it = 0; it < 20000; it++) {
        int n = 1 + rand() % 120, alpha = 2 + rand() % 6;
        for (int i = 0; i < n; i++) t[i] = rand() % alpha;
        int n_min = 1 + rand() % 3, n_max = n_min + rand() % 4, k = 1 + rand() % 8;
        memset(a, 0x55, sizeof a);
        int x = spec_ngram_lookup(t, n, n_min, n_max, k, a);
        int y = ts_lookup_model(t, n, n_min, n_max, k, b);
        cr_assert_eq(x, y, "iteration %d: %d vs %d", it, x, y);
        for (int i = 0; i < x; i++) cr_assert_eq(a[i], b[i], "iteration %d token %d", it, i);
        cr_assert_eq(a[x < 16 ? x : 15] == 0x55555555 || x == 16, 1, "wrote past its count");
        found += x > 0;
    }
    cr_assert_gt(found, 10000, "most random small-alphabet strings repeat a suffix");
    /* the longest recurring suffix wins over a later, shorter one */
    int32_t u[] = {1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3};
    cr_assert_eq(spec_ngram_lookup(u, 11, 1, 3, 2, a), 2);
    cr_assert_eq(a[0], 9);
    cr_assert_eq(a[1], 5);
    cr_assert_eq(spec_ngram_lookup(u, 11, 1, 2, 2, a), 2);
    cr_assert_eq(a[0], 7, "with suffixes up to 2, the latest '2 3' is followed by 7");
    cr_assert_eq(spec_ngram_lookup(u, 11, 4, 6, 2, a), 0, "no suffix of 4 recurs");
}

Test(engine_spec, next_k_follows_acceptance)
{
    cr_assert_eq(spec_next_k(4, 4, 4, 8), 5);
    cr_assert_eq(spec_next_k(8, 8, 8, 8), 8);
    cr_assert_eq(spec_next_k(5, 5, 2, 8), 3);
    cr_assert_eq(spec_next_k(5, 5, 0, 8), 1);
    cr_assert_eq(spec_next_k(1, 1, 0, 8), 1);
    int m;
    cr_assert_eq(spec_method_parse("ngram", &m), 0);
    cr_assert_eq(m, SPEC_NGRAM);
    cr_assert_eq(spec_method_parse("off", &m), 0);
    cr_assert_eq(m, SPEC_OFF);
    cr_assert_neq(spec_method_parse("eagle", &m), 0);
}

/* ---- the engine ------------------------------------------------------------------------------ */

/* The engine knobs a test varies. */
typedef struct ts_opts {
    int spec;          /* 0 off, else ngram */
    int k, ngram_min;
    size_t kv;
    int prefix, max_seqs, batch_tokens;
    int kv_dtype, kv_window, kv_sinks;
} ts_opts;

static ts_opts ts_default(int spec)
{
    return (ts_opts){spec, 4, 1, (size_t)16 << 20, 1, 16, 128, KV_F16, 0, 0};
}

static engine *ts_engine(const ts_opts *o)
{
    engine_config c;
    te_config(&c, o->kv);
    c.prefix_cache = o->prefix;
    c.max_seqs = o->max_seqs;
    c.max_batch_tokens = o->batch_tokens;
    c.kv_dtype = o->kv_dtype;
    c.kv_window = o->kv_window;
    c.kv_sinks = o->kv_sinks;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    c.spec_method = o->spec ? SPEC_NGRAM : SPEC_OFF;
    c.spec_k = o->k;
    c.spec_ngram_min = o->ngram_min;
    c.spec_ngram_max = 4;
    c.spec_disable_batch = 64;
    char err[512];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "engine_create: %s", err);
    return e;
}

/* Nothing running and every block back with the cache. */
static void ts_idle(engine *e)
{
    engine_stats st;
    int64_t deadline = clk_now_us() + 5000000;
    do {
        engine_get_stats(e, &st);
        if (st.num_running + st.num_waiting == 0 && !st.in_flight && st.kv_blocks_used == st.kv_blocks_cached) return;
        usleep(1000);
    } while (clk_now_us() < deadline);
    cr_assert_fail("blocks held after every request finished: %lld used, %lld cached", (long long)st.kv_blocks_used,
                   (long long)st.kv_blocks_cached);
}

/* Speculation verified drafts, accepted some and rejected some. */
static void ts_speculated(const engine_stats *st, const char *what)
{
    cr_assert_gt(st->spec_drafts, 0, "%s: no verify row ran", what);
    cr_assert_gt(st->spec_accepted, 0, "%s: nothing accepted", what);
    cr_assert_lt(st->spec_accepted, st->spec_draft_tokens, "%s: nothing rejected", what);
    cr_assert_eq(st->spec_method, SPEC_NGRAM);
    cr_assert_eq(st->overlap, 0, "speculating steps are synchronous");
}

/* Every golden case greedy, max_seqs at a time, against the golden tokens. */
static void ts_golden(const ts_opts *o, int want_preempt, const char *what)
{
    engine *e = ts_engine(o);
    static te_req q[16];
    memset(q, 0, sizeof q);
    for (int i = 0; i < te_n_cases; i++) {
        q[i].n = 1;
        q[i].id = te_submit(e, te_cases[i].prompt, te_cases[i].n_prompt, te_cases[i].n_gen, 1, 0, NULL);
    }
    te_streams_collect(e, q, te_n_cases, te_n_cases);
    for (int i = 0; i < te_n_cases; i++) {
        const te_case *t = &te_cases[i];
        cr_assert_eq(q[i].c[0].finish, ENGINE_FINISH_LENGTH, "%s: %s", what, t->name);
        cr_assert_eq(q[i].c[0].n_toks, t->n_gen, "%s: %s: %d tokens", what, t->name, q[i].c[0].n_toks);
        for (int k = 0; k < t->n_gen; k++)
            cr_assert_eq(q[i].c[0].toks[k], t->gen[k], "%s: %s token %d", what, t->name, k);
        cr_assert_eq(q[i].c[0].usage.completion_tokens, t->n_gen);
    }
    ts_idle(e);
    engine_stats st;
    engine_get_stats(e, &st);
    ts_speculated(&st, what);
    if (want_preempt) cr_assert_gt(st.preemptions, 0, "%s: the small pool must force preemption", what);
    printf("%s: %lld verify rows, %lld drafts, %lld accepted, %lld steps for %lld tokens\n", what,
           (long long)st.spec_drafts, (long long)st.spec_draft_tokens, (long long)st.spec_accepted,
           (long long)st.steps, (long long)st.generation_tokens);
    engine_destroy(e, 1);
}

Test(engine_spec, golden_greedy_alone_and_batched)
{
    TE_NEED_MODEL();
    ts_opts o = ts_default(1);
    o.max_seqs = 1;
    ts_golden(&o, 0, "one at a time");
    o.max_seqs = 16;
    o.prefix = 0;
    ts_golden(&o, 0, "batched");
    o.prefix = 1;
    o.k = 8;
    ts_golden(&o, 0, "batched, prefix cache, k 8");
}

Test(engine_spec, golden_greedy_under_preemption)
{
    TE_NEED_MODEL();
    ts_opts o = ts_default(1);
    o.kv = 40 * 16 * 640; /* 40 blocks: the longest case needs 22 */
    o.batch_tokens = 64;
    ts_golden(&o, 1, "preemption");
    o.prefix = 0;
    ts_golden(&o, 1, "preemption, no prefix cache");
}

Test(engine_spec, golden_greedy_int8_and_fp8_kv)
{
    TE_NEED_MODEL();
    /* the golden tokens come from f16 KV: compare against the same dtype with speculation off */
    int dts[] = {KV_I8, KV_FP8};
    for (int d = 0; d < 2; d++) {
        static te_req runs[2][16];
        for (int sp = 0; sp < 2; sp++) {
            ts_opts o = ts_default(sp);
            o.kv_dtype = dts[d];
            memset(runs[sp], 0, sizeof runs[sp]);
            engine *e = ts_engine(&o);
            for (int i = 0; i < te_n_cases; i++) {
                runs[sp][i].n = 1;
                runs[sp][i].id = te_submit(e, te_cases[i].prompt, te_cases[i].n_prompt, te_cases[i].n_gen, 1, 0, NULL);
            }
            te_streams_collect(e, runs[sp], te_n_cases, te_n_cases);
            ts_idle(e);
            engine_stats st;
            engine_get_stats(e, &st);
            if (sp) ts_speculated(&st, "quantised KV");
            engine_destroy(e, 1);
        }
        te_streams_same(runs[0], runs[1], te_n_cases, d ? "fp8 KV" : "int8 KV");
    }
}

Test(engine_spec, window_matches_off)
{
    TE_NEED_MODEL();
    static te_req runs[2][4];
    for (int sp = 0; sp < 2; sp++) {
        ts_opts o = ts_default(sp);
        o.kv_window = 64;
        o.kv_sinks = 16;
        memset(runs[sp], 0, sizeof runs[sp]);
        engine *e = ts_engine(&o);
        for (int i = 0; i < 4; i++) {
            runs[sp][i].n = 1;
            runs[sp][i].id = te_submit(e, te_cases[i].prompt, te_cases[i].n_prompt, 200, 1, 0, NULL);
        }
        te_streams_collect(e, runs[sp], 4, 4);
        ts_idle(e);
        engine_stats st;
        engine_get_stats(e, &st);
        if (sp) ts_speculated(&st, "window");
        engine_destroy(e, 1);
    }
    te_streams_same(runs[0], runs[1], 4, "sinks + window");
}

/* One request of the mixed workload. */
typedef struct ts_spec {
    int case_i, max_tokens, n;
    float temp, top_p, min_p, rep, freq, pres;
    int top_k, n_logprobs, min_tokens, prompt_logprobs;
    const char *stop;
    uint64_t seed;
    int32_t stop_id; /* ≥ 0: one stop_token_ids entry */
} ts_spec;

static uint64_t ts_submit(engine *e, const ts_spec *s)
{
    const te_case *t = &te_cases[s->case_i % te_n_cases];
    engine_request r;
    memset(&r, 0, sizeof r);
    r.prompt = malloc((size_t)t->n_prompt * sizeof(int32_t));
    memcpy(r.prompt, t->prompt, (size_t)t->n_prompt * sizeof(int32_t));
    r.n_prompt = t->n_prompt;
    r.n = s->n;
    r.max_tokens = s->max_tokens;
    smp_params_default(&r.sampling);
    r.sampling.temperature = s->temp;
    r.sampling.top_p = s->top_p > 0 ? s->top_p : 1.0f;
    r.sampling.top_k = s->top_k;
    r.sampling.min_p = s->min_p;
    r.sampling.repetition_penalty = s->rep > 0 ? s->rep : 1.0f;
    r.sampling.frequency_penalty = s->freq;
    r.sampling.presence_penalty = s->pres;
    r.sampling.n_logprobs = s->n_logprobs;
    r.sampling.min_tokens = s->min_tokens;
    r.sampling.seed = s->seed;
    r.sampling.has_seed = 1;
    if (s->stop_id >= 0) {
        r.sampling.stop_ids = malloc(sizeof(int32_t));
        r.sampling.stop_ids[0] = s->stop_id;
        r.sampling.n_stop_ids = 1;
    }
    r.prompt_logprobs = s->prompt_logprobs;
    r.prompt_top = -1;
    if (s->stop) {
        r.stop = malloc(sizeof *r.stop);
        r.stop[0] = strdup(s->stop);
        r.n_stop = 1;
    }
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    return id;
}

static const ts_spec ts_mixed[] = {
    {0, 60, 1, 0.0f, 0, 0, 0, 0, 0, 0, -1, 0, 0, "little", 1, -1},        /* greedy, a stop string */
    {1, 80, 1, 0.9f, 0.9f, 0, 0, 0, 0, 0, 3, 0, 0, NULL, 11, -1},         /* top_p, log-probs */
    {2, 70, 3, 1.1f, 0, 0.05f, 0, 0, 0, 20, -1, 0, 0, ".", 12, -1},       /* n = 3, top_k, min_p, stop */
    {3, 90, 1, 0.8f, 0, 0, 1.3f, 0.4f, 0.3f, 0, 0, 0, 0, NULL, 13, -1},   /* every penalty */
    {4, 50, 2, 1.0f, 0.95f, 0, 1.1f, 0, 0, 0, 2, 10, 1, NULL, 14, -1},    /* min_tokens, prompt log-probs */
    {5, 120, 1, 0.7f, 0, 0, 0, 0.2f, 0, 40, -1, 0, 0, " the", 15, -1},   /* a stop string across tokens */
    {6, 3, 1, 1.0f, 0, 0, 0, 0, 0, 0, 1, 0, 0, NULL, 16, -1},             /* a short max_tokens */
    {7, 100, 1, 1.2f, 0.8f, 0.1f, 0, 0, 0.5f, 10, 5, 0, 0, "and", 17, -1},
    {0, 200, 1, 0.0f, 0, 0, 0, 0, 0, 0, 2, 0, 0, NULL, 18, -1},          /* greedy, log-probs, long */
    {1, 200, 1, 0.0f, 0, 0, 0, 0, 0, 0, -1, 0, 0, NULL, 19, 0},          /* stop_token_ids (set below) */
    {2, 37, 1, 0.0f, 0, 0, 0, 0, 0, 0, -1, 0, 0, NULL, 20, -1},          /* max_tokens inside a run */
};
#define TS_MIXED ((int)(sizeof ts_mixed / sizeof ts_mixed[0]))

/* The mixed workload with speculation off, then on, gives the same streams. */
Test(engine_spec, mixed_workload_matches_off)
{
    TE_NEED_MODEL();
    static ts_spec w[TS_MIXED];
    memcpy(w, ts_mixed, sizeof w);
    /* a stop id that plain greedy decoding of case 1 reaches late in its output */
    const te_case *g1 = &te_cases[1];
    w[9].stop_id = g1->gen[g1->n_gen * 2 / 3];
    static te_req runs[2][TS_MIXED];
    engine_stats st[2];
    for (int sp = 0; sp < 2; sp++) {
        memset(runs[sp], 0, sizeof runs[sp]);
        ts_opts o = ts_default(sp);
        engine *e = ts_engine(&o);
        int finals = 0;
        for (int i = 0; i < TS_MIXED; i++) {
            runs[sp][i].n = w[i].n;
            runs[sp][i].id = ts_submit(e, &w[i]);
            finals += w[i].n;
        }
        te_streams_collect(e, runs[sp], TS_MIXED, finals);
        ts_idle(e);
        engine_get_stats(e, &st[sp]);
        engine_destroy(e, 1);
    }
    te_streams_same(runs[0], runs[1], TS_MIXED, "mixed");
    ts_speculated(&st[1], "mixed");
    cr_assert_eq(st[0].spec_drafts, 0);
    cr_assert_eq(runs[1][0].c[0].finish, ENGINE_FINISH_STOP);
    cr_assert_str_eq(runs[1][0].c[0].text, ", there was a ");
    cr_assert_eq(runs[1][9].c[0].finish, ENGINE_FINISH_STOP);
    cr_assert_eq(runs[1][9].c[0].stop_token, w[9].stop_id);
    cr_assert_eq(runs[1][10].c[0].n_toks, 37, "max_tokens is exact");
    cr_assert_eq(st[1].generation_tokens >= st[0].generation_tokens, 1);
    printf("mixed: %lld verify rows, %lld drafts, %lld accepted; steps %lld off, %lld on\n",
           (long long)st[1].spec_drafts, (long long)st[1].spec_draft_tokens, (long long)st[1].spec_accepted,
           (long long)st[0].steps, (long long)st[1].steps);
}

/* Grammar-constrained requests: a draft the grammar forbids ends the run; the streams are those
 * of speculation off. */
Test(engine_spec, grammar_requests_match_off)
{
    TE_NEED_MODEL();
    static te_req runs[2][4];
    gr_error ge;
    const char *re = "( [a-z]+)+\\.";
    engine_stats st;
    for (int sp = 0; sp < 2; sp++) {
        memset(runs[sp], 0, sizeof runs[sp]);
        ts_opts o = ts_default(sp);
        engine *e = ts_engine(&o);
        for (int i = 0; i < 4; i++) {
            const te_case *t = &te_cases[i];
            engine_request r;
            memset(&r, 0, sizeof r);
            r.prompt = malloc((size_t)t->n_prompt * sizeof(int32_t));
            memcpy(r.prompt, t->prompt, (size_t)t->n_prompt * sizeof(int32_t));
            r.n_prompt = t->n_prompt;
            r.n = i == 1 ? 2 : 1;
            r.max_tokens = 60;
            smp_params_default(&r.sampling);
            r.sampling.temperature = i == 0 ? 0.0f : 1.0f;
            r.sampling.seed = 100 + (uint64_t)i;
            r.sampling.has_seed = 1;
            r.sampling.n_logprobs = 1;
            if (i < 2) {
                r.grammar = gr_compile_regex(re, strlen(re), &ge);
                cr_assert_not_null(r.grammar, "%s", ge.msg);
            }
            runs[sp][i].n = r.n;
            uint64_t id;
            cr_assert_eq(engine_submit(e, &r, &id), 0);
            runs[sp][i].id = id;
        }
        te_streams_collect(e, runs[sp], 4, 5);
        ts_idle(e);
        engine_get_stats(e, &st);
        engine_destroy(e, 1);
    }
    te_streams_same(runs[0], runs[1], 4, "grammar");
    cr_assert_gt(st.spec_drafts, 0);
    for (int c = 0; c < 2; c++) {
        const te_choice *x = &runs[1][1].c[c];
        if (x->finish == ENGINE_FINISH_STOP) cr_assert_eq(x->text[strlen(x->text) - 1], '.', "'%s'", x->text);
    }
}

/* A cancel ends the request at the next step; its blocks come back; the others go on. */
Test(engine_spec, cancel)
{
    TE_NEED_MODEL();
    ts_opts o = ts_default(1);
    engine *e = ts_engine(&o);
    static te_req q[2];
    memset(q, 0, sizeof q);
    q[0].n = q[1].n = 1;
    q[0].id = te_submit(e, te_cases[0].prompt, te_cases[0].n_prompt, 400, 1, 0.0f, NULL);
    q[1].id = te_submit(e, te_cases[1].prompt, te_cases[1].n_prompt, te_cases[1].n_gen, 1, 0, NULL);
    int64_t deadline = clk_now_us() + 30000000;
    while (q[0].c[0].n_toks < 5) {
        engine_event *ev[16];
        int k = engine_poll(e, ev, 16);
        for (int i = 0; i < k; i++) {
            te_req *r = ev[i]->id == q[0].id ? &q[0] : &q[1];
            te_choice *c = &r->c[ev[i]->index];
            for (int j = 0; j < ev[i]->n_tokens; j++) c->toks[c->n_toks++] = ev[i]->tokens[j];
            if (ev[i]->finish) c->finish = ev[i]->finish;
            engine_event_free(ev[i]);
        }
        cr_assert_lt(clk_now_us(), deadline);
        if (!k) usleep(200);
    }
    engine_cancel(e, q[0].id);
    te_streams_collect(e, q, 2, 2 - (q[1].c[0].finish != 0));
    cr_assert_eq(q[0].c[0].finish, ENGINE_FINISH_ABORT);
    cr_assert_lt(q[0].c[0].n_toks, 400);
    cr_assert_eq(q[1].c[0].finish, ENGINE_FINISH_LENGTH);
    for (int k = 0; k < te_cases[1].n_gen; k++) cr_assert_eq(q[1].c[0].toks[k], te_cases[1].gen[k], "token %d", k);
    ts_idle(e);
    engine_destroy(e, 1);
}

/* ---- the sampled distribution ---------------------------------------------------------------- */

#define TS_DRAWS 300
#define TS_POS 8

/* TS_DRAWS seeded requests (seeds from seed0) at temperature 0.8 on a prompt that repeats itself;
 * counts[p][token] of each output position p < TS_POS. */
static void ts_draws(int spec, uint64_t seed0, int (*counts)[512], engine_stats *st)
{
    ts_opts o = ts_default(spec);
    o.max_seqs = 32;
    o.batch_tokens = 256;
    engine *e = ts_engine(&o);
    static te_req q[TS_DRAWS];
    memset(q, 0, sizeof q);
    const te_case *t = &te_cases[0];
    /* the prompt, its greedy continuation, the prompt again: the n-gram proposer offers the
     * continuation, which the sampled draws often follow */
    int32_t prompt[256];
    int n = 0;
    for (int i = 0; i < t->n_prompt; i++) prompt[n++] = t->prompt[i];
    for (int i = 0; i < 24 && i < t->n_gen; i++) prompt[n++] = t->gen[i];
    for (int i = 1; i < t->n_prompt; i++) prompt[n++] = t->prompt[i];
    for (int i = 0; i < TS_DRAWS; i++) {
        q[i].n = 1;
        q[i].id = te_submit_seed(e, prompt, n, TS_POS, 1, 0.8f, NULL, seed0 + (uint64_t)i);
    }
    te_streams_collect(e, q, TS_DRAWS, TS_DRAWS);
    for (int i = 0; i < TS_DRAWS; i++)
        for (int p = 0; p < TS_POS && p < q[i].c[0].n_toks; p++) counts[p][q[i].c[0].toks[p] & 511]++;
    ts_idle(e);
    engine_get_stats(e, st);
    engine_destroy(e, 1);
}

/* Speculation off with seeds 0 .. N-1 and on with seeds N .. 2N-1 (independent samples): at every
 * output position the two empirical distributions pass a two-sample chi-square test at the 0.1%
 * level (categories with fewer than 5 expected draws pooled). A sampler whose speculative rows
 * drew from anything but the target's distribution (the draft's point mass, or the residual
 * without renormalising) fails it: the proposals are accepted in a large share of these draws. */
Test(engine_spec, sampled_distribution_unchanged)
{
    TE_NEED_MODEL();
    static int a[TS_POS][512], b[TS_POS][512];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    engine_stats sa, sb;
    ts_draws(0, 1000, a, &sa);
    ts_draws(1, 1000 + TS_DRAWS, b, &sb);
    ts_speculated(&sb, "sampled");
    /* the 0.1% point of chi-square (Wilson–Hilferty: within 1% of the table from 1 df on) */
    for (int p = 0; p < TS_POS; p++) {
        double chi = 0, pa = 0, pb = 0;
        int df = -1;
        for (int v = 0; v < 512; v++) {
            double x = a[p][v], y = b[p][v];
            if (x + y < 10) { /* pooled */
                pa += x;
                pb += y;
                continue;
            }
            chi += (x - y) * (x - y) / (x + y);
            df++;
        }
        if (pa + pb > 0) {
            chi += (pa - pb) * (pa - pb) / (pa + pb);
            df++;
        }
        if (df < 1) continue;
        double h = 2.0 / (9.0 * df), crit = df * pow(1.0 - h + 3.09 * sqrt(h), 3); /* Wilson–Hilferty */
        printf("position %d: chi-square %.1f on %d df (critical %.1f)\n", p, chi, df, crit);
        cr_assert_lt(chi, crit, "position %d: chi-square %.1f on %d degrees of freedom", p, chi, df);
    }
    /* and seeded draws are the very draws of speculation off */
    static int c[TS_POS][512];
    memset(c, 0, sizeof c);
    engine_stats sc;
    ts_draws(1, 1000, c, &sc);
    cr_assert_eq(memcmp(a, c, sizeof a), 0, "seeded requests draw the same tokens with speculation on");
}

/* ---- every architecture test model ------------------------------------------------------------ */

/* Greedy continuations of self-repeating prompts on one file of the architecture reference set,
 * speculation off and on, run together: the same tokens. Adds the draft and accepted counts. */
static void ts_arch(const char *path, int64_t *drafts, int64_t *acc)
{
    char err[512];
    model *m;
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    cr_assert_not_null(tok, "%s", err);
    int32_t prompt[64];
    int n = 0, v = m->hp.n_vocab;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 12; i++) prompt[n++] = (int32_t)((7 + 13 * i + (r == 2 && i > 8 ? 5 : 0)) % v);
    static te_req runs[2][3];
    for (int sp = 0; sp < 2; sp++) {
        engine_config c;
        engine_config_default(&c);
        c.model = m;
        c.tok = tok;
        c.device = "cpu";
        c.n_threads = 1;
        c.make_backend = be_create;
        c.kv_memory_bytes = (size_t)64 << 20;
        c.quiet = 1;
        c.wake = te_wake;
        c.wake_ud = &te_w;
        c.max_seqs = 4;
        c.max_batch_tokens = 128;
        c.spec_method = sp ? SPEC_NGRAM : SPEC_OFF;
        c.spec_k = 6;
        c.spec_ngram_min = 1;
        engine *e = engine_create(&c, err, sizeof err);
        cr_assert_not_null(e, "%s: %s", path, err);
        memset(runs[sp], 0, sizeof runs[sp]);
        for (int q = 0; q < 3; q++) {
            runs[sp][q].n = 1;
            engine_request r;
            memset(&r, 0, sizeof r);
            r.n_prompt = n - 4 * q;
            r.prompt = malloc((size_t)r.n_prompt * sizeof(int32_t));
            memcpy(r.prompt, prompt + 4 * q, (size_t)r.n_prompt * sizeof(int32_t));
            r.n = 1;
            r.max_tokens = 96;
            smp_params_default(&r.sampling);
            r.sampling.temperature = 0.0f;
            r.sampling.n_logprobs = 2; /* the log-probs are compared bit for bit too */
            cr_assert_eq(engine_submit(e, &r, &runs[sp][q].id), 0);
        }
        te_streams_collect(e, runs[sp], 3, 3);
        ts_idle(e);
        engine_stats st;
        engine_get_stats(e, &st);
        if (sp) {
            *drafts += st.spec_draft_tokens;
            *acc += st.spec_accepted;
            printf("%s: %lld drafts, %lld accepted\n", path, (long long)st.spec_draft_tokens, (long long)st.spec_accepted);
        }
        engine_destroy(e, 1);
    }
    te_streams_same(runs[0], runs[1], 3, path);
    tok_destroy(tok);
    model_destroy(m);
}

Test(engine_spec, every_architecture_greedy_matches_off, .timeout = 600)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/archs", tu_shared_dir());
    DIR *d = opendir(dir);
    if (!d) cr_skip_test("the architecture reference set is not under KVSERVE_SHARED (%s)", dir);
    struct dirent *de;
    int n = 0;
    int64_t drafts = 0, acc = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".gguf")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        ts_arch(path, &drafts, &acc);
        n++;
    }
    closedir(d);
    cr_assert_gt(n, 0, "no model in %s", dir);
    /* and synthetic multi-head (not grouped) models, whose single-token rows take the CPU's
     * decode attention path: F32 and Q8_0 weights, near-flat logits (many near-ties) */
    int types[] = {DT_F32, DT_Q8_0};
    for (int t = 0; t < 2; t++) {
        mkm_params p;
        mkm_params_default(&p);
        p.heads = 4;
        p.kv_heads = 4;
        p.dim = 64;
        p.layers = 2;
        p.type = types[t];
        p.seed = 34 + (uint64_t)t;
        char path[1024];
        tu_write_mkmodel(&p, t ? "spec-mha-q8" : "spec-mha-f32", path, sizeof path);
        ts_arch(path, &drafts, &acc);
        unlink(path);
    }
    cr_assert_gt(drafts, 0);
    cr_assert_gt(acc, 0, "some drafts were accepted");
}

/* ---- the draft-model proposer ------------------------------------------------------------------ */

/* A synthetic pair: the target's first two layers, embedding and head are the draft's, its four
 * more layers are quiet. Writes both files; the caller unlinks them. */
static void ts_pair(char *target, char *draft, size_t n, int type, int draft_vocab)
{
    mkm_params p;
    mkm_params_default(&p);
    p.dim = 64;
    p.heads = 4;
    p.kv_heads = 2;
    p.type = type;
    p.seed = 77;
    p.layers = 6;
    p.quiet_from = 2;
    p.quiet_scale = 0.01f;
    tu_write_mkmodel(&p, "spec-target", target, n);
    p.layers = 2;
    p.quiet_from = 0;
    if (draft_vocab) p.vocab = draft_vocab;
    tu_write_mkmodel(&p, "spec-draft", draft, n);
}

/* Runs the same four requests (one greedy; seeded sampling at temperature t with log-probs,
 * n = 2, penalties) on target tp, speculation off and with draft dp, into runs[0] and runs[1];
 * *st gets the speculating engine's stats. */
static void ts_draft_runs(const char *tp, const char *dp, float t, te_req (*runs)[4], engine_stats *st)
{
    char err[512];
    model *m;
    cr_assert_eq(model_load(tp, &m, err, sizeof err), 0, "%s", err);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    cr_assert_not_null(tok, "%s", err);
    for (int sp = 0; sp < 2; sp++) {
        engine_config c;
        engine_config_default(&c);
        c.model = m;
        c.tok = tok;
        c.device = "cpu";
        c.n_threads = 1;
        c.make_backend = be_create;
        c.kv_memory_bytes = (size_t)32 << 20;
        c.quiet = 1;
        c.wake = te_wake;
        c.wake_ud = &te_w;
        c.max_seqs = 8;
        c.max_batch_tokens = 128;
        c.spec_method = sp ? SPEC_DRAFT : SPEC_OFF;
        c.spec_draft_model = dp;
        c.spec_k = 5;
        c.spec_disable_batch = 8; /* all five sequences draft together: the batched proposer */
        engine *e = engine_create(&c, err, sizeof err);
        cr_assert_not_null(e, "%s", err);
        memset(runs[sp], 0, sizeof runs[sp]);
        for (int q = 0; q < 4; q++) {
            engine_request r;
            memset(&r, 0, sizeof r);
            r.n_prompt = 10 + 7 * q;
            r.prompt = malloc((size_t)r.n_prompt * sizeof(int32_t));
            for (int i = 0; i < r.n_prompt; i++) r.prompt[i] = (int32_t)(3 + (i * 31 + q * 7) % 500);
            r.n = q == 2 ? 2 : 1;
            r.max_tokens = 80;
            smp_params_default(&r.sampling);
            r.sampling.temperature = q == 0 ? 0.0f : t;
            r.sampling.seed = 500 + (uint64_t)q;
            r.sampling.has_seed = 1;
            r.sampling.n_logprobs = q % 2 ? 2 : -1;
            r.sampling.ignore_eos = 1;
            if (q == 3) r.sampling.repetition_penalty = 1.2f, r.sampling.top_p = 0.9f;
            runs[sp][q].n = r.n;
            cr_assert_eq(engine_submit(e, &r, &runs[sp][q].id), 0);
        }
        te_streams_collect(e, runs[sp], 4, 5);
        ts_idle(e);
        engine_get_stats(e, st);
        engine_destroy(e, 1);
    }
    tok_destroy(tok);
    model_destroy(m);
}

/* A synthetic pair's target with speculation off and with the draft (self: the target itself)
 * at temperature t: the same streams. *st gets the speculating engine's stats. */
static void ts_draft_same(const char *what, float t, int self, engine_stats *st)
{
    char tp[1024], dp[1024];
    ts_pair(tp, dp, sizeof tp, DT_F32, 0);
    static te_req runs[2][4];
    ts_draft_runs(tp, self ? tp : dp, t, runs, st);
    te_streams_same(runs[0], runs[1], 4, what);
    printf("%s: %lld verify rows, %lld drafts, %lld accepted\n", what, (long long)st->spec_drafts,
           (long long)st->spec_draft_tokens, (long long)st->spec_accepted);
    cr_assert_eq(st->spec_method, SPEC_DRAFT);
    unlink(tp);
    unlink(dp);
}

/* Greedy and seeded-sampled requests on the target, speculation off and with the draft: the
 * same streams; the draft's guesses are mostly right. */
Test(engine_spec, draft_model_matches_off, .timeout = 300)
{
    engine_stats st;
    ts_draft_same("draft model", 0.05f, 0, &st); /* sampled, but peaked: mostly agreeing */
    cr_assert_gt(st.spec_accepted * 3, st.spec_draft_tokens, "a quiet-layer target agrees with its draft often");
}

/* A sampled request's guesses are coupled with the target's draws (the same parameters and random
 * number): with the target as its own draft every guess is the token the target draws, even at
 * temperature 1 over a flat random model, where a greedy guess would be accepted with p(argmax). */
Test(engine_spec, draft_guesses_are_coupled_with_sampling, .timeout = 300)
{
    engine_stats st;
    ts_draft_same("the target as its own draft, temperature 1", 1.0f, 1, &st);
    cr_assert_gt(st.spec_draft_tokens, 100);
    cr_assert_eq(st.spec_accepted, st.spec_draft_tokens, "a guess differed from the target's own draw");
}

/* A draft whose vocabulary differs is refused at start-up, and so is draft without a file. */
Test(engine_spec, draft_model_vocabulary_checked)
{
    char tp[1024], dp[1024], err[512];
    ts_pair(tp, dp, sizeof tp, DT_F32, 600);
    model *m;
    cr_assert_eq(model_load(tp, &m, err, sizeof err), 0, "%s", err);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    engine_config c;
    engine_config_default(&c);
    c.model = m;
    c.tok = tok;
    c.device = "cpu";
    c.n_threads = 1;
    c.make_backend = be_create;
    c.kv_memory_bytes = (size_t)32 << 20;
    c.quiet = 1;
    c.spec_method = SPEC_DRAFT;
    c.spec_draft_model = dp;
    cr_assert_null(engine_create(&c, err, sizeof err));
    cr_assert(strstr(err, "vocabulary"), "%s", err);
    c.spec_draft_model = NULL;
    cr_assert_null(engine_create(&c, err, sizeof err));
    cr_assert(strstr(err, "draft-model"), "%s", err);
    tok_destroy(tok);
    model_destroy(m);
    unlink(tp);
    unlink(dp);
}

/* One proposer drafting for several sequences as one batch guesses what it guesses for each of
 * them alone (the draft's kernels are batch-invariant), across catch-ups longer than a draft
 * step (chunked), different k, and a second round that reuses each shadow's agreeing prefix. */
static spec_proposer *ts_draft_proposer(const char *dp, int max_seqs, size_t kv_bytes)
{
    char err[512];
    model *m;
    cr_assert_eq(model_load(dp, &m, err, sizeof err), 0, "%s", err);
    spec_draft_config dc = {m, be_create, "cpu", NULL, 1, kv_bytes, max_seqs, KV_F16, 16, 256, 24, NULL, 0};
    spec_proposer *p = spec_draft_create(&dc, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    return p;
}

Test(engine_spec, draft_batch_equals_one_at_a_time, .timeout = 120)
{
    char tp[1024], dp[1024];
    ts_pair(tp, dp, sizeof tp, DT_Q8_0, 0);
    enum { N = 4 };
    spec_proposer *batched = ts_draft_proposer(dp, 3, (size_t)8 << 20), *alone = ts_draft_proposer(dp, 1, (size_t)8 << 20);
    seq *a[N], *b[N];
    int k[N] = {5, 1, 3, 4};
    for (int i = 0; i < N; i++) {
        int32_t pr[70];
        int n = 5 + 20 * i; /* up to 65 tokens: catch-ups of up to three draft steps of 24 */
        for (int j = 0; j < n; j++) pr[j] = (int32_t)(3 + (j * 13 + i * 29) % 500);
        a[i] = seq_create(pr, n, 100);
        b[i] = seq_create(pr, n, 100);
        cr_assert(a[i] && b[i]);
    }
    for (int round = 0; round < 3; round++) {
        int na[N], nb[N];
        batched->ops->propose(batched, a, k, N, na); /* groups of 3 and 1 */
        for (int i = 0; i < N; i++) alone->ops->propose(alone, &b[i], &k[i], 1, &nb[i]);
        for (int i = 0; i < N; i++) {
            cr_assert_eq(na[i], k[i], "round %d seq %d: %d guesses of %d", round, i, na[i], k[i]);
            cr_assert_eq(na[i], nb[i]);
            cr_assert(!memcmp(a[i]->draft, b[i]->draft, (size_t)na[i] * sizeof(int32_t)),
                      "round %d seq %d: batched guesses differ from one at a time", round, i);
            /* as if the first guess and one other token were accepted */
            int32_t add[2] = {a[i]->draft[0], (int32_t)(7 + round + i)};
            for (int j = 0; j < 2; j++) {
                a[i]->tokens[a[i]->n_tokens++] = add[j];
                b[i]->tokens[b[i]->n_tokens++] = add[j];
            }
        }
    }
    for (int i = 0; i < N; i++) {
        batched->ops->release(batched, a[i]);
        alone->ops->release(alone, b[i]);
        cr_assert_null(a[i]->spec_state);
        seq_destroy(a[i]);
        seq_destroy(b[i]);
    }
    batched->ops->destroy(batched);
    alone->ops->destroy(alone);
    unlink(tp);
    unlink(dp);
}

/* The draft's prefix cache: a finished sequence's full blocks serve the next one with the same
 * prompt prefix (only whole agreeing blocks), the guesses stay those of a proposer without a
 * cache, and a pool too small to keep every prompt evicts cached blocks instead of failing. */
static seq *ts_seq(int n, unsigned salt, int shared)
{
    int32_t pr[200];
    for (int j = 0; j < n; j++) pr[j] = (int32_t)(3 + ((unsigned)j * 7u + (j < shared ? 0u : salt * 31u)) % 500u);
    seq *s = seq_create(pr, n, 50);
    cr_assert_not_null(s);
    return s;
}

static void ts_same_guesses(spec_proposer *p, spec_proposer *fresh, seq *a, seq *b, int k)
{
    int na, nb;
    p->ops->propose(p, &a, &k, 1, &na);
    fresh->ops->propose(fresh, &b, &k, 1, &nb);
    cr_assert_eq(na, k);
    cr_assert_eq(nb, k);
    cr_assert(!memcmp(a->draft, b->draft, (size_t)k * sizeof(int32_t)), "guesses differ from a cold draft's");
}

Test(engine_spec, draft_prefix_cache, .timeout = 120)
{
    char tp[1024], dp[1024];
    ts_pair(tp, dp, sizeof tp, DT_F32, 0);
    /* 2 layers × 2 kv heads × 16 dims × 2 (K, V) × 2 bytes = 256 bytes a token: 48 blocks of 16 */
    spec_proposer *p = ts_draft_proposer(dp, 2, 48 * 16 * 256);
    struct {
        int n, shared, want;
    } cases[] = {{50, 0, 0}, {60, 40, 32}, {50, 50, 48}, {20, 50, 16}, {130, 0, 0}};
    for (int c = 0; c < 5; c++) {
        spec_proposer *fresh = ts_draft_proposer(dp, 1, (size_t)8 << 20);
        seq *a = ts_seq(cases[c].n, (unsigned)c, cases[c].shared), *b = ts_seq(cases[c].n, (unsigned)c, cases[c].shared);
        int64_t before = spec_draft_cached_tokens(p);
        ts_same_guesses(p, fresh, a, b, 3);
        cr_assert_eq(spec_draft_cached_tokens(p) - before, cases[c].want, "case %d: %lld cached tokens, want %d", c,
                     (long long)(spec_draft_cached_tokens(p) - before), cases[c].want);
        p->ops->release(p, a);
        fresh->ops->release(fresh, b);
        seq_destroy(a);
        seq_destroy(b);
        fresh->ops->destroy(fresh);
    }
    /* many different prompts through a pool that holds about five: the cache makes room */
    spec_proposer *fresh = ts_draft_proposer(dp, 1, (size_t)8 << 20);
    for (int r = 0; r < 12; r++) {
        seq *a = ts_seq(100, 100 + (unsigned)r, 0), *b = ts_seq(100, 100 + (unsigned)r, 0);
        ts_same_guesses(p, fresh, a, b, 2);
        p->ops->release(p, a);
        fresh->ops->release(fresh, b);
        seq_destroy(a);
        seq_destroy(b);
    }
    fresh->ops->destroy(fresh);
    p->ops->destroy(p);
    unlink(tp);
    unlink(dp);
}

/* A sequence whose catch-up in the draft is far longer than what it has left to generate does not
 * propose (the draft would spend more than speculation saves); with enough left it does. */
Test(engine_spec, draft_skips_long_catch_up_for_few_tokens, .timeout = 60)
{
    char tp[1024], dp[1024];
    ts_pair(tp, dp, sizeof tp, DT_F32, 0);
    spec_proposer *p = ts_draft_proposer(dp, 1, (size_t)8 << 20);
    int32_t pr[200];
    for (int j = 0; j < 200; j++) pr[j] = (int32_t)(3 + j * 11 % 500);
    int k = 3, got;
    seq *few = seq_create(pr, 200, 10), *many = seq_create(pr, 200, 40);
    p->ops->propose(p, &few, &k, 1, &got);
    cr_assert_eq(got, 0, "200 tokens to catch up for 10 left: no proposal");
    cr_assert_eq(spec_draft_cached_tokens(p), 0);
    p->ops->propose(p, &many, &k, 1, &got);
    cr_assert_eq(got, 3, "200 tokens to catch up for 40 left: a proposal");
    p->ops->release(p, few);
    p->ops->release(p, many);
    seq_destroy(few);
    seq_destroy(many);
    p->ops->destroy(p);
    unlink(tp);
    unlink(dp);
}
