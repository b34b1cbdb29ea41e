/*
 * attn_emu.cc — runs the CUDA attention kernels (cuda/attn_kernels.h) and the quantising K/V
 * store (cuda/kv_kernels.h), the very source nvcc compiles, on the CPU through
 * cuda/check/emu_cuda.h, and compares them with references: attention against float64 paged
 * attention over the values the arena holds (decode, prefill chunks over cached prefixes, GQA
 * groups, head sizes that are not multiples of 32, block sizes whose tiles are not 16-byte
 * aligned, split-K with its reduction kernel, the per-layer parameters of be_attn (scale,
 * soft-cap, sliding window), attention sinks met by their own queries, learned per-head sink
 * logits (gpt-oss); f32, int8 and e4m3
 * arenas), and the store's codes and scales
 * against the codecs of cache/kv.h, byte for byte.
 *
 * It needs no GPU and no CUDA toolkit (only a C++17 compiler and POSIX threads), so machines
 * without a GPU can still check the kernels' indexing, masking, dequantisation and
 * online-softmax merging. Built and run by `scripts/gpu-check.sh --emulate` (every case) and by
 * `make test` (`--quick`: a few small cases). Exit status 0 when every attention case is within
 * 1e-5 relative error of float64 over the stored values (the kernel computes in f32; its
 * products of dequantised values are as exact as those of an f32 arena) and every stored byte
 * matches. Launch planning (items, splits) uses the same cuda/attn_plan.h helpers as the backend.
 */
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "cuda/check/emu_cuda.h"
extern "C" {
#include "cuda/attn_plan.h"
#include "cuda/kv_layout.h"
}
#include "cuda/attn_decode_kernels.h"
#include "cuda/attn_kernels.h"
#include "cuda/attn_mma_kernels.h"
#include "cuda/kv_kernels.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
pthread_barrier_t emu_bar, emu_wbar[32];
float emu_xchg[1024];
alignas(16) float sm[1 << 18];

/* One emulated launch: every thread walks all blocks of the grid in order. */
struct emu_launch {
    int kind; /* 0 reference attention, 1 split reduction, 2 quantising store (one block per token
                 row), 3 a tensor-core kernel (tc) */
    int dtype; /* enum kv_dtype of the arena: KV_F32, KV_I8 or KV_FP8 */
    cuda__attn_args a;
    const void *kp, *vp;
    int n_heads, head_dim, splits;
    /* store: rows [n_rows][n_kv_heads × head_dim] into slots[n_rows] of plane `plane` */
    const float *rows;
    const int32_t *slots;
    void *plane;
    cuda_kv_layout l;
    void (*tc)(const cuda__attn_args &, const void *, const void *); /* kind 3 */
};
static emu_launch emu_l;

static void emu_block()
{
    const emu_launch &e = emu_l;
    if (e.kind == 1) {
        cuda__attn_reduce_k<float>(e.a.part, (float *)e.a.out, e.n_heads, e.head_dim, e.splits, e.a.head_sinks);
    } else if (e.kind == 2) {
        const float *row = e.rows + (size_t)blockIdx.x * e.l.n_kv_heads * e.l.head_dim;
        if (e.dtype == KV_I8) cuda__store_q_row(row, (int8_t *)e.plane, e.l, e.slots[blockIdx.x]);
        else cuda__store_q_row(row, (uint8_t *)e.plane, e.l, e.slots[blockIdx.x]);
    } else if (e.kind == 3) {
        e.tc(e.a, e.kp, e.vp);
    } else if (e.dtype == KV_I8) {
        cuda__attn_k<int8_t, float>(e.a, (const int8_t *)e.kp, (const int8_t *)e.vp);
    } else if (e.dtype == KV_FP8) {
        cuda__attn_k<uint8_t, float>(e.a, (const uint8_t *)e.kp, (const uint8_t *)e.vp);
    } else {
        cuda__attn_k<float, float>(e.a, (const float *)e.kp, (const float *)e.vp);
    }
}

static uint64_t emu_rs = 0x656d75ULL;
static uint64_t emu_next()
{
    emu_rs ^= emu_rs << 13;
    emu_rs ^= emu_rs >> 7;
    emu_rs ^= emu_rs << 17;
    return emu_rs;
}
static float emu_unif()
{
    return (float)((emu_next() >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}
static int emu_int(int lo, int hi)
{
    return lo + (int)(emu_next() % (uint64_t)(hi - lo + 1));
}

struct emu_case {
    int n_seqs, max_ctx, max_new, n_heads, n_kv_heads, head_dim, n_sm, block_size, dtype;
    float softcap; /* 0: off */
    int window;    /* 0: full causal */
    float scale;   /* 0: 1/sqrt(head_dim) */
    int sinks;     /* > 0: every sequence longer than this meets its first `sinks` keys with q_sink */
    int learned;   /* 1: a learned sink logit per head (gpt-oss) joins every softmax */
};

/* The value the arena holds at (kind, slot, head, e) of plane pair (kp, vp) of one layer. */
static double emu_value(const std::vector<uint8_t> &arena, const cuda_kv_layout &l, int dtype, int kind,
                        int32_t slot, int h, int e)
{
    int64_t i = cuda_kv_slot_index(&l, 0, kind, slot, h, e);
    if (dtype == KV_F32) return ((const float *)arena.data())[i];
    if (dtype == KV_F16) return cuda_f16_to_f32(((const uint16_t *)arena.data())[i]);
    if (dtype == KV_BF16) return cuda_bf16_to_f32(((const uint16_t *)arena.data())[i]);
    int32_t blk = slot / l.block_size;
    double d = cuda_kv_load_scale(&arena[cuda_kv_scale_index(&l, 0, kind, blk, h, slot % l.block_size)]);
    return d * (dtype == KV_I8 ? (double)(int8_t)arena[i] : (double)kv_e4m3_decode(arena[i]));
}

/* Host reference of the quantising store: codes and scale of one head vector x[head_dim]. */
static int emu_store_matches(const std::vector<uint8_t> &arena, const cuda_kv_layout &l, int dtype, int kind,
                             int32_t slot, int h, const float *x)
{
    float amax = 0, inv;
    for (int e = 0; e < l.head_dim; e++) amax = std::max(amax, fabsf(x[e]));
    uint16_t sc = cuda_kv_scale(dtype, amax, &inv);
    int32_t blk = slot / l.block_size;
    const uint8_t *sp = &arena[cuda_kv_scale_index(&l, 0, kind, blk, h, slot % l.block_size)];
    if ((uint16_t)(sp[0] | (sp[1] << 8)) != sc) return 0;
    for (int e = 0; e < l.head_dim; e++) {
        uint8_t want = dtype == KV_I8 ? (uint8_t)kv_i8_encode(x[e], inv) : kv_e4m3_encode(x[e] * inv);
        if (arena[cuda_kv_slot_index(&l, 0, kind, slot, h, e)] != want) return 0;
    }
    return 1;
}

/* Fills every slot of the arena (one layer): f32 values directly, quantised ones through the
 * emulated store kernel from random rows whose heads have different magnitudes (one head of
 * every tenth row all zero). Returns 0 when a stored byte differs from the host codecs. */
static int emu_fill(std::vector<uint8_t> &arena, const cuda_kv_layout &l, int dtype)
{
    int64_t plane = cuda_kv_plane_elems(&l);
    if (dtype == KV_F32) {
        float *f = (float *)arena.data();
        for (int64_t i = 0; i < 2 * plane; i++) f[i] = emu_unif();
        return 1;
    }
    if (dtype == KV_F16 || dtype == KV_BF16) {
        uint16_t *h = (uint16_t *)arena.data();
        for (int64_t i = 0; i < 2 * plane; i++)
            h[i] = dtype == KV_F16 ? cuda_f32_to_f16(emu_unif()) : cuda_f32_to_bf16(emu_unif());
        return 1;
    }
    int n_slots = l.n_blocks * l.block_size, dim = l.n_kv_heads * l.head_dim;
    std::vector<float> rows((size_t)n_slots * dim);
    std::vector<int32_t> slots(n_slots);
    for (int r = 0; r < n_slots; r++) {
        slots[r] = r;
        for (int h = 0; h < l.n_kv_heads; h++) {
            float mag = r % 10 == 3 && h == 0 ? 0.0f : (float)exp(3.0 * emu_unif());
            for (int e = 0; e < l.head_dim; e++) rows[(size_t)r * dim + h * l.head_dim + e] = mag * emu_unif();
        }
    }
    emu_l.kind = 2, emu_l.dtype = dtype, emu_l.rows = rows.data(), emu_l.slots = slots.data(), emu_l.l = l;
    dim3 g;
    g.x = (unsigned)n_slots;
    for (int kind = 0; kind < 2; kind++) {
        emu_l.plane = arena.data() + kind * plane;
        emu_run(g, 64, emu_block); /* two warps: each takes every other kv head */
        for (int r = 0; r < n_slots; r++)
            for (int h = 0; h < l.n_kv_heads; h++)
                if (!emu_store_matches(arena, l, dtype, kind, r, h, &rows[(size_t)r * dim + h * l.head_dim])) {
                    printf("  store mismatch: %s kind %d slot %d head %d\n", kv_dtype_name(dtype), kind, r, h);
                    return 0;
                }
    }
    return 1;
}

/* Random paged KV (shuffled block tables), random queries; the kernel's output against float64. */
static double emu_check(const emu_case &c, int *splits_out)
{
    const int bs = c.block_size, gsize = c.n_heads / c.n_kv_heads, D = c.head_dim;
    std::vector<int32_t> ctx(c.n_seqs), n_new(c.n_seqs), q_start(c.n_seqs + 1);
    int stride = (c.max_ctx + bs - 1) / bs, n_blocks = c.n_seqs * stride + 3;
    std::vector<int32_t> perm(n_blocks), bt((size_t)c.n_seqs * stride);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) std::swap(perm[i], perm[emu_int(0, i)]);
    int n = 0, k = 0;
    for (int s = 0; s < c.n_seqs; s++) {
        ctx[s] = emu_int(1, c.max_ctx);
        n_new[s] = std::min(ctx[s], emu_int(1, c.max_new));
        q_start[s] = n;
        n += n_new[s];
        for (int j = 0; j < (ctx[s] + bs - 1) / bs; j++) bt[(size_t)s * stride + j] = perm[k++];
    }
    q_start[c.n_seqs] = n;
    kv_geom geom = kv_geom_make(1, c.n_kv_heads, D, bs, c.dtype);
    cuda_kv_layout l = cuda_kv_layout_of(&geom, n_blocks);
    std::vector<uint8_t> arena((size_t)cuda_kv_total_elems(&l) * kv_dtype_bytes(c.dtype));
    if (!emu_fill(arena, l, c.dtype)) return INFINITY;
    std::vector<float> q((size_t)n * c.n_heads * D), qs(q.size()), out((size_t)n * c.n_heads * D, 1e30f);
    for (auto &x : q) x = 2 * emu_unif() / (c.dtype == KV_F32 ? 1.0f : 8.0f); /* quantised K are larger */
    for (auto &x : qs) x = 2 * emu_unif() / (c.dtype == KV_F32 ? 1.0f : 8.0f);
    std::vector<int32_t> sinks(c.n_seqs);
    for (int s = 0; s < c.n_seqs; s++) sinks[s] = c.sinks > 0 && ctx[s] > c.sinks ? c.sinks : 0;

    be_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n, b.n_seqs = c.n_seqs, b.q_start = q_start.data(), b.n_kv = 1;
    b.kv[0].ctx_len = ctx.data(), b.kv[0].block_table = bt.data(), b.kv[0].bt_stride = stride;
    int tile = cuda_attn_tile_tokens(gsize);
    std::vector<int32_t> items((size_t)CUDA_ATTN_ITEM_INTS * n);
    int32_t max_kv = 0, part = 0;
    int32_t n_items = cuda_attn_plan(&b, tile, items.data(), &max_kv);
    int splits = cuda_attn_splits(n_items, c.n_kv_heads, max_kv, c.n_sm, n, c.n_heads, D, &part);
    *splits_out = splits;
    std::vector<float> partial((size_t)n * c.n_heads * splits * (D + 2), 1e30f);
    if (cuda__attn_smem(tile * gsize, D) > sizeof sm) return INFINITY;

    cuda__attn_args &a = emu_l.a;
    a.q = q.data(), a.out = out.data(), a.part = partial.data();
    a.q_start = q_start.data(), a.ctx_len = ctx.data(), a.block_table = bt.data(), a.items = items.data();
    a.bt_stride = stride, a.block_size = bs, a.n_kv_heads = c.n_kv_heads, a.n_heads = c.n_heads;
    a.head_dim = D, a.gsize = gsize, a.splits = splits, a.part_keys = part;
    a.scale = c.scale > 0 ? c.scale : 1.0f / sqrtf((float)D), a.softcap = c.softcap, a.window = c.window;
    a.tile_elems = (int32_t)cuda_kv_tile_elems(&l);
    a.sinks = c.sinks > 0 ? sinks.data() : NULL, a.q_sink = qs.data();
    std::vector<float> hsink(c.n_heads);
    for (auto &x : hsink) x = 3 * emu_unif();
    a.head_sinks = c.learned ? hsink.data() : NULL;
    size_t es = kv_dtype_bytes(c.dtype);
    emu_l.kind = 0;
    emu_l.dtype = c.dtype;
    emu_l.kp = arena.data();
    emu_l.vp = arena.data() + cuda_kv_plane_elems(&l) * es;
    dim3 g;
    g.x = (unsigned)splits, g.y = (unsigned)c.n_kv_heads, g.z = (unsigned)n_items;
    emu_run(g, CUDA_ATTN_THREADS, emu_block);
    if (splits > 1) {
        emu_l.kind = 1, emu_l.n_heads = c.n_heads, emu_l.head_dim = D, emu_l.splits = splits;
        dim3 g2;
        g2.x = (unsigned)c.n_heads, g2.y = (unsigned)n;
        emu_run(g2, cuda_attn_reduce_threads(D), emu_block); /* as the launcher does */
    }

    double num = 0, den = 0;
    std::vector<double> sc;
    for (int s = 0; s < c.n_seqs; s++)
        for (int i = 0; i < n_new[s]; i++) {
            int t = q_start[s] + i, qp = ctx[s] - n_new[s] + i;
            const int32_t *row = &bt[(size_t)s * stride];
            for (int h = 0; h < c.n_heads; h++) {
                int kvh = h / gsize;
                sc.assign(qp + 1, 0.0);
                double mx = -1e300, z = 0;
                int lo = c.window > 0 && qp - c.window + 1 > 0 ? qp - c.window + 1 : 0;
                for (int j = lo; j <= qp; j++) {
                    int32_t slot = cuda_kv_entry_slot(row, bs, j);
                    const float *qr = (j < sinks[s] ? qs.data() : q.data()) + ((size_t)t * c.n_heads + h) * D;
                    double d = 0;
                    for (int e = 0; e < D; e++) d += (double)qr[e] * emu_value(arena, l, c.dtype, 0, slot, kvh, e);
                    sc[j] = d * (c.scale > 0 ? c.scale : 1.0 / sqrt((double)D));
                    if (c.softcap > 0) sc[j] = c.softcap * tanh(sc[j] / c.softcap);
                    mx = std::max(mx, sc[j]);
                }
                if (c.learned) mx = std::max(mx, (double)hsink[h]);
                for (int j = lo; j <= qp; j++) z += exp(sc[j] - mx);
                if (c.learned) z += exp(hsink[h] - mx); /* the sink: in the denominator, no value */
                for (int e = 0; e < D; e++) {
                    double o = 0;
                    for (int j = lo; j <= qp; j++)
                        o += exp(sc[j] - mx) / z * emu_value(arena, l, c.dtype, 1, cuda_kv_entry_slot(row, bs, j), kvh, e);
                    double got = out[((size_t)t * c.n_heads + h) * D + e];
                    if (!(fabs(got) < 1e29)) return INFINITY; /* unwritten or NaN */
                    num += (got - o) * (got - o);
                    den += o * o;
                }
            }
        }
    return sqrt(num / den);
}

/* ---- the tensor-core kernels ------------------------------------------------------------ */

enum { Q_F32, Q_BF16, Q_F16 }; /* the query / output element type of a tensor-core case */
static const char *const emu_q_name[] = {"f32", "bf16", "f16"};
static size_t emu_q_bytes(int qt)
{
    return qt == Q_F32 ? 4 : 2;
}
/* x rounded to the query type, and its value there (stored at p). */
static double emu_q_put(int qt, void *p, size_t i, float x)
{
    if (qt == Q_F32) return ((float *)p)[i] = x;
    uint16_t h = qt == Q_BF16 ? cuda_f32_to_bf16(x) : cuda_f32_to_f16(x);
    ((uint16_t *)p)[i] = h;
    return qt == Q_BF16 ? cuda_bf16_to_f32(h) : cuda_f16_to_f32(h);
}
static double emu_q_get(int qt, const void *p, size_t i)
{
    if (qt == Q_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return qt == Q_BF16 ? cuda_bf16_to_f32(h) : cuda_f16_to_f32(h);
}

typedef void (*emu_tc_fn)(const cuda__attn_args &, const void *, const void *);
template <typename TKV, typename TQ, int D> static void emu_tc_dec(const cuda__attn_args &a, const void *kp, const void *vp)
{
    cuda__attn_dec_k<TKV, TQ, D>(a, (const TKV *)kp, (const TKV *)vp);
}
template <typename TKV, typename TQ, int D> static void emu_tc_pf(const cuda__attn_args &a, const void *kp, const void *vp)
{
    cuda__attn_pf_k<TKV, TQ, D>(a, (const TKV *)kp, (const TKV *)vp);
}
/* The instances the cases use (each case names one). */
struct emu_tc_kernels {
    int kv, q, d;
    emu_tc_fn dec, pf;
};
#define EMU_TC(TKV, KV, TQ, Q, D) {KV, Q, D, emu_tc_dec<TKV, TQ, D>, emu_tc_pf<TKV, TQ, D>}
static const emu_tc_kernels emu_tc_table[] = {
    EMU_TC(__half, KV_F16, float, Q_F32, 64),           EMU_TC(__half, KV_F16, float, Q_F32, 128),
    EMU_TC(__half, KV_F16, float, Q_F32, 256),          EMU_TC(__half, KV_F16, __half, Q_F16, 96),
    EMU_TC(__nv_bfloat16, KV_BF16, float, Q_F32, 64),   EMU_TC(__nv_bfloat16, KV_BF16, float, Q_F32, 256),
    EMU_TC(__nv_bfloat16, KV_BF16, __nv_bfloat16, Q_BF16, 128),
    EMU_TC(int8_t, KV_I8, float, Q_F32, 64),            EMU_TC(int8_t, KV_I8, float, Q_F32, 128),
    EMU_TC(int8_t, KV_I8, __half, Q_F16, 96),           EMU_TC(uint8_t, KV_FP8, __nv_bfloat16, Q_BF16, 64),
};

struct tc_case {
    const char *what;  /* the row: the kernels it exercises and what it covers */
    int n_seqs, n_decode;          /* sequences; the first n_decode decode one token */
    int min_ctx, max_ctx, min_new, max_new;
    int n_heads, n_kv_heads, head_dim, block_size, kv_dtype, q_type;
    float softcap;
    int window, sinks, n_sm, quick; /* quick: part of --quick (make test) */
    int learned;                    /* 1: a learned sink logit per head (gpt-oss) */
};

/* Unit roundoff of the products' 16-bit type: bf16 for a bf16 cache, else f16. */
static double emu_u16(int kv_dtype)
{
    return kv_dtype == KV_BF16 ? 1.0 / 256 : 1.0 / 2048;
}

/* One output row's float64 reference (o[D]) and, per element, the bound the kernels' arithmetic
 * allows (bnd[D]): with w_j the exact softmax weights of the visible keys j,
 *   |δs_j| ≤ E_j = (u_q + u_k + γ) Σ_d |q_d · scale · k_jd|   (q and the dequantised k rounded to
 *                 the 16-bit type, f32 sums; soft-capping has slope ≤ 1)
 *   |δo_d| ≤ Σ_j w_j |v_jd − o_d| E_j                          (first order in δs)
 *          + (u_p + u_v + γ_o) Σ_j w_j |v_jd| + 2⁻²⁵ Σ_j |v_jd| (P and the dequantised v rounded,
 *                 f16's subnormal P, f32 exp / sums / merges)
 *          + u_o |o_d|                                         (a 16-bit output)
 * u_q = u_p = the products' unit roundoff, u_k = u_v = 2⁻¹¹ for a quantised cache (its values
 * rounded to f16) else 0, u_o that of the output type, γ = (D + 16) 2⁻²⁴, γ_o = 2⁻¹⁹. */
static void emu_tc_ref_row(const tc_case &c, const std::vector<uint8_t> &arena, const cuda_kv_layout &l,
                           const int32_t *bt_row, int qp, int lo, int n_sink, const void *q, const void *qs,
                           size_t qrow, double scale, const float *head_sinks, double *o, double *bnd)
{
    const int D = c.head_dim, kvh = (int)(qrow % c.n_heads) / (c.n_heads / c.n_kv_heads);
    const int quant = c.kv_dtype == KV_I8 || c.kv_dtype == KV_FP8;
    const double u = emu_u16(c.kv_dtype), uk = quant ? 1.0 / 2048 : 0.0, gam = (D + 16) / 16777216.0;
    const double uo = c.q_type == Q_F32 ? 0 : c.q_type == Q_BF16 ? 1.0 / 256 : 1.0 / 2048;
    int n = qp + 1 - lo;
    std::vector<double> s(n), E(n), w(n), v((size_t)n * D);
    double mx = -1e300, z = 0;
    for (int k = 0; k < n; k++) {
        int j = lo + k;
        int32_t slot = cuda_kv_entry_slot(bt_row, c.block_size, j);
        const void *qq = j < n_sink ? qs : q;
        double d = 0, da = 0;
        for (int e = 0; e < D; e++) {
            double x = emu_q_get(c.q_type, qq, qrow * D + e) * scale, y = emu_value(arena, l, c.kv_dtype, 0, slot, kvh, e);
            d += x * y, da += fabs(x * y);
            v[(size_t)k * D + e] = emu_value(arena, l, c.kv_dtype, 1, slot, kvh, e);
        }
        s[k] = c.softcap > 0 ? c.softcap * tanh(d / c.softcap) : d;
        E[k] = (u + uk + gam) * da + (c.softcap > 0 ? 4 * c.softcap / 16777216.0 : 0);
        mx = std::max(mx, s[k]);
    }
    /* a learned sink: one more term in the denominator, no value (its factor's f32 exp and
     * division add a few units of 2⁻²⁴ to every output: the u_s term) */
    double sink = head_sinks ? head_sinks[qrow % c.n_heads] : -INFINITY, us = head_sinks ? 8.0 / 16777216 : 0;
    mx = std::max(mx, sink);
    for (int k = 0; k < n; k++) z += w[k] = exp(s[k] - mx);
    if (head_sinks) z += exp(sink - mx);
    for (int k = 0; k < n; k++) w[k] /= z;
    for (int e = 0; e < D; e++) {
        double od = 0, wa = 0, va = 0, sd = 0;
        for (int k = 0; k < n; k++) od += w[k] * v[(size_t)k * D + e];
        for (int k = 0; k < n; k++) {
            double x = v[(size_t)k * D + e];
            wa += w[k] * fabs(x), va += fabs(x), sd += w[k] * fabs(x - od) * E[k];
        }
        o[e] = od;
        bnd[e] = sd + (u + uk + 1.0 / 524288) * wa + va / 33554432.0 + (uo + us) * fabs(od);
    }
}

/* One tensor-core case: random paged KV (shuffled block tables) and queries, planned as the
 * backend plans a step (cuda_attn_tc_plan), the decode and prefill kernels launched on their
 * items, every output element checked against float64 within 1.5× its bound (the bound is first
 * order; the second-order terms are far below half of it at these score ranges). Returns 0 when
 * all pass; *worst gets the largest |error| / bound and *rel the relative error of the whole. */
static int emu_tc_check(const tc_case &c, double *worst, double *rel, cuda_attn_tc *plan)
{
    const emu_tc_kernels *kn = NULL;
    for (const emu_tc_kernels &k : emu_tc_table)
        if (k.kv == c.kv_dtype && k.q == c.q_type && k.d == c.head_dim) kn = &k;
    if (!kn) {
        printf("  no emulated instance for this case\n");
        return 1;
    }
    const int bs = c.block_size, gsize = c.n_heads / c.n_kv_heads, D = c.head_dim;
    std::vector<int32_t> ctx(c.n_seqs), n_new(c.n_seqs), q_start(c.n_seqs + 1);
    int stride = (c.max_ctx + bs - 1) / bs, n_blocks = c.n_seqs * stride + 3;
    std::vector<int32_t> perm(n_blocks), bt((size_t)c.n_seqs * stride);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) std::swap(perm[i], perm[emu_int(0, i)]);
    int n = 0, k = 0;
    for (int s = 0; s < c.n_seqs; s++) {
        ctx[s] = emu_int(c.min_ctx, c.max_ctx);
        n_new[s] = s < c.n_decode ? 1 : std::min(ctx[s], emu_int(c.min_new, c.max_new));
        q_start[s] = n;
        n += n_new[s];
        for (int j = 0; j < (ctx[s] + bs - 1) / bs; j++) bt[(size_t)s * stride + j] = perm[k++];
    }
    q_start[c.n_seqs] = n;
    kv_geom geom = kv_geom_make(1, c.n_kv_heads, D, bs, c.kv_dtype);
    cuda_kv_layout l = cuda_kv_layout_of(&geom, n_blocks);
    std::vector<uint8_t> arena((size_t)cuda_kv_total_elems(&l) * kv_dtype_bytes(c.kv_dtype));
    if (!emu_fill(arena, l, c.kv_dtype)) return 1;
    const size_t nq = (size_t)n * c.n_heads * D, qb = emu_q_bytes(c.q_type);
    const int quant = c.kv_dtype == KV_I8 || c.kv_dtype == KV_FP8;
    std::vector<uint8_t> q(nq * qb), qs(nq * qb), out(nq * qb);
    for (size_t i = 0; i < nq; i++) {
        emu_q_put(c.q_type, q.data(), i, 3 * emu_unif() / (quant ? 8.0f : 1.0f));
        emu_q_put(c.q_type, qs.data(), i, 3 * emu_unif() / (quant ? 8.0f : 1.0f));
        emu_q_put(c.q_type, out.data(), i, INFINITY); /* poison: an unwritten element fails */
    }
    std::vector<int32_t> sinks(c.n_seqs);
    for (int s = 0; s < c.n_seqs; s++) sinks[s] = c.sinks > 0 && ctx[s] > c.sinks ? c.sinks : 0;

    be_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n, b.n_seqs = c.n_seqs, b.q_start = q_start.data(), b.n_kv = 1;
    b.kv[0].ctx_len = ctx.data(), b.kv[0].block_table = bt.data(), b.kv[0].bt_stride = stride;
    std::vector<int32_t> items((size_t)CUDA_ATTN_ITEM_INTS * 2 * (n + c.n_seqs));
    int32_t n_items = cuda_attn_tc_plan(&b, gsize, c.n_kv_heads, D, c.n_sm, 0, items.data(), plan);
    if (n_items != plan->n_dec + plan->n_pre) return 1;
    std::vector<float> part(plan->dec_floats + plan->pre_floats + 1, 1e30f);
    std::vector<int32_t> sem((size_t)n_items * c.n_kv_heads, 0);

    cuda__attn_args &a = emu_l.a;
    memset(&a, 0, sizeof a);
    a.q = q.data(), a.out = out.data(), a.q_sink = qs.data(), a.sinks = c.sinks > 0 ? sinks.data() : NULL;
    a.q_start = q_start.data(), a.ctx_len = ctx.data(), a.block_table = bt.data();
    a.bt_stride = stride, a.block_size = bs, a.n_kv_heads = c.n_kv_heads, a.n_heads = c.n_heads;
    a.head_dim = D, a.gsize = gsize, a.scale = 1.0f / sqrtf((float)D), a.softcap = c.softcap, a.window = c.window;
    a.tile_elems = (int32_t)cuda_kv_tile_elems(&l);
    std::vector<float> hsink(c.n_heads);
    for (float &x : hsink) x = 6 + 3 * emu_unif(); /* above the scores: a real share even of 1500 keys */
    a.head_sinks = c.learned ? hsink.data() : NULL;
    size_t es = kv_dtype_bytes(c.kv_dtype);
    emu_l.kind = 3, emu_l.kp = arena.data(), emu_l.vp = arena.data() + cuda_kv_plane_elems(&l) * es;
    for (int kind = 0; kind < 2; kind++) { /* decode items, then prefill items, as the backend */
        int32_t ni = kind ? plan->n_pre : plan->n_dec;
        if (!ni) continue;
        a.items = items.data() + (kind ? plan->n_dec : 0) * CUDA_ATTN_ITEM_INTS, a.n_items = ni;
        a.splits = kind ? plan->pre_splits : plan->dec_splits, a.part_keys = kind ? plan->pre_part : plan->dec_part;
        a.tc_part = part.data() + (kind ? plan->dec_floats : 0);
        a.sem = sem.data() + (kind ? plan->n_dec : 0) * c.n_kv_heads;
        size_t smem = kind ? cuda_attn_pf_smem(D, quant, a.sinks != NULL) : cuda_attn_dec_smem(D, (int)es, a.sinks != NULL);
        if (smem > sizeof sm) return 1;
        emu_l.tc = kind ? kn->pf : kn->dec;
        dim3 g;
        g.x = (unsigned)a.splits, g.y = (unsigned)c.n_kv_heads, g.z = (unsigned)ni;
        emu_run(g, CUDA_ATTN_TC_THREADS, emu_block);
    }
    for (int32_t x : sem)
        if (x != 0) {
            printf("  a split counter was left at %d\n", x);
            return 1;
        }

    double num = 0, den = 0;
    *worst = 0;
    std::vector<double> o(D), bnd(D);
    for (int s = 0; s < c.n_seqs; s++)
        for (int i = 0; i < n_new[s]; i++) {
            int t = q_start[s] + i, qp = ctx[s] - n_new[s] + i;
            int lo = c.window > 0 && qp - c.window + 1 > 0 ? qp - c.window + 1 : 0;
            for (int h = 0; h < c.n_heads; h++) {
                size_t row = (size_t)t * c.n_heads + h;
                emu_tc_ref_row(c, arena, l, &bt[(size_t)s * stride], qp, lo, sinks[s], q.data(), qs.data(), row,
                               1.0 / sqrt((double)D), a.head_sinks, o.data(), bnd.data());
                for (int e = 0; e < D; e++) {
                    double got = emu_q_get(c.q_type, out.data(), row * D + e);
                    if (!(fabs(got) < 1e29)) {
                        printf("  token %d head %d dim %d unwritten or not finite\n", t, h, e);
                        return 1;
                    }
                    double err = fabs(got - o[e]);
                    *worst = std::max(*worst, err / bnd[e]);
                    num += err * err, den += o[e] * o[e];
                }
            }
        }
    *rel = sqrt(num / den);
    return *worst > 1.5;
}

/* The emulated mma and ldmatrix against the layouts they document (one warp). */
static int emu_selftest_bad;
static void emu_selftest_block()
{
    emu_selftest_bad |= emu_mma_selftest(blockIdx.x + 1);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const emu_case cases[] = {
        /* seqs, max ctx, max new, heads, kv heads, head_dim, SMs (small → split-K), block, KV,
         * soft-cap, window, scale */
        {5, 90, 1, 8, 4, 8, 100, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},     /* decode, stories260K's shape */
        {2, 900, 1, 8, 2, 64, 100, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},   /* long decode: split-K */
        {3, 300, 70, 4, 4, 64, 100, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},  /* prefill chunks over cached prefixes, MHA */
        {6, 300, 40, 16, 2, 32, 2, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},   /* mixed decode + prefill, GQA 8 */
        {4, 200, 30, 32, 4, 16, 100, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0}, /* mixed, GQA 8, two tokens per tile */
        {1, 1300, 1, 2, 1, 40, 64, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},   /* head_dim not a multiple of 32, split-K */
        {2, 600, 200, 2, 2, 8, 4, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},    /* long prefill split across partitions */
        {3, 129, 64, 64, 1, 8, 100, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},  /* MQA: a group larger than the row target */
        {3, 150, 20, 4, 2, 10, 100, 16, KV_F32, 0.0f, 0, 0.0f, 0, 0},  /* head_dim not a multiple of 4: scalar loads */
        {4, 300, 40, 8, 4, 64, 100, 16, KV_F32, 20.0f, 16, 0.0f, 0, 0}, /* Gemma 2: soft-cap + window, prefill */
        {2, 900, 1, 8, 2, 64, 100, 16, KV_F32, 0.0f, 100, 0.0f, 0, 0},  /* window with split-K: empty partitions */
        {3, 200, 70, 4, 2, 16, 4, 16, KV_F32, 50.0f, 1, 0.3f, 0, 0},    /* window of 1, another scale */
        {2, 600, 200, 2, 2, 8, 4, 16, KV_F32, 0.0f, 37, 0.0f, 0, 0},    /* long prefill, window across tiles */
        {4, 120, 20, 8, 2, 64, 100, 16, KV_I8, 0.0f, 0, 0.0f, 0, 0},    /* int8: 16-byte loads, scales per row */
        {2, 1300, 1, 4, 2, 64, 64, 16, KV_I8, 0.0f, 0, 0.0f, 0, 0},     /* int8 decode, split-K */
        {3, 90, 30, 8, 4, 8, 100, 16, KV_I8, 0.0f, 0, 0.0f, 0, 0},      /* int8, head_dim 8: the scalar load path */
        {3, 100, 25, 4, 2, 64, 100, 5, KV_I8, 0.0f, 0, 0.0f, 0, 0},     /* int8, tiles not 16-byte aligned */
        {4, 120, 20, 8, 2, 64, 100, 16, KV_FP8, 0.0f, 0, 0.0f, 0, 0},   /* e4m3 */
        {2, 1300, 1, 4, 1, 32, 64, 8, KV_FP8, 0.0f, 0, 0.0f, 0, 0},     /* e4m3 decode, split-K, MQA */
        {3, 90, 30, 8, 4, 10, 100, 3, KV_FP8, 20.0f, 40, 0.0f, 0, 0},   /* e4m3, scalar path, odd block, window */
        {4, 300, 40, 8, 2, 64, 100, 16, KV_F32, 0.0f, 0, 0.0f, 16, 0},  /* attention sinks: prefill + decode */
        {2, 1300, 1, 4, 2, 64, 64, 16, KV_I8, 0.0f, 0, 0.0f, 48, 0},    /* sinks with split-K, int8 */
        {3, 120, 20, 4, 2, 10, 100, 4, KV_FP8, 0.0f, 0, 0.0f, 8, 0},    /* sinks, scalar loads, e4m3 */
        {3, 100, 12, 4, 2, 16, 100, 16, KV_I8, 0.0f, 0, 0.0f, 16, 0},   /* sinks, a small int8 case (--quick) */
        {4, 300, 40, 8, 2, 64, 100, 16, KV_F32, 0.0f, 16, 0.0f, 0, 1},  /* learned sinks (gpt-oss): window, prefill */
        {2, 1300, 1, 4, 1, 64, 64, 16, KV_I8, 0.0f, 0, 0.0f, 0, 1},     /* learned sinks with split-K, int8, MQA */
    };
    printf("attention kernels under CPU emulation vs float64 (seed %#llx)%s\n", (unsigned long long)emu_rs,
           quick ? ", quick" : "");
    dim3 g1;
    g1.x = 4;
    emu_run(g1, 32, emu_selftest_block);
    printf("  emulated mma.sync m16n8k16 (f16, bf16) and ldmatrix (x4, .trans) vs their PTX layouts: %s\n",
           emu_selftest_bad ? "FAIL" : "ok");
    int bad = emu_selftest_bad, n_cases = (int)(sizeof cases / sizeof cases[0]);
    /* the reference kernel: every case (they take well under a second) */
    for (int k = 0; k < n_cases; k++) {
        const emu_case &c = cases[k];
        int splits = 0;
        double e = emu_check(c, &splits);
        int ok = e < 1e-5;
        bad += !ok;
        printf("  attn ref %-4s seqs %d ctx<=%d new<=%d heads %d/%d hd %d block %d cap %g window %d sinks %d%s: "
               "splits %d, rel err %.2e %s\n", kv_dtype_name(c.dtype), c.n_seqs, c.max_ctx, c.max_new, c.n_heads,
               c.n_kv_heads, c.head_dim, c.block_size, (double)c.softcap, c.window, c.sinks,
               c.learned ? " learned" : "", splits, e, ok ? "ok" : "FAIL");
    }
    /* the tensor-core kernels: what, seqs, decoding, ctx, new tokens, heads, kv heads, head dim,
     * block, KV, Q, soft-cap, window, sinks, SMs (few → split-K), quick */
    const tc_case tcs[] = {
        {"attn mma prefill hd64 f16 (prefix + chunks, gqa 4)", 3, 0, 80, 300, 1, 150, 8, 2, 64, 16, KV_F16, Q_F32, 0, 0, 0, 100, 1, 0},
        {"attn mma prefill hd128 bf16 (gqa 8, bf16 q/out)", 2, 0, 100, 260, 1, 140, 16, 2, 128, 16, KV_BF16, Q_BF16, 0, 0, 0, 100, 0, 0},
        {"attn mma prefill hd256 f16 (window + soft-cap)", 2, 0, 100, 220, 1, 100, 4, 2, 256, 16, KV_F16, Q_F32, 50, 40, 0, 100, 0, 0},
        {"attn mma prefill hd96 f16 (mha, f16 q/out)", 2, 0, 50, 200, 1, 120, 4, 4, 96, 16, KV_F16, Q_F16, 0, 0, 0, 100, 0, 0},
        {"attn mma prefill hd128 int8", 2, 0, 80, 220, 1, 100, 8, 2, 128, 16, KV_I8, Q_F32, 0, 0, 0, 100, 1, 0},
        {"attn mma prefill hd64 fp8 (gqa 7: rows across tokens)", 2, 0, 60, 200, 1, 90, 14, 2, 64, 16, KV_FP8, Q_BF16, 0, 0, 0, 100, 0, 0},
        {"attn mma prefill split-K hd64 f16", 1, 0, 1500, 1500, 40, 40, 8, 2, 64, 16, KV_F16, Q_F32, 0, 0, 0, 4, 0, 0},
        {"attn mma prefill sinks hd64 bf16", 3, 0, 100, 300, 1, 60, 8, 2, 64, 32, KV_BF16, Q_F32, 0, 0, 21, 100, 1, 0},
        {"attn mma mixed hd128 f16 (decode + prefill kernels)", 6, 3, 50, 400, 1, 80, 16, 2, 128, 16, KV_F16, Q_F32, 0, 0, 0, 100, 0, 0},
        {"attn mma decode hd64 f16 (gqa 8)", 6, 6, 1, 300, 1, 1, 32, 4, 64, 16, KV_F16, Q_F32, 0, 0, 0, 100, 1, 0},
        {"attn mma decode split-K hd128 f16", 1, 1, 3000, 3000, 1, 1, 8, 2, 128, 16, KV_F16, Q_F32, 0, 0, 0, 16, 0, 0},
        {"attn mma decode split-K hd128 int8", 1, 1, 3000, 3000, 1, 1, 8, 2, 128, 16, KV_I8, Q_F32, 0, 0, 0, 16, 1, 0},
        {"attn mma decode split-K hd64 fp8 (bf16 q/out)", 2, 2, 1500, 2500, 1, 1, 8, 1, 64, 16, KV_FP8, Q_BF16, 0, 0, 0, 8, 1, 0},
        {"attn mma decode split-K hd256 bf16 (window)", 3, 3, 100, 900, 1, 1, 8, 4, 256, 16, KV_BF16, Q_F32, 0, 100, 0, 8, 0, 0},
        {"attn mma decode hd96 int8 (8- and 4-byte runs, f16 q/out)", 3, 3, 50, 400, 1, 1, 4, 4, 96, 16, KV_I8, Q_F16, 0, 0, 0, 100, 0, 0},
        {"attn mma decode hd64 f16 (2 tokens x gqa 8)", 4, 0, 50, 300, 2, 2, 16, 2, 64, 16, KV_F16, Q_F32, 0, 0, 0, 100, 0, 0},
        {"attn mma decode sinks + split-K hd64 int8", 2, 2, 900, 1300, 1, 1, 8, 2, 64, 16, KV_I8, Q_F32, 0, 0, 37, 8, 1, 0},
        {"attn mma decode mqa 32 (prefill kernel rows)", 3, 3, 50, 300, 1, 1, 32, 1, 64, 16, KV_F16, Q_F32, 0, 0, 0, 100, 0, 0},
        {"attn mma decode hd256 f16 (soft-cap)", 3, 3, 50, 500, 1, 1, 8, 2, 256, 16, KV_F16, Q_F32, 30, 0, 0, 100, 0, 0},
        /* gpt-oss: learned sink logits per head, windowed layers, bf16 activations */
        {"attn mma prefill learned sinks hd64 bf16 (window)", 3, 0, 80, 300, 1, 120, 8, 2, 64, 16, KV_BF16, Q_F32, 0, 32, 0, 100, 1, 1},
        {"attn mma mixed learned sinks hd64 f16 (split-K)", 4, 2, 300, 1500, 1, 40, 8, 1, 64, 16, KV_F16, Q_F32, 0, 0, 0, 4, 1, 1},
        {"attn mma decode learned sinks hd64 fp8", 3, 3, 50, 200, 1, 1, 16, 2, 64, 16, KV_FP8, Q_BF16, 0, 128, 0, 100, 0, 1},
    };
    for (const tc_case &c : tcs) {
        if (quick && !c.quick) continue;
        double worst = 0, rel = 0;
        cuda_attn_tc plan;
        int fail = emu_tc_check(c, &worst, &rel, &plan);
        bad += fail;
        printf("  %-58s kv %-4s q %-4s: items %d decode (splits %d) + %d prefill (splits %d), err/bound %.3f, "
               "rel err %.2e %s\n", c.what, kv_dtype_name(c.kv_dtype), emu_q_name[c.q_type], plan.n_dec,
               plan.dec_splits, plan.n_pre, plan.pre_splits, worst, rel, fail ? "FAIL" : "ok");
    }
    return bad ? 1 : 0;
}
