/*
 * mla_kernels.h — multi-head latent attention's kernels (cuda/mla.cu): the latent query and key
 * of the step's tokens, and attention over the latent KV layout. Kept apart from the launchers so
 * that the same source runs under the CPU emulation (cuda/check/moe_emu.cc).
 *
 *   prep     one block per token: the key [rmsnorm(c)·w ; rope(k_pe)] and every head's RoPE part
 *            of the query, written into the latent buffers (the heads' absorbed part, k_b · q_nope,
 *            is the grouped matvec of moe_kernels.h);
 *   attend   one block per (token, chunk of up to CUDA_MLA_ROWS heads, key partition): its part
 *            of the token's causal range of cached latent vectors, CUDA_MLA_TK at a time,
 *            gathered through the block table into shared memory (f32, f16 / bf16, int8 / e4m3
 *            codes times their row's scale), each vector the key of every head and their value;
 *            an online softmax per head. The output has head_dim values per head, the first
 *            kv_lora of which are the latent attention's result (backend.h). With split-K
 *            (cuda__mla_splits: few blocks, long contexts — a decode of one long sequence) each
 *            partition writes its partial (o, m, l) and the last one to finish merges them.
 * Attend reads each key once per (token, head chunk): decode is a single pass; a prefill of T
 * tokens reads the range T times (correct, not yet fast: no tiling of tokens, no tensor cores).
 */
#ifndef KVSERVE_CUDA_MLA_KERNELS_H
#define KVSERVE_CUDA_MLA_KERNELS_H

#include "cuda/attn_kernels.h"
#include "cuda/device.h"
#include "cuda/kv_layout.h"
#include "cuda/mla_plan.h"
#include "cuda/norm_rope_kernels.h"

static __global__ void cuda__mla_prep_k(cuda__mla_prep_args a)
{
    const int t = blockIdx.x, H = a.n_heads, hq = a.nope + a.rope, hl = a.kv_lora + a.rope;
    const float *kv = a.kv + (int64_t)t * hl, *q = a.q + (int64_t)t * H * hq;
    float *kl = a.k_lat + (int64_t)t * hl, *ql = a.q_lat + (int64_t)t * H * hl;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < a.kv_lora; i += blockDim.x) ss += kv[i] * kv[i];
    ss = cuda__block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)a.kv_lora + a.eps);
    for (int i = threadIdx.x; i < a.kv_lora; i += blockDim.x) kl[i] = kv[i] * inv * a.norm[i];
    for (int i = threadIdx.x; i < a.rope; i += blockDim.x) kl[a.kv_lora + i] = kv[a.kv_lora + i];
    for (int i = threadIdx.x; i < H * a.rope; i += blockDim.x)
        ql[(int64_t)(i / a.rope) * hl + a.kv_lora + i % a.rope] = q[(int64_t)(i / a.rope) * hq + a.nope + i % a.rope];
    __syncthreads();
    be_rope rk = a.rope_k, rq = a.rope_q; /* rotate the RoPE parts in place: heads hl apart */
    rk.head_dim = hl, rq.head_dim = hl;
    cuda__rope_row(kl + a.kv_lora, a.pos[t], rk, NULL);
    __syncthreads();
    cuda__rope_row(ql + a.kv_lora, a.pos[t], rq, NULL);
}

/* After a partition's block has written its rows' partials, the last partition of (token t,
 * head chunk x) to finish merges all of them into out and resets the counter. Every thread of
 * the block calls it. */
static __device__ void cuda__mla_merge(const cuda__mla_attn_args &a, int t, int x, int h0, int rows)
{
    static __shared__ int last;
    const int D = a.head_dim, RW = D + 2;
    __threadfence(); /* this block's partials are visible before its count */
    __syncthreads();
    int32_t *sem = a.sem + (int64_t)t * cuda__mla_chunks(a.n_heads) + x;
    if (threadIdx.x == 0) {
        last = atomicAdd(sem, 1) == a.splits - 1;
        if (last) *sem = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float *rec = a.part + ((int64_t)t * cuda__mla_chunks(a.n_heads) + x) * a.splits * CUDA_MLA_ROWS * RW;
    for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
        int r = i / D, d = i % D;
        float m = -INFINITY, l = 0.0f, o = 0.0f;
        for (int p = 0; p < a.splits; p++) {
            const float *y = rec + ((int64_t)p * CUDA_MLA_ROWS + r) * RW;
            float ca, cb;
            m = cuda_softmax_merge(m, &l, __ldcg(y + D), __ldcg(y + D + 1), &ca, &cb);
            o = o * ca + __ldcg(y + d) * cb;
        }
        a.out[((int64_t)t * a.n_heads + h0 + r) * D + d] = l > 0.0f ? o / l : 0.0f;
    }
}

/* Grid (⌈n_heads / CUDA_MLA_ROWS⌉ × splits, n_tokens): block x is head chunk x % chunks of key
 * partition x / chunks. CUDA_MLA_THREADS threads, cuda__mla_smem bytes. */
template <typename T>
static __global__ void __launch_bounds__(CUDA_MLA_THREADS) cuda__mla_attn_k(cuda__mla_attn_args a, const T *kp)
{
    extern __shared__ float sm[];
    const int chunks = cuda__mla_chunks(a.n_heads), x = blockIdx.x % chunks, p = blockIdx.x / chunks;
    const int D = a.head_dim, TK = CUDA_MLA_TK, t = blockIdx.y, h0 = x * CUDA_MLA_ROWS, tid = threadIdx.x;
    const int rows = a.n_heads - h0 < CUDA_MLA_ROWS ? a.n_heads - h0 : CUDA_MLA_ROWS;
    int s = 0, hi = a.n_seqs - 1; /* the token's sequence: the last s with q_start[s] ≤ t */
    while (s < hi) {
        int mid = (s + hi + 1) / 2;
        if (a.q_start[mid] <= t) s = mid;
        else hi = mid - 1;
    }
    const int32_t n = a.ctx_len[s] - (a.q_start[s + 1] - t) + 1; /* keys 0 .. its own KV index */
    const int32_t k_lo = a.splits > 1 ? p * a.part_keys : 0;  /* this partition's keys */
    const int32_t k_hi = a.splits > 1 ? min(n, k_lo + a.part_keys) : n;
    const int32_t *bt = a.block_table + (int64_t)s * a.bt_stride;
    float *Ks = sm, *Qs = Ks + TK * D, *Os = Qs + CUDA_MLA_ROWS * D, *Ss = Os + CUDA_MLA_ROWS * D;
    float *Ms = Ss + CUDA_MLA_ROWS * TK, *Ls = Ms + CUDA_MLA_ROWS, *As = Ls + CUDA_MLA_ROWS;
    for (int i = tid; i < rows * D; i += blockDim.x) {
        Qs[i] = a.q[((int64_t)t * a.n_heads + h0 + i / D) * D + i % D] * a.scale;
        Os[i] = 0.0f;
    }
    for (int r = tid; r < rows; r += blockDim.x) Ms[r] = -INFINITY, Ls[r] = 0.0f;
    for (int32_t k0 = k_lo; k0 < k_hi; k0 += TK) {
        const int nk = k_hi - k0 < TK ? k_hi - k0 : TK;
        __syncthreads(); /* the previous tile is read */
        for (int i = tid; i < nk * D; i += blockDim.x) {
            int c = i / D, d = i % D, off = (k0 + c) % a.block_size;
            int64_t tile = (int64_t)bt[(k0 + c) / a.block_size] * a.tile_elems;
            Ks[i] = cuda__ldkv(kp[tile + (int64_t)off * D + d]) * cuda__kv_row_scale(kp, tile, a.block_size, D, off);
        }
        __syncthreads();
        for (int i = tid; i < rows * TK; i += blockDim.x) {
            int r = i / TK, c = i % TK;
            float acc = -INFINITY;
            if (c < nk) {
                acc = 0.0f;
                for (int d = 0; d < D; d++) acc += Qs[r * D + d] * Ks[c * D + d];
            }
            Ss[i] = acc;
        }
        __syncthreads();
        for (int r = tid; r < rows; r += blockDim.x) {
            float m = Ms[r], sum = 0.0f;
            for (int c = 0; c < nk; c++) m = fmaxf(m, Ss[r * TK + c]);
            for (int c = 0; c < TK; c++) {
                float p = c < nk ? __expf(Ss[r * TK + c] - m) : 0.0f;
                Ss[r * TK + c] = p;
                sum += p;
            }
            As[r] = Ms[r] == -INFINITY ? 0.0f : __expf(Ms[r] - m);
            Ls[r] = Ls[r] * As[r] + sum;
            Ms[r] = m;
        }
        __syncthreads();
        for (int i = tid; i < rows * D; i += blockDim.x) {
            int r = i / D, d = i % D;
            float acc = Os[i] * As[r];
            for (int c = 0; c < nk; c++) acc += Ss[r * TK + c] * Ks[c * D + d];
            Os[i] = acc;
        }
    }
    __syncthreads();
    if (a.splits == 1) {
        for (int i = tid; i < rows * D; i += blockDim.x)
            a.out[((int64_t)t * a.n_heads + h0 + i / D) * D + i % D] = Ls[i / D] > 0.0f ? Os[i] / Ls[i / D] : 0.0f;
        return;
    }
    /* a partition with no keys (past the token's range) leaves m = -inf, l = 0: it adds nothing */
    float *rec = a.part + (((int64_t)t * chunks + x) * a.splits + p) * CUDA_MLA_ROWS * (D + 2);
    for (int i = tid; i < rows * D; i += blockDim.x) rec[(i / D) * (D + 2) + i % D] = Os[i];
    for (int r = tid; r < rows; r += blockDim.x) rec[r * (D + 2) + D] = Ms[r], rec[r * (D + 2) + D + 1] = Ls[r];
    cuda__mla_merge(a, t, x, h0, rows);
}

#endif
