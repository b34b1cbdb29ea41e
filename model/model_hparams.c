/*
 * model_hparams.c — the hyperparameters of each architecture, read from a GGUF file with
 * llama.cpp's defaults and acceptance rules (src/llama-model.cpp, src/llama-context.cpp), and
 * what follows from them per layer: the sliding window and the RoPE (base, linear / YaRN
 * scaling, ramp and attention factor).
 *
 * Policy: every "<arch>.*" key is either read here, known to change nothing (a listed
 * exception), or refused with a message naming it. A model whose numbers kvserve would compute
 * differently from its definition is an error at load, never a silent approximation.
 *
 * Called by model.c while loading; the per-layer functions by forward.c, the reference forward
 * of the tests, `kvserve info` and the engine's start-up line.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"

/* One architecture: its name and what llama.cpp's graph for it computes. */
typedef struct arch_desc {
    const char *name;
    int arch;
    int neox;       /* NeoX RoPE */
    int full_rope;  /* rope.dimension_count must equal the head size */
    const char *const *extra_keys; /* keys beyond the common ones that this arch reads */
} arch_desc;

static const char *const gemma2_keys[] = {"attention.sliding_window", "attention.sliding_window_pattern",
                                          "rope.freq_base_swa", "attn_logit_softcapping",
                                          "final_logit_softcapping", NULL};
static const char *const gemma3_keys[] = {"attention.sliding_window", "attention.sliding_window_pattern",
                                          "rope.freq_base_swa", "final_logit_softcapping", NULL};
static const char *const phi3_keys[] = {"attention.sliding_window", NULL};
static const char *const no_keys[] = {NULL};

static const arch_desc arch_table[] = {
    {"llama", MODEL_ARCH_LLAMA, 0, 1, no_keys},
    {"qwen2", MODEL_ARCH_QWEN2, 1, 1, no_keys},
    {"qwen3", MODEL_ARCH_QWEN3, 1, 1, no_keys},
    {"gemma2", MODEL_ARCH_GEMMA2, 1, 0, gemma2_keys},
    {"gemma3", MODEL_ARCH_GEMMA3, 1, 0, gemma3_keys},
    {"phi3", MODEL_ARCH_PHI3, 1, 0, phi3_keys},
};

/* Keys every arch reads (llama_model_base::load_hparams and the RoPE scaling of the context),
 * and keys that carry no computation: tensor_data_layout (a note of old conversions),
 * rope.scaling.finetuned (a flag), expert counts (checked to be 0 below). */
static const char *const common_keys[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.key_length",
    "attention.value_length", "attention.layer_norm_rms_epsilon", "rope.dimension_count",
    "rope.freq_base", "rope.scaling.type", "rope.scaling.factor", "rope.scale_linear",
    "rope.scaling.original_context_length", "rope.scaling.attn_factor", "rope.scaling.finetuned",
    "vocab_size", "tensor_data_layout", "expert_count", "expert_used_count", "pooling_type",
    "classifier.output_labels", "attention.causal", NULL,
};

int model__fail(model__ld *ld, int rc, const char *fmt, ...)
{
    if (ld->err && ld->err_len) {
        int n = snprintf(ld->err, ld->err_len, "%s: ", ld->path);
        if (n >= 0 && (size_t)n < ld->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ld->err + n, ld->err_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

static void key_of(const char *arch, const char *suffix, char *key, size_t n)
{
    snprintf(key, n, "%s.%s", arch, suffix);
}

/* Reads "<arch>.<suffix>" as an int in [min, MODEL__MAX_DIM]; def < 0 means required. */
static int ld_int_min(model__ld *ld, const char *arch, const char *suffix, int def, int min, int *out)
{
    char key[128];
    key_of(arch, suffix, key, sizeof key);
    int64_t v;
    int rc = gguf_get_i64(ld->f, key, &v);
    if (rc == -ENOENT && def >= 0) {
        *out = def;
        return 0;
    }
    if (rc == -ENOENT) return model__fail(ld, -EINVAL, "missing hyperparameter key '%s'", key);
    if (rc) {
        const gguf_kv *kv = gguf_find(ld->f, key);
        return model__fail(ld, -EINVAL, "key '%s' has type %s, expected an integer%s", key,
                           gguf_type_name(kv->type),
                           kv->type == GGUF_T_ARRAY ? " (per-layer values are not supported)" : "");
    }
    if (v < min || v > MODEL__MAX_DIM)
        return model__fail(ld, -EINVAL, "key '%s' = %lld is out of range (%d..%d)", key, (long long)v, min,
                           MODEL__MAX_DIM);
    *out = (int)v;
    return 0;
}

static int ld_int(model__ld *ld, const char *arch, const char *suffix, int def, int *out)
{
    return ld_int_min(ld, arch, suffix, def, 1, out);
}

/* Reads "<arch>.<suffix>" as a finite number, > 0 (or ≥ 0 with zero_ok); absent: def, or an
 * error when def is NAN (required). */
static int ld_float_ex(model__ld *ld, const char *arch, const char *suffix, float def, int zero_ok, float *out)
{
    char key[128];
    key_of(arch, suffix, key, sizeof key);
    float v;
    int rc = gguf_get_f32(ld->f, key, &v);
    if (rc == -ENOENT && !isnan(def)) {
        *out = def;
        return 0;
    }
    if (rc == -ENOENT) return model__fail(ld, -EINVAL, "missing hyperparameter key '%s'", key);
    if (rc) return model__fail(ld, -EINVAL, "key '%s' is not a number", key);
    if (!isfinite(v) || v < 0 || (v == 0 && !zero_ok))
        return model__fail(ld, -EINVAL, "key '%s' = %g is not a %s number", key, (double)v,
                           zero_ok ? "non-negative" : "positive");
    *out = v;
    return 0;
}

static int ld_float(model__ld *ld, const char *arch, const char *suffix, float def, float *out)
{
    return ld_float_ex(ld, arch, suffix, def, 0, out);
}

/* Every "<arch>.*" key must be one kvserve reads or knows to be inert; MoE is refused. */
static int check_keys(model__ld *ld, const arch_desc *ad)
{
    size_t al = strlen(ad->name);
    for (int64_t i = 0; i < gguf_n_kv(ld->f); i++) {
        const gguf_kv *kv = gguf_kv_at(ld->f, i);
        if (kv->key.len <= al + 1 || memcmp(kv->key.ptr, ad->name, al) || kv->key.ptr[al] != '.') continue;
        char suffix[128];
        gguf_str s = {kv->key.ptr + al + 1, kv->key.len - al - 1};
        gguf_str_copy(s, suffix, sizeof suffix);
        int known = 0;
        for (const char *const *k = common_keys; *k && !known; k++) known = !strcmp(*k, suffix);
        for (const char *const *k = ad->extra_keys; *k && !known; k++) known = !strcmp(*k, suffix);
        if (!known)
            return model__fail(ld, -EINVAL, "hyperparameter '%s.%s' is not implemented by kvserve for "
                               "architecture %s (refusing the file rather than ignoring it)", ad->name, suffix,
                               ad->name);
    }
    int n_expert;
    int rc = ld_int_min(ld, ad->name, "expert_count", 0, 0, &n_expert);
    if (rc) return rc;
    if (n_expert > 0)
        return model__fail(ld, -EINVAL, "%s.expert_count = %d: mixture-of-experts models are not supported",
                           ad->name, n_expert);
    return 0;
}

/* rope.scaling.type, .factor (or the older rope.scale_linear), .original_context_length and
 * .attn_factor, as llama.cpp reads them: the type defaults to "linear", which without a factor
 * scales by 1; "none" ignores the factor; an unknown type, or one kvserve does not implement
 * (longrope), is an error. */
static int read_rope_scaling(model__ld *ld, const char *a, model_hparams *hp)
{
    char key[128];
    gguf_str s;
    char type[32] = "linear";
    key_of(a, "rope.scaling.type", key, sizeof key);
    int rc = gguf_get_str(ld->f, key, &s);
    if (rc == -EINVAL) return model__fail(ld, -EINVAL, "key '%s' is not a string", key);
    if (!rc) gguf_str_copy(s, type, sizeof type);
    if (!strcmp(type, "none"))
        hp->rope_scaling = MODEL_ROPE_SCALING_NONE;
    else if (!strcmp(type, "linear"))
        hp->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    else if (!strcmp(type, "yarn"))
        hp->rope_scaling = MODEL_ROPE_SCALING_YARN;
    else
        return model__fail(ld, -EINVAL, "rope scaling type '%s' (%s) is not supported (kvserve supports "
                           "none, linear and yarn)", type, key);
    float factor = 0.0f;
    key_of(a, "rope.scaling.factor", key, sizeof key);
    const char *suffix = gguf_find(ld->f, key) ? "rope.scaling.factor" : "rope.scale_linear";
    if ((rc = ld_float_ex(ld, a, suffix, 0.0f, 1, &factor))) return rc;
    hp->rope_freq_scale = factor == 0.0f || hp->rope_scaling == MODEL_ROPE_SCALING_NONE ? 1.0f : 1.0f / factor;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    if ((rc = ld_int(ld, a, "rope.scaling.original_context_length", hp->n_ctx_train, &hp->rope_ctx_orig)) ||
        (rc = ld_float(ld, a, "rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor)))
        return rc;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    return 0;
}

/* The sliding window pattern: an integer period (an array of per-layer flags is refused, as
 * llama.cpp would silently ignore it). */
static int read_swa_pattern(model__ld *ld, const char *a, int def, int *out)
{
    char key[128];
    key_of(a, "attention.sliding_window_pattern", key, sizeof key);
    const gguf_kv *kv = gguf_find(ld->f, key);
    if (kv && kv->type == GGUF_T_ARRAY)
        return model__fail(ld, -EINVAL, "key '%s' is a per-layer array; kvserve supports a period only", key);
    return ld_int_min(ld, a, "attention.sliding_window_pattern", def, 0, out);
}

/* gemma2 / gemma3: window, pattern, second RoPE base, soft-caps and the query scale
 * (src/llama-model.cpp: the "27B" model types, 46 and 62 layers, scale q by 1/sqrt(n_embd/n_head)). */
static int read_gemma(model__ld *ld, const char *a, model_hparams *hp)
{
    int rc, g2 = hp->arch == MODEL_ARCH_GEMMA2;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->post_norms = 1;
    hp->ffn_act = MODEL_ACT_GELU_TANH;
    hp->qk_norm = !g2;
    if ((rc = ld_int_min(ld, a, "attention.sliding_window", g2 ? 4096 : 0, 0, &hp->swa_window))) return rc;
    if (g2 && hp->swa_window == 0)
        return model__fail(ld, -EINVAL, "%s.attention.sliding_window is 0 (gemma2 has sliding layers)", a);
    if ((rc = read_swa_pattern(ld, a, g2 ? 2 : 6, &hp->swa_pattern))) return rc;
    /* gemma3 without a window has no sliding layers, so its second base is never used */
    if ((rc = ld_float(ld, a, "rope.freq_base_swa", g2 ? hp->rope_base : 10000.0f, &hp->rope_base_swa))) return rc;
    if (!g2) hp->rope_freq_scale_swa = 1.0f; /* gemma3 scales its global layers only */
    if (g2 && ((rc = ld_float(ld, a, "attn_logit_softcapping", 50.0f, &hp->attn_softcap)) ||
               (rc = ld_float(ld, a, "final_logit_softcapping", 30.0f, &hp->final_softcap))))
        return rc;
    if (!g2 && (rc = ld_float_ex(ld, a, "final_logit_softcapping", 0.0f, 1, &hp->final_softcap))) return rc;
    int big = hp->n_layers == (g2 ? 46 : 62);
    hp->attn_scale = 1.0f / sqrtf((float)(big ? hp->n_embd / hp->n_heads : hp->head_dim));
    return 0;
}

/* Head geometry: heads, kv heads, key/value length, rope dims. */
static int read_heads(model__ld *ld, const arch_desc *ad, model_hparams *hp)
{
    const char *a = ad->name;
    int rc;
    if ((rc = ld_int(ld, a, "attention.head_count", -1, &hp->n_heads)) ||
        (rc = ld_int(ld, a, "attention.head_count_kv", hp->n_heads, &hp->n_kv_heads)))
        return rc;
    if (hp->n_heads % hp->n_kv_heads)
        return model__fail(ld, -EINVAL, "%d heads are not a multiple of %d kv heads", hp->n_heads, hp->n_kv_heads);
    int def_hd = hp->n_embd % hp->n_heads ? 0 : hp->n_embd / hp->n_heads;
    if ((rc = ld_int(ld, a, "attention.key_length", def_hd, &hp->head_dim))) return rc;
    if (hp->head_dim == 0)
        return model__fail(ld, -EINVAL, "embedding_length %d is not a multiple of head_count %d and there is no "
                           "%s.attention.key_length", hp->n_embd, hp->n_heads, a);
    int vlen;
    if ((rc = ld_int(ld, a, "attention.value_length", hp->head_dim, &vlen))) return rc;
    if (vlen != hp->head_dim)
        return model__fail(ld, -EINVAL, "attention.value_length %d differs from key_length %d (not supported)",
                           vlen, hp->head_dim);
    if ((int64_t)hp->n_heads * hp->head_dim > MODEL__MAX_DIM)
        return model__fail(ld, -EINVAL, "head_count × head size is too large");
    if ((rc = ld_int(ld, a, "rope.dimension_count", hp->head_dim, &hp->rope_dims))) return rc;
    if (hp->rope_dims > hp->head_dim || hp->rope_dims % 2)
        return model__fail(ld, -EINVAL, "rope.dimension_count %d must be even and at most the head size %d",
                           hp->rope_dims, hp->head_dim);
    if (ad->full_rope && hp->rope_dims != hp->head_dim)
        return model__fail(ld, -EINVAL, "rope.dimension_count %d differs from the head size %d (architecture %s "
                           "rotates whole heads)", hp->rope_dims, hp->head_dim, a);
    return 0;
}

/* Vocabulary: the arch key, else the token list, else the embedding's rows. */
static int read_vocab_size(model__ld *ld, const char *a, model_hparams *hp)
{
    const gguf_arr *toks;
    const gguf_tensor *emb = gguf_find_tensor(ld->f, "token_embd.weight");
    int rc = ld_int_min(ld, a, "vocab_size", 0, 0, &hp->n_vocab);
    if (rc) return rc;
    if (!hp->n_vocab && !gguf_get_arr(ld->f, "tokenizer.ggml.tokens", &toks) && toks->n > 0 &&
        toks->n <= MODEL__MAX_DIM)
        hp->n_vocab = (int)toks->n;
    if (!hp->n_vocab && emb && emb->ne[1] > 0 && emb->ne[1] <= MODEL__MAX_DIM) hp->n_vocab = (int)emb->ne[1];
    if (!hp->n_vocab) return model__fail(ld, -EINVAL, "cannot tell the vocabulary size");
    return 0;
}

static const arch_desc *find_arch(gguf_str s)
{
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (gguf_str_eq(s, arch_table[i].name)) return &arch_table[i];
    return NULL;
}

/* Embedding and reranker keys: pooling_type (llama.cpp's values 0..4; -1, unspecified, is
 * none), the classifier's output labels (their count is the head's width) and
 * attention.causal, which only true may be (kvserve's attention is causal). */
static int read_pooling(model__ld *ld, const char *a, model_hparams *hp)
{
    char key[128];
    int64_t v = 0;
    key_of(a, "pooling_type", key, sizeof key);
    int rc = gguf_get_i64(ld->f, key, &v);
    if (rc == -EINVAL || (!rc && (v < -1 || v > MODEL_POOL_RANK)))
        return model__fail(ld, -EINVAL, "key '%s' is not a pooling type llama.cpp knows (0..4)", key);
    hp->pooling = !rc && v > 0 ? (int)v : MODEL_POOL_NONE;
    hp->n_cls_out = 1;
    const gguf_arr *arr;
    key_of(a, "classifier.output_labels", key, sizeof key);
    rc = gguf_get_arr(ld->f, key, &arr);
    if (rc == -EINVAL || (!rc && (arr->type != GGUF_T_STRING || arr->n < 1 || arr->n > 4096)))
        return model__fail(ld, -EINVAL, "key '%s' is not a list of 1 to 4096 labels", key);
    if (!rc) hp->n_cls_out = (int)arr->n;
    int causal = 1;
    key_of(a, "attention.causal", key, sizeof key);
    rc = gguf_get_bool(ld->f, key, &causal);
    if (rc == -EINVAL) return model__fail(ld, -EINVAL, "key '%s' is not a bool", key);
    if (!causal)
        return model__fail(ld, -EINVAL, "key '%s' is false: non-causal (bidirectional) attention is not "
                           "supported", key);
    return 0;
}

const char *model_pooling_name(int pooling)
{
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    return pooling >= 0 && pooling <= MODEL_POOL_RANK ? names[pooling] : NULL;
}

int model_pooling_by_name(const char *name)
{
    for (int i = 0; name && i <= MODEL_POOL_RANK; i++)
        if (!strcmp(name, model_pooling_name(i))) return i;
    return -1;
}

int model__read_hparams(model__ld *ld, model_hparams *hp)
{
    const gguf_file *f = ld->f;
    gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s))
        return model__fail(ld, -EINVAL, "missing or non-string general.architecture");
    gguf_str_copy(s, hp->arch_name, sizeof hp->arch_name);
    for (char *c = hp->arch_name; *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
    const arch_desc *ad = find_arch(s);
    if (!ad)
        return model__fail(ld, -EINVAL, "unsupported architecture '%s' (kvserve supports llama, qwen2, qwen3, "
                           "gemma2, gemma3 and phi3)", hp->arch_name);
    hp->arch = ad->arch;
    const char *a = ad->name;
    if (!gguf_get_str(f, "general.name", &s)) gguf_str_copy(s, hp->name, sizeof hp->name);
    int rc;
    if ((rc = check_keys(ld, ad))) return rc;
    if ((rc = ld_int(ld, a, "embedding_length", -1, &hp->n_embd)) ||
        (rc = ld_int(ld, a, "block_count", -1, &hp->n_layers)) ||
        (rc = ld_int(ld, a, "feed_forward_length", -1, &hp->n_ff)) ||
        (rc = ld_int(ld, a, "context_length", -1, &hp->n_ctx_train)) || (rc = read_heads(ld, ad, hp)) ||
        (rc = ld_float(ld, a, "rope.freq_base", 10000.0f, &hp->rope_base)) ||
        (rc = ld_float(ld, a, "attention.layer_norm_rms_epsilon", NAN, &hp->rms_eps)) ||
        (rc = read_rope_scaling(ld, a, hp)) || (rc = read_vocab_size(ld, a, hp)) ||
        (rc = read_pooling(ld, a, hp)))
        return rc;
    hp->rope_neox = ad->neox;
    hp->rope_base_swa = hp->rope_base;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    hp->ffn_act = MODEL_ACT_SILU;
    hp->qk_norm = hp->arch == MODEL_ARCH_QWEN3;
    if ((hp->arch == MODEL_ARCH_GEMMA2 || hp->arch == MODEL_ARCH_GEMMA3) && (rc = read_gemma(ld, a, hp))) return rc;
    /* phi3: llama.cpp reads the window and disables it ("Phi SWA is currently disabled") */
    if (hp->arch == MODEL_ARCH_PHI3 && (rc = ld_int_min(ld, a, "attention.sliding_window", 0, 0, &hp->swa_ignored)))
        return rc;
    uint32_t ft;
    hp->file_type = gguf_get_u32(f, "general.file_type", &ft) || ft > 1000000 ? -1 : (int)ft;
    return 0;
}

/* ---- per layer ------------------------------------------------------------------------------ */

int model_layer_window(const model_hparams *hp, int il)
{
    int p = hp->swa_pattern;
    if (hp->swa_window <= 0 || il < 0 || il >= hp->n_layers) return 0;
    return p == 0 || il % p < p - 1 ? hp->swa_window : 0;
}

int model_n_swa_layers(const model_hparams *hp)
{
    int n = 0;
    for (int l = 0; l < hp->n_layers; l++) n += model_layer_window(hp, l) > 0;
    return n;
}

/* ggml_rope_yarn_corr_dim: the pair index whose wavelength spans n_ctx_orig / n_rot turns. */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void model_layer_rope(const model_hparams *hp, int il, model_rope *r)
{
    int swa = model_layer_window(hp, il) > 0;
    memset(r, 0, sizeof *r);
    r->dims = hp->rope_dims;
    r->neox = hp->rope_neox;
    r->base = swa ? hp->rope_base_swa : hp->rope_base;
    float fs = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
    r->freq_scale = fs > 0 ? fs : 1.0f;
    r->mscale = hp->rope_attn_factor > 0 ? hp->rope_attn_factor : 1.0f;
    if (hp->rope_scaling != MODEL_ROPE_SCALING_YARN) return;
    /* YaRN (ggml's rope_yarn): ext_factor 1; the ramp between the corrected dims; cos and sin
     * gain 1 + 0.1 ln(1 / freq_scale). llama.cpp's context divides its attention factor by that
     * gain and ggml multiplies it back, so the net factor is attn_factor × the gain. */
    int ctx = hp->rope_ctx_orig > 0 ? hp->rope_ctx_orig : hp->n_ctx_train;
    float lo = floorf(yarn_corr_dim(r->dims, ctx, hp->yarn_beta_fast, r->base));
    float hi = ceilf(yarn_corr_dim(r->dims, ctx, hp->yarn_beta_slow, r->base));
    r->ext_factor = 1.0f;
    r->corr_lo = lo > 0 ? lo : 0;
    r->corr_hi = hi < (float)(r->dims - 1) ? hi : (float)(r->dims - 1);
    r->mscale *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
}

float model_attn_scale(const model_hparams *hp)
{
    return hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hp->head_dim);
}

float model_embd_scale(const model_hparams *hp)
{
    return hp->embd_scale > 0 ? hp->embd_scale : 1.0f;
}

const char *model_rope_scaling_name(int scaling)
{
    return scaling == MODEL_ROPE_SCALING_YARN ? "yarn" : scaling == MODEL_ROPE_SCALING_LINEAR ? "linear" : "none";
}

int model_arch_is_supported(const char *name)
{
    for (size_t i = 0; name && i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (!strcmp(name, arch_table[i].name)) return 1;
    return 0;
}

char *model_kv_by_layer_type(const model_hparams *hp, size_t vec_bytes, char *buf, size_t len)
{
    int n_swa = model_n_swa_layers(hp), n_glob = hp->n_layers - n_swa;
    size_t per_layer = 2u * (size_t)hp->n_kv_heads * vec_bytes;
    int at = snprintf(buf, len, "%d global layer%s × 2 × %d kv heads × %zu bytes = %zu bytes/token", n_glob,
                      n_glob == 1 ? "" : "s", hp->n_kv_heads, vec_bytes, per_layer * (size_t)n_glob);
    if (n_swa && at > 0 && (size_t)at < len)
        snprintf(buf + at, len - (size_t)at, "; %d sliding-window layer%s (window %d) × 2 × %d kv heads × %zu bytes "
                 "= %zu bytes/token, attending to the last %d positions", n_swa, n_swa == 1 ? "" : "s",
                 hp->swa_window, hp->n_kv_heads, vec_bytes, per_layer * (size_t)n_swa, hp->swa_window);
    return buf;
}

/* Appends a formatted piece to buf (", " between pieces). */
static void feat(char *buf, size_t len, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void feat(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
    if (*at >= len) return;
    if (*at) *at += (size_t)snprintf(buf + *at, len - *at, ", ");
    if (*at >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    *at += n > 0 ? (size_t)n : 0;
}

char *model_features(const model_hparams *hp, char *buf, size_t len)
{
    size_t at = 0;
    if (!len) return buf;
    buf[0] = 0;
    feat(buf, len, &at, "rope %s %d/%d dims base %g", hp->rope_neox ? "neox" : "adjacent-pairs", hp->rope_dims,
         hp->head_dim, (double)hp->rope_base);
    if (model_n_swa_layers(hp) && hp->rope_base_swa != hp->rope_base)
        feat(buf, len, &at, "sliding layers' base %g", (double)hp->rope_base_swa);
    if (hp->rope_freq_scale != 1.0f)
        feat(buf, len, &at, "%s rope scaling x%g%s", model_rope_scaling_name(hp->rope_scaling),
             (double)(1.0f / hp->rope_freq_scale), hp->rope_freq_scale_swa == 1.0f && model_n_swa_layers(hp)
                                                        ? " (global layers)" : "");
    if (hp->rope_scaling == MODEL_ROPE_SCALING_YARN) feat(buf, len, &at, "yarn original context %d", hp->rope_ctx_orig);
    if (hp->rope_attn_factor != 1.0f) feat(buf, len, &at, "rope attn factor %g", (double)hp->rope_attn_factor);
    if (hp->has_rope_freqs) feat(buf, len, &at, "rope_freqs (llama3)");
    if (hp->qk_norm) feat(buf, len, &at, "q/k norm");
    if (hp->fused_qkv) feat(buf, len, &at, "fused qkv");
    if (hp->fused_gate_up) feat(buf, len, &at, "fused gate+up");
    feat(buf, len, &at, "%s", hp->ffn_act == MODEL_ACT_GELU_TANH ? "GeGLU (tanh)" : "SwiGLU");
    if (model_embd_scale(hp) != 1.0f) feat(buf, len, &at, "embedding x%g", (double)model_embd_scale(hp));
    if (hp->post_norms) feat(buf, len, &at, "post-attention/FFN norms");
    if (fabsf(model_attn_scale(hp) * sqrtf((float)hp->head_dim) - 1.0f) > 1e-6f)
        feat(buf, len, &at, "q scale %g", (double)model_attn_scale(hp));
    if (hp->attn_softcap > 0) feat(buf, len, &at, "attention soft-cap %g", (double)hp->attn_softcap);
    if (hp->final_softcap > 0) feat(buf, len, &at, "final soft-cap %g", (double)hp->final_softcap);
    int n_swa = model_n_swa_layers(hp);
    if (n_swa) feat(buf, len, &at, "sliding window %d on %d of %d layers", hp->swa_window, n_swa, hp->n_layers);
    if (hp->swa_ignored) feat(buf, len, &at, "sliding_window %d not applied (as llama.cpp)", hp->swa_ignored);
    if (hp->pooling == MODEL_POOL_RANK)
        feat(buf, len, &at, "reranker (%d classifier output%s)", hp->n_cls_out, hp->n_cls_out == 1 ? "" : "s");
    else if (hp->pooling != MODEL_POOL_NONE)
        feat(buf, len, &at, "embeddings (%s pooling)", model_pooling_name(hp->pooling));
    return buf;
}
