/*
 * spec.h — speculative decoding: the proposer interface and the n-gram (prompt lookup) proposer.
 *
 *   sequence:  [ prompt ............ | output ....... t ]          n_tokens
 *   proposer:                                         [ d0 d1 d2 ]  up to k guesses of what follows
 *   verify row (one varlen row of the ordinary step):
 *              tokens [ t  d0 d1 d2 ] at positions n_tokens-1 .. n_tokens+2, a logit row for each
 *   sample:    one ordinary sampling row per logit row (position n_tokens + j, history with
 *              d0 .. d(j-1) as if accepted) draws x0 x1 x2 x3
 *   accept:    x0 always; x(j+1) while x(j) = d(j). The KV of rejected drafts is cut off the block
 *              table before anything is offered to the prefix cache.
 *
 * Exactness. A proposal is a point mass q = δ(d). Rejection sampling with a point mass accepts d
 * with probability min(1, p(d)/q(d)) = p(d) and otherwise draws from the normalised residual
 * max(0, p - q) / Σ = p without d. Drawing x ~ p with the row's own key and accepting d when
 * x = d is that same test, with the same two outcome distributions, so the engine runs it that
 * way: each verify row is an ordinary sampling row, keyed as plain decoding keys the token at
 * that position (sampler.h: (seed + choice, position)). A seeded request therefore produces the
 * very tokens it produces without speculation, greedy or sampled, as long as the verify row's
 * logits equal plain decoding's (docs/speculative.md says where the CPU kernels guarantee it).
 * A proposer is free in how it guesses; the draft model guesses what the sequence's sampler would
 * draw from its own logits with the same random number, which couples its guess with the
 * target's draw (spec_draft.c).
 *
 * Proposers implement spec_proposer. They are called on the engine thread by the scheduler's
 * planning (sched_config.propose) for sequences that decode one token this step and hold no
 * pending token. The n-gram proposer keeps no state; a model proposer (a draft model, an
 * EAGLE/MTP head) would keep its own KV per sequence and drop it in release.
 */
#ifndef KVSERVE_SPEC_H
#define KVSERVE_SPEC_H

#include <stdint.h>

#include "engine/seq.h"
#include "model/model.h"

struct backend; /* engine/backend.h */

enum spec_method { SPEC_OFF = 0, SPEC_NGRAM = 1, SPEC_DRAFT = 2 };

/* Most draft tokens a sequence may verify in one step (seq.draft's size). */
#define SPEC_MAX_K SEQ_MAX_DRAFT

typedef struct spec_config {
    int method;           /* enum spec_method */
    int k;                /* num_speculative_tokens: the most drafts per sequence and step, 1 .. SPEC_MAX_K */
    int ngram_min;        /* shortest suffix the n-gram proposer matches (≥ 1) */
    int ngram_max;        /* longest (≥ ngram_min) */
    int disable_batch;    /* no proposals in a step planned with more decoding sequences than this
                             (0: the device's default, engine.c) */
} spec_config;

typedef struct spec_proposer spec_proposer;

typedef struct spec_ops {
    /* For each of the step's n speculating sequences s[i]: up to k[i] (≥ 1) guesses of the
     * tokens that follow its known tokens into s[i]->draft, and how many into n_out[i] (0: no
     * proposal, it decodes one token as usual). All at once, so a model proposer runs its steps
     * for all of them as one batch. Changes nothing of the sequences but their draft arrays and
     * spec_state, the proposer's own slot. */
    void (*propose)(spec_proposer *p, seq *const *s, const int *k, int n, int *n_out);
    /* s finished: drop whatever the proposer keeps for it (s->spec_state). May be NULL. */
    void (*release)(spec_proposer *p, seq *s);
    void (*destroy)(spec_proposer *p);
} spec_ops;

struct spec_proposer {
    const spec_ops *ops;
};

/* Fills c with the defaults: off, k 4, n-grams 2 .. 4, disable_batch 0 (the device's default). */
void spec_config_default(spec_config *c);
/* Parses "ngram", "draft", "off" into *method. 0 or -EINVAL. */
int spec_method_parse(const char *s, int *method);
const char *spec_method_name(int method);

/* The draft-model proposer's setting. */
typedef struct spec_draft_config {
    model *m;               /* the draft model: owned by the proposer once it is created */
    struct backend *(*make_backend)(const char *device, int n_threads, char *err, size_t err_len);
    const char *device;     /* the target's device: the draft runs on its own instance of it */
    struct backend *target; /* the target's backend: its sibling (be_ops.sibling) when it has one */
    int n_threads;
    size_t kv_bytes;        /* the draft's share of the KV budget */
    int max_seqs;           /* most sequences one proposal call drafts for as one batch */
    int kv_dtype, block_size;
    int n_ctx;              /* the context limit (the share must hold one sequence at it) */
    int max_tokens;         /* tokens per draft step (its prefill chunk) */
    const int32_t *eog;     /* [n_eog] end-of-generation ids (borrowed: min_tokens bans them) */
    int n_eog;
} spec_draft_config;

/* The draft-model proposer. NULL with a message in err (c->m stays the caller's then). */
spec_proposer *spec_draft_create(const spec_draft_config *c, char *err, size_t err_len);
/* Tokens the draft proposer p (made by spec_draft_create) took from its prefix cache instead of
 * computing them. */
int64_t spec_draft_cached_tokens(const spec_proposer *p);
/* KV bytes per token of model m's cache in blocks of block_size of kv_dtype. */
size_t spec_draft_bytes_per_token(const model *m, int block_size, int kv_dtype);

/* The n-gram proposer over c's sizes (copied). NULL on -ENOMEM. */
spec_proposer *spec_ngram_create(const spec_config *c);

/* Prompt lookup over t[0 .. n): for m from n_max down to n_min, the latest earlier occurrence of
 * the last m tokens (starting before n - m); the up to k tokens that followed it (never past
 * n) go to out. Returns how many (0 when no suffix of those lengths recurs). Pure. */
int spec_ngram_lookup(const int32_t *t, int n, int n_min, int n_max, int k, int32_t *out);

/* The next speculative length of a sequence that proposed n_draft and had `accepted` of them
 * accepted, under the cap k_max: one more after a full acceptance, one past what was accepted
 * otherwise (so a sequence whose guesses keep failing proposes one token at a time). */
static inline int spec_next_k(int cur, int n_draft, int accepted, int k_max)
{
    int k = accepted >= n_draft ? cur + 1 : accepted + 1;
    return k < 1 ? 1 : k > k_max ? k_max : k;
}

#endif
