/*
 * graph.cu — CUDA graphs for decode steps (on by default; cuda_set_graphs turns them off).
 *
 * A pure-decode step (one new token per sequence, each a logit row) of at most
 * CUDA_GRAPH_MAX_ROWS sequences is padded to its shape (cuda__graph_pad): the rows to the next
 * power of two (the padded rows are sequences of their own, with one cached entry in block 0 and
 * no KV slot, whose results nobody reads), every group's block-table stride to a power of two,
 * and attention planned for the longest context that stride allows. Every padded step runs the
 * kernels its shape implies, whether captured, replayed or eager, so a step's results do not
 * depend on whether graphs are on. The first step of a shape (after two eager steps sized every
 * buffer) is captured, later ones replay it: begin() (meta.cu) uploads the metadata and calls
 * cuda__graph_begin, the ops only count themselves (cuda__graph_skip), and to_host()/sync() call
 * cuda__graph_end, which launches the graph. The key (cuda_graph_key) holds everything the
 * kernels' arguments depend on: rows, stride, layer groups and which groups have sinks; a
 * changed KV arena (kv_init), any freed or grown device buffer drops every graph (they hold their
 * addresses). Up to CUDA_GRAPH_MAX shapes are kept, the least recently replayed replaced first.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/internal.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

void cuda__graphs_reset(cuda_backend *cb)
{
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].exec) cudaGraphExecDestroy(cb->graphs[i].exec);
    cb->n_graphs = 0;
}

/* The smallest power of two ≥ n (and ≥ 1). */
static int32_t cuda__pow2(int32_t n)
{
    int32_t p = 1;
    while (p < n) p *= 2;
    return p;
}

/* int32s the padded copy of b needs at rows rows and stride stride. */
static size_t cuda__pad_ints(const be_batch *b, int32_t rows, int32_t stride)
{
    size_t per_group = (size_t)rows * (3 + (size_t)stride + 1);
    return (size_t)rows * 4 + 1 + (size_t)(b->n_kv > 1 ? b->n_kv : 1) * per_group;
}

/* Copies n int32s of src (NULL: none) to dst and fills dst up to rows with fill. */
static int32_t *cuda__pad_arr(int32_t *dst, const int32_t *src, int32_t n, int32_t rows, int32_t fill)
{
    if (src && n > 0) memcpy(dst, src, (size_t)n * sizeof *dst);
    for (int32_t i = n; i < rows; i++) dst[i] = fill;
    return dst;
}

const be_batch *cuda__graph_pad(cuda_backend *cb, const be_batch *b)
{
    cb->padded = 0;
    if (!cuda_batch_is_pure_decode(b) || b->n_tokens > CUDA_GRAPH_MAX_ROWS) return b;
    const int32_t n = b->n_tokens, rows = cuda__pow2(n), n_kv = b->n_kv > 1 ? b->n_kv : 1;
    if (rows > cb->base.pad_rows_max) return b; /* the caller's scratch holds fewer rows */
    int32_t stride = 1;
    for (int g = 0; g < n_kv; g++) stride = b->kv[g].bt_stride > stride ? b->kv[g].bt_stride : stride;
    stride = cuda__pow2(stride);
    size_t need = cuda__pad_ints(b, rows, stride);
    if (need > cb->pad_cap) {
        int32_t *p = (int32_t *)realloc(cb->pad_buf, need * sizeof *p);
        if (!p) return NULL;
        cb->pad_buf = p;
        cb->pad_cap = need;
    }
    be_batch *p = &cb->pad;
    memset(p, 0, sizeof *p);
    int32_t *o = cb->pad_buf;
    p->n_tokens = p->n_seqs = p->n_logits = rows;
    p->tokens = cuda__pad_arr(o, b->tokens, n, rows, 0), o += rows;
    p->positions = cuda__pad_arr(o, b->positions, n, rows, 0), o += rows;
    int32_t *q_start = o, *logit_rows = o + rows + 1; /* one token per sequence, each a logit row */
    for (int32_t i = 0; i <= rows; i++) q_start[i] = i;
    for (int32_t i = 0; i < rows; i++) logit_rows[i] = i;
    p->q_start = q_start, p->logit_rows = logit_rows, o += 2 * rows + 1;
    p->n_kv = b->n_kv;
    cb->step_key = (cuda_graph_key){.rows = rows, .bt_stride = stride, .n_kv = n_kv, .sinks = 0};
    for (int g = 0; g < n_kv; g++) {
        const be_kv *v = &b->kv[g];
        be_kv *k = &p->kv[g];
        k->slots = cuda__pad_arr(o, v->slots, n, rows, -1), o += rows;      /* the padded rows store nothing */
        k->ctx_len = cuda__pad_arr(o, v->ctx_len, n, rows, 1), o += rows;   /* and read one entry of block 0 */
        for (int32_t s = 0; s < rows; s++)
            cuda__pad_arr(o + (size_t)s * stride, s < n ? v->block_table + (size_t)s * v->bt_stride : NULL,
                          s < n ? v->bt_stride : 0, stride, 0);
        k->block_table = o, o += (size_t)rows * stride;
        k->bt_stride = stride;
        if (v->sinks) {
            k->sinks = cuda__pad_arr(o, v->sinks, n, rows, 0), o += rows;
            k->sink_shift = cuda__pad_arr(o, v->sink_shift, n, rows, 0), o += rows;
            cb->step_key.sinks |= 1u << g;
        }
    }
    cb->padded = 1;
    cb->pad_stride = stride;
    return p;
}

/* A padded step can run as a graph when graphs are on and every buffer has been sized by two
 * eager steps. */
int cuda__graph_eligible(const cuda_backend *cb)
{
    return cb->graphs_on && !cb->error && cb->steps_done >= 2 && cb->model_heads > 0 && cb->kv_arena[0];
}

static int cuda__key_eq(const cuda_graph_key *a, const cuda_graph_key *b)
{
    return a->rows == b->rows && a->bt_stride == b->bt_stride && a->n_kv == b->n_kv && a->sinks == b->sinks;
}

/* Plans attention for the padded stride (so that the launch shape does not depend on the actual
 * lengths), sizes every scratch buffer for the step's rows, then for an eligible step selects the
 * captured graph of its shape or starts capturing one (in the least recently used slot when
 * every slot is taken). */
int cuda__graph_begin(cuda_backend *cb)
{
    const cuda_graph_key *key = &cb->step_key;
    int rc = 0;
    if (cb->model_heads > 0) rc = cuda__attn_plan(cb, cb->model_heads, key->bt_stride * cb->kv.block_size);
    if (!rc) rc = cuda__fused_reserve(cb, key->rows);
    if (!rc) rc = cuda__qmm_reserve(cb, key->rows); /* the quantised weights' scratch */
    if (rc || !cuda__graph_eligible(cb)) return rc;
    for (int i = 0; i < cb->n_graphs; i++)
        if (cuda__key_eq(&cb->graphs[i].key, key)) {
            cb->graph_mode = 2;
            cb->graph_slot = i;
            cb->graphs[i].last_used = cb->step_no;
            return 0;
        }
    int slot = cb->n_graphs;
    if (slot == CUDA_GRAPH_MAX) { /* replace the least recently replayed */
        slot = 0;
        for (int i = 1; i < CUDA_GRAPH_MAX; i++)
            if (cb->graphs[i].last_used < cb->graphs[slot].last_used) slot = i;
        if (cb->graphs[slot].exec) cudaGraphExecDestroy(cb->graphs[slot].exec);
        cb->graphs[slot].exec = NULL;
    }
    if (CB_CHECK(cb, cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed))) return -EIO;
    cb->graph_mode = 1;
    cb->graph_slot = slot;
    return 0;
}

/* At the end of a step (to_host or sync): finishes a capture and launches it, or launches the
 * replayed graph. 0 or -EIO. */
int cuda__graph_end(cuda_backend *cb)
{
    int mode = cb->graph_mode;
    cb->graph_mode = 0;
    if (mode == 0) {
        cb->steps_done++;
        return 0;
    }
    cuda_graph_slot *g = &cb->graphs[cb->graph_slot];
    if (mode == 1) {
        cudaGraph_t graph = NULL;
        int rc = CB_CHECK(cb, cudaStreamEndCapture(cb->stream, &graph));
        size_t nodes = 0;
        if (!rc) rc = CB_CHECK(cb, cudaGraphGetNodes(graph, NULL, &nodes));
        if (!rc) rc = CB_CHECK(cb, cudaGraphInstantiate(&g->exec, graph, 0));
        if (graph) cudaGraphDestroy(graph);
        if (rc) return -EIO;
        g->key = cb->step_key;
        g->n_ops = cb->graph_ops;
        g->n_nodes = nodes;
        g->last_used = cb->step_no;
        cb->last_graph_nodes = nodes;
        if (cb->graph_slot == cb->n_graphs) cb->n_graphs++;
    } else if (cb->graph_ops != g->n_ops) {
        fprintf(stderr, "kvserve: CUDA graph replay saw %d ops, the capture %d\n", cb->graph_ops, g->n_ops);
        return cuda__fail(cb, -EIO);
    }
    return CB_CHECK(cb, cudaGraphLaunch(g->exec, cb->stream));
}

extern "C" void cuda_set_graphs(backend *be, int on)
{
    cuda_backend *cb = cuda__cb(be);
    cb->graphs_on = on;
    if (!on) cuda__graphs_reset(cb);
}

extern "C" size_t cuda_graph_nodes(backend *be)
{
    return cuda__cb(be)->last_graph_nodes;
}
