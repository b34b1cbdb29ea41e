/*
 * sample.c — the CPU backend's sample op: the rows of a step (engine/smp_rows.h) run by the
 * reference sampler of engine/sampler.c, one row per pool thread at a time, into one of two
 * result slots; and the token references of the next batch resolved from the latest slot
 * (engine/backend.h). Everything is done by the time sample returns, so sample_wait only hands
 * the slot over.
 *
 * Invariants: last is the slot of the latest sample call (-1 before the first), and its ids
 * hold n_rows[last] tokens; work[ith] is the scratch of pool thread ith, sized for n_vocab.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/internal.h"
#include "engine/sampler.h"

struct cpu__sampler {
    int32_t n_vocab;
    int32_t *ids[2];        /* [cap[s]] each slot's tokens */
    smp_result *lps[2];     /* [lp_cap[s]] each slot's log-prob blocks */
    int32_t cap[2], lp_cap[2], n_rows[2];
    int last;
    smp_work work[CPU__MAX_THREADS];
    int32_t *tokens;        /* [tok_cap] a batch's tokens with their references resolved */
    int32_t tok_cap;
};

void cpu__sampler_free(cpu__backend *c)
{
    struct cpu__sampler *s = c->smp;
    if (!s) return;
    for (int k = 0; k < 2; k++) {
        free(s->ids[k]);
        free(s->lps[k]);
    }
    for (int t = 0; t < CPU__MAX_THREADS; t++) smp_work_fini(&s->work[t]);
    free(s->tokens);
    free(s);
    c->smp = NULL;
}

/* The sampler state for rows of n_vocab (made at the first call). NULL on -ENOMEM. */
static struct cpu__sampler *cpu__sampler(cpu__backend *c, int32_t n_vocab)
{
    if (c->smp && c->smp->n_vocab == n_vocab) return c->smp;
    cpu__sampler_free(c);
    struct cpu__sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_vocab = n_vocab;
    s->last = -1;
    for (int t = 0; t < c->n_threads; t++)
        if (smp_work_init(&s->work[t], n_vocab)) {
            c->smp = s;
            cpu__sampler_free(c);
            return NULL;
        }
    c->smp = s;
    return s;
}

/* Grows *p to n elements of size sz. 0 or -ENOMEM. */
static int cpu__grow(void **p, int32_t *cap, int32_t n, size_t sz)
{
    if (n <= *cap) return 0;
    int32_t c = n + n / 2 + 16;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

typedef struct cpu__sample_job {
    struct cpu__sampler *s;
    const smp_batch *sb;
    const float *logits;
    const int32_t *prev;
    int slot;
} cpu__sample_job;

static void cpu__sample_rows(void *arg, int64_t lo, int64_t hi, int ith)
{
    cpu__sample_job *j = arg;
    smp_rows_run(j->sb, (int32_t)lo, (int32_t)hi, j->logits, j->prev, &j->s->work[ith], j->s->ids[j->slot],
                 j->s->lps[j->slot]);
}

int cpu__op_sample(backend *be, const float *logits, const smp_batch *sb, int slot)
{
    cpu__backend *c = (cpu__backend *)be;
    struct cpu__sampler *s = cpu__sampler(c, sb->n_vocab);
    if (!s || slot < 0 || slot > 1) return -EIO;
    if (cpu__grow((void **)&s->ids[slot], &s->cap[slot], sb->n_rows, sizeof(int32_t)) ||
        cpu__grow((void **)&s->lps[slot], &s->lp_cap[slot], sb->n_lp, sizeof(smp_result)))
        return -EIO;
    cpu__sample_job j = {s, sb, logits, s->last >= 0 ? s->ids[s->last] : NULL, slot};
    if (sb->n_rows > 0) cpu__pool_for(c->pool, sb->n_rows, 1, cpu__sample_rows, &j);
    s->n_rows[slot] = sb->n_rows;
    s->last = slot;
    return 0;
}

int cpu__op_sample_wait(backend *be, int slot, const int32_t **ids, const smp_result **lps)
{
    struct cpu__sampler *s = ((cpu__backend *)be)->smp;
    if (!s || slot < 0 || slot > 1) return -EIO;
    *ids = s->ids[slot];
    *lps = s->lps[slot];
    return 0;
}

int cpu__resolve_tokens(cpu__backend *c, be_batch *b)
{
    int refs = 0;
    for (int32_t i = 0; b->tokens && i < b->n_tokens && !refs; i++) refs = b->tokens[i] < 0;
    if (!refs) return 0;
    struct cpu__sampler *s = c->smp;
    if (!s || s->last < 0) return -EINVAL;
    if (cpu__grow((void **)&s->tokens, &s->tok_cap, b->n_tokens, sizeof(int32_t))) return -ENOMEM;
    const int32_t *ids = s->ids[s->last];
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t t = b->tokens[i], j = -1 - t;
        if (t < 0 && j >= s->n_rows[s->last]) return -EINVAL;
        s->tokens[i] = t < 0 ? ids[j] : t;
    }
    b->tokens = s->tokens;
    return 0;
}
