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
 * Prefix-cache rule: a block enters the radix tree only while its sequence has dropped nothing
 * (its K/V then depends on its tokens alone); once a window has moved, its kept blocks are not
 * shared prefixes and nothing more is offered. A cached path whose early blocks a window
 * released while its later ones are still held cannot be evicted leaf first; when blocks run
 * out, rdx_evict_forced unlinks such leaves so the early blocks free. The tree, and so the
 * prefix cache, exists only with one layer group.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "engine/sched_internal.h"

int sched__kv_len(const sched *sc, const seq *s, int g)
{
    return s->n_computed - s->kv[g].dropped * sc->c.block_size;
}

void sched__insert(sched *sc, seq *s)
{
    const seq_kv *k = &s->kv[0];
    if (!sc->tree || k->dropped) return;
    int full = s->n_computed / sc->c.block_size;
    if (full > k->n_blocks) full = k->n_blocks;
    if (full <= s->n_inserted) return;
    if (rdx_insert(sc->tree, s->tokens, full * sc->c.block_size, k->bt) >= 0) s->n_inserted = full;
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

/* Takes n free blocks of group g, evicting cached prefixes for them when the pool is short. */
static int sched__alloc(sched *sc, int g, int n, int32_t *ids)
{
    if (!n) return 0;
    int rc = bp_alloc(sc->bp[g], n, ids);
    if (rc && sc->tree && g == 0) {
        sc->st.evictions += rdx_evict(sc->tree, n - bp_num_free(sc->bp[0]));
        rc = bp_alloc(sc->bp[g], n, ids);
    }
    /* Blocks loaded back from the tier for sequences still waiting are kept for them only while
     * nobody else needs the room. */
    if (rc && sc->tree && g == 0 && sched__tier_unpin(sc)) {
        sc->st.evictions += rdx_evict(sc->tree, n - bp_num_free(sc->bp[0]));
        rc = bp_alloc(sc->bp[g], n, ids);
    }
    /* A windowed sequence released a cached path's early blocks but holds its later ones: the
     * early ones are stuck inside the tree until its leaves go too. */
    if (rc && sc->tree && g == 0 && sc->c.rule[0].keep != KV_KEEP_ALL) {
        sc->st.evictions += rdx_evict_forced(sc->tree, n - bp_num_free(sc->bp[0]));
        rc = bp_alloc(sc->bp[g], n, ids);
    }
    return rc;
}

int sched__reserve(sched *sc, seq *s, int n_new)
{
    int bs = sc->c.block_size, ng = sc->n_groups, most = n_new / bs + 2;
    int extra[KV_MAX_GROUPS], cow[KV_MAX_GROUPS], got = 0;
    int32_t ids[KV_MAX_GROUPS][most];
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
            sc->r.copy_block(sc->r.ud, g, old, ids[g][extra[g]]);
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
    seq_kv *k = &s->kv[0];
    if (!sc->tree || k->dropped || sched__scoring(s) || s->n_computed % bs || s->n_computed >= s->n_tokens - 1)
        return;
    int m = rdx_match(sc->tree, s->tokens, s->n_tokens - 1, sc->match_buf, sc->max_blocks);
    int nb = m / bs;
    if (m <= s->n_computed || seq_reserve_blocks(s, 0, nb)) {
        for (int i = 0; i < nb; i++) bp_unref(sc->bp[0], sc->match_buf[i]);
        return;
    }
    for (int i = 0; i < nb; i++) {
        if (i < k->n_blocks) bp_unref(sc->bp[0], k->bt[i]);
        k->bt[i] = sc->match_buf[i];
    }
    if (!s->n_preemptions && s->n_computed < s->n_prompt)
        s->cached_tokens += (m < s->n_prompt ? m : s->n_prompt) - s->n_computed;
    k->n_blocks = nb;
    s->n_computed = m;
    s->n_inserted = nb;
}

int sched__adopt_prefix(sched *sc, seq *s, int matched)
{
    int bs = sc->c.block_size;
    seq_kv *k = &s->kv[0];
    if (seq_reserve_blocks(s, 0, matched / bs + 1)) {
        for (int b = 0; b < matched / bs; b++) bp_unref(sc->bp[0], sc->match_buf[b]);
        return -ENOMEM;
    }
    memcpy(k->bt, sc->match_buf, (size_t)(matched / bs) * sizeof(int32_t));
    k->n_blocks = s->n_inserted = matched / bs;
    /* A cached block that agrees with the next few prompt tokens: take it as a shared partial
     * block; sched__reserve copies it before the sequence writes into it. */
    int32_t pb;
    int part = rdx_match_partial(sc->tree, s->tokens, s->n_tokens - 1, matched, &pb);
    if (part > 0) {
        bp_ref(sc->bp[0], pb);
        k->bt[k->n_blocks++] = pb;
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
