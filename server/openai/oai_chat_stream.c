/*
 * oai_chat_stream.c — a chat answer as OpenAI's stream chunks (oai_chat_feed in oai_chat.h): the
 * deltas of a choice's toolcall/ parser become delta.content, delta.reasoning_content,
 * delta.tool_calls with index / id / type / function.name first and function.arguments in
 * pieces, or the legacy delta.function_call. Consecutive deltas of one kind within a feed are
 * merged into one chunk, and the logprobs of the feed's token ride on the first chunk (or on an
 * empty one when the parser holds the token's text back).
 *
 * A list of calls that tool_choice "required" constrained (calls_only) streams no content: the
 * grammar wrote nothing but calls, and what the parser could not read as one is a call cut short
 * by max_tokens (whose arguments came in pieces already; finish_reason "length" says so).
 *
 * Above oai_response.c (the chunk builder) and oai_chat.c (the chat state it reads).
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/openai/oai_chat.h"
#include "server/openai/internal.h"
#include "server/toolcall/toolcall.h"

/* The stream chunks of one feed: consecutive deltas of one kind are merged into one chunk. */
typedef struct feed_out {
    const oai_resp *r;
    const oai_choice *c;
    const oai_chat_state *st;
    int kind, index; /* the pending delta (-1: none) */
    char *text;      /* its text */
    size_t len;
    const char *id, *name;
    char *sse; /* chunks so far */
    size_t sse_len;
    const oai_lp *lps; /* still to send */
    int n_lps;
    int oom;
} feed_out;

static cJSON *call_delta(const feed_out *f)
{
    cJSON *d = cJSON_CreateObject();
    cJSON *fn = cJSON_CreateObject();
    if (f->kind == TC_D_CALL) cJSON_AddStringToObject(fn, "name", f->name);
    char *t = strndup(f->text ? f->text : "", f->len);
    cJSON_AddStringToObject(fn, "arguments", t ? t : "");
    free(t);
    if (f->st->legacy) {
        cJSON_AddItemToObject(d, "function_call", fn);
        return d;
    }
    cJSON *arr = cJSON_AddArrayToObject(d, "tool_calls"), *call = cJSON_CreateObject();
    cJSON_AddNumberToObject(call, "index", f->index);
    if (f->kind == TC_D_CALL) {
        cJSON_AddStringToObject(call, "id", f->id);
        cJSON_AddStringToObject(call, "type", "function");
    }
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(arr, call);
    return d;
}

static void flush(feed_out *f)
{
    if (f->kind < 0) return;
    cJSON *d;
    if (f->kind == TC_D_CONTENT || f->kind == TC_D_REASONING) {
        d = cJSON_CreateObject();
        char *t = strndup(f->text ? f->text : "", f->len);
        cJSON_AddStringToObject(d, f->kind == TC_D_CONTENT ? "content" : "reasoning_content",
                                t ? t : "");
        free(t);
    } else
        d = call_delta(f);
    char *chunk = oai__chat_chunk(f->r, f->c, d, f->lps, f->n_lps, 0);
    f->lps = NULL;
    f->n_lps = 0;
    size_t n = chunk ? strlen(chunk) : 0;
    char *s = chunk ? realloc(f->sse, f->sse_len + n + 1) : NULL;
    if (!s)
        f->oom = 1;
    else {
        memcpy(s + f->sse_len, chunk, n + 1);
        f->sse = s;
        f->sse_len += n;
    }
    free(chunk);
    free(f->text);
    f->text = NULL;
    f->len = 0;
    f->kind = -1;
}

static void on_delta(void *ud, const tc_delta *d)
{
    feed_out *f = ud;
    if (f->st->calls_only && d->kind == TC_D_CONTENT) return;
    if ((d->kind == TC_D_CALL || d->kind == TC_D_ARGS) && d->index > 0 && !f->st->parallel) return;
    int merge = f->kind == d->kind && d->kind != TC_D_CALL &&
                (d->kind != TC_D_ARGS || f->index == d->index);
    merge |= f->kind == TC_D_CALL && d->kind == TC_D_ARGS && f->index == d->index;
    if (!merge) {
        flush(f);
        f->kind = d->kind;
        f->index = d->index;
        f->id = d->id;
        f->name = d->name;
    }
    if (d->len) {
        char *t = realloc(f->text, f->len + d->len + 1);
        if (!t) {
            f->oom = 1;
            return;
        }
        memcpy(t + f->len, d->text, d->len);
        f->text = t;
        f->len += d->len;
    }
}

char *oai_chat_feed(const oai_resp *r, oai_choice *c, const char *text, size_t n, int final,
                    const oai_lp *lps, int n_lps, int *oom)
{
    *oom = 0;
    if (!c->chat) return NULL;
    feed_out f = {r, c, c->chat, -1, 0, NULL, 0, NULL, NULL, NULL, 0, lps, n_lps, 0};
    int rc = tc_parser_feed(c->chat->p, text, n, final, r ? on_delta : NULL, r ? &f : NULL);
    if (r) flush(&f);
    if (r && f.n_lps && !f.oom) { /* logprobs of a token whose text is held back */
        f.kind = TC_D_CONTENT;
        f.len = 0;
        cJSON *d = cJSON_CreateObject();
        char *chunk = oai__chat_chunk(r, c, d, f.lps, f.n_lps, 0);
        size_t k = chunk ? strlen(chunk) : 0;
        char *s = chunk ? realloc(f.sse, f.sse_len + k + 1) : NULL;
        if (s)
            memcpy(s + f.sse_len, chunk, k + 1), f.sse = s, f.sse_len += k;
        else
            f.oom = 1;
        free(chunk);
    }
    free(f.text);
    *oom = rc || f.oom;
    return f.sse;
}
