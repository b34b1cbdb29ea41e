/*
 * test_engine.c — the engine thread with the real CPU backend on stories260K.
 *
 * All golden cases submitted at once must reproduce their recorded greedy tokens exactly:
 * batched, with the prefix cache on and off, and with a KV pool so small that sequences are
 * preempted and recomputed. Also the API edges: max_tokens 0, cancellation, n > 1, stop strings,
 * invalid requests. Skips when the shared model directory is absent; suite engine_synth runs the
 * API on a model the test writes itself.
 */
#include <unistd.h>

#include "cli/mkmodel.h"
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
