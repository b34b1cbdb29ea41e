/*
 * mma.h — the warp-level matrix instructions of the tensor-core kernels, one inline function per
 * PTX instruction: mma.sync m16n8k16 (f16 or bf16 inputs, f32 accumulation), ldmatrix (.x1/.x2/
 * .x4, .trans), cp.async (4 or 16 bytes, zero-filling, commit_group / wait_group), and the
 * packing of two floats into a 16-bit pair. Under nvcc each is its instruction (sm_80 and later);
 * under the CPU emulation (cuda/check/emu_cuda.h, emu_mma.h) each is that emulator's model of it.
 *
 * Fragments, for lane = 4·g + t (g = lane / 4, t = lane % 4), the element of lower index in the
 * lower half of each 32-bit register (PTX ISA, "Matrix fragments for mma.m16n8k16"):
 *   A 16×16 row-major   a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
 *                       a[2] = A[g][2t+8, 2t+9] a[3] = A[g+8][2t+8, 2t+9]
 *   B 16×8 "col"        b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
 *   C, D 16×8 f32       c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
 * So the C fragments of two adjacent n8 tiles, packed to 16 bits, are the A fragment of the next
 * product (FlashAttention's P stays in registers): a = {pack(c0[0], c0[1]), pack(c0[2], c0[3]),
 * pack(c1[0], c1[1]), pack(c1[2], c1[3])}.
 * ldmatrix: lanes 8i .. 8i+7 hold the addresses of rows 0..7 of 8×8 matrix i (16-byte aligned
 * rows of 8 16-bit values in shared memory); register i of each lane gets row g, columns 2t, 2t+1
 * of matrix i, or with .trans rows 2t, 2t+1 of column g.
 *
 * Included by the tensor-core attention kernels (cuda/attn_mma_kernels.h, attn_decode_kernels.h).
 */
#ifndef KVSERVE_CUDA_MMA_H
#define KVSERVE_CUDA_MMA_H

#include <stdint.h>
#include "cuda/device.h"

/* Marks the 16-bit type of an mma's inputs. */
template <typename T16> struct cuda__mma_is_bf16 {
    static constexpr bool value = false;
};
template <> struct cuda__mma_is_bf16<__nv_bfloat16> {
    static constexpr bool value = true;
};

/* cuda__pack2<T16>(lo, hi) (cuda/device.h) makes one 32-bit register of two floats. */

#ifdef __CUDACC__

static __device__ __forceinline__ uint32_t cuda__smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* c += a · b on the tensor cores: 16×16 by 16×8, f32 accumulators. */
template <typename T16> static __device__ __forceinline__ void cuda__mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    if (cuda__mma_is_bf16<T16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* ldmatrix .x4 / .x4.trans / .x2 / .x2.trans: p is this lane's row address (see above). */
static __device__ __forceinline__ void cuda__ldsm4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(cuda__smem_addr(p)));
}
static __device__ __forceinline__ void cuda__ldsm4t(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(cuda__smem_addr(p)));
}
static __device__ __forceinline__ void cuda__ldsm2(uint32_t r[2], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(cuda__smem_addr(p)));
}
static __device__ __forceinline__ void cuda__ldsm2t(uint32_t r[2], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(cuda__smem_addr(p)));
}

/* Asynchronous global → shared copies: 16 (or 4) bytes to dst of which the first src_bytes come
 * from src and the rest are zeros (src_bytes 0: all zeros, src is not read). */
static __device__ __forceinline__ void cuda__cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cuda__smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ void cuda__cp4(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(cuda__smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ void cuda__cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most n of this thread's committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void cuda__cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#else /* the CPU emulation */

template <typename T16> static inline void cuda__mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    emu_mma_m16n8k16(c, a, b, cuda__mma_is_bf16<T16>::value);
}
static inline void cuda__ldsm4(uint32_t r[4], const void *p)
{
    emu_ldmatrix(r, 4, 0, p);
}
static inline void cuda__ldsm4t(uint32_t r[4], const void *p)
{
    emu_ldmatrix(r, 4, 1, p);
}
static inline void cuda__ldsm2(uint32_t r[2], const void *p)
{
    emu_ldmatrix(r, 2, 0, p);
}
static inline void cuda__ldsm2t(uint32_t r[2], const void *p)
{
    emu_ldmatrix(r, 2, 1, p);
}
static inline void cuda__cp16(void *dst, const void *src, int src_bytes)
{
    emu_cp_async(dst, src, 16, src_bytes);
}
static inline void cuda__cp4(void *dst, const void *src, int src_bytes)
{
    emu_cp_async(dst, src, 4, src_bytes);
}
static inline void cuda__cp_commit()
{
    emu_cp_commit();
}
template <int N> static inline void cuda__cp_wait()
{
    emu_cp_wait(N);
}

#endif

#endif
