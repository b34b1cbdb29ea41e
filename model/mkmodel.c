/*
 * mkmodel.c — synthetic models of every architecture kvserve loads, written through the GGUF
 * writer (gguf_write.h).
 *
 * Models: weights are normal(0, 0.02) from Box–Muller over splitmix64, one generator per tensor
 * seeded from (seed, tensor index), so a file is a pure function of its parameters. Norms are 1
 * (or 1 + normal(0, norm_std)). Each architecture gets the keys and tensors llama.cpp reads for
 * it (the tensor list of add_tensors, the keys of write_arch_keys). The vocabulary comes from
 * mkmodel_vocab.c. Callers: cli/cmd_mkmodel.c, tests, benchmarks.
 */
#include "model/mkmodel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/rng.h"
#include "model/dtype.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/mkmodel_internal.h"
#include "model/model.h"

/* ---- weights ------------------------------------------------------------------------------ */

enum { MKM_RANDOM = 0, MKM_ONES = 1, MKM_ROPE_FREQS = 2, MKM_QUIET = 3 };

typedef struct mkm__gen {
    const uint8_t *kind; /* [n_tensors] MKM_RANDOM, MKM_ONES or MKM_ROPE_FREQS */
    uint64_t seed;
    float norm_std;      /* MKM_ONES: 1 + normal(0, norm_std) */
    float quiet_scale;   /* MKM_QUIET: normal(0, 0.02) times this */
    float rope_base;     /* MKM_ROPE_FREQS: the rope base and dims the factors are for */
    int rope_dims;
    int cur;             /* tensor the generator state belongs to, -1 none */
    uint64_t state;
    int have_spare;
    float spare;
} mkm__gen;

/* Box–Muller: two normals from two uniforms in (0, 1]. */
static float gen_normal(mkm__gen *g)
{
    if (g->have_spare) {
        g->have_spare = 0;
        return g->spare;
    }
    uint64_t r = rng_splitmix64(&g->state);
    float u1 = ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    float u2 = (float)((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    float rad = sqrtf(-2.0f * logf(u1));
    float sn, cs;
    sincosf(6.28318530718f * u2, &sn, &cs);
    g->spare = rad * sn;
    g->have_spare = 1;
    return rad * cs;
}

/* Llama 3.1's rope_freqs: per rotation pair, 1 for wavelengths below 8192/4, 8 above 8192/1,
 * and a smooth blend in between (the formula of the HF → GGUF converter, in float). */
static void llama3_factors(const mkm__gen *g, float *dst, int64_t n)
{
    const float factor = 8.0f, low = 1.0f, high = 4.0f, old_ctx = 8192.0f;
    for (int64_t i = 0; i < n; i++) {
        float freq = 1.0f / powf(g->rope_base, (float)(2 * i) / (float)g->rope_dims);
        float wavelen = 2.0f * (float)M_PI / freq;
        if (wavelen < old_ctx / high)
            dst[i] = 1.0f;
        else if (wavelen > old_ctx / low)
            dst[i] = factor;
        else {
            float smooth = (old_ctx / wavelen - low) / (high - low);
            dst[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

static void gen_row(void *ctx, int tensor, int64_t row, float *dst, int64_t n)
{
    mkm__gen *g = ctx;
    if (g->kind[tensor] == MKM_ROPE_FREQS) {
        llama3_factors(g, dst, n);
        return;
    }
    if (g->cur != tensor) {
        g->cur = tensor;
        g->state = g->seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(tensor + 1));
        g->have_spare = 0;
    }
    if (g->kind[tensor] == MKM_ONES) {
        for (int64_t i = 0; i < n; i++) dst[i] = g->norm_std > 0 ? 1.0f + g->norm_std * gen_normal(g) : 1.0f;
        return;
    }
    float sd = g->kind[tensor] == MKM_QUIET ? 0.02f * g->quiet_scale : 0.02f;
    for (int64_t i = 0; i < n; i++) dst[i] = sd * gen_normal(g);
}

/* ---- parameters and tensors --------------------------------------------------------------- */

void mkm_params_default(mkm_params *p)
{
    memset(p, 0, sizeof *p);
    p->arch = "llama";
    p->dim = 64;
    p->layers = 2;
    p->heads = 4;
    p->vocab = 512;
    p->context = 2048;
    p->type = DT_F32;
    p->seed = 1234;
    p->swa_pattern = -1;
}

static int file_type_of(int type)
{
    /* llama.cpp's "mostly" file types. */
    return type == DT_F16 ? 1 : type == DT_Q8_0 ? 7 : type == DT_BF16 ? 32 : 0;
}

/* What each architecture's files hold (the tensors llama.cpp's loader creates for it). */
typedef struct mkm__arch {
    const char *name;
    int qkv_bias;   /* q/k/v biases always */
    int qk_norm;    /* attn_q_norm / attn_k_norm */
    int post_norms; /* post_attention_norm / post_ffw_norm */
    int fused;      /* attn_qkv and gate+up in ffn_up (phi3) */
    int tie_always; /* no output.weight whatever p->tied says (gemma2) */
} mkm__arch;

static const mkm__arch mkm_arches[] = {
    {"llama", 0, 0, 0, 0, 0}, {"qwen2", 1, 0, 0, 0, 0},  {"qwen3", 0, 1, 0, 0, 0},
    {"gemma2", 0, 0, 1, 0, 1}, {"gemma3", 0, 1, 1, 0, 0}, {"phi3", 0, 0, 0, 1, 0},
};

static const mkm__arch *arch_of(const char *name)
{
    for (size_t i = 0; name && i < sizeof mkm_arches / sizeof mkm_arches[0]; i++)
        if (!strcmp(name, mkm_arches[i].name)) return &mkm_arches[i];
    return NULL;
}

/* The shape of a model once defaults are resolved. */
typedef struct mkm__shape {
    const mkm__arch *a;
    int ffn, kvh, hd, rope_dims;
} mkm__shape;

/* 1 when p asks for a reranker (pooling "rank"). */
static int mkm__rank(const mkm_params *p)
{
    return p->pooling && !strcmp(p->pooling, "rank");
}

/* Adds every weight tensor; kind[i] says how to fill tensor i. 0 or -EINVAL/-ENOMEM. */
static int add_tensors(gguf_writer *w, const mkm_params *p, const mkm__shape *sh, uint8_t *kind, char *err,
                       size_t err_len)
{
    int64_t d = p->dim, q = (int64_t)sh->hd * p->heads, kv = (int64_t)sh->hd * sh->kvh, ff = sh->ffn;
    const mkm__arch *a = sh->a;
    int fused = a->fused || p->fused_qkv, bias = a->qkv_bias || p->qkv_bias;
    char name[64];
    int rc = 0;
#define T(nm, k, typ, ne0, ne1)                                                             \
    do {                                                                                    \
        int64_t ne_[2] = {ne0, ne1};                                                        \
        int r_ = rc ? rc : gguf_put_tensor(w, nm, typ, (ne1) != 0 ? 2 : 1, ne_);            \
        if (r_ >= 0 && !rc) kind[r_] = k;                                                   \
        else if (!rc) {                                                                     \
            rc = r_;                                                                        \
            snprintf(err, err_len, "mkmodel: cannot add tensor '%s' [%lld, %lld] of type %s%s", \
                     nm, (long long)(ne0), (long long)(ne1), dt_name(typ),                   \
                     typ == DT_Q8_0 ? " (Q8_0 needs ne[0] % 32 == 0)" : "");                 \
        }                                                                                   \
    } while (0)
    T("token_embd.weight", MKM_RANDOM, p->type, d, p->vocab);
    T("output_norm.weight", MKM_ONES, DT_F32, d, 0);
    if (!p->tied && !a->tie_always) T("output.weight", MKM_RANDOM, p->type, d, p->vocab);
    if (p->rope_freqs) T("rope_freqs.weight", MKM_ROPE_FREQS, DT_F32, sh->rope_dims / 2, 0);
    for (int l = 0; l < p->layers && !rc; l++) {
#define L(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
        T(L("attn_norm.weight"), MKM_ONES, DT_F32, d, 0);
        if (fused) {
            T(L("attn_qkv.weight"), MKM_RANDOM, p->type, d, q + 2 * kv);
            if (bias) T(L("attn_qkv.bias"), MKM_RANDOM, DT_F32, q + 2 * kv, 0);
        } else {
            T(L("attn_q.weight"), MKM_RANDOM, p->type, d, q);
            T(L("attn_k.weight"), MKM_RANDOM, p->type, d, kv);
            T(L("attn_v.weight"), MKM_RANDOM, p->type, d, kv);
            if (bias) {
                T(L("attn_q.bias"), MKM_RANDOM, DT_F32, q, 0);
                T(L("attn_k.bias"), MKM_RANDOM, DT_F32, kv, 0);
                T(L("attn_v.bias"), MKM_RANDOM, DT_F32, kv, 0);
            }
        }
        if (a->qk_norm) {
            T(L("attn_q_norm.weight"), MKM_ONES, DT_F32, sh->hd, 0);
            T(L("attn_k_norm.weight"), MKM_ONES, DT_F32, sh->hd, 0);
        }
        /* from quiet_from on, what a layer adds to the residual is scaled down */
        int out_kind = p->quiet_from > 0 && l >= p->quiet_from ? MKM_QUIET : MKM_RANDOM;
        T(L("attn_output.weight"), out_kind, p->type, q, d);
        if (a->post_norms) T(L("post_attention_norm.weight"), MKM_ONES, DT_F32, d, 0);
        T(L("ffn_norm.weight"), MKM_ONES, DT_F32, d, 0);
        if (a->fused) {
            T(L("ffn_up.weight"), MKM_RANDOM, p->type, d, 2 * ff);
        } else {
            T(L("ffn_gate.weight"), MKM_RANDOM, p->type, d, ff);
            T(L("ffn_up.weight"), MKM_RANDOM, p->type, d, ff);
        }
        T(L("ffn_down.weight"), out_kind, p->type, ff, d);
        if (a->post_norms) T(L("post_ffw_norm.weight"), MKM_ONES, DT_F32, d, 0);
#undef L
    }
    if (mkm__rank(p) && !strcmp(a->name, "qwen3")) {
        T("cls.output.weight", MKM_RANDOM, p->type, d, 2);
    } else if (mkm__rank(p)) {
        T("cls.weight", MKM_RANDOM, p->type, d, d);
        T("cls.bias", MKM_RANDOM, DT_F32, d, 0);
        T("cls.output.weight", MKM_RANDOM, p->type, d, 1);
        T("cls.output.bias", MKM_RANDOM, DT_F32, 1, 0);
    }
#undef T
    return rc < 0 ? rc : 0;
}

/* Why the architecture options of p do not fit its architecture, or NULL. */
static const char *check_arch_options(const mkm_params *p, const mkm__shape *sh)
{
    const char *n = sh->a->name;
    int gemma = !strncmp(n, "gemma", 5), phi3 = !strcmp(n, "phi3"), llama = !strcmp(n, "llama");
    if (sh->rope_dims > sh->hd || sh->rope_dims < 2 || sh->rope_dims % 2)
        return "rope dims must be even and at most the head size";
    if (sh->rope_dims != sh->hd && !gemma && !phi3) return "partial rope needs gemma2, gemma3 or phi3";
    if ((p->swa_window || p->swa_pattern >= 0 || p->rope_base_swa > 0) && !gemma)
        return "sliding-window options need gemma2 or gemma3";
    if (p->swa_window < 0 || p->swa_pattern < -1) return "the window and its pattern must not be negative";
    if (p->attn_softcap < 0 || p->final_softcap < 0 || (p->attn_softcap > 0 && strcmp(n, "gemma2")))
        return "soft-caps must be positive, the attention soft-cap gemma2 only";
    if (p->final_softcap > 0 && !gemma) return "the final soft-cap needs gemma2 or gemma3";
    if (p->rope_freqs && !llama) return "rope_freqs.weight needs llama";
    if (p->rope_factor < 0 || p->rope_ctx_orig < 0 || p->rope_attn_factor < 0)
        return "rope scaling numbers must not be negative";
    if (p->pooling && model_pooling_by_name(p->pooling) < 0) return "pooling must be none, mean, cls, last or rank";
    return NULL;
}

static int check_params(const mkm_params *p, mkm__shape *sh, char *err, size_t err_len)
{
    memset(sh, 0, sizeof *sh);
    sh->a = arch_of(p->arch);
    sh->kvh = p->kv_heads ? p->kv_heads : p->heads;
    sh->ffn = p->ffn ? p->ffn : (4 * p->dim + 31) / 32 * 32;
    sh->hd = p->head_dim ? p->head_dim : p->heads > 0 ? p->dim / p->heads : 0;
    sh->rope_dims = p->rope_dims ? p->rope_dims : sh->hd;
    const char *why = NULL;
    if (!sh->a)
        why = "arch must be llama, qwen2, qwen3, gemma2, gemma3 or phi3";
    else if (p->dim < 1 || p->layers < 1 || p->heads < 1 || sh->kvh < 1 || sh->ffn < 1 || p->context < 1 ||
             p->head_dim < 0 || p->rope_dims < 0)
        why = "dim, layers, heads, kv heads, ffn, context, head dim and rope dims must be positive";
    else if (p->dim > (1 << 16) || p->layers > 1024 || sh->ffn > (1 << 18) || p->vocab > (1 << 22) ||
             sh->hd > 4096)
        why = "a dimension is too large";
    else if (!p->head_dim && p->dim % p->heads)
        why = "dim must be a multiple of heads (or give the head size)";
    else if (p->heads % sh->kvh)
        why = "heads must be a multiple of kv heads";
    else if (sh->hd % 2)
        why = "the head size must be even for RoPE";
    else if (!gguf_is_writable(p->type))
        why = "type must be F32, F16, BF16 or Q8_0";
    else if (p->type == DT_Q8_0 && (p->dim % 32 || sh->ffn % 32 || ((int64_t)sh->hd * p->heads) % 32))
        why = "Q8_0 needs dim, ffn and heads × head size to be multiples of 32";
    else if (p->n_extra < 0 || (p->n_extra && !p->extra_tokens))
        why = "bad extra token list";
    else
        why = check_arch_options(p, sh);
    if (why) {
        snprintf(err, err_len, "mkmodel: %s", why);
        return -EINVAL;
    }
    return 0;
}

/* The hyperparameter keys: the common ones, then each option that was set. */
static void write_arch_keys(gguf_writer *w, const mkm_params *p, const mkm__shape *sh)
{
    const char *a = p->arch;
    char key[128];
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    gguf_put_u32(w, AK("context_length"), (uint32_t)p->context);
    gguf_put_u32(w, AK("embedding_length"), (uint32_t)p->dim);
    gguf_put_u32(w, AK("block_count"), (uint32_t)p->layers);
    gguf_put_u32(w, AK("feed_forward_length"), (uint32_t)sh->ffn);
    gguf_put_u32(w, AK("attention.head_count"), (uint32_t)p->heads);
    gguf_put_u32(w, AK("attention.head_count_kv"), (uint32_t)sh->kvh);
    if (p->head_dim) {
        gguf_put_u32(w, AK("attention.key_length"), (uint32_t)sh->hd);
        gguf_put_u32(w, AK("attention.value_length"), (uint32_t)sh->hd);
    }
    gguf_put_u32(w, AK("rope.dimension_count"), (uint32_t)sh->rope_dims);
    gguf_put_f32(w, AK("rope.freq_base"), p->rope_base > 0 ? p->rope_base : 10000.0f);
    gguf_put_f32(w, AK("attention.layer_norm_rms_epsilon"), p->rms_eps > 0 ? p->rms_eps : 1e-5f);
    gguf_put_u32(w, AK("vocab_size"), (uint32_t)p->vocab);
    if (p->swa_window) gguf_put_u32(w, AK("attention.sliding_window"), (uint32_t)p->swa_window);
    if (p->swa_pattern >= 0) gguf_put_u32(w, AK("attention.sliding_window_pattern"), (uint32_t)p->swa_pattern);
    if (p->rope_base_swa > 0) gguf_put_f32(w, AK("rope.freq_base_swa"), p->rope_base_swa);
    if (p->attn_softcap > 0) gguf_put_f32(w, AK("attn_logit_softcapping"), p->attn_softcap);
    if (p->final_softcap > 0) gguf_put_f32(w, AK("final_logit_softcapping"), p->final_softcap);
    if (p->rope_scaling) gguf_put_str(w, AK("rope.scaling.type"), p->rope_scaling);
    if (p->rope_factor > 0) gguf_put_f32(w, AK("rope.scaling.factor"), p->rope_factor);
    if (p->rope_ctx_orig > 0) gguf_put_u32(w, AK("rope.scaling.original_context_length"), (uint32_t)p->rope_ctx_orig);
    if (p->rope_attn_factor > 0) gguf_put_f32(w, AK("rope.scaling.attn_factor"), p->rope_attn_factor);
    if (p->pooling) gguf_put_u32(w, AK("pooling_type"), (uint32_t)model_pooling_by_name(p->pooling));
    if (mkm__rank(p) && !strcmp(a, "qwen3")) {
        static const char *const labels[] = {"yes", "no"};
        gguf_put_arr_str(w, AK("classifier.output_labels"), labels, 2);
        /* what llama.cpp's converter stores for Qwen3-Reranker */
        gguf_put_str(w, "tokenizer.chat_template.rerank",
                     "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
                     "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
                     "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that "
                     "answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
                     "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    }
#undef AK
}

/* Tensors a model of p holds at most: 4 global, 4 of a classification head + 16 per layer. */
static size_t max_tensors(const mkm_params *p)
{
    return 8 + (size_t)p->layers * 16;
}

int mkm_write(const char *path, const mkm_params *p, char *err, size_t err_len)
{
    mkm__shape sh;
    int rc = check_params(p, &sh, err, err_len);
    if (rc) return rc;
    gguf_writer *w = gguf_writer_create();
    uint8_t *kind = calloc(max_tensors(p), 1);
    if (!w || !kind) {
        snprintf(err, err_len, "mkmodel: out of memory");
        rc = -ENOMEM;
        goto out;
    }
    gguf_put_str(w, "general.architecture", p->arch);
    gguf_put_str(w, "general.name", p->name ? p->name : "mkmodel");
    gguf_put_u32(w, "general.file_type", (uint32_t)file_type_of(p->type));
    write_arch_keys(w, p, &sh);
    if ((rc = mkm__write_vocab(w, p, err, err_len))) goto out;
    if ((rc = add_tensors(w, p, &sh, kind, err, err_len))) goto out;
    mkm__gen g = {.kind = kind, .seed = p->seed, .norm_std = p->norm_std,
                  .quiet_scale = p->quiet_scale > 0 ? p->quiet_scale : 0.05f,
                  .rope_base = p->rope_base > 0 ? p->rope_base : 10000.0f, .rope_dims = sh.rope_dims, .cur = -1};
    rc = gguf_writer_write(w, path, gen_row, &g, err, err_len);
out:
    free(kind);
    gguf_writer_destroy(w);
    return rc;
}
