/*
 * test_forward_fused.c — forward.c's fused-op path (engine/backend.h's optional ops) on the CPU.
 *
 * The CPU backend has none of the fused ops, so the path the CUDA backend takes through the
 * graph (Q/K/V and gate/up stacked at upload, the residual add deferred into the next norm and
 * the last one into the LM head, decode steps padded to a power-of-two row count) would go
 * untested without a GPU. Here a CPU backend is given the fused ops, each composed of the CPU's
 * own ops (so its arithmetic is the plain graph's), a weight_upload_cat that stacks on the host,
 * and a begin that pads pure-decode steps as the CUDA backend does; its logits must equal the
 * plain CPU backend's for every architecture's features (biases, q/k norms, post norms, GeGLU,
 * soft-caps, windows, fused file tensors, partial RoPE), quantised weights, and a file whose
 * Q/K/V and gate/up types differ (stacked in two pieces, and apart); and so must the hidden
 * states pooled sequences read (fwd_hidden adds the branch the fused LM head left pending). What forward.c decides —
 * which op runs, on which rows, with which pending branch — is what this test checks; the fused
 * kernels themselves are checked under emulation (cuda/check/dense_emu.cc).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "model/dtype.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "tests/test_util.h"

/* ---- the CPU backend with fused ops ---------------------------------------------------------- */

#define FF_MAX_BUFS 512
#define FF_PAD_INTS 4096

typedef struct ff_mock {
    be_ops ops;           /* the CPU's table with the fused ops set */
    const be_ops *cpu;    /* the CPU's own table (every fused op is composed of it) */
    void *bufs[FF_MAX_BUFS]; /* host stacks behind stacked weights (the CPU keeps views) */
    int n_bufs;
    const be_batch *cur;  /* the step being run (padded or not) */
    be_batch pad;
    int32_t pad_ints[FF_PAD_INTS];
    int padded_steps, stacks3, stacks2, calls[4]; /* add_rmsnorm, qkv, glu, lm_head */
} ff_mock;

static ff_mock ff;

/* Matrices stacked by rows, vectors concatenated as f32, in a host buffer the weight views. */
static int ff_upload_cat(backend *be, const model_tensor *const *src, int n, be_weight *dst)
{
    int vec = src[0]->ne[1] == 1;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!vec && (src[i]->type != src[0]->type || src[i]->ne[0] != src[0]->ne[0])) return -EINVAL;
        total += vec ? src[i]->ne[0] : src[i]->ne[1];
    }
    model_tensor t = {.name = "stack", .type = vec ? DT_F32 : src[0]->type};
    t.ne[0] = vec ? total : src[0]->ne[0];
    t.ne[1] = vec ? 1 : total;
    t.row_bytes = dt_row_bytes(t.type, t.ne[0]);
    char *buf = malloc(t.row_bytes * (size_t)t.ne[1]);
    cr_assert(buf && ff.n_bufs < FF_MAX_BUFS);
    ff.bufs[ff.n_bufs++] = buf;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (vec) {
            model_tensor_row_f32(src[i], 0, (float *)buf + off);
            off += (size_t)src[i]->ne[0];
        } else {
            memcpy(buf + off, src[i]->data, src[i]->row_bytes * (size_t)src[i]->ne[1]);
            off += src[i]->row_bytes * (size_t)src[i]->ne[1];
        }
    }
    t.data = buf;
    if (!vec) *(n == 3 ? &ff.stacks3 : &ff.stacks2) += 1;
    return ff.cpu->weight_upload(be, &t, dst);
}

static void ff_add_rmsnorm(backend *be, float *x, const void *y, const be_weight *w, float eps, int n, int dim, void *out)
{
    ff.calls[0]++;
    if (y) ff.cpu->add(be, x, y, (int64_t)n * dim);
    ff.cpu->rmsnorm(be, x, w, eps, n, dim, out);
}

/* dst [n][w] = columns c0 .. c0 + w of the stacked product whose pieces are prod[j] ([n][n_out[j]]). */
static void ff_columns(float *dst, float *const *prod, const int64_t *n_out, int n_w, int n, int64_t c0, int64_t w)
{
    int64_t start = 0;
    for (int j = 0; j < n_w; j++) {
        if (c0 >= start && c0 < start + n_out[j]) {
            for (int r = 0; r < n; r++)
                memcpy(dst + (size_t)r * w, prod[j] + (size_t)r * n_out[j] + (c0 - start), (size_t)w * 4);
            return;
        }
        start += n_out[j];
    }
    cr_assert_fail("column %lld outside the pieces", (long long)c0);
}

/* The products of the pieces of a stacked projection (with their biases). */
static void ff_pieces(backend *be, const void *x, int n, int n_w, const be_weight *const *w,
                      const be_weight *const *b, float **prod, int64_t *n_out)
{
    for (int j = 0; j < n_w; j++) {
        n_out[j] = w[j]->n_out;
        prod[j] = malloc((size_t)n * n_out[j] * 4);
        ff.cpu->matmul(be, x, n, w[j], b[j], prod[j]);
    }
}

static void ff_qkv(backend *be, int layer, const void *x, int n, const be_qkv *p, void *q)
{
    ff.calls[1]++;
    const int H = p->rope_q->n_heads, KVH = p->rope_k->n_heads, D = p->rope_q->head_dim;
    const int64_t qd = (int64_t)H * D, kvd = (int64_t)KVH * D;
    float *prod[3], *k = malloc((size_t)n * kvd * 4), *v = malloc((size_t)n * kvd * 4);
    int64_t n_out[3];
    ff_pieces(be, x, n, p->n_w, p->w, p->b, prod, n_out);
    ff_columns(q, prod, n_out, p->n_w, n, 0, qd);
    ff_columns(k, prod, n_out, p->n_w, n, qd, kvd);
    ff_columns(v, prod, n_out, p->n_w, n, qd + kvd, kvd);
    if (p->q_norm) ff.cpu->rmsnorm(be, q, p->q_norm, p->eps, n * H, D, q);
    if (p->k_norm) ff.cpu->rmsnorm(be, k, p->k_norm, p->eps, n * KVH, D, k);
    ff.cpu->rope(be, q, p->rope_q);
    ff.cpu->rope(be, k, p->rope_k);
    ff.cpu->store_kv(be, layer, k, v);
    for (int j = 0; j < p->n_w; j++) free(prod[j]);
    free(k), free(v);
}

static void ff_glu(backend *be, const void *x, int n, const be_glu *p, void *out)
{
    ff.calls[2]++;
    float *prod[2];
    int64_t n_out[2];
    ff_pieces(be, x, n, p->n_w, p->w, p->b, prod, n_out);
    int64_t nff = p->n_w == 1 ? n_out[0] / 2 : n_out[0];
    float *u = malloc((size_t)n * nff * 4);
    ff_columns(out, prod, n_out, p->n_w, n, 0, nff);
    ff_columns(u, prod, n_out, p->n_w, n, nff, nff);
    if (p->gelu) ff.cpu->gelu_mul(be, out, u, (int64_t)n * nff);
    else ff.cpu->silu_mul(be, out, u, (int64_t)n * nff);
    for (int j = 0; j < p->n_w; j++) free(prod[j]);
    free(u);
}

static void ff_lm_head(backend *be, const float *x, const void *y, const be_weight *norm, float eps,
                       const be_weight *w, const be_weight *bias, float softcap, float *logits)
{
    ff.calls[3]++;
    const be_batch *b = ff.cur;
    int dim = (int)w->n_in;
    float *h = malloc((size_t)b->n_logits * dim * 4);
    for (int j = 0; j < b->n_logits; j++)
        for (int i = 0; i < dim; i++) {
            size_t s = (size_t)b->logit_rows[j] * dim + i;
            h[(size_t)j * dim + i] = x[s] + (y ? ((const float *)y)[s] : 0.0f);
        }
    ff.cpu->rmsnorm(be, h, norm, eps, b->n_logits, dim, h);
    ff.cpu->matmul(be, h, b->n_logits, w, bias, logits);
    if (softcap > 0) ff.cpu->softcap(be, logits, softcap, (int64_t)b->n_logits * w->n_out);
    free(h);
}

/* Pads a pure-decode step of one layer group to a power of two rows, as the CUDA backend does:
 * the extra sequences read one entry of block 0 and store nothing. */
static int ff_begin(backend *be, const be_batch *b)
{
    int n = b->n_tokens, rows = 1;
    while (rows < n) rows *= 2;
    int pure = n == b->n_seqs && n == b->n_logits && b->n_kv <= 1;
    for (int i = 0; pure && i < n; i++) pure = b->q_start[i] == i && b->logit_rows[i] == i;
    if (!pure || rows == n || rows > be->pad_rows_max || (size_t)rows * (6 + b->kv[0].bt_stride) > FF_PAD_INTS) {
        ff.cur = b;
        return ff.cpu->begin(be, b);
    }
    int32_t *o = ff.pad_ints, st = b->kv[0].bt_stride;
    be_batch *p = &ff.pad;
    memset(p, 0, sizeof *p);
    int32_t *tok = o, *pos = o + rows, *qs = o + 2 * rows, *lr = o + 3 * rows + 1, *sl = o + 4 * rows + 1;
    int32_t *ctx = o + 5 * rows + 1, *bt = o + 6 * rows + 1;
    for (int i = 0; i < rows; i++) {
        int real = i < n;
        tok[i] = real ? b->tokens[i] : 0, pos[i] = real ? b->positions[i] : 0, qs[i] = i, lr[i] = i;
        sl[i] = real ? b->kv[0].slots[i] : -1, ctx[i] = real ? b->kv[0].ctx_len[i] : 1;
        for (int j = 0; j < st; j++) bt[(size_t)i * st + j] = real ? b->kv[0].block_table[(size_t)i * st + j] : 0;
    }
    qs[rows] = rows;
    *p = (be_batch){.n_tokens = rows, .tokens = tok, .positions = pos, .n_seqs = rows, .q_start = qs,
                    .n_logits = rows, .logit_rows = lr, .n_kv = 1,
                    .kv = {{.slots = sl, .ctx_len = ctx, .block_table = bt, .bt_stride = st}}};
    ff.cur = p;
    ff.padded_steps++;
    return ff.cpu->begin(be, p); /* sets step_rows to the padded rows */
}

/* A CPU backend whose table is the CPU's plus the fused ops above. */
static backend *ff_backend(void)
{
    backend *be = cpu_backend_create(2);
    cr_assert_not_null(be);
    memset(&ff, 0, sizeof ff);
    ff.cpu = be->ops;
    ff.ops = *be->ops;
    ff.ops.weight_upload_cat = ff_upload_cat;
    ff.ops.add_rmsnorm = ff_add_rmsnorm;
    ff.ops.qkv = ff_qkv;
    ff.ops.glu = ff_glu;
    ff.ops.lm_head = ff_lm_head;
    ff.ops.begin = ff_begin;
    be->ops = &ff.ops;
    return be;
}

static void ff_backend_destroy(backend *be)
{
    be->ops = ff.cpu;
    be_destroy(be);
    for (int i = 0; i < ff.n_bufs; i++) free(ff.bufs[i]);
    ff.n_bufs = 0;
}

/* ---- the comparison ------------------------------------------------------------------------ */

#define FF_SEQS 3
#define FF_STEPS 9

/* Three sequences: prompts in chunks (mixed with each other), then decode steps of 3, 2 and 1
 * sequences (3 is padded to 4). The logits of every row on both backends; returns the worst
 * |Δ| over max |logit| of a row. */
static double ff_compare(const model *m, int kv_dtype)
{
    const int bs = 16, V = m->hp.n_vocab, stride = 8;
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, bs, kv_dtype);
    int32_t n_blocks = FF_SEQS * stride;
    char err[512];
    backend *plain = cpu_backend_create(2), *fused = ff_backend();
    fwd *f[2] = {fwd_create(m, plain, &g, &n_blocks, 64, 64, err, sizeof err), NULL};
    cr_assert_not_null(f[0], "%s", err);
    f[1] = fwd_create(m, fused, &g, &n_blocks, 64, 64, err, sizeof err);
    cr_assert_not_null(f[1], "%s", err);
    int32_t toks[FF_SEQS][64], bt[FF_SEQS * 8], fed[FF_SEQS] = {0}, prompt[FF_SEQS] = {19, 7, 12};
    int32_t decode[FF_SEQS] = {6, 3, 1}; /* decode steps of each: steps of 3 (padded to 4), 2 and 1 */
    uint64_t rng = 0x66757365640aULL;
    for (int s = 0; s < FF_SEQS; s++)
        for (int i = 0; i < 64; i++) toks[s][i] = 3 + (int32_t)(tu_xorshift(&rng) % (uint64_t)(V - 3));
    for (int i = 0; i < FF_SEQS * 8; i++) bt[i] = (i * 5 + 3) % (FF_SEQS * 8);
    float *lg[2] = {malloc((size_t)64 * V * 4), malloc((size_t)64 * V * 4)};
    double worst = 0;
    for (int step = 0; step < FF_STEPS; step++) {
        int32_t tk[64], pos[64], slots[64], rows[64], q_start[FF_SEQS + 1], ctx[FF_SEQS], btb[FF_SEQS * 8];
        int n = 0, ns = 0;
        for (int s = 0; s < FF_SEQS; s++) {
            /* steps 0 and 1: the prompts in two chunks, mixed; then one decode token a step */
            int cnt = step == 0 ? prompt[s] / 2 : step == 1 ? prompt[s] - prompt[s] / 2 : step - 2 < decode[s];
            if (!cnt) continue;
            q_start[ns] = n;
            memcpy(btb + ns * 8, bt + s * 8, 8 * 4);
            for (int i = 0; i < cnt; i++, n++) {
                tk[n] = toks[s][fed[s]], pos[n] = fed[s];
                slots[n] = bt[s * 8 + fed[s] / bs] * bs + fed[s] % bs;
                rows[n] = n;
                fed[s]++;
            }
            ctx[ns++] = fed[s];
        }
        if (!ns) continue;
        q_start[ns] = n;
        be_batch b = {.n_tokens = n, .tokens = tk, .positions = pos, .n_seqs = ns, .q_start = q_start,
                      .n_logits = n, .logit_rows = rows, .n_kv = 1,
                      .kv = {{.slots = slots, .ctx_len = ctx, .block_table = btb, .bt_stride = 8}}};
        for (int k = 0; k < 2; k++) {
            for (size_t i = 0; i < (size_t)64 * V; i++) lg[k][i] = NAN;
            cr_assert_eq(fwd_run(f[k], &b, lg[k]), 0);
        }
        for (int r = 0; r < n; r++) {
            double d = 0, mx = 1e-6;
            for (int v = 0; v < V; v++) {
                float x = lg[1][(size_t)r * V + v], y = lg[0][(size_t)r * V + v];
                cr_assert(isfinite(x) && isfinite(y), "step %d row %d: logit %d not written", step, r, v);
                d = fmax(d, fabs((double)x - y));
                mx = fmax(mx, fabs((double)y));
            }
            worst = fmax(worst, d / mx);
        }
        cr_assert(isnan(lg[1][(size_t)n * V]), "rows past the batch's logit rows are not copied to the host");
        if (step == 0) { /* the pooled hidden states: the last branch is pending on the fused path */
            int dim = m->hp.n_embd;
            float *h[2] = {malloc((size_t)n * dim * 4), malloc((size_t)n * dim * 4)};
            for (int k = 0; k < 2; k++) cr_assert_eq(fwd_hidden(f[k], n, h[k]), 0);
            cr_assert(!memcmp(h[0], h[1], (size_t)n * dim * 4), "fwd_hidden differs on the fused path");
            free(h[0]), free(h[1]);
        }
    }
    cr_assert_gt(ff.padded_steps, 0, "a decode step of 3 sequences is padded to 4 rows");
    cr_assert(ff.calls[0] > 0 && ff.calls[1] > 0 && ff.calls[2] > 0 && ff.calls[3] > 0, "every fused op ran");
    for (int k = 0; k < 2; k++) fwd_destroy(f[k]), free(lg[k]);
    be_destroy(plain);
    ff_backend_destroy(fused);
    return worst;
}

static model *ff_model(const mkm_params *p, char *path, size_t n)
{
    tu_write_mkmodel(p, "fused", path, n);
    model *m = NULL;
    char err[512];
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "model_load: %s", err);
    return m;
}

static void ff_params(mkm_params *p, const char *arch, int type, uint64_t seed)
{
    mkm_params_default(p);
    p->arch = arch, p->dim = 64, p->layers = 2, p->heads = 8, p->kv_heads = 2, p->ffn = 96;
    p->vocab = 300, p->context = 128, p->type = type, p->seed = seed;
}

/* The fused path's logits are the plain path's: the same ops in the same order (the stacked
 * products are the same dot products), so within a few f32 roundings. */
#define FF_TOL 2e-6

static void ff_case(const mkm_params *p, int kv_dtype, int want_stack3, const char *what)
{
    char path[512];
    model *m = ff_model(p, path, sizeof path);
    double w = ff_compare(m, kv_dtype);
    printf("forward_fused %s: worst %.3g of max |logit| (Q/K/V stacked in 3: %d layers, gate/up: %d)\n", what, w,
           ff.stacks3, ff.stacks2);
    cr_assert(w <= FF_TOL, "%s: the fused path's logits differ by %g", what, w);
    if (want_stack3) cr_assert_eq(ff.stacks3, p->layers, "%s: Q, K and V stacked in every layer", what);
    cr_assert_eq(ff.stacks2, p->layers, "%s: gate and up stacked in every layer", what);
    model_destroy(m);
    unlink(path);
}

Test(forward_fused, llama_f16, .timeout = 60)
{
    mkm_params p;
    ff_params(&p, "llama", DT_F16, 31);
    ff_case(&p, KV_F32, 1, "llama F16");
}

Test(forward_fused, qwen2_biases_bf16, .timeout = 60)
{
    mkm_params p;
    ff_params(&p, "qwen2", DT_BF16, 32);
    ff_case(&p, KV_F16, 1, "qwen2 BF16 (q/k/v biases)");
}

Test(forward_fused, qwen3_qk_norm_q8_0, .timeout = 60)
{
    mkm_params p;
    ff_params(&p, "qwen3", DT_Q8_0, 33);
    p.head_dim = 16;
    ff_case(&p, KV_F32, 1, "qwen3 Q8_0 (q/k norms)");
}

Test(forward_fused, gemma2_post_norms_geglu_softcaps, .timeout = 60)
{
    mkm_params p;
    ff_params(&p, "gemma2", DT_F32, 34);
    p.head_dim = 16, p.rope_dims = 12, p.swa_window = 11, p.attn_softcap = 3.0f, p.final_softcap = 0.5f;
    p.norm_std = 0.3f, p.tied = 1;
    ff_case(&p, KV_F32, 1, "gemma2 F32 (post norms, GeGLU, soft-caps, window)");
}

Test(forward_fused, phi3_fused_tensors_bias, .timeout = 60)
{
    mkm_params p;
    ff_params(&p, "phi3", DT_F16, 35);
    p.rope_dims = 6, p.qkv_bias = 1;
    ff_case(&p, KV_F32, 1, "phi3 F16 (fused file tensors, bias, partial RoPE)");
}

/* V and up in another type than Q, K and gate: Q and K stack, V stays apart; gate and up stay
 * apart. */
Test(forward_fused, mixed_types_stack_in_pieces, .timeout = 60)
{
    mkm_params p;
    ff_params(&p, "llama", DT_F16, 36);
    char path[512];
    model *m = ff_model(&p, path, sizeof path);
    void *copies[16];
    int n_copies = 0;
    for (int l = 0; l < m->hp.n_layers; l++) {
        model_tensor *ts[2] = {&m->layers[l].wv, &m->layers[l].w_up};
        for (int k = 0; k < 2; k++) {
            model_tensor *t = ts[k];
            size_t n = (size_t)t->ne[0] * t->ne[1];
            uint16_t *b = malloc(n * 2);
            for (size_t i = 0; i < n; i++) b[i] = dt_f32_to_bf16(dt_f16_to_f32(((const uint16_t *)t->data)[i]));
            t->data = b, t->type = DT_BF16, t->row_bytes = dt_row_bytes(DT_BF16, t->ne[0]);
            copies[n_copies++] = b;
        }
    }
    double w = ff_compare(m, KV_F32);
    printf("forward_fused mixed types: worst %.3g (Q/K/V in 3: %d, pairs stacked: %d)\n", w, ff.stacks3, ff.stacks2);
    cr_assert(w <= FF_TOL, "mixed types: the fused path's logits differ by %g", w);
    cr_assert_eq(ff.stacks3, 0, "Q/K/V of two types are not one stack");
    cr_assert_eq(ff.stacks2, m->hp.n_layers, "[Wq; Wk] stacked, gate and up apart");
    for (int i = 0; i < n_copies; i++) free(copies[i]);
    model_destroy(m);
    unlink(path);
}
