/*
 * test_engine_overlap.c — the overlapped engine (engine.c, engine/step.h) on the CPU backend and
 * stories260K: step n + 1 is scheduled and launched before step n's tokens are applied, each
 * decoding sequence fed its pending token by the backend.
 *
 * The same workloads run with overlap on and off must give the same events, token for token and
 * text for text (greedy and seeded draws are functions of the logits and the position only):
 * golden greedy cases batched, with the prefix cache and under preemption; a mixed workload of
 * seeded sampling with every filter and penalty, log-probs, n > 1, min_tokens, prompt log-probs
 * and stop strings, the same on a pool that forces preemption; bans, biases and stop ids; a seeded
 * request alone, sent again and among others; grammar-constrained requests (which take synchronous
 * steps). A stop string, end of generation or cancellation is seen one step late: the token
 * computed past it is dropped (counted), never sent; max_tokens is exact. Skips when the model is
 * absent.
 */
#include <unistd.h>

#include "base/clock.h"
#include "tests/engine_harness.h"
#include "tests/engine_streams.h"

TestSuite(engine_overlap, .init = te_setup, .fini = te_teardown, .timeout = 180);

/* An engine on the golden model with overlap on or off. */
static engine *teo_engine(int overlap, size_t kv_bytes, int prefix, int max_seqs, int batch_tokens)
{
    engine_config c;
    te_config(&c, kv_bytes);
    c.prefix_cache = prefix;
    c.max_seqs = max_seqs;
    c.max_batch_tokens = batch_tokens;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    c.overlap = overlap ? ENGINE_OVERLAP_ON : ENGINE_OVERLAP_OFF;
    char err[512];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "engine_create: %s", err);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.overlap, overlap);
    return e;
}

/* Every block back with the cache, nothing running: what the engine holds after its requests. */
static void teo_idle(engine *e)
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

/* Every golden case at once, greedy. */
static void teo_golden(size_t kv, int prefix, int batch_tokens, int want_preempt)
{
    engine *e = teo_engine(1, kv, prefix, 16, batch_tokens);
    static te_req q[16];
    memset(q, 0, sizeof q);
    for (int i = 0; i < te_n_cases; i++) {
        q[i].n = 1;
        q[i].id = te_submit(e, te_cases[i].prompt, te_cases[i].n_prompt, te_cases[i].n_gen, 1, 0, NULL);
    }
    te_streams_collect(e, q, te_n_cases, te_n_cases);
    for (int i = 0; i < te_n_cases; i++) {
        const te_case *t = &te_cases[i];
        cr_assert_eq(q[i].c[0].finish, ENGINE_FINISH_LENGTH, "%s", t->name);
        cr_assert_eq(q[i].c[0].n_toks, t->n_gen, "%s: %d tokens", t->name, q[i].c[0].n_toks);
        for (int k = 0; k < t->n_gen; k++)
            cr_assert_eq(q[i].c[0].toks[k], t->gen[k], "%s token %d", t->name, k);
    }
    teo_idle(e);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_gt(st.steps_overlapped, st.steps / 2, "%lld of %lld steps overlapped", (long long)st.steps_overlapped,
                 (long long)st.steps);
    cr_assert_eq(st.tokens_dropped, 0, "max_tokens is known when the step is launched: nothing is computed past it");
    if (want_preempt) cr_assert_gt(st.preemptions, 0, "the small pool must force preemption");
    engine_destroy(e, 1);
}

Test(engine_overlap, golden_batched)
{
    TE_NEED_MODEL();
    teo_golden((size_t)16 << 20, 0, 128, 0);
    teo_golden((size_t)16 << 20, 1, 128, 0);
}

Test(engine_overlap, golden_under_preemption)
{
    TE_NEED_MODEL();
    size_t kv = 40 * 16 * 640; /* 40 blocks: the longest case needs 22 */
    teo_golden(kv, 0, 64, 1);
    teo_golden(kv, 1, 64, 1);
}

/* One request of the mixed workload. */
typedef struct teo_spec {
    int case_i, max_tokens, n;
    float temp, top_p, min_p, rep, freq, pres;
    int top_k, n_logprobs, min_tokens, prompt_logprobs;
    const char *stop;
    uint64_t seed;
} teo_spec;

/* Adds the bans and biases of request i of teo_banned to a filled request. */
typedef void (*teo_tweak)(engine_request *r, int i);

static uint64_t teo_submit_ex(engine *e, const teo_spec *s, teo_tweak tweak, int i);

static uint64_t teo_submit(engine *e, const teo_spec *s)
{
    return teo_submit_ex(e, s, NULL, 0);
}

static uint64_t teo_submit_ex(engine *e, const teo_spec *s, teo_tweak tweak, int i)
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
    r.prompt_logprobs = s->prompt_logprobs;
    r.prompt_top = -1;
    if (s->stop) {
        r.stop = malloc(sizeof *r.stop);
        r.stop[0] = strdup(s->stop);
        r.n_stop = 1;
    }
    if (tweak) tweak(&r, i);
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    return id;
}

static const teo_spec teo_mixed[] = {
    {0, 60, 1, 0.0f, 0, 0, 0, 0, 0, 0, -1, 0, 0, "little", 1},         /* greedy, a stop string */
    {1, 80, 1, 0.9f, 0.9f, 0, 0, 0, 0, 0, 3, 0, 0, NULL, 11},          /* top_p, log-probs */
    {2, 70, 3, 1.1f, 0, 0.05f, 0, 0, 0, 20, -1, 0, 0, ".", 12},        /* n = 3, top_k, min_p, stop */
    {3, 90, 1, 0.8f, 0, 0, 1.3f, 0.4f, 0.3f, 0, 0, 0, 0, NULL, 13},    /* every penalty */
    {4, 50, 2, 1.0f, 0.95f, 0, 1.1f, 0, 0, 0, 2, 10, 1, NULL, 14},     /* min_tokens, prompt log-probs */
    {5, 120, 1, 0.7f, 0, 0, 0, 0.2f, 0, 40, -1, 0, 0, " the", 15},    /* a stop string across tokens */
    {6, 3, 1, 1.0f, 0, 0, 0, 0, 0, 0, 1, 0, 0, NULL, 16},              /* a short max_tokens */
    {7, 100, 1, 1.2f, 0.8f, 0.1f, 0, 0, 0.5f, 10, 5, 0, 0, "and", 17},
};
#define TEO_MIXED ((int)(sizeof teo_mixed / sizeof teo_mixed[0]))

/* The mixed workload with overlap off, then on, gives the same streams; the stops seen one step
 * late cost dropped tokens, never a sent one. */
Test(engine_overlap, mixed_workload_matches_synchronous)
{
    TE_NEED_MODEL();
    static te_req runs[2][TEO_MIXED];
    engine_stats st[2];
    for (int ov = 0; ov < 2; ov++) {
        memset(runs[ov], 0, sizeof runs[ov]);
        engine *e = teo_engine(ov, (size_t)16 << 20, 1, 16, 128);
        int finals = 0;
        for (int i = 0; i < TEO_MIXED; i++) {
            runs[ov][i].n = teo_mixed[i].n;
            runs[ov][i].id = teo_submit(e, &teo_mixed[i]);
            finals += teo_mixed[i].n;
        }
        te_streams_collect(e, runs[ov], TEO_MIXED, finals);
        teo_idle(e);
        engine_get_stats(e, &st[ov]);
        engine_destroy(e, 1);
    }
    te_streams_same(runs[0], runs[1], TEO_MIXED, "mixed");
    for (int i = 0; i < TEO_MIXED; i++)
        for (int c = 0; c < teo_mixed[i].n; c++) {
            const te_choice *x = &runs[1][i].c[c];
            if (teo_mixed[i].stop) cr_assert_null(strstr(x->text, teo_mixed[i].stop), "request %d: stop string sent", i);
            if (x->finish == ENGINE_FINISH_LENGTH)
                cr_assert_eq(x->n_toks - (teo_mixed[i].prompt_logprobs ? te_cases[teo_mixed[i].case_i].n_prompt : 0),
                             teo_mixed[i].max_tokens, "request %d: max_tokens is exact", i);
        }
    cr_assert_eq(runs[1][0].c[0].finish, ENGINE_FINISH_STOP);
    cr_assert_str_eq(runs[1][0].c[0].text, ", there was a ");
    cr_assert_eq(st[0].tokens_dropped, 0, "a synchronous engine computes nothing past a stop");
    cr_assert_gt(st[1].tokens_dropped, 0, "stops are seen one step late when overlapped");
    cr_assert_gt(st[1].steps_overlapped, 0);
    cr_assert_eq(st[0].steps_overlapped, 0);
}

/* Streamed: a stop string's text never reaches an event, even though the overlapped step computed
 * a token past it. */
Test(engine_overlap, stop_string_streamed_one_step_late)
{
    TE_NEED_MODEL();
    engine *e = teo_engine(1, (size_t)16 << 20, 1, 8, 64);
    static te_req q[1];
    memset(q, 0, sizeof q);
    q[0].n = 1;
    q[0].id = te_submit(e, te_cases[0].prompt, te_cases[0].n_prompt, 40, 1, 0, "little");
    te_streams_collect(e, q, 1, 1);
    cr_assert_eq(q[0].c[0].finish, ENGINE_FINISH_STOP);
    cr_assert_eq(q[0].c[0].stop_str, 0);
    cr_assert_str_eq(q[0].c[0].text, ", there was a ");
    cr_assert_gt(q[0].c[0].n_events, 2, "streamed as it was generated");
    teo_idle(e);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_geq(st.tokens_dropped, 1, "the token computed past the stop is dropped");
    engine_destroy(e, 1);
}

/* A cancel takes effect at the next step: the request ends with abort, its blocks come back, and
 * the other requests are not disturbed. */
Test(engine_overlap, cancel_one_step_late)
{
    TE_NEED_MODEL();
    engine *e = teo_engine(1, (size_t)16 << 20, 1, 8, 64);
    static te_req q[2];
    memset(q, 0, sizeof q);
    const te_case *t = &te_cases[0];
    q[0].n = q[1].n = 1;
    q[0].id = te_submit(e, t->prompt, t->n_prompt, 400, 1, 0.9f, NULL);
    q[1].id = te_submit(e, te_cases[1].prompt, te_cases[1].n_prompt, te_cases[1].n_gen, 1, 0, NULL);
    int64_t deadline = clk_now_us() + 30000000;
    while (q[0].c[0].n_toks < 5) { /* some tokens first, so that steps are in flight */
        engine_event *ev[16];
        int k = engine_poll(e, ev, 16);
        for (int i = 0; i < k; i++) {
            te_req *r = ev[i]->id == q[0].id ? &q[0] : &q[1];
            te_choice *c = &r->c[ev[i]->index];
            for (int j = 0; j < ev[i]->n_tokens; j++) c->toks[c->n_toks++] = ev[i]->tokens[j];
            strncat(c->text, ev[i]->text, sizeof c->text - strlen(c->text) - 1);
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
    teo_idle(e);
    engine_destroy(e, 1);
}

/* Grammar-constrained requests (their masks need the last token on the host: synchronous steps)
 * next to unconstrained ones give what the synchronous engine gives. */
Test(engine_overlap, grammar_requests_match_synchronous)
{
    TE_NEED_MODEL();
    static te_req runs[2][4];
    gr_error ge;
    const char *re = "( [a-z]+)+\\.";
    for (int ov = 0; ov < 2; ov++) {
        memset(runs[ov], 0, sizeof runs[ov]);
        engine *e = teo_engine(ov, (size_t)16 << 20, 1, 16, 128);
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
            r.sampling.temperature = 1.0f;
            r.sampling.seed = 100 + (uint64_t)i;
            r.sampling.has_seed = 1;
            if (i < 2) {
                r.grammar = gr_compile_regex(re, strlen(re), &ge);
                cr_assert_not_null(r.grammar, "%s", ge.msg);
            }
            runs[ov][i].n = r.n;
            uint64_t id;
            cr_assert_eq(engine_submit(e, &r, &id), 0);
            runs[ov][i].id = id;
        }
        te_streams_collect(e, runs[ov], 4, 5);
        teo_idle(e);
        engine_destroy(e, 1);
    }
    te_streams_same(runs[0], runs[1], 4, "grammar");
    for (int c = 0; c < 2; c++) {
        const te_choice *x = &runs[1][1].c[c];
        if (x->finish == ENGINE_FINISH_STOP) cr_assert_eq(x->text[strlen(x->text) - 1], '.', "'%s'", x->text);
    }
}

/* The mixed workload on a pool too small for it: sequences are preempted (their blocks freed, their
 * tokens recomputed later) while a step that names them may be in flight. The overlapped engine
 * gives every choice the same tokens and text as the synchronous one on the same pool (draws are
 * keyed by position, so a recomputed sequence draws what it drew before), ends with every block
 * back, and nothing is sent past a stop. */
static const teo_spec teo_long[] = {
    {0, 200, 2, 0.9f, 0.9f, 0, 0, 0, 0, 0, 2, 0, 0, NULL, 41},         /* n = 2, top_p, log-probs */
    {1, 180, 3, 1.1f, 0, 0.05f, 0, 0, 0, 20, -1, 0, 0, NULL, 42},      /* n = 3, top_k, min_p */
    {2, 220, 1, 0.8f, 0, 0, 1.3f, 0.4f, 0.3f, 0, 0, 0, 0, NULL, 43},   /* every penalty */
    {3, 160, 2, 1.0f, 0.95f, 0, 1.1f, 0, 0, 0, 1, 10, 1, NULL, 44},    /* min_tokens, prompt log-probs */
    {4, 240, 1, 0.7f, 0, 0, 0, 0.2f, 0, 40, -1, 0, 0, "the end", 45}, /* a stop string */
    {5, 200, 1, 0.0f, 0, 0, 0, 0, 0, 0, 3, 0, 0, NULL, 46},            /* greedy, log-probs */
};
#define TEO_LONG ((int)(sizeof teo_long / sizeof teo_long[0]))

Test(engine_overlap, mixed_workload_under_preemption)
{
    TE_NEED_MODEL();
    static te_req runs[2][TEO_LONG];
    engine_stats st[2];
    size_t kv = 32 * 16 * 640; /* 32 blocks of 16 tokens (the context length) for 14 sequences */
    for (int ov = 0; ov < 2; ov++) {
        memset(runs[ov], 0, sizeof runs[ov]);
        engine *e = teo_engine(ov, kv, 0, 16, 64);
        int finals = 0;
        for (int i = 0; i < TEO_LONG; i++) {
            runs[ov][i].n = teo_long[i].n;
            runs[ov][i].id = teo_submit(e, &teo_long[i]);
            finals += teo_long[i].n;
        }
        te_streams_collect(e, runs[ov], TEO_LONG, finals);
        teo_idle(e);
        engine_get_stats(e, &st[ov]);
        engine_destroy(e, 1);
    }
    cr_assert_gt(st[1].preemptions, 0, "the small pool must force preemption");
    cr_assert_gt(st[1].steps_overlapped, 0);
    for (int i = 0; i < TEO_LONG; i++)
        for (int c = 0; c < teo_long[i].n; c++) {
            const te_choice *x = &runs[0][i].c[c], *y = &runs[1][i].c[c];
            cr_assert_eq(x->n_toks, y->n_toks, "request %d choice %d: %d tokens, %d overlapped", i, c, x->n_toks,
                         y->n_toks);
            for (int t = 0; t < x->n_toks; t++) cr_assert_eq(x->toks[t], y->toks[t], "request %d choice %d token %d", i, c, t);
            cr_assert_str_eq(x->text, y->text, "request %d choice %d", i, c);
            cr_assert_eq(x->finish, y->finish, "request %d choice %d", i, c);
            if (teo_long[i].stop) cr_assert_null(strstr(y->text, teo_long[i].stop), "request %d: stop string sent", i);
        }
}

/* logit_bias, allowed ids, bad words of one token (on the device's rows) and of two (whose rows
 * need the last token on the host: synchronous steps), stop_token_ids and min_tokens; requests that
 * may end at end-of-generation. */
static const teo_spec teo_banned[] = {
    {0, 60, 1, 0.0f, 0, 0, 0, 0, 0, 0, 2, 0, 0, NULL, 31},  /* logit_bias + stop ids */
    {1, 50, 2, 1.0f, 0, 0, 0, 0, 0, 0, -1, 0, 0, NULL, 32}, /* allowed ids, n = 2 */
    {2, 70, 1, 0.9f, 0, 0, 0, 0, 0, 0, 1, 0, 0, NULL, 33},  /* a bad word of one token */
    {3, 70, 1, 0.9f, 0, 0, 0, 0, 0, 0, -1, 0, 0, NULL, 34}, /* a bad word of two tokens */
    {4, 80, 1, 1.0f, 0, 0, 0, 0, 0, 0, -1, 20, 0, NULL, 35}, /* min_tokens, end of generation */
    {5, 80, 1, 0.0f, 0, 0, 0, 0, 0, 0, -1, 0, 0, NULL, 36}, /* greedy, end of generation */
};
#define TEO_BANNED ((int)(sizeof teo_banned / sizeof teo_banned[0]))

static int32_t *teo_ids(int n, const int32_t *v)
{
    int32_t *p = malloc((size_t)n * sizeof *p);
    memcpy(p, v, (size_t)n * sizeof *p);
    return p;
}

static void teo_ban_tweak(engine_request *r, int i)
{
    smp_params *p = &r->sampling;
    const te_case *t = &te_cases[teo_banned[i].case_i];
    switch (i) {
    case 0: /* the golden case's second token pushed down, its fifth a stop id */
        p->n_logit_bias = 2;
        p->bias_ids = teo_ids(2, (int32_t[]){t->gen[1], t->gen[3]});
        p->bias_vals = malloc(2 * sizeof(float));
        p->bias_vals[0] = -100.0f;
        p->bias_vals[1] = 3.0f;
        p->n_stop_ids = 1;
        p->stop_ids = teo_ids(1, (int32_t[]){t->gen[4]});
        break;
    case 1: {
        int32_t a[24];
        for (int k = 0; k < 24; k++) a[k] = t->gen[k % t->n_gen];
        p->n_allowed = 24;
        p->allowed_ids = teo_ids(24, a);
        break;
    }
    case 2:
    case 3:
        p->n_bad = 1;
        p->bad_ids = teo_ids(2, (int32_t[]){t->gen[0], t->gen[1]});
        p->bad_off = teo_ids(2, (int32_t[]){i == 2 ? 1 : 0, 2});
        if (i == 2) p->bad_ids[0] = t->gen[1]; /* one token: bad_ids[1 .. 2) */
        break;
    default:
        break;
    }
}

/* The requests above give the same streams overlapped and not; a banned or unallowed token is never
 * sent, a stop id ends its choice, and end-of-generation is seen one step late at most. */
Test(engine_overlap, bans_biases_and_end_of_generation_match_synchronous)
{
    TE_NEED_MODEL();
    static te_req runs[2][TEO_BANNED];
    for (int ov = 0; ov < 2; ov++) {
        memset(runs[ov], 0, sizeof runs[ov]);
        engine *e = teo_engine(ov, (size_t)16 << 20, 1, 16, 128);
        int finals = 0;
        for (int i = 0; i < TEO_BANNED; i++) {
            runs[ov][i].n = teo_banned[i].n;
            runs[ov][i].id = teo_submit_ex(e, &teo_banned[i], teo_ban_tweak, i);
            finals += teo_banned[i].n;
        }
        te_streams_collect(e, runs[ov], TEO_BANNED, finals);
        teo_idle(e);
        engine_destroy(e, 1);
    }
    te_streams_same(runs[0], runs[1], TEO_BANNED, "bans");
    const te_req *q = runs[1];
    const te_case *t0 = &te_cases[teo_banned[0].case_i], *t1 = &te_cases[teo_banned[1].case_i];
    for (int k = 0; k < q[0].c[0].n_toks; k++) cr_assert_neq(q[0].c[0].toks[k], t0->gen[1], "a -100 bias");
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < q[1].c[c].n_toks; k++) {
            int in = 0;
            for (int j = 0; j < 24; j++) in |= q[1].c[c].toks[k] == t1->gen[j % t1->n_gen];
            cr_assert(in, "choice %d token %d (%d) is not an allowed id", c, k, q[1].c[c].toks[k]);
        }
    const te_case *t2 = &te_cases[teo_banned[2].case_i], *t3 = &te_cases[teo_banned[3].case_i];
    for (int k = 0; k < q[2].c[0].n_toks; k++) cr_assert_neq(q[2].c[0].toks[k], t2->gen[1], "a banned token");
    for (int k = 1; k < q[3].c[0].n_toks; k++)
        cr_assert(q[3].c[0].toks[k - 1] != t3->gen[0] || q[3].c[0].toks[k] != t3->gen[1], "a bad word completed");
    if (q[4].c[0].finish == ENGINE_FINISH_STOP) cr_assert_geq(q[4].c[0].n_toks, 20, "min_tokens");
}

/* A seeded request gives the same tokens sent twice, alone or among other requests, overlapped or
 * not: its draws are keyed by (seed + choice, position) only. */
Test(engine_overlap, seeded_request_is_batch_invariant)
{
    TE_NEED_MODEL();
    static const teo_spec probe = {2, 80, 2, 1.0f, 0.95f, 0, 1.1f, 0.2f, 0, 0, 1, 0, 0, NULL, 77};
    static te_req alone[2][1], mixed[2][TEO_MIXED + 1];
    for (int ov = 0; ov < 2; ov++) {
        engine *e = teo_engine(ov, (size_t)16 << 20, 0, 16, 128);
        memset(alone[ov], 0, sizeof alone[ov]);
        alone[ov][0].n = 2;
        alone[ov][0].id = teo_submit(e, &probe);
        te_streams_collect(e, alone[ov], 1, 2);
        memset(mixed[ov], 0, sizeof mixed[ov]);
        int finals = 0;
        for (int i = 0; i < TEO_MIXED; i++) { /* others first, so the probe joins a full batch */
            mixed[ov][i + 1].n = teo_mixed[i].n;
            mixed[ov][i + 1].id = teo_submit(e, &teo_mixed[i]);
            finals += teo_mixed[i].n;
        }
        mixed[ov][0].n = 2;
        mixed[ov][0].id = teo_submit(e, &probe);
        te_streams_collect(e, mixed[ov], TEO_MIXED + 1, finals + 2);
        teo_idle(e);
        engine_destroy(e, 1);
    }
    for (int ov = 0; ov < 2; ov++)
        for (int c = 0; c < 2; c++) {
            const te_choice *x = &alone[0][0].c[c], *y = &mixed[ov][0].c[c], *z = &alone[ov][0].c[c];
            cr_assert_eq(x->finish, ENGINE_FINISH_LENGTH);
            cr_assert_eq(x->n_toks, y->n_toks);
            cr_assert_eq(x->n_toks, z->n_toks);
            for (int t = 0; t < x->n_toks; t++) {
                cr_assert_eq(x->toks[t], y->toks[t], "overlap %d choice %d token %d: batched", ov, c, t);
                cr_assert_eq(x->toks[t], z->toks[t], "overlap %d choice %d token %d: sent again", ov, c, t);
            }
        }
    cr_assert(memcmp(alone[0][0].c[0].toks, alone[0][0].c[1].toks, sizeof alone[0][0].c[0].toks),
              "two choices of one seed draw differently");
}
