/*
 * spec_draft.c — the draft-model proposer (spec.h): a smaller model with the target's vocabulary,
 * on a backend of the same device (sharing the target's CPU workers: the two run in turn), with
 * its own paged KV.
 *
 *   target sequence s:   [ prompt ........ | output ....... t ]                 n_tokens
 *   its shadow (draft):  [ tokens the draft's KV holds ........ | d0 .. d(k-2) ] n_computed
 *   propose(s, k):  keep the shadow's longest prefix that agrees with s (the rest of its blocks
 *                   go back), compute the draft over s's tokens after it (chunks of at most
 *                   max_tokens), take its guess d0, then feed d0 .. d(k-2) one at a time for d1 ..
 *                   d(k-1). Each guess is the token the sequence's own sampler would draw from the
 *                   draft's logits at that position (draft__guess): a point mass (spec.h), coupled
 *                   with the target's draw through their shared random number.
 *   A step's sequences are drafted together: their catch-ups share batched steps, and each
 *   further guess is one step with a row per sequence still short of its k, so the draft's
 *   weights are read about k times per step whatever the number of speculating sequences.
 *
 * The draft has its own prefix cache (a radix tree over its pool): a shadow offers it the full
 * blocks of its sequence's known tokens after each proposal and all its full blocks when the
 * sequence finishes, and an empty shadow (a new sequence, another choice of the same prompt, the
 * next turn of a conversation) starts from the longest cached prefix, so the draft's catch-up
 * over a prompt it has seen is only the new part. Cached blocks nobody uses are evicted when a
 * shadow needs blocks.
 *
 * Invariants: a shadow holds exactly ceil(n_computed / block_size) blocks of the draft's pool and
 * its tokens[0 .. n_computed) are what its KV was computed from; it writes only into blocks it
 * alone holds (a shared block cut in the middle is dropped, draft__cut). Shadows hang off their target
 * sequence (seq.spec_state) and are freed by release (sched_release calls it when the sequence
 * finishes). The draft's KV budget is a share of the engine's, taken before the target's blocks
 * are counted (engine.c). The proposer is for few streams (the scheduler proposes nothing above
 * --spec-disable-batch decoding sequences, which bounds a batch: max_seqs).
 * Engine thread only.
 */
#include "engine/spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/block_pool.h"
#include "cache/radix.h"
#include "engine/batch.h"
#include "engine/forward.h"
#include "engine/sampler.h"

/* Most tokens of catch-up per output token left for a sequence to propose (draft__shadow). */
#define DRAFT_CATCHUP_PER_LEFT 8

typedef struct draft {
    spec_proposer base; /* first: the interface's pointer is this struct */
    model *m;           /* owned */
    backend *be;        /* owned */
    fwd *f;             /* owned */
    kv_geom g;
    block_pool *bp;     /* the draft's KV blocks */
    rdx_tree *tree;     /* the draft's prefix cache over bp */
    batch_buf bb;
    float *logits;      /* [max_seqs][n_vocab] */
    int n_vocab, max_tokens, max_seqs;
    int64_t cached;     /* tokens shadows took from the prefix cache */
    const int32_t *eog; /* borrowed */
    int n_eog;
} draft;

/* Room for n tokens in the shadow's token array. 0 or -ENOMEM. */
static int draft__room(seq *sh, int n)
{
    if (n <= sh->cap) return 0;
    int32_t *t = realloc(sh->tokens, (size_t)n * 2 * sizeof *t);
    if (!t) return -ENOMEM;
    sh->tokens = t;
    sh->cap = n * 2;
    return 0;
}

/* The shadow's blocks past its first `keep` KV entries go back to the pool. A block cut in
 * the middle that others share (the prefix cache, another shadow) goes too, back to the block
 * boundary: the shadow would write its next entries into it. */
static void draft__cut(draft *d, seq *sh, int keep)
{
    int bs = d->g.block_size, need = (keep + bs - 1) / bs;
    seq_kv *k = &sh->kv[0];
    if (keep % bs && need <= k->n_blocks && bp_refcount(d->bp, k->bt[need - 1]) > 1) need = keep / bs;
    if (keep > need * bs) keep = need * bs;
    while (k->n_blocks > need) bp_unref(d->bp, k->bt[--k->n_blocks]);
    if (sh->n_computed > keep) sh->n_computed = keep;
}

/* An empty shadow starts from the draft's prefix cache: the full blocks it holds of s's tokens
 * before the last (whose logits are needed), shared with the cache. */
static void draft__match(draft *d, seq *sh, const seq *s)
{
    int bs = d->g.block_size, max = (s->n_tokens - 1) / bs;
    if (sh->n_computed || max <= 0 || draft__room(sh, s->n_tokens) || seq_reserve_blocks(sh, 0, max)) return;
    int got = rdx_match(d->tree, s->tokens, max * bs, sh->kv[0].bt, max);
    sh->kv[0].n_blocks = got / bs;
    sh->n_computed = got;
    d->cached += got;
    memcpy(sh->tokens, s->tokens, (size_t)got * sizeof *s->tokens);
}

/* Offers the shadow's computed full blocks among its first n tokens to the prefix cache (blocks
 * it has already keep the cache's). While its sequence runs, n stops at the sequence's known
 * tokens: a block holding guesses may be cut back into, and a shared one would then be
 * recomputed from its start (draft__cut). */
static void draft__offer(draft *d, seq *sh, int n)
{
    int bs = d->g.block_size;
    n = n < sh->n_computed ? n : sh->n_computed;
    if (n >= bs) (void)rdx_insert(d->tree, sh->tokens, n / bs * bs, sh->kv[0].bt); /* -ENOMEM: not cached */
}

/* Room for n tokens in the shadow's token array and blocks for its first n_kv entries. 0,
 * -ENOSPC (the pool is short) or -ENOMEM. */
static int draft__reserve(draft *d, seq *sh, int n, int n_kv)
{
    if (draft__room(sh, n)) return -ENOMEM;
    int bs = d->g.block_size, need = (n_kv + bs - 1) / bs, have = sh->kv[0].n_blocks;
    if (need <= have) return 0;
    if (seq_reserve_blocks(sh, 0, need)) return -ENOMEM;
    if (bp_num_free(d->bp) < need - have) rdx_evict_until(d->tree, d->bp, need - have, 0);
    if (bp_alloc(d->bp, need - have, sh->kv[0].bt + have)) return -ENOSPC;
    sh->kv[0].n_blocks = need;
    return 0;
}

/* Brings s's shadow (created on first use) up to s's tokens: keeps its longest prefix that
 * agrees with s (never s's last token: its logits are needed), reserves blocks for what is to
 * compute plus k - 1 guesses, and copies s's tokens. The shadow, or NULL when the pool cannot
 * hold it (s proposes nothing this step). */
static seq *draft__shadow(draft *d, seq *s, int k)
{
    seq *sh = s->spec_state;
    if (!sh) {
        sh = seq_create(s->tokens, s->n_tokens, k + 1);
        if (!sh) return NULL;
        sh->n_tokens = 0;
        s->spec_state = sh;
    }
    int lcp = 0, lim = s->n_tokens - 1 < sh->n_computed ? s->n_tokens - 1 : sh->n_computed;
    while (lcp < lim && sh->tokens[lcp] == s->tokens[lcp]) lcp++;
    draft__cut(d, sh, lcp);
    draft__match(d, sh, s);
    /* A catch-up far longer than what is left to generate costs more than speculation can save:
     * each token the draft catches up is a prefill token of the draft, each token left saves at
     * most a share of a decode step of the target (on a 2-core CPU with a 1/6-size draft the two
     * break even near 13 catch-up tokens per token left). A sequence that stopped speculating in a
     * full batch and is among the last few running has its whole history to catch up for a
     * handful of tokens. */
    int need = s->n_tokens - sh->n_computed, left = s->max_tokens - seq_n_output(s);
    if (need > DRAFT_CATCHUP_PER_LEFT * left && need > 2 * d->g.block_size) return NULL;
    int rc = draft__reserve(d, sh, s->n_tokens + k, s->n_tokens + k - 1);
    if (rc == -ENOSPC) { /* start this shadow over rather than fail: its blocks may be enough */
        draft__cut(d, sh, 0);
        rc = draft__reserve(d, sh, s->n_tokens + k, s->n_tokens + k - 1);
    }
    if (rc) {
        draft__cut(d, sh, 0);
        return NULL;
    }
    memcpy(sh->tokens, s->tokens, (size_t)s->n_tokens * sizeof *s->tokens);
    sh->n_tokens = s->n_tokens;
    return sh;
}

/* The draft's guess for the token of s at index sh->n_tokens from its logits there: the token
 * s's own sampler would draw from them — the same parameters (penalties over s's tokens and the
 * guesses before, bias, bans, temperature, top-k/p, min-p; not a grammar's mask) and the same
 * random number, the one keyed by that position (engine/sampler.h). A greedy request's guess is
 * the argmax of the adjusted logits. A sampled one's is coupled with the target's draw: both walk
 * their distribution with one uniform, so where the two are close they land on the same token —
 * acceptance near Σ min(p, q) rather than the p(argmax q) of a greedy guess — while the token the
 * target draws is still exactly the one it draws without speculation. logits is scratch. */
static int32_t draft__guess(const draft *d, const seq *s, const seq *sh, float *logits)
{
    smp_params p = s->sp; /* a shallow copy: only read */
    p.n_logprobs = -1;
    smp_rng rng = s->rng;
    smp_history h = {sh->tokens, s->n_prompt, sh->tokens + s->n_prompt, sh->n_tokens - s->n_prompt};
    smp_result r;
    (void)smp_sample(&p, &rng, logits, d->n_vocab, &h, d->eog, d->n_eog, &r); /* -ENOMEM: the greedy token */
    return r.token;
}

/* Computes every shadow sh[i] (NULL: skipped) up to its n_tokens, as few batched steps of at
 * most max_tokens tokens as that takes (a long catch-up goes in chunks), and sets t[i] to the
 * guess from its last token's logits for s[i] (draft__guess). 0 or a negative errno. */
static int draft__run(draft *d, seq *const *s, seq *const *sh, int n, int32_t *t)
{
    batch_entry e[n];
    int row_of[n];
    for (;;) {
        int m = 0, room = d->max_tokens;
        for (int i = 0; i < n && room > 0; i++) {
            int rem = sh[i] ? sh[i]->n_tokens - sh[i]->n_computed : 0;
            if (rem <= 0) continue;
            int take = rem < room ? rem : room;
            e[m] = (batch_entry){sh[i], take, take == rem, 0, 0, 0};
            row_of[m++] = i;
            room -= take;
        }
        if (!m) return 0;
        int rc = batch_build(&d->bb, e, m, d->g.block_size, 1, NULL);
        if (!rc) rc = fwd_run(d->f, &d->bb.b, d->logits);
        if (rc) return rc;
        for (int j = 0, r = 0; j < m; j++) {
            e[j].s->n_computed += e[j].n_new;
            if (e[j].samples) t[row_of[j]] = draft__guess(d, s[row_of[j]], e[j].s, d->logits + (size_t)r++ * d->n_vocab);
        }
    }
}

/* Drafts for up to max_seqs sequences at once: their shadows catch up together, then each
 * further guess is one batched step of one token per sequence still short of its k. */
static void draft__propose_group(draft *d, seq *const *s, const int *k, int n, int *n_out)
{
    seq *sh[n];
    int32_t t[n];
    for (int i = 0; i < n; i++) {
        n_out[i] = 0;
        sh[i] = draft__shadow(d, s[i], k[i]);
    }
    int rc = draft__run(d, s, sh, n, t);
    while (!rc) {
        int more = 0;
        for (int i = 0; i < n; i++) {
            if (!sh[i]) continue;
            s[i]->draft[n_out[i]++] = t[i];
            if (n_out[i] == k[i]) {
                sh[i] = NULL; /* done: its own pointer stays in s[i]->spec_state */
                continue;
            }
            sh[i]->tokens[sh[i]->n_tokens++] = t[i];
            more = 1;
        }
        if (!more) break;
        rc = draft__run(d, s, sh, n, t);
    }
    for (int i = 0; i < n; i++) {
        seq *h = s[i]->spec_state;
        if (!h) continue;
        if (rc) draft__cut(d, h, 0); /* a failed step: start the shadow over next time */
        draft__cut(d, h, h->n_computed); /* the blocks reserved for guesses not computed */
        draft__offer(d, h, s[i]->n_tokens - 1);
    }
}

static void draft_propose(spec_proposer *p, seq *const *s, const int *k, int n, int *n_out)
{
    draft *d = (draft *)p;
    for (int i = 0; i < n; i += d->max_seqs)
        draft__propose_group(d, s + i, k + i, n - i < d->max_seqs ? n - i : d->max_seqs, n_out + i);
}

static void draft_release(spec_proposer *p, seq *s)
{
    draft *d = (draft *)p;
    seq *sh = s->spec_state;
    if (!sh) return;
    draft__offer(d, sh, sh->n_computed);
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
    rdx_destroy(d->tree);
    bp_destroy(d->bp);
    if (d->be) d->be->ops->destroy(d->be);
    model_destroy(d->m);
    free(d);
}

static const spec_ops draft_ops = {draft_propose, draft_release, draft_destroy};

int64_t spec_draft_cached_tokens(const spec_proposer *p)
{
    return ((const draft *)p)->cached;
}

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
    d->max_seqs = c->max_seqs > 0 ? c->max_seqs : 1;
    d->eog = c->eog;
    d->n_eog = c->n_eog;
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
    d->tree = d->bp ? rdx_create(d->bp, c->block_size) : NULL;
    d->f = fwd_create(c->m, d->be, &d->g, &nb, c->max_tokens, d->max_seqs, err, err_len);
    d->logits = malloc((size_t)d->max_seqs * d->n_vocab * sizeof *d->logits);
    if (!d->bp || !d->tree || !d->f || !d->logits || batch_init(&d->bb, c->max_tokens, d->max_seqs, d->max_seqs)) {
        if (d->f && d->bp && d->logits) snprintf(err, err_len, "out of memory for the draft model");
        d->m = NULL;
        draft_destroy(&d->base);
        return NULL;
    }
    return &d->base;
}
