/*
 * gr_cache.c — the cache of compiled grammars and the workers that compile them.
 *
 *   gr_cache_compile(key, fn) ──► entries (LRU): a grammar, or the error its source gave
 *                 │ miss               │
 *                 ▼                    │ done: cached (an error too)
 *   in flight: one job per key ──queue──► GR_COMPILE_WORKERS threads at nice 10
 *                 ▲                       fn(arg, now + GR_COMPILE_MS, err)
 *   more callers of the same key wait for that job instead of compiling it again
 *
 * A grammar's source is untrusted and compiling it may take its whole budget (GR_COMPILE_MS of
 * wall clock), so compilations run on a few low-priority threads of their own: a handful of
 * expensive grammars in parallel cannot take more than GR_COMPILE_WORKERS cores, and then at a
 * lower priority than the engine and the requests' other preparation. The caller (a request's
 * preparation thread) waits without using the CPU; at most GR_COMPILE_QUEUE compilations wait
 * for a worker, beyond which a new one is refused (busy) rather than holding its caller's
 * thread. A failure is cached like a success, by the same key, so that resending a grammar that
 * cannot compile costs a lookup; a timeout for GR_TIMEOUT_TTL_S only, since on a busy machine a
 * grammar that is merely large can run out of time where it would not later. The budget starts
 * when a worker takes the job.
 *
 * Thread-safe: one mutex over entries, jobs and the queue; fn runs without it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "grammar/gr_internal.h"

typedef struct gr_centry {
    char *key;
    size_t len;
    uint64_t hash;
    gr_grammar *g;   /* NULL: the source failed with err */
    gr_error err;
    uint64_t used;   /* clock of the last lookup or insertion */
    int64_t expires_us; /* a timeout's entry: clk_now_us() after which it is gone (0: never) */
} gr_centry;

/* One compilation in flight. */
typedef struct gr_cjob {
    char *key;
    size_t len;
    uint64_t hash;
    gr_compile_fn fn;
    void *arg;       /* the first caller's, valid while it waits */
    int done;
    int dropped;     /* gr_cache_stop answered it unrun */
    gr_grammar *g;   /* the result (a reference the job holds) ... */
    gr_error err;    /* ... or the error */
    int refs;        /* the waiting callers */
    struct gr_cjob *next;     /* the queue, then the in-flight list */
    struct gr_cjob *fnext;    /* in-flight list */
} gr_cjob;

struct gr_cache {
    pthread_mutex_t mu;
    pthread_cond_t work;      /* a job was queued, or stop */
    pthread_cond_t done;      /* a job finished */
    gr_centry *e;             /* [max_entries + 1] */
    int n, max_entries;
    size_t max_bytes;
    uint64_t clock;
    int64_t lookups, hits;
    gr_cjob *q_head, *q_tail; /* waiting for a worker */
    int n_queued;
    gr_cjob *flight;          /* every unfinished job (queued or running) */
    pthread_t workers[GR_COMPILE_WORKERS];
    int n_workers;
    int stop;                 /* gr_cache_stop ran: nothing more is queued or compiled */
    int n_waiting;            /* callers inside gr_cache_compile (destroy waits for them) */
};

static uint64_t key_hash(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

static void cache_drop(gr_cache *c, int i)
{
    free(c->e[i].key);
    gr_unref(c->e[i].g);
    c->e[i] = c->e[--c->n];
}

/* The entry of key (an expired one is dropped), or -1. */
static int cache_find(gr_cache *c, const char *key, size_t len, uint64_t h)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].len == len && !memcmp(c->e[i].key, key, len)) {
            if (c->e[i].expires_us && clk_now_us() > c->e[i].expires_us) {
                cache_drop(c, i);
                return -1;
            }
            return i;
        }
    return -1;
}

static size_t entry_bytes(const gr_centry *e)
{
    return e->g ? gr_grammar_bytes(e->g) : sizeof *e;
}

/* Caches (g or err) under key (mu held); g may be NULL. Evicts the least recently used entries
 * beyond the bounds, never the new one. */
static void cache_insert(gr_cache *c, const char *key, size_t len, uint64_t h, gr_grammar *g, const gr_error *err)
{
    if (c->max_entries <= 0) return;
    char *k = malloc(len ? len : 1);
    if (!k) return; /* not cached: only a later compile is lost */
    memcpy(k, key, len);
    int i = cache_find(c, key, len, h);
    if (i >= 0) cache_drop(c, i);
    gr_centry e = {k, len, h, gr_ref(g), {0}, ++c->clock, 0};
    if (!g && err) e.err = *err;
    if (!g && err && err->timeout) e.expires_us = clk_now_us() + (int64_t)GR_TIMEOUT_TTL_S * 1000000;
    c->e[c->n++] = e;
    for (;;) {
        size_t bytes = 0;
        for (int j = 0; j < c->n; j++) bytes += entry_bytes(&c->e[j]);
        if (c->n <= 1 || (c->n <= c->max_entries && (!c->max_bytes || bytes <= c->max_bytes))) break;
        int old = -1;
        for (int j = 0; j < c->n; j++)
            if (c->e[j].key != k && (old < 0 || c->e[j].used < c->e[old].used)) old = j;
        if (old < 0) break;
        cache_drop(c, old);
    }
}

/* ---- the workers -------------------------------------------------------------------------- */

static void job_unref(gr_cjob *j)
{
    if (--j->refs > 0) return;
    gr_unref(j->g);
    free(j->key);
    free(j);
}

/* Runs j (mu not held), then publishes its result and caches it (mu held on return). */
static void run_job(gr_cache *c, gr_cjob *j)
{
    gr_error err;
    memset(&err, 0, sizeof err);
    err.pos = -1;
    gr_grammar *g = j->fn(j->arg, clk_now_us() + (int64_t)GR_COMPILE_MS * 1000, &err);
    pthread_mutex_lock(&c->mu);
    j->g = g;
    if (!g) j->err = err;
    j->done = 1;
    cache_insert(c, j->key, j->len, j->hash, g, &err);
    for (gr_cjob **pp = &c->flight; *pp; pp = &(*pp)->fnext)
        if (*pp == j) {
            *pp = j->fnext;
            break;
        }
    pthread_cond_broadcast(&c->done);
}

static void *worker_main(void *arg)
{
    gr_cache *c = arg;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10); /* below the engine and the requests */
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->q_head && !c->stop) pthread_cond_wait(&c->work, &c->mu);
        if (!c->q_head || c->stop) break; /* stopping: gr_cache_stop answered the queue */
        gr_cjob *j = c->q_head;
        c->q_head = j->next;
        if (!c->q_head) c->q_tail = NULL;
        c->n_queued--;
        pthread_mutex_unlock(&c->mu);
        run_job(c, j); /* returns with mu held */
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- the API -------------------------------------------------------------------------------- */

gr_cache *gr_cache_create(int max_entries, size_t max_bytes)
{
    gr_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->max_entries = max_entries > 0 ? max_entries : 0;
    c->max_bytes = max_bytes;
    c->e = calloc((size_t)c->max_entries + 1, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    for (int i = 0; i < GR_COMPILE_WORKERS; i++)
        if (!pthread_create(&c->workers[c->n_workers], NULL, worker_main, c)) c->n_workers++;
    if (!c->n_workers) {
        gr_cache_destroy(c);
        return NULL;
    }
    return c;
}

void gr_cache_stop(gr_cache *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    while (c->q_head) { /* every queued job has a waiter, who frees it (job_unref) */
        gr_cjob *j = c->q_head;
        c->q_head = j->next;
        c->n_queued--;
        gr__fail(&j->err, -1, "the server is stopping");
        j->done = j->dropped = 1;
        for (gr_cjob **pp = &c->flight; *pp; pp = &(*pp)->fnext)
            if (*pp == j) {
                *pp = j->fnext;
                break;
            }
    }
    c->q_tail = NULL;
    pthread_cond_broadcast(&c->work);
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->mu);
}

void gr_cache_destroy(gr_cache *c)
{
    if (!c) return;
    gr_cache_stop(c);
    for (int i = 0; i < c->n_workers; i++) pthread_join(c->workers[i], NULL); /* a compile ends by its budget */
    pthread_mutex_lock(&c->mu);
    while (c->n_waiting > 0) pthread_cond_wait(&c->done, &c->mu); /* every job is done: they leave now */
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        gr_unref(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->done);
    free(c);
}

gr_grammar *gr_cache_get(gr_cache *c, const char *key, size_t len)
{
    uint64_t h = key_hash(key, len);
    pthread_mutex_lock(&c->mu);
    c->lookups++;
    int i = cache_find(c, key, len, h);
    gr_grammar *g = NULL;
    if (i >= 0 && c->e[i].g) {
        c->hits++;
        c->e[i].used = ++c->clock;
        g = gr_ref(c->e[i].g);
    }
    pthread_mutex_unlock(&c->mu);
    return g;
}

void gr_cache_put(gr_cache *c, const char *key, size_t len, gr_grammar *g)
{
    pthread_mutex_lock(&c->mu);
    cache_insert(c, key, len, key_hash(key, len), g, NULL);
    pthread_mutex_unlock(&c->mu);
}

gr_grammar *gr_cache_compile(gr_cache *c, const char *key, size_t len, gr_compile_fn fn, void *arg,
                             gr_error *err, int *busy)
{
    uint64_t h = key_hash(key, len);
    if (busy) *busy = 0;
    memset(err, 0, sizeof *err);
    err->pos = -1;
    pthread_mutex_lock(&c->mu);
    c->lookups++;
    int i = cache_find(c, key, len, h);
    if (c->stop && i < 0) {
        pthread_mutex_unlock(&c->mu);
        if (busy) *busy = 1;
        gr__fail(err, -1, "the server is stopping");
        return NULL;
    }
    if (i >= 0) { /* compiled before: the grammar, or why it failed */
        c->hits++;
        c->e[i].used = ++c->clock;
        gr_grammar *g = gr_ref(c->e[i].g);
        if (!g) *err = c->e[i].err;
        pthread_mutex_unlock(&c->mu);
        return g;
    }
    gr_cjob *j = c->flight;
    while (j && !(j->hash == h && j->len == len && !memcmp(j->key, key, len))) j = j->fnext;
    if (j) {
        c->hits++; /* another request compiles it right now: wait for that */
    } else {
        if (c->n_queued >= GR_COMPILE_QUEUE) {
            pthread_mutex_unlock(&c->mu);
            if (busy) *busy = 1;
            gr__fail(err, -1, "too many grammars are being compiled right now (%d waiting); retry", GR_COMPILE_QUEUE);
            return NULL;
        }
        j = calloc(1, sizeof *j);
        char *k = j ? malloc(len ? len : 1) : NULL;
        if (!k) {
            free(j);
            pthread_mutex_unlock(&c->mu);
            gr__fail(err, -1, "out of memory");
            return NULL;
        }
        memcpy(k, key, len);
        *j = (gr_cjob){.key = k, .len = len, .hash = h, .fn = fn, .arg = arg};
        if (c->q_tail) c->q_tail->next = j;
        else c->q_head = j;
        c->q_tail = j;
        c->n_queued++;
        j->fnext = c->flight;
        c->flight = j;
        pthread_cond_signal(&c->work);
    }
    j->refs++;
    c->n_waiting++;
    while (!j->done) pthread_cond_wait(&c->done, &c->mu);
    gr_grammar *g = gr_ref(j->g);
    if (!g) *err = j->err;
    if (!g && j->dropped && busy) *busy = 1; /* not the source's fault: try again elsewhere */
    job_unref(j);
    if (--c->n_waiting == 0 && c->stop) pthread_cond_broadcast(&c->done); /* gr_cache_destroy waits */
    pthread_mutex_unlock(&c->mu);
    return g;
}

void gr_cache_stats(gr_cache *c, int *entries, int64_t *lookups, int64_t *hits)
{
    pthread_mutex_lock(&c->mu);
    if (entries) *entries = c->n;
    if (lookups) *lookups = c->lookups;
    if (hits) *hits = c->hits;
    pthread_mutex_unlock(&c->mu);
}
