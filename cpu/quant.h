/*
 * quant.h — the arithmetic every CPU kernel for the quantised weight types shares (Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS). Internal to cpu/; no SIMD here.
 *
 * One formulation for all of them. A weight row is cut into groups of G = 16 or 32 weights (the
 * sub-blocks of the type) and each weight is w = S_g · v + W_g: v a small integer (unsigned,
 * 0..63, for most types; signed, the IQ4 code book's −127..113, for IQ4_NL and IQ4_XS, which
 * have W_g = 0), S_g and W_g floats of its group (e.g. Q4_K: v = q, S = d·sc, W = −dmin·m;
 * Q4_0: v = q, S = d, W = −8d). The activations are quantised once per matmul to blocks of 32,
 * x = d_x · q (cpu__q8s in internal.h: d_x = max|x| / 127, q = round-to-nearest-even(x / d_x)),
 * which also carry X_g = d_x · Σ_g q for each group. Then, per output and row:
 *
 *     acc = 0;  for every group g, in order:
 *         acc = fma((float)Σ_{i∈g} v_i·q_i, S_g · d_x, acc)      the integer sum is exact
 *         acc = fma(W_g, X_g, acc)                              (types with W only)
 *     out = acc + bias
 *
 * Every kernel (the scalar reference in quant.c, each SIMD level, the GEMV for few rows and the
 * GEMM for many) performs exactly these f32 operations in this order, so their results are equal
 * bit for bit: a row's result does not depend on the level, the batch or the thread count.
 */
#ifndef KVSERVE_CPU_QUANT_H
#define KVSERVE_CPU_QUANT_H

#include <stdint.h>

#include "cpu/internal.h"
#include "engine/dtype.h"

/* What a type looks like in this formulation. */
typedef struct cpu__qtraits {
    int group;     /* G: weights per group, 16 or 32 */
    int is_signed; /* 1: v is the signed IQ4 code book value and W = 0 */
} cpu__qtraits;

static inline cpu__qtraits cpu__qtraits_of(int type)
{
    switch (type) {
    case DT_Q2_K: case DT_Q3_K: case DT_Q6_K: return (cpu__qtraits){16, 0};
    case DT_IQ4_NL: case DT_IQ4_XS: return (cpu__qtraits){32, 1};
    default: return (cpu__qtraits){32, 0};
    }
}

/* f16 → f32 for the scales below: exact, so any implementation gives the same value; a SIMD file
 * may define CPU__QF16 (e.g. as F16C's _cvtsh_ss) before including this header. */
#ifndef CPU__QF16
#define CPU__QF16(h) dt_f16_to_f32(h)
#endif

static inline uint16_t cpu__qu16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* S and W of every group of the block at b (W untouched for signed types): the one definition
 * of the group scales, used by every level. */
static inline void cpu__qscales(int type, const uint8_t *b, float *S, float *W)
{
    switch (type) {
    case DT_Q4_0: S[0] = CPU__QF16(cpu__qu16(b)), W[0] = -8.0f * S[0]; break;
    case DT_Q5_0: S[0] = CPU__QF16(cpu__qu16(b)), W[0] = -16.0f * S[0]; break;
    case DT_Q4_1: case DT_Q5_1: S[0] = CPU__QF16(cpu__qu16(b)), W[0] = CPU__QF16(cpu__qu16(b + 2)); break;
    case DT_IQ4_NL: S[0] = CPU__QF16(cpu__qu16(b)); break;
    case DT_Q2_K: {
        float d = CPU__QF16(cpu__qu16(b + 80)), dmin = CPU__QF16(cpu__qu16(b + 82));
        for (int j = 0; j < 16; j++) {
            S[j] = d * (float)(b[j] & 0xF);
            W[j] = -(dmin * (float)(b[j] >> 4));
        }
        break;
    }
    case DT_Q3_K: {
        float d = CPU__QF16(cpu__qu16(b + 108));
        for (int j = 0; j < 16; j++) {
            S[j] = d * (float)dt_q3k_scale(b + 96, j);
            W[j] = -4.0f * S[j];
        }
        break;
    }
    case DT_Q4_K: case DT_Q5_K: {
        float d = CPU__QF16(cpu__qu16(b)), dmin = CPU__QF16(cpu__qu16(b + 2));
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            dt_k4_scale_min(b + 4, j, &sc, &m);
            S[j] = d * (float)sc;
            W[j] = -(dmin * (float)m);
        }
        break;
    }
    case DT_Q6_K: {
        float d = CPU__QF16(cpu__qu16(b + 208));
        for (int j = 0; j < 16; j++) {
            S[j] = d * (float)(int8_t)b[192 + j];
            W[j] = -32.0f * S[j];
        }
        break;
    }
    default: { /* IQ4_XS */
        float d = CPU__QF16(cpu__qu16(b));
        uint16_t sh = cpu__qu16(b + 2);
        for (int j = 0; j < 8; j++) {
            int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | ((sh >> (2 * j)) & 3) << 4;
            S[j] = d * (float)(ls - 32);
        }
        break;
    }
    }
}

/* The integer values of a whole block (dt_block_elems weights) into v, and S, W of each of its
 * groups (W left untouched for signed types). The scalar reference; the SIMD levels decode the
 * same values their own way and are tested against this. */
void cpu__qblock_decode(int type, const uint8_t *blk, int8_t *v, float *S, float *W);

/* Scalar reference of one output: the formulation above for weight row w (n_in weights of
 * type) against the activation row x (n_in / 32 blocks), bias not added. */
float cpu__qdot_ref(int type, const uint8_t *w, const cpu__q8s *x, int64_t n_in);

/* The types these kernels serve, in a fixed order (quant.c). */
#define CPU__QUANT_N_TYPES 11
extern const int cpu__quant_types[CPU__QUANT_N_TYPES];

/* The scalar level's plain run (a parallel-for body over cpu__mm_task units of outputs). */
void cpu__quant_run_scalar(void *task, int64_t lo_unit, int64_t hi_unit, int ith);

/* Per-thread scratch of the x86 GEMMs: a panel of 512 inputs × 16 outputs (values, S, W). */
#define CPU__QPANEL_BYTES ((size_t)512 * 16 + 2 * sizeof(float) * 32 * 16 + 64)

#endif
