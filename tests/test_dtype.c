/*
 * test_dtype.c — exact scalar conversions and dequantisation against hand-computed values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/gguf_write.h"
#include "model/dtype.h"
#include "base/rng.h"

Test(dtype, f16_known_values)
{
    cr_assert_eq(dt_f16_to_f32(0x3C00), 1.0f);
    cr_assert_eq(dt_f16_to_f32(0xC000), -2.0f);
    cr_assert_eq(dt_f16_to_f32(0x3800), 0.5f);
    cr_assert_eq(dt_f16_to_f32(0x7BFF), 65504.0f);
    cr_assert_eq(dt_f16_to_f32(0x0400), ldexpf(1.0f, -14)); /* smallest normal */
    cr_assert_eq(dt_f16_to_f32(0x0001), ldexpf(1.0f, -24)); /* smallest subnormal, 5.96e-8 */
    cr_assert_eq(dt_f16_to_f32(0x03FF), ldexpf(1023.0f, -24)); /* largest subnormal */
    cr_assert_eq(dt_f16_to_f32(0x3555), 0.333251953125f);
    float z = dt_f16_to_f32(0x8000);
    cr_assert(z == 0.0f && signbit(z));
    cr_assert(isinf(dt_f16_to_f32(0x7C00)) && dt_f16_to_f32(0x7C00) > 0);
    cr_assert(isinf(dt_f16_to_f32(0xFC00)) && dt_f16_to_f32(0xFC00) < 0);
    cr_assert(isnan(dt_f16_to_f32(0x7E00)));
}

Test(dtype, f32_to_f16_rounding)
{
    cr_assert_eq(dt_f32_to_f16(1.0f), 0x3C00);
    cr_assert_eq(dt_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3C00, "halfway rounds to even (down)");
    cr_assert_eq(dt_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3C02, "halfway rounds to even (up)");
    cr_assert_eq(dt_f32_to_f16(65519.0f), 0x7BFF);
    cr_assert_eq(dt_f32_to_f16(65520.0f), 0x7C00, "overflow to inf");
    cr_assert_eq(dt_f32_to_f16(-1e10f), 0xFC00);
    cr_assert_eq(dt_f32_to_f16(ldexpf(1, -25)), 0x0000, "half the smallest subnormal: ties to even");
    cr_assert_eq(dt_f32_to_f16(ldexpf(3, -26)), 0x0001);
    cr_assert_eq(dt_f32_to_f16(ldexpf(1, -30)), 0x0000);
    cr_assert_eq(dt_f32_to_f16(NAN) & 0x7C00, 0x7C00);
    cr_assert_neq(dt_f32_to_f16(NAN) & 0x03FF, 0);
}

Test(dtype, f16_round_trip_all_65536)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dt_f16_to_f32((uint16_t)h);
        uint16_t back = dt_f32_to_f16(f);
        if (isnan(f))
            cr_assert(isnan(dt_f16_to_f32(back)), "nan 0x%04x", h);
        else
            cr_assert_eq(back, h, "0x%04x → %g → 0x%04x", h, (double)f, back);
    }
}

Test(dtype, bf16_values_and_round_trip)
{
    cr_assert_eq(dt_bf16_to_f32(0x3F80), 1.0f);
    cr_assert_eq(dt_bf16_to_f32(0xC000), -2.0f);
    cr_assert_eq(dt_bf16_to_f32(0x3F00), 0.5f);
    cr_assert(isinf(dt_bf16_to_f32(0x7F80)));
    cr_assert_eq(dt_f32_to_bf16(1.0f), 0x3F80);
    cr_assert_eq(dt_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3F80, "halfway rounds to even");
    cr_assert_eq(dt_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3F82);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dt_bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        cr_assert_eq(dt_f32_to_bf16(f), h, "0x%04x", h);
    }
}

Test(dtype, q8_0_dequant)
{
    dt_block_q8_0 b[2];
    b[0].d = 0x3800; /* 0.5 */
    b[1].d = 0xC000; /* -2 */
    for (int i = 0; i < 32; i++) {
        b[0].q[i] = (int8_t)(-128 + 8 * i); /* -128, -120, ..., 120 */
        b[1].q[i] = (int8_t)(i == 31 ? 127 : i - 16);
    }
    float out[64];
    dt_to_f32(DT_Q8_0, b, out, 64);
    cr_assert_eq(out[0], -64.0f);
    cr_assert_eq(out[1], -60.0f);
    cr_assert_eq(out[16], 0.0f);
    cr_assert_eq(out[31], 60.0f);
    cr_assert_eq(out[32], 32.0f);
    cr_assert_eq(out[48], 0.0f);
    cr_assert_eq(out[63], -254.0f);
}

Test(dtype, f16_bf16_rows)
{
    uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF};
    float out[4];
    dt_to_f32(DT_F16, h, out, 4);
    cr_assert(out[0] == 1.0f && out[1] == -2.0f && out[2] == ldexpf(1, -24) && out[3] == 65504.0f);
    uint16_t bf[3] = {0x3F80, 0xC000, 0x4049}; /* 1, -2, 3.140625 */
    dt_to_f32(DT_BF16, bf, out, 3);
    cr_assert(out[0] == 1.0f && out[1] == -2.0f && out[2] == 3.140625f);
    float f[2] = {1.25f, -7.5f};
    dt_to_f32(DT_F32, f, out, 2);
    cr_assert(out[0] == 1.25f && out[1] == -7.5f);
}

Test(dtype, sizes_and_names)
{
    cr_assert_eq(dt_row_bytes(DT_F32, 64), 256u);
    cr_assert_eq(dt_row_bytes(DT_F16, 3), 6u);
    cr_assert_eq(dt_row_bytes(DT_BF16, 5), 10u);
    cr_assert_eq(dt_row_bytes(DT_Q8_0, 64), 68u);
    cr_assert_eq(dt_row_bytes(DT_Q8_0, 33), 0u);
    cr_assert_eq(dt_row_bytes(DT_Q4_K, 256), 144u);
    cr_assert_eq(dt_row_bytes(99, 32), 0u);
    cr_assert_str_eq(dt_name(DT_Q8_0), "Q8_0");
    cr_assert_str_eq(dt_name(DT_BF16), "BF16");
    cr_assert(dt_is_supported(DT_F16) && dt_is_supported(DT_Q4_0) && !dt_is_supported(DT_IQ2_XS));
}

/* mkmodel's Q8_0 quantiser: d = max|x| / 127, q = round(x / d), the reference llama.cpp uses. */
Test(dtype, q8_0_quantise)
{
    float x[32], back[32];
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 10) * 0.37f;
    dt_block_q8_0 b;
    gguf_quantize_row(DT_Q8_0, x, &b, 32);
    float amax = 21 * 0.37f, d = amax / 127.0f;
    cr_assert_eq(b.d, dt_f32_to_f16(d));
    cr_assert_eq(b.q[31], 127);
    cr_assert_eq(b.q[10], 0);
    for (int i = 0; i < 32; i++) cr_assert_eq(b.q[i], (int8_t)roundf(x[i] * (1.0f / d)));
    dt_to_f32(DT_Q8_0, &b, back, 32);
    for (int i = 0; i < 32; i++) cr_assert(fabsf(back[i] - x[i]) <= d * 0.51f + 1e-3f);
    float zero[32] = {0};
    gguf_quantize_row(DT_Q8_0, zero, &b, 32);
    dt_to_f32(DT_Q8_0, &b, back, 32);
    for (int i = 0; i < 32; i++) cr_assert_eq(back[i], 0.0f);
}

/* ---- quantised layouts: blocks packed from integers by the layout dtype.h documents -------- */

/* One block's contents as integers: the model each layout is packed from and checked against. */
typedef struct td_blk {
    uint16_t d, dmin;  /* f16 bits: the scale, and the min (Q4_1, Q5_1: m; K-quants: dmin) */
    int sc[16], mn[16]; /* sub-block scales and mins as stored (unsigned fields, before − 32) */
    int q[256];        /* the stored value of each weight (unsigned, before any offset) */
} td_blk;

static void td_put_nibbles(uint8_t *qs, const int *q) /* weights j, j + 16 in byte j */
{
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

static void td_put_qh32(uint8_t *qh, const int *q) /* bit 4 of weight i at bit i */
{
    uint32_t h = 0;
    for (int i = 0; i < 32; i++) h |= (uint32_t)((q[i] >> 4) & 1) << i;
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

static void td_put_k4_scales(uint8_t *s, const int *sc, const int *mn)
{
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] |= (uint8_t)(sc[j] & 63);
            s[j + 4] |= (uint8_t)(mn[j] & 63);
        } else {
            s[j + 4] = (uint8_t)((sc[j] & 15) | (mn[j] & 15) << 4);
            s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            s[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

/* Packs b as type into out (one block); returns its weights and the value each should have
 * (computed in double from the integers) in want[], and per weight the magnitude of the terms
 * that are rounded to f32 (for the tolerance) in mag[]. */
static int td_pack(int type, const td_blk *b, void *out, double *want, double *mag)
{
    double d = dt_f16_to_f32(b->d), dm = dt_f16_to_f32(b->dmin);
    switch (type) {
    case DT_Q4_0: case DT_Q4_1: case DT_IQ4_NL: {
        dt_block_q4_1 *o1 = out;
        dt_block_q4_0 *o0 = out;
        if (type == DT_Q4_1) o1->d = b->d, o1->m = b->dmin, td_put_nibbles(o1->qs, b->q);
        else o0->d = b->d, td_put_nibbles(o0->qs, b->q);
        for (int i = 0; i < 32; i++) {
            int q = b->q[i] & 15;
            want[i] = type == DT_Q4_0 ? d * (q - 8) : type == DT_Q4_1 ? d * q + dm : d * dt_iq4nl_values[q];
            mag[i] = fabs(d * q) + fabs(dm);
        }
        return 32;
    }
    case DT_Q5_0: case DT_Q5_1: {
        dt_block_q5_0 *o0 = out;
        dt_block_q5_1 *o1 = out;
        if (type == DT_Q5_0) o0->d = b->d, td_put_qh32(o0->qh, b->q), td_put_nibbles(o0->qs, b->q);
        else o1->d = b->d, o1->m = b->dmin, td_put_qh32(o1->qh, b->q), td_put_nibbles(o1->qs, b->q);
        for (int i = 0; i < 32; i++) {
            int q = b->q[i] & 31;
            want[i] = type == DT_Q5_0 ? d * (q - 16) : d * q + dm;
            mag[i] = fabs(d * q) + fabs(dm);
        }
        return 32;
    }
    case DT_Q2_K: {
        dt_block_q2_k *o = out;
        memset(o, 0, sizeof *o);
        o->d = b->d, o->dmin = b->dmin;
        for (int j = 0; j < 16; j++) o->scales[j] = (uint8_t)((b->sc[j] & 15) | (b->mn[j] & 15) << 4);
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = (i % 128) / 32, l = i % 32, q = b->q[i] & 3, j = i / 16;
            o->qs[32 * h + l] |= (uint8_t)(q << (2 * s));
            want[i] = d * (b->sc[j] & 15) * q - dm * (b->mn[j] & 15);
            mag[i] = fabs(d * (b->sc[j] & 15) * q) + fabs(dm * (b->mn[j] & 15));
        }
        return 256;
    }
    case DT_Q3_K: {
        dt_block_q3_k *o = out;
        memset(o, 0, sizeof *o);
        o->d = b->d;
        for (int j = 0; j < 16; j++) {
            int v = b->sc[j] & 63;
            if (j < 8) o->scales[j] |= (uint8_t)(v & 15);
            else o->scales[j - 8] |= (uint8_t)((v & 15) << 4);
            o->scales[8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
        }
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = (i % 128) / 32, l = i % 32, q = b->q[i] & 7;
            o->qs[32 * h + l] |= (uint8_t)((q & 3) << (2 * s));
            if (q & 4) o->hmask[l] |= (uint8_t)(1u << (4 * h + s));
            /* stored value q (0..7) with its bit 2 the hmask bit: weight (q & 3) − (bit clear ? 4 : 0) */
            want[i] = d * ((b->sc[i / 16] & 63) - 32) * ((q & 3) - (q & 4 ? 0 : 4));
            mag[i] = fabs(want[i]);
        }
        return 256;
    }
    case DT_Q4_K: case DT_Q5_K: {
        dt_block_q4_k *o4 = out;
        dt_block_q5_k *o5 = out;
        int five = type == DT_Q5_K;
        memset(out, 0, five ? sizeof *o5 : sizeof *o4);
        o4->d = b->d, o4->dmin = b->dmin; /* same offsets in both layouts */
        td_put_k4_scales(o4->scales, b->sc, b->mn);
        uint8_t *qs = five ? o5->qs : o4->qs;
        for (int i = 0; i < 256; i++) {
            int c = i / 64, hi = (i % 64) >= 32, l = i % 32, j = i / 32;
            int q = b->q[i] & (five ? 31 : 15);
            qs[32 * c + l] |= (uint8_t)((q & 15) << (4 * hi));
            if (five && (q & 16)) o5->qh[l] |= (uint8_t)(1u << (2 * c + hi));
            want[i] = d * (b->sc[j] & 63) * q - dm * (b->mn[j] & 63);
            mag[i] = fabs(d * (b->sc[j] & 63) * q) + fabs(dm * (b->mn[j] & 63));
        }
        return 256;
    }
    case DT_Q6_K: {
        dt_block_q6_k *o = out;
        memset(o, 0, sizeof *o);
        o->d = b->d;
        for (int j = 0; j < 16; j++) o->scales[j] = (int8_t)b->sc[j];
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = (i % 128) / 32, l = i % 32, q = b->q[i] & 63;
            o->ql[64 * h + l + 32 * (s & 1)] |= (uint8_t)((q & 15) << (s < 2 ? 0 : 4));
            o->qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * s));
            want[i] = d * (int8_t)b->sc[8 * h + l / 16 + 2 * s] * (q - 32);
            mag[i] = fabs(want[i]);
        }
        return 256;
    }
    case DT_MXFP4: { /* the E8M0 scale from d's bits (below 250: every product stays finite) */
        dt_block_mxfp4 *o = out;
        o->e = (uint8_t)(b->d % 250);
        td_put_nibbles(o->qs, b->q);
        for (int i = 0; i < 32; i++) {
            want[i] = ldexp((double)dt_mxfp4_values[b->q[i] & 15], o->e - 128);
            mag[i] = fabs(want[i]);
        }
        return 32;
    }
    case DT_IQ4_XS: {
        dt_block_iq4_xs *o = out;
        memset(o, 0, sizeof *o);
        o->d = b->d;
        for (int j = 0; j < 8; j++) {
            o->scales_l[j / 2] |= (uint8_t)((b->sc[j] & 15) << (4 * (j % 2)));
            o->scales_h |= (uint16_t)(((b->sc[j] >> 4) & 3) << (2 * j));
            td_put_nibbles(o->qs + 16 * j, b->q + 32 * j);
        }
        for (int i = 0; i < 256; i++) {
            want[i] = d * ((b->sc[i / 32] & 63) - 32) * dt_iq4nl_values[b->q[i] & 15];
            mag[i] = fabs(want[i]);
        }
        return 256;
    }
    default:
        cr_assert_fail("no packer for %s", dt_name(type));
        return 0;
    }
}

static const int td_types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K,
                               DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS, DT_MXFP4};
#define TD_N_TYPES (int)(sizeof td_types / sizeof td_types[0])

/* Packs b, dequantises it and compares with the integers' values: each value may differ from
 * the exact one by the roundings of its f32 products, at most 2 × 2^-24 of its terms' size. */
static void td_check(int type, const td_blk *b, const char *what)
{
    uint8_t blk[512];
    double want[256], mag[256];
    float got[256];
    int n = td_pack(type, b, blk, want, mag);
    cr_assert_eq(dt_row_bytes(type, n), dt_block_bytes(type));
    for (int i = 0; i < n; i++) got[i] = NAN;
    dt_to_f32(type, blk, got, n);
    for (int i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= mag[i] * 0x1p-23, "%s %s: weight %d is %.9g, want %.9g",
                  dt_name(type), what, i, (double)got[i], want[i]);
}

static uint64_t td_rng = 0;
static int td_rand(int n)
{
    return (int)(rng_splitmix64(&td_rng) % (uint64_t)n);
}

Test(dtype, quant_layouts_random_blocks)
{
    uint64_t seed = 0x5eed13;
    td_rng = seed;
    cr_log_info("seed %#llx", (unsigned long long)seed);
    td_blk b;
    for (int rep = 0; rep < 200; rep++)
        for (int t = 0; t < TD_N_TYPES; t++) {
            /* finite f16 scales of either sign (exponent field 0..30), sub-scales and values anywhere */
            b.d = (uint16_t)(td_rand(2) << 15 | td_rand(31) << 10 | td_rand(1024));
            b.dmin = (uint16_t)(td_rand(2) << 15 | td_rand(31) << 10 | td_rand(1024));
            for (int j = 0; j < 16; j++) b.sc[j] = td_rand(256), b.mn[j] = td_rand(256);
            for (int i = 0; i < 256; i++) b.q[i] = td_rand(256);
            char what[64];
            snprintf(what, sizeof what, "random block %d (seed %#llx)", rep, (unsigned long long)seed);
            td_check(td_types[t], &b, what);
        }
}

/* The edges: all-zero blocks, every value at its minimum and maximum, the smallest (subnormal)
 * and largest f16 scales, the extreme sub-block scales and mins. */
Test(dtype, quant_layouts_edge_values)
{
    const uint16_t ds[] = {0x0000, 0x0001, 0x8001, 0x0400, 0x3C00, 0xBC00, 0x7BFF};
    const int qv[] = {0, 255};
    const int sv[] = {0, 255, 0x20, 0x1F, 0x80, 0x7F};
    td_blk b;
    for (int t = 0; t < TD_N_TYPES; t++) {
        uint8_t zero[512] = {0};
        float got[256];
        int be = dt_block_elems(td_types[t]);
        dt_to_f32(td_types[t], zero, got, be);
        for (int i = 0; i < be; i++) cr_assert_eq(got[i], 0.0f, "%s: all-zero block", dt_name(td_types[t]));
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (int qi = 0; qi < 2; qi++)
                for (size_t si = 0; si < sizeof sv / sizeof sv[0]; si++) {
                    b.d = ds[di];
                    b.dmin = ds[(di + 3) % (sizeof ds / sizeof ds[0])];
                    for (int j = 0; j < 16; j++) b.sc[j] = b.mn[j] = sv[si];
                    for (int i = 0; i < 256; i++) b.q[i] = qv[qi];
                    char what[64];
                    snprintf(what, sizeof what, "d %#x q %d scales %#x", ds[di], qv[qi], sv[si]);
                    td_check(td_types[t], &b, what);
                }
    }
    /* A few values by hand: the extremes of each layout's range. */
    for (int i = 0; i < 256; i++) b.q[i] = 255;
    for (int j = 0; j < 16; j++) b.sc[j] = 63, b.mn[j] = 0;
    b.d = 0x3C00; /* 1 */
    b.dmin = 0;
    uint8_t blk[512];
    double want[256], mag[256];
    float got[256];
    td_pack(DT_Q6_K, &b, blk, want, mag);
    dt_to_f32(DT_Q6_K, blk, got, 256);
    cr_assert_eq(got[0], 63.0f * 31.0f, "Q6_K: q 63 → +31 × scale 63");
    td_pack(DT_Q3_K, &b, blk, want, mag);
    dt_to_f32(DT_Q3_K, blk, got, 256);
    cr_assert_eq(got[255], 31.0f * 3.0f, "Q3_K: scale 63 → 31, q 3 with its high bit set");
    td_pack(DT_IQ4_XS, &b, blk, want, mag);
    dt_to_f32(DT_IQ4_XS, blk, got, 256);
    cr_assert_eq(got[17], 31.0f * 113.0f, "IQ4_XS: the code book's largest value");
    td_pack(DT_Q4_0, &b, blk, want, mag);
    dt_to_f32(DT_Q4_0, blk, got, 32);
    cr_assert_eq(got[31], 7.0f);
    for (int i = 0; i < 256; i++) b.q[i] = 0;
    td_pack(DT_Q5_0, &b, blk, want, mag);
    dt_to_f32(DT_Q5_0, blk, got, 32);
    cr_assert_eq(got[0], -16.0f);
    td_pack(DT_IQ4_NL, &b, blk, want, mag);
    dt_to_f32(DT_IQ4_NL, blk, got, 32);
    cr_assert_eq(got[5], -127.0f);
    b.d = 131; /* E8M0 131: the block's FP4 values × 2^(131 − 127) = 16 */
    for (int i = 0; i < 32; i++) b.q[i] = i % 16;
    td_pack(DT_MXFP4, &b, blk, want, mag);
    dt_to_f32(DT_MXFP4, blk, got, 32);
    cr_assert(got[7] == 6.0f * 16 && got[15] == -6.0f * 16 && got[3] == 1.5f * 16 && got[8] == 0.0f,
              "MXFP4: E2M1 6, −6, 1.5 and −0 at scale 2^4: %g %g %g %g", got[7], got[15], got[3], got[8]);
}

/* E8M0 scale bytes: every one is an exact power of two, 2^(e − 128) (half the encoded scale,
 * because the code book holds twice the FP4 values), down to the subnormals of e = 0 and 1. */
Test(dtype, e8m0_scales_are_exact_powers_of_two)
{
    for (int e = 0; e < 256; e++)
        cr_assert_eq((double)dt_e8m0_half((uint8_t)e), ldexp(1.0, e - 128), "e8m0 %d", e);
    cr_assert_eq(dt_bits_per_weight(DT_MXFP4), 4.25);
}

Test(dtype, every_ggml_type_is_sized)
{
    /* Unsupported types still parse (so loading names the tensor that has them). */
    const int unsupported[] = {DT_IQ2_XXS, DT_IQ2_XS, DT_IQ3_XXS, DT_IQ1_S, DT_IQ3_S, DT_IQ2_S,
                               DT_IQ1_M, DT_TQ1_0, DT_TQ2_0, DT_Q8_K, DT_Q8_1};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        int t = unsupported[i];
        cr_assert(!dt_is_supported(t) && dt_block_bytes(t) > 0 && strcmp(dt_name(t), "unknown"), "%d", t);
    }
    for (int t = 0; t < TD_N_TYPES; t++) cr_assert(dt_is_supported(td_types[t]));
    cr_assert_eq(dt_bits_per_weight(DT_Q4_K), 4.5);
    cr_assert_eq(dt_bits_per_weight(DT_Q6_K), 6.5625);
    cr_assert_eq(dt_bits_per_weight(DT_Q4_0), 4.5);
    cr_assert_eq(dt_bits_per_weight(DT_IQ4_XS), 4.25);
    cr_assert_eq(dt_row_bytes(DT_Q2_K, 512), 168u);
    cr_assert_eq(dt_row_bytes(DT_Q2_K, 128), 0u);
    cr_assert_eq(dt_block_elems(4), 0, "type 4 (removed from GGML) is unknown");
    cr_assert_str_eq(dt_name(DT_IQ4_XS), "IQ4_XS");
}
