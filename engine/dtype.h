/*
 * dtype.h — tensor element types as GGUF numbers them, and exact scalar conversions.
 *
 * Shared by engine/ (loading, reference dequantisation), cpu/ and cuda/ (host side).
 * Everything here is header-only and pure, so any module may include it.
 *
 * Q8_0 layout (as in GGUF): blocks of 32 weights, each { f16 scale d; int8 q[32] } = 34 bytes,
 * value = d * q[i]. A row of n weights (n a multiple of 32) is n/32 consecutive blocks.
 */
#ifndef KVSERVE_DTYPE_H
#define KVSERVE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* GGUF / GGML tensor type numbers (only the ones kvserve knows by name). */
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
    DT_I8 = 24,
    DT_I16 = 25,
    DT_I32 = 26,
    DT_I64 = 27,
    DT_F64 = 28,
    DT_BF16 = 30,
};

#define DT_QK8_0 32

typedef struct dt_block_q8_0 {
    uint16_t d;          /* scale, IEEE binary16 bits */
    int8_t q[DT_QK8_0];  /* quantised values */
} dt_block_q8_0;         /* 34 bytes, no padding */

_Static_assert(sizeof(dt_block_q8_0) == 34, "q8_0 block must be 34 bytes");

/* Name of a type ("F32", "Q8_0", ...), or "type N" style "?" for unknown ones. */
const char *dt_name(int type);

/* 1 when kvserve can compute with weights of this type (F32, F16, BF16, Q8_0). */
int dt_is_supported(int type);

/* Bytes taken by a row of n elements of this type, or 0 when the type is unknown or
 * n is not a multiple of the type's block size. */
size_t dt_row_bytes(int type, int64_t n);

/* Block size (elements per block) of a type: 1 for plain types, 32 for Q8_0, 0 if unknown. */
int dt_block_elems(int type);

/* Dequantise n elements of a row of the given type into f32 (exact). n must suit the type. */
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
