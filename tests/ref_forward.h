/*
 * ref_forward.h — a naive float64 forward pass of any model, for tests.
 *
 * Weights are dequantised once (exactly, through model_tensor_row_f32) into double; every
 * sequence keeps its own contiguous K/V history, so nothing here shares code or layout with the
 * paged backends it checks. Optionally K/V are rounded to the KV dtype on store, to compare with
 * a backend that caches f16 values. Slow and memory-hungry by design: small models only.
 */
#ifndef KVSERVE_TEST_REF_FORWARD_H
#define KVSERVE_TEST_REF_FORWARD_H

#include <stdint.h>

#include "model/model.h"

typedef struct rf_model rf_model;
typedef struct rf_seq rf_seq;

/* Dequantises every weight of m (borrowed for the call only). kv_round: -1 = keep K/V in double,
 * or an enum kv_dtype to round stored K/V through (KV_F16, KV_BF16, KV_F32). NULL on OOM. */
rf_model *rf_create(const model *m, int kv_round);
void rf_destroy(rf_model *r);

/* A sequence that can hold max_ctx tokens. */
rf_seq *rf_seq_create(const rf_model *r, int max_ctx);
/* A sequence under attention sinks + a window (StreamingLLM) as its paper defines it, written
 * independently of the scheduler: the cache holds at most `window` entries; when the next token
 * would pass that, the block_size entries after the first ceil(sinks / block_size) × block_size
 * leave it; every key is rotated at its position within the cache, the query at its own. Any
 * number of tokens can be fed. */
rf_seq *rf_seq_create_window(const rf_model *r, int window, int sinks, int block_size);
void rf_seq_destroy(rf_seq *s);
/* Tokens fed so far (the next position). */
int rf_seq_len(const rf_seq *s);

/* Feeds one token at the next position; writes the n_vocab logits when logits is non-NULL. */
void rf_step(const rf_model *r, rf_seq *s, int32_t token, double *logits);

/* The same, and the token's hidden state after the final norm (what embeddings pool) into
 * hidden[n_embd] when it is non-NULL. */
void rf_step_hidden(const rf_model *r, rf_seq *s, int32_t token, double *logits, double *hidden);

/* Index of the largest of n values, lowest on ties. */
int rf_argmax(const double *x, int n);

#endif
