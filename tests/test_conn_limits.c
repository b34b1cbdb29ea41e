/*
 * test_conn_limits.c — slow and idle clients against a spawned server (server/http/gate.c's
 * limits): thousands of half-sent heads must not keep /health or /metrics out; a head or body that
 * does not arrive in time gets 408 and the connection closes; an idle keep-alive connection
 * closes; a client address past its cap loses its own oldest idle connections, not others their
 * service; and with every connection busy the reserve still answers /health (and only that).
 * Before the limits, half-sent heads stayed open for 600 s and about 4,000 of them made every new
 * request, /health included, a 503.
 *
 * Loopback only (the per-address cases use source addresses 127.0.0.x, all routed to lo); the
 * number of connections is sized to the open-file limit (the test holds one descriptor per
 * connection, the server one per connection that has not finished its head).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/server_harness.h"
#include "tests/test_util.h"

/* The open-file limit raised to its hard value; returns it. */
static long cl_nofile(void)
{
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    return rl.rlim_cur == RLIM_INFINITY ? 1 << 20 : (long)rl.rlim_cur;
}

/* A non-blocking connection to port from 127.0.0.src (src ≥ 1), or -1. */
static int cl_connect(int port, int src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)src)};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if ((src != 1 && bind(fd, (struct sockaddr *)&me, sizeof me)) ||
        (connect(fd, (struct sockaddr *)&to, sizeof to) && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends all of s on a (possibly still connecting) non-blocking socket within ms; 0 or -1. */
static int cl_send(int fd, const char *s, int ms)
{
    size_t n = strlen(s), off = 0;
    int64_t end = th_now_ms() + ms;
    while (off < n) {
        ssize_t k = send(fd, s + off, n - off, MSG_NOSIGNAL);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != ENOTCONN) return -1;
        if (th_now_ms() >= end) return -1;
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, 20);
    }
    return 0;
}

/* 1 when the server closed fd (EOF or reset) within ms; what it sent before goes to buf. */
static int cl_closed_within(int fd, int ms, char *buf, size_t cap)
{
    size_t got = 0;
    int64_t end = th_now_ms() + ms;
    while (th_now_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(end - th_now_ms())) <= 0) continue;
        char tmp[4096];
        ssize_t k = recv(fd, tmp, sizeof tmp, 0);
        if (k == 0 || (k < 0 && errno != EAGAIN)) {
            if (buf) buf[got < cap ? got : cap - 1] = 0;
            return 1;
        }
        if (k > 0 && buf && got + 1 < cap) {
            size_t take = (size_t)k < cap - 1 - got ? (size_t)k : cap - 1 - got;
            memcpy(buf + got, tmp, take);
            got += take;
        }
    }
    if (buf) buf[got < cap ? got : cap - 1] = 0;
    return 0;
}

/* The value of a metric sample whose line starts with name, or -1. */
static double cl_metric(int port, const char *name)
{
    th_resp r = th_http(port, NULL, "/metrics", NULL, NULL);
    double v = -1;
    for (const char *p = r.body; p && (p = strstr(p, name)); p++) {
        if (p != r.body && p[-1] != '\n') continue;
        const char *sp = strchr(p, ' ');
        if (sp && sscanf(sp, " %lf", &v) == 1) break;
    }
    th_resp_free(&r);
    return v;
}

static int cl_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* /health latency over n probes (each a new connection): median and max in *med, *max. */
static void cl_health_latency(int port, int n, int64_t *med, int64_t *max)
{
    int64_t v[64];
    for (int i = 0; i < n; i++) {
        int64_t t0 = th_now_ms();
        th_resp r = th_http(port, NULL, "/health", NULL, NULL);
        v[i] = th_now_ms() - t0;
        cr_assert_eq(r.status, 200, "/health answered %ld among the slow connections: %s", r.status, r.body ? r.body : "");
        th_resp_free(&r);
    }
    qsort(v, (size_t)n, sizeof *v, cl_cmp);
    *med = v[n / 2];
    *max = v[n - 1];
}

#define CL_SLOW_HEAD "GET /health HTTP/1.1\r\nHost: x\r\nX-a: "

/* 4,000 connections (fewer when the open-file limit is lower, with the server's connection limit
 * lowered to match, so that it is reached all the same) each holding a half-sent head from 16
 * addresses, within each address's cap: the server holds them all, and /health and /metrics,
 * on new connections, answer in well under 50 ms (median; the maximum is bounded generously for
 * a loaded machine). Then 1,000 more from one address, past its cap: that address's oldest go,
 * nothing else does, and /health still answers. */
Test(conn_limits, health_answers_among_thousands_of_slow_connections, .timeout = 240)
{
    long nofile = cl_nofile();
    int n = 4000;
    char max_conns[16] = "5000"; /* room for the 4,000 and one address's 256 more below */
    if (nofile - 900 < n) { /* the server too holds one descriptor per waiting connection */
        n = (int)(nofile - 900);
        cr_assert_gt(n, 100, "the open-file limit (%ld) is too low for this test", nofile);
        snprintf(max_conns, sizeof max_conns, "%d", n + 300);
        printf("conn_limits: %d slow connections (open-file limit %ld), --http-max-connections %s\n", n, nofile, max_conns);
    }
    static const char *args[] = {"--http-header-timeout", "120", "--http-max-connections", NULL, NULL};
    args[3] = max_conns;
    th_server s;
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    int *fds = malloc(sizeof *fds * (size_t)(n + 1000));
    cr_assert_not_null(fds);
    int per = (n + 15) / 16;
    cr_assert_leq(per, 256, "within each address's cap");
    for (int i = 0; i < n; i++) {
        fds[i] = cl_connect(s.port, 2 + i / per);
        cr_assert_geq(fds[i], 0, "connect %d: %s", i, strerror(errno));
        cr_assert_eq(cl_send(fds[i], CL_SLOW_HEAD, 10000), 0, "send %d", i);
    }
    int64_t t0 = th_now_ms();
    while (cl_metric(s.port, "kvserve_http_connections{") < n) /* every one accepted and counted */
        cr_assert_lt(th_now_ms() - t0, 30000, "the server holds %.0f of %d connections",
                     cl_metric(s.port, "kvserve_http_connections{"), n);
    int64_t med, max;
    cl_health_latency(s.port, 21, &med, &max);
    printf("conn_limits: /health among %d slow connections: median %lld ms, max %lld ms\n", n, (long long)med,
           (long long)max);
    cr_assert_lt(med, 50, "/health median %lld ms", (long long)med);
    cr_assert_lt(max, 1000, "/health max %lld ms", (long long)max);
    th_resp r = th_http(s.port, NULL, "/metrics", NULL, NULL);
    cr_assert_eq(r.status, 200);
    th_resp_free(&r);
    cr_assert_eq(cl_metric(s.port, "kvserve_http_connections_evicted_total{"), 0, "nobody was past a limit");

    /* One address past its cap (256): it loses its own oldest connections. */
    int extra = 1000;
    for (int i = 0; i < extra; i++) {
        fds[n + i] = cl_connect(s.port, 100);
        cr_assert_geq(fds[n + i], 0);
        cr_assert_eq(cl_send(fds[n + i], CL_SLOW_HEAD, 10000), 0);
    }
    t0 = th_now_ms();
    while (cl_metric(s.port, "kvserve_http_connections_evicted_total{") < extra - 256)
        cr_assert_lt(th_now_ms() - t0, 30000, "evicted: %.0f", cl_metric(s.port, "kvserve_http_connections_evicted_total{"));
    cr_assert(!cl_closed_within(fds[0], 200, NULL, 0), "another address's connection was closed");
    cr_assert(cl_closed_within(fds[n], 2000, NULL, 0), "the address's oldest connection stays open");
    cr_assert(!cl_closed_within(fds[n + extra - 1], 200, NULL, 0), "its newest was closed");
    cl_health_latency(s.port, 11, &med, &max);
    printf("conn_limits: /health after an address passed its cap: median %lld ms, max %lld ms\n", (long long)med,
           (long long)max);
    cr_assert_lt(med, 50);
    for (int i = 0; i < n + extra; i++) close(fds[i]);
    free(fds);
    th_stop(&s);
}

/* The same address as the flood: 1,500 half-sent heads from 127.0.0.1 (past its cap of 256),
 * then /health from 127.0.0.1: it evicts the flood's oldest and is answered. */
Test(conn_limits, health_from_the_flooding_address, .timeout = 120)
{
    long nofile = cl_nofile();
    int n = nofile - 600 < 1500 ? (int)(nofile - 600) : 1500;
    cr_assert_gt(n, 300, "the open-file limit (%ld) is too low for this test", nofile);
    static const char *const args[] = {"--http-header-timeout", "120", NULL};
    th_server s;
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    int *fds = malloc(sizeof *fds * (size_t)n);
    for (int i = 0; i < n; i++) {
        fds[i] = cl_connect(s.port, 1);
        cr_assert_geq(fds[i], 0);
        cr_assert_eq(cl_send(fds[i], CL_SLOW_HEAD, 10000), 0);
    }
    int64_t med, max;
    cl_health_latency(s.port, 11, &med, &max);
    printf("conn_limits: /health from the flooding address: median %lld ms, max %lld ms\n", (long long)med, (long long)max);
    cr_assert_lt(med, 50);
    cr_assert_leq(cl_metric(s.port, "kvserve_http_connections{"), 256 + 2);
    for (int i = 0; i < n; i++) close(fds[i]);
    free(fds);
    th_stop(&s);
}

/* The timeouts: a silent connection closes, a head sent in part gets 408, a body slower than
 * the floor gets 408, an idle keep-alive connection closes; a head that keeps arriving within
 * the timeout is served. */
Test(conn_limits, header_body_and_keepalive_timeouts, .timeout = 60)
{
    static const char *const args[] = {"--http-header-timeout", "1", "--http-body-min-rate", "100",
                                       "--http-keepalive-timeout", "1", NULL};
    th_server s;
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    char buf[4096];
    int silent = cl_connect(s.port, 1);
    int half = cl_connect(s.port, 1);
    int slow_body = cl_connect(s.port, 1);
    int idle = cl_connect(s.port, 1);
    cr_assert_eq(cl_send(half, CL_SLOW_HEAD, 2000), 0);
    cr_assert_eq(cl_send(slow_body, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                    "Content-Length: 1000\r\n\r\n{\"prompt\":", 2000), 0);
    cr_assert_eq(cl_send(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 2000), 0);
    int64_t t0 = th_now_ms();
    cr_assert(cl_closed_within(half, 5000, buf, sizeof buf), "a half-sent head stays open");
    cr_assert(strstr(buf, "HTTP/1.1 408"), "%s", buf);
    cr_assert(strstr(buf, "request_timeout"), "%s", buf);
    cr_assert_geq(th_now_ms() - t0, 700, "closed before the header timeout");
    cr_assert(cl_closed_within(silent, 5000, buf, sizeof buf), "a silent connection stays open");
    cr_assert_eq(buf[0], 0, "a silent connection gets nothing: %s", buf);
    cr_assert(cl_closed_within(slow_body, 5000, buf, sizeof buf), "a stalled body stays open");
    cr_assert(strstr(buf, "HTTP/1.1 408"), "%s", buf);
    cr_assert(cl_closed_within(idle, 5000, buf, sizeof buf), "an idle keep-alive connection stays open");
    cr_assert(strstr(buf, "HTTP/1.1 200"), "the request before the idle time was answered: %s", buf);
    cr_assert_gt(cl_metric(s.port, "kvserve_http_timeouts_total{"), 3);

    /* A complete head on a fresh connection is served as ever. */
    th_resp r = th_http(s.port, NULL, "/health", NULL, NULL);
    cr_assert_eq(r.status, 200);
    th_resp_free(&r);
    close(silent);
    close(half);
    close(slow_body);
    close(idle);
    th_stop(&s);
}

/* Every connection busy (each in the middle of a request body, so none can be evicted): the
 * reserve answers /health and refuses anything else with 503; connections squatting the reserve
 * in silence are evicted for a probe. */
Test(conn_limits, the_reserve_serves_health_when_all_are_busy, .timeout = 120)
{
    static const char *const args[] = {"--http-max-connections", "4", "--http-reserved-connections", "2",
                                       "--http-body-min-rate", "0", "--http-header-timeout", "120", NULL};
    th_server s;
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    /* Each of four connections in the middle of a body; its "100 Continue" proves the server
     * read its head (it is no longer evictable) before the next one comes. */
    int busy[4];
    char buf[512];
    int64_t t0 = th_now_ms();
    while (cl_metric(s.port, "kvserve_http_connections{") > 1) /* the harness's probes are gone */
        cr_assert_lt(th_now_ms() - t0, 10000);
    for (int i = 0; i < 4; i++) {
        busy[i] = cl_connect(s.port, 2 + i);
        cr_assert_eq(cl_send(busy[i], "POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                      "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n", 2000), 0);
        size_t got = 0;
        t0 = th_now_ms();
        while (!strstr(buf, "100 Continue")) {
            struct pollfd p = {busy[i], POLLIN, 0};
            poll(&p, 1, 100);
            ssize_t k = recv(busy[i], buf + got, sizeof buf - 1 - got, 0);
            if (k > 0) got += (size_t)k;
            buf[got] = 0;
            cr_assert_lt(th_now_ms() - t0, 10000, "no 100 Continue on connection %d: %s", i, buf);
        }
        cr_assert_eq(cl_send(busy[i], "{\"prompt\":", 2000), 0);
        buf[0] = 0;
    }
    /* The health probes of the harness's client and the metrics below are short: their
     * connections close (keep-alive off in th_http), so the four stay the only ones. */
    static const char models[] = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    t0 = th_now_ms();
    th_resp r;
    for (;;) { /* once the four are in their bodies, a fifth connection is the reserve's */
        r = th_raw(s.port, models, sizeof models - 1, 0, 3000);
        if (r.status == 503) break;
        cr_assert_lt(th_now_ms() - t0, 10000, "/v1/models is still served beyond the limit: %s", r.raw);
        th_resp_free(&r);
        cr_assert_lt(th_now_ms() - t0, 10000, "/v1/models is still served beyond the limit: %s", r.raw);
    }
    cr_assert(strstr(r.raw, "/health"), "the refusal says what the reserve serves: %s", r.raw);
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/health", NULL, NULL);
    cr_assert_eq(r.status, 200, "the reserve answers /health: %ld %s", r.status, r.body ? r.body : "");
    th_resp_free(&r);
    /* Silent connections squatting the reserve (nothing in flight) make room for a probe. */
    int hold[2];
    for (int i = 0; i < 2; i++) hold[i] = cl_connect(s.port, 20);
    for (int k = 0; k < 5; k++) {
        r = th_http(s.port, NULL, "/health", NULL, NULL);
        cr_assert_eq(r.status, 200, "/health past squatters: %ld %s", r.status, r.body ? r.body : "");
        th_resp_free(&r);
    }
    for (int i = 0; i < 2; i++) close(hold[i]);
    for (int i = 0; i < 4; i++) close(busy[i]);
    th_stop(&s);
}
