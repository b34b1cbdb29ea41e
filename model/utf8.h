/*
 * utf8.h — strict UTF-8 (RFC 3629): what counts as one valid character, and the repair every
 * text that leaves kvserve goes through (a maximal invalid subpart becomes one U+FFFD, the
 * Unicode-recommended practice). Overlong forms, surrogates (U+D800..DFFF) and code points
 * above U+10FFFF are invalid. Pure functions, any thread.
 */
#ifndef KVSERVE_UTF8_H
#define KVSERVE_UTF8_H

#include <stddef.h>

/* Length a lead byte announces (1..4), or 0 for a byte that cannot start a character. */
int utf8_lead_len(unsigned char c);

/* 1 when b is a valid continuation byte number i (1-based) after lead byte c. */
int utf8_cont_ok(unsigned char c, int i, unsigned char b);

/* Bytes of the character at s[0..n): its length (1..4) when valid and complete; otherwise the
 * negated length of the maximal invalid subpart (-1..-3: the bytes one U+FFFD replaces), or, for
 * a valid but truncated character at the end of the input, -(n) with *truncated set. */
int utf8_char(const unsigned char *s, size_t n, int *truncated);

/* 1 when s[0..n) is entirely valid UTF-8. */
int utf8_is_valid(const char *s, size_t n);

/* Writes s[0..n) to out with every maximal invalid subpart replaced by U+FFFD, NUL-terminated;
 * out must hold 3 × n + 1 bytes. Returns the length written. */
size_t utf8_sanitize_into(char *out, const char *s, size_t n);

/* The same into a malloc'd string; NULL on allocation failure. */
char *utf8_sanitize(const char *s, size_t n);

#endif
