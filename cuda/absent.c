/*
 * absent.c — the CUDA backend's two entry points in a build without it (no nvcc at build time, or
 * CUDA=0): they say so plainly, so that --device cuda, the tests and the wiring link and report
 * the reason instead of failing to link. The Makefile compiles this file only when the backend
 * itself (the .cu files of cuda/) is not built.
 */
#include <stdio.h>

#include "cuda/cuda_backend.h"

backend *cuda_backend_create(int device_index, char *err, size_t err_len)
{
    (void)device_index;
    snprintf(err, err_len, "CUDA: this kvserve was built without the CUDA backend (no nvcc at build time, or CUDA=0)");
    return NULL;
}

int cuda_is_available(char *why, size_t why_len)
{
    snprintf(why, why_len, "CUDA: this kvserve was built without the CUDA backend");
    return 0;
}
