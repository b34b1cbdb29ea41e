/*
 * gemm.cu — matmul (engine/backend.h) and the conversions around it. Routing (cuda__matmul):
 *   - quantised weights: the integer path (cuda__qmatmul, qmatvec.cu): the activations quantised
 *     to 8-bit blocks, then the matvec mmvq up to qmatvec_max_rows rows (decode) or the GEMM mmq
 *     for more (prefill); matmul_multi shares one quantisation between its matrices;
 *   - F32, F16 and BF16 weights: the matrix-vector kernels up to gemv_max_rows rows (gemv.cu),
 *     cuBLAS for more (gemm here): FP32 accumulation, the activations converted to the weight's
 *     type first where they differ (bf16 activations and bf16 weights go straight in), the output
 *     written by cuBLAS in its type where cuBLAS can (f32, or bf16 from bf16 weights), else the
 *     f32 product in row chunks of at most CUDA_MM32_BYTES converted with the bias.
 * The kernels here (gemm_kernels.h) convert activations, add biases, and convert a model tensor's
 * rows between f32, f16 and bf16 when weights are uploaded.
 */
#include "cuda/internal.h"
#include "cuda/gemm_kernels.h"
#include "cuda/gemv_kernels.h"
#include "cuda/quant_formats.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* ---- the sm_80 kernels' launchers ---------------------------------------------------------- */

static void cuda__convert_rows_sm80(cudaStream_t s, const void *src, int src_type, size_t row_bytes, int64_t n_in,
                                    int64_t n_rows, void *dst, int dst_type)
{
    int64_t n = n_in * n_rows;
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__convert_k<<<g, CUDA_EW_THREADS, 0, s>>>((const uint8_t *)src, src_type, row_bytes, n_in, n, dst, dst_type);
}

template <typename S>
static void cuda__conv_to(cudaStream_t s, const S *x, void *dst, int dst_type, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    if (dst_type == DT_BF16) cuda__conv_k<<<g, CUDA_EW_THREADS, 0, s>>>(x, (__nv_bfloat16 *)dst, n);
    else if (dst_type == DT_F16) cuda__conv_k<<<g, CUDA_EW_THREADS, 0, s>>>(x, (__half *)dst, n);
    else cuda__conv_k<<<g, CUDA_EW_THREADS, 0, s>>>(x, (float *)dst, n);
}

static void cuda__conv_sm80(cudaStream_t s, const void *x, int x_type, void *dst, int dst_type, int64_t n)
{
    if (x_type == DT_BF16) cuda__conv_to(s, (const __nv_bfloat16 *)x, dst, dst_type, n);
    else cuda__conv_to(s, (const float *)x, dst, dst_type, n);
}

static void cuda__bias_sm80(cudaStream_t s, const float *src, void *out, int out_type, const float *bias,
                            int64_t n_out, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    if (out_type == DT_BF16) cuda__bias_k<<<g, CUDA_EW_THREADS, 0, s>>>(src, (__nv_bfloat16 *)out, bias, n_out, n);
    else cuda__bias_k<<<g, CUDA_EW_THREADS, 0, s>>>(src, (float *)out, bias, n_out, n);
}

static cudaDataType_t cuda__blas_type(int dt)
{
    return dt == DT_BF16 ? CUDA_R_16BF : dt == DT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* out[r][o] = Σ_i x[r][i] W[o][i]. Row-major W [n_out][n_in] is the column-major n_in × n_out
 * matrix, so in cuBLAS terms out (n_out × n_rows, column-major) = Wᵀ · x. cuBLAS wants A and B of
 * one type: activations of another type than W's are converted first. C is written directly when
 * cuBLAS has the output's type for W's (f32 always, bf16 from bf16); else the f32 product goes
 * through mm32, a chunk of rows at a time, and the bias kernel converts it. */
static void cuda__gemm_sm80(cuda_backend *cb, const void *x, int n_rows, const be_weight *w, const float *bias,
                            void *out, int out_type)
{
    const int m = (int)w->n_out, k = (int)w->n_in, wt = w->type;
    const cudaDataType_t t = cuda__blas_type(wt);
    const int direct = out_type == DT_F32 || out_type == wt, convert = cb->act != wt;
    const size_t xs = cb->act == DT_F32 ? 4 : 2, ws = wt == DT_F32 ? 4 : 2, os = out_type == DT_F32 ? 4 : 2;
    const int64_t rc = direct ? n_rows : cuda__mm32_rows(m);
    float alpha = 1.0f, beta = 0.0f;
    for (int64_t r0 = 0; r0 < n_rows; r0 += rc) {
        int64_t nr = n_rows - r0 < rc ? n_rows - r0 : rc;
        const void *B = (const char *)x + (size_t)r0 * k * xs;
        if (convert) {
            if (cuda__fail(cb, cuda__grow(cb, &cb->conv, &cb->conv_bytes, (size_t)nr * k * ws))) return;
            if (cuda__conv(cb, B, cb->act, cb->conv, wt, nr * k)) return;
            B = cb->conv;
        }
        void *C = direct ? (char *)out + (size_t)r0 * m * os : cuda__scratch(cb, &cb->mm32, (size_t)nr * m * 4);
        if (!C) return;
        cudaDataType_t ct = direct ? cuda__blas_type(out_type) : CUDA_R_32F;
        if (CB_CHECK_BLAS(cb, cuda_blas()->gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, (int)nr, k, &alpha, w->data, t,
                                                   k, B, t, k, &beta, C, ct, m, CUBLAS_COMPUTE_32F,
                                                   CUBLAS_GEMM_DEFAULT)))
            return;
        if (!direct) cuda__add_bias(cb, (const float *)C, (char *)out + (size_t)r0 * m * os, out_type, bias, m, nr * m);
    }
    if (direct && bias) cuda__add_bias(cb, NULL, out, out_type, bias, m, (int64_t)n_rows * m);
}

void cuda__gemm_fill_sm80(cuda__kern *k)
{
    k->gemm = cuda__gemm_sm80;
    k->convert_rows = cuda__convert_rows_sm80;
    k->conv = cuda__conv_sm80;
    k->bias = cuda__bias_sm80;
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

int cuda__conv(cuda_backend *cb, const void *x, int x_type, void *dst, int dst_type, int64_t n)
{
    cb->k.conv(cb->stream, x, x_type, dst, dst_type, n);
    return CB_CHECK_LAUNCH(cb);
}

void cuda__add_bias(cuda_backend *cb, const float *src, void *out, int out_type, const float *bias, int64_t n_out,
                    int64_t n)
{
    cb->k.bias(cb->stream, src, out, out_type, bias, n_out, n);
    CB_CHECK_LAUNCH(cb);
}

int64_t cuda__mm32_rows(int64_t n_out)
{
    int64_t r = (int64_t)(CUDA_MM32_BYTES / ((size_t)n_out * 4));
    if (r > 64) r = r / 64 * 64; /* whole tiles of the GEMM */
    return r < 1 ? 1 : r;
}

/* ---- matmul ------------------------------------------------------------------------------ */

/* 1 when the matrix-vector kernels take a dense matmul of n_rows rows. */
static int cuda__gemv_takes(const cuda_backend *cb, const be_weight *w, int n_rows)
{
    return n_rows <= cb->k.gemv_max_rows && (w->type == DT_F32 || w->type == DT_F16 || w->type == DT_BF16);
}

void cuda__matmul(cuda_backend *cb, const void *x, int n_rows, const be_weight *w, const float *bias, void *out,
                  int out_type, float softcap)
{
    if (n_rows <= 0 || cb->error) return;
    if (w->n_in > cb->max_n_in) cb->max_n_in = w->n_in;
    if (w->n_out > cb->max_n_out) cb->max_n_out = w->n_out;
    int capped = 0;
    if (cuda_q_is_quant(w->type)) {
        cuda__qmatmul(cb, x, cb->act, n_rows, 1, &w, &bias, (void *const *)&out, out_type);
    } else if (cuda__gemv_takes(cb, w, n_rows)) {
        cuda_gemv_args a;
        memset(&a, 0, sizeof a);
        a.w = w->data, a.n_in = w->n_in, a.n_out = w->n_out, a.x = x, a.n_rows = n_rows, a.bias = bias;
        a.out = out, a.softcap = softcap;
        cb->k.gemv(cb->stream, w->type, cb->act, out_type, &a, cb->n_sm);
        CB_CHECK_LAUNCH(cb);
        capped = 1;
    } else {
        cb->k.gemm(cb, x, n_rows, w, bias, out, out_type);
    }
    if (softcap > 0 && !capped) {
        cb->k.ew(cb->stream, CUDA_EW_SOFTCAP, out_type, out, out_type, NULL, softcap, (int64_t)n_rows * w->n_out);
        CB_CHECK_LAUNCH(cb);
    }
}

void cuda__op_matmul(backend *be, const void *x, int n_rows, const be_weight *w, const be_weight *bias, void *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (w->type == DT_MXFP4) { /* MXFP4 is an expert type here: moe_ffn multiplies it (moe.cu) */
        cuda__fail(cb, -EINVAL);
        return;
    }
    cuda__matmul(cb, x, n_rows, w, bias && bias->data ? (const float *)bias->data : NULL, out, cb->act, 0.0f);
}

/* matmul with an f32 output: the kernels' output type f32 (the router's logits). */
void cuda__op_matmul_f32(backend *be, const void *x, int n_rows, const be_weight *w, const be_weight *bias,
                         float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (w->type == DT_MXFP4) {
        cuda__fail(cb, -EINVAL);
        return;
    }
    cuda__matmul(cb, x, n_rows, w, bias && bias->data ? (const float *)bias->data : NULL, out, DT_F32, 0.0f);
}

/* matmul_multi: quantised matrices of one input width share one quantisation of x
 * (cuda__qmatmul); any other mix runs as matmul, one matrix at a time. */
void cuda__op_matmul_multi(backend *be, const void *x, int n_rows, int n, const be_weight *const *w,
                           const be_weight *const *bias, void *const *out)
{
    cuda_backend *cb = cuda__cb(be);
    int all_quant = n <= BE_MATMUL_MULTI_MAX;
    for (int i = 0; i < n && all_quant; i++) all_quant = cuda_q_is_quant(w[i]->type) && w[i]->n_in == w[0]->n_in;
    if (!all_quant) {
        for (int i = 0; i < n; i++) cuda__op_matmul(be, x, n_rows, w[i], bias[i], out[i]);
        return;
    }
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0 || cb->error) return;
    if (w[0]->n_in > cb->max_n_in) cb->max_n_in = w[0]->n_in;
    const float *b[BE_MATMUL_MULTI_MAX];
    for (int i = 0; i < n; i++) b[i] = bias[i] && bias[i]->data ? (const float *)bias[i]->data : NULL;
    cuda__qmatmul(cb, x, cb->act, n_rows, n, w, b, out, cb->act);
}

/* ---- random weights on the device (cuda_backend.h) ------------------------------------------ */

extern "C" int cuda_fill_random(backend *be, void *dst, size_t n, int type, uint64_t seed, float scale)
{
    cuda_backend *cb = cuda__cb(be);
    if (type != DT_F32 && type != DT_F16 && type != DT_BF16) return -EINVAL;
    if (cuda__use(cb)) return -EIO;
    unsigned g = cuda_grid_1d((int64_t)n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__random_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(dst, type, (int64_t)n, seed, scale);
    if (CB_CHECK_LAUNCH(cb) || CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}

extern "C" void *cuda_stream_of(backend *be)
{
    return (void *)cuda__cb(be)->stream;
}
