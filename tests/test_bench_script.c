/*
 * test_bench_script.c — runs the Python unit tests of scripts/bench_serving (metric arithmetic,
 * parsers, workloads, and a run against a fake streaming server on loopback) so that `make test`
 * covers the benchmark script. Skips when python3 is not installed.
 *
 * The repository root is the current directory when it holds the tests, else two levels above
 * KVSERVE_BIN (build/<dir>/kvserve).
 */
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TBS_TEST "tests/test_bench_metrics.py"

/* Writes the repository root into root (size n); 0 when found, -1 otherwise. */
static int tbs_find_root(char *root, size_t n)
{
    if (access(TBS_TEST, R_OK) == 0 && getcwd(root, n)) return 0;
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || !*bin) return -1;
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", bin);
    char *dir = dirname(dirname(buf)); /* build/<dir>/kvserve -> build */
    snprintf(root, n, "%s/..", dir);
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/%s", root, TBS_TEST);
    return access(probe, R_OK) == 0 ? 0 : -1;
}

Test(bench_script, python_unittests, .timeout = 300)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0) cr_skip_test("python3 is not installed");
    char root[PATH_MAX];
    if (tbs_find_root(root, sizeof root) != 0)
        cr_skip_test("cannot find " TBS_TEST " (run from the repository root or set KVSERVE_BIN)");
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && PYTHONDONTWRITEBYTECODE=1 timeout 240 python3 -m unittest discover "
             "-s tests -p test_bench_metrics.py 2>&1",
             root);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[512], tail[4096] = "";
    while (fgets(line, sizeof line, p)) {
        if (strlen(tail) + strlen(line) >= sizeof tail) tail[0] = '\0';
        strcat(tail, line);
    }
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "python3 -m unittest failed:\n%s", tail);
}
