/*
 * tier_internal.h — what cache/tier.c (index, levels, the API) and cache/tier_io.c (the I/O and
 * verifier threads, their queues and deadlines) share: the tier's structures. Nothing outside
 * cache/tier*.c includes it. tier.c calls tier_io.c, never the other way round.
 *
 * Ownership: the engine thread owns the entries, the table, the LRU lists, the staging buffers'
 * free list and the completed loads; the fields marked (mu) are shared with the threads under
 * the mutex; a job belongs to the queue it is in, to the I/O thread while it runs it, and to
 * the engine thread once it is in the done list.
 */
#ifndef KVSERVE_TIER_INTERNAL_H
#define KVSERVE_TIER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cache/tier.h"

enum { TIER__NONE = 0, TIER__QUEUED = 1, TIER__ON = 2 }; /* an entry's file state */
enum { TIER__WRITE = 0, TIER__READ = 1, TIER__UNLINK = 2, TIER__STAMP = 3 }; /* job kinds */

typedef struct tier__ent {
    hash_key key;
    int32_t slot;       /* host tier slot, or -1 */
    int8_t disk;        /* TIER__NONE / QUEUED / ON */
    int8_t live;
    int8_t old;         /* ON from an earlier run, not yet vouched for: never loaded */
    int32_t pins;       /* file reads in flight */
    uint32_t gen;       /* bumped whenever the entry is freed: completions of older jobs are stale */
    int32_t prev[2], next[2]; /* LRU links per level (-1: none) */
} tier__ent;

typedef struct tier__job {
    struct tier__job *next;
    int kind;           /* TIER__WRITE / READ / UNLINK / STAMP */
    int ready;          /* 0 until a fence covers the copy that fills buf */
    int abandoned;      /* READ: given up at its deadline; its result is dropped (under mu) */
    int64_t deadline_us; /* READ: when it is given up */
    int32_t ent;        /* the entry it serves, with its generation */
    uint32_t gen;
    hash_key key, parent;
    int32_t block;      /* READ: the destination block */
    uint64_t tag;       /* READ: the caller's */
    void *buf;          /* staging buffer (WRITE, READ) */
    int rc;             /* result of the file operation, set by the I/O thread */
    int copied;         /* READ: copy.in already ran on the I/O thread ... */
    int copy_rc;        /* ... with this result */
    int32_t tokens[];   /* WRITE: [block_size] */
} tier__job;

typedef struct tier__list {
    int32_t head, tail; /* least / most recently used; -1 when empty */
    int64_t n;
} tier__list;

struct tier {
    tier_config c;
    char *disk_dir;           /* owned copy of c.disk_dir */
    size_t file_bytes;        /* one block's file */

    tier__ent *ents;          /* [cap_ents] */
    int32_t cap_ents, n_live, free_ent; /* free_ent: head of the free entries (linked by next[0]) */
    int32_t *table;           /* [table_mask + 1] entry index or -1 */
    uint32_t table_mask;
    tier__list lru[2];        /* TIER_HOST, TIER_DISK */

    int64_t host_cap;         /* slots */
    char *host_mem;           /* [host_cap][block_bytes] */
    int32_t *free_slots;      /* [host_cap] stack */
    int64_t n_free_slots;

    char *root;               /* the file tier's folder, NULL without one */
    int lock_fd;
    int64_t disk_cap;         /* blocks */
    int disk_on;

    void **bufs;              /* staging buffers, free ones at [0 .. n_free_bufs) */
    int n_bufs, n_free_bufs, max_bufs;
    void **fence_bufs;        /* buffers a copy in may still read: free after the next fence */
    int n_fence_bufs;
    int need_fence;           /* jobs or buffers wait for a fence */

    tier_done *ready;         /* completed loads not yet returned by tier_poll */
    int n_ready, cap_ready;
    int n_loading;            /* started, not yet returned */

    int64_t io_timeout_us;    /* a file job's deadline */
    int stalled;              /* the I/O thread is stuck past the deadline (as last seen) */
    char *source_path;        /* owned copy of c.source_path; NULL: no verification */
    int have_stamp;           /* the folder's stamp at start-up ... */
    hash_key stamp;           /* ... said this */
    int verify_applied;       /* the verifier's result was applied (tier_poll) */
    int64_t n_old;            /* entries with old set */

    int threads_started;      /* the I/O thread (and the verifier) were started */
    pthread_mutex_t mu;       /* guards the fields below */
    pthread_cond_t cv_io;     /* the I/O thread waits for a ready job */
    pthread_cond_t cv_idle;   /* tier_flush and tier_destroy wait for progress (CLOCK_MONOTONIC) */
    tier__job *todo_head, *todo_tail;
    tier__job *done_head, *done_tail;
    tier__job *running;       /* the job the I/O thread is running, NULL between jobs */
    int64_t running_t0_us;    /* when it started */
    int busy;                 /* the I/O thread is running a job */
    int stop;
    int n_threads;            /* the tier's threads not yet finished */
    int waking;               /* threads inside c.wake */
    int orphaned;             /* tier_destroy left them behind: the last one out frees */
    int v_done, v_rc;         /* the verifier finished, with this result ... */
    hash_key v_hash;          /* ... and the source's hash */

    tier_stats st;
};

/* ---- tier_io.c ------------------------------------------------------------------------------- */

/* Frees host memory from the copy functions' allocator (or malloc). */
static inline void tier__free_host(tier *t, void *p)
{
    if (!p) return;
    if (t->c.copy.host_free) t->c.copy.host_free(t->c.copy.ud, p);
    else free(p);
}

/* Tests only: called by the I/O thread before each file operation (the job's kind), so that a
 * test can hold it as a stalled disk would. NULL otherwise. */
extern void (*tier__test_hook)(int kind);

/* Appends j to the I/O thread's queue (mu taken here). */
void tier__enqueue(tier *t, tier__job *j);
/* Marks every queued job ready (a fence covered their copies) and wakes the I/O thread. */
void tier__mark_ready(tier *t);
/* Takes the list of jobs the I/O thread finished (oldest first). */
tier__job *tier__take_done(tier *t);
/* Takes the loads to give up at now: queued reads past their deadline (all queued reads when the
 * I/O thread is stuck past the deadline: *stuck = 1) into *expired, and the running read, when
 * it is due, marked abandoned, into *abandoned (still the I/O thread's). */
void tier__take_expired(tier *t, int64_t now_us, tier__job **expired, tier__job **abandoned, int *stuck);
/* The verifier's result: 1 when it finished (*rc, *hash set), else 0. */
int tier__verify_result(tier *t, int *rc, hash_key *hash);
/* 1 while the I/O thread has jobs. */
int tier__io_busy(tier *t);
/* Waits until the I/O thread's queue is empty and it is idle: 0, or -ETIMEDOUT as soon as the
 * job it runs is older than the deadline, or the clock passes until_us (0: no such bound). */
int tier__io_wait_idle(tier *t, int64_t until_us);
/* Starts the I/O thread and, with a file tier and a source, the verifier. 0 or -EAGAIN. */
int tier__start_threads(tier *t);
/* Stops the threads, waiting up to the deadline: 1 when they are gone; 0 when one is stuck:
 * the tier is then orphaned (queued jobs dropped) and only tier__free_orphan may free it. */
int tier__stop_threads(tier *t);

#endif
