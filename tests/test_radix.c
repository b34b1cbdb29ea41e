/*
 * test_radix.c — the radix prefix cache against a brute-force model.
 *
 * The model stores every cached block as one entry keyed by its block id: the whole token prefix
 * it completes, its parent block, its child count and the logical time it was last used. A
 * match is "the longest run of prefixes that all have an entry"; eviction repeatedly removes the
 * least recently used entry that nothing extends and only the cache references. The tests
 * play the scheduler's part (match, allocate, insert, release, evict under pressure) and compare
 * every result, every refcount of the pool, and rdx_check/bp_check after every operation.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/block_pool.h"
#include "cache/radix.h"
#include "tests/radix_harness.h"

/* ---- small scenarios --------------------------------------------------------------------- */

static void trx_unref_all(block_pool *bp, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) bp_unref(bp, ids[i]);
}

Test(radix, basics_split_and_lru)
{
    block_pool *bp = bp_create(8);
    rdx_tree *t = rdx_create(bp, 2);
    cr_assert_not_null(t);
    rdx_check(t);
    int32_t a[2], c[1], got[4] = {-1, -1, -1, -1};
    cr_assert_eq(bp_alloc(bp, 2, a), 0);
    const int32_t p1[] = {1, 2, 3, 4, 5};
    cr_assert_eq(rdx_insert(t, p1, 5, a), 2, "only the two full blocks are indexed");
    rdx_check(t);
    cr_assert_eq(rdx_n_blocks(t), 2);
    cr_assert_eq(bp_refcount(bp, a[0]), 2);
    cr_assert_eq(rdx_n_evictable(t), 0, "the caller still holds both blocks");
    trx_unref_all(bp, a, 2);
    cr_assert_eq(rdx_n_evictable(t), 2);

    const int32_t q1[] = {1, 2, 3, 4, 9, 9};
    cr_assert_eq(rdx_match(t, q1, 6, got, 4), 4);
    cr_assert_eq(got[0], a[0]);
    cr_assert_eq(got[1], a[1]);
    cr_assert_eq(bp_refcount(bp, a[1]), 2);
    trx_unref_all(bp, got, 2);

    const int32_t q2[] = {1, 2, 7, 7};
    cr_assert_eq(rdx_match(t, q2, 4, got, 4), 2, "a partial edge match splits at the block");
    rdx_check(t);
    cr_assert_eq(got[0], a[0]);
    cr_assert_eq(bp_alloc(bp, 1, c), 0);
    int32_t table[2] = {got[0], c[0]};
    cr_assert_eq(rdx_insert(t, q2, 4, table), 1);
    rdx_check(t);
    cr_assert_eq(rdx_n_blocks(t), 3);
    bp_unref(bp, got[0]);
    bp_unref(bp, c[0]);

    /* [3,4] was last used before [7,7] was inserted: it goes first. */
    cr_assert_eq(rdx_n_evictable(t), 3);
    cr_assert_eq(rdx_evict(t, 1), 1);
    rdx_check(t);
    cr_assert_eq(bp_refcount(bp, a[1]), 0);
    cr_assert_eq(bp_refcount(bp, c[0]), 1);
    cr_assert_eq(rdx_match(t, q1, 6, got, 4), 2);
    bp_unref(bp, got[0]);
    cr_assert_eq(rdx_evict(t, 100), 2);
    rdx_check(t);
    cr_assert_eq(rdx_n_blocks(t), 0);
    cr_assert_eq(bp_num_free(bp), 8);
    rdx_destroy(t);
    bp_check(bp);
    bp_destroy(bp);
}

/* A path whose early blocks only the tree holds while a user holds its last: plain eviction
 * cannot reach them (they are not a leaf); forced eviction unlinks the leaf (its block stays with
 * the user) and frees the early ones. */
Test(radix, forced_eviction_frees_blocks_behind_a_used_leaf)
{
    block_pool *bp = bp_create(6);
    rdx_tree *t = rdx_create(bp, 1);
    int32_t a[4];
    cr_assert_eq(bp_alloc(bp, 4, a), 0);
    const int32_t p[] = {1, 2, 3, 4};
    cr_assert_eq(rdx_insert(t, p, 4, a), 4);
    trx_unref_all(bp, a, 3); /* a window released blocks 0 .. 2 and keeps block 3 */
    rdx_check(t);
    cr_assert_eq(rdx_evict(t, 3), 0, "the last block is in use: nothing is a free leaf");
    cr_assert_eq(rdx_n_blocks(t), 4);
    cr_assert_eq(rdx_evict_forced(t, 2), 3, "the whole leaf node goes: blocks 0 .. 2 free, block 3 is the user's");
    rdx_check(t);
    cr_assert_eq(rdx_n_blocks(t), 0);
    cr_assert_eq(bp_num_free(bp), 5);
    cr_assert_eq(bp_refcount(bp, a[3]), 1);
    bp_unref(bp, a[3]);
    bp_check(bp);
    rdx_destroy(t);
    bp_destroy(bp);
}

Test(radix, duplicates_limits_and_tail_eviction)
{
    block_pool *bp = bp_create(16);
    rdx_tree *t = rdx_create(bp, 2);
    int32_t a[4], d[4], got[4];
    const int32_t p[] = {5, 6, 7, 8, 9, 10, 11, 12};
    cr_assert_eq(bp_alloc(bp, 4, a), 0);
    cr_assert_eq(rdx_insert(t, p, 8, a), 4);
    cr_assert_eq(bp_alloc(bp, 4, d), 0);
    cr_assert_eq(rdx_insert(t, p, 8, d), 0, "a cached prefix keeps the tree's blocks");
    for (int i = 0; i < 4; i++) cr_assert_eq(bp_refcount(bp, d[i]), 1);
    trx_unref_all(bp, d, 4);
    trx_unref_all(bp, a, 4);
    rdx_check(t);

    cr_assert_eq(rdx_match(t, p, 1, got, 4), 0, "less than a block matches nothing");
    cr_assert_eq(rdx_match(t, p, 7, got, 4), 6, "only whole blocks of the query count");
    trx_unref_all(bp, got, 3);
    cr_assert_eq(rdx_match(t, p, 8, got, 2), 4, "max_blocks bounds the match");
    rdx_check(t);

    /* The caller holds the first two blocks: only the tail can go. */
    cr_assert_eq(rdx_n_evictable(t), 2);
    cr_assert_eq(rdx_evict(t, 100), 2);
    rdx_check(t);
    cr_assert_eq(rdx_n_blocks(t), 2);
    cr_assert_eq(rdx_evict(t, 100), 0, "referenced blocks are never evicted");
    trx_unref_all(bp, got, 2);
    cr_assert_eq(rdx_evict(t, 1), 1, "evict frees at most what was asked");
    cr_assert_eq(rdx_n_blocks(t), 1);
    rdx_check(t);
    rdx_destroy(t); /* drops the last reference */
    cr_assert_eq(bp_num_free(bp), 16);
    bp_destroy(bp);
}

/* ---- randomised comparison with the model ------------------------------------------------ */

typedef struct trx_entry {
    int live;
    int depth;                 /* blocks in the prefix this block completes */
    int32_t parent;            /* block id of the previous block, -1 at depth 1 */
    int n_children;            /* live entries whose parent is this one */
    uint64_t time;             /* logical time of last use */
    int32_t tokens[TRX_MAX_BLK * TRX_MAX_BS]; /* [depth × bs] the whole prefix */
} trx_entry;

typedef struct trx_model {
    int bs;
    uint64_t clock;
    trx_entry e[TRX_POOL]; /* indexed by block id */
    int held[TRX_POOL];    /* references the test itself holds, per block */
} trx_model;

/* Block id of the cached entry for tokens[0 .. depth × bs), or -1. */
static int32_t trx_find(const trx_model *m, const int32_t *tokens, int depth)
{
    for (int32_t b = 0; b < TRX_POOL; b++) {
        const trx_entry *x = &m->e[b];
        if (x->live && x->depth == depth &&
            memcmp(x->tokens, tokens, (size_t)depth * m->bs * sizeof *tokens) == 0)
            return b;
    }
    return -1;
}

static int trx_model_match(trx_model *m, const int32_t *tokens, int n_tokens, int max_blocks,
                           int32_t *ids)
{
    int n_blk = n_tokens / m->bs, k = 0;
    if (n_blk > max_blocks) n_blk = max_blocks;
    m->clock++;
    for (; k < n_blk; k++) {
        int32_t b = trx_find(m, tokens, k + 1);
        if (b < 0) break;
        m->e[b].time = m->clock;
        ids[k] = b;
    }
    return k;
}

static int trx_model_insert(trx_model *m, const int32_t *tokens, int n_tokens, const int32_t *ids)
{
    int n_blk = n_tokens / m->bs, n_new = 0;
    int32_t parent = -1;
    m->clock++;
    for (int d = 1; d <= n_blk; d++) {
        int32_t b = trx_find(m, tokens, d);
        if (b < 0) {
            b = ids[d - 1];
            trx_entry *x = &m->e[b];
            cr_assert(!x->live, "test bug: block %d indexed twice", b);
            x->live = 1;
            x->depth = d;
            x->parent = parent;
            x->n_children = 0;
            memcpy(x->tokens, tokens, (size_t)d * m->bs * sizeof *tokens);
            if (parent >= 0) m->e[parent].n_children++;
            n_new++;
        }
        m->e[b].time = m->clock;
        parent = b;
    }
    return n_new;
}

/* Most leading tokens of tokens[k × bs ..] (fewer than a block, at most n_tokens - k × bs) that
 * a cached block continuing the first k blocks agrees on. */
static int trx_model_partial(const trx_model *m, const int32_t *tokens, int n_tokens, int k)
{
    int bs = m->bs, lim = n_tokens - k * bs < bs - 1 ? n_tokens - k * bs : bs - 1, best = 0;
    for (int32_t b = 0; b < TRX_POOL; b++) {
        const trx_entry *x = &m->e[b];
        if (!x->live || x->depth != k + 1 || memcmp(x->tokens, tokens, (size_t)k * bs * sizeof *tokens))
            continue;
        int a = 0;
        while (a < lim && x->tokens[k * bs + a] == tokens[k * bs + a]) a++;
        best = a > best ? a : best;
    }
    return best;
}

/* Removes LRU childless entries that only the cache references, up to n; returns the count. */
static int trx_model_evict(trx_model *m, int n)
{
    int freed = 0;
    while (freed < n) {
        int32_t best = -1;
        int tie = 0;
        for (int32_t b = 0; b < TRX_POOL; b++) {
            const trx_entry *x = &m->e[b];
            if (!x->live || x->n_children > 0 || m->held[b] > 0) continue;
            if (best >= 0 && x->time == m->e[best].time) tie = 1;
            if (best < 0 || x->time < m->e[best].time) {
                best = b;
                tie = 0;
            }
        }
        if (best < 0) break;
        cr_assert(!tie, "two leaves last used at the same time: LRU order is ambiguous");
        m->e[best].live = 0;
        if (m->e[best].parent >= 0) m->e[m->e[best].parent].n_children--;
        freed++;
    }
    return freed;
}

/* Blocks that repeated eviction would free: unheld entries all of whose descendants are too. */
static int trx_model_evictable(const trx_model *m)
{
    int blocked[TRX_POOL] = {0}, count = 0; /* blocked: some descendant is held */
    for (int d = TRX_MAX_BLK; d >= 1; d--)
        for (int32_t b = 0; b < TRX_POOL; b++) {
            const trx_entry *x = &m->e[b];
            if (!x->live || x->depth != d) continue;
            int ev = m->held[b] == 0 && !blocked[b];
            count += ev;
            if (!ev && x->parent >= 0) blocked[x->parent] = 1;
        }
    return count;
}

/* Compares every observable of the tree and the pool with the model. */
static void trx_compare(const trx_model *m, const rdx_tree *t, const block_pool *bp)
{
    rdx_check(t);
    bp_check(bp);
    int n_live = 0;
    for (int32_t b = 0; b < TRX_POOL; b++) {
        n_live += m->e[b].live;
        int want = m->e[b].live + m->held[b];
        cr_assert_eq(bp_refcount(bp, b), want, "block %d: refcount %d, model %d", b,
                     bp_refcount(bp, b), want);
    }
    cr_assert_eq(rdx_n_blocks(t), n_live);
    cr_assert_eq(rdx_n_evictable(t), trx_model_evictable(m));
}

static void trx_release(trx_model *m, block_pool *bp, trx_seq *seqs, int *n_seqs, int i)
{
    for (int j = 0; j < seqs[i].n; j++) {
        bp_unref(bp, seqs[i].ids[j]);
        m->held[seqs[i].ids[j]]--;
    }
    seqs[i] = seqs[--*n_seqs];
}

/* Evicts as the scheduler would when short of blocks, checking the count against the model. */
static void trx_evict(trx_model *m, rdx_tree *t, int n)
{
    int want = trx_model_evict(m, n);
    cr_assert_eq(rdx_evict(t, n), want, "evict(%d)", n);
}

static int trx_partials; /* partial continuations seen (the run must exercise them) */

/* One request: match, optionally allocate and insert the rest, keep the references. */
static void trx_request(trx_model *m, rdx_tree *t, block_pool *bp, uint64_t *rng,
                        const int32_t *tok, int len, trx_seq *s, int use_match)
{
    int n_blk = len / m->bs, k = 0, max_blocks = n_blk;
    int32_t want[TRX_MAX_BLK], got[TRX_MAX_BLK + 1];
    if (use_match) {
        if (tu_xorshift(rng) % 4 == 0) max_blocks = (int)(tu_xorshift(rng) % (uint64_t)(n_blk + 1));
        got[max_blocks] = -7; /* must stay unwritten */
        k = trx_model_match(m, tok, len, max_blocks, want);
        cr_assert_eq(rdx_match(t, tok, len, got, max_blocks), k * m->bs);
        cr_assert_eq(got[max_blocks], -7);
        for (int i = 0; i < k; i++) {
            cr_assert_eq(got[i], want[i], "matched block %d", i);
            m->held[got[i]]++;
        }
        /* The best partial continuation: its length, and a block that really agrees that far. */
        int32_t pb = -1;
        int part = rdx_match_partial(t, tok, len, k * m->bs, &pb);
        cr_assert_eq(part, trx_model_partial(m, tok, len, k), "partial match after %d blocks", k);
        trx_partials += part > 0;
        if (part > 0) {
            cr_assert(pb >= 0 && pb < TRX_POOL && m->e[pb].live && m->e[pb].depth == k + 1);
            cr_assert_eq(memcmp(m->e[pb].tokens, tok, (size_t)(k * m->bs + part) * sizeof *tok), 0);
        }
    }
    s->n = k;
    memcpy(s->ids, got, (size_t)k * sizeof *got);
    if (tu_xorshift(rng) % 4 == 0) return; /* a match only (e.g. a request that is then cancelled) */
    int need = n_blk - k;
    if (bp_num_free(bp) < need) trx_evict(m, t, need - bp_num_free(bp));
    if (bp_num_free(bp) < need) return;
    cr_assert_eq(bp_alloc(bp, need, s->ids + k), 0);
    for (int i = k; i < n_blk; i++) m->held[s->ids[i]]++;
    s->n = n_blk;
    int want_new = trx_model_insert(m, tok, len, s->ids);
    cr_assert_eq(rdx_insert(t, tok, len, s->ids), want_new);
}

static void trx_random_run(int bs, uint64_t seed, int n_ops)
{
    fprintf(stderr, "radix/random: block_size %d seed %llu (replay with KVSERVE_TEST_SEED)\n", bs,
            (unsigned long long)seed);
    uint64_t rng = seed;
    static trx_model m;
    static int32_t hist[TRX_HIST][TRX_MAX_TOK];
    int hist_len[TRX_HIST], n_hist = 0;
    memset(&m, 0, sizeof m);
    trx_partials = 0;
    m.bs = bs;
    block_pool *bp = bp_create(TRX_POOL);
    rdx_tree *t = rdx_create(bp, bs);
    cr_assert_not_null(t);
    trx_seq seqs[TRX_SEQS];
    int n_seqs = 0;
    int32_t tok[TRX_MAX_TOK];
    for (int op = 0; op < n_ops; op++) {
        int r = (int)(tu_xorshift(&rng) % 10);
        if (r < 6) {
            if (n_seqs == TRX_SEQS)
                trx_release(&m, bp, seqs, &n_seqs, (int)(tu_xorshift(&rng) % TRX_SEQS));
            int len = trx_gen(&rng, bs, hist, hist_len, &n_hist, tok);
            /* r == 0: the prefix was computed concurrently, without a match: duplicates. */
            trx_request(&m, t, bp, &rng, tok, len, &seqs[n_seqs++], r != 0);
        } else if (r < 8) {
            if (n_seqs > 0)
                trx_release(&m, bp, seqs, &n_seqs, (int)(tu_xorshift(&rng) % (uint64_t)n_seqs));
        } else {
            trx_evict(&m, t, 1 + (int)(tu_xorshift(&rng) % 8));
        }
        trx_compare(&m, t, bp);
    }
    while (n_seqs > 0) trx_release(&m, bp, seqs, &n_seqs, n_seqs - 1);
    trx_compare(&m, t, bp);
    if (bs > 1) cr_assert_gt(trx_partials, n_ops / 50, "only %d partial continuations", trx_partials);
    int n = rdx_n_blocks(t);
    cr_assert_eq(rdx_n_evictable(t), n, "nothing is held: everything is evictable");
    trx_evict(&m, t, INT_MAX);
    trx_compare(&m, t, bp);
    cr_assert_eq(rdx_n_blocks(t), 0);
    cr_assert_eq(bp_num_free(bp), TRX_POOL, "evicting everything frees every block");
    rdx_destroy(t);
    bp_destroy(bp);
}

Test(radix, random_vs_model_bs1)
{
    trx_random_run(1, tu_seed(0x5eed0001), 6000);
}

Test(radix, random_vs_model_bs2)
{
    trx_random_run(2, tu_seed(0x5eed0002), 6000);
}

Test(radix, random_vs_model_bs4)
{
    trx_random_run(4, tu_seed(0x5eed0004), 6000);
}

/* ---- hooks: a companion per indexed block, freed with it ---------------------------------- */

/* The owner's side of the hooks, as the scheduler keeps it for a second layer group: comp[b]
 * is the block of pool2 that goes with indexed block b (a reference held), taken from the
 * inserting caller's companion table `ins` at the block's position. */
typedef struct trh_owner {
    block_pool *pool2;
    int32_t comp[TRX_POOL];
    const int32_t *ins;   /* companions of the blocks being inserted */
    int n_indexed, n_released;
} trh_owner;

static void trh_indexed(void *ud, int32_t block, int pos)
{
    trh_owner *o = ud;
    cr_assert(o->ins, "indexed outside an insert");
    cr_assert_eq(o->comp[block], -1, "block %d indexed twice", block);
    o->comp[block] = o->ins[pos];
    bp_ref(o->pool2, o->ins[pos]);
    o->n_indexed++;
}

static void trh_released(void *ud, int32_t block)
{
    trh_owner *o = ud;
    cr_assert_geq(o->comp[block], 0, "block %d released but not indexed", block);
    bp_unref(o->pool2, o->comp[block]);
    o->comp[block] = -1;
    o->n_released++;
}

/* The tree's blocks are exactly those with a companion; pool2's references are the
 * companions' and the users'. */
static void trh_compare(const trh_owner *o, const rdx_tree *t, int n_held2)
{
    int32_t ids[TRX_POOL];
    int n = rdx_list_blocks(t, ids), with = 0;
    cr_assert_eq(n, rdx_n_blocks(t));
    for (int i = 0; i < n; i++) cr_assert_geq(o->comp[ids[i]], 0, "indexed block %d has no companion", ids[i]);
    for (int b = 0; b < TRX_POOL; b++) with += o->comp[b] >= 0;
    cr_assert_eq(with, n);
    int64_t refs = 0;
    for (int32_t b = 0; b < TRX_POOL; b++) refs += bp_refcount(o->pool2, b);
    cr_assert_eq(refs, with + n_held2);
}

/* Random inserts, matches, releases and evictions (plain, forced, and until a second pool has
 * room) with the hooks keeping companions: they pair up, stay in step with the tree, and
 * rdx_evict_until stops once the goal is met or nothing more can go. */
Test(radix, hooks_keep_companions_in_step)
{
    uint64_t seed = tu_seed(0x40c5ull), rng = seed;
    printf("radix/hooks: seed %llu (replay with KVSERVE_TEST_SEED)\n", (unsigned long long)seed);
    int bs = 2;
    block_pool *bp = bp_create(TRX_POOL);
    trh_owner o = {.pool2 = bp_create(TRX_POOL)};
    for (int b = 0; b < TRX_POOL; b++) o.comp[b] = -1;
    rdx_tree *t = rdx_create(bp, bs);
    rdx_hooks h = {trh_indexed, trh_released, &o};
    cr_assert_eq(rdx_set_hooks(t, &h), 0);
    /* users: (group-0 blocks, companions) of live requests */
    int32_t u0[TRX_SEQS][TRX_MAX_BLK], u2[TRX_SEQS][TRX_MAX_BLK], un[TRX_SEQS], n_users = 0, n_held2 = 0;
    int32_t hist[TRX_HIST][TRX_MAX_TOK], hist_len[TRX_HIST], n_hist = 0, tok[TRX_MAX_TOK];
    for (int op = 0; op < 3000; op++) {
        int len = trx_gen(&rng, bs, hist, hist_len, &n_hist, tok), nb = len / bs;
        uint64_t r = tu_xorshift(&rng) % 10;
        if (r < 5 && n_users < TRX_SEQS) { /* a request: match, compute the rest, insert */
            int32_t *a = u0[n_users], *c = u2[n_users];
            int k = rdx_match(t, tok, len, a, nb) / bs;
            for (int i = 0; i < k; i++) {
                c[i] = o.comp[a[i]];
                bp_ref(o.pool2, c[i]);
            }
            if (bp_num_free(bp) < nb - k) rdx_evict(t, nb - k - bp_num_free(bp));
            if (bp_num_free(o.pool2) < nb - k) rdx_evict_until(t, o.pool2, nb - k, (int)(r & 1));
            int ok0 = !bp_alloc(bp, nb - k, a + k), ok2 = ok0 && !bp_alloc(o.pool2, nb - k, c + k);
            if (!ok2) { /* short: the request does not run */
                if (ok0) trx_unref_all(bp, a + k, nb - k);
                trx_unref_all(bp, a, k);
                trx_unref_all(o.pool2, c, k);
                continue;
            }
            o.ins = c;
            rdx_insert(t, tok, len, a);
            o.ins = NULL;
            un[n_users++] = nb;
            n_held2 += nb;
        } else if (r < 8 && n_users > 0) { /* a request ends */
            int i = (int)(tu_xorshift(&rng) % (uint64_t)n_users);
            trx_unref_all(bp, u0[i], un[i]);
            trx_unref_all(o.pool2, u2[i], un[i]);
            n_held2 -= un[i];
            n_users--;
            memmove(u0[i], u0[n_users], sizeof u0[i]);
            memmove(u2[i], u2[n_users], sizeof u2[i]);
            un[i] = un[n_users];
        } else { /* pressure on the second pool */
            int32_t want = (int32_t)(tu_xorshift(&rng) % TRX_POOL);
            int forced = (int)(tu_xorshift(&rng) & 1);
            int32_t before = bp_num_free(o.pool2);
            rdx_evict_until(t, o.pool2, want, forced);
            if (!forced && before < want && bp_num_free(o.pool2) >= want) /* one companion per block: no overshoot */
                cr_assert_eq(bp_num_free(o.pool2), want, "evicted past the goal");
            if (!forced && before >= want) cr_assert_eq(bp_num_free(o.pool2), before, "evicted with the goal met");
            if (bp_num_free(o.pool2) < want) {
                if (forced) cr_assert_eq(rdx_n_blocks(t), 0, "forced: short of %d, yet blocks left", want);
                else cr_assert_eq(rdx_n_evictable(t), 0, "short of %d with evictable blocks left", want);
            }
        }
        rdx_check(t);
        bp_check(bp);
        bp_check(o.pool2);
        trh_compare(&o, t, n_held2);
    }
    cr_assert_gt(o.n_released, 0);
    while (n_users > 0) {
        n_users--;
        trx_unref_all(bp, u0[n_users], un[n_users]);
        trx_unref_all(o.pool2, u2[n_users], un[n_users]);
    }
    rdx_destroy(t);
    cr_assert_eq(o.n_indexed, o.n_released, "destroy releases every block");
    cr_assert_eq(bp_num_free(bp), TRX_POOL);
    cr_assert_eq(bp_num_free(o.pool2), TRX_POOL);
    bp_destroy(bp);
    bp_destroy(o.pool2);
}

/* ---- allocation failures ----------------------------------------------------------------- */

/* A second copy of the tree, under other names, whose allocations fail on demand: every failed
 * call must return -ENOMEM and leave the cached content, the references and (for inserts) the
 * structure exactly as they were. */
static long trx_alloc_left = -1; /* allocations that still succeed; < 0: all of them */

static int trx_oom_hit(void)
{
    if (trx_alloc_left < 0) return 0;
    if (trx_alloc_left == 0) return 1;
    trx_alloc_left--;
    return 0;
}
static void *trx_malloc(size_t n)
{
    return trx_oom_hit() ? NULL : malloc(n);
}
static void *trx_calloc(size_t n, size_t m)
{
    return trx_oom_hit() ? NULL : calloc(n, m);
}
static void *trx_realloc(void *p, size_t n)
{
    return trx_oom_hit() ? NULL : realloc(p, n);
}

#define malloc trx_malloc
#define calloc trx_calloc
#define realloc trx_realloc
#define rdx_create trx_oom_create
#define rdx_destroy trx_oom_destroy
#define rdx_match trx_oom_match
#define rdx_match_partial trx_oom_match_partial
#define rdx_insert trx_oom_insert
#define rdx_evict trx_oom_evict
#define rdx_evict_forced trx_oom_evict_forced
#define rdx_n_blocks trx_oom_n_blocks
#define rdx_n_evictable trx_oom_n_evictable
#define rdx_check trx_oom_check
#define rdx_set_tier trx_oom_set_tier
#define rdx_n_tiered trx_oom_n_tiered
#define rdx_match_tiered trx_oom_match_tiered
#define rdx_prune_tiered trx_oom_prune_tiered
#define rdx_evict_until trx_oom_evict_until
#define rdx_set_hooks trx_oom_set_hooks
#define rdx_list_blocks trx_oom_list_blocks
#include "cache/radix.c"
#undef malloc
#undef calloc
#undef realloc

/* Per block id: a hash of the whole prefix it completes (0 when not indexed), plus node count
 * and clock, so that content and structure can be compared before and after a failed call. */
static void trx_oom_snapshot(const rdx_tree *t, uint64_t *h, int *n_nodes, uint64_t *clock)
{
    memset(h, 0, TRX_POOL * sizeof *h);
    int n = rdx__list_nodes(t);
    for (int i = 1; i < n; i++) { /* parents come first: their last block's hash is ready */
        const rdx_node *x = t->scratch[i];
        uint64_t acc = x->parent == t->root ? 1469598103934665603ull
                                            : h[x->parent->blocks[x->parent->n_blocks - 1]];
        for (int b = 0; b < x->n_blocks; b++) {
            for (int k = 0; k < t->block_size; k++)
                acc = (acc ^ (uint64_t)(uint32_t)x->tokens[b * t->block_size + k]) * 1099511628211ull;
            h[x->blocks[b]] = acc;
        }
    }
    *n_nodes = t->n_nodes;
    *clock = t->clock;
}

/* One attempt: a tree caching base, then an insert of probe whose k-th allocation fails (k < 0:
 * none fails). with_match: the probe's cached part is matched first (its edge may be split by
 * the match), else the probe comes with fresh blocks for all of it. Returns 1 when the insert
 * succeeded. */
static int trx_oom_attempt(const int32_t *probe, int len, int cached, int with_match, long k)
{
    enum { BS = 2 };
    static const int32_t base[] = {1, 1, 2, 2, 3, 3, 4, 4};
    block_pool *bp = bp_create(TRX_POOL);
    trx_alloc_left = -1;
    rdx_tree *t = trx_oom_create(bp, BS);
    int32_t ids[5], got[5];
    cr_assert_eq(bp_alloc(bp, 4, ids), 0);
    cr_assert_eq(trx_oom_insert(t, base, 8, ids), 4);
    for (int i = 0; i < 4; i++) bp_unref(bp, ids[i]);

    int n_blk = len / BS, m = 0;
    if (with_match) {
        m = trx_oom_match(t, probe, len, got, 5) / BS;
        cr_assert_eq(m, cached);
        memcpy(ids, got, (size_t)m * sizeof *ids);
    }
    cr_assert_eq(bp_alloc(bp, n_blk - m, ids + m), 0);
    uint64_t h0[TRX_POOL], h1[TRX_POOL], c0, c1;
    int n0, n1;
    int32_t rc0[TRX_POOL];
    trx_oom_snapshot(t, h0, &n0, &c0);
    for (int b = 0; b < TRX_POOL; b++) rc0[b] = bp_refcount(bp, b);

    trx_alloc_left = k;
    int r = trx_oom_insert(t, probe, len, ids);
    trx_alloc_left = -1;
    trx_oom_check(t);
    if (r == -ENOMEM) {
        trx_oom_snapshot(t, h1, &n1, &c1);
        cr_assert_arr_eq(h0, h1, sizeof h0, "allocation %ld failed: cached content changed", k);
        cr_assert_eq(n1, n0, "allocation %ld failed: structure changed", k);
        cr_assert_eq(c1, c0, "a failed insert is not a use");
        for (int b = 0; b < TRX_POOL; b++) cr_assert_eq(bp_refcount(bp, b), rc0[b]);
    } else {
        cr_assert_eq(r, n_blk - cached);
    }
    /* A match whose split cannot be allocated still answers. */
    int want = r == -ENOMEM ? cached : n_blk;
    trx_alloc_left = 0;
    cr_assert_eq(trx_oom_match(t, probe, len, got, 5), want * BS);
    trx_alloc_left = -1;
    trx_oom_check(t);
    for (int i = 0; i < want; i++) bp_unref(bp, got[i]);
    for (int i = 0; i < n_blk; i++) bp_unref(bp, ids[i]);
    cr_assert_eq(trx_oom_n_evictable(t), trx_oom_n_blocks(t));
    trx_oom_destroy(t);
    cr_assert_eq(bp_num_free(bp), TRX_POOL);
    bp_destroy(bp);
    return r != -ENOMEM;
}

Test(radix, allocation_failures_change_nothing)
{
    static const int32_t probes[][10] = {
        {1, 1, 2, 2, 9, 9, 8, 8, 7, 7}, /* split + new leaf */
        {1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, /* extends the leaf */
        {6, 6, 5, 5},                   /* new child of the root */
        {1, 1, 2, 2, 3, 3},             /* split only */
    };
    static const int len[] = {10, 10, 4, 6}, cached[] = {2, 4, 0, 3};
    for (int p = 0; p < 4; p++)
        for (int with_match = 0; with_match < 2; with_match++) {
            long k = 0;
            while (!trx_oom_attempt(probes[p], len[p], cached[p], with_match, k)) {
                k++;
                cr_assert(k < 64, "probe %d never succeeded", p);
            }
            cr_log_info("probe %d (match first: %d): %ld allocations can fail", p, with_match, k);
        }
}
