/*
 * jinja_fold.c — Jinja's optimizer: constant expressions are evaluated once, when the template
 * compiles, as jinja2's Optimizer and its Output compiler do.
 *
 * It matters for more than speed: folding evaluates through the environment's getitem, which
 * turns a failed slice into Undefined, where a run-time slice is Python's own subscript and
 * raises TypeError; and a folded `{{ … }}` prints even a value that could not be a constant. An
 * expression is folded when every node in it can be (literals, operators, attribute and item
 * access, slices, conditional expressions with an else, filters that need no context — not
 * map / select / reject / selectattr / rejectattr — and tests), its evaluation raises nothing,
 * and its value has a "safe repr" (none, bool, numbers, strings, and lists / tuples / dicts of
 * them); `{{ … }}` folds whatever the value. Folded containers are copied at each use, so a
 * list.pop at run time never changes the template. Called by jj__parse once the AST is built.
 */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

/* Filters that take the render context in Jinja: never folded. */
static int context_filter(const char *name)
{
    static const char *const names[] = {"map",        "select",     "reject",
                                        "selectattr", "rejectattr", "random"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return 1;
    return 0;
}

static int foldable(const jj_node *n);

static int args_foldable(const jj_args *a)
{
    for (uint32_t i = 0; i < a->n_pos; i++)
        if (!foldable(a->pos[i])) return 0;
    for (uint32_t i = 0; i < a->n_kw; i++)
        if (!foldable(a->kw[i])) return 0;
    return (!a->star || foldable(a->star)) && (!a->dstar || foldable(a->dstar));
}

/* Whether every node of the expression n can be folded. */
static int foldable(const jj_node *n)
{
    if (!n) return 1;
    switch (n->kind) {
    case N_CONST:
        return 1;
    case N_LIST:
    case N_TUPLE:
    case N_DICT:
    case N_CONCAT:
    case N_COMPARE:
        if (n->kind == N_COMPARE && !foldable(n->a)) return 0;
        for (uint32_t i = 0; i < n->n_items; i++)
            if (!foldable(n->items[i])) return 0;
        return 1;
    case N_NOT:
    case N_NEG:
    case N_POS:
    case N_GETATTR:
        return foldable(n->a);
    case N_BINOP:
    case N_AND:
    case N_OR:
    case N_GETITEM:
        return foldable(n->a) && foldable(n->b);
    case N_SLICE:
        return foldable(n->a) && foldable(n->b) && foldable(n->c);
    case N_CONDEXPR:
        return n->c && foldable(n->a) && foldable(n->b) && foldable(n->c);
    case N_FILTER:
        return n->op >= 0 && n->a && !context_filter(n->name.s) && foldable(n->a) &&
               args_foldable(&n->args);
    case N_TEST:
        return n->op >= 0 && foldable(n->a) && args_foldable(&n->args);
    default:
        return 0;
    }
}

/* has_safe_repr: what a folded constant may be. */
static int safe_value(jinja_value v, int depth)
{
    if (depth > 64) return 0;
    switch (v.kind) {
    case JINJA_NONE:
    case JINJA_BOOL:
    case JINJA_INT:
    case JINJA_FLOAT:
    case JINJA_STR:
        return 1;
    case JINJA_LIST:
        if (v.l->type != JJ_L_LIST && v.l->type != JJ_L_TUPLE && v.l->type != JJ_L_RANGE) return 0;
        for (uint32_t i = 0; i < v.l->n; i++)
            if (!safe_value(v.l->v[i], depth + 1)) return 0;
        return 1;
    case JINJA_DICT:
        for (uint32_t i = 0; i < v.d->n; i++)
            if (!safe_value(v.d->e[i].k, depth + 1) || !safe_value(v.d->e[i].v, depth + 1))
                return 0;
        return 1;
    default:
        return 0;
    }
}

/* ---- copying values into the template ----------------------------------------------------- */

typedef struct folder {
    jinja_tmpl *t;
    jj_catch *k; /* the parser's: out of memory ends the compile */
    jinja_ctx *c;
} folder;

static void *talloc(folder *f, size_t n)
{
    void *p = jj__arena_alloc(&f->t->arena, n);
    if (!p) {
        va_list ap;
        memset(&ap, 0, sizeof ap);
        jj__vraise(f->k, JJ_E_MEMORY, 0, "out of memory", ap);
    }
    return p;
}

static jinja_value copy_into_template(folder *f, jinja_value v)
{
    if (v.kind == JINJA_STR) {
        struct jinja_str *s = talloc(f, sizeof *s + v.s->len + 1);
        memcpy(s, v.s, sizeof *s + v.s->len + 1);
        v.s = s;
    } else if (v.kind == JINJA_LIST) {
        struct jinja_list *l = talloc(f, sizeof *l);
        *l = *v.l;
        l->v = talloc(f, sizeof *l->v * (l->n ? l->n : 1));
        for (uint32_t i = 0; i < l->n; i++)
            l->v[i] = copy_into_template(f, v.l->v[i]);
        l->cap = l->n;
        v.l = l;
    } else if (v.kind == JINJA_DICT) {
        struct jinja_dict *d = talloc(f, sizeof *d);
        memset(d, 0, sizeof *d);
        d->e = talloc(f, sizeof *d->e * (v.d->n ? v.d->n : 1));
        for (uint32_t i = 0; i < v.d->n; i++) {
            d->e[i] = v.d->e[i];
            d->e[i].k = copy_into_template(f, v.d->e[i].k);
            d->e[i].v = copy_into_template(f, v.d->e[i].v);
        }
        d->n = d->cap = v.d->n; /* constants are small: looked up linearly, never indexed */
        v.d = d;
    }
    return v;
}

/* ---- the pass ---------------------------------------------------------------------------- */

/* Evaluates n as the optimizer would; 1 with *out on success. */
static int try_eval(folder *f, const jj_node *n, jinja_value *out)
{
    jj_catch k = {0};
    jinja_ctx *c = f->c;
    c->catch = &k;
    c->folding = 1;
    jj_scope empty;
    memset(&empty, 0, sizeof empty);
    if (setjmp(k.jb)) {
        c->catch = NULL;
        c->folding = 0;
        return 0;
    }
    *out = jj__eval(c, &empty, n);
    c->catch = NULL;
    c->folding = 0;
    return 1;
}

static void fold_expr(folder *f, jj_node *n);

static void fold_args(folder *f, jj_args *a)
{
    for (uint32_t i = 0; i < a->n_pos; i++)
        fold_expr(f, a->pos[i]);
    for (uint32_t i = 0; i < a->n_kw; i++)
        fold_expr(f, a->kw[i]);
    fold_expr(f, a->star);
    fold_expr(f, a->dstar);
}

/* Folds the subexpressions of n bottom-up, then n itself when it can be. */
static void fold_expr(folder *f, jj_node *n)
{
    if (!n || n->kind == N_CONST) return;
    fold_expr(f, n->a);
    fold_expr(f, n->b);
    fold_expr(f, n->c);
    for (uint32_t i = 0; i < n->n_items; i++)
        fold_expr(f, n->items[i]);
    fold_args(f, &n->args);
    jinja_value v;
    if (n->kind == N_SLICE || !foldable(n) || !try_eval(f, n, &v) || !safe_value(v, 0)) return;
    n->val = copy_into_template(f, v);
    n->kind = N_CONST;
}

static void fold_body(folder *f, jj_node **body, uint32_t n);

static void fold_stmt(folder *f, jj_node *n)
{
    if (n->kind == S_OUTPUT) {
        fold_expr(f, n->a);
        jinja_value v;
        if (foldable(n->a) && try_eval(f, n->a, &v)) { /* {{ const }}: its text, whatever it is */
            buf b;
            jj__buf_init(&b, f->c);
            jj__str(&b, v);
            n->kind = S_DATA;
            n->val = copy_into_template(f, jj__str_new(f->c, b.s ? b.s : "", b.len));
        }
        return;
    }
    if (n->kind == S_SET || n->kind == S_FOR || n->kind == S_IF)
        fold_expr(f, n->kind == S_SET ? n->b : n->a);
    if (n->kind == S_FOR) {
        fold_expr(f, n->b);
        fold_expr(f, n->c);
    }
    if (n->kind == S_MACRO || n->kind == S_WITH || n->kind == S_CALLBLOCK)
        for (uint32_t i = 0; i < n->n_params; i++)
            fold_expr(f, n->defaults[i]);
    fold_body(f, n->body, n->n_body);
    fold_body(f, n->orelse, n->n_orelse);
}

static void fold_body(folder *f, jj_node **body, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        fold_stmt(f, body[i]);
}

void jj__fold(jinja_tmpl *t, jj_catch *k)
{
    jinja_limits lim = {.max_output_bytes = 1 << 20,
                        .max_memory_bytes = 64 << 20,
                        .max_steps = 100000,
                        .max_depth = 20};
    folder f = {t, k, jinja_ctx_create(&lim)};
    if (!f.c) return; /* no memory to fold with: the template still renders, unfolded */
    struct tm epoch = {0};
    jinja_ctx_set_time(f.c, &epoch);
    fold_body(&f, t->body, t->n_body);
    jinja_ctx_destroy(f.c);
}
