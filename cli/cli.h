/*
 * cli.h — kvserve's command line: one table of options (cli/options.c) shared by every
 * subcommand, with defaults and help, also readable from a config file (same names as the
 * flags, without the dashes: "kv-memory = 2GiB"; flags override the file).
 */
#ifndef KVSERVE_CLI_H
#define KVSERVE_CLI_H

#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* Every option's parsed value. Strings point into argv or into the config file's storage. */
typedef struct cli_opts {
    /* model and device */
    const char *model;          /* -m, --model */
    const char *device;         /* --device cpu|cuda|auto */
    int threads;                /* --threads (0 = one per core) */
    const char *cuda_graphs;    /* --cuda-graphs on|off */
    /* KV cache and scheduler */
    size_t kv_memory_bytes;     /* --kv-memory SIZE */
    double gpu_memory_utilization;
    const char *kv_dtype;       /* f16|f32|bf16|int8|fp8 */
    int block_size;
    int kv_window;              /* --kv-window N: sinks + window (0: off) */
    int kv_sinks;               /* --kv-sinks S */
    size_t kv_host_memory_bytes; /* --kv-host-memory SIZE: host-RAM tier (0: off) */
    const char *kv_disk_dir;    /* --kv-disk-dir DIR: file tier (NULL: off) */
    size_t kv_disk_bytes;       /* --kv-disk-size SIZE (0: the default) */
    double kv_disk_timeout_s;   /* --kv-disk-timeout S */
    double http_header_timeout_s;    /* --http-header-timeout S */
    double http_body_min_rate;       /* --http-body-min-rate BYTES/S */
    double http_keepalive_timeout_s; /* --http-keepalive-timeout S */
    int http_max_connections;        /* --http-max-connections N */
    int http_max_per_client;         /* --http-max-connections-per-client N */
    int http_reserved_connections;   /* --http-reserved-connections N */
    int max_seqs;               /* 0: 64 on CPU, 256 on GPU */
    int max_batch_tokens;       /* 0: 512 on CPU, 2048 on GPU */
    int prefill_admit_tokens;   /* 0: 64 on CPU, no limit on GPU; < 0: no limit */
    const char *schedule;       /* fcfs|lpm */
    const char *overlap;        /* auto|on|off: overlapped engine steps */
    const char *speculative;    /* --speculative ngram|draft|off (NULL: not given, off) */
    const char *draft_model;    /* --draft-model FILE */
    int num_speculative_tokens; /* most drafts per sequence and step */
    int spec_ngram_min, spec_ngram_max; /* n-gram proposer's suffix lengths */
    int spec_disable_batch;     /* no drafts above this many decoding sequences */
    int no_prefix_cache;
    /* server */
    const char *host;
    int port;
    const char *config;
    const char *api_key;
    const char *served_model_name;
    const char *chat_template;  /* serve: a built-in name, @FILE or text; mkmodel: a file */
    const char *reasoning_parser; /* serve: deepseek_r1, qwen3 or none */
    const char *tool_call_parser; /* serve: auto or a tc_syntax_by_name() name
                                     (server/toolcall/toolcall.h) */
    int max_queued_requests;
    int64_t max_queued_tokens;
    int max_model_len;          /* 0: the model's context */
    const char *allowed_origins; /* NULL: CORS off */
    double drain_timeout_s;
    double sse_ping_interval_s;
    size_t max_body_bytes;
    int grammar_cache;          /* --grammar-cache N (0: off) */
    const char *pooling;        /* serve: --pooling mean|cls|last|rank (NULL: the model's);
                                   mkmodel: the pooling_type written */
    int response_store;         /* --response-store N: stored /v1/responses (0: none) */
    size_t response_store_bytes; /* --response-store-size SIZE */
    /* generate / tokenize */
    const char *prompt;         /* -p */
    int n_predict;              /* -n */
    double temperature;
    double top_p;
    int top_k;
    double min_p;
    int64_t seed;               /* -1: random */
    int ignore_eos;
    int ids;
    int no_bos;
    int special;
    const char *json_schema;    /* --json-schema FILE (generate, bench) */
    const char *grammar_file;   /* --grammar FILE: GBNF (generate, bench) */
    /* bench */
    int requests;
    const char *input_len;      /* "MIN:MAX" */
    const char *output_len;
    int shared_prefix;
    int turns;                  /* multi-turn mode: turns per conversation (0 = off) */
    int json;
    /* mkmodel */
    const char *output;         /* -o */
    int dim, layers, heads, kv_heads, ffn, vocab, context;
    const char *type;           /* f32|f16|bf16|q8_0 */
    const char *arch;           /* llama|qwen2|qwen3|gemma2|gemma3|phi3 */
    int head_dim, rope_dims;    /* 0: dim / heads, the head size */
    int experts, experts_used;  /* mkmodel: a mixture of experts (0: the architecture's default) */
    int kv_lora, q_lora, v_head; /* mkmodel, deepseek2: the latent's rank, the query's LoRA rank, the value head size */
    int shared_experts, dense_lead; /* mkmodel, deepseek2: shared experts, leading dense layers (0: default) */
    double rope_base, rope_base_swa; /* 0: default / not written */
    int swa_window, swa_pattern; /* 0 / -1: not written */
    double attn_softcap, final_softcap; /* 0: not written */
    const char *rope_scaling;   /* rope.scaling.type or NULL */
    double rope_factor, rope_attn_factor; /* 0: not written */
    int rope_orig_ctx;          /* 0: not written */
    int rope_freqs, fused_qkv, qkv_bias, tied; /* flags */
    double norm_std;            /* 0: norms 1 */
    int quiet_from;             /* mkmodel: layers from this one on are quiet (0: off) */
    double quiet_scale;         /* mkmodel: their output weights' scale */
    /* misc */
    int verbose;
    int help;
    /* positional arguments left after parsing */
    int n_args;
    char **args;        /* owned (cli_opts_fini frees it) */
    char **owned;       /* config-file values the string options point into (owned) */
    int n_owned;
} cli_opts;

/* Fills defaults (the table in design.md). */
void cli_opts_default(cli_opts *o);

/* Frees what cli_parse / cli_load_config allocated. */
void cli_opts_fini(cli_opts *o);

/* Parses argv[first..argc) for subcommand cmd ("serve", "generate", ...). Options not meant for cmd
 * are rejected. --config FILE is applied first, then the flags. Positional arguments are collected
 * into o->args. Returns 0, or -EINVAL after printing a one-line error to stderr. */
int cli_parse(const char *cmd, int argc, char **argv, int first, cli_opts *o);

/* Reads "key = value" lines (# comments) into o. Returns 0 or -EINVAL/-EIO with a message. */
int cli_load_config(const char *cmd, const char *path, cli_opts *o);

/* Prints the help of cmd (its options with defaults) to stdout. */
void cli_print_help(const char *cmd);

/* Parses sizes such as "2GiB", "512M", "1e9", "4096" into bytes. 0 or -EINVAL. */
int cli_parse_size(const char *s, size_t *out);

/* The speculative-decoding options into c (engine/spec.h). 0, or -EINVAL for an unknown method. */
struct engine_config;
int cli_spec_config(const cli_opts *o, struct engine_config *c);
/* The engine configuration of o's engine options (cli/engine_config.c), for a subcommand that
 * runs an engine in-process (bench; generate when it speculates). The caller sets model, tok and
 * wake, and whatever its own options add. 0, or -EINVAL after a one-line message prefixed with
 * "kvserve CMD". */
int cli_engine_config(const cli_opts *o, const char *cmd, struct engine_config *c);
/* --overlap auto|on|off as enum engine_overlap, or -1. */
int cli_overlap_parse(const char *s);

/* Subcommands: each returns the process exit code. */
int cli_serve(cli_opts *o);
int cli_info(cli_opts *o);
int cli_tokenize(cli_opts *o);
int cli_detokenize(cli_opts *o);
int cli_generate(cli_opts *o);
int cli_bench(cli_opts *o);
int cli_mkmodel(cli_opts *o);
int cli_render_chat(cli_opts *o);

/* The grammar of --json-schema / --grammar (cli/structured.c): *out stays NULL without either;
 * *compile_ms is the CPU time the schema conversion and compilation took. 0, or -1 after printing
 * a one-line error prefixed with "kvserve CMD". */
int cli_grammar(const cli_opts *o, const char *cmd, gr_grammar **out, double *compile_ms);

/* version.c: `kvserve --version`'s lines: the release and the commit (base/version.h), and the
 * backends built in. */
void cli_print_version(FILE *out);

#endif
