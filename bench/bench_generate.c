/*
 * bench_generate.c — the memory-bandwidth bound of single-stream decode.
 *
 *   usage: bench_generate [-t THREADS] MODEL.gguf...
 *
 * Decode at batch 1 streams every weight matrix once per token, so its speed limit is
 *   bound tok/s = bytes streamed per token ÷ memory bandwidth,
 * with bytes per token = all weight bytes except the token embedding (only one row of it is
 * read). The bandwidth is measured here with THREADS threads (default 2) on buffers much larger
 * than the last-level cache: a large memcpy (counted as bytes copied per second) and a pure
 * streaming read. Prints one line per model; scripts/bench_generate.sh puts it in the table.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"

#define BG_BYTES ((size_t)1 << 30) /* per buffer: 1 GiB, ~4× the L3 of the machines in mind */

typedef struct bg_job {
    char *src, *dst;
    size_t n;
    int read_only;
    uint64_t sink;
} bg_job;

static double bg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *bg_worker(void *arg)
{
    bg_job *j = arg;
    if (!j->read_only) {
        memcpy(j->dst, j->src, j->n);
        return NULL;
    }
#if defined(__AVX512F__)
    const __m512i *p = (const __m512i *)j->src;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 4 <= j->n / 64; i += 4) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 1));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 2));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 3));
    }
    a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    j->sink = (uint64_t)_mm512_reduce_add_epi64(a0);
#else
    const uint64_t *p = (const uint64_t *)j->src;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= j->n / 8; i += 4) {
        a0 ^= p[i];
        a1 ^= p[i + 1];
        a2 ^= p[i + 2];
        a3 ^= p[i + 3];
    }
    j->sink = a0 ^ a1 ^ a2 ^ a3;
#endif
    return NULL;
}

/* Best of 5 runs, GB/s (1e9 bytes). */
static double bg_bandwidth(char *src, char *dst, int n_threads, int read_only)
{
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[64];
        bg_job jobs[64];
        size_t per = BG_BYTES / (size_t)n_threads & ~(size_t)63;
        double t0 = bg_now();
        for (int t = 0; t < n_threads; t++) {
            jobs[t] = (bg_job){src + t * per, dst + t * per, per, read_only, 0};
            pthread_create(&th[t], NULL, bg_worker, &jobs[t]);
        }
        for (int t = 0; t < n_threads; t++)
            pthread_join(th[t], NULL);
        double gbs = (double)per * n_threads / (bg_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

int main(int argc, char **argv)
{
    int n_threads = 2, first = 1;
    if (argc > 2 && !strcmp(argv[1], "-t")) {
        n_threads = atoi(argv[2]);
        first = 3;
    }
    if (n_threads < 1 || n_threads > 64) n_threads = 2;
    char *src = aligned_alloc(64, BG_BYTES), *dst = aligned_alloc(64, BG_BYTES);
    if (!src || !dst) {
        fprintf(stderr, "bench_generate: cannot allocate 2 GiB of buffers\n");
        return 1;
    }
    memset(src, 1, BG_BYTES); /* fault the pages in before timing */
    memset(dst, 2, BG_BYTES);
    double copy = bg_bandwidth(src, dst, n_threads, 0);
    double read = bg_bandwidth(src, dst, n_threads, 1);
    printf("memory bandwidth, %d threads: memcpy %.1f GB/s, streaming read %.1f GB/s\n", n_threads,
           copy, read);
    free(src);
    free(dst);
    for (int i = first; i < argc; i++) {
        model *m;
        char err[512];
        if (model_load(argv[i], &m, err, sizeof err)) {
            fprintf(stderr, "bench_generate: %s\n", err);
            return 1;
        }
        size_t emb =
            m->hp.tied_output ? 0 : (size_t)m->tok_embd.row_bytes * (size_t)m->tok_embd.ne[1];
        size_t per_tok = model_weight_bytes(m) - emb;
        printf("%s: %.1f MB streamed per token; bound %.1f tok/s (memcpy), %.1f tok/s (read)\n",
               argv[i], per_tok / 1e6, copy * 1e9 / per_tok, read * 1e9 / per_tok);
        model_destroy(m);
    }
    return 0;
}
