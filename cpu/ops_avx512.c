/*
 * ops_avx512.c — the AVX-512 row kernels of ops.c: the sum of squares of RMSNorm and SwiGLU's
 * silu(gate) · up (e^x by the polynomial of simd_x86.h, a few ulp).
 */
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"

static float sum_squares(const float *x, int64_t n)
{
    int64_t i = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    float s = _mm512_reduce_add_ps(acc);
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

static void silu_mul(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = cpu__mask16((int)(n - i < 16 ? n - i : 16));
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 e = cpu__exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 sg = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(sg, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void cpu__ops_fill_avx512(cpu__kern *k)
{
    k->sum_squares = sum_squares;
    k->silu_mul = silu_mul;
}
