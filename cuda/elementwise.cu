/*
 * elementwise.cu — the element-wise ops of engine/backend.h (silu_mul, gelu_mul, scale, softcap,
 * add): one grid-stride kernel (elementwise_kernels.h) whose op is uniform across the grid,
 * reached through the kernel table (kern.h).
 */
#include "cuda/internal.h"
#include "cuda/elementwise_kernels.h"

static void cuda__ew_sm80(cudaStream_t st, int op, float *x, const float *y, float s, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__ew_k<<<g, CUDA_EW_THREADS, 0, st>>>(op, x, y, s, n);
}

void cuda__elementwise_fill_sm80(cuda__kern *k)
{
    k->ew = cuda__ew_sm80;
}

/* x[i] = op(x[i], y[i] or s) for n elements. */
static void cuda__ew(backend *be, int op, float *x, const float *y, float s, int64_t n)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n <= 0) return;
    cb->k.ew(cb->stream, op, x, y, s, n);
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_silu_mul(backend *be, float *gate, const float *up, int64_t n)
{
    cuda__ew(be, CUDA_EW_SILU_MUL, gate, up, 0.0f, n);
}

void cuda__op_gelu_mul(backend *be, float *gate, const float *up, int64_t n)
{
    cuda__ew(be, CUDA_EW_GELU_MUL, gate, up, 0.0f, n);
}

void cuda__op_scale(backend *be, float *x, float s, int64_t n)
{
    cuda__ew(be, CUDA_EW_SCALE, x, NULL, s, n);
}

void cuda__op_softcap(backend *be, float *x, float cap, int64_t n)
{
    cuda__ew(be, CUDA_EW_SOFTCAP, x, NULL, cap, n);
}

void cuda__op_add(backend *be, float *x, const float *y, int64_t n)
{
    cuda__ew(be, CUDA_EW_ADD, x, y, 0.0f, n);
}
