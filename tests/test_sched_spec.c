/*
 * test_sched_spec.c — verification rows in the scheduler's step (sched.c, sampling.c, batch.c)
 * against a brute-force model, with sched_check after every step.
 *
 * The model is a function: the token after token t at position p is succ(t, p) (a logit row with
 * one maximum). A proposer guesses the next k tokens right with some probability each, wrong
 * otherwise. Random workloads (prompts, max_tokens, arrival times) run on a small pool with a
 * small block size, with and without the prefix cache, so that drafts cross block boundaries, runs
 * stop at max_tokens and the context, and sequences are preempted. Every sequence must end with
 * exactly the tokens the chain gives (what greedy decoding without speculation produces), every
 * running sequence must hold exactly the blocks of its cache length after each step (rejected
 * drafts' blocks given back), and the prefix cache must hold only true prefixes: a sequence
 * admitted over a cached prefix reads back the chain's tokens.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/spec.h"
#include "tests/sched_harness.h"

#define SS_VOCAB 61

static int32_t ss_succ(int32_t t, int32_t p)
{
    return (int32_t)(((uint32_t)t * 17u + (uint32_t)p * 5u + 3u) % SS_VOCAB);
}

/* Batch token i's logit row: one maximum at succ(token, position). */
static int ss_run(void *ud, const be_batch *b, float *logits)
{
    (void)ud;
    for (int r = 0; r < b->n_logits; r++) {
        int i = b->logit_rows[r];
        float *row = logits + (size_t)r * SS_VOCAB;
        for (int v = 0; v < SS_VOCAB; v++) row[v] = 0.0f;
        row[ss_succ(b->tokens[i], b->positions[i])] = 4.0f;
    }
    return 0;
}

static void ss_copy(void *ud, int group, int32_t src, int32_t dst)
{
    (void)ud, (void)group, (void)src, (void)dst;
}

typedef struct ss_prop {
    unsigned rng;
    int right_pct; /* chance of each guess being the chain's token */
    int64_t calls, proposed;
} ss_prop;

static int ss_propose_one(ss_prop *p, seq *s, int k, int32_t *out)
{
    int n = rand_r(&p->rng) % (k + 1);
    int32_t t = s->tokens[s->n_tokens - 1];
    for (int i = 0; i < n; i++) {
        int32_t want = ss_succ(t, s->n_tokens - 1 + i);
        out[i] = rand_r(&p->rng) % 100 < p->right_pct ? want : (want + 1 + rand_r(&p->rng) % (SS_VOCAB - 1)) % SS_VOCAB;
        t = out[i];
    }
    p->proposed += n;
    return n;
}

static void ss_propose(void *ud, seq *const *s, const int *k, int n, int *n_out)
{
    ss_prop *p = ud;
    p->calls++;
    for (int i = 0; i < n; i++) {
        cr_assert_gt(k[i], 0);
        for (int j = 0; j < i; j++) cr_assert_neq(s[i], s[j], "a sequence asked twice in one step");
        n_out[i] = ss_propose_one(p, s[i], k[i], s[i]->draft);
    }
}

/* One random workload; returns the accepted draft count. */
static int64_t ss_workload(unsigned seed, int prefix, int right_pct, int block_size, int n_blocks, int64_t *preempt)
{
    ss_prop prop = {seed, right_pct, 0, 0};
    int32_t eog[1] = {-1};
    sched_config c = {.block_size = block_size, .n_blocks = n_blocks, .max_seqs = 6, .max_batch_tokens = 40,
                      .prefix_cache = prefix, .n_ctx = 120, .eog_ids = eog, .n_eog = 0,
                      .propose = ss_propose, .propose_ud = &prop, .spec_k = 5, .spec_rows = 30,
                      .spec_disable_batch = 6};
    sched *sc = sched_create(&c);
    cr_assert_not_null(sc);
    sh_step h;
    sh_init(&h, sc, &c, SS_VOCAB, (sh_model){ss_run, ss_copy, NULL});
    int max_logits = sched_max_logits(c.max_seqs) + c.spec_rows;
    batch_fini(&h.bb);
    cr_assert_eq(batch_init(&h.bb, c.max_batch_tokens, c.max_seqs, max_logits), 0);
    free(h.logits);
    h.logits = malloc((size_t)max_logits * SS_VOCAB * sizeof(float));
    enum { N = 24 };
    seq *seqs[N];
    int added = 0, done = 0;
    unsigned r = seed;
    for (int step = 0; done < N; step++) {
        cr_assert_lt(step, 20000, "seed %u: stuck", seed);
        if (added < N && rand_r(&r) % 3 == 0) {
            /* prompts share prefixes (a few bases), so the cache is used */
            int32_t pr[40];
            int base = rand_r(&r) % 3, n = 3 + rand_r(&r) % 30;
            pr[0] = base;
            for (int i = 1; i < n; i++) pr[i] = i < 20 ? ss_succ(pr[i - 1], i - 1) : rand_r(&r) % SS_VOCAB;
            seq *s = seq_create(pr, n, 1 + rand_r(&r) % 60);
            cr_assert_not_null(s);
            smp_params_default(&s->sp);
            s->sp.temperature = 0.0f;
            smp_rng_key(&s->rng, 1, 0);
            cr_assert_eq(sched_add(sc, s), 0);
            seqs[added++] = s;
            continue;
        }
        if (added == done) continue;
        sampling_out *out;
        int rc = sh_step_run(&h, &out);
        cr_assert(rc >= 0 || rc == -EAGAIN, "step: %d", rc);
        sched_check(sc);
        done = 0;
        for (int i = 0; i < added; i++) done += seqs[i]->status == SEQ_FINISHED;
    }
    for (int i = 0; i < N; i++) {
        seq *s = seqs[i];
        int want_out = s->max_tokens;
        if (s->n_prompt + want_out > c.n_ctx) want_out = c.n_ctx - s->n_prompt;
        cr_assert_eq(s->finish, ENGINE_FINISH_LENGTH, "seed %u seq %d", seed, i);
        cr_assert_eq(seq_n_output(s), want_out, "seed %u seq %d: %d tokens, want %d", seed, i, seq_n_output(s), want_out);
        for (int p = s->n_prompt; p < s->n_tokens; p++)
            cr_assert_eq(s->tokens[p], ss_succ(s->tokens[p - 1], p - 1), "seed %u seq %d token %d", seed, i, p);
        seq_destroy(s);
    }
    sched_stats st;
    sched_get_stats(sc, &st);
    cr_assert_gt(st.spec_draft_tokens, 0);
    cr_assert_leq(st.spec_accepted, st.spec_draft_tokens);
    *preempt += st.preemptions;
    sched_check(sc);
    sh_fini(&h);
    sched_destroy(sc);
    return st.spec_accepted;
}

Test(sched_spec, random_workloads_against_the_chain)
{
    int64_t acc = 0, preempt = 0;
    for (unsigned seed = 1; seed <= 40; seed++) {
        printf("sched_spec seed %u\n", seed);
        int prefix = seed % 2, right = (int)(seed * 37 % 100), bs = seed % 3 == 0 ? 2 : 4;
        acc += ss_workload(seed, prefix, right, bs, seed % 4 == 0 ? 120 / bs + 8 : 400, &preempt);
    }
    cr_assert_gt(acc, 100, "drafts were accepted");
    cr_assert_gt(preempt, 0, "the small pools preempted");
}

/* Speculation stops while the batch is about to grow past spec_disable_batch (prompts waiting
 * that max_seqs admits), and goes on when max_seqs keeps them waiting. */
static int64_t ss_calls_with_waiting(int max_seqs)
{
    ss_prop prop = {7, 100, 0, 0};
    int32_t eog[1] = {-1};
    sched_config c = {.block_size = 4, .n_blocks = 400, .max_seqs = max_seqs, .max_batch_tokens = 40,
                      .prefix_cache = 0, .n_ctx = 120, .eog_ids = eog, .n_eog = 0,
                      .propose = ss_propose, .propose_ud = &prop, .spec_k = 3, .spec_rows = 30,
                      .spec_disable_batch = 2};
    sched *sc = sched_create(&c);
    cr_assert_not_null(sc);
    sh_step h;
    sh_init(&h, sc, &c, SS_VOCAB, (sh_model){ss_run, ss_copy, NULL});
    int max_logits = sched_max_logits(c.max_seqs) + c.spec_rows;
    batch_fini(&h.bb);
    cr_assert_eq(batch_init(&h.bb, c.max_batch_tokens, c.max_seqs, max_logits), 0);
    free(h.logits);
    h.logits = malloc((size_t)max_logits * SS_VOCAB * sizeof(float));
    seq *s[4];
    for (int i = 0; i < 4; i++) {
        int32_t pr[3] = {i, 5, 9};
        s[i] = seq_create(pr, 3, 100);
        cr_assert_not_null(s[i]);
        smp_params_default(&s[i]->sp);
        s[i]->sp.temperature = 0.0f;
        smp_rng_key(&s[i]->rng, 1, 0);
    }
    cr_assert_eq(sched_add(sc, s[0]), 0);
    sampling_out *out;
    for (int step = 0; step < 3; step++) cr_assert_geq(sh_step_run(&h, &out), 0);
    cr_assert_gt(prop.calls, 0, "one decoding sequence alone speculates");
    for (int i = 1; i < 4; i++) cr_assert_eq(sched_add(sc, s[i]), 0);
    int64_t before = prop.calls;
    cr_assert_geq(sh_step_run(&h, &out), 0);
    sched_check(sc);
    int64_t calls = prop.calls - before;
    for (int i = 0; i < 4; i++)
        if (s[i]->status != SEQ_FINISHED) sched_release(sc, s[i], ENGINE_FINISH_ABORT);
    sched_check(sc);
    sh_fini(&h);
    sched_destroy(sc);
    for (int i = 0; i < 4; i++) seq_destroy(s[i]);
    return calls;
}

Test(sched_spec, no_drafts_while_the_batch_is_about_to_grow)
{
    cr_assert_eq(ss_calls_with_waiting(6), 0, "3 prompts about to join: no proposals");
    cr_assert_gt(ss_calls_with_waiting(1), 0, "max_seqs 1 keeps them waiting: proposals go on");
}
