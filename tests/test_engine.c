/*
 * test_engine.c — the engine thread with the real CPU backend on stories260K.
 *
 * All golden cases submitted at once must reproduce their recorded greedy tokens exactly:
 * batched, with the prefix cache on and off, and with a KV pool so small that sequences are
 * preempted and recomputed. Also the API edges: max_tokens 0, cancellation, n > 1, stop strings,
 * invalid requests; attention sinks + window past the context in a budget below one context.
 * Skips when the shared model directory is absent; suite engine_synth runs the API on a model
 * the test writes itself.
 */
#include <unistd.h>

#include "base/clock.h"
#include "model/mkmodel.h"
#include "tests/engine_harness.h"

TestSuite(engine, .init = te_setup, .fini = te_teardown, .timeout = 120);

/* Every golden case at once; returns the preemption count. */
static int64_t te_golden_all(size_t kv_bytes, int prefix, int batch_tokens)
{
    engine *e = te_engine(kv_bytes, prefix, 16, batch_tokens);
    static te_out outs[16];
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < te_n_cases; i++)
        outs[i].id = te_submit(e, te_cases[i].prompt, te_cases[i].n_prompt, te_cases[i].n_gen, 1, 0, NULL);
    te_collect(e, outs, te_n_cases, te_n_cases);
    for (int i = 0; i < te_n_cases; i++) {
        const te_case *t = &te_cases[i];
        cr_assert_eq(outs[i].finish[0], ENGINE_FINISH_LENGTH, "%s", t->name);
        cr_assert_eq(outs[i].n_toks[0], t->n_gen, "%s: %d tokens", t->name, outs[i].n_toks[0]);
        for (int k = 0; k < t->n_gen; k++)
            cr_assert_eq(outs[i].toks[0][k], t->gen[k], "%s (prefix %d, kv %zu): token %d is %d, golden %d",
                         t->name, prefix, kv_bytes, k, outs[i].toks[0][k], t->gen[k]);
        cr_assert_eq(outs[i].usage[0].prompt_tokens, t->n_prompt);
        cr_assert_eq(outs[i].usage[0].completion_tokens, t->n_gen);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_used, st.kv_blocks_cached, "blocks held after every request finished");
    cr_assert_eq(st.num_running + st.num_waiting, 0);
    engine_destroy(e, 1);
    return st.preemptions;
}

Test(engine, golden_batched_cache_off)
{
    TE_NEED_MODEL();
    cr_assert_eq(te_golden_all((size_t)16 << 20, 0, 128), 0);
}

Test(engine, golden_batched_cache_on)
{
    TE_NEED_MODEL();
    cr_assert_eq(te_golden_all((size_t)16 << 20, 1, 128), 0);
}

Test(engine, golden_under_preemption)
{
    TE_NEED_MODEL();
    /* 640 bytes per token in f16: 40 blocks of 16 tokens, the longest case needs 22. */
    size_t kv = 40 * 16 * 640;
    cr_assert_gt(te_golden_all(kv, 0, 64), 0, "the small pool must force preemption");
    cr_assert_gt(te_golden_all(kv, 1, 64), 0, "the small pool must force preemption (cache on)");
}

Test(engine, api_edges)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    const te_case *t = &te_cases[0];
    static te_out outs[4];
    memset(outs, 0, sizeof outs);
    /* max_tokens 0 finishes at once. */
    outs[0].id = te_submit(e, t->prompt, t->n_prompt, 0, 2, 0, NULL);
    /* Stop string: golden text of case 0 begins ", there was a little girl". */
    outs[1].id = te_submit(e, t->prompt, t->n_prompt, 40, 1, 0, "little");
    /* n = 3 sampled choices. */
    outs[2].id = te_submit(e, t->prompt, t->n_prompt, 20, 3, 1.0f, NULL);
    /* A long one, cancelled. */
    outs[3].id = te_submit(e, t->prompt, t->n_prompt, 400, 1, 0, NULL);
    engine_cancel(e, outs[3].id);
    te_collect(e, outs, 4, 2 + 1 + 3 + 1);
    cr_assert_eq(outs[0].finish[0], ENGINE_FINISH_LENGTH);
    cr_assert_eq(outs[0].finish[1], ENGINE_FINISH_LENGTH);
    cr_assert_eq(outs[0].n_toks[0], 0);
    cr_assert_eq(outs[1].finish[0], ENGINE_FINISH_STOP);
    cr_assert_str_eq(outs[1].text[0], ", there was a ");
    for (int c = 0; c < 3; c++) {
        cr_assert(outs[2].finish[c] == ENGINE_FINISH_LENGTH || outs[2].finish[c] == ENGINE_FINISH_STOP);
        cr_assert_leq(outs[2].n_toks[c], 20);
        cr_assert(outs[2].finish[c] == ENGINE_FINISH_STOP || outs[2].n_toks[c] == 20);
    }
    cr_assert_eq(outs[3].finish[0], ENGINE_FINISH_ABORT);
    cr_assert_lt(outs[3].n_toks[0], 400);
    /* Invalid requests are refused and nothing is queued. */
    engine_request r;
    memset(&r, 0, sizeof r);
    int32_t big[600] = {1};
    r.prompt = big;
    r.n_prompt = 500;
    r.n = 1;
    r.max_tokens = 100;
    smp_params_default(&r.sampling);
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), -EINVAL, "prompt + max_tokens beyond the context");
    r.n_prompt = 1;
    r.max_tokens = 1;
    big[0] = 512;
    cr_assert_eq(engine_submit(e, &r, &id), -EINVAL, "token id out of range");
    engine_stats st;
    engine_get_stats(e, &st);
    engine_destroy(e, 0);
}

/* ---- engine_synth: a generated model, so the engine is exercised without the shared files --- */

static void tes_setup(void)
{
    char path[1024], err[256];
    mkm_params p;
    mkm_params_default(&p);
    p.dim = 64;
    p.layers = 2;
    p.heads = 4;
    p.kv_heads = 2;
    p.vocab = 300;
    p.context = 256;
    tu_write_mkmodel(&p, "engine", path, sizeof path);
    cr_assert_eq(model_load(path, &te_model, err, sizeof err), 0, "%s", err);
    unlink(path); /* the mapping stays valid */
    te_tok = tok_create(te_model->gguf, err, sizeof err);
    cr_assert_not_null(te_tok, "%s", err);
}

TestSuite(engine_synth, .init = tes_setup, .fini = te_teardown, .timeout = 120);

Test(engine_synth, api_counts_prefix_and_cancel)
{
    engine *e = te_engine((size_t)4 << 20, 1, 8, 32);
    int32_t p[120];
    p[0] = 1;
    for (int i = 1; i < 120; i++) p[i] = 3 + (i * 37) % 290;
    static te_out outs[5];
    memset(outs, 0, sizeof outs);
    outs[0].id = te_submit(e, p, 100, 0, 2, 0, NULL);     /* max_tokens 0 */
    outs[1].id = te_submit(e, p, 110, 12, 3, 1.0f, NULL); /* n = 3 sharing a 100-token prefix */
    outs[2].id = te_submit(e, p, 105, 12, 1, 0, NULL);
    outs[3].id = te_submit(e, p, 50, 150, 1, 0, NULL);    /* cancelled */
    engine_cancel(e, outs[3].id);
    te_collect(e, outs, 4, 2 + 3 + 1 + 1);
    cr_assert_eq(outs[0].finish[0], ENGINE_FINISH_LENGTH);
    cr_assert_eq(outs[0].finish[1], ENGINE_FINISH_LENGTH);
    for (int c = 0; c < 3; c++) {
        cr_assert(outs[1].finish[c] == ENGINE_FINISH_LENGTH || outs[1].finish[c] == ENGINE_FINISH_STOP);
        cr_assert(outs[1].n_toks[c] == 12 || outs[1].finish[c] == ENGINE_FINISH_STOP);
        cr_assert_eq(outs[1].usage[c].completion_tokens, outs[1].n_toks[c]);
    }
    cr_assert_geq(outs[1].usage[0].cached_tokens + outs[2].usage[0].cached_tokens, 96,
                  "one of the two shares the other's 96-token prefix");
    cr_assert_eq(outs[3].finish[0], ENGINE_FINISH_ABORT);
    /* The same request again finds its prompt in the cache. */
    outs[4].id = te_submit(e, p, 105, 12, 1, 0, NULL);
    te_collect(e, outs, 5, 1);
    cr_assert_geq(outs[4].usage[0].cached_tokens, 96);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_used, st.kv_blocks_cached);
    engine_destroy(e, 1);
}

/* A greedy request on golden case 0 with the given extras; the caller sets them on *r first. */
static uint64_t te_submit_with(engine *e, engine_request *r, int max_tokens)
{
    const te_case *t = &te_cases[0];
    r->prompt = malloc((size_t)t->n_prompt * sizeof(int32_t));
    memcpy(r->prompt, t->prompt, (size_t)t->n_prompt * sizeof(int32_t));
    r->n_prompt = t->n_prompt;
    r->n = 1;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->sampling.has_seed = 1;
    uint64_t id;
    cr_assert_eq(engine_submit(e, r, &id), 0);
    return id;
}

static void te_request_init(engine_request *r)
{
    memset(r, 0, sizeof *r);
    smp_params_default(&r->sampling);
}

/* stop_token_ids end the choice at the first such token: finish stop, stop_token names it, and
 * its text is cut unless include_stop_str; a stop string's index comes back in stop_str, and
 * include_stop_str keeps the string. */
Test(engine, stop_token_ids_and_include_stop_str)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    const te_case *t = &te_cases[0];
    int32_t stop_tok = t->gen[6];
    int at = 0;
    while (t->gen[at] != stop_tok) at++; /* its first occurrence */
    static te_out outs[4];
    memset(outs, 0, sizeof outs);
    engine_request r;
    for (int k = 0; k < 2; k++) {
        te_request_init(&r);
        r.sampling.stop_ids = malloc(sizeof(int32_t));
        r.sampling.stop_ids[0] = stop_tok;
        r.sampling.n_stop_ids = 1;
        r.sampling.ignore_eos = 1; /* stop ids stop regardless */
        r.include_stop_str = k;
        outs[k].id = te_submit_with(e, &r, 40);
    }
    for (int k = 0; k < 2; k++) {
        te_request_init(&r);
        r.stop = calloc(3, sizeof *r.stop);
        r.stop[0] = strdup("zzz");
        r.stop[1] = strdup("");
        r.stop[2] = strdup("little");
        r.n_stop = 3;
        r.include_stop_str = k;
        outs[2 + k].id = te_submit_with(e, &r, 40);
    }
    te_collect(e, outs, 4, 4);
    char piece[64];
    int pl = tok_token_bytes(te_tok, stop_tok, 0, piece, sizeof piece);
    piece[pl] = 0;
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(outs[k].finish[0], ENGINE_FINISH_STOP);
        cr_assert_eq(outs[k].stop_token[0], stop_tok);
        cr_assert_eq(outs[k].stop_str[0], -1);
        cr_assert_eq(outs[k].n_toks[0], at + 1, "stops at the first occurrence");
        size_t tl = strlen(outs[k].text[0]);
        int ends = tl >= (size_t)pl && !strcmp(outs[k].text[0] + tl - pl, piece);
        cr_assert_eq(ends, k, "the stop token's text '%s' %s: '%s'", piece, k ? "kept" : "cut", outs[k].text[0]);
    }
    cr_assert_eq(outs[2].stop_str[0], 2, "index in the request's list");
    cr_assert_eq(outs[2].stop_token[0], -1);
    cr_assert_str_eq(outs[2].text[0], ", there was a ");
    cr_assert_str_eq(outs[3].text[0], ", there was a little");
    engine_destroy(e, 1);
}

/* allowed_token_ids and bad_words shape what greedy decoding may pick. */
Test(engine, allowed_ids_and_bad_words)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    const te_case *t = &te_cases[0];
    static te_out outs[2];
    memset(outs, 0, sizeof outs);
    engine_request r;
    te_request_init(&r);
    int32_t allow[3] = {t->gen[3], 300, 301};
    r.sampling.allowed_ids = malloc(sizeof allow);
    memcpy(r.sampling.allowed_ids, allow, sizeof allow);
    r.sampling.n_allowed = 3;
    outs[0].id = te_submit_with(e, &r, 12);
    te_request_init(&r); /* ban golden token 2 after tokens 0..1: greedy must diverge there */
    r.sampling.bad_ids = malloc(3 * sizeof(int32_t));
    memcpy(r.sampling.bad_ids, t->gen, 3 * sizeof(int32_t));
    r.sampling.bad_off = malloc(2 * sizeof(int32_t));
    r.sampling.bad_off[0] = 0;
    r.sampling.bad_off[1] = 3;
    r.sampling.n_bad = 1;
    outs[1].id = te_submit_with(e, &r, 6);
    te_collect(e, outs, 2, 2);
    for (int k = 0; k < outs[0].n_toks[0]; k++)
        cr_assert(outs[0].toks[0][k] == allow[0] || outs[0].toks[0][k] == 300 || outs[0].toks[0][k] == 301,
                  "token %d = %d is not allowed", k, outs[0].toks[0][k]);
    cr_assert_eq(outs[1].toks[0][0], t->gen[0]);
    cr_assert_eq(outs[1].toks[0][1], t->gen[1]);
    cr_assert_neq(outs[1].toks[0][2], t->gen[2], "the bad word's last token is banned after its start");
    engine_destroy(e, 1);
}

/* A prompt longer than max_queued_tokens can never be queued: -E2BIG, not -EAGAIN. */
Test(engine, prompt_beyond_queue_limit_is_e2big)
{
    TE_NEED_MODEL();
    engine_config c;
    te_config(&c, (size_t)16 << 20);
    c.max_queued_tokens = 4;
    char err[512];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    engine_request r;
    te_request_init(&r);
    int32_t p[5] = {1, 403, 407, 261, 378};
    r.prompt = p;
    r.n_prompt = 5;
    r.n = 1;
    r.max_tokens = 1;
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), -E2BIG, "idle server, prompt of 5 > 4: can never succeed");
    engine_destroy(e, 0);
}

/* max_model_len caps the context; the start-up check wants one whole sequence in the budget. */
Test(engine, max_model_len_and_budget_check)
{
    TE_NEED_MODEL();
    engine *e = te_engine_ctx((size_t)16 << 20, 1, 8, 64, 100);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.n_ctx, 100);
    engine_request r;
    te_request_init(&r);
    int32_t p[90] = {1};
    r.prompt = p;
    r.n_prompt = 90;
    r.n = 1;
    r.max_tokens = 11;
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), -EINVAL, "90 + 11 > max_model_len 100");
    engine_destroy(e, 0);
    engine_config c;
    te_config(&c, 16 * 640 * 31); /* 31 blocks of 16: 496 tokens < 512 */
    char err[512] = "";
    cr_assert_null(engine_create(&c, err, sizeof err), "a budget below one full sequence is refused");
    cr_assert(strstr(err, "context length 512"), "%s", err);
    c.max_model_len = 496;
    engine *ok = engine_create(&c, err, sizeof err);
    cr_assert_not_null(ok, "496 tokens fit: %s", err);
    engine_destroy(ok, 0);
    c.max_model_len = 513;
    cr_assert_null(engine_create(&c, err, sizeof err), "beyond the model's context");
}

/* The idle engine thread still refreshes its heartbeat (the systemd watchdog's source). */
Test(engine, heartbeat_while_idle)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    engine_stats a, b;
    engine_get_stats(e, &a);
    int64_t deadline = clk_now_us() + 5 * ENGINE_HEARTBEAT_MS * 1000;
    do {
        usleep(20000);
        engine_get_stats(e, &b);
    } while (b.heartbeat_us == a.heartbeat_us && clk_now_us() < deadline);
    cr_assert_gt(b.heartbeat_us, a.heartbeat_us, "no heartbeat while idle");
    cr_assert_eq(b.steps, a.steps, "idle: no step ran");
    engine_destroy(e, 0);
}

/* KV usage (blocks held by requests: used minus those only the prefix cache holds) is 0 as soon
 * as the last request's final event is out: the idle count used to be refreshed at most every
 * 100 ms and the idle engine looks again only at its heartbeat, so /metrics showed the finished
 * request's blocks as used for about half a second. */
Test(engine, kv_usage_is_current_when_the_engine_goes_idle)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    int32_t p[40];
    for (int i = 0; i < 40; i++) p[i] = 3 + (i * 13) % 400;
    for (int round = 0; round < 3; round++) {
        static te_out o;
        memset(&o, 0, sizeof o);
        p[0] = 1 + round; /* another prompt each round */
        o.id = te_submit(e, p, 40, 12, 1, 0, NULL);
        te_collect(e, &o, 1, 1);
        engine_stats st;
        engine_get_stats(e, &st);
        cr_assert_eq(st.num_running + st.num_waiting, 0);
        cr_assert_gt(st.kv_blocks_used, 0, "the prompt's blocks stay in the prefix cache");
        cr_assert_eq(st.kv_blocks_used - st.kv_blocks_idle, 0, "round %d: %lld blocks still counted as in use",
                     round, (long long)(st.kv_blocks_used - st.kv_blocks_idle));
    }
    engine_destroy(e, 0);
}

/* Attention sinks + window in a budget too small for one context: 256 KiB of f16 KV in blocks of
 * 4 is 102 blocks (408 tokens) < the context of 512, which the start-up check refuses; with
 * --kv-window 256 --kv-sinks 4 it needs one window (64 blocks), and one sequence generates past
 * the context to its max_tokens (finish length from max_tokens alone). */
Test(engine, window_streams_past_the_context_in_a_small_budget)
{
    TE_NEED_MODEL();
    engine_config c;
    te_config(&c, (size_t)256 << 10);
    c.block_size = 4;
    c.max_seqs = 1;
    char err[512] = "";
    cr_assert_null(engine_create(&c, err, sizeof err), "408 tokens of KV < the context: refused");
    c.kv_window = 256;
    c.kv_sinks = 4;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "one window fits: %s", err);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_total, 102);
    const int n_prompt = 16, n_out = 580; /* 596 tokens > 512 */
    engine_request r;
    te_request_init(&r);
    r.prompt = malloc(n_prompt * sizeof(int32_t));
    for (int i = 0; i < n_prompt; i++) r.prompt[i] = i ? 100 + 7 * i : 1;
    r.n_prompt = n_prompt;
    r.n = 1;
    r.max_tokens = n_out;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 7;
    r.sampling.has_seed = 1;
    r.sampling.ignore_eos = 1;
    static te_out out;
    memset(&out, 0, sizeof out);
    cr_assert_eq(engine_submit(e, &r, &out.id), 0);
    te_collect(e, &out, 1, 1);
    cr_assert_eq(out.finish[0], ENGINE_FINISH_LENGTH);
    cr_assert_eq(out.n_toks[0], n_out, "%d tokens generated of %d", out.n_toks[0], n_out);
    engine_get_stats(e, &st);
    cr_assert_leq(st.kv_blocks_used, st.kv_blocks_total);
    engine_destroy(e, 0);

    /* what /metrics and the start-up line report: f16 640 bytes/token, 408 tokens, one window of
     * 64 blocks fits once; int8 2 × 5 × 4 × (8 + 2) = 400 bytes/token (scales included): 163
     * blocks, 652 tokens, two windows */
    cr_assert_eq(st.kv_bytes_per_token, 640);
    cr_assert_eq(st.kv_capacity_tokens, 408);
    cr_assert_eq(st.kv_capacity_seqs, 1);
    c.kv_dtype = KV_I8;
    e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    engine_get_stats(e, &st);
    cr_assert_eq(st.kv_bytes_per_token, 400);
    cr_assert_eq(st.kv_blocks_total, 163);
    cr_assert_eq(st.kv_capacity_tokens, 652);
    cr_assert_eq(st.kv_capacity_seqs, 2);
    engine_destroy(e, 0);
}
