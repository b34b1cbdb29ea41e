/*
 * gr_match.c — the matcher: a grammar's configuration (gr_config.c) advanced by accepted tokens
 * and bytes, its stacks compacted now and then, clones, and the invariant check. Its token
 * masks are gr_mask.c's.
 *
 * Engine thread (or whoever owns the matcher) only; the grammar is shared and read-only here.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

/* ---- the matcher ---------------------------------------------------------------------------- */

gr_matcher *gr_matcher_create(gr_grammar *g, const gr_vocab *v)
{
    gr_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->v = v;
    if (gr__stacks_init(&m->st) || gr__visit_init(&m->vis, 64)) goto fail;
    gr__visit_reset(&m->vis);
    int f = gr__closure(g, &m->st, &m->vis, g->rule_start[0], 0, &m->cur);
    if (f < 0) goto fail;
    m->accepting = (f & GR_BOTTOM) != 0;
    m->gc_at = 4096;
    m->g = gr_ref(g);
    return m;
fail:
    gr__stacks_fini(&m->st);
    gr__visit_fini(&m->vis);
    free(m->cur.v);
    free(m);
    return NULL;
}

gr_matcher *gr_matcher_clone(const gr_matcher *m)
{
    gr_matcher *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->v = m->v;
    c->accepting = m->accepting;
    c->terminated = m->terminated;
    c->gc_at = m->gc_at;
    if (gr__stacks_copy(&c->st, &m->st)) goto fail;
    if (gr__visit_init(&c->vis, 64) || gr__pairs_reserve(&c->cur, m->cur.n + 1)) goto fail;
    if (m->cur.n) memcpy(c->cur.v, m->cur.v, sizeof *c->cur.v * (size_t)m->cur.n);
    c->cur.n = m->cur.n;
    c->g = gr_ref(m->g);
    return c;
fail:
    gr__stacks_fini(&c->st);
    gr__visit_fini(&c->vis);
    free(c->cur.v);
    free(c);
    return NULL;
}

void gr_matcher_destroy(gr_matcher *m)
{
    if (!m) return;
    gr__stacks_fini(&m->st);
    gr__visit_fini(&m->vis);
    free(m->cur.v);
    gr__walk_fini(&m->w);
    gr_unref(m->g);
    free(m);
}

/* Keeps only the stack nodes the configuration uses (run when the pool has grown a lot: walks
 * and dead paths leave nodes behind). */
static void compact(gr_matcher *m)
{
    int n = gr__stacks_compact(&m->st, m->cur.v, m->cur.n);
    if (n < 0) return;
    m->gc_at = n * 2 > 4096 ? n * 2 : 4096;
}

int gr_matcher_accept_bytes(gr_matcher *m, const char *s, size_t n)
{
    if (m->terminated) return -EINVAL;
    if (n == 0) return 0;
    gr_pairs a = {0}, b = {0};
    if (gr__pairs_reserve(&a, m->cur.n + 1)) return -ENOMEM;
    if (m->cur.n) memcpy(a.v, m->cur.v, sizeof *a.v * (size_t)m->cur.n);
    a.n = m->cur.n;
    int rc = 0, flags = 0;
    for (size_t i = 0; i < n; i++) {
        if (a.n == 0) { /* complete, yet more bytes follow */
            rc = -EINVAL;
            break;
        }
        b.n = 0;
        flags = gr__step(m->g, &m->st, &m->vis, a.v, a.n, (unsigned char)s[i], &b);
        if (flags < 0) {
            rc = flags;
            break;
        }
        if (b.n == 0 && !(flags & GR_BOTTOM)) {
            rc = -EINVAL;
            break;
        }
        gr_pairs t = a;
        a = b;
        b = t;
    }
    if (!rc) {
        free(m->cur.v);
        m->cur = a;
        a.v = NULL;
        m->accepting = (flags & GR_BOTTOM) != 0;
        if (m->st.n > m->gc_at) compact(m);
    }
    free(a.v);
    free(b.v);
    return rc;
}

static int is_eog(const gr_vocab *v, int32_t token)
{
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == token) return 1;
    return 0;
}

int gr_matcher_accept(gr_matcher *m, int32_t token)
{
    const gr_vocab *v = m->v;
    if (token < 0 || token >= v->n_vocab) return -EINVAL;
    if (is_eog(v, token)) {
        if (!m->accepting && !m->terminated) return -EINVAL;
        m->terminated = 1;
        m->cur.n = 0;
        return 0;
    }
    if (!v->tok_bytes[token]) return -EINVAL;
    return gr_matcher_accept_bytes(m, (const char *)v->tok_bytes[token], (size_t)v->tok_len[token]);
}

int gr_matcher_is_accepting(const gr_matcher *m)
{
    return m->accepting || m->terminated;
}

int gr_matcher_is_done(const gr_matcher *m)
{
    return (m->accepting && m->cur.n == 0) || m->terminated;
}

int gr_matcher_is_terminated(const gr_matcher *m)
{
    return m->terminated;
}

void gr_matcher_check(const gr_matcher *m)
{
    const gr_grammar *g = m->g;
    const gr_stacks *st = &m->st;
    assert(m->cur.n <= GR_MAX_VISIT);
    assert(!m->terminated || m->cur.n == 0);
    for (int i = 0; i < m->cur.n; i++) {
        gr_pair p = m->cur.v[i];
        assert(p.state >= 0 && p.state < g->n_states);
        assert(g->flags[p.state] & GR_ST_BYTES);
        assert(p.node >= 0 && p.node < st->n);
        int d = st->nodes[p.node].depth;
        for (int32_t x = p.node; x != 0; x = st->nodes[x].parent) {
            assert(st->nodes[x].depth == d--);
            assert(st->nodes[x].parent >= 0 && st->nodes[x].parent < x);
            assert(st->nodes[x].ret >= 0 && st->nodes[x].ret < g->n_states);
        }
        assert(d == 0);
        for (int j = 0; j < i; j++) assert(m->cur.v[j].state != p.state || m->cur.v[j].node != p.node);
    }
    (void)g;
    (void)st;
}
