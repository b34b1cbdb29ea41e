/*
 * sample_kernels.h — sampling on the device: the rows of a step (engine/smp_rows.h) run one
 * block per row, the greedy argmax of logit rows, and the token references of a batch resolved
 * from the previous step's sampled ids. Kept apart from their launchers (cuda/sample.cu) so that
 * they compile under the CPU emulation of cuda/check/emu_cuda.h too.
 *
 * The row kernel computes smp_rows.h's definition, which engine/sampler.c computes on the CPU,
 * with the order-free forms of its sets: top_k's k-th best and top_p's cut are found by radix
 * selection over a 64-bit key (the logit's order bits, then the inverted id), top_p's by weight,
 * and the draw's walk in id order is a scan over contiguous chunks, one per thread. Weights and
 * sums are doubles, so the token differs from the CPU's only where a different order of additions
 * moves a running sum across the draw's target (smp_rows.h).
 *
 * Expects the CUDA built-ins (or their emulation); blockDim.x a multiple of 32, at most 1024.
 */
#ifndef KVSERVE_CUDA_SAMPLE_KERNELS_H
#define KVSERVE_CUDA_SAMPLE_KERNELS_H

#include <math.h>
#include <stdint.h>

#include "base/rng.h"
#include "engine/smp_rows.h"

/* Threads of a row's block on the GPU (the emulation runs fewer; any multiple of 32 works). */
#define CUDA_SMP_THREADS 1024

/* The arguments of one sampling launch (device pointers). */
typedef struct cuda__smp_args {
    const smp_row *rows;    /* [n_rows] */
    const int32_t *arena;   /* the rows' lists */
    const float *logits;    /* [..][V] the step's logit rows */
    int32_t V;              /* n_vocab */
    const int32_t *prev;    /* the previous sample's ids (pending rows read them), or NULL */
    float *adj;             /* [n_rows][V] scratch: the adjusted rows */
    int32_t *ids;           /* [n_rows] out: each row's token */
    smp_result *lps;        /* [n_lp] out: the log-prob blocks */
} cuda__smp_args;

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

/* tokens[i] < 0 is -(1 + j): the token row j of the previous sample drew (engine/backend.h). */
static __global__ void cuda__resolve_tokens_k(int32_t *tokens, int32_t n, const int32_t *prev)
{
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int32_t t = tokens[i];
        if (t < 0) tokens[i] = prev[-1 - t];
    }
}

/* ---- block-wide helpers (every thread of the block calls them, every thread gets the result) */

#define CUDA_SMP_NONE 0x7fffffff

/* (va, ia) before (vb, ib): a larger value, or the same and a lower index. */
static __device__ __forceinline__ int cuda__smp_better(float va, int32_t ia, float vb, int32_t ib)
{
    return va > vb || (va == vb && ia < ib);
}

/* The best (value, index) of the block's candidates (NaN never offered; (-inf, NONE): none). */
static __device__ void cuda__smp_best(float *v, int32_t *i)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        int32_t oi = __shfl_xor_sync(0xffffffffu, *i, o);
        if (cuda__smp_better(ov, oi, *v, *i)) {
            *v = ov;
            *i = oi;
        }
    }
    static __shared__ float pv[32];
    static __shared__ int32_t pi[32];
    __syncthreads(); /* the parts may still be read by a previous call */
    if ((threadIdx.x & 31) == 0) {
        pv[threadIdx.x >> 5] = *v;
        pi[threadIdx.x >> 5] = *i;
    }
    __syncthreads();
    *v = pv[0];
    *i = pi[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (cuda__smp_better(pv[w], pi[w], *v, *i)) {
            *v = pv[w];
            *i = pi[w];
        }
}

static __device__ double cuda__smp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    static __shared__ double part[32];
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) s += part[w];
    return s;
}

/* op 0: sum, 1: min, 2: max of the block's ints. */
static __device__ int32_t cuda__smp_int(int32_t v, int op)
{
    for (int o = 16; o > 0; o >>= 1) {
        int32_t x = __shfl_xor_sync(0xffffffffu, v, o);
        v = op == 0 ? v + x : op == 1 ? (x < v ? x : v) : (x > v ? x : v);
    }
    static __shared__ int32_t part[32];
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    int32_t r = part[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        r = op == 0 ? r + part[w] : op == 1 ? (part[w] < r ? part[w] : r) : (part[w] > r ? part[w] : r);
    return r;
}

/* The key that orders (logit descending, id ascending) as unsigned descending: the float's
 * order bits (-0 as +0), then the inverted id. */
static __device__ __forceinline__ uint64_t cuda__smp_key(float l, int32_t i)
{
    if (l == 0.0f) l = 0.0f;
    uint32_t b = __float_as_uint(l);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)b << 32) | (uint32_t)(0xffffffffu - (uint32_t)i);
}

/* The weight of a logit: exp((l - mx) / T) for a candidate (l > -inf), else 0. */
static __device__ __forceinline__ double cuda__smp_w(float l, float mx, double T)
{
    return l > -INFINITY ? exp(((double)l - (double)mx) / T) : 0.0;
}

/* top_k: the key of the k-th best candidate of l[0 .. V) (radix selection, 8 bits a pass). */
static __device__ uint64_t cuda__smp_kth(const float *l, int32_t V, int32_t k)
{
    static __shared__ unsigned hist[256];
    static __shared__ uint64_t pre_s;
    static __shared__ int32_t k_s;
    uint64_t pre = 0, mask = 0;
    if (threadIdx.x == 0) k_s = k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (int32_t i = threadIdx.x; i < V; i += blockDim.x) {
            float v = l[i];
            if (!(v > -INFINITY)) continue;
            uint64_t key = cuda__smp_key(v, i);
            if ((key & mask) == pre) atomicAdd(&hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned cum = 0;
            int d = 0;
            for (int b = 255; b >= 0; b--) {
                if (cum + hist[b] >= (unsigned)k_s) {
                    d = b;
                    break;
                }
                cum += hist[b];
            }
            k_s -= (int32_t)cum;
            pre_s = pre | ((uint64_t)d << shift);
        }
        __syncthreads();
        pre = pre_s;
        mask |= (uint64_t)255 << shift;
    }
    return pre;
}

/* top_p: the key of the first candidate (at or above kth) in key order at which the running
 * weight reaches target; the last of them when none does (radix selection by weight). */
static __device__ uint64_t cuda__smp_cut(const float *l, int32_t V, float mx, double T, uint64_t kth, double target)
{
    static __shared__ unsigned hist[256];
    static __shared__ double whist[256];
    static __shared__ uint64_t pre_s;
    static __shared__ double above_s;
    uint64_t pre = 0, mask = 0;
    if (threadIdx.x == 0) above_s = 0.0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) {
            hist[b] = 0;
            whist[b] = 0.0;
        }
        __syncthreads();
        for (int32_t i = threadIdx.x; i < V; i += blockDim.x) {
            float v = l[i];
            if (!(v > -INFINITY)) continue;
            uint64_t key = cuda__smp_key(v, i);
            if (key < kth || (key & mask) != pre) continue;
            atomicAdd(&hist[(key >> shift) & 255], 1u);
            atomicAdd(&whist[(key >> shift) & 255], cuda__smp_w(v, mx, T));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double above = above_s;
            int d = -1, lowest = 0;
            for (int b = 255; b >= 0; b--) {
                if (!hist[b]) continue;
                lowest = b;
                if (above + whist[b] >= target) {
                    d = b;
                    break;
                }
                above += whist[b];
            }
            if (d < 0) { /* rounding: never reached; keep all (the last bin, and on down) */
                d = lowest;
                above -= whist[lowest];
            }
            above_s = above;
            pre_s = pre | ((uint64_t)d << shift);
        }
        __syncthreads();
        pre = pre_s;
        mask |= (uint64_t)255 << shift;
    }
    return pre;
}

/* The raw row's log-sum-exp and its n best (value descending, id ascending; NaN never) into r
 * (thread 0's copy). Returns lse. */
static __device__ double cuda__smp_lp(const float *raw, int32_t V, int n_top, smp_result *r)
{
    float v = -INFINITY;
    int32_t bi = CUDA_SMP_NONE;
    for (int32_t i = threadIdx.x; i < V; i += blockDim.x)
        if (raw[i] == raw[i] && cuda__smp_better(raw[i], i, v, bi)) {
            v = raw[i];
            bi = i;
        }
    cuda__smp_best(&v, &bi);
    float mx = raw[bi == CUDA_SMP_NONE ? 0 : bi];
    double s = 0.0;
    for (int32_t i = threadIdx.x; i < V; i += blockDim.x) s += exp((double)raw[i] - mx);
    double lse = mx + log(cuda__smp_sum(s));
    float pv = 0.0f;
    int32_t pi = -1, k = 0;
    for (; k < n_top; k++) {
        float bv = -INFINITY;
        int32_t b = CUDA_SMP_NONE;
        for (int32_t i = threadIdx.x; i < V; i += blockDim.x) {
            float x = raw[i];
            if (x != x || (pi >= 0 && !cuda__smp_better(pv, pi, x, i))) continue;
            if (cuda__smp_better(x, i, bv, b)) {
                bv = x;
                b = i;
            }
        }
        cuda__smp_best(&bv, &b);
        if (b == CUDA_SMP_NONE) break;
        if (threadIdx.x == 0) {
            r->top_ids[k] = b;
            r->top_logprobs[k] = (float)(raw[b] - lse);
        }
        pv = bv;
        pi = b;
    }
    if (threadIdx.x == 0) r->n_top = k;
    return lse;
}

/* The adjusted row l (smp_rows.h, step 2) from raw; pend is the pending token or -1. */
static __device__ void cuda__smp_adjust(const smp_row *r, const int32_t *arena, const float *raw, int32_t V,
                                        int32_t pend, float *l)
{
    static __shared__ int seen;
    const uint32_t *m = r->mask >= 0 ? (const uint32_t *)arena + r->mask : NULL;
    for (int32_t i = threadIdx.x; i < V; i += blockDim.x)
        l[i] = !m || ((m[i >> 5] >> (i & 31)) & 1) ? raw[i] : -INFINITY;
    if (threadIdx.x == 0) seen = 0;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int32_t k = 0; k < r->n_bias; k++) {
            int32_t b = arena[r->bias + 2 * k + 1];
            l[arena[r->bias + 2 * k]] += __int_as_float(b);
        }
    __syncthreads();
    for (int32_t k = threadIdx.x; k < r->n_rep; k += blockDim.x) { /* distinct ids: no two threads meet */
        int32_t id = arena[r->rep_ids + k];
        if (id == pend) seen = 1;
        l[id] = l[id] > 0 ? l[id] / r->rep : l[id] * r->rep;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (r->rep != 1.0f && pend >= 0 && !seen) l[pend] = l[pend] > 0 ? l[pend] / r->rep : l[pend] * r->rep;
        seen = 0;
    }
    __syncthreads();
    for (int32_t k = threadIdx.x; k < r->n_freq; k += blockDim.x) {
        int32_t id = arena[r->freq_ids + 2 * k], c = arena[r->freq_ids + 2 * k + 1] + (id == pend);
        if (id == pend) seen = 1;
        l[id] = (float)((double)l[id] - ((double)r->freq * c + (double)r->pres));
    }
    __syncthreads();
    if (threadIdx.x == 0 && (r->freq != 0.0f || r->pres != 0.0f) && pend >= 0 && !seen)
        l[pend] = (float)((double)l[pend] - ((double)r->freq + (double)r->pres));
    __syncthreads();
    for (int32_t k = threadIdx.x; k < r->n_ban; k += blockDim.x) l[arena[r->ban + k]] = -INFINITY;
    __syncthreads();
}

/* The draw (smp_rows.h, step 3) over the adjusted row l, whose best is (mx, am). */
static __device__ int32_t cuda__smp_draw(const smp_row *r, const float *l, int32_t V, float mx, int32_t am)
{
    static __shared__ double sc[1024], wt[32];
    double T = r->temperature;
    int32_t nc = 0;
    if (r->top_k > 0) {
        for (int32_t i = threadIdx.x; i < V; i += blockDim.x) nc += l[i] > -INFINITY;
        nc = cuda__smp_int(nc, 0);
    }
    int use_k = r->top_k > 0 && r->top_k < nc, use_p = r->top_p < 1.0f;
    uint64_t kth = use_k ? cuda__smp_kth(l, V, r->top_k) : 0, lim = kth;
    if (use_p) {
        double s = 0.0;
        for (int32_t i = threadIdx.x; i < V; i += blockDim.x)
            if (l[i] > -INFINITY && cuda__smp_key(l[i], i) >= kth) s += cuda__smp_w(l[i], mx, T);
        lim = cuda__smp_cut(l, V, mx, T, kth, (double)r->top_p * cuda__smp_sum(s));
    }
    double mp = r->min_p > 0.0f ? (double)r->min_p : 0.0;
    /* id order: thread t walks the contiguous chunk [lo, hi); a scan gives each its start */
    int32_t chunk = (V + (int32_t)blockDim.x - 1) / (int32_t)blockDim.x, lo = (int32_t)threadIdx.x * chunk;
    int32_t hi = lo + chunk < V ? lo + chunk : V;
    double cs = 0.0;
    for (int32_t i = lo; i < hi; i++) {
        double w = cuda__smp_w(l[i], mx, T);
        if (w > 0.0 && w >= mp && cuda__smp_key(l[i], i) >= lim) cs += w;
    }
    __syncthreads();
    sc[threadIdx.x] = cs;
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { /* each warp's exclusive scan, in lane order */
        double acc = 0.0;
        for (int k = 0; k < 32; k++) {
            double x = sc[warp * 32 + k];
            sc[warp * 32 + k] = acc;
            acc += x;
        }
        wt[warp] = acc;
    }
    __syncthreads();
    double before = 0.0, tot = 0.0;
    for (int w = 0; w < nw; w++) {
        if (w < warp) before += wt[w];
        tot += wt[w];
    }
    if (!(tot > 0.0)) return am; /* min_p above 1 keeps nothing */
    double u = rng_draw_uniform(r->seed + r->choice, (uint32_t)r->position, 0, RNG_STREAM_SAMPLE) * tot;
    double acc = before + sc[threadIdx.x];
    int32_t first = CUDA_SMP_NONE, last = -1;
    for (int32_t i = lo; i < hi; i++) {
        double w = cuda__smp_w(l[i], mx, T);
        if (!(w > 0.0 && w >= mp && cuda__smp_key(l[i], i) >= lim)) continue;
        acc += w;
        last = i;
        if (u < acc) {
            first = i;
            break;
        }
    }
    first = cuda__smp_int(first, 1);
    last = cuda__smp_int(last, 2);
    return first != CUDA_SMP_NONE ? first : last;
}

/* One block per row of a step (smp_rows.h): a.ids[row] its token, a.lps[row->lp] its log-probs. */
static __global__ void cuda__sample_k(cuda__smp_args a)
{
    const smp_row *r = &a.rows[blockIdx.x];
    const float *raw = a.logits + (int64_t)r->logits * a.V;
    static __shared__ smp_result res;
    int lp = r->lp >= 0 || r->kind == SMP_ROW_SCORE;
    double lse = lp ? cuda__smp_lp(raw, a.V, r->n_logprobs, &res) : 0.0;
    if (r->kind == SMP_ROW_SCORE) {
        float x = raw[r->token];
        int32_t rank = 0;
        for (int32_t i = threadIdx.x; i < a.V; i += blockDim.x) rank += raw[i] >= x;
        rank = cuda__smp_int(rank, 0);
        if (threadIdx.x == 0) {
            res.token = r->token;
            res.logprob = (float)(x - lse);
            res.rank = rank;
            a.lps[r->lp] = res;
            a.ids[blockIdx.x] = r->token;
        }
        return;
    }
    int32_t pend = r->pending >= 0 && a.prev ? a.prev[r->pending] : -1;
    if (pend >= a.V) pend = -1;
    int adjust = r->mask >= 0 || r->n_bias || r->n_rep || r->n_freq || r->n_ban ||
                 (pend >= 0 && (r->rep != 1.0f || r->freq != 0.0f || r->pres != 0.0f));
    const float *l = raw;
    if (adjust) {
        float *w = a.adj + (int64_t)blockIdx.x * a.V;
        cuda__smp_adjust(r, a.arena, raw, a.V, pend, w);
        l = w;
    }
    float mx = -INFINITY;
    int32_t am = CUDA_SMP_NONE;
    for (int32_t i = threadIdx.x; i < a.V; i += blockDim.x)
        if (l[i] == l[i] && cuda__smp_better(l[i], i, mx, am)) {
            mx = l[i];
            am = i;
        }
    cuda__smp_best(&mx, &am);
    if (am == CUDA_SMP_NONE) am = 0; /* a row of NaNs */
    mx = l[am];
    int32_t tok = am;
    if (r->temperature > 0.0f && mx > -INFINITY) tok = cuda__smp_draw(r, l, a.V, mx, am);
    if (r->fallback >= 0 && !(l[tok] > -INFINITY)) tok = r->fallback;
    if (threadIdx.x == 0) {
        a.ids[blockIdx.x] = tok;
        if (r->lp >= 0) {
            res.token = tok;
            res.logprob = (float)(raw[tok] - lse);
            res.rank = 0;
            a.lps[r->lp] = res;
        }
    }
}

#endif
