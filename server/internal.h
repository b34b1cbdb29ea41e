/*
 * internal.h — what the files of a request's life share (server.c, routes.c, gen.c, prep.c,
 * watchdog.c). Everything here lives on the loop thread, but what prep.c's worker owns while a
 * request is being prepared.
 *
 *   srv ──http──► http_server ──reqs──► srv_req (one per HTTP request: an http_req first, then
 *        │                               the generation's state; see http/http.h for its life)
 *        ──hash──► srv_sub (one per engine request: a prompt of an HTTP request) ──req──► srv_req
 *
 * From the top down: server.c wires the rest (it hands http/ the routes and the hooks); routes.c
 * answers the small endpoints and passes generation to gen.c; gen.c submits to the engine and
 * turns its events into responses, after prep.c prepared the request; watchdog.c talks to
 * systemd. A srv_req is freed by http/ once its connection is done, the hook busy says no
 * (n_open == 0, not being prepared) and its disconnect watch is closed.
 */
#ifndef KVSERVE_SERVER_INTERNAL_H
#define KVSERVE_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <stdint.h>
#include <uv.h>

#include "engine/engine.h"
#include "model/chat.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "server/http/http.h"
#include "server/metrics.h"
#include "server/openai/openai.h"
#include "server/server.h"

typedef struct oai_chat_state oai_chat_state;

#define SRV_HASH 1024

typedef struct srv srv;
typedef struct srv_model_stat srv_model_stat; /* server.c: while draining, stops the loop once nothing is generated or prepared any more. */
void srv__drain_check(srv *s);

/* model_watch.c */
typedef struct srv_req srv_req;

typedef struct srv_sub {
    uint64_t id;              /* engine request id */
    srv_req *req;
    int prompt_idx;
    int n_prompt;             /* prompt tokens */
    int cached_tokens;        /* from the final events */
    int n_generated;          /* output tokens of all its choices (metrics) */
    int reason;               /* choice 0's finish (the request's, for metrics) */
    int first_tokens;         /* choice 0's output tokens */
    engine_timings timings;   /* choice 0's final timings */
    int n_open;               /* choices of this sub not finished */
    int in_hash;
    struct srv_sub *hnext;
} srv_sub;

/* Where a request stands with its preparation (prep.c). */
enum srv_phase {
    SRV_PHASE_NONE = 0, /* not a prepared route, or not started */
    SRV_PHASE_PREP,     /* on a worker thread: the worker owns the request's parse state */
    SRV_PHASE_PREPPED,  /* done: the access handler submits or replies when MHD re-enters it */
    SRV_PHASE_RUNNING,  /* submitted to the engine (or the reply queued) */
};

/* prep_kind values beyond the generation kinds (OAI_COMPLETION, OAI_CHAT); the pooled routes
 * are SRV_PREP_POOL + their enum oai_pool_kind (pooled.c). */
enum { SRV_PREP_TOKENIZE = 16, SRV_PREP_DETOKENIZE, SRV_PREP_POOL = 32 };
/* The Responses and Messages APIs: chat requests answered in their shapes (dialect.c). */
enum { SRV_PREP_RESPONSES = 48, SRV_PREP_MESSAGES, SRV_PREP_COUNT_TOKENS };

struct srv_pool; /* pooled.c: a pooled request's parse and results */

struct srv_req {
    http_req h;                  /* first: http/ allocates the whole srv_req (req_size) */
    /* preparation on a worker thread (prep.c) */
    uv_work_t prep_work;
    int phase;                   /* enum srv_phase */
    int prep_kind;               /* OAI_COMPLETION, OAI_CHAT, SRV_PREP_TOKENIZE, SRV_PREP_DETOKENIZE */
    int prep_rc;                 /* 0, or negative with prep_err filled */
    oai_error prep_err;
    int64_t prep_kv_tokens;      /* KV capacity in tokens when the job was queued */
    int prep_windowed;           /* 1: the engine runs a KV window (prompts alone are capped) */
    int32_t **prep_ids;          /* [n_prep] token ids per prompt (owned until submitted) */
    int *prep_n, *prep_max;      /* [n_prep] prompt lengths, max_tokens per prompt */
    int n_prep;
    /* generation requests */
    int is_gen;
    int counted_active;          /* counted in s->n_gen_active */
    oai_request oreq;
    oai_resp resp;
    char id[16 + OAI_MAX_REQUEST_ID]; /* resp.id: the kind's prefix and the request id */
    uint64_t id_seed;            /* random per request (tool-call ids), whatever the id says */
    srv_sub *subs;               /* [n_subs] one per prompt */
    int n_subs;
    oai_choice *choices;         /* [n_subs * best_of], sub p's choice j at p * best_of + j */
    int64_t *last_tok_us;        /* [same] arrival of the choice's last token (latency metric) */
    int n_choices;
    int n_open;                  /* choices not finished, over all subs */
    int failed;                  /* 1: a choice was cancelled; 2: the engine failed (bits) */
    char **echo_text;            /* [n_subs] prompt text for echo, or NULL */
    struct srv_pool *pool;       /* embeddings, rerank, score (pooled.c), else NULL */
    /* non-streamed result */
    char *result;                /* JSON body ready to send */
    int result_status;
};

struct srv {
    const srv_config *cfg;
    model *m;
    tokenizer *tok;
    engine *e;
    gr_cache *grammars;          /* compiled structured-output grammars by source (thread-safe) */
    chat_tmpl *tmpl;             /* the chat template (immutable: preparation threads share it) */
    int tool_syntax;             /* enum tc_syntax of the template's family (or --tool-call-parser) */
    int reasoning;               /* enum tc_reasoning (--reasoning-parser) */
    char model_id[256];
    int n_ctx;
    int n_vocab;
    int64_t created;             /* Unix seconds at start-up (/v1/models) */
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t ping_timer, drain_timer;
    uv_signal_t sig_term, sig_int, sig_hup;
    http_config hc;              /* what http/ is told: the routes and the hooks (server.c) */
    http_server http;            /* its requests, the bound port; http.draining after a signal */
    met met;
    srv_sub *hash[SRV_HASH];
    int n_gen_active;            /* generation requests whose connection is not done */
    int drain_expired;
    int stopping;
    uv_timer_t watchdog_timer;   /* WATCHDOG=1 pings (watchdog.c) */
    int watchdog_on;
    int64_t watchdog_usec;       /* WATCHDOG_USEC, 0 when the watchdog is off */
    int watchdog_missed;         /* pings withheld (logged once) */
    uv_work_t load_req;          /* model, tokenizer and engine set up on a libuv worker thread */
    int load_rc;                 /* its result (0 or negative errno) */
    char load_err[512];
    engine *load_engine;         /* the engine load_work created, until load_done adopts it */
    uv_timer_t model_timer;      /* the model file's watch (model_watch.c) */
    srv_model_stat *model_stat;  /* its stat in flight (on a thread of its own), or NULL */
    int model_watch_on;
    gguf_file_id model_seen;     /* the file's identity last logged (or the loaded one's) */
    int model_seen_gone;         /* 1: its disappearance was logged */
    engine_config ec;            /* the engine's configuration (outlives the engine) */
    int pooling;                 /* enum model_pooling served: --pooling, else the model's */
    char *rerank_tmpl;           /* the GGUF's tokenizer.chat_template.rerank ({query}, {document}), or NULL */
    int32_t sep_id;              /* tokenizer.ggml.seperator_token_id (rerank prompts), or -1 */
    int add_sep;                 /* tokenizer.ggml.add_sep_token */
    struct rstore *store;        /* stored /v1/responses (rstore.h), NULL with --response-store 0 */
    int exit_code;
};

/* The server of request r (http_server.data). */
static inline srv *srv__of(const srv_req *r)
{
    return r->h.server->data;
}

/* routes.c: the route table http/ dispatches on. */
extern const http_route srv__routes[];
extern const int srv__n_routes;

/* watchdog.c */
/* One sd_notify(3) datagram to $NOTIFY_SOCKET (silent when unset). */
void srv__notify(const char *msg);
/* WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID unset or ours), else 0. */
int64_t srv__watchdog_usec(void);
/* 1 when a ping is due: loading (st NULL), or an engine alive whose heartbeat is fresher than
 * usec (or than four idle heartbeats, when usec is shorter). */
int srv__watchdog_ok(const engine_stats *st, int64_t now_us, int64_t usec);
/* Starts the pings every WATCHDOG_USEC / 2 when systemd asked for them. */
void srv__watchdog_start(srv *s);

/* model_watch.c */
/* Logs when the model file under the running server changes (checked every 2 s off the loop). */
void srv__model_watch_start(srv *s);
/* Stops the watch; a stat that has not returned (a stalled mount) is abandoned, never waited for. */
void srv__model_watch_stop(srv *s);

/* prep.c */
/* Holds r and prepares it on a worker thread: kind OAI_COMPLETION / OAI_CHAT (parse, prompts,
 * response state) or SRV_PREP_TOKENIZE / SRV_PREP_DETOKENIZE (the whole reply in r->result).
 * Once it is done (phase PREPPED), MHD's next call for r goes to then. */
enum MHD_Result srv__prep_start(srv_req *r, int kind, http_handler_fn then);
void srv__prep_free(srv_req *r);
/* 1 when the engine must score the prompt's tokens (echo + logprobs, or prompt_logprobs). */
int srv__prompt_scored(const oai_request *q);
/* Alternatives the prompt_logprobs field shows, or -1 for no such field. */
int srv__prompt_logprobs_shown(const oai_request *q);
/* Renders a chat (its template inputs in ch) into token ids (malloc'd *ids). 0 or -EINVAL with
 * e filled (400 when the template fails on the request). */
int srv__chat_ids(srv *s, const struct oai_chat *ch, int add_generation_prompt, int32_t **ids,
                  int *n_ids, oai_error *e);
/* Text into token ids (malloc'd *ids), with the model's BOS when add_special. 0 or -EINVAL. */
int srv__text_ids(srv *s, const char *text, int add_special, int32_t **ids, int *n_ids, oai_error *e);

/* pooled.c: /v1/embeddings, /v1/rerank (/rerank), /v1/score */
/* At load (worker thread): the pooling served and what reranking needs. 0, or -EINVAL with err. */
int srv__pool_load(srv *s, char *err, size_t err_len);
void srv__pool_unload(srv *s);
/* Worker: parse, check the pooling, the prompts' token ids into r->prep_*, the response state. */
int srv__pool_prep(srv_req *r, oai_error *e);
/* Loop: one engine request per input. */
enum MHD_Result srv__pool_submit(srv_req *r);
/* An event's pooled vector (taken from ev) for input p. */
void srv__pool_take(srv_req *r, int p, engine_event *ev);
/* Every input done: the response (or error) into r->result. */
void srv__pool_finish(srv_req *r);
void srv__pool_free(srv_req *r);

/* dialect.c: the Responses and Messages APIs */
/* Worker: r's body (prep_kind SRV_PREP_RESPONSES, _MESSAGES, _COUNT_TOKENS) into r->oreq. */
int srv__dialect_parse(srv_req *r, const oai_limits *lim, oai_error *e);
/* Worker: /v1/messages/count_tokens' answer into r->result. */
int srv__dialect_count_tokens(srv_req *r, oai_error *e);
/* An error body in r's API's shape (Anthropic's for /v1/messages). malloc'd. */
char *srv__error_json(const srv_req *r, const oai_error *e);
/* Loop: the stream's opening events, one engine event's, an error's, and the end (the whole
 * answer into r->result when not streaming; a Response kept when it is to be stored). */
void srv__dialect_stream_begin(srv_req *r);
void srv__dialect_stream_event(srv_req *r, oai_choice *c, const engine_event *ev);
void srv__dialect_stream_error(srv_req *r, const oai_error *e);
void srv__dialect_finish(srv_req *r, const oai_usage *u);
/* GET and DELETE /v1/responses/{id}. */
enum MHD_Result srv__responses_get(srv_req *r);
enum MHD_Result srv__responses_delete(srv_req *r);

/* gen.c */
/* Choice c's reader of reasoning and tool calls (c->chat), created on first use; NULL when the
 * request needs none. */
oai_chat_state *srv__chat_reader(srv_req *r, oai_choice *c);
/* Tracks engine request b->id of b->req for its events. */
void srv__sub_insert(srv *s, srv_sub *b);
/* The HTTP error of an engine_submit failure into e; returns -EINVAL. */
int srv__submit_error(int rc, oai_error *e);
/* A completion (kind OAI_COMPLETION) or chat completion (OAI_CHAT): 503 when the engine has
 * stopped, else prepared (prep.c), then submitted, then answered or streamed. */
enum MHD_Result srv__gen_start(srv_req *r, int kind);
/* /tokenize and /detokenize: prepared on a worker thread, answered when that is done. */
enum MHD_Result srv__tokenize(srv_req *r);
enum MHD_Result srv__detokenize(srv_req *r);
/* One engine event: a stream chunk or a piece of the reply, and the request's end. */
void srv__gen_event(srv *s, engine_event *ev);
/* Cancels r's engine requests still running (nothing before submission). */
void srv__gen_cancel(srv_req *r);
/* 1 while r's work is in flight: choices not finished, or a worker preparing it. */
int srv__gen_busy(const srv_req *r);
/* r's connection ended (completed_ok: the whole response went out): a generation the client
 * left early is cancelled, and r no longer counts in n_gen_active. */
void srv__gen_closed(srv_req *r, int completed_ok);
/* The request fields r's client sent in vain, for the access log at -v, or NULL. */
const char *srv__gen_ignored(const srv_req *r);
/* Frees what r holds: its preparation, engine subs, choices, result and parsed request. */
void srv__gen_free(srv_req *r);

#endif
