/*
 * mla.cu — multi-head latent attention on the GPU (be_ops.mla_prepare, mla_release, mla_qk,
 * mla_out, and the attention op over a latent KV arena, which attn.cu hands over): a layer's
 * per-head up-projections get a device table of their pointers once; the latent query and key of
 * a step are the prep kernel (the latent's norm, the RoPE parts) and the grouped matvec of
 * moe_kernels.h with one group per head (k_b · q_nope); the value up-projection is the same
 * matvec over the attention's output; attention runs mla_kernels.h's kernel over the latent
 * plane, each cached vector the key and the value of every head. The kernels compute in f32;
 * activations of another type are converted on the way in and out (cuda__f32_parts, moe.cu).
 */
#include <string.h>

#include "cuda/internal.h"
#include "cuda/mla_kernels.h"

/* A layer's device state (be_mla.extra): the heads' matrices. */
typedef struct cuda__mla_layer {
    const void **kb, **vb; /* device [n_heads] each */
    int kb_type, vb_type;
} cuda__mla_layer;

/* ---- launchers ----------------------------------------------------------------------------- */

static void cuda__mla_prep_sm80(cudaStream_t s, const cuda__mla_prep_args *a, int n_tokens)
{
    cuda__mla_prep_k<<<n_tokens, 128, 0, s>>>(*a);
}

template <typename T>
static int cuda__mla_attn_launch(cudaStream_t s, const cuda__mla_attn_args &a, const void *kp, int n_tokens)
{
    size_t smem = cuda__mla_smem(a.head_dim);
    if (smem > 48 * 1024 &&
        CUDA_CHECK(cudaFuncSetAttribute(cuda__mla_attn_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
        return -EIO;
    dim3 g((unsigned)(cuda__mla_chunks(a.n_heads) * (a.splits > 1 ? a.splits : 1)), (unsigned)n_tokens);
    cuda__mla_attn_k<T><<<g, CUDA_MLA_THREADS, smem, s>>>(a, (const T *)kp);
    return 0;
}

static int cuda__mla_attention_sm80(cudaStream_t s, const cuda__mla_attn_args *a, int kv_dtype, const void *kp,
                                    int n_tokens)
{
    switch (kv_dtype) {
    case KV_F32: return cuda__mla_attn_launch<float>(s, *a, kp, n_tokens);
    case KV_BF16: return cuda__mla_attn_launch<__nv_bfloat16>(s, *a, kp, n_tokens);
    case KV_I8: return cuda__mla_attn_launch<int8_t>(s, *a, kp, n_tokens);
    case KV_FP8: return cuda__mla_attn_launch<uint8_t>(s, *a, kp, n_tokens);
    default: return cuda__mla_attn_launch<__half>(s, *a, kp, n_tokens);
    }
}

void cuda__mla_fill_sm80(cuda__kern *k)
{
    k->mla_prep = cuda__mla_prep_sm80;
    k->mla_attention = cuda__mla_attention_sm80;
}

/* ---- the ops ------------------------------------------------------------------------------- */

static int cuda__mla_table(cuda_backend *cb, const be_weight *w, int n, const void ***dev, int *type)
{
    const void **h = (const void **)calloc((size_t)n, sizeof *h);
    if (!h) return -ENOMEM;
    *type = w[0].type;
    int rc = cb->k.moe_gemv[*type] && w[0].n_in % 8 == 0 ? 0 : -EINVAL;
    for (int i = 0; i < n && !rc; i++) {
        h[i] = w[i].data;
        if (w[i].type != *type) rc = -EINVAL;
    }
    if (!rc) rc = cuda__ptr_table(cb, h, n, (void **)dev);
    free(h);
    return rc;
}

int cuda__op_mla_prepare(backend *be, be_mla *m)
{
    cuda_backend *cb = cuda__cb(be);
    cuda__mla_layer *st = (cuda__mla_layer *)calloc(1, sizeof *st);
    if (!st || cuda__use(cb)) {
        free(st);
        return -ENOMEM;
    }
    m->extra = st;
    int rc = cuda__mla_table(cb, m->k_b, m->n_heads, &st->kb, &st->kb_type);
    if (!rc) rc = cuda__mla_table(cb, m->v_b, m->n_heads, &st->vb, &st->vb_type);
    if (rc) cuda__op_mla_release(be, m);
    return rc;
}

void cuda__op_mla_release(backend *be, be_mla *m)
{
    cuda__mla_layer *st = (cuda__mla_layer *)m->extra;
    if (!st) return;
    cuda__graphs_reset(cuda__cb(be));
    if (st->kb) cudaFree((void *)st->kb);
    if (st->vb) cudaFree((void *)st->vb);
    free(st);
    m->extra = NULL;
}

/* out group h = w[h] · x group h for every token: the heads' grouped matvec. */
static void cuda__mla_heads(cuda_backend *cb, const void **w, int type, const be_weight *w0, int H, int T,
                            const float *x, int64_t x_goff, int64_t x_stride, float *out, int64_t o_goff, int64_t o_stride)
{
    cuda__moe_proj p;
    memset(&p, 0, sizeof p);
    p.w = w, p.n_groups = H, p.n_rows = T;
    p.n_in = w0->n_in, p.n_out = w0->n_out, p.row_bytes = dt_row_bytes(type, w0->n_in);
    p.x_goff = x_goff, p.x_stride = x_stride, p.o_goff = o_goff, p.o_stride = o_stride;
    cb->k.moe_gemv[type](cb->stream, &p, x, out);
}

void cuda__op_mla_qk(backend *be, const void *q_act, const void *kv_act, const be_mla *m, void *q_lat_act,
                     void *k_lat_act)
{
    cuda_backend *cb = cuda__cb(be);
    int T = cb->meta.n_tokens, H = m->n_heads, hq = m->qk_nope + m->rope, hl = m->kv_lora + m->rope;
    const cuda__mla_layer *st = (const cuda__mla_layer *)m->extra;
    if (cuda__graph_skip(cb) || T <= 0 || cb->error || !st) return;
    const size_t n[4] = {(size_t)T * H * hq, (size_t)T * hl, (size_t)T * H * hl, (size_t)T * hl};
    const void *from[4] = {q_act, kv_act, NULL, NULL};
    float *part[4];
    if (cuda__f32_parts(cb, T, 4, n, from, part)) return;
    const float *q = part[0];
    float *q_lat = part[2], *k_lat = part[3];
    cuda__mla_prep_args a;
    memset(&a, 0, sizeof a);
    a.q = q, a.kv = part[1], a.norm = (const float *)m->kv_norm->data, a.q_lat = q_lat, a.k_lat = k_lat;
    a.pos = cuda__meta(cb, cb->meta.positions);
    a.n_heads = H, a.nope = m->qk_nope, a.rope = m->rope, a.kv_lora = m->kv_lora, a.eps = m->eps;
    a.rope_q = m->rope_q, a.rope_k = m->rope_k;
    a.rope_q.freq_factors = a.rope_k.freq_factors = NULL;
    cb->k.mla_prep(cb->stream, &a, T);
    cuda__mla_heads(cb, st->kb, st->kb_type, &m->k_b[0], H, T, q, hq, (int64_t)H * hq, q_lat, hl, (int64_t)H * hl);
    if (CB_CHECK_LAUNCH(cb)) return;
    cuda__f32_to_act(cb, q_lat, q_lat_act, (int64_t)n[2]);
    cuda__f32_to_act(cb, k_lat, k_lat_act, (int64_t)n[3]);
}

void cuda__op_mla_out(backend *be, const void *o_act, const be_mla *m, void *out_act)
{
    cuda_backend *cb = cuda__cb(be);
    int T = cb->meta.n_tokens, H = m->n_heads, hl = m->kv_lora + m->rope;
    const cuda__mla_layer *st = (const cuda__mla_layer *)m->extra;
    if (cuda__graph_skip(cb) || T <= 0 || cb->error || !st) return;
    const size_t n[2] = {(size_t)T * H * hl, (size_t)T * H * m->v_head};
    const void *from[2] = {o_act, NULL};
    float *part[2];
    if (cuda__f32_parts(cb, T, 2, n, from, part)) return;
    cuda__mla_heads(cb, st->vb, st->vb_type, &m->v_b[0], H, T, part[0], hl, (int64_t)H * hl, part[1], m->v_head,
                    (int64_t)H * m->v_head);
    if (CB_CHECK_LAUNCH(cb)) return;
    cuda__f32_to_act(cb, part[1], out_act, (int64_t)n[1]);
}

/* The step's key partitions (cuda__mla_splits) into a, with their partials and counters: the
 * attention scratch and counters of attn.cu, which a latent arena never plans for otherwise. The
 * bound on the keys is the padded block-table width in a step a graph replays (its splits, and so
 * its buffers, then depend on the shape alone), else the step's longest context. 0 or a negative
 * errno. */
static int cuda__mla_split(cuda_backend *cb, cuda__mla_attn_args *a)
{
    int32_t bound = cb->padded ? cb->pad_stride * cb->kv.block_size : cb->meta.max_ctx;
    a->splits = cuda__mla_splits(cb->meta.n_tokens, a->n_heads, bound, cb->n_sm, &a->part_keys);
    if (a->splits == 1) return 0;
    int rc = cuda__attn_scratch_reserve(cb, cuda__mla_part_floats(cb->meta.n_tokens, a->n_heads, a->splits, a->head_dim),
                                        (size_t)cb->meta.n_tokens * cuda__mla_chunks(a->n_heads));
    if (rc) return rc;
    a->part = cb->attn_scratch;
    a->sem = cb->attn_sem;
    return 0;
}

void cuda__mla_attention(cuda_backend *cb, int layer, const void *q_act, const be_attn *at, void *out_act)
{
    if (cuda__graph_skip(cb) || cb->meta.n_tokens <= 0 || cb->error) return;
    if (at->window > 0 || at->head_sinks || at->softcap > 0 || at->n_heads < 1) { /* not MLA's */
        cuda__fail(cb, -EINVAL);
        return;
    }
    const cuda_kv_layout *l;
    const void *kp = cuda__kv_plane(cb, layer, 0, &l);
    const cuda_meta_kv *mk = &cb->meta.kv[cb->meta.n_kv > 1 ? cb->kv_group[layer] : 0];
    const size_t n = (size_t)cb->meta.n_tokens * at->n_heads * l->head_dim;
    const size_t ns[2] = {n, n};
    const void *from[2] = {q_act, NULL};
    float *part[2];
    if (cuda__f32_parts(cb, cb->meta.n_tokens, 2, ns, from, part)) return;
    cuda__mla_attn_args a;
    memset(&a, 0, sizeof a);
    a.q = part[0], a.out = part[1];
    a.q_start = cuda__meta(cb, cb->meta.q_start);
    a.ctx_len = cuda__meta(cb, mk->ctx_len);
    a.block_table = cuda__meta(cb, mk->block_table);
    a.n_seqs = cb->meta.n_seqs, a.bt_stride = mk->bt_stride, a.block_size = l->block_size;
    a.n_heads = at->n_heads, a.head_dim = l->head_dim;
    a.tile_elems = (int32_t)cuda_kv_tile_elems(l);
    a.scale = at->scale;
    if (cuda__fail(cb, cuda__mla_split(cb, &a))) return;
    if (cuda__fail(cb, cb->k.mla_attention(cb->stream, &a, cb->kv_dtype, kp, cb->meta.n_tokens))) return;
    if (CB_CHECK_LAUNCH(cb)) return;
    cuda__f32_to_act(cb, part[1], out_act, (int64_t)n);
}
