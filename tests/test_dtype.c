/*
 * test_dtype.c — exact scalar conversions and dequantisation against hand-computed values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "cli/mkmodel.h"
#include "engine/dtype.h"

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
    cr_assert(dt_is_supported(DT_F16) && !dt_is_supported(DT_Q4_0));
}

/* mkmodel's Q8_0 quantiser: d = max|x| / 127, q = round(x / d), the reference llama.cpp uses. */
Test(dtype, q8_0_quantise)
{
    float x[32], back[32];
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 10) * 0.37f;
    dt_block_q8_0 b;
    mkm_quantize_row(DT_Q8_0, x, &b, 32);
    float amax = 21 * 0.37f, d = amax / 127.0f;
    cr_assert_eq(b.d, dt_f32_to_f16(d));
    cr_assert_eq(b.q[31], 127);
    cr_assert_eq(b.q[10], 0);
    for (int i = 0; i < 32; i++) cr_assert_eq(b.q[i], (int8_t)roundf(x[i] * (1.0f / d)));
    dt_to_f32(DT_Q8_0, &b, back, 32);
    for (int i = 0; i < 32; i++) cr_assert(fabsf(back[i] - x[i]) <= d * 0.51f + 1e-3f);
    float zero[32] = {0};
    mkm_quantize_row(DT_Q8_0, zero, &b, 32);
    dt_to_f32(DT_Q8_0, &b, back, 32);
    for (int i = 0; i < 32; i++) cr_assert_eq(back[i], 0.0f);
}
