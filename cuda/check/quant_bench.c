/*
 * quant_bench.c — the quantised-weight benchmarks of the GPU check program, included by
 * cuda/check/gpu_check.c after its helpers (gc_add, gc_median, gc_now, GC_CUDA, the TinyLlama-shaped
 * model and its decode loop):
 *
 *   - for every quantised type, on a 2048-wide (2048 → 5632, TinyLlama's FFN) and a 4096-wide
 *     (4096 → 14336, an 8B model's FFN) matrix, the backend's matmul op at 1 and 8 rows as weight
 *     bytes read per second and % of the copy bandwidth, and at 512 rows as TFLOP/s and % of the
 *     cuBLAS BF16 peak, with the F16-tile path beside it (cuda_set_quant_prefill). The op includes
 *     its activation quantisation. Calls rotate over copies of the matrix filling three times the
 *     L2 cache, so that every call reads its weights from memory, and are timed as a CUDA graph
 *     of many calls replayed seven times (the median), as decode runs with graphs;
 *   - the TinyLlama-shaped model with Q8_0 weights and with Q4_K weights (Q6_K LM head, as a
 *     Q4_K_M file has), decoding one sequence, eager and with graphs, against its BF16 twin and
 *     the copy-bandwidth bound of the bytes one step reads.
 */

#define GQ_MAX_COPIES 64

/* Copies of a matrix of `bytes` that fill three times the L2 (at least 2). */
static int gq_copies(size_t bytes)
{
    int l2 = 0;
    GC_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    size_t n = (3 * (size_t)l2 + bytes - 1) / bytes;
    return n < 2 ? 2 : n > GQ_MAX_COPIES ? GQ_MAX_COPIES : (int)n;
}

/* One timed call: the matmul of n_rows rows on copy i % n of ws[] (ws NULL: the activation
 * quantiser alone, in blocks of qa). */
typedef struct gq_call {
    backend *be;
    const be_weight *ws;
    int n, n_rows, k, qa;
    const float *x;
    float *out;
} gq_call;

static void gq_run(const gq_call *c, int i)
{
    if (c->ws) c->be->ops->matmul(c->be, c->x, c->n_rows, &c->ws[i % c->n], NULL, c->out);
    else cuda_quantise_activations(c->be, c->x, c->n_rows, c->k, c->qa);
}

/* Seconds per call, as the median of 7 replays of a captured graph of reps calls (the scratch
 * is sized by a warm-up first), timed with events on the backend's stream. */
static double gq_time(const gq_call *c, int reps)
{
    backend *be = c->be;
    cudaStream_t s = (cudaStream_t)cuda_backend_stream(be);
    for (int i = 0; i < (c->ws ? c->n : 1); i++) gq_run(c, i);
    if (be->ops->sync(be)) return INFINITY;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    GC_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < reps; i++) gq_run(c, i);
    GC_CUDA(cudaStreamEndCapture(s, &g));
    GC_CUDA(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    GC_CUDA(cudaEventCreate(&e0));
    GC_CUDA(cudaEventCreate(&e1));
    double t[7];
    for (int r = -2; r < 7; r++) {
        GC_CUDA(cudaEventRecord(e0, s));
        GC_CUDA(cudaGraphLaunch(ge, s));
        GC_CUDA(cudaEventRecord(e1, s));
        GC_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        GC_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) t[r] = ms * 1e-3 / reps;
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    return be->ops->sync(be) ? INFINITY : gc_median(t, 7);
}

/* One type on one k → n shape: a log line with every figure and one summary row. */
static void gq_shape(backend *gpu, int type, int k, int n, double copy, double peak)
{
    kc_ctx c = {gpu, gpu, 0x7162656e6368ULL + (uint64_t)type * 7 + (uint64_t)k, 1};
    kc_tensor kt;
    if (kc_tensor_random(&c, &kt, type, k, n, 0.05f)) return;
    size_t bytes = dt_row_bytes(type, k) * (size_t)n;
    int nc = gq_copies(bytes), up = 0;
    be_weight ws[GQ_MAX_COPIES];
    while (up < nc && !gpu->ops->weight_upload(gpu, &kt.t, &ws[up])) up++;
    free(kt.mem);
    const int R = 512;
    float *x = malloc((size_t)R * k * 4);
    kc_fill(&c, x, (size_t)R * k, 1.0f);
    float *xd = kc_put(gpu, x, (size_t)R * k), *od = gpu->ops->alloc(gpu, (size_t)R * n);
    free(x);
    gq_call call = {gpu, ws, up, 1, k, cuda_q_act_block(type), xd, od};
    double t1 = INFINITY, t8 = INFINITY, t512 = INFINITY, tf16 = INFINITY, q1 = INFINITY;
    if (up) {
        t1 = gq_time(&call, 100);
        call.n_rows = 8, t8 = gq_time(&call, 100);
        call.n_rows = R, t512 = gq_time(&call, 4);
        cuda_set_quant_prefill(gpu, 1);
        tf16 = gq_time(&call, 4);
        cuda_set_quant_prefill(gpu, 0);
        call.ws = NULL, call.n_rows = 1, q1 = gq_time(&call, 100);
    }
    for (int i = 0; i < up; i++) gpu->ops->weight_free(gpu, &ws[i]);
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, od);
    double g1 = bytes / t1 / 1e9, g8 = bytes / t8 / 1e9, flop = 2.0 * R * (double)k * n;
    double f512 = flop / t512 / 1e12, ff16 = flop / tf16 / 1e12;
    printf("  %-6s %5d->%-5d (%2d copies): 1 row %6.1f us %5.0f GB/s %3.0f%% (quantiser %4.1f us, mmvq alone "
           "%3.0f%%)  8 rows %6.1f us %5.0f GB/s %3.0f%%  512 rows mmq %5.1f TFLOP/s %3.0f%%, f16 tiles %5.1f "
           "TFLOP/s %3.0f%%\n",
           dt_name(type), k, n, up, t1 * 1e6, g1, 100 * g1 / copy, q1 * 1e6, 100 * bytes / (t1 - q1) / 1e9 / copy,
           t8 * 1e6, g8, 100 * g8 / copy, f512, 100 * f512 / peak, ff16, 100 * ff16 / peak);
    char what[48], v[40], ref[48];
    snprintf(what, sizeof what, "%s %d->%d 1/8 rows", dt_name(type), k, n);
    snprintf(v, sizeof v, "%.0f/%.0f GB/s %.0f/%.0f%%", g1, g8, 100 * g1 / copy, 100 * g8 / copy);
    snprintf(ref, sizeof ref, "512: %.0f TF %.0f%% (tiles %.0f%%)", f512, 100 * f512 / peak, 100 * ff16 / peak);
    gc_add(what, v, ref, up == nc ? -1 : 0);
}

/* Every quantised type on both shapes (quick: four types, the 4096-wide shape). */
static void gc_bench_quant(backend *gpu, double copy, double peak, int quick)
{
    const int types[] = {DT_Q4_0, DT_Q4_K, DT_Q6_K, DT_Q8_0, DT_Q4_1, DT_Q5_0,
                         DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_Q5_K, DT_IQ4_XS};
    printf("  quantised matmul op (mmvq at 1 and 8 rows: weight bytes/s, %% of copy; 512 rows: %% of cuBLAS peak)\n");
    for (int i = 0; i < (quick ? 4 : 12); i++) {
        if (!quick) gq_shape(gpu, types[i], 2048, 5632, copy, peak);
        gq_shape(gpu, types[i], 4096, 14336, copy, peak);
    }
}

/* The TinyLlama-shaped model with its matrices in `type` (the LM head in head_type), the
 * embedding left BF16: gc_model_make's model with its random BF16 matrices replaced by random
 * blocks in host memory (hbuf, freed by gq_model_free). 0, or -1 when out of memory. */
typedef struct gq_model {
    gc_model g;
    void *hbuf[4]; /* host: [dim][dim], [kv][dim], [ffn][dim] (also [dim][ffn]), [vocab][dim] */
} gq_model;

static void gq_model_free(gq_model *q)
{
    for (int i = 0; i < 4; i++) free(q->hbuf[i]);
    gc_model_free(&q->g);
}

static int gq_tinyllama(gq_model *q, backend *be, int type, int head_type)
{
    memset(q, 0, sizeof *q);
    if (gc_model_make(&q->g, be, &gc_tinyllama_shape)) return -1;
    gc_model *g = &q->g;
    const model_hparams *hp = &g->m.hp;
    int E = hp->n_embd, F = hp->n_ff, KV = hp->n_kv_heads * hp->head_dim, V = hp->n_vocab;
    kc_ctx c = {NULL, NULL, 0x716d6f64656cULL + (uint64_t)type, 1};
    kc_tensor kt;
    /* E × F and F × E hold as many blocks: one buffer of random blocks serves both */
    const int shapes[4][2] = {{E, E}, {E, KV}, {E, F}, {E, V}};
    for (int s = 0; s < 4; s++) {
        if (kc_tensor_random(&c, &kt, s == 3 ? head_type : type, shapes[s][0], shapes[s][1], 0.05f)) {
            gq_model_free(q);
            return -1;
        }
        q->hbuf[s] = kt.mem;
    }
    gc_tensor(&g->m.output, "output.weight", head_type, E, V, q->hbuf[3]);
    for (int l = 0; l < hp->n_layers; l++) {
        model_layer *L = &g->m.layers[l];
        gc_tensor(&L->wq, "wq", type, E, E, q->hbuf[0]);
        gc_tensor(&L->wk, "wk", type, E, KV, q->hbuf[1]);
        gc_tensor(&L->wv, "wv", type, E, KV, q->hbuf[1]);
        gc_tensor(&L->wo, "wo", type, E, E, q->hbuf[0]);
        gc_tensor(&L->w_gate, "w_gate", type, E, F, q->hbuf[2]);
        gc_tensor(&L->w_up, "w_up", type, E, F, q->hbuf[2]);
        gc_tensor(&L->w_down, "w_down", type, F, E, q->hbuf[2]);
    }
    return 0;
}

/* Decode of one sequence on the Q8_0 and Q4_K models against the BF16 twin's bf16_tps (eager)
 * and bf16_graph_tps (CUDA graphs). */
static void gc_bench_quant_models(backend *gpu, double copy, double bf16_tps, double bf16_graph_tps, int quick)
{
    const int variants[2][2] = {{DT_Q8_0, DT_Q8_0}, {DT_Q4_K, DT_Q6_K}};
    for (int v = 0; v < 2; v++) {
        gq_model qm;
        char what[48], val[40], ref[48];
        snprintf(what, sizeof what, "tinyllama %s decode b=1", dt_name(variants[v][0]));
        if (gq_tinyllama(&qm, gpu, variants[v][0], variants[v][1])) {
            gc_add(what, "not run", "out of memory", 0);
            continue;
        }
        gc_model *gm = &qm.g;
        const model_hparams *hp = &gm->m.hp;
        const int bs = 16, prompt = 128, steps = quick ? 16 : 64, stride = (prompt + steps + bs) / bs + 1;
        kv_geom g = kv_geom_make(hp->n_layers, hp->n_kv_heads, hp->head_dim, bs, KV_F16);
        char err[512];
        const int32_t n_blocks = stride;
        fwd *f = fwd_create(&gm->m, gpu, &g, &n_blocks, prompt, 1, err, sizeof err);
        if (!f) {
            printf("  %s: %s\n", what, err);
            gc_add(what, "not run", err, 0);
            gq_model_free(&qm);
            continue;
        }
        const model_layer *L = &gm->m.layers[0];
        double bytes = (double)gm->m.output.row_bytes * hp->n_vocab;
        const model_tensor *mats[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int k = 0; k < 7; k++) bytes += (double)hp->n_layers * mats[k]->row_bytes * mats[k]->ne[1];
        cuda_set_graphs(gpu, 0);
        double t1 = gc_bench_decode(f, &gm->m, 1, prompt, steps, stride);
        cuda_set_graphs(gpu, 1); /* the default */
        double tg = gc_bench_decode(f, &gm->m, 1, prompt, steps, stride);
        fwd_destroy(f);
        gq_model_free(&qm);
        double bound = copy * 1e9 / bytes;
        printf("  %s: %.0f tok/s eager, %.0f with graphs; %.2fx / %.2fx the bf16 twin; bound %.0f tok/s (%.0f MB a "
               "step)\n",
               what, t1, tg, t1 / bf16_tps, tg / bf16_graph_tps, bound, bytes / 1e6);
        snprintf(val, sizeof val, "%.0f tok/s (%.0f graphs)", t1, tg);
        snprintf(ref, sizeof ref, "%.2fx/%.2fx bf16, %.0f%% of %.0f", t1 / bf16_tps, tg / bf16_graph_tps,
                 100 * tg / bound, bound);
        gc_add(what, val, ref, -1);
    }
}
