/*
 * quant_int.h — the integer form of the quantised weight types and the 8-bit activation blocks
 * that the integer kernels (the matrix-vector mmvq, cuda/qmatvec_kernels.h, and the GEMM mmq,
 * cuda/qgemm_kernels.h) multiply them with. Host and device code alike (CUDA_HD, launch.h), so
 * tests/test_cuda_host.c checks on the CPU, against dt_to_f32, the very arithmetic the kernels
 * run; the layouts are those of model/dtype.h.
 *
 * A row of weights is cut into chunks of 32 consecutive weights (a legacy block is one chunk, a
 * K-quant super-block eight). Every type writes each weight of a chunk as
 *
 *     w[i] = D · s[h] · q[i] − DM · m[h],     h = i / 16 (the half of the chunk)
 *
 * with q a signed 8-bit integer (the file's code, its constant offset already subtracted:
 * Q4_0's 8, Q5_0's 16, Q3_K's 4, Q6_K's 32; IQ4's code book value; MXFP4's E2M1 value doubled,
 * an integer of {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}, with D half its E8M0 scale), s and m small integers per
 * half-chunk (the K-quants' sub-block scales and mins: Q2_K, Q3_K and Q6_K change them every 16
 * weights, the others every 32 or never) and D, DM the block's f32 scale and min scale. The dot
 * product of a chunk with 8-bit activations a[i] (scale dx) is then
 *
 *     dx · (D · Σ_h s[h] · Σ_{i∈h} q[i] a[i]  −  DM · Σ_h m[h] · Σ_{i∈h} a[i])
 *
 * two integer sums per half that an integer tensor-core instruction (mma.sync s8 × s8 → s32)
 * computes exactly; the types with mins get the second one from the same instruction with the
 * mins, repeated, as the A operand.
 *
 * Lane layout: the four lanes t = 0..3 of a quad of an mma fragment hold the weights 4t..4t+3 of
 * a chunk (q[0], four bytes) and 16+4t..16+4t+3 (q[1]), exactly the bytes of the A fragment of
 * mma.m16n8k32 (and of the two m16n8k16 halves) of their row (PTX ISA, "Matrix Fragments for
 * mma.m16n8k32"). The activations are stored permuted within each block of 32 so that the same
 * lane's eight activation bytes are contiguous (cuda_qa_pos).
 *
 * Activations are quantised per block of cuda_q_act_block(type) values (32 for the legacy types,
 * 256 for the super-block types, as the CPU backend's q8 / q8k blocks): dx = max|x| / 127,
 * a[i] = round-to-nearest-even(x[i] · (1 / dx)), 0 for an all-zero block; the same f32 operations
 * as the CPU backend's quantisers (cpu/act.c), so both backends see the same integers.
 */
#ifndef KVSERVE_CUDA_QUANT_INT_H
#define KVSERVE_CUDA_QUANT_INT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/quant_formats.h"

/* The decoders below are called with a type known at compile time (a kernel template's); they
 * must inline so that their switch folds away. */
#ifdef __CUDACC__
#define CUDA_QI_INLINE __forceinline__
#else
#define CUDA_QI_INLINE inline
#endif

/* ---- type traits ------------------------------------------------------------------------- */

/* Activation values per scale for a weight type: its weight block (32 or 256). */
static CUDA_QI_INLINE CUDA_HD int cuda_q_act_block(int type)
{
    return cuda_q_block_elems(type);
}

/* 1 when the sub-block scales change every 16 weights (two halves of a chunk differ). */
static CUDA_QI_INLINE CUDA_HD int cuda_q_split16(int type)
{
    return type == DT_Q2_K || type == DT_Q3_K || type == DT_Q6_K;
}

/* 1 when the type has a min term (DM · m ≠ 0): an affine code rather than an offset one. */
static CUDA_QI_INLINE CUDA_HD int cuda_q_has_min(int type)
{
    return type == DT_Q4_1 || type == DT_Q5_1 || type == DT_Q2_K || type == DT_Q4_K || type == DT_Q5_K;
}

/* ---- byte-level helpers ------------------------------------------------------------------ */

/* Little-endian loads from a block: 2-byte aligned p for the 16-bit and the _a2 form, 4-byte
 * aligned p for cuda_qi_u32 (the layouts guarantee it: see cuda_qi_ints). */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_u16(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
    return *(const uint16_t *)p;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
#endif
}

static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_u32(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_u32_a2(const uint8_t *p)
{
    return cuda_qi_u16(p) | cuda_qi_u16(p + 2) << 16;
}

/* The same from any address (MXFP4's blocks of 17 bytes): four byte loads. */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_u32_a1(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* PTX prmt in its default mode (CUDA's __byte_perm): byte n of the result is byte
 * (s >> 4n) & 7 of the eight bytes {x, y}, x's lowest first. */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_prmt(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    uint64_t in = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) r |= (uint32_t)((in >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
#endif
}

/* Four 4-bit codes (0..15, one per byte of v) → the entries of a 16-byte code book (l0, l1 the
 * entries of codes 0..7, h0, h1 of 8..15, lowest code in the lowest byte) as four signed bytes:
 * two 8-entry byte permutes and a select on each code's top bit. */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_book(uint32_t v, uint32_t l0, uint32_t l1, uint32_t h0, uint32_t h1)
{
    uint32_t sel = (v & 7) | (v >> 4 & 0x70) | (v >> 8 & 0x700) | (v >> 12 & 0x7000);
    uint32_t lo = cuda_prmt(l0, l1, sel), hi = cuda_prmt(h0, h1, sel);
    uint32_t mask = (v >> 3 & 0x01010101u) * 0xFFu;
    return (lo & ~mask) | (hi & mask);
}

/* Four IQ4 codes → their code book values (dt_iq4nl_values). */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_iq4(uint32_t v)
{
    /* codes 0..7: -127 .. -10; codes 8..15: 1 .. 113 */
    return cuda_qi_book(v, 0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
}

/* Four MXFP4 codes (E2M1) → their values doubled (dt_mxfp4_values): the integers 0, 1, 2, 3, 4,
 * 6, 8, 12, then the same negated. */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_fp4(uint32_t v)
{
    return cuda_qi_book(v, 0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);
}

/* Byte-wise n − off for four unsigned codes n < 128 − off… as signed bytes: the bias 128 − off
 * added (no carry between bytes: every byte stays below 256), then the top bit flipped. */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_sub_off(uint32_t v, uint32_t off)
{
    return (v + (0x80u - off) * 0x01010101u) ^ 0x80808080u;
}

/* The low four bits of n (a 4-bit field) spread to bit 0 of each byte. */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_spread4(uint32_t n)
{
    return (n & 1) | (n & 2) << 7 | (n & 4) << 14 | (n & 8) << 21;
}

/* ---- the integer chunk form -------------------------------------------------------------- */

/* q[0], q[1] (four signed bytes each): weights 4t..4t+3 and 16+4t..16+4t+3 of chunk j of the
 * block at b (j = 0 for the legacy types, 0..7 for the super-blocks), lane t = 0..3. Loads are
 * 32-bit where the block size keeps them aligned (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K, IQ4_XS: blocks
 * of 20, 24, 84, 144, 176, 136 bytes) and pairs of 16-bit ones elsewhere. */
static CUDA_QI_INLINE CUDA_HD void cuda_qi_ints(int type, const uint8_t *b, int j, int t, uint32_t q[2])
{
    const uint32_t M4 = 0x0F0F0F0Fu;
    switch (type) {
    case DT_Q4_0: {
        uint32_t v = cuda_qi_u32_a2(b + 2 + 4 * t);
        q[0] = cuda_qi_sub_off(v & M4, 8);
        q[1] = cuda_qi_sub_off(v >> 4 & M4, 8);
        break;
    }
    case DT_IQ4_NL: {
        uint32_t v = cuda_qi_u32_a2(b + 2 + 4 * t);
        q[0] = cuda_qi_iq4(v & M4);
        q[1] = cuda_qi_iq4(v >> 4 & M4);
        break;
    }
    case DT_Q4_1: {
        uint32_t v = cuda_qi_u32(b + 4 + 4 * t);
        q[0] = v & M4;
        q[1] = v >> 4 & M4;
        break;
    }
    case DT_Q5_0: case DT_Q5_1: {
        int o = type == DT_Q5_0 ? 2 : 4; /* qh, then qs 4 bytes on */
        uint32_t h = type == DT_Q5_0 ? cuda_qi_u32_a2(b + o) : cuda_qi_u32(b + o);
        uint32_t v = type == DT_Q5_0 ? cuda_qi_u32_a2(b + o + 4 + 4 * t) : cuda_qi_u32(b + o + 4 + 4 * t);
        q[0] = (v & M4) | cuda_qi_spread4(h >> 4 * t) << 4;
        q[1] = (v >> 4 & M4) | cuda_qi_spread4(h >> (16 + 4 * t)) << 4;
        if (type == DT_Q5_0) q[0] = cuda_qi_sub_off(q[0], 16), q[1] = cuda_qi_sub_off(q[1], 16);
        break;
    }
    case DT_MXFP4: {
        uint32_t v = cuda_qi_u32_a1(b + 1 + 4 * t);
        q[0] = cuda_qi_fp4(v & M4);
        q[1] = cuda_qi_fp4(v >> 4 & M4);
        break;
    }
    case DT_Q8_0:
        q[0] = cuda_qi_u32_a2(b + 2 + 4 * t);
        q[1] = cuda_qi_u32_a2(b + 18 + 4 * t);
        break;
    case DT_Q2_K: {
        int h = j / 4, s = 2 * (j % 4);
        q[0] = cuda_qi_u32(b + 16 + 32 * h + 4 * t) >> s & 0x03030303u;
        q[1] = cuda_qi_u32(b + 32 + 32 * h + 4 * t) >> s & 0x03030303u;
        break;
    }
    case DT_Q3_K: {
        int h = j / 4, s = j % 4;
        for (int k = 0; k < 2; k++) {
            uint32_t lo = cuda_qi_u32_a2(b + 32 + 32 * h + 16 * k + 4 * t) >> 2 * s & 0x03030303u;
            uint32_t hb = cuda_qi_u32_a2(b + 16 * k + 4 * t) >> (4 * h + s) & 0x01010101u;
            q[k] = cuda_qi_sub_off(lo | hb << 2, 4);
        }
        break;
    }
    case DT_Q4_K: case DT_Q5_K: {
        int c = j / 2, sh = 4 * (j % 2), o = type == DT_Q5_K ? 48 : 16;
        for (int k = 0; k < 2; k++) {
            q[k] = cuda_qi_u32(b + o + 32 * c + 16 * k + 4 * t) >> sh & M4;
            if (type == DT_Q5_K) q[k] |= (cuda_qi_u32(b + 16 + 16 * k + 4 * t) >> j & 0x01010101u) << 4;
        }
        break;
    }
    case DT_Q6_K: {
        int h = j / 4, s = j % 4;
        for (int k = 0; k < 2; k++) {
            uint32_t lo = cuda_qi_u32_a2(b + 64 * h + 32 * (s & 1) + 16 * k + 4 * t);
            lo = (s < 2 ? lo : lo >> 4) & M4;
            uint32_t hi = cuda_qi_u32_a2(b + 128 + 32 * h + 16 * k + 4 * t) >> 2 * s & 0x03030303u;
            q[k] = cuda_qi_sub_off(lo | hi << 4, 32);
        }
        break;
    }
    default: { /* IQ4_XS */
        uint32_t v = cuda_qi_u32(b + 8 + 16 * j + 4 * t);
        q[0] = cuda_qi_iq4(v & M4);
        q[1] = cuda_qi_iq4(v >> 4 & M4);
        break;
    }
    }
}

/* An f16 given as its bits, as f32 (exact): the hardware conversion on the device. */
static CUDA_QI_INLINE CUDA_HD float cuda_qi_f16(uint32_t bits)
{
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)bits));
#else
    return cuda_f16_to_f32((uint16_t)bits);
#endif
}

/* The sub-block scale bytes of the block at b (at most 16), as four little-endian words loaded
 * once per block: the 16 scale bytes of Q2_K and Q6_K, the 12 of Q3_K, Q4_K and Q5_K, and IQ4_XS's
 * high bits (h[0], 16 bits) and low nibbles (h[1]); nothing for the legacy types. */
static CUDA_QI_INLINE CUDA_HD void cuda_qi_head(int type, const uint8_t *b, uint32_t h[4])
{
    h[0] = h[1] = h[2] = h[3] = 0;
    switch (type) {
    case DT_Q2_K:
        for (int k = 0; k < 4; k++) h[k] = cuda_qi_u32(b + 4 * k);
        break;
    case DT_Q3_K:
        for (int k = 0; k < 3; k++) h[k] = cuda_qi_u32_a2(b + 96 + 4 * k);
        break;
    case DT_Q4_K: case DT_Q5_K:
        for (int k = 0; k < 3; k++) h[k] = cuda_qi_u32(b + 4 + 4 * k);
        break;
    case DT_Q6_K:
        for (int k = 0; k < 4; k++) h[k] = cuda_qi_u32_a2(b + 192 + 4 * k);
        break;
    case DT_IQ4_XS:
        h[0] = cuda_qi_u16(b + 2);
        h[1] = cuda_qi_u32(b + 4);
        break;
    default: break;
    }
}

/* Byte i of a head. */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_hb(const uint32_t h[4], int i)
{
    return h[i >> 2] >> 8 * (i & 3) & 0xFF;
}

/* The sub-block integers of chunk j from the block's head, as one word: byte 0 s[0], byte 1 s[1]
 * (signed), byte 2 m[0], byte 3 m[1] (0..63). 0x00000101 (s = 1, no min) for the types without
 * sub-blocks, 0x01010101 for Q4_1 / Q5_1 (their min applies to every weight). */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_sub_h(int type, const uint32_t h[4], int j)
{
    uint32_t s0, s1, m0 = 0, m1 = 0;
    switch (type) {
    case DT_Q4_1: case DT_Q5_1: return 0x01010101u;
    case DT_Q2_K:
        s0 = cuda_qi_hb(h, 2 * j) & 0xF, m0 = cuda_qi_hb(h, 2 * j) >> 4;
        s1 = cuda_qi_hb(h, 2 * j + 1) & 0xF, m1 = cuda_qi_hb(h, 2 * j + 1) >> 4;
        break;
    case DT_Q3_K: {
        uint32_t v[2];
        for (int k = 0; k < 2; k++) {
            int sb = 2 * j + k;
            uint32_t lo = sb < 8 ? cuda_qi_hb(h, sb) & 0xF : cuda_qi_hb(h, sb - 8) >> 4;
            uint32_t hi = cuda_qi_hb(h, 8 + sb % 4) >> (2 * (sb / 4)) & 3;
            v[k] = ((lo | hi << 4) - 32) & 0xFF;
        }
        s0 = v[0], s1 = v[1];
        break;
    }
    case DT_Q4_K: case DT_Q5_K: /* dt_k4_scale_min */
        if (j < 4) {
            s0 = cuda_qi_hb(h, j) & 63, m0 = cuda_qi_hb(h, j + 4) & 63;
        } else {
            s0 = (cuda_qi_hb(h, j + 4) & 0xF) | (cuda_qi_hb(h, j - 4) >> 6) << 4;
            m0 = (cuda_qi_hb(h, j + 4) >> 4) | (cuda_qi_hb(h, j) >> 6) << 4;
        }
        s1 = s0, m1 = m0;
        break;
    case DT_Q6_K:
        s0 = cuda_qi_hb(h, 8 * (j / 4) + 2 * (j % 4)), s1 = cuda_qi_hb(h, 8 * (j / 4) + 2 * (j % 4) + 1);
        break;
    case DT_IQ4_XS: {
        uint32_t ls = (h[1] >> (4 * j) & 0xF) | (h[0] >> (2 * j) & 3) << 4;
        s0 = s1 = (ls - 32) & 0xFF;
        break;
    }
    default: return 0x00000101u; /* Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 */
    }
    return s0 | s1 << 8 | m0 << 16 | m1 << 24;
}

/* The same from the block itself (head and decoding in one). */
static CUDA_QI_INLINE CUDA_HD uint32_t cuda_qi_sub(int type, const uint8_t *b, int j)
{
    uint32_t h[4];
    cuda_qi_head(type, b, h);
    return cuda_qi_sub_h(type, h, j);
}

/* s[h] (signed) and m[h] of a sub word. */
static CUDA_QI_INLINE CUDA_HD int cuda_qi_s(uint32_t sub, int h)
{
    return (int8_t)(sub >> (8 * h));
}
static CUDA_QI_INLINE CUDA_HD int cuda_qi_m(uint32_t sub, int h)
{
    return (int)(sub >> (16 + 8 * h) & 0xFF);
}

/* D and DM of the block at b (DM 0 without a min; Q4_1 / Q5_1 store +m, so DM is −m): one 16-
 * or 32-bit load. */
static CUDA_QI_INLINE CUDA_HD void cuda_qi_scales(int type, const uint8_t *b, float *d, float *dm)
{
    uint32_t v;
    switch (type) {
    case DT_Q4_1: case DT_Q5_1:
        v = cuda_qi_u32(b);
        *d = cuda_qi_f16(v & 0xFFFF), *dm = -cuda_qi_f16(v >> 16);
        return;
    case DT_Q2_K: case DT_Q4_K: case DT_Q5_K:
        v = cuda_qi_u32(b + (type == DT_Q2_K ? 80 : 0));
        *d = cuda_qi_f16(v & 0xFFFF), *dm = cuda_qi_f16(v >> 16);
        return;
    case DT_MXFP4: *d = cuda_q_e8m0_half(b[0]), *dm = 0.0f; return; /* the E8M0 scale halved: q is doubled */
    case DT_Q3_K: *d = cuda_qi_f16(cuda_qi_u16(b + 108)), *dm = 0.0f; return;
    case DT_Q6_K: *d = cuda_qi_f16(cuda_qi_u16(b + 208)), *dm = 0.0f; return;
    default: *d = cuda_qi_f16(cuda_qi_u16(b)), *dm = 0.0f; return; /* Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS */
    }
}

/* ---- 8-bit activation blocks ------------------------------------------------------------- */

/* Where value i (0..31) of a block of 32 activations is stored: lane t's values 4t..4t+3 and
 * 16+4t..16+4t+3 side by side at bytes 8t..8t+7. */
static CUDA_QI_INLINE CUDA_HD int cuda_qa_pos(int i)
{
    return 8 * ((i & 15) >> 2) + 4 * (i >> 4) + (i & 3);
}

/* The reference quantisation of n activations (one block): q[i] in natural order, returns the
 * scale dx. The kernels (cuda/qact_kernels.h) compute exactly this. */
static CUDA_QI_INLINE CUDA_HD float cuda_qa_quantise(const float *x, int n, int8_t *q)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) q[i] = (int8_t)rintf(x[i] * id);
    return d;
}

/* Bytes of the quantised activations of n_rows rows of n_in values for a weight type: the int8
 * values [n_rows][n_in], then the f32 scales [n_rows][n_in / cuda_q_act_block(type)], 16-byte
 * aligned. */
static CUDA_QI_INLINE CUDA_HD size_t cuda_qa_scales_offset(int64_t n_rows, int64_t n_in)
{
    return ((size_t)(n_rows * n_in) + 15) & ~(size_t)15;
}
static CUDA_QI_INLINE CUDA_HD size_t cuda_qa_bytes(int type, int64_t n_rows, int64_t n_in)
{
    return cuda_qa_scales_offset(n_rows, n_in) + (size_t)(n_rows * (n_in / cuda_q_act_block(type))) * 4;
}

/* ---- launch geometry of mmvq (cuda/qmatvec_kernels.h) ------------------------------------ */

/* Warps of an mmvq block (all on one tile of 16 weight rows). */
#define CUDA_MMVQ_WARPS 4
/* Most blocks one tile's input dimension is split over (gridDim.y). */
#define CUDA_MMVQ_MAX_SPLIT 8

/* Blocks per tile (gridDim.y) for a matrix of n_out rows and n_blocks weight blocks a row on a
 * GPU of n_sm multiprocessors: enough warps for about 24 per multiprocessor, each with at least
 * min_per_warp blocks to stream (4 blocks of 32, or one super-block of 256). */
static inline CUDA_HD int cuda_mmvq_split(int64_t n_out, int64_t n_blocks, int block_elems, int n_sm)
{
    int64_t tiles = cuda_div_up(n_out, 16), warps = tiles * CUDA_MMVQ_WARPS;
    int64_t want = cuda_div_up((int64_t)n_sm * 24, warps);
    int64_t min_per_warp = block_elems == 32 ? 4 : 1;
    int64_t most = n_blocks / (CUDA_MMVQ_WARPS * min_per_warp);
    if (want > most) want = most;
    if (want > CUDA_MMVQ_MAX_SPLIT) want = CUDA_MMVQ_MAX_SPLIT;
    return want < 1 ? 1 : (int)want;
}

#endif
