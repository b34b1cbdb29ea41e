/*
 * bench_quant.c — the CPU kernels of the quantised weight types, per type and SIMD level
 * (numbers, never a gate).
 *
 *   bench_quant [--threads N] [--rows N] [--types q4_0,q4_k,...] [--levels scalar,avx2,avx512]
 *               [--roof GB/s]
 *
 * For each type and level (avx512 with VNNI when the CPU has it) at TinyLlama-1.1B matrix shapes (2048 → 2048, 2048 → 5632,
 * 5632 → 2048): one activation row (GEMV, decode) in GB/s of weights streamed and weights per
 * nanosecond, and --rows rows (default 512: a prompt) in GMAC/s. Times are the process's CPU
 * time (CLOCK_PROCESS_CPUTIME_ID) divided by the threads, median of 5, so that a loaded machine
 * shows the kernels' own cost rather than the time they waited for a core. Weights are random
 * blocks with finite scales; no model file is needed. With --roof (the memory bandwidth of the
 * same thread count, e.g. bench_generate's streaming read), each GEMV also shows its GB/s as a
 * fraction of that roof: below 1 the kernel, not memory, limits decode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "engine/backend.h"
#include "model/dtype.h"
#include "base/rng.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static model_tensor make_weight(int type, int64_t n_in, int64_t n_out, uint64_t *rng)
{
    model_tensor t = {.name = "w", .type = type, .ne = {n_in, n_out}, .row_bytes = dt_row_bytes(type, n_in)};
    size_t bytes = t.row_bytes * (size_t)n_out, bb = dt_block_bytes(type);
    uint8_t *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) exit(1);
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rng_splitmix64(rng);
    int off[2], n16 = dt_f16_fields(type, off);
    for (size_t b = 0; b < bytes / bb; b++)
        for (int k = 0; k < n16; k++) {
            uint16_t h = dt_f32_to_f16(0.001f * (float)(1 + rng_splitmix64(rng) % 16));
            memcpy(p + b * bb + off[k], &h, 2);
        }
    t.data = p;
    return t;
}

static double time_matmul(backend *be, const be_weight *w, const float *x, int rows, float *out, int nth)
{
    double t[5];
    be->ops->matmul(be, x, rows, w, NULL, out);
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cpu_s();
        be->ops->matmul(be, x, rows, w, NULL, out);
        t[rep] = (cpu_s() - t0) / nth;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    return t[2];
}

static const struct {
    const char *name;
    int type;
} types[] = {{"q4_0", DT_Q4_0}, {"q4_1", DT_Q4_1}, {"q5_0", DT_Q5_0}, {"q5_1", DT_Q5_1},
             {"iq4_nl", DT_IQ4_NL}, {"mxfp4", DT_MXFP4}, {"q2_k", DT_Q2_K}, {"q3_k", DT_Q3_K}, {"q4_k", DT_Q4_K},
             {"q5_k", DT_Q5_K}, {"q6_k", DT_Q6_K}, {"iq4_xs", DT_IQ4_XS}};

static int listed(const char *list, const char *name)
{
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int nth = 1, rows = 512;
    const char *tlist = NULL, *llist = "avx2,avx512";
    double roof = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) tlist = argv[++i];
        else if (!strcmp(argv[i], "--levels") && i + 1 < argc) llist = argv[++i];
        else if (!strcmp(argv[i], "--roof") && i + 1 < argc) roof = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads N] [--rows N] [--types q4_0,...] [--levels scalar,avx2,avx512] [--roof GB/s]\n", argv[0]);
            return 2;
        }
    }
    const int64_t shapes[][2] = {{2048, 2048}, {2048, 5632}, {5632, 2048}};
    uint64_t rng = 7;
    printf("%d thread%s, CPU time; GEMV: GB/s of weights (weights/ns%s); GEMM %d rows: GMAC/s\n", nth,
           nth == 1 ? "" : "s", roof > 0 ? ", × the roof" : "", rows);
    if (roof > 0) printf("roof: %.1f GB/s\n", roof);
    printf("%-7s %-6s %22s %22s %22s %9s %9s %9s\n", "type", "level", "gemv 2048x2048", "gemv 2048->5632",
           "gemv 5632->2048", "gemm a", "gemm b", "gemm c");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        if (!listed(tlist, types[ti].name)) continue;
        for (int level = 0; level < CPU_ISA_COUNT; level++) {
            if (!listed(llist, cpu_isa_name(level)) || !cpu_isa_supported(level)) continue;
            backend *be = cpu_backend_create_isa(nth, level);
            if (!be) return 1;
            printf("%-7s %-6s", types[ti].name, cpu_isa_name(level));
            double gemm[3];
            for (int s = 0; s < 3; s++) {
                int64_t n_in = shapes[s][0], n_out = shapes[s][1];
                model_tensor mt = make_weight(types[ti].type, n_in, n_out, &rng);
                be_weight w;
                if (be->ops->weight_upload(be, &mt, &w)) return 1;
                float *x = malloc((size_t)rows * n_in * sizeof *x), *out = malloc((size_t)rows * n_out * sizeof *out);
                for (int64_t i = 0; i < rows * n_in; i++) x[i] = (float)(rng_splitmix64(&rng) % 2001) / 1000.0f - 1;
                double t1 = time_matmul(be, &w, x, 1, out, nth);
                double bytes = (double)mt.row_bytes * n_out;
                if (roof > 0) printf(" %6.1f (%6.2f, %4.2fx)", bytes / t1 / 1e9, (double)n_in * n_out / t1 / 1e9, bytes / t1 / 1e9 / roof);
                else printf(" %12.1f (%6.2f)", bytes / t1 / 1e9, (double)n_in * n_out / t1 / 1e9);
                double tr = time_matmul(be, &w, x, rows, out, nth);
                gemm[s] = (double)rows * n_in * n_out / tr / 1e9;
                fflush(stdout);
                be->ops->weight_free(be, &w);
                free(x), free(out), free((void *)mt.data);
            }
            printf(" %9.1f %9.1f %9.1f\n", gemm[0], gemm[1], gemm[2]);
            be_destroy(be);
        }
    }
    return 0;
}
