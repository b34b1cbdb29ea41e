/*
 * version.c — `kvserve --version`: the release, the commit the binary was built from and the
 * backends compiled in. The Makefile passes KVSERVE_VERSION and KVSERVE_COMMIT to this file alone
 * (rebuilt when the commit changes); a build from a tarball without .git says "unknown".
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cpu/cpu.h"

#ifndef KVSERVE_VERSION
#define KVSERVE_VERSION "0.0.0"
#endif
#ifndef KVSERVE_COMMIT
#define KVSERVE_COMMIT "unknown"
#endif

const char *cli_version(void)
{
    return KVSERVE_VERSION;
}

const char *cli_commit(void)
{
    return KVSERVE_COMMIT;
}

void cli_print_version(FILE *out)
{
    fprintf(out, "kvserve %s (commit %s)\n", KVSERVE_VERSION, KVSERVE_COMMIT);
    /* The CPU backend's SIMD levels of this architecture, and the one this machine runs. */
    char levels[128] = "";
    for (int i = 0; i < CPU_ISA_COUNT; i++) {
        const char *n = cpu_isa_name(i);
#if defined(__x86_64__) || defined(__i386__)
        if (i == CPU_ISA_NEON) continue;
#elif defined(__aarch64__)
        if (i == CPU_ISA_AVX2 || i == CPU_ISA_AVX512) continue;
#else
        if (i != CPU_ISA_SCALAR) continue;
#endif
        snprintf(levels + strlen(levels), sizeof levels - strlen(levels), "%s%s", *levels ? ", " : "", n);
    }
    unsigned f = cpu_isa_features();
    fprintf(out, "backends: cpu (%s; this machine: %s%s%s%s)", levels, cpu_isa_name(cpu_isa_detect()),
            f & CPU_FEAT_VNNI ? "+vnni" : "", f & CPU_FEAT_BF16 ? "+bf16" : "", f & CPU_FEAT_DOTPROD ? "+dotprod" : "");
#ifdef KVSERVE_CUDA
    fprintf(out, ", cuda (cuBLAS loaded at run time)");
#endif
    fprintf(out, "\n");
}
