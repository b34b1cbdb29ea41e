/*
 * internal.h — what the files of cpu/ share: the worker pool, the table of per-level kernels
 * (and how to add one), the backend's private state and the drivers cpu_backend.c calls.
 * Outside cpu/ only the CPU tests and bench/bench_cpu.c include it.
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
/* Another owner of p's workers (p itself): two backends that never run ops at the same time
 * (a draft model's and its target's, driven by one thread) share one set of workers, so the
 * idle set's spinning does not take the cores from the busy one. */
cpu__pool *cpu__pool_share(cpu__pool *p);
/* Drops an owner; the last stops and joins the workers. */
void cpu__pool_destroy(cpu__pool *p);
int cpu__pool_size(const cpu__pool *p);
/* Runs fn over items 0 .. n_items-1 in chunks of up to chunk items, on the caller and whichever
 * workers join in time, and returns when every chunk is done. Only the thread that created the
 * pool may call it. */
void cpu__pool_for(cpu__pool *p, int64_t n_items, int64_t chunk, cpu__range_fn fn, void *arg);
/* The same with chunks that shrink as the items run out: each take is 1/(2 n_threads) of what is
 * left, at least min_chunk, so most of the work goes in long runs of consecutive items and the
 * last takes are short. */
void cpu__pool_for_guided(cpu__pool *p, int64_t n_items, int64_t min_chunk, cpu__range_fn fn, void *arg);

/* ---- the kernel table: one per SIMD level (isa.c) ------------------------------------------
 *
 * Everything that depends on the SIMD level is reached through a cpu__kern, which each backend
 * fills once when it is created (cpu__kern_init). The drivers (matmul.c, attention.c, ops.c,
 * built for the baseline target) cut the work, thread it and call the table's kernels; the
 * kernels live in files named after their level and built with its target flags:
 *
 *   cpu/NAME.c          scalar reference kernels next to the driver, no extra flags
 *   cpu/NAME_avx2.c     -mavx2 -mfma -mf16c
 *   cpu/NAME_avx512.c   the above + -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512cd
 *   cpu/NAME_vnni.c     the above + -mavx512vnni (used only when the CPU has VNNI)
 *   cpu/NAME_neon.c     aarch64 Advanced SIMD (baseline there; dotprod kernels: NAME_dotprod.c)
 *
 * Code in a level's file runs only through the table of a backend at that level (or above), so
 * nothing built with AVX-512 flags can run on an AVX2 machine. For the same reason a level's
 * file must not be the one that provides an external symbol other files call directly, and
 * shared headers hold no SIMD code: helpers for one level go into cpu/simd_x86.h (included
 * only by *_avx2.c / *_avx512.c / *_vnni.c) or a header of its own.
 *
 * How to add a kernel (for every level):
 *  1. Add the entry to struct cpu__kern below, with a comment stating its exact contract
 *     (shapes, strides, what it may assume, what it writes). For a new weight type, the entry
 *     is k->mm[DT_X]: choose its activation format (cpu__act; add one to matmul.c's converter
 *     if no existing one fits: it must be the same at every level).
 *  2. Write the scalar reference in the driver's file (or cpu/NAME.c) and set it in that file's
 *     cpu__*_fill_scalar. Every entry has a scalar variant: tables are filled from scalar up.
 *  3. Write the variants in cpu/NAME_avx2.c, cpu/NAME_avx512.c (and _vnni.c when it needs
 *     VNNI) and cpu/NAME_neon.c, each setting its entries in its own cpu__NAME_fill_LEVEL,
 *     declared at the end of this file and called from cpu__kern_init (isa.c). A level that
 *     has no variant yet keeps the one of the level below (avx512 → avx2 → scalar; neon →
 *     scalar). A matmul descriptor's packed or plain part is replaced whole (its layout, its
 *     alignment and its run belong together); set the part's isa to your level.
 *  4. Test it in tests/test_cpu*.c at every level: the tests loop over cput_levels(), which
 *     are all the levels the machine supports, against a float64 reference with a tolerance
 *     derived from the arithmetic (unit roundoff × reduction length), never from one
 *     machine's observed error.
 * The Makefile gives each file its flags from its suffix; new files need no Makefile change. */

typedef struct cpu__backend cpu__backend;

/* An activation block quantised for Q8_0 dot products: value = d * q[i]. */
typedef struct cpu__q8x {
    float d;
    int8_t q[32];
} cpu__q8x; /* 36 bytes */

/* An activation block quantised for the kernels of the other quantised types (quant.h): the
 * Q8_0 block (the same d and q) with the sums those kernels fold in. */
typedef struct cpu__q8s {
    int8_t q[32];
    float d;     /* x ≈ d · q; d = max|x| / 127 (0 for an all-zero block) */
    float xs[3]; /* d · Σ q over q[0..16), q[16..32) and q[0..32) */
    int32_t s32; /* Σ q over the block (exact) */
} cpu__q8s;      /* 52 bytes */

/* An activation block of 256 for the super-block types (Q2_K … Q6_K, IQ4_XS; quant.h): one
 * scale for all 256 values and the exact sums of each 16, so those kernels scale their integer
 * sums in integer arithmetic and fold into f32 once per super-block. */
typedef struct cpu__q8k {
    int8_t q[256];
    int16_t bsum[16]; /* Σ q over q[16h .. 16h + 16): |bsum| ≤ 16 · 127 */
    float d;          /* x ≈ d · q; d = max|x| / 127 over the 256 (0 for an all-zero block) */
} cpu__q8k;           /* 292 bytes */

/* One matmul as the workers see it. Work is handed out in units of t->unit outputs by
 * cpu__pool_for, so a thread that the OS delays does not hold up the others: they take its
 * units. */
typedef struct cpu__mm_task {
    cpu__backend *c;
    const float *x;      /* [n_rows][n_in] */
    int n_rows;
    const be_weight *w;
    const float *bias;   /* [n_out] or NULL */
    float *out;          /* [n_rows][n_out] */
    const cpu__q8x *xq;  /* CPU__ACT_Q8_0: quantised activations [n_rows][n_in / 32] */
    const int32_t *xsum; /* CPU__ACT_Q8_0 for packed kernels with xsum set: -128 × Σ q of each
                          * block of xq, [n_rows][n_in / 32] (else NULL) */
    const cpu__q8s *xs;  /* CPU__ACT_Q8S, CPU__ACT_Q8S_H: quantised activations [n_rows][n_in / 32] */
    const cpu__q8k *xk;  /* CPU__ACT_Q8K: quantised activations [n_rows][n_in / 256] */
    int64_t n_units;     /* units of work */
    int64_t unit;        /* outputs per unit */
} cpu__mm_task;

/* Weight types a table can hold matmul kernels for: indexed by enum dt_type. */
#define CPU__MM_TYPES 40 /* DT_N_TYPES */
/* KV element types: indexed by enum kv_dtype. */
#define CPU__KV_TYPES 8

/* What matmul.c converts the activations x into before calling a weight type's kernels. */
enum cpu__act {
    CPU__ACT_F32 = 0,  /* x itself, f32 [n_rows][n_in] */
    CPU__ACT_Q8_0 = 1, /* t->xq (and t->xsum): blocks of 32 int8 with an f32 scale (cpu__q8x) */
    CPU__ACT_Q8S = 2,  /* t->xs: the same blocks with their sums (cpu__q8s; quant.h) */
    CPU__ACT_Q8K = 3,  /* t->xk: blocks of 256 int8 with one f32 scale and int16 sums (cpu__q8k) */
    CPU__ACT_Q8S_H = 4, /* t->xs: CPU__ACT_Q8S's blocks with d rounded to f16 once the values are
                           quantised, as llama.cpp's Q8_0 activations are (MXFP4 follows it) */
};

/* A copy of a matrix packed once at upload into a level's own layout (be_weight.extra). */
typedef struct cpu__mm_packed {
    int isa;                                      /* level that provides it */
    size_t (*bytes)(int64_t n_in, int64_t n_out); /* size of the copy; 0: no copy for this shape */
    void (*pack)(const be_weight *w, void *dst);  /* writes it from w->data */
    int (*align)(int n_rows);                     /* outputs per unit must be a multiple of this */
    size_t (*scratch)(const be_weight *w, int n_rows); /* per-thread scratch bytes (NULL: none) */
    cpu__range_fn run;                            /* parallel-for body over cpu__mm_task units */
    int xsum;                                     /* run reads t->xsum (CPU__ACT_Q8_0) */
} cpu__mm_packed;

/* A GEMM over the file's layout (no packed copy) worth it from min_rows activation rows on. */
typedef struct cpu__mm_plain {
    int isa;
    int min_rows;
    int align;                                         /* outputs per unit: a multiple of this */
    size_t (*scratch)(const be_weight *w, int n_rows); /* per-thread scratch bytes (NULL: none) */
    cpu__range_fn run;                                 /* parallel-for body over cpu__mm_task units */
} cpu__mm_plain;

/* Everything a level does with one weight type. dot is required (the fallback for every
 * shape: GEMV and column-blocked dot products); packed and plain are optional (run NULL). */
typedef struct cpu__mm_kern {
    int act;     /* enum cpu__act, the same at every level */
    int dot_isa; /* level that provides dot */
    /* Σ_i w[i] · x[i] over one weight row in the file's layout (n_in elements) and one
     * activation row in format act. */
    float (*dot)(const void *w, const void *x, int64_t n_in);
    cpu__mm_packed packed;
    cpu__mm_plain plain;
} cpu__mm_kern;

/* Attention works on chunks of up to CPU__ATTN_KCH keys converted to f32 (kt transposed,
 * [head_dim][KCH]; vt [KCH][head_dim]) and up to CPU__ATTN_AR query rows per kernel call. */
#define CPU__ATTN_KCH 64
#define CPU__ATTN_AR 4

/* The decode fast path: one query row (one token, one head, no GQA grouping) over its
 * sequence's paged K/V in the arena's own element type. */
typedef struct cpu__attn_row {
    const void *k, *v; /* the layer's K and V arena */
    const int32_t *bt; /* block table of the sequence */
    int lo, n_ctx;     /* KV entries the row attends to: lo .. n_ctx - 1 (lo > 0: a window) */
    int head_dim, block_size, n_kv_heads, kvh;
    float scale;    /* of q·k */
    float softcap;  /* > 0: scores become softcap · tanh(score / softcap) */
    const float *q; /* [head_dim] */
    float *out;     /* [head_dim] */
    float *scr;     /* thread scratch: max(block_size, 256) + head_dim floats */
} cpu__attn_row;

typedef struct cpu__kern {
    int isa;           /* enum cpu_isa */
    unsigned features; /* CPU_FEAT_* bits in use */

    /* ---- matmul (matmul.c) ---- */
    cpu__mm_kern mm[CPU__MM_TYPES];
    /* Per block of 32: d = max|x| / 127, q = round-to-nearest-even(x · (1/d)) (0 when d = 0),
     * n a multiple of 32. Every level must give exactly the scalar result. */
    void (*quantise_q8)(const float *x, cpu__q8x *out, int64_t n);
    /* The same per block of 256 (d = max|x| / 127 over the block, q = round-to-nearest-even(
     * x · (1/d))) with the exact sums of each 16 q: n a multiple of 256. Every level must give
     * exactly the scalar result. */
    void (*quantise_q8k)(const float *x, cpu__q8k *out, int64_t n);

    /* ---- attention (attention.c) ---- */
    /* dst[r][0..n) = src[r][0..n) as f32 for rows r < rows: src of KV dtype with a row stride
     * of src_stride elements, dst with dst_stride floats. */
    void (*kv_to_f32)(int dtype, const void *src, size_t src_stride, float *dst, size_t dst_stride,
                      int rows, int n);
    /* dst[0..n) = src[0..n) in KV dtype, rounding to nearest even. */
    void (*f32_to_kv)(int dtype, const float *src, void *dst, int64_t n);
    /* The quantised types (KV_I8, KV_FP8): dst[r][i] = code(src[r][i]) × the f16 scale of that
     * element's vector, which is scales[i] (per_col: a K tile's rows hold one dimension of
     * consecutive keys) or scales[r] (a V tile's rows are the keys). src has a row stride of
     * src_stride codes (bytes), dst of dst_stride floats. */
    void (*kvq_to_f32)(int dtype, const uint8_t *src, size_t src_stride, const uint8_t *scales, int per_col,
                       float *dst, size_t dst_stride, int rows, int n);
    /* One online-softmax step of ar ≤ CPU__ATTN_AR query rows over a chunk of keys: row a
     * (query qa[a]) sees keys lo[a] .. nv[a] - 1 of the chunk (none when lo[a] ≥ nv[a];
     * nmax = max nv ≤ CPU__ATTN_KCH); its scores are scale · q·k, soft-capped when cap > 0
     * (be_softcap), and its state mx[a] (running max), l[a] (running sum) and acc[a · hd ..]
     * (unnormalised output) is updated. S: scratch of ar × CPU__ATTN_KCH floats. */
    void (*attn_chunk)(int ar, const float *const *qa, const int *lo, const int *nv, int nmax,
                       const float *kt, const float *vt, int hd, float scale, float cap, float *S,
                       float *mx, float *l, float *acc);
    int attn_isa; /* level that provides attn_chunk */
    /* Optional, per KV dtype: the decode fast path for block sizes that are multiples of 16. */
    void (*attn_decode[CPU__KV_TYPES])(const cpu__attn_row *a);

    /* ---- row-wise ops (ops.c) ---- */
    float (*sum_squares)(const float *x, int64_t n);                /* Σ x[i]² */
    void (*silu_mul)(float *gate, const float *up, int64_t n);     /* gate = silu(gate) · up */
    /* Rotates pairs i < half of each of the n_heads heads of x (head_dim apart; pair i is x[i],
     * x[i + half] with neox, else x[2i], x[2i + 1]) by cs[i], sn[i]: a·c − b·s, a·s + b·c, each
     * product rounded then summed (no FMA), so every level gives the scalar result. */
    void (*rope_heads)(float *x, int n_heads, int head_dim, int half, int neox, const float *cs, const float *sn);
} cpu__kern;

/* Per-thread scratch bytes of the f32 panel GEMMs (a KC × NR panel and a row of KC). */
#define CPU__PANEL_NR 32  /* outputs per panel */
#define CPU__PANEL_KC 128 /* inputs per panel: the panel (16 KiB) stays in L1 */
#define CPU__PANEL_MR 6   /* activation rows of the microkernel */
#define CPU__PANEL_SCRATCH (((size_t)CPU__PANEL_KC * CPU__PANEL_NR + CPU__PANEL_KC) * sizeof(float) + 64)

/* panel.c: the packed panel layout of F32/F16/BF16 matrices that the AVX2, AVX-512 and NEON
 * GEMMs share: tiles of CPU__PANEL_NR outputs, each [n_in][NR] elements of the weight's own type
 * (zero past n_out). Bytes of the copy (4- and 2-byte elements) and the packer. */
size_t cpu__panel_bytes_f32(int64_t n_in, int64_t n_out);
size_t cpu__panel_bytes_16(int64_t n_in, int64_t n_out);
void cpu__panel_pack(const be_weight *w, void *dst);

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

/* Rotary pairs per head the CPU backend handles (head_dim ≤ 1024). */
#define CPU__ROPE_MAX_PAIRS 512

/* The step as the kernels index it: the batch with the KV view of one layer group spelled out
 * (the group of the layer being computed; cpu__select_group switches it). */
typedef struct cpu__batch {
    int32_t n_tokens;
    const int32_t *tokens, *positions;
    const int32_t *slots;       /* the group's: [n_tokens] */
    int32_t n_seqs;
    const int32_t *q_start;
    const int32_t *ctx_len;     /* the group's: [n_seqs] */
    const int32_t *block_table; /* the group's: [n_seqs][bt_stride] */
    int32_t bt_stride;
    int32_t n_logits;
    const int32_t *logit_rows;
    const int32_t *sinks;       /* the group's: [n_seqs] or NULL (be_kv) */
    const int32_t *sink_shift;
} cpu__batch;

struct cpu__backend {
    backend base; /* must stay first: the vtable's backend * is this struct */
    cpu__pool *pool;
    int n_threads;

    be_batch step;        /* the current step's metadata (arrays borrowed until the next begin) */
    cpu__batch batch;     /* the step with the KV view of group `group` */
    int group;            /* the layer group batch describes (-1: none yet this step) */
    int32_t *tok_seq;     /* [n_tokens] sequence of each token of the batch */
    int32_t *tok_kvpos;   /* [n_tokens] KV index of each token within its sequence (group's) */
    int32_t tok_cap;      /* capacity of the two arrays above */

    /* KV arena. Per layer and per K/V: [n_blocks][n_kv_heads][tile] of kv.dtype, so a
     * (block, kv head) pair is one contiguous tile of block_size × head_dim values. Inside the
     * tile V is [block_size][head_dim] and K is transposed, [head_dim][block_size]: see
     * attention.c for why. The latent layout has one plane per layer, its tiles laid out as V's. */
    kv_geom kv;
    int32_t n_blocks[KV_MAX_GROUPS];  /* per layer group */
    void *kv_mem[KV_MAX_GROUPS];      /* per group: one allocation holding its layers' K then V */
    size_t kv_layer_bytes[KV_MAX_GROUPS]; /* bytes of one layer's K (equally V) in each group */
    int kv_index[KV_MAX_LAYERS];      /* each layer's place among its group's layers */

    cpu__scratch scratch[CPU__MAX_THREADS]; /* per thread */
    cpu__scratch shared;                    /* e.g. the quantised activations of a matmul */
    cpu__scratch tiles;                     /* attention's plan for the step: units and groups */
    cpu__scratch groups;                    /* cpu__matmul_grouped's plans */
    cpu__scratch moe;                       /* moe.c: routing, grouped rows and expert results */
    cpu__scratch mla;                       /* mla.c: gathered heads and their products */
    int64_t attn_n_tiles;                   /* units in that plan */
    cpu__chunk *chunks;                     /* packed weight copies (cpu_backend.c), newest first */
    cpu__kern k;                            /* the kernels of this backend's level */

    /* The rotations of this step's tokens (ops.c): [n_tokens][half] cos then sin for the
     * frequencies in inv_freq and the scale ms, made by the first rope of the step that uses
     * them and reused by every other (Q and K, every layer with the same frequencies). */
    struct {
        uint64_t step;    /* step_gen when made; 0: none */
        int half;
        float ms;
        double inv_freq[CPU__ROPE_MAX_PAIRS];
        cpu__scratch tab;
    } rope;
    uint64_t step_gen; /* bumped by every begin */
    struct cpu__sampler *smp; /* the sample op's slots and scratch (sample.c); NULL until used */
};

/* ---- sampling (sample.c) ------------------------------------------------------------------- */

/* be_ops.sample: the rows of sb run now (engine/sampler.c), spread over the pool. */
int cpu__op_sample(backend *be, const float *logits, const smp_batch *sb, int slot);
/* be_ops.sample_wait: the slot's results (already there). */
int cpu__op_sample_wait(backend *be, int slot, const int32_t **ids, const smp_result **lps);
/* Resolves the token references of b's tokens (backend.h: tokens < 0) against the latest sample:
 * b->tokens then points at the backend's resolved copy. 0, or -EINVAL (a reference to a row the
 * latest sample did not have) or -ENOMEM. */
int cpu__resolve_tokens(cpu__backend *c, be_batch *b);
void cpu__sampler_free(cpu__backend *c);


/* Rotates pair i of one head hx (rope_heads' definition): every level's kernel does the pairs
 * its vectors do not cover with this, and the scalar one does them all. */
static inline void cpu__rope_pair(float *hx, int i, int half, int neox, const float *cs, const float *sn)
{
    int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    float a = hx[i0], b = hx[i1], ac = a * cs[i], bs = b * sn[i], as = a * sn[i], bc = b * cs[i];
    hx[i0] = ac - bs;
    hx[i1] = as + bc;
}

/* Makes sure buffer s holds at least bytes (64-byte aligned); contents are not kept. 0 or -ENOMEM
 * (scratch.c). */
int cpu__scratch_reserve(cpu__scratch *s, size_t bytes);

/* A layer's K and V planes; the latent layout has one plane, which both return. */
static inline void *cpu__kv_k(const cpu__backend *c, int layer)
{
    int g = kv_group_of(&c->kv, layer);
    return (char *)c->kv_mem[g] + (size_t)c->kv_index[layer] * kv_n_vecs(&c->kv) * c->kv_layer_bytes[g];
}
static inline void *cpu__kv_v(const cpu__backend *c, int layer)
{
    int g = kv_group_of(&c->kv, layer), two = !c->kv.latent;
    return (char *)c->kv_mem[g] + ((size_t)c->kv_index[layer] * kv_n_vecs(&c->kv) + two) * c->kv_layer_bytes[g];
}

/* Makes c->batch (and the per-token KV indices, and attention's plan) describe layer group g's
 * view of the step. 0 or -ENOMEM (cpu_backend.c). */
int cpu__select_group(cpu__backend *c, int g);

/* ---- kernels: the driver side (files without a level suffix) ------------------------------- */

/* act.c: quantises n activations (a multiple of 32) into n / 32 cpu__q8s blocks with the
 * table's Q8_0 quantiser (so d and q are the same at every level) and adds their sums. */
void cpu__q8s_quantise(const cpu__kern *k, const float *x, cpu__q8s *out, int64_t n);

/* act.c: the same with each block's d rounded to f16 after its values are quantised (and the
 * sums scaled by that d): CPU__ACT_Q8S_H. */
void cpu__q8s_quantise_h(const cpu__kern *k, const float *x, cpu__q8s *out, int64_t n);

/* act.c: the scalar definition of one activation block, which every level's quantisers
 * (quantise_q8, quantise_q8k) equal: d = max|x| / 127 over the n values, q[i] =
 * round-to-nearest-even(x[i] · (1/d)) (0 when d = 0). Returns d. */
float cpu__quantise_block(const float *x, int n, int8_t *q);

/* matmul.c: out[r][o] = x[r] · W[o] (+ bias[o]), through the backend's kernel table. */
void cpu__matmul(cpu__backend *c, const float *x, int n_rows, const be_weight *w,
                 const be_weight *bias, float *out);
/* matmul.c: out[i] = x · W[i] (+ bias[i]) for i < n (≤ BE_MATMUL_MULTI_MAX) matrices over the
 * same rows, as one parallel for with the activations converted once (each result as
 * cpu__matmul's). */
void cpu__matmul_multi(cpu__backend *c, const float *x, int n_rows, int n, const be_weight *const *w,
                       const be_weight *const *bias, float *const *out);

/* One matmul of a group (cpu__matmul_grouped): rows [row0, row0 + n_rows) of the common x by w
 * (+ bias, or NULL) into out [n_rows][w->n_out]. */
typedef struct cpu__mm_group {
    const be_weight *w, *bias;
    int32_t row0, n_rows;
    float *out;
} cpu__mm_group;

/* matmul.c: the n matmuls g[] over the rows of x ([n_rows][n_in]; every g[i].w has n_in inputs
 * and a type of one activation format) as one parallel for: the activations are converted once
 * for all rows and each group's units are handed out like one matmul's, so a thread that is
 * done with one expert's (or head's) outputs takes another's. Each result is exactly what
 * cpu__matmul gives for its rows. 0, -EINVAL (mixed inputs) or -ENOMEM (nothing written). */
int cpu__matmul_grouped(cpu__backend *c, const float *x, int n_rows, int n, const cpu__mm_group *g);

/* attention.c */
void cpu__store_kv(cpu__backend *c, int layer, const float *k, const float *v);
/* Plans the step's attention units (called by begin): prefill chunks cut into query tiles,
 * decode tokens of sequences whose block tables share a prefix grouped. 0 or -ENOMEM. */
int cpu__attention_plan(cpu__backend *c);
void cpu__attention(cpu__backend *c, int layer, const float *q, const be_attn *a, float *out);

/* moe.c: be_ops.moe_ffn. */
void cpu__moe_ffn(cpu__backend *c, const float *x, int n_rows, const float *logits, const be_moe *m, float *out);
/* mla.c: be_ops.mla_qk and mla_out. */
void cpu__mla_qk(cpu__backend *c, const float *q, const float *kv, const be_mla *m, float *q_lat, float *k_lat);
void cpu__mla_out(cpu__backend *c, const float *o, const be_mla *m, float *out);

/* ops.c: the row-wise and element-wise ops. */
void cpu__embed(cpu__backend *c, const be_weight *emb, float *out);
void cpu__rmsnorm(cpu__backend *c, const float *x, const be_weight *w, float eps, int n_rows,
                  int dim, float *out);
void cpu__rope(cpu__backend *c, float *x, const be_rope *r);
/* out = x rotated by −sink_shift of each token's sequence in the current group (be_ops.rope_shift). */
void cpu__rope_shift(cpu__backend *c, const float *x, float *out, const be_rope *r);
void cpu__silu_mul(cpu__backend *c, float *gate, const float *up, int64_t n);
void cpu__gelu_mul(cpu__backend *c, float *gate, const float *up, int64_t n);
void cpu__scale(cpu__backend *c, float *x, float s, int64_t n);
void cpu__softcap(cpu__backend *c, float *x, float cap, int64_t n);
void cpu__add(cpu__backend *c, float *x, const float *y, int64_t n);

/* isa.c: fills table k with the kernels of level isa (enum cpu_isa) and sub-features
 * (CPU_FEAT_* bits); the caller has checked that the CPU runs them. */
void cpu__kern_init(cpu__kern *k, int isa, unsigned features);

/* cpu_backend.c: a backend at level isa with the given sub-features (a subset of what the CPU
 * has: the tests also run AVX-512 without VNNI). NULL when out of memory. */
backend *cpu__backend_create(int n_threads, int isa, unsigned features);

/* Fill functions, one per file of kernels: each sets the entries its file implements. */
void cpu__matmul_fill_scalar(cpu__kern *k);    /* matmul.c */
void cpu__attention_fill_scalar(cpu__kern *k); /* attention.c */
void cpu__ops_fill_scalar(cpu__kern *k);       /* ops.c */
void cpu__quant_fill_scalar(cpu__kern *k);     /* quant.c */
#if defined(__x86_64__)
void cpu__matmul_fill_avx2(cpu__kern *k);      /* matmul_avx2.c */
void cpu__gemm_fill_avx2(cpu__kern *k);        /* gemm_avx2.c */
void cpu__gemm_q8_fill_avx2(cpu__kern *k);     /* gemm_q8_avx2.c */
void cpu__attention_fill_avx2(cpu__kern *k);   /* attention_avx2.c */
void cpu__ops_fill_avx2(cpu__kern *k);         /* ops_avx2.c */
void cpu__matmul_fill_avx512(cpu__kern *k);    /* matmul_avx512.c */
void cpu__gemm_fill_avx512(cpu__kern *k);      /* gemm_avx512.c */
void cpu__attention_fill_avx512(cpu__kern *k); /* attention_avx512.c */
void cpu__ops_fill_avx512(cpu__kern *k);       /* ops_avx512.c */
void cpu__gemm_q8_fill_vnni(cpu__kern *k);     /* gemm_q8_vnni.c */
void cpu__quant_fill_avx2(cpu__kern *k);       /* quant_avx2.c */
void cpu__quant_fill_vnni(cpu__kern *k);       /* quant_vnni.c */
#elif defined(__aarch64__)
void cpu__matmul_fill_neon(cpu__kern *k);      /* matmul_neon.c (with the row-wise ops) */
void cpu__gemm_fill_neon(cpu__kern *k);        /* gemm_neon.c */
void cpu__attention_fill_neon(cpu__kern *k);   /* attention_neon.c */
void cpu__gemm_q8_fill_dotprod(cpu__kern *k);  /* gemm_q8_dotprod.c */
#endif

#endif
