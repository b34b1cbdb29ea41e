/*
 * gr_config.c — configurations of the pushdown automaton: what the matcher (gr_match.c) holds
 * and the mask walks (gr_mask.c) explore.
 *
 *   configuration = { (state, stack node) }     every state in it has byte edges
 *   stack node    = (return state, parent)      interned: equal stacks are one node
 *
 *   closure(state, node): the state itself when it consumes bytes, plus for each call edge
 *   (rule, ret) the closure of (start of rule, push(ret, node)), plus, when the state may end
 *   its rule, the closure of (node's return state, node's parent), or "bottom reached" at the
 *   bottom node (for the matcher: the output is complete).
 *   step(configuration, byte): the closure of every pair's byte move.
 *
 * A visited set of (state, node) per configuration built makes every pair appear once and ends
 * the closure on loops through nullable rules (left recursion is refused at compile time, so
 * every call chain without a byte is finite). Paths that would push past GR_MAX_DEPTH and pairs
 * past GR_MAX_VISIT are dropped: the matcher then allows less, never more.
 *
 * The grammar is shared and read-only here; stacks, visited sets and pair arrays belong to
 * their caller (one matcher or one walk).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

/* ---- interned stacks -------------------------------------------------------------------------- */

static uint32_t node_hash(int32_t ret, int32_t parent)
{
    uint64_t x = ((uint64_t)(uint32_t)ret << 32) | (uint32_t)parent;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static int stacks_rehash(gr_stacks *st, int hcap)
{
    int32_t *h = malloc(sizeof *h * (size_t)hcap);
    if (!h) return -ENOMEM;
    for (int i = 0; i < hcap; i++) h[i] = -1;
    for (int i = 1; i < st->n; i++) {
        uint32_t k = node_hash(st->nodes[i].ret, st->nodes[i].parent) & (uint32_t)(hcap - 1);
        while (h[k] >= 0) k = (k + 1) & (uint32_t)(hcap - 1);
        h[k] = i;
    }
    free(st->hash);
    st->hash = h;
    st->hcap = hcap;
    return 0;
}

int gr__stacks_init(gr_stacks *st)
{
    memset(st, 0, sizeof *st);
    st->cap = 256;
    st->nodes = malloc(sizeof *st->nodes * (size_t)st->cap);
    if (!st->nodes || stacks_rehash(st, 512)) {
        gr__stacks_fini(st);
        return -ENOMEM;
    }
    st->nodes[0] = (gr_snode){-1, -1, 0};
    st->n = 1;
    return 0;
}

void gr__stacks_fini(gr_stacks *st)
{
    free(st->nodes);
    free(st->hash);
    memset(st, 0, sizeof *st);
}

void gr__stacks_reset(gr_stacks *st)
{
    for (int i = 0; i < st->hcap; i++) st->hash[i] = -1;
    st->n = 1;
}

int32_t gr__stacks_push(gr_stacks *st, int32_t ret, int32_t parent)
{
    if (st->nodes[parent].depth >= GR_MAX_DEPTH) return -2;
    uint32_t k = node_hash(ret, parent) & (uint32_t)(st->hcap - 1);
    for (; st->hash[k] >= 0; k = (k + 1) & (uint32_t)(st->hcap - 1)) {
        const gr_snode *x = &st->nodes[st->hash[k]];
        if (x->ret == ret && x->parent == parent) return st->hash[k];
    }
    if (st->n == st->cap) {
        if (st->cap > INT32_MAX / 4) return -1;
        gr_snode *v = realloc(st->nodes, sizeof *v * (size_t)st->cap * 2);
        if (!v) return -1;
        st->nodes = v;
        st->cap *= 2;
    }
    int32_t id = st->n++;
    st->nodes[id] = (gr_snode){ret, parent, st->nodes[parent].depth + 1};
    st->hash[k] = id;
    if (st->n * 2 > st->hcap && stacks_rehash(st, st->hcap * 2)) {
        st->n--; /* keep the table consistent: forget the node */
        st->hash[k] = -1;
        stacks_rehash(st, st->hcap);
        return -1;
    }
    return id;
}

int gr__stacks_compact(gr_stacks *st, gr_pair *pairs, int n_pairs)
{
    int32_t *map = malloc(sizeof *map * (size_t)st->n);
    if (!map) return -ENOMEM;
    for (int i = 0; i < st->n; i++) map[i] = -1;
    map[0] = 0;
    /* nodes are created after their parents, so ids increase towards the top of a stack */
    for (int i = 0; i < n_pairs; i++)
        for (int32_t x = pairs[i].node; x > 0 && map[x] < 0; x = st->nodes[x].parent) map[x] = 1;
    int n = 1;
    for (int i = 1; i < st->n; i++)
        if (map[i] >= 0) {
            gr_snode x = st->nodes[i];
            x.parent = map[x.parent];
            map[i] = n;
            st->nodes[n++] = x;
        }
    st->n = n;
    for (int i = 0; i < n_pairs; i++) pairs[i].node = map[pairs[i].node];
    free(map);
    stacks_rehash(st, st->hcap);
    return n;
}

int gr__stacks_copy(gr_stacks *dst, const gr_stacks *src)
{
    gr_stacks s = *src;
    s.nodes = malloc(sizeof *s.nodes * (size_t)src->cap);
    s.hash = malloc(sizeof *s.hash * (size_t)src->hcap);
    if (!s.nodes || !s.hash) {
        free(s.nodes);
        free(s.hash);
        return -ENOMEM;
    }
    memcpy(s.nodes, src->nodes, sizeof *s.nodes * (size_t)src->n);
    memcpy(s.hash, src->hash, sizeof *s.hash * (size_t)src->hcap);
    *dst = s;
    return 0;
}

/* ---- visited sets and pair arrays ------------------------------------------------------------ */

int gr__visit_init(gr_visit *v, int cap)
{
    memset(v, 0, sizeof *v);
    v->cap = cap;
    v->cur = 1;
    v->keys = malloc(sizeof *v->keys * (size_t)cap);
    v->gen = calloc((size_t)cap, sizeof *v->gen);
    if (!v->keys || !v->gen) {
        gr__visit_fini(v);
        return -ENOMEM;
    }
    return 0;
}

void gr__visit_fini(gr_visit *v)
{
    free(v->keys);
    free(v->gen);
    memset(v, 0, sizeof *v);
}

void gr__visit_reset(gr_visit *v)
{
    v->n = 0;
    if (++v->cur == 0) { /* wrapped: clear the stamps once every 2^32 resets */
        memset(v->gen, 0, sizeof *v->gen * (size_t)v->cap);
        v->cur = 1;
    }
}

static uint32_t visit_slot(const gr_visit *v, uint64_t key)
{
    uint32_t h = node_hash((int32_t)(key >> 32), (int32_t)key) & (uint32_t)(v->cap - 1);
    while (v->gen[h] == v->cur && v->keys[h] != key) h = (h + 1) & (uint32_t)(v->cap - 1);
    return h;
}

/* Doubles the table, keeping this configuration's entries. */
static int visit_grow(gr_visit *v)
{
    gr_visit w = {0};
    if (gr__visit_init(&w, v->cap * 2)) return -ENOMEM;
    for (int i = 0; i < v->cap; i++)
        if (v->gen[i] == v->cur) {
            uint32_t h = visit_slot(&w, v->keys[i]);
            w.gen[h] = w.cur;
            w.keys[h] = v->keys[i];
        }
    w.n = v->n;
    gr__visit_fini(v);
    *v = w;
    return 0;
}

/* 1 when (state, node) is new in this configuration (and records it), 0 when seen, -ENOSPC
 * past the visit budget, -ENOMEM. */
static int visit(gr_visit *v, int32_t state, int32_t node)
{
    uint64_t key = ((uint64_t)(uint32_t)state << 32) | (uint32_t)node;
    uint32_t h = visit_slot(v, key);
    if (v->gen[h] == v->cur) return 0;
    if ((v->n + 1) * 2 > v->cap) {
        if (v->cap >= GR_MAX_VISIT * 2) return -ENOSPC;
        if (visit_grow(v)) return -ENOMEM;
        h = visit_slot(v, key);
    }
    v->gen[h] = v->cur;
    v->keys[h] = key;
    v->n++;
    return 1;
}

int gr__pairs_reserve(gr_pairs *p, int extra)
{
    if (p->n + extra <= p->cap) return 0;
    int c = p->cap ? p->cap : 64;
    while (c < p->n + extra) c *= 2;
    gr_pair *v = realloc(p->v, sizeof *v * (size_t)c);
    if (!v) return -ENOMEM;
    p->v = v;
    p->cap = c;
    return 0;
}

/* ---- closure and step ---------------------------------------------------------------------- */

int gr__closure(const gr_grammar *g, gr_stacks *st, gr_visit *vis, int32_t state, int32_t node,
                gr_pairs *out)
{
    gr_pair work[64], *wk = work;
    int nw = 0, cap = 64, flags = 0, rc = 0;
    wk[nw++] = (gr_pair){state, node};
    while (nw) {
        gr_pair p = wk[--nw];
        int v = visit(vis, p.state, p.node);
        if (v == -ENOMEM) {
            rc = v;
            break;
        }
        if (v < 0) { /* too many pairs in one configuration: drop the rest */
            flags |= GR_OVERFLOW;
            break;
        }
        if (!v) continue;
        uint8_t f = g->flags[p.state];
        if (f & GR_ST_BYTES) {
            if (gr__pairs_reserve(out, 1)) {
                rc = -ENOMEM;
                break;
            }
            out->v[out->n++] = p;
        }
        int need = (f & GR_ST_CALLS ? g->call_off[p.state + 1] - g->call_off[p.state] : 0) + 1;
        if (nw + need > cap) {
            int c = (nw + need) * 2;
            gr_pair *x = wk == work ? malloc(sizeof *x * (size_t)c) : realloc(wk, sizeof *x * (size_t)c);
            if (!x) {
                rc = -ENOMEM;
                break;
            }
            if (wk == work) memcpy(x, work, sizeof work);
            wk = x;
            cap = c;
        }
        if (f & GR_ST_CALLS)
            for (int32_t k = g->call_off[p.state]; k < g->call_off[p.state + 1]; k++) {
                int32_t nn = gr__stacks_push(st, g->calls[k].ret, p.node);
                if (nn == -1) {
                    rc = -ENOMEM;
                    goto out;
                }
                if (nn >= 0) wk[nw++] = (gr_pair){g->rule_start[g->calls[k].rule], nn};
            }
        if (f & GR_ST_FINAL) {
            if (p.node == 0) flags |= GR_BOTTOM;
            else wk[nw++] = (gr_pair){st->nodes[p.node].ret, st->nodes[p.node].parent};
        }
    }
out:
    if (wk != work) free(wk);
    return rc ? rc : flags;
}

int gr__step(const gr_grammar *g, gr_stacks *st, gr_visit *vis, const gr_pair *in, int n,
             unsigned char byte, gr_pairs *out)
{
    int flags = 0;
    gr__visit_reset(vis);
    for (int i = 0; i < n; i++) {
        int32_t t = gr__next(g, in[i].state, byte);
        if (t < 0) continue;
        int f = gr__closure(g, st, vis, t, in[i].node, out);
        if (f < 0) return f;
        flags |= f;
    }
    return flags;
}
