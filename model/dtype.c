/*
 * dtype.c — names, sizes and the reference (exact, scalar) dequantisation of every tensor type
 * (layouts in dtype.h). The SIMD kernels in cpu/ and the CUDA kernels are tested against
 * dt_to_f32, and dt_to_f32 against rows dequantised by llama.cpp's own tools.
 *
 * Each value is formed in f32 in the order GGML's reference code forms it (e.g. Q4_K:
 * (d · sc) · q − (dmin · m)), so that the results agree bit for bit, not merely closely.
 */
#include "model/dtype.h"

const int8_t dt_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

const int8_t dt_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* One row per type number: name, elements per block, bytes per block, and 1 when supported. */
typedef struct dt_info {
    const char *name;
    int block_elems;
    int block_bytes;
    int supported;
} dt_info;

static const dt_info dt_table[DT_N_TYPES] = {
    [DT_F32] = {"F32", 1, 4, 1},
    [DT_F16] = {"F16", 1, 2, 1},
    [DT_Q4_0] = {"Q4_0", 32, 18, 1},
    [DT_Q4_1] = {"Q4_1", 32, 20, 1},
    [DT_Q5_0] = {"Q5_0", 32, 22, 1},
    [DT_Q5_1] = {"Q5_1", 32, 24, 1},
    [DT_Q8_0] = {"Q8_0", 32, 34, 1},
    [DT_Q8_1] = {"Q8_1", 32, 36, 0},
    [DT_Q2_K] = {"Q2_K", 256, 84, 1},
    [DT_Q3_K] = {"Q3_K", 256, 110, 1},
    [DT_Q4_K] = {"Q4_K", 256, 144, 1},
    [DT_Q5_K] = {"Q5_K", 256, 176, 1},
    [DT_Q6_K] = {"Q6_K", 256, 210, 1},
    [DT_Q8_K] = {"Q8_K", 256, 292, 0},
    [DT_IQ2_XXS] = {"IQ2_XXS", 256, 66, 0},
    [DT_IQ2_XS] = {"IQ2_XS", 256, 74, 0},
    [DT_IQ3_XXS] = {"IQ3_XXS", 256, 98, 0},
    [DT_IQ1_S] = {"IQ1_S", 256, 50, 0},
    [DT_IQ4_NL] = {"IQ4_NL", 32, 18, 1},
    [DT_IQ3_S] = {"IQ3_S", 256, 110, 0},
    [DT_IQ2_S] = {"IQ2_S", 256, 82, 0},
    [DT_IQ4_XS] = {"IQ4_XS", 256, 136, 1},
    [DT_I8] = {"I8", 1, 1, 0},
    [DT_I16] = {"I16", 1, 2, 0},
    [DT_I32] = {"I32", 1, 4, 0},
    [DT_I64] = {"I64", 1, 8, 0},
    [DT_F64] = {"F64", 1, 8, 0},
    [DT_IQ1_M] = {"IQ1_M", 256, 56, 0},
    [DT_BF16] = {"BF16", 1, 2, 1},
    [DT_TQ1_0] = {"TQ1_0", 256, 54, 0},
    [DT_TQ2_0] = {"TQ2_0", 256, 66, 0},
    [DT_MXFP4] = {"MXFP4", 32, 17, 1},
};

static const dt_info *info(int type)
{
    return type >= 0 && type < DT_N_TYPES && dt_table[type].name ? &dt_table[type] : NULL;
}

const char *dt_name(int type)
{
    const dt_info *i = info(type);
    return i ? i->name : "unknown";
}

int dt_is_supported(int type)
{
    const dt_info *i = info(type);
    return i && i->supported;
}

const char *dt_supported_list(void)
{
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
           "IQ4_XS and MXFP4";
}

int dt_block_elems(int type)
{
    const dt_info *i = info(type);
    return i ? i->block_elems : 0;
}

size_t dt_block_bytes(int type)
{
    const dt_info *i = info(type);
    return i ? (size_t)i->block_bytes : 0;
}

double dt_bits_per_weight(int type)
{
    const dt_info *i = info(type);
    return i ? 8.0 * i->block_bytes / i->block_elems : 0;
}

size_t dt_row_bytes(int type, int64_t n)
{
    int be = dt_block_elems(type);
    if (be == 0 || n < 0 || n % be != 0) return 0;
    return (size_t)(n / be) * dt_block_bytes(type);
}

/* ---- legacy blocks of 32 ------------------------------------------------------------------- */

static void deq_q4_0(const dt_block_q4_0 *b, float *y)
{
    float d = dt_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b->qs[j] & 0xF) - 8) * d;
        y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const dt_block_q4_1 *b, float *y)
{
    float d = dt_f16_to_f32(b->d), m = dt_f16_to_f32(b->m);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b->qs[j] & 0xF) * d + m;
        y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
    }
}

static uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 5-bit values of a Q5 block: low nibbles from qs, bit 4 of weight i from bit i of qh. */
static void q5_values(const uint8_t *qh4, const uint8_t *qs, int *q)
{
    uint32_t qh = load_u32(qh4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
        q[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    }
}

static void deq_q5_0(const dt_block_q5_0 *b, float *y)
{
    float d = dt_f16_to_f32(b->d);
    int q[32];
    q5_values(b->qh, b->qs, q);
    for (int j = 0; j < 32; j++) y[j] = (float)(q[j] - 16) * d;
}

static void deq_q5_1(const dt_block_q5_1 *b, float *y)
{
    float d = dt_f16_to_f32(b->d), m = dt_f16_to_f32(b->m);
    int q[32];
    q5_values(b->qh, b->qs, q);
    for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d + m;
}

static void deq_q8_0(const dt_block_q8_0 *b, float *y)
{
    float d = dt_f16_to_f32(b->d);
    for (int j = 0; j < 32; j++) y[j] = d * (float)b->q[j];
}

static void deq_iq4_nl(const dt_block_iq4_nl *b, float *y)
{
    float d = dt_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)dt_iq4nl_values[b->qs[j] & 0xF];
        y[j + 16] = d * (float)dt_iq4nl_values[b->qs[j] >> 4];
    }
}

/* GGML's dequantize_row_mxfp4: the code book value times half the E8M0 scale, one f32 product. */
static void deq_mxfp4(const dt_block_mxfp4 *b, float *y)
{
    float d = dt_e8m0_half(b->e);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)dt_mxfp4_values[b->qs[j] & 0xF] * d;
        y[j + 16] = (float)dt_mxfp4_values[b->qs[j] >> 4] * d;
    }
}

/* ---- K-quants: super-blocks of 256 ----------------------------------------------------------- */

static void deq_q2_k(const dt_block_q2_k *b, float *y)
{
    float d = dt_f16_to_f32(b->d), dmin = dt_f16_to_f32(b->dmin);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int half = 0; half < 2; half++) {
                uint8_t sc = b->scales[8 * h + 2 * s + half];
                float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                for (int l = 16 * half; l < 16 * half + 16; l++)
                    y[128 * h + 32 * s + l] = dl * (float)((b->qs[32 * h + l] >> (2 * s)) & 3) - ml;
            }
}

static void deq_q3_k(const dt_block_q3_k *b, float *y)
{
    float d = dt_f16_to_f32(b->d);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int half = 0; half < 2; half++) {
                float dl = d * (float)dt_q3k_scale(b->scales, 8 * h + 2 * s + half);
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    int q = (b->qs[32 * h + l] >> (2 * s)) & 3;
                    if (!(b->hmask[l] & (1u << (4 * h + s)))) q -= 4;
                    y[128 * h + 32 * s + l] = dl * (float)q;
                }
            }
}

static void deq_q4_k(const dt_block_q4_k *b, float *y)
{
    float d = dt_f16_to_f32(b->d), dmin = dt_f16_to_f32(b->dmin);
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        dt_k4_scale_min(b->scales, 2 * c, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        dt_k4_scale_min(b->scales, 2 * c + 1, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            y[64 * c + l] = d1 * (float)(b->qs[32 * c + l] & 0xF) - m1;
            y[64 * c + 32 + l] = d2 * (float)(b->qs[32 * c + l] >> 4) - m2;
        }
    }
}

static void deq_q5_k(const dt_block_q5_k *b, float *y)
{
    float d = dt_f16_to_f32(b->d), dmin = dt_f16_to_f32(b->dmin);
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        dt_k4_scale_min(b->scales, 2 * c, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        dt_k4_scale_min(b->scales, 2 * c + 1, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            int lo = (b->qs[32 * c + l] & 0xF) | ((b->qh[l] >> (2 * c)) & 1) << 4;
            int hi = (b->qs[32 * c + l] >> 4) | ((b->qh[l] >> (2 * c + 1)) & 1) << 4;
            y[64 * c + l] = d1 * (float)lo - m1;
            y[64 * c + 32 + l] = d2 * (float)hi - m2;
        }
    }
}

static void deq_q6_k(const dt_block_q6_k *b, float *y)
{
    float d = dt_f16_to_f32(b->d);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++) {
                uint8_t lo = b->ql[64 * h + l + 32 * (s & 1)];
                int q = (s < 2 ? lo & 0xF : lo >> 4) | ((b->qh[32 * h + l] >> (2 * s)) & 3) << 4;
                float sc = (float)b->scales[8 * h + l / 16 + 2 * s];
                y[128 * h + 32 * s + l] = d * sc * (float)(q - 32);
            }
}

static void deq_iq4_xs(const dt_block_iq4_xs *b, float *y)
{
    float d = dt_f16_to_f32(b->d);
    for (int j = 0; j < 8; j++) {
        int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | ((b->scales_h >> (2 * j)) & 3) << 4;
        float dl = d * (float)(ls - 32);
        const uint8_t *qs = b->qs + 16 * j;
        for (int l = 0; l < 16; l++) {
            y[32 * j + l] = dl * (float)dt_iq4nl_values[qs[l] & 0xF];
            y[32 * j + l + 16] = dl * (float)dt_iq4nl_values[qs[l] >> 4];
        }
    }
}

static void deq_q8_k(const dt_block_q8_k *b, float *y)
{
    for (int j = 0; j < DT_QK_K; j++) y[j] = b->d * (float)b->qs[j];
}

/* Dequantises nb consecutive blocks of type T with deq_##name. */
#define DEQ_BLOCKS(T, fn)                                                                     \
    do {                                                                                      \
        const T *b = src;                                                                     \
        int64_t be = dt_block_elems(type);                                                    \
        for (int64_t i = 0; i < n / be; i++) fn(&b[i], dst + i * be);                         \
    } while (0)

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
    case DT_Q4_0: DEQ_BLOCKS(dt_block_q4_0, deq_q4_0); break;
    case DT_Q4_1: DEQ_BLOCKS(dt_block_q4_1, deq_q4_1); break;
    case DT_Q5_0: DEQ_BLOCKS(dt_block_q5_0, deq_q5_0); break;
    case DT_Q5_1: DEQ_BLOCKS(dt_block_q5_1, deq_q5_1); break;
    case DT_Q8_0: DEQ_BLOCKS(dt_block_q8_0, deq_q8_0); break;
    case DT_IQ4_NL: DEQ_BLOCKS(dt_block_iq4_nl, deq_iq4_nl); break;
    case DT_MXFP4: DEQ_BLOCKS(dt_block_mxfp4, deq_mxfp4); break;
    case DT_Q2_K: DEQ_BLOCKS(dt_block_q2_k, deq_q2_k); break;
    case DT_Q3_K: DEQ_BLOCKS(dt_block_q3_k, deq_q3_k); break;
    case DT_Q4_K: DEQ_BLOCKS(dt_block_q4_k, deq_q4_k); break;
    case DT_Q5_K: DEQ_BLOCKS(dt_block_q5_k, deq_q5_k); break;
    case DT_Q6_K: DEQ_BLOCKS(dt_block_q6_k, deq_q6_k); break;
    case DT_IQ4_XS: DEQ_BLOCKS(dt_block_iq4_xs, deq_iq4_xs); break;
    case DT_Q8_K: DEQ_BLOCKS(dt_block_q8_k, deq_q8_k); break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = 0.0f;
        break;
    }
}
