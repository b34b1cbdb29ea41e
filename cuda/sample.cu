/*
 * sample.cu — sampling on the device (engine/backend.h's sample op): the step's rows
 * (engine/smp_rows.h) uploaded with their arena, one block of cuda__sample_k per row
 * (sample_kernels.h), and only the tokens and the requested log-probs copied back, into one of
 * two pinned result slots; the token references of the next batch resolved on the device from the
 * latest slot's ids; and greedy argmax of logit rows (cuda_argmax_rows).
 *
 * Nothing here waits for the device but sample_wait (the event recorded after a slot's copy
 * back): buffers grow with the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync) or,
 * for the pinned ones, only when a step is larger than any before.
 *
 * Invariants: last is the slot of the latest sample (-1 before the first) and res_dev[last]
 * begins with its n_rows[last] ids; a slot's pinned upload and results are not written again
 * before that slot was waited for (the engine alternates slots and collects each before reusing
 * it).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/internal.h"
#include "cuda/sample_kernels.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

struct cuda__smp {
    char *up_host[2];      /* per slot: pinned [rows | arena] */
    size_t up_host_cap[2];
    char *up_dev;          /* the device copy (stream order protects it) */
    size_t up_dev_cap;
    char *res_dev[2];      /* per slot: [ids (8-byte padded) | smp_result lps] */
    size_t res_dev_cap[2];
    char *res_host[2];     /* per slot: the pinned copy back */
    size_t res_host_cap[2];
    size_t ids_bytes[2];
    int32_t n_rows[2];
    cudaEvent_t done[2];   /* recorded after each slot's copy back */
    float *adj;            /* [rows][V] the adjusted rows */
    size_t adj_cap;        /* bytes */
    int last;
};

static void cuda__sample_rows_sm80(cudaStream_t s, const cuda__smp_args *a, int32_t n_rows)
{
    cuda__sample_k<<<n_rows, CUDA_SMP_THREADS, 0, s>>>(*a);
}

static void cuda__resolve_tokens_sm80(cudaStream_t s, int32_t *tokens, int32_t n, const int32_t *prev)
{
    cuda__resolve_tokens_k<<<cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS), CUDA_EW_THREADS, 0, s>>>(tokens, n,
                                                                                                           prev);
}

static void cuda__argmax_sm80(cudaStream_t s, const float *x, int n_rows, int dim, int32_t *ids)
{
    cuda__argmax_k<<<n_rows, 1024, 0, s>>>(x, dim, ids);
}

void cuda__sample_fill_sm80(cuda__kern *k)
{
    k->argmax = cuda__argmax_sm80;
    k->sample_rows = cuda__sample_rows_sm80;
    k->resolve_tokens = cuda__resolve_tokens_sm80;
}

void cuda__smp_free(cuda_backend *cb)
{
    cuda__smp *m = cb->smp;
    if (!m) return;
    for (int k = 0; k < 2; k++) {
        if (m->up_host[k]) cudaFreeHost(m->up_host[k]);
        if (m->res_host[k]) cudaFreeHost(m->res_host[k]);
        if (m->res_dev[k]) cudaFree(m->res_dev[k]);
        if (m->done[k]) cudaEventDestroy(m->done[k]);
    }
    if (m->up_dev) cudaFree(m->up_dev);
    if (m->adj) cudaFree(m->adj);
    free(m);
    cb->smp = NULL;
}

/* The sampler's state, made at the first call. NULL on failure. */
static cuda__smp *cuda__smp_state(cuda_backend *cb)
{
    if (cb->smp) return cb->smp;
    cuda__smp *m = (cuda__smp *)calloc(1, sizeof *m);
    if (!m) return NULL;
    m->last = -1;
    cb->smp = m;
    for (int k = 0; k < 2; k++)
        if (CB_CHECK(cb, cudaEventCreateWithFlags(&m->done[k], cudaEventDisableTiming))) {
            cuda__smp_free(cb);
            return NULL;
        }
    return m;
}

/* Grows a device buffer on the stream (its old contents are not kept). 0 or -ENOMEM. */
static int cuda__grow_async(cuda_backend *cb, char **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap) return 0;
    size_t want = bytes + bytes / 2 + 4096;
    char *q = NULL;
    if (CUDA_CHECK(cudaMallocAsync((void **)&q, want, cb->stream))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    if (*p) CB_CHECK(cb, cudaFreeAsync(*p, cb->stream));
    *p = q;
    *cap = want;
    return 0;
}

/* Grows a pinned host buffer (only ever when a step is larger than any before). 0 or -ENOMEM. */
static int cuda__grow_pinned(cuda_backend *cb, char **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap) return 0;
    size_t want = bytes + bytes / 2 + 4096;
    char *q = NULL;
    if (CUDA_CHECK(cudaHostAlloc((void **)&q, want, cudaHostAllocDefault))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    if (*p) CB_CHECK(cb, cudaFreeHost(*p));
    *p = q;
    *cap = want;
    return 0;
}

int cuda__op_sample(backend *be, const float *logits, const smp_batch *sb, int slot)
{
    cuda_backend *cb = cuda__cb(be);
    if (slot < 0 || slot > 1 || cuda__use(cb) || cuda__graph_end(cb) || cb->error) return -EIO;
    cuda__smp *m = cuda__smp_state(cb);
    if (!m || CB_CHECK(cb, cudaEventSynchronize(m->done[slot]))) return -EIO; /* done already: the slot was collected */
    size_t rows_b = (size_t)sb->n_rows * sizeof(smp_row), arena_b = (size_t)sb->n_arena * sizeof(int32_t);
    size_t ids_b = ((size_t)sb->n_rows * sizeof(int32_t) + 15) & ~(size_t)15;
    size_t res_b = ids_b + (size_t)sb->n_lp * sizeof(smp_result);
    size_t adj_b = (size_t)sb->n_rows * (size_t)sb->n_vocab * sizeof(float);
    if (cuda__grow_pinned(cb, &m->up_host[slot], &m->up_host_cap[slot], rows_b + arena_b) ||
        cuda__grow_pinned(cb, &m->res_host[slot], &m->res_host_cap[slot], res_b) ||
        cuda__grow_async(cb, &m->up_dev, &m->up_dev_cap, rows_b + arena_b) ||
        cuda__grow_async(cb, &m->res_dev[slot], &m->res_dev_cap[slot], res_b) ||
        cuda__grow_async(cb, (char **)&m->adj, &m->adj_cap, adj_b))
        return -EIO;
    const int32_t *prev = m->last >= 0 ? (const int32_t *)m->res_dev[m->last] : NULL;
    if (sb->n_rows > 0) {
        memcpy(m->up_host[slot], sb->rows, rows_b);
        memcpy(m->up_host[slot] + rows_b, sb->arena, arena_b);
        if (CB_CHECK(cb, cudaMemcpyAsync(m->up_dev, m->up_host[slot], rows_b + arena_b, cudaMemcpyHostToDevice,
                                         cb->stream)))
            return -EIO;
        cuda__smp_args a = {(const smp_row *)m->up_dev, (const int32_t *)(m->up_dev + rows_b), logits, sb->n_vocab,
                            prev, m->adj, (int32_t *)m->res_dev[slot], (smp_result *)(m->res_dev[slot] + ids_b)};
        cb->k.sample_rows(cb->stream, &a, sb->n_rows);
        if (CB_CHECK_LAUNCH(cb)) return -EIO;
        if (CB_CHECK(cb, cudaMemcpyAsync(m->res_host[slot], m->res_dev[slot], res_b, cudaMemcpyDeviceToHost,
                                         cb->stream)))
            return -EIO;
    }
    if (CB_CHECK(cb, cudaEventRecord(m->done[slot], cb->stream))) return -EIO;
    m->ids_bytes[slot] = ids_b;
    m->n_rows[slot] = sb->n_rows;
    m->last = slot;
    return 0;
}

int cuda__op_sample_wait(backend *be, int slot, const int32_t **ids, const smp_result **lps)
{
    cuda_backend *cb = cuda__cb(be);
    cuda__smp *m = cb->smp;
    if (!m || slot < 0 || slot > 1 || CB_CHECK(cb, cudaEventSynchronize(m->done[slot]))) return -EIO;
    *ids = (const int32_t *)m->res_host[slot];
    *lps = (const smp_result *)(m->res_host[slot] + m->ids_bytes[slot]);
    return cb->error;
}

int cuda__resolve_refs(cuda_backend *cb, const be_batch *b, int32_t *tokens_dev)
{
    int32_t n_rows = -1;
    for (int32_t i = 0; b->tokens && i < b->n_tokens; i++) {
        if (b->tokens[i] >= 0) continue;
        if (n_rows < 0) n_rows = cb->smp && cb->smp->last >= 0 ? cb->smp->n_rows[cb->smp->last] : 0;
        if (-1 - b->tokens[i] >= n_rows) return -EINVAL;
    }
    if (n_rows < 0) return 0; /* no references */
    cb->k.resolve_tokens(cb->stream, tokens_dev, b->n_tokens, (const int32_t *)cb->smp->res_dev[cb->smp->last]);
    return CB_CHECK_LAUNCH(cb) ? -EIO : 0;
}

extern "C" int cuda_argmax_rows(backend *be, const float *x, int n_rows, int dim, int32_t *ids)
{
    cuda_backend *cb = cuda__cb(be);
    if (n_rows <= 0) return cb->error;
    int32_t *d = NULL;
    if (CB_CHECK(cb, cudaMallocAsync((void **)&d, (size_t)n_rows * sizeof(int32_t), cb->stream))) return -EIO;
    cb->k.argmax(cb->stream, x, n_rows, dim, d);
    CB_CHECK_LAUNCH(cb);
    CB_CHECK(cb, cudaMemcpyAsync(ids, d, (size_t)n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost, cb->stream));
    CB_CHECK(cb, cudaFreeAsync(d, cb->stream));
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}
