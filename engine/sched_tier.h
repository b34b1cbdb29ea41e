/*
 * sched_tier.h — the functions of sched_tier.c that sched.c and sched_kv.c call: loading a
 * waiting sequence's prefix back from the second KV tier (see sched_tier.c). Folder-internal
 * (sched__); they work on the scheduler's state (sched_internal.h).
 */
#ifndef KVSERVE_SCHED_TIER_H
#define KVSERVE_SCHED_TIER_H

#include <stdint.h>

#include "cache/hash.h"
#include "cache/tier.h"
#include "engine/sched_types.h"
#include "engine/seq.h"

/* Puts tier t under the prefix cache (sched_set_tier). 0, -EINVAL or -ENOMEM. */
int sched__tier_set(sched *sc, tier *t, hash_key root);
/* Loads in flight (sched_tier_pending). */
int sched__tier_pending(const sched *sc);
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

#endif
