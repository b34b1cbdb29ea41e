/*
 * gr_parse.c — GBNF / EBNF text → rules of expression trees (gr_rules, see gr_internal.h).
 *
 *   grammar  := (name "::=" alt)*
 *   alt      := seq ("|" seq)*
 *   seq      := (primary postfix*)*          ends at "|", ")", the end, or the next `name ::=`
 *   primary  := "lit" | 'lit' | [class] | [^class] | . | ( alt ) | name
 *   postfix  := * | + | ? | {m} | {m,} | {m,n} | {,n}
 *
 * Blanks (spaces, tabs, newlines, # comments) separate everything, so rules may span lines as
 * in xgrammar's EBNF; llama.cpp's line-oriented GBNF is a subset. Literals and classes are over
 * Unicode code points (the text is UTF-8). Every error names the offset where it was found; the
 * caller turns it into a line and column. Nesting, rule count, tree size and repetition bounds
 * are limited (GR_MAX_*). Called by grammar.c on any thread; no state outside the arguments.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

typedef struct gp {
    const unsigned char *s;
    size_t n, i;
    gr_rules *r;
    gr_error *err;
    int depth;
    gr_budget *b;     /* the compile's deadline */
    int32_t *rh;      /* [rh_cap] rule ids by name hash (open addressing, -1 empty) */
    int rh_cap;
} gp;

/* ---- the rule pools ------------------------------------------------------------------------ */

void gr__rules_free(gr_rules *r)
{
    free(r->ast);
    free(r->kids);
    free(r->bytes);
    free(r->ranges);
    free(r->rules);
    free(r->names);
    memset(r, 0, sizeof *r);
}

const char *gr__rule_name(const gr_rules *r, int rule)
{
    return r->names + r->rules[rule].name;
}

static int oom(gp *p)
{
    p->r->oom = 1;
    return gr__fail(p->err, -1, "out of memory"), -ENOMEM;
}

/* A new node; -1 when out of memory or past GR_MAX_AST (err filled). */
static int node(gp *p, int kind, int a, int b)
{
    gr_rules *r = p->r;
    if (r->n_ast >= GR_MAX_AST) return gr__fail(p->err, (int)p->i, "grammar too large (more than %d expression nodes)", GR_MAX_AST), -1;
    if (gr__charge(p->b, 16)) return gr__budget_fail(p->b, p->err), -1;
    if (gr__grow((void **)&r->ast, &r->cap_ast, r->n_ast + 1, sizeof *r->ast)) return oom(p), -1;
    r->ast[r->n_ast] = (gr_ast){kind, a, b, 0, 0};
    return r->n_ast++;
}

/* A node over the children list[0..n): the child itself when n == 1, EMPTY when n == 0. */
static int group(gp *p, int kind, const int *list, int n)
{
    if (n == 0) return node(p, GRA_EMPTY, 0, 0);
    if (n == 1) return list[0];
    gr_rules *r = p->r;
    if (gr__grow((void **)&r->kids, &r->cap_kids, r->n_kids + n, sizeof *r->kids)) return oom(p), -1;
    memcpy(r->kids + r->n_kids, list, (size_t)n * sizeof *list);
    int id = node(p, kind, r->n_kids, n);
    if (id >= 0) r->n_kids += n;
    return id;
}

static uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Indexes rule id by its name (the table grown to twice the rules). 0 or -ENOMEM. */
static int rh_add(gp *p, int id)
{
    gr_rules *r = p->r;
    if ((r->n_rules + 1) * 2 > p->rh_cap) {
        int cap = p->rh_cap ? p->rh_cap * 2 : 256;
        int32_t *t = malloc(sizeof *t * (size_t)cap);
        if (!t) return -ENOMEM;
        for (int i = 0; i < cap; i++) t[i] = -1;
        free(p->rh);
        p->rh = t;
        p->rh_cap = cap;
        for (int i = 0; i < r->n_rules; i++) /* the rules before id, indexed again */
            if (rh_add(p, i)) return -ENOMEM;
    }
    const char *nm = gr__rule_name(r, id);
    uint32_t h = name_hash(nm, strlen(nm)) & (uint32_t)(p->rh_cap - 1);
    while (p->rh[h] >= 0) h = (h + 1) & (uint32_t)(p->rh_cap - 1);
    p->rh[h] = id;
    return 0;
}

static int rh_find(const gp *p, const char *name, size_t len)
{
    if (!p->rh_cap) return -1;
    for (uint32_t h = name_hash(name, len) & (uint32_t)(p->rh_cap - 1); p->rh[h] >= 0;
         h = (h + 1) & (uint32_t)(p->rh_cap - 1)) {
        const char *nm = gr__rule_name(p->r, p->rh[h]);
        if (strlen(nm) == len && !memcmp(nm, name, len)) return p->rh[h];
    }
    return -1;
}

/* The rule called name[0..len), created (undefined) when new; -1 on error. */
static int rule_of(gp *p, const char *name, size_t len, int pos)
{
    gr_rules *r = p->r;
    if (gr__charge(p->b, (int64_t)len + 4)) return gr__budget_fail(p->b, p->err), -1;
    int id = rh_find(p, name, len);
    if (id >= 0) return id;
    if (r->n_rules >= GR_MAX_RULES) return gr__fail(p->err, pos, "too many rules (more than %d)", GR_MAX_RULES), -1;
    if (gr__grow((void **)&r->rules, &r->cap_rules, r->n_rules + 1, sizeof *r->rules) ||
        gr__grow((void **)&r->names, &r->cap_names, r->n_names + (int)len + 1, 1))
        return oom(p), -1;
    memcpy(r->names + r->n_names, name, len);
    r->names[r->n_names + len] = 0;
    r->rules[r->n_rules] = (gr_rule){r->n_names, -1, pos, -1};
    r->n_names += (int)len + 1;
    if (rh_add(p, r->n_rules)) return oom(p), -1;
    return r->n_rules++;
}

/* ---- lexing ----------------------------------------------------------------------------- */

static void blanks(gp *p)
{
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else {
            break;
        }
    }
}

static int is_name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Length of the rule name at i (0 when none). */
static size_t name_len(const gp *p, size_t i)
{
    size_t j = i;
    while (j < p->n && is_name_char(p->s[j])) j++;
    return j - i;
}

/* 1 when a rule definition `name ::=` starts at i. */
static int at_rule_start(const gp *p, size_t i)
{
    size_t l = name_len(p, i);
    if (!l) return 0;
    gp q = *p;
    q.i = i + l;
    blanks(&q);
    return q.i + 3 <= q.n && !memcmp(q.s + q.i, "::=", 3);
}

/* Reads one character of a literal or class (an escape or a UTF-8 code point) into *cp. */
static int read_char(gp *p, uint32_t *cp)
{
    size_t at = p->i;
    if (p->i >= p->n) return gr__fail(p->err, (int)at, "unexpected end of text");
    unsigned char c = p->s[p->i];
    if (c != '\\') {
        int l = gr__utf8_decode(p->s + p->i, p->n - p->i, cp);
        if (l < 0) return gr__fail(p->err, (int)at, "invalid UTF-8 in the grammar text");
        p->i += (size_t)l;
        return 0;
    }
    if (p->i + 1 >= p->n) return gr__fail(p->err, (int)at, "unfinished escape");
    c = p->s[p->i + 1];
    p->i += 2;
    int digits = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
    case '(': case ')': case '|': case '*': case '+': case '?': case '{': case '}':
        *cp = c;
        return 0;
    default:
        return gr__fail(p->err, (int)at, "unknown escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = p->i < p->n ? gr__hexval(p->s[p->i]) : -1;
        if (h < 0) return gr__fail(p->err, (int)at, "escape '\\%c' needs %d hex digits", c, digits);
        v = v * 16 + (uint32_t)h;
        p->i++;
    }
    if (v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
        return gr__fail(p->err, (int)at, "escape names no Unicode character (U+%X)", (unsigned)v);
    *cp = v;
    return 0;
}

/* ---- primaries ---------------------------------------------------------------------------- */

static int literal(gp *p)
{
    size_t at = p->i;
    unsigned char q = p->s[p->i++];
    gr_rules *r = p->r;
    int start = r->n_bytes;
    for (;;) {
        if (p->i >= p->n) return gr__fail(p->err, (int)at, "unterminated literal"), -1;
        if (p->s[p->i] == q) {
            p->i++;
            break;
        }
        uint32_t cp;
        if (read_char(p, &cp)) return -1;
        unsigned char u[4];
        int l = gr__utf8_encode(cp, u);
        if (gr__grow((void **)&r->bytes, &r->cap_bytes, r->n_bytes + l, 1)) return oom(p), -1;
        memcpy(r->bytes + r->n_bytes, u, (size_t)l);
        r->n_bytes += l;
    }
    if (r->n_bytes == start) return node(p, GRA_EMPTY, 0, 0);
    return node(p, GRA_LIT, start, r->n_bytes - start);
}

static int range_cmp(const void *a, const void *b)
{
    const gr_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges ranges[0..*n) in place (optionally complementing over all code points). */
static void normalize(gr_range *v, int *n, int negate, gr_range *out, int *n_out)
{
    if (*n > 1) qsort(v, (size_t)*n, sizeof *v, range_cmp);
    int m = 0;
    for (int i = 0; i < *n; i++) {
        if (m && v[i].lo <= v[m - 1].hi + 1) {
            if (v[i].hi > v[m - 1].hi) v[m - 1].hi = v[i].hi;
        } else {
            v[m++] = v[i];
        }
    }
    *n = m;
    if (!negate) {
        if (m) memcpy(out, v, (size_t)m * sizeof *v);
        *n_out = m;
        return;
    }
    int k = 0;
    uint32_t lo = 0;
    for (int i = 0; i < m; i++) {
        if (v[i].lo > lo) out[k++] = (gr_range){lo, v[i].lo - 1};
        lo = v[i].hi + 1;
    }
    if (lo <= GR_MAX_CP) out[k++] = (gr_range){lo, GR_MAX_CP};
    *n_out = k;
}

/* A class node from ranges v[0..n) (scratch, reordered). */
static int class_node(gp *p, gr_range *v, int n, int negate)
{
    gr_rules *r = p->r;
    if (gr__grow((void **)&r->ranges, &r->cap_ranges, r->n_ranges + n + 1, sizeof *r->ranges)) return oom(p), -1;
    int k;
    normalize(v, &n, negate, r->ranges + r->n_ranges, &k);
    int id = node(p, GRA_CLASS, r->n_ranges, k);
    if (id >= 0) r->n_ranges += k;
    return id;
}

static int char_class(gp *p)
{
    size_t at = p->i++;
    int negate = 0;
    if (p->i < p->n && p->s[p->i] == '^') {
        negate = 1;
        p->i++;
    }
    gr_range *v = NULL;
    int n = 0, cap = 0;
    for (;;) {
        if (p->i >= p->n) {
            free(v);
            return gr__fail(p->err, (int)at, "unterminated character class"), -1;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        uint32_t lo, hi;
        if (read_char(p, &lo)) goto fail;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            size_t rat = p->i;
            if (read_char(p, &hi)) goto fail;
            if (hi < lo) {
                gr__fail(p->err, (int)rat, "character range is reversed");
                goto fail;
            }
        }
        if (gr__grow((void **)&v, &cap, n + 1, sizeof *v)) {
            oom(p);
            goto fail;
        }
        v[n++] = (gr_range){lo, hi};
    }
    int id = class_node(p, v, n, negate);
    free(v);
    return id;
fail:
    free(v);
    return -1;
}

static int parse_alt(gp *p);

static int primary(gp *p)
{
    unsigned char c = p->s[p->i];
    if (c == '"' || c == '\'') return literal(p);
    if (c == '[') return char_class(p);
    if (c == '(') {
        size_t at = p->i++;
        if (++p->depth > GR_MAX_NEST)
            return gr__fail(p->err, (int)at, "groups nested too deeply (more than %d)", GR_MAX_NEST), -1;
        int id = parse_alt(p);
        p->depth--;
        if (id < 0) return -1;
        blanks(p);
        if (p->i >= p->n || p->s[p->i] != ')') return gr__fail(p->err, (int)at, "unclosed '('"), -1;
        p->i++;
        return id;
    }
    size_t l = name_len(p, p->i);
    if (c == '.') {
        p->i++;
        gr_range all = {0, GR_MAX_CP};
        return class_node(p, &all, 1, 0);
    }
    if (l) {
        int rule = rule_of(p, (const char *)p->s + p->i, l, (int)p->i);
        p->i += l;
        return rule < 0 ? -1 : node(p, GRA_REF, rule, 0);
    }
    if (c == '<') return gr__fail(p->err, (int)p->i, "token references (<...>) are not supported"), -1;
    return gr__fail(p->err, (int)p->i, "unexpected '%c'", c >= 0x20 && c < 0x7f ? c : '?'), -1;
}

/* Reads a decimal count (≤ GR_MAX_REPEAT) at i; -1 when there is none. */
static long count(gp *p)
{
    long v = -1;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (p->s[p->i++] - '0');
        if (v > GR_MAX_REPEAT) return -2;
    }
    return v;
}

static int repeat(gp *p, int child, int min, int max)
{
    int id = node(p, GRA_REP, child, 0);
    if (id >= 0) {
        p->r->ast[id].min = min;
        p->r->ast[id].max = max;
    }
    return id;
}

/* Applies the postfix operators after a primary. */
static int postfix(gp *p, int id)
{
    while (id >= 0 && p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c == '*') id = repeat(p, id, 0, -1);
        else if (c == '+') id = repeat(p, id, 1, -1);
        else if (c == '?') id = repeat(p, id, 0, 1);
        else if (c != '{') break;
        if (c != '{') {
            p->i++;
            continue;
        }
        size_t at = p->i++;
        blanks(p);
        long m = count(p), n;
        blanks(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            blanks(p);
            n = count(p);
        } else {
            n = m;
        }
        blanks(p);
        if (m == -2 || n == -2)
            return gr__fail(p->err, (int)at, "repetition count above %d", GR_MAX_REPEAT), -1;
        if (p->i >= p->n || p->s[p->i] != '}' || (m < 0 && n < 0))
            return gr__fail(p->err, (int)at, "bad repetition: expected {m}, {m,}, {m,n} or {,n}"), -1;
        p->i++;
        if (m < 0) m = 0;
        if (n >= 0 && n < m) return gr__fail(p->err, (int)at, "repetition {%ld,%ld} has max below min", m, n), -1;
        id = repeat(p, id, (int)m, (int)n);
    }
    return id;
}

static int parse_seq(gp *p)
{
    int *items = NULL, n = 0, cap = 0, id = -1;
    for (;;) {
        blanks(p);
        if (p->i >= p->n) break;
        unsigned char c = p->s[p->i];
        if (c == '|' || c == ')' || at_rule_start(p, p->i)) break;
        int it = postfix(p, primary(p));
        if (it < 0) goto out;
        if (gr__grow((void **)&items, &cap, n + 1, sizeof *items)) {
            oom(p);
            goto out;
        }
        items[n++] = it;
    }
    id = group(p, GRA_SEQ, items, n);
out:
    free(items);
    return id;
}

static int parse_alt(gp *p)
{
    int *alts = NULL, n = 0, cap = 0, id = -1;
    for (;;) {
        int s = parse_seq(p);
        if (s < 0) goto out;
        if (gr__grow((void **)&alts, &cap, n + 1, sizeof *alts)) {
            oom(p);
            goto out;
        }
        alts[n++] = s;
        blanks(p);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    id = group(p, GRA_ALT, alts, n);
out:
    free(alts);
    return id;
}

static int parse_rule(gp *p)
{
    size_t at = p->i, l = name_len(p, p->i);
    if (!l) return gr__fail(p->err, (int)at, "expected a rule name");
    int rule = rule_of(p, (const char *)p->s + at, l, (int)at);
    if (rule < 0) return -EINVAL;
    p->i += l;
    blanks(p);
    if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3))
        return gr__fail(p->err, (int)p->i, "expected '::=' after rule name '%s'", gr__rule_name(p->r, rule));
    p->i += 3;
    if (p->r->rules[rule].body >= 0)
        return gr__fail(p->err, (int)at, "rule '%s' is defined twice", gr__rule_name(p->r, rule));
    int body = parse_alt(p);
    if (body < 0) return p->r->oom ? -ENOMEM : -EINVAL;
    blanks(p);
    if (p->i < p->n && p->s[p->i] == ')') return gr__fail(p->err, (int)p->i, "unmatched ')'");
    p->r->rules[rule].body = body;
    p->r->rules[rule].def_pos = (int)at;
    return 0;
}

int gr__parse_gbnf(const char *text, size_t len, const char *root, gr_rules *out, int *root_rule,
                   gr_budget *b, gr_error *err)
{
    memset(out, 0, sizeof *out);
    gp p = {(const unsigned char *)text, len, 0, out, err, 0, b, NULL, 0};
    int rc = 0;
    for (;;) {
        size_t at = p.i;
        blanks(&p);
        if (p.i >= p.n) break;
        if ((rc = parse_rule(&p))) break;
        if (gr__charge(b, (int64_t)(p.i - at))) {
            rc = gr__budget_fail(b, err);
            break;
        }
    }
    if (!rc) {
        for (int i = 0; i < out->n_rules; i++)
            if (out->rules[i].body < 0) {
                rc = gr__fail(err, out->rules[i].ref_pos, "undefined rule '%s'", gr__rule_name(out, i));
                break;
            }
    }
    if (!rc) {
        const char *rn = root ? root : "root";
        int r = rh_find(&p, rn, strlen(rn));
        if (r < 0) rc = gr__fail(err, -1, "the grammar has no rule '%s' to start from", rn);
        *root_rule = r;
    }
    if (out->oom) rc = -ENOMEM;
    free(p.rh);
    if (rc) gr__rules_free(out);
    return rc;
}
