/*
 * threadpool.c — the CPU backend's persistent workers.
 *
 * Decode of a small model runs about a hundred ops per token, each split across all threads, so
 * dispatch must cost a few microseconds. Workers are created once. To start a task the caller
 * publishes (fn, arg) and bumps an atomic generation counter; workers spin on that counter for a
 * short while (so back-to-back ops never sleep) and then sleep on it with a futex (so an idle
 * server burns no CPU). The caller runs share 0 itself and then waits for a done counter.
 *
 * Invariants: only the creating thread calls cpu__pool_run, one task at a time; a task's
 * arguments stay valid until cpu__pool_run returns; n_done counts finished workers of the
 * current generation only (reset before the generation is published).
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
#else
#define cpu_relax() ((void)0)
#endif

/* Spins before sleeping: long enough to bridge the gap between two ops of one step (the engine
 * thread does a little work between them), short enough not to matter when idle. */
#define SPIN_ITERS 20000

struct cpu__pool {
    int n_threads;
    pthread_t *threads;             /* [n_threads - 1] */
    cpu__task_fn fn;                /* current task, published before gen is bumped */
    void *arg;
    _Atomic uint32_t gen;           /* bumped once per task; futex word */
    _Atomic int n_sleeping;         /* workers inside (or about to enter) futex wait */
    _Atomic int n_done;             /* workers that finished the current task */
    _Atomic int stop;
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
        p->fn(p->arg, ith, p->n_threads);
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

void cpu__pool_destroy(cpu__pool *p)
{
    if (!p) return;
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

void cpu__pool_run(cpu__pool *p, cpu__task_fn fn, void *arg)
{
    int nth = p->n_threads;
    if (nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    publish(p);
    fn(arg, 0, nth);
    /* Spin while the others finish; yield now and then in case they share our core. */
    for (unsigned i = 1; atomic_load_explicit(&p->n_done, memory_order_acquire) != nth - 1; i++) {
        if (i % 1024 == 0)
            sched_yield();
        else
            cpu_relax();
    }
}
