/*
 * sample_emu.cc — the device sampler (cuda/sample_kernels.h), the very source nvcc compiles, run
 * on the CPU through cuda/check/emu_cuda.h and compared with the CPU's sampler (engine/sampler.c,
 * linked in) on the same rows: every option of engine/smp_rows.h — greedy and seeded draws,
 * temperature, top_k, top_p, min_p, the repetition, frequency and presence penalties with and
 * without a pending token, logit_bias, allowed-token and grammar masks with their fallback, bans
 * (bad words, min_tokens), the chosen token's log-prob with its top alternatives, scored prompt
 * tokens with their rank, n > 1 choices drawing from one logit row — on random rows (ties, -inf,
 * NaN, vocabularies that are not a multiple of the block) and on recorded logit rows of a real
 * model (--logits FILE: int32 n_rows, int32 n_vocab, then the rows as f32). Tokens must be equal;
 * log-probs equal within 2e-6 (the sums run in another order). Also the token references'
 * resolution (cuda__resolve_tokens_k). Every output is poisoned first.
 *
 * No GPU or CUDA toolkit is needed. Built by the Makefile (with engine/sampler.c compiled as C) and
 * run by `make test` (tests/test_cuda_host.c: `--quick`, with logits the CPU backend recorded) and
 * `scripts/gpu-check.sh --emulate`; exit status 0 when every check passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#include "cuda/check/emu_cuda.h"
extern "C" {
#include "engine/sampler.h"
}
#include "cuda/sample_kernels.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
pthread_barrier_t emu_bar, emu_wbar[32];
float emu_xchg[1024];
float sm[1];

static std::function<void()> se_body;
static void se_block()
{
    se_body();
}

static void se_launch(unsigned grid, int threads, std::function<void()> body)
{
    se_body = body;
    dim3 g;
    g.x = grid;
    emu_run(g, threads, se_block);
}

static uint64_t se_rs = 0x73616d706c65ULL;
static uint32_t se_u32()
{
    return (uint32_t)(rng_splitmix64(&se_rs) >> 32);
}
static float se_unif() /* [0, 1) */
{
    return (float)(se_u32() >> 8) * (1.0f / 16777216.0f);
}

static int se_rows_checked, se_bad;

/* What the checked rows exercised, for the report. */
enum { SE_GREEDY, SE_SEEDED, SE_TOPK, SE_TOPP, SE_MINP, SE_REP, SE_FREQ, SE_BIAS, SE_MASK, SE_BAN, SE_PEND,
       SE_LP, SE_SCORE, SE_FORK, SE_N };
static const char *se_names[SE_N] = {"greedy", "seeded", "top_k",    "top_p", "min_p",   "repetition", "frequency",
                                     "bias",   "mask",   "bans",     "pending", "logprobs", "score",   "n>1"};
static int se_seen[SE_N];

/* Runs the batch on the CPU and under the emulation with `threads` per block; compares. */
static void se_check(const smp_batch *b, const float *logits, const int32_t *prev, int threads, const char *what)
{
    int32_t n = b->n_rows, V = b->n_vocab;
    std::vector<int32_t> ids_c(n), ids_g(n, -7777);
    std::vector<smp_result> lps_c(b->n_lp + 1), lps_g(b->n_lp + 1);
    memset(lps_g.data(), 0x7f, lps_g.size() * sizeof(smp_result));
    smp_work w;
    if (smp_work_init(&w, V)) abort();
    smp_rows_run(b, 0, n, logits, prev, &w, ids_c.data(), lps_c.data());
    smp_work_fini(&w);
    /* the comparison reruns each row on the CPU for its adjusted row */
    std::vector<float> adj((size_t)n * V, 1e30f);
    cuda__smp_args a = {b->rows, b->arena, logits, V, prev, adj.data(), ids_g.data(), lps_g.data()};
    se_launch((unsigned)n, threads, [&] { cuda__sample_k(a); });
    if (smp_work_init(&w, V)) abort();
    for (int32_t i = 0; i < n; i++) {
        const smp_row *r = &b->rows[i];
        se_rows_checked++;
        int ok = ids_c[i] == ids_g[i];
        const char *why = "token";
        if (ok && r->kind == SMP_ROW_SAMPLE) { /* the adjusted row, exactly (the device writes it only when it differs) */
            smp_result res;
            const float *raw = logits + (size_t)r->logits * V, *d = &adj[(size_t)i * V];
            smp_row_run(r, b->arena, raw, &w, r->pending >= 0 ? prev[r->pending] : -1, &res);
            if (d[0] == 1e30f) d = raw;
            for (int32_t k = 0; ok && k < V; k++)
                ok = d[k] == w.adj[k] || (d[k] != d[k] && w.adj[k] != w.adj[k]);
            why = "adjusted row";
        }
        if (ok && r->lp >= 0) {
            const smp_result *x = &lps_c[r->lp], *y = &lps_g[r->lp];
            ok = x->token == y->token && x->rank == y->rank && x->n_top == y->n_top;
            why = "log-prob block";
            for (int k = 0; ok && k <= x->n_top; k++) {
                float u = k < x->n_top ? x->top_logprobs[k] : x->logprob, v = k < x->n_top ? y->top_logprobs[k] : y->logprob;
                ok = (k == x->n_top || x->top_ids[k] == y->top_ids[k]) &&
                     ((u != u && v != v) || u == v || fabsf(u - v) <= 2e-6f * fmaxf(1.0f, fabsf(u)));
            }
        }
        if (!ok) {
            se_bad++;
            printf("  FAIL %s row %d (V %d, kind %d, T %g, k %d, p %g, min_p %g, pending %d): %s: cpu %d, device %d\n",
                   what, i, V, r->kind, r->temperature, r->top_k, r->top_p, r->min_p, r->pending, why, ids_c[i],
                   ids_g[i]);
        }
    }
    smp_work_fini(&w);
}

/* A random history and parameters for one row; fills it into the arena. */
static void se_row(smp_row *row, smp_arena *ar, int32_t V, int32_t logits_row, int32_t pending, int32_t pend_tok,
                   uint64_t seed, uint32_t choice, std::vector<uint32_t> &mask)
{
    smp_params p;
    smp_params_default(&p);
    p.temperature = se_u32() % 4 == 0 ? 0.0f : 0.2f + 1.6f * se_unif();
    p.top_k = se_u32() % 2 ? (int)(se_u32() % (uint32_t)(V + 2)) : 0;
    p.top_p = se_u32() % 2 ? 0.05f + 0.95f * se_unif() : 1.0f;
    p.min_p = se_u32() % 3 == 0 ? 0.3f * se_unif() : 0.0f;
    p.repetition_penalty = se_u32() % 3 == 0 ? 0.5f + 1.5f * se_unif() : 1.0f;
    p.frequency_penalty = se_u32() % 3 == 0 ? 2 * se_unif() - 1 : 0.0f;
    p.presence_penalty = se_u32() % 3 == 0 ? 2 * se_unif() - 1 : 0.0f;
    int32_t bias_ids[4], allowed[30], bad_ids[4] = {0}, bad_off[3] = {0, 1, 2}, stop_ids[1], eog[1];
    float bias_vals[4];
    p.n_logit_bias = (int)(se_u32() % 4);
    for (int k = 0; k < p.n_logit_bias; k++) {
        bias_ids[k] = (int32_t)(se_u32() % (uint32_t)V);
        bias_vals[k] = 10 * se_unif() - 5;
    }
    p.bias_ids = bias_ids;
    p.bias_vals = bias_vals;
    p.n_allowed = se_u32() % 6 == 0 ? 1 + (int)(se_u32() % 30) : 0;
    for (int k = 0; k < p.n_allowed; k++) allowed[k] = (int32_t)(se_u32() % (uint32_t)V);
    p.allowed_ids = allowed;
    p.n_bad = (int)(se_u32() % 3); /* one-token words: a pending row may have them */
    for (int k = 0; k < p.n_bad; k++) bad_ids[k] = (int32_t)(se_u32() % (uint32_t)V);
    p.bad_ids = bad_ids;
    p.bad_off = bad_off;
    p.n_stop_ids = (int)(se_u32() % 2);
    stop_ids[0] = (int32_t)(se_u32() % (uint32_t)V);
    p.stop_ids = stop_ids;
    p.min_tokens = (int)(se_u32() % 40);
    p.n_logprobs = (int)(se_u32() % 7) - 2;
    eog[0] = (int32_t)(se_u32() % (uint32_t)V);
    int n_prompt = 1 + (int)(se_u32() % 30), n_out = (int)(se_u32() % 40);
    std::vector<int32_t> toks(n_prompt + n_out);
    for (auto &t : toks) t = se_u32() % 4 == 0 ? pend_tok : (int32_t)(se_u32() % (uint32_t)V); /* the pending token recurs */
    smp_history h = {toks.data(), n_prompt, toks.data() + n_prompt, n_out};
    const uint32_t *allow = NULL;
    if (se_u32() % 5 == 0) {
        for (auto &m : mask) m = se_u32() % 3 ? se_u32() : 0;
        allow = mask.data();
    }
    smp_rng rng;
    smp_rng_key(&rng, seed, choice);
    if (smp_row_fill(row, ar, &p, &rng, n_prompt + n_out + (pending >= 0), logits_row, &h, pending, eog, 1, allow))
        abort();
    se_seen[p.temperature > 0 ? SE_SEEDED : SE_GREEDY]++;
    se_seen[SE_TOPK] += p.top_k > 0 && p.temperature > 0;
    se_seen[SE_TOPP] += p.top_p < 1 && p.temperature > 0;
    se_seen[SE_MINP] += p.min_p > 0 && p.temperature > 0;
    se_seen[SE_REP] += row->n_rep > 0;
    se_seen[SE_FREQ] += row->n_freq > 0;
    se_seen[SE_BIAS] += row->n_bias > 0;
    se_seen[SE_MASK] += row->mask >= 0;
    se_seen[SE_BAN] += row->n_ban > 0;
    se_seen[SE_PEND] += pending >= 0;
}

/* A batch of n_rows rows over logit rows `logits` [n_logit][V]: SAMPLE rows with random options
 * (some pending, some forks of one logit row), SCORE rows, log-prob blocks. */
static void se_batch(const float *logits, int32_t n_logit, int32_t V, int n_rows, int threads, const char *what)
{
    smp_arena ar;
    if (smp_arena_init(&ar, V)) abort();
    std::vector<smp_row> rows(n_rows);
    std::vector<uint32_t> mask(smp_mask_words(V));
    std::vector<int32_t> prev(8);
    for (auto &t : prev) t = (int32_t)(se_u32() % (uint32_t)V);
    int32_t n_lp = 0;
    for (int i = 0; i < n_rows; i++) {
        smp_row *r = &rows[i];
        int32_t lr = (int32_t)(se_u32() % (uint32_t)n_logit);
        if (se_u32() % 6 == 0) { /* a scored prompt token */
            memset(r, 0, sizeof *r);
            r->kind = SMP_ROW_SCORE;
            r->logits = lr;
            r->token = (int32_t)(se_u32() % (uint32_t)V);
            r->n_logprobs = (int32_t)(se_u32() % 6);
            r->pending = r->fallback = r->mask = -1;
            r->lp = n_lp++;
            se_seen[SE_SCORE]++;
            continue;
        }
        int fork = i > 0 && rows[i - 1].kind == SMP_ROW_SAMPLE && se_u32() % 4 == 0;
        int32_t pending = se_u32() % 3 == 0 ? (int32_t)(se_u32() % 8) : -1;
        se_row(r, &ar, V, fork ? rows[i - 1].logits : lr, pending, prev[pending >= 0 ? pending : 0],
               fork ? rows[i - 1].seed : 100 + se_u32() % 1000,
               fork ? rows[i - 1].choice + 1 : 0, mask);
        se_seen[SE_FORK] += fork;
        if (se_u32() % 2) {
            r->lp = n_lp++;
            r->n_logprobs = (int32_t)(se_u32() % (SMP_MAX_LOGPROBS + 1));
            se_seen[SE_LP]++;
        }
    }
    smp_batch b = {n_rows, rows.data(), ar.n, ar.v, n_lp, V};
    se_check(&b, logits, prev.data(), threads, what);
    smp_arena_fini(&ar);
}

/* Random logit rows: a spread, ties, -inf and NaN; coarse rows take few distinct values, so that
 * top_k's and top_p's cuts fall inside runs of equal logits (ordered by id). */
static std::vector<float> se_logits(int32_t n, int32_t V, int coarse)
{
    std::vector<float> l((size_t)n * V);
    for (int32_t r = 0; r < n; r++) {
        float spread = 0.5f + 12.0f * se_unif();
        for (int32_t i = 0; i < V; i++) {
            float *x = &l[(size_t)r * V + i];
            *x = coarse ? (float)(se_u32() % 4) * (r & 1 ? -0.5f : 0.75f) : spread * (se_unif() * 2 - 1);
            uint32_t k = se_u32() % 50;
            if (k == 0) *x = -INFINITY;
            if (k == 1 && i) *x = x[-1];
            if (k == 2) *x = NAN;
        }
    }
    return l;
}

static void se_resolve()
{
    std::vector<int32_t> tok(1000), want(1000), prev(37);
    for (auto &p : prev) p = (int32_t)(se_u32() % 50000);
    for (int i = 0; i < 1000; i++) {
        tok[i] = se_u32() % 3 ? (int32_t)(se_u32() % 50000) : -1 - (int32_t)(se_u32() % 37);
        want[i] = tok[i] < 0 ? prev[-1 - tok[i]] : tok[i];
    }
    se_launch(3, 64, [&] { cuda__resolve_tokens_k(tok.data(), 1000, prev.data()); });
    int ok = tok == want;
    se_bad += !ok;
    printf("  %-46s %s\n", "resolve_tokens (1000 tokens, 3 blocks of 64)", ok ? "ok" : "FAIL");
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--logits") && i + 1 < argc) file = argv[++i];
    }
    printf("sampler kernels under CPU emulation against engine/sampler.c (seed %#llx)%s\n", (unsigned long long)se_rs,
           quick ? ", quick" : "");
    se_resolve();
    struct {
        int32_t V;
        int rows, threads;
    } shapes[] = {{1, 8, 32}, {31, 12, 32}, {200, 40, 64}, {700, 40, 128}, {4099, 16, 128}, {33, 30, 96}};
    int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < n_shapes; s++) {
        int reps = quick ? 2 : 6;
        for (int k = 0; k < reps; k++) {
            std::vector<float> l = se_logits(6, shapes[s].V, k & 1);
            char what[64];
            snprintf(what, sizeof what, "random V %d%s", shapes[s].V, k & 1 ? " (coarse)" : "");
            se_batch(l.data(), 6, shapes[s].V, shapes[s].rows, shapes[s].threads, what);
        }
    }
    if (file) {
        FILE *f = fopen(file, "rb");
        int32_t hdr[2] = {0, 0};
        if (!f || fread(hdr, sizeof hdr, 1, f) != 1 || hdr[0] <= 0 || hdr[1] <= 0) {
            printf("  FAIL cannot read recorded logits from %s\n", file);
            return 1;
        }
        std::vector<float> l((size_t)hdr[0] * hdr[1]);
        if (fread(l.data(), sizeof(float), l.size(), f) != l.size()) {
            printf("  FAIL %s is short\n", file);
            return 1;
        }
        fclose(f);
        for (int k = 0; k < (quick ? 3 : 10); k++) se_batch(l.data(), hdr[0], hdr[1], 48, 128, "recorded");
        printf("  recorded logits: %d rows of %d from %s\n", hdr[0], hdr[1], file);
    }
    printf("  options exercised:");
    for (int k = 0; k < SE_N; k++) printf(" %s %d", se_names[k], se_seen[k]);
    printf("\nsample_emu%s: %d rows, %d failed\n", quick ? " --quick" : "", se_rows_checked, se_bad);
    return se_bad ? 1 : 0;
}
