/*
 * radix_harness.h — what the radix prefix cache's randomised tests share (test_radix.c,
 * test_radix_tier.c): the sizes of their runs, the blocks a simulated sequence holds, and the generator of token runs
 * that often share a prefix with an earlier one.
 */
#ifndef KVSERVE_TESTS_RADIX_HARNESS_H
#define KVSERVE_TESTS_RADIX_HARNESS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#define TRX_MAX_BLK 12 /* longest token run in blocks */
#define TRX_MAX_BS 4
#define TRX_MAX_TOK (TRX_MAX_BLK * TRX_MAX_BS + TRX_MAX_BS - 1)
#define TRX_POOL 64
#define TRX_SEQS 8
#define TRX_HIST 16

typedef struct trx_seq {
    int n;
    int32_t ids[TRX_MAX_BLK];
} trx_seq;

/* A token run that often shares a prefix with an earlier one; small alphabet for collisions. */
static inline int trx_gen(uint64_t *rng, int bs, int32_t hist[][TRX_MAX_TOK], int *hist_len,
                          int *n_hist, int32_t *out)
{
    int max_len = TRX_MAX_BLK * bs + bs - 1;
    int len = (int)(tu_xorshift(rng) % (uint64_t)(max_len + 1)), keep = 0;
    if (*n_hist > 0 && tu_xorshift(rng) % 3 != 0) {
        int h = (int)(tu_xorshift(rng) % (uint64_t)*n_hist);
        keep = (int)(tu_xorshift(rng) % (uint64_t)(hist_len[h] + 1));
        if (keep > len) len = keep;
        memcpy(out, hist[h], (size_t)keep * sizeof *out);
    }
    for (int i = keep; i < len; i++) out[i] = (int32_t)(tu_xorshift(rng) % 3);
    int slot = *n_hist < TRX_HIST ? (*n_hist)++ : (int)(tu_xorshift(rng) % TRX_HIST);
    memcpy(hist[slot], out, (size_t)len * sizeof *out);
    hist_len[slot] = len;
    return len;
}

#endif
