/*
 * sched_types.h — the scheduler's types and limits (its configuration, block copies, statistics)
 * apart from its functions (sched.h). The scheduler's state (sched_internal.h) is built from them,
 * and the files under sched.c that keep that state (sched_kv.c, sched_tier.c) include them
 * without depending on sched.c. No functions here.
 */
#ifndef KVSERVE_SCHED_TYPES_H
#define KVSERVE_SCHED_TYPES_H

#include <stdint.h>

#include "cache/kv.h"
#include "engine/seq.h"

/* The order in which waiting sequences are admitted. */
enum sched_policy {
    SCHED_FCFS = 0, /* arrival order (preempted sequences first) */
    SCHED_LPM = 1,  /* longest cached prefix first, with aging (sched_config.lpm_aging_steps) */
};

typedef struct sched_config {
    int block_size;         /* tokens per KV block */
    int32_t n_blocks;       /* KV blocks in the pool of group 0 (the only group unless n_groups > 1) */
    int n_groups;           /* layer groups (0 or 1: one) */
    kv_rule rule[KV_MAX_GROUPS];          /* each group's retention rule (zero: keep all) */
    int32_t group_blocks[KV_MAX_GROUPS];  /* n_groups > 1: blocks of groups 1 .. n_groups - 1 */
    int max_seqs;           /* running sequences cap */
    int max_batch_tokens;   /* tokens per step */
    int prefill_admit_tokens; /* no new admission once a step holds this many prefill tokens (≤ 0: no limit) */
    int schedule;           /* enum sched_policy */
    int prefix_cache;       /* 1: radix prefix cache on */
    int lpm_aging_steps;    /* lpm: a request waiting this many steps goes first (≤ 0: 64) */
    int n_ctx;              /* context limit: a sequence stops ('length') at n_ctx tokens, unless
                               sinks + a window are on and no group keeps everything */
    const int32_t *eog_ids; /* [n_eog] end-of-generation ids (borrowed) */
    int n_eog;
    /* Speculative decoding (engine/spec.h): propose(ud, s, k, n, n_out) guesses up to k[i]
     * tokens that follow s[i] into s[i]->draft and sets how many in n_out[i], for the n
     * sequences of a step at once; NULL: off. Called while planning, for sequences that decode
     * one token and hold no pending token. */
    void (*propose)(void *ud, seq *const *s, const int *k, int n, int *n_out);
    void (*propose_release)(void *ud, seq *s); /* s finished: the proposer drops its state */
    void *propose_ud;
    int spec_k;             /* most drafts per sequence and step (≤ SEQ_MAX_DRAFT) */
    int spec_rows;          /* most draft rows per step (logit rows beyond sched_max_logits) */
    int spec_disable_batch; /* no proposals when more sequences than this decode, or soon will */
} sched_config;

/* Prompt tokens per step a prompt_logprobs sequence may get logit rows for (its prefill goes in
 * chunks of at most about this many while it is being scored). */
#define SCHED_PROMPT_LOGIT_ROWS 64

/* Logit rows one step can produce: what the forward must be able to return. */
static inline int sched_max_logits(int max_seqs)
{
    return max_seqs + SCHED_PROMPT_LOGIT_ROWS;
}

/* A copy of the K/V of block src into block dst of layer group `group`: copy-on-write of a
 * shared partial block before a sequence writes into it. */
typedef struct sched_copy {
    int group;
    int32_t src, dst;
} sched_copy;

/* Buckets of the tier load latency histogram: a load (all the blocks one waiting sequence takes
 * back) from its start to the step that sees it complete, in microseconds (the bounds are data
 * of sched_tier.c). */
#define SCHED_TIER_BUCKETS 12
extern const int64_t sched_tier_bounds_us[SCHED_TIER_BUCKETS];

typedef struct sched_stats {
    int64_t steps;
    int64_t prefix_queries;   /* prompt tokens looked up at first admission */
    int64_t prefix_hits;      /* of which found in the cache */
    int64_t evictions;        /* blocks evicted from the cache */
    int64_t preemptions;
    int64_t generated;        /* tokens sampled */
    int64_t dropped;          /* results dropped because their sequence had finished (the extra
                                 token of an overlapped step, or a cancelled sequence's) */
    int64_t step_tokens;      /* tokens computed in total */
    int64_t tier_loads;       /* waiting sequences whose prefix came back from the second tier */
    int64_t tier_hit_tokens;  /* tokens loaded back (counted in prefix_hits too when admitted) */
    int64_t tier_failed_blocks; /* blocks whose load failed (recomputed instead) */
    uint64_t tier_load_hist[SCHED_TIER_BUCKETS + 1]; /* loads by latency (sched_tier_bounds_us) */
    int64_t tier_load_us;     /* their total latency */
    int64_t spec_drafts;      /* verify rows: sequences that verified at least one draft in a step */
    int64_t spec_draft_tokens; /* draft tokens verified */
    int64_t spec_accepted;    /* of which accepted */
} sched_stats;

typedef struct sched sched;

#endif
