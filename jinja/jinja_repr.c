/*
 * jinja_repr.c — turning values into text as Python does: str() (what {{ x }} prints), repr()
 * (what printing a list or dict shows of its items: quotes chosen like Python, non-printable
 * characters escaped), the shortest round-trip float repr (1.0, 1e-05, 1e+16), Jinja's own
 * reprs of namespaces, macros and loops, and markupsafe's escape(). Called by the whole
 * interpreter.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

/* Python's str.isprintable for one code point, for repr(): controls, separators other than
 * the space, format characters and private-use code points are escaped. */
static int is_printable(uint32_t c)
{
    if (c < 0x20 || c == 0x7F) return 0;
    if (c < 0x7F) return 1;
    if (c <= 0xA0 || c == 0xAD) return 0;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return 0;
    if ((c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000) return 0;
    if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E)
        return 0;
    if (c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xE000 && c <= 0xF8FF)) return 0;
    if (c >= 0xD800 && c <= 0xDFFF) return 0;
    if (c >= 0xE0000 && c <= 0xE007F) return 0;
    if (c >= 0xF0000) return 0;
    return 1;
}

/* ---- str() and repr() --------------------------------------------------------------------- */

void jj__repr_float(buf *b, double f)
{
    if (isnan(f)) {
        buf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        buf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp is [-]d[.ddd]e±XX: collect the digits and the decimal exponent */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (neg) buf_putc(b, '-');
    if (exp10 >= -5 + 1 && exp10 < 16) {
        if (exp10 < 0) {
            buf_puts(b, "0.");
            for (int i = -1; i > exp10; i--)
                buf_putc(b, '0');
            buf_put(b, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp10; i++)
                buf_putc(b, i < nd ? digits[i] : '0');
            buf_putc(b, '.');
            if (nd > exp10 + 1)
                buf_put(b, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            else
                buf_putc(b, '0');
        }
        return;
    }
    buf_putc(b, digits[0]);
    if (nd > 1) {
        buf_putc(b, '.');
        buf_put(b, digits + 1, (size_t)nd - 1);
    }
    buf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
}

static void repr_str(buf *b, const char *s, size_t n)
{
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    buf_putc(b, q);
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp = jj__utf8_next(s, n, &i);
        if (cp == (uint32_t)q || cp == '\\') {
            buf_putc(b, '\\');
            buf_putc(b, (char)cp);
        } else if (cp == '\n')
            buf_puts(b, "\\n");
        else if (cp == '\r')
            buf_puts(b, "\\r");
        else if (cp == '\t')
            buf_puts(b, "\\t");
        else if (!is_printable(cp))
            buf_printf(b, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
        else
            buf_put(b, s + start, i - start);
    }
    buf_putc(b, q);
}

static void repr_depth(buf *b, jinja_value v, int depth);

static void repr_items(buf *b, const struct jinja_list *l, int depth)
{
    for (uint32_t i = 0; i < l->n; i++) {
        if (i) buf_puts(b, ", ");
        repr_depth(b, l->v[i], depth + 1);
    }
}

static void repr_dict(buf *b, const struct jinja_dict *d, int depth)
{
    buf_putc(b, '{');
    for (uint32_t i = 0; i < d->n; i++) {
        if (i) buf_puts(b, ", ");
        repr_depth(b, d->e[i].k, depth + 1);
        buf_puts(b, ": ");
        repr_depth(b, d->e[i].v, depth + 1);
    }
    buf_putc(b, '}');
}

static void repr_list(buf *b, const struct jinja_list *l, int depth)
{
    switch (l->type) {
    case JJ_L_TUPLE:
        buf_putc(b, '(');
        repr_items(b, l, depth);
        buf_puts(b, l->n == 1 ? ",)" : ")");
        return;
    case JJ_L_GEN:
        buf_puts(b, "<generator object>");
        return;
    case JJ_L_ITEMS:
    case JJ_L_KEYS:
    case JJ_L_VALUES:
        buf_puts(b, l->type == JJ_L_ITEMS  ? "dict_items(["
                        : l->type == JJ_L_KEYS ? "dict_keys(["
                                               : "dict_values([");
        repr_items(b, l, depth);
        buf_puts(b, "])");
        return;
    case JJ_L_RANGE:
        if (l->r[2] == 1)
            buf_printf(b, "range(%lld, %lld)", (long long)l->r[0], (long long)l->r[1]);
        else
            buf_printf(b, "range(%lld, %lld, %lld)", (long long)l->r[0], (long long)l->r[1],
                       (long long)l->r[2]);
        return;
    default:
        buf_putc(b, '[');
        repr_items(b, l, depth);
        buf_putc(b, ']');
    }
}

static void repr_depth(buf *b, jinja_value v, int depth)
{
    if (depth > 64) {
        buf_puts(b, "...");
        return;
    }
    switch (v.kind) {
    case JINJA_UNDEFINED:
        buf_puts(b, "Undefined");
        return;
    case JINJA_STR:
        if (v.flags & JINJA_F_MARKUP) buf_puts(b, "Markup(");
        repr_str(b, v.s->s, v.s->len);
        if (v.flags & JINJA_F_MARKUP) buf_putc(b, ')');
        return;
    case JINJA_LIST:
        repr_list(b, v.l, depth);
        return;
    case JINJA_DICT:
        repr_dict(b, v.d, depth);
        return;
    case JINJA_NAMESPACE:
        buf_puts(b, "<Namespace ");
        repr_dict(b, v.d, depth);
        buf_putc(b, '>');
        return;
    default:
        jj__str(b, v);
        return;
    }
}

void jj__repr(buf *b, jinja_value v)
{
    repr_depth(b, v, 0);
}

void jj__str(buf *b, jinja_value v)
{
    switch (v.kind) {
    case JINJA_UNDEFINED:
        return;
    case JINJA_NONE:
        buf_puts(b, "None");
        return;
    case JINJA_BOOL:
        buf_puts(b, v.b ? "True" : "False");
        return;
    case JINJA_INT:
        buf_printf(b, "%lld", (long long)v.i);
        return;
    case JINJA_FLOAT:
        jj__repr_float(b, v.f);
        return;
    case JINJA_STR:
        buf_put(b, v.s->s, v.s->len);
        return;
    case JINJA_CALLABLE:
        if (v.fn->type == JJ_FN_MACRO)
            buf_printf(b, "<Macro '%s'>", v.fn->name);
        else if (v.fn->type == JJ_FN_METHOD)
            buf_printf(b, "<built-in method %s of %s object>", v.fn->name,
                       jj__type_name(v.fn->self));
        else
            buf_printf(b, "<function %s>", v.fn->name);
        return;
    case JINJA_LOOP:
        buf_printf(b, "<LoopContext %lld/%u>", (long long)v.loop->index0 + 1,
                   v.loop->items.l->n);
        return;
    default:
        repr_depth(b, v, 0);
        return;
    }
}

jinja_value jj__soft_str(jinja_ctx *c, jinja_value v)
{
    if (v.kind == JINJA_STR) return v;
    buf b;
    jj__buf_init(&b, c);
    jj__str(&b, v);
    return jj__str_buf(c, &b);
}

jinja_value jj__plain_str(jinja_ctx *c, jinja_value v)
{
    v = jj__soft_str(c, v);
    v.flags = 0;
    return v;
}

jinja_value jj__escape(jinja_ctx *c, jinja_value v)
{
    if (v.kind == JINJA_STR && (v.flags & JINJA_F_MARKUP)) return v;
    jinja_value s = jj__plain_str(c, v);
    if (!strpbrk(s.s->s, "&<>\"'") && strlen(s.s->s) == s.s->len) return jj__markup(s);
    buf b;
    jj__buf_init(&b, c);
    for (size_t i = 0; i < s.s->len; i++) {
        char ch = s.s->s[i];
        switch (ch) {
        case '&':
            buf_puts(&b, "&amp;");
            break;
        case '<':
            buf_puts(&b, "&lt;");
            break;
        case '>':
            buf_puts(&b, "&gt;");
            break;
        case '"':
            buf_puts(&b, "&#34;");
            break;
        case '\'':
            buf_puts(&b, "&#39;");
            break;
        default:
            buf_putc(&b, ch);
        }
    }
    return jj__markup(jj__str_buf(c, &b));
}
