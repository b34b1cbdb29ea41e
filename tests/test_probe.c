/*
 * test_probe.c — tests/probe.py --short against the built server: broken model files, mutated
 * JSON, HTTP framing abuse, disconnect storms, overload, slow and idle clients, HTTP edge cases
 * (half-close, pipelining, absolute form, trailing data, SIGHUP), an exploding grammar, FIFOs and
 * directories in the KV disk tier, the model file replaced under the server, what a new user tries
 * (echo offsets, tool_choice "required", KV usage once idle), and a drain, then no leaked request
 * or KV block (see probe.py). Skips when python3 is missing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/server_harness.h"
#include "tests/test_util.h"

Test(probe, short_run, .timeout = 240)
{
    if (access(th_bin(), X_OK)) cr_skip_test("kvserve binary not found (set KVSERVE_BIN)");
    if (system("command -v python3 >/dev/null 2>&1")) cr_skip_test("python3 is not installed");
    if (access("tests/probe.py", R_OK)) cr_skip_test("run from the repository root");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 200 python3 tests/probe.py '%s' '%s/stories260K.gguf' --short 2>&1", th_bin(),
             tu_data_dir());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char out[65536];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "probe failed:\n%s", out);
    cr_assert(strstr(out, "probe: ok"), "%s", out);
    printf("%s", strstr(out, "probe: ok"));
}
