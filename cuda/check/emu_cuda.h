/*
 * emu_cuda.h — just enough of CUDA's device built-ins, on POSIX threads, to run the kernel
 * headers of cuda/ (cuda/NAME_kernels.h: attention, the K/V store, the quantised-weight kernels,
 * norms and RoPE, the element-wise ops, the gathers, the GEMM's conversions, argmax) on a CPU.
 * Host C++ only; see cuda/check/attn_emu.cc, quant_emu.cc and ops_emu.cc.
 *
 * One launch runs blockDim.x threads that walk the grid's blocks in lock step (block after
 * block), so shared memory is reused safely: one static array for the dynamic part, and the
 * kernels declare their fixed arrays static __shared__, which makes them one array for all the
 * threads here as for a block on the GPU. __syncthreads is a barrier over those threads and warp
 * shuffles exchange through a per-warp array between two barriers of the warp's 32 threads. This
 * is an emulation of the execution model, not of timing: it catches indexing, masking, barrier
 * placement within a block and reduction mistakes, not races that only real concurrency or the
 * memory model would show. The integer instructions (dp4a, the s8 mma.sync shapes, the atomics of
 * a last-block reduction) are in emu_int.h, included at the end.
 */
#ifndef KVSERVE_EMU_CUDA_H
#define KVSERVE_EMU_CUDA_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __launch_bounds__(x)
#define __shared__

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
extern pthread_barrier_t emu_bar, emu_wbar[32];
extern float emu_xchg[1024];
extern float sm[]; /* the dynamic shared memory of the running block */

static inline void __syncthreads()
{
    pthread_barrier_wait(&emu_bar);
}

static inline float __shfl_xor_sync(unsigned mask, float v, int o)
{
    (void)mask;
    int t = (int)threadIdx.x, w = t >> 5, lane = t & 31;
    emu_xchg[t] = v;
    pthread_barrier_wait(&emu_wbar[w]);
    float r = emu_xchg[(w << 5) | (lane ^ o)];
    pthread_barrier_wait(&emu_wbar[w]);
    return r;
}

static inline int __shfl_xor_sync(unsigned mask, int v, int o)
{
    static int xchg[1024]; /* the int lanes' own exchange, so that no value passes through a float */
    (void)mask;
    int t = (int)threadIdx.x, w = t >> 5, lane = t & 31;
    xchg[t] = v;
    pthread_barrier_wait(&emu_wbar[w]);
    int r = xchg[(w << 5) | (lane ^ o)];
    pthread_barrier_wait(&emu_wbar[w]);
    return r;
}

/* One launch of `threads` threads over the grid: every thread walks all blocks in order,
 * calling block() for each; the block is over (a barrier) before its shared memory is reused.
 * The kernel's arguments travel in the program's own globals. */
static void (*emu_block_fn)(void);

static void *emu_thread(void *p)
{
    threadIdx.x = (unsigned)(intptr_t)p;
    for (unsigned z = 0; z < gridDim.z; z++)
        for (unsigned y = 0; y < gridDim.y; y++)
            for (unsigned x = 0; x < gridDim.x; x++) {
                blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
                emu_block_fn();
                __syncthreads();
            }
    return NULL;
}

static void emu_run(dim3 grid, int threads, void (*block)(void))
{
    emu_block_fn = block;
    blockDim.x = (unsigned)threads;
    gridDim = grid;
    pthread_barrier_init(&emu_bar, NULL, (unsigned)threads);
    for (int w = 0; w < threads / 32; w++) pthread_barrier_init(&emu_wbar[w], NULL, 32);
    std::vector<pthread_t> th(threads);
    for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, emu_thread, (void *)(intptr_t)t);
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&emu_bar);
    for (int w = 0; w < threads / 32; w++) pthread_barrier_destroy(&emu_wbar[w]);
}

#define __expf expf
using std::min;

/* 16-bit element types are not emulated: the emulation checks the f32, int8 and e4m3
 * instantiations (whose scales are read and written through cuda/formats.h's software f16
 * conversions); a 16-bit load gives NaN and a 16-bit store a NaN, so that a check that reaches
 * one by mistake fails. */
struct __half {
    uint16_t x;
};
struct __nv_bfloat16 {
    uint16_t x;
};
struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct int4 {
    int x, y, z, w;
};
struct __half2 {
    uint32_t x;
};
struct __nv_bfloat162 {
    uint32_t x;
};
static inline float4 make_float4(float x, float y, float z, float w)
{
    float4 f = {x, y, z, w};
    return f;
}
static inline float2 __half22float2(__half2 h)
{
    float2 f = {(float)h.x * NAN, NAN};
    return f;
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    float2 f = {(float)h.x * NAN, NAN};
    return f;
}
static inline float __half2float(__half h)
{
    return (float)h.x * NAN;
}
static inline float __bfloat162float(__nv_bfloat16 h)
{
    return (float)h.x * NAN;
}

static inline __half __float2half_rn(float f)
{
    __half h = {0x7e00u}; /* NaN */
    return h;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    __nv_bfloat16 h = {0x7fc0u}; /* NaN */
    return h;
}

/* ---- integer instructions (dp4a, s8 mma.sync), atomics: emu_int.h ---------------------- */
#include "cuda/check/emu_int.h"

#endif
