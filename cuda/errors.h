/*
 * errors.h — checking every CUDA runtime and cuBLAS call (CUDA C++ only).
 *
 *   if (CUDA_CHECK(cudaMalloc(&p, n))) return -ENOMEM;
 *
 * CUDA_CHECK / CUBLAS_CHECK evaluate the call once; on failure they print one line naming the
 * call, the error and file:line to stderr and yield -EIO, else 0. CUDA_CHECK_LAUNCH() checks the
 * last kernel launch the same way. Callers decide what a failure means (the backend records it
 * and reports -EIO from sync/to_host; see cuda/internal.h). Named errors.h so that it is not
 * mistaken for part of cuda/check/, the check programs.
 */
#ifndef KVSERVE_CUDA_ERRORS_H
#define KVSERVE_CUDA_ERRORS_H

#include <errno.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda/cublas_dl.h"

static inline int cuda__check_rt(cudaError_t e, const char *expr, const char *file, int line)
{
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "kvserve: CUDA error %d (%s: %s) in %s at %s:%d\n", (int)e, cudaGetErrorName(e),
            cudaGetErrorString(e), expr, file, line);
    return -EIO;
}

static inline int cuda__check_blas(cublasStatus_t s, const char *expr, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    fprintf(stderr, "kvserve: cuBLAS error %d (%s) in %s at %s:%d\n", (int)s, cuda_blas_status_string(s),
            expr, file, line);
    return -EIO;
}

#define CUDA_CHECK(call) cuda__check_rt((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) cuda__check_blas((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH() cuda__check_rt(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

#endif
