/*
 * spec_checks.c — the GPU check's rows for speculative decoding (docs/speculative.md), included by
 * gpu_check.c after its reporting helpers and the TinyLlama-shaped model.
 *
 * A verify row (a sequence's last token and K guesses, one varlen row) must give, at every
 * position, the logits a one-token decode gives there: otherwise greedy output can drift from
 * plain decoding on near-ties. The row's cost next to a one-token step is what bounds the speed-up:
 * with acceptance a per guess a step yields (1 - a^(K+1)) / (1 - a) tokens for that cost (plus the
 * proposer's). Both are measured on one sequence at a 200-token context, f16 KV.
 */

/* One step of one sequence over blocks bt: tokens tok[0 .. n) at positions pos0 .. , the logits of
 * every token (all) or of the last into logits. 0 or a negative errno. */
static int gc_spec_run(fwd *f, int32_t *bt, int stride, const int32_t *tok, int n, int pos0, int all, float *logits)
{
    int32_t pos[n], slots[n], rows[n], q_start[2] = {0, n}, ctx = pos0 + n;
    for (int k = 0; k < n; k++) {
        pos[k] = pos0 + k;
        slots[k] = cuda_kv_entry_slot(bt, 16, pos0 + k);
        rows[k] = k;
    }
    be_batch b = {.n_tokens = n, .tokens = tok, .positions = pos, .n_seqs = 1, .q_start = q_start,
                  .n_logits = all ? n : 1, .logit_rows = all ? rows : &rows[n - 1], .n_kv = 1,
                  .kv = {{.slots = slots, .ctx_len = &ctx, .block_table = bt, .bt_stride = stride}}};
    return fwd_run(f, &b, logits);
}

/* Median milliseconds of reps runs of one step (n tokens at pos0). */
static double gc_spec_time(fwd *f, int32_t *bt, int stride, const int32_t *tok, int n, int pos0, float *logits,
                           int reps)
{
    double t[32];
    for (int r = 0; r < reps; r++) {
        double t0 = gc_now();
        if (gc_spec_run(f, bt, stride, tok, n, pos0, 1, logits)) return 0;
        t[r] = 1e3 * (gc_now() - t0);
    }
    return gc_median(t, reps);
}

static void gc_spec(backend *gpu, gc_model *gm, int quick)
{
    enum { K = 4, PROMPT = 200, BS = 16 };
    const model *m = &gm->m;
    const int V = m->hp.n_vocab, stride = (PROMPT + K + BS) / BS + 1, reps = quick ? 5 : 21;
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, BS, KV_F16);
    char err[512], v[40], ref[48];
    const int32_t n_blocks = 2 * stride;
    fwd *f = fwd_create(m, gpu, &g, &n_blocks, PROMPT, K + 1, err, sizeof err);
    if (!f) {
        gc_add("spec verify row", "not run", err, 0);
        return;
    }
    int32_t bt[2][64], p[PROMPT], tok[K + 1];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < stride; i++) bt[s][i] = s * stride + i;
    for (int i = 0; i < PROMPT; i++) p[i] = (int32_t)((7 * i + 3) % V);
    for (int j = 0; j <= K; j++) tok[j] = j ? (int32_t)((131 * j + 17) % V) : p[PROMPT - 1];
    float *dec = malloc((size_t)(K + 1) * V * sizeof(float)), *ver = malloc((size_t)(K + 1) * V * sizeof(float));
    int rc = !dec || !ver;
    /* sequence 0: the prompt, then the K + 1 tokens one at a time; sequence 1: the prompt, then
     * the K + 1 tokens as one verify row */
    for (int s = 0; s < 2 && !rc; s++) rc = gc_spec_run(f, bt[s], stride, p, PROMPT - 1, 0, 0, dec);
    for (int j = 0; j <= K && !rc; j++) rc = gc_spec_run(f, bt[0], stride, tok + j, 1, PROMPT - 1 + j, 0, dec + (size_t)j * V);
    if (!rc) rc = gc_spec_run(f, bt[1], stride, tok, K + 1, PROMPT - 1, 1, ver);
    if (rc) {
        gc_add("spec verify row", "not run", "fwd_run failed", 0);
    } else {
        double dmax = 0, lmax = 0;
        int same = 1;
        for (size_t i = 0; i < (size_t)(K + 1) * V; i++) {
            double d = fabs((double)dec[i] - ver[i]);
            dmax = d > dmax ? d : dmax;
            lmax = fabs(dec[i]) > lmax ? fabs(dec[i]) : lmax;
            same &= dec[i] == ver[i];
        }
        snprintf(v, sizeof v, "max |d| %.2e", dmax);
        snprintf(ref, sizeof ref, same ? "bit-identical to decodes" : "differs from decodes (max |l| %.1f)", lmax);
        gc_add("spec verify row K=4 vs decodes", v, ref, dmax <= 1e-3 * (1 + lmax));
        double t1 = gc_spec_time(f, bt[0], stride, tok, 1, PROMPT - 1, dec, reps);
        double tk = gc_spec_time(f, bt[1], stride, tok, K + 1, PROMPT - 1, ver, reps);
        snprintf(v, sizeof v, "%.3f ms", tk);
        snprintf(ref, sizeof ref, "%.2fx a 1-token step (%.3f ms)", t1 > 0 ? tk / t1 : 0, t1);
        gc_add("spec verify step K=4, b=1", v, ref, -1);
        /* at 70% acceptance a step yields (1 - 0.7^5) / 0.3 = 2.77 tokens */
        snprintf(v, sizeof v, "%.2fx", tk > 0 ? 2.77 * t1 / tk : 0);
        gc_add("  speed-up bound at 70% acceptance", v, "before the proposer's cost", -1);
    }
    free(dec);
    free(ver);
    fwd_destroy(f);
}
