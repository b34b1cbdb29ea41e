/*
 * gemm_avx2.c — the AVX2 + FMA GEMM for F32, F16 and BF16 weights over the file's layout and
 * many activation rows (prefill, batched decode): out[r][o] = Σ_i x[r][i] · W[o][i].
 *
 * Packed-panel GEMM with per-call packing: a thread takes a column tile of NR = 32 outputs; for
 * each slice of KC = 128 inputs it converts the tile's weights once into an f32 panel laid out
 * [k][32] (16 KiB: it stays in L1), then sweeps every activation row over it. 16 ymm registers
 * hold 6 rows × 16 columns, so the microkernel sweeps a panel in two halves: per input k, two
 * panel vectors are loaded and each row's broadcast x[k] feeds two FMAs. Column tails of a
 * tile are computed by plain loops; row tails by microkernel variants for 1..5 rows.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "engine/dtype.h"

#define NR CPU__PANEL_NR
#define KC CPU__PANEL_KC
#define MR CPU__PANEL_MR

/* dst[0..n) = row elements k0 .. k0+n as f32. */
static void convert_span(int type, const void *row, int64_t k0, int n, float *dst)
{
    if (type == DT_F32) {
        memcpy(dst, (const float *)row + k0, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *s = (const uint16_t *)row + k0;
    for (int i = 0; i < n; i++) dst[i] = type == DT_F16 ? dt_f16_to_f32(s[i]) : dt_bf16_to_f32(s[i]);
}

/* panel[k][j] = W[o0 + j][k0 + k] as f32, zero for outputs past n_out. */
static void pack_panel(const be_weight *w, int64_t o0, int64_t k0, int kc, float *panel, float *tmp)
{
    size_t rb = dt_row_bytes(w->type, w->n_in);
    for (int j = 0; j < NR; j++) {
        if (o0 + j >= w->n_out) {
            for (int k = 0; k < kc; k++) panel[k * NR + j] = 0;
            continue;
        }
        const char *row = (const char *)w->data + (size_t)(o0 + j) * rb;
        if (w->type == DT_F32) {
            const float *src = (const float *)row + k0;
            for (int k = 0; k < kc; k++) panel[k * NR + j] = src[k];
        } else {
            convert_span(w->type, row, k0, kc, tmp);
            for (int k = 0; k < kc; k++) panel[k * NR + j] = tmp[k];
        }
    }
}

/* AVX2 fallback: 16 ymm registers hold 6 rows × 16 columns, so a panel is swept in two halves. */
static inline __attribute__((always_inline)) void ukernel16(int mr, const float *panel,
                                                            const float *x, int64_t ldx, int kc,
                                                            float *c, int64_t ldc, int load_c)
{
    __m256 acc[MR][2];
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) {
        acc[r][0] = load_c ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        acc[r][1] = load_c ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(panel + k * NR), b1 = _mm256_loadu_ps(panel + k * NR + 8);
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++) {
            __m256 a = _mm256_broadcast_ss(x + r * ldx + k);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

static void ukernel_any(int mr, const float *panel, const float *x, int64_t ldx, int kc, float *c,
                        int64_t ldc, int ncols, int load_c)
{
    for (int half = 0; half < NR; half += 16) {
        if (ncols - half >= 16) {
            switch (mr) {
            case 6: ukernel16(6, panel + half, x, ldx, kc, c + half, ldc, load_c); break;
            case 5: ukernel16(5, panel + half, x, ldx, kc, c + half, ldc, load_c); break;
            case 4: ukernel16(4, panel + half, x, ldx, kc, c + half, ldc, load_c); break;
            case 3: ukernel16(3, panel + half, x, ldx, kc, c + half, ldc, load_c); break;
            case 2: ukernel16(2, panel + half, x, ldx, kc, c + half, ldc, load_c); break;
            default: ukernel16(1, panel + half, x, ldx, kc, c + half, ldc, load_c); break;
            }
            continue;
        }
        for (int r = 0; r < mr; r++) /* column tail */
            for (int j = half; j < ncols; j++) {
                float sum = load_c ? c[r * ldc + j] : 0.0f;
                for (int k = 0; k < kc; k++) sum += x[r * ldx + k] * panel[k * NR + j];
                c[r * ldc + j] = sum;
            }
    }
}

/* Asks for the weights of the panel at (o0, k0) to be brought into L2: packing reads 32 rows
 * at once, too many streams for the hardware prefetcher. */
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

static void panel_tile(const cpu__mm_task *t, int64_t o0, float *panel, float *tmp)
{
    const be_weight *w = t->w;
    int64_t n_in = w->n_in, n_out = w->n_out;
    int ncols = n_out - o0 < NR ? (int)(n_out - o0) : NR;
    for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
        int kc = n_in - k0 < KC ? (int)(n_in - k0) : KC;
        pack_panel(w, o0, k0, kc, panel, tmp);
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
    float *panel = t->c->scratch[ith].p, *tmp = panel + (size_t)KC * NR;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < t->w->n_out ? lo + t->unit : t->w->n_out;
        for (int64_t o0 = lo; o0 < hi; o0 += NR) panel_tile(t, o0, panel, tmp);
    }
}

static size_t panel_scratch(const be_weight *w, int n_rows)
{
    return CPU__PANEL_SCRATCH;
}

void cpu__gemm_fill_avx2(cpu__kern *k)
{
    const cpu__mm_plain plain = {.isa = CPU_ISA_AVX2, .min_rows = 16, .align = NR,
                                 .scratch = panel_scratch, .run = panel_run};
    k->mm[DT_F32].plain = k->mm[DT_F16].plain = k->mm[DT_BF16].plain = plain;
}
