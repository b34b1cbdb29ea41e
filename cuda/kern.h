/*
 * kern.h — the CUDA backend's kernel table: one per compute capability, chosen once when the
 * backend is created (cuda__kern_init, kern.cu), modelled on the CPU backend's cpu__kern
 * (cpu/internal.h). CUDA C++ only; included by cuda/internal.h, which includes engine/backend.h
 * (C) first.
 *
 * The ops (the backend's vtable, in each family's cuda/NAME.cu) do what every kernel of their
 * family shares: the graph bookkeeping, the batch metadata, the KV planes, the error record.
 * They reach the kernels only through the table's entries: launchers that queue one family's
 * kernels on a stream. Launchers take plain arguments (device pointers, shapes), not the
 * backend, so that a variant brings only its kernels; the two that need the backend's scratch
 * buffers and cuBLAS (gemm, qgemm) take it. Unless an entry says otherwise, it does not check its
 * launch: the op does (CB_CHECK_LAUNCH), so a failure is logged with the op's file and line.
 *
 * Every capability gets the sm_80 baseline (the kernels of each family's NAME_kernels.h); sm_90
 * and newer launch the dense matrix-vector kernels as programmatic dependent launches
 * (cuda__gemv_fill_sm90). KVSERVE_CUDA_CC caps the capability the table is filled for (e.g. 80
 * on an H200 runs the baseline), so that the checks can compare a variant with the baseline on
 * the GPU they run on. The build carries sm_90 code and compute_80 PTX for every file (NVCC_ARCH
 * in the Makefile), so a device below 8.0 fails at its first launch, as it always has.
 *
 * How to add a kernel (a variant for a newer GPU, or a new kind of kernel):
 *  1. The entry. Add it to struct cuda__kern below with its exact contract (shapes, what it may
 *     assume, what it writes), or reuse one. A variant that needs a different launch shape or
 *     plan (tile sizes, scratch) makes that part of its entry's contract rather than of the op.
 *     List a new entry in cuda__kern_missing (kern.cu), with which tests/test_cuda.c checks
 *     that no capability's table leaves it empty.
 *  2. The kernel. Its source goes in the family's emulable header, cuda/NAME_kernels.h, or for
 *     a variant its own header, cuda/NAME_smXX_kernels.h: plain CUDA C that the CPU emulation
 *     (cuda/check/emu_cuda.h) also compiles: the built-ins, __half / __nv_bfloat16, the helpers
 *     of cuda/device.h and the CUDA_HD headers (cuda/launch.h lists them); no runtime calls;
 *     fixed shared arrays declared static __shared__ (one array per block on the GPU, and one
 *     for all the emulated threads of a block on the CPU).
 *     Its launcher goes in cuda/NAME.cu (a variant's in cuda/NAME_smXX.cu) as a static function
 *     that the file's fill function, cuda__NAME_fill_smXX, sets in the table; declare the fill
 *     function at the end of this file. The Makefile and scripts/gpu-check.sh build every .cu
 *     file of cuda/: a new file needs no build change.
 *  3. The capability. cuda__kern_init fills the baseline (every cuda__NAME_fill_sm80), then for
 *     a device of capability cc ≥ XX calls the fill functions of the sm_XX variants, which
 *     overwrite only what they implement; an entry without a variant keeps the one below. Code
 *     that uses instructions of a newer architecture compiles only under a guard (#if
 *     __CUDA_ARCH__ >= 900: every file is also built as compute_80 PTX), and one that needs an
 *     architecture-specific target (sm_90's wgmma needs sm_90a) also needs a -gencode
 *     arch=compute_90a,code=sm_90a for its file, in the Makefile and scripts/gpu-check.sh; its
 *     fill must run only for the devices that have it.
 *  4. The tests. The kernel header's source runs under the CPU emulation against a float64 (or
 *     the host's exact) reference: a case in cuda/check/attn_emu.cc, quant_emu.cc or
 *     ops_emu.cc, or a new NAME_emu.cc with its Makefile rule, its place in scripts/gpu-check.sh
 *     --emulate and a test in tests/test_cuda_host.c that runs it, so that it runs in `make
 *     test` on every machine. On a GPU, cuda/check/kernel_checks.c compares the op with
 *     the CPU backend (make test-cuda, scripts/gpu-check.sh). A GPU runs the table of its own
 *     capability only: when a variant replaces the baseline on the GPU the checks run on, the
 *     baseline needs a way to be chosen there too (e.g. an environment variable capping the
 *     capability, as KVSERVE_CPU_ISA caps the CPU's level), added with the first variant.
 */
#ifndef KVSERVE_CUDA_KERN_H
#define KVSERVE_CUDA_KERN_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/attn_plan.h"
#include "cuda/kv_layout.h"
#include "cuda/mla_plan.h"
#include "cuda/moe_plan.h"

struct cuda_backend;
struct cuda__smp_args; /* sample_kernels.h */
struct cuda_gemv_args; /* cuda/gemv_kernels.h */
struct cuda_qkv_args;  /* cuda/fused_kernels.h */
typedef struct cuda_gemv_args cuda_gemv_args;
typedef struct cuda_qkv_args cuda_qkv_args;

/* Weight types a table can hold kernels for: indexed by enum dt_type (the quantised types). */
#define CUDA__W_TYPES 40 /* DT_N_TYPES */

typedef struct cuda__kern {
    int cc; /* the compute capability it was filled for: major × 10 + minor */

    /* Activation element types: every entry that reads or writes activations takes their type
     * (act, x_type, out_type: DT_F32 or DT_BF16, the backend's act_type, engine/backend.h) and
     * void pointers; the residual stream and logits are f32. */

    /* ---- attention (attn.cu) ---- */
    /* Causal attention of the step's planned items (cuda/attn_plan.h) over one layer's K and V
     * planes kp, vp of KV type kv_dtype (enum kv_dtype), q and out activations of type
     * a->q_type: a grid of a->splits × a->n_kv_heads × n_items blocks with smem bytes of dynamic
     * shared memory (cuda__attn_smem). Writes a->out when a->splits is 1, else the partials
     * a->part. Returns 0, or -EIO (logged) when the kernel cannot be given that much shared
     * memory; then nothing is launched. */
    int (*attention)(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, const void *kp, const void *vp,
                     int32_t n_items, size_t smem);
    /* Merges the split-K partials part [n_tokens][n_heads][splits][head_dim + 2] into out
     * [n_tokens][n_heads][head_dim] of q_type (DT_F32, DT_BF16 or DT_F16); head_sinks [n_heads]
     * (learned sink logits) or NULL. */
    void (*attn_reduce)(cudaStream_t s, const float *part, void *out, int q_type, int n_tokens, int n_heads,
                        int head_dim, int splits, const float *head_sinks);
    /* The tensor-core kernels (attn_mma.cu: prefill and mixed steps; attn_decode.cu: decode) over
     * the launch's own items (a->items, a->n_items of cuda_attn_tc_plan's kind) of KV type
     * kv_dtype (KV_F16, KV_BF16, KV_I8 or KV_FP8), head dim cuda_attn_tc_head_dim_ok, queries
     * and outputs of a->q_type: a->splits × a->n_kv_heads × a->n_items blocks (in launches of
     * at most 65,535 items) of CUDA_ATTN_TC_THREADS threads and cuda_attn_pf_smem /
     * cuda_attn_dec_smem bytes. They write a->out for their rows, merging split partitions
     * themselves through a->tc_part and a->sem (zeros, left zeros). Return 0, -EINVAL for a shape
     * they do not cover (nothing launched), or -EIO (logged) when the kernel cannot be given its
     * shared memory. NULL where a capability has no tensor-core kernels: the reference kernel
     * above then serves every step. Learned sinks (a->head_sinks) are the reference kernel's
     * alone. */
    int (*attn_prefill)(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, const void *kp, const void *vp);
    int (*attn_decode)(cudaStream_t s, const cuda__attn_args *a, int kv_dtype, const void *kp, const void *vp);

    /* ---- dense matrix-vector (gemv.cu) ---- */
    /* Matmuls of up to this many rows on F32, F16 and BF16 weights take gemv. */
    int gemv_max_rows;
    /* out = x · Wᵀ (cuda_gemv_args, gemv_kernels.h: plain with bias and soft-cap, or GLU) for
     * a->n_rows ≤ gemv_max_rows rows: W of w_type (DT_F32, DT_F16 or DT_BF16), x of x_type, out
     * of out_type; the launch shape (split-K) from cuda_gemv_plan for n_sm SMs. GLU needs
     * out_type == x_type. */
    void (*gemv)(cudaStream_t s, int w_type, int x_type, int out_type, const cuda_gemv_args *a, int n_sm);

    /* ---- dense matmul and conversions (gemm.cu) ---- */
    /* out [n_rows][n_out] = x [n_rows][n_in] · Wᵀ (+ bias [n_out], or NULL) for F32, F16 and
     * BF16 weights through cuBLAS (FP32 accumulation); x activations, out of out_type (f32 or
     * the activations'); records its own failures in cb. */
    void (*gemm)(struct cuda_backend *cb, const void *x, int n_rows, const be_weight *w, const float *bias, void *out,
                 int out_type);
    /* dst [n_rows][n_in] of dst_type (DT_F32, DT_F16 or DT_BF16) = the rows of a model tensor src
     * (row_bytes apart) of src_type (the same three). */
    void (*convert_rows)(cudaStream_t s, const void *src, int src_type, size_t row_bytes, int64_t n_in,
                         int64_t n_rows, void *dst, int dst_type);
    /* dst [n] = x [n] converted from x_type to dst_type (DT_F32, DT_F16 or DT_BF16), rounding to
     * nearest even. */
    void (*conv)(cudaStream_t s, const void *x, int x_type, void *dst, int dst_type, int64_t n);
    /* out[i] = (src ? src[i] : out[i]) + bias[i % n_out] (bias NULL: + 0) for i < n, out of
     * out_type: a GEMM's f32 product (or the output in place) with its bias. */
    void (*bias)(cudaStream_t s, const float *src, void *out, int out_type, const float *bias, int64_t n_out,
                 int64_t n);

    /* ---- quantised weights (qmatvec.cu, qgemm.cu, gather.cu) ---- */
    /* Matmuls of up to this many rows (≤ 8) take mmvq, larger ones mmq. */
    int qmatvec_max_rows;
    /* xq [n_rows][n_in] (int8, permuted blocks of 32) and xd [n_rows][n_in / qa] (f32 scales) = x
     * [n_rows][n_in] of activation type act (DT_F32, DT_BF16 or DT_F16) quantised in blocks of qa
     * = 32 or 256 (cuda/quant_int.h; n_in a multiple of qa). */
    void (*qact)(cudaStream_t s, const void *x, int act, int n_rows, int64_t n_in, int qa, int8_t *xq, float *xd);
    /* Per quantised type (cuda_q_is_quant; NULL for the others): out [n_rows][n_out] (of out_type:
     * DT_F32, DT_BF16 or DT_F16) = x · Wᵀ (+ bias, or NULL) for n_rows ≤ qmatvec_max_rows, W in
     * the file's blocks, x quantised by qact in blocks of cuda_q_act_block(type): the integer
     * matrix-vector mmvq
     * (qmatvec_kernels.h), each tile of 16 rows split over `split` blocks (cuda_mmvq_split); with
     * split > 1, part holds split × n_rows × n_out floats and ticket one zeroed counter per tile
     * (left zeroed). */
    void (*mmvq[CUDA__W_TYPES])(cudaStream_t s, const be_weight *w, const int8_t *xq, const float *xd, int n_rows,
                                const float *bias, void *out, int out_type, int split, float *part,
                                unsigned *ticket);
    /* The same for any number of rows: the integer GEMM mmq (qgemm_kernels.h). */
    void (*mmq[CUDA__W_TYPES])(cudaStream_t s, const be_weight *w, const int8_t *xq, const float *xd, int n_rows,
                               const float *bias, void *out, int out_type);
    /* The other prefill path, kept to compare against (cuda_set_quant_prefill): W decoded into F16
     * tiles that cuBLAS multiplies with x [n_rows][n_in] (activations), out of out_type; records
     * its own failures in cb. */
    void (*qgemm)(struct cuda_backend *cb, const void *x, int n_rows, const be_weight *w, const float *bias, void *out,
                  int out_type);
    /* Per quantised type: rows [r0, r0 + n_rows) of w decoded into dst [n_rows][n_in], F16 bits
     * (f16 = 1) or f32. */
    void (*qdequant[CUDA__W_TYPES])(cudaStream_t s, const be_weight *w, int64_t r0, int64_t n_rows, void *dst,
                                    int f16);
    /* Per quantised type: out [n_tokens][n_in] = the rows tokens[] of the table emb, as f32. */
    void (*qembed[CUDA__W_TYPES])(cudaStream_t s, const be_weight *emb, int n_tokens, const int32_t *tokens,
                                  float *out);

    /* ---- norms and RoPE (norm_rope.cu) ---- */
    /* out[r] = rmsnorm(h) · w for n_rows rows of dim, h the row rows[r] of x (rows NULL: row r)
     * plus, with res != NULL, the same row of res (written back to x when write_back). x is the
     * f32 residual stream when x_f32, else activations; res and out are activations (act). out
     * may equal x only without res. */
    void (*rmsnorm)(cudaStream_t s, int act, int x_f32, void *x, const void *res, const int32_t *rows, int write_back,
                    const float *w, float eps, int n_rows, int dim, void *out);
    /* Rotates the n_tokens rows of x [n_tokens][r->n_heads][r->head_dim] (activations) in place at
     * positions pos[] (device memory). r->freq_factors is ignored: ff is its device data, or
     * NULL. */
    void (*rope)(cudaStream_t s, int act, void *x, const int32_t *pos, int n_tokens, const be_rope *r,
                 const float *ff);
    /* out row t = x row t rotated by −shift[s] of its sequence s (the last s with q_start[s] ≤ t;
     * no rotation when sinks is NULL), for n_tokens rows of activations; r and ff as for rope. */
    void (*rope_shift)(cudaStream_t s, int act, const void *x, void *out, int n_tokens, const int32_t *q_start,
                       int n_seqs, const int32_t *sinks, const int32_t *shift, const be_rope *r, const float *ff);

    /* ---- KV store (kv.cu) ---- */
    /* Writes token t's rows k[t], v[t] ([n_kv_heads][head_dim] of l, activations) into the planes
     * kp, vp (KV type kv_dtype, layout l) at slots[t] (skipped when < 0), for n_tokens tokens;
     * with r->rope_dims > 0, k[t] is first rotated in place at pos[t] (r, ff as for rope). */
    void (*store_kv)(cudaStream_t s, int kv_dtype, int act, void *k, const void *v, void *kp, void *vp,
                     const int32_t *slots, const int32_t *pos, int n_tokens, const cuda_kv_layout *l,
                     const be_rope *r, const float *ff);

    /* ---- fused ops (fused.cu) ---- */
    /* The QKV epilogue (fused_kernels.h): biases, q/k norms, RoPE, q out, K/V into the cache of
     * kv_dtype, for n_tokens tokens; activations of type act. a->head_dim ≤ CUDA_QKV_MAX_HEAD_DIM. */
    void (*qkv_post)(cudaStream_t s, int kv_dtype, int act, const cuda_qkv_args *a, int n_tokens);

    /* ---- element-wise ops (elementwise.cu) ---- */
    /* x[i] = op(x[i], y[i] or sc) for i < n (enum cuda_ew_op, cuda/formats.h); x of x_type, y of
     * y_type (each DT_F32 or DT_BF16). */
    void (*ew)(cudaStream_t s, int op, int x_type, void *x, int y_type, const void *y, float sc, int64_t n);
    /* out [n_rows][n_ff] = act(g + bg) × (u + bu), rows of g and u ld apart, activations of type
     * act (cuda__glu_k). */
    void (*glu)(cudaStream_t s, int act, const void *g, const void *u, int64_t ld, int64_t n_ff, int64_t n_rows,
                const float *bg, const float *bu, int gelu, void *out);

    /* ---- row gathers (gather.cu) ---- */
    /* out [n_tokens][n_in] = the rows tokens[] of an F32, F16 or BF16 table emb, as f32. */
    void (*embed)(cudaStream_t s, const be_weight *emb, const int32_t *tokens, int n_tokens, float *out);
    /* out [n_rows][dim] = the rows rows[] of x (f32). */
    void (*gather_rows)(cudaStream_t s, const float *x, int dim, const int32_t *rows, int n_rows, float *out);

    /* ---- sampling (sample.cu) ---- */
    /* ids[j] (device memory) = the index of the largest value of row j of x [n_rows][dim], the
     * lowest on ties, 0 for a row of NaNs. */
    void (*argmax)(cudaStream_t s, const float *x, int n_rows, int dim, int32_t *ids);
    /* The rows a->rows[0 .. n_rows) of a step (engine/smp_rows.h's definition): a->ids[j] the
     * token of row j, a->lps[row.lp] the log-probs of the rows that ask (device memory); a->adj
     * [n_rows][V] is scratch for the rows that adjust their logits. n_rows ≥ 1. */
    void (*sample_rows)(cudaStream_t s, const struct cuda__smp_args *a, int32_t n_rows);
    /* tokens[i] < 0 (a reference -(1 + j)) becomes prev[j], for i < n (device memory). */
    void (*resolve_tokens)(cudaStream_t s, int32_t *tokens, int32_t n, const int32_t *prev);

    /* ---- mixture of experts (moe.cu; kernels in moe_kernels.h) ---- */
    /* Routes n_tok tokens (be_moe_route over logits [n_tok][n_expert], sel_bias or NULL): ids and
     * w [n_tok][k], and adds each token's rows to cnt[expert] (zeroed by the caller). */
    void (*moe_route)(cudaStream_t s, const be_moe_rule *r, const float *logits, const float *sel_bias, int n_tok,
                      int32_t *ids, float *w, int32_t *cnt);
    /* Groups the n_tok × k routed rows by expert: start [2 · n_expert + 2] from cnt (each expert's
     * first row, all rows, the number of experts with rows and their ids), row [n_tok][k] the
     * grouped row of each (token, j), xg [rows][dim] the tokens' inputs x [n_tok][dim] there;
     * fill [n_expert] is scratch. */
    void (*moe_group)(cudaStream_t s, const int32_t *ids, int n_tok, int k, int n_expert, const float *x, int64_t dim,
                      const int32_t *cnt, int32_t *start, int32_t *fill, int32_t *row, float *xg);
    /* Per weight type (F32, F16, BF16, the quantised ones and MXFP4): the grouped matvec of
     * cuda__moe_proj (moe_kernels.h), reading only the groups with rows; n_in % 8 == 0. */
    void (*moe_gemv[CUDA__W_TYPES])(cudaStream_t s, const cuda__moe_proj *p, const float *x, float *out);
    /* Per quantised weight type and MXFP4: the grouped integer matvec of cuda__moe_qproj
     * (moe_kernels.h) over min(n_groups, n_rows) expert slots and split blocks per tile (1 when
     * a group may have more than 8 rows). */
    void (*moe_mmvq[CUDA__W_TYPES])(cudaStream_t s, const cuda__moe_qproj *p, int split);
    /* g[i] = SiLU(g[i]) · u[i] (swiglu 0) or SwiGLU-OAI (1, alpha, limit) for i < n. */
    void (*moe_act)(cudaStream_t s, float *g, const float *u, int64_t n, int swiglu, float alpha, float limit);
    /* out [n_tok][dim] = Σ_j w[t][j] · y[row[t][j]], j in selection order. */
    void (*moe_combine)(cudaStream_t s, const float *y, const int32_t *row, const float *w, int n_tok, int k,
                        int64_t dim, float *out);
    /* x [n] (n % 32 == 0) rounded in place through llama.cpp's Q8_0 activation blocks (the
     * activations an MXFP4 product sees). */
    void (*q8h_round)(cudaStream_t s, float *x, int64_t n);

    /* ---- multi-head latent attention (mla.cu; kernels in mla_kernels.h) ---- */
    /* The latent key and every head's RoPE part of the latent query of a->n tokens (one block
     * per token, cuda__mla_prep_k). */
    void (*mla_prep)(cudaStream_t s, const cuda__mla_prep_args *a, int n_tokens);
    /* Attention over a latent KV plane kp of type kv_dtype (cuda__mla_attn_k) for n_tokens tokens;
     * 0, or -EIO when the block cannot get its shared memory (nothing launched). */
    int (*mla_attention)(cudaStream_t s, const cuda__mla_attn_args *a, int kv_dtype, const void *kp, int n_tokens);
} cuda__kern;

/* kern.cu: fills k with the kernels for a device of compute capability cc (major × 10 + minor). */
void cuda__kern_init(cuda__kern *k, int cc);
/* kern.cu: the name of an entry k leaves empty (NULL when every entry is set). */
const char *cuda__kern_missing(const cuda__kern *k);

/* Fill functions, one per file of launchers: each sets the entries its file implements. */
void cuda__attn_fill_sm80(cuda__kern *k);        /* attn.cu */
void cuda__attn_mma_fill_sm80(cuda__kern *k);    /* attn_mma.cu */
void cuda__attn_decode_fill_sm80(cuda__kern *k); /* attn_decode.cu */
void cuda__gemm_fill_sm80(cuda__kern *k);        /* gemm.cu */
void cuda__gemv_fill_sm80(cuda__kern *k);        /* gemv.cu */
void cuda__gemv_fill_sm90(cuda__kern *k);        /* gemv.cu: programmatic dependent launches */
void cuda__fused_fill_sm80(cuda__kern *k);       /* fused.cu */
void cuda__qmatvec_fill_sm80(cuda__kern *k);     /* qmatvec.cu */
void cuda__qgemm_fill_sm80(cuda__kern *k);       /* qgemm.cu */
void cuda__norm_rope_fill_sm80(cuda__kern *k);   /* norm_rope.cu */
void cuda__kv_fill_sm80(cuda__kern *k);          /* kv.cu */
void cuda__elementwise_fill_sm80(cuda__kern *k); /* elementwise.cu */
void cuda__gather_fill_sm80(cuda__kern *k);      /* gather.cu */
void cuda__sample_fill_sm80(cuda__kern *k);      /* sample.cu */
void cuda__moe_fill_sm80(cuda__kern *k);         /* moe.cu */
void cuda__mla_fill_sm80(cuda__kern *k);         /* mla.cu */

#endif
