/*
 * oai_dialect.c — what the Responses API (oai_responses.c) and Anthropic's Messages API
 * (oai_messages.c) share: the dialect object, named SSE events, stable output item ids, the
 * parts of a chat answer (content, reasoning, tool calls) and its assistant message, and the
 * entry points of oai_dialect.h, which dispatch to the two APIs.
 *
 * A stream feeds the choice's chat state (server/toolcall/) when the request has one, so that
 * reasoning, text and tool calls become separate output items; without one the text is the
 * content. Either way the deltas reach the API's half, which opens, fills and closes its items.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/utf8.h"
#include "server/openai/internal.h"
#include "server/openai/oai_chat.h"
#include "server/openai/oai_dialect.h"
#include "server/toolcall/toolcall.h"

oai_dialect *oai__dialect_new(int kind)
{
    oai_dialect *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->kind = kind;
    d->logprobs = -1;
    d->max_output = -1;
    d->history = cJSON_CreateArray();
    d->done = cJSON_CreateArray();
    if (!d->history || !d->done) {
        oai_dialect_free(d);
        return NULL;
    }
    return d;
}

void oai_dialect_free(oai_dialect *d)
{
    if (!d) return;
    cJSON_Delete(d->echo);
    cJSON_Delete(d->history);
    cJSON_Delete(d->done);
    free(d->call_name);
    free(d->acc);
    free(d->pend);
    free(d->sse);
    free(d);
}

int oai_dialect_kind_of(const oai_dialect *d)
{
    return d->kind;
}

const char *oai_dialect_id_prefix(const oai_dialect *d)
{
    return d->kind == OAI_DIALECT_RESPONSES ? "resp_" : "msg_";
}

int oai_dialect_stores(const oai_dialect *d)
{
    return d->kind == OAI_DIALECT_RESPONSES && d->store;
}

const char *const *oai_dialect_fields(int kind, size_t *n)
{
    return kind == OAI_DIALECT_RESPONSES ? oai__responses_fields(n) : oai__messages_fields(n);
}

/* ---- events -------------------------------------------------------------------------------- */

static void di_append(oai_dialect *d, const char *s, size_t n)
{
    char *p = realloc(d->sse, d->sse_len + n + 1);
    if (!p) {
        d->oom = 1;
        return;
    }
    memcpy(p + d->sse_len, s, n);
    d->sse = p;
    d->sse_len += n;
    d->sse[d->sse_len] = 0;
}

cJSON *oai__di_new(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddStringToObject(o, "type", type);
    return o;
}

void oai__di_event(oai_dialect *d, cJSON *data)
{
    const cJSON *t = data ? cJSON_GetObjectItemCaseSensitive(data, "type") : NULL;
    if (!cJSON_IsString(t)) {
        cJSON_Delete(data);
        d->oom = 1;
        return;
    }
    if (d->kind == OAI_DIALECT_RESPONSES) cJSON_AddNumberToObject(data, "sequence_number", (double)d->seq++);
    char *json = cJSON_PrintUnformatted(data);
    if (json) {
        di_append(d, "event: ", 7);
        di_append(d, t->valuestring, strlen(t->valuestring));
        di_append(d, "\ndata: ", 7);
        di_append(d, json, strlen(json));
        di_append(d, "\n\n", 2);
    } else {
        d->oom = 1;
    }
    free(json);
    cJSON_Delete(data);
}

char *oai__di_take(oai_dialect *d)
{
    char *s = d->sse;
    d->sse = NULL;
    d->sse_len = 0;
    return s;
}

void oai__di_acc(oai_dialect *d, const char *s, size_t n)
{
    char *p = realloc(d->acc, d->acc_len + n + 1);
    if (!p) {
        d->oom = 1;
        return;
    }
    memcpy(p + d->acc_len, s, n);
    d->acc = p;
    d->acc_len += n;
    d->acc[d->acc_len] = 0;
}

void oai__di_item_id(const oai_resp *r, const char *prefix, int index, char *out, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = r->id; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    uint64_t a = h ^ (0x9E3779B97F4A7C15ull * (uint64_t)(index + 1)), b = a * 0xbf58476d1ce4e5b9ull;
    a ^= a >> 31;
    b ^= b >> 29;
    snprintf(out, n, "%s%016llx%016llx", prefix, (unsigned long long)a, (unsigned long long)b);
}

cJSON *oai__di_str(const char *s, size_t n)
{
    if (!s) n = 0;
    char *t = malloc(n * 3 + 1), *u = malloc(n * 3 + 1);
    size_t m = t && u ? utf8_sanitize_into(t, s ? s : "", n) : 0, k = 0;
    /* a generated NUL byte would end the C string: it becomes U+FFFD, as invalid bytes do */
    for (size_t i = 0; u && t && i < m; i++) {
        if (t[i]) u[k++] = t[i];
        else memcpy(u + k, "\xEF\xBF\xBD", 3), k += 3;
    }
    if (u) u[k] = 0;
    cJSON *v = cJSON_CreateString(t && u ? u : "");
    free(t);
    free(u);
    return v;
}

/* ---- the answer's parts ---------------------------------------------------------------------- */

void oai__di_out(const oai_choice *c, oai_di_out *o, const struct tc_call **calls, int n_cap)
{
    memset(o, 0, sizeof *o);
    o->calls = calls;
    if (!c->chat) {
        o->content = c->text ? c->text : "";
        o->content_len = c->text_len;
        return;
    }
    const tc_parser *p = c->chat->p;
    o->content = tc_parser_content(p, &o->content_len);
    o->reasoning = tc_parser_reasoning(p, &o->reasoning_len);
    int n = tc_parser_n_calls(p);
    if (!c->chat->parallel && n > 1) n = 1;
    if (n > n_cap) n = n_cap;
    for (int i = 0; i < n; i++) calls[i] = tc_parser_call(p, i);
    o->n_calls = n;
}

/* 1 when the n bytes of s are all white space. */
static int di_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return 0;
    return 1;
}

cJSON *oai__di_assistant(const oai_choice *c)
{
    const tc_call *calls[256];
    oai_di_out o;
    oai__di_out(c, &o, calls, 256);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    if (o.n_calls && di_blank(o.content, o.content_len)) cJSON_AddNullToObject(m, "content");
    else cJSON_AddItemToObject(m, "content", oai__di_str(o.content, o.content_len));
    if (o.reasoning) cJSON_AddItemToObject(m, "reasoning_content", oai__di_str(o.reasoning, o.reasoning_len));
    if (o.n_calls) {
        cJSON *a = cJSON_AddArrayToObject(m, "tool_calls");
        for (int i = 0; i < o.n_calls; i++) {
            cJSON *k = cJSON_CreateObject(), *f;
            cJSON_AddStringToObject(k, "id", o.calls[i]->id);
            cJSON_AddStringToObject(k, "type", "function");
            f = cJSON_AddObjectToObject(k, "function");
            cJSON_AddItemToObject(f, "name", oai__di_str(o.calls[i]->name, o.calls[i]->name ? strlen(o.calls[i]->name) : 0));
            cJSON_AddItemToObject(f, "arguments", oai__di_str(o.calls[i]->args, o.calls[i]->args_len));
            cJSON_AddItemToArray(a, k);
        }
    }
    return m;
}

char *oai_dialect_conversation(const oai_dialect *d, const oai_choice *c)
{
    cJSON *conv = cJSON_Duplicate(d->history, 1);
    if (!conv) return NULL;
    cJSON_AddItemToArray(conv, oai__di_assistant(c));
    char *s = cJSON_PrintUnformatted(conv);
    cJSON_Delete(conv);
    return s;
}

/* ---- entry points ------------------------------------------------------------------------------ */

char *oai_dialect_json(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u)
{
    return d->kind == OAI_DIALECT_RESPONSES ? oai__responses_json(d, r, c, u) : oai__messages_json(d, r, c, u);
}

char *oai_dialect_stream_open(oai_dialect *d, const oai_resp *r, const oai_usage *u)
{
    if (d->kind == OAI_DIALECT_RESPONSES) oai__responses_open(d, r);
    else oai__messages_open(d, r, u);
    return oai__di_take(d);
}

/* The deltas of one feed, for the API's half. */
typedef struct di_feed {
    oai_dialect *d;
    const oai_resp *r;
    const oai_chat_state *st;
    const oai_lp *lps;
    int n_lps;
} di_feed;

static void di_on_delta(void *ud, const tc_delta *t)
{
    di_feed *f = ud;
    oai_dialect *d = f->d;
    if ((t->kind == TC_D_CALL || t->kind == TC_D_ARGS) && t->index > 0 && f->st && !f->st->parallel) return;
    tc_delta joined;
    if (t->kind == TC_D_CONTENT && d->open != DI_TEXT) {
        /* white space between items (a newline before a tool call) opens no message of its own,
         * as the whole answer drops blank content beside calls */
        if (t->len) {
            char *p = realloc(d->pend, d->pend_len + t->len + 1);
            if (!p) {
                d->oom = 1;
                return;
            }
            memcpy(p + d->pend_len, t->text, t->len);
            d->pend = p;
            d->pend_len += t->len;
        }
        if (di_blank(d->pend, d->pend_len) && (t->len || !f->n_lps)) return;
        joined = *t;
        joined.text = d->pend;
        joined.len = d->pend_len;
        t = &joined;
    }
    if (f->d->kind == OAI_DIALECT_RESPONSES) {
        oai__responses_delta(f->d, f->r, t, t->kind == TC_D_CONTENT ? f->lps : NULL, f->n_lps);
        if (t->kind == TC_D_CONTENT) f->n_lps = 0; /* the token's log-probs go out once */
    } else {
        oai__messages_delta(f->d, f->r, t);
    }
    if (t == &joined) d->pend_len = 0;
}

/* The end of a stream's text: white space still held is said when nothing else was. */
static void di_flush(di_feed *f)
{
    oai_dialect *d = f->d;
    if (!d->pend_len) return;
    if (!d->n_items) {
        tc_delta t = {TC_D_CONTENT, 0, d->pend, d->pend_len, NULL, NULL};
        if (d->kind == OAI_DIALECT_RESPONSES) oai__responses_delta(d, f->r, &t, NULL, 0);
        else oai__messages_delta(d, f->r, &t);
    }
    d->pend_len = 0;
}

char *oai_dialect_stream_feed(oai_dialect *d, const oai_resp *r, oai_choice *c, const char *text, size_t n,
                              int final, const oai_lp *lps, int n_lps, int *oom)
{
    di_feed f = {d, r, c->chat, lps, n_lps};
    int rc = 0;
    if (c->chat) {
        rc = tc_parser_feed(c->chat->p, text, n, final, di_on_delta, &f);
    } else if (n || n_lps) {
        rc = oai_choice_append_text(c, text, n); /* the final object's content */
        tc_delta t = {TC_D_CONTENT, 0, text, n, NULL, NULL};
        di_on_delta(&f, &t);
    }
    if (final) {
        di_flush(&f);
        if (d->kind == OAI_DIALECT_RESPONSES) oai__responses_close_item(d, r);
        else oai__messages_close_item(d);
    }
    *oom = rc || d->oom;
    return oai__di_take(d);
}

char *oai_dialect_stream_close(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u,
                               char **final_json)
{
    if (d->kind == OAI_DIALECT_RESPONSES) {
        oai__responses_close_item(d, r);
        *final_json = oai__responses_close(d, r, c, u);
    } else {
        oai__messages_close_item(d);
        *final_json = oai__messages_close(d, r, c, u);
    }
    return oai__di_take(d);
}

char *oai_anthropic_error_json(const oai_error *e)
{
    const char *type = e->status == 401 ? "authentication_error"
                       : e->status == 403 ? "permission_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 429 ? "rate_limit_error"
                       : e->status == 503 || e->status == 529 ? "overloaded_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "error");
    cJSON *er = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(er, "type", type);
    cJSON_AddItemToObject(er, "message", oai__di_str(e->message, strlen(e->message)));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *oai_dialect_stream_error(oai_dialect *d, const oai_resp *r, const oai_error *e)
{
    if (d->kind == OAI_DIALECT_RESPONSES) {
        oai__responses_error(d, r, e);
        return oai__di_take(d);
    }
    char *j = oai_anthropic_error_json(e);
    oai__di_event(d, j ? cJSON_Parse(j) : NULL);
    free(j);
    return oai__di_take(d);
}

char *oai_count_tokens_json(int n_tokens)
{
    char buf[64];
    snprintf(buf, sizeof buf, "{\"input_tokens\":%d}", n_tokens);
    return strdup(buf);
}
