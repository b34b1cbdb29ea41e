/*
 * test_prefix.c — the radix prefix cache as the engine uses it, on stories260K with the CPU
 * backend: shared prefixes are computed once (together or later), a new turn hits the cached
 * blocks of the previous turn's generated tokens and continues exactly as the uncached run, n > 1
 * choices share the prompt and match single-choice runs with the derived seeds, and a pool too
 * small to keep everything evicts and still reproduces the golden tokens. Skips when the shared
 * model directory is absent.
 */
#include <unistd.h>

#include "cli/device.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/tokenizer.h"
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

/* ---- models with sliding-window layers (more than one KV layer group) --------------------- */

/* What one greedy request gave: its tokens, their log-probs (top 5) and the cached prompt. */
typedef struct tp_run {
    int32_t toks[64];
    smp_result lp[64];
    int n;
    int cached;
} tp_run;

/* An engine on m (one CPU thread, blocks of bs tokens), the prefix cache on or off. */
static engine *tp_engine(model *m, tokenizer *tok, int bs, int prefix)
{
    engine_config c;
    engine_config_default(&c);
    c.model = m;
    c.tok = tok;
    c.device = "cpu";
    c.n_threads = 1;
    c.make_backend = be_create;
    c.kv_memory_bytes = (size_t)8 << 20;
    c.block_size = bs;
    c.max_seqs = 4;
    c.max_batch_tokens = 64;
    c.max_model_len = 256;
    c.prefix_cache = prefix;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    c.quiet = 1;
    char err[512];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "engine_create: %s", err);
    return e;
}

/* Runs prompt[0 .. n) greedily for max_tokens with top-5 log-probs, alone, into *out. */
static void tp_run_one(engine *e, const int32_t *prompt, int n, int max_tokens, tp_run *out)
{
    engine_request r;
    memset(&r, 0, sizeof r);
    r.prompt = malloc((size_t)n * sizeof(int32_t));
    memcpy(r.prompt, prompt, (size_t)n * sizeof(int32_t));
    r.n_prompt = n;
    r.n = 1;
    r.max_tokens = max_tokens;
    smp_params_default(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    r.sampling.n_logprobs = 5;
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    memset(out, 0, sizeof *out);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60;
    for (int done = 0; !done;) {
        engine_event *ev[16];
        int k = engine_poll(e, ev, 16);
        for (int i = 0; i < k; i++) {
            cr_assert_eq(ev[i]->id, id);
            for (int t = 0; t < ev[i]->n_tokens && out->n < 64; t++) {
                cr_assert_not_null(ev[i]->logprobs);
                out->toks[out->n] = ev[i]->tokens[t];
                out->lp[out->n++] = ev[i]->logprobs[t];
            }
            cr_assert(ev[i]->finish != ENGINE_FINISH_ERROR && ev[i]->finish != ENGINE_FINISH_ABORT);
            if (ev[i]->finish) {
                out->cached = ev[i]->usage.cached_tokens;
                done = 1;
            }
            engine_event_free(ev[i]);
        }
        if (k) continue;
        pthread_mutex_lock(&te_w.mu);
        int rc = 0;
        while (!te_w.n && rc == 0) rc = pthread_cond_timedwait(&te_w.cv, &te_w.mu, &dl);
        te_w.n = 0;
        pthread_mutex_unlock(&te_w.mu);
        cr_assert_eq(rc, 0, "timed out waiting for the request");
    }
    cr_assert_eq(out->n, max_tokens);
}

/* The cached run gave exactly the uncached one: tokens, log-probs and alternatives, bit for bit
 * (both on the CPU backend, which computes a token's row the same in any chunk). */
static void tp_same(const tp_run *a, const tp_run *b, const char *what)
{
    cr_assert_eq(a->n, b->n, "%s", what);
    for (int i = 0; i < a->n; i++) {
        cr_assert_eq(a->toks[i], b->toks[i], "%s: token %d", what, i);
        cr_assert(!memcmp(&a->lp[i].logprob, &b->lp[i].logprob, sizeof(float)), "%s: token %d log-prob %.9g vs %.9g",
                  what, i, a->lp[i].logprob, b->lp[i].logprob);
        cr_assert_eq(a->lp[i].n_top, b->lp[i].n_top, "%s", what);
        for (int k = 0; k < a->lp[i].n_top; k++) {
            cr_assert_eq(a->lp[i].top_ids[k], b->lp[i].top_ids[k], "%s: token %d alternative %d", what, i, k);
            cr_assert(!memcmp(&a->lp[i].top_logprobs[k], &b->lp[i].top_logprobs[k], sizeof(float)),
                      "%s: token %d alternative %d log-prob", what, i, k);
        }
    }
}

/* The model at path (its layers keep KV in more than one group: a sliding window) with blocks of
 * bs: a short prompt twice, one sharing its prefix, a prompt several windows long twice, one
 * sharing its first window, and the long one's next turn (prompt + its output). Every cached
 * run equals the run without the prefix cache; repeats and shared prefixes hit the cache, the
 * long prompt and its next turn in all their whole blocks (a window's releases do not stop its
 * sequence from offering blocks). */
static void tp_swa_model(const char *path, int bs)
{
    char err[512];
    model *m;
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    cr_assert_not_null(tok, "%s", err);
    int w = 0;
    for (int l = 0; l < m->hp.n_layers; l++) w = model_layer_window(&m->hp, l) > w ? model_layer_window(&m->hp, l) : w;
    if (m->hp.mla) w = 20; /* no windows: the same requests at a made-up window's lengths */
    else cr_assert(w > 0 && model_n_swa_layers(&m->hp) < m->hp.n_layers, "%s: no sliding-window layers", path);
    engine *e0 = tp_engine(m, tok, bs, 0), *e1 = tp_engine(m, tok, bs, 1);
    int32_t p[160];
    p[0] = 1;
    for (int i = 1; i < 160; i++) p[i] = 3 + (i * 53 + 11) % 250;
    int n_long = 4 * w + 5 < 150 ? 4 * w + 5 : 150, n_short = w - 1 > 2 * bs ? w - 1 : 2 * bs + 1;
    struct { int n, alt; } cases[] = {{n_short, 0}, {n_short, 0}, {n_short + 3, 1}, {n_long, 0},
                                      {n_long, 0},  {w + 2 * bs, 1}, {n_long + 8, 0}};
    tp_run ref, got;
    /* An unrelated long request first: its window releases blocks as it goes, so from now on the
     * groups' pools hand out different ids for the same tokens (a companion mixed up with its
     * group-0 block would show). */
    int32_t u[160];
    for (int i = 0; i < n_long; i++) u[i] = 3 + (i * 31 + 7) % 240;
    tp_run_one(e0, u, n_long, 8, &ref);
    tp_run_one(e1, u, n_long, 8, &got);
    tp_same(&ref, &got, "unrelated");
    int cached[7];
    int32_t turn[8]; /* the long prompt's output: its next turn's prompt goes on with it */
    for (int c = 0; c < 7; c++) {
        int32_t q[176];
        memcpy(q, p, (size_t)(c == 6 ? n_long : cases[c].n) * sizeof *q);
        if (c == 6) memcpy(q + n_long, turn, sizeof turn);
        if (cases[c].alt) q[cases[c].n - 1] = 300; /* the same prefix, another last token */
        char what[256];
        snprintf(what, sizeof what, "%s, blocks of %d, window %d: case %d (%d tokens)", path, bs, w, c, cases[c].n);
        tp_run_one(e0, q, cases[c].n, 8, &ref);
        tp_run_one(e1, q, cases[c].n, 8, &got);
        cr_assert_eq(ref.cached, 0, "%s: no cache, yet cached tokens", what);
        tp_same(&ref, &got, what);
        cached[c] = got.cached;
        if (c == 4) memcpy(turn, got.toks, sizeof turn);
    }
    cr_assert_gt(cached[1], 0, "a repeated short prompt hits the cache");
    cr_assert_gt(cached[2], 0, "a prompt sharing a prefix hits the cache");
    cr_assert_geq(cached[4], (n_long - 1) / bs * bs, "a repeated long prompt hits all its whole blocks (%d)", cached[4]);
    cr_assert_gt(cached[5], 0);
    /* the first long run computed its prompt and 7 of its 8 tokens */
    cr_assert_geq(cached[6], (n_long + 7) / bs * bs, "the next turn hits the whole history (%d)", cached[6]);
    engine_stats st;
    engine_get_stats(e1, &st);
    cr_assert_gt(st.prefix_cache_hits, 0);
    cr_assert_gt(st.kv_blocks_cached, 0);
    engine_destroy(e0, 1);
    engine_destroy(e1, 1);
    tok_destroy(tok);
    model_destroy(m);
}

/* A generated Gemma 3 model (5 sliding layers of 6, window 12): always runs. */
Test(prefix, sliding_window_model_shares_prefixes_exactly)
{
    mkm_params p;
    mkm_params_default(&p);
    p.arch = "gemma3";
    p.dim = 64;
    p.layers = 6;
    p.heads = 4;
    p.kv_heads = 2;
    p.head_dim = 16;
    p.swa_window = 12;
    p.swa_pattern = 6;
    p.rope_base_swa = 10000.0f;
    p.vocab = 320;
    p.context = 512;
    char path[1024];
    tu_write_mkmodel(&p, "swa", path, sizeof path);
    tp_swa_model(path, 4);
    tp_swa_model(path, 16);
    unlink(path);
}

/* A generated gpt-oss model (a window of 12 on every other layer, learned sinks, experts) and a
 * deepseek2 one (multi-head latent attention: the prefix cache holds latent blocks): cached runs
 * equal the runs without the cache, bit for bit, and hit it. */
Test(prefix, moe_and_latent_models_share_prefixes_exactly)
{
    mkm_params p;
    mkm_params_default(&p);
    p.arch = "gpt-oss";
    p.dim = 64, p.layers = 4, p.heads = 4, p.kv_heads = 2, p.ffn = 32, p.swa_window = 12;
    p.vocab = 320, p.context = 512;
    char path[1024];
    tu_write_mkmodel(&p, "gptoss", path, sizeof path);
    tp_swa_model(path, 4);
    unlink(path);
    mkm_params_default(&p);
    p.arch = "deepseek2";
    p.dim = 64, p.layers = 3, p.heads = 4, p.head_dim = 16, p.ffn = 32, p.vocab = 320, p.context = 512;
    tu_write_mkmodel(&p, "mla", path, sizeof path);
    tp_swa_model(path, 16);
    tp_swa_model(path, 5);
    unlink(path);
}

/* The Gemma 2 and 3 reference files (window 16) of the shared set. */
Test(prefix, gemma_reference_files_share_prefixes_exactly)
{
    const char *names[] = {"gemma2-swa16", "gemma3-swa16"};
    char path[1024];
    snprintf(path, sizeof path, "%s/models/archs/gemma2-swa16.gguf", tu_shared_dir());
    if (access(path, R_OK)) cr_skip_test("the architecture reference set is not under KVSERVE_SHARED (%s)", path);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/models/archs/%s.gguf", tu_shared_dir(), names[i]);
        tp_swa_model(path, 4);
    }
}
