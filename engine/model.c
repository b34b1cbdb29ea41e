/*
 * model.c — binds a GGUF file to a Llama-family model: reads the hyperparameters of the
 * `llama` and `qwen2` architectures and binds every weight by name with its shape and type
 * checked, so that forward code can index any tensor without checks of its own.
 *
 * Invariants of a loaded model: every matrix has a supported type (dt_is_supported: the float
 * types, Q8_0, the legacy and K-quants, IQ4_NL, IQ4_XS; any mix of them within the file) with
 * ne = [n_in, n_out] exactly as model.h documents; every norm and bias is F32; data points into the mapping and
 * covers ne[1] × row_bytes bytes (the GGUF reader checked the range). The model owns the GGUF.
 *
 * Callers: the engine at start-up, cli/cmd_info.c, tests.
 */
#include "engine/model.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dtype.h"

#define MODEL_NAME_BYTES 64 /* room for one tensor name ("blk.N.attn_output.weight") */
#define MODEL_MAX_DIM (1 << 24) /* bound on any one hyperparameter, to keep products in int64 */

/* Loading context: the file, its name for messages, and the error buffer. */
typedef struct model__ld {
    const gguf_file *f;
    const char *path;
    char *err;
    size_t err_len;
    char *names;      /* storage for tensor names, MODEL_NAME_BYTES each */
    int n_names;
} model__ld;

static int ld_fail(model__ld *ld, int rc, const char *fmt, ...)
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

/* Reads "<arch>.<suffix>" as a positive int; def < 0 means required. */
static int ld_int(model__ld *ld, const char *arch, const char *suffix, int def, int *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    int rc = gguf_get_i64(ld->f, key, &v);
    if (rc == -ENOENT && def >= 0) {
        *out = def;
        return 0;
    }
    if (rc == -ENOENT) return ld_fail(ld, -EINVAL, "missing hyperparameter key '%s'", key);
    if (rc) {
        const gguf_kv *kv = gguf_find(ld->f, key);
        return ld_fail(ld, -EINVAL, "key '%s' has type %s, expected an integer%s", key,
                       gguf_type_name(kv->type),
                       kv->type == GGUF_T_ARRAY ? " (per-layer values are not supported)" : "");
    }
    if (v <= 0 || v > MODEL_MAX_DIM)
        return ld_fail(ld, -EINVAL, "key '%s' = %lld is out of range (1..%d)", key, (long long)v,
                       MODEL_MAX_DIM);
    *out = (int)v;
    return 0;
}

static int ld_float(model__ld *ld, const char *arch, const char *suffix, float def, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v;
    int rc = gguf_get_f32(ld->f, key, &v);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    if (rc) return ld_fail(ld, -EINVAL, "key '%s' is not a number", key);
    if (!(v > 0) || !isfinite(v))
        return ld_fail(ld, -EINVAL, "key '%s' = %g is not a positive number", key, (double)v);
    *out = v;
    return 0;
}

static int read_hparams(model__ld *ld, model_hparams *hp)
{
    const gguf_file *f = ld->f;
    gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s))
        return ld_fail(ld, -EINVAL, "missing or non-string general.architecture");
    gguf_str_copy(s, hp->arch_name, sizeof hp->arch_name);
    for (char *c = hp->arch_name; *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
    if (gguf_str_eq(s, "llama"))
        hp->arch = MODEL_ARCH_LLAMA;
    else if (gguf_str_eq(s, "qwen2"))
        hp->arch = MODEL_ARCH_QWEN2;
    else
        return ld_fail(ld, -EINVAL, "unsupported architecture '%s' (kvserve supports llama and qwen2)",
                       hp->arch_name);
    const char *a = hp->arch_name;
    if (!gguf_get_str(f, "general.name", &s)) gguf_str_copy(s, hp->name, sizeof hp->name);
    int rc;
    if ((rc = ld_int(ld, a, "embedding_length", -1, &hp->n_embd)) ||
        (rc = ld_int(ld, a, "block_count", -1, &hp->n_layers)) ||
        (rc = ld_int(ld, a, "feed_forward_length", -1, &hp->n_ff)) ||
        (rc = ld_int(ld, a, "attention.head_count", -1, &hp->n_heads)) ||
        (rc = ld_int(ld, a, "attention.head_count_kv", hp->n_heads, &hp->n_kv_heads)) ||
        (rc = ld_int(ld, a, "context_length", -1, &hp->n_ctx_train)))
        return rc;
    if (hp->n_heads % hp->n_kv_heads)
        return ld_fail(ld, -EINVAL, "%d heads are not a multiple of %d kv heads", hp->n_heads,
                       hp->n_kv_heads);
    int def_hd = hp->n_embd % hp->n_heads ? 0 : hp->n_embd / hp->n_heads;
    if ((rc = ld_int(ld, a, "attention.key_length", def_hd, &hp->head_dim))) return rc;
    if (hp->head_dim == 0)
        return ld_fail(ld, -EINVAL, "embedding_length %d is not a multiple of head_count %d and "
                       "there is no %s.attention.key_length", hp->n_embd, hp->n_heads, a);
    int vlen;
    if ((rc = ld_int(ld, a, "attention.value_length", hp->head_dim, &vlen))) return rc;
    if (vlen != hp->head_dim)
        return ld_fail(ld, -EINVAL, "attention.value_length %d differs from key_length %d (not "
                       "supported)", vlen, hp->head_dim);
    if ((int64_t)hp->n_heads * hp->head_dim > MODEL_MAX_DIM)
        return ld_fail(ld, -EINVAL, "head_count × head size is too large");
    if ((rc = ld_int(ld, a, "rope.dimension_count", hp->head_dim, &hp->rope_dims))) return rc;
    if (hp->rope_dims > hp->head_dim || hp->rope_dims % 2)
        return ld_fail(ld, -EINVAL, "rope.dimension_count %d must be even and at most the head "
                       "size %d", hp->rope_dims, hp->head_dim);
    if ((rc = ld_float(ld, a, "rope.freq_base", 10000.0f, &hp->rope_base)) ||
        (rc = ld_float(ld, a, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps)))
        return rc;
    hp->rope_neox = hp->arch == MODEL_ARCH_QWEN2;
    uint32_t ft;
    hp->file_type = gguf_get_u32(f, "general.file_type", &ft) || ft > 1000000 ? -1 : (int)ft;
    /* Vocabulary: the arch key, else the token list, else the embedding's rows. */
    const gguf_arr *toks;
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if ((rc = ld_int(ld, a, "vocab_size", 0, &hp->n_vocab))) return rc;
    if (!hp->n_vocab && !gguf_get_arr(f, "tokenizer.ggml.tokens", &toks) && toks->n > 0 &&
        toks->n <= MODEL_MAX_DIM)
        hp->n_vocab = (int)toks->n;
    if (!hp->n_vocab && emb && emb->ne[1] > 0 && emb->ne[1] <= MODEL_MAX_DIM)
        hp->n_vocab = (int)emb->ne[1];
    if (!hp->n_vocab) return ld_fail(ld, -EINVAL, "cannot tell the vocabulary size");
    return 0;
}

/* Binds tensor `name` with the expected shape [ne0] (ne1 == 0) or [ne0, ne1]. matrix: any
 * supported weight type, else F32 only. Absent and optional: t->data = NULL, returns 0. */
static int bind(model__ld *ld, model_tensor *t, const char *name, int64_t ne0, int64_t ne1,
                int matrix, int optional)
{
    char *nm = ld->names + (size_t)ld->n_names++ * MODEL_NAME_BYTES;
    snprintf(nm, MODEL_NAME_BYTES, "%s", name);
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->type = DT_F32;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    const gguf_tensor *g = gguf_find_tensor(ld->f, name);
    if (!g) return optional ? 0 : ld_fail(ld, -EINVAL, "missing tensor '%s'", name);
    int shape_ok = g->ne[0] == ne0 && g->ne[2] == 1 && g->ne[3] == 1 &&
                   (ne1 ? g->ne[1] == ne1 : g->ne[1] == 1);
    if (!shape_ok) {
        char want[64];
        if (ne1)
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)ne0, (long long)ne1);
        else
            snprintf(want, sizeof want, "[%lld]", (long long)ne0);
        return ld_fail(ld, -EINVAL, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected %s",
                       name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2],
                       (long long)g->ne[3], want);
    }
    if (matrix ? !dt_is_supported(g->type) : g->type != DT_F32)
        return ld_fail(ld, -EINVAL, "tensor '%s' has type %s (%d); kvserve supports %s%s", name,
                       dt_name(g->type), g->type, matrix ? dt_supported_list() : "only F32 norms and biases",
                       matrix ? " weights" : "");
    t->type = g->type;
    t->data = g->data;
    t->row_bytes = dt_row_bytes(g->type, g->ne[0]);
    return 0;
}

static int bind_layer(model__ld *ld, const model_hparams *hp, int i, model_layer *l)
{
    int64_t d = hp->n_embd, q = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv = (int64_t)hp->n_kv_heads * hp->head_dim, ff = hp->n_ff;
    int bias_opt = hp->arch != MODEL_ARCH_QWEN2;
    char n[MODEL_NAME_BYTES];
    int rc = 0;
#define B(field, suffix, ne0, ne1, mat, opt)                                 \
    do {                                                                     \
        snprintf(n, sizeof n, "blk.%d.%s", i, suffix);                       \
        if (!rc) rc = bind(ld, &l->field, n, ne0, ne1, mat, opt);            \
    } while (0)
    B(attn_norm, "attn_norm.weight", d, 0, 0, 0);
    B(wq, "attn_q.weight", d, q, 1, 0);
    B(wk, "attn_k.weight", d, kv, 1, 0);
    B(wv, "attn_v.weight", d, kv, 1, 0);
    B(wo, "attn_output.weight", q, d, 1, 0);
    B(bq, "attn_q.bias", q, 0, 0, bias_opt);
    B(bk, "attn_k.bias", kv, 0, 0, bias_opt);
    B(bv, "attn_v.bias", kv, 0, 0, bias_opt);
    B(ffn_norm, "ffn_norm.weight", d, 0, 0, 0);
    B(w_gate, "ffn_gate.weight", d, ff, 1, 0);
    B(w_up, "ffn_up.weight", d, ff, 1, 0);
    B(w_down, "ffn_down.weight", ff, d, 1, 0);
#undef B
    return rc;
}

#define MODEL_TENSORS_PER_LAYER 12

int model_load_gguf(gguf_file *f, const char *path, model **out, char *err, size_t err_len)
{
    *out = NULL;
    model__ld ld = {.f = f, .path = path ? path : "<memory>", .err = err, .err_len = err_len};
    model *m = calloc(1, sizeof *m);
    if (!m) return ld_fail(&ld, -ENOMEM, "out of memory");
    int rc = read_hparams(&ld, &m->hp);
    if (rc) {
        free(m);
        return rc;
    }
    model_hparams *hp = &m->hp;
    /* One allocation for the layers and, after them, the tensor names. */
    size_t n_names = 3 + (size_t)hp->n_layers * MODEL_TENSORS_PER_LAYER;
    size_t layers_bytes = (size_t)hp->n_layers * sizeof(model_layer);
    m->layers = calloc(1, layers_bytes + n_names * MODEL_NAME_BYTES);
    if (!m->layers) {
        free(m);
        return ld_fail(&ld, -ENOMEM, "out of memory");
    }
    ld.names = (char *)m->layers + layers_bytes;
    rc = bind(&ld, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, 0);
    if (!rc) rc = bind(&ld, &m->output_norm, "output_norm.weight", hp->n_embd, 0, 0, 0);
    if (!rc) rc = bind(&ld, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 1, 1);
    if (!rc && !m->output.data) {
        m->output = m->tok_embd;
        hp->tied_output = 1;
    }
    for (int i = 0; !rc && i < hp->n_layers; i++) rc = bind_layer(&ld, hp, i, &m->layers[i]);
    if (rc) {
        free(m->layers);
        free(m);
        return rc;
    }
    snprintf(m->path, sizeof m->path, "%s", ld.path);
    m->gguf = f;
    *out = m;
    return 0;
}

int model_load(const char *path, model **out, char *err, size_t err_len)
{
    *out = NULL;
    gguf_file *f;
    int rc = gguf_open(path, &f, err, err_len);
    if (rc) return rc;
    rc = model_load_gguf(f, path, out, err, err_len);
    if (rc) gguf_close(f);
    return rc;
}

void model_destroy(model *m)
{
    if (!m) return;
    gguf_close(m->gguf);
    free(m->layers);
    free(m);
}

void model_tensor_row_f32(const model_tensor *t, int64_t r, float *dst)
{
    dt_to_f32(t->type, (const uint8_t *)t->data + (size_t)r * t->row_bytes, dst, t->ne[0]);
}

static size_t tensor_bytes(const model_tensor *t)
{
    return t->data ? t->row_bytes * (size_t)t->ne[1] : 0;
}

static size_t tensor_elems(const model_tensor *t)
{
    return t->data ? (size_t)t->ne[0] * (size_t)t->ne[1] : 0;
}

/* Σ f(t) over every bound tensor, the output matrix once when it is tied to the embedding. */
static size_t sum_tensors(const model *m, size_t (*f)(const model_tensor *))
{
    size_t n = f(&m->tok_embd) + f(&m->output_norm);
    if (!m->hp.tied_output) n += f(&m->output);
    for (int i = 0; i < m->hp.n_layers; i++) {
        const model_layer *l = &m->layers[i];
        const model_tensor *ts[] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo, &l->bq,
                                    &l->bk, &l->bv, &l->ffn_norm, &l->w_gate, &l->w_up,
                                    &l->w_down};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) n += f(ts[k]);
    }
    return n;
}

size_t model_weight_bytes(const model *m)
{
    return sum_tensors(m, tensor_bytes);
}

size_t model_weight_elems(const model *m)
{
    return sum_tensors(m, tensor_elems);
}
