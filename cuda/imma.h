/*
 * imma.h — the integer tensor-core instructions the quantised-weight kernels use, as device
 * functions: mma.sync m16n8k32 and m16n8k16 with s8 × s8 → s32 accumulation (sm_80 and newer).
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32" and "… m16n8k16 with integer type"),
 * lane = 4 g + t (g = groupID, t = threadID_in_group), four bytes per register, the lowest
 * element in the lowest byte:
 *   m16n8k32  A a[0] row g, k 4t..4t+3   a[1] row g+8, k 4t..   a[2] row g, k 16+4t..   a[3] row g+8, k 16+4t..
 *             B b[0] col g, k 4t..4t+3   b[1] col g, k 16+4t..
 *   m16n8k16  A a[0] row g, k 4t..4t+3   a[1] row g+8, k 4t..   B b col g, k 4t..4t+3
 *   C, D      c[0], c[1] row g, cols 2t, 2t+1; c[2], c[3] row g+8, cols 2t, 2t+1
 * The accumulation wraps modulo 2^32 (no .satfinite); the kernels keep every sum in range.
 *
 * Under nvcc's device passes these are inline PTX; a plain C++ build (the CPU emulation of
 * cuda/check/emu_cuda.h) gets the emulation's model of the same per-lane layouts
 * (cuda/check/emu_int.h), so that the kernels that call them run there unchanged.
 */
#ifndef KVSERVE_CUDA_IMMA_H
#define KVSERVE_CUDA_IMMA_H

#include <stdint.h>

#include "cuda/formats.h"

/* c += A · B over k = 32 (one 16 × 8 tile). */
static __device__ __forceinline__ void cuda__mma_s8_16832(int c[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif !defined(__CUDACC__)
    emu_mma_s8_16832(c, a, b);
#endif
}

/* c += A · B over k = 16. */
static __device__ __forceinline__ void cuda__mma_s8_16816(int c[4], const uint32_t a[2], uint32_t b)
{
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
#elif !defined(__CUDACC__)
    emu_mma_s8_16816(c, a, b);
#endif
}

/* An int of magnitude below 2^22 as f32, exactly, with an integer and a float add (full-rate
 * units) instead of the quarter-rate conversion: the int lands in the mantissa of 1.5 · 2^23. */
static __device__ __forceinline__ float cuda__i2f_small(int i)
{
    return cuda_bits_f32((uint32_t)(i + 0x4B400000)) - 12582912.0f;
}

#endif
