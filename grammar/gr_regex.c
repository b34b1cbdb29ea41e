/*
 * gr_regex.c — regular expressions → GBNF expressions (gr_regex_to_gbnf in grammar.h).
 *
 * A recursive-descent parser writes GBNF text as it goes: a literal run becomes "…", a class or
 * escape becomes a code-point set (sorted ranges) written as [...] or, inside a JSON string,
 * as the JSON encodings of its characters (plain characters in a class, \" \\ and control
 * characters as their escapes), a group becomes ( … ), a quantifier wraps its atom.
 *
 * Semantics are chosen so that every string the grammar produces matches under both Python's
 * re (what the tests and jsonschema use) and ECMA-262 (what JSON Schema specifies): \d, \w and
 * their classes are ASCII ([^\d] is ASCII too), \s is the white space both agree on (and [^\s],
 * \S exclude what either calls white space), "." excludes every line terminator either knows.
 * The language may be a little smaller than the regex's; it is never larger.
 *
 * Anchors: ^ and $ are accepted at the start and end of top-level alternatives (outside
 * groups). In GR_RE_FULL mode they change nothing (the whole text matches anyway); in
 * GR_RE_JSON_SEARCH mode an alternative without ^ may be preceded, and one without $ followed,
 * by any characters (JSON Schema's unanchored search).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

/* ---- code-point sets ----------------------------------------------------------------------- */

typedef struct cset {
    gr_range *r;
    int n, cap;
    int oom;
} cset;

static void cs_add(cset *s, uint32_t lo, uint32_t hi)
{
    if (s->oom) return;
    if (s->n == s->cap) {
        int c = s->cap ? s->cap * 2 : 8;
        gr_range *r = realloc(s->r, sizeof *r * (size_t)c);
        if (!r) {
            s->oom = 1;
            return;
        }
        s->r = r;
        s->cap = c;
    }
    s->r[s->n++] = (gr_range){lo, hi};
}

static int rcmp(const void *x, const void *y)
{
    const gr_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

static void cs_norm(cset *s)
{
    if (s->n > 1) qsort(s->r, (size_t)s->n, sizeof *s->r, rcmp);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[i].lo <= s->r[m - 1].hi + 1) {
            if (s->r[i].hi > s->r[m - 1].hi) s->r[m - 1].hi = s->r[i].hi;
        } else {
            s->r[m++] = s->r[i];
        }
    }
    s->n = m;
}

static void cs_complement(cset *s)
{
    cs_norm(s);
    cset o = {0};
    uint32_t lo = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > lo) cs_add(&o, lo, s->r[i].lo - 1);
        lo = s->r[i].hi + 1;
    }
    if (lo <= GR_MAX_CP) cs_add(&o, lo, GR_MAX_CP);
    free(s->r);
    *s = o;
}

/* Keeps only the code points in lo..hi. */
static void cs_clip(cset *s, uint32_t lo, uint32_t hi)
{
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        gr_range x = s->r[i];
        if (x.hi < lo || x.lo > hi) continue;
        s->r[m++] = (gr_range){x.lo < lo ? lo : x.lo, x.hi > hi ? hi : x.hi};
    }
    s->n = m;
}

static void cs_free(cset *s)
{
    free(s->r);
    memset(s, 0, sizeof *s);
}

/* White space both Python's re and ECMA-262 agree on, and what either of them calls so. */
static const gr_range WS_BOTH[] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                   {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                   {0x205F, 0x205F}, {0x3000, 0x3000}};
static const gr_range WS_EITHER[] = {{0x09, 0x0D}, {0x1C, 0x20}, {0x85, 0x85}, {0xA0, 0xA0},
                                     {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                     {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                     {0xFEFF, 0xFEFF}};

/* Adds class escape c (d w s D W S) to s. wide = 1 gives the largest set either dialect could
 * mean (for negated classes), 0 the smallest. */
static void cs_escape(cset *s, char c, int wide)
{
    cset t = {0};
    int neg = c == 'D' || c == 'W' || c == 'S';
    switch (c | 0x20) {
    case 'd': cs_add(&t, '0', '9'); break;
    case 'w':
        cs_add(&t, '0', '9');
        cs_add(&t, 'A', 'Z');
        cs_add(&t, 'a', 'z');
        cs_add(&t, '_', '_');
        break;
    case 's': {
        int either = neg ? !wide : wide; /* \S wide = not (white space for both) */
        const gr_range *v = either ? WS_EITHER : WS_BOTH;
        int n = either ? (int)(sizeof WS_EITHER / sizeof *WS_EITHER) : (int)(sizeof WS_BOTH / sizeof *WS_BOTH);
        for (int i = 0; i < n; i++) cs_add(&t, v[i].lo, v[i].hi);
        break;
    }
    }
    if ((c | 0x20) != 's') { /* \d \w: ASCII in both dialects' smallest reading */
        if (!neg && wide) cs_add(&t, 0x80, GR_MAX_CP);
        if (neg) {
            cs_complement(&t);
            if (!wide) cs_clip(&t, 0, 0x7F);
        }
    } else if (neg) {
        cs_complement(&t);
    }
    for (int i = 0; i < t.n; i++) cs_add(s, t.r[i].lo, t.r[i].hi);
    if (t.oom) s->oom = 1;
    cs_free(&t);
}

/* ---- the parser --------------------------------------------------------------------------- */

typedef struct rx {
    const unsigned char *s;
    size_t n, i;
    int mode;
    gr_error *err;
    int depth;
    int failed;
    gr_budget *b;       /* the compile's deadline (NULL: none) */
} rx;

static int rx_fail(rx *r, size_t pos, const char *msg)
{
    if (!r->failed) gr__fail(r->err, (int)pos, "%s", msg);
    r->failed = 1;
    return -EINVAL;
}

/* Appends the JSON string encodings of the characters of s (normalised, non-empty). */
static void emit_json_set(buf *b, cset *s)
{
    cset plain = {0};
    int quote = 0, bslash = 0;
    uint32_t ctl[32];
    int nctl = 0;
    for (int i = 0; i < s->n; i++) {
        for (uint32_t c = s->r[i].lo; c <= s->r[i].hi && c < 0x20; c++) ctl[nctl++] = c;
        uint32_t lo = s->r[i].lo < 0x20 ? 0x20 : s->r[i].lo, hi = s->r[i].hi;
        for (uint32_t lo2 = lo; lo2 <= hi;) {
            if (lo2 == '"' || lo2 == '\\') {
                quote |= lo2 == '"';
                bslash |= lo2 == '\\';
                lo2++;
                continue;
            }
            uint32_t end = hi;
            if (lo2 < '"' && end >= '"') end = '"' - 1;
            else if (lo2 < '\\' && end >= '\\') end = '\\' - 1;
            cs_add(&plain, lo2, end);
            lo2 = end + 1;
            if (end == GR_MAX_CP) break;
        }
    }
    int alts = 0;
    buf_puts(b, "(");
    if (plain.n) {
        buf_puts(b, "[");
        for (int i = 0; i < plain.n; i++) {
            gr_buf_cp(b, plain.r[i].lo);
            if (plain.r[i].hi != plain.r[i].lo) {
                buf_puts(b, "-");
                gr_buf_cp(b, plain.r[i].hi);
            }
        }
        buf_puts(b, "]");
        alts++;
    }
    if (quote) buf_puts(b, alts++ ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\"");
    if (bslash) buf_puts(b, alts++ ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\"");
    static const char *short_esc[32] = {['\b'] = "b", ['\f'] = "f", ['\n'] = "n", ['\r'] = "r", ['\t'] = "t"};
    for (int i = 0; i < nctl; i++) {
        if (alts++) buf_puts(b, " | ");
        if (short_esc[ctl[i]]) buf_printf(b, "\"\\\\%s\"", short_esc[ctl[i]]);
        else buf_printf(b, "\"\\\\u00%02x\"", (unsigned)ctl[i]);
    }
    buf_puts(b, ")");
    if (plain.oom) b->oom = 1;
    cs_free(&plain);
}

/* Appends a set (non-empty) as a GBNF expression. */
static void emit_set(rx *r, buf *b, cset *s)
{
    cs_norm(s);
    if (s->oom) b->oom = 1;
    if (r->mode == GR_RE_JSON_SEARCH) {
        emit_json_set(b, s);
        return;
    }
    if (s->n == 1 && s->r[0].lo == s->r[0].hi) {
        buf_puts(b, "\"");
        gr_buf_cp(b, s->r[0].lo);
        buf_puts(b, "\"");
        return;
    }
    buf_puts(b, "[");
    for (int i = 0; i < s->n; i++) {
        gr_buf_cp(b, s->r[i].lo);
        if (s->r[i].hi != s->r[i].lo) {
            buf_puts(b, "-");
            gr_buf_cp(b, s->r[i].hi);
        }
    }
    buf_puts(b, "]");
}

/* Reads n hex digits (or {…} when n < 0) at i into *cp. */
static int read_hex(rx *r, int n, uint32_t *cp, size_t at)
{
    uint32_t v = 0;
    int brace = n < 0, k = 0;
    if (brace) r->i++;
    while (r->i < r->n && (brace ? r->s[r->i] != '}' : k < n)) {
        int h = gr__hexval(r->s[r->i]);
        if (h < 0 || k >= 8) return rx_fail(r, at, "bad hexadecimal escape");
        v = v * 16 + (uint32_t)h;
        r->i++;
        k++;
    }
    if (brace) {
        if (r->i >= r->n || !k) return rx_fail(r, at, "bad \\u{...} escape");
        r->i++;
    } else if (k < n) {
        return rx_fail(r, at, "bad hexadecimal escape");
    }
    if (v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return rx_fail(r, at, "escape names no Unicode character");
    *cp = v;
    return 0;
}

/* Reads an escape after '\' (at i) as a single character (*cp) or a class added to s (returns
 * 1). in_class: inside [...]; wide: the class is negated. */
static int read_escape(rx *r, uint32_t *cp, cset *s, int in_class, int wide)
{
    size_t at = r->i - 1;
    if (r->i >= r->n) return rx_fail(r, at, "pattern ends with '\\'");
    unsigned char c = r->s[r->i++];
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        cs_escape(s, (char)c, wide);
        return 1;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'a': *cp = 7; return 0;
    case '0': *cp = 0; return 0;
    case 'b':
        if (in_class) {
            *cp = 8;
            return 0;
        }
        return rx_fail(r, at, "word boundaries (\\b) are not supported");
    case 'x': return read_hex(r, 2, cp, at);
    case 'u': return read_hex(r, r->i < r->n && r->s[r->i] == '{' ? -1 : 4, cp, at);
    case 'U': return read_hex(r, 8, cp, at);
    case 'B': return rx_fail(r, at, "word boundaries (\\B) are not supported");
    case 'A': case 'Z': case 'z': case 'G':
        return rx_fail(r, at, "anchors other than ^ and $ are not supported");
    case 'p': case 'P': return rx_fail(r, at, "Unicode property classes (\\p) are not supported");
    case 'c': return rx_fail(r, at, "control escapes (\\c) are not supported");
    case 'k': return rx_fail(r, at, "backreferences are not supported");
    default:
        if (c >= '1' && c <= '9') return rx_fail(r, at, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return rx_fail(r, at, "unknown escape");
        *cp = c; /* an escaped punctuation or other character stands for itself */
        return 0;
    }
}

/* One character of the pattern (UTF-8) at i. */
static int read_cp(rx *r, uint32_t *cp)
{
    int l = gr__utf8_decode(r->s + r->i, r->n - r->i, cp);
    if (l < 0) return rx_fail(r, r->i, "the pattern is not valid UTF-8");
    r->i += (size_t)l;
    return 0;
}

static int parse_class(rx *r, cset *s)
{
    size_t at = r->i++;
    int neg = r->i < r->n && r->s[r->i] == '^';
    if (neg) r->i++;
    int first = 1, unicode_sensitive = 0;
    for (;;) {
        if (r->i >= r->n) return rx_fail(r, at, "unterminated character class");
        unsigned char c = r->s[r->i];
        if (c == ']' && !first) {
            r->i++;
            break;
        }
        first = 0;
        uint32_t lo;
        if (c == '\\') {
            r->i++;
            unsigned char e = r->i < r->n ? r->s[r->i] : 0;
            int k = read_escape(r, &lo, s, 1, neg);
            if (k < 0) return k;
            if (k == 1) {
                if (e == 'd' || e == 'D' || e == 'w' || e == 'W') unicode_sensitive = 1;
                continue;
            }
        } else if (read_cp(r, &lo)) {
            return -EINVAL;
        }
        uint32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            size_t rat = r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                cset dummy = {0};
                int k = read_escape(r, &hi, &dummy, 1, neg);
                cs_free(&dummy);
                if (k < 0) return k;
                if (k == 1) return rx_fail(r, rat, "a class escape cannot end a range");
            } else if (read_cp(r, &hi)) {
                return -EINVAL;
            }
            if (hi < lo) return rx_fail(r, rat, "character range is reversed");
        }
        cs_add(s, lo, hi);
    }
    if (neg) cs_complement(s);
    /* [^\d] and friends mean different things per dialect beyond ASCII: stay in ASCII */
    if (unicode_sensitive) cs_clip(s, 0, 0x7F);
    cs_norm(s);
    if (s->oom) return rx_fail(r, at, "out of memory");
    if (!s->n) return rx_fail(r, at, "character class matches nothing");
    return 0;
}

static int parse_alt(rx *r, buf *b, int top);

/* A group after '(' (at i). */
static int parse_group(rx *r, buf *b)
{
    size_t at = r->i++;
    if (r->i < r->n && r->s[r->i] == '?') {
        r->i++;
        unsigned char c = r->i < r->n ? r->s[r->i] : 0;
        if (c == ':') {
            r->i++;
        } else if (c == 'P' && r->i + 1 < r->n && r->s[r->i + 1] == '<') {
            r->i += 2;
            while (r->i < r->n && r->s[r->i] != '>') r->i++;
            if (r->i >= r->n) return rx_fail(r, at, "unterminated group name");
            r->i++;
        } else if (c == '<' && r->i + 1 < r->n && r->s[r->i + 1] != '=' && r->s[r->i + 1] != '!') {
            r->i++;
            while (r->i < r->n && r->s[r->i] != '>') r->i++;
            if (r->i >= r->n) return rx_fail(r, at, "unterminated group name");
            r->i++;
        } else if (c == '=' || c == '!' || c == '<') {
            return rx_fail(r, at, "lookahead and lookbehind are not supported");
        } else {
            return rx_fail(r, at, "inline flags and special groups (?...) are not supported");
        }
    }
    if (++r->depth > GR_MAX_NEST) return rx_fail(r, at, "groups nested too deeply");
    buf_puts(b, "(");
    int rc = parse_alt(r, b, 0);
    buf_puts(b, ")");
    r->depth--;
    if (rc) return rc;
    if (r->i >= r->n || r->s[r->i] != ')') return rx_fail(r, at, "unclosed '('");
    r->i++;
    return 0;
}

/* Parses {m}, {m,}, {m,n}, {,n} at i; returns 1 when it was one (else i is unchanged and the
 * brace is a literal, as Python reads it). */
static int parse_braces(rx *r, long *m, long *n)
{
    size_t j = r->i + 1;
    long a = -1, z = -1;
    while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') {
        a = (a < 0 ? 0 : a) * 10 + (r->s[j++] - '0');
        if (a > GR_MAX_REPEAT) a = GR_MAX_REPEAT + 1;
    }
    if (j < r->n && r->s[j] == ',') {
        j++;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') {
            z = (z < 0 ? 0 : z) * 10 + (r->s[j++] - '0');
            if (z > GR_MAX_REPEAT) z = GR_MAX_REPEAT + 1;
        }
        if (z < 0) z = -1; /* unbounded */
    } else {
        z = a;
    }
    if (j >= r->n || r->s[j] != '}' || (a < 0 && z < 0)) return 0;
    r->i = j + 1;
    *m = a < 0 ? 0 : a;
    *n = z;
    return 1;
}

/* Reads the quantifier after an atom, if any: *m, *n (n < 0: unbounded). Returns 1 when there
 * was one, 0 when not, -EINVAL. */
static int parse_quant(rx *r, long *m, long *n)
{
    if (r->i >= r->n) return 0;
    unsigned char c = r->s[r->i];
    size_t at = r->i;
    if (c == '*') *m = 0, *n = -1, r->i++;
    else if (c == '+') *m = 1, *n = -1, r->i++;
    else if (c == '?') *m = 0, *n = 1, r->i++;
    else if (c != '{' || !parse_braces(r, m, n)) return 0;
    if (*m > GR_MAX_REPEAT || *n > GR_MAX_REPEAT) return rx_fail(r, at, "repetition count too large");
    if (*n >= 0 && *n < *m) return rx_fail(r, at, "repetition has max below min");
    if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same language */
    else if (r->i < r->n && r->s[r->i] == '+') return rx_fail(r, r->i, "possessive quantifiers are not supported");
    return 1;
}

/* Any character of a JSON string (for the unanchored sides of a search). */
static const char JSON_ANY[] =
    "([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))";

/* One atom (not a quantifier or anchor) at i into b. */
static int parse_atom(rx *r, buf *b)
{
    unsigned char c = r->s[r->i];
    if (c == '(') return parse_group(r, b);
    cset s = {0};
    int k;
    uint32_t cp = 0;
    if (c == '[') {
        k = parse_class(r, &s) ? -EINVAL : 1;
    } else if (c == '.') {
        r->i++;
        cs_add(&s, '\n', '\n');
        cs_add(&s, '\r', '\r');
        cs_add(&s, 0x2028, 0x2029);
        cs_complement(&s);
        k = 1;
    } else if (c == '\\') {
        r->i++;
        k = read_escape(r, &cp, &s, 0, 0);
    } else {
        k = read_cp(r, &cp);
    }
    if (k == 0) cs_add(&s, cp, cp);
    if (k >= 0) emit_set(r, b, &s);
    cs_free(&s);
    return k < 0 ? k : 0;
}

/* A sequence; at the top level ^ may start it and $ end it (*anch bit 1 / bit 2). */
static int parse_seq(rx *r, buf *b, int top, int *anch)
{
    *anch = 0;
    int items = 0, rc = 0;
    buf_puts(b, "(");
    while (!rc && r->i < r->n) {
        unsigned char c = r->s[r->i];
        if (c == '|' || c == ')') break;
        size_t at = r->i;
        if (*anch & 2) return rx_fail(r, at, "'$' must end the pattern or an alternative");
        if (c == '^' || c == '$') {
            r->i++;
            if (!top || (c == '^' && (items || (*anch & 1))))
                return rx_fail(r, at, "anchors ^ and $ are supported only at the start and end of the pattern or of a top-level alternative (outside groups)");
            *anch |= c == '^' ? 1 : 2;
            continue;
        }
        if (c == '*' || c == '+' || c == '?') return rx_fail(r, at, "nothing to repeat");
        buf a = {0};
        long m, n;
        int q;
        if ((rc = parse_atom(r, &a)) == 0 && (q = parse_quant(r, &m, &n)) < 0) rc = q;
        /* Each nesting level copies its atoms into its parent: bytes copied are the work. */
        if (!rc && gr__charge(r->b, (int64_t)a.len + 8)) {
            if (!r->failed) gr__budget_fail(r->b, r->err);
            r->failed = 1;
            rc = -EINVAL;
        }
        if (!rc) {
            buf_puts(b, q ? " (" : " ");
            buf_put(b, a.s ? a.s : "", a.len);
            if (q) {
                buf_puts(b, ")");
                if (n < 0 && m == 0) buf_puts(b, "*");
                else if (n < 0 && m == 1) buf_puts(b, "+");
                else if (n < 0) buf_printf(b, "{%ld,}", m);
                else if (m == 0 && n == 1) buf_puts(b, "?");
                else buf_printf(b, "{%ld,%ld}", m, n);
            }
            if (a.oom) b->oom = 1;
        }
        free(a.s);
        items++;
    }
    if (rc) return rc;
    if (!items) buf_puts(b, " \"\"");
    buf_puts(b, " )");
    return 0;
}

static int parse_alt(rx *r, buf *b, int top)
{
    int first = 1;
    buf_puts(b, "(");
    for (;;) {
        int anch;
        buf_puts(b, first ? " " : " | ");
        first = 0;
        buf sb = {0};
        if (parse_seq(r, &sb, top, &anch)) {
            free(sb.s);
            return -EINVAL;
        }
        int search = top && r->mode == GR_RE_JSON_SEARCH;
        if (search && !(anch & 1)) {
            buf_puts(b, JSON_ANY);
            buf_puts(b, "* ");
        }
        buf_put(b, sb.s ? sb.s : "", sb.len);
        if (sb.oom) b->oom = 1;
        free(sb.s);
        if (search && !(anch & 2)) {
            buf_puts(b, " ");
            buf_puts(b, JSON_ANY);
            buf_puts(b, "*");
        }
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            continue;
        }
        break;
    }
    buf_puts(b, " )");
    return 0;
}

char *gr_regex_to_gbnf(const char *re, size_t len, int mode, gr_error *err)
{
    return gr__regex_to_gbnf(re, len, mode, NULL, err);
}

char *gr__regex_to_gbnf(const char *re, size_t len, int mode, gr_budget *bud, gr_error *err)
{
    gr_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    err->pos = -1;
    rx r = {(const unsigned char *)re, len, 0, mode, err, 0, 0, bud};
    buf b = {0};
    int rc = parse_alt(&r, &b, 1);
    if (!rc && r.i < r.n) rc = rx_fail(&r, r.i, "unmatched ')'");
    if (!rc && b.oom) rc = rx_fail(&r, r.i, "out of memory");
    if (rc) {
        free(b.s);
        return NULL;
    }
    return buf_take(&b);
}
