/*
 * elementwise_kernels.h — the kernel of the element-wise ops (SiLU × up, GELU(tanh) × up, add,
 * scale, soft-cap): one grid-stride kernel for all of them, kept apart from its launcher
 * (cuda/elementwise.cu) so that it compiles under the CPU emulation of cuda/check/emu_cuda.h too.
 * The formulas are the host's (cuda/formats.h, engine/backend.h), which the CPU tests compare
 * with the CPU backend.
 *
 * Expects the CUDA built-ins (or their emulation).
 */
#ifndef KVSERVE_CUDA_ELEMENTWISE_KERNELS_H
#define KVSERVE_CUDA_ELEMENTWISE_KERNELS_H

#include "cuda/formats.h"
#include "engine/backend.h"

/* The element-wise ops (enum cuda_ew_op, cuda/formats.h) share one grid-stride kernel: the op is
 * uniform across the grid, so the switch costs no divergence. */
static __global__ void cuda__ew_k(int op, float *x, const float *y, float s, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        switch (op) {
        case CUDA_EW_SILU_MUL: x[i] = cuda_silu_mul(x[i], y[i]); break;
        case CUDA_EW_GELU_MUL: x[i] = be_gelu_tanh(x[i]) * y[i]; break;
        case CUDA_EW_ADD: x[i] += y[i]; break;
        case CUDA_EW_SCALE: x[i] *= s; break;
        default: x[i] = be_softcap(x[i], s); break;
        }
    }
}

#endif
