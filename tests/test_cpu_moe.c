/*
 * test_cpu_moe.c — the CPU backend's mixture-of-experts FFN (cpu/moe.c), its grouped matmul
 * (cpu__matmul_grouped) and MLA's projections (cpu/mla.c), with the routing rule they share
 * (be_moe_route, engine/backend.h):
 *
 *  - be_moe_route against a float64 re-statement of llama.cpp's build_moe_ffn for every gating
 *    function, with a selection bias, expert groups, renormalisation and scale, and ties;
 *  - moe_ffn at every level equals, bit for bit, the same computation done expert by expert and
 *    token by token with the backend's own matmul (so grouping, gathering, the passes of a long
 *    prefill and the weighted sum change no bit), for F32, Q8_0 and MXFP4 experts, with biases and
 *    both activations; and for F32 it is within the f32 bound of a float64 reference;
 *  - an expert no token chose is not read: its weights are NaN and the output stays finite;
 *  - mla_qk and mla_out against float64 (the latent's norm, the decoupled RoPE at the batch's
 *    positions, the per-head absorbed projections), at every level.
 * Seeds are fixed and printed.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "engine/backend.h"
#include "model/dtype.h"
#include "model/gguf_write.h"
#include "tests/test_util.h"

static float tm_unif(uint64_t *r)
{
    return (float)((rng_splitmix64(r) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* ---- routing ------------------------------------------------------------------------------- */

/* llama.cpp's routing in float64 (selection ties to the lower index). */
static void tm_route_ref(const be_moe_rule *r, const float *lg, const float *bias, int *ids, double *w)
{
    int E = r->n_expert, k = r->n_used;
    double p[64], s[64], mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) mx = fmax(mx, lg[e]);
    for (int e = 0; e < E; e++) {
        p[e] = r->gating == 1 ? exp(lg[e] - mx) : r->gating == 2 ? 1 / (1 + exp(-(double)lg[e])) : lg[e];
        sum += p[e];
    }
    for (int e = 0; e < E; e++) {
        if (r->gating == 1) p[e] /= sum;
        s[e] = p[e] + (bias ? bias[e] : 0);
    }
    if (r->n_groups > 1) {
        int per = E / r->n_groups, keep[64] = {0};
        double gs[64];
        for (int g = 0; g < r->n_groups; g++) {
            double best[2] = {-INFINITY, -INFINITY};
            for (int e = g * per; e < (g + 1) * per; e++)
                if (s[e] > best[0]) best[1] = best[0], best[0] = s[e];
                else if (s[e] > best[1]) best[1] = s[e];
            gs[g] = best[0] + best[1];
        }
        for (int n = 0; n < r->n_group_used; n++) {
            int b = -1;
            for (int g = 0; g < r->n_groups; g++)
                if (!keep[g] && (b < 0 || gs[g] > gs[b])) b = g;
            keep[b] = 1;
        }
        for (int e = 0; e < E; e++)
            if (!keep[e / per]) s[e] = -INFINITY;
    }
    for (int j = 0; j < k; j++) {
        int b = 0;
        for (int e = 1; e < E; e++)
            if (s[e] > s[b]) b = e;
        ids[j] = b, w[j] = p[b], s[b] = -INFINITY;
    }
    if (r->gating == 3) {
        double m = -INFINITY, t = 0;
        for (int j = 0; j < k; j++) m = fmax(m, w[j]);
        for (int j = 0; j < k; j++) t += w[j] = exp(w[j] - m);
        for (int j = 0; j < k; j++) w[j] /= t;
    }
    if (r->norm) {
        double t = 0;
        for (int j = 0; j < k; j++) t += w[j];
        for (int j = 0; j < k; j++) w[j] /= fmax(t, 6.103515625e-5);
    }
    if (r->scale != 0 && r->scale != 1)
        for (int j = 0; j < k; j++) w[j] *= r->scale;
}

Test(cpu_moe, route_matches_the_definition)
{
    uint64_t seed = 0x20e7e, rng = seed;
    cr_log_info("seed %#llx", (unsigned long long)seed);
    const be_moe_rule rules[] = {
        {8, 2, 1, 1, 0, 0, 0},    {8, 2, 1, 0, 2.0f, 0, 0}, {16, 4, 2, 1, 2.5f, 0, 0}, {16, 4, 2, 1, 2.5f, 4, 2},
        {8, 2, 3, 0, 0, 0, 0},    {6, 1, 1, 1, 0, 0, 0},    {32, 8, 2, 0, 0, 8, 3},    {8, 8, 1, 1, 1.0f, 0, 0},
    };
    for (size_t ri = 0; ri < sizeof rules / sizeof rules[0]; ri++)
        for (int it = 0; it < 300; it++) {
            const be_moe_rule *r = &rules[ri];
            float lg[64], bias[64], w[64], scr[3 * 64];
            int32_t ids[64];
            int ref_ids[64];
            double ref_w[64];
            for (int e = 0; e < r->n_expert; e++) lg[e] = 3 * tm_unif(&rng), bias[e] = 0.1f * tm_unif(&rng);
            const float *b = ri % 2 ? bias : NULL;
            be_moe_route(r, lg, b, ids, w, scr);
            tm_route_ref(r, lg, b, ref_ids, ref_w);
            for (int j = 0; j < r->n_used; j++) {
                cr_assert_eq(ids[j], ref_ids[j], "rule %zu it %d: choice %d is expert %d, want %d", ri, it, j, ids[j],
                             ref_ids[j]);
                cr_assert(fabs(w[j] - ref_w[j]) <= 1e-6 * fmax(1, fabs(ref_w[j])), "rule %zu it %d: weight %d %.9g vs %.9g",
                          ri, it, j, (double)w[j], ref_w[j]);
            }
        }
    /* ties go to the lower index; a dropped group's experts are never chosen */
    be_moe_rule r = {4, 2, 1, 1, 0, 0, 0};
    float lg[8] = {1, 1, 1, 1}, w[8], scr[32];
    int32_t ids[8];
    be_moe_route(&r, lg, NULL, ids, w, scr);
    cr_assert(ids[0] == 0 && ids[1] == 1 && w[0] == 0.5f && w[1] == 0.5f);
    be_moe_rule g = {8, 2, 2, 0, 0, 4, 1};
    float lg2[8] = {5, -5, 1, 1, 0, 0, 0, 0}; /* group 1 (experts 2, 3) sums highest: expert 0 is out */
    be_moe_route(&g, lg2, NULL, ids, w, scr);
    cr_assert(ids[0] == 2 && ids[1] == 3, "grouped top-k chose %d %d", ids[0], ids[1]);
}

/* ---- the experts ---------------------------------------------------------------------------- */

typedef struct tm_experts {
    int E, dim, ff, type;
    uint8_t *data[3];  /* gate, up, down in the file's layout: [E][ff][dim], [E][ff][dim], [E][dim][ff] */
    float *bias[3];    /* [E][ff], [E][ff], [E][dim] or NULL */
    be_weight *w;      /* [6][E] uploaded: gate, up, down, then the biases */
    be_moe m;
} tm_experts;

/* Random experts of type (rows quantised from normal-ish values), biases when biased. */
static void tm_make(tm_experts *x, backend *be, int E, int dim, int ff, int type, int biased, uint64_t *rng)
{
    memset(x, 0, sizeof *x);
    x->E = E, x->dim = dim, x->ff = ff, x->type = type;
    int n_in[3] = {dim, dim, ff}, n_out[3] = {ff, ff, dim};
    x->w = calloc((size_t)6 * E, sizeof *x->w);
    for (int k = 0; k < 3; k++) {
        size_t rb = dt_row_bytes(type, n_in[k]);
        x->data[k] = malloc(rb * (size_t)n_out[k] * E);
        float *row = malloc((size_t)n_in[k] * sizeof *row);
        for (int64_t r = 0; r < (int64_t)n_out[k] * E; r++) {
            for (int i = 0; i < n_in[k]; i++) row[i] = 0.3f * tm_unif(rng);
            if (type == DT_MXFP4) { /* random blocks: the quantiser only writes F32/F16/BF16/Q8_0 */
                tu_random_blocks(DT_MXFP4, n_in[k] / 32, rng, x->data[k] + (size_t)r * rb);
                continue;
            }
            gguf_quantize_row(type, row, x->data[k] + (size_t)r * rb, n_in[k]);
        }
        free(row);
        if (biased) {
            x->bias[k] = malloc((size_t)n_out[k] * E * sizeof(float));
            for (int i = 0; i < n_out[k] * E; i++) x->bias[k][i] = 0.5f * tm_unif(rng);
        }
        for (int e = 0; e < E; e++) {
            model_tensor t = {.name = "w", .type = type, .ne = {n_in[k], n_out[k]}, .row_bytes = rb,
                              .data = x->data[k] + rb * (size_t)n_out[k] * e};
            cr_assert_eq(be->ops->weight_upload(be, &t, &x->w[k * E + e]), 0);
            if (biased) {
                model_tensor b = {.name = "b", .type = DT_F32, .ne = {n_out[k], 1}, .row_bytes = (size_t)n_out[k] * 4,
                                  .data = x->bias[k] + (size_t)n_out[k] * e};
                cr_assert_eq(be->ops->weight_upload(be, &b, &x->w[(3 + k) * E + e]), 0);
            }
        }
    }
    x->m.gate = x->w, x->m.up = x->w + E, x->m.down = x->w + 2 * E;
    if (biased) x->m.b_gate = x->w + 3 * E, x->m.b_up = x->w + 4 * E, x->m.b_down = x->w + 5 * E;
    x->m.alpha = 1.702f, x->m.limit = 7.0f;
}

static void tm_free(tm_experts *x, backend *be)
{
    for (int i = 0; i < 6 * x->E; i++)
        if (x->w[i].data) be->ops->weight_free(be, &x->w[i]);
    free(x->w);
    for (int k = 0; k < 3; k++) free(x->data[k]), free(x->bias[k]);
}

/* The same FFN expert by expert and token by token with the backend's matmul: what moe_ffn must
 * equal bit for bit. */
static void tm_naive(backend *be, const tm_experts *x, const float *in, int n, const float *logits, float *out)
{
    const be_moe *m = &x->m;
    int k = m->rule.n_used, dim = x->dim, ff = x->ff;
    float *g = malloc((size_t)ff * 4), *u = malloc((size_t)ff * 4), *y = malloc((size_t)dim * 4), w[64], scr[3 * 64];
    int32_t ids[64];
    for (int t = 0; t < n; t++) {
        be_moe_route(&m->rule, logits + (size_t)t * m->rule.n_expert, NULL, ids, w, scr);
        float *o = out + (size_t)t * dim;
        for (int j = 0; j < k; j++) {
            int e = ids[j];
            be->ops->matmul(be, in + (size_t)t * dim, 1, &m->gate[e], m->b_gate ? &m->b_gate[e] : NULL, g);
            be->ops->matmul(be, in + (size_t)t * dim, 1, &m->up[e], m->b_up ? &m->b_up[e] : NULL, u);
            if (m->act == MODEL_ACT_SWIGLU_OAI)
                for (int i = 0; i < ff; i++) g[i] = be_swiglu_oai(g[i], u[i], m->alpha, m->limit);
            else
                be->ops->silu_mul(be, g, u, ff);
            be->ops->matmul(be, g, 1, &m->down[e], m->b_down ? &m->b_down[e] : NULL, y);
            for (int i = 0; i < dim; i++) o[i] = j ? o[i] + y[i] * w[j] : y[i] * w[j];
        }
    }
    free(g), free(u), free(y);
}

/* moe_ffn of n tokens equals tm_naive bit for bit. */
static void tm_check_equal(backend *be, tm_experts *x, int n, uint64_t *rng, const char *what)
{
    int dim = x->dim, E = x->E;
    float *in = malloc((size_t)n * dim * 4), *lg = malloc((size_t)n * E * 4);
    float *got = malloc((size_t)n * dim * 4), *want = malloc((size_t)n * dim * 4);
    for (int i = 0; i < n * dim; i++) in[i] = tm_unif(rng);
    for (int i = 0; i < n * E; i++) lg[i] = 2 * tm_unif(rng);
    be_batch b = {.n_tokens = n, .n_seqs = 0, .n_kv = 1};
    cr_assert_eq(be->ops->begin(be, &b), 0);
    for (int i = 0; i < n * dim; i++) got[i] = NAN;
    be->ops->moe_ffn(be, in, n, lg, &x->m, got);
    tm_naive(be, x, in, n, lg, want);
    for (int i = 0; i < n * dim; i++)
        cr_assert(!memcmp(&got[i], &want[i], sizeof got[i]), "%s: token %d dim %d: %.9g vs expert by expert %.9g", what,
                  i / dim, i % dim, (double)got[i], (double)want[i]);
    free(in), free(lg), free(got), free(want);
}

Test(cpu_moe, grouped_equals_expert_by_expert_every_type_and_level, .timeout = 120)
{
    uint64_t seed = 0x3e7b5, rng = seed;
    cr_log_info("seed %#llx", (unsigned long long)seed);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    const int types[] = {DT_F32, DT_Q8_0, DT_MXFP4, DT_F16};
    for (int li = 0; li < n_lv; li++)
        for (int ti = 0; ti < 4; ti++) {
            backend *be = tu_cpu_backend(&lv[li], 1 + (li + ti) % 3);
            tm_experts x;
            tm_make(&x, be, 8, 64, 96, types[ti], ti % 2, &rng);
            x.m.rule = (be_moe_rule){8, 3, 1, 1, 0, 0, 0};
            x.m.act = ti % 2 ? MODEL_ACT_SWIGLU_OAI : MODEL_ACT_SILU;
            char what[96];
            snprintf(what, sizeof what, "%s %s", lv[li].name, dt_name(types[ti]));
            tm_check_equal(be, &x, 1, &rng, what);  /* decode: 3 experts of 8, one row each */
            tm_check_equal(be, &x, 37, &rng, what); /* a prefill chunk: rows grouped by expert */
            tm_free(&x, be);
            be_destroy(be);
        }
}

/* A prefill longer than one pass (4096 routed rows): 1100 tokens × 4 experts. */
Test(cpu_moe, long_prefill_in_passes, .timeout = 120)
{
    uint64_t rng = 0x9a55e5;
    backend *be = cpu_backend_create(2);
    tm_experts x;
    tm_make(&x, be, 6, 32, 32, DT_F32, 1, &rng);
    x.m.rule = (be_moe_rule){6, 4, 3, 0, 0, 0, 0};
    x.m.act = MODEL_ACT_SWIGLU_OAI;
    tm_check_equal(be, &x, 1100, &rng, "1100 tokens");
    tm_free(&x, be);
    be_destroy(be);
}

/* Against float64: the F32 experts' result within the f32 reductions' bound (gate/up over dim,
 * down over ff, the k-term sum), with a selection bias and a scale. */
Test(cpu_moe, f32_experts_within_the_f32_bound)
{
    uint64_t seed = 0xf64, rng = seed;
    backend *be = cpu_backend_create(2);
    tm_experts x;
    int E = 8, dim = 64, ff = 48, n = 9, k = 2;
    tm_make(&x, be, E, dim, ff, DT_F32, 1, &rng);
    float selb[8];
    for (int e = 0; e < E; e++) selb[e] = 0.05f * tm_unif(&rng);
    be_weight sb = {.type = DT_F32, .n_in = E, .n_out = 1, .data = selb};
    x.m.rule = (be_moe_rule){E, k, 2, 0, 1.5f, 0, 0};
    x.m.act = MODEL_ACT_SILU;
    x.m.sel_bias = &sb;
    float in[9 * 64], lg[9 * 8], got[9 * 64];
    for (int i = 0; i < n * dim; i++) in[i] = tm_unif(&rng);
    for (int i = 0; i < n * E; i++) lg[i] = 2 * tm_unif(&rng);
    be_batch b = {.n_tokens = n, .n_kv = 1};
    cr_assert_eq(be->ops->begin(be, &b), 0);
    be->ops->moe_ffn(be, in, n, lg, &x.m, got);
    const float *G = (const float *)x.data[0], *U = (const float *)x.data[1], *D = (const float *)x.data[2];
    for (int t = 0; t < n; t++) {
        int ids[8];
        double w[8];
        tm_route_ref(&x.m.rule, lg + t * E, selb, ids, w);
        for (int o = 0; o < dim; o++) {
            double r = 0, mag = 0;
            for (int j = 0; j < k; j++) {
                int e = ids[j];
                double y = x.bias[2][e * dim + o], ym = fabs(y);
                for (int f = 0; f < ff; f++) {
                    double g = x.bias[0][e * ff + f], u = x.bias[1][e * ff + f], gm = fabs(g), um = fabs(u);
                    for (int i = 0; i < dim; i++) {
                        g += (double)G[((size_t)e * ff + f) * dim + i] * in[t * dim + i];
                        u += (double)U[((size_t)e * ff + f) * dim + i] * in[t * dim + i];
                        gm += fabs((double)G[((size_t)e * ff + f) * dim + i] * in[t * dim + i]);
                        um += fabs((double)U[((size_t)e * ff + f) * dim + i] * in[t * dim + i]);
                    }
                    double a = g / (1 + exp(-g)) * u, d = D[((size_t)e * dim + o) * ff + f];
                    y += d * a;
                    ym += fabs(d) * (gm * fabs(u) + um * fabs(g) + fabs(a));
                }
                r += w[j] * y;
                mag += fabs(w[j]) * ym;
            }
            double tol = 4 * (dim + ff + 8) * 0x1p-24 * mag;
            cr_assert(fabs(got[t * dim + o] - r) <= tol, "seed %#llx token %d out %d: %.9g vs %.9g (tol %.3g)",
                      (unsigned long long)seed, t, o, (double)got[t * dim + o], r, tol);
        }
    }
    tm_free(&x, be);
    be_destroy(be);
}

/* The experts no token chose are never read: their weights are NaN, the output finite. */
Test(cpu_moe, unchosen_experts_are_not_read)
{
    uint64_t rng = 0x5ca1e;
    backend *be = cpu_backend_create(2);
    tm_experts x;
    int E = 8, dim = 64, n = 20;
    tm_make(&x, be, E, dim, 32, DT_F32, 0, &rng);
    /* experts 5, 6, 7 get NaN weights (the packed copies too: re-upload) and logits far below */
    for (int k = 0; k < 3; k++) {
        int n_in = k < 2 ? dim : 32, n_out = k < 2 ? 32 : dim;
        for (int e = 5; e < E; e++) {
            float *d = (float *)x.data[k] + (size_t)n_in * n_out * e;
            for (int i = 0; i < n_in * n_out; i++) d[i] = NAN;
            be->ops->weight_free(be, &x.w[k * E + e]);
            model_tensor t = {.name = "w", .type = DT_F32, .ne = {n_in, n_out}, .row_bytes = (size_t)n_in * 4, .data = d};
            cr_assert_eq(be->ops->weight_upload(be, &t, &x.w[k * E + e]), 0);
        }
    }
    x.m.rule = (be_moe_rule){E, 2, 1, 1, 0, 0, 0};
    x.m.act = MODEL_ACT_SILU;
    float in[20 * 64], lg[20 * 8], got[20 * 64];
    for (int i = 0; i < n * dim; i++) in[i] = tm_unif(&rng);
    for (int t = 0; t < n; t++)
        for (int e = 0; e < E; e++) lg[t * E + e] = e >= 5 ? -50.0f : tm_unif(&rng);
    be_batch b = {.n_tokens = n, .n_kv = 1};
    cr_assert_eq(be->ops->begin(be, &b), 0);
    be->ops->moe_ffn(be, in, n, lg, &x.m, got);
    for (int i = 0; i < n * dim; i++) cr_assert(isfinite(got[i]), "output %d is %g: an unchosen expert was read", i, got[i]);
    tm_free(&x, be);
    be_destroy(be);
}

/* ---- MLA's projections -------------------------------------------------------------------- */

/* mla_qk and mla_out against float64 at every level: T tokens at scattered positions, H heads. */
Test(cpu_moe, mla_projections_against_float64)
{
    enum { T = 5, H = 3, NOPE = 16, RP = 8, R = 32, V = 12, hq = NOPE + RP, hl = R + RP };
    uint64_t seed = 0x3a1a, rng = seed;
    static float kb[H][R * NOPE], vb[H][V * R], norm[R], q[T * H * hq], kv[T * hl], ql[T * H * hl], kl[T * hl];
    static float o[T * H * hl], out[T * H * V];
    int32_t pos[T] = {0, 7, 100, 3, 2047};
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < R * NOPE; i++) kb[h][i] = tm_unif(&rng);
        for (int i = 0; i < V * R; i++) vb[h][i] = tm_unif(&rng);
    }
    for (int i = 0; i < R; i++) norm[i] = 1 + 0.3f * tm_unif(&rng);
    for (int i = 0; i < T * H * hq; i++) q[i] = tm_unif(&rng);
    for (int i = 0; i < T * hl; i++) kv[i] = 2 * tm_unif(&rng);
    for (int i = 0; i < T * H * hl; i++) o[i] = tm_unif(&rng);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++) {
        backend *be = tu_cpu_backend(&lv[li], 2);
        be_weight wk[H], wv[H], wn;
        for (int h = 0; h < H; h++) {
            model_tensor a = {.name = "k", .type = DT_F32, .ne = {NOPE, R}, .row_bytes = NOPE * 4, .data = kb[h]};
            model_tensor b = {.name = "v", .type = DT_F32, .ne = {R, V}, .row_bytes = R * 4, .data = vb[h]};
            cr_assert_eq(be->ops->weight_upload(be, &a, &wk[h]), 0);
            cr_assert_eq(be->ops->weight_upload(be, &b, &wv[h]), 0);
        }
        model_tensor nt = {.name = "n", .type = DT_F32, .ne = {R, 1}, .row_bytes = R * 4, .data = norm};
        cr_assert_eq(be->ops->weight_upload(be, &nt, &wn), 0);
        be_rope rope = {.n_heads = H, .head_dim = RP, .rope_dims = RP, .base = 10000.0f, .neox = 0};
        be_mla m = {.n_heads = H, .qk_nope = NOPE, .rope = RP, .kv_lora = R, .v_head = V, .eps = 1e-6f, .kv_norm = &wn,
                    .k_b = wk, .v_b = wv, .rope_q = rope, .rope_k = rope};
        m.rope_k.n_heads = 1;
        be_batch b = {.n_tokens = T, .positions = pos, .n_kv = 1};
        cr_assert_eq(be->ops->begin(be, &b), 0);
        for (int i = 0; i < T * H * hl; i++) ql[i] = NAN;
        for (int i = 0; i < T * hl; i++) kl[i] = NAN;
        be->ops->mla_qk(be, q, kv, &m, ql, kl);
        be->ops->mla_out(be, o, &m, out);
        for (int t = 0; t < T; t++) {
            double ss = 0;
            for (int i = 0; i < R; i++) ss += (double)kv[t * hl + i] * kv[t * hl + i];
            double inv = 1 / sqrt(ss / R + 1e-6);
            for (int i = 0; i < R; i++) { /* the normed latent */
                double want = kv[t * hl + i] * inv * norm[i];
                cr_assert(fabs(kl[t * hl + i] - want) <= 1e-5 * (fabs(want) + 1), "%s token %d latent %d", lv[li].name, t, i);
            }
            for (int pi = 0; pi < RP / 2; pi++) /* the rotated key part and every head's rotated query part */
                for (int h = -1; h < H; h++) {
                    const float *src = h < 0 ? kv + t * hl + R : q + (t * H + h) * hq + NOPE;
                    const float *got = h < 0 ? kl + t * hl + R : ql + (t * H + h) * hl + R;
                    double th = pos[t] * pow(10000.0, -2.0 * pi / RP), c = cos(th), s = sin(th);
                    double a = src[2 * pi], bb = src[2 * pi + 1];
                    cr_assert(fabs(got[2 * pi] - (a * c - bb * s)) <= 2e-5 && fabs(got[2 * pi + 1] - (a * s + bb * c)) <= 2e-5,
                              "%s token %d head %d pair %d", lv[li].name, t, h, pi);
                }
            for (int h = 0; h < H; h++)
                for (int r = 0; r < R; r++) { /* q's latent image k_b · q_nope */
                    double want = 0, mag = 0;
                    for (int j = 0; j < NOPE; j++) {
                        want += (double)kb[h][r * NOPE + j] * q[(t * H + h) * hq + j];
                        mag += fabs((double)kb[h][r * NOPE + j] * q[(t * H + h) * hq + j]);
                    }
                    cr_assert(fabs(ql[(t * H + h) * hl + r] - want) <= 2 * NOPE * 0x1p-24 * mag + 1e-30, "%s q_lat", lv[li].name);
                }
            for (int h = 0; h < H; h++)
                for (int v = 0; v < V; v++) { /* v_b · o's latent part */
                    double want = 0, mag = 0;
                    for (int r = 0; r < R; r++) {
                        want += (double)vb[h][v * R + r] * o[(t * H + h) * hl + r];
                        mag += fabs((double)vb[h][v * R + r] * o[(t * H + h) * hl + r]);
                    }
                    cr_assert(fabs(out[(t * H + h) * V + v] - want) <= 2 * R * 0x1p-24 * mag + 1e-30, "%s mla_out", lv[li].name);
                }
        }
        for (int h = 0; h < H; h++) be->ops->weight_free(be, &wk[h]), be->ops->weight_free(be, &wv[h]);
        be->ops->weight_free(be, &wn);
        be_destroy(be);
    }
    cr_log_info("seed %#llx", (unsigned long long)seed);
}
