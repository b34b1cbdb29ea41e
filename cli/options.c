/*
 * options.c — the one table of kvserve's options: name, type, default, help and the subcommands
 * that take it. Flags, config files and --help all read this table, so a new option is one row.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "engine/engine.h"
#include "engine/spec.h"

enum opt_kind { O_STR, O_INT, O_I64, O_DBL, O_SIZE, O_FLAG };

typedef struct opt {
    const char *name;  /* long flag without "--", also the config-file key */
    char shrt;         /* short flag letter or 0 */
    int kind;
    size_t off;        /* offset in cli_opts */
    const char *def;   /* default as text (for help); NULL = none */
    const char *cmds;  /* space-separated subcommands that accept it, "*" = all */
    const char *help;
} opt;

#define OFF(f) offsetof(cli_opts, f)
#define ENGINE_CMDS "serve generate bench"

static const opt table[] = {
    {"model", 'm', O_STR, OFF(model), NULL, "serve generate bench info tokenize detokenize", "GGUF model file"},
    {"config", 0, O_STR, OFF(config), NULL, "serve bench generate", "config file of 'key = value' lines (keys are these option names)"},
    {"device", 0, O_STR, OFF(device), "auto", ENGINE_CMDS, "cpu, cuda or auto (CUDA when built and a GPU is visible)"},
    {"cuda-graphs", 0, O_STR, OFF(cuda_graphs), "on", ENGINE_CMDS, "CUDA graphs for decode steps: on or off (each decode batch size, padded to a power of two, is captured once and replayed)"},
    {"threads", 't', O_INT, OFF(threads), "cores", ENGINE_CMDS, "CPU backend threads (0 = one per core)"},
    {"kv-memory", 0, O_SIZE, OFF(kv_memory_bytes), "2GiB", ENGINE_CMDS " info", "KV cache budget on the CPU (e.g. 512MiB, 2GiB); info: the budget its capacity lines assume"},
    {"gpu-memory-utilization", 0, O_DBL, OFF(gpu_memory_utilization), "0.90", ENGINE_CMDS, "fraction of free GPU memory for weights and KV"},
    {"kv-dtype", 0, O_STR, OFF(kv_dtype), "f16", ENGINE_CMDS, "KV cache element type: f16, bf16, f32, int8 (a scale per token and kv head) or fp8 (e4m3)"},
    {"block-size", 0, O_INT, OFF(block_size), "16", ENGINE_CMDS " info", "tokens per KV block"},
    {"kv-window", 0, O_INT, OFF(kv_window), "0 (off)", "serve bench info", "attention sinks + window: a sequence keeps at most N KV entries (its first --kv-sinks tokens and its latest), constant memory, and may run past the context; info: its capacity lines count sequences at one window"},
    {"kv-sinks", 0, O_INT, OFF(kv_sinks), "4", "serve bench info", "with --kv-window: leading tokens always kept (rounded up to whole blocks)"},
    {"kv-host-memory", 0, O_SIZE, OFF(kv_host_memory_bytes), "0 (off)", "serve bench info", "second KV tier in host RAM (pinned on a GPU): evicted prefix blocks are copied there and loaded back instead of recomputed (e.g. 8GiB)"},
    {"kv-disk-dir", 0, O_STR, OFF(kv_disk_dir), NULL, "serve bench info", "second KV tier in files under DIR: prefix blocks are written behind and loaded back, also by a restarted server with the same model"},
    {"kv-disk-size", 0, O_SIZE, OFF(kv_disk_bytes), "half the free space, at most 64GiB", "serve bench info", "capacity of the --kv-disk-dir tier"},
    {"kv-disk-timeout", 0, O_DBL, OFF(kv_disk_timeout_s), "2", "serve bench", "seconds a --kv-disk-dir file operation may take: a load not done by then is recomputed, and a stuck disk stalls the tier (loads miss, writes are skipped) until it returns"},
    {"max-seqs", 0, O_INT, OFF(max_seqs), "64 cpu / 256 gpu", ENGINE_CMDS, "most sequences running at once"},
    {"max-batch-tokens", 0, O_INT, OFF(max_batch_tokens), "512 cpu / 2048 gpu", ENGINE_CMDS, "token budget of one engine step: decodes first, then prefill chunks of the prompts"},
    {"prefill-admit-tokens", 0, O_INT, OFF(prefill_admit_tokens), "64 cpu / off gpu", "serve bench", "admit no further prompt into a step that already holds this many prefill tokens (-1 = off)"},
    {"schedule", 0, O_STR, OFF(schedule), "fcfs", "serve bench", "admission order: fcfs or lpm (longest prefix match first, with aging)"},
    {"overlap", 0, O_STR, OFF(overlap), "auto", "serve bench", "overlapped steps: the next step is scheduled and launched before this one's tokens are applied (auto: on with a GPU, off on the CPU; on; off)"},
    {"speculative", 0, O_STR, OFF(speculative), "off", ENGINE_CMDS, "speculative decoding: ngram (prompt lookup: the tokens that followed the latest earlier occurrence of the last few tokens are verified in one step), draft (a smaller model's greedy guesses, --draft-model) or off; output is unchanged (docs/speculative.md)"},
    {"draft-model", 0, O_STR, OFF(draft_model), NULL, ENGINE_CMDS, "with --speculative draft: the draft model's GGUF file (the target's vocabulary), run on its own instance of the same device with a share of the KV budget"},
    {"num-speculative-tokens", 0, O_INT, OFF(num_speculative_tokens), "4", ENGINE_CMDS, "with --speculative: most draft tokens a sequence verifies per step (1 .. 16); each sequence adapts below it to its recent acceptance"},
    {"spec-ngram-min", 0, O_INT, OFF(spec_ngram_min), "2", ENGINE_CMDS, "with --speculative ngram: shortest suffix looked up"},
    {"spec-ngram-max", 0, O_INT, OFF(spec_ngram_max), "4", ENGINE_CMDS, "with --speculative ngram: longest suffix looked up (the longest that recurs wins)"},
    {"spec-disable-batch", 0, O_INT, OFF(spec_disable_batch), "3 cpu / 8 gpu", ENGINE_CMDS, "with --speculative: no drafts in a step where more sequences than this decode or soon will (running and admissible waiting; verification then costs more than it saves)"},
    {"no-prefix-cache", 0, O_FLAG, OFF(no_prefix_cache), NULL, "serve bench", "turn the radix prefix cache off"},
    {"host", 0, O_STR, OFF(host), "127.0.0.1", "serve", "address to listen on"},
    {"port", 0, O_INT, OFF(port), "8000", "serve", "TCP port"},
    {"api-key", 0, O_STR, OFF(api_key), NULL, "serve", "require 'Authorization: Bearer KEY' on /v1/* and the tokenizer routes"},
    {"served-model-name", 0, O_STR, OFF(served_model_name), "file name without .gguf", "serve", "model id reported and accepted"},
    {"chat-template", 0, O_STR, OFF(chat_template), "from the GGUF", "serve mkmodel", "serve: a built-in (chatml, llama2, llama3, mistral, zephyr, phi3, gemma, plain), @FILE or a Jinja text; mkmodel: a file stored as tokenizer.chat_template"},
    {"reasoning-parser", 0, O_STR, OFF(reasoning_parser), "none", "serve", "deepseek_r1 or qwen3: text in <think>…</think> goes to reasoning_content"},
    {"tool-call-parser", 0, O_STR, OFF(tool_call_parser), "auto", "serve", "tool-call syntax of the output: auto (from the template), hermes, llama3_json, mistral, deepseek_v3, kimi_k2, functionary, nemotron, command_r, apertus, seed_oss, minicpm, gemma4, lfm2, solar, dsml, hy3, kimi_k3, gigachat3, granite, atem, json or none"},
    {"max-queued-requests", 0, O_INT, OFF(max_queued_requests), "1024", "serve", "waiting requests beyond which 503 is returned"},
    {"max-queued-tokens", 0, O_I64, OFF(max_queued_tokens), "1000000", "serve", "waiting prompt tokens beyond which 503 is returned (a longer prompt alone: 400)"},
    {"max-model-len", 0, O_INT, OFF(max_model_len), "the model's context", "serve bench", "context limit in tokens: prompt + completion, reported as max_model_len (start-up fails if the KV budget cannot hold one sequence at it)"},
    {"allowed-origins", 0, O_STR, OFF(allowed_origins), "none (CORS off)", "serve", "CORS: comma-separated origins allowed to call the API from a browser, or *"},
    {"drain-timeout", 0, O_DBL, OFF(drain_timeout_s), "30", "serve", "seconds to finish in-flight requests on SIGTERM"},
    {"sse-ping-interval", 0, O_DBL, OFF(sse_ping_interval_s), "15", "serve", "seconds between ': ping' comments while a stream waits"},
    {"http-header-timeout", 0, O_DBL, OFF(http_header_timeout_s), "10", "serve", "seconds a request head may take from its first byte (a new connection: from accept); 408 and close beyond"},
    {"http-body-min-rate", 0, O_DBL, OFF(http_body_min_rate), "1024", "serve", "bytes/s a request body must keep up: it may take --http-header-timeout plus one second per this many bytes, 408 and close beyond (0 = no floor)"},
    {"http-keepalive-timeout", 0, O_DBL, OFF(http_keepalive_timeout_s), "5", "serve", "seconds a connection with nothing in flight stays open"},
    {"http-max-connections", 0, O_INT, OFF(http_max_connections), "4096", "serve", "open connections; a new one beyond closes the oldest idle or unfinished-head one (lowered to what the open-file limit holds)"},
    {"http-max-connections-per-client", 0, O_INT, OFF(http_max_per_client), "256", "serve", "open connections from one client address, enforced the same way (0 = no cap; behind a proxy every connection is the proxy's)"},
    {"http-reserved-connections", 0, O_INT, OFF(http_reserved_connections), "32", "serve", "connections beyond the limits for GET /health and /metrics only, when nothing can be closed to make room"},
    {"max-body", 0, O_SIZE, OFF(max_body_bytes), "16MiB", "serve", "largest request body accepted (413 beyond)"},
    {"pooling", 0, O_STR, OFF(pooling), "the model's pooling_type", "serve mkmodel", "serve: how /v1/embeddings pools hidden states (mean, cls or last; rank: /v1/rerank scores with the model's classification head, or the \"yes\"/\"no\" logits of its LM head), also for a generative model; mkmodel: the pooling_type written (rank adds a classification head)"},
    {"response-store", 0, O_INT, OFF(response_store), "1024", "serve", "/v1/responses kept for previous_response_id and GET (store: true), least recently used dropped first (0 = none kept)"},
    {"response-store-size", 0, O_SIZE, OFF(response_store_bytes), "64MiB", "serve", "bytes those stored responses may take in all"},
    {"grammar-cache", 0, O_INT, OFF(grammar_cache), "64", "serve", "compiled structured-output grammars kept, least recently used dropped first (0 = compile every request)"},
    {"prompt", 'p', O_STR, OFF(prompt), "\"\"", "generate", "prompt text"},
    {"n-predict", 'n', O_INT, OFF(n_predict), "128", "generate", "tokens to generate"},
    {"temperature", 0, O_DBL, OFF(temperature), "0.8", "generate", "sampling temperature (0 = greedy)"},
    {"top-p", 0, O_DBL, OFF(top_p), "1.0", "generate", "nucleus sampling mass"},
    {"top-k", 0, O_INT, OFF(top_k), "0", "generate", "keep the k most likely tokens (0 = off)"},
    {"min-p", 0, O_DBL, OFF(min_p), "0.0", "generate", "drop tokens below min-p × the top probability"},
    {"seed", 0, O_I64, OFF(seed), "random", "generate bench mkmodel", "sampling seed (mkmodel: weights seed, default 1234)"},
    {"ignore-eos", 0, O_FLAG, OFF(ignore_eos), NULL, "generate", "do not stop at end-of-generation tokens"},
    {"ids", 0, O_FLAG, OFF(ids), NULL, "generate", "print generated token ids instead of text"},
    {"json-schema", 0, O_STR, OFF(json_schema), NULL, "generate bench", "constrain the output to JSON valid for the schema in this file"},
    {"grammar", 0, O_STR, OFF(grammar_file), NULL, "generate bench", "constrain the output to the GBNF grammar in this file (start rule 'root')"},
    {"no-bos", 0, O_FLAG, OFF(no_bos), NULL, "tokenize", "add no special tokens"},
    {"special", 0, O_FLAG, OFF(special), NULL, "tokenize", "match control tokens written in the text"},
    {"requests", 0, O_INT, OFF(requests), "256", "bench", "number of requests"},
    {"input-len", 0, O_STR, OFF(input_len), "100:1024", "bench", "prompt length range MIN:MAX"},
    {"output-len", 0, O_STR, OFF(output_len), "100:1024", "bench", "output length range MIN:MAX"},
    {"shared-prefix", 0, O_INT, OFF(shared_prefix), "0", "bench", "every prompt starts with the same L tokens"},
    {"turns", 0, O_INT, OFF(turns), "0", "bench", "multi-turn mode: turns per conversation (each extends its history)"},
    {"json", 0, O_FLAG, OFF(json), NULL, "bench info", "print one JSON object last"},
    {"output", 'o', O_STR, OFF(output), NULL, "mkmodel", "output GGUF path"},
    {"dim", 0, O_INT, OFF(dim), "64", "mkmodel", "embedding size"},
    {"layers", 0, O_INT, OFF(layers), "2", "mkmodel", "transformer blocks"},
    {"heads", 0, O_INT, OFF(heads), "4", "mkmodel", "query heads"},
    {"kv-heads", 0, O_INT, OFF(kv_heads), "= heads", "mkmodel", "key/value heads"},
    {"ffn", 0, O_INT, OFF(ffn), "4 × dim", "mkmodel", "feed-forward size"},
    {"vocab", 0, O_INT, OFF(vocab), "512", "mkmodel", "vocabulary size (≥ 259)"},
    {"context", 0, O_INT, OFF(context), "2048", "mkmodel", "context length"},
    {"type", 0, O_STR, OFF(type), "f32", "mkmodel", "weight type: f32, f16, bf16 or q8_0"},
    {"arch", 0, O_STR, OFF(arch), "llama", "mkmodel", "architecture: llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe, deepseek2 or gpt-oss"},
    {"experts", 0, O_INT, OFF(experts), "8 (qwen3moe, deepseek2, gpt-oss), 0", "mkmodel", "experts per MoE layer (llama: > 0 makes it Mixtral-style); --ffn is each expert's width"},
    {"experts-used", 0, O_INT, OFF(experts_used), "2", "mkmodel", "experts each token is routed to (k)"},
    {"kv-lora", 0, O_INT, OFF(kv_lora), "4 × the head size", "mkmodel", "deepseek2: the MLA latent's rank (kv_lora_rank), what the KV cache holds per token and layer with the RoPE key"},
    {"q-lora", 0, O_INT, OFF(q_lora), "0 (plain attn_q)", "mkmodel", "deepseek2: the query's LoRA rank (q_lora_rank; DeepSeek-V3 has one, V2-Lite not)"},
    {"v-head", 0, O_INT, OFF(v_head), "the head size", "mkmodel", "deepseek2: the value head size (value_length_mla)"},
    {"shared-experts", 0, O_INT, OFF(shared_experts), "1", "mkmodel", "deepseek2: shared experts every token passes through"},
    {"dense-lead", 0, O_INT, OFF(dense_lead), "1", "mkmodel", "deepseek2: leading layers with a dense FFN instead of experts"},
    {"head-dim", 0, O_INT, OFF(head_dim), "dim / heads", "mkmodel", "head size (attention.key_length)"},
    {"rope-dims", 0, O_INT, OFF(rope_dims), "head size", "mkmodel", "rotated dims per head (less: partial RoPE, gemma/phi3)"},
    {"rope-base", 0, O_DBL, OFF(rope_base), "10000", "mkmodel", "rope.freq_base"},
    {"rope-base-swa", 0, O_DBL, OFF(rope_base_swa), "not written", "mkmodel", "gemma: rope.freq_base_swa of the sliding layers"},
    {"swa-window", 0, O_INT, OFF(swa_window), "not written (gpt-oss: 128)", "mkmodel", "gemma, gpt-oss: attention.sliding_window"},
    {"swa-pattern", 0, O_INT, OFF(swa_pattern), "not written", "mkmodel", "gemma: attention.sliding_window_pattern"},
    {"attn-softcap", 0, O_DBL, OFF(attn_softcap), "not written", "mkmodel", "gemma2: attn_logit_softcapping"},
    {"final-softcap", 0, O_DBL, OFF(final_softcap), "not written", "mkmodel", "gemma: final_logit_softcapping"},
    {"rope-scaling", 0, O_STR, OFF(rope_scaling), "not written", "mkmodel", "rope.scaling.type (linear, yarn, ...)"},
    {"rope-factor", 0, O_DBL, OFF(rope_factor), "not written", "mkmodel", "rope.scaling.factor"},
    {"rope-orig-ctx", 0, O_INT, OFF(rope_orig_ctx), "not written", "mkmodel", "rope.scaling.original_context_length"},
    {"rope-attn-factor", 0, O_DBL, OFF(rope_attn_factor), "not written", "mkmodel", "rope.scaling.attn_factor"},
    {"rope-freqs", 0, O_FLAG, OFF(rope_freqs), NULL, "mkmodel", "llama: write rope_freqs.weight (Llama 3.1 factors)"},
    {"fused-qkv", 0, O_FLAG, OFF(fused_qkv), NULL, "mkmodel", "one attn_qkv tensor instead of attn_q/k/v"},
    {"qkv-bias", 0, O_FLAG, OFF(qkv_bias), NULL, "mkmodel", "q/k/v biases (qwen2 always has them)"},
    {"tied", 0, O_FLAG, OFF(tied), NULL, "mkmodel", "no output.weight: the LM head is the embedding"},
    {"norm-std", 0, O_DBL, OFF(norm_std), "0", "mkmodel", "norm weights 1 + normal(0, this) instead of 1"},
    {"quiet-from", 0, O_INT, OFF(quiet_from), "0 (off)", "mkmodel", "layers from N on add little to the residual (attn_output and ffn_down scaled by --quiet-scale): with the same --seed, the model with N layers is its speculative draft"},
    {"quiet-scale", 0, O_DBL, OFF(quiet_scale), "0.05", "mkmodel", "with --quiet-from: the scale of those layers' output weights"},
    {"verbose", 'v', O_FLAG, OFF(verbose), NULL, "*", "more logging"},
    {"help", 'h', O_FLAG, OFF(help), NULL, "*", "this help"},
};

#define N_OPTS (sizeof table / sizeof table[0])

void cli_opts_default(cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = "auto";
    o->cuda_graphs = "on";
    o->kv_memory_bytes = (size_t)2 << 30;
    o->gpu_memory_utilization = 0.90;
    o->kv_dtype = "f16";
    o->block_size = 16;
    o->kv_sinks = 4;
    o->schedule = "fcfs";
    o->overlap = "auto";
    o->speculative = NULL; /* off; unset, so that --draft-model alone can turn the draft on */
    o->num_speculative_tokens = 4;
    o->spec_ngram_min = 2;
    o->spec_ngram_max = 4;
    o->spec_disable_batch = 0; /* the device's */
    o->host = "127.0.0.1";
    o->port = 8000;
    o->max_queued_requests = 1024;
    o->max_queued_tokens = 1000000;
    o->drain_timeout_s = 30;
    o->sse_ping_interval_s = 15;
    o->max_body_bytes = (size_t)16 << 20;
    o->http_header_timeout_s = 10;
    o->http_body_min_rate = 1024;
    o->http_keepalive_timeout_s = 5;
    o->http_max_connections = 4096;
    o->http_max_per_client = 256;
    o->http_reserved_connections = 32;
    o->kv_disk_timeout_s = 2;
    o->grammar_cache = 64;
    o->response_store = 1024;
    o->response_store_bytes = (size_t)64 << 20;
    o->prompt = "";
    o->n_predict = 128;
    o->temperature = 0.8;
    o->top_p = 1.0;
    o->seed = -1;
    o->requests = 256;
    o->input_len = "100:1024";
    o->output_len = "100:1024";
    o->dim = 64;
    o->layers = 2;
    o->heads = 4;
    o->vocab = 512;
    o->context = 2048;
    o->type = "f32";
    o->arch = "llama";
    o->swa_pattern = -1;
}

static int accepts(const opt *p, const char *cmd)
{
    if (!strcmp(p->cmds, "*")) return 1;
    size_t n = strlen(cmd);
    for (const char *s = p->cmds; (s = strstr(s, cmd)); s += n)
        if ((s == p->cmds || s[-1] == ' ') && (s[n] == ' ' || s[n] == 0)) return 1;
    return 0;
}

int cli_spec_config(const cli_opts *o, engine_config *c)
{
    if (spec_method_parse(o->speculative ? o->speculative : "off", &c->spec_method)) return -EINVAL;
    c->spec_k = o->num_speculative_tokens;
    c->spec_ngram_min = o->spec_ngram_min;
    c->spec_ngram_max = o->spec_ngram_max;
    c->spec_disable_batch = o->spec_disable_batch;
    c->spec_draft_model = o->draft_model && *o->draft_model ? o->draft_model : NULL;
    /* --draft-model alone means draft; an explicit --speculative off keeps it off */
    if (c->spec_draft_model && !o->speculative) c->spec_method = SPEC_DRAFT;
    return 0;
}

int cli_overlap_parse(const char *s)
{
    if (!s || !strcmp(s, "auto")) return ENGINE_OVERLAP_AUTO;
    if (!strcmp(s, "on")) return ENGINE_OVERLAP_ON;
    if (!strcmp(s, "off")) return ENGINE_OVERLAP_OFF;
    return -1;
}

int cli_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || v < 0) return -EINVAL;
    while (*end == ' ') end++;
    double mul = 1;
    if (*end) {
        char u = (char)(*end | 0x20);
        const char *rest = end + 1;
        int bin = 0;
        if (*rest == 'i' || *rest == 'I') {
            bin = 1;
            rest++;
        }
        if (*rest == 'b' || *rest == 'B') rest++;
        if (*rest) return -EINVAL;
        double k = bin ? 1024.0 : 1000.0;
        if (u == 'k') mul = k;
        else if (u == 'm') mul = k * k;
        else if (u == 'g') mul = k * k * k;
        else if (u == 't') mul = k * k * k * k;
        else if (u == 'b' && !bin && end[1] == 0) mul = 1;
        else return -EINVAL;
    }
    double bytes = v * mul;
    if (bytes > 9.0e18) return -EINVAL;
    *out = (size_t)bytes;
    return 0;
}

/* Stores text as the value of option p. 0 or -EINVAL with a message. */
static int set_value(const opt *p, const char *val, cli_opts *o, const char *where)
{
    char *base = (char *)o + p->off;
    char *end;
    errno = 0;
    switch (p->kind) {
    case O_STR:
        *(const char **)base = val;
        return 0;
    case O_FLAG:
        if (!val || !strcasecmp(val, "true") || !strcmp(val, "1") || !strcasecmp(val, "yes")) {
            *(int *)base = 1;
            return 0;
        }
        if (!strcasecmp(val, "false") || !strcmp(val, "0") || !strcasecmp(val, "no")) {
            *(int *)base = 0;
            return 0;
        }
        break;
    case O_INT: {
        long v = strtol(val, &end, 10);
        if (end != val && !*end && !errno && v >= -2147483647L && v <= 2147483647L) {
            *(int *)base = (int)v;
            return 0;
        }
        break;
    }
    case O_I64: {
        long long v = strtoll(val, &end, 10);
        if (end != val && !*end && !errno) {
            *(int64_t *)base = v;
            return 0;
        }
        break;
    }
    case O_DBL: {
        double v = strtod(val, &end);
        if (end != val && !*end && !errno) {
            *(double *)base = v;
            return 0;
        }
        break;
    }
    case O_SIZE:
        if (!cli_parse_size(val, (size_t *)base)) return 0;
        break;
    }
    fprintf(stderr, "kvserve: %s: bad value '%s' for %s\n", where, val ? val : "", p->name);
    return -EINVAL;
}

static const opt *find_long(const char *name, size_t len)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (strlen(table[i].name) == len && !strncmp(table[i].name, name, len)) return &table[i];
    return NULL;
}

/* The config file's lines are kept for the life of the process: option strings point into them. */
int cli_load_config(const char *cmd, const char *path, cli_opts *o)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kvserve: cannot open config file %s: %s\n", path, strerror(errno));
        return -EIO;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '#' || *s == '\n' || *s == 0) continue;
        char *eq = strchr(s, '=');
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if (!eq) {
            fprintf(stderr, "kvserve: %s: expected 'key = value'\n", where);
            rc = -EINVAL;
            break;
        }
        char *ke = eq;
        while (ke > s && (ke[-1] == ' ' || ke[-1] == '\t')) ke--;
        char *v = eq + 1;
        while (*v == ' ' || *v == '\t') v++;
        char *ve = v + strlen(v);
        while (ve > v && (ve[-1] == '\n' || ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        *ve = 0;
        if (ve - v >= 2 && (*v == '"' || *v == '\'') && ve[-1] == *v) {
            ve[-1] = 0;
            v++;
        }
        const opt *p = find_long(s, (size_t)(ke - s));
        if (!p || !strcmp(p->name, "config") || !strcmp(p->name, "help")) {
            fprintf(stderr, "kvserve: %s: unknown key '%.*s'\n", where, (int)(ke - s), s);
            rc = -EINVAL;
            break;
        }
        if (!accepts(p, cmd)) continue; /* a key for another subcommand: ignored */
        char *val = strdup(v);
        char **grown = val ? realloc(o->owned, (size_t)(o->n_owned + 1) * sizeof *grown) : NULL;
        if (!grown) {
            free(val);
            rc = -ENOMEM;
            break;
        }
        o->owned = grown;
        o->owned[o->n_owned++] = val;
        if ((rc = set_value(p, val, o, where))) break;
    }
    fclose(f);
    return rc;
}

void cli_opts_fini(cli_opts *o)
{
    for (int i = 0; i < o->n_owned; i++) free(o->owned[i]);
    free(o->owned);
    free(o->args);
    o->owned = NULL;
    o->args = NULL;
    o->n_owned = o->n_args = 0;
}

int cli_parse(const char *cmd, int argc, char **argv, int first, cli_opts *o)
{
    /* The config file goes first so that flags override it. */
    for (int i = first; i < argc - 1; i++)
        if (!strcmp(argv[i], "--config")) {
            int rc = cli_load_config(cmd, argv[i + 1], o);
            if (rc) return rc;
        }
    o->args = calloc((size_t)argc + 1, sizeof(char *));
    if (!o->args) return -ENOMEM;
    int only_args = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (only_args || a[0] != '-' || a[1] == 0) {
            o->args[o->n_args++] = argv[i];
            continue;
        }
        if (!strcmp(a, "--")) {
            only_args = 1;
            continue;
        }
        const opt *p = NULL;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            p = find_long(name, eq ? (size_t)(eq - name) : strlen(name));
            if (eq) val = eq + 1;
        } else if (a[2] == 0) {
            for (size_t k = 0; k < N_OPTS; k++)
                if (table[k].shrt == a[1]) p = &table[k];
        }
        if (!p || !accepts(p, cmd)) {
            fprintf(stderr, "kvserve %s: unknown option '%s' (see kvserve %s --help)\n", cmd, a, cmd);
            return -EINVAL;
        }
        if (p->kind != O_FLAG && !val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kvserve %s: option '%s' needs a value\n", cmd, a);
                return -EINVAL;
            }
            val = argv[++i];
        }
        if (set_value(p, val, o, "command line")) return -EINVAL;
    }
    return 0;
}

void cli_print_help(const char *cmd)
{
    printf("usage: kvserve %s [OPTIONS]%s\n\noptions:\n", cmd,
           !strcmp(cmd, "tokenize") ? " [TEXT]" : !strcmp(cmd, "detokenize") ? " ID..." : "");
    static const char *kinds[] = {"STR", "N", "N", "X", "SIZE", ""};
    for (size_t i = 0; i < N_OPTS; i++) {
        const opt *p = &table[i];
        if (!accepts(p, cmd)) continue;
        char flag[64];
        if (p->shrt)
            snprintf(flag, sizeof flag, "-%c, --%s %s", p->shrt, p->name, kinds[p->kind]);
        else
            snprintf(flag, sizeof flag, "    --%s %s", p->name, kinds[p->kind]);
        printf("  %-36s %s", flag, p->help);
        if (p->def) printf(" [default: %s]", p->def);
        printf("\n");
    }
}
