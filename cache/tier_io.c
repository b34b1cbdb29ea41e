/*
 * tier_io.c — the second KV tier's threads (see tier.h, tier_internal.h): the I/O thread that
 * runs file jobs (block writes, reads, unlinks, the model stamp) in queue order, the verifier
 * that hashes the source file (the model) in the background, and the queues, deadlines and
 * shutdown they share with the engine thread.
 *
 * The I/O thread takes a ready job, records it as running (with its start time, so that the
 * engine thread can see it stuck past the deadline), runs the file operation without the mutex,
 * then, under it, copies a read into its block (CPU: the copy may run on any thread) unless the
 * job was abandoned meanwhile, and moves the job to the done list. Both threads are detached;
 * n_threads counts them. When tier_destroy leaves a stuck one behind (orphaned), that thread
 * calls nothing of the tier's owner again (no copy, no wake) and the last one out frees the
 * tier's remains.
 *
 * Called by tier.c only; calls tier_disk.c only.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cache/tier_disk.h"
#include "cache/tier_internal.h"

void tier__enqueue(tier *t, tier__job *j)
{
    if (!j->ready) t->need_fence = 1;
    pthread_mutex_lock(&t->mu);
    if (t->todo_tail) t->todo_tail->next = j;
    else t->todo_head = j;
    t->todo_tail = j;
    pthread_cond_signal(&t->cv_io);
    pthread_mutex_unlock(&t->mu);
}

/* Runs one job on the I/O thread. */
void (*tier__test_hook)(int kind);

static void tier__run_job(tier *t, tier__job *j)
{
    if (tier__test_hook) tier__test_hook(j->kind);
    tier__meta m = {t->c.fingerprint, j->key, j->parent, t->c.block_size, j->tokens};
    switch (j->kind) {
    case TIER__WRITE:
        j->rc = tier__disk_write(t->root, &m, j->buf, t->c.block_bytes);
        break;
    case TIER__READ:
        j->rc = tier__disk_read(t->root, &m, j->buf, t->c.block_bytes);
        break;
    case TIER__STAMP:
        j->rc = tier__stamp_write(t->root, j->key);
        break;
    default:
        j->rc = tier__disk_unlink(t->root, j->key);
        break;
    }
}

/* Frees what a tier left behind by tier_destroy still holds; its last thread calls it. */
static void tier__free_orphan(tier *t)
{
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv_io);
    pthread_cond_destroy(&t->cv_idle);
    free(t->root);
    free(t->source_path);
    free(t->disk_dir);
    free(t);
}

/* A thread of the tier leaves (mu held; released here). */
static void tier__thread_exit(tier *t)
{
    t->n_threads--;
    int last = t->orphaned && t->n_threads == 0;
    pthread_cond_broadcast(&t->cv_idle);
    pthread_mutex_unlock(&t->mu);
    if (last) tier__free_orphan(t);
}

/* Calls c.wake unless the tier was left behind (mu held, released meanwhile). */
static void tier__wake(tier *t)
{
    if (!t->c.wake || t->orphaned) return;
    t->waking++;
    pthread_mutex_unlock(&t->mu);
    t->c.wake(t->c.wake_ud);
    pthread_mutex_lock(&t->mu);
    t->waking--;
    pthread_cond_broadcast(&t->cv_idle);
}

static void *tier__io_main(void *arg)
{
    tier *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!(t->todo_head && t->todo_head->ready) && !(t->stop && (!t->todo_head || t->orphaned)))
            pthread_cond_wait(&t->cv_io, &t->mu);
        if (!t->todo_head || t->orphaned) break; /* stopping, nothing left (or left behind) */
        tier__job *j = t->todo_head;
        t->todo_head = j->next;
        if (!t->todo_head) t->todo_tail = NULL;
        j->next = NULL;
        t->busy = 1;
        t->running = j;
        t->running_t0_us = clk_now_us();
        pthread_mutex_unlock(&t->mu);
        tier__run_job(t, j);
        pthread_mutex_lock(&t->mu);
        t->running = NULL;
        t->busy = 0;
        if (t->orphaned) { /* the tier's owner is gone: nothing more to report to */
            if (!t->c.copy.host_free) free(j->buf); /* else the backend's, which is gone too */
            free(j);
            break;
        }
        /* Under the mutex, so that a load given up at its deadline never writes its block. */
        if (j->kind == TIER__READ && !j->rc && !j->abandoned && t->c.copy.in_any_thread) {
            j->copy_rc = t->c.copy.in(t->c.copy.ud, j->block, j->buf);
            j->copied = 1;
        }
        if (t->done_tail) t->done_tail->next = j;
        else t->done_head = j;
        t->done_tail = j;
        pthread_cond_broadcast(&t->cv_idle);
        if (j->kind == TIER__READ && !j->abandoned) tier__wake(t);
    }
    tier__thread_exit(t);
    return NULL;
}

int64_t tier_next_deadline_us(const tier *t)
{
    tier *m = (tier *)t; /* the mutex only */
    if (!t->root || !t->threads_started) return -1;
    int64_t next = INT64_MAX;
    pthread_mutex_lock(&m->mu);
    for (const tier__job *j = t->todo_head; j; j = j->next)
        if (j->kind == TIER__READ && j->deadline_us < next) next = j->deadline_us;
    if (t->running && t->running->kind == TIER__READ && !t->running->abandoned && t->running->deadline_us < next)
        next = t->running->deadline_us;
    if (t->running && !t->stalled && t->running_t0_us + t->io_timeout_us < next)
        next = t->running_t0_us + t->io_timeout_us + 1;
    pthread_mutex_unlock(&m->mu);
    if (next == INT64_MAX) return -1;
    int64_t left = next - clk_now_us();
    return left > 0 ? left : 0;
}

/* The source's whole content hashed, and its identity unchanged before and after. 0, -ESTALE
 * (the file is not the one that was loaded, or changed meanwhile), -ECANCELED, or an errno. */
static int tier__hash_source(tier *t, hash_key *out)
{
    int fd = open(t->source_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -errno;
    const tier_file_id *id = &t->c.source_id;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? -errno : 0;
#define TIER__SAME(s) ((uint64_t)(s).st_ino == id->ino && (uint64_t)(s).st_dev == id->dev && \
                       (S_ISBLK((s).st_mode) || ((uint64_t)(s).st_size == id->size && \
                        (int64_t)(s).st_mtim.tv_sec * 1000000000 + (s).st_mtim.tv_nsec == id->mtime_ns)))
    if (!rc && !TIER__SAME(st)) rc = -ESTALE;
    enum { CHUNK = 1 << 20 };
    char *buf = rc ? NULL : malloc(CHUNK);
    if (!rc && !buf) rc = -ENOMEM;
    hash_state h;
    hash_init(&h);
    for (uint64_t off = 0; !rc && off < id->size;) {
        pthread_mutex_lock(&t->mu);
        int stop = t->stop;
        pthread_mutex_unlock(&t->mu);
        if (stop) {
            rc = -ECANCELED;
            break;
        }
        size_t want = id->size - off < CHUNK ? (size_t)(id->size - off) : CHUNK;
        ssize_t n = pread(fd, buf, want, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -ESTALE;
            break;
        }
        hash_update(&h, buf, (size_t)n);
        off += (uint64_t)n;
    }
    if (!rc && (fstat(fd, &st) != 0 || !TIER__SAME(st))) rc = -ESTALE;
#undef TIER__SAME
    free(buf);
    close(fd);
    if (!rc) *out = hash_final(&h);
    return rc;
}

static void *tier__verify_main(void *arg)
{
    tier *t = arg;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10); /* background work: the engine first */
    hash_key h = {0, 0};
    int rc = tier__hash_source(t, &h);
    pthread_mutex_lock(&t->mu);
    t->v_done = 1;
    t->v_rc = rc;
    t->v_hash = h;
    tier__wake(t);
    tier__thread_exit(t);
    return NULL;
}

/* 1 while the I/O thread has jobs. */
int tier__io_busy(tier *t)
{
    pthread_mutex_lock(&t->mu);
    int busy = t->todo_head != NULL || t->busy;
    pthread_mutex_unlock(&t->mu);
    return busy;
}

/* Waits on cv_idle (mu held) for at most ms milliseconds. */
static void tier__wait_idle(tier *t, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&t->cv_idle, &t->mu, &ts);
}

/* Starts the I/O thread and, with a file tier and a source to vouch for it, the verifier. Both
 * are detached: tier_destroy waits for them through n_threads. 0 or -EAGAIN. */
int tier__start_threads(tier *t)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    void *(*mains[2])(void *) = {tier__io_main, tier__verify_main};
    int n = t->root && t->source_path ? 2 : 1, rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        pthread_mutex_lock(&t->mu); /* counted first: a thread may finish at once */
        t->n_threads++;
        pthread_mutex_unlock(&t->mu);
        if (pthread_create(&th, &a, mains[i], t)) {
            pthread_mutex_lock(&t->mu);
            t->n_threads--;
            pthread_mutex_unlock(&t->mu);
            rc = -EAGAIN;
        }
    }
    pthread_attr_destroy(&a);
    t->threads_started = 1;
    return rc;
}


/* Frees a list of jobs the I/O thread will never see, with their staging buffers. */
static void tier__free_jobs(tier *t, tier__job *j)
{
    while (j) {
        tier__job *next = j->next;
        if (j->buf) tier__free_host(t, j->buf);
        free(j);
        j = next;
    }
}

/* Stops the threads: waits for them up to the deadline. 1 when they are gone; 0 when one is
 * stuck (in a file operation): then the tier is orphaned and must not be freed here. */
int tier__stop_threads(tier *t)
{
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv_io);
    int64_t until = clk_now_us() + t->io_timeout_us;
    while (t->n_threads > 0 && clk_now_us() < until) tier__wait_idle(t, 20);
    if (t->n_threads == 0) {
        pthread_mutex_unlock(&t->mu);
        return 1;
    }
    t->orphaned = 1;
    pthread_cond_broadcast(&t->cv_io);
    tier__job *todo = t->todo_head, *done = t->done_head;
    t->todo_head = t->todo_tail = t->done_head = t->done_tail = NULL;
    while (t->waking > 0) pthread_cond_wait(&t->cv_idle, &t->mu); /* a wake-up in progress ends */
    pthread_mutex_unlock(&t->mu);
    tier__free_jobs(t, todo);
    tier__free_jobs(t, done);
    if (!t->c.quiet)
        fprintf(stderr, "kvserve: KV disk tier %s: a file operation has not returned for %.1f s; leaving it behind\n",
                t->root ? t->root : "", (double)t->io_timeout_us / 1e6);
    return 0;
}


void tier__mark_ready(tier *t)
{
    pthread_mutex_lock(&t->mu);
    for (tier__job *j = t->todo_head; j; j = j->next) j->ready = 1;
    pthread_cond_signal(&t->cv_io);
    pthread_mutex_unlock(&t->mu);
}

tier__job *tier__take_done(tier *t)
{
    pthread_mutex_lock(&t->mu);
    tier__job *j = t->done_head;
    t->done_head = t->done_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    return j;
}

void tier__take_expired(tier *t, int64_t now_us, tier__job **expired, tier__job **abandoned, int *stuck)
{
    tier__job *prev = NULL;
    *expired = *abandoned = NULL;
    pthread_mutex_lock(&t->mu);
    *stuck = t->running && now_us - t->running_t0_us > t->io_timeout_us;
    for (tier__job **pp = &t->todo_head; *pp;) {
        tier__job *j = *pp;
        if (j->kind == TIER__READ && (*stuck || now_us >= j->deadline_us)) {
            *pp = j->next;
            if (t->todo_tail == j) t->todo_tail = prev;
            j->next = *expired;
            *expired = j;
        } else {
            prev = j;
            pp = &j->next;
        }
    }
    tier__job *r = t->running;
    if (r && r->kind == TIER__READ && !r->abandoned && (*stuck || now_us >= r->deadline_us)) {
        r->abandoned = 1;
        *abandoned = r;
    }
    pthread_mutex_unlock(&t->mu);
}

int tier__verify_result(tier *t, int *rc, hash_key *hash)
{
    pthread_mutex_lock(&t->mu);
    int done = t->v_done;
    *rc = t->v_rc;
    *hash = t->v_hash;
    pthread_mutex_unlock(&t->mu);
    return done;
}

int tier__io_wait_idle(tier *t, int64_t until_us)
{
    pthread_mutex_lock(&t->mu);
    while (t->todo_head || t->busy) {
        int64_t now = clk_now_us();
        if ((t->running && now - t->running_t0_us > t->io_timeout_us) || (until_us && now > until_us)) {
            pthread_mutex_unlock(&t->mu);
            return -ETIMEDOUT;
        }
        tier__wait_idle(t, 20);
    }
    pthread_mutex_unlock(&t->mu);
    return 0;
}
