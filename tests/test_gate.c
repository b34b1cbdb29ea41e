/*
 * test_gate.c — HTTP/1.1 request framing in front of libmicrohttpd.
 *
 * Suite gate: the parser alone (server/http/gate_parse.c) on a table of valid and invalid requests,
 * each fed whole and in random splits (printed seed) that must give the same forwarded bytes and
 * the same verdict. Suite gate_e2e: the same abuse against a real server over loopback — one JSON
 * error response and a close for every framing error (libmicrohttpd 0.9.75 sent two status lines,
 * HTML, kept ambiguous connections open and read chunked uploads past the limit to the end), 413 as
 * soon as a chunked body passes --max-body, keep-alive and 100-continue intact.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/rng.h"
#include "server/http/gate.h"
#include "tests/server_harness.h"

/* ---- the parser ---------------------------------------------------------------------------- */

typedef struct tg_out {
    char *s;
    size_t n, cap;
} tg_out;

static void tg_sink(void *ud, const char *d, size_t n)
{
    tg_out *o = ud;
    if (o->n + n + 1 > o->cap) {
        o->cap = (o->n + n + 1) * 2;
        o->s = realloc(o->s, o->cap);
    }
    memcpy(o->s + o->n, d, n);
    o->n += n;
    o->s[o->n] = 0;
}

/* Feeds in in pieces (seed 0: whole); returns the status (0 = valid) and the output in *o. */
static int tg_run(const char *in, size_t n, size_t max_body, uint64_t seed, tg_out *o, int *n_req)
{
    gate_parser p;
    memset(o, 0, sizeof *o);
    tg_sink(o, "", 0);
    cr_assert_eq(gate_parser_init(&p, max_body, tg_sink, o), 0);
    uint64_t x = seed;
    int status = 0;
    for (size_t off = 0; off < n && !status;) {
        size_t k = seed ? 1 + rng_splitmix64(&x) % 7 : n;
        if (k > n - off) k = n - off;
        if (gate_feed(&p, in + off, k)) status = p.status;
        off += k;
    }
    if (n_req) *n_req = p.n_requests;
    gate_parser_fini(&p);
    return status;
}

typedef struct tg_case {
    const char *name;
    const char *in;
    int status;        /* 0: valid */
    const char *out;   /* valid: exactly what reaches libmicrohttpd */
} tg_case;

#define H11 "Host: h\r\n"
static const tg_case tg_cases[] = {
    {"get", "GET /health HTTP/1.1\r\n" H11 "\r\n", 0, "GET /health HTTP/1.1\r\n" H11 "\r\n"},
    {"leading empty lines", "\r\n\r\nGET / HTTP/1.1\r\n" H11 "\r\n", 0, "GET / HTTP/1.1\r\n" H11 "\r\n"},
    {"http/1.0 without host", "GET / HTTP/1.0\r\n\r\n", 0, "GET / HTTP/1.0\r\n\r\n"},
    {"length body", "POST /x HTTP/1.1\r\nContent-Length: 3\r\n" H11 "\r\nabc", 0,
     "POST /x HTTP/1.1\r\n" H11 "Content-Length: 3\r\n\r\nabc"},
    {"same length twice", "POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n" H11 "\r\nab", 0,
     "POST /x HTTP/1.1\r\n" H11 "Content-Length: 2\r\n\r\nab"},
    {"chunked", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n", 0,
     "POST /x HTTP/1.1\r\n" H11 "Content-Length: 5\r\n\r\nabcde"},
    {"chunked case", "POST /x HTTP/1.1\r\n" H11 "transfer-encoding:  Chunked \r\nExpect: 100-continue\r\n\r\n0\r\n\r\n", 0,
     "POST /x HTTP/1.1\r\n" H11 "Content-Length: 0\r\n\r\n"},
    {"pipelined", "GET /a HTTP/1.1\r\n" H11 "\r\nPOST /b HTTP/1.1\r\n" H11 "Content-Length: 1\r\n\r\nzGET /c HTTP/1.1\r\n" H11 "\r\n", 0,
     "GET /a HTTP/1.1\r\n" H11 "\r\nPOST /b HTTP/1.1\r\n" H11 "Content-Length: 1\r\n\r\nzGET /c HTTP/1.1\r\n" H11 "\r\n"},
    {"absolute form", "GET http://example.com:8000/health?x=1 HTTP/1.1\r\n" H11 "\r\n", 0, "GET /health?x=1 HTTP/1.1\r\n" H11 "\r\n"},
    {"absolute form, no path", "GET HTTPS://example.com HTTP/1.1\r\n" H11 "\r\n", 0, "GET / HTTP/1.1\r\n" H11 "\r\n"},
    {"absolute form, query only", "GET http://h?q HTTP/1.1\r\n" H11 "\r\n", 0, "GET /?q HTTP/1.1\r\n" H11 "\r\n"},
    {"absolute form, chunked", "POST http://h/x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", 0,
     "POST /x HTTP/1.1\r\n" H11 "Content-Length: 1\r\n\r\na"},
    {"negative length", "POST /x HTTP/1.1\r\n" H11 "Content-Length: -5\r\n\r\nabc", 400, NULL},
    {"letters length", "POST /x HTTP/1.1\r\n" H11 "Content-Length: abc\r\n\r\n", 400, NULL},
    {"empty length", "POST /x HTTP/1.1\r\n" H11 "Content-Length: \r\n\r\n", 400, NULL},
    {"spaced digits", "POST /x HTTP/1.1\r\n" H11 "Content-Length: 1 2\r\n\r\n", 400, NULL},
    {"2^64 length", "POST /x HTTP/1.1\r\n" H11 "Content-Length: 18446744073709551616\r\n\r\n", 413, NULL},
    {"over max-body", "POST /x HTTP/1.1\r\n" H11 "Content-Length: 1001\r\n\r\n", 413, NULL},
    {"two lengths", "POST /x HTTP/1.1\r\n" H11 "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400, NULL},
    {"length list", "POST /x HTTP/1.1\r\n" H11 "Content-Length: 3, 4\r\n\r\nabcd", 400, NULL},
    {"length and chunked", "POST /x HTTP/1.1\r\n" H11 "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, NULL},
    {"chunked and length", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400, NULL},
    {"gzip", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: gzip\r\n\r\n", 400, NULL},
    {"gzip, chunked", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400, NULL},
    {"chunked twice", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, NULL},
    {"chunked in 1.0", "POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, NULL},
    {"obs-fold", "GET / HTTP/1.1\r\n" H11 "X-A: 1\r\n  2\r\n\r\n", 400, NULL},
    {"bare LF", "GET / HTTP/1.1\n" H11 "\r\n", 400, NULL},
    {"bare CR", "GET / HTTP/1.1\r\n" H11 "X-A: 1\r2\r\n\r\n", 400, NULL},
    {"space before colon", "POST /x HTTP/1.1\r\n" H11 "Content-Length : 3\r\n\r\nabc", 400, NULL},
    {"control in value", "GET / HTTP/1.1\r\n" H11 "X-A: a\001b\r\n\r\n", 400, NULL},
    {"no host", "GET / HTTP/1.1\r\n\r\n", 400, NULL},
    {"two hosts", "GET / HTTP/1.1\r\n" H11 H11 "\r\n", 400, NULL},
    {"http/0.9", "GET /health\r\n\r\n", 400, NULL},
    {"http/2.0", "GET / HTTP/2.0\r\n" H11 "\r\n", 505, NULL},
    {"http/1.2", "GET / HTTP/1.2\r\n" H11 "\r\n", 505, NULL},
    {"bad version", "GET / HTTX/1.1\r\n" H11 "\r\n", 400, NULL},
    {"tls handshake", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, NULL},
    {"space in target", "GET /a b HTTP/1.1\r\n" H11 "\r\n", 400, NULL},
    {"bad chunk size", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, NULL},
    {"chunk longer than its size", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", 400, NULL},
    {"chunk over max-body", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n3e9\r\n", 413, NULL},
    {"huge chunk size", "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n", 413, NULL},
};

Test(gate, table_whole_and_split)
{
    uint64_t seed0 = 0x6a7e;
    printf("gate/table_whole_and_split: seeds %#llx + case * 97 + k\n", (unsigned long long)seed0);
    for (size_t i = 0; i < sizeof tg_cases / sizeof tg_cases[0]; i++) {
        const tg_case *c = &tg_cases[i];
        tg_out whole;
        int st = tg_run(c->in, strlen(c->in), 1000, 0, &whole, NULL);
        cr_assert_eq(st, c->status, "%s: status %d, want %d", c->name, st, c->status);
        if (c->out) cr_assert_str_eq(whole.s, c->out, "%s: forwarded", c->name);
        for (uint64_t k = 1; k <= 20; k++) {
            tg_out part;
            uint64_t seed = seed0 + i * 97 + k;
            int sp = tg_run(c->in, strlen(c->in), 1000, seed, &part, NULL);
            cr_assert_eq(sp, st, "%s split by seed %llu: status %d vs %d", c->name, (unsigned long long)seed, sp, st);
            if (!st) cr_assert_str_eq(part.s, whole.s, "%s split by seed %llu", c->name, (unsigned long long)seed);
            free(part.s);
        }
        free(whole.s);
    }
}

/* The 413 comes when the chunk size announces too much: before any of its data arrived. */
Test(gate, chunked_limit_before_data)
{
    char in[4096];
    size_t n = (size_t)snprintf(in, sizeof in, "POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) n += (size_t)snprintf(in + n, sizeof in - n, "190\r\n%0400d\r\n", 0);
    tg_out o;
    cr_assert_eq(tg_run(in, n, 1200, 0, &o, NULL), 0, "1200 bytes in 3 chunks of 400 fit 1200");
    cr_assert_str_eq(o.s, "", "an unfinished chunked request is not forwarded yet");
    free(o.s);
    size_t head = (size_t)(strstr(in, "\r\n\r\n") - in) + 4;
    size_t third = head + 2 * (5 + 400 + 2) + 5; /* up to the third chunk's size line */
    cr_assert_eq(tg_run(in, third, 1000, 0, &o, NULL), 413, "the size line of the chunk past the limit is enough");
    free(o.s);
    n += (size_t)snprintf(in + n, sizeof in - n, "1\r\n");
    cr_assert_eq(tg_run(in, n, 1200, 0, &o, NULL), 413);
    free(o.s);
}

/* Junk where the method goes is refused at its first byte, without waiting for a line end. */
Test(gate, junk_method_at_once)
{
    tg_out o;
    cr_assert_eq(tg_run("\x16\x03", 2, 1000, 0, &o, NULL), 400, "a TLS record header");
    free(o.s);
    cr_assert_eq(tg_run("GE", 2, 1000, 0, &o, NULL), 0, "a method in progress waits");
    free(o.s);
    cr_assert_eq(tg_run("GE(", 3, 1000, 0, &o, NULL), 400);
    free(o.s);
}

/* A head that never ends is cut at GATE_MAX_HEAD; a long but finished one passes. */
Test(gate, head_limit)
{
    size_t n = GATE_MAX_HEAD + 100;
    char *in = malloc(n + 1);
    int k = snprintf(in, n, "GET / HTTP/1.1\r\n" H11 "X-Big: ");
    memset(in + k, 'a', n - (size_t)k);
    tg_out o;
    cr_assert_eq(tg_run(in, n, 1000, 0, &o, NULL), 431);
    free(o.s);
    size_t m = GATE_MAX_HEAD - 200;
    memset(in + k, 'a', m - (size_t)k - 4);
    memcpy(in + m - 4, "\r\n\r\n", 4);
    int nreq = 0;
    cr_assert_eq(tg_run(in, m, 1000, 3, &o, &nreq), 0);
    cr_assert_eq(nreq, 1);
    free(o.s);
    free(in);
}

/* Random bytes never crash the parser and never make it forward more than it was given plus
 * the framing it adds (one Content-Length line per request). */
Test(gate, random_bytes)
{
    uint64_t x = 0x9a7e5eedull;
    printf("gate/random_bytes: seed %#llx\n", (unsigned long long)x);
    char in[512];
    const char *pieces[] = {"GET / HTTP/1.1\r\n", "POST /v HTTP/1.1\r\n", "Host: h\r\n", "\r\n", "Content-Length: 3\r\n",
                            "Transfer-Encoding: chunked\r\n", "0\r\n", "5\r\n", "abcde", ":", " ", "\n", "\r", "x"};
    for (int it = 0; it < 2000; it++) {
        size_t n = 0;
        int np = 1 + (int)(rng_splitmix64(&x) % 12);
        for (int k = 0; k < np; k++) {
            const char *p = pieces[rng_splitmix64(&x) % (sizeof pieces / sizeof pieces[0])];
            size_t l = strlen(p);
            if (n + l < sizeof in) {
                memcpy(in + n, p, l);
                n += l;
            }
        }
        tg_out o;
        int nreq = 0;
        tg_run(in, n, 64, rng_splitmix64(&x) | 1, &o, &nreq);
        cr_assert_leq(o.n, n + (size_t)(nreq + 1) * 32, "iteration %d", it);
        free(o.s);
    }
}

/* ---- against the server ---------------------------------------------------------------------- */

static th_server tg_srv;

static void tg_start(void)
{
    static const char *const args[] = {"--max-body", "1000", "--kv-memory", "16MiB", NULL};
    th_start(&tg_srv, NULL, args, NULL, TH_WAIT_HEALTHY);
}

static void tg_stop(void)
{
    th_stop(&tg_srv);
}

TestSuite(gate_e2e, .init = tg_start, .fini = tg_stop, .timeout = 60);

/* One status line, an OpenAI error object, the status wanted, and the connection closed. */
static void tg_check_reject(const th_resp *r, long status, const char *what)
{
    cr_assert_eq(r->status, status, "%s: status %ld, want %ld:\n%s", what, r->status, status, r->raw);
    cr_assert_eq(th_count_status_lines(r->raw), 1, "%s: one response only:\n%s", what, r->raw);
    cr_assert(strstr(r->raw, "Content-Type: application/json"), "%s: JSON, not HTML:\n%s", what, r->raw);
    cJSON *j = cJSON_Parse(r->body);
    cr_assert(j && cJSON_IsObject(cJSON_GetObjectItem(j, "error")), "%s: body %s", what, r->body);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")));
    cJSON_Delete(j);
    cr_assert(r->closed, "%s: the connection must close", what);
}

Test(gate_e2e, framing_errors_are_one_json_error_then_close)
{
    static const char body[] = "{\"prompt\":\"hi\",\"max_tokens\":1}";
    char req[1024];
    struct {
        const char *head;
        long status;
    } cases[] = {
        {"Content-Length: -5\r\n", 400},
        {"Content-Length: abc\r\n", 400},
        {"Content-Length: 18446744073709551616\r\n", 413},
        {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400},
        {"Content-Length: 31\r\nContent-Length: 3\r\n", 400},
        {"Transfer-Encoding: gzip\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n%s\r\n%s", cases[i].head, body);
        /* the client keeps its side open: the server must answer and close by itself */
        th_resp r = th_raw(tg_srv.port, req, (size_t)n, 0, 3000);
        tg_check_reject(&r, cases[i].status, cases[i].head);
        th_resp_free(&r);
    }
    th_resp r = th_raw(tg_srv.port, "GET /health\r\n\r\n", 15, 0, 3000);
    tg_check_reject(&r, 400, "HTTP/0.9 request line");
    th_resp_free(&r);
    th_resp h = th_http(tg_srv.port, NULL, "/health", NULL, NULL);
    cr_assert_eq(h.status, 200, "the server goes on");
    th_resp_free(&h);
}

/* A chunked upload past --max-body gets its 413 while the client is still sending. */
Test(gate_e2e, chunked_over_limit_is_413_at_once)
{
    char req[4096];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 4; i++) n += snprintf(req + n, sizeof req - (size_t)n, "200\r\n%0512d\r\n", 0);
    th_resp r = th_raw(tg_srv.port, req, (size_t)n, 0, 3000); /* no last chunk, no close */
    tg_check_reject(&r, 413, "chunked past 1000 bytes");
    cr_assert_lt(r.ms, 2000, "answered at once (%lld ms)", (long long)r.ms);
    th_resp_free(&r);
}

/* Valid chunked bodies (with 100-continue answered by the gate) and keep-alive still work. */
Test(gate_e2e, chunked_and_keep_alive)
{
    static const char body[] = "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0}";
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     "Expect: 100-continue\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n"
                     "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     strlen(body), body);
    th_resp r = th_raw(tg_srv.port, req, (size_t)n, 0, 10000);
    cr_assert(!strncmp(r.raw, "HTTP/1.1 100 Continue\r\n\r\n", 25), "%s", r.raw);
    cr_assert(strstr(r.raw, "HTTP/1.1 200 OK"), "%s", r.raw);
    cr_assert(strstr(r.raw, "\"text\":\", there was\""), "the golden completion: %s", r.raw);
    cr_assert(strstr(r.raw, "{\"status\":\"ok\"}"), "the pipelined second request: %s", r.raw);
    cr_assert_eq(th_count_status_lines(r.raw), 3);
    cr_assert(r.closed);
    th_resp_free(&r);
}

/* SIGTERM with a stream running: the drain lets it finish and everything MHD wrote, to the
 * final [DONE], still reaches the client through the gate before the process exits 0. */
Test(gate_e2e, drained_stream_reaches_the_client, .timeout = 60)
{
    th_server s;
    th_start(&s, NULL, NULL, NULL, TH_WAIT_HEALTHY);
    static const char body[] = "{\"prompt\":\"Once upon a time\",\"max_tokens\":480,\"ignore_eos\":true,\"stream\":true,\"n\":4}";
    char req[512];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                      "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    pid_t pid = fork(); /* the signal, once the stream is under way */
    if (pid == 0) {
        usleep(100000);
        kill(s.pid, SIGTERM);
        _exit(0);
    }
    th_resp r = th_raw(s.port, req, (size_t)n, 0, 30000);
    waitpid(pid, NULL, 0);
    cr_assert(strstr(r.raw, "data: [DONE]"), "the stream's end was lost (%zu bytes):\n%.300s",
              r.raw_len, r.raw_len > 300 ? r.raw + r.raw_len - 300 : r.raw);
    cr_assert(r.closed);
    int st = th_signal_wait(&s, 0, 15000);
    cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
    th_resp_free(&r);
    th_stop(&s);
}
