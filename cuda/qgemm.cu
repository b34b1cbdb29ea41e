/*
 * qgemm.cu — matmul on quantised weights for more rows than the matvec takes (prefill): the
 * integer tensor-core GEMM mmq of qgemm_kernels.h, on activations the op (qmatvec.cu) quantised
 * to 8-bit blocks. The other path is kept to compare against (cuda_set_quant_prefill): the matrix
 * decoded into F16 tiles of whole rows (cuda_q_tile_rows, at most CUDA_Q_TILE_BYTES) that cuBLAS
 * multiplies on tensor cores (FP32 accumulation), one tile at a time.
 */
#include "cuda/internal.h"
#include "cuda/qgemm_kernels.h"

template <int T>
static void cuda__launch_mmq(cudaStream_t s, const be_weight *w, const int8_t *xq, const float *xd, int n_rows,
                             const float *bias, void *out, int out_type)
{
    dim3 grid((unsigned)cuda_div_up(w->n_out, CUDA_MMQ_BM), (unsigned)cuda_div_up(n_rows, CUDA_MMQ_BN));
    const uint8_t *wd = (const uint8_t *)w->data;
    size_t rb = dt_row_bytes(w->type, w->n_in);
    if (out_type == DT_BF16)
        cuda__mmq_k<T, __nv_bfloat16><<<grid, CUDA_MMQ_THREADS, 0, s>>>(wd, rb, w->n_in, w->n_out, xq, xd, n_rows,
                                                                        bias, (__nv_bfloat16 *)out);
    else if (out_type == DT_F16)
        cuda__mmq_k<T, __half><<<grid, CUDA_MMQ_THREADS, 0, s>>>(wd, rb, w->n_in, w->n_out, xq, xd, n_rows, bias,
                                                                 (__half *)out);
    else
        cuda__mmq_k<T, float><<<grid, CUDA_MMQ_THREADS, 0, s>>>(wd, rb, w->n_in, w->n_out, xq, xd, n_rows, bias,
                                                                (float *)out);
}

template <int T>
static void cuda__launch_qdeq(cudaStream_t s, const be_weight *w, int64_t r0, int64_t n_rows, void *dst, int f16)
{
    unsigned g = cuda_grid_1d(n_rows * (w->n_in / 8), CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__qdeq_k<T><<<g, CUDA_EW_THREADS, 0, s>>>((const uint8_t *)w->data, dt_row_bytes(w->type, w->n_in), w->n_in,
                                                  r0, n_rows, dst, f16);
}

/* Rows [r0, r0 + n_rows) of w into dst as F16 bits (f16 = 1) or f32, through the table's
 * qdequant. 0, -EINVAL (not a quantised type) or -EIO. */
static int cuda__q_decode_rows(cuda_backend *cb, const be_weight *w, int64_t r0, int64_t n_rows, void *dst, int f16)
{
    if (!cuda_q_is_quant(w->type) || w->n_in % cuda_q_block_elems(w->type)) return -EINVAL;
    if (n_rows <= 0) return 0;
    cb->k.qdequant[w->type](cb->stream, w, r0, n_rows, dst, f16);
    return CB_CHECK_LAUNCH(cb);
}

/* out = x · Wᵀ (+ bias, or NULL), one F16 tile of W at a time, the activations converted to F16
 * (cuBLAS wants A and B alike) and, for an output of another type than f32, the f32 product
 * written through mm32 a chunk of rows at a time and converted with the bias. */
static void cuda__qgemm_sm80(cuda_backend *cb, const void *x, int n_rows, const be_weight *w, const float *bias,
                             void *out, int out_type)
{
    int64_t n_in = w->n_in, n_out = w->n_out;
    int64_t tile = cuda_q_tile_rows(n_in, n_out, CUDA_Q_TILE_BYTES);
    if (cuda__fail(cb, cuda__grow(cb, &cb->qtile, &cb->qtile_bytes, (size_t)tile * n_in * 2))) return;
    const int direct = out_type == DT_F32;
    const int64_t rc = direct ? n_rows : cuda__mm32_rows(n_out);
    const size_t xs = cb->act == DT_F32 ? 4 : 2, os = out_type == DT_F32 ? 4 : 2;
    float alpha = 1.0f, beta = 0.0f;
    for (int64_t c0 = 0; c0 < n_rows; c0 += rc) {
        int64_t nr = n_rows - c0 < rc ? n_rows - c0 : rc;
        if (cuda__fail(cb, cuda__grow(cb, &cb->conv, &cb->conv_bytes, (size_t)nr * n_in * 2))) return;
        if (cuda__conv(cb, (const char *)x + (size_t)c0 * n_in * xs, cb->act, cb->conv, DT_F16, nr * n_in)) return;
        float *C = direct ? (float *)out + c0 * n_out : (float *)cuda__scratch(cb, &cb->mm32, (size_t)nr * n_out * 4);
        if (!C) return;
        for (int64_t r0 = 0; r0 < n_out; r0 += tile) {
            int64_t m = n_out - r0 < tile ? n_out - r0 : tile;
            if (cuda__q_decode_rows(cb, w, r0, m, cb->qtile, 1)) return;
            /* C[:, r0 .. r0+m) = x · tileᵀ: column-major, the output's leading dimension n_out */
            if (CB_CHECK_BLAS(cb, cuda_blas()->gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)nr, (int)n_in,
                                                       &alpha, cb->qtile, CUDA_R_16F, (int)n_in, cb->conv, CUDA_R_16F,
                                                       (int)n_in, &beta, C + r0, CUDA_R_32F, (int)n_out,
                                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
                return;
        }
        if (!direct) cuda__add_bias(cb, C, (char *)out + (size_t)c0 * n_out * os, out_type, bias, n_out, nr * n_out);
    }
    if (direct && bias) cuda__add_bias(cb, NULL, out, DT_F32, bias, n_out, (int64_t)n_rows * n_out);
}

void cuda__qgemm_fill_sm80(cuda__kern *k)
{
    CUDA_Q_FILL(k->mmq, cuda__launch_mmq);
    CUDA_Q_FILL(k->qdequant, cuda__launch_qdeq);
    k->qgemm = cuda__qgemm_sm80;
}
