/*
 * quant.c — the scalar reference kernels of the quantised weight types other than Q8_0 (Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K … Q6_K, IQ4_XS), as entries of the kernel table, and their
 * activation format: the formulation of quant.h in portable C.
 *
 * Every level runs the same formulation (quant_avx2.c and quant_vnni.c: quant_x86.h), so the
 * level changes the speed only, never a bit of the result. The table entry of each type takes
 * its activations as cpu__q8s blocks (CPU__ACT_Q8S, quantised once per matmul by
 * cpu__q8s_quantise from the table's own Q8_0 quantiser) and serves every number of rows with
 * its plain run (min_rows 1); its dot is the same arithmetic for one output (the table's
 * fallback). The weights are read where the file put them (the mapping): nothing is copied or
 * expanded at upload.
 *
 * The scalar run decodes each weight row once into its integer values and group scales
 * (cpu__qblock_decode) and then runs the formulation for every activation row.
 */
#include <errno.h>
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/quant.h"
#include "model/dtype.h"

/* ---- decoding ------------------------------------------------------------------------------ */

static void nibbles(const uint8_t *qs, int8_t *v) /* weights j, j + 16 from byte j */
{
    for (int j = 0; j < 16; j++) {
        v[j] = (int8_t)(qs[j] & 0xF);
        v[j + 16] = (int8_t)(qs[j] >> 4);
    }
}

static void fifth_bits(const uint8_t *qh4, int8_t *v) /* bit i of the little-endian qh: weight i */
{
    uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
    for (int i = 0; i < 32; i++) v[i] = (int8_t)(v[i] | ((qh >> i) & 1) << 4);
}

/* The values of a block, weight by weight, straight from the layouts of dtype.h. */
static void decode_values(int type, const uint8_t *b, int8_t *v)
{
    switch (type) {
    case DT_Q4_0: nibbles(b + 2, v); break;
    case DT_Q4_1: nibbles(b + 4, v); break;
    case DT_Q5_0: nibbles(b + 6, v), fifth_bits(b + 2, v); break;
    case DT_Q5_1: nibbles(b + 8, v), fifth_bits(b + 4, v); break;
    case DT_IQ4_NL:
        nibbles(b + 2, v);
        for (int i = 0; i < 32; i++) v[i] = dt_iq4nl_values[v[i]];
        break;
    case DT_MXFP4:
        nibbles(b + 1, v);
        for (int i = 0; i < 32; i++) v[i] = dt_mxfp4_values[v[i]];
        break;
    case DT_Q2_K:
        for (int i = 0; i < 256; i++) v[i] = (int8_t)((b[16 + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3);
        break;
    case DT_Q3_K: /* w = S·(lo − 4) when the high bit is clear, S·lo when set: v = lo + 4·hi, W = −4S */
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = (i % 128) / 32, l = i % 32;
            int lo = (b[32 + 32 * h + l] >> (2 * s)) & 3, hi = (b[l] >> (4 * h + s)) & 1;
            v[i] = (int8_t)(lo + 4 * hi);
        }
        break;
    case DT_Q4_K: case DT_Q5_K: {
        const uint8_t *qs = b + (type == DT_Q5_K ? 48 : 16);
        for (int i = 0; i < 256; i++) {
            int c = i / 64, high = (i % 64) >= 32, l = i % 32;
            int q = high ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
            if (type == DT_Q5_K) q |= ((b[16 + l] >> (2 * c + high)) & 1) << 4;
            v[i] = (int8_t)q;
        }
        break;
    }
    case DT_Q6_K:
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = (i % 128) / 32, l = i % 32;
            uint8_t lo = b[64 * h + l + 32 * (s & 1)];
            v[i] = (int8_t)((s < 2 ? lo & 0xF : lo >> 4) | ((b[128 + 32 * h + l] >> (2 * s)) & 3) << 4);
        }
        break;
    default: /* IQ4_XS */
        for (int j = 0; j < 8; j++) {
            nibbles(b + 8 + 16 * j, v + 32 * j);
            for (int i = 0; i < 32; i++) v[32 * j + i] = dt_iq4nl_values[v[32 * j + i]];
        }
        break;
    }
}

void cpu__qk_values(int type, const uint8_t *blk, int8_t *v)
{
    decode_values(type, blk, v);
}

void cpu__qblock_decode(int type, const uint8_t *blk, int8_t *v, float *S, float *W)
{
    decode_values(type, blk, v);
    cpu__qscales(type, blk, S, W);
}

/* The scalar Q8_K quantiser (the table's quantise_q8k): every level's equals it. */
static void quantise_q8k_scalar(const float *x, cpu__q8k *out, int64_t n)
{
    for (int64_t b = 0; b < n / 256; b++) {
        out[b].d = cpu__quantise_block(x + b * 256, 256, out[b].q);
        for (int h = 0; h < 16; h++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += out[b].q[16 * h + i];
            out[b].bsum[h] = (int16_t)s;
        }
    }
}

/* ---- scalar reference: super-block types ------------------------------------------------------ */

/* One super-block decoded: the second formulation's integers and factors. */
typedef struct qk_dec {
    int8_t v[256];
    int16_t sc[16], m[16];
    float d, e;
} qk_dec;

static void qk_decode(int type, const uint8_t *b, qk_dec *k)
{
    decode_values(type, b, k->v);
    cpu__qk_scales(type, b, k->sc, k->m, &k->d, &k->e);
}

/* The formulation's step for one super-block against one activation block. */
static float qk_step(const qk_dec *k, int has_m, const cpu__q8k *x, float acc)
{
    int32_t isum = 0, msum = 0;
    for (int h = 0; h < 16; h++) {
        int32_t s = 0;
        for (int i = 0; i < 16; i++) s += (int32_t)k->v[16 * h + i] * x->q[16 * h + i];
        isum += k->sc[h] * s;
        msum += k->m[h] * x->bsum[h];
    }
    acc = fmaf((float)isum, k->d * x->d, acc);
    if (has_m) acc = fmaf((float)msum, k->e * x->d, acc);
    return acc;
}

float cpu__qkdot_ref(int type, const uint8_t *w, const cpu__q8k *x, int64_t n_in)
{
    qk_dec k;
    float acc = 0.0f;
    size_t bb = dt_block_bytes(type);
    for (int64_t b = 0; b < n_in / 256; b++) {
        qk_decode(type, w + (size_t)b * bb, &k);
        acc = qk_step(&k, type != DT_IQ4_XS, &x[b], acc);
    }
    return acc;
}

/* The scalar run of a super-block type: each weight row decoded once (into the thread's
 * scratch), then dotted with every activation row. */
static void qk_run_scalar(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    const cpu__mm_task *t = task;
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out, nb = n_in / 256;
    size_t rb = dt_row_bytes(w->type, n_in), bb = dt_block_bytes(w->type);
    int has_m = w->type != DT_IQ4_XS;
    qk_dec *k = t->c->scratch[ith].p;
    int64_t lo = lo_unit * t->unit, hi = hi_unit * t->unit < n_out ? hi_unit * t->unit : n_out;
    for (int64_t o = lo; o < hi; o++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        for (int64_t b = 0; b < nb; b++) qk_decode(w->type, row + (size_t)b * bb, &k[b]);
        float bias = t->bias ? t->bias[o] : 0.0f;
        for (int r = 0; r < t->n_rows; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) acc = qk_step(&k[b], has_m, &t->xk[(size_t)r * nb + b], acc);
            t->out[(size_t)r * n_out + o] = acc + bias;
        }
    }
}

static size_t qk_scratch(const be_weight *w, int n_rows)
{
    (void)n_rows;
    return (size_t)(w->n_in / 256) * sizeof(qk_dec);
}

/* ---- scalar reference ---------------------------------------------------------------------- */

/* The formulation over a row piece decoded into v [n], S and W [n / G], continuing from acc. */
static float dot_decoded(const int8_t *v, const float *S, const float *W, cpu__qtraits tr,
                         const cpu__q8s *x, int64_t n, float acc)
{
    int G = tr.group;
    for (int64_t i0 = 0, g = 0; i0 < n; i0 += G, g++) {
        const cpu__q8s *xb = &x[i0 / 32];
        int off = (int)(i0 % 32);
        int32_t isum = 0;
        for (int k = 0; k < G; k++) isum += (int32_t)v[i0 + k] * xb->q[off + k];
        acc = fmaf((float)isum, S[g] * xb->d, acc);
        if (!tr.is_signed) acc = fmaf(W[g], xb->xs[2], acc);
    }
    return acc;
}

/* Decodes n weights (whole blocks) of row w into v, S, W. */
static void decode_row(int type, const uint8_t *w, int64_t n, int8_t *v, float *S, float *W)
{
    int be = dt_block_elems(type), G = cpu__qtraits_of(type).group;
    size_t bb = dt_block_bytes(type);
    for (int64_t b = 0; b < n / be; b++)
        cpu__qblock_decode(type, w + (size_t)b * bb, v + b * be, S + b * (be / G), W + b * (be / G));
}

#define REF_PIECE 4096 /* weights decoded at a time by cpu__qdot_ref (whole blocks of any type) */

float cpu__qdot_ref(int type, const uint8_t *w, const cpu__q8s *x, int64_t n_in)
{
    int8_t v[REF_PIECE];
    float S[REF_PIECE / 16], W[REF_PIECE / 16];
    float acc = 0.0f;
    cpu__qtraits tr = cpu__qtraits_of(type);
    for (int64_t i0 = 0; i0 < n_in; i0 += REF_PIECE) {
        int64_t n = n_in - i0 < REF_PIECE ? n_in - i0 : REF_PIECE;
        decode_row(type, w + dt_row_bytes(type, i0), n, v, S, W);
        acc = dot_decoded(v, S, W, tr, x + i0 / 32, n, acc);
    }
    return acc;
}

/* Per-thread scratch of the scalar run: one decoded row. */
static size_t ref_scratch_bytes(int64_t n_in)
{
    return (size_t)n_in + 2 * sizeof(float) * (size_t)(n_in / 16) + 64;
}

void cpu__quant_run_scalar(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    const cpu__mm_task *t = task;
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out, nb = n_in / 32;
    size_t rb = dt_row_bytes(w->type, n_in);
    cpu__qtraits tr = cpu__qtraits_of(w->type);
    int8_t *v = t->c->scratch[ith].p;
    float *S = (float *)(v + ((n_in + 63) & ~(int64_t)63)), *W = S + n_in / 16;
    const cpu__q8s *xq = t->xs;
    int64_t lo = lo_unit * t->unit, hi = hi_unit * t->unit < n_out ? hi_unit * t->unit : n_out;
    for (int64_t o = lo; o < hi; o++) {
        decode_row(w->type, (const uint8_t *)w->data + (size_t)o * rb, n_in, v, S, W);
        float b = t->bias ? t->bias[o] : 0.0f;
        for (int r = 0; r < t->n_rows; r++)
            t->out[(size_t)r * n_out + o] = dot_decoded(v, S, W, tr, xq + (size_t)r * nb, n_in, 0.0f) + b;
    }
}

/* ---- the table entries ---------------------------------------------------------------------- */

static size_t ref_scratch(const be_weight *w, int n_rows)
{
    (void)n_rows;
    return ref_scratch_bytes(w->n_in);
}

#define QUANT_DOT(T)                                                                              \
    static float dot_##T(const void *w, const void *x, int64_t n)                                 \
    {                                                                                             \
        return cpu__qk_is_super(DT_##T) ? cpu__qkdot_ref(DT_##T, w, x, n)                         \
                                        : cpu__qdot_ref(DT_##T, w, x, n);                         \
    }
QUANT_DOT(Q4_0)
QUANT_DOT(Q4_1)
QUANT_DOT(Q5_0)
QUANT_DOT(Q5_1)
QUANT_DOT(IQ4_NL)
QUANT_DOT(Q2_K)
QUANT_DOT(Q3_K)
QUANT_DOT(Q4_K)
QUANT_DOT(Q5_K)
QUANT_DOT(Q6_K)
QUANT_DOT(IQ4_XS)
QUANT_DOT(MXFP4)

const int cpu__quant_types[CPU__QUANT_N_TYPES] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K,
                                                  DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS, DT_MXFP4};

void cpu__quant_fill_scalar(cpu__kern *k)
{
    float (*const dots[CPU__QUANT_N_TYPES])(const void *, const void *, int64_t) = {
        dot_Q4_0, dot_Q4_1, dot_Q5_0, dot_Q5_1, dot_IQ4_NL, dot_Q2_K, dot_Q3_K, dot_Q4_K, dot_Q5_K, dot_Q6_K, dot_IQ4_XS,
        dot_MXFP4};
    k->quantise_q8k = quantise_q8k_scalar;
    for (int i = 0; i < CPU__QUANT_N_TYPES; i++) {
        int super = cpu__qk_is_super(cpu__quant_types[i]);
        k->mm[cpu__quant_types[i]] = (cpu__mm_kern){
            .act = super ? CPU__ACT_Q8K : cpu__quant_types[i] == DT_MXFP4 ? CPU__ACT_Q8S_H : CPU__ACT_Q8S,
            .dot_isa = CPU_ISA_SCALAR, .dot = dots[i],
            .plain = {.isa = CPU_ISA_SCALAR, .min_rows = 1, .align = 16, .scratch = super ? qk_scratch : ref_scratch,
                      .run = super ? qk_run_scalar : cpu__quant_run_scalar}};
    }
}
