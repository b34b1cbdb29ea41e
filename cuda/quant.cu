/*
 * quant.cu — the CUDA backend's ops on quantised weights (Q8_0, the legacy and K-quants,
 * IQ4_NL, IQ4_XS), which keep their blocks on the device exactly as the file stores them: a
 * Q4_K_M model takes its file size of GPU memory and decode streams ~4.9 bits per weight.
 *
 *   matmul, up to CUDA_QGEMV_MAX_ROWS rows (decode)  the dequantising GEMV (quant_kernels.h)
 *   matmul, more rows (prefill)                      tiles of whole rows decoded into F16
 *                                                    (cuda_q_tile_rows, at most CUDA_Q_TILE_BYTES),
 *                                                    each multiplied by cuBLAS on tensor cores
 *                                                    into its columns of the output (FP32 accumulate)
 *   embed                                            the tokens' rows decoded to f32
 *
 * The kernels are in quant_kernels.h, where the CPU emulation (cuda/check/quant_emu.cc) runs
 * them too; the arithmetic they share with the host is in quant_formats.h.
 */
#include "cuda/internal.h"
#include "cuda/quant_kernels.h"

template <int T>
static void cuda__launch_qgemv(cudaStream_t s, const be_weight *w, const float *x, int n_rows, const float *bias,
                               float *out)
{
    unsigned g = (unsigned)cuda_div_up(w->n_out, CUDA_QGEMV_THREADS / 32);
    cuda__qgemv_k<T><<<g, CUDA_QGEMV_THREADS, 0, s>>>((const uint8_t *)w->data, dt_row_bytes(w->type, w->n_in),
                                                      w->n_in, w->n_out, x, n_rows, bias, out);
}

template <int T>
static void cuda__launch_qdeq(cudaStream_t s, const be_weight *w, int64_t r0, int64_t n_rows, void *dst, int f16)
{
    unsigned g = cuda_grid_1d(n_rows * (w->n_in / 8), CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__qdeq_k<T><<<g, CUDA_EW_THREADS, 0, s>>>((const uint8_t *)w->data, dt_row_bytes(w->type, w->n_in), w->n_in,
                                                  r0, n_rows, dst, f16);
}

template <int T>
static void cuda__launch_qembed(cudaStream_t s, const be_weight *emb, int n_tokens, const int32_t *tokens, float *out)
{
    cuda__qembed_k<T><<<n_tokens, CUDA_EW_THREADS, 0, s>>>((const uint8_t *)emb->data,
                                                           dt_row_bytes(emb->type, emb->n_in), emb->n_in, tokens, out);
}

int cuda__q_decode_rows(cuda_backend *cb, const be_weight *w, int64_t r0, int64_t n_rows, void *dst, int f16)
{
    if (!cuda_q_is_quant(w->type) || w->n_in % cuda_q_block_elems(w->type)) return -EINVAL;
    if (n_rows <= 0) return 0;
    CUDA_Q_DISPATCH(w->type, cuda__launch_qdeq, cb->stream, w, r0, n_rows, dst, f16);
    return CB_CHECK_LAUNCH(cb);
}

void cuda__q_embed(cuda_backend *cb, const be_weight *emb, int n_tokens, const int32_t *tokens, float *out)
{
    CUDA_Q_DISPATCH(emb->type, cuda__launch_qembed, cb->stream, emb, n_tokens, tokens, out);
    CB_CHECK_LAUNCH(cb);
}

/* The activations x [n_rows][n_in] as F16 in cb->conv. */
static int cuda__q_x16(cuda_backend *cb, const float *x, int64_t n)
{
    if (cuda__fail(cb, cuda__grow(cb, &cb->conv, &cb->conv_bytes, (size_t)n * 2))) return -1;
    return cuda__to_f16(cb, x, (uint16_t *)cb->conv, n);
}

void cuda__q_matmul(cuda_backend *cb, const float *x, int n_rows, const be_weight *w, const float *bias, float *out)
{
    if (n_rows <= CUDA_QGEMV_MAX_ROWS) {
        CUDA_Q_DISPATCH(w->type, cuda__launch_qgemv, cb->stream, w, x, n_rows, bias, out);
        CB_CHECK_LAUNCH(cb);
        return;
    }
    int64_t n_in = w->n_in, n_out = w->n_out;
    int64_t tile = cuda_q_tile_rows(n_in, n_out, CUDA_Q_TILE_BYTES);
    if (cuda__fail(cb, cuda__grow(cb, &cb->qtile, &cb->qtile_bytes, (size_t)tile * n_in * 2))) return;
    if (cuda__q_x16(cb, x, (int64_t)n_rows * n_in)) return;
    float alpha = 1.0f, beta = 0.0f;
    for (int64_t r0 = 0; r0 < n_out; r0 += tile) {
        int64_t m = n_out - r0 < tile ? n_out - r0 : tile;
        if (cuda__q_decode_rows(cb, w, r0, m, cb->qtile, 1)) return;
        /* out[:, r0 .. r0+m) = x · tileᵀ: column-major, the output's leading dimension n_out */
        if (CB_CHECK_BLAS(cb, cuda_blas()->gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, n_rows, (int)n_in,
                                                   &alpha, cb->qtile, CUDA_R_16F, (int)n_in, cb->conv, CUDA_R_16F,
                                                   (int)n_in, &beta, out + r0, CUDA_R_32F, (int)n_out,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
            return;
    }
    if (bias) cuda__add_bias(cb, out, bias, n_out, (int64_t)n_rows * n_out);
}
