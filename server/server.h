/*
 * server.h — kvserve's HTTP server: one libuv loop on the calling thread drives libmicrohttpd,
 * timers, signals and the engine's wake-ups; the engine runs on its own thread.
 *
 * srv_run loads the model, starts the engine and the listener, tells systemd READY=1 (when
 * NOTIFY_SOCKET is set), serves until SIGTERM/SIGINT, drains, and returns the exit code.
 */
#ifndef KVSERVE_SERVER_H
#define KVSERVE_SERVER_H

#include <stddef.h>

#include "engine/engine.h"
#include "server/http/gate.h"

typedef struct srv_config {
    const char *model_path;        /* GGUF file */
    const char *served_model_name; /* NULL: the file name without .gguf */
    const char *host;              /* numeric address or name to listen on */
    int port;                      /* TCP port */
    const char *api_key;           /* NULL: no authentication */
    const char *chat_template;     /* NULL: the GGUF's (model/chat.h chat_config.spec) */
    const char *tool_call_parser;  /* NULL or "auto": from the template; else a tc_syntax name */
    const char *reasoning_parser;  /* NULL or "none"; deepseek_r1, qwen3 */
    size_t max_body_bytes;         /* larger bodies get 413 */
    double drain_timeout_s;        /* SIGTERM: seconds to finish in-flight requests */
    double sse_ping_interval_s;    /* seconds between ': ping' comments on idle streams */
    const char *allowed_origins;   /* CORS: "*" or comma-separated origins; NULL: off */
    int verbose;                   /* 1: the access log names ignored request fields */
    int grammar_cache;             /* compiled structured-output grammars kept (0: none) */
    gate_limits http_limits;       /* connection limits and timeouts (server/http/gate.h) */
    const char *pooling;           /* --pooling mean|cls|last|rank; NULL: the model's pooling_type */
    int response_store;            /* /v1/responses kept for previous_response_id and GET (0: none) */
    size_t response_store_bytes;   /* their bytes in all */
    engine_config engine;          /* engine settings; model, tok and wake are set by the server */
} srv_config;

/* Runs the server until it is stopped by a signal; returns the process exit code (0 after a
 * graceful drain, 1 when start-up failed). */
int srv_run(const srv_config *cfg);

#endif
