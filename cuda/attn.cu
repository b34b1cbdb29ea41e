/*
 * attn.cu — causal attention over the paged KV cache, for decode and prefill alike.
 *
 * One kernel, FlashAttention-2 style: a block owns one work item (a run of new tokens of one
 * sequence: a single token for decode, a tile for prefill) and one kv head, and computes every
 * query head of that kv head's GQA group for those tokens at once, so each K/V tile read from the
 * pages serves rows = tokens × group-size queries. It walks the sequence's KV entries in tiles of
 * CUDA_ATTN_TK keys (gathered from the block table into shared memory, converted to f32 — int8
 * and e4m3 codes times their row's scale, so a quantised cache is never expanded), keeps
 * an online softmax per row (running max m, sum l, unnormalised output O), and masks causally:
 * new token i of a sequence with ctx_len entries after the step sees entries
 * 0 .. ctx_len − n_new + i. The cached prefix is just the leading entries of the same pages.
 * The layer's be_attn gives the scale of q·k, an optional soft-cap of the scores (Gemma 2) and
 * an optional sliding window: a windowed item starts at its first row's lowest visible key, and
 * keys below a row's window are masked like keys past its causal limit.
 *
 * Split-K (flash-decoding): when items × kv heads cannot fill the GPU (decode of few long
 * sequences), grid.x cuts the KV range into partitions; each writes its (O, m, l) partial and a
 * reduction kernel merges them with cuda_softmax_merge. Otherwise grid.x = 1 and the kernel writes
 * normalised outputs directly.
 *
 * Grid: (splits, n_kv_heads, items); CUDA_ATTN_THREADS threads; dynamic shared memory of
 * TK × (padded head_dim + head_dim) + rows × (2 head_dim + TK + 3) floats (cuda__attn_smem).
 * Each layer reads its layer group's arena and view of the batch (block tables, context
 * lengths); attention sinks (a moved StreamingLLM window) are one more key range, met by
 * be_attn.q_sink instead of q. The kernels themselves are in attn_kernels.h (also run under CPU
 * emulation); the work list is planned once per step (meta.cu, cuda/attn_plan.h); this file
 * launches the kernels, through the kernel table (kern.h): the attention entry is where kernels
 * for other shapes or GPUs (tensor cores: mma, wgmma) plug in.
 *
 * Not yet done: the QK and PV products use CUDA-core FMAs from shared memory, not tensor cores
 * (mma / wgmma), so long prefills are compute-bound well below the GPU's matrix rate.
 */
#include "cuda/internal.h"
#include "cuda/attn_kernels.h"

/* ---- the sm_80 kernels' launchers ---------------------------------------------------------- */

template <typename T, typename A>
static int cuda__attn_launch(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp,
                             int32_t n_items, size_t smem)
{
    if (smem > 48 * 1024 &&
        CUDA_CHECK(cudaFuncSetAttribute(cuda__attn_k<T, A>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
        return -EIO;
    dim3 grid(a.splits, a.n_kv_heads, n_items);
    cuda__attn_k<T, A><<<grid, CUDA_ATTN_THREADS, smem, s>>>(a, (const T *)kp, (const T *)vp);
    return 0;
}

template <typename A>
static int cuda__attention_act(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, const void *kp, const void *vp,
                               int32_t n_items, size_t smem)
{
    switch (kv_dtype) {
    case KV_F32: return cuda__attn_launch<float, A>(s, *a, kp, vp, n_items, smem);
    case KV_BF16: return cuda__attn_launch<__nv_bfloat16, A>(s, *a, kp, vp, n_items, smem);
    case KV_I8: return cuda__attn_launch<int8_t, A>(s, *a, kp, vp, n_items, smem);
    case KV_FP8: return cuda__attn_launch<uint8_t, A>(s, *a, kp, vp, n_items, smem);
    default: return cuda__attn_launch<__half, A>(s, *a, kp, vp, n_items, smem);
    }
}

static int cuda__attention_sm80(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, int act, const void *kp,
                                const void *vp, int32_t n_items, size_t smem)
{
    if (act == DT_BF16) return cuda__attention_act<__nv_bfloat16>(s, a, kv_dtype, kp, vp, n_items, smem);
    return cuda__attention_act<float>(s, a, kv_dtype, kp, vp, n_items, smem);
}

static void cuda__attn_reduce_sm80(cudaStream_t s, const float *part, void *out, int act, int n_tokens, int n_heads,
                                   int head_dim, int splits)
{
    dim3 grid(n_heads, n_tokens);
    int threads = cuda_attn_reduce_threads(head_dim);
    if (act == DT_BF16)
        cuda__attn_reduce_k<<<grid, threads, 0, s>>>(part, (__nv_bfloat16 *)out, n_heads, head_dim, splits);
    else
        cuda__attn_reduce_k<<<grid, threads, 0, s>>>(part, (float *)out, n_heads, head_dim, splits);
}

void cuda__attn_fill_sm80(cuda__kern *k)
{
    k->attention = cuda__attention_sm80;
    k->attn_reduce = cuda__attn_reduce_sm80;
}

/* ---- the op ------------------------------------------------------------------------------ */

void cuda__op_attention(backend *be, int layer, const void *q, const be_attn *at, void *out)
{
    cuda_backend *cb = cuda__cb(be);
    int n_heads = at->n_heads;
    if (cuda__graph_skip(cb) || cb->meta.n_tokens <= 0 || cb->error) return;
    if (n_heads % cb->kv.n_kv_heads) {
        cuda__fail(cb, -EINVAL);
        return;
    }
    if (cb->attn_heads != n_heads) {
        if (cb->graph_mode) { /* planning uploads and may allocate: not inside a capture */
            fprintf(stderr, "kvserve: CUDA graph step with %d heads, planned for %d\n", n_heads, cb->attn_heads);
            cuda__fail(cb, -EIO);
            return;
        }
        /* a padded decode step plans for its padded block-table stride, as its graph does */
        int32_t bound = cb->padded ? cb->pad_stride * cb->kv.block_size : 0;
        if (cuda__fail(cb, cuda__attn_plan(cb, n_heads, bound))) return;
    }
    if (cb->attn_items == 0) return;
    cuda__attn_args a;
    a.q = q;
    a.out = out;
    a.part = cb->attn_scratch;
    a.q_start = cuda__meta(cb, cb->meta.q_start);
    const cuda_meta_kv *mk = &cb->meta.kv[cb->meta.n_kv > 1 ? cb->kv_group[layer] : 0];
    a.ctx_len = cuda__meta(cb, mk->ctx_len);
    a.block_table = cuda__meta(cb, mk->block_table);
    a.items = cuda__meta(cb, cb->meta.total);
    a.bt_stride = mk->bt_stride;
    a.sinks = mk->sinks >= 0 && at->q_sink ? cuda__meta(cb, mk->sinks) : NULL;
    a.q_sink = at->q_sink;
    a.block_size = cb->kv.block_size;
    a.n_kv_heads = cb->kv.n_kv_heads;
    a.n_heads = n_heads;
    a.head_dim = cb->kv.head_dim;
    a.gsize = n_heads / cb->kv.n_kv_heads;
    a.splits = cb->attn_splits;
    a.part_keys = cb->attn_part;
    a.scale = at->scale;
    a.softcap = at->softcap;
    a.window = at->window;
    a.tile_elems = (int32_t)cuda_kv_tile_elems(&cb->kv);
    size_t smem = cuda__attn_smem(cb->attn_tile_tokens * a.gsize, a.head_dim);
    const cuda_kv_layout *l;
    const void *kp = cuda__kv_plane(cb, layer, 0, &l), *vp = cuda__kv_plane(cb, layer, 1, &l);
    if (cuda__fail(cb, cb->k.attention(cb->stream, &a, cb->kv_dtype, cb->act, kp, vp, cb->attn_items, smem))) return;
    if (CB_CHECK_LAUNCH(cb) || a.splits == 1) return;
    cb->k.attn_reduce(cb->stream, cb->attn_scratch, out, cb->act, cb->meta.n_tokens, n_heads, a.head_dim, a.splits);
    CB_CHECK_LAUNCH(cb);
}
