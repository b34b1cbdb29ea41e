/*
 * absent.c — the CUDA backend's entry points that the wiring calls, in a build without it (no nvcc
 * at build time, or CUDA=0): they say so plainly, so that --device cuda, the tests and the wiring
 * link and report the reason instead of failing to link. (The per-backend settings below are
 * only ever called with a CUDA backend, which such a build never creates.) The Makefile compiles this file only when the backend
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

backend *cuda_backend_create_act(int device_index, int act_type, char *err, size_t err_len)
{
    (void)act_type;
    return cuda_backend_create(device_index, err, err_len);
}

void cuda_set_graphs(backend *be, int on)
{
    (void)be, (void)on;
}

double cuda_copy_gbps(backend *be)
{
    (void)be;
    return 0.0;
}
