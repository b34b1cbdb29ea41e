/*
 * pooled.c — the pooled routes over the engine: /v1/embeddings, /v1/rerank (and /rerank) and
 * /v1/score. Each input becomes one prefill-only engine request (engine_request.pooling) whose
 * final event carries the pooled vector or the classification head's outputs; the response is
 * written once every input is done.
 *
 *   loop: routes.c → srv__gen_start (kind SRV_PREP_POOL + enum oai_pool_kind)
 *   worker: srv__pool_prep: parse (openai/oai_pool.c), prompts → token ids (a reranker's
 *           template, or llama.cpp's [BOS] query [EOS] [SEP] document [EOS]), context checks
 *   loop: srv__pool_submit → events through gen.c's srv__gen_event (srv__pool_take) →
 *         srv__pool_finish: the JSON
 *
 * What a model serves is decided at load (srv__pool_load): --pooling, else the GGUF's
 * pooling_type. Embeddings need mean, cls or last; rerank and score need rank, whose head (the
 * model's cls.* tensors, or the LM head's "yes" / "no" rows) is checked at load, so a server that
 * starts can score. The lifecycle around it (admission, cancellation on disconnect, metrics, the
 * access log, drain) is gen.c's, as for every generation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/pool.h"
#include "server/internal.h"
#include "server/openai/oai_pool.h"

struct srv_pool {
    oai_pool_request q;
    float **out;     /* [n_inputs] the engine's pooled outputs (owned), NULL until they arrive */
    int *n_out;      /* [n_inputs] their lengths */
    char id[48];     /* rerank / score response id */
};

/* ---- load -------------------------------------------------------------------------------- */

int srv__pool_load(srv *s, char *err, size_t err_len)
{
    const srv_config *c = s->cfg;
    s->pooling = s->m->hp.pooling;
    s->sep_id = -1;
    if (c->pooling && *c->pooling) {
        int p = model_pooling_by_name(c->pooling);
        if (p <= MODEL_POOL_NONE) {
            snprintf(err, err_len, "unknown --pooling '%s' (mean, cls, last or rank)", c->pooling);
            return -EINVAL;
        }
        s->pooling = p;
    }
    if (s->pooling == MODEL_POOL_RANK) { /* a server that starts can score */
        pool_head h;
        char why[256];
        if (pool_head_init(&h, s->m, s->tok, why, sizeof why)) {
            snprintf(err, err_len, "rank pooling: %s", why);
            return -EINVAL;
        }
        pool_head_fini(&h);
    }
    gguf_str t;
    if (!gguf_get_str(s->m->gguf, "tokenizer.chat_template.rerank", &t) &&
        (s->rerank_tmpl = malloc(t.len + 1))) {
        memcpy(s->rerank_tmpl, t.ptr, t.len);
        s->rerank_tmpl[t.len] = 0;
    }
    uint32_t sep;
    if (!gguf_get_u32(s->m->gguf, "tokenizer.ggml.seperator_token_id", &sep) && sep < (uint32_t)s->n_vocab)
        s->sep_id = (int32_t)sep;
    int add_sep = 0;
    s->add_sep = !gguf_get_bool(s->m->gguf, "tokenizer.ggml.add_sep_token", &add_sep) && add_sep && s->sep_id >= 0;
    return 0;
}

void srv__pool_unload(srv *s)
{
    free(s->rerank_tmpl);
    s->rerank_tmpl = NULL;
}

/* ---- preparation (worker thread) ------------------------------------------------------------- */

/* 400 when the served pooling cannot answer the route. */
static int check_served(const srv *s, int kind, oai_error *e)
{
    if (kind == OAI_EMBED && s->pooling == MODEL_POOL_NONE)
        return oai_fail(e, 400, "invalid_request_error", "model_not_supported", "model",
                        "The model '%s' is a generative model without a pooling type: it serves no embeddings "
                        "(start the server with --pooling mean, cls or last to pool its hidden states)",
                        s->model_id);
    if (kind == OAI_EMBED && s->pooling == MODEL_POOL_RANK)
        return oai_fail(e, 400, "invalid_request_error", "model_not_supported", "model",
                        "The model '%s' is served as a reranker (pooling rank): use /v1/rerank or /v1/score",
                        s->model_id);
    if (kind != OAI_EMBED && s->pooling != MODEL_POOL_RANK)
        return oai_fail(e, 400, "invalid_request_error", "model_not_supported", "model",
                        "The model '%s' is no reranker (its pooling is %s, not rank): it cannot score documents%s",
                        s->model_id, model_pooling_name(s->pooling),
                        s->pooling == MODEL_POOL_NONE ? " (--pooling rank scores with the \"yes\"/\"no\" logits)" : "");
    return 0;
}

/* Appends text's ids (no BOS / EOS; control tokens parsed when special) to a growing list. */
static int append_text(srv *s, const char *text, int special, int32_t **ids, int *n, oai_error *e)
{
    size_t len = strlen(text);
    int need = tok_encode(s->tok, text, len, 0, special, NULL, 0);
    if (need < 0)
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", NULL, "the text cannot be tokenized");
    int32_t *v = realloc(*ids, sizeof *v * (size_t)(*n + need + 4));
    if (!v) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    *ids = v;
    tok_encode(s->tok, text, len, 0, special, v + *n, need);
    *n += need;
    return 0;
}

/* Replaces every {query} and {document} of the template (malloc'd, or NULL). */
static char *fill_template(const char *t, const char *query, const char *doc)
{
    size_t n = strlen(t) + 1, lq = strlen(query), ld = strlen(doc);
    for (const char *p = t; (p = strchr(p, '{')); p++)
        n += !strncmp(p, "{query}", 7) ? lq : !strncmp(p, "{document}", 10) ? ld : 0;
    char *out = malloc(n), *o = out;
    for (const char *p = t; out && *p;) {
        if (!strncmp(p, "{query}", 7)) {
            memcpy(o, query, lq), o += lq, p += 7;
        } else if (!strncmp(p, "{document}", 10)) {
            memcpy(o, doc, ld), o += ld, p += 10;
        } else {
            *o++ = *p++;
        }
    }
    if (out) *o = 0;
    return out;
}

/* A rerank / score pair's prompt, as llama.cpp formats it: the model's rerank template, else
 * [BOS] query [EOS] [SEP] document [EOS] by the tokenizer's flags. */
static int pair_ids(srv *s, const char *query, const char *doc, int32_t **ids, int *n, oai_error *e)
{
    *ids = NULL;
    *n = 0;
    if (s->rerank_tmpl) {
        char *t = fill_template(s->rerank_tmpl, query, doc);
        if (!t) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        int rc = append_text(s, t, 1, ids, n, e);
        free(t);
        return rc;
    }
    int rc = append_text(s, query, 0, ids, n, e);
    if (rc) return rc;
    int32_t *q = *ids, nq = *n;
    *ids = NULL;
    *n = 0;
    rc = append_text(s, doc, 0, ids, n, e);
    int32_t *v = rc ? NULL : malloc(sizeof *v * (size_t)(nq + *n + 4));
    if (!rc && !v) rc = oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (rc) {
        free(q);
        return rc;
    }
    int k = 0, eos = tok_add_eos(s->tok) ? tok_eos(s->tok) : -1;
    if (tok_add_bos(s->tok)) v[k++] = tok_bos(s->tok);
    memcpy(v + k, q, sizeof *v * (size_t)nq), k += nq;
    if (eos >= 0) v[k++] = eos;
    if (s->add_sep) v[k++] = s->sep_id;
    memcpy(v + k, *ids, sizeof *v * (size_t)*n), k += *n;
    if (eos >= 0) v[k++] = eos;
    free(q);
    free(*ids);
    *ids = v;
    *n = k;
    return 0;
}

/* Input i's token ids into r->prep_ids[i], truncated, checked against the context. */
static int input_ids(srv_req *r, const oai_pool_request *q, int i, oai_error *e)
{
    srv *s = srv__of(r);
    const oai_prompt *in = &q->inputs[i];
    int32_t **ids = &r->prep_ids[i];
    int *n = &r->prep_n[i], rc = 0;
    char param[48];
    snprintf(param, sizeof param, q->kind == OAI_EMBED ? "input[%d]" : q->kind == OAI_RERANK ? "documents[%d]" : "text_2[%d]", i);
    if (q->kind != OAI_EMBED) {
        rc = pair_ids(s, oai_pool_query(q, i), in->text, ids, n, e);
    } else if (in->text) {
        if (!q->truncate_prompt_tokens && strlen(in->text) / tok_max_token_bytes(s->tok) > (size_t)s->n_ctx)
            return oai_fail(e, 400, "invalid_request_error", "context_length_exceeded", param,
                            "This model's maximum context length is %d tokens; '%s' is longer", s->n_ctx, param);
        rc = srv__text_ids(s, in->text, q->add_special, ids, n, e);
    } else if ((*ids = malloc(sizeof **ids * (size_t)in->n_ids))) {
        memcpy(*ids, in->ids, sizeof **ids * (size_t)in->n_ids);
        *n = in->n_ids;
    } else {
        rc = oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (rc) return rc;
    int k = q->truncate_prompt_tokens;
    if (k > 0 && *n > k) { /* the last k tokens, as vLLM keeps them */
        memmove(*ids, *ids + (*n - k), sizeof **ids * (size_t)k);
        *n = k;
    }
    if (*n == 0) return oai_fail(e, 400, "invalid_request_error", "invalid_value", param, "'%s' has no tokens", param);
    int64_t kv = r->prep_kv_tokens > 0 && r->prep_kv_tokens < s->n_ctx ? r->prep_kv_tokens : s->n_ctx;
    if (*n > kv)
        return oai_fail(e, 400, "invalid_request_error", "context_length_exceeded", param,
                        "This model's maximum context length is %d tokens. However, '%s' has %d tokens. "
                        "Please reduce its length (or set truncate_prompt_tokens).", (int)kv, param, *n);
    return 0;
}

int srv__pool_prep(srv_req *r, oai_error *e)
{
    srv *s = srv__of(r);
    int kind = r->prep_kind - SRV_PREP_POOL;
    oai_limits lim = {s->model_id, s->n_vocab, NULL};
    struct srv_pool *p = calloc(1, sizeof *p);
    if (!p) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    r->pool = p;
    if (oai_parse_pool(kind, r->h.body ? r->h.body : "", r->h.body_len, &lim, &p->q, e)) return -EINVAL;
    oai_pool_request *q = &p->q;
    r->oreq.ignored = q->ignored; /* the access log's: moves to the generic request */
    q->ignored = NULL;
    int rc = check_served(s, kind, e);
    if (!rc && kind == OAI_EMBED) rc = oai_pool_check_dim(q, s->m->hp.n_embd, e);
    if (!rc && q->truncate_prompt_tokens > s->n_ctx)
        rc = oai_fail(e, 400, "invalid_request_error", "invalid_value", "truncate_prompt_tokens",
                      "truncate_prompt_tokens (%d) is greater than max_model_len (%d)", q->truncate_prompt_tokens,
                      s->n_ctx);
    if (rc) return rc;
    int n = q->n_inputs;
    r->prep_ids = calloc((size_t)n, sizeof *r->prep_ids);
    r->prep_n = calloc((size_t)n, sizeof *r->prep_n);
    r->prep_max = calloc((size_t)n, sizeof *r->prep_max);
    p->out = calloc((size_t)n, sizeof *p->out);
    p->n_out = calloc((size_t)n, sizeof *p->n_out);
    r->subs = calloc((size_t)n, sizeof *r->subs);
    r->choices = calloc((size_t)n, sizeof *r->choices);
    r->last_tok_us = calloc((size_t)n, sizeof *r->last_tok_us);
    r->n_prep = r->n_subs = r->n_choices = n;
    if (!r->prep_ids || !r->prep_n || !r->prep_max || !p->out || !p->n_out || !r->subs || !r->choices ||
        !r->last_tok_us)
        return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int i = 0; !rc && i < n; i++) rc = input_ids(r, q, i, e);
    /* the generic request the event path reads: one choice per input, no logprobs */
    r->oreq.kind = OAI_COMPLETION;
    r->oreq.n = r->oreq.best_of = 1;
    r->oreq.logprobs = r->oreq.prompt_logprobs = -1;
    for (int i = 0; i < n; i++) r->choices[i].index = i;
    return rc;
}

/* ---- submission and results (loop thread) ----------------------------------------------------- */

enum MHD_Result srv__pool_submit(srv_req *r)
{
    srv *s = srv__of(r);
    struct srv_pool *p = r->pool;
    oai_error e;
    r->is_gen = 1;
    r->phase = SRV_PHASE_RUNNING;
    static uint64_t ctr;
    snprintf(p->id, sizeof p->id, "%s-%016llx%04llx", p->q.kind == OAI_SCORE ? "score" : "rerank",
             (unsigned long long)time(NULL) * 0x9E3779B97F4A7C15ull, (unsigned long long)(++ctr & 0xffff));
    r->resp.id = p->id;
    r->resp.model = s->model_id;
    int rc = 0;
    for (int i = 0; !rc && i < r->n_prep; i++) {
        engine_request er;
        memset(&er, 0, sizeof er);
        er.prompt = r->prep_ids[i];
        er.n_prompt = r->prep_n[i];
        er.n = 1;
        er.pooling = s->pooling;
        er.cache_prompt = p->q.cache_prompt;
        er.sampling.temperature = 1.0f;
        er.sampling.top_p = 1.0f;
        er.sampling.repetition_penalty = 1.0f;
        er.sampling.n_logprobs = -1;
        er.prompt_top = -1;
        srv_sub *b = &r->subs[i];
        rc = engine_submit(s->e, &er, &b->id);
        if (rc) break;
        r->prep_ids[i] = NULL; /* the engine's now */
        b->req = r;
        b->prompt_idx = i;
        b->n_prompt = r->prep_n[i];
        b->n_open = 1;
        r->n_open++;
        r->h.n_prompt_tokens += r->prep_n[i];
        srv__sub_insert(s, b);
    }
    srv__prep_free(r);
    if (rc) {
        srv__gen_cancel(r);
        srv__submit_error(rc, &e);
        r->h.stream_abort = 1; /* events of already submitted inputs are dropped */
        return http_reply_error(&r->h, &e);
    }
    r->counted_active = 1;
    s->n_gen_active++;
    http_suspend(&r->h);
    return MHD_YES;
}

void srv__pool_take(srv_req *r, int i, engine_event *ev)
{
    struct srv_pool *p = r->pool;
    if (i < 0 || i >= p->q.n_inputs || p->out[i]) return;
    p->out[i] = ev->pooled;
    p->n_out[i] = ev->n_pooled;
    ev->pooled = NULL;
    ev->n_pooled = 0;
}

void srv__pool_finish(srv_req *r)
{
    srv *s = srv__of(r);
    struct srv_pool *p = r->pool;
    const oai_pool_request *q = &p->q;
    int n = q->n_inputs, tokens = 0, dim = s->m->hp.n_embd, missing = 0;
    for (int i = 0; i < n; i++) {
        tokens += r->subs[i].n_prompt;
        missing |= !p->out[i] || (q->kind == OAI_EMBED ? p->n_out[i] != dim : p->n_out[i] < 1);
    }
    oai_error e;
    if (r->failed || missing) {
        if (r->failed & 1)
            oai_fail(&e, 503, "server_error", "request_cancelled", NULL, "the request was cancelled (server shutting down)");
        else
            oai_fail(&e, 500, "server_error", "engine_error", NULL, "the inference engine failed while pooling");
        r->result = oai_error_json(&e);
        r->result_status = e.status;
        return;
    }
    if (q->kind == OAI_EMBED) {
        r->result = oai_embeddings_json(q, s->model_id, p->out, dim, tokens);
    } else {
        float *scores = malloc(sizeof *scores * (size_t)n);
        for (int i = 0; scores && i < n; i++) scores[i] = p->out[i][0];
        if (scores)
            r->result = q->kind == OAI_RERANK ? oai_rerank_json(q, p->id, s->model_id, scores, tokens)
                                              : oai_score_json(q, p->id, (int64_t)time(NULL), s->model_id, scores, tokens);
        free(scores);
    }
    r->result_status = 200;
    if (!r->result) {
        oai_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        r->result = oai_error_json(&e);
        r->result_status = 500;
    }
}

void srv__pool_free(srv_req *r)
{
    struct srv_pool *p = r->pool;
    if (!p) return;
    for (int i = 0; p->out && i < p->q.n_inputs; i++) free(p->out[i]);
    free(p->out);
    free(p->n_out);
    oai_pool_request_free(&p->q);
    free(p);
    r->pool = NULL;
}
