/*
 * buf.c — the growable byte string (buf.h). Capacity doubles from 64 bytes, so n appends cost
 * O(total bytes) copies.
 */
#include "base/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int buf_reserve(buf *b, size_t extra)
{
    if (b->oom) return -ENOMEM;
    if (extra >= (size_t)-1 - b->len) goto fail;
    size_t need = b->len + extra + 1;
    if (b->s && need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > (size_t)-1 / 2 ? need : cap * 2;
    char *s = b->alloc ? b->alloc(b->ud, b->s, b->len, need, cap) : realloc(b->s, cap);
    if (!s) goto fail;
    s[b->len] = 0; /* a hook copies only the len bytes */
    b->s = s;
    b->cap = cap;
    return 0;
fail:
    b->oom = 1;
    return -ENOMEM;
}

void buf_put(buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n)) return;
    if (n) memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
}

void buf_puts(buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

void buf_putc(buf *b, char c)
{
    buf_put(b, &c, 1);
}

void buf_vprintf(buf *b, const char *fmt, va_list ap)
{
    if (b->oom) return;
    va_list ap2;
    va_copy(ap2, ap);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        buf_put(b, tmp, (size_t)n);
        return;
    }
    if (buf_reserve(b, (size_t)n)) return;
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void buf_drop(buf *b, size_t k)
{
    if (!b->s) return;
    if (k > b->len) k = b->len;
    memmove(b->s, b->s + k, b->len - k + 1);
    b->len -= k;
}

void buf_clear(buf *b)
{
    b->len = 0;
    b->oom = 0;
    if (b->s) b->s[0] = 0;
}

char *buf_take(buf *b)
{
    char *s = b->oom ? NULL : b->s;
    if (b->oom) free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    return s;
}

void buf_free(buf *b)
{
    if (!b->alloc) free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}
