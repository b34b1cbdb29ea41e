/*
 * device.h — the backend factory of the wiring: which backend --device names (cli/device.c).
 *
 * The engine never creates a backend itself: its configuration carries a factory
 * (engine_config.make_backend), and the commands set it to be_create, so engine/ knows only the
 * interface of engine/backend.h and nothing of cpu/ or cuda/.
 */
#ifndef KVSERVE_CLI_DEVICE_H
#define KVSERVE_CLI_DEVICE_H

#include <stddef.h>

#include "engine/backend.h"

/* Creates the backend for device "cpu", "cuda" or "auto" (CUDA when built and a GPU is visible,
 * else CPU). n_threads <= 0 means one per core. NULL with a one-line message in err when the
 * device is unavailable (e.g. CUDA asked for but not built, no driver, or no GPU, or
 * KVSERVE_CPU_ISA names a SIMD level the CPU cannot run). */
backend *be_create(const char *device, int n_threads, char *err, size_t err_len);

/* --cuda-graphs: "on" (the default) or "off" for the CUDA backends be_create makes from now on.
 * 0, or -EINVAL with a one-line message in err for another value. Called by the commands before
 * they start the engine (which creates its backend on its own thread). */
int be_set_cuda_graphs(const char *arg, char *err, size_t err_len);

#endif
