/*
 * test_radix_tier.c — the radix prefix cache with a second KV tier, against a brute-force model
 * of three levels (resident, tiered, absent): what the tree saves and spills to a fake tier, what
 * a match finds in it, and what random drops behind the tree's back leave; every result, every
 * refcount of the pool and rdx_check/bp_check are compared after every operation.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/block_pool.h"
#include "cache/radix.h"
#include "tests/radix_harness.h"

/* ---- with a second tier: three levels against a model -------------------------------------- */

/* The model keeps every prefix the tree indexes as one entry with its level: resident (a block of
 * the pool, with the time of its last use) or tiered (only its key, in the fake tier). The fake
 * tier is a set of keys: saved blocks enter it unless their key is "unsaveable", spilled ones
 * unless it is "unspillable" (key bits decide, the same for model and tree), and random drops
 * take keys out behind the tree's back, as a full tier's LRU would. */

#define TRT_MAX 1024 /* model entries */
#define TRT_TIER 128 /* fake tier keys: a full tier forgets its oldest */

typedef struct trt_entry {
    int live, tiered;
    int depth;                       /* blocks of the prefix */
    int32_t block;                   /* resident: its pool block */
    uint64_t time;                   /* resident: last use */
    hash_key key;
    int32_t tokens[TRX_MAX_BLK * TRX_MAX_BS];
} trt_entry;

typedef struct trt_model {
    int bs;
    uint64_t clock;
    trt_entry e[TRT_MAX];
    int held[TRX_POOL];
    hash_key tier[TRT_TIER];         /* the fake tier's keys */
    int n_tier;
    int64_t saved, spilled;          /* callbacks seen */
    hash_key spill_key[TRX_POOL];    /* the tree's spills of the current eviction, in order ... */
    int spill_kept[TRX_POOL];        /* ... and what the tier answered */
    int n_spill;
    const block_pool *bp;
} trt_model;

static hash_key trt_root(void)
{
    return hash_key_of("trt", 3);
}

static int trt_in_tier(const trt_model *m, hash_key k)
{
    for (int i = 0; i < m->n_tier; i++)
        if (hash_key_eq(m->tier[i], k)) return 1;
    return 0;
}

static void trt_tier_add(trt_model *m, hash_key k)
{
    if (trt_in_tier(m, k)) return;
    if (m->n_tier == TRT_TIER) memmove(m->tier, m->tier + 1, (size_t)--m->n_tier * sizeof *m->tier);
    m->tier[m->n_tier++] = k;
}

static int trt_has(void *ud, hash_key k)
{
    return trt_in_tier(ud, k);
}

static void trt_saved(void *ud, hash_key key, hash_key parent, const int32_t *tokens, int32_t block)
{
    trt_model *m = ud;
    cr_assert(hash_key_eq(key, hash_key_next(parent, tokens, m->bs)), "saved: a key that is not its chain");
    cr_assert(block >= 0 && block < TRX_POOL);
    m->saved++;
    if (key.lo % 5) trt_tier_add(m, key);
}

static int trt_spill(void *ud, hash_key key, hash_key parent, const int32_t *tokens, int32_t block)
{
    trt_model *m = ud;
    cr_assert(hash_key_eq(key, hash_key_next(parent, tokens, m->bs)), "spill: a key that is not its chain");
    cr_assert_eq(bp_refcount(m->bp, block), 1, "spill of a block someone uses");
    m->spilled++;
    if (key.hi % 4) trt_tier_add(m, key);
    cr_assert_lt(m->n_spill, TRX_POOL);
    m->spill_key[m->n_spill] = key;
    return m->spill_kept[m->n_spill++] = trt_in_tier(m, key);
}

/* The entry of tokens[0 .. depth × bs), or -1. */
static int trt_find(const trt_model *m, const int32_t *tokens, int depth)
{
    for (int i = 0; i < TRT_MAX; i++)
        if (m->e[i].live && m->e[i].depth == depth &&
            !memcmp(m->e[i].tokens, tokens, (size_t)depth * m->bs * sizeof *tokens))
            return i;
    return -1;
}

/* 1 when entry a's prefix extends entry b's. */
static int trt_extends(const trt_model *m, const trt_entry *a, const trt_entry *b)
{
    return a->depth > b->depth && !memcmp(a->tokens, b->tokens, (size_t)b->depth * m->bs * sizeof(int32_t));
}

/* Drops entry i and every entry below it (all tiered). */
static void trt_cut(trt_model *m, int i)
{
    trt_entry *x = &m->e[i];
    for (int j = 0; j < TRT_MAX; j++)
        if (j != i && m->e[j].live && trt_extends(m, &m->e[j], x)) {
            cr_assert(m->e[j].tiered, "a resident block below a dropped one");
            m->e[j].live = 0;
        }
    x->live = 0;
}

static int trt_resident_child(const trt_model *m, const trt_entry *x)
{
    for (int j = 0; j < TRT_MAX; j++)
        if (m->e[j].live && !m->e[j].tiered && m->e[j].depth == x->depth + 1 && trt_extends(m, &m->e[j], x))
            return 1;
    return 0;
}

static int trt_match(trt_model *m, const int32_t *tok, int len, int32_t *ids)
{
    int k = 0;
    m->clock++;
    for (; k < len / m->bs; k++) {
        int i = trt_find(m, tok, k + 1);
        if (i < 0 || m->e[i].tiered) break;
        m->e[i].time = m->clock;
        ids[k] = m->e[i].block;
    }
    return k;
}

/* The tiered continuation after k resident blocks (cutting what the tier lost), then the chain. */
static int trt_match_tiered(trt_model *m, const int32_t *tok, int len, int k, hash_key *keys)
{
    int n = 0, d = k + 1;
    hash_key prev = trt_root();
    for (int j = 0; j < k; j++) prev = hash_key_next(prev, tok + j * m->bs, m->bs);
    for (; d <= len / m->bs; d++) {
        int i = trt_find(m, tok, d);
        if (i < 0) break;
        if (!trt_in_tier(m, m->e[i].key)) {
            trt_cut(m, i);
            return n;
        }
        keys[n++] = m->e[i].key;
        prev = m->e[i].key;
    }
    for (; d <= len / m->bs; d++) {
        hash_key key = hash_key_next(prev, tok + (d - 1) * m->bs, m->bs);
        if (!trt_in_tier(m, key)) break;
        keys[n++] = key;
        prev = key;
    }
    return n;
}

static int trt_insert(trt_model *m, const int32_t *tok, int len, const int32_t *ids)
{
    int n = 0;
    hash_key prev = trt_root();
    m->clock++;
    for (int d = 1; d <= len / m->bs; d++) {
        hash_key key = hash_key_next(prev, tok + (d - 1) * m->bs, m->bs);
        int i = trt_find(m, tok, d);
        if (i < 0) {
            for (i = 0; m->e[i].live; i++) cr_assert_lt(i + 1, TRT_MAX, "test bug: model full");
            m->e[i] = (trt_entry){.live = 1, .depth = d, .key = key};
            memcpy(m->e[i].tokens, tok, (size_t)d * m->bs * sizeof *tok);
            m->e[i].tiered = 1;
        }
        if (m->e[i].tiered) { /* the tree's saved() tells the tier */
            m->e[i].tiered = 0;
            m->e[i].block = ids[d - 1];
            n++;
        }
        m->e[i].time = m->clock;
        prev = key;
    }
    return n;
}

/* One block out: the least recently used resident entry nobody holds with no resident child;
 * it must be the one the tree spilled as its j-th, and the tier's answer decides its fate. */
static int trt_evict_one(trt_model *m, int j)
{
    int best = -1;
    for (int i = 0; i < TRT_MAX; i++) {
        const trt_entry *x = &m->e[i];
        if (!x->live || x->tiered || m->held[x->block] || trt_resident_child(m, x)) continue;
        if (best < 0 || x->time < m->e[best].time) best = i;
    }
    if (best < 0) return 0;
    trt_entry *x = &m->e[best];
    cr_assert_lt(j, m->n_spill, "the model evicts more than the tree");
    cr_assert(hash_key_eq(x->key, m->spill_key[j]), "eviction %d: the tree took another block", j);
    if (m->spill_kept[j]) x->tiered = 1;
    else trt_cut(m, best);
    return 1;
}

static void trt_compare(trt_model *m, const rdx_tree *t, const block_pool *bp)
{
    rdx_check(t);
    bp_check(bp);
    int res = 0, tiered = 0, refs[TRX_POOL] = {0}, evictable = 0;
    for (int i = 0; i < TRT_MAX; i++) {
        const trt_entry *x = &m->e[i];
        if (!x->live) continue;
        if (x->tiered) {
            tiered++;
            continue;
        }
        res++;
        refs[x->block]++;
        int blocked = m->held[x->block] > 0; /* evictable: unheld, and so is every resident descendant */
        for (int j = 0; j < TRT_MAX && !blocked; j++)
            blocked = m->e[j].live && !m->e[j].tiered && m->held[m->e[j].block] && trt_extends(m, &m->e[j], x);
        evictable += !blocked;
    }
    for (int b = 0; b < bp_num_blocks(bp); b++)
        cr_assert_eq(bp_refcount(bp, b), refs[b] + m->held[b], "block %d: refcount %d, model %d", b,
                     bp_refcount(bp, b), refs[b] + m->held[b]);
    cr_assert_eq(rdx_n_blocks(t), res);
    cr_assert_eq(rdx_n_tiered(t), tiered, "tiered blocks: tree %d, model %d", rdx_n_tiered(t), tiered);
    cr_assert_eq(rdx_n_evictable(t), evictable);
}

static void trt_evict(trt_model *m, rdx_tree *t, int n)
{
    m->n_spill = 0;
    int got = rdx_evict(t, n), want = 0;
    cr_assert_eq(got, m->n_spill, "every freed block was offered to the tier");
    while (want < n && trt_evict_one(m, want)) want++;
    cr_assert_eq(got, want, "evict(%d)", n);
}

/* A request: match, tiered continuation (compared key by key), then blocks for the loaded part
 * and maybe the rest, inserted. */
static void trt_request(trt_model *m, rdx_tree *t, block_pool *bp, uint64_t *rng, const int32_t *tok, int len,
                        trx_seq *s, int use_match)
{
    int n_blk = len / m->bs, k = 0;
    int32_t want[TRX_MAX_BLK], got[TRX_MAX_BLK];
    if (use_match) {
        k = trt_match(m, tok, len, want);
        cr_assert_eq(rdx_match(t, tok, len, got, n_blk), k * m->bs);
        for (int i = 0; i < k; i++) {
            cr_assert_eq(got[i], want[i]);
            m->held[got[i]]++;
        }
        hash_key kt[TRX_MAX_BLK], km[TRX_MAX_BLK];
        int nt = rdx_match_tiered(t, tok, len, k * m->bs, kt, TRX_MAX_BLK);
        cr_assert_eq(nt, trt_match_tiered(m, tok, len, k, km), "tiered continuation after %d blocks", k);
        for (int i = 0; i < nt; i++) cr_assert(hash_key_eq(kt[i], km[i]), "tiered key %d", i);
        trt_compare(m, t, bp);
        if (nt && tu_xorshift(rng) % 2) n_blk = k + nt; /* load back only the tiered part */
    }
    s->n = k;
    memcpy(s->ids, got, (size_t)k * sizeof *got);
    if (tu_xorshift(rng) % 5 == 0) return;
    int need = n_blk - k;
    if (bp_num_free(bp) < need) trt_evict(m, t, need - bp_num_free(bp));
    if (bp_num_free(bp) < need) return;
    cr_assert_eq(bp_alloc(bp, need, s->ids + k), 0);
    for (int i = k; i < n_blk; i++) m->held[s->ids[i]]++;
    s->n = n_blk;
    int want_new = trt_insert(m, tok, n_blk * m->bs, s->ids);
    int64_t saved = m->saved;
    cr_assert_eq(rdx_insert(t, tok, n_blk * m->bs, s->ids), want_new);
    cr_assert_eq(m->saved - saved, want_new, "every new resident block is reported to the tier");
}

static void trt_release(trt_model *m, block_pool *bp, trx_seq *seqs, int *n_seqs, int i)
{
    for (int j = 0; j < seqs[i].n; j++) {
        bp_unref(bp, seqs[i].ids[j]);
        m->held[seqs[i].ids[j]]--;
    }
    seqs[i] = seqs[--*n_seqs];
}

static void trt_random_run(int bs, uint64_t seed, int n_ops)
{
    fprintf(stderr, "radix/tiered: block_size %d seed %llu (replay with KVSERVE_TEST_SEED)\n", bs,
            (unsigned long long)seed);
    uint64_t rng = seed;
    static trt_model m;
    static int32_t hist[TRX_HIST][TRX_MAX_TOK];
    int hist_len[TRX_HIST], n_hist = 0;
    memset(&m, 0, sizeof m);
    m.bs = bs;
    block_pool *bp = bp_create(TRX_POOL / 2); /* tight: evictions are frequent */
    rdx_tree *t = rdx_create(bp, bs);
    m.bp = bp;
    rdx_tier tier = {trt_root(), trt_saved, trt_spill, trt_has, &m};
    cr_assert_eq(rdx_set_tier(t, &tier), 0);
    trx_seq seqs[TRX_SEQS];
    int n_seqs = 0, loads = 0, cuts = 0;
    int32_t tok[TRX_MAX_TOK];
    for (int op = 0; op < n_ops; op++) {
        int r = (int)(tu_xorshift(&rng) % 12);
        int tiered_before = rdx_n_tiered(t);
        if (r < 6) {
            if (n_seqs == TRX_SEQS) trt_release(&m, bp, seqs, &n_seqs, (int)(tu_xorshift(&rng) % TRX_SEQS));
            int len = trx_gen(&rng, bs, hist, hist_len, &n_hist, tok);
            trt_request(&m, t, bp, &rng, tok, len, &seqs[n_seqs++], r != 0);
            loads += rdx_n_tiered(t) < tiered_before;
        } else if (r < 8) {
            if (n_seqs > 0) trt_release(&m, bp, seqs, &n_seqs, (int)(tu_xorshift(&rng) % (uint64_t)n_seqs));
        } else if (r < 10) {
            trt_evict(&m, t, 1 + (int)(tu_xorshift(&rng) % 8));
        } else if (r == 10 && m.n_tier > 0) { /* the tier drops a key (its own LRU) */
            int victim = (int)(tu_xorshift(&rng) % (uint64_t)m.n_tier);
            m.tier[victim] = m.tier[--m.n_tier];
        } else {
            int n = rdx_prune_tiered(t), before = 0, after = 0;
            for (int i = 0; i < TRT_MAX; i++) before += m.e[i].live && m.e[i].tiered;
            for (int i = 0; i < TRT_MAX; i++)
                if (m.e[i].live && m.e[i].tiered && !trt_in_tier(&m, m.e[i].key)) trt_cut(&m, i);
            for (int i = 0; i < TRT_MAX; i++) after += m.e[i].live && m.e[i].tiered;
            cr_assert_eq(n, before - after, "prune");
            cuts += n > 0;
        }
        trt_compare(&m, t, bp);
    }
    cr_assert_gt(loads, n_ops / 100, "only %d requests took tiered blocks back", loads);
    cr_assert_gt(m.spilled, n_ops / 20, "only %lld spills", (long long)m.spilled);
    cr_assert_gt(cuts, 0, "no prune dropped anything");
    while (n_seqs > 0) trt_release(&m, bp, seqs, &n_seqs, n_seqs - 1);
    trt_evict(&m, t, INT_MAX);
    trt_compare(&m, t, bp);
    cr_assert_eq(bp_num_free(bp), TRX_POOL / 2, "evicting everything frees every block");
    rdx_destroy(t);
    bp_destroy(bp);
}

Test(radix, tiered_vs_model_bs1)
{
    trt_random_run(1, tu_seed(0x7ee70001), 2500);
}

Test(radix, tiered_vs_model_bs2)
{
    trt_random_run(2, tu_seed(0x7ee70002), 2500);
}

Test(radix, tiered_vs_model_bs4)
{
    trt_random_run(4, tu_seed(0x7ee70004), 2500);
}
