/*
 * sample_kernels.h — sampling on the device: today the greedy argmax of logit rows. Kept apart
 * from its launcher (cuda/sample.cu) so that it compiles under the CPU emulation of
 * cuda/check/emu_cuda.h too.
 *
 * Expects the CUDA built-ins (or their emulation).
 */
#ifndef KVSERVE_CUDA_SAMPLE_KERNELS_H
#define KVSERVE_CUDA_SAMPLE_KERNELS_H

#include <math.h>
#include <stdint.h>

/* One block per row: the (value, index) maximum, lowest index on ties. */
static __global__ void cuda__argmax_k(const float *x, int dim, int32_t *ids)
{
    const float *row = x + (int64_t)blockIdx.x * dim;
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = row[i];
        if (v > best || (v == best && i < bi)) {
            best = v;
            bi = i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) {
            best = ov;
            bi = oi;
        }
    }
    static __shared__ float sv[32];
    static __shared__ int si[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = best;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (sv[w] > best || (sv[w] == best && si[w] < bi)) {
                best = sv[w];
                bi = si[w];
            }
        ids[blockIdx.x] = bi == 0x7fffffff ? 0 : bi; /* an all-NaN row yields 0 */
    }
}

#endif
