/*
 * jinja_methods.c — the Python methods templates call on values (s.split(), d.items(),
 * l.index(), …), with the immutable sandbox's rules, and the string helpers the filters share.
 *
 * A method is looked up by name per type; found, it is a bound callable. Methods that would
 * modify a list or dict (append, extend, insert, remove, reverse, sort, update, setdefault,
 * pop / popitem / clear on dicts) are the sandbox's refusal instead: an Undefined that raises
 * SecurityError when called. list.pop and list.clear are allowed (as in Jinja 3.1.2) and act
 * in place. On a Markup string the methods markupsafe wraps escape their string arguments and
 * return Markup. Indices are code points. Called by jinja_ops.c (attribute access) and the
 * filters.
 *
 * str.format is jinja_format.c's, which looks its fields up with jinja_ops.c's attribute
 * access, which finds methods here: a cycle of three files (see jinja_ops.c) through which no
 * call chain runs, since a field is looked up, never called.
 */
#include <string.h>

#include "jinja/jinja_internal.h"

/* ---- code points -------------------------------------------------------------------------- */

/* The code points of s as an arena array; *n their number. */
static uint32_t *cps(jinja_ctx *c, jinja_value s, size_t *n)
{
    uint32_t *v = jj__alloc(c, sizeof *v * (s.s->n_cp + 1));
    size_t i = 0, k = 0;
    while (i < s.s->len)
        v[k++] = jj__utf8_next(s.s->s, s.s->len, &i);
    *n = k;
    return v;
}

static jinja_value from_cps(jinja_ctx *c, const uint32_t *v, size_t n, int flags)
{
    buf b;
    jj__buf_init(&b, c);
    char tmp[4];
    for (size_t i = 0; i < n; i++)
        buf_put(&b, tmp, jj__utf8_put(tmp, v[i]));
    jinja_value r = jj__str_buf(c, &b);
    r.flags = (uint8_t)flags;
    return r;
}

static jinja_value sub(jinja_ctx *c, jinja_value s, size_t a, size_t b)
{
    jinja_value r = jj__str_new(c, s.s->s + a, b - a);
    r.flags = s.flags;
    return r;
}

static int is_cased(uint32_t cp)
{
    return jj__lower(cp) != cp || jj__upper(cp) != cp;
}

static int is_upper_cp(uint32_t cp)
{
    return jj__lower(cp) != cp;
}

static int is_lower_cp(uint32_t cp)
{
    return jj__upper(cp) != cp;
}

static int is_alpha_cp(uint32_t cp)
{
    return (cp < 0x80 && ((cp | 32) >= 'a' && (cp | 32) <= 'z')) ||
           (cp >= 0xC0 && cp != 0xD7 && cp != 0xF7 && !jj__is_space(cp) && cp < 0x2000) ||
           (cp >= 0x3040 && cp < 0xA000) || (cp >= 0xAC00 && cp < 0xD7A4);
}

static int is_digit_cp(uint32_t cp)
{
    return cp >= '0' && cp <= '9';
}

/* ---- string helpers ----------------------------------------------------------------------- */

static int in_set(const uint32_t *set, size_t n, uint32_t cp)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == cp) return 1;
    return 0;
}

jinja_value jj__str_strip(jinja_ctx *c, jinja_value s, jinja_value chars, int left, int right)
{
    size_t n, nset = 0;
    uint32_t *v = cps(c, s, &n), *set = NULL;
    int ws = chars.kind == JINJA__MISSING || chars.kind == JINJA_NONE;
    if (!ws) {
        if (chars.kind != JINJA_STR) jj__raise(c, JJ_E_TYPE, "strip arg must be None or str");
        set = cps(c, chars, &nset);
    }
    size_t a = 0, b = n;
    while (left && a < b && (ws ? jj__is_space(v[a]) : in_set(set, nset, v[a])))
        a++;
    while (right && b > a && (ws ? jj__is_space(v[b - 1]) : in_set(set, nset, v[b - 1])))
        b--;
    if (a == 0 && b == n) return s;
    return sub(c, s, jj__cp_offset(s.s, (int64_t)a), jj__cp_offset(s.s, (int64_t)b));
}

jinja_value jj__str_case(jinja_ctx *c, jinja_value s, int mode)
{
    size_t n;
    uint32_t *v = cps(c, s, &n);
    int prev_cased = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = v[i];
        switch (mode) {
        case 0:
            v[i] = jj__lower(cp);
            break;
        case 1:
            v[i] = jj__upper(cp);
            break;
        case 2:
            v[i] = i ? jj__lower(cp) : jj__upper(cp);
            break;
        case 3:
            v[i] = prev_cased ? jj__lower(cp) : jj__upper(cp);
            prev_cased = is_cased(cp);
            break;
        default:
            v[i] = is_upper_cp(cp) ? jj__lower(cp) : jj__upper(cp);
        }
    }
    return from_cps(c, v, n, s.flags);
}

jinja_value jj__str_replace(jinja_ctx *c, jinja_value s, jinja_value old, jinja_value rep,
                            int64_t count)
{
    if (old.kind != JINJA_STR || rep.kind != JINJA_STR)
        jj__raise(c, JJ_E_TYPE, "replace() argument must be str");
    buf b;
    jj__buf_init(&b, c);
    const char *p = s.s->s, *end = s.s->s + s.s->len;
    if (!old.s->len) {
        size_t i = 0;
        while (count != 0) {
            buf_put(&b, rep.s->s, rep.s->len);
            if (count > 0) count--;
            if (i >= s.s->len) break;
            size_t st = i;
            jj__utf8_next(s.s->s, s.s->len, &i);
            buf_put(&b, s.s->s + st, i - st);
        }
        if (i < s.s->len) buf_put(&b, s.s->s + i, s.s->len - i);
    } else {
        while (count != 0) {
            const char *q = memmem(p, (size_t)(end - p), old.s->s, old.s->len);
            if (!q) break;
            buf_put(&b, p, (size_t)(q - p));
            buf_put(&b, rep.s->s, rep.s->len);
            p = q + old.s->len;
            if (count > 0) count--;
        }
        buf_put(&b, p, (size_t)(end - p));
    }
    jinja_value r = jj__str_buf(c, &b);
    r.flags = s.flags;
    return r;
}

static int is_line_break(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

jinja_value jj__str_splitlines(jinja_ctx *c, jinja_value s, int keepends)
{
    jinja_value out = jj__list_new(c, JJ_L_LIST, 0);
    size_t i = 0, start = 0;
    while (i < s.s->len) {
        size_t at = i;
        uint32_t cp = jj__utf8_next(s.s->s, s.s->len, &i);
        if (!is_line_break(cp)) continue;
        if (cp == '\r' && i < s.s->len && s.s->s[i] == '\n') i++;
        jj__list_push(c, out, sub(c, s, start, keepends ? i : at));
        start = i;
    }
    if (start < s.s->len) jj__list_push(c, out, sub(c, s, start, s.s->len));
    return out;
}

int jj__str_cased(jinja_value s, int upper)
{
    size_t i = 0;
    int any = 0;
    while (i < s.s->len) {
        uint32_t cp = jj__utf8_next(s.s->s, s.s->len, &i);
        if (upper ? is_lower_cp(cp) : is_upper_cp(cp)) return 0;
        if (upper ? is_upper_cp(cp) : is_lower_cp(cp)) any = 1;
    }
    return any;
}

/* ---- str methods -------------------------------------------------------------------------- */

#define ARGS(name, ...)                                                                            \
    static const char *const params_[] = {__VA_ARGS__};                                            \
    jinja_value arg[sizeof params_ / sizeof params_[0]];                                           \
    jj__bind(c, name, params_, (int)(sizeof params_ / sizeof params_[0]), a, arg)

static int given(jinja_value v)
{
    return v.kind != JINJA__MISSING;
}

static jinja_value need_str(jinja_ctx *c, jinja_value v, const char *what)
{
    if (v.kind == JINJA_UNDEFINED) jj__undef_fail(c, v);
    if (v.kind != JINJA_STR)
        jj__raise(c, JJ_E_TYPE, "%s must be str, not %s", what, jj__type_name(v));
    return v;
}

/* Byte range of code points [start, end) of s (Python's optional start / end arguments). */
static void cp_range(jinja_ctx *c, jinja_value s, jinja_value st, jinja_value en, size_t *a,
                     size_t *b)
{
    int64_t len = (int64_t)s.s->n_cp, x = 0, y = len;
    if (given(st) && st.kind != JINJA_NONE) x = jj__int_arg(c, st, "slice index");
    if (given(en) && en.kind != JINJA_NONE) y = jj__int_arg(c, en, "slice index");
    if (x < 0) x = x + len < 0 ? 0 : x + len;
    if (y < 0) y = y + len < 0 ? 0 : y + len;
    if (x > len) x = len;
    if (y > len) y = len;
    if (y < x) y = x;
    *a = jj__cp_offset(s.s, x);
    *b = jj__cp_offset(s.s, y);
}

static jinja_value m_affix(jinja_ctx *c, jinja_value self, const jj_callargs *a, int ends)
{
    ARGS(ends ? "endswith" : "startswith", "prefix", "start", "end");
    size_t x, y;
    cp_range(c, self, arg[1], arg[2], &x, &y);
    jinja_value p = arg[0];
    uint32_t n = 1;
    const jinja_value *opts = &p;
    if (p.kind == JINJA_LIST && p.l->type == JJ_L_TUPLE) {
        opts = p.l->v;
        n = p.l->n;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (opts[i].kind != JINJA_STR)
            jj__raise(c, JJ_E_TYPE, "%s first arg must be str or a tuple of str, not %s",
                      ends ? "endswith" : "startswith", jj__type_name(opts[i]));
        size_t l = opts[i].s->len;
        if (l > y - x) continue;
        const char *at = ends ? self.s->s + y - l : self.s->s + x;
        if (!memcmp(at, opts[i].s->s, l)) return jinja_bool(1);
    }
    return jinja_bool(0);
}

static jinja_value m_startswith(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_affix(c, self, a, 0);
}

static jinja_value m_endswith(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_affix(c, self, a, 1);
}

static jinja_value m_strip_any(jinja_ctx *c, jinja_value self, const jj_callargs *a, int l, int r)
{
    ARGS(l && r ? "strip" : l ? "lstrip" : "rstrip", "chars");
    return jj__str_strip(c, self, arg[0], l, r);
}

static jinja_value m_strip(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_strip_any(c, self, a, 1, 1);
}

static jinja_value m_lstrip(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_strip_any(c, self, a, 1, 0);
}

static jinja_value m_rstrip(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_strip_any(c, self, a, 0, 1);
}

/* split / rsplit: whitespace runs when sep is None, else the separator. */
static jinja_value split_any(jinja_ctx *c, jinja_value self, const jj_callargs *a, int from_right)
{
    ARGS(from_right ? "rsplit" : "split", "sep", "maxsplit");
    int64_t max = given(arg[1]) ? jj__int_arg(c, arg[1], "maxsplit") : -1;
    jinja_value out = jj__list_new(c, JJ_L_LIST, 0);
    size_t n;
    uint32_t *v = cps(c, self, &n);
    if (!given(arg[0]) || arg[0].kind == JINJA_NONE) {
        /* collect [start, end) code-point pieces, then apply maxsplit from the chosen side */
        size_t *st = jj__alloc(c, sizeof *st * (n + 1)), *en = jj__alloc(c, sizeof *en * (n + 1));
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            while (i < n && jj__is_space(v[i]))
                i++;
            if (i >= n) break;
            st[k] = i;
            while (i < n && !jj__is_space(v[i]))
                i++;
            en[k++] = i;
        }
        if (max >= 0 && (size_t)max + 1 < k) {
            /* the unsplit remainder keeps its inner and outer whitespace */
            if (from_right) {
                size_t first = k - (size_t)max - 1;
                memmove(st + 1, st + first + 1, sizeof *st * (size_t)max);
                memmove(en, en + first, sizeof *en * ((size_t)max + 1));
                st[0] = 0;
            } else
                en[max] = n;
            k = (size_t)max + 1;
        }
        for (size_t i = 0; i < k; i++)
            jj__list_push(c, out,
                          sub(c, self, jj__cp_offset(self.s, (int64_t)st[i]),
                              jj__cp_offset(self.s, (int64_t)en[i])));
        return out;
    }
    jinja_value sep = need_str(c, arg[0], "sep");
    if (!sep.s->len) jj__raise(c, JJ_E_VALUE, "empty separator");
    const char *s = self.s->s;
    size_t len = self.s->len, l = sep.s->len;
    if (!from_right) {
        size_t p = 0;
        for (;;) {
            const char *q = max != 0 ? memmem(s + p, len - p, sep.s->s, l) : NULL;
            if (!q) break;
            jj__list_push(c, out, sub(c, self, p, (size_t)(q - s)));
            p = (size_t)(q - s) + l;
            if (max > 0) max--;
        }
        jj__list_push(c, out, sub(c, self, p, len));
        return out;
    }
    jinja_value rev = jj__list_new(c, JJ_L_LIST, 0);
    size_t e = len;
    while (max != 0 && e >= l) {
        size_t q = e - l + 1, found = (size_t)-1;
        while (q-- > 0)
            if (!memcmp(s + q, sep.s->s, l)) {
                found = q;
                break;
            }
        if (found == (size_t)-1) break;
        jj__list_push(c, rev, sub(c, self, found + l, e));
        e = found;
        if (max > 0) max--;
    }
    jj__list_push(c, rev, sub(c, self, 0, e));
    for (uint32_t i = rev.l->n; i-- > 0;)
        jj__list_push(c, out, rev.l->v[i]);
    (void)v;
    return out;
}

static jinja_value m_split(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return split_any(c, self, a, 0);
}

static jinja_value m_rsplit(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return split_any(c, self, a, 1);
}

static jinja_value m_splitlines(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    ARGS("splitlines", "keepends");
    return jj__str_splitlines(c, self, given(arg[0]) && jj__truthy(arg[0]));
}

static jinja_value m_replace(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    ARGS("replace", "old", "new", "count");
    int64_t n = given(arg[2]) ? jj__int_arg(c, arg[2], "count") : -1;
    return jj__str_replace(c, self, need_str(c, arg[0], "old"), need_str(c, arg[1], "new"), n);
}

static jinja_value m_case(jinja_ctx *c, jinja_value self, const jj_callargs *a, const char *nm,
                          int mode)
{
    jj__bind(c, nm, NULL, 0, a, NULL);
    return jj__str_case(c, self, mode);
}

static jinja_value m_lower(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_case(c, self, a, "lower", 0);
}

static jinja_value m_upper(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_case(c, self, a, "upper", 1);
}

static jinja_value m_capitalize(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_case(c, self, a, "capitalize", 2);
}

static jinja_value m_title(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_case(c, self, a, "title", 3);
}

static jinja_value m_swapcase(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return m_case(c, self, a, "swapcase", 4);
}

/* find / rfind / index / rindex / count */
static jinja_value search(jinja_ctx *c, jinja_value self, const jj_callargs *a, const char *nm)
{
    ARGS(nm, "sub", "start", "end");
    jinja_value needle = need_str(c, arg[0], "substring");
    size_t x, y, l = needle.s->len;
    cp_range(c, self, arg[1], arg[2], &x, &y);
    const char *s = self.s->s;
    int rev = nm[0] == 'r', count = !strcmp(nm, "count");
    int64_t found = -1, n = 0;
    if (count) {
        if (!l) return jinja_int((int64_t)(jj__len(c, sub(c, self, x, y)) + 1));
        for (size_t p = x; p + l <= y;) {
            const char *q = memmem(s + p, y - p, needle.s->s, l);
            if (!q || (size_t)(q - s) + l > y) break;
            n++;
            p = (size_t)(q - s) + l;
        }
        return jinja_int(n);
    }
    if (l <= y - x) {
        if (!rev) {
            const char *q = memmem(s + x, y - x, needle.s->s, l);
            if (q) found = q - s;
        } else
            for (size_t p = y - l + 1; p-- > x;)
                if (!memcmp(s + p, needle.s->s, l)) {
                    found = (int64_t)p;
                    break;
                }
    }
    if (found < 0) {
        if (strstr(nm, "index")) jj__raise(c, JJ_E_VALUE, "substring not found");
        return jinja_int(-1);
    }
    return jinja_int((int64_t)jj__len(c, sub(c, self, 0, (size_t)found)));
}

static jinja_value m_find(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return search(c, self, a, "find");
}

static jinja_value m_rfind(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return search(c, self, a, "rfind");
}

static jinja_value m_sindex(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return search(c, self, a, "index");
}

static jinja_value m_rindex(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return search(c, self, a, "rindex");
}

static jinja_value m_scount(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return search(c, self, a, "count");
}

static jinja_value m_join(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    ARGS("join", "iterable");
    jinja_value l = jj__iter_list(c, arg[0]);
    buf b;
    jj__buf_init(&b, c);
    for (uint32_t i = 0; i < l.l->n; i++) {
        jinja_value it = l.l->v[i];
        if (self.flags & JINJA_F_MARKUP) it = jj__escape(c, it);
        if (it.kind != JINJA_STR)
            jj__raise(c, JJ_E_TYPE, "sequence item %u: expected str instance, %s found", i,
                      jj__type_name(it));
        if (i) buf_put(&b, self.s->s, self.s->len);
        buf_put(&b, it.s->s, it.s->len);
    }
    jinja_value r = jj__str_buf(c, &b);
    r.flags = self.flags;
    return r;
}

/* center / ljust / rjust / zfill */
static jinja_value pad(jinja_ctx *c, jinja_value self, const jj_callargs *a, const char *nm)
{
    ARGS(nm, "width", "fillchar");
    int64_t w = jj__int_arg(c, arg[0], nm), len = (int64_t)self.s->n_cp;
    if (w > (int64_t)c->lim.max_output_bytes) jj__raise(c, JJ_E_LIMIT, "%s width too large", nm);
    const char *fill = " ";
    size_t fl = 1;
    if (given(arg[1])) {
        jinja_value f = need_str(c, arg[1], "fillchar");
        if (f.s->n_cp != 1)
            jj__raise(c, JJ_E_TYPE, "The fill character must be exactly one character long");
        fill = f.s->s;
        fl = f.s->len;
    }
    if (w <= len) return self;
    int64_t total = w - len, left = 0;
    if (!strcmp(nm, "center"))
        left = total / 2 + (total & w & 1);
    else if (!strcmp(nm, "rjust") || !strcmp(nm, "zfill"))
        left = total;
    buf b;
    jj__buf_init(&b, c);
    size_t body = 0;
    if (!strcmp(nm, "zfill")) {
        fill = "0";
        if (self.s->len && (self.s->s[0] == '-' || self.s->s[0] == '+')) {
            buf_putc(&b, self.s->s[0]);
            body = 1;
        }
    }
    for (int64_t i = 0; i < left; i++)
        buf_put(&b, fill, fl);
    buf_put(&b, self.s->s + body, self.s->len - body);
    for (int64_t i = left; i < total; i++)
        buf_put(&b, fill, fl);
    jinja_value r = jj__str_buf(c, &b);
    r.flags = self.flags;
    return r;
}

static jinja_value m_center(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return pad(c, self, a, "center");
}

static jinja_value m_ljust(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return pad(c, self, a, "ljust");
}

static jinja_value m_rjust(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return pad(c, self, a, "rjust");
}

static jinja_value m_zfill(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return pad(c, self, a, "zfill");
}

static jinja_value partition(jinja_ctx *c, jinja_value self, const jj_callargs *a, int rev)
{
    ARGS(rev ? "rpartition" : "partition", "sep");
    jinja_value sep = need_str(c, arg[0], "sep");
    if (!sep.s->len) jj__raise(c, JJ_E_VALUE, "empty separator");
    const char *s = self.s->s, *q = NULL;
    size_t len = self.s->len, l = sep.s->len;
    if (!rev)
        q = memmem(s, len, sep.s->s, l);
    else
        for (size_t p = len >= l ? len - l + 1 : 0; p-- > 0;)
            if (!memcmp(s + p, sep.s->s, l)) {
                q = s + p;
                break;
            }
    jinja_value t = jj__list_new(c, JJ_L_TUPLE, 3), empty = sub(c, self, 0, 0);
    if (!q) {
        t.l->v[0] = rev ? empty : self;
        t.l->v[1] = empty;
        t.l->v[2] = rev ? self : empty;
    } else {
        t.l->v[0] = sub(c, self, 0, (size_t)(q - s));
        t.l->v[1] = sep;
        t.l->v[2] = sub(c, self, (size_t)(q - s) + l, len);
    }
    t.l->n = 3;
    return t;
}

static jinja_value m_partition(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return partition(c, self, a, 0);
}

static jinja_value m_rpartition(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return partition(c, self, a, 1);
}

static jinja_value remove_affix(jinja_ctx *c, jinja_value self, const jj_callargs *a, int suffix)
{
    ARGS(suffix ? "removesuffix" : "removeprefix", "affix");
    jinja_value p = need_str(c, arg[0], "affix");
    size_t l = p.s->len, n = self.s->len;
    if (!l || l > n) return self;
    if (!suffix && !memcmp(self.s->s, p.s->s, l)) return sub(c, self, l, n);
    if (suffix && !memcmp(self.s->s + n - l, p.s->s, l)) return sub(c, self, 0, n - l);
    return self;
}

static jinja_value m_removeprefix(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return remove_affix(c, self, a, 0);
}

static jinja_value m_removesuffix(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return remove_affix(c, self, a, 1);
}

/* isalnum / isalpha / isdigit / isdecimal / isnumeric / isspace / isascii / isidentifier /
 * islower / isupper / istitle / isprintable */
static jinja_value predicate(jinja_ctx *c, jinja_value self, const jj_callargs *a, const char *nm)
{
    jj__bind(c, nm, NULL, 0, a, NULL);
    if (!strcmp(nm, "islower")) return jinja_bool(jj__str_cased(self, 0));
    if (!strcmp(nm, "isupper")) return jinja_bool(jj__str_cased(self, 1));
    size_t n;
    uint32_t *v = cps(c, self, &n);
    if (!strcmp(nm, "isascii")) {
        for (size_t i = 0; i < n; i++)
            if (v[i] >= 0x80) return jinja_bool(0);
        return jinja_bool(1);
    }
    if (!n) return jinja_bool(!strcmp(nm, "isprintable"));
    if (!strcmp(nm, "istitle")) {
        int prev = 0, any = 0;
        for (size_t i = 0; i < n; i++) {
            if (is_upper_cp(v[i])) {
                if (prev) return jinja_bool(0);
                prev = any = 1;
            } else if (is_lower_cp(v[i])) {
                if (!prev) return jinja_bool(0);
            } else
                prev = 0;
        }
        return jinja_bool(any);
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = v[i];
        int ok;
        if (!strcmp(nm, "isalpha"))
            ok = is_alpha_cp(cp);
        else if (!strcmp(nm, "isalnum"))
            ok = is_alpha_cp(cp) || is_digit_cp(cp);
        else if (!strcmp(nm, "isspace"))
            ok = jj__is_space(cp);
        else if (!strcmp(nm, "isidentifier"))
            ok = is_alpha_cp(cp) || cp == '_' || (i && is_digit_cp(cp));
        else if (!strcmp(nm, "isprintable"))
            ok = cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp <= 0xA0);
        else
            ok = is_digit_cp(cp);
        if (!ok) return jinja_bool(0);
    }
    return jinja_bool(1);
}

#define PRED(fn, nm)                                                                               \
    static jinja_value fn(jinja_ctx *c, jinja_value self, const jj_callargs *a)                    \
    {                                                                                              \
        return predicate(c, self, a, nm);                                                          \
    }
PRED(m_isalnum, "isalnum")
PRED(m_isalpha, "isalpha")
PRED(m_isascii, "isascii")
PRED(m_isdigit, "isdigit")
PRED(m_isdecimal, "isdecimal")
PRED(m_isnumeric, "isnumeric")
PRED(m_isspace, "isspace")
PRED(m_isidentifier, "isidentifier")
PRED(m_islower, "islower")
PRED(m_isupper, "isupper")
PRED(m_istitle, "istitle")
PRED(m_isprintable, "isprintable")

jinja_value jj__str_format(jinja_ctx *c, jinja_value self, const jj_callargs *a);

static jinja_value m_format(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return jj__str_format(c, self, a);
}

/* ---- dict and list methods ---------------------------------------------------------------- */

static jinja_value m_get(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    ARGS("get", "key", "default");
    jj_entry *e = jj__dict_find(c, self, arg[0]);
    if (e) return e->v;
    return given(arg[1]) ? arg[1] : jinja_none();
}

static jinja_value dict_view(jinja_ctx *c, jinja_value self, const jj_callargs *a, int type)
{
    jj__bind(c,
             type == JJ_L_ITEMS  ? "items"
             : type == JJ_L_KEYS ? "keys"
                                 : "values",
             NULL, 0, a, NULL);
    jinja_value l = jj__list_new(c, type, self.d->n);
    for (uint32_t i = 0; i < self.d->n; i++) {
        jinja_value v = self.d->e[i].v;
        if (type == JJ_L_KEYS) v = self.d->e[i].k;
        if (type == JJ_L_ITEMS) {
            v = jj__list_new(c, JJ_L_TUPLE, 2);
            v.l->v[0] = self.d->e[i].k;
            v.l->v[1] = self.d->e[i].v;
            v.l->n = 2;
        }
        l.l->v[i] = v;
    }
    l.l->n = self.d->n;
    return l;
}

static jinja_value m_items(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return dict_view(c, self, a, JJ_L_ITEMS);
}

static jinja_value m_keys(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return dict_view(c, self, a, JJ_L_KEYS);
}

static jinja_value m_values(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    return dict_view(c, self, a, JJ_L_VALUES);
}

static jinja_value m_copy(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    jj__bind(c, "copy", NULL, 0, a, NULL);
    if (self.kind == JINJA_DICT) {
        jinja_value d = jj__dict_new(c, self.d->n);
        for (uint32_t i = 0; i < self.d->n; i++)
            jj__dict_set(c, d, self.d->e[i].k, self.d->e[i].v);
        return d;
    }
    return jj__list_of(c, JJ_L_LIST, self.l->v, self.l->n);
}

static jinja_value m_lcount(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    ARGS("count", "value");
    int64_t n = 0;
    for (uint32_t i = 0; i < self.l->n; i++)
        n += jj__equal(self.l->v[i], arg[0]);
    return jinja_int(n);
}

static jinja_value m_lindex(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    ARGS("index", "value", "start", "stop");
    int64_t n = self.l->n, x = 0, y = n;
    if (given(arg[1])) x = jj__int_arg(c, arg[1], "index");
    if (given(arg[2])) y = jj__int_arg(c, arg[2], "index");
    if (x < 0) x = x + n < 0 ? 0 : x + n;
    if (y < 0) y = y + n < 0 ? 0 : y + n;
    for (int64_t i = x; i < y && i < n; i++)
        if (jj__equal(self.l->v[i], arg[0])) return jinja_int(i);
    buf b;
    jj__buf_init(&b, c);
    jj__repr(&b, arg[0]);
    jj__raise(c, JJ_E_VALUE, "%.200s is not in %s", b.s ? b.s : "", jj__type_name(self));
}

static jinja_value m_pop(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    ARGS("pop", "index");
    struct jinja_list *l = self.l;
    if (!l->n) jj__raise(c, JJ_E_INDEX, "pop from empty list");
    int64_t i = given(arg[0]) ? jj__int_arg(c, arg[0], "pop") : (int64_t)l->n - 1;
    if (i < 0) i += l->n;
    if (i < 0 || i >= (int64_t)l->n) jj__raise(c, JJ_E_INDEX, "pop index out of range");
    jinja_value v = l->v[i];
    memmove(l->v + i, l->v + i + 1, sizeof *l->v * (l->n - (uint32_t)i - 1));
    l->n--;
    return v;
}

static jinja_value m_clear(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    jj__bind(c, "clear", NULL, 0, a, NULL);
    self.l->n = 0;
    return jinja_none();
}

/* ---- dispatch ----------------------------------------------------------------------------- */

enum { M_MUTATES = 1, M_MARKUP = 2 };

typedef struct jj_method {
    const char *name;
    jj_native_fn fn;
    int flags;
} jj_method;

static const jj_method str_methods[] = {
    {"capitalize", m_capitalize, M_MARKUP},
    {"casefold", m_lower, 0},
    {"center", m_center, M_MARKUP},
    {"count", m_scount, 0},
    {"encode", jj__unsupported, 0},
    {"endswith", m_endswith, 0},
    {"expandtabs", jj__unsupported, 0},
    {"find", m_find, 0},
    {"format", m_format, 0},
    {"format_map", jj__unsupported, 0},
    {"index", m_sindex, 0},
    {"isalnum", m_isalnum, 0},
    {"isalpha", m_isalpha, 0},
    {"isascii", m_isascii, 0},
    {"isdecimal", m_isdecimal, 0},
    {"isdigit", m_isdigit, 0},
    {"isidentifier", m_isidentifier, 0},
    {"islower", m_islower, 0},
    {"isnumeric", m_isnumeric, 0},
    {"isprintable", m_isprintable, 0},
    {"isspace", m_isspace, 0},
    {"istitle", m_istitle, 0},
    {"isupper", m_isupper, 0},
    {"join", m_join, 0},
    {"ljust", m_ljust, M_MARKUP},
    {"lower", m_lower, M_MARKUP},
    {"lstrip", m_lstrip, M_MARKUP},
    {"maketrans", jj__unsupported, 0},
    {"partition", m_partition, M_MARKUP},
    {"removeprefix", m_removeprefix, 0},
    {"removesuffix", m_removesuffix, 0},
    {"replace", m_replace, M_MARKUP},
    {"rfind", m_rfind, 0},
    {"rindex", m_rindex, 0},
    {"rjust", m_rjust, M_MARKUP},
    {"rpartition", m_rpartition, M_MARKUP},
    {"rsplit", m_rsplit, M_MARKUP},
    {"rstrip", m_rstrip, M_MARKUP},
    {"split", m_split, M_MARKUP},
    {"splitlines", m_splitlines, M_MARKUP},
    {"startswith", m_startswith, 0},
    {"strip", m_strip, M_MARKUP},
    {"swapcase", m_swapcase, M_MARKUP},
    {"title", m_title, M_MARKUP},
    {"translate", jj__unsupported, 0},
    {"upper", m_upper, M_MARKUP},
    {"zfill", m_zfill, M_MARKUP},
};

static const jj_method dict_methods[] = {
    {"clear", NULL, M_MUTATES},  {"copy", m_copy, 0},          {"fromkeys", jj__unsupported, 0},
    {"get", m_get, 0},           {"items", m_items, 0},        {"keys", m_keys, 0},
    {"pop", NULL, M_MUTATES},    {"popitem", NULL, M_MUTATES}, {"setdefault", NULL, M_MUTATES},
    {"update", NULL, M_MUTATES}, {"values", m_values, 0},
};

static const jj_method list_methods[] = {
    {"append", NULL, M_MUTATES},  {"clear", m_clear, 0},       {"copy", m_copy, 0},
    {"count", m_lcount, 0},       {"extend", NULL, M_MUTATES}, {"index", m_lindex, 0},
    {"insert", NULL, M_MUTATES},  {"pop", m_pop, 0},           {"remove", NULL, M_MUTATES},
    {"reverse", NULL, M_MUTATES}, {"sort", NULL, M_MUTATES},
};

static const jj_method tuple_methods[] = {{"count", m_lcount, 0}, {"index", m_lindex, 0}};

/* Markup's wrapped methods: string arguments escaped, the result Markup. */
static jinja_value markup_call(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    const jj_method *m = NULL;
    jinja_value s = self.l->v[0], fnv = self.l->v[1];
    (void)fnv;
    for (size_t i = 0; i < sizeof str_methods / sizeof str_methods[0]; i++)
        if (!strcmp(str_methods[i].name, self.l->v[1].s->s)) m = &str_methods[i];
    jj_callargs e = *a;
    jinja_value *pos = jj__alloc(c, sizeof *pos * (a->n_pos + 1));
    jinja_value *kw = jj__alloc(c, sizeof *kw * (a->n_kw + 1));
    for (uint32_t i = 0; i < a->n_pos; i++)
        pos[i] = a->pos[i].kind == JINJA_STR ? jj__escape(c, a->pos[i]) : a->pos[i];
    for (uint32_t i = 0; i < a->n_kw; i++)
        kw[i] = a->kw[i].kind == JINJA_STR ? jj__escape(c, a->kw[i]) : a->kw[i];
    e.pos = pos;
    e.kw = kw;
    jinja_value r = m->fn(c, s, &e);
    if (r.kind == JINJA_STR) r.flags = JINJA_F_MARKUP;
    if (r.kind == JINJA_LIST)
        for (uint32_t i = 0; i < r.l->n; i++)
            if (r.l->v[i].kind == JINJA_STR) r.l->v[i].flags = JINJA_F_MARKUP;
    return r;
}

jinja_value jj__method(jinja_ctx *c, jinja_value self, const char *name, size_t n)
{
    const jj_method *t;
    size_t count;
    if (self.kind == JINJA_STR) {
        t = str_methods;
        count = sizeof str_methods / sizeof str_methods[0];
    } else if (self.kind == JINJA_DICT) {
        t = dict_methods;
        count = sizeof dict_methods / sizeof dict_methods[0];
    } else if (self.kind == JINJA_LIST && self.l->type == JJ_L_LIST) {
        t = list_methods;
        count = sizeof list_methods / sizeof list_methods[0];
    } else if (self.kind == JINJA_LIST && self.l->type == JJ_L_TUPLE) {
        t = tuple_methods;
        count = sizeof tuple_methods / sizeof tuple_methods[0];
    } else
        return jj__missing;
    for (size_t i = 0; i < count; i++) {
        if (strlen(t[i].name) != n || memcmp(t[i].name, name, n)) continue;
        if (t[i].flags & M_MUTATES)
            return jj__undef(c, JJ_E_SECURITY, "access to attribute '%s' of '%s' object is unsafe.",
                             t[i].name, jj__type_name(self));
        if ((t[i].flags & M_MARKUP) && self.kind == JINJA_STR && (self.flags & JINJA_F_MARKUP)) {
            jinja_value pair = jj__list_new(c, JJ_L_TUPLE, 2);
            pair.l->v[0] = self;
            pair.l->v[1] = jj__str_cstr(c, t[i].name);
            pair.l->n = 2;
            jinja_value f = jj__func_new(c, JJ_FN_METHOD, t[i].name, markup_call, pair);
            f.fn->self = pair;
            return f;
        }
        return jj__func_new(c, JJ_FN_METHOD, t[i].name, t[i].fn, self);
    }
    return jj__missing;
}
