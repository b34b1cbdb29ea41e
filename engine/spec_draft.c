/*
 * spec_draft.c — the draft-model proposer (spec.h): a smaller model with the target's vocabulary,
 * on a backend of the same device (sharing the target's CPU workers: the two run in turn), with
 * its own paged KV.
 *
 *   target sequence s:   [ prompt ........ | output ....... t ]                 n_tokens
 *   its shadow (draft):  [ tokens the draft's KV holds ........ | d0 .. d(k-2) ] n_computed
 *   propose(s, k):  keep the shadow's longest prefix that agrees with s (the rest of its blocks
 *                   go back), compute the draft over s's tokens after it (chunks of at most
 *                   max_tokens), take d0 = argmax, then feed d0 .. d(k-2) one at a time for d1 ..
 *                   d(k-1). The proposal is the draft's greedy guess, a point mass (spec.h).
 *
 * Invariants: a shadow holds exactly ceil(n_computed / block_size) blocks of the draft's pool and
 * its tokens[0 .. n_computed) are what its KV was computed from. Shadows hang off their target
 * sequence (seq.spec_state) and are freed by release (sched_release calls it when the sequence
 * finishes). The draft's KV budget is a share of the engine's, taken before the target's blocks
 * are counted (engine.c). Proposals are made one sequence at a time: the proposer is for few
 * streams (the scheduler proposes nothing above --spec-disable-batch decoding sequences).
 * Engine thread only.
 */
#include "engine/spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/block_pool.h"
#include "engine/batch.h"
#include "engine/forward.h"

typedef struct draft {
    spec_proposer base; /* first: the interface's pointer is this struct */
    model *m;           /* owned */
    backend *be;        /* owned */
    fwd *f;             /* owned */
    kv_geom g;
    block_pool *bp;     /* the draft's KV blocks */
    batch_buf bb;
    float *logits;      /* [1][n_vocab] */
    int n_vocab, max_tokens;
} draft;

/* The shadow's blocks past its first `keep` KV entries go back to the pool. */
static void draft__cut(draft *d, seq *sh, int keep)
{
    int bs = d->g.block_size, need = (keep + bs - 1) / bs;
    seq_kv *k = &sh->kv[0];
    while (k->n_blocks > need) bp_unref(d->bp, k->bt[--k->n_blocks]);
    if (sh->n_computed > keep) sh->n_computed = keep;
}

/* Room for n tokens in the shadow's token array and blocks for its first n_kv entries. 0,
 * -ENOSPC (the pool is short) or -ENOMEM. */
static int draft__reserve(draft *d, seq *sh, int n, int n_kv)
{
    if (n > sh->cap) {
        int32_t *t = realloc(sh->tokens, (size_t)n * 2 * sizeof *t);
        if (!t) return -ENOMEM;
        sh->tokens = t;
        sh->cap = n * 2;
    }
    int bs = d->g.block_size, need = (n_kv + bs - 1) / bs, have = sh->kv[0].n_blocks;
    if (need <= have) return 0;
    if (seq_reserve_blocks(sh, 0, need)) return -ENOMEM;
    if (bp_alloc(d->bp, need - have, sh->kv[0].bt + have)) return -ENOSPC;
    sh->kv[0].n_blocks = need;
    return 0;
}

/* Computes the shadow's tokens [n_computed, n_computed + n) and returns the argmax of the last
 * one's logits, or a negative errno. */
static int32_t draft__run(draft *d, seq *sh, int n)
{
    int32_t best = -EIO;
    while (n > 0) {
        int m = n < d->max_tokens ? n : d->max_tokens;
        batch_entry e = {sh, m, m == n, 0, 0, 0};
        int rc = batch_build(&d->bb, &e, 1, d->g.block_size, 1, NULL);
        if (!rc) rc = fwd_run(d->f, &d->bb.b, d->logits);
        if (rc) return rc;
        sh->n_computed += m;
        n -= m;
    }
    best = 0;
    for (int v = 1; v < d->n_vocab; v++)
        if (d->logits[v] > d->logits[best]) best = v;
    return best;
}

static int draft_propose(spec_proposer *p, seq *s, int k, int32_t *out)
{
    draft *d = (draft *)p;
    seq *sh = s->spec_state;
    if (!sh) {
        sh = seq_create(s->tokens, s->n_tokens, k + 1);
        if (!sh) return 0;
        sh->n_tokens = 0;
        s->spec_state = sh;
    }
    /* the shadow's KV is good up to where its tokens agree with s's (never s's last token: its
     * logits are needed) */
    int lcp = 0, lim = s->n_tokens - 1 < sh->n_computed ? s->n_tokens - 1 : sh->n_computed;
    while (lcp < lim && sh->tokens[lcp] == s->tokens[lcp]) lcp++;
    draft__cut(d, sh, lcp);
    int rc = draft__reserve(d, sh, s->n_tokens + k, s->n_tokens + k - 1);
    if (rc == -ENOSPC) { /* start this shadow over rather than fail: its blocks may be enough */
        draft__cut(d, sh, 0);
        rc = draft__reserve(d, sh, s->n_tokens + k, s->n_tokens + k - 1);
    }
    if (rc) {
        draft__cut(d, sh, 0);
        return 0;
    }
    memcpy(sh->tokens, s->tokens, (size_t)s->n_tokens * sizeof *s->tokens);
    sh->n_tokens = s->n_tokens;
    int32_t t = draft__run(d, sh, s->n_tokens - sh->n_computed);
    int n = 0;
    while (t >= 0) {
        out[n++] = t;
        if (n == k) break;
        sh->tokens[sh->n_tokens++] = t;
        t = draft__run(d, sh, 1);
    }
    if (t < 0) draft__cut(d, sh, 0);
    draft__cut(d, sh, sh->n_computed); /* the blocks reserved for drafts not computed */
    return n;
}

static void draft_release(spec_proposer *p, seq *s)
{
    draft *d = (draft *)p;
    seq *sh = s->spec_state;
    if (!sh) return;
    draft__cut(d, sh, 0);
    seq_destroy(sh);
    s->spec_state = NULL;
}

static void draft_destroy(spec_proposer *p)
{
    draft *d = (draft *)p;
    if (!d) return;
    batch_fini(&d->bb);
    free(d->logits);
    fwd_destroy(d->f);
    bp_destroy(d->bp);
    if (d->be) d->be->ops->destroy(d->be);
    model_destroy(d->m);
    free(d);
}

static const spec_ops draft_ops = {draft_propose, draft_release, draft_destroy};

size_t spec_draft_bytes_per_token(const model *m, int block_size, int kv_dtype)
{
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, block_size, kv_dtype);
    return kv_bytes_per_token(&g);
}

spec_proposer *spec_draft_create(const spec_draft_config *c, char *err, size_t err_len)
{
    draft *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    d->base.ops = &draft_ops;
    d->m = c->m;
    const model_hparams *hp = &c->m->hp;
    d->n_vocab = hp->n_vocab;
    d->max_tokens = c->max_tokens;
    d->g = kv_geom_make(hp->n_layers, hp->n_kv_heads, hp->head_dim, c->block_size, c->kv_dtype);
    int32_t nb = (int32_t)(c->kv_bytes / kv_bytes_per_block(&d->g));
    int32_t need = (int32_t)((c->n_ctx + c->block_size - 1) / c->block_size + 2);
    if (nb < need) {
        snprintf(err, err_len, "the draft model's KV share (%zu bytes) holds %d blocks, fewer than one sequence needs (%d)",
                 c->kv_bytes, nb, need);
        d->m = NULL;
        draft_destroy(&d->base);
        return NULL;
    }
    /* on the target's workers where its backend has a sibling: the two run in turn */
    if (c->target && c->target->ops->sibling) {
        d->be = c->target->ops->sibling(c->target);
        if (!d->be) snprintf(err, err_len, "the draft model's backend could not start");
    } else {
        d->be = c->make_backend(c->device, c->n_threads, err, err_len);
    }
    if (!d->be) {
        d->m = NULL;
        draft_destroy(&d->base);
        return NULL;
    }
    d->bp = bp_create(nb);
    d->f = fwd_create(c->m, d->be, &d->g, &nb, c->max_tokens, 1, err, err_len);
    d->logits = malloc((size_t)d->n_vocab * sizeof *d->logits);
    if (!d->bp || !d->f || !d->logits || batch_init(&d->bb, c->max_tokens, 1, 1)) {
        if (d->f && d->bp && d->logits) snprintf(err, err_len, "out of memory for the draft model");
        d->m = NULL;
        draft_destroy(&d->base);
        return NULL;
    }
    return &d->base;
}
