/*
 * smp_rows.h — one step's sampling work as plain data, the same on every backend: a row
 * descriptor per choice that draws (or prompt token that is scored) and one int32 arena holding
 * the rows' variable parts (masks and id lists). The host builds it (engine/sampling.c through
 * smp_row_fill), and a backend runs it: the CPU with engine/sampler.c's smp_rows_run, the GPU with
 * the kernels of cuda/sample_kernels.h. Both follow the one definition below, so the same logits
 * give the same tokens on both. Plain C, includable from C++ and CUDA.
 *
 *   rows:   [ r0: logits 0, SAMPLE, T 0.7, top_p 0.9, mask @0, ban @125 (2 ids) ]
 *           [ r1: logits 1, SCORE token 42, lp block 0 ]
 *           [ r2: logits 1, SAMPLE greedy, pending 3, rep @127 (5 ids) ]
 *   arena:  [ mask words of r0 … | ban ids of r0 | rep ids of r2 … ]
 *
 * What a SAMPLE row computes from its logit row (raw, n_vocab f32):
 *   1. log-probs (lp ≥ 0): log_softmax(raw) in double; the chosen token's, and the n_logprobs best
 *      (raw value descending, id ascending);
 *   2. the adjusted row l = raw, then in this order: tokens outside the mask to -inf; bias pairs
 *      added in order; the repetition penalty (l > 0 ? l / rep : l × rep) once on every id of
 *      rep_ids and on the pending token when it is not among them; the frequency and presence
 *      penalties l = (float)((double)l − ((double)freq × c + pres)) once per (id, count c) pair,
 *      the pending token counting one more (c = 1 when it is not among them); the ban ids to -inf;
 *   3. the token: temperature ≤ 0 is greedy (the largest l, lowest id on ties, NaN never wins);
 *      else, over the candidates (l > -inf) with weights w = exp((l − max) / T) in double:
 *      top_k keeps the k best by (l descending, id ascending); top_p keeps, of those, the shortest
 *      run in that order whose weight reaches top_p × their total; min_p keeps w ≥ min_p; then
 *      with u = rng_draw_uniform(seed + choice, position, 0, RNG_STREAM_SAMPLE) the survivors are
 *      walked in id order, accumulating w, and the first whose running sum exceeds u × their total
 *      is the token (the last survivor if rounding leaves none). No candidate, or none left by
 *      min_p: the greedy token;
 *   4. fallback ≥ 0 and the token's l is not above -inf (nothing allowed could be drawn): the
 *      token is fallback.
 * A SCORE row reports token's log-prob under raw, its rank (1 + the tokens scoring at least as
 * high, ties counting as above) and the n_logprobs best.
 *
 * Sums in double make the CPU's and the GPU's results differ only where a different order of
 * additions moves a running sum across u × total (or top_p × total): about once in 10^15 draws.
 */
#ifndef KVSERVE_SMP_ROWS_H
#define KVSERVE_SMP_ROWS_H

#include <stdint.h>

#define SMP_MAX_LOGPROBS 20

enum smp_row_kind {
    SMP_ROW_SAMPLE = 0, /* draw a token */
    SMP_ROW_SCORE = 1,  /* score a given token (prompt log-probs) */
};

/* A token and its log-probs: what a row reports. */
typedef struct smp_result {
    int32_t token;
    float logprob;                            /* of token under the raw distribution */
    int rank;                                 /* SCORE: 1 + tokens scoring at least as high (ties
                                                 count as above, as vLLM ranks); else 0 */
    int n_top;
    int32_t top_ids[SMP_MAX_LOGPROBS];        /* best first */
    float top_logprobs[SMP_MAX_LOGPROBS];
} smp_result;

/* One row of a step's sampling. Offsets are int32 indices into the step's arena; a list with
 * count 0 has no offset. */
typedef struct smp_row {
    uint64_t seed;        /* the request's seed */
    uint32_t choice;      /* the choice index (n > 1): the draws' key is seed + choice */
    int32_t position;     /* the index of the drawn token in its sequence */
    int32_t logits;       /* the logit row it reads */
    int32_t kind;         /* enum smp_row_kind */
    int32_t token;        /* SCORE: the token scored */
    int32_t n_logprobs;   /* alternatives reported, 0 .. SMP_MAX_LOGPROBS */
    int32_t lp;           /* its smp_result block in the step's results, or -1 (no log-probs) */
    float temperature;    /* ≤ 0: greedy */
    int32_t top_k;        /* ≤ 0: off */
    float top_p;          /* ≥ 1: off */
    float min_p;          /* ≤ 0: off */
    float rep;            /* repetition penalty (1: off) */
    float freq, pres;     /* frequency and presence penalties (0: off) */
    int32_t pending;      /* -1, or the row of the previous step's results whose token is the last
                             of the history (not yet known to the host: the penalties count it) */
    int32_t fallback;     /* the token when nothing can be drawn (a grammar's lowest allowed id),
                             or -1 */
    int32_t mask;         /* allowed-token bitmask, ceil(n_vocab / 32) words (bit id % 32 of word
                             id / 32), or -1: every token allowed */
    int32_t ban, n_ban;   /* ids set to -inf last (bad words, min_tokens' end ids) */
    int32_t bias, n_bias; /* (id, f32 bits) pairs added in order (logit_bias) */
    int32_t rep_ids, n_rep;   /* distinct ids the repetition penalty applies to */
    int32_t freq_ids, n_freq; /* (id, count) pairs of the known output (distinct ids) */
} smp_row;

/* A step's sampling: rows[0 .. n_rows) over logit rows of n_vocab, their arena, and n_lp
 * log-prob blocks (the rows with lp ≥ 0 number them 0 .. n_lp - 1). */
typedef struct smp_batch {
    int32_t n_rows;
    const smp_row *rows;
    int32_t n_arena;
    const int32_t *arena;
    int32_t n_lp;
    int32_t n_vocab;
} smp_batch;

/* Words of a bitmask over n tokens. */
static inline int32_t smp_mask_words(int32_t n)
{
    return (n + 31) / 32;
}

#endif
