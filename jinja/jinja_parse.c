/*
 * jinja_parse.c — Jinja's grammar: tokens → an AST of jj_node (statements and expressions),
 * with the checks Jinja makes when it compiles a template.
 *
 * This file holds the token stream helpers and the expressions; jinja_parse_stmt.c the
 * statements and the entry point. Precedence, loosest first: `x if c else y`, or, and, not,
 * comparisons (== != < <= > >= in, not in; chained), + -, ~, * / // %, **, unary - +, then a
 * primary (literal, name, (tuple), [list], {dict}) with postfix .attr, [item / slice], (call), and
 * filters / tests (`| f(...)`, `is [not] t arg`), which bind tighter than any operator. Statements:
 * for (target unpacking, `if` filter, recursive, else), if / elif / else, set (names, tuples,
 * ns.attr, block form with filters), macro (defaults), call, filter, with, print, break / continue
 * (loopcontrols) and generation (transformers' AssistantTracker). Unknown tags, unclosed blocks,
 * break outside a loop, and filters or tests that do not exist (except inside an if, where Jinja
 * defers the error to when the branch runs) are TemplateSyntaxErrors. Nesting is bounded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_parse.h"

static _Noreturn void fail_kind(parser *p, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static _Noreturn void fail_kind(parser *p, int kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jj__vraise(p->k, kind, p->tk[p->pos].line, fmt, ap);
}

_Noreturn void jj__p_fail(parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jj__vraise(p->k, JJ_E_SYNTAX, p->tk[p->pos].line, fmt, ap);
}

void *jj__p_palloc(parser *p, size_t n)
{
    void *m = jj__arena_alloc(&p->t->arena, n);
    if (!m) {
        va_list ap;
        memset(&ap, 0, sizeof ap);
        jj__vraise(p->k, JJ_E_MEMORY, 0, "out of memory", ap);
    }
    memset(m, 0, n);
    return m;
}

/* ---- names -------------------------------------------------------------------------------- */

jj_name jj__intern(jinja_tmpl *t, jj_catch *k, const char *s, size_t n)
{
    uint32_t h = jj__hash_bytes(s, n);
    if (t->n_names * 2 >= t->names_cap) {
        uint32_t cap = t->names_cap ? t->names_cap * 2 : 256;
        jj_name *nn = jj__arena_alloc(&t->arena, sizeof *nn * cap);
        if (!nn) {
            va_list ap;
            memset(&ap, 0, sizeof ap);
            jj__vraise(k, JJ_E_MEMORY, 0, "out of memory", ap);
        }
        memset(nn, 0, sizeof *nn * cap);
        for (uint32_t i = 0; i < t->names_cap; i++) {
            if (!t->names[i].s) continue;
            uint32_t q = t->names[i].hash & (cap - 1);
            while (nn[q].s)
                q = (q + 1) & (cap - 1);
            nn[q] = t->names[i];
        }
        t->names = nn;
        t->names_cap = cap;
    }
    uint32_t m = t->names_cap - 1, q = h & m;
    for (; t->names[q].s; q = (q + 1) & m)
        if (t->names[q].hash == h && t->names[q].len == n && !memcmp(t->names[q].s, s, n))
            return t->names[q];
    char *copy = jj__arena_alloc(&t->arena, n + 1);
    if (!copy) {
        va_list ap;
        memset(&ap, 0, sizeof ap);
        jj__vraise(k, JJ_E_MEMORY, 0, "out of memory", ap);
    }
    memcpy(copy, s, n);
    copy[n] = 0;
    t->names[q] = (jj_name){copy, (uint32_t)n, h};
    t->n_names++;
    return t->names[q];
}

jj_name jj__p_pname(parser *p, const char *s, size_t n)
{
    return jj__intern(p->t, p->k, s, n);
}

/* ---- token stream ------------------------------------------------------------------------- */

jj_token *jj__p_cur(parser *p)
{
    return &p->tk[p->pos];
}

jj_token *jj__p_look(parser *p)
{
    return &p->tk[p->pos + 1 < p->n ? p->pos + 1 : p->pos];
}

jj_token *jj__p_next(parser *p)
{
    jj_token *t = &p->tk[p->pos];
    if (p->pos + 1 < p->n) p->pos++;
    return t;
}

int jj__p_is_op(const jj_token *t, int op)
{
    return t->type == T_OP && t->op == op;
}

int jj__p_is_name(const jj_token *t, const char *name)
{
    return t->type == T_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static const char *describe(const jj_token *t, char *dst, size_t n)
{
    static const char *const opnames[] = {
        "+", "-",  "*",  "/", "//", "%", "**", "~", "[", "]", "(", ")", "{",
        "}", "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";"};
    switch (t->type) {
    case T_EOF:
        return "end of template";
    case T_DATA:
        return "template data";
    case T_VAR_BEGIN:
        return "begin of print statement";
    case T_VAR_END:
        return "end of print statement";
    case T_BLOCK_BEGIN:
        return "begin of statement block";
    case T_BLOCK_END:
        return "end of statement block";
    case T_NAME:
        snprintf(dst, n, "%.*s", (int)(t->n > 60 ? 60 : t->n), t->s);
        return dst;
    case T_STRING:
        return "string";
    case T_INT:
        return "integer";
    case T_FLOAT:
        return "float";
    default:
        return opnames[t->op];
    }
}

_Noreturn void jj__p_unexpected(parser *p, const char *want)
{
    char desc[80];
    if (jj__p_cur(p)->type == T_EOF) jj__p_fail(p, "unexpected end of template, expected %s", want);
    jj__p_fail(p, "expected %s, got '%s'", want, describe(jj__p_cur(p), desc, sizeof desc));
}

void jj__p_expect_op(parser *p, int op, const char *what)
{
    if (!jj__p_is_op(jj__p_cur(p), op)) jj__p_unexpected(p, what);
    jj__p_next(p);
}

jj_token *jj__p_expect_type(parser *p, int type, const char *what)
{
    if (jj__p_cur(p)->type != type) jj__p_unexpected(p, what);
    return jj__p_next(p);
}

int jj__p_skip_name(parser *p, const char *name)
{
    if (!jj__p_is_name(jj__p_cur(p), name)) return 0;
    jj__p_next(p);
    return 1;
}

/* ---- nodes -------------------------------------------------------------------------------- */

jj_node *jj__p_node(parser *p, int kind, int line)
{
    jj_node *n = jj__p_palloc(p, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

jinja_value jj__p_const_str(parser *p, const char *s, size_t n)
{
    struct jinja_str *st = jj__p_palloc(p, sizeof *st + n + 1);
    st->len = n;
    memcpy(st->s, s, n);
    st->s[n] = 0;
    size_t cp = 0;
    for (size_t i = 0; i < n; i++)
        cp += ((unsigned char)s[i] & 0xC0) != 0x80;
    st->n_cp = cp;
    return (jinja_value){.kind = JINJA_STR, .s = st};
}

void jj__p_nv_push(parser *p, nvec *a, jj_node *x)
{
    if (a->n == a->cap) {
        uint32_t cap = a->cap ? a->cap * 2 : 4;
        jj_node **nv = jj__p_palloc(p, sizeof *nv * cap);
        if (a->n) memcpy(nv, a->v, sizeof *nv * a->n);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}

void jj__p_enter(parser *p)
{
    if (++p->depth > JJ_MAX_NESTING) jj__p_fail(p, "the template is nested too deeply");
}

/* ---- expressions -------------------------------------------------------------------------- */

static jj_node *parse_unary(parser *p, int with_filter);
static jj_node *parse_primary(parser *p);
static jj_node *parse_postfix(parser *p, jj_node *n);
static jj_node *parse_filter_expr(parser *p, jj_node *n);

static void parse_call_args(parser *p, jj_args *a)
{
    jj__p_expect_op(p, TO_LPAREN, "'('");
    nvec pos = {0}, kw = {0};
    jj_name names[64];
    int require_comma = 0;
    while (!jj__p_is_op(jj__p_cur(p), TO_RPAREN)) {
        if (require_comma) {
            jj__p_expect_op(p, TO_COMMA, "','");
            if (jj__p_is_op(jj__p_cur(p), TO_RPAREN)) break;
        }
        if (jj__p_is_op(jj__p_cur(p), TO_MUL)) {
            if (a->star || a->dstar) jj__p_fail(p, "invalid syntax for function call expression");
            jj__p_next(p);
            a->star = jj__p_parse_expression(p, 1);
        } else if (jj__p_is_op(jj__p_cur(p), TO_POW)) {
            if (a->dstar) jj__p_fail(p, "invalid syntax for function call expression");
            jj__p_next(p);
            a->dstar = jj__p_parse_expression(p, 1);
        } else if (jj__p_cur(p)->type == T_NAME && jj__p_is_op(jj__p_look(p), TO_ASSIGN)) {
            if (a->dstar) jj__p_fail(p, "invalid syntax for function call expression");
            if (kw.n >= 64) jj__p_fail(p, "too many keyword arguments");
            jj_token *t = jj__p_next(p);
            jj__p_next(p);
            names[kw.n] = jj__p_pname(p, t->s, t->n);
            jj__p_nv_push(p, &kw, jj__p_parse_expression(p, 1));
        } else {
            if (a->star || a->dstar || kw.n)
                jj__p_fail(p, "invalid syntax for function call expression");
            jj__p_nv_push(p, &pos, jj__p_parse_expression(p, 1));
        }
        require_comma = 1;
    }
    jj__p_expect_op(p, TO_RPAREN, "')'");
    a->pos = pos.v;
    a->n_pos = pos.n;
    a->kw = kw.v;
    a->n_kw = kw.n;
    if (kw.n) {
        a->kw_names = jj__p_palloc(p, sizeof *a->kw_names * kw.n);
        memcpy(a->kw_names, names, sizeof *names * kw.n);
    }
}

/* A dotted filter / test name. */
static jj_name dotted_name(parser *p)
{
    jj_token *t = jj__p_expect_type(p, T_NAME, "a name");
    char dotted[256];
    size_t n = t->n < sizeof dotted ? t->n : sizeof dotted - 1;
    memcpy(dotted, t->s, n);
    while (jj__p_is_op(jj__p_cur(p), TO_DOT)) {
        jj__p_next(p);
        jj_token *u = jj__p_expect_type(p, T_NAME, "a name");
        if (n + 1 + u->n >= sizeof dotted) jj__p_fail(p, "name too long");
        dotted[n++] = '.';
        memcpy(dotted + n, u->s, u->n);
        n += u->n;
    }
    return jj__p_pname(p, dotted, n);
}

jj_node *jj__p_parse_filter(parser *p, jj_node *in, int start_inline)
{
    while (jj__p_is_op(jj__p_cur(p), TO_PIPE) || start_inline) {
        if (!start_inline) jj__p_next(p);
        int line = jj__p_cur(p)->line;
        jj_node *f = jj__p_node(p, N_FILTER, line);
        f->a = in;
        f->name = dotted_name(p);
        f->op = jj__filter_index(f->name.s);
        if (f->op < 0 && !p->soft) fail_kind(p, JJ_E_ASSERTION, "No filter named '%s'.", f->name.s);
        if (jj__p_is_op(jj__p_cur(p), TO_LPAREN)) parse_call_args(p, &f->args);
        in = f;
        start_inline = 0;
    }
    return in;
}

static jj_node *parse_test(parser *p, jj_node *in)
{
    int line = jj__p_next(p)->line; /* 'is' */
    int negated = jj__p_skip_name(p, "not");
    jj_node *t = jj__p_node(p, N_TEST, line);
    t->a = in;
    t->name = dotted_name(p);
    t->op = jj__test_index(t->name.s);
    if (t->op < 0 && !p->soft) fail_kind(p, JJ_E_ASSERTION, "No test named '%s'.", t->name.s);
    jj_token *c = jj__p_cur(p);
    if (jj__p_is_op(c, TO_LPAREN))
        parse_call_args(p, &t->args);
    else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
              jj__p_is_op(c, TO_LBRACKET) || jj__p_is_op(c, TO_LBRACE)) &&
             !jj__p_is_name(c, "else") && !jj__p_is_name(c, "or") && !jj__p_is_name(c, "and")) {
        if (jj__p_is_name(c, "is")) jj__p_fail(p, "You cannot chain multiple tests with is");
        jj_node *arg = parse_postfix(p, parse_primary(p));
        t->args.pos = jj__p_palloc(p, sizeof *t->args.pos);
        t->args.pos[0] = arg;
        t->args.n_pos = 1;
    }
    if (!negated) return t;
    jj_node *n = jj__p_node(p, N_NOT, line);
    n->a = t;
    return n;
}

static jj_node *parse_subscribed(parser *p)
{
    int line = jj__p_cur(p)->line;
    jj_node *parts[3] = {NULL, NULL, NULL};
    if (jj__p_is_op(jj__p_cur(p), TO_COLON))
        jj__p_next(p);
    else {
        jj_node *e = jj__p_parse_expression(p, 1);
        if (!jj__p_is_op(jj__p_cur(p), TO_COLON)) return e;
        jj__p_next(p);
        parts[0] = e;
    }
    if (!jj__p_is_op(jj__p_cur(p), TO_COLON) && !jj__p_is_op(jj__p_cur(p), TO_RBRACKET) &&
        !jj__p_is_op(jj__p_cur(p), TO_COMMA))
        parts[1] = jj__p_parse_expression(p, 1);
    if (jj__p_is_op(jj__p_cur(p), TO_COLON)) {
        jj__p_next(p);
        if (!jj__p_is_op(jj__p_cur(p), TO_RBRACKET) && !jj__p_is_op(jj__p_cur(p), TO_COMMA))
            parts[2] = jj__p_parse_expression(p, 1);
    }
    jj_node *s = jj__p_node(p, N_SLICE, line);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static jj_node *parse_subscript(parser *p, jj_node *obj)
{
    jj_token *t = jj__p_next(p);
    if (t->type == T_OP && t->op == TO_DOT) {
        jj_token *a = jj__p_next(p);
        if (a->type == T_NAME) {
            jj_node *g = jj__p_node(p, N_GETATTR, t->line);
            g->a = obj;
            g->name = jj__p_pname(p, a->s, a->n);
            return g;
        }
        if (a->type != T_INT) jj__p_fail(p, "expected name or number");
        jj_node *g = jj__p_node(p, N_GETITEM, t->line), *k = jj__p_node(p, N_CONST, t->line);
        k->val = jinja_int(a->i);
        g->a = obj;
        g->b = k;
        return g;
    }
    nvec args = {0};
    while (!jj__p_is_op(jj__p_cur(p), TO_RBRACKET)) {
        if (args.n) jj__p_expect_op(p, TO_COMMA, "','");
        jj__p_nv_push(p, &args, parse_subscribed(p));
    }
    jj__p_expect_op(p, TO_RBRACKET, "']'");
    jj_node *g = jj__p_node(p, N_GETITEM, t->line);
    g->a = obj;
    if (args.n == 1)
        g->b = args.v[0];
    else {
        g->b = jj__p_node(p, N_TUPLE, t->line);
        g->b->items = args.v;
        g->b->n_items = args.n;
    }
    return g;
}

static jj_node *parse_call(parser *p, jj_node *fn)
{
    jj_node *c = jj__p_node(p, N_CALL, jj__p_cur(p)->line);
    c->a = fn;
    parse_call_args(p, &c->args);
    return c;
}

static jj_node *parse_postfix(parser *p, jj_node *n)
{
    for (;;) {
        if (jj__p_is_op(jj__p_cur(p), TO_DOT) || jj__p_is_op(jj__p_cur(p), TO_LBRACKET))
            n = parse_subscript(p, n);
        else if (jj__p_is_op(jj__p_cur(p), TO_LPAREN))
            n = parse_call(p, n);
        else
            return n;
    }
}

static jj_node *parse_filter_expr(parser *p, jj_node *n)
{
    for (;;) {
        if (jj__p_is_op(jj__p_cur(p), TO_PIPE))
            n = jj__p_parse_filter(p, n, 0);
        else if (jj__p_is_name(jj__p_cur(p), "is"))
            n = parse_test(p, n);
        else if (jj__p_is_op(jj__p_cur(p), TO_LPAREN))
            n = parse_call(p, n);
        else
            return n;
    }
}

static jj_node *parse_list(parser *p)
{
    jj_node *l = jj__p_node(p, N_LIST, jj__p_next(p)->line);
    nvec items = {0};
    while (!jj__p_is_op(jj__p_cur(p), TO_RBRACKET)) {
        if (items.n) jj__p_expect_op(p, TO_COMMA, "','");
        if (jj__p_is_op(jj__p_cur(p), TO_RBRACKET)) break;
        jj__p_nv_push(p, &items, jj__p_parse_expression(p, 1));
    }
    jj__p_expect_op(p, TO_RBRACKET, "']'");
    l->items = items.v;
    l->n_items = items.n;
    return l;
}

static jj_node *parse_dict(parser *p)
{
    jj_node *d = jj__p_node(p, N_DICT, jj__p_next(p)->line);
    nvec items = {0};
    while (!jj__p_is_op(jj__p_cur(p), TO_RBRACE)) {
        if (items.n) jj__p_expect_op(p, TO_COMMA, "','");
        if (jj__p_is_op(jj__p_cur(p), TO_RBRACE)) break;
        jj__p_nv_push(p, &items, jj__p_parse_expression(p, 1));
        jj__p_expect_op(p, TO_COLON, "':'");
        jj__p_nv_push(p, &items, jj__p_parse_expression(p, 1));
    }
    jj__p_expect_op(p, TO_RBRACE, "'}'");
    d->items = items.v;
    d->n_items = items.n;
    return d;
}

static void note_special_name(parser *p, const jj_token *t)
{
    if (!p->macro) return;
    if (jj__p_is_name(t, "caller")) p->macro->uses_caller = 1;
    if (jj__p_is_name(t, "varargs")) p->macro->uses_varargs = 1;
    if (jj__p_is_name(t, "kwargs")) p->macro->uses_kwargs = 1;
}

static jj_node *parse_primary(parser *p)
{
    jj_token *t = jj__p_cur(p);
    jj_node *n;
    jj__p_enter(p);
    if (t->type == T_NAME) {
        n = jj__p_node(p, N_CONST, t->line);
        if (jj__p_is_name(t, "true") || jj__p_is_name(t, "True"))
            n->val = jinja_bool(1);
        else if (jj__p_is_name(t, "false") || jj__p_is_name(t, "False"))
            n->val = jinja_bool(0);
        else if (jj__p_is_name(t, "none") || jj__p_is_name(t, "None"))
            n->val = jinja_none();
        else {
            n->kind = N_NAME;
            n->name = jj__p_pname(p, t->s, t->n);
            note_special_name(p, t);
        }
        jj__p_next(p);
    } else if (t->type == T_STRING) {
        n = jj__p_node(p, N_CONST, t->line);
        jj__p_next(p);
        if (jj__p_cur(p)->type != T_STRING)
            n->val = jj__p_const_str(p, t->s, t->n);
        else {
            size_t total = t->n;
            for (uint32_t i = p->pos; p->tk[i].type == T_STRING; i++)
                total += p->tk[i].n;
            char *joined = jj__p_palloc(p, total + 1);
            memcpy(joined, t->s, t->n);
            size_t o = t->n;
            while (jj__p_cur(p)->type == T_STRING) {
                memcpy(joined + o, jj__p_cur(p)->s, jj__p_cur(p)->n);
                o += jj__p_cur(p)->n;
                jj__p_next(p);
            }
            n->val = jj__p_const_str(p, joined, o);
        }
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        n = jj__p_node(p, N_CONST, t->line);
        n->val = t->type == T_INT ? jinja_int(t->i) : jinja_float(t->f);
        jj__p_next(p);
    } else if (jj__p_is_op(t, TO_LPAREN)) {
        jj__p_next(p);
        n = jj__p_parse_tuple(p, 0, 1, NULL, NULL, 1);
        jj__p_expect_op(p, TO_RPAREN, "')'");
    } else if (jj__p_is_op(t, TO_LBRACKET))
        n = parse_list(p);
    else if (jj__p_is_op(t, TO_LBRACE))
        n = parse_dict(p);
    else {
        char desc[80];
        if (t->type == T_EOF) jj__p_fail(p, "unexpected end of template");
        jj__p_fail(p, "unexpected '%s'", describe(t, desc, sizeof desc));
    }
    p->depth--;
    return n;
}

static jj_node *parse_unary(parser *p, int with_filter)
{
    jj_node *n;
    jj__p_enter(p);
    if (jj__p_is_op(jj__p_cur(p), TO_SUB) || jj__p_is_op(jj__p_cur(p), TO_ADD)) {
        jj_token *t = jj__p_next(p);
        n = jj__p_node(p, t->op == TO_SUB ? N_NEG : N_POS, t->line);
        n->a = parse_unary(p, 0);
    } else
        n = parse_primary(p);
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jj_node *binop(parser *p, int op, jj_node *a, jj_node *b, int line)
{
    jj_node *n = jj__p_node(p, N_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node *parse_pow(parser *p)
{
    jj_node *l = parse_unary(p, 1);
    while (jj__p_is_op(jj__p_cur(p), TO_POW)) {
        int line = jj__p_next(p)->line;
        l = binop(p, JJ_OP_POW, l, parse_unary(p, 1), line);
    }
    return l;
}

static jj_node *parse_math2(parser *p)
{
    jj_node *l = parse_pow(p);
    for (;;) {
        jj_token *t = jj__p_cur(p);
        int op = jj__p_is_op(t, TO_MUL)        ? JJ_OP_MUL
                 : jj__p_is_op(t, TO_DIV)      ? JJ_OP_DIV
                 : jj__p_is_op(t, TO_FLOORDIV) ? JJ_OP_FLOORDIV
                 : jj__p_is_op(t, TO_MOD)      ? JJ_OP_MOD
                                               : -1;
        if (op < 0) return l;
        jj__p_next(p);
        l = binop(p, op, l, parse_pow(p), t->line);
    }
}

static jj_node *parse_concat(parser *p)
{
    jj_node *first = parse_math2(p);
    if (!jj__p_is_op(jj__p_cur(p), TO_TILDE)) return first;
    nvec args = {0};
    jj__p_nv_push(p, &args, first);
    while (jj__p_is_op(jj__p_cur(p), TO_TILDE)) {
        jj__p_next(p);
        jj__p_nv_push(p, &args, parse_math2(p));
    }
    jj_node *n = jj__p_node(p, N_CONCAT, first->line);
    n->items = args.v;
    n->n_items = args.n;
    return n;
}

static jj_node *parse_math1(parser *p)
{
    jj_node *l = parse_concat(p);
    while (jj__p_is_op(jj__p_cur(p), TO_ADD) || jj__p_is_op(jj__p_cur(p), TO_SUB)) {
        jj_token *t = jj__p_next(p);
        l = binop(p, t->op == TO_ADD ? JJ_OP_ADD : JJ_OP_SUB, l, parse_concat(p), t->line);
    }
    return l;
}

static int compare_op(const jj_token *t)
{
    if (t->type != T_OP) return -1;
    switch (t->op) {
    case TO_EQ:
        return JJ_OP_EQ;
    case TO_NE:
        return JJ_OP_NE;
    case TO_LT:
        return JJ_OP_LT;
    case TO_LTEQ:
        return JJ_OP_LE;
    case TO_GT:
        return JJ_OP_GT;
    case TO_GTEQ:
        return JJ_OP_GE;
    default:
        return -1;
    }
}

static jj_node *parse_compare(parser *p)
{
    int line = jj__p_cur(p)->line;
    jj_node *e = parse_math1(p);
    nvec operands = {0};
    uint8_t ops[64];
    for (;;) {
        int op = compare_op(jj__p_cur(p));
        if (op >= 0)
            jj__p_next(p);
        else if (jj__p_skip_name(p, "in"))
            op = JJ_OP_IN;
        else if (jj__p_is_name(jj__p_cur(p), "not") && jj__p_is_name(jj__p_look(p), "in")) {
            jj__p_next(p);
            jj__p_next(p);
            op = JJ_OP_NOTIN;
        } else
            break;
        if (operands.n >= 64) jj__p_fail(p, "comparison chain too long");
        ops[operands.n] = (uint8_t)op;
        jj__p_nv_push(p, &operands, parse_math1(p));
    }
    if (!operands.n) return e;
    jj_node *n = jj__p_node(p, N_COMPARE, line);
    n->a = e;
    n->items = operands.v;
    n->n_items = operands.n;
    n->ops = jj__p_palloc(p, operands.n);
    memcpy(n->ops, ops, operands.n);
    return n;
}

static jj_node *parse_not(parser *p)
{
    if (jj__p_is_name(jj__p_cur(p), "not")) {
        int line = jj__p_next(p)->line;
        jj__p_enter(p);
        jj_node *n = jj__p_node(p, N_NOT, line);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static jj_node *parse_and(parser *p)
{
    jj_node *l = parse_not(p);
    while (jj__p_is_name(jj__p_cur(p), "and")) {
        int line = jj__p_next(p)->line;
        jj_node *n = jj__p_node(p, N_AND, line);
        n->a = l;
        n->b = parse_not(p);
        l = n;
    }
    return l;
}

static jj_node *parse_or(parser *p)
{
    jj_node *l = parse_and(p);
    while (jj__p_is_name(jj__p_cur(p), "or")) {
        int line = jj__p_next(p)->line;
        jj_node *n = jj__p_node(p, N_OR, line);
        n->a = l;
        n->b = parse_and(p);
        l = n;
    }
    return l;
}

static jj_node *parse_condexpr(parser *p)
{
    int line = jj__p_cur(p)->line;
    jj_node *e1 = parse_or(p);
    while (jj__p_is_name(jj__p_cur(p), "if")) {
        jj__p_next(p);
        int soft = p->soft;
        p->soft = 1;
        jj__p_enter(p);
        jj_node *n = jj__p_node(p, N_CONDEXPR, line);
        n->b = e1;
        n->a = parse_or(p);
        if (jj__p_skip_name(p, "else")) n->c = parse_condexpr(p);
        p->depth--;
        p->soft = soft;
        e1 = n;
        line = jj__p_cur(p)->line;
    }
    return e1;
}

jj_node *jj__p_parse_expression(parser *p, int with_condexpr)
{
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static int tuple_end(parser *p, const char *end1, const char *end2)
{
    jj_token *t = jj__p_cur(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || jj__p_is_op(t, TO_RPAREN)) return 1;
    return (end1 && jj__p_is_name(t, end1)) || (end2 && jj__p_is_name(t, end2));
}

jj_node *jj__p_parse_tuple(parser *p, int simplified, int with_condexpr, const char *end1,
                           const char *end2, int explicit_parens)
{
    int line = jj__p_cur(p)->line, is_tuple = 0;
    nvec args = {0};
    for (;;) {
        if (args.n) jj__p_expect_op(p, TO_COMMA, "','");
        if (tuple_end(p, end1, end2)) break;
        jj__p_nv_push(p, &args,
                      simplified ? parse_primary(p) : jj__p_parse_expression(p, with_condexpr));
        if (jj__p_is_op(jj__p_cur(p), TO_COMMA))
            is_tuple = 1;
        else
            break;
        line = jj__p_cur(p)->line;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char desc[80];
            jj__p_fail(p, "Expected an expression, got '%s'",
                       describe(jj__p_cur(p), desc, sizeof desc));
        }
    }
    jj_node *t = jj__p_node(p, N_TUPLE, line);
    t->items = args.v;
    t->n_items = args.n;
    return t;
}

/* ---- assignment targets ------------------------------------------------------------------- */

static void check_target(parser *p, const jj_node *t)
{
    if (t->kind == N_NAME || t->kind == N_NSREF) return;
    if (t->kind == N_TUPLE) {
        for (uint32_t i = 0; i < t->n_items; i++)
            check_target(p, t->items[i]);
        return;
    }
    jj__p_fail(p, "can't assign to '%s'", t->kind == N_CONST ? "Const" : "expression");
}

jj_node *jj__p_parse_assign_target(parser *p, int with_tuple, int name_only, const char *end1,
                                   int with_namespace)
{
    jj_node *t;
    if (with_namespace && jj__p_cur(p)->type == T_NAME && jj__p_is_op(jj__p_look(p), TO_DOT)) {
        jj_token *ns = jj__p_next(p);
        jj__p_next(p);
        jj_token *attr = jj__p_expect_type(p, T_NAME, "a name");
        t = jj__p_node(p, N_NSREF, ns->line);
        t->a = jj__p_node(p, N_NAME, ns->line);
        t->a->name = jj__p_pname(p, ns->s, ns->n);
        t->name = jj__p_pname(p, attr->s, attr->n);
        return t;
    }
    if (name_only) {
        jj_token *n = jj__p_expect_type(p, T_NAME, "a name");
        t = jj__p_node(p, N_NAME, n->line);
        t->name = jj__p_pname(p, n->s, n->n);
        return t;
    }
    t = with_tuple ? jj__p_parse_tuple(p, 1, 1, end1, NULL, 0) : parse_primary(p);
    check_target(p, t);
    return t;
}
