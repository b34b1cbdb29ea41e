/*
 * sched_kv.c — a sequence's KV blocks in every layer group: reserving them for the next tokens
 * (copy-on-write of a shared partial block), releasing them whole as a window moves, sharing
 * them with fork children, and the prefix cache's side (offering computed blocks, adopting a
 * cached prefix, re-matching while a prefill runs).
 *
 * Each group g keeps its blocks by its rule (cache/kv.h, docs/kv-windows.md). A sequence's table
 * in g is compacted: kv[g].bt holds the sink blocks and then the kept ones, so its cache index j
 * is token j before the sinks' end and token j + dropped × bs after it, and the cache length is
 * n_computed − dropped × bs. Releases happen only in sched__drop, before a sequence computes:
 *   KV_KEEP_SINKS (N entries, S sinks): while the cache holds N entries (the next token would be
 *       the N + 1-th), the oldest block after the ceil(S / bs) sink blocks goes; a step never
 *       takes the cache past N (sched__window_fit), so prefill chunks see exactly what decoding
 *       token by token would, and a preempted sequence recomputes the same cache;
 *   KV_KEEP_WINDOW (W): leading blocks whose entries all lie before the next token's window
 *       (cache index c sees c − W + 1 .. c) go; the attention op's mask does the rest. A step
 *       computes at most W of the sequence's tokens, so it holds under 2W entries there.
 * Prefix-cache rule: a block enters the radix tree only while its sequence's K/V depends on its
 * tokens alone: group 0 dropped nothing, and no sinks group dropped anything (once a sinks
 * window has moved, its kept blocks are not shared prefixes and nothing more is offered). A
 * sliding window's releases do not count: its entries never depended on what it released. A
 * cached path whose early blocks a window
 * released while its later ones are still held cannot be evicted leaf first; when blocks run
 * out, rdx_evict_forced unlinks such leaves so the early blocks free.
 *
 * With more than one group the tree indexes group 0's block ids, and comp[g][b] is the block of
 * group g ≥ 1 that holds the same tokens as indexed group-0 block b: the tree's hooks take a
 * reference on it when b enters the tree (from the inserting sequence's table at the same
 * token position; -1 where a sliding window had released it) and drop it when the tree lets b
 * go. A match is cut to the blocks whose companions exist inside the windows of the token after
 * it, takes references on those, and an adopting sequence's tables start with them: group 0's
 * with the whole match, a windowed group's where its window starts (the blocks before counted
 * as dropped, exactly what sched__drop would have released). A group's pool short of blocks evicts cached prefixes until it
 * has them (rdx_evict_until), forcing (rdx_evict_forced's way) when plain eviction cannot: a
 * running sequence holds its cached path in group 0 while the tree alone may hold its windows'
 * early companions.
 */
#include "engine/sched_kv.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sched_internal.h"
#include "engine/sched_tier.h"

int sched__kv_len(const sched *sc, const seq *s, int g)
{
    return s->n_computed - s->kv[g].dropped * sc->c.block_size;
}

/* 1 while s's computed blocks may enter the prefix cache: group 0 dropped nothing (the tree
 * indexes its table), and no group whose kept entries depend on dropped history (sinks) dropped
 * anything. A sliding window's releases do not count: its K/V never depends on what it released,
 * and the companions it released are simply absent (-1). */
static int sched__can_offer(const sched *sc, const seq *s)
{
    if (s->kv[0].dropped) return 0;
    for (int g = 1; g < sc->n_groups; g++)
        if (s->kv[g].dropped && sc->c.rule[g].keep != KV_KEEP_WINDOW) return 0;
    return 1;
}

/* Leading blocks a windowed group g releases at n computed tokens, before the next one (what
 * sched__drop does: those whose entries all lie before the next token's window); 0 for the other
 * rules. */
static int sched__window_drop(const sched *sc, int g, int n)
{
    const kv_rule *r = &sc->c.rule[g];
    int over = n - r->window + 1;
    return r->keep == KV_KEEP_WINDOW && over >= sc->c.block_size ? over / sc->c.block_size : 0;
}

/* ---- companions: the prefix cache with more than one group ---------------------------------- */

/* The tree indexed block at position pos of the inserting sequence: its companions are that
 * sequence's blocks at the same position (none where a window released it). */
static void sched__comp_indexed(void *ud, int32_t block, int pos)
{
    sched *sc = ud;
    const seq *s = sc->ins_seq;
    assert(s); /* only sched__insert inserts when there are groups (no tier then) */
    for (int g = 1; g < sc->n_groups; g++) {
        const seq_kv *k = &s->kv[g];
        assert(sc->comp[g][block] < 0);
        if (pos < k->dropped) { /* released by a sliding window (sched__can_offer) */
            assert(sc->c.rule[g].keep == KV_KEEP_WINDOW);
            continue;
        }
        assert(pos - k->dropped < k->n_blocks);
        int32_t c = k->bt[pos - k->dropped];
        bp_ref(sc->bp[g], c);
        sc->comp[g][block] = c;
        sc->n_comp++;
    }
}

static void sched__comp_released(void *ud, int32_t block)
{
    sched *sc = ud;
    for (int g = 1; g < sc->n_groups; g++) {
        if (sc->comp[g][block] < 0) continue;
        bp_unref(sc->bp[g], sc->comp[g][block]);
        sc->comp[g][block] = -1;
        sc->n_comp--;
    }
}

int sched__comp_init(sched *sc)
{
    if (!sc->tree || sc->n_groups == 1) return 0;
    int32_t n0 = bp_num_blocks(sc->bp[0]);
    for (int g = 1; g < sc->n_groups; g++) {
        sc->comp[g] = malloc((size_t)(n0 > 0 ? n0 : 1) * sizeof(int32_t));
        sc->match_comp[g] = malloc((size_t)sc->max_blocks * sizeof(int32_t));
        if (!sc->comp[g] || !sc->match_comp[g]) return -ENOMEM;
        for (int32_t b = 0; b < n0; b++) sc->comp[g][b] = -1;
    }
    rdx_hooks h = {sched__comp_indexed, sched__comp_released, sc};
    return rdx_set_hooks(sc->tree, &h);
}

void sched__comp_fini(sched *sc)
{
    for (int g = 1; g < KV_MAX_GROUPS; g++) {
        free(sc->comp[g]);
        free(sc->match_comp[g]);
    }
}

/* The longest k' ≤ k leading blocks of match_buf whose companions a sequence starting there
 * needs all exist: in every windowed group those of blocks sched__window_drop(k' × bs) .. k'. */
static int sched__match_usable(const sched *sc, int k)
{
    for (int changed = 1; changed && k > 0;) {
        changed = 0;
        for (int g = 1; g < sc->n_groups && k > 0; g++) {
            if (sc->c.rule[g].keep != KV_KEEP_WINDOW) continue; /* the others have every companion */
            for (int i = k - 1; i >= sched__window_drop(sc, g, k * sc->c.block_size); i--)
                if (sc->comp[g][sc->match_buf[i]] < 0) {
                    k = i;
                    changed = 1;
                    break;
                }
        }
    }
    return k;
}

int sched__match(sched *sc, const seq *s)
{
    int bs = sc->c.block_size, k0 = rdx_match(sc->tree, s->tokens, s->n_tokens - 1, sc->match_buf, sc->max_blocks) / bs;
    int k = sc->n_groups > 1 ? sched__match_usable(sc, k0) : k0;
    for (int b = k; b < k0; b++) bp_unref(sc->bp[0], sc->match_buf[b]);
    for (int g = 1; g < sc->n_groups; g++) {
        sc->match_from[g] = sched__window_drop(sc, g, k * bs);
        for (int b = sc->match_from[g]; b < k; b++) {
            int32_t c = sc->comp[g][sc->match_buf[b]];
            assert(c >= 0);
            bp_ref(sc->bp[g], c);
            sc->match_comp[g][b] = c;
        }
    }
    return k * bs;
}

void sched__match_drop(sched *sc, int matched)
{
    int k = matched / sc->c.block_size;
    for (int b = 0; b < k; b++) bp_unref(sc->bp[0], sc->match_buf[b]);
    for (int g = 1; g < sc->n_groups; g++)
        for (int b = sc->match_from[g]; b < k; b++) bp_unref(sc->bp[g], sc->match_comp[g][b]);
}

/* s (holding nothing) takes the k matched blocks and their references: group 0's table is the
 * whole match, a windowed group's starts where its window does (the blocks before it dropped). */
static void sched__take_match(sched *sc, seq *s, int k)
{
    for (int g = 0; g < sc->n_groups; g++) {
        seq_kv *kv = &s->kv[g];
        int from = g ? sc->match_from[g] : 0;
        memcpy(kv->bt, (g ? sc->match_comp[g] : sc->match_buf) + from, (size_t)(k - from) * sizeof(int32_t));
        kv->n_blocks = k - from;
        kv->dropped = from;
    }
    s->n_inserted = k;
}

int64_t sched__check_tree(const sched *sc, int g)
{
    if (!sc->tree) return 0;
    int n = rdx_n_blocks(sc->tree);
    if (g == 0) return n;
    int32_t n0 = bp_num_blocks(sc->bp[0]), *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    unsigned char *in_tree = calloc((size_t)(n0 > 0 ? n0 : 1), 1);
    assert(ids && in_tree);
    int got = rdx_list_blocks(sc->tree, ids);
    for (int i = 0; i < got; i++) in_tree[ids[i]] = 1;
    int64_t with = 0;
    for (int32_t b = 0; b < n0; b++) {
        int32_t c = sc->comp[g][b];
        with += c >= 0;
        assert(in_tree[b] || c < 0);                                      /* only indexed blocks have one */
        assert(c >= 0 || !in_tree[b] || sc->c.rule[g].keep == KV_KEEP_WINDOW); /* absent: released by a window */
        assert(c < 0 || (c < bp_num_blocks(sc->bp[g]) && bp_refcount(sc->bp[g], c) >= 1));
        (void)c;
    }
    free(ids);
    free(in_tree);
    return with;
}

/* ---- a sequence's blocks ----------------------------------------------------------------- */

void sched__insert(sched *sc, seq *s)
{
    const seq_kv *k = &s->kv[0];
    if (!sc->tree || s->no_cache || !sched__can_offer(sc, s)) return;
    int full = s->n_computed / sc->c.block_size;
    if (full > k->n_blocks) full = k->n_blocks;
    if (full <= s->n_inserted) return;
    sc->ins_seq = s;
    if (rdx_insert(sc->tree, s->tokens, full * sc->c.block_size, k->bt) >= 0) s->n_inserted = full;
    sc->ins_seq = NULL;
}

void sched__release_blocks(sched *sc, seq *s)
{
    for (int g = 0; g < sc->n_groups; g++) {
        seq_kv *k = &s->kv[g];
        for (int i = 0; i < k->n_blocks; i++) bp_unref(sc->bp[g], k->bt[i]);
        k->n_blocks = 0;
        k->dropped = 0;
    }
    s->n_inserted = 0;
    s->n_computed = 0;
}

void sched__free_blocks(sched *sc, seq *s)
{
    sched__insert(sc, s);
    sched__release_blocks(sc, s);
}

void sched__truncate(sched *sc, seq *s)
{
    int bs = sc->c.block_size;
    for (int g = 0; g < sc->n_groups; g++) {
        seq_kv *k = &s->kv[g];
        int len = sched__kv_len(sc, s, g), need = len > 0 ? (len + bs - 1) / bs : 0;
        while (k->n_blocks > need) bp_unref(sc->bp[g], k->bt[--k->n_blocks]);
    }
}

/* Releases block i of s's compacted table in group g. */
static void sched__drop_block(sched *sc, seq *s, int g, int i)
{
    seq_kv *k = &s->kv[g];
    assert(i < k->n_blocks);
    bp_unref(sc->bp[g], k->bt[i]);
    memmove(k->bt + i, k->bt + i + 1, (size_t)(k->n_blocks - i - 1) * sizeof *k->bt);
    k->n_blocks--;
    k->dropped++;
}

void sched__drop(sched *sc, seq *s)
{
    int bs = sc->c.block_size;
    for (int g = 0; g < sc->n_groups; g++) {
        const kv_rule *r = &sc->c.rule[g];
        if (r->keep == KV_KEEP_SINKS) {
            int sb = kv_sink_blocks(r, bs);
            while (sched__kv_len(sc, s, g) >= r->window) sched__drop_block(sc, s, g, sb);
        } else if (r->keep == KV_KEEP_WINDOW) {
            while (s->kv[g].n_blocks > 0 && sched__kv_len(sc, s, g) - r->window + 1 >= bs) sched__drop_block(sc, s, g, 0);
        }
    }
}

int sched__window_fit(const sched *sc, const seq *s, int n_new)
{
    for (int g = 0; g < sc->n_groups; g++) {
        const kv_rule *r = &sc->c.rule[g];
        int room = r->window - sched__kv_len(sc, s, g);
        if (r->keep == KV_KEEP_SINKS && n_new > room) n_new = room;
        /* a window's chunk at most one window: a sequence then holds under two windows there */
        if (r->keep == KV_KEEP_WINDOW && n_new > r->window) n_new = r->window;
    }
    return n_new;
}

/* Takes n free blocks of group g, evicting cached prefixes for them when the pool is short (in
 * group g ≥ 1 what eviction frees are the companions of the tree's blocks). */
static int sched__alloc(sched *sc, int g, int n, int32_t *ids)
{
    if (!n) return 0;
    block_pool *bp = sc->bp[g];
    int rc = bp_alloc(bp, n, ids);
    if (rc && sc->tree) {
        sc->st.evictions += rdx_evict_until(sc->tree, bp, n, 0);
        rc = bp_alloc(bp, n, ids);
    }
    /* Blocks loaded back from the tier for sequences still waiting are kept for them only while
     * nobody else needs the room. */
    if (rc && sc->tree && sched__tier_unpin(sc)) {
        sc->st.evictions += rdx_evict_until(sc->tree, bp, n, 0);
        rc = bp_alloc(bp, n, ids);
    }
    /* A windowed sequence released a cached path's early blocks but holds its later ones: the
     * early ones are stuck inside the tree until its leaves go too. In a group g ≥ 1 the same
     * holds for the companions of a path whose group-0 blocks a running sequence holds. */
    if (rc && sc->tree && (g > 0 || sc->c.rule[0].keep != KV_KEEP_ALL)) {
        sc->st.evictions += rdx_evict_until(sc->tree, bp, n, 1);
        rc = bp_alloc(bp, n, ids);
    }
    return rc;
}

/* Room for n more block copies in the step's list. 0 or -ENOMEM. */
static int sched__copies_room(sched *sc, int n)
{
    if (sc->n_copies + n <= sc->cap_copies) return 0;
    int cap = sc->cap_copies ? sc->cap_copies * 2 : 16;
    while (cap < sc->n_copies + n) cap *= 2;
    sched_copy *v = realloc(sc->copies, (size_t)cap * sizeof *v);
    if (!v) return -ENOMEM;
    sc->copies = v;
    sc->cap_copies = cap;
    return 0;
}

int sched__reserve(sched *sc, seq *s, int n_new)
{
    int bs = sc->c.block_size, ng = sc->n_groups, most = n_new / bs + 2;
    int extra[KV_MAX_GROUPS], cow[KV_MAX_GROUPS], got = 0;
    int32_t ids[KV_MAX_GROUPS][most];
    if (sched__copies_room(sc, ng)) return -ENOMEM;
    for (int g = 0; g < ng; g++) {
        seq_kv *k = &s->kv[g];
        int len = sched__kv_len(sc, s, g), need = (len + n_new + bs - 1) / bs, bi = len / bs;
        extra[g] = need > k->n_blocks ? need - k->n_blocks : 0;
        cow[g] = len % bs && bi < k->n_blocks && bp_refcount(sc->bp[g], k->bt[bi]) > 1;
        if (seq_reserve_blocks(s, g, need)) return -ENOMEM;
    }
    int rc = 0;
    for (; got < ng && !rc; got++) rc = sched__alloc(sc, got, extra[got] + cow[got], ids[got]);
    if (rc) { /* all or nothing: give back what the groups before got */
        for (int g = 0; g < got - 1; g++)
            for (int i = 0; i < extra[g] + cow[g]; i++) bp_unref(sc->bp[g], ids[g][i]);
        return rc;
    }
    for (int g = 0; g < ng; g++) {
        seq_kv *k = &s->kv[g];
        if (cow[g]) {
            int bi = sched__kv_len(sc, s, g) / bs;
            int32_t old = k->bt[bi];
            sc->copies[sc->n_copies++] = (sched_copy){g, old, ids[g][extra[g]]}; /* room made above */
            k->bt[bi] = ids[g][extra[g]];
            bp_unref(sc->bp[g], old);
        }
        for (int i = 0; i < extra[g]; i++) k->bt[k->n_blocks++] = ids[g][i];
    }
    return 0;
}

void sched__rematch(sched *sc, seq *s)
{
    int bs = sc->c.block_size;
    if (!sc->tree || !sched__can_offer(sc, s) || seq_computes_prompt(s) || s->n_computed % bs ||
        s->n_computed >= s->n_tokens - 1)
        return;
    int m = sched__match(sc, s), nb = m / bs, ok = m > s->n_computed;
    for (int g = 0; g < sc->n_groups && ok; g++) ok = !seq_reserve_blocks(s, g, nb);
    if (!ok) {
        sched__match_drop(sc, m);
        return;
    }
    /* s's whole cache is whole blocks (n_computed % bs == 0): the match replaces all of it */
    for (int g = 0; g < sc->n_groups; g++) {
        seq_kv *k = &s->kv[g];
        for (int i = 0; i < k->n_blocks; i++) bp_unref(sc->bp[g], k->bt[i]);
    }
    sched__take_match(sc, s, nb);
    if (!s->n_preemptions && s->n_computed < s->n_prompt)
        s->cached_tokens += (m < s->n_prompt ? m : s->n_prompt) - s->n_computed;
    s->n_computed = m;
}

int sched__adopt_prefix(sched *sc, seq *s, int matched)
{
    int bs = sc->c.block_size, nb = matched / bs;
    for (int g = 0; g < sc->n_groups; g++)
        if (seq_reserve_blocks(s, g, nb + 1)) {
            sched__match_drop(sc, matched);
            return -ENOMEM;
        }
    sched__take_match(sc, s, nb);
    /* A cached block that agrees with the next few prompt tokens: take it (and its companions,
     * when no window released one) as a shared partial block; sched__reserve copies it before
     * the sequence writes into it. */
    int32_t pb;
    int part = rdx_match_partial(sc->tree, s->tokens, s->n_tokens - 1, matched, &pb);
    for (int g = 1; g < sc->n_groups && part > 0; g++) part = sc->comp[g][pb] >= 0 ? part : 0;
    if (part > 0) {
        for (int g = 0; g < sc->n_groups; g++) {
            int32_t id = g ? sc->comp[g][pb] : pb;
            bp_ref(sc->bp[g], id);
            s->kv[g].bt[s->kv[g].n_blocks++] = id;
        }
        matched += part;
    }
    return matched;
}

int sched__share_blocks(sched *sc, const seq *s, seq *c)
{
    for (int g = 0; g < sc->n_groups; g++)
        if (seq_reserve_blocks(c, g, s->kv[g].n_blocks)) return -ENOMEM;
    for (int g = 0; g < sc->n_groups; g++) {
        const seq_kv *k = &s->kv[g];
        for (int b = 0; b < k->n_blocks; b++) bp_ref(sc->bp[g], k->bt[b]);
        memcpy(c->kv[g].bt, k->bt, (size_t)k->n_blocks * sizeof(int32_t));
        c->kv[g].n_blocks = k->n_blocks;
        c->kv[g].dropped = k->dropped;
    }
    return 0;
}

int64_t sched__check_seq(const sched *sc, const seq *s, int g)
{
    const seq_kv *k = &s->kv[g];
    const kv_rule *r = &sc->c.rule[g];
    int bs = sc->c.block_size, len = sched__kv_len(sc, s, g);
    assert(len >= 0);
    assert(k->n_blocks == (len + bs - 1) / bs);
    assert(r->keep != KV_KEEP_ALL || k->dropped == 0);
    assert(r->keep != KV_KEEP_SINKS || len <= r->window);
    for (int b = 0; b < k->n_blocks; b++) assert(bp_refcount(sc->bp[g], k->bt[b]) >= 1);
    (void)r;
    (void)len;
    (void)bs;
    return k->n_blocks;
}
