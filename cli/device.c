/*
 * device.c — backend selection (--device cpu|cuda|auto). Without CUDA in the build, the CUDA
 * entry points (cuda/absent.c then) report that plainly, and "auto" means the CPU.
 */
#include <stdio.h>
#include <string.h>

#include "cli/device.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"
#include "engine/backend.h"

/* The CPU backend at the default SIMD level (KVSERVE_CPU_ISA may lower it). */
static backend *cpu_create(int n_threads, char *err, size_t err_len)
{
    int isa;
    if (cpu_isa_default(&isa, err, err_len)) return NULL;
    backend *be = cpu_backend_create_isa(n_threads, isa);
    if (!be) snprintf(err, err_len, "CPU backend: out of memory or cannot start its threads");
    return be;
}

backend *be_create(const char *device, int n_threads, char *err, size_t err_len)
{
    if (!device || !strcmp(device, "auto")) {
        char why[256];
        if (cuda_is_available(why, sizeof why)) {
            backend *be = cuda_backend_create(0, err, err_len);
            if (be) return be;
            /* a GPU is there but unusable (e.g. cuBLAS missing): say why before using the CPU */
            fprintf(stderr, "kvserve: --device auto: %s; using the CPU\n", err);
        }
        return cpu_create(n_threads, err, err_len);
    }
    if (!strcmp(device, "cpu")) return cpu_create(n_threads, err, err_len);
    if (!strcmp(device, "cuda")) {
        if (!cuda_is_available(err, err_len)) return NULL;
        return cuda_backend_create(0, err, err_len);
    }
    snprintf(err, err_len, "unknown --device '%s' (expected cpu, cuda or auto)", device);
    return NULL;
}
