/*
 * elementwise.cu — the element-wise ops of engine/backend.h (silu_mul, gelu_mul, scale, softcap,
 * add): one grid-stride kernel (elementwise_kernels.h) whose op is uniform across the grid, on
 * the f32 residual stream or the activations; and the gated activation of a gate/up product (the
 * fused glu op's path for more rows than its matrix-vector kernel takes). Reached through the
 * kernel table (kern.h).
 */
#include "cuda/internal.h"
#include "cuda/elementwise_kernels.h"

template <typename X, typename Y>
static void cuda__ew_launch(cudaStream_t st, int op, X *x, const Y *y, float s, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__ew_k<<<g, CUDA_EW_THREADS, 0, st>>>(op, x, y, s, n);
}

/* The types the ops take: f32 x (residual, logits) with f32 or bf16 y, or bf16 x and y. */
static void cuda__ew_sm80(cudaStream_t st, int op, int x_type, void *x, int y_type, const void *y, float s, int64_t n)
{
    if (x_type == DT_BF16)
        cuda__ew_launch(st, op, (__nv_bfloat16 *)x, (const __nv_bfloat16 *)y, s, n);
    else if (y_type == DT_BF16)
        cuda__ew_launch(st, op, (float *)x, (const __nv_bfloat16 *)y, s, n);
    else
        cuda__ew_launch(st, op, (float *)x, (const float *)y, s, n);
}

static void cuda__glu_sm80(cudaStream_t st, int act, const void *g, const void *u, int64_t ld, int64_t n_ff,
                           int64_t n_rows, const float *bg, const float *bu, int gelu, void *out)
{
    int64_t n = n_rows * n_ff;
    unsigned gr = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    if (act == DT_BF16)
        cuda__glu_k<<<gr, CUDA_EW_THREADS, 0, st>>>((const __nv_bfloat16 *)g, (const __nv_bfloat16 *)u, ld, n_ff, n,
                                                    bg, bu, gelu, (__nv_bfloat16 *)out);
    else
        cuda__glu_k<<<gr, CUDA_EW_THREADS, 0, st>>>((const float *)g, (const float *)u, ld, n_ff, n, bg, bu, gelu,
                                                    (float *)out);
}

void cuda__elementwise_fill_sm80(cuda__kern *k)
{
    k->ew = cuda__ew_sm80;
    k->glu = cuda__glu_sm80;
}

/* x[i] = op(x[i], y[i] or s) for n elements. */
static void cuda__ew(backend *be, int op, int x_type, void *x, const void *y, float s, int64_t n)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n <= 0) return;
    cb->k.ew(cb->stream, op, x_type, x, cb->act, y, s, n);
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_silu_mul(backend *be, void *gate, const void *up, int64_t n)
{
    cuda__ew(be, CUDA_EW_SILU_MUL, cuda__cb(be)->act, gate, up, 0.0f, n);
}

void cuda__op_gelu_mul(backend *be, void *gate, const void *up, int64_t n)
{
    cuda__ew(be, CUDA_EW_GELU_MUL, cuda__cb(be)->act, gate, up, 0.0f, n);
}

void cuda__op_scale(backend *be, float *x, float s, int64_t n)
{
    cuda__ew(be, CUDA_EW_SCALE, DT_F32, x, NULL, s, n);
}

void cuda__op_softcap(backend *be, float *x, float cap, int64_t n)
{
    cuda__ew(be, CUDA_EW_SOFTCAP, DT_F32, x, NULL, cap, n);
}

void cuda__op_add(backend *be, float *x, const void *y, int64_t n)
{
    cuda__ew(be, CUDA_EW_ADD, DT_F32, x, y, 0.0f, n);
}
