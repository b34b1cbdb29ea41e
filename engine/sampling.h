/*
 * sampling.h — an engine step's sample phase: from the step's logit rows to what each planned
 * sequence produced. It runs between the forward, which wrote the rows, and the scheduler's
 * commit, which applies the results.
 *
 *   plan:     [ (A: prefill, 2 prompt log-prob rows) (B: decode) (C: prompt done, n = 3) ]
 *   logits:   [ A A | B | C ]                               (batch.h: logit_rows, plan order)
 *   rows:     [ A SCORE  A SCORE | B SAMPLE | C SAMPLE  C' SAMPLE  C" SAMPLE ]   (smp_rows.h)
 *   results:  [ A PROMPT  A PROMPT | B TOKEN | C TOKEN  C' TOKEN  C" TOKEN ]
 *                                               └ C' and C": children born here (parent C)
 *
 * The phase has two halves around the backend, which runs the rows (the sampler as a backend op:
 * on the GPU only token ids and the requested log-probs cross the bus):
 *   prepare (before the step is launched): per planned sequence, in plan order, a SCORE row per
 *            prompt log-prob row (prompt token 0, which has no log-prob, is reported once, as
 *            NaN, without a row); when the sequence's step ends at its last token (the entry
 *            samples) a SAMPLE row per choice, under its grammar's mask when constrained (a mask
 *            that allows nothing halts the choice without a row). An n > 1 sequence whose prompt
 *            is done forks here: n - 1 children are cloned (each with its choice's key and its
 *            own grammar state), and every choice draws from the same logit row. A sequence that
 *            only scores its prompt (max_tokens 0) ends without a token. prepare also lists the
 *            draws (the sequences that will hold a pending token, and the children with their
 *            parent) for the scheduler's structural commit (sched_advance).
 *   finish   (once the backend's results are back): one result per slot, in the same order; a
 *            drawn token the grammar rejects halts its choice with an error.
 * A verify entry (speculative decoding, engine/spec.h) has a SAMPLE row per logit row: row j draws
 * the token j places past the sequence's known ones, with the drafts before it in its history
 * (and, constrained, the mask after them). finish keeps row j's result only while every draw
 * before it equalled its draft (result field spec = j), so the results are the accepted run.
 * sampling_step does both with the rows run on the host (tests, and backends without a sample op).
 *
 * What this phase changes: the grammar states of the sequences that drew (at finish), and at a
 * fork the parent's choice count and the children it creates (at prepare). Everything else (the
 * tokens, computed counts, the scoring cursor, finish reasons, blocks, lists) is the commit's.
 * Between prepare and finish the phase holds the step's rows and slots; an overlapped engine keeps
 * two of these objects, one per step in flight. Engine thread only.
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
    SAMPLING_SKIP,      /* a verified token past its sequence's end (a stop earlier in the same
                           run): set by sched_apply, no event */
};

/* One result of a step for one sequence. */
typedef struct sampling_out {
    seq *s;         /* the sequence (a fork's child the first time it appears) */
    seq *parent;    /* a child born in this phase: the sequence it forked from; else NULL */
    smp_result r;   /* the token and its log-probs */
    int kind;       /* enum sampling_kind */
    int pos;        /* SAMPLING_PROMPT: the prompt index scored */
    int finish;     /* SAMPLING_HALT: why the choice ended (enum engine_finish) */
    int spec;       /* speculative decoding: 0 for a sequence's first token of the step, j ≥ 1 for
                       the token after its accepted draft j - 1 (engine/spec.h) */
    int fin;        /* set by sched_apply: the sequence's finish reason right after this result
                       (0: it goes on), so each token of an accepted run reports its own end */
    double cum;     /* set by sched_apply: the sequence's cum_logprob after this result */
    int at;         /* set by sched_apply: the token's index in s->tokens (-1: none appended) */
} sampling_out;

/* What the scheduler's structural commit needs of a prepared step, per slot that changes a
 * sequence's structure: a sequence that draws this step (its token pends as row `row` of the
 * results until sched_apply; -1: no row, a halt), for a child born at the fork its parent (it
 * joins the running sequences), and for a scored prompt token the scoring cursor after it. */
typedef struct sampling_draw {
    seq *s;
    seq *parent;
    int32_t row;
    int32_t scored;  /* ≥ 0: s's scoring cursor (plp_next) becomes this; -1: unchanged */
} sampling_draw;

/* A prepared step: the rows for the backend and the draws for sched_advance (valid until the
 * next prepare or sampling_step of the same object). */
typedef struct sampling_plan {
    smp_batch rows;                /* for be_ops.sample (or smp_rows_run) */
    const sampling_draw *draws;
    int n_draws;
    int sync;                      /* 1: a sequence of this step needs its token on the host
                                      before its next row is filled (a grammar, or bad words
                                      longer than one token): the next step must not be prepared
                                      before this one's results are applied */
} sampling_plan;

typedef struct sampling_stats {
    int64_t grammar_masks;   /* token masks computed for constrained sequences */
    int64_t grammar_mask_us; /* time spent computing them */
} sampling_stats;

typedef struct sampling sampling;

/* A sample phase for logit rows of n_vocab entries; eog_ids[n_eog] (borrowed, must outlive it)
 * are the end-of-generation ids that min_tokens bans. NULL on -ENOMEM. */
sampling *sampling_create(int n_vocab, const int32_t *eog_ids, int n_eog);
/* Destroys it (and any child still owned by an unfinished prepare). */
void sampling_destroy(sampling *sp);

/* The first half over the step's plan e[0 .. n) (as sched_schedule gave it, before any commit):
 * fills *p. Children born here belong to the phase until the commit adopts them (sched_advance
 * joins them; the engine then owns them) or sampling_drop_children destroys them. Each
 * sequence named by a slot counts one more flight (seq.h) until its result is finished. 0, or
 * -ENOMEM (nothing prepared, no child exists). */
int sampling_prepare(sampling *sp, const batch_entry *e, int n, sampling_plan *p);

/* The children of the last prepare joined the scheduler (sched_advance): from now on they are
 * their request's, and sampling_drop_children no longer destroys them. */
void sampling_adopt(sampling *sp);

/* Gives up the last prepare before its finish: destroys its children unless adopted and ends
 * every flight it counted. */
void sampling_drop_children(sampling *sp);

/* The second half: ids[row] (the token of each row) and lps[lp] (the log-prob blocks) as the
 * backend returned them for the prepared rows. Returns the number of results (≥ 0) and points
 * *out at them (valid until the next prepare); the flights the prepare counted end here. */
int sampling_finish(sampling *sp, const int32_t *ids, const smp_result *lps, sampling_out **out);

/* prepare, the rows run on the host over logits [rows][n_vocab] in batch_build's order, and
 * finish: the whole phase for a step whose results are committed at once (sched_commit). The
 * results' parent fields name the children born here. Returns the number of results or
 * -ENOMEM (then no child exists). */
int sampling_step(sampling *sp, const batch_entry *e, int n, const float *logits, sampling_out **out);

void sampling_get_stats(const sampling *sp, sampling_stats *out);

#endif
