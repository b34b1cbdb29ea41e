/*
 * sampler.c — the CPU's sampler: the rows of engine/smp_rows.h filled from request parameters
 * (smp_row_fill) and run (smp_row_run, smp_rows_run), and the one-call form around them
 * (smp_sample, smp_sample_masked). The order and the arithmetic are those of smp_rows.h:
 *
 *   mask (grammar ∧ allowed_token_ids) → logit_bias → repetition (prompt + output, each distinct
 *   token once; HF rule: positive logits divided by the penalty, negative ones multiplied) →
 *   presence / frequency (OpenAI: l −= frequency × count + presence, once per distinct output
 *   token) → bans (bad words; min_tokens' end ids unless the mask allows nothing else) → greedy
 *   argmax (lowest id on ties) when temperature ≤ 0, else top_k → top_p → min_p over the weights
 *   exp((l − max) / T) and one uniform draw walking the survivors in id order.
 *
 * The filters are sets ordered by (logit descending, id ascending), so ties and the draw are
 * deterministic: the same logits, parameters and key always give the same token, and the GPU's
 * kernels (cuda/sample_kernels.h), which compute the same sets in parallel, give it too.
 * Log-probabilities are of the raw row (before any of the above), via log-softmax in double.
 *
 * Called by the CPU backend's sample op (one thread per group of rows), by the engine when a
 * backend has no sample op, and by `kvserve generate`.
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

int smp_params_has_long_bad_words(const smp_params *p)
{
    for (int k = 0; k < p->n_bad; k++)
        if (p->bad_off[k + 1] - p->bad_off[k] > 1) return 1;
    return 0;
}

void smp_rng_seed(smp_rng *r, uint64_t seed)
{
    smp_rng_key(r, seed, 0);
}

void smp_rng_key(smp_rng *r, uint64_t seed, uint32_t choice)
{
    r->seed = seed;
    r->choice = choice;
    r->draws = 0;
}

/* ---- filling rows ---------------------------------------------------------------------- */

int smp_arena_init(smp_arena *a, int32_t n_vocab)
{
    memset(a, 0, sizeof *a);
    a->n_vocab = n_vocab;
    a->stamp = calloc((size_t)n_vocab, sizeof *a->stamp);
    a->count = calloc((size_t)n_vocab, sizeof *a->count);
    if (!a->stamp || !a->count) {
        smp_arena_fini(a);
        return -ENOMEM;
    }
    return 0;
}

void smp_arena_fini(smp_arena *a)
{
    free(a->v);
    free(a->stamp);
    free(a->count);
    memset(a, 0, sizeof *a);
}

/* Room for n more int32s. 0 or -ENOMEM. */
static int smp__reserve(smp_arena *a, int64_t n)
{
    if (a->n + n <= a->cap) return 0;
    int64_t c = a->cap ? a->cap : 1024;
    while (c < a->n + n) c *= 2;
    if (c > INT32_MAX) return -ENOMEM;
    int32_t *v = realloc(a->v, (size_t)c * sizeof *v);
    if (!v) return -ENOMEM;
    a->v = v;
    a->cap = (int32_t)c;
    return 0;
}

/* A fresh generation of stamps (a new list to deduplicate). */
static void smp__new_list(smp_arena *a)
{
    if (++a->gen == 0) { /* wrapped: forget every stamp */
        memset(a->stamp, 0, (size_t)a->n_vocab * sizeof *a->stamp);
        a->gen = 1;
    }
}

/* Appends id once per list (ids out of range are skipped); counts its occurrences. Room for it
 * was reserved. */
static void smp__add_distinct(smp_arena *a, int32_t id, int pairs)
{
    if (id < 0 || id >= a->n_vocab) return;
    if (a->stamp[id] == a->gen) {
        a->count[id]++;
        return;
    }
    a->stamp[id] = a->gen;
    a->count[id] = 1;
    a->v[a->n++] = id;
    if (pairs) a->v[a->n++] = 0; /* the count, filled in once the list is complete */
}

/* The mask: allow (or every token) ∧ the allowed ids. */
static void smp__fill_mask(smp_arena *a, const smp_params *p, const uint32_t *allow)
{
    int32_t words = smp_mask_words(a->n_vocab), *m = a->v + a->n;
    if (allow) memcpy(m, allow, (size_t)words * sizeof *m);
    else memset(m, 0xff, (size_t)words * sizeof *m);
    if (p->n_allowed > 0) {
        uint32_t *keep = (uint32_t *)a->v + a->n + words; /* scratch past the mask (reserved) */
        memset(keep, 0, (size_t)words * sizeof *keep);
        for (int i = 0; i < p->n_allowed; i++) {
            int32_t id = p->allowed_ids[i];
            if (id >= 0 && id < a->n_vocab) keep[id >> 5] |= 1u << (id & 31);
        }
        for (int32_t w = 0; w < words; w++) m[w] = (int32_t)((uint32_t)m[w] & keep[w]);
    }
    a->n += words;
}

/* 1 when allow admits a token that is not an end-of-generation id. */
static int smp__allows_other(const uint32_t *allow, int32_t n_vocab, const int32_t *eog, int n_eog)
{
    for (int32_t w = 0; w * 32 < n_vocab; w++) {
        uint32_t m = allow[w];
        if (n_vocab - w * 32 < 32) m &= (1u << (n_vocab - w * 32)) - 1;
        for (int k = 0; k < n_eog; k++)
            if (eog[k] >> 5 == w) m &= ~(1u << (eog[k] & 31));
        if (m) return 1;
    }
    return 0;
}

/* The ban list: bad words that the next token would complete, and min_tokens' end ids. */
static void smp__fill_bans(smp_arena *a, const smp_params *p, const smp_history *h, int32_t n_out, int pending,
                           const int32_t *eog, int n_eog, int ban_end)
{
    for (int k = 0; k < p->n_bad; k++) {
        const int32_t *w = p->bad_ids + p->bad_off[k];
        int pre = p->bad_off[k + 1] - p->bad_off[k] - 1;
        if (pre < 0 || w[pre] < 0 || w[pre] >= a->n_vocab) continue;
        if (pre > 0 && (pending >= 0 || !h || h->n_output < pre ||
                        memcmp(h->output + h->n_output - pre, w, (size_t)pre * sizeof *w)))
            continue;
        a->v[a->n++] = w[pre];
    }
    if (!ban_end || n_out >= p->min_tokens) return;
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < a->n_vocab) a->v[a->n++] = eog[i];
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] >= 0 && p->stop_ids[i] < a->n_vocab) a->v[a->n++] = p->stop_ids[i];
}

/* The penalties' lists: distinct ids of prompt ∪ output (repetition), (id, count) pairs of the
 * output (frequency / presence). */
static void smp__fill_penalties(smp_arena *a, smp_row *row, const smp_history *h, int rep, int pres)
{
    if (rep) {
        smp__new_list(a);
        row->rep_ids = a->n;
        for (int i = 0; i < h->n_prompt; i++) smp__add_distinct(a, h->prompt[i], 0);
        for (int i = 0; i < h->n_output; i++) smp__add_distinct(a, h->output[i], 0);
        row->n_rep = a->n - row->rep_ids;
        if (!row->n_rep) row->rep_ids = 0;
    }
    if (pres) {
        smp__new_list(a);
        row->freq_ids = a->n;
        for (int i = 0; i < h->n_output; i++) smp__add_distinct(a, h->output[i], 1);
        for (int32_t j = row->freq_ids; j < a->n; j += 2) a->v[j + 1] = a->count[a->v[j]];
        row->n_freq = (a->n - row->freq_ids) / 2;
        if (!row->n_freq) row->freq_ids = 0;
    }
}

int smp_row_fill(smp_row *row, smp_arena *a, const smp_params *p, const smp_rng *rng, int32_t position,
                 int32_t logits, const smp_history *h, int32_t pending, const int32_t *eog, int n_eog,
                 const uint32_t *allow)
{
    int32_t nv = a->n_vocab, n0 = a->n;
    int rep = h && p->repetition_penalty != 1.0f && p->repetition_penalty > 0.0f;
    int pres = h && (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    int64_t need = (allow || p->n_allowed > 0 ? 2 * (int64_t)smp_mask_words(nv) : 0) + p->n_bad + n_eog +
                   p->n_stop_ids + 2 * (int64_t)p->n_logit_bias +
                   (rep ? (int64_t)h->n_prompt + h->n_output : 0) + (pres ? 2 * (int64_t)h->n_output : 0);
    if (smp__reserve(a, need)) return -ENOMEM;
    memset(row, 0, sizeof *row);
    row->seed = rng->seed;
    row->choice = rng->choice;
    row->position = position;
    row->logits = logits;
    row->kind = SMP_ROW_SAMPLE;
    row->token = -1;
    row->n_logprobs = p->n_logprobs < 0 ? 0 : p->n_logprobs < SMP_MAX_LOGPROBS ? p->n_logprobs : SMP_MAX_LOGPROBS;
    row->lp = -1;
    row->temperature = p->temperature;
    row->top_k = p->top_k;
    row->top_p = p->top_p;
    row->min_p = p->min_p;
    row->rep = rep ? p->repetition_penalty : 1.0f;
    row->freq = pres ? p->frequency_penalty : 0.0f;
    row->pres = pres ? p->presence_penalty : 0.0f;
    row->pending = pending;
    row->fallback = -1;
    row->mask = -1;
    if (allow || p->n_allowed > 0) {
        row->mask = a->n;
        smp__fill_mask(a, p, allow);
    }
    if (allow)
        for (int32_t w = 0; w * 32 < nv && row->fallback < 0; w++)
            if (allow[w]) row->fallback = w * 32 + __builtin_ctz(allow[w]);
    if (row->fallback >= nv) row->fallback = -1;
    int32_t n_out = (h ? h->n_output : 0) + (pending >= 0);
    row->ban = a->n;
    smp__fill_bans(a, p, h, n_out, pending, eog, n_eog, !allow || smp__allows_other(allow, nv, eog, n_eog));
    row->n_ban = a->n - row->ban;
    if (!row->n_ban) row->ban = 0;
    row->bias = a->n;
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->bias_ids[i] >= 0 && p->bias_ids[i] < nv) {
            a->v[a->n++] = p->bias_ids[i];
            memcpy(&a->v[a->n++], &p->bias_vals[i], sizeof(float));
        }
    row->n_bias = (a->n - row->bias) / 2;
    if (!row->n_bias) row->bias = 0;
    if (rep || pres) smp__fill_penalties(a, row, h, rep, pres);
    (void)n0;
    return 0;
}

/* ---- running rows ---------------------------------------------------------------------- */

int smp_work_init(smp_work *w, int32_t n_vocab)
{
    w->n_vocab = n_vocab;
    w->adj = malloc((size_t)n_vocab * sizeof *w->adj);
    w->w = malloc((size_t)n_vocab * sizeof *w->w);
    w->cand = malloc((size_t)n_vocab * sizeof(smp_cand));
    if (!w->adj || !w->w || !w->cand) {
        smp_work_fini(w);
        return -ENOMEM;
    }
    return 0;
}

void smp_work_fini(smp_work *w)
{
    free(w->adj);
    free(w->w);
    free(w->cand);
    memset(w, 0, sizeof *w);
}

/* (la, ia) comes before (lb, ib): a larger logit, or the same and a lower id. */
static inline int smp__better(float la, int32_t ia, float lb, int32_t ib)
{
    return la > lb || (la == lb && ia < ib);
}

/* Orders candidates by logit descending, then id ascending. */
static int smp__cand_cmp(const void *a, const void *b)
{
    const smp_cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Argmax, lowest id on ties; NaN never wins (0 for a row of NaNs). */
static int32_t smp__argmax(const float *l, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best] || (l[best] != l[best] && l[i] == l[i])) best = i;
    return best;
}

/* Raw log-softmax: the logprob of each of the n_top best tokens (NaN never among them), and lse
 * for any token. */
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
        if (raw[i] != raw[i]) continue;
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

/* Moves the k best candidates (by smp__cand_cmp) to the front, in order. */
static void smp__keep_top(smp_cand *c, int n, int k)
{
    /* quickselect, then sort the survivors */
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        smp_cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (smp__cand_cmp(&c[i], &pivot) < 0) i++;
            while (smp__cand_cmp(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                smp_cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    qsort(c, (size_t)k, sizeof *c, smp__cand_cmp);
}

/* The adjusted row: raw under the mask, then bias, penalties and bans (smp_rows.h, step 2). */
static void smp__adjust(const smp_row *r, const int32_t *arena, const float *raw, int32_t n, int32_t pend, float *l)
{
    if (r->mask >= 0) {
        const uint32_t *m = (const uint32_t *)arena + r->mask;
        for (int32_t i = 0; i < n; i++) l[i] = (m[i >> 5] >> (i & 31)) & 1 ? raw[i] : -INFINITY;
    } else if (l != raw) {
        memcpy(l, raw, (size_t)n * sizeof *l);
    }
    for (int32_t k = 0; k < r->n_bias; k++) {
        float v;
        memcpy(&v, &arena[r->bias + 2 * k + 1], sizeof v);
        l[arena[r->bias + 2 * k]] += v;
    }
    if (pend >= n) pend = -1;
    int pend_seen = 0;
    for (int32_t k = 0; k < r->n_rep; k++) {
        int32_t id = arena[r->rep_ids + k];
        pend_seen |= id == pend;
        l[id] = l[id] > 0 ? l[id] / r->rep : l[id] * r->rep;
    }
    if (r->rep != 1.0f && pend >= 0 && !pend_seen) l[pend] = l[pend] > 0 ? l[pend] / r->rep : l[pend] * r->rep;
    pend_seen = 0;
    for (int32_t k = 0; k < r->n_freq; k++) {
        int32_t id = arena[r->freq_ids + 2 * k], c = arena[r->freq_ids + 2 * k + 1] + (id == pend);
        pend_seen |= id == pend;
        l[id] = (float)((double)l[id] - ((double)r->freq * c + (double)r->pres));
    }
    if ((r->freq != 0.0f || r->pres != 0.0f) && pend >= 0 && !pend_seen)
        l[pend] = (float)((double)l[pend] - ((double)r->freq + (double)r->pres));
    for (int32_t k = 0; k < r->n_ban; k++) l[arena[r->ban + k]] = -INFINITY;
}

/* top_p's cut: of the candidates at or above kth (all when use_k is 0), the last of the shortest
 * run in (logit desc, id asc) order whose weight reaches top_p × their total. */
static smp_cand smp__top_p_cut(const smp_row *r, const float *l, const double *w, int32_t n, int use_k,
                               smp_cand kth, smp_cand *c)
{
    double tot = 0.0, mass = 0.0;
    const double thr = 1e-4; /* weights are relative to the best's (1) */
    int32_t nc = 0, m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!(l[i] > -INFINITY) || (use_k && smp__better(kth.logit, kth.id, l[i], i))) continue;
        tot += w[i];
        if (w[i] >= thr) mass += w[i];
    }
    double target = (double)r->top_p * tot;
    /* Only tokens above the threshold can be in the nucleus when their mass reaches the target:
     * sort just those, usually a tiny fraction of the vocabulary. */
    int few = mass >= target;
    for (int32_t i = 0; i < n; i++) {
        if (!(l[i] > -INFINITY) || (use_k && smp__better(kth.logit, kth.id, l[i], i))) continue;
        if (!few || w[i] >= thr) c[m++] = (smp_cand){l[i], i};
    }
    nc = m;
    qsort(c, (size_t)nc, sizeof *c, smp__cand_cmp);
    double acc = 0.0;
    for (int32_t i = 0; i < nc; i++) {
        acc += w[c[i].id];
        if (acc >= target) return c[i];
    }
    return c[nc - 1];
}

/* Temperature, top_k, top_p, min_p and the draw over the adjusted row l (smp_rows.h, step 3). */
static int32_t smp__draw(const smp_row *r, const float *l, int32_t n, smp_work *wk)
{
    int32_t am = smp__argmax(l, n);
    float mx = l[am];
    if (!(mx > -INFINITY)) return am; /* nothing to draw from */
    double *w = wk->w, T = r->temperature;
    smp_cand *c = wk->cand;
    int32_t nc = 0;
    for (int32_t i = 0; i < n; i++) {
        int cand = l[i] > -INFINITY;
        w[i] = cand ? exp(((double)l[i] - (double)mx) / T) : 0.0;
        if (cand && (r->top_k > 0 || r->top_p < 1.0f)) c[nc++] = (smp_cand){l[i], i};
    }
    smp_cand kth = {-INFINITY, INT32_MAX}, cut = kth;
    int use_k = r->top_k > 0 && r->top_k < nc, use_p = r->top_p < 1.0f;
    if (use_k) {
        smp__keep_top(c, nc, r->top_k);
        kth = c[r->top_k - 1];
    }
    if (use_p) cut = smp__top_p_cut(r, l, w, n, use_k, kth, c);
    smp_cand lim = use_p ? cut : kth; /* the cut is never past kth */
    double mp = r->min_p > 0.0f ? (double)r->min_p : 0.0, tot = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (w[i] > 0.0 && w[i] >= mp && !smp__better(lim.logit, lim.id, l[i], i)) tot += w[i];
    if (!(tot > 0.0)) return am; /* min_p above 1 keeps nothing */
    double u = rng_draw_uniform(r->seed + r->choice, (uint32_t)r->position, 0, RNG_STREAM_SAMPLE) * tot, acc = 0.0;
    int32_t last = am;
    for (int32_t i = 0; i < n; i++) {
        if (!(w[i] > 0.0 && w[i] >= mp) || smp__better(lim.logit, lim.id, l[i], i)) continue;
        acc += w[i];
        last = i;
        if (u < acc) return i;
    }
    return last;
}

void smp_row_run(const smp_row *row, const int32_t *arena, const float *raw, smp_work *w, int32_t pending_token,
                 smp_result *out)
{
    int32_t n = w->n_vocab;
    out->rank = 0;
    out->n_top = 0;
    out->logprob = 0.0f;
    int lp = row->lp >= 0 || row->kind == SMP_ROW_SCORE;
    double lse = lp ? smp__raw_stats(raw, n, out, row->n_logprobs) : 0.0;
    if (row->kind == SMP_ROW_SCORE) {
        out->token = row->token;
        out->logprob = (float)(raw[row->token] - lse);
        int rank = 0;
        for (int32_t i = 0; i < n; i++) rank += raw[i] >= raw[row->token];
        out->rank = rank;
        return;
    }
    float *l = w->adj;
    smp__adjust(row, arena, raw, n, row->pending >= 0 ? pending_token : -1, l);
    int32_t tok = row->temperature <= 0.0f ? smp__argmax(l, n) : smp__draw(row, l, n, w);
    if (row->fallback >= 0 && !(l[tok] > -INFINITY)) tok = row->fallback;
    out->token = tok;
    if (lp) out->logprob = (float)(raw[tok] - lse);
}

void smp_rows_run(const smp_batch *b, int32_t r0, int32_t r1, const float *logits, const int32_t *prev_ids,
                  smp_work *w, int32_t *ids, smp_result *lps)
{
    for (int32_t i = r0; i < r1; i++) {
        const smp_row *row = &b->rows[i];
        smp_result res;
        int32_t pend = row->pending >= 0 && prev_ids ? prev_ids[row->pending] : -1;
        smp_row_run(row, b->arena, logits + (size_t)row->logits * (size_t)b->n_vocab, w, pend, &res);
        ids[i] = res.token;
        if (row->lp >= 0) lps[row->lp] = res;
    }
}

/* ---- the call layer -------------------------------------------------------------------- */

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

int smp_sample_masked(const smp_params *p, smp_rng *rng, float *logits, int n_vocab, const smp_history *h,
                      const int32_t *eog_ids, int n_eog, const uint32_t *allow, smp_result *out)
{
    smp_arena a;
    smp_work w = {0};
    smp_row row;
    int32_t pos = h ? h->n_prompt + h->n_output : (int32_t)rng->draws++;
    int rc = smp_arena_init(&a, n_vocab);
    if (!rc) rc = smp_work_init(&w, n_vocab);
    if (!rc) rc = smp_row_fill(&row, &a, p, rng, pos, 0, h, -1, eog_ids, n_eog, allow);
    if (rc) {
        memset(out, 0, sizeof *out);
        out->token = smp__argmax(logits, n_vocab);
    } else {
        row.lp = p->n_logprobs >= 0 ? 0 : -1;
        smp_row_run(&row, a.v, logits, &w, -1, out);
        memcpy(logits, w.adj, (size_t)n_vocab * sizeof *logits);
    }
    smp_work_fini(&w);
    smp_arena_fini(&a);
    return rc;
}

int smp_sample(const smp_params *p, smp_rng *rng, float *logits, int n_vocab, const smp_history *h,
               const int32_t *eog_ids, int n_eog, smp_result *out)
{
    return smp_sample_masked(p, rng, logits, n_vocab, h, eog_ids, n_eog, NULL, out);
}
