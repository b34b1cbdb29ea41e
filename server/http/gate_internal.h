/*
 * gate_internal.h — what the gate's relay (gate.c) and its admission bookkeeping (gate_admit.c)
 * share: one relayed connection, the per-client-address table and the list of connections that
 * may be evicted. gate.c calls gate_admit.c, never the other way round. Loop thread only.
 *
 *   gate_relay ──conns──► gate_conn ◄──by_fd[MHD's end]── (request completions from http.c)
 *        │                   │  cl
 *        ├──clients[]──► gate_client (address, connections, its evictable ones, oldest first)
 *        └──ev_head ───► evictable connections, oldest first: nothing in flight (no head yet,
 *                        a head still arriving, or idle between requests)
 */
#ifndef KVSERVE_GATE_INTERNAL_H
#define KVSERVE_GATE_INTERNAL_H

#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "server/http/gate.h"

typedef struct gate_client gate_client;
typedef struct gate_conn gate_conn;

/* A client address and its live connections. */
struct gate_client {
    unsigned char addr[16];  /* IPv4 in the first 4 bytes (family 4), or IPv6 */
    int family;              /* 4 or 6 */
    int n_conns;             /* live (not retired) connections from it */
    gate_conn *ev_head, *ev_tail; /* its evictable ones, oldest first */
    gate_client *next;       /* bucket chain */
};

struct gate_conn {
    gate_relay *g;
    uv_tcp_t client;
    uv_pipe_t pipe;
    uv_timer_t linger;       /* started by finish_client */
    gate_parser p;
    int n_open;              /* handles not yet closed (0..3) */
    int linger_on;           /* the timer is initialised */
    int client_eof;          /* the client sent its FIN */
    int attached;            /* its socketpair into libmicrohttpd exists (after its first head) */
    int mhd_fd;              /* libmicrohttpd's end of it, -1 before */
    int pipe_open;           /* pipe initialised and not closing */
    int client_reading, pipe_reading;
    int pipe_eof_sent;       /* shutdown sent to libmicrohttpd: it closes once it is done */
    int closing;             /* the client is being closed once its writes drain */
    int retired;             /* no longer counted (closing, or evicted) */
    int reserved;            /* admitted beyond the limits: GET /health and /metrics only */
    int n_completed;         /* requests libmicrohttpd completed (p.n_forwarded − this are in flight) */
    int any_byte;            /* the client sent something */
    int pending_status;      /* an error to answer once the responses before it went out (0: none) */
    char pending_msg[160];
    int64_t head_t0_us;      /* when the head being read began (accept, or its first byte) */
    int in_body;             /* a request body is arriving ... */
    int64_t body_t0_us;      /* ... since then ... */
    uint64_t body_bytes;     /* ... with this many bytes so far */
    int64_t idle_t0_us;      /* nothing in flight since then (0: something is) */
    gate_client *cl;         /* its address's entry (NULL once retired) */
    int evictable;           /* linked in both evictable lists */
    gate_conn *prev, *next;          /* g->conns */
    gate_conn *ev_prev, *ev_next;    /* g's evictable list */
    gate_conn *cev_prev, *cev_next;  /* its client's evictable list */
};

/* ---- gate_admit.c -------------------------------------------------------------------------- */

/* The entry of the client at address sa (created; its n_conns counts one more connection), or
 * NULL when out of memory. */
gate_client *gate__client_join(gate_relay *g, const struct sockaddr *sa);
/* c stops counting: its client's count drops (the entry freed at zero), it leaves the evictable
 * lists and the relay's live counts. Idempotent. */
void gate__retire(gate_conn *c);
/* Links c into (or out of) the evictable lists as its state says: not closing and nothing in
 * flight (not attached yet, or no outstanding request and the parser between requests or in a
 * head). */
void gate__evict_update(gate_conn *c);
/* The connection to evict to make room for one more from cl (cl at its cap: its own oldest;
 * otherwise the relay's oldest), or NULL when none is evictable. */
gate_conn *gate__victim(gate_relay *g, const gate_client *cl, int client_over);
/* 1 when the request p just read is one the reserve serves: GET or HEAD of /health or /metrics. */
int gate__reserved_path(const gate_parser *p);
/* Frees the client table (at stop, once every connection is gone). */
void gate__clients_free(gate_relay *g);
/* Records that libmicrohttpd's end of c is fd (-1: none). 0 or -ENOMEM. */
int gate__map_fd(gate_relay *g, int fd, gate_conn *c);
/* The connection whose libmicrohttpd end is fd, or NULL. */
gate_conn *gate__by_fd(const gate_relay *g, int fd);

#endif
