/*
 * cmd_mkmodel.c — `kvserve mkmodel -o OUT.gguf [--dim N --layers N --heads N --kv-heads N
 * --ffn N --vocab N --context N --type f32|f16|bf16|q8_0 --arch ARCH --seed N --experts N
 * --experts-used K` and the
 * architecture options (--head-dim, --rope-dims, --swa-window, --attn-softcap, --rope-scaling,
 * --fused-qkv, ...; `kvserve mkmodel --help`) --chat-template FILE]: writes a synthetic model
 * (random weights, working SentencePiece vocabulary, the file's text as tokenizer.chat_template)
 * via mkm_write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli/cli.h"
#include "model/mkmodel.h"
#include "model/dtype.h"

/* Weight type by name, or -1. */
static int parse_type(const char *s)
{
    static const struct { const char *name; int type; } types[] = {
        {"f32", DT_F32}, {"f16", DT_F16}, {"bf16", DT_BF16}, {"q8_0", DT_Q8_0}, {"q8", DT_Q8_0},
    };
    for (size_t i = 0; s && i < sizeof types / sizeof types[0]; i++)
        if (!strcasecmp(s, types[i].name)) return types[i].type;
    return -1;
}

int cli_mkmodel(cli_opts *o)
{
    if (!o->output) {
        fprintf(stderr, "kvserve mkmodel: -o OUT.gguf is required (see kvserve mkmodel --help)\n");
        return 2;
    }
    if (o->n_args) {
        fprintf(stderr, "kvserve mkmodel: unexpected argument '%s'\n", o->args[0]);
        return 2;
    }
    mkm_params p;
    mkm_params_default(&p);
    p.arch = o->arch;
    p.dim = o->dim;
    p.layers = o->layers;
    p.heads = o->heads;
    p.kv_heads = o->kv_heads;
    p.ffn = o->ffn;
    p.vocab = o->vocab;
    p.context = o->context;
    p.type = parse_type(o->type);
    if (o->seed >= 0) p.seed = (uint64_t)o->seed;
    p.head_dim = o->head_dim;
    p.experts = o->experts;
    p.experts_used = o->experts_used;
    p.kv_lora = o->kv_lora;
    p.q_lora = o->q_lora;
    p.v_head = o->v_head;
    p.shared_experts = o->shared_experts;
    p.dense_lead = o->dense_lead;
    p.rope_dims = o->rope_dims;
    p.rope_base = (float)o->rope_base;
    p.rope_base_swa = (float)o->rope_base_swa;
    p.swa_window = o->swa_window;
    p.swa_pattern = o->swa_pattern;
    p.attn_softcap = (float)o->attn_softcap;
    p.final_softcap = (float)o->final_softcap;
    p.rope_scaling = o->rope_scaling;
    p.rope_factor = (float)o->rope_factor;
    p.rope_ctx_orig = o->rope_orig_ctx;
    p.rope_attn_factor = (float)o->rope_attn_factor;
    p.rope_freqs = o->rope_freqs;
    p.fused_qkv = o->fused_qkv;
    p.qkv_bias = o->qkv_bias;
    p.tied = o->tied;
    p.norm_std = (float)o->norm_std;
    p.quiet_from = o->quiet_from;
    p.quiet_scale = (float)o->quiet_scale;
    p.pooling = o->pooling;
    if (p.type < 0) {
        fprintf(stderr, "kvserve mkmodel: unknown --type '%s' (f32, f16, bf16 or q8_0)\n", o->type);
        return 2;
    }
    char *tmpl = NULL;
    if (o->chat_template) {
        /* the file's bytes, as they are, become tokenizer.chat_template */
        FILE *fp = fopen(o->chat_template, "rb");
        long n = -1;
        if (fp && !fseek(fp, 0, SEEK_END)) n = ftell(fp);
        if (fp && n >= 0 && !fseek(fp, 0, SEEK_SET) && (tmpl = malloc((size_t)n + 1)) &&
            fread(tmpl, 1, (size_t)n, fp) == (size_t)n)
            tmpl[n] = 0;
        else {
            free(tmpl);
            tmpl = NULL;
        }
        if (fp) fclose(fp);
        if (!tmpl) {
            fprintf(stderr, "kvserve mkmodel: cannot read the chat template file '%s'\n", o->chat_template);
            return 2;
        }
        if (strlen(tmpl) != (size_t)n) {
            fprintf(stderr, "kvserve mkmodel: the chat template file '%s' holds a NUL byte\n", o->chat_template);
            free(tmpl);
            return 2;
        }
        p.chat_template = tmpl;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char err[512];
    int rc = mkm_write(o->output, &p, err, sizeof err);
    free(tmpl);
    if (rc) {
        fprintf(stderr, "kvserve %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (o->verbose)
        fprintf(stderr, "kvserve mkmodel: wrote %s in %.2f s\n", o->output,
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
