/*
 * test_model.c — hyperparameters and tensor binding: the real stories260K, mkmodel files of
 * every weight type and architecture, and the messages for each kind of refusal.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/mkmodel.h"
#include "engine/dtype.h"
#include "engine/model.h"
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
    tm_expect(path, "blk.0.attn_k.bias", "X", 1, 0, "missing tensor 'blk.0.attn_k.bias'");
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
    tm_expect(path, "qwen2\x0c", "qwen3", 5, 0, "unsupported architecture 'qwen3'");
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
