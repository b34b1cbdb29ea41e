/*
 * kv.h — geometry of the paged KV cache and the memory formula kvserve is built around:
 *
 *   KV bytes per token = 2 (K and V) × n_layers × n_kv_heads × bytes per head vector
 *   bytes per head vector = head_dim × bytes_per_value          (f32, f16, bf16)
 *                         = head_dim × 1 + 2 (its f16 scale)     (int8, fp8 e4m3)
 *
 * The latent layout (multi-head latent attention, DeepSeek-V2/V3) keeps one vector per token and
 * layer instead of K and V per head: the compressed latent (kv_lora_rank values, which is also
 * the value every head attends to) followed by the RoPE key all heads share (qk_rope values), so
 *
 *   KV bytes per token = n_layers × bytes per vector of head_dim = kv_lora_rank + qk_rope values
 *
 * (n_kv_heads 1, no V: kv_n_vecs is 1). Its tiles are the K tiles of a one-head cache; the
 * backends read the value from the first `latent` values of each vector.
 *
 * The cache is cut into blocks of block_size tokens. A token's KV "slot" is
 * block_id × block_size + offset_in_block. Each backend lays out a block as it likes, but always
 * as one contiguous "tile" per (layer, K or V, block, kv head) of kv_tile_bytes, so that a block
 * of a layer is addressable on its own (block copies, a second tier). The CPU backend uses, per
 * layer and per K/V, [n_blocks][n_kv_heads][tile]: V tiles are [block_size][head_dim], K tiles
 * are transposed, [head_dim][block_size], so query·key scores are plain block_size-wide FMAs (see
 * cpu/attention.c). The CUDA backend keeps [layer][K|V][block][kv_head][tile] with both tiles
 * [block_size][head_dim].
 *
 * Quantised KV (int8, fp8): every head vector of head_dim values of one token gets one scale,
 * d = max|x| / QMAX rounded UP to the next f16 (so that |x / d| ≤ QMAX: nothing clamps), and its
 * values are stored as q = x / d (int8: rounded to the nearest integer, |q| ≤ 127; fp8: rounded
 * to the nearest e4m3 value, |q| ≤ 448). A decoded value is then within d / 2 (int8) or
 * max(2^-4 |x|, 2^-10 d) (e4m3) of the original. The
 * block_size scales of a tile follow its values inside the tile (f16, in token order), so a tile
 * of a quantised cache is block_size × head_dim bytes of values then 2 × block_size bytes of
 * scales. The codecs below are the one definition of those formats; the backends' store and
 * attention kernels and the tests all use them (they compile as host and CUDA device code).
 */
#ifndef KVSERVE_KV_H
#define KVSERVE_KV_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KV_HD __host__ __device__
#else
#define KV_HD
#endif

enum kv_dtype { KV_F16 = 0, KV_F32 = 1, KV_BF16 = 2, KV_I8 = 3, KV_FP8 = 4 };
#define KV_N_DTYPES 5

/* Bytes of the per-vector scale of a quantised cache (an f16). */
#define KV_SCALE_BYTES 2
/* Largest magnitude of a quantised value: int8 uses ±127 (symmetric), e4m3 ±448. */
#define KV_I8_QMAX 127.0f
#define KV_FP8_QMAX 448.0f

/* ---- layer groups and their retention rules --------------------------------------------- */

/* Layers that keep their KV by the same rule form a group; each group has its own blocks (its
 * own pool and arena) and each sequence one block table per group, so a group whose rule drops
 * old entries frees memory while the others keep theirs (docs/kv-windows.md). */
#define KV_MAX_GROUPS 4
#define KV_MAX_LAYERS 256

enum kv_keep {
    KV_KEEP_ALL = 0,    /* every entry, for the sequence's life (full attention) */
    KV_KEEP_WINDOW = 1, /* the model's sliding window: a token attends to the last `window`
                           positions (itself included); blocks every future token's window has
                           left are released */
    KV_KEEP_SINKS = 2,  /* StreamingLLM: the first `sinks` tokens (whole blocks) and the most
                           recent ones, at most `window` entries in all; when a token would make
                           it window + 1, the oldest block after the sinks is released */
};

typedef struct kv_rule {
    int keep;   /* enum kv_keep */
    int window; /* KV_KEEP_WINDOW: positions a token sees; KV_KEEP_SINKS: most entries kept */
    int sinks;  /* KV_KEEP_SINKS: leading tokens kept, rounded up to whole blocks */
} kv_rule;

typedef struct kv_geom {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size; /* tokens per block */
    int dtype;      /* enum kv_dtype */
    int latent;     /* 0: K and V per kv head; > 0: the latent layout (see above), whose vectors'
                       first `latent` values are the value (kv_lora_rank); n_kv_heads is 1 */
    int n_groups;   /* layer groups; 0 means one: every layer in group 0, keeping everything */
    kv_rule rule[KV_MAX_GROUPS];          /* each group's rule */
    uint8_t layer_group[KV_MAX_LAYERS];   /* each layer's group (n_groups > 1) */
} kv_geom;

/* A geometry of one group of every layer, keeping everything. */
static inline kv_geom kv_geom_make(int n_layers, int n_kv_heads, int head_dim, int block_size, int dtype)
{
    kv_geom g;
    memset(&g, 0, sizeof g);
    g.n_layers = n_layers;
    g.n_kv_heads = n_kv_heads;
    g.head_dim = head_dim;
    g.block_size = block_size;
    g.dtype = dtype;
    return g;
}

static inline int kv_n_groups(const kv_geom *g)
{
    return g->n_groups > 1 ? g->n_groups : 1;
}

static inline int kv_group_of(const kv_geom *g, int layer)
{
    return g->n_groups > 1 ? g->layer_group[layer] : 0;
}

static inline int kv_group_layers(const kv_geom *g, int group)
{
    if (g->n_groups <= 1) return g->n_layers;
    int n = 0;
    for (int l = 0; l < g->n_layers; l++) n += g->layer_group[l] == group;
    return n;
}

/* Blocks of sinks a rule keeps (KV_KEEP_SINKS: sinks rounded up to whole blocks; else 0). */
static inline int kv_sink_blocks(const kv_rule *r, int block_size)
{
    return r->keep == KV_KEEP_SINKS ? (r->sinks + block_size - 1) / block_size : 0;
}

/* 1 for the quantised types (int8, fp8): values with one scale per head vector. */
static inline int kv_dtype_is_quant(int dtype)
{
    return dtype == KV_I8 || dtype == KV_FP8;
}

/* Bytes of one stored value (scales not counted). */
static inline size_t kv_dtype_bytes(int dtype)
{
    return dtype == KV_F32 ? 4 : kv_dtype_is_quant(dtype) ? 1 : 2;
}

static inline const char *kv_dtype_name(int dtype)
{
    static const char *const names[KV_N_DTYPES] = {"f16", "f32", "bf16", "int8", "fp8"};
    return dtype >= 0 && dtype < KV_N_DTYPES ? names[dtype] : "?";
}

/* -1 when unknown. Accepts the names of kv_dtype_name, plus "i8" and "fp8_e4m3". */
static inline int kv_dtype_parse(const char *s)
{
    if (!s) return -1;
    for (int d = 0; d < KV_N_DTYPES; d++)
        if (!strcmp(s, kv_dtype_name(d))) return d;
    if (!strcmp(s, "i8")) return KV_I8;
    if (!strcmp(s, "fp8_e4m3") || !strcmp(s, "e4m3")) return KV_FP8;
    return -1;
}

/* Vectors stored per token, layer and kv head: K and V (2), or the latent alone (1). */
static inline int kv_n_vecs(const kv_geom *g)
{
    return g->latent ? 1 : 2;
}

/* Bytes of one token's K (or V) vector of one kv head, its scale included. */
static inline size_t kv_vec_bytes(const kv_geom *g)
{
    return (size_t)g->head_dim * kv_dtype_bytes(g->dtype) + (kv_dtype_is_quant(g->dtype) ? KV_SCALE_BYTES : 0);
}

/* Bytes of one (layer, K or V, block, kv head) tile: block_size vectors, scales included. */
static inline size_t kv_tile_bytes(const kv_geom *g)
{
    return kv_vec_bytes(g) * (size_t)g->block_size;
}

/* 2 (or 1: latent) × n_layers × n_kv_heads × bytes per head vector: every layer, all groups
 * together. */
static inline size_t kv_bytes_per_token(const kv_geom *g)
{
    return (size_t)kv_n_vecs(g) * (size_t)g->n_layers * (size_t)g->n_kv_heads * kv_vec_bytes(g);
}

/* The same for the layers of one group. */
static inline size_t kv_group_bytes_per_token(const kv_geom *g, int group)
{
    return (size_t)kv_n_vecs(g) * (size_t)kv_group_layers(g, group) * (size_t)g->n_kv_heads * kv_vec_bytes(g);
}

/* Bytes of one block of one group (every layer of the group, K and V). */
static inline size_t kv_group_bytes_per_block(const kv_geom *g, int group)
{
    return kv_group_bytes_per_token(g, group) * (size_t)g->block_size;
}

/* Bytes of one block of every layer (the single-group geometry's block). */
static inline size_t kv_bytes_per_block(const kv_geom *g)
{
    return kv_bytes_per_token(g) * (size_t)g->block_size;
}

/* Most blocks one sequence holds at once in a group: its whole context (n_ctx tokens) when the
 * group keeps everything; one window of entries under KV_KEEP_SINKS; under KV_KEEP_WINDOW the
 * window plus one step's chunk of new tokens (max_chunk, which the scheduler caps at one window)
 * and the block the window starts in. Never more than the whole context. */
static inline int64_t kv_group_seq_blocks(const kv_geom *g, int group, int64_t n_ctx, int max_chunk)
{
    const kv_rule *r = &g->rule[group];
    int64_t bs = g->block_size, all = (n_ctx + bs - 1) / bs, n = all;
    if (r->keep == KV_KEEP_SINKS) n = (r->window + bs - 1) / bs;
    else if (r->keep == KV_KEEP_WINDOW)
        n = (r->window + (max_chunk < r->window ? max_chunk : r->window) + bs - 2) / bs + 1;
    return n < all ? n : all;
}

/* Writes the formula of kv_bytes_per_token without its result into buf, e.g.
 * "2 × 5 layers × 4 kv heads × 8 head dim × 2 bytes" (named) or "2 × 5 × 4 × (8 × 1 + 2)" for an
 * int8 cache (unnamed); the latent layout's "5 layers × (512 latent + 64 rope) × 2 bytes" or
 * "5 × (576 × 1 + 2)". Returns what snprintf returns. (kv.c) */
int kv_formula(const kv_geom *g, int named, char *buf, size_t len);

/* Number of whole blocks that fit in budget_bytes (one group of every layer). */
static inline int64_t kv_blocks_for_budget(const kv_geom *g, size_t budget_bytes)
{
    size_t b = kv_bytes_per_block(g);
    return b ? (int64_t)(budget_bytes / b) : 0;
}

/* Splits budget_bytes between the groups in proportion to what one sequence of n_ctx tokens
 * holds in each (kv_group_seq_blocks), so every group runs out at the same number of
 * sequences; n_blocks[group] gets each group's blocks. Returns how many such sequences fit. */
int64_t kv_split_budget(const kv_geom *g, size_t budget_bytes, int64_t n_ctx, int max_chunk, int64_t *n_blocks);

/* ---- codecs of the quantised types ------------------------------------------------------- */

/* The scale of a head vector whose largest magnitude is amax, before its rounding up to f16:
 * amax / 127 (int8) or amax / 448 (fp8). */
static inline KV_HD float kv_quant_scale(int dtype, float amax)
{
    return amax / (dtype == KV_FP8 ? KV_FP8_QMAX : KV_I8_QMAX);
}

/* int8 code of x for a vector whose stored scale is d, given inv = 1 / d (0 when d is 0):
 * the nearest integer to x / d (ties to even), clamped to [-127, 127]; NaN becomes -127. */
static inline KV_HD int8_t kv_i8_encode(float x, float inv)
{
    float v = fminf(fmaxf(x * inv, -KV_I8_QMAX), KV_I8_QMAX);
    return (int8_t)rintf(v);
}

static inline KV_HD uint32_t kv__f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

static inline KV_HD float kv__bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* e4m3 (OCP FP8: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities, S.1111.111
 * is NaN, largest finite 448) of x, rounded to nearest even, saturating to ±448. */
static inline KV_HD uint8_t kv_e4m3_encode(float x)
{
    uint32_t u = kv__f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    float a = fabsf(x);
    if (a != a) return (uint8_t)(sign | 0x7fu);
    if (a >= KV_FP8_QMAX) return (uint8_t)(sign | 0x7eu);
    if (a < 0.015625f) /* below 2^-6: subnormal steps of 2^-9 (8 rounds up to the smallest normal) */
        return (uint8_t)(sign | (uint8_t)rintf(a * 512.0f));
    uint32_t ua = u & 0x7fffffffu;
    uint32_t r = ua + 0x7ffffu + ((ua >> 20) & 1u); /* round the 23-bit mantissa to 3 bits */
    uint32_t e = (r >> 23) - 127u + 7u, m = (r >> 20) & 7u;
    if (e > 15u || (e == 15u && m == 7u)) return (uint8_t)(sign | 0x7eu);
    return (uint8_t)(sign | (e << 3) | m);
}

/* The value of an e4m3 code (exact in f32). */
static inline KV_HD float kv_e4m3_decode(uint8_t b)
{
    uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 15u && m == 7u) v = NAN;
    else if (e == 0) v = (float)m * 0.001953125f; /* m × 2^-9 */
    else v = kv__bits_f32(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -v : v;
}

#endif
