/*
 * bench_cpu.c — microbenchmarks of the CPU backend's kernels (numbers, never a gate).
 *
 *   bench_cpu [--threads N] [--quick] [--cpu-time] [--rows N] [--only memcpy|read|dispatch|gemv|gemm|decode|attn]
 *
 * Prints, with medians over several repetitions:
 *  - memcpy bandwidth of a large buffer (1 thread) and streaming-read bandwidth (N threads):
 *    the memory bound that decode is measured against;
 *  - op dispatch overhead of the worker pool (an empty task), in microseconds;
 *  - GEMV (one activation row) GB/s of weight streamed, per weight type, at TinyLlama-110M and
 *    TinyLlama-1.1B matrix shapes (cache-resident when small: the 110M model fits in L3);
 *  - a whole 1.1B-shaped decode step's matmuls (22 layers + LM head, > L3), GB/s and tok/s bound;
 *  - GEMM (512 rows: a prompt; --rows N: e.g. 16 for a batched decode step) GFLOP/s per weight
 *    type at the same shapes;
 *  - attention (110M head shape, 12 layers' KV so that it streams from memory as in a forward
 *    pass): batched decode (16 × 256 keys; 4 × 1072 keys with and without a 992-key shared
 *    prefix), a 512-token prefill and four 72-token chunks over 1072 keys, microseconds.
 * Weights are synthetic random values; no model file is needed.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "cpu/internal.h"
#include "engine/backend.h"
#include "engine/dtype.h"

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* With --cpu-time (meaningful with --threads 1) kernels are timed by the thread's CPU time, so
 * that other processes on a shared machine do not count against them. */
static clockid_t kernel_clock = CLOCK_MONOTONIC;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double kernel_s(void)
{
    struct timespec ts;
    clock_gettime(kernel_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A random weight matrix of the given type in a fresh buffer. */
static model_tensor make_weight(int type, int64_t n_in, int64_t n_out)
{
    model_tensor t = {.name = "w", .type = type, .ne = {n_in, n_out}};
    t.row_bytes = dt_row_bytes(type, n_in);
    size_t bytes = t.row_bytes * (size_t)n_out;
    char *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t o = 0; o < n_out; o++) {
        char *row = p + (size_t)o * t.row_bytes;
        for (int64_t i = 0; i < n_in; i++) {
            float f = (float)((int)(next() % 2001) - 1000) / 1000.0f;
            if (type == DT_F32) ((float *)row)[i] = f;
            if (type == DT_F16) ((uint16_t *)row)[i] = dt_f32_to_f16(f);
            if (type == DT_BF16) ((uint16_t *)row)[i] = dt_f32_to_bf16(f);
        }
        if (type == DT_Q8_0)
            for (int64_t b = 0; b < n_in / 32; b++) {
                dt_block_q8_0 *blk = (dt_block_q8_0 *)row + b;
                blk->d = dt_f32_to_f16(0.01f);
                for (int i = 0; i < 32; i++) blk->q[i] = (int8_t)((int)(next() % 255) - 127);
            }
    }
    t.data = p;
    return t;
}

/* ---- memory bandwidth ---------------------------------------------------------------------- */

typedef struct rd_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} rd_arg;

static void *read_part(void *v)
{
    rd_arg *a = v;
#ifdef __AVX512F__
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 32 <= a->n; i += 32) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(a->p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(a->p + i + 8)));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(a->p + i + 16)));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(a->p + i + 24)));
    }
    a->sum = (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
#else
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    a->sum = s0 + s1 + s2 + s3;
#endif
    return NULL;
}

static double bench_read(int n_threads, size_t bytes)
{
    uint64_t *buf = aligned_alloc(64, bytes);
    memset(buf, 1, bytes);
    double t[5];
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[64];
        rd_arg a[64];
        size_t per = bytes / 8 / (size_t)n_threads;
        double t0 = now_s();
        for (int i = 0; i < n_threads; i++) {
            a[i] = (rd_arg){buf + per * (size_t)i, per, 0};
            pthread_create(&th[i], NULL, read_part, &a[i]);
        }
        for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
        t[rep] = now_s() - t0;
    }
    free(buf);
    return (double)bytes / median(t, 5) / 1e9;
}

static double bench_memcpy(size_t bytes)
{
    char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double t[5];
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s();
        memcpy(b, a, bytes);
        t[rep] = now_s() - t0;
    }
    free(a);
    free(b);
    return (double)bytes / median(t, 5) / 1e9; /* bytes copied per second */
}

/* ---- dispatch ------------------------------------------------------------------------------ */

static void empty_task(void *arg, int64_t lo, int64_t hi, int ith)
{
    (void)arg, (void)lo, (void)hi, (void)ith;
}

static double bench_dispatch(backend *be)
{
    cpu__backend *c = (cpu__backend *)be;
    double t[7];
    for (int rep = 0; rep < 7; rep++) {
        int n = 20000;
        double t0 = now_s();
        for (int i = 0; i < n; i++) cpu__pool_for(c->pool, c->n_threads, 1, empty_task, NULL);
        t[rep] = (now_s() - t0) / n;
    }
    return median(t, 7) * 1e6;
}

/* ---- matmul -------------------------------------------------------------------------------- */

typedef struct shape {
    const char *name;
    int64_t n_in, n_out;
} shape;

static const shape shapes[] = {
    {"110M qkvo 768x768", 768, 768},      {"110M ffn_up 768->2048", 768, 2048},
    {"110M ffn_down 2048->768", 2048, 768}, {"110M lm_head 768->32000", 768, 32000},
    {"1.1B q/o 2048x2048", 2048, 2048},   {"1.1B k/v 2048->256", 2048, 256},
    {"1.1B ffn_up 2048->5632", 2048, 5632}, {"1.1B ffn_down 5632->2048", 5632, 2048},
};

static double time_matmul(backend *be, const be_weight *w, const float *x, int rows, float *out, int reps)
{
    double t[15];
    if (reps > 15) reps = 15;
    be->ops->matmul(be, x, rows, w, NULL, out); /* warm */
    for (int rep = 0; rep < reps; rep++) {
        double t0 = kernel_s();
        be->ops->matmul(be, x, rows, w, NULL, out);
        t[rep] = kernel_s() - t0;
    }
    return median(t, reps);
}

static void bench_shapes(backend *be, int rows, int quick)
{
    const int types[] = {DT_Q8_0, DT_F16, DT_BF16, DT_F32};
    printf("\n%s (%d row%s), median of reps, %s:\n", rows == 1 ? "GEMV" : "GEMM", rows,
           rows == 1 ? "" : "s", rows == 1 ? "GB/s of weights" : "GFLOP/s");
    printf("  %-28s %10s %10s %10s %10s\n", "shape", "Q8_0", "F16", "BF16", "F32");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (quick && s % 2) continue;
        printf("  %-28s", shapes[s].name);
        for (int k = 0; k < 4; k++) {
            model_tensor mt = make_weight(types[k], shapes[s].n_in, shapes[s].n_out);
            be_weight w;
            be->ops->weight_upload(be, &mt, &w);
            float *x = malloc((size_t)rows * shapes[s].n_in * 4);
            float *out = malloc((size_t)rows * shapes[s].n_out * 4);
            for (int64_t i = 0; i < rows * shapes[s].n_in; i++) x[i] = (float)(next() % 1000) / 500.0f - 1;
            double sec = time_matmul(be, &w, x, rows, out, rows == 1 ? 15 : (quick ? 3 : 5));
            double v = rows == 1 ? (double)mt.row_bytes * shapes[s].n_out / sec / 1e9
                                 : 2.0 * rows * shapes[s].n_in * shapes[s].n_out / sec / 1e9;
            printf(" %10.1f", v);
            fflush(stdout);
            free(x);
            free(out);
            free((void *)mt.data);
        }
        printf("\n");
    }
}

/* The matmuls of one decode step of a 1.1B-shaped model (n_layers layers + LM head): every
 * weight byte comes from DRAM because the set is far larger than the L3. */
static void bench_decode_stream(backend *be, int type, int n_layers)
{
    const int64_t dim = 2048, kv = 256, ff = 5632, vocab = 32000;
    int n_w = n_layers * 7 + 1;
    model_tensor *mt = calloc((size_t)n_w, sizeof *mt);
    be_weight *w = calloc((size_t)n_w, sizeof *w);
    size_t bytes = 0;
    for (int l = 0; l < n_layers; l++) {
        int64_t ins[7] = {dim, dim, dim, dim, dim, dim, ff}, outs[7] = {dim, kv, kv, dim, ff, ff, dim};
        for (int k = 0; k < 7; k++) mt[l * 7 + k] = make_weight(type, ins[k], outs[k]);
    }
    mt[n_w - 1] = make_weight(type, dim, vocab);
    for (int i = 0; i < n_w; i++) {
        be->ops->weight_upload(be, &mt[i], &w[i]);
        bytes += mt[i].row_bytes * (size_t)mt[i].ne[1];
    }
    float *x = malloc(ff * 4), *out = malloc(vocab * 4);
    for (int i = 0; i < ff; i++) x[i] = (float)(next() % 1000) / 500.0f - 1;
    double t[7];
    for (int rep = 0; rep < 7; rep++) {
        double t0 = kernel_s();
        for (int i = 0; i < n_w; i++) be->ops->matmul(be, x, 1, &w[i], NULL, out);
        t[rep] = kernel_s() - t0;
    }
    double sec = median(t, 7);
    printf("  %-6s %2d layers + head: %7.1f MB, %6.2f ms/step, %5.1f GB/s, %5.1f steps/s (weights "
           "only)\n",
           dt_name(type), n_layers, bytes / 1e6, sec * 1e3, bytes / sec / 1e9, 1 / sec);
    for (int i = 0; i < n_w; i++) free((void *)mt[i].data);
    free(mt);
    free(w);
    free(x);
    free(out);
}

/* Attention over n_seqs sequences of ctx KV entries each, the last n_new of them new tokens
 * (1: batched decode; ctx: a prefill), the first `shared` entries the same blocks for all
 * (a common prefix), 12 heads of 64 (the 110M shape), f16 KV, 12 layers called in turn as a
 * forward pass does (so the KV is not all cache-resident); microseconds per call. */
static double bench_attn(backend *be, int n_seqs, int ctx, int n_new, int shared)
{
    const int n_heads = 12, hd = 64, bs = 16, nbps = (ctx + bs - 1) / bs, nt = n_seqs * n_new;
    kv_geom g = {.n_layers = 12, .n_kv_heads = n_heads, .head_dim = hd, .block_size = bs, .dtype = KV_F16};
    if (be->ops->kv_init(be, &g, n_seqs * nbps)) return 0;
    cpu__backend *c = (cpu__backend *)be;
    size_t n_el = g.n_layers * 2 * c->kv_layer_bytes / 2;
    uint16_t *kv = c->kv_mem;
    for (size_t i = 0; i < n_el; i++) kv[i] = dt_f32_to_f16((float)(next() % 1000) / 500.0f - 1);
    int32_t *tok = calloc((size_t)nt, 4), *pos = malloc((size_t)nt * 4), *slot = malloc((size_t)nt * 4);
    int32_t *qs = malloc((size_t)(n_seqs + 1) * 4), *cl = malloc((size_t)n_seqs * 4);
    int32_t *bt = malloc((size_t)n_seqs * nbps * 4);
    for (int s = 0; s < n_seqs; s++) {
        qs[s] = s * n_new;
        cl[s] = ctx;
        for (int b = 0; b < nbps; b++) bt[s * nbps + b] = (b + 1) * bs <= shared ? b : s * nbps + b;
        for (int i = 0; i < n_new; i++) {
            int p = ctx - n_new + i;
            pos[s * n_new + i] = p;
            slot[s * n_new + i] = bt[s * nbps + p / bs] * bs + p % bs;
        }
    }
    qs[n_seqs] = nt;
    be_batch b = {.n_tokens = nt, .tokens = tok, .positions = pos, .n_seqs = n_seqs, .q_start = qs, .n_kv = 1, .kv = {{.slots = slot, .ctx_len = cl, .block_table = bt, .bt_stride = nbps}}};
    float *q = malloc((size_t)nt * n_heads * hd * 4), *out = malloc((size_t)nt * n_heads * hd * 4);
    for (int i = 0; i < nt * n_heads * hd; i++) q[i] = (float)(next() % 1000) / 500.0f - 1;
    be->ops->begin(be, &b);
    double t[7];
    int inner = n_new > 1 ? 12 : 48;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = kernel_s();
        be_attn at = {n_heads, 1.0f / sqrtf((float)hd), 0.0f, 0, NULL};
        for (int k = 0; k < inner; k++) be->ops->attention(be, k % g.n_layers, q, &at, out);
        t[rep] = (kernel_s() - t0) / inner;
    }
    free(tok), free(pos), free(slot), free(qs), free(cl), free(bt), free(q), free(out);
    return median(t, 7) * 1e6;
}

int main(int argc, char **argv)
{
    int n_threads = 2, quick = 0, gemm_rows = 512;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) gemm_rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-time")) kernel_clock = CLOCK_THREAD_CPUTIME_ID;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--threads N] [--quick] [--cpu-time] [--rows N] [--only memcpy|read|dispatch|gemv|gemm|decode|attn]\n", argv[0]);
            return 2;
        }
    }
    backend *be = cpu_backend_create(n_threads);
    if (!be) return 1;
    printf("backend: %s\n", be->desc);
#define RUN(x) (!only || !strcmp(only, x))
    if (RUN("memcpy")) printf("memcpy 1 GiB, 1 thread:          %6.1f GB/s copied\n", bench_memcpy((size_t)1 << 30));
    if (RUN("read"))
        printf("streaming read 1 GiB, %d threads: %6.1f GB/s\n", n_threads, bench_read(n_threads, (size_t)1 << 30));
    if (RUN("dispatch")) printf("pool dispatch (empty task):       %6.2f us\n", bench_dispatch(be));
    if (RUN("gemv")) bench_shapes(be, 1, quick);
    if (RUN("decode")) {
        printf("\n1.1B-shaped decode step, GEMV only:\n");
        bench_decode_stream(be, DT_Q8_0, 22);
        if (!quick) bench_decode_stream(be, DT_F16, 11);
    }
    if (RUN("gemm")) bench_shapes(be, gemm_rows > 1 ? gemm_rows : 512, quick);
    if (RUN("attn"))
    {
        printf("\nattention, 12 heads of 64, f16 KV, one layer:\n");
        printf("  decode, 16 seqs x 256 keys:              %8.1f us\n", bench_attn(be, 16, 256, 1, 0));
        printf("  decode, 4 seqs x 1072 keys:              %8.1f us\n", bench_attn(be, 4, 1072, 1, 0));
        printf("  decode, 4 seqs x 1072 keys, 992 shared:  %8.1f us\n", bench_attn(be, 4, 1072, 1, 992));
        printf("  prefill, 512 tokens:                     %8.1f us\n", bench_attn(be, 1, 512, 512, 0));
        printf("  4 seqs x 72 new, 1072 keys:              %8.1f us\n", bench_attn(be, 4, 1072, 72, 0));
        printf("  4 seqs x 72 new, 1072 keys, 992 shared:  %8.1f us\n", bench_attn(be, 4, 1072, 72, 992));
    }
    be_destroy(be);
    return 0;
}
