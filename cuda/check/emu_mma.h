/*
 * emu_mma.h — the warp-level matrix instructions of 16-bit floats on the CPU emulation of
 * cuda/check/emu_cuda.h (which includes this file at its end): mma.sync.m16n8k16 with f16 or bf16
 * inputs and f32 accumulation, ldmatrix (.x1/.x2/.x4, with and without .trans) and cp.async
 * (commit_group / wait_group). cuda/mma.h calls these under the emulation, one PTX instruction
 * each under nvcc.
 *
 * Every lane's fragment is exactly the one the PTX ISA assigns it (section "Matrix fragments for
 * mma.m16n8k16", .f16/.bf16, and "Warp-level matrix load instruction: ldmatrix"): with lane =
 * 4·g + t (g = lane / 4, t = lane % 4) and the element of lower index in the lower half of each
 * 32-bit register,
 *   A 16×16 (row):  a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
 *                   a[2] = A[g][2t+8, 2t+9] a[3] = A[g+8][2t+8, 2t+9]
 *   B 16×8 (col):   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
 *   C, D 16×8 f32:  c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
 *   ldmatrix:       lanes 8i .. 8i+7 give the addresses of rows 0..7 of matrix i; register i of
 *                   each lane gets row g, columns 2t, 2t+1 of matrix i (.trans: rows 2t, 2t+1 of
 *                   column g).
 * The layout functions below are the one place that states these; the mma and ldmatrix models
 * and their self-test (emu_mma_selftest) use them. The product is exact (a 16-bit float times a
 * 16-bit float fits in a double) and the sum of the 16 products and C is rounded once to f32:
 * the GPU's tensor cores add with at least f32 precision too, so they differ from this by a few
 * f32 ulps, far below any tolerance the kernels' 16-bit inputs call for.
 *
 * cp.async copies are queued per thread and made when the thread waits for their group
 * (cp.async.wait_group N: every committed group but the newest N), never before: a kernel that
 * reads shared memory before waiting reads stale data, every time. A thread's copies still
 * pending at the end of a block are dropped.
 */
#ifndef KVSERVE_EMU_MMA_H
#define KVSERVE_EMU_MMA_H

/* ---- the fragment layouts (PTX ISA, m16n8k16 with 16-bit inputs) ----------------------------- */

/* Where element (row, col) of A [16][16] lives: lane, register (0..3) and half (0 low, 1 high). */
static inline void emu_mma_a_at(int row, int col, int *lane, int *reg, int *half)
{
    *lane = (row & 7) * 4 + (col & 7) / 2;
    *reg = (row >> 3) + 2 * (col >> 3);
    *half = col & 1;
}

/* Where element (k, n) of B [16][8] lives (registers 0..1). */
static inline void emu_mma_b_at(int k, int n, int *lane, int *reg, int *half)
{
    *lane = n * 4 + (k & 7) / 2;
    *reg = k >> 3;
    *half = k & 1;
}

/* Where element (row, col) of C or D [16][8] lives: lane and index (0..3). */
static inline void emu_mma_c_at(int row, int col, int *lane, int *idx)
{
    *lane = (row & 7) * 4 + col / 2;
    *idx = 2 * (row >> 3) + (col & 1);
}

static inline double emu__h16(uint32_t reg, int half, int bf16)
{
    uint16_t b = (uint16_t)(half ? reg >> 16 : reg);
    return bf16 ? (double)cuda_bf16_to_f32(b) : (double)cuda_f16_to_f32(b);
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c with d = c (in place). */
static inline void emu_mma_m16n8k16(float c[4], const uint32_t a[4], const uint32_t b[2], int bf16)
{
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const unsigned char *w = emu_warp_exchange(mine, sizeof mine);
    int lane = (int)(threadIdx.x & 31);
    for (int i = 0; i < 4; i++) {
        int row = lane / 4 + 8 * (i >> 1), col = 2 * (lane % 4) + (i & 1);
        double acc = 0;
        for (int k = 0; k < 16; k++) {
            int la, ra, ha, lb, rb, hb;
            emu_mma_a_at(row, k, &la, &ra, &ha);
            emu_mma_b_at(k, col, &lb, &rb, &hb);
            uint32_t av, bv;
            memcpy(&av, w + 64 * la + 4 * ra, 4);
            memcpy(&bv, w + 64 * lb + 4 * (4 + rb), 4);
            acc += emu__h16(av, ha, bf16) * emu__h16(bv, hb, bf16);
        }
        c[i] = (float)((double)c[i] + acc);
    }
}

/* ldmatrix.sync.aligned.m8n8.x{n}{.trans}.shared.b16 r, [p]: n = 1, 2 or 4 matrices. */
static inline void emu_ldmatrix(uint32_t *r, int n, int trans, const void *p)
{
    const unsigned char *w = emu_warp_exchange(&p, sizeof p);
    int lane = (int)(threadIdx.x & 31), g = lane / 4, t = lane % 4;
    for (int i = 0; i < n; i++) {
        uint16_t e[2];
        for (int j = 0; j < 2; j++) {
            const unsigned char *row;
            int col;
            if (trans) { /* row 2t + j of the matrix, column g */
                memcpy(&row, w + 64 * (8 * i + 2 * t + j), sizeof row);
                col = g;
            } else {
                memcpy(&row, w + 64 * (8 * i + g), sizeof row);
                col = 2 * t + j;
            }
            memcpy(&e[j], row + 2 * col, 2);
        }
        r[i] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
}

/* ---- cp.async --------------------------------------------------------------------------------- */

struct emu__copy {
    void *dst;
    const void *src;
    int n, src_n; /* bytes copied: src_n from src, then zeros up to n */
};
struct emu__copies {
    std::vector<emu__copy> pending; /* issued, oldest first */
    std::vector<size_t> groups;     /* committed groups: the end of each in pending */
};
static emu__copies emu__cp[EMU_MAX_THREADS];

/* cp.async.{ca,cg}.shared.global [dst], [src], n, src_n. */
static inline void emu_cp_async(void *dst, const void *src, int n, int src_n)
{
    if (((uintptr_t)dst | (uintptr_t)(src_n ? src : dst)) % (unsigned)n) {
        fprintf(stderr, "emu_cuda: cp.async of %d bytes from %p to %p is not aligned\n", n, src, dst);
        abort();
    }
    emu__copy c = {dst, src, n, src_n};
    emu__cp[threadIdx.x].pending.push_back(c);
}

static inline void emu_cp_commit()
{
    emu__copies &q = emu__cp[threadIdx.x];
    q.groups.push_back(q.pending.size());
}

/* cp.async.wait_group n: makes every committed group but the newest n. */
static inline void emu_cp_wait(int n)
{
    emu__copies &q = emu__cp[threadIdx.x];
    if ((int)q.groups.size() <= n) return;
    size_t upto = q.groups[q.groups.size() - 1 - n];
    for (size_t i = 0; i < upto; i++) {
        const emu__copy &c = q.pending[i];
        memcpy(c.dst, c.src, (size_t)c.src_n);
        memset((char *)c.dst + c.src_n, 0, (size_t)(c.n - c.src_n));
    }
    q.pending.erase(q.pending.begin(), q.pending.begin() + (std::ptrdiff_t)upto);
    q.groups.erase(q.groups.begin(), q.groups.end() - n);
    for (size_t &e : q.groups) e -= upto;
}

static void emu__block_end()
{
    emu__copies &q = emu__cp[threadIdx.x];
    q.pending.clear();
    q.groups.clear();
}

/* ---- self-test of the models against the layouts ------------------------------------------- */

/* Runs on one warp (call it from an emulated kernel of 32 threads): an mma of random f16 and bf16
 * matrices distributed by the layout functions, against the plain product, and ldmatrix (.x4,
 * plain and transposed) of four 8×8 matrices against their elements. Returns 0 when all agree
 * (every lane must call it). */
static int emu_mma_selftest(unsigned seed)
{
    static uint16_t A[16][16], B[16][8], M[4][8][8];
    static float C[16][8];
    int lane = (int)(threadIdx.x & 31), bad = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        if (lane == 0) {
            unsigned s = seed * 2654435761u + (unsigned)bf16;
            for (int i = 0; i < 16 * 16 + 16 * 8 + 16 * 8; i++) {
                s = s * 1103515245u + 12345u;
                float v = (float)((int)(s >> 16) % 2001 - 1000) / 256.0f;
                uint16_t h = bf16 ? cuda_f32_to_bf16(v) : cuda_f32_to_f16(v);
                if (i < 256) A[i / 16][i % 16] = h;
                else if (i < 384) B[(i - 256) / 8][(i - 256) % 8] = h;
                else C[(i - 384) / 8][(i - 384) % 8] = v;
            }
        }
        emu_warp_barrier();
        uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
        float c[4];
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 16; k++) {
                int l, rg, h;
                emu_mma_a_at(r, k, &l, &rg, &h);
                if (l == lane) a[rg] |= (uint32_t)A[r][k] << (16 * h);
            }
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) {
                int l, rg, h;
                emu_mma_b_at(k, n, &l, &rg, &h);
                if (l == lane) b[rg] |= (uint32_t)B[k][n] << (16 * h);
            }
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                int l, i;
                emu_mma_c_at(r, n, &l, &i);
                if (l == lane) c[i] = C[r][n];
            }
        emu_mma_m16n8k16(c, a, b, bf16);
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                int l, i;
                emu_mma_c_at(r, n, &l, &i);
                if (l != lane) continue;
                double want = C[r][n];
                for (int k = 0; k < 16; k++)
                    want += (bf16 ? (double)cuda_bf16_to_f32(A[r][k]) : (double)cuda_f16_to_f32(A[r][k])) *
                            (bf16 ? (double)cuda_bf16_to_f32(B[k][n]) : (double)cuda_f16_to_f32(B[k][n]));
                if (fabs(c[i] - want) > 1e-6 * (1 + fabs(want))) bad = 1;
            }
        emu_warp_barrier();
    }
    if (lane == 0)
        for (int i = 0; i < 4 * 64; i++) M[i / 64][i / 8 % 8][i % 8] = (uint16_t)(seed + 7 * i);
    emu_warp_barrier();
    for (int trans = 0; trans < 2; trans++) {
        uint32_t r[4];
        emu_ldmatrix(r, 4, trans, &M[lane / 8][lane % 8][0]);
        int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 2; j++) {
                uint16_t want = trans ? M[i][2 * t + j][g] : M[i][g][2 * t + j];
                if ((uint16_t)(r[i] >> (16 * j)) != want) bad = 1;
            }
    }
    return bad;
}

#endif
