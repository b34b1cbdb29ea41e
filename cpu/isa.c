/*
 * isa.c — which SIMD level the CPU backend runs, and the table of kernels of each level.
 *
 * Detection runs once (cpuid and xgetbv on x86-64, the auxiliary vector on aarch64) and is
 * cached; it needs no special compiler flags, so this file is built for the baseline target like
 * every file of cpu/ except the per-level ones (*_avx2.c, *_avx512.c, *_vnni.c, *_neon.c, which
 * nothing calls before a level has been chosen here).
 *
 * A level is usable only when both the instructions and the operating system's saving of their
 * registers are present: AVX needs XCR0 bits 1-2 (SSE and YMM state), AVX-512 also bits 5-7
 * (opmask, upper ZMM halves, ZMM16-31). A hypervisor may hide a feature from cpuid; then it is
 * simply not used.
 *
 * cpu__kern_init fills a table level by level, from scalar upwards: every entry first gets its
 * scalar reference, then each level up to the chosen one overwrites what it implements, so an
 * entry a level lacks keeps the variant of the level below (see internal.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

static int detected_isa;
static unsigned detected_features;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static unsigned long long xgetbv0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void detect(void)
{
    unsigned a, b, c, d;
    detected_isa = CPU_ISA_SCALAR;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return;
    unsigned long long xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return; /* the OS does not save YMM state */
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, cd = (b >> 28) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    int vnni = (c >> 11) & 1;
    if (!(avx2 && fma && f16c)) return;
    detected_isa = CPU_ISA_AVX2;
    if (!(f && dq && cd && bw && vl) || (xcr0 & 0xe0) != 0xe0) return;
    detected_isa = CPU_ISA_AVX512;
    if (vnni) detected_features |= CPU_FEAT_VNNI;
    __cpuid_count(7, 1, a, b, c, d);
    if ((a >> 5) & 1) detected_features |= CPU_FEAT_BF16;
}
#elif defined(__aarch64__)
static void detect(void)
{
    detected_isa = CPU_ISA_NEON; /* Advanced SIMD is part of every ARMv8-A CPU */
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) detected_features |= CPU_FEAT_DOTPROD;
}
#else
static void detect(void)
{
    detected_isa = CPU_ISA_SCALAR;
}
#endif

int cpu_isa_detect(void)
{
    pthread_once(&detect_once, detect);
    return detected_isa;
}

unsigned cpu_isa_features(void)
{
    pthread_once(&detect_once, detect);
    return detected_features;
}

int cpu_isa_supported(int isa)
{
    int best = cpu_isa_detect();
    if (isa == CPU_ISA_SCALAR) return 1;
    if (best == CPU_ISA_NEON) return isa == CPU_ISA_NEON;
    return (isa == CPU_ISA_AVX2 || isa == CPU_ISA_AVX512) && isa <= best;
}

static const char *const isa_names[CPU_ISA_COUNT] = {"scalar", "avx2", "avx512", "neon"};

const char *cpu_isa_name(int isa)
{
    return isa >= 0 && isa < CPU_ISA_COUNT ? isa_names[isa] : "?";
}

int cpu_isa_parse(const char *s)
{
    for (int i = 0; s && i < CPU_ISA_COUNT; i++)
        if (!strcmp(s, isa_names[i])) return i;
    return -EINVAL;
}

int cpu_isa_default(int *isa, char *err, size_t err_len)
{
    int best = cpu_isa_detect();
    const char *env = getenv("KVSERVE_CPU_ISA");
    if (!env || !*env) {
        *isa = best;
        return 0;
    }
    int want = cpu_isa_parse(env);
    if (want < 0) {
        snprintf(err, err_len, "KVSERVE_CPU_ISA=%s: unknown level (expected scalar, avx2, avx512 or neon)", env);
        return -EINVAL;
    }
    if (!cpu_isa_supported(want)) {
        char have[64] = "";
        for (int i = 0; i < CPU_ISA_COUNT; i++)
            if (cpu_isa_supported(i))
                snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", *have ? ", " : "", isa_names[i]);
        snprintf(err, err_len, "KVSERVE_CPU_ISA=%s: this CPU cannot run it (it supports %s)", env, have);
        return -EINVAL;
    }
    *isa = want;
    return 0;
}

/* ---- the kernel table ------------------------------------------------------------------------ */

void cpu__kern_init(cpu__kern *k, int isa, unsigned features)
{
    memset(k, 0, sizeof *k);
    cpu__matmul_fill_scalar(k);
    cpu__attention_fill_scalar(k);
    cpu__ops_fill_scalar(k);
    cpu__quant_fill_scalar(k);
#if defined(__x86_64__)
    if (isa == CPU_ISA_AVX2 || isa == CPU_ISA_AVX512) {
        cpu__matmul_fill_avx2(k);
        cpu__gemm_fill_avx2(k);
        cpu__gemm_q8_fill_avx2(k);
        cpu__attention_fill_avx2(k);
        cpu__ops_fill_avx2(k);
        cpu__quant_fill_avx2(k);
    }
    if (isa == CPU_ISA_AVX512) {
        cpu__matmul_fill_avx512(k);
        cpu__gemm_fill_avx512(k);
        cpu__attention_fill_avx512(k);
        cpu__ops_fill_avx512(k);
        if (features & CPU_FEAT_VNNI) {
            cpu__gemm_q8_fill_vnni(k);
            cpu__quant_fill_vnni(k);
        }
    }
#elif defined(__aarch64__)
    if (isa == CPU_ISA_NEON) {
        cpu__matmul_fill_neon(k);
        cpu__gemm_fill_neon(k);
        cpu__attention_fill_neon(k);
        if (features & CPU_FEAT_DOTPROD) cpu__gemm_q8_fill_dotprod(k);
    }
#endif
    k->isa = isa;
    k->features = features;
}
