/*
 * gate.c — the relay between clients and libmicrohttpd (see gate.h).
 *
 *   client (uv_tcp) ──read──► gate_parser ──forward──► pipe (uv_pipe, our end) ═══ MHD's end
 *   client ◄──write── pipe  (everything MHD answers is copied back unchanged)
 *
 * One gate_conn per accepted client. Half-closes travel both ways (a client that stops sending
 * is seen by MHD, and by http.c's disconnect watch on MHD's end, as the same hang-up), a reset
 * closes both sides. Backpressure: reading stops on either side while more than
 * GATE_QUEUE_HIGH bytes wait to be written to the other. A framing error stops the relay:
 * the pipe to MHD is closed (whatever it was doing for this connection is cancelled as a
 * client disconnect) and the client gets one JSON error response, then the connection closes.
 * Closing is lingering: after our last byte the client's input is read and dropped for up to
 * GATE_LINGER_MS, so that a client still sending (a 413 mid-upload) is not reset before it
 * has read the answer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/http/gate.h"

#define GATE_QUEUE_HIGH (1u << 20)
#define GATE_QUEUE_LOW (256u << 10)
#define GATE_LINGER_MS 2000
#define GATE_STOP_FLUSH_MS 3000

typedef struct gate_conn gate_conn;
struct gate_conn {
    gate_relay *g;
    uv_tcp_t client;
    uv_pipe_t pipe;
    uv_timer_t linger;       /* started by finish_client */
    gate_parser p;
    int n_open;              /* handles not yet closed (0..3) */
    int linger_on;           /* the timer is initialised */
    int client_eof;          /* the client sent its FIN */
    int pipe_open;           /* pipe initialised and not closing */
    int client_reading, pipe_reading;
    int client_eof_sent;     /* shutdown sent to MHD */
    int closing;             /* the client is being closed once its writes drain */
    gate_conn *prev, *next;
};

/* A write and its bytes. */
typedef struct gate_wr {
    uv_write_t req;
    gate_conn *c;
    size_t n;
    char data[];
} gate_wr;

static char gate_rbuf[65536]; /* reads are copied into writes at once: one buffer serves all */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)h;
    (void)suggested;
    *b = uv_buf_init(gate_rbuf, sizeof gate_rbuf);
}

static void on_stop_timer_closed(uv_handle_t *h);

static void on_closed(uv_handle_t *h)
{
    gate_conn *c = h->data;
    if (--c->n_open > 0) return;
    gate_relay *g = c->g;
    if (c->prev) c->prev->next = c->next;
    else g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n_conns--;
    gate_parser_fini(&c->p);
    free(c);
    if (g->stopping && !g->conns && !uv_is_closing((uv_handle_t *)&g->stop_timer)) {
        uv_timer_stop(&g->stop_timer); /* everything flushed in time */
        uv_close((uv_handle_t *)&g->stop_timer, on_stop_timer_closed);
    }
}

static void close_pipe(gate_conn *c)
{
    if (!c->pipe_open) return;
    c->pipe_open = 0;
    uv_close((uv_handle_t *)&c->pipe, on_closed);
}

static void close_all(gate_conn *c)
{
    close_pipe(c);
    if (!uv_is_closing((uv_handle_t *)&c->client)) uv_close((uv_handle_t *)&c->client, on_closed);
    if (c->linger_on && !uv_is_closing((uv_handle_t *)&c->linger)) uv_close((uv_handle_t *)&c->linger, on_closed);
}

static void on_linger_timeout(uv_timer_t *t)
{
    close_all(t->data);
}

static void on_client_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);
static void on_pipe_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);

/* Our side is finished (the FIN is out): drop whatever the client still sends, for a while. */
static void on_client_shutdown(uv_shutdown_t *req, int status)
{
    gate_conn *c = req->data;
    free(req);
    if (status < 0 || c->client_eof || uv_timer_init(c->g->loop, &c->linger)) {
        close_all(c);
        return;
    }
    c->linger_on = 1;
    c->n_open++;
    c->linger.data = c;
    uv_timer_start(&c->linger, on_linger_timeout, GATE_LINGER_MS, 0);
    if (!c->client_reading) {
        c->client_reading = 1;
        uv_read_start((uv_stream_t *)&c->client, alloc_cb, on_client_read);
    }
}

/* Closes the client once everything queued for it is written. */
static void finish_client(gate_conn *c)
{
    if (c->closing) return;
    c->closing = 1;
    uv_shutdown_t *req = malloc(sizeof *req);
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->client, on_client_shutdown)) {
        free(req);
        close_all(c);
        return;
    }
    req->data = c;
}

static void on_written(uv_write_t *req, int status)
{
    gate_wr *w = (gate_wr *)req;
    gate_conn *c = w->c;
    uv_stream_t *to = req->handle;
    free(w);
    if (status < 0) { /* the peer went away */
        if (to == (uv_stream_t *)&c->client) close_all(c);
        else close_pipe(c);
        return;
    }
    /* Resume the side that was paused for this one. */
    if (uv_stream_get_write_queue_size(to) > GATE_QUEUE_LOW) return;
    if (to == (uv_stream_t *)&c->client && c->pipe_open && !c->pipe_reading) {
        c->pipe_reading = 1;
        uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, on_pipe_read);
    } else if (to == (uv_stream_t *)&c->pipe && !c->client_reading && !c->client_eof && !c->closing) {
        c->client_reading = 1;
        uv_read_start((uv_stream_t *)&c->client, alloc_cb, on_client_read);
    }
}

static void write_to(gate_conn *c, uv_stream_t *to, const char *data, size_t n)
{
    if (!n) return;
    gate_wr *w = malloc(sizeof *w + n);
    if (!w) {
        close_all(c);
        return;
    }
    w->c = c;
    w->n = n;
    memcpy(w->data, data, n);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
    if (uv_write(&w->req, to, &b, 1, on_written)) {
        free(w);
        close_all(c);
    }
}

/* gate_parser's sink: validated request bytes go to MHD. */
static void to_mhd(void *ud, const char *data, size_t n)
{
    gate_conn *c = ud;
    if (c->pipe_open) write_to(c, (uv_stream_t *)&c->pipe, data, n);
}

/* A framing error: MHD's side is dropped, the client gets the JSON error and the close. */
static void reject(gate_conn *c)
{
    close_pipe(c);
    size_t len = 0;
    char *resp = c->g->reject(c->g->ud, c->p.status, c->p.message, c->p.method, c->p.path, &len);
    if (resp) write_to(c, (uv_stream_t *)&c->client, resp, len);
    free(resp);
    finish_client(c);
}

static void on_pipe_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    free(req);
}

static void on_client_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    gate_conn *c = st->data;
    if (n == 0) return;
    if (n < 0) {
        if (n != UV_EOF) { /* reset: nothing more can be said */
            close_all(c);
            return;
        }
        uv_read_stop(st);
        c->client_reading = 0;
        c->client_eof = 1;
        if (c->closing) { /* lingering: the client is done too */
            close_all(c);
            return;
        }
        if (c->pipe_open && !c->client_eof_sent) { /* half-close toward MHD */
            c->client_eof_sent = 1;
            uv_shutdown_t *req = malloc(sizeof *req);
            if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, on_pipe_shutdown)) free(req);
        }
        if (!c->pipe_open) finish_client(c);
        return;
    }
    if (c->closing) return; /* lingering: dropped */
    if (gate_feed(&c->p, b->base, (size_t)n)) {
        reject(c);
        return;
    }
    if (c->p.want_continue) {
        c->p.want_continue = 0;
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        write_to(c, (uv_stream_t *)&c->client, cont, sizeof cont - 1);
    }
    if (c->pipe_open && uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > GATE_QUEUE_HIGH) {
        uv_read_stop(st); /* MHD is not reading: wait for it */
        c->client_reading = 0;
    }
}

static void on_pipe_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    gate_conn *c = st->data;
    if (n == 0) return;
    if (n < 0) { /* MHD closed the connection: pass the close on once the client has it all */
        close_pipe(c);
        finish_client(c);
        return;
    }
    write_to(c, (uv_stream_t *)&c->client, b->base, (size_t)n);
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->client) > GATE_QUEUE_HIGH) {
        uv_read_stop(st);
        c->pipe_reading = 0;
    }
}

/* A new client: its socketpair to MHD, then both directions. */
static void on_connection(uv_stream_t *server, int status)
{
    gate_relay *g = server->data;
    if (status < 0) return;
    gate_conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->g = g;
    uv_tcp_init(g->loop, &c->client);
    c->client.data = c;
    c->n_open = 1;
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    g->n_conns++;
    if (uv_accept(server, (uv_stream_t *)&c->client) ||
        gate_parser_init(&c->p, g->max_body, to_mhd, c)) {
        close_all(c);
        return;
    }
    uv_tcp_nodelay(&c->client, 1);
    int fds[2];
    struct sockaddr_storage peer;
    int plen = sizeof peer;
    int ok = !uv_tcp_getpeername(&c->client, (struct sockaddr *)&peer, &plen) &&
             !socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds);
    if (ok && (uv_pipe_init(g->loop, &c->pipe, 0) || uv_pipe_open(&c->pipe, fds[0]))) {
        close(fds[0]);
        close(fds[1]);
        ok = 0;
    } else if (ok) {
        c->pipe.data = c;
        c->n_open = 2;
        c->pipe_open = 1;
        if (MHD_add_connection(g->mhd, fds[1], (struct sockaddr *)&peer, (socklen_t)plen) !=
            MHD_YES) {
            close_pipe(c); /* MHD closed its end itself */
            ok = 0;
        }
    }
    if (!ok) { /* out of descriptors or connections: say so and close */
        c->p.status = 503;
        snprintf(c->p.message, sizeof c->p.message, "too many connections");
        reject(c);
        return;
    }
    c->client_reading = c->pipe_reading = 1;
    uv_read_start((uv_stream_t *)&c->client, alloc_cb, on_client_read);
    uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, on_pipe_read);
    g->run(g->ud);
}

int gate_listen(gate_relay *g, const char *host, int port, size_t max_body, int *bound_port,
                char *err, size_t err_len)
{
    g->max_body = max_body;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    const char *h = host && *host ? host : "127.0.0.1";
    if (uv_ip4_addr(h, port, (struct sockaddr_in *)&ss) && uv_ip6_addr(h, port, (struct sockaddr_in6 *)&ss)) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
        struct addrinfo *res = NULL;
        char ps[16];
        snprintf(ps, sizeof ps, "%d", port);
        if (getaddrinfo(h, ps, &hints, &res) || !res) {
            snprintf(err, err_len, "cannot resolve listen address '%s'", h);
            return -EINVAL;
        }
        memcpy(&ss, res->ai_addr, res->ai_addrlen);
        freeaddrinfo(res);
    }
    uv_tcp_init(g->loop, &g->listener);
    g->listener.data = g;
    g->listener_open = 1;
    int rc = uv_tcp_bind(&g->listener, (struct sockaddr *)&ss, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&g->listener, 1024, on_connection);
    if (rc) {
        snprintf(err, err_len, "cannot listen on %s:%d (%s)", h, port, uv_strerror(rc));
        return rc;
    }
    struct sockaddr_storage b;
    int bl = sizeof b;
    *bound_port = port;
    if (!uv_tcp_getsockname(&g->listener, (struct sockaddr *)&b, &bl))
        *bound_port = ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                                    : ((struct sockaddr_in *)&b)->sin_port);
    return 0;
}

static void on_stop_timer_closed(uv_handle_t *h)
{
    (void)h;
}

/* The flush after gate_close took too long (a client not reading): cut what is left. */
static void on_stop_timeout(uv_timer_t *t)
{
    gate_relay *g = t->data;
    for (gate_conn *c = g->conns; c; c = c->next) close_all(c);
    uv_close((uv_handle_t *)t, on_stop_timer_closed);
}

void gate_close(gate_relay *g)
{
    if (g->listener_open && !uv_is_closing((uv_handle_t *)&g->listener))
        uv_close((uv_handle_t *)&g->listener, NULL);
    for (gate_conn *c = g->conns; c; c = c->next)
        if (c->client_reading && !c->closing) { /* no new requests; what MHD wrote still goes out */
            uv_read_stop((uv_stream_t *)&c->client);
            c->client_reading = 0;
        }
    if (!g->conns) return;
    uv_timer_init(g->loop, &g->stop_timer);
    g->stop_timer.data = g;
    g->stopping = 1;
    uv_timer_start(&g->stop_timer, on_stop_timeout, GATE_STOP_FLUSH_MS, 0);
}

int gate_n_conns(const gate_relay *g)
{
    return g->n_conns;
}
