/*
 * gen.c — completions and chat completions over the engine, and the tokenizer endpoints.
 *
 * A request is prepared on a worker thread (prep.c: parsed by openai/, its prompts made token ids),
 * then each prompt is submitted as one engine request with n = best_of choices. Engine events (one
 * per token) are turned into SSE chunks at once, or accumulated until every choice finished for a
 * non-streamed reply. Choice j of prompt p lives at choices[p * best_of + j]; the response index is
 * p * n + j (after ranking when best_of > n).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "model/chat.h"
#include "server/internal.h"
#include "server/openai/oai_chat.h"
#include "server/openai/oai_dialect.h"
#include "server/toolcall/toolcall.h"

/* ---- engine id → sub ------------------------------------------------------------------------ */

static unsigned hash_of(uint64_t id)
{
    return (unsigned)((id * 0x9E3779B97F4A7C15ull) >> 54) & (SRV_HASH - 1);
}

void srv__sub_insert(srv *s, srv_sub *b)
{
    unsigned h = hash_of(b->id);
    b->hnext = s->hash[h];
    s->hash[h] = b;
    b->in_hash = 1;
}

static void sub_remove(srv *s, srv_sub *b)
{
    if (!b->in_hash) return;
    for (srv_sub **p = &s->hash[hash_of(b->id)]; *p; p = &(*p)->hnext)
        if (*p == b) {
            *p = b->hnext;
            break;
        }
    b->in_hash = 0;
}

static srv_sub *sub_find(srv *s, uint64_t id)
{
    for (srv_sub *b = s->hash[hash_of(id)]; b; b = b->hnext)
        if (b->id == id) return b;
    return NULL;
}

/* ---- request life -------------------------------------------------------------------------- */

static int piece(void *ud, int32_t id, char *buf, int cap)
{
    return tok_token_bytes(ud, id, 0, buf, cap);
}

void srv__gen_cancel(srv_req *r)
{
    if (!r->is_gen) return; /* nothing submitted (the worker may still own the state) */
    for (int i = 0; i < r->n_subs; i++)
        if (r->subs[i].in_hash && r->subs[i].n_open > 0)
            engine_cancel(srv__of(r)->e, r->subs[i].id);
}

int srv__gen_busy(const srv_req *r)
{
    return r->n_open > 0 || r->phase == SRV_PHASE_PREP;
}

void srv__gen_closed(srv_req *r, int completed_ok)
{
    if (r->is_gen && r->n_open > 0) {
        if (!completed_ok) r->h.client_gone = 1;
        r->h.stream_abort = 1;
        srv__gen_cancel(r);
    }
    if (r->counted_active) {
        r->counted_active = 0;
        srv__of(r)->n_gen_active--;
    }
}

const char *srv__gen_ignored(const srv_req *r)
{
    /* The parse state is the worker's while the request is being prepared. */
    return srv__of(r)->cfg->verbose && r->phase != SRV_PHASE_PREP ? r->oreq.ignored : NULL;
}

void srv__gen_free(srv_req *r)
{
    srv__prep_free(r);
    for (int i = 0; i < r->n_subs; i++) sub_remove(srv__of(r), &r->subs[i]);
    for (int i = 0; i < r->n_choices; i++) oai_choice_free(&r->choices[i]);
    for (int i = 0; r->echo_text && i < r->n_subs; i++) free(r->echo_text[i]);
    free(r->echo_text);
    free(r->choices);
    free(r->last_tok_us);
    free(r->subs);
    free(r->result);
    srv__pool_free(r);
    oai_request_free(&r->oreq);
}

/* Copies what the engine takes ownership of (ids: the prompt, now the engine's). */
static int fill_engine_request(const oai_request *q, int32_t *ids, int n_ids, int max_tokens,
                               engine_request *er)
{
    memset(er, 0, sizeof *er);
    if (smp_params_copy(&er->sampling, &q->sampling)) return -ENOMEM;
    er->prompt = ids;
    er->n_prompt = n_ids;
    er->n = q->best_of;
    er->max_tokens = max_tokens;
    er->include_stop_str = q->include_stop_str;
    er->render_special = !q->skip_special;
    er->prompt_logprobs = srv__prompt_scored(q);
    int top = q->kind != OAI_CHAT && q->echo ? q->logprobs : -1;
    er->prompt_top = q->prompt_logprobs > top ? q->prompt_logprobs : top < 0 ? 0 : top;
    if (q->n_stop) {
        er->stop = calloc((size_t)q->n_stop, sizeof *er->stop);
        if (!er->stop) goto oom;
        for (int i = 0; i < q->n_stop; i++)
            if (!(er->stop[er->n_stop++] = strdup(q->stop[i]))) goto oom;
    }
    er->grammar = gr_ref(q->grammar);
    return 0;
oom:
    er->prompt = NULL;
    smp_params_free_arrays(&er->sampling);
    for (int i = 0; i < er->n_stop; i++) free(er->stop[i]);
    free(er->stop);
    return -ENOMEM;
}

static void free_engine_request(engine_request *er)
{
    free(er->prompt);
    gr_unref(er->grammar);
    smp_params_free_arrays(&er->sampling);
    for (int i = 0; i < er->n_stop; i++) free(er->stop[i]);
    free(er->stop);
}

int srv__submit_error(int rc, oai_error *e)
{
    if (rc == -E2BIG)
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", "prompt",
                        "The prompt is longer than the server's queue can ever hold "
                        "(--max-queued-tokens); shorten it");
    if (rc == -EAGAIN)
        return oai_fail(e, 503, "server_error", "server_is_overloaded", NULL,
                        "The server is overloaded (request queue full); retry later");
    if (rc == -ESHUTDOWN)
        return oai_fail(e, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down");
    if (rc == -EINVAL)
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", NULL,
                        "The engine cannot take this request (too many choices for --max-seqs, or "
                        "prompt + max_tokens beyond the KV cache)");
    return oai_fail(e, 500, "server_error", NULL, NULL, "submit failed: %s", strerror(-rc));
}

static enum MHD_Result gen_reenter(http_req *hr);

enum MHD_Result srv__gen_start(srv_req *r, int kind)
{
    srv *s = srv__of(r);
    oai_error e;
    engine_stats st;
    engine_get_stats(s->e, &st);
    if (!st.alive) {
        oai_fail(&e, 503, "server_error", "engine_stopped", NULL, "The inference engine has stopped");
        return http_reply_error(&r->h, &e);
    }
    return srv__prep_start(r, kind, gen_reenter);
}

/* The prepared request goes to the engine, one engine request per prompt. */
static enum MHD_Result gen_submit(srv_req *r)
{
    srv *s = srv__of(r);
    oai_request *q = &r->oreq;
    oai_error e;
    int np = r->n_prep, kind = q->kind;
    r->is_gen = 1;
    r->phase = SRV_PHASE_RUNNING;
    {
        static uint64_t ctr;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = ((uint64_t)ts.tv_sec * 1000000007ull) ^ ((uint64_t)ts.tv_nsec << 17) ^ (++ctr * 0x9E3779B97F4A7C15ull);
        r->id_seed = x;
        const char *pre = q->dialect ? oai_dialect_id_prefix(q->dialect) : kind == OAI_CHAT ? "chatcmpl-" : "cmpl-";
        /* as vLLM: the X-Request-Id header, else the body's request_id, else a fresh one */
        const char *given = r->h.req_id_given ? r->h.req_id : q->request_id;
        if (given) snprintf(r->id, sizeof r->id, "%s%s", pre, given);
        else snprintf(r->id, sizeof r->id, "%s%016llx%06llx", pre, (unsigned long long)x, (unsigned long long)(ctr & 0xffffff));
    }
    r->resp = (oai_resp){kind, r->id, (int64_t)time(NULL), s->model_id, q->logprobs, q->include_usage, piece, s->tok,
                         q->token_ids, q->stop, srv__prompt_logprobs_shown(q)};
    int rc = 0;
    for (int p = 0; !rc && p < np; p++) {
        engine_request er;
        srv_sub *b = &r->subs[p];
        if (fill_engine_request(q, r->prep_ids[p], r->prep_n[p], r->prep_max[p], &er)) {
            rc = -ENOMEM;
            break;
        }
        r->prep_ids[p] = NULL; /* now in er */
        rc = engine_submit(s->e, &er, &b->id);
        if (rc) {
            free_engine_request(&er);
            break;
        }
        b->req = r;
        b->prompt_idx = p;
        b->n_prompt = r->prep_n[p];
        b->n_open = q->best_of;
        r->n_open += q->best_of;
        r->h.n_prompt_tokens += r->prep_n[p];
        srv__sub_insert(s, b);
    }
    srv__prep_free(r);
    if (rc) {
        srv__gen_cancel(r);
        srv__submit_error(rc, &e);
        r->h.stream_abort = 1; /* events of already submitted prompts are dropped */
        return http_reply_error(&r->h, &e);
    }
    r->counted_active = 1;
    s->n_gen_active++;
    if (q->stream) {
        enum MHD_Result ret = http_stream_begin(&r->h);
        if (q->dialect) srv__dialect_stream_begin(r);
        return ret;
    }
    http_suspend(&r->h);
    return MHD_YES;
}

/* MHD's call for a held request (http_req.reenter): preparation done, or the engine's result
 * ready. */
static enum MHD_Result gen_reenter(http_req *hr)
{
    srv_req *r = (srv_req *)hr;
    if (r->phase == SRV_PHASE_PREP) { /* woken early (a disconnect, a stop): the worker still runs */
        /* http_stop resumes every connection as aborted: suspended again, one would abort MHD's
         * stop (the server died of SIGABRT when stopped during a grammar's compilation). */
        if (r->h.client_gone || r->h.stream_abort) return MHD_NO;
        http_suspend(&r->h);
        return MHD_YES;
    }
    if (r->phase == SRV_PHASE_PREPPED) {
        r->phase = SRV_PHASE_RUNNING;
        if (r->h.client_gone) return MHD_NO;
        if (r->prep_rc) return http_reply_error(&r->h, &r->prep_err);
        if (r->prep_kind == SRV_PREP_TOKENIZE || r->prep_kind == SRV_PREP_DETOKENIZE ||
            r->prep_kind == SRV_PREP_COUNT_TOKENS) {
            char *b = r->result;
            r->result = NULL;
            return http_reply(&r->h, 200, "application/json", b, b ? strlen(b) : 0);
        }
        if (srv__of(r)->http.draining) {
            oai_error e;
            oai_fail(&e, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down");
            return http_reply_error(&r->h, &e);
        }
        return r->pool ? srv__pool_submit(r) : gen_submit(r);
    }
    if (r->result) {
        char *b = r->result;
        r->result = NULL;
        return http_reply(&r->h, r->result_status, "application/json", b, strlen(b));
    }
    if (r->h.client_gone || r->h.stream_abort) return MHD_NO;
    http_suspend(&r->h);
    return MHD_YES;
}

/* ---- events --------------------------------------------------------------------------------- */

static void emit(srv_req *r, char *chunk)
{
    if (!chunk) {
        r->h.stream_abort = 1;
        srv__gen_cancel(r);
        return;
    }
    http_stream_append(&r->h, chunk, strlen(chunk));
    free(chunk);
}

static void stream_error(srv_req *r, const char *msg, const char *code)
{
    oai_error e;
    oai_fail(&e, 500, "server_error", code, NULL, "%s", msg);
    char *j = r->oreq.dialect ? NULL : oai_error_json(&e);
    if (r->oreq.dialect) srv__dialect_stream_error(r, &e);
    if (j) {
        http_stream_append(&r->h, "data: ", 6);
        http_stream_append(&r->h, j, strlen(j));
        http_stream_append(&r->h, "\n\n", 2);
        free(j);
    }
    r->h.stream_done = 1;
    http_resume(&r->h);
}

static void usage_of(const srv_req *r, oai_usage *u)
{
    memset(u, 0, sizeof *u);
    for (int p = 0; p < r->n_subs; p++) {
        u->prompt_tokens += r->subs[p].n_prompt;
        u->cached_tokens += r->subs[p].cached_tokens;
    }
    u->completion_tokens = r->h.n_output_tokens;
}

static int cmp_mean_lp(const void *a, const void *b)
{
    const oai_choice *x = a, *y = b;
    double mx = x->cum_logprob / (x->n_tokens > 0 ? x->n_tokens : 1);
    double my = y->cum_logprob / (y->n_tokens > 0 ? y->n_tokens : 1);
    return mx < my ? 1 : mx > my ? -1 : 0;
}

/* The choice's reader of reasoning and tool calls, created on first use; NULL when the request
 * needs none (or memory ran out: the text then goes out as it is). */
oai_chat_state *srv__chat_reader(srv_req *r, oai_choice *c)
{
    const oai_chat *ch = r->oreq.chat;
    if (c->chat || !ch || (ch->syntax == TC_SYNTAX_NONE && ch->reasoning == TC_REASON_NONE)) return c->chat;
    uint64_t seed = (0x9E3779B97F4A7C15ull * (uint64_t)(c - r->choices + 1)) ^ r->id_seed;
    c->chat = oai_chat_state_create(ch, seed);
    return c->chat;
}

/* Every choice finished: write the tail of the stream or build the whole response. */
static void finish_request(srv_req *r)
{
    oai_request *q = &r->oreq;
    oai_usage u;
    usage_of(r, &u);
    if (r->pool) {
        srv__pool_finish(r);
        http_resume(&r->h);
        return;
    }
    if (q->stream) {
        if (r->h.stream_done || r->h.stream_abort) return;
        if (r->failed) {
            if (r->failed & 2) stream_error(r, "the inference engine failed while generating", "engine_error");
            else stream_error(r, "the request was cancelled (server shutting down)", "request_cancelled");
            return;
        }
        if (q->dialect) srv__dialect_finish(r, &u); /* its own closing events, no [DONE] */
        else if (q->include_usage) emit(r, oai_usage_chunk_sse(&r->resp, &u));
        if (!q->dialect) http_stream_append(&r->h, "data: [DONE]\n\n", 14);
        r->h.stream_done = 1;
        http_resume(&r->h);
        return;
    }
    if (r->failed) {
        oai_error e;
        if (r->failed & 2)
            oai_fail(&e, 500, "server_error", "engine_error", NULL, "the inference engine failed while generating");
        else
            oai_fail(&e, 503, "server_error", "request_cancelled", NULL,
                     "the request was cancelled (server shutting down)");
        r->result = srv__error_json(r, &e);
        r->result_status = e.status;
    } else {
        int bo = q->best_of, nn = q->n;
        for (int i = 0; q->kind == OAI_CHAT && i < r->n_choices; i++) {
            oai_choice *c = &r->choices[i];
            int oom;
            if (srv__chat_reader(r, c)) oai_chat_feed(NULL, c, c->text ? c->text : "", c->text_len, 1, NULL, 0, &oom);
        }
        if (q->dialect) {
            srv__dialect_finish(r, &u);
        } else {
            oai_choice *sel = malloc(sizeof *sel * (size_t)(r->n_subs * nn) + 1);
            if (sel) {
                for (int p = 0; p < r->n_subs; p++) {
                    oai_choice *cand = r->choices + p * bo;
                    if (bo > nn) qsort(cand, (size_t)bo, sizeof *cand, cmp_mean_lp);
                    for (int j = 0; j < nn; j++) {
                        sel[p * nn + j] = cand[j];
                        sel[p * nn + j].index = p * nn + j;
                    }
                }
                r->result = oai_response_json(&r->resp, sel, r->n_subs * nn, &u);
                free(sel);
            }
            r->result_status = 200;
        }
        if (!r->result) {
            r->result = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
            r->result_status = 500;
        }
    }
    http_resume(&r->h);
}

/* A choice's final event: what the request's metrics need from it. */
static void note_final(srv_sub *b, const engine_event *ev)
{
    b->n_generated += ev->usage.completion_tokens;
    if (ev->index) return;
    b->reason = ev->finish;
    b->first_tokens = ev->usage.completion_tokens;
    b->timings = ev->timings;
}

static double secs(int64_t from_us, int64_t to_us)
{
    return (double)(to_us - from_us) / 1e6;
}

/* Every choice of b finished: one request for vLLM's per-request metrics. */
static void observe_request(srv *s, const srv_sub *b)
{
    met *m = &s->met;
    m->success[met_reason_of(b->reason)]++;
    if (b->reason != ENGINE_FINISH_STOP && b->reason != ENGINE_FINISH_LENGTH) return;
    const engine_timings *t = &b->timings;
    met_observe(&m->e2e, secs(t->arrival_us, t->finish_us));
    met_observe(&m->prompt_toks, b->n_prompt);
    met_observe(&m->gen_toks, b->n_generated);
    if (t->first_scheduled_us) {
        met_observe(&m->queue, secs(t->arrival_us, t->first_scheduled_us));
        met_observe(&m->inference, secs(t->first_scheduled_us, t->finish_us));
    }
    if (!t->first_token_us) return;
    met_observe(&m->ttft, secs(t->arrival_us, t->first_token_us));
    if (t->first_scheduled_us) met_observe(&m->prefill, secs(t->first_scheduled_us, t->first_token_us));
    met_observe(&m->decode, secs(t->first_token_us, t->finish_us));
    if (b->first_tokens > 1) met_observe(&m->tpot, secs(t->first_token_us, t->finish_us) / (b->first_tokens - 1));
}

/* One engine event for a streamed request. */
static void stream_event(srv_req *r, int p, oai_choice *c, const engine_event *ev)
{
    oai_request *q = &r->oreq;
    if (q->dialect) { /* the Responses / Messages APIs' own events */
        srv__dialect_stream_event(r, c, ev);
        return;
    }
    const oai_resp *rs = &r->resp;
    int has_lp = q->logprobs >= 0 && ev->logprobs && ev->n_tokens > 0;
    oai_lp lp[1];
    if (has_lp) {
        lp[0].r = ev->logprobs[0];
        lp[0].has_logprob = 1;
    }
    if (!c->started && ev->finish != ENGINE_FINISH_ABORT && ev->finish != ENGINE_FINISH_ERROR) {
        c->started = 1;
        if (q->kind == OAI_CHAT) {
            emit(r, oai_chunk_sse(rs, c, 1, "", 0, NULL, 0, 0, 0));
        } else if (q->echo && (r->echo_text[p][0] || c->n_lps)) {
            /* The echoed prompt, with its scored tokens when asked (collected until now). */
            emit(r, oai_chunk_sse(rs, c, 0, r->echo_text[p], strlen(r->echo_text[p]), c->lps,
                                  c->n_lps, 0, 0));
            for (int k = 0; k < c->n_lps; k++) c->text_offset += oai_lp_chars(rs, &c->lps[k]);
            c->n_lps = 0;
        }
    }
    int fin = ev->finish == ENGINE_FINISH_STOP || ev->finish == ENGINE_FINISH_LENGTH ? ev->finish : 0;
    if (q->kind == OAI_CHAT) {
        if (srv__chat_reader(r, c)) { /* reasoning / tool calls: the reader decides what goes out */
            int oom;
            char *chunks = oai_chat_feed(rs, c, ev->text, ev->text_len, fin != 0, lp, has_lp, &oom);
            if (chunks || oom) emit(r, chunks);
        } else if (ev->text_len || has_lp)
            emit(r, oai_chunk_sse(rs, c, 0, ev->text, ev->text_len, lp, has_lp, 0, 0));
        if (fin) emit(r, oai_chunk_sse(rs, c, 0, "", 0, NULL, 0, 0, fin));
    } else if (ev->text_len || has_lp || fin) {
        emit(r, oai_chunk_sse(rs, c, 0, ev->text, ev->text_len, lp, has_lp, c->text_offset, fin));
    }
    if (has_lp) c->text_offset += oai_token_chars(rs, lp[0].r.token);
}

/* 1 when the prompt token at position pos of c's echo starts the decoded text, which drops its
 * leading space (SentencePiece's dummy prefix): the first token, or the one after a BOS. */
static int starts_text(srv *s, const oai_choice *c, int pos)
{
    if (!tok_strips_space_after_bos(s->tok)) return 0;
    int32_t bos = tok_bos(s->tok);
    return pos == 0 ? c->lps[0].r.token != bos : pos == 1 && c->lps[0].r.token == bos;
}

void srv__gen_event(srv *s, engine_event *ev)
{
    srv_sub *b = sub_find(s, ev->id);
    if (!b) return;
    srv_req *r = b->req;
    oai_request *q = &r->oreq;
    int ci = b->prompt_idx * q->best_of + ev->index;
    if (ev->index < 0 || ev->index >= q->best_of) return;
    oai_choice *c = &r->choices[ci];
    int64_t now = clk_now_us();
    if (ev->n_tokens > 0 && !ev->is_prompt) {
        c->n_tokens += ev->n_tokens;
        if (r->last_tok_us[ci]) met_observe(&s->met.itl, (double)(now - r->last_tok_us[ci]) / 1e6);
        r->last_tok_us[ci] = now;
    }
    c->cum_logprob = ev->cum_logprob;
    if (ev->pooled && r->pool) srv__pool_take(r, b->prompt_idx, ev);
    if (ev->finish == ENGINE_FINISH_ABORT) r->failed |= 1;
    if (ev->finish == ENGINE_FINISH_ERROR) r->failed |= 2;
    if (ev->finish == ENGINE_FINISH_STOP && ev->stop_str >= 0) {
        c->stop_kind = OAI_STOP_STR;
        c->stop_value = ev->stop_str;
    } else if (ev->finish == ENGINE_FINISH_STOP && ev->stop_token >= 0) {
        c->stop_kind = OAI_STOP_TOKEN;
        c->stop_value = ev->stop_token;
    }
    if (ev->is_prompt) {
        /* Scored prompt tokens: kept in the choice (a stream sends them with the echo; the
         * prompt_logprobs field lists them apart). */
        for (int k = 0; !r->failed && ev->logprobs && k < ev->n_tokens; k++) {
            int has = !isnan(ev->logprobs[k].logprob);
            if (q->echo && q->logprobs >= 0 && !oai_choice_append_lp(c, &ev->logprobs[k], has))
                c->lps[c->n_lps - 1].skip_space = starts_text(s, c, c->n_lps - 1);
            if (r->resp.prompt_logprobs >= 0) oai_choice_append_plp(c, &ev->logprobs[k], has);
        }
    } else if (q->stream) {
        if (!r->failed && !r->h.stream_abort && !r->h.stream_done)
            stream_event(r, b->prompt_idx, c, ev);
    } else if (!r->failed) {
        if (ev->text_len) oai_choice_append_text(c, ev->text, ev->text_len);
        if (q->logprobs >= 0 && ev->logprobs)
            for (int k = 0; k < ev->n_tokens; k++) oai_choice_append_lp(c, &ev->logprobs[k], 1);
    }
    if (ev->finish == ENGINE_FINISH_NONE) return;
    c->finish = ev->finish;
    note_final(b, ev);
    b->cached_tokens = ev->usage.cached_tokens;
    if (ev->usage.prompt_tokens) b->n_prompt = ev->usage.prompt_tokens;
    r->h.n_output_tokens += ev->usage.completion_tokens;
    b->n_open--;
    r->n_open--;
    if (r->failed && !r->h.client_gone) srv__gen_cancel(r);
    if (b->n_open == 0) {
        observe_request(s, b);
        sub_remove(s, b);
    }
    if (r->n_open == 0) {
        if (r->h.conn) finish_request(r);
        http_req_maybe_free(&r->h);
    }
}

/* ---- /tokenize, /detokenize ----------------------------------------------------------------- */

enum MHD_Result srv__tokenize(srv_req *r)
{
    return srv__prep_start(r, SRV_PREP_TOKENIZE, gen_reenter);
}

enum MHD_Result srv__detokenize(srv_req *r)
{
    return srv__prep_start(r, SRV_PREP_DETOKENIZE, gen_reenter);
}
