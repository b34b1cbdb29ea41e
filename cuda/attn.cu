/*
 * attn.cu — causal attention over the paged KV cache: the op, the dispatcher that chooses its
 * kernels, and the launchers of the reference kernel.
 *
 * Three kernels serve the op, all FlashAttention-style (a block owns a run of query rows of one
 * sequence and one kv head, streams that head's K/V from the pages and keeps an online softmax;
 * the rows are (new token, query head of the group) pairs, so each K/V byte serves the whole GQA
 * group; new token i of a sequence with ctx_len entries sees entries 0 .. ctx_len − n_new + i,
 * narrowed by the layer's sliding window; the layer's scale and soft-cap are applied inside;
 * attention sinks are one more key range, met by be_attn.q_sink instead of q):
 *
 *   - the tensor-core prefill / mixed-step kernel (attn_mma.cu, attn_mma_kernels.h): 128 (64 at
 *     head dim 256) query rows per block, K/V tiles through shared memory by cp.async, Q Kᵀ and
 *     P V on mma.sync m16n8k16 with f32 accumulation;
 *   - the tensor-core decode kernel (attn_decode.cu, attn_decode_kernels.h): ≤ 16 query rows per
 *     block (a decoding sequence's token × group), the context split over the GPU so that any
 *     batch fills it, int8 / e4m3 codes decoded in registers;
 *   - the reference kernel (below, attn_kernels.h): any head dim, block size and KV type (f32
 *     too) on CUDA cores, with a separate split-K reduction.
 *
 * The dispatcher: when kv_init sets a geometry, cuda__attn_choose picks the tensor-core kernels
 * if the kernel table of this GPU has them (sm_80 and later), the head dim is one of theirs
 * (64, 96, 128, 256), the KV type is f16, bf16, int8 or e4m3 (an f32 cache asks for f32
 * products: the reference kernel keeps them) and a quantised cache's rows are 16-byte aligned
 * with an even block size; it prints the choice once on stderr. Each step's plan (meta.cu) then
 * splits the batch into decode items (≤ 16 rows) for the decode kernel and prefill items for the
 * prefill kernel, one launch each when present, or hands the step to the reference kernel when
 * a GQA group is wider than a prefill block. KVSERVE_CUDA_ATTN=ref forces the reference kernel
 * (cuda_set_attn_kernels does the same for tests).
 */
#include "cuda/internal.h"
#include "cuda/attn_kernels.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* ---- the reference kernel's launchers ------------------------------------------------------ */

template <typename T, typename TQ>
static int cuda__attn_launch(cudaStream_t s, const cuda__attn_args &a, const void *kp, const void *vp,
                             int32_t n_items, size_t smem)
{
    if (smem > 48 * 1024 && CUDA_CHECK(cudaFuncSetAttribute(cuda__attn_k<T, TQ>,
                                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
        return -EIO;
    dim3 grid(a.splits, a.n_kv_heads, n_items);
    cuda__attn_k<T, TQ><<<grid, CUDA_ATTN_THREADS, smem, s>>>(a, (const T *)kp, (const T *)vp);
    return 0;
}

template <typename TQ>
static int cuda__attn_by_kv(cudaStream_t s, const cuda__attn_args &a, int kv_dtype, const void *kp, const void *vp,
                            int32_t n_items, size_t smem)
{
    switch (kv_dtype) {
    case KV_F32: return cuda__attn_launch<float, TQ>(s, a, kp, vp, n_items, smem);
    case KV_BF16: return cuda__attn_launch<__nv_bfloat16, TQ>(s, a, kp, vp, n_items, smem);
    case KV_I8: return cuda__attn_launch<int8_t, TQ>(s, a, kp, vp, n_items, smem);
    case KV_FP8: return cuda__attn_launch<uint8_t, TQ>(s, a, kp, vp, n_items, smem);
    default: return cuda__attn_launch<__half, TQ>(s, a, kp, vp, n_items, smem);
    }
}

static int cuda__attention_sm80(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, const void *kp,
                                const void *vp, int32_t n_items, size_t smem)
{
    switch (a->q_type) {
    case DT_F32: return cuda__attn_by_kv<float>(s, *a, kv_dtype, kp, vp, n_items, smem);
    case DT_BF16: return cuda__attn_by_kv<__nv_bfloat16>(s, *a, kv_dtype, kp, vp, n_items, smem);
    case DT_F16: return cuda__attn_by_kv<__half>(s, *a, kv_dtype, kp, vp, n_items, smem);
    default: return -EINVAL;
    }
}

static void cuda__attn_reduce_sm80(cudaStream_t s, const float *part, void *out, int q_type, int n_tokens,
                                   int n_heads, int head_dim, int splits, const float *head_sinks)
{
    dim3 grid(n_heads, n_tokens);
    int threads = cuda_attn_reduce_threads(head_dim);
    if (q_type == DT_BF16)
        cuda__attn_reduce_k<<<grid, threads, 0, s>>>(part, (__nv_bfloat16 *)out, n_heads, head_dim, splits,
                                                     head_sinks);
    else if (q_type == DT_F16)
        cuda__attn_reduce_k<<<grid, threads, 0, s>>>(part, (__half *)out, n_heads, head_dim, splits, head_sinks);
    else
        cuda__attn_reduce_k<<<grid, threads, 0, s>>>(part, (float *)out, n_heads, head_dim, splits, head_sinks);
}

void cuda__attn_fill_sm80(cuda__kern *k)
{
    k->attention = cuda__attention_sm80;
    k->attn_reduce = cuda__attn_reduce_sm80;
}

/* ---- the dispatcher -------------------------------------------------------------------------- */

/* Why the tensor-core kernels cannot serve this geometry, or NULL when they can. */
static const char *cuda__attn_tc_refusal(const cuda_backend *cb)
{
    const cuda_kv_layout *l = &cb->kv;
    size_t es = kv_dtype_bytes(cb->kv_dtype);
    const char *env = getenv("KVSERVE_CUDA_ATTN");
    if (cb->attn_force == 1 || (cb->attn_force == 0 && env && !strcmp(env, "ref")))
        return "the reference kernel was asked for";
    if (!cb->k.attn_prefill || !cb->k.attn_decode) return "this GPU's kernel table has no tensor-core kernels";
    return cuda_attn_tc_refusal(l->head_dim, cb->kv_dtype, l->block_size, (size_t)cuda_kv_tile_elems(l) * es,
                                cb->smem_optin);
}

void cuda__attn_choose(cuda_backend *cb)
{
    const char *no = cuda__attn_tc_refusal(cb);
    cb->attn_tc = !no;
    int said = 1 + cb->attn_tc + 2 * (cb->kv.head_dim * 8 + cb->kv_dtype);
    if (said == cb->attn_said) return;
    cb->attn_said = said;
    const cuda_kv_layout *l = &cb->kv;
    if (no)
        fprintf(stderr, "kvserve: CUDA attention: the reference kernel (CUDA cores) for head dim %d, %s KV: %s\n",
                l->head_dim, kv_dtype_name(cb->kv_dtype), no);
    else
        fprintf(stderr,
                "kvserve: CUDA attention: tensor cores (mma.sync m16n8k16, %s products) for head dim %d, %s KV "
                "on sm_%d: prefill %dx%d tiles, decode split-K over %d SMs\n",
                cb->kv_dtype == KV_BF16 ? "bf16" : "f16", l->head_dim, kv_dtype_name(cb->kv_dtype), cb->k.cc,
                CUDA_ATTN_PF_BR(l->head_dim), CUDA_ATTN_PF_BC(l->head_dim), cb->n_sm);
}

/* ---- the op ---------------------------------------------------------------------------------- */

/* Queues the tensor-core kernels of this step's plan: the decode items, then the prefill items. */
static int cuda__attn_tc_run(cuda_backend *cb, cuda__attn_args *a, const void *kp, const void *vp)
{
    const cuda_attn_tc *p = &cb->attn_tcp;
    const int32_t *items = a->items;
    for (int kind = 0; kind < 2; kind++) {
        int32_t n = kind ? p->n_pre : p->n_dec, first = kind ? p->n_dec : 0;
        if (n == 0) continue;
        a->items = items + (size_t)first * CUDA_ATTN_ITEM_INTS;
        a->n_items = n;
        a->splits = kind ? p->pre_splits : p->dec_splits;
        a->part_keys = kind ? p->pre_part : p->dec_part;
        a->tc_part = cb->attn_scratch + (kind ? p->dec_floats : 0);
        a->sem = cb->attn_sem + (size_t)first * a->n_kv_heads;
        int rc = (kind ? cb->k.attn_prefill : cb->k.attn_decode)(cb->stream, a, cb->kv_dtype, kp, vp);
        if (rc || CB_CHECK_LAUNCH(cb)) return rc ? rc : -EIO;
    }
    return 0;
}

void cuda__op_attention(backend *be, int layer, const void *q, const be_attn *at, void *out)
{
    cuda_backend *cb = cuda__cb(be);
    int n_heads = at->n_heads;
    if (cuda_kv_kinds(&cb->kv) == 1) { /* the latent layout: MLA's own kernel (mla.cu) */
        cuda__mla_attention(cb, layer, q, at, out);
        return;
    }
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
    memset(&a, 0, sizeof a);
    a.q = q;
    a.out = out;
    a.q_type = cb->act; /* the backend's activations */
    a.part = cb->attn_scratch;
    a.q_start = cuda__meta(cb, cb->meta.q_start);
    const cuda_meta_kv *mk = &cb->meta.kv[cb->meta.n_kv > 1 ? cb->kv_group[layer] : 0];
    a.ctx_len = cuda__meta(cb, mk->ctx_len);
    a.block_table = cuda__meta(cb, mk->block_table);
    a.items = cuda__meta(cb, cb->meta.total);
    a.bt_stride = mk->bt_stride;
    a.sinks = mk->sinks >= 0 && at->q_sink ? cuda__meta(cb, mk->sinks) : NULL;
    a.q_sink = at->q_sink;
    a.head_sinks = at->head_sinks ? (const float *)at->head_sinks->data : NULL;
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
    const cuda_kv_layout *l;
    const void *kp = cuda__kv_plane(cb, layer, 0, &l), *vp = cuda__kv_plane(cb, layer, 1, &l);
    if (cb->attn_step_tc) {
        cuda__fail(cb, cuda__attn_tc_run(cb, &a, kp, vp));
        return;
    }
    size_t smem = cuda__attn_smem(cb->attn_tile_tokens * a.gsize, a.head_dim);
    if (cuda__fail(cb, cb->k.attention(cb->stream, &a, cb->kv_dtype, kp, vp, cb->attn_items, smem))) return;
    if (CB_CHECK_LAUNCH(cb) || a.splits == 1) return;
    cb->k.attn_reduce(cb->stream, cb->attn_scratch, out, a.q_type, cb->meta.n_tokens, n_heads, a.head_dim, a.splits,
                      a.head_sinks);
    CB_CHECK_LAUNCH(cb);
}

/* ---- extras (cuda_backend.h) ------------------------------------------------------------- */

extern "C" void cuda_set_attn_kernels(backend *be, int which)
{
    cuda_backend *cb = cuda__cb(be);
    cb->attn_force = which;
    cb->attn_heads = 0; /* replan the current step */
    if (cb->kv_arena[0]) cuda__attn_choose(cb);
}

extern "C" const char *cuda_last_attn_kernels(backend *be)
{
    cuda_backend *cb = cuda__cb(be);
    if (!cb->attn_step_tc) return "ref";
    if (cb->attn_tcp.n_dec && cb->attn_tcp.n_pre) return "mma decode+prefill";
    return cb->attn_tcp.n_dec ? "mma decode" : "mma prefill";
}
