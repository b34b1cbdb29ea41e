/*
 * test_prefix.c — the radix prefix cache as the engine uses it, on stories260K with the CPU
 * backend: shared prefixes are computed once (together or later), a new turn hits the cached
 * blocks of the previous turn's generated tokens and continues exactly as the uncached run, n > 1
 * choices share the prompt and match single-choice runs with the derived seeds, and a pool too
 * small to keep everything evicts and still reproduces the golden tokens. Skips when the shared
 * model directory is absent.
 */
#include <unistd.h>

#include "cli/mkmodel.h"
#include "tests/engine_harness.h"

TestSuite(prefix, .init = te_setup, .fini = te_teardown, .timeout = 120);

Test(prefix, shares_300_tokens_together_and_later)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 128);
    int32_t p[310];
    p[0] = 1;
    for (int i = 1; i < 310; i++) p[i] = 3 + (i * 37) % 500;
    static te_out outs[3];
    memset(outs, 0, sizeof outs);
    /* Two arrive together, the third after they finished. */
    p[300] = 7;
    outs[0].id = te_submit(e, p, 305, 4, 1, 0, NULL);
    p[300] = 8;
    outs[1].id = te_submit(e, p, 305, 4, 1, 0, NULL);
    te_collect(e, outs, 2, 2);
    p[300] = 9;
    outs[2].id = te_submit(e, p, 305, 4, 1, 0, NULL);
    te_collect(e, outs, 3, 1);
    cr_assert_lt(outs[0].usage[0].cached_tokens, 288);
    /* 288 tokens in whole blocks, then 12 more from a copy of the block that holds 288..303. */
    cr_assert_eq(outs[1].usage[0].cached_tokens, 300, "in-batch: %d", outs[1].usage[0].cached_tokens);
    cr_assert_eq(outs[2].usage[0].cached_tokens, 300, "later: %d", outs[2].usage[0].cached_tokens);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.prefix_cache_queries, 3 * 305);
    cr_assert_eq(st.prefix_cache_hits, outs[0].usage[0].cached_tokens + 2 * 300);
    cr_assert_gt(st.kv_blocks_cached, 0);
    engine_destroy(e, 1);
}

Test(prefix, next_turn_hits_generated_tokens_and_continues_exactly)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    const te_case *t = NULL;
    for (int i = 0; i < te_n_cases; i++)
        if (!strcmp(te_cases[i].name, "once_upon_a_time_n256")) t = &te_cases[i];
    cr_assert_not_null(t);
    static te_out outs[2];
    memset(outs, 0, sizeof outs);
    outs[0].id = te_submit(e, t->prompt, t->n_prompt, 120, 1, 0, NULL);
    te_collect(e, outs, 1, 1);
    /* Turn 2: the history (prompt + 100 generated tokens) as the prompt. */
    int32_t hist[200];
    memcpy(hist, t->prompt, (size_t)t->n_prompt * sizeof(int32_t));
    memcpy(hist + t->n_prompt, t->gen, 100 * sizeof(int32_t));
    int nh = t->n_prompt + 100;
    outs[1].id = te_submit(e, hist, nh, 60, 1, 0, NULL);
    te_collect(e, outs, 2, 1);
    /* Whole blocks, then the rest but the last token from a copy of a partly agreeing block
     * (the tokens below continuing exactly shows the copied K/V is right). */
    cr_assert_eq(outs[1].usage[0].cached_tokens, nh - 1, "cached %d", outs[1].usage[0].cached_tokens);
    for (int k = 0; k < 60; k++)
        cr_assert_eq(outs[1].toks[0][k], t->gen[100 + k], "token %d after the cached history", k);
    engine_destroy(e, 1);
}

Test(prefix, n_choices_match_single_runs_with_derived_seeds)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    const te_case *t = &te_cases[0];
    int32_t p[64];
    memcpy(p, t->prompt, (size_t)t->n_prompt * sizeof(int32_t));
    for (int i = t->n_prompt; i < 40; i++) p[i] = t->gen[i - t->n_prompt]; /* 40 tokens: a partial block */
    static te_out outs[4];
    memset(outs, 0, sizeof outs);
    outs[0].id = te_submit_seed(e, p, 40, 30, 3, 1.0f, NULL, 500);
    te_collect(e, outs, 1, 3);
    for (int c = 0; c < 3; c++) {
        outs[1 + c].id = te_submit_seed(e, p, 40, 30, 1, 1.0f, NULL, 500 + (uint64_t)c);
        te_collect(e, outs, 4, 1);
        cr_assert_eq(outs[1 + c].n_toks[0], outs[0].n_toks[c]);
        for (int k = 0; k < outs[0].n_toks[c]; k++)
            cr_assert_eq(outs[0].toks[c][k], outs[1 + c].toks[0][k], "choice %d token %d", c, k);
    }
    engine_destroy(e, 1);
}

Test(prefix, eviction_under_pressure_keeps_golden)
{
    TE_NEED_MODEL();
    /* 30 blocks: the cache fills with finished requests' blocks and must give them back. The
     * context is capped at what the 30 blocks hold (start-up requires one full sequence). */
    engine *e = te_engine_ctx(30 * 16 * 640, 1, 4, 64, 30 * 16);
    static te_out outs[16];
    memset(outs, 0, sizeof outs);
    int n = 0;
    for (int i = 0; i < te_n_cases; i++) {
        if (te_cases[i].n_prompt + te_cases[i].n_gen > 30 * 16) continue;
        outs[n].id = te_submit(e, te_cases[i].prompt, te_cases[i].n_prompt, te_cases[i].n_gen, 1, 0, NULL);
        te_collect(e, outs, n + 1, 1);
        for (int k = 0; k < te_cases[i].n_gen; k++)
            cr_assert_eq(outs[n].toks[0][k], te_cases[i].gen[k], "%s token %d", te_cases[i].name, k);
        n++;
    }
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_gt(st.prefix_cache_evictions, 0, "the cache had to evict");
    cr_assert_eq(st.kv_blocks_used, st.kv_blocks_cached);
    engine_destroy(e, 1);
}

/* `kvserve bench --json` on a generated model: the last line is the documented JSON object, and
 * multi-turn conversations with a shared prefix hit the cache. Skips without KVSERVE_BIN. */
Test(prefix, bench_cli_json_and_multi_turn_hits)
{
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || access(bin, X_OK)) cr_skip_test("KVSERVE_BIN not set or not executable");
    char path[1024], cmd[4096];
    mkm_params p;
    mkm_params_default(&p);
    p.dim = 64;
    p.layers = 2;
    p.heads = 4;
    p.vocab = 300;
    p.context = 512;
    tu_write_mkmodel(&p, "bench", path, sizeof path);
    snprintf(cmd, sizeof cmd,
             "'%s' bench -m '%s' --requests 4 --input-len 20:40 --output-len 4:8 --turns 3 "
             "--shared-prefix 16 --threads 1 --kv-memory 8MiB --seed 7 --json 2>/dev/null",
             bin, path);
    FILE *fp = popen(cmd, "r");
    cr_assert_not_null(fp);
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, fp)) snprintf(last, sizeof last, "%s", line);
    int st = pclose(fp);
    unlink(path);
    cr_assert_eq(st, 0, "kvserve bench failed");
    cJSON *j = cJSON_Parse(last);
    cr_assert_not_null(j, "last line is not JSON: %s", last);
    const char *keys[] = {"requests", "output_tokens", "wall_s", "output_tokens_per_s", "ttft_ms_mean",
                          "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean", "preemptions",
                          "prefix_cache_hit_rate"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, keys[i])), "missing %s", keys[i]);
    cr_assert_eq(cJSON_GetObjectItem(j, "requests")->valueint, 12, "4 conversations × 3 turns");
    double hit = cJSON_GetObjectItem(j, "prefix_cache_hit_rate")->valuedouble;
    cr_assert(hit > 0.3 && hit <= 1.0, "later turns re-read their history from the cache: %f", hit);
    cr_assert_gt(cJSON_GetObjectItem(j, "output_tokens")->valueint, 0);
    cJSON_Delete(j);
}
