/*
 * gemm_q8_dotprod.c — the aarch64 matmul for Q8_0 weights packed at upload, in int8 with the
 * dot-product extension (SDOT, ARMv8.2+; used only when the CPU has it), every number of rows:
 * out[r][o] = Σ_blocks d_w[o][b] · d_x[r][b] · Σ_i q_w[o][b][i] · q_x[r][b][i].
 *
 * SDOT multiplies signed by signed bytes and adds each group of four into an int32 lane, so no
 * offset or sign trick is needed and the integer sums are exact.
 *
 * Layout: a tile of 4 outputs (one vector of 4 int32 lanes, a lane per output) holds nb blocks
 * of 32 inputs as [nb][k/4][4 outputs][4 bytes] (128 bytes a block), then the f16 scales
 * [nb][4]: 136 bytes a block for 4 outputs, as many as the file's Q8_0 blocks.
 *
 * The microkernel keeps mr ≤ 4 rows × nt tiles: a row's 32 activation bytes of a block sit in
 * two vectors, and the by-element form of SDOT picks the group of 4 that meets each group of
 * the tile's weights, so one weight vector load serves every row. One or two rows run 4 or 2
 * tiles side by side for independent chains. A row's sums are formed in the same order
 * whatever the number of rows or threads.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_neon.h"
#include "model/dtype.h"

#define NR 4
#define MR 4
#define NT 4   /* most tiles side by side */
#define KCB 16 /* blocks of 32 inputs per slice when several row groups share it */
#define QB 128 /* weight bytes of one block of a tile */
#define DB 8   /* scale bytes of one block of a tile */

static size_t tile_bytes(int64_t nb)
{
    return ((size_t)nb * (QB + DB) + 15) & ~(size_t)15;
}

static size_t packed_bytes(int64_t n_in, int64_t n_out)
{
    return (size_t)((n_out + NR - 1) / NR) * tile_bytes(n_in / 32);
}

static void prepack(const be_weight *w, void *dst)
{
    int64_t nb = w->n_in / 32;
    size_t rb = dt_row_bytes(DT_Q8_0, w->n_in);
    for (int64_t o0 = 0; o0 < w->n_out; o0 += NR) {
        uint8_t *tq = (uint8_t *)dst + (size_t)(o0 / NR) * tile_bytes(nb);
        uint16_t *td = (uint16_t *)(tq + (size_t)nb * QB);
        for (int j = 0; j < NR; j++) {
            const dt_block_q8_0 *blk =
                o0 + j < w->n_out ? (const dt_block_q8_0 *)((const char *)w->data + (size_t)(o0 + j) * rb) : NULL;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *q = tq + (size_t)b * QB + j * 4;
                for (int s = 0; s < 8; s++)
                    for (int i = 0; i < 4; i++) q[s * NR * 4 + i] = blk ? (uint8_t)blk[b].q[4 * s + i] : 0;
                td[b * NR + j] = blk ? blk[b].d : 0;
            }
        }
    }
}

/* c[r][4 t .. 4 t + 4) (+)= rows r of the slice against tiles t < nt; q and d point at the
 * slice's first block (weights, scales) of tile 0, tile t is ldt bytes further; x at each row's
 * first block of the slice (rows ldx blocks apart). c has all 4 nt columns valid (the caller
 * buffers tails). */
static inline __attribute__((always_inline)) void ukernel(int mr, int nt, const uint8_t *q, const uint16_t *d,
                                                          size_t ldt, int nb, const cpu__q8x *x, int64_t ldx,
                                                          float *c, int64_t ldc, int load_c)
{
    float32x4_t acc[MR][NT];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) acc[r][t] = load_c ? vld1q_f32(c + r * ldc + 4 * t) : vdupq_n_f32(0);
    for (int b = 0; b < nb; b++) {
        int32x4_t iacc[MR][NT];
        int8x16_t xv[MR][2];
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            xv[r][0] = vld1q_s8(x[r * ldx + b].q);
            xv[r][1] = vld1q_s8(x[r * ldx + b].q + 16);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) iacc[r][t] = vdupq_n_s32(0);
        }
        const uint8_t *qb = q + (size_t)b * QB;
#define GROUP(S)                                                                                    \
    do {                                                                                           \
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++)                                       \
        {                                                                                          \
            int8x16_t wv = vld1q_s8((const int8_t *)(qb + t * ldt + (S) * 16));                    \
            _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++) iacc[r][t] =                      \
                vdotq_laneq_s32(iacc[r][t], wv, xv[r][(S) / 4], (S) % 4);                          \
        }                                                                                          \
    } while (0)
        GROUP(0);
        GROUP(1);
        GROUP(2);
        GROUP(3);
        GROUP(4);
        GROUP(5);
        GROUP(6);
        GROUP(7);
#undef GROUP
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            float32x4_t dw = cpu__f16x4_to_f32((const uint16_t *)((const uint8_t *)d + t * ldt) + b * NR);
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++)
                acc[r][t] = vfmaq_f32(acc[r][t], vcvtq_f32_s32(iacc[r][t]), vmulq_n_f32(dw, x[r * ldx + b].d));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) vst1q_f32(c + r * ldc + 4 * t, acc[r][t]);
}

static void ukernel_dispatch(int mr, int nt, const uint8_t *q, const uint16_t *d, size_t ldt, int nb,
                             const cpu__q8x *x, int64_t ldx, float *c, int64_t ldc, int load_c)
{
#define UK(R, T) ukernel(R, T, q, d, ldt, nb, x, ldx, c, ldc, load_c)
    if (nt == 4) UK(1, 4);
    else if (nt == 2) UK(2, 2);
    else switch (mr) {
        case 4: UK(4, 1); break;
        case 3: UK(3, 1); break;
        case 2: UK(2, 1); break;
        default: UK(1, 1); break;
        }
#undef UK
}

/* The microkernel with columns past ncols (of the nt tiles' 4 nt) neither read nor written. */
static void ukernel_any(int mr, int nt, const uint8_t *q, const uint16_t *d, size_t ldt, int nb,
                        const cpu__q8x *x, int64_t ldx, float *c, int64_t ldc, int ncols, int load_c)
{
    if (ncols == 4 * nt) {
        ukernel_dispatch(mr, nt, q, d, ldt, nb, x, ldx, c, ldc, load_c);
        return;
    }
    float buf[MR * 4 * NT];
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < 4 * nt; j++) buf[r * 4 * nt + j] = load_c && j < ncols ? c[r * ldc + j] : 0.0f;
    ukernel_dispatch(mr, nt, q, d, ldt, nb, x, ldx, buf, 4 * nt, load_c);
    for (int r = 0; r < mr; r++) memcpy(c + r * ldc, buf + r * 4 * nt, (size_t)ncols * sizeof(float));
}

static int tiles_for(int mr)
{
    return mr <= 1 ? 4 : mr <= 2 ? 2 : 1;
}

static int packed_align(int n_rows)
{
    return NR * tiles_for(n_rows < MR ? n_rows : MR);
}

/* Outputs [lo, hi) (lo a multiple of 4) of every row. */
static void prepacked_range(const cpu__mm_task *t, int64_t lo, int64_t hi)
{
    const be_weight *w = t->w;
    int64_t nb_all = w->n_in / 32, n_out = w->n_out;
    size_t tb = tile_bytes(nb_all);
    int ntp = tiles_for(t->n_rows < MR ? t->n_rows : MR);
    int64_t kcb = t->n_rows <= MR ? nb_all : KCB;
    for (int64_t o0 = lo; o0 < hi;) {
        int nt = o0 + NR * ntp <= hi ? ntp : 1;
        int ncols = n_out - o0 < NR * nt ? (int)(n_out - o0) : NR * nt;
        const uint8_t *q = (const uint8_t *)w->extra + (size_t)(o0 / NR) * tb;
        const uint16_t *d = (const uint16_t *)(q + (size_t)nb_all * QB);
        for (int64_t b0 = 0; b0 < nb_all; b0 += kcb) {
            int nb = nb_all - b0 < kcb ? (int)(nb_all - b0) : (int)kcb;
            for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
                int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
                ukernel_any(mr, nt, q + (size_t)b0 * QB, d + b0 * NR, tb, nb, t->xq + (size_t)r0 * nb_all + b0, nb_all,
                            t->out + (size_t)r0 * n_out + o0, n_out, ncols, b0 > 0);
            }
        }
        if (t->bias)
            for (int r = 0; r < t->n_rows; r++)
                for (int64_t o = o0; o < o0 + ncols; o++) t->out[(size_t)r * n_out + o] += t->bias[o];
        o0 += NR * nt;
    }
}

static void prepacked_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith)
{
    cpu__mm_task *t = task;
    for (int64_t u = lo_unit; u < hi_unit; u++) {
        int64_t lo = u * t->unit, hi = lo + t->unit < t->w->n_out ? lo + t->unit : t->w->n_out;
        prepacked_range(t, lo, hi);
    }
}

void cpu__gemm_q8_fill_dotprod(cpu__kern *k)
{
    k->mm[DT_Q8_0].packed = (cpu__mm_packed){.isa = CPU_ISA_NEON, .bytes = packed_bytes, .pack = prepack,
                                             .align = packed_align, .scratch = NULL, .run = prepacked_run};
}
