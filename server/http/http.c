/*
 * http.c — libmicrohttpd inside the libuv loop (see http.h): routing, authentication, CORS,
 * replies, streamed bodies with suspend/resume, client-disconnect detection and the access log.
 *
 * MHD runs with MHD_USE_EPOLL and no thread of its own: its epoll descriptor sits under a
 * uv_poll and MHD_run is called when it is readable, after engine events, and when the uv_timer
 * armed from MHD_get_timeout fires. A connection waiting on the engine is suspended (a non-streamed
 * request inside the access handler, a stream inside its content reader) and resumed when events
 * arrive. MHD does not watch suspended sockets, so every held request also has a uv_poll on its
 * socket for UV_DISCONNECT: a client that goes away is cancelled (http_config.cancel) at once.
 * What a route does is the application's: this file calls up only through the handlers and hooks
 * of http_config.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/clock.h"
#include "server/http/http.h"

/* ---- request objects ------------------------------------------------------------------------ */

static void mint_id(char *buf, size_t len, const char *prefix)
{
    static uint64_t ctr;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (++ctr * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    snprintf(buf, len, "%s%016llx%04x", prefix, (unsigned long long)x, (unsigned)(ctr & 0xffff));
}

static http_req *req_new(http_server *h, struct MHD_Connection *c, const char *method,
                         const char *url)
{
    http_req *r = calloc(1, h->cfg->req_size);
    if (!r) return NULL;
    r->server = h;
    r->conn = c;
    r->start_us = clk_now_us();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    const char *rid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    int ok = rid && *rid && strlen(rid) < sizeof r->req_id;
    for (const char *p = rid; ok && *p; p++) ok = *p > ' ' && *p < 0x7f;
    if (ok) snprintf(r->req_id, sizeof r->req_id, "%s", rid);
    else mint_id(r->req_id, sizeof r->req_id, "req-");
    r->req_id_given = ok;
    r->next = h->reqs;
    if (h->reqs) h->reqs->prev = r;
    h->reqs = r;
    return r;
}

static void req_unlink_free(http_req *r)
{
    http_server *h = r->server;
    if (r->prev) r->prev->next = r->next;
    else h->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    h->cfg->release(r);
    free(r->body);
    free(r->out);
    free(r);
}

static void on_watch_closed(uv_handle_t *h)
{
    http_req *r = h->data;
    r->watch_state = HTTP_WATCH_CLOSED;
    http_req_maybe_free(r);
}

static void watch_close(http_req *r)
{
    if (r->watch_state != HTTP_WATCH_ON) return;
    r->watch_state = HTTP_WATCH_CLOSING;
    uv_close((uv_handle_t *)&r->watch, on_watch_closed);
}

void http_req_maybe_free(http_req *r)
{
    if (!r->conn_done || r->server->cfg->busy(r)) return;
    if (r->watch_state == HTTP_WATCH_ON) watch_close(r);
    if (r->watch_state == HTTP_WATCH_CLOSING) return;
    req_unlink_free(r);
}

void http_free_all(http_server *h)
{
    while (h->reqs) {
        http_req *r = h->reqs;
        r->conn_done = 1;
        if (r->watch_state == HTTP_WATCH_CLOSING) r->watch_state = HTTP_WATCH_CLOSED;
        http_req_maybe_free(r);
        if (h->reqs != r) continue;
        /* Still held, but the loop is over and nothing will ask again. A watch whose close
         * never ran cannot be freed under libuv: leave the rest. */
        if (r->watch_state == HTTP_WATCH_CLOSING) break;
        req_unlink_free(r);
    }
}

void http_suspend(http_req *r)
{
    r->suspended = 1;
    MHD_suspend_connection(r->conn);
}

void http_resume(http_req *r)
{
    if (r->suspended && r->conn) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
}

/* The client socket reported a hang-up: cancel the work and let MHD close the connection. */
static void on_watch(uv_poll_t *h, int status, int events)
{
    http_req *r = h->data;
    if (status >= 0 && !(events & UV_DISCONNECT)) return;
    uv_poll_stop(h);
    r->client_gone = 1;
    r->stream_abort = 1;
    r->server->cfg->cancel(r);
    http_resume(r);
    http_run(r->server);
}

void http_watch_start(http_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || uv_poll_init(r->server->loop, &r->watch, ci->connect_fd)) return;
    r->watch.data = r;
    r->watch_state = HTTP_WATCH_ON;
    uv_poll_start(&r->watch, UV_DISCONNECT, on_watch);
}

/* ---- CORS (--allowed-origins) ------------------------------------------------------------ */

/* The value for Access-Control-Allow-Origin when r's Origin is allowed, else NULL. */
static const char *cors_origin(http_req *r)
{
    const char *list = r->server->cfg->allowed_origins;
    if (!list || !r->conn) return NULL;
    const char *o = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (!o || !*o) return NULL;
    size_t ol = strlen(o);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if (t - p == 1 && *p == '*') return "*";
        if ((size_t)(t - p) == ol && !strncmp(p, o, ol)) return o;
        p = e;
    }
    return NULL;
}

static void add_cors_headers(http_req *r, struct MHD_Response *resp)
{
    const char *allow = cors_origin(r);
    if (!allow) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "x-request-id");
}

/* A browser's preflight (OPTIONS with Access-Control-Request-Method): 204 with what the API
 * allows, or 400 for an origin not in the list. Answered before authentication, as browsers
 * send no credentials with it. */
static enum MHD_Result do_preflight(http_req *r)
{
    const char *allow = cors_origin(r);
    if (!allow) return http_reply_fail(r, 400, "invalid_request_error", "cors_origin_not_allowed",
                                       "Disallowed CORS origin%s", "");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "x-request-id", r->req_id);
    add_cors_headers(r, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    int ok = h && *h && strlen(h) < 1024;
    for (const char *p = h; ok && *p; p++) ok = *p >= ' ' && *p < 0x7f;
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            ok ? h : "Authorization, Content-Type, X-Request-Id");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    r->status = 204;
    enum MHD_Result ret = MHD_queue_response(r->conn, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- replies -------------------------------------------------------------------------------- */

static void add_common_headers(http_req *r, struct MHD_Response *resp, const char *ctype)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, "x-request-id", r->req_id);
    add_cors_headers(r, resp);
    if (r->server->draining) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

enum MHD_Result http_reply(http_req *r, int status, const char *ctype, char *body, size_t len)
{
    if (!body) {
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        if (!body) return MHD_NO;
        len = strlen(body);
        ctype = "application/json";
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    add_common_headers(r, resp, ctype);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 405 && r->allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    r->status = status;
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result http_reply_error(http_req *r, const oai_error *e)
{
    const http_config *cfg = r->server->cfg;
    char *j = cfg->error_body ? cfg->error_body(r, e) : oai_error_json(e);
    return http_reply(r, e->status, "application/json", j, j ? strlen(j) : 0);
}

enum MHD_Result http_reply_json(http_req *r, int status, char *json)
{
    return http_reply(r, status, "application/json", json, json ? strlen(json) : 0);
}

enum MHD_Result http_reply_fail(http_req *r, int status, const char *type, const char *code,
                                const char *fmt, const char *arg)
{
    oai_error e;
    oai_fail(&e, status, type, code, NULL, fmt, arg);
    return http_reply_error(r, &e);
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* The gate's answer to a framing error (gate_reject_fn): the whole HTTP response with an OpenAI
 * JSON error and Connection: close; it is logged like any request and counted. */
static char *gate_response(void *ud, int status, const char *message, const char *method,
                           const char *path, size_t *len)
{
    http_server *h = ud;
    oai_error e;
    const char *code = status == 413   ? "request_too_large"
                       : status == 503 ? "server_is_overloaded"
                       : status == 408 ? "request_timeout"
                                       : "malformed_http_request";
    oai_fail(&e, status, status == 503 ? "server_error" : "invalid_request_error", code, NULL,
             "%s", message);
    char *j = oai_error_json(&e);
    char id[48];
    mint_id(id, sizeof id, "req-");
    char *out = NULL;
    int n = j ? asprintf(&out,
                         "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\nx-request-id: %s\r\n%s\r\n%s",
                         status, reason_phrase(status), strlen(j), id, status == 503 ? "Retry-After: 1\r\n" : "", j)
              : -1;
    free(j);
    fprintf(stderr, "%s %s %d prompt_tokens=0 output_tokens=0 0.0ms id=%s (rejected: %s)\n",
            method && *method ? method : "-", path && *path ? path : "-", status, id, message);
    h->n_requests++;
    h->n_errors++;
    if (n < 0) return NULL;
    *len = (size_t)n;
    return out;
}

/* ---- streams -------------------------------------------------------------------------------- */

void http_stream_append(http_req *r, const char *p, size_t n)
{
    if (r->stream_abort) return;
    if (r->out_off > 0 && r->out_off == r->out_len) r->out_off = r->out_len = 0;
    if (r->out_len + n > r->out_cap) {
        if (r->out_off > 0) {
            memmove(r->out, r->out + r->out_off, r->out_len - r->out_off);
            r->out_len -= r->out_off;
            r->out_off = 0;
        }
        size_t cap = r->out_cap ? r->out_cap : 4096;
        while (cap < r->out_len + n) cap *= 2;
        if (cap > r->out_cap) {
            char *o = realloc(r->out, cap);
            if (!o) {
                r->stream_abort = 1;
                r->server->cfg->cancel(r);
                return;
            }
            r->out = o;
            r->out_cap = cap;
        }
    }
    memcpy(r->out + r->out_len, p, n);
    r->out_len += n;
    r->last_emit_us = clk_now_us();
    http_resume(r);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    http_req *r = cls;
    (void)pos;
    if (r->stream_abort) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (r->out_len > r->out_off) {
        size_t n = r->out_len - r->out_off;
        if (n > max) n = max;
        memcpy(buf, r->out + r->out_off, n);
        r->out_off += n;
        return (ssize_t)n;
    }
    if (r->stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
    if (!r->suspended) {
        r->suspended = 1;
        MHD_suspend_connection(r->conn);
    }
    return 0;
}

enum MHD_Result http_stream_begin(http_req *r)
{
    r->streaming = 1;
    r->last_emit_us = clk_now_us();
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                  stream_reader, r, NULL);
    if (!resp) return MHD_NO;
    add_common_headers(r, resp, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    r->status = 200;
    enum MHD_Result ret = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

void http_ping(http_server *h, double interval_s)
{
    int64_t now = clk_now_us();
    int64_t iv = (int64_t)(interval_s * 1e6);
    for (http_req *r = h->reqs; r; r = r->next)
        if (r->streaming && r->conn && !r->stream_done && !r->stream_abort &&
            now - r->last_emit_us >= iv)
            http_stream_append(r, ": ping\n\n", 8);
}

/* ---- admission ----------------------------------------------------------------------------- */

/* 1 when the presented key h equals key (in constant time). */
static int key_equal(const char *h, const char *key)
{
    size_t a = strlen(h), b = strlen(key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned)(unsigned char)(i < a ? h[i] : 0) ^ (unsigned char)key[i];
    return diff == 0;
}

/* The key as OpenAI's clients send it (Authorization: Bearer KEY) or Anthropic's (x-api-key). */
static int auth_ok(http_req *r)
{
    const char *key = r->server->cfg->api_key;
    if (!key || !*key) return 1;
    const char *x = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-api-key");
    if (x && key_equal(x, key)) return 1;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    return key_equal(h, key);
}

/* The route of path p for method m (a path may have a route per method), else the first one of
 * the path (whose method a 405 names), or NULL. */
static const http_route *route_of(const http_config *cfg, const char *p, const char *m)
{
    const http_route *first = NULL;
    for (int i = 0; i < cfg->n_routes; i++) {
        const http_route *t = &cfg->routes[i];
        size_t n = strlen(t->path);
        if (!(t->prefix ? !strncmp(p, t->path, n) && p[n] : !strcmp(p, t->path))) continue;
        if (!strcmp(m, t->method) || (!strcmp(m, "HEAD") && !strcmp(t->method, "GET"))) return t;
        if (!first) first = t;
    }
    return first;
}

/* A request whose body is in: the preflight, authentication, the route, its method and the body
 * limit are checked here, then the route's handler answers. */
static enum MHD_Result dispatch(http_req *r)
{
    const http_config *cfg = r->server->cfg;
    const http_route *rt = route_of(cfg, r->path, r->method);
    if (!strcmp(r->method, "OPTIONS") && cfg->allowed_origins &&
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return do_preflight(r);
    const char *gp = cfg->guard_prefix;
    int guarded = (gp && !strncmp(r->path, gp, strlen(gp))) || (rt && rt->guarded);
    if (guarded && !auth_ok(r))
        return http_reply_fail(r, 401, "invalid_request_error", "invalid_api_key",
                               "Incorrect or missing API key%s",
                               " (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')");
    if (!rt)
        return http_reply_fail(r, 404, "invalid_request_error", "not_found", "Unknown route '%s'",
                               r->path);
    int head = !strcmp(r->method, "HEAD") && !strcmp(rt->method, "GET");
    r->allow = rt->method;
    if (strcmp(r->method, rt->method) && !head)
        return http_reply_fail(r, 405, "invalid_request_error", "method_not_allowed",
                               "Method not allowed here (use %s)", rt->method);
    if (r->body_too_big) {
        char m[64];
        snprintf(m, sizeof m, "%zu bytes", cfg->max_body_bytes);
        return http_reply_fail(r, 413, "invalid_request_error", "request_too_large",
                               "The request body exceeds the limit of %s", m);
    }
    return rt->handler(r);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    http_server *h = cls;
    http_req *r = *con_cls;
    (void)version;
    if (!r) {
        r = req_new(h, c, method, url);
        if (!r) return MHD_NO;
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->cfg->max_body_bytes) {
            r->body_too_big = 1;
            return dispatch(r);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->body_too_big) return MHD_YES;
        if (r->body_len + n > h->cfg->max_body_bytes) {
            r->body_too_big = 1;
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 4096;
            while (cap < r->body_len + n + 1) cap *= 2;
            char *b = realloc(r->body, cap);
            if (!b) return MHD_NO;
            r->body = b;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload, n);
        r->body_len += n;
        r->body[r->body_len] = 0;
        return MHD_YES;
    }
    if (r->reenter) return r->reenter(r);
    return dispatch(r);
}

/* MHD says how the request ended: the application hears of it (a client that left early is
 * cancelled there), then the access log line. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *h = cls;
    http_req *r = *con_cls;
    /* The gate learns that this connection has one request less in flight. */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) gate_request_done(&h->gate, ci->connect_fd);
    if (!r) return;
    *con_cls = NULL;
    r->conn = NULL;
    r->conn_done = 1;
    r->suspended = 0;
    watch_close(r);
    h->cfg->closed(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (!r->status) r->status = 499; /* nothing was sent: the client went away */
    double ms = (double)(clk_now_us() - r->start_us) / 1000.0;
    const char *ign = h->cfg->log_ignored ? h->cfg->log_ignored(r) : NULL;
    fprintf(stderr, "%s %s %d prompt_tokens=%d output_tokens=%d %.1fms id=%s%s%s%s\n", r->method,
            r->path, r->status, r->n_prompt_tokens, r->n_output_tokens, ms, r->req_id,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client gone)", ign ? " ignored=" : "",
            ign ? ign : "");
    h->n_requests++;
    if (r->status >= 400) h->n_errors++;
    http_req_maybe_free(r);
}

/* ---- MHD under libuv ---------------------------------------------------------------------- */

static void on_mhd_timer(uv_timer_t *t)
{
    http_run(t->data);
}

static void on_mhd_poll(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    http_run(p->data);
}

void http_run(http_server *h)
{
    if (!h->d) return;
    MHD_run(h->d);
    MHD_UNSIGNED_LONG_LONG ms = 0;
    if (MHD_get_timeout(h->d, &ms) == MHD_YES)
        uv_timer_start(&h->mhd_timer, on_mhd_timer, ms > 60000 ? 60000 : ms, 0);
    else
        uv_timer_start(&h->mhd_timer, on_mhd_timer, 1000, 0);
}

/* The gate forwarded bytes to MHD. */
static void gate_run(void *ud)
{
    http_run(ud);
}

/* libmicrohttpd's own messages, marked as such in the log. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    /* MHD's connections are the gate's socketpairs: TCP options do not apply to them (the gate
     * sets TCP_NODELAY on the client's socket), so their failures say nothing. */
    if (strstr(msg, "TCP_NODELAY") || strstr(msg, "TCP_CORK") || strstr(msg, "Failed to push the data"))
        return;
    fprintf(stderr, "kvserve: http: %s\n", msg);
}

int http_start(http_server *h, uv_loop_t *loop, const http_config *cfg, char *err, size_t err_len)
{
    h->cfg = cfg;
    h->loop = loop;
    h->gate.lim = cfg->limits;
    gate_limits_fill(&h->gate.lim); /* MHD takes every connection the gate may relay */
    /* MHD gets its connections from the gate (MHD_add_connection), never from a socket of its
     * own: every request it sees has passed the gate's framing checks. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, /* first, as MHD wants */
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(h->gate.lim.max_conns + h->gate.lim.reserved_conns + 16),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
                            MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, err_len, "cannot start the HTTP daemon");
        return -EIO;
    }
    const union MHD_DaemonInfo *ei = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
    if (!ei || uv_poll_init(loop, &h->mhd_poll, ei->epoll_fd)) {
        snprintf(err, err_len, "cannot watch the HTTP daemon's epoll descriptor");
        MHD_stop_daemon(h->d);
        h->d = NULL;
        return -EIO;
    }
    h->mhd_poll.data = h;
    uv_poll_start(&h->mhd_poll, UV_READABLE, on_mhd_poll);
    uv_timer_init(loop, &h->mhd_timer);
    h->mhd_timer.data = h;
    h->gate.loop = loop;
    h->gate.mhd = h->d;
    h->gate.run = gate_run;
    h->gate.reject = gate_response;
    h->gate.ud = h;
    int rc = gate_listen(&h->gate, cfg->host, cfg->port, cfg->max_body_bytes, &h->port, err,
                         err_len);
    if (rc) return rc;
    http_run(h);
    return 0;
}

static void close_handle(uv_handle_t *h)
{
    if (h->loop && !uv_is_closing(h)) uv_close(h, NULL);
}

void http_stop(http_server *h)
{
    if (h->d) {
        /* MHD must not be stopped with suspended connections: resume them as aborted first. */
        for (http_req *r = h->reqs; r; r = r->next) {
            r->stream_abort = 1;
            http_resume(r);
        }
        for (int i = 0; i < 3; i++) MHD_run(h->d);
        uv_poll_stop(&h->mhd_poll);
        uv_timer_stop(&h->mhd_timer);
        MHD_stop_daemon(h->d);
        h->d = NULL;
        /* What MHD wrote before it stopped is still in the socketpairs: the gate relays it to
         * the clients (the end of a drained stream) while the loop runs the close callbacks. */
        gate_close(&h->gate);
    }
    close_handle((uv_handle_t *)&h->mhd_timer);
    close_handle((uv_handle_t *)&h->mhd_poll);
}
