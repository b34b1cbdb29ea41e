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
 *     lines are skipped; an absolute-form target (http://host/path) is forwarded as its path; header lines are name ":" value CRLF with token names, no obs-fold, no
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

/* Called with the sink's ud when a request's head is complete and valid, before anything of it
 * is forwarded: 0 forwards it; an HTTP status (503) refuses it as a framing error would
 * (gate_feed fails), with the message the callback wrote into p->message. */
typedef struct gate_parser gate_parser;
typedef int (*gate_admit_fn)(void *ud, gate_parser *p);

struct gate_parser {
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
    gate_admit_fn admit;      /* NULL: every valid request is forwarded */
    int n_requests;           /* complete requests forwarded */
    int n_forwarded;          /* requests whose head was forwarded (a body may still follow) */
    /* the request being read (for the access log of a rejected one; path in origin form) */
    char method[16];
    char path[192];
    size_t abs_from, abs_to;  /* absolute-form target: head[abs_from, abs_to) is "scheme://authority" */
    int abs_slash;            /* ... and the path after it is empty or a query: "/" is forwarded */
    /* the error, once state is GATE_FAILED */
    int status;               /* 400, 408, 413, 431, 503, 505 */
    char message[160];
};

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
struct gate_client;

/* Where a framing error's answer comes from: the whole HTTP response (status line, headers, body,
 * Connection: close) for status and message, the request's method and path as far as they were
 * read (for the access log). malloc'd with *len set, or NULL. */
typedef char *(*gate_reject_fn)(void *ud, int status, const char *message, const char *method,
                                const char *path, size_t *len);

/* The limits the relay keeps on its connections (serve's --http-* flags).
 *
 * A connection costs one descriptor until its first request head is complete, three once it is
 * relayed into libmicrohttpd. Connections with nothing in flight (no head yet, a head still
 * arriving, idle between requests) are evictable: when a new connection would pass max_conns,
 * or max_per_client for its address, the oldest evictable one (of that address, for its cap) is
 * closed to make room. Only when none is evictable does the new connection go to the reserve,
 * which serves GET (and HEAD) /health and /metrics only, or, the reserve full too, get 503. So a
 * flood of slow or idle connections can never keep a health check out. */
typedef struct gate_limits {
    int max_conns;           /* open connections (0: 4096); lowered to what the open-file limit allows */
    int reserved_conns;      /* beyond them, for /health and /metrics (0: 32) */
    int max_per_client;      /* connections from one address (0: no cap) */
    double header_timeout_s; /* a head must be complete this long after its first byte (a new
                              * connection: after accept): else 408 and close (0: 10) */
    double body_min_rate;    /* a body may take header_timeout_s plus one second per this many
                              * bytes: else 408 and close (0: no floor) */
    double keepalive_s;      /* a connection with nothing in flight closes after this (0: 5) */
} gate_limits;

/* What the relay counted (for /metrics). */
typedef struct gate_stats {
    int n_conns;             /* open (not closing) connections */
    int n_reserved;          /* of which in the reserve */
    uint64_t evicted;        /* connections closed to make room for new ones */
    uint64_t timed_out;      /* closed by the header, body or keep-alive timeout */
    uint64_t refused;        /* refused with 503 (the reserve full, or a reserved one asked for another route) */
} gate_stats;

/* The relay of one server, embedded in its owner (http.c). The owner sets the first fields
 * before gate_listen; the rest is the relay's. Loop thread only. */
typedef struct gate_relay {
    uv_loop_t *loop;
    struct MHD_Daemon *mhd;  /* receives every relayed connection (MHD_add_connection) */
    void (*run)(void *ud);   /* called when MHD has new bytes to read: run it */
    gate_reject_fn reject;
    void *ud;                /* for run and reject */
    gate_limits lim;         /* the limits (defaults filled in by gate_listen) */
    size_t max_body;         /* decoded body bytes allowed per request (set by gate_listen) */
    uv_tcp_t listener;
    int listener_open;
    struct gate_conn *conns; /* every connection, closing ones included */
    int n_conns;             /* of them */
    int n_live, n_reserved;  /* counted ones (not retired), of which in the reserve */
    struct gate_conn *ev_head, *ev_tail; /* evictable connections, oldest first */
    struct gate_client **clients; /* [GATE_CLIENT_BUCKETS] per-address counts */
    struct gate_conn **by_fd; /* [cap_fd] libmicrohttpd's end of a connection → the connection */
    int cap_fd;
    uv_timer_t sweep;        /* the timeouts, every GATE_SWEEP_MS */
    int sweep_on;
    uv_timer_t stop_timer;   /* bounds the flush after gate_close */
    int stopping;
    gate_stats st;
} gate_relay;

#define GATE_CLIENT_BUCKETS 1024
#define GATE_SWEEP_MS 200

/* Binds host:port, listens, and relays every accepted connection through a gate_parser into
 * libmicrohttpd (MHD_add_connection with one end of a socketpair, once its first head is
 * complete) under g->lim. *bound_port receives the port (useful with port 0). 0, or a negative
 * errno with err filled. */
int gate_listen(gate_relay *g, const char *host, int port, size_t max_body, int *bound_port,
                char *err, size_t err_len);

/* Stops accepting and closes every relayed connection (what MHD wrote still goes out, for up to
 * a few seconds). */
void gate_close(gate_relay *g);

/* Relayed connections now open. */
int gate_n_conns(const gate_relay *g);

/* libmicrohttpd completed a request (its response is written) on the connection whose end it
 * holds is mhd_fd: a connection with nothing more in flight may idle, answer a deferred error,
 * or close after its client's half-close. */
void gate_request_done(gate_relay *g, int mhd_fd);

/* The relay's counters. */
void gate_get_stats(const gate_relay *g, gate_stats *out);

/* Fills the limits left 0 with their defaults and lowers max_conns to what the open-file limit
 * holds (saying so on stderr). Idempotent. */
void gate_limits_fill(gate_limits *L);

/* Connections the limits allow with an open-file limit of nofile (3 descriptors each, the
 * reserve and a margin for everything else kept aside). */
int gate_conns_for_nofile(long nofile, int reserved);

#endif
