/*
 * quant_avx2.c — the AVX2 (+FMA, F16C) kernels of the quantised weight types other than Q8_0:
 * quant_x86.h and quantk_x86.h with maddubs/madd dot products, and the Q8_K activation
 * quantiser (which the AVX-512 levels keep). Built with the avx2 flags; runs only through the
 * table of a backend at level avx2 or above.
 */
#define QX_VNNI 0
#define QX_FILL_EXTRA(k) ((k)->quantise_q8k = quantise_q8k) /* defined below, used by QX_KERNELS */
#include "cpu/quantk_x86.h"
#include "cpu/simd_x86.h"

/* The scalar quantise_q8k's arithmetic 8 lanes at a time: the same max (exact in any order),
 * the same scalar d and reciprocal, and cvtps's round-to-nearest-even (the default mode, as
 * lrintf's). The sums of each 16 come from sad against 0 on q + 128. */
static void quantise_q8k(const float *x, cpu__q8k *out, int64_t n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + b * 256;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k)));
        float amax = cpu__hmax256(m);
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        out[b].d = d;
        for (int u = 0; u < 8; u++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * u + 8 * k), vid));
            /* int32 → int16 → int8 packs work within 128-bit lanes: undo their interleave */
            __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p8 = _mm256_permutevar8x32_epi32(p8, order);
            _mm256_storeu_si256((__m256i *)(out[b].q + 32 * u), p8);
            __m256i s = _mm256_sad_epu8(_mm256_xor_si256(p8, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
            int64_t s4[4];
            _mm256_storeu_si256((__m256i *)s4, s);
            out[b].bsum[2 * u] = (int16_t)(s4[0] + s4[1] - 16 * 128);
            out[b].bsum[2 * u + 1] = (int16_t)(s4[2] + s4[3] - 16 * 128);
        }
    }
}

QX_KERNELS(avx2, CPU_ISA_AVX2)
