/*
 * sched_internal.h — the scheduler's state, which its three files keep together:
 *
 *   sched.c       lists, planning, admission, commit, the API        (calls the two below)
 *   sched_kv.c    each sequence's blocks in every layer group: reservation, copy-on-write, the
 *                 retention rules, the prefix cache's side            (sched_kv.h; calls the tier)
 *   sched_tier.c  loads back from the second KV tier                  (sched_tier.h)
 *
 * Only the state: each file's functions are declared in its own header, so that a file depends
 * on the ones below it and never on those above. Nothing outside engine/sched*.c includes it.
 */
#ifndef KVSERVE_SCHED_INTERNAL_H
#define KVSERVE_SCHED_INTERNAL_H

#include "cache/block_pool.h"
#include "cache/radix.h"
#include "cache/tier.h"
#include "engine/batch.h"
#include "engine/sched_types.h"
#include "engine/seq.h"

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
    int spec_left;           /* draft rows still free in the step being planned */
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

#endif
