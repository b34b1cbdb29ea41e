/*
 * test_model.c — hyperparameters and tensor binding: the real stories260K, mkmodel files of
 * every weight type and architecture (with shapes and options of their own: head sizes,
 * partial RoPE, windows and patterns, soft-caps, RoPE scaling, fused tensors), the per-layer
 * window and RoPE llama.cpp would use, and the messages for each kind of refusal (unknown
 * architecture, key, scaling type or tensor, wrong shape or type, rules of one architecture).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mkmodel.h"
#include "model/dtype.h"
#include "model/model.h"
#include "tests/test_util.h"

/* A fresh temporary file name (the file itself is created by the caller). */
static void tm_tmpname(char *buf, size_t n, const char *tag)
{
    const char *d = getenv("TMPDIR");
    snprintf(buf, n, "%s/kvserve_model_%s_%d.gguf", d && *d ? d : "/tmp", tag, (int)getpid());
}

Test(model, stories260k_hparams)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    cr_assert_eq(access(path, R_OK), 0, "%s is missing (it is part of the repository)", path);
    model *m;
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
    const model_hparams *hp = &m->hp;
    cr_assert_eq(hp->arch, MODEL_ARCH_LLAMA);
    cr_assert_str_eq(hp->arch_name, "llama");
    cr_assert_str_eq(hp->name, "stories260K");
    cr_assert_eq(hp->n_embd, 64);
    cr_assert_eq(hp->n_layers, 5);
    cr_assert_eq(hp->n_heads, 8);
    cr_assert_eq(hp->n_kv_heads, 4);
    cr_assert_eq(hp->head_dim, 8);
    cr_assert_eq(hp->n_ff, 172);
    cr_assert_eq(hp->n_vocab, 512);
    cr_assert_eq(hp->n_ctx_train, 512);
    cr_assert_eq(hp->rope_dims, 8);
    cr_assert_eq(hp->rope_base, 10000.0f);
    cr_assert_eq(hp->rope_neox, 0);
    cr_assert(fabsf(hp->rms_eps - 1e-5f) < 1e-9f);
    cr_assert_eq(hp->tied_output, 0);
    cr_assert_eq(hp->file_type, 0);
    cr_assert_neq(m->output.data, m->tok_embd.data);
    cr_assert_eq(m->layers[4].w_down.ne[0], 172);
    cr_assert_eq(m->layers[4].w_down.ne[1], 64);
    cr_assert_eq(m->layers[0].wk.ne[1], 32);
    cr_assert_null(m->layers[0].bq.data);
    cr_assert_str_eq(m->layers[3].w_up.name, "blk.3.ffn_up.weight");
    cr_assert_eq(model_weight_bytes(m), 292800u * 4);
    /* output.weight is a copy of the embedding in this file */
    float a[64], b[64];
    model_tensor_row_f32(&m->tok_embd, 300, a);
    model_tensor_row_f32(&m->output, 300, b);
    cr_assert_arr_eq(a, b, sizeof a);
    model_destroy(m);
}

/* Writes a small model of the given arch and type; returns its path in buf. */
static void tm_write(char *buf, size_t n, const char *arch, int type, int tied)
{
    char tag[32];
    snprintf(tag, sizeof tag, "%s%d%d", arch, type, tied);
    tm_tmpname(buf, n, tag);
    mkm_params p;
    mkm_params_default(&p);
    p.arch = arch;
    p.type = type;
    p.tied = tied;
    p.dim = 64;
    p.heads = 4;
    p.kv_heads = 2;
    p.ffn = 96;
    p.vocab = 320;
    p.context = 256;
    char err[512];
    cr_assert_eq(mkm_write(buf, &p, err, sizeof err), 0, "%s", err);
}

Test(model, mkmodel_every_type_binds)
{
    const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0};
    const char *arches[] = {"llama", "qwen2"};
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < 4; t++) {
            char path[512], err[512];
            tm_write(path, sizeof path, arches[a], types[t], t == 1);
            model *m;
            cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
            const model_hparams *hp = &m->hp;
            cr_assert_eq(hp->arch, a == 0 ? MODEL_ARCH_LLAMA : MODEL_ARCH_QWEN2);
            cr_assert_eq(hp->rope_neox, a == 1);
            cr_assert(hp->n_embd == 64 && hp->n_heads == 4 && hp->n_kv_heads == 2 &&
                      hp->head_dim == 16 && hp->n_ff == 96 && hp->n_vocab == 320 &&
                      hp->n_ctx_train == 256 && hp->n_layers == 2 && hp->rope_dims == 16);
            cr_assert_eq(hp->tied_output, t == 1);
            if (t == 1) cr_assert_eq(m->output.data, m->tok_embd.data);
            cr_assert_eq(m->layers[1].wq.type, types[t]);
            cr_assert_eq(m->layers[1].attn_norm.type, DT_F32);
            cr_assert_eq(m->layers[0].bk.data != NULL, a == 1, "qwen2 has biases, llama none");
            /* norms are 1, weights look like normal(0, 0.02) */
            float row[96];
            model_tensor_row_f32(&m->layers[1].ffn_norm, 0, row);
            for (int i = 0; i < 64; i++) cr_assert_eq(row[i], 1.0f);
            double s = 0, s2 = 0;
            int n = 0;
            for (int r = 0; r < 96; r++) {
                model_tensor_row_f32(&m->layers[0].w_gate, r, row);
                for (int i = 0; i < 64; i++, n++) {
                    s += row[i];
                    s2 += (double)row[i] * row[i];
                }
            }
            double sd = sqrt(s2 / n - (s / n) * (s / n));
            cr_assert(fabs(s / n) < 0.002 && sd > 0.018 && sd < 0.022, "mean %g sd %g", s / n, sd);
            cr_assert_gt(model_weight_bytes(m), 0u);
            model_destroy(m);
            unlink(path);
        }
}

/* Writes p to a temporary file, loads it and returns the model (the file is unlinked). */
static model *tm_load_params(const mkm_params *p)
{
    char path[512], err[512];
    tu_write_mkmodel(p, "model", path, sizeof path);
    model *m;
    int rc = model_load(path, &m, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "%s: %s", p->arch, err);
    return m;
}

/* Every architecture, from mkmodel files of other shapes than the reference set, gets the
 * hyperparameters and per-layer numbers llama.cpp would use. */
Test(model, every_arch_binds_with_llamacpp_defaults)
{
    mkm_params p;
    mkm_params_default(&p);
    p.dim = 96, p.heads = 6, p.kv_heads = 3, p.ffn = 64, p.vocab = 300, p.context = 512, p.layers = 7;

    p.arch = "qwen3", p.head_dim = 20, p.tied = 1;
    model *m = tm_load_params(&p);
    cr_assert(m->hp.arch == MODEL_ARCH_QWEN3 && m->hp.qk_norm && m->hp.rope_neox && m->hp.head_dim == 20);
    cr_assert(m->layers[6].q_norm.ne[0] == 20 && m->layers[6].wq.ne[1] == 120 && m->hp.tied_output);
    cr_assert(fabsf(model_attn_scale(&m->hp) - 1.0f / sqrtf(20.0f)) < 1e-7f && !m->hp.swa_window);
    model_destroy(m);

    /* gemma2 defaults: window 4096 on every other layer, soft-caps 50 and 30, tied head */
    mkm_params_default(&p);
    p.dim = 96, p.heads = 6, p.kv_heads = 3, p.ffn = 64, p.vocab = 300, p.context = 512, p.layers = 7;
    p.arch = "gemma2";
    m = tm_load_params(&p);
    const model_hparams *hp = &m->hp;
    cr_assert(hp->swa_window == 4096 && hp->swa_pattern == 2 && hp->attn_softcap == 50.0f && hp->final_softcap == 30.0f);
    cr_assert(hp->tied_output && hp->post_norms && hp->ffn_act == MODEL_ACT_GELU_TANH && !hp->qk_norm);
    cr_assert(hp->embd_scale == sqrtf(96.0f) && model_n_swa_layers(hp) == 4);
    for (int l = 0; l < 7; l++) cr_assert_eq(model_layer_window(hp, l), l % 2 == 0 ? 4096 : 0, "layer %d", l);
    cr_assert(m->layers[3].post_attn_norm.data && m->layers[3].post_ffn_norm.data);
    model_destroy(m);

    /* gemma3: no window key, no sliding layers; with one, pattern 6 and base_swa 10000 by default;
     * RoPE scaling on the global layers only; the q scale of the 62-layer "27B" type */
    p.arch = "gemma3";
    m = tm_load_params(&p);
    cr_assert(m->hp.swa_window == 0 && model_n_swa_layers(&m->hp) == 0 && m->hp.final_softcap == 0);
    cr_assert(m->hp.qk_norm && m->layers[0].q_norm.data && !m->hp.tied_output);
    model_destroy(m);
    p.swa_window = 32, p.rope_base = 1e6f, p.rope_scaling = "linear", p.rope_factor = 8, p.tied = 1;
    m = tm_load_params(&p);
    hp = &m->hp;
    cr_assert(hp->swa_pattern == 6 && model_n_swa_layers(hp) == 6 && model_layer_window(hp, 5) == 0);
    model_rope r;
    model_layer_rope(hp, 4, &r);
    cr_assert(r.base == 10000.0f && r.freq_scale == 1.0f);
    model_layer_rope(hp, 5, &r);
    cr_assert(r.base == 1e6f && r.freq_scale == 0.125f && r.ext_factor == 0);
    cr_assert(fabsf(model_attn_scale(hp) - 1.0f / sqrtf(16.0f)) < 1e-7f);
    model_destroy(m);
    p.layers = 62, p.head_dim = 32, p.dim = 64, p.heads = 4, p.kv_heads = 2;
    m = tm_load_params(&p);
    cr_assert(fabsf(model_attn_scale(&m->hp) - 1.0f / sqrtf(16.0f)) < 1e-7f, "27B: 1/sqrt(n_embd / n_head)");
    model_destroy(m);

    /* phi3: fused tensors become views of their rows; a sliding_window key is not applied */
    mkm_params_default(&p);
    p.arch = "phi3", p.dim = 64, p.heads = 4, p.kv_heads = 1, p.ffn = 48, p.vocab = 300, p.rope_dims = 10;
    m = tm_load_params(&p);
    const model_layer *L = &m->layers[1];
    cr_assert(m->hp.fused_qkv && m->hp.fused_gate_up && m->hp.rope_dims == 10 && model_n_swa_layers(&m->hp) == 0);
    cr_assert(L->wq.ne[1] == 64 && L->wk.ne[1] == 16 && L->wv.ne[1] == 16);
    cr_assert((const char *)L->wk.data == (const char *)L->wq.data + 64 * L->wq.row_bytes);
    cr_assert((const char *)L->wv.data == (const char *)L->wk.data + 16 * L->wk.row_bytes);
    cr_assert((const char *)L->w_up.data == (const char *)L->w_gate.data + 48 * L->w_gate.row_bytes);
    cr_assert_eq(model_weight_bytes(m), (size_t)4 * (64 * 300 * 2 + 64 + 2 * (64 + 64 * 96 + 64 * 64 + 64 + 64 * 96 + 48 * 64)));
    model_destroy(m);

    /* llama: rope_freqs and YaRN (ggml's corrected dims and attention factor) */
    mkm_params_default(&p);
    p.rope_freqs = 1, p.rope_scaling = "yarn", p.rope_factor = 4, p.rope_ctx_orig = 512, p.rope_base = 500000;
    p.dim = 256, p.heads = 4, p.kv_heads = 2, p.ffn = 32;
    m = tm_load_params(&p);
    model_layer_rope(&m->hp, 0, &r);
    /* the reference set's numbers: c(32) = 2.279 → 2, c(1) = 10.731 → 11, gain 1 + 0.1 ln 4 */
    cr_assert(r.corr_lo == 2.0f && r.corr_hi == 11.0f && r.ext_factor == 1.0f && r.freq_scale == 0.25f);
    cr_assert(fabsf(r.mscale - 1.138629f) < 1e-6f, "mscale %g", (double)r.mscale);
    cr_assert(m->hp.has_rope_freqs && m->rope_freqs.ne[0] == 32);
    float ff[32];
    model_tensor_row_f32(&m->rope_freqs, 0, ff);
    cr_assert(ff[0] == 1.0f && ff[31] == 8.0f && fabsf(ff[15] - 1.5534146f) < 1e-5f, "Llama 3.1 factors");
    model_destroy(m);
}

/* Loads a patched copy of the file at path (bytes `from` replaced with `to` at their first
 * occurrence, skip'th occurrence when skip > 0) and expects failure mentioning want. */
static void tm_expect(const char *path, const char *from, const void *to, size_t n, size_t shift,
                      const char *want)
{
    FILE *fp = fopen(path, "rb");
    cr_assert(fp);
    fseek(fp, 0, SEEK_END);
    size_t size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(size);
    cr_assert_eq(fread(buf, 1, size, fp), size);
    fclose(fp);
    size_t fl = strlen(from), at = SIZE_MAX;
    for (size_t i = 0; i + fl <= size; i++)
        if (!memcmp(buf + i, from, fl)) {
            at = i;
            break;
        }
    cr_assert_neq(at, SIZE_MAX, "'%s' not in file", from);
    memcpy(buf + at + shift, to, n);
    gguf_file *f;
    char err[512];
    cr_assert_eq(gguf_open_mem(buf, size, &f, err, sizeof err), 0, "%s", err);
    model *m;
    int rc = model_load_gguf(f, "patched.gguf", &m, err, sizeof err);
    cr_assert_neq(rc, 0, "expected failure: %s", want);
    cr_assert_null(m);
    gguf_close(f);
    cr_assert(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert(strstr(err, "patched.gguf: ") == err, "names the file: %s", err);
    free(buf);
}

Test(model, refusals_name_the_problem)
{
    char path[512];
    tm_write(path, sizeof path, "qwen2", DT_F32, 0);
    /* a missing tensor (renamed) */
    tm_expect(path, "blk.1.ffn_up.weight", "X", 1, 0, "missing tensor 'blk.1.ffn_up.weight'");
    /* a tensor no binding takes (q/k/v biases are optional, so the renamed one is just unused) */
    tm_expect(path, "blk.0.attn_k.bias", "X", 1, 0, "tensor 'Xlk.0.attn_k.bias' is not used by architecture qwen2");
    /* a key of the architecture that kvserve does not implement */
    tm_expect(path, "qwen2.vocab_size", "qwen2.vocab_sizX", 16, 0,
              "hyperparameter 'qwen2.vocab_sizX' is not implemented");
    /* wrong shape: feed_forward_length says 97 */
    uint32_t v = 97;
    tm_expect(path, "qwen2.feed_forward_length", &v, 4, 25 + 4,
              "tensor 'blk.0.ffn_gate.weight' has shape [64, 96, 1, 1], expected [64, 97]");
    /* unsupported tensor type: attn_q's type becomes MXFP4 (entry: name, n_dims, ne[2], type);
     * the message names the tensor, its type and what is supported */
    v = DT_MXFP4;
    tm_expect(path, "blk.0.attn_q.weight", &v, 4, 19 + 4 + 16,
              "tensor 'blk.0.attn_q.weight' has type MXFP4 (39); kvserve supports F32, F16");
    tm_expect(path, "blk.0.attn_q.weight", &v, 4, 19 + 4 + 16, "Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS weights");
    /* a norm that is not F32 */
    v = DT_F16;
    tm_expect(path, "blk.0.attn_norm.weight", &v, 4, 22 + 4 + 8, "only F32 norms and biases");
    /* unsupported architecture */
    tm_expect(path, "qwen2\x0c", "qwen9", 5, 0, "unsupported architecture 'qwen9'");
    /* qwen2 rotates whole heads (llama.cpp asserts n_rot == head size) */
    v = 8;
    tm_expect(path, "qwen2.rope.dimension_count", &v, 4, 26 + 4, "rope.dimension_count 8 differs from the head size 16");
    /* heads not a multiple of kv heads */
    v = 3;
    tm_expect(path, "qwen2.attention.head_count_kv", &v, 4, 29 + 4, "not a multiple of 3 kv heads");
    unlink(path);
    /* model_load of something that is not there */
    model *m;
    char err[512];
    cr_assert_neq(model_load("no/such/model.gguf", &m, err, sizeof err), 0);
    cr_assert(strstr(err, "no/such/model.gguf"), "%s", err);
}

/* Loads p's file with every occurrence of `from` replaced by `to` (same length); returns the
 * load's result, the message in err. */
static int tm_load_patched(const mkm_params *p, const char *from, const char *to, char *err, size_t n)
{
    char path[512];
    tu_write_mkmodel(p, "patch", path, sizeof path);
    size_t size;
    uint8_t *buf = (uint8_t *)tu_read_file(path, &size);
    unlink(path);
    cr_assert_not_null(buf);
    size_t fl = strlen(from);
    cr_assert_eq(fl, strlen(to));
    for (size_t i = 0; i + fl <= size; i++)
        if (!memcmp(buf + i, from, fl)) memcpy(buf + i, to, fl);
    gguf_file *f;
    cr_assert_eq(gguf_open_mem(buf, size, &f, err, n), 0, "%s", err);
    model *m;
    int rc = model_load_gguf(f, "patched.gguf", &m, err, n);
    if (rc) gguf_close(f);
    else model_destroy(m);
    free(buf);
    return rc;
}

/* RoPE scaling types llama.cpp knows but kvserve does not implement, unknown ones, and the
 * architecture rules llama.cpp enforces are refusals with a message naming them. */
Test(model, refusals_of_scaling_types_and_arch_rules)
{
    mkm_params p;
    mkm_params_default(&p);
    char err[512], path[512];
    model *m;
    const char *bad[] = {"longrope", "dynamic"};
    for (int i = 0; i < 2; i++) {
        p.rope_scaling = bad[i];
        tu_write_mkmodel(&p, "scaling", path, sizeof path);
        cr_assert_neq(model_load(path, &m, err, sizeof err), 0);
        unlink(path);
        char want[96];
        snprintf(want, sizeof want, "rope scaling type '%s'", bad[i]);
        cr_assert(strstr(err, want) && strstr(err, "not supported"), "%s", err);
    }
    /* "none" ignores a factor; "linear" without a factor is no scaling (llama.cpp's default) */
    p.rope_scaling = "none", p.rope_factor = 4;
    m = tm_load_params(&p);
    cr_assert_eq(m->hp.rope_freq_scale, 1.0f);
    model_destroy(m);
    p.rope_scaling = "linear", p.rope_factor = 0;
    m = tm_load_params(&p);
    cr_assert_eq(m->hp.rope_freq_scale, 1.0f);
    model_destroy(m);
    /* gemma2 always ties its LM head: an output.weight is a weight kvserve would ignore */
    mkm_params_default(&p);
    p.arch = "gemma3";
    cr_assert_neq(tm_load_patched(&p, "gemma3", "gemma2", err, sizeof err), 0);
    cr_assert(strstr(err, "tensor 'output.weight' is not used by architecture gemma2") && strstr(err, "ties"), "%s",
              err);
    /* rope_freqs belongs to llama: in a qwen2 file it is a weight nobody would apply */
    mkm_params_default(&p);
    p.rope_freqs = 1;
    cr_assert_neq(tm_load_patched(&p, "llama", "qwen2", err, sizeof err), 0);
    cr_assert(strstr(err, "tensor 'rope_freqs.weight' is not used by architecture qwen2"), "%s", err);
    mkm_params_default(&p);
    p.arch = "gemma2", p.attn_softcap = 20;
    m = tm_load_params(&p);
    cr_assert_eq(m->hp.attn_softcap, 20.0f);
    model_destroy(m);
    /* a layer without its fused attn_qkv falls back to separate q/k/v and names the first missing */
    mkm_params_default(&p);
    p.fused_qkv = 1;
    cr_assert_neq(tm_load_patched(&p, "blk.1.attn_qkv.weight", "blk.1.attn_qkv.weighX", err, sizeof err), 0);
    cr_assert(strstr(err, "missing tensor 'blk.1.attn_q.weight'"), "%s", err);
}

Test(model, vocab_only_file_is_refused_cleanly)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-gpt-2.gguf", tu_shared_dir());
    if (access(path, R_OK)) cr_skip_test("vocab files not found under KVSERVE_SHARED");
    model *m;
    cr_assert_neq(model_load(path, &m, err, sizeof err), 0);
    cr_assert(strstr(err, "unsupported architecture 'gpt2'"), "%s", err);
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-llama-spm.gguf", tu_shared_dir());
    cr_assert_neq(model_load(path, &m, err, sizeof err), 0);
    cr_assert(strstr(err, "missing tensor 'token_embd.weight'"), "%s", err);
}

/* Embedding and reranker files: pooling_type read, a classification head bound for any arch
 * (llama.cpp's BERT-style cls + cls.output, or Qwen3-Reranker's yes/no cls.output with its
 * labels), and a pooling type llama.cpp does not know refused. */
Test(model, pooling_type_and_classification_heads)
{
    const char *archs[] = {"llama", "qwen3", "qwen2"};
    const char *pools[] = {"rank", "rank", "last"};
    for (int a = 0; a < 3; a++) {
        mkm_params p;
        mkm_params_default(&p);
        p.arch = archs[a];
        p.pooling = pools[a];
        char path[512], err[512];
        tu_write_mkmodel(&p, "pool", path, sizeof path);
        model *m;
        cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
        cr_assert_eq(m->hp.pooling, a < 2 ? MODEL_POOL_RANK : MODEL_POOL_LAST);
        cr_assert_eq(m->hp.n_cls_out, a == 1 ? 2 : 1, "qwen3: the labels yes / no");
        cr_assert_eq(m->cls.data != NULL, a == 0);
        cr_assert_eq(m->cls_b.data != NULL, a == 0);
        cr_assert_eq(m->cls_out.data != NULL, a < 2);
        if (a < 2) cr_assert(m->cls_out.ne[0] == 64 && m->cls_out.ne[1] == (a == 1 ? 2 : 1));
        char feats[512];
        model_features(&m->hp, feats, sizeof feats);
        cr_assert(strstr(feats, a < 2 ? "reranker" : "embeddings (last pooling)"), "%s", feats);
        model_destroy(m);
        if (a == 0) {
            uint32_t v = 9;
            tm_expect(path, "llama.pooling_type", &v, 4, 18 + 4, "is not a pooling type llama.cpp knows");
            /* cls.bias without cls.weight */
            tm_expect(path, "cls.weight", "X", 1, 0, "a classifier bias (cls.bias / cls.output.bias) without its weight");
        }
        unlink(path);
    }
    cr_assert_eq(model_pooling_by_name("cls"), MODEL_POOL_CLS);
    cr_assert_eq(model_pooling_by_name("max"), -1);
    cr_assert_str_eq(model_pooling_name(MODEL_POOL_MEAN), "mean");
    cr_assert_null(model_pooling_name(7));
}
