/*
 * quant_formats.h — the CUDA backend's decoding of the quantised weight types (layouts in
 * model/dtype.h), shared by host and device code like cuda/formats.h: every function is CUDA_HD,
 * so the kernels run the very arithmetic that tests/test_cuda_host.c checks on the CPU against
 * dt_to_f32, bit for bit.
 *
 * The unit of decoding is a run of 8 consecutive weights starting at a multiple of 8: in every
 * layout such a run shares one scale (and min), so its scale bytes are unpacked once for 8
 * values. Each value is formed in f32 in the order dt_to_f32 forms it. Reads are byte by byte:
 * blocks of 18, 22 or 110 bytes leave wider loads unaligned.
 *
 * Callers: the kernels of the quantised matvec, the quantised GEMM and the embedding
 * (cuda/qmatvec_kernels.h, qgemm_kernels.h, gather_kernels.h), their launchers,
 * tests/test_cuda_host.c and cuda/check/quant_emu.cc.
 */
#ifndef KVSERVE_CUDA_QUANT_FORMATS_H
#define KVSERVE_CUDA_QUANT_FORMATS_H

#include <stdint.h>

#include "cuda/formats.h"
#include "model/dtype.h"

/* 1 for the block types cuda_q_dequant8 decodes (the supported quantised types, Q8_0 included). */
static inline CUDA_HD int cuda_q_is_quant(int type)
{
    switch (type) {
    case DT_Q4_0: case DT_Q4_1: case DT_Q5_0: case DT_Q5_1: case DT_Q8_0: case DT_IQ4_NL:
    case DT_Q2_K: case DT_Q3_K: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: case DT_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

/* 1 for the block types the backend stores: the quantised types above, and MXFP4, which only the
 * experts' grouped matvecs read (moe_kernels.h: the integer path, cuda/quant_int.h, and the f32
 * reference through cuda_q_dequant8). */
static inline CUDA_HD int cuda_q_is_block(int type)
{
    return cuda_q_is_quant(type) || type == DT_MXFP4;
}

/* Weights per block and bytes per block of the types above and MXFP4 (0 for others). */
static inline CUDA_HD int cuda_q_block_elems(int type)
{
    switch (type) {
    case DT_Q4_0: case DT_Q4_1: case DT_Q5_0: case DT_Q5_1: case DT_Q8_0: case DT_IQ4_NL: case DT_MXFP4: return 32;
    case DT_Q2_K: case DT_Q3_K: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: case DT_IQ4_XS: return 256;
    default: return 0;
    }
}

static inline CUDA_HD int cuda_q_block_bytes(int type)
{
    switch (type) {
    case DT_Q4_0: return 18;
    case DT_Q4_1: return 20;
    case DT_Q5_0: return 22;
    case DT_Q5_1: return 24;
    case DT_Q8_0: return 34;
    case DT_IQ4_NL: return 18;
    case DT_MXFP4: return 17;
    case DT_Q2_K: return 84;
    case DT_Q3_K: return 110;
    case DT_Q4_K: return 144;
    case DT_Q5_K: return 176;
    case DT_Q6_K: return 210;
    case DT_IQ4_XS: return 136;
    default: return 0;
    }
}

static inline CUDA_HD float cuda_q_f16(const uint8_t *p)
{
    return cuda_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Entry q of the IQ4_NL code book (dt_iq4nl_values), from two 64-bit constants holding its 16
 * bytes, so that device code indexes registers instead of a table in local memory. */
static inline CUDA_HD int cuda_q_iq4nl(int q)
{
    const uint64_t lo = 0xF6EADDCFBFAD9881ull; /* -127 -104 -83 -65 -49 -35 -22 -10, byte 0 first */
    const uint64_t hi = 0x7159453526190D01ull; /* 1 13 25 38 53 69 89 113 */
    return (int8_t)(((q & 8 ? hi : lo) >> (8 * (q & 7))) & 0xFF);
}

/* Entry q of MXFP4's code book (dt_mxfp4_values: the E2M1 values doubled), from two constants. */
static inline CUDA_HD int cuda_q_fp4(int q)
{
    const uint64_t lo = 0x0C08060403020100ull; /* 0 1 2 3 4 6 8 12 */
    const uint64_t hi = 0xF4F8FAFCFDFEFF00ull; /* 0 -1 -2 -3 -4 -6 -8 -12 */
    return (int8_t)(((q & 8 ? hi : lo) >> (8 * (q & 7))) & 0xFF);
}

/* 2^(e − 128) for an E8M0 byte (dt_e8m0_half), exactly. */
static inline CUDA_HD float cuda_q_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return cuda_bits_f32(bits);
}

/* Q4_K / Q5_K sub-block scale and min (dt_k4_scale_min). */
static inline CUDA_HD void cuda_q_k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Legacy blocks (and MXFP4's): weights r .. r+7 (r = 0, 8, 16, 24) of the block at b. */
static inline CUDA_HD void cuda_q_legacy8(int type, const uint8_t *b, int r, float *v)
{
    if (type == DT_MXFP4) { /* code book value × 2^(e − 128), one f32 product as GGML forms it */
        float d = cuda_q_e8m0_half(b[0]);
        for (int k = 0; k < 8; k++) {
            int i = r + k;
            v[k] = (float)cuda_q_fp4(i < 16 ? b[1 + i] & 0xF : b[1 + i - 16] >> 4) * d;
        }
        return;
    }
    float d = cuda_q_f16(b);
    if (type == DT_Q8_0) {
        for (int k = 0; k < 8; k++) v[k] = d * (float)(int8_t)b[2 + r + k];
        return;
    }
    int has_m = type == DT_Q4_1 || type == DT_Q5_1;
    float m = has_m ? cuda_q_f16(b + 2) : 0.0f;
    int five = type == DT_Q5_0 || type == DT_Q5_1;
    const uint8_t *qh = b + (has_m ? 4 : 2);
    const uint8_t *qs = five ? qh + 4 : qh;
    uint32_t h = five ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
    for (int k = 0; k < 8; k++) {
        int i = r + k;
        int q = i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
        if (five) q |= (int)((h >> i) & 1) << 4;
        switch (type) {
        case DT_Q4_0: v[k] = (float)(q - 8) * d; break;
        case DT_Q5_0: v[k] = (float)(q - 16) * d; break;
        case DT_IQ4_NL: v[k] = d * (float)cuda_q_iq4nl(q); break;
        default: v[k] = (float)q * d + m; break; /* Q4_1, Q5_1 */
        }
    }
}

/* K-quant super-blocks: weights r .. r+7 (r a multiple of 8 below 256) of the block at b. */
static inline CUDA_HD void cuda_q_k8(int type, const uint8_t *b, int r, float *v)
{
    int h = r / 128, s = (r % 128) / 32, l0 = r % 32;
    switch (type) {
    case DT_Q2_K: {
        float d = cuda_q_f16(b + 80), dmin = cuda_q_f16(b + 82);
        int sc = b[r / 16];
        float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
        for (int k = 0; k < 8; k++) v[k] = dl * (float)((b[16 + 32 * h + l0 + k] >> (2 * s)) & 3) - ml;
        break;
    }
    case DT_Q3_K: {
        const uint8_t *sc = b + 96;
        int j = r / 16;
        int lo = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
        int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        float dl = cuda_q_f16(b + 108) * (float)((lo | hi << 4) - 32);
        for (int k = 0; k < 8; k++) {
            int l = l0 + k;
            int q = (b[32 + 32 * h + l] >> (2 * s)) & 3;
            if (!(b[l] & (1u << (4 * h + s)))) q -= 4;
            v[k] = dl * (float)q;
        }
        break;
    }
    case DT_Q4_K: case DT_Q5_K: {
        float d = cuda_q_f16(b), dmin = cuda_q_f16(b + 2);
        int c = r / 64, high = (r % 64) >= 32, l = r % 32, sc, m;
        cuda_q_k4_scale_min(b + 4, 2 * c + high, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *qs = b + (type == DT_Q5_K ? 48 : 16);
        for (int k = 0; k < 8; k++) {
            int q = high ? qs[32 * c + l + k] >> 4 : qs[32 * c + l + k] & 0xF;
            if (type == DT_Q5_K) q |= ((b[16 + l + k] >> (2 * c + high)) & 1) << 4;
            v[k] = dl * (float)q - ml;
        }
        break;
    }
    case DT_Q6_K: {
        float d = cuda_q_f16(b + 208);
        float sc = (float)(int8_t)b[192 + 8 * h + l0 / 16 + 2 * s];
        for (int k = 0; k < 8; k++) {
            int l = l0 + k;
            uint8_t lo = b[64 * h + l + 32 * (s & 1)];
            int q = (s < 2 ? lo & 0xF : lo >> 4) | ((b[128 + 32 * h + l] >> (2 * s)) & 3) << 4;
            v[k] = d * sc * (float)(q - 32);
        }
        break;
    }
    default: { /* IQ4_XS */
        int j = r / 32, l = r % 32;
        int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | ((((b[2] | b[3] << 8) >> (2 * j)) & 3) << 4);
        float dl = cuda_q_f16(b) * (float)(ls - 32);
        const uint8_t *qs = b + 8 + 16 * j;
        for (int k = 0; k < 8; k++) {
            int i = l + k;
            v[k] = dl * (float)cuda_q_iq4nl(i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4);
        }
        break;
    }
    }
}

/* Prefill on quantised weights decodes the matrix into F16 tiles of whole rows for cuBLAS, in a
 * scratch buffer of at most max_bytes: the rows per tile (a multiple of 64 when there are that
 * many, at least 1, at most n_out). */
static inline CUDA_HD int64_t cuda_q_tile_rows(int64_t n_in, int64_t n_out, size_t max_bytes)
{
    int64_t rows = (int64_t)(max_bytes / ((size_t)n_in * 2));
    if (rows >= 64) rows -= rows % 64;
    if (rows < 1) rows = 1;
    return rows < n_out ? rows : n_out;
}

/* Bytes of the F16 tile scratch the prefill path of the CUDA backend keeps at most. */
#define CUDA_Q_TILE_BYTES ((size_t)64 << 20)

/* Rows of a matmul up to which quantised weights take the dequantising GEMV (decode); more
 * rows take the F16 tiles and cuBLAS. */
#define CUDA_QGEMV_MAX_ROWS 8

/* Weights i0 .. i0+7 (i0 a multiple of 8) of a row of a quantised type, into v[8]. */
static inline CUDA_HD void cuda_q_dequant8(int type, const uint8_t *row, int64_t i0, float *v)
{
    int be = cuda_q_block_elems(type);
    const uint8_t *b = row + (i0 / be) * cuda_q_block_bytes(type);
    int r = (int)(i0 % be);
    if (be == 32) cuda_q_legacy8(type, b, r, v);
    else cuda_q_k8(type, b, r, v);
}

/* Calls F<T>(args) for the template instance of a runtime type (the emulation programs' switch;
 * the backend reaches the instances through the kernel table's per-type entries, CUDA_Q_FILL).
 * Macros, so that this header stays plain C for the host tests: only C++ callers expand them. */
#define CUDA_Q_DISPATCH(type, F, ...)                                                          \
    do {                                                                                       \
        switch (type) {                                                                        \
        case DT_Q4_0: F<DT_Q4_0>(__VA_ARGS__); break;                                          \
        case DT_Q4_1: F<DT_Q4_1>(__VA_ARGS__); break;                                          \
        case DT_Q5_0: F<DT_Q5_0>(__VA_ARGS__); break;                                          \
        case DT_Q5_1: F<DT_Q5_1>(__VA_ARGS__); break;                                          \
        case DT_Q8_0: F<DT_Q8_0>(__VA_ARGS__); break;                                          \
        case DT_IQ4_NL: F<DT_IQ4_NL>(__VA_ARGS__); break;                                      \
        case DT_Q2_K: F<DT_Q2_K>(__VA_ARGS__); break;                                          \
        case DT_Q3_K: F<DT_Q3_K>(__VA_ARGS__); break;                                          \
        case DT_Q4_K: F<DT_Q4_K>(__VA_ARGS__); break;                                          \
        case DT_Q5_K: F<DT_Q5_K>(__VA_ARGS__); break;                                          \
        case DT_Q6_K: F<DT_Q6_K>(__VA_ARGS__); break;                                          \
        default: F<DT_IQ4_XS>(__VA_ARGS__); break;                                             \
        }                                                                                      \
    } while (0)

/* Sets tab[t] = F<t> for every quantised type t: the per-type entries of the kernel table
 * (cuda/kern.h). */
#define CUDA_Q_FILL(tab, F)                                                                    \
    do {                                                                                       \
        (tab)[DT_Q4_0] = F<DT_Q4_0>;                                                           \
        (tab)[DT_Q4_1] = F<DT_Q4_1>;                                                           \
        (tab)[DT_Q5_0] = F<DT_Q5_0>;                                                           \
        (tab)[DT_Q5_1] = F<DT_Q5_1>;                                                           \
        (tab)[DT_Q8_0] = F<DT_Q8_0>;                                                           \
        (tab)[DT_IQ4_NL] = F<DT_IQ4_NL>;                                                       \
        (tab)[DT_Q2_K] = F<DT_Q2_K>;                                                           \
        (tab)[DT_Q3_K] = F<DT_Q3_K>;                                                           \
        (tab)[DT_Q4_K] = F<DT_Q4_K>;                                                           \
        (tab)[DT_Q5_K] = F<DT_Q5_K>;                                                           \
        (tab)[DT_Q6_K] = F<DT_Q6_K>;                                                           \
        (tab)[DT_IQ4_XS] = F<DT_IQ4_XS>;                                                       \
    } while (0)

#endif
