/*
 * gr_dfa.c — the NFA of the called rules → one DFA per rule, in gr_grammar's tables.
 *
 *   byte classes: bytes split at every edge's range bounds, so no edge tells two bytes of a
 *                 class apart; tables are [state][class];
 *   subset construction: a DFA state is the ε-closed set of NFA states of one rule; its byte
 *                 moves go class by class, its call edges rule by rule (a call edge of the NFA
 *                 is a symbol like a byte class: the callee's language is not looked into);
 *   pruning:      a state is productive when it can reach its rule's end through bytes and
 *                 calls of productive rules; edges into unproductive states are removed, so
 *                 a walk never enters a dead end;
 *   left recursion: a rule that can call itself (directly or through other rules) before
 *                 consuming a byte, across nullable callees, is refused with its name.
 *
 * Called once per compilation by gr_compile.c. The sizes (states, table bytes) are checked as
 * states are created; the deadline is charged by every loop the input can make long: each NFA
 * state a closure visits and each edge it looks at, each move of a state's expansion, the sets
 * hashed and compared when states are interned, the edges of the pruning and the steps of the
 * left-recursion walk. A closure of k states is sorted in O(k log k) (an insertion sort made a
 * closure of 10,000 states cost 10^8 steps: (a?){10000}a{10000} took 17 s of CPU).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "grammar/gr_internal.h"

typedef struct dcall {
    int32_t from, rule, to;
} dcall;

typedef struct db {
    const gr_nfa *f;
    int ncls;
    uint8_t cls[256];
    int n, cap;             /* DFA states */
    int32_t *set_off, *set_len;
    int32_t *pool;
    int n_pool, cap_pool;
    int32_t *next;          /* [cap][ncls] */
    uint8_t *flags;
    int32_t *rule_of;
    dcall *calls;
    int n_calls, cap_calls;
    int32_t *ht;            /* open addressing over DFA ids, -1 empty */
    int ht_cap;
    uint32_t *mark;         /* [nfa states] generation marks */
    uint32_t gen;
    int32_t *stack, *cl;    /* [nfa states] scratch */
    gr_budget *b;           /* the compile's deadline */
    gr_error *err;
} db;

/* Charges n units; 1 (err filled) once the deadline has passed. */
static int spent(db *d, int64_t n)
{
    if (!gr__charge(d->b, n)) return 0;
    gr__budget_fail(d->b, d->err);
    return 1;
}

static int i32_cmp(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

static int oom(db *d)
{
    return gr__fail(d->err, -1, "out of memory"), -ENOMEM;
}

static void byte_classes(db *d)
{
    uint8_t cut[257] = {0};
    cut[0] = 1;
    for (int i = 0; i < d->f->n_e; i++) {
        const gr_nfa_edge *e = &d->f->e[i];
        if (e->lo < 0) continue;
        cut[e->lo] = 1;
        cut[e->hi + 1] = 1;
    }
    int c = -1;
    for (int b = 0; b < 256; b++) {
        c += cut[b];
        d->cls[b] = (uint8_t)c;
    }
    d->ncls = c + 1;
}

/* The ε-closure of seeds[0..n), sorted, into d->cl; returns its size, or -1 past the deadline. */
static int closure(db *d, const int32_t *seeds, int n)
{
    const gr_nfa *f = d->f;
    uint32_t g = ++d->gen;
    int sp = 0, k = 0;
    for (int i = 0; i < n; i++)
        if (d->mark[seeds[i]] != g) {
            d->mark[seeds[i]] = g;
            d->stack[sp++] = seeds[i];
        }
    while (sp) {
        int32_t u = d->stack[--sp];
        d->cl[k++] = u;
        if (spent(d, 1 + f->off[u + 1] - f->off[u])) return -1;
        for (int32_t e = f->off[u]; e < f->off[u + 1]; e++)
            if (f->e[e].lo == GR_E_EPS && d->mark[f->e[e].to] != g) {
                d->mark[f->e[e].to] = g;
                d->stack[sp++] = f->e[e].to;
            }
    }
    if (k > 16) { /* large sets: O(k log k) */
        if (spent(d, (int64_t)k * 8)) return -1;
        qsort(d->cl, (size_t)k, sizeof *d->cl, i32_cmp);
        return k;
    }
    for (int i = 1; i < k; i++) { /* the common tiny sets: insertion sort */
        int32_t v = d->cl[i];
        int j = i;
        while (j > 0 && d->cl[j - 1] > v) {
            d->cl[j] = d->cl[j - 1];
            j--;
        }
        d->cl[j] = v;
    }
    return k;
}

static uint32_t set_hash(const int32_t *v, int n)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)v[i]) * 16777619u;
    return h;
}

static int ht_resize(db *d)
{
    int cap = d->ht_cap ? d->ht_cap * 2 : 1024;
    int32_t *ht = malloc(sizeof *ht * (size_t)cap);
    if (!ht) return -ENOMEM;
    for (int i = 0; i < cap; i++) ht[i] = -1;
    for (int i = 0; i < d->n; i++) {
        uint32_t h = set_hash(d->pool + d->set_off[i], d->set_len[i]) & (uint32_t)(cap - 1);
        while (ht[h] >= 0) h = (h + 1) & (uint32_t)(cap - 1);
        ht[h] = i;
    }
    free(d->ht);
    d->ht = ht;
    d->ht_cap = cap;
    return 0;
}

/* The DFA state for NFA set v[0..n) of rule r, created when new. -1 on error (err filled). */
static int32_t intern(db *d, const int32_t *v, int n, int rule)
{
    if (n < 0) return -1; /* the closure ran out of time (err filled) */
    if (spent(d, n)) return -1;
    uint32_t h0 = set_hash(v, n);
    for (uint32_t h = h0 & (uint32_t)(d->ht_cap - 1); d->ht[h] >= 0; h = (h + 1) & (uint32_t)(d->ht_cap - 1)) {
        int32_t id = d->ht[h];
        if (d->set_len[id] == n && !memcmp(d->pool + d->set_off[id], v, sizeof *v * (size_t)n)) return id;
        if (spent(d, d->set_len[id] == n ? n / 4 + 1 : 1)) return -1;
    }
    if (d->n >= GR_MAX_DFA)
        return gr__fail(d->err, -1, "grammar too large: more than %d automaton states", GR_MAX_DFA), -1;
    if ((size_t)(d->n + 1) * (size_t)d->ncls * sizeof(int32_t) > GR_MAX_TABLE_BYTES)
        return gr__fail(d->err, -1, "grammar too large: its tables would exceed %u MiB", GR_MAX_TABLE_BYTES >> 20), -1;
    int cap = d->cap;
    if (gr__grow((void **)&d->set_off, &cap, d->n + 1, sizeof(int32_t))) return oom(d), -1;
    cap = d->cap;
    if (gr__grow((void **)&d->set_len, &cap, d->n + 1, sizeof(int32_t))) return oom(d), -1;
    cap = d->cap;
    if (gr__grow((void **)&d->flags, &cap, d->n + 1, 1)) return oom(d), -1;
    cap = d->cap;
    if (gr__grow((void **)&d->rule_of, &cap, d->n + 1, sizeof(int32_t))) return oom(d), -1;
    cap = d->cap;
    if (gr__grow((void **)&d->next, &cap, d->n + 1, sizeof(int32_t) * (size_t)d->ncls)) return oom(d), -1;
    d->cap = cap;
    if (gr__grow((void **)&d->pool, &d->cap_pool, (int64_t)d->n_pool + n, sizeof(int32_t))) return oom(d), -1;
    int32_t id = d->n++;
    memcpy(d->pool + d->n_pool, v, sizeof *v * (size_t)n);
    d->set_off[id] = d->n_pool;
    d->set_len[id] = n;
    d->n_pool += n;
    d->rule_of[id] = rule;
    d->flags[id] = 0;
    for (int i = 0; i < n; i++)
        if (v[i] == d->f->accept[rule]) d->flags[id] |= GR_ST_FINAL;
    for (int c = 0; c < d->ncls; c++) d->next[(size_t)id * (size_t)d->ncls + (size_t)c] = -1;
    if (d->n * 2 > d->ht_cap && ht_resize(d)) return oom(d), -1;
    else {
        uint32_t h = h0 & (uint32_t)(d->ht_cap - 1);
        while (d->ht[h] >= 0 && d->ht[h] != id) h = (h + 1) & (uint32_t)(d->ht_cap - 1);
        d->ht[h] = id;
    }
    return id;
}

typedef struct mv {
    int32_t key, to; /* class or rule, NFA target */
} mv;

static int mv_cmp(const void *x, const void *y)
{
    const mv *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->to > b->to) - (a->to < b->to);
}

/* Scratch of expand(). */
typedef struct xscr {
    mv *moves;
    int cap_moves;
    int32_t *seeds, *prev;
    int cap_seeds, cap_prev;
} xscr;

/* Computes the byte moves and call edges of DFA state id. */
static int expand(db *d, int32_t id, xscr *x)
{
    const gr_nfa *f = d->f;
    for (int pass = 0; pass < 2; pass++) { /* 0: byte classes, 1: calls */
        int nm = 0;
        for (int i = 0; i < d->set_len[id]; i++) {
            int32_t u = d->pool[d->set_off[id] + i];
            if (spent(d, 1 + f->off[u + 1] - f->off[u])) return -EINVAL;
            for (int32_t e = f->off[u]; e < f->off[u + 1]; e++) {
                const gr_nfa_edge *ed = &f->e[e];
                int lo = pass == 0 ? (ed->lo >= 0 ? d->cls[ed->lo] : 1) : (ed->lo == GR_E_CALL ? ed->hi : 1);
                int hi = pass == 0 ? (ed->lo >= 0 ? d->cls[ed->hi] : 0) : (ed->lo == GR_E_CALL ? ed->hi : 0);
                for (int c = lo; c <= hi; c++) {
                    if (gr__grow((void **)&x->moves, &x->cap_moves, nm + 1, sizeof *x->moves)) return oom(d);
                    x->moves[nm++] = (mv){c, ed->to};
                }
            }
        }
        if (nm > 1 && spent(d, (int64_t)nm * 8)) return -EINVAL;
        if (nm > 1) qsort(x->moves, (size_t)nm, sizeof *x->moves, mv_cmp);
        int n_prev = -1;
        int32_t prev_t = -1;
        for (int i = 0; i < nm;) {
            int j = i, ns = 0;
            if (spent(d, 1)) return -EINVAL;
            for (; j < nm && x->moves[j].key == x->moves[i].key; j++) {
                if (ns && x->seeds[ns - 1] == x->moves[j].to) continue;
                if (gr__grow((void **)&x->seeds, &x->cap_seeds, ns + 1, sizeof *x->seeds)) return oom(d);
                x->seeds[ns++] = x->moves[j].to;
            }
            int32_t t = prev_t;
            /* consecutive classes often move to the same set: reuse the last result */
            if (spent(d, ns)) return -EINVAL;
            if (!(pass == 0 && n_prev == ns && !memcmp(x->seeds, x->prev, sizeof *x->seeds * (size_t)ns))) {
                t = intern(d, d->cl, closure(d, x->seeds, ns), d->rule_of[id]);
                if (t < 0) return -EINVAL;
                if (gr__grow((void **)&x->prev, &x->cap_prev, ns, sizeof *x->prev)) return oom(d);
                memcpy(x->prev, x->seeds, sizeof *x->seeds * (size_t)ns);
                n_prev = ns;
                prev_t = t;
            }
            if (pass == 0) {
                d->next[(size_t)id * (size_t)d->ncls + (size_t)x->moves[i].key] = t;
            } else {
                if (gr__grow((void **)&d->calls, &d->cap_calls, d->n_calls + 1, sizeof *d->calls)) return oom(d);
                d->calls[d->n_calls++] = (dcall){id, x->moves[i].key, t};
            }
            i = j;
        }
    }
    return 0;
}

static int subset(db *d, int32_t *starts)
{
    xscr x = {0};
    int rc = 0;
    for (int r = 0; r < d->f->n_rules && !rc; r++) {
        int k = closure(d, &d->f->start[r], 1);
        starts[r] = intern(d, d->cl, k, r);
        if (starts[r] < 0) rc = -EINVAL;
    }
    for (int32_t id = 0; id < d->n && !rc; id++) rc = expand(d, id, &x);
    free(x.moves);
    free(x.seeds);
    free(x.prev);
    return rc;
}


/* ---- pruning ------------------------------------------------------------------------------ */

/* CSR of an edge list keyed by key[i] (0 ≤ key < n): off[n + 1], idx[m] (edge indices). */
static int csr(const int32_t *key, int m, int n, int32_t **off_out, int32_t **idx_out)
{
    int32_t *off = calloc((size_t)n + 1, sizeof *off), *idx = malloc(sizeof *idx * (size_t)(m ? m : 1));
    int32_t *fill = malloc(sizeof *fill * (size_t)(n ? n : 1));
    if (!off || !idx || !fill) {
        free(off);
        free(idx);
        free(fill);
        return -ENOMEM;
    }
    for (int i = 0; i < m; i++) off[key[i] + 1]++;
    for (int i = 0; i < n; i++) off[i + 1] += off[i];
    memcpy(fill, off, sizeof *fill * (size_t)n);
    for (int i = 0; i < m; i++) idx[fill[key[i]]++] = i;
    free(fill);
    *off_out = off;
    *idx_out = idx;
    return 0;
}

/* Marks productive states (prod) and rules (prod_rule) by propagating backwards from the final
 * states. */
static int productive(db *d, const int32_t *starts, uint8_t *prod, uint8_t *prod_rule)
{
    int n = d->n, nr = d->f->n_rules, rc = -ENOMEM;
    size_t nt = (size_t)n * (size_t)d->ncls;
    int m = 0;
    for (size_t i = 0; i < nt; i++) m += d->next[i] >= 0;
    int32_t *bsrc = malloc(sizeof(int32_t) * (size_t)(m ? m : 1)), *bdst = malloc(sizeof(int32_t) * (size_t)(m ? m : 1));
    int32_t *cto = malloc(sizeof(int32_t) * (size_t)(d->n_calls ? d->n_calls : 1));
    int32_t *crule = malloc(sizeof(int32_t) * (size_t)(d->n_calls ? d->n_calls : 1));
    int32_t *start_of = malloc(sizeof(int32_t) * (size_t)n), *work = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *boff = NULL, *bidx = NULL, *toff = NULL, *tidx = NULL, *roff = NULL, *ridx = NULL;
    if (!bsrc || !bdst || !cto || !crule || !start_of || !work) goto out;
    m = 0;
    for (size_t i = 0; i < nt; i++)
        if (d->next[i] >= 0) {
            bsrc[m] = (int32_t)(i / (size_t)d->ncls);
            bdst[m++] = d->next[i];
        }
    for (int i = 0; i < d->n_calls; i++) {
        cto[i] = d->calls[i].to;
        crule[i] = d->calls[i].rule;
    }
    if (csr(bdst, m, n, &boff, &bidx) || csr(cto, d->n_calls, n, &toff, &tidx) || csr(crule, d->n_calls, nr, &roff, &ridx))
        goto out;
    for (int i = 0; i < n; i++) start_of[i] = -1;
    for (int r = 0; r < nr; r++) start_of[starts[r]] = r;
    int nw = 0;
    for (int i = 0; i < n; i++)
        if ((prod[i] = (d->flags[i] & GR_ST_FINAL) != 0)) work[nw++] = i;
    memset(prod_rule, 0, (size_t)nr);
    while (nw) {
        int32_t t = work[--nw];
        if (spent(d, 1 + boff[t + 1] - boff[t] + toff[t + 1] - toff[t])) {
            rc = -EINVAL;
            goto out;
        }
        for (int32_t k = boff[t]; k < boff[t + 1]; k++) {
            int32_t s = bsrc[bidx[k]];
            if (!prod[s]) prod[s] = 1, work[nw++] = s;
        }
        for (int32_t k = toff[t]; k < toff[t + 1]; k++) {
            const dcall *c = &d->calls[tidx[k]];
            if (prod_rule[c->rule] && !prod[c->from]) prod[c->from] = 1, work[nw++] = c->from;
        }
        int r = start_of[t];
        if (r >= 0 && !prod_rule[r]) {
            prod_rule[r] = 1;
            for (int32_t k = roff[r]; k < roff[r + 1]; k++) {
                const dcall *c = &d->calls[ridx[k]];
                if (prod[c->to] && !prod[c->from]) prod[c->from] = 1, work[nw++] = c->from;
            }
        }
    }
    rc = 0;
out:
    free(bsrc);
    free(bdst);
    free(cto);
    free(crule);
    free(start_of);
    free(work);
    free(boff);
    free(bidx);
    free(toff);
    free(tidx);
    free(roff);
    free(ridx);
    return rc;
}

/* Drops edges into unproductive states and calls of unproductive rules. */
static void prune(db *d, const uint8_t *prod, const uint8_t *prod_rule)
{
    size_t nt = (size_t)d->n * (size_t)d->ncls;
    for (size_t i = 0; i < nt; i++)
        if (d->next[i] >= 0 && !prod[d->next[i]]) d->next[i] = -1;
    int k = 0;
    for (int i = 0; i < d->n_calls; i++)
        if (prod_rule[d->calls[i].rule] && prod[d->calls[i].to]) d->calls[k++] = d->calls[i];
    d->n_calls = k;
}

/* ---- left recursion ----------------------------------------------------------------------- */

static int dcall_cmp(const void *x, const void *y)
{
    const dcall *a = x, *b = y;
    if (a->from != b->from) return a->from < b->from ? -1 : 1;
    if (a->rule != b->rule) return a->rule < b->rule ? -1 : 1;
    return (a->to > b->to) - (a->to < b->to);
}

/* States reachable from start without a byte (through calls of nullable rules) into out;
 * returns the count, and *final = 1 when one of them ends the rule. */
static int eps_reach(db *d, const int32_t *coff, const uint8_t *nullable, int32_t start,
                     uint32_t *mark, uint32_t g, int32_t *out, int *final)
{
    int n = 0, head = 0;
    out[n++] = start;
    mark[start] = g;
    *final = 0;
    while (head < n) {
        int32_t s = out[head++];
        gr__charge(d->b, 1 + coff[s + 1] - coff[s]); /* (the callers look at d->b->expired) */
        if (d->flags[s] & GR_ST_FINAL) *final = 1;
        for (int32_t k = coff[s]; k < coff[s + 1]; k++)
            if (nullable[d->calls[k].rule] && mark[d->calls[k].to] != g) {
                mark[d->calls[k].to] = g;
                out[n++] = d->calls[k].to;
            }
    }
    return n;
}

/* Refuses a rule that can reach a call of itself without consuming a byte. */
static int left_recursion(db *d, const int32_t *starts, const int32_t *coff)
{
    int nr = d->f->n_rules, n = d->n, rc = -ENOMEM;
    uint8_t *nullable = calloc((size_t)nr, 1), *color = calloc((size_t)nr, 1);
    uint32_t *mark = calloc((size_t)n, sizeof *mark);
    int32_t *reach = malloc(sizeof *reach * (size_t)n), *stack = malloc(sizeof *stack * (size_t)nr * 2);
    uint32_t g = 0;
    if (!nullable || !color || !mark || !reach || !stack) goto out;
    for (int changed = 1; changed && !d->b->expired;) {
        changed = 0;
        for (int r = 0; r < nr; r++) {
            int fin;
            if (nullable[r]) continue;
            eps_reach(d, coff, nullable, starts[r], mark, ++g, reach, &fin);
            if (fin) nullable[r] = 1, changed = 1;
        }
    }
    if (d->b->expired) {
        rc = gr__budget_fail(d->b, d->err);
        goto out;
    }
    /* depth-first over "r calls q before any byte"; a grey q is a cycle */
    rc = 0;
    for (int r0 = 0; r0 < nr && !rc; r0++) {
        if (color[r0]) continue;
        int sp = 0;
        stack[sp++] = r0;
        stack[sp++] = 0;
        color[r0] = 1;
        while (sp && !rc) {
            if (d->b->expired) {
                rc = gr__budget_fail(d->b, d->err);
                break;
            }
            int32_t r = stack[sp - 2], *pos = &stack[sp - 1];
            int fin;
            int k = eps_reach(d, coff, nullable, starts[r], mark, ++g, reach, &fin), found = -1, idx = 0;
            gr__charge(d->b, k);
            for (int i = 0; i < k && found < 0; i++)
                for (int32_t c = coff[reach[i]]; c < coff[reach[i] + 1]; c++)
                    if (idx++ == *pos) {
                        found = d->calls[c].rule;
                        break;
                    }
            if (found < 0) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            (*pos)++;
            if (color[found] == 1)
                rc = gr__fail(d->err, -1, "rule '%s' is left-recursive (it can reach itself before matching any text)", d->f->names[found]);
            else if (!color[found]) {
                color[found] = 1;
                stack[sp++] = found;
                stack[sp++] = 0;
            }
        }
    }
out:
    free(nullable);
    free(color);
    free(mark);
    free(reach);
    free(stack);
    return rc;
}

/* ---- the grammar's tables ---------------------------------------------------------------- */

static int finish(db *d, const int32_t *starts, int32_t *coff, gr_grammar *g)
{
    int nr = d->f->n_rules;
    g->rule_start = malloc(sizeof(int32_t) * (size_t)nr);
    g->rule_called = calloc((size_t)nr, 1);
    g->rule_names = calloc((size_t)nr, sizeof(char *));
    g->calls = malloc(sizeof *g->calls * (size_t)(d->n_calls ? d->n_calls : 1));
    if (!g->rule_start || !g->rule_called || !g->rule_names || !g->calls) return oom(d);
    for (int r = 0; r < nr; r++) {
        g->rule_start[r] = starts[r];
        if (!(g->rule_names[r] = strdup(d->f->names[r]))) return oom(d);
    }
    for (int i = 0; i < d->n_calls; i++) {
        g->calls[i] = (gr_call){d->calls[i].rule, d->calls[i].to};
        g->rule_called[d->calls[i].rule] = 1;
        d->flags[d->calls[i].from] |= GR_ST_CALLS;
    }
    for (int s = 0; s < d->n; s++)
        for (int c = 0; c < d->ncls; c++)
            if (d->next[(size_t)s * (size_t)d->ncls + (size_t)c] >= 0) d->flags[s] |= GR_ST_BYTES;
    g->n_states = d->n;
    g->n_classes = d->ncls;
    memcpy(g->cls, d->cls, sizeof g->cls);
    g->next = d->next;
    g->flags = d->flags;
    g->rule_of = d->rule_of;
    g->call_off = coff;
    g->n_rules = nr;
    d->next = NULL;
    d->flags = NULL;
    d->rule_of = NULL;
    g->bytes = (size_t)d->n * ((size_t)d->ncls * sizeof(int32_t) + 1 + sizeof(int32_t) * 2) +
               (size_t)d->n_calls * sizeof(gr_call);
    return 0;
}

static void free_tables(gr_grammar *g)
{
    free(g->rule_start);
    free(g->rule_called);
    if (g->rule_names)
        for (int r = 0; r < g->n_rules; r++) free(g->rule_names[r]);
    free(g->rule_names);
    free(g->calls);
    g->n_rules = 0;
    g->rule_start = NULL;
    g->rule_called = NULL;
    g->rule_names = NULL;
    g->calls = NULL;
}

int gr__dfa_build(const gr_nfa *f, gr_budget *b, gr_grammar *g, gr_error *err)
{
    gr_budget unlimited;
    if (!b) { /* (every caller passes one; a day-long budget keeps the code paths the same) */
        gr__budget_init(&unlimited, 0);
        unlimited.deadline_us = INT64_MAX;
        b = &unlimited;
    }
    db d = {.f = f, .b = b, .err = err};
    int nr = f->n_rules, rc = -ENOMEM;
    int32_t *starts = malloc(sizeof(int32_t) * (size_t)nr), *coff = NULL;
    uint8_t *prod = NULL, *prod_rule = malloc((size_t)nr);
    d.mark = calloc((size_t)f->n_states, sizeof *d.mark);
    d.stack = malloc(sizeof(int32_t) * (size_t)f->n_states);
    d.cl = malloc(sizeof(int32_t) * (size_t)f->n_states);
    if (!starts || !prod_rule || !d.mark || !d.stack || !d.cl) {
        oom(&d);
        goto out;
    }
    byte_classes(&d);
    if (ht_resize(&d)) {
        oom(&d);
        goto out;
    }
    if ((rc = subset(&d, starts))) goto out;
    if (!(prod = malloc((size_t)d.n))) {
        rc = oom(&d);
        goto out;
    }
    if ((rc = productive(&d, starts, prod, prod_rule))) {
        if (rc == -ENOMEM) oom(&d);
        goto out;
    }
    if (!prod[starts[0]]) {
        rc = gr__fail(err, -1, "the grammar cannot produce any text: every path from '%s' needs a rule that never ends", f->names[0]);
        goto out;
    }
    prune(&d, prod, prod_rule);
    if (d.n_calls > 1) qsort(d.calls, (size_t)d.n_calls, sizeof *d.calls, dcall_cmp);
    if (!(coff = calloc((size_t)d.n + 1, sizeof *coff))) {
        rc = oom(&d);
        goto out;
    }
    for (int i = 0; i < d.n_calls; i++) coff[d.calls[i].from + 1]++;
    for (int i = 0; i < d.n; i++) coff[i + 1] += coff[i];
    if ((rc = left_recursion(&d, starts, coff))) {
        if (rc == -ENOMEM) oom(&d);
        goto out;
    }
    g->n_rules = nr;
    if ((rc = finish(&d, starts, coff, g))) {
        free_tables(g);
        goto out;
    }
    coff = NULL;
out:
    free(starts);
    free(coff);
    free(prod);
    free(prod_rule);
    free(d.set_off);
    free(d.set_len);
    free(d.pool);
    free(d.next);
    free(d.flags);
    free(d.rule_of);
    free(d.calls);
    free(d.ht);
    free(d.mark);
    free(d.stack);
    free(d.cl);
    return rc;
}
