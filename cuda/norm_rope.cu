/*
 * norm_rope.cu — RMSNorm (and the fused residual add + RMSNorm of cuda_add_rmsnorm) and RoPE
 * (rotation of a step's Q or K rows at their positions, and the rotation of queries by their
 * sequence's sink shift). The kernels are in norm_rope_kernels.h; every launch is on the
 * backend's stream and is checked.
 */
#include "cuda/internal.h"
#include "cuda/norm_rope_kernels.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

void cuda__op_rmsnorm(backend *be, const float *x, const be_weight *w, float eps, int n_rows, int dim,
                      float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0) return;
    cuda__rmsnorm_k<<<n_rows, CUDA_EW_THREADS, 0, cb->stream>>>((float *)x, NULL, (const float *)w->data, eps,
                                                                  dim, out);
    CB_CHECK_LAUNCH(cb);
}

extern "C" void cuda_add_rmsnorm(backend *be, float *x, const float *y, const be_weight *w, float eps, int n_rows,
                                 int dim, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (n_rows <= 0) return;
    cuda__rmsnorm_k<<<n_rows, CUDA_EW_THREADS, 0, cb->stream>>>(x, y, (const float *)w->data, eps, dim, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- RoPE -------------------------------------------------------------------------------- */

void cuda__op_rope(backend *be, float *x, const be_rope *r)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    be_rope rv = *r;
    rv.freq_factors = NULL; /* a host pointer: the kernel gets the factors' device data instead */
    cuda__rope_k<<<n, 128, 0, cb->stream>>>(x, cuda__meta(cb, cb->meta.positions), rv, cuda__rope_ff(r));
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_rope_shift(backend *be, const float *x, float *out, const be_rope *r, int group)
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
    cuda__rope_shift_k<<<n, 128, 0, cb->stream>>>(x, out, cuda__meta(cb, cb->meta.q_start), cb->meta.n_seqs, sinks,
                                                  shift, rv, cuda__rope_ff(r));
    CB_CHECK_LAUNCH(cb);
}
