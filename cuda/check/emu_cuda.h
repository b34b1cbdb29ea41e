/*
 * emu_cuda.h — just enough of CUDA's device built-ins, on POSIX threads, to run the kernel
 * headers of cuda/ (cuda/NAME_kernels.h: attention, the K/V store, the quantised-weight kernels,
 * norms and RoPE, the element-wise ops, the gathers, the GEMM's conversions, argmax, the dense
 * matrix-vector kernels and the fused ops) on a CPU. Host C++ only; see cuda/check/attn_emu.cc,
 * quant_emu.cc, ops_emu.cc and dense_emu.cc.
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

#include "cuda/formats.h"

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

/* A barrier of the calling thread's warp (every lane calls it, as the kernels do). */
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    pthread_barrier_wait(&emu_wbar[threadIdx.x >> 5]);
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

/* The 16-bit element types hold their bits, as on the GPU: conversions round to nearest even
 * through the host's software formats (cuda/formats.h, checked exhaustively against the
 * reference conversions by tests/test_cuda_host.c), and a pair type packs its first element in
 * its low half (the lower address), as __half2 / __nv_bfloat162 do. */
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
struct uint2 {
    unsigned x, y;
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
static inline float2 make_float2(float x, float y)
{
    float2 f = {x, y};
    return f;
}
static inline float __half2float(__half h)
{
    return cuda_f16_to_f32(h.x);
}
static inline float __bfloat162float(__nv_bfloat16 h)
{
    return cuda_bf16_to_f32(h.x);
}
static inline __half __float2half_rn(float f)
{
    __half h = {cuda_f32_to_f16(f)};
    return h;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    __nv_bfloat16 h = {cuda_f32_to_bf16(f)};
    return h;
}
static inline float2 __half22float2(__half2 h)
{
    return make_float2(cuda_f16_to_f32((uint16_t)(h.x & 0xffffu)), cuda_f16_to_f32((uint16_t)(h.x >> 16)));
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    return make_float2(cuda_bf16_to_f32((uint16_t)(h.x & 0xffffu)), cuda_bf16_to_f32((uint16_t)(h.x >> 16)));
}
static inline __half2 __floats2half2_rn(float a, float b)
{
    __half2 h = {(uint32_t)cuda_f32_to_f16(a) | (uint32_t)cuda_f32_to_f16(b) << 16};
    return h;
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    __nv_bfloat162 h = {(uint32_t)cuda_f32_to_bf16(a) | (uint32_t)cuda_f32_to_bf16(b) << 16};
    return h;
}

/* ---- integer instructions (dp4a, s8 mma.sync), atomics: emu_int.h ---------------------- */
#include "cuda/check/emu_int.h"

#endif
