/*
 * http.h — kvserve's HTTP transport and admission: libmicrohttpd inside a libuv loop behind the
 * request-framing gate (gate.h), routing, API-key authentication, CORS, body limits, replies,
 * server-sent-event streams with suspend / resume, the client-disconnect watch and the access log.
 *
 *   client ──► gate ──► MHD ──► http_req (one per request) ──admission──► route handler
 *                                  │  (404, 405, 401, 413, CORS preflight answered here)
 *                                  ▼
 *              the application (server/: generation, tokenizer endpoints, /health …)
 *
 * The application above embeds the two objects: its server struct holds an http_server, its
 * request struct begins with an http_req (http_config.req_size is the whole struct's size, which
 * this layer allocates zeroed). It learns of requests through the route handlers and the hooks
 * of http_config; it answers with http_reply*, or holds a request (http_suspend, with
 * http_req.reenter set) and answers when its work is done. Nothing here knows what a route does.
 * Loop thread only.
 */
#ifndef KVSERVE_HTTP_H
#define KVSERVE_HTTP_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "server/http/gate.h"
#include "server/openai/openai.h"

typedef struct http_server http_server;
typedef struct http_req http_req;

/* Answers r (an http_reply* result) or holds it (http_suspend, MHD_YES). MHD's result. */
typedef enum MHD_Result (*http_handler_fn)(http_req *r);

/* One route: the exact path, or with prefix = 1 any path that starts with it and goes on. */
typedef struct http_route {
    const char *path;
    const char *method; /* the one method it takes; HEAD is accepted for GET */
    int prefix;
    int guarded;        /* needs the API key (as does every path under http_config.guard_prefix) */
    http_handler_fn handler;
} http_route;

/* What the server is told and asks of the application. Borrowed for the server's life. */
typedef struct http_config {
    const char *host;            /* listen address (NULL or "": 127.0.0.1) */
    int port;                    /* 0: any free port (http_server.port says which) */
    size_t max_body_bytes;       /* larger bodies get 413 */
    const char *api_key;         /* NULL or "": no authentication */
    const char *guard_prefix;    /* paths that need the key whatever the route (e.g. "/v1/") */
    const char *allowed_origins; /* CORS: comma-separated origins or "*"; NULL: no CORS headers */
    gate_limits limits;          /* connection limits and timeouts (0s: the defaults) */
    const http_route *routes;    /* [n_routes] looked up in order */
    int n_routes;
    size_t req_size;             /* the application's request struct, an http_req first */
    /* The client went away, or a stream's buffer could not grow: stop r's work (r stays valid). */
    void (*cancel)(http_req *r);
    /* 1 while the application's work on r is in flight: r is freed only once it says 0. */
    int (*busy)(const http_req *r);
    /* MHD reported r's connection done (completed_ok: the whole response went out); called
     * before the access log line. */
    void (*closed)(http_req *r, int completed_ok);
    /* The request fields the application ignored, for r's access log line (ignored=…), or
     * NULL. */
    const char *(*log_ignored)(const http_req *r);
    /* r is about to be freed: release what the application holds in it. */
    void (*release)(http_req *r);
    /* The body of an error reply to r (malloc'd), for routes whose API shapes errors its own way;
     * NULL hook: OpenAI's shape (oai_error_json). */
    char *(*error_body)(const http_req *r, const oai_error *e);
} http_config;

enum http_watch { HTTP_WATCH_NONE = 0, HTTP_WATCH_ON, HTTP_WATCH_CLOSING, HTTP_WATCH_CLOSED };

/* One HTTP request, from MHD's first callback until both the connection is done and the
 * application's work has finished (busy says 0) and the disconnect watch is closed. The
 * application reads the request fields and sets the ones marked (app). */
struct http_req {
    http_server *server;
    struct MHD_Connection *conn; /* NULL once MHD reported the request complete */
    char method[16];
    char path[192];
    char req_id[96];             /* x-request-id, echoed or minted */
    int req_id_given;            /* 1: req_id is the client's X-Request-Id */
    int64_t start_us;
    char *body;                  /* [body_len] uploaded bytes, NUL-terminated (or NULL) */
    size_t body_len, body_cap;
    int body_too_big;
    int status;                  /* HTTP status sent (access log) */
    const char *allow;           /* 405: the method the route takes (static string) */
    int n_prompt_tokens;         /* (app) for the access log */
    int n_output_tokens;         /* (app) for the access log */
    int conn_done;
    int suspended;
    http_handler_fn reenter;     /* (app) where MHD's next call for r goes once r was held;
                                  * NULL: the request is routed (again) */
    int client_gone;             /* the client hung up (the watch, or MHD's report) */
    /* a stream (http_stream_begin) */
    char *out;                   /* SSE bytes not yet taken by MHD: out[out_off .. out_len) */
    size_t out_len, out_off, out_cap;
    int streaming;               /* http_stream_begin ran: pings may be sent */
    int stream_done;             /* (app) nothing more will be appended */
    int stream_abort;            /* (app) end the stream with an error (client gone, shutdown) */
    int64_t last_emit_us;
    /* disconnect watch */
    uv_poll_t watch;
    int watch_state;             /* enum http_watch */
    http_req *prev, *next;
};

/* The server: one per process, embedded in the application's server struct. */
struct http_server {
    const http_config *cfg;
    uv_loop_t *loop;
    void *data;                  /* the application's, untouched here */
    struct MHD_Daemon *d;
    uv_poll_t mhd_poll;          /* MHD's epoll descriptor */
    uv_timer_t mhd_timer;        /* armed from MHD_get_timeout */
    gate_relay gate;             /* the listening socket and the relay into MHD */
    http_req *reqs;              /* every live request */
    int draining;                /* (app) replies say Connection: close */
    int port;                    /* the bound port */
    uint64_t n_requests;         /* requests answered (framing errors of the gate included) */
    uint64_t n_errors;           /* of which with a status of 400 or more */
};

/* Starts MHD on loop and listens on cfg's host and port (http_server.port: the bound one); h
 * comes zeroed but for h->data. 0, or a negative errno with err filled. */
int http_start(http_server *h, uv_loop_t *loop, const http_config *cfg, char *err, size_t err_len);
/* Stops MHD (held requests are resumed as aborted first) and the gate, and closes the loop
 * handles; the loop must run once more for their close callbacks. */
void http_stop(http_server *h);
/* Lets MHD work (after events that may have resumed connections) and re-arms its timer. */
void http_run(http_server *h);
/* Frees every request left after the loop ended (the application's busy hook must say 0). */
void http_free_all(http_server *h);
/* ": ping" on every stream silent for interval_s or more. */
void http_ping(http_server *h, double interval_s);

/* Queues r's response with body[0..len) (malloc'd, taken; NULL: a 500 out of memory), the
 * common headers (content type, x-request-id, CORS, Connection: close while draining) and those
 * of the status (Retry-After, Allow, WWW-Authenticate). MHD's result. */
enum MHD_Result http_reply(http_req *r, int status, const char *ctype, char *body, size_t len);
/* A JSON body (malloc'd, taken; NULL: 500). */
enum MHD_Result http_reply_json(http_req *r, int status, char *json);
/* e as OpenAI's JSON error with e->status. */
enum MHD_Result http_reply_error(http_req *r, const oai_error *e);
/* An OpenAI JSON error: the message is fmt with its one %s replaced by arg. */
enum MHD_Result http_reply_fail(http_req *r, int status, const char *type, const char *code,
                                const char *fmt, const char *arg);

/* Queues the 200 text/event-stream response whose body is what http_stream_append adds. */
enum MHD_Result http_stream_begin(http_req *r);
/* Appends n bytes of p to r's stream and wakes MHD for it (nothing once stream_abort is set; out
 * of memory sets it and cancels r). */
void http_stream_append(http_req *r, const char *p, size_t n);

/* Holds r: MHD stops calling for it until http_resume (the next call goes to r->reenter). */
void http_suspend(http_req *r);
/* Lets MHD call for r again (when it is held and its connection still open). */
void http_resume(http_req *r);
/* Watches r's socket for a hang-up while it is held: one cancels it (cfg->cancel) at once. */
void http_watch_start(http_req *r);
/* Frees r when nothing needs it any more: its connection done, the application not busy, the
 * watch closed. Call whenever one of these may have changed. */
void http_req_maybe_free(http_req *r);

#endif
