/*
 * elementwise_kernels.h — the kernel of the element-wise ops (SiLU × up, GELU(tanh) × up, add,
 * scale, soft-cap) and the gated activation of a stacked gate/up product: grid-stride kernels, kept
 * apart from their launcher
 * (cuda/elementwise.cu) so that it compiles under the CPU emulation of cuda/check/emu_cuda.h too.
 * The formulas are the host's (cuda/formats.h, engine/backend.h), which the CPU tests compare
 * with the CPU backend.
 *
 * Expects the CUDA built-ins (or their emulation).
 */
#ifndef KVSERVE_CUDA_ELEMENTWISE_KERNELS_H
#define KVSERVE_CUDA_ELEMENTWISE_KERNELS_H

#include "cuda/device.h"
#include "cuda/formats.h"
#include "engine/backend.h"

/* The element-wise ops (enum cuda_ew_op, cuda/formats.h) share one grid-stride kernel: the op is
 * uniform across the grid, so the switch costs no divergence. X and Y are the element types of x
 * and y: the f32 residual stream or logits (scale, softcap, add's x) or activations (add's y,
 * silu_mul and gelu_mul); the arithmetic is f32. */
template <typename X, typename Y>
static __global__ void cuda__ew_k(int op, X *x, const Y *y, float s, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = cuda__ld(x[i]);
        switch (op) {
        case CUDA_EW_SILU_MUL: v = cuda_silu_mul(v, cuda__ld(y[i])); break;
        case CUDA_EW_GELU_MUL: v = be_gelu_tanh(v) * cuda__ld(y[i]); break;
        case CUDA_EW_ADD: v += cuda__ld(y[i]); break;
        case CUDA_EW_SCALE: v *= s; break;
        default: v = be_softcap(v, s); break;
        }
        x[i] = cuda__st<X>(v);
    }
}

/* out[r][j] = act(g[r][j] + bg[j]) × (u[r][j] + bu[j]) for n = n_rows × n_ff elements, act SiLU or
 * GELU(tanh) (gelu); g and u rows are ld elements apart (the halves of a stacked gate/up product,
 * or two products), the biases NULL when absent. */
template <typename A>
static __global__ void cuda__glu_k(const A *g, const A *u, int64_t ld, int64_t n_ff, int64_t n, const float *bg,
                                   const float *bu, int gelu, A *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / n_ff, j = i % n_ff;
        float gv = cuda__ld(g[r * ld + j]) + (bg ? bg[j] : 0.0f), uv = cuda__ld(u[r * ld + j]) + (bu ? bu[j] : 0.0f);
        out[i] = cuda__st<A>(gelu ? be_gelu_tanh(gv) * uv : cuda_silu_mul(gv, uv));
    }
}

#endif
