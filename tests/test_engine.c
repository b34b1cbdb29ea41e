/*
 * test_engine.c — the engine thread with the real CPU backend on stories260K.
 *
 * All golden cases submitted at once must reproduce their recorded greedy tokens exactly:
 * batched, with the prefix cache on and off, and with a KV pool so small that sequences are
 * preempted and recomputed. Also the API edges: max_tokens 0, cancellation, n > 1, stop strings,
 * invalid requests. Skips when the shared model directory is absent.
 */
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
