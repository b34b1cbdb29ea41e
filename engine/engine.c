/*
 * engine.c — the engine thread and its two queues (see engine.h for the threading contract).
 *
 *   any thread ──engine_submit/cancel──► [submissions, cancels]  (mutex)
 *                                              │ taken at the top of each loop
 *   engine thread: intake → cancels → step (below) → detok → events
 *                                              │
 *   caller thread ◄──engine_poll── [events] ◄──┘ then cfg.wake(ud)
 *
 * A step is five phases, each a module's function: sched_schedule (the plan: sequences, new
 * tokens, block copies) → stp_launch (engine/step.h: the block copies, the sample phase's
 * prepare, batch_build, the forward and the sampler, queued on the backend) → sched_advance (the
 * structure: counts, prefix cache, forks, pending tokens) → stp_collect (the wait for the
 * tokens, the sample phase's finish) → sched_apply (tokens, stops, releases) and the events.
 * Overlapped (engine_config.overlap), step n + 1 is scheduled and launched before step n is
 * collected, so the host's work for both runs while the backend computes:
 *
 *   host:    sched(n+1) launch(n+1) | collect(n) apply(n) events(n) advance(n+1) | sched(n+2) …
 *   backend: ……… step n ……………………………… | ……… step n+1 ………………………………………………………… | …
 *
 * A sequence then decodes from its pending token (the backend reads it where its sampler wrote
 * it); a stop, cancellation or preemption takes effect at most one step late, and the token
 * computed past a stop is dropped (sched_apply), never sent. A step holding a sequence whose next
 * row needs its token on the host (a grammar, long bad words) is collected before the next one is
 * prepared.
 *
 * Everything below the mutex-guarded fields is touched by the engine thread alone: the
 * scheduler (with its block pool and radix tree), the forward, the sample phase and the active
 * requests. The thread sleeps on a condition variable when it has nothing to compute.
 */
#include "engine/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "cache/kv.h"
#include "engine/backend.h"
#include "engine/batch.h"
#include "engine/detok.h"
#include "engine/engine_kv.h"
#include "engine/engine_tier.h"
#include "engine/forward.h"
#include "engine/pool.h"
#include "engine/sampling.h"
#include "engine/sched.h"
#include "engine/engine_spec.h"
#include "engine/spec.h"
#include "engine/step.h"

/* One submitted request and its choices. */
typedef struct eng_req {
    uint64_t id;
    engine_request r;       /* owned arrays (prompt, bias, stop strings) */
    int64_t arrival_us;
    seq **seqs;             /* [r.n]; before the fork only seqs[0] exists */
    detok *dt;              /* [r.n] */
    char *done;             /* [r.n] 1 when the choice's final event was queued */
    int n_done;
    pool_acc *pool;         /* a pooled request's accumulator (engine_request.pooling), else NULL */
    struct eng_req *next;   /* submission queue, then the active list */
} eng_req;

struct engine {
    engine_config cfg;
    backend *be;
    fwd *f;
    sched *sc;
    stp *steps;             /* the launched steps (engine/step.h) */
    spec_proposer *spec;    /* speculative decoding's proposer, NULL when off */
    int overlap;            /* 1: steps overlap */
    tier *tier;             /* second KV tier, NULL without one */
    hash_key tier_root;     /* its fingerprint */
    engine_kv kv;           /* the KV cache's layout: geometry, groups, blocks, context */
    int n_vocab;
    const int32_t *eog;
    int n_eog;
    gr_vocab *gvoc;         /* the vocabulary as grammars see it, built at the first constrained request */
    pool_rows pool_buf;     /* pooled sequences' hidden rows of a step (host) */
    pool_head head;         /* the reranking head, built with the engine (see eng__setup) */
    int head_state;         /* 1: built, -1: the model has none (head_err says why; logged once) */
    char head_err[256];
    pthread_t thread;
    int thread_started;

    pthread_mutex_t mu;     /* guards everything down to 'stats' */
    pthread_cond_t cv;
    eng_req *sub_head, *sub_tail;
    int n_sub;
    int64_t sub_tokens;
    uint64_t *cancels;
    int n_cancel, cap_cancel;
    engine_event **ev;      /* queue: ev[ev_head .. n_ev) */
    int ev_head, n_ev, cap_ev;
    int draining, aborting;
    int tier_woken;         /* a tier load completed since the loop last looked */
    int queued_waiting;     /* sched's waiting count after the last step */
    int64_t queued_tokens;
    uint64_t next_id;
    uint64_t seed_counter;
    engine_stats stats;

    eng_req *active;        /* engine thread only */
    int64_t prompt_tokens_done;
    int64_t step_tokens_seen; /* sched's step_tokens at the last stats update */
    int64_t idle_at_us;       /* when kv_blocks_idle was last counted */
    int failed;
    int64_t phase_us[ENGINE_PHASES];      /* this step's time per phase */
    int launched;                         /* a step was launched since the last observation */
    uint64_t phase_hist[ENGINE_PHASES][ENGINE_STEP_BUCKETS + 1]; /* all steps' (copied to stats) */
    int64_t phase_total_us[ENGINE_PHASES];
    int64_t log_at_us, log_steps;         /* -v: the last breakdown's time and step count */
    int64_t log_us[ENGINE_PHASES];        /* -v: phase totals at the last breakdown */
    int64_t steps_overlapped;             /* steps launched while another was in flight */
};

/* vLLM's buckets for vllm:iteration_tokens_total. */
_Static_assert(ENGINE_TIER_BUCKETS == SCHED_TIER_BUCKETS, "one histogram of tier loads");
const int64_t *const engine_tier_bounds_us = sched_tier_bounds_us;

const int engine_iter_bounds[ENGINE_ITER_BUCKETS] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048,
                                                     4096, 8192, 16384};

const int64_t engine_step_bounds_us[ENGINE_STEP_BUCKETS] = {100,   250,   500,    1000,   2500,   5000,   10000,
                                                            25000, 50000, 100000, 250000, 500000, 1000000, 2500000};

const char *const engine_phase_names[ENGINE_PHASES] = {"schedule", "upload", "forward", "sample", "output"};

void engine_config_default(engine_config *c)
{
    memset(c, 0, sizeof *c);
    c->device = "auto";
    c->kv_memory_bytes = (size_t)2 << 30;
    c->gpu_memory_utilization = 0.90;
    c->kv_dtype = KV_F16;
    c->block_size = 16;
    c->schedule = ENGINE_SCHED_FCFS;
    c->prefix_cache = 1;
    c->max_queued_requests = 1024;
    c->max_queued_tokens = 1000000;
    spec_config sc;
    spec_config_default(&sc);
    c->spec_method = sc.method;
    c->spec_k = sc.k;
    c->spec_ngram_min = sc.ngram_min;
    c->spec_ngram_max = sc.ngram_max;
    c->spec_disable_batch = sc.disable_batch;
}

/* ---- requests and events --------------------------------------------------------------- */

static void eng__free_request_arrays(engine_request *r)
{
    free(r->prompt);
    smp_params_free_arrays(&r->sampling);
    for (int i = 0; r->stop && i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    gr_unref(r->grammar);
}

static void eng__req_free(eng_req *q)
{
    if (!q) return;
    for (int i = 0; i < q->r.n; i++) {
        if (q->seqs && q->seqs[i]) seq_destroy(q->seqs[i]);
        if (q->dt) detok_fini(&q->dt[i]);
    }
    free(q->seqs);
    free(q->dt);
    free(q->done);
    pool_acc_destroy(q->pool);
    eng__free_request_arrays(&q->r);
    free(q);
}

void engine_event_free(engine_event *ev)
{
    if (!ev) return;
    free(ev->text);
    free(ev->tokens);
    free(ev->logprobs);
    free(ev->pooled);
    free(ev);
}

/* A new event for choice idx of q; NULL on -ENOMEM. */
static engine_event *eng__event(const eng_req *q, int idx, const char *text, size_t len,
                                const smp_result *r, int finish)
{
    engine_event *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    ev->id = q->id;
    ev->index = idx;
    ev->text = malloc(len + 1);
    if (!ev->text) goto fail;
    memcpy(ev->text, text, len);
    ev->text[len] = 0;
    ev->text_len = len;
    if (r) {
        ev->n_tokens = 1;
        ev->tokens = malloc(sizeof *ev->tokens);
        if (!ev->tokens) goto fail;
        ev->tokens[0] = r->token;
        if (q->r.sampling.n_logprobs >= 0) {
            ev->logprobs = malloc(sizeof *ev->logprobs);
            if (!ev->logprobs) goto fail;
            *ev->logprobs = *r;
        }
    }
    ev->finish = finish;
    ev->stop_str = -1;
    ev->stop_token = -1;
    const seq *s = q->seqs[idx] ? q->seqs[idx] : q->seqs[0];
    ev->cum_logprob = s && q->seqs[idx] ? s->cum_logprob : 0;
    if (finish) {
        ev->usage.prompt_tokens = q->r.n_prompt;
        ev->usage.completion_tokens = q->seqs[idx] ? seq_n_output(q->seqs[idx]) : 0;
        ev->usage.cached_tokens = s ? s->cached_tokens : 0;
        ev->timings.arrival_us = q->arrival_us;
        if (s) {
            ev->timings.first_scheduled_us = s->first_scheduled_us;
            ev->timings.first_token_us = q->seqs[idx] ? s->first_token_us : 0;
        }
        ev->timings.finish_us = clk_now_us();
    }
    return ev;
fail:
    engine_event_free(ev);
    return NULL;
}

/* Local event list built during a step, pushed under the mutex afterwards. */
typedef struct eng_evlist {
    engine_event **v;
    int n, cap;
} eng_evlist;

static void eng__emit(eng_evlist *l, engine_event *ev)
{
    if (!ev) return; /* out of memory: the event is lost, the engine goes on */
    if (l->n == l->cap) {
        int c = l->cap ? l->cap * 2 : 64;
        engine_event **v = realloc(l->v, (size_t)c * sizeof *v);
        if (!v) {
            engine_event_free(ev);
            return;
        }
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = ev;
}

/* Ends every unfinished choice of q with reason (abort, error, or length for a request that
 * only scored its prompt), releasing its sequences. */
static void eng__end_request(engine *e, eng_req *q, int reason, eng_evlist *out)
{
    for (int i = 0; i < q->r.n; i++) {
        if (q->done[i]) continue;
        seq *s = q->seqs[i];
        if (s && s->status != SEQ_FINISHED) sched_release(e->sc, s, reason);
        if (!s && q->seqs[0] && q->seqs[0]->status != SEQ_FINISHED)
            sched_release(e->sc, q->seqs[0], reason);
        eng__emit(out, eng__event(q, i, "", 0, NULL, reason));
        q->done[i] = 1;
        q->n_done++;
    }
}

/* 1 while a launched step's results still name one of q's sequences. */
static int eng__req_in_flight(const eng_req *q)
{
    for (int i = 0; q->seqs && i < q->r.n; i++)
        if (q->seqs[i] && q->seqs[i]->flights) return 1;
    return 0;
}

/* Unlinks and frees completed requests (once no step in flight names their sequences). */
static void eng__reap(engine *e)
{
    for (eng_req **pp = &e->active; *pp;) {
        eng_req *q = *pp;
        if (q->n_done < q->r.n || eng__req_in_flight(q)) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        e->prompt_tokens_done += q->r.n_prompt;
        eng__req_free(q);
    }
}

/* ---- the engine thread ----------------------------------------------------------------- */

/* A pooled request's accumulator, and what its sequence needs from the scheduler: the whole
 * prompt computed when rows of a cached prefix are pooled, its blocks kept out of the prefix
 * cache unless it asked. The reranking head was built with the engine (eng__setup). 0 or -1. */
static int eng__pool_setup(engine *e, eng_req *q, seq *s)
{
    const model *m = e->cfg.model;
    if (q->r.pooling == MODEL_POOL_RANK && e->head_state < 0) {
        if (e->head_err[0] && !e->cfg.quiet) fprintf(stderr, "engine: %s\n", e->head_err);
        e->head_err[0] = 0; /* once */
        return -1;
    }
    q->pool = pool_acc_create(q->r.pooling, m->hp.n_embd, q->r.n_prompt, e->head.last);
    if (!q->pool) return -1;
    s->pool = q->pool;
    s->pool_whole = pool_acc_whole(q->pool);
    s->no_cache = !q->r.cache_prompt;
    return 0;
}

/* A pooled request's one event: its vector, or the head's outputs (rank), finish STOP. */
static void eng__end_pooled(engine *e, eng_req *q, eng_evlist *out)
{
    if (q->done[0]) return;
    const pool_acc *a = q->pool;
    engine_event *ev = pool_acc_done(a) ? eng__event(q, 0, "", 0, NULL, ENGINE_FINISH_STOP) : NULL;
    float *row = ev ? malloc(sizeof *row * (size_t)a->dim) : NULL;
    int n = a->kind == MODEL_POOL_RANK ? e->head.n_out : a->dim;
    if (row) ev->pooled = malloc(sizeof *ev->pooled * (size_t)n);
    if (!row || !ev->pooled) {
        free(row);
        engine_event_free(ev);
        eng__end_request(e, q, ENGINE_FINISH_ERROR, out);
        return;
    }
    pool_acc_result(a, row);
    if (a->kind == MODEL_POOL_RANK) pool_head_apply(&e->head, row, ev->pooled);
    else memcpy(ev->pooled, row, sizeof *row * (size_t)n);
    free(row);
    ev->n_pooled = n;
    if (q->seqs[0] && q->seqs[0]->status != SEQ_FINISHED) sched_release(e->sc, q->seqs[0], ENGINE_FINISH_STOP);
    eng__emit(out, ev);
    q->done[0] = 1;
    q->n_done++;
}

/* Makes q's first sequence and puts it in the scheduler (or finishes it when max_tokens is 0). */
static void eng__intake(engine *e, eng_req *q, eng_evlist *out)
{
    q->next = e->active;
    e->active = q;
    int n = q->r.n;
    q->seqs = calloc((size_t)n, sizeof *q->seqs);
    q->dt = calloc((size_t)n, sizeof *q->dt);
    q->done = calloc((size_t)n, 1);
    if (!q->seqs || !q->dt || !q->done) goto fail;
    for (int i = 0; i < n; i++)
        if (detok_init(&q->dt[i], e->cfg.tok, q->r.prompt, q->r.n_prompt, q->r.stop, q->r.n_stop,
                       q->r.include_stop_str))
            goto fail;
    for (int i = 0; i < n; i++) q->dt[i].render_special = q->r.render_special;
    if (q->r.max_tokens == 0 && !q->r.prompt_logprobs && !q->r.pooling) {
        for (int i = 0; i < n; i++) {
            eng__emit(out, eng__event(q, i, "", 0, NULL, ENGINE_FINISH_LENGTH));
            q->done[i] = 1;
        }
        q->n_done = n;
        return;
    }
    seq *s = seq_create(q->r.prompt, q->r.n_prompt, q->r.max_tokens);
    if (!s) goto fail;
    q->seqs[0] = s;
    s->req_id = q->id;
    s->owner = q;
    s->n_choices = n;
    s->prompt_logprobs = q->r.prompt_logprobs;
    s->plp_top = q->r.prompt_top >= 0 ? q->r.prompt_top : q->r.sampling.n_logprobs;
    s->sp = q->r.sampling;
    smp_rng_seed(&s->rng, s->sp.seed);
    if (q->r.grammar) {
        if (!e->gvoc && !(e->gvoc = gr_vocab_create(e->cfg.tok, e->n_vocab))) {
            seq_destroy(s);
            q->seqs[0] = NULL;
            goto fail;
        }
        if (!(s->gm = gr_matcher_create(q->r.grammar, e->gvoc))) {
            seq_destroy(s);
            q->seqs[0] = NULL;
            goto fail;
        }
    }
    s->arrival_us = q->arrival_us;
    if (q->r.pooling && eng__pool_setup(e, q, s)) {
        seq_destroy(s);
        q->seqs[0] = NULL;
        goto fail;
    }
    if (sched_add(e->sc, s)) {
        q->seqs[0] = NULL;
        seq_destroy(s);
        goto fail;
    }
    return;
fail:
    if (!q->done) { /* cannot even record the outcome: drop silently */
        q->n_done = n;
        return;
    }
    eng__end_request(e, q, ENGINE_FINISH_ERROR, out);
}

static eng_req *eng__find(engine *e, uint64_t id)
{
    for (eng_req *q = e->active; q; q = q->next)
        if (q->id == id) return q;
    return NULL;
}

/* Scored prompt tokens v[0 .. k) of one sequence: one event per choice (every choice's echo
 * carries them; the choices have not forked yet). */
static void eng__on_prompt(engine *e, const sampling_out *v, int k, eng_evlist *out)
{
    eng_req *q = v[0].s->owner;
    for (int c = 0; c < q->r.n; c++) {
        if (q->done[c]) continue;
        engine_event *ev = eng__event(q, c, "", 0, NULL, ENGINE_FINISH_NONE);
        if (ev) {
            ev->is_prompt = 1;
            ev->tokens = malloc((size_t)k * sizeof *ev->tokens);
            ev->logprobs = malloc((size_t)k * sizeof *ev->logprobs);
            if (!ev->tokens || !ev->logprobs) {
                engine_event_free(ev);
                continue;
            }
            ev->n_tokens = k;
            for (int j = 0; j < k; j++) {
                ev->tokens[j] = v[j].r.token;
                ev->logprobs[j] = v[j].r;
            }
        }
        eng__emit(out, ev);
    }
}

/* A stop string ended s at result sm: the tokens an accepted run added after it (speculative
 * decoding) are no part of the output, so usage and the prefix cache see what plain decoding
 * would have left. */
static void eng__cut_run(seq *s, const sampling_out *sm)
{
    if (sm->kind != SAMPLING_TOKEN || sm->at < 0 || sm->at + 1 >= s->n_tokens) return;
    s->n_tokens = sm->at + 1;
    if (s->n_computed > s->n_tokens) s->n_computed = s->n_tokens;
}

/* Turns one sampled token into the choice's event (and finishes the choice when due). */
static void eng__on_sample(engine *e, const sampling_out *sm, eng_evlist *out)
{
    seq *s = sm->s;
    eng_req *q = s->owner;
    int idx = s->index;
    if (!q->seqs[idx]) q->seqs[idx] = s; /* a fork's child reports for the first time */
    if (q->done[idx]) return;
    const char *d = "";
    size_t dl = 0;
    /* A stop token's own text is cut, as a stop string is, unless include_stop_str; so is the
     * end-of-generation token's when control tokens are rendered (as vLLM does). */
    int halt = sm->kind == SAMPLING_HALT; /* finished without a token */
    /* this result's own end: a token of an accepted run ends the choice only if it is the last */
    int finish = sm->fin;
    int cut = finish && (s->stop_token >= 0 || (q->r.render_special && finish == ENGINE_FINISH_STOP && !halt)) &&
              !q->r.include_stop_str;
    int rc = cut || halt ? 0 : detok_push(&q->dt[idx], sm->r.token, &d, &dl);
    double cum = s->cum_logprob;
    s->cum_logprob = sm->cum; /* what the choice had summed up to this token */
    if (rc == 1) {
        finish = ENGINE_FINISH_STOP;
        if (s->status != SEQ_FINISHED) {
            eng__cut_run(s, sm);
            sched_release(e->sc, s, finish);
        }
    }
    char *text = rc >= 0 ? strndup(d, dl) : NULL;
    size_t tl = text ? dl : 0;
    if (finish && rc == 0) {
        if (!detok_flush(&q->dt[idx], &d, &dl) && dl) {
            char *t2 = realloc(text, tl + dl + 1);
            if (t2) {
                memcpy(t2 + tl, d, dl + 1);
                text = t2;
                tl += dl;
            }
        }
    }
    engine_event *ev = eng__event(q, idx, text ? text : "", tl, halt ? NULL : &sm->r, finish);
    if (ev && finish == ENGINE_FINISH_STOP) {
        ev->stop_str = rc == 1 ? q->dt[idx].matched : -1;
        ev->stop_token = rc == 1 ? -1 : s->stop_token;
    }
    eng__emit(out, ev);
    free(text);
    if (!finish) s->cum_logprob = cum;
    if (finish) {
        q->done[idx] = 1;
        q->n_done++;
    }
}

/* Ends every request with an error: the step failed, or nothing can ever run. */
static void eng__fail_all(engine *e, eng_evlist *out)
{
    for (eng_req *q = e->active; q; q = q->next) eng__end_request(e, q, ENGINE_FINISH_ERROR, out);
}

/* Nothing could be scheduled. Returns 1 while sequences run (they wait for blocks), 0 when idle. */
static int eng__unschedulable(engine *e, eng_evlist *out)
{
    if (sched_num_running(e->sc)) return 1;
    if (sched_tier_pending(e->sc)) return 0; /* idle until the tier's wake-up */
    /* Nothing runs and nothing can be admitted: fail every request rather than spin. */
    eng__fail_all(e, out);
    return 0;
}

/* The committed results v[0 .. n) of a step as events. */
static void eng__on_results(engine *e, const sampling_out *v, int n, eng_evlist *out)
{
    for (int i = 0; i < n;) {
        if (v[i].kind == SAMPLING_PROMPT) { /* a run of one sequence's scored prompt tokens */
            int k = 1;
            while (i + k < n && v[i + k].kind == SAMPLING_PROMPT && v[i + k].s == v[i].s) k++;
            eng__on_prompt(e, v + i, k, out);
            i += k;
        } else if (v[i].kind == SAMPLING_SKIP) {
            i++;
        } else if (v[i].kind == SAMPLING_END) {
            eng_req *q = v[i++].s->owner;
            if (q->pool) eng__end_pooled(e, q, out);
            else eng__end_request(e, q, ENGINE_FINISH_LENGTH, out);
        } else {
            eng__on_sample(e, &v[i++], out);
        }
    }
}

/* The structural commit of the step just launched (sched_advance), and the children born in it
 * handed to their requests. 0 or a negative errno. */
static int eng__advance(engine *e, const sampling_plan *sp)
{
    int rc = sched_advance(e->sc, sp->draws, sp->n_draws);
    stp_adopted(e->steps);
    for (int i = 0; i < sp->n_draws; i++) {
        seq *c = sp->draws[i].s;
        if (sp->draws[i].parent) ((eng_req *)c->owner)->seqs[c->index] = c;
    }
    return rc;
}

/* Collects the oldest step in flight and applies its results: tokens, stops, events. 0 or a
 * negative errno. */
static int eng__collect(engine *e, eng_evlist *out)
{
    sampling_out *v = NULL;
    int n = stp_collect(e->steps, &v);
    if (n < 0) return n;
    int64_t t0 = clk_now_us();
    int rc = sched_apply(e->sc, v, n);
    if (!rc) eng__on_results(e, v, n, out);
    e->phase_us[ENGINE_PHASE_OUTPUT] += clk_now_us() - t0;
    return rc;
}

/* Plans the next step into *plan (timed as scheduling). 0, -EAGAIN (nothing to run) or -ENOMEM. */
static int eng__schedule(engine *e, sched_plan *plan)
{
    int64_t t0 = clk_now_us();
    int rc = sched_schedule(e->sc, plan);
    e->phase_us[ENGINE_PHASE_SCHEDULE] += clk_now_us() - t0;
    return rc;
}

/* One step and its events. Synchronous: schedule, launch, advance, collect, apply. Overlapped:
 * schedule and launch step n + 1, then collect and apply step n, then advance n + 1 (see the
 * top of the file). Returns 1 when something ran, 0 when idle, or a negative errno. */
static int eng__step_once(engine *e, eng_evlist *out)
{
    int rc = 0;
    if (e->overlap && stp_must_collect(e->steps)) rc = eng__collect(e, out); /* its tokens first */
    if (rc) return rc;
    int busy = stp_in_flight(e->steps) > 0;
    if (!busy && !sched_num_running(e->sc) && !sched_num_waiting(e->sc)) {
        sched_tier_poll(e->sc); /* the tier's own work goes on while nothing runs */
        return 0;
    }
    sched_plan plan;
    const sampling_plan *sp = NULL;
    rc = eng__schedule(e, &plan);
    if (rc == -EAGAIN && !busy) return eng__unschedulable(e, out);
    if (rc == -EAGAIN) rc = 0; /* nothing new to launch: collect the step in flight */
    else if (!rc) rc = stp_launch(e->steps, &plan, &sp);
    e->launched |= !rc && sp;
    if (!rc && sp && stp_in_flight(e->steps) == 2) e->steps_overlapped++;
    if (!rc && sp && !e->overlap) rc = eng__advance(e, sp);
    if (!rc && stp_in_flight(e->steps) > (e->overlap && sp ? 1 : 0)) rc = eng__collect(e, out);
    if (!rc && sp && e->overlap) rc = eng__advance(e, sp);
    return rc ? rc : 1;
}

/* eng__step_once, failing every request when a step fails (the backend's error is a process
 * error: the engine reports itself failed). */
static int eng__step(engine *e, eng_evlist *out)
{
    int rc = eng__step_once(e, out);
    if (rc >= 0) return rc;
    fprintf(stderr, "kvserve: engine step failed (%s); failing the requests in flight\n", strerror(-rc));
    e->failed = 1;
    stp_abandon(e->steps);
    eng__fail_all(e, out);
    return 0;
}

/* The step's phase times into the histograms, one observation per launched step (so that the
 * counts equal the steps, overlapped or not: an iteration that only collects a step in flight or
 * finds nothing new to schedule adds its time to the next step's); at -v, a breakdown on stderr
 * every 10 s. */
static void eng__phase_times(engine *e)
{
    int stepped = e->launched;
    e->launched = 0;
    stp_take_times(e->steps, e->phase_us);
    if (!stepped) return;
    for (int k = 0; k < ENGINE_PHASES; k++) {
        int b = 0;
        while (b < ENGINE_STEP_BUCKETS && e->phase_us[k] > engine_step_bounds_us[b]) b++;
        e->phase_hist[k][b]++;
        e->phase_total_us[k] += e->phase_us[k];
    }
    memset(e->phase_us, 0, sizeof e->phase_us);
    e->log_steps += stepped;
    int64_t now = clk_now_us();
    if (!e->cfg.verbose || now - e->log_at_us < 10000000 || !e->log_steps) return;
    char line[256];
    int len = snprintf(line, sizeof line, "engine: %lld steps (overlap %s), mean ms per step:", (long long)e->log_steps,
                       e->overlap ? "on" : "off");
    for (int k = 0; k < ENGINE_PHASES && len < (int)sizeof line; k++)
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.3f", engine_phase_names[k],
                        (double)(e->phase_total_us[k] - e->log_us[k]) / 1000.0 / (double)e->log_steps);
    fprintf(stderr, "%s\n", line);
    memcpy(e->log_us, e->phase_total_us, sizeof e->log_us);
    e->log_steps = 0;
    e->log_at_us = now;
}

/* The second tier's numbers (the scheduler's loads and the tier's own counters). */
static void eng__tier_stats(const engine *e, const sched_stats *ss, engine_stats *st)
{
    if (!e->tier) return;
    tier_stats ts;
    tier_get_stats(e->tier, &ts);
    st->tier_on = 1;
    st->tier_disk_on = ts.disk_on;
    st->tier_host_blocks = ts.host_blocks;
    st->tier_host_capacity = ts.host_capacity;
    st->tier_disk_blocks = ts.disk_blocks;
    st->tier_disk_capacity = ts.disk_capacity;
    st->tier_hits_host = ts.hits_host;
    st->tier_hits_disk = ts.hits_disk;
    st->tier_load_failures = ts.load_failures;
    st->tier_bytes_written = ts.bytes_written;
    st->tier_bytes_read = ts.bytes_read;
    st->tier_bytes_to_host = ts.bytes_to_host;
    st->tier_bytes_from_host = ts.bytes_from_host;
    st->tier_writes_skipped = ts.writes_skipped;
    st->tier_files_ignored = ts.files_ignored;
    st->tier_files_skipped = ts.files_skipped;
    st->tier_io_timeouts = ts.io_timeouts;
    st->tier_disk_stalled = ts.disk_stalled;
    st->tier_verified = ts.verified;
    st->tier_unverified_blocks = ts.old_blocks;
    st->tier_hit_tokens = ss->tier_hit_tokens;
    st->tier_loads = ss->tier_loads;
    memcpy(st->tier_load_hist, ss->tier_load_hist, sizeof st->tier_load_hist);
    st->tier_load_us = ss->tier_load_us;
}

static void eng__update_stats(engine *e)
{
    engine_stats *st = &e->stats;
    sched_stats ss;
    sched_get_stats(e->sc, &ss);
    rdx_tree *t = sched_tree(e->sc);
    int64_t now = clk_now_us();
    st->alive = !e->failed;
    st->heartbeat_us = now;
    st->n_ctx = e->kv.n_ctx;
    if (ss.steps != st->steps) {
        st->last_step_us = now;
        int64_t tok = ss.step_tokens - e->step_tokens_seen;
        int b = 0;
        while (b < ENGINE_ITER_BUCKETS && tok > engine_iter_bounds[b]) b++;
        st->iter_tokens[b] += (uint64_t)(ss.steps - st->steps); /* one step per update in practice */
        st->iter_tokens_sum += tok;
        e->step_tokens_seen = ss.step_tokens;
    }
    /* O(tree): not on every step, but always when the engine goes idle, since an idle engine
     * looks again only at its heartbeat and the last request's blocks would show as used. */
    int quiet = !sched_num_running(e->sc) && !sched_num_waiting(e->sc);
    if (!t) st->kv_blocks_idle = 0;
    else if (now - e->idle_at_us >= 100000 || (quiet && e->idle_at_us < st->last_step_us)) {
        /* group 0's evictable blocks, and (an estimate, in proportion) their companions in the
         * other groups, which are freed with them */
        int64_t n0 = rdx_n_blocks(t), ev = rdx_n_evictable(t);
        st->kv_blocks_idle = n0 ? ev * sched_cache_blocks(e->sc) / n0 : 0;
        e->idle_at_us = now;
    }
    st->num_running = sched_num_running(e->sc);
    st->num_waiting = sched_num_waiting(e->sc) + e->n_sub;
    st->kv_blocks_total = st->kv_blocks_used = 0;
    for (int k = 0; k < sched_n_groups(e->sc); k++) {
        block_pool *gp = sched_group_pool(e->sc, k);
        st->kv_blocks_total += bp_num_blocks(gp);
        st->kv_blocks_used += bp_num_blocks(gp) - bp_num_free(gp);
    }
    st->kv_blocks_cached = sched_cache_blocks(e->sc);
    st->kv_bytes_per_token = kv_bytes_per_token(&e->kv.g);
    st->kv_capacity_tokens = (int64_t)e->kv.n_blocks[0] * e->kv.g.block_size;
    st->kv_capacity_seqs = engine_kv_seq_capacity(&e->kv);
    st->kv_window = e->cfg.kv_window;
    st->block_size = e->kv.g.block_size;
    st->prefix_cache_queries = ss.prefix_queries;
    st->prefix_cache_hits = ss.prefix_hits;
    st->prefix_cache_evictions = ss.evictions;
    st->preemptions = ss.preemptions;
    st->prompt_tokens = e->prompt_tokens_done;
    st->generation_tokens = ss.generated;
    st->steps = ss.steps;
    sampling_stats sps;
    stp_get_stats(e->steps, &sps);
    st->grammar_masks = sps.grammar_masks;
    st->grammar_mask_us = sps.grammar_mask_us;
    st->max_seqs = e->cfg.max_seqs;
    st->max_batch_tokens = e->cfg.max_batch_tokens;
    st->overlap = e->overlap;
    st->steps_overlapped = e->steps_overlapped;
    st->in_flight = stp_in_flight(e->steps);
    st->tokens_dropped = ss.dropped;
    st->spec_method = e->spec ? e->cfg.spec_method : 0;
    st->spec_drafts = ss.spec_drafts;
    st->spec_draft_tokens = ss.spec_draft_tokens;
    st->spec_accepted = ss.spec_accepted;
    memcpy(st->phase_hist, e->phase_hist, sizeof st->phase_hist);
    memcpy(st->phase_us, e->phase_total_us, sizeof st->phase_us);
    eng__tier_stats(e, &ss, st);
    e->queued_waiting = sched_num_waiting(e->sc);
    e->queued_tokens = sched_waiting_tokens(e->sc);
}

/* Moves the step's events into the shared queue (under the mutex). Returns 1 when any moved. */
static int eng__push_events(engine *e, eng_evlist *out)
{
    if (!out->n) return 0;
    int need = e->n_ev - e->ev_head + out->n;
    if (e->ev_head) {
        memmove(e->ev, e->ev + e->ev_head, (size_t)(e->n_ev - e->ev_head) * sizeof *e->ev);
        e->n_ev -= e->ev_head;
        e->ev_head = 0;
    }
    if (need > e->cap_ev) {
        int c = e->cap_ev ? e->cap_ev : 256;
        while (c < need) c *= 2;
        engine_event **v = realloc(e->ev, (size_t)c * sizeof *v);
        if (v) {
            e->ev = v;
            e->cap_ev = c;
        }
    }
    for (int i = 0; i < out->n; i++) {
        if (e->n_ev < e->cap_ev) e->ev[e->n_ev++] = out->v[i];
        else engine_event_free(out->v[i]); /* out of memory: the event is lost */
    }
    out->n = 0;
    return 1;
}

/* Copies the pending cancellations into *buf (grown as needed) and removes them from the
 * shared list (under the mutex). Returns how many were taken. */
static int eng__take_cancels(engine *e, uint64_t **buf, int *cap)
{
    int n = e->n_cancel;
    if (n > *cap) {
        uint64_t *c = realloc(*buf, (size_t)n * sizeof *c);
        if (c) {
            *buf = c;
            *cap = n;
        } else {
            n = *cap;
        }
    }
    if (n) {
        memcpy(*buf, e->cancels, (size_t)n * sizeof **buf);
        memmove(e->cancels, e->cancels + n, (size_t)(e->n_cancel - n) * sizeof **buf);
        e->n_cancel -= n;
    }
    return n;
}

static void *eng__thread(void *arg)
{
    engine *e = arg;
    eng_evlist out = {0};
    uint64_t *cancels = NULL;
    int cap_cancels = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        eng_req *subs = e->sub_head;
        e->sub_head = e->sub_tail = NULL;
        e->n_sub = 0;
        e->sub_tokens = 0;
        int n_cancel = eng__take_cancels(e, &cancels, &cap_cancels);
        int aborting = e->aborting, draining = e->draining;
        e->tier_woken = 0;
        pthread_mutex_unlock(&e->mu);

        while (subs) {
            eng_req *q = subs;
            subs = q->next;
            eng__intake(e, q, &out);
        }
        for (int i = 0; i < n_cancel; i++) {
            eng_req *q = eng__find(e, cancels[i]);
            if (q) eng__end_request(e, q, ENGINE_FINISH_ABORT, &out);
        }
        if (aborting) {
            stp_abandon(e->steps); /* nothing of it will be applied */
            for (eng_req *q = e->active; q; q = q->next) eng__end_request(e, q, ENGINE_FINISH_ABORT, &out);
        }
        int worked = aborting ? 0 : eng__step(e, &out);
        eng__phase_times(e);
        eng__reap(e);
        /* A tier load's deadline is met even when nothing else wakes this thread. */
        int64_t tier_us = e->tier && sched_tier_pending(e->sc) ? tier_next_deadline_us(e->tier) : -1;

        pthread_mutex_lock(&e->mu);
        int pushed = eng__push_events(e, &out);
        eng__update_stats(e);
        if (pushed && e->cfg.wake) {
            pthread_mutex_unlock(&e->mu);
            e->cfg.wake(e->cfg.wake_ud);
            pthread_mutex_lock(&e->mu);
        }
        int idle = !e->sub_head && !e->n_cancel && !worked && !e->tier_woken;
        if ((aborting || draining) && !e->active && !e->sub_head) break;
        if (idle && !e->aborting && !e->draining) { /* wake now and then: the heartbeat */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += tier_us >= 0 && tier_us < ENGINE_HEARTBEAT_MS * 1000L ? (long)tier_us * 1000L + 1000000L
                                                                                 : ENGINE_HEARTBEAT_MS * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
    }
    pthread_mutex_unlock(&e->mu);
    free(out.v);
    free(cancels);
    return NULL;
}

/* ---- the API --------------------------------------------------------------------------- */

static void eng__log(const engine *e)
{
    const model_hparams *hp = &e->cfg.model->hp;
    char feats[512];
    fprintf(stderr, "model: %s, %d layers; %s\n", hp->arch_name, hp->n_layers, model_features(hp, feats, sizeof feats));
    engine_kv_log(&e->kv, hp);
    char admit[48] = "";
    if (e->cfg.prefill_admit_tokens > 0)
        snprintf(admit, sizeof admit, " (admitting up to %d prefill tokens)", e->cfg.prefill_admit_tokens);
    fprintf(stderr, "engine: %s; max %d sequences, %d tokens per step%s, prefix cache %s, %s, overlap %s, "
            "sampling on the %s\n",
            e->be->desc, e->cfg.max_seqs, e->cfg.max_batch_tokens, admit,
            sched_tree(e->sc) ? "on" : "off",
            e->cfg.schedule == ENGINE_SCHED_LPM ? "lpm" : "fcfs", e->overlap ? "on" : "off",
            e->be->ops->sample ? "backend" : "host");
    if (e->tier) engine_tier_log(e->tier, &e->kv.g, e->tier_root);
}

/* Called by the tier (on its I/O thread, or this one) when a load completes. */
static void eng__tier_wake(void *ud)
{
    engine *e = ud;
    pthread_mutex_lock(&e->mu);
    e->tier_woken = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* The second KV tier under the prefix cache, when one is configured. 0, or -1 with err filled. */
static int eng__setup_tier(engine *e, char *err, size_t err_len)
{
    const engine_config *c = &e->cfg;
    int disk = c->kv_disk_dir && *c->kv_disk_dir;
    if (!c->kv_host_memory_bytes && !disk) return 0;
    if (!sched_tree(e->sc)) {
        snprintf(err, err_len, "--kv-host-memory and --kv-disk-dir keep prefix-cache blocks, and the prefix cache is "
                 "off (--no-prefix-cache)");
        return -1;
    }
    /* The tier keeps one block per cached prefix block; a model whose layers keep KV in more
     * than one group would need every group's block of it carried along. */
    if (kv_n_groups(&e->kv.g) > 1) {
        if (!c->quiet)
            fprintf(stderr, "engine: the second KV tier (--kv-host-memory, --kv-disk-dir) is off: this model's layers "
                    "keep KV in %d groups (sliding windows), and the tier carries one group's blocks only\n",
                    kv_n_groups(&e->kv.g));
        return 0;
    }
    engine_tier_config tc = {c->kv_host_memory_bytes, disk ? c->kv_disk_dir : NULL, c->kv_disk_bytes, eng__tier_wake, e,
                             c->quiet, (int)(c->kv_disk_timeout_s * 1000)};
    e->tier = engine_tier_create(&tc, e->be, c->model, &e->kv.g, &e->tier_root, err, err_len);
    if (!e->tier) return -1;
    if (sched_set_tier(e->sc, e->tier, e->tier_root)) {
        snprintf(err, err_len, "out of memory setting up the KV tier");
        return -1;
    }
    return 0;
}

/* The KV budget in bytes: --kv-memory on the CPU, a share of free memory less the weights and
 * the activations on a GPU. */
static size_t eng__kv_budget(const engine *e)
{
    const engine_config *c = &e->cfg;
    size_t avail = e->be->ops->mem_available(e->be);
    if (!avail) return c->kv_memory_bytes;
    double use = (double)avail * c->gpu_memory_utilization;
    double w = (double)model_weight_bytes(c->model) + (double)(512u << 20); /* + activations */
    return use > w ? (size_t)(use - w) : 0;
}

/* The scheduler's proposal hook over the engine's proposer. */
static void eng__propose(void *ud, seq *const *s, const int *k, int n, int *n_out)
{
    spec_proposer *p = ud;
    p->ops->propose(p, s, k, n, n_out);
}

static void eng__propose_release(void *ud, seq *s)
{
    spec_proposer *p = ud;
    if (p->ops->release) p->ops->release(p, s);
}

/* Backend, KV arena, forward, scheduler and sample phase. 0, or -1 with err filled. */
static int eng__setup(engine *e, char *err, size_t err_len)
{
    engine_config *c = &e->cfg;
    const model_hparams *hp = &c->model->hp;
    e->be = c->make_backend(c->device, c->n_threads, err, err_len);
    if (!e->be) return -1;
    int gpu = strcmp(e->be->name, "cpu") != 0;
    if (c->max_seqs <= 0) c->max_seqs = gpu ? 256 : 64;
    /* A GPU step costs about the same up to ~100 tokens of a 1B model (the weights' read), then
     * grows with its tokens: 2048 keeps a step that mixes a prefill chunk with 256 decodes near
     * 10 ms on an H100/H200 for a 1B model (2 GFLOP a token at ~450 TFLOP/s) while admitting
     * several prompts a step (docs/gpu.md). */
    if (c->max_batch_tokens <= 0) c->max_batch_tokens = gpu ? 2048 : 512;
    /* Speculation's crossover: on a 2-core CPU a 768-wide 24-layer Q8_0 target gained 1.3x (draft)
     * and 1.15x (n-gram) at 2 streams, 1.2x / 1.15x at 3 and 0.95x / 1.04x at 4, whose verify rows
     * (4 x (1 + K) tokens) are past where its GEMM stops being bound by the weights' read. A GPU
     * step stays bound by the read up to ~100 tokens of a 1B model, so 8 streams' verify rows are
     * nearly free there (docs/speculative.md). */
    if (c->spec_disable_batch <= 0) c->spec_disable_batch = gpu ? 8 : 3;
    /* A CPU step is compute-bound from a few dozen prefill tokens on (its time grows with every
     * token), so a second prompt in the same step only delays the first one's first token; a
     * GPU step costs about the same up to thousands of tokens, so there every prompt that fits
     * joins. */
    if (c->prefill_admit_tokens == 0) c->prefill_admit_tokens = gpu ? -1 : 64;
    if (c->block_size <= 0) c->block_size = 16;
    /* Every running sequence must be able to decode in every step. */
    if (c->max_batch_tokens < c->max_seqs) {
        if (!c->quiet)
            fprintf(stderr, "engine: max_batch_tokens raised from %d to max_seqs (%d)\n",
                    c->max_batch_tokens, c->max_seqs);
        c->max_batch_tokens = c->max_seqs;
    }
    e->kv.g = model_kv_geom(hp, c->block_size, c->kv_dtype);
    e->kv.max_batch_tokens = c->max_batch_tokens;
    int n_train = hp->n_ctx_train > 0 ? hp->n_ctx_train : 2048;
    if (c->max_model_len < 0 || c->max_model_len > n_train) {
        snprintf(err, err_len, "max-model-len %d is outside 1 .. %d (the model's context length)",
                 c->max_model_len, n_train);
        return -1;
    }
    e->kv.n_ctx = c->max_model_len > 0 ? c->max_model_len : n_train;
    e->n_vocab = hp->n_vocab;
    if (hp->mla && c->kv_window > 0) { /* the sinks' queries would need MLA's rope split */
        snprintf(err, err_len, "kv-window (attention sinks + a window) is not supported with multi-head latent "
                 "attention (%s)", hp->arch_name);
        return -1;
    }
    if (engine_kv_groups(&e->kv, hp, c->kv_window, c->kv_sinks, err, err_len)) return -1;
    size_t budget = eng__kv_budget(e);
    int spec_rows = engine_spec_create(c, e->be, &e->kv.g, e->kv.n_ctx, &budget, &e->spec, err, err_len);
    if (spec_rows < 0) return -1;
    engine_kv_blocks(&e->kv, budget);
    if (engine_kv_check_budget(&e->kv, err, err_len)) return -1;
    int max_logits = sched_max_logits(c->max_seqs) + spec_rows;
    e->f = fwd_create(c->model, e->be, &e->kv.g, e->kv.n_blocks, c->max_batch_tokens, max_logits, err, err_len);
    if (!e->f) return -1;
    e->n_eog = tok_eog_ids(c->tok, &e->eog);
    sched_config sc = {
        .block_size = c->block_size,
        .n_blocks = e->kv.n_blocks[0],
        .n_groups = kv_n_groups(&e->kv.g),
        .max_seqs = c->max_seqs,
        .max_batch_tokens = c->max_batch_tokens,
        .prefill_admit_tokens = c->prefill_admit_tokens,
        .schedule = c->schedule == ENGINE_SCHED_LPM ? SCHED_LPM : SCHED_FCFS,
        .prefix_cache = c->prefix_cache,
        .n_ctx = e->kv.n_ctx,
        .eog_ids = e->eog,
        .n_eog = e->n_eog,
        .propose = e->spec ? eng__propose : NULL,
        .propose_release = e->spec ? eng__propose_release : NULL,
        .propose_ud = e->spec,
        .spec_k = c->spec_k,
        .spec_rows = spec_rows,
        .spec_disable_batch = c->spec_disable_batch,
    };
    for (int k = 0; k < kv_n_groups(&e->kv.g); k++) {
        sc.rule[k] = e->kv.g.rule[k];
        sc.group_blocks[k] = e->kv.n_blocks[k];
    }
    e->sc = sched_create(&sc);
    stp_config pc = {e->be, e->f, &e->kv.g, e->n_vocab, e->eog, e->n_eog, c->max_batch_tokens, c->max_seqs,
                     max_logits, c->model->hp.n_embd, &e->pool_buf};
    e->steps = stp_create(&pc);
    if (!e->sc || !e->steps) {
        snprintf(err, err_len, "out of memory creating the scheduler");
        return -1;
    }
    /* The reranking head is read from the model now: once the engine exists a server stops
     * reading the model file (model/gguf.h gguf_detach), so nothing may read tensors later. */
    e->head_state = pool_head_init(&e->head, c->model, c->tok, e->head_err, sizeof e->head_err) ? -1 : 1;
    /* A CPU step keeps the engine thread busy (it drives the thread pool), so launching the
     * next step before applying this one would only delay every token by a step. */
    e->overlap = stp_can_overlap(e->steps) && (c->overlap == ENGINE_OVERLAP_ON ||
                                               (c->overlap == ENGINE_OVERLAP_AUTO && gpu));
    /* A proposal needs the sequence's last token on the host: speculating steps are synchronous. */
    if (e->spec) e->overlap = 0;
    return eng__setup_tier(e, err, err_len);
}

engine *engine_create(const engine_config *cfg, char *err, size_t err_len)
{
    if (!cfg->model || !cfg->tok || !cfg->make_backend) {
        snprintf(err, err_len, "engine needs a model, a tokenizer and a backend factory");
        return NULL;
    }
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    e->cfg = *cfg;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca; /* timed waits on CLOCK_MONOTONIC, like every timestamp here */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (eng__setup(e, err, err_len)) {
        engine_destroy(e, 0);
        return NULL;
    }
    if (!cfg->quiet) eng__log(e);
    eng__update_stats(e);
    if (pthread_create(&e->thread, NULL, eng__thread, e)) {
        snprintf(err, err_len, "cannot start the engine thread");
        engine_destroy(e, 0);
        return NULL;
    }
    e->thread_started = 1;
    return e;
}

void engine_destroy(engine *e, int drain)
{
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        if (drain) e->draining = 1;
        else e->aborting = 1;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    for (int i = e->ev_head; i < e->n_ev; i++) engine_event_free(e->ev[i]);
    free(e->ev);
    while (e->sub_head) {
        eng_req *q = e->sub_head;
        e->sub_head = q->next;
        eng__req_free(q);
    }
    stp_destroy(e->steps); /* before the requests whose sequences a step in flight names */
    e->steps = NULL;
    while (e->active) { /* only when the thread never ran */
        eng_req *q = e->active;
        e->active = q->next;
        eng__req_free(q);
    }
    free(e->cancels);
    tier_destroy(e->tier); /* its pending writes go to disk first (a drain's last act) */
    sched_destroy(e->sc);
    if (e->spec) e->spec->ops->destroy(e->spec);
    gr_vocab_destroy(e->gvoc);
    pool_head_fini(&e->head);
    free(e->pool_buf.v);
    fwd_destroy(e->f);
    be_destroy(e->be);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* Request errors that need no lock. */
static int eng__validate(const engine *e, const engine_request *req)
{
    if (!req->prompt || req->n_prompt < 1 || req->n < 1 || req->n > e->cfg.max_seqs ||
        req->max_tokens < 0 || req->n_stop < 0 || req->n_stop > ENGINE_MAX_STOP ||
        (req->n_stop > 0 && !req->stop) || req->prompt_top > SMP_MAX_LOGPROBS)
        return -EINVAL;
    if (req->pooling && (req->pooling < MODEL_POOL_MEAN || req->pooling > MODEL_POOL_RANK || req->n != 1 ||
                         req->max_tokens || req->grammar || req->prompt_logprobs))
        return -EINVAL;
    if (!engine_kv_can_hold(&e->kv, req->n_prompt, req->max_tokens)) return -EINVAL;
    for (int i = 0; i < req->n_prompt; i++)
        if (req->prompt[i] < 0 || req->prompt[i] >= e->n_vocab) return -EINVAL;
    return 0;
}

int engine_submit(engine *e, engine_request *req, uint64_t *id)
{
    int rc = eng__validate(e, req);
    if (rc) return rc;
    eng_req *q = calloc(1, sizeof *q);
    if (!q) return -ENOMEM;
    pthread_mutex_lock(&e->mu);
    if (e->draining || e->aborting) rc = -ESHUTDOWN;
    else if (req->n_prompt > e->cfg.max_queued_tokens) rc = -E2BIG;
    else if (e->n_sub + e->queued_waiting >= e->cfg.max_queued_requests ||
             e->sub_tokens + e->queued_tokens + req->n_prompt > e->cfg.max_queued_tokens)
        rc = -EAGAIN;
    if (rc) {
        pthread_mutex_unlock(&e->mu);
        free(q);
        return rc;
    }
    q->id = e->next_id++;
    q->r = *req;
    q->arrival_us = clk_now_us();
    if (!q->r.sampling.has_seed) {
        q->r.sampling.seed = (uint64_t)q->arrival_us * 0x9E3779B97F4A7C15ull ^ ++e->seed_counter;
        q->r.sampling.has_seed = 1;
    }
    if (e->sub_tail) e->sub_tail->next = q;
    else e->sub_head = q;
    e->sub_tail = q;
    e->n_sub++;
    e->sub_tokens += req->n_prompt;
    *id = q->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void engine_cancel(engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    if (e->n_cancel == e->cap_cancel) {
        int c = e->cap_cancel ? e->cap_cancel * 2 : 16;
        uint64_t *v = realloc(e->cancels, (size_t)c * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&e->mu);
            return;
        }
        e->cancels = v;
        e->cap_cancel = c;
    }
    e->cancels[e->n_cancel++] = id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int engine_poll(engine *e, engine_event **out, int max)
{
    pthread_mutex_lock(&e->mu);
    int n = e->n_ev - e->ev_head;
    if (n > max) n = max;
    if (n > 0) memcpy(out, e->ev + e->ev_head, (size_t)n * sizeof *out);
    e->ev_head += n > 0 ? n : 0;
    if (e->ev_head == e->n_ev) e->ev_head = e->n_ev = 0;
    pthread_mutex_unlock(&e->mu);
    return n > 0 ? n : 0;
}

void engine_get_stats(engine *e, engine_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
}
