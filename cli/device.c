/*
 * device.c — backend selection (--device cpu|cuda|auto). Without CUDA in the build, the CUDA
 * entry points (cuda/absent.c then) report that plainly, and "auto" means the CPU.
 */
#include <errno.h>
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

/* --cuda-graphs of the backends made from now on (set before the engine thread starts). */
static int be__cuda_graphs = 1;

int be_set_cuda_graphs(const char *arg, char *err, size_t err_len)
{
    if (arg && (!strcmp(arg, "on") || !strcmp(arg, "off"))) {
        be__cuda_graphs = !strcmp(arg, "on");
        return 0;
    }
    snprintf(err, err_len, "unknown --cuda-graphs '%s' (expected on or off)", arg ? arg : "");
    return -EINVAL;
}

/* The CUDA backend on GPU 0 with the wiring's settings. */
static backend *cuda_create(char *err, size_t err_len)
{
    backend *be = cuda_backend_create(0, err, err_len);
    if (be) cuda_set_graphs(be, be__cuda_graphs);
    return be;
}

backend *be_create(const char *device, int n_threads, char *err, size_t err_len)
{
    if (!device || !strcmp(device, "auto")) {
        char why[256];
        if (cuda_is_available(why, sizeof why)) {
            backend *be = cuda_create(err, err_len);
            if (be) return be;
            /* a GPU is there but unusable (e.g. cuBLAS missing): say why before using the CPU */
            fprintf(stderr, "kvserve: --device auto: %s; using the CPU\n", err);
        }
        return cpu_create(n_threads, err, err_len);
    }
    if (!strcmp(device, "cpu")) return cpu_create(n_threads, err, err_len);
    if (!strcmp(device, "cuda")) {
        if (!cuda_is_available(err, err_len)) return NULL;
        return cuda_create(err, err_len);
    }
    snprintf(err, err_len, "unknown --device '%s' (expected cpu, cuda or auto)", device);
    return NULL;
}
