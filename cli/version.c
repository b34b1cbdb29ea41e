/*
 * version.c — `kvserve --version`: the release, the commit the binary was built from and the
 * backends compiled in. The release and the commit come from base/version.c (see the Makefile).
 */
#include <stdio.h>
#include <string.h>

#include "base/version.h"
#include "cli/cli.h"
#include "cpu/cpu.h"

void cli_print_version(FILE *out)
{
    fprintf(out, "kvserve %s (commit %s)\n", version_string(), version_commit());
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
