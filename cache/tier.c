/*
 * tier.c — the second KV tier's index, its two levels and its API (see tier.h; the threads and
 * their queues are tier_io.c, the files themselves tier_disk.c).
 *
 *   entries[]  key → host slot (or -1) | file state (none, queued, on disk) | reads in flight
 *   table      open addressing over entries by key (linear probing, backward-shift deletion)
 *   lru[level] doubly linked through the entries, least recently used at the head
 *   jobs       FIFO to the I/O thread; a job whose buffer a copy may still be filling waits at
 *              the head until a fence (tier_poll) marks it ready
 *   done       FIFO back from the I/O thread, completed by tier_poll on the engine thread
 *
 * Invariants (tier_check): an entry is live iff it holds something (a host slot, a file state,
 * or a read in flight); it is in the table exactly once and in the LRU list of each level that
 * holds it; n_host / n_disk count those lists and stay within capacity; host slots are used
 * once and the others are on the free list. A file state counts against the file tier's
 * capacity from the moment its write is queued.
 *
 * Only the engine thread touches entries, the table, the lists and the staging buffers' free
 * list; the I/O thread sees jobs alone (everything a job needs is copied into it). The two
 * FIFOs, the job the I/O thread is running and the verifier's result are under one mutex.
 *
 * Deadlines: a load's job carries one (queued + io_timeout). tier_poll gives up on a load past
 * it: a queued job leaves the queue, the running one is marked abandoned, and the caller gets a
 * failed completion at once. The I/O thread copies a read into its block under the mutex and
 * only when the job is not abandoned, so a block handed back to the caller is never written
 * later. The verifier thread hashes the source file (the model) and posts the result; tier_poll
 * applies it to the entries of earlier runs (`old`: indexed at start-up, loaded only once
 * vouched for). tier_destroy waits for the threads up to the deadline, else leaves them behind
 * (tier_io.c).
 */
#include "cache/tier.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "cache/tier_disk.h"
#include "cache/tier_internal.h"

size_t tier_file_bytes(size_t block_bytes, int block_size)
{
    return tier__hdr_bytes(block_size) + block_bytes;
}

/* ---- entries and the table ------------------------------------------------------------------ */

static uint32_t tier__slot_of(hash_key k, uint32_t mask)
{
    return (uint32_t)(k.lo ^ (k.hi >> 17)) & mask;
}

/* The entry of key, or -1. */
static int32_t tier__find(const tier *t, hash_key key)
{
    for (uint32_t i = tier__slot_of(key, t->table_mask);; i = (i + 1) & t->table_mask) {
        int32_t e = t->table[i];
        if (e < 0) return -1;
        if (hash_key_eq(t->ents[e].key, key)) return e;
    }
}

/* Rebuilds the table at twice the size. 0 or -ENOMEM (unchanged). */
static int tier__grow_table(tier *t)
{
    uint32_t mask = t->table_mask * 2 + 1;
    int32_t *tab = malloc(((size_t)mask + 1) * sizeof *tab);
    if (!tab) return -ENOMEM;
    memset(tab, 0xff, ((size_t)mask + 1) * sizeof *tab);
    for (int32_t e = 0; e < t->cap_ents; e++) {
        if (!t->ents[e].live) continue;
        uint32_t i = tier__slot_of(t->ents[e].key, mask);
        while (tab[i] >= 0) i = (i + 1) & mask;
        tab[i] = e;
    }
    free(t->table);
    t->table = tab;
    t->table_mask = mask;
    return 0;
}

/* Removes entry e from the table, shifting later members of its probe run back. */
static void tier__table_remove(tier *t, int32_t e)
{
    uint32_t m = t->table_mask, i = tier__slot_of(t->ents[e].key, m);
    while (t->table[i] != e) i = (i + 1) & m;
    for (uint32_t j = (i + 1) & m;; j = (j + 1) & m) {
        int32_t x = t->table[j];
        if (x < 0) break;
        uint32_t h = tier__slot_of(t->ents[x].key, m);
        /* x may fill the hole at i when its home is not in the cyclic range (i, j]. */
        if (((j - h) & m) >= ((j - i) & m)) {
            t->table[i] = x;
            i = j;
        }
    }
    t->table[i] = -1;
}

/* A new live entry for key (absent): nothing held yet. -1 on -ENOMEM. */
static int32_t tier__new_ent(tier *t, hash_key key)
{
    if ((size_t)(t->n_live + 1) * 2 > (size_t)t->table_mask + 1 && tier__grow_table(t)) return -1;
    if (t->free_ent < 0) {
        int32_t cap = t->cap_ents ? t->cap_ents * 2 : 64;
        tier__ent *v = realloc(t->ents, (size_t)cap * sizeof *v);
        if (!v) return -1;
        for (int32_t i = cap - 1; i >= t->cap_ents; i--) {
            memset(&v[i], 0, sizeof v[i]);
            v[i].next[0] = t->free_ent;
            t->free_ent = i;
        }
        t->ents = v;
        t->cap_ents = cap;
    }
    int32_t e = t->free_ent;
    tier__ent *x = &t->ents[e];
    t->free_ent = x->next[0];
    uint32_t gen = x->gen;
    memset(x, 0, sizeof *x);
    x->gen = gen;
    x->key = key;
    x->slot = -1;
    x->live = 1;
    for (int l = 0; l < 2; l++) x->prev[l] = x->next[l] = -1;
    uint32_t i = tier__slot_of(key, t->table_mask);
    while (t->table[i] >= 0) i = (i + 1) & t->table_mask;
    t->table[i] = e;
    t->n_live++;
    return e;
}

/* Frees e when it holds nothing any more. */
static void tier__release_ent(tier *t, int32_t e)
{
    tier__ent *x = &t->ents[e];
    if (!x->live || x->slot >= 0 || x->disk != TIER__NONE || x->pins > 0) return;
    tier__table_remove(t, e);
    x->live = 0;
    x->gen++;
    x->next[0] = t->free_ent;
    t->free_ent = e;
    t->n_live--;
}

/* ---- LRU lists -------------------------------------------------------------------------------- */

static void tier__lru_unlink(tier *t, int l, int32_t e)
{
    tier__ent *x = &t->ents[e];
    tier__list *L = &t->lru[l];
    if (x->prev[l] >= 0) t->ents[x->prev[l]].next[l] = x->next[l];
    else L->head = x->next[l];
    if (x->next[l] >= 0) t->ents[x->next[l]].prev[l] = x->prev[l];
    else L->tail = x->prev[l];
    x->prev[l] = x->next[l] = -1;
    L->n--;
}

/* Appends e as the most recently used of level l. */
static void tier__lru_push(tier *t, int l, int32_t e)
{
    tier__ent *x = &t->ents[e];
    tier__list *L = &t->lru[l];
    x->prev[l] = L->tail;
    x->next[l] = -1;
    if (L->tail >= 0) t->ents[L->tail].next[l] = e;
    else L->head = e;
    L->tail = e;
    L->n++;
}

static void tier__touch(tier *t, int l, int32_t e)
{
    tier__lru_unlink(t, l, e);
    tier__lru_push(t, l, e);
}

/* ---- jobs and buffers ------------------------------------------------------------------------- */

/* A free staging buffer, allocated on first need up to max_bufs; NULL when none. */
static void *tier__get_buf(tier *t)
{
    if (t->n_free_bufs > 0) return t->bufs[--t->n_free_bufs];
    if (t->n_bufs >= t->max_bufs) return NULL;
    const tier_copy *cp = &t->c.copy;
    void *b = cp->host_alloc ? cp->host_alloc(cp->ud, t->c.block_bytes)
                             : aligned_alloc(64, (t->c.block_bytes + 63) & ~(size_t)63);
    if (b) t->n_bufs++;
    return b;
}

static void tier__put_buf(tier *t, void *b)
{
    assert(t->n_free_bufs < t->n_bufs);
    t->bufs[t->n_free_bufs++] = b;
}

static tier__job *tier__job_new(tier *t, int kind, int32_t e)
{
    size_t tok = kind == TIER__WRITE ? (size_t)t->c.block_size * sizeof(int32_t) : 0;
    tier__job *j = calloc(1, sizeof *j + tok);
    if (!j) return NULL;
    j->kind = kind;
    j->ready = 1;
    j->ent = e;
    j->gen = e >= 0 ? t->ents[e].gen : 0;
    j->key = e >= 0 ? t->ents[e].key : (hash_key){0, 0};
    return j;
}

/* Waits for every copy issued so far, then lets the jobs filled by them run and frees the buffers
 * copies in read. */
static void tier__fence(tier *t)
{
    if (!t->need_fence) return;
    if (t->c.copy.fence) t->c.copy.fence(t->c.copy.ud); /* a failed device shows in its next step */
    tier__mark_ready(t);
    while (t->n_fence_bufs > 0) tier__put_buf(t, t->fence_bufs[--t->n_fence_bufs]);
    t->need_fence = 0;
}

/* ---- the file tier's state -------------------------------------------------------------------- */

/* Drops e's file state (the file itself stays unless unlink). */
static void tier__drop_disk(tier *t, int32_t e, int unlink)
{
    tier__ent *x = &t->ents[e];
    if (x->disk == TIER__NONE) return;
    x->disk = TIER__NONE;
    if (x->old) {
        x->old = 0;
        t->n_old--;
    }
    tier__lru_unlink(t, TIER_DISK, e);
    if (unlink) {
        tier__job *j = tier__job_new(t, TIER__UNLINK, e);
        if (j) tier__enqueue(t, j);
    }
    tier__release_ent(t, e);
}

/* A write or read failed for a reason other than the file itself: the file tier goes off. */
static void tier__disable_disk(tier *t, int rc)
{
    if (!t->disk_on) return;
    t->disk_on = 0;
    if (!t->c.quiet)
        fprintf(stderr, "kvserve: KV disk tier %s turned off: %s; requests go on without it\n", t->root,
                strerror(-rc));
    while (t->lru[TIER_DISK].head >= 0) tier__drop_disk(t, t->lru[TIER_DISK].head, 0);
}

/* Makes room for one more file by dropping the least recently used one no read holds. */
static int tier__disk_room(tier *t)
{
    if (t->lru[TIER_DISK].n < t->disk_cap) return 1;
    for (int32_t e = t->lru[TIER_DISK].head; e >= 0; e = t->ents[e].next[TIER_DISK])
        if (t->ents[e].disk == TIER__ON && t->ents[e].pins == 0) {
            tier__drop_disk(t, e, 1);
            return 1;
        }
    return 0;
}

/* ---- the API ---------------------------------------------------------------------------------- */

/* 1 when e's file may be loaded now. */
static int tier__disk_usable(const tier *t, const tier__ent *x)
{
    return t->disk_on && !t->stalled && x->disk != TIER__NONE && !x->old;
}

int tier_has(const tier *t, hash_key key)
{
    int32_t e = tier__find(t, key);
    if (e < 0) return 0;
    const tier__ent *x = &t->ents[e];
    return x->slot >= 0 || tier__disk_usable(t, x);
}

/* A file of an earlier run not vouched for is as good as absent: a write of this run replaces
 * it. Returns key's entry afterwards (-1 when it held nothing else and was freed). */
static int32_t tier__forget_old(tier *t, int32_t e, hash_key key)
{
    if (e < 0 || !t->ents[e].old) return e;
    tier__drop_disk(t, e, 0);
    return tier__find(t, key);
}

/* Queues the write of block into the file tier for entry e (which has no file state).
 * Returns 1 when queued. */
static int tier__queue_write(tier *t, int32_t e, hash_key parent, const int32_t *tokens, int32_t block)
{
    if (!tier__disk_room(t)) return 0;
    void *buf = tier__get_buf(t);
    tier__job *j = buf ? tier__job_new(t, TIER__WRITE, e) : NULL;
    if (!j || t->c.copy.out(t->c.copy.ud, block, buf)) {
        free(j);
        if (buf) tier__put_buf(t, buf);
        return 0;
    }
    j->parent = parent;
    j->buf = buf;
    j->ready = t->c.copy.fence == NULL;
    memcpy(j->tokens, tokens, (size_t)t->c.block_size * sizeof *tokens);
    t->ents[e].disk = TIER__QUEUED;
    tier__lru_push(t, TIER_DISK, e);
    tier__enqueue(t, j);
    return 1;
}

void tier_save(tier *t, hash_key key, hash_key parent, const int32_t *tokens, int32_t block)
{
    if (!t->disk_on) return;
    if (t->stalled) {
        t->st.writes_skipped++;
        return;
    }
    int32_t e = tier__forget_old(t, tier__find(t, key), key);
    if (e >= 0 && t->ents[e].disk != TIER__NONE) {
        tier__touch(t, TIER_DISK, e);
        return;
    }
    int fresh = e < 0;
    if (fresh && (e = tier__new_ent(t, key)) < 0) {
        t->st.writes_skipped++;
        return;
    }
    if (!tier__queue_write(t, e, parent, tokens, block)) {
        t->st.writes_skipped++;
        if (fresh) tier__release_ent(t, e);
    }
}

/* Copies block into a host slot for e (taking the least recently used slot when none is free).
 * Returns 1 when e holds a slot afterwards. */
static int tier__host_put(tier *t, int32_t e, int32_t block)
{
    if (t->ents[e].slot >= 0) {
        tier__touch(t, TIER_HOST, e);
        return 1;
    }
    if (!t->n_free_slots) {
        int32_t v = t->lru[TIER_HOST].head;
        if (v < 0) return 0;
        tier__lru_unlink(t, TIER_HOST, v);
        t->free_slots[t->n_free_slots++] = t->ents[v].slot;
        t->ents[v].slot = -1;
        tier__release_ent(t, v);
    }
    int32_t s = t->free_slots[t->n_free_slots - 1];
    if (t->c.copy.out(t->c.copy.ud, block, t->host_mem + (size_t)s * t->c.block_bytes)) return 0;
    t->n_free_slots--;
    t->ents[e].slot = s;
    tier__lru_push(t, TIER_HOST, e);
    t->st.bytes_to_host += (int64_t)t->c.block_bytes;
    return 1;
}

int tier_spill(tier *t, hash_key key, hash_key parent, const int32_t *tokens, int32_t block)
{
    int32_t e = tier__forget_old(t, tier__find(t, key), key);
    if (e < 0 && (e = tier__new_ent(t, key)) < 0) return 0;
    if (t->host_cap > 0) tier__host_put(t, e, block);
    if (t->disk_on && t->stalled) {
        t->st.writes_skipped++;
    } else if (t->disk_on) {
        if (t->ents[e].disk != TIER__NONE) tier__touch(t, TIER_DISK, e);
        else if (!tier__queue_write(t, e, parent, tokens, block)) t->st.writes_skipped++;
    }
    int held = tier_has(t, key);
    tier__release_ent(t, e);
    return held;
}

/* Makes room for the completion of one more load: every load in flight has its place in ready[]
 * (n_ready ≤ n_loading), so no completion is ever lost. 0 or -ENOMEM. */
static int tier__reserve_ready(tier *t)
{
    if (t->n_loading < t->cap_ready) return 0;
    int cap = t->cap_ready ? t->cap_ready * 2 : 64;
    tier_done *v = realloc(t->ready, (size_t)cap * sizeof *v);
    if (!v) return -ENOMEM;
    t->ready = v;
    t->cap_ready = cap;
    return 0;
}

/* Records a completed load for tier_poll (room reserved). */
static void tier__push_ready(tier *t, uint64_t tag, int32_t block, int ok, int level)
{
    assert(t->n_ready < t->cap_ready);
    t->ready[t->n_ready++] = (tier_done){tag, block, ok, level};
    if (ok) *(level == TIER_HOST ? &t->st.hits_host : &t->st.hits_disk) += 1;
    else t->st.load_failures++;
}

int tier_load(tier *t, hash_key key, int32_t block, uint64_t tag)
{
    int32_t e = tier__find(t, key);
    if (e < 0) return -ENOENT;
    tier__ent *x = &t->ents[e];
    if (x->slot >= 0) {
        if (tier__reserve_ready(t)) return -EBUSY;
        int rc = t->c.copy.in(t->c.copy.ud, block, t->host_mem + (size_t)x->slot * t->c.block_bytes);
        tier__touch(t, TIER_HOST, e);
        t->st.bytes_from_host += rc ? 0 : (int64_t)t->c.block_bytes;
        tier__push_ready(t, tag, block, rc == 0, TIER_HOST);
        t->n_loading++;
        if (t->c.wake) t->c.wake(t->c.wake_ud);
        return 0;
    }
    if (!tier__disk_usable(t, x)) return -ENOENT;
    if (tier__reserve_ready(t)) return -EBUSY;
    void *buf = tier__get_buf(t);
    tier__job *j = buf ? tier__job_new(t, TIER__READ, e) : NULL;
    if (!j) {
        if (buf) tier__put_buf(t, buf);
        return -EBUSY;
    }
    j->block = block;
    j->tag = tag;
    j->buf = buf;
    j->deadline_us = clk_now_us() + t->io_timeout_us;
    x->pins++;
    tier__touch(t, TIER_DISK, e);
    t->n_loading++;
    tier__enqueue(t, j);
    return 0;
}

/* ---- completions ------------------------------------------------------------------------------ */

/* The entry a job served, or -1 when it has been freed (and maybe reused) since. */
static int32_t tier__job_ent(const tier *t, const tier__job *j)
{
    if (j->ent < 0) return -1;
    const tier__ent *x = &t->ents[j->ent];
    return x->live && x->gen == j->gen ? j->ent : -1;
}

static void tier__complete_write(tier *t, tier__job *j)
{
    int32_t e = tier__job_ent(t, j);
    tier__put_buf(t, j->buf);
    if (!j->rc) t->st.bytes_written += (int64_t)t->file_bytes;
    t->st.files_skipped += j->rc == TIER__ENOTREG;
    if (e < 0 || t->ents[e].disk != TIER__QUEUED) return; /* dropped meanwhile (tier turned off) */
    if (!j->rc) {
        t->ents[e].disk = TIER__ON;
        return;
    }
    tier__drop_disk(t, e, 0);
    /* Something that is not a file under this block's name is the block's problem alone. */
    if (j->rc != TIER__ENOTREG) tier__disable_disk(t, j->rc);
}

static void tier__complete_read(tier *t, tier__job *j)
{
    if (j->abandoned) { /* already completed as failed at its deadline; nothing was copied */
        tier__put_buf(t, j->buf);
        return;
    }
    int32_t e = tier__job_ent(t, j);
    int ok = !j->rc && !(j->copied ? j->copy_rc : t->c.copy.in(t->c.copy.ud, j->block, j->buf));
    if (!j->rc && !j->copied && t->c.copy.fence) { /* the copy in may still read the buffer */
        t->fence_bufs[t->n_fence_bufs++] = j->buf;
        t->need_fence = 1;
    } else {
        tier__put_buf(t, j->buf);
    }
    if (!j->rc) t->st.bytes_read += (int64_t)t->file_bytes;
    if (e >= 0) {
        t->ents[e].pins--;
        if (j->rc == -EBADMSG || j->rc == -ENOENT || j->rc == TIER__ENOTREG) { /* bad or gone: forget it */
            t->st.files_ignored += j->rc == -EBADMSG;
            t->st.files_skipped += j->rc == TIER__ENOTREG;
            tier__drop_disk(t, e, j->rc == -EBADMSG);
        } else if (j->rc && j->rc != -ENOMEM) { /* the file system failed */
            tier__disable_disk(t, j->rc);
        }
        tier__release_ent(t, e);
    }
    tier__push_ready(t, j->tag, j->block, ok, TIER_DISK);
}

/* Completes every job the I/O thread finished. */
static void tier__complete(tier *t)
{
    tier__job *j = tier__take_done(t);
    while (j) {
        tier__job *next = j->next;
        if (j->kind == TIER__WRITE) tier__complete_write(t, j);
        else if (j->kind == TIER__READ) tier__complete_read(t, j);
        else if (j->kind == TIER__STAMP && j->rc && !t->c.quiet)
            fprintf(stderr, "kvserve: KV disk tier %s: cannot write the model stamp (%s): a restart will not reuse "
                    "these blocks\n", t->root, strerror(-j->rc));
        free(j);
        j = next;
    }
}

/* ---- deadlines and the stalled state ------------------------------------------------------------- */

/* Load j is given up: its caller gets a failed completion now. A queued job is freed here; the
 * running one stays the I/O thread's (abandoned: it neither copies nor reports). */
static void tier__give_up(tier *t, tier__job *j, int queued)
{
    int32_t e = tier__job_ent(t, j);
    if (e >= 0) {
        t->ents[e].pins--;
        tier__release_ent(t, e);
    }
    tier__push_ready(t, j->tag, j->block, 0, TIER_DISK);
    t->st.io_timeouts++;
    if (queued) {
        tier__put_buf(t, j->buf);
        free(j);
    }
}

/* Loads past their deadline complete as failed; while the I/O thread is stuck past the deadline
 * every load does, and the stalled state (logged) makes new loads miss and writes skip. */
static void tier__expire(tier *t)
{
    if (!t->root || !t->threads_started) return;
    tier__job *expired, *abandon;
    int stuck;
    tier__take_expired(t, clk_now_us(), &expired, &abandon, &stuck);
    /* The running job is not freed before tier__complete, which only this thread calls. */
    if (abandon) tier__give_up(t, abandon, 0);
    while (expired) {
        tier__job *j = expired;
        expired = j->next;
        tier__give_up(t, j, 1);
    }
    if (stuck && !t->stalled && !t->c.quiet)
        fprintf(stderr, "kvserve: KV disk tier %s stalled: a file operation has not returned for %.1f s; "
                "prefixes are recomputed and writes skipped until it does\n", t->root, (double)t->io_timeout_us / 1e6);
    if (!stuck && t->stalled && !t->c.quiet) fprintf(stderr, "kvserve: KV disk tier %s responds again\n", t->root);
    t->stalled = stuck;
}

/* ---- blocks of earlier runs: the verifier ------------------------------------------------------ */

/* The verifier's result, once: blocks of earlier runs become loadable when the stamp they were
 * written under names this content, else they are deleted; the stamp is renewed. */
static void tier__verify_apply(tier *t)
{
    if (t->verify_applied || !t->source_path || !t->threads_started) return;
    int rc;
    hash_key h;
    if (!tier__verify_result(t, &rc, &h)) return;
    t->verify_applied = 1;
    if (rc) { /* the old blocks stay unused (and age out); no stamp vouches for the folder */
        if (!t->c.quiet)
            fprintf(stderr, "kvserve: KV disk tier %s: cannot hash the model file %s (%s); blocks of earlier runs "
                    "are not used\n", t->root, t->source_path, rc == -ESTALE ? "it changed since it was loaded" : strerror(-rc));
        return;
    }
    int match = t->have_stamp && hash_key_eq(h, t->stamp);
    int64_t n_old = t->n_old;
    for (int32_t e = 0; e < t->cap_ents && t->n_old > 0; e++) {
        if (!t->ents[e].live || !t->ents[e].old) continue;
        if (match) {
            t->ents[e].old = 0;
            t->n_old--;
        } else {
            tier__drop_disk(t, e, 1);
        }
    }
    if (!match && n_old > 0 && !t->c.quiet)
        fprintf(stderr, "kvserve: KV disk tier %s: %lld blocks of an earlier run were computed from other model "
                "content (%s); deleted\n", t->root, (long long)n_old, t->have_stamp ? "same file name, size and time"
                : "unknown: no stamp");
    tier__job *j = t->disk_on ? tier__job_new(t, TIER__STAMP, -1) : NULL;
    if (j) {
        j->key = h;
        tier__enqueue(t, j);
    }
}

int tier_poll(tier *t, tier_done *out, int max)
{
    tier__fence(t);
    tier__complete(t);
    tier__expire(t);
    tier__verify_apply(t);
    int n = t->n_ready < max ? t->n_ready : max;
    if (n > 0) { /* nothing to move from an empty (possibly NULL) list */
        memcpy(out, t->ready, (size_t)n * sizeof *out);
        memmove(t->ready, t->ready + n, (size_t)(t->n_ready - n) * sizeof *t->ready);
    }
    t->n_ready -= n;
    t->n_loading -= n;
    return n;
}

int tier_loads_pending(const tier *t)
{
    return t->n_loading;
}

/* tier_flush, giving up (-ETIMEDOUT, the rest still queued) when the clock passes until_us
 * (0: only a job past its deadline ends the wait). */
static int tier__flush_until(tier *t, int64_t until_us)
{
    if (!t->threads_started) return 0;
    do {
        tier__fence(t); /* after it every queued job is ready, and only this thread queues more */
        if (tier__io_wait_idle(t, until_us)) return -ETIMEDOUT;
        tier__complete(t); /* may queue unlinks and leave buffers for a fence */
    } while (t->need_fence || tier__io_busy(t));
    tier__expire(t); /* the I/O thread is idle: not stalled */
    return 0;
}

int tier_flush(tier *t)
{
    return tier__flush_until(t, 0);
}

/* ---- creation --------------------------------------------------------------------------------- */

typedef struct tier__found {
    hash_key key;
    int64_t mtime_ns;
} tier__found;

typedef struct tier__scan {
    tier__found *v;
    int64_t n, cap;
    int oom;
} tier__scan;

static void tier__on_found(void *ud, hash_key key, int64_t mtime_ns)
{
    tier__scan *s = ud;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 256;
        tier__found *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) {
            s->oom = 1;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tier__found){key, mtime_ns};
}

static int tier__older(const void *a, const void *b)
{
    const tier__found *x = a, *y = b;
    if (x->mtime_ns != y->mtime_ns) return x->mtime_ns < y->mtime_ns ? -1 : 1;
    return x->key.lo < y->key.lo ? -1 : x->key.lo > y->key.lo;
}

/* Opens the file tier: its folder, its capacity, and the blocks a previous run left, least
 * recently used first. 0 or a negative errno with err filled. */
static int tier__open_disk(tier *t, char *err, size_t err_len)
{
    int rc = tier__disk_open(t->disk_dir, t->c.fingerprint, &t->root, &t->lock_fd, err, err_len);
    if (rc) return rc;
    tier__scan s = {0};
    rc = tier__disk_scan(t->root, t->file_bytes, tier__on_found, &s, &t->st.files_ignored, &t->st.files_skipped);
    if (rc || s.oom) {
        snprintf(err, err_len, "cannot read the KV disk tier %s: %s", t->root, strerror(rc ? -rc : ENOMEM));
        free(s.v);
        return rc ? rc : -ENOMEM;
    }
    size_t cap_bytes = t->c.disk_bytes;
    if (!cap_bytes) {
        uint64_t avail = 0;
        tier__disk_free(t->root, &avail);
        cap_bytes = tier_disk_default(avail, (uint64_t)s.n * t->file_bytes);
    }
    t->disk_cap = (int64_t)(cap_bytes / t->file_bytes);
    if (t->disk_cap < 1) {
        snprintf(err, err_len, "the KV disk tier %s: %zu bytes hold no block file of %zu bytes", t->root, cap_bytes,
                 t->file_bytes);
        free(s.v);
        return -ENOSPC;
    }
    if (s.n > 1) qsort(s.v, (size_t)s.n, sizeof *s.v, tier__older);
    int64_t skip = s.n > t->disk_cap ? s.n - t->disk_cap : 0;
    for (int64_t i = 0; i < s.n; i++) {
        int32_t e = i < skip ? -1 : tier__new_ent(t, s.v[i].key);
        if (e < 0) { /* beyond the capacity (the oldest go), or out of memory */
            tier__disk_unlink(t->root, s.v[i].key);
            continue;
        }
        t->ents[e].disk = TIER__ON;
        t->ents[e].old = t->source_path != NULL;
        t->n_old += t->ents[e].old;
        tier__lru_push(t, TIER_DISK, e);
    }
    free(s.v);
    /* The stamp goes before this run writes anything: a run that ends before it has hashed its
     * model leaves no stamp, so a later one deletes rather than trusts what it finds. */
    if (t->source_path) t->have_stamp = tier__stamp_take(t->root, &t->stamp) == 0;
    t->disk_on = 1;
    return 0;
}

static int tier__open_host(tier *t, char *err, size_t err_len)
{
    t->host_cap = (int64_t)(t->c.host_bytes / t->c.block_bytes);
    if (t->host_cap < 1) {
        snprintf(err, err_len, "the KV host tier's %zu bytes hold no block of %zu bytes", t->c.host_bytes,
                 t->c.block_bytes);
        return -EINVAL;
    }
    const tier_copy *cp = &t->c.copy;
    size_t bytes = (size_t)t->host_cap * t->c.block_bytes;
    t->host_mem = cp->host_alloc ? cp->host_alloc(cp->ud, bytes) : aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    t->free_slots = malloc((size_t)t->host_cap * sizeof *t->free_slots);
    if (!t->host_mem || !t->free_slots) {
        snprintf(err, err_len, "cannot allocate the KV host tier (%zu bytes)", bytes);
        return -ENOMEM;
    }
    for (int64_t i = 0; i < t->host_cap; i++) t->free_slots[i] = (int32_t)(t->host_cap - 1 - i);
    t->n_free_slots = t->host_cap;
    return 0;
}

tier *tier_create(const tier_config *c, char *err, size_t err_len)
{
    int want_disk = c->disk_dir && *c->disk_dir;
    if (!c->block_bytes || c->block_size <= 0 || !c->copy.out || !c->copy.in || (!c->host_bytes && !want_disk)) {
        snprintf(err, err_len, "a KV tier needs a block size, copy functions and a host or disk capacity");
        return NULL;
    }
    tier *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    t->c = *c;
    t->c.disk_dir = NULL;
    t->c.source_path = NULL;
    t->lock_fd = -1;
    t->free_ent = -1;
    t->file_bytes = tier_file_bytes(c->block_bytes, c->block_size);
    t->io_timeout_us = (int64_t)(c->io_timeout_ms > 0 ? c->io_timeout_ms : TIER_IO_TIMEOUT_MS) * 1000;
    for (int l = 0; l < 2; l++) t->lru[l] = (tier__list){-1, -1, 0};
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_io, NULL);
    pthread_condattr_t ca; /* timed waits on CLOCK_MONOTONIC, like every deadline here */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv_idle, &ca);
    pthread_condattr_destroy(&ca);
    size_t staging = c->staging_bytes ? c->staging_bytes : (size_t)64 << 20;
    size_t nb = staging / c->block_bytes;
    t->max_bufs = nb < TIER_MIN_STAGING ? TIER_MIN_STAGING : nb > 4096 ? 4096 : (int)nb;
    t->bufs = calloc((size_t)t->max_bufs, sizeof *t->bufs);
    t->fence_bufs = calloc((size_t)t->max_bufs, sizeof *t->fence_bufs);
    t->table_mask = 63;
    t->table = malloc(64 * sizeof *t->table);
    if (t->table) memset(t->table, 0xff, 64 * sizeof *t->table);
    int want_source = want_disk && c->source_path && *c->source_path;
    if (!t->bufs || !t->fence_bufs || !t->table || (want_disk && !(t->disk_dir = strdup(c->disk_dir))) ||
        (want_source && !(t->source_path = strdup(c->source_path)))) {
        snprintf(err, err_len, "out of memory");
        tier_destroy(t);
        return NULL;
    }
    if ((c->host_bytes && tier__open_host(t, err, err_len)) || (want_disk && tier__open_disk(t, err, err_len))) {
        tier_destroy(t);
        return NULL;
    }
    if (tier__start_threads(t)) {
        snprintf(err, err_len, "cannot start the KV tier's threads");
        tier_destroy(t);
        return NULL;
    }
    return t;
}

void tier_destroy(tier *t)
{
    if (!t) return;
    int gone = 1;
    if (t->threads_started) {
        /* The writes behind get one deadline in all, not one each: a disk that is slow but not
         * stuck (every write just within the deadline) must not stretch a SIGTERM's exit by the
         * length of the queue. What is left is dropped (a cache: the blocks are recomputed). */
        tier__flush_until(t, clk_now_us() + t->io_timeout_us);
        gone = tier__stop_threads(t);
        if (gone) {
            tier__complete(t);
            tier__fence(t);
        }
    }
    for (int i = 0; i < t->n_free_bufs; i++) tier__free_host(t, t->bufs[i]);
    tier__free_host(t, t->host_mem);
    if (t->lock_fd >= 0) close(t->lock_fd);
    free(t->bufs);
    free(t->fence_bufs);
    free(t->free_slots);
    free(t->ents);
    free(t->table);
    free(t->ready);
    if (!gone) return; /* the last thread out frees the rest (tier__free_orphan) */
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv_io);
    pthread_cond_destroy(&t->cv_idle);
    free(t->root);
    free(t->source_path);
    free(t->disk_dir);
    free(t);
}

/* ---- introspection ---------------------------------------------------------------------------- */

void tier_get_stats(const tier *t, tier_stats *out)
{
    *out = t->st;
    out->host_blocks = t->lru[TIER_HOST].n;
    out->host_capacity = t->host_cap;
    out->disk_blocks = t->lru[TIER_DISK].n;
    out->disk_capacity = t->root ? t->disk_cap : 0;
    out->disk_on = t->disk_on;
    out->disk_stalled = t->stalled;
    out->verified = !t->source_path || t->verify_applied;
    out->old_blocks = t->n_old;
    out->file_bytes = t->file_bytes;
}

const char *tier_disk_path(const tier *t)
{
    return t->root;
}

/* Walks level l's list: links agree both ways, every member holds that level; returns its length. */
static int64_t tier__check_list(const tier *t, int l)
{
    int64_t n = 0;
    int32_t prev = -1;
    for (int32_t e = t->lru[l].head; e >= 0; e = t->ents[e].next[l]) {
        const tier__ent *x = &t->ents[e];
        assert(e < t->cap_ents && x->live && x->prev[l] == prev);
        assert(l == TIER_HOST ? x->slot >= 0 : x->disk != TIER__NONE);
        prev = e;
        n++;
        assert(n <= t->n_live);
    }
    assert(prev == t->lru[l].tail);
    return n;
}

void tier_check(const tier *t)
{
    int64_t live = 0, in_host = 0, on_disk = 0, pins = 0, in_table = 0, old = 0;
    char *slot_used = calloc((size_t)(t->host_cap > 0 ? t->host_cap : 1), 1);
    assert(slot_used);
    for (int32_t e = 0; e < t->cap_ents; e++) {
        const tier__ent *x = &t->ents[e];
        if (!x->live) continue;
        live++;
        assert(x->slot >= 0 || x->disk != TIER__NONE || x->pins > 0); /* holds something */
        assert(tier__find(t, x->key) == e);
        assert(x->pins >= 0);
        pins += x->pins;
        if (x->slot >= 0) {
            assert(x->slot < t->host_cap && !slot_used[x->slot]);
            slot_used[x->slot] = 1;
            in_host++;
        }
        if (x->disk != TIER__NONE) {
            assert(t->disk_on);
            on_disk++;
        }
        if (x->old) { /* an earlier run's file, untouched this run */
            assert(x->disk == TIER__ON && x->slot < 0 && x->pins == 0);
            old++;
        }
    }
    for (uint32_t i = 0; i <= t->table_mask; i++) {
        int32_t e = t->table[i];
        if (e < 0) continue;
        assert(e < t->cap_ents && t->ents[e].live);
        in_table++;
    }
    for (int64_t i = 0; i < t->n_free_slots; i++) {
        assert(t->free_slots[i] >= 0 && t->free_slots[i] < t->host_cap && !slot_used[t->free_slots[i]]);
        slot_used[t->free_slots[i]] = 1;
    }
    free(slot_used);
    assert(live == t->n_live && in_table == live && old == t->n_old);
    assert(in_host == t->lru[TIER_HOST].n && tier__check_list(t, TIER_HOST) == in_host);
    assert(on_disk == t->lru[TIER_DISK].n && tier__check_list(t, TIER_DISK) == on_disk);
    assert(in_host + t->n_free_slots == t->host_cap);
    assert(on_disk <= t->disk_cap);
    assert(t->n_ready <= t->n_loading && pins <= t->n_loading);
    assert(t->n_free_bufs <= t->n_bufs && t->n_bufs <= t->max_bufs);
    (void)live, (void)in_table, (void)pins, (void)old;
}
