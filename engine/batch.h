/*
 * batch.h — turns one scheduler step (a list of sequences and how many new tokens each
 * computes) into the flat varlen be_batch the backend runs.
 *
 *   step:   [ (A, 3 prefill) (B, 1 decode) (C, 1 decode) ]
 *   tokens: [ a5 a6 a7 | b9 | c4 ]   q_start [0 3 4 5]   ctx_len [8 10 5]
 *   slots:  block_table[s][pos / bs] * bs + pos % bs for each new token
 *   logit_rows: per sequence in order, its prompt log-prob rows (lp_from .. + lp_rows), then its
 *               last token when its step ends at its last known token
 *
 * The buffers are sized once (max tokens, max sequences) and reused every step; the built
 * be_batch borrows them until the next batch_build. Engine thread only.
 */
#ifndef KVSERVE_BATCH_H
#define KVSERVE_BATCH_H

#include <stdint.h>

#include "engine/backend.h"
#include "engine/seq.h"

typedef struct batch_entry {
    seq *s;
    int n_new;   /* tokens computed this step: s->tokens[s->n_computed .. + n_new) */
    int samples; /* 1 when the step ends at s->n_tokens (a logit row is produced) */
    int lp_from, lp_rows; /* prompt log-probs: logit rows for new tokens lp_from .. + lp_rows
                             (offsets into this step's tokens), before the sampling row */
} batch_entry;

typedef struct batch_buf {
    int max_tokens, max_seqs, max_logits;
    int32_t *tokens, *positions, *slots; /* [max_tokens] */
    int32_t *q_start;                     /* [max_seqs + 1] */
    int32_t *ctx_len;                     /* [max_seqs] */
    int32_t *logit_rows;                  /* [max_logits] */
    int32_t *block_table;                 /* [max_seqs][bt_cap / max_seqs] grown as needed */
    int64_t bt_cap;
    be_batch b;                           /* the batch built last */
} batch_buf;

/* Allocates buffers for steps of up to max_tokens tokens and max_seqs sequences. 0 or -ENOMEM. */
int batch_init(batch_buf *bb, int max_tokens, int max_seqs, int max_logits);
void batch_fini(batch_buf *bb);

/* Fills bb->b from the entries (in order). Each entry's sequence must already hold the blocks for
 * its new tokens. Returns 0, -EINVAL when the step exceeds the buffers, or -ENOMEM. */
int batch_build(batch_buf *bb, const batch_entry *e, int n, int block_size);

#endif
