/*
 * attn_decode_kernels.h — the tensor-core decode attention kernel: the rows of a step's short
 * items (a decoding sequence's new tokens × its GQA group ≤ 16 query rows) against their whole
 * context, split over the GPU (split-K) so that one long sequence fills it as well as many short
 * ones, each K/V byte read from the pages once per step.
 *
 * The block: one item's ≤ 16 rows (one m16 tile: every warp holds the same queries) and one kv
 * head, over one partition of the keys. The keys stream through shared memory in stages of 64
 * (cp.async, 16-byte pieces, DEC_STAGES deep so that enough bytes are in flight to cover the
 * memory's latency); each warp takes 16 keys of every stage, keeps its own online softmax, and the
 * four warps' states are merged at the end, then (split-K) the partitions' by the last of them to
 * finish (cuda__tc_merge_splits): no second kernel.
 *
 * The warp reads its K and V fragments from shared memory with plain 16-, 8- or 4-byte loads,
 * not ldmatrix, so that int8 and e4m3 codes are decoded in registers (value = code × its row's
 * scale, rounded to f16) and cost their own bytes: half of f16's. This works because of two
 * permutations that leave the result unchanged: the head dimension summed by Q Kᵀ is permuted
 * so that lane (g, t) holds whole 16-byte runs of its key's row (chunks t, t + 4, t + 8 … of
 * the row), the same permutation applied to Q (laid out once in fragment order, Qf); and the
 * output dimension of P V is permuted so that lane g's B fragments are one contiguous run of
 * D / 8 values of each of its four key rows (n8 tile j, column g ↔ dimension g · D/8 + j), which
 * the output store undoes. S's C fragments become P's A fragment in registers as in the prefill
 * kernel.
 *
 * Arithmetic as in the prefill kernel (attn_mma_kernels.h): 16-bit Q, dequantised values and P,
 * exact products, f32 sums.
 *
 * Included by cuda/attn_decode.cu and cuda/check/attn_emu.cc, after the CUDA built-ins (or their
 * emulation).
 */
#ifndef KVSERVE_CUDA_ATTN_DECODE_KERNELS_H
#define KVSERVE_CUDA_ATTN_DECODE_KERNELS_H

#include "cuda/attn_mma_kernels.h"

/* The decode kernel's shapes for cache type TKV and head dim D: the K run of a lane (D / 4
 * values per key row, in chunks of CBK bytes), its V run (D / 8 values per key row, in chunks of
 * CBV bytes), the stage's row stride and size in bytes. */
template <typename TKV, int D> struct cuda__dec_shape {
    static constexpr int ES = (int)sizeof(TKV);
    static constexpr int CBK = (D / 4 * ES) % 16 == 0 ? 16 : 8;
    static constexpr int ECK = CBK / ES, NCK = D / 4 / ECK;
    static constexpr int VE = D / 8;
    static constexpr int CBV = (VE * ES) % 16 == 0 ? 16 : (VE * ES) % 8 == 0 ? 8 : 4;
    static constexpr int ECV = CBV / ES, NCV = VE / ECV;
    static constexpr int RS = D * ES + 16;
    static constexpr int STAGE = 2 * CUDA_ATTN_DEC_BC * RS + (ES == 1 ? 4 * CUDA_ATTN_DEC_BC : 0);
    static_assert((D / 4 * ES) % CBK == 0 && (VE * ES) % CBV == 0 && ECK % 4 == 0,
                  "a lane's K and V runs must be whole chunks of whole k16 steps");
};

/* CB bytes of shared memory at p (CB-aligned) into w[CB / 4]. */
template <int CB> static __device__ __forceinline__ void cuda__lds(uint32_t *w, const char *p)
{
    if (CB == 16) {
        uint4 v = *(const uint4 *)p;
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else if (CB == 8) {
        uint2 v = *(const uint2 *)p;
        w[0] = v.x, w[1] = v.y;
    } else {
        w[0] = *(const uint32_t *)p;
    }
}

/* Byte e of the words w as a code of type T. */
template <typename T> static __device__ __forceinline__ T cuda__byte(const uint32_t *w, int e)
{
    return (T)(uint8_t)(w[e >> 2] >> (8 * (e & 3)));
}

/* The B fragment of Q Kᵀ for k16 step kk of a K chunk held in w (scale: its row's, quantised). */
template <typename TKV, typename T16>
static __device__ __forceinline__ void cuda__dec_kfrag(const uint32_t *w, int kk, float scale, uint32_t b[2])
{
    if constexpr (cuda__kv_quant<TKV>::value) {
        b[0] = cuda__pack2<T16>(cuda__tc_dq(cuda__byte<TKV>(w, 4 * kk), scale),
                                cuda__tc_dq(cuda__byte<TKV>(w, 4 * kk + 1), scale));
        b[1] = cuda__pack2<T16>(cuda__tc_dq(cuda__byte<TKV>(w, 4 * kk + 2), scale),
                                cuda__tc_dq(cuda__byte<TKV>(w, 4 * kk + 3), scale));
    } else {
        b[0] = w[2 * kk], b[1] = w[2 * kk + 1];
    }
}

/* The B fragment of P V for value e of the V chunks of key rows 2t, 2t + 1, 2t + 8, 2t + 9 held
 * in v[0..3] (scales sc[0..3], quantised). */
template <typename TKV, typename T16, int CW>
static __device__ __forceinline__ void cuda__dec_vfrag(const uint32_t (*v)[CW], int e, const float *sc, uint32_t b[2])
{
    if constexpr (cuda__kv_quant<TKV>::value) {
        b[0] = cuda__pack2<T16>(cuda__tc_dq(cuda__byte<TKV>(v[0], e), sc[0]), cuda__tc_dq(cuda__byte<TKV>(v[1], e), sc[1]));
        b[1] = cuda__pack2<T16>(cuda__tc_dq(cuda__byte<TKV>(v[2], e), sc[2]), cuda__tc_dq(cuda__byte<TKV>(v[3], e), sc[3]));
    } else {
        unsigned sel = e & 1 ? 0x7632u : 0x5410u;
        b[0] = __byte_perm(v[0][e >> 1], v[1][e >> 1], sel);
        b[1] = __byte_perm(v[2][e >> 1], v[3][e >> 1], sel);
    }
}

/* The block's query rows (pre-scaled, zeros past the item's) in fragment order: Qf[kc][lane][4],
 * with the head dimension permuted as the K runs are (see the top of this file). */
template <typename TQ, typename T16, typename TKV, int D>
static __device__ __forceinline__ void cuda__dec_load_q(const cuda__attn_args &a, const TQ *q, uint32_t *Qf,
                                                        const cuda__tc_item &it, int g)
{
    typedef cuda__dec_shape<TKV, D> SH;
    for (int e = threadIdx.x; e < D / 16 * 128; e += CUDA_ATTN_TC_THREADS) {
        int kc = e >> 7, ln = (e >> 2) & 31, reg = e & 3, t = ln & 3;
        int r = (ln >> 2) + 8 * (reg & 1), mm = 4 * kc + 2 * (reg >> 1);
        int d = ((mm / SH::ECK) * 4 + t) * SH::ECK + mm % SH::ECK;
        float x = 0.0f, y = 0.0f;
        if (r < it.nr) {
            const TQ *pq = q + cuda__tc_row_off(a, it, r, g) + d;
            x = cuda__ld(pq[0]) * a.scale, y = cuda__ld(pq[1]) * a.scale;
        }
        Qf[e] = cuda__pack2<T16>(x, y);
    }
}

/* S[2][4] = Q Kᵀ of one warp's 16 keys (rows Kw, RS bytes apart; ksc their scales, quantised). */
template <typename TKV, typename T16, int D>
static __device__ __forceinline__ void cuda__dec_qk(float (*S)[4], const uint32_t *Qf, const char *Kw,
                                                    const uint16_t *ksc, int lane)
{
    typedef cuda__dec_shape<TKV, D> SH;
    const int g = lane >> 2, t = lane & 3;
    float s0 = 1.0f, s1 = 1.0f;
    if (cuda__kv_quant<TKV>::value) s0 = cuda_f16_to_f32(ksc[g]), s1 = cuda_f16_to_f32(ksc[8 + g]);
#pragma unroll
    for (int n = 0; n < 2; n++) S[n][0] = S[n][1] = S[n][2] = S[n][3] = 0.0f;
#pragma unroll
    for (int i = 0; i < SH::NCK; i++) {
        uint32_t k0[SH::CBK / 4], k1[SH::CBK / 4];
        cuda__lds<SH::CBK>(k0, Kw + g * SH::RS + (i * 4 + t) * SH::CBK);
        cuda__lds<SH::CBK>(k1, Kw + (8 + g) * SH::RS + (i * 4 + t) * SH::CBK);
#pragma unroll
        for (int kk = 0; kk < SH::ECK / 4; kk++) {
            uint4 q = *(const uint4 *)(Qf + ((i * (SH::ECK / 4) + kk) * 32 + lane) * 4);
            uint32_t qa[4] = {q.x, q.y, q.z, q.w}, b[2];
            cuda__dec_kfrag<TKV, T16>(k0, kk, s0, b);
            cuda__mma<T16>(S[0], qa, b);
            cuda__dec_kfrag<TKV, T16>(k1, kk, s1, b);
            cuda__mma<T16>(S[1], qa, b);
        }
    }
}

/* O [D / 8] += P V for one warp's 16 keys: P in S, V rows Vw (RS bytes apart; vsc their scales). */
template <typename TKV, typename T16, int D>
static __device__ __forceinline__ void cuda__dec_pv(float (*O)[4], float (*S)[4], const char *Vw,
                                                    const uint16_t *vsc, int lane)
{
    typedef cuda__dec_shape<TKV, D> SH;
    const int g = lane >> 2, t = lane & 3;
    uint32_t pa[4];
    cuda__tc_pfrag<T16>(pa, S[0], S[1]);
    float sc[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    if (cuda__kv_quant<TKV>::value)
        for (int k = 0; k < 4; k++) sc[k] = cuda_f16_to_f32(vsc[2 * t + (k & 1) + 8 * (k >> 1)]);
#pragma unroll
    for (int i = 0; i < SH::NCV; i++) {
        uint32_t v[4][SH::CBV / 4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            cuda__lds<SH::CBV>(v[k], Vw + (2 * t + (k & 1) + 8 * (k >> 1)) * SH::RS + g * SH::VE * SH::ES + i * SH::CBV);
#pragma unroll
        for (int e = 0; e < SH::ECV; e++) {
            uint32_t b[2];
            cuda__dec_vfrag<TKV, T16, SH::CBV / 4>(v, e, sc, b);
            cuda__mma<T16>(O[i * SH::ECV + e], pa, b);
        }
    }
}

/* Merges the four warps' states through W [4][16][D + 2] (shared memory no longer used by the
 * stages), undoing the output permutation, and writes the rows: normalised into out, or as the
 * partition's partials followed by the merge of the partitions. */
template <typename TQ, int D>
static __device__ void cuda__dec_finish(const cuda__attn_args &a, const cuda__tc_item &it, int32_t item, int g, int p,
                                        float (*O)[4], float *m, float *l, float *W, int lane, int w)
{
    constexpr int VE = D / 8, RW = D + 2;
    const int gg = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float lr = l[h];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        float *x = W + (w * 16 + gg + 8 * h) * RW;
#pragma unroll
        for (int j = 0; j < VE; j++) {
            x[2 * t * VE + j] = O[j][2 * h];
            x[(2 * t + 1) * VE + j] = O[j][2 * h + 1];
        }
        if (t == 0) x[D] = m[h], x[D + 1] = lr;
    }
    __syncthreads();
    float *rec = a.tc_part + (((int64_t)item * a.n_kv_heads + g) * a.splits + p) * 16 * RW;
    for (int i = threadIdx.x; i < it.nr * D; i += blockDim.x) {
        int r = i / D, d = i % D;
        float mm = -INFINITY, o = 0.0f, ll = 0.0f;
        for (int ww = 0; ww < 4; ww++) mm = fmaxf(mm, W[(ww * 16 + r) * RW + D]);
        for (int ww = 0; ww < 4; ww++) {
            const float *x = W + (ww * 16 + r) * RW;
            float f = x[D] == -INFINITY ? 0.0f : __expf(x[D] - mm);
            o += x[d] * f;
            ll += x[D + 1] * f;
        }
        if (a.splits == 1) {
            ((TQ *)a.out)[cuda__tc_row_off(a, it, r, g) + d] = cuda__st<TQ>(o * cuda__tc_norm(a, it, r, g, mm, ll));
        } else {
            rec[r * RW + d] = o;
            if (d == 0) rec[r * RW + D] = mm, rec[r * RW + D + 1] = ll;
        }
    }
    if (a.splits > 1) cuda__tc_merge_splits<TQ, D>(a, it, item, g, 16);
}

/* The decode kernel: grid (splits, n_kv_heads, items), CUDA_ATTN_TC_THREADS threads,
 * cuda_attn_dec_smem bytes of dynamic shared memory. */
template <typename TKV, typename TQ, int D>
static __global__ void __launch_bounds__(CUDA_ATTN_TC_THREADS)
cuda__attn_dec_k(cuda__attn_args a, const TKV *kp, const TKV *vp)
{
    typedef typename cuda__tc_t16<TKV>::type T16;
    typedef cuda__dec_shape<TKV, D> SH;
    constexpr int BC = CUDA_ATTN_DEC_BC, NS = CUDA_ATTN_DEC_STAGES(D);
    constexpr bool QUANT = cuda__kv_quant<TKV>::value;
    extern __shared__ float sm[];
    const int32_t item = blockIdx.z;
    const int g = blockIdx.y, p = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const cuda__tc_item it = cuda__tc_item_at(a, item, p, BC);
    uint32_t *Qf = (uint32_t *)sm, *Qfs = Qf + D / 16 * 128; /* Qfs: the sink queries, with sinks */
    char *stages = (char *)(a.sinks ? Qfs + D / 16 * 128 : Qfs);
    cuda__dec_load_q<TQ, T16, TKV, D>(a, (const TQ *)a.q, Qf, it, g);
    if (a.sinks && it.n_sink > it.kb) cuda__dec_load_q<TQ, T16, TKV, D>(a, (const TQ *)a.q_sink, Qfs, it, g);

    float O[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; n++) O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.0f;
    const int n_tiles = it.kb < it.ke ? (int)cuda_div_up(it.ke - it.kb, BC) : 0;
    auto issue = [&](int t) { /* every call commits one group, empty past the last stage */
        if (t < n_tiles) {
            char *st = stages + (t % NS) * SH::STAGE;
            int32_t kt = it.kb + t * BC;
            cuda__tc_copy_rows<TKV, D, BC>(a, kp, vp, it.bt, g, kt, it.ke, st, st + BC * SH::RS, SH::RS);
            if constexpr (QUANT)
                cuda__tc_copy_scales<TKV, D, BC>(a, kp, vp, it.bt, g, kt, it.ke, (uint16_t *)(st + 2 * BC * SH::RS),
                                                 (uint16_t *)(st + 2 * BC * SH::RS) + BC);
        }
        cuda__cp_commit();
    };
    for (int t = 0; t < NS - 1; t++) issue(t);
    for (int t = 0; t < n_tiles; t++) {
        cuda__cp_wait<NS - 2>();
        __syncthreads(); /* stage t is in; every warp is done with stage t − 1 */
        issue(t + NS - 1);
        const char *st = stages + (t % NS) * SH::STAGE;
        const int32_t kw = it.kb + t * BC + 16 * w; /* the warp's first key */
        if (kw >= it.ke) continue;
        const char *Kw = st + 16 * w * SH::RS, *Vw = st + (BC + 16 * w) * SH::RS;
        const uint16_t *ksc = (const uint16_t *)(st + 2 * BC * SH::RS) + 16 * w, *vsc = ksc + BC;
        const int sink_pass = kw < it.n_sink, passes = sink_pass && kw + 16 > it.n_sink ? 2 : 1;
        for (int ps = 0; ps < passes; ps++) {
            const bool sink = sink_pass && ps == 0;
            int32_t lo = sink || !sink_pass ? it.kb : it.n_sink, hi = sink ? min(it.ke, it.n_sink) : it.ke;
            float S[1][2][4], (*Om)[D / 8][4] = &O, (*mm)[2] = &m, (*ll)[2] = &l;
            cuda__dec_qk<TKV, T16, D>(S[0], sink ? Qfs : Qf, Kw, ksc, lane);
            if (a.softcap > 0.0f) cuda__tc_softcap<1, 2>(S, a.softcap);
            cuda__tc_mask<1, 2>(S, a, it, 0, kw, lo, hi, lane);
            cuda__tc_softmax<1, 2, D / 8>(S, mm, ll, Om);
            cuda__dec_pv<TKV, T16, D>(O, S[0], Vw, vsc, lane);
        }
    }
    cuda__cp_wait<0>();
    __syncthreads(); /* the stages are free for the warps' states */
    cuda__dec_finish<TQ, D>(a, it, item, g, p, O, m, l, (float *)stages, lane, w);
}

#endif
