/*
 * gemm_q8.c — the compute-bound matmul for Q8_0 weights and many activation rows, in int8 with
 * AVX512-VNNI: out[r][o] = Σ_blocks d_w[o][b] · d_x[r][b] · Σ_i q_w[o][b][i] · q_x[r][b][i].
 *
 * vpdpbusd multiplies unsigned by signed bytes. Activations are therefore offset to unsigned
 * (u = q_x + 128, a sign-bit flip) and the offset is taken back per block with the column sums
 * of the weights: Σ u·q_w = Σ q_x·q_w + 128 · Σ q_w.
 *
 * A thread takes a column tile of 16 outputs (one vector of 16 int32 lanes, a lane per output)
 * and, for each slice of KCB blocks, repacks the tile's weights once into a panel laid out
 * [block][k/4][16 outputs][4 bytes] beside f32 scales [block][16] and offsets [block][16]
 * (10 KiB per 16 blocks: it stays in L1). The microkernel keeps 8 rows × 16 outputs: for each
 * group of 4 inputs it loads one 64-byte panel vector and issues one vpdpbusd per row with the
 * row's 4 activation bytes broadcast from memory, so 8 inputs × 16 outputs × 4 bytes of work
 * share one load. At the end of a block each row's integer sums are offset-corrected, converted
 * and accumulated in f32 with the block's scales. Partial sums live in `out` between slices.
 */
#include <string.h>

#include "cpu/internal.h"
#include "engine/dtype.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

#define NR 16
#define MR 8
#define KCB 16 /* blocks of 32 inputs per slice */

/* Panel of one slice: nb blocks. */
typedef struct q8_panel {
    int8_t q[KCB][8][NR][4]; /* weights, 4 consecutive inputs per output per step */
    float d[KCB][NR];        /* weight scales */
    int32_t off[KCB][NR];    /* 128 × Σ q over the block */
} q8_panel;

int cpu__gemm_q8_available(void)
{
    return 1;
}

size_t cpu__gemm_q8_scratch_bytes(void)
{
    return sizeof(q8_panel) + 64;
}

static void pack(const be_weight *w, int64_t o0, int64_t b0, int nb, q8_panel *p)
{
    size_t rb = dt_row_bytes(DT_Q8_0, w->n_in);
    for (int j = 0; j < NR; j++) {
        if (o0 + j >= w->n_out) {
            for (int b = 0; b < nb; b++) {
                for (int s = 0; s < 8; s++) memset(p->q[b][s][j], 0, 4);
                p->d[b][j] = 0;
                p->off[b][j] = 0;
            }
            continue;
        }
        const dt_block_q8_0 *blk = (const dt_block_q8_0 *)((const char *)w->data + (size_t)(o0 + j) * rb) + b0;
        for (int b = 0; b < nb; b++) {
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) sum += blk[b].q[i];
            for (int s = 0; s < 8; s++) memcpy(p->q[b][s][j], blk[b].q + 4 * s, 4);
            p->d[b][j] = _cvtsh_ss(blk[b].d);
            p->off[b][j] = 128 * sum;
        }
    }
}

/* c[r][0..16) (+)= rows r of the slice; x points at each row's first block of the slice. */
static inline __attribute__((always_inline)) void ukernel(int mr, const q8_panel *p, int nb,
                                                          const cpu__q8x *x, int64_t ldx,
                                                          float *c, int64_t ldc, __mmask16 m,
                                                          int load_c)
{
    __m512 acc[MR];
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++)
        acc[r] = load_c ? _mm512_maskz_loadu_ps(m, c + r * ldc) : _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i iacc[MR];
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++) iacc[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m512i wv = _mm512_load_si512((const void *)p->q[b][s]);
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++) {
                int32_t xb;
                memcpy(&xb, x[r * ldx + b].q + 4 * s, 4);
                iacc[r] = _mm512_dpbusd_epi32(iacc[r], _mm512_set1_epi32(xb), wv);
            }
        }
        __m512i off = _mm512_load_si512((const void *)p->off[b]);
        __m512 dw = _mm512_load_ps(p->d[b]);
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++) {
            __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(iacc[r], off));
            acc[r] = _mm512_fmadd_ps(v, _mm512_mul_ps(dw, _mm512_set1_ps(x[r * ldx + b].d)), acc[r]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) _mm512_mask_storeu_ps(c + r * ldc, m, acc[r]);
}

static void ukernel_any(int mr, const q8_panel *p, int nb, const cpu__q8x *x, int64_t ldx, float *c,
                        int64_t ldc, __mmask16 m, int load_c)
{
    switch (mr) {
    case 8: ukernel(8, p, nb, x, ldx, c, ldc, m, load_c); break;
    case 7: ukernel(7, p, nb, x, ldx, c, ldc, m, load_c); break;
    case 6: ukernel(6, p, nb, x, ldx, c, ldc, m, load_c); break;
    case 5: ukernel(5, p, nb, x, ldx, c, ldc, m, load_c); break;
    case 4: ukernel(4, p, nb, x, ldx, c, ldc, m, load_c); break;
    case 3: ukernel(3, p, nb, x, ldx, c, ldc, m, load_c); break;
    case 2: ukernel(2, p, nb, x, ldx, c, ldc, m, load_c); break;
    default: ukernel(1, p, nb, x, ldx, c, ldc, m, load_c); break;
    }
}

/* Brings the weights of the panel at (o0, b0) into L2 ahead of packing (see gemm.c). */
static void prefetch_panel(const be_weight *w, int64_t o0, int64_t b0)
{
    int64_t nb_all = w->n_in / 32;
    if (o0 >= w->n_out || b0 >= nb_all) return;
    size_t rb = dt_row_bytes(DT_Q8_0, w->n_in);
    size_t bytes = (size_t)(nb_all - b0 < KCB ? nb_all - b0 : KCB) * sizeof(dt_block_q8_0);
    for (int j = 0; j < NR && o0 + j < w->n_out; j++) {
        const char *q = (const char *)w->data + (size_t)(o0 + j) * rb + (size_t)b0 * sizeof(dt_block_q8_0);
        for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(q + off, _MM_HINT_T1);
    }
}

static void tile(const cpu__mm_task *t, int64_t o0, q8_panel *p)
{
    const be_weight *w = t->w;
    int64_t nb_all = w->n_in / 32, n_out = w->n_out;
    int ncols = n_out - o0 < NR ? (int)(n_out - o0) : NR;
    __mmask16 m = ncols >= 16 ? 0xffff : (__mmask16)((1u << ncols) - 1);
    for (int64_t b0 = 0; b0 < nb_all; b0 += KCB) {
        int nb = nb_all - b0 < KCB ? (int)(nb_all - b0) : KCB;
        pack(w, o0, b0, nb, p);
        if (b0 + KCB < nb_all)
            prefetch_panel(w, o0, b0 + KCB);
        else
            prefetch_panel(w, o0 + NR, 0);
        for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
            int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
            ukernel_any(mr, p, nb, t->xq + (size_t)r0 * nb_all + b0, nb_all,
                        t->out + (size_t)r0 * n_out + o0, n_out, m, b0 > 0);
        }
    }
    if (t->bias)
        for (int r = 0; r < t->n_rows; r++)
            for (int j = 0; j < ncols; j++) t->out[(size_t)r * n_out + o0 + j] += t->bias[o0 + j];
}

void cpu__gemm_q8_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    cpu__mm_task *t = task;
    q8_panel *p = t->c->scratch[ith].p;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < t->w->n_out ? lo + t->unit : t->w->n_out;
        for (int64_t o0 = lo; o0 < hi; o0 += NR) tile(t, o0, p);
    }
}

#else /* no AVX512-VNNI: matmul.c keeps using its dot-product tiles */

int cpu__gemm_q8_available(void)
{
    return 0;
}

size_t cpu__gemm_q8_scratch_bytes(void)
{
    return 0;
}

void cpu__gemm_q8_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    (void)task, (void)lo_unit, (void)hi_unit, (void)ith;
}

#endif
