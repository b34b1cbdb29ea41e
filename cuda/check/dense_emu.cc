/*
 * dense_emu.cc — runs the CUDA kernels of the decode path, the very source nvcc compiles, on the
 * CPU through cuda/check/emu_cuda.h, and compares them with float64 references computed from
 * the exact stored inputs (16-bit values decoded), with tolerances derived from the arithmetic:
 *   - the dense matrix-vector kernels (gemv_kernels.h): F32 / F16 / BF16 weights, f32 and bf16
 *     activations, f32 and bf16 outputs, 1 to 8 rows, every split-K factor, output counts that
 *     leave a partial warp group, biases, the soft-capped LM head, GLU (SiLU and GELU; gate and
 *     up stacked or apart), and the scalar kernel for rows that are not whole 16-byte chunks;
 *   - the fused QKV epilogue (fused_kernels.h): biases, per-head norms, RoPE (both pair layouts,
 *     partial, YaRN with frequency factors), q in f32 or bf16, K/V into f32 / f16 / bf16 / int8 /
 *     e4m3 caches (the codes and scales of cache/kv.h's rule), slots < 0 untouched;
 *   - the activation-typed instantiations of the other families with bf16: RMSNorm with the
 *     residual add (f32 residual, bf16 branch and output; the sum written back) and the gathered
 *     norm of the LM head, RoPE, the K/V store, the element-wise ops, the gated activation, the
 *     activation conversions and the GEMM's bias into the output type;
 *   - attention with bf16 queries and output (attn_kernels.h) against the same kernel in f32;
 *   - the random weights the GPU check makes on the device (gemm_kernels.h) against the host's.
 * Every output is poisoned first, so an unwritten element fails. Sum bounds: an f32 sum of m
 * products is within γ(m) = m · 2^-24 / (1 − m · 2^-24) of Σ|products|; a result rounded to bf16
 * (f16) moves by at most 2^-9 (2^-12) of itself, and the tests allow twice that.
 *
 * No GPU or CUDA toolkit is needed. Built by the Makefile and run by `make test` (`--quick`:
 * fewer shapes) and `scripts/gpu-check.sh --emulate`; exit status 0 when every check passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#include "cuda/check/emu_cuda.h"
extern "C" {
#include "cache/kv.h"
#include "cuda/formats.h"
#include "cuda/gemv_plan.h"
#include "cuda/kv_layout.h"
#include "cuda/launch.h"
#include "engine/backend.h"
}
#include "cuda/attn_kernels.h"
#include "cuda/elementwise_kernels.h"
#include "cuda/fused_kernels.h"
#include "cuda/gemm_kernels.h"
#include "cuda/gemv_kernels.h"
#include "cuda/kv_kernels.h"
#include "cuda/norm_rope_kernels.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
pthread_barrier_t emu_bar, emu_wbar[32];
float emu_xchg[1024];
float sm[64 * 1024];

static std::function<void()> de_body;
static void de_block()
{
    de_body();
}

static void de_launch(unsigned gx, unsigned gy, int threads, std::function<void()> body)
{
    de_body = body;
    dim3 g;
    g.x = gx;
    g.y = gy;
    emu_run(g, threads, de_block);
}

static uint64_t de_rs = 0x64656e7365ULL;
static uint64_t de_next()
{
    de_rs ^= de_rs << 13;
    de_rs ^= de_rs >> 7;
    de_rs ^= de_rs << 17;
    return de_rs;
}
static float de_unif() /* [-1, 1) */
{
    return (float)((de_next() >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}
static int de_int(int lo, int hi)
{
    return lo + (int)(de_next() % (uint64_t)(hi - lo + 1));
}

static int de_checks, de_bad;
static void de_report(const char *what, int ok, const char *detail)
{
    de_checks++;
    if (!ok) de_bad++;
    printf("  %-58s %s%s%s\n", what, ok ? "ok" : "FAIL", detail && detail[0] ? "  " : "", detail ? detail : "");
}

/* ---- typed host buffers --------------------------------------------------------------------- */

/* A host array of element type T (float, __half, __nv_bfloat16) with its exact f32 values. */
template <typename T> struct de_buf {
    std::vector<T> d;
    std::vector<float> v; /* the stored values, decoded */
    void fill(size_t n, float scale)
    {
        d.resize(n);
        v.resize(n);
        for (size_t i = 0; i < n; i++) {
            d[i] = cuda__st<T>(scale * de_unif());
            v[i] = cuda__ld(d[i]);
        }
    }
    void poison(size_t n)
    {
        d.assign(n, cuda__st<T>(NAN));
    }
    float at(size_t i) const
    {
        return cuda__ld(d[i]);
    }
};

/* The relative rounding of a stored T: 0 for f32; f16 2^-11; bf16 2^-8 (a half ulp, doubled). */
template <typename T> static double de_round();
template <> double de_round<float>()
{
    return 0.0;
}
template <> double de_round<__half>()
{
    return 1.0 / 2048;
}
template <> double de_round<__nv_bfloat16>()
{
    return 1.0 / 256;
}

template <typename T> static const char *de_name();
template <> const char *de_name<float>()
{
    return "f32";
}
template <> const char *de_name<__half>()
{
    return "f16";
}
template <> const char *de_name<__nv_bfloat16>()
{
    return "bf16";
}

/* |got − want| ≤ bound, got a number. */
static int de_within(double got, double want, double bound)
{
    return got == got && fabs(got - want) <= bound;
}

/* ---- the dense matrix-vector kernels -------------------------------------------------------- */

typedef struct de_gemv_case {
    int64_t n_in, n_out;
    int n_rows;
    int glu;      /* 0 plain, 1 SiLU, 2 GELU */
    int stacked;  /* GLU: gate and up rows in one matrix */
    int bias;
    float softcap;
    int ks;       /* 0: the plan's; else forced */
} de_gemv_case;

/* Runs the kernel the launcher would pick for (W, X, O) at row bucket R. */
template <typename W, typename X, typename O, int R>
static void de_gemv_run(const cuda_gemv_args &a, int glu, int64_t blocks)
{
    if (!cuda_gemv_vector_ok(a.n_in, (int)sizeof(W))) {
        unsigned g = (unsigned)cuda_div_up(a.n_out, CUDA_GEMV_THREADS / 32);
        de_launch(g, 1, CUDA_GEMV_THREADS, [&] {
            if (glu) cuda__gemv_scalar_k<W, X, O, 2>(a);
            else cuda__gemv_scalar_k<W, X, O, 1>(a);
        });
        return;
    }
    de_launch((unsigned)blocks, 1, CUDA_GEMV_THREADS, [&] {
        if (glu) cuda__gemv_k<W, X, O, R, 2>(a);
        else cuda__gemv_k<W, X, O, R, 1>(a);
    });
}

template <typename W, typename X, typename O> static void de_gemv(const de_gemv_case &c)
{
    const int G = c.glu ? 2 : 1;
    de_buf<W> w, w2;
    de_buf<X> x;
    de_buf<O> out;
    w.fill((size_t)(c.n_out * (c.stacked ? 2 : 1)) * c.n_in, 0.5f);
    if (c.glu && !c.stacked) w2.fill((size_t)c.n_out * c.n_in, 0.5f);
    x.fill((size_t)c.n_rows * c.n_in, 1.0f);
    std::vector<float> bias(c.n_out), bias2(c.n_out);
    for (auto &b : bias) b = de_unif();
    for (auto &b : bias2) b = de_unif();
    out.poison((size_t)c.n_rows * c.n_out);
    cuda_gemv_args a;
    memset(&a, 0, sizeof a);
    a.w = w.d.data();
    a.w2 = !c.glu ? NULL : c.stacked ? (const void *)(w.d.data() + c.n_out * c.n_in) : (const void *)w2.d.data();
    a.n_in = c.n_in, a.n_out = c.n_out, a.x = x.d.data(), a.n_rows = c.n_rows;
    a.bias = c.bias ? bias.data() : NULL, a.bias2 = c.bias && c.glu ? bias2.data() : NULL;
    a.out = out.d.data(), a.softcap = c.softcap, a.gelu = c.glu == 2;
    int64_t blocks;
    cuda_gemv_plan(c.n_out, c.n_in, c.glu != 0, c.n_rows, (int)sizeof(W), 132, &a.ks, &blocks);
    if (c.ks) {
        a.ks = c.ks;
        blocks = cuda_div_up(cuda_div_up(c.n_out, CUDA_GEMV_OUTPUTS(cuda_gemv_rows(c.n_rows), G)), CUDA_GEMV_THREADS / 32 / c.ks);
    }
    switch (cuda_gemv_rows(c.n_rows)) {
    case 1: de_gemv_run<W, X, O, 1>(a, c.glu, blocks); break;
    case 2: de_gemv_run<W, X, O, 2>(a, c.glu, blocks); break;
    case 4: de_gemv_run<W, X, O, 4>(a, c.glu, blocks); break;
    default: de_gemv_run<W, X, O, 8>(a, c.glu, blocks); break;
    }
    /* float64 references and bounds: each dot product's f32 sum of n_in products */
    const double gam = ((double)c.n_in + 64) * 0x1p-24;
    double worst = 0;
    int ok = 1;
    for (int r = 0; r < c.n_rows; r++)
        for (int64_t o = 0; o < c.n_out; o++) {
            double s[2] = {0, 0}, m[2] = {0, 0};
            for (int g = 0; g < G; g++) {
                const float *wr = g == 0 ? &w.v[o * c.n_in] : c.stacked ? &w.v[(c.n_out + o) * c.n_in] : &w2.v[o * c.n_in];
                for (int64_t i = 0; i < c.n_in; i++) {
                    double p = (double)wr[i] * x.v[(size_t)r * c.n_in + i];
                    s[g] += p;
                    m[g] += fabs(p);
                }
                s[g] += c.bias ? (double)(g ? bias2[o] : bias[o]) : 0.0;
            }
            double want, bound;
            if (c.glu) {
                double gv = s[0], uv = s[1], act, dact;
                if (c.glu == 2) {
                    double t = tanh(0.7978845608028654 * (gv + 0.044715 * gv * gv * gv));
                    act = 0.5 * gv * (1 + t);
                    dact = 1.2;
                } else {
                    act = gv / (1 + exp(-gv));
                    dact = 1.1;
                }
                want = act * uv;
                bound = dact * fabs(uv) * gam * m[0] + fabs(act) * gam * m[1] + 1e-6 * (fabs(want) + 1e-3);
            } else {
                want = s[0];
                bound = gam * m[0] + 1e-6 * fabs(want);
                if (c.softcap > 0) want = c.softcap * tanh(want / c.softcap), bound += 1e-6 * c.softcap;
            }
            bound += 2 * de_round<O>() * fabs(want) + 1e-30;
            double got = out.at((size_t)r * c.n_out + o);
            if (!de_within(got, want, bound)) ok = 0;
            worst = fmax(worst, fabs(got - want) / (bound > 0 ? bound : 1));
        }
    char what[128], detail[64];
    snprintf(what, sizeof what, "gemv W %s x %s out %s %lldx%lld rows %d%s%s%s%s ks %d", de_name<W>(), de_name<X>(),
             de_name<O>(), (long long)c.n_in, (long long)c.n_out, c.n_rows,
             c.glu == 1 ? " silu" : c.glu == 2 ? " gelu" : "", c.glu && c.stacked ? " stacked" : "",
             c.bias ? " +b" : "", c.softcap > 0 ? " cap" : "", a.ks);
    snprintf(detail, sizeof detail, "worst %.2f of bound", worst);
    de_report(what, ok, detail);
}

static void de_gemvs(int quick)
{
    /* (W, X, O) of every instantiation the backend launches */
    de_gemv_case c = {256, 37, 1, 0, 0, 1, 0.0f, 0};
    de_gemv<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(c);
    de_gemv<__nv_bfloat16, __nv_bfloat16, float>(c);
    de_gemv<__half, __nv_bfloat16, __nv_bfloat16>(c);
    de_gemv<float, __nv_bfloat16, __nv_bfloat16>(c);
    de_gemv<float, float, float>(c);
    de_gemv<__nv_bfloat16, float, float>(c);
    c.softcap = 3.0f; /* the LM head: f32 logits, capped */
    de_gemv<__nv_bfloat16, __nv_bfloat16, float>(c);
    c.softcap = 0.0f;
    /* every row bucket, with partial ones, and the split-K factors */
    static const int rows[] = {2, 3, 5, 8};
    for (int i = 0; i < 4; i++) {
        if (quick && i % 2) continue;
        c = (de_gemv_case){512, 19, rows[i], 0, 0, i % 2, 0.0f, 0};
        de_gemv<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(c);
    }
    for (int ks = 1; ks <= 4; ks *= 2) {
        c = (de_gemv_case){1024, 9, 3, 0, 0, 1, 0.0f, ks};
        de_gemv<__nv_bfloat16, __nv_bfloat16, float>(c);
    }
    /* GLU: SiLU and GELU, stacked and apart */
    c = (de_gemv_case){256, 21, 1, 1, 1, 1, 0.0f, 0};
    de_gemv<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(c);
    c = (de_gemv_case){256, 13, 4, 2, 0, 1, 0.0f, 2};
    de_gemv<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(c);
    c = (de_gemv_case){128, 10, 8, 1, 1, 0, 0.0f, 0};
    de_gemv<float, float, float>(c);
    /* rows that are not whole 16-byte chunks: the scalar kernel */
    c = (de_gemv_case){77, 11, 3, 0, 0, 1, 0.0f, 0};
    de_gemv<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(c);
    c = (de_gemv_case){45, 7, 2, 1, 1, 1, 0.0f, 0};
    de_gemv<__half, __nv_bfloat16, __nv_bfloat16>(c);
    if (!quick) {
        c = (de_gemv_case){2048, 33, 1, 0, 0, 0, 0.0f, 0};
        de_gemv<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(c);
        c = (de_gemv_case){768, 70, 8, 2, 1, 1, 0.0f, 0};
        de_gemv<__half, __nv_bfloat16, __nv_bfloat16>(c);
        c = (de_gemv_case){96, 5, 6, 0, 0, 1, 0.0f, 4};
        de_gemv<float, float, float>(c);
    }
}

/* The plan: every shape gets a split-K factor of 1, 2 or 4 and enough blocks for its outputs. */
static void de_gemv_plan(void)
{
    int ok = 1;
    for (int it = 0; it < 20000 && ok; it++) {
        int64_t n_out = de_int(1, 200000), n_in = 8 * de_int(1, 4096);
        int rows = de_int(1, 8), glu = de_int(0, 1), es = de_int(0, 1) ? 2 : 4, n_sm = de_int(1, 200), ks;
        int64_t blocks;
        cuda_gemv_plan(n_out, n_in, glu, rows, es, n_sm, &ks, &blocks);
        int no = CUDA_GEMV_OUTPUTS(cuda_gemv_rows(rows), glu ? 2 : 1);
        ok &= (ks == 1 || ks == 2 || ks == 4) && blocks * (CUDA_GEMV_THREADS / 32 / ks) * no >= n_out &&
              (blocks - 1) * (CUDA_GEMV_THREADS / 32 / ks) * no < n_out;
    }
    int ks;
    int64_t blocks;
    cuda_gemv_plan(2560, 2048, 0, 1, 2, 132, &ks, &blocks); /* a short matrix splits K */
    ok &= ks > 1;
    cuda_gemv_plan(128256, 4096, 0, 1, 2, 132, &ks, &blocks); /* a tall one does not */
    ok &= ks == 1;
    de_report("gemv plan: split-K factors, blocks cover every output", ok, "");
}

/* ---- the fused QKV epilogue ------------------------------------------------------------------ */

/* The host's rotation of one head (backend.h's definition, as the CPU backend computes it). */
static void de_rope_ref(double *x, int pos, const be_rope &r, const float *ff)
{
    int half = r.rope_dims / 2;
    float ms = be_rope_mscale(&r);
    for (int i = 0; i < half; i++) {
        double ang = (double)pos * be_rope_freq(&r, i, ff ? ff[i] : 1.0f);
        double c = (float)cos(ang) * ms, sn = (float)sin(ang) * ms;
        int pa, pb;
        cuda_rope_pair(r.neox, r.rope_dims, i, &pa, &pb);
        double x0 = x[pa], x1 = x[pb];
        x[pa] = x0 * c - x1 * sn;
        x[pb] = x0 * sn + x1 * c;
    }
}

typedef struct de_qkv_case {
    int n_tokens, n_heads, n_kv_heads, head_dim, rope_dims;
    int neox, yarn, norm, bias, stacked, kv_dtype;
} de_qkv_case;

/* Stored K/V element (slot, head, d) of a plane as f32 (codes times their row's scale). */
static float de_kv_get(const uint8_t *plane, int dtype, const cuda_kv_layout &l, int32_t slot, int h, int d)
{
    int64_t e = cuda_kv_slot_index(&l, 0, 0, slot, h, d);
    switch (dtype) {
    case KV_F32: return ((const float *)plane)[e];
    case KV_F16: return cuda_f16_to_f32(((const uint16_t *)plane)[e]);
    case KV_BF16: return cuda_bf16_to_f32(((const uint16_t *)plane)[e]);
    default: {
        const uint8_t *sp = plane + cuda_kv_scale_index(&l, 0, 0, slot / l.block_size, h, slot % l.block_size);
        float dsc = cuda_kv_load_scale(sp);
        return dtype == KV_I8 ? dsc * (float)(int8_t)plane[e] : dsc * kv_e4m3_decode(plane[e]);
    }
    }
}

/* The relative error a stored K/V element may carry beyond f32 arithmetic: the type's rounding;
 * int8 codes half a step of the head's scale (amax / 127), e4m3 2^-4 of the value plus its
 * subnormal step. Returned as (relative, of-amax) parts. */
static void de_kv_bound(int dtype, double *rel, double *of_amax)
{
    *rel = dtype == KV_F16 ? 1.0 / 2048 : dtype == KV_BF16 ? 1.0 / 256 : dtype == KV_FP8 ? 1.0 / 16 : 0.0;
    *of_amax = dtype == KV_I8 ? 0.5 / 127 * 1.002 : dtype == KV_FP8 ? 1.0 / 512 / 448 * 1.002 : 0.0;
}

template <typename T, typename A> static void de_qkv(const de_qkv_case &c)
{
    const int H = c.n_heads, KVH = c.n_kv_heads, D = c.head_dim, n = c.n_tokens;
    const int q_dim = H * D, kv_dim = KVH * D, width = q_dim + 2 * kv_dim;
    kv_geom g = kv_geom_make(1, KVH, D, 4, c.kv_dtype);
    cuda_kv_layout l = cuda_kv_layout_of(&g, 8);
    size_t es = kv_dtype_bytes(c.kv_dtype), plane = (size_t)cuda_kv_plane_elems(&l) * es;
    std::vector<uint8_t> arena(2 * plane, 0x5a), before;
    std::vector<float> prod((size_t)n * width), bias(width), qn(D), kn(D), ff(D / 2);
    for (auto &v : prod) v = 2.0f * de_unif();
    for (auto &v : bias) v = de_unif();
    for (auto &v : qn) v = 0.5f + de_unif();
    for (auto &v : kn) v = 0.5f + de_unif();
    for (auto &v : ff) v = 1.0f + 3.0f * (de_unif() + 1.0f);
    std::vector<int32_t> pos(n), slots(n);
    for (int t = 0; t < n; t++) pos[t] = de_int(0, 6000), slots[t] = t == 1 ? -1 : (t * 5 + 3) % 32;
    before = arena;
    de_buf<A> q;
    q.poison((size_t)n * q_dim);
    cuda_qkv_args a;
    memset(&a, 0, sizeof a);
    /* stacked: one [n][width] product; else three products one after the other */
    a.q = prod.data();
    a.k = c.stacked ? prod.data() + q_dim : prod.data() + (size_t)n * q_dim;
    a.v = c.stacked ? prod.data() + q_dim + kv_dim : prod.data() + (size_t)n * (q_dim + kv_dim);
    a.ldq = c.stacked ? width : q_dim, a.ldk = a.ldv = c.stacked ? width : kv_dim;
    if (c.bias) a.bq = bias.data(), a.bk = bias.data() + q_dim, a.bv = bias.data() + q_dim + kv_dim;
    if (c.norm) a.q_norm = qn.data(), a.k_norm = kn.data();
    a.eps = 1e-5f;
    memset(&a.rope, 0, sizeof a.rope);
    a.rope.n_heads = H, a.rope.head_dim = D, a.rope.rope_dims = c.rope_dims, a.rope.base = 10000.0f;
    a.rope.neox = c.neox;
    if (c.yarn)
        a.rope.freq_scale = 0.25f, a.rope.ext_factor = 1.0f, a.rope.corr_lo = 2.0f, a.rope.corr_hi = 11.0f,
        a.rope.mscale = 1.2f, a.ff = ff.data();
    a.n_heads = H, a.n_kv_heads = KVH, a.head_dim = D, a.pos = pos.data(), a.slots = slots.data(), a.l = l;
    a.kp = arena.data(), a.vp = arena.data() + plane, a.q_out = q.d.data();
    de_launch(n, (unsigned)cuda_div_up(H + 2 * KVH, CUDA_QKV_WARPS), CUDA_QKV_THREADS, [&] { cuda__qkv_post_k<T, A>(a); });
    /* reference in double: bias, per-head norm, rope */
    int ok = 1;
    double worst = 0;
    double rel_kv, amax_kv;
    de_kv_bound(c.kv_dtype, &rel_kv, &amax_kv);
    for (int t = 0; t < n; t++)
        for (int hh = 0; hh < H + 2 * KVH; hh++) {
            int kind = hh < H ? 0 : hh < H + KVH ? 1 : 2, head = kind == 0 ? hh : kind == 1 ? hh - H : hh - H - KVH;
            const float *src = kind == 0 ? a.q + (size_t)t * a.ldq : kind == 1 ? a.k + (size_t)t * a.ldk : a.v + (size_t)t * a.ldv;
            const float *b = !c.bias ? NULL : kind == 0 ? a.bq : kind == 1 ? a.bk : a.bv;
            std::vector<double> h(D);
            double ss = 0, amax = 0;
            for (int d = 0; d < D; d++) {
                h[d] = (double)(float)(src[(size_t)head * D + d] + (b ? b[(size_t)head * D + d] : 0.0f));
                ss += h[d] * h[d];
            }
            if (c.norm && kind < 2) {
                double inv = 1.0 / sqrt(ss / D + 1e-5);
                for (int d = 0; d < D; d++) h[d] *= inv * (kind ? kn[d] : qn[d]);
            }
            if (kind < 2) de_rope_ref(h.data(), pos[t], a.rope, a.ff);
            double mag = 0;
            for (int d = 0; d < D; d++) mag = fmax(mag, fabs(h[d])), amax = fmax(amax, fabs(h[d]));
            for (int d = 0; d < D; d++) {
                double f32 = 2e-6 * mag; /* the f32 norm and rotation */
                if (kind == 0) {
                    double got = q.at(((size_t)t * H + head) * D + d), bound = f32 + 2 * de_round<A>() * fabs(h[d]);
                    ok &= de_within(got, h[d], bound);
                    worst = fmax(worst, fabs(got - h[d]) / bound);
                } else if (slots[t] >= 0) {
                    double got = de_kv_get(arena.data() + (kind == 2 ? plane : 0), c.kv_dtype, l, slots[t], head, d);
                    double bound = f32 + rel_kv * fabs(h[d]) + amax_kv * amax + 1e-30;
                    ok &= de_within(got, h[d], bound);
                    worst = fmax(worst, fabs(got - h[d]) / bound);
                }
            }
        }
    /* the slot of token 1 (< 0) and every other slot keep their bytes */
    for (int kind = 0; kind < 2; kind++)
        for (int32_t s = 0; s < l.n_blocks * l.block_size; s++) {
            int used = 0;
            for (int t = 0; t < n; t++) used |= slots[t] == s;
            if (used) continue;
            for (int h = 0; h < KVH; h++)
                for (int d = 0; d < D; d++) {
                    int64_t e = cuda_kv_slot_index(&l, 0, 0, s, h, d) * (int64_t)es;
                    ok &= !memcmp(&arena[kind * plane + e], &before[kind * plane + e], es);
                }
        }
    char what[128], detail[64];
    snprintf(what, sizeof what, "qkv epilogue kv %s q %s %d tok %d/%d heads hd %d dims %d%s%s%s%s%s",
             kv_dtype_name(c.kv_dtype), de_name<A>(), n, H, KVH, D, c.rope_dims, c.neox ? " neox" : "",
             c.yarn ? " yarn+ff" : "", c.norm ? " norm" : "", c.bias ? " +b" : "", c.stacked ? " stacked" : "");
    snprintf(detail, sizeof detail, "worst %.2f of bound", worst);
    de_report(what, ok, detail);
}

static void de_qkvs(int quick)
{
    de_qkv_case c = {3, 4, 2, 32, 32, 0, 0, 1, 1, 1, KV_F16};
    de_qkv<__half, __nv_bfloat16>(c);
    c = (de_qkv_case){2, 8, 2, 64, 32, 1, 1, 0, 0, 0, KV_BF16};
    de_qkv<__nv_bfloat16, __nv_bfloat16>(c);
    c = (de_qkv_case){3, 4, 4, 48, 48, 1, 0, 1, 0, 1, KV_F32};
    de_qkv<float, float>(c);
    c = (de_qkv_case){2, 6, 2, 64, 64, 0, 1, 1, 1, 0, KV_I8};
    de_qkv<int8_t, __nv_bfloat16>(c);
    c = (de_qkv_case){2, 2, 1, 16, 16, 1, 0, 0, 1, 1, KV_FP8};
    de_qkv<uint8_t, float>(c);
    if (!quick) {
        c = (de_qkv_case){4, 16, 4, 128, 128, 1, 0, 1, 1, 1, KV_F16};
        de_qkv<__half, __nv_bfloat16>(c);
        c = (de_qkv_case){2, 4, 1, 256, 128, 0, 1, 1, 0, 0, KV_I8};
        de_qkv<int8_t, float>(c);
    }
}

/* ---- the other families' bf16 instantiations ------------------------------------------------ */

/* add + RMSNorm on the f32 residual with a bf16 branch into bf16 (the sum written back), and the
 * LM head's gathered norm (rows of x by index, plus the pending branch, nothing written back). */
static void de_norms(int n_rows, int dim, int gather)
{
    std::vector<float> x((size_t)n_rows * dim), x0, w(dim);
    for (auto &v : x) v = 3.0f * de_unif();
    for (auto &v : w) v = 0.5f + de_unif();
    x0 = x;
    de_buf<__nv_bfloat16> y, out;
    y.fill((size_t)n_rows * dim, 1.0f);
    std::vector<int32_t> rows(n_rows);
    for (int r = 0; r < n_rows; r++) rows[r] = gather ? n_rows - 1 - r : r;
    int n_out = gather ? n_rows - 1 : n_rows; /* the gather takes all but one row */
    out.poison((size_t)n_out * dim);
    de_launch(n_out, 1, CUDA_NORM_THREADS, [&] {
        cuda__rmsnorm_k(x.data(), y.d.data(), gather ? rows.data() : (const int32_t *)NULL, !gather, w.data(), 1e-5f,
                        dim, out.d.data());
    });
    int ok = 1;
    double tol = ((double)dim / CUDA_NORM_THREADS + 16) * 6e-8;
    for (int r = 0; r < n_out; r++) {
        int src = rows[r];
        double ss = 0;
        std::vector<double> h(dim);
        for (int i = 0; i < dim; i++) {
            h[i] = (double)(float)(x0[(size_t)src * dim + i] + y.v[(size_t)src * dim + i]);
            ss += h[i] * h[i];
        }
        double inv = 1.0 / sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; i++) {
            double want = h[i] * inv * w[i];
            ok &= de_within(out.at((size_t)r * dim + i), want, (tol + 2.0 / 256) * fabs(want) + 1e-30);
            if (!gather) ok &= x[(size_t)src * dim + i] == (float)h[i]; /* the sum, written back exactly */
        }
    }
    if (gather) ok &= x == x0;
    char what[96];
    snprintf(what, sizeof what, "rmsnorm f32 + bf16 -> bf16 rows %d dim %d%s", n_rows, dim,
             gather ? " (gathered rows, no write-back)" : " (sum written back)");
    de_report(what, ok, "");
}

/* RoPE and the K/V store (f16 cache, RoPE fused) on bf16 activations, against the f32 kernels on
 * the same (bf16-exact) values: the same f32 arithmetic, then one rounding to bf16 / f16. */
static void de_rope_store_bf16(void)
{
    const int n = 3, H = 4, D = 32;
    be_rope r;
    memset(&r, 0, sizeof r);
    r.n_heads = H, r.head_dim = D, r.rope_dims = D, r.base = 10000.0f, r.neox = 1;
    de_buf<__nv_bfloat16> xb;
    xb.fill((size_t)n * H * D, 2.0f);
    std::vector<float> xf = xb.v;
    std::vector<int32_t> pos = {5, 900, 31000};
    de_launch(n, 1, 128, [&] { cuda__rope_k(xb.d.data(), pos.data(), r, (const float *)NULL); });
    de_launch(n, 1, 128, [&] { cuda__rope_k(xf.data(), pos.data(), r, (const float *)NULL); });
    int ok = 1;
    for (size_t i = 0; i < xf.size(); i++) ok &= xb.d[i].x == cuda_f32_to_bf16(xf[i]);
    de_report("rope bf16 = rope f32 rounded to bf16", ok, "");

    kv_geom g = kv_geom_make(1, 2, D, 4, KV_F16);
    cuda_kv_layout l = cuda_kv_layout_of(&g, 4);
    size_t plane = (size_t)cuda_kv_plane_elems(&l) * 2;
    std::vector<uint8_t> a16(2 * plane, 0), a32(2 * plane * 2, 0);
    de_buf<__nv_bfloat16> k, v;
    k.fill((size_t)n * 2 * D, 1.0f);
    v.fill((size_t)n * 2 * D, 1.0f);
    std::vector<float> kf = k.v, vf = v.v;
    std::vector<int32_t> slots = {3, 0, 9};
    r.n_heads = 2;
    de_launch(n, 1, 128, [&] {
        cuda__store_kv_k(k.d.data(), v.d.data(), (__half *)a16.data(), (__half *)(a16.data() + plane), slots.data(),
                         pos.data(), l, r, (const float *)NULL);
    });
    de_launch(n, 1, 128, [&] {
        cuda__store_kv_k(kf.data(), vf.data(), (float *)a32.data(), (float *)(a32.data() + 2 * plane), slots.data(),
                         pos.data(), l, r, (const float *)NULL);
    });
    ok = 1;
    for (int t = 0; t < n; t++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < 2; h++)
                for (int d = 0; d < D; d++) {
                    int64_t e = cuda_kv_slot_index(&l, 0, 0, slots[t], h, d);
                    float f = ((const float *)(a32.data() + kind * 2 * plane))[e];
                    /* the bf16 path rounds the rotated k to bf16 first, then to f16 */
                    float want = kind ? f : cuda_bf16_to_f32(cuda_f32_to_bf16(f));
                    ok &= ((const uint16_t *)(a16.data() + kind * plane))[e] == cuda_f32_to_f16(want);
                }
    de_report("store_kv + rope, bf16 activations into an f16 cache", ok, "");
}

/* The element-wise ops, the gated activation, conversions and the GEMM's bias into bf16. */
static void de_elementwise_bf16(void)
{
    const int64_t n = 700;
    de_buf<__nv_bfloat16> g, u;
    g.fill(n, 6.0f);
    u.fill(n, 1.0f);
    std::vector<float> xr(n);
    for (auto &v : xr) v = de_unif();
    /* add: f32 residual += bf16; silu_mul in bf16 */
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; i++) want[i] = xr[i] + g.v[i];
    de_launch(3, 1, CUDA_EW_THREADS, [&] { cuda__ew_k(CUDA_EW_ADD, xr.data(), g.d.data(), 0.0f, n); });
    int ok = xr == want;
    de_buf<__nv_bfloat16> gs = g;
    de_launch(3, 1, CUDA_EW_THREADS, [&] { cuda__ew_k(CUDA_EW_SILU_MUL, gs.d.data(), u.d.data(), 0.0f, n); });
    for (int64_t i = 0; i < n; i++) ok &= gs.d[i].x == cuda_f32_to_bf16(cuda_silu_mul(g.v[i], u.v[i]));
    de_report("add (f32 += bf16), silu_mul bf16", ok, "");
    /* the gated activation of a stacked [rows][2 n_ff] product with biases */
    const int rows = 3, ff = 50;
    de_buf<__nv_bfloat16> gu, out;
    gu.fill((size_t)rows * 2 * ff, 4.0f);
    out.poison((size_t)rows * ff);
    std::vector<float> bg(ff), bu(ff);
    for (auto &v : bg) v = de_unif();
    for (auto &v : bu) v = de_unif();
    for (int gelu = 0; gelu < 2; gelu++) {
        de_launch(2, 1, CUDA_EW_THREADS, [&] {
            cuda__glu_k(gu.d.data(), gu.d.data() + ff, (int64_t)2 * ff, (int64_t)ff, (int64_t)rows * ff, bg.data(),
                        bu.data(), gelu, out.d.data());
        });
        ok = 1;
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < ff; j++) {
                float gv = gu.v[(size_t)r * 2 * ff + j] + bg[j], uv = gu.v[(size_t)r * 2 * ff + ff + j] + bu[j];
                float w = gelu ? be_gelu_tanh(gv) * uv : cuda_silu_mul(gv, uv);
                ok &= out.d[(size_t)r * ff + j].x == cuda_f32_to_bf16(w);
            }
        de_report(gelu ? "glu gelu, stacked bf16 + biases" : "glu silu, stacked bf16 + biases", ok, "");
    }
    /* activations into the types cuBLAS takes, and f32 products + bias into bf16 */
    de_buf<__half> h16;
    h16.poison(n);
    std::vector<float> f32(n, NAN);
    de_launch(2, 1, CUDA_EW_THREADS, [&] { cuda__conv_k(g.d.data(), h16.d.data(), n); });
    de_launch(2, 1, CUDA_EW_THREADS, [&] { cuda__conv_k(g.d.data(), f32.data(), n); });
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= h16.d[i].x == cuda_f32_to_f16(g.v[i]) && f32[i] == g.v[i];
    de_report("conversions bf16 -> f16, bf16 -> f32", ok, "");
    std::vector<float> src(n), bias(7);
    for (auto &v : src) v = de_unif();
    for (auto &v : bias) v = de_unif();
    de_buf<__nv_bfloat16> ob;
    ob.poison(n);
    de_launch(2, 1, CUDA_EW_THREADS, [&] { cuda__bias_k(src.data(), ob.d.data(), bias.data(), (int64_t)7, n); });
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= ob.d[i].x == cuda_f32_to_bf16(src[i] + bias[i % 7]);
    de_report("f32 product + bias -> bf16", ok, "");
}

/* ---- attention on bf16 activations ---------------------------------------------------------- */

/* The attention kernel (and its split-K merge) reading bf16 queries and writing bf16 output: the
 * same f32 arithmetic as on f32 activations holding the same values, then one rounding. An f16
 * cache of random pages; decode tokens and a prefill chunk, split-K forced. */
static void de_attention_bf16(int splits_wanted)
{
    const int bs = 4, H = 4, KVH = 2, D = 32, S = 2, gsize = H / KVH;
    std::vector<int32_t> ctx = {37, 9}, q_start = {0, 1, 4}, bt = {5, 2, 7, 0, 9, 1, 3, 8, 4, 6};
    const int stride = 10 / S, n = q_start[S];
    kv_geom g = kv_geom_make(1, KVH, D, bs, KV_F16);
    cuda_kv_layout l = cuda_kv_layout_of(&g, 10);
    std::vector<__half> arena(2 * (size_t)cuda_kv_plane_elems(&l));
    for (auto &x : arena) x = __float2half_rn(de_unif());
    de_buf<__nv_bfloat16> qb, ob;
    qb.fill((size_t)n * H * D, 1.0f);
    ob.poison((size_t)n * H * D);
    std::vector<float> qf = qb.v, of((size_t)n * H * D, NAN);
    be_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n, b.n_seqs = S, b.q_start = q_start.data(), b.n_kv = 1;
    b.kv[0].ctx_len = ctx.data(), b.kv[0].block_table = bt.data(), b.kv[0].bt_stride = stride;
    int tile = cuda_attn_tile_tokens(gsize);
    std::vector<int32_t> items((size_t)CUDA_ATTN_ITEM_INTS * n);
    int32_t max_kv = 0;
    int32_t n_items = cuda_attn_plan(&b, tile, items.data(), &max_kv);
    int32_t part = (int32_t)cuda_div_up(cuda_div_up(max_kv, splits_wanted), CUDA_ATTN_TK) * CUDA_ATTN_TK;
    int splits = (int)cuda_div_up(max_kv, part);
    std::vector<float> partial((size_t)n * H * splits * (D + 2), NAN);
    cuda__attn_args at;
    memset(&at, 0, sizeof at);
    at.part = partial.data(), at.q_start = q_start.data(), at.ctx_len = ctx.data(), at.block_table = bt.data();
    at.items = items.data(), at.bt_stride = stride, at.block_size = bs, at.n_kv_heads = KVH, at.n_heads = H;
    at.head_dim = D, at.gsize = gsize, at.splits = splits, at.part_keys = part, at.scale = 0.3f;
    at.tile_elems = (int32_t)cuda_kv_tile_elems(&l);
    const __half *kp = arena.data(), *vp = arena.data() + cuda_kv_plane_elems(&l);
    for (int bf = 0; bf < 2; bf++) {
        at.q = bf ? (const void *)qb.d.data() : (const void *)qf.data();
        at.out = bf ? (void *)ob.d.data() : (void *)of.data();
        dim3 grid;
        grid.x = (unsigned)splits, grid.y = KVH, grid.z = (unsigned)n_items;
        de_body = [&] {
            if (bf) cuda__attn_k<__half, __nv_bfloat16>(at, kp, vp);
            else cuda__attn_k<__half, float>(at, kp, vp);
        };
        emu_run(grid, CUDA_ATTN_THREADS, de_block);
        if (splits > 1)
            de_launch(H, n, cuda_attn_reduce_threads(D), [&] {
                if (bf) cuda__attn_reduce_k(at.part, (__nv_bfloat16 *)at.out, H, D, splits);
                else cuda__attn_reduce_k(at.part, (float *)at.out, H, D, splits);
            });
    }
    int ok = cuda__attn_smem(tile * gsize, D) <= sizeof sm;
    for (size_t i = 0; i < of.size(); i++) ok &= of[i] == of[i] && ob.d[i].x == cuda_f32_to_bf16(of[i]);
    char what[96];
    snprintf(what, sizeof what, "attention bf16 q/out = f32 rounded, f16 cache, splits %d", splits);
    de_report(what, ok, "");
}

/* ---- random weights made on the device ------------------------------------------------------ */

/* cuda__random_k (the GPU check's device-made weights): every element is the host's
 * cuda_random_value of its index, rounded to the type; values in [-scale, scale), not constant. */
static void de_random(void)
{
    const int64_t n = 1000;
    std::vector<float> f(n, NAN);
    std::vector<uint16_t> h(n, 0xffff);
    de_launch(2, 1, CUDA_EW_THREADS, [&] { cuda__random_k(f.data(), DT_F32, n, 42, 0.5f); });
    de_launch(2, 1, CUDA_EW_THREADS, [&] { cuda__random_k(h.data(), DT_BF16, n, 42, 0.5f); });
    int ok = 1;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = cuda_random_value(42, (uint64_t)i, 0.5f);
        ok &= f[i] == want && h[i] == cuda_f32_to_bf16(want) && want >= -0.5f && want < 0.5f;
        sum += want;
    }
    ok &= fabs(sum / n) < 0.05 && f[0] != f[1] && cuda_random_value(43, 0, 0.5f) != f[0];
    de_report("random weights on the device = the host's values", ok, "");
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    printf("dense decode kernels under CPU emulation (seed %#llx)%s\n", (unsigned long long)de_rs,
           quick ? ", quick" : "");
    de_gemv_plan();
    de_gemvs(quick);
    de_qkvs(quick);
    de_norms(3, 300, 0);
    de_norms(4, quick ? 700 : 4500, 1); /* longer than the registers keep: the second pass re-reads */
    de_rope_store_bf16();
    de_elementwise_bf16();
    de_attention_bf16(1);
    de_attention_bf16(3);
    de_random();
    printf("dense_emu%s: %d checks, %d failed\n", quick ? " --quick" : "", de_checks, de_bad);
    return de_bad ? 1 : 0;
}
