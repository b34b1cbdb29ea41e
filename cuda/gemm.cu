/*
 * gemm.cu — matmul (engine/backend.h) and the conversions around it. Routing: quantised weights
 * go to the integer path (cuda__qmatmul, qmatvec.cu: activations quantised to 8-bit blocks, then
 * the matvec mmvq for decode-sized batches or the GEMM mmq for more rows; matmul_multi shares one
 * quantisation between its matrices); F32, F16 and BF16 weights go to the dense GEMM
 * (gemm), which is cuBLAS: a GEMM with FP32 accumulation, the activations converted to the
 * weight's 16-bit type first. The kernels here (gemm_kernels.h) convert activations, add biases,
 * and convert a model tensor's rows between f32, f16 and bf16 when weights are uploaded.
 */
#include "cuda/internal.h"
#include "cuda/gemm_kernels.h"
#include "cuda/quant_formats.h"

/* ---- the sm_80 kernels' launchers ---------------------------------------------------------- */

static void cuda__convert_rows_sm80(cudaStream_t s, const void *src, int src_type, size_t row_bytes, int64_t n_in,
                                    int64_t n_rows, void *dst, int dst_type)
{
    int64_t n = n_in * n_rows;
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__convert_k<<<g, CUDA_EW_THREADS, 0, s>>>((const uint8_t *)src, src_type, row_bytes, n_in, n, dst, dst_type);
}

static void cuda__to16_sm80(cudaStream_t s, const float *x, void *dst, int dst_type, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    if (dst_type == DT_BF16) cuda__to16_k<<<g, CUDA_EW_THREADS, 0, s>>>(x, (__nv_bfloat16 *)dst, n);
    else cuda__to16_k<<<g, CUDA_EW_THREADS, 0, s>>>(x, (__half *)dst, n);
}

static void cuda__add_bias_sm80(cudaStream_t s, float *out, const float *bias, int64_t n_out, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__bias_k<<<g, CUDA_EW_THREADS, 0, s>>>(out, bias, n_out, n);
}

/* out[r][o] = Σ_i x[r][i] W[o][i]. Row-major W [n_out][n_in] is the column-major n_in × n_out
 * matrix, so in cuBLAS terms out (n_out × n_rows, column-major) = Wᵀ · x. 16-bit weights get the
 * activations converted to the same type (cuBLAS wants A and B alike); accumulation is FP32. */
static void cuda__gemm_sm80(cuda_backend *cb, const float *x, int n_rows, const be_weight *w, const float *bias,
                            float *out)
{
    int m = (int)w->n_out, k = (int)w->n_in;
    float alpha = 1.0f, beta = 0.0f;
    const void *B = x;
    cudaDataType_t t = CUDA_R_32F;
    if (w->type != DT_F32) {
        int64_t n = (int64_t)n_rows * k;
        if (cuda__fail(cb, cuda__grow(cb, &cb->conv, &cb->conv_bytes, (size_t)n * 2))) return;
        t = w->type == DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        cb->k.to16(cb->stream, x, cb->conv, w->type == DT_BF16 ? DT_BF16 : DT_F16, n);
        if (CB_CHECK_LAUNCH(cb)) return;
        B = cb->conv;
    }
    if (CB_CHECK_BLAS(cb, cuda_blas()->gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n_rows, k, &alpha, w->data, t,
                                               k, B, t, k, &beta, out, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT)))
        return;
    if (bias) cuda__add_bias(cb, out, bias, m, (int64_t)n_rows * m);
}

void cuda__gemm_fill_sm80(cuda__kern *k)
{
    k->gemm = cuda__gemm_sm80;
    k->convert_rows = cuda__convert_rows_sm80;
    k->to16 = cuda__to16_sm80;
    k->add_bias = cuda__add_bias_sm80;
}

/* ---- conversions ------------------------------------------------------------------------- */

int cuda__convert_rows(cuda_backend *cb, const void *src, int src_type, size_t row_bytes, int64_t n_in,
                       int64_t n_rows, void *dst, int dst_type)
{
    if (src_type != DT_F32 && src_type != DT_F16 && src_type != DT_BF16) return -EINVAL;
    if (n_in * n_rows <= 0) return 0;
    cb->k.convert_rows(cb->stream, src, src_type, row_bytes, n_in, n_rows, dst, dst_type);
    return CB_CHECK_LAUNCH(cb);
}

int cuda__to_f16(cuda_backend *cb, const float *x, uint16_t *dst, int64_t n)
{
    cb->k.to16(cb->stream, x, dst, DT_F16, n);
    return CB_CHECK_LAUNCH(cb);
}

void cuda__add_bias(cuda_backend *cb, float *out, const float *bias, int64_t n_out, int64_t n)
{
    cb->k.add_bias(cb->stream, out, bias, n_out, n);
    CB_CHECK_LAUNCH(cb);
}

/* ---- matmul ------------------------------------------------------------------------------ */

/* out = x · Wᵀ (+ bias): quantised weights through the integer path (mmvq up to the table's
 * qmatvec_max_rows rows, mmq beyond: cuda__qmatmul), the others through the dense GEMM. */
void cuda__op_matmul(backend *be, const float *x, int n_rows, const be_weight *w, const be_weight *bias, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0) return;
    if (w->n_in > cb->max_n_in) cb->max_n_in = w->n_in;
    const float *b = bias && bias->data ? (const float *)bias->data : NULL;
    if (!cuda_q_is_quant(w->type)) cb->k.gemm(cb, x, n_rows, w, b, out);
    else cuda__qmatmul(cb, x, DT_F32, n_rows, 1, &w, &b, (void *const *)&out);
}

void cuda__op_matmul_multi(backend *be, const float *x, int n_rows, int n, const be_weight *const *w,
                           const be_weight *const *bias, float *const *out)
{
    cuda_backend *cb = cuda__cb(be);
    int all_quant = n <= BE_MATMUL_MULTI_MAX;
    for (int i = 0; i < n && all_quant; i++) all_quant = cuda_q_is_quant(w[i]->type) && w[i]->n_in == w[0]->n_in;
    if (!all_quant) {
        for (int i = 0; i < n; i++) cuda__op_matmul(be, x, n_rows, w[i], bias[i], out[i]);
        return;
    }
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0) return;
    if (w[0]->n_in > cb->max_n_in) cb->max_n_in = w[0]->n_in;
    const float *b[BE_MATMUL_MULTI_MAX];
    for (int i = 0; i < n; i++) b[i] = bias[i] && bias[i]->data ? (const float *)bias[i]->data : NULL;
    cuda__qmatmul(cb, x, DT_F32, n_rows, n, w, b, (void *const *)out);
}
