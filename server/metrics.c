/*
 * metrics.c — histograms and the /metrics text (see metrics.h).
 *
 * Counters follow the Prometheus client convention vLLM inherits: the TYPE line names the metric
 * ("vllm:prompt_tokens") and the sample carries the _total suffix. Every sample has the
 * model_name label, as vLLM's do.
 */
#include "server/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

/* vLLM's bucket boundaries, metric by metric. */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                     1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double req_bounds[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
#define MET_N(a) ((int)(sizeof a / sizeof a[0]))

static void hist_init(met_hist *h, const double *b, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = b;
    h->n_bounds = n;
}

void met_init(met *m)
{
    memset(m, 0, sizeof *m);
    hist_init(&m->ttft, ttft_bounds, MET_N(ttft_bounds));
    hist_init(&m->itl, itl_bounds, MET_N(itl_bounds));
    hist_init(&m->tpot, itl_bounds, MET_N(itl_bounds));
    met_hist *req[] = {&m->e2e, &m->queue, &m->prefill, &m->decode, &m->inference};
    for (int i = 0; i < MET_N(req); i++) hist_init(req[i], req_bounds, MET_N(req_bounds));
    met_set_max_model_len(m, 0);
}

void met_set_max_model_len(met *m, int max_model_len)
{
    static const int mant[3] = {1, 2, 5};
    int n = 0;
    for (double scale = 1; n < MET_MAX_BUCKETS; scale *= 10) {
        int k = 0;
        for (; k < 3 && n < MET_MAX_BUCKETS && mant[k] * scale <= max_model_len; k++) m->tok_bounds[n++] = mant[k] * scale;
        if (k < 3) break;
    }
    hist_init(&m->prompt_toks, m->tok_bounds, n);
    hist_init(&m->gen_toks, m->tok_bounds, n);
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
    default: return MET_ABORT;
    }
}

/* The shortest of %.15g / %.17g that reads back as v (0.1, not 0.10000000000000001). */
static const char *num(char *out, size_t n, double v)
{
    snprintf(out, n, "%.15g", v);
    if (strtod(out, NULL) != v) snprintf(out, n, "%.17g", v);
    return out;
}

static void head(buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(buf *b, const char *lbl, const char *name, const char *help, double v)
{
    head(b, name, "gauge", help);
    char t[40];
    buf_printf(b, "%s{%s} %s\n", name, lbl, num(t, sizeof t, v));
}

static void counter(buf *b, const char *lbl, const char *name, const char *help, double v)
{
    head(b, name, "counter", help);
    char t[40];
    buf_printf(b, "%s_total{%s} %s\n", name, lbl, num(t, sizeof t, v));
}

static void hist(buf *b, const char *lbl, const char *name, const char *help, const met_hist *h)
{
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        /* le as the Prometheus Python client writes it (vLLM's): 1.0, 0.025, 160.0 */
        double v = h->bounds[i];
        buf_printf(b, v == (double)(long long)v ? "%s_bucket{%s,le=\"%.1f\"} %llu\n" : "%s_bucket{%s,le=\"%g\"} %llu\n",
                name, lbl, v, (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, lbl, (unsigned long long)cum);
    char t[40];
    buf_printf(b, "%s_sum{%s} %s\n", name, lbl, num(t, sizeof t, h->sum));
    buf_printf(b, "%s_count{%s} %llu\n", name, lbl, (unsigned long long)h->count);
}

/* vllm:iteration_tokens_total: tokens per engine step, from the engine's own counts. */
static void iteration_tokens(buf *b, const char *lbl, const engine_stats *st)
{
    static double bounds[ENGINE_ITER_BUCKETS];
    met_hist h;
    for (int i = 0; i < ENGINE_ITER_BUCKETS; i++) bounds[i] = engine_iter_bounds[i];
    hist_init(&h, bounds, ENGINE_ITER_BUCKETS);
    for (int i = 0; i <= ENGINE_ITER_BUCKETS; i++) {
        h.counts[i] = st->iter_tokens[i];
        h.count += st->iter_tokens[i];
    }
    h.sum = (double)st->iter_tokens_sum;
    hist(b, lbl, "vllm:iteration_tokens_total", "Tokens per engine step.", &h);
}

/* kvserve_step_seconds{phase=...}: the engine thread's time per step in each phase, one histogram
 * per phase label under one HELP/TYPE. */
static void step_seconds(buf *b, const char *lbl, const engine_stats *st)
{
    const char *name = "kvserve_step_seconds";
    head(b, name, "histogram", "Engine thread time per step, by phase (schedule, upload, forward, sample, output).");
    char t[40];
    for (int p = 0; p < ENGINE_PHASES; p++) {
        uint64_t cum = 0, count = 0;
        for (int i = 0; i <= ENGINE_STEP_BUCKETS; i++) count += st->phase_hist[p][i];
        for (int i = 0; i < ENGINE_STEP_BUCKETS; i++) {
            cum += st->phase_hist[p][i];
            buf_printf(b, "%s_bucket{%s,phase=\"%s\",le=\"%g\"} %llu\n", name, lbl, engine_phase_names[p],
                       (double)engine_step_bounds_us[i] * 1e-6, (unsigned long long)cum);
        }
        buf_printf(b, "%s_bucket{%s,phase=\"%s\",le=\"+Inf\"} %llu\n", name, lbl, engine_phase_names[p],
                   (unsigned long long)count);
        buf_printf(b, "%s_sum{%s,phase=\"%s\"} %s\n", name, lbl, engine_phase_names[p],
                   num(t, sizeof t, (double)st->phase_us[p] * 1e-6));
        buf_printf(b, "%s_count{%s,phase=\"%s\"} %llu\n", name, lbl, engine_phase_names[p], (unsigned long long)count);
    }
}

/* One sample per tier level ("host", "disk") of a counter or gauge. */
static void per_tier(buf *b, const char *lbl, const char *name, const char *type, const char *help, double host,
                     double disk)
{
    head(b, name, type, help);
    const char *suffix = strcmp(type, "counter") ? "" : "_total";
    char t[40];
    buf_printf(b, "%s%s{%s,tier=\"host\"} %s\n", name, suffix, lbl, num(t, sizeof t, host));
    buf_printf(b, "%s%s{%s,tier=\"disk\"} %s\n", name, suffix, lbl, num(t, sizeof t, disk));
}

/* The second KV tier (only when one is configured). */
static void tier_metrics(buf *b, const char *lbl, const engine_stats *st)
{
    if (!st->tier_on) return;
    static double bounds[ENGINE_TIER_BUCKETS];
    met_hist h;
    for (int i = 0; i < ENGINE_TIER_BUCKETS; i++) bounds[i] = (double)engine_tier_bounds_us[i] * 1e-6;
    hist_init(&h, bounds, ENGINE_TIER_BUCKETS);
    for (int i = 0; i <= ENGINE_TIER_BUCKETS; i++) {
        h.counts[i] = st->tier_load_hist[i];
        h.count += st->tier_load_hist[i];
    }
    h.sum = (double)st->tier_load_us * 1e-6;
    counter(b, lbl, "kvserve_kv_tier_hit_tokens", "Prompt tokens loaded back from the second KV tier instead of recomputed (also counted in vllm:prefix_cache_hits).", (double)st->tier_hit_tokens);
    counter(b, lbl, "kvserve_kv_tier_loads", "Waiting requests whose prefix was loaded back from the second KV tier.", (double)st->tier_loads);
    hist(b, lbl, "kvserve_kv_tier_load_seconds", "Second KV tier: a request's load, from its start to the step that sees it done.", &h);
    per_tier(b, lbl, "kvserve_kv_tier_hit_blocks", "counter", "KV blocks loaded back, by tier.", (double)st->tier_hits_host, (double)st->tier_hits_disk);
    per_tier(b, lbl, "kvserve_kv_tier_bytes_written", "counter", "Bytes written into each tier (host: block copies; disk: whole files).", (double)st->tier_bytes_to_host, (double)st->tier_bytes_written);
    per_tier(b, lbl, "kvserve_kv_tier_bytes_read", "counter", "Bytes read back from each tier.", (double)st->tier_bytes_from_host, (double)st->tier_bytes_read);
    per_tier(b, lbl, "kvserve_kv_tier_blocks", "gauge", "KV blocks each tier holds.", (double)st->tier_host_blocks, (double)st->tier_disk_blocks);
    per_tier(b, lbl, "kvserve_kv_tier_capacity_tokens", "gauge", "Tokens each tier holds when full.", (double)st->tier_host_capacity * st->block_size, (double)st->tier_disk_capacity * st->block_size);
    counter(b, lbl, "kvserve_kv_tier_load_failures", "KV blocks whose load back failed (corrupt or missing file, tier off): recomputed.", (double)st->tier_load_failures);
    counter(b, lbl, "kvserve_kv_tier_writes_skipped", "Blocks not written to the disk tier (no free staging buffer or no room).", (double)st->tier_writes_skipped);
    counter(b, lbl, "kvserve_kv_tier_files_ignored", "Disk tier files dropped as incomplete, corrupt or of another size.", (double)st->tier_files_ignored);
    gauge(b, lbl, "kvserve_kv_tier_disk_up", "1 while the disk tier works (a failed write turns it off).", st->tier_disk_on);
    counter(b, lbl, "kvserve_kv_tier_files_skipped", "Disk tier names held by something other than a regular file (FIFO, directory, link, device): never opened.", (double)st->tier_files_skipped);
    counter(b, lbl, "kvserve_kv_tier_io_timeouts", "Disk tier loads given up at their deadline (--kv-disk-timeout): recomputed.", (double)st->tier_io_timeouts);
    gauge(b, lbl, "kvserve_kv_tier_unverified_blocks", "Disk tier blocks of earlier runs not (yet) vouched for by the model file's hash: never loaded.", (double)st->tier_unverified_blocks);
    gauge(b, lbl, "kvserve_kv_tier_disk_stalled", "1 while a disk tier file operation is stuck past its deadline (loads miss, writes are skipped).", st->tier_disk_stalled);
}

char *met_render(const met *m, const engine_stats *st, const char *model_name)
{
    buf b = {0};
    if (buf_reserve(&b, 8192)) return NULL;
    char lbl[340];
    size_t o = 0;
    o += (size_t)snprintf(lbl, sizeof lbl, "model_name=\"");
    for (const char *s = model_name; *s && o < sizeof lbl - 20; s++) {
        if (*s == '"' || *s == '\\') lbl[o++] = '\\';
        lbl[o++] = *s == '\n' ? ' ' : *s;
    }
    snprintf(lbl + o, sizeof lbl - o, "\",engine=\"0\""); /* one engine, index 0, as vLLM labels it */
    engine_stats z;
    if (!st) {
        memset(&z, 0, sizeof z);
        st = &z;
    }
    /* Blocks only the prefix cache holds can be evicted at once: vLLM counts them free. */
    double usage = st->kv_blocks_total ? (double)(st->kv_blocks_used - st->kv_blocks_idle) / (double)st->kv_blocks_total : 0;
    gauge(&b, lbl, "vllm:num_requests_running", "Requests in the running batch.", st->num_running);
    gauge(&b, lbl, "vllm:num_requests_waiting", "Requests waiting to be scheduled.", st->num_waiting);
    gauge(&b, lbl, "vllm:kv_cache_usage_perc", "KV-cache usage: blocks held by requests (1 = full); idle cached blocks count as free.", usage);
    counter(&b, lbl, "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", (double)st->prefix_cache_queries);
    counter(&b, lbl, "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", (double)st->prefix_cache_hits);
    counter(&b, lbl, "vllm:prompt_tokens", "Prefill tokens of finished requests.", (double)st->prompt_tokens);
    counter(&b, lbl, "vllm:generation_tokens", "Generated tokens.", (double)st->generation_tokens);
    counter(&b, lbl, "vllm:num_preemptions", "Sequences preempted for lack of KV blocks.", (double)st->preemptions);
    head(&b, "vllm:request_success", "counter", "Finished requests (one per prompt) by finish reason.");
    static const char *const reasons[MET_N_REASONS] = {"stop", "length", "abort"};
    for (int i = 0; i < MET_N_REASONS; i++)
        buf_printf(&b, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", lbl, reasons[i],
                (unsigned long long)m->success[i]);
    hist(&b, lbl, "vllm:time_to_first_token_seconds", "Time to first token.", &m->ttft);
    hist(&b, lbl, "vllm:inter_token_latency_seconds", "Time between consecutive tokens of a choice.", &m->itl);
    hist(&b, lbl, "vllm:request_time_per_output_token_seconds", "Per request: decode time over its output tokens after the first.", &m->tpot);
    hist(&b, lbl, "vllm:e2e_request_latency_seconds", "Arrival to last token.", &m->e2e);
    hist(&b, lbl, "vllm:request_queue_time_seconds", "Arrival to first scheduling (WAITING).", &m->queue);
    hist(&b, lbl, "vllm:request_prefill_time_seconds", "First scheduling to first token (PREFILL).", &m->prefill);
    hist(&b, lbl, "vllm:request_decode_time_seconds", "First token to last token (DECODE).", &m->decode);
    hist(&b, lbl, "vllm:request_inference_time_seconds", "First scheduling to last token (RUNNING).", &m->inference);
    hist(&b, lbl, "vllm:request_prompt_tokens", "Prompt tokens per request.", &m->prompt_toks);
    hist(&b, lbl, "vllm:request_generation_tokens", "Generated tokens per request.", &m->gen_toks);
    iteration_tokens(&b, lbl, st);
    counter(&b, lbl, "kvserve_prefix_cache_evictions", "KV blocks evicted from the prefix cache.", (double)st->prefix_cache_evictions);
    gauge(&b, lbl, "kvserve_kv_bytes_per_token", "KV bytes per token: 2 x layers x kv_heads x (head_dim x bytes + the int8/fp8 scale); with MLA, layers x (latent + rope key) x bytes.", (double)st->kv_bytes_per_token);
    gauge(&b, lbl, "kvserve_kv_capacity_tokens", "Tokens the KV arena holds.", (double)st->kv_capacity_tokens);
    gauge(&b, lbl, "kvserve_kv_capacity_sequences", "Sequences the KV arena holds at once at full context (or one window).", (double)st->kv_capacity_seqs);
    gauge(&b, lbl, "kvserve_kv_blocks_total", "KV blocks in the arena.", (double)st->kv_blocks_total);
    gauge(&b, lbl, "kvserve_kv_blocks_used", "KV blocks referenced by sequences or the prefix cache.", (double)st->kv_blocks_used);
    gauge(&b, lbl, "kvserve_kv_blocks_cached", "KV blocks held by the prefix cache.", (double)st->kv_blocks_cached);
    gauge(&b, lbl, "kvserve_engine_alive", "1 while the engine thread runs.", st->alive);
    counter(&b, lbl, "kvserve_engine_steps", "Engine steps.", (double)st->steps);
    step_seconds(&b, lbl, st);
    gauge(&b, lbl, "kvserve_engine_overlap", "1 when the engine launches a step before applying the previous one's tokens.", st->overlap);
    counter(&b, lbl, "kvserve_engine_steps_overlapped", "Steps launched while the previous one was still in flight.", (double)st->steps_overlapped);
    counter(&b, lbl, "kvserve_engine_tokens_dropped", "Tokens computed for sequences that finished meanwhile (a stop seen one step late, a cancel): never sent.", (double)st->tokens_dropped);
    counter(&b, lbl, "vllm:spec_decode_num_drafts", "Speculative decoding: verify rows run (a sequence verifying at least one draft token in a step).", (double)st->spec_drafts);
    counter(&b, lbl, "vllm:spec_decode_num_draft_tokens", "Speculative decoding: draft tokens verified.", (double)st->spec_draft_tokens);
    counter(&b, lbl, "vllm:spec_decode_num_accepted_tokens", "Speculative decoding: draft tokens accepted.", (double)st->spec_accepted);
    counter(&b, lbl, "kvserve_grammar_masks", "Token masks computed for structured-output sequences.", (double)st->grammar_masks);
    counter(&b, lbl, "kvserve_grammar_mask_seconds", "Time the engine spent computing those masks.", (double)st->grammar_mask_us * 1e-6);
    counter(&b, lbl, "kvserve_grammar_cache_lookups", "Structured-output grammars looked up in the compiled-grammar cache.", (double)m->grammar_lookups);
    counter(&b, lbl, "kvserve_grammar_cache_hits", "Of which found (no compilation).", (double)m->grammar_hits);
    gauge(&b, lbl, "kvserve_grammar_cache_entries", "Compiled grammars in the cache.", m->grammar_entries);
    counter(&b, lbl, "kvserve_http_requests", "HTTP requests answered.", (double)m->http_requests);
    counter(&b, lbl, "kvserve_http_errors", "HTTP requests answered with a status of 400 or more.", (double)m->http_errors);
    gauge(&b, lbl, "kvserve_http_connections", "Open client connections.", m->http_conns);
    counter(&b, lbl, "kvserve_http_connections_evicted", "Connections with nothing in flight closed to make room for new ones (--http-max-connections, --http-max-connections-per-client).", (double)m->http_evicted);
    counter(&b, lbl, "kvserve_http_timeouts", "Connections closed by the header, body-rate or keep-alive timeout.", (double)m->http_timed_out);
    counter(&b, lbl, "kvserve_http_connections_refused", "Connections refused with 503: no room and the reserve full, or a reserved one asking for another route.", (double)m->http_refused);
    tier_metrics(&b, lbl, st);
    return buf_take(&b); /* NULL when a growth failed */
}
