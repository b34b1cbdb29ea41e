/*
 * internal.h — what the files of cpu/ share: the worker pool, the backend's private state and
 * the kernels each file provides to cpu_backend.c. Nothing outside cpu/ includes this.
 *
 * Symbols here carry the folder prefix with a double underscore (cpu__) because they are
 * shared between the files of cpu/ but are no part of the backend interface.
 */
#ifndef KVSERVE_CPU_INTERNAL_H
#define KVSERVE_CPU_INTERNAL_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cache/kv.h"
#include "engine/backend.h"

/* ---- thread pool (threadpool.c) ------------------------------------------------------------ */

/* The body of a parallel for: items [lo, hi), run by thread ith (0 = the caller). Two calls
 * that run at the same time always have different ith, so ith may index per-thread scratch. */
typedef void (*cpu__range_fn)(void *arg, int64_t lo, int64_t hi, int ith);

typedef struct cpu__pool cpu__pool;

/* Starts n_threads - 1 workers (the caller is worker 0). NULL when a thread cannot start. */
cpu__pool *cpu__pool_create(int n_threads);
/* Stops and joins the workers. */
void cpu__pool_destroy(cpu__pool *p);
int cpu__pool_size(const cpu__pool *p);
/* Runs fn over items 0 .. n_items-1 in chunks of up to chunk items, on the caller and whichever
 * workers join in time, and returns when every chunk is done. Only the thread that created the
 * pool may call it. */
void cpu__pool_for(cpu__pool *p, int64_t n_items, int64_t chunk, cpu__range_fn fn, void *arg);

/* ---- backend state (cpu_backend.c) --------------------------------------------------------- */

/* Per-thread scratch, grown by the calling thread before a task that needs it (never inside one). */
typedef struct cpu__scratch {
    void *p;
    size_t bytes;
} cpu__scratch;

#define CPU__MAX_THREADS 256

/* Packed weight copies live in chunks of huge-page-backed memory (cpu_backend.c): a chunk is
 * this header, then copies bump-allocated after it, each preceded by 64 bytes holding its
 * chunk's address. A chunk is freed when its last copy is. Huge pages matter: a decode step
 * streams every copy once, and with 4 KiB pages the TLB misses and the hardware prefetchers'
 * stops at page boundaries cost more than the arithmetic. */
typedef struct cpu__chunk cpu__chunk;
struct cpu__chunk {
    cpu__chunk *prev, *next;
    size_t size; /* bytes, header included */
    size_t used; /* bytes handed out, header included */
    int live;    /* copies not yet freed */
};

typedef struct cpu__backend {
    backend base; /* must stay first: the vtable's backend * is this struct */
    cpu__pool *pool;
    int n_threads;

    be_batch batch;       /* the current step's metadata (arrays borrowed until the next begin) */
    int32_t *tok_seq;     /* [n_tokens] sequence of each token of the batch */
    int32_t *tok_kvpos;   /* [n_tokens] KV index of each token within its sequence */
    int32_t tok_cap;      /* capacity of the two arrays above */

    /* KV arena. Per layer and per K/V: [n_blocks][n_kv_heads][tile] of kv.dtype, so a
     * (block, kv head) pair is one contiguous tile of block_size × head_dim values. Inside the
     * tile V is [block_size][head_dim] and K is transposed, [head_dim][block_size]: see
     * attention.c for why. */
    kv_geom kv;
    int32_t n_blocks;
    void *kv_mem;        /* one allocation holding every layer's K then V */
    size_t kv_layer_bytes; /* bytes of one layer's K (equally V) */

    cpu__scratch scratch[CPU__MAX_THREADS]; /* per thread */
    cpu__scratch shared;                    /* e.g. the quantised activations of a matmul */
    cpu__scratch tiles;                     /* attention's plan for the step: units and groups */
    int64_t attn_n_tiles;                   /* units in that plan */
    cpu__chunk *chunks;                     /* packed weight copies (cpu_backend.c), newest first */
} cpu__backend;


/* Makes sure buffer s holds at least bytes (64-byte aligned); contents are not kept. 0 or -ENOMEM. */
int cpu__scratch_reserve(cpu__scratch *s, size_t bytes);

static inline void *cpu__kv_k(const cpu__backend *c, int layer)
{
    return (char *)c->kv_mem + (size_t)layer * 2 * c->kv_layer_bytes;
}
static inline void *cpu__kv_v(const cpu__backend *c, int layer)
{
    return (char *)c->kv_mem + ((size_t)layer * 2 + 1) * c->kv_layer_bytes;
}

/* ---- kernels ------------------------------------------------------------------------------- */

#ifdef __AVX512F__
#include <immintrin.h>

/* e^x, float accuracy (a few ulp) for x ≥ -87; Cephes' polynomial on the reduced argument. */
static inline __m512 cpu__exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}
#endif


/* matmul.c: out[r][o] = x[r] · W[o] (+ bias[o]). */
void cpu__matmul(cpu__backend *c, const float *x, int n_rows, const be_weight *w,
                 const be_weight *bias, float *out);

/* An activation block quantised for Q8_0 dot products: value = d * q[i]. */
typedef struct cpu__q8x {
    float d;
    int8_t q[32];
} cpu__q8x; /* 36 bytes */

/* One matmul as the workers see it. Work is handed out in units (column tiles or output
 * chunks) by cpu__pool_for, so a thread that the OS delays does not hold up the others: they
 * take its units. */
typedef struct cpu__mm_task {
    cpu__backend *c;
    const float *x;     /* [n_rows][n_in] */
    int n_rows;
    const be_weight *w;
    const float *bias;  /* [n_out] or NULL */
    float *out;         /* [n_rows][n_out] */
    const cpu__q8x *xq; /* Q8_0: quantised activations [n_rows][n_in / 32] */
    const int32_t *xsum; /* Q8_0 GEMM: -128 × Σ q of each block of xq, [n_rows][n_in / 32] */
    int64_t n_units;    /* units of work */
    int64_t unit;       /* outputs per unit */
} cpu__mm_task;

/* gemm.c: packed-panel GEMM for F32/F16/BF16 weights (many rows). */
#define CPU__PANEL_NR 32   /* outputs per panel (two 16-float vectors) */
#define CPU__PANEL_KC 128  /* inputs per panel: the panel (16 KiB) stays in L1 */
#define CPU__PANEL_MR 6    /* activation rows of the microkernel */
/* Per-thread scratch bytes the panel GEMM needs. */
size_t cpu__gemm_panel_scratch_bytes(void);
/* Parallel-for body over units [lo_unit, hi_unit) of t->unit outputs (multiples of 32). */
void cpu__gemm_panel_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith);
/* The same GEMM on F32/F16/BF16 weights packed once at upload (be_weight.extra): tiles of 32
 * outputs, each [n_in][32] elements of the weight's type. packed_bytes is 0 where the build has
 * no such kernel (no AVX-512); prepacked_run is a parallel-for body for any number of rows
 * (units multiples of 32 outputs) that needs cpu__gemm_panel_scratch_bytes() of per-thread
 * scratch when an F16/BF16 weight meets more than 6 rows. */
size_t cpu__gemm_panel_packed_bytes(int type, int64_t n_in, int64_t n_out);
void cpu__gemm_panel_prepack(const be_weight *w, void *dst);
void cpu__gemm_panel_prepacked_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith);

/* gemm_q8.c: VNNI GEMM for Q8_0 weights over quantised activations (xq) and their block sums
 * (xsum). Units are multiples of 16 outputs. Only usable when cpu__gemm_q8_available(). */
int cpu__gemm_q8_available(void);
size_t cpu__gemm_q8_scratch_bytes(void);
void cpu__gemm_q8_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith);
/* The same GEMM on weights packed once at upload (be_weight.extra): 16-output tiles, each
 * [n_in / 32] blocks of 544 bytes (weights + 128 interleaved by 4 inputs, then f16 scales).
 * cpu__gemm_q8_packed_bytes: the size of that copy (0 without VNNI); cpu__gemm_q8_prepack
 * writes it. cpu__gemm_q8_prepacked_run is a parallel-for body for any number of rows (no
 * scratch); its units must be multiples of cpu__gemm_q8_align(n_rows) outputs. */
size_t cpu__gemm_q8_packed_bytes(int64_t n_in, int64_t n_out);
void cpu__gemm_q8_prepack(const be_weight *w, void *dst);
int cpu__gemm_q8_align(int n_rows);
void cpu__gemm_q8_prepacked_run(void *task, int64_t lo_unit, int64_t hi_unit, int ith);

/* quant.c: the portable matmul for the quantised types other than Q8_0 (Q4_0 … IQ4_XS), read
 * straight from the file's blocks. cpu__quant_handles says which types it takes;
 * cpu__quant_matmul runs t (x, n_rows, w, bias, out set) on the pool: 0 or -ENOMEM (out of
 * scratch; nothing written). */
int cpu__quant_handles(int type);
int cpu__quant_matmul(cpu__backend *c, const cpu__mm_task *t);

/* attention.c */
void cpu__store_kv(cpu__backend *c, int layer, const float *k, const float *v);
/* Plans the step's attention units (called by begin): prefill chunks cut into query tiles,
 * decode tokens of sequences whose block tables share a prefix grouped. 0 or -ENOMEM. */
int cpu__attention_plan(cpu__backend *c);
void cpu__attention(cpu__backend *c, int layer, const float *q, const be_attn *a, float *out);

/* ops.c: the row-wise and element-wise ops. */
void cpu__embed(cpu__backend *c, const be_weight *emb, float *out);
void cpu__rmsnorm(cpu__backend *c, const float *x, const be_weight *w, float eps, int n_rows,
                  int dim, float *out);
void cpu__rope(cpu__backend *c, float *x, const be_rope *r);
void cpu__silu_mul(cpu__backend *c, float *gate, const float *up, int64_t n);
void cpu__gelu_mul(cpu__backend *c, float *gate, const float *up, int64_t n);
void cpu__scale(cpu__backend *c, float *x, float s, int64_t n);
void cpu__softcap(cpu__backend *c, float *x, float cap, int64_t n);
void cpu__add(cpu__backend *c, float *x, const float *y, int64_t n);

#endif
