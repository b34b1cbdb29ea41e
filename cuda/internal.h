/*
 * internal.h — the CUDA backend's state and the functions shared between the cuda/ .cu files
 * (CUDA C++ only; symbols use the cuda__ prefix), grouped by the file that defines them: one
 * launcher file per op family (see the list at the top of cuda/cuda_backend.cu). The vtable's ops
 * are cuda__op_NAME, with the contract of be_ops.NAME (engine/backend.h); they reach their
 * kernels through the backend's kernel table, cb->k (kern.h).
 *
 * Ownership: cuda_backend_create allocates one cuda_backend; destroy frees every device and pinned
 * buffer it holds. Errors: the first failing CUDA/cuBLAS call of an op is logged (errors.h) and
 * recorded in cb->error; sync and to_host then return -EIO. A sticky device error cannot be
 * cleared, so the engine treats -EIO as a process error.
 */
#ifndef KVSERVE_CUDA_INTERNAL_H
#define KVSERVE_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* model/dtype.h is C11: let C++ read its static assertion. */
#define _Static_assert static_assert
extern "C" {
#include "engine/backend.h"
#include "model/dtype.h"
}
#undef _Static_assert

#include "cuda/attn_plan.h"
#include "cuda/errors.h"
#include "cuda/formats.h"
#include "cuda/kern.h"
#include "cuda/kv_layout.h"
#include "cuda/launch.h"
#include "cuda/meta.h"

/* Captured decode graphs kept at once (least recently replayed dropped first). */
#define CUDA_GRAPH_MAX 64
/* The largest decode batch that is padded to a captured shape (buckets 1, 2, 4, ..., 256). */
#define CUDA_GRAPH_MAX_ROWS 256

/* The shape a captured decode step is keyed by: everything its kernels' arguments depend on. */
typedef struct cuda_graph_key {
    int32_t rows;       /* padded batch size (a power of two ≤ CUDA_GRAPH_MAX_ROWS) */
    int32_t bt_stride;  /* padded block-table stride of every group (a power of two) */
    int32_t n_kv;       /* layer groups in the batch */
    uint32_t sinks;     /* bit g: group g's view has attention sinks (rope_shift runs) */
} cuda_graph_key;

/* One captured decode step. */
typedef struct cuda_graph_slot {
    cuda_graph_key key;
    int n_ops;            /* ops in the captured step (replays must match) */
    uint64_t last_used;   /* the step it last ran in (the least recent is replaced first) */
    size_t n_nodes;       /* nodes of the graph: kernels (cuBLAS's included) and copies */
    cudaGraphExec_t exec;
} cuda_graph_slot;

/* The most bytes of f32 product one chunk of a converted GEMM writes (cuda_backend.mm32). */
#define CUDA_MM32_BYTES ((size_t)64 << 20)

/* A device scratch buffer that grows. */
typedef struct cuda_scratch {
    void *p;
    size_t bytes;
} cuda_scratch;

typedef struct cuda_backend {
    backend base;         /* first: a backend * is a cuda_backend * */
    int device;
    int n_sm;             /* multiprocessors */
    size_t smem_optin;    /* largest dynamic shared memory one block may opt into (bytes) */
    size_t l2_bytes;      /* L2 cache size */
    int act;              /* the activations' element type (base.act_type): DT_BF16, or DT_F32 */
    cudaStream_t stream;  /* every op runs on this one stream, in call order */
    cublasHandle_t blas;
    void *blas_ws;        /* cuBLAS workspace we own, so captured GEMMs never allocate */
    int error;            /* 0, or -EIO after the first failed call (sticky) */
    cuda__kern k;         /* the kernels of this device's compute capability (kern.h) */

    /* KV arena (kv_init): one allocation per layer group, each [its layers][2][n_blocks][n_kv_heads]
     * [tile] (kv_layout.h); every group shares the tile shape */
    cuda_kv_layout kv;    /* the shape (n_kv_heads, head_dim, block_size, tile_extra); n_layers all
                             layers, n_blocks group 0's */
    int kv_dtype;         /* enum kv_dtype */
    int kv_groups;        /* layer groups */
    cuda_kv_layout kvg[KV_MAX_GROUPS]; /* each group's layout (its layers, its blocks) */
    void *kv_arena[KV_MAX_GROUPS];
    int32_t kv_blocks[KV_MAX_GROUPS];  /* n_blocks of each group */
    uint8_t kv_group[KV_MAX_LAYERS];   /* group of each layer */
    int kv_index[KV_MAX_LAYERS];       /* place of each layer among its group's */

    /* Batch metadata (begin): packed int32s, pinned on the host and mirrored on the device. The
     * attention items follow the metadata at offset meta.total. meta_done is recorded after every
     * upload, and waited for before the pinned buffer is written again. */
    int32_t *meta_host;
    int32_t *meta_dev;
    size_t meta_cap;      /* int32s in both buffers */
    cudaEvent_t meta_done;
    cuda_meta_layout meta;
    const be_batch *batch; /* borrowed until the next begin (or &pad) */
    int have_batch;

    /* A pure-decode step padded to its graph shape (begin, graph.cu): the padded batch and the
     * host arrays it points into */
    be_batch pad;
    int32_t *pad_buf;
    size_t pad_cap;       /* int32s in pad_buf */
    int padded;           /* 1: this step runs padded (batch is &pad) */
    int32_t pad_stride;   /* the padded block-table stride of this step */

    /* Attention plan of the current batch (made at its first attention call) */
    int attn_heads;       /* n_heads the plan was made for; 0 = not planned this step */
    int32_t attn_items;   /* work items (sequence, first token, n tokens) */
    int attn_tile_tokens;
    int attn_splits;
    int32_t attn_part;    /* keys per split */
    float *attn_scratch;  /* split partials: the reference kernel's [n_tokens][n_heads][splits]
                             [head_dim + 2], or the tensor-core kernels' (cuda_attn_tc) */
    size_t attn_scratch_floats;
    /* The tensor-core kernels (attn.cu chooses them per KV geometry, meta.cu plans per step) */
    int attn_tc;          /* 1: they serve this KV geometry (cuda__attn_choose) */
    int attn_force;       /* 0 auto, 1 the reference kernel only, 2 tensor cores where they fit */
    int attn_said;        /* 1 + the choice last printed (0: none yet) */
    int attn_step_tc;     /* this step's plan is the tensor-core one (attn_tcp) */
    cuda_attn_tc attn_tcp;
    int32_t *attn_sem;    /* [items][n_kv_heads] split counters, zero between launches */
    size_t attn_sem_bytes;

    /* Activations converted to a weight's type for cuBLAS */
    void *conv;
    size_t conv_bytes;
    int64_t max_n_in;     /* largest matmul input width seen (sizes conv before a capture) */
    int64_t max_n_out;    /* largest matmul output width seen (sizes mm32) */

    /* Scratch of the matmuls and fused ops (grown before a capture for its rows, fused.cu):
     * a GEMM's f32 product in row chunks of at most CUDA_MM32_BYTES (outputs of another type
     * than the product's), the QKV products [rows][q + 2 kv] f32, a stacked gate/up product
     * [rows][2 n_ff] (when no GLU matrix-vector kernel takes it), the normed logit rows */
    cuda_scratch mm32, qkv32, glu, lmx;
    int64_t max_qkv_cols, max_glu_cols, max_lm_dim; /* the widest of each seen */

    /* Quantised weights' F16-tile prefill (qgemm.cu, with qprefill_f16): one F16 tile of whole
     * rows; qtile_need is the largest tile of the uploaded matrices */
    void *qtile;
    size_t qtile_bytes, qtile_need;
    int qprefill_f16;     /* 1: prefill through F16 tiles and cuBLAS instead of mmq */

    /* Quantised weights' integer path (qmatvec.cu): the activations quantised to 8-bit blocks,
     * mmvq's split partials and per-tile tickets (zeroed); the _need sizes and qmax_n_in are the
     * largest of the uploaded matrices (cuda__qmm_note_weight) */
    void *qact;
    size_t qact_bytes;
    float *qpart;
    size_t qpart_bytes, qpart_need;
    unsigned *qticket;
    size_t qticket_bytes, qticket_need;
    int64_t qmax_n_in;

    /* CUDA graphs for decode steps (on by default; cuda_set_graphs). A decode-only step is padded
     * to its shape (rows to a power of two, the block-table stride to a power of two) and, once
     * that shape has been captured, replayed: begin() uploads the metadata, the ops only count
     * themselves, to_host()/sync() launch the graph. Any change of device buffers (free, grow,
     * kv_init) drops every graph. */
    int graphs_on;
    int graph_mode;       /* 0 eager, 1 capturing this step, 2 replaying this step */
    int graph_slot;       /* the slot being captured or replayed */
    int graph_ops;        /* ops called this step */
    int steps_done;       /* eager steps completed (graphs wait for two, so every buffer is sized) */
    uint64_t step_no;     /* steps begun */
    int model_heads;      /* n_heads the attention op was called with, 0 until the first call */
    int n_graphs;
    cuda_graph_key step_key; /* the key of a padded step */
    size_t last_graph_nodes; /* nodes of the graph the last captured step made */
    cuda_graph_slot graphs[CUDA_GRAPH_MAX];

    /* Mixtures of experts and latent attention (moe.cu, mla.cu): one step's routing, grouped rows
     * and expert results (moe_buf); f32 copies of those ops' activations, whose kernels compute
     * in f32 (moe32) */
    void *moe_buf;
    size_t moe_bytes;
    cuda_scratch moe32;
    size_t moe_row_bytes, moe32_row_floats; /* the largest per-row needs seen (cuda__moe_reserve) */
    size_t moe_part_bytes; /* the largest split partials of a grouped quantised matvec at decode */
    /* Overlapped steps (sample.cu, meta.cu). The metadata's pinned buffer alternates with a
     * second one (meta_host_alt, its own capacity and event), so that begin() packs a step while
     * the previous step's uploads may still be queued; meta_host_cap is the current one's. The
     * sampler's state (slots, uploads, scratch) is in smp, NULL until the first sample. */
    int32_t *meta_host_alt;
    size_t meta_host_cap, meta_alt_cap; /* int32s */
    cudaEvent_t meta_done_alt;
    struct cuda__smp *smp;
} cuda_backend;

static inline cuda_backend *cuda__cb(backend *be)
{
    return (cuda_backend *)be;
}

/* Records a failure (non-zero rc) in cb->error; returns rc. */
static inline int cuda__fail(cuda_backend *cb, int rc)
{
    if (rc && !cb->error) cb->error = rc;
    return rc;
}

#define CB_CHECK(cb, call) cuda__fail((cb), CUDA_CHECK(call))
#define CB_CHECK_BLAS(cb, call) cuda__fail((cb), CUBLAS_CHECK(call))
#define CB_CHECK_LAUNCH(cb) cuda__fail((cb), CUDA_CHECK_LAUNCH())

/* The runtime's current device is per host thread, and the engine may drive the backend from
 * a thread other than the one that created it: entry points that start work select it first. */
static inline int cuda__use(cuda_backend *cb)
{
    return CB_CHECK(cb, cudaSetDevice(cb->device));
}

/* Called first by every op: counts it, and says whether to skip it because this step replays a
 * graph that already holds it. */
static inline int cuda__graph_skip(cuda_backend *cb)
{
    cb->graph_ops++;
    return cb->graph_mode == 2;
}

/* The (layer, kind) plane of the KV arena (kind 0 K, 1 V; the latent layout's one plane for
 * either), as bytes; *l gets its group's layout, whose plane-relative indices (cuda_kv_tile_index
 * with layer 0, kind 0) address it. */
static inline char *cuda__kv_plane(const cuda_backend *cb, int layer, int kind, const cuda_kv_layout **l)
{
    int g = cb->kv_group[layer];
    *l = &cb->kvg[g];
    size_t plane = (size_t)cuda_kv_plane_elems(*l) * kv_dtype_bytes(cb->kv_dtype);
    int kinds = cuda_kv_kinds(*l);
    if (kind >= kinds) kind = 0; /* the latent layout: its one plane is key and value */
    return (char *)cb->kv_arena[g] + (size_t)(kinds * cb->kv_index[layer] + kind) * plane;
}

/* Device-side pointer to the packed batch metadata array at int32 offset off. */
static inline const int32_t *cuda__meta(const cuda_backend *cb, int32_t off)
{
    return cb->meta_dev + off;
}

/* The frequency factors of RoPE r in device memory (a CUDA weight's data), or NULL. */
static inline const float *cuda__rope_ff(const be_rope *r)
{
    return r->freq_factors ? (const float *)r->freq_factors->data : NULL;
}

/* ---- device and memory (cuda_backend.cu) --------------------------------------------------- */

/* Grows a device buffer to at least bytes (contents lost). 0 or -ENOMEM; -EIO (logged) when
 * it would have to grow inside a graph capture (a buffer the step's shape should have sized). */
int cuda__grow(cuda_backend *cb, void **p, size_t *cap_bytes, size_t bytes);
/* The scratch s with at least bytes, or NULL (failure recorded in cb). */
void *cuda__scratch(cuda_backend *cb, cuda_scratch *s, size_t bytes);

/* ---- CUDA graphs (graph.cu) ---------------------------------------------------------------- */

/* Drops every captured graph (device buffers they reference changed). */
void cuda__graphs_reset(cuda_backend *cb);
/* Called by begin() for every batch: b itself, or for a pure-decode step of at most
 * CUDA_GRAPH_MAX_ROWS sequences (and no more than be->pad_rows_max), its copy padded to its
 * graph shape in cb->pad (cb->padded set, cb->step_key its key). NULL on -ENOMEM. */
const be_batch *cuda__graph_pad(cuda_backend *cb, const be_batch *b);
/* 1 when the padded step may run as a graph: graphs on, every buffer sized by two eager steps. */
int cuda__graph_eligible(const cuda_backend *cb);
/* Called by begin() for a padded step: plans attention for the padded stride and sizes every
 * scratch buffer for its rows; then, when eligible, selects the graph of its shape or starts
 * capturing one. 0 or a negative errno. */
int cuda__graph_begin(cuda_backend *cb);
/* Called by to_host()/sync() at the end of a step: finishes a capture and launches it, or launches
 * the replayed graph. 0 or -EIO. */
int cuda__graph_end(cuda_backend *cb);

/* ---- batch metadata and plans (meta.cu) ---------------------------------------------------- */

int cuda__op_begin(backend *be, const be_batch *b);
/* Plans and uploads the attention items for n_heads; max_kv_bound > 0 sizes the split-K
 * partitions for that many keys instead of the batch's actual longest context (graphs). */
int cuda__attn_plan(cuda_backend *cb, int n_heads, int32_t max_kv_bound);
/* Grows the attention's split-K scratch to `floats` floats and its split counters to `counters`
 * (a new counter buffer is zeroed; the kernels leave counters at zero). For the attention plans
 * and latent attention's split (mla.cu). 0 or a negative errno. */
int cuda__attn_scratch_reserve(cuda_backend *cb, size_t floats, size_t counters);

/* ---- sampling and token references (sample.cu) --------------------------------------------- */

/* be_ops.sample / sample_wait (engine/backend.h). */
int cuda__op_sample(backend *be, const float *logits, const smp_batch *sb, int slot);
int cuda__op_sample_wait(backend *be, int slot, const int32_t **ids, const smp_result **lps);
/* Queues the resolution of the token references among b's n_tokens tokens, already uploaded at
 * tokens_dev, against the latest sample's ids. 0 (also when there are none), -EINVAL (a
 * reference past that sample's rows, or no sample yet) or -EIO. */
int cuda__resolve_refs(cuda_backend *cb, const be_batch *b, int32_t *tokens_dev);
/* Frees the sampler's buffers (at destroy, after the stream drained). */
void cuda__smp_free(cuda_backend *cb);

/* ---- KV arena and store (kv.cu) ------------------------------------------------------------ */

int cuda__op_kv_init(backend *be, const kv_geom *g, const int32_t *n_blocks);
void cuda__op_kv_copy_block(backend *be, int group, int32_t src, int32_t dst);
int cuda__op_kv_block_out(backend *be, int group, int32_t block, void *dst);
int cuda__op_kv_block_in(backend *be, int group, int32_t block, const void *src);
void cuda__op_store_kv(backend *be, int layer, const void *k, const void *v);
/* The K and V planes of layer and the batch's slots and positions for it. */
void cuda__kv_target(cuda_backend *cb, int layer, void **kp, void **vp, const cuda_kv_layout **l,
                     const int32_t **slots, const int32_t **pos);

/* ---- dense GEMM and conversions (gemm.cu) -------------------------------------------------- */

/* out = x · Wᵀ (+ bias): quantised weights go to the integer path (cuda__qmatmul), the others to
 * the matrix-vector kernels (up to gemv_max_rows rows) or cuBLAS. */
void cuda__op_matmul(backend *be, const void *x, int n_rows, const be_weight *w, const be_weight *bias, void *out);
/* The same with an f32 output (matmul_f32: the MoE router's logits). */
void cuda__op_matmul_f32(backend *be, const void *x, int n_rows, const be_weight *w, const be_weight *bias,
                         float *out);
/* matmul_multi: quantised matrices share one quantisation of x (cuda__qmatmul); others run as
 * matmul. */
void cuda__op_matmul_multi(backend *be, const void *x, int n_rows, int n, const be_weight *const *w,
                           const be_weight *const *bias, void *const *out);
/* The same with the output's type chosen (DT_F32, or cb->act) and, with softcap > 0, the outputs
 * capped (cap · tanh(v / cap)); x activations. Failures are recorded in cb. */
void cuda__matmul(cuda_backend *cb, const void *x, int n_rows, const be_weight *w, const float *bias, void *out,
                  int out_type, float softcap);
/* The table's conversion kernels, with their launches checked and failures recorded in cb:
 * n_rows rows of a model tensor (raw bytes on the device, row_bytes apart, type src_type: F32, F16
 * or BF16, else -EINVAL) into dst of type dst_type (DT_F32, DT_F16 or DT_BF16), 0 or -EIO;
 * x [n] → F16 bits in dst, 0 or -EIO; out[i] += bias[i % n_out] for i < n. */
int cuda__convert_rows(cuda_backend *cb, const void *src, int src_type, size_t row_bytes, int64_t n_in,
                       int64_t n_rows, void *dst, int dst_type);
int cuda__conv(cuda_backend *cb, const void *x, int x_type, void *dst, int dst_type, int64_t n);
void cuda__add_bias(cuda_backend *cb, const float *src, void *out, int out_type, const float *bias, int64_t n_out,
                    int64_t n);
/* Rows per chunk of a GEMM of n_out outputs whose f32 product goes through mm32. */
int64_t cuda__mm32_rows(int64_t n_out);

/* ---- quantised weights: the integer path (qmatvec.cu) --------------------------------------- */

/* out[i] = x · W[i]ᵀ (+ bias[i], or NULL) for n quantised matrices of one input width over the
 * same n_rows rows of x (of type act: DT_F32, DT_BF16 or DT_F16; out[i] of out_type, one of the
 * same three): x quantised once per block size, then mmvq or mmq per matrix. Failures are
 * recorded in cb. */
void cuda__qmatmul(cuda_backend *cb, const void *x, int act, int n_rows, int n, const be_weight *const *w,
                   const float *const *bias, void *const *out, int out_type);
/* Records what quantised matrix w needs of the scratch (called when it is uploaded). */
void cuda__qmm_note_weight(cuda_backend *cb, const be_weight *w);
/* Allocates the scratch of the integer path for n_rows rows of the uploaded matrices. 0 or
 * -ENOMEM. */
int cuda__qmm_reserve(cuda_backend *cb, int n_rows);

/* ---- attention (attn.cu) ------------------------------------------------------------------- */

void cuda__op_attention(backend *be, int layer, const void *q, const be_attn *at, void *out);
/* Chooses the attention kernels for the KV geometry kv_init set (the tensor-core ones where the
 * table has them and the head dim, KV type and block size fit, else the reference kernel) and
 * prints the choice on stderr when it is new. */
void cuda__attn_choose(cuda_backend *cb);

/* ---- norms and RoPE (norm_rope.cu) --------------------------------------------------------- */

void cuda__op_rmsnorm(backend *be, const void *x, const be_weight *w, float eps, int n_rows, int dim, void *out);
void cuda__op_rope(backend *be, void *x, const be_rope *r);
void cuda__op_rope_shift(backend *be, const void *x, void *out, const be_rope *r, int group);

/* ---- fused ops (fused.cu) ------------------------------------------------------------------ */

void cuda__op_add_rmsnorm(backend *be, float *x, const void *y, const be_weight *w, float eps, int n_rows, int dim,
                          void *out);
void cuda__op_qkv(backend *be, int layer, const void *x, int n_rows, const be_qkv *p, void *q);
void cuda__op_glu(backend *be, const void *x, int n_rows, const be_glu *p, void *out);
void cuda__op_lm_head(backend *be, const float *x, const void *y, const be_weight *norm, float eps,
                      const be_weight *w, const be_weight *bias, float softcap, float *logits);
/* Grows the fused ops' scratch for steps of rows rows (before a graph capture). 0 or -ENOMEM. */
int cuda__fused_reserve(cuda_backend *cb, int rows);

/* ---- element-wise ops (elementwise.cu) ----------------------------------------------------- */

void cuda__op_silu_mul(backend *be, void *gate, const void *up, int64_t n);
void cuda__op_gelu_mul(backend *be, void *gate, const void *up, int64_t n);
void cuda__op_scale(backend *be, float *x, float s, int64_t n);
void cuda__op_softcap(backend *be, float *x, float cap, int64_t n);
void cuda__op_add(backend *be, float *x, const void *y, int64_t n);

/* ---- mixtures of experts and latent attention (moe.cu, mla.cu) ----------------------------- */

/* A device copy of n host pointers (*dev; free it with cudaFree). 0, -ENOMEM or -EIO. */
int cuda__ptr_table(cuda_backend *cb, const void *const *h, int n, void **dev);
int cuda__op_moe_prepare(backend *be, be_moe *m);
void cuda__op_moe_release(backend *be, be_moe *m);
void cuda__op_moe_ffn(backend *be, const void *x, int n_rows, const void *logits, const be_moe *m, void *out);
int cuda__op_mla_prepare(backend *be, be_mla *m);
void cuda__op_mla_release(backend *be, be_mla *m);
void cuda__op_mla_qk(backend *be, const void *q, const void *kv, const be_mla *m, void *q_lat, void *k_lat);
void cuda__op_mla_out(backend *be, const void *o, const be_mla *m, void *out);
/* The attention op for a latent KV arena (attn.cu calls it); q and out activations. */
void cuda__mla_attention(cuda_backend *cb, int layer, const void *q, const be_attn *at, void *out);
/* f32 views of activations for the MoE and MLA kernels, which compute in f32: parts n[i] floats
 * each of the moe32 scratch, from[i] (activations, or NULL: nothing to convert) converted into
 * part i, for a step of rows rows; 0, or -1 with the failure recorded in cb. With f32 activations
 * each part is from[i] itself where given. */
int cuda__f32_parts(cuda_backend *cb, int rows, int n_parts, const size_t *n, const void *const *from,
                    float **part);
/* Grows the MoE step buffers and the moe32 scratch for a step of rows rows, by the largest per-row
 * needs the eager steps recorded (before a graph capture, which may not grow them). 0 or -ENOMEM. */
int cuda__moe_reserve(cuda_backend *cb, int rows);
/* out [n] activations = x [n] f32 (no-op with f32 activations when out == x). */
void cuda__f32_to_act(cuda_backend *cb, const float *x, void *out, int64_t n);

/* ---- row gathers (gather.cu) --------------------------------------------------------------- */

void cuda__op_embed(backend *be, const be_weight *emb, float *out);
void cuda__op_gather_rows(backend *be, const float *x, int dim, float *out);

#endif
