/*
 * test_ops.c — operations: the systemd watchdog (server/watchdog.c), the model path checks
 * (model/gguf.c) and signals during start-up (server/server.c), and `kvserve generate`'s
 * sampling ranges.
 *
 * The watchdog's decision alone (loading, alive and fresh, stale, failed), then a server under
 * a fake NOTIFY_SOCKET: READY=1, then WATCHDOG=1 every WATCHDOG_USEC / 2, and none when
 * WATCHDOG_PID names another process. A FIFO as the model (it used to hang in "loading"
 * forever), a directory and a character device are refused at once with one line; SIGTERM
 * right after start-up exits promptly.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/internal.h"
#include "tests/server_harness.h"
#include "tests/test_util.h"

Test(ops, watchdog_decision)
{
    engine_stats st;
    memset(&st, 0, sizeof st);
    int64_t now = 10 * 1000000LL, usec = 2 * 1000000LL;
    cr_assert_eq(srv__watchdog_ok(NULL, now, usec), 1, "loading: the loop itself answers");
    st.alive = 1;
    st.heartbeat_us = now - usec / 4;
    cr_assert_eq(srv__watchdog_ok(&st, now, usec), 1);
    st.heartbeat_us = now - usec - 1;
    cr_assert_eq(srv__watchdog_ok(&st, now, usec), 0, "a step stuck for a whole period stops the pings");
    int64_t short_usec = ENGINE_HEARTBEAT_MS * 1000LL; /* shorter than idle beats */
    st.heartbeat_us = now - 2 * short_usec;
    cr_assert_eq(srv__watchdog_ok(&st, now, short_usec), 1, "an idle engine between two beats is alive");
    st.heartbeat_us = now - 5 * short_usec;
    cr_assert_eq(srv__watchdog_ok(&st, now, short_usec), 0);
    st.heartbeat_us = now;
    st.alive = 0;
    cr_assert_eq(srv__watchdog_ok(&st, now, usec), 0, "a failed engine stops them");
    setenv("WATCHDOG_USEC", "500000", 1);
    unsetenv("WATCHDOG_PID");
    cr_assert_eq(srv__watchdog_usec(), 500000);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    cr_assert_eq(srv__watchdog_usec(), 500000);
    setenv("WATCHDOG_PID", "1", 1);
    cr_assert_eq(srv__watchdog_usec(), 0, "meant for another process");
    setenv("WATCHDOG_USEC", "x", 1);
    unsetenv("WATCHDOG_PID");
    cr_assert_eq(srv__watchdog_usec(), 0);
    unsetenv("WATCHDOG_USEC");
    cr_assert_eq(srv__watchdog_usec(), 0);
}

/* A datagram socket standing in for systemd's NOTIFY_SOCKET. */
static int to_notify_socket(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof a.sun_path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    unlink(path);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind %s: %s", path, strerror(errno));
    return fd;
}

/* Counts the datagrams holding what during ms milliseconds (READY=1 seen sets *ready). */
static int to_count(int fd, const char *what, int ms, int *ready)
{
    int n = 0;
    for (int64_t deadline = th_now_ms() + ms; th_now_ms() < deadline;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(deadline - th_now_ms())) <= 0) continue;
        char buf[512];
        ssize_t k = recv(fd, buf, sizeof buf - 1, 0);
        if (k <= 0) continue;
        buf[k] = 0;
        if (strstr(buf, "READY=1")) *ready = 1;
        if (strstr(buf, what)) n++;
    }
    return n;
}

Test(ops, watchdog_pings, .timeout = 60)
{
    char dir[] = "/tmp/kvserve-wd-XXXXXX", path[128];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/notify", dir);
    int fd = to_notify_socket(path);
    char env_sock[200];
    snprintf(env_sock, sizeof env_sock, "NOTIFY_SOCKET=%s", path);
    const char *env[] = {env_sock, "WATCHDOG_USEC=200000", NULL};
    th_server s;
    th_start(&s, NULL, NULL, env, TH_WAIT_HEALTHY);
    int ready = 0;
    int pings = to_count(fd, "WATCHDOG=1", 1000, &ready);
    cr_assert(ready, "READY=1 first");
    cr_assert_geq(pings, 5, "WATCHDOG=1 every 100 ms for 200 ms: %d in a second", pings);
    cr_assert_leq(pings, 15, "%d pings in a second", pings);
    th_stop(&s);
    const char *env_other[] = {env_sock, "WATCHDOG_USEC=200000", "WATCHDOG_PID=1", NULL};
    th_start(&s, NULL, NULL, env_other, TH_WAIT_HEALTHY);
    ready = 0;
    cr_assert_eq(to_count(fd, "WATCHDOG=1", 600, &ready), 0, "WATCHDOG_PID is another process");
    th_stop(&s);
    close(fd);
    unlink(path);
    rmdir(dir);
}

/* `kvserve serve -m PATH` must exit non-zero within seconds, saying what PATH is. */
static void to_refused(const char *path, const char *says)
{
    th_server s;
    th_start(&s, path, NULL, NULL, TH_WAIT_NONE);
    int st = -1;
    int64_t deadline = th_now_ms() + 5000;
    while (th_now_ms() < deadline && waitpid(s.pid, &st, WNOHANG) != s.pid) usleep(10000);
    int exited = th_now_ms() < deadline;
    if (!exited) kill(s.pid, SIGKILL), waitpid(s.pid, NULL, 0);
    s.pid = 0;
    char *log = th_log(&s);
    th_stop(&s);
    cr_assert(exited, "%s: still loading after 5 s:\n%s", path, log ? log : "");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: exit status %d", path, st);
    cr_assert(log && strstr(log, says), "%s: the log should say '%s':\n%s", path, says, log ? log : "");
    free(log);
}

Test(ops, model_path_must_be_a_file, .timeout = 60)
{
    char dir[] = "/tmp/kvserve-mp-XXXXXX", fifo[128];
    cr_assert(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    to_refused(fifo, "a FIFO");
    unlink(fifo);
    to_refused(dir, "a directory");
    to_refused("/dev/null", "a character device");
    rmdir(dir);
}

/* SIGTERM as soon as the port is open (the model may still be loading): a prompt exit 0. */
Test(ops, sigterm_at_start_up_exits_promptly, .timeout = 60)
{
    th_server s;
    th_start(&s, NULL, NULL, NULL, TH_WAIT_PORT);
    int st = th_signal_wait(&s, SIGTERM, 3000);
    char *log = th_log(&s);
    cr_assert(st != -1, "still running 3 s after SIGTERM:\n%s", log ? log : "");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d:\n%s", st, log ? log : "");
    printf("ops/sigterm_at_start_up: %s\n", log && strstr(log, "during start-up") ? "landed while loading" : "landed after loading");
    free(log);
    th_stop(&s);
}

/* generate refuses sampling values outside their ranges instead of using them. */
Test(ops, generate_sampling_ranges)
{
    static const char *const bad[] = {"--temperature -1", "--temperature nan", "--top-p 0", "--top-p 1.5",
                                      "--top-k -2", "--min-p 2", "-n -3"};
    char mpath[512], cmd[1024];
    snprintf(mpath, sizeof mpath, "%s/stories260K.gguf", tu_data_dir());
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p hi %s >/dev/null 2>&1", th_bin(), mpath, bad[i]);
        int st = system(cmd);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: exit %d", bad[i], st);
    }
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p hi -n 2 --temperature 0 >/dev/null 2>&1", th_bin(), mpath);
    cr_assert_eq(system(cmd), 0);
}
