/*
 * jinja_filters.c — Jinja's builtin filters (the tests are in jinja_tests.c, the text-layout
 * filters in jinja_filters_text.c), as the sandboxed
 * environment of transformers has them (its own tojson instead of Jinja's).
 *
 * Each filter takes the value and its call arguments bound by name like Jinja's Python
 * signature. What Jinja returns as a generator (map, select, reject, selectattr, rejectattr,
 * unique, items, reverse of a list) is a JJ_L_GEN list here: iterable once, with no len and no
 * JSON form, so `x | map(...) | tojson` fails as it does in Python. Filters Jinja has but chat
 * templates never need (random, urlize, wordwrap, xmlattr, filesizeformat, groupby) exist so
 * that templates compile, and raise a clear error if reached. Called by jinja_expr.c (| and is)
 * and by themselves (map / select call other filters and tests by name).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

typedef jinja_value (*filter_fn)(jinja_ctx *c, jinja_value v, const jj_callargs *a);

/* jinja_filters_text.c */
jinja_value jj__f_title(jinja_ctx *c, jinja_value v, const jj_callargs *a);
jinja_value jj__f_center(jinja_ctx *c, jinja_value v, const jj_callargs *a);
jinja_value jj__f_indent(jinja_ctx *c, jinja_value v, const jj_callargs *a);
jinja_value jj__f_striptags(jinja_ctx *c, jinja_value v, const jj_callargs *a);
jinja_value jj__f_truncate(jinja_ctx *c, jinja_value v, const jj_callargs *a);
jinja_value jj__f_urlencode(jinja_ctx *c, jinja_value v, const jj_callargs *a);
jinja_value jj__f_wordcount(jinja_ctx *c, jinja_value v, const jj_callargs *a);

#define ARGS(name, ...)                                                                            \
    static const char *const params_[] = {__VA_ARGS__};                                            \
    jinja_value arg[sizeof params_ / sizeof params_[0]];                                           \
    jj__bind(c, name, params_, (int)(sizeof params_ / sizeof params_[0]), a, arg)

static int given(jinja_value v)
{
    return v.kind != JINJA__MISSING;
}

static int flag(jinja_value v, int dflt)
{
    return given(v) ? jj__truthy(v) : dflt;
}

/* ---- attribute paths ("a.b.0") and sorting ------------------------------------------------ */

static jinja_value attr_path(jinja_ctx *c, jinja_value item, jinja_value path)
{
    if (path.kind == JINJA_INT) return jj__getitem(c, item, path);
    if (path.kind != JINJA_STR) return jj__getitem(c, item, path);
    const char *p = path.s->s, *e = p + path.s->len;
    while (p <= e) {
        const char *q = memchr(p, '.', (size_t)(e - p));
        if (!q) q = e;
        size_t n = (size_t)(q - p), k = 0;
        while (k < n && p[k] >= '0' && p[k] <= '9')
            k++;
        jinja_value key = n && k == n ? jinja_int(strtoll(p, NULL, 10)) : jj__str_new(c, p, n);
        item = jj__getitem(c, item, key);
        p = q + 1;
    }
    return item;
}

static jinja_value ignore_case(jinja_ctx *c, jinja_value v, int case_sensitive)
{
    return !case_sensitive && v.kind == JINJA_STR ? jj__str_case(c, v, 0) : v;
}

/* The sort key of item: attribute (comma-separated: a tuple of them) and case folding. */
static jinja_value sort_key(jinja_ctx *c, jinja_value item, jinja_value attr, int cs, int multi)
{
    if (!given(attr) || attr.kind == JINJA_NONE) return ignore_case(c, item, cs);
    if (!multi || attr.kind != JINJA_STR || !memchr(attr.s->s, ',', attr.s->len))
        return ignore_case(c, attr_path(c, item, attr), cs);
    jinja_value t = jj__list_new(c, JJ_L_LIST, 0);
    const char *p = attr.s->s, *e = p + attr.s->len;
    while (p <= e) {
        const char *q = memchr(p, ',', (size_t)(e - p));
        if (!q) q = e;
        jj__list_push(c, t,
                      ignore_case(c, attr_path(c, item, jj__str_new(c, p, (size_t)(q - p))), cs));
        p = q + 1;
    }
    return t;
}

/* Stable merge sort of v[0..n) by keys k (same order), Python's sorted(reverse=…). */
static void merge_sort(jinja_ctx *c, jinja_value *v, jinja_value *k, uint32_t n, int reverse,
                       jinja_value *tv, jinja_value *tk)
{
    if (n < 2) return;
    uint32_t m = n / 2;
    merge_sort(c, v, k, m, reverse, tv, tk);
    merge_sort(c, v + m, k + m, n - m, reverse, tv, tk);
    uint32_t i = 0, j = m, o = 0;
    while (i < m && j < n) {
        int take_right = reverse ? jj__compare(c, k[i], k[j]) < 0 : jj__compare(c, k[j], k[i]) < 0;
        if (take_right)
            tv[o] = v[j], tk[o++] = k[j++];
        else
            tv[o] = v[i], tk[o++] = k[i++];
    }
    while (i < m)
        tv[o] = v[i], tk[o++] = k[i++];
    while (j < n)
        tv[o] = v[j], tk[o++] = k[j++];
    memcpy(v, tv, sizeof *v * n);
    memcpy(k, tk, sizeof *k * n);
}

static jinja_value sorted(jinja_ctx *c, jinja_value items, jinja_value *keys, int reverse)
{
    uint32_t n = items.l->n;
    jinja_value out = jj__list_of(c, JJ_L_LIST, items.l->v, n);
    jinja_value *tv = jj__alloc(c, sizeof *tv * (n + 1)), *tk = jj__alloc(c, sizeof *tk * (n + 1));
    merge_sort(c, out.l->v, keys, n, reverse, tv, tk);
    return out;
}

/* ---- filters ------------------------------------------------------------------------------ */

static jinja_value f_abs(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "abs", NULL, 0, a, NULL);
    if (v.kind == JINJA_FLOAT) return jinja_float(fabs(v.f));
    if (v.kind == JINJA_INT || v.kind == JINJA_BOOL) {
        int64_t i = v.kind == JINJA_INT ? v.i : v.b;
        return jinja_int(i < 0 ? -i : i);
    }
    jj__raise(c, JJ_E_TYPE, "bad operand type for abs(): '%s'", jj__type_name(v));
}

static jinja_value f_attr(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("attr", "name");
    if (arg[0].kind != JINJA_STR) jj__raise(c, JJ_E_TYPE, "attribute name must be string");
    jinja_value r = jj__py_attr(c, v, arg[0].s->s, arg[0].s->len);
    if (r.kind != JINJA__MISSING) return r;
    return jj__undef(c, JJ_E_UNDEFINED, "'%s object' has no attribute '%s'", jj__type_name(v),
                     arg[0].s->s);
}

static jinja_value f_batch(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("batch", "linecount", "fill_with");
    int64_t n = jj__int_arg(c, arg[0], "batch");
    if (n <= 0) jj__raise(c, JJ_E_VALUE, "batch size must be positive");
    jinja_value l = jj__iter_list(c, v), out = jj__list_new(c, JJ_L_GEN, 0),
                cur = jj__list_new(c, JJ_L_LIST, 0);
    for (uint32_t i = 0; i < l.l->n; i++) {
        if (cur.l->n == n) {
            jj__list_push(c, out, cur);
            cur = jj__list_new(c, JJ_L_LIST, 0);
        }
        jj__list_push(c, cur, l.l->v[i]);
    }
    if (cur.l->n) {
        if (given(arg[1]) && arg[1].kind != JINJA_NONE)
            while (cur.l->n < n)
                jj__list_push(c, cur, arg[1]);
        jj__list_push(c, out, cur);
    }
    return out;
}

static jinja_value str_filter(jinja_ctx *c, jinja_value v, const jj_callargs *a, const char *nm,
                              int mode)
{
    jj__bind(c, nm, NULL, 0, a, NULL);
    return jj__str_case(c, jj__soft_str(c, v), mode);
}

static jinja_value f_capitalize(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return str_filter(c, v, a, "capitalize", 2);
}

static jinja_value f_lower(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return str_filter(c, v, a, "lower", 0);
}

static jinja_value f_upper(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return str_filter(c, v, a, "upper", 1);
}

static jinja_value f_length(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "length", NULL, 0, a, NULL);
    return jinja_int(jj__len(c, v));
}

static jinja_value f_default(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("default", "default_value", "boolean");
    if (v.kind == JINJA_UNDEFINED || (flag(arg[1], 0) && !jj__truthy(v)))
        return given(arg[0]) ? arg[0] : jj__str_new(c, "", 0);
    return v;
}

static jinja_value f_dictsort(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("dictsort", "case_sensitive", "by", "reverse");
    if (v.kind != JINJA_DICT) {
        if (v.kind == JINJA_UNDEFINED) jj__undef_fail(c, v);
        jj__raise(c, JJ_E_ATTR, "'%s' object has no attribute 'items'", jj__type_name(v));
    }
    int pos = 0;
    if (given(arg[1])) {
        if (arg[1].kind == JINJA_STR && !strcmp(arg[1].s->s, "value"))
            pos = 1;
        else if (arg[1].kind != JINJA_STR || strcmp(arg[1].s->s, "key"))
            jj__raise(c, JJ_E_FILTERARG, "You can only sort by either \"key\" or \"value\"");
    }
    uint32_t n = v.d->n;
    jinja_value items = jj__list_new(c, JJ_L_LIST, n);
    jinja_value *keys = jj__alloc(c, sizeof *keys * (n + 1));
    for (uint32_t i = 0; i < n; i++) {
        jinja_value t = jj__list_new(c, JJ_L_TUPLE, 2);
        t.l->v[0] = v.d->e[i].k;
        t.l->v[1] = v.d->e[i].v;
        t.l->n = 2;
        items.l->v[i] = t;
        keys[i] = ignore_case(c, pos ? v.d->e[i].v : v.d->e[i].k, flag(arg[0], 0));
    }
    items.l->n = n;
    return sorted(c, items, keys, flag(arg[2], 0));
}

static jinja_value f_escape(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "escape", NULL, 0, a, NULL);
    return jj__escape(c, v);
}

static jinja_value f_forceescape(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "forceescape", NULL, 0, a, NULL);
    return jj__escape(c, jj__plain_str(c, v));
}

static jinja_value f_first(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "first", NULL, 0, a, NULL);
    jinja_value l = jj__iter_list(c, v);
    return l.l->n ? l.l->v[0] : jj__undef(c, JJ_E_UNDEFINED, "No first item, sequence was empty.");
}

static jinja_value f_last(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "last", NULL, 0, a, NULL);
    if (v.kind == JINJA_LIST && v.l->type == JJ_L_GEN)
        jj__raise(c, JJ_E_TYPE, "'generator' object is not reversible");
    jinja_value l = jj__iter_list(c, v);
    return l.l->n ? l.l->v[l.l->n - 1]
                  : jj__undef(c, JJ_E_UNDEFINED, "No last item, sequence was empty.");
}

/* Python's float(str): surrounding whitespace, a sign, digits with '_', inf, nan. */
static int parse_float(jinja_value s, double *out)
{
    char num[128];
    size_t o = 0;
    const char *p = s.s->s, *e = p + s.s->len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13)))
        p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13)))
        e--;
    if (p == e || (size_t)(e - p) >= sizeof num) return 0;
    for (; p < e; p++)
        if (*p != '_') num[o++] = *p;
    num[o] = 0;
    const char *w = num + (num[0] == '+' || num[0] == '-');
    if (!strcasecmp(w, "inf") || !strcasecmp(w, "infinity") || !strcasecmp(w, "nan")) {
        *out = strtod(num, NULL);
        return 1;
    }
    if ((w[0] | 0x20) == 'x' || ((w[0] == '0') && (w[1] | 0x20) == 'x')) return 0;
    char *end;
    *out = strtod(num, &end);
    return *end == 0;
}

static jinja_value f_float(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("float", "default");
    jinja_value dflt = given(arg[0]) ? arg[0] : jinja_float(0);
    double d;
    switch (v.kind) {
    case JINJA_FLOAT:
        return v;
    case JINJA_INT:
        return jinja_float((double)v.i);
    case JINJA_BOOL:
        return jinja_float(v.b);
    case JINJA_STR:
        return parse_float(v, &d) ? jinja_float(d) : dflt;
    case JINJA_UNDEFINED:
        jj__undef_fail(c, v);
    default:
        return dflt;
    }
}

/* Python's int(str, base). */
static int parse_int(jinja_value s, int base, int64_t *out)
{
    const char *p = s.s->s, *e = p + s.s->len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13)))
        p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13)))
        e--;
    int neg = 0;
    if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (p + 1 < e && *p == '0') {
        char x = (char)(p[1] | 0x20);
        int pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            p += 2;
            if (p < e && *p == '_') p++;
        }
    }
    if (base == 0) base = 10;
    if (p == e) return 0;
    uint64_t v = 0;
    for (; p < e; p++) {
        if (*p == '_' && p + 1 < e && p[1] != '_') continue;
        int d = *p >= '0' && *p <= '9'                     ? *p - '0'
                : (*p | 0x20) >= 'a' && (*p | 0x20) <= 'z' ? (*p | 0x20) - 'a' + 10
                                                           : 99;
        if (d >= base) return 0;
        if (v > (uint64_t)INT64_MAX / (uint64_t)base) return 0;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (v > (uint64_t)INT64_MAX) return 0;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

static jinja_value f_int(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("int", "default", "base");
    jinja_value dflt = given(arg[0]) ? arg[0] : jinja_int(0);
    int base = given(arg[1]) ? (int)jj__int_arg(c, arg[1], "int") : 10;
    int64_t i;
    double d;
    switch (v.kind) {
    case JINJA_INT:
        return v;
    case JINJA_BOOL:
        return jinja_int(v.b);
    case JINJA_FLOAT:
        if (!isfinite(v.f) || fabs(v.f) >= 9.2e18) return dflt;
        return jinja_int((int64_t)v.f);
    case JINJA_STR:
        if (parse_int(v, base, &i)) return jinja_int(i);
        if (parse_float(v, &d) && isfinite(d) && fabs(d) < 9.2e18) return jinja_int((int64_t)d);
        return dflt;
    case JINJA_UNDEFINED:
        jj__undef_fail(c, v);
    default:
        return dflt;
    }
}

static jinja_value f_format(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    if (a->n_pos && a->n_kw)
        jj__raise(c, JJ_E_FILTERARG,
                  "can't handle positional and keyword arguments at the same time");
    jinja_value args;
    if (a->n_kw) {
        args = jj__dict_new(c, a->n_kw);
        for (uint32_t i = 0; i < a->n_kw; i++)
            jj__dict_set(c, args, jj__str_cstr(c, a->kw_names[i]), a->kw[i]);
    } else {
        args = jj__list_of(c, JJ_L_TUPLE, a->pos, a->n_pos);
    }
    return jj__percent_format(c, jj__soft_str(c, v), args);
}

static jinja_value f_items(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "items", NULL, 0, a, NULL);
    if (v.kind == JINJA_UNDEFINED) return jj__list_new(c, JJ_L_GEN, 0);
    if (v.kind != JINJA_DICT) jj__raise(c, JJ_E_TYPE, "Can only get item pairs from a mapping.");
    jinja_value g = jj__list_new(c, JJ_L_GEN, v.d->n);
    for (uint32_t i = 0; i < v.d->n; i++) {
        jinja_value t = jj__list_new(c, JJ_L_TUPLE, 2);
        t.l->v[0] = v.d->e[i].k;
        t.l->v[1] = v.d->e[i].v;
        t.l->n = 2;
        g.l->v[i] = t;
    }
    g.l->n = v.d->n;
    return g;
}

static jinja_value f_join(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("join", "d", "attribute");
    jinja_value l = jj__iter_list(c, v);
    buf b;
    jj__buf_init(&b, c);
    for (uint32_t i = 0; i < l.l->n; i++) {
        if (i && given(arg[0])) jj__str(&b, arg[0]);
        jinja_value it = l.l->v[i];
        if (given(arg[1]) && arg[1].kind != JINJA_NONE) it = attr_path(c, it, arg[1]);
        jj__str(&b, it);
    }
    return jj__str_buf(c, &b);
}

static jinja_value f_list(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "list", NULL, 0, a, NULL);
    jinja_value l = jj__iter_list(c, v);
    return jj__list_of(c, JJ_L_LIST, l.l->v, l.l->n);
}

static jinja_value f_map(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jinja_value out = jj__list_new(c, JJ_L_GEN, 0);
    if (!jj__truthy(v)) return out;
    jinja_value attr = jj__missing, dflt = jinja_none();
    int fidx = -1;
    jj_callargs rest = *a;
    if (!a->n_pos) {
        for (uint32_t k = 0; k < a->n_kw; k++) {
            if (!strcmp(a->kw_names[k], "attribute"))
                attr = a->kw[k];
            else if (!strcmp(a->kw_names[k], "default"))
                dflt = a->kw[k];
            else
                jj__raise(c, JJ_E_FILTERARG, "Unexpected keyword argument '%s'", a->kw_names[k]);
        }
        if (!given(attr)) jj__raise(c, JJ_E_FILTERARG, "map requires a filter argument");
    } else {
        if (a->pos[0].kind != JINJA_STR) jj__raise(c, JJ_E_RUNTIME, "map requires a filter name");
        fidx = jj__filter_index(a->pos[0].s->s);
        if (fidx < 0) jj__raise(c, JJ_E_RUNTIME, "No filter named '%s'.", a->pos[0].s->s);
        rest.pos = a->pos + 1;
        rest.n_pos = a->n_pos - 1;
    }
    jinja_value l = jj__iter_list(c, v);
    for (uint32_t i = 0; i < l.l->n; i++) {
        jj__step(c);
        jinja_value it = l.l->v[i], r;
        if (fidx >= 0)
            r = jj__apply_filter(c, fidx, it, &rest);
        else {
            r = attr_path(c, it, attr);
            if (r.kind == JINJA_UNDEFINED && dflt.kind != JINJA_NONE) r = dflt;
        }
        jj__list_push(c, out, r);
    }
    return out;
}

/* select / reject / selectattr / rejectattr */
static jinja_value select_any(jinja_ctx *c, jinja_value v, const jj_callargs *a, int reject,
                              int by_attr)
{
    jinja_value out = jj__list_new(c, JJ_L_GEN, 0);
    if (!jj__truthy(v)) return out;
    uint32_t off = 0;
    jinja_value attr = jj__missing;
    if (by_attr) {
        if (!a->n_pos) jj__raise(c, JJ_E_FILTERARG, "Missing parameter for attribute name");
        attr = a->pos[0];
        off = 1;
    }
    int tidx = -1;
    jj_callargs rest = *a;
    if (a->n_pos > off) {
        if (a->pos[off].kind != JINJA_STR)
            jj__raise(c, JJ_E_RUNTIME, "the test name must be a string");
        tidx = jj__test_index(a->pos[off].s->s);
        if (tidx < 0) jj__raise(c, JJ_E_RUNTIME, "No test named '%s'.", a->pos[off].s->s);
        rest.pos = a->pos + off + 1;
        rest.n_pos = a->n_pos - off - 1;
    }
    jinja_value l = jj__iter_list(c, v);
    for (uint32_t i = 0; i < l.l->n; i++) {
        jj__step(c);
        jinja_value it = by_attr ? attr_path(c, l.l->v[i], attr) : l.l->v[i];
        int ok = tidx >= 0 ? jj__apply_test(c, tidx, it, &rest) : jj__truthy(it);
        if (ok != reject) jj__list_push(c, out, l.l->v[i]);
    }
    return out;
}

static jinja_value f_select(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return select_any(c, v, a, 0, 0);
}

static jinja_value f_reject(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return select_any(c, v, a, 1, 0);
}

static jinja_value f_selectattr(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return select_any(c, v, a, 0, 1);
}

static jinja_value f_rejectattr(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return select_any(c, v, a, 1, 1);
}

static jinja_value min_max(jinja_ctx *c, jinja_value v, const jj_callargs *a, int want_max)
{
    ARGS(want_max ? "max" : "min", "case_sensitive", "attribute");
    jinja_value l = jj__iter_list(c, v);
    if (!l.l->n) return jj__undef(c, JJ_E_UNDEFINED, "No aggregated item, sequence was empty.");
    int cs = flag(arg[0], 0);
    uint32_t best = 0;
    jinja_value bk = sort_key(c, l.l->v[0], arg[1], cs, 0);
    for (uint32_t i = 1; i < l.l->n; i++) {
        jinja_value k = sort_key(c, l.l->v[i], arg[1], cs, 0);
        if (want_max ? jj__compare(c, bk, k) < 0 : jj__compare(c, k, bk) < 0) {
            best = i;
            bk = k;
        }
    }
    return l.l->v[best];
}

static jinja_value f_min(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return min_max(c, v, a, 0);
}

static jinja_value f_max(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return min_max(c, v, a, 1);
}

static jinja_value f_pprint(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "pprint", NULL, 0, a, NULL);
    buf b;
    jj__buf_init(&b, c);
    jj__repr(&b, v);
    return jj__str_buf(c, &b);
}

static jinja_value f_replace(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("replace", "old", "new", "count");
    int64_t n = given(arg[2]) && arg[2].kind != JINJA_NONE ? jj__int_arg(c, arg[2], "replace") : -1;
    if (!given(arg[0]) || !given(arg[1]))
        jj__raise(c, JJ_E_TYPE, "do_replace() missing required arguments 'old' and 'new'");
    return jj__str_replace(c, jj__plain_str(c, v), jj__plain_str(c, arg[0]),
                           jj__plain_str(c, arg[1]), n);
}

static jinja_value f_reverse(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "reverse", NULL, 0, a, NULL);
    if (v.kind == JINJA_STR) {
        jinja_value l = jj__iter_list(c, v);
        buf b;
        jj__buf_init(&b, c);
        for (uint32_t i = l.l->n; i-- > 0;)
            buf_put(&b, l.l->v[i].s->s, l.l->v[i].s->len);
        jinja_value r = jj__str_buf(c, &b);
        r.flags = v.flags;
        return r;
    }
    if (v.kind != JINJA_LIST && v.kind != JINJA_DICT && v.kind != JINJA_UNDEFINED)
        jj__raise(c, JJ_E_FILTERARG, "argument must be iterable");
    int is_gen = v.kind == JINJA_LIST && v.l->type == JJ_L_GEN;
    if (is_gen && v.l->lazy) { /* list(generator) failing is Jinja's "argument must be iterable" */
        jj_catch k = {0}, *outer = c->catch;
        k.err = outer->err;
        c->catch = &k;
        if (setjmp(k.jb)) {
            c->catch = outer;
            jj__raise(c, JJ_E_FILTERARG, "argument must be iterable");
        }
        jj__force_gen(c, v);
        c->catch = outer;
    }
    jinja_value l = jj__iter_list(c, v),
                out = jj__list_new(c, is_gen ? JJ_L_LIST : JJ_L_GEN, l.l->n);
    for (uint32_t i = 0; i < l.l->n; i++)
        out.l->v[i] = l.l->v[l.l->n - 1 - i];
    out.l->n = l.l->n;
    return out;
}

static jinja_value f_round(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("round", "precision", "method");
    int64_t p = given(arg[0]) ? jj__int_arg(c, arg[0], "round") : 0;
    const char *m = "common";
    if (given(arg[1])) {
        if (arg[1].kind != JINJA_STR ||
            (strcmp(arg[1].s->s, "common") && strcmp(arg[1].s->s, "ceil") &&
             strcmp(arg[1].s->s, "floor")))
            jj__raise(c, JJ_E_FILTERARG, "method must be common, ceil or floor");
        m = arg[1].s->s;
    }
    if (v.kind != JINJA_INT && v.kind != JINJA_BOOL && v.kind != JINJA_FLOAT)
        jj__raise(c, JJ_E_TYPE, "type %s doesn't define __round__ method", jj__type_name(v));
    double x = v.kind == JINJA_FLOAT ? v.f : (double)(v.kind == JINJA_INT ? v.i : v.b);
    if (strcmp(m, "common")) {
        double s = pow(10, (double)p);
        return jinja_float((!strcmp(m, "ceil") ? ceil(x * s) : floor(x * s)) / s);
    }
    if (v.kind != JINJA_FLOAT && p >= 0) return jinja_int(v.kind == JINJA_INT ? v.i : v.b);
    if (p < 0 || p > 300 || !isfinite(x)) {
        double s = pow(10, (double)p);
        double r = nearbyint(x * s) / s;
        return v.kind == JINJA_FLOAT ? jinja_float(r) : jinja_int((int64_t)r);
    }
    char dec[400];
    snprintf(dec, sizeof dec, "%.*f", (int)p, x); /* exact decimal, round-half-even */
    return jinja_float(strtod(dec, NULL));
}

static jinja_value f_safe(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "safe", NULL, 0, a, NULL);
    return jj__markup(jj__soft_str(c, v));
}

static jinja_value f_slice(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("slice", "slices", "fill_with");
    int64_t slices = jj__int_arg(c, arg[0], "slice");
    if (slices <= 0) jj__raise(c, JJ_E_VALUE, "slices must be positive");
    jinja_value l = jj__iter_list(c, v), out = jj__list_new(c, JJ_L_GEN, 0);
    int64_t n = l.l->n, per = n / slices, extra = n % slices, off = 0;
    for (int64_t i = 0; i < slices; i++) {
        int64_t start = off + i * per, end = start + per;
        if (i < extra) off++, end++;
        jinja_value part = jj__list_new(c, JJ_L_LIST, 0);
        for (int64_t k = start; k < end; k++)
            jj__list_push(c, part, l.l->v[k]);
        if (given(arg[1]) && arg[1].kind != JINJA_NONE && i >= extra && extra)
            jj__list_push(c, part, arg[1]);
        jj__list_push(c, out, part);
    }
    return out;
}

static jinja_value f_sort(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("sort", "reverse", "case_sensitive", "attribute");
    jinja_value l = jj__iter_list(c, v);
    jinja_value *keys = jj__alloc(c, sizeof *keys * (l.l->n + 1));
    for (uint32_t i = 0; i < l.l->n; i++)
        keys[i] = sort_key(c, l.l->v[i], arg[2], flag(arg[1], 0), 1);
    return sorted(c, l, keys, flag(arg[0], 0));
}

static jinja_value f_string(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "string", NULL, 0, a, NULL);
    return jj__soft_str(c, v);
}

static jinja_value f_sum(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("sum", "attribute", "start");
    jinja_value l = jj__iter_list(c, v), acc = given(arg[1]) ? arg[1] : jinja_int(0);
    for (uint32_t i = 0; i < l.l->n; i++) {
        jinja_value it = given(arg[0]) && arg[0].kind != JINJA_NONE
                             ? attr_path(c, l.l->v[i], arg[0])
                             : l.l->v[i];
        acc = jj__binop(c, JJ_OP_ADD, acc, it);
    }
    return acc;
}

static jinja_value f_tojson(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    jj_json_opts o;
    jj__json_opts_default(&o);
    o.ensure_ascii = flag(arg[0], 0);
    o.sort_keys = flag(arg[3], 0);
    if (given(arg[1]) && arg[1].kind != JINJA_NONE) {
        if (arg[1].kind == JINJA_STR)
            o.indent_str = arg[1].s->s;
        else {
            int64_t n = jj__int_arg(c, arg[1], "indent");
            o.indent = n < 0 ? 0 : (int)(n > 1000 ? 1000 : n);
        }
        o.item_sep = ",";
    }
    if (given(arg[2]) && arg[2].kind != JINJA_NONE) {
        jinja_value s = jj__iter_list(c, arg[2]);
        if (s.l->n != 2 || s.l->v[0].kind != JINJA_STR || s.l->v[1].kind != JINJA_STR)
            jj__raise(c, JJ_E_VALUE,
                      "separators must be an (item_separator, key_separator) pair of strings");
        o.item_sep = s.l->v[0].s->s;
        o.key_sep = s.l->v[1].s->s;
    }
    buf b;
    jj__buf_init(&b, c);
    jj__tojson(c, &b, v, &o, 0);
    return jj__str_buf(c, &b);
}

static jinja_value f_trim(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("trim", "chars");
    return jj__str_strip(c, jj__soft_str(c, v), arg[0], 1, 1);
}

static jinja_value f_unique(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("unique", "case_sensitive", "attribute");
    jinja_value l = jj__iter_list(c, v), out = jj__list_new(c, JJ_L_GEN, 0),
                seen = jj__dict_new(c, 0);
    for (uint32_t i = 0; i < l.l->n; i++) {
        jinja_value k = sort_key(c, l.l->v[i], arg[1], flag(arg[0], 0), 0);
        if (jj__dict_find(c, seen, k)) continue;
        jj__dict_set(c, seen, k, jinja_none());
        jj__list_push(c, out, l.l->v[i]);
    }
    return out;
}

/* The filters this interpreter does not implement (jj__apply_filter names them). */
static jinja_value f_unsupported(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    (void)v;
    (void)a;
    jj__raise(c, JJ_E_UNSUPPORTED, "this filter is not supported in chat templates");
}

#define FILTER_ENTRY(nm, fn) {nm, fn},
static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {JJ__FILTERS(FILTER_ENTRY)};

/* The filters Jinja writes as generators: they run when their result is iterated. */
static int is_generator_filter(filter_fn fn)
{
    return fn == f_map || fn == f_select || fn == f_reject || fn == f_selectattr ||
           fn == f_rejectattr || fn == f_unique || fn == f_items || fn == f_batch || fn == f_slice;
}

jinja_value jj__apply_filter(jinja_ctx *c, int idx, jinja_value v, const jj_callargs *a)
{
    if (filters[idx].fn == f_unsupported)
        jj__raise(c, JJ_E_UNSUPPORTED, "the filter '%s' is not supported in chat templates",
                  filters[idx].name);
    if (!is_generator_filter(filters[idx].fn)) return filters[idx].fn(c, v, a);
    jinja_value g = jj__list_new(c, JJ_L_GEN, 0);
    jj_callargs *copy = jj__alloc(c, sizeof *copy);
    *copy = *a;
    g.l->lazy = filters[idx].fn;
    g.l->lazy_in = v;
    g.l->lazy_args = copy;
    return g;
}
