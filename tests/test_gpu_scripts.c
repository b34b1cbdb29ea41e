/*
 * test_gpu_scripts.c — the parts of the GPU run that need no GPU, so that the one prepared run on
 * a GPU machine does not fail on a script error:
 *   - `scripts/gpu-check.sh --prepare` lays out the golden model and ids, the kvserve binary and
 *     every library it loads beyond the C library's own, and the binary starts with only those
 *     (LD_LIBRARY_PATH set to the copies);
 *   - `scripts/gpu-serve.sh` (the serving table of --serve) runs its whole pipeline — mkmodel,
 *     generate, the engine bench, serve + scripts/bench_serving at two concurrencies — on the CPU
 *     with tiny models (KVSERVE_SERVE_SMOKE=1), and writes its table.
 * Skips when the kvserve binary or python3 is missing. The repository root is the current
 * directory when it holds the scripts, else two levels above KVSERVE_BIN.
 */
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_util.h"

#define TGS_SCRIPT "scripts/gpu-check.sh"

/* The repository root into root; 0, or -1 when not found. */
static int tgs_root(char *root, size_t n)
{
    if (access(TGS_SCRIPT, X_OK) == 0 && getcwd(root, n)) return 0;
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || !*bin) return -1;
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", bin);
    snprintf(root, n, "%s/..", dirname(dirname(buf)));
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/%s", root, TGS_SCRIPT);
    return access(probe, X_OK) == 0 ? 0 : -1;
}

/* The root, the binary and a fresh temporary directory, or the test skips. */
static void tgs_setup(char *root, size_t n, const char **bin, char *tmp)
{
    *bin = getenv("KVSERVE_BIN");
    if (!*bin || access(*bin, X_OK)) cr_skip_test("KVSERVE_BIN not set or not executable");
    if (system("command -v python3 >/dev/null 2>&1") != 0) cr_skip_test("python3 is not installed");
    if (tgs_root(root, n)) cr_skip_test("cannot find " TGS_SCRIPT);
    strcpy(tmp, "/tmp/kvserve_gpu_scripts_XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
}

Test(gpu_scripts, prepare_lays_out_binary_and_libraries, .timeout = 120)
{
    char root[PATH_MAX], tmp[64], cmd[4 * PATH_MAX];
    const char *bin;
    tgs_setup(root, sizeof root, &bin, tmp);
    snprintf(cmd, sizeof cmd, "cd '%s' && GPU_DIR='%s/g' KVSERVE_BIN='%s' " TGS_SCRIPT " --prepare '%s' 2>&1", root,
             tmp, bin, tu_data_dir());
    int st = 0;
    char *out = tu_capture(cmd, &st);
    cr_assert_eq(st, 0, "--prepare failed:\n%s", out);
    free(out);
    char path[PATH_MAX];
    const char *files[] = {"stories260K.gguf", "stories260K.golden.txt", "kvserve"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/g/%s", tmp, files[i]);
        cr_assert_eq(access(path, R_OK), 0, "%s is missing", path);
    }
    /* one line per golden case: name, flags, prompt and ids */
    snprintf(path, sizeof path, "%s/g/stories260K.golden.txt", tmp);
    char *golden = tu_read_file(path, NULL);
    int lines = 0;
    for (char *p = golden; p && *p; p++) lines += *p == '\n';
    cr_assert_geq(lines, 10, "%d golden cases", lines);
    free(golden);
    /* every library the binary needs resolves to the copies or to the C library's own */
    snprintf(cmd, sizeof cmd,
             "LD_LIBRARY_PATH='%s/g/lib' ldd '%s/g/kvserve' | awk '$2 == \"=>\"' | "
             "grep -v -e '%s/g/lib/' -e 'libc.so' -e 'libm.so' -e 'libpthread.so' -e 'libdl.so' -e 'librt.so' "
             "-e 'libresolv.so' -e 'libutil.so'",
             tmp, tmp, tmp);
    out = tu_capture(cmd, &st);
    cr_assert_str_eq(out, "", "libraries not laid out:\n%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH='%s/g/lib' '%s/g/kvserve' --help >/dev/null 2>&1", tmp, tmp);
    cr_assert_eq(system(cmd), 0, "the laid-out binary does not start");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_assert_eq(system(cmd), 0);
}

Test(gpu_scripts, serving_table_pipeline_on_the_cpu, .timeout = 240)
{
    char root[PATH_MAX], tmp[64], cmd[4 * PATH_MAX];
    const char *bin;
    tgs_setup(root, sizeof root, &bin, tmp);
    int port = 20000 + (int)(getpid() % 20000);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && KVSERVE_SERVE_SMOKE=1 KVSERVE_BIN='%s' PORT=%d timeout 200 scripts/gpu-serve.sh '%s/out' 2>&1",
             root, bin, port, tmp);
    int st = 0;
    char *out = tu_capture(cmd, &st);
    cr_assert_eq(st, 0, "gpu-serve.sh failed:\n%s", out);
    free(out);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/out/serving.md", tmp);
    char *md = tu_read_file(path, NULL);
    cr_assert_not_null(md, "no table written");
    const char *rows[] = {"generate bf16, 1 sequence", "generate q8_0, 1 sequence", "engine bench bf16",
                          "serve bf16, 1 streams", "serve bf16, 4 streams", "tok/s",
                          "engine steps, 4 streams, overlap on", "engine steps, 4 streams, overlap off",
                          "ms per step schedule:", "engine budget 32 tokens, 4 streams"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) cr_assert(strstr(md, rows[i]), "no '%s' in\n%s", rows[i], md);
    cr_assert(!strstr(md, "FAILED"), "%s", md);
    free(md);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_assert_eq(system(cmd), 0);
}
