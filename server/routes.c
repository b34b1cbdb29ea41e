/*
 * routes.c — the API's routes, which http/ dispatches on after admission (authentication, the
 * method, the body limit): /health, /metrics, /version and /v1/models are answered here at once;
 * completions, chat completions, the pooled routes (embeddings, rerank, score: pooled.c through
 * gen.c), /tokenize and /detokenize go to gen.c. Every route but /health, /metrics
 * and /version answers 503 while the model loads; a generation, 503 while the server drains.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/clock.h"
#include "base/version.h"
#include "model/utf8.h"
#include "server/internal.h"
#include "server/openai/oai_pool.h"

static enum MHD_Result loading(http_req *r)
{
    return http_reply_fail(r, 503, "server_error", "model_loading", "The model is still loading%s",
                           "");
}

static enum MHD_Result do_health(http_req *hr)
{
    srv *s = srv__of((srv_req *)hr);
    if (!s->e) return http_reply_json(hr, 503, strdup("{\"status\":\"loading\"}"));
    engine_stats st;
    engine_get_stats(s->e, &st);
    int busy = st.num_running + st.num_waiting > 0;
    int stuck = busy && clk_now_us() - st.last_step_us > 60 * 1000000LL;
    const char *why = s->http.draining ? "draining"
                      : !st.alive      ? "engine stopped"
                      : stuck          ? "engine stuck"
                                       : NULL;
    char buf[128];
    snprintf(buf, sizeof buf, "{\"status\":\"%s\"}", why ? why : "ok");
    return http_reply_json(hr, why ? 503 : 200, strdup(buf));
}

/* GET /version (as vLLM has it): the release, and the commit the binary was built from. */
static enum MHD_Result do_version(http_req *hr)
{
    char buf[160];
    snprintf(buf, sizeof buf, "{\"version\":\"%s\",\"commit\":\"%s\"}", version_string(), version_commit());
    return http_reply_json(hr, 200, strdup(buf));
}

static enum MHD_Result do_metrics(http_req *hr)
{
    srv *s = srv__of((srv_req *)hr);
    engine_stats st;
    if (s->e) engine_get_stats(s->e, &st);
    if (s->grammars)
        gr_cache_stats(s->grammars, &s->met.grammar_entries, &s->met.grammar_lookups,
                       &s->met.grammar_hits);
    s->met.http_requests = s->http.n_requests;
    s->met.http_errors = s->http.n_errors;
    gate_stats gs;
    gate_get_stats(&s->http.gate, &gs);
    s->met.http_conns = gs.n_conns;
    s->met.http_evicted = gs.evicted;
    s->met.http_timed_out = gs.timed_out;
    s->met.http_refused = gs.refused;
    char *t = met_render(&s->met, s->e ? &st : NULL, s->model_id);
    return http_reply(hr, 200, "text/plain; version=0.0.4; charset=utf-8", t, t ? strlen(t) : 0);
}

/* One model card (the served model), or the list holding it. */
static char *model_json(srv *s, int list)
{
    char *id = utf8_sanitize(s->model_id, strlen(s->model_id)); /* a file name may be any bytes */
    if (!id) return NULL;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "kvserve");
    cJSON_AddStringToObject(m, "root", id);
    cJSON_AddNullToObject(m, "parent");
    cJSON_AddNumberToObject(m, "max_model_len", s->n_ctx);
    free(id);
    cJSON *o = m;
    if (list) {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    }
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

static enum MHD_Result do_models(http_req *hr)
{
    srv *s = srv__of((srv_req *)hr);
    if (!s->e) return loading(hr);
    return http_reply_json(hr, 200, model_json(s, 1));
}

/* /v1/models/ID: the served model's card, or 404. */
static enum MHD_Result do_model(http_req *hr)
{
    srv *s = srv__of((srv_req *)hr);
    if (!s->e) return loading(hr);
    const char *id = hr->path + strlen("/v1/models/");
    if (strcmp(id, s->model_id))
        return http_reply_fail(hr, 404, "invalid_request_error", "model_not_found",
                               "The model '%s' does not exist", id);
    return http_reply_json(hr, 200, model_json(s, 0));
}

static enum MHD_Result do_tokenize(http_req *hr)
{
    if (!srv__of((srv_req *)hr)->e) return loading(hr);
    return srv__tokenize((srv_req *)hr);
}

static enum MHD_Result do_detokenize(http_req *hr)
{
    if (!srv__of((srv_req *)hr)->e) return loading(hr);
    return srv__detokenize((srv_req *)hr);
}

static enum MHD_Result generation(http_req *hr, int kind)
{
    srv *s = srv__of((srv_req *)hr);
    if (!s->e) return loading(hr);
    if (s->http.draining)
        return http_reply_fail(hr, 503, "server_error", "server_shutting_down",
                               "The server is shutting down%s", "");
    return srv__gen_start((srv_req *)hr, kind);
}

static enum MHD_Result do_completions(http_req *hr)
{
    return generation(hr, OAI_COMPLETION);
}

static enum MHD_Result do_chat(http_req *hr)
{
    return generation(hr, OAI_CHAT);
}

static enum MHD_Result do_responses(http_req *hr)
{
    return generation(hr, SRV_PREP_RESPONSES);
}

static enum MHD_Result do_messages(http_req *hr)
{
    return generation(hr, SRV_PREP_MESSAGES);
}

static enum MHD_Result do_count_tokens(http_req *hr)
{
    return generation(hr, SRV_PREP_COUNT_TOKENS);
}

/* GET and DELETE /v1/responses/{id}: the store answers (no engine needed, but a loaded server). */
static enum MHD_Result do_response_get(http_req *hr)
{
    if (!srv__of((srv_req *)hr)->e) return loading(hr);
    return srv__responses_get((srv_req *)hr);
}

static enum MHD_Result do_response_delete(http_req *hr)
{
    if (!srv__of((srv_req *)hr)->e) return loading(hr);
    return srv__responses_delete((srv_req *)hr);
}

static enum MHD_Result do_embeddings(http_req *hr)
{
    return generation(hr, SRV_PREP_POOL + OAI_EMBED);
}

static enum MHD_Result do_rerank(http_req *hr)
{
    return generation(hr, SRV_PREP_POOL + OAI_RERANK);
}

static enum MHD_Result do_score(http_req *hr)
{
    return generation(hr, SRV_PREP_POOL + OAI_SCORE);
}

/* Looked up in this order: the exact paths, then the one prefix. */
const http_route srv__routes[] = {
    {"/health", "GET", 0, 0, do_health},
    {"/metrics", "GET", 0, 0, do_metrics},
    {"/version", "GET", 0, 0, do_version},
    {"/v1/models", "GET", 0, 0, do_models},
    {"/v1/completions", "POST", 0, 0, do_completions},
    {"/v1/chat/completions", "POST", 0, 0, do_chat},
    {"/v1/responses", "POST", 0, 0, do_responses},
    {"/v1/messages", "POST", 0, 0, do_messages},
    {"/v1/messages/count_tokens", "POST", 0, 0, do_count_tokens},
    {"/v1/embeddings", "POST", 0, 0, do_embeddings},
    {"/v1/rerank", "POST", 0, 0, do_rerank},
    {"/rerank", "POST", 0, 1, do_rerank},
    {"/v1/score", "POST", 0, 0, do_score},
    {"/tokenize", "POST", 0, 1, do_tokenize},
    {"/detokenize", "POST", 0, 1, do_detokenize},
    {"/v1/models/", "GET", 1, 0, do_model},
    {"/v1/responses/", "GET", 1, 0, do_response_get},
    {"/v1/responses/", "DELETE", 1, 0, do_response_delete},
};
const int srv__n_routes = (int)(sizeof srv__routes / sizeof srv__routes[0]);
