/*
 * emu_cuda.h — just enough of CUDA's device built-ins to run the kernel headers of cuda/
 * (cuda/NAME_kernels.h: attention, the K/V store, the quantised-weight kernels, norms and RoPE,
 * the element-wise ops, the gathers, the GEMM's conversions, argmax, the dense matrix-vector
 * kernels and the fused ops, the sampler) on a CPU. Host C++ only; see cuda/check/attn_emu.cc,
 * quant_emu.cc, ops_emu.cc, dense_emu.cc and sample_emu.cc.
 *
 * One launch runs blockDim.x threads that walk the grid's blocks in lock step (block after
 * block), so shared memory is reused safely: one static array for the dynamic part, and the
 * kernels declare their fixed arrays static __shared__, which makes them one array for all the
 * threads here as for a block on the GPU.
 *
 * Each CUDA thread is a fiber (its own stack, switched to and from in user space) on the one host
 * thread that runs the launch: a thread runs until it waits at a barrier (__syncthreads, or the
 * warp-wide exchange behind every shuffle and warp matrix instruction), then the next thread
 * runs, round robin. The order is deterministic, and each thread runs as far as it can before the
 * others catch up, so a missing barrier reads data that is not there yet (or already
 * overwritten) every time rather than now and then. Warp collectives exchange through a per-warp
 * buffer that alternates between two halves, so each costs one warp barrier. A barrier that can
 * never complete (threads waiting at different barriers) stops the program with a message. This
 * is an emulation of the execution model, not of timing: it catches indexing, masking, barrier
 * placement and reduction mistakes, not races that only the memory model would show.
 *
 * The 16-bit float types hold their IEEE bits and convert exactly as the GPU does (round to
 * nearest even, cuda/formats.h). The warp-level matrix instructions (mma.sync, ldmatrix,
 * cp.async) are in cuda/check/emu_mma.h, the integer ones (dp4a, the s8 mma.sync shapes) in
 * cuda/check/emu_int.h, both included at the end.
 */
#ifndef KVSERVE_EMU_CUDA_H
#define KVSERVE_EMU_CUDA_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include <algorithm>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include "cuda/formats.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) alignas(n)

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
/* The programs still define these (the threaded emulation's barriers and exchange); the fibers'
 * own barriers replace them, and pthread_barrier_wait on them is mapped onto those below. */
extern pthread_barrier_t emu_bar, emu_wbar[32];
extern float emu_xchg[1024];
extern float sm[]; /* the dynamic shared memory of the running block */

/* ---- execution: one fiber per CUDA thread ---------------------------------------------------- */

#define EMU_MAX_THREADS 1024
#define EMU_STACK_BYTES ((size_t)256 << 10)

struct emu__fiber {
    void *sp;       /* saved stack pointer (x86-64) */
    char *stack;    /* EMU_STACK_BYTES, kept from launch to launch */
    int done;
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
};
static emu__fiber emu__fib[EMU_MAX_THREADS];
static int emu__n, emu__cur, emu__alive;
static unsigned long emu__progress; /* barrier arrivals so far: a waiter that sees none has stalled */
static void (*emu_block_fn)(void);

#if defined(__x86_64__)
static void *emu__main_sp;
/* Saves the callee-saved registers and the stack pointer in *save, loads those of `to`. */
__attribute__((naked, noinline)) static void emu__switch(void **save, void *to)
{
    __asm__ volatile("pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
                     "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
                     "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n\t");
}
#define EMU__GO(from, to) emu__switch(&emu__fib[from].sp, emu__fib[to].sp)
#define EMU__TO_MAIN(from) emu__switch(&emu__fib[from].sp, emu__main_sp)
#else
static ucontext_t emu__main_uc;
#define EMU__GO(from, to) swapcontext(&emu__fib[from].uc, &emu__fib[to].uc)
#define EMU__TO_MAIN(from) swapcontext(&emu__fib[from].uc, &emu__main_uc)
#endif

/* Runs the next unfinished thread after the current one: round robin over the block, or with
 * in_warp over the calling thread's warp (a warp collective waits only for its own lanes). */
static inline void emu__yield(int in_warp)
{
    int from = emu__cur, to = from;
    do to = in_warp ? (to & ~31) | ((to + 1) & 31) : to + 1 == emu__n ? 0 : to + 1;
    while (emu__fib[to].done && to != from);
    if (to == from) return;
    emu__cur = to;
    threadIdx.x = (unsigned)to;
    EMU__GO(from, to);
    threadIdx.x = (unsigned)from; /* resumed */
}

struct emu__barrier {
    int count;
    unsigned gen;
};
static emu__barrier emu__bbar, emu__wbar[EMU_MAX_THREADS / 32];

/* Waits until `need` threads have arrived at b (the last one to arrive goes straight on). */
static inline void emu__barrier_wait(emu__barrier *b, int need, int in_warp, const char *what)
{
    unsigned g = b->gen;
    emu__progress++;
    if (++b->count == need) {
        b->count = 0;
        b->gen++;
        return;
    }
    unsigned long seen = emu__progress;
    int idle = 0;
    while (b->gen == g) {
        emu__yield(in_warp);
        if (emu__progress != seen) {
            seen = emu__progress;
            idle = 0;
        } else if (++idle > 2) {
            fprintf(stderr, "emu_cuda: thread %d of block (%u,%u,%u) waits at a %s that cannot complete\n",
                    emu__cur, blockIdx.x, blockIdx.y, blockIdx.z, what);
            abort();
        }
    }
}

static inline void __syncthreads()
{
    emu__barrier_wait(&emu__bbar, (int)blockDim.x, 0, "__syncthreads");
}

/* The barrier of the calling thread's warp (blockDim.x is a multiple of 32). */
static inline void emu_warp_barrier()
{
    emu__barrier_wait(&emu__wbar[threadIdx.x >> 5], 32, 1, "warp collective");
}

/* A barrier of the calling thread's warp (every lane calls it, as the kernels do). */
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    emu_warp_barrier();
}

/* Code written for the threaded emulation waits on emu_bar or emu_wbar[w]: the same barriers. */
static inline int emu__pthread_barrier_wait(pthread_barrier_t *b)
{
    if (b == &emu_bar) __syncthreads();
    else if (b >= emu_wbar && b < emu_wbar + 32) emu_warp_barrier();
    else return pthread_barrier_wait(b);
    return 0;
}
#define pthread_barrier_wait(b) emu__pthread_barrier_wait(b)

static void emu__block_end(); /* emu_mma.h: drops a thread's unwaited async copies */

/* A fiber's body: every block of the grid in order, a barrier after each. */
static void emu__thread_main()
{
    int t = emu__cur;
    for (unsigned z = 0; z < gridDim.z; z++)
        for (unsigned y = 0; y < gridDim.y; y++)
            for (unsigned x = 0; x < gridDim.x; x++) {
                blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
                emu_block_fn();
                emu__block_end();
                __syncthreads();
            }
    emu__fib[t].done = 1;
    if (--emu__alive == 0) EMU__TO_MAIN(t);
    emu__yield(0); /* never resumed */
    abort();
}

#if defined(__x86_64__)
/* The first switch to a fiber "returns" into this, on the fiber's own stack. */
__attribute__((noinline)) static void emu__entry()
{
    emu__thread_main();
}
#endif

/* One launch of `threads` threads over the grid: every thread walks all blocks in order, calling
 * block() for each; the block is over (a barrier) before its shared memory is reused. The
 * kernel's arguments travel in the program's own globals. */
static void emu_run(dim3 grid, int threads, void (*block)(void))
{
    if (threads < 1 || threads > EMU_MAX_THREADS) abort();
    emu_block_fn = block;
    blockDim.x = (unsigned)threads;
    gridDim = grid;
    emu__n = emu__alive = threads;
    memset(&emu__bbar, 0, sizeof emu__bbar);
    memset(emu__wbar, 0, sizeof emu__wbar);
    for (int t = 0; t < threads; t++) {
        emu__fiber *f = &emu__fib[t];
        if (!f->stack && !(f->stack = (char *)malloc(EMU_STACK_BYTES))) abort();
        f->done = 0;
#if defined(__x86_64__)
        /* ret pops emu__entry with the stack 16-byte aligned after it, as after a call */
        uintptr_t top = ((uintptr_t)f->stack + EMU_STACK_BYTES) & ~(uintptr_t)15;
        void **sp = (void **)(top - 16);
        sp[1] = NULL; /* emu__entry never returns */
        sp[0] = (void *)emu__entry;
        sp -= 6; /* r15 r14 r13 r12 rbx rbp */
        for (int i = 0; i < 6; i++) sp[i] = NULL;
        f->sp = sp;
#else
        getcontext(&f->uc);
        f->uc.uc_stack.ss_sp = f->stack;
        f->uc.uc_stack.ss_size = EMU_STACK_BYTES;
        f->uc.uc_link = NULL;
        makecontext(&f->uc, emu__thread_main, 0);
#endif
    }
    emu__cur = 0;
    threadIdx.x = 0;
#if defined(__x86_64__)
    emu__switch(&emu__main_sp, emu__fib[0].sp);
#else
    swapcontext(&emu__main_uc, &emu__fib[0].uc);
#endif
}

/* ---- warp exchange and shuffles ------------------------------------------------------------- */

/* Two halves of 64 bytes per thread, used alternately by each thread's successive collectives: a
 * thread writes half h of collective n only after the barrier of n − 1, which all its warp passed
 * after reading half h of collective n − 2. */
static unsigned char emu__xbuf[2][EMU_MAX_THREADS][64];
static unsigned char emu__xhalf[EMU_MAX_THREADS];

/* Publishes n ≤ 64 bytes of the calling lane, waits for its warp, and returns the warp's 32
 * slots (slot stride 64 bytes, lane 0 first) until the next collective. */
static inline const unsigned char *emu_warp_exchange(const void *mine, size_t n)
{
    int t = (int)threadIdx.x, h = emu__xhalf[t];
    emu__xhalf[t] ^= 1;
    memcpy(emu__xbuf[h][t], mine, n);
    emu_warp_barrier();
    return emu__xbuf[h][t & ~31];
}

template <typename T> static inline T emu__shfl(T v, int src_lane)
{
    const unsigned char *w = emu_warp_exchange(&v, sizeof v);
    T r;
    memcpy(&r, w + 64 * (src_lane & 31), sizeof r);
    return r;
}

static inline float __shfl_xor_sync(unsigned mask, float v, int o)
{
    (void)mask;
    return emu__shfl(v, (int)(threadIdx.x & 31) ^ o);
}
static inline int __shfl_xor_sync(unsigned mask, int v, int o)
{
    (void)mask;
    return emu__shfl(v, (int)(threadIdx.x & 31) ^ o);
}
static inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int o)
{
    (void)mask;
    return emu__shfl(v, (int)(threadIdx.x & 31) ^ o);
}
static inline float __shfl_sync(unsigned mask, float v, int src)
{
    (void)mask;
    return emu__shfl(v, src);
}
static inline int __shfl_sync(unsigned mask, int v, int src)
{
    (void)mask;
    return emu__shfl(v, src);
}

/* ---- memory, atomics, bit operations -------------------------------------------------------- */

/* One host thread runs every CUDA thread: fences are no-ops and atomics plain updates. */
static inline void __threadfence() {}
static inline int atomicAdd(int *p, int v)
{
    int o = *p;
    *p = o + v;
    return o;
}
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    unsigned o = *p;
    *p = o + v;
    return o;
}
template <typename T> static inline T __ldcg(const T *p)
{
    return *p;
}
template <typename T> static inline T __ldg(const T *p)
{
    return *p;
}
/* prmt (byte permute): byte i of the result is byte (s >> 4i) & 7 of the pair {y:x}. */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
    return r;
}

#define __expf expf
using std::max;
using std::min;

/* ---- vector and 16-bit float types ------------------------------------------------------------ */

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
/* A pair in one 32-bit word, the first element in the low half (as on the GPU). */
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
    return make_float2(cuda_f16_to_f32((uint16_t)h.x), cuda_f16_to_f32((uint16_t)(h.x >> 16)));
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    return make_float2(cuda_bf16_to_f32((uint16_t)h.x), cuda_bf16_to_f32((uint16_t)(h.x >> 16)));
}
static inline __half2 __floats2half2_rn(float lo, float hi)
{
    __half2 h = {(uint32_t)cuda_f32_to_f16(lo) | (uint32_t)cuda_f32_to_f16(hi) << 16};
    return h;
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
    __nv_bfloat162 h = {(uint32_t)cuda_f32_to_bf16(lo) | (uint32_t)cuda_f32_to_bf16(hi) << 16};
    return h;
}

/* ---- for the sampler (sample_kernels.h): double shuffles and sums, bit casts ---- */

static inline double __shfl_xor_sync(unsigned mask, double v, int o)
{
    (void)mask;
    return emu__shfl(v, (int)(threadIdx.x & 31) ^ o);
}
static inline double atomicAdd(double *p, double v)
{
    double o = *p;
    *p = o + v;
    return o;
}
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

#include "cuda/check/emu_mma.h"
#include "cuda/check/emu_int.h"

#endif
