/*
 * gemm_q8_avx2.c — the AVX2 matmul for Q8_0 weights packed at upload, in int8 with
 * maddubs/madd, every number of rows:
 * out[r][o] = Σ_blocks d_w[o][b] · d_x[r][b] · Σ_i q_w[o][b][i] · q_x[r][b][i].
 *
 * vpmaddubsw multiplies unsigned by signed bytes and adds pairs into int16 with saturation, so
 * the weight's sign is moved onto the activation (vpsignb) and |w| is the unsigned operand:
 * |w|, |x| ≤ 127 keep a pair below 2 · 127² = 32258 < 2^15, nothing saturates and the int32
 * sums (vpmaddwd with ones) are exact.
 *
 * Layout: a tile of 8 outputs (one ymm of 8 int32 lanes, a lane per output) holds nb blocks of
 * 32 inputs as [nb][k/4][8 outputs][4 bytes] (256 bytes a block, 32-byte aligned), then the f16
 * scales [nb][8]: 272 bytes a block for 8 outputs, as many as the file's Q8_0 blocks, so a
 * memory-bound decode reads no more than it would from the file.
 *
 * The microkernel keeps mr ≤ 4 rows × nt tiles: for each group of 4 inputs it loads one
 * 32-byte vector per tile (and its absolute value) and, per row, broadcasts the row's 4
 * activation bytes, signs them by the weights and multiply-adds into the row's int32 sums. At
 * the end of a block the integer sums are converted and accumulated in f32 with the block's
 * scales. One row runs 2 tiles side by side for independent chains. Each row's sums are formed
 * in the same order whatever the number of rows or threads.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "model/dtype.h"

#define NR 8
#define MR 4
#define KCB 16 /* blocks of 32 inputs per slice when several row groups share it */
#define QB 256 /* weight bytes of one block of a tile */
#define DB 16  /* scale bytes of one block of a tile */

/* Bytes of a tile of nb blocks (a multiple of 32, so every tile's weights stay aligned). */
static size_t tile_bytes(int64_t nb)
{
    return ((size_t)nb * (QB + DB) + 31) & ~(size_t)31;
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
            const dt_block_q8_0 *blk = o0 + j < w->n_out ? (const dt_block_q8_0 *)((const char *)w->data +
                                                                                  (size_t)(o0 + j) * rb)
                                                          : NULL;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *q = tq + (size_t)b * QB + j * 4;
                for (int s = 0; s < 8; s++)
                    for (int i = 0; i < 4; i++) q[s * NR * 4 + i] = blk ? (uint8_t)blk[b].q[4 * s + i] : 0;
                td[b * NR + j] = blk ? blk[b].d : 0;
            }
        }
    }
}

/* c[r][8 t .. 8 t + 8) (+)= rows r of the slice against tiles t < nt. q and d point at the
 * slice's first block (weights, scales) of tile 0; tile t is ldt bytes further. x points at
 * each row's first block of the slice (rows ldx blocks apart). Columns past ncols of the last
 * tile are not stored. pf: lines to prefetch for what follows, pfl a block step, the first pfn
 * of them. */
static inline __attribute__((always_inline)) void ukernel(int mr, int nt, const uint8_t *q, const uint16_t *d,
                                                          size_t ldt, int nb, const cpu__q8x *x, int64_t ldx,
                                                          float *c, int64_t ldc, int ncols, int load_c,
                                                          const char *pf, int pfl, int pfn)
{
    __m256 acc[MR][2];
    __m256i mlast = cpu__mask8(ncols);
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
        for (int t = 0; t < nt; t++)
            acc[r][t] = load_c ? _mm256_maskload_ps(c + r * ldc + 8 * t, t == nt - 1 ? mlast : _mm256_set1_epi32(-1))
                               : _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i iacc[MR][2];
        for (int l = b * pfl; l < (b + 1) * pfl && l < pfn; l++) _mm_prefetch(pf + (size_t)l * 64, _MM_HINT_T1);
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
            for (int t = 0; t < nt; t++) iacc[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int s = 0; s < 8; s++) {
            __m256i wv[2], wa[2];
#pragma GCC unroll 2
            for (int t = 0; t < nt; t++) {
                wv[t] = _mm256_load_si256((const void *)(q + t * ldt + (size_t)b * QB + s * 32));
                wa[t] = _mm256_abs_epi8(wv[t]);
            }
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++) {
                int32_t xb;
                memcpy(&xb, x[r * ldx + b].q + 4 * s, 4);
                __m256i xv = _mm256_set1_epi32(xb);
#pragma GCC unroll 2
                for (int t = 0; t < nt; t++) {
                    __m256i p = _mm256_maddubs_epi16(wa[t], _mm256_sign_epi8(xv, wv[t]));
                    iacc[r][t] = _mm256_add_epi32(iacc[r][t], _mm256_madd_epi16(p, ones));
                }
            }
        }
#pragma GCC unroll 2
        for (int t = 0; t < nt; t++) {
            const uint16_t *dt = (const uint16_t *)((const uint8_t *)d + t * ldt) + b * NR;
            __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const void *)dt));
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][t]),
                                            _mm256_mul_ps(dw, _mm256_set1_ps(x[r * ldx + b].d)), acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
        for (int t = 0; t < nt; t++)
            _mm256_maskstore_ps(c + r * ldc + 8 * t, t == nt - 1 ? mlast : _mm256_set1_epi32(-1), acc[r][t]);
}

static void ukernel_any(int mr, int nt, const uint8_t *q, const uint16_t *d, size_t ldt, int nb,
                        const cpu__q8x *x, int64_t ldx, float *c, int64_t ldc, int ncols, int load_c,
                        const char *pf, int pfl, int pfn)
{
#define UK(R, T) ukernel(R, T, q, d, ldt, nb, x, ldx, c, ldc, ncols, load_c, pf, pfl, pfn)
    if (nt == 2) UK(1, 2);
    else switch (mr) {
        case 4: UK(4, 1); break;
        case 3: UK(3, 1); break;
        case 2: UK(2, 1); break;
        default: UK(1, 1); break;
        }
#undef UK
}

/* Tiles side by side for a group of mr rows: one row alone gets two independent chains. */
static int tiles_for(int mr)
{
    return mr <= 1 ? 2 : 1;
}

static int packed_align(int n_rows)
{
    return NR * tiles_for(n_rows < MR ? n_rows : MR);
}

/* Outputs [lo, hi) (lo a multiple of 8) of every row. */
static void prepacked_range(const cpu__mm_task *t, int64_t lo, int64_t hi)
{
    const be_weight *w = t->w;
    int64_t nb_all = w->n_in / 32, n_out = w->n_out;
    size_t tb = tile_bytes(nb_all);
    int ntp = tiles_for(t->n_rows < MR ? t->n_rows : MR);
    int64_t kcb = t->n_rows <= MR ? nb_all : KCB;
    /* With several row groups a tile is computed for much longer than it takes to read, and the
     * hardware prefetchers do not run ahead across tiles: each block step of each group asks for
     * its share of the next tile, so the whole of it is in L2 by the time it is needed, and the
     * requests trickle out instead of filling the line-fill buffers at once. */
    int64_t groups = (t->n_rows + MR - 1) / MR;
    int lines_per = (int)((ntp * tb / 64 + nb_all * groups - 1) / (nb_all * groups));
    for (int64_t o0 = lo; o0 < hi;) {
        int nt = o0 + NR * ntp <= hi ? ntp : 1;
        int64_t last = o0 + NR * (nt - 1);
        int ncols = n_out - last < NR ? (int)(n_out - last) : NR;
        const uint8_t *q = (const uint8_t *)w->extra + (size_t)(o0 / NR) * tb;
        const uint16_t *d = (const uint16_t *)(q + (size_t)nb_all * QB);
        for (int64_t b0 = 0; b0 < nb_all; b0 += kcb) {
            int nb = nb_all - b0 < kcb ? (int)(nb_all - b0) : (int)kcb;
            for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
                int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
                /* this call's share of the next tile: lines [it0 · pfl, ...) of it */
                int64_t it0 = b0 * groups + (r0 / MR) * nb;
                int pfl = groups > 1 ? lines_per : 0;
                const char *pf = (const char *)q + nt * tb + (size_t)it0 * pfl * 64;
                int pfn = (int)(nt * tb / 64 - it0 * pfl);
                ukernel_any(mr, nt, q + (size_t)b0 * QB, d + b0 * NR, tb, nb, t->xq + (size_t)r0 * nb_all + b0,
                            nb_all, t->out + (size_t)r0 * n_out + o0, n_out, ncols, b0 > 0, pf, pfl, pfn);
            }
        }
        if (t->bias)
            for (int r = 0; r < t->n_rows; r++)
                for (int64_t o = o0; o < last + ncols; o++) t->out[(size_t)r * n_out + o] += t->bias[o];
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

void cpu__gemm_q8_fill_avx2(cpu__kern *k)
{
    k->mm[DT_Q8_0].packed = (cpu__mm_packed){.isa = CPU_ISA_AVX2, .bytes = packed_bytes, .pack = prepack,
                                             .align = packed_align, .scratch = NULL, .run = prepacked_run};
}
