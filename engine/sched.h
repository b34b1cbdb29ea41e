/*
 * sched.h — the continuous-batching scheduler: which sequences compute how many tokens in the
 * next step, with which KV blocks, and what happens to the tokens they sample.
 *
 *   waiting (FCFS, preempted first) ──admit──► running (admission order) ──finish──► caller
 *         ▲                                        │
 *         └──────────── preempt (recompute) ───────┘
 *
 * An engine step is five phases, each a peer that engine.c calls in order; the scheduler is the
 * first and the last:
 *   schedule (sched_schedule): running decodes (1 token each), then continuing prefill chunks,
 *             then admissions, all under max_batch_tokens and max_seqs; blocks come from the
 *             pool, else from the prefix cache's LRU leaves (rdx_evict), else by preempting the
 *             most recently admitted running sequence (its computed blocks go into the cache
 *             first). The plan lists each sequence's new tokens and the block copies (copy-on-
 *             write of a shared partial block) to apply before the forward;
 *   batch:    batch_build turns the plan into the backend's varlen batch (batch.h);
 *   forward:  fwd_run computes the batch's logit rows (forward.h; a test's fake model instead);
 *   sample:   sampling_step scores prompt tokens, draws tokens, forks n > 1 requests
 *             (sampling.h);
 *   commit (sched_advance, then sched_apply): computed counts advance, newly filled full blocks
 *             enter the prefix cache, fork children join, drawn tokens are appended and the stop
 *             rules applied, and the sequences that finished are released.
 * Nothing but the plan and the results passes between the phases: the scheduler never runs the
 * model. The plan fixes everything the forward needs (tokens, rows, blocks, copies) and the commit
 * takes per-sequence results, not logits, so the phases can be regrouped without touching the
 * scheduler: a sampler on the device hands the commit the same results, verification rows of a
 * speculative step are more rows of the plan, and an engine that overlaps the forward of step n
 * with the planning of step n + 1 can take step n's computed counts from its plan before its
 * tokens are drawn.
 *
 * Windows (docs/kv-windows.md): each layer group keeps its blocks by its rule (cache/kv.h). A
 * running sequence first releases what its groups' rules let go (sched_kv.c), a step never takes
 * a sequence past a sinks group's window, and a sequence whose sinks window (or group 0) has
 * dropped blocks stops offering blocks to the prefix cache (a sliding window's releases do not
 * stop it). With more than one group the cache indexes group 0's blocks and keeps each one's
 * companions in the other groups (sched_kv.c).
 *
 * The scheduler owns the block pools and the radix tree; it borrows the sequences (their owner
 * frees them after release). Engine thread only.
 */
#ifndef KVSERVE_SCHED_H
#define KVSERVE_SCHED_H

#include <stdint.h>

#include "cache/block_pool.h"
#include "cache/radix.h"
#include "cache/tier.h"
#include "engine/batch.h"
#include "engine/sampling.h"
#include "engine/sched_types.h"
#include "engine/seq.h"

/* What one step computes, as sched_schedule planned it. The arrays are the scheduler's, valid
 * until its next sched_schedule. */
typedef struct sched_plan {
    const batch_entry *entries; /* [n_entries] in batch order: each sequence's new tokens */
    int n_entries;
    const sched_copy *copies;   /* [n_copies] to apply, in order, before the forward (a copy
                                   whose destination a later preemption in the same schedule
                                   freed again is harmless: nothing reads a free block) */
    int n_copies;
} sched_plan;

/* A scheduler with its own block pools, one per layer group (and a radix tree when prefix_cache:
 * it indexes group 0's blocks, and the scheduler keeps their companions in the other groups).
 * NULL on -ENOMEM, or -EINVAL when a window rule cannot hold its sinks plus one block. */
sched *sched_create(const sched_config *c);
/* Destroys the tree and the pool; every sequence must have been released. */
void sched_destroy(sched *sc);

/* Queues a WAITING sequence at the back. Its sp and rng must be set. 0, -EINVAL (more choices
 * than max_seqs) or -ENOMEM. */
int sched_add(sched *sc, seq *s);

/* The schedule phase: completes the tier's finished loads, then plans the next step (which
 * sequences compute how many tokens, taking, evicting or preempting for their blocks) into *plan.
 * Returns 0, -EAGAIN when nothing could be scheduled (the plan is empty), or -ENOMEM. A plan
 * must be advanced (sched_advance or sched_commit) before the next sched_schedule, unless its
 * step failed: then nothing advanced, and the engine gives up on the sequences (sched_release). */
int sched_schedule(sched *sc, sched_plan *plan);

/* The commit phase has two halves, so that an overlapped engine can launch step n + 1 before
 * the tokens of step n are known:
 *
 *   sched_advance (the structure, once the step is launched): the plan's computed counts advance
 *     and their newly full blocks enter the prefix cache; the scoring cursors move past the
 *     prompt tokens scored this step; the children born in the sample phase's prepare join the
 *     running sequences sharing their parent's blocks; every sequence that draws a token this
 *     step gets a placeholder for it (seq.h: pending). Sequences that finished since the plan
 *     was made are skipped.
 *   sched_apply (the values, once the results are back): in order, a drawn token replaces its
 *     placeholder and the stop rules decide
 *     whether its sequence finished (end-of-generation, a stop id, max_tokens or the context
 *     limit), an END or HALT sets the finish reason; results of sequences already finished
 *     (cancelled, or stopped one step earlier: the extra token of an overlapped step) are
 *     dropped; last, the sequences that finished are released (status SEQ_FINISHED).
 *
 * A synchronous engine calls advance then apply for each step; an overlapped one launches step
 * n + 1 (scheduled after advance(n)), then applies n, then advances n + 1. A sequence whose
 * pending token is its last (max_tokens, context) is not scheduled again, and a waiting one with
 * a pending token is not admitted until apply resolves it.
 *
 * sched_advance: d[0 .. n) are the step's draws (sampling_prepare). 0, or -ENOMEM (the step is
 * then half applied: the engine gives up on its sequences). Must follow the plan's
 * sched_schedule before the next one. */
int sched_advance(sched *sc, const sampling_draw *d, int n);
/* sched_apply: v[0 .. n) are the step's results (sampling_finish). 0 or -ENOMEM (as above). */
int sched_apply(sched *sc, sampling_out *v, int n);
/* Both halves at once for results v[0 .. n) of sampling_step (whose parent fields name the
 * children to join). 0 or -ENOMEM. */
int sched_commit(sched *sc, sampling_out *v, int n);

/* Releases a WAITING or RUNNING sequence now (cancel, stop string, error): its computed full
 * blocks go into the prefix cache, its references are dropped, status becomes SEQ_FINISHED with
 * the given finish reason (enum engine_finish). */
void sched_release(sched *sc, seq *s, int finish);

int sched_num_running(const sched *sc);
int sched_num_waiting(const sched *sc);
/* Prompt + output tokens of the waiting sequences. */
int64_t sched_waiting_tokens(const sched *sc);
void sched_get_stats(const sched *sc, sched_stats *out);
block_pool *sched_pool(sched *sc); /* group 0's */
/* The pool of layer group g (0 ≤ g < the number of groups). */
block_pool *sched_group_pool(sched *sc, int g);
int sched_n_groups(const sched *sc);
rdx_tree *sched_tree(sched *sc); /* NULL when the prefix cache is off */
/* Blocks the prefix cache holds in every group: the tree's and their companions (0 when off). */
int64_t sched_cache_blocks(const sched *sc);

/* Puts the second KV tier t (borrowed; it must outlive every step) under the prefix cache:
 * blocks entering the cache are saved to it, evicted ones spill into it, and a waiting
 * sequence whose prefix continues in it loads those blocks back before its prefill is
 * scheduled (other sequences run meanwhile). root is the key of the empty prefix (the tier's
 * fingerprint). 0, -EINVAL (no prefix cache, it already holds blocks, or more than one layer
 * group: the tier carries group 0's blocks only) or -ENOMEM. */
int sched_set_tier(sched *sc, tier *t, hash_key root);
/* Loads from the tier in flight: the scheduler is waiting for them, not stuck. */
int sched_tier_pending(const sched *sc);
/* Completes the tier's finished work (loads, writes, its background checks) when no step runs
 * (sched_schedule does it in every step). */
void sched_tier_poll(sched *sc);

/* Asserts the invariants: pool and tree checks, every reference accounted for by a running
 * sequence, the tree (group 0), the companions of the tree's blocks (groups ≥ 1, one for every
 * indexed block) or the tier's loads, each running sequence holding exactly the blocks of its cache length in
 * every group (and no more than its window), waiting sequences hold no blocks. */
void sched_check(const sched *sc);

#endif
