/*
 * launch.h — launch geometry shared by the CUDA backend's kernel families, and CUDA_HD, the mark
 * of the functions that host and device code share.
 *
 * A CUDA_HD function is static inline and marked __host__ __device__ under nvcc, nothing under a
 * C or plain C++ compiler: the same definition runs in the kernels, in the CPU unit tests
 * (tests/test_cuda_host.c, on every build whether or not CUDA is built) and under the CPU
 * emulation of cuda/check/. The headers built this way, one concept each:
 *
 *   launch.h         grid sizes (this file)
 *   formats.h        f16 / bf16 bits and f32, Q8_0 elements, the element formulas (SiLU,
 *                    RoPE pairs, the element-wise ops)
 *   quant_formats.h  decoding the quantised weight blocks
 *   kv_layout.h      the paged KV arena: tiles, planes, slots, quantised rows' scales
 *   meta.h           the step's batch metadata packed into one int32 buffer
 *   attn_plan.h      attention's work list, split-K factor and the merge of split partials
 *
 * Nothing in them touches the CUDA runtime.
 */
#ifndef KVSERVE_CUDA_LAUNCH_H
#define KVSERVE_CUDA_LAUNCH_H

#include <stdint.h>

#ifdef __CUDACC__
#define CUDA_HD __host__ __device__
#else
#define CUDA_HD
#endif

/* Threads per block and the most blocks of the grid-stride (element-wise) launches. */
#define CUDA_EW_THREADS 256
#define CUDA_EW_MAX_BLOCKS 65535u

static inline CUDA_HD int64_t cuda_div_up(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Blocks for a grid-stride loop over n elements with `threads` per block, at most max_blocks
 * (and at least 1, so a launch over zero elements is still valid and does nothing). */
static inline CUDA_HD unsigned cuda_grid_1d(int64_t n, int threads, unsigned max_blocks)
{
    int64_t b = cuda_div_up(n, threads);
    if (b < 1) b = 1;
    if (b > (int64_t)max_blocks) b = max_blocks;
    return (unsigned)b;
}

#endif
