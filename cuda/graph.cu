/*
 * graph.cu — CUDA graphs for decode steps (opt-in: cuda_set_graphs, KVSERVE_CUDA_GRAPHS=1).
 *
 * A pure-decode step (one new token per sequence, each a logit row) of a batch shape seen before
 * replays the graph captured the first time that shape ran: begin() (meta.cu) uploads the
 * metadata and calls cuda__graph_begin, the ops only count themselves (cuda__graph_skip), and
 * to_host()/sync() call cuda__graph_end, which launches the graph. The shape key is the number of
 * tokens and the widest block-table stride; attention is planned for the longest context that
 * stride allows, so a graph does not depend on the actual lengths. Graphs wait for two eager
 * steps (every buffer sized), and any change of device buffers (free, grow, kv_init) drops
 * every graph (cuda__graphs_reset), because the graphs hold their addresses.
 */
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

/* A step can use a graph when graphs are on, every buffer has been sized by two eager steps,
 * and it is pure decode: one new token per sequence, each of them a logit row. */
int cuda__graph_eligible(const cuda_backend *cb, const be_batch *b)
{
    if (!cb->graphs_on || cb->error || cb->steps_done < 2 || cb->model_heads <= 0 || !cb->kv_arena[0]) return 0;
    return cuda_batch_is_pure_decode(b);
}

/* The widest block-table stride of the batch's groups: the graph's shape key. */
static int32_t cuda__bt_stride(const cuda_meta_layout *L)
{
    int32_t m = 0;
    for (int g = 0; g < L->n_kv; g++) m = L->kv[g].bt_stride > m ? L->kv[g].bt_stride : m;
    return m;
}

/* Plans attention for the longest context the block table allows (so the launch shape does not
 * depend on the actual lengths), makes sure the conversion buffer and the quantised weights'
 * scratch (cuda__qmm_reserve) are large enough, then either selects the captured graph of this
 * shape or starts capturing one. */
int cuda__graph_begin(cuda_backend *cb, const be_batch *b)
{
    int32_t stride = cuda__bt_stride(&cb->meta), bound = stride * cb->kv.block_size;
    int rc = cuda__attn_plan(cb, cb->model_heads, bound);
    if (rc) return rc;
    size_t conv = (size_t)b->n_tokens * (size_t)cb->max_n_in * 2;
    rc = cuda__grow(cb, &cb->conv, &cb->conv_bytes, conv);
    if (!rc) rc = cuda__qmm_reserve(cb, b->n_tokens);
    if (rc) return rc;
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].n_tokens == b->n_tokens && cb->graphs[i].bt_stride == stride) {
            cb->graph_mode = 2;
            cb->graph_slot = i;
            return 0;
        }
    if (cb->n_graphs == CUDA_GRAPH_MAX) return 0; /* table full: run eagerly */
    if (CB_CHECK(cb, cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed))) return -EIO;
    cb->graph_mode = 1;
    cb->graph_slot = cb->n_graphs;
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
        if (!rc) rc = CB_CHECK(cb, cudaGraphInstantiate(&g->exec, graph, 0));
        if (graph) cudaGraphDestroy(graph);
        if (rc) return -EIO;
        g->n_tokens = cb->meta.n_tokens;
        g->bt_stride = cuda__bt_stride(&cb->meta);
        g->n_ops = cb->graph_ops;
        cb->n_graphs++;
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
