/*
 * simd_x86.h — small SIMD helpers shared by the x86 kernel files of cpu/ (*_avx2.c, *_avx512.c,
 * *_vnni.c). Only those files may include it: everything here is compiled with the including
 * file's target flags and must never end up in a file built for the baseline target.
 */
#ifndef KVSERVE_CPU_SIMD_X86_H
#define KVSERVE_CPU_SIMD_X86_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "cpu/simd_x86.h is for files built with the avx2 (or higher) target flags"
#endif

#include <immintrin.h>
#include <stdint.h>

/* An int mask for vmaskmovps (_mm256_maskload_ps / _mm256_maskstore_ps) with lanes 0 .. n-1
 * set (n ≥ 8: all, n ≤ 0: none). */
static inline __m256i cpu__mask8(int n)
{
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const void *)(m + 8 - (n >= 8 ? 8 : n < 0 ? 0 : n)));
}

/* Sum of the 8 lanes. */
static inline float cpu__hsum256(__m256 a)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* Maximum of the 8 lanes. */
static inline float cpu__hmax256(__m256 a)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* e^x to float accuracy (a few ulp) for -87 ≤ x ≤ 88 (x outside is clamped to that range):
 * Cephes' polynomial on the argument reduced by n = round(x / ln 2), with ln 2 split in two so
 * that the reduction is exact. */
static inline __m256 cpu__exp256(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n: n is in [-126, 127] here, so its biased exponent fits in the field. */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Asks for share part (of parts equal shares, whole lines) of [p, p + bytes) to be brought into
 * L2. A GEMM that works on one slice of weights while the next one arrives gives each row group's
 * pass its share: requests issued in one burst fill the line-fill buffers and stall the core,
 * spread over the passes they arrive while it computes. Always inlined: gcc takes a separate
 * function made only of prefetches for one without effects and drops the calls. */
static inline __attribute__((always_inline)) void cpu__prefetch_share(const char *p, size_t bytes, int part, int parts)
{
    size_t share = (bytes / 64 + (size_t)parts - 1) / (size_t)parts * 64, at = (size_t)part * share;
    for (size_t off = at; off < at + share && off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
}

#ifdef __AVX512F__
/* e^x to float accuracy for x ≥ -87 (smaller x give e^-87; large x overflow to inf through
 * scalef), the same polynomial as cpu__exp256, 16 lanes. */
static inline __m512 cpu__exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* Lanes 0 .. n-1 set (n ≥ 16: all). */
static inline __mmask16 cpu__mask16(int n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}
#endif

#endif
