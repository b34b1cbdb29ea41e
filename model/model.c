/*
 * model.c — binds a GGUF file to a model: takes the hyperparameters (model_hparams.c) and binds
 * every weight of the architecture by name with its shape and type checked, so that forward
 * code can index any tensor without checks of its own. Fused tensors (attn_qkv, phi3's gate+up
 * ffn_up) become views of their row ranges. A tensor of the file that no binding takes is an
 * error, as in llama.cpp ("wrong number of tensors"): it would be a weight kvserve ignores.
 *
 * Invariants of a loaded model: every matrix has a supported type (dt_is_supported: the float
 * types, Q8_0, the legacy and K-quants, IQ4_NL, IQ4_XS; any mix of them within the file) with
 * ne = [n_in, n_out] exactly as model.h documents; every norm and bias is F32; data points into the mapping and
 * covers ne[1] × row_bytes bytes (the GGUF reader checked the range). The model owns the GGUF.
 *
 * Callers: the engine at start-up, cli/cmd_info.c, tests.
 */
#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "model/model_internal.h"

#define MODEL_NAME_BYTES 64 /* room for one tensor name ("blk.N.attn_output.weight") */

/* Binds tensor `name` with the expected shape [ne0] (ne1 == 0) or [ne0, ne1]. matrix: any
 * supported weight type, else F32 only. Absent and optional: t->data = NULL, returns 0. */
static int bind(model__ld *ld, model_tensor *t, const char *name, int64_t ne0, int64_t ne1,
                int matrix, int optional)
{
    if (ld->n_names == ld->cap_names) return model__fail(ld, -ENOMEM, "too many tensors bound");
    char *nm = ld->names + (size_t)ld->n_names++ * MODEL_NAME_BYTES;
    snprintf(nm, MODEL_NAME_BYTES, "%s", name);
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->type = DT_F32;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    const gguf_tensor *g = gguf_find_tensor(ld->f, name);
    if (!g) return optional ? 0 : model__fail(ld, -EINVAL, "missing tensor '%s'", name);
    int shape_ok = g->ne[0] == ne0 && g->ne[2] == 1 && g->ne[3] == 1 &&
                   (ne1 ? g->ne[1] == ne1 : g->ne[1] == 1);
    if (!shape_ok) {
        char want[64];
        if (ne1)
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)ne0, (long long)ne1);
        else
            snprintf(want, sizeof want, "[%lld]", (long long)ne0);
        return model__fail(ld, -EINVAL, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected %s",
                       name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2],
                       (long long)g->ne[3], want);
    }
    if (matrix ? !dt_is_supported(g->type) : g->type != DT_F32)
        return model__fail(ld, -EINVAL, "tensor '%s' has type %s (%d); kvserve supports %s%s", name,
                       dt_name(g->type), g->type, matrix ? dt_supported_list() : "only F32 norms and biases",
                       matrix ? " weights" : "");
    t->type = g->type;
    t->data = g->data;
    t->row_bytes = dt_row_bytes(g->type, g->ne[0]);
    ld->used[g - gguf_tensor_at(ld->f, 0)] = 1;
    return 0;
}

/* A view of rows [r0, r0 + n) of matrix m (or elements [r0, r0 + n) of vector m when m is 1-D). */
static model_tensor view_rows(const model_tensor *m, int64_t r0, int64_t n)
{
    model_tensor v = *m;
    if (m->ne[1] == 1) { /* a bias vector: F32 elements */
        v.ne[0] = n;
        v.data = m->data ? (const float *)m->data + r0 : NULL;
        v.row_bytes = (size_t)n * sizeof(float);
    } else {
        v.ne[1] = n;
        v.data = m->data ? (const uint8_t *)m->data + (size_t)r0 * m->row_bytes : NULL;
    }
    return v;
}


/* What an architecture's layers hold beyond attn/ffn norms, attention and a gated FFN. */
typedef struct layer_spec {
    int qk_norm;       /* attn_q_norm, attn_k_norm [head_dim] required */
    int post_norms;    /* post_attention_norm, post_ffw_norm [n_embd] required */
    int fused_gate_up; /* ffn_up holds [gate; up] (phi3) */
    int llama_biases;  /* attn_output.bias and ffn_*.bias optional (llama) */
} layer_spec;

static layer_spec spec_of(const model_hparams *hp)
{
    layer_spec s = {hp->qk_norm, hp->post_norms, hp->arch == MODEL_ARCH_PHI3, hp->arch == MODEL_ARCH_LLAMA};
    return s;
}

#define B(field, suffix, ne0, ne1, mat, opt)                                 \
    do {                                                                     \
        snprintf(n, sizeof n, "blk.%d.%s", i, suffix);                       \
        if (!rc) rc = bind(ld, &l->field, n, ne0, ne1, mat, opt);            \
    } while (0)

/* Q, K, V (and their optional biases): separate tensors, or views of a fused attn_qkv whose rows
 * are Q, then K, then V (llama.cpp's create_tensor_qkv accepts either for every arch). */
static int bind_qkv(model__ld *ld, model_hparams *hp, int i, model_layer *l)
{
    int64_t d = hp->n_embd, q = (int64_t)hp->n_heads * hp->head_dim, kv = (int64_t)hp->n_kv_heads * hp->head_dim;
    char n[MODEL_NAME_BYTES];
    int rc = 0;
    snprintf(n, sizeof n, "blk.%d.attn_qkv.weight", i);
    if (!gguf_find_tensor(ld->f, n)) {
        B(wq, "attn_q.weight", d, q, 1, 0);
        B(wk, "attn_k.weight", d, kv, 1, 0);
        B(wv, "attn_v.weight", d, kv, 1, 0);
        B(bq, "attn_q.bias", q, 0, 0, 1);
        B(bk, "attn_k.bias", kv, 0, 0, 1);
        B(bv, "attn_v.bias", kv, 0, 0, 1);
        return rc;
    }
    model_tensor w, b;
    rc = bind(ld, &w, n, d, q + 2 * kv, 1, 0);
    snprintf(n, sizeof n, "blk.%d.attn_qkv.bias", i);
    if (!rc) rc = bind(ld, &b, n, q + 2 * kv, 0, 0, 1);
    if (rc) return rc;
    l->wq = view_rows(&w, 0, q), l->wk = view_rows(&w, q, kv), l->wv = view_rows(&w, q + kv, kv);
    l->bq = view_rows(&b, 0, q), l->bk = view_rows(&b, q, kv), l->bv = view_rows(&b, q + kv, kv);
    hp->fused_qkv = 1;
    return 0;
}

static int bind_layer(model__ld *ld, model_hparams *hp, int i, model_layer *l)
{
    int64_t d = hp->n_embd, q = (int64_t)hp->n_heads * hp->head_dim, ff = hp->n_ff;
    layer_spec sp = spec_of(hp);
    char n[MODEL_NAME_BYTES];
    int rc = bind_qkv(ld, hp, i, l);
    B(attn_norm, "attn_norm.weight", d, 0, 0, 0);
    B(wo, "attn_output.weight", q, d, 1, 0);
    if (sp.llama_biases) B(bo, "attn_output.bias", d, 0, 0, 1);
    if (sp.qk_norm) {
        B(q_norm, "attn_q_norm.weight", hp->head_dim, 0, 0, 0);
        B(k_norm, "attn_k_norm.weight", hp->head_dim, 0, 0, 0);
    }
    if (sp.post_norms) B(post_attn_norm, "post_attention_norm.weight", d, 0, 0, 0);
    B(ffn_norm, "ffn_norm.weight", d, 0, 0, 0);
    if (sp.fused_gate_up) {
        model_tensor up;
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", i);
        if (!rc) rc = bind(ld, &up, n, d, 2 * ff, 1, 0);
        if (!rc) l->w_gate = view_rows(&up, 0, ff), l->w_up = view_rows(&up, ff, ff);
        hp->fused_gate_up = 1;
    } else {
        B(w_gate, "ffn_gate.weight", d, ff, 1, 0);
        B(w_up, "ffn_up.weight", d, ff, 1, 0);
    }
    B(w_down, "ffn_down.weight", ff, d, 1, 0);
    if (sp.llama_biases) {
        B(b_gate, "ffn_gate.bias", ff, 0, 0, 1);
        B(b_up, "ffn_up.bias", ff, 0, 0, 1);
        B(b_down, "ffn_down.bias", d, 0, 0, 1);
    }
    if (sp.post_norms) B(post_ffn_norm, "post_ffw_norm.weight", d, 0, 0, 0);
    return rc;
}
#undef B

/* Tensors bound per layer at most (separate q/k/v with biases, norms, output and FFN biases). */
#define MODEL_TENSORS_PER_LAYER 20

/* A reranker's classification head (llama.cpp's cls, cls_b, cls_out, cls_out_b), every part
 * optional: bound for any architecture, used by rank pooling (engine/pool.c). */
static int bind_cls(model__ld *ld, model *m)
{
    const model_hparams *hp = &m->hp;
    int rc = bind(ld, &m->cls, "cls.weight", hp->n_embd, hp->n_embd, 1, 1);
    if (!rc) rc = bind(ld, &m->cls_b, "cls.bias", hp->n_embd, 0, 0, 1);
    if (!rc) rc = bind(ld, &m->cls_out, "cls.output.weight", hp->n_embd, hp->n_cls_out, 1, 1);
    if (!rc) rc = bind(ld, &m->cls_out_b, "cls.output.bias", hp->n_cls_out, 0, 0, 1);
    if (!rc && ((m->cls_b.data && !m->cls.data) || (m->cls_out_b.data && !m->cls_out.data)))
        rc = model__fail(ld, -EINVAL, "a classifier bias (cls.bias / cls.output.bias) without its weight");
    return rc;
}

/* Global tensors: embedding, final norm, LM head (optional and tied to the embedding when
 * absent; gemma2 always ties), LM-head bias (qwen2), rope_freqs (llama). */
static int bind_globals(model__ld *ld, model *m)
{
    model_hparams *hp = &m->hp;
    int rc = bind(ld, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, 0);
    if (!rc) rc = bind(ld, &m->output_norm, "output_norm.weight", hp->n_embd, 0, 0, 0);
    if (!rc && hp->arch != MODEL_ARCH_GEMMA2)
        rc = bind(ld, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 1, 1);
    if (!rc && !m->output.data) {
        m->output = m->tok_embd;
        hp->tied_output = 1;
    }
    if (!rc && hp->arch == MODEL_ARCH_QWEN2) rc = bind(ld, &m->output_b, "output.bias", hp->n_vocab, 0, 0, 1);
    if (!rc && hp->arch == MODEL_ARCH_LLAMA) {
        rc = bind(ld, &m->rope_freqs, "rope_freqs.weight", hp->rope_dims / 2, 0, 0, 1);
        hp->has_rope_freqs = m->rope_freqs.data != NULL;
    }
    return rc ? rc : bind_cls(ld, m);
}

/* Every tensor of the file must have been bound. */
static int check_all_used(model__ld *ld, const model_hparams *hp)
{
    for (int64_t i = 0; i < gguf_n_tensors(ld->f); i++) {
        if (ld->used[i]) continue;
        char name[128];
        gguf_str_copy(gguf_tensor_at(ld->f, i)->name, name, sizeof name);
        for (char *c = name; *c; c++)
            if ((unsigned char)*c < 0x20) *c = '?';
        const char *why = strstr(name, "rope_factors") ? " (LongRoPE is not supported)"
                          : !strcmp(name, "output.weight") ? " (this architecture always ties the LM head to "
                                                               "token_embd)"
                          : strstr(name, "attn_q.") || strstr(name, "attn_k.") || strstr(name, "attn_v.")
                              ? " (the file also has a fused attn_qkv)" : "";
        return model__fail(ld, -EINVAL, "tensor '%s' is not used by architecture %s%s; kvserve refuses "
                           "files with weights it would ignore", name, hp->arch_name, why);
    }
    return 0;
}

int model_load_gguf(gguf_file *f, const char *path, model **out, char *err, size_t err_len)
{
    *out = NULL;
    model__ld ld = {.f = f, .path = path ? path : "<memory>", .err = err, .err_len = err_len};
    model *m = calloc(1, sizeof *m);
    ld.used = calloc((size_t)gguf_n_tensors(f) + 1, 1);
    if (!m || !ld.used) {
        free(m);
        free(ld.used);
        return model__fail(&ld, -ENOMEM, "out of memory");
    }
    int rc = model__read_hparams(&ld, &m->hp);
    model_hparams *hp = &m->hp;
    /* One allocation for the layers and, after them, the tensor names. */
    size_t n_names = 12 + (size_t)hp->n_layers * MODEL_TENSORS_PER_LAYER;
    size_t layers_bytes = (size_t)hp->n_layers * sizeof(model_layer);
    if (!rc && !(m->layers = calloc(1, layers_bytes + n_names * MODEL_NAME_BYTES)))
        rc = model__fail(&ld, -ENOMEM, "out of memory");
    if (!rc) {
        ld.names = (char *)m->layers + layers_bytes;
        ld.cap_names = (int)n_names;
        rc = bind_globals(&ld, m);
    }
    for (int i = 0; !rc && i < hp->n_layers; i++) rc = bind_layer(&ld, hp, i, &m->layers[i]);
    if (!rc) rc = check_all_used(&ld, hp);
    free(ld.used);
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

/* Σ f(t) over every bound tensor, the output matrix once when it is tied to the embedding; the
 * views of a fused tensor partition it, so summing them counts it once. */
static size_t sum_tensors(const model *m, size_t (*f)(const model_tensor *))
{
    size_t n = f(&m->tok_embd) + f(&m->output_norm) + f(&m->output_b) + f(&m->rope_freqs) + f(&m->cls) +
               f(&m->cls_b) + f(&m->cls_out) + f(&m->cls_out_b);
    if (!m->hp.tied_output) n += f(&m->output);
    for (int i = 0; i < m->hp.n_layers; i++) {
        const model_layer *l = &m->layers[i];
        const model_tensor *ts[] = {&l->attn_norm, &l->wq,     &l->wk,       &l->wv,     &l->wo,
                                    &l->bq,        &l->bk,     &l->bv,       &l->bo,     &l->q_norm,
                                    &l->k_norm,    &l->post_attn_norm, &l->ffn_norm, &l->w_gate,
                                    &l->w_up,      &l->w_down, &l->b_gate,   &l->b_up,   &l->b_down,
                                    &l->post_ffn_norm};
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
