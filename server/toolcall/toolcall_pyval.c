/*
 * toolcall_pyval.c — call bodies written as code rather than JSON, turned into JSON arguments
 * (for toolcall_section.c):
 *
 *   gemma4     call:NAME{key:VALUE,…}: keys bare or between <|"|> quotes, strings between
 *              <|"|> quotes (taken verbatim), numbers, true / false, nested {…} and […];
 *              several calls may follow one another
 *   pythonic   [NAME(key=VALUE, …), …] (the brackets optional): VALUE a Python literal —
 *              '…' or "…" strings with backslash escapes, numbers, True / False / None, lists,
 *              tuples (as lists) and dicts
 *
 * A bare word that is not a JSON literal becomes a string. Anything else that does not fit
 * the grammar makes the whole body not a call (-1), so the caller keeps it as content.
 */
#include <stdlib.h>
#include <string.h>

#include "server/toolcall/internal.h"

static const char gq[] = "<|\"|>"; /* Gemma's string quote */
#define BAD ((size_t)-1)
enum { MAX_DEPTH = 64 };

/* A bare scalar s[a..b) trimmed: JSON when it is a JSON value, else a string. */
static void bare(buf *b, const char *s, size_t a, size_t e)
{
    while (e > a && tc__is_ws(s[e - 1]))
        e--;
    tc__json_value_of(b, s + a, e - a);
}

/* One Gemma value at s[i] appended to b as JSON; the index past it, or BAD. */
static size_t g_value(const char *s, size_t n, size_t i, buf *b, int depth)
{
    i = tc__skip_ws(s, n, i);
    if (i >= n || depth > MAX_DEPTH) return BAD;
    if (tc__at(s, n, i, gq)) {
        const char *e = tc__find(s + i + 5, n - i - 5, gq);
        if (!e) return BAD;
        tc__json_str(b, s + i + 5, (size_t)(e - s) - i - 5);
        return (size_t)(e - s) + 5;
    }
    if (s[i] == '{' || s[i] == '[') {
        char close = s[i] == '{' ? '}' : ']';
        buf_put(b, s + i, 1);
        for (int items = 0;; items++) {
            i = tc__skip_ws(s, n, i + !items);
            if (i >= n) return BAD;
            if (s[i] == close) break;
            if (items) {
                if (s[i] != ',') return BAD;
                buf_put(b, ",", 1);
                i = tc__skip_ws(s, n, i + 1);
            }
            if (close == '}') { /* key: bare or quoted */
                size_t a = i;
                if (tc__at(s, n, i, gq)) {
                    const char *e = tc__find(s + i + 5, n - i - 5, gq);
                    if (!e) return BAD;
                    tc__json_str(b, s + i + 5, (size_t)(e - s) - i - 5);
                    i = (size_t)(e - s) + 5;
                } else {
                    while (i < n && s[i] != ':' && !tc__is_ws(s[i]) && !strchr(",{}[]", s[i]))
                        i++;
                    if (i == a) return BAD;
                    tc__json_str(b, s + a, i - a);
                }
                i = tc__skip_ws(s, n, i);
                if (i >= n || s[i] != ':') return BAD;
                buf_put(b, ":", 1);
                i++;
            }
            i = g_value(s, n, i, b, depth + 1);
            if (i == BAD) return BAD;
        }
        buf_put(b, &close, 1);
        return i + 1;
    }
    size_t a = i;
    while (i < n && !strchr(",}]", s[i]) && !tc__at(s, n, i, gq))
        i++;
    bare(b, s, a, i);
    return i;
}

int tc__read_gemma4(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    int count = 0;
    for (size_t i = tc__skip_ws(s, n, 0); i < n; i = tc__skip_ws(s, n, i)) {
        if (!tc__at(s, n, i, "call:")) return -1;
        size_t a = i + 5, e = a;
        while (e < n && tc__name_char(s[e]))
            e++;
        if (e >= n || s[e] != '{') return -1;
        buf args = {0};
        i = g_value(s, n, e, &args, 0);
        count = i == BAD ? -1 : tc__give(fn, ud, s + a, e - a, &args, count);
        free(args.s);
        if (count < 0) return -1;
    }
    return count ? count : -1;
}

/* A Python string literal at s[i] (quote s[i]) appended as a JSON string; past it, or BAD. */
static size_t py_string(const char *s, size_t n, size_t i, buf *b)
{
    char q = s[i];
    buf t = {0};
    buf_put(&t, "", 0);
    for (i++; i < n && s[i] != q; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            c = s[++i];
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
            if (!strchr("ntr\\'\"", s[i])) buf_put(&t, "\\", 1);
        }
        buf_put(&t, &c, 1);
    }
    int ok = i < n && t.s && !t.oom;
    if (ok) tc__json_str(b, t.s, t.len);
    free(t.s);
    return ok ? i + 1 : BAD;
}

/* One Python literal at s[i] appended to b as JSON; the index past it, or BAD. */
static size_t py_value(const char *s, size_t n, size_t i, buf *b, int depth)
{
    i = tc__skip_ws(s, n, i);
    if (i >= n || depth > MAX_DEPTH) return BAD;
    if (s[i] == '\'' || s[i] == '"') return py_string(s, n, i, b);
    if (s[i] == '[' || s[i] == '(' || s[i] == '{') {
        char close = s[i] == '[' ? ']' : s[i] == '(' ? ')' : '}';
        int dict = close == '}', items = 0;
        buf_put(b, dict ? "{" : "[", 1);
        for (i++;;) {
            i = tc__skip_ws(s, n, i);
            if (i < n && s[i] == close) break;
            if (items) {
                if (i >= n || s[i] != ',') return BAD;
                i = tc__skip_ws(s, n, i + 1);
                if (i < n && s[i] == close) break; /* a trailing comma */
                buf_put(b, ",", 1);
            }
            if (dict) {
                buf k = {0};
                i = py_value(s, n, i, &k, depth + 1);
                if (k.oom)
                    b->oom = 1; /* the key is incomplete: so is b */
                else if (i != BAD && k.s && k.s[0] == '"')
                    buf_put(b, k.s, k.len);
                else if (i != BAD && k.s)
                    tc__json_str(b, k.s, k.len);
                free(k.s);
                i = i == BAD ? BAD : tc__skip_ws(s, n, i);
                if (i == BAD || i >= n || s[i] != ':') return BAD;
                buf_put(b, ":", 1);
                i++;
            }
            i = py_value(s, n, i, b, depth + 1);
            if (i == BAD) return BAD;
            items++;
        }
        buf_put(b, dict ? "}" : "]", 1);
        return i + 1;
    }
    size_t a = i;
    while (i < n && !strchr(",)]}:=", s[i]) && !tc__is_ws(s[i]))
        i++;
    if (i == a) return BAD;
    static const char *const py[3][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (int k = 0; k < 3; k++)
        if (i - a == strlen(py[k][0]) && !memcmp(s + a, py[k][0], i - a)) {
            buf_put(b, py[k][1], strlen(py[k][1]));
            return i;
        }
    bare(b, s, a, i);
    return i;
}

/* NAME(key=VALUE, …) at s[i]: the call handed to fn; past it, or BAD. */
static size_t py_call(const char *s, size_t n, size_t i, tc_call_fn fn, void *ud, int *count)
{
    size_t a = i;
    while (i < n && tc__name_char(s[i]) && s[i] != ':')
        i++;
    if (i == a || i >= n || s[i] != '(') return BAD;
    size_t name_end = i;
    buf args = {0};
    buf_put(&args, "{", 1);
    for (i++;;) {
        i = tc__skip_ws(s, n, i);
        if (i < n && s[i] == ')') break;
        if (args.len > 1) {
            if (i >= n || s[i] != ',') break;
            i = tc__skip_ws(s, n, i + 1);
            if (i < n && s[i] == ')') break;
            buf_put(&args, ",", 1);
        }
        size_t k = i;
        while (i < n && tc__name_char(s[i]) && s[i] != ':')
            i++;
        size_t ke = i;
        i = tc__skip_ws(s, n, i);
        if (ke == k || i >= n || s[i] != '=') break;
        tc__json_str(&args, s + k, ke - k);
        buf_put(&args, ":", 1);
        i = py_value(s, n, i + 1, &args, 0);
        if (i == BAD) break;
    }
    int ok = i < n && s[i] == ')';
    if (ok) buf_put(&args, "}", 1);
    *count = ok ? tc__give(fn, ud, s + a, name_end - a, &args, *count) : -1;
    free(args.s);
    return *count < 0 ? BAD : i + 1;
}

int tc__read_pythonic(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    size_t i = tc__skip_ws(s, n, 0);
    int list = i < n && s[i] == '[', count = 0;
    if (list) i++;
    for (;;) {
        i = tc__skip_ws(s, n, i);
        if (i >= n) break;
        if (list && s[i] == ']') {
            i = tc__skip_ws(s, n, i + 1);
            break;
        }
        if (count) {
            if (s[i] != ',') return -1;
            i = tc__skip_ws(s, n, i + 1);
        }
        i = py_call(s, n, i, fn, ud, &count);
        if (i == BAD) return -1;
    }
    return i >= n && count ? count : -1;
}
