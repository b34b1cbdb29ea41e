/*
 * gr_compile.c — parsed rules → the grammar's tables (struct gr_grammar in gr_internal.h).
 *
 *   1. direct left recursion is rewritten (A ::= A x | y  →  A ::= y x*);
 *   2. which rules stay "called" (a pushdown frame) is decided: the root, every rule a
 *      depth-first walk reaches again while inside it (so the rest is acyclic), and large rules
 *      used more than once; every other reference is inlined;
 *   3. each called rule becomes an NFA (Thompson construction; code-point classes become UTF-8
 *      byte sequences, surrogates excluded; references to called rules become call edges);
 *   4. bytes are partitioned into classes no edge tells apart, and each NFA is determinised
 *      (subset construction; call edges are symbols like the byte classes);
 *   5. states that can never complete their rule are pruned (so the mask never walks into a
 *      dead end), and left recursion through nullable prefixes is refused.
 *
 * Every size is bounded (GR_MAX_NFA, GR_MAX_DFA, GR_MAX_TABLE_BYTES) and every step charges the
 * compilation's wall-clock budget (gr_budget): the rule walk per node, the NFA per state and
 * edge, the DFA as gr_dfa.c says. On any error nothing is left allocated in g.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "grammar/gr_internal.h"

/* ---- 1. direct left recursion ------------------------------------------------------------ */

static int add_node(gr_rules *R, gr_ast a)
{
    if (R->n_ast >= GR_MAX_AST || gr__grow((void **)&R->ast, &R->cap_ast, R->n_ast + 1, sizeof a)) return -1;
    R->ast[R->n_ast] = a;
    return R->n_ast++;
}

static int add_group(gr_rules *R, int kind, const int *v, int n)
{
    if (n == 0) return add_node(R, (gr_ast){GRA_EMPTY, 0, 0, 0, 0});
    if (n == 1) return v[0];
    if (gr__grow((void **)&R->kids, &R->cap_kids, R->n_kids + n, sizeof *v)) return -1;
    memcpy(R->kids + R->n_kids, v, (size_t)n * sizeof *v);
    int id = add_node(R, (gr_ast){kind, R->n_kids, n, 0, 0});
    if (id >= 0) R->n_kids += n;
    return id;
}

/* Rewrites A ::= A a1 | A a2 | b1 | b2 as A ::= (b1 | b2) (a1 | a2)*. 0 or -ENOMEM. */
static int unleft_rule(gr_rules *R, int rule)
{
    int body = R->rules[rule].body;
    int n = R->ast[body].kind == GRA_ALT ? R->ast[body].b : 1;
    int *alpha = malloc(sizeof(int) * (size_t)n * 2), *beta = alpha + n, na = 0, nb = 0, rc = -ENOMEM;
    if (!alpha) return -ENOMEM;
    for (int i = 0; i < n; i++) {
        int x = R->ast[body].kind == GRA_ALT ? R->kids[R->ast[body].a + i] : body;
        const gr_ast *a = &R->ast[x];
        if (a->kind == GRA_REF && a->a == rule) {
            alpha[na++] = add_node(R, (gr_ast){GRA_EMPTY, 0, 0, 0, 0});
        } else if (a->kind == GRA_SEQ && R->ast[R->kids[a->a]].kind == GRA_REF && R->ast[R->kids[a->a]].a == rule) {
            int first = a->a + 1, cnt = a->b - 1;
            int *tmp = malloc(sizeof(int) * (size_t)cnt);
            if (!tmp) goto out;
            memcpy(tmp, R->kids + first, sizeof(int) * (size_t)cnt);
            alpha[na++] = add_group(R, GRA_SEQ, tmp, cnt);
            free(tmp);
        } else {
            beta[nb++] = x;
        }
        if (na && alpha[na - 1] < 0) goto out;
    }
    if (na && nb) {
        int b = add_group(R, GRA_ALT, beta, nb), a = add_group(R, GRA_ALT, alpha, na);
        int rep = a < 0 ? -1 : add_node(R, (gr_ast){GRA_REP, a, 0, 0, -1});
        int seq[2] = {b, rep};
        int nbody = b < 0 || rep < 0 ? -1 : add_group(R, GRA_SEQ, seq, 2);
        if (nbody < 0) goto out;
        R->rules[rule].body = nbody;
    }
    rc = 0;
out:
    free(alpha);
    return rc;
}

/* ---- 2. which rules are called ---------------------------------------------------------- */

typedef struct cc {
    gr_rules *R;
    int cap;         /* entries of the arrays below (≥ R->n_rules) */
    int *called;     /* [n_rules] compiled rule id, or -1 (inlined) */
    int n_called;
    int64_t *size;   /* [n_rules] NFA states when inlined (saturating) */
    int *color;      /* [n_rules] 0 new, 1 on the walk, 2 done */
    int *uses;       /* [n_rules] references in the text */
    int *order;      /* rules in the order they become called */
    gr_error *err;
    gr_budget *b;    /* the compile's deadline */
} cc;

#define SIZE_CAP ((int64_t)1 << 40)

static int64_t sat_add(int64_t a, int64_t b)
{
    return a + b > SIZE_CAP ? SIZE_CAP : a + b;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0) return 0;
    return a > SIZE_CAP / b ? SIZE_CAP : a * b;
}

static void mark_called(cc *c, int rule)
{
    if (c->called[rule] >= 0) return;
    c->order[c->n_called] = rule;
    c->called[rule] = c->n_called++;
}

static int walk_rule(cc *c, int rule, int depth);

/* A repeated child at least this large, repeated into more than GR_INLINE_LIMIT states, becomes
 * a called rule: each repetition is then one call edge, not a copy (x{0,999} of an object). */
#define GR_REP_CALL_MIN 64

/* Makes node child the body of a new called rule (walked already: its size is k); returns the
 * rule, or -1 on error. */
static int child_rule(cc *c, int child, int64_t k)
{
    gr_rules *R = c->R;
    if (R->n_rules >= GR_MAX_RULES) return gr__fail(c->err, -1, "too many rules (more than %d)", GR_MAX_RULES), -1;
    if (R->n_rules == c->cap) {
        int cap = c->cap * 2 + 8;
        int *called = realloc(c->called, sizeof(int) * (size_t)cap);
        if (called) c->called = called;
        int64_t *size = realloc(c->size, sizeof(int64_t) * (size_t)cap);
        if (size) c->size = size;
        int *color = realloc(c->color, sizeof(int) * (size_t)cap);
        if (color) c->color = color;
        int *uses = realloc(c->uses, sizeof(int) * (size_t)cap);
        if (uses) c->uses = uses;
        int *order = realloc(c->order, sizeof(int) * (size_t)cap);
        if (order) c->order = order;
        if (!called || !size || !color || !uses || !order) return gr__fail(c->err, -1, "out of memory"), -1;
        c->cap = cap;
    }
    static const char name[] = "(repeated part)";
    if (gr__grow((void **)&R->rules, &R->cap_rules, (int64_t)R->n_rules + 1, sizeof *R->rules) ||
        gr__grow((void **)&R->names, &R->cap_names, (int64_t)R->n_names + (int64_t)sizeof name, 1))
        return gr__fail(c->err, -1, "out of memory"), -1;
    memcpy(R->names + R->n_names, name, sizeof name);
    int r = R->n_rules++;
    R->rules[r] = (gr_rule){R->n_names, child, -1, -1};
    R->n_names += (int)sizeof name;
    c->called[r] = -1;
    c->size[r] = k;
    c->color[r] = 2;
    c->uses[r] = 1;
    mark_called(c, r);
    return r;
}

/* Visits the references under node (depth-first) and returns its inlined size. */
static int64_t walk_node(cc *c, int id, int depth)
{
    const gr_ast node = c->R->ast[id], *a = &node; /* a copy: walking may grow the tree */
    int64_t s = 0;
    if (gr__charge(c->b, 4)) return gr__budget_fail(c->b, c->err), -1;
    switch (a->kind) {
    case GRA_EMPTY: return 1;
    case GRA_LIT: return a->b;
    case GRA_CLASS: return (int64_t)a->b * 8;
    case GRA_SEQ:
    case GRA_ALT:
        for (int i = 0; i < a->b; i++) {
            int64_t k = walk_node(c, c->R->kids[a->a + i], depth);
            if (k < 0) return -1;
            s = sat_add(s, k + 1);
        }
        return s;
    case GRA_REP: {
        int child = a->a;
        int64_t reps = a->max < 0 ? (int64_t)a->min + 1 : a->max;
        int64_t k = walk_node(c, child, depth);
        if (k < 0) return -1;
        if (k >= GR_REP_CALL_MIN && sat_mul(k + 1, reps) > GR_INLINE_LIMIT) {
            int r = child_rule(c, child, k);
            int ref = r < 0 ? -1 : add_node(c->R, (gr_ast){GRA_REF, r, 0, 0, 0});
            if (ref < 0) return r < 0 ? -1 : (gr__fail(c->err, -1, "out of memory"), -1);
            c->R->ast[id].a = ref; /* the tree may have moved: index it again */
            k = 1;
        }
        return sat_add(sat_mul(k + 1, reps), 2);
    }
    case GRA_REF:
        if (c->color[a->a] == 1) { /* reached again while inside it: a cycle */
            mark_called(c, a->a);
            return 1;
        }
        if (c->color[a->a] == 0 && walk_rule(c, a->a, depth + 1)) return -1;
        return c->called[a->a] >= 0 ? 1 : c->size[a->a];
    }
    return 1;
}

static int walk_rule(cc *c, int rule, int depth)
{
    if (depth > 1000) return gr__fail(c->err, c->R->rules[rule].def_pos, "rules nested too deeply (more than 1000 levels)");
    c->color[rule] = 1;
    int64_t s = walk_node(c, c->R->rules[rule].body, depth);
    if (s < 0) return -EINVAL;
    c->color[rule] = 2;
    c->size[rule] = s;
    if (s > GR_INLINE_LIMIT && c->uses[rule] > 1) mark_called(c, rule);
    return 0;
}

static void count_uses(cc *c)
{
    for (int i = 0; i < c->R->n_ast; i++)
        if (c->R->ast[i].kind == GRA_REF) c->uses[c->R->ast[i].a]++;
}

/* ---- 3. NFA -------------------------------------------------------------------------------- */

typedef struct nb {
    cc *c;
    gr_nfa *f;
    gr_budget *bud;
    int depth;
    gr_error *err;
} nb;

static int nstate(nb *b)
{
    if (b->f->n_states >= GR_MAX_NFA)
        return gr__fail(b->err, -1, "grammar too large: more than %d automaton states after expanding repetitions and rules", GR_MAX_NFA), -1;
    if (gr__charge(b->bud, 4)) return gr__budget_fail(b->bud, b->err), -1;
    return b->f->n_states++;
}

static int nedge(nb *b, int from, int to, int lo, int hi)
{
    gr_nfa *f = b->f;
    if (gr__charge(b->bud, 4)) return gr__budget_fail(b->bud, b->err), -EINVAL;
    if (gr__grow((void **)&f->e, &f->cap_e, (int64_t)f->n_e + 1, sizeof *f->e)) return gr__fail(b->err, -1, "out of memory"), -ENOMEM;
    f->e[f->n_e++] = (gr_nfa_edge){from, to, lo, hi};
    return 0;
}

/* A chain of byte ranges lo[k]..hi[k] from state in to state out. */
static int nchain(nb *b, int in, int out, const unsigned char *lo, const unsigned char *hi, int k)
{
    int s = in;
    for (int i = 0; i < k; i++) {
        int t = i == k - 1 ? out : nstate(b);
        if (t < 0 || nedge(b, s, t, lo[i], hi[i])) return -1;
        s = t;
    }
    return 0;
}

/* UTF-8 byte sequences of code points lo..hi (same encoded length, no surrogates). */
static int nutf8(nb *b, int in, int out, uint32_t lo, uint32_t hi)
{
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) return nutf8(b, in, out, lo, lo | m) || nutf8(b, in, out, (lo | m) + 1, hi) ? -1 : 0;
            if ((hi & m) != m) return nutf8(b, in, out, lo, (hi & ~m) - 1) || nutf8(b, in, out, hi & ~m, hi) ? -1 : 0;
        }
    }
    unsigned char a[4], z[4];
    int k = gr__utf8_encode(lo, a);
    gr__utf8_encode(hi, z);
    return nchain(b, in, out, a, z, k);
}

static int nclass(nb *b, int in, int out, const gr_range *v, int n)
{
    static const uint32_t bounds[][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 5; k++) {
            uint32_t lo = v[i].lo > bounds[k][0] ? v[i].lo : bounds[k][0];
            uint32_t hi = v[i].hi < bounds[k][1] ? v[i].hi : bounds[k][1];
            if (lo <= hi && nutf8(b, in, out, lo, hi)) return -1;
        }
    return 0;
}

static int nbuild(nb *b, int id, int in, int out)
{
    const gr_rules *R = b->c->R;
    const gr_ast a = R->ast[id];
    switch (a.kind) {
    case GRA_EMPTY: return nedge(b, in, out, GR_E_EPS, 0);
    case GRA_LIT: return nchain(b, in, out, R->bytes + a.a, R->bytes + a.a, a.b);
    case GRA_CLASS: return nclass(b, in, out, R->ranges + a.a, a.b);
    case GRA_SEQ: {
        int s = in;
        for (int i = 0; i < a.b; i++) {
            int t = i == a.b - 1 ? out : nstate(b);
            if (t < 0 || nbuild(b, R->kids[a.a + i], s, t)) return -1;
            s = t;
        }
        return 0;
    }
    case GRA_ALT:
        for (int i = 0; i < a.b; i++)
            if (nbuild(b, R->kids[a.a + i], in, out)) return -1;
        return 0;
    case GRA_REP: {
        int s = in;
        for (int i = 0; i < a.min; i++) {
            int t = nstate(b);
            if (t < 0 || nbuild(b, a.a, s, t)) return -1;
            s = t;
        }
        if (a.max < 0) {
            int l = nstate(b);
            if (l < 0 || nedge(b, s, l, GR_E_EPS, 0) || nbuild(b, a.a, l, l)) return -1;
            return nedge(b, l, out, GR_E_EPS, 0);
        }
        for (int i = a.min; i < a.max; i++) {
            int t = nstate(b);
            if (t < 0 || nedge(b, s, out, GR_E_EPS, 0) || nbuild(b, a.a, s, t)) return -1;
            s = t;
        }
        return nedge(b, s, out, GR_E_EPS, 0);
    }
    case GRA_REF: {
        int q = b->c->called[a.a];
        if (q >= 0) return nedge(b, in, out, GR_E_CALL, q);
        if (++b->depth > 1000) return gr__fail(b->err, -1, "rules nested too deeply (more than 1000 levels)");
        int rc = nbuild(b, R->rules[a.a].body, in, out);
        b->depth--;
        return rc;
    }
    }
    return 0;
}

static int edge_cmp(const void *x, const void *y)
{
    const gr_nfa_edge *a = x, *b = y;
    return a->from < b->from ? -1 : a->from > b->from;
}

static int nfa_build(cc *c, gr_nfa *f, gr_error *err)
{
    nb b = {c, f, c->b, 0, err};
    f->n_rules = c->n_called;
    f->start = malloc(sizeof(int32_t) * (size_t)c->n_called);
    f->accept = malloc(sizeof(int32_t) * (size_t)c->n_called);
    if (!f->start || !f->accept) return gr__fail(err, -1, "out of memory"), -ENOMEM;
    for (int r = 0; r < c->n_called; r++) {
        int s = nstate(&b), t = nstate(&b);
        if (s < 0 || t < 0) return -EINVAL;
        f->start[r] = s;
        f->accept[r] = t;
        if (nbuild(&b, c->R->rules[c->order[r]].body, s, t)) return -EINVAL;
    }
    if (f->n_e > 1) qsort(f->e, (size_t)f->n_e, sizeof *f->e, edge_cmp);
    f->off = calloc((size_t)f->n_states + 1, sizeof *f->off);
    if (!f->off) return gr__fail(err, -1, "out of memory"), -ENOMEM;
    for (int i = 0; i < f->n_e; i++) f->off[f->e[i].from + 1]++;
    for (int i = 0; i < f->n_states; i++) f->off[i + 1] += f->off[i];
    return 0;
}

static void nfa_free(gr_nfa *f)
{
    free(f->e);
    free(f->off);
    free(f->start);
    free(f->accept);
}

/* ---- the entry point ------------------------------------------------------------------------ */

int gr__compile_rules(gr_rules *R, int root, gr_grammar *g, gr_budget *bud, gr_error *err)
{
    int n = R->n_rules, rc = 0;
    for (int r = 0; r < n && !rc; r++) {
        if (unleft_rule(R, r)) rc = (gr__fail(err, -1, "out of memory"), -ENOMEM);
        else if (gr__charge(bud, R->rules[r].body >= 0 && R->ast[R->rules[r].body].kind == GRA_ALT ? R->ast[R->rules[r].body].b : 1))
            rc = gr__budget_fail(bud, err);
    }
    cc c = {R, n, malloc(sizeof(int) * (size_t)n), 0, malloc(sizeof(int64_t) * (size_t)n),
            calloc((size_t)n, sizeof(int)), calloc((size_t)n, sizeof(int)), malloc(sizeof(int) * (size_t)n), err, bud};
    gr_nfa f = {0};
    const char **names = NULL;
    if (!rc && (!c.called || !c.size || !c.color || !c.uses || !c.order))
        rc = (gr__fail(err, -1, "out of memory"), -ENOMEM);
    if (!rc) {
        for (int r = 0; r < n; r++) c.called[r] = -1;
        count_uses(&c);
        mark_called(&c, root);
        rc = walk_rule(&c, root, 0);
    }
    if (!rc) {
        int64_t total = 0;
        for (int r = 0; r < c.n_called; r++) total = sat_add(total, c.size[c.order[r]]);
        if (total > GR_MAX_NFA)
            rc = gr__fail(err, -1, "grammar too large: about %lld automaton states after expanding repetitions and rules (the limit is %d)",
                          (long long)total, GR_MAX_NFA);
    }
    if (!rc) rc = nfa_build(&c, &f, err);
    if (!rc && !(names = malloc(sizeof(char *) * (size_t)c.n_called))) rc = (gr__fail(err, -1, "out of memory"), -ENOMEM);
    if (!rc) {
        for (int r = 0; r < c.n_called; r++) names[r] = gr__rule_name(R, c.order[r]);
        f.names = names;
        rc = gr__dfa_build(&f, bud, g, err);
    }
    nfa_free(&f);
    free(names);
    free(c.called);
    free(c.size);
    free(c.color);
    free(c.uses);
    free(c.order);
    return rc;
}

