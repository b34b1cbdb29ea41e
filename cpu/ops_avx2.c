/*
 * ops_avx2.c — the AVX2 + FMA row kernels of ops.c and matmul.c: the sum of squares of
 * RMSNorm, SwiGLU's silu(gate) · up (e^x by the polynomial of simd_x86.h, a few ulp), the
 * Q8_0 activation quantiser (exactly the scalar blocks: the same reciprocal, rounding to
 * nearest even) and the rotation of RoPE (exactly the scalar one).
 */
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"

static float sum_squares(const float *x, int64_t n)
{
    int64_t i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    float s = cpu__hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

static inline __m256 silu_mul8(__m256 g, __m256 u)
{
    __m256 e = cpu__exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static void silu_mul(float *gate, const float *up, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) { /* the tail through a copy, with the same polynomial */
        float g[8] = {0}, u[8] = {0};
        for (int64_t j = i; j < n; j++) g[j - i] = gate[j], u[j - i] = up[j];
        _mm256_storeu_ps(g, silu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        for (int64_t j = i; j < n; j++) gate[j] = g[j - i];
    }
}

static void quantise_q8(const float *x, cpu__q8x *out, int64_t n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }
        float amax = cpu__hmax256(m);
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
        /* int32 → int16 → int8 packs work within 128-bit lanes: undo their interleave */
        __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        out[b].d = d;
        _mm256_storeu_si256((void *)out[b].q, p8);
    }
}

/* ops.c's rope_heads, 8 values at a time: products rounded, then summed (mul, add: no FMA), so
 * the scalar result to the bit. Interleaved pairs (a, b) take the pair-swapped vector (b, a)
 * and the sines with the even lanes negated: (a·c + b·(−s), b·c + a·s). */
static void rope_heads(float *x, int n_heads, int head_dim, int half, int neox, const float *cs, const float *sn)
{
    for (int h = 0; h < n_heads; h++) {
        float *hx = x + (size_t)h * head_dim;
        int i = 0;
        if (neox)
            for (; i + 8 <= half; i += 8) {
                __m256 a = _mm256_loadu_ps(hx + i), b = _mm256_loadu_ps(hx + i + half);
                __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
                _mm256_storeu_ps(hx + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
                _mm256_storeu_ps(hx + i + half, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
            }
        else
            for (; i + 4 <= half; i += 4) {
                __m128 c4 = _mm_loadu_ps(cs + i), s4 = _mm_loadu_ps(sn + i);
                __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
                __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
                s = _mm256_xor_ps(s, _mm256_setr_ps(-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f));
                __m256 v = _mm256_loadu_ps(hx + 2 * i), w = _mm256_permute_ps(v, 0xB1);
                _mm256_storeu_ps(hx + 2 * i, _mm256_add_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(w, s)));
            }
        for (; i < half; i++) cpu__rope_pair(hx, i, half, neox, cs, sn);
    }
}

void cpu__ops_fill_avx2(cpu__kern *k)
{
    k->rope_heads = rope_heads;
    k->sum_squares = sum_squares;
    k->silu_mul = silu_mul;
    k->quantise_q8 = quantise_q8;
}
