/*
 * block_pool.c — reference counts of the KV cache's blocks and a LIFO stack of the free ones.
 *
 * Invariants (bp_check asserts them):
 *   - refcount[id] ≥ 0 for every id;
 *   - the free stack holds exactly the ids whose refcount is 0, each once;
 *   - n_free == number of entries on the stack.
 * LIFO reuse keeps recently freed (cache-warm) blocks in play first. Every operation is O(1)
 * except bp_alloc (O(n) in the blocks taken) and bp_check (O(n_blocks)).
 *
 * Callers: the scheduler (sequence block tables) and the radix cache (shared prefixes), both on
 * the engine thread.
 */
#include "cache/block_pool.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct block_pool {
    int32_t n_blocks;
    int32_t n_free;      /* entries in free_stack */
    int32_t *refcount;   /* [n_blocks] */
    int32_t *free_stack; /* [n_blocks]; free_stack[n_free - 1] is the next block handed out */
};

/* Creates a pool whose blocks are all free; the stack is filled so that block 0 is handed out
 * first, which keeps fresh pools' block tables easy to read in logs and tests. */
block_pool *bp_create(int32_t n_blocks)
{
    if (n_blocks < 0) return NULL;
    block_pool *bp = calloc(1, sizeof *bp);
    if (!bp) return NULL;
    size_t n = n_blocks > 0 ? (size_t)n_blocks : 1;
    bp->refcount = calloc(n, sizeof *bp->refcount);
    bp->free_stack = malloc(n * sizeof *bp->free_stack);
    if (!bp->refcount || !bp->free_stack) {
        bp_destroy(bp);
        return NULL;
    }
    bp->n_blocks = n_blocks;
    bp->n_free = n_blocks;
    for (int32_t i = 0; i < n_blocks; i++)
        bp->free_stack[i] = n_blocks - 1 - i;
    return bp;
}

void bp_destroy(block_pool *bp)
{
    if (!bp) return;
    free(bp->refcount);
    free(bp->free_stack);
    free(bp);
}

/* Pops n ids off the free stack, each with refcount 1. -ENOSPC (nothing taken) when fewer than
 * n are free. n == 0 succeeds and takes nothing. */
int bp_alloc(block_pool *bp, int32_t n, int32_t *ids)
{
    assert(n >= 0);
    if (n > bp->n_free) return -ENOSPC;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = bp->free_stack[--bp->n_free];
        assert(bp->refcount[id] == 0);
        bp->refcount[id] = 1;
        ids[i] = id;
    }
    return 0;
}

/* Adds a reference; taking a reference to a free block is a programmer error. */
void bp_ref(block_pool *bp, int32_t id)
{
    assert(id >= 0 && id < bp->n_blocks);
    assert(bp->refcount[id] > 0);
    bp->refcount[id]++;
}

/* Drops a reference; at zero the block goes back on top of the free stack. */
void bp_unref(block_pool *bp, int32_t id)
{
    assert(id >= 0 && id < bp->n_blocks);
    assert(bp->refcount[id] > 0);
    if (--bp->refcount[id] == 0) {
        assert(bp->n_free < bp->n_blocks);
        bp->free_stack[bp->n_free++] = id;
    }
}

int32_t bp_refcount(const block_pool *bp, int32_t id)
{
    assert(id >= 0 && id < bp->n_blocks);
    return bp->refcount[id];
}

int32_t bp_num_free(const block_pool *bp)
{
    return bp->n_free;
}

int32_t bp_num_blocks(const block_pool *bp)
{
    return bp->n_blocks;
}

/* Asserts every invariant of the file comment; O(n_blocks) time and memory. */
void bp_check(const block_pool *bp)
{
    assert(bp->n_free >= 0 && bp->n_free <= bp->n_blocks);
    unsigned char *seen = calloc(bp->n_blocks > 0 ? (size_t)bp->n_blocks : 1, 1);
    assert(seen);
    for (int32_t i = 0; i < bp->n_free; i++) {
        int32_t id = bp->free_stack[i];
        assert(id >= 0 && id < bp->n_blocks);
        assert(!seen[id]);
        assert(bp->refcount[id] == 0);
        seen[id] = 1;
    }
    int32_t n_zero = 0;
    for (int32_t id = 0; id < bp->n_blocks; id++) {
        assert(bp->refcount[id] >= 0);
        if (bp->refcount[id] == 0) {
            assert(seen[id]);
            n_zero++;
        }
    }
    assert(n_zero == bp->n_free);
    free(seen);
}
