/*
 * sampling.h — an engine step's sample phase: from the step's logit rows to what each planned
 * sequence produced. It runs between the forward, which wrote the rows, and the scheduler's
 * commit, which applies the results (engine.c calls the three in that order).
 *
 *   plan:     [ (A: prefill, 2 prompt log-prob rows) (B: decode) (C: prompt done, n = 3) ]
 *   rows:     [ A A | B | C ]                               (batch.h: logit_rows, plan order)
 *   results:  [ A PROMPT  A PROMPT | B TOKEN | C TOKEN  C' TOKEN  C" TOKEN ]
 *                                               └ C' and C": children born here (parent C)
 *
 * Per planned sequence, in plan order: each prompt log-prob row scores the prompt token after
 * its position (prompt token 0, which has no log-prob, is reported once, as NaN); when the
 * sequence's step ended at its last token (the entry samples) it draws one token from its
 * sampling row, under its grammar's mask when constrained (a mask that allows nothing halts the
 * choice; a drawn token the grammar then rejects halts it with an error), with its own random
 * stream. An n > 1 sequence whose prompt is done forks here: n - 1 children are cloned, each
 * with its own random stream (seeded seed + index) and grammar state, and every choice draws
 * from the same row; the children join the scheduler at its commit. A sequence that only
 * scores its prompt (max_tokens 0) ends without a token.
 *
 * What this phase changes: the random streams and grammar states of the sequences that drew,
 * and at a fork the parent's choice count and the children it creates. Everything else (the
 * tokens, computed counts, the scoring cursor, finish reasons, blocks, lists) is the commit's,
 * which is what lets the results come from elsewhere later (a device sampler) and the commit
 * stay the same. Engine thread only.
 */
#ifndef KVSERVE_SAMPLING_H
#define KVSERVE_SAMPLING_H

#include <stdint.h>

#include "engine/batch.h"
#include "engine/sampler.h"
#include "engine/seq.h"

enum sampling_kind {
    SAMPLING_TOKEN = 0, /* r: the drawn token (already accepted by the sequence's grammar) */
    SAMPLING_PROMPT,    /* r: prompt token `pos` scored (logprob NaN for pos 0, which has none) */
    SAMPLING_END,       /* the sequence finished without a token (max_tokens 0 after scoring) */
    SAMPLING_HALT,      /* one choice finished without a token: its grammar allows none, or
                           rejected what was drawn; `finish` says stop, length or error */
};

/* One result of a step for one sequence. */
typedef struct sampling_out {
    seq *s;         /* the sequence (a fork's child the first time it appears) */
    seq *parent;    /* a child born in this phase: the sequence it forked from (the commit
                       makes it join the scheduler with its parent's blocks); else NULL */
    smp_result r;   /* the token and its log-probs */
    int kind;       /* enum sampling_kind */
    int pos;        /* SAMPLING_PROMPT: the prompt index scored */
    int finish;     /* SAMPLING_HALT: why the choice ended (enum engine_finish) */
} sampling_out;

typedef struct sampling_stats {
    int64_t grammar_masks;   /* token masks computed for constrained sequences */
    int64_t grammar_mask_us; /* time spent computing them */
} sampling_stats;

typedef struct sampling sampling;

/* A sample phase for logit rows of n_vocab entries; eog_ids[n_eog] (borrowed, must outlive it)
 * are the end-of-generation ids that min_tokens bans. NULL on -ENOMEM. */
sampling *sampling_create(int n_vocab, const int32_t *eog_ids, int n_eog);
void sampling_destroy(sampling *sp);

/* Runs the phase over the step's plan e[0 .. n) (as sched_schedule gave it, before the commit)
 * and its logit rows, logits [rows][n_vocab] in batch_build's order. Returns the number of
 * results (≥ 0) and points *out at them (valid until the next call; the children they name are
 * the commit's to adopt), or -ENOMEM (then no child exists, but random streams and grammar
 * states may have advanced: the step cannot be committed). */
int sampling_step(sampling *sp, const batch_entry *e, int n, const float *logits, sampling_out **out);

void sampling_get_stats(const sampling *sp, sampling_stats *out);

#endif
