/*
 * test_sampler.c — the sampling pipeline on small known distributions: greedy ties, each filter,
 * penalties, bias, min_tokens, logprobs against a double computation, seeds, and the empirical
 * distribution of temperature sampling against the softmax (chi-square bound, fixed seed).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/sampler.h"

/* Samples n times from logits (copied each time) and counts tokens into counts[n_vocab]. */
static void tsm_histogram(const smp_params *p, uint64_t seed, const float *logits, int n_vocab,
                          int n, int *counts)
{
    smp_rng r;
    smp_rng_seed(&r, seed);
    float buf[64];
    memset(counts, 0, (size_t)n_vocab * sizeof *counts);
    for (int i = 0; i < n; i++) {
        memcpy(buf, logits, (size_t)n_vocab * sizeof *buf);
        smp_result res;
        smp_sample(p, &r, buf, n_vocab, NULL, NULL, 0, &res);
        cr_assert(res.token >= 0 && res.token < n_vocab);
        counts[res.token]++;
    }
}

/* logits whose softmax is exactly probs (log of the probabilities). */
static void tsm_from_probs(const double *probs, int n, float *logits)
{
    for (int i = 0; i < n; i++)
        logits[i] = (float)log(probs[i]);
}

Test(sampler, rng_known_answers)
{
    /* splitmix64's first output from state 0 is a published constant. */
    uint64_t st = 0;
    cr_assert_eq(rng_splitmix64(&st), 0xe220a8397b1dcdafull);
    /* Philox-4x32-10: Random123's known-answer vectors (kat_vectors, philox4x32 10 rounds). */
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int k = 0; k < 3; k++) {
        uint32_t o[4];
        rng_philox4x32(ctr[k], key[k], o);
        for (int i = 0; i < 4; i++) cr_assert_eq(o[i], want[k][i], "vector %d word %d: %08x", k, i, o[i]);
    }
}

/* A draw is a pure function of (key, position, draw, stream), each of which changes it;
 * draws are uniform (chi-square over 16 bins, 15 degrees of freedom, p = 0.001: 37.7). */
Test(sampler, rng_draws_keyed_and_uniform)
{
    double u = rng_draw_uniform(7, 100, 0, RNG_STREAM_SAMPLE);
    cr_assert(u >= 0.0 && u < 1.0);
    cr_assert_eq(u, rng_draw_uniform(7, 100, 0, RNG_STREAM_SAMPLE));
    cr_assert_neq(u, rng_draw_uniform(8, 100, 0, RNG_STREAM_SAMPLE));
    cr_assert_neq(u, rng_draw_uniform(7ull | 1ull << 40, 100, 0, RNG_STREAM_SAMPLE), "the key's high word counts");
    cr_assert_neq(u, rng_draw_uniform(7, 101, 0, RNG_STREAM_SAMPLE));
    cr_assert_neq(u, rng_draw_uniform(7, 100, 1, RNG_STREAM_SAMPLE));
    cr_assert_neq(u, rng_draw_uniform(7, 100, 0, 1));
    enum { N = 160000, B = 16 };
    int c[B] = {0};
    for (int i = 0; i < N; i++) {
        double v = rng_draw_uniform(12345 + (uint64_t)(i & 3), (uint32_t)(i >> 2), 0, RNG_STREAM_SAMPLE);
        cr_assert(v >= 0.0 && v < 1.0);
        c[(int)(v * B)]++;
    }
    double chi2 = 0;
    for (int b = 0; b < B; b++) chi2 += (c[b] - N / B) * (double)(c[b] - N / B) / (N / B);
    cr_assert_lt(chi2, 37.7, "chi-square %f", chi2);
}

Test(sampler, greedy_ties_lowest_id)
{
    smp_params p;
    smp_params_default(&p);
    p.temperature = 0.0f;
    float l[6] = {1.0f, 3.0f, NAN, 3.0f, 2.0f, 3.0f};
    smp_rng r;
    smp_rng_seed(&r, 1);
    smp_result res;
    smp_sample(&p, &r, l, 6, NULL, NULL, 0, &res);
    cr_assert_eq(res.token, 1);
    float l2[3] = {NAN, -1.0f, -1.0f};
    smp_sample(&p, &r, l2, 3, NULL, NULL, 0, &res);
    cr_assert_eq(res.token, 1);
}

Test(sampler, top_k_top_p_min_p)
{
    const double probs[5] = {0.4, 0.3, 0.15, 0.1, 0.05};
    float l[5];
    tsm_from_probs(probs, 5, l);
    int c[5];
    smp_params p;
    const int n = 4000;

    smp_params_default(&p);
    p.top_k = 2;
    tsm_histogram(&p, 7, l, 5, n, c);
    cr_assert(c[0] > 0 && c[1] > 0 && c[2] + c[3] + c[4] == 0, "top_k=2: %d %d %d", c[0], c[1],
              c[2]);
    cr_assert(fabs(c[0] / (double)n - 4.0 / 7.0) < 0.04, "top_k renormalises: %d", c[0]);

    smp_params_default(&p);
    p.top_p = 0.69f; /* 0.4 + 0.3 reaches it */
    tsm_histogram(&p, 7, l, 5, n, c);
    cr_assert(c[0] > 0 && c[1] > 0 && c[2] + c[3] + c[4] == 0);
    p.top_p = 0.71f; /* needs the third */
    tsm_histogram(&p, 7, l, 5, n, c);
    cr_assert(c[2] > 0 && c[3] + c[4] == 0);
    p.top_p = 0.1f; /* the best alone */
    tsm_histogram(&p, 7, l, 5, n, c);
    cr_assert_eq(c[0], n);

    smp_params_default(&p);
    p.min_p = 0.3f; /* keep p ≥ 0.12 */
    tsm_histogram(&p, 7, l, 5, n, c);
    cr_assert(c[2] > 0 && c[3] + c[4] == 0);
    p.min_p = 0.8f; /* keep p ≥ 0.32 */
    tsm_histogram(&p, 7, l, 5, n, c);
    cr_assert_eq(c[0], n);

    /* combined: top_k 4 then top_p 0.8 of the renormalised 0.95 (0.4+0.3 < 0.76 ≤ 0.85) */
    smp_params_default(&p);
    p.top_k = 4;
    p.top_p = 0.8f;
    tsm_histogram(&p, 7, l, 5, n, c);
    cr_assert(c[2] > 0 && c[3] + c[4] == 0);

    /* temperature sharpens: at 0.25, p0/p1 = (4/3)^4 */
    smp_params_default(&p);
    p.temperature = 0.25f;
    tsm_histogram(&p, 9, l, 5, 20000, c);
    double r01 = (double)c[0] / c[1];
    cr_assert(fabs(r01 - pow(4.0 / 3.0, 4)) < 0.25, "ratio %f", r01);
}

Test(sampler, top_p_large_vocab_matches_full_sort)
{
    /* A long tail exercises the thresholded partial sort: compare with a tail-free run. */
    enum { N = 3000 };
    static float l[N];
    for (int i = 0; i < N; i++)
        l[i] = -20.0f - (float)(i % 17);
    l[100] = 0.0f;
    l[2000] = -0.5f;
    l[7] = -1.0f;
    smp_params p;
    smp_params_default(&p);
    p.top_p = 0.9f;
    smp_rng r;
    smp_rng_seed(&r, 3);
    int seen[3] = {0};
    static float buf[N];
    for (int it = 0; it < 2000; it++) {
        memcpy(buf, l, sizeof l);
        smp_result res;
        smp_sample(&p, &r, buf, N, NULL, NULL, 0, &res);
        cr_assert(res.token == 100 || res.token == 2000 || res.token == 7, "token %d", res.token);
        seen[res.token == 100 ? 0 : res.token == 2000 ? 1 : 2]++;
    }
    /* probs ∝ 1, 0.607, 0.368: cumulative 0.50, 0.81 < 0.9 → all three kept */
    cr_assert(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
}

Test(sampler, same_seed_same_tokens)
{
    float l[16];
    for (int i = 0; i < 16; i++)
        l[i] = (float)sin(i * 1.7) * 2.0f;
    smp_params p;
    smp_params_default(&p);
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    int32_t a[50], b[50], c[50];
    uint64_t seeds[3] = {1234, 1234, 1235};
    int32_t *outs[3] = {a, b, c};
    for (int s = 0; s < 3; s++) {
        smp_rng r;
        smp_rng_seed(&r, seeds[s]);
        for (int i = 0; i < 50; i++) {
            float buf[16];
            memcpy(buf, l, sizeof buf);
            smp_result res;
            smp_sample(&p, &r, buf, 16, NULL, NULL, 0, &res);
            outs[s][i] = res.token;
        }
    }
    cr_assert_arr_eq(a, b, sizeof a);
    cr_assert(memcmp(a, c, sizeof a) != 0, "different seeds should differ somewhere in 50 draws");
}

Test(sampler, penalties_bias_min_tokens)
{
    smp_params p;
    smp_params_default(&p);
    p.temperature = 0.0f;
    smp_rng r;
    smp_rng_seed(&r, 1);
    smp_result res;

    /* repetition (HF): prompt [0 0 1], output [2]; each distinct token once */
    p.repetition_penalty = 2.0f;
    int32_t prompt[3] = {0, 0, 1}, output[3] = {2, 2, 0};
    smp_history h = {prompt, 3, output, 1};
    float l[4] = {2.0f, -2.0f, 1.0f, 1.5f};
    smp_sample(&p, &r, l, 4, &h, NULL, 0, &res);
    cr_assert_float_eq(l[0], 1.0f, 1e-6);
    cr_assert_float_eq(l[1], -4.0f, 1e-6);
    cr_assert_float_eq(l[2], 0.5f, 1e-6);
    cr_assert_float_eq(l[3], 1.5f, 1e-6);
    cr_assert_eq(res.token, 3);

    /* presence / frequency (OpenAI) on output tokens only: [2 2 0] */
    smp_params_default(&p);
    p.temperature = 0.0f;
    p.presence_penalty = 1.0f;
    p.frequency_penalty = 0.5f;
    h = (smp_history){prompt, 3, output, 3};
    float m[4] = {2.0f, -2.0f, 1.0f, 1.5f};
    smp_sample(&p, &r, m, 4, &h, NULL, 0, &res);
    cr_assert_float_eq(m[0], 0.5f, 1e-6);  /* 2 - 0.5 - 1 */
    cr_assert_float_eq(m[1], -2.0f, 1e-6); /* prompt only: untouched */
    cr_assert_float_eq(m[2], -1.0f, 1e-6); /* 1 - 2×0.5 - 1 */
    cr_assert_eq(res.token, 3);

    /* logit_bias */
    smp_params_default(&p);
    p.temperature = 0.0f;
    int32_t bid[2] = {1, 99};
    float bval[2] = {10.0f, 5.0f};
    p.n_logit_bias = 2;
    p.bias_ids = bid;
    p.bias_vals = bval;
    float b[4] = {2.0f, -2.0f, 1.0f, 1.5f};
    smp_sample(&p, &r, b, 4, NULL, NULL, 0, &res);
    cr_assert_eq(res.token, 1);

    /* min_tokens bans eog ids until enough output exists, under sampling too */
    smp_params_default(&p);
    p.min_tokens = 2;
    int32_t eog[1] = {0};
    for (int n_out = 0; n_out < 3; n_out++) {
        h = (smp_history){prompt, 3, output, n_out};
        int hits = 0;
        for (int it = 0; it < 200; it++) {
            float e[4] = {5.0f, 0.0f, 0.0f, 0.0f};
            smp_sample(&p, &r, e, 4, &h, eog, 1, &res);
            hits += res.token == 0;
        }
        if (n_out < 2)
            cr_assert_eq(hits, 0, "eog sampled with %d outputs", n_out);
        else
            cr_assert(hits > 150);
    }
}

Test(sampler, logprobs_raw_distribution)
{
    enum { N = 37 };
    float l[N], orig[N];
    for (int i = 0; i < N; i++)
        orig[i] = (float)cos(i * 0.77) * 3.0f + (i == 5 ? 8.0f : 0.0f);
    orig[20] = orig[21]; /* a tie in the top list */
    double mx = -1e300, s = 0.0;
    for (int i = 0; i < N; i++)
        mx = fmax(mx, orig[i]);
    for (int i = 0; i < N; i++)
        s += exp(orig[i] - mx);
    double lse = mx + log(s);

    smp_params p;
    smp_params_default(&p);
    p.temperature = 0.0f;
    p.n_logprobs = 5;
    p.repetition_penalty = 3.0f; /* must not affect the reported logprobs */
    int32_t prompt[1] = {5};
    smp_history h = {prompt, 1, NULL, 0};
    memcpy(l, orig, sizeof l);
    smp_rng r;
    smp_rng_seed(&r, 1);
    smp_result res;
    smp_sample(&p, &r, l, N, &h, NULL, 0, &res);
    cr_assert_eq(res.n_top, 5);
    cr_assert_eq(res.top_ids[0], 5);
    cr_assert_float_eq(res.logprob, orig[res.token] - lse, 1e-5);
    for (int j = 0; j < 5; j++) {
        cr_assert_float_eq(res.top_logprobs[j], orig[res.top_ids[j]] - lse, 1e-5);
        if (j) {
            float a = orig[res.top_ids[j - 1]], b = orig[res.top_ids[j]];
            cr_assert(a > b || (a == b && res.top_ids[j - 1] < res.top_ids[j]));
        }
    }
    /* nothing outside the list beats its last entry */
    for (int i = 0; i < N; i++) {
        int in = 0;
        for (int j = 0; j < 5; j++)
            in |= res.top_ids[j] == i;
        if (!in) cr_assert(orig[i] <= orig[res.top_ids[4]]);
    }
    /* n_logprobs 0: the chosen token's logprob only; -1: none */
    p.n_logprobs = 0;
    memcpy(l, orig, sizeof l);
    smp_sample(&p, &r, l, N, NULL, NULL, 0, &res);
    cr_assert_eq(res.n_top, 0);
    cr_assert_float_eq(res.logprob, orig[5] - lse, 1e-5);
}

/* Temperature sampling without filters follows softmax(l / T): chi-square with 9 degrees of
 * freedom stays under 27.9 (p = 0.001) for the fixed seed. */
Test(sampler, temperature_matches_softmax)
{
    const uint64_t seed = 0x5eed5eedull;
    printf("sampler temperature_matches_softmax seed=0x%llx\n", (unsigned long long)seed);
    enum { N = 10, DRAWS = 40000 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = (float)((i * 7919) % 13) * 0.3f - 1.0f;
    const float T = 0.7f;
    double q[N], s = 0.0, mx = -1e300;
    for (int i = 0; i < N; i++)
        mx = fmax(mx, l[i] / T);
    for (int i = 0; i < N; i++)
        s += q[i] = exp(l[i] / T - mx);
    smp_params p;
    smp_params_default(&p);
    p.temperature = T;
    int c[N];
    tsm_histogram(&p, seed, l, N, DRAWS, c);
    double chi2 = 0.0;
    for (int i = 0; i < N; i++) {
        double e = DRAWS * q[i] / s;
        chi2 += (c[i] - e) * (c[i] - e) / e;
    }
    cr_assert(chi2 < 27.9, "chi-square %f", chi2);
    /* the same through the filtered path with filters that keep everything */
    p.top_k = N - 1 + 1000;
    p.min_p = 1e-9f;
    tsm_histogram(&p, seed + 1, l, N, DRAWS, c);
    chi2 = 0.0;
    for (int i = 0; i < N; i++) {
        double e = DRAWS * q[i] / s;
        chi2 += (c[i] - e) * (c[i] - e) / e;
    }
    cr_assert(chi2 < 27.9, "chi-square (filtered path) %f", chi2);
}

/* allowed_token_ids: only those ids survive, whatever the logits say. */
Test(sampler, allowed_ids_mask)
{
    smp_params p;
    smp_params_default(&p);
    p.temperature = 0.0f;
    float l[6] = {9.0f, 1.0f, 2.0f, 8.0f, 3.0f, 0.5f};
    int32_t allow[2] = {2, 4};
    p.allowed_ids = allow;
    p.n_allowed = 2;
    smp_rng r;
    smp_rng_seed(&r, 1);
    smp_result res;
    smp_sample(&p, &r, l, 6, NULL, NULL, 0, &res);
    cr_assert_eq(res.token, 4, "best of the allowed ids");
    p.temperature = 1.0f;
    for (int i = 0; i < 200; i++) {
        float m[6] = {9.0f, 1.0f, 2.0f, 8.0f, 3.0f, 0.5f};
        smp_sample(&p, &r, m, 6, NULL, NULL, 0, &res);
        cr_assert(res.token == 2 || res.token == 4, "drew %d", res.token);
    }
}

/* bad_words: a one-token word is always banned; a longer one only right after its prefix. */
Test(sampler, bad_words_mask)
{
    smp_params p;
    smp_params_default(&p);
    p.temperature = 0.0f;
    int32_t ids[3] = {0, 7, 3};          /* word 0: [0]; word 1: [7, 3] */
    int32_t off[3] = {0, 1, 3};
    p.bad_ids = ids;
    p.bad_off = off;
    p.n_bad = 2;
    int32_t out_a[2] = {5, 7}, out_b[2] = {7, 5};
    smp_history ha = {NULL, 0, out_a, 2}, hb = {NULL, 0, out_b, 2};
    smp_rng r;
    smp_rng_seed(&r, 1);
    smp_result res;
    float l[8] = {10, 0, 0, 9, 0, 0, 0, 0};
    smp_sample(&p, &r, l, 8, &ha, NULL, 0, &res);
    cr_assert(res.token != 0 && res.token != 3, "0 always, 3 after 7: drew %d", res.token);
    float m[8] = {10, 0, 0, 9, 0, 0, 0, 0};
    smp_sample(&p, &r, m, 8, &hb, NULL, 0, &res);
    cr_assert_eq(res.token, 3, "7 is not the last token: [7, 3] cannot complete, only 0 is banned");
}

/* min_tokens bans stop_token_ids as it bans end-of-generation ids. */
Test(sampler, min_tokens_bans_stop_ids)
{
    smp_params p;
    smp_params_default(&p);
    p.temperature = 0.0f;
    p.min_tokens = 2;
    int32_t stop[1] = {1};
    p.stop_ids = stop;
    p.n_stop_ids = 1;
    int32_t out[1] = {4};
    smp_history h = {NULL, 0, out, 1};
    smp_rng r;
    smp_rng_seed(&r, 1);
    smp_result res;
    float l[4] = {0, 5, 1, 0};
    smp_sample(&p, &r, l, 4, &h, NULL, 0, &res);
    cr_assert_eq(res.token, 2);
    float m[4] = {0, 5, 1, 0};
    h.n_output = 2;
    smp_sample(&p, &r, m, 4, &h, NULL, 0, &res);
    cr_assert_eq(res.token, 1, "allowed once min_tokens are out");
}

/* smp_score's rank: 1 + tokens scoring at least as high, other than itself (ties count). */
Test(sampler, score_rank)
{
    float l[5] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    smp_result r;
    smp_score(l, 5, 2, 2, &r);
    cr_assert_eq(r.rank, 3);
    smp_score(l, 5, 1, 0, &r);
    cr_assert_eq(r.rank, 2, "a tie counts as above");
    smp_score(l, 5, 4, 0, &r);
    cr_assert_eq(r.rank, 5);
    cr_assert_eq(r.n_top, 0);
}

/* Deep copies own their arrays: freeing the copy leaves the original intact. */
Test(sampler, params_copy_and_free)
{
    smp_params a;
    smp_params_default(&a);
    int32_t ids[2] = {3, 4}, off[2] = {0, 2}, st[1] = {9};
    float bv[2] = {1, -1};
    a.bias_ids = ids;
    a.bias_vals = bv;
    a.n_logit_bias = 2;
    a.allowed_ids = ids;
    a.n_allowed = 2;
    a.bad_ids = ids;
    a.bad_off = off;
    a.n_bad = 1;
    a.stop_ids = st;
    a.n_stop_ids = 1;
    smp_params b;
    cr_assert_eq(smp_params_copy(&b, &a), 0);
    cr_assert(b.bias_ids != a.bias_ids && b.bad_off != a.bad_off && b.stop_ids != a.stop_ids);
    cr_assert_eq(b.bad_ids[1], 4);
    cr_assert_eq(b.bad_off[1], 2);
    cr_assert_eq(b.stop_ids[0], 9);
    cr_assert_eq(b.bias_vals[1], -1);
    smp_params_free_arrays(&b);
    cr_assert_null(b.bias_ids);
    cr_assert_eq(b.n_bad, 0);
    cr_assert_eq(ids[1], 4);
}

/* ---- grammar masks (smp_sample_masked) ------------------------------------------------------ */

Test(sampler, mask_is_absolute)
{
    /* Token 0 has by far the best logit and a +100 bias; masked, it is never drawn under any
     * filter setting, and the survivors keep their relative odds. */
    float base[8] = {20.0f, 1.0f, 0.5f, 3.0f, -1.0f, 2.0f, 0.0f, 4.0f};
    uint32_t allow = (1u << 1) | (1u << 2) | (1u << 5);
    int32_t bias_id = 0;
    float bias = 100.0f;
    smp_params p;
    smp_params_default(&p);
    p.n_logit_bias = 1;
    p.bias_ids = &bias_id;
    p.bias_vals = &bias;
    p.temperature = 2.0f;
    smp_rng r;
    smp_rng_seed(&r, 99);
    int counts[8] = {0};
    for (int i = 0; i < 3000; i++) {
        float l[8];
        memcpy(l, base, sizeof l);
        p.top_k = i % 3 == 0 ? 2 : 0;
        p.top_p = i % 3 == 1 ? 0.9f : 1.0f;
        p.min_p = i % 3 == 2 ? 0.05f : 0.0f;
        smp_result res;
        smp_sample_masked(&p, &r, l, 8, NULL, NULL, 0, &allow, &res);
        cr_assert((allow >> res.token) & 1, "masked token %d drawn", res.token);
        counts[res.token]++;
    }
    cr_assert(counts[5] > counts[1] && counts[1] > 0, "allowed tokens keep their order of odds");
    /* greedy picks the best allowed token */
    float l[8];
    memcpy(l, base, sizeof l);
    p.temperature = 0.0f;
    smp_result res;
    smp_sample_masked(&p, &r, l, 8, NULL, NULL, 0, &allow, &res);
    cr_assert_eq(res.token, 5);
}

Test(sampler, mask_logprobs_raw_and_eog_when_complete)
{
    float base[4] = {2.0f, 1.0f, 0.0f, -1.0f};
    smp_params p;
    smp_params_default(&p);
    p.n_logprobs = 2;
    p.min_tokens = 10;
    int32_t eog = 3;
    int32_t out_ids[1] = {1};
    smp_history h = {NULL, 0, out_ids, 1};
    smp_rng r;
    smp_rng_seed(&r, 1);
    /* only the eog id is allowed: min_tokens yields to the grammar (the output is complete) */
    uint32_t allow = 1u << 3;
    float l[4];
    memcpy(l, base, sizeof l);
    smp_result res;
    smp_sample_masked(&p, &r, l, 4, &h, &eog, 1, &allow, &res);
    cr_assert_eq(res.token, 3);
    double lse = log(exp(2.0) + exp(1.0) + exp(0.0) + exp(-1.0));
    cr_assert_float_eq(res.logprob, -1.0 - lse, 1e-5, "log-prob of the raw distribution");
    cr_assert_eq(res.top_ids[0], 0, "alternatives are the raw distribution's");
    /* with another token allowed, min_tokens bans eog as usual */
    allow = (1u << 3) | (1u << 2);
    memcpy(l, base, sizeof l);
    smp_sample_masked(&p, &r, l, 4, &h, &eog, 1, &allow, &res);
    cr_assert_eq(res.token, 2);
    /* every allowed logit NaN: still an allowed token */
    float nanl[4] = {5.0f, NAN, NAN, 1.0f};
    allow = (1u << 1) | (1u << 2);
    p.temperature = 1.0f;
    p.min_tokens = 0;
    smp_sample_masked(&p, &r, nanl, 4, NULL, NULL, 0, &allow, &res);
    cr_assert(res.token == 1 || res.token == 2);
}

/* ---- rows (smp_rows.h) against a brute-force model ------------------------------------------ */

typedef struct tsr_c {
    float l;
    int32_t id;
} tsr_c;

static int tsr_cmp(const void *a, const void *b)
{
    const tsr_c *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int32_t tsr_argmax(const float *l, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b] || (l[b] != l[b] && l[i] == l[i])) b = i;
    return b;
}

/* smp_rows.h's definition written out directly: every list rebuilt from the history, the
 * candidates fully sorted. hist includes the pending token (if any) as its last output. */
static int32_t tsr_reference(const smp_params *p, uint64_t seed, uint32_t choice, int32_t pos, const float *raw,
                             int n, const smp_history *h, const int32_t *eog, int n_eog, const uint32_t *allow,
                             float *l)
{
    for (int i = 0; i < n; i++) {
        int ok = !allow || ((allow[i >> 5] >> (i & 31)) & 1);
        if (p->n_allowed > 0) {
            int in = 0;
            for (int k = 0; k < p->n_allowed; k++) in |= p->allowed_ids[k] == i;
            ok &= in;
        }
        l[i] = ok ? raw[i] : -INFINITY;
    }
    for (int k = 0; k < p->n_logit_bias; k++) l[p->bias_ids[k]] += p->bias_vals[k];
    if (h && p->repetition_penalty != 1.0f) {
        for (int i = 0; i < n; i++) {
            int in = 0;
            for (int k = 0; k < h->n_prompt; k++) in |= h->prompt[k] == i;
            for (int k = 0; k < h->n_output; k++) in |= h->output[k] == i;
            if (in) l[i] = l[i] > 0 ? l[i] / p->repetition_penalty : l[i] * p->repetition_penalty;
        }
    }
    if (h && (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f)) {
        for (int i = 0; i < n; i++) {
            int c = 0;
            for (int k = 0; k < h->n_output; k++) c += h->output[k] == i;
            if (c) l[i] = (float)((double)l[i] - ((double)p->frequency_penalty * c + (double)p->presence_penalty));
        }
    }
    for (int k = 0; k < p->n_bad; k++) {
        int len = p->bad_off[k + 1] - p->bad_off[k];
        const int32_t *w = p->bad_ids + p->bad_off[k];
        if (len == 1 || (h && h->n_output >= len - 1 &&
                         !memcmp(h->output + h->n_output - (len - 1), w, (size_t)(len - 1) * sizeof *w)))
            l[w[len - 1]] = -INFINITY;
    }
    int other = 1;
    if (allow) {
        other = 0;
        for (int i = 0; i < n; i++) {
            int is_eog = 0;
            for (int k = 0; k < n_eog; k++) is_eog |= eog[k] == i;
            other |= ((allow[i >> 5] >> (i & 31)) & 1) && !is_eog;
        }
    }
    if (h && other && h->n_output < p->min_tokens) {
        for (int k = 0; k < n_eog; k++) l[eog[k]] = -INFINITY;
        for (int k = 0; k < p->n_stop_ids; k++) l[p->stop_ids[k]] = -INFINITY;
    }
    int32_t tok = tsr_argmax(l, n);
    if (p->temperature > 0.0f && l[tok] > -INFINITY) {
        static tsr_c c[4096];
        static double w[4096];
        static char keep[4096];
        double mx = l[tok];
        int nc = 0;
        for (int i = 0; i < n; i++) {
            keep[i] = l[i] > -INFINITY;
            w[i] = keep[i] ? exp(((double)l[i] - mx) / (double)p->temperature) : 0.0;
            if (keep[i]) c[nc++] = (tsr_c){l[i], i};
        }
        qsort(c, (size_t)nc, sizeof *c, tsr_cmp);
        int ns = p->top_k > 0 && p->top_k < nc ? p->top_k : nc;
        for (int j = ns; j < nc; j++) keep[c[j].id] = 0;
        if (p->top_p < 1.0f) {
            double tot = 0.0, acc = 0.0;
            for (int i = 0; i < n; i++) tot += keep[i] ? w[i] : 0.0;
            int cut = ns - 1;
            for (int j = 0; j < ns; j++) {
                acc += w[c[j].id];
                if (acc >= (double)p->top_p * tot) {
                    cut = j;
                    break;
                }
            }
            for (int j = cut + 1; j < ns; j++) keep[c[j].id] = 0;
        }
        double tot = 0.0;
        for (int i = 0; i < n; i++)
            if (keep[i] && w[i] > 0.0 && (p->min_p <= 0.0f || w[i] >= (double)p->min_p)) tot += w[i];
        if (tot > 0.0) {
            double u = rng_draw_uniform(seed + choice, (uint32_t)pos, 0, RNG_STREAM_SAMPLE) * tot, acc = 0.0;
            for (int i = 0; i < n; i++) {
                if (!(keep[i] && w[i] > 0.0 && (p->min_p <= 0.0f || w[i] >= (double)p->min_p))) continue;
                acc += w[i];
                tok = i;
                if (u < acc) break;
            }
        }
    }
    if (allow && !(l[tok] > -INFINITY)) {
        for (int i = 0; i < n; i++)
            if ((allow[i >> 5] >> (i & 31)) & 1) return i;
    }
    return tok;
}

static uint64_t tsr_rs;
static uint32_t tsr_u32(void)
{
    return (uint32_t)(rng_splitmix64(&tsr_rs) >> 32);
}
static float tsr_unif(void) /* [0, 1) */
{
    return (float)(tsr_u32() >> 8) * (1.0f / 16777216.0f);
}

/* A random row: logits with ties, -inf and NaN, random parameters and a random history. */
typedef struct tsr_case {
    int n;
    float raw[700];
    smp_params p;
    int32_t bias_ids[8], allowed[40], bad_ids[12], bad_off[5], stop_ids[2];
    float bias_vals[8];
    int32_t toks[80];
    int n_prompt, n_out;
    uint32_t allow[32];
    int use_allow;
    int32_t eog[2];
} tsr_case;

static void tsr_make(tsr_case *c)
{
    c->n = 1 + (int)(tsr_u32() % 700);
    float spread = 0.5f + 8.0f * tsr_unif();
    for (int i = 0; i < c->n; i++) {
        c->raw[i] = spread * (tsr_unif() * 2 - 1);
        uint32_t r = tsr_u32() % 40;
        if (r == 0) c->raw[i] = -INFINITY;
        if (r == 1 && i) c->raw[i] = c->raw[i - 1]; /* ties */
        if (r == 2) c->raw[i] = NAN;
    }
    smp_params *p = &c->p;
    smp_params_default(p);
    p->temperature = tsr_u32() % 4 == 0 ? 0.0f : 0.2f + 1.6f * tsr_unif();
    p->top_k = tsr_u32() % 2 ? (int)(tsr_u32() % (uint32_t)(c->n + 2)) : 0;
    p->top_p = tsr_u32() % 2 ? 0.05f + 0.95f * tsr_unif() : 1.0f;
    p->min_p = tsr_u32() % 3 == 0 ? 0.3f * tsr_unif() : 0.0f;
    p->repetition_penalty = tsr_u32() % 3 == 0 ? 0.5f + 1.5f * tsr_unif() : 1.0f;
    p->frequency_penalty = tsr_u32() % 3 == 0 ? 2 * tsr_unif() - 1 : 0.0f;
    p->presence_penalty = tsr_u32() % 3 == 0 ? 2 * tsr_unif() - 1 : 0.0f;
    p->n_logit_bias = (int)(tsr_u32() % 4);
    for (int k = 0; k < p->n_logit_bias; k++) {
        c->bias_ids[k] = (int32_t)(tsr_u32() % (uint32_t)c->n);
        c->bias_vals[k] = 10 * tsr_unif() - 5;
    }
    p->bias_ids = c->bias_ids;
    p->bias_vals = c->bias_vals;
    p->n_allowed = tsr_u32() % 5 == 0 ? 1 + (int)(tsr_u32() % 40) : 0;
    for (int k = 0; k < p->n_allowed; k++) c->allowed[k] = (int32_t)(tsr_u32() % (uint32_t)c->n);
    p->allowed_ids = c->allowed;
    c->n_prompt = 1 + (int)(tsr_u32() % 30);
    c->n_out = (int)(tsr_u32() % 40);
    for (int i = 0; i < c->n_prompt + c->n_out; i++) c->toks[i] = (int32_t)(tsr_u32() % (uint32_t)c->n);
    p->n_bad = (int)(tsr_u32() % 3);
    c->bad_off[0] = 0;
    for (int k = 0; k < p->n_bad; k++) {
        int len = 1 + (int)(tsr_u32() % 2);
        for (int j = 0; j < len; j++) /* often the end of the output, so that it applies */
            c->bad_ids[c->bad_off[k] + j] = c->n_out >= len - 1 && j < len - 1 && tsr_u32() % 2
                                                ? c->toks[c->n_prompt + c->n_out - (len - 1) + j]
                                                : (int32_t)(tsr_u32() % (uint32_t)c->n);
        c->bad_off[k + 1] = c->bad_off[k] + len;
    }
    p->bad_ids = c->bad_ids;
    p->bad_off = c->bad_off;
    p->n_stop_ids = (int)(tsr_u32() % 2);
    c->stop_ids[0] = (int32_t)(tsr_u32() % (uint32_t)c->n);
    p->stop_ids = c->stop_ids;
    p->min_tokens = (int)(tsr_u32() % 50);
    p->n_logprobs = (int)(tsr_u32() % 6) - 1;
    c->eog[0] = (int32_t)(tsr_u32() % (uint32_t)c->n);
    c->use_allow = tsr_u32() % 4 == 0;
    for (int w = 0; w < 32; w++) c->allow[w] = tsr_u32() % 3 ? tsr_u32() : 0;
}

/* Random rows through smp_row_fill + smp_row_run agree with the brute-force model exactly (the
 * token) and within float rounding (the log-probs). */
Test(sampler, rows_match_brute_force)
{
    tsr_rs = 0x7e57707;
    printf("sampler rows_match_brute_force seed=0x%llx\n", (unsigned long long)tsr_rs);
    static tsr_case c;
    static float lref[700], lrow[700];
    smp_arena a;
    smp_work w;
    cr_assert_eq(smp_arena_init(&a, 700), 0);
    for (int it = 0; it < 3000; it++) {
        tsr_make(&c);
        a.n_vocab = c.n; /* the arena's scratch is big enough for any n ≤ 700 */
        cr_assert_eq(smp_work_init(&w, c.n), 0);
        smp_history h = {c.toks, c.n_prompt, c.toks + c.n_prompt, c.n_out};
        smp_rng r;
        smp_rng_key(&r, 1000 + (uint64_t)it, (uint32_t)(it % 3));
        int32_t pos = c.n_prompt + c.n_out;
        smp_arena_reset(&a);
        smp_row row;
        const uint32_t *allow = c.use_allow ? c.allow : NULL;
        cr_assert_eq(smp_row_fill(&row, &a, &c.p, &r, pos, 0, &h, -1, c.eog, 1, allow), 0);
        row.lp = c.p.n_logprobs >= 0 ? 0 : -1;
        smp_result res;
        smp_row_run(&row, a.v, c.raw, &w, -1, &res);
        memcpy(lrow, w.adj, (size_t)c.n * sizeof *lrow);
        int32_t want = tsr_reference(&c.p, r.seed, r.choice, pos, c.raw, c.n, &h, c.eog, 1, allow, lref);
        for (int i = 0; i < c.n; i++)
            cr_assert(lrow[i] == lref[i] || (lrow[i] != lrow[i] && lref[i] != lref[i]),
                      "case %d: adjusted logit %d: %g, reference %g", it, i, lrow[i], lref[i]);
        cr_assert_eq(res.token, want, "case %d (n %d, T %g, k %d, p %g, min_p %g): token %d, reference %d", it, c.n,
                     c.p.temperature, c.p.top_k, c.p.top_p, c.p.min_p, res.token, want);
        if (c.p.n_logprobs >= 0 && c.raw[want] == c.raw[want]) {
            smp_result sc;
            smp_score(c.raw, c.n, want, c.p.n_logprobs, &sc);
            cr_assert(res.logprob == sc.logprob || (res.logprob != res.logprob && sc.logprob != sc.logprob),
                      "case %d: logprob %g, smp_score %g", it, res.logprob, sc.logprob);
            cr_assert_eq(res.n_top, sc.n_top);
        }
        smp_work_fini(&w);
    }
    a.n_vocab = 700;
    smp_arena_fini(&a);
}

/* A pending token (the history's last output, known only to the backend) gives what the history
 * with it known gives: the same adjusted row and token, through smp_rows_run's prev_ids. */
Test(sampler, pending_token_is_the_known_history)
{
    tsr_rs = 0x9e11d;
    static tsr_case c;
    smp_arena a1, a2;
    cr_assert_eq(smp_arena_init(&a1, 700), 0);
    cr_assert_eq(smp_arena_init(&a2, 700), 0);
    for (int it = 0; it < 1000; it++) {
        tsr_make(&c);
        c.p.n_bad = 0; /* a caller never pends a sequence with long bad words */
        if (c.n_out == 0) c.n_out = 1;
        a1.n_vocab = a2.n_vocab = c.n;
        smp_work w;
        cr_assert_eq(smp_work_init(&w, c.n), 0);
        smp_rng r;
        smp_rng_key(&r, 77, 0);
        int32_t pos = c.n_prompt + c.n_out;
        smp_history known = {c.toks, c.n_prompt, c.toks + c.n_prompt, c.n_out};
        smp_history pend = {c.toks, c.n_prompt, c.toks + c.n_prompt, c.n_out - 1};
        smp_row rows[2];
        smp_arena_reset(&a1);
        smp_arena_reset(&a2);
        const uint32_t *allow = c.use_allow ? c.allow : NULL;
        cr_assert_eq(smp_row_fill(&rows[0], &a1, &c.p, &r, pos, 0, &known, -1, c.eog, 1, allow), 0);
        cr_assert_eq(smp_row_fill(&rows[1], &a2, &c.p, &r, pos, 0, &pend, 5, c.eog, 1, allow), 0);
        int32_t prev[6] = {-9, -9, -9, -9, -9, c.toks[c.n_prompt + c.n_out - 1]}, ids[2];
        smp_batch b1 = {1, &rows[0], a1.n, a1.v, 0, c.n}, b2 = {1, &rows[1], a2.n, a2.v, 0, c.n};
        static float adj1[700];
        smp_rows_run(&b1, 0, 1, c.raw, NULL, &w, &ids[0], NULL);
        memcpy(adj1, w.adj, (size_t)c.n * sizeof *adj1);
        smp_rows_run(&b2, 0, 1, c.raw, prev, &w, &ids[1], NULL);
        for (int i = 0; i < c.n; i++)
            cr_assert(adj1[i] == w.adj[i] || (adj1[i] != adj1[i] && w.adj[i] != w.adj[i]), "case %d logit %d", it, i);
        cr_assert_eq(ids[0], ids[1], "case %d", it);
        smp_work_fini(&w);
    }
    a1.n_vocab = a2.n_vocab = 700;
    smp_arena_fini(&a1);
    smp_arena_fini(&a2);
}

/* Choice c of seed s draws what a single choice of seed s + c draws (vLLM's rule for n > 1), and
 * a draw does not depend on the other rows of its batch. */
Test(sampler, choices_offset_the_seed_and_rows_are_batch_invariant)
{
    enum { N = 300 };
    static float l[4][N];
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < N; i++) l[r][i] = (float)sin(i * 0.37 + r) * 3.0f;
    smp_params p;
    smp_params_default(&p);
    p.temperature = 1.3f;
    p.top_p = 0.9f;
    smp_arena a;
    smp_work w;
    cr_assert_eq(smp_arena_init(&a, N), 0);
    cr_assert_eq(smp_work_init(&w, N), 0);
    smp_row rows[4];
    for (int r = 0; r < 4; r++) {
        smp_rng k;
        smp_rng_key(&k, 40, (uint32_t)r);
        cr_assert_eq(smp_row_fill(&rows[r], &a, &p, &k, 17 + r, r, NULL, -1, NULL, 0, NULL), 0);
    }
    smp_batch b = {4, rows, a.n, a.v, 0, N};
    int32_t all[4], one;
    smp_rows_run(&b, 0, 4, &l[0][0], NULL, &w, all, NULL);
    for (int r = 0; r < 4; r++) {
        smp_rng k;
        smp_rng_key(&k, 40 + (uint64_t)r, 0);
        smp_row s;
        smp_arena_reset(&a);
        cr_assert_eq(smp_row_fill(&s, &a, &p, &k, 17 + r, 0, NULL, -1, NULL, 0, NULL), 0);
        smp_batch b1 = {1, &s, a.n, a.v, 0, N};
        smp_rows_run(&b1, 0, 1, l[r], NULL, &w, &one, NULL);
        cr_assert_eq(one, all[r], "row %d", r);
    }
    smp_work_fini(&w);
    smp_arena_fini(&a);
}
