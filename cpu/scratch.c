/*
 * scratch.c — the per-thread and per-step scratch buffers of the CPU backend (cpu__scratch in
 * internal.h): grown by the thread that is about to start a task that needs them (never inside
 * one), 64-byte aligned, and never shrunk, so a steady workload stops allocating after its
 * first steps. The drivers (matmul.c, attention.c, ops.c) and the backend (cpu_backend.c) use
 * them; the backend frees them when it is destroyed.
 */
#include <errno.h>
#include <stdlib.h>

#include "cpu/internal.h"

int cpu__scratch_reserve(cpu__scratch *s, size_t bytes)
{
    if (s->bytes >= bytes) return 0;
    size_t want = bytes + bytes / 2 + 64;
    want = (want + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, want);
    if (!p) return -ENOMEM;
    free(s->p);
    s->p = p;
    s->bytes = want;
    return 0;
}
