/*
 * sample.cu — sampling on the device (cuda_backend.h): today greedy sampling, the argmax of each
 * logit row (sample_kernels.h), whose ids alone cross the bus.
 */
#include "cuda/internal.h"
#include "cuda/sample_kernels.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

static void cuda__argmax_sm80(cudaStream_t s, const float *x, int n_rows, int dim, int32_t *ids)
{
    cuda__argmax_k<<<n_rows, 1024, 0, s>>>(x, dim, ids);
}

void cuda__sample_fill_sm80(cuda__kern *k)
{
    k->argmax = cuda__argmax_sm80;
}

extern "C" int cuda_argmax_rows(backend *be, const float *x, int n_rows, int dim, int32_t *ids)
{
    cuda_backend *cb = cuda__cb(be);
    if (n_rows <= 0) return cb->error;
    int32_t *d = NULL;
    if (CB_CHECK(cb, cudaMallocAsync((void **)&d, (size_t)n_rows * sizeof(int32_t), cb->stream))) return -EIO;
    cb->k.argmax(cb->stream, x, n_rows, dim, d);
    CB_CHECK_LAUNCH(cb);
    CB_CHECK(cb, cudaMemcpyAsync(ids, d, (size_t)n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost, cb->stream));
    CB_CHECK(cb, cudaFreeAsync(d, cb->stream));
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}
