/*
 * sched_internal.h — the scheduler's state and the functions its two files share: sched.c
 * (lists, planning, admission, commit) and sched_kv.c (each sequence's blocks in every layer
 * group: reservation, copy-on-write, the retention rules, the prefix cache's side). Nothing
 * outside engine/sched*.c includes it.
 */
#ifndef KVSERVE_SCHED_INTERNAL_H
#define KVSERVE_SCHED_INTERNAL_H

#include "cache/tier.h"
#include "engine/batch.h"
#include "engine/sched.h"

struct sched {
    sched_config c;
    int n_groups;            /* layer groups (≥ 1) */
    block_pool *bp[KV_MAX_GROUPS]; /* one pool per group */
    rdx_tree *tree;          /* over bp[0]'s block ids; NULL when the prefix cache is off */
    /* n_groups > 1 with the tree: the companions of the tree's blocks (sched_kv.c) */
    int32_t *comp[KV_MAX_GROUPS]; /* [g ≥ 1][bp[0] blocks] the group-g block holding the same
                                     tokens as an indexed group-0 block (the tree's reference on
                                     it taken), -1 when that block is not indexed or (a sliding
                                     window's group) its sequence had released it */
    int32_t *match_comp[KV_MAX_GROUPS]; /* [g ≥ 1][max_blocks] companions of match_buf's blocks
                                           from match_from[g] on (references taken with them) */
    int match_from[KV_MAX_GROUPS]; /* [g ≥ 1] the first block of the match a windowed group keeps
                                      (those before it lie outside the window) */
    const seq *ins_seq;      /* the sequence whose blocks rdx_insert is indexing, else NULL */
    int64_t n_comp;          /* companions held for the tree, all groups g ≥ 1 together */
    int ctx_limit;           /* a sequence stops at this many tokens: n_ctx, or INT_MAX under
                                sinks + a window with no group keeping everything */
    seq **running;           /* [n_running] admission order */
    int n_running, cap_running;
    seq **waiting;           /* [n_waiting] queue order */
    int n_waiting, cap_waiting;
    uint64_t admit_counter;
    batch_entry *plan;       /* [max_seqs] this step's entries */
    int n_plan;
    sched_copy *copies;      /* [cap_copies] this step's block copies, in the order made */
    int n_copies, cap_copies;
    int lp_left;             /* prompt log-prob rows still free in the step being planned */
    int32_t *match_buf;      /* [max_blocks] rdx_match output */
    int *lpm_len;            /* [cap_waiting] lpm: cached prefix per waiting sequence */
    int max_blocks;          /* blocks of a full context */
    sched_stats st;
    /* the second KV tier (sched_tier.c) */
    tier *tier;              /* borrowed; NULL without one */
    struct sched_load **loads; /* [n_loads] loads started for waiting sequences */
    int n_loads, cap_loads;
    uint32_t load_serial;    /* of the last load started */
    hash_key *tier_keys;     /* [max_blocks] rdx_match_tiered output */
};

/* ---- sched_tier.c --------------------------------------------------------------------------- */

/* Admission of waiting c after rdx_match found `matched` tokens (references in match_buf):
 * returns 1 when c waits for a load of its prefix's next blocks from the tier (started now, or
 * still running; the match's references are then taken over or dropped), 0 when admission goes
 * on with the match (with what a finished load put into the cache). */
int sched__tier_admit(sched *sc, seq *c, int matched);
/* Completes the tier's finished loads: their blocks enter the cache. Start of every step. */
void sched__tier_poll(sched *sc);
/* Lets go of the blocks finished loads keep for their waiting sequences (they stay in the cache,
 * evictable; the sequences re-match them when admitted). Returns how many loads let go. */
int sched__tier_unpin(sched *sc);
/* s leaves the scheduler: a load for it is dropped (once its copies finish). */
void sched__tier_release(sched *sc, seq *s);
/* Pool references the loads hold (sched_check). */
int64_t sched__tier_refs(const sched *sc);
void sched__tier_destroy(sched *sc);

/* ---- sched_kv.c ---------------------------------------------------------------------------- */

/* Companion tables and the tree's hooks (n_groups > 1 with a tree). 0 or -ENOMEM. */
int sched__comp_init(sched *sc);
void sched__comp_fini(sched *sc);
/* rdx_match of s's tokens but its last into match_buf, shortened to the blocks whose companions
 * a sequence starting there keeps all exist (in a windowed group those inside the window of its
 * next token), with the companions' references taken too (match_comp, from match_from). Returns
 * the matched token count. */
int sched__match(sched *sc, const seq *s);
/* Drops the references of a match of `matched` tokens (every group). */
void sched__match_drop(sched *sc, int matched);
/* Asserts that every block the tree indexes has a referenced companion in every group g ≥ 1 (a
 * windowed group may lack it) and no other block has one; returns the tree's references in
 * group g (companions for g ≥ 1). */
int64_t sched__check_tree(const sched *sc, int g);

/* Entries of s's cache in group g: its computed tokens less those the group dropped. */
int sched__kv_len(const sched *sc, const seq *s, int g);
/* Offers s's computed full blocks to the prefix cache (while its window has not moved). */
void sched__insert(sched *sc, seq *s);
/* Drops every block reference of s in every group (after offering its computed blocks to the
 * cache); s then holds nothing and has computed nothing. */
void sched__free_blocks(sched *sc, seq *s);
/* The same without offering anything to the cache (an admission that did not happen). */
void sched__release_blocks(sched *sc, seq *s);
/* Releases the blocks s's groups' rules let go before its next token is computed. */
void sched__drop(sched *sc, seq *s);
/* n_new capped so that no sinks group's cache grows past its window in this step. */
int sched__window_fit(const sched *sc, const seq *s, int n_new);
/* Gives s the blocks for its next n_new tokens in every group; a shared partial block it would
 * write into is replaced by a new one, and the copy that fills it is added to the step's list
 * (the engine applies it before the forward). 0, or -ENOSPC / -ENOMEM with nothing changed. */
int sched__reserve(sched *sc, seq *s, int n_new);
/* Replaces s's leading blocks with the cache's when the cache now holds more of its tokens than
 * s has computed (another sequence finished them meanwhile). */
void sched__rematch(sched *sc, seq *s);
/* Admission: s (holding nothing) takes the matched blocks of match_buf (matched tokens, whole
 * blocks, references already taken) and a cached block agreeing with its next tokens. Returns
 * the tokens it starts from, or -ENOMEM (the match's references dropped). */
int sched__adopt_prefix(sched *sc, seq *s, int matched);
/* A fork's child c (holding nothing) shares every block of s. 0 or -ENOMEM. */
int sched__share_blocks(sched *sc, const seq *s, seq *c);
/* Asserts s's blocks: the count its cache length needs in every group, every one referenced;
 * returns how many references it holds in group g. */
int64_t sched__check_seq(const sched *sc, const seq *s, int g);

#endif
