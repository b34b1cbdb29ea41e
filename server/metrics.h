/*
 * metrics.h — Prometheus text exposition of the server's and the engine's numbers, with the
 * metric names, types, labels (model_name, engine) and histogram buckets vLLM uses (so
 * dashboards and benchmark scrapers written for vLLM work unchanged), plus kvserve_* for what
 * vLLM has no name for (evictions, the KV formula, HTTP counts).
 *
 * Histograms are fixed-bucket and live on the loop thread; the engine's counters and gauges come
 * from an engine_stats snapshot taken at scrape time.
 */
#ifndef KVSERVE_METRICS_H
#define KVSERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

#define MET_MAX_BUCKETS 24

typedef struct met_hist {
    int n_bounds;                         /* finite upper bounds */
    const double *bounds;                 /* [n_bounds] seconds, increasing */
    uint64_t counts[MET_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last = above all bounds */
    double sum;                           /* seconds */
    uint64_t count;
} met_hist;

/* vLLM's finished_reason values; an engine failure counts as an abort, as it does there. */
enum met_reason { MET_STOP = 0, MET_LENGTH, MET_ABORT, MET_N_REASONS };

typedef struct met {
    met_hist ttft;        /* vllm:time_to_first_token_seconds */
    met_hist itl;         /* vllm:inter_token_latency_seconds */
    met_hist tpot;        /* vllm:request_time_per_output_token_seconds (per request) */
    met_hist e2e;         /* vllm:e2e_request_latency_seconds */
    met_hist queue;       /* vllm:request_queue_time_seconds: arrival → first scheduled */
    met_hist prefill;     /* vllm:request_prefill_time_seconds: first scheduled → first token */
    met_hist decode;      /* vllm:request_decode_time_seconds: first token → finish */
    met_hist inference;   /* vllm:request_inference_time_seconds: first scheduled → finish */
    met_hist prompt_toks; /* vllm:request_prompt_tokens (counts, 1-2-5 buckets to max_model_len) */
    met_hist gen_toks;    /* vllm:request_generation_tokens */
    double tok_bounds[MET_MAX_BUCKETS]; /* storage of the 1-2-5 bounds */
    uint64_t success[MET_N_REASONS]; /* finished requests (one per prompt) by reason */
    uint64_t http_requests;          /* HTTP requests answered, and those with status ≥ 400 */
    uint64_t http_errors;            /* (copied from http/ before each render) */
    int http_conns;                  /* open connections (the gate's) */
    uint64_t http_evicted, http_timed_out, http_refused; /* connections closed for room, by a
                                                          * timeout, refused with 503 */
    int64_t grammar_lookups;         /* structured-output grammar cache: lookups, hits, entries */
    int64_t grammar_hits;            /* (copied from the cache before each render) */
    int grammar_entries;
} met;

void met_init(met *m);
/* The buckets of the token-count histograms: 1, 2, 5, 10, 20, 50, … up to max_model_len, as
 * vLLM builds them. Call before the first observation. */
void met_set_max_model_len(met *m, int max_model_len);
void met_observe(met_hist *h, double seconds);
/* Maps an engine_finish to a met_reason. */
int met_reason_of(int finish);

/* Renders everything as Prometheus text (version 0.0.4). st may be NULL (engine not up yet).
 * Returns a malloc'd NUL-terminated string, or NULL on allocation failure. */
char *met_render(const met *m, const engine_stats *st, const char *model_name);

#endif
