/*
 * test_buf.c — the growable byte string (base/buf.h) against a trivially correct model: random
 * appends, printfs and drops, with the NUL invariant checked after each, and an allocator hook
 * that refuses past a limit to prove that oom is sticky and loses nothing already held.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "tests/test_util.h"

static void check(const buf *b, const char *model, size_t model_len)
{
    cr_assert_eq(b->len, model_len);
    if (!b->s) {
        cr_assert_eq(model_len, 0);
        return;
    }
    cr_assert_lt(b->len, b->cap);
    cr_assert_eq(b->s[b->len], 0);
    cr_assert(!memcmp(b->s, model, model_len));
}

Test(buf, random_operations_match_a_model)
{
    uint64_t seed = tu_seed(0xb0f), rng = seed;
    printf("buf/random_operations_match_a_model seed 0x%llx\n", (unsigned long long)seed);
    char *model = malloc(1 << 20);
    size_t n = 0;
    buf b = {0};
    for (int op = 0; op < 20000; op++) {
        uint64_t r = tu_xorshift(&rng);
        char piece[700];
        size_t k = (r >> 8) % (r % 16 == 0 ? sizeof piece : 12);
        for (size_t i = 0; i < k; i++)
            piece[i] = (char)(tu_xorshift(&rng) % 256); /* NULs included */
        switch (r % 5) {
        case 0: buf_put(&b, piece, k); memcpy(model + n, piece, k); n += k; break;
        case 1: buf_putc(&b, piece[0]); model[n++] = piece[0]; break;
        case 2: {
            int v = (int)(r >> 20);
            char tmp[600];
            /* long enough sometimes to pass the 256-byte stack buffer */
            int len = snprintf(tmp, sizeof tmp, "%d:%*s|", v, (int)(k % 400), "x");
            buf_printf(&b, "%d:%*s|", v, (int)(k % 400), "x");
            memcpy(model + n, tmp, (size_t)len);
            n += (size_t)len;
            break;
        }
        case 3: {
            size_t d = (r >> 12) % (n + 2);
            buf_drop(&b, d);
            if (d > n) d = n;
            memmove(model, model + d, n - d);
            n -= d;
            break;
        }
        case 4: if (n > (1 << 19)) { buf_clear(&b); n = 0; } break;
        }
        cr_assert_eq(b.oom, 0);
        check(&b, model, n);
    }
    char *s = buf_take(&b);
    cr_assert(s && !memcmp(s, model, n) && s[n] == 0);
    cr_assert_eq(b.s, NULL);
    cr_assert_eq(b.len, 0);
    free(s);
    free(model);
}

/* A hook that refuses any block larger than its limit. */
typedef struct limited {
    size_t limit, calls;
} limited;

static char *limited_alloc(void *ud, char *old, size_t len, size_t need, size_t cap)
{
    limited *l = ud;
    l->calls++;
    cr_assert(len < need && need <= cap, "len %zu need %zu cap %zu", len, need, cap);
    if (cap > l->limit) return NULL;
    char *p = realloc(old, cap);
    return p;
}

Test(buf, oom_is_sticky_and_keeps_what_was_held)
{
    limited l = {.limit = 128};
    buf b = {.alloc = limited_alloc, .ud = &l};
    buf_puts(&b, "hello");
    cr_assert_eq(b.oom, 0);
    cr_assert_str_eq(b.s, "hello");
    char big[200];
    memset(big, 'a', sizeof big);
    buf_put(&b, big, sizeof big); /* needs 206 bytes: refused */
    cr_assert_eq(b.oom, 1);
    cr_assert_str_eq(b.s, "hello");
    size_t calls = l.calls;
    buf_puts(&b, "!"); /* would fit, but oom is sticky */
    buf_printf(&b, "%d", 42);
    cr_assert_eq(l.calls, calls);
    cr_assert_str_eq(b.s, "hello");
    cr_assert_eq(buf_reserve(&b, 1), -ENOMEM);
    buf_clear(&b); /* forgets the failure, keeps the memory */
    cr_assert_eq(b.oom, 0);
    buf_puts(&b, "again");
    cr_assert_str_eq(b.s, "again");
    free(b.s);
}

Test(buf, take_after_oom_is_null_and_empty_take_is_null)
{
    buf b = {0};
    cr_assert_null(buf_take(&b));
    buf_puts(&b, "x");
    b.oom = 1;
    cr_assert_null(buf_take(&b));
    cr_assert_eq(b.s, NULL);
    cr_assert_eq(b.oom, 0);
    buf_printf(&b, "%s-%d", "y", 7);
    char *s = buf_take(&b);
    cr_assert_str_eq(s, "y-7");
    free(s);
}

/* A hook that hands out fresh blocks full of junk and copies only the len bytes it must: an
 * arena's way (the old block stays where it is). */
static char *junk_alloc(void *ud, char *old, size_t len, size_t need, size_t cap)
{
    char **blocks = ud;
    char *p = malloc(cap);
    cr_assert_not_null(p);
    memset(p, 'x', cap);
    if (len) memcpy(p, old, len);
    for (int i = 0; i < 16; i++)
        if (!blocks[i]) {
            blocks[i] = p;
            break;
        }
    (void)need;
    return p;
}

Test(buf, a_hook_that_copies_len_bytes_keeps_the_nul)
{
    char *blocks[16] = {0};
    buf b = {.alloc = junk_alloc, .ud = blocks};
    cr_assert_eq(buf_reserve(&b, 10), 0);
    cr_assert_str_eq(b.s, "");
    buf_puts(&b, "abc");
    cr_assert_eq(buf_reserve(&b, 1000), 0); /* grows: the new block is junk past "abc" */
    cr_assert_eq(b.len, 3);
    cr_assert_str_eq(b.s, "abc");
    buf_printf(&b, "%0300d", 7); /* past printf's stack buffer: written in place */
    cr_assert_eq(b.len, 303);
    cr_assert_eq(b.s[303], 0);
    for (int i = 0; i < 16; i++) free(blocks[i]);
}
