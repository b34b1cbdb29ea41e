/*
 * test_bench_smoke.c — the serving benchmark against the real server: runs tests/bench_smoke.sh
 * (a handful of streamed requests through scripts/bench_serving to `kvserve serve` on loopback).
 * Skips when python3 or curl is missing or the kvserve binary is unknown.
 */
#include <criterion/criterion.h>
#include "tests/test_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Test(bench_smoke, against_kvserve_serve, .timeout = 240)
{
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || access(bin, X_OK) != 0) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    if (system("command -v python3 >/dev/null 2>&1 && command -v curl >/dev/null 2>&1") != 0)
        cr_skip_test("python3 or curl is not installed");
    if (access("tests/bench_smoke.sh", X_OK) != 0) cr_skip_test("run from the repository root");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 200 tests/bench_smoke.sh '%s' '%s' 2>&1", bin,
             tu_data_dir());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[512], out[8192] = "";
    while (fgets(line, sizeof line, p)) {
        if (strlen(out) + strlen(line) >= sizeof out) out[0] = '\0';
        strcat(out, line);
    }
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bench smoke failed:\n%s", out);
    cr_assert(strstr(out, "bench smoke: ok"), "%s", out);
}
