/*
 * block_pool.h — reference counts of the KV cache's blocks.
 *
 *   ids:      0   1   2   3   4   5  ...  n_blocks-1
 *   refcount: 2   0   1   0   0   3  ...
 *   free stack (LIFO): [4, 3, 1]        a block is free  <=>  its refcount is 0
 *
 * The refcount is the single source of truth about ownership: sequences and the radix tree only
 * hold references. The memory of the blocks belongs to the backend; this module only hands out ids.
 * Owned by the engine thread; not thread-safe.
 */
#ifndef KVSERVE_BLOCK_POOL_H
#define KVSERVE_BLOCK_POOL_H

#include <stdint.h>

typedef struct block_pool block_pool;

/* A pool of n_blocks free blocks, or NULL on -ENOMEM. */
block_pool *bp_create(int32_t n_blocks);
void bp_destroy(block_pool *bp);

/* Takes n free blocks (refcount 0 → 1) into ids[0..n). All or nothing: returns 0, or -ENOSPC and
 * takes none. */
int bp_alloc(block_pool *bp, int32_t n, int32_t *ids);
/* Adds a reference to an allocated block (refcount ≥ 1). */
void bp_ref(block_pool *bp, int32_t id);
/* Drops a reference; the block returns to the free stack when its count reaches 0. */
void bp_unref(block_pool *bp, int32_t id);
int32_t bp_refcount(const block_pool *bp, int32_t id);
int32_t bp_num_free(const block_pool *bp);
int32_t bp_num_blocks(const block_pool *bp);
/* Asserts the invariants (free stack = exactly the blocks with refcount 0, no duplicates). */
void bp_check(const block_pool *bp);

#endif
