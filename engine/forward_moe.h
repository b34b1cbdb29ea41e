/*
 * forward_moe.h — the mixture-of-experts FFN of the model graph (forward.c calls it for the
 * layers model_layer_is_moe names): the router, the routed experts through the backend's moe_ffn
 * (tokens grouped by expert, only the chosen experts read) and the shared experts of deepseek2.
 *
 *   logits = W_router · h (+ b)                  (gpt-oss: with a bias)
 *   out    = Σ_j w_j · expert_{e_j}(h)           (be_moe_route, backend.h)
 *          + down_sh(silu(gate_sh · h) · up_sh · h)   (deepseek2's shared experts)
 */
#ifndef KVSERVE_FORWARD_MOE_H
#define KVSERVE_FORWARD_MOE_H

#include <stddef.h>

#include "engine/backend.h"
#include "model/model.h"

typedef struct fwd_moe fwd_moe;

/* Uploads the routers, experts and shared experts of m's MoE layers to be and allocates their
 * scratch for batches of up to max_tokens rows. The model and backend are borrowed and must
 * outlive the result. NULL with a one-line message on failure (a backend without experts, out of
 * memory). */
fwd_moe *fwd_moe_create(const model *m, backend *be, int max_tokens, char *err, size_t err_len);
void fwd_moe_destroy(fwd_moe *x);

/* out [n][n_embd] = the routed experts of MoE layer li over the n rows of h [n][n_embd] (already
 * normed); h and out are activations. The shared experts' output (deepseek2) is added to the f32
 * residual stream resid [n][n_embd] at once. */
void fwd_moe_ffn(fwd_moe *x, int li, const void *h, int n, float *resid, void *out);

/* Weight bytes one token's decode reads in the MoE layers: routers, shared experts and n_used of
 * the n_expert routed experts (their average size). */
double fwd_moe_bytes_per_token(const fwd_moe *x);

#endif
