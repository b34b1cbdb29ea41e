/*
 * test_http.c — serve options of server/http/http.c against a real server: CORS with
 * --allowed-origins (preflight, headers on plain and streamed replies, refusals, off by
 * default), --max-model-len (what /v1/models reports, what requests may use, and start-up
 * refusing a length the model or the KV budget cannot hold), and every response body valid
 * UTF-8 JSON whatever bytes a client sends (a property test with a printed seed).
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/rng.h"
#include "model/utf8.h"
#include "tests/server_harness.h"
#include "tests/test_util.h"

static int th_has_header(const th_resp *r, const char *line)
{
    return strstr(r->headers, line) != NULL;
}

Test(http, cors_allowed_origins, .timeout = 60)
{
    th_server s;
    static const char *const args[] = {"--allowed-origins", "http://a.example, https://b.example", "--api-key", "k", NULL};
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    th_resp r = th_http(s.port, "OPTIONS", "/v1/chat/completions", NULL,
                        "Origin: https://b.example\r\nAccess-Control-Request-Method: POST\r\n"
                        "Access-Control-Request-Headers: authorization, content-type");
    cr_assert_eq(r.status, 204, "preflight, no key needed: %ld %s\n%s", r.status, r.body, r.headers);
    cr_assert(th_has_header(&r, "Access-Control-Allow-Origin: https://b.example"), "%s", r.headers);
    cr_assert(th_has_header(&r, "Access-Control-Allow-Methods: GET, POST, OPTIONS"), "%s", r.headers);
    cr_assert(th_has_header(&r, "Access-Control-Allow-Headers: authorization, content-type"), "%s", r.headers);
    cr_assert(th_has_header(&r, "Access-Control-Max-Age:"), "%s", r.headers);
    th_resp_free(&r);
    r = th_http(s.port, "OPTIONS", "/v1/completions", NULL, "Origin: https://evil.example\r\nAccess-Control-Request-Method: POST");
    cr_assert_eq(r.status, 400, "a disallowed origin's preflight");
    cr_assert_null(strstr(r.headers, "Access-Control-Allow-Origin"));
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}", "Origin: http://a.example\r\nAuthorization: Bearer k");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert(th_has_header(&r, "Access-Control-Allow-Origin: http://a.example"), "%s", r.headers);
    cr_assert(th_has_header(&r, "Vary: Origin"), "%s", r.headers);
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2,\"stream\":true}",
                "Origin: http://a.example\r\nAuthorization: Bearer k");
    cr_assert(th_has_header(&r, "Access-Control-Allow-Origin: http://a.example"), "streams too: %s", r.headers);
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/v1/models", NULL, "Origin: https://evil.example\r\nAuthorization: Bearer k");
    cr_assert_eq(r.status, 200);
    cr_assert_null(strstr(r.headers, "Access-Control-Allow-Origin"), "no CORS headers for other origins");
    th_resp_free(&r);
    th_stop(&s);

    static const char *const star[] = {"--allowed-origins", "*", NULL};
    th_start(&s, NULL, star, NULL, TH_WAIT_HEALTHY);
    r = th_http(s.port, NULL, "/health", NULL, "Origin: https://any.example");
    cr_assert(th_has_header(&r, "Access-Control-Allow-Origin: *"), "%s", r.headers);
    th_resp_free(&r);
    th_stop(&s);

    th_start(&s, NULL, NULL, NULL, TH_WAIT_HEALTHY); /* off by default */
    r = th_http(s.port, "OPTIONS", "/v1/completions", NULL, "Origin: http://a.example\r\nAccess-Control-Request-Method: POST");
    cr_assert_eq(r.status, 405, "without --allowed-origins OPTIONS is not a route");
    cr_assert_null(strstr(r.headers, "Access-Control-Allow-Origin"));
    th_resp_free(&r);
    th_stop(&s);
}

Test(http, max_model_len, .timeout = 60)
{
    th_server s;
    static const char *const args[] = {"--max-model-len", "100", NULL};
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    th_resp r = th_http(s.port, NULL, "/v1/models", NULL, NULL);
    cr_assert(strstr(r.body, "\"max_model_len\":100"), "%s", r.body);
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":96}", NULL);
    cr_assert_eq(r.status, 400, "5 + 96 > 100: %s", r.body);
    cr_assert(strstr(r.body, "context_length_exceeded") && strstr(r.body, "100 tokens"), "%s", r.body);
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", NULL);
    cr_assert_eq(r.status, 200, "chat without max_tokens fills up to 100: %s", r.body);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    cr_assert_leq(cJSON_GetObjectItem(u, "total_tokens")->valueint, 100);
    cJSON_Delete(j);
    th_resp_free(&r);
    th_stop(&s);
    /* Start-up refuses what cannot work, with one line naming it. */
    struct {
        const char *const args[6];
        const char *says;
    } bad[] = {
        {{"--max-model-len", "100000", NULL}, "max-model-len"},
        {{"--kv-memory", "200KiB", NULL}, "less than one sequence"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        th_start(&s, NULL, bad[i].args, NULL, TH_WAIT_NONE);
        int st = -1;
        int64_t deadline = th_now_ms() + 15000;
        while (th_now_ms() < deadline && waitpid(s.pid, &st, WNOHANG) != s.pid) usleep(20000);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "%s: must exit non-zero", bad[i].args[0]);
        s.pid = 0;
        char *log = th_log(&s);
        cr_assert(log && strstr(log, bad[i].says), "%s", log ? log : "");
        free(log);
        th_stop(&s);
    }
}

/* Random bytes in the body, the path and the headers: every response body is valid UTF-8,
 * and every error is an OpenAI error object. */
Test(http, every_body_is_utf8, .timeout = 90)
{
    th_server s;
    th_start(&s, NULL, NULL, NULL, TH_WAIT_HEALTHY);
    uint64_t x = 0x07f8u;
    printf("http/every_body_is_utf8: seed %#llx\n", (unsigned long long)x);
    static const char *const tmpl[] = {
        "{\"prompt\":\"%s\",\"max_tokens\":2,\"echo\":true}",
        "{\"prompt\":[1,%u,%u,%u],\"max_tokens\":2,\"echo\":true,\"logprobs\":1}",
        "{\"messages\":[{\"role\":\"%s\",\"content\":\"x\"}]}",
        "{\"model\":\"%s\",\"prompt\":\"a\"}",
        "{\"prompt\":\"a\",\"stop\":[\"%s\"],\"max_tokens\":3}",
        "%s",
    };
    for (int it = 0; it < 120; it++) {
        char junk[64], body[512], path[128];
        int n = 1 + (int)(rng_splitmix64(&x) % 40);
        for (int k = 0; k < n; k++) {
            unsigned char c = (unsigned char)(rng_splitmix64(&x) & 0xff);
            junk[k] = (char)(c == '"' || c == '\\' || c < 0x20 ? 0x80 | c : c);
        }
        junk[n] = 0;
        int t = (int)(rng_splitmix64(&x) % (sizeof tmpl / sizeof tmpl[0]));
        if (t == 1)
            snprintf(body, sizeof body, tmpl[t], 3 + (unsigned)(rng_splitmix64(&x) % 256), 3 + (unsigned)(rng_splitmix64(&x) % 256),
                     3 + (unsigned)(rng_splitmix64(&x) % 256));
        else
            snprintf(body, sizeof body, tmpl[t], junk);
        const char *route = t == 2 ? "/v1/chat/completions" : "/v1/completions";
        snprintf(path, sizeof path, "%s", route);
        if (it % 10 == 9) { /* a path of bytes the route table does not know */
            snprintf(path, sizeof path, "/v1/");
            for (int k = 0; k < 8; k++) {
                unsigned char c = (unsigned char)(0x21 + rng_splitmix64(&x) % 0x5e);
                path[4 + k] = (char)c;
            }
            path[12] = 0;
        }
        char req[1024];
        int rl = snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                           "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                          path, strlen(body), body);
        th_resp r = th_raw(s.port, req, (size_t)rl, 0, 10000);
        cr_assert_gt(r.status, 0, "iteration %d: no response to %s", it, body);
        cr_assert(utf8_is_valid(r.body, strlen(r.body)), "iteration %d: invalid UTF-8 in %s → %s", it, body, r.body);
        cJSON *j = cJSON_Parse(r.body);
        cr_assert_not_null(j, "iteration %d: not JSON: %s", it, r.body);
        if (r.status >= 400) cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "error")), "%s", r.body);
        cJSON_Delete(j);
        th_resp_free(&r);
    }
    th_stop(&s);
}
