/*
 * spec.c — the n-gram (prompt lookup) proposer and the speculation settings (see spec.h).
 *
 * The lookup scans the sequence backwards for each suffix length, longest first, so the latest
 * occurrence of the longest recurring suffix wins: in an edit of a given passage that is where
 * the copy is being made. The cost is O(n × m) per sequence and step on the engine thread, a few
 * microseconds at the contexts the CPU serves; nothing is kept between steps.
 */
#include "engine/spec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void spec_config_default(spec_config *c)
{
    memset(c, 0, sizeof *c);
    c->method = SPEC_OFF;
    c->k = 4;
    c->ngram_min = 2;
    c->ngram_max = 4;
    c->disable_batch = 0; /* the device's: engine.c */
}

int spec_method_parse(const char *s, int *method)
{
    static const char *const names[] = {"off", "ngram", "draft"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *method = i;
            return 0;
        }
    return -EINVAL;
}

const char *spec_method_name(int method)
{
    return method == SPEC_NGRAM ? "ngram" : method == SPEC_DRAFT ? "draft" : "off";
}

int spec_ngram_lookup(const int32_t *t, int n, int n_min, int n_max, int k, int32_t *out)
{
    if (n_min < 1) n_min = 1;
    for (int m = n_max; m >= n_min; m--) {
        if (m >= n) continue;
        const int32_t *suf = t + n - m;
        /* a match at j is t[j .. j + m) = suf with j + m < n, so that something follows it */
        for (int j = n - m - 1; j >= 0; j--) {
            if (t[j] != suf[0] || memcmp(t + j, suf, (size_t)m * sizeof *t)) continue;
            int c = 0;
            while (c < k && j + m + c < n) {
                out[c] = t[j + m + c];
                c++;
            }
            return c;
        }
    }
    return 0;
}

typedef struct ngram {
    spec_proposer base; /* first: the interface's pointer is this struct */
    int n_min, n_max;
} ngram;

static void ngram_propose(spec_proposer *p, seq *const *s, const int *k, int n, int *n_out)
{
    const ngram *g = (const ngram *)p;
    for (int i = 0; i < n; i++)
        n_out[i] = spec_ngram_lookup(s[i]->tokens, s[i]->n_tokens, g->n_min, g->n_max, k[i], s[i]->draft);
}

static void ngram_destroy(spec_proposer *p)
{
    free(p);
}

static const spec_ops ngram_ops = {ngram_propose, NULL, ngram_destroy};

spec_proposer *spec_ngram_create(const spec_config *c)
{
    ngram *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->base.ops = &ngram_ops;
    g->n_min = c->ngram_min > 0 ? c->ngram_min : 1;
    g->n_max = c->ngram_max >= g->n_min ? c->ngram_max : g->n_min;
    return &g->base;
}
