/*
 * gemm_avx512.c — the AVX-512 GEMM for F32, F16 and BF16 weights and many activation rows
 * (prefill, batched decode): out[r][o] = Σ_i x[r][i] · W[o][i].
 *
 * Classic packed-panel GEMM. A thread takes a column tile of NR = 32 outputs. The microkernel
 * keeps 6 rows × 32 outputs in twelve zmm accumulators: per input k, two panel vectors are
 * loaded and each of the six rows' x[k] is broadcast into two FMAs, so twelve FMAs share two
 * loads. Partial sums live in `out` between slices.
 *
 * Two ways to get the panel:
 *  - packed at upload (the table's packed entry): each tile of 32 outputs is stored once as
 *    [n_in][32] elements of the weight's own type (zero past n_out); the microkernel converts
 *    F16 (F16C) and BF16 (a shift) as it loads, or, with more than 6 rows, a KC-deep slice is
 *    converted to f32 once for all row groups. Used for every number of rows, so each weight is
 *    read once per call and a row's sums are formed in the same order whatever the batch.
 *  - per call (the plain entry, for weights without the copy, ≥ 16 rows): for each slice of
 *    KC = 128 inputs the tile's weights are converted into an f32 panel [k][32] (16 KiB: it
 *    stays in L1) with in-register 16 × 16 transposes.
 * Column tails are zero-padded in the panel and masked at the stores; row tails run
 * microkernel variants for 1..5 rows.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "model/dtype.h"

#define NR CPU__PANEL_NR
#define KC CPU__PANEL_KC
#define MR CPU__PANEL_MR

/* In-register transpose of a 16 × 16 block of floats (rows r[0..16) become columns). */
static inline void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0x88);
            t[8 * h + i + 4] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* 16 elements of a row from element i as f32; lanes outside m are zero. */
static inline __m512 load16(int type, const void *row, int64_t i, __mmask16 m)
{
    if (type == DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (type == DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* panel[k][j] = W[o0 + j][k0 + k] as f32, zero for outputs past n_out: 16 × 16 blocks are
 * loaded along the rows, converted and transposed in registers. */
static void pack_panel(const be_weight *w, int64_t o0, int64_t k0, int kc, float *panel)
{
    size_t rb = dt_row_bytes(w->type, w->n_in);
    for (int j0 = 0; j0 < NR; j0 += 16)
        for (int k = 0; k < kc; k += 16) {
            int nk = kc - k < 16 ? kc - k : 16;
            __mmask16 m = nk == 16 ? 0xffff : (__mmask16)((1u << nk) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = o0 + j0 + i < w->n_out
                           ? load16(w->type, (const char *)w->data + (size_t)(o0 + j0 + i) * rb, k0 + k, m)
                           : _mm512_setzero_ps();
            transpose16(r);
            for (int kk = 0; kk < nk; kk++) _mm512_store_ps(panel + (size_t)(k + kk) * NR + j0, r[kk]);
        }
}

/* 16 panel elements from index i as f32: the panel holds f32 (packed per call) or, packed at
 * upload, the weights' own type. */
static inline __attribute__((always_inline)) __m512 panel16(int type, const void *panel, int64_t i)
{
    if (type == DT_F32) return _mm512_load_ps((const float *)panel + i);
    __m256i h = _mm256_load_si256((const void *)((const uint16_t *)panel + i));
    if (type == DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* c[r][0..32) (+)= Σ_k x[r][k] · panel[k][0..32) for mr rows; columns masked by m0, m1. */
static inline __attribute__((always_inline)) void ukernel(int type, int mr, const void *panel,
                                                          const float *x, int64_t ldx, int kc,
                                                          float *c, int64_t ldc, __mmask16 m0,
                                                          __mmask16 m1, int load_c)
{
    __m512 acc[MR][2];
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) {
        acc[r][0] = load_c ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = load_c ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = panel16(type, panel, (int64_t)k * NR), b1 = panel16(type, panel, (int64_t)k * NR + 16);
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++) {
            __m512 a = _mm512_set1_ps(x[r * ldx + k]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
    }
}

static inline __attribute__((always_inline)) void ukernel_rows(int type, int mr, const void *panel,
                                                               const float *x, int64_t ldx, int kc,
                                                               float *c, int64_t ldc, __mmask16 m0,
                                                               __mmask16 m1, int load_c)
{
    switch (mr) {
    case 6: ukernel(type, 6, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    case 5: ukernel(type, 5, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    case 4: ukernel(type, 4, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    case 3: ukernel(type, 3, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    case 2: ukernel(type, 2, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    default: ukernel(type, 1, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    }
}

/* The microkernel over a panel of element type `type` (F32 for panels packed per call). */
static void ukernel_typed(int type, int mr, const void *panel, const float *x, int64_t ldx, int kc,
                          float *c, int64_t ldc, int ncols, int load_c)
{
    __mmask16 m0 = ncols >= 16 ? 0xffff : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= 32 ? 0xffff : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
    switch (type) {
    case DT_F16: ukernel_rows(DT_F16, mr, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    case DT_BF16: ukernel_rows(DT_BF16, mr, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    default: ukernel_rows(DT_F32, mr, panel, x, ldx, kc, c, ldc, m0, m1, load_c); break;
    }
}

static void ukernel_any(int mr, const float *panel, const float *x, int64_t ldx, int kc, float *c,
                        int64_t ldc, int ncols, int load_c)
{
    ukernel_typed(DT_F32, mr, panel, x, ldx, kc, c, ldc, ncols, load_c);
}

/* Asks for the weights of the panel at (o0, k0) to be brought into L2. Packing reads 32 rows
 * at once, too many streams for the hardware prefetcher, so without this every line of the
 * panel would be a cache miss on the critical path; issued one panel ahead, the loads overlap
 * with the microkernel's work on the current panel. */
static void prefetch_panel(const be_weight *w, int64_t o0, int64_t k0)
{
    if (o0 >= w->n_out || k0 >= w->n_in) return;
    size_t rb = dt_row_bytes(w->type, w->n_in), eb = dt_row_bytes(w->type, 1);
    int kc = w->n_in - k0 < KC ? (int)(w->n_in - k0) : KC;
    for (int j = 0; j < NR && o0 + j < w->n_out; j++) {
        const char *p = (const char *)w->data + (size_t)(o0 + j) * rb + (size_t)k0 * eb;
        for (size_t off = 0; off < (size_t)kc * eb; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
    }
}

static void panel_tile(const cpu__mm_task *t, int64_t o0, float *panel)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    int ncols = n_out - o0 < NR ? (int)(n_out - o0) : NR;
    for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
        int kc = n_in - k0 < KC ? (int)(n_in - k0) : KC;
        pack_panel(w, o0, k0, kc, panel);
        if (k0 + KC < n_in)
            prefetch_panel(w, o0, k0 + KC);
        else
            prefetch_panel(w, o0 + NR, 0); /* most likely this thread's next tile */
        for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
            int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
            ukernel_any(mr, panel, t->x + (size_t)r0 * n_in + k0, n_in, kc,
                        t->out + (size_t)r0 * n_out + o0, n_out, ncols, k0 > 0);
        }
    }
    if (t->bias)
        for (int r = 0; r < t->n_rows; r++)
            for (int j = 0; j < ncols; j++) t->out[(size_t)r * n_out + o0 + j] += t->bias[o0 + j];
}

static void panel_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    cpu__mm_task *t = task;
    float *panel = t->c->scratch[ith].p;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < t->w->n_out ? lo + t->unit : t->w->n_out;
        for (int64_t o0 = lo; o0 < hi; o0 += NR) panel_tile(t, o0, panel);
    }
}

/* ---- weights packed at upload ------------------------------------------------------------- */

/* F32 through the per-call packer's in-register transposes, slice by slice; F16/BF16 by the
 * generic packer. */
static void prepack(const be_weight *w, void *dst)
{
    if (w->type != DT_F32) {
        cpu__panel_pack(w, dst);
        return;
    }
    size_t tb = (size_t)w->n_in * NR * sizeof(float);
    for (int64_t o0 = 0; o0 < w->n_out; o0 += NR)
        for (int64_t k0 = 0; k0 < w->n_in; k0 += KC)
            pack_panel(w, o0, k0, w->n_in - k0 < KC ? (int)(w->n_in - k0) : KC,
                       (float *)((char *)dst + (size_t)(o0 / NR) * tb) + (size_t)k0 * NR);
}

static void prepacked_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    cpu__mm_task *t = task;
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    size_t es = dt_row_bytes(w->type, 1), tb = (size_t)n_in * NR * es;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < n_out ? lo + t->unit : n_out;
        for (int64_t o0 = lo; o0 < hi; o0 += NR) {
            const char *tile = (const char *)w->extra + (size_t)(o0 / NR) * tb;
            int ncols = n_out - o0 < NR ? (int)(n_out - o0) : NR;
            /* Few rows: the whole depth at once; more: slices that stay in L1 for every row group. */
            int64_t kcs = t->n_rows <= MR ? n_in : KC;
            for (int64_t k0 = 0; k0 < n_in; k0 += kcs) {
                int kc = n_in - k0 < kcs ? (int)(n_in - k0) : (int)kcs;
                const void *panel = tile + (size_t)k0 * NR * es;
                int ptype = w->type;
                const char *next = (const char *)panel + (size_t)kc * NR * es; /* the next slice */
                if (ptype != DT_F32 && t->n_rows > MR) {
                    /* Several row groups: convert the slice to f32 once rather than per group. */
                    float *f = t->c->scratch[ith].p;
                    for (int i = 0; i < kc * NR; i += 16) _mm512_store_ps(f + i, panel16(ptype, panel, i));
                    panel = f;
                    ptype = DT_F32;
                }
                for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
                    int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
                    if (kcs < n_in) /* slices: the next one (contiguous, whichever tile), or its loads
                                     * would wait on memory after the compute; a share per group */
                        cpu__prefetch_share(next, (size_t)KC * NR * es,
                                            r0 / MR, (t->n_rows + MR - 1) / MR);
                    ukernel_typed(ptype, mr, panel, t->x + (size_t)r0 * n_in + k0, n_in, kc,
                                  t->out + (size_t)r0 * n_out + o0, n_out, ncols, k0 > 0);
                }
            }
            if (t->bias)
                for (int r = 0; r < t->n_rows; r++)
                    for (int j = 0; j < ncols; j++) t->out[(size_t)r * n_out + o0 + j] += t->bias[o0 + j];
        }
    }
}

static int packed_align(int n_rows)
{
    return NR;
}

/* F16/BF16 tiles met by more than one row group are converted to f32 slices in scratch. */
static size_t packed_scratch(const be_weight *w, int n_rows)
{
    return n_rows > MR ? CPU__PANEL_SCRATCH : 0;
}

static size_t panel_scratch(const be_weight *w, int n_rows)
{
    return CPU__PANEL_SCRATCH;
}

void cpu__gemm_fill_avx512(cpu__kern *k)
{
    const cpu__mm_plain plain = {.isa = CPU_ISA_AVX512, .min_rows = 16, .align = NR,
                                 .scratch = panel_scratch, .run = panel_run};
    cpu__mm_packed packed = {.isa = CPU_ISA_AVX512, .bytes = cpu__panel_bytes_f32, .pack = prepack,
                             .align = packed_align, .scratch = NULL, .run = prepacked_run};
    k->mm[DT_F32].plain = plain;
    k->mm[DT_F32].packed = packed;
    packed.bytes = cpu__panel_bytes_16;
    packed.scratch = packed_scratch;
    k->mm[DT_F16].plain = k->mm[DT_BF16].plain = plain;
    k->mm[DT_F16].packed = k->mm[DT_BF16].packed = packed;
}
