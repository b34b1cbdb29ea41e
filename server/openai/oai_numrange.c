/*
 * oai_numrange.c — GBNF for the decimal integers and numbers inside bounds (JSON Schema minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum), used by oai_schema.c.
 *
 *   magnitudes lo..hi     split by digit count; each same-length range by its first differing
 *                         digit: p a [≥ rest of lo] | p [a+1 - b-1] [0-9]* | p b [≤ rest of hi]
 *   integers lo..hi       "-" magnitudes of the negative part | magnitudes of the rest (no
 *                         leading zeros, never "-0")
 *   numbers lo..hi        whole bounds: integer part I with an optional fraction when I+frac
 *                         stays inside, a non-zero fraction where the bound itself is excluded,
 *                         no fraction where I is the included upper end
 *
 * Unbounded magnitudes stop at 16 digits (the language is then a subset, as with the unbounded
 * JSON integers of the schema compiler). Bounds are limited to |x| ≤ 10^18.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "server/openai/internal.h"

#define MAX_DIGITS_UNBOUNDED 16

static void alt(buf *e, int *n)
{
    buf_puts(e, *n ? " | " : "");
    (*n)++;
}

static int all_of(const char *s, int m, char c)
{
    for (int i = 0; i < m; i++)
        if (s[i] != c) return 0;
    return 1;
}

static void any_digits(buf *e, int m)
{
    if (m == 1) buf_puts(e, " [0-9]");
    else if (m > 1) buf_printf(e, " [0-9]{%d}", m);
}

/* m-digit strings ≥ x (x has m digits, leading zeros allowed). */
static void digits_ge(buf *e, const char *x, int m)
{
    if (m == 0) {
        buf_puts(e, " \"\"");
        return;
    }
    int n = 0;
    buf_puts(e, " (");
    if (all_of(x + 1, m - 1, '0')) {
        alt(e, &n);
        buf_printf(e, "[%c-9]", x[0]);
        any_digits(e, m - 1);
    } else {
        alt(e, &n);
        buf_printf(e, "\"%c\"", x[0]);
        digits_ge(e, x + 1, m - 1);
        if (x[0] < '9') {
            alt(e, &n);
            buf_printf(e, "[%c-9]", x[0] + 1);
            any_digits(e, m - 1);
        }
    }
    buf_puts(e, ")");
}

/* m-digit strings ≤ y. */
static void digits_le(buf *e, const char *y, int m)
{
    if (m == 0) {
        buf_puts(e, " \"\"");
        return;
    }
    int n = 0;
    buf_puts(e, " (");
    if (all_of(y + 1, m - 1, '9')) {
        alt(e, &n);
        buf_printf(e, "[0-%c]", y[0]);
        any_digits(e, m - 1);
    } else {
        alt(e, &n);
        buf_printf(e, "\"%c\"", y[0]);
        digits_le(e, y + 1, m - 1);
        if (y[0] > '0') {
            alt(e, &n);
            buf_printf(e, "[0-%c]", y[0] - 1);
            any_digits(e, m - 1);
        }
    }
    buf_puts(e, ")");
}

/* m-digit strings from x to y (x ≤ y). */
static void digits_between(buf *e, const char *x, const char *y, int m)
{
    int k = 0;
    while (k < m && x[k] == y[k]) k++;
    buf_puts(e, " (");
    if (k) {
        buf_put(e, "\"", 1);
        buf_put(e, x, (size_t)k);
        buf_put(e, "\"", 1);
    }
    if (k == m) {
        if (!k) buf_puts(e, "\"\"");
        buf_puts(e, ")");
        return;
    }
    int r = m - k - 1, n = 0;
    char a = x[k], b = y[k];
    buf_puts(e, " (");
    if (!all_of(x + k + 1, r, '0')) {
        alt(e, &n);
        buf_printf(e, "\"%c\"", a);
        digits_ge(e, x + k + 1, r);
        a++;
    }
    if (!all_of(y + k + 1, r, '9')) {
        alt(e, &n);
        buf_printf(e, "\"%c\"", b);
        digits_le(e, y + k + 1, r);
        b--;
    }
    if (a <= b) {
        alt(e, &n);
        buf_printf(e, "[%c-%c]", a, b);
        any_digits(e, r);
    }
    buf_puts(e, "))");
}

static int n_digits(uint64_t v)
{
    int n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

static uint64_t pow10u(int k)
{
    uint64_t p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

/* Decimal magnitudes lo..hi without leading zeros (unbounded: up to 16 digits, or lo's). */
static void magnitudes(buf *e, uint64_t lo, uint64_t hi, int unbounded)
{
    int dl = n_digits(lo), dh = unbounded ? (dl > MAX_DIGITS_UNBOUNDED ? dl : MAX_DIGITS_UNBOUNDED) : n_digits(hi);
    int n = 0;
    buf_puts(e, "(");
    for (int L = dl; L <= dh; L++) {
        uint64_t a = L == dl ? lo : pow10u(L - 1);
        uint64_t b = !unbounded && L == dh ? hi : pow10u(L) - 1;
        if (a > b) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%llu", (unsigned long long)a);
        snprintf(ys, sizeof ys, "%llu", (unsigned long long)b);
        alt(e, &n);
        digits_between(e, xs, ys, L);
    }
    if (!n) buf_puts(e, "\"\""); /* callers never ask for an empty range */
    buf_puts(e, ")");
}

int oai__int_range(buf *e, const oai_bound *lo, const oai_bound *hi)
{
    int64_t a = lo->set ? lo->v : 0, b = hi->set ? hi->v : 0;
    if (lo->set && hi->set && a > b) return -1;
    int n = 0;
    buf_puts(e, "(");
    if (!lo->set || a < 0) { /* negative part: magnitudes max(1, -b) .. -a */
        uint64_t mlo = hi->set && b < 0 ? (uint64_t)(-b) : 1;
        alt(e, &n);
        buf_puts(e, "\"-\" ");
        magnitudes(e, mlo, lo->set ? (uint64_t)(-a) : 0, !lo->set);
    }
    if (!hi->set || b >= 0) {
        alt(e, &n);
        magnitudes(e, lo->set && a > 0 ? (uint64_t)a : 0, hi->set ? (uint64_t)b : 0, !hi->set);
    }
    buf_puts(e, ")");
    return 0;
}

#define FRAC "(\".\" [0-9]{1,16})"
#define FRAC_NONZERO "(\".\" [0-9]{0,15} [1-9])"

/* Numbers I.F ≥ 0 with I from l to h (h unbounded when !hs): I + F above l (beyond l when lx)
 * and at most h (below h when hx). Returns the alternatives written. */
static int mag_part(buf *e, const char *sign, uint64_t l, int lx, uint64_t h, int hx, int hs, int *n)
{
    int before = *n;
    if (hs && l > h) return 0;
    if (hs && l == h) {
        if (!lx && !hx) {
            alt(e, n);
            buf_printf(e, "%s\"%llu\"", sign, (unsigned long long)l);
        }
        return *n - before;
    }
    alt(e, n); /* I = l */
    buf_printf(e, "%s\"%llu\" %s%s", sign, (unsigned long long)l, lx ? FRAC_NONZERO : FRAC, lx ? "" : "?");
    if (!hs || h - l >= 2) { /* l < I < h: any fraction */
        alt(e, n);
        buf_puts(e, sign);
        magnitudes(e, l + 1, hs ? h - 1 : 0, !hs);
        buf_puts(e, " " FRAC "?");
    }
    if (hs && !hx) { /* I = h exactly */
        alt(e, n);
        buf_printf(e, "%s\"%llu\"", sign, (unsigned long long)h);
    }
    return *n - before;
}

int oai__number_range(buf *e, const oai_bound *lo, const oai_bound *hi)
{
    int64_t a = lo->set ? lo->v : 0, b = hi->set ? hi->v : 0;
    int n = 0;
    buf_puts(e, "(");
    if (!lo->set || a < 0) { /* negative values: magnitude m = -v */
        uint64_t ml = hi->set && b < 0 ? (uint64_t)(-b) : 0;
        int mlx = hi->set && b < 0 ? hi->excl : 1; /* m > 0 */
        mag_part(e, "\"-\" ", ml, mlx, lo->set ? (uint64_t)(-a) : 0, lo->excl, lo->set, &n);
    }
    if (!hi->set || b > 0 || (b == 0 && !hi->excl)) {
        uint64_t l = lo->set && a >= 0 ? (uint64_t)a : 0;
        int lx = lo->set && a >= 0 ? lo->excl : 0;
        mag_part(e, "", l, lx, hi->set ? (uint64_t)b : 0, hi->excl, hi->set, &n);
    }
    buf_puts(e, ")");
    return n ? 0 : -1;
}
