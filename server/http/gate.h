/*
 * gate.h — kvserve's own HTTP/1.1 request framing, in front of libmicrohttpd.
 *
 *   client ──TCP──► gate (loop thread) ──socketpair──► libmicrohttpd ──► http.c routes
 *                   validates every request's head and body framing, de-chunks bodies,
 *                   answers framing errors itself (OpenAI JSON, then close)
 *
 * libmicrohttpd 0.9.75 accepts a request with both Content-Length and Transfer-Encoding, or two
 * different Content-Lengths, keeps the connection open after them (a request-smuggling risk
 * behind a proxy), answers a bad Content-Length with two status lines of HTML, and reads a
 * chunked upload to its end before the application may say 413. The gate parses the framing
 * first, by the rules of RFC 9112, so that libmicrohttpd only ever sees requests with one
 * unambiguous Content-Length (chunked bodies are decoded here and forwarded with their length):
 *
 *   - request line: METHOD SP target SP HTTP/1.0|1.1 CRLF (other versions: 505); leading empty
 *     lines are skipped; header lines are name ":" value CRLF with token names, no obs-fold, no
 *     bare CR or LF, no control characters; the head is at most GATE_MAX_HEAD bytes (431);
 *     HTTP/1.1 needs Host.
 *   - Transfer-Encoding: only "chunked", only in HTTP/1.1, never with Content-Length (400).
 *   - Content-Length: digits only; repeated values must agree (400); above max_body: 413 at
 *     once, before any body byte is read.
 *   - chunked: hex sizes, extensions and trailers bounded; 413 as soon as the decoded body
 *     passes max_body; malformed framing 400.
 *
 * gate_parser (gate_parse.c) is the pure, incremental state machine: bytes in, forwarded bytes
 * out through a callback, any split of the input giving the same result. gate_listen (gate.c)
 * is the libuv relay around it. Loop thread only.
 */
#ifndef KVSERVE_GATE_H
#define KVSERVE_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define GATE_MAX_HEAD 16384     /* request line + headers */
#define GATE_MAX_LINE 1024      /* one chunk-size line or trailer line */
#define GATE_MAX_TRAILERS 8192  /* the whole trailer section */

enum gate_state {
    GATE_HEAD = 0,      /* reading a request head */
    GATE_BODY_LENGTH,   /* passing a Content-Length body through */
    GATE_CHUNK_SIZE,    /* chunked: reading a chunk-size line */
    GATE_CHUNK_DATA,    /* chunked: chunk data */
    GATE_CHUNK_CRLF,    /* chunked: the CRLF after a chunk's data */
    GATE_TRAILER,       /* chunked: trailer lines up to the empty one */
    GATE_FAILED,        /* a framing error was found; nothing more is accepted */
};

/* Where the forwarded bytes go (the socketpair to libmicrohttpd, or a test's buffer). */
typedef void (*gate_sink_fn)(void *ud, const char *data, size_t n);

typedef struct gate_parser {
    int state;                /* enum gate_state */
    size_t max_body;          /* decoded body bytes allowed per request */
    gate_sink_fn sink;
    void *sink_ud;
    char *head;               /* [head_cap] the head being read (GATE_HEAD) or kept (chunked) */
    size_t head_len, head_cap;
    uint64_t left;            /* GATE_BODY_LENGTH / GATE_CHUNK_DATA: bytes still to come */
    char line[GATE_MAX_LINE]; /* a chunk-size or trailer line in progress */
    size_t line_len;
    size_t trailer_bytes;
    char *body;               /* [body_cap] chunked: the decoded body so far */
    size_t body_len, body_cap;
    int want_continue;        /* chunked with Expect: 100-continue, not yet answered */
    int method_ok;            /* the head so far: 0 nothing, 1 inside the method, 2 past it */
    int n_requests;           /* complete requests forwarded */
    /* the request being read (for the access log of a rejected one) */
    char method[16];
    char path[192];
    /* the error, once state is GATE_FAILED */
    int status;               /* 400, 413, 431, 505 */
    char message[160];
} gate_parser;

/* Sets up p (zeroed first); sink receives every byte to forward. 0 or -ENOMEM. */
int gate_parser_init(gate_parser *p, size_t max_body, gate_sink_fn sink, void *ud);
void gate_parser_fini(gate_parser *p);

/* Feeds n bytes received from the client. Returns 0 while the framing is valid (forwarded
 * bytes went to the sink), or -EPROTO once it is not: then p->status and p->message say why
 * and the rest of the connection must be dropped. A chunked request with Expect: 100-continue
 * sets want_continue: the caller sends the interim response and clears it. */
int gate_feed(gate_parser *p, const char *data, size_t n);

/* 1 when p is between requests (nothing of a next request read yet). */
int gate_is_idle(const gate_parser *p);

/* ---- the relay (gate.c) -------------------------------------------------------------------- */

struct MHD_Daemon;
struct gate_conn;

/* Where a framing error's answer comes from: the whole HTTP response (status line, headers, body,
 * Connection: close) for status and message, the request's method and path as far as they were
 * read (for the access log). malloc'd with *len set, or NULL. */
typedef char *(*gate_reject_fn)(void *ud, int status, const char *message, const char *method,
                                const char *path, size_t *len);

/* The relay of one server, embedded in its owner (http.c). The owner sets the first fields
 * before gate_listen; the rest is the relay's. Loop thread only. */
typedef struct gate_relay {
    uv_loop_t *loop;
    struct MHD_Daemon *mhd;  /* receives every accepted connection (MHD_add_connection) */
    void (*run)(void *ud);   /* called when MHD has new bytes to read: run it */
    gate_reject_fn reject;
    void *ud;                /* for run and reject */
    size_t max_body;         /* decoded body bytes allowed per request (set by gate_listen) */
    uv_tcp_t listener;
    int listener_open;
    struct gate_conn *conns; /* every relayed connection */
    int n_conns;
    uv_timer_t stop_timer;   /* bounds the flush after gate_close */
    int stopping;
} gate_relay;

/* Binds host:port, listens, and relays every accepted connection through a gate_parser into
 * libmicrohttpd (MHD_add_connection with one end of a socketpair). *bound_port receives the
 * port (useful with port 0). 0, or a negative errno with err filled. */
int gate_listen(gate_relay *g, const char *host, int port, size_t max_body, int *bound_port,
                char *err, size_t err_len);

/* Stops accepting and closes every relayed connection (what MHD wrote still goes out, for up to
 * a few seconds). */
void gate_close(gate_relay *g);

/* Relayed connections now open. */
int gate_n_conns(const gate_relay *g);

#endif
