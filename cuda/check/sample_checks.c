/*
 * sample_checks.c — the device sampler on a GPU: the CUDA backend's sample op against the CPU
 * backend's (both be_ops.sample, engine/smp_rows.h) on the same logits, every option, two steps
 * so that the second one's pending rows read the first one's tokens on the device (gpu_check.c
 * also times it). Included after kernel_checks.c by the GPU check program (gpu_check.c) and the GPU
 * tests (tests/test_cuda.c).
 */
#include "engine/sampler.h"

/* Random parameters and history for one row, filled into the arena. */
static void sc_row(kc_ctx *c, smp_row *row, smp_arena *ar, int32_t V, int32_t lr, int32_t pending, int32_t *hist,
                   int kind)
{
    smp_params p;
    smp_params_default(&p);
    int32_t bias_ids[3], allowed[24], bad[2], off[3] = {0, 1, 2}, eog = kc_int(c, 0, V - 1);
    float bias_vals[3];
    if (kind < 0) { /* every option at random */
        p.temperature = kc_int(c, 0, 3) ? 0.2f + 0.8f * (kc_unif(c) + 1) : 0.0f;
        p.top_k = kc_int(c, 0, 1) ? kc_int(c, 1, 100) : 0;
        p.top_p = kc_int(c, 0, 1) ? 0.5f + 0.25f * (kc_unif(c) + 1) : 1.0f;
        p.min_p = kc_int(c, 0, 2) ? 0.0f : 0.05f;
        p.repetition_penalty = kc_int(c, 0, 2) ? 1.0f : 1.2f;
        p.frequency_penalty = kc_int(c, 0, 2) ? 0.0f : 0.5f * kc_unif(c);
        p.presence_penalty = kc_int(c, 0, 2) ? 0.0f : 0.5f * kc_unif(c);
        p.n_logit_bias = kc_int(c, 0, 3);
        for (int k = 0; k < p.n_logit_bias; k++) bias_ids[k] = kc_int(c, 0, V - 1), bias_vals[k] = 5 * kc_unif(c);
        p.n_allowed = kc_int(c, 0, 8) ? 0 : kc_int(c, 1, 24);
        for (int k = 0; k < p.n_allowed; k++) allowed[k] = kc_int(c, 0, V - 1);
        p.n_bad = kc_int(c, 0, 2);
        for (int k = 0; k < p.n_bad; k++) bad[k] = kc_int(c, 0, V - 1);
        p.min_tokens = kc_int(c, 0, 40);
        p.n_logprobs = kc_int(c, -1, 5);
    } else { /* the timed kinds: 0 greedy, 1 T 0.8 top_p 0.95, 2 top_k 50 + penalties, 3 logprobs 5 */
        p.temperature = kind == 0 ? 0.0f : 0.8f;
        p.top_p = kind == 1 ? 0.95f : 1.0f;
        p.top_k = kind == 2 ? 50 : 0;
        p.repetition_penalty = kind == 2 ? 1.1f : 1.0f;
        p.frequency_penalty = kind == 2 ? 0.3f : 0.0f;
        p.n_logprobs = kind == 3 ? 5 : -1;
    }
    p.bias_ids = bias_ids, p.bias_vals = bias_vals, p.allowed_ids = allowed, p.bad_ids = bad, p.bad_off = off;
    smp_history h = {hist, 16, hist + 16, 48};
    smp_rng rng;
    smp_rng_key(&rng, 1234 + (uint64_t)lr, 0);
    if (smp_row_fill(row, ar, &p, &rng, 64 + (pending >= 0), lr, &h, pending, &eog, 1, NULL)) abort();
}

/* Rows for n logit rows of V: each row reads its own logit row; kind as for sc_row. lp numbers
 * the log-prob blocks. */
static void sc_rows(kc_ctx *c, smp_row *rows, smp_arena *ar, int32_t n, int32_t V, int pend, int kind, int32_t *n_lp)
{
    int32_t hist[64];
    *n_lp = 0;
    for (int32_t i = 0; i < n; i++) {
        for (int k = 0; k < 64; k++) hist[k] = kc_int(c, 0, V - 1);
        sc_row(c, &rows[i], ar, V, i, pend && kc_int(c, 0, 1) ? i : -1, hist, kind);
        if (rows[i].n_logprobs > 0 || kind == 3 || (kind < 0 && kc_int(c, 0, 2) == 0)) rows[i].lp = (*n_lp)++;
    }
}

/* The CUDA backend's sampler against the CPU backend's: two steps (the second pending on the
 * first's tokens), every option; tokens equal, log-probs within 2e-6. */
static kc_result kc_check_sampler(kc_ctx *c)
{
    int32_t V = c->big ? 32000 : 1000, n = c->big ? 256 : 48;
    size_t nn = (size_t)n * V;
    float *x = malloc(nn * sizeof *x);
    for (int32_t r = 0; r < n; r++) kc_fill(c, x + (size_t)r * V, (size_t)V, r % 3 ? 8.0f : 2.0f);
    for (int32_t r = 0; r < n; r += 4) /* ties at the cuts */
        for (int32_t i = 0; i < V; i++) x[(size_t)r * V + i] = (float)kc_int(c, 0, 3);
    float *xg = kc_put(c->gpu, x, nn), *xc = kc_put(c->cpu, x, nn);
    smp_row *rows = malloc((size_t)n * sizeof *rows);
    smp_arena ar;
    int bad = !xg || !xc || !rows || smp_arena_init(&ar, V);
    char note[96] = "";
    for (int step = 0; step < 2 && !bad; step++) {
        int32_t n_lp;
        smp_arena_reset(&ar);
        sc_rows(c, rows, &ar, n, V, step, -1, &n_lp);
        smp_batch sb = {n, rows, ar.n, ar.v, n_lp, V};
        const int32_t *ig, *ic;
        const smp_result *lg, *lc;
        if (c->gpu->ops->sample(c->gpu, xg, &sb, step) || c->cpu->ops->sample(c->cpu, xc, &sb, step) ||
            c->gpu->ops->sample_wait(c->gpu, step, &ig, &lg) || c->cpu->ops->sample_wait(c->cpu, step, &ic, &lc)) {
            bad = 1;
            snprintf(note, sizeof note, "the sample op failed");
            break;
        }
        for (int32_t i = 0; i < n; i++) {
            int ok = ig[i] == ic[i];
            if (ok && rows[i].lp >= 0) {
                const smp_result *a = &lg[rows[i].lp], *b = &lc[rows[i].lp];
                ok = a->token == b->token && a->n_top == b->n_top && fabsf(a->logprob - b->logprob) <= 2e-6f * fmaxf(1, fabsf(b->logprob));
                for (int k = 0; ok && k < a->n_top; k++) ok = a->top_ids[k] == b->top_ids[k];
            }
            if (!ok && !bad++)
                snprintf(note, sizeof note, "step %d row %d: device %d, cpu %d (T %g k %d p %g)", step, i, ig[i], ic[i],
                         rows[i].temperature, rows[i].top_k, rows[i].top_p);
        }
    }
    smp_arena_fini(&ar);
    if (xg) c->gpu->ops->free(c->gpu, xg);
    if (xc) c->cpu->ops->free(c->cpu, xc);
    free(x), free(rows);
    if (!bad) snprintf(note, sizeof note, "%d rows x 2 steps, V %d", n, V);
    return kc_res("sampler (device vs CPU)", bad ? INFINITY : 0.0, 0.0, note);
}
