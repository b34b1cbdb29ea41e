/*
 * qmatvec.cu — matmul on quantised weights for decode-sized batches (up to CUDA_QGEMV_MAX_ROWS
 * rows): the dequantising GEMV of qmatvec_kernels.h, which reads the weights' blocks as the file
 * stores them (a Q4_K_M model streams ~4.9 bits per weight per step) and decodes them in
 * registers. The op that routes here is matmul (gemm.cu), through the kernel table.
 */
#include "cuda/internal.h"
#include "cuda/qmatvec_kernels.h"

template <int T, typename X, typename O>
static void cuda__launch_qgemv_xo(cudaStream_t s, const be_weight *w, const X *x, int n_rows, const float *bias,
                                  O *out)
{
    unsigned g = (unsigned)cuda_div_up(w->n_out, CUDA_QGEMV_THREADS / 32);
    cuda__qgemv_k<T><<<g, CUDA_QGEMV_THREADS, 0, s>>>((const uint8_t *)w->data, dt_row_bytes(w->type, w->n_in),
                                                      w->n_in, w->n_out, x, n_rows, bias, out);
}

/* The activation and output types: f32 / f32, bf16 / f32 (the fused QKV's products), bf16 / bf16. */
template <int T>
static void cuda__launch_qgemv(cudaStream_t s, const be_weight *w, const void *x, int x_type, int n_rows,
                               const float *bias, void *out, int out_type)
{
    if (x_type == DT_F32)
        cuda__launch_qgemv_xo<T>(s, w, (const float *)x, n_rows, bias, (float *)out);
    else if (out_type == DT_F32)
        cuda__launch_qgemv_xo<T>(s, w, (const __nv_bfloat16 *)x, n_rows, bias, (float *)out);
    else
        cuda__launch_qgemv_xo<T>(s, w, (const __nv_bfloat16 *)x, n_rows, bias, (__nv_bfloat16 *)out);
}

void cuda__qmatvec_fill_sm80(cuda__kern *k)
{
    CUDA_Q_FILL(k->qmatvec, cuda__launch_qgemv);
    k->qmatvec_max_rows = CUDA_QGEMV_MAX_ROWS;
}
