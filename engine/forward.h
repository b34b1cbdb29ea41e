/*
 * forward.h — the Llama/Qwen2 model graph, written once against backend.h.
 *
 * Per layer:  h = x + Wo·attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x))   with n = RMSNorm
 *             x = h + Wdown·(silu(Wgate·n(h)) * Wup·n(h))
 * then the final norm and the LM head for the batch's logit rows only. A layer whose group has
 * attention sinks that moved also rotates its queries to meet them (rope_shift, backend.h).
 */
#ifndef KVSERVE_FORWARD_H
#define KVSERVE_FORWARD_H

#include <stddef.h>

#include "cache/kv.h"
#include "engine/backend.h"
#include "model/model.h"

typedef struct fwd fwd;

/* Uploads the model's weights to be, allocates the KV arena (n_blocks[k] blocks of layer group
 * k of geometry g) and the
 * activation scratch for batches of up to max_tokens tokens and max_logits logit rows.
 * The model and backend are borrowed and must outlive the fwd. NULL with a message on failure. */
fwd *fwd_create(const model *m, backend *be, const kv_geom *g, const int32_t *n_blocks, int max_tokens,
                int max_logits, char *err, size_t err_len);
void fwd_destroy(fwd *f);

/* Runs one step over the batch: writes the new tokens' K/V into their slots and the logits of
 * the logit rows into logits [n_logits][n_vocab] (host memory). 0 or a negative errno.
 * The same as fwd_begin, fwd_launch and the backend's to_host. */
int fwd_run(fwd *f, const be_batch *b, float *logits);

/* The two halves of a step that leaves its logits in backend memory (for the backend's sample
 * op): fwd_begin checks the batch and hands it to the backend (its metadata upload); fwd_launch
 * queues the model graph and points *logits at the logit rows (backend memory, [n_logits][n_vocab],
 * valid until the next step; NULL when the batch has none). On a device both return once the
 * work is queued. 0 or a negative errno. */
int fwd_begin(fwd *f, const be_batch *b);
int fwd_launch(fwd *f, const float **logits);
/* After fwd_run: the hidden states of the step's first n_rows tokens after the final norm
 * (what llama.cpp pools for embeddings), as f32 into out [n_rows][n_embd] (host memory), for
 * pooled sequences. Uses the normed-input scratch, which the step no longer needs. 0 or a
 * negative errno. */
int fwd_hidden(fwd *f, int n_rows, float *out);

backend *fwd_backend(fwd *f);

/* Bytes of weights one decode step reads (the whole of every matrix and vector of the layers and
 * the LM head, one row of the embedding), as the backend stores them: the numerator of a decode
 * step's bandwidth bound. */
double fwd_weight_bytes_per_token(const fwd *f);

#endif
