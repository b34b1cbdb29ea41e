/*
 * test_server.c — end-to-end tests of `kvserve serve` over real HTTP on loopback.
 *
 * Each test starts the server binary ($KVSERVE_BIN) on a free port with the stories260K model
 * ($KVSERVE_DATA, tests/data: the model and its golden texts are part of the repository). The server is
 * killed when the test ends (and by PR_SET_PDEATHSIG if the test process dies first). Waiting is
 * always polling with a deadline.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include "tests/server_harness.h"
#include "tests/test_util.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct sv_server {
    pid_t pid;
    int port;
    char dir[256];      /* temp dir: log, generated model */
    char model[512];
    char log[300];
    int golden;         /* 1: stories260K with golden texts */
    cJSON *gold;        /* parsed golden file or NULL */
} sv_server;

static sv_server sv;

/* ---- HTTP client (libcurl; the buffer and the clock from tests/server_harness.c) ----------- */

typedef struct sv_resp {
    long status;
    char *body;
    char *headers;
} sv_resp;

static void sv_resp_free(sv_resp *r)
{
    free(r->body);
    free(r->headers);
}

/* method NULL: GET without body, POST with body. extra: one header line or NULL. */
static sv_resp sv_http(const char *method, const char *path, const char *body, const char *extra,
                       atomic_int *first)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", sv.port, path);
    CURL *c = curl_easy_init();
    th_buf b = {NULL, 0, first}, h = {NULL, 0, NULL};
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    if (extra) hl = curl_slist_append(hl, extra);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_curl_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, th_curl_write);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    sv_resp r = {0, NULL, NULL};
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    r.body = b.s ? b.s : strdup("");
    r.headers = h.s ? h.s : strdup("");
    return r;
}

static sv_resp sv_post(const char *path, const char *body)
{
    return sv_http(NULL, path, body, NULL, NULL);
}

/* ---- server process -------------------------------------------------------------------------- */

static void sv_model(void)
{
    char p[512];
    snprintf(sv.model, sizeof sv.model, "%s/stories260K.gguf", tu_data_dir());
    cr_assert_eq(access(sv.model, R_OK), 0, "%s is missing (it is part of the repository)", sv.model);
    snprintf(p, sizeof p, "%s/stories260K.golden.json", tu_data_dir());
    char *g = tu_read_file(p, NULL);
    sv.gold = g ? cJSON_Parse(g) : NULL;
    free(g);
    cr_assert_not_null(sv.gold, "%s is missing or does not parse", p);
    sv.golden = 1;
}

/* Starts the server with extra arguments (NULL-terminated) and waits for /health. */
static void sv_start_args(const char *const *extra)
{
    sv.port = th_free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", sv.port);
    const char *argv[40] = {th_bin(), "serve", "-m", sv.model, "--port", port, "--threads", "1",
                            "--kv-memory", "32MiB"};
    int n = 10;
    for (int i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
    n = th_env_args(argv, n, 39);
    argv[n] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(sv.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    sv.pid = pid;
    int64_t deadline = th_now_ms() + 15000;
    for (;;) {
        sv_resp r = sv_http(NULL, "/health", NULL, NULL, NULL);
        long st = r.status;
        sv_resp_free(&r);
        if (st == 200) return;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            sv.pid = 0;
            char *log = tu_read_file(sv.log, NULL);
            cr_assert_fail("server exited during start-up:\n%s", log ? log : "");
        }
        cr_assert(th_now_ms() < deadline, "server not healthy within 15 s");
        usleep(20000);
    }
}

static void sv_start(void)
{
    sv_start_args(NULL);
}

static void sv_setup(void)
{
    memset(&sv, 0, sizeof sv);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(sv.dir, sizeof sv.dir, "/tmp/kvserve-test-XXXXXX");
    cr_assert(mkdtemp(sv.dir));
    snprintf(sv.log, sizeof sv.log, "%s/server.log", sv.dir);
    struct stat st;
    if (stat(th_bin(), &st)) {
        rmdir(sv.dir);
        sv.dir[0] = 0;
        cr_skip_test("kvserve binary not found (set KVSERVE_BIN)");
    }
    sv_model();
}

/* Waits up to ms for the server to exit; returns its wait status or -1. */
static int sv_wait_exit(int ms)
{
    int64_t deadline = th_now_ms() + ms;
    while (sv.pid && th_now_ms() < deadline) {
        int status;
        if (waitpid(sv.pid, &status, WNOHANG) == sv.pid) {
            sv.pid = 0;
            return status;
        }
        usleep(10000);
    }
    return -1;
}

/* SIGTERM, then the exit status must be 0 (under ASan that also means no leak was found). */
static void sv_stop_clean(void)
{
    kill(sv.pid, SIGTERM);
    int status = sv_wait_exit(15000);
    cr_assert(status != -1, "server did not exit after SIGTERM");
    char *log = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? NULL : tu_read_file(sv.log, NULL);
    cr_assert(!log, "server exit status %d:\n%s", status, log);
}

static void sv_teardown(void)
{
    if (!sv.dir[0]) return;
    if (sv.pid) {
        kill(sv.pid, SIGKILL);
        waitpid(sv.pid, NULL, 0);
        sv.pid = 0;
    }
    char p[400];
    static const char *const files[] = {"demo.gguf", "notify", "sdk.log"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", sv.dir, files[i]);
        unlink(p);
    }
    unlink(sv.log);
    rmdir(sv.dir);
    cJSON_Delete(sv.gold);
    sv.gold = NULL;
    sv.dir[0] = 0;
    curl_global_cleanup();
}

TestSuite(server, .init = sv_setup, .fini = sv_teardown, .timeout = 60);

/* ---- helpers on responses ---------------------------------------------------------------- */

static const cJSON *sv_case(const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(sv.gold, "cases"))
    if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name)) return c;
    cr_assert_fail("golden case %s missing", name);
    return NULL;
}

/* Expected completion text of a golden case (SentencePiece strips the space after BOS). */
static const char *sv_case_text(const cJSON *c)
{
    const cJSON *t = cJSON_GetObjectItem(c, "completion_text_stripped");
    return t ? t->valuestring : cJSON_GetObjectItem(c, "completion_text")->valuestring;
}

typedef struct sv_stream {
    char text[8][4096];     /* concatenated deltas per index */
    int n_chunks;
    int done;               /* saw [DONE] last */
    int usage_chunks;
    int role_chunks;
    int finish_seen[8];
    char id[96];
    double created;
    int same_id;
    int error;              /* a data: {"error"} event */
    cJSON *usage;           /* last usage object (owned) */
    int n_lp_tokens[8];
} sv_stream;

/* Parses an SSE body; every chunk must be valid JSON with the same id and created. */
static void sv_parse_stream(const char *body, int chat, sv_stream *st)
{
    memset(st, 0, sizeof *st);
    st->same_id = 1;
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        cr_assert(e, "unterminated SSE event");
        cr_assert(!st->done, "data after [DONE]");
        if (!strncmp(p, "[DONE]", 6)) {
            st->done = 1;
            p = e;
            continue;
        }
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(e - p));
        cr_assert(j, "bad chunk JSON: %.*s", (int)(e - p), p);
        if (cJSON_GetObjectItem(j, "error")) st->error = 1;
        else {
            const char *id = cJSON_GetObjectItem(j, "id")->valuestring;
            double cr = cJSON_GetObjectItem(j, "created")->valuedouble;
            if (!st->n_chunks) {
                snprintf(st->id, sizeof st->id, "%s", id);
                st->created = cr;
            } else if (strcmp(id, st->id) || cr != st->created) {
                st->same_id = 0;
            }
            cr_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring,
                             chat ? "chat.completion.chunk" : "text_completion");
            st->n_chunks++;
            const cJSON *u = cJSON_GetObjectItem(j, "usage");
            const cJSON *ch = cJSON_GetObjectItem(j, "choices");
            if (u && cJSON_IsObject(u)) {
                cr_assert_eq(cJSON_GetArraySize(ch), 0, "usage chunk with choices");
                st->usage_chunks++;
                cJSON_Delete(st->usage);
                st->usage = cJSON_Duplicate(u, 1);
            }
            const cJSON *c;
            cJSON_ArrayForEach(c, ch)
            {
                int idx = cJSON_GetObjectItem(c, "index")->valueint;
                cr_assert(idx >= 0 && idx < 8);
                const cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content")
                                      : cJSON_GetObjectItem(c, "text");
                if (chat && cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "role")) {
                    cr_assert_eq(st->finish_seen[idx], 0);
                    cr_assert_str_eq(st->text[idx], "", "role chunk after content");
                    st->role_chunks++;
                }
                if (cJSON_IsString(t)) strncat(st->text[idx], t->valuestring, sizeof st->text[idx] - strlen(st->text[idx]) - 1);
                const cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
                if (cJSON_IsString(f)) st->finish_seen[idx]++;
                const cJSON *lp = cJSON_GetObjectItem(c, "logprobs");
                if (cJSON_IsObject(lp))
                    st->n_lp_tokens[idx] += cJSON_GetArraySize(cJSON_GetObjectItem(lp, chat ? "content" : "tokens"));
            }
        }
        cJSON_Delete(j);
        p = e;
    }
}

static void sv_check_error(const sv_resp *r, long status, const char *code, const char *param)
{
    cr_assert_eq(r->status, status, "status %ld, want %ld: %s", r->status, status, r->body);
    cJSON *j = cJSON_Parse(r->body);
    cr_assert(j, "error body not JSON: %s", r->body);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    cr_assert(cJSON_IsObject(e), "no error object: %s", r->body);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    const cJSON *c = cJSON_GetObjectItem(e, "code"), *p = cJSON_GetObjectItem(e, "param");
    cr_assert(c && p, "code and param must be present: %s", r->body);
    if (code) cr_assert(cJSON_IsString(c) && !strcmp(c->valuestring, code), "code: %s", r->body);
    if (param) cr_assert(cJSON_IsString(p) && !strcmp(p->valuestring, param), "param: %s", r->body);
    cJSON_Delete(j);
}

/* Value of a sample in /metrics text (first line starting with name). */
static double sv_metric(const char *text, const char *name)
{
    const char *p = text;
    size_t n = strlen(name);
    while ((p = strstr(p, name))) {
        if ((p == text || p[-1] == '\n') && (p[n] == '{' || p[n] == ' ')) {
            const char *v = strchr(p, ' ');
            return v ? atof(v + 1) : -1;
        }
        p += n;
    }
    return -1;
}

/* Polls /metrics until nothing runs and only the prefix cache holds blocks. */
static void sv_wait_idle(void)
{
    int64_t deadline = th_now_ms() + 10000;
    double run = -1, used = -1, cached = -1, wait = -1;
    while (th_now_ms() < deadline) {
        sv_resp m = sv_http(NULL, "/metrics", NULL, NULL, NULL);
        run = sv_metric(m.body, "vllm:num_requests_running");
        wait = sv_metric(m.body, "vllm:num_requests_waiting");
        used = sv_metric(m.body, "kvserve_kv_blocks_used");
        cached = sv_metric(m.body, "kvserve_kv_blocks_cached");
        sv_resp_free(&m);
        if (run == 0 && wait == 0 && used == cached) return;
        usleep(20000);
    }
    cr_assert_fail("engine not idle: running %g waiting %g blocks used %g cached %g", run, wait, used, cached);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static const char *const sv_golden_cases[] = {"once_upon_a_time_n64", "lily_and_tom_n64", "the_cat_n64",
                                              "byte_fallback_n64", "quote_newline_n64", "empty_n64"};

Test(server, golden_completions)
{
    sv_start();
    for (size_t i = 0; i < sizeof sv_golden_cases / sizeof sv_golden_cases[0]; i++) {
        const cJSON *c = sv_case(sv_golden_cases[i]);
        int mx = cJSON_GetObjectItem(c, "max_new_tokens")->valueint;
        int np = cJSON_GetArraySize(cJSON_GetObjectItem(c, "prompt_token_ids"));
        cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "prompt", cJSON_GetObjectItem(c, "prompt")->valuestring);
        cJSON_AddNumberToObject(req, "max_tokens", mx);
        cJSON_AddNumberToObject(req, "temperature", 0);
        char *body = cJSON_PrintUnformatted(req);
        sv_resp r = sv_post("/v1/completions", body);
        cr_assert_eq(r.status, 200, "%s", r.body);
        cJSON *j = cJSON_Parse(r.body);
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        cr_assert_str_eq(cJSON_GetObjectItem(ch, "text")->valuestring, sv_case_text(c), "case %s", sv_golden_cases[i]);
        cr_assert_str_eq(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "length");
        const cJSON *u = cJSON_GetObjectItem(j, "usage");
        cr_assert_eq(cJSON_GetObjectItem(u, "prompt_tokens")->valueint, np);
        cr_assert_eq(cJSON_GetObjectItem(u, "completion_tokens")->valueint, mx);
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), "cached_tokens")));
        cr_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
        cJSON_Delete(j);
        sv_resp_free(&r);
        /* streamed: the same text, one chunk per token at most, [DONE] last, no usage */
        cJSON_AddBoolToObject(req, "stream", 1);
        free(body);
        body = cJSON_PrintUnformatted(req);
        r = sv_post("/v1/completions", body);
        cr_assert_eq(r.status, 200);
        cr_assert(strstr(r.headers, "text/event-stream"));
        sv_stream st;
        sv_parse_stream(r.body, 0, &st);
        cr_assert_str_eq(st.text[0], sv_case_text(c), "streamed case %s", sv_golden_cases[i]);
        cr_assert(st.done && st.same_id && !st.usage_chunks && !st.error);
        cr_assert_eq(st.finish_seen[0], 1);
        cr_assert(st.n_chunks <= mx);
        cr_assert(!strstr(r.body, "\"usage\""), "usage without include_usage");
        sv_resp_free(&r);
        free(body);
        cJSON_Delete(req);
    }
    /* include_usage: one final usage chunk with choices [] */
    sv_resp r = sv_post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0,"
                                           "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    sv_stream st;
    sv_parse_stream(r.body, 0, &st);
    cr_assert_eq(st.usage_chunks, 1);
    cr_assert_eq(cJSON_GetObjectItem(st.usage, "prompt_tokens")->valueint, 5);
    cr_assert_eq(cJSON_GetObjectItem(st.usage, "completion_tokens")->valueint, 60);
    cr_assert_eq(cJSON_GetObjectItem(st.usage, "total_tokens")->valueint, 65);
    cr_assert_str_eq(st.text[0], sv_case_text(sv_case("once_upon_a_time_n64")));
    cJSON_Delete(st.usage);
    sv_resp_free(&r);
    /* token-id prompts are used verbatim (the golden ids include BOS) */
    r = sv_post("/v1/completions", "{\"prompt\":[1,403,407,261,378],\"max_tokens\":60,\"temperature\":0}");
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"prompt_tokens\":5"), "%s", r.body);
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text")->valuestring,
                     sv_case_text(sv_case("once_upon_a_time_n64")));
    cJSON_Delete(j);
    sv_resp_free(&r);
    sv_stop_clean();
}

Test(server, chat_n2_logprobs_and_best_of)
{
    sv_start();
    const char *chat = "{\"model\":\"%s\",\"messages\":[{\"role\":\"system\",\"content\":\"Tell a story.\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Once upon\"}]}],"
                       "\"max_completion_tokens\":12,\"temperature\":0,\"ignore_eos\":true%s}";
    const char *slash = strrchr(sv.model, '/');
    char id[256];
    snprintf(id, sizeof id, "%s", slash + 1);
    *strstr(id, ".gguf") = 0;
    char body[1024];
    snprintf(body, sizeof body, chat, id, "");
    sv_resp r = sv_post("/v1/chat/completions", body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    cr_assert_str_eq(cJSON_GetObjectItem(m, "role")->valuestring, "assistant");
    char full[4096];
    snprintf(full, sizeof full, "%s", cJSON_GetObjectItem(m, "content")->valuestring);
    cJSON_Delete(j);
    sv_resp_free(&r);
    /* streamed chat: role chunk first, same content, finish chunk with an empty delta */
    snprintf(body, sizeof body, chat, id, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    r = sv_post("/v1/chat/completions", body);
    sv_stream st;
    sv_parse_stream(r.body, 1, &st);
    cr_assert_str_eq(st.text[0], full);
    cr_assert(st.done && st.same_id && st.role_chunks == 1 && st.usage_chunks == 1);
    cr_assert(strstr(r.body, "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\""), "%s", r.body);
    cJSON_Delete(st.usage);
    sv_resp_free(&r);
    /* n = 2, greedy: two equal choices with indices 0 and 1; chat logprobs with bytes */
    snprintf(body, sizeof body, chat, id, ",\"n\":2,\"logprobs\":true,\"top_logprobs\":3");
    r = sv_post("/v1/chat/completions", body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    j = cJSON_Parse(r.body);
    const cJSON *chs = cJSON_GetObjectItem(j, "choices");
    cr_assert_eq(cJSON_GetArraySize(chs), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *c = cJSON_GetArrayItem(chs, i);
        cr_assert_eq(cJSON_GetObjectItem(c, "index")->valueint, i);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring, full);
        const cJSON *lc = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "logprobs"), "content");
        cr_assert_eq(cJSON_GetArraySize(lc), 12);
        const cJSON *t0 = cJSON_GetArrayItem(lc, 0);
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(t0, "token")));
        cr_assert(cJSON_GetObjectItem(t0, "logprob")->valuedouble <= 0);
        cr_assert(cJSON_IsArray(cJSON_GetObjectItem(t0, "bytes")));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t0, "top_logprobs")), 3);
    }
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 24);
    cJSON_Delete(j);
    sv_resp_free(&r);
    /* completions logprobs shape, n = 2 streamed (interleaved by index), best_of */
    r = sv_post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":2,\"echo\":true,\"ignore_eos\":true}");
    j = cJSON_Parse(r.body);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *lp = cJSON_GetObjectItem(c0, "logprobs");
    cr_assert(!strncmp(cJSON_GetObjectItem(c0, "text")->valuestring, "Once upon a time", 16));
    /* echo + logprobs: the 5 prompt tokens are scored too (the first has none: null), then 8 */
    int nt = cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens"));
    cr_assert_eq(nt, 5 + 8);
    const cJSON *tlp = cJSON_GetObjectItem(lp, "token_logprobs"), *top = cJSON_GetObjectItem(lp, "top_logprobs");
    const cJSON *off = cJSON_GetObjectItem(lp, "text_offset");
    cr_assert_eq(cJSON_GetArraySize(tlp), nt);
    cr_assert_eq(cJSON_GetArraySize(top), nt);
    cr_assert_eq(cJSON_GetArraySize(off), nt);
    cr_assert(cJSON_IsNull(cJSON_GetArrayItem(tlp, 0)) && cJSON_IsNull(cJSON_GetArrayItem(top, 0)));
    cr_assert_eq(cJSON_GetArrayItem(off, 0)->valueint, 0);
    for (int k = 1; k < nt; k++) {
        cr_assert(cJSON_GetArrayItem(tlp, k)->valuedouble <= 0, "token %d", k);
        cr_assert(cJSON_GetArraySize(cJSON_GetArrayItem(top, k)) >= 1, "token %d", k);
        cr_assert_geq(cJSON_GetArrayItem(off, k)->valueint, cJSON_GetArrayItem(off, k - 1)->valueint);
    }
    double gen_lp[8];
    int32_t gen_ids[8];
    for (int k = 0; k < 8; k++) gen_lp[k] = cJSON_GetArrayItem(tlp, 5 + k)->valuedouble;
    cJSON_Delete(j);
    sv_resp_free(&r);
    /* The generated ids appended to the prompt and scored with max_tokens 0 give the same
     * log-probs as when they were sampled (the same model, computed by prefill instead of decode). */
    {
        /* the greedy continuation's ids, as vLLM's return_tokens_as_token_ids spells them */
        r = sv_post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,"
                                       "\"logprobs\":0,\"return_tokens_as_token_ids\":true}");
        j = cJSON_Parse(r.body);
        const cJSON *toks = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs"), "tokens");
        cr_assert_eq(cJSON_GetArraySize(toks), 8, "%s", r.body);
        for (int k = 0; k < 8; k++) {
            const char *t = cJSON_GetArrayItem(toks, k)->valuestring;
            cr_assert(!strncmp(t, "token_id:", 9), "%s", t);
            gen_ids[k] = atoi(t + 9);
        }
        cJSON_Delete(j);
        sv_resp_free(&r);
        r = sv_post("/tokenize", "{\"prompt\":\"Once upon a time\"}");
        j = cJSON_Parse(r.body);
        const cJSON *pids = cJSON_GetObjectItem(j, "tokens");
        cr_assert_eq(cJSON_GetArraySize(pids), 5, "%s", r.body);
        char req[512];
        int o = snprintf(req, sizeof req, "{\"prompt\":[");
        for (int k = 0; k < 5; k++)
            o += snprintf(req + o, sizeof req - (size_t)o, k ? ",%d" : "%d", cJSON_GetArrayItem(pids, k)->valueint);
        cJSON_Delete(j);
        sv_resp_free(&r);
        for (int k = 0; k < 8; k++) o += snprintf(req + o, sizeof req - (size_t)o, ",%d", gen_ids[k]);
        snprintf(req + o, sizeof req - (size_t)o, "],\"max_tokens\":0,\"echo\":true,\"logprobs\":1}");
        r = sv_post("/v1/completions", req);
        cr_assert_eq(r.status, 200, "%s", r.body);
        j = cJSON_Parse(r.body);
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        tlp = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "logprobs"), "token_logprobs");
        cr_assert_eq(cJSON_GetArraySize(tlp), 13);
        if (sv.golden)
            for (int k = 0; k < 8; k++)
                cr_assert(fabs(cJSON_GetArrayItem(tlp, 5 + k)->valuedouble - gen_lp[k]) < 2e-3,
                          "token %d: scored %g, sampled %g", k, cJSON_GetArrayItem(tlp, 5 + k)->valuedouble, gen_lp[k]);
        cr_assert_str_eq(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "length");
        cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 0);
        cJSON_Delete(j);
        sv_resp_free(&r);
    }
    r = sv_post("/v1/completions", "{\"prompt\":[\"Once upon a time\",\"The cat\"],\"max_tokens\":10,\"temperature\":0,"
                                   "\"n\":2,\"stream\":true,\"logprobs\":1,\"ignore_eos\":true}");
    sv_parse_stream(r.body, 0, &st);
    cr_assert(st.done);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(st.finish_seen[i], 1, "choice %d", i);
        cr_assert_eq(st.n_lp_tokens[i], 10);
    }
    cr_assert_str_eq(st.text[0], st.text[1]);
    cr_assert_str_eq(st.text[2], st.text[3]);
    cr_assert_str_neq(st.text[0], st.text[2]);
    sv_resp_free(&r);
    /* streamed echo + logprobs: the first chunk carries the prompt and its scored tokens */
    r = sv_post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0,\"stream\":true,"
                                   "\"echo\":true,\"logprobs\":1,\"ignore_eos\":true}");
    memset(&st, 0, sizeof st);
    sv_parse_stream(r.body, 0, &st);
    cr_assert(st.done);
    cr_assert_eq(st.n_lp_tokens[0], 5 + 3, "%s", r.body);
    cr_assert(!strncmp(st.text[0], "Once upon a time", 16), "%s", st.text[0]);
    cr_assert(strstr(r.body, "\"token_logprobs\":[null,"), "%s", r.body);
    sv_resp_free(&r);
    r = sv_post("/v1/completions", "{\"prompt\":\"The cat\",\"max_tokens\":6,\"temperature\":1,\"seed\":7,\"n\":2,\"best_of\":3,\"ignore_eos\":true}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    j = cJSON_Parse(r.body);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 2);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 18);
    cJSON_Delete(j);
    sv_resp_free(&r);
    /* tokenizer routes */
    r = sv_post("/tokenize", "{\"prompt\":\"Once upon a time\"}");
    cr_assert_eq(r.status, 200);
    if (sv.golden) cr_assert(strstr(r.body, "\"tokens\":[1,403,407,261,378]"), "%s", r.body);
    sv_resp_free(&r);
    if (sv.golden) {
        r = sv_post("/detokenize", "{\"tokens\":[1,403,407,261,378]}");
        cr_assert_str_eq(r.body, "{\"prompt\":\"Once upon a time\"}");
        sv_resp_free(&r);
    }
    sv_stop_clean();
}

Test(server, errors)
{
    const char *args[] = {"--max-body", "64KiB", NULL};
    sv_start_args(args);
    sv_resp r;
#define SV_ERR(path, body, st, code, param)                                                         \
    do {                                                                                             \
        r = sv_post(path, body);                                                                     \
        sv_check_error(&r, st, code, param);                                                         \
        sv_resp_free(&r);                                                                            \
    } while (0)
    SV_ERR("/v1/completions", "{\"prompt\": \"x\"", 400, "invalid_json", NULL);
    SV_ERR("/v1/completions", "[1,2]", 400, "invalid_json", NULL);
    SV_ERR("/v1/completions", "{}", 400, "missing_required_parameter", "prompt");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"many\"}", 400, "invalid_type", "max_tokens");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"temperature\":3}", 400, "invalid_value", "temperature");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"n\":0}", 400, "invalid_value", "n");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"n\":2,\"best_of\":1}", 400, "invalid_value", "best_of");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"n\":1,\"best_of\":2,\"stream\":true}", 400, "invalid_value", "best_of");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", 400, "invalid_value", "logit_bias");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"5\":200}}", 400, "invalid_value", "logit_bias");
    SV_ERR("/v1/completions", "{\"prompt\":[1,2,99999]}", 400, "invalid_value", "prompt");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":100000}", 400, "context_length_exceeded", "prompt");
    SV_ERR("/v1/completions", "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model_not_found", "model");
    SV_ERR("/v1/chat/completions", "{\"messages\":[]}", 400, "invalid_value", "messages");
    SV_ERR("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                                   "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x\"}}]}]}",
           400, "invalid_value", "messages[0].content[1]");
    SV_ERR("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"xml\"}}",
           400, "invalid_value", "response_format");
    SV_ERR("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}",
           400, "invalid_value", "top_logprobs");
    SV_ERR("/v1/nope", "{}", 404, "not_found", NULL);
    r = sv_http("GET", "/v1/completions", NULL, NULL, NULL);
    sv_check_error(&r, 405, NULL, NULL);
    cr_assert(strcasestr(r.headers, "Allow: POST"));
    sv_resp_free(&r);
    r = sv_http("POST", "/health", "{}", NULL, NULL);
    sv_check_error(&r, 405, NULL, NULL);
    sv_resp_free(&r);
    char *big = malloc(100001);
    memset(big, ' ', 100000);
    big[100000] = 0;
    big[0] = '{';
    big[99999] = '}';
    r = sv_post("/v1/completions", big);
    sv_check_error(&r, 413, NULL, NULL);
    sv_resp_free(&r);
    free(big);
    /* unknown fields are ignored; x-request-id is echoed */
    r = sv_http(NULL, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2,\"user\":\"u\",\"whatever\":[1]}",
                "X-Request-Id: abc-123", NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert(strcasestr(r.headers, "x-request-id: abc-123"), "%s", r.headers);
    sv_resp_free(&r);
    r = sv_http(NULL, "/health", NULL, NULL, NULL);
    cr_assert(strcasestr(r.headers, "x-request-id: "), "minted id missing");
    sv_resp_free(&r);
    /* the access log has a line per request */
    char *log = tu_read_file(sv.log, NULL);
    cr_assert(log && strstr(log, "POST /v1/completions 413"), "%s", log ? log : "");
    free(log);
    sv_stop_clean();
}

Test(server, auth_admission_and_metrics)
{
    const char *args[] = {"--api-key", "sekret", "--served-model-name", "tiny", NULL};
    sv_start_args(args);
    sv_resp r = sv_post("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}");
    sv_check_error(&r, 401, "invalid_api_key", NULL);
    sv_resp_free(&r);
    r = sv_http(NULL, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", "Authorization: Bearer wrong", NULL);
    sv_check_error(&r, 401, "invalid_api_key", NULL);
    sv_resp_free(&r);
    r = sv_http("GET", "/v1/models", NULL, NULL, NULL);
    sv_check_error(&r, 401, "invalid_api_key", NULL);
    sv_resp_free(&r);
    r = sv_post("/tokenize", "{\"prompt\":\"x\"}");
    sv_check_error(&r, 401, "invalid_api_key", NULL);
    sv_resp_free(&r);
    r = sv_http(NULL, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", "x-api-key: wrong", NULL);
    sv_check_error(&r, 401, "invalid_api_key", NULL);
    sv_resp_free(&r);
    /* Anthropic's clients send the key as x-api-key */
    r = sv_http(NULL, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", "x-api-key: sekret", NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    sv_resp_free(&r);
    r = sv_http(NULL, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1,\"model\":\"tiny\"}", "Authorization: Bearer sekret", NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert(strstr(r.body, "\"model\":\"tiny\""));
    sv_resp_free(&r);
    r = sv_http("GET", "/v1/models", NULL, "Authorization: Bearer sekret", NULL);
    cr_assert_eq(r.status, 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(d, "id")->valuestring, "tiny");
    cr_assert_str_eq(cJSON_GetObjectItem(d, "root")->valuestring, "tiny");
    cr_assert_str_eq(cJSON_GetObjectItem(d, "object")->valuestring, "model");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(d, "owned_by")));
    cr_assert(cJSON_GetObjectItem(d, "max_model_len")->valueint > 0);
    cJSON_Delete(j);
    sv_resp_free(&r);
    r = sv_http("GET", "/health", NULL, NULL, NULL);
    cr_assert_eq(r.status, 200);
    sv_resp_free(&r);
    r = sv_http("GET", "/metrics", NULL, NULL, NULL);
    cr_assert_eq(r.status, 200);
    static const char *const names[] = {
        "vllm:num_requests_running{model_name=\"tiny\",engine=\"0\"}", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total", "vllm:request_success_total{model_name=\"tiny\",engine=\"0\",finished_reason=\"length\"} 2",
        "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum", "vllm:request_queue_time_seconds_bucket",
        "vllm:num_preemptions_total", "kvserve_prefix_cache_evictions_total", "kvserve_kv_bytes_per_token",
        "kvserve_kv_capacity_tokens", "kvserve_kv_capacity_sequences"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) cr_assert(strstr(r.body, names[i]), "missing %s", names[i]);
    cr_assert(sv_metric(r.body, "kvserve_kv_bytes_per_token") > 0);
    cr_assert(sv_metric(r.body, "kvserve_kv_capacity_sequences") >= 1);
    sv_resp_free(&r);
    kill(sv.pid, SIGKILL);
    sv_wait_exit(5000);
    /* admission: with no queue room every generation is refused with 503 + Retry-After */
    const char *args2[] = {"--max-queued-requests", "0", NULL};
    sv_start_args(args2);
    r = sv_post("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}");
    sv_check_error(&r, 503, "server_is_overloaded", NULL);
    cr_assert(strcasestr(r.headers, "Retry-After: "), "%s", r.headers);
    sv_resp_free(&r);
}

typedef struct sv_job {
    const char *body;
    const char *want;   /* expected text or NULL */
    int chat;
    sv_stream st;
    long status;
    atomic_int first;
} sv_job;

static void *sv_job_run(void *p)
{
    sv_job *j = p;
    sv_resp r = sv_http(NULL, j->chat ? "/v1/chat/completions" : "/v1/completions", j->body, NULL, &j->first);
    j->status = r.status;
    sv_parse_stream(r.body, j->chat, &j->st);
    sv_resp_free(&r);
    return NULL;
}

Test(server, concurrent_streams)
{
    sv_start();
    enum { N = 32 };
    static sv_job jobs[N];
    static char bodies[N][512];
    pthread_t th[N];
    size_t nc = sizeof sv_golden_cases / sizeof sv_golden_cases[0];
    for (int i = 0; i < N; i++) {
        const cJSON *c = sv.golden ? sv_case(sv_golden_cases[i % nc]) : NULL;
        cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "prompt", c ? cJSON_GetObjectItem(c, "prompt")->valuestring : "Once upon a time");
        cJSON_AddNumberToObject(req, "max_tokens", c ? cJSON_GetObjectItem(c, "max_new_tokens")->valueint : 40);
        cJSON_AddNumberToObject(req, "temperature", 0);
        cJSON_AddBoolToObject(req, "stream", 1);
        char *b = cJSON_PrintUnformatted(req);
        snprintf(bodies[i], sizeof bodies[i], "%s", b);
        free(b);
        cJSON_Delete(req);
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].body = bodies[i];
        jobs[i].want = c ? sv_case_text(c) : NULL;
        pthread_create(&th[i], NULL, sv_job_run, &jobs[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(jobs[i].status, 200);
        cr_assert(jobs[i].st.done && jobs[i].st.same_id && !jobs[i].st.error, "stream %d", i);
        if (jobs[i].want) cr_assert_str_eq(jobs[i].st.text[0], jobs[i].want, "stream %d", i);
        else cr_assert(jobs[i].st.text[0][0] || 1);
    }
    sv_wait_idle();
    sv_stop_clean();
}

/* Sends a request on a raw socket and returns the socket. */
static int sv_raw(const char *body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    char req[1024];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                      "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    cr_assert(write(fd, req, (size_t)n) == n);
    return fd;
}

Test(server, client_disconnect_frees_everything)
{
    sv_start();
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":500,\"ignore_eos\":true,\"stream\":true}";
    for (int k = 0; k < 3; k++) {
        int fd = sv_raw(body);
        char buf[4096];
        size_t got = 0;
        int64_t deadline = th_now_ms() + 10000;
        while (th_now_ms() < deadline && got < sizeof buf - 1) { /* until the first token chunk */
            ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
            cr_assert(n > 0);
            got += (size_t)n;
            buf[got] = 0;
            if (strstr(buf, "data: {")) break;
        }
        close(fd);
    }
    /* a non-streamed request whose client leaves at once */
    close(sv_raw("{\"prompt\":\"Once\",\"max_tokens\":500,\"ignore_eos\":true}"));
    sv_wait_idle();
    sv_resp m = sv_http(NULL, "/metrics", NULL, NULL, NULL);
    const char *ab = strstr(m.body, "finished_reason=\"abort\"} ");
    cr_assert(ab, "no abort counter");
    cr_assert(atof(ab + strlen("finished_reason=\"abort\"} ")) >= 1, "no request was cancelled");
    sv_resp_free(&m);
    /* the server still serves */
    sv_resp r = sv_post("/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":3}");
    cr_assert_eq(r.status, 200);
    sv_resp_free(&r);
    sv_stop_clean();
}

Test(server, sigterm_drains_streams_then_exits_0)
{
    /* sd_notify: a datagram socket stands in for systemd */
    char sock[100];
    snprintf(sock, sizeof sock, "%.90s/notify", sv.dir);
    int nfd = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    cr_assert(bind(nfd, (struct sockaddr *)&a, sizeof a) == 0);
    setenv("NOTIFY_SOCKET", sock, 1);
    sv_start();
    unsetenv("NOTIFY_SOCKET");
    char msg[512];
    struct timeval tv = {5, 0};
    setsockopt(nfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = recv(nfd, msg, sizeof msg - 1, 0);
    cr_assert(n > 0);
    msg[n] = 0;
    cr_assert(strstr(msg, "READY=1"), "%s", msg);
    enum { N = 4 };
    static sv_job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].body = "{\"prompt\":\"Once\",\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true}}";
        pthread_create(&th[i], NULL, sv_job_run, &jobs[i]);
    }
    int64_t deadline = th_now_ms() + 10000;
    for (int i = 0; i < N; i++)
        while (!atomic_load(&jobs[i].first) && th_now_ms() < deadline) usleep(1000);
    kill(sv.pid, SIGTERM);
    n = recv(nfd, msg, sizeof msg - 1, 0);
    cr_assert(n > 0);
    msg[n] = 0;
    cr_assert(strstr(msg, "STOPPING=1"), "%s", msg);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(jobs[i].status, 200);
        cr_assert(jobs[i].st.done && !jobs[i].st.error, "stream %d cut", i);
        cr_assert_eq(cJSON_GetObjectItem(jobs[i].st.usage, "completion_tokens")->valueint, 400);
        cJSON_Delete(jobs[i].st.usage);
    }
    int status = sv_wait_exit(10000);
    cr_assert(status != -1, "server still running after the drain");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
    close(nfd);
    unlink(sock);
}

Test(server, sse_ping_while_waiting)
{
    /* one running sequence at a time: a stream queued behind long requests waits, and pings */
    const char *args[] = {"--max-seqs", "1", "--sse-ping-interval", "0.01", NULL};
    sv_start_args(args);
    enum { N = 3 };
    static sv_job jobs[N + 1];
    pthread_t th[N + 1];
    for (int i = 0; i < N; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].body = "{\"prompt\":\"Once\",\"max_tokens\":480,\"ignore_eos\":true,\"stream\":true}";
        pthread_create(&th[i], NULL, sv_job_run, &jobs[i]);
    }
    /* one running and two waiting before the probe: it then waits behind two whole streams, not
     * behind whatever of the first one is left (a loaded machine may have finished it) */
    int64_t deadline = th_now_ms() + 10000;
    for (;;) {
        sv_resp m = sv_http(NULL, "/metrics", NULL, NULL, NULL);
        double waiting = sv_metric(m.body, "vllm:num_requests_waiting");
        sv_resp_free(&m);
        if (waiting >= N - 1) break;
        cr_assert(th_now_ms() < deadline, "requests not queued in time");
        usleep(2000);
    }
    sv_resp r = sv_post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"stream\":true}");
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, ": ping\n\n"), "no ping while waiting: %.300s", r.body);
    sv_stream st;
    sv_parse_stream(r.body, 0, &st);
    cr_assert(st.done && !st.error);
    sv_resp_free(&r);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    sv_stop_clean();
}

Test(server, openai_sdk_e2e)
{
    if (system("command -v node >/dev/null 2>&1") != 0 || access("tests/e2e/node_modules/openai/package.json", R_OK)) {
        sv_teardown();
        cr_skip_test("node or tests/e2e/node_modules missing (run: cd tests/e2e && npm ci)");
    }
    sv_start();
    char cmd[2048], model[256];
    const char *slash = strrchr(sv.model, '/');
    snprintf(model, sizeof model, "%s", slash + 1);
    *strstr(model, ".gguf") = 0;
    char expect[1024] = "";
    if (sv.golden) {
        const cJSON *c = sv_case("once_upon_a_time_n64");
        snprintf(expect, sizeof expect, "KVSERVE_MAX_TOKENS=%d KVSERVE_EXPECT='%s'",
                 cJSON_GetObjectItem(c, "max_new_tokens")->valueint, sv_case_text(c));
        cr_assert(!strchr(sv_case_text(c), '\''));
    }
    snprintf(cmd, sizeof cmd, "cd tests/e2e && KVSERVE_URL=http://127.0.0.1:%d/v1 KVSERVE_MODEL='%s' %s "
                              "timeout 60 node openai_sdk.mjs > '%s/sdk.log' 2>&1", sv.port, model, expect, sv.dir);
    int rc = system(cmd);
    char p[400];
    snprintf(p, sizeof p, "%s/sdk.log", sv.dir);
    char *log = tu_read_file(p, NULL);
    unlink(p);
    cr_assert_eq(rc, 0, "openai SDK test failed:\n%s", log ? log : "");
    free(log);
}

Test(server, config_file_documents_every_serve_flag)
{
    const char *conf = "config/kvserve.conf";
    char *text = tu_read_file(conf, NULL);
    if (!text) {
        sv_teardown();
        cr_skip_test("config/kvserve.conf not found (run the tests from the repository root)");
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "'%s' serve --config %s --help 2>&1", th_bin(), conf);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char line[512];
    int n_keys = 0;
    while (fgets(line, sizeof line, p)) {
        char *f = strstr(line, "--");
        if (!f) continue;
        char name[64];
        if (sscanf(f + 2, "%63[a-z0-9-]", name) != 1) continue;
        if (!strcmp(name, "config") || !strcmp(name, "help")) continue;
        char key[80];
        snprintf(key, sizeof key, "\n%s = ", name);
        char key2[80];
        snprintf(key2, sizeof key2, "\n#%s = ", name);
        cr_assert(strstr(text, key) || strstr(text, key2), "config/kvserve.conf does not document '%s'", name);
        n_keys++;
    }
    cr_assert_eq(pclose(p), 0, "the config file does not parse");
    cr_assert_geq(n_keys, 20);
    free(text);
}

Test(server, drain_timeout_cancels_the_rest)
{
    const char *args[] = {"--max-seqs", "1", "--drain-timeout", "0.05", NULL};
    sv_start_args(args);
    enum { N = 3 };
    static sv_job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].body = "{\"prompt\":\"Once\",\"max_tokens\":480,\"ignore_eos\":true,\"stream\":true}";
        pthread_create(&th[i], NULL, sv_job_run, &jobs[i]);
    }
    int64_t deadline = th_now_ms() + 10000;
    for (;;) { /* all three in the engine (one running, two waiting) before the signal */
        sv_resp m = sv_http(NULL, "/metrics", NULL, NULL, NULL);
        double n = sv_metric(m.body, "vllm:num_requests_running") + sv_metric(m.body, "vllm:num_requests_waiting");
        sv_resp_free(&m);
        if (n >= N) break;
        cr_assert(th_now_ms() < deadline, "requests not queued in time");
        usleep(2000);
    }
    kill(sv.pid, SIGTERM);
    int errors = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(jobs[i].status, 200);
        cr_assert(jobs[i].st.done || jobs[i].st.error, "stream %d neither finished nor got an error event", i);
        errors += jobs[i].st.error;
    }
    cr_assert_geq(errors, 1, "the drain timeout cancelled nothing");
    int status = sv_wait_exit(10000);
    cr_assert(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
}

/* Structured outputs over HTTP: a schema-constrained chat (n = 2) parses as JSON with the
 * required keys, a streamed regex completion's deltas add up to a full match, a bad grammar is
 * a 400 naming the place, and a repeated schema is served from the grammar cache. */
Test(server, structured_outputs)
{
    sv_start();
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"a story\"}],\"max_tokens\":300,\"n\":2,\"temperature\":1,"
                       "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"object\","
                       "\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":20},\"pages\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}},"
                       "\"required\":[\"title\",\"pages\"]}}}}";
    for (int rep = 0; rep < 2; rep++) {
        sv_resp r = sv_post("/v1/chat/completions", chat);
        cr_assert_eq(r.status, 200, "%s", r.body);
        cJSON *j = cJSON_Parse(r.body);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "choices"))
        {
            const char *fin = cJSON_GetObjectItem(c, "finish_reason")->valuestring;
            const char *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring;
            if (strcmp(fin, "stop")) continue;
            cJSON *doc = cJSON_Parse(content);
            cr_assert_not_null(doc, "not JSON: %s", content);
            cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "title")), "%s", content);
            double pages = cJSON_GetObjectItem(doc, "pages")->valuedouble;
            cr_assert(pages >= 1 && pages <= 9, "%s", content);
            cJSON_Delete(doc);
        }
        cJSON_Delete(j);
        sv_resp_free(&r);
    }
    sv_resp r = sv_post("/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":40,\"stream\":true,\"guided_regex\":\"[a-z]{2,5}( [a-z]{1,4}){2}\\\\.\"}");
    cr_assert_eq(r.status, 200);
    sv_stream st;
    sv_parse_stream(r.body, 0, &st);
    cr_assert(st.done);
    const char *t = st.text[0];
    size_t n = strlen(t);
    cr_assert(n > 4 && t[n - 1] == '.', "streamed text '%s'", t);
    int spaces = 0;
    for (size_t i = 0; i < n - 1; i++) {
        cr_assert(t[i] == ' ' || (t[i] >= 'a' && t[i] <= 'z'), "streamed text '%s'", t);
        spaces += t[i] == ' ';
    }
    cr_assert_eq(spaces, 2, "streamed text '%s'", t);
    sv_resp_free(&r);
    r = sv_post("/v1/completions", "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\" (b\"}");
    sv_check_error(&r, 400, "invalid_value", "grammar");
    cr_assert(strstr(r.body, "line 1, column 14: unclosed") != NULL, "%s", r.body);
    sv_resp_free(&r);
    r = sv_http(NULL, "/metrics", NULL, NULL, NULL);
    cr_assert_geq(sv_metric(r.body, "kvserve_grammar_cache_hits_total"), 1, "the repeated schema was a cache hit");
    cr_assert_gt(sv_metric(r.body, "kvserve_grammar_masks_total"), 0);
    sv_resp_free(&r);
}
