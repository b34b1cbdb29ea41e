/*
 * matmul_avx512.c — the AVX-512 row dot products of matmul.c's dot-product shape for F32, F16
 * and BF16 weights, and the activation quantiser for Q8_0 (the VNNI Q8_0 dot product is in
 * gemm_q8_vnni.c; without VNNI the AVX2 one serves).
 *
 * The F16 and BF16 dots load 64 bytes of weights at a time: measurably faster streaming from
 * DRAM than 32-byte loads. The quantiser multiplies by the same reciprocal as the scalar one and
 * rounds in the default mode, so both give exactly the same blocks.
 */
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "model/dtype.h"

static void quantise_q8(const float *x, cpu__q8x *out, int64_t n)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        __m512 vid = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        out[b].d = d;
        _mm_storeu_si128((void *)out[b].q, _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((void *)(out[b].q + 16), _mm512_cvtsepi32_epi8(q1));
    }
}

static float dot_f32(const void *wv, const void *xv, int64_t n)
{
    const float *w = wv, *x = xv;
    int64_t i = 0;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_f16(const void *wv, const void *xv, int64_t n)
{
    const uint16_t *w = wv;
    const float *x = xv;
    int64_t i = 0;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (; i + 64 <= n; i += 64) {
        __m512i v0 = _mm512_loadu_si512((const void *)(w + i));
        __m512i v1 = _mm512_loadu_si512((const void *)(w + i + 32));
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(v0)), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v0, 1)), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(v1)), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v1, 1)), _mm512_loadu_ps(x + i + 48), a3);
    }
    a0 = _mm512_add_ps(a0, a2);
    a1 = _mm512_add_ps(a1, a3);
    for (; i + 32 <= n; i += 32) {
        __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(w + i)));
        __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(w + i + 16)));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const void *)(w + i))), _mm512_loadu_ps(x + i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) s += dt_f16_to_f32(w[i]) * x[i];
    return s;
}

static inline __m512 bf16x16_to_f32(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static float dot_bf16(const void *wv, const void *xv, int64_t n)
{
    const uint16_t *w = wv;
    const float *x = xv;
    int64_t i = 0;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) { /* one 64-byte load per 32 weights (see dot_f16) */
        __m512i v = _mm512_loadu_si512((const void *)(w + i));
        a0 = _mm512_fmadd_ps(bf16x16_to_f32(_mm512_castsi512_si256(v)), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(bf16x16_to_f32(_mm512_extracti64x4_epi64(v, 1)), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(bf16x16_to_f32(_mm256_loadu_si256((const void *)(w + i))), _mm512_loadu_ps(x + i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) s += dt_bf16_to_f32(w[i]) * x[i];
    return s;
}

void cpu__matmul_fill_avx512(cpu__kern *k)
{
    k->quantise_q8 = quantise_q8;
    k->mm[DT_F32].dot = dot_f32;
    k->mm[DT_F16].dot = dot_f16;
    k->mm[DT_BF16].dot = dot_bf16;
    k->mm[DT_F32].dot_isa = k->mm[DT_F16].dot_isa = k->mm[DT_BF16].dot_isa = CPU_ISA_AVX512;
}
