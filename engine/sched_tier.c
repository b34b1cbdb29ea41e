/*
 * sched_tier.c — the scheduler's side of the second KV tier (cache/tier.h): loads back the blocks
 * of a waiting sequence's prefix that the tier holds, before its prefill is scheduled, while the
 * other sequences keep running.
 *
 *   admission of c: rdx_match → m resident blocks ──► rdx_match_tiered → k more in the tier
 *        k > 0: take k free blocks, tier_load each; c stays waiting (held) ──┐
 *   each step: tier_poll → completions ──► all k done: the good leading ones │
 *        enter the tree (rdx_insert adopts the tiered marks) ◄───────────────┘
 *   next admission of c: rdx_match finds m + k resident blocks: a plain cache hit
 *
 * A load holds references on the matched prefix and on its blocks from its start until c is
 * admitted or released, so nothing it brought back is evicted before c uses it; a load whose
 * sequence was released finishes its copies (they write into its blocks) and then lets go.
 * Another waiting sequence that needs a block being loaded waits for that load rather than
 * loading it twice. A sequence loads at most once per admission; a block that fails to load (a
 * corrupt file, a disk turned off) and the ones after it are simply computed.
 *
 * Engine thread only, like the rest of the scheduler.
 */
#include "engine/sched_tier.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/sched_internal.h"

const int64_t sched_tier_bounds_us[SCHED_TIER_BUCKETS] = {250,   500,    1000,   2500,   5000,    10000,
                                                         25000, 50000, 100000, 250000, 500000, 1000000};

/* One waiting sequence's load. */
typedef struct sched_load {
    seq *s;          /* the sequence, NULL once released */
    uint32_t serial; /* its blocks' tags are serial << 32 | index */
    int first;       /* resident prefix blocks (references held) */
    int n;           /* blocks loaded after them (references held) */
    int n_done;      /* completions received */
    int done;        /* 1: every completion arrived and the good blocks entered the cache */
    int64_t t0_us;
    int32_t *ids;    /* [first + n] the prefix's blocks, then the loaded ones */
    hash_key *keys;  /* [n] */
    uint8_t *ok;     /* [n] */
} sched_load;

/* ---- the tree's callbacks into the tier --------------------------------------------------------- */

static void sched__tier_saved(void *ud, hash_key key, hash_key parent, const int32_t *tokens, int32_t block)
{
    tier_save(ud, key, parent, tokens, block);
}

static int sched__tier_spill(void *ud, hash_key key, hash_key parent, const int32_t *tokens, int32_t block)
{
    return tier_spill(ud, key, parent, tokens, block);
}

static int sched__tier_has(void *ud, hash_key key)
{
    return tier_has(ud, key);
}

int sched__tier_set(sched *sc, tier *t, hash_key root)
{
    /* The tier keeps one block per cached block: with more layer groups it would have to carry
     * every group's companion too, so it stays off for such models. */
    if (!sc->tree || sc->tier || sc->n_groups > 1) return -EINVAL;
    hash_key *keys = malloc((size_t)sc->max_blocks * sizeof *keys);
    if (!keys) return -ENOMEM;
    rdx_tier rt = {root, sched__tier_saved, sched__tier_spill, sched__tier_has, t};
    int rc = rdx_set_tier(sc->tree, &rt);
    if (rc) {
        free(keys);
        return rc;
    }
    sc->tier = t;
    sc->tier_keys = keys;
    return 0;
}

/* ---- loads ------------------------------------------------------------------------------------ */

static sched_load *sched__find_load(const sched *sc, const seq *s)
{
    for (int i = 0; i < sc->n_loads; i++)
        if (sc->loads[i]->s == s) return sc->loads[i];
    return NULL;
}

/* Drops L's references on its first + n blocks and frees it. */
static void sched__end_load(sched *sc, sched_load *L)
{
    for (int i = 0; i < L->first + L->n; i++) bp_unref(sc->bp[0], L->ids[i]);
    for (int i = 0; i < sc->n_loads; i++)
        if (sc->loads[i] == L) {
            sc->loads[i] = sc->loads[--sc->n_loads];
            break;
        }
    free(L->ids);
    free(L->keys);
    free(L->ok);
    free(L);
}

/* 1 when a load in flight brings back the block named key. */
static int sched__loading(const sched *sc, hash_key key)
{
    for (int i = 0; i < sc->n_loads; i++) {
        const sched_load *L = sc->loads[i];
        for (int j = 0; !L->done && j < L->n; j++)
            if (hash_key_eq(L->keys[j], key)) return 1;
    }
    return 0;
}

/* A record for a load of up to n blocks after the `first` matched ones (match_buf's references
 * move into it), or NULL on -ENOMEM. */
static sched_load *sched__new_load(sched *sc, seq *c, int first, int n)
{
    if (sc->n_loads == sc->cap_loads) {
        int cap = sc->cap_loads ? sc->cap_loads * 2 : 8;
        sched_load **v = realloc(sc->loads, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        sc->loads = v;
        sc->cap_loads = cap;
    }
    sched_load *L = calloc(1, sizeof *L);
    if (!L) return NULL;
    L->ids = malloc((size_t)(first + n) * sizeof *L->ids);
    L->keys = malloc((size_t)n * sizeof *L->keys);
    L->ok = calloc((size_t)n, 1);
    if (!L->ids || !L->keys || !L->ok) {
        free(L->ids);
        free(L->keys);
        free(L->ok);
        free(L);
        return NULL;
    }
    L->s = c;
    L->first = first;
    L->serial = ++sc->load_serial;
    L->t0_us = clk_now_us();
    memcpy(L->ids, sc->match_buf, (size_t)first * sizeof *L->ids);
    memcpy(L->keys, sc->tier_keys, (size_t)n * sizeof *L->keys);
    return L;
}

/* Starts loading the nt tiered blocks after c's first matched ones into free blocks (evicting
 * for them as an allocation would; fewer when the pool is short). Returns 1 when a load started
 * (the match's references now belong to it), 0 when none could. */
static int sched__start_load(sched *sc, seq *c, int first, int nt)
{
    block_pool *bp = sc->bp[0];
    if (bp_num_free(bp) < nt) sc->st.evictions += rdx_evict(sc->tree, nt - bp_num_free(bp));
    int n = nt < bp_num_free(bp) ? nt : bp_num_free(bp);
    sched_load *L = n > 0 ? sched__new_load(sc, c, first, n) : NULL;
    if (!L) return 0;
    int rc = bp_alloc(bp, n, L->ids + first);
    assert(!rc); /* n ≤ free */
    (void)rc;
    int started = 0;
    while (started < n && tier_load(sc->tier, L->keys[started], L->ids[first + started],
                                    (uint64_t)L->serial << 32 | (uint32_t)started) == 0)
        started++;
    for (int j = started; j < n; j++) bp_unref(bp, L->ids[first + j]);
    L->n = started;
    sc->loads[sc->n_loads++] = L; /* room was made by sched__new_load */
    if (started) return 1;
    L->first = 0; /* nothing started: the caller keeps the match's references */
    sched__end_load(sc, L);
    return 0;
}

int sched__tier_admit(sched *sc, seq *c, int matched)
{
    if (!sc->tier) return 0;
    int first = matched / sc->c.block_size;
    sched_load *L = sched__find_load(sc, c);
    if (L && L->done) { /* its blocks are in the cache now, and this match holds them */
        sched__end_load(sc, L);
        return 0;
    }
    if (!L) {
        int nt = rdx_match_tiered(sc->tree, c->tokens, c->n_tokens - 1, matched, sc->tier_keys, sc->max_blocks - first);
        if (nt == 0) return 0;
        if (!sched__loading(sc, sc->tier_keys[0])) return sched__start_load(sc, c, first, nt);
    }
    /* c waits for its own load, or for another one that brings back its next block. */
    for (int b = 0; b < first; b++) bp_unref(sc->bp[0], sc->match_buf[b]);
    return 1;
}

/* Every completion of L arrived: its leading good blocks enter the cache (the tiered marks take
 * them), the rest go back to the pool. */
static void sched__load_complete(sched *sc, sched_load *L)
{
    int bs = sc->c.block_size, k = 0;
    while (k < L->n && L->ok[k]) k++;
    for (int j = 0; j < L->n; j++) sc->st.tier_failed_blocks += !L->ok[j];
    for (int j = k; j < L->n; j++) bp_unref(sc->bp[0], L->ids[L->first + j]);
    L->n = k;
    L->done = 1;
    int64_t us = clk_now_us() - L->t0_us;
    int b = 0;
    while (b < SCHED_TIER_BUCKETS && us > sched_tier_bounds_us[b]) b++;
    sc->st.tier_load_hist[b]++;
    sc->st.tier_load_us += us;
    if (!L->s) {
        sched__end_load(sc, L);
        return;
    }
    if (k > 0 && rdx_insert(sc->tree, L->s->tokens, (L->first + k) * bs, L->ids) >= 0) {
        sc->st.tier_loads++;
        sc->st.tier_hit_tokens += (int64_t)k * bs;
    }
}

/* The tree keeps tiered marks until a walk finds the tier has dropped them; when they
 * outnumber what the tier holds, a sweep drops the stale ones. */
static void sched__tier_prune(sched *sc)
{
    tier_stats ts;
    tier_get_stats(sc->tier, &ts);
    if (rdx_n_tiered(sc->tree) > 2 * (ts.host_blocks + ts.disk_blocks) + 1024) rdx_prune_tiered(sc->tree);
}

void sched__tier_poll(sched *sc)
{
    if (!sc->tier) return;
    tier_done d[64];
    int n;
    do {
        n = tier_poll(sc->tier, d, 64);
        for (int i = 0; i < n; i++) {
            uint32_t serial = (uint32_t)(d[i].tag >> 32), j = (uint32_t)d[i].tag;
            sched_load *L = NULL;
            for (int l = 0; l < sc->n_loads && !L; l++)
                if (sc->loads[l]->serial == serial) L = sc->loads[l];
            assert(L && !L->done && (int)j < L->n);
            L->ok[j] = (uint8_t)d[i].ok;
            if (++L->n_done == L->n) sched__load_complete(sc, L);
        }
    } while (n == 64);
    sched__tier_prune(sc);
}

int sched__tier_unpin(sched *sc)
{
    int n = 0;
    for (int i = sc->n_loads - 1; i >= 0; i--)
        if (sc->loads[i]->done) {
            sched__end_load(sc, sc->loads[i]);
            n++;
        }
    return n;
}

void sched__tier_release(sched *sc, seq *s)
{
    sched_load *L = sc->tier ? sched__find_load(sc, s) : NULL;
    if (!L) return;
    if (L->done) sched__end_load(sc, L);
    else L->s = NULL; /* its copies still write into its blocks */
}

int64_t sched__tier_refs(const sched *sc)
{
    int64_t n = 0;
    for (int i = 0; i < sc->n_loads; i++) n += sc->loads[i]->first + sc->loads[i]->n;
    return n;
}

int sched__tier_pending(const sched *sc)
{
    int n = 0;
    for (int i = 0; i < sc->n_loads; i++) n += !sc->loads[i]->done;
    return n;
}

void sched__tier_destroy(sched *sc)
{
    for (int i = 0; i < sc->n_loads; i++) {
        free(sc->loads[i]->ids);
        free(sc->loads[i]->keys);
        free(sc->loads[i]->ok);
        free(sc->loads[i]);
    }
    free(sc->loads);
    free(sc->tier_keys);
}
