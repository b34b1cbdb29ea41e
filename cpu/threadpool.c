/*
 * threadpool.c — the CPU backend's persistent workers.
 *
 * Decode of a small model runs about a hundred ops per token, each split across all threads, so
 * dispatch must cost a few microseconds. Workers are created once. An op is a parallel for over
 * n items cut into chunks: the caller publishes it and bumps an atomic generation counter;
 * workers spin on that counter for a short while (so back-to-back ops never sleep) and then
 * sleep on it with a futex (so an idle server burns no CPU). Every participant, the caller
 * included, takes chunks from one atomic counter until none are left: chunks of a fixed size,
 * or (cpu__pool_for_guided) a share of what is left each time, so that work comes in long runs
 * of consecutive items first and short ones at the end.
 *
 * The machine may be shared (more runnable threads than cores). A worker the OS has not
 * scheduled yet must not hold the step up, so participation is opt-in: a worker joins the
 * current op by incrementing a join count in the op's state word, and only while the op is
 * open. When the caller runs out of chunks it closes the op and waits for the workers that
 * joined — never for one that has not started; that one sees the op closed and skips it.
 *
 * Invariants: only the creating thread calls cpu__pool_for, one op at a time; an op's fields
 * are written before its generation is published and read only by workers that joined it;
 * state = (generation << 32) | CLOSED bit | number of workers joined.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu/internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Spins before sleeping: long enough to bridge the gap between two ops of one step (the engine
 * thread does a little work between them), short enough not to matter when idle. */
#define SPIN_ITERS 20000

#define CLOSED (1ull << 31)

struct cpu__pool {
    int n_threads;
    pthread_t *threads;             /* [n_threads - 1] */
    /* The current op, written before gen is bumped. */
    cpu__range_fn fn;
    void *arg;
    int64_t n_items, chunk;
    int guided;                     /* 1: next counts items, chunks shrink (cpu__pool_for_guided) */
    _Atomic int64_t next;           /* next chunk to take */
    _Atomic uint64_t state;         /* (gen << 32) | CLOSED | joined */
    _Atomic int n_done;             /* joined workers that have finished */
    _Atomic uint32_t gen;           /* bumped once per op; futex word */
    _Atomic int n_sleeping;         /* workers inside (or about to enter) futex wait */
    _Atomic int stop;
    _Atomic int refs;               /* owners (cpu__pool_share); the last destroy stops the workers */
};

typedef struct worker_arg {
    cpu__pool *p;
    int ith;
} worker_arg;

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

/* Waits until gen differs from seen; returns the new value. */
static uint32_t wait_gen(cpu__pool *p, uint32_t seen)
{
    for (int i = 0; i < SPIN_ITERS; i++) {
        uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
    }
    for (;;) {
        atomic_fetch_add(&p->n_sleeping, 1);
        uint32_t g = atomic_load(&p->gen);
        if (g == seen) futex(&p->gen, FUTEX_WAIT_PRIVATE, seen);
        atomic_fetch_sub(&p->n_sleeping, 1);
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) return g;
    }
}

/* Takes chunks of the current op until none are left. */
static void run_chunks(cpu__pool *p, int ith)
{
    if (p->guided) {
        int64_t lo = atomic_load_explicit(&p->next, memory_order_relaxed);
        while (lo < p->n_items) {
            int64_t c = (p->n_items - lo) / (2 * p->n_threads);
            if (c < p->chunk) c = p->chunk;
            if (!atomic_compare_exchange_weak_explicit(&p->next, &lo, lo + c, memory_order_relaxed,
                                                       memory_order_relaxed))
                continue;
            p->fn(p->arg, lo, lo + c < p->n_items ? lo + c : p->n_items, ith);
            lo = atomic_load_explicit(&p->next, memory_order_relaxed);
        }
        return;
    }
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        int64_t lo = c * p->chunk;
        if (lo >= p->n_items) break;
        int64_t hi = lo + p->chunk < p->n_items ? lo + p->chunk : p->n_items;
        p->fn(p->arg, lo, hi, ith);
    }
}

/* Joins the op of generation g if it is still open. */
static int try_join(cpu__pool *p, uint32_t g)
{
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(s >> 32) != g || (s & CLOSED)) return 0;
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return 1;
    }
}

static void *worker_main(void *v)
{
    worker_arg *wa = v;
    cpu__pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    uint32_t seen = 0;
    for (;;) {
        seen = wait_gen(p, seen);
        if (atomic_load(&p->stop)) break;
        if (!try_join(p, seen)) continue;
        run_chunks(p, ith);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
    return NULL;
}

static void publish(cpu__pool *p)
{
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleeper's increment-then-check */
    if (atomic_load(&p->n_sleeping) > 0) futex(&p->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

cpu__pool *cpu__pool_create(int n_threads)
{
    if (n_threads < 1) n_threads = 1;
    cpu__pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->refs, 1);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i; /* join the ones that started */
            cpu__pool_destroy(p);
            return NULL;
        }
    }
    return p;
}

cpu__pool *cpu__pool_share(cpu__pool *p)
{
    atomic_fetch_add(&p->refs, 1);
    return p;
}

void cpu__pool_destroy(cpu__pool *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) > 1) return;
    atomic_store(&p->stop, 1);
    publish(p);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    free(p);
}

int cpu__pool_size(const cpu__pool *p)
{
    return p->n_threads;
}

static void pool_run(cpu__pool *p, int64_t n_items, int64_t chunk, int guided, cpu__range_fn fn, void *arg)
{
    if (n_items <= 0) return;
    if (chunk < 1) chunk = 1;
    if (p->n_threads == 1 || n_items <= chunk) {
        if (guided) chunk = n_items;
        for (int64_t lo = 0; lo < n_items; lo += chunk) fn(arg, lo, lo + chunk < n_items ? lo + chunk : n_items, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_items = n_items;
    p->chunk = chunk;
    p->guided = guided;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->state, (uint64_t)g << 32, memory_order_release);
    publish(p);
    run_chunks(p, 0);
    uint64_t s = atomic_fetch_or_explicit(&p->state, CLOSED, memory_order_acq_rel);
    int joined = (int)(s & (CLOSED - 1));
    /* Spin while the joined workers finish their last chunks; yield now and then in case one
     * of them shares our core. */
    for (unsigned i = 1; atomic_load_explicit(&p->n_done, memory_order_acquire) != joined; i++) {
        if (i % 256 == 0)
            sched_yield();
        else
            cpu_relax();
    }
}

void cpu__pool_for(cpu__pool *p, int64_t n_items, int64_t chunk, cpu__range_fn fn, void *arg)
{
    pool_run(p, n_items, chunk, 0, fn, arg);
}

void cpu__pool_for_guided(cpu__pool *p, int64_t n_items, int64_t min_chunk, cpu__range_fn fn, void *arg)
{
    pool_run(p, n_items, min_chunk, 1, fn, arg);
}
