/*
 * jinja_stmt.c — executing statements: output, conditions, loops, assignments, macros, call,
 * filter, set and with blocks.
 *
 * Scoping is Jinja's: the template's top level is one scope over the render variables; every
 * iteration of a for body, a macro call, a call block's caller, a with block, a filter block,
 * a set block and a {% generation %} body get a fresh child scope, so a {% set %} inside them
 * is invisible outside (templates carry state in namespace() objects), while an if block makes
 * no scope. The loop variable is one object per loop whose index moves, as in Jinja. Output
 * goes to c->out; macros, set blocks and filter blocks capture it into their own buffer.
 * Called by jinja_api.c (jinja_render) and jinja_expr.c (macro and loop calls): this file and
 * jinja_expr.c call each other, the interpreter's recursion (statements evaluate expressions,
 * and calling a macro or a recursive loop runs statements).
 */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

enum { X_NORMAL, X_BREAK, X_CONTINUE };

static int exec_body(jinja_ctx *c, jj_scope *s, jj_node *const *body, uint32_t n);

static jj_scope *scope_new(jinja_ctx *c, jj_scope *parent)
{
    jj_scope *s = jj__alloc(c, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static jj_name name_of(const char *s)
{
    return (jj_name){s, (uint32_t)strlen(s), jj__hash_bytes(s, strlen(s))};
}

/* Runs body in scope s with its output captured; returns the text as a string value. */
static jinja_value capture(jinja_ctx *c, jj_scope *s, jj_node *const *body, uint32_t n, int *status)
{
    buf text, *saved = c->out;
    jj__buf_init(&text, c);
    c->out = &text;
    int st = exec_body(c, s, body, n);
    c->out = saved;
    if (status) *status = st;
    return jj__str_buf(c, &text);
}

/* ---- assignment --------------------------------------------------------------------------- */

static void assign(jinja_ctx *c, jj_scope *s, const jj_node *t, jinja_value v)
{
    if (t->kind == N_NAME) {
        jj__scope_set(c, s, &t->name, v);
        return;
    }
    if (t->kind == N_NSREF) {
        jinja_value ns = jj__lookup(s, &t->a->name);
        if (ns.kind != JINJA_NAMESPACE)
            jj__raise(c, JJ_E_RUNTIME, "cannot assign attribute on non-namespace object");
        jj__dict_set(c, ns, jj__str_new(c, t->name.s, t->name.len), v);
        return;
    }
    jinja_value l = jj__iter_list(c, v);
    if (l.l->n != t->n_items) {
        if (l.l->n < t->n_items)
            jj__raise(c, JJ_E_VALUE, "not enough values to unpack (expected %u, got %u)",
                      t->n_items, l.l->n);
        jj__raise(c, JJ_E_VALUE, "too many values to unpack (expected %u)", t->n_items);
    }
    for (uint32_t i = 0; i < t->n_items; i++)
        assign(c, s, t->items[i], l.l->v[i]);
}

/* ---- loops -------------------------------------------------------------------------------- */

/* Filters items by the loop's `if` test, evaluated with the target bound in a scratch scope. */
static jinja_value loop_filter(jinja_ctx *c, jj_scope *s, const jj_node *f, jinja_value items)
{
    jinja_value out = jj__list_new(c, JJ_L_LIST, 0);
    jj_scope *t = scope_new(c, s);
    for (uint32_t i = 0; i < items.l->n; i++) {
        jj__step(c);
        t->n = 0;
        assign(c, t, f->a, items.l->v[i]);
        if (jj__truthy(jj__eval(c, t, f->c))) jj__list_push(c, out, items.l->v[i]);
    }
    return out;
}

static int run_loop(jinja_ctx *c, jj_scope *s, const jj_node *f, jinja_value iterable, int depth0)
{
    c->line = f->line;
    jinja_value items = jj__iter_list(c, iterable);
    if (items.l->type == JJ_L_GEN || items.l->type == JJ_L_RANGE)
        items = jj__list_of(c, JJ_L_LIST, items.l->v, items.l->n);
    if (f->c) items = loop_filter(c, s, f, items);
    struct jinja_loop *l = jj__alloc(c, sizeof *l);
    memset(l, 0, sizeof *l);
    l->items = items;
    l->depth0 = depth0;
    l->node = f;
    l->scope = s;
    l->changed_last = jj__missing;
    jinja_value lv = {.kind = JINJA_LOOP, .loop = l};
    jj_scope *it = scope_new(c, s);
    jj_name ln = name_of("loop");
    for (uint32_t i = 0; i < items.l->n; i++) {
        jj__step(c);
        if (it->captured) it = scope_new(c, s);
        it->n = 0;
        l->index0 = i;
        jj__scope_set(c, it, &ln, lv);
        assign(c, it, f->a, items.l->v[i]);
        int st = exec_body(c, it, f->body, f->n_body);
        if (st == X_BREAK) break;
    }
    if (!items.l->n && f->n_orelse) return exec_body(c, scope_new(c, s), f->orelse, f->n_orelse);
    return X_NORMAL;
}

jinja_value jj__loop_call(jinja_ctx *c, jinja_value lv, const jj_callargs *a)
{
    struct jinja_loop *l = lv.loop;
    if (!l->node->op)
        jj__raise(c, JJ_E_TYPE,
                  "Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
    if (a->n_pos != 1 || a->n_kw) jj__raise(c, JJ_E_TYPE, "loop() takes exactly one argument");
    if (++c->depth > c->lim.max_depth)
        jj__raise(c, JJ_E_LIMIT, "recursive loop calls nested deeper than %d", c->lim.max_depth);
    buf text, *saved = c->out;
    jj__buf_init(&text, c);
    c->out = &text;
    run_loop(c, l->scope, l->node, a->pos[0], l->depth0 + 1);
    c->out = saved;
    c->depth--;
    return jj__str_buf(c, &text);
}

/* ---- macros ------------------------------------------------------------------------------- */

static jinja_value take_kw(jj_callargs *a, uint8_t *used, const char *name)
{
    for (uint32_t k = 0; k < a->n_kw; k++)
        if (!used[k] && !strcmp(a->kw_names[k], name)) {
            used[k] = 1;
            return a->kw[k];
        }
    return jj__missing;
}

jinja_value jj__call_macro(jinja_ctx *c, const struct jinja_func *f, const jj_callargs *ca)
{
    const jj_node *m = f->macro;
    jj_callargs a = *ca;
    uint8_t used[256] = {0};
    if (a.n_kw > sizeof used) jj__raise(c, JJ_E_TYPE, "too many keyword arguments");
    if (++c->depth > c->lim.max_depth)
        jj__raise(c, JJ_E_LIMIT, "macro calls nested deeper than %d", c->lim.max_depth);
    jj_scope *s = scope_new(c, f->closure);
    uint32_t np = m->n_params, given = a.n_pos < np ? a.n_pos : np;
    jinja_value *vals = jj__alloc(c, sizeof *vals * (np ? np : 1));
    for (uint32_t i = 0; i < np; i++)
        vals[i] = i < given ? a.pos[i] : take_kw(&a, used, m->params[i].s);
    if (m->uses_caller) {
        jinja_value cl = take_kw(&a, used, "caller");
        if (cl.kind == JINJA__MISSING) cl = f->caller;
        if (cl.kind == JINJA_UNDEFINED && !cl.u)
            cl = jj__undef(c, JJ_E_UNDEFINED, "No caller defined");
        jj_name cn = name_of("caller");
        jj__scope_set(c, s, &cn, cl);
    }
    if (m->uses_kwargs) {
        jinja_value kw = jj__dict_new(c, 0);
        for (uint32_t k = 0; k < a.n_kw; k++)
            if (!used[k]) jj__dict_set(c, kw, jj__str_cstr(c, a.kw_names[k]), a.kw[k]);
        jj_name kn = name_of("kwargs");
        jj__scope_set(c, s, &kn, kw);
    } else
        for (uint32_t k = 0; k < a.n_kw; k++)
            if (!used[k])
                jj__raise(c, JJ_E_TYPE, "macro '%s' takes no keyword argument '%s'", f->name,
                          a.kw_names[k]);
    if (m->uses_varargs) {
        uint32_t extra = a.n_pos > np ? a.n_pos - np : 0;
        jinja_value va = jj__list_of(c, JJ_L_TUPLE, a.pos + given, extra);
        jj_name vn = name_of("varargs");
        jj__scope_set(c, s, &vn, va);
    } else if (a.n_pos > np)
        jj__raise(c, JJ_E_TYPE, "macro '%s' takes not more than %u argument(s)", f->name, np);
    for (uint32_t i = 0; i < np; i++) {
        jinja_value v = vals[i];
        if (v.kind == JINJA__MISSING)
            v = m->defaults[i] ? jj__eval(c, s, m->defaults[i])
                               : jj__undef(c, JJ_E_UNDEFINED, "parameter '%s' was not provided",
                                           m->params[i].s);
        jj__scope_set(c, s, &m->params[i], v);
    }
    jinja_value out = capture(c, s, m->body, m->n_body, NULL);
    c->depth--;
    return out;
}

static jinja_value make_macro(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    jinja_value fn = jj__func_new(c, JJ_FN_MACRO, n->name.s, NULL, jinja_none());
    fn.fn->macro = n;
    fn.fn->closure = s;
    s->captured = 1;
    return fn;
}

/* {% call(params) m(args) %}body{% endcall %}: calls m with caller = the body as a macro. */
static void exec_callblock(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    const jj_node *call = n->b;
    jinja_value fn = jj__eval(c, s, call->a);
    jj_args w = call->args;
    jj_callargs a;
    /* evaluate the written arguments, then add caller=… */
    uint32_t np = w.n_pos, nk = w.n_kw;
    a.pos = jj__alloc(c, sizeof *a.pos * (np + 1));
    a.kw = jj__alloc(c, sizeof *a.kw * (nk + 1));
    a.kw_names = jj__alloc(c, sizeof *a.kw_names * (nk + 1));
    for (uint32_t i = 0; i < np; i++)
        a.pos[i] = jj__eval(c, s, w.pos[i]);
    for (uint32_t i = 0; i < nk; i++) {
        a.kw_names[i] = w.kw_names[i].s;
        a.kw[i] = jj__eval(c, s, w.kw[i]);
    }
    if (w.star || w.dstar) jj__raise(c, JJ_E_UNSUPPORTED, "*args in a call block");
    a.n_pos = np;
    a.kw_names[nk] = "caller";
    a.kw[nk] = make_macro(c, s, n);
    a.n_kw = nk + 1;
    c->line = n->line;
    jj__str(c->out, jj__call(c, fn, &a));
}

/* ---- statements --------------------------------------------------------------------------- */

static void write_value(jinja_ctx *c, jinja_value v)
{
    if (v.kind == JINJA_STR)
        buf_put(c->out, v.s->s, v.s->len);
    else
        jj__str(c->out, v);
}

static int exec(jinja_ctx *c, jj_scope *s, const jj_node *n)
{
    c->line = n->line;
    switch (n->kind) {
    case S_DATA:
        buf_put(c->out, n->val.s->s, n->val.s->len);
        return X_NORMAL;
    case S_OUTPUT:
        write_value(c, jj__eval(c, s, n->a));
        return X_NORMAL;
    case S_IF:
        if (jj__truthy(jj__eval(c, s, n->a))) return exec_body(c, s, n->body, n->n_body);
        return exec_body(c, s, n->orelse, n->n_orelse);
    case S_FOR:
        return run_loop(c, s, n, jj__eval(c, s, n->b), 0);
    case S_SET:
        assign(c, s, n->a, jj__eval(c, s, n->b));
        return X_NORMAL;
    case S_SETBLOCK: {
        int st;
        jinja_value v = capture(c, scope_new(c, s), n->body, n->n_body, &st);
        if (n->b) v = jj__filter_chain(c, s, n->b, v);
        c->line = n->line;
        assign(c, s, n->a, v);
        return st;
    }
    case S_MACRO:
        jj__scope_set(c, s, &n->name, make_macro(c, s, n));
        return X_NORMAL;
    case S_CALLBLOCK:
        exec_callblock(c, s, n);
        return X_NORMAL;
    case S_FILTERBLOCK: {
        int st;
        jj_scope *fs = scope_new(c, s);
        jinja_value v = capture(c, fs, n->body, n->n_body, &st);
        write_value(c, jj__filter_chain(c, fs, n->b, v));
        return st;
    }
    case S_WITH: {
        jj_scope *ws = scope_new(c, s);
        for (uint32_t i = 0; i < n->n_params; i++)
            jj__scope_set(c, ws, &n->params[i], jj__eval(c, s, n->defaults[i]));
        return exec_body(c, ws, n->body, n->n_body);
    }
    case S_SCOPE:
        return exec_body(c, scope_new(c, s), n->body, n->n_body);
    case S_BREAK:
        return X_BREAK;
    case S_CONTINUE:
        return X_CONTINUE;
    default:
        jj__raise(c, JJ_E_SYNTAX, "unexpected node %d in a template body", n->kind);
    }
}

static int exec_body(jinja_ctx *c, jj_scope *s, jj_node *const *body, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        int st = exec(c, s, body[i]);
        if (st != X_NORMAL) return st;
    }
    return X_NORMAL;
}

void jj__exec_template(jinja_ctx *c, const jinja_tmpl *t)
{
    jj_scope *root = scope_new(c, &c->vars);
    exec_body(c, root, t->body, t->n_body);
}
