/*
 * jinja_expr.c — evaluating expressions as Jinja's sandboxed environment does: scopes, names,
 * calls, and the walk over an expression's tree; what each operation does to its values
 * (attributes, items, slices, operators) is jinja_ops.c's.
 *
 * Names resolve through the scope chain, then the render variables, then the globals; a name
 * found nowhere is Undefined. Called by jinja_stmt.c, jinja_fold.c and jinja_api.c.
 *
 * This file and jinja_stmt.c call each other, the interpreter's recursion: a call of a macro
 * (or of a recursive loop) runs statements, and statements evaluate expressions. It is the one
 * cycle through the evaluator; the builtins it calls (filters, tests, methods, globals) call
 * neither file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

/* ---- scopes ------------------------------------------------------------------------------- */

static int name_eq(const jj_name *a, const jj_name *b)
{
    return a->s == b->s || (a->hash == b->hash && a->len == b->len && !memcmp(a->s, b->s, a->len));
}

jinja_value jj__lookup(jj_scope *s, const jj_name *name)
{
    for (; s; s = s->parent)
        for (uint32_t i = 0; i < s->n; i++)
            if (name_eq(&s->v[i].name, name)) return s->v[i].v;
    return jj__missing;
}

void jj__scope_set(jinja_ctx *c, jj_scope *s, const jj_name *name, jinja_value v)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (name_eq(&s->v[i].name, name)) {
            s->v[i].v = v;
            return;
        }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 8;
        jj_var *nv = jj__alloc(c, sizeof *nv * cap);
        if (s->n) memcpy(nv, s->v, sizeof *nv * s->n);
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = (jj_var){*name, v};
}

/* ---- calls -------------------------------------------------------------------------------- */

/* Evaluates written arguments (with *args and **kwargs spread) into *out. */
static void eval_args(jinja_ctx *c, jj_scope *s, const jj_args *w, jj_callargs *out)
{
    uint32_t n_pos = w->n_pos, n_kw = w->n_kw;
    jinja_value star = jj__missing, dstar = jj__missing;
    if (w->star) {
        star = jj__iter_list(c, jj__eval(c, s, w->star));
        n_pos += star.l->n;
    }
    if (w->dstar) {
        dstar = jj__eval(c, s, w->dstar);
        if (dstar.kind != JINJA_DICT)
            jj__raise(c, JJ_E_TYPE, "argument after ** must be a mapping");
        n_kw += dstar.d->n;
    }
    out->pos = n_pos ? jj__alloc(c, sizeof *out->pos * n_pos) : NULL;
    out->kw = n_kw ? jj__alloc(c, sizeof *out->kw * n_kw) : NULL;
    out->kw_names = n_kw ? jj__alloc(c, sizeof *out->kw_names * n_kw) : NULL;
    out->n_pos = 0;
    out->n_kw = 0;
    for (uint32_t i = 0; i < w->n_pos; i++)
        out->pos[out->n_pos++] = jj__eval(c, s, w->pos[i]);
    if (star.kind == JINJA_LIST)
        for (uint32_t i = 0; i < star.l->n; i++)
            out->pos[out->n_pos++] = star.l->v[i];
    for (uint32_t i = 0; i < w->n_kw; i++) {
        out->kw_names[out->n_kw] = w->kw_names[i].s;
        out->kw[out->n_kw++] = jj__eval(c, s, w->kw[i]);
    }
    if (dstar.kind == JINJA_DICT)
        for (uint32_t i = 0; i < dstar.d->n; i++) {
            if (dstar.d->e[i].k.kind != JINJA_STR)
                jj__raise(c, JJ_E_TYPE, "keywords must be strings");
            out->kw_names[out->n_kw] = dstar.d->e[i].k.s->s;
            out->kw[out->n_kw++] = dstar.d->e[i].v;
        }
}

jinja_value jj__call(jinja_ctx *c, jinja_value fn, const jj_callargs *a)
{
    if (fn.kind == JINJA_CALLABLE && fn.fn->type == JJ_FN_MACRO) {
        jj__step(c);
        return jj__call_macro(c, fn.fn, a);
    }
    if (fn.kind == JINJA_LOOP) {
        jj__step(c);
        return jj__loop_call(c, fn, a);
    }
    return jj__call_native(c, fn, a);
}

/* ---- the evaluator ------------------------------------------------------------------------ */

static jinja_value eval_name(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    jinja_value v = jj__lookup(s, &n->name);
    if (v.kind != JINJA__MISSING) return v;
    v = jj__global(c, n->name.s, n->name.len);
    if (v.kind != JINJA__MISSING) return v;
    return jj__undef(c, JJ_E_UNDEFINED, "'%s' is undefined", n->name.s);
}

static jinja_value eval_compare(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    jinja_value left = jj__eval(c, s, n->a);
    for (uint32_t i = 0; i < n->n_items; i++) {
        jinja_value right = jj__eval(c, s, n->items[i]);
        c->line = n->line;
        if (!jj__compare_op(c, n->ops[i], left, right)) return jinja_bool(0);
        left = right;
    }
    return jinja_bool(1);
}

static jinja_value eval_literal(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    if (n->kind == N_DICT) {
        jinja_value d = jj__dict_new(c, n->n_items / 2);
        for (uint32_t i = 0; i + 1 < n->n_items; i += 2) {
            jinja_value k = jj__eval(c, s, n->items[i]);
            jj__dict_set(c, d, k, jj__eval(c, s, n->items[i + 1]));
        }
        return d;
    }
    jinja_value l = jj__list_new(c, n->kind == N_TUPLE ? JJ_L_TUPLE : JJ_L_LIST, n->n_items);
    for (uint32_t i = 0; i < n->n_items; i++)
        l.l->v[i] = jj__eval(c, s, n->items[i]);
    l.l->n = n->n_items;
    return l;
}

static jinja_value eval_filter(jinja_ctx *c, jj_scope *s, const jj_node *n, jinja_value in)
{
    jj_callargs a;
    eval_args(c, s, &n->args, &a);
    c->line = n->line;
    if (n->op < 0) jj__raise(c, JJ_E_RUNTIME, "No filter named '%s' found.", n->name.s);
    return jj__apply_filter(c, n->op, in, &a);
}

static jinja_value eval_getitem(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    jinja_value obj = jj__eval(c, s, n->a);
    if (n->b->kind == N_SLICE) {
        const jj_node *sl = n->b;
        jinja_value lo = sl->a ? jj__eval(c, s, sl->a) : jinja_none();
        jinja_value hi = sl->b ? jj__eval(c, s, sl->b) : jinja_none();
        jinja_value st = sl->c ? jj__eval(c, s, sl->c) : jinja_none();
        c->line = n->line;
        /* Folding at compile time slices through the sandbox's getitem, which turns a failure
         * into Undefined; at run time the slice is Python's own */
        if (c->folding && obj.kind != JINJA_UNDEFINED) {
            int sliceable =
                obj.kind == JINJA_STR ||
                (obj.kind == JINJA_LIST && (jj__is_seq(obj) || obj.l->type == JJ_L_RANGE));
            int ints =
                (!sl->a || lo.kind == JINJA_NONE || lo.kind == JINJA_INT ||
                 lo.kind == JINJA_BOOL) &&
                (!sl->b || hi.kind == JINJA_NONE || hi.kind == JINJA_INT ||
                 hi.kind == JINJA_BOOL) &&
                (!sl->c || st.kind == JINJA_NONE || st.kind == JINJA_INT || st.kind == JINJA_BOOL);
            if (!sliceable || !ints)
                return jj__undef(c, JJ_E_UNDEFINED, "%s object has no element slice",
                                 jj__type_name(obj));
        }
        return jj__slice(c, obj, lo, hi, st);
    }
    jinja_value key = jj__eval(c, s, n->b);
    c->line = n->line;
    return jj__getitem(c, obj, key);
}

jinja_value jj__eval(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    c->line = n->line;
    switch (n->kind) {
    case N_CONST: /* a folded list or dict is new at each use, as Python's literal would be */
        return n->val.kind == JINJA_LIST || n->val.kind == JINJA_DICT ? jj__copy_value(c, n->val)
                                                                      : n->val;
    case N_NAME:
        return eval_name(c, s, n);
    case N_GETATTR: {
        jinja_value obj = jj__eval(c, s, n->a);
        c->line = n->line;
        return jj__getattr(c, obj, n->name.s, n->name.len);
    }
    case N_GETITEM:
        return eval_getitem(c, s, n);
    case N_CALL: {
        jinja_value fn = jj__eval(c, s, n->a);
        jj_callargs a;
        eval_args(c, s, &n->args, &a);
        c->line = n->line;
        return jj__call(c, fn, &a);
    }
    case N_FILTER:
        return eval_filter(c, s, n, jj__eval(c, s, n->a));
    case N_TEST: {
        jinja_value v = jj__eval(c, s, n->a);
        jj_callargs a;
        eval_args(c, s, &n->args, &a);
        c->line = n->line;
        if (n->op < 0) jj__raise(c, JJ_E_RUNTIME, "No test named '%s' found.", n->name.s);
        return jinja_bool(jj__apply_test(c, n->op, v, &a));
    }
    case N_NOT:
        return jinja_bool(!jj__truthy(jj__eval(c, s, n->a)));
    case N_NEG:
    case N_POS: {
        jinja_value v = jj__eval(c, s, n->a);
        c->line = n->line;
        return jj__unary(c, v, n->kind == N_NEG);
    }
    case N_BINOP: {
        jinja_value a = jj__eval(c, s, n->a), b = jj__eval(c, s, n->b);
        c->line = n->line;
        return jj__binop(c, n->op, a, b);
    }
    case N_CONCAT: {
        buf b;
        jj__buf_init(&b, c);
        for (uint32_t i = 0; i < n->n_items; i++)
            jj__str(&b, jj__eval(c, s, n->items[i]));
        return jj__str_buf(c, &b);
    }
    case N_AND: {
        jinja_value a = jj__eval(c, s, n->a);
        return jj__truthy(a) ? jj__eval(c, s, n->b) : a;
    }
    case N_OR: {
        jinja_value a = jj__eval(c, s, n->a);
        return jj__truthy(a) ? a : jj__eval(c, s, n->b);
    }
    case N_COMPARE:
        return eval_compare(c, s, n);
    case N_CONDEXPR:
        if (jj__truthy(jj__eval(c, s, n->a))) return jj__eval(c, s, n->b);
        if (n->c) return jj__eval(c, s, n->c);
        return jj__undef(c, JJ_E_UNDEFINED,
                         "the inline if-expression on line %d evaluated to false and no else "
                         "section was defined.",
                         n->line);
    case N_LIST:
    case N_TUPLE:
    case N_DICT:
        return eval_literal(c, s, n);
    default:
        jj__raise(c, JJ_E_SYNTAX, "unexpected node %d in an expression", n->kind);
    }
}

jinja_value jj__filter_chain(jinja_ctx *c, jj_scope *s, const jj_node *n, jinja_value in)
{
    if (n->a) in = jj__filter_chain(c, s, n->a, in);
    return eval_filter(c, s, n, in);
}
