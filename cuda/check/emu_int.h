/*
 * emu_int.h — the integer instructions of the CPU emulation (included by emu_cuda.h, whose thread
 * model it shares): __dp4a and the integer tensor-core mma.sync shapes that cuda/imma.h wraps (the
 * atomics and fences of a last-block reduction are emu_cuda.h's).
 *
 * mma.sync is a warp-wide exchange: every lane deposits its fragment registers, the warp meets at
 * its barrier, and each lane rebuilds the whole A and B tiles from the deposits by the PTX ISA's
 * fragment layouts ("Matrix Fragments for mma.m16n8k32", "… m16n8k16 with integer type") and
 * computes its own four accumulators. The deposits alternate between two buffers, so a lane that
 * runs ahead into the next mma cannot overwrite what a slower lane still reads: the next barrier
 * only opens once every lane has finished reading. A kernel that passes a wrong byte to a lane, or
 * reads a result from the wrong lane, gets a wrong product here as on the GPU.
 */
#ifndef KVSERVE_EMU_INT_H
#define KVSERVE_EMU_INT_H

#include <stdint.h>

/* ---- dp4a -------------------------------------------------------------------------------- */

/* c + Σ of the four byte products, signed × signed / unsigned × unsigned (CUDA's __dp4a). */
static inline int __dp4a(int a, int b, int c)
{
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> 8 * k) * (int)(int8_t)(b >> 8 * k);
    return c;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c)
{
    for (int k = 0; k < 4; k++) c += (a >> 8 * k & 0xFF) * (b >> 8 * k & 0xFF);
    return c;
}

/* ---- mma.sync, s8 × s8 → s32 ------------------------------------------------------------- */

static uint32_t emu_mma_a[2][1024][4], emu_mma_b[2][1024][2];
static unsigned emu_mma_parity[1024]; /* per CUDA thread: the buffer half of its next call */

/* Byte k of the 32-bit register value v, as a signed 8-bit integer. */
static inline int emu_s8(uint32_t v, int k)
{
    return (int8_t)(v >> 8 * k);
}

/* Deposits this lane's registers (na of A, nb of B) and waits for the warp; returns the buffer
 * of the call and the warp's first thread. */
static inline int emu_mma_deposit(const uint32_t *a, int na, const uint32_t *b, int nb, int *base)
{
    int t = (int)threadIdx.x, p = (int)(emu_mma_parity[t]++ & 1);
    for (int i = 0; i < na; i++) emu_mma_a[p][t][i] = a[i];
    for (int i = 0; i < nb; i++) emu_mma_b[p][t][i] = b[i];
    *base = t & ~31;
    pthread_barrier_wait(&emu_wbar[t >> 5]);
    return p;
}

/* m16n8k32: A(row, k) is in lane 4 (row % 8) + (k % 16) / 4, register (row ≥ 8) + 2 (k ≥ 16),
 * byte k % 4; B(k, col) in lane 4 col + (k % 16) / 4, register k / 16, byte k % 4. */
static inline void emu_mma_s8_16832(int c[4], const uint32_t a[4], const uint32_t b[2])
{
    int base, p = emu_mma_deposit(a, 4, b, 2, &base), lane = (int)threadIdx.x & 31;
    int g = lane >> 2, tg = lane & 3;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * tg + (i & 1);
        int32_t s = c[i];
        for (int k = 0; k < 32; k++) {
            int al = base + 4 * (row % 8) + (k % 16) / 4, ar = (row >= 8) + 2 * (k >= 16);
            int bl = base + 4 * col + (k % 16) / 4, br = k / 16;
            s = (int32_t)((uint32_t)s + (uint32_t)(emu_s8(emu_mma_a[p][al][ar], k % 4) *
                                                   emu_s8(emu_mma_b[p][bl][br], k % 4)));
        }
        c[i] = s;
    }
}

/* m16n8k16: A(row, k) in lane 4 (row % 8) + k / 4, register (row ≥ 8), byte k % 4; B(k, col) in
 * lane 4 col + k / 4, its one register, byte k % 4. */
static inline void emu_mma_s8_16816(int c[4], const uint32_t a[2], uint32_t b)
{
    int base, p = emu_mma_deposit(a, 2, &b, 1, &base), lane = (int)threadIdx.x & 31;
    int g = lane >> 2, tg = lane & 3;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * tg + (i & 1);
        int32_t s = c[i];
        for (int k = 0; k < 16; k++) {
            int al = base + 4 * (row % 8) + k / 4, bl = base + 4 * col + k / 4;
            s = (int32_t)((uint32_t)s +
                          (uint32_t)(emu_s8(emu_mma_a[p][al][row >= 8], k % 4) * emu_s8(emu_mma_b[p][bl][0], k % 4)));
        }
        c[i] = s;
    }
}

#endif
