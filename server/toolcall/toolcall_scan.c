/*
 * toolcall_scan.c — the text machinery of the output parsers (toolcall.c): the incremental scanner
 * of JSON call objects (how far the name and the arguments value got in text that may still be cut
 * short), JSON string decoding and writing, writing a parameter value as JSON for the call bodies
 * that are not JSON, and the small readers every syntax shares (function-name characters, a marker
 * at a position, handing a finished call to the caller). It calls no other file of the parsers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall/internal.h"

/* ---- JSON scanning ------------------------------------------------------------------------ */

int tc__is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

size_t tc__skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && tc__is_ws(s[i]))
        i++;
    return i;
}

/* The end of the JSON value at s[i]; *done = 0 when s ends before the value does. Returns
 * (size_t)-1 for something that is not a JSON value. */
size_t tc__skip_value(const char *s, size_t n, size_t i, int *done)
{
    *done = 0;
    if (i >= n) return n;
    char c = s[i];
    if (c == '"') {
        for (size_t j = i + 1; j < n; j++) {
            if (s[j] == '\\') {
                j++;
                continue;
            }
            if (s[j] == '"') {
                *done = 1;
                return j + 1;
            }
        }
        return n;
    }
    if (c == '{' || c == '[') {
        int depth = 0, str = 0;
        for (size_t j = i; j < n; j++) {
            char d = s[j];
            if (str) {
                if (d == '\\')
                    j++;
                else if (d == '"')
                    str = 0;
                continue;
            }
            if (d == '"')
                str = 1;
            else if (d == '{' || d == '[')
                depth++;
            else if (d == '}' || d == ']') {
                if (--depth == 0) {
                    *done = 1;
                    return j + 1;
                }
            }
        }
        return n;
    }
    if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
        size_t j = i;
        while (j < n && (strchr("+-.eE", s[j]) || (s[j] >= '0' && s[j] <= '9') ||
                         (s[j] >= 'a' && s[j] <= 'z')))
            j++;
        *done = j < n;
        return j;
    }
    return (size_t)-1;
}

int tc__key_is(const char *s, size_t a, size_t b, const char *k)
{
    return b - a == strlen(k) && !memcmp(s + a, k, b - a);
}

void tc__scan_obj(const char *s, size_t n, size_t i, jobj *o)
{
    memset(o, 0, sizeof *o);
    for (i++;;) {
        i = tc__skip_ws(s, n, i);
        if (i >= n) return;
        if (s[i] == '}') {
            o->state = 1;
            o->end = i + 1;
            return;
        }
        if (s[i] == ',') {
            i++;
            continue;
        }
        if (s[i] != '"') {
            o->state = -1;
            return;
        }
        int done;
        size_t ke = tc__skip_value(s, n, i, &done);
        if (!done) return;
        size_t ka = i + 1, kb = ke - 1;
        i = tc__skip_ws(s, n, ke);
        if (i >= n) return;
        if (s[i] != ':') {
            o->state = -1;
            return;
        }
        i = tc__skip_ws(s, n, i + 1);
        if (i >= n) return;
        size_t ve = tc__skip_value(s, n, i, &done);
        if (ve == (size_t)-1) {
            o->state = -1;
            return;
        }
        if ((tc__key_is(s, ka, kb, "name") || tc__key_is(s, ka, kb, "tool_name")) && s[i] == '"') {
            o->name_a = i + 1;
            o->name_b = done ? ve - 1 : n;
            o->name_done = done;
        } else if (tc__key_is(s, ka, kb, "arguments") || tc__key_is(s, ka, kb, "parameters")) {
            o->has_args = 1;
            o->args_a = i;
            o->args_b = ve;
            o->args_done = done;
        } else if (tc__key_is(s, ka, kb, "function") && s[i] == '{') {
            o->fn_a = i;
            o->fn_b = ve;
            o->fn_done = done;
        } else if (tc__key_is(s, ka, kb, "tool_calls") && s[i] == '[') {
            o->tc_a = i;
            o->tc_b = ve;
            o->tc_done = done;
        }
        if (!done) return;
        i = ve;
    }
}

/* Decodes a JSON string body s[0..n) (escapes; \u with surrogate pairs). malloc'd. */
char *tc__json_unescape(const char *s, size_t n, size_t *out_len)
{
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i];
            continue;
        }
        char e = s[++i];
        if (e == 'u' && i + 4 < n) {
            unsigned cp = 0;
            sscanf(s + i + 1, "%4x", &cp);
            i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u') {
                unsigned lo = 0;
                sscanf(s + i + 3, "%4x", &lo);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp < 0x80)
                o[k++] = (char)cp;
            else if (cp < 0x800) {
                o[k++] = (char)(0xC0 | cp >> 6);
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                o[k++] = (char)(0xE0 | cp >> 12);
                o[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else {
                o[k++] = (char)(0xF0 | cp >> 18);
                o[k++] = (char)(0x80 | (cp >> 12 & 0x3F));
                o[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        }
        o[k++] = e == 'n'   ? '\n'
                 : e == 't' ? '\t'
                 : e == 'r' ? '\r'
                 : e == 'b' ? '\b'
                 : e == 'f' ? '\f'
                            : e;
    }
    o[k] = 0;
    *out_len = k;
    return o;
}

/* ---- non-JSON call bodies (complete) ------------------------------------------------------ */

/* Appends v as a JSON string, or as itself when it is JSON already (numbers, objects, …). */
/* The end of the strictly valid JSON value at s[i] (after white space), or (size_t)-1. */
static size_t strict_value(const char *s, size_t n, size_t i, int depth)
{
    const size_t bad = (size_t)-1;
    i = tc__skip_ws(s, n, i);
    if (i >= n || depth > 200) return bad;
    char c = s[i];
    if (c == '"') {
        for (size_t j = i + 1; j < n; j++) {
            unsigned char d = (unsigned char)s[j];
            if (d < 0x20) return bad;
            if (d == '"') return j + 1;
            if (d != '\\') continue;
            if (++j >= n || !strchr("\"\\/bfnrtu", s[j])) return bad;
            for (int k = 0; s[j] == 'u' && k < 4; k++)
                if (++j >= n || !strchr("0123456789abcdefABCDEF", s[j])) return bad;
        }
        return bad;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        i = tc__skip_ws(s, n, i + 1);
        if (i < n && s[i] == close) return i + 1;
        for (;;) {
            if (close == '}') {
                if (i >= n || s[i] != '"') return bad;
                i = tc__skip_ws(s, n, strict_value(s, n, i, depth + 1));
                if (i >= n || s[i] != ':') return bad;
                i++;
            }
            i = strict_value(s, n, i, depth + 1);
            if (i == bad) return bad;
            i = tc__skip_ws(s, n, i);
            if (i < n && s[i] == close) return i + 1;
            if (i >= n || s[i] != ',') return bad;
            i = tc__skip_ws(s, n, i + 1);
        }
    }
    static const char *const lit[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++)
        if (n - i >= strlen(lit[k]) && !memcmp(s + i, lit[k], strlen(lit[k])))
            return i + strlen(lit[k]);
    size_t j = i + (c == '-'), d0 = j;
    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    if (j == d0 || (s[d0] == '0' && j > d0 + 1)) return bad; /* no digits, or a leading zero */
    if (j < n && s[j] == '.') {
        size_t f = ++j;
        while (j < n && s[j] >= '0' && s[j] <= '9')
            j++;
        if (j == f) return bad;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j += j + 1 < n && (s[j + 1] == '+' || s[j + 1] == '-') ? 2 : 1;
        size_t f = j;
        while (j < n && s[j] >= '0' && s[j] <= '9')
            j++;
        if (j == f) return bad;
    }
    return j;
}

void tc__json_value_of(buf *b, const char *v, size_t n)
{
    while (n && tc__is_ws(*v))
        v++, n--;
    while (n && tc__is_ws(v[n - 1]))
        n--;
    size_t e = n ? strict_value(v, n, 0, 0) : (size_t)-1;
    if (e == n) {
        buf_put(b, v, n);
        return;
    }
    tc__json_str(b, v, n);
}

const char *tc__find(const char *s, size_t n, const char *needle)
{
    return s && n ? memmem(s, n, needle, strlen(needle)) : NULL;
}

/* ---- JSON strings, names, markers, calls handed on ----------------------------------------- */

void tc__json_str(buf *b, const char *s, size_t n)
{
    buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            buf_put(b, esc, 2);
        } else if (c == '\n')
            buf_put(b, "\\n", 2);
        else if (c == '\t')
            buf_put(b, "\\t", 2);
        else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            buf_put(b, esc, 6);
        } else
            buf_put(b, s + i, 1);
    }
    buf_put(b, "\"", 1);
}

int tc__name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':' || (unsigned char)c >= 0x80;
}

int tc__at(const char *s, size_t n, size_t i, const char *lit)
{
    size_t k = strlen(lit);
    return i <= n && n - i >= k && !memcmp(s + i, lit, k);
}

int tc__give(tc_call_fn fn, void *ud, const char *name, size_t nn, buf *args, int count)
{
    if (!args->s || args->oom || !nn) return -1;
    if (fn) fn(ud, name, nn, args->s, args->len);
    return count + 1;
}
