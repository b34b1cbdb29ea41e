/*
 * sched.c — continuous batching (see sched.h for the step's three phases).
 *
 * Invariants kept between steps:
 *   - running[] is in admission order; waiting[] has preempted sequences first, then arrivals;
 *   - a RUNNING sequence holds, in every layer group, exactly ceil(cache length / bs) blocks
 *     (sched_kv.c), a WAITING one none;
 *   - in every group, Σ refcounts = Σ running n_blocks + the tree's references (sched_check): in
 *     group 0 the blocks it indexes (and the tier's loads'), in a group g ≥ 1 their companions;
 *   - only full blocks whose K/V is computed enter the tree, so a partial block is shared only
 *     between the children of an n > 1 fork, and the first writer copies it (copy-on-write).
 *
 * Prefix sharing: admission takes the longest cached prefix (at most n_tokens - 1 tokens, so
 * the last token is computed and yields logits); a waiting request whose next block is being
 * prefilled right now by a running sequence is held back for this step (in-batch
 * deduplication); a prefilling sequence re-matches before each chunk to pick up blocks that
 * others finished meanwhile.
 */
#include "engine/sched.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/batch.h"
#include "engine/finish.h"
#include "engine/sched_internal.h"

/* lpm looks up the cached prefix of at most this many waiting sequences per step. */
#define SCHED_LPM_WINDOW 256

/* ---- lists ---------------------------------------------------------------------------- */

static int sched__grow(seq ***arr, int *cap, int need)
{
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    seq **a = realloc(*arr, (size_t)c * sizeof *a);
    if (!a) return -ENOMEM;
    *arr = a;
    *cap = c;
    return 0;
}

static void sched__remove(seq **arr, int *n, seq *s)
{
    for (int i = 0; i < *n; i++)
        if (arr[i] == s) {
            memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
            (*n)--;
            return;
        }
    assert(!"sequence not in list");
}

/* A sinks rule must hold its sink blocks and one more; a window must be positive. */
static int sched__rules_ok(const sched_config *c, int ng)
{
    for (int g = 0; g < ng; g++) {
        const kv_rule *r = &c->rule[g];
        if (r->keep == KV_KEEP_SINKS && (r->sinks < 0 || r->window < (kv_sink_blocks(r, c->block_size) + 1) * c->block_size))
            return 0;
        if (r->keep == KV_KEEP_WINDOW && r->window < 1) return 0;
    }
    return 1;
}

sched *sched_create(const sched_config *c, const sched_runner *r)
{
    int ng = c->n_groups > 1 ? c->n_groups : 1;
    if (ng > KV_MAX_GROUPS || !sched__rules_ok(c, ng)) return NULL;
    sched *sc = calloc(1, sizeof *sc);
    if (!sc) return NULL;
    sc->c = *c;
    if (sc->c.lpm_aging_steps <= 0) sc->c.lpm_aging_steps = 64;
    sc->r = *r;
    sc->n_groups = ng;
    /* Only sinks + a window lift the context limit (a model's own windows do not). */
    int all = 0, sinks = 0;
    for (int g = 0; g < ng; g++) {
        all |= c->rule[g].keep == KV_KEEP_ALL;
        sinks |= c->rule[g].keep == KV_KEEP_SINKS;
    }
    sc->ctx_limit = sinks && !all ? INT_MAX : c->n_ctx;
    sc->max_blocks = (c->n_ctx + c->block_size - 1) / c->block_size + 1;
    int ok = 1;
    for (int g = 0; g < ng && ok; g++) ok = (sc->bp[g] = bp_create(g ? c->group_blocks[g] : c->n_blocks)) != NULL;
    if (c->prefix_cache && ok) ok = (sc->tree = rdx_create(sc->bp[0], c->block_size)) != NULL;
    sc->plan = calloc((size_t)c->max_seqs, sizeof *sc->plan);
    sc->logits = malloc((size_t)sched_max_logits(c->max_seqs) * (size_t)c->n_vocab * sizeof(float));
    sc->scratch = malloc((size_t)c->n_vocab * sizeof(float));
    sc->match_buf = malloc((size_t)sc->max_blocks * sizeof(int32_t));
    if (ok) ok = !sched__comp_init(sc);
    if (!ok || !sc->plan || !sc->logits || !sc->scratch || !sc->match_buf ||
        batch_init(&sc->bb, c->max_batch_tokens, c->max_seqs, sched_max_logits(c->max_seqs))) {
        sched_destroy(sc);
        return NULL;
    }
    return sc;
}

void sched_destroy(sched *sc)
{
    if (!sc) return;
    assert(sc->n_running == 0 && sc->n_waiting == 0);
    sched__tier_destroy(sc);
    if (sc->tree) rdx_destroy(sc->tree); /* its hooks drop the companions' references */
    sched__comp_fini(sc);
    for (int g = 0; g < sc->n_groups; g++) bp_destroy(sc->bp[g]);
    batch_fini(&sc->bb);
    free(sc->running);
    free(sc->waiting);
    free(sc->plan);
    free(sc->logits);
    free(sc->scratch);
    free(sc->mask);
    free(sc->samples);
    free(sc->match_buf);
    free(sc->lpm_len);
    free(sc);
}

int sched_add(sched *sc, seq *s)
{
    if (s->n_choices > sc->c.max_seqs) return -EINVAL;
    if (sched__grow(&sc->waiting, &sc->cap_waiting, sc->n_waiting + 1)) return -ENOMEM;
    s->status = SEQ_WAITING;
    sc->waiting[sc->n_waiting++] = s;
    return 0;
}

/* ---- planning ------------------------------------------------------------------------- */

/* Returns s to the front of the waiting queue without its blocks; it recomputes later. */
static void sched__preempt(sched *sc, seq *s, int *budget)
{
    for (int i = 0; i < sc->n_plan; i++)
        if (sc->plan[i].s == s) {
            *budget += sc->plan[i].n_new;
            memmove(sc->plan + i, sc->plan + i + 1, (size_t)(sc->n_plan - i - 1) * sizeof *sc->plan);
            sc->n_plan--;
            break;
        }
    sched__free_blocks(sc, s);
    sched__remove(sc->running, &sc->n_running, s);
    int rc = sched__grow(&sc->waiting, &sc->cap_waiting, sc->n_waiting + 1);
    assert(!rc); /* the queue had room for s when it was admitted */
    (void)rc;
    memmove(sc->waiting + 1, sc->waiting, (size_t)sc->n_waiting * sizeof *sc->waiting);
    sc->waiting[0] = s;
    sc->n_waiting++;
    s->status = SEQ_WAITING;
    s->n_preemptions++;
    sc->st.preemptions++;
}

/* Caps n_new so that s's prompt log-prob rows fit the step's remaining ones; returns the new
 * n_new (≤ 0: s cannot progress this step) and sets the rows (offsets into the new tokens). */
static int sched__lp_fit(const sched *sc, const seq *s, int n_new, int *lp_from, int *lp_rows)
{
    *lp_from = *lp_rows = 0;
    if (!seq_is_scoring(s)) return n_new;
    /* Position p's logits score prompt token p + 1: positions lo .. hi - 1 still need rows. */
    int c = s->n_computed, lo = s->plp_next - 1 > c ? s->plp_next - 1 : c, hi = s->n_prompt - 1;
    if (lo >= hi || lo >= c + n_new) return n_new;
    if (c + n_new > lo + sc->lp_left) n_new = lo + sc->lp_left - c;
    int end = c + n_new < hi ? c + n_new : hi;
    *lp_from = lo - c;
    *lp_rows = end > lo ? end - lo : 0;
    return n_new;
}

/* Appends s's entry for this step and takes its tokens and prompt log-prob rows from the step. */
static void sched__push_plan(sched *sc, seq *s, int n_new, int lp_from, int lp_rows, int *budget)
{
    assert(sc->n_plan < sc->c.max_seqs);
    sc->plan[sc->n_plan++] = (batch_entry){s, n_new, s->n_computed + n_new == s->n_tokens, lp_from, lp_rows};
    *budget -= n_new;
    sc->lp_left -= lp_rows;
}

/* Plans n_new tokens of running s, preempting the most recently admitted others when blocks run
 * out. Returns 1 planned (or nothing to plan for s this step), 0 when s itself was preempted,
 * or -ENOMEM. */
static int sched__plan_running(sched *sc, seq *s, int n_new, int *budget)
{
    int lp_from, lp_rows;
    sched__drop(sc, s);
    n_new = sched__window_fit(sc, s, n_new);
    n_new = sched__lp_fit(sc, s, n_new, &lp_from, &lp_rows);
    if (n_new <= 0) return 1;
    for (;;) {
        int rc = sched__reserve(sc, s, n_new);
        if (!rc) break;
        if (rc != -ENOSPC) return rc;
        seq *victim = sc->running[sc->n_running - 1];
        if (victim == s && sc->n_running > 1) victim = sc->running[sc->n_running - 2];
        sched__preempt(sc, victim, budget);
        if (victim == s) return 0;
    }
    sched__push_plan(sc, s, n_new, lp_from, lp_rows, budget);
    return 1;
}

/* ---- admission ------------------------------------------------------------------------ */

/* 1 when a running sequence is about to compute a full block that c could share beyond the
 * matched prefix: c waits for it instead of computing it twice. */
static int sched__dedup_hold(const sched *sc, const seq *c, int matched)
{
    int bs = sc->c.block_size, lim = c->n_tokens - 1;
    for (int i = 0; i < sc->n_running; i++) {
        const seq *r = sc->running[i];
        int n = lim < r->n_tokens ? lim : r->n_tokens;
        if (n < matched + bs) continue;
        int l = matched;
        while (l < n && c->tokens[l] == r->tokens[l]) l++;
        int full = l / bs * bs;
        if (full >= matched + bs && r->n_computed < full) return 1;
    }
    return 0;
}

/* Index of the waiting sequence to admit next among those not held back, or -1. FCFS takes the
 * first; lpm takes a preempted or aged one first, else the longest cached prefix. */
static int sched__pick(const sched *sc, const char *held)
{
    int best = -1;
    int lpm = sc->c.schedule == SCHED_LPM && sc->tree;
    for (int i = 0; i < sc->n_waiting; i++) {
        if (held[i]) continue;
        const seq *s = sc->waiting[i];
        if (!lpm || s->n_preemptions || s->wait_steps >= sc->c.lpm_aging_steps) return i;
        if (best < 0 || sc->lpm_len[i] > sc->lpm_len[best]) best = i;
    }
    return best;
}

/* lpm: the cached prefix length of every waiting sequence (looked up once per step). */
static int sched__lpm_lengths(sched *sc)
{
    if (sc->c.schedule != SCHED_LPM || !sc->tree) return 0;
    int *l = realloc(sc->lpm_len, (size_t)(sc->n_waiting + 1) * sizeof *l);
    if (!l) return -ENOMEM;
    sc->lpm_len = l;
    for (int i = 0; i < sc->n_waiting; i++) {
        const seq *s = sc->waiting[i];
        if (i >= SCHED_LPM_WINDOW) { /* beyond the window only aging admits */
            l[i] = -1;
            continue;
        }
        l[i] = sched__match(sc, s);
        sched__match_drop(sc, l[i]);
    }
    return 0;
}

/* Tries to admit waiting[i] with a first chunk. 1 admitted, 0 not now (no blocks), <0 error. */
static int sched__admit(sched *sc, int i, int *budget, char *held)
{
    seq *c = sc->waiting[i];
    int matched = 0;
    if (sc->tree && !seq_is_scoring(c)) {
        matched = sched__match(sc, c);
        if (sched__dedup_hold(sc, c, matched)) {
            sched__match_drop(sc, matched);
            held[i] = 1;
            return 1;
        }
        if (sched__tier_admit(sc, c, matched)) { /* its next blocks come back from the tier first */
            held[i] = 1;
            return 1;
        }
        matched = sched__adopt_prefix(sc, c, matched);
        if (matched < 0) return matched;
    }
    c->n_computed = matched;
    sched__drop(sc, c);
    int n_new = c->n_tokens - matched < *budget ? c->n_tokens - matched : *budget, lp_from, lp_rows;
    n_new = sched__window_fit(sc, c, n_new);
    n_new = sched__lp_fit(sc, c, n_new, &lp_from, &lp_rows);
    if (n_new <= 0 || sched__grow(&sc->running, &sc->cap_running, sc->n_running + 1) ||
        sched__reserve(sc, c, n_new)) {
        sched__release_blocks(sc, c);
        return 0;
    }
    if (!c->first_scheduled_us) {
        c->first_scheduled_us = clk_now_us();
        c->cached_tokens = matched < c->n_prompt ? matched : c->n_prompt;
        if (sc->tree) {
            sc->st.prefix_queries += c->n_prompt;
            sc->st.prefix_hits += c->cached_tokens;
        }
    }
    memmove(sc->waiting + i, sc->waiting + i + 1, (size_t)(sc->n_waiting - i - 1) * sizeof(seq *));
    memmove(held + i, held + i + 1, (size_t)(sc->n_waiting - i - 1));
    if (sc->c.schedule == SCHED_LPM && sc->tree)
        memmove(sc->lpm_len + i, sc->lpm_len + i + 1, (size_t)(sc->n_waiting - i - 1) * sizeof(int));
    sc->n_waiting--;
    sc->running[sc->n_running++] = c; /* room was made before the blocks were taken */
    c->status = SEQ_RUNNING;
    c->admit_order = ++sc->admit_counter;
    sched__push_plan(sc, c, n_new, lp_from, lp_rows, budget);
    return 1;
}

/* ---- schedule ------------------------------------------------------------------------- */

static int sched__schedule(sched *sc)
{
    int budget = sc->c.max_batch_tokens;
    sc->n_plan = 0;
    sc->lp_left = SCHED_PROMPT_LOGIT_ROWS;
    /* Pass 0: running decodes; pass 1: running prefill chunks. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < sc->n_running && budget > 0;) {
            seq *s = sc->running[i];
            int planned = 0;
            for (int k = 0; k < sc->n_plan; k++) planned |= sc->plan[k].s == s;
            if (pass == 1 && !planned) sched__rematch(sc, s);
            int rem = s->n_tokens - s->n_computed;
            if (planned || (pass == 0) != (rem == 1)) {
                i++;
                continue;
            }
            int rc = sched__plan_running(sc, s, rem < budget ? rem : budget, &budget);
            if (rc < 0) return rc;
            if (rc) i++; /* else s left running[]: the same i is the next sequence */
        }
    /* Admissions. */
    if (!sc->n_waiting) return 0;
    int rc = sched__lpm_lengths(sc);
    if (rc) return rc;
    char held[sc->n_waiting];
    memset(held, 0, sizeof held);
    while (budget > 0 && sc->n_waiting) {
        /* On a compute-bound backend a step's time grows with its prefill tokens: once they
         * saturate it, another prompt in the same step only delays every first token in it. */
        int prefill = 0;
        for (int k = 0; k < sc->n_plan; k++) prefill += sc->plan[k].n_new > 1 ? sc->plan[k].n_new : 0;
        if (sc->c.prefill_admit_tokens > 0 && prefill >= sc->c.prefill_admit_tokens) break;
        int i = sched__pick(sc, held);
        if (i < 0) break;
        int load = 0; /* an unforked n > 1 request counts as its n choices */
        for (int k = 0; k < sc->n_running; k++) load += sc->running[k]->n_choices;
        if (load + sc->waiting[i]->n_choices > sc->c.max_seqs) break;
        if (sc->n_plan == sc->c.max_seqs) break;
        rc = sched__admit(sc, i, &budget, held);
        if (rc < 0) return rc;
        if (!rc) break;
    }
    return 0;
}

/* ---- commit --------------------------------------------------------------------------- */

static int sched__add_sample(sched *sc, int *n, seq *s, const smp_result *r, int kind, int pos)
{
    if (*n == sc->cap_samples) {
        int c = sc->cap_samples ? sc->cap_samples * 2 : 64;
        sched_sample *a = realloc(sc->samples, (size_t)c * sizeof *a);
        if (!a) return -ENOMEM;
        sc->samples = a;
        sc->cap_samples = c;
    }
    sc->samples[(*n)++] = (sched_sample){s, *r, kind, pos};
    return 0;
}

/* The grammar's mask for s's next token into sc->mask; returns the allowed count or -ENOMEM. */
static int sched__mask(sched *sc, seq *s)
{
    if (!sc->mask && !(sc->mask = malloc(GR_MASK_WORDS(sc->c.n_vocab) * sizeof *sc->mask))) return -ENOMEM;
    int64_t t0 = clk_now_us();
    int n = gr_matcher_fill_mask(s->gm, sc->mask);
    sc->st.grammar_masks++;
    sc->st.grammar_mask_us += clk_now_us() - t0;
    return n;
}

/* Ends s without a token (its grammar allows none, or rejected what was drawn). */
static int sched__halt(sched *sc, seq *s, int finish, int *n_out)
{
    smp_result none = {0};
    s->finish = finish;
    return sched__add_sample(sc, n_out, s, &none, SCHED_HALT, 0);
}

/* Samples one token for s from a logits row (under its grammar's mask when constrained) and
 * applies the stop rules. */
static int sched__sample(sched *sc, seq *s, const float *row, int *n_out)
{
    smp_result r;
    memcpy(sc->scratch, row, (size_t)sc->c.n_vocab * sizeof(float));
    smp_history h = {s->tokens, s->n_prompt, s->tokens + s->n_prompt, seq_n_output(s)};
    const uint32_t *allow = NULL;
    if (s->gm) {
        int n = sched__mask(sc, s);
        if (n < 0) return n;
        if (n == 0)
            return sched__halt(sc, s, gr_matcher_is_accepting(s->gm) ? ENGINE_FINISH_STOP : ENGINE_FINISH_LENGTH, n_out);
        allow = sc->mask;
    }
    smp_sample_masked(&s->sp, &s->rng, sc->scratch, sc->c.n_vocab, &h, sc->c.eog_ids, sc->c.n_eog, allow, &r);
    if (s->gm && gr_matcher_accept(s->gm, r.token)) return sched__halt(sc, s, ENGINE_FINISH_ERROR, n_out);
    if (seq_append(s, r.token)) return -ENOMEM;
    s->cum_logprob += r.logprob;
    if (!s->first_token_us) s->first_token_us = clk_now_us();
    sc->st.generated++;
    int eog = 0, stop = 0;
    for (int k = 0; k < sc->c.n_eog; k++) eog |= sc->c.eog_ids[k] == r.token;
    for (int k = 0; k < s->sp.n_stop_ids; k++) stop |= s->sp.stop_ids[k] == r.token;
    if (eog && !s->sp.ignore_eos) {
        s->finish = ENGINE_FINISH_STOP;
    } else if (stop) { /* stop_token_ids stop even with ignore_eos, as in vLLM */
        s->finish = ENGINE_FINISH_STOP;
        s->stop_token = r.token;
    } else if (seq_n_output(s) >= s->max_tokens || s->n_tokens >= sc->ctx_limit) {
        s->finish = ENGINE_FINISH_LENGTH;
    }
    return sched__add_sample(sc, n_out, s, &r, SCHED_TOKEN, 0);
}

/* Reports prompt token j of s scored by logit row `row` (the logits at position j - 1), after
 * token 0 (which has no log-prob: NaN) when it is still unreported. */
static int sched__score(sched *sc, seq *s, int j, const float *row, int *n_out)
{
    smp_result r = {0};
    if (s->plp_next == 0) {
        r.token = s->tokens[0];
        r.logprob = NAN;
        int rc = sched__add_sample(sc, n_out, s, &r, SCHED_PROMPT, 0);
        if (rc) return rc;
        s->plp_next = 1;
    }
    if (j == 0) return 0;
    smp_score(row, sc->c.n_vocab, s->tokens[j], s->plp_top, &r);
    s->plp_next = j + 1;
    return sched__add_sample(sc, n_out, s, &r, SCHED_PROMPT, j);
}

/* n > 1: s becomes choice 0 and n-1 children share its blocks; each samples from the row. */
static int sched__fork(sched *sc, seq *s, const float *row, int *n_out)
{
    int n = s->n_choices;
    s->n_choices = 1;
    if (sched__grow(&sc->running, &sc->cap_running, sc->n_running + n)) return -ENOMEM;
    seq *kids[n];
    kids[0] = s;
    for (int i = 1; i < n; i++) {
        seq *c = seq_clone(s);
        if (!c || sched__share_blocks(sc, s, c)) {
            seq_destroy(c);
            return -ENOMEM;
        }
        c->index = s->index + i;
        smp_rng_seed(&c->rng, s->sp.seed + (uint64_t)c->index);
        c->admit_order = ++sc->admit_counter;
        sc->running[sc->n_running++] = c;
        kids[i] = c;
    }
    for (int i = 0; i < n; i++) {
        int rc = sched__sample(sc, kids[i], row, n_out);
        if (rc) return rc;
    }
    return 0;
}

static int sched__commit(sched *sc, int *n_out)
{
    int row = 0, rc;
    size_t nv = (size_t)sc->c.n_vocab;
    for (int i = 0; i < sc->n_plan; i++) {
        batch_entry *e = &sc->plan[i];
        seq *s = e->s;
        int c0 = s->n_computed;
        s->n_computed += e->n_new;
        sched__insert(sc, s);
        for (int k = 0; k < e->lp_rows; k++)
            if ((rc = sched__score(sc, s, c0 + e->lp_from + k + 1, sc->logits + (size_t)row++ * nv, n_out)))
                return rc;
        if (s->prompt_logprobs && s->plp_next == 0 && s->n_computed >= s->n_prompt &&
            (rc = sched__score(sc, s, 0, NULL, n_out))) /* a one-token prompt */
            return rc;
        if (!e->samples) continue;
        const float *lr = sc->logits + (size_t)row++ * nv;
        if (s->max_tokens == 0) { /* only scored: done without a token */
            s->finish = ENGINE_FINISH_LENGTH;
            smp_result none = {0};
            if ((rc = sched__add_sample(sc, n_out, s, &none, SCHED_END, 0))) return rc;
            continue;
        }
        rc = s->n_choices > 1 ? sched__fork(sc, s, lr, n_out) : sched__sample(sc, s, lr, n_out);
        if (rc) return rc;
    }
    /* Release what finished (children of a fork appear after their parent). */
    for (int i = 0; i < *n_out; i++) {
        seq *s = sc->samples[i].s;
        if (s->finish && s->status == SEQ_RUNNING) sched_release(sc, s, s->finish);
    }
    return 0;
}

int sched_step(sched *sc, sched_sample **out)
{
    *out = NULL;
    sched__tier_poll(sc);
    for (int i = 0; i < sc->n_waiting; i++) sc->waiting[i]->wait_steps++;
    int rc = sched__schedule(sc);
    if (rc) return rc;
    if (!sc->n_plan) return -EAGAIN;
    rc = batch_build(&sc->bb, sc->plan, sc->n_plan, sc->c.block_size, sc->n_groups, sc->c.rule);
    if (rc) return rc;
    rc = sc->r.run(sc->r.ud, &sc->bb.b, sc->logits);
    if (rc) return rc;
    sc->st.steps++;
    sc->st.step_tokens += sc->bb.b.n_tokens;
    int n = 0;
    rc = sched__commit(sc, &n);
    if (rc) return rc;
    *out = sc->samples;
    return n;
}

void sched_release(sched *sc, seq *s, int finish)
{
    if (s->status == SEQ_FINISHED) return;
    sched__tier_release(sc, s);
    if (s->status == SEQ_RUNNING) {
        sched__free_blocks(sc, s);
        sched__remove(sc->running, &sc->n_running, s);
    } else {
        sched__remove(sc->waiting, &sc->n_waiting, s);
    }
    s->status = SEQ_FINISHED;
    s->finish = finish;
    s->finish_us = clk_now_us();
}

/* ---- introspection -------------------------------------------------------------------- */

int sched_num_running(const sched *sc)
{
    return sc->n_running;
}

int sched_num_waiting(const sched *sc)
{
    return sc->n_waiting;
}

int64_t sched_waiting_tokens(const sched *sc)
{
    int64_t n = 0;
    for (int i = 0; i < sc->n_waiting; i++) n += sc->waiting[i]->n_tokens;
    return n;
}

void sched_get_stats(const sched *sc, sched_stats *out)
{
    *out = sc->st;
}

block_pool *sched_pool(sched *sc)
{
    return sc->bp[0];
}

block_pool *sched_group_pool(sched *sc, int g)
{
    return sc->bp[g];
}

int sched_n_groups(const sched *sc)
{
    return sc->n_groups;
}

rdx_tree *sched_tree(sched *sc)
{
    return sc->tree;
}

int64_t sched_cache_blocks(const sched *sc)
{
    return sc->tree ? rdx_n_blocks(sc->tree) + sc->n_comp : 0;
}

void sched_check(const sched *sc)
{
    if (sc->tree) rdx_check(sc->tree);
    int64_t comp = 0;
    for (int g = 0; g < sc->n_groups; g++) {
        bp_check(sc->bp[g]);
        /* the tree's references: group 0's blocks, or their companions in group g */
        int64_t tree = sched__check_tree(sc, g), held = tree + (sc->tree && g == 0 ? sched__tier_refs(sc) : 0), refs = 0;
        comp += g ? tree : 0;
        for (int i = 0; i < sc->n_running; i++) {
            const seq *s = sc->running[i];
            assert(s->status == SEQ_RUNNING);
            assert(s->n_computed <= s->n_tokens);
            held += sched__check_seq(sc, s, g);
        }
        for (int i = 0; i < sc->n_waiting; i++) {
            assert(sc->waiting[i]->status == SEQ_WAITING);
            assert(sc->waiting[i]->kv[g].n_blocks == 0);
        }
        for (int32_t b = 0; b < bp_num_blocks(sc->bp[g]); b++) refs += bp_refcount(sc->bp[g], b);
        assert(refs == held);
        (void)refs;
        (void)held;
    }
    assert(comp == (sc->tree ? sched_cache_blocks(sc) - rdx_n_blocks(sc->tree) : 0));
    (void)comp;
}
