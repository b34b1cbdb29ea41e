/*
 * radix.h — radix-tree prefix cache over the paged KV, at KV-block granularity.
 *
 *                       root
 *                      /    \
 *        [t0..t15 | b7]      [u0..u15 | b2]         each edge = one or more FULL blocks:
 *           /       \                 |             block_size token ids + the block id that
 *  [t16..t47|b3,b9] [v16..v31|b4]  [u16..u31|b5]    holds their K/V; children keyed by the
 *                                                   whole first block of their edge (sorted)
 *
 * A path from the root spells a token prefix whose K/V is cached in the listed blocks. The tree
 * holds exactly one block-pool reference per block it indexes; callers of rdx_match get their own
 * references. Only leaves whose blocks nobody else references (refcount 1) are evictable, least
 * recently used first. Owned by the engine thread; not thread-safe.
 *
 * With a second tier (rdx_set_tier), every block also has its key (cache/hash.h: the root key
 * chained with the path's tokens), and an evicted block whose K/V the tier keeps stays in the
 * tree marked RDX_TIERED (no pool block, no reference). Along every path resident blocks come
 * first and tiered ones after them ("[t0..t15 | b7, T]"), so rdx_match still returns resident
 * blocks only, and rdx_match_tiered the tiered ones that follow (which the caller loads back and
 * inserts again). A node whose subtree is all tiered counts as absent for eviction.
 *
 * With hooks (rdx_set_hooks), the tree tells its owner when a block enters it and when it lets
 * one go, so that the owner can keep something alongside every indexed block: the scheduler
 * keeps, per further layer group, the "companion" block holding the same tokens' K/V of that
 * group's layers, and a reference on it for as long as the tree indexes the block.
 */
#ifndef KVSERVE_RADIX_H
#define KVSERVE_RADIX_H

#include <stdint.h>

#include "cache/block_pool.h"
#include "cache/hash.h"

/* The block id of a tiered block: its K/V is in the second tier only. */
#define RDX_TIERED (-1)

/* A second tier under the tree (cache/tier.c behind the scheduler). parent is the key of the
 * block before (the root key for the first); tokens are the block's block_size tokens. */
typedef struct rdx_tier {
    hash_key root;  /* the key of the empty prefix (the model's fingerprint) */
    /* A resident block entered the tree (newly computed or loaded back). */
    void (*saved)(void *ud, hash_key key, hash_key parent, const int32_t *tokens, int32_t block);
    /* The block is evicted from the pool: returns 1 when the tier keeps its K/V (the block stays
     * in the tree, tiered), 0 when it is lost. */
    int (*spill)(void *ud, hash_key key, hash_key parent, const int32_t *tokens, int32_t block);
    /* 1 while the tier can load key. */
    int (*has)(void *ud, hash_key key);
    void *ud;
} rdx_tier;

/* Callbacks of the tree's owner on the blocks it indexes (engine thread, inside the tree's calls;
 * they must not call back into the tree). */
typedef struct rdx_hooks {
    /* block entered the tree (the tree has just taken its reference) as the pos-th block of its
     * path: the index into the blocks[] of the rdx_insert that brought it. */
    void (*indexed)(void *ud, int32_t block, int pos);
    /* The tree lets block go (eviction, forced eviction, a tier spill, destroy): called right
     * before the tree drops its reference. */
    void (*released)(void *ud, int32_t block);
    void *ud;
} rdx_hooks;

typedef struct rdx_tree rdx_tree;

/* An empty tree over bp (borrowed; must outlive the tree). NULL on -ENOMEM. */
rdx_tree *rdx_create(block_pool *bp, int block_size);
/* Drops the tree's references and frees it. */
void rdx_destroy(rdx_tree *t);

/* Longest cached prefix of tokens[0..n_tokens) in whole resident blocks: writes its block ids into
 * blocks[0..k) (k ≤ max_blocks), takes one reference on each for the caller, marks the path as
 * used now, and returns the matched token count k × block_size. */
int rdx_match(rdx_tree *t, const int32_t *tokens, int n_tokens, int32_t *blocks, int max_blocks);

/* After rdx_match found the first `matched` tokens (whole blocks), the cached block that
 * continues them best: among the blocks that follow that path, the one whose first tokens agree
 * with tokens[matched ..] for the most positions (fewer than a block, at most n_tokens - matched).
 * Writes its id to *block (no reference taken: a caller that keeps it takes one before the tree
 * next changes) and returns the count of agreeing tokens, 0 when no block agrees on the first.
 * Those tokens' K/V in that block are valid for this prompt, so a copy of the block saves
 * computing them. */
int rdx_match_partial(const rdx_tree *t, const int32_t *tokens, int n_tokens, int matched, int32_t *block);

/* Indexes the first n_tokens / block_size full blocks of tokens with their block ids. Blocks
 * whose prefix is already cached keep the tree's existing block (the caller's duplicate is left
 * alone); a tiered block on the path takes the caller's block (it was loaded back). For newly
 * indexed blocks the tree takes a reference. Returns the number of blocks newly indexed, or
 * -ENOMEM (tree unchanged). */
int rdx_insert(rdx_tree *t, const int32_t *tokens, int n_tokens, const int32_t *blocks);

/* Frees up to n_blocks blocks by evicting least-recently-used leaves whose blocks only the tree
 * references (with a tier: the last resident blocks of paths, which the tier may keep: they then
 * stay tiered). Returns the number of blocks returned to the pool. */
int rdx_evict(rdx_tree *t, int n_blocks);

/* Like rdx_evict, but when leaves in use by others stand in the way it unlinks them too (the
 * tree's references go, their blocks stay with their users), so that cached ancestors only the
 * tree references become leaves and are freed. For windowed sequences, which release a cached
 * path's early blocks while still holding its later ones: those early blocks are otherwise
 * stuck inside the tree. Returns the number of blocks returned to the pool. */
int rdx_evict_forced(rdx_tree *t, int n_blocks);

/* Like rdx_evict (forced: rdx_evict_forced) with another goal: evicts until `pool` has n_free free
 * blocks or nothing more can go. pool is one whose blocks the hooks release along with the
 * tree's own (a layer group's companions); the tree's own pool works too. Returns the number of
 * the tree's blocks returned to the tree's pool. */
int rdx_evict_until(rdx_tree *t, const block_pool *pool, int32_t n_free, int forced);

/* Installs hooks (copied) on an empty tree: every block indexed from now on is reported to
 * h->indexed, and every block the tree lets go to h->released. 0 or -EINVAL (not empty, or a
 * callback missing). */
int rdx_set_hooks(rdx_tree *t, const rdx_hooks *h);

/* Writes the ids of the resident blocks the tree indexes into out[0 .. rdx_n_blocks(t)) (any
 * order) and returns their count. O(nodes + blocks). */
int rdx_list_blocks(const rdx_tree *t, int32_t *out);

/* Blocks the tree references, and how many of them could be evicted right now. */
int rdx_n_blocks(const rdx_tree *t);
int rdx_n_evictable(const rdx_tree *t);

/* Puts a second tier under an empty tree (tier is copied). From now on the tree keeps every
 * block's key, rdx_insert reports new blocks to tier->saved and eviction offers blocks to
 * tier->spill. 0, -EINVAL (the tree is not empty) or -ENOMEM. */
int rdx_set_tier(rdx_tree *t, const rdx_tier *tier);

/* After rdx_match found the first `matched` tokens, the keys of the full blocks of
 * tokens[0 .. n_tokens) that follow and that the tier can load, in order, at most max: first the
 * tree's tiered blocks on the path (the first one the tier no longer has is dropped from the
 * tree with everything below it), then, past the end of the tree's path, further blocks whose
 * keys the tier has (what a restarted server finds on disk). Returns how many (0 without a
 * tier). */
int rdx_match_tiered(rdx_tree *t, const int32_t *tokens, int n_tokens, int matched, hash_key *keys, int max);

/* Blocks marked tiered. */
int rdx_n_tiered(const rdx_tree *t);

/* Drops every tiered block the tier no longer has (and what hangs below it). Returns the number
 * of blocks dropped. O(nodes + blocks) calls to tier->has. */
int rdx_prune_tiered(rdx_tree *t);

/* Asserts the invariants: structure, edge lengths in whole blocks, parent links, each indexed
 * block referenced at least once, counters consistent; with a tier, every key the chain of its
 * path's tokens and resident blocks before tiered ones on every path. */
void rdx_check(const rdx_tree *t);

#endif
