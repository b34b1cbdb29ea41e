/*
 * engine_kv.c — the KV cache's layout for a model (see engine_kv.h). Pure arithmetic over the
 * model's layers, the geometry and the budget; the engine owns the result.
 */
#include "engine/engine_kv.h"

#include <stdio.h>
#include <string.h>

int engine_kv_groups(engine_kv *kv, const model_hparams *hp, int kv_window, int kv_sinks, char *err, size_t err_len)
{
    kv_geom *geo = &kv->g;
    int bs = geo->block_size;
    kv_rule full = {KV_KEEP_ALL, 0, 0};
    if (kv_window > 0) {
        kv_rule r = {KV_KEEP_SINKS, kv_window, kv_sinks};
        if (kv_sinks < 0 || kv_window > kv->n_ctx || kv_window < (kv_sink_blocks(&r, bs) + 1) * bs) {
            snprintf(err, err_len,
                     "kv-window %d with kv-sinks %d: the window must hold the sinks (rounded up to blocks of %d) "
                     "plus one block, and at most the context length %d",
                     kv_window, kv_sinks, bs, kv->n_ctx);
            return -1;
        }
        full = r;
    }
    if (hp->n_layers > KV_MAX_LAYERS) {
        snprintf(err, err_len, "%d layers: the KV cache handles at most %d", hp->n_layers, KV_MAX_LAYERS);
        return -1;
    }
    int ng = 0;
    if (model_n_swa_layers(hp) < hp->n_layers) geo->rule[ng++] = full; /* group 0: the full layers */
    for (int l = 0; l < hp->n_layers; l++) {
        int w = model_layer_window(hp, l), g = 0;
        kv_rule r = w > 0 ? (kv_rule){KV_KEEP_WINDOW, w, 0} : full;
        while (g < ng && memcmp(&geo->rule[g], &r, sizeof r)) g++;
        if (g == ng) {
            if (ng == KV_MAX_GROUPS) {
                snprintf(err, err_len, "more than %d kinds of KV retention across the layers", KV_MAX_GROUPS);
                return -1;
            }
            geo->rule[ng++] = r;
        }
        geo->layer_group[l] = (uint8_t)g;
    }
    geo->n_groups = ng;
    return 0;
}

void engine_kv_blocks(engine_kv *kv, size_t budget_bytes)
{
    int64_t n[KV_MAX_GROUPS];
    kv_split_budget(&kv->g, budget_bytes, kv->n_ctx, kv->max_batch_tokens, n);
    for (int k = 0; k < kv_n_groups(&kv->g); k++)
        kv->n_blocks[k] = n[k] > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)n[k];
}

/* Blocks one sequence holds at most in layer group k: its full context, or one window. */
static int64_t eng__seq_blocks(const engine_kv *kv, int k)
{
    return kv_group_seq_blocks(&kv->g, k, kv->n_ctx, kv->max_batch_tokens);
}

int engine_kv_check_budget(const engine_kv *kv, char *err, size_t err_len)
{
    const kv_geom *g = &kv->g;
    for (int k = 0; k < kv_n_groups(g); k++) {
        int64_t need = eng__seq_blocks(kv, k);
        if (kv->n_blocks[k] >= need && kv->n_blocks[k] >= 1) continue;
        const kv_rule *r = &g->rule[k];
        char what[64];
        if (r->keep == KV_KEEP_ALL) snprintf(what, sizeof what, "the context length %d", kv->n_ctx);
        else snprintf(what, sizeof what, "one window of %d", r->window);
        snprintf(err, err_len,
                 "the KV budget holds %lld tokens (%d blocks of %d, %zu bytes/token), less than one "
                 "sequence at %s; raise --kv-memory (or --gpu-memory-utilization) or lower %s",
                 (long long)kv->n_blocks[k] * g->block_size, (int)kv->n_blocks[k], g->block_size,
                 kv_bytes_per_token(g), what, r->keep == KV_KEEP_ALL ? "--max-model-len" : "--kv-window");
        return -1;
    }
    return 0;
}

int64_t engine_kv_seq_capacity(const engine_kv *kv)
{
    int64_t n = INT64_MAX;
    for (int k = 0; k < kv_n_groups(&kv->g); k++) {
        int64_t c = kv->n_blocks[k] / eng__seq_blocks(kv, k);
        n = c < n ? c : n;
    }
    return n;
}

int engine_kv_is_unbounded(const engine_kv *kv)
{
    int sinks = 0;
    for (int k = 0; k < kv_n_groups(&kv->g); k++) {
        if (kv->g.rule[k].keep == KV_KEEP_ALL) return 0;
        sinks |= kv->g.rule[k].keep == KV_KEEP_SINKS;
    }
    return sinks;
}

int engine_kv_can_hold(const engine_kv *kv, int64_t n_prompt, int64_t max_tokens)
{
    if (engine_kv_is_unbounded(kv)) /* a window: the prompt is capped, the output is not */
        return n_prompt <= kv->n_ctx;
    if (n_prompt + max_tokens > kv->n_ctx) return 0;
    int64_t blocks = (n_prompt + max_tokens + kv->g.block_size - 1) / kv->g.block_size;
    for (int k = 0; k < kv_n_groups(&kv->g); k++)
        if (kv->g.rule[k].keep == KV_KEEP_ALL && blocks > kv->n_blocks[k]) return 0;
    return 1;
}

/* The first sliding-window layer (there is one when model_n_swa_layers > 0). */
static int eng__first_swa(const model_hparams *hp)
{
    int l = 0;
    while (l < hp->n_layers - 1 && model_layer_window(hp, l) <= 0) l++;
    return l;
}

void engine_kv_log(const engine_kv *kv, const model_hparams *hp)
{
    const kv_geom *g = &kv->g;
    size_t bpt = kv_bytes_per_token(g);
    int64_t cap = (int64_t)kv->n_blocks[0] * g->block_size;
    char formula[160], at[96], by_type[512];
    kv_formula(g, 1, formula, sizeof formula);
    const kv_rule *r = &g->rule[0];
    if (r->keep == KV_KEEP_SINKS)
        snprintf(at, sizeof at, "a window of %d (%d sinks)", r->window, kv_sink_blocks(r, g->block_size) * g->block_size);
    else
        snprintf(at, sizeof at, "context %d", kv->n_ctx);
    fprintf(stderr,
            "KV cache (%s): %s = %zu bytes/token; "
            "%d blocks of %d tokens = %lld tokens; max %lld sequences at %s\n",
            kv_dtype_name(g->dtype), formula, bpt, (int)kv->n_blocks[0], g->block_size, (long long)cap,
            (long long)engine_kv_seq_capacity(kv), at);
    if (hp->mla)
        fprintf(stderr, "KV cache: MLA latent layout, one vector of %d latent + %d RoPE key values per token and "
                "layer; plain multi-head attention would keep %d values (K and V per head), %.1fx more\n",
                hp->kv_lora_rank, hp->rope_dims, model_mha_kv_values(hp),
                (double)model_mha_kv_values(hp) / (double)hp->head_dim);
    if (model_n_swa_layers(hp))
        fprintf(stderr, "KV cache by layer type: %s; the sliding layers release what left their window, "
                "%d blocks for them, %d for the others\n",
                model_kv_by_layer_type(hp, kv_vec_bytes(g), by_type, sizeof by_type),
                (int)kv->n_blocks[kv_group_of(g, eng__first_swa(hp))], (int)kv->n_blocks[0]);
}
