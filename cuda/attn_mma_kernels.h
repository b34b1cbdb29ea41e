/*
 * attn_mma_kernels.h — the tensor-core prefill / mixed-step attention kernel (FlashAttention-2 over
 * the paged KV cache, mma.sync m16n8k16) and what it shares with the decode kernel
 * (attn_decode_kernels.h): the item's key range and masks, the online softmax of one warp's
 * rows, the copies of K/V rows from the pages into shared memory, and the merge of split-K
 * partitions by the last of them.
 *
 * The block: 4 warps over BR = 128 query rows (head dim ≤ 128: two m16 tiles per warp) or 64
 * (head dim 256: one), rows being (new token, query head of the kv head's group) pairs of one
 * sequence, so one K/V tile serves the whole GQA group. Q is converted once to the products'
 * 16-bit type (pre-scaled) into shared memory; K and V tiles of BC keys (64, or 32 at head dim
 * 256) are gathered from the pages with cp.async into two buffers, the next tile loading while
 * the current one is used. Per tile each warp computes S = Q Kᵀ for its rows (A fragments by
 * ldmatrix from Q, B by ldmatrix from K), masks it only where the tile crosses a row's causal limit,
 * window or partition end, updates its rows' running max and sum (the quad of lanes that hold a
 * row reduce by two shuffles), and adds P V with P taken straight from the S accumulators
 * (packed to 16 bits: the C layout of two n8 tiles is the A layout of a k16 step) and V by
 * ldmatrix.trans. int8 and e4m3 caches copy their codes and scales, and the block converts each
 * tile once to f16 in shared memory (value = code × scale, rounded once).
 *
 * Arithmetic (the tolerance the checks derive from it): Q and the dequantised values are
 * rounded to the 16-bit type, P is rounded to it before P V, every product is exact and every
 * sum f32; the softmax's sum l is taken from the unrounded P.
 *
 * Included by cuda/attn_mma.cu and cuda/check/attn_emu.cc, after the CUDA built-ins (or their
 * emulation).
 */
#ifndef KVSERVE_CUDA_ATTN_MMA_KERNELS_H
#define KVSERVE_CUDA_ATTN_MMA_KERNELS_H

#include "cuda/attn_kernels.h"
#include "cuda/attn_plan.h"
#include "cuda/device.h"
#include "cuda/kv_layout.h"
#include "cuda/mma.h"

/* ---- shared by both tensor-core kernels --------------------------------------------------- */

/* The 16-bit type the products run in: the cache's own for f16 and bf16, f16 for int8 / e4m3
 * codes times their scales. */
template <typename TKV> struct cuda__tc_t16 {
    typedef __half type;
};
template <> struct cuda__tc_t16<__nv_bfloat16> {
    typedef __nv_bfloat16 type;
};

/* One block's share of an item: rows r0 .. r0 + nr − 1 of sequence s (row = new token × gsize +
 * head within the group) and the keys [kb, ke) of partition p. */
struct cuda__tc_item {
    int s, r0, nr;
    int32_t base;       /* KV entries before the step's tokens of s */
    int32_t kb, ke;     /* this block's keys; kb is a multiple of the tile past the window start */
    int32_t n_sink;     /* leading keys met by q_sink (0: none) */
    const int32_t *bt;  /* the sequence's block-table row */
};

static __device__ __forceinline__ cuda__tc_item cuda__tc_item_at(const cuda__attn_args &a, int32_t item, int p,
                                                                 int tile)
{
    const int32_t *it = a.items + (int64_t)item * CUDA_ATTN_ITEM_INTS;
    cuda__tc_item r;
    r.s = it[0], r.r0 = it[1], r.nr = it[2];
    int32_t n_new = a.q_start[r.s + 1] - a.q_start[r.s];
    r.base = a.ctx_len[r.s] - n_new;
    int32_t tf = r.r0 / a.gsize, tl = (r.r0 + r.nr - 1) / a.gsize;
    int32_t kv_hi = r.base + tl + 1;
    int32_t k_lo = a.window > 0 && r.base + tf - a.window + 1 > 0 ? r.base + tf - a.window + 1 : 0;
    r.kb = k_lo / tile * tile + p * a.part_keys;
    r.ke = min(kv_hi, r.kb + a.part_keys);
    r.n_sink = a.sinks ? a.sinks[r.s] : 0;
    r.bt = a.block_table + (int64_t)r.s * a.bt_stride;
    return r;
}

/* Token (in q / out) and query head of row r of the block's item. */
static __device__ __forceinline__ int64_t cuda__tc_row_off(const cuda__attn_args &a, const cuda__tc_item &it, int r,
                                                           int g)
{
    int rr = it.r0 + r;
    int64_t tok = a.q_start[it.s] + rr / a.gsize;
    return (tok * a.n_heads + g * a.gsize + rr % a.gsize) * a.head_dim;
}

/* What normalises row r's output (kv head g): 1 / l, or with a learned sink logit per head
 * (gpt-oss: a.head_sinks) its share of the softmax, be_attn_sink (m the row's running max, l
 * its sum of e^(s − m)). 0 for a row that met no key and no sink. */
static __device__ __forceinline__ float cuda__tc_norm(const cuda__attn_args &a, const cuda__tc_item &it, int r, int g,
                                                      float m, float l)
{
    if (a.head_sinks) return be_attn_sink(m, l, a.head_sinks[g * a.gsize + (it.r0 + r) % a.gsize]);
    return l > 0.0f ? 1.0f / l : 0.0f;
}

/* Queues cp.async copies of the K and V rows of keys kt .. kt + ROWS − 1 (kv head g) into Kd and
 * Vd, `stride` bytes apart: each row's D × sizeof(TKV) bytes in 16-byte pieces (a multiple of 16);
 * keys ≥ ke become zeros. The loop's trip count is known and it is unrolled twice, so two
 * block-table reads are in flight together (more spills the prefill kernel's registers at head
 * dim 128). */
template <typename TKV, int D, int ROWS>
static __device__ __forceinline__ void cuda__tc_copy_rows(const cuda__attn_args &a, const TKV *kp, const TKV *vp,
                                                          const int32_t *bt, int g, int32_t kt, int32_t ke, char *Kd,
                                                          char *Vd, int stride)
{
    constexpr int CH = D * (int)sizeof(TKV) / 16, EL = 16 / (int)sizeof(TKV);
    const int64_t blk = (int64_t)a.n_kv_heads * a.tile_elems, head = (int64_t)g * a.tile_elems;
#pragma unroll 2
    for (int i = threadIdx.x; i < ROWS * CH; i += CUDA_ATTN_TC_THREADS) {
        int r = i / CH, c = i % CH;
        int32_t j = kt + r;
        const TKV *ks = kp, *vs = vp;
        int n = 0;
        if (j < ke) {
            int64_t o = (int64_t)bt[j / a.block_size] * blk + head + (int64_t)(j % a.block_size) * D + c * EL;
            ks = kp + o, vs = vp + o, n = 16;
        }
        cuda__cp16(Kd + r * stride + c * 16, ks, n);
        cuda__cp16(Vd + r * stride + c * 16, vs, n);
    }
}

/* The f16 scales of the same rows of a quantised cache, two keys per 4-byte copy (block_size is
 * even and kt a multiple of 2, so a pair never straddles a block): into Ksc, Vsc [ROWS]. */
template <typename TKV, int D, int ROWS>
static __device__ __forceinline__ void cuda__tc_copy_scales(const cuda__attn_args &a, const TKV *kp, const TKV *vp,
                                                            const int32_t *bt, int g, int32_t kt, int32_t ke,
                                                            uint16_t *Ksc, uint16_t *Vsc)
{
    const int64_t blk = (int64_t)a.n_kv_heads * a.tile_elems, head = (int64_t)g * a.tile_elems;
#pragma unroll
    for (int i = threadIdx.x; i < ROWS / 2; i += CUDA_ATTN_TC_THREADS) {
        int32_t j = kt + 2 * i;
        const TKV *ks = kp, *vs = vp;
        int n = 0;
        if (j < ke) {
            int64_t o = (int64_t)bt[j / a.block_size] * blk + head + (int64_t)a.block_size * D + 2 * (j % a.block_size);
            ks = kp + o, vs = vp + o, n = 4;
        }
        cuda__cp4(Ksc + 2 * i, ks, n);
        cuda__cp4(Vsc + 2 * i, vs, n);
    }
}

/* A quantised cache's value: code × scale. */
static __device__ __forceinline__ float cuda__tc_dq(int8_t c, float s)
{
    return (float)c * s;
}
static __device__ __forceinline__ float cuda__tc_dq(uint8_t c, float s)
{
    return kv_e4m3_decode(c) * s;
}

/* Masks the scores S of one warp's rows (MT m16 tiles from row r_first of the item; n8 tiles of
 * keys from kt): −inf where a key is past the row's causal limit, below its window, outside
 * [lo, hi) (the partition and the sink/ordinary split), or the row is past the item's. */
template <int MT, int NT>
static __device__ __forceinline__ void cuda__tc_mask(float (*S)[NT][4], const cuda__attn_args &a,
                                                     const cuda__tc_item &it, int r_first, int32_t kt, int32_t lo,
                                                     int32_t hi, int lane)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = r_first + mt * 16 + (lane >> 2) + 8 * h;
            int32_t qpos = it.base + (it.r0 + r) / a.gsize;
            int32_t rlo = a.window > 0 ? max(lo, qpos - a.window + 1) : lo, rhi = min(hi, qpos + 1);
            if (r >= it.nr) rhi = rlo; /* nothing */
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int32_t j = kt + n * 8 + 2 * (lane & 3) + e;
                    if (j < rlo || j >= rhi) S[mt][n][2 * h + e] = -INFINITY;
                }
        }
}

/* Soft-caps every score: cap · tanh(s / cap) (before masking). */
template <int MT, int NT>
static __device__ __forceinline__ void cuda__tc_softcap(float (*S)[NT][4], float cap)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[mt][n][e] = be_softcap(S[mt][n][e], cap);
}

/* The online softmax step of one warp's rows: with the tile's scores S (masked keys −inf), the
 * running max m and the lane's part of the running sum l of each row (rows g and g + 8 of each
 * m16 tile), rescales the accumulators O and turns S into P = exp(S − m). A row that has seen
 * only masked keys keeps m = −inf and contributes zeros. */
template <int MT, int NT, int DT>
static __device__ __forceinline__ void cuda__tc_softmax(float (*S)[NT][4], float (*m)[2], float (*l)[2],
                                                        float (*O)[DT][4])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NT; n++) mx = fmaxf(mx, fmaxf(S[mt][n][2 * h], S[mt][n][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mn = fmaxf(m[mt][h], mx), mu = mn == -INFINITY ? 0.0f : mn;
            float alpha = __expf(m[mt][h] - mu), sum = 0.0f;
            m[mt][h] = mn;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; e++) {
                    float pv = __expf(S[mt][n][e] - mu);
                    S[mt][n][e] = pv;
                    sum += pv;
                }
            l[mt][h] = l[mt][h] * alpha + sum;
#pragma unroll
            for (int d = 0; d < DT; d++) {
                O[mt][d][2 * h] *= alpha;
                O[mt][d][2 * h + 1] *= alpha;
            }
        }
}

/* The A fragment of P for keys 16k .. 16k + 15 from the S accumulators of n8 tiles 2k, 2k + 1. */
template <typename T16>
static __device__ __forceinline__ void cuda__tc_pfrag(uint32_t pa[4], const float *s0, const float *s1)
{
    pa[0] = cuda__pack2<T16>(s0[0], s0[1]);
    pa[1] = cuda__pack2<T16>(s0[2], s0[3]);
    pa[2] = cuda__pack2<T16>(s1[0], s1[1]);
    pa[3] = cuda__pack2<T16>(s1[2], s1[3]);
}

/* Stores a normalised pair of outputs (d, d + 1) of TQ. */
static __device__ __forceinline__ void cuda__tc_st2(float *p, float x, float y)
{
    *(float2 *)p = make_float2(x, y);
}
static __device__ __forceinline__ void cuda__tc_st2(__half *p, float x, float y)
{
    *(uint32_t *)p = cuda__pack2<__half>(x, y);
}
static __device__ __forceinline__ void cuda__tc_st2(__nv_bfloat16 *p, float x, float y)
{
    *(uint32_t *)p = cuda__pack2<__nv_bfloat16>(x, y);
}

/* After a block has written its partition's partials (record `rec` of `rows` rows), the last
 * partition of (item, kv head g) to finish merges all of them into out (TQ) and resets the
 * counter. Every thread of the block calls it. */
template <typename TQ, int D>
static __device__ void cuda__tc_merge_splits(const cuda__attn_args &a, const cuda__tc_item &it, int32_t item, int g,
                                             int rows)
{
    static __shared__ int last;
    __threadfence(); /* this block's partials are visible before its count */
    __syncthreads();
    int32_t *sem = a.sem + (int64_t)item * a.n_kv_heads + g;
    if (threadIdx.x == 0) {
        last = atomicAdd(sem, 1) == a.splits - 1;
        if (last) *sem = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float *rec = a.tc_part + ((int64_t)item * a.n_kv_heads + g) * a.splits * rows * (D + 2);
    for (int i = threadIdx.x; i < it.nr * D; i += blockDim.x) {
        int r = i / D, d = i % D;
        float m = -INFINITY, l = 0.0f, o = 0.0f;
        for (int p = 0; p < a.splits; p++) {
            const float *x = rec + ((int64_t)p * rows + r) * (D + 2);
            float ca, cb;
            m = cuda_softmax_merge(m, &l, __ldcg(x + D), __ldcg(x + D + 1), &ca, &cb);
            o = o * ca + __ldcg(x + d) * cb;
        }
        ((TQ *)a.out)[cuda__tc_row_off(a, it, r, g) + d] = cuda__st<TQ>(o * cuda__tc_norm(a, it, r, g, m, l));
    }
}

/* ---- the prefill kernel ------------------------------------------------------------------- */

/* Q rows of the block (its item's, zeros past them) as T16 pairs, pre-scaled, into Qs [BR][D + 8]. */
template <typename TQ, typename T16, int D, int BR>
static __device__ __forceinline__ void cuda__pf_load_q(const cuda__attn_args &a, const TQ *q, T16 *Qs,
                                                       const cuda__tc_item &it, int g)
{
    constexpr int DS = D + 8;
    for (int i = threadIdx.x; i < BR * (D / 2); i += CUDA_ATTN_TC_THREADS) {
        int r = i / (D / 2), d = 2 * (i % (D / 2));
        float x = 0.0f, y = 0.0f;
        if (r < it.nr) {
            const TQ *p = q + cuda__tc_row_off(a, it, r, g) + d;
            x = cuda__ld(p[0]) * a.scale, y = cuda__ld(p[1]) * a.scale;
        }
        *(uint32_t *)(Qs + r * DS + d) = cuda__pack2<T16>(x, y);
    }
}

/* Converts a staged quantised tile (codes rows of D + 16 bytes, scales) into f16 rows of D + 8:
 * keys ≥ ke become zeros. */
template <typename TKV, int D, int BC>
static __device__ __forceinline__ void cuda__pf_dequant(const uint8_t *codes, const uint16_t *sc, __half *dst,
                                                        int32_t kt, int32_t ke)
{
#pragma unroll 2
    for (int i = threadIdx.x; i < BC * (D / 8); i += CUDA_ATTN_TC_THREADS) {
        int r = i / (D / 8), c = 8 * (i % (D / 8));
        float s = kt + r < ke ? cuda_f16_to_f32(sc[r]) : 0.0f;
        const TKV *x = (const TKV *)(codes + r * (D + 16) + c);
        uint4 v;
        v.x = cuda__pack2<__half>(cuda__tc_dq(x[0], s), cuda__tc_dq(x[1], s));
        v.y = cuda__pack2<__half>(cuda__tc_dq(x[2], s), cuda__tc_dq(x[3], s));
        v.z = cuda__pack2<__half>(cuda__tc_dq(x[4], s), cuda__tc_dq(x[5], s));
        v.w = cuda__pack2<__half>(cuda__tc_dq(x[6], s), cuda__tc_dq(x[7], s));
        *(uint4 *)(dst + r * (D + 8) + c) = v;
    }
}

/* S [MT][BC / 8] = Q Kᵀ for one warp's rows: Qw its first Q row, Kt the tile (rows of D + 8). */
template <typename T16, int D, int MT, int BC>
static __device__ __forceinline__ void cuda__pf_qk(float (*S)[BC / 8][4], const T16 *Qw, const T16 *Kt, int lane)
{
    constexpr int DS = D + 8;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < BC / 8; n++) S[mt][n][0] = S[mt][n][1] = S[mt][n][2] = S[mt][n][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {
        uint32_t qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) cuda__ldsm4(qa[mt], Qw + (mt * 16 + (lane & 15)) * DS + kc * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int nn = 0; nn < BC / 16; nn++) {
            /* matrix i = lane / 8: keys 16 nn + 8 (i >> 1) + lane % 8, dims 16 kc + 8 (i & 1) */
            uint32_t kb[4];
            cuda__ldsm4(kb, Kt + (nn * 16 + (lane >> 4) * 8 + (lane & 7)) * DS + kc * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                cuda__mma<T16>(S[mt][2 * nn], qa[mt], kb);
                cuda__mma<T16>(S[mt][2 * nn + 1], qa[mt], kb + 2);
            }
        }
    }
}

/* O [MT][D / 8] += P V for one warp's rows: P in S (BC keys), Vt the tile (rows of D + 8). */
template <typename T16, int D, int MT, int BC>
static __device__ __forceinline__ void cuda__pf_pv(float (*O)[D / 8][4], float (*S)[BC / 8][4], const T16 *Vt,
                                                   int lane)
{
    constexpr int DS = D + 8;
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) cuda__tc_pfrag<T16>(pa[mt], S[mt][2 * kk], S[mt][2 * kk + 1]);
#pragma unroll
        for (int dd = 0; dd < D / 16; dd++) {
            /* matrix i = lane / 8, transposed: keys 16 kk + 8 (i & 1) + lane % 8, dims 16 dd + 8 (i >> 1) */
            uint32_t vb[4];
            cuda__ldsm4t(vb, Vt + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * DS + dd * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                cuda__mma<T16>(O[mt][2 * dd], pa[mt], vb);
                cuda__mma<T16>(O[mt][2 * dd + 1], pa[mt], vb + 2);
            }
        }
    }
}

/* Writes one warp's rows: normalised into out (one partition), or as partials into the
 * partition's record of BR rows. */
template <typename TQ, int D, int MT, int BR>
static __device__ __forceinline__ void cuda__pf_store(const cuda__attn_args &a, const cuda__tc_item &it, int32_t item,
                                                      int g, int p, int r_first, float (*O)[D / 8][4], float (*m)[2],
                                                      float (*l)[2], int lane)
{
    float *rec = a.tc_part + (((int64_t)item * a.n_kv_heads + g) * a.splits + p) * BR * (D + 2);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = r_first + mt * 16 + (lane >> 2) + 8 * h;
            float lr = l[mt][h];
            lr += __shfl_xor_sync(0xffffffffu, lr, 1);
            lr += __shfl_xor_sync(0xffffffffu, lr, 2);
            if (r >= it.nr) continue;
            if (a.splits == 1) {
                TQ *o = (TQ *)a.out + cuda__tc_row_off(a, it, r, g);
                float inv = cuda__tc_norm(a, it, r, g, m[mt][h], lr);
#pragma unroll
                for (int n = 0; n < D / 8; n++)
                    cuda__tc_st2(o + n * 8 + 2 * (lane & 3), O[mt][n][2 * h] * inv, O[mt][n][2 * h + 1] * inv);
            } else {
                float *x = rec + (int64_t)r * (D + 2);
#pragma unroll
                for (int n = 0; n < D / 8; n++)
                    *(float2 *)(x + n * 8 + 2 * (lane & 3)) = make_float2(O[mt][n][2 * h], O[mt][n][2 * h + 1]);
                if ((lane & 3) == 0) x[D] = m[mt][h], x[D + 1] = lr;
            }
        }
}

/* The prefill / mixed-step kernel: grid (splits, n_kv_heads, items), CUDA_ATTN_TC_THREADS
 * threads, cuda_attn_pf_smem bytes of dynamic shared memory. Items are taken last first (a
 * sequence's later rows see more keys). */
template <typename TKV, typename TQ, int D>
static __global__ void __launch_bounds__(CUDA_ATTN_TC_THREADS)
cuda__attn_pf_k(cuda__attn_args a, const TKV *kp, const TKV *vp)
{
    typedef typename cuda__tc_t16<TKV>::type T16;
    constexpr int BR = CUDA_ATTN_PF_BR(D), BC = CUDA_ATTN_PF_BC(D), MT = BR / 64, DS = D + 8;
    constexpr bool QUANT = cuda__kv_quant<TKV>::value;
    extern __shared__ float sm[];
    const int32_t item = a.n_items - 1 - (int32_t)blockIdx.z;
    const int g = blockIdx.y, p = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const cuda__tc_item it = cuda__tc_item_at(a, item, p, BC);

    T16 *Qs = (T16 *)sm, *Qk = Qs + BR * DS; /* Qk: the sink queries, with sinks */
    char *buf = (char *)(a.sinks ? Qk + BR * DS : Qk);
    /* non-quantised: K[2], V[2] tiles; quantised: staged codes and scales [2], then one f16 K, V */
    constexpr int RAW = 2 * BC * (D + 16) + 4 * BC, TILE = 2 * BC * DS * 2; /* bytes per stage */
    T16 *Kh = QUANT ? (T16 *)(buf + 2 * RAW) : (T16 *)buf;
    T16 *Vh = Kh + BC * DS;
    cuda__pf_load_q<TQ, T16, D, BR>(a, (const TQ *)a.q, Qs, it, g);
    if (a.sinks && it.n_sink > it.kb) cuda__pf_load_q<TQ, T16, D, BR>(a, (const TQ *)a.q_sink, Qk, it, g);

    float O[MT][D / 8][4], m[MT][2], l[MT][2], S[MT][BC / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < D / 8; n++) O[mt][n][0] = O[mt][n][1] = O[mt][n][2] = O[mt][n][3] = 0.0f;
    }
    const int r_first = w * 16 * MT;
    /* rows of this block all see keys up to (and including) the first row's position, and from
     * the last row's window start: tiles inside both need no mask */
    const int32_t all_hi = it.base + it.r0 / a.gsize + 1;
    const int32_t all_lo = a.window > 0 ? it.base + (it.r0 + it.nr - 1) / a.gsize - a.window + 1 : 0;
    const int n_tiles = it.kb < it.ke ? (int)cuda_div_up(it.ke - it.kb, BC) : 0;

    auto issue = [&](int t) {
        int32_t kt = it.kb + t * BC;
        char *st = buf + (t & 1) * (QUANT ? RAW : TILE);
        if constexpr (QUANT) {
            cuda__tc_copy_rows<TKV, D, BC>(a, kp, vp, it.bt, g, kt, it.ke, st, st + BC * (D + 16), D + 16);
            cuda__tc_copy_scales<TKV, D, BC>(a, kp, vp, it.bt, g, kt, it.ke, (uint16_t *)(st + 2 * BC * (D + 16)),
                                             (uint16_t *)(st + 2 * BC * (D + 16) + 2 * BC));
        } else {
            cuda__tc_copy_rows<TKV, D, BC>(a, kp, vp, it.bt, g, kt, it.ke, st, st + BC * DS * 2, DS * 2);
        }
        cuda__cp_commit();
    };
    if (n_tiles > 0) issue(0);
    for (int t = 0; t < n_tiles; t++) {
        const int32_t kt = it.kb + t * BC;
        cuda__cp_wait<0>();
        __syncthreads(); /* tile t is in; every warp is done with tile t − 1 */
        if (t + 1 < n_tiles) issue(t + 1);
        const T16 *Kt, *Vt;
        if constexpr (QUANT) {
            const char *st = buf + (t & 1) * RAW;
            const uint16_t *sc = (const uint16_t *)(st + 2 * BC * (D + 16));
            cuda__pf_dequant<TKV, D, BC>((const uint8_t *)st, sc, (__half *)Kh, kt, it.ke);
            cuda__pf_dequant<TKV, D, BC>((const uint8_t *)st + BC * (D + 16), sc + BC, (__half *)Vh, kt, it.ke);
            __syncthreads();
            Kt = Kh, Vt = Vh;
        } else {
            Kt = (const T16 *)(buf + (t & 1) * TILE);
            Vt = Kt + BC * DS;
        }
        /* one pass, or two over a tile that holds sink keys: the sinks' with q_sink first */
        const int sink_pass = kt < it.n_sink, passes = sink_pass && kt + BC > it.n_sink ? 2 : 1;
        for (int ps = 0; ps < passes; ps++) {
            const bool sink = sink_pass && ps == 0;
            int32_t lo = sink || !sink_pass ? it.kb : it.n_sink, hi = sink ? min(it.ke, it.n_sink) : it.ke;
            if (r_first < it.nr) {
                cuda__pf_qk<T16, D, MT, BC>(S, (sink ? Qk : Qs) + r_first * DS, Kt, lane);
                if (a.softcap > 0.0f) cuda__tc_softcap<MT, BC / 8>(S, a.softcap);
                if (sink_pass || kt + BC > min(all_hi, it.ke) || kt < all_lo)
                    cuda__tc_mask<MT, BC / 8>(S, a, it, r_first, kt, lo, hi, lane);
                cuda__tc_softmax<MT, BC / 8, D / 8>(S, m, l, O);
                cuda__pf_pv<T16, D, MT, BC>(O, S, Vt, lane);
            }
        }
    }
    cuda__pf_store<TQ, D, MT, BR>(a, it, item, g, p, r_first, O, m, l, lane);
    if (a.splits > 1) cuda__tc_merge_splits<TQ, D>(a, it, item, g, BR);
}

#endif
