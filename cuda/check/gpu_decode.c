/*
 * gpu_decode.c — the GPU check's decode benchmarks (included by cuda/check/gpu_check.c, after its
 * table helpers gc_add, gc_now and gc_median):
 *   - the decode path's projections, one op at a time, as the weight bytes they read per second
 *     with the L2 flushed (enough copies of the weights to exceed three L2s, each rep reading the
 *     next one: a matrix under the 60 MB L2 replayed in a loop would be read from L2, not HBM),
 *     timed as replays of a captured graph of the reps, so that launch gaps do not count;
 *   - llama-shaped models with random BF16 weights made on the device (no host-side generation
 *     of gigabytes): TinyLlama-1.1B (dim 2048, 22 layers, 32/4 heads, ffn 5632, vocab 32000) at
 *     1 and 64 sequences, eager and with CUDA graphs, with the kernels of one decode step (the
 *     nodes of its captured graph); and a Llama-3-8B-shaped stack (dim 4096, 32/8 heads, ffn
 *     14336, vocab 128256, a few layers) at 1 sequence; each against its bound: weight + KV
 *     bytes read per token over the measured copy bandwidth.
 */

/* ---- timing ops as graph replays --------------------------------------------------------- */

typedef void (*gc_op_fn)(backend *be, void *arg, int i);

/* Seconds per call of fn(be, arg, i) for i < reps, captured into one graph on the backend's
 * stream (CUDA graphs of the backend itself off) and replayed: the median of 7 replays after a
 * warm-up, divided by reps. 0 on a failure. */
static double gc_time_graph(backend *be, gc_op_fn fn, void *arg, int reps)
{
    cudaStream_t st = (cudaStream_t)cuda_stream_of(be);
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    fn(be, arg, 0); /* sizes any scratch outside the capture */
    if (be->ops->sync(be)) return 0;
    GC_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < reps; i++) fn(be, arg, i);
    GC_CUDA(cudaStreamEndCapture(st, &g));
    GC_CUDA(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    GC_CUDA(cudaEventCreate(&e0));
    GC_CUDA(cudaEventCreate(&e1));
    double t[7];
    for (int r = -1; r < 7; r++) {
        float ms = 0;
        GC_CUDA(cudaEventRecord(e0, st));
        GC_CUDA(cudaGraphLaunch(ge, st));
        GC_CUDA(cudaEventRecord(e1, st));
        GC_CUDA(cudaEventSynchronize(e1));
        GC_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) t[r] = ms * 1e-3 / reps;
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    return be->ops->sync(be) ? 0 : gc_median(t, 7);
}

/* One projection over rotating copies of its weights. */
typedef struct gc_proj {
    be_weight *w;
    int copies, rows, glu;
    void *x, *out;
} gc_proj;

static void gc_proj_op(backend *be, void *arg, int i)
{
    gc_proj *p = arg;
    const be_weight *w = &p->w[i % p->copies];
    if (p->glu) {
        be_glu g = {.n_w = 1, .w = {w}, .gelu = 0};
        be->ops->glu(be, p->x, p->rows, &g, p->out);
    } else {
        be->ops->matmul(be, p->x, p->rows, w, NULL, p->out);
    }
}

/* The weight bytes one projection reads per second (GB/s) with the L2 flushed: type weights of
 * n_in inputs and n_out outputs (glu: [gate; up] of 2 × n_out rows through the glu op), rows
 * activation rows, enough copies to exceed 3 × l2 bytes. 0 on a failure. */
static double gc_bench_proj(backend *be, int type, int n_in, int n_out, int rows, int glu, size_t l2)
{
    kc_ctx c = {be, be, 0x70726f6aULL, 1};
    int64_t w_rows = glu ? 2 * (int64_t)n_out : n_out;
    size_t bytes = dt_row_bytes(type, n_in) * (size_t)w_rows;
    gc_proj p = {.rows = rows, .glu = glu};
    p.copies = (int)(3 * l2 / bytes) + 2;
    if (p.copies > 64) p.copies = 64;
    kc_tensor kt;
    if (kc_tensor_random(&c, &kt, type, n_in, w_rows, 0.05f)) return 0;
    p.w = calloc((size_t)p.copies, sizeof *p.w);
    int ok = 1;
    for (int i = 0; i < p.copies && ok; i++) ok = !be->ops->weight_upload(be, &kt.t, &p.w[i]);
    free(kt.mem);
    float *x = malloc((size_t)rows * n_in * 4);
    kc_fill(&c, x, (size_t)rows * n_in, 1.0f);
    p.x = kc_put_act(be, x, (size_t)rows * n_in);
    p.out = be->ops->alloc(be, (size_t)rows * w_rows);
    free(x);
    int reps = p.copies * (p.copies >= 40 ? 1 : 40 / p.copies);
    double t = ok && p.x && p.out ? gc_time_graph(be, gc_proj_op, &p, reps) : 0;
    for (int i = 0; i < p.copies; i++)
        if (p.w[i].data) be->ops->weight_free(be, &p.w[i]);
    free(p.w);
    if (p.x) be->ops->free(be, p.x);
    if (p.out) be->ops->free(be, p.out);
    return t > 0 ? (double)bytes / t / 1e9 : 0;
}

/* ---- llama-shaped models with random weights on the device -------------------------------- */

typedef struct gc_shape {
    const char *name;
    int dim, layers, heads, kv_heads, ffn, vocab;
} gc_shape;

static const gc_shape gc_tinyllama_shape = {"tinyllama-1.1B-shaped", 2048, 22, 32, 4, 5632, 32000};
static const gc_shape gc_llama8b_shape = {"llama-8B-shaped", 4096, 4, 32, 8, 14336, 128256};

/* A llama-shaped model whose matrices of one shape share one device buffer of random BF16 (each
 * layer still gets its own copy on upload); norms are ones in host memory. */
typedef struct gc_model {
    model m;
    float *ones;    /* host */
    void *dev[6];   /* device: embedding, output, [dim][dim], [kv][dim], [ffn][dim], [dim][ffn] */
} gc_model;

static void gc_tensor(model_tensor *t, const char *name, int type, int64_t n_in, int64_t n_out, const void *data)
{
    t->name = name;
    t->type = type;
    t->ne[0] = n_in;
    t->ne[1] = n_out;
    t->data = data;
    t->row_bytes = dt_row_bytes(type, n_in);
}

/* Device memory of n random BF16 values (seed, scale), or NULL. */
static void *gc_random_dev(backend *be, size_t n, uint64_t seed, float scale)
{
    void *p = NULL;
    if (cudaMalloc(&p, n * 2) != cudaSuccess) return NULL;
    if (cuda_fill_random(be, p, n, DT_BF16, seed, scale)) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void gc_model_free(gc_model *g)
{
    for (int i = 0; i < 6; i++)
        if (g->dev[i]) cudaFree(g->dev[i]);
    free(g->ones);
    free(g->m.layers);
    memset(g, 0, sizeof *g);
}

/* 0, or -1 when the device is out of memory. */
static int gc_model_make(gc_model *g, backend *be, const gc_shape *s)
{
    memset(g, 0, sizeof *g);
    model_hparams *hp = &g->m.hp;
    hp->arch = MODEL_ARCH_LLAMA;
    snprintf(hp->arch_name, sizeof hp->arch_name, "llama");
    snprintf(hp->name, sizeof hp->name, "%s random bf16", s->name);
    hp->n_embd = s->dim, hp->n_layers = s->layers, hp->n_heads = s->heads, hp->n_kv_heads = s->kv_heads;
    hp->head_dim = s->dim / s->heads, hp->n_ff = s->ffn, hp->n_vocab = s->vocab, hp->n_ctx_train = 8192;
    hp->rope_base = 10000.0f, hp->rope_dims = hp->head_dim, hp->rope_neox = 0, hp->rms_eps = 1e-5f;
    hp->tied_output = 0, hp->file_type = -1;
    const int64_t E = s->dim, F = s->ffn, KV = (int64_t)s->kv_heads * hp->head_dim, V = s->vocab;
    g->ones = malloc((size_t)(E > F ? E : F) * 4);
    for (int64_t i = 0; i < (E > F ? E : F); i++) g->ones[i] = 1.0f;
    const size_t n[6] = {(size_t)(E * V), (size_t)(E * V), (size_t)(E * E), (size_t)(E * KV), (size_t)(E * F),
                         (size_t)(E * F)};
    const float sc[6] = {0.05f, 0.05f, 0.05f, 0.05f, 0.03f, 0.03f};
    for (int i = 0; i < 6; i++)
        if (!(g->dev[i] = gc_random_dev(be, n[i], 0x6d6f64656cULL + (uint64_t)i, sc[i]))) {
            gc_model_free(g);
            return -1;
        }
    gc_tensor(&g->m.tok_embd, "token_embd.weight", DT_BF16, E, V, g->dev[0]);
    gc_tensor(&g->m.output_norm, "output_norm.weight", DT_F32, E, 1, g->ones);
    gc_tensor(&g->m.output, "output.weight", DT_BF16, E, V, g->dev[1]);
    g->m.layers = calloc((size_t)hp->n_layers, sizeof *g->m.layers);
    for (int l = 0; l < hp->n_layers; l++) {
        model_layer *L = &g->m.layers[l];
        gc_tensor(&L->attn_norm, "attn_norm", DT_F32, E, 1, g->ones);
        gc_tensor(&L->ffn_norm, "ffn_norm", DT_F32, E, 1, g->ones);
        gc_tensor(&L->wq, "wq", DT_BF16, E, E, g->dev[2]);
        gc_tensor(&L->wk, "wk", DT_BF16, E, KV, g->dev[3]);
        gc_tensor(&L->wv, "wv", DT_BF16, E, KV, g->dev[3]);
        gc_tensor(&L->wo, "wo", DT_BF16, E, E, g->dev[2]);
        gc_tensor(&L->w_gate, "w_gate", DT_BF16, E, F, g->dev[4]);
        gc_tensor(&L->w_up, "w_up", DT_BF16, E, F, g->dev[4]);
        gc_tensor(&L->w_down, "w_down", DT_BF16, F, E, g->dev[5]);
        gc_tensor(&L->bq, "bq", DT_F32, E, 1, NULL);
        gc_tensor(&L->bk, "bk", DT_F32, KV, 1, NULL);
        gc_tensor(&L->bv, "bv", DT_F32, KV, 1, NULL);
    }
    return 0;
}

/* Decode throughput of n_seqs sequences with prompt tokens of prefill each, over steps decode
 * steps (logits to the host and greedy argmax on the host, as the engine does). tok/s, 0 on a
 * failure. */
static double gc_bench_decode(fwd *f, const model *m, int n_seqs, int prompt, int steps, int bt_stride)
{
    const int bs = 16;
    int max_tok = n_seqs * prompt;
    int32_t *tokens = malloc((size_t)max_tok * 4), *pos = malloc((size_t)max_tok * 4), *slots = malloc((size_t)max_tok * 4);
    int32_t *q_start = malloc(((size_t)n_seqs + 1) * 4), *ctx = malloc((size_t)n_seqs * 4), *rows = malloc((size_t)n_seqs * 4);
    int32_t *bt = malloc((size_t)n_seqs * bt_stride * 4);
    float *logits = malloc((size_t)n_seqs * m->hp.n_vocab * 4);
    for (int i = 0; i < n_seqs * bt_stride; i++) bt[i] = i;
    double t0 = 0, tps = 0;
    for (int st = 0; st <= steps; st++) {
        int n = 0;
        q_start[0] = 0;
        for (int s = 0; s < n_seqs; s++) {
            int cnt = st == 0 ? prompt : 1, base = st == 0 ? 0 : prompt + st - 1;
            for (int k = 0; k < cnt; k++, n++) {
                tokens[n] = st == 0 ? (7 * k + s) % m->hp.n_vocab : gc_argmax(logits + (size_t)s * m->hp.n_vocab, m->hp.n_vocab);
                pos[n] = base + k;
                slots[n] = cuda_kv_entry_slot(bt + s * bt_stride, bs, base + k);
            }
            ctx[s] = base + cnt;
            rows[s] = n - 1;
            q_start[s + 1] = n;
        }
        be_batch b = {.n_tokens = n, .tokens = tokens, .positions = pos, .n_seqs = n_seqs, .q_start = q_start, .n_logits = n_seqs, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = bt_stride}}};
        if (fwd_run(f, &b, logits)) goto out;
        if (st == 0) t0 = gc_now(); /* time the decode steps only */
    }
    tps = (double)n_seqs * steps / (gc_now() - t0);
out:
    free(tokens), free(pos), free(slots), free(q_start), free(ctx), free(rows), free(bt), free(logits);
    return tps;
}

/* ---- the decode table --------------------------------------------------------------------- */

/* One row per projection of the shape s at rows rows: GB/s with the L2 flushed, % of copy. */
static void gc_proj_rows(backend *gpu, const gc_shape *s, int rows, double copy, size_t l2)
{
    const int kv = s->kv_heads * (s->dim / s->heads);
    const struct {
        const char *what;
        int n_in, n_out, glu;
    } p[] = {
        {"qkv", s->dim, s->dim + 2 * kv, 0}, {"o", s->dim, s->dim, 0}, {"gate/up+silu", s->dim, s->ffn, 1},
        {"down", s->ffn, s->dim, 0},         {"lm head", s->dim, s->vocab, 0},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        double gbs = gc_bench_proj(gpu, DT_BF16, p[i].n_in, p[i].n_out, rows, p[i].glu, l2);
        char what[48], v[40], ref[48];
        snprintf(what, sizeof what, "%.5s %s %dx%d->%d%s", s->name, p[i].what, rows, p[i].n_in, p[i].n_out,
                 p[i].glu ? "x2" : "");
        snprintf(v, sizeof v, "%.0f GB/s", gbs);
        snprintf(ref, sizeof ref, "%.0f%% of copy, L2 flushed", 100 * gbs / copy);
        gc_add(what, v, ref, -1);
    }
}

/* The bound of a decode step of model m over fwd f at n_seqs sequences of mean context ctx:
 * the weights once plus every sequence's KV, over the copy bandwidth. tok/s. */
static double gc_bound(fwd *f, const model *m, int n_seqs, double ctx, double copy)
{
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, 16, KV_F16);
    double bytes = fwd_weight_bytes_per_token(f) + n_seqs * ctx * (double)kv_bytes_per_token(&g);
    return n_seqs * copy * 1e9 / bytes;
}

/* Decode rows of model shape s: at each batch of batches[], eager and with graphs (the
 * graph's nodes are the launches of one step), against the bound. The figures at one sequence
 * go to *b1_eager and *b1_graphs (tok/s; left as they are when batches[] has no 1). */
static void gc_decode_rows(backend *gpu, const gc_shape *s, const int *batches, int n_batches, int steps, double copy,
                           double *b1_eager, double *b1_graphs)
{
    double t0 = gc_now();
    gc_model gm;
    char what[48], v[40], ref[48];
    if (gc_model_make(&gm, gpu, s)) {
        gc_add(s->name, "not run", "out of device memory", 0);
        return;
    }
    const int bs = 16, prompt = 128, max_b = batches[n_batches - 1], stride = (prompt + steps + bs) / bs + 1;
    kv_geom g = kv_geom_make(gm.m.hp.n_layers, gm.m.hp.n_kv_heads, gm.m.hp.head_dim, bs, KV_F16);
    char err[512];
    const int32_t n_blocks = max_b * stride;
    fwd *f = fwd_create(&gm.m, gpu, &g, &n_blocks, max_b * prompt, max_b, err, sizeof err);
    if (!f) {
        printf("  %s: %s\n", s->name, err);
        gc_add(s->name, "not run", err, 0);
        gc_model_free(&gm);
        return;
    }
    printf("  %s model ready in %.1f s (%.2f GB of weights a token)\n", s->name, gc_now() - t0,
           fwd_weight_bytes_per_token(f) / 1e9);
    for (int i = 0; i < n_batches; i++) {
        int b = batches[i];
        double bound = gc_bound(f, &gm.m, b, prompt + steps / 2.0, copy);
        cuda_set_graphs(gpu, 0);
        double eager = gc_bench_decode(f, &gm.m, b, prompt, steps, stride);
        cuda_set_graphs(gpu, 1);
        double graphs = gc_bench_decode(f, &gm.m, b, prompt, steps, stride);
        size_t nodes = cuda_graph_nodes(gpu);
        if (b == 1) *b1_eager = eager, *b1_graphs = graphs;
        snprintf(what, sizeof what, "%.12s decode b=%d", s->name, b);
        snprintf(v, sizeof v, "%.0f tok/s (eager %.0f)", graphs, eager);
        snprintf(ref, sizeof ref, "%.0f%% of bound %.0f", 100 * graphs / bound, bound);
        gc_add(what, v, ref, -1);
        snprintf(what, sizeof what, "  launches/step b=%d", b);
        snprintf(v, sizeof v, "%zu", nodes);
        snprintf(ref, sizeof ref, "%.1f per layer (graph nodes)", (double)nodes / gm.m.hp.n_layers);
        gc_add(what, v, ref, -1);
    }
    fwd_destroy(f);
    gc_model_free(&gm);
}

/* The whole decode table: projections of both shapes at 1 row (and 8 for the 1.1B shape), the
 * 1.1B-shaped model at 1 and 64 sequences, the 8B-shaped stack at 1. The 1.1B shape's figures
 * at one sequence (eager, graphs: tok/s, 0 when not run) go to *tiny_eager and *tiny_graphs,
 * for the quantised twins to be measured against. */
static void gc_decode_table(backend *gpu, double copy, int quick, double *tiny_eager, double *tiny_graphs)
{
    size_t l2 = 60u << 20;
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
        int v = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev) == cudaSuccess && v > 0) l2 = (size_t)v;
    }
    gc_proj_rows(gpu, &gc_tinyllama_shape, 1, copy, l2);
    if (!quick) gc_proj_rows(gpu, &gc_tinyllama_shape, 8, copy, l2);
    gc_proj_rows(gpu, &gc_llama8b_shape, 1, copy, l2);
    const int tiny_b[] = {1, 64}, big_b[] = {1};
    double big_e = 0, big_g = 0;
    *tiny_eager = *tiny_graphs = 0;
    gc_decode_rows(gpu, &gc_tinyllama_shape, tiny_b, 2, quick ? 16 : 64, copy, tiny_eager, tiny_graphs);
    gc_decode_rows(gpu, &gc_llama8b_shape, big_b, 1, quick ? 16 : 64, copy, &big_e, &big_g);
}
