/*
 * matmul_avx2.c — the AVX2 + FMA + F16C row dot products of matmul.c's dot-product shape (GEMV
 * and the fallback for weights without a packed copy), for F32, F16, BF16 and Q8_0 weights.
 *
 * Two accumulators keep two FMA chains in flight; F16 converts with F16C, BF16 by a 16-bit
 * shift. Q8_0 multiplies int8 by int8 with maddubs (unsigned × signed): the weight's sign is
 * moved onto the activation (sign_epi8) so |w| can be the unsigned operand; |w| ≤ 127 and
 * |x| ≤ 127 keep the int16 pair sums below 2^15, so maddubs never saturates.
 */
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "model/dtype.h"

static float dot_f32(const void *wv, const void *xv, int64_t n)
{
    const float *w = wv, *x = xv;
    int64_t i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = cpu__hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_f16(const void *wv, const void *xv, int64_t n)
{
    const uint16_t *w = wv;
    const float *x = xv;
    int64_t i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const void *)(w + i))), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const void *)(w + i + 8))),
                             _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = cpu__hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += dt_f16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_bf16(const void *wv, const void *xv, int64_t n)
{
    const uint16_t *w = wv;
    const float *x = xv;
    int64_t i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m256i v0 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(w + i)));
        __m256i v1 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(w + i + 8)));
        a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = cpu__hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += dt_bf16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_q8(const void *wv, const void *xv, int64_t n)
{
    const dt_block_q8_0 *w = wv;
    const cpu__q8x *x = xv;
    int64_t nb = n / 32;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m256i w0 = _mm256_loadu_si256((const void *)w[b].q), w1 = _mm256_loadu_si256((const void *)w[b + 1].q);
        __m256i x0 = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b].q), w0);
        __m256i x1 = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b + 1].q), w1);
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w0), x0), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w1), x1), ones);
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * x[b + 1].d), a1);
    }
    for (; b < nb; b++) {
        __m256i wq = _mm256_loadu_si256((const void *)w[b].q);
        __m256i xs = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b].q), wq);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), xs), ones);
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), a0);
    }
    return cpu__hsum256(_mm256_add_ps(a0, a1));
}

void cpu__matmul_fill_avx2(cpu__kern *k)
{
    k->mm[DT_F32].dot = dot_f32;
    k->mm[DT_F16].dot = dot_f16;
    k->mm[DT_BF16].dot = dot_bf16;
    k->mm[DT_Q8_0].dot = dot_q8;
    k->mm[DT_F32].dot_isa = k->mm[DT_F16].dot_isa = k->mm[DT_BF16].dot_isa = k->mm[DT_Q8_0].dot_isa = CPU_ISA_AVX2;
}
