/*
 * qmatvec_kernels.h — mmvq, the matrix-vector kernel of the quantised weight types (Q8_0, the
 * legacy and K-quants, IQ4_NL, IQ4_XS) for decode-sized batches (1 to CUDA_QGEMV_MAX_ROWS = 8
 * activation rows): the weights stay the file's blocks and are read once, the activations come
 * quantised to 8-bit blocks (qact_kernels.h), and the products run on the integer tensor cores.
 *
 * A warp owns a tile of 16 weight rows and all (up to 8) activation rows — exactly one
 * mma.m16n8k32 accumulator tile (cuda/imma.h): lane 4g + t decodes, per chunk of 32 weights,
 * the eight codes of its two rows g and g + 8 that the A fragment wants (cuda_qi_ints), loads the
 * eight activation bytes of column g that the B fragment wants (one 8-byte load, thanks to the
 * permuted activation layout), and cuda__qmma_chunk / cuda__qmma_block of cuda/qmma.h do the
 * rest. One kernel template serves every type: the type's traits (block size, 16-weight scales,
 * mins) are compile-time constants of the instance.
 *
 * The input dimension is split so that every shape fills the GPU: the CUDA_MMVQ_WARPS warps of a
 * block share one 16-row tile and take its weight blocks in turn (reduced through shared memory),
 * and a grid of gridDim.y > 1 blocks per tile splits it further: each block writes its partial
 * tile to part, and the block that arrives last at the tile's ticket adds the partials in a fixed
 * order, writes the output and resets the ticket for the next launch. The output is written
 * once, in the activation type O, with the bias. The tile, the block reduction and the split's
 * join are device functions that the experts' grouped matvec (moe_kernels.h) runs too, MXFP4
 * included.
 *
 * Kept apart from its launcher (cuda/qmatvec.cu) so that the same source runs under the CPU
 * emulation of cuda/check/emu_cuda.h (cuda/check/quant_emu.cc). Expects the CUDA built-ins.
 */
#ifndef KVSERVE_CUDA_QMATVEC_KERNELS_H
#define KVSERVE_CUDA_QMATVEC_KERNELS_H

#include "cuda/launch.h"
#include "cuda/qmma.h"

/* The output element (col, row) of a tile from the value (index e = 4 · lane + i of the
 * accumulator layout) — for the reduction that 128 threads do after the warps. */
static __device__ __forceinline__ void cuda__mmvq_elem(int e, int *row, int *col)
{
    int lane = e >> 2, i = e & 3;
    *row = (lane >> 2) + 8 * (i >> 1);
    *col = 2 * (lane & 3) + (i & 1);
}

/* The partial sums of one 16-row tile (weight rows o0 .. o0 + 15 of w) with n_rows ≤ 8
 * activation rows (xq [n_rows][n_in], xd [n_rows][n_in / block]) over the weight blocks u0,
 * u0 + du, … of the row, added to this lane's acc (the accumulator layout of qmma.h). Rows past
 * the matrix read its last row (their sums are never written); activation columns past n_rows
 * are zero. mmvq and the experts' grouped mmvq (moe_kernels.h) run their tiles through this. */
template <int T>
static __device__ __forceinline__ void cuda__mmvq_tile(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in,
                                                       int64_t n_out, int64_t o0, const int8_t *__restrict__ xq,
                                                       const float *__restrict__ xd, int n_rows, int64_t u0,
                                                       int64_t du, float acc[4])
{
    const int QB = cuda_q_block_elems(T), BB = cuda_q_block_bytes(T), NC = QB / 32;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t n_blocks = n_in / QB;
    const uint8_t *row_lo = w + (size_t)min(o0 + g, n_out - 1) * row_bytes;
    const uint8_t *row_hi = w + (size_t)min(o0 + g + 8, n_out - 1) * row_bytes;
    const int has_x = g < n_rows; /* column g of the tile is an activation row */
    const int8_t *xr = xq + (has_x ? g : 0) * n_in + 8 * t;
    const int c0 = 2 * t, c1 = 2 * t + 1;
    int ci[4] = {0, 0, 0, 0}, cm[4] = {0, 0, 0, 0};
    /* One weight block (one chunk, or the eight of a super-block) of both rows against the
     * activations: its head unpacked once, the chunks through the mma, the scales at its end. */
    auto block = [&](int64_t u) {
        const uint8_t *blo = row_lo + u * BB, *bhi = row_hi + u * BB;
        uint32_t hlo[4], hhi[4];
        cuda_qi_head(T, blo, hlo);
        cuda_qi_head(T, bhi, hhi);
#pragma unroll
        for (int j = 0; j < NC; j++) {
            uint32_t ql[2], qh[2], b[2] = {0, 0};
            cuda_qi_ints(T, blo, j, t, ql);
            cuda_qi_ints(T, bhi, j, t, qh);
            const uint32_t a[4] = {ql[0], qh[0], ql[1], qh[1]};
            if (has_x) {
                cuda__u32x2 xv = *(const cuda__u32x2 *)(xr + u * QB + 32 * j);
                b[0] = xv.x;
                b[1] = xv.y;
            }
            cuda__qmma_chunk<T>(a, cuda_qi_sub_h(T, hlo, j), cuda_qi_sub_h(T, hhi, j), b, ci, cm);
        }
        float d_lo, dm_lo, d_hi, dm_hi;
        cuda_qi_scales(T, blo, &d_lo, &dm_lo);
        cuda_qi_scales(T, bhi, &d_hi, &dm_hi);
        float dx0 = c0 < n_rows ? cuda__qmma_dx<T>(xd[c0 * n_blocks + u]) : 0.0f;
        float dx1 = c1 < n_rows ? cuda__qmma_dx<T>(xd[c1 * n_blocks + u]) : 0.0f;
        cuda__qmma_block<T>(d_lo, dm_lo, d_hi, dm_hi, dx0, dx1, ci, cm, acc);
    };
    /* deep enough unrolling that every warp keeps about 2 KB of weights in flight */
    if (NC == 1) {
#pragma unroll 8
        for (int64_t u = u0; u < n_blocks; u += du) block(u);
    } else {
#pragma unroll 2
        for (int64_t u = u0; u < n_blocks; u += du) block(u);
    }
}

/* The CUDA_MMVQ_WARPS warps' tiles of a block summed: thread e (of 128) gets the sum of element
 * e (cuda__mmvq_elem). Every thread of the block calls it; it may be called again at once. */
static __device__ __forceinline__ float cuda__mmvq_reduce(const float acc[4])
{
    static __shared__ float red[CUDA_MMVQ_WARPS][128];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < 4; i++) red[warp][4 * lane + i] = acc[i];
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < CUDA_MMVQ_WARPS; k++) s += red[k][threadIdx.x];
    __syncthreads(); /* red is free again */
    return s;
}

/* The split of a tile over `split` blocks (y = this block's index): each block stores its sum s
 * at part[y · y_stride] (part already at this thread's element; valid: the element exists); the
 * block that arrives last at *ticket adds the partials in the order y = 0, 1, … into *s, resets
 * the ticket and returns 1; the others return 0. Every thread of the block calls it. */
static __device__ __forceinline__ int cuda__mmvq_join(float *s, int valid, float *part, int64_t y_stride, int y,
                                                      int split, unsigned *ticket)
{
    static __shared__ unsigned last;
    if (valid) part[(int64_t)y * y_stride] = *s;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == (unsigned)split - 1;
    __syncthreads();
    if (!last) return 0;
    float v = 0.0f;
    for (int k = 0; k < split && valid; k++) v += __ldcg(&part[(int64_t)k * y_stride]);
    *s = v;
    if (threadIdx.x == 0) *ticket = 0;
    return 1;
}

/* out [n_rows][n_out] (type O) = x · Wᵀ (+ bias) for n_rows ≤ 8: W [n_out] rows of row_bytes in
 * type T's blocks, x quantised as xq [n_rows][n_in] / xd [n_rows][n_in / block] (qact_kernels.h).
 * Grid: cuda_div_up(n_out, 16) × split blocks of CUDA_MMVQ_WARPS warps. With split > 1, part
 * holds split × n_rows × n_out floats and ticket one zeroed counter per tile (left zeroed). */
template <int T, typename O>
static __global__ void __launch_bounds__(CUDA_MMVQ_WARPS * 32)
    cuda__mmvq_k(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                 const int8_t *__restrict__ xq, const float *__restrict__ xd, int n_rows,
                 const float *__restrict__ bias, O *__restrict__ out, float *part, unsigned *ticket)
{
    const int warp = threadIdx.x >> 5, split = (int)gridDim.y;
    const int64_t o0 = (int64_t)blockIdx.x * 16;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    cuda__mmvq_tile<T>(w, row_bytes, n_in, n_out, o0, xq, xd, n_rows, (int64_t)blockIdx.y * CUDA_MMVQ_WARPS + warp,
                       (int64_t)split * CUDA_MMVQ_WARPS, acc);
    float s = cuda__mmvq_reduce(acc);
    int row, col;
    cuda__mmvq_elem(threadIdx.x, &row, &col); /* 128 threads: one element of the 16 × 8 tile each */
    const int valid = o0 + row < n_out && col < n_rows;
    if (split > 1 && !cuda__mmvq_join(&s, valid, part + (valid ? (int64_t)col * n_out + o0 + row : 0),
                                      (int64_t)n_rows * n_out, (int)blockIdx.y, split, &ticket[blockIdx.x]))
        return;
    if (valid) out[(int64_t)col * n_out + o0 + row] = cuda__qa_out<O>(s + (bias ? bias[o0 + row] : 0.0f));
}

#endif
