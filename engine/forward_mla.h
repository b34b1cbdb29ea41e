/*
 * forward_mla.h — multi-head latent attention in the model graph (deepseek2; forward.c calls it
 * instead of its q/k/v attention when the model's hparams say mla). Per layer, for the n rows of
 * h (the normed residual stream):
 *
 *   q      = W_q · h                          (or W_q_b · rmsnorm(W_q_a · h) with a q LoRA)
 *   kv     = W_kv_a · h                       [latent c (kv_lora) | shared RoPE key (rope)]
 *   q_lat, k_lat = mla_qk(q, kv)              per head [k_b_h · q_nope | rope(q_pe)], [norm(c) | rope(k_pe)]
 *   store k_lat (the latent KV layout: one vector per token), o = attention(q_lat) over it as MQA
 *   out    = W_o · concat_h(v_b_h · o_h[0 .. kv_lora))
 *
 * which is the naive attention with per-head keys [A_hᵀ c | k_pe] and values B_h c, computed in
 * the latent space (the up-projections absorbed into the query and the output).
 */
#ifndef KVSERVE_FORWARD_MLA_H
#define KVSERVE_FORWARD_MLA_H

#include <stddef.h>

#include "engine/backend.h"
#include "model/model.h"

typedef struct fwd_mla fwd_mla;

/* Uploads every layer's MLA projections to be (W_q and W_o are forward.c's) and allocates the
 * scratch for up to max_tokens rows. Borrowed model and backend. NULL with a message on failure
 * (a backend without MLA, out of memory). */
fwd_mla *fwd_mla_create(const model *m, backend *be, int max_tokens, char *err, size_t err_len);
void fwd_mla_destroy(fwd_mla *x);

/* out [n][n_embd] = layer li's attention of h [n][n_embd]: wq is its plain query projection
 * (data NULL with a q LoRA), wo its output projection, at its be_attn (scale, window, sinks);
 * the layer's latent KV is stored on the way. */
void fwd_mla_attention(fwd_mla *x, int li, const void *h, int n, const be_weight *wq, const be_weight *wo,
                       const be_attn *at, void *out);

/* Weight bytes of the latent attention's own projections (all of them, every layer). */
double fwd_mla_bytes_per_token(const fwd_mla *x);

#endif
