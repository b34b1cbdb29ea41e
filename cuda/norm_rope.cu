/*
 * norm_rope.cu — RMSNorm (its fused residual add and gathered rows serve fused.cu) and RoPE
 * (rotation of a step's Q or K rows at their positions, and the rotation of queries by their
 * sequence's sink shift). The kernels are in norm_rope_kernels.h and reached through the kernel
 * table (kern.h); every launch is on the backend's stream and is checked.
 */
#include "cuda/internal.h"
#include "cuda/norm_rope_kernels.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* ---- the sm_80 kernels' launchers ---------------------------------------------------------- */

template <typename X, typename A>
static void cuda__rmsnorm_launch(cudaStream_t s, X *x, const A *res, const int32_t *rows, int write_back,
                                 const float *w, float eps, int n_rows, int dim, A *out)
{
    cuda__rmsnorm_k<<<n_rows, CUDA_NORM_THREADS, 0, s>>>(x, res, rows, write_back, w, eps, dim, out);
}

static void cuda__rmsnorm_sm80(cudaStream_t s, int act, int x_f32, void *x, const void *res, const int32_t *rows,
                               int write_back, const float *w, float eps, int n_rows, int dim, void *out)
{
    if (act == DT_F32)
        cuda__rmsnorm_launch(s, (float *)x, (const float *)res, rows, write_back, w, eps, n_rows, dim, (float *)out);
    else if (x_f32)
        cuda__rmsnorm_launch(s, (float *)x, (const __nv_bfloat16 *)res, rows, write_back, w, eps, n_rows, dim,
                             (__nv_bfloat16 *)out);
    else
        cuda__rmsnorm_launch(s, (__nv_bfloat16 *)x, (const __nv_bfloat16 *)res, rows, write_back, w, eps, n_rows, dim,
                             (__nv_bfloat16 *)out);
}

static void cuda__rope_sm80(cudaStream_t s, int act, void *x, const int32_t *pos, int n_tokens, const be_rope *r,
                            const float *ff)
{
    if (act == DT_BF16) cuda__rope_k<<<n_tokens, 128, 0, s>>>((__nv_bfloat16 *)x, pos, *r, ff);
    else cuda__rope_k<<<n_tokens, 128, 0, s>>>((float *)x, pos, *r, ff);
}

static void cuda__rope_shift_sm80(cudaStream_t s, int act, const void *x, void *out, int n_tokens,
                                  const int32_t *q_start, int n_seqs, const int32_t *sinks, const int32_t *shift,
                                  const be_rope *r, const float *ff)
{
    if (act == DT_BF16)
        cuda__rope_shift_k<<<n_tokens, 128, 0, s>>>((const __nv_bfloat16 *)x, (__nv_bfloat16 *)out, q_start, n_seqs,
                                                    sinks, shift, *r, ff);
    else
        cuda__rope_shift_k<<<n_tokens, 128, 0, s>>>((const float *)x, (float *)out, q_start, n_seqs, sinks, shift, *r,
                                                    ff);
}

void cuda__norm_rope_fill_sm80(cuda__kern *k)
{
    k->rmsnorm = cuda__rmsnorm_sm80;
    k->rope = cuda__rope_sm80;
    k->rope_shift = cuda__rope_shift_sm80;
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

/* The op: activations in, activations out (in place allowed). */
void cuda__op_rmsnorm(backend *be, const void *x, const be_weight *w, float eps, int n_rows, int dim, void *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0) return;
    cb->k.rmsnorm(cb->stream, cb->act, 0, (void *)x, NULL, NULL, 0, (const float *)w->data, eps, n_rows, dim, out);
    CB_CHECK_LAUNCH(cb);
}

extern "C" void cuda_add_rmsnorm(backend *be, float *x, const void *y, const be_weight *w, float eps, int n_rows,
                                 int dim, void *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (n_rows <= 0) return;
    cb->k.rmsnorm(cb->stream, cb->act, 1, x, y, NULL, 1, (const float *)w->data, eps, n_rows, dim, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- RoPE -------------------------------------------------------------------------------- */

void cuda__op_rope(backend *be, void *x, const be_rope *r)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    be_rope rv = *r;
    rv.freq_factors = NULL; /* a host pointer: the kernel gets the factors' device data instead */
    cb->k.rope(cb->stream, cb->act, x, cuda__meta(cb, cb->meta.positions), n, &rv, cuda__rope_ff(r));
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_rope_shift(backend *be, const void *x, void *out, const be_rope *r, int group)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    const cuda_meta_kv *mk = &cb->meta.kv[cb->meta.n_kv > 1 ? group : 0];
    be_rope rv = *r;
    rv.freq_factors = NULL;
    rv.mscale = 1.0f; /* the queries are scaled already */
    const int32_t *sinks = mk->sinks >= 0 ? cuda__meta(cb, mk->sinks) : NULL;
    const int32_t *shift = mk->sinks >= 0 ? cuda__meta(cb, mk->sink_shift) : NULL;
    cb->k.rope_shift(cb->stream, cb->act, x, out, n, cuda__meta(cb, cb->meta.q_start), cb->meta.n_seqs, sinks, shift,
                     &rv, cuda__rope_ff(r));
    CB_CHECK_LAUNCH(cb);
}
