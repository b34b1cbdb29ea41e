/*
 * gpu_check.c — the self-contained GPU check program that scripts/gpu-check.sh builds and runs.
 *
 * Built from model/ (GGUF, model, dtypes and the synthetic-model writer, mkmodel), engine/
 * (forward, sampler), cache/, cpu/, cuda/ and cli/device.c only: no HTTP, JSON, test framework
 * or regex library, so it builds on a GPU machine that has just the CUDA toolkit and a C
 * compiler. In order, it:
 *   1. checks every CUDA op against the CPU backend at realistic sizes (cuda/check/kernel_checks.c);
 *   2. runs the stories260K golden greedy cases end to end on the GPU, all cases in one varlen batch
 *      (token ids from a text file, no tokenizer), with f16 and f32 KV; then a synthetic model of
 *      every architecture with its features switched on (windows, soft-caps, q/k norms, fused
 *      tensors, partial and scaled RoPE), prefill and decode logits against the CPU backend;
 *   3. benchmarks: device-to-device copy bandwidth (the memory ceiling), cuBLAS BF16 GEMM (the
 *      matrix ceiling), the backend's matmul (BF16, and every quantised type at 1, 8 and 512 rows
 *      on two shapes: cuda/check/quant_bench.c), decode attention bandwidth (64 × 2,048 and
 *      1 × 32,768 f16 against the copy, int8 / e4m3 against f16, the reference kernel for the
 *      record), causal prefill attention at head dims 64 and 128 over 4k and 16k tokens against
 *      the cuBLAS peak and PyTorch's flash attention, batch-1 / batched decode of a
 *      TinyLlama-1.1B-shaped random BF16 model built in memory (and of its Q8_0 and Q4_K twins
 *      at batch 1), and its time to first token for 8k, 16k and 32k-token prompts; the device
 *      sampler's time per step (256 rows of 32,000) against the host's path, and 256-sequence
 *      decode with logits to the host against the sampler on the device, synchronous and
 *      overlapped (the next step launched with its tokens read on the device); the decode step's
 *      time by phase at 1, 64 and 256 sequences, synchronous and overlapped (host: batch, begin,
 *      launch, sample, wait; device: busy time and the launch-to-launch gap, from events on the
 *      backend's stream); decode of a synthetic Qwen3-MoE-shaped model (16 experts of width 512,
 *      2 used) against its dense qwen3 twin with the same active parameters, and of a deepseek2
 *      (MLA) model; the experts' grouped matvecs alone at 1 and 8 tokens as the chosen experts'
 *      bytes per second and % of copy (moe_bench.c);
 * and prints a short table last. Exit status: 0 all checks pass, 1 a check failed, 2 no GPU or a
 * setup error.
 *
 *   gpu_check [--model stories260K.gguf] [--golden golden.txt] [--out DIR] [--quick]
 *
 * Golden file: one case per line: name stop_on_bos max_new n_prompt ids... n_gen ids...
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "cuda/check/kernel_checks.c"
#include "cuda/check/sample_checks.c"
#include "cuda/cublas_dl.h"
#include "cuda/cuda_backend.h"
#include "engine/forward.h"
#include "model/model.h"

#define GC_MAX_ROWS 224

typedef struct gc_row {
    char what[48];
    char value[56];
    char ref[64];
    int ok; /* 1 pass, 0 fail, -1 informational */
} gc_row;

static gc_row gc_rows[GC_MAX_ROWS];
static int gc_n_rows, gc_failed;
static FILE *gc_tsv;

static void gc_add(const char *what, const char *value, const char *ref, int ok)
{
    if (ok == 0) gc_failed = 1;
    if (gc_tsv) fprintf(gc_tsv, "%s\t%s\t%s\t%s\n", what, value, ref, ok < 0 ? "info" : ok ? "ok" : "FAIL");
    if (gc_n_rows == GC_MAX_ROWS) return;
    gc_row *r = &gc_rows[gc_n_rows++];
    snprintf(r->what, sizeof r->what, "%s", what);
    snprintf(r->value, sizeof r->value, "%s", value);
    snprintf(r->ref, sizeof r->ref, "%s", ref);
    r->ok = ok;
}

static double gc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int gc_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double gc_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, gc_cmp_double);
    return v[n / 2];
}

#define GC_CUDA(call)                                                                                          \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "gpu-check: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__,     \
                    __LINE__);                                                                                 \
            exit(2);                                                                                           \
        }                                                                                                      \
    } while (0)

/* ---- 1. kernel checks ---------------------------------------------------------------------- */

static void gc_report(kc_result r)
{
    char v[40], ref[48];
    snprintf(v, sizeof v, "%.2e", r.err);
    snprintf(ref, sizeof ref, "tol %.0e", r.tol);
    printf("  %-38s %-10s %-9s %s  %s\n", r.name, v, ref, r.ok ? "ok" : "FAIL", r.note);
    if (gc_tsv) fprintf(gc_tsv, "check %s\t%s\t%s\t%s\t%s\n", r.name, v, ref, r.ok ? "ok" : "FAIL", r.note);
    if (!r.ok) gc_failed = 1;
}

static void gc_kernels(backend *gpu, backend *cpu, int quick)
{
    kc_ctx c = {gpu, cpu, 0x6b65726e656cULL, !quick};
    printf("== kernels vs the CPU backend (seed %#llx)\n", (unsigned long long)c.rng);
    int fails = gc_failed;
    gc_failed = 0;
    for (int i = 0; i < KC_N_WEIGHT_TYPES; i++) gc_report(kc_check_embed(&c, kc_weight_types[i]));
    gc_report(kc_check_rmsnorm(&c, 0));
    gc_report(kc_check_rmsnorm(&c, 1));
    for (int i = 0; i < KC_N_WEIGHT_TYPES; i++) {
        gc_report(kc_check_matmul(&c, kc_weight_types[i], 1, 2048, 2048, 0));
        gc_report(kc_check_matmul(&c, kc_weight_types[i], 8, 2048, 1024, 1));
        gc_report(kc_check_matmul(&c, kc_weight_types[i], 77, 2048, 1024, 1));
        /* a concatenated Q/K/V of TinyLlama's shape (2048 + 2 × 256 rows) at decode */
        if (cuda_q_is_quant(kc_weight_types[i])) gc_report(kc_check_matmul(&c, kc_weight_types[i], 5, 2048, 2560, 1));
    }
    gc_report(kc_check_qmatmul_multi(&c, 1, 2048));
    gc_report(kc_check_qmatmul_multi(&c, 100, 2048));
    for (int neox = 0; neox < 2; neox++) {
        gc_report(kc_check_rope(&c, neox, 0));
        gc_report(kc_check_rope(&c, neox, 1));
    }
    gc_report(kc_check_elementwise(&c));
    gc_report(kc_check_argmax(&c));
    gc_report(kc_check_sampler(&c));
    gc_report(kc_check_store_kv(&c, KV_F16));
    gc_report(kc_check_store_kv(&c, KV_BF16));
    gc_report(kc_check_store_kv(&c, KV_F32));
    gc_report(kc_check_store_kv(&c, KV_I8));
    gc_report(kc_check_store_kv(&c, KV_FP8));
    const kc_attn_case cases[] = {
        /* label, seqs, ctx, new tokens, heads, kv heads, head dim, KV, soft-cap, window, sinks,
         * kernels (1: the reference kernel); each row names the kernels that ran */
        {"decode stories", 13, 1, 512, 1, 1, 8, 4, 8, KV_F16, 0.0f, 0, 0, 0},
        {"decode batch", 64, 100, 2048, 1, 1, 32, 4, 64, KV_F16, 0.0f, 0, 0, 0},
        {"decode long (split-K)", 2, 8000, 32768, 1, 1, 32, 8, 128, KV_F16, 0.0f, 0, 0, 0},
        {"prefill+prefix", 4, 200, 1500, 100, 512, 32, 8, 128, KV_BF16, 0.0f, 0, 0, 0},
        {"prefill 1k causal", 1, 1024, 1024, 1024, 1024, 32, 4, 64, KV_F16, 0.0f, 0, 0, 0},
        {"mixed", 24, 1, 1200, 1, 200, 32, 4, 64, KV_F16, 0.0f, 0, 0, 0},
        {"mixed mha hd128", 8, 1, 700, 1, 90, 16, 16, 128, KV_F32, 0.0f, 0, 0, 0},
        {"mixed mha hd96", 8, 1, 700, 1, 90, 32, 32, 96, KV_F16, 0.0f, 0, 0, 0}, /* phi3's shape */
        {"mixed gqa8 hd256", 4, 1, 600, 1, 64, 16, 2, 256, KV_F16, 0.0f, 0, 0, 0},
        {"window+softcap", 6, 1, 1500, 1, 90, 16, 8, 256, KV_F16, 50.0f, 96, 0, 0}, /* Gemma 2's layer kinds */
        {"window split-K", 2, 8000, 20000, 1, 1, 8, 4, 128, KV_F16, 0.0f, 4096, 0, 0},
        {"sinks mixed", 8, 100, 1500, 1, 200, 32, 4, 64, KV_F16, 0.0f, 0, 16, 0},
        {"mqa decode", 16, 100, 2000, 1, 1, 64, 1, 128, KV_BF16, 0.0f, 0, 0, 0}, /* 64 rows: the prefill kernel */
        {"decode batch", 64, 100, 2048, 1, 1, 32, 4, 64, KV_I8, 0.0f, 0, 0, 0},
        {"mixed", 24, 1, 1200, 1, 200, 32, 4, 64, KV_I8, 0.0f, 0, 0, 0},
        {"sinks split-K", 2, 4000, 8000, 1, 1, 32, 4, 64, KV_I8, 0.0f, 0, 4, 0},
        {"decode long (split-K)", 2, 8000, 32768, 1, 1, 32, 8, 128, KV_FP8, 0.0f, 0, 0, 0},
        {"mixed hd128", 8, 1, 700, 1, 90, 16, 4, 128, KV_FP8, 0.0f, 0, 0, 0},
        {"decode batch", 64, 100, 2048, 1, 1, 32, 4, 64, KV_F16, 0.0f, 0, 0, 1}, /* the reference kernel */
        {"mixed", 24, 1, 1200, 1, 200, 32, 4, 64, KV_I8, 0.0f, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gc_report(kc_check_attention(&c, &cases[i]));
    char v[40];
    snprintf(v, sizeof v, "%s", gc_failed ? "FAIL" : "all within tol");
    gc_add("kernels vs CPU", v, "see log", !gc_failed);
    gc_failed |= fails;
}

/* The same backend ops with bf16 activations (what serving runs): matmul of every weight type
 * through the matrix-vector kernels (1 and 8 rows, a GLU-sized and an odd shape) and cuBLAS / the
 * quantised GEMM (77 rows), against float64 over the activations as rounded; attention with bf16
 * queries and outputs (both tensor-core kernels and the reference one); the whole graph of
 * every architecture, and llama with BF16 and Q8_0 weights, against the CPU backend. */
static void gc_kernels_bf16(backend *gpu, backend *cpu, int quick)
{
    kc_ctx c = {gpu, cpu, 0x62663136ULL, !quick};
    printf("== bf16 activations vs float64 and the CPU backend (seed %#llx)\n", (unsigned long long)c.rng);
    int fails = gc_failed;
    gc_failed = 0;
    for (int i = 0; i < KC_N_WEIGHT_TYPES; i++) {
        int t = kc_weight_types[i];
        gc_report(kc_check_matmul(&c, t, 1, kc_n_in(t, 2048), 2560, 0));
        gc_report(kc_check_matmul(&c, t, 8, kc_n_in(t, 2048), 1000, 1));
        gc_report(kc_check_matmul(&c, t, 3, kc_n_in(t, 2051), 77, 1)); /* not whole 16-byte chunks */
        gc_report(kc_check_matmul(&c, t, 77, kc_n_in(t, 2048), 1024, 1));
    }
    /* f32 outputs (the MoE router): dense, integer matrix-vector and GEMM paths */
    gc_report(kc_check_matmul_f32(&c, DT_BF16, 1, 2048, 128));
    gc_report(kc_check_matmul_f32(&c, DT_Q8_0, 4, 2048, 128));
    gc_report(kc_check_matmul_f32(&c, DT_Q4_K, 40, 2048, 64));
    /* attention with bf16 queries and outputs: both tensor-core kernels, every KV type, sinks,
     * split-K, and the reference kernel */
    const kc_attn_case cases[] = {
        {"decode batch", 64, 100, 2048, 1, 1, 32, 4, 64, KV_F16, 0.0f, 0, 0, 0},
        {"decode long (split-K)", 2, 8000, 32768, 1, 1, 32, 8, 128, KV_BF16, 0.0f, 0, 0, 0},
        {"prefill+prefix", 4, 200, 1500, 100, 512, 32, 8, 128, KV_BF16, 0.0f, 0, 0, 0},
        {"window+softcap", 6, 1, 1500, 1, 90, 16, 8, 256, KV_F16, 50.0f, 96, 0, 0},
        {"sinks mixed", 8, 100, 1500, 1, 200, 32, 4, 64, KV_I8, 0.0f, 0, 16, 0},
        {"mixed hd128", 8, 1, 700, 1, 90, 16, 4, 128, KV_FP8, 0.0f, 0, 0, 0},
        {"mixed", 24, 1, 1200, 1, 200, 32, 4, 64, KV_F16, 0.0f, 0, 0, 1}, /* the reference kernel */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gc_report(kc_check_attention(&c, &cases[i]));
    for (int a = 0; a < KC_N_ARCHS; a++) gc_report(kc_check_arch(&c, a));
    gc_report(kc_check_arch_typed(&c, KC_ARCH_LLAMA, DT_BF16));
    gc_report(kc_check_arch_typed(&c, KC_ARCH_LLAMA, DT_Q8_0));
    char v[40];
    snprintf(v, sizeof v, "%s", gc_failed ? "FAIL" : "all within tol");
    gc_add("bf16 ops and archs vs CPU", v, "see log", !gc_failed);
    gc_failed |= fails;
}

/* ---- 2. golden end to end ------------------------------------------------------------------ */

typedef struct gc_case {
    char name[64];
    int stop_on_bos, max_new, n_prompt, n_want;
    int32_t prompt[1024], want[1024];
    /* run state */
    int n_gen, done, bad_at;
    int32_t last;
    int n_got;          /* tokens the GPU picked for this case, the diverging one included */
    int32_t got[1024];
} gc_case;

static int gc_read_golden(const char *path, gc_case *cs, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    while (n < cap) {
        gc_case *c = &cs[n];
        memset(c, 0, sizeof *c);
        if (fscanf(f, "%63s %d %d %d", c->name, &c->stop_on_bos, &c->max_new, &c->n_prompt) != 4) break;
        if (c->n_prompt < 1 || c->n_prompt > 1024) break;
        int got = 0;
        for (int i = 0; i < c->n_prompt; i++) got += fscanf(f, "%d", &c->prompt[i]);
        if (got != c->n_prompt || fscanf(f, "%d", &c->n_want) != 1 || c->n_want < 0 || c->n_want > 1024) break;
        got = 0;
        for (int i = 0; i < c->n_want; i++) got += fscanf(f, "%d", &c->want[i]);
        if (got != c->n_want) break;
        n++;
    }
    fclose(f);
    return n;
}

static int32_t gc_argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* All cases in one batch: the prompts as prefill, then one decode token per live case per step. */
static int gc_golden_run(const model *m, backend *be, gc_case *cs, int n_cases, int kv_dtype, double *tok_s)
{
    const int bs = 16, max_blocks = 512 / bs + 2;
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, bs, kv_dtype);
    char err[512];
    const int32_t n_blocks = n_cases * max_blocks;
    fwd *f = fwd_create(m, be, &g, &n_blocks, 1024 * 16, n_cases, err, sizeof err);
    if (!f) {
        fprintf(stderr, "gpu-check: %s\n", err);
        return -1;
    }
    int32_t *bt = malloc((size_t)n_cases * max_blocks * 4), *tokens = malloc(16384 * 4), *pos = malloc(16384 * 4);
    int32_t *slots = malloc(16384 * 4), *q_start = malloc(((size_t)n_cases + 1) * 4), *ctx = malloc((size_t)n_cases * 4);
    int32_t *rows = malloc((size_t)n_cases * 4), *seq_of = malloc((size_t)n_cases * 4), *len = calloc((size_t)n_cases, 4);
    float *logits = malloc((size_t)n_cases * m->hp.n_vocab * 4);
    for (int i = 0; i < n_cases * max_blocks; i++) bt[i] = i;
    for (int i = 0; i < n_cases; i++) {
        cs[i].n_gen = cs[i].done = cs[i].n_got = 0;
        cs[i].bad_at = -1;
    }
    int first = 1, steps = 0, rc = 0;
    long gen_tokens = 0;
    double t0 = gc_now();
    for (;;) {
        int n = 0, ns = 0;
        q_start[0] = 0;
        for (int i = 0; i < n_cases; i++) {
            gc_case *c = &cs[i];
            if (c->done) continue;
            const int32_t *src = first ? c->prompt : &c->last;
            int cnt = first ? c->n_prompt : 1;
            for (int k = 0; k < cnt; k++, n++) {
                tokens[n] = src[k];
                pos[n] = len[i];
                slots[n] = cuda_kv_entry_slot(bt + i * max_blocks, bs, len[i]);
                len[i]++;
            }
            ctx[ns] = len[i];
            rows[ns] = n - 1;
            seq_of[ns] = i;
            ns++;
            q_start[ns] = n;
        }
        if (ns == 0) break;
        /* block-table rows of the live cases, in batch order */
        int32_t *btb = malloc((size_t)ns * max_blocks * 4);
        for (int s = 0; s < ns; s++) memcpy(btb + s * max_blocks, bt + seq_of[s] * max_blocks, (size_t)max_blocks * 4);
        be_batch b = {.n_tokens = n, .tokens = tokens, .positions = pos, .n_seqs = ns, .q_start = q_start, .n_logits = ns, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = btb, .bt_stride = max_blocks}}};
        rc = fwd_run(f, &b, logits);
        free(btb);
        if (rc) {
            fprintf(stderr, "gpu-check: fwd_run failed (%d)\n", rc);
            break;
        }
        steps++;
        for (int s = 0; s < ns; s++) {
            gc_case *c = &cs[seq_of[s]];
            int32_t t = gc_argmax(logits + (size_t)s * m->hp.n_vocab, m->hp.n_vocab);
            if (c->n_got < 1024) c->got[c->n_got++] = t;
            gen_tokens++;
            if (c->stop_on_bos && t == 1) {
                c->done = 1;
                continue;
            }
            if (c->n_gen >= c->n_want || t != c->want[c->n_gen]) {
                c->bad_at = c->n_gen;
                c->done = 1;
                continue;
            }
            c->n_gen++;
            c->last = t;
            if (c->n_gen == c->max_new || len[seq_of[s]] >= 512) c->done = 1;
        }
        first = 0;
    }
    *tok_s = gen_tokens / (gc_now() - t0);
    int ok = 0;
    for (int i = 0; i < n_cases; i++) {
        int pass = cs[i].bad_at < 0 && cs[i].n_gen == cs[i].n_want;
        ok += pass;
        if (!pass)
            printf("  %s: %s at generated token %d (of %d golden)\n", cs[i].name,
                   cs[i].bad_at >= 0 ? "diverged" : "stopped early", cs[i].bad_at >= 0 ? cs[i].bad_at : cs[i].n_gen,
                   cs[i].n_want);
    }
    free(bt), free(tokens), free(pos), free(slots), free(q_start), free(ctx), free(rows), free(seq_of), free(len);
    free(logits);
    fwd_destroy(f);
    return rc ? -1 : ok;
}

/* 1 when every case picked the same tokens in runs a and b. */
static int gc_same_tokens(const gc_case *a, const gc_case *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].n_got != b[i].n_got || memcmp(a[i].got, b[i].got, (size_t)a[i].n_got * sizeof a[i].got[0])) return 0;
    return 1;
}

/* The golden cases on gpu: with f32 activations every case must match the CPU's golden ids
 * exactly (f16 and f32 KV, eager and with graphs; int8 / fp8 KV are reported). With bf16
 * activations (what serving runs) the ids are reported (8-bit activations move near-ties: a CPU
 * simulation of that rounding kept 11 of the 13 cases exact), and the tokens with graphs on and
 * off must be identical. */
static void gc_golden(backend *gpu, const char *model_path, const char *golden_path)
{
    static gc_case cs[32], eager[32];
    const int bf = gpu->act_type != DT_F32;
    printf("== stories260K golden greedy ids on the GPU (%s activations)\n", bf ? "bf16" : "f32");
    int n = golden_path ? gc_read_golden(golden_path, cs, 32) : -1;
    model *m = NULL;
    char err[512];
    if (n <= 0 || !model_path || model_load(model_path, &m, err, sizeof err)) {
        printf("  skipped: %s\n", n <= 0 ? "no golden ids file" : "model not loadable");
        gc_add("golden stories260K", "skipped", "model/ids missing", 0);
        return;
    }
    const int kvs[5] = {KV_F16, KV_F16, KV_F32, KV_I8, KV_FP8}, graphs[5] = {0, 1, 1, 1, 1};
    for (int k = 0; k < (bf ? 2 : 5); k++) {
        double tps = 0;
        cuda_set_graphs(gpu, graphs[k]);
        int ok = gc_golden_run(m, gpu, cs, n, kvs[k], &tps);
        char what[48], v[40];
        snprintf(what, sizeof what, "golden %s kv %s %s", bf ? "bf16" : "f32", kv_dtype_name(kvs[k]),
                 graphs[k] ? "graphs" : "eager");
        snprintf(v, sizeof v, "%d/%d cases exact", ok < 0 ? 0 : ok, n);
        printf("  %s: %s (%.0f tok/s batched)\n", what, v, tps);
        int quant = kv_dtype_is_quant(kvs[k]), reported = quant || bf;
        gc_add(what, v, quant ? "reported (int8/fp8 round K/V)" : bf ? "reported (bf16 activations)" : "all exact",
               reported ? (ok >= 0 ? -1 : 0) : ok == n);
        if (k == 0) memcpy(eager, cs, sizeof eager);
        if (k == 1) {
            int same = ok >= 0 && gc_same_tokens(eager, cs, n);
            gc_add(bf ? "golden bf16 graphs = eager" : "golden f32 graphs = eager", same ? "identical" : "DIFFER",
                   "every token", same);
        }
    }
    cuda_set_graphs(gpu, 1);
    model_destroy(m);
}

/* The kernel table of the device's capability against the sm_80 baseline (KVSERVE_CUDA_CC=80:
 * the matrix-vector kernels launched without programmatic dependent launches on sm_90): the same
 * arithmetic, so the golden cases must pick the same tokens with bf16 activations. */
static void gc_golden_baseline(backend *gpu, const char *model_path, const char *golden_path)
{
    static gc_case a[32], b[32];
    char err[256];
    model *m = NULL;
    int n = golden_path ? gc_read_golden(golden_path, a, 32) : -1;
    if (n <= 0 || !model_path || model_load(model_path, &m, err, sizeof err)) return;
    memcpy(b, a, sizeof b);
    setenv("KVSERVE_CUDA_CC", "80", 1);
    backend *base = cuda_backend_create(0, err, sizeof err);
    unsetenv("KVSERVE_CUDA_CC");
    double tps;
    int ok = base && gc_golden_run(m, gpu, a, n, KV_F16, &tps) >= 0 && gc_golden_run(m, base, b, n, KV_F16, &tps) >= 0;
    int same = ok && gc_same_tokens(a, b, n);
    printf("  golden bf16, this GPU's kernels vs the sm_80 baseline: %s\n", same ? "identical" : "DIFFER");
    gc_add("golden bf16 kernels = sm_80 baseline", same ? "identical" : "DIFFER", "every token", same);
    be_destroy(base);
    model_destroy(m);
}

/* ---- 2b. every architecture: CUDA logits against the CPU backend ---------------------------- */

static void gc_archs(kc_ctx *c)
{
    printf("== every architecture: CUDA logits vs the CPU backend\n");
    for (int a = 0; a < KC_N_ARCHS; a++) gc_report(kc_check_arch(c, a));
    gc_report(kc_check_arch_typed(c, KC_ARCH_LLAMA, DT_Q8_0)); /* llama, Q8_0: mmvq and mmq end to end */
}

/* ---- 3. benchmarks ------------------------------------------------------------------------- */

/* Device-to-device copy: bytes read + written per second, the bandwidth ceiling. */
static double gc_bench_copy(void)
{
    size_t bytes = (size_t)1 << 30;
    void *a, *b;
    GC_CUDA(cudaMalloc(&a, bytes));
    GC_CUDA(cudaMalloc(&b, bytes));
    GC_CUDA(cudaMemset(a, 0x5a, bytes));
    double t[9];
    for (int r = -2; r < 9; r++) {
        GC_CUDA(cudaDeviceSynchronize());
        double t0 = gc_now();
        for (int i = 0; i < 5; i++) GC_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        GC_CUDA(cudaDeviceSynchronize());
        if (r >= 0) t[r] = (gc_now() - t0) / 5;
    }
    cudaFree(a);
    cudaFree(b);
    return 2.0 * bytes / gc_median(t, 9) / 1e9;
}

/* cuBLAS's own BF16 GEMM with FP32 accumulation at 8192³: the matrix ceiling in TFLOP/s. */
static double gc_bench_cublas_peak(void)
{
    const int n = 8192;
    size_t e = (size_t)n * n;
    uint16_t *h = malloc(e * 2);
    uint64_t s = 0x6e6d6d;
    for (size_t i = 0; i < e; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = dt_f32_to_bf16(((float)(s >> 40) / 16777216.0f - 0.5f));
    }
    void *A, *B, *C;
    GC_CUDA(cudaMalloc(&A, e * 2));
    GC_CUDA(cudaMalloc(&B, e * 2));
    GC_CUDA(cudaMalloc(&C, e * 4));
    GC_CUDA(cudaMemcpy(A, h, e * 2, cudaMemcpyHostToDevice));
    GC_CUDA(cudaMemcpy(B, h, e * 2, cudaMemcpyHostToDevice));
    free(h);
    /* the backend created before the benchmarks has loaded cuBLAS (cuda/cublas_dl.h) */
    const cuda_blas_api *blas = cuda_blas();
    cublasHandle_t hb;
    if (!blas || blas->create(&hb) != CUBLAS_STATUS_SUCCESS) return 0;
    float al = 1, be = 0;
    double t[7];
    for (int r = -2; r < 7; r++) {
        GC_CUDA(cudaDeviceSynchronize());
        double t0 = gc_now();
        for (int i = 0; i < 3; i++)
            blas->gemm_ex(hb, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &al, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &be, C,
                          CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        GC_CUDA(cudaDeviceSynchronize());
        if (r >= 0) t[r] = (gc_now() - t0) / 3;
    }
    blas->destroy(hb);
    cudaFree(A), cudaFree(B), cudaFree(C);
    return 2.0 * n * n * (double)n / gc_median(t, 7) / 1e12;
}

/* The backend's matmul op (activation conversion included) on a TinyLlama FFN shape with
 * weights of the given type; *weight_gbs gets the weight bytes (as stored) read per second. */
static double gc_bench_matmul(backend *be, int type, int n_rows, double *weight_gbs)
{
    kc_ctx c = {be, be, 0x6d6d, 1};
    kc_tensor kt;
    const int k = 2048, n = 5632;
    if (kc_tensor_random(&c, &kt, type, k, n, 0.05f)) return 0;
    be_weight w;
    if (be->ops->weight_upload(be, &kt.t, &w)) return 0;
    free(kt.mem);
    float *x = malloc((size_t)n_rows * k * 4);
    kc_fill(&c, x, (size_t)n_rows * k, 1.0f);
    void *xd = kc_put_act(be, x, (size_t)n_rows * k), *od = be->ops->alloc(be, (size_t)n_rows * n);
    free(x);
    int reps = n_rows == 1 ? 200 : 10;
    double t[7];
    for (int r = -2; r < 7; r++) {
        be->ops->sync(be);
        double t0 = gc_now();
        for (int i = 0; i < reps; i++) be->ops->matmul(be, xd, n_rows, &w, NULL, od);
        be->ops->sync(be);
        if (r >= 0) t[r] = (gc_now() - t0) / reps;
    }
    double tm = gc_median(t, 7);
    if (weight_gbs) *weight_gbs = (double)dt_row_bytes(type, k) * n / tm / 1e9;
    be->ops->free(be, xd), be->ops->free(be, od);
    be->ops->weight_free(be, &w);
    return 2.0 * n_rows * (double)k * n / tm / 1e12;
}

/* Attention over paged KV of kv_dtype, n_seqs sequences of ctx_len entries whose last n_new are
 * this step's tokens, H query heads over KVH kv heads of D (TinyLlama's 32 / 4 / 64 by default).
 * Returns KV bytes read per second (the arena's real bytes: scales included); *tflops gets the
 * attention FLOP rate (QK and PV, causal); *step_us (when not NULL) the time of one call. */
static int gc_attn_heads = 32, gc_attn_kv_heads = 4, gc_attn_dim = 64;
static double gc_bench_attention_ex(backend *be, int n_seqs, int ctx_len, int n_new_tok, int kv_dtype, int *splits,
                                    double *tflops, double *step_us)
{
    const int bs = 16, H = gc_attn_heads, KVH = gc_attn_kv_heads, D = gc_attn_dim, kv_dim = KVH * D;
    kv_geom g = kv_geom_make(1, KVH, D, bs, kv_dtype);
    int per = (ctx_len + bs - 1) / bs;
    int32_t n_blocks = n_seqs * per;
    if (be->ops->kv_init(be, &g, &n_blocks)) return 0;
    int32_t *bt = malloc((size_t)n_blocks * 4), *ctx = malloc((size_t)n_seqs * 4), *nn = malloc((size_t)n_seqs * 4);
    for (int i = 0; i < n_blocks; i++) bt[i] = i;
    for (int s = 0; s < n_seqs; s++) ctx[s] = ctx_len, nn[s] = n_new_tok;
    kc_ctx c = {be, be, 0xa77, 1};
    /* fill the cache with random K/V in chunks, so no timing runs over zeros */
    kc_batch fb;
    kc_attn_batch(&fb, n_seqs, ctx, nn, bt, per, bs, 1);
    size_t nk = (size_t)fb.b.n_tokens * kv_dim;
    float *h = malloc(nk * 4);
    kc_fill(&c, h, nk, 1.0f);
    void *k = kc_put_act(be, h, nk), *v = kc_put_act(be, h, nk);
    free(h);
    be->ops->begin(be, &fb.b);
    be->ops->store_kv(be, 0, k, v);
    be->ops->sync(be);
    be->ops->free(be, k), be->ops->free(be, v);
    kc_batch ab;
    kc_attn_batch(&ab, n_seqs, ctx, nn, bt, per, bs, 0);
    size_t nq = (size_t)n_seqs * n_new_tok * H * D;
    h = malloc(nq * 4);
    kc_fill(&c, h, nq, 1.0f);
    void *q = kc_put_act(be, h, nq), *o = be->ops->alloc(be, nq);
    free(h);
    be->ops->begin(be, &ab.b);
    double t[7];
    int reps = n_new_tok > 1 ? (n_new_tok > 8192 ? 2 : 5) : 50;
    for (int r = -2; r < 7; r++) {
        be->ops->sync(be);
        double t0 = gc_now();
        be_attn at = {H, 1.0f / sqrtf((float)D), 0.0f, 0, NULL, NULL};
        for (int i = 0; i < reps; i++) be->ops->attention(be, 0, q, &at, o);
        be->ops->sync(be);
        if (r >= 0) t[r] = (gc_now() - t0) / reps;
    }
    *splits = cuda_last_attn_splits(be);
    double bytes = (double)n_seqs * ctx_len * (double)kv_bytes_per_token(&g) + 2.0 * nq * be_act_bytes(be);
    if (step_us) *step_us = gc_median(t, 7) * 1e6;
    /* keys seen: Σ over new tokens of (ctx_len − n_new + i + 1) */
    double keys = (double)n_seqs * ((double)n_new_tok * (ctx_len - n_new_tok) + (double)n_new_tok * (n_new_tok + 1) / 2);
    if (tflops) *tflops = 4.0 * keys * H * D / gc_median(t, 7) / 1e12;
    be->ops->free(be, q), be->ops->free(be, o);
    kc_batch_free(&fb), kc_batch_free(&ab);
    free(bt), free(ctx), free(nn);
    return bytes / gc_median(t, 7) / 1e9;
}

static double gc_bench_attention(backend *be, int n_seqs, int ctx_len, int *splits)
{
    return gc_bench_attention_ex(be, n_seqs, ctx_len, 1, KV_F16, splits, NULL, NULL);
}

#include "cuda/check/gpu_decode.c"

/* Microseconds per step of be's sampler over n rows of V (logits in backend memory), rows of
 * kind (sc_row), median of reps; the host's path when via_host: the logits copied to the host and
 * the rows run there. */
static double sc_bench_sampler(backend *be, const float *logits, int32_t n, int32_t V, int kind, int via_host,
                               kc_ctx *c)
{
    smp_row *rows = malloc((size_t)n * sizeof *rows);
    smp_arena ar;
    smp_work w;
    float *host = via_host ? malloc((size_t)n * V * sizeof *host) : NULL;
    int32_t *ids = malloc((size_t)n * sizeof *ids), n_lp;
    smp_result *lps = malloc((size_t)n * sizeof *lps);
    if (smp_arena_init(&ar, V) || smp_work_init(&w, V)) return 0;
    sc_rows(c, rows, &ar, n, V, 0, kind, &n_lp);
    smp_batch sb = {n, rows, ar.n, ar.v, n_lp, V};
    enum { REPS = 21 };
    double t[REPS];
    for (int r = 0; r < REPS + 2; r++) {
        double t0 = gc_now();
        const int32_t *ig;
        const smp_result *lg;
        if (via_host) {
            be->ops->to_host(be, logits, (size_t)n * V, host);
            smp_rows_run(&sb, 0, n, host, NULL, &w, ids, lps);
        } else if (be->ops->sample(be, logits, &sb, r & 1) || be->ops->sample_wait(be, r & 1, &ig, &lg)) {
            return 0;
        }
        if (r >= 2) t[r - 2] = (gc_now() - t0) * 1e6;
    }
    qsort(t, REPS, sizeof *t, gc_cmp_double);
    smp_arena_fini(&ar);
    smp_work_fini(&w);
    free(rows), free(host), free(ids), free(lps);
    return t[REPS / 2];
}

/* Where a decode step's time goes, host and device (gc_bench_decode_device with si): the host's
 * mean microseconds per step building the batch (the engine's schedule), in fwd_begin (metadata
 * packed into pinned memory and its asynchronous upload, the token references), fwd_launch
 * (enqueueing the forward or replaying its graph), be_ops.sample (enqueueing the sampler) and
 * sample_wait (the step's one wait); from CUDA events on the backend's stream, the device's time
 * from a step's first work (its metadata's copy) to its sampler's end, and the gap from one step's
 * sampler end to the next step's first work having completed: the device idle between steps plus
 * the metadata copy (a few microseconds), which overlapped steps should bring to that copy alone. */
typedef struct gc_stepinfo {
    double host_us[5]; /* build, begin, launch, sample, wait */
    double wall_ms;    /* per decode step */
    double gpu_ms;     /* per decode step: first work to sampler end */
    double gap_us, gap_p90_us;
} gc_stepinfo;

static const char *const gc_host_phase[5] = {"build", "begin", "launch", "sample", "wait"};

/* The stepinfo's device times from the events recorded at each step's first work (first[st]) and
 * its sampler's end (end[st]), decode steps 1 .. steps. */
static void gc_step_events(gc_stepinfo *si, cudaEvent_t *first, cudaEvent_t *end, int steps)
{
    double busy = 0, gaps[1024];
    int ng = 0;
    cudaEventSynchronize(end[steps]);
    for (int st = 1; st <= steps; st++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, first[st], end[st]) == cudaSuccess) busy += ms;
        if (cudaEventElapsedTime(&ms, end[st - 1], first[st]) == cudaSuccess && ng < 1024) gaps[ng++] = ms * 1e3;
    }
    si->gpu_ms = busy / steps;
    qsort(gaps, (size_t)ng, sizeof *gaps, gc_cmp_double);
    double sum = 0;
    for (int i = 0; i < ng; i++) sum += gaps[i];
    si->gap_us = ng ? sum / ng : 0;
    si->gap_p90_us = ng ? gaps[(ng * 9) / 10 < ng ? (ng * 9) / 10 : ng - 1] : 0;
}

/* Decode throughput of n_seqs sequences as the engine runs them with the sampler on the device
 * (greedy rows, be_ops.sample): synchronous (each step's tokens waited for, then fed back from the
 * host), or overlapped (step n + 1 begun and launched with its tokens as references to step n's
 * sampled ids, then step n waited for). tok/s of the decode steps. */
static double gc_bench_decode_device(fwd *f, const model *m, int n_seqs, int prompt, int steps, int bt_stride,
                                     int overlap, gc_stepinfo *si)
{
    cudaStream_t stream = si ? (cudaStream_t)cuda_backend_stream(fwd_backend(f)) : NULL;
    cudaEvent_t *ev = si ? calloc(2 * ((size_t)steps + 1), sizeof *ev) : NULL;
    for (int i = 0; ev && i < 2 * (steps + 1); i++) cudaEventCreate(&ev[i]);
    if (si) memset(si, 0, sizeof *si);
    double th[6];
    const int bs = 16;
    backend *be = fwd_backend(f);
    int max_tok = n_seqs * prompt;
    int32_t *tokens = malloc((size_t)max_tok * 4), *pos = malloc((size_t)max_tok * 4), *slots = malloc((size_t)max_tok * 4);
    int32_t *q_start = malloc(((size_t)n_seqs + 1) * 4), *ctx = malloc((size_t)n_seqs * 4), *lrows = malloc((size_t)n_seqs * 4);
    int32_t *bt = malloc((size_t)n_seqs * bt_stride * 4);
    smp_row *rows = calloc((size_t)n_seqs, sizeof *rows);
    for (int i = 0; i < n_seqs * bt_stride; i++) bt[i] = i;
    for (int s = 0; s < n_seqs; s++) { /* greedy rows, one per sequence */
        rows[s].logits = s;
        rows[s].kind = SMP_ROW_SAMPLE;
        rows[s].lp = rows[s].pending = rows[s].fallback = rows[s].mask = -1;
        rows[s].top_p = 1.0f;
        rows[s].rep = 1.0f;
    }
    smp_batch sb = {n_seqs, rows, 0, NULL, 0, m->hp.n_vocab};
    const int32_t *ids = NULL;
    const smp_result *lps;
    double t0 = 0;
    int rc = 0;
    for (int st = 0; st <= steps && !rc; st++) {
        int n = 0;
        th[0] = gc_now();
        q_start[0] = 0;
        for (int s = 0; s < n_seqs; s++) {
            int cnt = st == 0 ? prompt : 1, base = st == 0 ? 0 : prompt + st - 1;
            for (int k = 0; k < cnt; k++, n++) {
                tokens[n] = st == 0 ? (7 * k + s) % m->hp.n_vocab : overlap ? -1 - s : ids[s];
                pos[n] = base + k;
                slots[n] = cuda_kv_entry_slot(bt + s * bt_stride, bs, base + k);
            }
            ctx[s] = base + cnt;
            lrows[s] = n - 1;
            q_start[s + 1] = n;
        }
        be_batch b = {.n_tokens = n, .tokens = tokens, .positions = pos, .n_seqs = n_seqs, .q_start = q_start, .n_logits = n_seqs, .logit_rows = lrows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = bt_stride}}};
        const float *logits = NULL;
        th[1] = gc_now();
        rc = fwd_begin(f, &b);
        if (ev) cudaEventRecord(ev[st], stream); /* after the metadata's copy */
        th[2] = gc_now();
        if (!rc) rc = fwd_launch(f, &logits);
        th[3] = gc_now();
        if (!rc) rc = be->ops->sample(be, logits, &sb, st & 1);
        if (ev) cudaEventRecord(ev[steps + 1 + st], stream);
        th[4] = gc_now();
        if (!rc && (!overlap || st == 0)) rc = be->ops->sample_wait(be, st & 1, &ids, &lps);
        else if (!rc) rc = be->ops->sample_wait(be, (st - 1) & 1, &ids, &lps); /* step st - 1's, while st runs */
        th[5] = gc_now();
        for (int k = 0; si && st > 0 && k < 5; k++) si->host_us[k] += (th[k + 1] - th[k]) * 1e6 / steps;
        if (st == 0) t0 = gc_now(); /* time the decode steps only */
    }
    if (!rc && overlap) rc = be->ops->sample_wait(be, steps & 1, &ids, &lps);
    double tps = rc ? 0 : (double)n_seqs * steps / (gc_now() - t0);
    if (si && !rc) {
        si->wall_ms = (gc_now() - t0) * 1e3 / steps;
        gc_step_events(si, ev, ev + steps + 1, steps);
    }
    for (int i = 0; ev && i < 2 * (steps + 1); i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(tokens), free(pos), free(slots), free(q_start), free(ctx), free(lrows), free(bt), free(rows);
    return tps;
}

/* The device sampler's time per step against the host's path, at 256 rows of a 32,000 vocabulary. */
static void gc_bench_sampler(backend *gpu)
{
    kc_ctx c = {gpu, NULL, 0x73616d70, 1};
    const int32_t n = 256, V = 32000;
    float *x = malloc((size_t)n * V * sizeof *x);
    kc_fill(&c, x, (size_t)n * V, 8.0f);
    float *xg = kc_put(gpu, x, (size_t)n * V);
    free(x);
    if (!xg) return;
    static const char *kinds[4] = {"greedy", "T 0.8, top_p 0.95", "top_k 50 + penalties", "greedy + logprobs 5"};
    char what[64], v[40], ref[48];
    double host = sc_bench_sampler(gpu, xg, n, V, 0, 1, &c);
    for (int k = 0; k < 4; k++) {
        double us = sc_bench_sampler(gpu, xg, n, V, k, 0, &c);
        snprintf(what, sizeof what, "sampler 256x32000 %s", kinds[k]);
        snprintf(v, sizeof v, "%.0f us/step", us);
        snprintf(ref, sizeof ref, "host path greedy %.0f us", host);
        gc_add(what, v, ref, -1);
    }
    gpu->ops->free(gpu, xg);
}

/* The step's time by phase at 1, 64 and 256 sequences, synchronous and overlapped, with graphs:
 * one row each (wall time per step, the device's share of it, the launch-to-launch gap), the host
 * phases in the log. */
static void gc_bench_steps(fwd *f, const model *m, int prompt, int steps, int stride)
{
    static const int sizes[3] = {1, 64, 256};
    char what[64], v[40], ref[64];
    backend *be = fwd_backend(f);
    cuda_set_graphs(be, 1);
    for (int i = 0; i < 3; i++)
        for (int ov = 0; ov < 2; ov++) {
            gc_stepinfo si;
            double tps = gc_bench_decode_device(f, m, sizes[i], prompt, steps, stride, ov, &si);
            snprintf(what, sizeof what, "step b=%d %s", sizes[i], ov ? "overlapped" : "sync");
            if (tps <= 0) {
                gc_add(what, "not run", "decode failed", 0);
                continue;
            }
            snprintf(v, sizeof v, "%.3f ms/step", si.wall_ms);
            snprintf(ref, sizeof ref, "GPU %.0f%%, gap %.0f us (p90 %.0f)", si.wall_ms > 0 ? 100 * si.gpu_ms / si.wall_ms : 0,
                     si.gap_us, si.gap_p90_us);
            gc_add(what, v, ref, -1);
            printf("  %s: %.3f ms/step, device %.3f ms, gap mean %.1f us p90 %.1f us; host us/step:", what, si.wall_ms,
                   si.gpu_ms, si.gap_us, si.gap_p90_us);
            for (int k = 0; k < 5; k++) printf(" %s %.1f", gc_host_phase[k], si.host_us[k]);
            printf("\n");
        }
    cuda_set_graphs(be, 0);
}

/* Decode of the TinyLlama-shaped model at 256 sequences: logits to the host against the sampler on
 * the device, synchronous and overlapped, and one sequence overlapped (its time per token). */
static void gc_bench_overlap(backend *gpu, gc_model *gm, int quick)
{
    const int bs = 16, prompt = 128, steps = quick ? 16 : 64, batch = 256, stride = (prompt + steps + bs) / bs + 1;
    kv_geom g = kv_geom_make(gm->m.hp.n_layers, gm->m.hp.n_kv_heads, gm->m.hp.head_dim, bs, KV_F16);
    char err[512], v[40], ref[48];
    const int32_t n_blocks = batch * stride;
    fwd *f = fwd_create(&gm->m, gpu, &g, &n_blocks, batch * prompt, batch, err, sizeof err);
    if (!f) {
        gc_add("tinyllama decode b=256", "not run", err, 0);
        return;
    }
    double host = gc_bench_decode(f, &gm->m, batch, prompt, steps, stride);
    snprintf(v, sizeof v, "%.0f tok/s", host);
    gc_add("tinyllama b=256, host sampling", v, "logits to the host", -1);
    for (int graphs = 0; graphs < 2; graphs++) {
        cuda_set_graphs(gpu, graphs);
        double sync = gc_bench_decode_device(f, &gm->m, batch, prompt, steps, stride, 0, NULL);
        double ov = gc_bench_decode_device(f, &gm->m, batch, prompt, steps, stride, 1, NULL);
        double one = gc_bench_decode_device(f, &gm->m, 1, prompt, steps, stride, 1, NULL);
        snprintf(v, sizeof v, "%.0f tok/s", sync);
        snprintf(ref, sizeof ref, "%.2fx host sampling%s", sync / host, graphs ? ", graphs" : "");
        gc_add("  device sampling, sync", v, ref, -1);
        snprintf(v, sizeof v, "%.0f tok/s", ov);
        snprintf(ref, sizeof ref, "%.2fx sync; TPOT %.2f ms", ov / sync, ov > 0 ? 1e3 * batch / ov : 0);
        gc_add("  device sampling, overlapped", v, ref, -1);
        snprintf(v, sizeof v, "%.0f tok/s", one);
        snprintf(ref, sizeof ref, "TPOT %.2f ms%s", one > 0 ? 1e3 / one : 0, graphs ? ", graphs" : "");
        gc_add("  b=1 overlapped", v, ref, -1);
    }
    cuda_set_graphs(gpu, 0);
    gc_bench_steps(f, &gm->m, prompt, steps, stride);
    fwd_destroy(f);
}

#include "cuda/check/quant_bench.c"
#include "cuda/check/moe_bench.c"
#include "cuda/check/spec_checks.c"

/* Decode tok/s at batch 1 and 16 of a synthetic model written by mkmodel (0 when it cannot run). */
static void gc_bench_synth(backend *gpu, const mkm_params *p, int quick, double *t1, double *t16)
{
    char path[512], err[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/kvserve-gc-%s-%d.gguf", tmp && *tmp ? tmp : "/tmp", p->arch, (int)getpid());
    model *m = NULL;
    *t1 = *t16 = 0;
    if (mkm_write(path, p, err, sizeof err) || model_load(path, &m, err, sizeof err)) {
        printf("  %s: %s\n", p->arch, err);
        remove(path);
        return;
    }
    const int bs = 16, prompt = 64, steps = quick ? 16 : 64, batch = 16, stride = (prompt + steps + bs) / bs + 1;
    kv_geom g = model_kv_geom(&m->hp, bs, KV_F16);
    const int32_t n_blocks = batch * stride;
    fwd *f = fwd_create(m, gpu, &g, &n_blocks, batch * prompt, batch, err, sizeof err);
    if (f) {
        cuda_set_graphs(gpu, 1);
        *t1 = gc_bench_decode(f, m, 1, prompt, steps, stride);
        *t16 = gc_bench_decode(f, m, batch, prompt, steps, stride);
        cuda_set_graphs(gpu, 0);
        fwd_destroy(f);
    } else {
        printf("  %s: %s\n", p->arch, err);
    }
    model_destroy(m);
    remove(path);
}

/* The MoE shape: dim 1024, 8 layers, 16 experts of width 512 of which 2 are used, Q8_0,
 * against the dense qwen3 twin whose FFN (1024) has the same active parameters; and a deepseek2
 * of the same size whose attention is MLA. */
static void gc_bench_moe(backend *gpu, int quick)
{
    mkm_params p;
    mkm_params_default(&p);
    p.dim = 1024, p.layers = 8, p.heads = 16, p.kv_heads = 8, p.vocab = 32000, p.context = 4096;
    p.type = DT_Q8_0, p.seed = 7;
    char v[40], ref[48];
    double d1, d16, m1, m16, l1, l16;
    p.arch = "qwen3", p.ffn = 1024;
    gc_bench_synth(gpu, &p, quick, &d1, &d16);
    p.arch = "qwen3moe", p.ffn = 512, p.experts = 16, p.experts_used = 2;
    gc_bench_synth(gpu, &p, quick, &m1, &m16);
    p.arch = "deepseek2", p.heads = 16, p.kv_heads = 0, p.head_dim = 64, p.rope_dims = 32, p.kv_lora = 256;
    gc_bench_synth(gpu, &p, quick, &l1, &l16);
    snprintf(v, sizeof v, "%.0f / %.0f tok/s", d1, d16);
    gc_add("dense qwen3 Q8_0 b=1 / b=16", v, "dim 1024, 8 layers, ffn 1024", -1);
    snprintf(v, sizeof v, "%.0f / %.0f tok/s", m1, m16);
    snprintf(ref, sizeof ref, "%.2fx / %.2fx dense (goal 0.8)", d1 > 0 ? m1 / d1 : 0, d16 > 0 ? m16 / d16 : 0);
    gc_add("qwen3moe 16x512 k2 b=1 / b=16", v, ref, -1);
    snprintf(v, sizeof v, "%.0f / %.0f tok/s", l1, l16);
    snprintf(ref, sizeof ref, "%.2fx / %.2fx qwen3moe", m1 > 0 ? l1 / m1 : 0, m16 > 0 ? l16 / m16 : 0);
    gc_add("deepseek2 MLA 256+32 b=1 / b=16", v, ref, -1);
}

/* Causal prefill attention of one sequence of n tokens (the whole prompt in one step), TFLOP/s
 * next to the cuBLAS peak and to PyTorch's flash attention on the same H200 (the issue's
 * figures: 234 / 298 TFLOP/s at head dim 64, 4k / 16k tokens; 270 / 348 at head dim 128). The
 * 1.1B shape (32 heads over 4 of 64) and an 8B-like one (32 over 8 of 128). */
static void gc_bench_prefill_attn(backend *gpu, double peak, int quick)
{
    const struct {
        int d, kvh, n;
        double torch;
    } runs[] = {{64, 4, 4096, 234}, {64, 4, 16384, 298}, {128, 8, 4096, 270}, {128, 8, 16384, 348}};
    for (int i = 0; i < 4; i++) {
        if (quick && runs[i].n > 4096) continue;
        char what[48], v[56], ref[64];
        int sp = 0;
        double tf = 0;
        gc_attn_dim = runs[i].d, gc_attn_kv_heads = runs[i].kvh;
        gc_bench_attention_ex(gpu, 1, runs[i].n, runs[i].n, KV_F16, &sp, &tf, NULL);
        snprintf(what, sizeof what, "prefill attn %dk causal hd%d", runs[i].n / 1024, runs[i].d);
        snprintf(v, sizeof v, "%.1f TFLOP/s (%s)", tf, cuda_last_attn_kernels(gpu));
        snprintf(ref, sizeof ref, "%.0f%% of cuBLAS, %.2fx torch %.0f", 100 * tf / peak, tf / runs[i].torch,
                 runs[i].torch);
        gc_add(what, v, ref, -1);
    }
    gc_attn_dim = 64, gc_attn_kv_heads = 4;
}

/* Time to first token of one prompt of n tokens on the 1.1B-shaped model: the prompt in chunks
 * of 8,192 tokens (the GPU's default --max-batch-tokens), the last chunk's last row's logits to
 * the host. Seconds, or a negative number when the model could not be set up. */
static double gc_ttft(fwd *f, const model *m, int n)
{
    const int bs = 16, chunk = 8192;
    int32_t *tokens = malloc((size_t)chunk * 4), *pos = malloc((size_t)chunk * 4), *slots = malloc((size_t)chunk * 4);
    int32_t q_start[2], ctx[1], row[1], stride = n / bs + 1, *bt = malloc((size_t)stride * 4);
    float *logits = malloc((size_t)m->hp.n_vocab * 4);
    for (int i = 0; i < stride; i++) bt[i] = i;
    double t0 = gc_now();
    int rc = 0;
    for (int c0 = 0; c0 < n && !rc; c0 += chunk) {
        int k = n - c0 < chunk ? n - c0 : chunk;
        for (int i = 0; i < k; i++) {
            tokens[i] = (7 * (c0 + i) + 3) % m->hp.n_vocab;
            pos[i] = c0 + i;
            slots[i] = cuda_kv_entry_slot(bt, bs, c0 + i);
        }
        q_start[0] = 0, q_start[1] = k, ctx[0] = c0 + k, row[0] = k - 1;
        be_batch b = {.n_tokens = k, .tokens = tokens, .positions = pos, .n_seqs = 1, .q_start = q_start, .n_logits = 1, .logit_rows = row, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = stride}}};
        rc = fwd_run(f, &b, logits);
    }
    double t = gc_now() - t0;
    free(tokens), free(pos), free(slots), free(bt), free(logits);
    return rc ? -1 : t;
}

/* The prompt lengths: 8k, 16k and 32k tokens (the last is the ≤ 0.5 s target). */
static void gc_bench_ttft(backend *gpu, const model *m, int quick)
{
    const int bs = 16, max_n = quick ? 8192 : 32768;
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, bs, KV_F16);
    int32_t n_blocks = max_n / bs + 2;
    char err[512], v[56], ref[64], what[48];
    fwd *f = fwd_create(m, gpu, &g, &n_blocks, 8192, 1, err, sizeof err);
    if (!f) {
        gc_add("tinyllama ttft", "not run", err, 0);
        return;
    }
    gc_ttft(f, m, 8192); /* warm-up: every buffer sized */
    for (int n = 8192; n <= max_n; n *= 2) {
        double t = gc_ttft(f, m, n);
        snprintf(what, sizeof what, "tinyllama bf16 ttft %dk", n / 1024);
        snprintf(v, sizeof v, "%.3f s", t);
        snprintf(ref, sizeof ref, "%s", n == 32768 ? "target <= 0.5 s" : "chunks of 8192");
        gc_add(what, v, ref, t < 0 ? 0 : -1);
    }
    fwd_destroy(f);
}

static void gc_bench(backend *gpu, int quick)
{
    char v[56], ref[64];
    printf("== benchmarks\n");
    double copy = gc_bench_copy();
    snprintf(v, sizeof v, "%.0f GB/s", copy);
    gc_add("d2d copy (read+write)", v, "memory ceiling", -1);
    double peak = gc_bench_cublas_peak();
    snprintf(v, sizeof v, "%.0f TFLOP/s", peak);
    gc_add("cuBLAS bf16 gemm 8192^3", v, "matrix ceiling", -1);
    double wgbs = 0;
    double mm = gc_bench_matmul(gpu, DT_BF16, 4096, NULL);
    snprintf(v, sizeof v, "%.0f TFLOP/s", mm);
    snprintf(ref, sizeof ref, "%.0f%% of cuBLAS peak", 100 * mm / peak);
    gc_add("matmul op 4096x2048->5632", v, ref, -1);
    gc_bench_matmul(gpu, DT_BF16, 1, &wgbs);
    snprintf(v, sizeof v, "%.0f GB/s weights", wgbs);
    snprintf(ref, sizeof ref, "%.0f%% of copy", 100 * wgbs / copy);
    gc_add("matmul op 1x2048->5632", v, ref, -1);
    /* quantised blocks on the device: mmvq (decode), mmq and the F16 tiles (prefill), every type */
    gc_bench_quant(gpu, copy, peak, quick);
    int sp = 0;
    double ab = gc_bench_attention(gpu, 64, 2048, &sp);
    snprintf(v, sizeof v, "%.0f GB/s (%s, splits %d)", ab, cuda_last_attn_kernels(gpu), sp);
    snprintf(ref, sizeof ref, "%.0f%% of copy (target 80%%)", 100 * ab / copy);
    gc_add("decode attn 64x2048 f16", v, ref, -1);
    ab = gc_bench_attention(gpu, 1, 32768, &sp);
    snprintf(v, sizeof v, "%.0f GB/s (%s, splits %d)", ab, cuda_last_attn_kernels(gpu), sp);
    snprintf(ref, sizeof ref, "%.0f%% of copy (target 80%%)", 100 * ab / copy);
    gc_add("decode attn 1x32768 f16", v, ref, -1);
    /* quantised caches: the same decode step, its time against f16's */
    double us16 = 0, usq = 0;
    gc_bench_attention_ex(gpu, 64, 2048, 1, KV_F16, &sp, NULL, &us16);
    for (int dt = KV_I8; dt <= KV_FP8; dt++) {
        ab = gc_bench_attention_ex(gpu, 64, 2048, 1, dt, &sp, NULL, &usq);
        char what[48];
        snprintf(what, sizeof what, "decode attn 64x2048 %s", kv_dtype_name(dt));
        snprintf(v, sizeof v, "%.0f GB/s, %.0f us", ab, usq);
        snprintf(ref, sizeof ref, "%.2fx f16's rate (%.0f us; target 1.7x)", usq > 0 ? us16 / usq : 0, us16);
        gc_add(what, v, ref, -1);
    }
    /* the same steps on the reference kernel, for the record */
    cuda_set_attn_kernels(gpu, 1);
    double ab_ref = gc_bench_attention(gpu, 64, 2048, &sp);
    snprintf(v, sizeof v, "%.0f GB/s (splits %d)", ab_ref, sp);
    snprintf(ref, sizeof ref, "%.0f%% of copy", 100 * ab_ref / copy);
    gc_add("  same, reference kernel", v, ref, -1);
    cuda_set_attn_kernels(gpu, 0);
    gc_bench_prefill_attn(gpu, peak, quick);

    double tiny_eager, tiny_graphs;
    gc_decode_table(gpu, copy, quick, &tiny_eager, &tiny_graphs);
    /* the device sampler, and decode driven as the engine drives it (sampling on the device,
     * overlapped steps, the step by phase) on the 1.1B-shaped model */
    gc_bench_sampler(gpu);
    gc_model gm;
    if (gc_model_make(&gm, gpu, &gc_tinyllama_shape)) {
        gc_add("tinyllama overlap", "not run", "out of device memory", 0);
    } else {
        gc_bench_overlap(gpu, &gm, quick);
        gc_spec(gpu, &gm, quick);
        gc_model_free(&gm);
    }
    /* the same model with Q8_0 and Q4_K weights, one sequence, against these bf16 figures */
    gc_bench_quant_models(gpu, copy, tiny_eager, tiny_graphs, quick);
    gc_bench_moe(gpu, quick);
    gc_bench_moe_experts(gpu, copy, quick);
    gc_model tm;
    if (gc_model_make(&tm, gpu, &gc_tinyllama_shape) == 0) {
        gc_bench_ttft(gpu, &tm.m, quick);
        gc_model_free(&tm);
    } else {
        gc_add("tinyllama ttft", "not run", "device out of memory", 0);
    }
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *golden = NULL, *out = ".";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(argv[i], "--golden") && i + 1 < argc) golden = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: gpu_check [--model GGUF] [--golden IDS] [--out DIR] [--quick]\n");
            return 2;
        }
    }
    char why[256];
    if (!cuda_is_available(why, sizeof why)) {
        fprintf(stderr, "gpu-check: no GPU: %s\n", why);
        return 2;
    }
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/results.tsv", out);
    gc_tsv = fopen(path, "w");
    /* f32 activations first: every op within f32 rounding of the CPU's, the golden ids exact */
    backend *gpu = cuda_backend_create_act(0, DT_F32, err, sizeof err);
    backend *cpu = cpu_backend_create(0);
    if (!gpu || !cpu) {
        fprintf(stderr, "gpu-check: %s\n", gpu ? "CPU backend failed" : err);
        return 2;
    }
    printf("gpu-check on %s; CPU reference: %s\n", gpu->desc, cpu->desc);
    double t0 = gc_now();
    gc_kernels(gpu, cpu, quick);
    printf("  (%.1f s)\n", gc_now() - t0);
    gc_golden(gpu, model_path, golden);
    printf("  (%.1f s)\n", gc_now() - t0);
    kc_ctx kc = {gpu, cpu, 0x61726368, !quick};
    gc_archs(&kc);
    printf("  (%.1f s)\n", gc_now() - t0);
    be_destroy(gpu);
    /* then bf16 activations, what serving runs: the checks, the golden ids, the benchmarks */
    gpu = cuda_backend_create(0, err, sizeof err);
    if (!gpu) {
        fprintf(stderr, "gpu-check: %s\n", err);
        return 2;
    }
    gc_kernels_bf16(gpu, cpu, quick);
    gc_golden(gpu, model_path, golden);
    gc_golden_baseline(gpu, model_path, golden);
    printf("  (%.1f s)\n", gc_now() - t0);
    be_destroy(cpu);
    gc_bench(gpu, quick);
    printf("  (%.1f s)\n", gc_now() - t0);
    be_destroy(gpu);

    printf("\n%-30s %-24s %-28s %s\n", "what", "value", "reference", "");
    for (int i = 0; i < gc_n_rows; i++)
        printf("%-30s %-24s %-28s %s\n", gc_rows[i].what, gc_rows[i].value, gc_rows[i].ref,
               gc_rows[i].ok < 0 ? "" : gc_rows[i].ok ? "ok" : "FAIL");
    if (gc_tsv) fclose(gc_tsv);
    return gc_failed ? 1 : 0;
}
