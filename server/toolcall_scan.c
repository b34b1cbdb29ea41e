/*
 * toolcall_scan.c — the text machinery of the output parsers (toolcall.c): growable buffers,
 * an incremental scanner of JSON call objects (how far the name and the arguments value got in
 * text that may still be cut short), JSON string decoding, and writing a parameter value as JSON
 * for the call bodies that are not JSON.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall_internal.h"

/* ---- buffers ------------------------------------------------------------------------------ */

int tc__tb_add(tbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) return -ENOMEM;
        b->s = p;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

void tc__tb_drop(tbuf *b, size_t k)
{
    if (!b->s) return;
    if (k > b->n) k = b->n;
    memmove(b->s, b->s + k, b->n - k);
    b->n -= k;
    b->s[b->n] = 0;
}

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
void tc__json_value_of(tbuf *b, const char *v, size_t n)
{
    while (n && tc__is_ws(*v))
        v++, n--;
    while (n && tc__is_ws(v[n - 1]))
        n--;
    int done;
    size_t e = n ? tc__skip_value(v, n, 0, &done) : (size_t)-1;
    if (n && (e == n || (done && e == n))) {
        tc__tb_add(b, v, n);
        return;
    }
    tc__tb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        char c = v[i], esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = c;
            tc__tb_add(b, esc, 2);
        } else if (c == '\n')
            tc__tb_add(b, "\\n", 2);
        else if ((unsigned char)c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned char)c);
            tc__tb_add(b, esc, 6);
        } else
            tc__tb_add(b, &c, 1);
    }
    tc__tb_add(b, "\"", 1);
}

const char *tc__find(const char *s, size_t n, const char *needle)
{
    return s && n ? memmem(s, n, needle, strlen(needle)) : NULL;
}
