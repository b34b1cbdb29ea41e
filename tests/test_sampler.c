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

Test(sampler, rng_splitmix_seeding)
{
    /* splitmix64's first output from state 0 is a published constant. */
    smp_rng r;
    smp_rng_seed(&r, 0);
    cr_assert_eq(r.s[0], 0xe220a8397b1dcdafull);
    smp_rng a, b;
    smp_rng_seed(&a, 42);
    smp_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(smp_rng_next(&a), smp_rng_next(&b));
    for (int i = 0; i < 1000; i++) {
        double u = smp_rng_uniform(&a);
        cr_assert(u >= 0.0 && u < 1.0);
    }
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
