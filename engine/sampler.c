/*
 * sampler.c — one row of logits → one token, following the order documented in sampler.h:
 *
 *   grammar mask (smp_sample_masked) and allowed_token_ids / bad_words masks (-inf) →
 *   logit_bias → repetition (prompt + output, each distinct token once; HF rule: positive
 *   logits are divided by the penalty, negative ones multiplied) → presence / frequency (OpenAI
 *   rule, output tokens only: l -= frequency × count + presence × [count > 0]) → min_tokens (eog
 *   and stop ids set to -inf, unless the grammar allows nothing else) → greedy argmax (lowest id
 *   on ties) when temperature == 0 → temperature →
 *   top_k → top_p → min_p → one uniform draw from the renormalised survivors.
 *
 * The filters work on a candidate list sorted by (logit desc, id asc), so ties and the draw are
 * deterministic: the same logits, parameters and PRNG state always give the same token.
 * Log-probabilities are of the raw row (before any of the above), via log-softmax in double.
 *
 * Called by the engine thread once per sampled row, and by `kvserve generate`.
 */
#include "engine/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct smp_cand {
    float logit;
    int32_t id;
} smp_cand;

void smp_params_default(smp_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->n_logprobs = -1;
}

void smp_params_free_arrays(smp_params *p)
{
    free(p->bias_ids);
    free(p->bias_vals);
    free(p->allowed_ids);
    free(p->bad_ids);
    free(p->bad_off);
    free(p->stop_ids);
    p->bias_ids = p->allowed_ids = p->bad_ids = p->bad_off = p->stop_ids = NULL;
    p->bias_vals = NULL;
    p->n_logit_bias = p->n_allowed = p->n_bad = p->n_stop_ids = 0;
}

/* A malloc'd copy of n elements of size sz at src (NULL and 0 for n = 0). 0 or -ENOMEM. */
static int smp__dup(void **dst, const void *src, int n, size_t sz)
{
    *dst = NULL;
    if (n <= 0 || !src) return 0;
    *dst = malloc((size_t)n * sz);
    if (!*dst) return -ENOMEM;
    memcpy(*dst, src, (size_t)n * sz);
    return 0;
}

int smp_params_copy(smp_params *dst, const smp_params *src)
{
    *dst = *src;
    int rc = smp__dup((void **)&dst->bias_ids, src->bias_ids, src->n_logit_bias, sizeof(int32_t));
    rc |= smp__dup((void **)&dst->bias_vals, src->bias_vals, src->n_logit_bias, sizeof(float));
    rc |= smp__dup((void **)&dst->allowed_ids, src->allowed_ids, src->n_allowed, sizeof(int32_t));
    int nb = src->n_bad > 0 && src->bad_off ? src->bad_off[src->n_bad] : 0;
    rc |= smp__dup((void **)&dst->bad_ids, src->bad_ids, nb, sizeof(int32_t));
    rc |= smp__dup((void **)&dst->bad_off, src->bad_off, src->n_bad > 0 ? src->n_bad + 1 : 0, sizeof(int32_t));
    rc |= smp__dup((void **)&dst->stop_ids, src->stop_ids, src->n_stop_ids, sizeof(int32_t));
    if (rc) {
        smp_params_free_arrays(dst);
        return -ENOMEM;
    }
    return 0;
}

void smp_rng_seed(smp_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = rng_splitmix64(&x);
}

static inline uint64_t smp__rotl(uint64_t v, int k)
{
    return (v << k) | (v >> (64 - k));
}

/* xoshiro256** (Blackman & Vigna). */
uint64_t smp_rng_next(smp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = smp__rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = smp__rotl(s[3], 45);
    return result;
}

/* The top 53 bits as a double in [0, 1). */
double smp_rng_uniform(smp_rng *r)
{
    return (double)(smp_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Orders candidates by logit descending, then id ascending. */
static int smp__cand_cmp(const void *a, const void *b)
{
    const smp_cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

static inline int smp__better(float la, int32_t ia, float lb, int32_t ib)
{
    return la > lb || (la == lb && ia < ib);
}

/* Argmax, lowest id on ties; NaN never wins. */
static int32_t smp__argmax(const float *l, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best] || (l[best] != l[best] && l[i] == l[i])) best = i;
    return best;
}

/* Raw log-softmax: the logprob of each of the n_top best tokens plus lse for any token. */
static double smp__raw_stats(const float *raw, int n, smp_result *out, int n_top)
{
    float mx = raw[smp__argmax(raw, n)];
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)raw[i] - mx);
    double lse = mx + log(sum);
    /* top-N by insertion into a short sorted list */
    int k = 0;
    for (int i = 0; i < n && n_top > 0; i++) {
        if (k == n_top && !smp__better(raw[i], i, raw[out->top_ids[k - 1]], out->top_ids[k - 1]))
            continue;
        int j = k < n_top ? k++ : k - 1;
        while (j > 0 && smp__better(raw[i], i, raw[out->top_ids[j - 1]], out->top_ids[j - 1])) {
            out->top_ids[j] = out->top_ids[j - 1];
            j--;
        }
        out->top_ids[j] = i;
    }
    out->n_top = k;
    for (int j = 0; j < k; j++)
        out->top_logprobs[j] = (float)(raw[out->top_ids[j]] - lse);
    return lse;
}

/* allowed_token_ids: every other id to -inf. bad_words: the last token of a word whose other
 * tokens end the output so far (a one-token word always) to -inf. In place. */
static void smp__mask(const smp_params *p, float *l, int n, const smp_history *h)
{
    if (p->n_allowed > 0) {
        float *keep = malloc((size_t)p->n_allowed * sizeof *keep);
        if (keep) {
            for (int i = 0; i < p->n_allowed; i++)
                keep[i] = p->allowed_ids[i] >= 0 && p->allowed_ids[i] < n ? l[p->allowed_ids[i]] : 0;
            for (int i = 0; i < n; i++) l[i] = -INFINITY;
            for (int i = 0; i < p->n_allowed; i++)
                if (p->allowed_ids[i] >= 0 && p->allowed_ids[i] < n) l[p->allowed_ids[i]] = keep[i];
            free(keep);
        }
    }
    for (int k = 0; k < p->n_bad; k++) {
        const int32_t *w = p->bad_ids + p->bad_off[k];
        int pre = p->bad_off[k + 1] - p->bad_off[k] - 1;
        if (pre < 0 || w[pre] < 0 || w[pre] >= n) continue;
        if (pre > 0 && (!h || h->n_output < pre ||
                        memcmp(h->output + h->n_output - pre, w, (size_t)pre * sizeof *w)))
            continue;
        l[w[pre]] = -INFINITY;
    }
}

/* The masks, logit_bias, penalties and (when ban_eog) the min_tokens ban, in place. */
static void smp__adjust(const smp_params *p, float *l, int n, const smp_history *h,
                        const int32_t *eog, int n_eog, int ban_eog)
{
    smp__mask(p, l, n, h);
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->bias_ids[i] >= 0 && p->bias_ids[i] < n) l[p->bias_ids[i]] += p->bias_vals[i];

    int rep = p->repetition_penalty != 1.0f && p->repetition_penalty > 0.0f;
    int pres = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (h && (rep || pres)) {
        unsigned char *seen = calloc((size_t)n, 1); /* bit 0: repetition done, bit 1: presence */
        if (seen) {
            for (int pass = 0; pass < 2 && rep; pass++) {
                const int32_t *t = pass ? h->output : h->prompt;
                int nt = pass ? h->n_output : h->n_prompt;
                for (int i = 0; i < nt; i++) {
                    int32_t id = t[i];
                    if (id < 0 || id >= n || (seen[id] & 1)) continue;
                    seen[id] |= 1;
                    l[id] =
                        l[id] > 0 ? l[id] / p->repetition_penalty : l[id] * p->repetition_penalty;
                }
            }
            for (int i = 0; pres && i < h->n_output; i++) {
                int32_t id = h->output[i];
                if (id < 0 || id >= n) continue;
                l[id] -= p->frequency_penalty;
                if (!(seen[id] & 2)) l[id] -= p->presence_penalty;
                seen[id] |= 2;
            }
            free(seen);
        }
    }
    if (ban_eog && h && h->n_output < p->min_tokens) {
        for (int i = 0; i < n_eog; i++)
            if (eog[i] >= 0 && eog[i] < n) l[eog[i]] = -INFINITY;
        for (int i = 0; i < p->n_stop_ids; i++)
            if (p->stop_ids[i] >= 0 && p->stop_ids[i] < n) l[p->stop_ids[i]] = -INFINITY;
    }
}

/* Moves the k best candidates (by smp__cand_cmp) to the front, in order. */
static void smp__keep_top(smp_cand *c, int n, int k)
{
    /* quickselect, then sort the survivors */
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        smp_cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (smp__cand_cmp(&c[i], &pivot) < 0)
                i++;
            while (smp__cand_cmp(&c[j], &pivot) > 0)
                j--;
            if (i <= j) {
                smp_cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
    qsort(c, (size_t)k, sizeof *c, smp__cand_cmp);
}

/* Temperature, top_k, top_p, min_p and the draw, over the adjusted logits l (scratch). */
static int32_t smp__draw(const smp_params *p, smp_rng *rng, float *l, int n)
{
    float inv_t = 1.0f / p->temperature;
    float mx = l[smp__argmax(l, n)];
    if (!(mx > -INFINITY)) return smp__argmax(l, n); /* everything banned: nothing to draw from */
    int filters = (p->top_k > 0 && p->top_k < n) || p->top_p < 1.0f || p->min_p > 0.0f;
    if (!filters) { /* plain softmax draw in id order, no sorting */
        double sum = 0.0;
        for (int i = 0; i < n; i++) {
            l[i] = l[i] == l[i] ? expf((l[i] - mx) * inv_t) : 0.0f;
            sum += l[i];
        }
        double u = smp_rng_uniform(rng) * sum, acc = 0.0;
        int32_t last = 0;
        for (int i = 0; i < n; i++) {
            if (l[i] <= 0.0f) continue;
            acc += l[i];
            last = i;
            if (u < acc) return i;
        }
        return last;
    }

    smp_cand *c = malloc((size_t)n * sizeof *c);
    if (!c) return smp__argmax(l, n);
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (l[i] > -INFINITY) c[nc++] = (smp_cand){(l[i] - mx) * inv_t, i};
    int sorted = 0;
    if (p->top_k > 0 && p->top_k < nc) {
        smp__keep_top(c, nc, p->top_k);
        nc = p->top_k;
        sorted = 1;
    }
    /* probabilities (unnormalised, max = 1) live in .logit from here on */
    double sum = 0.0;
    for (int i = 0; i < nc; i++) {
        c[i].logit = expf(c[i].logit);
        sum += c[i].logit;
    }
    if (p->top_p < 1.0f) {
        if (!sorted) {
            /* Only tokens above a threshold can be in the nucleus when the mass above it already
             * reaches top_p: sort just those, which is usually a tiny fraction of the vocabulary.
             */
            double thr = 1e-4, mass = 0.0;
            int m = 0;
            for (int i = 0; i < nc; i++)
                if (c[i].logit >= thr) mass += c[i].logit;
            if (mass >= p->top_p * sum) {
                for (int i = 0; i < nc; i++)
                    if (c[i].logit >= thr) c[m++] = c[i];
                nc = m;
            }
            qsort(c, (size_t)nc, sizeof *c, smp__cand_cmp);
            sorted = 1;
        }
        double acc = 0.0, target = p->top_p * sum;
        int keep = nc;
        for (int i = 0; i < nc; i++) {
            acc += c[i].logit;
            if (acc >= target) {
                keep = i + 1;
                break;
            }
        }
        nc = keep;
    }
    if (p->min_p > 0.0f) { /* the best survivor has probability 1 × the max (unnormalised) */
        int m = 0;
        for (int i = 0; i < nc; i++)
            if (c[i].logit >= p->min_p) c[m++] = c[i];
        if (m == 0) { /* min_p > 1 keeps nothing: fall back to the most likely token */
            free(c);
            return smp__argmax(l, n);
        }
        nc = m;
    }
    double tot = 0.0;
    for (int i = 0; i < nc; i++)
        tot += c[i].logit;
    double u = smp_rng_uniform(rng) * tot, acc = 0.0;
    int32_t tok = c[nc - 1].id;
    for (int i = 0; i < nc; i++) {
        acc += c[i].logit;
        if (u < acc) {
            tok = c[i].id;
            break;
        }
    }
    free(c);
    return tok;
}

void smp_score(const float *logits, int n_vocab, int32_t token, int n_top, smp_result *out)
{
    n_top = n_top < 0 ? 0 : n_top < SMP_MAX_LOGPROBS ? n_top : SMP_MAX_LOGPROBS;
    double lse = smp__raw_stats(logits, n_vocab, out, n_top);
    out->token = token;
    out->logprob = (float)(logits[token] - lse);
    int rank = 0;
    for (int i = 0; i < n_vocab; i++) rank += logits[i] >= logits[token];
    out->rank = rank;
}

static inline int smp__allowed(const uint32_t *allow, int32_t id)
{
    return (allow[id >> 5] >> (id & 31)) & 1;
}

/* Sets logits outside allow to -inf, a word of the mask at a time. Returns 1 when a token other
 * than an eog id stays allowed; *first gets the lowest allowed id (-1 when none), the fallback
 * when nothing allowed can be drawn. */
static int smp__apply_mask(float *l, int n, const uint32_t *allow, const int32_t *eog, int n_eog, int32_t *first)
{
    int64_t count = 0;
    int32_t b = -1;
    for (int w = 0; w * 32 < n; w++) {
        uint32_t m = allow[w];
        int base = w * 32, top = n - base < 32 ? n - base : 32;
        if (top < 32) m &= (1u << top) - 1;
        count += __builtin_popcount(m);
        if (b < 0 && m) b = base + __builtin_ctz(m);
        if (m == 0xFFFFFFFFu) continue;
        for (uint32_t x = ~m & (top < 32 ? (1u << top) - 1 : 0xFFFFFFFFu); x; x &= x - 1) l[base + __builtin_ctz(x)] = -INFINITY;
    }
    for (int k = 0; k < n_eog; k++)
        if (eog[k] >= 0 && eog[k] < n && smp__allowed(allow, eog[k])) {
            int dup = 0; /* an id listed twice is one token */
            for (int j = 0; j < k; j++) dup |= eog[j] == eog[k];
            count -= !dup;
        }
    *first = b;
    return count > 0;
}

/* See sampler.h. logprob fields are filled only when p->n_logprobs ≥ 0 (else logprob = 0 and
 * n_top = 0). */
void smp_sample_masked(const smp_params *p, smp_rng *rng, float *logits, int n_vocab,
                       const smp_history *h, const int32_t *eog_ids, int n_eog,
                       const uint32_t *allow, smp_result *out)
{
    out->n_top = 0;
    out->rank = 0;
    out->logprob = 0.0f;
    float *raw = NULL;
    double lse = 0.0;
    if (p->n_logprobs >= 0) {
        int n_top = p->n_logprobs < SMP_MAX_LOGPROBS ? p->n_logprobs : SMP_MAX_LOGPROBS;
        lse = smp__raw_stats(logits, n_vocab, out, n_top);
        raw = malloc((size_t)n_vocab * sizeof *raw);
        if (raw) memcpy(raw, logits, (size_t)n_vocab * sizeof *raw);
    }
    int32_t best = -1;
    int ban_eog = allow ? smp__apply_mask(logits, n_vocab, allow, eog_ids, n_eog, &best) : 1;
    smp__adjust(p, logits, n_vocab, h, eog_ids, n_eog, ban_eog);
    int32_t tok =
        p->temperature <= 0.0f ? smp__argmax(logits, n_vocab) : smp__draw(p, rng, logits, n_vocab);
    if (allow && !smp__allowed(allow, tok) && best >= 0) tok = best; /* nothing allowed was drawable */
    out->token = tok;
    if (p->n_logprobs >= 0 && raw) {
        out->logprob = (float)(raw[tok] - lse);
    }
    free(raw);
}

void smp_sample(const smp_params *p, smp_rng *rng, float *logits, int n_vocab, const smp_history *h,
                const int32_t *eog_ids, int n_eog, smp_result *out)
{
    smp_sample_masked(p, rng, logits, n_vocab, h, eog_ids, n_eog, NULL, out);
}
