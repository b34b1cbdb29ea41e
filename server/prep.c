/*
 * prep.c — everything a request needs before the engine sees it, off the loop thread.
 *
 *   loop thread                         libuv worker thread            loop thread
 *   srv__prep_start: hold, queue    ──► prep_work: parse the body,  ──► prep_done: resume the
 *   (phase PREP)                        template, tokenize, truncate,   connection (phase PREPPED);
 *                                       check the context, bad words,   MHD re-enters the handler
 *                                       echo text, or a whole /tokenize  and gen.c submits or replies
 *                                       or /detokenize reply
 *
 * Text and chats become token ids here (srv__text_ids, srv__chat_ids: the model's BOS and the
 * chat template as the request asks).
 *
 * A 15 MB prompt costs seconds of tokenization; done here, /health and every open stream go on
 * being served meanwhile. While phase is PREP the worker owns r->oreq, the prep arrays, the
 * subs/choices and r->result; the loop thread touches none of them (gen.c's cancel looks at is_gen,
 * which stays 0 until submission; the ping timer only at streams, begun after it), and r is not
 * freed before prep_done ran (gen.c's busy hook). The tokenizer is immutable and thread-safe; the
 * chat template renderer keeps no shared state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "model/chat.h"
#include "model/utf8.h"
#include "server/internal.h"
#include "server/openai/oai_chat.h"
#include "server/openai/oai_pool.h"
#include "server/toolcall/toolcall.h"

/* ---- tokenization ------------------------------------------------------------------------- */

static int encode(srv *s, const char *text, int add_special, int parse_special, int32_t **ids,
                  int *n_ids, oai_error *e)
{
    size_t len = strlen(text);
    int cap = (int)(len < 64 ? 64 : len + 8);
    for (int tries = 0; tries < 2; tries++) {
        int32_t *buf = malloc(sizeof *buf * (size_t)cap);
        if (!buf) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        int n = tok_encode(s->tok, text, len, add_special, parse_special, buf, cap);
        if (n < 0) {
            free(buf);
            return oai_fail(e, 400, "invalid_request_error", "invalid_value", NULL,
                            "the text cannot be tokenized (%s)", strerror(-n));
        }
        if (n <= cap) {
            if (n == 0 && add_special && tok_bos(s->tok) >= 0) buf[n++] = tok_bos(s->tok);
            *ids = buf;
            *n_ids = n;
            return 0;
        }
        free(buf);
        cap = n;
    }
    return oai_fail(e, 500, "server_error", NULL, NULL, "tokenizer size mismatch");
}

int srv__text_ids(srv *s, const char *text, int add_special, int32_t **ids, int *n_ids, oai_error *e)
{
    return encode(s, text, add_special, 0, ids, n_ids, e);
}

int srv__chat_ids(srv *s, const oai_chat *ch, int add_generation_prompt, int32_t **ids,
                  int *n_ids, oai_error *e)
{
    jinja_ctx *c = jinja_ctx_create(NULL);
    if (!c) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    chat_vars v;
    int rc = oai_chat_vars(ch, c, add_generation_prompt, &v, e);
    char *text = NULL, err[600] = "";
    size_t len = 0;
    int add_bos = 0;
    if (!rc) {
        int r = chat_tmpl_render(s->tmpl, &v, &text, &len, &add_bos, err, sizeof err);
        if (r == -ENOMEM)
            rc = oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        else if (r)
            rc = oai_fail(e, 400, "invalid_request_error", "invalid_value", "messages",
                          "the chat template cannot render these messages: %s", err);
    }
    jinja_ctx_destroy(c);
    if (rc) return rc;
    if (strlen(text) != len) {
        free(text);
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", "messages",
                        "the chat template rendered a NUL character");
    }
    rc = encode(s, text, add_bos, 1, ids, n_ids, e);
    free(text);
    return rc;
}

/* Completions with echo and logprobs score the prompt tokens too (and so does prompt_logprobs). */
static int echo_logprobs(const oai_request *q)
{
    return q->kind != OAI_CHAT && q->echo && q->logprobs >= 0;
}

int srv__prompt_scored(const oai_request *q)
{
    return echo_logprobs(q) || q->prompt_logprobs >= 0;
}

int srv__prompt_logprobs_shown(const oai_request *q)
{
    return q->prompt_logprobs >= 0 ? q->prompt_logprobs : echo_logprobs(q) ? q->logprobs : -1;
}

/* The context check of one prompt: its max_tokens (the default when absent) into *mx. With a
 * KV window (--kv-window) the context caps the prompt alone: an explicit max_tokens may run past
 * it, and a chat without one still stops at the context. */
static int fit_context(srv *s, const oai_request *q, int n, int64_t kv_tokens, int windowed, int *mx, oai_error *e)
{
    /* Without max_tokens, chat may fill the context (or what the KV cache holds of it). */
    int limit = s->n_ctx;
    if (kv_tokens > 0 && kv_tokens < limit && !windowed) limit = (int)kv_tokens;
    int want = q->max_tokens >= 0 ? q->max_tokens : q->kind == OAI_CHAT ? limit - n : 16;
    if (q->max_tokens < 0 && n + want > limit) want = limit - n;
    int past = windowed ? n > s->n_ctx : n + want > s->n_ctx;
    if ((windowed ? n > limit : n >= limit) || want < 0 || past)
        return oai_fail(e, 400, "invalid_request_error", "context_length_exceeded",
                        q->kind == OAI_CHAT ? "messages" : "prompt",
                        "This model's maximum context length is %d tokens. However, you requested "
                        "%d tokens (%d in the prompt, %d for the completion). Please reduce the "
                        "prompt or max_tokens.",
                        s->n_ctx, n + (want > 0 ? want : 0), n, want > 0 ? want : 0);
    *mx = want;
    return 0;
}

/* How a chat answer is read: the reasoning parser, and the tool-call syntax when tools may be
 * called (the template's family, or that of the request's own template). A grammar (a forced
 * tool choice, structured outputs) constrains the output from its first token, so there is no
 * reasoning in it to read: deepseek_r1 would otherwise take all of it for reasoning. */
static void chat_output_mode(srv *s, const oai_request *q, oai_chat *ch)
{
    const char *parser = s->cfg->tool_call_parser;
    ch->reasoning = q->grammar ? TC_REASON_NONE : s->reasoning;
    ch->syntax = TC_SYNTAX_NONE;
    if (!ch->n_tools || ch->tool_choice == OAI_TOOLS_NONE) return;
    ch->syntax = s->tool_syntax;
    if (ch->chat_template && (!parser || !strcmp(parser, "auto")))
        ch->syntax = tc_syntax_detect(ch->chat_template);
    if (ch->constrained) /* the grammar wrote the arguments, or an array of calls */
        ch->syntax = ch->tool_choice == OAI_TOOLS_NAMED ? TC_ARGS : TC_JSON;
}

/* Text bytes prompt p renders at least (chat: the message contents). */
static size_t prompt_bytes(const oai_request *q, int p)
{
    size_t b = 0;
    if (q->kind == OAI_CHAT)
        for (int i = 0; i < q->n_msgs; i++) b += strlen(q->msgs[i].content);
    else if (q->prompts[p].text)
        b = strlen(q->prompts[p].text);
    return b;
}

/* Prompt p's token ids into *ids / *n, truncated to truncate_prompt_tokens. A text so long that
 * it cannot fit the context whatever its tokens is refused before it is encoded (without
 * truncation, which needs the tokens). */
static int prompt_ids(srv *s, const oai_request *q, int p, int32_t **ids, int *n, oai_error *e)
{
    size_t least = prompt_bytes(q, p) / tok_max_token_bytes(s->tok);
    if (!q->truncate_prompt_tokens && least > (size_t)s->n_ctx)
        return oai_fail(e, 400, "invalid_request_error", "context_length_exceeded",
                        q->kind == OAI_CHAT ? "messages" : "prompt",
                        "This model's maximum context length is %d tokens. However, your prompt "
                        "needs at least %zu tokens. Please reduce the prompt.",
                        s->n_ctx, least);
    int rc;
    if (q->kind == OAI_CHAT) {
        rc = srv__chat_ids(s, q->chat, q->add_generation_prompt, ids, n, e);
        if (!rc) chat_output_mode(s, q, q->chat);
    } else if (q->prompts[p].text) {
        rc = srv__text_ids(s, q->prompts[p].text, 1, ids, n, e);
    } else {
        *ids = malloc(sizeof **ids * (size_t)q->prompts[p].n_ids);
        if (!*ids) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(*ids, q->prompts[p].ids, sizeof **ids * (size_t)q->prompts[p].n_ids);
        *n = q->prompts[p].n_ids;
        rc = 0;
    }
    if (rc) return rc;
    int k = q->truncate_prompt_tokens;
    if (k > 0 && *n > k) { /* keep the last k tokens, as vLLM does */
        memmove(*ids, *ids + (*n - k), sizeof **ids * (size_t)k);
        *n = k;
    }
    return 0;
}

/* Token ids of every prompt, with the context checks, into r->prep_*. On failure nothing is left
 * allocated. */
static int build_prompts(srv_req *r, oai_error *e)
{
    srv *s = srv__of(r);
    oai_request *q = &r->oreq;
    if (q->truncate_prompt_tokens > s->n_ctx)
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", "truncate_prompt_tokens",
                        "truncate_prompt_tokens value (%d) is greater than max_model_len (%d); "
                        "please select a smaller truncation size",
                        q->truncate_prompt_tokens, s->n_ctx);
    int np = q->kind == OAI_CHAT ? 1 : q->n_prompts;
    int32_t **ids = calloc((size_t)np, sizeof *ids);
    int *n = calloc((size_t)np, sizeof *n), *mx = calloc((size_t)np, sizeof *mx);
    int rc = ids && n && mx ? 0 : oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int p = 0; !rc && p < np; p++) {
        rc = prompt_ids(s, q, p, &ids[p], &n[p], e);
        if (!rc && n[p] == 0)
            rc = oai_fail(e, 400, "invalid_request_error", "invalid_value", "prompt", "the prompt is empty");
        if (!rc) rc = fit_context(s, q, n[p], r->prep_kv_tokens, r->prep_windowed, &mx[p], e);
    }
    if (rc) {
        for (int p = 0; ids && p < np; p++) free(ids[p]);
        free(ids);
        free(n);
        free(mx);
        return rc;
    }
    r->prep_ids = ids;
    r->prep_n = n;
    r->prep_max = mx;
    r->n_prep = np;
    return 0;
}

/* One token sequence of bad_words into the flattened list (grown as needed). */
static int bad_append(smp_params *p, int *cap, const int32_t *ids, int n)
{
    int used = p->n_bad ? p->bad_off[p->n_bad] : 0;
    if (used + n > *cap || !p->bad_off) {
        int c = (*cap ? *cap * 2 : 64) + n;
        int32_t *v = realloc(p->bad_ids, sizeof *v * (size_t)c);
        if (!v) return -ENOMEM;
        p->bad_ids = v;
        *cap = c;
    }
    int32_t *off = realloc(p->bad_off, sizeof *off * (size_t)(p->n_bad + 2));
    if (!off) return -ENOMEM;
    p->bad_off = off;
    if (!p->n_bad) off[0] = 0;
    memcpy(p->bad_ids + used, ids, sizeof *ids * (size_t)n);
    off[++p->n_bad] = used + n;
    return 0;
}

/* bad_words → token sequences, as vLLM derives them: each word without special tokens, and again
 * after a space when that spells it with a different first token of the same length (the word
 * in the middle of a text). */
static int build_bad_words(srv_req *r, oai_error *e)
{
    oai_request *q = &r->oreq;
    smp_params *p = &q->sampling;
    int cap = 0;
    for (int w = 0; w < q->n_bad_words; w++) {
        const char *word = q->bad_words[w];
        while (*word == ' ') word++;
        if (!*word) continue;
        char *spaced = malloc(strlen(word) + 2);
        if (!spaced) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        spaced[0] = ' ';
        strcpy(spaced + 1, word);
        int32_t *a = NULL, *b = NULL;
        int na = 0, nb = 0;
        int rc = srv__text_ids(srv__of(r), word, 0, &a, &na, e);
        if (!rc) rc = srv__text_ids(srv__of(r), spaced, 0, &b, &nb, e);
        free(spaced);
        if (!rc && na > 0 && bad_append(p, &cap, a, na)) rc = oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        if (!rc && na > 0 && nb == na && b[0] != a[0] && bad_append(p, &cap, b, nb))
            rc = oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        free(a);
        free(b);
        if (rc) return rc;
    }
    return 0;
}

/* Allocates subs and choices and the echo texts (valid UTF-8: echoed token ids may decode to
 * stray bytes, which become U+FFFD). */
static int alloc_state(srv_req *r)
{
    oai_request *q = &r->oreq;
    int np = r->n_prep;
    r->n_subs = np;
    r->n_choices = np * q->best_of;
    r->subs = calloc((size_t)np, sizeof *r->subs);
    r->choices = calloc((size_t)r->n_choices, sizeof *r->choices);
    r->last_tok_us = calloc((size_t)r->n_choices, sizeof *r->last_tok_us);
    if (!r->subs || !r->choices || !r->last_tok_us) return -ENOMEM;
    if (q->echo) {
        r->echo_text = calloc((size_t)np, sizeof *r->echo_text);
        if (!r->echo_text) return -ENOMEM;
        for (int p = 0; p < np; p++) {
            if (q->prompts[p].text) {
                r->echo_text[p] = strdup(q->prompts[p].text);
            } else {
                int len = tok_decode(srv__of(r)->tok, r->prep_ids[p], r->prep_n[p], 1, NULL, 0);
                char *raw = malloc((size_t)(len > 0 ? len : 0) + 1);
                if (raw) {
                    if (len > 0)
                        tok_decode(srv__of(r)->tok, r->prep_ids[p], r->prep_n[p], 1, raw, len);
                    raw[len > 0 ? len : 0] = 0;
                    r->echo_text[p] = utf8_sanitize(raw, (size_t)(len > 0 ? len : 0));
                    free(raw);
                }
            }
            if (!r->echo_text[p]) return -ENOMEM;
        }
    }
    for (int c = 0; c < r->n_choices; c++) {
        oai_choice *ch = &r->choices[c];
        int p = c / q->best_of;
        ch->index = p * q->n + c % q->best_of;
        if (q->echo) {
            /* With scored prompt tokens the offsets count from the start of the echoed prompt. */
            ch->text_offset = echo_logprobs(q) ? 0 : oai_text_chars(r->echo_text[p], strlen(r->echo_text[p]));
            if (!q->stream && oai_choice_append_text(ch, r->echo_text[p], strlen(r->echo_text[p]))) return -ENOMEM;
        }
    }
    return 0;
}

/* A generation request: parse, prompts, bad words, response state. */
static int prep_generation(srv_req *r, oai_error *e)
{
    srv *s = srv__of(r);
    oai_limits lim = {s->model_id, s->n_vocab, s->grammars};
    int rc = r->prep_kind >= SRV_PREP_RESPONSES
                 ? srv__dialect_parse(r, &lim, e)
                 : oai_parse(r->prep_kind, r->h.body ? r->h.body : "", r->h.body_len, &lim, &r->oreq, e);
    if (rc) return -EINVAL;
    if (build_prompts(r, e) || build_bad_words(r, e)) return -EINVAL;
    if (alloc_state(r)) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* /tokenize: the reply JSON into r->result. */
static int prep_tokenize(srv_req *r, oai_error *e)
{
    srv *s = srv__of(r);
    oai_tok_request t;
    if (oai_parse_tokenize(r->h.body ? r->h.body : "", r->h.body_len, &t, e)) return -EINVAL;
    int32_t *ids = NULL;
    int n = 0;
    int rc = t.prompt ? srv__text_ids(s, t.prompt, t.add_special, &ids, &n, e)
                      : srv__chat_ids(s, t.chat, t.add_generation_prompt, &ids, &n, e);
    oai_tok_request_free(&t);
    if (rc) return rc;
    size_t cap = 64 + (size_t)n * 12;
    char *out = malloc(cap);
    if (out) {
        size_t o = (size_t)snprintf(out, cap, "{\"count\":%d,\"max_model_len\":%d,\"tokens\":[", n, s->n_ctx);
        for (int i = 0; i < n; i++) o += (size_t)snprintf(out + o, cap - o, i ? ",%d" : "%d", ids[i]);
        snprintf(out + o, cap - o, "]}");
    }
    free(ids);
    if (!out) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    r->result = out;
    return 0;
}

/* /detokenize: the reply JSON into r->result. */
static int prep_detokenize(srv_req *r, oai_error *e)
{
    srv *s = srv__of(r);
    oai_tok_request t;
    oai_limits lim = {s->model_id, s->n_vocab, NULL};
    if (oai_parse_detokenize(r->h.body ? r->h.body : "", r->h.body_len, &lim, &t, e))
        return -EINVAL;
    int len = t.n_tokens ? tok_decode(s->tok, t.tokens, t.n_tokens, 1, NULL, 0) : 0;
    char *text = malloc((size_t)(len > 0 ? len : 0) + 1);
    if (text) {
        if (len > 0) tok_decode(s->tok, t.tokens, t.n_tokens, 1, text, len);
        text[len > 0 ? len : 0] = 0;
    }
    oai_tok_request_free(&t);
    r->result = text ? oai_string_json("prompt", text) : NULL;
    free(text);
    return r->result ? 0 : oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* Worker thread. Preparation yields to the engine: the pool threads run at a lower priority, so
 * a huge prompt being tokenized does not stretch the inter-token gaps of running streams. */
static void prep_work(uv_work_t *w)
{
    srv_req *r = w->data;
    static __thread int niced;
    if (!niced) {
        niced = 1;
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 5);
    }
    oai_error *e = &r->prep_err;
    switch (r->prep_kind) {
    case SRV_PREP_TOKENIZE: r->prep_rc = prep_tokenize(r, e); break;
    case SRV_PREP_DETOKENIZE: r->prep_rc = prep_detokenize(r, e); break;
    case SRV_PREP_POOL + OAI_EMBED:
    case SRV_PREP_POOL + OAI_RERANK:
    case SRV_PREP_POOL + OAI_SCORE: r->prep_rc = srv__pool_prep(r, e); break;
    case SRV_PREP_COUNT_TOKENS: r->prep_rc = srv__dialect_count_tokens(r, e); break;
    default: r->prep_rc = prep_generation(r, e); break;
    }
}

/* Loop thread: hand the request back to MHD, which re-enters the access handler. */
static void prep_done(uv_work_t *w, int status)
{
    srv_req *r = w->data;
    if (status && !r->prep_rc) /* cancelled (shutdown): never ran */
        r->prep_rc = oai_fail(&r->prep_err, 503, "server_error", "server_shutting_down", NULL,
                              "The server is shutting down");
    r->phase = SRV_PHASE_PREPPED;
    srv *s = srv__of(r);
    if (r->h.conn) {
        http_resume(&r->h);
        http_run(r->h.server);
    } else {
        http_req_maybe_free(&r->h);
    }
    srv__drain_check(s); /* a drain may have waited for this preparation */
}

enum MHD_Result srv__prep_start(srv_req *r, int kind, http_handler_fn then)
{
    srv *s = srv__of(r);
    r->prep_kind = kind;
    r->phase = SRV_PHASE_PREP;
    if (s->e) {
        engine_stats st;
        engine_get_stats(s->e, &st);
        r->prep_kv_tokens = st.kv_capacity_tokens;
        r->prep_windowed = st.kv_window > 0;
    }
    r->prep_work.data = r;
    if (uv_queue_work(&s->loop, &r->prep_work, prep_work, prep_done)) {
        r->phase = 0;
        oai_error e;
        oai_fail(&e, 500, "server_error", NULL, NULL, "cannot queue the request's preparation");
        return http_reply_error(&r->h, &e);
    }
    r->h.reenter = then;
    http_watch_start(&r->h);
    http_suspend(&r->h);
    return MHD_YES;
}

void srv__prep_free(srv_req *r)
{
    for (int p = 0; r->prep_ids && p < r->n_prep; p++) free(r->prep_ids[p]);
    free(r->prep_ids);
    free(r->prep_n);
    free(r->prep_max);
    r->prep_ids = NULL;
    r->prep_n = r->prep_max = NULL;
    r->n_prep = 0;
}
