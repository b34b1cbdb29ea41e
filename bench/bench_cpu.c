/*
 * bench_cpu.c — microbenchmarks of the CPU backend's kernels (numbers, never a gate).
 *
 *   bench_cpu [--threads N] [--quick] [--cpu-time] [--rows N] [--only roof|memcpy|read|dispatch|gemv|gemm|decode|attn|kvq]
 *
 * Prints, with medians over several repetitions, for the backend's SIMD level (KVSERVE_CPU_ISA
 * forces a lower one):
 *  - the roofs: the FMA peak of the level's widest vectors (12 independent chains per thread,
 *    N threads), the int8 multiply-add peak of the Q8_0 GEMM's instruction sequence (VNNI
 *    vpdpbusd, or sign + maddubs + madd + add on AVX2), and the streaming-read bandwidth;
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
 *    prefix), a 512-token prefill and four 72-token chunks over 1072 keys, microseconds;
 *  - kvq: decode over 16 × 1000 keys with an f16, an int8 and an e4m3 KV cache, interleaved.
 * Each figure is followed by its fraction of the roof it is bound by: GEMV and decode by the read
 * bandwidth (above 100% when the weights are cache-resident), GEMM by the FMA peak (Q8_0 by the
 * int8 peak), attention prefill by the FMA peak and attention decode by the bandwidth of the
 * K/V it reads. Weights are synthetic random values; no model file is needed.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "engine/backend.h"
#include "model/dtype.h"

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
    double sec; /* the thread's time (kernel clock) */
} rd_arg;

static void *read_part(void *v);
#if defined(__x86_64__)
static void *read_part_avx2(void *v);
#endif

static void *read_timed(void *v)
{
    rd_arg *a = v;
    double t0 = kernel_s();
#if defined(__x86_64__)
    if (cpu_isa_supported(CPU_ISA_AVX2)) read_part_avx2(a);
    else read_part(a);
#else
    read_part(a);
#endif
    a->sec = kernel_s() - t0;
    return NULL;
}

static void *read_part(void *v)
{
    rd_arg *a = v;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

#if defined(__x86_64__)
/* 32-byte loads: one core's read rate is not limited by the number of loads. */
__attribute__((target("avx2"))) static void *read_part_avx2(void *v)
{
    rd_arg *a = v;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 16 <= a->n; i += 16) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const void *)(a->p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const void *)(a->p + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const void *)(a->p + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const void *)(a->p + i + 12)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((void *)t, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    a->sum = t[0] + t[1] + t[2] + t[3];
    return NULL;
}
#endif

/* Streaming-read GB/s of n_threads threads over bytes: the sum of each thread's own rate (its
 * share over its kernel-clock time), median of 5. */
static double bench_read(int n_threads, size_t bytes)
{
    uint64_t *buf = aligned_alloc(64, bytes);
    memset(buf, 1, bytes);
    double t[5];
    if (n_threads > 64) n_threads = 64;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[64];
        rd_arg a[64];
        size_t per = bytes / 8 / (size_t)n_threads;
        t[rep] = 0;
        for (int i = 0; i < n_threads; i++) {
            a[i] = (rd_arg){buf + per * (size_t)i, per, 0, 0};
            pthread_create(&th[i], NULL, read_timed, &a[i]);
        }
        for (int i = 0; i < n_threads; i++) {
            pthread_join(th[i], NULL);
            t[rep] += (double)per * 8 / a[i].sec / 1e9;
        }
    }
    free(buf);
    return median(t, 5);
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

/* ---- compute roofs ---------------------------------------------------------------------------- */

#define PEAK_ITERS 20000000L
#define CHAINS 12

typedef struct peak_arg {
    int isa, int8;
    double ops; /* operations done (a multiply-add counts 2) */
    double sec; /* the thread's time for them (kernel clock: wall, or with --cpu-time its CPU time) */
    float sink;
} peak_arg;

/* Baseline: what the compiler makes of CHAINS independent scalar multiply-adds. */
static double peak_scalar(float *sink)
{
    float a[CHAINS];
    for (int k = 0; k < CHAINS; k++) a[k] = 1.0f + (float)k * 1e-3f;
    for (long i = 0; i < PEAK_ITERS / 8; i++)
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++) a[k] = a[k] * 0.9999999f + 1e-7f;
    float s = 0;
    for (int k = 0; k < CHAINS; k++) s += a[k];
    *sink = s;
    return (double)PEAK_ITERS / 8 * CHAINS * 2;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double peak_avx2(float *sink)
{
    __m256 a[CHAINS], b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm256_set1_ps(1.0f + (float)k * 1e-3f);
    for (long i = 0; i < PEAK_ITERS; i++)
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++) a[k] = _mm256_fmadd_ps(a[k], b, c);
    for (int k = 1; k < CHAINS; k++) a[0] = _mm256_add_ps(a[0], a[k]);
    *sink = _mm256_cvtss_f32(a[0]);
    return (double)PEAK_ITERS * CHAINS * 8 * 2;
}

/* The AVX2 Q8_0 GEMM's int8 step: 32 multiply-adds per sign + maddubs + madd + add. */
__attribute__((target("avx2"))) static double peak_avx2_i8(float *sink)
{
    __m256i a[CHAINS], w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm256_set1_epi32(k);
    for (long i = 0; i < PEAK_ITERS; i++)
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++) {
            __m256i p = _mm256_maddubs_epi16(w, _mm256_sign_epi8(x, a[k]));
            a[k] = _mm256_add_epi32(a[k], _mm256_madd_epi16(p, ones));
        }
    for (int k = 1; k < CHAINS; k++) a[0] = _mm256_add_epi32(a[0], a[k]);
    *sink = (float)_mm256_extract_epi32(a[0], 0);
    return (double)PEAK_ITERS * CHAINS * 32 * 2;
}

__attribute__((target("avx512f"))) static double peak_avx512(float *sink)
{
    __m512 a[CHAINS], b = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_ps(1.0f + (float)k * 1e-3f);
    for (long i = 0; i < PEAK_ITERS; i++)
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++) a[k] = _mm512_fmadd_ps(a[k], b, c);
    for (int k = 1; k < CHAINS; k++) a[0] = _mm512_add_ps(a[0], a[k]);
    *sink = _mm512_reduce_add_ps(a[0]);
    return (double)PEAK_ITERS * CHAINS * 16 * 2;
}

/* vpdpbusd: 64 multiply-adds per instruction. */
__attribute__((target("avx512f,avx512vnni"))) static double peak_vnni(float *sink)
{
    __m512i a[CHAINS], w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-5);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_epi32(k);
    for (long i = 0; i < PEAK_ITERS; i++)
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++) a[k] = _mm512_dpbusd_epi32(a[k], w, x);
    for (int k = 1; k < CHAINS; k++) a[0] = _mm512_add_epi32(a[0], a[k]);
    *sink = (float)_mm512_reduce_add_epi32(a[0]);
    return (double)PEAK_ITERS * CHAINS * 64 * 2;
}
#endif

static void *peak_run(peak_arg *p);

static void *peak_part(void *v)
{
    peak_arg *p = v;
    double t0 = kernel_s();
    peak_run(p);
    p->sec = kernel_s() - t0;
    return NULL;
}

static void *peak_run(peak_arg *p)
{
#if defined(__x86_64__)
    if (p->isa == CPU_ISA_AVX512) {
        p->ops = p->int8 ? (cpu_isa_features() & CPU_FEAT_VNNI ? peak_vnni(&p->sink) : peak_avx2_i8(&p->sink))
                         : peak_avx512(&p->sink);
        return NULL;
    }
    if (p->isa == CPU_ISA_AVX2) {
        p->ops = p->int8 ? peak_avx2_i8(&p->sink) : peak_avx2(&p->sink);
        return NULL;
    }
#endif
    p->ops = peak_scalar(&p->sink);
    return NULL;
}

/* GFLOP/s (int8: GOP/s) of n_threads threads running the level's peak loop at once. */
static double bench_peak(int isa, int int8, int n_threads)
{
    pthread_t th[64];
    peak_arg a[64];
    if (n_threads > 64) n_threads = 64;
    double rate = 0;
    for (int i = 0; i < n_threads; i++) {
        a[i] = (peak_arg){isa, int8, 0, 0, 0};
        pthread_create(&th[i], NULL, peak_part, &a[i]);
    }
    for (int i = 0; i < n_threads; i++) {
        pthread_join(th[i], NULL);
        rate += a[i].ops / a[i].sec; /* each thread's own rate: what the cores can do together */
    }
    return rate / 1e9;
}

/* The roofs the kernels are measured against (0 until measured). */
static double roof_flops, roof_i8, roof_bw;

static const char *pct(double v, double roof)
{
    static char buf[8][16];
    static int k;
    char *b = buf[k++ % 8];
    if (roof > 0) snprintf(b, 16, "(%3.0f%%)", 100 * v / roof);
    else snprintf(b, 16, "%s", "");
    return b;
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
    printf("  %-28s %16s %16s %16s %16s\n", "shape", "Q8_0", "F16", "BF16", "F32");
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
            printf(" %9.1f %6s", v, pct(v, rows == 1 ? roof_bw : types[k] == DT_Q8_0 ? roof_i8 : roof_flops));
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
    printf("  %-6s %2d layers + head: %7.1f MB, %6.2f ms/step, %5.1f GB/s %s, %5.1f steps/s (weights "
           "only)\n",
           dt_name(type), n_layers, bytes / 1e6, sec * 1e3, bytes / sec / 1e9, pct(bytes / sec / 1e9, roof_bw), 1 / sec);
    for (int i = 0; i < n_w; i++) free((void *)mt[i].data);
    free(mt);
    free(w);
    free(x);
    free(out);
}

/* Attention over n_seqs sequences of ctx KV entries each, the last n_new of them new tokens
 * (1: batched decode; ctx: a prefill), the first `shared` entries the same blocks for all
 * (a common prefix), 12 heads of 64 (the 110M shape), KV of kv_dtype (f16, int8 or fp8), 12
 * layers called in turn as a forward pass does (so the KV is not all cache-resident);
 * microseconds per call. */
static double bench_attn(backend *be, int n_seqs, int ctx, int n_new, int shared, int kv_dtype, double *flops,
                         double *bytes)
{
    const int n_heads = 12, hd = 64, bs = 16, nbps = (ctx + bs - 1) / bs, nt = n_seqs * n_new;
    kv_geom g = {.n_layers = 12, .n_kv_heads = n_heads, .head_dim = hd, .block_size = bs, .dtype = kv_dtype};
    int32_t n_blocks = n_seqs * nbps;
    if (be->ops->kv_init(be, &g, &n_blocks)) return 0;
    cpu__backend *c = (cpu__backend *)be;
    size_t n_bytes = g.n_layers * 2 * c->kv_layer_bytes[0], tb = kv_tile_bytes(&g);
    uint8_t *kv = c->kv_mem[0];
    for (size_t i = 0; i + 1 < n_bytes; i += 2) { /* f16 values, or codes with f16 scales 1/127 */
        uint16_t v = kv_dtype == KV_I8    ? (uint16_t)next()
                     : kv_dtype == KV_FP8 ? (uint16_t)(next() & 0x7777u) /* finite e4m3 codes */
                                          : dt_f32_to_f16((float)(next() % 1000) / 500.0f - 1);
        if (kv_dtype_is_quant(kv_dtype) && i % tb >= (size_t)bs * hd) v = dt_f32_to_f16(1.0f / 127);
        memcpy(kv + i, &v, 2);
    }
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
        be_attn at = {n_heads, 1.0f / sqrtf((float)hd), 0.0f, 0, NULL, NULL};
        for (int k = 0; k < inner; k++) be->ops->attention(be, k % g.n_layers, q, &at, out);
        t[rep] = (kernel_s() - t0) / inner;
    }
    free(tok), free(pos), free(slot), free(qs), free(cl), free(bt), free(q), free(out);
    /* q·k and p·v: 2 multiply-adds per head, dimension and visible key; K and V read once per
     * distinct block (shared ones once for all sequences) */
    double keys = 0;
    for (int i = 0; i < n_new; i++) keys += ctx - n_new + i + 1;
    *flops = 4.0 * n_heads * hd * keys * n_seqs;
    *bytes = 2.0 * n_heads * (double)kv_vec_bytes(&g) * ((double)shared + (double)(ctx - shared) * n_seqs);
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
            fprintf(stderr, "usage: %s [--threads N] [--quick] [--cpu-time] [--rows N] [--only roof|memcpy|read|dispatch|gemv|gemm|decode|attn|kvq]\n", argv[0]);
            return 2;
        }
    }
    backend *be = cpu_backend_create(n_threads);
    if (!be) return 1;
    printf("backend: %s\n", be->desc);
#define RUN(x) (!only || !strcmp(only, x))
    int isa = ((cpu__backend *)be)->k.isa;
    if (RUN("gemm") || RUN("attn") || RUN("roof")) {
        roof_flops = bench_peak(isa, 0, n_threads);
        roof_i8 = bench_peak(isa, 1, n_threads);
        printf("FMA peak (%s, %d threads):        %7.1f GFLOP/s\n", cpu_isa_name(isa), n_threads, roof_flops);
        printf("int8 multiply-add peak (Q8_0):    %7.1f GOP/s\n", roof_i8);
    }
    if (RUN("gemv") || RUN("decode") || RUN("attn") || RUN("read") || RUN("roof")) {
        roof_bw = bench_read(n_threads, (size_t)1 << 30);
        printf("streaming read 1 GiB, %d threads: %6.1f GB/s\n", n_threads, roof_bw);
    }
    if (RUN("memcpy")) printf("memcpy 1 GiB, 1 thread:          %6.1f GB/s copied\n", bench_memcpy((size_t)1 << 30));
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
        printf("\nattention, 12 heads of 64, f16 KV, one layer (prefill: of the FMA peak; decode: of the "
               "bandwidth):\n");
        static const struct {
            const char *name;
            int n_seqs, ctx, n_new, shared;
        } cases[] = {{"decode, 16 seqs x 256 keys", 16, 256, 1, 0},
                     {"decode, 4 seqs x 1072 keys", 4, 1072, 1, 0},
                     {"decode, 4 seqs x 1072 keys, 992 shared", 4, 1072, 1, 992},
                     {"prefill, 512 tokens", 1, 512, 512, 0},
                     {"4 seqs x 72 new, 1072 keys", 4, 1072, 72, 0},
                     {"4 seqs x 72 new, 1072 keys, 992 shared", 4, 1072, 72, 992}};
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            double fl, by, us = bench_attn(be, cases[i].n_seqs, cases[i].ctx, cases[i].n_new, cases[i].shared, KV_F16, &fl, &by);
            printf("  %-40s %8.1f us  %6.1f GFLOP/s %s  %5.1f GB/s %s\n", cases[i].name, us, fl / us / 1e3,
                   cases[i].n_new > 1 ? pct(fl / us / 1e3, roof_flops) : "      ", by / us / 1e3,
                   cases[i].n_new > 1 ? "      " : pct(by / us / 1e3, roof_bw));
        }
    }
    if (RUN("kvq")) { /* the quantised caches' decode against f16's, interleaved */
        double f16[5], i8[5], f8[5], fl, by;
        for (int r = 0; r < 5; r++) {
            f16[r] = bench_attn(be, 16, 1000, 1, 0, KV_F16, &fl, &by);
            i8[r] = bench_attn(be, 16, 1000, 1, 0, KV_I8, &fl, &by);
            f8[r] = bench_attn(be, 16, 1000, 1, 0, KV_FP8, &fl, &by);
        }
        double a = median(f16, 5), b = median(i8, 5), f = median(f8, 5);
        printf("\nattention decode, 16 seqs x 1000 keys, 12 heads of 64, one layer (median of 5 interleaved):\n");
        printf("  f16 KV:  %8.1f us\n  int8 KV: %8.1f us  (%.2fx the f16 rate)\n", a, b, a / b);
        printf("  fp8 KV:  %8.1f us  (%.2fx the f16 rate)\n", f, a / f);
    }
    be_destroy(be);
    return 0;
}
