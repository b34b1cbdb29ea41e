/*
 * quantk_x86.h — the x86 kernels of the super-block types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_XS) against Q8_K activations, and the fill functions of quant_avx2.c and quant_vnni.c for
 * every quantised type (the blocks-of-32 types run quant_x86.h's kernels). Included by those two
 * files only (QX_VNNI 0: AVX2 maddubs + madd; QX_VNNI 1: AVX-512 VNNI).
 *
 * Both compute the second formulation of quant.h bit for bit: the integer sums isum and msum of
 * a super-block are exact in any order, and the two f32 fused multiply-adds per super-block are
 * the reference's.
 *
 *  - GEMV (1 to QX_GEMV_ROWS rows: decode). Per output and super-block, each 32-weight unit is
 *    decoded into one vector (qx_unit), multiplied with the row's 32 activations by maddubs
 *    (int16 pair sums) and then by the unit's two half-group scales in int16 — madd (AVX2) or
 *    vpdpwssd (VNNI) — into 8 int32 lanes that stay unreduced over the whole super-block. Then
 *    the 8 outputs' lanes are reduced together (one hadd tree for isum, one for msum, which is
 *    a madd of the mins with the row's bsum), and the f32 fold runs on 8 outputs at once.
 *
 *  - GEMM (more rows: prefill). A tile of 16 outputs × up to QX_KC inputs is decoded once into a
 *    panel: values [kc/4][16][4] (as quant_x86.h's), per half-group scales [kc/16][16] (AVX2:
 *    int16 pairs for madd; VNNI: int32 for vpmulld), min pairs [kc/32][16] (int16 pairs for madd
 *    against the row's bsum pairs), and d, e [kc/256][16]. The microkernel accumulates each
 *    super-block's isum and msum in int32 per row and folds them once per super-block.
 */
#ifndef KVSERVE_CPU_QUANTK_X86_H
#define KVSERVE_CPU_QUANTK_X86_H

#include "cpu/quant_x86.h"

/* Bytes of the GEMM panel: values, scales, min pairs, d and e. */
#define QK_PANEL(kc) ((size_t)(kc) * 16 + (size_t)(kc) / 16 * 16 * 4 + (size_t)(kc) / 32 * 16 * 4 + (size_t)(kc) / 256 * 16 * 8)
_Static_assert(QK_PANEL(QX_KC) <= CPU__QPANEL_BYTES, "K-quant panel scratch");

/* ---- per super-block factors and scales ------------------------------------------------------ */

/* d and e of one super-block of 8 outputs (output j's block at b0 + idx[j]), as cpu__qk_scales
 * forms them: f16 → f32 exact, e = −dmin or −d (E untouched for IQ4_XS). */
QX_INLINE void qk_factors8(int type, const uint8_t *b0, __m256i idx, __m256 *D, __m256 *E)
{
    const __m256 neg = _mm256_set1_ps(-0.0f);
    switch (type) {
    case DT_Q2_K: case DT_Q4_K: case DT_Q5_K: {
        __m256i v = qx_gather(b0, idx, type == DT_Q2_K ? 80 : 0);
        *D = qx_half(v, 0), *E = _mm256_xor_ps(qx_half(v, 1), neg);
        break;
    }
    case DT_Q3_K: case DT_Q6_K: /* d in the block's last 2 bytes: the dword ending there */
        *D = qx_half(qx_gather(b0, idx, type == DT_Q3_K ? 106 : 206), 1), *E = _mm256_xor_ps(*D, neg);
        break;
    default: *D = qx_half(qx_gather(b0, idx, 0), 0); break; /* IQ4_XS */
    }
}

/* The 16 half-group scales and mins of the super-block at b as int16 vectors in natural order
 * (lane h: half-group h), in SIMD: the values cpu__qk_scales gives. */
QX_INLINE void qk_scales16(int type, const uint8_t *b, __m256i *sc, __m256i *m)
{
    if (type == DT_Q4_K || type == DT_Q5_K) {
        /* the 12 bytes s: sc_j = s[j] & 63, m_j = s[j+4] & 63 (j < 4); sc_j = (s[j+4] & 15) |
         * (s[j-4] >> 6) << 4, m_j = (s[j+4] >> 4) | (s[j] >> 6) << 4 (j ≥ 4) */
        uint32_t u[3], a, c, lo_sc, hi_sc, lo_m, hi_m;
        memcpy(u, b + 4, 12);
        a = u[0], c = u[1];
        lo_sc = a & 0x3F3F3F3F;
        lo_m = c & 0x3F3F3F3F;
        hi_sc = (u[2] & 0x0F0F0F0F) | ((a >> 2) & 0x30303030);
        hi_m = ((u[2] >> 4) & 0x0F0F0F0F) | ((c >> 2) & 0x30303030);
        __m128i s8 = _mm_setr_epi32((int)lo_sc, (int)hi_sc, (int)lo_m, (int)hi_m); /* sc0..7, m0..7 */
        const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        *sc = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(s8, dup));
        *m = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_srli_si128(s8, 8), dup));
    } else if (type == DT_Q6_K) {
        *sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
        *m = _mm256_slli_epi16(*sc, 5);
    } else if (type == DT_Q2_K) { /* byte h: sc low nibble, m high nibble */
        __m128i s8 = _mm_loadu_si128((const __m128i *)b), m4 = _mm_set1_epi8(0x0F);
        *sc = _mm256_cvtepu8_epi16(_mm_and_si128(s8, m4));
        *m = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));
    } else if (type == DT_Q3_K) {
        /* 12 bytes s: the low 4 bits of sc_h are nibble (h / 8) of s[h % 8], the high 2 bits
         * bits 2(h / 4) of s[8 + h % 4]; per dword of 4 scales at once */
        uint32_t a[3];
        memcpy(a, b + 96, 12);
        const uint32_t m4 = 0x0F0F0F0F, m2 = 0x03030303;
        __m128i s8 = _mm_setr_epi32((int)((a[0] & m4) | (a[2] & m2) << 4), (int)((a[1] & m4) | ((a[2] >> 2) & m2) << 4),
                                    (int)(((a[0] >> 4) & m4) | ((a[2] >> 4) & m2) << 4),
                                    (int)(((a[1] >> 4) & m4) | ((a[2] >> 6) & m2) << 4));
        *sc = _mm256_cvtepi8_epi16(_mm_sub_epi8(s8, _mm_set1_epi8(32)));
        *m = _mm256_slli_epi16(*sc, 2);
    } else { /* IQ4_XS: ls_g = nibble g of scales_l | bits 2g..2g+1 of scales_h << 4, lane g */
        uint32_t sl;
        memcpy(&sl, b + 4, 4);
        __m256i lo = _mm256_srlv_epi32(_mm256_set1_epi32((int)sl), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(cpu__qu16(b + 2)), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
        __m256i ls = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xF)),
                                     _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4));
        __m256i g = _mm256_sub_epi32(ls, _mm256_set1_epi32(32)); /* sc_g, then the pair (sc_g, sc_g) */
        *sc = _mm256_or_si256(_mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(g, 16));
        *m = _mm256_setzero_si256();
    }
}

/* The natural-order scales rearranged for qk_unit_scales: [sc0 sc2 … sc14 | sc1 sc3 … sc15]. */
QX_INLINE __m256i qk_even_odd(__m256i sc)
{
    const __m256i eo = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(sc, eo), 0xD8);
}

/* The int16 scale of each maddubs lane of unit k (lanes 0-7: inputs 32k..32k+15, half 2k;
 * lanes 8-15: half 2k+1) from the even/odd arrangement. */
QX_INLINE __m256i qk_unit_scales(__m256i eo, int k)
{
    return _mm256_shuffle_epi8(eo, _mm256_set1_epi16((short)(0x0100 * (2 * k + 1) + 2 * k)));
}

/* Σ_i v_i·q_i per int16 pair of 32 bytes: v unsigned ≤ 63, or (sgn) signed with va = |v|. */
QX_INLINE __m256i qk_pairs(__m256i v, __m256i va, __m256i q, int sgn)
{
    return sgn ? _mm256_maddubs_epi16(va, _mm256_sign_epi8(q, v)) : _mm256_maddubs_epi16(v, q);
}

/* acc + Σ of each two int16 pair sums times their scales, as int32 lanes. */
QX_INLINE __m256i qk_scaled(__m256i acc, __m256i p, __m256i s)
{
#if QX_VNNI
    return _mm256_dpwssd_epi32(acc, p, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

/* t[0..4) = hadd pairs of 8 outputs' lane vectors: returns each output's lane sum, output j in
 * lane j (as qx_reduce8). */
QX_INLINE __m256i qk_sum8(const __m256i *t)
{
    __m256i u0 = _mm256_hadd_epi32(t[0], t[1]), u1 = _mm256_hadd_epi32(t[2], t[3]);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* ---- GEMV -------------------------------------------------------------------------------- */
/* Byte b of each dword of v into bits 0-7 and 16-23 of that dword (zero elsewhere): an int16
 * pair (x, x) for madd, from unsigned bytes. */
QX_INLINE __m256i qk_pair_of_byte(__m256i v, int b)
{
    const int z = -1;
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(b, z, b, z, 4 + b, z, 4 + b, z, 8 + b, z, 8 + b, z, 12 + b, z, 12 + b, z,
                                                   b, z, b, z, 4 + b, z, 4 + b, z, 8 + b, z, 8 + b, z, 12 + b, z, 12 + b, z));
}

/* Bytes b0 and b1 of each dword of v as the int16 pair (v.b0, v.b1). */
QX_INLINE __m256i qk_pair_of_bytes(__m256i v, int b0, int b1)
{
    const int z = -1;
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(b0, z, b1, z, 4 + b0, z, 4 + b1, z, 8 + b0, z, 8 + b1, z, 12 + b0, z, 12 + b1, z,
                                                   b0, z, b1, z, 4 + b0, z, 4 + b1, z, 8 + b0, z, 8 + b1, z, 12 + b0, z, 12 + b1, z));
}

/* The scales of the 8 groups of 32 of one super-block of 8 outputs (Q4_K, Q5_K, IQ4_XS; output
 * j's block at b0 + idx[j]), lane j output j, as cpu__qk_scales gives them. For IQ4_XS, sp[g] =
 * the int16 pair (sc_g, sc_g) of each output (a dword that broadcasts to a unit's madd scales);
 * for Q4_K/Q5_K the scale and min bytes, 4 per dword: k4[0] = sc_0..3, k4[1] = sc_4..7,
 * k4[2] = m_0..3, k4[3] = m_4..7 (qk_pair_of_byte(s) makes the pairs). */
QX_INLINE void qk_scales32x8(int type, const uint8_t *b0, __m256i idx, __m256i *sp, __m256i *k4)
{
    if (type == DT_IQ4_XS) {
        __m256i sh = _mm256_srli_epi32(qx_gather(b0, idx, 0), 16), sl = qx_gather(b0, idx, 4);
        for (int g = 0; g < 8; g++) {
            __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * g), _mm256_set1_epi32(0xF));
            __m256i hi = _mm256_and_si256(_mm256_srli_epi32(sh, 2 * g), _mm256_set1_epi32(3));
            __m256i sc = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
            sc = _mm256_and_si256(sc, _mm256_set1_epi32(0xFFFF));
            sp[g] = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
        }
        return;
    }
    /* Q4_K, Q5_K: the 12 bytes s, per dword of 4 (as qk_scales16's, lane-wise) */
    __m256i a = qx_gather(b0, idx, 4), c = qx_gather(b0, idx, 8), u2 = qx_gather(b0, idx, 12);
    const __m256i m6 = _mm256_set1_epi8(0x3F), m4 = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    k4[0] = _mm256_and_si256(a, m6), k4[2] = _mm256_and_si256(c, m6);
    k4[1] = _mm256_or_si256(_mm256_and_si256(u2, m4), _mm256_and_si256(_mm256_srli_epi32(a, 2), top));
    k4[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4), _mm256_and_si256(_mm256_srli_epi32(c, 2), top));
}

/* qk_gemv8 for the types with groups of 32 (Q4_K, Q5_K, IQ4_XS): the scales decoded for 8
 * outputs at once, each unit's scale a broadcast load, msum lane-wise (madd of the min pairs with
 * the row's sums per 32) — no per-output scale work and no second reduction. */
QX_INLINE void qk_gemv8_g32(int type, int R, const uint8_t *const *rp, int64_t n_in, const cpu__q8k *x, int64_t nxb,
                            float *res)
{
    const int sgn = type == DT_IQ4_XS, has_m = !sgn;
    const size_t bb = dt_block_bytes(type);
    const __m256i idx = qx_offsets(rp);
    __m256 acc[QX_GEMV_ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_in / 256; b++) {
        int32_t scd[8][8];
        __m256i mp[4], ti[QX_GEMV_ROWS][4], pi[QX_GEMV_ROWS];
        qx_prefetch_rows(rp[0] + 8 * (size_t)(n_in / 256) * bb, 8 * (size_t)(n_in / 256) * bb, b, n_in / 256);
        if (sgn) {
            __m256i sp[8];
            qk_scales32x8(type, rp[0] + b * bb, idx, sp, NULL);
            for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)scd[g], sp[g]);
        } else {
            __m256i k4[4];
            qk_scales32x8(type, rp[0] + b * bb, idx, NULL, k4);
            for (int g = 0; g < 4; g++) {
                _mm256_storeu_si256((__m256i *)scd[g], qk_pair_of_byte(k4[0], g));
                _mm256_storeu_si256((__m256i *)scd[4 + g], qk_pair_of_byte(k4[1], g));
            }
            mp[0] = qk_pair_of_bytes(k4[2], 0, 1), mp[1] = qk_pair_of_bytes(k4[2], 2, 3); /* (m_2q, m_2q+1) */
            mp[2] = qk_pair_of_bytes(k4[3], 0, 1), mp[3] = qk_pair_of_bytes(k4[3], 2, 3);
        }
        /* the compiler would keep scd in registers and extract each scale with two shuffles;
         * through memory each is one broadcast load (a load port, not the shuffle port) */
        __asm__ volatile("" : : "r"(scd) : "memory");
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const uint8_t *blk = rp[j] + b * bb;
            __m256i is[QX_GEMV_ROWS];
            for (int r = 0; r < R; r++) is[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m256i v = qx_unit(type, blk, k), va = sgn ? _mm256_abs_epi8(v) : v, s = _mm256_set1_epi32(scd[k][j]);
                for (int r = 0; r < R; r++)
                    is[r] = qk_scaled(is[r], qk_pairs(v, va, qx_load((const uint8_t *)x[r * nxb + b].q + 32 * k), sgn), s);
            }
            for (int r = 0; r < R; r++) {
                if (j & 1) ti[r][j / 2] = _mm256_hadd_epi32(pi[r], is[r]);
                else pi[r] = is[r];
            }
        }
        __m256 D, E = _mm256_setzero_ps();
        qk_factors8(type, rp[0] + b * bb, idx, &D, &E);
        for (int r = 0; r < R; r++) {
            const cpu__q8k *xb = &x[r * nxb + b];
            __m256 dx = _mm256_set1_ps(xb->d);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(qk_sum8(ti[r])), _mm256_mul_ps(D, dx), acc[r]);
            if (!has_m) continue;
            __m256i ms = _mm256_setzero_si256();
            for (int q = 0; q < 4; q++) {
                const int16_t *bs = xb->bsum + 4 * q; /* the sums of groups 2q and 2q + 1 */
                uint32_t pr = (uint16_t)(bs[0] + bs[1]) | (uint32_t)(uint16_t)(bs[2] + bs[3]) << 16;
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[q], _mm256_set1_epi32((int)pr)));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(E, dx), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(res + 8 * r, acc[r]);
}


/* res[r][j] = the formulation for output row rp[j] (j < 8) against activation row r (R rows,
 * x rows nxb blocks apart), bias not added. */
QX_INLINE void qk_gemv8(int type, int R, const uint8_t *const *rp, int64_t n_in, const cpu__q8k *x, int64_t nxb,
                        float *res)
{
    if (cpu__qtraits_of(type).group == 32) {
        qk_gemv8_g32(type, R, rp, n_in, x, nxb, res);
        return;
    }
    const int sgn = type == DT_IQ4_XS, has_m = !sgn;
    const size_t bb = dt_block_bytes(type);
    const __m256i idx = qx_offsets(rp);
    __m256 acc[QX_GEMV_ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_in / 256; b++) {
        __m256i bs[QX_GEMV_ROWS], ti[QX_GEMV_ROWS][4], tm[QX_GEMV_ROWS][4], pi[QX_GEMV_ROWS], pm[QX_GEMV_ROWS];
        qx_prefetch_rows(rp[0] + 8 * (size_t)(n_in / 256) * bb, 8 * (size_t)(n_in / 256) * bb, b, n_in / 256);
        for (int r = 0; r < R; r++) bs[r] = _mm256_loadu_si256((const __m256i *)x[r * nxb + b].bsum);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const uint8_t *blk = rp[j] + b * bb;
            __m256i sc, mn, is[QX_GEMV_ROWS];
            qk_scales16(type, blk, &sc, &mn);
            __m256i eo = qk_even_odd(sc);
            for (int r = 0; r < R; r++) is[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m256i v = qx_unit(type, blk, k), va = sgn ? _mm256_abs_epi8(v) : v, s = qk_unit_scales(eo, k);
                for (int r = 0; r < R; r++)
                    is[r] = qk_scaled(is[r], qk_pairs(v, va, qx_load((const uint8_t *)x[r * nxb + b].q + 32 * k), sgn), s);
            }
            for (int r = 0; r < R; r++) {
                __m256i ml = _mm256_madd_epi16(mn, bs[r]);
                if (j & 1) {
                    ti[r][j / 2] = _mm256_hadd_epi32(pi[r], is[r]);
                    tm[r][j / 2] = _mm256_hadd_epi32(pm[r], ml);
                } else {
                    pi[r] = is[r], pm[r] = ml;
                }
            }
        }
        __m256 D, E = _mm256_setzero_ps();
        qk_factors8(type, rp[0] + b * bb, idx, &D, &E);
        for (int r = 0; r < R; r++) {
            __m256 dx = _mm256_set1_ps(x[r * nxb + b].d);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(qk_sum8(ti[r])), _mm256_mul_ps(D, dx), acc[r]);
            if (has_m) acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(qk_sum8(tm[r])), _mm256_mul_ps(E, dx), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(res + 8 * r, acc[r]);
}

/* GEMV over outputs [lo, hi) for every row (n_rows ≤ QX_GEMV_ROWS). */
QX_INLINE void qk_gemv_range(int type, const cpu__mm_task *t, int64_t lo, int64_t hi)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out, nxb = n_in / 256;
    size_t rb = dt_row_bytes(type, n_in);
    for (int64_t o0 = lo; o0 < hi; o0 += 8) {
        const uint8_t *rp[8];
        for (int j = 0; j < 8; j++) /* past the end: repeat the last row, its results are dropped */
            rp[j] = (const uint8_t *)w->data + (size_t)(o0 + j < hi ? o0 + j : hi - 1) * rb;
        float res[QX_GEMV_ROWS * 8];
        switch (t->n_rows) {
        case 1: qk_gemv8(type, 1, rp, n_in, t->xk, nxb, res); break;
        case 2: qk_gemv8(type, 2, rp, n_in, t->xk, nxb, res); break;
        case 3: qk_gemv8(type, 3, rp, n_in, t->xk, nxb, res); break;
        default: qk_gemv8(type, 4, rp, n_in, t->xk, nxb, res); break;
        }
        for (int r = 0; r < t->n_rows; r++)
            for (int j = 0; j < 8 && o0 + j < hi; j++)
                t->out[(size_t)r * n_out + o0 + j] = res[8 * r + j] + (t->bias ? t->bias[o0 + j] : 0.0f);
    }
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

/* Where the parts of a panel of kc inputs live. */
typedef struct qk_panel {
    uint8_t *v;  /* [kc/4][16][4] values */
    int32_t *sc; /* [kc/16][16] half-group scales: (sc | sc << 16) on AVX2, sc on VNNI */
    int32_t *mp; /* [kc/32][16] min pairs (m_2p | m_2p+1 << 16) */
    float *d;    /* [kc/256][16] */
    float *e;    /* [kc/256][16] */
} qk_panel;

QX_INLINE qk_panel qk_panel_at(uint8_t *scratch)
{
    qk_panel p;
    p.v = scratch;
    p.sc = (int32_t *)(scratch + (size_t)QX_KC * 16);
    p.mp = p.sc + QX_KC / 16 * 16;
    p.d = (float *)(p.mp + QX_KC / 32 * 16);
    p.e = p.d + QX_KC / 256 * 16;
    return p;
}

/* The scales, min pairs, d and e of super-block lb of 8 outputs (rows rp[j] + off) into panel
 * columns 8h .. 8h + 7: lane-wise for the groups of 32 (qk_scales32x8), else each output's
 * natural-order int16 vectors (qk_scales16) transposed 8 outputs at a time, so that every panel
 * row is one store. */
QX_INLINE void qk_unpack_scales8(int type, const uint8_t *const *rp, __m256i idx, size_t off, const qk_panel *p, int lb,
                                 int h)
{
    __m256 D, E = _mm256_setzero_ps();
    qk_factors8(type, rp[0] + off, idx, &D, &E);
    _mm256_storeu_ps(p->d + lb * 16 + 8 * h, D);
    _mm256_storeu_ps(p->e + lb * 16 + 8 * h, E);
    if (cpu__qtraits_of(type).group == 32) { /* lane-wise already: no transposes */
        __m256i sp[8], k4[4];
        qk_scales32x8(type, rp[0] + off, idx, sp, k4);
        for (int g = 0; g < 8; g++) {
            int iq = type == DT_IQ4_XS;
            __m256i pr = iq ? sp[g] : qk_pair_of_byte(k4[g / 4], g % 4);
            __m256i mh = iq ? _mm256_setzero_si256() : qk_pair_of_byte(k4[2 + g / 4], g % 4); /* (m_g, m_g) */
            __m256i s = QX_VNNI ? _mm256_srai_epi32(_mm256_slli_epi32(pr, 16), 16) : pr;
            _mm256_storeu_si256((__m256i *)(p->sc + (lb * 16 + 2 * g) * 16 + 8 * h), s);
            _mm256_storeu_si256((__m256i *)(p->sc + (lb * 16 + 2 * g + 1) * 16 + 8 * h), s);
            _mm256_storeu_si256((__m256i *)(p->mp + (lb * 8 + g) * 16 + 8 * h), mh);
        }
        return;
    }
    __m256i lo[8], hi[8], mp[8], t[8];
    for (int j = 0; j < 8; j++) {
        __m256i sc, m;
        qk_scales16(type, rp[j] + off, &sc, &m);
#if QX_VNNI /* sc as int32 */
        lo[j] = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(sc));
        hi[j] = _mm256_cvtepi16_epi32(_mm256_extracti128_si256(sc, 1));
#else /* sc as the int16 pair (sc, sc) */
        __m256i ul = _mm256_unpacklo_epi16(sc, sc), uh = _mm256_unpackhi_epi16(sc, sc);
        lo[j] = _mm256_permute2x128_si256(ul, uh, 0x20);
        hi[j] = _mm256_permute2x128_si256(ul, uh, 0x31);
#endif
        mp[j] = m; /* dword q: the int16 pair (m_2q, m_2q+1) */
    }
    qx_transpose8(lo, t);
    for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(p->sc + (lb * 16 + k) * 16 + 8 * h), t[k]);
    qx_transpose8(hi, t);
    for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(p->sc + (lb * 16 + 8 + k) * 16 + 8 * h), t[k]);
    qx_transpose8(mp, t);
    for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(p->mp + (lb * 8 + k) * 16 + 8 * h), t[k]);
}

/* The panel of outputs [o0, o0 + 16) × inputs [i0, i0 + kc). Outputs past n_out repeat the last row. */
QX_INLINE void qk_unpack(int type, const be_weight *w, int64_t o0, int64_t i0, int kc, const qk_panel *p)
{
    const size_t bb = dt_block_bytes(type), rb = dt_row_bytes(type, w->n_in);
    const uint8_t *rp[16];
    for (int j = 0; j < 16; j++)
        rp[j] = (const uint8_t *)w->data + (size_t)(o0 + j < w->n_out ? o0 + j : w->n_out - 1) * rb +
                (size_t)(i0 / 256) * bb;
    const __m256i idx[2] = {qx_offsets(rp), qx_offsets(rp + 8)};
    for (int lb = 0; lb < kc / 256; lb++)
        for (int h = 0; h < 2; h++) /* outputs 8h .. 8h + 7 */
            qk_unpack_scales8(type, rp + 8 * h, idx[h], (size_t)lb * bb, p, lb, h);
    for (int lb = 0; lb < kc / 256; lb++) qx_unpack_values(type, rp, (size_t)lb * bb, p->v + (size_t)lb * 64 * 64);
}

QX_INLINE int32_t qk_dword(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if QX_VNNI
/* c[r][0 .. ncols) (+)= rows r < mr of the slice (row r's first block of the slice at
 * x + r·ldx) against the panel (16 outputs, kc inputs). */
QX_INLINE void qk_mk(int type, int mr, const qk_panel *p, int kc, const cpu__q8k *x, int64_t ldx, float *c,
                     int64_t ldc, int ncols, int load_c)
{
    const int sgn = type == DT_IQ4_XS, G = cpu__qtraits_of(type).group;
    __mmask16 msk = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) acc[r] = load_c ? _mm512_maskz_loadu_ps(msk, c + r * ldc) : _mm512_setzero_ps();
    for (int lb = 0; lb < kc / 256; lb++) {
        __m512i is[8];
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) is[r] = _mm512_setzero_si512();
        for (int g = 0; g < 256 / G; g++) {
            __m512i ia[8];
#pragma GCC unroll 8
            for (int r = 0; r < mr; r++) {
                const int16_t *bs = x[r * ldx + lb].bsum;
                ia[r] = sgn ? _mm512_set1_epi32(-128 * (bs[2 * g] + bs[2 * g + 1])) : _mm512_setzero_si512();
            }
#pragma GCC unroll 8
            for (int s = 0; s < G / 4; s++) {
                int st = (lb * 256 + g * G) / 4 + s;
                __m512i wv = _mm512_loadu_si512((const void *)(p->v + (size_t)st * 64));
#pragma GCC unroll 8
                for (int r = 0; r < mr; r++)
                    ia[r] = _mm512_dpbusd_epi32(ia[r], wv, _mm512_set1_epi32(qk_dword(x[r * ldx + lb].q + 4 * (st % 64))));
            }
            __m512i scg = _mm512_loadu_si512((const void *)(p->sc + (lb * 16 + g * (G / 16)) * 16));
#pragma GCC unroll 8
            for (int r = 0; r < mr; r++) is[r] = _mm512_add_epi32(is[r], _mm512_mullo_epi32(ia[r], scg));
        }
        __m512 D = _mm512_loadu_ps(p->d + lb * 16), E = _mm512_loadu_ps(p->e + lb * 16);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r]), _mm512_mul_ps(D, _mm512_set1_ps(x[r * ldx + lb].d)), acc[r]);
        if (sgn) continue;
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) is[r] = _mm512_setzero_si512();
        for (int q = 0; q < 8; q++) {
            __m512i mp = _mm512_loadu_si512((const void *)(p->mp + (lb * 8 + q) * 16));
#pragma GCC unroll 8
            for (int r = 0; r < mr; r++)
                is[r] = _mm512_dpwssd_epi32(is[r], mp, _mm512_set1_epi32(qk_dword(x[r * ldx + lb].bsum + 2 * q)));
        }
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r]), _mm512_mul_ps(E, _mm512_set1_ps(x[r * ldx + lb].d)), acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) _mm512_mask_storeu_ps(c + r * ldc, msk, acc[r]);
}

QX_INLINE void qk_tile(int type, int mr, const qk_panel *p, int kc, const cpu__q8k *x, int64_t ldx, float *c,
                       int64_t ldc, int ncols, int load_c)
{
#define QK_MK(R) qk_mk(type, R, p, kc, x, ldx, c, ldc, ncols, load_c)
    switch (mr) {
    case 1: QK_MK(1); break;
    case 2: QK_MK(2); break;
    case 3: QK_MK(3); break;
    case 4: QK_MK(4); break;
    case 5: QK_MK(5); break;
    case 6: QK_MK(6); break;
    case 7: QK_MK(7); break;
    default: QK_MK(8); break;
    }
#undef QK_MK
}
#else
/* AVX2: one half h (8 outputs) of the panel; otherwise as the VNNI microkernel. */
QX_INLINE void qk_mk(int type, int mr, int h, const qk_panel *p, int kc, const cpu__q8k *x, int64_t ldx, float *c,
                     int64_t ldc, int ncols, int load_c)
{
    const int sgn = type == DT_IQ4_XS;
    __m256i msk = _mm256_cmpgt_epi32(_mm256_set1_epi32(ncols), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) acc[r] = load_c ? _mm256_maskload_ps(c + r * ldc, msk) : _mm256_setzero_ps();
    for (int lb = 0; lb < kc / 256; lb++) {
        __m256i is[4];
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) is[r] = _mm256_setzero_si256();
        for (int hg = 0; hg < 16; hg++) {
            __m256i scv = _mm256_loadu_si256((const __m256i *)(p->sc + (lb * 16 + hg) * 16 + 8 * h));
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                int st = lb * 64 + hg * 4 + s;
                __m256i wv = qx_load(p->v + (size_t)st * 64 + 32 * h), wa = sgn ? _mm256_abs_epi8(wv) : wv;
#pragma GCC unroll 4
                for (int r = 0; r < mr; r++) {
                    __m256i q = _mm256_set1_epi32(qk_dword(x[r * ldx + lb].q + 4 * (st % 64)));
                    is[r] = qk_scaled(is[r], qk_pairs(wv, wa, q, sgn), scv);
                }
            }
        }
        __m256 D = _mm256_loadu_ps(p->d + lb * 16 + 8 * h), E = _mm256_loadu_ps(p->e + lb * 16 + 8 * h);
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r]), _mm256_mul_ps(D, _mm256_set1_ps(x[r * ldx + lb].d)), acc[r]);
        if (sgn) continue;
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) is[r] = _mm256_setzero_si256();
        for (int q = 0; q < 8; q++) {
            __m256i mp = _mm256_loadu_si256((const __m256i *)(p->mp + (lb * 8 + q) * 16 + 8 * h));
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++)
                is[r] = _mm256_add_epi32(is[r], _mm256_madd_epi16(mp, _mm256_set1_epi32(qk_dword(x[r * ldx + lb].bsum + 2 * q))));
        }
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r]), _mm256_mul_ps(E, _mm256_set1_ps(x[r * ldx + lb].d)), acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) _mm256_maskstore_ps(c + r * ldc, msk, acc[r]);
}

QX_INLINE void qk_tile(int type, int mr, const qk_panel *p, int kc, const cpu__q8k *x, int64_t ldx, float *c,
                       int64_t ldc, int ncols, int load_c)
{
    for (int h = 0; h < 2 && ncols > 8 * h; h++) {
#define QK_MK(R) qk_mk(type, R, h, p, kc, x, ldx, c + 8 * h, ldc, ncols - 8 * h, load_c)
        switch (mr) {
        case 1: QK_MK(1); break;
        case 2: QK_MK(2); break;
        case 3: QK_MK(3); break;
        default: QK_MK(4); break;
        }
#undef QK_MK
    }
}
#endif

/* GEMM over outputs [lo, hi) for every row; scratch holds one panel (CPU__QPANEL_BYTES). */
QX_INLINE void qk_gemm_range(int type, const cpu__mm_task *t, int64_t lo, int64_t hi, uint8_t *scratch)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out, nxb = n_in / 256;
    qk_panel p = qk_panel_at(scratch);
    for (int64_t o0 = lo; o0 < hi; o0 += 16) {
        int ncols = hi - o0 < 16 ? (int)(hi - o0) : 16;
        for (int64_t i0 = 0; i0 < n_in; i0 += QX_KC) {
            int kc = n_in - i0 < QX_KC ? (int)(n_in - i0) : QX_KC;
            qk_unpack(type, w, o0, i0, kc, &p);
            for (int r0 = 0; r0 < t->n_rows; r0 += QX_MR) {
                int mr = t->n_rows - r0 < QX_MR ? t->n_rows - r0 : QX_MR;
                qx_prefetch_next(type, w, o0, i0, hi, r0 / QX_MR, (t->n_rows + QX_MR - 1) / QX_MR);
                qk_tile(type, mr, &p, kc, t->xk + (size_t)r0 * nxb + i0 / 256, nxb, t->out + (size_t)r0 * n_out + o0,
                        n_out, ncols, i0 > 0);
            }
        }
        if (t->bias)
            for (int r = 0; r < t->n_rows; r++)
                for (int j = 0; j < ncols; j++) t->out[(size_t)r * n_out + o0 + j] += t->bias[o0 + j];
    }
}

/* The parallel-for body of every quantised type: units of t->unit outputs (multiples of 16). */
QX_INLINE void qk_run(int type, void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    const cpu__mm_task *t = task;
    if (!cpu__qk_is_super(type)) {
        qx_run(type, task, lo_unit, hi_unit, ith);
        return;
    }
    int64_t n_out = t->w->n_out;
    int64_t lo = lo_unit * t->unit, hi = hi_unit * t->unit < n_out ? hi_unit * t->unit : n_out;
    if (t->n_rows <= QX_GEMV_ROWS) qk_gemv_range(type, t, lo, hi);
    else qk_gemm_range(type, t, lo, hi, t->c->scratch[ith].p);
}

/* One specialised run per type, and the fill function that puts them in the table:
 * QX_KERNELS(suffix, level) defines cpu__quant_fill_<suffix>, which also runs QX_FILL_EXTRA(k)
 * (a file's other entries, e.g. its activation quantiser). The dot (one output, the table's
 * fallback) stays the scalar reference: the plain run serves every row count. */
#ifndef QX_FILL_EXTRA
#define QX_FILL_EXTRA(k) (void)(k)
#endif
#define QX_ONE(T)                                                                             \
    static void qx_run_##T(void *task, int64_t lo, int64_t hi, int ith)                       \
    {                                                                                         \
        qk_run(DT_##T, task, lo, hi, ith);                                                    \
    }
#define QX_KERNELS(suffix, level)                                                             \
    QX_ONE(Q4_0) QX_ONE(Q4_1) QX_ONE(Q5_0) QX_ONE(Q5_1) QX_ONE(IQ4_NL) QX_ONE(Q2_K)            \
    QX_ONE(Q3_K) QX_ONE(Q4_K) QX_ONE(Q5_K) QX_ONE(Q6_K) QX_ONE(IQ4_XS) QX_ONE(MXFP4)           \
    void cpu__quant_fill_##suffix(cpu__kern *k)                                               \
    {                                                                                         \
        const cpu__range_fn runs[CPU__QUANT_N_TYPES] = {                                      \
            qx_run_Q4_0, qx_run_Q4_1, qx_run_Q5_0, qx_run_Q5_1, qx_run_IQ4_NL, qx_run_Q2_K,   \
            qx_run_Q3_K, qx_run_Q4_K, qx_run_Q5_K, qx_run_Q6_K, qx_run_IQ4_XS, qx_run_MXFP4}; \
        for (int i = 0; i < CPU__QUANT_N_TYPES; i++)                                          \
            k->mm[cpu__quant_types[i]].plain = (cpu__mm_plain){                               \
                .isa = level, .min_rows = 1, .align = 16, .scratch = qx_scratch, .run = runs[i]}; \
        QX_FILL_EXTRA(k);                                                                     \
    }

#endif
