/*
 * gr_util.c — what every file of grammar/ may call: growing arrays, error messages, hex digits,
 * UTF-8, and writing GBNF text (literals and escaped code points, into a base/buf.h string). It
 * calls nothing else in the folder, so the parser, the compiler, the regex translator, the
 * matcher and the front door (grammar.c) all sit above it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "grammar/gr_internal.h"

void gr_buf_cp(buf *b, uint32_t c)
{
    char t[16];
    if (c == '"' || c == '\\' || c == '[' || c == ']' || c == '-' || c == '^' || c == '\'') {
        t[0] = '\\';
        t[1] = (char)c;
        buf_put(b, t, 2);
    } else if (c >= 0x20 && c < 0x7f) {
        t[0] = (char)c;
        buf_put(b, t, 1);
    } else if (c < 0x80) {
        buf_printf(b, "\\x%02X", (unsigned)c);
    } else if (c <= 0xFFFF) {
        buf_printf(b, "\\u%04X", (unsigned)c);
    } else {
        buf_printf(b, "\\U%08X", (unsigned)c);
    }
}

void gr_buf_literal(buf *b, const char *s, size_t n)
{
    buf_put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = gr__utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (l < 0) { /* not UTF-8: cannot be written as a literal */
            b->oom = 1;
            return;
        }
        gr_buf_cp(b, cp);
        i += (size_t)l;
    }
    buf_put(b, "\"", 1);
}

int gr__grow(void **p, int *cap, int64_t need, size_t elem)
{
    if (need <= *cap) return 0;
    if (need > INT32_MAX / 2) return -ENOMEM;
    int64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = (int)c;
    return 0;
}

int gr__hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int gr__fail(gr_error *err, int pos, const char *fmt, ...)
{
    if (!err) return -EINVAL;
    if (err->msg[0]) return -EINVAL; /* keep the first (innermost) reason */
    err->pos = pos;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

int gr__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0) return -1;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int l = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c < 0xF0 ? 3 : 0) : c >= 0xC2 ? 2 : 0;
    if (!l || (size_t)l > n) return -1;
    uint32_t v = c & (0x7F >> l);
    for (int i = 1; i < l; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[l] || v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    *cp = v;
    return l;
}

int gr__utf8_encode(uint32_t c, unsigned char *o)
{
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* ---- the compile budget -------------------------------------------------------------------- */

void gr__budget_init(gr_budget *b, int64_t deadline_us)
{
    int64_t now = clk_now_us();
    b->deadline_us = deadline_us > 0 ? deadline_us : now + (int64_t)GR_COMPILE_MS * 1000;
    int64_t ms = (b->deadline_us - now + 999) / 1000;
    b->limit_ms = ms < 0 ? 0 : ms > 1000000000 ? 1000000000 : (int)ms;
    b->left = GR_BUDGET_STRIDE;
    b->expired = 0;
}

int gr__budget_check(gr_budget *b)
{
    b->left = GR_BUDGET_STRIDE;
    if (!b->expired && clk_now_us() > b->deadline_us) b->expired = 1;
    return b->expired;
}

int gr__budget_fail(const gr_budget *b, gr_error *err)
{
    int first = err && !err->msg[0];
    int rc = gr__fail(err, -1, "grammar too complex: compilation took more than %d ms", b->limit_ms);
    if (first) err->timeout = 1;
    return rc;
}
