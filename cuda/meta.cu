/*
 * meta.cu — begin(): the step's batch checked against the KV arena, packed into one pinned int32
 * buffer (cuda/meta.h) and uploaded with one asynchronous copy; and the plans made from it once
 * per step: the attention work list and split factor (cuda/attn_plan.h), uploaded after the
 * metadata at its first attention call and reused by every layer.
 *
 * Two pinned buffers alternate, each rewritten only after the copies of the step that last used
 * it have read it (its event, recorded after every upload): with steps overlapped, begin() packs
 * step n + 1 while step n's attention items may still wait in the stream to be copied, and waits
 * only for step n - 1's (long done). The device buffer is one: the stream orders its uses. The
 * batch's token references (engine/backend.h) are resolved on the device right after the upload.
 */
#include "cuda/internal.h"

/* Grows the current pinned buffer and the device buffer to n_ints int32s each (contents lost). */
static int cuda__meta_reserve(cuda_backend *cb, size_t n_ints)
{
    size_t want = n_ints + n_ints / 2 + 256;
    if (n_ints > cb->meta_host_cap) {
        int32_t *h = NULL;
        if (CUDA_CHECK(cudaMallocHost((void **)&h, want * sizeof(int32_t)))) {
            cudaGetLastError();
            return -ENOMEM;
        }
        if (cb->meta_host) CB_CHECK(cb, cudaFreeHost(cb->meta_host));
        cb->meta_host = h;
        cb->meta_host_cap = want;
    }
    if (n_ints <= cb->meta_cap) return 0;
    int32_t *d = NULL;
    if (CUDA_CHECK(cudaMalloc((void **)&d, want * sizeof(int32_t)))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    if (cb->meta_dev) CB_CHECK(cb, cudaFree(cb->meta_dev));
    cuda__graphs_reset(cb);
    cb->meta_dev = d;
    cb->meta_cap = want;
    return 0;
}

/* Makes the other pinned buffer (and its event and capacity) the current one. */
static void cuda__meta_flip(cuda_backend *cb)
{
    int32_t *h = cb->meta_host;
    cb->meta_host = cb->meta_host_alt;
    cb->meta_host_alt = h;
    size_t c = cb->meta_host_cap;
    cb->meta_host_cap = cb->meta_alt_cap;
    cb->meta_alt_cap = c;
    cudaEvent_t e = cb->meta_done;
    cb->meta_done = cb->meta_done_alt;
    cb->meta_done_alt = e;
}

/* be_ops.begin: validates the batch, pads a pure-decode step to its graph shape (graph.cu), packs
 * it into the pinned buffer, uploads it, and starts or selects a CUDA graph for it. */
int cuda__op_begin(backend *be, const be_batch *b)
{
    cuda_backend *cb = cuda__cb(be);
    cuda_meta_layout L;
    int rc = cuda_meta_plan(b, &L);
    if (!rc && (b->n_kv > 1 ? b->n_kv : 1) > (cb->kv_groups > 0 ? cb->kv_groups : 1)) rc = -EINVAL;
    if (!rc && cb->kv_arena[0]) rc = cuda_meta_check_kv(b, cb->kv.block_size, cb->kv_blocks);
    if (rc) return rc;
    if (cuda__use(cb)) return -EIO;
    /* This step's pinned buffer was last read by the copies of the step before the previous one. */
    cuda__meta_flip(cb);
    if (CB_CHECK(cb, cudaEventSynchronize(cb->meta_done))) return -EIO;
    const be_batch *run = cuda__graph_pad(cb, b);
    if (!run) return -ENOMEM;
    if (run != b && cuda_meta_plan(run, &L)) return -EINVAL; /* the padded copy's layout */
    /* Room for the attention items too: the reference kernel's at most one per token, the
     * tensor-core kernels' at most 2 (n_tokens + n_seqs) (cuda_attn_tc_plan). */
    size_t need = (size_t)L.total + (size_t)CUDA_ATTN_ITEM_INTS * 2 * ((size_t)run->n_tokens + (size_t)run->n_seqs) + 1;
    rc = cuda__meta_reserve(cb, need);
    if (rc) return rc;
    cuda_meta_pack(run, &L, cb->meta_host);
    if (CB_CHECK(cb, cudaMemcpyAsync(cb->meta_dev, cb->meta_host, (size_t)L.total * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, cb->stream)))
        return -EIO;
    if (CB_CHECK(cb, cudaEventRecord(cb->meta_done, cb->stream))) return -EIO;
    rc = cuda__resolve_refs(cb, run, cb->meta_dev + L.tokens); /* padded rows hold token 0 */
    if (rc) return rc;
    cb->meta = L;
    cb->batch = run;
    cb->have_batch = 1;
    cb->attn_heads = 0;
    cb->graph_mode = 0;
    cb->graph_ops = 0;
    cb->step_no++;
    be->step_rows = run->n_tokens;
    return cb->padded ? cuda__graph_begin(cb) : 0;
}

/* ---- attention plan ------------------------------------------------------------------------ */

int cuda__attn_scratch_reserve(cuda_backend *cb, size_t floats, size_t counters)
{
    size_t cap = cb->attn_scratch_floats * sizeof(float);
    int rc = cuda__grow(cb, (void **)&cb->attn_scratch, &cap, floats * sizeof(float));
    if (rc) return rc;
    cb->attn_scratch_floats = cap / sizeof(float);
    size_t had = cb->attn_sem_bytes;
    rc = cuda__grow(cb, (void **)&cb->attn_sem, &cb->attn_sem_bytes, counters * sizeof(int32_t));
    if (rc) return rc;
    /* the counters start at zero; the kernels leave them so */
    if (cb->attn_sem_bytes != had && CB_CHECK(cb, cudaMemsetAsync(cb->attn_sem, 0, cb->attn_sem_bytes, cb->stream)))
        return -EIO;
    return 0;
}

/* Uploads the step's n attention items (planned for n_heads heads) behind its metadata. 0 or
 * -EIO. */
static int cuda__attn_items_upload(cuda_backend *cb, const int32_t *items, int32_t n, int n_heads)
{
    if (n > 0 && CB_CHECK(cb, cudaMemcpyAsync(cb->meta_dev + cb->meta.total, items,
                                              (size_t)n * CUDA_ATTN_ITEM_INTS * sizeof(int32_t),
                                              cudaMemcpyHostToDevice, cb->stream)))
        return -EIO;
    if (CB_CHECK(cb, cudaEventRecord(cb->meta_done, cb->stream))) return -EIO;
    cb->attn_heads = n_heads;
    cb->model_heads = n_heads;
    cb->attn_items = n;
    return 0;
}

/* The tensor-core plan of the step (cuda_attn_tc_plan) into the items area, its scratch and split
 * counters sized. 0 or a negative errno. */
static int cuda__attn_plan_tc(cuda_backend *cb, int gsize, int32_t max_kv_bound, int32_t *items, int32_t *n_items)
{
    const cuda_kv_layout *l = &cb->kv;
    cuda_attn_tc *p = &cb->attn_tcp;
    *n_items = cuda_attn_tc_plan(cb->batch, gsize, l->n_kv_heads, l->head_dim, cb->n_sm, max_kv_bound, items, p);
    int rc = cuda__attn_scratch_reserve(cb, p->dec_floats + p->pre_floats, (size_t)*n_items * l->n_kv_heads);
    if (rc) return rc;
    cb->attn_tile_tokens = 0;
    cb->attn_splits = p->dec_splits > p->pre_splits ? p->dec_splits : p->pre_splits;
    cb->attn_part = 0;
    return 0;
}

/* Plans the batch's attention items and split factor for n_heads query heads and uploads the
 * items (once per step; every layer reuses them): the tensor-core kernels' plan when the
 * dispatcher chose them (cuda__attn_choose) and the GQA group fits a prefill block, else the
 * reference kernel's. 0 or a negative errno. */
int cuda__attn_plan(cuda_backend *cb, int n_heads, int32_t max_kv_bound)
{
    const be_batch *b = cb->batch;
    int gsize = n_heads / cb->kv.n_kv_heads;
    cb->attn_step_tc = cb->attn_tc && gsize <= CUDA_ATTN_PF_BR(cb->kv.head_dim);
    if (cb->attn_step_tc) {
        int32_t *items = cb->meta_host + cb->meta.total, n = 0;
        int rc = cuda__attn_plan_tc(cb, gsize, max_kv_bound, items, &n);
        return rc ? rc : cuda__attn_items_upload(cb, items, n, n_heads);
    }
    int tile = cuda_attn_tile_tokens(gsize);
    int32_t *items = cb->meta_host + cb->meta.total;
    int32_t max_kv = 0;
    int32_t n = cuda_attn_plan(b, tile, items, &max_kv);
    if (max_kv_bound > max_kv) max_kv = max_kv_bound;
    int32_t part = 0;
    int splits = cuda_attn_splits(n, cb->kv.n_kv_heads, max_kv, cb->n_sm, b->n_tokens, n_heads, cb->kv.head_dim,
                                  &part);
    if (splits > 1) {
        int rc = cuda__attn_scratch_reserve(cb, (size_t)b->n_tokens * n_heads * splits * (cb->kv.head_dim + 2), 0);
        if (rc) return rc;
    }
    size_t smem = cuda__attn_smem(tile * gsize, cb->kv.head_dim);
    if (smem > cb->smem_optin) return -EINVAL;
    int rc = cuda__attn_items_upload(cb, items, n, n_heads);
    if (rc) return rc;
    cb->attn_tile_tokens = tile;
    cb->attn_splits = splits;
    cb->attn_part = part;
    return 0;
}
