/*
 * test_kv.c — cache/kv.h: the KV geometry and memory formula, and the codecs of the quantised
 * KV types (int8 with an f16 scale per head vector, e4m3), against brute-force models: every
 * e4m3 code, the nearest representable value for random and halfway inputs, and the error bound
 * of a quantised vector derived from the format (half a step of the scale, plus the scale's own
 * f16 rounding).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kv.h"
#include "model/dtype.h"

static uint64_t tkv_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double tkv_unif(uint64_t *s) /* [-1, 1) */
{
    return (double)(tkv_next(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}

Test(kv, dtypes_parse_and_name)
{
    for (int d = 0; d < KV_N_DTYPES; d++) cr_assert_eq(kv_dtype_parse(kv_dtype_name(d)), d);
    cr_assert_eq(kv_dtype_parse("i8"), KV_I8);
    cr_assert_eq(kv_dtype_parse("e4m3"), KV_FP8);
    cr_assert_eq(kv_dtype_parse("int4"), -1);
    cr_assert_eq(kv_dtype_parse(""), -1);
    cr_assert_eq(kv_dtype_parse(NULL), -1);
    cr_assert(kv_dtype_is_quant(KV_I8) && kv_dtype_is_quant(KV_FP8) && !kv_dtype_is_quant(KV_F16));
}

/* The formula with its scales: 2 × layers × kv heads × (head_dim × 1 + 2) for int8 and fp8, and
 * the bound: at head size 64 an int8 token takes at most 0.6 × an f16 one. */
Test(kv, formula_counts_scales)
{
    kv_geom g = kv_geom_make(5, 4, 8, 16, KV_I8);
    cr_assert_eq(kv_vec_bytes(&g), 8 + 2);
    cr_assert_eq(kv_bytes_per_token(&g), 2 * 5 * 4 * 10);
    cr_assert_eq(kv_tile_bytes(&g), 16 * 10);
    cr_assert_eq(kv_bytes_per_block(&g), 16 * 400);
    char buf[128];
    kv_formula(&g, 0, buf, sizeof buf);
    cr_assert_str_eq(buf, "2 × 5 × 4 × (8 × 1 + 2)");
    kv_formula(&g, 1, buf, sizeof buf);
    cr_assert_str_eq(buf, "2 × 5 layers × 4 kv heads × (8 head dim × 1 byte + 2 scale bytes)");
    g.dtype = KV_F16;
    kv_formula(&g, 1, buf, sizeof buf);
    cr_assert_str_eq(buf, "2 × 5 layers × 4 kv heads × 8 head dim × 2 bytes");
    cr_assert_eq(kv_bytes_per_token(&g), 640);
    kv_geom h64 = kv_geom_make(12, 12, 64, 16, KV_F16), q64 = h64; /* the TinyLlama-110M shape */
    q64.dtype = KV_I8;
    cr_assert_leq(kv_bytes_per_token(&q64) * 10, kv_bytes_per_token(&h64) * 6);
    q64.dtype = KV_FP8;
    cr_assert_eq(kv_bytes_per_token(&q64), 2 * 12 * 12 * 66);
    cr_assert_eq(kv_blocks_for_budget(&g, 640 * 16 * 3 + 5), 3);
}

/* Every e4m3 code: its value by the definition (sign, 4-bit exponent of bias 7, 3-bit mantissa,
 * subnormals at exponent 0, S.1111.111 NaN), and encoding that value gives the code back. */
Test(kv, e4m3_every_code)
{
    for (int c = 0; c < 256; c++) {
        int e = (c >> 3) & 15, m = c & 7;
        double want = e == 0 ? m / 8.0 * pow(2, -6) : (1 + m / 8.0) * pow(2, e - 7);
        if (c & 0x80) want = -want;
        float v = kv_e4m3_decode((uint8_t)c);
        if (e == 15 && m == 7) {
            cr_assert(isnan(v), "code %#x", c);
            cr_assert_eq(kv_e4m3_encode(v) & 0x7f, 0x7f);
            continue;
        }
        cr_assert_eq((double)v, want, "code %#x decodes to %g, not %g", c, v, want);
        cr_assert_eq(kv_e4m3_encode(v), c, "code %#x (%g) encodes to %#x", c, v, kv_e4m3_encode(v));
    }
    cr_assert_eq(kv_e4m3_decode(0x7e), 448.0f);
}

/* The nearest e4m3 value by brute force (ties to the even code, saturation at ±448). */
static uint8_t tkv_e4m3_nearest(float x)
{
    if (fabsf(x) >= 448.0f) return x < 0 ? 0xfe : 0x7e;
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        double d = fabs((double)kv_e4m3_decode((uint8_t)c) - (double)x);
        if ((c & 0x80) != (signbit(x) ? 0x80 : 0)) continue; /* keep the sign (of zero too) */
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)best;
}

Test(kv, e4m3_rounds_to_nearest_even)
{
    uint64_t seed = 0xe4e3e4e3ull, s = seed;
    printf("kv/e4m3_rounds_to_nearest_even seed %#llx\n", (unsigned long long)seed);
    for (int i = 0; i < 20000; i++) {
        float x = (float)(tkv_unif(&s) * pow(2, 12 * tkv_unif(&s)) * 8);
        cr_assert_eq(kv_e4m3_encode(x), tkv_e4m3_nearest(x), "x = %a", x);
    }
    /* halfway points between neighbouring codes: ties go to the even mantissa */
    for (int c = 0; c < 0x7e; c++) {
        float mid = (kv_e4m3_decode((uint8_t)c) + kv_e4m3_decode((uint8_t)(c + 1))) / 2;
        cr_assert_eq(kv_e4m3_encode(mid), (c & 1) ? c + 1 : c, "between %#x and %#x", c, c + 1);
        cr_assert_eq(kv_e4m3_encode(-mid), 0x80 | ((c & 1) ? c + 1 : c));
    }
    cr_assert_eq(kv_e4m3_encode(1e9f), 0x7e);
    cr_assert_eq(kv_e4m3_encode(-INFINITY), 0xfe);
}

Test(kv, i8_encode_rounds_and_clamps)
{
    cr_assert_eq(kv_i8_encode(2.5f, 1.0f), 2); /* ties to even */
    cr_assert_eq(kv_i8_encode(3.5f, 1.0f), 4);
    cr_assert_eq(kv_i8_encode(-0.49f, 1.0f), 0);
    cr_assert_eq(kv_i8_encode(1000.0f, 1.0f), 127);
    cr_assert_eq(kv_i8_encode(-1000.0f, 1.0f), -127);
    cr_assert_eq(kv_i8_encode(NAN, 1.0f), -127);
    cr_assert_eq(kv_i8_encode(5.0f, 0.0f), 0);
}

/* The scale rule of kv.h: amax / QMAX rounded up to an f16 (here with model/dtype.h's f16). */
static float tkv_scale(int dt, float amax)
{
    float s = kv_quant_scale(dt, amax);
    uint16_t h = dt_f32_to_f16(s);
    if (dt_f16_to_f32(h) < s) h++;
    return dt_f16_to_f32(h);
}

/* A quantised head vector by the rule of kv.h, decoded, stays within the bound the format gives:
 * the scale is rounded up, so |x / d| ≤ QMAX and nothing clamps; int8 is then off by at most
 * half a step (d / 2), e4m3 by half an e4m3 ulp of x / d (2^-4 relative) or half its subnormal
 * step (2^-10 × d). Magnitudes span 10^-4 .. 10^4, f16-subnormal scales included. */
Test(kv, quantised_vector_error_bound)
{
    uint64_t seed = 0x5ca1e5ull, s = seed;
    printf("kv/quantised_vector_error_bound seed %#llx\n", (unsigned long long)seed);
    float x[128];
    for (int it = 0; it < 3000; it++) {
        int n = 1 + (int)(tkv_next(&s) % 128);
        double mag = pow(10, 4 * tkv_unif(&s));
        float amax = 0;
        for (int i = 0; i < n; i++) {
            x[i] = (float)(tkv_unif(&s) * mag);
            amax = fmaxf(amax, fabsf(x[i]));
        }
        for (int dt = KV_I8; dt <= KV_FP8; dt++) {
            float d = tkv_scale(dt, amax);
            cr_assert_geq(d * (dt == KV_I8 ? KV_I8_QMAX : KV_FP8_QMAX), amax);
            float inv = d > 0 ? 1 / d : 0;
            for (int i = 0; i < n; i++) {
                double y, bound;
                if (dt == KV_I8) {
                    y = (double)d * kv_i8_encode(x[i], inv);
                    bound = d / 2.0;
                } else {
                    y = (double)d * kv_e4m3_decode(kv_e4m3_encode(x[i] * inv));
                    bound = fmax(fabs(x[i]) * pow(2, -4), d * pow(2, -10));
                }
                /* x × inv is one f32 rounding away from x / d: a relative 2^-24 of |x| more */
                bound += fabs(x[i]) * pow(2, -23);
                cr_assert_leq(fabs(y - x[i]), bound, "%s: x %g -> %g (d %g, amax %g)", kv_dtype_name(dt), x[i],
                              y, d, amax);
            }
        }
    }
}
