/*
 * engine_kv.h — how the engine lays out the KV cache of a model: the layer groups and their
 * retention rules (docs/kv-windows.md), the blocks of every group from a memory budget, what one
 * sequence needs at most, how many sequences fit, whether a request fits at all, and the start-up
 * lines that say so. engine.c calls it at engine_create, for its stats and for every submission.
 */
#ifndef KVSERVE_ENGINE_KV_H
#define KVSERVE_ENGINE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "cache/kv.h"
#include "model/model.h"

/* The KV cache's layout. */
typedef struct engine_kv {
    kv_geom g;                       /* geometry, layer groups and their rules */
    int32_t n_blocks[KV_MAX_GROUPS]; /* blocks of each layer group */
    int n_ctx;                       /* context limit in tokens */
    int max_batch_tokens;            /* tokens per step (a window group's chunk is at most one) */
} engine_kv;

/* The layer groups and their rules for model hp into kv->g (made by kv_geom_make; kv->n_ctx
 * set): the model's sliding-window layers form one KV_KEEP_WINDOW group per window size; the
 * other layers keep everything, or with kv_window > 0 sinks (kv_sinks) + a window
 * (KV_KEEP_SINKS), and are group 0; the windows follow in layer order. 0, or -1 with err filled
 * (a window that cannot hold its sinks plus one block or exceeds the context, too many layers,
 * too many kinds of retention). */
int engine_kv_groups(engine_kv *kv, const model_hparams *hp, int kv_window, int kv_sinks, char *err, size_t err_len);

/* The blocks of every layer group from budget_bytes, split so that every group holds the same
 * number of sequences. */
void engine_kv_blocks(engine_kv *kv, size_t budget_bytes);

/* 0 when the budget holds one sequence at its largest in every group (the full context, as vLLM
 * requires at start-up, or one window), else -1 with err filled. */
int engine_kv_check_budget(const engine_kv *kv, char *err, size_t err_len);

/* Sequences that fit at once at their largest (the group that runs out first decides). */
int64_t engine_kv_seq_capacity(const engine_kv *kv);

/* 1 when sinks + a window are on and no layer group keeps everything: sequences may run past
 * the context (a model's own sliding windows alone do not lift it). */
int engine_kv_is_unbounded(const engine_kv *kv);

/* 1 when a request of n_prompt tokens and up to max_tokens more fits: within the context (only
 * the prompt, when unbounded) and the blocks of every group that keeps everything. */
int engine_kv_can_hold(const engine_kv *kv, int64_t n_prompt, int64_t max_tokens);

/* The start-up lines about the KV cache of model hp (stderr): the formula, the blocks and the
 * capacity, and how the sliding layers share the budget. */
void engine_kv_log(const engine_kv *kv, const model_hparams *hp);

#endif
