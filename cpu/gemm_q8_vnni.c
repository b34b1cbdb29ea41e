/*
 * gemm_q8_vnni.c — the matmul for Q8_0 weights in int8 with AVX512-VNNI, every number of rows:
 * out[r][o] = Σ_blocks d_w[o][b] · d_x[r][b] · Σ_i q_w[o][b][i] · q_x[r][b][i].
 *
 * vpdpbusd multiplies unsigned by signed bytes. The weights are therefore stored offset to
 * unsigned (u = q_w + 128, a sign-bit flip) and the offset is taken back per block with the
 * activations' block sums: Σ u·q_x = Σ q_w·q_x + 128 · Σ q_x. The kernel starts each block's
 * integer sums at -128 · Σ q_x (one int32 per row and block, computed when the activations are
 * quantised), so what vpdpbusd leaves is Σ q_w·q_x.
 *
 * Layout: a tile of 16 outputs (one vector of 16 int32 lanes, a lane per output) holds nb
 * blocks of 32 inputs as [nb][k/4][16 outputs][4 bytes] (512 bytes a block, 64-byte aligned),
 * then the f16 scales [nb][16]: 544 bytes a block, as many as the file's Q8_0 blocks, so a
 * memory-bound decode reads no more than it would from the file. Weights uploaded through
 * the backend are packed so once, for the whole matrix (the table's packed entry); weights
 * without the copy go through the row dot product below (vpdpbusd on the file's blocks).
 *
 * The microkernel keeps mr rows × nt tiles: for each group of 4 inputs it loads one 64-byte
 * vector per tile and issues one vpdpbusd per row and tile with the row's 4 activation bytes
 * broadcast, so up to 8 rows share each load. At the end of a block each row's integer sums are
 * offset-corrected, converted and accumulated in f32 with the block's scales. With few rows it
 * runs 2 or 4 tiles side by side so that enough vpdpbusd chains are independent. Each row's
 * sums are formed in the same order whatever the number of rows or threads, so results do not
 * depend on how sequences are batched. Partial sums live in `out` between slices.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cpu/simd_x86.h"
#include "model/dtype.h"

#define NR 16
#define MR 8
#define KCB 16 /* blocks of 32 inputs per slice */
#define QB 512 /* weight bytes of one block of a tile */
#define DB 32  /* scale bytes of one block of a tile */

/* Bytes of a tile of nb blocks (a multiple of 64, so every tile's weights stay aligned). */
static size_t tile_bytes(int64_t nb)
{
    return ((size_t)nb * (QB + DB) + 63) & ~(size_t)63;
}

/* Packs blocks [b0, b0 + nb) of outputs [o0, o0 + 16) into a tile of nbt blocks at tq (blocks
 * 0 .. nb); outputs past the end get zero weights and scales. */
static void pack(const be_weight *w, int64_t o0, int64_t b0, int64_t nb, uint8_t *tq, int64_t nbt)
{
    size_t rb = dt_row_bytes(DT_Q8_0, w->n_in);
    uint16_t *td = (uint16_t *)(tq + (size_t)nbt * QB);
    for (int j = 0; j < NR; j++) {
        if (o0 + j >= w->n_out) {
            for (int64_t b = 0; b < nb; b++) {
                for (int s = 0; s < 8; s++) memset(tq + (size_t)b * QB + (s * NR + j) * 4, 0x80, 4);
                td[b * NR + j] = 0;
            }
            continue;
        }
        const dt_block_q8_0 *blk = (const dt_block_q8_0 *)((const char *)w->data + (size_t)(o0 + j) * rb) + b0;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *q = tq + (size_t)b * QB + j * 4;
            for (int s = 0; s < 8; s++)
                for (int i = 0; i < 4; i++) q[s * NR * 4 + i] = (uint8_t)blk[b].q[4 * s + i] ^ 0x80;
            td[b * NR + j] = blk[b].d;
        }
    }
}

static size_t packed_bytes(int64_t n_in, int64_t n_out)
{
    return (size_t)((n_out + NR - 1) / NR) * tile_bytes(n_in / 32);
}

static void prepack(const be_weight *w, void *dst)
{
    int64_t nb = w->n_in / 32;
    for (int64_t o0 = 0; o0 < w->n_out; o0 += NR)
        pack(w, o0, 0, nb, (uint8_t *)dst + (size_t)(o0 / NR) * tile_bytes(nb), nb);
}

/* c[r][16 t .. 16 t + 16) (+)= rows r of the slice against tiles t < nt. q and d point at the
 * slice's first block (weights, scales) of tile 0; tile t is ldt bytes further. x and xs point
 * at each row's first block of the slice. Mask m applies to the last tile only. pf: lines to
 * prefetch for what follows, pfl a block step, the first pfn of them. */
static inline __attribute__((always_inline)) void ukernel(int mr, int nt, const uint8_t *q,
                                                          const uint16_t *d, size_t ldt, int nb,
                                                          const cpu__q8x *x, const int32_t *xs,
                                                          int64_t ldx, float *c, int64_t ldc,
                                                          __mmask16 m, int load_c, const char *pf, int pfl,
                                                          int pfn)
{
    __m512 acc[MR][4];
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            acc[r][t] = load_c ? _mm512_maskz_loadu_ps(t == nt - 1 ? m : 0xffff, c + r * ldc + 16 * t)
                               : _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i iacc[MR][4];
        for (int l = b * pfl; l < (b + 1) * pfl && l < pfn; l++) _mm_prefetch(pf + (size_t)l * 64, _MM_HINT_T1);
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++) {
            __m512i corr = _mm512_set1_epi32(xs[r * ldx + b]); /* -128 Σ q_x: the offset, taken back */
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) iacc[r][t] = corr;
        }
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m512i wv[4];
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++)
                wv[t] = _mm512_load_si512((const void *)(q + t * ldt + (size_t)b * QB + s * 64));
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++) {
                int32_t xb;
                memcpy(&xb, x[r * ldx + b].q + 4 * s, 4);
                __m512i xv = _mm512_set1_epi32(xb);
#pragma GCC unroll 4
                for (int t = 0; t < nt; t++) iacc[r][t] = _mm512_dpbusd_epi32(iacc[r][t], wv[t], xv);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const uint16_t *dt = (const uint16_t *)((const uint8_t *)d + t * ldt) + b * NR;
            __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)dt));
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++) {
                __m512 v = _mm512_cvtepi32_ps(iacc[r][t]);
                acc[r][t] = _mm512_fmadd_ps(v, _mm512_mul_ps(dw, _mm512_set1_ps(x[r * ldx + b].d)), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(c + r * ldc + 16 * t, t == nt - 1 ? m : 0xffff, acc[r][t]);
}

/* Tiles side by side for a group of mr rows: enough independent accumulator chains to keep
 * vpdpbusd busy when there are few rows, within the 32 vector registers (6 rows × 2 tiles hold
 * 12 f32 and 12 int32 accumulators). A speculative verify row of 5 or 6 tokens on one tile ran
 * at 2.2× the time of one row on a 768-wide model; on two, 1.4×. */
static int tiles_for(int mr)
{
    return mr <= 2 ? 4 : mr <= 6 ? 2 : 1;
}

static void ukernel_any(int mr, int nt, const uint8_t *q, const uint16_t *d, size_t ldt, int nb,
                        const cpu__q8x *x, const int32_t *xs, int64_t ldx, float *c, int64_t ldc,
                        __mmask16 m, int load_c, const char *pf, int pfl, int pfn)
{
#define UK(R, T) ukernel(R, T, q, d, ldt, nb, x, xs, ldx, c, ldc, m, load_c, pf, pfl, pfn)
    if (nt == 4 && mr == 1) UK(1, 4);
    else if (nt == 4) UK(2, 4);
    else if (nt == 2 && mr == 3) UK(3, 2);
    else if (nt == 2 && mr == 4) UK(4, 2);
    else if (nt == 2 && mr == 5) UK(5, 2);
    else if (nt == 2) UK(6, 2);
    else switch (mr) {
        case 8: UK(8, 1); break;
        case 7: UK(7, 1); break;
        case 6: UK(6, 1); break;
        case 5: UK(5, 1); break;
        case 4: UK(4, 1); break;
        case 3: UK(3, 1); break;
        case 2: UK(2, 1); break;
        default: UK(1, 1); break;
        }
#undef UK
}

/* Runs rows × tiles [o0, o0 + 16 nt) over blocks [b0, b0 + nb) of tiles at q / d.
 *
 * With several row groups, or one of 3 or more rows, a tile is computed for longer than it takes
 * to read, and the hardware prefetchers do not run ahead across tiles: each block step of each
 * group asks for its share of the next tiles (next, of its lines_per lines a step), so all of
 * them are in L2 by the time they are needed and the requests trickle out instead of filling the
 * line-fill buffers at once. (One or two rows are bound by the reads themselves; the prefetch
 * instructions would only add to them.) */
static void slice_rows(const cpu__mm_task *t, int nt, const uint8_t *q, const uint16_t *d, size_t ldt,
                       int64_t o0, int64_t b0, int nb, __mmask16 m, const char *next, int lines_per)
{
    int64_t nb_all = t->w->n_in / 32, n_out = t->w->n_out, groups = (t->n_rows + MR - 1) / MR;
    for (int r0 = 0; r0 < t->n_rows; r0 += MR) {
        int mr = t->n_rows - r0 < MR ? t->n_rows - r0 : MR;
        int64_t it0 = b0 * groups + (r0 / MR) * nb; /* block steps of this tile before this call */
        int pfl = groups > 1 || t->n_rows >= 3 ? lines_per : 0;
        ukernel_any(mr, nt, q, d, ldt, nb, t->xq + (size_t)r0 * nb_all + b0,
                    t->xsum + (size_t)r0 * nb_all + b0, nb_all, t->out + (size_t)r0 * n_out + o0,
                    n_out, m, b0 > 0, next + (size_t)it0 * pfl * 64, pfl,
                    (int)((int64_t)(nt * ldt / 64) - it0 * pfl));
    }
}

static void add_bias(const cpu__mm_task *t, int64_t lo, int64_t hi)
{
    if (t->bias)
        for (int r = 0; r < t->n_rows; r++)
            for (int64_t o = lo; o < hi; o++) t->out[(size_t)r * t->w->n_out + o] += t->bias[o];
}

static int packed_align(int n_rows)
{
    return NR * tiles_for(n_rows < MR ? n_rows : MR);
}

/* Outputs [lo, hi) (lo a multiple of 16) of every row from the weights packed at upload: no
 * packing per call, so each weight byte is read once per call whatever the number of rows. */
static void prepacked_range(const cpu__mm_task *t, int64_t lo, int64_t hi)
{
    const be_weight *w = t->w;
    int64_t nb_all = w->n_in / 32, n_out = w->n_out;
    size_t tb = tile_bytes(nb_all);
    int ntp = tiles_for(t->n_rows < MR ? t->n_rows : MR);
    /* One row group: the whole depth at once. More: slices that stay in L1 while every row
     * group passes over them. */
    int64_t kcb = t->n_rows <= MR ? nb_all : KCB;
    int64_t steps = nb_all * ((t->n_rows + MR - 1) / MR);
    int lines_per = (int)((ntp * tb / 64 + steps - 1) / steps);
    for (int64_t o0 = lo; o0 < hi;) {
        int nt = o0 + NR * ntp <= hi ? ntp : 1;
        int64_t last = o0 + NR * (nt - 1);
        int ncols = n_out - last < NR ? (int)(n_out - last) : NR;
        __mmask16 m = ncols >= 16 ? 0xffff : (__mmask16)((1u << ncols) - 1);
        const uint8_t *q = (const uint8_t *)w->extra + (size_t)(o0 / NR) * tb;
        const uint16_t *d = (const uint16_t *)(q + (size_t)nb_all * QB);
        for (int64_t b0 = 0; b0 < nb_all; b0 += kcb) {
            int nb = nb_all - b0 < kcb ? (int)(nb_all - b0) : (int)kcb;
            slice_rows(t, nt, q + (size_t)b0 * QB, d + b0 * NR, tb, o0, b0, nb, m,
                       (const char *)q + nt * tb, lines_per);
        }
        add_bias(t, o0, last + ncols);
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

/* The row dot product on the file's blocks: |w| (unsigned) × x with w's sign (signed), one
 * vpdpbusd per block, two chains. */
static float dot_q8(const void *wv, const void *xv, int64_t n)
{
    const dt_block_q8_0 *w = wv;
    const cpu__q8x *x = xv;
    int64_t nb = n / 32, b = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        __m256i w0 = _mm256_loadu_si256((const void *)w[b].q);
        __m256i w1 = _mm256_loadu_si256((const void *)w[b + 1].q);
        __m256i x0 = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b].q), w0);
        __m256i x1 = _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b + 1].q), w1);
        __m256i p0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w0), x0);
        __m256i p1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w1), x1);
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * x[b + 1].d), a1);
    }
    for (; b < nb; b++) {
        __m256i wq = _mm256_loadu_si256((const void *)w[b].q);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wq),
                                        _mm256_sign_epi8(_mm256_loadu_si256((const void *)x[b].q), wq));
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), a0);
    }
    return cpu__hsum256(_mm256_add_ps(a0, a1));
}

void cpu__gemm_q8_fill_vnni(cpu__kern *k)
{
    k->mm[DT_Q8_0].dot = dot_q8;
    k->mm[DT_Q8_0].dot_isa = CPU_ISA_AVX512;
    k->mm[DT_Q8_0].packed = (cpu__mm_packed){.isa = CPU_ISA_AVX512, .bytes = packed_bytes, .pack = prepack,
                                             .align = packed_align, .scratch = NULL, .run = prepacked_run,
                                             .xsum = 1};
}
