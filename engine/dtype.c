/*
 * dtype.c — names, sizes and reference (exact, scalar) dequantisation of tensor types.
 * The SIMD kernels in cpu/ and the CUDA kernels are tested against dt_to_f32.
 */
#include "engine/dtype.h"

const char *dt_name(int type)
{
    switch (type) {
    case DT_F32: return "F32";
    case DT_F16: return "F16";
    case DT_Q4_0: return "Q4_0";
    case DT_Q4_1: return "Q4_1";
    case DT_Q5_0: return "Q5_0";
    case DT_Q5_1: return "Q5_1";
    case DT_Q8_0: return "Q8_0";
    case DT_Q8_1: return "Q8_1";
    case DT_Q2_K: return "Q2_K";
    case DT_Q3_K: return "Q3_K";
    case DT_Q4_K: return "Q4_K";
    case DT_Q5_K: return "Q5_K";
    case DT_Q6_K: return "Q6_K";
    case DT_Q8_K: return "Q8_K";
    case DT_I8: return "I8";
    case DT_I16: return "I16";
    case DT_I32: return "I32";
    case DT_I64: return "I64";
    case DT_F64: return "F64";
    case DT_BF16: return "BF16";
    default: return "unknown";
    }
}

int dt_is_supported(int type)
{
    return type == DT_F32 || type == DT_F16 || type == DT_BF16 || type == DT_Q8_0;
}

int dt_block_elems(int type)
{
    switch (type) {
    case DT_F32: case DT_F16: case DT_BF16: case DT_I8: case DT_I16: case DT_I32: case DT_I64:
    case DT_F64:
        return 1;
    case DT_Q4_0: case DT_Q4_1: case DT_Q5_0: case DT_Q5_1: case DT_Q8_0: case DT_Q8_1:
        return 32;
    case DT_Q2_K: case DT_Q3_K: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: case DT_Q8_K:
        return 256;
    default:
        return 0;
    }
}

/* Bytes per block of each type (GGML's sizes). */
static size_t block_bytes(int type)
{
    switch (type) {
    case DT_F32: return 4;
    case DT_F16: return 2;
    case DT_BF16: return 2;
    case DT_I8: return 1;
    case DT_I16: return 2;
    case DT_I32: return 4;
    case DT_I64: return 8;
    case DT_F64: return 8;
    case DT_Q4_0: return 18;
    case DT_Q4_1: return 20;
    case DT_Q5_0: return 22;
    case DT_Q5_1: return 24;
    case DT_Q8_0: return 34;
    case DT_Q8_1: return 36;
    case DT_Q2_K: return 84;
    case DT_Q3_K: return 110;
    case DT_Q4_K: return 144;
    case DT_Q5_K: return 176;
    case DT_Q6_K: return 210;
    case DT_Q8_K: return 292;
    default: return 0;
    }
}

size_t dt_row_bytes(int type, int64_t n)
{
    int be = dt_block_elems(type);
    if (be == 0 || n < 0 || n % be != 0) return 0;
    return (size_t)(n / be) * block_bytes(type);
}

void dt_to_f32(int type, const void *src, float *dst, int64_t n)
{
    switch (type) {
    case DT_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case DT_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = dt_f16_to_f32(s[i]);
        break;
    }
    case DT_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = dt_bf16_to_f32(s[i]);
        break;
    }
    case DT_Q8_0: {
        const dt_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / DT_QK8_0; i++) {
            float d = dt_f16_to_f32(b[i].d);
            for (int j = 0; j < DT_QK8_0; j++) dst[i * DT_QK8_0 + j] = d * (float)b[i].q[j];
        }
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = 0.0f;
        break;
    }
}
