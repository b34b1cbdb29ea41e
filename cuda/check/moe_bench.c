/*
 * moe_bench.c — the experts' row of the GPU check program, included by cuda/check/gpu_check.c
 * after its helpers (gc_add, GC_CUDA) and kernel_checks.c (random tensors, activations):
 *
 *   the expert projections of one MoE layer at decode (the activation quantiser, the grouped
 *   matvecs of gate, up and down, the activation: cuda_moe_bench_experts) on three shapes — the
 *   issue's synthetic Qwen3-MoE layer (Q8_0, 16 experts of 1024 → 512, 2 used), a
 *   Qwen3-30B-A3B-shaped one (Q4_K, 128 of 2048 → 768, 8 used) and a gpt-oss-20b-shaped one
 *   (MXFP4, 32 of 2880 → 2880, 4 used) — at 1 and 8 tokens, as the bytes of the chosen experts'
 *   matrices (the only weights a step may read) over the time, and that rate as a fraction of the
 *   copy bandwidth. The layer is copied until the copies' chosen experts pass three L2 caches,
 *   and the repetitions of a captured graph rotate over the copies, so that every repetition
 *   reads its experts from memory.
 */

/* One layer shape. */
typedef struct gm_shape {
    const char *name;
    int type, n_expert, n_used;
    int64_t dim, ff;
} gm_shape;

#define GM_MAX_COPIES 32

/* The distinct experts the host's routing (the device's definition) picks for n_rows rows of
 * logits [n_rows][E]. */
static int gm_distinct(const be_moe_rule *r, const float *logits, int n_rows)
{
    int E = r->n_expert, k = r->n_used, n = 0;
    char *seen = calloc((size_t)E, 1);
    int32_t *ids = malloc((size_t)k * sizeof *ids);
    float *w = malloc((size_t)k * sizeof *w), *scr = malloc((size_t)3 * E * sizeof *scr);
    for (int t = 0; seen && ids && w && scr && t < n_rows; t++) {
        be_moe_route(r, logits + (size_t)t * E, NULL, ids, w, scr);
        for (int j = 0; j < k; j++) n += !seen[ids[j]], seen[ids[j]] = 1;
    }
    free(seen), free(ids), free(w), free(scr);
    return n;
}

/* Random host tensors for E experts' gate, up and down (kt [3][E]); MXFP4's E8M0 bytes set to
 * 2^-8 .. 2^-5 so the values stay finite. */
static int gm_make_experts(kc_ctx *c, const gm_shape *sh, kc_tensor *kt)
{
    for (int p = 0; p < 3; p++)
        for (int e = 0; e < sh->n_expert; e++) {
            int64_t n_in = p < 2 ? sh->dim : sh->ff, n_out = p < 2 ? sh->ff : sh->dim;
            kc_tensor *t = &kt[p * sh->n_expert + e];
            if (kc_tensor_random(c, t, sh->type, n_in, n_out, 0.05f)) return -1;
            size_t bb = dt_block_bytes(sh->type), bytes = dt_row_bytes(sh->type, n_in) * (size_t)n_out;
            for (size_t b = 0; sh->type == DT_MXFP4 && b < bytes / bb; b++)
                ((uint8_t *)t->mem)[b * bb] = (uint8_t)(120 + kc_next(c) % 4);
        }
    return 0;
}

/* The row of one shape at n_rows = 1 and 8 tokens. */
static void gm_bench_shape(backend *be, const gm_shape *sh, double copy)
{
    kc_ctx c = {be, be, 0x6d6f6562, 1};
    const int E = sh->n_expert, k = sh->n_used;
    kc_tensor *kt = calloc((size_t)3 * E, sizeof *kt);
    be_weight *w = calloc((size_t)GM_MAX_COPIES * 3 * E, sizeof *w);
    be_moe *ms = calloc(GM_MAX_COPIES, sizeof *ms);
    char what[64], v[64], ref[80];
    int copies = 0; /* layers made, freed at the end */
    snprintf(what, sizeof what, "experts %s", sh->name);
    if (!kt || !w || !ms || gm_make_experts(&c, sh, kt)) {
        gc_add(what, "not run", "out of host memory", 0);
        goto out;
    }
    size_t expert_bytes = (dt_row_bytes(sh->type, sh->dim) * (size_t)sh->ff) * 2 +
                          dt_row_bytes(sh->type, sh->ff) * (size_t)sh->dim;
    int l2 = 0;
    GC_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    copies = (int)((3 * (size_t)l2) / (expert_bytes * (size_t)k) + 1);
    if (copies > GM_MAX_COPIES) copies = GM_MAX_COPIES;
    be_moe_rule rule = {E, k, MODEL_GATING_SOFTMAX, 1, 1.0f, 0, 0};
    int n_up = 0; /* layers uploaded and prepared */
    for (; n_up < copies; n_up++) {
        be_moe *m = &ms[n_up];
        be_weight *wl = &w[(size_t)n_up * 3 * E];
        int rc = 0;
        for (int i = 0; i < 3 * E && !rc; i++) rc = be->ops->weight_upload(be, &kt[i].t, &wl[i]);
        m->rule = rule, m->act = MODEL_ACT_SILU;
        m->gate = wl, m->up = wl + E, m->down = wl + 2 * E;
        if (rc || be->ops->moe_prepare(be, m)) break;
    }
    if (n_up < copies) {
        gc_add(what, "not run", "upload or moe_prepare failed", 0);
        copies = n_up + 1; /* the failed layer's uploads are freed too (a zeroed weight is a no-op) */
        goto out;
    }
    for (int n_rows = 1; n_rows <= 8; n_rows *= 8) {
        float *x = malloc((size_t)n_rows * sh->dim * 4), *lg = malloc((size_t)n_rows * E * 4);
        kc_fill(&c, x, (size_t)n_rows * sh->dim, 1.0f);
        kc_fill(&c, lg, (size_t)n_rows * E, 3.0f);
        void *xd = kc_put_act(be, x, (size_t)n_rows * sh->dim);
        float *ld = be_alloc_f32(be, (size_t)n_rows * E); /* the router's logits are f32 */
        if (ld) cuda_upload_f32(be, ld, lg, (size_t)n_rows * E);
        void *od = be->ops->alloc(be, (size_t)n_rows * sh->dim);
        for (int i = 0; i < copies; i++) be->ops->moe_ffn(be, xd, n_rows, ld, &ms[i], od);
        double us = 0;
        int rc = be->ops->sync(be) ? -EIO : cuda_moe_bench_experts(be, ms, copies, n_rows, 4 * copies, &us);
        double bytes = (double)gm_distinct(&rule, lg, n_rows) * (double)expert_bytes;
        snprintf(what, sizeof what, "experts %s b=%d", sh->name, n_rows);
        if (rc || us <= 0) {
            gc_add(what, "not run", "cuda_moe_bench_experts failed", 0);
        } else {
            snprintf(v, sizeof v, "%.1f us, %.0f GB/s", us, bytes / (us * 1e-6) / 1e9);
            snprintf(ref, sizeof ref, "%.0f%% of copy (%.1f MB of experts)", 100 * bytes / (us * 1e-6) / 1e9 / copy,
                     bytes / 1e6);
            gc_add(what, v, ref, -1);
        }
        be->ops->free(be, xd), be->ops->free(be, ld), be->ops->free(be, od);
        free(x), free(lg);
    }
out:
    for (int i = 0; i < copies; i++) {
        be->ops->moe_release(be, &ms[i]);
        for (int j = 0; j < 3 * E; j++) be->ops->weight_free(be, &w[(size_t)i * 3 * E + j]);
    }
    for (int i = 0; kt && i < 3 * E; i++) free(kt[i].mem);
    free(kt), free(w), free(ms);
}

/* The experts' rows: the shape always, the two model-sized ones unless quick. */
static void gc_bench_moe_experts(backend *be, double copy, int quick)
{
    static const gm_shape shapes[] = {
        {"Q8_0 16x(1024->512) k2", DT_Q8_0, 16, 2, 1024, 512},
        {"Q4_K 128x(2048->768) k8", DT_Q4_K, 128, 8, 2048, 768},
        {"MXFP4 32x(2880->2880) k4", DT_MXFP4, 32, 4, 2880, 2880},
    };
    for (int i = 0; i < (quick ? 1 : 3); i++) gm_bench_shape(be, &shapes[i], copy);
}
