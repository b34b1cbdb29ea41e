/*
 * engine_spec.c — the proposer an engine configuration asks for (see engine_spec.h): the n-gram
 * proposer, or a draft model with its share of the KV budget.
 */
#include "engine/engine_spec.h"

#include <stdio.h>

#include "model/model.h"
#include "model/tokenizer.h"

/* The most sequences that speculate in one step: those --spec-disable-batch lets, of max_seqs. */
static int eng__spec_seqs(const engine_config *c)
{
    int n = c->spec_disable_batch < c->max_seqs ? c->spec_disable_batch : c->max_seqs;
    return n > 0 ? n : 0;
}

/* The draft-model proposer: the model loaded and checked against the target's vocabulary, its
 * KV share taken from *budget (in proportion to the two models' bytes per token, and on a GPU
 * its weights too). 0, or -1 with err filled. */
static int eng__setup_draft(const engine_config *c, backend *be, const kv_geom *g, int n_ctx, size_t *budget,
                            spec_proposer **out, char *err, size_t err_len)
{
    if (!c->spec_draft_model) {
        snprintf(err, err_len, "--speculative draft needs --draft-model FILE");
        return -1;
    }
    model *m;
    char why[256];
    if (model_load(c->spec_draft_model, &m, why, sizeof why)) {
        snprintf(err, err_len, "draft model: %s", why);
        return -1;
    }
    if (m->hp.n_vocab != c->model->hp.n_vocab) {
        snprintf(err, err_len, "draft model: vocabulary of %d tokens, the target's has %d", m->hp.n_vocab,
                 c->model->hp.n_vocab);
        model_destroy(m);
        return -1;
    }
    size_t dbpt = spec_draft_bytes_per_token(m, c->block_size, c->kv_dtype), tbpt = kv_bytes_per_token(g);
    if (be->ops->mem_available(be)) { /* a device: the draft's weights come out of it too */
        size_t w = model_weight_bytes(m);
        *budget = *budget > w ? *budget - w : 0;
    }
    size_t share = (size_t)((double)*budget * (double)dbpt / (double)(dbpt + tbpt));
    int batch = eng__spec_seqs(c);
    spec_draft_config dc = {m, c->make_backend, be->name, be, c->n_threads, share, batch > 0 ? batch : 1, c->kv_dtype,
                            c->block_size, n_ctx, c->max_batch_tokens, NULL, 0};
    if (c->tok) dc.n_eog = tok_eog_ids(c->tok, &dc.eog);
    *out = spec_draft_create(&dc, err, err_len);
    if (!*out) {
        model_destroy(m);
        return -1;
    }
    *budget -= share;
    return 0;
}

int engine_spec_create(const engine_config *c, backend *be, const kv_geom *g, int n_ctx, size_t *budget,
                       spec_proposer **out, char *err, size_t err_len)
{
    *out = NULL;
    if (c->spec_method == SPEC_OFF) return 0;
    if (c->spec_k < 1 || c->spec_k > SPEC_MAX_K) {
        snprintf(err, err_len, "num-speculative-tokens %d is outside 1 .. %d", c->spec_k, SPEC_MAX_K);
        return -1;
    }
    if (c->spec_method == SPEC_DRAFT) {
        if (eng__setup_draft(c, be, g, n_ctx, budget, out, err, err_len)) return -1;
    } else if (c->spec_ngram_min < 1 || c->spec_ngram_max < c->spec_ngram_min) {
        snprintf(err, err_len, "speculative n-gram sizes %d .. %d: need 1 ≤ min ≤ max", c->spec_ngram_min,
                 c->spec_ngram_max);
        return -1;
    }
    spec_config sc;
    spec_config_default(&sc);
    sc.method = c->spec_method;
    sc.k = c->spec_k;
    sc.ngram_min = c->spec_ngram_min;
    sc.ngram_max = c->spec_ngram_max;
    if (!*out) *out = spec_ngram_create(&sc);
    if (!*out) {
        snprintf(err, err_len, "out of memory creating the proposer");
        return -1;
    }
    return c->spec_k * eng__spec_seqs(c);
}

