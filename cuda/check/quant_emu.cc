/*
 * quant_emu.cc — runs the CUDA kernels of the quantised weight types, the very source nvcc
 * compiles, on the CPU through cuda/check/emu_cuda.h (with its integer instructions, emu_int.h),
 * for every type:
 *   - qact, the activation quantiser (qact_kernels.h), from f32, bf16 and f16 rows in blocks of
 *     32 and 256, byte for byte against the reference quantisation (cuda_qa_quantise) stored in
 *     the permuted layout, scales bit for bit; rows whose last span of 256 is partial, a block of
 *     zeros;
 *   - mmvq, the integer matrix-vector kernel (qmatvec_kernels.h), 1 to 8 rows, and mmq, the
 *     integer GEMM (qgemm_kernels.h), against a float64 product of the decoded weights
 *     (cuda_q_dequant8, which tests/test_cuda_host.c checks bit for bit against dt_to_f32) with
 *     the activations quantised by the reference: the activation quantisation is the kernels'
 *     contract, so the tolerance is that of their arithmetic alone: integer sums exact, then
 *     per block a few f32 roundings and one accumulation, γ(blocks + 16) · Σ |dx| (|D s q| +
 *     |DM m|) |a| over the terms of cuda/quant_int.h's form, plus the rounding of a bf16 / f16
 *     output. Shapes leave rows of the last 16-row (mmvq) or 64-row (mmq) tile and activation
 *     rows of the last tile empty, legacy rows end inside a step of 256 inputs, mmvq runs with
 *     and without the split over blocks (whose tickets must be left zeroed), with and without
 *     bias, and all three activation types;
 *   - the F16 tiles of the other prefill path (qgemm_kernels.h) and the embedding gather,
 *     element for element against the host's decoding.
 * Every output is poisoned first, so an unwritten element fails. No GPU or CUDA toolkit is
 * needed. Built by the Makefile and run by `make test` (`--quick`: fewer shapes) and
 * `scripts/gpu-check.sh --emulate`; prints one line per kernel and type (`Q4_K mmvq 8 rows: ok`)
 * and exits 0 when every check passes.
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
#include "cuda/launch.h"
}
#include "cuda/gather_kernels.h"
#include "cuda/qact_kernels.h"
#include "cuda/qgemm_kernels.h"
#include "cuda/qmatvec_kernels.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
pthread_barrier_t emu_bar, emu_wbar[32];
float emu_xchg[1024];
float sm[1];

/* Type names (dt_name lives in model/dtype.c, which this program does not link). */
static const char *dt_name_emu(int t)
{
    switch (t) {
    case DT_Q4_0: return "Q4_0";
    case DT_Q4_1: return "Q4_1";
    case DT_Q5_0: return "Q5_0";
    case DT_Q5_1: return "Q5_1";
    case DT_Q8_0: return "Q8_0";
    case DT_IQ4_NL: return "IQ4_NL";
    case DT_Q2_K: return "Q2_K";
    case DT_Q3_K: return "Q3_K";
    case DT_Q4_K: return "Q4_K";
    case DT_Q5_K: return "Q5_K";
    case DT_Q6_K: return "Q6_K";
    case DT_IQ4_XS: return "IQ4_XS";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    default: return "f32";
    }
}

/* The kernel call of the running launch: emu_run's threads call it for every block. */
static std::function<void()> qe_body;
static void qe_block()
{
    qe_body();
}
static void qe_launch(dim3 grid, int threads, std::function<void()> body)
{
    qe_body = body;
    emu_run(grid, threads, qe_block);
}

static uint64_t qe_rs = 0x7175616e74ULL;
static uint64_t qe_next()
{
    qe_rs ^= qe_rs << 13;
    qe_rs ^= qe_rs >> 7;
    qe_rs ^= qe_rs << 17;
    return qe_rs;
}
static float qe_unif()
{
    return (float)((qe_next() >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}

/* Random blocks: random bytes, then every f16 field a finite scale of moderate size. */
static std::vector<uint8_t> qe_weights(int type, int64_t n_in, int64_t n_out)
{
    size_t bb = (size_t)cuda_q_block_bytes(type), nb = (size_t)(n_in / cuda_q_block_elems(type) * n_out);
    std::vector<uint8_t> w(bb * nb);
    for (auto &b : w) b = (uint8_t)qe_next();
    int off[2], n16 = dt_f16_fields(type, off);
    for (size_t b = 0; b < nb; b++)
        for (int k = 0; k < n16; k++) {
            uint16_t h = cuda_f32_to_f16(0.01f * (0.5f + (float)(qe_next() % 100) / 100.0f) * (qe_next() & 1 ? 1 : -1));
            memcpy(&w[b * bb + off[k]], &h, 2);
        }
    return w;
}

static size_t qe_row_bytes(int type, int64_t n_in)
{
    return (size_t)(n_in / cuda_q_block_elems(type) * cuda_q_block_bytes(type));
}

/* ---- activations -------------------------------------------------------------------------- */

/* n_rows × n_in activations of type act: f holds their values as f32 (exactly the 16-bit ones),
 * ptr() the array the kernels read. Values in [-1, 1) with an outlier in every row and, when
 * the row has two blocks of 32, its second block all zeros. */
struct qe_x {
    int act;
    std::vector<float> f;
    std::vector<__nv_bfloat16> b;
    std::vector<__half> h;
    const void *ptr() const
    {
        return act == DT_BF16 ? (const void *)b.data() : act == DT_F16 ? (const void *)h.data() : (const void *)f.data();
    }
};

static qe_x qe_make_x(int act, int n_rows, int64_t n_in)
{
    qe_x x;
    x.act = act;
    size_t n = (size_t)(n_rows * n_in);
    x.f.resize(n), x.b.resize(n), x.h.resize(n);
    for (int r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n_in; i++) {
            float v = qe_unif() * (i == 7 * r + 3 ? 9.0f : 1.0f);
            if (n_in >= 64 && i >= 32 && i < 64) v = 0.0f;
            size_t e = (size_t)(r * n_in + i);
            x.b[e].x = cuda_f32_to_bf16(v), x.h[e].x = cuda_f32_to_f16(v);
            x.f[e] = act == DT_BF16 ? cuda_bf16_to_f32(x.b[e].x) : act == DT_F16 ? cuda_f16_to_f32(x.h[e].x) : v;
        }
    return x;
}

/* The reference quantisation: q [n_rows][n_in] in natural order, d [n_rows][n_in / qa]. */
static void qe_ref_quant(const std::vector<float> &x, int n_rows, int64_t n_in, int qa, std::vector<int8_t> &q,
                         std::vector<float> &d)
{
    q.assign((size_t)(n_rows * n_in), 0);
    d.assign((size_t)(n_rows * (n_in / qa)), 0.0f);
    for (int r = 0; r < n_rows; r++)
        for (int64_t b = 0; b < n_in / qa; b++)
            d[(size_t)(r * (n_in / qa) + b)] = cuda_qa_quantise(&x[(size_t)(r * n_in + b * qa)], qa,
                                                                &q[(size_t)(r * n_in + b * qa)]);
}

/* Runs qact on x into xq / xd (poisoned first). */
static void qe_run_qact(const qe_x &x, int n_rows, int64_t n_in, int qa, std::vector<int8_t> &xq,
                        std::vector<float> &xd)
{
    xq.assign((size_t)(n_rows * n_in), (int8_t)0x5A);
    xd.assign((size_t)(n_rows * (n_in / qa)), NAN);
    dim3 g;
    g.x = (unsigned)cuda_div_up((int64_t)n_rows * cuda_div_up(n_in, 256), CUDA_QACT_THREADS / 32);
    int8_t *q = xq.data();
    float *d = xd.data();
    if (x.act == DT_BF16)
        qe_launch(g, CUDA_QACT_THREADS, [&] { cuda__qact_k((const __nv_bfloat16 *)x.ptr(), n_in, n_rows, qa, q, d); });
    else if (x.act == DT_F16)
        qe_launch(g, CUDA_QACT_THREADS, [&] { cuda__qact_k((const __half *)x.ptr(), n_in, n_rows, qa, q, d); });
    else qe_launch(g, CUDA_QACT_THREADS, [&] { cuda__qact_k((const float *)x.ptr(), n_in, n_rows, qa, q, d); });
}

static int qe_check_qact(int act, int n_rows, int64_t n_in, int qa)
{
    qe_x x = qe_make_x(act, n_rows, n_in);
    std::vector<int8_t> xq, rq;
    std::vector<float> xd, rd;
    qe_run_qact(x, n_rows, n_in, qa, xq, xd);
    qe_ref_quant(x.f, n_rows, n_in, qa, rq, rd);
    int bad = 0;
    for (int r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n_in; i++) {
            int8_t got = xq[(size_t)(r * n_in + i / 32 * 32 + cuda_qa_pos((int)(i % 32)))];
            if (got != rq[(size_t)(r * n_in + i)] && bad++ < 3)
                printf("  qact %s /%d: row %d value %lld: %d, want %d\n", dt_name_emu(act), qa, r, (long long)i, got,
                       rq[(size_t)(r * n_in + i)]);
        }
    for (size_t b = 0; b < xd.size(); b++)
        if (memcmp(&xd[b], &rd[b], 4) && bad++ < 3)
            printf("  qact %s /%d: scale %zu: %g, want %g\n", dt_name_emu(act), qa, b, xd[b], rd[b]);
    return bad;
}

/* ---- mmvq and mmq ----------------------------------------------------------------------- */

template <int T>
static void qe_run_mmvq(int act, dim3 g, const uint8_t *w, size_t rb, int64_t n_in, int64_t n_out, const int8_t *xq,
                        const float *xd, int n_rows, const float *bias, void *out, float *part, unsigned *ticket)
{
    if (act == DT_BF16)
        qe_launch(g, CUDA_MMVQ_WARPS * 32, [&] {
            cuda__mmvq_k<T, __nv_bfloat16>(w, rb, n_in, n_out, xq, xd, n_rows, bias, (__nv_bfloat16 *)out, part, ticket);
        });
    else if (act == DT_F16)
        qe_launch(g, CUDA_MMVQ_WARPS * 32, [&] {
            cuda__mmvq_k<T, __half>(w, rb, n_in, n_out, xq, xd, n_rows, bias, (__half *)out, part, ticket);
        });
    else
        qe_launch(g, CUDA_MMVQ_WARPS * 32, [&] {
            cuda__mmvq_k<T, float>(w, rb, n_in, n_out, xq, xd, n_rows, bias, (float *)out, part, ticket);
        });
}

template <int T>
static void qe_run_mmq(int act, dim3 g, const uint8_t *w, size_t rb, int64_t n_in, int64_t n_out, const int8_t *xq,
                       const float *xd, int n_rows, const float *bias, void *out)
{
    if (act == DT_BF16)
        qe_launch(g, CUDA_MMQ_THREADS,
                  [&] { cuda__mmq_k<T, __nv_bfloat16>(w, rb, n_in, n_out, xq, xd, n_rows, bias, (__nv_bfloat16 *)out); });
    else if (act == DT_F16)
        qe_launch(g, CUDA_MMQ_THREADS,
                  [&] { cuda__mmq_k<T, __half>(w, rb, n_in, n_out, xq, xd, n_rows, bias, (__half *)out); });
    else
        qe_launch(g, CUDA_MMQ_THREADS,
                  [&] { cuda__mmq_k<T, float>(w, rb, n_in, n_out, xq, xd, n_rows, bias, (float *)out); });
}

/* Output element e of an act-typed array as f32 (NaN stays NaN: the poison). */
static float qe_out(int act, const std::vector<uint16_t> &o16, const std::vector<float> &o32, size_t e)
{
    return act == DT_BF16 ? cuda_bf16_to_f32(o16[e]) : act == DT_F16 ? cuda_f16_to_f32(o16[e]) : o32[e];
}

/* One mmvq (split ≥ 1 blocks per tile) or mmq (split = 0) run against the float64 reference.
 * Returns the mismatches. */
static int qe_check_mm(int type, int act, int n_rows, int64_t n_in, int64_t n_out, int split, int with_bias)
{
    std::vector<uint8_t> w = qe_weights(type, n_in, n_out);
    size_t rb = qe_row_bytes(type, n_in);
    const int qa = cuda_q_act_block(type);
    qe_x x = qe_make_x(act, n_rows, n_in);
    std::vector<int8_t> xq, rq;
    std::vector<float> xd, rd, bias((size_t)n_out);
    for (auto &v : bias) v = qe_unif();
    qe_run_qact(x, n_rows, n_in, qa, xq, xd);
    qe_ref_quant(x.f, n_rows, n_in, qa, rq, rd);
    size_t no = (size_t)(n_rows * n_out);
    std::vector<uint16_t> o16(no, 0x7FC0); /* NaN in bf16 and f16 (0x7FC0 is a NaN in both) */
    std::vector<float> o32(no, NAN);
    void *out = act == DT_F32 ? (void *)o32.data() : (void *)o16.data();
    const float *bp = with_bias ? bias.data() : NULL;
    dim3 g;
    std::vector<float> part;
    std::vector<unsigned> ticket((size_t)cuda_div_up(n_out, 16), 0u);
    if (split) {
        g.x = (unsigned)cuda_div_up(n_out, 16), g.y = (unsigned)split;
        part.assign((size_t)split * no, NAN);
        CUDA_Q_DISPATCH(type, qe_run_mmvq, act, g, w.data(), rb, n_in, n_out, xq.data(), xd.data(), n_rows, bp, out,
                        part.data(), ticket.data());
    } else {
        g.x = (unsigned)cuda_div_up(n_out, CUDA_MMQ_BM), g.y = (unsigned)cuda_div_up(n_rows, CUDA_MMQ_BN);
        CUDA_Q_DISPATCH(type, qe_run_mmq, act, g, w.data(), rb, n_in, n_out, xq.data(), xd.data(), n_rows, bp, out);
    }
    int bad = 0;
    for (unsigned tk : ticket)
        if (tk && bad++ < 3) printf("  %s mmvq split %d: a ticket left at %u\n", dt_name_emu(type), split, tk);
    const double u_out = act == DT_BF16 ? 0x1p-8 : act == DT_F16 ? 0x1p-11 : 0.0;
    const double gamma = (double)(n_in / qa + 16) * 0x1p-24;
    std::vector<float> wrow((size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i0 = 0; i0 < n_in; i0 += 8) cuda_q_dequant8(type, &w[(size_t)o * rb], i0, &wrow[(size_t)i0]);
        for (int r = 0; r < n_rows; r++) {
            double s = bp ? bp[o] : 0.0, mag = fabs(s);
            for (int64_t i = 0; i < n_in; i++) {
                const uint8_t *blk = &w[(size_t)o * rb + (size_t)(i / qa) * (size_t)cuda_q_block_bytes(type)];
                int j = (int)(i % qa / 32), h = (int)(i % 32 / 16);
                uint32_t q[2], sub = cuda_qi_sub(type, blk, j);
                float D, DM;
                cuda_qi_ints(type, blk, j, (int)(i % 16 / 4), q);
                cuda_qi_scales(type, blk, &D, &DM);
                double dx = rd[(size_t)(r * (n_in / qa) + i / qa)], a = rq[(size_t)(r * n_in + i)];
                double code = (int8_t)(q[h] >> 8 * (i % 4));
                s += (double)wrow[(size_t)i] * dx * a;
                mag += fabs(dx * a) * (fabs((double)D * cuda_qi_s(sub, h) * code) + fabs((double)DM * cuda_qi_m(sub, h)));
            }
            double got = qe_out(act, o16, o32, (size_t)(r * n_out + o));
            double tol = gamma * mag * 1.01 + u_out * fabs(s) * 1.01 + 1e-30;
            if (!(fabs(got - s) <= tol) && bad++ < 3)
                printf("  %s %s %s %lldx%lld rows %d: out[%d][%lld] = %.9g, float64 %.9g (tol %.3g)\n", dt_name_emu(type),
                       split ? "mmvq" : "mmq", dt_name_emu(act), (long long)n_in, (long long)n_out, n_rows, r,
                       (long long)o, got, s, tol);
        }
    }
    return bad;
}

/* ---- the emulated integer instructions ---------------------------------------------------- */

/* mma.sync m16n8k32 and m16n8k16 (s8) through cuda/imma.h on one warp, the fragments filled from
 * random A (16 × 32) and B (32 × 8) by the PTX ISA's formulas as written in its tables (row =
 * groupID (+ 8), col = threadID_in_group · 4 + (i & 3) (+ 16) …), against the plain product;
 * and __dp4a on values worked out by hand. */
static int qe_check_int_instructions()
{
    int8_t A[16][32], B[32][8];
    for (auto &r : A)
        for (auto &v : r) v = (int8_t)qe_next();
    for (auto &r : B)
        for (auto &v : r) v = (int8_t)qe_next();
    static int d32[32][4], d16[32][4];
    dim3 g;
    qe_launch(g, 32, [&] {
        int lane = (int)threadIdx.x, gid = lane >> 2, tig = lane & 3;
        uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
        for (int i = 0; i < 16; i++) { /* a_i: register i / 4, byte i % 4 */
            int row = (i < 4 || (i >= 8 && i < 12)) ? gid : gid + 8;
            int col = tig * 4 + (i & 3) + (i >= 8 ? 16 : 0);
            a[i / 4] |= (uint32_t)(uint8_t)A[row][col] << 8 * (i % 4);
        }
        for (int i = 0; i < 8; i++) b[i / 4] |= (uint32_t)(uint8_t)B[tig * 4 + (i & 3) + (i >= 4 ? 16 : 0)][gid] << 8 * (i % 4);
        int c[4] = {1, 2, 3, 4};
        cuda__mma_s8_16832(c, a, b);
        memcpy(d32[lane], c, sizeof c);
        uint32_t a16[2] = {0, 0}, b16 = 0; /* k = 0..15 of the same A and B */
        for (int i = 0; i < 8; i++)
            a16[i / 4] |= (uint32_t)(uint8_t)A[i < 4 ? gid : gid + 8][tig * 4 + (i & 3)] << 8 * (i % 4);
        for (int i = 0; i < 4; i++) b16 |= (uint32_t)(uint8_t)B[tig * 4 + i][gid] << 8 * i;
        int e[4] = {0, 0, 0, 0};
        cuda__mma_s8_16816(e, a16, b16);
        memcpy(d16[lane], e, sizeof e);
    });
    int bad = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            int row = (lane >> 2) + 8 * (i >> 1), col = 2 * (lane & 3) + (i & 1), want32 = i + 1, want16 = 0;
            for (int k = 0; k < 32; k++) want32 += A[row][k] * B[k][col];
            for (int k = 0; k < 16; k++) want16 += A[row][k] * B[k][col];
            if ((d32[lane][i] != want32 || d16[lane][i] != want16) && bad++ < 3)
                printf("  mma lane %d c%d: %d / %d, want %d / %d\n", lane, i, d32[lane][i], d16[lane][i], want32, want16);
        }
    /* bytes from the lowest: (2, 1, 127, -128) · (-128, 127, -1, 1) + 5 = -256 + 127 - 127 - 128 + 5 */
    if (__dp4a((int)0x807F0102u, (int)0x01FF7F80u, 5) != -379) bad++;
    if (__dp4a(0x807F0102u, 0x01FF7F80u, 5u) != 128u * 1 + 127u * 255 + 1u * 127 + 2u * 128 + 5) bad++;
    return bad;
}

/* ---- the F16 tiles and the embedding ------------------------------------------------------ */

/* Host decoding of weight i of row r. */
static float qe_w(int type, const std::vector<uint8_t> &w, size_t rb, int64_t r, int64_t i)
{
    float v[8];
    cuda_q_dequant8(type, &w[(size_t)r * rb], i / 8 * 8, v);
    return v[i % 8];
}

template <int T>
static void qe_run_deq(dim3 g, const uint8_t *w, size_t rb, int64_t n_in, int64_t r0, int64_t rows, void *dst, int f16)
{
    qe_launch(g, 64, [&] { cuda__qdeq_k<T>(w, rb, n_in, r0, rows, dst, f16); });
}

template <int T>
static void qe_run_embed(dim3 g, const uint8_t *w, size_t rb, int64_t dim, const int32_t *tok, float *out)
{
    qe_launch(g, 32, [&] { cuda__qembed_k<T>(w, rb, dim, tok, out); });
}

static int qe_check_deq(int type, int64_t n_in, int64_t n_out, int f16)
{
    std::vector<uint8_t> w = qe_weights(type, n_in, n_out);
    size_t rb = qe_row_bytes(type, n_in);
    int64_t r0 = n_out / 3, rows = n_out - r0;
    std::vector<uint8_t> dst((size_t)(rows * n_in) * 4, 0xEE);
    dim3 g;
    g.x = 3; /* fewer threads than runs: the grid-stride loop does the rest */
    CUDA_Q_DISPATCH(type, qe_run_deq, g, w.data(), rb, n_in, r0, rows, (void *)dst.data(), f16);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n_in; i++) {
            float want = qe_w(type, w, rb, r0 + r, i);
            int64_t e = r * n_in + i;
            int ok = f16 ? ((const uint16_t *)dst.data())[e] == cuda_f32_to_f16(want)
                         : memcmp(&((const float *)dst.data())[e], &want, 4) == 0;
            if (!ok && bad++ < 3)
                printf("  tile %s %s: row %lld weight %lld differs from the host's decoding\n", dt_name_emu(type),
                       f16 ? "f16" : "f32", (long long)(r0 + r), (long long)i);
        }
    return bad;
}

static int qe_check_embed(int type, int64_t dim, int64_t vocab, int n_tokens)
{
    std::vector<uint8_t> w = qe_weights(type, dim, vocab);
    size_t rb = qe_row_bytes(type, dim);
    std::vector<int32_t> tok((size_t)n_tokens);
    for (auto &t : tok) t = (int32_t)(qe_next() % (uint64_t)vocab);
    std::vector<float> out((size_t)(n_tokens * dim), NAN);
    dim3 g;
    g.x = (unsigned)n_tokens; /* 32 threads: fewer than runs, each strides over the row */
    CUDA_Q_DISPATCH(type, qe_run_embed, g, w.data(), rb, dim, tok.data(), out.data());
    int bad = 0;
    for (int t = 0; t < n_tokens; t++)
        for (int64_t i = 0; i < dim; i++) {
            float want = qe_w(type, w, rb, tok[t], i);
            if (memcmp(&out[t * dim + i], &want, 4) && bad++ < 3)
                printf("  embed %s: token %d weight %lld differs\n", dt_name_emu(type), t, (long long)i);
        }
    return bad;
}

/* ---- the run ------------------------------------------------------------------------------ */

static int qe_checks, qe_bad;

/* Prints one result line and counts it. */
static void qe_row(const char *what, int bad, int n)
{
    qe_checks += n;
    qe_bad += bad;
    printf("%s: %s\n", what, bad ? "FAILED" : "ok");
}

static void qe_type(int t, int quick)
{
    char what[96];
    const char *name = dt_name_emu(t);
    const int be = cuda_q_block_elems(t);
    /* legacy rows end inside a step of 256 inputs; super-block rows have 3 of them */
    const int64_t n_in = be == 32 ? 352 : 768;
    int bad = 0, n = 0;
    /* one row: one tile split over 2 blocks (n_in / 32 = 11 blocks over 8 warps; 3 super-blocks
     * over 8 warps leave warps idle), 37 outputs leave the last tile with 5 rows */
    bad += qe_check_mm(t, DT_F32, 1, n_in, 37, 2, 1), n++;
    if (!quick) bad += qe_check_mm(t, DT_BF16, 1, n_in, 37, 1, 0), n++;
    snprintf(what, sizeof what, "%s mmvq 1 row", name);
    qe_row(what, bad, n);
    bad = n = 0;
    bad += qe_check_mm(t, DT_BF16, 8, n_in, 21, 1, 1), n++;
    if (!quick) {
        bad += qe_check_mm(t, DT_F16, 3, n_in, 21, 3, 0), n++;
        bad += qe_check_mm(t, DT_F32, 8, be == 32 ? 1024 : 2048, 16, 2, 1), n++;
    }
    snprintf(what, sizeof what, "%s mmvq 8 rows", name);
    qe_row(what, bad, n);
    bad = n = 0;
    /* two row tiles and two activation tiles, both partial */
    const int tok = quick ? 9 : 70;
    bad += qe_check_mm(t, quick ? DT_F16 : DT_F32, tok, be == 32 ? 352 : 512, quick ? 67 : 70, 0, 1), n++;
    if (!quick) bad += qe_check_mm(t, DT_BF16, 13, be == 32 ? 352 : 256, 64, 0, 0), n++;
    snprintf(what, sizeof what, "%s mmq %d rows", name, tok);
    qe_row(what, bad, n);
    bad = n = 0;
    bad += qe_check_deq(t, be == 32 ? 96 : 256, 5, 1), n++;
    if (!quick) bad += qe_check_deq(t, be == 32 ? 96 : 256, 4, 0), n++;
    bad += qe_check_embed(t, be == 32 ? 160 : 512, 9, 3), n++;
    snprintf(what, sizeof what, "%s f16 tiles, embed", name);
    qe_row(what, bad, n);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const int types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_0, DT_IQ4_NL,
                         DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS};
    qe_row("emulated mma.sync s8, dp4a", qe_check_int_instructions(), 1);
    const int acts[] = {DT_F32, DT_BF16, DT_F16};
    for (int a : acts) {
        char what[64];
        int bad = qe_check_qact(a, 3, 352, 32) + qe_check_qact(a, 2, 768, 256);
        snprintf(what, sizeof what, "qact %s blocks of 32 and 256", dt_name_emu(a));
        qe_row(what, bad, 2);
    }
    for (int t : types) qe_type(t, quick);
    printf("quant_emu%s: %d checks, %d mismatches\n", quick ? " --quick" : "", qe_checks, qe_bad);
    return qe_bad ? 1 : 0;
}
