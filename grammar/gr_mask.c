/*
 * gr_mask.c — the vocabulary as a byte trie, and token masks: which tokens may come next.
 *
 *   vocabulary trie (depth-first order, one per model): node i = (byte, depth, end of subtree,
 *   tokens ending here). Walking it against a configuration costs one step per surviving node;
 *   a node that kills every path skips its whole subtree.
 *
 *   per DFA state s, cached lazily (xgrammar's adaptive token mask cache): walk the trie from s
 *   alone, with an unknown caller below its frame. A token is
 *     accepted  — its bytes are consumed inside the frame, or end exactly where the rule may
 *                 end: allowed whatever the real stack holds;
 *     uncertain — it only survives by returning from s's rule with bytes left: it depends on
 *                 the real stack (rules that are never called, like the root, have no caller:
 *                 returning with bytes left rejects there);
 *     rejected  — otherwise.
 *   A mask is then the union over the configuration's pairs of the accepted sets, plus the
 *   uncertain tokens checked against the real stack (a walk over just those, sharing prefixes).
 *   Moves out of s at depth 0 are only s's own byte edges: its calls and returns are other
 *   pairs of the configuration already.
 *
 * The cache lives in the grammar (per vocabulary, under the grammar's lock) and is bounded in
 * bytes; past the bound masks are computed by a full walk without caching.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

#define GR_MCACHE_BYTES ((size_t)256 << 20) /* cached masks per grammar and vocabulary */

/* ---- vocabulary ---------------------------------------------------------------------------- */

typedef struct vtok {
    const unsigned char *p;
    int len;
    int32_t id;
} vtok;

static int vtok_cmp(const void *x, const void *y)
{
    const vtok *a = x, *b = y;
    int n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->p, b->p, (size_t)n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

void gr_vocab_destroy(gr_vocab *v)
{
    if (!v) return;
    if (v->tok_bytes)
        for (int i = 0; i < v->n_vocab; i++) free(v->tok_bytes[i]);
    free(v->tok_bytes);
    free(v->tok_len);
    free(v->tok_node);
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok_off);
    free(v->tok_ids);
    free(v->eog);
    free(v);
}

int gr_vocab_size(const gr_vocab *v)
{
    return v->n_vocab;
}

/* Builds the trie over the sorted tokens t[0..n). */
static int build_trie(gr_vocab *v, const vtok *t, int n, int64_t total_bytes)
{
    size_t cap = (size_t)total_bytes + 1;
    v->byte = malloc(cap);
    v->depth = malloc(sizeof(int32_t) * cap);
    v->end = malloc(sizeof(int32_t) * cap);
    v->tok_off = malloc(sizeof(int32_t) * (cap + 1));
    v->tok_ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *path = malloc(sizeof(int32_t) * ((size_t)v->max_len + 2));
    if (!v->byte || !v->depth || !v->end || !v->tok_off || !v->tok_ids || !path) {
        free(path);
        return -ENOMEM;
    }
    int nn = 0, nt = 0, cur = 0;
    for (int k = 0; k < n; k++) {
        int l = 0;
        if (k) {
            int m = t[k - 1].len < t[k].len ? t[k - 1].len : t[k].len;
            while (l < m && t[k - 1].p[l] == t[k].p[l]) l++;
        }
        for (int d = cur; d > l; d--) v->end[path[d]] = nn;
        for (int d = l + 1; d <= t[k].len; d++) {
            v->byte[nn] = t[k].p[d - 1];
            v->depth[nn] = d;
            v->tok_off[nn] = nt;
            path[d] = nn++;
        }
        cur = t[k].len;
        v->tok_ids[nt++] = t[k].id;
        v->tok_node[t[k].id] = path[t[k].len];
    }
    for (int d = cur; d > 0; d--) v->end[path[d]] = nn;
    v->tok_off[nn] = nt;
    v->n_nodes = nn;
    free(path);
    return 0;
}

gr_vocab *gr_vocab_create_raw(int n_vocab, const char *const *bytes, const int *lens,
                              const int32_t *eog, int n_eog)
{
    gr_vocab *v = calloc(1, sizeof *v);
    vtok *t = NULL;
    if (!v) return NULL;
    v->n_vocab = n_vocab;
    v->tok_bytes = calloc((size_t)(n_vocab ? n_vocab : 1), sizeof *v->tok_bytes);
    v->tok_len = calloc((size_t)(n_vocab ? n_vocab : 1), sizeof *v->tok_len);
    v->tok_node = malloc(sizeof *v->tok_node * (size_t)(n_vocab ? n_vocab : 1));
    v->eog = malloc(sizeof *v->eog * (size_t)(n_eog ? n_eog : 1));
    t = malloc(sizeof *t * (size_t)(n_vocab ? n_vocab : 1));
    if (!v->tok_bytes || !v->tok_len || !v->tok_node || !v->eog || !t) goto fail;
    v->n_eog = 0;
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab) v->eog[v->n_eog++] = eog[i];
    int n = 0;
    int64_t total = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->tok_node[i] = -1;
        int is_eog = 0;
        for (int k = 0; k < v->n_eog; k++) is_eog |= v->eog[k] == i;
        if (!bytes[i] || lens[i] <= 0 || is_eog) continue;
        if (!(v->tok_bytes[i] = malloc((size_t)lens[i]))) goto fail;
        memcpy(v->tok_bytes[i], bytes[i], (size_t)lens[i]);
        v->tok_len[i] = lens[i];
        if (lens[i] > v->max_len) v->max_len = lens[i];
        t[n++] = (vtok){v->tok_bytes[i], lens[i], i};
        total += lens[i];
    }
    if (n > 1) qsort(t, (size_t)n, sizeof *t, vtok_cmp);
    if (build_trie(v, t, n, total)) goto fail;
    free(t);
    return v;
fail:
    free(t);
    gr_vocab_destroy(v);
    return NULL;
}

gr_vocab *gr_vocab_create(const tokenizer *tk, int n_vocab)
{
    int nt = tok_n_vocab(tk);
    const char **bytes = calloc((size_t)(n_vocab ? n_vocab : 1), sizeof *bytes);
    int *lens = calloc((size_t)(n_vocab ? n_vocab : 1), sizeof *lens);
    gr_vocab *v = NULL;
    if (!bytes || !lens) goto out;
    for (int i = 0; i < n_vocab && i < nt; i++) {
        int ty = tok_type(tk, i);
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNUSED || ty == TOK_TYPE_UNKNOWN) continue;
        int len = tok_token_bytes(tk, i, 0, NULL, 0);
        if (len <= 0) continue;
        char *b = malloc((size_t)len);
        if (!b) goto out;
        tok_token_bytes(tk, i, 0, b, len);
        bytes[i] = b;
        lens[i] = len;
    }
    const int32_t *eog;
    int n_eog = tok_eog_ids(tk, &eog);
    v = gr_vocab_create_raw(n_vocab, bytes, lens, eog, n_eog);
out:
    if (bytes)
        for (int i = 0; i < n_vocab; i++) free((char *)bytes[i]);
    free(bytes);
    free(lens);
    return v;
}

/* ---- walks ----------------------------------------------------------------------------------- */

enum { GR_W_ESC = 1 }; /* gr_walk.esc: the frame was left with bytes still to come */

void gr__walk_fini(gr_walk *w)
{
    gr__stacks_fini(&w->st);
    gr__visit_fini(&w->vis);
    free(w->arena.v);
    free(w->cfg_off);
    free(w->cfg_n);
    free(w->esc);
    free(w->bits);
    free(w->unc);
    memset(w, 0, sizeof *w);
}

static int walk_init(gr_walk *w, const gr_vocab *v)
{
    if (w->depth_cap) return 0;
    int dc = v->max_len + 1;
    w->cfg_off = malloc(sizeof(int32_t) * ((size_t)dc + 1));
    w->cfg_n = malloc(sizeof(int32_t) * ((size_t)dc + 1));
    w->esc = calloc((size_t)dc + 1, 1);
    w->bits = malloc(sizeof(uint32_t) * GR_MASK_WORDS(v->n_vocab));
    if (!w->cfg_off || !w->cfg_n || !w->esc || !w->bits || gr__stacks_init(&w->st) ||
        gr__visit_init(&w->vis, 64) || gr__pairs_reserve(&w->arena, 256)) {
        gr__walk_fini(w);
        return -ENOMEM;
    }
    w->depth_cap = dc;
    return 0;
}

static void set_node_tokens(const gr_vocab *v, int32_t node, uint32_t *bits)
{
    for (int32_t k = v->tok_off[node]; k < v->tok_off[node + 1]; k++) {
        int32_t id = v->tok_ids[k];
        bits[id >> 5] |= 1u << (id & 31);
    }
}

static int add_unc(gr_walk *w, int32_t node)
{
    if (gr__grow((void **)&w->unc, &w->cap_unc, (int64_t)w->n_unc + 1, sizeof *w->unc)) return -ENOMEM;
    w->unc[w->n_unc++] = node;
    return 0;
}

/* The configuration at depth d (1-based: after d bytes) from the one at depth d - 1, by byte b.
 * Depth 1 moves by the pair's own byte edges only. Returns flag bits or -ENOMEM; the pairs are
 * appended to the arena and recorded in cfg_off/cfg_n[d]. */
static int walk_step(const gr_grammar *g, gr_stacks *st, gr_walk *w, int d, unsigned char b)
{
    int po = w->cfg_off[d - 1], pn = w->cfg_n[d - 1], flags = 0;
    w->arena.n = po + pn;
    int start = w->arena.n;
    if (pn == 1) {
        gr_pair p = w->arena.v[po];
        int32_t t = gr__next(g, p.state, b);
        if (t >= 0) {
            if (g->flags[t] == GR_ST_BYTES) { /* the common case: a plain move, no closure */
                if (gr__pairs_reserve(&w->arena, 1)) return -ENOMEM;
                w->arena.v[w->arena.n++] = (gr_pair){t, p.node};
            } else {
                gr__visit_reset(&w->vis);
                flags = gr__closure(g, st, &w->vis, t, p.node, &w->arena);
            }
        }
    } else if (pn > 1) {
        /* gr__step reads the previous configuration from the arena it appends to: make room for
         * a whole configuration first so the arena is not moved meanwhile */
        if (gr__pairs_reserve(&w->arena, GR_MAX_VISIT)) return -ENOMEM;
        flags = gr__step(g, st, &w->vis, w->arena.v + po, pn, b, &w->arena);
    }
    w->cfg_off[d] = start;
    w->cfg_n[d] = w->arena.n - start;
    return flags;
}

/* Walks the whole trie from pair (s, node) on stacks st. Accepted tokens are set in bits.
 * escape = 1: node 0 is an unknown caller (a cache walk): tokens that survive only by
 * returning from it with bytes left go to w->unc. escape = 0: node 0 is the real bottom. */
static int walk_trie(const gr_grammar *g, const gr_vocab *v, gr_stacks *st, gr_walk *w,
                     int32_t s, int32_t node, int escape, uint32_t *bits)
{
    w->arena.n = 0;
    w->n_unc = 0;
    w->arena.v[0] = (gr_pair){s, node};
    w->arena.n = 1;
    w->cfg_off[0] = 0;
    w->cfg_n[0] = 1;
    w->esc[0] = 0;
    for (int32_t i = 0; i < v->n_nodes;) {
        int d = v->depth[i];
        int flags = walk_step(g, st, w, d, v->byte[i]);
        if (flags < 0) return flags;
        int cn = w->cfg_n[d], bottom = (flags & GR_BOTTOM) != 0;
        uint8_t before = w->esc[d - 1];
        w->esc[d] = before | (bottom && escape ? GR_W_ESC : 0);
        if (cn > 0 || bottom) set_node_tokens(v, i, bits);
        else if (before && v->tok_off[i + 1] > v->tok_off[i] && add_unc(w, i)) return -ENOMEM;
        if (cn > 0) {
            i++;
            continue;
        }
        if (w->esc[d])
            for (int32_t j = i + 1; j < v->end[i]; j++)
                if (v->tok_off[j + 1] > v->tok_off[j] && add_unc(w, j)) return -ENOMEM;
        i = v->end[i];
    }
    return 0;
}

/* Checks the uncertain trie nodes unc[0..n) from pair (s, node) on the real stacks; sets the
 * survivors in mask. Consecutive nodes share their common prefix's configurations. */
static int check_unc(const gr_grammar *g, const gr_vocab *v, gr_stacks *st, gr_walk *w,
                     int32_t s, int32_t node, const int32_t *unc, int n, uint32_t *mask)
{
    const unsigned char *prev = NULL;
    int prev_len = 0, valid = 0, dead = 1 << 30;
    w->arena.v[0] = (gr_pair){s, node};
    w->arena.n = 1;
    w->cfg_off[0] = 0;
    w->cfg_n[0] = 1;
    for (int k = 0; k < n; k++) {
        int32_t u = unc[k];
        const unsigned char *b = v->tok_bytes[v->tok_ids[v->tok_off[u]]];
        int len = v->depth[u], l = 0, m = prev_len < len ? prev_len : len;
        while (l < m && prev[l] == b[l]) l++;
        prev = b;
        prev_len = len;
        if (valid > l) valid = l;
        if (dead <= l) continue;
        dead = 1 << 30;
        int ok = 1;
        for (int d = valid + 1; d <= len; d++) {
            int f = walk_step(g, st, w, d, b[d - 1]);
            if (f < 0) return f;
            valid = d;
            if (w->cfg_n[d] == 0 && !(d == len && (f & GR_BOTTOM))) {
                dead = d;
                valid = d - 1;
                ok = 0;
                break;
            }
        }
        if (ok) set_node_tokens(v, u, mask);
    }
    return 0;
}

/* ---- the per-state cache (its storage is gr_mcache.c) ------------------------------------ */

/* Computes state s's split of the vocabulary (a cache walk). NULL on -ENOMEM. */
static gr_smask *smask_compute(gr_matcher *m, int32_t s)
{
    const gr_grammar *g = m->g;
    const gr_vocab *v = m->v;
    gr_walk *w = &m->w;
    size_t words = GR_MASK_WORDS(v->n_vocab);
    gr_smask *sm = calloc(1, sizeof *sm);
    if (!sm) return NULL;
    memset(w->bits, 0, words * sizeof *w->bits);
    gr__stacks_reset(&w->st);
    if (walk_trie(g, v, &w->st, w, s, 0, g->rule_called[g->rule_of[s]], w->bits)) goto fail;
    int n = 0;
    for (size_t i = 0; i < words; i++) n += __builtin_popcount(w->bits[i]);
    sm->n_acc = n;
    if ((size_t)n * 32 < (size_t)v->n_vocab) {
        sm->acc_ids = malloc(sizeof *sm->acc_ids * (size_t)(n ? n : 1));
        if (!sm->acc_ids) goto fail;
        int k = 0;
        for (size_t i = 0; i < words; i++)
            for (uint32_t x = w->bits[i]; x; x &= x - 1) sm->acc_ids[k++] = (int32_t)(i * 32 + (size_t)__builtin_ctz(x));
    } else {
        if (!(sm->acc_bits = malloc(words * sizeof *sm->acc_bits))) goto fail;
        memcpy(sm->acc_bits, w->bits, words * sizeof *sm->acc_bits);
    }
    sm->n_unc = w->n_unc;
    if (w->n_unc) {
        if (!(sm->unc = malloc(sizeof *sm->unc * (size_t)w->n_unc))) goto fail;
        memcpy(sm->unc, w->unc, sizeof *sm->unc * (size_t)w->n_unc);
    }
    return sm;
fail:
    gr__smask_free(sm);
    return NULL;
}

static size_t smask_bytes(const gr_smask *sm, size_t words)
{
    return sizeof *sm + (sm->acc_bits ? words * 4 : (size_t)sm->n_acc * 4) + (size_t)sm->n_unc * 4;
}

/* ORs pair (s, node)'s allowed tokens into mask, through the cache when possible. */
static int pair_mask(gr_matcher *m, gr_mcache *mc, gr_pair p, uint32_t *mask)
{
    const gr_grammar *g = m->g;
    const gr_vocab *v = m->v;
    size_t words = GR_MASK_WORDS(v->n_vocab);
    /* Near the depth bound a cached "accepted" could push past it: walk exactly instead. */
    if (m->st.nodes[p.node].depth > GR_MAX_DEPTH / 2) return walk_trie(g, v, &m->st, &m->w, p.state, p.node, 0, mask);
    gr_smask *sm = mc ? mc->st[p.state] : NULL, *tmp = NULL;
    if (!sm) {
        if (!(sm = tmp = smask_compute(m, p.state))) return -ENOMEM;
        size_t b = smask_bytes(sm, words);
        if (mc && gr__mcache_bytes(m->g) + b <= GR_MCACHE_BYTES) {
            mc->st[p.state] = sm;
            mc->bytes += b;
            tmp = NULL;
        }
    }
    if (sm->acc_bits) {
        for (size_t i = 0; i < words; i++) mask[i] |= sm->acc_bits[i];
    } else {
        for (int i = 0; i < sm->n_acc; i++) mask[sm->acc_ids[i] >> 5] |= 1u << (sm->acc_ids[i] & 31);
    }
    int rc = sm->n_unc ? check_unc(g, v, &m->st, &m->w, p.state, p.node, sm->unc, sm->n_unc, mask) : 0;
    gr__smask_free(tmp);
    return rc;
}

int gr_matcher_fill_mask(gr_matcher *m, uint32_t *mask)
{
    const gr_vocab *v = m->v;
    size_t words = GR_MASK_WORDS(v->n_vocab);
    memset(mask, 0, words * sizeof *mask);
    int rc = 0;
    if (!m->terminated && m->cur.n) {
        if (walk_init(&m->w, v)) return -ENOMEM;
        pthread_mutex_lock(&m->g->mu);
        gr_mcache *mc = gr__mcache_of(m->g, v);
        for (int i = 0; i < m->cur.n && !rc; i++) rc = pair_mask(m, mc, m->cur.v[i], mask);
        pthread_mutex_unlock(&m->g->mu);
        if (rc) {
            memset(mask, 0, words * sizeof *mask);
            return rc;
        }
    }
    if (m->accepting || m->terminated)
        for (int i = 0; i < v->n_eog; i++) mask[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
    int n = 0;
    for (size_t i = 0; i < words; i++) n += __builtin_popcount(mask[i]);
    return n;
}
