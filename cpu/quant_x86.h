/*
 * quant_x86.h — the x86 kernels of the blocks-of-32 quantised types (Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL, MXFP4) and the unit decoders and panel helpers that quantk_x86.h (the super-block types) also
 * uses, written once for two levels: included through quantk_x86.h by quant_avx2.c (QX_VNNI 0:
 * AVX2 maddubs) and quant_vnni.c (QX_VNNI 1: AVX-512 VNNI vpdpbusd). Only those files may
 * include it (it needs their target flags).
 *
 * Both compute the first formulation of quant.h bit for bit (the same integer block sums, the
 * same f32 operations in the same order), in two shapes:
 *
 *  - GEMV (1 to QX_GEMV_ROWS activation rows: decode). Memory-bound: the weights are decoded
 *    straight from the file's blocks, 8 outputs at a time. Each output's 32-weight unit is
 *    decoded into one vector of 32 bytes and dotted with each row's 32 activations (8 int32
 *    partial sums); the 8 outputs' partial sums are reduced together (hadd tree) into one
 *    vector holding each output's group sum, so the f32 part runs on 8 outputs per instruction.
 *
 *  - GEMM (more rows: prefill, batched decode). A thread decodes a tile of 16 outputs × KC
 *    inputs once into a panel in its scratch — values [KC/4][16 outputs][4] (the 8 × 8 dword
 *    transposes of the decoded units), then the block scales S and W [KC/32][16] — and runs a
 *    microkernel over every row group of it: per 4 inputs one panel load and one vpdpbusd (or
 *    maddubs + madd) per row, with the row's 4 activation bytes broadcast; at the end of each
 *    group the integer sums are converted and folded in with the group scales. Each slice's
 *    partial results live in `out` between slices.
 *
 * Signed values (IQ4_NL, IQ4_XS, MXFP4): VNNI offsets them to unsigned (v + 128) and starts the integer
 * sums at −128 · Σ q, which gives back Σ v·q exactly; AVX2 multiplies |v| by q carrying v's sign
 * (the sign trick: maddubs would saturate on v + 128). Unsigned values are at most 63, so
 * maddubs' int16 pair sums (≤ 2 · 63 · 127) never saturate.
 */
#ifndef KVSERVE_CPU_QUANT_X86_H
#define KVSERVE_CPU_QUANT_X86_H

#include <immintrin.h>
#include <string.h>

#define CPU__QF16(h) _cvtsh_ss(h)
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/quant.h"

#ifndef QX_VNNI
#error "define QX_VNNI (0 or 1) before including cpu/quant_x86.h"
#endif

#define QX_INLINE static inline __attribute__((always_inline))
#define QX_GEMV_ROWS 4 /* up to this many activation rows the GEMV runs, from then on the GEMM */
#define QX_KC 512      /* inputs per GEMM slice: the panel (12 KiB) and the rows' slice stay in L1 */
#define QX_MR (QX_VNNI ? 8 : 4) /* rows per microkernel call */

_Static_assert((size_t)QX_KC * 16 + 2 * sizeof(float) * (QX_KC / 16) * 16 <= CPU__QPANEL_BYTES, "panel scratch");

/* ---- decoding a 32-weight unit -------------------------------------------------------------- */

QX_INLINE __m256i qx_load(const uint8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* Weights j and j + 16 from byte j of qs[16]: 32 nibbles in weight order. */
QX_INLINE __m256i qx_nibbles(const uint8_t *qs)
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* Byte i = 0xFF when bit i of the little-endian 32 bits at p is set, else 0. */
QX_INLINE __m256i qx_bits(const uint8_t *p)
{
    uint32_t h;
    memcpy(&h, p, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* per 128-bit lane */
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The IQ4 code book applied to 32 nibbles. */
QX_INLINE __m256i qx_iq4(const uint8_t *qs)
{
    const __m256i book = _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                          -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    return _mm256_shuffle_epi8(book, qx_nibbles(qs));
}

/* MXFP4's code book (the FP4 values doubled) applied to 32 nibbles. */
QX_INLINE __m256i qx_fp4(const uint8_t *qs)
{
    const __m256i book = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                          0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    return _mm256_shuffle_epi8(book, qx_nibbles(qs));
}

QX_INLINE __m256i qx_shr(__m256i v, int n) /* each byte's bits n.. down to 0 (n ≤ 7; mask after) */
{
    return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n));
}

/* The 32 values of unit k (weights 32k .. 32k+31) of the block at b, as quant.h defines them. */
QX_INLINE __m256i qx_unit(int type, const uint8_t *b, int k)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    switch (type) {
    case DT_Q4_0: return qx_nibbles(b + 2);
    case DT_Q4_1: return qx_nibbles(b + 4);
    case DT_Q5_0: return _mm256_or_si256(qx_nibbles(b + 6), _mm256_and_si256(qx_bits(b + 2), _mm256_set1_epi8(0x10)));
    case DT_Q5_1: return _mm256_or_si256(qx_nibbles(b + 8), _mm256_and_si256(qx_bits(b + 4), _mm256_set1_epi8(0x10)));
    case DT_IQ4_NL: return qx_iq4(b + 2);
    case DT_MXFP4: return qx_fp4(b + 1);
    case DT_Q2_K: return _mm256_and_si256(qx_shr(qx_load(b + 16 + 32 * (k >> 2)), 2 * (k & 3)), m2);
    case DT_Q3_K: {
        __m256i lo = _mm256_and_si256(qx_shr(qx_load(b + 32 + 32 * (k >> 2)), 2 * (k & 3)), m2);
        __m256i hi = _mm256_and_si256(qx_shr(qx_load(b), k), m1); /* bit 4h + s = k of hmask[l] */
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
    }
    case DT_Q4_K: {
        __m256i v = qx_load(b + 16 + 32 * (k >> 1));
        return _mm256_and_si256(k & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
    }
    case DT_Q5_K: {
        __m256i v = qx_load(b + 48 + 32 * (k >> 1));
        __m256i lo = _mm256_and_si256(k & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
        __m256i hi = _mm256_and_si256(qx_shr(qx_load(b + 16), k), m1);
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    case DT_Q6_K: {
        int h = k >> 2, s = k & 3;
        __m256i lo = qx_load(b + 64 * h + 32 * (s & 1));
        lo = _mm256_and_si256(s >= 2 ? _mm256_srli_epi16(lo, 4) : lo, m4);
        __m256i hi = _mm256_and_si256(qx_shr(qx_load(b + 128 + 32 * h), 2 * s), m2);
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    default: return qx_iq4(b + 8 + 16 * k); /* IQ4_XS */
    }
}

/* Σ over each 4 consecutive bytes of v·q: 8 int32. v unsigned (≤ 63, or signed + 128 on
 * VNNI); va = |v| and v itself for the AVX2 sign trick when sgn. */
QX_INLINE __m256i qx_dot(__m256i v, __m256i va, __m256i q, int sgn)
{
#if QX_VNNI
    (void)va, (void)sgn;
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), v, q);
#else
    __m256i p = sgn ? _mm256_maddubs_epi16(va, _mm256_sign_epi8(q, v)) : _mm256_maddubs_epi16(v, q);
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

/* ---- group scales of 8 outputs at once ---------------------------------------------------- */

/* The dword at byte off of each output's block: output j's block is at b0 + idx[j]. */
QX_INLINE __m256i qx_gather(const uint8_t *b0, __m256i idx, int off)
{
    return _mm256_i32gather_epi32((const int *)(const void *)(b0 + off), idx, 1);
}

/* f16 → f32 of the 16-bit field at bit 16·hi of each lane. */
QX_INLINE __m256 qx_half(__m256i dw, int hi)
{
    __m256i h = hi ? _mm256_srli_epi32(dw, 16) : _mm256_and_si256(dw, _mm256_set1_epi32(0xFFFF));
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, _mm256_setzero_si256()), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(p));
}

/* S, W (8 outputs each) of one block of 8 outputs: exactly cpu__qscales's values, computed
 * lane-wise. IQ4_NL leaves W alone. */
QX_INLINE void qx_scales8(int type, const uint8_t *b0, __m256i idx, __m256 *S, __m256 *W)
{
    switch (type) {
    case DT_Q4_0: case DT_Q5_0: {
        S[0] = qx_half(qx_gather(b0, idx, 0), 0);
        W[0] = _mm256_mul_ps(_mm256_set1_ps(type == DT_Q4_0 ? -8.0f : -16.0f), S[0]);
        break;
    }
    case DT_Q4_1: case DT_Q5_1: {
        __m256i v = qx_gather(b0, idx, 0);
        S[0] = qx_half(v, 0), W[0] = qx_half(v, 1);
        break;
    }
    case DT_IQ4_NL: S[0] = qx_half(qx_gather(b0, idx, 0), 0); break;
    case DT_MXFP4: { /* dt_e8m0_half lane-wise: e < 2 gives the subnormal 0x200000 << e, else (e − 1) << 23 */
        __m256i e = _mm256_and_si256(qx_gather(b0, idx, 0), _mm256_set1_epi32(0xFF));
        __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        __m256i lt2 = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        S[0] = _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, lt2));
        break;
    }
    default: break; /* the super-block types: quantk_x86.h */
    }
}

/* Byte offsets of 8 row pointers from the first (rows of one matrix: < 2^31 apart). */
QX_INLINE __m256i qx_offsets(const uint8_t *const *rp)
{
    return _mm256_setr_epi32((int)(rp[0] - rp[0]), (int)(rp[1] - rp[0]), (int)(rp[2] - rp[0]), (int)(rp[3] - rp[0]),
                             (int)(rp[4] - rp[0]), (int)(rp[5] - rp[0]), (int)(rp[6] - rp[0]), (int)(rp[7] - rp[0]));
}

/* ---- GEMV ---------------------------------------------------------------------------------- */

/* p[j] holds output j's 8 partial sums of a unit (lane l: inputs 4l .. 4l+3). g0 gets each
 * output's sum over lanes 0-3 (inputs 0-15), g1 over lanes 4-7 (inputs 16-31). */
QX_INLINE void qx_reduce8(const __m256i *p, __m256i *g0, __m256i *g1)
{
    __m256i t0 = _mm256_hadd_epi32(p[0], p[1]), t1 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i t2 = _mm256_hadd_epi32(p[4], p[5]), t3 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    *g0 = _mm256_permute2x128_si256(u0, u1, 0x20);
    *g1 = _mm256_permute2x128_si256(u0, u1, 0x31);
}

/* acc = fma(isum, S·d, acc), then fma(W, X, acc) unless signed: one group, 8 outputs. */
QX_INLINE __m256 qx_fold8v(__m256 acc, __m256i isum, __m256 S, __m256 W, float d, float X, int sgn)
{
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(S, _mm256_set1_ps(d)), acc);
    if (!sgn) acc = _mm256_fmadd_ps(W, _mm256_set1_ps(X), acc);
    return acc;
}

QX_INLINE __m256 qx_fold8(__m256 acc, __m256i isum, const float *S, const float *W, float d, float X, int sgn)
{
    return qx_fold8v(acc, isum, _mm256_loadu_ps(S), sgn ? _mm256_setzero_ps() : _mm256_loadu_ps(W), d, X, sgn);
}

/* The GEMVs read 8 rows at once, interleaved, which the hardware prefetchers follow poorly; and
 * prefetching each row a little ahead keeps every line-fill buffer waiting. So while a GEMV
 * works on its 8 rows (contiguous in the file: next - 8 · rb .. next), step b of nb asks for its
 * share of the next 8 rows, lines [b · L / nb, (b + 1) · L / nb) of the L after next: one group of
 * rows ahead, in address order. The last group of a range fetches rows another thread may take;
 * a prefetch never faults. */
QX_INLINE void qx_prefetch_rows(const uint8_t *next, size_t bytes, int64_t b, int64_t nb)
{
    int64_t lines = (int64_t)((bytes + 63) / 64);
    for (int64_t l = b * lines / nb; l < (b + 1) * lines / nb; l++) _mm_prefetch((const char *)next + l * 64, _MM_HINT_T1);
}

/* res[r][j] = the formulation for output row rp[j] (j < 8) against activation row r (R rows,
 * x rows nxb blocks apart), bias not added. */
QX_INLINE void qx_gemv8(int type, int R, const uint8_t *const *rp, int64_t n_in, const cpu__q8s *x, int64_t nxb,
                        float *res)
{
    const cpu__qtraits tr = cpu__qtraits_of(type);
    const int be = dt_block_elems(type), nu = be / 32, sgn = tr.is_signed;
    const size_t bb = dt_block_bytes(type), rb = dt_row_bytes(type, n_in);
    const __m256i idx = qx_offsets(rp);
    __m256 acc[QX_GEMV_ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_in / be; b++) {
        __m256 S[16], W[16];
        qx_prefetch_rows(rp[0] + 8 * rb, 8 * rb, b, n_in / be);
        qx_scales8(type, rp[0] + b * bb, idx, S, W);
#pragma GCC unroll 8
        for (int k = 0; k < nu; k++) {
            __m256i v[8], va[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                v[j] = qx_unit(type, rp[j] + b * bb, k);
                if (sgn && QX_VNNI) v[j] = _mm256_xor_si256(v[j], _mm256_set1_epi8((char)0x80));
                va[j] = sgn && !QX_VNNI ? _mm256_abs_epi8(v[j]) : v[j];
            }
            for (int r = 0; r < R; r++) {
                const cpu__q8s *xb = &x[r * nxb + b * nu + k];
                __m256i q = qx_load((const uint8_t *)xb->q), p[8], g0, g1;
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) p[j] = qx_dot(v[j], va[j], q, sgn);
                qx_reduce8(p, &g0, &g1);
                __m256i s = _mm256_add_epi32(g0, g1);
                if (sgn && QX_VNNI) s = _mm256_sub_epi32(s, _mm256_set1_epi32(128 * xb->s32));
                acc[r] = qx_fold8v(acc[r], s, S[k], W[k], xb->d, xb->xs[2], sgn);
            }
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(res + 8 * r, acc[r]);
}

/* GEMV over outputs [lo, hi) for every row (n_rows ≤ QX_GEMV_ROWS). */
QX_INLINE void qx_gemv_range(int type, const cpu__mm_task *t, int64_t lo, int64_t hi)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out, nxb = n_in / 32;
    size_t rb = dt_row_bytes(type, n_in);
    const cpu__q8s *x = t->xs;
    for (int64_t o0 = lo; o0 < hi; o0 += 8) {
        const uint8_t *rp[8];
        for (int j = 0; j < 8; j++) /* past the end: repeat the last row, its results are dropped */
            rp[j] = (const uint8_t *)w->data + (size_t)(o0 + j < hi ? o0 + j : hi - 1) * rb;
        float res[QX_GEMV_ROWS * 8];
        switch (t->n_rows) {
        case 1: qx_gemv8(type, 1, rp, n_in, x, nxb, res); break;
        case 2: qx_gemv8(type, 2, rp, n_in, x, nxb, res); break;
        case 3: qx_gemv8(type, 3, rp, n_in, x, nxb, res); break;
        default: qx_gemv8(type, 4, rp, n_in, x, nxb, res); break;
        }
        for (int r = 0; r < t->n_rows; r++)
            for (int j = 0; j < 8 && o0 + j < hi; j++)
                t->out[(size_t)r * n_out + o0 + j] = res[8 * r + j] + (t->bias ? t->bias[o0 + j] : 0.0f);
    }
}

/* ---- GEMM: panels ---------------------------------------------------------------------------- */

/* Transposes 8 rows of 8 dwords: o[i] = dword i of r[0..8). */
QX_INLINE void qx_transpose8(const __m256i *r, __m256i *o)
{
    __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    __m256i s0 = _mm256_unpacklo_epi64(t0, t2), s1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i s2 = _mm256_unpacklo_epi64(t1, t3), s3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i s4 = _mm256_unpacklo_epi64(t4, t6), s5 = _mm256_unpackhi_epi64(t4, t6);
    __m256i s6 = _mm256_unpacklo_epi64(t5, t7), s7 = _mm256_unpackhi_epi64(t5, t7);
    o[0] = _mm256_permute2x128_si256(s0, s4, 0x20), o[4] = _mm256_permute2x128_si256(s0, s4, 0x31);
    o[1] = _mm256_permute2x128_si256(s1, s5, 0x20), o[5] = _mm256_permute2x128_si256(s1, s5, 0x31);
    o[2] = _mm256_permute2x128_si256(s2, s6, 0x20), o[6] = _mm256_permute2x128_si256(s2, s6, 0x31);
    o[3] = _mm256_permute2x128_si256(s3, s7, 0x20), o[7] = _mm256_permute2x128_si256(s3, s7, 0x31);
}

/* The values of one block of 16 outputs (rows rp[j] + off) into the panel at pv: [be/4][16][4]
 * bytes, offset to unsigned for signed types on VNNI. */
QX_INLINE void qx_unpack_values(int type, const uint8_t *const *rp, size_t off, uint8_t *pv)
{
    const int nu = dt_block_elems(type) / 32, sgn = cpu__qtraits_of(type).is_signed;
    for (int k = 0; k < nu; k++)
        for (int h = 0; h < 2; h++) {
            __m256i v[8], o[8];
            for (int j = 0; j < 8; j++) {
                v[j] = qx_unit(type, rp[8 * h + j] + off, k);
                if (sgn && QX_VNNI) v[j] = _mm256_xor_si256(v[j], _mm256_set1_epi8((char)0x80));
            }
            qx_transpose8(v, o);
            uint8_t *dst = pv + (size_t)k * 8 * 64 + 32 * h;
            for (int i = 0; i < 8; i++) _mm256_storeu_si256((__m256i *)(dst + 64 * i), o[i]);
        }
}

/* The panel of outputs [o0, o0 + 16) × inputs [i0, i0 + kc): values at pv ([kc/4][16][4]),
 * S and W at pS, pW ([kc/32][16]). Outputs past n_out repeat the last row. */
QX_INLINE void qx_unpack(int type, const be_weight *w, int64_t o0, int64_t i0, int kc, uint8_t *pv, float *pS,
                         float *pW)
{
    const cpu__qtraits tr = cpu__qtraits_of(type);
    const int be = dt_block_elems(type), ng = be / tr.group, nu = be / 32, sgn = tr.is_signed;
    const size_t bb = dt_block_bytes(type), rb = dt_row_bytes(type, w->n_in);
    const uint8_t *rp[16];
    for (int j = 0; j < 16; j++)
        rp[j] = (const uint8_t *)w->data + (size_t)(o0 + j < w->n_out ? o0 + j : w->n_out - 1) * rb +
                (size_t)(i0 / be) * bb;
    const __m256i idx[2] = {qx_offsets(rp), qx_offsets(rp + 8)};
    for (int lb = 0; lb < kc / be; lb++) {
        for (int h = 0; h < 2; h++) {
            __m256 S[16], W[16];
            qx_scales8(type, rp[8 * h] + lb * bb, idx[h], S, W);
            for (int g = 0; g < ng; g++) {
                _mm256_storeu_ps(pS + (lb * ng + g) * 16 + 8 * h, S[g]);
                _mm256_storeu_ps(pW + (lb * ng + g) * 16 + 8 * h, sgn ? _mm256_setzero_ps() : W[g]);
            }
        }
        qx_unpack_values(type, rp, (size_t)lb * bb, pv + (size_t)lb * nu * 8 * 64);
    }
}

/* ---- GEMM: microkernels ------------------------------------------------------------------- */

#if QX_VNNI
/* acc = fma(isum, S·d, acc), then fma(W, X, acc) unless signed: one group, 16 outputs. */
QX_INLINE __m512 qx_fold16(__m512 acc, __m512i isum, const float *S, const float *W, float d, float X, int sgn)
{
    __m512 sd = _mm512_mul_ps(_mm512_loadu_ps(S), _mm512_set1_ps(d));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sd, acc);
    if (!sgn) acc = _mm512_fmadd_ps(_mm512_loadu_ps(W), _mm512_set1_ps(X), acc);
    return acc;
}

/* c[r][0 .. ncols) (+)= rows r < mr of the slice (x: row r's first block of the slice at
 * x + r·ldx) against the panel (16 outputs, kc inputs). */
QX_INLINE void qx_mk(int type, int mr, const uint8_t *pv, const float *pS, const float *pW, int kc,
                     const cpu__q8s *x, int64_t ldx, float *c, int64_t ldc, int ncols, int load_c)
{
    const cpu__qtraits tr = cpu__qtraits_of(type);
    const int sgn = tr.is_signed;
    __mmask16 m = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
    __m512 acc[8];
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++) acc[r] = load_c ? _mm512_maskz_loadu_ps(m, c + r * ldc) : _mm512_setzero_ps();
        for (int u = 0; u < kc / 32; u++) {
        __m512i ia[8];
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++)
            ia[r] = sgn ? _mm512_set1_epi32(-128 * x[r * ldx + u].s32) : _mm512_setzero_si512();
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m512i wv = _mm512_loadu_si512((const void *)(pv + (size_t)(u * 8 + s) * 64));
            #pragma GCC unroll 8
            for (int r = 0; r < mr; r++) {
                int32_t xb;
                memcpy(&xb, x[r * ldx + u].q + 4 * s, 4);
                ia[r] = _mm512_dpbusd_epi32(ia[r], wv, _mm512_set1_epi32(xb));
            }
        }
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            const cpu__q8s *xb = &x[r * ldx + u];
            acc[r] = qx_fold16(acc[r], ia[r], pS + u * 16, pW + u * 16, xb->d, xb->xs[2], sgn);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++) _mm512_mask_storeu_ps(c + r * ldc, m, acc[r]);
}

/* The microkernel for a tile of 16 outputs, mr ≤ 8 rows. */
QX_INLINE void qx_tile(int type, int mr, const uint8_t *pv, const float *pS, const float *pW, int kc,
                       const cpu__q8s *x, int64_t ldx, float *c, int64_t ldc, int ncols, int load_c)
{
#define QX_MK(R) qx_mk(type, R, pv, pS, pW, kc, x, ldx, c, ldc, ncols, load_c)
    switch (mr) {
    case 1: QX_MK(1); break;
    case 2: QX_MK(2); break;
    case 3: QX_MK(3); break;
    case 4: QX_MK(4); break;
    case 5: QX_MK(5); break;
    case 6: QX_MK(6); break;
    case 7: QX_MK(7); break;
    default: QX_MK(8); break;
    }
#undef QX_MK
}
#else
/* AVX2: one half h (8 outputs) of the panel; otherwise as the VNNI microkernel. */
QX_INLINE void qx_mk(int type, int mr, int h, const uint8_t *pv, const float *pS, const float *pW, int kc,
                     const cpu__q8s *x, int64_t ldx, float *c, int64_t ldc, int ncols, int load_c)
{
    const cpu__qtraits tr = cpu__qtraits_of(type);
    const int sgn = tr.is_signed;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(ncols), lanes);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++) acc[r] = load_c ? _mm256_maskload_ps(c + r * ldc, m) : _mm256_setzero_ps();
    pv += 32 * h, pS += 8 * h, pW += 8 * h;
        for (int u = 0; u < kc / 32; u++) {
        __m256i ia[4];
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) ia[r] = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int s = 0; s < 8; s++) {
            __m256i wv = qx_load(pv + (size_t)(u * 8 + s) * 64);
            __m256i wa = sgn ? _mm256_abs_epi8(wv) : wv;
            #pragma GCC unroll 8
            for (int r = 0; r < mr; r++) {
                int32_t xb;
                memcpy(&xb, x[r * ldx + u].q + 4 * s, 4);
                ia[r] = _mm256_add_epi32(ia[r], qx_dot(wv, wa, _mm256_set1_epi32(xb), sgn));
            }
        }
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            const cpu__q8s *xb = &x[r * ldx + u];
            acc[r] = qx_fold8(acc[r], ia[r], pS + u * 16, pW + u * 16, xb->d, xb->xs[2], sgn);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++) _mm256_maskstore_ps(c + r * ldc, m, acc[r]);
}

QX_INLINE void qx_tile(int type, int mr, const uint8_t *pv, const float *pS, const float *pW, int kc,
                       const cpu__q8s *x, int64_t ldx, float *c, int64_t ldc, int ncols, int load_c)
{
        for (int h = 0; h < 2 && ncols > 8 * h; h++) {
#define QX_MK(R) qx_mk(type, R, h, pv, pS, pW, kc, x, ldx, c + 8 * h, ldc, ncols - 8 * h, load_c)
        switch (mr) {
        case 1: QX_MK(1); break;
        case 2: QX_MK(2); break;
        case 3: QX_MK(3); break;
        default: QX_MK(4); break;
        }
#undef QX_MK
    }
}
#endif

/* Share part of parts of the file's bytes that the panel after (o0, i0) unpacks (the next slice
 * of the same 16 rows, or the first of the next 16 below hi) into L2: each row-group pass of a
 * panel asks for its share, so the next panel's 16 row segments arrive while this one is
 * computed, and the requests trickle out instead of stalling in one burst. */
QX_INLINE void qx_prefetch_next(int type, const be_weight *w, int64_t o0, int64_t i0, int64_t hi, int part, int parts)
{
    int64_t n_in = w->n_in;
    if (i0 + QX_KC < n_in) {
        i0 += QX_KC;
    } else {
        o0 += 16;
        i0 = 0;
        if (o0 >= hi) return;
    }
    const int be = dt_block_elems(type);
    const size_t bb = dt_block_bytes(type), rb = dt_row_bytes(type, n_in);
    int kc = n_in - i0 < QX_KC ? (int)(n_in - i0) : QX_KC;
    size_t seg = (size_t)(kc / be) * bb, lines = (seg + 63) / 64 + 1; /* +1: a segment may straddle one more */
    size_t total = 16 * lines, per = (total + (size_t)parts - 1) / (size_t)parts;
    for (size_t k = (size_t)part * per; k < (size_t)(part + 1) * per && k < total; k++) {
        int64_t o = o0 + (int64_t)(k / lines) < w->n_out ? o0 + (int64_t)(k / lines) : w->n_out - 1;
        const char *row = (const char *)w->data + (size_t)o * rb + (size_t)(i0 / be) * bb;
        size_t at = (k % lines) * 64 < seg ? (k % lines) * 64 : seg - 1;
        _mm_prefetch(row + at, _MM_HINT_T1);
    }
}

/* GEMM over outputs [lo, hi) for every row; scratch holds one panel (CPU__QPANEL_BYTES). */
QX_INLINE void qx_gemm_range(int type, const cpu__mm_task *t, int64_t lo, int64_t hi, uint8_t *scratch)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out, nxb = n_in / 32;
    const cpu__q8s *x = t->xs;
    uint8_t *pv = scratch;
    float *pS = (float *)(scratch + (size_t)QX_KC * 16), *pW = pS + (QX_KC / 16) * 16;
    for (int64_t o0 = lo; o0 < hi; o0 += 16) {
        int ncols = hi - o0 < 16 ? (int)(hi - o0) : 16;
        for (int64_t i0 = 0; i0 < n_in; i0 += QX_KC) {
            int kc = n_in - i0 < QX_KC ? (int)(n_in - i0) : QX_KC;
            qx_unpack(type, w, o0, i0, kc, pv, pS, pW);
            for (int r0 = 0; r0 < t->n_rows; r0 += QX_MR) {
                int mr = t->n_rows - r0 < QX_MR ? t->n_rows - r0 : QX_MR;
                qx_prefetch_next(type, w, o0, i0, hi, r0 / QX_MR, (t->n_rows + QX_MR - 1) / QX_MR);
                qx_tile(type, mr, pv, pS, pW, kc, x + (size_t)r0 * nxb + i0 / 32, nxb,
                        t->out + (size_t)r0 * n_out + o0, n_out, ncols, i0 > 0);
            }
        }
        if (t->bias)
            for (int r = 0; r < t->n_rows; r++)
                for (int j = 0; j < ncols; j++) t->out[(size_t)r * n_out + o0 + j] += t->bias[o0 + j];
    }
}

/* The parallel-for body: units of t->unit outputs (multiples of 16). */
QX_INLINE void qx_run(int type, void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    const cpu__mm_task *t = task;
    int64_t n_out = t->w->n_out;
    int64_t lo = lo_unit * t->unit, hi = hi_unit * t->unit < n_out ? hi_unit * t->unit : n_out;
    if (t->n_rows <= QX_GEMV_ROWS) qx_gemv_range(type, t, lo, hi);
    else qx_gemm_range(type, t, lo, hi, t->c->scratch[ith].p);
}

static size_t qx_scratch(const be_weight *w, int n_rows)
{
    (void)w, (void)n_rows;
    return CPU__QPANEL_BYTES;
}

#endif
