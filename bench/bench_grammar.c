/*
 * bench_grammar.c — what structured outputs cost per token, in CPU time of one thread (so the
 * figures hold on a shared machine, unlike tok/s).
 *
 *   usage: bench_grammar MODEL.gguf SCHEMA.json [WALKS]
 *
 * Builds the model's grammar vocabulary, compiles the schema, then runs WALKS (default 6) random
 * walks of up to 400 tokens under the schema's masks (each token drawn uniformly from the allowed
 * ones), each walk twice: the first pass fills the per-state mask cache along its path ("cold"),
 * the second finds it filled ("warm"). Prints the vocabulary build and compile times, mask time
 * per token cold and warm (mean and worst), accept time per token, and the sampler's extra cost
 * for applying a mask to a row (smp_sample_masked against smp_sample, greedy, a third of the
 * vocabulary allowed). scripts/bench_structured.sh runs it.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "model/model.h"
#include "engine/sampler.h"
#include "server/openai/oai_schema.h"

static double cpu_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

typedef struct bg_pass {
    double mask_us, worst_us, accept_us;
    int steps;
} bg_pass;

/* One walk of up to 400 tokens from seed; times its masks and accepts. */
static bg_pass walk(gr_grammar *g, const gr_vocab *v, int nv, uint64_t seed, uint32_t *mask)
{
    bg_pass p = {0};
    gr_matcher *m = gr_matcher_create(g, v);
    for (int s = 0; m && s < 400; s++) {
        double a = cpu_us();
        int k = gr_matcher_fill_mask(m, mask);
        double d = cpu_us() - a;
        p.mask_us += d;
        if (d > p.worst_us) p.worst_us = d;
        p.steps++;
        if (k <= 0) break;
        int pick = (int)(rng_splitmix64(&seed) % (uint64_t)k), tk = -1;
        for (int i = 0; i < nv && tk < 0; i++)
            if ((mask[i >> 5] >> (i & 31)) & 1 && pick-- == 0) tk = i;
        a = cpu_us();
        gr_matcher_accept(m, tk);
        p.accept_us += cpu_us() - a;
        if (gr_matcher_is_terminated(m)) break;
    }
    gr_matcher_destroy(m);
    return p;
}

/* Mean extra µs smp_sample_masked spends over smp_sample on one row. */
static double sampler_cost(int nv)
{
    float *l = malloc(sizeof *l * (size_t)nv), *w = malloc(sizeof *w * (size_t)nv);
    uint32_t *mask = calloc(GR_MASK_WORDS(nv), sizeof *mask);
    for (int i = 0; i < nv; i++) l[i] = (float)((uint32_t)i * 2654435761u % 1000) / 100.0f;
    for (int i = 0; i < nv; i += 3) mask[i >> 5] |= 1u << (i & 31);
    smp_params p;
    smp_params_default(&p);
    p.temperature = 0;
    smp_rng r;
    smp_rng_seed(&r, 1);
    smp_result res;
    double t[2];
    for (int masked = 0; masked < 2; masked++) {
        double a = cpu_us();
        for (int k = 0; k < 1000; k++) {
            memcpy(w, l, sizeof *w * (size_t)nv);
            smp_sample_masked(&p, &r, w, nv, NULL, NULL, 0, masked ? mask : NULL, &res);
        }
        t[masked] = (cpu_us() - a) / 1000;
    }
    free(l);
    free(w);
    free(mask);
    return t[1] - t[0];
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_grammar MODEL.gguf SCHEMA.json [WALKS]\n");
        return 2;
    }
    int walks = argc > 3 ? atoi(argv[3]) : 6;
    char err[384];
    model *md;
    if (model_load(argv[1], &md, err, sizeof err)) {
        fprintf(stderr, "bench_grammar: %s\n", err);
        return 1;
    }
    tokenizer *t = tok_create(md->gguf, err, sizeof err);
    char *text = slurp(argv[2]);
    cJSON *schema = text ? cJSON_Parse(text) : NULL;
    if (!t || !schema) {
        fprintf(stderr, "bench_grammar: %s\n", !t ? err : "the schema file is missing or not JSON");
        return 1;
    }
    int nv = md->hp.n_vocab;
    double a = cpu_us();
    gr_vocab *v = gr_vocab_create(t, nv);
    double vocab_ms = (cpu_us() - a) / 1e3;
    a = cpu_us();
    char *gbnf = oai_schema_gbnf(schema, "", err, sizeof err);
    gr_error ge;
    gr_grammar *g = gbnf ? gr_compile_gbnf(gbnf, strlen(gbnf), "root", &ge) : NULL;
    double compile_ms = (cpu_us() - a) / 1e3;
    if (!g) {
        fprintf(stderr, "bench_grammar: %s\n", gbnf ? ge.msg : err);
        return 1;
    }
    uint32_t *mask = malloc(GR_MASK_WORDS(nv) * sizeof *mask);
    bg_pass cold = {0}, warm = {0};
    for (int w = 0; w < walks; w++) {
        uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1);
        for (int pass = 0; pass < 2; pass++) {
            bg_pass p = walk(g, v, nv, seed, mask), *acc = pass ? &warm : &cold;
            acc->mask_us += p.mask_us;
            acc->accept_us += p.accept_us;
            acc->steps += p.steps;
            if (p.worst_us > acc->worst_us) acc->worst_us = p.worst_us;
        }
    }
    printf("vocabulary %d tokens built in %.1f ms; schema compiled in %.2f ms (CPU)\n", nv, vocab_ms, compile_ms);
    printf("mask per token: cold %.1f us (worst %.0f us), warm %.1f us (worst %.0f us); accept %.2f us; %d tokens per pass\n",
           cold.mask_us / cold.steps, cold.worst_us, warm.mask_us / warm.steps, warm.worst_us,
           (cold.accept_us + warm.accept_us) / (cold.steps + warm.steps), warm.steps);
    printf("sampler: applying a mask adds %.1f us per row\n", sampler_cost(nv));
    printf("{\"vocab_ms\": %.3f, \"compile_ms\": %.3f, \"mask_cold_us\": %.3f, \"mask_warm_us\": %.3f, \"mask_worst_us\": %.1f}\n",
           vocab_ms, compile_ms, cold.mask_us / cold.steps, warm.mask_us / warm.steps, cold.worst_us);
    free(mask);
    free(gbnf);
    free(text);
    cJSON_Delete(schema);
    gr_unref(g);
    gr_vocab_destroy(v);
    tok_destroy(t);
    model_destroy(md);
    return 0;
}
