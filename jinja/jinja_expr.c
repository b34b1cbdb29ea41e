/*
 * jinja_expr.c — evaluating expressions as Jinja's sandboxed environment does.
 *
 * Names resolve through the scope chain, then the render variables, then the globals; a name
 * found nowhere is Undefined. `a.b` tries the Python attribute first (a dict's `items` is the
 * method) and then the key; `a[b]` tries the key first and then the attribute; either gives
 * Undefined when both miss, and names the sandbox forbids (dunders, mutating methods) give an
 * Undefined that raises SecurityError when used. Operators follow Python, including Markup's
 * escaping of the other operand of + and %. Called by jinja_stmt.c and the builtins.
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

/* ---- argument binding --------------------------------------------------------------------- */

void jj__bind(jinja_ctx *c, const char *fname, const char *const *params, int n,
              const jj_callargs *a, jinja_value *out)
{
    for (int i = 0; i < n; i++)
        out[i] = jj__missing;
    if ((int)a->n_pos > n)
        jj__raise(c, JJ_E_TYPE, "%s() takes at most %d argument%s (%u given)", fname, n,
                  n == 1 ? "" : "s", a->n_pos);
    for (uint32_t i = 0; i < a->n_pos; i++)
        out[i] = a->pos[i];
    for (uint32_t k = 0; k < a->n_kw; k++) {
        int i = 0;
        while (i < n && strcmp(params[i], a->kw_names[k]))
            i++;
        if (i == n)
            jj__raise(c, JJ_E_TYPE, "%s() got an unexpected keyword argument '%s'", fname,
                      a->kw_names[k]);
        if (out[i].kind != JINJA__MISSING)
            jj__raise(c, JJ_E_TYPE, "%s() got multiple values for argument '%s'", fname, params[i]);
        out[i] = a->kw[k];
    }
}

/* ---- attributes and items ----------------------------------------------------------------- */

static const char *obj_desc(jinja_value v, char *buf, size_t n)
{
    if (v.kind == JINJA_NONE) return "None";
    snprintf(buf, n, "%s object", jj__type_name(v));
    return buf;
}

static jinja_value missing_attr(jinja_ctx *c, jinja_value obj, const char *name, size_t n)
{
    char d[64];
    return jj__undef(c, JJ_E_UNDEFINED, "'%s' has no attribute '%.*s'", obj_desc(obj, d, sizeof d),
                     (int)n, name);
}

static jinja_value missing_item(jinja_ctx *c, jinja_value obj, jinja_value key)
{
    char d[64];
    jj_buf b;
    jj__buf_init(&b, c);
    jj__repr(&b, key);
    return jj__undef(c, JJ_E_UNDEFINED, "%s has no element %.200s", obj_desc(obj, d, sizeof d),
                     b.s ? b.s : "");
}

jinja_value jj__py_attr(jinja_ctx *c, jinja_value obj, const char *name, size_t n)
{
    if (n >= 4 && name[0] == '_' && name[1] == '_' && name[n - 1] == '_' && name[n - 2] == '_')
        return jj__undef(c, JJ_E_SECURITY, "access to attribute '%.*s' of '%s' object is unsafe.",
                         (int)n, name, jj__type_name(obj));
    switch (obj.kind) {
    case JINJA_STR:
    case JINJA_LIST:
    case JINJA_DICT:
        return jj__method(c, obj, name, n);
    case JINJA_NAMESPACE: {
        jj_entry *e = jj__dict_find_str(obj, name, n);
        return e ? e->v : jj__missing;
    }
    case JINJA_LOOP:
        return jj__loop_attr(c, obj, name, n);
    default:
        return jj__missing;
    }
}

jinja_value jj__getattr(jinja_ctx *c, jinja_value obj, const char *name, size_t n)
{
    if (obj.kind == JINJA_UNDEFINED) jj__undef_fail(c, obj);
    jinja_value v = jj__py_attr(c, obj, name, n);
    if (v.kind != JINJA__MISSING) return v;
    if (obj.kind == JINJA_DICT) {
        jj_entry *e = jj__dict_find_str(obj, name, n);
        if (e) return e->v;
    }
    return missing_attr(c, obj, name, n);
}

static int64_t index_of(jinja_value k, int *ok)
{
    *ok = 1;
    if (k.kind == JINJA_INT) return k.i;
    if (k.kind == JINJA_BOOL) return k.b;
    *ok = 0;
    return 0;
}

jinja_value jj__getitem(jinja_ctx *c, jinja_value obj, jinja_value key)
{
    if (obj.kind == JINJA_UNDEFINED) jj__undef_fail(c, obj);
    int ok;
    if (obj.kind == JINJA_DICT) {
        if ((key.kind != JINJA_LIST || key.l->type == JJ_L_TUPLE) && key.kind != JINJA_DICT) {
            jj_entry *e = jj__dict_find(c, obj, key);
            if (e) return e->v;
        }
    } else if ((obj.kind == JINJA_LIST && obj.l->type != JJ_L_GEN && obj.l->type != JJ_L_ITEMS &&
                obj.l->type != JJ_L_KEYS && obj.l->type != JJ_L_VALUES) ||
               obj.kind == JINJA_STR) {
        int64_t i = index_of(key, &ok);
        if (ok) {
            int64_t len = jj__len(c, obj);
            if (i < 0) i += len;
            if (i >= 0 && i < len) {
                if (obj.kind == JINJA_LIST) return obj.l->v[i];
                size_t a = jj__cp_offset(obj.s, i), b = jj__cp_offset(obj.s, i + 1);
                jinja_value ch = jj__str_new(c, obj.s->s + a, b - a);
                ch.flags = obj.flags;
                return ch;
            }
        }
    }
    if (key.kind == JINJA_STR) {
        jinja_value v = jj__py_attr(c, obj, key.s->s, key.s->len);
        if (v.kind != JINJA__MISSING) return v;
        if (obj.kind == JINJA_DICT) return missing_attr(c, obj, key.s->s, key.s->len);
    }
    return missing_item(c, obj, key);
}

/* Python's slice.indices for a sequence of length len. Returns 0 when the bounds are not
 * integers. */
static int slice_bounds(jinja_ctx *c, jinja_value lo, jinja_value hi, jinja_value st, int64_t len,
                        int64_t *start, int64_t *stop, int64_t *step)
{
    int ok = 1;
    *step = 1;
    if (st.kind != JINJA_NONE) {
        *step = index_of(st, &ok);
        if (!ok) return 0;
        if (*step == 0) jj__raise(c, JJ_E_VALUE, "slice step cannot be zero");
    }
    int64_t lo_d = *step > 0 ? 0 : len - 1, hi_d = *step > 0 ? len : -1;
    int64_t lower = *step > 0 ? 0 : -1, upper = *step > 0 ? len : len - 1;
    *start = lo_d;
    *stop = hi_d;
    if (lo.kind != JINJA_NONE) {
        *start = index_of(lo, &ok);
        if (!ok) return 0;
        if (*start < 0) *start += len;
        if (*start < lower) *start = lower;
        if (*start > upper) *start = upper;
    }
    if (hi.kind != JINJA_NONE) {
        *stop = index_of(hi, &ok);
        if (!ok) return 0;
        if (*stop < 0) *stop += len;
        if (*stop < lower) *stop = lower;
        if (*stop > upper) *stop = upper;
    }
    return 1;
}

static jinja_value do_slice(jinja_ctx *c, jinja_value obj, jinja_value lo, jinja_value hi,
                            jinja_value st)
{
    /* Jinja slices with Python's own subscript (not the sandbox's getitem): what cannot be
     * sliced is a TypeError, not Undefined */
    if (obj.kind == JINJA_UNDEFINED) jj__undef_fail(c, obj);
    int is_list = obj.kind == JINJA_LIST && (jj__is_seq(obj) || obj.l->type == JJ_L_RANGE);
    if (obj.kind == JINJA_DICT) jj__raise(c, JJ_E_TYPE, "unhashable type: 'slice'");
    if (!is_list && obj.kind != JINJA_STR)
        jj__raise(c, JJ_E_TYPE, "'%s' object is not subscriptable", jj__type_name(obj));
    int64_t len = jj__len(c, obj), a, b, step;
    if (!slice_bounds(c, lo, hi, st, len, &a, &b, &step))
        jj__raise(c, JJ_E_TYPE,
                  "slice indices must be integers or None or have an __index__ method");
    if (is_list) {
        jinja_value out = jj__list_new(c, obj.l->type == JJ_L_TUPLE ? JJ_L_TUPLE : JJ_L_LIST, 0);
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
            jj__list_push(c, out, obj.l->v[i]);
        return out;
    }
    jinja_value r;
    if (step == 1) {
        size_t x = jj__cp_offset(obj.s, a), y = b > a ? jj__cp_offset(obj.s, b) : x;
        r = jj__str_new(c, obj.s->s + x, y - x);
    } else {
        jj_buf buf;
        jj__buf_init(&buf, c);
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
            size_t x = jj__cp_offset(obj.s, i), y = jj__cp_offset(obj.s, i + 1);
            jj__buf_add(&buf, obj.s->s + x, y - x);
        }
        r = jj__str_buf(c, &buf);
    }
    r.flags = obj.flags;
    return r;
}

/* ---- operators ---------------------------------------------------------------------------- */

static int is_num(jinja_value v)
{
    return v.kind == JINJA_INT || v.kind == JINJA_FLOAT || v.kind == JINJA_BOOL;
}

static int64_t as_int(jinja_value v)
{
    return v.kind == JINJA_INT ? v.i : v.b;
}

static double as_f(jinja_value v)
{
    return v.kind == JINJA_FLOAT ? v.f : (double)as_int(v);
}

static const char *op_text(int op)
{
    static const char *const t[] = {"+", "-", "*", "/", "//", "%", "**"};
    return op >= 0 && op <= JJ_OP_POW ? t[op] : "?";
}

static _Noreturn void bad_operands(jinja_ctx *c, int op, jinja_value a, jinja_value b)
{
    if (op == JJ_OP_ADD && (a.kind == JINJA_STR || jj__is_seq(a)))
        jj__raise(c, JJ_E_TYPE, "can only concatenate %s (not \"%s\") to %s",
                  a.kind == JINJA_STR ? "str" : jj__type_name(a), jj__type_name(b),
                  a.kind == JINJA_STR ? "str" : jj__type_name(a));
    jj__raise(c, JJ_E_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
              jj__type_name(a), jj__type_name(b));
}

static jinja_value str_concat(jinja_ctx *c, jinja_value a, jinja_value b)
{
    int markup = (a.flags | b.flags) & JINJA_F_MARKUP;
    if (markup) {
        a = jj__escape(c, a);
        b = jj__escape(c, b);
    }
    size_t n = a.s->len + b.s->len;
    if (n > c->lim.max_output_bytes)
        jj__raise(c, JJ_E_LIMIT, "a string exceeds %zu bytes", c->lim.max_output_bytes);
    struct jinja_str *s = jj__alloc(c, sizeof *s + n + 1);
    memcpy(s->s, a.s->s, a.s->len);
    memcpy(s->s + a.s->len, b.s->s, b.s->len);
    s->s[n] = 0;
    s->len = n;
    s->n_cp = a.s->n_cp + b.s->n_cp;
    return (jinja_value){.kind = JINJA_STR, .flags = (uint8_t)markup, .s = s};
}

static jinja_value repeat(jinja_ctx *c, jinja_value seq, int64_t k)
{
    if (k < 0) k = 0;
    if (seq.kind == JINJA_STR) {
        if (seq.s->len && (uint64_t)k > c->lim.max_output_bytes / seq.s->len)
            jj__raise(c, JJ_E_LIMIT, "string repetition too large");
        jj_buf b;
        jj__buf_init(&b, c);
        for (int64_t i = 0; i < k; i++)
            jj__buf_add(&b, seq.s->s, seq.s->len);
        jinja_value r = jj__str_buf(c, &b);
        r.flags = seq.flags;
        return r;
    }
    if (seq.l->n && (uint64_t)k > c->lim.max_steps / seq.l->n)
        jj__raise(c, JJ_E_LIMIT, "list repetition too large");
    jinja_value r = jj__list_new(c, seq.l->type, 0);
    for (int64_t i = 0; i < k; i++)
        for (uint32_t j = 0; j < seq.l->n; j++)
            jj__list_push(c, r, seq.l->v[j]);
    return r;
}

static jinja_value arith_int(jinja_ctx *c, int op, int64_t x, int64_t y)
{
    int64_t r = 0;
    switch (op) {
    case JJ_OP_ADD:
        if (__builtin_add_overflow(x, y, &r)) break;
        return jinja_int(r);
    case JJ_OP_SUB:
        if (__builtin_sub_overflow(x, y, &r)) break;
        return jinja_int(r);
    case JJ_OP_MUL:
        if (__builtin_mul_overflow(x, y, &r)) break;
        return jinja_int(r);
    case JJ_OP_DIV:
        if (!y) jj__raise(c, JJ_E_ZERODIV, "division by zero");
        return jinja_float((double)x / (double)y);
    case JJ_OP_FLOORDIV:
    case JJ_OP_MOD: {
        if (!y) jj__raise(c, JJ_E_ZERODIV, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) break;
        int64_t q = x / y, m = x % y;
        if (m && ((m < 0) != (y < 0))) {
            q--;
            m += y;
        }
        return jinja_int(op == JJ_OP_MOD ? m : q);
    }
    case JJ_OP_POW: {
        if (y < 0) return jinja_float(pow((double)x, (double)y));
        int64_t acc = 1, base = x;
        for (int64_t e = y; e; e >>= 1) {
            if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) goto overflow;
            if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
        }
        return jinja_int(acc);
    }
    }
overflow:
    jj__raise(c, JJ_E_OVERFLOW, "integer result of %s too large", op_text(op));
}

static jinja_value arith_float(jinja_ctx *c, int op, double x, double y)
{
    switch (op) {
    case JJ_OP_ADD:
        return jinja_float(x + y);
    case JJ_OP_SUB:
        return jinja_float(x - y);
    case JJ_OP_MUL:
        return jinja_float(x * y);
    case JJ_OP_DIV:
        if (y == 0) jj__raise(c, JJ_E_ZERODIV, "float division by zero");
        return jinja_float(x / y);
    case JJ_OP_FLOORDIV:
        if (y == 0) jj__raise(c, JJ_E_ZERODIV, "float floor division by zero");
        return jinja_float(floor(x / y));
    case JJ_OP_MOD: {
        if (y == 0) jj__raise(c, JJ_E_ZERODIV, "float modulo");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return jinja_float(m);
    }
    default:
        return jinja_float(pow(x, y));
    }
}

jinja_value jj__binop(jinja_ctx *c, int op, jinja_value a, jinja_value b)
{
    if (a.kind == JINJA_UNDEFINED) jj__undef_fail(c, a);
    if (b.kind == JINJA_UNDEFINED) jj__undef_fail(c, b);
    if (is_num(a) && is_num(b)) {
        if (a.kind != JINJA_FLOAT && b.kind != JINJA_FLOAT)
            return arith_int(c, op, as_int(a), as_int(b));
        return arith_float(c, op, as_f(a), as_f(b));
    }
    switch (op) {
    case JJ_OP_ADD:
        if (a.kind == JINJA_STR && b.kind == JINJA_STR) return str_concat(c, a, b);
        if (jj__is_seq(a) && jj__is_seq(b) && a.l->type == b.l->type) {
            jinja_value r = jj__list_of(c, a.l->type, a.l->v, a.l->n);
            for (uint32_t i = 0; i < b.l->n; i++)
                jj__list_push(c, r, b.l->v[i]);
            return r;
        }
        break;
    case JJ_OP_MUL:
        if ((a.kind == JINJA_STR || jj__is_seq(a)) && (b.kind == JINJA_INT || b.kind == JINJA_BOOL))
            return repeat(c, a, as_int(b));
        if ((b.kind == JINJA_STR || jj__is_seq(b)) && (a.kind == JINJA_INT || a.kind == JINJA_BOOL))
            return repeat(c, b, as_int(a));
        break;
    case JJ_OP_MOD:
        if (a.kind == JINJA_STR) return jj__percent_format(c, a, b);
        break;
    default:
        break;
    }
    bad_operands(c, op, a, b);
}

static int compare_op(jinja_ctx *c, int op, jinja_value a, jinja_value b)
{
    switch (op) {
    case JJ_OP_EQ:
        return jj__equal(a, b);
    case JJ_OP_NE:
        return !jj__equal(a, b);
    case JJ_OP_LT:
        return jj__compare(c, a, b) < 0;
    case JJ_OP_LE:
        return jj__compare(c, a, b) <= 0;
    case JJ_OP_GT:
        return jj__compare(c, a, b) > 0;
    case JJ_OP_GE:
        return jj__compare(c, a, b) >= 0;
    case JJ_OP_IN:
        return jj__contains(c, b, a);
    default:
        return !jj__contains(c, b, a);
    }
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

jinja_value jj__unsupported(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    (void)self;
    (void)a;
    jj__raise(c, JJ_E_UNSUPPORTED, "this function is not supported in chat templates");
}

jinja_value jj__call(jinja_ctx *c, jinja_value fn, const jj_callargs *a)
{
    jj__step(c);
    if (fn.kind == JINJA_UNDEFINED) jj__undef_fail(c, fn);
    if (fn.kind == JINJA_CALLABLE) {
        if (fn.fn->type == JJ_FN_MACRO) return jj__call_macro(c, fn.fn, a);
        if (fn.fn->fn == jj__unsupported) {
            if (fn.fn->type == JJ_FN_METHOD)
                jj__raise(c, JJ_E_UNSUPPORTED, "the %s method '%s' is not supported in chat templates",
                          jj__type_name(fn.fn->self), fn.fn->name);
            jj__raise(c, JJ_E_UNSUPPORTED, "the global '%s' is not supported in chat templates",
                      fn.fn->name);
        }
        return fn.fn->fn(c, fn.fn->self, a);
    }
    if (fn.kind == JINJA_LOOP) return jj__loop_call(c, fn, a);
    jj__raise(c, JJ_E_TYPE, "'%s' object is not callable", jj__type_name(fn));
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
        if (!compare_op(c, n->ops[i], left, right)) return jinja_bool(0);
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
        return do_slice(c, obj, lo, hi, st);
    }
    jinja_value key = jj__eval(c, s, n->b);
    c->line = n->line;
    return jj__getitem(c, obj, key);
}

static jinja_value eval_unary(jinja_ctx *c, jinja_value v, int neg)
{
    if (v.kind == JINJA_UNDEFINED) jj__undef_fail(c, v);
    if (v.kind == JINJA_FLOAT) return jinja_float(neg ? -v.f : v.f);
    if (v.kind == JINJA_INT || v.kind == JINJA_BOOL) {
        int64_t i = as_int(v);
        if (neg && i == INT64_MIN) jj__raise(c, JJ_E_OVERFLOW, "integer too large");
        return jinja_int(neg ? -i : i);
    }
    jj__raise(c, JJ_E_TYPE, "bad operand type for unary %c: '%s'", neg ? '-' : '+',
              jj__type_name(v));
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
        return eval_unary(c, v, n->kind == N_NEG);
    }
    case N_BINOP: {
        jinja_value a = jj__eval(c, s, n->a), b = jj__eval(c, s, n->b);
        c->line = n->line;
        return jj__binop(c, n->op, a, b);
    }
    case N_CONCAT: {
        jj_buf b;
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
