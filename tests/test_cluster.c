/*
 * test_cluster.c — scale-out end to end: runs tests/cluster_e2e.py, which starts 1 and then 3
 * kvserve replicas behind HAProxy with scripts/cluster (config/haproxy.cfg) on loopback and
 * drives them with scripts/bench_serving: prefix-cache affinity against a single replica and
 * round-robin, a replica drained with SIGTERM mid-run, a replica killed with SIGKILL mid-run.
 * Skips when haproxy or python3 is missing (scripts/deps.sh installs both) or the kvserve binary
 * is unknown. The script prints its measurements; they are shown when the test fails.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Test(cluster, haproxy_affinity_drain_crash, .timeout = 240)
{
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || access(bin, X_OK) != 0) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    if (system("command -v haproxy >/dev/null 2>&1") != 0)
        cr_skip_test("haproxy is not installed (Debian package haproxy; scripts/deps.sh installs it)");
    if (system("command -v python3 >/dev/null 2>&1") != 0) cr_skip_test("python3 is not installed");
    if (access("tests/cluster_e2e.py", R_OK) != 0) cr_skip_test("run from the repository root");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 200 python3 tests/cluster_e2e.py '%s' 2>&1", bin);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[1024], out[16384] = "";
    while (fgets(line, sizeof line, p)) {
        if (strlen(out) + strlen(line) >= sizeof out) out[0] = '\0';
        strcat(out, line);
    }
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cluster e2e failed:\n%s", out);
    cr_assert(strstr(out, "cluster e2e: ok"), "%s", out);
}
