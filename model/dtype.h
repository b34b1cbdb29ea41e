/*
 * dtype.h — tensor element types as GGUF numbers them, their block layouts, and exact scalar
 * conversions.
 *
 * Shared by engine/ (loading, reference dequantisation), cpu/ and cuda/ (host side), and the
 * tests. The layouts are GGML's, byte for byte (little-endian; "f16" is IEEE binary16 bits).
 * Each quantised type stores a row of n weights (n a multiple of its block size) as n / QK
 * consecutive blocks; within a block, weight i is reconstructed as below.
 *
 * Legacy types, blocks of 32 weights. qs packs two 4-bit values per byte: byte j holds weight j
 * in its low nibble and weight j + 16 in its high nibble. Q5 types keep the fifth bit of weight i
 * in bit i of qh (a little-endian uint32).
 *   Q4_0   18 B  { f16 d; u8 qs[16]; }                 w = d · (q − 8),   q ∈ 0..15
 *   Q4_1   20 B  { f16 d, m; u8 qs[16]; }              w = d · q + m,     q ∈ 0..15
 *   Q5_0   22 B  { f16 d; u8 qh[4]; u8 qs[16]; }       w = d · (q − 16),  q ∈ 0..31
 *   Q5_1   24 B  { f16 d, m; u8 qh[4]; u8 qs[16]; }    w = d · q + m,     q ∈ 0..31
 *   Q8_0   34 B  { f16 d; i8 qs[32]; }                 w = d · q
 *   IQ4_NL 18 B  { f16 d; u8 qs[16]; }                 w = d · K[q], K = dt_iq4nl_values (a
 *                                                      non-uniform 16-entry table), nibbles as Q4_0
 *   MXFP4  17 B  { u8 e; u8 qs[16]; }                  w = 2^(e − 128) · K[q], K = dt_mxfp4_values
 *                                                      (twice the E2M1 values), nibbles as Q4_0:
 *                                                      OCP microscaling FP4 with an E8M0 scale
 *
 * K-quants, super-blocks of 256 weights split into sub-blocks of 16 or 32 that each carry a
 * small integer scale (and min) relative to the super-block's f16 d (and dmin).
 *   Q2_K   84 B  { u8 scales[16]; u8 qs[64]; f16 d, dmin; }
 *          16 sub-blocks of 16; scales[j] = sc | m << 4 (4 bits each); w = d·sc·q − dmin·m,
 *          q ∈ 0..3. The 2-bit values of each half (128 weights) lie in 32 bytes qs[32h ..):
 *          weight 128h + 32s + l (s = 0..3, l = 0..31) is bits 2s..2s+1 of qs[32h + l].
 *   Q3_K  110 B  { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }
 *          16 sub-blocks of 16; 6-bit scales (sc − 32, signed) packed in 12 bytes: the low 4 bits
 *          of scale j < 8 are the low nibble of scales[j], of scale j ≥ 8 the high nibble of
 *          scales[j − 8]; its high 2 bits are bits 2(j % 4)..+1 of scales[8 + j / 4].
 *          Low 2 bits of q as Q2_K's; bit 2 of weight 128h + 32s + l is bit 4h + s of hmask[l];
 *          w = d · (sc − 32) · (q − 4 when that bit is clear, else q), q ∈ 0..3.
 *   Q4_K  144 B  { f16 d, dmin; u8 scales[12]; u8 qs[128]; }
 *          8 sub-blocks of 32 with 6-bit scale sc and min m (dt_k4_scale_min unpacks them);
 *          w = d·sc·q − dmin·m, q ∈ 0..15. Weight 64c + l (l < 32) is the low nibble of
 *          qs[32c + l], weight 64c + 32 + l its high nibble (sub-blocks 2c and 2c + 1).
 *   Q5_K  176 B  { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
 *          Q4_K plus a fifth bit: bit 2c (low nibbles) or 2c + 1 (high) of qh[l]; q ∈ 0..31.
 *   Q6_K  210 B  { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }
 *          16 sub-blocks of 16 with int8 scales; w = d · sc · (q − 32), q ∈ 0..63. For half h
 *          (128 weights), l = 0..31: weight 128h + l + 32s takes its low 4 bits from
 *          ql[64h + l + 32(s & 1)] (low nibble for s < 2, high for s ≥ 2) and its high 2 bits
 *          from bits 2s..2s+1 of qh[32h + l]; its sub-block is 8h + l / 16 + 2s.
 *   IQ4_XS 136 B { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }
 *          8 sub-blocks of 32; 6-bit scale ls_j = (nibble j of scales_l) | (bits 2j..2j+1 of
 *          scales_h) << 4; w = d · (ls − 32) · K[q]; each sub-block's nibbles as IQ4_NL's.
 *   Q8_K  292 B  { f32 d; i8 qs[256]; i16 bsums[16]; }  w = d · q; bsums[j] = Σ of qs[16j ..+16)
 *          (an activation type: llama.cpp quantises activations to it; no model stores it).
 */
#ifndef KVSERVE_DTYPE_H
#define KVSERVE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* GGUF / GGML tensor type numbers. */
enum dt_type {
    DT_F32 = 0,
    DT_F16 = 1,
    DT_Q4_0 = 2,
    DT_Q4_1 = 3,
    DT_Q5_0 = 6,
    DT_Q5_1 = 7,
    DT_Q8_0 = 8,
    DT_Q8_1 = 9,
    DT_Q2_K = 10,
    DT_Q3_K = 11,
    DT_Q4_K = 12,
    DT_Q5_K = 13,
    DT_Q6_K = 14,
    DT_Q8_K = 15,
    DT_IQ2_XXS = 16,
    DT_IQ2_XS = 17,
    DT_IQ3_XXS = 18,
    DT_IQ1_S = 19,
    DT_IQ4_NL = 20,
    DT_IQ3_S = 21,
    DT_IQ2_S = 22,
    DT_IQ4_XS = 23,
    DT_I8 = 24,
    DT_I16 = 25,
    DT_I32 = 26,
    DT_I64 = 27,
    DT_F64 = 28,
    DT_IQ1_M = 29,
    DT_BF16 = 30,
    DT_TQ1_0 = 34,
    DT_TQ2_0 = 35,
    DT_MXFP4 = 39,
};

#define DT_N_TYPES 40 /* every type number above is below this */

#define DT_QK8_0 32 /* weights per block of the legacy types */
#define DT_QK_K 256 /* weights per super-block of the K-quants and IQ4_XS */

/* The layout checks below, in C11 or in C++ (the CUDA and emulation sources include this). */
#ifdef __cplusplus
#define DT_STATIC_ASSERT static_assert
#else
#define DT_STATIC_ASSERT _Static_assert
#endif

typedef struct dt_block_q4_0 {
    uint16_t d;
    uint8_t qs[16];
} dt_block_q4_0;

typedef struct dt_block_q4_1 {
    uint16_t d, m;
    uint8_t qs[16];
} dt_block_q4_1;

typedef struct dt_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} dt_block_q5_0;

typedef struct dt_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} dt_block_q5_1;

typedef struct dt_block_q8_0 {
    uint16_t d;          /* scale, IEEE binary16 bits */
    int8_t q[DT_QK8_0];  /* quantised values */
} dt_block_q8_0;

typedef struct dt_block_iq4_nl {
    uint16_t d;
    uint8_t qs[16];
} dt_block_iq4_nl;

typedef struct dt_block_mxfp4 {
    uint8_t e;      /* E8M0 scale: the block's weights are 2^(e − 128) · K[q] */
    uint8_t qs[16];
} dt_block_mxfp4;

typedef struct dt_block_q2_k {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
} dt_block_q2_k;

typedef struct dt_block_q3_k {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
} dt_block_q3_k;

typedef struct dt_block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} dt_block_q4_k;

typedef struct dt_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} dt_block_q5_k;

typedef struct dt_block_q6_k {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} dt_block_q6_k;

typedef struct dt_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
} dt_block_iq4_xs;

typedef struct dt_block_q8_k {
    float d;
    int8_t qs[DT_QK_K];
    int16_t bsums[16];
} dt_block_q8_k;

DT_STATIC_ASSERT(sizeof(dt_block_q4_0) == 18, "q4_0 block must be 18 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q4_1) == 20, "q4_1 block must be 20 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q5_0) == 22, "q5_0 block must be 22 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q5_1) == 24, "q5_1 block must be 24 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q8_0) == 34, "q8_0 block must be 34 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_iq4_nl) == 18, "iq4_nl block must be 18 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_mxfp4) == 17, "mxfp4 block must be 17 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q2_k) == 84, "q2_K block must be 84 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q3_k) == 110, "q3_K block must be 110 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q4_k) == 144, "q4_K block must be 144 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q5_k) == 176, "q5_K block must be 176 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q6_k) == 210, "q6_K block must be 210 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_iq4_xs) == 136, "iq4_xs block must be 136 bytes");
DT_STATIC_ASSERT(sizeof(dt_block_q8_k) == 292, "q8_K block must be 292 bytes");

/* The 16 values of the IQ4_NL / IQ4_XS code book. */
extern const int8_t dt_iq4nl_values[16];

/* The 16 values of MXFP4's code book: E2M1 (±0, 0.5, 1, 1.5, 2, 3, 4, 6) doubled, so that they are
 * integers; the block scale is halved to match (dt_e8m0_half). */
extern const int8_t dt_mxfp4_values[16];

/* 2^(e − 128), exactly, for an E8M0 scale byte e (GGML's GGML_E8M0_TO_FP32_HALF): half the
 * scale the byte encodes, because dt_mxfp4_values are twice the FP4 values. e = 0 and 1 give
 * the f32 subnormals 2^-128 and 2^-127. */
static inline float dt_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block from its 12 packed bytes:
 * j < 4: the low 6 bits of s[j] and s[j + 4]; j ≥ 4: the nibbles of s[j + 4] with the top two
 * bits of s[j − 4] (scale) and s[j] (min) above them. */
static inline void dt_k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Scale of sub-block j (0..15) of a Q3_K super-block, sc − 32 ∈ −32..31. */
static inline int dt_q3k_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Byte offsets within a block of a quantised type's f16 fields (scale d, and the min or dmin
 * where the layout has one) into off[0..2); returns how many there are (0 for other types). */
static inline int dt_f16_fields(int type, int off[2])
{
    switch (type) {
    case DT_Q4_0: case DT_Q5_0: case DT_Q8_0: case DT_IQ4_NL: case DT_IQ4_XS: off[0] = 0; return 1;
    case DT_Q4_1: case DT_Q5_1: case DT_Q4_K: case DT_Q5_K: off[0] = 0, off[1] = 2; return 2;
    case DT_Q2_K: off[0] = 80, off[1] = 82; return 2;
    case DT_Q3_K: off[0] = 108; return 1;
    case DT_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

/* Name of a type ("F32", "Q4_K", ...), or "unknown". */
const char *dt_name(int type);

/* 1 when kvserve can compute with weights of this type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4. */
int dt_is_supported(int type);

/* The supported weight types as one human-readable list (for error messages). */
const char *dt_supported_list(void);

/* Bytes taken by a row of n elements of this type, or 0 when the type is unknown or
 * n is not a multiple of the type's block size. */
size_t dt_row_bytes(int type, int64_t n);

/* Block size (elements per block) of a type: 1 for plain types, 32 or 256 for the quantised
 * ones, 0 if unknown. Every type GGML defines is known (sizes only, for the unsupported ones). */
int dt_block_elems(int type);

/* Bytes of one block of a type (dt_block_elems elements), 0 if unknown. */
size_t dt_block_bytes(int type);

/* Bits per weight of a type: 8 × block bytes / block elements (e.g. 4.5 for Q4_K); 0 if unknown. */
double dt_bits_per_weight(int type);

/* Dequantise n elements of a row of the given type into f32 (exact: each value is the product
 * the layout defines, rounded once to f32 as GGML computes it). n must be a multiple of the
 * type's block size; unsupported types give zeros. */
void dt_to_f32(int type, const void *src, float *dst, int64_t n);

static inline float dt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round-to-nearest-even f32 → f16. */
static inline uint16_t dt_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absx >> 23;
        uint32_t mant = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absx + 0xfff + ((absx >> 13) & 1); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float dt_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t dt_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif
