/*
 * radix.c — the prefix cache: a radix tree over token ids, one KV block per block_size tokens.
 *
 * Each node below the root owns an edge of n_blocks ≥ 1 whole blocks: n_blocks × block_size
 * token ids and the n_blocks block ids holding their K/V. A root-to-node path spells a cached
 * prefix. Children are kept in an array sorted by their edge's FIRST BLOCK (all block_size
 * tokens compared lexicographically), not only its first token: with block_size > 1 two edges
 * may start with the same token and differ later inside their first block.
 *
 * Invariants (rdx_check asserts them):
 *   - the root has no edge and no parent; every other node has n_blocks ≥ 1 and its parent's
 *     children array holds it exactly once; siblings' first blocks are distinct and sorted;
 *   - every indexed block id is in range, indexed once in the whole tree, and its block-pool
 *     refcount is ≥ 1 (the tree owns exactly one of those references);
 *   - last_access of a node ≥ last_access of each child (a use of a path touches every node on
 *     it), so leaves are the least recently used nodes of their paths;
 *   - n_nodes, n_blocks equal the totals over the tree; scratch holds ≥ n_nodes + 1 entries.
 *
 * Access times are a logical clock that every rdx_match and rdx_insert advances by one, so the
 * LRU order is deterministic. A match or insert whose path ends inside an edge splits that edge
 * at the block boundary, so every node's blocks were last used at one time and eviction order
 * is exact at block granularity (when a split cannot be allocated in rdx_match, the whole edge
 * is marked used: LRU becomes approximate, nothing else changes).
 *
 * An insert whose path ends at the end of a leaf grows that leaf's edge instead of hanging a
 * child under it, so a sequence offering its blocks chunk by chunk keeps one node.
 *
 * Eviction trims leaves from their tail: the trailing blocks whose refcount is 1 (only the tree
 * holds them) go back to the pool, least recently used leaf first; a leaf whose edge empties is
 * removed and its parent may become a leaf in turn.
 *
 * With a second tier (rdx_set_tier) each node also keeps its blocks' keys, and n_res counts its
 * leading resident blocks: the rest of its edge is tiered (RDX_TIERED), and so is everything
 * below a node that has a tiered block. Eviction then works on the last resident blocks of paths
 * (a "leaf" is a node none of whose children has a resident block): each one is offered to the
 * tier, and stays, tiered, when the tier keeps it; one the tier does not keep is dropped with
 * the tiered blocks after it. Invariants added: blocks[i] ≥ 0 iff i < n_res; a node with a
 * tiered block has children with no resident block; keys[i] = hash_key_next(key before it,
 * tokens of block i), the key before a node's first block being its parent's last key (the
 * tier's root key under the root); n_tiered counts the tiered blocks.
 *
 * Hooks (rdx_set_hooks) see every block enter (rdx_insert, and a tiered block taken back) and
 * leave (eviction, destroy) while the tree holds its reference, so an owner can keep state per
 * indexed block in step with the tree.
 *
 * Costs, for L tokens, F children per node, N nodes: match and insert walk O(L) tokens plus a
 * binary search of O(log F) block comparisons per node on the path (a comparison usually stops
 * at the first token); evict is O(N + k log N) for k leaves touched (it heapifies the current
 * leaves; no heap is kept between calls, so matches and inserts pay nothing for LRU);
 * rdx_n_evictable and rdx_check are O(N + blocks). Expected workload: a few hundred to a few
 * hundred thousand blocks, one match and a few inserts per request, evict when allocation fails.
 *
 * Callers: the scheduler on the engine thread (admission, prefill progress, finish, and eviction
 * when the block pool runs out). Not thread-safe.
 */
#include "cache/radix.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct rdx_node rdx_node;
struct rdx_node {
    rdx_node *parent;     /* NULL for the root */
    rdx_node **children;  /* [n_children] sorted by the first block of their edge */
    int n_children;
    int cap_children;     /* allocated entries of children */
    int n_blocks;         /* edge length in blocks; 0 only for the root */
    int cap_blocks;       /* blocks that tokens and blocks have room for */
    int32_t *tokens;      /* [n_blocks × block_size] token ids of the edge */
    int32_t *blocks;      /* [n_blocks] block ids holding those tokens' K/V (RDX_TIERED past n_res) */
    hash_key *keys;       /* [n_blocks] the blocks' keys, with a tier; NULL without one */
    int n_res;            /* leading resident blocks (= n_blocks without a tier) */
    uint64_t last_access; /* logical time of the last match or insert whose path covered it */
    uint64_t serial;      /* creation order; a deterministic tie-break for LRU */
    int mark;             /* scratch flag of rdx_n_evictable's traversal */
};

struct rdx_tree {
    block_pool *bp;       /* borrowed */
    int block_size;       /* tokens per block */
    rdx_node *root;
    int n_nodes;          /* nodes below the root */
    int n_blocks;         /* resident blocks indexed (= references the tree holds) */
    int n_tiered;         /* blocks marked tiered */
    int has_tier;         /* 1 after rdx_set_tier */
    rdx_tier tier;
    int has_hooks;        /* 1 after rdx_set_hooks */
    rdx_hooks hooks;
    uint64_t clock;       /* logical time, +1 per match and insert */
    uint64_t next_serial; /* serial of the next node created */
    rdx_node **scratch;   /* [scratch_cap ≥ n_nodes + 1]: traversal list and eviction heap */
    int scratch_cap;
};

/* The hooks' side of a block entering the tree (its reference just taken) and leaving it (its
 * reference about to go). */
static void rdx__indexed(rdx_tree *t, int32_t block, int pos)
{
    if (t->has_hooks) t->hooks.indexed(t->hooks.ud, block, pos);
}

static void rdx__released(rdx_tree *t, int32_t block)
{
    if (t->has_hooks) t->hooks.released(t->hooks.ud, block);
}

/* Lexicographic order of two blocks of token ids. */
static int rdx__keycmp(const int32_t *a, const int32_t *b, int bs)
{
    for (int i = 0; i < bs; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* Index of the child of x whose first block equals key, or -(insertion point) - 1. */
static int rdx__find_child(const rdx_node *x, const int32_t *key, int bs)
{
    int lo = 0, hi = x->n_children;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = rdx__keycmp(x->children[mid]->tokens, key, bs);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -lo - 1;
}

static void rdx__node_free(rdx_node *x)
{
    if (!x) return;
    free(x->children);
    free(x->tokens);
    free(x->blocks);
    free(x->keys);
    free(x);
}

/* A detached node with room for n_blocks blocks and cap_children children, or NULL. */
static rdx_node *rdx__node_new(rdx_tree *t, int n_blocks, int cap_children)
{
    rdx_node *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    size_t nb = n_blocks > 0 ? (size_t)n_blocks : 1;
    x->tokens = malloc(nb * (size_t)t->block_size * sizeof *x->tokens);
    x->blocks = malloc(nb * sizeof *x->blocks);
    x->children = cap_children > 0 ? malloc((size_t)cap_children * sizeof *x->children) : NULL;
    if (t->has_tier) x->keys = malloc(nb * sizeof *x->keys);
    if (!x->tokens || !x->blocks || (cap_children > 0 && !x->children) || (t->has_tier && !x->keys)) {
        rdx__node_free(x);
        return NULL;
    }
    x->cap_children = cap_children;
    x->n_blocks = x->n_res = n_blocks;
    x->cap_blocks = (int)nb;
    x->serial = t->next_serial++;
    return x;
}

/* Makes room for at least n more children of x; 0 or -ENOMEM (x unchanged). */
static int rdx__reserve_children(rdx_node *x, int n)
{
    if (x->n_children + n <= x->cap_children) return 0;
    int cap = x->cap_children ? x->cap_children * 2 : 2;
    while (cap < x->n_children + n) cap *= 2;
    rdx_node **c = realloc(x->children, (size_t)cap * sizeof *c);
    if (!c) return -ENOMEM;
    x->children = c;
    x->cap_children = cap;
    return 0;
}

/* Makes room for n blocks in x's edge; 0 or -ENOMEM (x's contents unchanged). */
static int rdx__reserve_blocks(rdx_tree *t, rdx_node *x, int n)
{
    if (n <= x->cap_blocks) return 0;
    int cap = x->cap_blocks * 2 > n ? x->cap_blocks * 2 : n;
    int32_t *tok = realloc(x->tokens, (size_t)cap * t->block_size * sizeof *tok);
    if (!tok) return -ENOMEM;
    x->tokens = tok;
    int32_t *blk = realloc(x->blocks, (size_t)cap * sizeof *blk);
    if (!blk) return -ENOMEM;
    x->blocks = blk;
    if (t->has_tier) {
        hash_key *k = realloc(x->keys, (size_t)cap * sizeof *k);
        if (!k) return -ENOMEM;
        x->keys = k;
    }
    x->cap_blocks = cap;
    return 0;
}

/* Makes the scratch array hold at least n entries; 0 or -ENOMEM (unchanged). */
static int rdx__reserve_scratch(rdx_tree *t, int n)
{
    if (n <= t->scratch_cap) return 0;
    int cap = t->scratch_cap ? t->scratch_cap : 16;
    while (cap < n) cap *= 2;
    rdx_node **s = realloc(t->scratch, (size_t)cap * sizeof *s);
    if (!s) return -ENOMEM;
    t->scratch = s;
    t->scratch_cap = cap;
    return 0;
}

/* Inserts child c (detached) into x's sorted children; capacity must already be reserved. */
static void rdx__add_child(rdx_tree *t, rdx_node *x, rdx_node *c)
{
    int i = rdx__find_child(x, c->tokens, t->block_size);
    assert(i < 0 && x->n_children < x->cap_children);
    i = -i - 1;
    memmove(x->children + i + 1, x->children + i, (size_t)(x->n_children - i) * sizeof *x->children);
    x->children[i] = c;
    x->n_children++;
    c->parent = x;
}

static void rdx__remove_child(rdx_tree *t, rdx_node *x, rdx_node *c)
{
    int i = rdx__find_child(x, c->tokens, t->block_size);
    assert(i >= 0 && x->children[i] == c);
    memmove(x->children + i, x->children + i + 1,
            (size_t)(x->n_children - i - 1) * sizeof *x->children);
    x->n_children--;
}

/* Lists every node, root first, parents before children, into t->scratch; returns the count. */
static int rdx__list_nodes(const rdx_tree *t)
{
    rdx_node **s = t->scratch;
    int n = 0;
    s[n++] = t->root;
    for (int i = 0; i < n; i++) {
        const rdx_node *x = s[i];
        assert(n + x->n_children <= t->scratch_cap);
        for (int c = 0; c < x->n_children; c++) s[n++] = x->children[c];
    }
    return n;
}

rdx_tree *rdx_create(block_pool *bp, int block_size)
{
    assert(bp && block_size > 0);
    rdx_tree *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->bp = bp;
    t->block_size = block_size;
    t->root = rdx__node_new(t, 0, 0);
    if (!t->root || rdx__reserve_scratch(t, 16) != 0) {
        rdx__node_free(t->root);
        free(t->scratch);
        free(t);
        return NULL;
    }
    return t;
}

void rdx_destroy(rdx_tree *t)
{
    if (!t) return;
    int n = rdx__list_nodes(t);
    for (int i = 0; i < n; i++) {
        rdx_node *x = t->scratch[i];
        for (int b = 0; b < x->n_res; b++) {
            rdx__released(t, x->blocks[b]);
            bp_unref(t->bp, x->blocks[b]);
        }
        rdx__node_free(x);
    }
    free(t->scratch);
    free(t);
}

/* Follows tokens[0 .. n_blk × block_size) down from the root as far as whole blocks match.
 * Returns the number of blocks matched; *node is the last node entered (the root if none) and
 * *off how many blocks of its edge matched (off == node->n_blocks when the path ends at node). */
static int rdx__walk(const rdx_tree *t, const int32_t *tokens, int n_blk, rdx_node **node, int *off)
{
    const int bs = t->block_size;
    rdx_node *x = t->root;
    int pos = 0, j = 0;
    while (pos < n_blk) {
        int i = rdx__find_child(x, tokens + (size_t)pos * bs, bs);
        if (i < 0) break;
        x = x->children[i];
        j = 1; /* the first block equals the key */
        while (j < x->n_blocks && pos + j < n_blk &&
               memcmp(x->tokens + (size_t)j * bs, tokens + (size_t)(pos + j) * bs,
                      (size_t)bs * sizeof *tokens) == 0)
            j++;
        pos += j;
        if (j < x->n_blocks) break;
    }
    *node = x;
    *off = x == t->root ? 0 : j;
    return pos;
}

/* Splits x's edge after its first j blocks (0 < j < n_blocks) using mid, a fresh node with room
 * for j blocks and one child: mid takes x's place under x's parent and x becomes mid's only
 * child. Nothing can fail here; returns mid. */
static rdx_node *rdx__split(rdx_tree *t, rdx_node *x, int j, rdx_node *mid)
{
    const int bs = t->block_size;
    assert(j > 0 && j < x->n_blocks && mid->n_blocks == j && mid->cap_children >= 1);
    rdx_node *p = x->parent;
    int i = rdx__find_child(p, x->tokens, bs);
    assert(i >= 0 && p->children[i] == x);
    memcpy(mid->tokens, x->tokens, (size_t)j * bs * sizeof *mid->tokens);
    memcpy(mid->blocks, x->blocks, (size_t)j * sizeof *mid->blocks);
    if (t->has_tier) memcpy(mid->keys, x->keys, (size_t)j * sizeof *mid->keys);
    mid->n_res = x->n_res < j ? x->n_res : j;
    x->n_res = x->n_res > j ? x->n_res - j : 0;
    mid->last_access = x->last_access;
    mid->parent = p;
    p->children[i] = mid; /* same first block: the order of p's children is unchanged */
    x->n_blocks -= j;
    memmove(x->tokens, x->tokens + (size_t)j * bs, (size_t)x->n_blocks * bs * sizeof *x->tokens);
    memmove(x->blocks, x->blocks + j, (size_t)x->n_blocks * sizeof *x->blocks);
    if (t->has_tier) memmove(x->keys, x->keys + j, (size_t)x->n_blocks * sizeof *x->keys);
    mid->children[0] = x;
    mid->n_children = 1;
    x->parent = mid;
    t->n_nodes++;
    return mid;
}

/* Marks x and its ancestors as used at the current clock. */
static void rdx__touch(rdx_tree *t, rdx_node *x)
{
    for (; x; x = x->parent) x->last_access = t->clock;
}

int rdx_match(rdx_tree *t, const int32_t *tokens, int n_tokens, int32_t *blocks, int max_blocks)
{
    assert(n_tokens >= 0 && max_blocks >= 0);
    int n_blk = n_tokens / t->block_size;
    if (n_blk > max_blocks) n_blk = max_blocks;
    rdx_node *x;
    int off;
    int k = rdx__walk(t, tokens, n_blk, &x, &off);
    t->clock++;
    if (x != t->root && off < x->n_blocks && rdx__reserve_scratch(t, t->n_nodes + 2) == 0) {
        /* The path ends inside x's edge: split there so the unused tail keeps its old time. */
        rdx_node *mid = rdx__node_new(t, off, 1);
        if (mid) x = rdx__split(t, x, off, mid);
    }
    rdx__touch(t, x);
    /* Collect the block ids bottom-up: the deepest node's matched part goes last. */
    int end = k;
    for (rdx_node *y = x; y != t->root; y = y->parent) {
        int n = y == x ? off : y->n_blocks; /* x was split at off, or wholly matched */
        end -= n;
        memcpy(blocks + end, y->blocks, (size_t)n * sizeof *blocks);
    }
    assert(end == 0);
    int kr = 0; /* resident blocks come first on every path */
    while (kr < k && blocks[kr] != RDX_TIERED) kr++;
    for (int i = 0; i < kr; i++) bp_ref(t->bp, blocks[i]);
    return kr * t->block_size;
}

/* Leading positions on which block-sized token runs a and b agree, at most n. */
static int rdx__agree(const int32_t *a, const int32_t *b, int n)
{
    int k = 0;
    while (k < n && a[k] == b[k]) k++;
    return k;
}

int rdx_match_partial(const rdx_tree *t, const int32_t *tokens, int n_tokens, int matched, int32_t *block)
{
    const int bs = t->block_size;
    assert(matched >= 0 && matched % bs == 0 && matched <= n_tokens);
    int lim = n_tokens - matched < bs - 1 ? n_tokens - matched : bs - 1;
    if (lim <= 0) return 0;
    rdx_node *x;
    int off, best = 0;
    if (rdx__walk(t, tokens, matched / bs, &x, &off) != matched / bs) return 0;
    const int32_t *want = tokens + matched;
    if (x != t->root && off < x->n_blocks) { /* the path continues inside x's edge */
        if (off >= x->n_res) return 0; /* a tiered block: nothing to copy */
        best = rdx__agree(x->tokens + (size_t)off * bs, want, lim);
        if (best) *block = x->blocks[off];
        return best;
    }
    for (int i = 0; i < x->n_children; i++) {
        const rdx_node *y = x->children[i];
        if (y->n_res == 0) continue;
        int a = rdx__agree(y->tokens, want, lim);
        if (a > best) {
            best = a;
            *block = y->blocks[0];
        }
    }
    return best;
}

/* The key of the block before block i of x: the previous block's, the parent's last, or the
 * tier's root key at the top. */
static hash_key rdx__key_before(const rdx_tree *t, const rdx_node *x, int i)
{
    if (i > 0) return x->keys[i - 1];
    const rdx_node *p = x->parent;
    return p == t->root ? t->tier.root : p->keys[p->n_blocks - 1];
}

/* The path to x (ending at x's last block, k blocks long) takes the caller's blocks[] wherever it
 * is tiered: those blocks were loaded back. Returns how many it adopted. */
static int rdx__adopt(rdx_tree *t, rdx_node *x, int k, const int32_t *blocks)
{
    if (!t->n_tiered) return 0;
    int n = 0, end = k;
    for (rdx_node *y = x; y != t->root; y = y->parent) {
        int start = end - y->n_blocks;
        for (int i = y->n_res; i < y->n_blocks; i++) {
            int32_t id = blocks[start + i];
            y->blocks[i] = id;
            bp_ref(t->bp, id);
            rdx__indexed(t, id, start + i);
            t->tier.saved(t->tier.ud, y->keys[i], rdx__key_before(t, y, i), y->tokens + (size_t)i * t->block_size, id);
            n++;
        }
        y->n_res = y->n_blocks;
        end = start;
    }
    t->n_tiered -= n;
    t->n_blocks += n;
    return n;
}

int rdx_insert(rdx_tree *t, const int32_t *tokens, int n_tokens, const int32_t *blocks)
{
    assert(n_tokens >= 0);
    const int bs = t->block_size;
    int n_blk = n_tokens / bs;
    rdx_node *x;
    int off;
    int k = rdx__walk(t, tokens, n_blk, &x, &off);
    int n_new = n_blk - k;
    bool split = x != t->root && off < x->n_blocks;
    /* A path that ends at a leaf grows that leaf's edge: a sequence inserting its blocks chunk
     * by chunk keeps one node instead of a chain of them. */
    bool extend = !split && n_new > 0 && x != t->root && x->n_children == 0;

    /* Allocate everything first so that a failure leaves the tree as it was. */
    rdx_node *mid = NULL, *leaf = NULL;
    if (rdx__reserve_scratch(t, t->n_nodes + 3) != 0) return -ENOMEM;
    if (split && !(mid = rdx__node_new(t, off, 2))) return -ENOMEM;
    if (extend) {
        if (rdx__reserve_blocks(t, x, x->n_blocks + n_new) != 0) return -ENOMEM;
    } else if (n_new > 0) {
        leaf = rdx__node_new(t, n_new, 0);
        if (!leaf || (!split && rdx__reserve_children(x, 1) != 0)) {
            rdx__node_free(mid);
            rdx__node_free(leaf);
            return -ENOMEM;
        }
    }

    t->clock++;
    if (split) x = rdx__split(t, x, off, mid);
    int n_adopted = rdx__adopt(t, x, k, blocks);
    rdx_node *y = x; /* the node the new blocks go into, at index `at` */
    int at = 0;
    if (leaf) {
        memcpy(leaf->tokens, tokens + (size_t)k * bs, (size_t)n_new * bs * sizeof *tokens);
        rdx__add_child(t, x, leaf);
        t->n_nodes++;
        y = x = leaf;
    } else if (extend) {
        memcpy(x->tokens + (size_t)x->n_blocks * bs, tokens + (size_t)k * bs,
               (size_t)n_new * bs * sizeof *tokens);
        at = x->n_blocks;
        x->n_blocks += n_new;
        x->n_res += n_new;
    }
    if (n_new > 0) {
        hash_key prev = t->has_tier ? rdx__key_before(t, y, at) : (hash_key){0, 0};
        for (int i = 0; i < n_new; i++) {
            int32_t id = blocks[k + i];
            y->blocks[at + i] = id;
            bp_ref(t->bp, id);
            rdx__indexed(t, id, k + i);
            if (!t->has_tier) continue;
            const int32_t *tok = y->tokens + (size_t)(at + i) * bs;
            y->keys[at + i] = hash_key_next(prev, tok, bs);
            t->tier.saved(t->tier.ud, y->keys[at + i], prev, tok, id);
            prev = y->keys[at + i];
        }
        t->n_blocks += n_new;
    }
    rdx__touch(t, x);
    return n_new + n_adopted;
}

/* Min-heap order of eviction candidates: least recently used first, older node on ties. */
static bool rdx__older(const rdx_node *a, const rdx_node *b)
{
    if (a->last_access != b->last_access) return a->last_access < b->last_access;
    return a->serial < b->serial;
}

static void rdx__sift_down(rdx_node **h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && rdx__older(h[l], h[m])) m = l;
        if (r < n && rdx__older(h[r], h[m])) m = r;
        if (m == i) return;
        rdx_node *tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
}

static void rdx__sift_up(rdx_node **h, int i)
{
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!rdx__older(h[i], h[p])) return;
        rdx_node *tmp = h[i];
        h[i] = h[p];
        h[p] = tmp;
        i = p;
    }
}

/* Frees y and everything below it: all tiered (no pool references). */
static void rdx__free_subtree(rdx_tree *t, rdx_node *y)
{
    assert(y->n_res == 0);
    for (int c = 0; c < y->n_children; c++) rdx__free_subtree(t, y->children[c]);
    t->n_tiered -= y->n_blocks;
    t->n_nodes--;
    rdx__node_free(y);
}

/* Drops blocks i .. n_blocks of x, which are tiered, and every subtree below x (all tiered);
 * x itself goes when i is 0. Returns 1 when x was freed. */
static int rdx__cut(rdx_tree *t, rdx_node *x, int i)
{
    assert(i >= x->n_res);
    for (int c = 0; c < x->n_children; c++) rdx__free_subtree(t, x->children[c]);
    x->n_children = 0;
    t->n_tiered -= x->n_blocks - i;
    x->n_blocks = i;
    if (i > 0) return 0;
    rdx__remove_child(t, x->parent, x);
    rdx__node_free(x);
    t->n_nodes--;
    return 1;
}

/* 1 when no child of x has a resident block (everything below x is tiered, or nothing is). */
static bool rdx__tiered_below(const rdx_node *x)
{
    for (int c = 0; c < x->n_children; c++)
        if (x->children[c]->n_res > 0) return false;
    return true;
}

/* A path end whose last resident block only the tree references has something to evict; forced,
 * any path end with a resident block. */
static bool rdx__is_candidate(const rdx_tree *t, const rdx_node *x, bool forced)
{
    return x != t->root && x->n_res > 0 && rdx__tiered_below(x) &&
           (forced || bp_refcount(t->bp, x->blocks[x->n_res - 1]) == 1);
}

/* Evicts x's last resident block (the tree's reference goes; the pool gets the block back unless
 * someone else holds it): the tier keeps it tiered, or it is dropped with the tiered blocks after
 * it. Returns 1 when x itself was freed. */
static int rdx__evict_block(rdx_tree *t, rdx_node *x)
{
    int i = x->n_res - 1;
    int32_t id = x->blocks[i];
    const int32_t *tok = x->tokens + (size_t)i * t->block_size;
    int kept = t->has_tier && t->tier.spill(t->tier.ud, x->keys[i], rdx__key_before(t, x, i), tok, id);
    rdx__released(t, id);
    bp_unref(t->bp, id);
    t->n_blocks--;
    x->blocks[i] = RDX_TIERED;
    x->n_res--;
    t->n_tiered++;
    return kept ? 0 : rdx__cut(t, x, i);
}

/* What an eviction works toward: n_blocks of the tree's blocks freed, or (pool set) n_free free
 * blocks in pool. */
typedef struct rdx__goal {
    int n_blocks;
    const block_pool *pool;
    int32_t n_free;
} rdx__goal;

static bool rdx__short(const rdx__goal *g, int freed)
{
    return g->pool ? bp_num_free(g->pool) < g->n_free : freed < g->n_blocks;
}

/* rdx_evict, rdx_evict_forced and rdx_evict_until: least recently used leaves first; forced also
 * unlinks leaves whose blocks others still use (dropping the tree's references frees only
 * refcount-1 blocks). */
static int rdx__evict(rdx_tree *t, const rdx__goal *goal, bool forced)
{
    if (!rdx__short(goal, 0) || t->n_blocks == 0) return 0;
    /* The heap reuses the scratch list in place: candidates are compacted to its front. Each
     * node enters the heap at most once, so it never outgrows the n_nodes + 1 entries; the
     * subtrees a cut frees are all tiered, so none of them is in the heap. */
    rdx_node **h = t->scratch;
    int n_all = rdx__list_nodes(t), n = 0;
    for (int i = 0; i < n_all; i++)
        if (rdx__is_candidate(t, h[i], forced)) h[n++] = h[i];
    for (int i = n / 2 - 1; i >= 0; i--) rdx__sift_down(h, n, i);

    int freed = 0;
    while (rdx__short(goal, freed) && n > 0) {
        rdx_node *x = h[0], *p = x->parent;
        h[0] = h[--n];
        rdx__sift_down(h, n, 0);
        int gone = 0;
        while (!gone && x->n_res > 0 &&
               (forced || (rdx__short(goal, freed) && bp_refcount(t->bp, x->blocks[x->n_res - 1]) == 1))) {
            freed += bp_refcount(t->bp, x->blocks[x->n_res - 1]) == 1;
            gone = rdx__evict_block(t, x);
        }
        if (!gone && x->n_res > 0) continue; /* trimmed: done, or its new last block is in use */
        if (rdx__is_candidate(t, p, forced)) {
            h[n] = p;
            rdx__sift_up(h, n++);
        }
    }
    return freed;
}

int rdx_evict(rdx_tree *t, int n_blocks)
{
    rdx__goal g = {n_blocks, NULL, 0};
    return rdx__evict(t, &g, false);
}

int rdx_evict_forced(rdx_tree *t, int n_blocks)
{
    rdx__goal g = {n_blocks, NULL, 0};
    return rdx__evict(t, &g, true);
}

int rdx_evict_until(rdx_tree *t, const block_pool *pool, int32_t n_free, int forced)
{
    rdx__goal g = {0, pool, n_free};
    return rdx__evict(t, &g, forced != 0);
}

int rdx_set_hooks(rdx_tree *t, const rdx_hooks *h)
{
    if (t->n_nodes || !h->indexed || !h->released) return -EINVAL;
    t->hooks = *h;
    t->has_hooks = 1;
    return 0;
}

int rdx_list_blocks(const rdx_tree *t, int32_t *out)
{
    int n_all = rdx__list_nodes(t), n = 0;
    for (int i = 1; i < n_all; i++) {
        const rdx_node *x = t->scratch[i];
        for (int b = 0; b < x->n_res; b++) out[n++] = x->blocks[b];
    }
    assert(n == t->n_blocks);
    return n;
}

int rdx_n_blocks(const rdx_tree *t)
{
    return t->n_blocks;
}

/* Counts what repeated eviction would free: a node's trailing refcount-1 blocks count when every
 * child subtree can be removed entirely (all of its blocks have refcount 1). Children are
 * visited before parents by walking the parents-first list backwards; mark = "removable". */
int rdx_n_evictable(const rdx_tree *t)
{
    int n_all = rdx__list_nodes(t), count = 0;
    for (int i = n_all - 1; i > 0; i--) {
        rdx_node *x = t->scratch[i];
        bool children_removable = true;
        for (int c = 0; c < x->n_children; c++) children_removable &= x->children[c]->mark != 0;
        int tail = 0;
        if (children_removable)
            while (tail < x->n_res && bp_refcount(t->bp, x->blocks[x->n_res - 1 - tail]) == 1) tail++;
        count += tail;
        x->mark = children_removable && tail == x->n_res;
    }
    return count;
}

/* ---- the second tier ------------------------------------------------------------------------ */

int rdx_set_tier(rdx_tree *t, const rdx_tier *tier)
{
    if (t->n_nodes || !tier->saved || !tier->spill || !tier->has) return -EINVAL;
    t->tier = *tier;
    t->has_tier = 1;
    return 0;
}

int rdx_n_tiered(const rdx_tree *t)
{
    return t->n_tiered;
}

int rdx_match_tiered(rdx_tree *t, const int32_t *tokens, int n_tokens, int matched, hash_key *keys, int max)
{
    if (!t->has_tier || max <= 0) return 0;
    const int bs = t->block_size;
    int n_blk = n_tokens / bs, m0 = matched / bs, pos = 0, n = 0;
    hash_key prev = t->tier.root;
    rdx_node *x = t->root;
    /* Along the tree's path: the tiered blocks after the resident ones. */
    while (pos < n_blk) {
        int c = rdx__find_child(x, tokens + (size_t)pos * bs, bs);
        if (c < 0) break;
        rdx_node *y = x->children[c];
        int j = 0;
        for (; j < y->n_blocks && pos < n_blk; j++, pos++) {
            if (j > 0 && memcmp(y->tokens + (size_t)j * bs, tokens + (size_t)pos * bs, (size_t)bs * sizeof *tokens))
                break;
            if (pos >= m0) {
                if (y->blocks[j] != RDX_TIERED || n == max) return n; /* the caller's match was capped */
                if (!t->tier.has(t->tier.ud, y->keys[j])) { /* the tier dropped it since */
                    rdx__cut(t, y, j);
                    return n;
                }
                keys[n++] = y->keys[j];
            }
            prev = y->keys[j];
        }
        if (j < y->n_blocks) break; /* the tokens leave the tree inside y's edge */
        x = y;
    }
    /* Past the tree's path: blocks the tier has though the tree does not know them. */
    for (; pos < n_blk && n < max && pos >= m0; pos++) {
        hash_key k = hash_key_next(prev, tokens + (size_t)pos * bs, bs);
        if (!t->tier.has(t->tier.ud, k)) break;
        keys[n++] = k;
        prev = k;
    }
    return n;
}

/* Drops the tiered blocks below x (x included) that the tier no longer has. */
static void rdx__prune(rdx_tree *t, rdx_node *x)
{
    for (int i = x->n_res; i < x->n_blocks; i++)
        if (!t->tier.has(t->tier.ud, x->keys[i])) {
            rdx__cut(t, x, i);
            return;
        }
    for (int c = x->n_children - 1; c >= 0; c--) rdx__prune(t, x->children[c]); /* a child may go */
}

int rdx_prune_tiered(rdx_tree *t)
{
    if (!t->n_tiered) return 0;
    int before = t->n_tiered;
    for (int c = t->root->n_children - 1; c >= 0; c--) rdx__prune(t, t->root->children[c]);
    return before - t->n_tiered;
}

/* ---- invariants ----------------------------------------------------------------------------- */

/* Asserts node x's blocks: resident ones first, each indexed once (seen) and referenced; keys
 * chained from the key before; nothing resident below a tiered block. Returns the tiered count. */
static int rdx__check_blocks(const rdx_tree *t, const rdx_node *x, unsigned char *seen)
{
    int32_t n_pool = bp_num_blocks(t->bp);
    assert(x->n_res >= 0 && x->n_res <= x->n_blocks);
    assert(t->has_tier || x->n_res == x->n_blocks);
    for (int b = 0; b < x->n_blocks; b++) {
        int32_t id = x->blocks[b];
        if (b >= x->n_res) {
            assert(id == RDX_TIERED);
        } else {
            assert(id >= 0 && id < n_pool);
            assert(!seen[id]);
            seen[id] = 1;
            assert(bp_refcount(t->bp, id) >= 1);
        }
        if (t->has_tier)
            assert(hash_key_eq(x->keys[b], hash_key_next(rdx__key_before(t, x, b), x->tokens + (size_t)b * t->block_size,
                                                         t->block_size)));
    }
    if (x->n_res < x->n_blocks) assert(rdx__tiered_below(x));
    return x->n_blocks - x->n_res;
}

void rdx_check(const rdx_tree *t)
{
    const int bs = t->block_size;
    const rdx_node *root = t->root;
    assert(root && !root->parent && root->n_blocks == 0);
    assert(t->scratch_cap >= t->n_nodes + 1);
    int n_all = rdx__list_nodes(t);
    assert(n_all == t->n_nodes + 1);
    int32_t n_pool = bp_num_blocks(t->bp);
    unsigned char *seen = calloc(n_pool > 0 ? (size_t)n_pool : 1, 1);
    assert(seen);
    int n_blocks = 0, n_tiered = 0;
    for (int i = 0; i < n_all; i++) {
        const rdx_node *x = t->scratch[i];
        assert(x->n_children >= 0 && x->n_children <= x->cap_children);
        for (int c = 0; c < x->n_children; c++) {
            const rdx_node *y = x->children[c];
            assert(y->parent == x);
            assert(y->last_access <= x->last_access || x == root);
            if (c > 0) assert(rdx__keycmp(x->children[c - 1]->tokens, y->tokens, bs) < 0);
        }
        if (x == root) continue;
        /* Edge lengths are whole blocks by construction: n_blocks × block_size tokens. */
        assert(x->n_blocks >= 1);
        assert(x->n_blocks <= x->cap_blocks);
        n_tiered += rdx__check_blocks(t, x, seen);
        n_blocks += x->n_res;
    }
    assert(n_blocks == t->n_blocks && n_tiered == t->n_tiered);
    assert(n_blocks <= n_pool);
    (void)n_tiered;
    free(seen);
}
