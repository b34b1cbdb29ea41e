/*
 * moe_emu.cc — runs the kernels of the mixture-of-experts FFN (cuda/moe_kernels.h) and of
 * multi-head latent attention (cuda/mla_kernels.h), the very source nvcc compiles, on the CPU
 * through cuda/check/emu_cuda.h, and compares them with host references:
 *   - routing: every gating function, selection biases, groups, renormalisation and scales, each
 *     token's experts and weights equal to be_moe_route on the host (the CPU backend's routing,
 *     itself checked against llama.cpp's), and the per-expert counts exact;
 *   - the whole FFN (route, group, the grouped matvecs, SiLU or gpt-oss's clamped SwiGLU with
 *     biases, the weighted sum) against a float64 forward of the chosen experts, in F32 and, on
 *     the integer path (activations through 8-bit blocks), Q8_0, Q4_K, Q6_K and MXFP4 (whose
 *     blocks are llama.cpp's, with f16 scales), with a tolerance propagated from the f32
 *     arithmetic of each stage; the experts no token chose are given NULL matrices, so reading
 *     one crashes the check;
 *   - the grouped integer matvec of every quantised type and MXFP4 on its own, at decode (split
 *     over the input dimension, experts without rows holding NaN bytes) and with prefill-sized
 *     groups (several passes of 8 rows), against float64 over the host's quantisation;
 *   - the 8-bit activation rounding of MXFP4 against cpu/act.c's definition, bit for bit;
 *   - the grouped matvec as MLA's per-head projection (strided rows, a group per head);
 *   - MLA's prep (the latent's RMSNorm, the RoPE parts of key and query) against float64 and
 *     the host rotation;
 *   - MLA's attention over a latent plane (f32, int8 and e4m3 arenas, decode and prefill over
 *     cached prefixes, head counts that leave a partial chunk) against float64.
 * Every output is poisoned first, so an unwritten element fails. No GPU or CUDA toolkit is needed.
 * Built by the Makefile and run by `make test` (`--quick`: fewer shapes); exit status 0 when every
 * check passes.
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
#include "cuda/kv_kernels.h"
#include "cuda/mla_kernels.h"
#include "cuda/moe_kernels.h"
#include "cuda/qact_kernels.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
pthread_barrier_t emu_bar, emu_wbar[32];
float emu_xchg[1024];
float sm[1 << 18];

static std::function<void()> me_body;
static void me_block()
{
    me_body();
}

static void me_launch(unsigned gx, unsigned gy, int threads, std::function<void()> body)
{
    me_body = body;
    dim3 g;
    g.x = gx, g.y = gy;
    emu_run(g, threads, me_block);
}

static uint64_t me_rs = 0x6d6f655f656d75ULL;
static uint64_t me_next()
{
    me_rs ^= me_rs << 13;
    me_rs ^= me_rs >> 7;
    me_rs ^= me_rs << 17;
    return me_rs;
}
static float me_unif() /* [-1, 1) */
{
    return (float)((me_next() >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}
static int me_int(int lo, int hi)
{
    return lo + (int)(me_next() % (uint64_t)(hi - lo + 1));
}

static const float me_poison = 1e30f;
static int me_bad, me_n;
static void me_report(const char *what, int ok, const char *extra)
{
    printf("  %-58s %s%s\n", what, ok ? "ok" : "FAIL", extra);
    me_bad += !ok;
    me_n++;
}

/* f32 unit roundoff, and γ(n) = n·u / (1 − n·u). */
static double me_gamma(double n)
{
    const double u = 5.960464477539063e-8;
    return n * u / (1 - n * u);
}

/* ---- weights ----------------------------------------------------------------------------- */

/* One matrix [n_out][n_in] of type t: random blocks (every f16 field a moderate scale, MXFP4's
 * E8M0 byte 2^-6 .. 2^-3) or random f32 values, its decoded values (cuda_q_dequant8, which
 * tests/test_cuda_host.c checks bit for bit against dt_to_f32) and, per weight, the magnitude of
 * the terms the integer path forms it from (|D·s·q| + |DM·m|, cuda/quant_int.h; |w| for f32),
 * which bounds the rounding of the f32 sums of those terms. */
struct me_mat {
    int type;
    int64_t n_in, n_out;
    size_t row_bytes;
    std::vector<uint8_t> raw;
    std::vector<float> dec, mag;
};

/* Sets the scale fields of the block at p (type t, weights of about mag). */
static void me_block_scales(int type, uint8_t *p, float mag)
{
    if (type == DT_MXFP4) {
        p[0] = (uint8_t)(121 + me_next() % 4);
        return;
    }
    int off[2], n16 = dt_f16_fields(type, off), be = cuda_q_block_elems(type);
    for (int k = 0; k < n16; k++) {
        float r = 0.5f + (float)(me_next() % 100) / 100.0f;
        float v = k == 0 ? mag / (be == 32 ? 64 : 256) * r : mag / 512 * (r - 0.5f) * (me_next() & 1 ? 1 : -1);
        uint16_t h = cuda_f32_to_f16(v);
        memcpy(p + off[k], &h, 2);
    }
}

static me_mat me_make(int type, int64_t n_in, int64_t n_out, float mag)
{
    me_mat m;
    m.type = type, m.n_in = n_in, m.n_out = n_out;
    if (type == DT_F32) {
        m.row_bytes = (size_t)n_in * 4;
        m.raw.resize(m.row_bytes * n_out);
        float *f = (float *)m.raw.data();
        for (int64_t i = 0; i < n_in * n_out; i++) f[i] = mag * me_unif();
    } else {
        size_t bb = (size_t)cuda_q_block_bytes(type), be = (size_t)cuda_q_block_elems(type);
        m.row_bytes = (size_t)n_in / be * bb;
        m.raw.resize(m.row_bytes * n_out);
        for (auto &b : m.raw) b = (uint8_t)me_next();
        for (size_t b = 0; b < m.raw.size() / bb; b++) me_block_scales(type, &m.raw[b * bb], mag);
    }
    m.dec.resize((size_t)n_in * n_out);
    m.mag.resize((size_t)n_in * n_out);
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t i = 0; i < n_in; i += 8) {
            float *d = &m.dec[o * n_in + i];
            if (type == DT_F32) memcpy(d, (const float *)m.raw.data() + o * n_in + i, 32);
            else cuda_q_dequant8(type, &m.raw[o * m.row_bytes], i, d);
            for (int k = 0; k < 8; k++) m.mag[o * n_in + i + k] = fabsf(d[k]);
        }
    if (type == DT_F32) return m;
    const int qa = cuda_q_act_block(type), bb = cuda_q_block_bytes(type);
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t i = 0; i < n_in; i++) {
            const uint8_t *blk = &m.raw[o * m.row_bytes + (size_t)(i / qa) * bb];
            int j = (int)(i % qa / 32), h = (int)(i % 32 / 16);
            uint32_t q[2], sub = cuda_qi_sub(type, blk, j);
            float D, DM;
            cuda_qi_ints(type, blk, j, (int)(i % 16 / 4), q);
            cuda_qi_scales(type, blk, &D, &DM);
            double code = (int8_t)(q[h] >> 8 * (i % 4));
            m.mag[o * n_in + i] = (float)(fabs((double)D * cuda_qi_s(sub, h) * code) + fabs((double)DM * cuda_qi_m(sub, h)));
        }
    return m;
}

/* 1 for the weight types of the integer path (the quantised ones and MXFP4). */
static int me_is_int(int type)
{
    return type != DT_F32;
}

static void me_gemv(int type, const cuda__moe_proj &p, const float *x, float *out)
{
    unsigned gx = (unsigned)cuda_div_up(p.n_out, CUDA_MOE_THREADS / 32), gy = (unsigned)p.n_groups;
    switch (type) {
    case DT_F32: me_launch(gx, gy, CUDA_MOE_THREADS, [&] { cuda__moe_gemv_k<DT_F32>(p, x, out); }); break;
    case DT_Q8_0: me_launch(gx, gy, CUDA_MOE_THREADS, [&] { cuda__moe_gemv_k<DT_Q8_0>(p, x, out); }); break;
    case DT_Q4_K: me_launch(gx, gy, CUDA_MOE_THREADS, [&] { cuda__moe_gemv_k<DT_Q4_K>(p, x, out); }); break;
    default: me_launch(gx, gy, CUDA_MOE_THREADS, [&] { cuda__moe_gemv_k<DT_MXFP4>(p, x, out); }); break;
    }
}

/* The grouped integer matvec, grid (tiles, expert slots, split) as its launcher in moe.cu. */
template <int T> static void me_mmvq_t(const cuda__moe_qproj &q, int split)
{
    dim3 g;
    g.x = (unsigned)cuda_div_up(q.n_out, 16), g.y = (unsigned)std::min(q.n_groups, q.n_rows), g.z = (unsigned)split;
    me_body = [&] { cuda__moe_mmvq_k<T>(q); };
    emu_run(g, CUDA_MMVQ_WARPS * 32, me_block);
}

static void me_mmvq(int type, const cuda__moe_qproj &q, int split)
{
    if (type == DT_MXFP4) me_mmvq_t<DT_MXFP4>(q, split);
    else CUDA_Q_DISPATCH(type, me_mmvq_t, q, split);
}

/* qact on R rows of x [R][n_in] in blocks of qa: xq, xd sized and poisoned here. */
static void me_qact(const float *x, int R, int64_t n_in, int qa, std::vector<int8_t> &xq, std::vector<float> &xd)
{
    xq.assign((size_t)R * n_in, (int8_t)0x5A);
    xd.assign((size_t)R * (n_in / qa), NAN);
    unsigned g = (unsigned)cuda_div_up((int64_t)R * cuda_div_up(n_in, 256), CUDA_QACT_THREADS / 32);
    me_launch(g, 1, CUDA_QACT_THREADS, [&] { cuda__qact_k(x, n_in, R, qa, xq.data(), xd.data()); });
}

static const char *me_type_name(int t)
{
    static const struct {
        int t;
        const char *name;
    } names[] = {{DT_F32, "F32"},   {DT_Q4_0, "Q4_0"}, {DT_Q4_1, "Q4_1"}, {DT_Q5_0, "Q5_0"},     {DT_Q5_1, "Q5_1"},
                 {DT_Q8_0, "Q8_0"}, {DT_Q2_K, "Q2_K"}, {DT_Q3_K, "Q3_K"}, {DT_Q4_K, "Q4_K"},     {DT_Q5_K, "Q5_K"},
                 {DT_Q6_K, "Q6_K"}, {DT_MXFP4, "MXFP4"}, {DT_IQ4_NL, "IQ4_NL"}, {DT_IQ4_XS, "IQ4_XS"}};
    for (auto &n : names)
        if (n.t == t) return n.name;
    return "?";
}

/* The activations the integer path's product sees: x [n] through 8-bit blocks of qa values
 * (cuda_qa_quantise, which cpu/act.c's quantisers equal), the scale rounded to f16 for MXFP4
 * (llama.cpp's q8h blocks), as exact values in out. */
static void me_qround_ref(const float *x, int64_t n, int qa, int f16_scale, double *out)
{
    std::vector<int8_t> q(qa);
    for (int64_t b = 0; b < n / qa; b++) {
        float d = cuda_qa_quantise(x + b * qa, qa, q.data());
        if (f16_scale) d = cuda_f16_to_f32(cuda_f32_to_f16(d));
        for (int i = 0; i < qa; i++) out[b * qa + i] = (double)q[i] * d;
    }
}

/* cpu/act.c's 8-bit activation block with an f16 scale (cpu__quantise_block, then d rounded). */
static void me_q8h_ref(float *x, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0, *v = x + b * 32;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f, dh = cuda_f16_to_f32(cuda_f32_to_f16(d));
        for (int i = 0; i < 32; i++) v[i] = (float)nearbyint(v[i] * id) * dh;
    }
}

/* ---- routing ----------------------------------------------------------------------------- */

static be_moe_rule me_rule(int E, int k, int gating, int norm, float scale, int groups, int group_used)
{
    be_moe_rule r;
    memset(&r, 0, sizeof r);
    r.n_expert = E, r.n_used = k, r.gating = gating, r.norm = norm, r.scale = scale;
    r.n_groups = groups, r.n_group_used = group_used;
    return r;
}

static void me_route(const be_moe_rule &r, int n_tok, int bias, int ties)
{
    int E = r.n_expert, k = r.n_used;
    std::vector<float> logits((size_t)n_tok * E), sb(E), w((size_t)n_tok * k, me_poison), ww(k), scr(3 * E);
    for (auto &v : logits) v = ties ? (float)me_int(-2, 2) : 4 * me_unif();
    for (auto &v : sb) v = 0.5f * me_unif();
    std::vector<int32_t> ids((size_t)n_tok * k, -7), cnt(E, 0), want_cnt(E, 0), wi(k);
    me_launch((unsigned)n_tok, 1, 32, [&] {
        cuda__moe_route_k(r, logits.data(), bias ? sb.data() : NULL, ids.data(), w.data(), cnt.data());
    });
    int ok = 1;
    for (int t = 0; t < n_tok; t++) {
        be_moe_route(&r, &logits[(size_t)t * E], bias ? sb.data() : NULL, wi.data(), ww.data(), scr.data());
        for (int j = 0; j < k; j++) {
            ok &= ids[(size_t)t * k + j] == wi[j] && w[(size_t)t * k + j] == ww[j];
            want_cnt[wi[j]]++;
        }
    }
    ok &= cnt == want_cnt;
    char what[96];
    snprintf(what, sizeof what, "route E %d k %d gating %d norm %d groups %d/%d%s%s", E, k, r.gating, r.norm,
             r.n_group_used, r.n_groups, bias ? " bias" : "", ties ? " ties" : "");
    me_report(what, ok, "");
}

/* ---- the whole FFN ----------------------------------------------------------------------- */

struct me_ffn_case {
    int type, E, k, n_tok, dim, ff, oai, biases;
};

/* The stages on the emulated device, as cuda__op_moe_ffn runs them. */
static void me_ffn_device(const me_ffn_case &c, const be_moe_rule &r, const float *x, const float *logits,
                          const void *const *wt, const float *const *bt, int biased, float *out,
                          std::vector<int32_t> &ids, std::vector<float> &w)
{
    int E = c.E, k = c.k, R = c.n_tok * k;
    std::vector<int32_t> cnt(E, 0), start(2 * E + 2, -1), fill(E, -1), row(R, -1);
    std::vector<float> xg((size_t)R * c.dim, me_poison), g((size_t)R * c.ff, me_poison), u(g), y((size_t)R * c.dim, me_poison);
    ids.assign(R, -1), w.assign(R, me_poison);
    me_launch((unsigned)c.n_tok, 1, 32, [&] { cuda__moe_route_k(r, logits, NULL, ids.data(), w.data(), cnt.data()); });
    me_launch(1, 1, 32, [&] { cuda__moe_scan_k(cnt.data(), E, start.data(), fill.data()); });
    me_launch((unsigned)R, 1, 128,
              [&] { cuda__moe_scatter_k(ids.data(), k, x, c.dim, fill.data(), row.data(), xg.data()); });
    cuda__moe_proj p;
    memset(&p, 0, sizeof p);
    p.start = start.data(), p.n_groups = E;
    std::vector<int8_t> xq;
    std::vector<float> xd, part;
    const int qa = me_is_int(c.type) ? cuda_q_act_block(c.type) : 0;
    std::vector<unsigned> ticket((size_t)E * cuda_div_up(c.dim > c.ff ? c.dim : c.ff, 16), 0u);
    for (int pr = 0; pr < 3; pr++) {
        int64_t n_in = pr < 2 ? c.dim : c.ff, n_out = pr < 2 ? c.ff : c.dim;
        float *in = pr == 2 ? g.data() : xg.data(), *o = pr == 0 ? g.data() : pr == 1 ? u.data() : y.data();
        size_t rb = c.type == DT_F32 ? (size_t)n_in * 4 : (size_t)n_in / qa * cuda_q_block_bytes(c.type);
        if (pr == 2)
            me_launch(3, 1, 128, [&] { cuda__moe_act_k(g.data(), u.data(), (int64_t)R * c.ff, c.oai, 1.702f, 7.0f); });
        if (me_is_int(c.type)) { /* as cuda__moe_qproj_run: quantise (gate and up share it), then mmvq */
            if (pr != 1) me_qact(in, R, n_in, qa, xq, xd);
            int split = 1;
            if (c.n_tok <= CUDA_QGEMV_MAX_ROWS) /* as on a GPU of 132 SMs */
                split = cuda_mmvq_split(n_out * std::min(E, R), n_in / qa, qa, 132);
            part.assign((size_t)split * R * n_out, NAN);
            cuda__moe_qproj q;
            memset(&q, 0, sizeof q);
            q.w = wt + (size_t)pr * E, q.b = biased ? bt + (size_t)pr * E : NULL, q.start = start.data();
            q.n_groups = E, q.n_rows = R, q.n_in = n_in, q.n_out = n_out, q.row_bytes = rb;
            q.xq = xq.data(), q.xd = xd.data(), q.out = o, q.part = part.data(), q.ticket = ticket.data();
            me_mmvq(c.type, q, split);
            continue;
        }
        p.w = wt + (size_t)pr * E, p.b = biased ? bt + (size_t)pr * E : NULL;
        p.n_in = n_in, p.n_out = n_out, p.x_stride = n_in, p.o_stride = n_out, p.row_bytes = rb;
        me_gemv(c.type, p, in, o);
    }
    for (unsigned t : ticket) ids[0] = t ? -9 : ids[0]; /* a ticket left set fails the check of ids */
    me_launch((unsigned)c.n_tok, 1, 128, [&] { cuda__moe_combine_k(y.data(), row.data(), w.data(), k, c.dim, out); });
}

/* A row of a projection in float64, with the bound of the kernel's f32 arithmetic on it: each lane
 * (or on the integer path each block term) sums at most n_in / 32 terms, then the shuffle or tile
 * reductions, the split partials and the bias; the integer path's terms are D·Σ s·q·a − DM·Σ m·a
 * per block, rounded a few times each: γ(n_in / 32 + 18) · (Σ mag·|x| + |b|), plus Σ mag·dx for
 * inputs that are themselves off by dx. */
static void me_row(const me_mat &m, int64_t o, const double *x, const double *dx, double b, double *y, double *dy)
{
    double s = 0, a = 0, e = 0;
    for (int64_t i = 0; i < m.n_in; i++) {
        double wv = m.dec[o * m.n_in + i], mg = m.mag[o * m.n_in + i];
        s += wv * x[i], a += mg * fabs(x[i]), e += mg * dx[i];
    }
    *y = s + b;
    *dy = me_gamma((double)m.n_in / 32 + 18) * (a + fabs(b)) + e + 1e-30;
}

static void me_ffn(const me_ffn_case &c)
{
    be_moe_rule r = me_rule(c.E, c.k, c.oai ? 3 : 1, !c.oai, 1.0f, 0, 0);
    int E = c.E, k = c.k;
    std::vector<float> x((size_t)c.n_tok * c.dim), logits((size_t)c.n_tok * E), out((size_t)c.n_tok * c.dim, me_poison);
    for (auto &v : x) v = me_unif();
    for (auto &v : logits) v = 3 * me_unif();
    /* The experts the host routing chooses: the others get no matrices at all. */
    std::vector<char> chosen(E, 0);
    std::vector<int32_t> wi(k);
    std::vector<float> ww(k), scr(3 * E);
    for (int t = 0; t < c.n_tok; t++) {
        be_moe_route(&r, &logits[(size_t)t * E], NULL, wi.data(), ww.data(), scr.data());
        for (int j = 0; j < k; j++) chosen[wi[j]] = 1;
    }
    std::vector<me_mat> mats(3 * (size_t)E);
    std::vector<std::vector<float>> bias(3 * (size_t)E);
    std::vector<const void *> wt(3 * (size_t)E, nullptr);
    std::vector<const float *> bt(3 * (size_t)E, nullptr);
    int n_chosen = 0;
    for (int e = 0; e < E; e++) {
        n_chosen += chosen[e];
        for (int pr = 0; pr < 3 && chosen[e]; pr++) {
            size_t i = (size_t)pr * E + e;
            mats[i] = me_make(c.type, pr < 2 ? c.dim : c.ff, pr < 2 ? c.ff : c.dim, pr < 2 ? 0.1f : 0.05f);
            wt[i] = mats[i].raw.data();
            bias[i].resize(pr < 2 ? c.ff : c.dim);
            for (auto &v : bias[i]) v = 0.1f * me_unif();
            bt[i] = bias[i].data();
        }
    }
    std::vector<int32_t> ids;
    std::vector<float> w;
    me_ffn_device(c, r, x.data(), logits.data(), wt.data(), bt.data(), c.biases, out.data(), ids, w);
    /* float64: each token's chosen experts in turn, with the bound carried through every stage. */
    const int qa = me_is_int(c.type) ? cuda_q_act_block(c.type) : 0;
    double worst = 0;
    int ok = 1;
    std::vector<double> xd(c.dim), dx(c.dim), gd(c.ff), dg(c.ff), ud(c.ff), du(c.ff), ad(c.ff), da(c.ff);
    for (int t = 0; t < c.n_tok && ok; t++) {
        be_moe_route(&r, &logits[(size_t)t * E], NULL, wi.data(), ww.data(), scr.data());
        std::vector<double> want(c.dim, 0), tol(c.dim, 0);
        for (int j = 0; j < k; j++) {
            int e = wi[j];
            ok &= ids[(size_t)t * k + j] == e && w[(size_t)t * k + j] == ww[j];
            const float *xr = &x[(size_t)t * c.dim];
            for (int i = 0; i < c.dim; i++) xd[i] = xr[i], dx[i] = 0;
            if (qa) me_qround_ref(xr, c.dim, qa, c.type == DT_MXFP4, xd.data()); /* the same input: alike */
            for (int o = 0; o < c.ff; o++) {
                const float *bg = c.biases ? bias[(size_t)e].data() : NULL, *bu = c.biases ? bias[(size_t)E + e].data() : NULL;
                me_row(mats[(size_t)e], o, xd.data(), dx.data(), bg ? bg[o] : 0, &gd[o], &dg[o]);
                me_row(mats[(size_t)E + e], o, xd.data(), dx.data(), bu ? bu[o] : 0, &ud[o], &du[o]);
                /* The activation and its error: slopes bounded over the inputs' intervals, and a few
                 * ulps of the f32 formula (expf, a division, two products). */
                double gm = fabs(gd[o]) + dg[o], um = fabs(ud[o]) + du[o];
                if (c.oai) {
                    double xg = fmin(gd[o], 7.0), yu = fmax(-7.0, fmin(ud[o], 7.0));
                    ad[o] = xg / (1 + exp(-1.702 * xg)) * (yu + 1);
                    da[o] = (1 + 1.702 * fmin(gm, 7.0) * 0.25) * dg[o] * (fmin(um, 7.0) + 1) + fmin(gm, 7.0) * du[o] +
                            8 * 6e-8 * fabs(ad[o]);
                } else {
                    ad[o] = gd[o] / (1 + exp(-gd[o])) * ud[o];
                    da[o] = 1.1 * dg[o] * um + gm * du[o] + 8 * 6e-8 * fabs(ad[o]);
                }
            }
            if (qa) { /* the 8-bit blocks: the device's inputs there are off by da; a code may round
                       * the other way (one step d) and d itself moves with the block's max (and
                       * MXFP4's with its f16 rounding) */
                std::vector<float> af(c.ff);
                std::vector<double> aq(c.ff);
                for (int o = 0; o < c.ff; o++) af[o] = (float)ad[o];
                me_qround_ref(af.data(), c.ff, qa, c.type == DT_MXFP4, aq.data());
                for (int b = 0; b < c.ff / qa; b++) {
                    double amax = 0, dmax = 0;
                    for (int i = b * qa; i < b * qa + qa; i++) amax = fmax(amax, fabs(ad[i])), dmax = fmax(dmax, da[i]);
                    for (int i = b * qa; i < b * qa + qa; i++)
                        da[i] = da[i] + dmax + (amax + dmax) / 127 * 1.01 + fabs(ad[i]) * 1e-3, ad[i] = aq[i];
                }
            }
            for (int o = 0; o < c.dim; o++) {
                const float *bd = c.biases ? bias[2 * (size_t)E + e].data() : NULL;
                double y, dy;
                me_row(mats[2 * (size_t)E + e], o, ad.data(), da.data(), bd ? bd[o] : 0, &y, &dy);
                want[o] += ww[j] * y;
                tol[o] += ww[j] * (dy + fabs(y) * 6e-8) + me_gamma(k) * fabs(ww[j] * y);
            }
        }
        for (int o = 0; o < c.dim; o++) {
            double d = fabs(out[(size_t)t * c.dim + o] - want[o]);
            worst = fmax(worst, d / tol[o]);
            if (!(d <= tol[o])) ok = 0;
        }
    }
    char what[112], extra[64];
    snprintf(what, sizeof what, "moe_ffn %s E %d k %d tokens %d dim %d ff %d%s%s", me_type_name(c.type), E, k, c.n_tok,
             c.dim, c.ff, c.oai ? " swiglu-oai" : "", c.biases ? " biases" : "");
    snprintf(extra, sizeof extra, " (%d experts read, err/bound %.2f)", n_chosen, worst);
    me_report(what, ok, extra);
}

/* The grouped integer matvec alone (cuda__moe_mmvq_k after qact), as cuda__moe_qproj_run runs
 * it: E experts, n_tok tokens each routed to k distinct experts of the first `live`, rows
 * grouped by expert. Every expert that no token drew holds a matrix of 0xFF bytes (NaN scales,
 * NaN f32), so reading it into any output would show. Against float64 over the host's own
 * quantisation of the rows (cuda_qa_quantise; MXFP4's scale rounded to f16 as llama.cpp's q8h
 * blocks and the CPU backend's MXFP4 path have it), with mmvq's bound: γ(n_in / 32 + 18) times
 * Σ (|D·s·q| + |DM·m|)·|a·dx| + |b| (quant_emu.cc's); every output written, every ticket left 0. */
static void me_qgroup(int type, int E, int live, int n_tok, int k, int64_t n_in, int64_t n_out, int split)
{
    const int qa = cuda_q_act_block(type), R = n_tok * k;
    std::vector<std::vector<int>> rows_of(E);
    std::vector<int> pick(live);
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < live; i++) pick[i] = i;
        for (int j = 0; j < k; j++) {
            std::swap(pick[j], pick[me_int(j, live - 1)]);
            rows_of[pick[j]].push_back(t);
        }
    }
    std::vector<int32_t> start(2 * E + 2, 0); /* as cuda__moe_scan_k writes it */
    std::vector<int> tok;                     /* the token of each grouped row */
    int most = 0;
    for (int e = 0; e < E; e++) {
        start[e] = (int32_t)tok.size();
        for (int t : rows_of[e]) tok.push_back(t);
        most = std::max(most, (int)rows_of[e].size());
        if (!rows_of[e].empty()) start[E + 2 + start[E + 1]++] = e;
    }
    start[E] = R;
    std::vector<float> x((size_t)n_tok * n_in), xg((size_t)R * n_in);
    for (int t = 0; t < n_tok; t++) {
        float mag = (float)exp(2 * me_unif());
        for (int64_t i = 0; i < n_in; i++) x[(size_t)t * n_in + i] = mag * me_unif();
    }
    for (int r = 0; r < R; r++) memcpy(&xg[(size_t)r * n_in], &x[(size_t)tok[r] * n_in], (size_t)n_in * 4);
    std::vector<int8_t> xq;
    std::vector<float> xd;
    me_qact(xg.data(), R, n_in, qa, xq, xd);
    std::vector<me_mat> m(E);
    std::vector<const void *> wt(E);
    std::vector<std::vector<float>> bias(E, std::vector<float>(n_out, NAN));
    std::vector<const float *> bt(E);
    for (int e = 0; e < E; e++) {
        if (rows_of[e].empty()) {
            m[e].raw.assign((size_t)n_in / qa * cuda_q_block_bytes(type) * n_out, 0xFF);
        } else {
            m[e] = me_make(type, n_in, n_out, 0.1f);
            for (auto &v : bias[e]) v = 0.1f * me_unif();
        }
        wt[e] = m[e].raw.data(), bt[e] = bias[e].data();
    }
    std::vector<float> out((size_t)R * n_out, NAN), part((size_t)split * R * n_out, NAN);
    std::vector<unsigned> ticket((size_t)E * cuda_div_up(n_out, 16), 0u);
    cuda__moe_qproj q;
    memset(&q, 0, sizeof q);
    q.w = wt.data(), q.b = bt.data(), q.start = start.data(), q.n_groups = E, q.n_rows = R;
    q.n_in = n_in, q.n_out = n_out, q.row_bytes = (size_t)n_in / qa * cuda_q_block_bytes(type);
    q.xq = xq.data(), q.xd = xd.data(), q.out = out.data(), q.part = part.data(), q.ticket = ticket.data();
    me_mmvq(type, q, split);
    int ok = 1;
    for (unsigned tk : ticket) ok &= tk == 0;
    double worst = 0;
    std::vector<double> a(n_in);
    for (int e = 0; e < E && ok; e++)
        for (int r = start[e]; r < start[e + 1]; r++) {
            me_qround_ref(&xg[(size_t)r * n_in], n_in, qa, type == DT_MXFP4, a.data());
            for (int64_t o = 0; o < n_out; o++) {
                double s = bias[e][o], mag = fabs(s);
                for (int64_t i = 0; i < n_in; i++)
                    s += (double)m[e].dec[o * n_in + i] * a[i], mag += m[e].mag[o * n_in + i] * fabs(a[i]);
                double tol = me_gamma((double)n_in / 32 + 18) * mag + 1e-30, d = fabs(out[(size_t)r * n_out + o] - s);
                worst = fmax(worst, d / tol);
                ok &= d <= tol;
            }
        }
    char what[112], extra[48];
    snprintf(what, sizeof what, "grouped mmvq %s E %d tokens %d k %d %lld->%lld split %d", me_type_name(type), E, n_tok,
             k, (long long)n_in, (long long)n_out, split);
    snprintf(extra, sizeof extra, " (rows/expert <= %d, err/bound %.2f)", most, worst);
    me_report(what, ok, extra);
}

static void me_q8h(int64_t n)
{
    std::vector<float> x(n), want;
    for (int64_t i = 0; i < n; i++) x[i] = (i / 32) % 7 == 3 ? 0.0f : (float)exp(4 * me_unif()) * me_unif();
    want = x;
    me_q8h_ref(want.data(), n);
    me_launch(3, 1, 256, [&] { cuda__q8h_k(x.data(), n / 32); });
    int ok = memcmp(x.data(), want.data(), (size_t)n * 4) == 0;
    char what[64];
    snprintf(what, sizeof what, "q8h rounding of %lld values (MXFP4's activations)", (long long)n);
    me_report(what, ok, "");
}

/* The grouped matvec as MLA's per-head projection: group h reads x + h·x_goff + t·x_stride. */
static void me_heads(int type, int H, int T, int n_in, int n_out)
{
    int hx = n_in + 16, ho = n_out + 8; /* strides wider than the rows: the unread parts must stay */
    std::vector<me_mat> m(H);
    std::vector<const void *> wt(H);
    for (int h = 0; h < H; h++) m[h] = me_make(type, n_in, n_out, 0.1f), wt[h] = m[h].raw.data();
    std::vector<float> x((size_t)T * H * hx), out((size_t)T * H * ho, me_poison);
    for (auto &v : x) v = me_unif();
    cuda__moe_proj p;
    memset(&p, 0, sizeof p);
    p.w = wt.data(), p.n_groups = H, p.n_rows = T, p.n_in = n_in, p.n_out = n_out, p.row_bytes = m[0].row_bytes;
    p.x_goff = hx, p.x_stride = (int64_t)H * hx, p.o_goff = ho, p.o_stride = (int64_t)H * ho;
    me_gemv(type, p, x.data(), out.data());
    int ok = 1;
    std::vector<double> xd(n_in), dx(n_in, 0);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < n_in; i++) xd[i] = x[(size_t)t * H * hx + (size_t)h * hx + i];
            for (int o = 0; o < ho; o++) {
                float got = out[(size_t)t * H * ho + (size_t)h * ho + o];
                if (o >= n_out) {
                    ok &= got == me_poison;
                    continue;
                }
                double y, dy;
                me_row(m[h], o, xd.data(), dx.data(), 0, &y, &dy);
                ok &= fabs(got - y) <= dy;
            }
        }
    char what[96];
    snprintf(what, sizeof what, "per-head matvec %s heads %d tokens %d %d -> %d", me_type_name(type), H, T, n_in, n_out);
    me_report(what, ok, "");
}

/* ---- MLA --------------------------------------------------------------------------------- */

/* The host rotation (ops_emu.cc's): pair i of each head by pos · be_rope_freq, cos and sin in
 * double rounded to f32. */
static void me_rope_ref(float *x, int pos, const be_rope &r)
{
    int half = r.rope_dims / 2;
    float ms = be_rope_mscale(&r);
    for (int h = 0; h < r.n_heads; h++)
        for (int i = 0; i < half; i++) {
            double ang = (double)pos * be_rope_freq(&r, i, 1.0f);
            float c = (float)cos(ang) * ms, s = (float)sin(ang) * ms;
            int a = r.neox ? i : 2 * i, b = r.neox ? i + half : 2 * i + 1;
            float *xh = x + (size_t)h * r.head_dim;
            float x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * s;
            xh[b] = x0 * s + x1 * c;
        }
}

static void me_mla_prep(int T, int H, int nope, int rope, int kv_lora)
{
    int hq = nope + rope, hl = kv_lora + rope;
    std::vector<float> q((size_t)T * H * hq), kv((size_t)T * hl), norm(kv_lora);
    std::vector<float> ql((size_t)T * H * hl, me_poison), kl((size_t)T * hl, me_poison);
    std::vector<int32_t> pos(T);
    for (auto &v : q) v = me_unif();
    for (auto &v : kv) v = me_unif();
    for (auto &v : norm) v = 0.5f + me_unif();
    for (int t = 0; t < T; t++) pos[t] = me_int(0, 5000);
    be_rope r;
    memset(&r, 0, sizeof r);
    r.head_dim = rope, r.rope_dims = rope, r.base = 10000.0f, r.n_heads = H;
    cuda__mla_prep_args a;
    memset(&a, 0, sizeof a);
    a.q = q.data(), a.kv = kv.data(), a.norm = norm.data(), a.q_lat = ql.data(), a.k_lat = kl.data(), a.pos = pos.data();
    a.n_heads = H, a.nope = nope, a.rope = rope, a.kv_lora = kv_lora, a.eps = 1e-6f;
    a.rope_q = r, a.rope_k = r;
    a.rope_k.n_heads = 1;
    me_launch((unsigned)T, 1, 128, [&] { cuda__mla_prep_k(a); });
    int ok = 1;
    /* The norm: each thread's part, then shuffles and warps (as ops_emu's RMSNorm bound). */
    double tol = ((double)kv_lora / 128 + 16) * 6e-8;
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < kv_lora; i++) ss += (double)kv[(size_t)t * hl + i] * kv[(size_t)t * hl + i];
        double inv = 1 / sqrt(ss / kv_lora + 1e-6);
        for (int i = 0; i < kv_lora; i++) {
            double want = kv[(size_t)t * hl + i] * inv * norm[i];
            ok &= fabs(kl[(size_t)t * hl + i] - want) <= tol * fabs(want) + 1e-30;
        }
        std::vector<float> kr(&kv[(size_t)t * hl + kv_lora], &kv[(size_t)(t + 1) * hl]), qr((size_t)H * rope);
        be_rope rk = r;
        rk.n_heads = 1;
        me_rope_ref(kr.data(), pos[t], rk);
        for (int i = 0; i < rope; i++) ok &= fabs(kl[(size_t)t * hl + kv_lora + i] - kr[i]) <= 2.5e-7 * 2;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < rope; i++) qr[(size_t)h * rope + i] = q[((size_t)t * H + h) * hq + nope + i];
        me_rope_ref(qr.data(), pos[t], r);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < hl; i++) {
                float got = ql[((size_t)t * H + h) * hl + i];
                ok &= i < kv_lora ? got == me_poison : fabs(got - qr[(size_t)h * rope + i - kv_lora]) <= 5e-7;
            }
    }
    char what[96];
    snprintf(what, sizeof what, "mla prep tokens %d heads %d nope %d rope %d latent %d", T, H, nope, rope, kv_lora);
    me_report(what, ok, "");
}

/* The value the latent plane holds at (slot, e). */
static double me_kv_value(const std::vector<uint8_t> &arena, const cuda_kv_layout &l, int dtype, int32_t slot, int e)
{
    int64_t i = cuda_kv_slot_index(&l, 0, 0, slot, 0, e);
    if (dtype == KV_F32) return ((const float *)arena.data())[i];
    double d = cuda_kv_load_scale(&arena[cuda_kv_scale_index(&l, 0, 0, slot / l.block_size, 0, slot % l.block_size)]);
    return d * (dtype == KV_I8 ? (double)(int8_t)arena[i] : (double)kv_e4m3_decode(arena[i]));
}

/* n_sm > 0: the key partitions the backend would plan on that many SMs (split-K). */
static void me_mla_attn(int dtype, int n_seqs, int max_ctx, int max_new, int H, int kv_lora, int rope, int bs,
                        int n_sm = 0)
{
    const int D = kv_lora + rope;
    std::vector<int32_t> ctx(n_seqs), q_start(n_seqs + 1);
    int stride = (max_ctx + bs - 1) / bs, n_blocks = n_seqs * stride + 2;
    std::vector<int32_t> perm(n_blocks), bt((size_t)n_seqs * stride, 0);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) std::swap(perm[i], perm[me_int(0, i)]);
    int n = 0, kb = 0;
    for (int s = 0; s < n_seqs; s++) {
        ctx[s] = me_int(1, max_ctx);
        q_start[s] = n;
        n += std::min(ctx[s], me_int(1, max_new));
        for (int j = 0; j < (ctx[s] + bs - 1) / bs; j++) bt[(size_t)s * stride + j] = perm[kb++];
    }
    q_start[n_seqs] = n;
    kv_geom g = kv_geom_make(1, 1, D, bs, dtype);
    g.latent = kv_lora;
    cuda_kv_layout l = cuda_kv_layout_of(&g, n_blocks);
    std::vector<uint8_t> arena((size_t)cuda_kv_total_elems(&l) * kv_dtype_bytes(dtype));
    int n_slots = n_blocks * bs;
    if (dtype == KV_F32) {
        for (int64_t i = 0; i < cuda_kv_total_elems(&l); i++) ((float *)arena.data())[i] = me_unif();
    } else { /* through the store kernel, as the backend writes the one latent plane */
        std::vector<float> rows((size_t)n_slots * D);
        std::vector<int32_t> slots(n_slots);
        for (int s = 0; s < n_slots; s++) {
            slots[s] = s;
            float mag = (float)exp(2.0 * me_unif());
            for (int e = 0; e < D; e++) rows[(size_t)s * D + e] = mag * me_unif();
        }
        me_launch((unsigned)n_slots, 1, 32, [&] {
            const float *row = rows.data() + (size_t)blockIdx.x * D;
            if (dtype == KV_I8) cuda__store_q_row(row, (int8_t *)arena.data(), l, slots[blockIdx.x]);
            else cuda__store_q_row(row, (uint8_t *)arena.data(), l, slots[blockIdx.x]);
        });
    }
    std::vector<float> q((size_t)n * H * D), out(q.size(), me_poison);
    for (auto &v : q) v = me_unif() / 4;
    cuda__mla_attn_args a;
    memset(&a, 0, sizeof a);
    a.q = q.data(), a.out = out.data(), a.q_start = q_start.data(), a.ctx_len = ctx.data(), a.block_table = bt.data();
    a.n_seqs = n_seqs, a.bt_stride = stride, a.block_size = bs, a.n_heads = H, a.head_dim = D;
    a.tile_elems = (int32_t)cuda_kv_tile_elems(&l), a.scale = 1.0f / sqrtf(192.0f);
    a.splits = n_sm > 0 ? cuda__mla_splits(n, H, max_ctx, n_sm, &a.part_keys) : 1;
    std::vector<float> part(a.splits > 1 ? cuda__mla_part_floats(n, H, a.splits, D) : 1, me_poison);
    std::vector<int32_t> sem((size_t)n * cuda__mla_chunks(H), 0);
    a.part = part.data(), a.sem = sem.data();
    unsigned gx = (unsigned)(cuda__mla_chunks(H) * a.splits);
    if (dtype == KV_F32) me_launch(gx, (unsigned)n, CUDA_MLA_THREADS, [&] { cuda__mla_attn_k<float>(a, (const float *)arena.data()); });
    else if (dtype == KV_I8) me_launch(gx, (unsigned)n, CUDA_MLA_THREADS, [&] { cuda__mla_attn_k<int8_t>(a, (const int8_t *)arena.data()); });
    else me_launch(gx, (unsigned)n, CUDA_MLA_THREADS, [&] { cuda__mla_attn_k<uint8_t>(a, (const uint8_t *)arena.data()); });
    /* float64 over the values the arena holds. The bound: each f32 score is a sum of D products
     * (γ(D + 2) · Σ|q·k| · scale), which moves each probability by up to twice the largest score
     * error relatively; the online softmax and the weighted sums add γ(n + 2·TK) relatively. */
    int ok = 1;
    double worst = 0;
    for (int s = 0; s < n_seqs; s++)
        for (int t = q_start[s]; t < q_start[s + 1]; t++) {
            int nk = ctx[s] - (q_start[s + 1] - t) + 1;
            std::vector<std::vector<double>> kvv(nk, std::vector<double>(D));
            for (int j = 0; j < nk; j++) {
                int32_t slot = bt[(size_t)s * stride + j / bs] * bs + j % bs;
                for (int e = 0; e < D; e++) kvv[j][e] = me_kv_value(arena, l, dtype, slot, e);
            }
            for (int h = 0; h < H; h++) {
                const float *qh = &q[((size_t)t * H + h) * D];
                std::vector<double> sc(nk);
                double mx = -INFINITY, z = 0, es = 0;
                for (int j = 0; j < nk; j++) {
                    double d = 0, ad = 0;
                    for (int e = 0; e < D; e++) d += (double)(qh[e] * a.scale) * kvv[j][e], ad += fabs(qh[e] * a.scale * kvv[j][e]);
                    sc[j] = d, mx = fmax(mx, d), es = fmax(es, me_gamma(D + 2) * ad);
                }
                for (int j = 0; j < nk; j++) z += exp(sc[j] - mx);
                for (int e = 0; e < D; e++) {
                    double o = 0, oa = 0;
                    for (int j = 0; j < nk; j++) {
                        double p = exp(sc[j] - mx) / z;
                        o += p * kvv[j][e], oa += p * fabs(kvv[j][e]);
                    }
                    double tol = (2.2 * es + me_gamma(nk + 2 * CUDA_MLA_TK + 8)) * oa + 1e-30;
                    double d = fabs(out[((size_t)t * H + h) * D + e] - o);
                    worst = fmax(worst, d / tol);
                    if (!(d <= tol)) ok = 0;
                }
            }
        }
    for (int32_t c : sem) ok &= c == 0; /* the last partition resets its counter */
    char what[128], extra[64];
    snprintf(what, sizeof what, "mla attention %s seqs %d ctx<=%d new<=%d heads %d latent %d+%d block %d",
             kv_dtype_name(dtype), n_seqs, max_ctx, max_new, H, kv_lora, rope, bs);
    snprintf(extra, sizeof extra, " (tokens %d, splits %d, err/bound %.2f)", n, a.splits, worst);
    me_report(what, ok, extra);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    printf("MoE and MLA kernels under CPU emulation (seed %#llx)%s\n", (unsigned long long)me_rs, quick ? ", quick" : "");
    me_route(me_rule(8, 2, 1, 1, 1.0f, 0, 0), 9, 0, 0);         /* Qwen3-MoE: softmax, renormalised */
    me_route(me_rule(16, 4, 1, 0, 1.0f, 0, 0), 5, 0, 1);        /* Mixtral-like, ties: the lower index */
    me_route(me_rule(32, 4, 2, 1, 2.5f, 4, 2), 7, 1, 0);        /* DeepSeek-V3: sigmoid, bias, groups, scale */
    me_route(me_rule(32, 4, 3, 0, 1.0f, 0, 0), 6, 0, 0);        /* gpt-oss: softmax over the chosen */
    me_q8h(32 * 37);
    me_heads(DT_F32, 5, 3, 32, 40);
    me_heads(DT_Q8_0, 3, 9, 64, 20); /* more rows than one pass of CUDA_MOE_ROWS */
    const me_ffn_case ffn[] = {
        {DT_F32, 8, 2, 1, 64, 40, 0, 0},    /* decode */
        {DT_Q8_0, 8, 2, 11, 64, 96, 0, 0},  /* prefill: more rows per expert than a pass */
        {DT_MXFP4, 8, 4, 5, 64, 64, 1, 1},  /* gpt-oss: MXFP4, clamped SwiGLU, biases */
        {DT_MXFP4, 8, 2, 3, 2048, 64, 1, 1}, /* decode: gate and up split over 4 blocks a tile */
        {DT_Q6_K, 8, 2, 2, 1024, 512, 0, 0},
        {DT_Q4_K, 16, 2, 3, 256, 256, 0, 0}, /* a K-quant */
        {DT_F32, 32, 4, 20, 96, 32, 1, 1},
    };
    int n_ffn = quick ? 5 : (int)(sizeof ffn / sizeof ffn[0]);
    for (int i = 0; i < n_ffn; i++) me_ffn(ffn[i]);
    /* every type of the integer path: decode (split blocks per tile, some experts empty) and
     * prefill-sized groups (more than 8 rows of an expert: several passes) */
    const int qtypes[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_0, DT_IQ4_NL, DT_MXFP4,
                          DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS};
    for (int t : qtypes) {
        me_qgroup(t, 8, 6, 3, 2, 512, 40, 2);
        me_qgroup(t, 6, 3, 13, 2, 256, 24, 1);
    }
    me_qgroup(DT_MXFP4, 4, 4, 8, 4, 2048, 16, 8); /* 8 rows an expert, the deepest split */
    me_mla_prep(3, 5, 16, 8, 64);
    me_mla_attn(KV_F32, 3, 60, 20, 20, 64, 16, 16); /* mixed prefill + decode; a partial head chunk */
    me_mla_attn(KV_I8, 2, 50, 1, 16, 32, 8, 5);     /* int8 decode, odd block */
    me_mla_attn(KV_F32, 1, 900, 1, 20, 64, 16, 16, 16); /* one long decode split over the keys */
    me_mla_attn(KV_I8, 3, 600, 2, 16, 32, 8, 16, 8);    /* split-K, short sequences' empty partitions */
    if (!quick) {
        me_mla_prep(2, 16, 128, 64, 512);
        me_mla_attn(KV_FP8, 3, 40, 12, 8, 32, 16, 16);
        me_mla_attn(KV_F32, 1, 40, 1, 16, 512, 64, 16); /* DeepSeek's latent: 576 values */
        me_mla_attn(KV_FP8, 1, 700, 1, 16, 512, 64, 16, 132); /* its decode split over an H200's SMs */
    }
    printf("%d checks, %d failed\n", me_n, me_bad);
    return me_bad ? 1 : 0;
}
