/*
 * test_rstore.c — the Responses store (server/rstore.c) against a brute-force model: random
 * puts (new ids and replacements, of random sizes), gets and deletes under tight entry and byte
 * bounds, with rstore_check after every operation and the contents, count, bytes and eviction
 * order compared with the model (a list with last-use stamps; the least recently used entry is
 * dropped first). The seed is printed; KVSERVE_TEST_SEED replays a failure.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/rstore.h"
#include "tests/test_util.h"

typedef struct trs_ent {
    char id[24];
    char resp[64], conv[64];
    long stamp;
    int live;
} trs_ent;

#define TRS_IDS 24

static size_t trs_bytes(const trs_ent *e)
{
    return strlen(e->id) + strlen(e->resp) + strlen(e->conv) + 3;
}

/* The model's eviction: least recently used first, until both bounds hold. */
static void trs_evict(trs_ent *m, int max_n, size_t max_b)
{
    for (;;) {
        int n = 0, old = -1;
        size_t b = 0;
        for (int i = 0; i < TRS_IDS; i++)
            if (m[i].live) {
                n++;
                b += trs_bytes(&m[i]);
                if (old < 0 || m[i].stamp < m[old].stamp) old = i;
            }
        if (n <= max_n && b <= max_b) return;
        m[old].live = 0;
    }
}

static void trs_random_text(uint64_t *rng, char *out, int cap)
{
    int n = (int)(tu_xorshift(rng) % (uint64_t)(cap - 1));
    for (int i = 0; i < n; i++) out[i] = (char)('a' + tu_xorshift(rng) % 26);
    out[n] = 0;
}

Test(rstore, matches_a_brute_force_model)
{
    uint64_t seed = tu_seed(0x7e570e), rng = seed;
    printf("rstore seed %llu\n", (unsigned long long)seed);
    for (int round = 0; round < 20; round++) {
        int max_n = 1 + (int)(tu_xorshift(&rng) % 8);
        size_t max_b = 40 + tu_xorshift(&rng) % 300;
        rstore *s = rstore_create(max_n, max_b);
        cr_assert_not_null(s);
        trs_ent m[TRS_IDS];
        memset(m, 0, sizeof m);
        for (int i = 0; i < TRS_IDS; i++) snprintf(m[i].id, sizeof m[i].id, "resp_%d", i);
        long clock = 0;
        for (int op = 0; op < 600; op++) {
            int i = (int)(tu_xorshift(&rng) % TRS_IDS), k = (int)(tu_xorshift(&rng) % 10);
            if (k < 5) { /* put */
                char r[64], c[64];
                trs_random_text(&rng, r, sizeof r);
                trs_random_text(&rng, c, sizeof c);
                trs_ent e = m[i];
                strcpy(e.resp, r);
                strcpy(e.conv, c);
                int rc = rstore_put(s, m[i].id, r, c);
                if (trs_bytes(&e) > max_b) {
                    cr_assert_eq(rc, -E2BIG, "seed %llu op %d", (unsigned long long)seed, op);
                } else {
                    cr_assert_eq(rc, 0);
                    m[i] = e;
                    m[i].live = 1;
                    m[i].stamp = ++clock;
                    trs_evict(m, max_n, max_b);
                }
            } else if (k < 8) { /* get */
                char *r, *c;
                int rc = rstore_get(s, m[i].id, &r, &c);
                cr_assert_eq(rc, m[i].live ? 0 : -ENOENT, "seed %llu op %d: get %s", (unsigned long long)seed, op, m[i].id);
                if (!rc) {
                    cr_assert_str_eq(r, m[i].resp);
                    cr_assert_str_eq(c, m[i].conv);
                    m[i].stamp = ++clock;
                }
                free(r);
                free(c);
            } else { /* delete */
                cr_assert_eq(rstore_delete(s, m[i].id), m[i].live ? 0 : -ENOENT);
                m[i].live = 0;
            }
            rstore_check(s);
            int n = 0;
            size_t b = 0;
            for (int j = 0; j < TRS_IDS; j++)
                if (m[j].live) n++, b += trs_bytes(&m[j]);
            cr_assert_eq(rstore_count(s), n, "seed %llu op %d", (unsigned long long)seed, op);
            cr_assert_eq(rstore_bytes(s), b);
        }
        /* what the model keeps is what the store keeps (looked up oldest first, so that the
         * lookups' own use leaves the order alone) */
        for (int j = 0; j < TRS_IDS; j++) {
            char *r = NULL;
            cr_assert_eq(rstore_get(s, m[j].id, &r, NULL), m[j].live ? 0 : -ENOENT, "seed %llu: %s",
                         (unsigned long long)seed, m[j].id);
            free(r);
        }
        rstore_destroy(s);
    }
}

Test(rstore, bounds_and_refusals)
{
    cr_assert_null(rstore_create(0, 100));
    rstore *s = rstore_create(2, 1000);
    cr_assert_eq(rstore_put(s, "a", "1", "[]"), 0);
    cr_assert_eq(rstore_put(s, "b", "2", "[]"), 0);
    char *r;
    cr_assert_eq(rstore_get(s, "a", &r, NULL), 0); /* a is now the most recent */
    free(r);
    cr_assert_eq(rstore_put(s, "c", "3", "[]"), 0); /* b, the least recently used, goes */
    cr_assert_eq(rstore_get(s, "b", &r, NULL), -ENOENT);
    cr_assert_eq(rstore_get(s, "a", &r, NULL), 0);
    free(r);
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cr_assert_eq(rstore_put(s, "d", big, "[]"), -E2BIG);
    cr_assert_eq(rstore_count(s), 2, "a refused put changes nothing");
    cr_assert_eq(rstore_delete(s, "zz"), -ENOENT);
    rstore_check(s);
    rstore_destroy(s);
}
