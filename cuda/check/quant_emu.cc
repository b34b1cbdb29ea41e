/*
 * quant_emu.cc — runs the CUDA kernels of the quantised weight types (cuda/qmatvec_kernels.h,
 * qgemm_kernels.h and the quantised embedding of gather_kernels.h), the very source nvcc
 * compiles, on the CPU through cuda/check/emu_cuda.h, for every type:
 *   - the decode GEMV against a float64 product of the decoded weights and the activations, with
 *     the tolerance of its f32 arithmetic (each lane sums n_in / 32 products, then 5 shuffle
 *     adds and the bias: γ(n_in / 32 + 7) · Σ |w·x|), on shapes whose rows are not multiples of
 *     256 weights, output counts that leave warps idle, 1 to 8 rows, with and without bias;
 *   - the F16 tiles of prefill (rows from an offset, a grid-stride launch smaller than the work)
 *     and the embedding gather, element for element against the host's decoding.
 * The decoding itself (cuda_q_dequant8) is checked bit for bit against dt_to_f32 by
 * tests/test_cuda_host.c; this program checks the kernels' indexing, striding, masking and warp
 * reductions. No GPU or CUDA toolkit is needed. Built by the Makefile and run by `make test`
 * (`--quick`: fewer shapes); exit status 0 when every check passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda/check/emu_cuda.h"
extern "C" {
#include "cuda/formats.h"
#include "cuda/launch.h"
}
#include "cuda/gather_kernels.h"
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
    case DT_MXFP4: return "MXFP4";
    case DT_Q2_K: return "Q2_K";
    case DT_Q3_K: return "Q3_K";
    case DT_Q4_K: return "Q4_K";
    case DT_Q5_K: return "Q5_K";
    case DT_Q6_K: return "Q6_K";
    default: return "IQ4_XS";
    }
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

/* Random blocks: random bytes, then every f16 field (MXFP4: its E8M0 byte) a finite scale of
 * moderate size. */
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
    for (size_t b = 0; type == DT_MXFP4 && b < nb; b++) w[b * bb] = (uint8_t)(118 + qe_next() % 6); /* E8M0 2^-10 .. 2^-5 */
    return w;
}

/* The running launch's arguments (one kernel at a time). */
static struct {
    int type, n_rows, f16;
    const uint8_t *w;
    size_t rb;
    int64_t n_in, n_out, r0, tile_rows;
    const float *x, *bias;
    float *out;
    void *dst;
    const int32_t *tokens;
} qe;

template <int T> static void qe_gemv_block()
{
    cuda__qgemv_k<T>(qe.w, qe.rb, qe.n_in, qe.n_out, qe.x, qe.n_rows, qe.bias, qe.out);
}
template <int T> static void qe_deq_block()
{
    cuda__qdeq_k<T>(qe.w, qe.rb, qe.n_in, qe.r0, qe.tile_rows, qe.dst, qe.f16);
}
template <int T> static void qe_embed_block()
{
    cuda__qembed_k<T>(qe.w, qe.rb, qe.n_in, qe.tokens, qe.out);
}
template <int T> static void qe_pick(void (**fn)(void), int which)
{
    *fn = which == 0 ? qe_gemv_block<T> : which == 1 ? qe_deq_block<T> : qe_embed_block<T>;
}
static void (*qe_kernel(int type, int which))(void)
{
    void (*fn)(void) = NULL;
    CUDA_Q_DISPATCH(type, qe_pick, &fn, which);
    return fn;
}

/* Host decoding of weight i of row r. */
static float qe_w(int type, const std::vector<uint8_t> &w, size_t rb, int64_t r, int64_t i)
{
    float v[8];
    cuda_q_dequant8(type, &w[(size_t)r * rb], i / 8 * 8, v);
    return v[i % 8];
}

static int qe_check_gemv(int type, int64_t n_in, int64_t n_out, int n_rows, int with_bias)
{
    std::vector<uint8_t> w = qe_weights(type, n_in, n_out);
    size_t rb = (size_t)(n_in / cuda_q_block_elems(type) * cuda_q_block_bytes(type));
    std::vector<float> x((size_t)(n_rows * n_in)), bias((size_t)n_out), out((size_t)(n_rows * n_out), NAN);
    for (auto &v : x) v = qe_unif();
    for (auto &v : bias) v = qe_unif();
    qe.type = type, qe.w = w.data(), qe.rb = rb, qe.n_in = n_in, qe.n_out = n_out, qe.x = x.data();
    qe.n_rows = n_rows, qe.bias = with_bias ? bias.data() : NULL, qe.out = out.data();
    dim3 g;
    g.x = (unsigned)cuda_div_up(n_out, CUDA_QGEMV_THREADS / 32);
    emu_run(g, CUDA_QGEMV_THREADS, qe_kernel(type, 0));
    int bad = 0;
    double gamma = (double)(n_in / 32 + 7) * 0x1p-24;
    for (int r = 0; r < n_rows; r++)
        for (int64_t o = 0; o < n_out; o++) {
            double s = with_bias ? bias[o] : 0, mag = fabs(s);
            for (int64_t i = 0; i < n_in; i++) {
                double p = (double)qe_w(type, w, rb, o, i) * x[r * n_in + i];
                s += p, mag += fabs(p);
            }
            double got = out[r * n_out + o];
            if (!(fabs(got - s) <= gamma * mag * 1.01 + 1e-30) && bad++ < 3)
                printf("  gemv %s %lldx%lld rows %d: out[%d][%lld] = %.9g, float64 %.9g\n", dt_name_emu(type),
                       (long long)n_in, (long long)n_out, n_rows, r, (long long)o, got, s);
        }
    return bad;
}

static int qe_check_deq(int type, int64_t n_in, int64_t n_out, int f16)
{
    std::vector<uint8_t> w = qe_weights(type, n_in, n_out);
    size_t rb = (size_t)(n_in / cuda_q_block_elems(type) * cuda_q_block_bytes(type));
    int64_t r0 = n_out / 3, rows = n_out - r0;
    std::vector<uint8_t> dst((size_t)(rows * n_in) * 4, 0xEE);
    qe.type = type, qe.w = w.data(), qe.rb = rb, qe.n_in = n_in, qe.r0 = r0, qe.tile_rows = rows;
    qe.dst = dst.data(), qe.f16 = f16;
    dim3 g;
    g.x = 3; /* fewer threads than runs: the grid-stride loop does the rest */
    emu_run(g, 64, qe_kernel(type, 1));
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
    size_t rb = (size_t)(dim / cuda_q_block_elems(type) * cuda_q_block_bytes(type));
    std::vector<int32_t> tok((size_t)n_tokens);
    for (auto &t : tok) t = (int32_t)(qe_next() % (uint64_t)vocab);
    std::vector<float> out((size_t)(n_tokens * dim), NAN);
    qe.type = type, qe.w = w.data(), qe.rb = rb, qe.n_in = dim, qe.tokens = tok.data(), qe.out = out.data();
    dim3 g;
    g.x = (unsigned)n_tokens;
    emu_run(g, 32, qe_kernel(type, 2)); /* fewer threads than runs: each strides over the row */
    int bad = 0;
    for (int t = 0; t < n_tokens; t++)
        for (int64_t i = 0; i < dim; i++) {
            float want = qe_w(type, w, rb, tok[t], i);
            if (memcmp(&out[t * dim + i], &want, 4) && bad++ < 3)
                printf("  embed %s: token %d weight %lld differs\n", dt_name_emu(type), t, (long long)i);
        }
    return bad;
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const int types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_0, DT_IQ4_NL,
                         DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS, DT_MXFP4};
    int bad = 0, n = 0;
    for (int t : types) {
        int be = cuda_q_block_elems(t);
        int64_t n_in = be == 32 ? 352 : 768; /* 11 runs per lane-round for the legacy types: lanes idle */
        const int rows[] = {1, 3, 8};
        for (int k = 0; k < (quick ? 2 : 3); k++, n++) bad += qe_check_gemv(t, n_in, 7, rows[k], k != 1);
        if (!quick) bad += qe_check_gemv(t, be == 32 ? 64 : 256, 33, 2, 1), n++;
        bad += qe_check_deq(t, be == 32 ? 96 : 256, 5, 1), n++;
        if (!quick) bad += qe_check_deq(t, be == 32 ? 96 : 256, 4, 0), n++;
        bad += qe_check_embed(t, be == 32 ? 160 : 512, 9, 3), n++;
        printf("%-7s gemv, tiles, embed: %s\n", dt_name_emu(t), bad ? "FAILED" : "ok");
    }
    printf("quant_emu%s: %d checks, %d mismatches\n", quick ? " --quick" : "", n, bad);
    return bad ? 1 : 0;
}
