/*
 * formats.h — element formats the CUDA backend converts between, in host and device code alike
 * (CUDA_HD, launch.h): f32 bits, bf16 and f16 (exact decoding, round-to-nearest-even encoding),
 * the elements of a Q8_0 row; and the element formulas whose host copies the CPU tests compare
 * with the CPU backend: SiLU × up and the pair layout of RoPE (with the list of the element-wise
 * kernel's ops).
 *
 * Callers: the kernel headers (cuda/NAME_kernels.h), the launchers, cuda/kv_layout.h,
 * cuda/quant_formats.h, tests/test_cuda_host.c and the emulation programs of cuda/check/.
 */
#ifndef KVSERVE_CUDA_FORMATS_H
#define KVSERVE_CUDA_FORMATS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/launch.h"

/* ---- scalar formats ---------------------------------------------------------------------- */

static inline CUDA_HD uint32_t cuda_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

static inline CUDA_HD float cuda_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

static inline CUDA_HD float cuda_bf16_to_f32(uint16_t h)
{
    return cuda_bits_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
static inline CUDA_HD uint16_t cuda_f32_to_bf16(float f)
{
    uint32_t x = cuda_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* Exact, subnormals included. */
static inline CUDA_HD float cuda_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: mant × 2^-24, exact in f32 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return cuda_bits_f32(sign | 0x7f800000u | (mant << 13));
    return cuda_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Round to nearest even, overflow to infinity, subnormals rounded. */
static inline CUDA_HD uint16_t cuda_f32_to_f16(float f)
{
    uint32_t x = cuda_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* f16 subnormal range: round |f| / 2^-24 to an integer, ties to even */
        float q = cuda_bits_f32(a) * 16777216.0f; /* exact: scaling by a power of two */
        uint32_t n = (uint32_t)q;
        float rem = q - (float)n;
        if (rem > 0.5f || (rem == 0.5f && (n & 1u))) n++;
        return (uint16_t)(sign | n);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* Element i of a Q8_0 row (blocks of {f16 scale, int8 q[32]}, 34 bytes): scale × q. The product
 * is formed in f32, where it is exact (11-bit × 8-bit significands). */
static inline CUDA_HD float cuda_q8_0_value(const uint8_t *row, int64_t i)
{
    const uint8_t *blk = row + (i / 32) * 34;
    uint16_t d = (uint16_t)(blk[0] | (blk[1] << 8));
    int8_t q = (int8_t)blk[2 + i % 32];
    return cuda_f16_to_f32(d) * (float)q;
}

/* ---- element formulas -------------------------------------------------------------------- */

/* The element-wise ops of one kernel (cuda/elementwise_kernels.h). */
enum cuda_ew_op { CUDA_EW_SILU_MUL, CUDA_EW_GELU_MUL, CUDA_EW_ADD, CUDA_EW_SCALE, CUDA_EW_SOFTCAP };

/* SiLU(g) × u, as the CPU reference computes it. */
static inline CUDA_HD float cuda_silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

/* The two dimensions of rotation pair i: adjacent (2i, 2i+1) for llama GGUFs, halves
 * (i, i + rope_dims/2) for NEOX (qwen2). */
static inline CUDA_HD void cuda_rope_pair(int neox, int rope_dims, int i, int *a, int *b)
{
    if (neox) {
        *a = i;
        *b = i + rope_dims / 2;
    } else {
        *a = 2 * i;
        *b = 2 * i + 1;
    }
}

#endif
