/*
 * step.h — the launched steps of the engine: the middle of the five phases (the block copies,
 * the batch, the forward, the sampler) run on the backend, and the steps in flight until their
 * results are collected. engine.c drives it; the scheduler's two ends stay with engine.c:
 *
 *   synchronous:  schedule(n) → stp_launch(n) → sched_advance(n) → stp_collect(n) → sched_apply(n)
 *   overlapped:   schedule(n+1) → stp_launch(n+1) → stp_collect(n) → sched_apply(n) → sched_advance(n+1)
 *
 *   slot 0: [ step n: sampling, batch, results ] ─┐ at most two steps in flight: the backend
 *   slot 1: [ step n+1 ...                     ] ─┘ writes each one's results into its slot
 *
 * With a backend that samples (be_ops.sample), a launch only queues work on the device and the
 * collect is the one wait of a step (on the CPU backend the work is done by the time launch
 * returns). Without one, the forward's logits come to the host and the rows run there
 * (engine/sampler.c); such a pipeline cannot overlap.
 *
 * Phase times (engine thread, microseconds, enum engine_phase of engine.h) are added up in
 * stp_take_times: the sample phase's prepare counts as schedule, the batch and its upload as
 * upload, the forward's queuing and the wait for the results as forward, the sampler's call and
 * the sample phase's finish as sample. Engine thread only.
 */
#ifndef KVSERVE_STEP_H
#define KVSERVE_STEP_H

#include <stdint.h>

#include "cache/kv.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/pool.h"
#include "engine/sampling.h"
#include "engine/sched.h"

typedef struct stp_config {
    backend *be;              /* borrowed */
    fwd *f;                   /* borrowed */
    const kv_geom *g;         /* borrowed: the KV geometry (block size, groups, rules) */
    int n_vocab;
    const int32_t *eog;       /* [n_eog] borrowed: end-of-generation ids */
    int n_eog;
    int max_tokens, max_seqs, max_logits; /* the batch's bounds */
    int pool_dim;             /* n_embd: the hidden rows pooled sequences take (engine/pool.h) */
    pool_rows *pool;          /* borrowed: their host buffer */
} stp_config;

typedef struct stp stp;

/* A pipeline over c's backend and forward. NULL on -ENOMEM. */
stp *stp_create(const stp_config *c);
/* Destroys it; a step still in flight is abandoned first. */
void stp_destroy(stp *p);

/* 1 when the backend samples (be_ops.sample): steps can overlap. */
int stp_can_overlap(const stp *p);

/* Launches the planned step: its block copies, the sample phase's prepare (forks included), the
 * batch and its upload, the forward and the sampler. *sp gets the prepared step (its draws for
 * sched_advance; valid until that step is collected). Returns 0, or a negative errno: then
 * nothing was added in flight and the children of its prepare are gone. At most two steps may be
 * in flight. */
int stp_launch(stp *p, const sched_plan *plan, const sampling_plan **sp);
/* The children of the last launch have joined the scheduler (sched_advance): they are no longer
 * the pipeline's to destroy. */
void stp_adopted(stp *p);

/* Steps launched and not yet collected (0, 1 or 2). */
int stp_in_flight(const stp *p);
/* 1 when the oldest step in flight must be collected before another is prepared (sampling_plan
 * sync: a sequence in it needs its token on the host first). */
int stp_must_collect(const stp *p);

/* Waits for the oldest step in flight and finishes its sample phase: *out its results (valid
 * until the next launch into its slot). Returns their number, or a negative errno (the step is
 * abandoned). */
int stp_collect(stp *p, sampling_out **out);
/* Abandons every step in flight: waits for the backend, drops the results and the children of
 * a launch that was never adopted. */
void stp_abandon(stp *p);

/* Adds the phase times accumulated since the last call to us[ENGINE_PHASES] and resets them. */
void stp_take_times(stp *p, int64_t *us);
/* The sample phases' counters (both slots together). */
void stp_get_stats(const stp *p, sampling_stats *out);

#endif
