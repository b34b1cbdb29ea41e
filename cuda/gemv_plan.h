/*
 * gemv_plan.h — the launch shape of the dense matrix-vector kernels (cuda/gemv_kernels.h), in
 * host and device code alike (CUDA_HD, cuda/launch.h): the row bucket a kernel is instantiated
 * for, the outputs one warp group computes, and the split-K factor that gives every SM enough
 * warps to keep the memory busy. Plain C, so that tests/test_cuda_host.c checks it on the CPU.
 */
#ifndef KVSERVE_CUDA_GEMV_PLAN_H
#define KVSERVE_CUDA_GEMV_PLAN_H

#include <stdint.h>

#include "cuda/launch.h"

/* Threads per block: 4 warps. */
#define CUDA_GEMV_THREADS 128
/* The most activation rows one launch takes (decode of up to 8 sequences); more go to cuBLAS. */
#define CUDA_GEMV_MAX_ROWS 8
/* 16-byte weight loads each lane keeps in flight (per round of its loop). */
#define CUDA_GEMV_LOADS 8
/* Warps per SM the split-K factor aims for (memory parallelism: ~16 × 512 B × 8 loads per SM). */
#define CUDA_GEMV_WARPS_PER_SM 16

/* Outputs per warp group for a kernel of R rows (1, 2, 4, 8) and G weight rows per output (2:
 * GLU): NO × G weight rows share each activation load, 2 or 4 of them. */
#define CUDA_GEMV_OUTPUTS(R, G) ((G) == 2 ? ((R) >= 4 ? 2 : 1) : ((R) >= 4 ? 4 : 2))

/* The kernel's row count for n_rows (1 .. CUDA_GEMV_MAX_ROWS) activation rows: 1, 2, 4 or 8. */
static inline CUDA_HD int cuda_gemv_rows(int n_rows)
{
    return n_rows <= 1 ? 1 : n_rows <= 2 ? 2 : n_rows <= 4 ? 4 : 8;
}

/* 1 when rows of n_in weights of elem_bytes each are whole 16-byte chunks (the vector kernel). */
static inline CUDA_HD int cuda_gemv_vector_ok(int64_t n_in, int elem_bytes)
{
    return n_in > 0 && n_in % (16 / elem_bytes) == 0;
}

/* The launch of the vector kernel for n_out outputs (GLU: glu = 1, each a gate and an up row) of
 * n_in weights of elem_bytes, n_rows rows, on n_sm SMs: the split-K factor *ks (1, 2 or 4: the
 * smallest that reaches CUDA_GEMV_WARPS_PER_SM warps per SM, while each warp still has a full
 * round of loads per row) and the number of blocks. */
static inline CUDA_HD void cuda_gemv_plan(int64_t n_out, int64_t n_in, int glu, int n_rows, int elem_bytes, int n_sm,
                                          int *ks, int64_t *blocks)
{
    int R = cuda_gemv_rows(n_rows), G = glu ? 2 : 1;
    int no = CUDA_GEMV_OUTPUTS(R, G), nw = no * G;
    int u = CUDA_GEMV_LOADS / nw > 0 ? CUDA_GEMV_LOADS / nw : 1;
    int64_t groups = cuda_div_up(n_out, no), chunks = n_in / (16 / elem_bytes);
    int k = 1;
    while (k < 4 && groups * k < (int64_t)CUDA_GEMV_WARPS_PER_SM * n_sm && chunks >= (int64_t)64 * k * u) k *= 2;
    *ks = k;
    *blocks = cuda_div_up(groups, CUDA_GEMV_THREADS / 32 / k);
}

#endif
