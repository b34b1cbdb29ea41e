/*
 * gemm_avx2.c — the AVX2 + FMA + F16C matmul for F32, F16 and BF16 weights packed at upload,
 * every number of rows: out[r][o] = Σ_i x[r][i] · W[o][i].
 *
 * The copy is the panel layout shared with the AVX-512 GEMM (cpu__panel_pack): tiles of 32
 * outputs, each [n_in][32] elements of the weight's own type. A thread takes column tiles; the
 * microkernel keeps 3 rows × 32 outputs in twelve ymm accumulators (the 16 registers hold them,
 * three broadcast activations and one panel vector): per input k it broadcasts the rows' x[k]
 * and, for each of the four panel vectors (converted from F16 by F16C or BF16 by a shift as it
 * loads), issues three FMAs. With one row the four chains of 8 lanes still outrun the memory the
 * weights stream from.
 *
 * Few rows (≤ 3: decode) run the whole depth in one sweep; more rows take slices of KC = 128
 * inputs that stay in L1 while every row group passes over them, F16/BF16 slices converted to
 * f32 in scratch once rather than per group. Each row's sums are formed in the same order
 * whatever the batch, so a sequence's results do not depend on what it is batched with. Column
 * tails are zero in the panel and masked at the stores.
 */
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "model/dtype.h"

#define NR CPU__PANEL_NR
#define KC CPU__PANEL_KC
#define MR 3 /* rows of the microkernel */

#define mask8 cpu__mask8

/* 8 panel elements from index i as f32. */
static inline __attribute__((always_inline)) __m256 panel8(int type, const void *panel, int64_t i)
{
    if (type == DT_F32) return _mm256_load_ps((const float *)panel + i);
    __m128i h = _mm_load_si128((const void *)((const uint16_t *)panel + i));
    if (type == DT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* c[r][0..32) (+)= Σ_k x[r][k] · panel[k][0..32) for mr ≤ 3 rows; columns past ncols are not
 * stored. */
static inline __attribute__((always_inline)) void ukernel(int type, int mr, const void *panel, const float *x,
                                                          int64_t ldx, int kc, float *c, int64_t ldc, int ncols,
                                                          int load_c)
{
    __m256 acc[MR][4];
    __m256i m[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) m[u] = mask8(ncols - 8 * u);
#pragma GCC unroll 3
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[r][u] = load_c ? _mm256_maskload_ps(c + r * ldc + 8 * u, m[u]) : _mm256_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m256 a[MR];
#pragma GCC unroll 3
        for (int r = 0; r < mr; r++) a[r] = _mm256_broadcast_ss(x + r * ldx + k);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            __m256 b = panel8(type, panel, (int64_t)k * NR + 8 * u);
#pragma GCC unroll 3
            for (int r = 0; r < mr; r++) acc[r][u] = _mm256_fmadd_ps(a[r], b, acc[r][u]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) _mm256_maskstore_ps(c + r * ldc + 8 * u, m[u], acc[r][u]);
}

static inline __attribute__((always_inline)) void ukernel_rows(int type, int mr, const void *panel,
                                                               const float *x, int64_t ldx, int kc, float *c,
                                                               int64_t ldc, int ncols, int load_c)
{
    switch (mr) {
    case 3: ukernel(type, 3, panel, x, ldx, kc, c, ldc, ncols, load_c); break;
    case 2: ukernel(type, 2, panel, x, ldx, kc, c, ldc, ncols, load_c); break;
    default: ukernel(type, 1, panel, x, ldx, kc, c, ldc, ncols, load_c); break;
    }
}

static void ukernel_typed(int type, int mr, const void *panel, const float *x, int64_t ldx, int kc, float *c,
                          int64_t ldc, int ncols, int load_c)
{
    switch (type) {
    case DT_F16: ukernel_rows(DT_F16, mr, panel, x, ldx, kc, c, ldc, ncols, load_c); break;
    case DT_BF16: ukernel_rows(DT_BF16, mr, panel, x, ldx, kc, c, ldc, ncols, load_c); break;
    default: ukernel_rows(DT_F32, mr, panel, x, ldx, kc, c, ldc, ncols, load_c); break;
    }
}

/* One column tile of up to 32 outputs from o0, every row. */
static void tile_rows(const cpu__mm_task *t, const char *tile, int64_t o0, int ith)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t es = dt_row_bytes(w->type, 1);
    int ncols = n_out - o0 < NR ? (int)(n_out - o0) : NR;
    int64_t kcs = t->n_rows <= MR ? n_in : KC;
    int groups = (t->n_rows + MR - 1) / MR;
    for (int64_t k0 = 0; k0 < n_in; k0 += kcs) {
        int kc = n_in - k0 < kcs ? (int)(n_in - k0) : (int)kcs;
        const void *panel = tile + (size_t)k0 * NR * es;
        int ptype = w->type;
        const char *next = (const char *)panel + (size_t)kc * NR * es; /* the next slice */
        if (ptype != DT_F32 && t->n_rows > MR) { /* several row groups: convert the slice once */
            float *f = t->c->scratch[ith].p;
            for (int i = 0; i < kc * NR; i += 8) _mm256_store_ps(f + i, panel8(ptype, panel, i));
            panel = f;
            ptype = DT_F32;
        }
        for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
            int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
            if (kcs < n_in) /* slices: the next one (contiguous, whichever tile), a share per group */
                cpu__prefetch_share(next, (size_t)KC * NR * es, r0 / MR, groups);
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

/* F16/BF16 slices met by more than one row group are converted to f32 in scratch. */
static size_t packed_scratch(const be_weight *w, int n_rows)
{
    return w->type != DT_F32 && n_rows > MR ? CPU__PANEL_SCRATCH : 0;
}

void cpu__gemm_fill_avx2(cpu__kern *k)
{
    cpu__mm_packed packed = {.isa = CPU_ISA_AVX2, .bytes = cpu__panel_bytes_f32, .pack = cpu__panel_pack,
                             .align = packed_align, .scratch = packed_scratch, .run = prepacked_run};
    k->mm[DT_F32].packed = packed;
    packed.bytes = cpu__panel_bytes_16;
    k->mm[DT_F16].packed = k->mm[DT_BF16].packed = packed;
}
