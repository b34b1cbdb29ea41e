/*
 * gemm_neon.c — the Advanced SIMD matmul for F32, F16 and BF16 weights packed at upload, every
 * number of rows: out[r][o] = Σ_i x[r][i] · W[o][i].
 *
 * The copy is the panel layout shared with the x86 GEMMs (cpu__panel_pack): tiles of 32
 * outputs, each [n_in][32] elements of the weight's own type. The microkernel keeps 3 rows ×
 * 32 outputs in 24 of the 32 vector registers: per input k it duplicates the rows' x[k] and,
 * for each of the eight panel vectors of 4 (F16 widened by FCVTL, BF16 by a shift as it loads),
 * issues three FMAs. Few rows (≤ 3: decode) run the whole depth in one sweep; more take slices
 * of KC inputs that stay in L1 for every row group, F16/BF16 slices converted to f32 in scratch
 * once. A row's sums are formed in the same order whatever the batch. Column tails (the last
 * tile of a matrix whose outputs are not a multiple of 32) go through a small buffer.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_neon.h"
#include "model/dtype.h"

#define NR CPU__PANEL_NR
#define KC CPU__PANEL_KC
#define MR 3

/* 4 panel elements from index i as f32. */
static inline __attribute__((always_inline)) float32x4_t panel4(int type, const void *panel, int64_t i)
{
    if (type == DT_F32) return vld1q_f32((const float *)panel + i);
    if (type == DT_F16) return cpu__f16x4_to_f32((const uint16_t *)panel + i);
    return cpu__bf16x4_to_f32((const uint16_t *)panel + i);
}

/* c[r][0..32) (+)= Σ_k x[r][k] · panel[k][0..32) for mr ≤ 3 rows; c has ldc floats a row and
 * all 32 columns are valid (the caller buffers column tails). */
static inline __attribute__((always_inline)) void ukernel(int type, int mr, const void *panel, const float *x,
                                                          int64_t ldx, int kc, float *c, int64_t ldc, int load_c)
{
    float32x4_t acc[MR][8];
#pragma GCC unroll 3
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) acc[r][u] = load_c ? vld1q_f32(c + r * ldc + 4 * u) : vdupq_n_f32(0);
    for (int k = 0; k < kc; k++) {
        float32x4_t a[MR];
#pragma GCC unroll 3
        for (int r = 0; r < mr; r++) a[r] = vld1q_dup_f32(x + r * ldx + k);
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) {
            float32x4_t b = panel4(type, panel, (int64_t)k * NR + 4 * u);
#pragma GCC unroll 3
            for (int r = 0; r < mr; r++) acc[r][u] = vfmaq_f32(acc[r][u], a[r], b);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) vst1q_f32(c + r * ldc + 4 * u, acc[r][u]);
}

static inline __attribute__((always_inline)) void ukernel_rows(int type, int mr, const void *panel,
                                                               const float *x, int64_t ldx, int kc, float *c,
                                                               int64_t ldc, int load_c)
{
    switch (mr) {
    case 3: ukernel(type, 3, panel, x, ldx, kc, c, ldc, load_c); break;
    case 2: ukernel(type, 2, panel, x, ldx, kc, c, ldc, load_c); break;
    default: ukernel(type, 1, panel, x, ldx, kc, c, ldc, load_c); break;
    }
}

/* The microkernel for a panel of element type `type`; columns past ncols are neither read nor
 * written in c. */
static void ukernel_typed(int type, int mr, const void *panel, const float *x, int64_t ldx, int kc, float *c,
                          int64_t ldc, int ncols, int load_c)
{
    float buf[MR * NR];
    float *cc = c;
    int64_t ldcc = ldc;
    if (ncols < NR) { /* a column tail: through the buffer */
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < NR; j++) buf[r * NR + j] = load_c && j < ncols ? c[r * ldc + j] : 0.0f;
        cc = buf;
        ldcc = NR;
    }
    switch (type) {
    case DT_F16: ukernel_rows(DT_F16, mr, panel, x, ldx, kc, cc, ldcc, load_c); break;
    case DT_BF16: ukernel_rows(DT_BF16, mr, panel, x, ldx, kc, cc, ldcc, load_c); break;
    default: ukernel_rows(DT_F32, mr, panel, x, ldx, kc, cc, ldcc, load_c); break;
    }
    if (ncols < NR)
        for (int r = 0; r < mr; r++) memcpy(c + r * ldc, buf + r * NR, (size_t)ncols * sizeof(float));
}

/* One column tile of up to 32 outputs from o0, every row. */
static void tile_rows(const cpu__mm_task *t, const char *tile, int64_t o0, int ith)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t es = dt_row_bytes(w->type, 1);
    int ncols = n_out - o0 < NR ? (int)(n_out - o0) : NR;
    int64_t kcs = t->n_rows <= MR ? n_in : KC;
    for (int64_t k0 = 0; k0 < n_in; k0 += kcs) {
        int kc = n_in - k0 < kcs ? (int)(n_in - k0) : (int)kcs;
        const void *panel = tile + (size_t)k0 * NR * es;
        int ptype = w->type;
        if (kcs < n_in) /* slices: ask for the next one now */
            for (size_t off = 0; off < (size_t)KC * NR * es; off += 64)
                __builtin_prefetch((const char *)panel + (size_t)kc * NR * es + off, 0, 2);
        if (ptype != DT_F32 && t->n_rows > MR) { /* several row groups: convert the slice once */
            float *f = t->c->scratch[ith].p;
            for (int i = 0; i < kc * NR; i += 4) vst1q_f32(f + i, panel4(ptype, panel, i));
            panel = f;
            ptype = DT_F32;
        }
        for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
            int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
            ukernel_typed(ptype, mr, panel, t->x + (size_t)r0 * n_in + k0, n_in, kc,
                          t->out + (size_t)r0 * n_out + o0, n_out, ncols, k0 > 0);
        }
    }
    if (t->bias)
        for (int r = 0; r < t->n_rows; r++)
            for (int j = 0; j < ncols; j++) t->out[(size_t)r * n_out + o0 + j] += t->bias[o0 + j];
}

static void prepacked_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    cpu__mm_task *t = task;
    const be_weight *w = t->w;
    size_t tb = (size_t)w->n_in * NR * dt_row_bytes(w->type, 1);
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < w->n_out ? lo + t->unit : w->n_out;
        for (int64_t o0 = lo; o0 < hi; o0 += NR) tile_rows(t, (const char *)w->extra + (size_t)(o0 / NR) * tb, o0, ith);
    }
}

static int packed_align(int n_rows)
{
    return NR;
}

static size_t packed_scratch(const be_weight *w, int n_rows)
{
    return w->type != DT_F32 && n_rows > MR ? CPU__PANEL_SCRATCH : 0;
}

void cpu__gemm_fill_neon(cpu__kern *k)
{
    cpu__mm_packed packed = {.isa = CPU_ISA_NEON, .bytes = cpu__panel_bytes_f32, .pack = cpu__panel_pack,
                             .align = packed_align, .scratch = packed_scratch, .run = prepacked_run};
    k->mm[DT_F32].packed = packed;
    packed.bytes = cpu__panel_bytes_16;
    k->mm[DT_F16].packed = k->mm[DT_BF16].packed = packed;
}
