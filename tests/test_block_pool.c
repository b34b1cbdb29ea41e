/*
 * test_block_pool.c — the KV block pool against a brute-force model of refcounts.
 *
 * The model is just an array of counts; the pool must agree with it on every refcount, on the
 * number of free blocks, on all-or-nothing allocation, and bp_check must hold after every op.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cache/block_pool.h"

static uint64_t tbp_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(block_pool, basics)
{
    block_pool *bp = bp_create(4);
    cr_assert_not_null(bp);
    bp_check(bp);
    cr_assert_eq(bp_num_blocks(bp), 4);
    cr_assert_eq(bp_num_free(bp), 4);
    int32_t ids[5] = {-1, -1, -1, -1, -1};
    cr_assert_eq(bp_alloc(bp, 5, ids), -ENOSPC);
    cr_assert_eq(ids[0], -1, "a failed alloc must not write ids");
    cr_assert_eq(bp_num_free(bp), 4);
    bp_check(bp);
    cr_assert_eq(bp_alloc(bp, 3, ids), 0);
    cr_assert_eq(ids[0], 0);
    cr_assert_eq(ids[1], 1);
    cr_assert_eq(ids[2], 2);
    cr_assert_eq(bp_num_free(bp), 1);
    cr_assert_eq(bp_alloc(bp, 2, ids + 3), -ENOSPC);
    cr_assert_eq(bp_num_free(bp), 1);
    bp_ref(bp, 1);
    cr_assert_eq(bp_refcount(bp, 1), 2);
    bp_unref(bp, 1);
    cr_assert_eq(bp_refcount(bp, 1), 1);
    bp_unref(bp, 1);
    cr_assert_eq(bp_refcount(bp, 1), 0);
    bp_check(bp);
    /* LIFO: the block just freed is handed out next. */
    int32_t id;
    cr_assert_eq(bp_alloc(bp, 1, &id), 0);
    cr_assert_eq(id, 1);
    cr_assert_eq(bp_alloc(bp, 0, &id), 0);
    bp_check(bp);
    bp_destroy(bp);

    block_pool *empty = bp_create(0);
    cr_assert_not_null(empty);
    bp_check(empty);
    cr_assert_eq(bp_alloc(empty, 1, &id), -ENOSPC);
    cr_assert_eq(bp_alloc(empty, 0, &id), 0);
    bp_destroy(empty);
}

/* Long random sequences of alloc / ref / unref against the brute-force model. */
Test(block_pool, random_vs_model)
{
    const uint64_t seed = 0x6b76706f6f6c3031ull;
    printf("block_pool random_vs_model seed=0x%016llx\n", (unsigned long long)seed);
    uint64_t s = seed;
    for (int round = 0; round < 4; round++) {
        int32_t n_blocks = 1 + (int32_t)(tbp_rng(&s) % 97);
        block_pool *bp = bp_create(n_blocks);
        cr_assert_not_null(bp);
        int32_t *model = calloc((size_t)n_blocks, sizeof *model);
        int32_t *ids = malloc((size_t)(n_blocks + 8) * sizeof *ids);
        int n_full = 0, n_ok = 0;
        for (int op = 0; op < 20000; op++) {
            int kind = (int)(tbp_rng(&s) % 10);
            if (kind < 4) { /* alloc, sometimes too many */
                int32_t n = (int32_t)(tbp_rng(&s) % (uint64_t)(n_blocks / 4 + 3));
                int32_t free_model = 0;
                for (int32_t i = 0; i < n_blocks; i++)
                    free_model += model[i] == 0;
                for (int32_t i = 0; i < n + 8; i++)
                    ids[i] = -7;
                int rc = bp_alloc(bp, n, ids);
                if (n > free_model) {
                    cr_assert_eq(rc, -ENOSPC, "seed 0x%llx op %d", (unsigned long long)seed, op);
                    for (int32_t i = 0; i < n; i++)
                        cr_assert_eq(ids[i], -7);
                    n_full++;
                } else {
                    cr_assert_eq(rc, 0, "seed 0x%llx op %d", (unsigned long long)seed, op);
                    n_ok++;
                    for (int32_t i = 0; i < n; i++) {
                        cr_assert(ids[i] >= 0 && ids[i] < n_blocks);
                        cr_assert_eq(model[ids[i]], 0, "op %d: handed out a used block", op);
                        model[ids[i]] = 1;
                    }
                }
            } else {
                /* pick a used block at random, if any */
                int32_t start = (int32_t)(tbp_rng(&s) % (uint64_t)n_blocks), id = -1;
                for (int32_t k = 0; k < n_blocks; k++) {
                    int32_t c = (start + k) % n_blocks;
                    if (model[c] > 0) {
                        id = c;
                        break;
                    }
                }
                if (id < 0) continue;
                if (kind < 6) {
                    bp_ref(bp, id);
                    model[id]++;
                } else {
                    bp_unref(bp, id);
                    model[id]--;
                }
            }
            bp_check(bp);
            int32_t free_model = 0;
            for (int32_t i = 0; i < n_blocks; i++) {
                cr_assert_eq(bp_refcount(bp, i), model[i], "seed 0x%llx op %d block %d",
                             (unsigned long long)seed, op, i);
                free_model += model[i] == 0;
            }
            cr_assert_eq(bp_num_free(bp), free_model);
        }
        /* both outcomes of alloc must have been exercised */
        cr_assert(n_full > 100 && n_ok > 100, "full %d ok %d", n_full, n_ok);
        /* drain: every block back to free */
        for (int32_t i = 0; i < n_blocks; i++)
            while (model[i] > 0) {
                bp_unref(bp, i);
                model[i]--;
                bp_check(bp);
            }
        cr_assert_eq(bp_num_free(bp), n_blocks);
        free(ids);
        free(model);
        bp_destroy(bp);
    }
}
