/*
 * quant.h — the arithmetic every CPU kernel for the quantised weight types shares (Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS). Internal to cpu/; no SIMD here.
 * Two formulations: one for the types with blocks of 32, one for the super-block types.
 *
 * Blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4). Each weight is w = S · v + W: v a small
 * integer (unsigned 0..31; signed, the IQ4 code book's −127..113 for IQ4_NL and the doubled FP4
 * values −12..12 for MXFP4, which have W = 0), S and W floats of its block (e.g. Q4_0: v = q,
 * S = d, W = −8d; MXFP4: S = 2^(e − 128), exact). The activations are quantised
 * once per matmul to blocks of 32, x = d_x · q (cpu__q8s in internal.h: d_x = max|x| / 127,
 * q = round-to-nearest-even(x / d_x)), which also carry X = d_x · Σ q. Then, per output and row:
 *
 *     acc = 0;  for every block, in order:
 *         acc = fma((float)Σ v_i·q_i, S · d_x, acc)      the integer sum is exact
 *         acc = fma(W, X, acc)                          (types with W only)
 *     out = acc + bias
 *
 * Super-blocks of 256 (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS). Each weight of super-block b is
 * w_i = d_b · sc_h · v_i + e_b · m_h, h = i / 16 its half-group (the types' groups are 16 or 32
 * weights; a group of 32 gives both its halves its sc and m), with small integers v, sc, m
 * (cpu__qk_scales):
 *     Q4_K, Q5_K  v = q (0..15, 0..31), sc, m the 6-bit pairs, e = −dmin
 *     Q2_K        v = q (0..3), sc, m the 4-bit pairs, e = −dmin
 *     Q3_K        v = lo + 4·hi (0..7), sc the signed 6-bit scale (−32..31), m = 4·sc, e = −d
 *     Q6_K        v = q (0..63), sc the int8 scale, m = 32·sc, e = −d
 *     IQ4_XS      v the code book value (−127..113), sc = ls − 32, no m term
 * The activations are quantised once per matmul to blocks of 256, x = d_x · q (cpu__q8k: d_x =
 * max|x| / 127 over the block, q = round-to-nearest-even(x · (1/d_x))), with bsum_h = Σ of
 * each 16 q. Then, per output and row:
 *
 *     acc = 0;  for every super-block b, in order:
 *         isum = Σ_h sc_h · Σ_{i∈h} v_i·q_i                 exact int32
 *         msum = Σ_h m_h · bsum_h                           exact int32
 *         acc = fma((float)isum, d_b · d_x, acc)
 *         acc = fma((float)msum, e_b · d_x, acc)             (types with m only)
 *     out = acc + bias
 *
 * Ranges: |v·q| ≤ 127·127 (IQ4), so an int16 pair sum (maddubs) is at most 2·127·127 = 32258
 * for IQ4 (|v| times q carrying v's sign) and 2·63·127 = 16002 for the unsigned types; times
 * |sc| ≤ 128 and summed over 256 weights, |isum| ≤ 256·127·127·32 (IQ4_XS) or 256·63·127·128
 * (Q6_K) < 2^29; |msum| ≤ 16·(32·128)·(16·127) < 2^27. Nothing overflows, so every integer
 * sum is exact in any order.
 *
 * Every kernel (the scalar reference in quant.c, each SIMD level, the GEMV for few rows and the
 * GEMM for many) performs exactly these f32 operations in this order, so their results are equal
 * bit for bit: a row's result does not depend on the level, the batch or the thread count.
 */
#ifndef KVSERVE_CPU_QUANT_H
#define KVSERVE_CPU_QUANT_H

#include <stdint.h>

#include "cpu/internal.h"
#include "model/dtype.h"

/* What a type looks like in this formulation. */
typedef struct cpu__qtraits {
    int group;     /* G: weights per group, 16 or 32 */
    int is_signed; /* 1: v is the signed IQ4 code book value and W = 0 */
} cpu__qtraits;

static inline cpu__qtraits cpu__qtraits_of(int type)
{
    switch (type) {
    case DT_Q2_K: case DT_Q3_K: case DT_Q6_K: return (cpu__qtraits){16, 0};
    case DT_IQ4_NL: case DT_IQ4_XS: case DT_MXFP4: return (cpu__qtraits){32, 1};
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

/* S and W of the block at b of a blocks-of-32 type (W untouched for IQ4_NL): the one
 * definition of the block scales, used by every level. */
static inline void cpu__qscales(int type, const uint8_t *b, float *S, float *W)
{
    switch (type) {
    case DT_Q4_0: S[0] = CPU__QF16(cpu__qu16(b)), W[0] = -8.0f * S[0]; break;
    case DT_Q5_0: S[0] = CPU__QF16(cpu__qu16(b)), W[0] = -16.0f * S[0]; break;
    case DT_Q4_1: case DT_Q5_1: S[0] = CPU__QF16(cpu__qu16(b)), W[0] = CPU__QF16(cpu__qu16(b + 2)); break;
    case DT_IQ4_NL: S[0] = CPU__QF16(cpu__qu16(b)); break;
    case DT_MXFP4: S[0] = dt_e8m0_half(b[0]); break;
    default: break; /* the super-block types: cpu__qk_scales */
    }
}

/* The integer values of a block of a blocks-of-32 type into v, and its S, W (W left untouched
 * for IQ4_NL). The scalar reference; the SIMD levels decode the same values their own way and
 * are tested against this. */
void cpu__qblock_decode(int type, const uint8_t *blk, int8_t *v, float *S, float *W);

/* Scalar reference of one output of a blocks-of-32 type: the first formulation for weight row w
 * (n_in weights) against the activation row x (n_in / 32 blocks), bias not added. */
float cpu__qdot_ref(int type, const uint8_t *w, const cpu__q8s *x, int64_t n_in);

/* ---- the super-block types ------------------------------------------------------------------- */

static inline int cpu__qk_is_super(int type)
{
    return type == DT_Q2_K || type == DT_Q3_K || type == DT_Q4_K || type == DT_Q5_K || type == DT_Q6_K ||
           type == DT_IQ4_XS;
}

/* The integer scales sc[16] and mins m[16] of each half-group (16 weights) of the super-block
 * at b, and its float factors d and e (e = 0 and m = 0 for IQ4_XS): the one definition every
 * level uses. */
static inline void cpu__qk_scales(int type, const uint8_t *b, int16_t *sc, int16_t *m, float *d, float *e)
{
    switch (type) {
    case DT_Q2_K:
        *d = CPU__QF16(cpu__qu16(b + 80)), *e = -CPU__QF16(cpu__qu16(b + 82));
        for (int h = 0; h < 16; h++) sc[h] = b[h] & 0xF, m[h] = b[h] >> 4;
        break;
    case DT_Q3_K:
        *d = CPU__QF16(cpu__qu16(b + 108)), *e = -*d;
        for (int h = 0; h < 16; h++) sc[h] = (int16_t)dt_q3k_scale(b + 96, h), m[h] = (int16_t)(4 * sc[h]);
        break;
    case DT_Q4_K: case DT_Q5_K:
        *d = CPU__QF16(cpu__qu16(b)), *e = -CPU__QF16(cpu__qu16(b + 2));
        for (int g = 0; g < 8; g++) {
            uint8_t s, mn;
            dt_k4_scale_min(b + 4, g, &s, &mn);
            sc[2 * g] = sc[2 * g + 1] = s, m[2 * g] = m[2 * g + 1] = mn;
        }
        break;
    case DT_Q6_K:
        *d = CPU__QF16(cpu__qu16(b + 208)), *e = -*d;
        for (int h = 0; h < 16; h++) sc[h] = (int8_t)b[192 + h], m[h] = (int16_t)(32 * sc[h]);
        break;
    default: { /* IQ4_XS */
        uint16_t sh = cpu__qu16(b + 2);
        *d = CPU__QF16(cpu__qu16(b)), *e = 0.0f;
        for (int g = 0; g < 8; g++) {
            int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xF) | ((sh >> (2 * g)) & 3) << 4;
            sc[2 * g] = sc[2 * g + 1] = (int16_t)(ls - 32), m[2 * g] = m[2 * g + 1] = 0;
        }
        break;
    }
    }
}

/* The values v[256] of a super-block (as the table above defines them): the scalar reference. */
void cpu__qk_values(int type, const uint8_t *blk, int8_t *v);

/* Scalar reference of one output of a super-block type: the second formulation for weight row w
 * (n_in weights) against the activation row x (n_in / 256 blocks), bias not added. */
float cpu__qkdot_ref(int type, const uint8_t *w, const cpu__q8k *x, int64_t n_in);

/* The types these kernels serve, in a fixed order (quant.c). */
#define CPU__QUANT_N_TYPES 12
extern const int cpu__quant_types[CPU__QUANT_N_TYPES];

/* The scalar level's plain run (a parallel-for body over cpu__mm_task units of outputs). */
void cpu__quant_run_scalar(void *task, int64_t lo_unit, int64_t hi_unit, int ith);

/* Per-thread scratch of the x86 GEMMs: a panel of 512 inputs × 16 outputs (values, S, W). */
#define CPU__QPANEL_BYTES ((size_t)512 * 16 + 2 * sizeof(float) * 32 * 16 + 64)

#endif
