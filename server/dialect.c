/*
 * dialect.c — the Responses API and Anthropic's Messages API in the request lifecycle: their
 * requests are chat requests (openai/oai_dialect.h translates them), so preparation,
 * submission and events are gen.c's; this file answers in their shapes, keeps the Responses
 * store (rstore.h: previous_response_id, GET and DELETE /v1/responses/{id}) and counts tokens
 * for /v1/messages/count_tokens.
 *
 *   prep.c (worker) ──srv__dialect_parse──► oai_request (kind chat, dialect set)
 *   gen.c (loop): stream begun ──srv__dialect_stream_begin──► response.created / message_start
 *                 each event  ──srv__dialect_stream_event──► the API's deltas
 *                 every choice done ──srv__dialect_finish──► the object, or the closing events;
 *                                     a stored Response goes into the store
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "server/openai/oai_chat.h"
#include "server/openai/oai_dialect.h"
#include "server/rstore.h"

/* Worker thread: the stored conversation of a previous response (malloc'd JSON), or NULL. */
static char *history_of(void *ud, const char *id)
{
    srv *s = ud;
    char *conv = NULL;
    if (s->store && rstore_get(s->store, id, NULL, &conv)) conv = NULL;
    return conv;
}

int srv__dialect_parse(srv_req *r, const oai_limits *lim, oai_error *e)
{
    const char *body = r->h.body ? r->h.body : "";
    if (r->prep_kind == SRV_PREP_RESPONSES)
        return oai_parse_responses(body, r->h.body_len, lim, history_of, srv__of(r), &r->oreq, e);
    return oai_parse_messages(body, r->h.body_len, lim, r->prep_kind == SRV_PREP_COUNT_TOKENS, &r->oreq, e);
}

int srv__dialect_count_tokens(srv_req *r, oai_error *e)
{
    srv *s = srv__of(r);
    oai_limits lim = {s->model_id, s->n_vocab, s->grammars};
    if (srv__dialect_parse(r, &lim, e)) return -EINVAL;
    int32_t *ids = NULL;
    int n = 0;
    int rc = srv__chat_ids(s, r->oreq.chat, 1, &ids, &n, e);
    free(ids);
    if (rc) return rc;
    r->result = oai_count_tokens_json(n);
    return r->result ? 0 : oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

char *srv__error_json(const srv_req *r, const oai_error *e)
{
    const oai_dialect *d = r->oreq.dialect;
    int anthropic = (d && oai_dialect_kind_of(d) == OAI_DIALECT_MESSAGES) || !strncmp(r->h.path, "/v1/messages", 12);
    return anthropic ? oai_anthropic_error_json(e) : oai_error_json(e);
}

/* Appends SSE text (taken) to r's stream; NULL from an out-of-memory builder ends the stream. */
static void put(srv_req *r, char *sse, int oom)
{
    if (oom) {
        free(sse);
        r->h.stream_abort = 1;
        srv__gen_cancel(r);
        return;
    }
    if (sse) http_stream_append(&r->h, sse, strlen(sse));
    free(sse);
}

void srv__dialect_stream_begin(srv_req *r)
{
    oai_usage u = {r->h.n_prompt_tokens, 0, 0};
    char *sse = oai_dialect_stream_open(r->oreq.dialect, &r->resp, &u);
    put(r, sse, !sse);
}

void srv__dialect_stream_event(srv_req *r, oai_choice *c, const engine_event *ev)
{
    int fin = ev->finish == ENGINE_FINISH_STOP || ev->finish == ENGINE_FINISH_LENGTH;
    int has_lp = r->oreq.logprobs >= 0 && ev->logprobs && ev->n_tokens > 0;
    oai_lp lp = {ev->logprobs ? ev->logprobs[0] : (smp_result){0}, 1, 0};
    if (!ev->text_len && !fin && !has_lp) return;
    srv__chat_reader(r, c);
    int oom = 0;
    char *sse = oai_dialect_stream_feed(r->oreq.dialect, &r->resp, c, ev->text, ev->text_len, fin, has_lp ? &lp : NULL,
                                        has_lp, &oom);
    put(r, sse, oom);
}

void srv__dialect_stream_error(srv_req *r, const oai_error *e)
{
    char *sse = oai_dialect_stream_error(r->oreq.dialect, &r->resp, e);
    put(r, sse, 0);
}

/* A finished Response with store: true goes into the store (when one is kept). */
static void keep(srv_req *r, const oai_choice *c, const char *json)
{
    srv *s = srv__of(r);
    if (!s->store || !json || !oai_dialect_stores(r->oreq.dialect)) return;
    char *conv = oai_dialect_conversation(r->oreq.dialect, c);
    if (conv && rstore_put(s->store, r->id, json, conv) && s->cfg->verbose)
        fprintf(stderr, "kvserve: response %s not stored (larger than --response-store-size, or out of memory)\n", r->id);
    free(conv);
}

void srv__dialect_finish(srv_req *r, const oai_usage *u)
{
    oai_choice *c = &r->choices[0];
    if (r->oreq.stream) {
        char *json = NULL;
        char *sse = oai_dialect_stream_close(r->oreq.dialect, &r->resp, c, u, &json);
        put(r, sse, !sse);
        keep(r, c, json);
        free(json);
        return;
    }
    r->result = oai_dialect_json(r->oreq.dialect, &r->resp, c, u);
    r->result_status = 200;
    keep(r, c, r->result);
}

/* ---- GET and DELETE /v1/responses/{id} ------------------------------------------------------ */

static enum MHD_Result not_found(srv_req *r, const char *id)
{
    oai_error e;
    oai_fail(&e, 404, "invalid_request_error", "not_found", NULL, "Response with id '%.100s' not found.", id);
    return http_reply_error(&r->h, &e);
}

enum MHD_Result srv__responses_get(srv_req *r)
{
    srv *s = srv__of(r);
    const char *id = r->h.path + strlen("/v1/responses/");
    char *json = NULL;
    if (!s->store || rstore_get(s->store, id, &json, NULL)) return not_found(r, id);
    return http_reply_json(&r->h, 200, json);
}

enum MHD_Result srv__responses_delete(srv_req *r)
{
    srv *s = srv__of(r);
    const char *id = r->h.path + strlen("/v1/responses/");
    if (!s->store || rstore_delete(s->store, id)) return not_found(r, id);
    char *id_json = oai_string_json("id", id), body[512];
    snprintf(body, sizeof body, "%.*s,\"object\":\"response\",\"deleted\":true}", id_json ? (int)strlen(id_json) - 1 : 0,
             id_json ? id_json : "");
    free(id_json);
    return http_reply_json(&r->h, 200, strdup(body));
}
