/*
 * jinja_filters_text.c — the filters that lay text out: title, center, indent, striptags,
 * truncate, urlencode, wordcount (the rest are in jinja_filters.c; JJ__FILTERS in
 * jinja_internal.h lists them all).
 */
#include <string.h>

#include "jinja/jinja_internal.h"

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

/* Jinja's title: words start after runs of -, whitespace, ( { [ < */
jinja_value jj__f_title(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "title", NULL, 0, a, NULL);
    jinja_value s = jj__soft_str(c, v);
    buf b;
    jj__buf_init(&b, c);
    size_t i = 0;
    int start = 1;
    char tmp[4];
    while (i < s.s->len) {
        uint32_t cp = jj__utf8_next(s.s->s, s.s->len, &i);
        int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jj__is_space(cp);
        uint32_t out = sep ? cp : start ? jj__upper(cp) : jj__lower(cp);
        start = sep;
        buf_put(&b, tmp, jj__utf8_put(tmp, out));
    }
    jinja_value r = jj__str_buf(c, &b);
    r.flags = s.flags;
    return r;
}

jinja_value jj__f_center(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("center", "width");
    jinja_value s = jj__soft_str(c, v), m = jj__method(c, s, "center", 6);
    jj_callargs ca = {.pos = given(arg[0]) ? arg : (jinja_value[]){jinja_int(80)}, .n_pos = 1};
    return jj__call_native(c, m, &ca);
}

jinja_value jj__f_indent(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("indent", "width", "first", "blank");
    if (v.kind != JINJA_STR) { /* Jinja does s += "\n" and then s.splitlines() */
        if (v.kind == JINJA_UNDEFINED) jj__undef_fail(c, v);
        if (v.kind == JINJA_LIST && v.l->type == JJ_L_LIST)
            jj__raise(c, JJ_E_ATTR, "'list' object has no attribute 'splitlines'");
        jj__raise(c, JJ_E_TYPE, "unsupported operand type(s) for +=: '%s' and 'str'",
                  jj__type_name(v));
    }
    jinja_value ind;
    if (given(arg[0]) && arg[0].kind == JINJA_STR)
        ind = arg[0];
    else {
        int64_t w = given(arg[0]) ? jj__int_arg(c, arg[0], "indent") : 4;
        buf t;
        jj__buf_init(&t, c);
        for (int64_t i = 0; i < w && i < 10000; i++)
            buf_putc(&t, ' ');
        ind = jj__str_buf(c, &t);
    }
    jinja_value s = jj__str_new(c, v.s->s, v.s->len);
    s = jj__binop(c, JJ_OP_ADD, s, jj__str_new(c, "\n", 1));
    jinja_value lines = jj__str_splitlines(c, s, 0);
    int blank = flag(arg[2], 0);
    buf b;
    jj__buf_init(&b, c);
    if (flag(arg[1], 0)) buf_put(&b, ind.s->s, ind.s->len);
    for (uint32_t i = 0; i < lines.l->n; i++) {
        jinja_value ln = lines.l->v[i];
        if (i) {
            buf_putc(&b, '\n');
            if (blank || ln.s->len) buf_put(&b, ind.s->s, ind.s->len);
        }
        buf_put(&b, ln.s->s, ln.s->len);
    }
    jinja_value r = jj__str_buf(c, &b);
    if (v.flags & JINJA_F_MARKUP) r.flags = JINJA_F_MARKUP;
    return r;
}

jinja_value jj__f_striptags(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "striptags", NULL, 0, a, NULL);
    jinja_value s = jj__plain_str(c, v);
    buf b;
    jj__buf_init(&b, c);
    int space = 0;
    for (size_t i = 0; i < s.s->len; i++) {
        char ch = s.s->s[i];
        if (ch == '<' && memchr(s.s->s + i, '>', s.s->len - i)) {
            while (s.s->s[i] != '>')
                i++;
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            space = b.len > 0;
            continue;
        }
        if (space) buf_putc(&b, ' ');
        space = 0;
        buf_putc(&b, ch);
    }
    return jj__str_buf(c, &b);
}

jinja_value jj__f_truncate(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    ARGS("truncate", "length", "killwords", "end", "leeway");
    int64_t len = given(arg[0]) ? jj__int_arg(c, arg[0], "truncate") : 255;
    int64_t leeway =
        given(arg[3]) && arg[3].kind != JINJA_NONE ? jj__int_arg(c, arg[3], "truncate") : 5;
    jinja_value end = given(arg[2]) ? jj__plain_str(c, arg[2]) : jj__str_new(c, "...", 3);
    if (jj__len(c, v) <= len + leeway) return v; /* short enough: the value itself, as Jinja does */
    jinja_value s = jj__soft_str(c, v);
    int64_t keep = len - (int64_t)end.s->n_cp;
    if (keep < 0) keep = 0;
    jinja_value head = jj__str_new(c, s.s->s, jj__cp_offset(s.s, keep));
    if (!flag(arg[1], 0)) {
        const char *sp = NULL;
        for (size_t i = head.s->len; i-- > 0;)
            if (head.s->s[i] == ' ') {
                sp = head.s->s + i;
                break;
            }
        if (sp) head = jj__str_new(c, head.s->s, (size_t)(sp - head.s->s));
    }
    return jj__binop(c, JJ_OP_ADD, head, end);
}

/* Jinja's url_quote: UTF-8 bytes, %XX but for letters, digits and _.-~ (and / outside a query
 * string, where a space is +). */
static void url_quote(jinja_ctx *c, buf *b, jinja_value v, int for_qs)
{
    jinja_value s = jj__plain_str(c, v);
    for (size_t i = 0; i < s.s->len; i++) {
        unsigned char ch = (unsigned char)s.s->s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            strchr("_.-~", ch) || (ch == '/' && !for_qs))
            buf_putc(b, (char)ch);
        else if (ch == ' ' && for_qs)
            buf_putc(b, '+');
        else
            buf_printf(b, "%%%02X", ch);
    }
}

jinja_value jj__f_urlencode(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "urlencode", NULL, 0, a, NULL);
    buf b;
    jj__buf_init(&b, c);
    if (v.kind != JINJA_LIST && v.kind != JINJA_DICT && v.kind != JINJA_UNDEFINED) {
        url_quote(c, &b, v, 0);
        return jj__str_buf(c, &b);
    }
    /* a mapping or pairs: k=v joined by & */
    jinja_value items = v.kind == JINJA_DICT ? jj__method(c, v, "items", 5) : jj__iter_list(c, v);
    if (v.kind == JINJA_DICT) items = jj__call_native(c, items, &(jj_callargs){0});
    for (uint32_t i = 0; i < items.l->n; i++) {
        jinja_value pair = jj__iter_list(c, items.l->v[i]);
        if (pair.l->n != 2)
            jj__raise(c, JJ_E_VALUE, "%s values to unpack (expected 2)",
                      pair.l->n < 2 ? "not enough" : "too many");
        if (i) buf_putc(&b, '&');
        url_quote(c, &b, pair.l->v[0], 1);
        buf_putc(&b, '=');
        url_quote(c, &b, pair.l->v[1], 1);
    }
    return jj__str_buf(c, &b);
}

jinja_value jj__f_wordcount(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jj__bind(c, "wordcount", NULL, 0, a, NULL);
    jinja_value s = jj__soft_str(c, v);
    int64_t n = 0;
    int in = 0;
    for (size_t i = 0; i < s.s->len; i++) {
        unsigned char ch = (unsigned char)s.s->s[i];
        int w = ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') ||
                ((ch | 32) >= 'a' && (ch | 32) <= 'z');
        if (w && !in) n++;
        in = w;
    }
    return jinja_int(n);
}
