/*
 * gate.c — the relay between clients and libmicrohttpd (see gate.h).
 *
 *   client (uv_tcp) ──read──► gate_parser ──forward──► pipe (uv_pipe, our end) ═══ MHD's end
 *   client ◄──write── pipe  (everything MHD answers is copied back unchanged)
 *
 * One gate_conn per accepted client. It holds one descriptor until its first request head is
 * complete; only then (the parser's admit callback) is its socketpair created and handed to MHD
 * (MHD_add_connection), so connections that never finish a head cost MHD nothing. Admission
 * (gate.h's gate_limits, bookkeeping in gate_admit.c): a new connection past the total or its
 * address's cap evicts the oldest connection with nothing in flight, else goes to the reserve
 * (GET /health and /metrics only), else gets 503. A sweep every GATE_SWEEP_MS enforces the
 * header timeout, the body's rate floor (both 408 and close) and the keep-alive timeout.
 *
 * MHD tells the relay when it completed a request (gate_request_done, from http.c), so the relay
 * knows which connections have requests in flight. That is what lets it answer a client that
 * half-closed after its request (its FIN is not passed on while a request is in flight: once the
 * responses are out, MHD's side is shut and the connection closes), and answer a framing error
 * that follows valid pipelined requests after their responses (MHD's side is drained first, then
 * the error is written). A reset closes both sides at once. Backpressure: reading stops on either
 * side while more than GATE_QUEUE_HIGH bytes wait to be written to the other. Closing is
 * lingering: after our last byte the client's input is read and dropped for up to
 * GATE_LINGER_MS, so that a client still sending (a 413 mid-upload) is not reset before it has
 * read the answer; an evicted or timed-out idle connection is closed at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base/clock.h"
#include "server/http/gate_internal.h"

#define GATE_QUEUE_HIGH (1u << 20)
#define GATE_QUEUE_LOW (256u << 10)
#define GATE_LINGER_MS 2000
#define GATE_STOP_FLUSH_MS 3000

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
    gate__retire(c);
    if (c->prev) c->prev->next = c->next;
    else g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n_conns--;
    gate_parser_fini(&c->p);
    free(c);
    if (g->stopping && !g->conns) {
        gate__clients_free(g);
        if (!uv_is_closing((uv_handle_t *)&g->stop_timer)) {
            uv_timer_stop(&g->stop_timer); /* everything flushed in time */
            uv_close((uv_handle_t *)&g->stop_timer, on_stop_timer_closed);
        }
    }
}

static int outstanding(const gate_conn *c)
{
    return c->p.n_forwarded - c->n_completed;
}

static void close_pipe(gate_conn *c)
{
    if (!c->pipe_open) return;
    c->pipe_open = 0;
    if (gate__by_fd(c->g, c->mhd_fd) == c) gate__map_fd(c->g, c->mhd_fd, NULL);
    uv_close((uv_handle_t *)&c->pipe, on_closed);
}

static void close_all(gate_conn *c)
{
    gate__retire(c);
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
    gate__retire(c);
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
    } else if (to == (uv_stream_t *)&c->pipe && !c->client_reading && !c->client_eof && !c->closing &&
               !c->pending_status) {
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

static void stop_client_reading(gate_conn *c)
{
    if (!c->client_reading) return;
    uv_read_stop((uv_stream_t *)&c->client);
    c->client_reading = 0;
}

static void on_pipe_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    free(req);
}

/* MHD's side gets our FIN: with nothing in flight it closes, and the pipe's end of file then
 * finishes the connection (on_pipe_read) once MHD's last bytes went to the client. */
static void drain_mhd(gate_conn *c)
{
    if (!c->pipe_open || c->pipe_eof_sent) return;
    c->pipe_eof_sent = 1;
    uv_shutdown_t *req = malloc(sizeof *req);
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, on_pipe_shutdown)) {
        free(req);
        close_pipe(c);
        finish_client(c);
    }
}

/* Writes the deferred error (if any) to the client, logged like any request. */
static void answer_pending(gate_conn *c)
{
    if (!c->pending_status) return;
    size_t len = 0;
    char *resp = c->g->reject(c->g->ud, c->pending_status, c->pending_msg, c->p.method, c->p.path, &len);
    if (resp) write_to(c, (uv_stream_t *)&c->client, resp, len);
    free(resp);
    c->pending_status = 0;
}

/* An error to answer (a framing error, a refusal, a timeout): at once when MHD has nothing of
 * this connection; otherwise after the responses to the requests before it (MHD drained). */
static void answer_error(gate_conn *c, int status, const char *msg)
{
    stop_client_reading(c);
    c->pending_status = status;
    snprintf(c->pending_msg, sizeof c->pending_msg, "%s", msg);
    gate__evict_update(c);
    if (!c->pipe_open) {
        answer_pending(c);
        finish_client(c);
    } else if (outstanding(c) == 0) {
        drain_mhd(c);
    } /* else: gate_request_done drains it when the last response is out */
}

/* A framing error found by the parser (or a refusal by admit): the head that failed was never
 * forwarded, so MHD holds only the requests before it. */
static void reject(gate_conn *c)
{
    answer_error(c, c->p.status, c->p.message);
}

/* A client whose request is cut short (a timeout mid-body, a reset): MHD's side is dropped
 * (whatever it was doing for this connection is cancelled as a client disconnect). */
static void cut(gate_conn *c, int status, const char *msg)
{
    close_pipe(c);
    stop_client_reading(c);
    c->pending_status = status;
    snprintf(c->pending_msg, sizeof c->pending_msg, "%s", msg);
    answer_pending(c);
    finish_client(c);
}

/* The socketpair into MHD for c, once its first head is complete. 0, or -1 (out of descriptors
 * or MHD's connections). */
static int attach(gate_conn *c)
{
    gate_relay *g = c->g;
    int fds[2];
    struct sockaddr_storage peer;
    int plen = sizeof peer;
    if (uv_tcp_getpeername(&c->client, (struct sockaddr *)&peer, &plen) ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds))
        return -1;
    if (gate__map_fd(g, fds[1], c) || uv_pipe_init(g->loop, &c->pipe, 0) || uv_pipe_open(&c->pipe, fds[0])) {
        gate__map_fd(g, fds[1], NULL);
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    c->pipe.data = c;
    c->n_open++;
    c->pipe_open = 1;
    c->attached = 1;
    c->mhd_fd = fds[1];
    if (MHD_add_connection(g->mhd, fds[1], (struct sockaddr *)&peer, (socklen_t)plen) != MHD_YES) {
        close_pipe(c); /* MHD closed its end itself */
        return -1;
    }
    c->pipe_reading = 1;
    uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, on_pipe_read);
    return 0;
}

/* The parser's admit callback: a complete, valid head. The reserve serves only its two routes;
 * a connection's first head creates its way into MHD. */
static int admit(void *ud, gate_parser *p)
{
    gate_conn *c = ud;
    if (c->reserved && !gate__reserved_path(p)) {
        c->g->st.refused++;
        snprintf(p->message, sizeof p->message, "too many connections: this one may only GET /health or /metrics");
        return 503;
    }
    if (!c->attached && attach(c)) {
        c->g->st.refused++;
        snprintf(p->message, sizeof p->message, "too many connections");
        return 503;
    }
    return 0;
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
        stop_client_reading(c);
        c->client_eof = 1;
        if (c->closing) { /* lingering: the client is done too */
            close_all(c);
            return;
        }
        /* A half-close: the requests in flight are answered, then the connection closes. A
         * request cut short (a head or body unfinished) can never complete. */
        if (!c->pipe_open || c->p.state != GATE_HEAD) {
            close_pipe(c);
            finish_client(c);
        } else if (outstanding(c) == 0) {
            drain_mhd(c);
        }
        gate__evict_update(c);
        return;
    }
    if (c->closing || c->pending_status) return; /* lingering, or answering: dropped */
    int64_t now = clk_now_us();
    int was_idle = gate_is_idle(&c->p), reqs = c->p.n_requests;
    c->any_byte = 1;
    if (gate_feed(&c->p, b->base, (size_t)n)) {
        reject(c);
        return;
    }
    if (c->p.state == GATE_HEAD) {
        if ((was_idle || c->p.n_requests != reqs) && !gate_is_idle(&c->p)) c->head_t0_us = now;
        c->in_body = 0;
    } else {
        if (!c->in_body || c->p.n_requests != reqs) {
            c->in_body = 1;
            c->body_t0_us = now;
            c->body_bytes = 0;
        }
        c->body_bytes += (uint64_t)n;
    }
    c->idle_t0_us = 0;
    gate__evict_update(c);
    if (c->p.want_continue) {
        c->p.want_continue = 0;
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        write_to(c, (uv_stream_t *)&c->client, cont, sizeof cont - 1);
    }
    if (c->pipe_open && uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > GATE_QUEUE_HIGH)
        stop_client_reading(c); /* MHD is not reading: wait for it */
}

static void on_pipe_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    gate_conn *c = st->data;
    if (n == 0) return;
    if (n < 0) { /* MHD closed the connection: pass the close on once the client has it all */
        close_pipe(c);
        answer_pending(c);
        finish_client(c);
        return;
    }
    write_to(c, (uv_stream_t *)&c->client, b->base, (size_t)n);
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->client) > GATE_QUEUE_HIGH) {
        uv_read_stop(st);
        c->pipe_reading = 0;
    }
}

void gate_request_done(gate_relay *g, int mhd_fd)
{
    gate_conn *c = gate__by_fd(g, mhd_fd);
    if (!c || c->closing) return;
    if (outstanding(c) > 0) c->n_completed++;
    if (outstanding(c) == 0 && (c->pending_status || c->client_eof)) drain_mhd(c);
    gate__evict_update(c);
}

/* ---- timeouts ---------------------------------------------------------------------------------- */

static void time_out(gate_conn *c, const char *what)
{
    gate_relay *g = c->g;
    g->st.timed_out++;
    char msg[160];
    snprintf(msg, sizeof msg, "%s", what);
    if (!c->any_byte || (c->pipe_open && gate_is_idle(&c->p) && outstanding(c) == 0)) {
        close_all(c); /* silent, or idle between requests: nothing to answer */
        return;
    }
    if (c->p.state != GATE_HEAD) cut(c, 408, msg); /* mid-body: MHD's request is cancelled */
    else answer_error(c, 408, msg);
}

/* One connection's deadlines at now. */
static void sweep_one(gate_conn *c, int64_t now)
{
    if (c->pending_status) return; /* answering already: MHD's side is being drained */
    const gate_limits *L = &c->g->lim;
    int64_t head_us = (int64_t)(L->header_timeout_s * 1e6);
    int busy = outstanding(c) > 0;
    int in_head = c->p.state == GATE_HEAD && (!c->attached || (!busy && !gate_is_idle(&c->p)));
    if (in_head && now - c->head_t0_us > head_us) {
        time_out(c, "request head not received in time");
        return;
    }
    if (c->p.state != GATE_HEAD && c->in_body && L->body_min_rate > 0) {
        double allowed = L->header_timeout_s + (double)c->body_bytes / L->body_min_rate;
        if ((double)(now - c->body_t0_us) > allowed * 1e6) {
            time_out(c, "request body arriving too slowly");
            return;
        }
    }
    int idle = c->attached && !busy && gate_is_idle(&c->p) && !c->pending_status && !c->pipe_eof_sent &&
               uv_stream_get_write_queue_size((uv_stream_t *)&c->client) == 0;
    if (!idle) {
        c->idle_t0_us = 0;
    } else if (!c->idle_t0_us) {
        c->idle_t0_us = now;
    } else if (now - c->idle_t0_us > (int64_t)(L->keepalive_s * 1e6)) {
        time_out(c, "idle");
    }
}

static void on_sweep(uv_timer_t *t)
{
    gate_relay *g = t->data;
    int64_t now = clk_now_us();
    for (gate_conn *c = g->conns, *next; c; c = next) {
        next = c->next;
        if (!c->closing && !c->retired) sweep_one(c, now);
    }
}

/* ---- accepting -------------------------------------------------------------------------------- */

/* Whether a new connection from cl fits, after evicting for it when it does not. 1: counted in
 * the limits; 2: in the reserve; 0: refused. */
static int make_room(gate_relay *g, gate_client *cl)
{
    const gate_limits *L = &g->lim;
    int client_over = L->max_per_client > 0 && cl->n_conns > L->max_per_client;
    int total_over = g->n_live - g->n_reserved > L->max_conns;
    while (client_over || total_over) {
        gate_conn *v = gate__victim(g, cl, client_over);
        if (!v) break;
        g->st.evicted++;
        close_all(v); /* retired: the counts drop at once */
        client_over = L->max_per_client > 0 && cl->n_conns > L->max_per_client;
        total_over = g->n_live - g->n_reserved > L->max_conns;
    }
    if (!client_over && !total_over) return 1;
    return g->n_reserved < L->reserved_conns ? 2 : 0;
}

/* A new client: counted, admitted (evicting for it if need be), then read. */
static void on_connection(uv_stream_t *server, int status)
{
    gate_relay *g = server->data;
    if (status < 0) return;
    gate_conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->g = g;
    c->mhd_fd = -1;
    uv_tcp_init(g->loop, &c->client);
    c->client.data = c;
    c->n_open = 1;
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    g->n_conns++;
    g->n_live++;
    struct sockaddr_storage peer;
    int plen = sizeof peer;
    if (uv_accept(server, (uv_stream_t *)&c->client) || gate_parser_init(&c->p, g->max_body, to_mhd, c) ||
        uv_tcp_getpeername(&c->client, (struct sockaddr *)&peer, &plen) ||
        !(c->cl = gate__client_join(g, (struct sockaddr *)&peer))) {
        close_all(c);
        return;
    }
    c->p.admit = admit;
    uv_tcp_nodelay(&c->client, 1);
    c->head_t0_us = clk_now_us();
    int room = make_room(g, c->cl);
    if (!room) { /* out of connections, and nothing to make room with: say so and close */
        g->st.refused++;
        c->p.status = 503;
        snprintf(c->p.message, sizeof c->p.message, "too many connections");
        answer_error(c, 503, "too many connections");
        return;
    }
    if (room == 2) {
        c->reserved = 1;
        g->n_reserved++;
    }
    gate__evict_update(c);
    c->client_reading = 1;
    uv_read_start((uv_stream_t *)&c->client, alloc_cb, on_client_read);
}

int gate_conns_for_nofile(long nofile, int reserved)
{
    long n = (nofile - 256) / 3 - reserved;
    return n < 16 ? 16 : n > 1000000 ? 1000000 : (int)n;
}

void gate_limits_fill(gate_limits *L)
{
    if (L->max_conns <= 0) L->max_conns = 4096;
    if (L->reserved_conns <= 0) L->reserved_conns = 32;
    if (L->header_timeout_s <= 0) L->header_timeout_s = 10;
    if (L->keepalive_s <= 0) L->keepalive_s = 5;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        int fit = gate_conns_for_nofile((long)rl.rlim_cur, L->reserved_conns);
        if (L->max_conns > fit) {
            fprintf(stderr, "kvserve: http: %d connections at most (--http-max-connections %d): the open-file limit "
                    "is %ld, 3 descriptors each\n", fit, L->max_conns, (long)rl.rlim_cur);
            L->max_conns = fit;
        }
    }
}

int gate_listen(gate_relay *g, const char *host, int port, size_t max_body, int *bound_port,
                char *err, size_t err_len)
{
    g->max_body = max_body;
    gate_limits_fill(&g->lim);
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
    uv_timer_init(g->loop, &g->sweep);
    g->sweep.data = g;
    g->sweep_on = 1;
    uv_timer_start(&g->sweep, on_sweep, GATE_SWEEP_MS, GATE_SWEEP_MS);
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
    if (g->sweep_on && !uv_is_closing((uv_handle_t *)&g->sweep)) uv_close((uv_handle_t *)&g->sweep, NULL);
    for (gate_conn *c = g->conns; c; c = c->next) {
        /* A connection without a complete head has nothing to flush (the gate's own error answers
         * are closing already): it closes now, not at the flush's deadline (an idle connection, a
         * prober's or a half-sent head, held every exit 3 s). */
        if (!c->attached && !c->closing) close_all(c);
        else if (c->client_reading && !c->closing) stop_client_reading(c); /* what MHD wrote still goes out */
    }
    if (!g->conns) {
        gate__clients_free(g);
        return;
    }
    uv_timer_init(g->loop, &g->stop_timer);
    g->stop_timer.data = g;
    g->stopping = 1;
    uv_timer_start(&g->stop_timer, on_stop_timeout, GATE_STOP_FLUSH_MS, 0);
}

int gate_n_conns(const gate_relay *g)
{
    return g->n_conns;
}

void gate_get_stats(const gate_relay *g, gate_stats *out)
{
    *out = g->st;
    out->n_conns = g->n_live;
    out->n_reserved = g->n_reserved;
}
