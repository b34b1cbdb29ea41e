/*
 * qact_kernels.h — the activation quantiser of the integer quantised-weight kernels: rows of
 * activations (f32, bf16 or f16) into 8-bit blocks with an f32 scale each (cuda/quant_int.h), once
 * per matmul input, before the matrix-vector (mmvq) or GEMM (mmq) kernels read them.
 *
 * One warp quantises a span of 256 values of a row: lane l = 4c + t takes chunk c of the span
 * and, in it, values 4t..4t+3 and 16+4t..16+4t+3, which it writes as the eight contiguous bytes
 * 8t..8t+7 of the chunk's permuted block (cuda_qa_pos). The block maximum is a shuffle reduction
 * over the lanes of the block: the four lanes of a chunk for blocks of 32, the whole warp for
 * blocks of 256. Kept apart from its launcher (cuda/qmatvec.cu) so that the same source runs
 * under the CPU emulation (cuda/check/quant_emu.cc).
 */
#ifndef KVSERVE_CUDA_QACT_KERNELS_H
#define KVSERVE_CUDA_QACT_KERNELS_H

#include "cuda/launch.h"
#include "cuda/qmma.h"

#define CUDA_QACT_THREADS 256

/* xq [n_rows][n_in] (permuted blocks of 32) and xd [n_rows][n_in / qa] = the rows of x
 * [n_rows][n_in] quantised in blocks of qa (32 or 256; n_in a multiple of qa). One warp per
 * (row, span of 256). */
template <typename A>
static __global__ void __launch_bounds__(CUDA_QACT_THREADS)
    cuda__qact_k(const A *x, int64_t n_in, int n_rows, int qa, int8_t *xq, float *xd)
{
    const int64_t spans = (n_in + 255) / 256;
    const int64_t w = ((int64_t)blockIdx.x * CUDA_QACT_THREADS + threadIdx.x) >> 5;
    if (w >= (int64_t)n_rows * spans) return; /* the whole warp */
    const int lane = threadIdx.x & 31, t = lane & 3;
    const int64_t r = w / spans, i0 = (w % spans) * 256 + (lane >> 2) * 32; /* this lane's chunk */
    const int on = i0 < n_in; /* a row of blocks of 32 may end inside its last span */
    float v[8];
    const A *src = x + r * n_in + i0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[k] = on ? cuda__qa_in(src[4 * t + k]) : 0.0f;
        v[4 + k] = on ? cuda__qa_in(src[16 + 4 * t + k]) : 0.0f;
    }
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
    const int lanes = qa == 32 ? 4 : 32;
    for (int o = 1; o < lanes; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    uint32_t q[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; k++) q[k / 4] |= ((uint32_t)(int)rintf(v[k] * id) & 0xFFu) << 8 * (k % 4);
    if (!on) return;
    uint32_t *dst = (uint32_t *)(xq + r * n_in + i0 + 8 * t);
    dst[0] = q[0];
    dst[1] = q[1];
    if (qa == 32 && t == 0) xd[r * (n_in / 32) + i0 / 32] = d;
    if (qa == 256 && lane == 0) xd[r * (n_in / 256) + i0 / 256] = d;
}

#endif
