/*
 * attn_kernels.h — the reference attention kernel (see cuda/attn.cu for the algorithm) and its
 * split-K reduction, and the loads of the KV types that the tensor-core kernels
 * (attn_mma_kernels.h, attn_decode_kernels.h) share; kept apart from their launcher so that the
 * same source also compiles against a CPU emulation of the CUDA built-ins
 * (cuda/check/emu_cuda.h), which checks them without a GPU. The reference kernel serves every
 * shape (any head dim, block size and KV type, f32 included) on CUDA cores; the dispatcher
 * (attn.cu) sends it the steps the tensor-core kernels do not take.
 *
 * Included by cuda/attn.cu (after cuda/internal.h) and by cuda/check/attn_emu.cc (after the
 * emulation header). Expects the CUDA built-ins, __half / __nv_bfloat16.
 */
#ifndef KVSERVE_CUDA_ATTN_KERNELS_H
#define KVSERVE_CUDA_ATTN_KERNELS_H

#include "cuda/attn_plan.h"
#include "cuda/device.h"
#include "cuda/kv_layout.h"

/* Qs[rows][D] = the item's query rows of kv head group g from q (pre-scaled). */
template <typename TQ>
static __device__ __forceinline__ void cuda__attn_load_q(const cuda__attn_args &a, const TQ *q, float *Qs, int s,
                                                         int t0, int g, int rows)
{
    const int D = a.head_dim, qstride = a.n_heads * D;
    for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
        int r = i / D, d = i % D;
        int64_t tok = a.q_start[s] + t0 + r / a.gsize;
        int h = g * a.gsize + r % a.gsize;
        Qs[i] = cuda__ld(q[tok * qstride + h * D + d]) * a.scale;
    }
}

static __device__ __forceinline__ float cuda__ldkv(float v)
{
    return v;
}
static __device__ __forceinline__ float cuda__ldkv(__half v)
{
    return __half2float(v);
}
static __device__ __forceinline__ float cuda__ldkv(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

/* The quantised types: int8 codes (KV_I8) and e4m3 codes (KV_FP8), each tile followed by its
 * rows' f16 scales. */
static __device__ __forceinline__ float cuda__ldkv(int8_t v)
{
    return (float)v;
}
static __device__ __forceinline__ float cuda__ldkv(uint8_t v)
{
    return kv_e4m3_decode(v);
}

template <typename T> struct cuda__kv_quant {
    static constexpr bool value = false;
};
template <> struct cuda__kv_quant<int8_t> {
    static constexpr bool value = true;
};
template <> struct cuda__kv_quant<uint8_t> {
    static constexpr bool value = true;
};

/* The scale of row `off` of the tile starting at element `tile` (1 for unquantised types). */
template <typename T>
static __device__ __forceinline__ float cuda__kv_row_scale(const T *base, int64_t tile, int block_size,
                                                           int head_dim, int off)
{
    if (!cuda__kv_quant<T>::value) return 1.0f;
    const uint8_t *p = (const uint8_t *)(base + tile + (int64_t)block_size * head_dim) + KV_SCALE_BYTES * off;
    return cuda_kv_load_scale(p);
}

/* 16 bytes of K or V (4 f32, or 8 f16 / bf16) as f32, into o[16 / sizeof(T) / 4]. p is 16-byte
 * aligned: rows of head_dim elements start at multiples of 16 bytes when head_dim × size is one. */
static __device__ __forceinline__ void cuda__ldkv16(const float *p, float4 *o)
{
    o[0] = *(const float4 *)p;
}
static __device__ __forceinline__ void cuda__ldkv16(const __half *p, float4 *o)
{
    uint4 u = *(const uint4 *)p;
    const __half2 *h = (const __half2 *)&u;
    float2 a = __half22float2(h[0]), b = __half22float2(h[1]), c = __half22float2(h[2]), d = __half22float2(h[3]);
    o[0] = make_float4(a.x, a.y, b.x, b.y);
    o[1] = make_float4(c.x, c.y, d.x, d.y);
}
static __device__ __forceinline__ void cuda__ldkv16(const __nv_bfloat16 *p, float4 *o)
{
    uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
    float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]), c = __bfloat1622float2(h[2]),
           d = __bfloat1622float2(h[3]);
    o[0] = make_float4(a.x, a.y, b.x, b.y);
    o[1] = make_float4(c.x, c.y, d.x, d.y);
}

static __device__ __forceinline__ void cuda__ldkv16(const int8_t *p, float4 *o)
{
    int4 u = *(const int4 *)p;
    const int8_t *b = (const int8_t *)&u;
#pragma unroll
    for (int e = 0; e < 4; e++) o[e] = make_float4(b[4 * e], b[4 * e + 1], b[4 * e + 2], b[4 * e + 3]);
}
static __device__ __forceinline__ void cuda__ldkv16(const uint8_t *p, float4 *o)
{
    int4 u = *(const int4 *)p;
    const uint8_t *b = (const uint8_t *)&u;
#pragma unroll
    for (int e = 0; e < 4; e++)
        o[e] = make_float4(kv_e4m3_decode(b[4 * e]), kv_e4m3_decode(b[4 * e + 1]), kv_e4m3_decode(b[4 * e + 2]),
                           kv_e4m3_decode(b[4 * e + 3]));
}

static __device__ __forceinline__ float4 cuda__scale4(float4 v, float s)
{
    return make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
}

template <typename T, typename TQ>
static __global__ void __launch_bounds__(CUDA_ATTN_THREADS)
cuda__attn_k(cuda__attn_args a, const T *kp, const T *vp)
{
    const TQ *q = (const TQ *)a.q, *q_sink = (const TQ *)a.q_sink;
    const int TK = CUDA_ATTN_TK, D = a.head_dim;
    extern __shared__ float sm[]; /* dynamic */
    cuda__pdl_trigger(); /* the output projection may launch early (it waits before reading) */
    const int32_t *it = a.items + blockIdx.z * CUDA_ATTN_ITEM_INTS;
    const int s = it[0], t0 = it[1], nt = it[2];
    const int g = blockIdx.y, p = blockIdx.x, tid = threadIdx.x;
    const int rows = nt * a.gsize;
    const int32_t n_new = a.q_start[s + 1] - a.q_start[s];
    const int32_t base = a.ctx_len[s] - n_new; /* KV entries before this step's tokens */
    const int32_t kv_hi = base + t0 + nt;      /* exclusive end over the item's rows */
    /* first key any row of the item sees: its first row's window start (0 without a window);
     * split-K partitions cover the keys from there */
    const int32_t k_lo = a.window > 0 && base + t0 - a.window + 1 > 0 ? base + t0 - a.window + 1 : 0;
    const int32_t k_begin = k_lo + (int32_t)p * a.part_keys;
    const int32_t k_end = min(kv_hi, k_begin + a.part_keys);
    const int32_t *bt = a.block_table + (int64_t)s * a.bt_stride;
    const int qstride = a.n_heads * D;

    /* 16-byte aligned first (K, V, Q, O), when D % 4 == 0, then the per-row scalars. */
    const int KP = cuda__attn_kpad(D);
    float *Ks = sm;                 /* [TK][KP] */
    float *Vs = Ks + TK * KP;       /* [TK][D] */
    float *Qs = Vs + TK * D;        /* [rows][D], pre-scaled */
    float *Os = Qs + rows * D;      /* [rows][D] */
    float *Ss = Os + rows * D;      /* [rows][TK] scores, then probabilities */
    float *Ms = Ss + rows * TK;     /* [rows] running max */
    float *Ls = Ms + rows;          /* [rows] running sum */
    float *As = Ls + rows;          /* [rows] rescale factor of this tile */
    constexpr int VEC = 16 / sizeof(T); /* elements per 16-byte load */
    /* rows are 16-byte aligned (vector loads and stores) when rows and tiles are whole 16 bytes */
    const bool vec_ok = D % VEC == 0 && (a.tile_elems * (int)sizeof(T)) % 16 == 0;

    /* Attention sinks: keys below n_sink meet q_sink, the rest q; no tile straddles the two. */
    const int32_t n_sink = a.sinks ? a.sinks[s] : 0;
    cuda__attn_load_q(a, k_begin < n_sink ? q_sink : q, Qs, s, t0, g, rows);
    for (int i = tid; i < rows * D; i += blockDim.x) Os[i] = 0.0f;
    for (int r = tid; r < rows; r += blockDim.x) {
        Ms[r] = -INFINITY;
        Ls[r] = 0.0f;
    }
    const int64_t head_off = (int64_t)g * a.tile_elems;
    const int64_t blk_elems = (int64_t)a.n_kv_heads * a.tile_elems;
    for (int32_t kt = k_begin, kt_end; kt < k_end; kt = kt_end) {
        kt_end = min(k_end, kt + TK);
        if (kt < n_sink) kt_end = min(kt_end, n_sink);
        __syncthreads(); /* the previous tile's K/V/S (and Q) are no longer read */
        if (kt == n_sink && kt > k_begin) { /* past the sinks: the ordinary queries */
            cuda__attn_load_q(a, q, Qs, s, t0, g, rows);
            __syncthreads();
        }
        if (vec_ok) {
            const int DV = D / VEC;
            for (int i = tid; i < TK * DV; i += blockDim.x) {
                int c = i / DV, d = (i % DV) * VEC;
                int32_t j = kt + c;
                float4 kv[VEC / 4], vv[VEC / 4];
                if (j < kt_end) {
                    int64_t t = (int64_t)bt[j / a.block_size] * blk_elems + head_off;
                    int off = j % a.block_size;
                    int64_t o = t + (int64_t)off * D + d;
                    cuda__ldkv16(kp + o, kv);
                    cuda__ldkv16(vp + o, vv);
                    if (cuda__kv_quant<T>::value) {
                        float sk = cuda__kv_row_scale(kp, t, a.block_size, D, off);
                        float sv = cuda__kv_row_scale(vp, t, a.block_size, D, off);
#pragma unroll
                        for (int e = 0; e < VEC / 4; e++) {
                            kv[e] = cuda__scale4(kv[e], sk);
                            vv[e] = cuda__scale4(vv[e], sv);
                        }
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < VEC / 4; e++) kv[e] = vv[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int e = 0; e < VEC / 4; e++) {
                    *(float4 *)(Ks + c * KP + d + 4 * e) = kv[e];
                    *(float4 *)(Vs + c * D + d + 4 * e) = vv[e];
                }
            }
        } else {
            for (int i = tid; i < TK * D; i += blockDim.x) {
                int c = i / D, d = i % D;
                int32_t j = kt + c;
                float kv = 0.0f, vv = 0.0f;
                if (j < kt_end) {
                    int64_t t = (int64_t)bt[j / a.block_size] * blk_elems + head_off;
                    int off = j % a.block_size;
                    int64_t o = t + (int64_t)off * D + d;
                    kv = cuda__ldkv(kp[o]) * cuda__kv_row_scale(kp, t, a.block_size, D, off);
                    vv = cuda__ldkv(vp[o]) * cuda__kv_row_scale(vp, t, a.block_size, D, off);
                }
                Ks[c * KP + d] = kv;
                Vs[c * D + d] = vv;
            }
        }
        __syncthreads();
        for (int i = tid; i < rows * TK; i += blockDim.x) {
            int r = i / TK, c = i % TK;
            int32_t j = kt + c, qpos = base + t0 + r / a.gsize;
            float sc = -INFINITY;
            if (j < kt_end && j <= qpos && (a.window <= 0 || qpos - j < a.window)) {
                const float *qr = Qs + r * D, *kr = Ks + c * KP;
                float acc = 0.0f;
                if (D % 4 == 0) {
                    for (int d = 0; d < D; d += 4) {
                        float4 x = *(const float4 *)(qr + d), y = *(const float4 *)(kr + d);
                        acc += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
                    }
                } else {
                    for (int d = 0; d < D; d++) acc += qr[d] * kr[d];
                }
                sc = a.softcap > 0.0f ? be_softcap(acc, a.softcap) : acc;
            }
            Ss[i] = sc;
        }
        __syncthreads();
        const int lane = tid & 31;
        for (int r = tid >> 5; r < rows; r += blockDim.x >> 5) {
            float sc = Ss[r * TK + lane];
            float m_old = Ms[r];
            float m_new = fmaxf(m_old, cuda__warp_max(sc));
            float pr = sc == -INFINITY ? 0.0f : __expf(sc - m_new);
            float sum = cuda__warp_sum(pr);
            Ss[r * TK + lane] = pr;
            if (lane == 0) {
                float alpha = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
                Ls[r] = Ls[r] * alpha + sum;
                Ms[r] = m_new;
                As[r] = alpha;
            }
        }
        __syncthreads();
        for (int i = tid; i < rows * D; i += blockDim.x) {
            int r = i / D, d = i % D;
            const float *pr = Ss + r * TK;
            float acc = Os[i] * As[r];
#pragma unroll 8
            for (int c = 0; c < TK; c++) acc += pr[c] * Vs[c * D + d];
            Os[i] = acc;
        }
    }
    __syncthreads();
    for (int i = tid; i < rows * D; i += blockDim.x) {
        int r = i / D, d = i % D;
        int64_t tok = a.q_start[s] + t0 + r / a.gsize;
        int h = g * a.gsize + r % a.gsize;
        if (a.splits == 1) {
            ((TQ *)a.out)[tok * qstride + h * D + d] = cuda__st<TQ>(Ls[r] > 0.0f ? Os[i] / Ls[r] : 0.0f);
        } else {
            float *pp = a.part + ((tok * a.n_heads + h) * a.splits + p) * (D + 2);
            pp[d] = Os[i];
            if (d == 0) {
                pp[D] = Ms[r];
                pp[D + 1] = Ls[r];
            }
        }
    }
}

/* Merges the split partials of one (token, head): grid (n_heads, n_tokens). */
template <typename TQ>
static __global__ void cuda__attn_reduce_k(const float *part, TQ *out, int n_heads, int D, int splits)
{
    cuda__pdl_trigger();
    int h = blockIdx.x;
    int64_t t = blockIdx.y;
    const float *pp = part + (t * n_heads + h) * splits * (D + 2);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float m = -INFINITY, l = 0.0f, o = 0.0f;
        for (int p = 0; p < splits; p++) {
            const float *q = pp + p * (D + 2);
            float ca, cb;
            m = cuda_softmax_merge(m, &l, q[D], q[D + 1], &ca, &cb);
            o = o * ca + q[d] * cb;
        }
        out[(t * n_heads + h) * D + d] = cuda__st<TQ>(l > 0.0f ? o / l : 0.0f);
    }
}

#endif
