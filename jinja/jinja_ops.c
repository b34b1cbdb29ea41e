/*
 * jinja_ops.c — what an expression does to values, shared by the evaluator (jinja_expr.c) and
 * the builtins: attributes (`a.b`: the Python attribute first, then the key), items (`a[b]`:
 * the key first, then the attribute), slices, and the operators, following Python (Markup
 * escapes the other operand of + and %). Names the sandbox forbids (dunders, mutating methods)
 * give an Undefined that raises SecurityError when used.
 *
 * A cycle of three files, jinja_ops.c → jinja_methods.c → jinja_format.c → jinja_ops.c, is
 * Python's own: the attributes of a str, list or dict are its methods (jinja_methods.c), one of
 * them is str.format (jinja_format.c), and str.format resolves its fields ({0.name}, {0[key]})
 * by this file's attribute and item access; `%` on a string is printf-style formatting
 * (jinja_format.c). No call chain runs round it (str.format looks methods up, it never calls
 * one), and none of the three calls the evaluator or the statements.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

/* ---- attributes and items ----------------------------------------------------------------- */

static const char *obj_desc(jinja_value v, char *dst, size_t n)
{
    if (v.kind == JINJA_NONE) return "None";
    snprintf(dst, n, "%s object", jj__type_name(v));
    return dst;
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
    buf b;
    jj__buf_init(&b, c);
    jj__repr(&b, key);
    return jj__undef(c, JJ_E_UNDEFINED, "%s has no element %.200s", obj_desc(obj, d, sizeof d),
                     b.s ? b.s : "");
}

static jinja_value loop_cycle(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    if (!a->n_pos) jj__raise(c, JJ_E_TYPE, "no items for cycling given");
    return a->pos[self.loop->index0 % a->n_pos];
}

static jinja_value loop_changed(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    jinja_value args = jj__list_of(c, JJ_L_TUPLE, a->pos, a->n_pos);
    struct jinja_loop *l = self.loop;
    if (l->changed_last.kind != JINJA__MISSING && jj__equal(l->changed_last, args))
        return jinja_bool(0);
    l->changed_last = args;
    return jinja_bool(1);
}

/* An attribute of a loop object (loop.index, loop.cycle, ...), or MISSING. */
static jinja_value loop_attr(jinja_ctx *c, jinja_value lv, const char *name, size_t n)
{
    struct jinja_loop *l = lv.loop;
    int64_t len = l->items.l->n, i = l->index0;
#define IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))
    if (IS("index")) return jinja_int(i + 1);
    if (IS("index0")) return jinja_int(i);
    if (IS("revindex")) return jinja_int(len - i);
    if (IS("revindex0")) return jinja_int(len - i - 1);
    if (IS("first")) return jinja_bool(i == 0);
    if (IS("last")) return jinja_bool(i == len - 1);
    if (IS("length")) return jinja_int(len);
    if (IS("depth")) return jinja_int(l->depth0 + 1);
    if (IS("depth0")) return jinja_int(l->depth0);
    if (IS("previtem"))
        return i > 0 ? l->items.l->v[i - 1]
                     : jj__undef(c, JJ_E_UNDEFINED, "there is no previous item");
    if (IS("nextitem"))
        return i + 1 < len ? l->items.l->v[i + 1]
                           : jj__undef(c, JJ_E_UNDEFINED, "there is no next item");
    if (IS("cycle")) return jj__func_new(c, JJ_FN_METHOD, "cycle", loop_cycle, lv);
    if (IS("changed")) return jj__func_new(c, JJ_FN_METHOD, "changed", loop_changed, lv);
#undef IS
    return jj__missing;
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
        return loop_attr(c, obj, name, n);
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

jinja_value jj__slice(jinja_ctx *c, jinja_value obj, jinja_value lo, jinja_value hi,
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
        buf text;
        jj__buf_init(&text, c);
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
            size_t x = jj__cp_offset(obj.s, i), y = jj__cp_offset(obj.s, i + 1);
            buf_put(&text, obj.s->s + x, y - x);
        }
        r = jj__str_buf(c, &text);
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
        buf b;
        jj__buf_init(&b, c);
        for (int64_t i = 0; i < k; i++)
            buf_put(&b, seq.s->s, seq.s->len);
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

int jj__compare_op(jinja_ctx *c, int op, jinja_value a, jinja_value b)
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

jinja_value jj__unary(jinja_ctx *c, jinja_value v, int neg)
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
