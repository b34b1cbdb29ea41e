/*
 * test_cpu_isa.c — the CPU backend's run-time SIMD dispatch (cpu/isa.c): level names, the
 * levels this machine supports, KVSERVE_CPU_ISA forcing a lower level (and refusing one the CPU
 * cannot run with a clear message), and proof that a backend at a forced level runs that
 * level's kernels: its table holds kernels of that level and none above, its description and
 * the start-up line of the real binary name it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/device.h"
#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "model/dtype.h"
#include "tests/test_util.h"

Test(cpu_isa, names_parse_and_support)
{
    for (int i = 0; i < CPU_ISA_COUNT; i++) cr_assert_eq(cpu_isa_parse(cpu_isa_name(i)), i);
    cr_assert_eq(cpu_isa_parse("avx9"), -EINVAL);
    cr_assert_eq(cpu_isa_parse(""), -EINVAL);
    cr_assert_eq(cpu_isa_parse(NULL), -EINVAL);
    cr_assert_str_eq(cpu_isa_name(42), "?");
    int best = cpu_isa_detect();
    cr_assert(cpu_isa_supported(CPU_ISA_SCALAR));
    cr_assert(cpu_isa_supported(best));
#if defined(__x86_64__)
    cr_assert(best == CPU_ISA_SCALAR || best == CPU_ISA_AVX2 || best == CPU_ISA_AVX512);
    cr_assert(!cpu_isa_supported(CPU_ISA_NEON));
    if (best == CPU_ISA_AVX512) cr_assert(cpu_isa_supported(CPU_ISA_AVX2), "AVX-512 CPUs run AVX2");
#elif defined(__aarch64__)
    cr_assert_eq(best, CPU_ISA_NEON);
    cr_assert(!cpu_isa_supported(CPU_ISA_AVX2) && !cpu_isa_supported(CPU_ISA_AVX512));
#endif
    printf("cpu_isa: this machine runs up to %s (features %#x)\n", cpu_isa_name(best), cpu_isa_features());
}

/* The highest level among the kernels of a table, and a check that none is above its level. */
static int ci_table_top(const cpu__kern *k)
{
    int top = k->attn_isa;
    cr_assert(k->attn_isa <= k->isa || k->isa == CPU_ISA_NEON);
    for (int t = 0; t < CPU__MM_TYPES; t++) {
        const cpu__mm_kern *m = &k->mm[t];
        if (!m->dot) continue;
        int parts[3] = {m->dot_isa, m->packed.run ? m->packed.isa : 0, m->plain.run ? m->plain.isa : 0};
        for (int i = 0; i < 3; i++) {
            /* x86 levels only stack on x86 ones; neon only on scalar */
            if (k->isa == CPU_ISA_NEON) cr_assert(parts[i] == CPU_ISA_SCALAR || parts[i] == CPU_ISA_NEON);
            else cr_assert(parts[i] <= k->isa, "type %s: a kernel of level %s in a %s table", dt_name(t),
                           cpu_isa_name(parts[i]), cpu_isa_name(k->isa));
            top = parts[i] > top ? parts[i] : top;
        }
    }
    return top;
}

Test(cpu_isa, every_level_runs_its_own_kernels)
{
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        backend *be = cpu_backend_create_isa(1, isa);
        if (!cpu_isa_supported(isa)) {
            cr_assert_null(be, "level %s is not supported here, yet a backend was made", cpu_isa_name(isa));
            continue;
        }
        cr_assert_not_null(be);
        const cpu__kern *k = &((cpu__backend *)be)->k;
        cr_assert_eq(k->isa, isa);
        cr_assert(strstr(be->desc, cpu_isa_name(isa)), "desc '%s' does not name %s", be->desc, cpu_isa_name(isa));
        cr_assert_eq(ci_table_top(k), isa, "a %s backend has no %s kernels", cpu_isa_name(isa), cpu_isa_name(isa));
        for (int t = 0; t < CPU__MM_TYPES; t++)
            if (dt_is_supported(t)) cr_assert_not_null(k->mm[t].dot, "no %s dot product", dt_name(t));
        cr_assert(k->quantise_q8 && k->kv_to_f32 && k->f32_to_kv && k->attn_chunk && k->sum_squares && k->silu_mul);
        be_destroy(be);
    }
}

Test(cpu_isa, env_forces_a_lower_level)
{
    char err[256];
    int isa = -1;
    for (int l = 0; l < CPU_ISA_COUNT; l++) {
        setenv("KVSERVE_CPU_ISA", cpu_isa_name(l), 1);
        err[0] = 0;
        int rc = cpu_isa_default(&isa, err, sizeof err);
        backend *be = cpu_backend_create(1);
        char berr[256] = "";
        backend *be2 = be_create("cpu", 1, berr, sizeof berr);
        if (cpu_isa_supported(l)) {
            cr_assert_eq(rc, 0);
            cr_assert_eq(isa, l);
            cr_assert_not_null(be);
            cr_assert_eq(((cpu__backend *)be)->k.isa, l, "KVSERVE_CPU_ISA=%s gave %s", cpu_isa_name(l),
                         cpu_isa_name(((cpu__backend *)be)->k.isa));
            cr_assert_not_null(be2, "%s", berr);
            cr_assert_eq(((cpu__backend *)be2)->k.isa, l);
        } else {
            cr_assert_eq(rc, -EINVAL);
            cr_assert(strstr(err, "KVSERVE_CPU_ISA") && strstr(err, "cannot run"), "message: %s", err);
            cr_assert_null(be);
            cr_assert_null(be2);
            cr_assert(strstr(berr, "KVSERVE_CPU_ISA"), "be_create message: %s", berr);
        }
        be_destroy(be);
        be_destroy(be2);
    }
    setenv("KVSERVE_CPU_ISA", "sse9", 1);
    cr_assert_eq(cpu_isa_default(&isa, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "unknown level"), "message: %s", err);
    cr_assert_null(cpu_backend_create(1));
    unsetenv("KVSERVE_CPU_ISA");
    cr_assert_eq(cpu_isa_default(&isa, err, sizeof err), 0);
    cr_assert_eq(isa, cpu_isa_detect());
}

/* The real binary: `kvserve generate -v` names the forced level in its backend line, and a
 * level the CPU cannot run is one line naming the problem and a non-zero exit. */
Test(cpu_isa, binary_names_the_forced_level)
{
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || access(bin, X_OK)) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    mkm_params p;
    mkm_params_default(&p);
    p.dim = 64, p.layers = 1, p.heads = 4, p.kv_heads = 2, p.ffn = 96, p.vocab = 300, p.context = 64;
    char mpath[512], out[600], cmd[2048];
    tu_write_mkmodel(&p, "isa", mpath, sizeof mpath);
    snprintf(out, sizeof out, "%s.err", mpath);
    for (int l = 0; l < CPU_ISA_COUNT; l++) {
        snprintf(cmd, sizeof cmd,
                 "KVSERVE_CPU_ISA=%s '%s' generate -m '%s' -p '' -n 2 -t 1 --device cpu -v >/dev/null 2>'%s'",
                 cpu_isa_name(l), bin, mpath, out);
        int st = system(cmd);
        char *err = tu_read_file(out, NULL);
        cr_assert_not_null(err);
        if (cpu_isa_supported(l)) {
            char want[64];
            snprintf(want, sizeof want, "CPU, 1 thread, %s", cpu_isa_name(l));
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d: %s", st, err);
            cr_assert(strstr(err, want), "no '%s' in: %s", want, err);
        } else {
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "level %s ran: %s", cpu_isa_name(l), err);
            cr_assert(strstr(err, "KVSERVE_CPU_ISA"), "message: %s", err);
        }
        free(err);
    }
    unlink(out);
    unlink(mpath);
}

#if defined(__x86_64__)
/* One binary for every x86-64 CPU, shown on CPUs this machine is not. Under qemu-x86_64 the real
 * binary takes its level from the emulated cpuid: Nehalem (SSE4.2, no AVX) must give scalar and
 * Haswell (AVX2, FMA and F16C, no AVX-512) avx2. Each generates greedily from a prompt (a
 * multi-row prefill, then single-row decode steps) on a Q8_0 model with one KV head per head
 * and an F16 one with grouped heads, and must print exactly the token ids the native binary
 * prints with that level forced: the same kernels summing in the same order, and qemu's
 * arithmetic is IEEE's. qemu has no AVX-512 at all, so on the Haswell model an AVX-512
 * instruction anywhere in the binary, in a kernel or in common code built for a higher level,
 * ends the run with SIGILL. */
Test(cpu_isa, emulated_cpus_detect_and_run_their_level, .timeout = 300)
{
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || access(bin, X_OK)) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    int st = system("command -v qemu-x86_64 >/dev/null 2>&1");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        cr_skip_test("qemu-x86_64 is not installed (scripts/deps.sh installs qemu-user)");
    static const struct {
        const char *cpu;
        int isa;
    } cpus[] = {{"Nehalem", CPU_ISA_SCALAR}, {"Haswell", CPU_ISA_AVX2}};
    mkm_params p[2];
    for (int m = 0; m < 2; m++) {
        mkm_params_default(&p[m]);
        p[m].dim = 128, p[m].layers = 2, p[m].ffn = 256, p[m].vocab = 400, p[m].context = 256;
        p[m].seed = 77 + m;
    }
    p[0].type = DT_Q8_0, p[0].heads = 2, p[0].kv_heads = 2; /* head size 64: the decode fast path */
    p[1].type = DT_F16, p[1].heads = 4, p[1].kv_heads = 2;  /* grouped heads of 32 */
    const char *prompt = "the quick brown fox jumps over the lazy dog, and the dog sleeps on";
    char mpath[2][512], errf[600], cmd[4096];
    for (int m = 0; m < 2; m++) tu_write_mkmodel(&p[m], "isa-emu", mpath[m], sizeof mpath[m]);
    snprintf(errf, sizeof errf, "%s.err", mpath[0]);
    int compared = 0;
    for (size_t c = 0; c < sizeof cpus / sizeof cpus[0]; c++)
        for (int m = 0; m < 2; m++) {
            const char *args = "-n 12 --ignore-eos --temperature 0 --ids -t 2 --device cpu";
            snprintf(cmd, sizeof cmd, "env -u KVSERVE_CPU_ISA qemu-x86_64 -cpu %s '%s' generate -m '%s' -p '%s' %s -v 2>'%s'",
                     cpus[c].cpu, bin, mpath[m], prompt, args, errf);
            char *emu = tu_capture(cmd, &st);
            char *err = tu_read_file(errf, NULL);
            cr_assert_not_null(err);
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "qemu -cpu %s: status %#x (132: SIGILL): %s", cpus[c].cpu,
                      st, err);
            char want[64];
            snprintf(want, sizeof want, "CPU, 2 threads, %s", cpu_isa_name(cpus[c].isa));
            cr_assert(strstr(err, want), "qemu -cpu %s: no '%s' in: %s", cpus[c].cpu, want, err);
            cr_assert(strlen(emu) > 12, "qemu -cpu %s printed no ids: '%s'", cpus[c].cpu, emu);
            if (cpu_isa_supported(cpus[c].isa)) {
                snprintf(cmd, sizeof cmd, "KVSERVE_CPU_ISA=%s '%s' generate -m '%s' -p '%s' %s 2>/dev/null",
                         cpu_isa_name(cpus[c].isa), bin, mpath[m], prompt, args);
                char *nat = tu_capture(cmd, &st);
                cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                cr_assert_str_eq(emu, nat, "%s model at %s: qemu -cpu %s gave %s, the native run %s", dt_name(p[m].type),
                                 cpu_isa_name(cpus[c].isa), cpus[c].cpu, emu, nat);
                compared++;
                free(nat);
            }
            free(emu);
            free(err);
        }
    printf("cpu_isa: scalar under qemu -cpu Nehalem and avx2 under -cpu Haswell detected; %d runs equal to native\n",
           compared);
    unlink(errf);
    for (int m = 0; m < 2; m++) unlink(mpath[m]);
}
#endif
