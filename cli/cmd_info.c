/*
 * cmd_info.c — `kvserve info -m MODEL.gguf [--json]`: what a GGUF file holds (format, architecture,
 * hyperparameters, tensor types, vocabulary, chat template) and the KV memory formula in numbers:
 *
 *   KV bytes per token = 2 × n_layers × n_kv_heads × (head_dim × bytes per value [+ scale])
 *
 * for every KV dtype kvserve offers, with what a --kv-memory budget (default 2 GiB) holds in
 * tokens and in sequences at the training context, and split by layer type (global and
 * sliding-window layers), with the architecture's features (model_features). A file that does
 * not open (truncated, corrupt) is one line on
 * stderr and exit 1. Vocabulary-only files and unsupported architectures print what they can
 * (format and vocabulary) and exit 0; a supported model whose tensors do not bind exits 1.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "cache/kv.h"
#include "cache/tier.h"
#include "cli/cli.h"
#include "model/chat.h"
#include "model/dtype.h"
#include "model/gguf.h"
#include "jinja/jinja.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "server/toolcall/toolcall.h"

#define INFO_N_TYPES DT_N_TYPES /* GGML type numbers counted per type */

/* What info gathers before printing it as text or JSON. */
typedef struct info_data {
    const char *path;
    const gguf_file *f;
    const model *m;             /* NULL when the file holds no loadable model */
    char why_no_model[512];     /* when m is NULL */
    char arch[64];
    int n_of_type[INFO_N_TYPES];
    uint64_t bytes_of_type[INFO_N_TYPES];
    uint64_t elems_of_type[INFO_N_TYPES];
    uint64_t tensor_bytes;
    char vocab_model[64];       /* tokenizer.ggml.model, "" when absent */
    int64_t n_vocab;            /* tokens in tokenizer.ggml.tokens, -1 when absent */
    int64_t bos, eos;           /* -1 when absent */
    char bos_piece[64], eos_piece[64];
    int has_template;
    uint64_t template_bytes;
    char template_first_line[81];
    const char *template_name;  /* detected or fallback template name */
    char template_error[512];   /* "" when the template compiles */
    const char *tool_syntax;    /* the tool-call syntax the template teaches */
    size_t kv_budget;           /* --kv-memory: the budget the capacity lines assume */
    size_t tier_host;           /* --kv-host-memory: the second tier's capacity lines assume */
    size_t tier_disk;           /* --kv-disk-size, or the default for --kv-disk-dir (or its upper bound) */
    int block_size;             /* --block-size */
    int kv_window, kv_sinks;    /* --kv-window (0: off), --kv-sinks: capacity at one window */
} info_data;

static int64_t info_token_id(const gguf_file *f, const char *key)
{
    int64_t v;
    return gguf_get_i64(f, key, &v) ? -1 : v;
}

static void info_piece(const gguf_file *f, int64_t id, char *buf, size_t n)
{
    const gguf_arr *a;
    buf[0] = 0;
    if (id < 0 || gguf_get_arr(f, "tokenizer.ggml.tokens", &a) || a->type != GGUF_T_STRING ||
        (uint64_t)id >= a->n)
        return;
    gguf_str_copy(a->strs[id], buf, n);
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
}

static void info_vocab(info_data *d)
{
    const gguf_file *f = d->f;
    gguf_str s;
    const gguf_arr *a;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &s))
        gguf_str_copy(s, d->vocab_model, sizeof d->vocab_model);
    d->n_vocab = gguf_get_arr(f, "tokenizer.ggml.tokens", &a) ? -1 : (int64_t)a->n;
    d->bos = info_token_id(f, "tokenizer.ggml.bos_token_id");
    d->eos = info_token_id(f, "tokenizer.ggml.eos_token_id");
    info_piece(f, d->bos, d->bos_piece, sizeof d->bos_piece);
    info_piece(f, d->eos, d->eos_piece, sizeof d->eos_piece);
    char *jinja = NULL;
    if (!gguf_get_str(f, "tokenizer.chat_template", &s)) {
        d->has_template = 1;
        d->template_bytes = s.len;
        size_t n = 0;
        while (n < s.len && n < sizeof d->template_first_line - 1 && s.ptr[n] != '\n') n++;
        memcpy(d->template_first_line, s.ptr, n);
        d->template_first_line[n] = 0;
        jinja = malloc(s.len + 1);
        if (jinja) gguf_str_copy(s, jinja, s.len + 1);
    }
    char err[256];
    tokenizer *tok = d->n_vocab > 0 ? tok_create(f, err, sizeof err) : NULL;
    d->template_name = chat_template_name(chat_template_detect(jinja, tok));
    d->tool_syntax = tc_syntax_name(tc_syntax_detect(jinja));
    if (jinja) {
        jinja_error je;
        jinja_tmpl *t = jinja_compile(jinja, strlen(jinja), &je);
        if (!t) jinja_error_format(&je, d->template_error, sizeof d->template_error);
        jinja_tmpl_destroy(t);
    }
    tok_destroy(tok);
    free(jinja);
}

static void info_gather(info_data *d)
{
    gguf_str s;
    if (!gguf_get_str(d->f, "general.architecture", &s)) gguf_str_copy(s, d->arch, sizeof d->arch);
    for (char *c = d->arch; *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
    for (int64_t i = 0; i < gguf_n_tensors(d->f); i++) {
        const gguf_tensor *t = gguf_tensor_at(d->f, i);
        if (t->type >= 0 && t->type < INFO_N_TYPES) {
            d->n_of_type[t->type]++;
            d->bytes_of_type[t->type] += t->n_bytes;
            int64_t n = 1;
            for (int k = 0; k < 4; k++) n *= t->ne[k] > 0 ? t->ne[k] : 1;
            d->elems_of_type[t->type] += (uint64_t)n;
        }
        d->tensor_bytes += t->n_bytes;
    }
    info_vocab(d);
}

/* The experts line: how many, how wide, how many per token, and the active parameters. */
static void info_print_moe(const model *m)
{
    const model_hparams *hp = &m->hp;
    if (!hp->n_expert) return;
    size_t all = model_weight_elems(m), active = model_active_elems(m);
    printf("experts:        %d routed experts of width %d, %d used per token", hp->n_expert, hp->n_ff_exp,
           hp->n_expert_used);
    if (hp->n_ff_shexp) printf(", %d shared (one SwiGLU of width %d)", hp->n_expert_shared, hp->n_ff_shexp);
    if (hp->n_layer_dense_lead) printf(", the first %d layer%s dense", hp->n_layer_dense_lead,
                                       hp->n_layer_dense_lead > 1 ? "s" : "");
    printf("; active parameters per token %zu of %zu (%.1f%%: k of the routed experts, the embedding table not at all)\n", active, all,
           100.0 * (double)active / (double)all);
}

/* The KV geometry of hp with dtype, block_size and, with window > 0, sinks + window on every layer. */
static void info_kv_geom(const model_hparams *hp, int dtype, int block_size, int window, int sinks, kv_geom *g)
{
    *g = model_kv_geom(hp, block_size > 0 ? block_size : 16, dtype);
    if (window > 0) g->rule[0] = (kv_rule){KV_KEEP_SINKS, window, sinks};
}

/* What the capacity lines assume a sequence holds: "context N" or "a window of N (S sinks)". */
static void info_seq_what(const info_data *d, int n_ctx, char *buf, size_t len)
{
    if (d->kv_window > 0) {
        kv_rule r = {KV_KEEP_SINKS, d->kv_window, d->kv_sinks};
        snprintf(buf, len, "a window of %d (%d sinks)", d->kv_window, kv_sink_blocks(&r, d->block_size) * d->block_size);
    } else {
        snprintf(buf, len, "context %d", n_ctx);
    }
}

static const int info_kv_dtypes[] = {KV_F32, KV_F16, KV_BF16, KV_I8, KV_FP8};
#define INFO_N_KV (sizeof info_kv_dtypes / sizeof info_kv_dtypes[0])

/* What a KV budget holds in geometry g: tokens (whole blocks) and sequences at full context (or
 * at one window under g's sinks + window rule). */
static void info_capacity(const kv_geom *g, size_t budget, int n_ctx, int64_t *tokens, int64_t *seqs)
{
    int64_t blocks = kv_blocks_for_budget(g, budget);
    int64_t per_seq = n_ctx > 0 ? kv_group_seq_blocks(g, 0, n_ctx, 0) : 0;
    *tokens = blocks * g->block_size;
    *seqs = per_seq ? blocks / per_seq : 0;
}

/* What the second KV tier holds in geometry g: blocks (and so tokens) of each level. */
static void info_tier_blocks(const info_data *d, const kv_geom *g, int64_t *host, int64_t *disk)
{
    size_t bb = kv_bytes_per_block(g);
    *host = bb ? (int64_t)(d->tier_host / bb) : 0;
    *disk = (int64_t)(d->tier_disk / tier_file_bytes(bb, g->block_size));
}

static void info_print_tier(const info_data *d, const model_hparams *hp)
{
    printf("second KV tier: --kv-host-memory %zu bytes, disk %zu bytes (a file per block: the block and a %zu-byte "
           "header), blocks of %d tokens\n", d->tier_host, d->tier_disk, tier_file_bytes(0, d->block_size),
           d->block_size);
    for (size_t i = 0; i < INFO_N_KV; i++) {
        kv_geom g;
        char name[16];
        int64_t host, disk;
        info_kv_geom(hp, info_kv_dtypes[i], d->block_size, d->kv_window, d->kv_sinks, &g);
        info_tier_blocks(d, &g, &host, &disk);
        snprintf(name, sizeof name, "(%s):", kv_dtype_name(g.dtype));
        printf("  tier capacity %-7s host %lld blocks = %lld tokens; disk %lld files = %lld tokens\n", name,
               (long long)host, (long long)host * g.block_size, (long long)disk, (long long)disk * g.block_size);
    }
}

static void info_print_text(const info_data *d)
{
    const gguf_file *f = d->f;
    printf("file:           %s (%llu bytes)\n", d->path, (unsigned long long)gguf_file_size(f));
    printf("gguf:           version %u, %lld keys, %lld tensors, alignment %llu, data at byte %llu\n",
           gguf_version(f), (long long)gguf_n_kv(f), (long long)gguf_n_tensors(f),
           (unsigned long long)gguf_alignment(f), (unsigned long long)gguf_data_offset(f));
    printf("architecture:   %s\n", d->arch[0] ? d->arch : "(none)");
    if (d->m) {
        const model_hparams *hp = &d->m->hp;
        printf("name:           %s\n", hp->name[0] ? hp->name : "(none)");
        printf("hparams:        n_embd %d, n_layers %d, n_heads %d, n_kv_heads %d, head_dim %d, "
               "n_ff %d, n_vocab %d, n_ctx_train %d\n", hp->n_embd, hp->n_layers, hp->n_heads,
               hp->n_kv_heads, hp->head_dim, hp->n_ff, hp->n_vocab, hp->n_ctx_train);
        printf("rope:           %d dims, base %g, %s, scaling %s", hp->rope_dims, (double)hp->rope_base,
               hp->rope_neox ? "NEOX (rotate halves)" : "adjacent pairs",
               hp->rope_freq_scale == 1.0f && hp->rope_scaling != MODEL_ROPE_SCALING_YARN
                   ? "none" : model_rope_scaling_name(hp->rope_scaling));
        if (hp->rope_freq_scale != 1.0f) printf(" x%g", (double)(1.0f / hp->rope_freq_scale));
        printf("%s\n", hp->has_rope_freqs ? ", rope_freqs.weight" : "");
        char feats[512];
        printf("features:       %s\n", model_features(hp, feats, sizeof feats));
        printf("rms_eps:        %g\n", (double)hp->rms_eps);
        printf("output:         %s\n", hp->tied_output ? "tied to token_embd.weight"
                                                       : "separate output.weight");
    } else {
        /* the message starts with the file name, already printed above */
        const char *why = d->why_no_model;
        size_t n = strlen(d->path);
        if (!strncmp(why, d->path, n) && !strncmp(why + n, ": ", 2)) why += n + 2;
        printf("model:          not loadable: %s\n", why);
    }
    printf("tensors:        %lld, %llu bytes", (long long)gguf_n_tensors(f),
           (unsigned long long)d->tensor_bytes);
    const char *sep = " (";
    for (int t = 0; t < INFO_N_TYPES; t++)
        if (d->n_of_type[t]) {
            printf("%s%s: %d, %llu bytes, %.4g bits per weight", sep, dt_name(t), d->n_of_type[t],
                   (unsigned long long)d->bytes_of_type[t], dt_bits_per_weight(t));
            sep = "; ";
        }
    printf("%s\n", gguf_n_tensors(f) ? ")" : "");
    if (d->n_vocab >= 0)
        printf("vocabulary:     %s, %lld tokens, bos %lld '%s', eos %lld '%s'\n",
               d->vocab_model[0] ? d->vocab_model : "(unknown model)", (long long)d->n_vocab,
               (long long)d->bos, d->bos_piece, (long long)d->eos, d->eos_piece);
    else
        printf("vocabulary:     none\n");
    if (d->has_template)
        printf("chat template:  %llu bytes of Jinja, %s%s; tool calls read as %s; resembles %s; first "
               "line: %s\n",
               (unsigned long long)d->template_bytes, d->template_error[0] ? "does not compile: " : "compiles",
               d->template_error, d->tool_syntax, d->template_name, d->template_first_line);
    else
        printf("chat template:  none in the file (fallback: %s)\n", d->template_name);
    if (!d->m) return;
    const model_hparams *hp = &d->m->hp;
    printf("weights:        %zu bytes, %.3f bits per weight; resident after load: %zu bytes (kept as "
           "stored, quantised types included)\n", model_weight_bytes(d->m),
           8.0 * (double)model_weight_bytes(d->m) / (double)model_weight_elems(d->m),
           model_weight_bytes(d->m));
    info_print_moe(d->m);
    if (hp->mla)
        printf("KV cache:       bytes per token = n_layers × (kv_lora_rank + qk_rope) × bytes per value (+ a %d-byte "
               "scale for int8/fp8): one latent vector per token and layer; capacity of --kv-memory %zu bytes in "
               "blocks of %d tokens\n", KV_SCALE_BYTES, d->kv_budget, d->block_size);
    else
        printf("KV cache:       bytes per token = 2 × n_layers × n_kv_heads × (head_dim × bytes per value"
               " + a %d-byte scale for int8/fp8); capacity of --kv-memory %zu bytes in blocks of %d tokens\n",
               KV_SCALE_BYTES, d->kv_budget, d->block_size);
    char at[64];
    info_seq_what(d, hp->n_ctx_train, at, sizeof at);
    for (size_t i = 0; i < INFO_N_KV; i++) {
        kv_geom g;
        char formula[128], name[16];
        int64_t tokens, seqs;
        info_kv_geom(hp, info_kv_dtypes[i], d->block_size, d->kv_window, d->kv_sinks, &g);
        kv_formula(&g, 0, formula, sizeof formula);
        info_capacity(&g, d->kv_budget, hp->n_ctx_train, &tokens, &seqs);
        snprintf(name, sizeof name, "(%s):", kv_dtype_name(g.dtype));
        printf("  KV bytes per token %-7s %s = %zu; %lld tokens, %lld sequences at %s\n", name, formula,
               kv_bytes_per_token(&g), (long long)tokens, (long long)seqs, at);
    }
    kv_geom g;
    info_kv_geom(hp, KV_F16, d->block_size, 0, 0, &g);
    printf("  at the training context (%d tokens), f16: %zu bytes per sequence\n", hp->n_ctx_train,
           kv_bytes_per_token(&g) * (size_t)hp->n_ctx_train);
    char by_type[512];
    printf("  by layer type (f16): %s\n", model_kv_by_layer_type(hp, kv_vec_bytes(&g), by_type, sizeof by_type));
    if (hp->mla) {
        size_t mha = (size_t)hp->n_layers * (size_t)model_mha_kv_values(hp) * 2;
        printf("MLA latent:     %d latent + %d RoPE key = %d values per token and layer, %zu bytes/token at f16; "
               "plain multi-head attention would keep %d heads × (%d + %d key + %d value) = %d values, %zu "
               "bytes/token: %.1f× more\n", hp->kv_lora_rank, hp->rope_dims, hp->head_dim, kv_bytes_per_token(&g),
               hp->n_heads, hp->qk_nope, hp->rope_dims, hp->v_head_dim, model_mha_kv_values(hp), mha,
               (double)mha / (double)kv_bytes_per_token(&g));
    }
    info_print_tier(d, hp);
}

static int info_print_json(const info_data *d)
{
    const gguf_file *f = d->f;
    cJSON *o = cJSON_CreateObject();
    if (!o) return -ENOMEM;
    cJSON_AddStringToObject(o, "file", d->path);
    cJSON_AddNumberToObject(o, "file_bytes", (double)gguf_file_size(f));
    cJSON_AddNumberToObject(o, "gguf_version", gguf_version(f));
    cJSON_AddNumberToObject(o, "n_kv", (double)gguf_n_kv(f));
    cJSON_AddNumberToObject(o, "n_tensors", (double)gguf_n_tensors(f));
    cJSON_AddNumberToObject(o, "alignment", (double)gguf_alignment(f));
    cJSON_AddNumberToObject(o, "data_offset", (double)gguf_data_offset(f));
    cJSON_AddStringToObject(o, "architecture", d->arch);
    cJSON *types = cJSON_AddObjectToObject(o, "tensor_types");
    for (int t = 0; t < INFO_N_TYPES && types; t++)
        if (d->n_of_type[t]) {
            cJSON *e = cJSON_AddObjectToObject(types, dt_name(t));
            cJSON_AddNumberToObject(e, "count", d->n_of_type[t]);
            cJSON_AddNumberToObject(e, "bytes", (double)d->bytes_of_type[t]);
            cJSON_AddNumberToObject(e, "elements", (double)d->elems_of_type[t]);
            cJSON_AddNumberToObject(e, "bits_per_weight", dt_bits_per_weight(t));
        }
    cJSON_AddNumberToObject(o, "tensor_bytes", (double)d->tensor_bytes);
    cJSON *v = cJSON_AddObjectToObject(o, "vocabulary");
    cJSON_AddStringToObject(v, "model", d->vocab_model);
    cJSON_AddNumberToObject(v, "size", (double)d->n_vocab);
    cJSON_AddNumberToObject(v, "bos", (double)d->bos);
    cJSON_AddNumberToObject(v, "eos", (double)d->eos);
    cJSON *ct = cJSON_AddObjectToObject(o, "chat_template");
    cJSON_AddBoolToObject(ct, "present", d->has_template);
    cJSON_AddNumberToObject(ct, "bytes", (double)d->template_bytes);
    cJSON_AddStringToObject(ct, "detected", d->template_name ? d->template_name : "");
    cJSON_AddBoolToObject(ct, "compiles", d->has_template && !d->template_error[0]);
    if (d->template_error[0]) cJSON_AddStringToObject(ct, "error", d->template_error);
    if (d->has_template) cJSON_AddStringToObject(ct, "tool_call_parser", d->tool_syntax);
    if (d->m) {
        const model_hparams *hp = &d->m->hp;
        cJSON_AddStringToObject(o, "name", hp->name);
        cJSON *h = cJSON_AddObjectToObject(o, "hparams");
        cJSON_AddNumberToObject(h, "n_embd", hp->n_embd);
        cJSON_AddNumberToObject(h, "n_layers", hp->n_layers);
        cJSON_AddNumberToObject(h, "n_heads", hp->n_heads);
        cJSON_AddNumberToObject(h, "n_kv_heads", hp->n_kv_heads);
        cJSON_AddNumberToObject(h, "head_dim", hp->head_dim);
        cJSON_AddNumberToObject(h, "n_ff", hp->n_ff);
        cJSON_AddNumberToObject(h, "n_vocab", hp->n_vocab);
        cJSON_AddNumberToObject(h, "n_ctx_train", hp->n_ctx_train);
        cJSON_AddNumberToObject(h, "rope_dims", hp->rope_dims);
        cJSON_AddNumberToObject(h, "rope_base", hp->rope_base);
        cJSON_AddBoolToObject(h, "rope_neox", hp->rope_neox);
        cJSON_AddNumberToObject(h, "rms_eps", hp->rms_eps);
        cJSON_AddBoolToObject(h, "tied_output", hp->tied_output);
        cJSON_AddStringToObject(h, "rope_scaling", model_rope_scaling_name(hp->rope_scaling));
        cJSON_AddNumberToObject(h, "rope_freq_scale", hp->rope_freq_scale);
        cJSON_AddBoolToObject(h, "rope_freqs", hp->has_rope_freqs);
        cJSON_AddNumberToObject(h, "sliding_window", hp->swa_window);
        cJSON_AddNumberToObject(h, "sliding_window_layers", model_n_swa_layers(hp));
        cJSON_AddNumberToObject(h, "attn_softcap", hp->attn_softcap);
        cJSON_AddNumberToObject(h, "final_softcap", hp->final_softcap);
        cJSON_AddNumberToObject(h, "n_expert", hp->n_expert);
        cJSON_AddNumberToObject(h, "n_expert_used", hp->n_expert_used);
        cJSON_AddNumberToObject(h, "n_ff_exp", hp->n_ff_exp);
        cJSON_AddNumberToObject(h, "n_expert_shared", hp->n_expert_shared);
        cJSON_AddNumberToObject(h, "n_layer_dense_lead", hp->n_layer_dense_lead);
        cJSON_AddBoolToObject(h, "mla", hp->mla);
        cJSON_AddNumberToObject(h, "kv_lora_rank", hp->kv_lora_rank);
        cJSON_AddNumberToObject(h, "q_lora_rank", hp->q_lora_rank);
        cJSON_AddNumberToObject(h, "v_head_dim", hp->v_head_dim);
        cJSON_AddBoolToObject(h, "attn_sinks", hp->attn_sinks);
        cJSON_AddNumberToObject(o, "active_params", (double)model_active_elems(d->m));
        cJSON_AddNumberToObject(o, "kv_values_per_token_layer", hp->mla ? hp->head_dim : 2 * hp->n_kv_heads * hp->head_dim);
        cJSON_AddNumberToObject(o, "mha_kv_values_per_token_layer", model_mha_kv_values(hp));
        char feats[512];
        cJSON_AddStringToObject(o, "features", model_features(hp, feats, sizeof feats));
        cJSON_AddNumberToObject(o, "weight_bytes", (double)model_weight_bytes(d->m));
        cJSON_AddNumberToObject(o, "weight_bits_per_weight",
                                8.0 * (double)model_weight_bytes(d->m) / (double)model_weight_elems(d->m));
        cJSON_AddNumberToObject(o, "weight_resident_bytes", (double)model_weight_bytes(d->m));
        cJSON *kv = cJSON_AddObjectToObject(o, "kv_bytes_per_token");
        cJSON *cap = cJSON_AddObjectToObject(o, "kv_capacity");
        cJSON_AddNumberToObject(cap, "kv_memory_bytes", (double)d->kv_budget);
        cJSON_AddNumberToObject(cap, "block_size", d->block_size);
        if (d->kv_window > 0) {
            cJSON_AddNumberToObject(cap, "kv_window", d->kv_window);
            cJSON_AddNumberToObject(cap, "kv_sinks", d->kv_sinks);
        }
        for (size_t i = 0; i < INFO_N_KV; i++) {
            kv_geom g;
            int64_t tokens, seqs;
            info_kv_geom(hp, info_kv_dtypes[i], d->block_size, d->kv_window, d->kv_sinks, &g);
            info_capacity(&g, d->kv_budget, hp->n_ctx_train, &tokens, &seqs);
            cJSON_AddNumberToObject(kv, kv_dtype_name(g.dtype), (double)kv_bytes_per_token(&g));
            cJSON *c = cJSON_AddObjectToObject(cap, kv_dtype_name(g.dtype));
            cJSON_AddNumberToObject(c, "tokens", (double)tokens);
            cJSON_AddNumberToObject(c, d->kv_window > 0 ? "sequences_at_window" : "sequences_at_context", (double)seqs);
            if (d->kv_window > 0) { /* and at full context, as without the window */
                info_kv_geom(hp, info_kv_dtypes[i], d->block_size, 0, 0, &g);
                info_capacity(&g, d->kv_budget, hp->n_ctx_train, &tokens, &seqs);
                cJSON_AddNumberToObject(c, "sequences_at_context", (double)seqs);
            }
        }
        cJSON *tc = cJSON_AddObjectToObject(o, "kv_tier_capacity");
        cJSON_AddNumberToObject(tc, "host_bytes", (double)d->tier_host);
        cJSON_AddNumberToObject(tc, "disk_bytes", (double)d->tier_disk);
        cJSON_AddNumberToObject(tc, "block_size", d->block_size);
        for (size_t i = 0; i < INFO_N_KV; i++) {
            kv_geom g;
            int64_t host, disk;
            info_kv_geom(hp, info_kv_dtypes[i], d->block_size, d->kv_window, d->kv_sinks, &g);
            info_tier_blocks(d, &g, &host, &disk);
            cJSON *c = cJSON_AddObjectToObject(tc, kv_dtype_name(g.dtype));
            cJSON_AddNumberToObject(c, "file_bytes", (double)tier_file_bytes(kv_bytes_per_block(&g), g.block_size));
            cJSON_AddNumberToObject(c, "host_tokens", (double)host * g.block_size);
            cJSON_AddNumberToObject(c, "disk_tokens", (double)disk * g.block_size);
        }
    } else {
        cJSON_AddStringToObject(o, "model_error", d->why_no_model);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return -ENOMEM;
    printf("%s\n", text);
    free(text);
    return 0;
}

/* --kv-disk-size's default for dir (half its file system's free space, at most 64 GiB), or the
 * upper bound without a folder. */
static size_t info_disk_default(const char *dir)
{
    struct statvfs sv;
    if (!dir || !*dir || statvfs(dir, &sv) != 0) return TIER_DISK_DEFAULT_MAX;
    return tier_disk_default((uint64_t)sv.f_bavail * sv.f_frsize, 0);
}

int cli_info(cli_opts *o)
{
    if (!o->model) {
        fprintf(stderr, "kvserve info: -m MODEL.gguf is required\n");
        return 2;
    }
    char err[1024];
    gguf_file *f;
    if (gguf_open(o->model, &f, err, sizeof err)) {
        fprintf(stderr, "kvserve info: %s\n", err);
        return 1;
    }
    info_data d;
    memset(&d, 0, sizeof d);
    d.path = o->model;
    d.f = f;
    d.kv_budget = o->kv_memory_bytes;
    d.tier_host = o->kv_host_memory_bytes;
    d.tier_disk = o->kv_disk_bytes ? o->kv_disk_bytes : info_disk_default(o->kv_disk_dir);
    d.block_size = o->block_size > 0 ? o->block_size : 16;
    d.kv_window = o->kv_window;
    d.kv_sinks = o->kv_sinks;
    info_gather(&d);
    model *m = NULL;
    int supported = model_arch_is_supported(d.arch);
    if (model_load_gguf(f, o->model, &m, d.why_no_model, sizeof d.why_no_model)) {
        if (supported && gguf_n_tensors(f) > 0) { /* a model file that is broken */
            fprintf(stderr, "kvserve info: %s\n", d.why_no_model);
            gguf_close(f);
            return 1;
        }
        m = NULL;
    }
    d.m = m;
    kv_rule wr = {KV_KEEP_SINKS, d.kv_window, d.kv_sinks};
    if (m && d.kv_window > 0 &&
        (d.kv_sinks < 0 || d.kv_window > m->hp.n_ctx_train || d.kv_window < (kv_sink_blocks(&wr, d.block_size) + 1) * d.block_size)) {
        fprintf(stderr, "kvserve info: --kv-window %d with --kv-sinks %d: the window must hold the sinks (rounded up to "
                "blocks of %d) plus one block, and at most the context length %d\n", d.kv_window, d.kv_sinks,
                d.block_size, m->hp.n_ctx_train);
        model_destroy(m);
        return 1;
    }
    int rc = o->json ? info_print_json(&d) : (info_print_text(&d), 0);
    if (m)
        model_destroy(m); /* closes f too */
    else
        gguf_close(f);
    return rc ? 1 : 0;
}
