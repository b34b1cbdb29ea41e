/*
 * moe.cu — mixtures of experts on the GPU (be_ops.moe_prepare, moe_release, moe_ffn): a layer's
 * experts get a device table of their matrices' and biases' pointers once (moe_prepare); a step
 * routes its tokens, groups the routed rows by expert and runs the three projections as grouped
 * matvecs in which an expert no token chose is not read (moe_kernels.h, through the kernel
 * table), then the weighted sum. Quantised and MXFP4 experts run on the integer path: each
 * projection's input rows quantised once to 8-bit blocks (qact), then the grouped mmvq; MXFP4
 * experts thereby see their activations as llama.cpp's 8-bit blocks. The router's logits come
 * in f32 (matmul_f32), as the CPU routes them. The other kernels compute in f32: activations of
 * another type (bf16) are converted on the way in and out (cuda__f32_parts, in the moe32
 * scratch, which mla.cu uses too).
 *
 * The step's buffers are one device allocation (moe_buf) grown to the largest step; inside a
 * CUDA graph capture it must not grow (graphs start after two eager steps of the shape, which
 * size it).
 */
#include <string.h>

#include "cuda/internal.h"
#include "cuda/moe_kernels.h"

/* A layer's device state (be_moe.extra). */
typedef struct cuda__moe_layer {
    const void **w;  /* device [3][n_expert] matrices: gate, up, down */
    const float **b; /* device [3][n_expert] biases (NULL entries), or NULL when there are none */
    int type[3];     /* each projection's weight type */
} cuda__moe_layer;

/* ---- launchers ----------------------------------------------------------------------------- */

template <int T>
static void cuda__launch_moe_gemv(cudaStream_t s, const cuda__moe_proj *p, const float *x, float *out)
{
    dim3 g((unsigned)cuda_div_up(p->n_out, CUDA_MOE_THREADS / 32), (unsigned)p->n_groups);
    cuda__moe_gemv_k<T><<<g, CUDA_MOE_THREADS, 0, s>>>(*p, x, out);
}

template <int T>
static void cuda__launch_moe_mmvq(cudaStream_t s, const cuda__moe_qproj *p, int split)
{
    int slots = p->n_groups < p->n_rows ? p->n_groups : p->n_rows;
    dim3 g((unsigned)cuda_div_up(p->n_out, 16), (unsigned)slots, (unsigned)split);
    cuda__moe_mmvq_k<T><<<g, CUDA_MMVQ_WARPS * 32, 0, s>>>(*p);
}

static void cuda__moe_route_sm80(cudaStream_t s, const be_moe_rule *r, const float *logits, const float *sel_bias,
                                 int n_tok, int32_t *ids, float *w, int32_t *cnt)
{
    cuda__moe_route_k<<<n_tok, 32, 0, s>>>(*r, logits, sel_bias, ids, w, cnt);
}

static void cuda__moe_group_sm80(cudaStream_t s, const int32_t *ids, int n_tok, int k, int n_expert, const float *x,
                                 int64_t dim, const int32_t *cnt, int32_t *start, int32_t *fill, int32_t *row,
                                 float *xg)
{
    cuda__moe_scan_k<<<1, 32, 0, s>>>(cnt, n_expert, start, fill);
    cuda__moe_scatter_k<<<n_tok * k, 128, 0, s>>>(ids, k, x, dim, fill, row, xg);
}

static void cuda__moe_act_sm80(cudaStream_t s, float *g, const float *u, int64_t n, int swiglu, float alpha,
                               float limit)
{
    cuda__moe_act_k<<<cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS), CUDA_EW_THREADS, 0, s>>>(g, u, n, swiglu,
                                                                                                    alpha, limit);
}

static void cuda__moe_combine_sm80(cudaStream_t s, const float *y, const int32_t *row, const float *w, int n_tok,
                                   int k, int64_t dim, float *out)
{
    cuda__moe_combine_k<<<n_tok, 128, 0, s>>>(y, row, w, k, dim, out);
}

static void cuda__q8h_round_sm80(cudaStream_t s, float *x, int64_t n)
{
    int64_t blocks = n / 32;
    cuda__q8h_k<<<cuda_grid_1d(blocks, 8, CUDA_EW_MAX_BLOCKS), 256, 0, s>>>(x, blocks);
}

void cuda__moe_fill_sm80(cuda__kern *k)
{
    k->moe_route = cuda__moe_route_sm80;
    k->moe_group = cuda__moe_group_sm80;
    k->moe_act = cuda__moe_act_sm80;
    k->moe_combine = cuda__moe_combine_sm80;
    k->q8h_round = cuda__q8h_round_sm80;
    k->moe_gemv[DT_F32] = cuda__launch_moe_gemv<DT_F32>;
    k->moe_gemv[DT_F16] = cuda__launch_moe_gemv<DT_F16>;
    k->moe_gemv[DT_BF16] = cuda__launch_moe_gemv<DT_BF16>;
    k->moe_gemv[DT_MXFP4] = cuda__launch_moe_gemv<DT_MXFP4>;
    CUDA_Q_FILL(k->moe_gemv, cuda__launch_moe_gemv);
    k->moe_mmvq[DT_MXFP4] = cuda__launch_moe_mmvq<DT_MXFP4>;
    CUDA_Q_FILL(k->moe_mmvq, cuda__launch_moe_mmvq);
}

/* ---- the ops ------------------------------------------------------------------------------- */

int cuda__ptr_table(cuda_backend *cb, const void *const *h, int n, void **dev)
{
    *dev = NULL;
    if (CUDA_CHECK(cudaMalloc(dev, (size_t)n * sizeof(void *)))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    if (CB_CHECK(cb, cudaMemcpy(*dev, h, (size_t)n * sizeof(void *), cudaMemcpyHostToDevice))) return -EIO;
    return 0;
}

int cuda__op_moe_prepare(backend *be, be_moe *m)
{
    cuda_backend *cb = cuda__cb(be);
    int E = m->rule.n_expert;
    const be_weight *proj[3] = {m->gate, m->up, m->down}, *bias[3] = {m->b_gate, m->b_up, m->b_down};
    if (E < 1 || E > CUDA_MOE_MAX_EXPERTS || m->gate[0].n_in % 8 || m->down[0].n_in % 8) return -EINVAL;
    cuda__moe_layer *st = (cuda__moe_layer *)calloc(1, sizeof *st);
    const void **hw = (const void **)calloc((size_t)6 * E, sizeof *hw);
    if (!st || !hw || cuda__use(cb)) {
        free(st), free(hw);
        return -ENOMEM;
    }
    int biased = 0;
    for (int p = 0; p < 3; p++) {
        st->type[p] = proj[p][0].type;
        for (int e = 0; e < E; e++) {
            if (proj[p][e].type != st->type[p] || !cb->k.moe_gemv[st->type[p]]) { /* one type per projection */
                free(st), free(hw);
                return -EINVAL;
            }
            hw[p * E + e] = proj[p][e].data;
            hw[(3 + p) * E + e] = bias[p] ? bias[p][e].data : NULL;
            biased |= bias[p] != NULL;
        }
    }
    int rc = cuda__ptr_table(cb, hw, 3 * E, (void **)&st->w);
    if (!rc && biased) rc = cuda__ptr_table(cb, hw + 3 * E, 3 * E, (void **)&st->b);
    free(hw);
    m->extra = st;
    if (rc) cuda__op_moe_release(be, m);
    return rc;
}

void cuda__op_moe_release(backend *be, be_moe *m)
{
    cuda__moe_layer *st = (cuda__moe_layer *)m->extra;
    if (!st) return;
    cuda__graphs_reset(cuda__cb(be));
    if (st->w) cudaFree((void *)st->w);
    if (st->b) cudaFree((void *)st->b);
    free(st);
    m->extra = NULL;
}

/* The step's buffers in moe_buf: ints, then floats, then the quantised activations of the
 * integer path (xq, and its scales at cuda_qa_scales_offset of the projection's n_in). */
typedef struct cuda__moe_bufs {
    int32_t *ids, *row, *cnt, *start, *fill;
    unsigned *ticket; /* [E][⌈max(dim, ff) / 16⌉], zeroed with cnt */
    float *w, *xg, *g, *u, *y, *part;
    int8_t *xq;
} cuda__moe_bufs;

/* Tiles of 16 outputs of the widest projection. */
static int64_t cuda__moe_tiles(int64_t dim, int64_t ff)
{
    return cuda_div_up(dim > ff ? dim : ff, 16);
}

/* Bytes of the split partials of the integer matvec for R rows (at most 8 tokens). */
static size_t cuda__moe_part_bytes(int64_t R, int64_t dim, int64_t ff)
{
    return (size_t)CUDA_MMVQ_MAX_SPLIT * (size_t)R * (size_t)(dim > ff ? dim : ff) * 4;
}

/* Bytes of the step's buffers for R routed rows, without the split partials. */
static size_t cuda__moe_bytes(int64_t R, int E, int64_t dim, int64_t ff)
{
    size_t ints = (size_t)(2 * R + 4 * E + 2 + 64) + (size_t)E * (size_t)cuda__moe_tiles(dim, ff);
    size_t floats = (size_t)(R + 2 * R * dim + 2 * R * ff + 64);
    return ints * 4 + floats * 4 + cuda_qa_bytes(DT_Q4_0, R, dim > ff ? dim : ff) + 3 * 256;
}

static int cuda__moe_bufs_get(cuda_backend *cb, int64_t R, int E, int64_t dim, int64_t ff, size_t part,
                              cuda__moe_bufs *b)
{
    size_t bytes = cuda__moe_bytes(R, E, dim, ff) + part;
    if (bytes > cb->moe_bytes && cb->graph_mode) return -EIO; /* cuda__moe_reserve sized it */
    if (cuda__grow(cb, &cb->moe_buf, &cb->moe_bytes, bytes)) return -ENOMEM;
    int32_t *i = (int32_t *)cb->moe_buf;
    b->ids = i, b->row = i + R, b->cnt = i + 2 * R, b->ticket = (unsigned *)(b->cnt + E);
    b->start = (int32_t *)(b->ticket + (size_t)E * cuda__moe_tiles(dim, ff)), b->fill = b->start + 2 * E + 2;
    float *f = (float *)(((uintptr_t)(b->fill + E) + 255) & ~(uintptr_t)255);
    b->w = f, b->xg = f + R, b->g = b->xg + R * dim, b->u = b->g + R * ff, b->y = b->u + R * ff;
    b->part = part ? b->y + R * dim : NULL;
    b->xq = (int8_t *)(((uintptr_t)(b->y + R * dim + part / 4) + 255) & ~(uintptr_t)255);
    return 0;
}

/* One projection of every chosen expert's rows on the integer path: x [R][n_in] quantised to
 * b->xq unless *quantised already holds it in this block size (gate and up share one), then the
 * grouped mmvq, split over the input dimension when n_tok ≤ 8 (one pass per group). */
static void cuda__moe_qproj_run(cuda_backend *cb, const cuda__moe_layer *st, int p, const be_weight *w0, int E,
                                const cuda__moe_bufs *b, int64_t R, int n_tok, int k, const float *x,
                                int *quantised, float *out)
{
    int type = st->type[p], qa = cuda_q_act_block(type);
    float *xd = (float *)(b->xq + cuda_qa_scales_offset(R, w0->n_in));
    if (*quantised != qa) {
        cb->k.qact(cb->stream, x, DT_F32, (int)R, w0->n_in, qa, b->xq, xd);
        *quantised = qa;
    }
    cuda__moe_qproj q;
    memset(&q, 0, sizeof q);
    q.w = st->w + (size_t)p * E;
    q.b = st->b ? st->b + (size_t)p * E : NULL;
    q.start = b->start;
    q.n_groups = E, q.n_rows = (int)R;
    q.n_in = w0->n_in, q.n_out = w0->n_out;
    q.row_bytes = dt_row_bytes(type, w0->n_in);
    q.xq = b->xq, q.xd = xd, q.out = out, q.part = b->part, q.ticket = b->ticket;
    int split = 1;
    if (b->part) { /* at most n_tok ≤ 8 rows a group; about as many experts active as routed rows */
        int active = E < n_tok * k ? E : n_tok * k;
        split = cuda_mmvq_split(w0->n_out * active, w0->n_in / cuda_q_block_elems(type), cuda_q_block_elems(type),
                                cb->n_sm > 0 ? cb->n_sm : 1);
    }
    cb->k.moe_mmvq[type](cb->stream, &q, split);
}

/* One projection of every chosen expert's rows: x [R][n_in] → out [R][n_out]. */
static void cuda__moe_proj_run(cuda_backend *cb, const cuda__moe_layer *st, int p, const be_weight *w0, int E,
                               const int32_t *start, const float *x, float *out)
{
    cuda__moe_proj pr;
    memset(&pr, 0, sizeof pr);
    pr.w = st->w + (size_t)p * E;
    pr.b = st->b ? st->b + (size_t)p * E : NULL;
    pr.start = start;
    pr.n_groups = E;
    pr.n_in = w0->n_in, pr.n_out = w0->n_out;
    pr.row_bytes = dt_row_bytes(w0->type, w0->n_in);
    pr.x_stride = w0->n_in, pr.o_stride = w0->n_out;
    cb->k.moe_gemv[st->type[p]](cb->stream, &pr, x, out);
}

/* The experts' part of a step whose rows b->xg are grouped (b->start): gate and up, the
 * activation into b->g, down into b->y. */
static void cuda__moe_experts(cuda_backend *cb, const cuda__moe_layer *st, const be_moe *m, const cuda__moe_bufs *pb,
                              int64_t R, int n_rows)
{
    cuda__moe_bufs b = *pb;
    cudaStream_t s = cb->stream;
    int E = m->rule.n_expert, k = m->rule.n_used;
    int64_t ff = m->gate[0].n_out;
    const be_weight *w0[3] = {&m->gate[0], &m->up[0], &m->down[0]};
    float *outs[3] = {b.g, b.u, b.y};
    int quantised = 0, rounded = 0; /* xq's block size for the current input (0: none); in q8h-rounded */
    for (int p = 0; p < 3; p++) {
        float *in = p < 2 ? b.xg : b.g;
        if (p == 2) {
            cb->k.moe_act(s, b.g, b.u, R * ff, m->act == MODEL_ACT_SWIGLU_OAI, m->alpha, m->limit);
            quantised = rounded = 0;
        }
        if (cb->k.moe_mmvq[st->type[p]]) {
            cuda__moe_qproj_run(cb, st, p, w0[p], E, pb, R, n_rows, k, in, &quantised, outs[p]);
            continue;
        }
        if (st->type[p] == DT_MXFP4 && !rounded) { /* the f32 kernel on MXFP4 reads rounded inputs */
            cb->k.q8h_round(s, in, R * w0[p]->n_in);
            rounded = 1;
        }
        cuda__moe_proj_run(cb, st, p, w0[p], E, b.start, in, outs[p]);
    }
}

void cuda__op_moe_ffn(backend *be, const void *x_act, int n_rows, const void *logits_f32, const be_moe *m,
                      void *out_act)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb) || n_rows <= 0 || cb->error) return;
    const cuda__moe_layer *st = (const cuda__moe_layer *)m->extra;
    int E = m->rule.n_expert, k = m->rule.n_used;
    int64_t R = (int64_t)n_rows * k, dim = m->gate[0].n_in, ff = m->gate[0].n_out;
    cuda__moe_bufs b;
    size_t one = cuda__moe_bytes(k, E, dim, ff); /* a row's share, bounding any step's per row */
    size_t part_most = cuda__moe_part_bytes((int64_t)CUDA_QGEMV_MAX_ROWS * k, dim, ff);
    if (one > cb->moe_row_bytes) cb->moe_row_bytes = one;
    if (part_most > cb->moe_part_bytes) cb->moe_part_bytes = part_most;
    size_t part_bytes = n_rows <= CUDA_QGEMV_MAX_ROWS ? cuda__moe_part_bytes(R, dim, ff) : 0;
    if (!st || cuda__fail(cb, cuda__moe_bufs_get(cb, R, E, dim, ff, part_bytes, &b))) return;
    /* the kernels compute in f32: the input converted, the output converted back; the router's
     * logits come in f32 (matmul_f32), so that the routing sees what the CPU's does */
    const size_t n[2] = {(size_t)n_rows * dim, (size_t)n_rows * dim};
    const void *from[2] = {x_act, NULL};
    float *part[2];
    if (cuda__f32_parts(cb, n_rows, 2, n, from, part)) return;
    const float *x = part[0], *logits = (const float *)logits_f32;
    float *out = cb->act == DT_F32 ? (float *)out_act : part[1];
    cudaStream_t s = cb->stream;
    /* the counts and the integer path's tickets, adjacent */
    if (CB_CHECK(cb, cudaMemsetAsync(b.cnt, 0, (size_t)E * (1 + cuda__moe_tiles(dim, ff)) * 4, s))) return;
    cb->k.moe_route(s, &m->rule, logits, m->sel_bias ? (const float *)m->sel_bias->data : NULL, n_rows, b.ids, b.w,
                    b.cnt);
    cb->k.moe_group(s, b.ids, n_rows, k, E, x, dim, b.cnt, b.start, b.fill, b.row, b.xg);
    cuda__moe_experts(cb, st, m, &b, R, n_rows);
    cb->k.moe_combine(s, b.y, b.row, b.w, n_rows, k, dim, out);
    if (CB_CHECK_LAUNCH(cb)) return;
    cuda__f32_to_act(cb, out, out_act, n[1]);
}

int cuda__moe_reserve(cuda_backend *cb, int rows)
{
    size_t part = rows <= CUDA_QGEMV_MAX_ROWS ? cb->moe_part_bytes : 0;
    if (cb->moe_row_bytes &&
        cuda__grow(cb, &cb->moe_buf, &cb->moe_bytes, (size_t)rows * cb->moe_row_bytes + part))
        return -ENOMEM;
    if (cb->moe32_row_floats && !cuda__scratch(cb, &cb->moe32, (size_t)rows * cb->moe32_row_floats * 4))
        return -ENOMEM;
    return 0;
}

int cuda__f32_parts(cuda_backend *cb, int rows, int n_parts, const size_t *n, const void *const *from,
                    float **part)
{
    size_t need = 0; /* every part, as a bound per row for cuda__moe_reserve */
    for (int i = 0; i < n_parts; i++) need += (n[i] + 63) / 64 * 64;
    need = (need + (size_t)rows - 1) / (size_t)rows + 64 * (size_t)n_parts;
    if (need > cb->moe32_row_floats) cb->moe32_row_floats = need;
    if (cb->act == DT_F32) { /* the activations are f32 already; outputs get scratch of their own */
        size_t total = 0;
        for (int i = 0; i < n_parts; i++) total += from[i] ? 0 : (n[i] + 63) / 64 * 64;
        char *p = total ? (char *)cuda__scratch(cb, &cb->moe32, total * 4) : NULL;
        if (total && !p) return -1;
        for (int i = 0; i < n_parts; i++) {
            part[i] = from[i] ? (float *)from[i] : (float *)p;
            if (!from[i]) p += (n[i] + 63) / 64 * 64 * 4;
        }
        return 0;
    }
    size_t total = 0;
    for (int i = 0; i < n_parts; i++) total += (n[i] + 63) / 64 * 64;
    char *p = (char *)cuda__scratch(cb, &cb->moe32, total * 4);
    if (!p) return -1;
    for (int i = 0; i < n_parts; i++) {
        part[i] = (float *)p;
        p += (n[i] + 63) / 64 * 64 * 4;
        if (from[i] && n[i]) cb->k.conv(cb->stream, from[i], cb->act, part[i], DT_F32, (int64_t)n[i]);
    }
    return CB_CHECK_LAUNCH(cb) ? -1 : 0;
}

void cuda__f32_to_act(cuda_backend *cb, const float *x, void *out, int64_t n)
{
    if (cb->act == DT_F32 && (const void *)x == out) return;
    if (cb->act == DT_F32) {
        CB_CHECK(cb, cudaMemcpyAsync(out, x, (size_t)n * 4, cudaMemcpyDeviceToDevice, cb->stream));
        return;
    }
    cb->k.conv(cb->stream, x, DT_F32, out, cb->act, n);
    CB_CHECK_LAUNCH(cb);
}

extern "C" int cuda_moe_bench_experts(backend *be, const be_moe *ms, int n_layers, int n_rows, int reps, double *us)
{
    cuda_backend *cb = cuda__cb(be);
    const be_moe *m = &ms[0];
    int E = m->rule.n_expert, k = m->rule.n_used;
    for (int i = 0; i < n_layers; i++)
        if (!ms[i].extra || ms[i].rule.n_expert != E || ms[i].rule.n_used != k ||
            ms[i].gate[0].n_in != m->gate[0].n_in || ms[i].gate[0].n_out != m->gate[0].n_out)
            return -EINVAL;
    int64_t R = (int64_t)n_rows * k, dim = m->gate[0].n_in, ff = m->gate[0].n_out;
    size_t part_bytes = n_rows <= CUDA_QGEMV_MAX_ROWS ? cuda__moe_part_bytes(R, dim, ff) : 0;
    cuda__moe_bufs b;
    if (n_layers <= 0 || n_rows <= 0 || reps <= 0 || cb->graph_mode || cb->error) return -EINVAL;
    if (cuda__moe_bytes(R, E, dim, ff) + part_bytes > cb->moe_bytes) return -EINVAL; /* no step of n_rows ran */
    cuda__moe_bufs_get(cb, R, E, dim, ff, part_bytes, &b);
    cudaStream_t s = cb->stream;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float t[5];
    int rc = CB_CHECK(cb, cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed)) ? -EIO : 0;
    for (int i = 0; i < reps && !rc; i++) {
        const be_moe *mi = &ms[i % n_layers];
        cuda__moe_experts(cb, (const cuda__moe_layer *)mi->extra, mi, &b, R, n_rows);
    }
    if (!rc && CB_CHECK(cb, cudaStreamEndCapture(s, &g))) rc = -EIO;
    if (!rc && CB_CHECK(cb, cudaGraphInstantiate(&ge, g, 0))) rc = -EIO;
    if (!rc && (CB_CHECK(cb, cudaEventCreate(&e0)) || CB_CHECK(cb, cudaEventCreate(&e1)))) rc = -EIO;
    for (int r = -1; r < 5 && !rc; r++) { /* one replay to warm up, then five timed */
        if (CB_CHECK(cb, cudaEventRecord(e0, s)) || CB_CHECK(cb, cudaGraphLaunch(ge, s)) ||
            CB_CHECK(cb, cudaEventRecord(e1, s)) || CB_CHECK(cb, cudaEventSynchronize(e1)) ||
            (r >= 0 && CB_CHECK(cb, cudaEventElapsedTime(&t[r], e0, e1))))
            rc = -EIO;
    }
    if (!rc) {
        for (int i = 1; i < 5; i++) /* insertion sort for the median */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                float x = t[j];
                t[j] = t[j - 1], t[j - 1] = x;
            }
        *us = 1e3 * t[2] / reps;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    return rc;
}
