/*
 * server_harness.c — a kvserve server child and its clients for end-to-end tests (see
 * server_harness.h).
 */
#include "tests/server_harness.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/test_util.h"

const char *th_bin(void)
{
    const char *b = getenv("KVSERVE_BIN");
    return b && *b ? b : "build/kvserve";
}

int64_t th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static int th_port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

int th_env_args(const char **argv, int n, int max)
{
    static char extra[512];
    const char *x = getenv("KVSERVE_TEST_SERVE_ARGS");
    snprintf(extra, sizeof extra, "%s", x ? x : "");
    for (char *sp = NULL, *w = strtok_r(extra, " \t", &sp); w && n < max; w = strtok_r(NULL, " \t", &sp))
        argv[n++] = w;
    return n;
}

void th_start(th_server *t, const char *model, const char *const *args, const char *const *env,
              int wait)
{
    memset(t, 0, sizeof *t);
    struct stat st;
    if (stat(th_bin(), &st)) cr_skip_test("kvserve binary not found (set KVSERVE_BIN)");
    snprintf(t->dir, sizeof t->dir, "%s/kvserve-th-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    cr_assert(mkdtemp(t->dir));
    snprintf(t->log, sizeof t->log, "%s/server.log", t->dir);
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/stories260K.gguf", tu_data_dir());
    t->port = th_free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", t->port);
    const char *argv[64] = {th_bin(), "serve", "-m", model ? model : mpath, "--port", port, "--threads", "1"};
    int n = 8;
    for (int i = 0; args && args[i] && n < 62; i++) argv[n++] = args[i];
    n = th_env_args(argv, n, 63);
    argv[n] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(t->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    t->pid = pid;
    if (wait == TH_WAIT_NONE) return;
    int64_t deadline = th_now_ms() + 15000;
    for (;;) {
        if (wait == TH_WAIT_HEALTHY) {
            th_resp r = th_http(t->port, NULL, "/health", NULL, NULL);
            long code = r.status;
            th_resp_free(&r);
            if (code == 200) return;
        } else if (th_port_open(t->port)) {
            return;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            t->pid = 0;
            char *log = th_log(t);
            cr_assert_fail("server exited during start-up:\n%s", log ? log : "");
        }
        cr_assert(th_now_ms() < deadline, "server not up within 15 s");
        usleep(20000);
    }
}

void th_stop(th_server *t)
{
    if (t->pid) {
        kill(t->pid, SIGKILL);
        waitpid(t->pid, NULL, 0);
        t->pid = 0;
    }
    if (t->dir[0]) {
        unlink(t->log);
        rmdir(t->dir);
        t->dir[0] = 0;
    }
}

int th_signal_wait(th_server *t, int sig, int ms)
{
    if (!t->pid) return -1;
    kill(t->pid, sig);
    int64_t deadline = th_now_ms() + ms;
    while (th_now_ms() < deadline) {
        int status;
        if (waitpid(t->pid, &status, WNOHANG) == t->pid) {
            t->pid = 0;
            return status;
        }
        usleep(5000);
    }
    return -1;
}

char *th_log(const th_server *t)
{
    return tu_read_file(t->log, NULL);
}

th_resp th_raw(int port, const char *data, size_t n, int shut_wr, int wait_ms)
{
    th_resp r = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    int64_t t0 = th_now_ms();
    for (size_t off = 0; off < n;) { /* the server may answer and close before all is sent */
        ssize_t k = send(fd, data + off, n - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += (size_t)k;
    }
    if (shut_wr) shutdown(fd, SHUT_WR);
    size_t cap = 4096;
    r.raw = malloc(cap);
    int64_t deadline = th_now_ms() + wait_ms;
    for (;;) {
        int left = (int)(deadline - th_now_ms());
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0) break;
        if (r.raw_len + 4096 > cap) r.raw = realloc(r.raw, cap *= 2);
        ssize_t k = recv(fd, r.raw + r.raw_len, cap - r.raw_len - 1, 0);
        if (k <= 0) {
            r.closed = 1;
            break;
        }
        if (!r.raw_len) r.ms = th_now_ms() - t0;
        r.raw_len += (size_t)k;
    }
    r.raw[r.raw_len] = 0;
    close(fd);
    if (!strncmp(r.raw, "HTTP/1.", 7) && r.raw_len > 12) r.status = atol(r.raw + 9);
    char *b = strstr(r.raw, "\r\n\r\n");
    r.body = strdup(b ? b + 4 : "");
    return r;
}

size_t th_curl_write(char *p, size_t sz, size_t nm, void *ud)
{
    th_buf *b = ud;
    size_t n = sz * nm;
    b->s = realloc(b->s, b->n + n + 1);
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
    if (b->first && b->n >= 5 && strstr(b->s, "data:")) atomic_store(b->first, 1);
    return n;
}

th_resp th_http(int port, const char *method, const char *path, const char *body, const char *extra)
{
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    th_buf b = {0}, h = {0};
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    for (const char *p = extra; p && *p;) { /* header lines separated by CRLF */
        const char *e = strstr(p, "\r\n");
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)n, p);
        hl = curl_slist_append(hl, line);
        p = e ? e + 2 : p + n;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_curl_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, th_curl_write);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    if (method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    th_resp r = {0};
    int64_t t0 = th_now_ms();
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    r.ms = th_now_ms() - t0;
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    r.body = b.s ? b.s : strdup("");
    r.headers = h.s ? h.s : strdup("");
    return r;
}

void th_resp_free(th_resp *r)
{
    free(r->raw);
    free(r->body);
    free(r->headers);
    memset(r, 0, sizeof *r);
}

int th_count_status_lines(const char *raw)
{
    int n = 0;
    for (const char *p = raw; (p = strstr(p, "HTTP/1.")); p += 7)
        if (p[8] == ' ' && p[9] >= '1' && p[9] <= '5') n++;
    return n;
}
