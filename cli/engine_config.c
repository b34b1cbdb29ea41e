/*
 * engine_config.c — the engine configuration the subcommands that run an engine in-process
 * (`bench`, and `generate` when it speculates) build from the shared options, so that both run
 * the very engine `serve` runs, configured by the same flags. A subcommand that does not take an
 * option (cli/options.c's table) gets its default here, as the engine would.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cache/kv.h"
#include "cli/cli.h"
#include "cli/device.h"
#include "engine/backend.h"
#include "engine/engine.h"

int cli_engine_config(const cli_opts *o, const char *cmd, engine_config *c)
{
    engine_config_default(c);
    c->device = o->device;
    c->n_threads = o->threads;
    c->make_backend = be_create;
    char gerr[128];
    if (be_set_cuda_graphs(o->cuda_graphs, gerr, sizeof gerr)) {
        fprintf(stderr, "kvserve %s: %s\n", cmd, gerr);
        return -EINVAL;
    }
    c->kv_memory_bytes = o->kv_memory_bytes;
    c->kv_host_memory_bytes = o->kv_host_memory_bytes;
    c->kv_disk_dir = o->kv_disk_dir && *o->kv_disk_dir ? o->kv_disk_dir : NULL;
    c->kv_disk_bytes = o->kv_disk_bytes;
    c->kv_disk_timeout_s = o->kv_disk_timeout_s;
    c->gpu_memory_utilization = o->gpu_memory_utilization;
    c->kv_dtype = kv_dtype_parse(o->kv_dtype);
    c->block_size = o->block_size;
    c->kv_window = o->kv_window;
    c->kv_sinks = o->kv_sinks;
    c->max_seqs = o->max_seqs;
    c->max_batch_tokens = o->max_batch_tokens;
    c->prefill_admit_tokens = o->prefill_admit_tokens;
    c->prefix_cache = !o->no_prefix_cache;
    c->overlap = cli_overlap_parse(o->overlap);
    c->verbose = o->verbose;
    c->max_model_len = o->max_model_len;
    if (!strcmp(o->schedule, "fcfs")) c->schedule = ENGINE_SCHED_FCFS;
    else if (!strcmp(o->schedule, "lpm")) c->schedule = ENGINE_SCHED_LPM;
    else c->schedule = -1;
    const char *flag = NULL, *val = NULL, *allowed = NULL;
    if (cli_spec_config(o, c)) flag = "--speculative", val = o->speculative, allowed = "ngram, draft or off";
    else if (c->kv_dtype < 0) flag = "--kv-dtype", val = o->kv_dtype, allowed = "f16, bf16, f32, int8 or fp8";
    else if (c->schedule < 0) flag = "--schedule", val = o->schedule, allowed = "fcfs or lpm";
    else if (c->overlap < 0) flag = "--overlap", val = o->overlap, allowed = "auto, on or off";
    if (flag) {
        fprintf(stderr, "kvserve %s: unknown %s '%s' (%s)\n", cmd, flag, val ? val : "", allowed);
        return -EINVAL;
    }
    if (o->block_size <= 0 || o->max_model_len < 0) {
        fprintf(stderr, "kvserve %s: %s must be positive\n", cmd, o->block_size <= 0 ? "--block-size" : "--max-model-len");
        return -EINVAL;
    }
    return 0;
}
