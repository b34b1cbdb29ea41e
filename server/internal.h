/*
 * internal.h — what server.c, http.c and gen.c share. Everything here lives on the loop thread.
 *
 *   srv ──reqs──► srv_req (one per HTTP request, from MHD's first callback until both the
 *                  connection is done and every engine choice has finished)
 *        ──hash──► srv_sub (one per engine request: a prompt of an HTTP request) ──req──► srv_req
 *
 * A srv_req is freed by srv__req_maybe_free once conn_done, n_open == 0 and its disconnect
 * watch (a uv_poll on the client socket) is closed.
 */
#ifndef KVSERVE_SERVER_INTERNAL_H
#define KVSERVE_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <stdint.h>
#include <uv.h>

#include "model/chat.h"
#include "server/http/gate.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "server/metrics.h"
#include "server/openai/openai.h"
#include "server/server.h"

#define SRV_HASH 1024

typedef struct srv srv;
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

enum srv_watch { SRV_WATCH_NONE = 0, SRV_WATCH_ON, SRV_WATCH_CLOSING, SRV_WATCH_CLOSED };

/* Where a request stands with its preparation (prep.c). */
enum srv_phase {
    SRV_PHASE_NONE = 0, /* not a prepared route, or not started */
    SRV_PHASE_PREP,     /* on a worker thread: the worker owns the request's parse state */
    SRV_PHASE_PREPPED,  /* done: the access handler submits or replies when MHD re-enters it */
    SRV_PHASE_RUNNING,  /* submitted to the engine (or the reply queued) */
};

/* prep_kind values beyond the generation kinds (OAI_COMPLETION, OAI_CHAT). */
enum { SRV_PREP_TOKENIZE = 16, SRV_PREP_DETOKENIZE };

struct srv_req {
    srv *s;
    struct MHD_Connection *conn; /* NULL once MHD reported the request complete */
    char method[16];
    char path[192];
    char req_id[96];             /* x-request-id, echoed or minted */
    int req_id_given;            /* 1: req_id is the client's X-Request-Id */
    int64_t start_us;
    char *body;                  /* [body_len] uploaded bytes, NUL-terminated */
    size_t body_len, body_cap;
    int body_too_big;
    int status;                  /* HTTP status sent (access log) */
    const char *allow;           /* 405: the method the route takes (static string) */
    int n_prompt_tokens, n_output_tokens;
    int conn_done;
    int suspended;
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
    int client_gone;
    char **echo_text;            /* [n_subs] prompt text for echo, or NULL */
    /* non-streamed result */
    char *result;                /* JSON body ready to send */
    int result_status;
    /* stream */
    char *out;                   /* SSE bytes not yet taken by MHD: out[out_off .. out_len) */
    size_t out_len, out_off, out_cap;
    int stream_done;             /* nothing more will be appended */
    int stream_abort;            /* end the stream with an error (client gone / shutdown) */
    int64_t last_emit_us;
    /* disconnect watch */
    uv_poll_t watch;
    int watch_state;             /* enum srv_watch */
    srv_req *prev, *next;
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
    uv_poll_t mhd_poll;
    uv_timer_t mhd_timer, ping_timer, drain_timer;
    uv_signal_t sig_term, sig_int;
    struct MHD_Daemon *d;
    met met;
    srv_sub *hash[SRV_HASH];
    srv_req *reqs;               /* every live srv_req */
    int n_gen_active;            /* generation requests whose connection is not done */
    int draining;
    int drain_expired;
    int stopping;
    int port;                    /* bound port */
    gate_relay gate;             /* the listening socket and the relay into MHD (gate.c) */
    uv_timer_t watchdog_timer;   /* WATCHDOG=1 pings (watchdog.c) */
    int watchdog_on;
    int64_t watchdog_usec;       /* WATCHDOG_USEC, 0 when the watchdog is off */
    int watchdog_missed;         /* pings withheld (logged once) */
    uv_work_t load_req;          /* model + tokenizer load on a libuv worker thread */
    int load_rc;                 /* its result (0 or negative errno) */
    char load_err[512];
    engine_config ec;            /* the engine's configuration (outlives the engine) */
    int exit_code;
};

/* http.c */
int srv__http_start(srv *s, char *err, size_t err_len);
void srv__http_run(srv *s);
void srv__http_stop(srv *s);
void srv__req_resume(srv_req *r);
void srv__req_maybe_free(srv_req *r);
void srv__ping_tick(srv *s);
enum MHD_Result srv__reply(srv_req *r, int status, const char *ctype, char *body, size_t len);
enum MHD_Result srv__reply_error(srv_req *r, const oai_error *e);
void srv__check_drain(srv *s);
enum MHD_Result srv__stream_begin(srv_req *r);
void srv__watch_start(srv_req *r);

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

/* prep.c */
/* Suspends r and prepares it on a worker thread: kind OAI_COMPLETION / OAI_CHAT (parse, prompts,
 * response state) or SRV_PREP_TOKENIZE / SRV_PREP_DETOKENIZE (the whole reply in r->result).
 * MHD re-enters the access handler when it is done (phase PREPPED). */
enum MHD_Result srv__prep_start(srv_req *r, int kind);
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

/* gen.c */
enum MHD_Result srv__gen_start(srv_req *r, int kind);
enum MHD_Result srv__gen_reenter(srv_req *r);
void srv__gen_event(srv *s, engine_event *ev);
void srv__gen_cancel(srv_req *r);
void srv__gen_free(srv_req *r);
enum MHD_Result srv__tokenize(srv_req *r);
enum MHD_Result srv__detokenize(srv_req *r);
void srv__stream_append(srv_req *r, const char *s, size_t n);

#endif
