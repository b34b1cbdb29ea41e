/*
 * oai_response.c — the response side of the OpenAI wire format (see openai.h): a choice's text
 * and logprobs accumulated as the engine sends them, and the JSON built from them — the whole
 * response, stream chunks, the usage chunk, logprobs in the chat and the completion shapes.
 *
 * Builders produce compact single-line JSON, which is what SSE framing needs. A chat choice read
 * by a chat state gets its message fields and finish_reason from oai_chat.c; every choice gets
 * vLLM's stop_reason (and prompt_logprobs) from oai_fields.c; token texts come from oai_token.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/utf8.h"
#include "server/openai/oai_chat.h"
#include "server/openai/internal.h"

/* ---- accumulation ------------------------------------------------------------------------- */

int oai_choice_append_text(oai_choice *c, const char *s, size_t n)
{
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? c->text_cap * 2 : 256;
        while (cap < c->text_len + n + 1) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return -ENOMEM;
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
    return 0;
}

/* Appends one position to a growing oai_lp array. */
static int lp_append(oai_lp **v, int *n, int *cap, const smp_result *r, int has_logprob)
{
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        oai_lp *l = realloc(*v, sizeof *l * (size_t)c);
        if (!l) return -ENOMEM;
        *v = l;
        *cap = c;
    }
    (*v)[*n].r = *r;
    (*v)[*n].skip_space = 0;
    (*v)[(*n)++].has_logprob = has_logprob;
    return 0;
}

int oai_choice_append_lp(oai_choice *c, const smp_result *r, int has_logprob)
{
    return lp_append(&c->lps, &c->n_lps, &c->lps_cap, r, has_logprob);
}

int oai_choice_append_plp(oai_choice *c, const smp_result *r, int has_logprob)
{
    return lp_append(&c->plps, &c->n_plps, &c->plps_cap, r, has_logprob);
}

void oai_choice_free(oai_choice *c)
{
    free(c->text);
    free(c->lps);
    free(c->plps);
    oai_chat_state_free(c->chat);
    memset(c, 0, sizeof *c);
}

/* ---- builders ------------------------------------------------------------------------------ */

char *oai_string_json(const char *key, const char *value)
{
    char *v = utf8_sanitize(value, strlen(value));
    if (!v) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, key, v);
    free(v);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *bytes_array(const unsigned char *raw, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(raw[i]));
    return a;
}

/* One chat TokenLogprob; with_top adds its top_logprobs. */
static cJSON *chat_token_lp(const oai_resp *r, int32_t id, float lp, const oai_lp *top)
{
    unsigned char raw[256];
    int n = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", oai__token_string(r, id, raw, &n));
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON_AddItemToObject(o, "bytes", bytes_array(raw, n));
    if (top) {
        cJSON *a = cJSON_AddArrayToObject(o, "top_logprobs");
        int k = top->r.n_top < r->logprobs ? top->r.n_top : r->logprobs;
        for (int i = 0; i < k; i++)
            cJSON_AddItemToArray(a, chat_token_lp(r, top->r.top_ids[i], top->r.top_logprobs[i], NULL));
    }
    return o;
}

static cJSON *chat_logprobs(const oai_resp *r, const oai_lp *lps, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(c, chat_token_lp(r, lps[i].r.token, lps[i].r.logprob, &lps[i]));
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

static cJSON *completion_logprobs(const oai_resp *r, const oai_lp *lps, int n, size_t off)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = 0; i < n; i++) {
        const oai_lp *l = &lps[i];
        cJSON *ts = oai__token_string(r, l->r.token, NULL, NULL);
        cJSON_AddItemToArray(toks, ts);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += oai_lp_chars(r, l);
        if (!l->has_logprob) {
            cJSON_AddItemToArray(tlp, cJSON_CreateNull());
            cJSON_AddItemToArray(top, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(l->r.logprob));
        cJSON *d = cJSON_CreateObject();
        int k = l->r.n_top < r->logprobs ? l->r.n_top : r->logprobs;
        for (int j = 0; j < k; j++) {
            cJSON *s = oai__token_string(r, l->r.top_ids[j], NULL, NULL);
            if (!cJSON_GetObjectItemCaseSensitive(d, s->valuestring))
                cJSON_AddNumberToObject(d, s->valuestring, l->r.top_logprobs[j]);
            cJSON_Delete(s);
        }
        cJSON *s = oai__token_string(r, l->r.token, NULL, NULL);
        if (!cJSON_GetObjectItemCaseSensitive(d, s->valuestring))
            cJSON_AddNumberToObject(d, s->valuestring, l->r.logprob);
        cJSON_Delete(s);
        cJSON_AddItemToArray(top, d);
    }
    return o;
}

char *oai_logprobs_json(const oai_resp *r, const oai_lp *lps, int n, size_t text_offset)
{
    cJSON *o = r->kind == OAI_CHAT ? chat_logprobs(r, lps, n) : completion_logprobs(r, lps, n, text_offset);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *head(const oai_resp *r, const char *object)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    return o;
}

static cJSON *usage_json(const oai_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens);
    return o;
}

static void add_finish(cJSON *o, const oai_choice *c, int finish)
{
    const char *f = c && c->chat ? oai__chat_finish(c, finish) : oai_finish_name(finish);
    if (f) cJSON_AddStringToObject(o, "finish_reason", f);
    else cJSON_AddNullToObject(o, "finish_reason");
}

static cJSON *lp_or_null(const oai_resp *r, const oai_lp *lps, int n, size_t off)
{
    if (r->logprobs < 0) return cJSON_CreateNull();
    return r->kind == OAI_CHAT ? chat_logprobs(r, lps, n) : completion_logprobs(r, lps, n, off);
}

char *oai_response_json(const oai_resp *r, const oai_choice *choices, int n, const oai_usage *u)
{
    int chat = r->kind == OAI_CHAT;
    cJSON *o = head(r, chat ? "chat.completion" : "text_completion");
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n; i++) {
        const oai_choice *c = &choices[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", c->index);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (c->chat)
                oai__chat_message(m, c);
            else
                cJSON_AddStringToObject(m, "content", c->text ? c->text : "");
            cJSON_AddNullToObject(m, "refusal");
        } else {
            cJSON_AddStringToObject(ch, "text", c->text ? c->text : "");
        }
        cJSON_AddItemToObject(ch, "logprobs", lp_or_null(r, c->lps, c->n_lps, c->text_offset));
        add_finish(ch, chat ? c : NULL, c->finish);
        oai__add_stop_reason(ch, r, c, c->finish);
        if (!chat && r->prompt_logprobs >= 0)
            cJSON_AddItemToObject(ch, "prompt_logprobs", oai__prompt_logprobs_json(r, c->plps, c->n_plps));
        cJSON_AddItemToArray(arr, ch);
    }
    if (chat && r->prompt_logprobs >= 0 && n > 0)
        cJSON_AddItemToObject(o, "prompt_logprobs", oai__prompt_logprobs_json(r, choices[0].plps, choices[0].n_plps));
    cJSON_AddItemToObject(o, "usage", usage_json(u));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* "data: " + json + "\n\n", consuming json. */
static char *sse_wrap(char *json)
{
    if (!json) return NULL;
    size_t n = strlen(json);
    char *s = malloc(n + 9);
    if (s) {
        memcpy(s, "data: ", 6);
        memcpy(s + 6, json, n);
        memcpy(s + 6 + n, "\n\n", 3);
    }
    free(json);
    return s;
}

char *oai_chunk_sse(const oai_resp *r, const oai_choice *c, int role, const char *text, size_t len,
                    const oai_lp *lps, int n_lps, size_t text_offset, int finish)
{
    int index = c->index;
    int chat = r->kind == OAI_CHAT;
    if (chat) {
        char *t = strndup(text ? text : "", text ? len : 0);
        if (!t) return NULL;
        cJSON *d = cJSON_CreateObject();
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (role || len || n_lps) cJSON_AddStringToObject(d, "content", t);
        free(t);
        return oai__chat_chunk(r, c, d, lps, n_lps, finish);
    }
    cJSON *o = head(r, "text_completion");
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", index);
    char *t = strndup(text ? text : "", text ? len : 0);
    if (!t) {
        cJSON_Delete(o);
        cJSON_Delete(ch);
        return NULL;
    }
    cJSON_AddStringToObject(ch, "text", t);
    cJSON_AddItemToObject(ch, "logprobs",
                          r->logprobs >= 0 ? completion_logprobs(r, lps, n_lps, text_offset) : cJSON_CreateNull());
    free(t);
    add_finish(ch, NULL, finish);
    oai__add_stop_reason(ch, r, c, finish);
    cJSON_AddItemToArray(arr, ch);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return sse_wrap(json);
}

char *oai__chat_chunk(const oai_resp *r, const oai_choice *c, cJSON *delta, const oai_lp *lps,
                      int n_lps, int finish)
{
    cJSON *o = head(r, "chat.completion.chunk");
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", c->index);
    cJSON_AddItemToObject(ch, "delta", delta);
    cJSON_AddItemToObject(ch, "logprobs", n_lps ? lp_or_null(r, lps, n_lps, 0) : cJSON_CreateNull());
    add_finish(ch, c, finish);
    oai__add_stop_reason(ch, r, c, finish);
    cJSON_AddItemToArray(arr, ch);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return sse_wrap(json);
}

char *oai_usage_chunk_sse(const oai_resp *r, const oai_usage *u)
{
    cJSON *o = head(r, r->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_json(u));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return sse_wrap(json);
}
