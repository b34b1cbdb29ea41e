/*
 * kv.cu — the KV arena of the CUDA backend and the ops that write and copy it.
 *
 *   kv_init                   one zeroed allocation per layer group, in the layout of
 *                             cuda/kv_layout.h ([its layers][2][n_blocks][n_kv_heads][tile])
 *   kv_copy_block             a block copied within its group (the partial block of n > 1 forks)
 *   kv_block_out / _in        a block copied to / from host memory for the second KV tier
 *   store_kv                  the step's K and V rows written at their slots (kv_kernels.h,
 *                             through the kernel table);
 *                             cuda_rope_store_kv fuses RoPE on K into the same kernel
 *   cuda_kv_read              one slot read back as f32 (tests)
 *
 * The ops are queued on the backend's stream, in order with the steps around them;
 * cuda_kv_read waits for it.
 */
#include <string.h>

#include "cuda/internal.h"
#include "cuda/kv_kernels.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* ---- the arena ----------------------------------------------------------------------------- */

/* Frees every group's arena (cudaFree waits for work that uses it). */
static void cuda__kv_free(cuda_backend *cb)
{
    for (int k = 0; k < KV_MAX_GROUPS; k++) {
        if (cb->kv_arena[k]) CB_CHECK(cb, cudaFree(cb->kv_arena[k]));
        cb->kv_arena[k] = NULL;
    }
}

/* One zeroed allocation per layer group. All or nothing: on failure the previous arena stays. */
int cuda__op_kv_init(backend *be, const kv_geom *g, const int32_t *n_blocks)
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
    cuda__attn_choose(cb);
    return 0;
}

void cuda__op_kv_copy_block(backend *be, int group, int32_t src, int32_t dst)
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

int cuda__op_kv_block_out(backend *be, int group, int32_t block, void *dst)
{
    return cuda__kv_block_copy(cuda__cb(be), group, block, (char *)dst, 1);
}

int cuda__op_kv_block_in(backend *be, int group, int32_t block, const void *src)
{
    return cuda__kv_block_copy(cuda__cb(be), group, block, (char *)src, 0);
}

/* ---- the K/V store ------------------------------------------------------------------------- */

template <typename A>
static void cuda__store_kv_act(cudaStream_t s, int kv_dtype, A *k, const A *v, void *kb, void *vb,
                               const int32_t *slots, const int32_t *pos, int n, const cuda_kv_layout *l,
                               const be_rope &r, const float *ff)
{
    if (kv_dtype == KV_F32)
        cuda__store_kv_k<<<n, 128, 0, s>>>(k, v, (float *)kb, (float *)vb, slots, pos, *l, r, ff);
    else if (kv_dtype == KV_I8)
        cuda__store_kv_q_k<<<n, 128, 0, s>>>(k, v, (int8_t *)kb, (int8_t *)vb, slots, pos, *l, r, ff);
    else if (kv_dtype == KV_FP8)
        cuda__store_kv_q_k<<<n, 128, 0, s>>>(k, v, (uint8_t *)kb, (uint8_t *)vb, slots, pos, *l, r, ff);
    else if (kv_dtype == KV_BF16)
        cuda__store_kv_k<<<n, 128, 0, s>>>(k, v, (__nv_bfloat16 *)kb, (__nv_bfloat16 *)vb, slots, pos, *l, r, ff);
    else
        cuda__store_kv_k<<<n, 128, 0, s>>>(k, v, (__half *)kb, (__half *)vb, slots, pos, *l, r, ff);
}

static void cuda__store_kv_sm80(cudaStream_t s, int kv_dtype, int act, void *k, const void *v, void *kb, void *vb,
                                const int32_t *slots, const int32_t *pos, int n, const cuda_kv_layout *l,
                                const be_rope *rp, const float *ff)
{
    if (act == DT_BF16)
        cuda__store_kv_act(s, kv_dtype, (__nv_bfloat16 *)k, (const __nv_bfloat16 *)v, kb, vb, slots, pos, n, l, *rp, ff);
    else
        cuda__store_kv_act(s, kv_dtype, (float *)k, (const float *)v, kb, vb, slots, pos, n, l, *rp, ff);
}

void cuda__kv_fill_sm80(cuda__kern *k)
{
    k->store_kv = cuda__store_kv_sm80;
}

void cuda__kv_target(cuda_backend *cb, int layer, void **kp, void **vp, const cuda_kv_layout **l,
                     const int32_t **slots, const int32_t **pos)
{
    const cuda_kv_layout *lay;
    *kp = cuda__kv_plane(cb, layer, 0, &lay);
    *vp = cuda__kv_plane(cb, layer, 1, &lay);
    if (l) *l = lay;
    const cuda_meta_kv *mk = &cb->meta.kv[cb->meta.n_kv > 1 ? cb->kv_group[layer] : 0];
    *slots = cuda__meta(cb, mk->slots);
    *pos = cuda__meta(cb, cb->meta.positions);
}

/* Writes the step's k and v rows (activations) of one layer at their slots; with rope, k is
 * rotated first. */
static void cuda__store_kv(cuda_backend *cb, int layer, void *k, const void *v, const be_rope *rope)
{
    be_rope r;
    memset(&r, 0, sizeof r); /* rope_dims 0: no rotation */
    if (rope) {
        r = *rope;
        r.n_heads = cb->kv.n_kv_heads;
        r.head_dim = cb->kv.head_dim;
        r.freq_factors = NULL;
    }
    const float *ff = rope ? cuda__rope_ff(rope) : NULL;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    const cuda_kv_layout *l;
    void *kb, *vb;
    const int32_t *slots, *pos;
    cuda__kv_target(cb, layer, &kb, &vb, &l, &slots, &pos);
    cb->k.store_kv(cb->stream, cb->kv_dtype, cb->act, k, v, kb, vb, slots, pos, n, l, &r, ff);
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_store_kv(backend *be, int layer, const void *k, const void *v)
{
    if (cuda__graph_skip(cuda__cb(be))) return;
    cuda__store_kv(cuda__cb(be), layer, (void *)k, v, NULL);
}

extern "C" void cuda_rope_store_kv(backend *be, int layer, void *k, const void *v, const be_rope *r)
{
    cuda__store_kv(cuda__cb(be), layer, k, v, r);
}

/* ---- reads (cuda_backend.h) ---------------------------------------------------------------- */

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
