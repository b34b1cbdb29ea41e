/*
 * sched.c — continuous batching: the schedule and commit phases of a step (see sched.h).
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
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/batch.h"
#include "engine/finish.h"
#include "engine/sched_internal.h"
#include "engine/sched_kv.h"
#include "engine/sched_tier.h"
#include "engine/spec.h"

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

sched *sched_create(const sched_config *c)
{
    int ng = c->n_groups > 1 ? c->n_groups : 1;
    if (ng > KV_MAX_GROUPS || !sched__rules_ok(c, ng)) return NULL;
    sched *sc = calloc(1, sizeof *sc);
    if (!sc) return NULL;
    sc->c = *c;
    if (sc->c.lpm_aging_steps <= 0) sc->c.lpm_aging_steps = 64;
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
    sc->match_buf = malloc((size_t)sc->max_blocks * sizeof(int32_t));
    if (ok) ok = !sched__comp_init(sc);
    if (!ok || !sc->plan || !sc->match_buf) {
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
    free(sc->running);
    free(sc->waiting);
    free(sc->plan);
    free(sc->copies);
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

/* 1 when s's pending token is its last: max_tokens or the context is reached once it is known,
 * so no step computes past it (sched_apply finishes it). */
static int sched__done_pending(const sched *sc, const seq *s)
{
    return s->pending >= 0 && (seq_n_output(s) >= s->max_tokens || s->n_tokens >= sc->ctx_limit);
}

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
    s->n_draft = 0; /* its drafts go with its blocks (the next proposal starts afresh) */
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
    sc->plan[sc->n_plan++] = (batch_entry){s, n_new, s->n_computed + n_new == s->n_tokens + s->n_draft, lp_from, lp_rows,
                                           s->n_draft};
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
    if (n_new <= s->n_draft) s->n_draft = n_new > 0 ? n_new - 1 : 0; /* a window cut the drafts */
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
 * first; lpm takes a preempted or aged one first, else the longest cached prefix. A sequence
 * whose last token is still pending (preempted while its step was in flight) waits for it. */
static int sched__pick(const sched *sc, const char *held)
{
    int best = -1;
    int lpm = sc->c.schedule == SCHED_LPM && sc->tree;
    for (int i = 0; i < sc->n_waiting; i++) {
        if (held[i] || sc->waiting[i]->pending >= 0) continue;
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
    if (sc->tree && !seq_computes_prompt(c)) {
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

/* ---- speculation ---------------------------------------------------------------------- */

/* Running sequences that decode one token in the coming step (pass 0 of the plan). */
static int sched__n_decoding(const sched *sc)
{
    int n = 0;
    for (int i = 0; i < sc->n_running; i++) {
        const seq *s = sc->running[i];
        n += s->n_tokens - s->n_computed == 1 && !sched__done_pending(sc, s);
    }
    return n;
}

/* The sequences that will decode together once the prompts being prefilled and those waiting
 * that max_seqs admits are in: a batch about to grow past --spec-disable-batch stops speculating
 * within a few steps, so drafts now (a draft model's catch-up over each prompt) would be spent
 * for little. */
static int sched__n_decoding_soon(const sched *sc)
{
    int load = 0, waiting = 0;
    for (int i = 0; i < sc->n_running; i++) load += sc->running[i]->n_choices;
    for (int i = 0; i < sc->n_waiting; i++) waiting += sc->waiting[i]->n_choices;
    int room = sc->c.max_seqs - load;
    return load + (waiting < room ? waiting : room > 0 ? room : 0);
}

/* The drafts of this step: every sequence that decodes one token (pass 0 of the plan) may
 * propose, up to its adaptive K within the step's spare tokens (reserved in running order) and
 * draft rows. The proposer is asked once for all of them (a draft model runs them as one batch);
 * each one's guesses go into s->draft and past its known tokens, s->n_draft. A sequence that
 * still scores its prompt, has not forked, pools its hidden states, holds a pending token or is
 * near its last token proposes nothing. */
static void sched__propose_all(sched *sc, int spare)
{
    seq *ss[sc->n_running > 0 ? sc->n_running : 1];
    int ks[sc->n_running > 0 ? sc->n_running : 1], n = 0;
    for (int i = 0; i < sc->n_running; i++) {
        seq *s = sc->running[i];
        s->n_draft = 0;
        if (!sc->c.propose || spare <= 0 || s->n_tokens - s->n_computed != 1 || sched__done_pending(sc, s) ||
            s->pending >= 0 || s->n_choices > 1 || seq_is_scoring(s) || s->pool)
            continue;
        int k = s->spec_k > 0 ? s->spec_k : sc->c.spec_k;
        int left[] = {spare, sc->spec_left, s->max_tokens - seq_n_output(s) - 1, sc->ctx_limit - s->n_tokens - 1,
                      s->cap - s->n_tokens - 1, SEQ_MAX_DRAFT};
        for (int j = 0; j < (int)(sizeof left / sizeof left[0]); j++) k = k < left[j] ? k : left[j];
        if (k <= 0) continue;
        ss[n] = s;
        ks[n++] = k;
        spare -= k;
        sc->spec_left -= k;
    }
    if (!n) return;
    int got[n];
    sc->c.propose(sc->c.propose_ud, ss, ks, n, got);
    for (int i = 0; i < n; i++) {
        seq *s = ss[i];
        int g = got[i] < 0 ? 0 : got[i] > ks[i] ? ks[i] : got[i];
        memcpy(s->tokens + s->n_tokens, s->draft, (size_t)g * sizeof *s->draft);
        s->n_draft = g;
        sc->spec_left += ks[i] - g; /* the rows reserved and not used */
    }
}

/* ---- schedule ------------------------------------------------------------------------- */

static int sched__schedule(sched *sc)
{
    int budget = sc->c.max_batch_tokens;
    sc->n_plan = 0;
    sc->lp_left = SCHED_PROMPT_LOGIT_ROWS;
    sc->spec_left = sc->c.spec_rows;
    /* Drafts take the tokens the step has beyond one per decoding sequence, and none at all
     * when so many sequences decode, or soon will, that verifying would cost more than it
     * saves. */
    int n_dec = sc->c.propose ? sched__n_decoding(sc) : 0;
    int spare = n_dec && sched__n_decoding_soon(sc) <= sc->c.spec_disable_batch ? budget - n_dec : 0;
    sched__propose_all(sc, spare);
    /* Pass 0: running decodes (with their drafts); pass 1: running prefill chunks. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < sc->n_running && budget > 0;) {
            seq *s = sc->running[i];
            int planned = 0;
            for (int k = 0; k < sc->n_plan; k++) planned |= sc->plan[k].s == s;
            if (pass == 1 && !planned) sched__rematch(sc, s);
            int rem = s->n_tokens - s->n_computed;
            if (planned || (pass == 0) != (rem == 1) || sched__done_pending(sc, s)) {
                i++;
                continue;
            }
            int n_new = (rem < budget ? rem : budget) + (pass == 0 ? s->n_draft : 0);
            int rc = sched__plan_running(sc, s, n_new, &budget);
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

int sched_schedule(sched *sc, sched_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    sched__tier_poll(sc);
    for (int i = 0; i < sc->n_waiting; i++) sc->waiting[i]->wait_steps++;
    sc->n_copies = 0;
    int rc = sched__schedule(sc);
    if (rc) return rc;
    if (!sc->n_plan) return -EAGAIN;
    plan->entries = sc->plan;
    plan->n_entries = sc->n_plan;
    plan->copies = sc->copies;
    plan->n_copies = sc->n_copies;
    return 0;
}

/* ---- commit --------------------------------------------------------------------------- */

/* A fork's child c, born in the sample phase from p, joins the running sequences with its own
 * references on p's blocks. */
static int sched__join(sched *sc, const seq *p, seq *c)
{
    if (sched__grow(&sc->running, &sc->cap_running, sc->n_running + 1)) return -ENOMEM;
    /* c was cloned before this commit advanced p: it takes p's cache state as it is now */
    c->n_computed = p->n_computed;
    c->n_inserted = p->n_inserted;
    c->plp_next = p->plp_next;
    if (sched__share_blocks(sc, p, c)) return -ENOMEM;
    c->admit_order = ++sc->admit_counter;
    sc->running[sc->n_running++] = c; /* room was made above */
    return 0;
}

/* The drawn token r replaces s's placeholder (or is appended, for a sequence that never pended),
 * and the stop rules apply. */
static int sched__append(sched *sc, seq *s, const smp_result *r)
{
    if (s->pending >= 0) {
        s->tokens[s->n_tokens - 1] = r->token;
        s->pending = -1;
    } else if (seq_append(s, r->token)) {
        return -ENOMEM;
    }
    s->cum_logprob += r->logprob;
    if (!s->first_token_us) s->first_token_us = clk_now_us();
    sc->st.generated++;
    int eog = 0, stop = 0;
    for (int k = 0; k < sc->c.n_eog; k++) eog |= sc->c.eog_ids[k] == r->token;
    for (int k = 0; k < s->sp.n_stop_ids; k++) stop |= s->sp.stop_ids[k] == r->token;
    if (eog && !s->sp.ignore_eos) {
        s->finish = ENGINE_FINISH_STOP;
    } else if (stop) { /* stop_token_ids stop even with ignore_eos, as in vLLM */
        s->finish = ENGINE_FINISH_STOP;
        s->stop_token = r->token;
    } else if (seq_n_output(s) >= s->max_tokens || s->n_tokens >= sc->ctx_limit) {
        s->finish = ENGINE_FINISH_LENGTH;
    }
    return 0;
}

/* Applies one result of the sample phase to its sequence (nothing for one already finished:
 * cancelled, or stopped by the step before, its result is an extra one). */
static int sched__apply_one(sched *sc, sampling_out *o)
{
    seq *s = o->s;
    if (o->spec > 0 && (s->status == SEQ_FINISHED || s->finish)) {
        o->kind = SAMPLING_SKIP; /* accepted past a stop of the same run: never part of the output */
        return 0;
    }
    if (s->status == SEQ_FINISHED) {
        sc->st.dropped += o->kind == SAMPLING_TOKEN;
        return 0;
    }
    switch (o->kind) {
    case SAMPLING_PROMPT: /* the scoring cursor moved at sched_advance */
    case SAMPLING_SKIP:
        return 0;
    case SAMPLING_END:
        s->finish = ENGINE_FINISH_LENGTH;
        return 0;
    case SAMPLING_HALT:
        if (s->pending >= 0) { /* the drawn token was refused: it is no part of the output */
            s->n_tokens--;
            s->pending = -1;
        }
        s->finish = o->finish;
        return 0;
    default:
        /* the token after accepted draft spec - 1: that draft's K/V, computed this step, is
         * the sequence's now */
        if (o->spec > 0) s->n_computed++;
        return sched__append(sc, s, &o->r);
    }
}

/* After a step's results: a sequence that verified drafts gives back the blocks that held only
 * rejected ones, offers what its accepted ones filled to the prefix cache, and sets its next
 * speculative length. */
static void sched__settle_drafts(sched *sc, seq *s, const sampling_out *v, int n)
{
    int nd = s->n_draft, acc = 0;
    if (!nd) return;
    s->n_draft = 0;
    for (int i = 0; i < n; i++) acc += v[i].s == s && v[i].spec > 0 && v[i].kind == SAMPLING_TOKEN;
    sc->st.spec_drafts++;
    sc->st.spec_draft_tokens += nd;
    sc->st.spec_accepted += acc;
    s->spec_k = spec_next_k(s->spec_k > 0 ? s->spec_k : sc->c.spec_k, nd, acc, sc->c.spec_k);
    if (s->status != SEQ_RUNNING) return;
    sched__truncate(sc, s);
    sched__insert(sc, s);
}

int sched_advance(sched *sc, const sampling_draw *d, int n)
{
    int64_t tokens = 0;
    for (int i = 0; i < sc->n_plan; i++) {
        seq *s = sc->plan[i].s;
        if (s->status != SEQ_RUNNING) continue; /* finished since it was launched */
        s->n_computed += sc->plan[i].n_new - sc->plan[i].n_draft; /* drafts count once accepted */
        tokens += sc->plan[i].n_new;
        sched__insert(sc, s);
    }
    sc->n_plan = 0;
    sc->st.steps++;
    sc->st.step_tokens += tokens;
    for (int i = 0; i < n; i++) {
        seq *s = d[i].s;
        if (d[i].scored >= 0) s->plp_next = d[i].scored;
        if (d[i].parent) {
            assert(d[i].parent->status == SEQ_RUNNING);
            int rc = sched__join(sc, d[i].parent, s);
            if (rc) return rc;
        }
        if (d[i].row < 0 || s->status != SEQ_RUNNING) continue;
        assert(s->pending < 0);
        if (seq_append(s, seq_placeholder(d[i].row))) return -ENOMEM;
        s->pending = d[i].row;
    }
    return 0;
}

int sched_apply(sched *sc, sampling_out *v, int n)
{
    for (int i = 0; i < n; i++) {
        seq *s = v[i].s;
        int64_t gen = sc->st.generated;
        int rc = sched__apply_one(sc, &v[i]);
        if (rc) return rc;
        v[i].at = sc->st.generated != gen ? s->n_tokens - 1 : -1;
        v[i].fin = s->finish;
        v[i].cum = s->cum_logprob;
    }
    for (int i = 0; i < n; i++) sched__settle_drafts(sc, v[i].s, v, n);
    /* Release what finished (children of a fork appear after their parent); a preempted
     * sequence may finish while it waits. */
    for (int i = 0; i < n; i++) {
        seq *s = v[i].s;
        if (s->finish && s->status != SEQ_FINISHED) sched_release(sc, s, s->finish);
    }
    return 0;
}

int sched_commit(sched *sc, sampling_out *v, int n)
{
    sampling_draw *d = n ? malloc((size_t)n * sizeof *d) : NULL;
    if (n && !d) return -ENOMEM;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i].spec == 0 && (v[i].parent || v[i].kind == SAMPLING_TOKEN || v[i].kind == SAMPLING_PROMPT))
            d[k++] = (sampling_draw){v[i].s, v[i].parent, v[i].kind == SAMPLING_TOKEN ? i : -1,
                                     v[i].kind == SAMPLING_PROMPT ? v[i].pos + 1 : -1};
    int rc = sched_advance(sc, d, k);
    free(d);
    return rc ? rc : sched_apply(sc, v, n);
}

void sched_release(sched *sc, seq *s, int finish)
{
    if (s->status == SEQ_FINISHED) return;
    if (s->spec_state && sc->c.propose_release) sc->c.propose_release(sc->c.propose_ud, s);
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

/* ---- the second KV tier (sched_tier.c) ---------------------------------------------------- */

int sched_set_tier(sched *sc, tier *t, hash_key root)
{
    return sched__tier_set(sc, t, root);
}

void sched_tier_poll(sched *sc)
{
    sched__tier_poll(sc);
}

int sched_tier_pending(const sched *sc)
{
    return sched__tier_pending(sc);
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
