/*
 * simd_neon.h — small Advanced SIMD helpers shared by the aarch64 kernel files of cpu/
 * (*_neon.c, *_dotprod.c). Only those files may include it.
 */
#ifndef KVSERVE_CPU_SIMD_NEON_H
#define KVSERVE_CPU_SIMD_NEON_H

#if !defined(__aarch64__)
#error "cpu/simd_neon.h is for the aarch64 kernel files"
#endif

#include <arm_neon.h>
#include <stdint.h>

/* e^x to float accuracy (a few ulp) for -87 ≤ x ≤ 88 (x outside is clamped): the polynomial of
 * simd_x86.h (Cephes) on the argument reduced by n = round(x / ln 2). */
static inline float32x4_t cpu__exp_f32x4(float32x4_t x)
{
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    /* 2^n: n is in [-126, 127] here, so its biased exponent fits in the field. */
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* 4 f16 values (IEEE binary16 bits) as f32. */
static inline float32x4_t cpu__f16x4_to_f32(const uint16_t *p)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

/* 4 bf16 values as f32: the bits shifted into the upper half. */
static inline float32x4_t cpu__bf16x4_to_f32(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

#endif
