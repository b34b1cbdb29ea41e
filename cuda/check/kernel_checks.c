/*
 * kernel_checks.c — every CUDA backend op against the CPU backend (or a float64 reference), on
 * random non-zero inputs, with the output poisoned first so an unwritten element fails.
 *
 * Included (not linked) by tests/test_cuda.c (Criterion, small sizes) and by
 * cuda/check/gpu_check.c (realistic sizes, a table of results), so both run the same checks.
 * Uses only engine/backend.h and cuda/cuda_backend.h (and, for the whole-model check of every
 * architecture, engine/forward.h and the synthetic-model writer model/mkmodel.h): no CUDA headers,
 * so it compiles wherever the backend's C interface does. Each check returns a kc_result: the relative error
 * ‖gpu − ref‖ / ‖ref‖ (float64), its tolerance and a note; NaN counts as a failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_backend.h"
#include "cuda/kv_layout.h"
#include "cuda/quant_int.h"
#include "engine/backend.h"
#include "model/dtype.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "model/mkmodel.h"

typedef struct kc_ctx {
    backend *gpu;  /* the CUDA backend under test (borrowed) */
    backend *cpu;  /* the reference CPU backend (borrowed) */
    uint64_t rng;  /* xorshift state; the caller prints the seed */
    int big;       /* 1: realistic sizes (gpu-check); 0: small and fast (unit tests) */
} kc_ctx;

typedef struct kc_result {
    char name[64];
    double err;    /* relative error (or error / bound where a check says so), INFINITY on a failure to run */
    double tol;
    int ok;
    char note[128];
} kc_result;

static const float kc_poison = 1e30f;

static uint64_t kc_next(kc_ctx *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

static int kc_int(kc_ctx *c, int lo, int hi) /* [lo, hi] */
{
    return lo + (int)(kc_next(c) % (uint64_t)(hi - lo + 1));
}

static float kc_unif(kc_ctx *c) /* [-1, 1) */
{
    return (float)((kc_next(c) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static void kc_fill(kc_ctx *c, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) x[i] = kc_unif(c) * scale;
}

static int kc_is_cuda(const backend *be)
{
    return !strcmp(be->name, "cuda");
}

/* Backend memory holding a copy of host x[n] (or poison when x is NULL). NULL when out of memory. */
static float *kc_put(backend *be, const float *x, size_t n)
{
    float *d = be_alloc_f32(be, n); /* n floats whatever the activation type */
    if (!d) return NULL;
    float *tmp = NULL;
    if (!x) {
        tmp = malloc(n * sizeof *tmp);
        if (!tmp) return d;
        for (size_t i = 0; i < n; i++) tmp[i] = kc_poison;
        x = tmp;
    }
    if (kc_is_cuda(be)) cuda_upload_f32(be, d, x, n);
    else memcpy(d, x, n * sizeof *d);
    free(tmp);
    return d;
}

static void kc_set(backend *be, float *d, const float *x, size_t n)
{
    if (kc_is_cuda(be)) cuda_upload_f32(be, d, x, n);
    else memcpy(d, x, n * sizeof *d);
}

static float *kc_get(backend *be, const float *d, size_t n)
{
    float *h = malloc(n * sizeof *h);
    if (h && be->ops->to_host(be, d, n, h)) {
        free(h);
        return NULL;
    }
    return h;
}

/* Activations: backend memory holding host x[n] in the backend's activation type (rounded to
 * nearest even; poison when x is NULL), and back as f32. */
static void *kc_put_act(backend *be, const float *x, size_t n)
{
    if (be->act_type == DT_F32) return kc_put(be, x, n);
    void *d = be->ops->alloc(be, n);
    float *tmp = malloc(n * sizeof *tmp);
    if (!d || !tmp) {
        free(tmp);
        return d;
    }
    for (size_t i = 0; i < n; i++) tmp[i] = x ? x[i] : kc_poison;
    cuda_upload_act(be, d, tmp, n);
    free(tmp);
    return d;
}

static float *kc_get_act(backend *be, const void *d, size_t n)
{
    if (be->act_type == DT_F32) return kc_get(be, (const float *)d, n);
    float *h = malloc(n * sizeof *h);
    if (h && cuda_download_act(be, d, n, h)) {
        free(h);
        return NULL;
    }
    return h;
}

/* kc_put for a table of putters beside kc_put_act. */
static void *kc_put_f32(backend *be, const float *x, size_t n)
{
    return kc_put(be, x, n);
}

/* x as the backend's activations hold it: rounded to bf16 unless they are f32. */
static void kc_round_act(const backend *be, float *x, size_t n)
{
    if (be->act_type != DT_F32)
        for (size_t i = 0; i < n; i++) x[i] = dt_bf16_to_f32(dt_f32_to_bf16(x[i]));
}

static double kc_relerr(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || a[i] == kc_poison) return INFINITY;
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static kc_result kc_res(const char *name, double err, double tol, const char *note)
{
    kc_result r;
    snprintf(r.name, sizeof r.name, "%s", name);
    r.err = err;
    r.tol = tol;
    r.ok = err <= tol;
    snprintf(r.note, sizeof r.note, "%s", note ? note : "");
    return r;
}

/* ---- random weights ------------------------------------------------------------------------- */

typedef struct kc_tensor {
    model_tensor t;
    void *mem;  /* owned */
    char name[32];
} kc_tensor;

/* Every weight type the backends take, for the checks that loop over them. */
static const int kc_weight_types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1,
                                      DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS};
#define KC_N_WEIGHT_TYPES (int)(sizeof kc_weight_types / sizeof kc_weight_types[0])

/* Inputs per row of a matmul or embedding check of the given type: n rounded up to the type's
 * block (the K-quants need multiples of 256). */
static int kc_n_in(int type, int n)
{
    int be = dt_block_elems(type);
    return (n + be - 1) / be * be;
}

/* A random n_out × n_in tensor of the given type, values in [-scale, scale) (the quantised types
 * other than Q8_0: random blocks whose f16 scales put the values in about that range). */
static int kc_tensor_random(kc_ctx *c, kc_tensor *kt, int type, int64_t n_in, int64_t n_out, float scale)
{
    memset(kt, 0, sizeof *kt);
    snprintf(kt->name, sizeof kt->name, "w%s", dt_name(type));
    size_t rb = dt_row_bytes(type, n_in);
    kt->mem = malloc(rb * (size_t)n_out);
    float *row = malloc((size_t)n_in * sizeof *row);
    if (!kt->mem || !row) {
        free(row);
        free(kt->mem);
        return -1;
    }
    int quant = dt_block_elems(type) > 1 && type != DT_Q8_0;
    for (int64_t r = 0; r < n_out && quant; r++) {
        uint8_t *dst = (uint8_t *)kt->mem + (size_t)r * rb;
        for (size_t i = 0; i < rb; i++) dst[i] = (uint8_t)kc_next(c);
        size_t bb = dt_block_bytes(type);
        int off[2], n16 = dt_f16_fields(type, off);
        for (size_t b = 0; b < rb / bb; b++)
            for (int k = 0; k < n16; k++) {
                uint16_t h = dt_f32_to_f16(scale / 32 * (0.5f + 0.5f * kc_unif(c)));
                memcpy(dst + b * bb + off[k], &h, 2);
            }
    }
    for (int64_t r = 0; r < n_out && !quant; r++) {
        kc_fill(c, row, (size_t)n_in, scale);
        char *dst = (char *)kt->mem + (size_t)r * rb;
        for (int64_t i = 0; i < n_in; i++) {
            if (type == DT_F32) ((float *)dst)[i] = row[i];
            else if (type == DT_F16) ((uint16_t *)dst)[i] = dt_f32_to_f16(row[i]);
            else if (type == DT_BF16) ((uint16_t *)dst)[i] = dt_f32_to_bf16(row[i]);
        }
        if (type == DT_Q8_0)
            for (int64_t b = 0; b < n_in / 32; b++) {
                dt_block_q8_0 *q = (dt_block_q8_0 *)dst + b;
                float mx = 0;
                for (int i = 0; i < 32; i++) mx = fmaxf(mx, fabsf(row[b * 32 + i]));
                float d = mx / 127.0f;
                q->d = dt_f32_to_f16(d);
                for (int i = 0; i < 32; i++) q->q[i] = (int8_t)(d > 0 ? lrintf(row[b * 32 + i] / d) : 0);
            }
    }
    free(row);
    kt->t.name = kt->name;
    kt->t.type = type;
    kt->t.ne[0] = n_in;
    kt->t.ne[1] = n_out;
    kt->t.data = kt->mem;
    kt->t.row_bytes = rb;
    return 0;
}

/* ---- batches -------------------------------------------------------------------------------- */

typedef struct kc_batch {
    be_batch b;
    int32_t *tokens, *positions, *slots, *q_start, *ctx_len, *bt, *logit_rows;
} kc_batch;

static void kc_batch_free(kc_batch *kb)
{
    free(kb->tokens);
    free(kb->positions);
    free(kb->slots);
    free(kb->q_start);
    free(kb->ctx_len);
    free(kb->bt);
    free(kb->logit_rows);
    memset(kb, 0, sizeof *kb);
}

/* One sequence of n new tokens at random positions (for the row-wise ops), slots 0..n-1, a block
 * table of pages 0.. (block size 16). */
static void kc_batch_simple(kc_ctx *c, kc_batch *kb, int n, int vocab)
{
    memset(kb, 0, sizeof *kb);
    kb->tokens = malloc((size_t)n * 4);
    kb->positions = malloc((size_t)n * 4);
    kb->slots = malloc((size_t)n * 4);
    kb->q_start = malloc(2 * 4);
    kb->ctx_len = malloc(4);
    int n_bt = (int)cuda_div_up(n, 16); /* pages 0.. for block size 16, enough for ctx_len n */
    kb->bt = calloc((size_t)n_bt, 4);
    for (int j = 0; j < n_bt; j++) kb->bt[j] = j;
    kb->logit_rows = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) {
        kb->tokens[i] = kc_int(c, 0, vocab - 1);
        kb->positions[i] = i == 0 ? 0 : kc_int(c, 0, 100000);
        kb->slots[i] = i;
        kb->logit_rows[i] = kc_int(c, 0, n - 1);
    }
    kb->q_start[0] = 0;
    kb->q_start[1] = n;
    kb->ctx_len[0] = n;
    be_batch b = {.n_tokens = n, .tokens = kb->tokens, .positions = kb->positions, .n_seqs = 1, .q_start = kb->q_start, .n_logits = n, .logit_rows = kb->logit_rows, .n_kv = 1, .kv = {{.slots = kb->slots, .ctx_len = kb->ctx_len, .block_table = kb->bt, .bt_stride = n_bt}}};
    kb->b = b;
}

/* ---- checks --------------------------------------------------------------------------------- */

/* Embedding gather of random tokens from a random table of the given type. */
static kc_result kc_check_embed(kc_ctx *c, int type)
{
    char name[48];
    snprintf(name, sizeof name, "embed %s", dt_name(type));
    int dim = kc_n_in(type, c->big ? 2048 : 96), vocab = c->big ? 32000 : 300, n = c->big ? 512 : 17;
    kc_tensor kt;
    kc_batch kb;
    if (kc_tensor_random(c, &kt, type, dim, vocab, 1.0f)) return kc_res(name, INFINITY, 0, "host OOM");
    kc_batch_simple(c, &kb, n, vocab);
    be_weight wg, wc;
    double err = INFINITY;
    const char *note = "";
    if (c->gpu->ops->weight_upload(c->gpu, &kt.t, &wg) || c->cpu->ops->weight_upload(c->cpu, &kt.t, &wc)) {
        note = "upload failed";
    } else {
        float *og = kc_put(c->gpu, NULL, (size_t)n * dim), *oc = kc_put(c->cpu, NULL, (size_t)n * dim);
        c->gpu->ops->begin(c->gpu, &kb.b);
        c->cpu->ops->begin(c->cpu, &kb.b);
        c->gpu->ops->embed(c->gpu, &wg, og);
        c->cpu->ops->embed(c->cpu, &wc, oc);
        float *hg = kc_get(c->gpu, og, (size_t)n * dim), *hc = kc_get(c->cpu, oc, (size_t)n * dim);
        if (hg && hc) err = kc_relerr(hg, hc, (size_t)n * dim);
        free(hg);
        free(hc);
        c->gpu->ops->free(c->gpu, og);
        c->cpu->ops->free(c->cpu, oc);
        c->gpu->ops->weight_free(c->gpu, &wg);
        c->cpu->ops->weight_free(c->cpu, &wc);
    }
    kc_batch_free(&kb);
    free(kt.mem);
    /* Every type is decoded exactly as the CPU decodes it (quantised blocks stay on the GPU). */
    return kc_res(name, err, 0.0, note);
}

/* RMSNorm, and the fused residual add + RMSNorm extra against add then rmsnorm on the CPU. */
static kc_result kc_check_rmsnorm(kc_ctx *c, int fused)
{
    int dim = c->big ? 4096 : 200, n = c->big ? 256 : 9;
    size_t nn = (size_t)n * dim;
    float *x = malloc(nn * 4), *y = malloc(nn * 4);
    kc_tensor kw;
    kc_tensor_random(c, &kw, DT_F32, dim, 1, 2.0f);
    kc_fill(c, x, nn, 3.0f);
    kc_fill(c, y, nn, 1.0f);
    be_weight wg, wc;
    c->gpu->ops->weight_upload(c->gpu, &kw.t, &wg);
    c->cpu->ops->weight_upload(c->cpu, &kw.t, &wc);
    float *xg = kc_put(c->gpu, x, nn), *yg = kc_put(c->gpu, y, nn), *og = kc_put(c->gpu, NULL, nn);
    float *xc = kc_put(c->cpu, x, nn), *yc = kc_put(c->cpu, y, nn), *oc = kc_put(c->cpu, NULL, nn);
    if (fused) {
        cuda_add_rmsnorm(c->gpu, xg, yg, &wg, 1e-5f, n, dim, og);
        c->cpu->ops->add(c->cpu, xc, yc, (int64_t)nn);
    } else {
        c->gpu->ops->rmsnorm(c->gpu, xg, &wg, 1e-5f, n, dim, og);
    }
    c->cpu->ops->rmsnorm(c->cpu, xc, &wc, 1e-5f, n, dim, oc);
    float *hg = kc_get(c->gpu, og, nn), *hc = kc_get(c->cpu, oc, nn);
    float *hxg = kc_get(c->gpu, xg, nn), *hxc = kc_get(c->cpu, xc, nn);
    double err = INFINITY;
    if (hg && hc && hxg && hxc) {
        err = kc_relerr(hg, hc, nn);
        double ex = kc_relerr(hxg, hxc, nn); /* the residual sum written back */
        if (ex > err) err = ex;
    }
    free(hg), free(hc), free(hxg), free(hxc), free(x), free(y), free(kw.mem);
    c->gpu->ops->free(c->gpu, xg), c->gpu->ops->free(c->gpu, yg), c->gpu->ops->free(c->gpu, og);
    c->cpu->ops->free(c->cpu, xc), c->cpu->ops->free(c->cpu, yc), c->cpu->ops->free(c->cpu, oc);
    c->gpu->ops->weight_free(c->gpu, &wg);
    c->cpu->ops->weight_free(c->cpu, &wc);
    return kc_res(fused ? "add+rmsnorm (fused)" : "rmsnorm", err, 1e-6, "");
}

/* The float64 reference of a quantised matmul and its bounds (cuda/quant_int.h): ref = x̂ · Wᵀ
 * (+ bias) with x̂ the activations quantised as the GPU quantises them (blocks of
 * cuda_q_act_block, the CPU backend's rule); tol = the GPU kernels' own arithmetic, γ(blocks +
 * 16) · Σ |dx a| (|D s q| + |DM m|); sig = the standard deviation of x̂ · w − x · w under the
 * rounding model (each a off by a uniform ±dx/2: Σ w² dx² / 12), which bounds how far a backend
 * that rounds its activations otherwise (or not at all) may be. Arrays [n_rows][n_out]. */
static void kc_qmatmul_ref(const kc_tensor *kt, const float *x, int n_rows, const float *bias, double *ref,
                           double *tol, double *sig)
{
    int type = kt->t.type, qa = cuda_q_act_block(type);
    int64_t n_in = kt->t.ne[0], n_out = kt->t.ne[1], nb = n_in / qa;
    int8_t *q = malloc((size_t)(n_rows * n_in));
    float *d = malloc((size_t)(n_rows * nb) * 4), *wrow = malloc((size_t)n_in * 4);
    double *mw = malloc((size_t)n_in * 8);
    for (int r = 0; r < n_rows; r++)
        for (int64_t b = 0; b < nb; b++)
            d[r * nb + b] = cuda_qa_quantise(x + r * n_in + b * qa, qa, q + r * n_in + b * qa);
    const double gamma = (double)(nb + 16) * 0x1p-24;
    for (int64_t o = 0; o < n_out; o++) {
        const uint8_t *row = (const uint8_t *)kt->t.data + (size_t)o * kt->t.row_bytes;
        model_tensor_row_f32(&kt->t, o, wrow);
        for (int64_t i = 0; i < n_in; i++) { /* |D s q| + |DM m| of weight i */
            const uint8_t *blk = row + (size_t)(i / qa) * dt_block_bytes(type);
            int j = (int)(i % qa / 32), h = (int)(i % 32 / 16);
            uint32_t cq[2], sub = cuda_qi_sub(type, blk, j);
            float D, DM;
            cuda_qi_ints(type, blk, j, (int)(i % 16 / 4), cq);
            cuda_qi_scales(type, blk, &D, &DM);
            mw[i] = fabs((double)D * cuda_qi_s(sub, h) * (int8_t)(cq[h] >> 8 * (i % 4))) +
                    fabs((double)DM * cuda_qi_m(sub, h));
        }
        for (int r = 0; r < n_rows; r++) {
            double s = bias ? bias[o] : 0.0, mag = fabs(s), var = 0;
            for (int64_t i = 0; i < n_in; i++) {
                double dx = d[r * nb + i / qa], a = dx * q[r * n_in + i];
                s += a * wrow[i];
                mag += fabs(a) * mw[i];
                var += (double)wrow[i] * wrow[i] * dx * dx / 12.0;
            }
            ref[(size_t)r * n_out + o] = s;
            tol[(size_t)r * n_out + o] = gamma * mag * 1.01 + 1e-30;
            sig[(size_t)r * n_out + o] = sqrt(var);
        }
    }
    free(q), free(d), free(wrow), free(mw);
}

/* A quantised matmul on the GPU (mmvq up to 8 rows, mmq beyond) against its contract, the
 * float64 product with the activations quantised its way, within the bound of its arithmetic;
 * and against the CPU backend within the activations' rounding: 6 standard deviations of one
 * backend's rounding noise plus both arithmetic bounds (the CPU quantises the same blocks the
 * same way where it quantises: then the two agree far closer). err is the larger of the two
 * worst ratios of deviation to bound (ok ≤ 1). */
static kc_result kc_check_qmatmul(kc_ctx *c, const char *name, kc_tensor *kt, kc_tensor *kb, int n_rows, int bias)
{
    int64_t n_in = kt->t.ne[0], n_out = kt->t.ne[1];
    size_t nx = (size_t)n_rows * n_in, no = (size_t)n_rows * n_out;
    float *x = malloc(nx * 4);
    double *ref = malloc(no * 8), *tol = malloc(no * 8), *sig = malloc(no * 8);
    kc_fill(c, x, nx, 1.0f);
    kc_round_act(c->gpu, x, nx); /* the activations as the GPU holds them: both sides start there */
    /* bf16 activations: the GPU's output is rounded to bf16 too, 2^-9 of itself at most */
    const double out_round = c->gpu->act_type != DT_F32 ? 0x1p-8 : 0.0;
    kc_qmatmul_ref(kt, x, n_rows, bias ? (const float *)kb->mem : NULL, ref, tol, sig);
    be_weight wg, bg, wc, bc;
    double err = INFINITY;
    const char *note = "max |gpu-ref|/bound, |gpu-cpu|/bound";
    if (c->gpu->ops->weight_upload(c->gpu, &kt->t, &wg) || c->gpu->ops->weight_upload(c->gpu, &kb->t, &bg) ||
        c->cpu->ops->weight_upload(c->cpu, &kt->t, &wc) || c->cpu->ops->weight_upload(c->cpu, &kb->t, &bc)) {
        note = "upload failed";
    } else {
        void *xg = kc_put_act(c->gpu, x, nx), *og = kc_put_act(c->gpu, NULL, no);
        float *xc = kc_put(c->cpu, x, nx), *oc = kc_put(c->cpu, NULL, no);
        c->gpu->ops->matmul(c->gpu, xg, n_rows, &wg, bias ? &bg : NULL, og);
        c->cpu->ops->matmul(c->cpu, xc, n_rows, &wc, bias ? &bc : NULL, oc);
        float *hg = kc_get_act(c->gpu, og, no), *hc = kc_get(c->cpu, oc, no);
        if (hg && hc) {
            err = 0;
            for (size_t e = 0; e < no && err <= INFINITY; e++) {
                double rnd = fabs(ref[e]) * out_round;
                double rg = fabs(hg[e] - ref[e]) / (tol[e] + rnd);
                double rc = fabs((double)hg[e] - hc[e]) / (6 * sig[e] + 2 * tol[e] + rnd + fabs(ref[e]) * 0x1p-23);
                if (!isfinite(hg[e]) || hg[e] == kc_poison) rg = INFINITY;
                err = fmax(err, fmax(rg, rc));
            }
        }
        free(hg), free(hc);
        c->gpu->ops->free(c->gpu, xg), c->gpu->ops->free(c->gpu, og);
        c->cpu->ops->free(c->cpu, xc), c->cpu->ops->free(c->cpu, oc);
        c->gpu->ops->weight_free(c->gpu, &wg), c->gpu->ops->weight_free(c->gpu, &bg);
        c->cpu->ops->weight_free(c->cpu, &wc), c->cpu->ops->weight_free(c->cpu, &bc);
    }
    free(x), free(ref), free(tol), free(sig);
    return kc_res(name, err, 1.0, note);
}

/* matmul against a float64 reference over the exact (dequantised) weights and the activations
 * as the GPU backend holds them (bf16, or f32); the quantised types through kc_check_qmatmul. */
static kc_result kc_check_matmul(kc_ctx *c, int type, int n_rows, int n_in, int n_out, int bias)
{
    char name[48];
    const int bf = c->gpu->act_type != DT_F32;
    snprintf(name, sizeof name, "matmul %s %dx%d->%d%s%s", dt_name(type), n_rows, n_in, n_out, bias ? " +b" : "",
             bf ? " bf16" : "");
    kc_tensor kt, kb;
    if (kc_tensor_random(c, &kt, type, n_in, n_out, 0.5f)) return kc_res(name, INFINITY, 0, "host OOM");
    kc_tensor_random(c, &kb, DT_F32, n_out, 1, 1.0f);
    if (cuda_q_is_quant(type)) {
        kc_result r = kc_check_qmatmul(c, name, &kt, &kb, n_rows, bias);
        free(kt.mem), free(kb.mem);
        return r;
    }
    size_t nx = (size_t)n_rows * n_in, no = (size_t)n_rows * n_out;
    float *x = malloc(nx * 4), *ref = malloc(no * 4), *wrow = malloc((size_t)n_in * 4);
    kc_fill(c, x, nx, 1.0f);
    kc_round_act(c->gpu, x, nx);
    for (int o = 0; o < n_out; o++) {
        model_tensor_row_f32(&kt.t, o, wrow);
        for (int r = 0; r < n_rows; r++) {
            double acc = bias ? ((float *)kb.mem)[o] : 0.0;
            for (int i = 0; i < n_in; i++) acc += (double)x[(size_t)r * n_in + i] * wrow[i];
            ref[(size_t)r * n_out + o] = (float)acc;
        }
    }
    be_weight wg, bg;
    double err = INFINITY;
    const char *note = "";
    if (c->gpu->ops->weight_upload(c->gpu, &kt.t, &wg) || c->gpu->ops->weight_upload(c->gpu, &kb.t, &bg)) {
        note = "upload failed";
    } else {
        void *xg = kc_put_act(c->gpu, x, nx), *og = kc_put_act(c->gpu, NULL, no);
        c->gpu->ops->matmul(c->gpu, xg, n_rows, &wg, bias ? &bg : NULL, og);
        float *h = kc_get_act(c->gpu, og, no);
        if (h) err = kc_relerr(h, ref, no);
        free(h);
        c->gpu->ops->free(c->gpu, xg);
        c->gpu->ops->free(c->gpu, og);
        c->gpu->ops->weight_free(c->gpu, &wg);
        c->gpu->ops->weight_free(c->gpu, &bg);
    }
    free(x), free(ref), free(wrow), free(kt.mem), free(kb.mem);
    /* f32 activations: up to 8 rows the matrix-vector kernels compute in f32 from the exact
     * weights; beyond, F32 is a true FP32 GEMM, 16-bit weights get the activations rounded to their
     * type (BF16 has 8 bits, F16 11). bf16 activations: every output is rounded to bf16 (2^-9 of
     * itself at most, less over a whole row). */
    double tol = bf ? 6e-3 : type == DT_F32 || n_rows <= 8 ? 1e-5 : type == DT_BF16 ? 8e-3 : 2e-3;
    return kc_res(name, err, tol, note);
}

/* matmul_f32 (the MoE router's logits): the product matmul computes, its output f32 rather than
 * rounded to the activation type — against float64 within f32 accumulation (F32/F16/BF16
 * weights, up to 8 rows: the matrix-vector kernels), within 2^-8 of matmul's own bf16 output
 * (every type), and with some output off the bf16 grid (proof that it was not rounded). */
static kc_result kc_check_matmul_f32(kc_ctx *c, int type, int n_rows, int n_in, int n_out)
{
    char name[48];
    snprintf(name, sizeof name, "matmul_f32 %s %dx%d->%d", dt_name(type), n_rows, n_in, n_out);
    if (!c->gpu->ops->matmul_f32) return kc_res(name, INFINITY, 0, "no matmul_f32 op");
    kc_tensor kt;
    if (kc_tensor_random(c, &kt, type, n_in, n_out, 0.5f)) return kc_res(name, INFINITY, 0, "host OOM");
    size_t nx = (size_t)n_rows * n_in, no = (size_t)n_rows * n_out;
    float *x = malloc(nx * 4), *ref = malloc(no * 4), *wrow = malloc((size_t)n_in * 4), *h32 = malloc(no * 4);
    kc_fill(c, x, nx, 1.0f);
    kc_round_act(c->gpu, x, nx);
    for (int o = 0; o < n_out; o++) {
        model_tensor_row_f32(&kt.t, o, wrow);
        for (int r = 0; r < n_rows; r++) {
            double acc = 0.0;
            for (int i = 0; i < n_in; i++) acc += (double)x[(size_t)r * n_in + i] * wrow[i];
            ref[(size_t)r * n_out + o] = (float)acc;
        }
    }
    be_weight wg;
    double err = INFINITY;
    const char *note = "upload failed";
    if (!c->gpu->ops->weight_upload(c->gpu, &kt.t, &wg)) {
        void *xg = kc_put_act(c->gpu, x, nx), *og = kc_put_act(c->gpu, NULL, no);
        float *o32 = be_alloc_f32(c->gpu, no);
        c->gpu->ops->matmul(c->gpu, xg, n_rows, &wg, NULL, og);
        c->gpu->ops->matmul_f32(c->gpu, xg, n_rows, &wg, NULL, o32);
        float *hb = kc_get_act(c->gpu, og, no);
        note = "download failed";
        if (hb && o32 && !c->gpu->ops->to_host(c->gpu, o32, no, h32)) {
            int off_grid = 0;
            double vs_act = 0;
            for (size_t i = 0; i < no; i++) {
                off_grid |= dt_bf16_to_f32(dt_f32_to_bf16(h32[i])) != h32[i];
                vs_act = fmax(vs_act, fabs((double)h32[i] - hb[i]) / (fabs((double)h32[i]) * 0x1p-8 + 1e-30));
            }
            err = cuda_q_is_quant(type) ? 0.0 : kc_relerr(h32, ref, no) / 1e-5; /* err/bound */
            if (!off_grid || vs_act > 1.0) err = INFINITY;
            note = !off_grid ? "output on the bf16 grid" : vs_act > 1.0 ? "differs from matmul's" : "";
        }
        free(hb);
        c->gpu->ops->free(c->gpu, xg);
        c->gpu->ops->free(c->gpu, og);
        if (o32) c->gpu->ops->free(c->gpu, o32);
        c->gpu->ops->weight_free(c->gpu, &wg);
    }
    free(x), free(ref), free(wrow), free(h32), free(kt.mem);
    return kc_res(name, err, 1.0, note);
}

/* matmul_multi over quantised matrices of one input width and mixed types (a Q4_K_M layer's
 * Q, K, V: two block sizes, so two quantisations of the shared input), each result against its
 * own kc_check_qmatmul-style bound. */
static kc_result kc_check_qmatmul_multi(kc_ctx *c, int n_rows, int n_in)
{
    const int types[3] = {DT_Q4_K, DT_Q8_0, DT_Q6_K};
    const int outs[3] = {c->big ? 2048 : 64, c->big ? 256 : 40, c->big ? 256 : 24};
    char name[48];
    snprintf(name, sizeof name, "matmul_multi Q4_K,Q8_0,Q6_K %dx%d", n_rows, n_in);
    kc_tensor kt[3];
    be_weight wg[3];
    const be_weight *wp[3], *bp[3] = {NULL, NULL, NULL};
    void *og[3];
    double *ref[3], *tol[3], *sig[3];
    size_t nx = (size_t)n_rows * n_in;
    float *x = malloc(nx * 4);
    kc_fill(c, x, nx, 1.0f);
    kc_round_act(c->gpu, x, nx);
    const double out_round = c->gpu->act_type != DT_F32 ? 0x1p-8 : 0.0;
    int up = 0, ok[3];
    for (int k = 0; k < 3; k++) {
        size_t no = (size_t)n_rows * outs[k];
        kc_tensor_random(c, &kt[k], types[k], n_in, outs[k], 0.5f);
        ref[k] = malloc(no * 8), tol[k] = malloc(no * 8), sig[k] = malloc(no * 8);
        kc_qmatmul_ref(&kt[k], x, n_rows, NULL, ref[k], tol[k], sig[k]);
        ok[k] = c->gpu->ops->weight_upload(c->gpu, &kt[k].t, &wg[k]) == 0;
        up += ok[k];
        wp[k] = &wg[k];
        og[k] = kc_put_act(c->gpu, NULL, no);
    }
    double err = INFINITY;
    if (up == 3) {
        void *xg = kc_put_act(c->gpu, x, nx);
        c->gpu->ops->matmul_multi(c->gpu, xg, n_rows, 3, wp, bp, og);
        err = 0;
        for (int k = 0; k < 3; k++) {
            size_t no = (size_t)n_rows * outs[k];
            float *h = kc_get_act(c->gpu, og[k], no);
            for (size_t e = 0; e < no; e++)
                err = fmax(err, !h || !isfinite(h[e]) ? INFINITY
                                                      : fabs(h[e] - ref[k][e]) / (tol[k][e] + fabs(ref[k][e]) * out_round));
            free(h);
        }
        c->gpu->ops->free(c->gpu, xg);
    }
    for (int k = 0; k < 3; k++) {
        if (ok[k]) c->gpu->ops->weight_free(c->gpu, &wg[k]);
        c->gpu->ops->free(c->gpu, og[k]);
        free(kt[k].mem), free(ref[k]), free(tol[k]), free(sig[k]);
    }
    free(x);
    return kc_res(name, err, 1.0, up == 3 ? "max |gpu-ref|/bound" : "upload failed");
}

/* RoPE on a [n][heads][head_dim] tensor at random positions, against the CPU op. The partial
 * variant (half the dims rotate) also scales: YaRN ramp, mscale and Llama-3-style frequency
 * factors (uploaded to each backend as a weight). */
static kc_result kc_check_rope(kc_ctx *c, int neox, int rope_dims_frac)
{
    int H = c->big ? 32 : 4, D = c->big ? 128 : 16, n = c->big ? 512 : 11;
    be_rope r = {.n_heads = H, .head_dim = D, .rope_dims = rope_dims_frac ? D / 2 : D,
                 .base = neox ? 1000000.0f : 10000.0f, .neox = neox};
    float ff[64];
    model_tensor ft = {"rope_freqs.weight", DT_F32, {r.rope_dims / 2, 1}, ff, (size_t)r.rope_dims / 2 * 4};
    be_weight fg = {0}, fc = {0};
    if (rope_dims_frac) {
        for (int i = 0; i < r.rope_dims / 2; i++) ff[i] = 1.0f + (float)(i * 7 % 8);
        r.freq_scale = 0.25f, r.ext_factor = 1.0f, r.corr_lo = 1.0f, r.corr_hi = 3.0f, r.mscale = 1.1386f;
        if (c->gpu->ops->weight_upload(c->gpu, &ft, &fg) || c->cpu->ops->weight_upload(c->cpu, &ft, &fc))
            return kc_res("rope scaled", INFINITY, 1e-6, "frequency factors did not upload");
    }
    be_rope rg = r, rc = r;
    rg.freq_factors = rope_dims_frac ? &fg : NULL;
    rc.freq_factors = rope_dims_frac ? &fc : NULL;
    size_t nn = (size_t)n * H * D;
    kc_batch kb;
    kc_batch_simple(c, &kb, n, 10);
    float *x = malloc(nn * 4);
    kc_fill(c, x, nn, 2.0f);
    float *xg = kc_put(c->gpu, x, nn), *xc = kc_put(c->cpu, x, nn);
    c->gpu->ops->begin(c->gpu, &kb.b);
    c->cpu->ops->begin(c->cpu, &kb.b);
    c->gpu->ops->rope(c->gpu, xg, &rg);
    c->cpu->ops->rope(c->cpu, xc, &rc);
    float *hg = kc_get(c->gpu, xg, nn), *hc = kc_get(c->cpu, xc, nn);
    double err = hg && hc ? kc_relerr(hg, hc, nn) : INFINITY;
    free(hg), free(hc), free(x);
    c->gpu->ops->free(c->gpu, xg);
    c->cpu->ops->free(c->cpu, xc);
    if (rope_dims_frac) {
        c->gpu->ops->weight_free(c->gpu, &fg);
        c->cpu->ops->weight_free(c->cpu, &fc);
    }
    kc_batch_free(&kb);
    char name[48];
    snprintf(name, sizeof name, "rope %s%s", neox ? "neox" : "adjacent", rope_dims_frac ? " partial scaled" : "");
    return kc_res(name, err, 1e-6, "");
}

/* silu_mul, add and gather_rows. */
static kc_result kc_check_elementwise(kc_ctx *c)
{
    int n = c->big ? 512 : 13, dim = c->big ? 5632 : 172;
    size_t nn = (size_t)n * dim;
    kc_batch kb;
    kc_batch_simple(c, &kb, n, 10);
    float *g = malloc(nn * 4), *u = malloc(nn * 4);
    kc_fill(c, g, nn, 8.0f);
    kc_fill(c, u, nn, 2.0f);
    float *gg = kc_put(c->gpu, g, nn), *ug = kc_put(c->gpu, u, nn), *og = kc_put(c->gpu, NULL, nn);
    float *gc = kc_put(c->cpu, g, nn), *uc = kc_put(c->cpu, u, nn), *oc = kc_put(c->cpu, NULL, nn);
    c->gpu->ops->begin(c->gpu, &kb.b);
    c->cpu->ops->begin(c->cpu, &kb.b);
    c->gpu->ops->silu_mul(c->gpu, gg, ug, (int64_t)nn);
    c->cpu->ops->silu_mul(c->cpu, gc, uc, (int64_t)nn);
    c->gpu->ops->add(c->gpu, gg, ug, (int64_t)nn);
    c->cpu->ops->add(c->cpu, gc, uc, (int64_t)nn);
    c->gpu->ops->gelu_mul(c->gpu, gg, ug, (int64_t)nn);
    c->cpu->ops->gelu_mul(c->cpu, gc, uc, (int64_t)nn);
    c->gpu->ops->scale(c->gpu, gg, 0.37f, (int64_t)nn);
    c->cpu->ops->scale(c->cpu, gc, 0.37f, (int64_t)nn);
    c->gpu->ops->softcap(c->gpu, gg, 3.0f, (int64_t)nn);
    c->cpu->ops->softcap(c->cpu, gc, 3.0f, (int64_t)nn);
    c->gpu->ops->gather_rows(c->gpu, gg, dim, og);
    c->cpu->ops->gather_rows(c->cpu, gc, dim, oc);
    float *hg = kc_get(c->gpu, og, nn), *hc = kc_get(c->cpu, oc, nn);
    double err = hg && hc ? kc_relerr(hg, hc, nn) : INFINITY;
    free(hg), free(hc), free(g), free(u);
    c->gpu->ops->free(c->gpu, gg), c->gpu->ops->free(c->gpu, ug), c->gpu->ops->free(c->gpu, og);
    c->cpu->ops->free(c->cpu, gc), c->cpu->ops->free(c->cpu, uc), c->cpu->ops->free(c->cpu, oc);
    kc_batch_free(&kb);
    return kc_res("silu_mul+add+gelu_mul+scale+softcap+gather", err, 1e-6, "");
}

/* Greedy argmax on the device, with planted ties (the lowest index must win). */
static kc_result kc_check_argmax(kc_ctx *c)
{
    int n = c->big ? 64 : 5, vocab = c->big ? 128256 : 1000;
    size_t nn = (size_t)n * vocab;
    float *x = malloc(nn * 4);
    kc_fill(c, x, nn, 10.0f);
    int32_t *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    for (int r = 0; r < n; r++) {
        int a = kc_int(c, 0, vocab - 1), b = kc_int(c, 0, vocab - 1);
        x[(size_t)r * vocab + a] = 20.0f;
        x[(size_t)r * vocab + b] = 20.0f;
        want[r] = a < b ? a : b;
        got[r] = -1;
    }
    float *xg = kc_put(c->gpu, x, nn);
    int rc = cuda_argmax_rows(c->gpu, xg, n, vocab, got);
    int bad = rc != 0;
    for (int r = 0; r < n; r++) bad += got[r] != want[r];
    c->gpu->ops->free(c->gpu, xg);
    free(x), free(want), free(got);
    return kc_res("argmax (device)", bad ? INFINITY : 0.0, 0.0, bad ? "wrong ids" : "");
}

/* ---- KV cache and attention ----------------------------------------------------------------- */

/* A paged-attention scenario: sequences with cached prefixes and new tokens, random block
 * tables, the KV of every entry stored on both backends, then one attention step compared. */
typedef struct kc_attn_case {
    const char *label;
    int n_seqs;
    int min_ctx, max_ctx; /* context length after the step */
    int min_new, max_new; /* new tokens per sequence (1 = decode) */
    int n_heads, n_kv_heads, head_dim, kv_dtype;
    float softcap;        /* be_attn: 0 off */
    int window;           /* be_attn: 0 full causal */
    int sinks;            /* > 0: each sequence longer than this meets its first `sinks` keys with q_sink */
    int kernels;          /* the CUDA attention kernels (cuda_set_attn_kernels): 0 the dispatcher's, 1 the reference */
} kc_attn_case;

/* Fills kb with every KV entry of every sequence as a token (the "fill" batch) when fill is 1,
 * else with each sequence's last n_new[s] entries as its new tokens. */
static void kc_attn_batch(kc_batch *kb, int n_seqs, const int32_t *ctx, const int32_t *n_new, const int32_t *bt,
                          int bt_stride, int block_size, int fill)
{
    memset(kb, 0, sizeof *kb);
    int64_t n = 0;
    for (int s = 0; s < n_seqs; s++) n += fill ? ctx[s] : n_new[s];
    kb->tokens = calloc((size_t)n + 1, 4);
    kb->positions = malloc((size_t)n * 4 + 4);
    kb->slots = malloc((size_t)n * 4 + 4);
    kb->q_start = malloc(((size_t)n_seqs + 1) * 4);
    kb->ctx_len = malloc((size_t)n_seqs * 4);
    kb->bt = malloc((size_t)n_seqs * bt_stride * 4);
    memcpy(kb->bt, bt, (size_t)n_seqs * bt_stride * 4);
    int64_t t = 0;
    kb->q_start[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        int32_t first = fill ? 0 : ctx[s] - n_new[s];
        for (int32_t j = first; j < ctx[s]; j++, t++) {
            kb->positions[t] = j;
            kb->slots[t] = cuda_kv_entry_slot(bt + (size_t)s * bt_stride, block_size, j);
        }
        kb->q_start[s + 1] = (int32_t)t;
        kb->ctx_len[s] = ctx[s];
    }
    be_batch b = {.n_tokens = (int32_t)n, .tokens = kb->tokens, .positions = kb->positions, .n_seqs = n_seqs, .q_start = kb->q_start, .n_logits = 0, .logit_rows = NULL, .n_kv = 1, .kv = {{.slots = kb->slots, .ctx_len = kb->ctx_len, .block_table = kb->bt, .bt_stride = bt_stride}}};
    kb->b = b;
}

static void kc_kv_round(int kv_dtype, const float *src, int H, int D, float *dst);

/* The float64 attention of one query row over the stored values (k, v: the cache's rows as it
 * holds them, [entry][n_kv_heads][D] from entry 0 of the row's sequence; qs meets entries below
 * n_sink) and, per element, the bound the tensor-core kernels' arithmetic allows (see
 * attn_emu.cc, where it is derived): Q and P rounded to the products' 16-bit type, a quantised
 * cache's values to f16, f32 sums. o and bnd get D values. */
static void kc_attn_ref_row(const kc_attn_case *ac, const float *q, const float *qs, const float *k, const float *v,
                            int kvh, int qp, int n_sink, double scale, double *o, double *bnd)
{
    const int D = ac->head_dim, KV = ac->n_kv_heads * D;
    const int quant = ac->kv_dtype == KV_I8 || ac->kv_dtype == KV_FP8;
    const double u = ac->kv_dtype == KV_BF16 ? 1.0 / 256 : 1.0 / 2048, uk = quant ? 1.0 / 2048 : 0;
    int lo = ac->window > 0 && qp - ac->window + 1 > 0 ? qp - ac->window + 1 : 0, n = qp + 1 - lo;
    double *s = malloc((size_t)n * 3 * sizeof *s), *E = s + n, *w = E + n, mx = -1e300, z = 0;
    for (int i = 0; i < n; i++) {
        const float *kr = k + (size_t)(lo + i) * KV + (size_t)kvh * D, *qr = lo + i < n_sink ? qs : q;
        double d = 0, da = 0;
        for (int e = 0; e < D; e++) d += (double)qr[e] * scale * kr[e], da += fabs((double)qr[e] * scale * kr[e]);
        s[i] = ac->softcap > 0 ? ac->softcap * tanh(d / ac->softcap) : d;
        E[i] = (u + uk + (D + 16) / 16777216.0) * da + (ac->softcap > 0 ? 4 * ac->softcap / 16777216.0 : 0);
        if (s[i] > mx) mx = s[i];
    }
    for (int i = 0; i < n; i++) z += w[i] = exp(s[i] - mx);
    for (int e = 0; e < D; e++) {
        double od = 0, wa = 0, va = 0, sd = 0;
        for (int i = 0; i < n; i++) od += w[i] / z * v[(size_t)(lo + i) * KV + (size_t)kvh * D + e];
        for (int i = 0; i < n; i++) {
            double x = v[(size_t)(lo + i) * KV + (size_t)kvh * D + e];
            wa += w[i] / z * fabs(x), va += fabs(x), sd += w[i] / z * fabs(x - od) * E[i];
        }
        o[e] = od;
        bnd[e] = sd + (u + uk + 1.0 / 524288) * wa + va / 33554432.0;
    }
    free(s);
}

/* The largest |gpu − float64| / bound over the output rows of the step (INFINITY for a
 * non-finite or unwritten element): every row up to 4,096 of them, else every stride-th (the
 * float64 reference costs ~5 × keys × head_dim per row). kf, vf: the fill batch's K and V rows
 * (every entry of every sequence, in order), rounded here to what the cache holds. */
static double kc_attn_vs_bound(const kc_attn_case *ac, int S, const int32_t *ctx, const int32_t *n_new,
                               const float *kf, const float *vf, const float *q, const float *qs,
                               const int32_t *sinks, const float *got, int bf16_out)
{
    const double u_o = bf16_out ? 1.0 / 512 : 0; /* a bf16 output's own rounding, of |o| */
    const int D = ac->head_dim, H = ac->n_heads, KV = ac->n_kv_heads * D, gsize = H / ac->n_kv_heads;
    double worst = 0, *o = malloc((size_t)D * 2 * sizeof *o), *bnd = o + D;
    int64_t fill = 0, tok = 0, n_rows = 0;
    for (int s = 0; s < S; s++) n_rows += (int64_t)n_new[s] * H;
    const int64_t stride = n_rows > 4096 ? (n_rows + 4095) / 4096 : 1;
    for (int s = 0; s < S; s++) {
        float *k = malloc((size_t)ctx[s] * KV * 4), *v = malloc((size_t)ctx[s] * KV * 4);
        for (int j = 0; j < ctx[s]; j++) {
            kc_kv_round(ac->kv_dtype, kf + (size_t)(fill + j) * KV, ac->n_kv_heads, D, k + (size_t)j * KV);
            kc_kv_round(ac->kv_dtype, vf + (size_t)(fill + j) * KV, ac->n_kv_heads, D, v + (size_t)j * KV);
        }
        for (int i = 0; i < n_new[s]; i++, tok++)
            for (int h = 0; h < H; h++) {
                size_t row = ((size_t)tok * H + h) * D;
                if ((tok * H + h) % stride) continue;
                kc_attn_ref_row(ac, q + row, qs + row, k, v, h / gsize, ctx[s] - n_new[s] + i, sinks[s],
                                1.0 / sqrt((double)D), o, bnd);
                for (int e = 0; e < D; e++) {
                    double g = got[row + e], r = fabs(g - o[e]) / (bnd[e] + u_o * fabs(o[e]));
                    if (!isfinite(g) || g == kc_poison) r = INFINITY;
                    if (!(r <= worst)) worst = r;
                }
            }
        fill += ctx[s];
        free(k), free(v);
    }
    free(o);
    return worst;
}

/* One attention step on both backends over the same stored K/V. The reference kernel is held to
 * the CPU backend's f32 result (1e-4; 4e-3 with bf16 activations, whose output is rounded to 8
 * bits); the tensor-core kernels, whose products are 16-bit, to 1.5 × the per-element bound of
 * their arithmetic against float64 (plus the output's rounding with bf16 activations; err is then
 * the largest error / bound); the row names the kernels that ran. With bf16 activations the K, V
 * and queries are rounded to bf16 first, so both backends and the reference see the same
 * values. */
static kc_result kc_check_attention(kc_ctx *c, const kc_attn_case *ac)
{
    char name[64], note[96];
    const int bs = 16, layer = 1, S = ac->n_seqs;
    kv_geom g = kv_geom_make(2, ac->n_kv_heads, ac->head_dim, bs, ac->kv_dtype);
    int32_t *ctx = malloc((size_t)S * 4), *n_new = malloc((size_t)S * 4), *sinks = calloc((size_t)S, 4);
    int32_t *shift = calloc((size_t)S, 4);
    int bt_stride = (int)cuda_div_up(ac->max_ctx, bs), total_blocks = 0;
    for (int s = 0; s < S; s++) {
        ctx[s] = kc_int(c, ac->min_ctx, ac->max_ctx);
        n_new[s] = kc_int(c, ac->min_new, ac->max_new);
        if (n_new[s] > ctx[s]) n_new[s] = ctx[s];
        sinks[s] = ac->sinks > 0 && ctx[s] > ac->sinks ? ac->sinks : 0;
        total_blocks += (int)cuda_div_up(ctx[s], bs);
    }
    int32_t n_blocks = total_blocks + 5;
    /* Block ids: a shuffled permutation, so sequences' pages interleave in the arena. */
    int32_t *perm = malloc((size_t)n_blocks * 4), *bt = calloc((size_t)S * bt_stride, 4);
    for (int32_t i = 0; i < n_blocks; i++) perm[i] = i;
    for (int32_t i = n_blocks - 1; i > 0; i--) {
        int32_t j = (int32_t)(kc_next(c) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int s = 0, k = 0; s < S; s++)
        for (int j = 0; j < cuda_div_up(ctx[s], bs); j++) bt[s * bt_stride + j] = perm[k++];
    backend *bes[2] = {c->gpu, c->cpu};
    const int bf = c->gpu->act_type != DT_F32;
    double err = INFINITY, tol = 1e-4, rel = INFINITY;
    const char *kern = "?";
    snprintf(note, sizeof note, "kv_init failed");
    cuda_set_attn_kernels(c->gpu, ac->kernels);
    if (!c->gpu->ops->kv_init(c->gpu, &g, &n_blocks) && !c->cpu->ops->kv_init(c->cpu, &g, &n_blocks)) {
        int kv_dim = ac->n_kv_heads * ac->head_dim, q_dim = ac->n_heads * ac->head_dim;
        kc_batch fb, ab;
        kc_attn_batch(&fb, S, ctx, n_new, bt, bt_stride, bs, 1);
        kc_attn_batch(&ab, S, ctx, n_new, bt, bt_stride, bs, 0);
        if (ac->sinks > 0) ab.b.kv[0].sinks = sinks, ab.b.kv[0].sink_shift = shift;
        size_t nk = (size_t)fb.b.n_tokens * kv_dim, nq = (size_t)ab.b.n_tokens * q_dim;
        float *k = malloc(nk * 4), *v = malloc(nk * 4), *q = malloc(nq * 4), *qs = malloc(nq * 4), *out[2] = {NULL, NULL};
        kc_fill(c, k, nk, 1.0f);
        kc_fill(c, v, nk, 1.0f);
        kc_fill(c, q, nq, 2.0f);
        kc_fill(c, qs, nq, 2.0f);
        kc_round_act(c->gpu, k, nk), kc_round_act(c->gpu, v, nk), kc_round_act(c->gpu, q, nq), kc_round_act(c->gpu, qs, nq);
        for (int b = 0; b < 2; b++) {
            backend *be = bes[b];
            void *(*put)(backend *, const float *, size_t) = b == 0 ? kc_put_act : kc_put_f32;
            void *kd = put(be, k, nk), *vd = put(be, v, nk), *qd = put(be, q, nq), *od = put(be, NULL, nq);
            void *qsd = ac->sinks > 0 ? put(be, qs, nq) : NULL;
            be->ops->begin(be, &fb.b);
            be->ops->store_kv(be, layer, kd, vd);
            be->ops->begin(be, &ab.b);
            be_attn at = {ac->n_heads, 1.0f / sqrtf((float)ac->head_dim), ac->softcap, ac->window, qsd, NULL};
            be->ops->attention(be, layer, qd, &at, od);
            out[b] = b == 0 ? kc_get_act(be, od, nq) : kc_get(be, (const float *)od, nq);
            if (b == 0) kern = cuda_last_attn_kernels(be);
            be->ops->free(be, kd), be->ops->free(be, vd), be->ops->free(be, qd), be->ops->free(be, od);
            if (qsd) be->ops->free(be, qsd);
        }
        if (out[0] && out[1]) rel = kc_relerr(out[0], out[1], nq);
        if (out[0] && strncmp(kern, "mma", 3) == 0) {
            err = kc_attn_vs_bound(ac, S, ctx, n_new, k, v, q, qs, sinks, out[0], bf);
            tol = 1.5;
        } else {
            err = rel;
            tol = bf ? 4e-3 : 1e-4;
        }
        snprintf(note, sizeof note, "%d seqs, %d tok, ctx<=%d, gqa %d, hd %d, win %d, cap %g, sinks %d, splits %d, rel %.1e",
                 S, ab.b.n_tokens, ac->max_ctx, ac->n_heads / ac->n_kv_heads, ac->head_dim, ac->window,
                 (double)ac->softcap, ac->sinks, cuda_last_attn_splits(c->gpu), rel);
        free(out[0]), free(out[1]), free(k), free(v), free(q), free(qs);
        kc_batch_free(&fb);
        kc_batch_free(&ab);
    }
    cuda_set_attn_kernels(c->gpu, 0);
    snprintf(name, sizeof name, "attn %s %s %s", kern, ac->label, kv_dtype_name(ac->kv_dtype));
    free(ctx), free(n_new), free(sinks), free(shift), free(perm), free(bt);
    return kc_res(name, err, tol, note);
}

/* store_kv (exact after rounding to the KV type), the fused RoPE + store, and kv_copy_block. */
/* One token's K or V row [H][D] as a cache of kv_dtype holds it: rounded to f16 / bf16, or
 * quantised per head vector by the rule of cache/kv.h (the f16 scale rounded up, int8 or e4m3
 * codes). */
static void kc_kv_round(int kv_dtype, const float *src, int H, int D, float *dst)
{
    for (int h = 0; h < H; h++) {
        const float *x = src + (size_t)h * D;
        float *y = dst + (size_t)h * D, amax = 0, inv;
        for (int e = 0; e < D; e++) amax = fmaxf(amax, fabsf(x[e]));
        float d = cuda_f16_to_f32(cuda_kv_scale(kv_dtype, amax, &inv));
        for (int e = 0; e < D; e++)
            y[e] = kv_dtype == KV_F32    ? x[e]
                   : kv_dtype == KV_BF16 ? dt_bf16_to_f32(dt_f32_to_bf16(x[e]))
                   : kv_dtype == KV_I8   ? d * (float)kv_i8_encode(x[e], inv)
                   : kv_dtype == KV_FP8  ? d * kv_e4m3_decode(kv_e4m3_encode(x[e] * inv))
                                         : dt_f16_to_f32(dt_f32_to_f16(x[e]));
    }
}

/* Relative error bound of a whole row after kc_kv_round, from the formats: half an ulp of f16
 * (2^-11) or bf16 (2^-8) per element; int8 d / 2 per element with d ≤ amax / 127 × (1 + 2^-10),
 * so ‖err‖ ≤ √D × amax / 254 × (1 + 2^-10) ≤ √D / 254 × 1.001 × ‖x‖; e4m3 2^-4 relative per
 * element plus √D × 2^-10 × d ≤ √D × 2^-10 / 448 × 1.001 × ‖x‖. */
static double kc_kv_round_bound(int kv_dtype, int D)
{
    switch (kv_dtype) {
    case KV_F32: return 0;
    case KV_BF16: return 1.0 / 256;
    case KV_I8: return sqrt((double)D) / 254 * 1.001;
    case KV_FP8: return 1.0 / 16 + sqrt((double)D) / 1024 / 448 * 1.001;
    default: return 1.0 / 2048;
    }
}

/* kv_block_out / kv_block_in (the second KV tier's copies) on group 0 of geometry g: block src out
 * to pinned host memory and back into block dst leaves dst holding exactly src's stored values
 * (codes and their scales) in every layer; the host copy is kv_group_bytes_per_block bytes (a guard
 * after it stays as it was). dst must hold other values than src first, or the check proves
 * nothing: 0 then too. */
static int kc_block_io_ok(kc_ctx *c, const kv_geom *g, int32_t src, int32_t dst)
{
    backend *be = c->gpu;
    const size_t bb = kv_group_bytes_per_block(g, 0), guard = 256, kv_dim = (size_t)g->n_kv_heads * g->head_dim;
    unsigned char *host = be->ops->host_alloc(be, bb + guard);
    float *a = malloc(kv_dim * 4), *b = malloc(kv_dim * 4);
    int ok = host && a && b, differs = 0;
    for (int l = 0; ok && l < g->n_layers; l++) /* the precondition */
        for (int kind = 0; ok && kind < 2; kind++)
            for (int off = 0; ok && off < g->block_size; off++) {
                ok = !cuda_kv_read(be, l, kind, src * g->block_size + off, a) &&
                     !cuda_kv_read(be, l, kind, dst * g->block_size + off, b);
                differs |= ok && memcmp(a, b, kv_dim * 4) != 0;
            }
    ok = ok && differs;
    if (ok) memset(host, 0xA5, bb + guard);
    ok = ok && be->ops->kv_block_out(be, 0, src, host) == 0 && be->ops->sync(be) == 0;
    for (size_t i = bb; ok && i < bb + guard; i++) ok = host[i] == 0xA5;
    ok = ok && be->ops->kv_block_in(be, 0, dst, host) == 0 && be->ops->sync(be) == 0;
    for (int l = 0; ok && l < g->n_layers; l++)
        for (int kind = 0; ok && kind < 2; kind++)
            for (int off = 0; ok && off < g->block_size; off++)
                ok = !cuda_kv_read(be, l, kind, src * g->block_size + off, a) &&
                     !cuda_kv_read(be, l, kind, dst * g->block_size + off, b) && !memcmp(a, b, kv_dim * 4);
    ok = ok && be->ops->kv_block_out(be, 0, -1, host) != 0; /* no such block */
    if (host) be->ops->host_free(be, host);
    free(a), free(b);
    return ok;
}

static kc_result kc_check_store_kv(kc_ctx *c, int kv_dtype)
{
    char name[48];
    snprintf(name, sizeof name, "store_kv+rope+copy+tier %s", kv_dtype_name(kv_dtype));
    const int bs = 16, H = c->big ? 8 : 2, D = c->big ? 128 : 8, n = c->big ? 300 : 20, kv_dim = H * D;
    int32_t n_blocks = (int32_t)cuda_div_up(n, bs) * 3 + 2;
    kv_geom g = kv_geom_make(3, H, D, bs, kv_dtype);
    if (c->gpu->ops->kv_init(c->gpu, &g, &n_blocks) || c->cpu->ops->kv_init(c->cpu, &g, &n_blocks))
        return kc_res(name, INFINITY, 0, "kv_init failed");
    kc_batch kb;
    kc_batch_simple(c, &kb, n, 10);
    /* distinct random slots */
    int32_t n_slots = n_blocks * bs;
    int32_t *perm = malloc((size_t)n_slots * 4);
    for (int32_t i = 0; i < n_slots; i++) perm[i] = i;
    for (int i = 0; i < n; i++) {
        int32_t j = i + (int32_t)(kc_next(c) % (uint64_t)(n_slots - i)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        kb.slots[i] = perm[i];
    }
    size_t nk = (size_t)n * kv_dim;
    float *k = malloc(nk * 4), *v = malloc(nk * 4), *row = malloc((size_t)kv_dim * 4);
    kc_fill(c, k, nk, 3.0f);
    kc_fill(c, v, nk, 3.0f);
    double worst = 0;
    /* plain store into layer 2: bit-exact after rounding */
    float *kg = kc_put(c->gpu, k, nk), *vg = kc_put(c->gpu, v, nk);
    c->gpu->ops->begin(c->gpu, &kb.b);
    c->gpu->ops->store_kv(c->gpu, 2, kg, vg);
    for (int i = 0; i < n && worst == 0; i++)
        for (int kind = 0; kind < 2; kind++) {
            if (cuda_kv_read(c->gpu, 2, kind, kb.slots[i], row)) worst = INFINITY;
            float want[1024];
            kc_kv_round(kv_dtype, (kind ? v : k) + (size_t)i * kv_dim, H, D, want);
            for (int e = 0; e < kv_dim; e++)
                if (row[e] != want[e]) worst = INFINITY;
        }
    /* kv_copy_block: the block of token 0's slot, copied into a block nobody wrote */
    int32_t src_blk = kb.slots[0] / bs, dst_blk = -1;
    for (int32_t b = 0; b < n_blocks && dst_blk < 0; b++) {
        int used = 0;
        for (int i = 0; i < n; i++) used |= kb.slots[i] / bs == b;
        if (!used) dst_blk = b;
    }
    if (dst_blk >= 0) {
        c->gpu->ops->kv_copy_block(c->gpu, 0, src_blk, dst_blk);
        float *r2 = malloc((size_t)kv_dim * 4);
        for (int off = 0; off < bs; off++)
            for (int kind = 0; kind < 2; kind++) {
                cuda_kv_read(c->gpu, 2, kind, src_blk * bs + off, row);
                cuda_kv_read(c->gpu, 2, kind, dst_blk * bs + off, r2);
                if (memcmp(row, r2, (size_t)kv_dim * 4)) worst = INFINITY;
            }
        free(r2);
    }
    /* the tier's copies: token 0's block out to host memory and into the block of another token */
    int32_t other = -1;
    for (int i = 1; i < n && other < 0; i++)
        if (kb.slots[i] / bs != src_blk && kb.slots[i] / bs != dst_blk) other = kb.slots[i] / bs;
    if (other < 0 || !kc_block_io_ok(c, &g, src_blk, other)) worst = INFINITY;
    /* fused RoPE + store into layer 0 vs CPU rope, then the same rounding */
    be_rope r = {.n_heads = H, .head_dim = D, .rope_dims = D, .base = 10000.0f, .neox = 0};
    float *kc = kc_put(c->cpu, k, nk);
    c->cpu->ops->begin(c->cpu, &kb.b);
    c->cpu->ops->rope(c->cpu, kc, &r);
    float *kroped = kc_get(c->cpu, kc, nk);
    kc_set(c->gpu, kg, k, nk);
    cuda_rope_store_kv(c->gpu, 0, kg, vg, &r);
    float *kg_h = kc_get(c->gpu, kg, nk);
    if (kroped && kg_h) {
        double e = kc_relerr(kg_h, kroped, nk); /* rotated in place */
        if (e > worst) worst = e;
        float *stored = malloc(nk * 4);
        for (int i = 0; i < n; i++) cuda_kv_read(c->gpu, 0, 0, kb.slots[i], stored + (size_t)i * kv_dim);
        e = kc_relerr(stored, kroped, nk);
        if (e > 1e-6 + kc_kv_round_bound(kv_dtype, D)) worst = INFINITY;
        free(stored);
    } else {
        worst = INFINITY;
    }
    free(kroped), free(kg_h), free(k), free(v), free(row), free(perm);
    c->gpu->ops->free(c->gpu, kg), c->gpu->ops->free(c->gpu, vg);
    c->cpu->ops->free(c->cpu, kc);
    kc_batch_free(&kb);
    return kc_res(name, worst, 1e-6, "bit-exact store, copy, tier copy; fused rope");
}

/* ---- whole models of every architecture ------------------------------------------------------- */

#define KC_N_ARCHS 9
#define KC_ARCH_LLAMA 4 /* the scaled-RoPE llama row, which the typed checks use */

/* Logits of one sequence (a prompt, then greedy decode steps chosen by the CPU) through fwd on
 * both backends; the worst max |Δ| over max |logit| of a row. */
static double kc_arch_run(kc_ctx *c, const model *m, int n_prompt, int n_steps)
{
    const int bs = 16, V = m->hp.n_vocab, nb = (n_prompt + n_steps) / bs + 1, cap = n_prompt + n_steps + 1;
    kv_geom g = model_kv_geom(&m->hp, bs, KV_F32);
    char err[512];
    backend *be[2] = {c->gpu, c->cpu};
    fwd *f[2];
    for (int k = 0; k < 2; k++) f[k] = fwd_create(m, be[k], &g, &nb, n_prompt, n_prompt, err, sizeof err);
    double worst = f[0] && f[1] ? 0 : INFINITY;
    int32_t *toks = malloc((size_t)cap * 4), *pos = malloc((size_t)cap * 4), *slots = malloc((size_t)cap * 4);
    int32_t *rows = malloc((size_t)cap * 4), *bt = malloc((size_t)nb * 4), q_start[2], ctx;
    float *lg[2] = {malloc((size_t)n_prompt * V * 4), malloc((size_t)n_prompt * V * 4)};
    for (int i = 0; i < nb; i++) bt[i] = (i * 3 + 1) % nb; /* 3 is coprime to nb unless nb % 3 == 0 */
    if (nb % 3 == 0)
        for (int i = 0; i < nb; i++) bt[i] = nb - 1 - i;
    for (int i = 0; i < n_prompt; i++) toks[i] = 3 + (int32_t)(kc_next(c) % (uint64_t)(V - 3));
    for (int done = 0, step = 0; worst < INFINITY && step <= n_steps; step++) {
        int n = step == 0 ? n_prompt : 1;
        for (int i = 0; i < n; i++) {
            pos[i] = done + i;
            slots[i] = cuda_kv_entry_slot(bt, bs, done + i);
            rows[i] = i;
        }
        q_start[0] = 0, q_start[1] = n, ctx = done + n;
        be_batch b = {.n_tokens = n, .tokens = toks + done, .positions = pos, .n_seqs = 1, .q_start = q_start, .n_logits = n, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = &ctx, .block_table = bt, .bt_stride = nb}}};
        for (int k = 0; k < 2; k++) {
            for (size_t i = 0; i < (size_t)n * V; i++) lg[k][i] = NAN;
            if (fwd_run(f[k], &b, lg[k])) worst = INFINITY;
        }
        for (int r = 0; worst < INFINITY && r < n; r++) {
            const float *x = lg[0] + (size_t)r * V, *y = lg[1] + (size_t)r * V;
            double d = 0, mx = 1e-6;
            for (int i = 0; i < V; i++) {
                d = isnan(x[i]) || isnan(y[i]) ? INFINITY : fmax(d, fabs((double)x[i] - y[i]));
                mx = fmax(mx, fabs((double)y[i]));
            }
            worst = fmax(worst, d / mx);
        }
        done += n;
        int32_t best = 0; /* the CPU's greedy token goes on */
        for (int i = 1; i < V; i++)
            if (lg[1][(size_t)(n - 1) * V + i] > lg[1][(size_t)(n - 1) * V + best]) best = i;
        toks[done] = best;
    }
    for (int k = 0; k < 2; k++) {
        fwd_destroy(f[k]);
        free(lg[k]);
    }
    free(toks), free(pos), free(slots), free(rows), free(bt);
    return worst;
}

/* A synthetic model of architecture `which` (0 .. KC_N_ARCHS - 1) with its features switched on
 * (qwen3: another head size; gemma2: windows shorter than a block, soft-caps, partial RoPE;
 * gemma3: a pattern, two bases, scaling on the global layers; phi3: fused tensors with a bias,
 * partial RoPE; llama: YaRN and rope_freqs with a fused qkv; qwen3moe, Mixtral-style llama,
 * deepseek2 with MLA and gpt-oss: the mixtures of experts, latent attention and learned sinks),
 * weights of the given type and f32
 * KV. F32 weights with f32 activations: both sides run FP32 arithmetic and differ by summation
 * order only, ~1e-6 of the logits (tolerance 1e-4). Q8_0: both sides quantise the activations of
 * every matmul to the same 8-bit blocks, so they differ where a summation-order difference tips
 * an activation's rounding to the next step, 1/127 of its block's maximum, and through what
 * follows from it: between the CPU backend's own scalar and AVX-512 levels that is 0 to 1.8% of
 * the largest logit on these models (tolerance 5e-2); a wrong scale or code moves the logits by
 * their own size. bf16 activations: every GEMM input and output is rounded to 8 bits; a CPU
 * simulation of that rounding at the same points moved these models' logits by 0.6 to 1.1
 * percent of max |logit| (tolerance 3e-2, or Q8_0's 5e-2 when larger). A mixture of experts can
 * switch an expert on such a rounding, which moves the logits further: the MoE rows report it. */
static kc_result kc_check_arch_typed(kc_ctx *c, int which, int type)
{
    static const char *const arches[KC_N_ARCHS] = {"qwen3", "gemma2", "gemma3", "phi3", "llama",
                                                   "qwen3moe", "llama", "deepseek2", "gpt-oss"};
    static const char *const labels[KC_N_ARCHS] = {"qwen3", "gemma2", "gemma3", "phi3", "llama",
                                                   "qwen3moe", "mixtral", "deepseek2", "gpt-oss"};
    mkm_params p;
    mkm_params_default(&p);
    p.arch = arches[which];
    p.dim = c->big ? 256 : 64, p.layers = 3, p.heads = 8, p.kv_heads = 2, p.ffn = c->big ? 512 : 96;
    p.context = 512, p.vocab = 300, p.norm_std = 0.2f, p.seed = 77 + (uint64_t)which, p.type = type;
    if (which == 0) p.head_dim = c->big ? 48 : 16;
    if (which == 1) p.swa_window = 11, p.attn_softcap = 5.0f, p.final_softcap = 3.0f, p.head_dim = 16, p.rope_dims = 12;
    if (which == 2) p.swa_window = 9, p.swa_pattern = 3, p.rope_base = 1e6f, p.rope_scaling = "linear", p.rope_factor = 8;
    if (which == 3) p.rope_dims = 6, p.qkv_bias = 1;
    if (which == 4) p.rope_freqs = 1, p.rope_scaling = "yarn", p.rope_factor = 4, p.rope_ctx_orig = 32, p.fused_qkv = 1;
    if (which >= 5) p.experts = 8, p.experts_used = 2, p.ffn = c->big ? 256 : 48; /* each expert's width */
    if (which == 6) p.experts_used = 3;
    if (which == 7) /* MLA with a q LoRA, shared experts, a leading dense layer, DeepSeek-V3's routing */
        p.heads = 4, p.head_dim = 16, p.rope_dims = 8, p.kv_lora = 32, p.q_lora = 24, p.gating = 2, p.expert_norm = 1,
        p.expert_scale = 2.5f, p.expert_groups = 4, p.groups_used = 2, p.sel_bias = 1, p.experts_used = 3;
    if (which == 8) p.swa_window = 11, p.experts_used = 4; /* sinks, biases, clamped SwiGLU, windows */
    char path[512], err[512], name[48], note[96] = "";
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/kvserve-kc-%s-%d.gguf", tmp && *tmp ? tmp : "/tmp", labels[which], (int)getpid());
    snprintf(name, sizeof name, "arch %s %s logits%s", labels[which], dt_name(type),
             c->gpu->act_type != DT_F32 ? " bf16 act" : "");
    model *m = NULL;
    double e = INFINITY;
    if (mkm_write(path, &p, err, sizeof err) || model_load(path, &m, err, sizeof err))
        snprintf(note, sizeof note, "%.95s", err);
    else
        e = kc_arch_run(c, m, c->big ? 40 : 20, c->big ? 24 : 8);
    model_destroy(m);
    remove(path);
    double arch_tol = type == DT_F32 ? 1e-4 : 5e-2;
    if (c->gpu->act_type != DT_F32 && arch_tol < 3e-2) arch_tol = 3e-2;
    return kc_res(name, e, arch_tol, note);
}

static kc_result kc_check_arch(kc_ctx *c, int which)
{
    return kc_check_arch_typed(c, which, DT_F32);
}
