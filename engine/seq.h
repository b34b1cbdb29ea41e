/*
 * seq.h — one generation sequence: the unit the scheduler batches.
 *
 *   tokens:  [ prompt ........................ | output ........ ]
 *             0                          n_prompt             n_tokens
 *   KV:      [ computed ............ | not yet ]
 *             0               n_computed
 *   blocks, per layer group g (kv[g]):
 *            [ sinks | dropped ........ | kept ............... ]    tokens
 *            [ bt[0 .. sink blocks)     | bt[sink blocks ..)   ]    bt: the compacted table
 *   KV entry j of group g (its "cache index", 0 .. kv_len) is token j for j below the sinks'
 *   end and token j + dropped × bs after it; it lives in bt[j / bs] at offset j % bs. A group
 *   that keeps everything never drops (the cache index is the token index).
 *
 * Invariants: n_computed ≤ n_tokens; the sequence holds one block-pool reference (in its
 * group's pool) on each of kv[g].bt[0 .. n_blocks); n_blocks = ceil(kv_len / block_size) with
 * kv_len = n_computed − dropped × block_size while RUNNING, and 0 while WAITING (a preempted
 * sequence gave its blocks back and recomputes from token 0) or FINISHED.
 * A step that ends exactly at n_tokens samples the next token; any other step (prefill chunks,
 * the recomputation of a preempted sequence) only writes K/V. Draws are keyed by the drawn
 * token's position (sampler.h), so a preempted sequence's tokens stay unchanged.
 *
 * Pending token: between a step's structural commit (sched_advance) and the application of its
 * results (sched_apply), a sequence that sampled holds a placeholder as its last token,
 * -(1 + row) with row the step's sampling row (pending = row). A step launched meanwhile (an
 * overlapped engine) feeds that placeholder to the backend, which reads the token where its
 * sampler wrote it; sched_apply replaces it by the token. At most one token is pending.
 *
 * Created by the engine (engine_submit) or by a step's sample phase (n > 1 forks, sampling.c; the
 * scheduler's commit then gives the children their blocks); owned by whoever holds the request.
 * Engine thread only.
 */
#ifndef KVSERVE_SEQ_H
#define KVSERVE_SEQ_H

#include <stdint.h>

#include "cache/kv.h"
#include "engine/finish.h"
#include "grammar/grammar.h"
#include "engine/sampler.h"

/* Most draft tokens a sequence verifies in one step (engine/spec.h). */
#define SEQ_MAX_DRAFT 16

enum seq_status { SEQ_WAITING = 0, SEQ_RUNNING = 1, SEQ_FINISHED = 2 };

/* A sequence's blocks in one layer group. */
typedef struct seq_kv {
    int32_t *bt;  /* [cap] block ids, compacted: the sink blocks, then the kept ones */
    int n_blocks; /* ids in bt (references held) */
    int cap;
    int dropped;  /* blocks released after the sinks (or at the front) as the window moved */
} seq_kv;

typedef struct seq {
    uint64_t req_id;        /* request id from engine_submit */
    int index;              /* choice index 0 .. n_choices-1 */
    int n_choices;          /* > 1 until the fork after the prompt prefill, then 1 */
    void *owner;            /* the engine's request (borrowed back-pointer) */

    int32_t *tokens;        /* [cap] prompt then output ids */
    int n_prompt;
    int n_tokens;           /* prompt + output */
    int cap;
    int n_computed;         /* tokens whose K/V is in the cache */
    int max_tokens;         /* output tokens allowed */

    seq_kv kv[KV_MAX_GROUPS]; /* per layer group: its block table (engine/sched.c's rules) */
    int n_inserted;         /* leading full blocks already offered to the prefix cache */

    smp_params sp;          /* sampling parameters (arrays borrowed from the request) */
    smp_rng rng;            /* this choice's key (seed, choice index): draws are keyed by position */
    gr_matcher *gm;         /* owned grammar state (structured output), NULL when unconstrained;
                               it advances only with sampled tokens, so preemption (which only
                               recomputes K/V) leaves it as it is */

    int status;             /* enum seq_status */
    int finish;             /* enum engine_finish (engine/finish.h) once decided, else 0 */
    int32_t stop_token;     /* the sp.stop_ids id that finished the sequence, else -1 */
    int cancelled;          /* 1: abort at the next step */
    uint64_t admit_order;   /* increasing admission stamp (the most recent is preempted first) */
    int64_t wait_steps;     /* steps spent waiting since arrival (lpm aging) */

    int64_t arrival_us, first_scheduled_us, first_token_us, finish_us; /* clk_now_us; 0 = not yet */
    int n_preemptions;
    int cached_tokens;      /* prompt tokens served from the prefix cache */
    int prompt_logprobs;    /* 1: score every prompt token (echo + logprobs, prompt_logprobs) */
    int plp_top;            /* alternatives reported per scored prompt token */
    int plp_next;           /* the next prompt index to score (prompt_logprobs) */
    double cum_logprob;     /* sum of sampled-token log-probs */
    int32_t pending;        /* -1, or the sampling row of the step whose token is the placeholder
                               tokens[n_tokens - 1] (see above) */
    int32_t draft[SEQ_MAX_DRAFT]; /* speculative decoding: the tokens proposed to follow tokens[0 ..
                               n_tokens) that this step verifies (a copy also lies in tokens[n_tokens
                               ..) until sched_advance puts the placeholder there) */
    int n_draft;            /* drafts planned this step (0: an ordinary decode); reset by sched_apply */
    void *spec_state;       /* the proposer's state for this sequence (a draft model's shadow), NULL
                               when none; freed by the proposer's release, never copied by a clone */
    int spec_k;             /* drafts to ask for next (adaptive, spec.h: spec_next_k); 0: not yet set */
    int flights;            /* launched steps whose results name this sequence and are not
                               applied yet: its owner must not free it while > 0 */
    struct pool_acc *pool;  /* a pooled sequence (embeddings, reranking: engine/pool.h): its
                               accumulator, borrowed from the engine's request; else NULL */
    int pool_whole;         /* with pool: 1 when it pools rows a cached prefix would not give
                               (every row for mean, the first for cls) */
    int no_cache;           /* 1: its blocks never enter the prefix cache (they are freed when
                               it ends) */
} seq;

/* A new WAITING sequence over a copy of prompt[0..n_prompt). NULL on -ENOMEM. */
seq *seq_create(const int32_t *prompt, int n_prompt, int max_tokens);
void seq_destroy(seq *s);

/* The placeholder of a token that the sampling row `row` of a launched step holds. */
static inline int32_t seq_placeholder(int32_t row)
{
    return -1 - row;
}

/* Appends a token id (growing the array). 0 or -ENOMEM. */
int seq_append(seq *s, int32_t token);
/* Makes room for n block ids in the table of layer group g. 0 or -ENOMEM. */
int seq_reserve_blocks(seq *s, int g, int n);
/* Output tokens so far. */
static inline int seq_n_output(const seq *s)
{
    return s->n_tokens - s->n_prompt;
}

/* 1 while s still has prompt tokens to score (echo + logprobs). Such a sequence computes its
 * whole prompt (a cached prefix would have no logits) and asks for a logit row per token. */
static inline int seq_is_scoring(const seq *s)
{
    return s->prompt_logprobs && s->plp_next < s->n_prompt;
}

/* 1 while s must compute its prompt itself rather than take a cached prefix: it scores the
 * prompt, or it pools rows a cached prefix would not give (every row, or the first). */
static inline int seq_computes_prompt(const seq *s)
{
    return seq_is_scoring(s) || (s->pool_whole && s->n_computed < s->n_prompt);
}

/* A copy of s (tokens, computed count, parameters, timestamps, its own copy of the grammar
 * state) that shares none of its blocks: the caller fills the child's block table. NULL on
 * -ENOMEM. */
seq *seq_clone(const seq *s);

#endif
