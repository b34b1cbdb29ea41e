/*
 * qmatvec.cu — matmul on quantised weights through the integer kernels: the activations
 * quantised once per input to 8-bit blocks (qact_kernels.h), then mmvq (qmatvec_kernels.h) for
 * decode-sized batches of up to CUDA_QGEMV_MAX_ROWS rows and mmq (qgemm_kernels.h, launched from
 * qgemm.cu) for more. The op that routes here is matmul (gemm.cu) and matmul_multi, whose
 * matrices (Q, K, V; gate, up) share one quantisation of their input when their types share a
 * block size.
 *
 * Scratch: the quantised activations (cb->qact), and for mmvq's split over the input dimension
 * its partial tiles (cb->qpart) and per-tile tickets (cb->qticket, zeroed when allocated and left
 * zeroed by every launch). cuda__qmm_note_weight records at upload what the largest quantised
 * matrix needs, and cuda__qmm_reserve allocates it before a step that may be captured into a
 * graph, where no allocation may happen.
 */
#include "cuda/internal.h"
#include "cuda/qact_kernels.h"

extern "C" {
#include "cuda/cuda_backend.h"
}
#include "cuda/qmatvec_kernels.h"

/* ---- the sm_80 kernels' launchers ---------------------------------------------------------- */

static void cuda__qact_sm80(cudaStream_t s, const void *x, int act, int n_rows, int64_t n_in, int qa, int8_t *xq,
                            float *xd)
{
    int64_t warps = (int64_t)n_rows * cuda_div_up(n_in, 256);
    unsigned g = (unsigned)cuda_div_up(warps, CUDA_QACT_THREADS / 32);
    if (act == DT_BF16)
        cuda__qact_k<<<g, CUDA_QACT_THREADS, 0, s>>>((const __nv_bfloat16 *)x, n_in, n_rows, qa, xq, xd);
    else if (act == DT_F16)
        cuda__qact_k<<<g, CUDA_QACT_THREADS, 0, s>>>((const __half *)x, n_in, n_rows, qa, xq, xd);
    else cuda__qact_k<<<g, CUDA_QACT_THREADS, 0, s>>>((const float *)x, n_in, n_rows, qa, xq, xd);
}

template <int T>
static void cuda__launch_mmvq(cudaStream_t s, const be_weight *w, const int8_t *xq, const float *xd, int n_rows,
                              const float *bias, void *out, int out_type, int split, float *part, unsigned *ticket)
{
    dim3 grid((unsigned)cuda_div_up(w->n_out, 16), (unsigned)split);
    const uint8_t *wd = (const uint8_t *)w->data;
    size_t rb = dt_row_bytes(w->type, w->n_in);
    if (out_type == DT_BF16)
        cuda__mmvq_k<T, __nv_bfloat16><<<grid, CUDA_MMVQ_WARPS * 32, 0, s>>>(
            wd, rb, w->n_in, w->n_out, xq, xd, n_rows, bias, (__nv_bfloat16 *)out, part, ticket);
    else if (out_type == DT_F16)
        cuda__mmvq_k<T, __half><<<grid, CUDA_MMVQ_WARPS * 32, 0, s>>>(wd, rb, w->n_in, w->n_out, xq, xd, n_rows,
                                                                      bias, (__half *)out, part, ticket);
    else
        cuda__mmvq_k<T, float><<<grid, CUDA_MMVQ_WARPS * 32, 0, s>>>(wd, rb, w->n_in, w->n_out, xq, xd, n_rows,
                                                                     bias, (float *)out, part, ticket);
}

void cuda__qmatvec_fill_sm80(cuda__kern *k)
{
    k->qact = cuda__qact_sm80;
    CUDA_Q_FILL(k->mmvq, cuda__launch_mmvq);
    k->qmatvec_max_rows = CUDA_QGEMV_MAX_ROWS;
}

/* ---- scratch ------------------------------------------------------------------------------ */

/* mmvq's blocks per tile for w on this GPU. */
static int cuda__mmvq_split(const cuda_backend *cb, const be_weight *w)
{
    int be = cuda_q_block_elems(w->type);
    return cuda_mmvq_split(w->n_out, w->n_in / be, be, cb->n_sm > 0 ? cb->n_sm : 1);
}

void cuda__qmm_note_weight(cuda_backend *cb, const be_weight *w)
{
    if (w->n_in > cb->qmax_n_in) cb->qmax_n_in = w->n_in;
    int split = cuda__mmvq_split(cb, w);
    size_t part = split > 1 ? (size_t)split * CUDA_QGEMV_MAX_ROWS * (size_t)w->n_out * sizeof(float) : 0;
    size_t tickets = (size_t)cuda_div_up(w->n_out, 16) * sizeof(unsigned);
    if (part > cb->qpart_need) cb->qpart_need = part;
    if (tickets > cb->qticket_need) cb->qticket_need = tickets;
}

int cuda__qmm_reserve(cuda_backend *cb, int n_rows)
{
    /* blocks of 32 need the most scales: an upper bound for every type */
    size_t act = cuda_qa_bytes(DT_Q4_0, n_rows, cb->qmax_n_in);
    int rc = cuda__grow(cb, &cb->qact, &cb->qact_bytes, act);
    if (!rc && n_rows <= cb->k.qmatvec_max_rows)
        rc = cuda__grow(cb, (void **)&cb->qpart, &cb->qpart_bytes, cb->qpart_need);
    if (!rc && cb->qticket_need > cb->qticket_bytes) {
        rc = cuda__grow(cb, (void **)&cb->qticket, &cb->qticket_bytes, cb->qticket_need);
        if (!rc) rc = CB_CHECK(cb, cudaMemsetAsync(cb->qticket, 0, cb->qticket_bytes, cb->stream));
    }
    if (!rc && n_rows > cb->k.qmatvec_max_rows && cb->qprefill_f16)
        rc = cuda__grow(cb, &cb->qtile, &cb->qtile_bytes, cb->qtile_need);
    return rc;
}

/* ---- the op -------------------------------------------------------------------------------- */

void cuda__qmatmul(cuda_backend *cb, const void *x, int act, int n_rows, int n, const be_weight *const *w,
                   const float *const *bias, void *const *out, int out_type)
{
    if (n_rows > cb->k.qmatvec_max_rows && cb->qprefill_f16 && act == cb->act) { /* the F16 tiles, to compare */
        for (int i = 0; i < n; i++) cb->k.qgemm(cb, x, n_rows, w[i], bias[i], out[i], out_type);
        return;
    }
    if (cuda__fail(cb, cuda__qmm_reserve(cb, n_rows))) return;
    int8_t *xq = (int8_t *)cb->qact;
    float *xd = (float *)((char *)cb->qact + cuda_qa_scales_offset(n_rows, w[0]->n_in));
    /* the matrices of each activation block size together, after one quantisation for them */
    const int sizes[2] = {cuda_q_act_block(w[0]->type), cuda_q_act_block(w[0]->type) == 32 ? 256 : 32};
    for (int z = 0; z < 2; z++) {
        int quantised = 0;
        for (int i = 0; i < n; i++) {
            if (cuda_q_act_block(w[i]->type) != sizes[z]) continue;
            if (!quantised) {
                cb->k.qact(cb->stream, x, act, n_rows, w[i]->n_in, sizes[z], xq, xd);
                if (CB_CHECK_LAUNCH(cb)) return;
                quantised = 1;
            }
            if (n_rows <= cb->k.qmatvec_max_rows)
                cb->k.mmvq[w[i]->type](cb->stream, w[i], xq, xd, n_rows, bias[i], out[i], out_type,
                                       cuda__mmvq_split(cb, w[i]), cb->qpart, cb->qticket);
            else cb->k.mmq[w[i]->type](cb->stream, w[i], xq, xd, n_rows, bias[i], out[i], out_type);
            if (CB_CHECK_LAUNCH(cb)) return;
        }
    }
}

extern "C" void cuda_quantise_activations(backend *be, const float *x, int n_rows, int64_t n_in, int block)
{
    cuda_backend *cb = cuda__cb(be);
    if (n_in > cb->qmax_n_in) cb->qmax_n_in = n_in;
    if (cuda__fail(cb, cuda__qmm_reserve(cb, n_rows))) return;
    float *xd = (float *)((char *)cb->qact + cuda_qa_scales_offset(n_rows, n_in));
    cb->k.qact(cb->stream, x, DT_F32, n_rows, n_in, block, (int8_t *)cb->qact, xd);
    CB_CHECK_LAUNCH(cb);
}
