/*
 * jinja_json.c — JSON in and out of the interpreter's values.
 *
 * The reader keeps what Python's json.loads keeps and cJSON loses: object key order (a
 * repeated key keeps its first place and takes the last value), and whether a number was
 * written as an int or a float (1 vs 1.0, which tojson and repr print differently). It accepts
 * NaN / Infinity / -Infinity as Python does, bounds nesting, and reports the byte offset of an
 * error. The writer is transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) with each of those options. Callers: jinja_api.c,
 * jinja_filters.c (tojson), model/chat.c and the CLI through jinja.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

#define JSON_MAX_DEPTH 512

/* ---- writer ------------------------------------------------------------------------------- */

void jj__json_opts_default(jj_json_opts *o)
{
    o->ensure_ascii = 0;
    o->indent = -1;
    o->indent_str = NULL;
    o->item_sep = ", ";
    o->key_sep = ": ";
    o->sort_keys = 0;
}

static void json_string(buf *b, const char *s, size_t n, int ensure_ascii)
{
    buf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7F && ch != '"' && ch != '\\') {
            size_t e = i + 1;
            while (e < n && (unsigned char)s[e] >= 0x20 && (unsigned char)s[e] < 0x7F &&
                   s[e] != '"' && s[e] != '\\')
                e++;
            buf_put(b, s + i, e - i);
            i = e;
            continue;
        }
        uint32_t cp = jj__utf8_next(s, n, &i);
        switch (cp) {
        case '"':
            buf_puts(b, "\\\"");
            break;
        case '\\':
            buf_puts(b, "\\\\");
            break;
        case '\n':
            buf_puts(b, "\\n");
            break;
        case '\r':
            buf_puts(b, "\\r");
            break;
        case '\t':
            buf_puts(b, "\\t");
            break;
        case '\b':
            buf_puts(b, "\\b");
            break;
        case '\f':
            buf_puts(b, "\\f");
            break;
        default:
            if (cp < 0x20)
                buf_printf(b, "\\u%04x", cp);
            else if (cp >= 0x7F && ensure_ascii) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else
                    buf_printf(b, "\\u%04x", cp);
            } else
                buf_put(b, s + st, i - st);
        }
    }
    buf_putc(b, '"');
}

static void json_newline(buf *b, const jj_json_opts *o, int level)
{
    buf_putc(b, '\n');
    for (int i = 0; i < level; i++) {
        if (o->indent_str)
            buf_puts(b, o->indent_str);
        else
            for (int k = 0; k < o->indent; k++)
                buf_putc(b, ' ');
    }
}

static int json_fail(jinja_ctx *c, const char *fmt, const char *what)
{
    if (c) jj__raise(c, JJ_E_TYPE, fmt, what);
    return -EINVAL;
}

/* A dict key as JSON writes it (keys that are not strings are converted, as Python does). */
static int json_key(jinja_ctx *c, buf *b, jinja_value k, const jj_json_opts *o)
{
    switch (k.kind) {
    case JINJA_STR:
        json_string(b, k.s->s, k.s->len, o->ensure_ascii);
        return 0;
    case JINJA_INT:
        buf_printf(b, "\"%lld\"", (long long)k.i);
        return 0;
    case JINJA_BOOL:
        buf_puts(b, k.b ? "\"true\"" : "\"false\"");
        return 0;
    case JINJA_NONE:
        buf_puts(b, "\"null\"");
        return 0;
    case JINJA_FLOAT:
        buf_putc(b, '"');
        if (isnan(k.f))
            buf_puts(b, "NaN");
        else if (isinf(k.f))
            buf_puts(b, k.f < 0 ? "-Infinity" : "Infinity");
        else
            jj__repr_float(b, k.f);
        buf_putc(b, '"');
        return 0;
    default:
        return json_fail(c, "keys must be str, int, float, bool or None, not %s", jj__type_name(k));
    }
}

/* Insertion sort of entry indices by key (sort_keys); raises TypeError on mixed key types. */
static uint32_t *sorted_keys(jinja_ctx *c, const struct jinja_dict *d)
{
    uint32_t *ix =
        c ? jj__alloc(c, sizeof *ix * (d->n ? d->n : 1)) : malloc(sizeof *ix * (d->n ? d->n : 1));
    if (!ix) return NULL;
    for (uint32_t i = 0; i < d->n; i++) {
        uint32_t j = i;
        while (j > 0) {
            jinja_value a = d->e[ix[j - 1]].k, b = d->e[i].k;
            int cmp;
            if (a.kind == JINJA_STR && b.kind == JINJA_STR) {
                size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
                cmp = memcmp(a.s->s, b.s->s, n);
                if (!cmp) cmp = a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
            } else if (c)
                cmp = jj__compare(c, a, b);
            else
                cmp = 0;
            if (cmp <= 0) break;
            ix[j] = ix[j - 1];
            j--;
        }
        ix[j] = i;
    }
    return ix;
}

static int json_dict(jinja_ctx *c, buf *b, jinja_value v, const jj_json_opts *o, int level)
{
    const struct jinja_dict *d = v.d;
    if (!d->n) {
        buf_puts(b, "{}");
        return 0;
    }
    uint32_t *order = o->sort_keys ? sorted_keys(c, d) : NULL;
    if (o->sort_keys && !order) return -ENOMEM;
    int rc = 0;
    buf_putc(b, '{');
    for (uint32_t i = 0; i < d->n && !rc; i++) {
        const jj_entry *e = &d->e[order ? order[i] : i];
        if (i) buf_puts(b, o->item_sep);
        if (o->indent >= 0 || o->indent_str) json_newline(b, o, level + 1);
        rc = json_key(c, b, e->k, o);
        if (!rc) {
            buf_puts(b, o->key_sep);
            rc = jj__tojson(c, b, e->v, o, level + 1);
        }
    }
    if (!c) free(order);
    if (rc) return rc;
    if (o->indent >= 0 || o->indent_str) json_newline(b, o, level);
    buf_putc(b, '}');
    return 0;
}

int jj__tojson(jinja_ctx *c, buf *b, jinja_value v, const jj_json_opts *o, int level)
{
    if (level > JSON_MAX_DEPTH) {
        if (c) jj__raise(c, JJ_E_VALUE, "Circular reference detected");
        return -EINVAL;
    }
    switch (v.kind) {
    case JINJA_NONE:
        buf_puts(b, "null");
        return 0;
    case JINJA_BOOL:
        buf_puts(b, v.b ? "true" : "false");
        return 0;
    case JINJA_INT:
        buf_printf(b, "%lld", (long long)v.i);
        return 0;
    case JINJA_FLOAT:
        if (isnan(v.f))
            buf_puts(b, "NaN");
        else if (isinf(v.f))
            buf_puts(b, v.f < 0 ? "-Infinity" : "Infinity");
        else
            jj__repr_float(b, v.f);
        return 0;
    case JINJA_STR:
        json_string(b, v.s->s, v.s->len, o->ensure_ascii);
        return 0;
    case JINJA_DICT:
        return json_dict(c, b, v, o, level);
    case JINJA_LIST:
        if (jj__is_seq(v)) {
            const struct jinja_list *l = v.l;
            if (!l->n) {
                buf_puts(b, "[]");
                return 0;
            }
            buf_putc(b, '[');
            for (uint32_t i = 0; i < l->n; i++) {
                if (i) buf_puts(b, o->item_sep);
                if (o->indent >= 0 || o->indent_str) json_newline(b, o, level + 1);
                int rc = jj__tojson(c, b, l->v[i], o, level + 1);
                if (rc) return rc;
            }
            if (o->indent >= 0 || o->indent_str) json_newline(b, o, level);
            buf_putc(b, ']');
            return 0;
        }
        break;
    default:
        break;
    }
    return json_fail(c, "Object of type %s is not JSON serializable", jj__type_name(v));
}

/* ---- reader ------------------------------------------------------------------------------- */

typedef struct jreader {
    jinja_ctx *c;
    const char *s;
    size_t n, i;
    int depth;
} jreader;

static _Noreturn void jfail(jreader *r, const char *what)
{
    jj__raise(r->c, JJ_E_VALUE, "%s: line 1 column %zu (char %zu)", what, r->i + 1, r->i);
}

static void jws(jreader *r)
{
    while (r->i < r->n &&
           (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static int jlit(jreader *r, const char *lit)
{
    size_t l = strlen(lit);
    if (r->n - r->i >= l && !memcmp(r->s + r->i, lit, l)) {
        r->i += l;
        return 1;
    }
    return 0;
}

static int hex4(jreader *r, uint32_t *out)
{
    uint32_t v = 0;
    if (r->n - r->i < 4) return 0;
    for (int k = 0; k < 4; k++) {
        char ch = r->s[r->i + (size_t)k];
        int d = ch >= '0' && ch <= '9'                     ? ch - '0'
                : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10
                                                           : -1;
        if (d < 0) return 0;
        v = v * 16 + (uint32_t)d;
    }
    r->i += 4;
    *out = v;
    return 1;
}

static jinja_value jstring(jreader *r)
{
    buf b;
    jj__buf_init(&b, r->c);
    r->i++; /* the opening quote */
    for (;;) {
        size_t st = r->i;
        while (r->i < r->n && r->s[r->i] != '"' && r->s[r->i] != '\\')
            r->i++;
        buf_put(&b, r->s + st, r->i - st);
        if (r->i >= r->n) jfail(r, "Unterminated string starting at");
        if (r->s[r->i] == '"') {
            r->i++;
            return jj__str_buf(r->c, &b);
        }
        r->i++;
        if (r->i >= r->n) jfail(r, "Unterminated string starting at");
        char e = r->s[r->i++];
        uint32_t cp;
        char tmp[4];
        switch (e) {
        case '"':
            buf_putc(&b, '"');
            break;
        case '\\':
            buf_putc(&b, '\\');
            break;
        case '/':
            buf_putc(&b, '/');
            break;
        case 'b':
            buf_putc(&b, '\b');
            break;
        case 'f':
            buf_putc(&b, '\f');
            break;
        case 'n':
            buf_putc(&b, '\n');
            break;
        case 'r':
            buf_putc(&b, '\r');
            break;
        case 't':
            buf_putc(&b, '\t');
            break;
        case 'u':
            if (!hex4(r, &cp)) jfail(r, "Invalid \\uXXXX escape");
            if (cp >= 0xD800 && cp < 0xDC00 && r->n - r->i >= 6 && r->s[r->i] == '\\' &&
                r->s[r->i + 1] == 'u') {
                size_t save = r->i;
                uint32_t lo;
                r->i += 2;
                if (hex4(r, &lo) && lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    r->i = save;
            }
            buf_put(&b, tmp, jj__utf8_put(tmp, cp));
            break;
        default:
            r->i--;
            jfail(r, "Invalid \\escape");
        }
    }
}

static jinja_value jnumber(jreader *r)
{
    size_t st = r->i;
    int is_float = 0;
    if (r->s[r->i] == '-') r->i++;
    if (r->i < r->n && r->s[r->i] == '0')
        r->i++;
    else if (r->i < r->n && r->s[r->i] >= '1' && r->s[r->i] <= '9')
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
            r->i++;
    else {
        r->i = st;
        jfail(r, "Expecting value");
    }
    if (r->i + 1 < r->n && r->s[r->i] == '.' && r->s[r->i + 1] >= '0' && r->s[r->i + 1] <= '9') {
        is_float = 1;
        r->i++;
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
            r->i++;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        size_t save = r->i++;
        if (r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '-')) r->i++;
        if (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
            is_float = 1;
            while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
                r->i++;
        } else
            r->i = save;
    }
    char tmp[64];
    size_t len = r->i - st;
    if (len >= sizeof tmp) {
        /* very long numbers: Python keeps them exact; they become floats here */
        char *big = jj__alloc(r->c, len + 1);
        memcpy(big, r->s + st, len);
        big[len] = 0;
        return jinja_float(strtod(big, NULL));
    }
    memcpy(tmp, r->s + st, len);
    tmp[len] = 0;
    if (!is_float) {
        errno = 0;
        long long v = strtoll(tmp, NULL, 10);
        if (!errno) return jinja_int(v);
    }
    return jinja_float(strtod(tmp, NULL));
}

static jinja_value jvalue(jreader *r);

static jinja_value jarray(jreader *r)
{
    jinja_value l = jj__list_new(r->c, JJ_L_LIST, 0);
    r->i++;
    jws(r);
    if (r->i < r->n && r->s[r->i] == ']') {
        r->i++;
        return l;
    }
    for (;;) {
        jj__list_push(r->c, l, jvalue(r));
        jws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == ']') {
            r->i++;
            return l;
        }
        jfail(r, "Expecting ',' delimiter");
    }
}

static jinja_value jobject(jreader *r)
{
    jinja_value d = jj__dict_new(r->c, 0);
    r->i++;
    jws(r);
    if (r->i < r->n && r->s[r->i] == '}') {
        r->i++;
        return d;
    }
    for (;;) {
        jws(r);
        if (r->i >= r->n || r->s[r->i] != '"')
            jfail(r, "Expecting property name enclosed in double quotes");
        jinja_value k = jstring(r);
        jws(r);
        if (r->i >= r->n || r->s[r->i] != ':') jfail(r, "Expecting ':' delimiter");
        r->i++;
        jj__dict_set(r->c, d, k, jvalue(r));
        jws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == '}') {
            r->i++;
            return d;
        }
        jfail(r, "Expecting ',' delimiter");
    }
}

static jinja_value jvalue(jreader *r)
{
    jws(r);
    if (r->i >= r->n) jfail(r, "Expecting value");
    char ch = r->s[r->i];
    if (ch == '{' || ch == '[') {
        if (++r->depth > JSON_MAX_DEPTH) jfail(r, "JSON nested too deeply");
        jinja_value v = ch == '{' ? jobject(r) : jarray(r);
        r->depth--;
        return v;
    }
    if (ch == '"') return jstring(r);
    if (jlit(r, "true")) return jinja_bool(1);
    if (jlit(r, "false")) return jinja_bool(0);
    if (jlit(r, "null")) return jinja_none();
    if (jlit(r, "NaN")) return jinja_float(NAN);
    if (jlit(r, "Infinity")) return jinja_float(INFINITY);
    if (jlit(r, "-Infinity")) return jinja_float(-INFINITY);
    return jnumber(r);
}

int jinja_json_parse(jinja_ctx *c, const char *text, size_t len, jinja_value *out, jinja_error *err)
{
    jj_catch k = {.err = err};
    c->catch = &k;
    c->line = 0;
    if (setjmp(k.jb)) {
        c->catch = NULL;
        return k.code;
    }
    jreader r = {c, text, len, 0, 0};
    jinja_value v = jvalue(&r);
    jws(&r);
    if (r.i != r.n) jfail(&r, "Extra data");
    *out = v;
    c->catch = NULL;
    return 0;
}
