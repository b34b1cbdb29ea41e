/*
 * server.c — wiring: model + tokenizer + engine + HTTP daemon on one libuv loop, signals,
 * graceful drain and systemd notification (sent through watchdog.c).
 *
 * The HTTP side is http/'s: this file gives it the routes (routes.c) and the hooks through which
 * it reaches gen.c (cancel, busy, closed, the access log's ignored fields, release).
 *
 * Life: listen → load (model, tokenizer, chat template) → engine thread → READY=1 → loop.
 * SIGTERM/SIGINT: /health turns 503, new generations get 503, STOPPING=1 is sent; in-flight
 * requests finish (their responses fully written) or --drain-timeout cancels them; then the loop
 * stops and everything is torn down in reverse order, exit 0. A second signal exits at once.
 * The engine thread only ever calls wake(), which does uv_async_send.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/version.h"
#include "model/chat.h"
#include "server/internal.h"
#include "server/rstore.h"
#include "server/toolcall/toolcall.h"

static void on_wake(uv_async_t *h)
{
    srv *s = h->data;
    if (!s->e) return; /* the engine runs before load_done adopts it: nothing was submitted */
    engine_event *evs[64];
    int n;
    while ((n = engine_poll(s->e, evs, 64)) > 0)
        for (int i = 0; i < n; i++) {
            srv__gen_event(s, evs[i]);
            engine_event_free(evs[i]);
        }
    http_run(&s->http);
}

/* Engine thread: only the async send. */
static void wake_cb(void *ud)
{
    uv_async_send(ud);
}

static void on_ping(uv_timer_t *t)
{
    srv *s = t->data;
    http_ping(&s->http, s->cfg->sse_ping_interval_s);
    http_run(&s->http);
}

/* Requests whose preparation (parse, prompts, a grammar's compilation) is still running on a
 * worker: their connections are suspended until it ends, and MHD cannot stop with them. */
static int n_preparing(const srv *s)
{
    int n = 0;
    for (const http_req *r = s->http.reqs; r; r = r->next) n += ((const srv_req *)r)->phase == SRV_PHASE_PREP;
    return n;
}

/* Draining and no generation left, nor a request being prepared (it is answered 503 when its
 * preparation ends, or cut at the drain timeout): the loop stops (then the teardown). */
static void check_drain(srv *s)
{
    if (s->http.draining && !s->stopping && s->n_gen_active == 0 && n_preparing(s) == 0) {
        s->stopping = 1;
        uv_stop(&s->loop);
    }
}

void srv__drain_check(srv *s)
{
    check_drain(s);
}

static void on_drain_timeout(uv_timer_t *t)
{
    srv *s = t->data;
    if (!s->drain_expired) {
        s->drain_expired = 1;
        fprintf(stderr, "kvserve: drain timeout: cancelling %d request(s)\n", s->n_gen_active);
        for (http_req *r = s->http.reqs; r; r = r->next) srv__gen_cancel((srv_req *)r);
        uv_timer_start(t, on_drain_timeout, 2000, 0); /* let the cancellations be written */
        return;
    }
    s->stopping = 1;
    uv_stop(&s->loop);
}

/* SIGHUP: the log is stderr, which whoever started the server owns (journald, a redirect): there
 * is nothing to reopen, and a hang-up must not stop a server the way the default action would. */
static void on_hangup(uv_signal_t *h, int signum)
{
    (void)h;
    (void)signum;
    fprintf(stderr, "kvserve: SIGHUP ignored (the log is stderr; SIGTERM drains and stops)\n");
}

/* Every connection costs descriptors: take the hard open-file limit (as vLLM does), not the
 * soft one a shell leaves (often 1024). */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max) return;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static void on_signal(uv_signal_t *h, int signum)
{
    srv *s = h->data;
    if (s->http.draining) {
        fprintf(stderr, "kvserve: second signal (%s): exiting now\n", strsignal(signum));
        _exit(1);
    }
    if (!s->e && !s->stopping) {
        /* Still loading: there is nothing to drain. A load not yet started is cancelled; one
         * under way (a slow disk) cannot be interrupted, so the process leaves at once. */
        fprintf(stderr, "kvserve: %s during start-up: exiting\n", strsignal(signum));
        srv__notify("STOPPING=1");
        if (uv_cancel((uv_req_t *)&s->load_req)) _exit(0);
        s->stopping = 1;
        uv_stop(&s->loop);
        return;
    }
    s->http.draining = 1;
    /* Queued grammar compilations fail now: their requests are answered at once, not after the
     * queue (the ones compiling end by their budget). */
    gr_cache_stop(s->grammars);
    srv__notify("STOPPING=1");
    fprintf(stderr, "kvserve: %s: draining %d in-flight request(s) (up to %.0f s)\n",
            strsignal(signum), s->n_gen_active, s->cfg->drain_timeout_s);
    uv_timer_start(&s->drain_timer, on_drain_timeout, (uint64_t)(s->cfg->drain_timeout_s * 1000), 0);
    check_drain(s);
}

/* ---- the hooks http/ calls (http_config) -------------------------------------------------- */

static void on_cancel(http_req *r)
{
    srv__gen_cancel((srv_req *)r);
}

static int on_busy(const http_req *r)
{
    return srv__gen_busy((const srv_req *)r);
}

static void on_closed(http_req *r, int completed_ok)
{
    srv__gen_closed((srv_req *)r, completed_ok);
    check_drain(r->server->data);
}

static const char *on_log_ignored(const http_req *r)
{
    return srv__gen_ignored((const srv_req *)r);
}

static void on_release(http_req *r)
{
    srv__gen_free((srv_req *)r);
}

static char *on_error_body(const http_req *r, const oai_error *e)
{
    return srv__error_json((const srv_req *)r, e);
}

/* What http/ is told: the listener, the limits, the routes (routes.c) and the hooks above. */
static void http_config_of(srv *s)
{
    const srv_config *c = s->cfg;
    s->hc = (http_config){
        .host = c->host,
        .port = c->port,
        .max_body_bytes = c->max_body_bytes,
        .api_key = c->api_key,
        .guard_prefix = "/v1/",
        .allowed_origins = c->allowed_origins,
        .limits = c->http_limits,
        .routes = srv__routes,
        .n_routes = srv__n_routes,
        .req_size = sizeof(srv_req),
        .cancel = on_cancel,
        .busy = on_busy,
        .closed = on_closed,
        .log_ignored = on_log_ignored,
        .release = on_release,
        .error_body = on_error_body,
    };
}

/* The served model id: --served-model-name, else the file name without .gguf. */
static void model_id_of(const srv_config *c, char *out, size_t len)
{
    if (c->served_model_name && *c->served_model_name) {
        snprintf(out, len, "%s", c->served_model_name);
        return;
    }
    const char *b = strrchr(c->model_path, '/');
    b = b ? b + 1 : c->model_path;
    snprintf(out, len, "%s", b);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf")) out[n - 5] = 0;
}

static int load(srv *s, char *err, size_t err_len)
{
    const srv_config *c = s->cfg;
    if (model_load(c->model_path, &s->m, err, err_len)) return -EINVAL;
    s->tok = tok_create(s->m->gguf, err, err_len);
    if (!s->tok) return -EINVAL;
    chat_config cc = {c->chat_template, s->m->gguf, s->tok};
    s->tmpl = chat_tmpl_create(&cc, err, err_len);
    if (!s->tmpl) return -EINVAL;
    s->tool_syntax = tc_syntax_by_name(c->tool_call_parser ? c->tool_call_parser : "auto");
    if (s->tool_syntax == -2) s->tool_syntax = tc_syntax_detect(chat_tmpl_source(s->tmpl, 1));
    s->reasoning = tc_reasoning_by_name(c->reasoning_parser);
    if (s->tool_syntax < 0 || s->reasoning < 0) {
        snprintf(err, err_len, "unknown %s '%s'", s->tool_syntax < 0 ? "--tool-call-parser" : "--reasoning-parser",
                 s->tool_syntax < 0 ? c->tool_call_parser : c->reasoning_parser);
        return -EINVAL;
    }
    s->n_ctx = s->m->hp.n_ctx_train;
    s->n_vocab = tok_n_vocab(s->tok);
    if (s->m->hp.n_vocab < s->n_vocab) s->n_vocab = s->m->hp.n_vocab;
    return srv__pool_load(s, err, err_len);
}

static void close_handle(uv_handle_t *h)
{
    if (h->loop && !uv_is_closing(h)) uv_close(h, NULL);
}

static void teardown(srv *s)
{
    http_stop(&s->http);
    if (s->e) engine_destroy(s->e, 0);
    s->e = NULL;
    engine_destroy(s->load_engine, 0); /* created, never adopted (a signal during start-up) */
    s->load_engine = NULL;
    /* Preparations still running (on libuv workers) may be in the grammar cache: it stops
     * compiling now, so that they finish without a queue, and is freed once they are done. */
    gr_cache_stop(s->grammars);
    close_handle((uv_handle_t *)&s->wake);
    close_handle((uv_handle_t *)&s->ping_timer);
    if (s->watchdog_on) close_handle((uv_handle_t *)&s->watchdog_timer);
    close_handle((uv_handle_t *)&s->drain_timer);
    srv__model_watch_stop(s);
    close_handle((uv_handle_t *)&s->sig_term);
    close_handle((uv_handle_t *)&s->sig_int);
    close_handle((uv_handle_t *)&s->sig_hup);
    uv_run(&s->loop, UV_RUN_DEFAULT); /* runs the close callbacks; the preparations end */
    gr_cache_destroy(s->grammars);
    s->grammars = NULL;
    rstore_destroy(s->store); /* (read by preparations too) */
    s->store = NULL;
    /* requests whose engine events died with the engine */
    for (http_req *r = s->http.reqs; r; r = r->next) ((srv_req *)r)->n_open = 0;
    http_free_all(&s->http);
    uv_loop_close(&s->loop);
    srv__pool_unload(s);
    chat_tmpl_destroy(s->tmpl); /* it borrows the tokenizer */
    tok_destroy(s->tok);
    model_destroy(s->m);
}

/* The engine on the loaded model (its weights uploaded, its KV arena allocated, its tier's
 * folder scanned); then the server stops reading the model file: the backend owns the weights,
 * so a file replaced under the server can neither fault it nor change its output. */
static int start_engine(srv *s, char *err, size_t err_len)
{
    s->ec = s->cfg->engine;
    s->ec.model = s->m;
    s->ec.tok = s->tok;
    s->ec.wake = wake_cb;
    s->ec.wake_ud = &s->wake;
    s->load_engine = engine_create(&s->ec, err, err_len);
    if (!s->load_engine) return -EINVAL;
    int rc = gguf_detach(s->m->gguf);
    if (rc)
        fprintf(stderr, "kvserve: the model file stays mapped (%s): replacing it under the server is unsafe\n",
                strerror(-rc));
    return 0;
}

/* Worker thread: the slow part of start-up (the model, its weights' upload, the KV arena, the
 * tier's folder: all off the loop, so /health answers meanwhile). Touches nothing the loop thread
 * reads before load_done runs. */
static void load_work(uv_work_t *w)
{
    srv *s = w->data;
    s->load_rc = load(s, s->load_err, sizeof s->load_err);
    if (!s->load_rc) s->load_rc = start_engine(s, s->load_err, sizeof s->load_err);
}

/* Loop thread: start the engine on the loaded model, then tell systemd we are ready. */
static void load_done(uv_work_t *w, int status)
{
    srv *s = w->data;
    const srv_config *cfg = s->cfg;
    if (s->stopping) return;
    if (status || s->load_rc) {
        fprintf(stderr, "kvserve serve: %s\n", s->load_err[0] ? s->load_err : "model load cancelled");
        s->exit_code = 1;
        s->stopping = 1;
        uv_stop(&s->loop);
        return;
    }
    engine *e = s->e = s->load_engine;
    s->load_engine = NULL;
    srv__model_watch_start(s);
    engine_stats st;
    engine_get_stats(e, &st);
    s->n_ctx = st.n_ctx; /* --max-model-len, or the model's */
    met_set_max_model_len(&s->met, s->n_ctx);
    int v6 = strchr(cfg->host, ':') != NULL;
    fprintf(stderr, "kvserve: serving '%s' (context %d, chat template %s, tool calls %s%s%s) on "
            "http://%s%s%s:%d\n",
            s->model_id, s->n_ctx, chat_tmpl_describe(s->tmpl), tc_syntax_name(s->tool_syntax),
            s->reasoning ? ", reasoning " : "", s->reasoning == TC_REASON_QWEN3 ? "qwen3" : s->reasoning ? "deepseek_r1" : "",
            v6 ? "[" : "", cfg->host, v6 ? "]" : "", s->http.port);
    char ready[512];
    snprintf(ready, sizeof ready, "READY=1\nSTATUS=serving %s on port %d", s->model_id,
             s->http.port);
    srv__notify(ready);
}

int srv_run(const srv_config *cfg)
{
    srv *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = cfg;
    s->created = (int64_t)time(NULL);
    met_init(&s->met);
    signal(SIGPIPE, SIG_IGN);
    char err[512] = "";
    uv_loop_init(&s->loop);
    uv_async_init(&s->loop, &s->wake, on_wake);
    s->wake.data = s;
    uv_timer_init(&s->loop, &s->ping_timer);
    uv_timer_init(&s->loop, &s->drain_timer);
    s->ping_timer.data = s->drain_timer.data = s;
    uv_signal_init(&s->loop, &s->sig_term);
    uv_signal_init(&s->loop, &s->sig_int);
    uv_signal_init(&s->loop, &s->sig_hup);
    s->sig_term.data = s->sig_int.data = s->sig_hup.data = s;
    raise_nofile();
    /* A request's preparation may wait for a grammar's compilation (up to GR_COMPILE_WORKERS
     * running and GR_COMPILE_QUEUE waiting): more libuv workers than those, so that requests
     * without a grammar are prepared meanwhile. An operator's own setting wins. */
    setenv("UV_THREADPOOL_SIZE", "16", 0);
    model_id_of(cfg, s->model_id, sizeof s->model_id);
    fprintf(stderr, "kvserve %s (commit %s) starting\n", version_string(), version_commit());
    /* Stored /v1/responses for previous_response_id and GET /v1/responses/{id}. */
    if (cfg->response_store > 0 && !(s->store = rstore_create(cfg->response_store, cfg->response_store_bytes))) {
        fprintf(stderr, "kvserve serve: out of memory\n");
        s->exit_code = 1;
        goto out;
    }
    /* Grammars with their cached masks: entries from the flag (0: none kept), at most 1 GiB in
     * all; the cache's workers compile every structured-output grammar (low priority, bounded). */
    if (!(s->grammars = gr_cache_create(cfg->grammar_cache, (size_t)1 << 30))) {
        fprintf(stderr, "kvserve serve: out of memory\n");
        s->exit_code = 1;
        goto out;
    }
    /* Listen first so that probes get 503 "loading" rather than a refused connection. */
    http_config_of(s);
    s->http.data = s;
    if (http_start(&s->http, &s->loop, &s->hc, err, sizeof err)) {
        fprintf(stderr, "kvserve serve: %s\n", err);
        s->exit_code = 1;
        goto out;
    }
    uv_signal_start(&s->sig_term, on_signal, SIGTERM);
    uv_signal_start(&s->sig_int, on_signal, SIGINT);
    uv_signal_start(&s->sig_hup, on_hangup, SIGHUP);
    double pi = cfg->sse_ping_interval_s > 0 ? cfg->sse_ping_interval_s : 15;
    uint64_t tick = (uint64_t)(pi * 500) > 10 ? (uint64_t)(pi * 500) : 10;
    if (tick > 1000) tick = 1000;
    uv_timer_start(&s->ping_timer, on_ping, tick, tick);
    srv__watchdog_start(s);
    s->load_req.data = s;
    uv_queue_work(&s->loop, &s->load_req, load_work, load_done);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    if (!s->exit_code) fprintf(stderr, "kvserve: drained, exiting\n");
out:;
    int rc = s->exit_code;
    teardown(s);
    free(s);
    return rc;
}
