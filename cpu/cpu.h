/*
 * cpu.h — the CPU backend's SIMD levels, chosen at run time.
 *
 * One build carries the kernels of every level the target architecture has (x86-64: scalar,
 * avx2, avx512; aarch64: scalar, neon). cpu/isa.c finds the best level the CPU supports once,
 * from cpuid/xgetbv (x86) or the auxiliary vector (aarch64); KVSERVE_CPU_ISA forces a lower one.
 * Each backend instance picks its level when it is created, so one process may hold backends at
 * several levels (the tests run every kernel at every level the machine supports).
 *
 * Levels and what they require:
 *   scalar  portable C, any CPU (the numerical reference)
 *   avx2    AVX2 + FMA + F16C, OS-enabled YMM state (Haswell, Zen 1 and later)
 *   avx512  the above + AVX-512 F/BW/VL/DQ/CD, OS-enabled ZMM state (Skylake-SP, Zen 4 and later);
 *           VNNI and BF16 are sub-features: kernels that need them are used only when present
 *   neon    aarch64 Advanced SIMD (every ARMv8-A CPU); dotprod is a sub-feature
 */
#ifndef KVSERVE_CPU_H
#define KVSERVE_CPU_H

#include <stddef.h>

#include "engine/backend.h"

/* SIMD levels. On one architecture a larger number is a higher level. */
enum cpu_isa {
    CPU_ISA_SCALAR = 0,
    CPU_ISA_AVX2 = 1,
    CPU_ISA_AVX512 = 2,
    CPU_ISA_NEON = 3,
};

#define CPU_ISA_COUNT 4

/* Sub-features (bits of cpu_isa_features()). */
enum cpu_feature {
    CPU_FEAT_VNNI = 1 << 0,    /* AVX512-VNNI: vpdpbusd */
    CPU_FEAT_BF16 = 1 << 1,    /* AVX512-BF16: vdpbf16ps */
    CPU_FEAT_DOTPROD = 1 << 2, /* aarch64 sdot/udot */
};

/* The best level this CPU and this build support (detected once, then cached). */
int cpu_isa_detect(void);

/* The sub-features of this CPU that this build can use (CPU_FEAT_* bits). */
unsigned cpu_isa_features(void);

/* 1 when level isa can run on this CPU (scalar always can), else 0. */
int cpu_isa_supported(int isa);

/* "scalar", "avx2", "avx512", "neon"; "?" for a number that is no level. */
const char *cpu_isa_name(int isa);

/* The level named s, or -EINVAL when s names none. */
int cpu_isa_parse(const char *s);

/* The level a backend gets by default: KVSERVE_CPU_ISA when it is set (it may only lower the
 * level), else cpu_isa_detect(). 0 with *isa set, or -EINVAL with a one-line message in err
 * when the variable names no level or one this CPU cannot run. */
int cpu_isa_default(int *isa, char *err, size_t err_len);

/* A CPU backend running the kernels of level isa with n_threads threads (≤ 0: one per core).
 * NULL when isa is not supported here or out of memory. */
backend *cpu_backend_create_isa(int n_threads, int isa);

/* cpu_backend_create_isa at the level cpu_isa_default() gives (NULL with a message on stderr
 * when KVSERVE_CPU_ISA names a level the CPU cannot run). */
backend *cpu_backend_create(int n_threads);

#endif
