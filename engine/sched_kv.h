/*
 * sched_kv.h — the functions of sched_kv.c that sched.c calls: a sequence's KV blocks in every
 * layer group and the prefix cache's side (see sched_kv.c). Folder-internal (sched__); they work
 * on the scheduler's state (sched_internal.h).
 */
#ifndef KVSERVE_SCHED_KV_H
#define KVSERVE_SCHED_KV_H

#include <stdint.h>

#include "engine/sched_types.h"
#include "engine/seq.h"

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
/* Speculative decoding: drops s's blocks past its cache length in every group (those that held
 * only rejected drafts' K/V). Nothing is offered to the prefix cache. */
void sched__truncate(sched *sc, seq *s);
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
