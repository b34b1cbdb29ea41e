/*
 * cmd_serve.c — `kvserve serve` (also the default command): options → srv_config (its engine part
 * from cli_engine_config, as bench and generate build theirs) → srv_run.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "server/server.h"
#include "server/toolcall/toolcall.h"

int cli_serve(cli_opts *o)
{
    if (!o->model && o->n_args == 1) o->model = o->args[0];
    if (!o->model) {
        fprintf(stderr, "kvserve serve: a model is required (-m FILE.gguf); see kvserve serve --help\n");
        return 2;
    }
    srv_config c;
    memset(&c, 0, sizeof c);
    c.model_path = o->model;
    c.served_model_name = o->served_model_name;
    c.host = o->host;
    c.port = o->port;
    c.api_key = o->api_key && *o->api_key ? o->api_key : NULL;
    c.chat_template = o->chat_template;
    c.tool_call_parser = o->tool_call_parser;
    c.reasoning_parser = o->reasoning_parser;
    if ((o->tool_call_parser && tc_syntax_by_name(o->tool_call_parser) == -1) ||
        tc_reasoning_by_name(o->reasoning_parser) < 0) {
        fprintf(stderr, "kvserve serve: unknown %s '%s' (see kvserve serve --help)\n",
                o->tool_call_parser && tc_syntax_by_name(o->tool_call_parser) == -1 ? "--tool-call-parser" : "--reasoning-parser",
                o->tool_call_parser && tc_syntax_by_name(o->tool_call_parser) == -1 ? o->tool_call_parser : o->reasoning_parser);
        return 2;
    }
    c.max_body_bytes = o->max_body_bytes;
    c.drain_timeout_s = o->drain_timeout_s;
    c.sse_ping_interval_s = o->sse_ping_interval_s;
    c.grammar_cache = o->grammar_cache;
    c.pooling = o->pooling;
    c.response_store = o->response_store;
    c.response_store_bytes = o->response_store_bytes;
    c.http_limits = (gate_limits){o->http_max_connections, o->http_reserved_connections, o->http_max_per_client,
                                  o->http_header_timeout_s, o->http_body_min_rate, o->http_keepalive_timeout_s};
    if (o->http_max_connections < 1 || o->http_reserved_connections < 1 || o->http_max_per_client < 0 ||
        !(o->http_header_timeout_s > 0) || !(o->http_body_min_rate >= 0) || !(o->http_keepalive_timeout_s > 0)) {
        fprintf(stderr, "kvserve serve: an --http-* limit is out of range (connections ≥ 1, timeouts > 0, rate ≥ 0)\n");
        return 2;
    }
    if (o->port < 0 || o->port > 65535 || c.drain_timeout_s < 0 || c.sse_ping_interval_s <= 0 || c.grammar_cache < 0) {
        fprintf(stderr, "kvserve serve: --port, --drain-timeout, --sse-ping-interval or --grammar-cache out of range\n");
        return 2;
    }
    engine_config *e = &c.engine;
    if (cli_engine_config(o, "serve", e)) return 2;
    e->max_queued_requests = o->max_queued_requests;
    e->max_queued_tokens = o->max_queued_tokens;
    c.allowed_origins = o->allowed_origins && *o->allowed_origins ? o->allowed_origins : NULL;
    c.verbose = o->verbose;
    e->quiet = 0;
    return srv_run(&c);
}
