/*
 * test_sched.c — the scheduler against a fake model with scripted logits.
 *
 * The fake keeps its own "KV arena": each slot remembers the token id and position written to
 * it. The logits of a row are a hash of the whole context read back through the batch's block
 * table, so a wrong block table, a wrong slot, a bad copy-on-write or a prefix block holding other
 * tokens changes the sampled tokens. Every run is compared with a reference that computes the
 * same hash straight from the token list, and every step ends with sched_check; every test ends
 * with all blocks free or held only by the prefix cache. The steps go through the engine's
 * phases (tests/sched_harness.h) with the fake as the model.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/sched.h"
#include "tests/sched_harness.h"
#include "tests/test_util.h"

#define TS_VOCAB 64
#define TS_EOG 2
#define TS_MAXSEQ 64

typedef struct ts_fake {
    int bs, n_blocks;
    int32_t *kv_tok, *kv_pos;  /* [n_blocks * bs] */
    int max_tokens, max_seqs;  /* limits the batches must respect */
    int n_steps;
    int step_tokens[4096];     /* n_tokens of each step */
    int step_seqs[4096];
    int eog_every;             /* 0: never favour eog; k: when hash % k == 0 */
} ts_fake;

static uint64_t ts_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Logits of the next token after a context with running hash h. */
static void ts_logits(const ts_fake *f, uint64_t h, float *out)
{
    for (int v = 0; v < TS_VOCAB; v++)
        out[v] = v < 3 ? -10.0f : (float)(ts_mix(h ^ ((uint64_t)v << 20)) % 1000) / 200.0f;
    if (f->eog_every && h % (uint64_t)f->eog_every == 0) out[TS_EOG] = 20.0f;
}

static uint64_t ts_hash_step(uint64_t h, int32_t tok, int pos)
{
    return ts_mix(h ^ ((uint64_t)(uint32_t)tok * 1000003u) ^ ((uint64_t)pos << 40));
}

static int ts_run(void *ud, const be_batch *b, float *logits)
{
    ts_fake *f = ud;
    cr_assert_leq(b->n_tokens, f->max_tokens, "token budget exceeded");
    cr_assert_leq(b->n_seqs, f->max_seqs, "sequence cap exceeded");
    cr_assert_leq(b->n_logits, sched_max_logits(f->max_seqs));
    if (f->n_steps < 4096) {
        f->step_tokens[f->n_steps] = b->n_tokens;
        f->step_seqs[f->n_steps] = b->n_seqs;
    }
    f->n_steps++;
    const be_kv *kv = be_batch_kv(b, 0); /* one layer group (windows: test_sched_kv.c) */
    cr_assert_eq(b->n_kv, 1);
    for (int i = 0; i < b->n_tokens; i++) {
        cr_assert(kv->slots[i] >= 0 && kv->slots[i] < f->n_blocks * f->bs);
        f->kv_tok[kv->slots[i]] = b->tokens[i];
        f->kv_pos[kv->slots[i]] = b->positions[i];
    }
    int row = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int n_new = b->q_start[s + 1] - b->q_start[s];
        int first = kv->ctx_len[s] - n_new;
        for (int i = 0; i < n_new; i++)
            cr_assert_eq(b->positions[b->q_start[s] + i], first + i);
        /* Rows inside this sequence's tokens, in order: the logits after each such token. */
        while (row < b->n_logits && b->logit_rows[row] >= b->q_start[s] && b->logit_rows[row] < b->q_start[s + 1]) {
            cr_assert(row == 0 || b->logit_rows[row] > b->logit_rows[row - 1], "logit rows out of order");
            int len = first + (b->logit_rows[row] - b->q_start[s]) + 1;
            uint64_t h = 0;
            for (int k = 0; k < len; k++) {
                int32_t blk = kv->block_table[(int64_t)s * kv->bt_stride + k / f->bs];
                int slot = blk * f->bs + k % f->bs;
                cr_assert_eq(f->kv_pos[slot], k, "KV entry %d of a sequence holds position %d",
                             k, f->kv_pos[slot]);
                h = ts_hash_step(h, f->kv_tok[slot], k);
            }
            ts_logits(f, h, logits + (size_t)row * TS_VOCAB);
            row++;
        }
    }
    cr_assert_eq(row, b->n_logits, "every logit row must be one of a sequence's new tokens");
    return 0;
}

static void ts_copy(void *ud, int group, int32_t src, int32_t dst)
{
    ts_fake *f = ud;
    cr_assert_eq(group, 0);
    memcpy(f->kv_tok + dst * f->bs, f->kv_tok + src * f->bs, (size_t)f->bs * sizeof(int32_t));
    memcpy(f->kv_pos + dst * f->bs, f->kv_pos + src * f->bs, (size_t)f->bs * sizeof(int32_t));
}

typedef struct ts_env {
    ts_fake f;
    sched *sc;
    sched_config c;
    int32_t eog[1];
    sh_step h;     /* drives sc's steps with f as the model */
} ts_env;

/* A scheduler for e->c and its step driver. */
static void ts_env_make(ts_env *e)
{
    e->sc = sched_create(&e->c);
    cr_assert_not_null(e->sc);
    sh_init(&e->h, e->sc, &e->c, TS_VOCAB, (sh_model){ts_run, ts_copy, &e->f});
}

/* One step of e's scheduler (sh_step_run). */
static int ts_step(ts_env *e, sampling_out **out)
{
    return sh_step_run(&e->h, out);
}

static void ts_env_init(ts_env *e, int n_blocks, int max_seqs, int max_tokens, int prefix)
{
    memset(e, 0, sizeof *e);
    e->f.bs = 4;
    e->f.n_blocks = n_blocks;
    e->f.kv_tok = malloc((size_t)n_blocks * 4 * sizeof(int32_t));
    e->f.kv_pos = malloc((size_t)n_blocks * 4 * sizeof(int32_t));
    for (int i = 0; i < n_blocks * 4; i++) e->f.kv_tok[i] = e->f.kv_pos[i] = -1;
    e->f.max_tokens = max_tokens;
    e->f.max_seqs = max_seqs;
    e->eog[0] = TS_EOG;
    e->c = (sched_config){
        .block_size = 4,
        .n_blocks = n_blocks,
        .max_seqs = max_seqs,
        .max_batch_tokens = max_tokens,
        .schedule = SCHED_FCFS,
        .prefix_cache = prefix,
        .n_ctx = 256,
        .eog_ids = e->eog,
        .n_eog = 1,
    };
    ts_env_make(e);
}

/* A fresh scheduler for e->c after a test changed it. */
static void ts_env_reconfigure(ts_env *e)
{
    sh_fini(&e->h);
    sched_destroy(e->sc);
    ts_env_make(e);
}

/* All blocks free or held only by the cache; evicting everything frees them all. */
static void ts_env_fini(ts_env *e)
{
    sched_check(e->sc);
    block_pool *bp = sched_pool(e->sc);
    rdx_tree *t = sched_tree(e->sc);
    cr_assert_eq(bp_num_free(bp) + (t ? rdx_n_blocks(t) : 0), e->f.n_blocks, "leaked blocks");
    if (t) {
        rdx_evict(t, e->f.n_blocks);
        cr_assert_eq(bp_num_free(bp), e->f.n_blocks, "the cache kept blocks after a full eviction");
        rdx_check(t);
    }
    sh_fini(&e->h);
    sched_destroy(e->sc);
    free(e->f.kv_tok);
    free(e->f.kv_pos);
}

/* When set, sequences are constrained by this grammar over ts_gv (the reference too). */
static gr_grammar *ts_gr;
static gr_vocab *ts_gv;

static seq *ts_seq(const int32_t *prompt, int n_prompt, int max_tokens, float temp, uint64_t seed)
{
    seq *s = seq_create(prompt, n_prompt, max_tokens);
    cr_assert_not_null(s);
    smp_params_default(&s->sp);
    s->sp.temperature = temp;
    s->sp.seed = seed;
    s->sp.has_seed = 1;
    smp_rng_seed(&s->rng, seed);
    if (ts_gr) cr_assert_not_null(s->gm = gr_matcher_create(ts_gr, ts_gv));
    return s;
}

/* What a sequence must produce: the same hash computed from the token list directly. */
static int ts_reference(const ts_fake *f, const int32_t *prompt, int n_prompt, int max_tokens,
                        float temp, uint64_t seed, int choice, int ignore_eos, int32_t *out)
{
    int32_t toks[512];
    memcpy(toks, prompt, (size_t)n_prompt * sizeof *toks);
    int n = n_prompt, n_out = 0;
    smp_params p;
    smp_params_default(&p);
    p.temperature = temp;
    p.ignore_eos = ignore_eos;
    smp_rng rng;
    smp_rng_key(&rng, seed, (uint32_t)choice);
    int32_t eog = TS_EOG;
    gr_matcher *m = ts_gr ? gr_matcher_create(ts_gr, ts_gv) : NULL;
    uint32_t mask[GR_MASK_WORDS(TS_VOCAB)];
    while (n_out < max_tokens && n < 256) {
        uint64_t h = 0;
        for (int k = 0; k < n; k++) h = ts_hash_step(h, toks[k], k);
        float lg[TS_VOCAB];
        ts_logits(f, h, lg);
        smp_history hist = {toks, n_prompt, toks + n_prompt, n_out};
        smp_result r;
        if (m && gr_matcher_fill_mask(m, mask) == 0) break;
        smp_sample_masked(&p, &rng, lg, TS_VOCAB, &hist, &eog, 1, m ? mask : NULL, &r);
        if (m) cr_assert_eq(gr_matcher_accept(m, r.token), 0);
        toks[n++] = r.token;
        out[n_out++] = r.token;
        if (r.token == TS_EOG && !ignore_eos) break;
    }
    gr_matcher_destroy(m);
    return n_out;
}

/* Steps until nothing is left; returns the number of steps. */
static int ts_drain(ts_env *e)
{
    int steps = 0;
    long spins = 0;
    for (;;) {
        sampling_out *sm;
        int n = ts_step(e, &sm);
        sched_check(e->sc);
        if (n == -EAGAIN && sched_tier_pending(e->sc)) { /* waiting for the tier's I/O thread */
            sched_yield();
            cr_assert_lt(++spins, 100000000, "a tier load never completed");
            continue;
        }
        if (n == -EAGAIN) break;
        cr_assert_geq(n, 0);
        steps++;
        cr_assert_lt(steps, 100000);
    }
    cr_assert_eq(sched_num_running(e->sc), 0);
    cr_assert_eq(sched_num_waiting(e->sc), 0);
    return steps;
}

static void ts_prompt(int32_t *p, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) p[i] = 3 + (int32_t)(ts_mix(seed * 7919 + (uint64_t)i) % (TS_VOCAB - 3));
}

static void ts_expect(const ts_fake *f, const seq *s, int ignore_eos)
{
    int32_t ref[512];
    int n = ts_reference(f, s->tokens, s->n_prompt, s->max_tokens, s->sp.temperature, s->sp.seed, s->index,
                         ignore_eos, ref);
    cr_assert_eq(seq_n_output(s), n, "choice %d: %d tokens, expected %d", s->index, seq_n_output(s), n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(s->tokens[s->n_prompt + i], ref[i], "token %d differs", i);
}

Test(sched, fcfs_admission_order_and_seq_cap)
{
    ts_env e;
    ts_env_init(&e, 256, 2, 64, 0);
    seq *s[4];
    int32_t p[8];
    for (int i = 0; i < 4; i++) {
        ts_prompt(p, 8, (uint64_t)i + 1);
        s[i] = ts_seq(p, 8, 5 + i, 0, 0);
        cr_assert_eq(sched_add(e.sc, s[i]), 0);
    }
    sampling_out *sm;
    cr_assert_eq(ts_step(&e, &sm), 2);
    cr_assert_eq(sched_num_running(e.sc), 2);
    cr_assert_eq(s[0]->status, SEQ_RUNNING);
    cr_assert_eq(s[1]->status, SEQ_RUNNING);
    cr_assert_eq(s[2]->status, SEQ_WAITING);
    ts_drain(&e);
    for (int i = 1; i < 4; i++) cr_assert_gt(s[i]->admit_order, s[i - 1]->admit_order);
    cr_assert_gt(s[2]->first_scheduled_us, 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(s[i]->finish, ENGINE_FINISH_LENGTH);
        ts_expect(&e.f, s[i], 0);
        seq_destroy(s[i]);
    }
    ts_env_fini(&e);
}

Test(sched, chunked_prefill_splits_and_decode_priority)
{
    ts_env e;
    ts_env_init(&e, 256, 4, 16, 0);
    int32_t p[64];
    ts_prompt(p, 3, 9);
    seq *a = ts_seq(p, 3, 30, 0, 0);
    sched_add(e.sc, a);
    sampling_out *sm;
    cr_assert_eq(ts_step(&e, &sm), 1); /* a's prompt fits one step */
    ts_prompt(p, 50, 10);
    seq *b = ts_seq(p, 50, 4, 0, 0);
    sched_add(e.sc, b);
    /* b's 50 prompt tokens go in chunks of 15 (16 minus a's decode token) while a decodes. */
    int expect[] = {15, 15, 15, 5};
    for (int k = 0; k < 4; k++) {
        int n = ts_step(&e, &sm);
        sched_check(e.sc);
        cr_assert_eq(e.f.step_seqs[e.f.n_steps - 1], 2, "a decodes in every step of b's prefill");
        cr_assert_eq(e.f.step_tokens[e.f.n_steps - 1], 1 + expect[k]);
        cr_assert_eq(n, k == 3 ? 2 : 1, "b samples only when its prompt is done");
    }
    cr_assert_eq(b->n_computed, 50);
    ts_drain(&e);
    ts_expect(&e.f, a, 0);
    ts_expect(&e.f, b, 0);
    seq_destroy(a);
    seq_destroy(b);
    ts_env_fini(&e);
}

static void ts_expect_grammar(const seq *s);

/* Runs n requests through a pool of n_blocks and checks every output against the reference. */
static void ts_workload(int n_blocks, int max_seqs, int budget, int prefix, int n, uint64_t seed,
                        int64_t *preempt_out)
{
    ts_env e;
    ts_env_init(&e, n_blocks, max_seqs, budget, prefix);
    e.f.eog_every = 23;
    seq *s[32];
    int32_t p[64];
    for (int i = 0; i < n; i++) {
        int np = 5 + (int)(ts_mix(seed + (uint64_t)i) % 30);
        ts_prompt(p, np, seed * 100 + (uint64_t)i % 3); /* shared prefixes across requests */
        p[np - 1] = 3 + i;
        s[i] = ts_seq(p, np, 10 + (int)(ts_mix(seed ^ (uint64_t)i) % 30), 0.9f, seed + (uint64_t)i * 17);
        sched_add(e.sc, s[i]);
    }
    ts_drain(&e);
    for (int i = 0; i < n; i++) {
        ts_expect(&e.f, s[i], 0);
        if (ts_gr) ts_expect_grammar(s[i]);
        seq_destroy(s[i]);
    }
    sched_stats st;
    sched_get_stats(e.sc, &st);
    if (preempt_out) *preempt_out = st.preemptions;
    ts_env_fini(&e);
}

Test(sched, preemption_keeps_tokens)
{
    printf("sched/preemption_keeps_tokens: seeds 1..6\n");
    for (uint64_t seed = 1; seed <= 6; seed++) {
        int64_t pre_big = -1, pre_small = -1, pre_small_pc = -1;
        ts_workload(1024, 8, 32, 0, 12, seed, &pre_big);
        ts_workload(24, 8, 32, 0, 12, seed, &pre_small);
        ts_workload(24, 8, 32, 1, 12, seed, &pre_small_pc);
        cr_assert_eq(pre_big, 0);
        cr_assert_gt(pre_small, 0, "a pool of 24 blocks must force preemption");
        cr_assert_gt(pre_small_pc, 0);
    }
}

Test(sched, cancel_in_every_phase)
{
    for (int phase = 0; phase < 4; phase++) {
        ts_env e;
        ts_env_init(&e, 64, 4, 8, 1);
        int32_t p[40];
        ts_prompt(p, 30, 3);
        seq *a = ts_seq(p, 30, 20, 0, 0);
        seq *b = ts_seq(p, 30, 20, 0.5f, 7);
        b->n_choices = 3;
        sched_add(e.sc, a);
        sched_add(e.sc, b);
        sampling_out *sm;
        /* phase 0: waiting; 1: mid-prefill; 2: decoding; 3: after b's fork */
        int steps = phase == 0 ? 0 : phase == 1 ? 2 : phase == 2 ? 4 : 7;
        seq *kids[3] = {b, NULL, NULL};
        for (int k = 0; k < steps; k++) {
            int n = ts_step(&e, &sm);
            cr_assert_geq(n, 0);
            sched_check(e.sc);
            for (int i = 0; i < n; i++)
                if (sm[i].s->index > 0) kids[sm[i].s->index] = sm[i].s;
        }
        if (phase == 1) cr_assert(a->status == SEQ_RUNNING && a->n_computed < 30);
        if (phase >= 2) cr_assert(a->status == SEQ_RUNNING && seq_n_output(a) > 0);
        if (phase == 2) cr_assert_null(kids[1], "b has not forked yet");
        if (phase == 3) cr_assert_not_null(kids[2], "b forked into 3 choices");
        sched_release(e.sc, a, ENGINE_FINISH_ABORT);
        cr_assert_eq(a->status, SEQ_FINISHED);
        sched_check(e.sc);
        for (int i = 0; i < 3; i++)
            if (kids[i] && kids[i]->status != SEQ_FINISHED) sched_release(e.sc, kids[i], ENGINE_FINISH_ABORT);
        sched_check(e.sc);
        cr_assert_eq(sched_num_running(e.sc) + sched_num_waiting(e.sc), 0);
        for (int i = 0; i < 3; i++) seq_destroy(kids[i]);
        seq_destroy(a);
        ts_env_fini(&e);
    }
}

Test(sched, n_choices_fork_share_and_diverge)
{
    ts_env e;
    ts_env_init(&e, 128, 8, 64, 1);
    int32_t p[20];
    ts_prompt(p, 18, 5); /* 4 full blocks and a partial one */
    seq *s = ts_seq(p, 18, 12, 1.0f, 42);
    s->n_choices = 4;
    sched_add(e.sc, s);
    sampling_out *sm;
    int n = ts_step(&e, &sm);
    cr_assert_eq(n, 4, "the prompt's step samples one token per choice");
    seq *kids[4] = {0};
    for (int i = 0; i < 4; i++) kids[sm[i].s->index] = sm[i].s;
    cr_assert_eq(kids[0], s);
    block_pool *bp = sched_pool(e.sc);
    /* Full prompt blocks: 4 choices + the cache; the partial block: the 4 choices. */
    cr_assert_eq(bp_refcount(bp, s->kv[0].bt[0]), 5);
    cr_assert_eq(bp_refcount(bp, s->kv[0].bt[4]), 4);
    for (int i = 1; i < 4; i++) cr_assert_eq(kids[i]->kv[0].bt[4], s->kv[0].bt[4]);
    ts_drain(&e);
    int differ = 0;
    for (int i = 0; i < 4; i++) {
        ts_expect(&e.f, kids[i], 0);
        if (i && memcmp(kids[i]->tokens + 18, kids[0]->tokens + 18, 12 * sizeof(int32_t))) differ = 1;
    }
    cr_assert(differ, "choices with their own seeds should not all agree");
    for (int i = 0; i < 4; i++) seq_destroy(kids[i]);
    ts_env_fini(&e);
}

/* A scored prompt with n = 3 forks in the step that scores its last prompt tokens. The children
 * are born in the sample phase, before the commit advances their parent: they must join with the
 * parent's state as the commit leaves it (computed count, blocks offered to the cache, scoring
 * cursor), share its blocks, and no longer count as scoring (a preempted child that did would
 * recompute without the prefix cache). */
Test(sched, fork_after_scoring_children_take_the_parent_state)
{
    ts_env e;
    ts_env_init(&e, 256, 4, 64, 1);
    int32_t p[30];
    ts_prompt(p, 30, 17);
    seq *s = ts_seq(p, 30, 6, 0.7f, 5);
    s->prompt_logprobs = 1;
    s->n_choices = 3;
    sched_add(e.sc, s);
    sampling_out *sm;
    int n = ts_step(&e, &sm);
    cr_assert_eq(n, 30 + 3, "one step: 30 scored prompt tokens, then a token per choice");
    seq *kids[3] = {0};
    for (int i = 0; i < n; i++) {
        cr_assert_eq(sm[i].kind, i < 30 ? SAMPLING_PROMPT : SAMPLING_TOKEN);
        if (i >= 30) kids[sm[i].s->index] = sm[i].s;
    }
    cr_assert_eq(kids[0], s);
    cr_assert_eq(s->n_inserted, 30 / 4, "the prompt's full blocks entered the cache");
    for (int c = 0; c < 3; c++) {
        cr_assert_eq(kids[c]->n_computed, 30);
        cr_assert_eq(kids[c]->n_inserted, s->n_inserted);
        cr_assert_eq(kids[c]->plp_next, 30);
        cr_assert(!seq_is_scoring(kids[c]));
        cr_assert_eq(kids[c]->n_choices, 1);
        cr_assert_eq(kids[c]->kv[0].n_blocks, s->kv[0].n_blocks);
        cr_assert_eq(memcmp(kids[c]->kv[0].bt, s->kv[0].bt, (size_t)s->kv[0].n_blocks * sizeof(int32_t)), 0);
    }
    sched_check(e.sc);
    ts_drain(&e);
    for (int c = 0; c < 3; c++) {
        ts_expect(&e.f, kids[c], 0);
        seq_destroy(kids[c]);
    }
    ts_env_fini(&e);
}

Test(sched, prefix_cache_reuse_and_in_batch_dedup)
{
    ts_env e;
    ts_env_init(&e, 256, 8, 16, 1);
    int32_t p[80];
    ts_prompt(p, 80, 77);
    /* Three requests sharing a 64-token prefix arrive together. */
    seq *s[3];
    for (int i = 0; i < 3; i++) {
        p[64] = 3 + i;
        s[i] = ts_seq(p, 70, 3, 0, 0);
        sched_add(e.sc, s[i]);
    }
    ts_drain(&e);
    int total = 0;
    for (int i = 0; i < e.f.n_steps; i++) total += e.f.step_tokens[i];
    for (int i = 0; i < 3; i++) ts_expect(&e.f, s[i], 0);
    cr_assert_eq(s[0]->cached_tokens, 0);
    cr_assert_eq(s[1]->cached_tokens, 64, "the shared prefix is computed once");
    cr_assert_eq(s[2]->cached_tokens, 64);
    /* 70 + 6 + 6 prompt tokens and 2 decode tokens each. */
    cr_assert_eq(total, 70 + 6 + 6 + 3 * 2);
    /* A later request with the whole history of s[0] hits its generated tokens too. */
    int32_t q[80];
    memcpy(q, s[0]->tokens, (size_t)s[0]->n_tokens * sizeof *q);
    int nq = s[0]->n_tokens;
    q[nq++] = 5;
    seq *t = ts_seq(q, nq, 2, 0, 0);
    sched_add(e.sc, t);
    ts_drain(&e);
    cr_assert_eq(t->cached_tokens, (s[0]->n_tokens - 1) / 4 * 4);
    ts_expect(&e.f, t, 0);
    sched_stats st;
    sched_get_stats(e.sc, &st);
    cr_assert_eq(st.prefix_hits, 64 + 64 + t->cached_tokens);
    for (int i = 0; i < 3; i++) seq_destroy(s[i]);
    seq_destroy(t);
    ts_env_fini(&e);
}

Test(sched, partial_block_copied_before_it_is_written)
{
    ts_env e;
    ts_env_init(&e, 256, 8, 16, 1);
    int32_t p[80];
    ts_prompt(p, 80, 91);
    seq *a = ts_seq(p, 70, 3, 0, 0);
    sched_add(e.sc, a);
    ts_drain(&e);
    /* b agrees with a on 66 tokens: 16 whole blocks and 2 tokens of a's 17th block. */
    p[66] = p[66] == 3 ? 4 : 3;
    seq *b = ts_seq(p, 70, 3, 0, 0);
    sched_add(e.sc, b);
    ts_drain(&e);
    cr_assert_eq(b->cached_tokens, 66);
    ts_expect(&e.f, b, 0); /* the fake model reads every K/V slot back through the table */
    /* a's cached block was copied, not written: a's prompt again still finds it intact. */
    ts_prompt(p, 80, 91);
    seq *c = ts_seq(p, 70, 3, 0, 0);
    sched_add(e.sc, c);
    ts_drain(&e);
    cr_assert_eq(c->cached_tokens, 69, "68 in whole blocks, 1 from a partly used one");
    ts_expect(&e.f, c, 0);
    cr_assert_eq(memcmp(a->tokens, c->tokens, (size_t)a->n_tokens * sizeof(int32_t)), 0);
    seq_destroy(a);
    seq_destroy(b);
    seq_destroy(c);
    ts_env_fini(&e);
}

Test(sched, prefill_admit_tokens_spreads_prompts_over_steps)
{
    for (int limit = -1; limit <= 10; limit += 11) {
        ts_env e;
        ts_env_init(&e, 256, 4, 64, 0);
        e.c.prefill_admit_tokens = limit;
        ts_env_reconfigure(&e);
        seq *s[4];
        int32_t p[6];
        for (int i = 0; i < 4; i++) {
            ts_prompt(p, 6, 40 + (uint64_t)i);
            s[i] = ts_seq(p, 6, 4, 0, 0);
            sched_add(e.sc, s[i]);
        }
        ts_drain(&e);
        if (limit < 0) {
            cr_assert_eq(e.f.step_tokens[0], 24, "no limit: every prompt in the first step");
        } else {
            /* 6 < 10 admits a second prompt, 12 ≥ 10 stops; the next step decodes the first two
             * and admits the other two the same way. */
            cr_assert_eq(e.f.step_tokens[0], 12);
            cr_assert_eq(e.f.step_tokens[1], 2 + 12);
        }
        for (int i = 0; i < 4; i++) {
            ts_expect(&e.f, s[i], 0);
            seq_destroy(s[i]);
        }
        ts_env_fini(&e);
    }
}

/* Steps until idle, keeping every scored prompt token of s: pos → log-prob (NaN for pos 0),
 * counting how often each position was reported; returns whether s ended with SAMPLING_END. */
static int ts_drain_scores(ts_env *e, const seq *s, float *lp, int *seen, int n)
{
    int ended = 0;
    for (int steps = 0;; steps++) {
        sampling_out *sm;
        int k = ts_step(e, &sm);
        sched_check(e->sc);
        if (k == -EAGAIN) break;
        cr_assert_geq(k, 0);
        cr_assert_lt(steps, 100000);
        for (int i = 0; i < k; i++) {
            if (sm[i].s != s) continue;
            if (sm[i].kind == SAMPLING_END) ended = 1;
            if (sm[i].kind != SAMPLING_PROMPT) continue;
            cr_assert(sm[i].pos >= 0 && sm[i].pos < n);
            cr_assert_eq(sm[i].r.token, s->tokens[sm[i].pos]);
            lp[sm[i].pos] = sm[i].r.logprob;
            seen[sm[i].pos]++;
        }
    }
    return ended;
}

Test(sched, prompt_logprobs_score_every_token_in_capped_chunks)
{
    ts_env e;
    ts_env_init(&e, 256, 4, 100, 1);
    int32_t p[150];
    ts_prompt(p, 150, 123);
    seq *warm = ts_seq(p, 150, 2, 0, 0); /* puts the prompt in the cache, which scoring must not use */
    sched_add(e.sc, warm);
    ts_drain(&e);
    int base = e.f.n_steps;
    for (int max_tokens = 3; max_tokens >= 0; max_tokens -= 3) {
        seq *s = ts_seq(p, 150, max_tokens, 0, 0);
        s->prompt_logprobs = 1;
        s->sp.n_logprobs = 2;
        sched_add(e.sc, s);
        static float lp[150];
        int seen[150] = {0};
        int ended = ts_drain_scores(&e, s, lp, seen, 150);
        cr_assert_eq(s->cached_tokens, 0, "a scored prompt is computed in full");
        cr_assert(isnan(lp[0]), "the first prompt token has no log-prob");
        uint64_t h = 0;
        for (int j = 0; j < 150; j++) {
            cr_assert_eq(seen[j], 1, "prompt token %d reported %d times", j, seen[j]);
            if (j > 0) {
                float lg[TS_VOCAB];
                ts_logits(&e.f, h, lg);
                double m = lg[0], sum = 0;
                for (int v = 1; v < TS_VOCAB; v++) m = lg[v] > m ? lg[v] : m;
                for (int v = 0; v < TS_VOCAB; v++) sum += exp(lg[v] - m);
                double want = lg[p[j]] - m - log(sum);
                cr_assert(fabs(lp[j] - want) < 1e-4, "token %d: log-prob %g, want %g", j, lp[j], want);
            }
            h = ts_hash_step(h, p[j], j);
        }
        /* At most SCHED_PROMPT_LOGIT_ROWS rows a step: 64 + 64 + 22 prompt tokens. */
        cr_assert_eq(e.f.step_tokens[base], 64);
        cr_assert_eq(e.f.step_tokens[base + 1], 64);
        cr_assert_eq(e.f.step_tokens[base + 2], 22);
        base = e.f.n_steps;
        if (max_tokens) {
            cr_assert(!ended);
            ts_expect(&e.f, s, 0);
        } else {
            cr_assert(ended, "max_tokens 0: the sequence ends after scoring");
            cr_assert_eq(s->finish, ENGINE_FINISH_LENGTH);
            cr_assert_eq(seq_n_output(s), 0);
        }
        seq_destroy(s);
    }
    seq_destroy(warm);
    ts_env_fini(&e);
}

Test(sched, lpm_prefers_cached_prefix_and_ages)
{
    ts_env e;
    ts_env_init(&e, 256, 1, 64, 1);
    e.c.schedule = SCHED_LPM;
    e.c.lpm_aging_steps = 1000;
    ts_env_reconfigure(&e);
    int32_t p[40], o[40];
    ts_prompt(p, 40, 1);
    ts_prompt(o, 40, 2);
    seq *warm = ts_seq(p, 40, 1, 0, 0);
    sched_add(e.sc, warm);
    ts_drain(&e);
    seq *cold = ts_seq(o, 40, 1, 0, 0);
    p[39] = 9;
    seq *hot = ts_seq(p, 40, 1, 0, 0);
    sched_add(e.sc, cold);
    sched_add(e.sc, hot);
    ts_drain(&e);
    cr_assert_lt(hot->admit_order, cold->admit_order, "lpm admits the cached prefix first");
    seq_destroy(warm);
    seq_destroy(cold);
    seq_destroy(hot);
    ts_env_fini(&e);
}

Test(sched, random_workloads_with_cancels)
{
    uint64_t seed0 = 20240601;
    printf("sched/random_workloads_with_cancels: seed %llu\n", (unsigned long long)seed0);
    for (int round = 0; round < 200; round++) {
        uint64_t rs = ts_mix(seed0 + (uint64_t)round);
        int prefix = round & 1;
        ts_env e;
        ts_env_init(&e, 20 + (int)(rs % 60), 1 + (int)((rs >> 8) % 8), 8 + (int)((rs >> 16) % 40), prefix);
        if (round % 4 == 3) {
            e.c.schedule = SCHED_LPM;
            e.c.lpm_aging_steps = 5;
            ts_env_reconfigure(&e);
        }
        e.f.eog_every = 31;
        seq *s[16], *kids[16][3];
        memset(kids, 0, sizeof kids);
        int n = 6 + (int)((rs >> 24) % 10), cancelled[16] = {0};
        int32_t p[64];
        for (int i = 0; i < n; i++) {
            uint64_t x = ts_mix(rs + (uint64_t)i);
            int np = 2 + (int)(x % 40);
            ts_prompt(p, np, rs % 4 + (uint64_t)(i % 2));
            s[i] = ts_seq(p, np, 1 + (int)((x >> 8) % 30), (x >> 20) % 2 ? 0.8f : 0, x);
            s[i]->owner = &kids[i];
            int nc = 1 + (int)((x >> 32) % 3);
            s[i]->n_choices = nc <= e.c.max_seqs ? nc : 1;
            kids[i][0] = s[i];
            cr_assert_eq(sched_add(e.sc, s[i]), 0);
        }
        for (int step = 0; step < 100000; step++) {
            sampling_out *sm;
            int k = ts_step(&e, &sm);
            sched_check(e.sc);
            if (k == -EAGAIN) break;
            cr_assert_geq(k, 0);
            for (int j = 0; j < k; j++) {
                seq *(*ks)[3] = sm[j].s->owner;
                (*ks)[sm[j].s->index] = sm[j].s;
            }
            int victim = (int)(ts_mix(rs ^ (uint64_t)step) % 64);
            if (victim < n && !cancelled[victim]) {
                cancelled[victim] = 1;
                for (int c = 0; c < 3; c++)
                    if (kids[victim][c] && kids[victim][c]->status != SEQ_FINISHED)
                        sched_release(e.sc, kids[victim][c], ENGINE_FINISH_ABORT);
                sched_check(e.sc);
            }
        }
        for (int i = 0; i < n; i++)
            for (int c = 0; c < 3; c++) {
                if (!kids[i][c]) continue;
                if (!cancelled[i]) ts_expect(&e.f, kids[i][c], 0);
                seq_destroy(kids[i][c]);
            }
        ts_env_fini(&e);
    }
}

Test(sched, lpm_aging_bounds_the_wait)
{
    ts_env e;
    ts_env_init(&e, 256, 1, 64, 1);
    e.c.schedule = SCHED_LPM;
    e.c.lpm_aging_steps = 3;
    ts_env_reconfigure(&e);
    int32_t p[40], o[40];
    ts_prompt(p, 40, 1);
    ts_prompt(o, 40, 2);
    seq *warm = ts_seq(p, 40, 1, 0, 0);
    sched_add(e.sc, warm);
    ts_drain(&e);
    seq *cold = ts_seq(o, 40, 3, 0, 0), *hot[6];
    sched_add(e.sc, cold);
    for (int i = 0; i < 6; i++) {
        p[39] = 10 + i;
        hot[i] = ts_seq(p, 40, 3, 0, 0);
        sched_add(e.sc, hot[i]);
    }
    ts_drain(&e);
    cr_assert_gt(cold->admit_order, hot[0]->admit_order, "lpm first serves a cached prefix");
    cr_assert_lt(cold->admit_order, hot[2]->admit_order, "after 3 waiting steps the cold request goes first");
    seq_destroy(warm);
    seq_destroy(cold);
    for (int i = 0; i < 6; i++) seq_destroy(hot[i]);
    ts_env_fini(&e);
}

/* ---- structured output ----------------------------------------------------------------------- */

/* Token v ≥ 3 spells one or two characters of "(),0123456789"; 0..2 are special (2 = eog). */
static void ts_grammar_setup(const char *gbnf)
{
    static const char alpha[] = "(),0123456789";
    char *bytes[TS_VOCAB] = {0};
    int lens[TS_VOCAB] = {0};
    char buf[TS_VOCAB][3];
    for (int v = 3; v < TS_VOCAB; v++) {
        int k = v - 3, na = (int)sizeof alpha - 1;
        if (k < na) {
            buf[v][0] = alpha[k];
            lens[v] = 1;
        } else {
            buf[v][0] = alpha[(k * 7) % na];
            buf[v][1] = alpha[(k * 11 + 3) % na];
            lens[v] = 2;
        }
        bytes[v] = buf[v];
    }
    int32_t eog = TS_EOG;
    ts_gv = gr_vocab_create_raw(TS_VOCAB, (const char *const *)bytes, lens, &eog, 1);
    gr_error err;
    ts_gr = gr_compile_gbnf(gbnf, strlen(gbnf), NULL, &err);
    cr_assert_not_null(ts_gr, "%s", err.msg);
}

static void ts_grammar_teardown(void)
{
    gr_unref(ts_gr);
    gr_vocab_destroy(ts_gv);
    ts_gr = NULL;
    ts_gv = NULL;
}

/* The output of s is a viable prefix, and a complete sentence when it stopped. */
static void ts_expect_grammar(const seq *s)
{
    gr_matcher *m = gr_matcher_create(ts_gr, ts_gv);
    for (int i = s->n_prompt; i < s->n_tokens; i++)
        cr_assert_eq(gr_matcher_accept(m, s->tokens[i]), 0, "choice %d: token %d breaks the grammar", s->index, i - s->n_prompt);
    if (s->finish == ENGINE_FINISH_STOP) cr_assert(gr_matcher_is_terminated(m), "stopped before the structure was complete");
    gr_matcher_destroy(m);
}

static const char TS_NESTED[] = "root ::= \"(\" item (\",\" item){0,3} \")\"\nitem ::= [0-9]{1,3} | root\n";

Test(sched, grammar_survives_preemption)
{
    ts_grammar_setup(TS_NESTED);
    printf("sched/grammar_survives_preemption: seeds 1..4\n");
    for (uint64_t seed = 1; seed <= 4; seed++) {
        int64_t pre = -1;
        ts_workload(24, 8, 32, 1, 12, seed, &pre);
        cr_assert_gt(pre, 0, "a pool of 24 blocks must force preemption");
    }
    ts_grammar_teardown();
}

Test(sched, grammar_choices_have_their_own_state)
{
    ts_grammar_setup(TS_NESTED);
    ts_env e;
    ts_env_init(&e, 128, 8, 64, 1);
    int32_t p[10];
    ts_prompt(p, 9, 3);
    seq *s = ts_seq(p, 9, 60, 1.5f, 7);
    s->n_choices = 4;
    sched_add(e.sc, s);
    sampling_out *sm;
    cr_assert_eq(ts_step(&e, &sm), 4);
    seq *kids[4] = {0};
    for (int i = 0; i < 4; i++) kids[sm[i].s->index] = sm[i].s;
    for (int i = 1; i < 4; i++) cr_assert(kids[i]->gm && kids[i]->gm != s->gm, "each choice owns a matcher");
    ts_drain(&e);
    int stopped = 0;
    for (int i = 0; i < 4; i++) {
        ts_expect(&e.f, kids[i], 0);
        ts_expect_grammar(kids[i]);
        stopped += kids[i]->finish == ENGINE_FINISH_STOP;
    }
    cr_assert_gt(stopped, 0, "some choice should complete its structure within 60 tokens");
    sampling_stats st;
    sampling_get_stats(e.h.smp, &st);
    cr_assert_gt(st.grammar_masks, 0);
    for (int i = 0; i < 4; i++) seq_destroy(kids[i]);
    ts_env_fini(&e);
    ts_grammar_teardown();
}

/* ---- the second KV tier ------------------------------------------------------------------------ */

/* The fake's arena as the tier sees a block: its bs token ids, then their positions. */
static int ts_tier_out(void *ud, int32_t block, void *dst)
{
    ts_fake *f = ud;
    memcpy(dst, f->kv_tok + block * f->bs, (size_t)f->bs * sizeof(int32_t));
    memcpy((int32_t *)dst + f->bs, f->kv_pos + block * f->bs, (size_t)f->bs * sizeof(int32_t));
    return 0;
}

static int ts_tier_in(void *ud, int32_t block, const void *src)
{
    ts_fake *f = ud;
    memcpy(f->kv_tok + block * f->bs, src, (size_t)f->bs * sizeof(int32_t));
    memcpy(f->kv_pos + block * f->bs, (const int32_t *)src + f->bs, (size_t)f->bs * sizeof(int32_t));
    return 0;
}

/* A tier over e's fake arena (host_blocks in RAM, disk_blocks in dir when dir), under e's
 * scheduler. */
static tier *ts_tier(ts_env *e, int host_blocks, const char *dir, int disk_blocks)
{
    size_t bb = 2 * (size_t)e->f.bs * sizeof(int32_t);
    tier_config c = {.block_bytes = bb, .block_size = e->f.bs, .fingerprint = hash_key_of("ts", 2)};
    c.host_bytes = (size_t)host_blocks * bb;
    c.disk_dir = dir;
    c.disk_bytes = (size_t)disk_blocks * tier_file_bytes(bb, e->f.bs);
    c.copy = (tier_copy){ts_tier_out, ts_tier_in, 1, NULL, NULL, NULL, &e->f};
    c.quiet = 1;
    char err[256];
    tier *t = tier_create(&c, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    cr_assert_eq(sched_set_tier(e->sc, t, c.fingerprint), 0);
    return t;
}

/* Waves of requests over 6 prompts of 40 shared tokens (10 blocks) in a pool of 30 blocks: by the
 * time a prompt comes back its prefix was evicted. Every output is checked against the
 * reference; some requests are cancelled, some while their load is in flight. Returns the
 * tokens computed; *st gets the scheduler's counters. */
static int64_t ts_tier_waves(ts_env *e, uint64_t seed, int waves, sched_stats *st)
{
    seq *s[8];
    int32_t p[64];
    for (int w = 0; w < waves; w++) {
        int n = 1 + (int)(ts_mix(seed + (uint64_t)w) % 3);
        for (int i = 0; i < n; i++) {
            uint64_t x = ts_mix(seed * 31 + (uint64_t)(w * 8 + i));
            int which = (int)(x % 6), np = 42 + (int)((x >> 8) % 6);
            ts_prompt(p, 40, 1000 + (uint64_t)which);
            ts_prompt(p + 40, np - 40, x);
            s[i] = ts_seq(p, np, 1 + (int)((x >> 16) % 12), (x >> 24) % 2 ? 0.8f : 0, x);
            cr_assert_eq(sched_add(e->sc, s[i]), 0);
        }
        int cancel = (int)(ts_mix(seed ^ (uint64_t)w) % 5) == 0 ? 0 : -1; /* the first, at once */
        if (cancel == 0) {
            sampling_out *sm;
            ts_step(e, &sm);
            sched_check(e->sc);
            if (s[0]->status != SEQ_FINISHED) sched_release(e->sc, s[0], ENGINE_FINISH_ABORT);
        }
        ts_drain(e);
        for (int i = 0; i < n; i++) {
            if (i != cancel) ts_expect(&e->f, s[i], 0);
            seq_destroy(s[i]);
        }
    }
    sched_get_stats(e->sc, st);
    return st->step_tokens;
}

static void ts_tier_run(int host_blocks, int disk_blocks, uint64_t seed)
{
    char dir[256];
    tu_mkdtemp("sched-tier", dir, sizeof dir);
    printf("sched/tier: seed %llu, host %d, disk %d blocks\n", (unsigned long long)seed, host_blocks, disk_blocks);
    ts_env plain, tiered;
    sched_stats sp, stt;
    ts_env_init(&plain, 30, 4, 32, 1);
    int64_t computed_plain = ts_tier_waves(&plain, seed, 24, &sp);
    ts_env_fini(&plain);
    ts_env_init(&tiered, 30, 4, 32, 1);
    tier *t = ts_tier(&tiered, host_blocks, disk_blocks ? dir : NULL, disk_blocks);
    int64_t computed = ts_tier_waves(&tiered, seed, 24, &stt);
    tier_stats ts;
    tier_get_stats(t, &ts);
    cr_assert_gt(stt.tier_loads, 3, "only %lld loads", (long long)stt.tier_loads);
    cr_assert_eq(stt.tier_failed_blocks, 0);
    cr_assert_gt(stt.prefix_hits, sp.prefix_hits, "tier hits count as cached tokens");
    cr_assert_lt(computed, computed_plain, "the tier saves computation: %lld vs %lld", (long long)computed,
                 (long long)computed_plain);
    uint64_t loads = 0;
    for (int b = 0; b <= SCHED_TIER_BUCKETS; b++) loads += stt.tier_load_hist[b];
    cr_assert_geq(loads, (uint64_t)stt.tier_loads);
    ts_env_fini(&tiered);
    tier_check(t);
    tier_destroy(t);
    tu_rm_rf(dir);
}

Test(sched, tier_loads_back_evicted_prefixes)
{
    ts_tier_run(64, 0, 5);   /* host RAM alone */
    ts_tier_run(0, 64, 6);   /* files alone, through the I/O thread */
    ts_tier_run(12, 64, 7);  /* both, the host tier too small for the working set */
}

Test(sched, tier_warm_restart)
{
    char dir[256];
    tu_mkdtemp("sched-warm", dir, sizeof dir);
    int32_t p[64];
    ts_prompt(p, 60, 77);
    ts_env e;
    ts_env_init(&e, 40, 4, 32, 1);
    tier *t = ts_tier(&e, 0, dir, 64);
    seq *s = ts_seq(p, 50, 4, 0, 1);
    sched_add(e.sc, s);
    ts_drain(&e);
    ts_expect(&e.f, s, 0);
    seq_destroy(s);
    ts_env_fini(&e);
    tier_destroy(t); /* a restart: everything written so far is on disk */

    ts_env_init(&e, 40, 4, 32, 1); /* a new arena: nothing computed */
    t = ts_tier(&e, 0, dir, 64);
    s = ts_seq(p, 60, 4, 0, 2); /* the same 50 tokens and 10 more */
    sched_add(e.sc, s);
    ts_drain(&e);
    ts_expect(&e.f, s, 0);
    sched_stats st;
    sched_get_stats(e.sc, &st);
    /* 12 full blocks were written (the prompt's first 48 tokens), all come back. */
    cr_assert_eq(st.tier_loads, 1);
    cr_assert_eq(st.tier_hit_tokens, 48);
    cr_assert_eq(s->cached_tokens, 48, "cached_tokens counts tier hits: %d", s->cached_tokens);
    seq_destroy(s);
    ts_env_fini(&e);
    tier_destroy(t);
    tu_rm_rf(dir);
}
