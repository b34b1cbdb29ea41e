/*
 * test_server_overlap.c — the server over the overlapped engine (`--overlap on`) on the CPU backend
 * and stories260K, against the same server with `--overlap off`.
 *
 * Requests are sent one at a time, so both engines see the same batches and must answer alike:
 * the choices' JSON (text, log-probs with their alternatives, finish reasons) byte for byte, for
 * greedy and seeded requests, stop strings, n > 1, max_tokens, penalties, logit_bias and
 * min_tokens, on /v1/completions and /v1/chat/completions. Streamed, the deltas must add up to
 * the same text, no stop string is ever sent although the overlapped engine computed a token past
 * it, and every choice ends once. A client that leaves mid-stream is cancelled and the engine
 * comes back to idle; /metrics counts the overlapped steps and the dropped tokens.
 *
 * `KVSERVE_TEST_SERVE_ARGS="--overlap on" make test` runs every other server suite overlapped too.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/server_harness.h"
#include "tests/test_util.h"

static th_server to_srv[2]; /* [0] --overlap off, [1] --overlap on */

static void to_start(void)
{
    unsetenv("KVSERVE_TEST_SERVE_ARGS"); /* this suite sets --overlap itself, on one server and off on the other */
    static const char *const args[2][6] = {{"--kv-memory", "16MiB", "--overlap", "off", NULL},
                                           {"--kv-memory", "16MiB", "--overlap", "on", NULL}};
    for (int i = 0; i < 2; i++) th_start(&to_srv[i], NULL, args[i], NULL, TH_WAIT_HEALTHY);
}

static void to_stop(void)
{
    for (int i = 0; i < 2; i++) th_stop(&to_srv[i]);
}

TestSuite(server_overlap, .init = to_start, .fini = to_stop, .timeout = 120);

/* First sample of a metric family in /metrics text (labels skipped), -1 when absent. */
static double to_metric(int srv, const char *name)
{
    th_resp r = th_http(to_srv[srv].port, NULL, "/metrics", NULL, NULL);
    cr_assert_eq(r.status, 200);
    double v = -1;
    size_t n = strlen(name);
    for (const char *p = r.body; (p = strstr(p, name)); p += n)
        if ((p == r.body || p[-1] == '\n') && (p[n] == '{' || p[n] == ' ')) {
            const char *sp = strchr(p, ' ');
            v = sp ? atof(sp + 1) : -1;
            break;
        }
    th_resp_free(&r);
    return v;
}

/* Polls until nothing runs or waits and only the prefix cache holds blocks. */
static void to_wait_idle(int srv)
{
    int64_t deadline = th_now_ms() + 15000;
    while (th_now_ms() < deadline) {
        if (to_metric(srv, "vllm:num_requests_running") == 0 && to_metric(srv, "vllm:num_requests_waiting") == 0 &&
            to_metric(srv, "kvserve_kv_blocks_used") == to_metric(srv, "kvserve_kv_blocks_cached"))
            return;
        usleep(20000);
    }
    cr_assert_fail("server %d not idle", srv);
}

/* A request's answer: the choices (printed, unformatted) of a whole answer, or per index the text,
 * finish reason, number of finish reasons and of log-prob entries of a stream. */
typedef struct to_ans {
    char *choices;
    char text[4][2048];
    char finish[4][16];
    int n_finish[4], n_lp[4], n_chunks, done;
} to_ans;

static void to_parse_whole(const char *body, int chat, to_ans *a)
{
    cJSON *j = cJSON_Parse(body);
    cr_assert(j, "not JSON: %s", body);
    const cJSON *ch = cJSON_GetObjectItem(j, "choices"), *c;
    cr_assert(cJSON_IsArray(ch), "%s", body);
    a->choices = cJSON_PrintUnformatted(ch);
    cJSON_ArrayForEach(c, ch)
    {
        int i = cJSON_GetObjectItem(c, "index")->valueint;
        cr_assert(i >= 0 && i < 4);
        const cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")
                              : cJSON_GetObjectItem(c, "text");
        snprintf(a->text[i], sizeof a->text[i], "%s", cJSON_IsString(t) ? t->valuestring : "");
        snprintf(a->finish[i], sizeof a->finish[i], "%s", cJSON_GetObjectItem(c, "finish_reason")->valuestring);
        a->n_finish[i] = 1;
    }
    cJSON_Delete(j);
}

static void to_parse_stream(const char *body, int chat, to_ans *a)
{
    for (const char *p = body; (p = strstr(p, "data: "));) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        cr_assert(e, "unterminated event");
        cr_assert(!a->done, "data after [DONE]");
        if (!strncmp(p, "[DONE]", 6)) {
            a->done = 1;
            p = e;
            continue;
        }
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(e - p));
        cr_assert(j && !cJSON_GetObjectItem(j, "error"), "%.*s", (int)(e - p), p);
        a->n_chunks++;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "choices"))
        {
            int i = cJSON_GetObjectItem(c, "index")->valueint;
            cr_assert(i >= 0 && i < 4);
            cr_assert_eq(a->n_finish[i], 0, "choice %d: a chunk after its finish", i);
            const cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content")
                                  : cJSON_GetObjectItem(c, "text");
            if (cJSON_IsString(t)) strncat(a->text[i], t->valuestring, sizeof a->text[i] - strlen(a->text[i]) - 1);
            const cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
            if (cJSON_IsString(f)) {
                snprintf(a->finish[i], sizeof a->finish[i], "%s", f->valuestring);
                a->n_finish[i]++;
            }
            const cJSON *lp = cJSON_GetObjectItem(c, "logprobs");
            if (cJSON_IsObject(lp)) a->n_lp[i] += cJSON_GetArraySize(cJSON_GetObjectItem(lp, chat ? "content" : "tokens"));
        }
        cJSON_Delete(j);
        p = e;
    }
}

static void to_ask(int srv, const char *path, const char *body, int stream, to_ans *a)
{
    memset(a, 0, sizeof *a);
    th_resp r = th_http(to_srv[srv].port, NULL, path, body, NULL);
    cr_assert_eq(r.status, 200, "%s → %ld %s", body, r.status, r.body);
    if (stream) to_parse_stream(r.body, strstr(path, "chat") != NULL, a);
    else to_parse_whole(r.body, strstr(path, "chat") != NULL, a);
    th_resp_free(&r);
}

typedef struct to_case {
    const char *path, *fields, *stop;
    int n;
} to_case;

#define TO_P "\"prompt\":\"Once upon a time\","
#define TO_M "\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about the little cat\"}],"
static const to_case to_cases[] = {
    {"/v1/completions", TO_P "\"max_tokens\":60,\"temperature\":0,\"stop\":\"little\"", "little", 1},
    {"/v1/completions", TO_P "\"max_tokens\":48,\"temperature\":0.9,\"top_p\":0.9,\"seed\":11,\"n\":2,"
                        "\"logprobs\":3,\"stop\":[\".\"]", ".", 2},
    {"/v1/completions", TO_P "\"max_tokens\":7,\"temperature\":1.1,\"top_k\":20,\"seed\":5,\"ignore_eos\":true,"
                        "\"logprobs\":1", NULL, 1},
    {"/v1/completions", "\"prompt\":\"The cat\",\"max_tokens\":40,\"temperature\":0.8,\"seed\":13,\"n\":3,"
                        "\"frequency_penalty\":0.4,\"presence_penalty\":0.3,\"repetition_penalty\":1.2,"
                        "\"min_p\":0.05,\"min_tokens\":12,\"logit_bias\":{\"261\":4,\"378\":-100},\"stop\":\" the\"", " the", 3},
    {"/v1/chat/completions", TO_M "\"max_tokens\":50,\"temperature\":1.0,\"seed\":21,\"logprobs\":true,"
                             "\"top_logprobs\":2,\"stop\":[\"and\"]", "and", 1},
    {"/v1/chat/completions", TO_M "\"max_tokens\":30,\"temperature\":0,\"n\":2", NULL, 2},
};
#define TO_N ((int)(sizeof to_cases / sizeof to_cases[0]))

/* Every case, whole and streamed, on both servers: the same answers; stops never sent. */
Test(server_overlap, answers_match_the_synchronous_engine)
{
    char body[1024];
    int stopped = 0;
    for (int k = 0; k < TO_N; k++) {
        const to_case *c = &to_cases[k];
        static to_ans whole[2], streamed[2];
        for (int s = 0; s < 2; s++) {
            snprintf(body, sizeof body, "{%s}", c->fields);
            to_ask(s, c->path, body, 0, &whole[s]);
            snprintf(body, sizeof body, "{%s,\"stream\":true}", c->fields);
            to_ask(s, c->path, body, 1, &streamed[s]);
        }
        cr_assert_str_eq(whole[0].choices, whole[1].choices, "case %d: overlapped answer differs", k);
        for (int s = 0; s < 2; s++) {
            cr_assert(streamed[s].done, "case %d server %d: no [DONE]", k, s);
            for (int i = 0; i < c->n; i++) {
                cr_assert_eq(streamed[s].n_finish[i], 1, "case %d server %d choice %d", k, s, i);
                cr_assert_str_eq(streamed[s].text[i], whole[s].text[i], "case %d server %d choice %d: streamed text",
                                 k, s, i);
                cr_assert_str_eq(streamed[s].finish[i], whole[s].finish[i], "case %d server %d choice %d", k, s, i);
                if (c->stop) cr_assert_null(strstr(streamed[s].text[i], c->stop), "case %d: stop string sent", k);
                stopped += s && !strcmp(whole[s].finish[i], "stop");
            }
        }
        if (strstr(c->fields, "\"logprobs\":3")) cr_assert_eq(streamed[1].n_lp[0], streamed[0].n_lp[0]);
        if (strstr(c->fields, "\"max_tokens\":7")) cr_assert_str_eq(whole[1].finish[0], "length");
        for (int s = 0; s < 2; s++) cJSON_free(whole[s].choices), cJSON_free(streamed[s].choices);
    }
    cr_assert_gt(stopped, 2, "the cases must exercise stops");
    to_wait_idle(1);
    cr_assert_eq(to_metric(1, "kvserve_engine_overlap"), 1);
    cr_assert_eq(to_metric(0, "kvserve_engine_overlap"), 0);
    cr_assert_gt(to_metric(1, "kvserve_engine_steps_overlapped_total"), 0);
    cr_assert_gt(to_metric(1, "kvserve_engine_tokens_dropped_total"), 0, "stops are seen one step late");
    cr_assert_eq(to_metric(0, "kvserve_engine_tokens_dropped_total"), 0);
    for (int s = 0; s < 2; s++)
        cr_assert_eq(to_metric(s, "kvserve_step_seconds_count"), to_metric(s, "kvserve_engine_steps_total"),
                     "server %d: one observation of the phases per step", s);
}

/* Clients that leave mid-stream (and one that leaves a whole request at once) are cancelled a step
 * late at most: the overlapped engine returns to idle and keeps serving. */
Test(server_overlap, client_disconnect_cancels)
{
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":500,\"ignore_eos\":true,\"stream\":true,\"n\":2}";
    for (int k = 0; k < 3; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)to_srv[1].port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
        char req[1024], buf[4096];
        int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                          "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
        cr_assert(write(fd, req, (size_t)n) == n);
        size_t got = 0;
        int64_t deadline = th_now_ms() + 10000;
        while (th_now_ms() < deadline && got < sizeof buf - 1) {
            ssize_t m = read(fd, buf + got, sizeof buf - 1 - got);
            cr_assert(m > 0);
            got += (size_t)m;
            buf[got] = 0;
            if (strstr(buf, "data: {")) break;
        }
        close(fd);
    }
    to_wait_idle(1);
    th_resp r = th_http(to_srv[1].port, NULL, "/metrics", NULL, NULL);
    const char *ab = strstr(r.body, "finished_reason=\"abort\"} ");
    cr_assert(ab && atof(ab + strlen("finished_reason=\"abort\"} ")) >= 1, "no request was cancelled");
    th_resp_free(&r);
    to_ans x;
    to_ask(1, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":5,\"temperature\":0}", 0, &x);
    cr_assert_str_eq(x.finish[0], "length");
    cJSON_free(x.choices);
}
