/*
 * sampler.h — from one row of logits to one token, per request parameters.
 *
 * Order (as vLLM / llama.cpp): grammar mask (smp_sample_masked), allowed_token_ids and
 * bad_words masks → logit_bias → repetition/presence/frequency penalties → min_tokens
 * (end-of-generation and stop token ids banned) → greedy if temperature == 0 → temperature →
 * top_k → top_p → min_p → draw. Log-probabilities reported to clients are of the model's raw
 * distribution (log_softmax of the unmodified logits), as vLLM reports them.
 *
 * Two layers. The row layer (engine/smp_rows.h) is what a backend runs: smp_row_fill turns a
 * request's parameters and history into a row descriptor and its arena lists, and smp_rows_run is
 * the CPU's implementation of the definition in smp_rows.h (the GPU's is cuda/sample_kernels.h).
 * The call layer (smp_sample, smp_sample_masked) fills and runs one row at once, for callers
 * that sample outside an engine step (`kvserve generate`, tests).
 *
 * Randomness: every draw is rng_draw_uniform(seed + choice, position, 0) (base/rng.h), a pure
 * function of the request's seed, the choice index and the drawn token's index in its sequence:
 * the same seed gives the same tokens whatever else is in the batch, after a preemption, and on
 * the CPU and the GPU; choice c of seed s draws as a single request with seed s + c (vLLM's
 * rule for n > 1).
 */
#ifndef KVSERVE_SAMPLER_H
#define KVSERVE_SAMPLER_H

#include <stdint.h>

#include "base/rng.h"
#include "engine/smp_rows.h"

typedef struct smp_params {
    float temperature;        /* 0 = greedy (lowest id wins ties) */
    int top_k;                /* ≤ 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; applies to prompt and output tokens */
    float presence_penalty;   /* 0: off; output tokens */
    float frequency_penalty;  /* 0: off; output tokens */
    int n_logit_bias;
    int32_t *bias_ids;        /* [n_logit_bias], owned by whoever owns the params */
    float *bias_vals;         /* [n_logit_bias] */
    int n_allowed;            /* allowed_token_ids: > 0 → only these ids may be sampled */
    int32_t *allowed_ids;     /* [n_allowed], owned by whoever owns the params */
    int n_bad;                /* bad_words: token sequences that must not be completed */
    int32_t *bad_ids;         /* word k is bad_ids[bad_off[k] .. bad_off[k + 1]) (owned) */
    int32_t *bad_off;         /* [n_bad + 1] offsets into bad_ids (owned) */
    int n_stop_ids;           /* stop_token_ids: sampling one ends the choice */
    int32_t *stop_ids;        /* [n_stop_ids] (owned) */
    int min_tokens;           /* end-of-generation and stop ids banned before this many output tokens */
    int ignore_eos;           /* end-of-generation ids do not stop (they are still sampleable) */
    uint64_t seed;
    int has_seed;             /* 0: the engine draws a random seed */
    int n_logprobs;           /* top alternatives to report; -1 = no logprobs at all */
} smp_params;

void smp_params_default(smp_params *p);

/* Frees the arrays p owns (logit_bias, allowed ids, bad words, stop ids) and clears them. */
void smp_params_free_arrays(smp_params *p);

/* Deep copy of src's arrays into *dst (dst = src first). 0 or -ENOMEM (dst then owns nothing). */
int smp_params_copy(smp_params *dst, const smp_params *src);

/* 1 when p's bad_words hold a word of more than one token: whether it is banned depends on the
 * last output tokens, so the host must know them before the row is filled. */
int smp_params_has_long_bad_words(const smp_params *p);

/* The key of one choice's draws: the request's seed and the choice index. The draw at a position
 * is rng_draw_uniform(seed + choice, position, 0, RNG_STREAM_SAMPLE). */
typedef struct smp_rng {
    uint64_t seed;
    uint32_t choice;
    uint32_t draws;           /* positions taken by calls without a history (see smp_sample) */
} smp_rng;

/* Choice 0 of seed. */
void smp_rng_seed(smp_rng *r, uint64_t seed);
/* Choice `choice` of seed. */
void smp_rng_key(smp_rng *r, uint64_t seed, uint32_t choice);

/* Context the penalties need: the sequence's prompt and output token ids. */
typedef struct smp_history {
    const int32_t *prompt;
    int n_prompt;
    const int32_t *output;
    int n_output;
} smp_history;

/* ---- the row layer --------------------------------------------------------------------- */

/* The growable arena of a step's rows, and the scratch smp_row_fill deduplicates ids with. */
typedef struct smp_arena {
    int32_t *v;               /* [cap] the arena (smp_rows.h) */
    int32_t n, cap;
    int32_t n_vocab;
    uint32_t *stamp;          /* [n_vocab] generation stamps of the ids seen by the current list */
    int32_t *count;           /* [n_vocab] occurrences in the current list */
    uint32_t gen;
} smp_arena;

/* An empty arena for rows over n_vocab tokens. 0 or -ENOMEM. */
int smp_arena_init(smp_arena *a, int32_t n_vocab);
void smp_arena_fini(smp_arena *a);
/* Empties the arena (a new step). */
static inline void smp_arena_reset(smp_arena *a)
{
    a->n = 0;
}

/* Fills *row (a SAMPLE row over logit row `logits`, keyed by rng at `position`) and appends its
 * lists to the arena: the mask (allow, a grammar's, ANDed with allowed_token_ids; NULL and no
 * allowed ids: none), the ban list (one-token bad words, longer ones whose prefix ends the output,
 * and while the output is shorter than min_tokens the end-of-generation ids eog[0 .. n_eog) and
 * stop ids, unless allow admits nothing else), the bias pairs and the penalties' lists over the
 * history h (NULL: none). pending ≥ 0 says the history has one more output token, not yet known,
 * that the previous step's results row `pending` holds (it counts for min_tokens and the
 * penalties; the caller must not pend a sequence whose bad words are longer than one token). The
 * row's lp is -1 (the caller numbers the log-prob blocks). 0 or -ENOMEM (the arena is then as it
 * was). */
int smp_row_fill(smp_row *row, smp_arena *a, const smp_params *p, const smp_rng *rng, int32_t position,
                 int32_t logits, const smp_history *h, int32_t pending, const int32_t *eog, int n_eog,
                 const uint32_t *allow);

/* Scratch for running rows over n_vocab tokens (one per thread). */
typedef struct smp_work {
    int32_t n_vocab;
    float *adj;               /* [n_vocab] the adjusted row */
    double *w;                /* [n_vocab] weights */
    void *cand;               /* [n_vocab] candidates */
} smp_work;

int smp_work_init(smp_work *w, int32_t n_vocab);
void smp_work_fini(smp_work *w);

/* Runs one row (smp_rows.h's definition) over its raw logit row raw[n_vocab] with the arena of
 * its batch; pending_token is the value of row->pending's token (-1 when the row has none).
 * out->token always; the log-prob fields when the row asks for them (lp ≥ 0 or SCORE), else
 * logprob 0, rank 0, n_top 0. w->adj holds the adjusted row afterwards (SAMPLE rows). */
void smp_row_run(const smp_row *row, const int32_t *arena, const float *raw, smp_work *w, int32_t pending_token,
                 smp_result *out);

/* Runs rows [r0, r1) of b over logits [..][b->n_vocab]: ids[i] = row i's token, lps[row->lp] =
 * its result when it has a log-prob block. prev_ids: the previous step's ids, which pending rows
 * read (NULL when no row pends). */
void smp_rows_run(const smp_batch *b, int32_t r0, int32_t r1, const float *logits, const int32_t *prev_ids,
                  smp_work *w, int32_t *ids, smp_result *lps);

/* ---- the call layer -------------------------------------------------------------------- */

/* The log-prob of token under the raw distribution logits[n_vocab] (no penalties, bias or
 * temperature) and the n_top best alternatives, into *out (out->token = token): how a prompt
 * token is scored for echo + logprobs. */
void smp_score(const float *logits, int n_vocab, int32_t token, int n_top, smp_result *out);

/* Samples from logits[n_vocab], which is left holding the adjusted row (the masks, bias and
 * penalties applied). eog ids and p->stop_ids are banned while n_output < min_tokens. The draw's
 * position is h->n_prompt + h->n_output; without a history it is rng->draws, which then advances
 * (so that repeated calls on one row draw afresh). Fills *out; 0, or -ENOMEM (then out->token is
 * the greedy token). */
int smp_sample(const smp_params *p, smp_rng *rng, float *logits, int n_vocab, const smp_history *h,
               const int32_t *eog_ids, int n_eog, smp_result *out);

/* smp_sample under a token mask (a grammar's, grammar/grammar.h layout: bit id % 32 of word
 * id / 32 is token id; NULL: no mask). Tokens outside it can never be drawn; when the mask allows
 * nothing but end-of-generation ids, min_tokens does not ban them (the output is complete).
 * Reported log-probabilities stay those of the raw distribution. When no allowed token can be
 * drawn (all -inf or NaN), the lowest allowed id is returned. */
int smp_sample_masked(const smp_params *p, smp_rng *rng, float *logits, int n_vocab, const smp_history *h,
                      const int32_t *eog_ids, int n_eog, const uint32_t *allow, smp_result *out);

#endif
