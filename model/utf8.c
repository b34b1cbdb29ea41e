/*
 * utf8.c — strict UTF-8 validation and repair (see utf8.h). Used by the detokenizer for
 * generated text and by the server for request bodies and every echoed string.
 */
#include "model/utf8.h"

#include <stdlib.h>
#include <string.h>

int utf8_lead_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

int utf8_cont_ok(unsigned char c, int i, unsigned char b)
{
    if ((b & 0xC0) != 0x80) return 0;
    if (i != 1) return 1;
    if (c == 0xE0) return b >= 0xA0; /* overlong */
    if (c == 0xED) return b <= 0x9F; /* surrogates */
    if (c == 0xF0) return b >= 0x90; /* overlong */
    if (c == 0xF4) return b <= 0x8F; /* beyond U+10FFFF */
    return 1;
}

int utf8_char(const unsigned char *s, size_t n, int *truncated)
{
    if (truncated) *truncated = 0;
    int l = utf8_lead_len(s[0]);
    if (l == 0) return -1;
    int k = 1;
    while (k < l && (size_t)k < n && utf8_cont_ok(s[0], k, s[k])) k++;
    if (k == l) return l;
    if ((size_t)k == n && truncated) *truncated = 1;
    return -k;
}

int utf8_is_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) { /* the common case, byte by byte */
            i++;
            continue;
        }
        int l = utf8_char(u + i, n - i, NULL);
        if (l < 0) return 0;
        i += (size_t)l;
    }
    return 1;
}

size_t utf8_sanitize_into(char *out, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int l = utf8_char(u + i, n - i, NULL);
        if (l > 0) {
            memcpy(out + o, s + i, (size_t)l);
            o += (size_t)l;
            i += (size_t)l;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += (size_t)-l;
        }
    }
    out[o] = 0;
    return o;
}

char *utf8_sanitize(const char *s, size_t n)
{
    char *out = malloc(n * 3 + 1);
    if (out) utf8_sanitize_into(out, s, n);
    return out;
}
