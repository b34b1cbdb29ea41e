/*
 * moe_plan.h — the launch shapes and arguments of the grouped projections of cuda/moe_kernels.h
 * (the mixture-of-experts FFN, and MLA's per-head projections), for the kernel table (kern.h),
 * the launchers and the emulation. Host and device code alike; nothing here touches the runtime.
 */
#ifndef KVSERVE_CUDA_MOE_PLAN_H
#define KVSERVE_CUDA_MOE_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* Threads of the grouped matvec's block: 4 warps, one output each. */
#define CUDA_MOE_THREADS 128
/* Rows one pass of a warp over its weight row serves. */
#define CUDA_MOE_ROWS 8
/* Largest expert count the routing block handles (llama.cpp's bound). */
#define CUDA_MOE_MAX_EXPERTS 1024

/* One grouped projection: group e multiplies its rows of x by matrix w[e] (n_in → n_out, type
 * `type`, rows row_bytes apart) into out. Group e's rows are [start[e], start[e + 1]) when start is
 * set (MoE: rows grouped by expert), else [0, n_rows) for every group (MLA: every token for each
 * head). Row r of group e reads x + e·x_goff + r·x_stride and writes out + e·o_goff + r·o_stride. */
typedef struct cuda__moe_proj {
    const void *const *w;   /* [n_groups] device pointers to the matrices */
    const float *const *b;  /* [n_groups] biases [n_out], or NULL for none */
    const int32_t *start;   /* [n_groups + 1] or NULL */
    int n_groups, n_rows;
    int64_t n_in, n_out;
    size_t row_bytes;
    int64_t x_goff, x_stride, o_goff, o_stride;
} cuda__moe_proj;

/* One grouped projection of quantised experts on the integer path (cuda__moe_mmvq_k): group e's
 * rows [start[e], start[e + 1]) of the activations (start [2 · n_groups + 2]: then the number of
 * groups with rows and their ids, as cuda__moe_scan_k writes them), quantised once for all groups as xq
 * [n_rows][n_in] / xd [n_rows][n_in / block] (cuda/qact_kernels.h's layout), times w[e] into out
 * [n_rows][n_out] (f32, + b[e]). With a split over the input dimension (gridDim.z > 1, allowed
 * only when no group has more than CUDA_QGEMV_MAX_ROWS rows), part holds split × n_rows × n_out
 * floats and ticket [slots][⌈n_out / 16⌉] zeroed counters (left zeroed). */
typedef struct cuda__moe_qproj {
    const void *const *w;  /* [n_groups] device pointers to the matrices */
    const float *const *b; /* [n_groups] biases [n_out], or NULL for none */
    const int32_t *start;  /* [2 · n_groups + 2] */
    int n_groups, n_rows;
    int64_t n_in, n_out;
    size_t row_bytes;
    const int8_t *xq;
    const float *xd;
    float *out;
    float *part;
    unsigned *ticket;
} cuda__moe_qproj;

#endif
