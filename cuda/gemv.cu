/*
 * gemv.cu — the dense matrix-vector kernels' launcher (gemv_kernels.h): decode-sized matmuls
 * (up to CUDA_GEMV_MAX_ROWS rows) on F32, F16 and BF16 weights, reached through the kernel
 * table's gemv entry by matmul (gemm.cu) and the fused ops (fused.cu: the gate/up projection with
 * its activation, the LM head with its soft-cap). The launch shape comes from cuda_gemv_plan
 * (gemv_plan.h): the row bucket the kernel is instantiated for, and the split-K factor that
 * gives every SM enough warps; rows that are not whole 16-byte chunks, or unaligned pointers,
 * take the scalar kernel.
 *
 * Instantiations: weight type (3) × activation / output types ((f32, f32), (bf16, f32),
 * (bf16, bf16) plain; the two with equal types for GLU) × row bucket (1, 2, 4, 8).
 *
 * sm_90 (cuda__gemv_fill_sm90): the same kernels launched as programmatic dependent launches, so
 * that a decode step's chain of small kernels does not leave the memory idle between them: the
 * kernel before a projection lets it launch early (cuda__pdl_trigger), and the projection's first
 * weight loads are in flight before it waits for that kernel's output (cuda__pdl_wait).
 */
#include "cuda/internal.h"
#include "cuda/gemv_kernels.h"

/* 1 when a's pointers allow the 16-byte loads of the vector kernel. */
static int cuda__gemv_aligned(const cuda_gemv_args *a)
{
    uintptr_t m = (uintptr_t)a->w | (uintptr_t)a->x | (uintptr_t)(a->w2 ? a->w2 : a->w);
    return (m & 15) == 0;
}

/* One launch of the vector kernel; with pdl, as a programmatic dependent launch (sm_90): it may
 * start while the previous kernel on the stream still runs, and waits for it (cuda__pdl_wait)
 * only after its first round of weight loads. A failed launch is left in the runtime's last
 * error, which the op checks. */
template <typename W, typename X, typename O, int R, int G>
static void cuda__gemv_go(cudaStream_t s, unsigned blocks, const cuda_gemv_args &b, int pdl)
{
    if (!pdl) {
        cuda__gemv_k<W, X, O, R, G><<<blocks, CUDA_GEMV_THREADS, 0, s>>>(b);
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(CUDA_GEMV_THREADS);
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, cuda__gemv_k<W, X, O, R, G>, b);
}

template <typename W, typename X, typename O, int G>
static void cuda__gemv_launch(cudaStream_t s, const cuda_gemv_args *a, int n_sm, int pdl)
{
    if (!cuda_gemv_vector_ok(a->n_in, (int)sizeof(W)) || !cuda__gemv_aligned(a)) {
        unsigned g = (unsigned)cuda_div_up(a->n_out, CUDA_GEMV_THREADS / 32);
        cuda__gemv_scalar_k<W, X, O, G><<<g, CUDA_GEMV_THREADS, 0, s>>>(*a);
        return;
    }
    cuda_gemv_args b = *a;
    int64_t blocks;
    cuda_gemv_plan(a->n_out, a->n_in, G == 2, a->n_rows, (int)sizeof(W), n_sm, &b.ks, &blocks);
    switch (cuda_gemv_rows(a->n_rows)) {
    case 1: cuda__gemv_go<W, X, O, 1, G>(s, (unsigned)blocks, b, pdl); break;
    case 2: cuda__gemv_go<W, X, O, 2, G>(s, (unsigned)blocks, b, pdl); break;
    case 4: cuda__gemv_go<W, X, O, 4, G>(s, (unsigned)blocks, b, pdl); break;
    default: cuda__gemv_go<W, X, O, 8, G>(s, (unsigned)blocks, b, pdl); break;
    }
}

/* The weight type's launch for activations x_type and outputs out_type. */
template <typename W>
static void cuda__gemv_types(cudaStream_t s, int x_type, int out_type, const cuda_gemv_args *a, int n_sm, int pdl)
{
    const int glu = a->w2 != NULL;
    if (x_type == DT_F32) {
        if (glu) cuda__gemv_launch<W, float, float, 2>(s, a, n_sm, pdl);
        else cuda__gemv_launch<W, float, float, 1>(s, a, n_sm, pdl);
    } else if (glu) {
        cuda__gemv_launch<W, __nv_bfloat16, __nv_bfloat16, 2>(s, a, n_sm, pdl);
    } else if (out_type == DT_F32) {
        cuda__gemv_launch<W, __nv_bfloat16, float, 1>(s, a, n_sm, pdl);
    } else {
        cuda__gemv_launch<W, __nv_bfloat16, __nv_bfloat16, 1>(s, a, n_sm, pdl);
    }
}

static void cuda__gemv_any(cudaStream_t s, int w_type, int x_type, int out_type, const cuda_gemv_args *a, int n_sm,
                           int pdl)
{
    if (w_type == DT_BF16) cuda__gemv_types<__nv_bfloat16>(s, x_type, out_type, a, n_sm, pdl);
    else if (w_type == DT_F16) cuda__gemv_types<__half>(s, x_type, out_type, a, n_sm, pdl);
    else cuda__gemv_types<float>(s, x_type, out_type, a, n_sm, pdl);
}

static void cuda__gemv_sm80(cudaStream_t s, int w_type, int x_type, int out_type, const cuda_gemv_args *a, int n_sm)
{
    cuda__gemv_any(s, w_type, x_type, out_type, a, n_sm, 0);
}

/* sm_90: the same kernels as programmatic dependent launches. */
static void cuda__gemv_sm90(cudaStream_t s, int w_type, int x_type, int out_type, const cuda_gemv_args *a, int n_sm)
{
    cuda__gemv_any(s, w_type, x_type, out_type, a, n_sm, 1);
}

void cuda__gemv_fill_sm80(cuda__kern *k)
{
    k->gemv = cuda__gemv_sm80;
    k->gemv_max_rows = CUDA_GEMV_MAX_ROWS;
}

void cuda__gemv_fill_sm90(cuda__kern *k)
{
    k->gemv = cuda__gemv_sm90;
}
