/*
 * matmul_neon.c — the Advanced SIMD row kernels of matmul.c and ops.c on aarch64: the row dot
 * products of every float type and of Q8_0 (int8 products widened by vmull_s8 and pairwise
 * accumulated into int32: exact), the Q8_0 activation quantiser (exactly the scalar blocks:
 * the same reciprocal, rounding to nearest even by vcvtnq), RMSNorm's sum of squares and
 * silu_mul. Four accumulators keep four FMA chains in flight.
 */
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_neon.h"
#include "model/dtype.h"

static float dot_f32(const void *wv, const void *xv, int64_t n)
{
    const float *w = wv, *x = xv;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(w + i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, vld1q_f32(w + i + 4), vld1q_f32(x + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(w + i + 8), vld1q_f32(x + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(w + i + 12), vld1q_f32(x + i + 12));
    }
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static inline __attribute__((always_inline)) float dot_16bit(int bf, const uint16_t *w, const float *x, int64_t n)
{
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
#define W4(o) (bf ? cpu__bf16x4_to_f32(w + i + (o)) : cpu__f16x4_to_f32(w + i + (o)))
        a0 = vfmaq_f32(a0, W4(0), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, W4(4), vld1q_f32(x + i + 4));
        a2 = vfmaq_f32(a2, W4(8), vld1q_f32(x + i + 8));
        a3 = vfmaq_f32(a3, W4(12), vld1q_f32(x + i + 12));
#undef W4
    }
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) s += (bf ? dt_bf16_to_f32(w[i]) : dt_f16_to_f32(w[i])) * x[i];
    return s;
}

static float dot_f16(const void *w, const void *x, int64_t n)
{
    return dot_16bit(0, w, x, n);
}

static float dot_bf16(const void *w, const void *x, int64_t n)
{
    return dot_16bit(1, w, x, n);
}

/* Σ over 32 int8 pairs, exact in int32. */
static inline int32x4_t dot32_s8(const int8_t *a, const int8_t *b)
{
    int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16), b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
    int16x8_t p0 = vmull_s8(vget_low_s8(a0), vget_low_s8(b0));
    int16x8_t p1 = vmull_s8(vget_high_s8(a0), vget_high_s8(b0));
    int16x8_t p2 = vmull_s8(vget_low_s8(a1), vget_low_s8(b1));
    int16x8_t p3 = vmull_s8(vget_high_s8(a1), vget_high_s8(b1));
    int32x4_t s = vpaddlq_s16(p0);
    s = vpadalq_s16(s, p1);
    s = vpadalq_s16(s, p2);
    return vpadalq_s16(s, p3);
}

static float dot_q8(const void *wv, const void *xv, int64_t n)
{
    const dt_block_q8_0 *w = wv;
    const cpu__q8x *x = xv;
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t b = 0; b < n / 32; b++)
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(dot32_s8(w[b].q, x[b].q)), dt_f16_to_f32(w[b].d) * x[b].d);
    return vaddvq_f32(acc);
}

static void quantise_q8(const float *x, cpu__q8x *out, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float32x4_t v[8], m = vdupq_n_f32(0);
        for (int k = 0; k < 8; k++) {
            v[k] = vld1q_f32(xb + 4 * k);
            m = vmaxq_f32(m, vabsq_f32(v[k]));
        }
        float amax = vmaxvq_f32(m);
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        int16x8_t h[4];
        for (int k = 0; k < 4; k++)
            h[k] = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k], id))),
                                vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k + 1], id))));
        out[b].d = d;
        vst1q_s8(out[b].q, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
        vst1q_s8(out[b].q + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
    }
}

static float sum_squares(const float *x, int64_t n)
{
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
        a0 = vfmaq_f32(a0, v0, v0);
        a1 = vfmaq_f32(a1, v1, v1);
    }
    float s = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

static inline float32x4_t silu_mul4(float32x4_t g, float32x4_t u)
{
    float32x4_t e = cpu__exp_f32x4(vnegq_f32(g));
    return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
}

static void silu_mul(float *gate, const float *up, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(gate + i, silu_mul4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    if (i < n) { /* the tail through a copy, with the same polynomial */
        float g[4] = {0}, u[4] = {0};
        for (int64_t j = i; j < n; j++) g[j - i] = gate[j], u[j - i] = up[j];
        vst1q_f32(g, silu_mul4(vld1q_f32(g), vld1q_f32(u)));
        for (int64_t j = i; j < n; j++) gate[j] = g[j - i];
    }
}

void cpu__matmul_fill_neon(cpu__kern *k)
{
    k->quantise_q8 = quantise_q8;
    k->sum_squares = sum_squares;
    k->silu_mul = silu_mul;
    k->mm[DT_F32].dot = dot_f32;
    k->mm[DT_F16].dot = dot_f16;
    k->mm[DT_BF16].dot = dot_bf16;
    k->mm[DT_Q8_0].dot = dot_q8;
    k->mm[DT_F32].dot_isa = k->mm[DT_F16].dot_isa = k->mm[DT_BF16].dot_isa = k->mm[DT_Q8_0].dot_isa = CPU_ISA_NEON;
}
