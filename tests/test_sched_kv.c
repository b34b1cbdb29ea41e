/*
 * test_sched_kv.c — the scheduler's per-layer-group KV blocks (engine/sched_kv.c): windows that
 * release whole blocks (KV_KEEP_WINDOW, the model's sliding window) and attention sinks + a
 * window (KV_KEEP_SINKS, StreamingLLM), against a brute-force model of what each token sees.
 *
 * The fake model keeps its own arena per group (the token id and position written to every
 * slot). A logit row is a hash of what the token attends to in every group, read back through
 * the batch's block tables with the group's mask: the (token, position) pairs of the entries.
 * The reference computes the same hash from the token list alone with the rules written out
 * directly: all tokens; the last W; or the first S' = ceil(S / bs) × bs tokens and, once token t
 * reaches the window N, the tokens from S' + d·bs on, d = ⌊(t − N) / bs⌋ + 1 blocks dropped.
 * A dropped block still read, a wrong compaction, a slot written in the wrong group, sink
 * shifts that disagree with the positions, or a cache longer than its window fail the run.
 * Workloads are random (printed seeds): block sizes, windows, sinks, several groups, forks,
 * preemption in small pools, cancellations, the prefix cache. Every step ends with
 * sched_check (bp_check of every pool), every test with no block leaked. The steps go through
 * the engine's phases (tests/sched_harness.h) with the fake as the model.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/sched.h"
#include "tests/sched_harness.h"

#define TK_VOCAB 48
#define TK_EOG 2
#define TK_MAXTOK 4096

typedef struct tk_fake {
    int bs, n_groups;
    kv_rule rule[KV_MAX_GROUPS];
    int32_t n_blocks[KV_MAX_GROUPS];
    int32_t *kv_tok[KV_MAX_GROUPS], *kv_pos[KV_MAX_GROUPS]; /* [n_blocks * bs] */
    int max_tokens, max_seqs;
} tk_fake;

static uint64_t tk_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t tk_step(uint64_t h, int32_t tok, int pos)
{
    return tk_mix(h ^ ((uint64_t)(uint32_t)tok * 1000003u) ^ ((uint64_t)(uint32_t)pos << 40));
}

static void tk_logits(uint64_t h, float *out)
{
    for (int v = 0; v < TK_VOCAB; v++)
        out[v] = v < 3 ? -10.0f : (float)(tk_mix(h ^ ((uint64_t)v << 20)) % 1000) / 200.0f;
    if (h % 29 == 0) out[TK_EOG] = 20.0f;
}

/* The first cache entry a query at cache index k sees in a group (its window's start). */
static int tk_lo(const kv_rule *r, int k)
{
    return r->keep == KV_KEEP_WINDOW && k - r->window + 1 > 0 ? k - r->window + 1 : 0;
}

/* Checks group g's view of sequence s and hashes, into h, what its token at cache index k sees. */
static uint64_t tk_attend(const tk_fake *f, const be_batch *b, int g, int s, int k, uint64_t h)
{
    const be_kv *kv = be_batch_kv(b, g);
    const kv_rule *r = &f->rule[g];
    int last = -1;
    for (int j = tk_lo(r, k); j <= k; j++) {
        int32_t blk = kv->block_table[(int64_t)s * kv->bt_stride + j / f->bs];
        cr_assert(blk >= 0 && blk < f->n_blocks[g]);
        int slot = blk * f->bs + j % f->bs;
        cr_assert_gt(f->kv_pos[g][slot], last, "group %d: entry %d holds position %d after %d", g, j,
                     f->kv_pos[g][slot], last);
        last = f->kv_pos[g][slot];
        h = tk_step(h, f->kv_tok[g][slot], last);
    }
    return h;
}

/* The sink view of group g for sequence s, whose first new token is at cache index k0 and
 * position p0: sinks only under KV_KEEP_SINKS once entries were dropped, and then exactly the
 * sink blocks, shifted by the dropped span (the token's position less its cache index). */
static void tk_check_sinks(const tk_fake *f, const be_batch *b, int g, int s, int k0, int p0)
{
    const be_kv *kv = be_batch_kv(b, g);
    const kv_rule *r = &f->rule[g];
    int n_sink = kv->sinks ? kv->sinks[s] : 0;
    if (r->keep == KV_KEEP_SINKS) {
        cr_assert_leq(kv->ctx_len[s], r->window, "a sinks group's cache passed its window");
        int sink_len = kv_sink_blocks(r, f->bs) * f->bs;
        if (p0 != k0) { /* dropped entries (with no sinks, a plain window: nothing to meet) */
            cr_assert_eq(n_sink, sink_len, "sinks %d, expected %d", n_sink, sink_len);
            if (sink_len) cr_assert_eq(kv->sink_shift[s], p0 - k0);
        } else {
            cr_assert_eq(n_sink, 0);
        }
    } else {
        cr_assert_eq(n_sink, 0, "sinks outside a sinks group");
        if (r->keep == KV_KEEP_ALL) cr_assert_eq(p0, k0, "a group that keeps everything dropped");
    }
}

static int tk_run(void *ud, const be_batch *b, float *logits)
{
    tk_fake *f = ud;
    cr_assert_leq(b->n_tokens, f->max_tokens, "token budget exceeded");
    cr_assert_leq(b->n_seqs, f->max_seqs, "sequence cap exceeded");
    cr_assert_eq(b->n_kv, f->n_groups);
    for (int g = 0; g < f->n_groups; g++)
        for (int i = 0; i < b->n_tokens; i++) {
            int32_t slot = be_batch_kv(b, g)->slots[i];
            cr_assert(slot >= 0 && slot < f->n_blocks[g] * f->bs);
            f->kv_tok[g][slot] = b->tokens[i];
            f->kv_pos[g][slot] = b->positions[i];
        }
    int row = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int n_new = b->q_start[s + 1] - b->q_start[s], p0 = b->positions[b->q_start[s]];
        for (int g = 0; g < f->n_groups; g++) {
            const be_kv *kv = be_batch_kv(b, g);
            tk_check_sinks(f, b, g, s, kv->ctx_len[s] - n_new, p0);
        }
        for (int i = 1; i < n_new; i++) cr_assert_eq(b->positions[b->q_start[s] + i], p0 + i);
        while (row < b->n_logits && b->logit_rows[row] < b->q_start[s + 1]) {
            int i = b->logit_rows[row] - b->q_start[s];
            cr_assert_geq(i, 0);
            uint64_t h = (uint64_t)(p0 + i) * 0x9e3779b97f4a7c15ull;
            for (int g = 0; g < f->n_groups; g++)
                h = tk_attend(f, b, g, s, be_batch_kv(b, g)->ctx_len[s] - n_new + i, h);
            tk_logits(h, logits + (size_t)row * TK_VOCAB);
            row++;
        }
    }
    cr_assert_eq(row, b->n_logits);
    return 0;
}

static void tk_copy(void *ud, int group, int32_t src, int32_t dst)
{
    tk_fake *f = ud;
    cr_assert(group >= 0 && group < f->n_groups);
    memcpy(f->kv_tok[group] + dst * f->bs, f->kv_tok[group] + src * f->bs, (size_t)f->bs * sizeof(int32_t));
    memcpy(f->kv_pos[group] + dst * f->bs, f->kv_pos[group] + src * f->bs, (size_t)f->bs * sizeof(int32_t));
}

/* The reference: what token t sees in a group, straight from the rules. */
static uint64_t tk_ref_group(const kv_rule *r, int bs, const int32_t *toks, int t, uint64_t h)
{
    int lo = 0, sink_end = 0;
    if (r->keep == KV_KEEP_WINDOW) {
        lo = t - r->window + 1 > 0 ? t - r->window + 1 : 0;
    } else if (r->keep == KV_KEEP_SINKS && t >= r->window) {
        sink_end = kv_sink_blocks(r, bs) * bs;
        lo = sink_end + ((t - r->window) / bs + 1) * bs;
    }
    for (int j = 0; j < sink_end; j++) h = tk_step(h, toks[j], j);
    for (int j = lo; j <= t; j++) h = tk_step(h, toks[j], j);
    return h;
}

/* The tokens sequence s must produce (sampling as the scheduler does, from the reference's
 * logits); returns their count. */
static int tk_reference(const tk_fake *f, const seq *s, int32_t *out)
{
    static int32_t toks[TK_MAXTOK];
    memcpy(toks, s->tokens, (size_t)s->n_prompt * sizeof *toks);
    int n = s->n_prompt, n_out = 0;
    smp_params p;
    smp_params_default(&p);
    p.temperature = s->sp.temperature;
    p.ignore_eos = s->sp.ignore_eos;
    smp_rng rng;
    smp_rng_key(&rng, s->sp.seed, (uint32_t)s->index);
    int32_t eog = TK_EOG;
    while (n_out < s->max_tokens && n < TK_MAXTOK) {
        uint64_t h = (uint64_t)(n - 1) * 0x9e3779b97f4a7c15ull;
        for (int g = 0; g < f->n_groups; g++) h = tk_ref_group(&f->rule[g], f->bs, toks, n - 1, h);
        float lg[TK_VOCAB];
        tk_logits(h, lg);
        smp_history hist = {toks, s->n_prompt, toks + s->n_prompt, n_out};
        smp_result r;
        smp_sample(&p, &rng, lg, TK_VOCAB, &hist, &eog, 1, &r);
        toks[n++] = r.token;
        out[n_out++] = r.token;
        if (r.token == TK_EOG && !p.ignore_eos) break;
    }
    return n_out;
}

/* What the random test is running, for the failure messages. */
static char tk_what[160];

static void tk_expect(const tk_fake *f, const seq *s)
{
    static int32_t ref[TK_MAXTOK];
    int n = tk_reference(f, s, ref);
    int same = 0;
    while (same < n && same < seq_n_output(s) && s->tokens[s->n_prompt + same] == ref[same]) same++;
    cr_assert(same == n && seq_n_output(s) == n, "%s: choice %d of a %d-token prompt: %d tokens, expected %d; first %d agree",
              tk_what, s->index, s->n_prompt, seq_n_output(s), n, same);
}

typedef struct tk_env {
    tk_fake f;
    sched *sc;
    sched_config c;
    int32_t eog[1];
    sh_step h;     /* drives sc's steps with f as the model */
} tk_env;

/* One step of e's scheduler (sh_step_run). */
static int tk_run_step(tk_env *e, sampling_out **out)
{
    return sh_step_run(&e->h, out);
}

/* A scheduler over groups with the given rules, n_blocks[g] blocks each. */
static void tk_env_init(tk_env *e, int bs, int n_groups, const kv_rule *rules, const int32_t *n_blocks,
                        int max_seqs, int max_tokens, int prefix, int n_ctx)
{
    memset(e, 0, sizeof *e);
    e->f.bs = bs;
    e->f.n_groups = n_groups;
    e->f.max_tokens = max_tokens;
    e->f.max_seqs = max_seqs;
    e->eog[0] = TK_EOG;
    e->c = (sched_config){
        .block_size = bs,
        .n_blocks = n_blocks[0],
        .n_groups = n_groups,
        .max_seqs = max_seqs,
        .max_batch_tokens = max_tokens,
        .schedule = SCHED_FCFS,
        .prefix_cache = prefix,
        .n_ctx = n_ctx,
        .eog_ids = e->eog,
        .n_eog = 1,
    };
    for (int g = 0; g < n_groups; g++) {
        e->f.rule[g] = e->c.rule[g] = rules[g];
        e->f.n_blocks[g] = e->c.group_blocks[g] = n_blocks[g];
        e->f.kv_tok[g] = malloc((size_t)n_blocks[g] * bs * sizeof(int32_t));
        e->f.kv_pos[g] = malloc((size_t)n_blocks[g] * bs * sizeof(int32_t));
        for (int i = 0; i < n_blocks[g] * bs; i++) e->f.kv_tok[g][i] = e->f.kv_pos[g][i] = -1;
    }
    e->sc = sched_create(&e->c);
    cr_assert_not_null(e->sc);
    sh_init(&e->h, e->sc, &e->c, TK_VOCAB, (sh_model){tk_run, tk_copy, &e->f});
}

/* No block leaked: every pool free but for what the prefix cache holds (in a group g ≥ 1 the
 * companions of its blocks, at most one each: a window may have released one), and free after
 * evicting. */
static void tk_env_fini(tk_env *e)
{
    sched_check(e->sc);
    rdx_tree *t = sched_tree(e->sc);
    for (int g = 0; g < e->f.n_groups; g++) {
        block_pool *bp = sched_group_pool(e->sc, g);
        int32_t held = e->f.n_blocks[g] - bp_num_free(bp), cached = t ? rdx_n_blocks(t) : 0;
        cr_assert(g ? held <= cached : held == cached, "group %d leaked blocks: %d held, %d cached", g, held, cached);
    }
    if (t) {
        rdx_evict(t, e->f.n_blocks[0]);
        for (int g = 0; g < e->f.n_groups; g++)
            cr_assert_eq(bp_num_free(sched_group_pool(e->sc, g)), e->f.n_blocks[g], "group %d: companions left", g);
    }
    sh_fini(&e->h);
    sched_destroy(e->sc);
    for (int g = 0; g < e->f.n_groups; g++) {
        free(e->f.kv_tok[g]);
        free(e->f.kv_pos[g]);
    }
}

static seq *tk_seq(const int32_t *prompt, int n_prompt, int max_tokens, float temp, uint64_t seed)
{
    seq *s = seq_create(prompt, n_prompt, max_tokens);
    cr_assert_not_null(s);
    s->sp.temperature = temp;
    s->sp.seed = seed;
    s->sp.has_seed = 1;
    s->sp.ignore_eos = 0;
    smp_rng_seed(&s->rng, seed);
    return s;
}

static void tk_prompt(int32_t *p, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) p[i] = 3 + (int32_t)(tk_mix(seed * 7919 + (uint64_t)i) % (TK_VOCAB - 3));
}

/* One stream past the context at constant memory: 4 sinks (one block of 4) + a window of 32,
 * a context limit of 24 that the window lifts, blocks in use bounded by the window. */
Test(sched_kv, sinks_window_streams_past_the_context)
{
    kv_rule r = {KV_KEEP_SINKS, 32, 4};
    int32_t nb = 64;
    tk_env e;
    tk_env_init(&e, 4, 1, &r, &nb, 2, 64, 0, 24);
    int32_t p[40];
    tk_prompt(p, 40, 5); /* a prompt longer than the window: prefilled in window-sized chunks */
    seq *s = tk_seq(p, 40, 300, 0.7f, 11);
    s->sp.ignore_eos = 1;
    cr_assert_eq(sched_add(e.sc, s), 0);
    int32_t peak = 0;
    for (;;) {
        sampling_out *sm;
        int n = tk_run_step(&e, &sm);
        sched_check(e.sc);
        if (n == -EAGAIN) break;
        cr_assert_geq(n, 0);
        int32_t used = nb - bp_num_free(sched_pool(e.sc));
        peak = used > peak ? used : peak;
    }
    cr_assert_eq(s->finish, ENGINE_FINISH_LENGTH);
    cr_assert_eq(s->n_tokens, 340, "the window lifts the context limit of 24: max_tokens alone ends it");
    cr_assert_leq(peak, 32 / 4, "blocks in use: at most one window (%d)", peak);
    tk_expect(&e.f, s);
    seq_destroy(s);
    tk_env_fini(&e);
}

/* Rules a window cannot keep are refused: sinks filling the whole window. */
Test(sched_kv, window_must_hold_sinks_and_a_block)
{
    kv_rule r = {KV_KEEP_SINKS, 8, 5}; /* 5 sinks round up to 8 with blocks of 4: no room */
    int32_t nb = 16;
    sched_config c = {.block_size = 4, .n_blocks = nb, .max_seqs = 1, .max_batch_tokens = 8, .n_ctx = 64,
                      .n_groups = 1};
    c.rule[0] = r;
    cr_assert_null(sched_create(&c));
    c.rule[0].window = 12;
    sched *sc = sched_create(&c);
    cr_assert_not_null(sc);
    sched_destroy(sc);
}

/* The prefix cache shares only blocks computed before a window moved: a second request with the
 * same long prompt reuses at most the first window, and both match the reference. */
Test(sched_kv, prefix_cache_stops_where_the_window_moved)
{
    kv_rule r = {KV_KEEP_SINKS, 16, 4};
    int32_t nb = 64;
    tk_env e;
    tk_env_init(&e, 4, 1, &r, &nb, 2, 64, 1, 512);
    int32_t p[60];
    tk_prompt(p, 60, 9);
    seq *a = tk_seq(p, 60, 5, 0, 1), *b = tk_seq(p, 60, 5, 0, 1);
    sched_add(e.sc, a);
    for (;;) {
        sampling_out *sm;
        int n = tk_run_step(&e, &sm);
        sched_check(e.sc);
        if (n == -EAGAIN) break;
    }
    cr_assert_leq(rdx_n_blocks(sched_tree(e.sc)), 16 / 4, "only blocks from before the window moved are cached");
    sched_add(e.sc, b);
    for (;;) {
        sampling_out *sm;
        int n = tk_run_step(&e, &sm);
        sched_check(e.sc);
        if (n == -EAGAIN) break;
    }
    cr_assert_gt(b->cached_tokens, 0, "the first window is shared");
    cr_assert_leq(b->cached_tokens, 16);
    tk_expect(&e.f, a);
    tk_expect(&e.f, b);
    for (int i = 0; i < 5; i++) cr_assert_eq(a->tokens[60 + i], b->tokens[60 + i]);
    seq_destroy(a);
    seq_destroy(b);
    tk_env_fini(&e);
}

/* A random rule for group g of a random geometry. */
static kv_rule tk_random_rule(uint64_t x, int bs, int g)
{
    kv_rule r = {0, 0, 0};
    int kind = g == 0 ? (int)(x % 3) : 1 + (int)(x % 2);
    if (kind == 1) {
        r.keep = KV_KEEP_WINDOW;
        r.window = 1 + (int)((x >> 8) % 40);
    } else if (kind == 2) {
        r.keep = KV_KEEP_SINKS;
        r.sinks = (int)((x >> 16) % 9);
        r.window = (kv_sink_blocks(&r, bs) + 1 + (int)((x >> 24) % 8)) * bs + (int)((x >> 32) % bs);
    }
    return r;
}

/* One random round's geometry: block size, groups, rules and pool sizes. */
typedef struct tk_round {
    int bs, ng, max_seqs, budget, prefix, bounded, n_prompts;
    kv_rule rules[KV_MAX_GROUPS];
    int32_t nb[KV_MAX_GROUPS];
} tk_round;

/* What a round did, summed over rounds for the tests' own checks. */
typedef struct tk_tally {
    int64_t cached, evictions, preemptions;
} tk_tally;

/* Runs round `round` of geometry q with seed rs: n prompts from a few shared prefixes, random
 * forks and cancellations, sched_check after every step, every surviving choice against the
 * reference, no block leaked. */
static void tk_round_run(const tk_round *q, int round, uint64_t rs, tk_tally *tally)
{
    int o = snprintf(tk_what, sizeof tk_what, "round %d: block %d, prefix %d, seqs %d, budget %d;", round, q->bs,
                     q->prefix, q->max_seqs, q->budget);
    for (int g = 0; g < q->ng; g++)
        o += snprintf(tk_what + o, sizeof tk_what - (size_t)o, " group %d keep %d window %d sinks %d blocks %d", g,
                      q->rules[g].keep, q->rules[g].window, q->rules[g].sinks, q->nb[g]);
    tk_env e;
    tk_env_init(&e, q->bs, q->ng, q->rules, q->nb, q->max_seqs, q->budget, q->prefix, 200);
    int n = 3 + (int)((rs >> 30) % 8);
    seq *s[12], *kids[12][3];
    memset(kids, 0, sizeof kids);
    int cancelled[12] = {0};
    int32_t p[120];
    for (int i = 0; i < n; i++) {
        uint64_t x = tk_mix(rs ^ (uint64_t)(i + 1) * 0x51);
        int np = 1 + (int)(x % 100), mt = 1 + (int)((x >> 8) % 60);
        if (q->bounded && np + mt > 200) mt = 200 - np;
        tk_prompt(p, np, rs % 3 + (uint64_t)(i % q->n_prompts)); /* shared prefixes */
        s[i] = tk_seq(p, np, mt, (x >> 20) % 2 ? 0.8f : 0, x);
        s[i]->owner = &kids[i];
        int nc = 1 + (int)((x >> 32) % 3);
        s[i]->n_choices = nc <= q->max_seqs ? nc : 1;
        kids[i][0] = s[i];
        cr_assert_eq(sched_add(e.sc, s[i]), 0);
    }
    for (int step = 0;; step++) {
        cr_assert_lt(step, 100000);
        sampling_out *sm;
        int k = tk_run_step(&e, &sm);
        sched_check(e.sc);
        if (k == -EAGAIN) {
            cr_assert_eq(sched_num_running(e.sc) + sched_num_waiting(e.sc), 0, "%s: stalled with %d running, %d waiting",
                         tk_what, sched_num_running(e.sc), sched_num_waiting(e.sc));
            break;
        }
        cr_assert_geq(k, 0, "%s: step failed %d", tk_what, k);
        for (int j = 0; j < k; j++) {
            seq *(*ks)[3] = sm[j].s->owner;
            (*ks)[sm[j].s->index] = sm[j].s;
        }
        int victim = (int)(tk_mix(rs ^ (uint64_t)step) % 200);
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
            if (!cancelled[i]) tk_expect(&e.f, kids[i][c]);
            tally->cached += kids[i][c]->cached_tokens;
            seq_destroy(kids[i][c]);
        }
    sched_stats st;
    sched_get_stats(e.sc, &st);
    tally->evictions += st.evictions;
    tally->preemptions += st.preemptions;
    tk_env_fini(&e);
}

/* Pool sizes for q: one sequence at its largest in every group, plus a random margin (so small
 * pools preempt, and the prefix cache's companions have to be evicted). */
static void tk_round_pools(tk_round *q, uint64_t rs, int margin)
{
    for (int g = 0; g < q->ng; g++) {
        kv_geom geo = kv_geom_make(1, 1, 1, q->bs, KV_F16);
        geo.n_groups = q->ng;
        geo.rule[g] = q->rules[g];
        q->nb[g] = (int32_t)kv_group_seq_blocks(&geo, g, 200, q->budget) + 1 + (int32_t)((rs >> (20 + g)) % margin);
    }
}

/* The replay hook of the random tests: KVSERVE_TEST_ROUND=N runs round N alone. */
static void tk_rounds(int *from, int *to, int n)
{
    const char *only = getenv("KVSERVE_TEST_ROUND");
    *from = only ? atoi(only) : 0;
    *to = only ? *from + 1 : n;
}

/* Random workloads: block sizes 1 .. 8, one to three groups of random rules, prompts up to three
 * windows long, forks, small pools (preemption), cancellations, the prefix cache (its companions
 * in every group, evicted under any group's pressure). */
Test(sched_kv, random_windows_against_brute_force)
{
    uint64_t seed0 = 0x5eed17ull;
    printf("sched_kv/random_windows_against_brute_force: seed %#llx\n", (unsigned long long)seed0);
    int from, to;
    tk_rounds(&from, &to, 150);
    tk_tally tally = {0};
    for (int round = from; round < to; round++) {
        uint64_t rs = tk_mix(seed0 + (uint64_t)round);
        tk_round q = {.bs = 1 + (int)(rs % 8), .ng = 1 + (int)((rs >> 4) % 3), .n_prompts = 2};
        q.max_seqs = 1 + (int)((rs >> 8) % 6);
        q.budget = q.max_seqs + 4 + (int)((rs >> 12) % 40);
        for (int g = 0; g < q.ng; g++) {
            q.rules[g] = tk_random_rule(tk_mix(rs + (uint64_t)g * 101), q.bs, g);
            q.bounded |= q.rules[g].keep == KV_KEEP_ALL;
        }
        tk_round_pools(&q, rs, 40);
        q.prefix = round & 1;
        tk_round_run(&q, round, rs, &tally);
    }
}

/* The prefix cache of a model with sliding-window layers: group 0 keeps everything, one or two
 * windowed groups of different sizes, small blocks, tight windowed pools (the companions the
 * cache holds there must be evicted while group 0 may still have room), prompts from a few
 * shared prefixes, forks, preemption and cancellations; outputs against the brute-force
 * reference, and over the rounds the cache must have served tokens and evicted. */
Test(sched_kv, random_layer_groups_share_prefixes)
{
    uint64_t seed0 = 0x6a0c5ull;
    printf("sched_kv/random_layer_groups_share_prefixes: seed %#llx\n", (unsigned long long)seed0);
    int from, to;
    tk_rounds(&from, &to, 80);
    tk_tally tally = {0};
    for (int round = from; round < to; round++) {
        uint64_t rs = tk_mix(seed0 + (uint64_t)round);
        tk_round q = {.bs = 1 + (int)(rs % 4), .ng = 2 + (int)((rs >> 4) % 2), .prefix = 1, .bounded = 1};
        q.n_prompts = 1 + (int)((rs >> 6) % 3);
        q.max_seqs = 1 + (int)((rs >> 8) % 5);
        q.budget = q.max_seqs + 4 + (int)((rs >> 12) % 40);
        q.rules[0] = (kv_rule){KV_KEEP_ALL, 0, 0};
        for (int g = 1; g < q.ng; g++) /* distinct sizes, as the engine makes one group per size */
            q.rules[g] = (kv_rule){KV_KEEP_WINDOW, 4 + (int)((rs >> (16 + 6 * g)) % 24) + 30 * (g - 1), 0};
        tk_round_pools(&q, rs, 8);
        if ((rs >> 40) % 2) q.nb[0] += 400; /* group 0 roomy: only the windows' pools run short */
        tk_round_run(&q, round, rs, &tally);
    }
    printf("sched_kv/random_layer_groups_share_prefixes: %lld cached tokens, %lld evictions, %lld preemptions\n",
           (long long)tally.cached, (long long)tally.evictions, (long long)tally.preemptions);
    if (from == 0 && to == 80) {
        cr_assert_gt(tally.cached, 0, "the cache never served a prefix");
        cr_assert_gt(tally.evictions, 0, "the cache was never under pressure");
        cr_assert_gt(tally.preemptions, 0, "no preemption");
    }
}
