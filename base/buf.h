/*
 * buf.h — the growable byte string every layer writes text into: /metrics pages, rendered chat
 * prompts, grammar text, tool-call scans, Jinja output.
 *
 *     s ──► [ bytes 0 .. len-1 | NUL | spare .. cap-1 ]
 *
 * Invariants: len < cap whenever s != NULL, and s[len] == 0, so s is always a C string once
 * anything was appended. A failed growth sets oom, which is sticky: every later append is a
 * no-op, so a writer may append freely and check once at the end. Memory comes from realloc,
 * or from an allocator hook (an arena with a byte limit, say) that may refuse or not return.
 *
 * Zero-initialise a heap buffer (buf b = {0}); buf_free releases it. Not thread-safe.
 */
#ifndef KVSERVE_BUF_H
#define KVSERVE_BUF_H

#include <stdarg.h>
#include <stddef.h>

/* A replacement for realloc: a block of at least cap bytes that begins with the len bytes of
 * old (NULL on the first growth), or NULL (the buffer then sets oom). need (≤ cap) is what the
 * string needs now, its bytes after the append and the NUL; cap is what the buffer asks for so
 * that growth doubles. A hook that bounds the string checks need, so the bound is the same
 * whatever the doubling rounds up to. The old block is the hook's to keep or free. */
typedef char *(*buf_alloc_fn)(void *ud, char *old, size_t len, size_t need, size_t cap);

typedef struct buf {
    char *s;           /* the bytes, NUL-terminated; NULL until the first append */
    size_t len;        /* bytes held, without the NUL */
    size_t cap;        /* bytes allocated */
    int oom;           /* 1 after a failed growth (sticky) */
    buf_alloc_fn alloc; /* NULL: realloc and free */
    void *ud;          /* the hook's argument */
} buf;

/* Makes room for `extra` more bytes (and the NUL). 0, or -ENOMEM with oom set. */
int buf_reserve(buf *b, size_t extra);
/* Appends n bytes of p (which may contain NULs). */
void buf_put(buf *b, const void *p, size_t n);
void buf_puts(buf *b, const char *s);
void buf_putc(buf *b, char c);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(buf *b, const char *fmt, va_list ap);
/* Removes the first k bytes (all of them when k ≥ len). */
void buf_drop(buf *b, size_t k);
/* Empties the buffer and forgets a failure, keeping its memory. */
void buf_clear(buf *b);
/* Hands the string over to the caller (free() it) and resets the buffer; NULL after oom (the
 * memory is freed) or when nothing was appended. Heap buffers only. */
char *buf_take(buf *b);
/* Frees a heap buffer's memory and resets it. */
void buf_free(buf *b);

#endif
