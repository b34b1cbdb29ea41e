/*
 * metrics.c — histograms and the /metrics text (see metrics.h).
 *
 * Counters follow the Prometheus client convention vLLM inherits: the TYPE line names the metric
 * ("vllm:prompt_tokens") and the sample carries the _total suffix. Every sample has the
 * model_name label, as vLLM's do.
 */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
static const double itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                    0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0};
static const double e2e_bounds[] = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0,
                                    15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

static void hist_init(met_hist *h, const double *b, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = b;
    h->n_bounds = n;
}

void met_init(met *m)
{
    memset(m, 0, sizeof *m);
    hist_init(&m->ttft, ttft_bounds, (int)(sizeof ttft_bounds / sizeof ttft_bounds[0]));
    hist_init(&m->itl, itl_bounds, (int)(sizeof itl_bounds / sizeof itl_bounds[0]));
    hist_init(&m->e2e, e2e_bounds, (int)(sizeof e2e_bounds / sizeof e2e_bounds[0]));
    hist_init(&m->queue, e2e_bounds, (int)(sizeof e2e_bounds / sizeof e2e_bounds[0]));
}

void met_observe(met_hist *h, double s)
{
    if (s < 0) s = 0;
    int i = 0;
    while (i < h->n_bounds && s > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += s;
    h->count++;
}

int met_reason_of(int finish)
{
    switch (finish) {
    case ENGINE_FINISH_STOP: return MET_STOP;
    case ENGINE_FINISH_LENGTH: return MET_LENGTH;
    case ENGINE_FINISH_ABORT: return MET_ABORT;
    default: return MET_ERROR;
    }
}

typedef struct buf {
    char *s;
    size_t len, cap;
    int oom;
} buf;

static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void head(buf *b, const char *name, const char *type, const char *help)
{
    bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(buf *b, const char *lbl, const char *name, const char *help, double v)
{
    head(b, name, "gauge", help);
    bprintf(b, "%s{%s} %.17g\n", name, lbl, v);
}

static void counter(buf *b, const char *lbl, const char *name, const char *help, double v)
{
    head(b, name, "counter", help);
    bprintf(b, "%s_total{%s} %.17g\n", name, lbl, v);
}

static void hist(buf *b, const char *lbl, const char *name, const char *help, const met_hist *h)
{
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        bprintf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, lbl, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    bprintf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, lbl, (unsigned long long)cum);
    bprintf(b, "%s_sum{%s} %.17g\n", name, lbl, h->sum);
    bprintf(b, "%s_count{%s} %llu\n", name, lbl, (unsigned long long)h->count);
}

char *met_render(const met *m, const engine_stats *st, const char *model_name)
{
    buf b = {malloc(8192), 0, 8192, 0};
    if (!b.s) return NULL;
    char lbl[320];
    size_t o = 0;
    o += (size_t)snprintf(lbl, sizeof lbl, "model_name=\"");
    for (const char *s = model_name; *s && o < sizeof lbl - 4; s++) {
        if (*s == '"' || *s == '\\') lbl[o++] = '\\';
        lbl[o++] = *s == '\n' ? ' ' : *s;
    }
    snprintf(lbl + o, sizeof lbl - o, "\"");
    engine_stats z;
    if (!st) {
        memset(&z, 0, sizeof z);
        st = &z;
    }
    double usage = st->kv_blocks_total ? (double)st->kv_blocks_used / (double)st->kv_blocks_total : 0;
    gauge(&b, lbl, "vllm:num_requests_running", "Requests in the running batch.", st->num_running);
    gauge(&b, lbl, "vllm:num_requests_waiting", "Requests waiting to be scheduled.", st->num_waiting);
    gauge(&b, lbl, "vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (1 = full), prefix cache included.", usage);
    counter(&b, lbl, "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", (double)st->prefix_cache_queries);
    counter(&b, lbl, "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", (double)st->prefix_cache_hits);
    counter(&b, lbl, "vllm:prompt_tokens", "Prefill tokens of finished requests.", (double)st->prompt_tokens);
    counter(&b, lbl, "vllm:generation_tokens", "Generated tokens.", (double)st->generation_tokens);
    head(&b, "vllm:request_success", "counter", "Finished requests (choices) by finish reason.");
    static const char *const reasons[MET_N_REASONS] = {"stop", "length", "abort", "error"};
    for (int i = 0; i < MET_N_REASONS; i++)
        bprintf(&b, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", lbl, reasons[i],
                (unsigned long long)m->success[i]);
    hist(&b, lbl, "vllm:time_to_first_token_seconds", "Time to first token.", &m->ttft);
    hist(&b, lbl, "vllm:inter_token_latency_seconds", "Time between consecutive tokens of a choice.", &m->itl);
    hist(&b, lbl, "vllm:e2e_request_latency_seconds", "Arrival to last token.", &m->e2e);
    hist(&b, lbl, "vllm:request_queue_time_seconds", "Arrival to first scheduling.", &m->queue);
    counter(&b, lbl, "kvserve_preemptions", "Sequences preempted for lack of KV blocks.", (double)st->preemptions);
    counter(&b, lbl, "kvserve_prefix_cache_evictions", "KV blocks evicted from the prefix cache.", (double)st->prefix_cache_evictions);
    gauge(&b, lbl, "kvserve_kv_bytes_per_token", "KV bytes per token: 2 x layers x kv_heads x (head_dim x bytes + the int8/fp8 scale).", (double)st->kv_bytes_per_token);
    gauge(&b, lbl, "kvserve_kv_capacity_tokens", "Tokens the KV arena holds.", (double)st->kv_capacity_tokens);
    gauge(&b, lbl, "kvserve_kv_capacity_sequences", "Sequences the KV arena holds at once at full context (or one window).", (double)st->kv_capacity_seqs);
    gauge(&b, lbl, "kvserve_kv_blocks_total", "KV blocks in the arena.", (double)st->kv_blocks_total);
    gauge(&b, lbl, "kvserve_kv_blocks_used", "KV blocks referenced by sequences or the prefix cache.", (double)st->kv_blocks_used);
    gauge(&b, lbl, "kvserve_kv_blocks_cached", "KV blocks held by the prefix cache.", (double)st->kv_blocks_cached);
    gauge(&b, lbl, "kvserve_engine_alive", "1 while the engine thread runs.", st->alive);
    counter(&b, lbl, "kvserve_engine_steps", "Engine steps.", (double)st->steps);
    counter(&b, lbl, "kvserve_grammar_masks", "Token masks computed for structured-output sequences.", (double)st->grammar_masks);
    counter(&b, lbl, "kvserve_grammar_mask_seconds", "Time the engine spent computing those masks.", (double)st->grammar_mask_us * 1e-6);
    counter(&b, lbl, "kvserve_grammar_cache_lookups", "Structured-output grammars looked up in the compiled-grammar cache.", (double)m->grammar_lookups);
    counter(&b, lbl, "kvserve_grammar_cache_hits", "Of which found (no compilation).", (double)m->grammar_hits);
    gauge(&b, lbl, "kvserve_grammar_cache_entries", "Compiled grammars in the cache.", m->grammar_entries);
    counter(&b, lbl, "kvserve_http_requests", "HTTP requests answered.", (double)m->http_requests);
    counter(&b, lbl, "kvserve_http_errors", "HTTP requests answered with a status of 400 or more.", (double)m->http_errors);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
