/*
 * ops_emu.cc — runs the CUDA kernels of the smaller op families, the very source nvcc compiles, on
 * the CPU through cuda/check/emu_cuda.h, and compares them with host references:
 *   - RMSNorm (norm_rope_kernels.h), with and without the fused residual add, against float64
 *     with the tolerance of its f32 sums (each thread's part, then a tree of shuffles and one of
 *     warps), and the written-back sum exactly;
 *   - RoPE: both pair layouts, partial rotation, frequency factors and mscale, more pairs than
 *     threads; the sink shift of each sequence; each against the host's rotation of the same
 *     f32 angles (be_rope_freq in double, as on the CPU backend) within a few ulps;
 *   - the element-wise kernel (elementwise_kernels.h), every op, with a grid smaller than the
 *     work, against the host formulas;
 *   - the gathers (gather_kernels.h): embedding rows of an f32 table and logit rows, exactly;
 *   - argmax (sample_kernels.h): ties to the lowest index, NaNs passed over, a row of NaNs,
 *     rows longer than the block, exactly;
 *   - the GEMM's bias and the conversion of a tensor's rows between f32, f16 and bf16
 *     (gemm_kernels.h), bit for bit against the host conversions of cuda/formats.h;
 *   - the K/V store kernels (kv_kernels.h) with RoPE fused: an f32 arena against the rotated row
 *     exactly, an int8 arena against the codes and scales of cache/kv.h's rule; slots < 0
 *     write nothing.
 * Every output is poisoned first, so an unwritten element fails. These run the f32 instantiations
 * (the CPU backend's activation type); cuda/check/dense_emu.cc runs the bf16 ones. No GPU or
 * CUDA toolkit is needed. Built by the Makefile and run by
 * `make test` (`--quick`: fewer shapes) and `scripts/gpu-check.sh --emulate`; exit status 0 when
 * every check passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#include "cuda/check/emu_cuda.h"
extern "C" {
#include "cuda/formats.h"
#include "cuda/kv_layout.h"
#include "cuda/launch.h"
#include "engine/backend.h"
}
#include "cuda/elementwise_kernels.h"
#include "cuda/gather_kernels.h"
#include "cuda/gemm_kernels.h"
#include "cuda/kv_kernels.h"
#include "cuda/norm_rope_kernels.h"
#include "cuda/sample_kernels.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
pthread_barrier_t emu_bar, emu_wbar[32];
float emu_xchg[1024];
float sm[1];

/* The kernel call of the running launch: emu_run's threads call it for every block. */
static std::function<void()> oe_body;
static void oe_block()
{
    oe_body();
}

static void oe_launch(unsigned grid, int threads, std::function<void()> body)
{
    oe_body = body;
    dim3 g;
    g.x = grid;
    emu_run(g, threads, oe_block);
}

static uint64_t oe_rs = 0x6f70735f656d75ULL;
static uint64_t oe_next()
{
    oe_rs ^= oe_rs << 13;
    oe_rs ^= oe_rs >> 7;
    oe_rs ^= oe_rs << 17;
    return oe_rs;
}
static float oe_unif() /* [-1, 1) */
{
    return (float)((oe_next() >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}
static int oe_int(int lo, int hi) /* [lo, hi] */
{
    return lo + (int)(oe_next() % (uint64_t)(hi - lo + 1));
}

static const float oe_poison = 1e30f;
static int oe_checks, oe_bad;

static void oe_report(const char *what, int ok, const char *detail)
{
    oe_checks++;
    if (!ok) oe_bad++;
    printf("  %-46s %s%s%s\n", what, ok ? "ok" : "FAIL", detail[0] ? "  " : "", detail);
}

/* |got − want| ≤ tol · scale, and got is a number. */
static int oe_close(double got, double want, double tol, double scale)
{
    return got == got && fabs(got - want) <= tol * scale;
}

/* ---- RMSNorm ------------------------------------------------------------------------------ */

static void oe_rmsnorm(int n_rows, int dim, int fused)
{
    std::vector<float> x((size_t)n_rows * dim), res(x.size()), w(dim), out(x.size(), oe_poison), x0;
    for (auto &v : x) v = oe_unif();
    for (auto &v : res) v = oe_unif();
    for (auto &v : w) v = 0.5f + oe_unif();
    x0 = x;
    const float eps = 1e-5f;
    oe_launch(n_rows, CUDA_NORM_THREADS, [&] {
        cuda__rmsnorm_k(x.data(), fused ? res.data() : (const float *)NULL, (const int32_t *)NULL, 1, w.data(), eps,
                        dim, out.data());
    });
    /* Each thread sums ⌈dim / 512⌉ squares, then 5 + 4 shuffle levels: the sum's relative error
     * is below γ(dim / 512 + 10); the square root, the division and two products add a few
     * ulps. */
    double tol = ((double)dim / CUDA_NORM_THREADS + 16) * 6e-8;
    int ok = 1;
    for (int r = 0; r < n_rows && ok; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) {
            float v = fused ? x0[(size_t)r * dim + i] + res[(size_t)r * dim + i] : x0[(size_t)r * dim + i];
            ok &= x[(size_t)r * dim + i] == v; /* the sum is written back exactly (or x kept) */
            ss += (double)v * v;
        }
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim && ok; i++) {
            double want = (double)x[(size_t)r * dim + i] * inv * w[i];
            ok &= oe_close(out[(size_t)r * dim + i], want, tol, fabs(want) + 1e-30);
        }
    }
    char what[64];
    snprintf(what, sizeof what, "rmsnorm rows %d dim %d%s", n_rows, dim, fused ? " + residual" : "");
    oe_report(what, ok, "");
}

/* ---- RoPE --------------------------------------------------------------------------------- */

/* The host's rotation of one head row (the definition of engine/backend.h and the CPU backend):
 * pair i by pos · be_rope_freq(r, i, ff_i), cos and sin in double rounded to f32, times mscale. */
static void oe_rope_ref(float *x, int pos, const be_rope &r, const float *ff)
{
    int half = r.rope_dims / 2;
    float ms = be_rope_mscale(&r);
    for (int h = 0; h < r.n_heads; h++)
        for (int i = 0; i < half; i++) {
            double ang = (double)pos * be_rope_freq(&r, i, ff ? ff[i] : 1.0f);
            float c = (float)cos(ang) * ms, s = (float)sin(ang) * ms;
            int a = r.neox ? i : 2 * i, b = r.neox ? i + half : 2 * i + 1;
            float *xh = x + (size_t)h * r.head_dim;
            float x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * s;
            xh[b] = x0 * s + x1 * c;
        }
}

static be_rope oe_rope_params(int n_heads, int head_dim, int rope_dims, int neox, int yarn)
{
    be_rope r;
    memset(&r, 0, sizeof r);
    r.n_heads = n_heads;
    r.head_dim = head_dim;
    r.rope_dims = rope_dims;
    r.neox = neox;
    r.base = 10000.0f;
    if (yarn) {
        r.freq_scale = 0.25f;
        r.ext_factor = 1.0f;
        r.corr_lo = 2.0f;
        r.corr_hi = 11.0f;
        r.mscale = 1.25f;
    }
    return r;
}

/* Two ulps of the largest magnitude of the row: the products are rounded, then summed. */
static int oe_rows_close(const std::vector<float> &got, const std::vector<float> &want, size_t row)
{
    for (size_t i = 0; i < got.size(); i += row) {
        double m = 0;
        for (size_t j = 0; j < row; j++) m = fmax(m, fabs(want[i + j]));
        for (size_t j = 0; j < row; j++)
            if (!oe_close(got[i + j], want[i + j], 2.5e-7, m + 1e-30)) return 0;
    }
    return 1;
}

static void oe_rope(int n_tokens, int n_heads, int head_dim, int rope_dims, int neox, int yarn)
{
    be_rope r = oe_rope_params(n_heads, head_dim, rope_dims, neox, yarn);
    std::vector<float> ff(rope_dims / 2), x((size_t)n_tokens * n_heads * head_dim), want;
    for (auto &v : ff) v = 1.0f + 3.0f * (oe_unif() + 1.0f);
    for (auto &v : x) v = oe_unif();
    std::vector<int32_t> pos(n_tokens);
    for (auto &p : pos) p = oe_int(0, 5000);
    want = x;
    for (int t = 0; t < n_tokens; t++)
        oe_rope_ref(&want[(size_t)t * n_heads * head_dim], pos[t], r, yarn ? ff.data() : NULL);
    oe_launch(n_tokens, 128, [&] { cuda__rope_k(x.data(), pos.data(), r, yarn ? ff.data() : NULL); });
    char what[80];
    snprintf(what, sizeof what, "rope %d heads hd %d dims %d %s%s", n_heads, head_dim, rope_dims,
             neox ? "neox" : "adjacent", yarn ? " yarn+ff" : "");
    oe_report(what, oe_rows_close(x, want, (size_t)head_dim), "");
}

/* Tokens of 3 sequences; with sinks, each row is rotated by −shift of its sequence. */
static void oe_rope_shift(int sinks)
{
    const int n_heads = 4, head_dim = 32;
    be_rope r = oe_rope_params(n_heads, head_dim, head_dim, 1, 0);
    int32_t q_start[4] = {0, 3, 4, 9}, sk[3] = {4, 4, 4}, shift[3] = {17, 0, 1000};
    const int n = q_start[3], row = n_heads * head_dim;
    std::vector<float> x((size_t)n * row), out(x.size(), oe_poison), want = x;
    for (auto &v : x) v = oe_unif();
    want = x;
    for (int s = 0; s < 3; s++)
        for (int t = q_start[s]; t < q_start[s + 1]; t++)
            if (sinks && shift[s]) oe_rope_ref(&want[(size_t)t * row], -shift[s], r, NULL);
    oe_launch(n, 128, [&] {
        cuda__rope_shift_k(x.data(), out.data(), q_start, 3, sinks ? sk : NULL, shift, r, NULL);
    });
    oe_report(sinks ? "rope_shift by each sequence's shift" : "rope_shift without sinks (a copy)",
              oe_rows_close(out, want, (size_t)head_dim), "");
}

/* ---- element-wise ------------------------------------------------------------------------- */

static void oe_elementwise(int64_t n)
{
    static const char *const names[] = {"silu_mul", "gelu_mul", "add", "scale", "softcap"};
    for (int op = CUDA_EW_SILU_MUL; op <= CUDA_EW_SOFTCAP; op++) {
        std::vector<float> x(n), y(n), want(n);
        for (auto &v : x) v = 8.0f * oe_unif();
        for (auto &v : y) v = oe_unif();
        float s = op == CUDA_EW_SOFTCAP ? 5.0f : 0.75f;
        for (int64_t i = 0; i < n; i++)
            switch (op) {
            case CUDA_EW_SILU_MUL: want[i] = cuda_silu_mul(x[i], y[i]); break;
            case CUDA_EW_GELU_MUL: want[i] = be_gelu_tanh(x[i]) * y[i]; break;
            case CUDA_EW_ADD: want[i] = x[i] + y[i]; break;
            case CUDA_EW_SCALE: want[i] = x[i] * s; break;
            default: want[i] = be_softcap(x[i], s); break;
            }
        /* a grid of 3 blocks: every thread strides over the rest of the work */
        unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, 3);
        oe_launch(g, CUDA_EW_THREADS, [&] {
            cuda__ew_k(op, x.data(), op == CUDA_EW_SCALE || op == CUDA_EW_SOFTCAP ? NULL : y.data(), s, n);
        });
        int ok = 1;
        for (int64_t i = 0; i < n && ok; i++) ok &= oe_close(x[i], want[i], 1.2e-7, fabs(want[i]) + 1e-30);
        char what[64];
        snprintf(what, sizeof what, "elementwise %s n %lld", names[op], (long long)n);
        oe_report(what, ok, "");
    }
}

/* ---- gathers ------------------------------------------------------------------------------ */

static void oe_gathers(int dim)
{
    const int n_vocab = 50, n = 7;
    std::vector<float> emb((size_t)n_vocab * dim), out((size_t)n * dim, oe_poison);
    for (auto &v : emb) v = oe_unif();
    std::vector<int32_t> tok(n);
    for (auto &t : tok) t = oe_int(0, n_vocab - 1);
    oe_launch(n, CUDA_EW_THREADS, [&] { cuda__embed_k(emb.data(), (int64_t)dim, tok.data(), out.data()); });
    int ok = 1;
    for (int t = 0; t < n; t++) ok &= !memcmp(&out[(size_t)t * dim], &emb[(size_t)tok[t] * dim], dim * sizeof(float));
    char what[64];
    snprintf(what, sizeof what, "embed f32 dim %d", dim);
    oe_report(what, ok, "");
    std::fill(out.begin(), out.end(), oe_poison);
    oe_launch(n, CUDA_EW_THREADS, [&] { cuda__gather_k(emb.data(), dim, tok.data(), out.data()); });
    ok = 1;
    for (int t = 0; t < n; t++) ok &= !memcmp(&out[(size_t)t * dim], &emb[(size_t)tok[t] * dim], dim * sizeof(float));
    snprintf(what, sizeof what, "gather_rows dim %d", dim);
    oe_report(what, ok, "");
}

/* ---- argmax ------------------------------------------------------------------------------- */

static void oe_argmax(int dim)
{
    const int n_rows = 5;
    std::vector<float> x((size_t)n_rows * dim);
    for (auto &v : x) v = oe_unif();
    std::vector<int32_t> want(n_rows), ids(n_rows, -7);
    for (int r = 0; r < n_rows; r++) {
        float *row = &x[(size_t)r * dim];
        if (r == 1 && dim > 6) /* a tie between two lanes of a warp: the lowest index wins */
            row[2] = row[6] = 2.0f;
        if (r == 4 && dim > 140) /* between two warps */
            row[10] = row[10 + 4 * 32] = 2.0f;
        if (r == 4 && dim > 1034) /* and between two elements of one thread */
            row[10 + 1024] = 2.0f;
        if (r == 2) /* NaNs are passed over */
            for (int i = 0; i < dim; i += 3) row[i] = NAN;
        if (r == 3) /* a row of NaNs yields 0 */
            for (int i = 0; i < dim; i++) row[i] = NAN;
        int best = 0;
        for (int i = 0; i < dim; i++)
            if (row[i] > row[best] || (row[best] != row[best] && row[i] == row[i])) best = i;
        want[r] = best;
    }
    oe_launch(n_rows, 1024, [&] { cuda__argmax_k(x.data(), dim, ids.data()); });
    char what[64], detail[64] = "";
    int ok = ids == want;
    if (!ok) snprintf(detail, sizeof detail, "row 0: %d, want %d", ids[0], want[0]);
    snprintf(what, sizeof what, "argmax dim %d (ties, NaNs)", dim);
    oe_report(what, ok, detail);
}

/* ---- the GEMM's bias and conversions ------------------------------------------------------- */

static void oe_bias(int64_t n_out, int n_rows)
{
    int64_t n = n_out * n_rows;
    std::vector<float> out(n), bias(n_out), want(n);
    for (auto &v : out) v = oe_unif();
    for (auto &v : bias) v = oe_unif();
    for (int64_t i = 0; i < n; i++) want[i] = out[i] + bias[i % n_out];
    oe_launch(cuda_grid_1d(n, CUDA_EW_THREADS, 2), CUDA_EW_THREADS,
              [&] { cuda__bias_k((const float *)NULL, out.data(), bias.data(), n_out, n); });
    oe_report("add_bias", out == want, "");
}

/* Element v of the host's conversion into type t (the bits, widened). */
static uint32_t oe_encode(int t, float v)
{
    return t == DT_F32 ? cuda_f32_bits(v) : t == DT_F16 ? cuda_f32_to_f16(v) : cuda_f32_to_bf16(v);
}

static void oe_convert(int src_type, int dst_type)
{
    const int64_t n_in = 37, n_rows = 5;
    size_t es = src_type == DT_F32 ? 4 : 2, de = dst_type == DT_F32 ? 4 : 2;
    size_t row_bytes = (size_t)n_in * es + 6; /* rows further apart than their values */
    std::vector<uint8_t> src(row_bytes * n_rows), dst((size_t)n_in * n_rows * de, 0xa5);
    std::vector<float> val((size_t)n_in * n_rows);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n_in; i++) {
            float v = 100.0f * oe_unif();
            if (i == 3) v = 1e-6f; /* an f16 subnormal */
            uint32_t b = oe_encode(src_type, v);
            memcpy(&src[r * row_bytes + i * es], &b, es);
            val[r * n_in + i] = src_type == DT_F32 ? v : src_type == DT_F16 ? cuda_f16_to_f32((uint16_t)b)
                                                                            : cuda_bf16_to_f32((uint16_t)b);
        }
    int64_t n = n_in * n_rows;
    oe_launch(cuda_grid_1d(n, CUDA_EW_THREADS, 1), CUDA_EW_THREADS,
              [&] { cuda__convert_k(src.data(), src_type, row_bytes, n_in, n, dst.data(), dst_type); });
    int ok = 1;
    for (int64_t e = 0; e < n; e++) {
        uint32_t got = 0, want = oe_encode(dst_type, val[e]);
        memcpy(&got, &dst[e * de], de);
        ok &= got == want;
    }
    static const char *const tn[] = {"f32", "f16"};
    char what[64];
    snprintf(what, sizeof what, "convert_rows %s -> %s", src_type == DT_BF16 ? "bf16" : tn[src_type],
             dst_type == DT_BF16 ? "bf16" : tn[dst_type]);
    oe_report(what, ok, "");
}

/* ---- the K/V store ------------------------------------------------------------------------ */

static void oe_store_kv(int dtype)
{
    kv_geom g = kv_geom_make(1, 2, 48, 4, dtype);
    cuda_kv_layout l = cuda_kv_layout_of(&g, 6);
    const int n = 5, kv_dim = g.n_kv_heads * g.head_dim;
    size_t es = kv_dtype_bytes(dtype), plane = (size_t)cuda_kv_plane_elems(&l) * es;
    std::vector<uint8_t> arena(2 * plane, 0x5a), before;
    before = arena;
    std::vector<float> k((size_t)n * kv_dim), v(k.size()), kr;
    for (auto &x : k) x = oe_unif();
    for (auto &x : v) x = oe_unif();
    int32_t slots[n] = {9, -1, 0, 23, 5}, pos[n] = {9, 10, 0, 23, 4000};
    be_rope r = oe_rope_params(g.n_kv_heads, g.head_dim, 32, 0, 0);
    kr = k;
    for (int t = 0; t < n; t++) oe_rope_ref(&kr[(size_t)t * kv_dim], pos[t], r, NULL);
    oe_launch(n, 128, [&] {
        if (dtype == KV_F32)
            cuda__store_kv_k(k.data(), v.data(), (float *)arena.data(), (float *)(arena.data() + plane), slots, pos,
                             l, r, (const float *)NULL);
        else
            cuda__store_kv_q_k(k.data(), v.data(), (int8_t *)arena.data(), (int8_t *)(arena.data() + plane), slots,
                               pos, l, r, (const float *)NULL);
    });
    std::vector<float> rot(k.begin(), k.end());
    int ok = oe_rows_close(rot, kr, (size_t)g.head_dim); /* k was rotated in place */
    std::vector<uint8_t> want = before;
    for (int t = 0; t < n; t++) {
        if (slots[t] < 0) continue;
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < g.n_kv_heads; h++) {
                const float *row = (kind ? v.data() : rot.data()) + (size_t)t * kv_dim + (size_t)h * g.head_dim;
                uint8_t *p = want.data() + kind * plane;
                if (dtype == KV_F32) {
                    for (int d = 0; d < g.head_dim; d++)
                        memcpy(p + (size_t)cuda_kv_slot_index(&l, 0, 0, slots[t], h, d) * 4, &row[d], 4);
                    continue;
                }
                float amax = 0, inv;
                for (int d = 0; d < g.head_dim; d++) amax = fmaxf(amax, fabsf(row[d]));
                uint16_t sc = cuda_kv_scale(dtype, amax, &inv);
                for (int d = 0; d < g.head_dim; d++)
                    p[cuda_kv_slot_index(&l, 0, 0, slots[t], h, d)] = (uint8_t)kv_i8_encode(row[d], inv);
                uint8_t *sp = p + cuda_kv_scale_index(&l, 0, 0, slots[t] / g.block_size, h, slots[t] % g.block_size);
                sp[0] = (uint8_t)(sc & 0xff);
                sp[1] = (uint8_t)(sc >> 8);
            }
    }
    ok &= arena == want;
    oe_report(dtype == KV_F32 ? "store_kv + rope, f32 arena" : "store_kv + rope, int8 arena", ok, "");
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    printf("norm, RoPE, element-wise, gather, argmax, conversion and K/V store kernels under CPU emulation "
           "(seed %#llx)%s\n", (unsigned long long)oe_rs, quick ? ", quick" : "");
    oe_rmsnorm(3, 64, 0);
    oe_rmsnorm(2, 1000, 1);
    if (!quick) {
        oe_rmsnorm(4, 1, 0);
        oe_rmsnorm(3, 257, 1);
        oe_rmsnorm(1, 4096, 0);
    }
    oe_rope(3, 4, 64, 64, 0, 0);
    oe_rope(2, 8, 64, 32, 1, 1); /* partial NEOX with YaRN and factors; 8 × 16 pairs over 128 threads */
    if (!quick) {
        oe_rope(4, 12, 128, 128, 1, 0);
        oe_rope(2, 3, 80, 64, 0, 1);
        oe_rope(1, 1, 1024, 1024, 0, 0); /* the most pairs a row may have */
    }
    oe_rope_shift(1);
    oe_rope_shift(0);
    oe_elementwise(quick ? 1000 : 5001);
    oe_gathers(quick ? 33 : 700);
    oe_argmax(quick ? 200 : 3000);
    if (!quick) {
        oe_argmax(1);
        oe_argmax(1024);
    }
    oe_bias(37, 3);
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            static const int t[3] = {DT_F32, DT_F16, DT_BF16};
            if (quick && s != d && s && d) continue;
            oe_convert(t[s], t[d]);
        }
    oe_store_kv(KV_F32);
    oe_store_kv(KV_I8);
    printf("ops_emu%s: %d checks, %d failed\n", quick ? " --quick" : "", oe_checks, oe_bad);
    return oe_bad ? 1 : 0;
}
