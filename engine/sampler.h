/*
 * sampler.h — from one row of logits to one token, per request parameters.
 *
 * Order (as vLLM / llama.cpp): grammar mask (smp_sample_masked), allowed_token_ids and
 * bad_words masks → logit_bias → repetition/presence/frequency penalties → min_tokens
 * (end-of-generation and stop token ids banned) → greedy if temperature == 0 → temperature →
 * top_k → top_p → min_p → draw. Log-probabilities reported to clients are of the model's raw
 * distribution
 * (log_softmax of the unmodified logits), as vLLM reports them.
 *
 * PRNG: each sequence owns a xoshiro256** state seeded through splitmix64 from the request's seed
 * (and the choice index), so the same seed gives the same tokens whatever else is in the batch.
 */
#ifndef KVSERVE_SAMPLER_H
#define KVSERVE_SAMPLER_H

#include <stdint.h>

#include "base/rng.h"

#define SMP_MAX_LOGPROBS 20

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

typedef struct smp_rng {
    uint64_t s[4];
} smp_rng;

void smp_rng_seed(smp_rng *r, uint64_t seed);
uint64_t smp_rng_next(smp_rng *r);
/* Uniform in [0, 1). */
double smp_rng_uniform(smp_rng *r);

typedef struct smp_result {
    int32_t token;
    float logprob;                            /* of token under the raw distribution */
    int rank;                                 /* smp_score: 1 + tokens scoring above token (ties
                                                 count as above, as vLLM ranks); else 0 */
    int n_top;
    int32_t top_ids[SMP_MAX_LOGPROBS];        /* best first */
    float top_logprobs[SMP_MAX_LOGPROBS];
} smp_result;

/* Context the penalties need: the sequence's prompt and output token ids. */
typedef struct smp_history {
    const int32_t *prompt;
    int n_prompt;
    const int32_t *output;
    int n_output;
} smp_history;

/* The log-prob of token under the raw distribution logits[n_vocab] (no penalties, bias or
 * temperature) and the n_top best alternatives, into *out (out->token = token): how a prompt
 * token is scored for echo + logprobs. */
void smp_score(const float *logits, int n_vocab, int32_t token, int n_top, smp_result *out);

/* Samples from logits[n_vocab] (modified in place as scratch). eog ids and p->stop_ids are
 * banned while n_output < min_tokens. Fills *out; always succeeds. */
void smp_sample(const smp_params *p, smp_rng *rng, float *logits, int n_vocab,
                const smp_history *h, const int32_t *eog_ids, int n_eog, smp_result *out);

/* smp_sample under a token mask (a grammar's, grammar/grammar.h layout: bit id % 32 of word
 * id / 32 is token id; NULL: no mask). Tokens outside it are set to -inf before logit_bias,
 * the penalties and every filter, so they can never be drawn; when the mask allows nothing but
 * end-of-generation ids, min_tokens does not ban them (the output is complete). Reported
 * log-probabilities stay those of the raw distribution. When no allowed token can be drawn
 * (all -inf or NaN), the lowest allowed id is returned. */
void smp_sample_masked(const smp_params *p, smp_rng *rng, float *logits, int n_vocab,
                       const smp_history *h, const int32_t *eog_ids, int n_eog,
                       const uint32_t *allow, smp_result *out);

#endif
