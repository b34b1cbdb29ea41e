/*
 * test_metrics.c — /metrics with vLLM's names, types, labels and buckets (server/metrics.c).
 *
 * Suite metrics: the rendering alone (every vLLM metric kvserve exports, its TYPE, the
 * model_name + engine labels, the le values as vLLM writes them, the 1-2-5 token buckets up to
 * max_model_len, idle cached blocks counted free in kv_cache_usage_perc; the second KV tier's
 * kvserve_kv_tier_* only with a tier). Suite metrics_e2e:
 * after real requests the per-request histograms count requests (one per prompt, not per
 * choice), as does vllm:request_success_total, and an idle server whose cache holds blocks
 * reports a usage of 0.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/metrics.h"
#include "tests/server_harness.h"

#define TM_LBL "model_name=\"m\",engine=\"0\""

static const char *const tm_metrics[][2] = {
    {"vllm:num_requests_running", "gauge"},
    {"vllm:num_requests_waiting", "gauge"},
    {"vllm:kv_cache_usage_perc", "gauge"},
    {"vllm:prefix_cache_queries", "counter"},
    {"vllm:prefix_cache_hits", "counter"},
    {"vllm:num_preemptions", "counter"},
    {"vllm:spec_decode_num_drafts", "counter"},
    {"vllm:spec_decode_num_draft_tokens", "counter"},
    {"vllm:spec_decode_num_accepted_tokens", "counter"},
    {"vllm:prompt_tokens", "counter"},
    {"vllm:generation_tokens", "counter"},
    {"vllm:request_success", "counter"},
    {"vllm:time_to_first_token_seconds", "histogram"},
    {"vllm:inter_token_latency_seconds", "histogram"},
    {"vllm:request_time_per_output_token_seconds", "histogram"},
    {"vllm:e2e_request_latency_seconds", "histogram"},
    {"vllm:request_queue_time_seconds", "histogram"},
    {"vllm:request_prefill_time_seconds", "histogram"},
    {"vllm:request_decode_time_seconds", "histogram"},
    {"vllm:request_inference_time_seconds", "histogram"},
    {"vllm:request_prompt_tokens", "histogram"},
    {"vllm:request_generation_tokens", "histogram"},
    {"vllm:iteration_tokens_total", "histogram"},
};

Test(metrics, names_types_labels_buckets)
{
    met m;
    met_init(&m);
    met_set_max_model_len(&m, 512);
    met_observe(&m.prompt_toks, 5);
    met_observe(&m.prompt_toks, 600);
    engine_stats st;
    memset(&st, 0, sizeof st);
    st.kv_blocks_total = 100;
    st.kv_blocks_used = 40;
    st.kv_blocks_idle = 30; /* held by the prefix cache alone */
    st.preemptions = 7;
    st.spec_drafts = 11;
    st.spec_draft_tokens = 30;
    st.spec_accepted = 19;
    st.iter_tokens[0] = 2;  /* two steps of 1 token */
    st.iter_tokens[4] = 1;  /* one of 33..64 */
    st.iter_tokens_sum = 2 + 40;
    char *t = met_render(&m, &st, "m");
    for (size_t i = 0; i < sizeof tm_metrics / sizeof tm_metrics[0]; i++) {
        char want[160];
        snprintf(want, sizeof want, "# TYPE %s %s\n", tm_metrics[i][0], tm_metrics[i][1]);
        cr_assert(strstr(t, want), "missing %s", want);
        snprintf(want, sizeof want, "%s%s{" TM_LBL, tm_metrics[i][0],
                 !strcmp(tm_metrics[i][1], "counter") ? "_total" : !strcmp(tm_metrics[i][1], "histogram") ? "_bucket" : "");
        cr_assert(strstr(t, want), "no sample %s", want);
    }
    cr_assert(strstr(t, "vllm:kv_cache_usage_perc{" TM_LBL "} 0.1\n"), "(40 used - 30 idle) / 100:\n%s", t);
    cr_assert(strstr(t, "vllm:num_preemptions_total{" TM_LBL "} 7\n"));
    cr_assert(strstr(t, "vllm:spec_decode_num_drafts_total{" TM_LBL "} 11\n"));
    cr_assert(strstr(t, "vllm:spec_decode_num_draft_tokens_total{" TM_LBL "} 30\n"));
    cr_assert(strstr(t, "vllm:spec_decode_num_accepted_tokens_total{" TM_LBL "} 19\n"));
    cr_assert_null(strstr(t, "kvserve_preemptions"), "renamed to vLLM's name");
    cr_assert(strstr(t, "vllm:request_prompt_tokens_bucket{" TM_LBL ",le=\"1.0\"} 0\n"));
    cr_assert(strstr(t, "vllm:request_prompt_tokens_bucket{" TM_LBL ",le=\"5.0\"} 1\n"));
    cr_assert(strstr(t, "vllm:request_prompt_tokens_bucket{" TM_LBL ",le=\"500.0\"} 1\n"), "1-2-5 up to 512");
    cr_assert_null(strstr(t, "vllm:request_prompt_tokens_bucket{" TM_LBL ",le=\"1000.0\"}"));
    cr_assert(strstr(t, "vllm:request_prompt_tokens_bucket{" TM_LBL ",le=\"+Inf\"} 2\n"));
    cr_assert(strstr(t, "vllm:iteration_tokens_total_bucket{" TM_LBL ",le=\"1.0\"} 2\n"));
    cr_assert(strstr(t, "vllm:iteration_tokens_total_bucket{" TM_LBL ",le=\"64.0\"} 3\n"));
    cr_assert(strstr(t, "vllm:iteration_tokens_total_bucket{" TM_LBL ",le=\"16384.0\"} 3\n"));
    cr_assert(strstr(t, "vllm:iteration_tokens_total_count{" TM_LBL "} 3\n"));
    cr_assert(strstr(t, "vllm:iteration_tokens_total_sum{" TM_LBL "} 42\n"));
    cr_assert(strstr(t, "vllm:inter_token_latency_seconds_bucket{" TM_LBL ",le=\"0.025\"} 0\n"), "vLLM's ITL buckets");
    cr_assert(strstr(t, "vllm:e2e_request_latency_seconds_bucket{" TM_LBL ",le=\"7680.0\"}"));
    static const char *const reasons[] = {"stop", "length", "abort"};
    for (int i = 0; i < 3; i++) {
        char want[128];
        snprintf(want, sizeof want, "vllm:request_success_total{" TM_LBL ",finished_reason=\"%s\"} 0\n", reasons[i]);
        cr_assert(strstr(t, want), "%s", want);
    }
    free(t);
}

/* kvserve_step_seconds: one histogram per phase under one TYPE, cumulative buckets in seconds. */
Test(metrics, step_seconds_by_phase)
{
    met m;
    met_init(&m);
    engine_stats st;
    memset(&st, 0, sizeof st);
    st.phase_hist[ENGINE_PHASE_FORWARD][3] = 2;  /* two steps of 0.5 .. 1 ms */
    st.phase_hist[ENGINE_PHASE_FORWARD][ENGINE_STEP_BUCKETS] = 1; /* one beyond every bound */
    st.phase_us[ENGINE_PHASE_FORWARD] = 3001800;
    st.phase_hist[ENGINE_PHASE_SAMPLE][0] = 3;
    st.phase_us[ENGINE_PHASE_SAMPLE] = 150;
    st.overlap = 1;
    st.tokens_dropped = 4;
    char *t = met_render(&m, &st, "m");
    const char *ty = strstr(t, "# TYPE kvserve_step_seconds histogram\n");
    cr_assert(ty && !strstr(ty + 1, "# TYPE kvserve_step_seconds "), "one TYPE line for every phase");
    for (int p = 0; p < ENGINE_PHASES; p++) {
        char want[160];
        snprintf(want, sizeof want, "kvserve_step_seconds_count{" TM_LBL ",phase=\"%s\"}", engine_phase_names[p]);
        cr_assert(strstr(t, want), "%s", want);
    }
    cr_assert(strstr(t, "kvserve_step_seconds_bucket{" TM_LBL ",phase=\"forward\",le=\"0.0005\"} 0\n"), "%s", t);
    cr_assert(strstr(t, "kvserve_step_seconds_bucket{" TM_LBL ",phase=\"forward\",le=\"0.001\"} 2\n"));
    cr_assert(strstr(t, "kvserve_step_seconds_bucket{" TM_LBL ",phase=\"forward\",le=\"2.5\"} 2\n"));
    cr_assert(strstr(t, "kvserve_step_seconds_bucket{" TM_LBL ",phase=\"forward\",le=\"+Inf\"} 3\n"));
    cr_assert(strstr(t, "kvserve_step_seconds_sum{" TM_LBL ",phase=\"forward\"} 3.0018\n"));
    cr_assert(strstr(t, "kvserve_step_seconds_bucket{" TM_LBL ",phase=\"sample\",le=\"0.0001\"} 3\n"));
    cr_assert(strstr(t, "kvserve_step_seconds_count{" TM_LBL ",phase=\"schedule\"} 0\n"));
    cr_assert(strstr(t, "kvserve_engine_overlap{" TM_LBL "} 1\n"));
    cr_assert(strstr(t, "kvserve_engine_tokens_dropped_total{" TM_LBL "} 4\n"));
    free(t);
}

/* Value of the sample that starts with prefix (a whole line prefix, labels included). */
static double tm_value(const char *text, const char *prefix)
{
    const char *p = text;
    size_t n = strlen(prefix);
    while ((p = strstr(p, prefix))) {
        if (p == text || p[-1] == '\n') {
            const char *v = strchr(p + n, ' ');
            return v ? atof(v + 1) : -1;
        }
        p += n;
    }
    return -1;
}

Test(metrics_e2e, counts_requests_not_choices, .timeout = 60)
{
    th_server s;
    static const char *const args[] = {"--served-model-name", "m", NULL};
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    th_resp r = th_http(s.port, NULL, "/v1/completions",
                        "{\"prompt\":[\"Once upon a time\",\"The cat\"],\"n\":3,\"max_tokens\":4,\"temperature\":1,\"ignore_eos\":true}", NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    th_resp_free(&r);
#define TM_LONG "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends."
    r = th_http(s.port, NULL, "/v1/completions", "{\"prompt\":\"" TM_LONG "\",\"max_tokens\":6,\"temperature\":0,\"stream\":true}", NULL);
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/tokenize", "{\"prompt\":\"" TM_LONG "\"}", NULL);
    int n_long = atoi(strstr(r.body, "\"count\":") + 8);
    cr_assert_gt(n_long, 16, "at least one full KV block to cache");
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/metrics", NULL, NULL);
    const char *t = r.body;
    cr_assert_eq(tm_value(t, "vllm:request_success_total{" TM_LBL ",finished_reason=\"length\"}"), 3,
                 "two prompts of n=3 and one stream are three requests:\n%s", t);
    cr_assert_eq(tm_value(t, "vllm:e2e_request_latency_seconds_count{" TM_LBL "}"), 3);
    cr_assert_eq(tm_value(t, "vllm:request_generation_tokens_count{" TM_LBL "}"), 3);
    cr_assert_eq(tm_value(t, "vllm:request_generation_tokens_sum{" TM_LBL "}"), 2 * 3 * 4 + 6);
    cr_assert_eq(tm_value(t, "vllm:request_prompt_tokens_sum{" TM_LBL "}"), 5 + 4 + n_long);
    cr_assert_eq(tm_value(t, "vllm:request_time_per_output_token_seconds_count{" TM_LBL "}"), 3);
    cr_assert_eq(tm_value(t, "vllm:request_decode_time_seconds_count{" TM_LBL "}"), 3);
    cr_assert_eq(tm_value(t, "vllm:request_prefill_time_seconds_count{" TM_LBL "}"), 3);
    cr_assert_eq(tm_value(t, "vllm:request_inference_time_seconds_count{" TM_LBL "}"), 3);
    cr_assert_geq(tm_value(t, "vllm:iteration_tokens_total_count{" TM_LBL "}"), 4, "one observation per step");
    double steps = tm_value(t, "kvserve_engine_steps_total{" TM_LBL "}");
    cr_assert_geq(steps, 4);
    cr_assert_eq(tm_value(t, "kvserve_step_seconds_count{" TM_LBL ",phase=\"forward\"}"), steps,
                 "one observation of each phase per step");
    cr_assert_gt(tm_value(t, "kvserve_step_seconds_sum{" TM_LBL ",phase=\"forward\"}"), 0);
    const char *xa = getenv("KVSERVE_TEST_SERVE_ARGS"); /* the suite may run overlapped */
    cr_assert_eq(tm_value(t, "kvserve_engine_overlap{" TM_LBL "}"), xa && strstr(xa, "--overlap on") ? 1 : 0,
                 "off on the CPU unless asked for");
    cr_assert_gt(tm_value(t, "kvserve_kv_blocks_cached{" TM_LBL "}"), 0, "the finished requests left cached blocks");
    th_resp_free(&r);
    /* idle: the cached blocks count free (kv_blocks_idle is refreshed within 100 ms) */
    double usage = -1;
    for (int64_t deadline = th_now_ms() + 5000; th_now_ms() < deadline; usleep(50000)) {
        r = th_http(s.port, NULL, "/metrics", NULL, NULL);
        usage = tm_value(r.body, "vllm:kv_cache_usage_perc{" TM_LBL "}");
        th_resp_free(&r);
        if (usage == 0) break;
    }
    cr_assert_eq(usage, 0, "an idle server's cache is free for new requests (usage %g)", usage);
    th_stop(&s);
}

/* The second KV tier's metrics: none without a tier; with one, counters, gauges with a
 * tier="host" / "disk" label, capacities in tokens, and the load histogram in seconds over the
 * engine's bounds (a load past the last bound only in +Inf). */
Test(metrics, kv_tier)
{
    met m;
    met_init(&m);
    engine_stats st;
    memset(&st, 0, sizeof st);
    st.block_size = 16;
    char *t = met_render(&m, &st, "m");
    cr_assert_null(strstr(t, "kvserve_kv_tier"), "no tier, no tier metrics");
    free(t);
    st.tier_on = st.tier_disk_on = 1;
    st.tier_host_blocks = 4, st.tier_host_capacity = 10;
    st.tier_disk_blocks = 7, st.tier_disk_capacity = 1000;
    st.tier_hits_host = 3, st.tier_hits_disk = 5, st.tier_hit_tokens = 128, st.tier_loads = 2;
    st.tier_bytes_written = 4096, st.tier_bytes_read = 2048, st.tier_bytes_to_host = 111, st.tier_bytes_from_host = 222;
    st.tier_load_failures = 1, st.tier_writes_skipped = 6, st.tier_files_ignored = 9;
    st.tier_load_hist[0] = 1;                   /* within the first bound */
    st.tier_load_hist[ENGINE_TIER_BUCKETS] = 1; /* past the last one */
    st.tier_load_us = 2000000 + engine_tier_bounds_us[0];
    t = met_render(&m, &st, "m");
    static const char *const want[] = {
        "# TYPE kvserve_kv_tier_hit_tokens counter\n",
        "kvserve_kv_tier_hit_tokens_total{" TM_LBL "} 128\n",
        "kvserve_kv_tier_loads_total{" TM_LBL "} 2\n",
        "# TYPE kvserve_kv_tier_load_seconds histogram\n",
        "kvserve_kv_tier_load_seconds_count{" TM_LBL "} 2\n",
        "kvserve_kv_tier_load_seconds_bucket{" TM_LBL ",le=\"+Inf\"} 2\n",
        "kvserve_kv_tier_hit_blocks_total{" TM_LBL ",tier=\"host\"} 3\n",
        "kvserve_kv_tier_hit_blocks_total{" TM_LBL ",tier=\"disk\"} 5\n",
        "kvserve_kv_tier_bytes_written_total{" TM_LBL ",tier=\"host\"} 111\n",
        "kvserve_kv_tier_bytes_written_total{" TM_LBL ",tier=\"disk\"} 4096\n",
        "kvserve_kv_tier_bytes_read_total{" TM_LBL ",tier=\"host\"} 222\n",
        "kvserve_kv_tier_bytes_read_total{" TM_LBL ",tier=\"disk\"} 2048\n",
        "# TYPE kvserve_kv_tier_blocks gauge\n",
        "kvserve_kv_tier_blocks{" TM_LBL ",tier=\"host\"} 4\n",
        "kvserve_kv_tier_blocks{" TM_LBL ",tier=\"disk\"} 7\n",
        "kvserve_kv_tier_capacity_tokens{" TM_LBL ",tier=\"host\"} 160\n",
        "kvserve_kv_tier_capacity_tokens{" TM_LBL ",tier=\"disk\"} 16000\n",
        "kvserve_kv_tier_load_failures_total{" TM_LBL "} 1\n",
        "kvserve_kv_tier_writes_skipped_total{" TM_LBL "} 6\n",
        "kvserve_kv_tier_files_ignored_total{" TM_LBL "} 9\n",
        "kvserve_kv_tier_disk_up{" TM_LBL "} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) cr_assert(strstr(t, want[i]), "missing %s in\n%s", want[i], t);
    /* the buckets: 1 load up to every bound, the other only in +Inf; the sum in seconds */
    static const char le[] = "kvserve_kv_tier_load_seconds_bucket{" TM_LBL ",le=\"";
    int n = 0;
    for (const char *p = t; (p = strstr(p, le)); n++) {
        p += strlen(le);
        if (strncmp(p, "+Inf", 4)) cr_assert_eq(atof(strchr(p, ' ') + 1), 1.0, "a bucket short of +Inf: %.40s", p);
    }
    cr_assert_eq(n, ENGINE_TIER_BUCKETS + 1, "one bucket per bound and +Inf");
    cr_assert_float_eq(tm_value(t, "kvserve_kv_tier_load_seconds_sum{" TM_LBL "}"),
                       2.0 + engine_tier_bounds_us[0] * 1e-6, 1e-9);
    free(t);
}
