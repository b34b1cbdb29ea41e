/*
 * qgemm_kernels.h — the kernels of the quantised GEMM (prefill on quantised weights):
 *
 *   cuda__mmq_k    mmq, the integer tensor-core GEMM: a block computes a tile of
 *                  CUDA_MMQ_BM weight rows × CUDA_MMQ_BN activation rows. Per step of 256
 *                  input values it decodes its weight rows' blocks into 8-bit codes in shared
 *                  memory (cuda_qi_ints, with the sub-block integers and the block scales beside
 *                  them: each weight is decoded once per step and used by all CUDA_MMQ_BN
 *                  activation rows), copies the quantised activations (qact_kernels.h) next to
 *                  them, and its 2 × 2 warps multiply 32 × 32 sub-tiles with mma.sync s8 × s8 →
 *                  s32 (cuda/qmma.h); the scales are applied in f32 at the end of every weight
 *                  block (32 values for the legacy types, a super-block of 256 for the others).
 *   cuda__qdeq_k   rows of a matrix decoded to F16 (or f32): the other prefill path, whose F16
 *                  tiles cuBLAS multiplies (cuda/qgemm.cu), kept to compare against.
 *
 * Shared memory rows are 256 + 32 bytes apart, so that the 8-byte fragment loads of a half-warp
 * (rows g = 0..3 or 4..7, lanes t = 0..3) fall in 32 different banks. Kept apart from the launchers
 * (cuda/qgemm.cu) so that the same source also compiles against the CPU emulation of
 * cuda/check/emu_cuda.h, which checks it without a GPU (cuda/check/quant_emu.cc). Expects the
 * CUDA built-ins.
 */
#ifndef KVSERVE_CUDA_QGEMM_KERNELS_H
#define KVSERVE_CUDA_QGEMM_KERNELS_H

#include "cuda/formats.h"
#include "cuda/qmma.h"
#include "cuda/quant_formats.h"

#define CUDA_MMQ_BM 64      /* weight rows of a block's tile */
#define CUDA_MMQ_BN 64      /* activation rows of a block's tile */
#define CUDA_MMQ_KC 8       /* chunks of 32 input values per step (256 values: one super-block) */
#define CUDA_MMQ_THREADS 128 /* 2 × 2 warps, each 32 weight rows × 32 activation rows */
#define CUDA_MMQ_STRIDE 288 /* bytes per shared-memory row: 256 codes + 32 of padding */

/* The step's weight rows: codes into sw, sub words into ssub [row][chunk], (D, DM) into sd
 * [row][block of the step]. Rows past the matrix repeat its last row (never stored). */
template <int T>
static __device__ __forceinline__ void cuda__mmq_load_w(const uint8_t *__restrict__ w, size_t row_bytes,
                                                        int64_t n_out, int64_t r0, int64_t k0, int nc, uint8_t *sw,
                                                        uint32_t *ssub, float2 *sd)
{
    const int NB = cuda_q_block_elems(T) / 32, BB = cuda_q_block_bytes(T);
    for (int it = threadIdx.x; it < CUDA_MMQ_BM * CUDA_MMQ_KC * 4; it += CUDA_MMQ_THREADS) {
        const int t = it & 3, j = (it >> 2) & (CUDA_MMQ_KC - 1), row = it >> 5;
        if (j >= nc) continue;
        const int64_t c = k0 + j;
        const uint8_t *blk = w + (size_t)min(r0 + row, n_out - 1) * row_bytes + (size_t)(c / NB) * BB;
        const int jj = (int)(c % NB);
        uint32_t q[2];
        cuda_qi_ints(T, blk, jj, t, q);
        cuda__u32x2 v = {q[0], q[1]};
        *(cuda__u32x2 *)(sw + row * CUDA_MMQ_STRIDE + 32 * j + 8 * t) = v;
        if (t) continue;
        uint32_t head[4];
        cuda_qi_head(T, blk, head);
        ssub[row * CUDA_MMQ_KC + j] = cuda_qi_sub_h(T, head, jj);
        if (jj == 0) {
            float d, dm;
            cuda_qi_scales(T, blk, &d, &dm);
            float2 v2;
            v2.x = d, v2.y = dm;
            sd[row * CUDA_MMQ_KC + j / NB] = v2;
        }
    }
}

/* The step's activation rows (codes, 16 bytes at a time, zeros past the matrix) and their scales
 * sdx [row][block of the step]. */
template <int T>
static __device__ __forceinline__ void cuda__mmq_load_x(const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                                        int64_t n_in, int n_tok, int64_t x0, int64_t k0, int nc,
                                                        uint8_t *sx, float *sdx)
{
    const int NB = cuda_q_block_elems(T) / 32, KB = CUDA_MMQ_KC / NB;
    for (int it = threadIdx.x; it < CUDA_MMQ_BN * CUDA_MMQ_KC * 2; it += CUDA_MMQ_THREADS) {
        const int h = it & 1, j = (it >> 1) & (CUDA_MMQ_KC - 1), tok = it >> 4;
        uint4 v = {0u, 0u, 0u, 0u};
        if (j < nc && x0 + tok < n_tok) v = *(const uint4 *)(xq + (x0 + tok) * n_in + (k0 + j) * 32 + 16 * h);
        *(uint4 *)(sx + tok * CUDA_MMQ_STRIDE + 32 * j + 16 * h) = v;
    }
    for (int it = threadIdx.x; it < CUDA_MMQ_BN * KB; it += CUDA_MMQ_THREADS) {
        const int tok = it / KB, b = it % KB;
        const int64_t n_blocks = n_in / (32 * NB);
        sdx[tok * CUDA_MMQ_KC + b] = x0 + tok < n_tok && b * NB < nc ? xd[(x0 + tok) * n_blocks + k0 / NB + b] : 0.0f;
    }
}

/* out [n_tok][n_out] (type O) = x · Wᵀ (+ bias): W [n_out] rows of row_bytes in type T's blocks,
 * x quantised as xq [n_tok][n_in] / xd (qact_kernels.h). Grid: cuda_div_up(n_out, CUDA_MMQ_BM) ×
 * cuda_div_up(n_tok, CUDA_MMQ_BN) blocks of CUDA_MMQ_THREADS threads. */
template <int T, typename O>
static __global__ void __launch_bounds__(CUDA_MMQ_THREADS)
    cuda__mmq_k(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                const int8_t *__restrict__ xq, const float *__restrict__ xd, int n_tok,
                const float *__restrict__ bias, O *__restrict__ out)
{
    /* the codes as bytes, declared as 16-byte words for their alignment */
    static __shared__ uint4 sw4[CUDA_MMQ_BM * CUDA_MMQ_STRIDE / 16], sx4[CUDA_MMQ_BN * CUDA_MMQ_STRIDE / 16];
    uint8_t *sw = (uint8_t *)sw4, *sx = (uint8_t *)sx4;
    static __shared__ uint32_t ssub[CUDA_MMQ_BM * CUDA_MMQ_KC];
    static __shared__ float2 sd[CUDA_MMQ_BM * CUDA_MMQ_KC];
    static __shared__ float sdx[CUDA_MMQ_BN * CUDA_MMQ_KC];
    const int NB = cuda_q_block_elems(T) / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wr = (warp & 1) * 32, wt = (warp >> 1) * 32; /* the warp's rows and tokens in the tile */
    const int64_t r0 = (int64_t)blockIdx.x * CUDA_MMQ_BM, x0 = (int64_t)blockIdx.y * CUDA_MMQ_BN;
    const int64_t n_chunks = n_in / 32;
    float acc[2][4][4];
    int ci[2][4][4], cm[2][4][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.0f, ci[m][n][i] = 0, cm[m][n][i] = 0;

    for (int64_t k0 = 0; k0 < n_chunks; k0 += CUDA_MMQ_KC) {
        const int nc = (int)min((int64_t)CUDA_MMQ_KC, n_chunks - k0);
        cuda__mmq_load_w<T>(w, row_bytes, n_out, r0, k0, nc, sw, ssub, sd);
        cuda__mmq_load_x<T>(xq, xd, n_in, n_tok, x0, k0, nc, sx, sdx);
        __syncthreads();
#pragma unroll 2
        for (int j = 0; j < nc; j++) {
            uint32_t a[2][4], sl[2], sh[2];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const int rl = wr + 16 * m + g;
                cuda__u32x2 lo = *(const cuda__u32x2 *)(sw + rl * CUDA_MMQ_STRIDE + 32 * j + 8 * t);
                cuda__u32x2 hi = *(const cuda__u32x2 *)(sw + (rl + 8) * CUDA_MMQ_STRIDE + 32 * j + 8 * t);
                a[m][0] = lo.x, a[m][1] = hi.x, a[m][2] = lo.y, a[m][3] = hi.y;
                sl[m] = ssub[rl * CUDA_MMQ_KC + j];
                sh[m] = ssub[(rl + 8) * CUDA_MMQ_KC + j];
            }
#pragma unroll
            for (int n = 0; n < 4; n++) {
                cuda__u32x2 bv = *(const cuda__u32x2 *)(sx + (wt + 8 * n + g) * CUDA_MMQ_STRIDE + 32 * j + 8 * t);
                const uint32_t b[2] = {bv.x, bv.y};
#pragma unroll
                for (int m = 0; m < 2; m++) cuda__qmma_chunk<T>(a[m], sl[m], sh[m], b, ci[m][n], cm[m][n]);
            }
            if (NB == 1 || j == nc - 1) { /* the end of a weight block */
                const int b = NB == 1 ? j : 0;
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const int rl = wr + 16 * m + g;
                    const float2 dl = sd[rl * CUDA_MMQ_KC + b], dh = sd[(rl + 8) * CUDA_MMQ_KC + b];
#pragma unroll
                    for (int n = 0; n < 4; n++) {
                        const int tk = wt + 8 * n + 2 * t;
                        cuda__qmma_block<T>(dl.x, dl.y, dh.x, dh.y, sdx[tk * CUDA_MMQ_KC + b],
                                            sdx[(tk + 1) * CUDA_MMQ_KC + b], ci[m][n], cm[m][n], acc[m][n]);
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t row = r0 + wr + 16 * m + g + 8 * (i >> 1), tok = x0 + wt + 8 * n + 2 * t + (i & 1);
                if (row < n_out && tok < n_tok)
                    out[tok * n_out + row] = cuda__qa_out<O>(acc[m][n][i] + (bias ? bias[row] : 0.0f));
            }
}

/* Rows [r0, r0 + n_rows) of a matrix of type T (row_bytes apart, n_in weights each) decoded into
 * dst [n_rows][n_in], F16 bits (f16 = 1) or f32: a grid-stride loop over 8-weight runs. */
template <int T>
static __global__ void cuda__qdeq_k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t n_rows,
                                    void *dst, int f16)
{
    int64_t n8 = n_rows * (n_in / 8);
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n8; g += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = g / (n_in / 8), i0 = g % (n_in / 8) * 8;
        float v[8];
        cuda_q_dequant8(T, w + (size_t)(r0 + r) * row_bytes, i0, v);
        for (int k = 0; k < 8; k++) {
            int64_t e = r * n_in + i0 + k;
            if (f16) ((uint16_t *)dst)[e] = cuda_f32_to_f16(v[k]);
            else ((float *)dst)[e] = v[k];
        }
    }
}

#endif
