/*
 * batch.h — turns one scheduler step (a list of sequences and how many new tokens each
 * computes) into the flat varlen be_batch the backend runs.
 *
 *   step:   [ (A, 3 prefill) (B, 1 decode) (C, 1 decode) ]
 *   tokens: [ a5 a6 a7 | b9 | c4 ]   q_start [0 3 4 5]   positions: token indices
 *   per layer group g (kv[g]):
 *     ctx_len:  each sequence's cache length in g after the step (token count less what g dropped)
 *     slots:    bt[k / bs] * bs + k % bs for each new token's cache index k
 *     sinks:    under KV_KEEP_SINKS once entries were dropped: the sink entries and the shift
 *   logit_rows: per sequence in order, its prompt log-prob rows (lp_from .. + lp_rows), then its
 *               last token when its step ends at its last known token
 *
 * The buffers are sized once (max tokens, max sequences) and reused every step; the built
 * be_batch borrows them until the next batch_build. Engine thread only.
 */
#ifndef KVSERVE_BATCH_H
#define KVSERVE_BATCH_H

#include <stdint.h>

#include "cache/kv.h"
#include "engine/backend.h"
#include "engine/seq.h"

typedef struct batch_entry {
    seq *s;
    int n_new;   /* tokens computed this step: s->tokens[s->n_computed .. + n_new) */
    int samples; /* 1 when the step ends at s->n_tokens (a logit row is produced) */
    int lp_from, lp_rows; /* prompt log-probs: logit rows for new tokens lp_from .. + lp_rows
                             (offsets into this step's tokens), before the sampling row */
    int n_draft; /* speculative decoding: the last n_draft of the n_new tokens are s->draft's
                    (read from s->tokens past n_tokens); a sampling entry then has a logit row for
                    each of its last n_draft + 1 tokens */
} batch_entry;

/* The buffers of one layer group. */
typedef struct batch_kv {
    int32_t *slots;        /* [max_tokens] */
    int32_t *ctx_len;      /* [max_seqs] */
    int32_t *sinks;        /* [max_seqs] */
    int32_t *sink_shift;   /* [max_seqs] */
    int32_t *block_table;  /* [max_seqs][bt_cap / max_seqs] grown as needed */
    int64_t bt_cap;
} batch_kv;

typedef struct batch_buf {
    int max_tokens, max_seqs, max_logits;
    int32_t *tokens, *positions;          /* [max_tokens] */
    int32_t *q_start;                     /* [max_seqs + 1] */
    int32_t *logit_rows;                  /* [max_logits] */
    batch_kv kv[KV_MAX_GROUPS];
    be_batch b;                           /* the batch built last */
} batch_buf;

/* Allocates buffers for steps of up to max_tokens tokens and max_seqs sequences. 0 or -ENOMEM. */
int batch_init(batch_buf *bb, int max_tokens, int max_seqs, int max_logits);
void batch_fini(batch_buf *bb);

/* Fills bb->b from the entries (in order), for the n_groups layer groups (0 means 1) whose
 * retention rules are rules[] (NULL: every group keeps everything). Each entry's sequence must
 * already hold, in every group, the blocks for its new tokens. Returns 0, -EINVAL when the step
 * exceeds the buffers, or -ENOMEM. */
int batch_build(batch_buf *bb, const batch_entry *e, int n, int block_size, int n_groups, const kv_rule *rules);

#endif
