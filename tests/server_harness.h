/*
 * server_harness.h — a `kvserve serve` child process on a free loopback port for end-to-end
 * tests, and two clients: raw bytes over a socket (for framing tests, where a real HTTP client
 * would not send what is being tested) and a one-shot HTTP request with libcurl. Everything
 * waits by polling with a deadline; the child dies with the test (PR_SET_PDEATHSIG).
 * (No tests here; tests/server_harness.c is linked into the test binary.)
 */
#ifndef KVSERVE_SERVER_HARNESS_H
#define KVSERVE_SERVER_HARNESS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct th_server {
    pid_t pid;
    int port;
    char dir[256];     /* temp dir with the log */
    char log[320];
} th_server;

/* A free loopback TCP port (bound, read, released). */
int th_free_port(void);

/* A growing buffer for libcurl's write and header callbacks. */
typedef struct th_buf {
    char *s;           /* NUL-terminated, malloc'd */
    size_t n;
    atomic_int *first; /* set to 1 once "data:" arrived (a stream's first event); may be NULL */
} th_buf;

/* CURLOPT_WRITEFUNCTION / HEADERFUNCTION appending to the th_buf given as user data. */
size_t th_curl_write(char *p, size_t sz, size_t nm, void *ud);

/* The kvserve binary: $KVSERVE_BIN, else build/kvserve. */
const char *th_bin(void);
/* Monotonic milliseconds. */
int64_t th_now_ms(void);

enum { TH_WAIT_PORT = 0, TH_WAIT_HEALTHY = 1, TH_WAIT_NONE = 2 };

/* Starts `kvserve serve -m MODEL --port P --threads 1 ARGS...` (model NULL: the in-repo
 * stories260K) with extra environment entries env (NULL-terminated "K=V", may be NULL) and waits
 * up to 15 s for /health to say 200 (TH_WAIT_HEALTHY), for the port (TH_WAIT_PORT), or not at
 * all (TH_WAIT_NONE). Fails the test when it exits while waited for; skips it when the binary is
 * missing. $KVSERVE_TEST_SERVE_ARGS (words separated by spaces) is appended to every command line,
 * so that every server suite can run against another configuration. */
void th_start(th_server *t, const char *model, const char *const *args, const char *const *env,
              int wait);
/* Appends the words of $KVSERVE_TEST_SERVE_ARGS (e.g. "--overlap on") to argv[0 .. n), at most up
 * to max entries; returns the new count. th_start does it for every server it starts. */
int th_env_args(const char **argv, int n, int max);
/* SIGKILLs the server if it still runs and removes its files. */
void th_stop(th_server *t);
/* Sends sig and waits up to ms for the exit; returns the wait status, or -1 on timeout. */
int th_signal_wait(th_server *t, int sig, int ms);
/* The server's log so far (malloc'd). */
char *th_log(const th_server *t);

/* Response of a raw exchange or an HTTP request. */
typedef struct th_resp {
    long status;       /* first status line's code, 0 when none */
    char *raw;         /* everything received (raw exchange), NUL-terminated */
    size_t raw_len;
    char *body;        /* the body (HTTP), NUL-terminated */
    char *headers;
    int closed;        /* raw: the server closed the connection within the wait */
    int64_t ms;        /* time to the first byte (raw) or the whole response (HTTP) */
} th_resp;

/* Connects, sends data[0..n), half-closes when shut_wr, and reads until the server closes or
 * wait_ms pass. */
th_resp th_raw(int port, const char *data, size_t n, int shut_wr, int wait_ms);
/* One HTTP request with libcurl (method NULL: GET without body, POST with one); extra: header
 * lines separated by CRLF, or NULL. */
th_resp th_http(int port, const char *method, const char *path, const char *body, const char *extra);
void th_resp_free(th_resp *r);

/* Counts the status lines ("HTTP/1.x NNN") in a raw response (wherever they start). */
int th_count_status_lines(const char *raw);

#endif
