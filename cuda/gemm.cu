/*
 * gemm.cu — matmul (engine/backend.h) and the conversions around it. Routing: quantised weights
 * go to the quantised matvec for decode-sized batches (qmatvec.cu) and to the quantised GEMM for
 * more rows (qgemm.cu); F32, F16 and BF16 weights go to cuBLAS (a GEMM with FP32 accumulation,
 * the activations converted to the weight's 16-bit type first). The kernels here
 * (gemm_kernels.h) convert activations, add biases, and convert a model tensor's rows between
 * f32, f16 and bf16 when weights are uploaded.
 */
#include "cuda/internal.h"
#include "cuda/gemm_kernels.h"
#include "cuda/quant_formats.h"

/* ---- conversions ------------------------------------------------------------------------- */

int cuda__convert_rows(cuda_backend *cb, const void *src, int src_type, size_t row_bytes, int64_t n_in,
                       int64_t n_rows, void *dst, int dst_type)
{
    if (src_type != DT_F32 && src_type != DT_F16 && src_type != DT_BF16) return -EINVAL;
    int64_t n = n_in * n_rows;
    if (n <= 0) return 0;
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__convert_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>((const uint8_t *)src, src_type, row_bytes, n_in, n, dst,
                                                           dst_type);
    return CB_CHECK_LAUNCH(cb);
}

int cuda__to_f16(cuda_backend *cb, const float *x, uint16_t *dst, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__to16_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(x, (__half *)dst, n);
    return CB_CHECK_LAUNCH(cb);
}

void cuda__add_bias(cuda_backend *cb, float *out, const float *bias, int64_t n_out, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__bias_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(out, bias, n_out, n);
    CB_CHECK_LAUNCH(cb);
}

/* ---- matmul ------------------------------------------------------------------------------ */

/* out[r][o] = Σ_i x[r][i] W[o][i]. Row-major W [n_out][n_in] is the column-major n_in × n_out
 * matrix, so in cuBLAS terms out (n_out × n_rows, column-major) = Wᵀ · x. 16-bit weights get the
 * activations converted to the same type (cuBLAS wants A and B alike); accumulation is FP32.
 * Quantised weights go to the quantised matvec (up to CUDA_QGEMV_MAX_ROWS rows: decode) or the
 * quantised GEMM (qmatvec.cu, qgemm.cu). */
void cuda__op_matmul(backend *be, const float *x, int n_rows, const be_weight *w, const be_weight *bias, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0) return;
    int m = (int)w->n_out, k = (int)w->n_in;
    if (w->n_in > cb->max_n_in) cb->max_n_in = w->n_in;
    if (cuda_q_is_quant(w->type)) {
        const float *b = bias && bias->data ? (const float *)bias->data : NULL;
        if (n_rows <= CUDA_QGEMV_MAX_ROWS) cuda__qmatvec(cb, x, n_rows, w, b, out);
        else cuda__qgemm(cb, x, n_rows, w, b, out);
        return;
    }
    float alpha = 1.0f, beta = 0.0f;
    const void *B = x;
    cudaDataType_t t = CUDA_R_32F;
    if (w->type != DT_F32) {
        int64_t n = (int64_t)n_rows * k;
        if (cuda__fail(cb, cuda__grow(cb, &cb->conv, &cb->conv_bytes, (size_t)n * 2))) return;
        unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
        if (w->type == DT_BF16) {
            t = CUDA_R_16BF;
            cuda__to16_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(x, (__nv_bfloat16 *)cb->conv, n);
        } else {
            t = CUDA_R_16F;
            cuda__to16_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(x, (__half *)cb->conv, n);
        }
        if (CB_CHECK_LAUNCH(cb)) return;
        B = cb->conv;
    }
    if (CB_CHECK_BLAS(cb, cuda_blas()->gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n_rows, k, &alpha, w->data, t,
                                               k, B, t, k, &beta, out, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT)))
        return;
    if (bias && bias->data) cuda__add_bias(cb, out, (const float *)bias->data, m, (int64_t)n_rows * m);
}
