/*
 * cuda_backend.cu — the CUDA backend of engine/backend.h: device selection, memory, weights,
 * the KV arena, batch metadata and the vtable. Kernels live in kernels.cu, attention.cu and
 * quant.cu (the quantised weights).
 *
 * Weights: every matrix keeps its type on the device: F32, F16 and BF16 for cuBLAS, and the
 * quantised types (Q8_0, the legacy and K-quants, IQ4_NL, IQ4_XS) as the file's blocks, which
 * quant.cu reads with a dequantising GEMV for decode and decodes into F16 tiles for cuBLAS in
 * prefill, so GPU memory and decode bandwidth are those of the file. Vectors (norms, biases)
 * become F32.
 *
 * Step protocol: begin() packs the batch into a pinned buffer and uploads it with one
 * asynchronous copy; the ops queue kernels on one stream; to_host()/sync() wait. Only logits
 * and batch metadata cross the bus. With CUDA graphs on (opt-in), a pure-decode step of a shape
 * seen before replays a captured graph instead (see cuda__graph_begin). Works on a machine with the CUDA toolkit but no driver or GPU:
 * cuda_is_available then says so, and nothing else is called.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/internal.h"
#include "cuda/quant_formats.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* cuBLAS workspace: 32 MiB, what cuBLAS recommends for Hopper. */
#define CUDA_BLAS_WORKSPACE ((size_t)32 << 20)

/* ---- availability ------------------------------------------------------------------------ */

extern "C" int cuda_is_available(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        const char *what = e == cudaErrorInsufficientDriver ? "no NVIDIA driver found (or it is older than this CUDA runtime)"
                           : e == cudaErrorNoDevice         ? "no NVIDIA GPU visible"
                                                            : "the NVIDIA driver or GPU is unusable";
        if (why && why_len) snprintf(why, why_len, "CUDA: %s (cudaGetDeviceCount: %s)", what, cudaGetErrorName(e));
        cudaGetLastError(); /* clear the non-sticky error so later calls start clean */
        return 0;
    }
    if (n < 1) {
        if (why && why_len) snprintf(why, why_len, "CUDA: the driver reports no GPU");
        return 0;
    }
    if (why && why_len) snprintf(why, why_len, "CUDA: %d device(s)", n);
    return 1;
}

/* The runtime's current device is per host thread, and the engine may drive the backend from
 * a thread other than the one that created it: entry points that start work select it first. */
static int cuda__use(cuda_backend *cb)
{
    return CB_CHECK(cb, cudaSetDevice(cb->device));
}

/* ---- memory ------------------------------------------------------------------------------ */

int cuda__grow(cuda_backend *cb, void **p, size_t *cap_bytes, size_t bytes)
{
    if (bytes <= *cap_bytes) return 0;
    size_t want = bytes + bytes / 4;
    void *q = NULL;
    if (CUDA_CHECK(cudaMalloc(&q, want))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    if (*p) CB_CHECK(cb, cudaFree(*p)); /* cudaFree waits for queued work that may use it */
    *p = q;
    cuda__graphs_reset(cb);
    *cap_bytes = want;
    return 0;
}

static float *cuda__alloc(backend *be, size_t n_floats)
{
    void *p = NULL;
    if (cuda__use(cuda__cb(be))) return NULL;
    if (CUDA_CHECK(cudaMalloc(&p, n_floats ? n_floats * sizeof(float) : 4))) {
        cudaGetLastError();
        return NULL;
    }
    return (float *)p;
}

static void cuda__free(backend *be, void *p)
{
    if (!p) return;
    cuda__graphs_reset(cuda__cb(be));
    CB_CHECK(cuda__cb(be), cudaFree(p));
}

static size_t cuda__mem_available(backend *be)
{
    size_t free_b = 0, total_b = 0;
    if (cuda__use(cuda__cb(be)) || CB_CHECK(cuda__cb(be), cudaMemGetInfo(&free_b, &total_b))) return 0;
    return free_b;
}

/* ---- weights ----------------------------------------------------------------------------- */

/* Device type of a model tensor: vectors become F32; matrices keep their type (the quantised
 * ones their blocks). -1 if the type is not supported. */
static int cuda__weight_type(const model_tensor *t)
{
    if (t->ne[1] == 1) return DT_F32;
    if (cuda_q_is_quant(t->type)) return t->ne[0] % cuda_q_block_elems(t->type) ? -1 : t->type;
    switch (t->type) {
    case DT_F32: return DT_F32;
    case DT_F16: return DT_F16;
    case DT_BF16: return DT_BF16;
    default: return -1;
    }
}

static int cuda__weight_upload(backend *be, const model_tensor *src, be_weight *dst)
{
    cuda_backend *cb = cuda__cb(be);
    be_weight w;
    memset(&w, 0, sizeof w);
    w.n_in = src->ne[0];
    w.n_out = src->ne[1];
    w.type = cuda__weight_type(src);
    if (!src->data) {
        w.type = src->type;
        *dst = w;
        return 0;
    }
    if (w.type < 0) return -EINVAL;
    if (cuda__use(cb)) return -EIO;
    size_t bytes = dt_row_bytes(w.type, w.n_in) * (size_t)w.n_out;
    if (CUDA_CHECK(cudaMalloc(&w.data, bytes))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    size_t raw = src->row_bytes * (size_t)w.n_out;
    int rc = 0;
    if (w.type == src->type) {
        rc = CUDA_CHECK(cudaMemcpyAsync(w.data, src->data, raw, cudaMemcpyHostToDevice, cb->stream));
        if (!rc) rc = CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    } else {
        void *stage = NULL;
        rc = CUDA_CHECK(cudaMalloc(&stage, raw));
        if (!rc) rc = CUDA_CHECK(cudaMemcpyAsync(stage, src->data, raw, cudaMemcpyHostToDevice, cb->stream));
        if (!rc) rc = cuda__convert_rows(cb, stage, src->type, src->row_bytes, w.n_in, w.n_out, w.data, w.type);
        if (!rc) rc = CUDA_CHECK(cudaStreamSynchronize(cb->stream));
        if (stage) cudaFree(stage);
    }
    if (rc) {
        cudaFree(w.data);
        cudaGetLastError();
        return -EIO;
    }
    if (cuda_q_is_quant(w.type)) {
        size_t tile = (size_t)cuda_q_tile_rows(w.n_in, w.n_out, CUDA_Q_TILE_BYTES) * (size_t)w.n_in * 2;
        if (tile > cb->qtile_need) cb->qtile_need = tile;
    }
    *dst = w;
    return 0;
}

static void cuda__weight_free(backend *be, be_weight *w)
{
    if (w->data) {
        cuda__graphs_reset(cuda__cb(be));
        CB_CHECK(cuda__cb(be), cudaFree(w->data));
    }
    w->data = NULL;
}

/* ---- KV arena ---------------------------------------------------------------------------- */

/* Frees every group's arena (cudaFree waits for work that uses it). */
static void cuda__kv_free(cuda_backend *cb)
{
    for (int k = 0; k < KV_MAX_GROUPS; k++) {
        if (cb->kv_arena[k]) CB_CHECK(cb, cudaFree(cb->kv_arena[k]));
        cb->kv_arena[k] = NULL;
    }
}

/* One zeroed allocation per layer group. All or nothing: on failure the previous arena stays. */
static int cuda__kv_init(backend *be, const kv_geom *g, const int32_t *n_blocks)
{
    cuda_backend *cb = cuda__cb(be);
    int ng = kv_n_groups(g);
    if (g->n_layers < 1 || g->n_layers > KV_MAX_LAYERS || g->n_kv_heads < 1 || g->head_dim < 1 ||
        g->block_size < 1 || ng > KV_MAX_GROUPS)
        return -EINVAL;
    if (g->dtype < 0 || g->dtype >= KV_N_DTYPES) return -EINVAL;
    for (int k = 0; k < ng; k++)
        if (n_blocks[k] < 1 || kv_group_layers(g, k) < 1) return -EINVAL;
    if (cuda__use(cb)) return -EIO;
    void *p[KV_MAX_GROUPS] = {NULL};
    cuda_kv_layout lg[KV_MAX_GROUPS];
    for (int k = 0; k < ng; k++) {
        lg[k] = cuda_kv_layout_of(g, n_blocks[k]);
        lg[k].n_layers = kv_group_layers(g, k);
        size_t bytes = (size_t)cuda_kv_total_elems(&lg[k]) * kv_dtype_bytes(g->dtype);
        int rc = 0;
        if (CUDA_CHECK(cudaMalloc(&p[k], bytes))) {
            cudaGetLastError();
            p[k] = NULL;
            rc = -ENOMEM;
        } else if (CB_CHECK(cb, cudaMemsetAsync(p[k], 0, bytes, cb->stream))) {
            rc = -EIO; /* zeroed, so that a read of a never-written slot is finite */
        }
        if (rc) {
            for (int j = 0; j <= k; j++)
                if (p[j]) cudaFree(p[j]);
            return rc;
        }
    }
    /* A second kv_init replaces the arena (as on the CPU). */
    cuda__kv_free(cb);
    cuda__graphs_reset(cb);
    cb->steps_done = 0; /* a new model or geometry: graphs wait for fresh eager steps */
    cb->model_heads = 0;
    cb->kv = cuda_kv_layout_of(g, n_blocks[0]);
    cb->kv_dtype = g->dtype;
    cb->kv_groups = ng;
    int seen[KV_MAX_GROUPS] = {0};
    for (int l = 0; l < g->n_layers; l++) {
        cb->kv_group[l] = (uint8_t)kv_group_of(g, l);
        cb->kv_index[l] = seen[cb->kv_group[l]]++;
    }
    for (int k = 0; k < KV_MAX_GROUPS; k++) {
        cb->kv_arena[k] = k < ng ? p[k] : NULL;
        cb->kv_blocks[k] = k < ng ? n_blocks[k] : 0;
        if (k < ng) cb->kvg[k] = lg[k];
    }
    return 0;
}

static void cuda__kv_copy_block(backend *be, int group, int32_t src, int32_t dst)
{
    cuda_backend *cb = cuda__cb(be);
    const cuda_kv_layout *l = &cb->kvg[group];
    size_t es = kv_dtype_bytes(cb->kv_dtype);
    size_t block_bytes = (size_t)l->n_kv_heads * cuda_kv_tile_elems(l) * es;
    size_t plane_bytes = (size_t)cuda_kv_plane_elems(l) * es;
    char *base = (char *)cb->kv_arena[group];
    /* One copy per (layer, K/V) plane: a single 2-D copy would need the plane size as its pitch,
     * which exceeds the runtime's pitch limit for arenas of a few GiB per plane. */
    for (size_t p = 0; p < 2 * (size_t)l->n_layers; p++)
        if (CB_CHECK(cb, cudaMemcpyAsync(base + p * plane_bytes + (size_t)dst * block_bytes,
                                         base + p * plane_bytes + (size_t)src * block_bytes, block_bytes,
                                         cudaMemcpyDeviceToDevice, cb->stream)))
            return;
}

/* Copies block `block` of group `group` between the arena and host memory, one chunk per (layer,
 * K/V) plane (cuda_kv_block_chunk_at), on the stream: in order with the steps around it. Only
 * between steps: a copy inside a graph capture would become part of the graph. */
static int cuda__kv_block_copy(cuda_backend *cb, int group, int32_t block, char *host, int to_host)
{
    if (group < 0 || group >= KV_MAX_GROUPS || !cb->kv_arena[group] || cb->graph_mode) return -EIO;
    const cuda_kv_layout *l = &cb->kvg[group];
    if (block < 0 || block >= l->n_blocks) return -EINVAL;
    size_t es = kv_dtype_bytes(cb->kv_dtype), chunk = cuda_kv_block_chunk_bytes(l, es);
    for (int p = 0; p < 2 * l->n_layers; p++) {
        char *dev = (char *)cb->kv_arena[group] + cuda_kv_block_chunk_at(l, es, block, p), *h = host + (size_t)p * chunk;
        if (CB_CHECK(cb, cudaMemcpyAsync(to_host ? h : dev, to_host ? dev : h, chunk,
                                         to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, cb->stream)))
            return -EIO;
    }
    return 0;
}

static int cuda__kv_block_out(backend *be, int group, int32_t block, void *dst)
{
    return cuda__kv_block_copy(cuda__cb(be), group, block, (char *)dst, 1);
}

static int cuda__kv_block_in(backend *be, int group, int32_t block, const void *src)
{
    return cuda__kv_block_copy(cuda__cb(be), group, block, (char *)src, 0);
}

/* Pinned host memory: asynchronous copies need it (pageable memory makes them synchronous). */
static void *cuda__host_alloc(backend *be, size_t bytes)
{
    void *p = NULL;
    if (CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault))) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda__host_free(backend *be, void *p)
{
    if (p) CB_CHECK(cuda__cb(be), cudaFreeHost(p));
}

/* ---- CUDA graphs for decode steps -------------------------------------------------------- */

void cuda__graphs_reset(cuda_backend *cb)
{
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].exec) cudaGraphExecDestroy(cb->graphs[i].exec);
    cb->n_graphs = 0;
}

/* A step can use a graph when graphs are on, every buffer has been sized by two eager steps,
 * and it is pure decode: one new token per sequence, each of them a logit row. */
static int cuda__graph_eligible(const cuda_backend *cb, const be_batch *b)
{
    if (!cb->graphs_on || cb->error || cb->steps_done < 2 || cb->model_heads <= 0 || !cb->kv_arena[0]) return 0;
    return cuda_batch_is_pure_decode(b);
}

/* The widest block-table stride of the batch's groups: the graph's shape key. */
static int32_t cuda__bt_stride(const cuda_meta_layout *L)
{
    int32_t m = 0;
    for (int g = 0; g < L->n_kv; g++) m = L->kv[g].bt_stride > m ? L->kv[g].bt_stride : m;
    return m;
}

/* Plans attention for the longest context the block table allows (so the launch shape does not
 * depend on the actual lengths), makes sure the conversion buffer (and, for a batch past the
 * quantised GEMV's rows, the F16 tile of quant.cu) is large enough, then either
 * selects the captured graph of this shape or starts capturing one. */
static int cuda__graph_begin(cuda_backend *cb, const be_batch *b)
{
    int32_t stride = cuda__bt_stride(&cb->meta), bound = stride * cb->kv.block_size;
    int rc = cuda__attn_plan(cb, cb->model_heads, bound);
    if (rc) return rc;
    size_t conv = (size_t)b->n_tokens * (size_t)cb->max_n_in * 2;
    rc = cuda__grow(cb, &cb->conv, &cb->conv_bytes, conv);
    if (!rc && b->n_tokens > CUDA_QGEMV_MAX_ROWS) rc = cuda__grow(cb, &cb->qtile, &cb->qtile_bytes, cb->qtile_need);
    if (rc) return rc;
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].n_tokens == b->n_tokens && cb->graphs[i].bt_stride == stride) {
            cb->graph_mode = 2;
            cb->graph_slot = i;
            return 0;
        }
    if (cb->n_graphs == CUDA_GRAPH_MAX) return 0; /* table full: run eagerly */
    if (CB_CHECK(cb, cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed))) return -EIO;
    cb->graph_mode = 1;
    cb->graph_slot = cb->n_graphs;
    return 0;
}

/* At the end of a step (to_host or sync): finishes a capture and launches it, or launches the
 * replayed graph. 0 or -EIO. */
static int cuda__graph_end(cuda_backend *cb)
{
    int mode = cb->graph_mode;
    cb->graph_mode = 0;
    if (mode == 0) {
        cb->steps_done++;
        return 0;
    }
    cuda_graph_slot *g = &cb->graphs[cb->graph_slot];
    if (mode == 1) {
        cudaGraph_t graph = NULL;
        int rc = CB_CHECK(cb, cudaStreamEndCapture(cb->stream, &graph));
        if (!rc) rc = CB_CHECK(cb, cudaGraphInstantiate(&g->exec, graph, 0));
        if (graph) cudaGraphDestroy(graph);
        if (rc) return -EIO;
        g->n_tokens = cb->meta.n_tokens;
        g->bt_stride = cuda__bt_stride(&cb->meta);
        g->n_ops = cb->graph_ops;
        cb->n_graphs++;
    } else if (cb->graph_ops != g->n_ops) {
        fprintf(stderr, "kvserve: CUDA graph replay saw %d ops, the capture %d\n", cb->graph_ops, g->n_ops);
        return cuda__fail(cb, -EIO);
    }
    return CB_CHECK(cb, cudaGraphLaunch(g->exec, cb->stream));
}

extern "C" void cuda_set_graphs(backend *be, int on)
{
    cuda_backend *cb = cuda__cb(be);
    cb->graphs_on = on;
    if (!on) cuda__graphs_reset(cb);
}

/* ---- batch metadata ---------------------------------------------------------------------- */

static int cuda__meta_reserve(cuda_backend *cb, size_t n_ints)
{
    if (n_ints <= cb->meta_cap) return 0;
    size_t want = n_ints + n_ints / 2 + 256;
    int32_t *h = NULL, *d = NULL;
    if (CUDA_CHECK(cudaMallocHost((void **)&h, want * sizeof(int32_t)))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    if (CUDA_CHECK(cudaMalloc((void **)&d, want * sizeof(int32_t)))) {
        cudaFreeHost(h);
        cudaGetLastError();
        return -ENOMEM;
    }
    if (cb->meta_host) CB_CHECK(cb, cudaFreeHost(cb->meta_host));
    if (cb->meta_dev) CB_CHECK(cb, cudaFree(cb->meta_dev));
    cuda__graphs_reset(cb);
    cb->meta_host = h;
    cb->meta_dev = d;
    cb->meta_cap = want;
    return 0;
}

static int cuda__begin(backend *be, const be_batch *b)
{
    cuda_backend *cb = cuda__cb(be);
    cuda_meta_layout L;
    int rc = cuda_meta_plan(b, &L);
    if (!rc && (b->n_kv > 1 ? b->n_kv : 1) > (cb->kv_groups > 0 ? cb->kv_groups : 1)) rc = -EINVAL;
    if (!rc && cb->kv_arena[0]) rc = cuda_meta_check_kv(b, cb->kv.block_size, cb->kv_blocks);
    if (rc) return rc;
    if (cuda__use(cb)) return -EIO;
    /* The pinned buffer may still be read by the previous step's copies. */
    if (CB_CHECK(cb, cudaEventSynchronize(cb->meta_done))) return -EIO;
    /* Room for the attention items too: at most one per token. */
    size_t need = (size_t)L.total + (size_t)CUDA_ATTN_ITEM_INTS * (size_t)b->n_tokens + 1;
    rc = cuda__meta_reserve(cb, need);
    if (rc) return rc;
    cuda_meta_pack(b, &L, cb->meta_host);
    if (CB_CHECK(cb, cudaMemcpyAsync(cb->meta_dev, cb->meta_host, (size_t)L.total * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, cb->stream)))
        return -EIO;
    if (CB_CHECK(cb, cudaEventRecord(cb->meta_done, cb->stream))) return -EIO;
    cb->meta = L;
    cb->batch = b;
    cb->have_batch = 1;
    cb->attn_heads = 0;
    cb->graph_mode = 0;
    cb->graph_ops = 0;
    if (cuda__graph_eligible(cb, b)) return cuda__graph_begin(cb, b);
    return 0;
}

/* ---- synchronisation --------------------------------------------------------------------- */

static int cuda__to_host(backend *be, const float *src, size_t n, float *dst)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_end(cb) || cb->error) return -EIO;
    if (CB_CHECK(cb, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, cb->stream)))
        return -EIO;
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}

static int cuda__sync(backend *be)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_end(cb)) return -EIO;
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static void cuda__destroy(backend *be)
{
    cuda_backend *cb = cuda__cb(be);
    if (cb->graph_mode == 1) {
        cudaGraph_t graph = NULL;
        cudaStreamEndCapture(cb->stream, &graph);
        if (graph) cudaGraphDestroy(graph);
    }
    cuda__graphs_reset(cb);
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    for (int k = 0; k < KV_MAX_GROUPS; k++)
        if (cb->kv_arena[k]) cudaFree(cb->kv_arena[k]);
    if (cb->meta_host) cudaFreeHost(cb->meta_host);
    if (cb->meta_dev) cudaFree(cb->meta_dev);
    if (cb->attn_scratch) cudaFree(cb->attn_scratch);
    if (cb->conv) cudaFree(cb->conv);
    if (cb->qtile) cudaFree(cb->qtile);
    if (cb->meta_done) cudaEventDestroy(cb->meta_done);
    if (cb->blas) cuda_blas()->destroy(cb->blas);
    if (cb->blas_ws) cudaFree(cb->blas_ws);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb);
}

static const be_ops cuda__ops = {
    cuda__destroy,
    cuda__weight_upload,
    cuda__weight_free,
    cuda__mem_available,
    cuda__kv_init,
    cuda__kv_copy_block,
    cuda__kv_block_out,
    cuda__kv_block_in,
    cuda__host_alloc,
    cuda__host_free,
    cuda__alloc,
    cuda__free,
    cuda__begin,
    cuda__op_embed,
    cuda__op_rmsnorm,
    cuda__op_matmul,
    NULL, /* matmul_multi: forward.c calls matmul per matrix */
    cuda__op_rope,
    cuda__op_rope_shift,
    cuda__op_store_kv,
    cuda__op_attention,
    cuda__op_silu_mul,
    cuda__op_gelu_mul,
    cuda__op_scale,
    cuda__op_softcap,
    cuda__op_add,
    cuda__op_gather_rows,
    cuda__to_host,
    cuda__sync,
};

extern "C" backend *cuda_backend_create(int device_index, char *err, size_t err_len)
{
    char why[256];
    if (!cuda_is_available(why, sizeof why)) {
        snprintf(err, err_len, "%s", why);
        return NULL;
    }
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device_index < 0 || device_index >= n) {
        snprintf(err, err_len, "CUDA: no device %d (%d visible)", device_index, n);
        return NULL;
    }
    /* cuBLAS is loaded here, by the first backend, never by a process that runs on the CPU. */
    const cuda_blas_api *blas = cuda_blas_load(err, err_len);
    if (!blas) return NULL;
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) {
        snprintf(err, err_len, "CUDA: out of host memory");
        return NULL;
    }
    cb->base.ops = &cuda__ops;
    cb->base.name = "cuda";
    cb->device = device_index;
    cudaDeviceProp prop;
    int rc = CUDA_CHECK(cudaSetDevice(device_index));
    if (!rc) rc = CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
    if (!rc) rc = CUDA_CHECK(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    if (!rc) rc = CUDA_CHECK(cudaEventCreateWithFlags(&cb->meta_done, cudaEventDisableTiming));
    if (!rc) rc = CUBLAS_CHECK(blas->create(&cb->blas));
    if (!rc) rc = CUBLAS_CHECK(blas->set_stream(cb->blas, cb->stream));
    if (!rc) rc = CUDA_CHECK(cudaMalloc(&cb->blas_ws, CUDA_BLAS_WORKSPACE));
    if (!rc) rc = CUBLAS_CHECK(blas->set_workspace(cb->blas, cb->blas_ws, CUDA_BLAS_WORKSPACE));
    /* FP32 GEMMs stay true FP32 (no TF32), so F32 models match the CPU reference. */
    if (!rc) rc = CUBLAS_CHECK(blas->set_math_mode(cb->blas, CUBLAS_DEFAULT_MATH));
    if (!rc) rc = CUDA_CHECK(cudaEventRecord(cb->meta_done, cb->stream));
    if (rc) {
        snprintf(err, err_len, "CUDA: could not initialise device %d (see the error above)", device_index);
        cudaGetLastError();
        cuda__destroy(&cb->base);
        return NULL;
    }
    const char *g = getenv("KVSERVE_CUDA_GRAPHS");
    cb->graphs_on = g && g[0] == '1';
    cb->n_sm = prop.multiProcessorCount;
    cb->smem_optin = prop.sharedMemPerBlockOptin;
    snprintf(cb->base.desc, sizeof cb->base.desc, "%.80s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    return &cb->base;
}

/* ---- extras (cuda_backend.h) ------------------------------------------------------------- */

extern "C" int cuda_upload_f32(backend *be, float *dst, const float *src, size_t n)
{
    cuda_backend *cb = cuda__cb(be);
    if (CB_CHECK(cb, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, cb->stream)))
        return -EIO;
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}

extern "C" int cuda_kv_read(backend *be, int layer, int kind, int32_t slot, float *dst)
{
    cuda_backend *cb = cuda__cb(be);
    if (!cb->kv_arena[0] || layer < 0 || layer >= cb->kv.n_layers || kind < 0 || kind > 1 || slot < 0) return -EINVAL;
    const cuda_kv_layout *l;
    const char *plane = cuda__kv_plane(cb, layer, kind, &l);
    if (slot >= l->n_blocks * l->block_size || l->head_dim > 1024) return -EINVAL;
    size_t es = kv_dtype_bytes(cb->kv_dtype);
    uint16_t tmp[1024];
    /* The arena is written on the backend's (non-blocking) stream: wait for it first. */
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    for (int h = 0; h < l->n_kv_heads; h++) {
        const char *p = plane + (size_t)cuda_kv_slot_index(l, 0, 0, slot, h, 0) * es;
        float *o = dst + (size_t)h * l->head_dim;
        if (es == 4) {
            if (CB_CHECK(cb, cudaMemcpy(o, p, (size_t)l->head_dim * 4, cudaMemcpyDeviceToHost))) return -EIO;
            continue;
        }
        if (CB_CHECK(cb, cudaMemcpy(tmp, p, (size_t)l->head_dim * es, cudaMemcpyDeviceToHost))) return -EIO;
        if (kv_dtype_is_quant(cb->kv_dtype)) { /* codes, then the row's f16 scale */
            uint8_t sc[KV_SCALE_BYTES];
            const char *sp = plane + cuda_kv_scale_index(l, 0, 0, slot / l->block_size, h, slot % l->block_size);
            if (CB_CHECK(cb, cudaMemcpy(sc, sp, KV_SCALE_BYTES, cudaMemcpyDeviceToHost))) return -EIO;
            float d = cuda_kv_load_scale(sc);
            const uint8_t *q = (const uint8_t *)tmp;
            for (int e = 0; e < l->head_dim; e++)
                o[e] = d * (cb->kv_dtype == KV_I8 ? (float)(int8_t)q[e] : kv_e4m3_decode(q[e]));
            continue;
        }
        for (int d = 0; d < l->head_dim; d++)
            o[d] = cb->kv_dtype == KV_BF16 ? cuda_bf16_to_f32(tmp[d]) : cuda_f16_to_f32(tmp[d]);
    }
    return cb->error;
}

extern "C" int cuda_last_attn_splits(backend *be)
{
    return cuda__cb(be)->attn_splits;
}
