/*
 * jinja_format.c — Python's two string formatting languages and the template globals.
 *
 * `fmt % args` (printf-style: %s %r %d %i %f %e %g %x %o %c %%, flags, width, precision,
 * %(name)s with a dict) and str.format ({} {0} {name} {0[key]} {0.attr}, !r / !s, and the
 * format-spec mini-language: fill, align, sign, #, 0, width, grouping, precision, type), both
 * escaping their arguments when the format string is Markup, as markupsafe does. The globals
 * are the names Jinja's default namespace and transformers add: range (bounded as the sandbox
 * bounds it), dict, namespace, joiner, raise_exception and strftime_now. Called by
 * jinja_expr.c (globals), jinja_ops.c (%), jinja_methods.c (format) and jinja_filters.c
 * (format).
 *
 * str.format resolves {0.name} and {0[key]} with jinja_ops.c's attribute and item access, whose
 * attributes of a string are jinja_methods.c's methods, format among them: a cycle of three
 * files (see jinja_ops.c) through which no call chain runs, since a field is looked up, never
 * called.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja_internal.h"

#define JJ_MAX_RANGE 100000

/* ---- shared field formatting -------------------------------------------------------------- */

typedef struct spec {
    uint32_t fill;
    char align;          /* '<' '>' '^' '=' or 0 */
    char sign;           /* '+' '-' ' ' or 0 */
    int alt;             /* '#' */
    int zero;            /* '0' */
    int64_t width, prec; /* -1: none */
    char group;          /* ',' '_' or 0 */
    char type;           /* 0 or the type letter */
} spec;

static void pad_field(buf *b, const char *s, size_t n, size_t n_cp, const spec *sp, int numeric)
{
    int64_t w = sp->width, pad = w > (int64_t)n_cp ? w - (int64_t)n_cp : 0;
    char align = sp->align ? sp->align : numeric ? '>' : '<';
    char fill[4];
    size_t fl = jj__utf8_put(fill, sp->fill ? sp->fill : ' ');
    int64_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    if (align == '=' && n && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) {
        buf_putc(b, s[0]);
        s++;
        n--;
        left = pad;
    } else if (align == '=')
        left = pad;
    for (int64_t i = 0; i < left; i++)
        buf_put(b, fill, fl);
    buf_put(b, s, n);
    for (int64_t i = left; i < pad; i++)
        buf_put(b, fill, fl);
}

static void group_digits(char *out, const char *digits, char sep)
{
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n; i++) {
        out[o++] = digits[i];
        if (sep && (n - i - 1) % 3 == 0 && i + 1 < n) out[o++] = sep;
    }
    out[o] = 0;
}

static void format_int(jinja_ctx *c, buf *b, int64_t v, const spec *sp)
{
    char digits[80], grouped[120], body[160];
    char t = sp->type ? sp->type : 'd';
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    const char *prefix = "";
    if (t == 'c') {
        char ch[4];
        size_t l = jj__utf8_put(ch, (uint32_t)v);
        pad_field(b, ch, l, 1, sp, 0);
        return;
    }
    if (t == 'x' || t == 'X')
        snprintf(digits, sizeof digits, t == 'x' ? "%llx" : "%llX", (unsigned long long)u),
            prefix = sp->alt ? (t == 'x' ? "0x" : "0X") : "";
    else if (t == 'o')
        snprintf(digits, sizeof digits, "%llo", (unsigned long long)u),
            prefix = sp->alt ? "0o" : "";
    else if (t == 'b') {
        int k = 0;
        char rev[70];
        do
            rev[k++] = (char)('0' + (u & 1));
        while (u >>= 1);
        for (int i = 0; i < k; i++)
            digits[i] = rev[k - 1 - i];
        digits[k] = 0;
        prefix = sp->alt ? "0b" : "";
    } else if (t == 'd' || t == 'n')
        snprintf(digits, sizeof digits, "%llu", (unsigned long long)u);
    else
        jj__raise(c, JJ_E_VALUE, "Unknown format code '%c' for object of type 'int'", t);
    group_digits(grouped, digits, sp->group);
    const char *sign = v < 0 ? "-" : sp->sign == '+' ? "+" : sp->sign == ' ' ? " " : "";
    snprintf(body, sizeof body, "%s%s%s", sign, prefix, grouped);
    pad_field(b, body, strlen(body), strlen(body), sp, 1);
}

static void format_float(jinja_ctx *c, buf *b, double v, const spec *sp)
{
    char t = sp->type, body[520], num[360];
    int prec = sp->prec >= 0 ? (int)(sp->prec > 300 ? 300 : sp->prec) : 6;
    if (!t) {
        buf tmp;
        jj__buf_init(&tmp, c);
        if (sp->prec >= 0)
            buf_printf(&tmp, "%.*g", prec ? prec : 1, v);
        else
            jj__repr_float(&tmp, v);
        snprintf(num, sizeof num, "%s", tmp.s ? tmp.s : "");
    } else if (t == '%')
        snprintf(num, sizeof num, "%.*f%%", prec, v * 100);
    else if (strchr("fFeEgG", t))
        snprintf(num, sizeof num, (char[]){'%', '.', '*', t, 0}, prec, v);
    else
        jj__raise(c, JJ_E_VALUE, "Unknown format code '%c' for object of type 'float'", t);
    const char *digits = num[0] == '-' ? num + 1 : num;
    const char *sign = num[0] == '-' ? "-" : sp->sign == '+' ? "+" : sp->sign == ' ' ? " " : "";
    if (sp->group) {
        char ip[360], grouped[480];
        size_t k = strspn(digits, "0123456789");
        memcpy(ip, digits, k);
        ip[k] = 0;
        group_digits(grouped, ip, sp->group);
        snprintf(body, sizeof body, "%s%s%s", sign, grouped, digits + k);
    } else
        snprintf(body, sizeof body, "%s%s", sign, digits);
    pad_field(b, body, strlen(body), strlen(body), sp, 1);
}

static void format_str(jinja_ctx *c, buf *b, jinja_value s, const spec *sp)
{
    if (sp->type && sp->type != 's')
        jj__raise(c, JJ_E_VALUE, "Unknown format code '%c' for object of type 'str'", sp->type);
    if (sp->sign) jj__raise(c, JJ_E_VALUE, "Sign not allowed in string format specifier");
    if (sp->align == '=')
        jj__raise(c, JJ_E_VALUE, "'=' alignment not allowed in string format specifier");
    size_t n = s.s->len, n_cp = s.s->n_cp;
    if (sp->prec >= 0 && (size_t)sp->prec < n_cp) {
        n = jj__cp_offset(s.s, sp->prec);
        n_cp = (size_t)sp->prec;
    }
    pad_field(b, s.s->s, n, n_cp, sp, 0);
}

/* Formats v by sp into b (Python's format(v, spec)). */
static void format_value(jinja_ctx *c, buf *b, jinja_value v, const spec *sp, int empty_spec)
{
    if (v.kind == JINJA_UNDEFINED && v.u && v.u->exc == JJ_E_SECURITY) jj__undef_fail(c, v);
    if (empty_spec) {
        jj__str(b, v);
        return;
    }
    switch (v.kind) {
    case JINJA_INT:
    case JINJA_BOOL:
        if (sp->type && strchr("eEfFgG%", sp->type)) {
            format_float(c, b, (double)(v.kind == JINJA_INT ? v.i : v.b), sp);
            return;
        }
        format_int(c, b, v.kind == JINJA_INT ? v.i : v.b, sp);
        return;
    case JINJA_FLOAT:
        if (sp->type && strchr("dxXobc", sp->type))
            jj__raise(c, JJ_E_VALUE, "Unknown format code '%c' for object of type 'float'",
                      sp->type);
        format_float(c, b, v.f, sp);
        return;
    case JINJA_STR:
        format_str(c, b, v, sp);
        return;
    default:
        jj__raise(c, JJ_E_TYPE, "unsupported format string passed to %s.__format__",
                  jj__type_name(v));
    }
}

/* ---- str.format --------------------------------------------------------------------------- */

static const char *parse_spec(jinja_ctx *c, const char *p, const char *e, spec *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->width = sp->prec = -1;
    size_t i = 0, n = (size_t)(e - p);
    size_t w1 = 0;
    uint32_t first = n ? jj__utf8_next(p, n, &w1) : 0;
    if (n > w1 && strchr("<>^=", p[w1])) {
        sp->fill = first;
        sp->align = p[w1];
        i = w1 + 1;
    } else if (n && strchr("<>^=", p[0])) {
        sp->align = p[0];
        i = 1;
    }
    if (i < n && strchr("+- ", p[i])) sp->sign = p[i++];
    if (i < n && p[i] == '#') sp->alt = 1, i++;
    if (i < n && p[i] == '0') {
        sp->zero = 1;
        if (!sp->align) sp->fill = '0', sp->align = '=';
        i++;
    }
    if (i < n && p[i] >= '0' && p[i] <= '9') {
        sp->width = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && sp->width < 100000000)
            sp->width = sp->width * 10 + (p[i++] - '0');
    }
    if (i < n && (p[i] == ',' || p[i] == '_')) sp->group = p[i++];
    if (i < n && p[i] == '.') {
        i++;
        sp->prec = 0;
        if (i >= n || p[i] < '0' || p[i] > '9')
            jj__raise(c, JJ_E_VALUE, "Format specifier missing precision");
        while (i < n && p[i] >= '0' && p[i] <= '9' && sp->prec < 100000000)
            sp->prec = sp->prec * 10 + (p[i++] - '0');
    }
    if (i < n) sp->type = p[i++];
    if (i < n) jj__raise(c, JJ_E_VALUE, "Invalid format specifier");
    if (sp->width > (int64_t)c->lim.max_output_bytes)
        jj__raise(c, JJ_E_LIMIT, "format width too large");
    return p + i;
}

/* The value a field name refers to: an index or keyword, then .attr / [key] steps. */
static jinja_value field_value(jinja_ctx *c, const char *p, const char *e, const jj_callargs *a,
                               uint32_t *auto_ix)
{
    const char *q = p;
    while (q < e && *q != '.' && *q != '[')
        q++;
    jinja_value v;
    if (q == p) {
        if (*auto_ix >= a->n_pos)
            jj__raise(c, JJ_E_INDEX, "Replacement index %u out of range for positional args tuple",
                      *auto_ix);
        v = a->pos[(*auto_ix)++];
    } else if (*p >= '0' && *p <= '9') {
        uint32_t k = (uint32_t)strtoul(p, NULL, 10);
        if (k >= a->n_pos)
            jj__raise(c, JJ_E_INDEX, "Replacement index %u out of range for positional args tuple",
                      k);
        v = a->pos[k];
    } else {
        v = jj__missing;
        for (uint32_t k = 0; k < a->n_kw; k++)
            if (strlen(a->kw_names[k]) == (size_t)(q - p) &&
                !memcmp(a->kw_names[k], p, (size_t)(q - p)))
                v = a->kw[k];
        if (v.kind == JINJA__MISSING) jj__raise(c, JJ_E_KEY, "'%.*s'", (int)(q - p), p);
    }
    while (q < e) {
        if (*q == '.') {
            const char *s = ++q;
            while (q < e && *q != '.' && *q != '[')
                q++;
            v = jj__getattr(c, v, s, (size_t)(q - s));
        } else {
            const char *s = ++q;
            while (q < e && *q != ']')
                q++;
            jinja_value key = *s >= '0' && *s <= '9' ? jinja_int(strtoll(s, NULL, 10))
                                                     : jj__str_new(c, s, (size_t)(q - s));
            v = jj__getitem(c, v, key);
            if (q < e) q++;
        }
    }
    return v;
}

jinja_value jj__str_format(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    const char *p = self.s->s, *end = p + self.s->len;
    int markup = self.flags & JINJA_F_MARKUP;
    uint32_t auto_ix = 0;
    buf b;
    jj__buf_init(&b, c);
    while (p < end) {
        if (*p == '}') {
            if (p + 1 < end && p[1] == '}') {
                buf_putc(&b, '}');
                p += 2;
                continue;
            }
            jj__raise(c, JJ_E_VALUE, "Single '}' encountered in format string");
        }
        if (*p != '{') {
            buf_putc(&b, *p++);
            continue;
        }
        if (p + 1 < end && p[1] == '{') {
            buf_putc(&b, '{');
            p += 2;
            continue;
        }
        const char *f = ++p;
        int depth = 1;
        while (p < end && depth) {
            if (*p == '{') depth++;
            if (*p == '}') depth--;
            if (depth) p++;
        }
        if (p >= end) jj__raise(c, JJ_E_VALUE, "expected '}' before end of string");
        const char *fe = p++, *conv = NULL, *colon = NULL;
        for (const char *q = f; q < fe; q++) {
            if (*q == '[') {
                while (q < fe && *q != ']')
                    q++;
                continue;
            }
            if (*q == '!' && !conv && !colon) conv = q;
            if (*q == ':' && !colon) {
                colon = q;
                break;
            }
        }
        const char *name_end = conv ? conv : colon ? colon : fe;
        jinja_value v = field_value(c, f, name_end, a, &auto_ix);
        if (conv) {
            buf t;
            jj__buf_init(&t, c);
            if (conv[1] == 'r' || conv[1] == 'a')
                jj__repr(&t, v);
            else if (conv[1] == 's')
                jj__str(&t, v);
            else
                jj__raise(c, JJ_E_VALUE, "Unknown conversion specifier %c", conv[1]);
            v = jj__str_buf(c, &t);
        }
        if (markup) v = jj__escape(c, v);
        spec sp;
        const char *ss = colon ? colon + 1 : fe;
        if (memchr(ss, '{', (size_t)(fe - ss)))
            jj__raise(c, JJ_E_UNSUPPORTED, "nested replacement fields in a format spec");
        parse_spec(c, ss, fe, &sp);
        format_value(c, &b, v, &sp, ss == fe);
    }
    jinja_value r = jj__str_buf(c, &b);
    r.flags = (uint8_t)markup;
    return r;
}

/* ---- fmt % args --------------------------------------------------------------------------- */

static jinja_value pct_arg(jinja_ctx *c, jinja_value args, uint32_t *next, int mapping,
                           const char *key, size_t klen)
{
    if (key) {
        if (!mapping) jj__raise(c, JJ_E_TYPE, "format requires a mapping");
        jj_entry *e = jj__dict_find_str(args, key, klen);
        if (!e) jj__raise(c, JJ_E_KEY, "'%.*s'", (int)klen, key);
        return e->v;
    }
    if (jj__is_seq(args) && args.l->type == JJ_L_TUPLE) {
        if (*next >= args.l->n) jj__raise(c, JJ_E_TYPE, "not enough arguments for format string");
        return args.l->v[(*next)++];
    }
    if (*next > 0) jj__raise(c, JJ_E_TYPE, "not enough arguments for format string");
    (*next)++;
    return args;
}

static void pct_one(jinja_ctx *c, buf *b, char t, jinja_value v, spec *sp, int markup)
{
    if (t == 's' || t == 'r' || t == 'a') {
        buf tmp;
        jj__buf_init(&tmp, c);
        if (t == 's')
            jj__str(&tmp, v);
        else
            jj__repr(&tmp, v);
        jinja_value s = jj__str_buf(c, &tmp);
        if (markup) s = jj__escape(c, s);
        sp->type = 0;
        sp->sign = 0;
        if (sp->align == '=') sp->align = '>';
        format_str(c, b, s, sp);
        return;
    }
    if (t == 'c') {
        if (v.kind == JINJA_STR && v.s->n_cp == 1) {
            format_str(c, b, v, sp);
            return;
        }
        sp->type = 'c';
        format_int(c, b, jj__int_arg(c, v, "%c"), sp);
        return;
    }
    if (v.kind != JINJA_INT && v.kind != JINJA_BOOL && v.kind != JINJA_FLOAT)
        jj__raise(c, JJ_E_TYPE, "%%%c format: a real number is required, not %s", t,
                  jj__type_name(v));
    if (strchr("diuxXo", t)) {
        int64_t i = v.kind == JINJA_FLOAT ? (int64_t)v.f : v.kind == JINJA_INT ? v.i : v.b;
        sp->type = (t == 'i' || t == 'u') ? 'd' : t;
        if (sp->prec >= 0) {
            /* precision pads the digits with zeros */
            char digits[64];
            snprintf(digits, sizeof digits, "%0*lld", (int)(sp->prec > 60 ? 60 : sp->prec),
                     (long long)(i < 0 ? -i : i));
            char body[80];
            snprintf(body, sizeof body, "%s%s", i < 0 ? "-" : sp->sign == '+' ? "+" : "", digits);
            pad_field(b, body, strlen(body), strlen(body), sp, 1);
            return;
        }
        format_int(c, b, i, sp);
        return;
    }
    sp->type = t;
    format_float(c, b, v.kind == JINJA_FLOAT ? v.f : (double)(v.kind == JINJA_INT ? v.i : v.b), sp);
}

jinja_value jj__percent_format(jinja_ctx *c, jinja_value fmt, jinja_value args)
{
    const char *p = fmt.s->s, *end = p + fmt.s->len;
    int markup = fmt.flags & JINJA_F_MARKUP, mapping = args.kind == JINJA_DICT;
    uint32_t next = 0;
    buf b;
    jj__buf_init(&b, c);
    while (p < end) {
        if (*p != '%') {
            buf_putc(&b, *p++);
            continue;
        }
        if (++p >= end) jj__raise(c, JJ_E_VALUE, "incomplete format");
        if (*p == '%') {
            buf_putc(&b, '%');
            p++;
            continue;
        }
        const char *key = NULL;
        size_t klen = 0;
        if (*p == '(') {
            key = ++p;
            while (p < end && *p != ')')
                p++;
            if (p >= end) jj__raise(c, JJ_E_VALUE, "incomplete format key");
            klen = (size_t)(p++ - key);
        }
        spec sp;
        memset(&sp, 0, sizeof sp);
        sp.width = sp.prec = -1;
        for (; p < end && strchr("-+ #0", *p); p++) {
            if (*p == '-') sp.align = '<';
            if (*p == '+' || (*p == ' ' && sp.sign != '+')) sp.sign = *p;
            if (*p == '#') sp.alt = 1;
            if (*p == '0') sp.zero = 1;
        }
        if (p < end && *p == '*') {
            sp.width = jj__int_arg(c, pct_arg(c, args, &next, 0, NULL, 0), "* width");
            p++;
        } else
            for (; p < end && *p >= '0' && *p <= '9'; p++)
                sp.width = (sp.width < 0 ? 0 : sp.width) * 10 + (*p - '0');
        if (p < end && *p == '.') {
            sp.prec = 0;
            for (p++; p < end && *p >= '0' && *p <= '9'; p++)
                sp.prec = sp.prec * 10 + (*p - '0');
        }
        if (sp.width > (int64_t)c->lim.max_output_bytes)
            jj__raise(c, JJ_E_LIMIT, "format width too large");
        if (p >= end) jj__raise(c, JJ_E_VALUE, "incomplete format");
        char t = *p++;
        if (!strchr("sradiuxXoeEfFgGc", t))
            jj__raise(c, JJ_E_VALUE, "unsupported format character '%c' (0x%x)", t,
                      (unsigned)(unsigned char)t);
        if (sp.zero && sp.align != '<' && t != 's' && t != 'r' && t != 'a')
            sp.fill = '0', sp.align = '=';
        if (!sp.align) sp.align = '>';
        pct_one(c, &b, t, pct_arg(c, args, &next, mapping, key, klen), &sp, markup);
    }
    /* Python skips this check for an argument that supports [] (a dict, but also a list) */
    int subscriptable = mapping || (args.kind == JINJA_LIST && args.l->type == JJ_L_LIST);
    if (!subscriptable &&
        ((jj__is_seq(args) && args.l->type == JJ_L_TUPLE) ? next < args.l->n : next == 0))
        jj__raise(c, JJ_E_TYPE, "not all arguments converted during string formatting");
    jinja_value r = jj__str_buf(c, &b);
    r.flags = (uint8_t)markup;
    return r;
}

/* ---- globals ------------------------------------------------------------------------------ */

static jinja_value g_range(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    if (a->n_kw) jj__raise(c, JJ_E_TYPE, "range() takes no keyword arguments");
    if (a->n_pos < 1 || a->n_pos > 3)
        jj__raise(c, JJ_E_TYPE, "range expected at most 3 arguments, got %u", a->n_pos);
    int64_t v[3] = {0, 0, 1};
    for (uint32_t i = 0; i < a->n_pos; i++)
        v[a->n_pos == 1 ? 1 : i] = jj__int_arg(c, a->pos[i], "range");
    if (!v[2]) jj__raise(c, JJ_E_VALUE, "range() arg 3 must not be zero");
    int64_t n = v[2] > 0 ? (v[1] > v[0] ? (v[1] - v[0] + v[2] - 1) / v[2] : 0)
                         : (v[0] > v[1] ? (v[0] - v[1] - v[2] - 1) / -v[2] : 0);
    if (n > JJ_MAX_RANGE)
        jj__raise(c, JJ_E_OVERFLOW,
                  "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                  JJ_MAX_RANGE);
    jinja_value l = jj__list_new(c, JJ_L_RANGE, (uint32_t)n);
    for (int64_t i = 0; i < n; i++)
        l.l->v[i] = jinja_int(v[0] + i * v[2]);
    l.l->n = (uint32_t)n;
    memcpy(l.l->r, v, sizeof v);
    (void)self;
    return l;
}

/* dict(mapping or pairs, **kw) and namespace(…) share this. */
static jinja_value build_dict(jinja_ctx *c, const jj_callargs *a, const char *fname)
{
    if (a->n_pos > 1)
        jj__raise(c, JJ_E_TYPE, "%s expected at most 1 argument, got %u", fname, a->n_pos);
    jinja_value d = jj__dict_new(c, 0);
    if (a->n_pos) {
        jinja_value src = a->pos[0];
        if (src.kind == JINJA_DICT || src.kind == JINJA_NAMESPACE) {
            for (uint32_t i = 0; i < src.d->n; i++)
                jj__dict_set(c, d, src.d->e[i].k, src.d->e[i].v);
        } else {
            jinja_value l = jj__iter_list(c, src);
            for (uint32_t i = 0; i < l.l->n; i++) {
                jinja_value pair = jj__iter_list(c, l.l->v[i]);
                if (pair.l->n != 2)
                    jj__raise(c, JJ_E_VALUE,
                              "dictionary update sequence element #%u has length %u; 2 is required",
                              i, pair.l->n);
                jj__dict_set(c, d, pair.l->v[0], pair.l->v[1]);
            }
        }
    }
    for (uint32_t i = 0; i < a->n_kw; i++)
        jj__dict_set(c, d, jj__str_cstr(c, a->kw_names[i]), a->kw[i]);
    return d;
}

static jinja_value g_dict(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    (void)self;
    return build_dict(c, a, "dict");
}

static jinja_value g_namespace(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    (void)self;
    jinja_value d = build_dict(c, a, "namespace");
    d.kind = JINJA_NAMESPACE;
    return d;
}

static jinja_value g_raise(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    static const char *const params[] = {"message"};
    jinja_value m;
    (void)self;
    jj__bind(c, "raise_exception", params, 1, a, &m);
    if (m.kind == JINJA__MISSING)
        jj__raise(c, JJ_E_TYPE,
                  "raise_exception() missing 1 required positional argument: 'message'");
    buf b;
    jj__buf_init(&b, c);
    jj__str(&b, m);
    jj__raise(c, JJ_E_RAISE, "%s", b.s ? b.s : "");
}

static jinja_value g_strftime(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    static const char *const params[] = {"format"};
    jinja_value f;
    (void)self;
    jj__bind(c, "strftime_now", params, 1, a, &f);
    if (f.kind != JINJA_STR)
        jj__raise(c, JJ_E_TYPE, "strftime() argument 1 must be str, not %s", jj__type_name(f));
    struct tm tmv;
    if (c->have_now)
        tmv = c->now;
    else {
        time_t now = time(NULL);
        localtime_r(&now, &tmv);
    }
    /* %f (microseconds) is Python's own; the clock has none here */
    buf fmt;
    jj__buf_init(&fmt, c);
    for (size_t i = 0; i < f.s->len; i++) {
        if (f.s->s[i] == '%' && i + 1 < f.s->len && f.s->s[i + 1] == 'f') {
            buf_puts(&fmt, "000000");
            i++;
        } else if (f.s->s[i] == '%' && i + 1 < f.s->len && f.s->s[i + 1] == '%') {
            buf_puts(&fmt, "%%");
            i++;
        } else
            buf_putc(&fmt, f.s->s[i]);
    }
    size_t cap = fmt.len * 8 + 64;
    char *out = jj__alloc(c, cap);
    size_t n = fmt.len ? strftime(out, cap, fmt.s, &tmv) : 0;
    return jj__str_new(c, out, n);
}

static jinja_value joiner_call(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    jj__bind(c, "joiner", NULL, 0, a, NULL);
    if (!self.l->v[1].b) {
        self.l->v[1] = jinja_bool(1);
        return jj__str_new(c, "", 0);
    }
    return self.l->v[0];
}

static jinja_value g_joiner(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    static const char *const params[] = {"sep"};
    jinja_value sep;
    (void)self;
    jj__bind(c, "joiner", params, 1, a, &sep);
    jinja_value state = jj__list_new(c, JJ_L_LIST, 2);
    state.l->v[0] = sep.kind == JINJA__MISSING ? jj__str_new(c, ", ", 2) : sep;
    state.l->v[1] = jinja_bool(0);
    state.l->n = 2;
    return jj__func_new(c, JJ_FN_OBJECT, "joiner", joiner_call, state);
}

jinja_value jj__global(jinja_ctx *c, const char *name, size_t n)
{
    static const struct {
        const char *name;
        jj_native_fn fn;
    } g[] = {
        {"range", g_range},           {"dict", g_dict},
        {"namespace", g_namespace},   {"joiner", g_joiner},
        {"cycler", jj__unsupported},  {"lipsum", jj__unsupported},
        {"raise_exception", g_raise}, {"strftime_now", g_strftime},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (strlen(g[i].name) == n && !memcmp(g[i].name, name, n))
            return jj__func_new(c, JJ_FN_GLOBAL, g[i].name, g[i].fn, jinja_none());
    return jj__missing;
}
