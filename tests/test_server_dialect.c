/*
 * test_server_dialect.c — the Responses API (/v1/responses) and Anthropic's Messages API
 * (/v1/messages, /v1/messages/count_tokens) over HTTP against a served random-weight model whose
 * GGUF carries a Hermes-style chat template (the one of tests/test_server_tools.c), with an API
 * key (Bearer for OpenAI's clients, x-api-key for Anthropic's):
 *
 *   - each API's answer is the chat completion of the same conversation (same template, same
 *     greedy tokens): instructions / system, input items / content blocks, tool calls and
 *     results translate exactly
 *   - streams: the typed events in order, with sequence numbers (Responses), adding up to the
 *     non-streamed answer
 *   - tools: required / named / any choices give calls; a call and its result go back in
 *   - structured output (text.format), stop sequences, log-probs, reasoning with a parser
 *   - previous_response_id reusing the prefix cache, GET / DELETE, store false, the store bound
 *   - every error path a client can reach, in each API's error shape
 *   - the official SDKs (tests/e2e: openai_responses.mjs, anthropic_sdk.mjs; skipped without
 *     node and tests/e2e/node_modules)
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mkmodel.h"
#include "tests/server_harness.h"
#include "tests/test_util.h"

static const char tdl_template[] =
    "{%- if tools %}<|im_start|>system\nYou may call these functions:\n<tools>\n"
    "{%- for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\n"
    "Answer with <tool_call>{\"name\": …, \"arguments\": …}</tool_call>.<|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
    "{%- for c in m.tool_calls %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content "
    "}}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{%- endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

static th_server tdl_srv;
static char tdl_model[300];
static const char tdl_auth[] = "Authorization: Bearer sekret";

static void tdl_write_model(void)
{
    mkm_params p;
    mkm_params_default(&p);
    static const char *extra[] = {"<|im_start|>", "<|im_end|>"};
    p.extra_tokens = extra;
    p.n_extra = 2;
    p.chat_template = tdl_template;
    tu_write_mkmodel(&p, "dialect", tdl_model, sizeof tdl_model);
}

static void tdl_start(void)
{
    tdl_write_model();
    static const char *const args[] = {"--kv-memory", "32MiB", "--api-key", "sekret", "--response-store", "4",
                                       "--served-model-name", "tiny", NULL};
    th_start(&tdl_srv, tdl_model, args, NULL, TH_WAIT_HEALTHY);
}

static void tdl_stop(void)
{
    th_stop(&tdl_srv);
    unlink(tdl_model);
}

TestSuite(server_dialect, .init = tdl_start, .fini = tdl_stop, .timeout = 240);

/* POSTs body to path with the key (auth: a header line, NULL: Bearer) and expects status. */
static cJSON *tdl_post_auth(const char *path, const char *body, long status, const char *auth)
{
    th_resp r = th_http(tdl_srv.port, NULL, path, body, auth ? auth : tdl_auth);
    cr_assert_eq(r.status, status, "%s: %ld %.800s\nbody: %.300s", path, r.status, r.body, body);
    cJSON *o = cJSON_Parse(r.body);
    cr_assert_not_null(o, "%.300s", r.body);
    th_resp_free(&r);
    return o;
}

static cJSON *tdl_post(const char *path, const char *body, long status)
{
    return tdl_post_auth(path, body, status, NULL);
}

static const char *tdl_str(const cJSON *o, const char *path)
{
    /* a dotted path with [i] indices, e.g. "output[0].content[0].text" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, ".")) {
        char *br = strchr(tok, '[');
        if (br) *br = 0;
        if (*tok) v = cJSON_GetObjectItemCaseSensitive(v, tok);
        while (br && v) {
            v = cJSON_GetArrayItem(v, atoi(br + 1));
            br = strchr(br + 1, '[');
        }
    }
    cr_assert(cJSON_IsString(v), "no string at %s in %s", path, cJSON_PrintUnformatted(o));
    return v->valuestring;
}

static int tdl_int(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    cr_assert(cJSON_IsNumber(v), "no number %s.%s", a, b ? b : "");
    return v->valueint;
}

/* The chat completion's content for the same conversation (greedy). */
static char *tdl_chat_content(const char *messages, int max_tokens)
{
    char body[4096];
    snprintf(body, sizeof body, "{\"messages\": %s, \"max_tokens\": %d, \"temperature\": 0}", messages, max_tokens);
    cJSON *o = tdl_post("/v1/chat/completions", body, 200);
    char *s = strdup(tdl_str(o, "choices[0].message.content"));
    cJSON_Delete(o);
    return s;
}

/* The dialect's text equals the chat completion's. Chat completions end a text at a generated NUL
 * byte (a C string), where these APIs write U+FFFD and go on: the chat text is then a prefix. */
static void tdl_same_text(const char *got, const char *chat, int i)
{
    size_t n = strlen(chat);
    cr_assert(!strncmp(got, chat, n), "body %d: '%s' differs from the chat completion's '%s'", i, got, chat);
    cr_assert(!got[n] || !strncmp(got + n, "\xEF\xBF\xBD", 3), "body %d: '%s' goes on past '%s'", i, got, chat);
}

/* ---- the official SDKs ------------------------------------------------------------------------ */

static void tdl_sdk(const char *script, const char *pkg)
{
    char need[300];
    snprintf(need, sizeof need, "tests/e2e/node_modules/%s/package.json", pkg);
    if (system("command -v node >/dev/null 2>&1") != 0 || access(need, R_OK))
        cr_skip_test("node or tests/e2e/node_modules missing (run: cd tests/e2e && npm ci)");
    char cmd[2048], log[400];
    snprintf(log, sizeof log, "%s/%s.log", tdl_srv.dir, script);
    snprintf(cmd, sizeof cmd,
             "cd tests/e2e && KVSERVE_URL=http://127.0.0.1:%d/v1 KVSERVE_BASE=http://127.0.0.1:%d KVSERVE_MODEL=tiny "
             "KVSERVE_API_KEY=sekret timeout 120 node %s > '%s' 2>&1",
             tdl_srv.port, tdl_srv.port, script, log);
    int rc = system(cmd);
    char *out = tu_read_file(log, NULL);
    unlink(log);
    cr_assert_eq(rc, 0, "%s failed:\n%s", script, out ? out : "");
    free(out);
}

Test(server_dialect, openai_sdk_responses)
{
    tdl_sdk("openai_responses.mjs", "openai");
}

Test(server_dialect, anthropic_sdk_messages)
{
    tdl_sdk("anthropic_sdk.mjs", "@anthropic-ai/sdk");
}

/* ---- answers equal chat completions ------------------------------------------------------------- */

Test(server_dialect, responses_answer_what_chat_completions_answers)
{
    char *want = tdl_chat_content("[{\"role\": \"system\", \"content\": \"You tell short stories.\"}, "
                                  "{\"role\": \"user\", \"content\": \"Tell me a story.\"}]", 10);
    const char *bodies[] = {
        "{\"input\": \"Tell me a story.\", \"instructions\": \"You tell short stories.\", \"max_output_tokens\": 10, \"temperature\": 0}",
        "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"Tell me \"}, "
        "{\"type\": \"input_text\", \"text\": \"a story.\"}]}], \"instructions\": \"You tell short stories.\", "
        "\"max_output_tokens\": 10, \"temperature\": 0}",
        "{\"input\": [{\"type\": \"message\", \"role\": \"system\", \"content\": \"You tell short stories.\"}, "
        "{\"type\": \"message\", \"role\": \"user\", \"content\": \"Tell me a story.\"}], \"max_output_tokens\": 10, "
        "\"temperature\": 0, \"model\": \"tiny\"}",
    };
    for (int i = 0; i < 3; i++) {
        cJSON *o = tdl_post("/v1/responses", bodies[i], 200);
        cr_assert_str_eq(tdl_str(o, "object"), "response");
        cr_assert_str_eq(tdl_str(o, "status"), "incomplete");
        cr_assert_str_eq(tdl_str(o, "incomplete_details.reason"), "max_output_tokens");
        cr_assert_str_eq(tdl_str(o, "model"), "tiny");
        cr_assert_str_eq(tdl_str(o, "output[0].type"), "message");
        cr_assert_str_eq(tdl_str(o, "output[0].role"), "assistant");
        cr_assert_str_eq(tdl_str(o, "output[0].content[0].type"), "output_text");
        tdl_same_text(tdl_str(o, "output[0].content[0].text"), want, i);
        cr_assert_eq(tdl_int(o, "usage", "output_tokens"), 10);
        cr_assert(!strncmp(tdl_str(o, "id"), "resp_", 5));
        cJSON_Delete(o);
    }
    free(want);
    /* a function call and its output as items: what chat completions renders from tool_calls */
    want = tdl_chat_content("[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, "
                            "\"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": "
                            "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", "
                            "\"tool_call_id\": \"call_1\", \"content\": \"sunny\"}]", 6);
    cJSON *o = tdl_post("/v1/responses",
                        "{\"input\": [{\"role\": \"user\", \"content\": \"Weather?\"}, {\"type\": \"function_call\", "
                        "\"call_id\": \"call_1\", \"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}, "
                        "{\"type\": \"function_call_output\", \"call_id\": \"call_1\", \"output\": \"sunny\"}], "
                        "\"max_output_tokens\": 6, \"temperature\": 0}", 200);
    tdl_same_text(tdl_str(o, "output[0].content[0].text"), want, 9);
    cJSON_Delete(o);
    free(want);
}

Test(server_dialect, messages_answer_what_chat_completions_answers)
{
    char *want = tdl_chat_content("[{\"role\": \"system\", \"content\": \"You tell short stories.\"}, "
                                  "{\"role\": \"user\", \"content\": \"Tell me a story.\"}]", 10);
    const char *bodies[] = {
        "{\"system\": \"You tell short stories.\", \"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story.\"}], "
        "\"max_tokens\": 10, \"temperature\": 0}",
        "{\"system\": [{\"type\": \"text\", \"text\": \"You tell short stories.\"}], \"messages\": [{\"role\": \"user\", "
        "\"content\": [{\"type\": \"text\", \"text\": \"Tell me \"}, {\"type\": \"text\", \"text\": \"a story.\"}]}], "
        "\"max_tokens\": 10, \"temperature\": 0, \"model\": \"tiny\", \"metadata\": {\"user_id\": \"u1\"}}",
    };
    for (int i = 0; i < 2; i++) {
        cJSON *o = tdl_post("/v1/messages", bodies[i], 200);
        cr_assert_str_eq(tdl_str(o, "type"), "message");
        cr_assert_str_eq(tdl_str(o, "role"), "assistant");
        cr_assert_str_eq(tdl_str(o, "stop_reason"), "max_tokens");
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "stop_sequence")));
        cr_assert_str_eq(tdl_str(o, "content[0].type"), "text");
        tdl_same_text(tdl_str(o, "content[0].text"), want, i);
        cr_assert_eq(tdl_int(o, "usage", "output_tokens"), 10);
        cr_assert(!strncmp(tdl_str(o, "id"), "msg_", 4));
        /* input tokens apart from those read from the prefix cache, as Anthropic counts them */
        int in = tdl_int(o, "usage", "input_tokens") + tdl_int(o, "usage", "cache_read_input_tokens");
        cJSON *n = tdl_post("/v1/messages/count_tokens", bodies[i], 200);
        cr_assert_eq(tdl_int(n, "input_tokens", NULL), in);
        cJSON_Delete(n);
        cJSON_Delete(o);
    }
    free(want);
    /* tool_use and tool_result blocks: what chat completions renders from tool_calls and tool messages */
    want = tdl_chat_content("[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": \"Let me see.\", "
                            "\"tool_calls\": [{\"id\": \"toolu_1\", \"type\": \"function\", \"function\": {\"name\": "
                            "\"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", "
                            "\"tool_call_id\": \"toolu_1\", \"content\": \"sunny\"}, {\"role\": \"user\", \"content\": \"Thanks\"}]", 6);
    cJSON *o = tdl_post("/v1/messages",
                        "{\"max_tokens\": 6, \"temperature\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}, "
                        "{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"Let me see.\"}, {\"type\": "
                        "\"tool_use\", \"id\": \"toolu_1\", \"name\": \"get_weather\", \"input\": {\"city\": \"Paris\"}}]}, "
                        "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\", "
                        "\"content\": [{\"type\": \"text\", \"text\": \"sunny\"}]}, {\"type\": \"text\", \"text\": \"Thanks\"}]}]}",
                        200);
    tdl_same_text(tdl_str(o, "content[0].text"), want, 9);
    cJSON_Delete(o);
    free(want);
}

/* ---- streams ------------------------------------------------------------------------------------- */

typedef struct tdl_ev {
    char type[64];
    cJSON *data;
} tdl_ev;

/* Splits an SSE body into its named events (at most cap); returns how many. Comments (pings)
 * are skipped; every event must have an event: line whose name is its data's "type". */
static int tdl_events(const char *body, tdl_ev *ev, int cap)
{
    int n = 0;
    for (const char *p = body; *p && n < cap;) {
        const char *end = strstr(p, "\n\n");
        cr_assert_not_null(end, "unterminated event: %.200s", p);
        if (*p == ':') {
            p = end + 2;
            continue;
        }
        cr_assert(!strncmp(p, "event: ", 7), "no event line: %.200s", p);
        const char *nl = strchr(p, '\n');
        snprintf(ev[n].type, sizeof ev[n].type, "%.*s", (int)(nl - p - 7), p + 7);
        cr_assert(!strncmp(nl + 1, "data: ", 6), "no data line: %.200s", p);
        ev[n].data = cJSON_ParseWithLength(nl + 7, (size_t)(end - nl - 7));
        cr_assert_not_null(ev[n].data, "bad data: %.200s", nl + 7);
        cr_assert_str_eq(tdl_str(ev[n].data, "type"), ev[n].type);
        n++;
        p = end + 2;
    }
    return n;
}

static char *tdl_stream(const char *path, const char *body)
{
    th_resp r = th_http(tdl_srv.port, NULL, path, body, tdl_auth);
    cr_assert_eq(r.status, 200, "%ld %.300s", r.status, r.body);
    cr_assert(strstr(r.headers, "text/event-stream"));
    cr_assert_null(strstr(r.body, "[DONE]"), "these streams end with their own events");
    char *b = strdup(r.body);
    th_resp_free(&r);
    return b;
}

Test(server_dialect, responses_stream_typed_events)
{
    const char *req = "{\"input\": \"Tell me a story.\", \"max_output_tokens\": 9, \"temperature\": 0%s}";
    char body[512];
    snprintf(body, sizeof body, req, "");
    cJSON *whole = tdl_post("/v1/responses", body, 200);
    snprintf(body, sizeof body, req, ", \"stream\": true");
    char *s = tdl_stream("/v1/responses", body);
    tdl_ev ev[64];
    int n = tdl_events(s, ev, 64);
    cr_assert_geq(n, 8);
    const char *order[] = {"response.created", "response.in_progress", "response.output_item.added",
                           "response.content_part.added"};
    for (int i = 0; i < 4; i++) cr_assert_str_eq(ev[i].type, order[i]);
    const char *tail[] = {"response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"};
    for (int i = 0; i < 4; i++) cr_assert_str_eq(ev[n - 4 + i].type, tail[i]);
    char text[1024] = "";
    for (int i = 0; i < n; i++) {
        cr_assert_eq(tdl_int(ev[i].data, "sequence_number", NULL), i);
        if (!strcmp(ev[i].type, "response.output_text.delta")) {
            strcat(text, tdl_str(ev[i].data, "delta"));
            cr_assert_str_eq(tdl_str(ev[i].data, "item_id"), tdl_str(ev[2].data, "item.id"));
        }
    }
    const char *want = tdl_str(whole, "output[0].content[0].text");
    cr_assert_str_eq(text, want, "the deltas add up to the answer");
    cr_assert_str_eq(tdl_str(ev[n - 4].data, "text"), want);
    cr_assert_str_eq(tdl_str(ev[n - 1].data, "response.output[0].content[0].text"), want);
    cr_assert_str_eq(tdl_str(ev[0].data, "response.status"), "in_progress");
    cr_assert_eq(tdl_int(cJSON_GetObjectItem(ev[n - 1].data, "response"), "usage", "output_tokens"), 9);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    free(s);
    cJSON_Delete(whole);
}

Test(server_dialect, messages_stream_typed_events)
{
    const char *req = "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story.\"}], \"max_tokens\": 9, "
                      "\"temperature\": 0%s}";
    char body[512];
    snprintf(body, sizeof body, req, "");
    cJSON *whole = tdl_post("/v1/messages", body, 200);
    snprintf(body, sizeof body, req, ", \"stream\": true");
    char *s = tdl_stream("/v1/messages", body);
    tdl_ev ev[64];
    int n = tdl_events(s, ev, 64);
    cr_assert_str_eq(ev[0].type, "message_start");
    cr_assert_str_eq(ev[1].type, "ping");
    cr_assert_str_eq(ev[2].type, "content_block_start");
    cr_assert_str_eq(tdl_str(ev[2].data, "content_block.type"), "text");
    cr_assert_str_eq(ev[n - 3].type, "content_block_stop");
    cr_assert_str_eq(ev[n - 2].type, "message_delta");
    cr_assert_str_eq(ev[n - 1].type, "message_stop");
    cr_assert_str_eq(tdl_str(ev[n - 2].data, "delta.stop_reason"), "max_tokens");
    cr_assert_eq(tdl_int(ev[n - 2].data, "usage", "output_tokens"), 9);
    cr_assert_str_eq(tdl_str(ev[0].data, "message.role"), "assistant");
    char text[1024] = "";
    for (int i = 3; i < n - 3; i++) {
        cr_assert_str_eq(ev[i].type, "content_block_delta");
        cr_assert_str_eq(tdl_str(ev[i].data, "delta.type"), "text_delta");
        strcat(text, tdl_str(ev[i].data, "delta.text"));
    }
    cr_assert_str_eq(text, tdl_str(whole, "content[0].text"));
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    free(s);
    cJSON_Delete(whole);
}

/* ---- tools, formats, log-probs ---------------------------------------------------------------- */

static const char tdl_rtools[] = "[{\"type\": \"function\", \"name\": \"get_weather\", \"description\": \"Weather\", "
                                 "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", "
                                 "\"maxLength\": 12}}, \"required\": [\"city\"]}}, {\"type\": \"function\", \"name\": "
                                 "\"get_time\", \"parameters\": {\"type\": \"object\", \"properties\": {\"zone\": {\"enum\": "
                                 "[\"UTC\", \"CET\"]}}, \"required\": [\"zone\"]}}]";

Test(server_dialect, responses_tool_calls_formats_and_logprobs)
{
    char body[4096];
    snprintf(body, sizeof body, "{\"input\": \"Weather in Paris?\", \"tools\": %s, \"tool_choice\": \"required\", "
                                "\"parallel_tool_calls\": false, \"max_output_tokens\": 64, \"temperature\": 0}", tdl_rtools);
    cJSON *o = tdl_post("/v1/responses", body, 200);
    cJSON *out = cJSON_GetObjectItem(o, "output"), *it;
    int calls = 0;
    cJSON_ArrayForEach(it, out) if (!strcmp(tdl_str(it, "type"), "function_call"))
    {
        calls++;
        cr_assert(!strncmp(tdl_str(it, "call_id"), "call_", 5));
        cr_assert(!strncmp(tdl_str(it, "id"), "fc_", 3));
        cr_assert_str_eq(tdl_str(it, "status"), "completed");
        cJSON *a = cJSON_Parse(tdl_str(it, "arguments"));
        cr_assert(cJSON_IsObject(a), "%s", tdl_str(it, "arguments"));
        cJSON_Delete(a);
    }
    cr_assert_eq(calls, 1, "required, not parallel: one call");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tools")), 2, "tools echoed");
    cJSON_Delete(o);
    snprintf(body, sizeof body, "{\"input\": \"Time?\", \"tools\": %s, \"tool_choice\": {\"type\": \"function\", \"name\": "
                                "\"get_time\"}, \"max_output_tokens\": 32, \"temperature\": 0, \"stream\": true}", tdl_rtools);
    char *s = tdl_stream("/v1/responses", body);
    tdl_ev ev[128];
    int n = tdl_events(s, ev, 128), added = 0;
    char args[512] = "";
    for (int i = 0; i < n; i++) {
        if (!strcmp(ev[i].type, "response.output_item.added") && !strcmp(tdl_str(ev[i].data, "item.type"), "function_call")) {
            added++;
            cr_assert_str_eq(tdl_str(ev[i].data, "item.name"), "get_time");
        }
        if (!strcmp(ev[i].type, "response.function_call_arguments.delta")) strcat(args, tdl_str(ev[i].data, "delta"));
        if (!strcmp(ev[i].type, "response.function_call_arguments.done")) cr_assert_str_eq(tdl_str(ev[i].data, "arguments"), args);
    }
    cr_assert_eq(added, 1);
    cJSON *a = cJSON_Parse(args);
    const cJSON *zone = cJSON_GetObjectItem(a, "zone");
    cr_assert(cJSON_IsString(zone) && (!strcmp(zone->valuestring, "UTC") || !strcmp(zone->valuestring, "CET")), "%s", args);
    cJSON_Delete(a);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    free(s);
    /* text.format json_schema: the structured-output engine */
    o = tdl_post("/v1/responses",
                 "{\"input\": \"A person\", \"max_output_tokens\": 48, \"temperature\": 0, \"text\": {\"format\": "
                 "{\"type\": \"json_schema\", \"name\": \"p\", \"strict\": true, \"schema\": {\"type\": \"object\", "
                 "\"properties\": {\"age\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}}, \"required\": "
                 "[\"age\"], \"additionalProperties\": false}}}}",
                 200);
    a = cJSON_Parse(tdl_str(o, "output[0].content[0].text"));
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(a, "age")), "%s", tdl_str(o, "output[0].content[0].text"));
    cr_assert_str_eq(tdl_str(o, "text.format.type"), "json_schema");
    cJSON_Delete(a);
    cJSON_Delete(o);
    o = tdl_post("/v1/responses", "{\"input\": \"x\", \"max_output_tokens\": 24, \"text\": {\"format\": {\"type\": "
                                  "\"json_object\"}}}", 200);
    cJSON_Delete(o);
    /* log-probs: include message.output_text.logprobs with top_logprobs */
    o = tdl_post("/v1/responses", "{\"input\": \"x\", \"max_output_tokens\": 3, \"temperature\": 0, \"include\": "
                                  "[\"message.output_text.logprobs\"], \"top_logprobs\": 2}", 200);
    cJSON *lp = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "output"), 0), "content"), 0), "logprobs");
    cr_assert_eq(cJSON_GetArraySize(lp), 3);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(lp, 0), "top_logprobs")), 2);
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetArrayItem(lp, 0), "logprob")));
    cJSON_Delete(o);
}

Test(server_dialect, messages_tools_and_stop_sequences)
{
    const char *tools = "[{\"name\": \"get_weather\", \"description\": \"Weather\", \"input_schema\": {\"type\": \"object\", "
                        "\"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 12}}, \"required\": [\"city\"]}}]";
    char body[2048];
    snprintf(body, sizeof body, "{\"max_tokens\": 64, \"temperature\": 0, \"messages\": [{\"role\": \"user\", \"content\": "
                                "\"Weather?\"}], \"tools\": %s, \"tool_choice\": {\"type\": \"any\"}}", tools);
    cJSON *o = tdl_post("/v1/messages", body, 200);
    cr_assert_str_eq(tdl_str(o, "stop_reason"), "tool_use");
    cJSON *b, *use = NULL;
    cJSON_ArrayForEach(b, cJSON_GetObjectItem(o, "content")) if (!strcmp(tdl_str(b, "type"), "tool_use")) use = b;
    cr_assert_not_null(use);
    cr_assert_str_eq(tdl_str(use, "name"), "get_weather");
    cr_assert(!strncmp(tdl_str(use, "id"), "toolu_", 6));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(use, "input"), "city")));
    cJSON_Delete(o);
    /* streamed: content_block_start of a tool_use, input_json_delta pieces adding up to its input */
    snprintf(body, sizeof body, "{\"max_tokens\": 64, \"temperature\": 0, \"stream\": true, \"messages\": [{\"role\": "
                                "\"user\", \"content\": \"Weather?\"}], \"tools\": %s, \"tool_choice\": {\"type\": \"tool\", "
                                "\"name\": \"get_weather\"}}", tools);
    char *s = tdl_stream("/v1/messages", body);
    tdl_ev ev[128];
    int n = tdl_events(s, ev, 128), starts = 0;
    char json[512] = "";
    for (int i = 0; i < n; i++) {
        if (!strcmp(ev[i].type, "content_block_start") && !strcmp(tdl_str(ev[i].data, "content_block.type"), "tool_use"))
            starts++;
        if (!strcmp(ev[i].type, "content_block_delta") && !strcmp(tdl_str(ev[i].data, "delta.type"), "input_json_delta"))
            strcat(json, tdl_str(ev[i].data, "delta.partial_json"));
    }
    cr_assert_eq(starts, 1);
    cJSON *in = cJSON_Parse(json);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(in, "city")), "%s", json);
    cJSON_Delete(in);
    cr_assert_str_eq(tdl_str(ev[n - 2].data, "delta.stop_reason"), "tool_use");
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    free(s);
    /* a stop sequence taken from the answer: stop_reason stop_sequence, naming it */
    o = tdl_post("/v1/messages", "{\"max_tokens\": 12, \"temperature\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"Go\"}]}", 200);
    char stop[8] = "";
    const char *t = tdl_str(o, "content[0].text");
    for (size_t i = 1; t[i] && t[i + 1] && !stop[0]; i++) /* two letters past the first character */
        if (isalpha((unsigned char)t[i]) && isalpha((unsigned char)t[i + 1])) snprintf(stop, sizeof stop, "%.2s", t + i);
    cr_assert(stop[0], "no two letters in %s", t);
    cJSON_Delete(o);
    snprintf(body, sizeof body, "{\"max_tokens\": 12, \"temperature\": 0, \"messages\": [{\"role\": \"user\", \"content\": "
                                "\"Go\"}], \"stop_sequences\": [\"%s\"]}", stop);
    o = tdl_post("/v1/messages", body, 200);
    cr_assert_str_eq(tdl_str(o, "stop_reason"), "stop_sequence");
    cr_assert_str_eq(tdl_str(o, "stop_sequence"), stop);
    cJSON_Delete(o);
}

/* ---- the store ---------------------------------------------------------------------------------- */

Test(server_dialect, previous_response_id_get_delete_and_the_bound)
{
    cJSON *a = tdl_post("/v1/responses", "{\"input\": \"My name is Ada and I like long stories.\", \"max_output_tokens\": 6, "
                                         "\"temperature\": 0}", 200);
    char id[128], body[512];
    snprintf(id, sizeof id, "%s", tdl_str(a, "id"));
    snprintf(body, sizeof body, "{\"input\": \"What is my name?\", \"previous_response_id\": \"%s\", "
                                "\"max_output_tokens\": 6, \"temperature\": 0}", id);
    cJSON *b = tdl_post("/v1/responses", body, 200);
    cr_assert_str_eq(tdl_str(b, "previous_response_id"), id);
    int in_a = tdl_int(a, "usage", "input_tokens"), in_b = tdl_int(b, "usage", "input_tokens");
    cr_assert_gt(in_b, in_a + 6, "the earlier turn is in the prompt (%d vs %d)", in_b, in_a);
    const cJSON *det = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "usage"), "input_tokens_details");
    cr_assert_gt(cJSON_GetObjectItem(det, "cached_tokens")->valueint, 0, "the earlier turn comes from the prefix cache");
    /* a third turn continues the second: both earlier turns are in it */
    snprintf(body, sizeof body, "{\"input\": \"Go on.\", \"previous_response_id\": \"%s\", \"max_output_tokens\": 4}", tdl_str(b, "id"));
    cJSON *c = tdl_post("/v1/responses", body, 200);
    cr_assert_gt(tdl_int(c, "usage", "input_tokens"), in_b + 6);
    cJSON_Delete(c);
    /* GET returns the stored object; DELETE removes it */
    char path[256];
    snprintf(path, sizeof path, "/v1/responses/%s", id);
    th_resp r = th_http(tdl_srv.port, "GET", path, NULL, tdl_auth);
    cr_assert_eq(r.status, 200);
    cJSON *got = cJSON_Parse(r.body);
    cr_assert_str_eq(tdl_str(got, "output[0].content[0].text"), tdl_str(a, "output[0].content[0].text"));
    cJSON_Delete(got);
    th_resp_free(&r);
    r = th_http(tdl_srv.port, "DELETE", path, NULL, tdl_auth);
    cr_assert_eq(r.status, 200, "%s", r.body);
    got = cJSON_Parse(r.body);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(got, "deleted")));
    cr_assert_str_eq(tdl_str(got, "id"), id);
    cJSON_Delete(got);
    th_resp_free(&r);
    r = th_http(tdl_srv.port, "GET", path, NULL, tdl_auth);
    cr_assert_eq(r.status, 404);
    th_resp_free(&r);
    r = th_http(tdl_srv.port, "DELETE", path, NULL, tdl_auth);
    cr_assert_eq(r.status, 404);
    th_resp_free(&r);
    r = th_http(tdl_srv.port, "PUT", path, NULL, tdl_auth);
    cr_assert_eq(r.status, 405);
    th_resp_free(&r);
    cJSON *e = tdl_post("/v1/responses", body, 200); /* b is still there */
    cJSON_Delete(e);
    snprintf(body, sizeof body, "{\"input\": \"x\", \"previous_response_id\": \"%s\"}", id);
    e = tdl_post("/v1/responses", body, 400);
    cr_assert_str_eq(tdl_str(e, "error.code"), "previous_response_not_found");
    cr_assert_str_eq(tdl_str(e, "error.param"), "previous_response_id");
    cJSON_Delete(e);
    /* store false: not kept */
    cJSON *u = tdl_post("/v1/responses", "{\"input\": \"x\", \"store\": false, \"max_output_tokens\": 2}", 200);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(u, "store")));
    snprintf(path, sizeof path, "/v1/responses/%s", tdl_str(u, "id"));
    r = th_http(tdl_srv.port, "GET", path, NULL, tdl_auth);
    cr_assert_eq(r.status, 404);
    th_resp_free(&r);
    cJSON_Delete(u);
    /* --response-store 4: four more stored responses push b out */
    for (int i = 0; i < 4; i++) cJSON_Delete(tdl_post("/v1/responses", "{\"input\": \"y\", \"max_output_tokens\": 1}", 200));
    snprintf(path, sizeof path, "/v1/responses/%s", tdl_str(b, "id"));
    r = th_http(tdl_srv.port, "GET", path, NULL, tdl_auth);
    cr_assert_eq(r.status, 404, "the least recently used response was dropped");
    th_resp_free(&r);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* ---- errors ----------------------------------------------------------------------------------- */

static void tdl_openai_error(const char *body, long status, const char *code, const char *param)
{
    cJSON *o = tdl_post("/v1/responses", body, status);
    cr_assert_str_eq(tdl_str(o, "error.code"), code, "%s", body);
    if (param) cr_assert_str_eq(tdl_str(o, "error.param"), param, "%s", body);
    cJSON_Delete(o);
}

Test(server_dialect, responses_errors_name_the_field)
{
    tdl_openai_error("{}", 400, "missing_required_parameter", "input");
    tdl_openai_error("{\"input\": 3}", 400, "invalid_type", "input");
    tdl_openai_error("{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", \"image_url\": \"x\"}]}]}",
                     400, "invalid_value", "input[0].content[0]");
    tdl_openai_error("{\"input\": [{\"type\": \"item_reference\", \"id\": \"msg_1\"}]}", 400, "invalid_value", "input[0].type");
    tdl_openai_error("{\"input\": [{\"type\": \"web_search_call\", \"id\": \"ws_1\"}]}", 400, "invalid_value", "input[0].type");
    tdl_openai_error("{\"input\": [{\"role\": \"robot\", \"content\": \"x\"}]}", 400, "invalid_value", "input[0].role");
    tdl_openai_error("{\"input\": [{\"type\": \"function_call\", \"name\": \"f\", \"arguments\": \"{}\"}]}", 400,
                     "missing_required_parameter", "input[0].call_id");
    tdl_openai_error("{\"input\": \"x\", \"tools\": [{\"type\": \"file_search\", \"vector_store_ids\": []}]}", 400,
                     "invalid_value", "tools[0].type");
    tdl_openai_error("{\"input\": \"x\", \"tools\": [{\"type\": \"function\"}]}", 400, "invalid_type", "tools[0].name");
    tdl_openai_error("{\"input\": \"x\", \"tool_choice\": {\"type\": \"web_search_preview\"}}", 400, "invalid_value", "tool_choice");
    tdl_openai_error("{\"input\": \"x\", \"background\": true}", 400, "invalid_value", "background");
    tdl_openai_error("{\"input\": \"x\", \"conversation\": \"conv_1\"}", 400, "invalid_value", "conversation");
    tdl_openai_error("{\"input\": \"x\", \"prompt\": {\"id\": \"pmpt_1\"}}", 400, "invalid_value", "prompt");
    tdl_openai_error("{\"input\": \"x\", \"truncation\": \"auto\"}", 400, "invalid_value", "truncation");
    tdl_openai_error("{\"input\": \"x\", \"include\": [\"file_search_call.results\"]}", 400, "invalid_value", "include");
    tdl_openai_error("{\"input\": \"x\", \"max_output_tokens\": 0}", 400, "invalid_value", "max_output_tokens");
    tdl_openai_error("{\"input\": \"x\", \"temperature\": 3}", 400, "invalid_value", "temperature");
    tdl_openai_error("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"x\"}}}", 400,
                     "missing_required_parameter", "text.format.schema");
    tdl_openai_error("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"yaml\"}}}", 400, "invalid_value", "text.format.type");
    tdl_openai_error("{\"input\": \"x\", \"instructions\": 5}", 400, "invalid_type", "instructions");
    tdl_openai_error("{\"input\": \"x\", \"store\": \"yes\"}", 400, "invalid_type", "store");
    tdl_openai_error("{\"input\": \"x\", \"previous_response_id\": \"resp_nope\"}", 400, "previous_response_not_found",
                     "previous_response_id");
    tdl_openai_error("{\"input\": \"x\", \"model\": \"gpt-5\"}", 404, "model_not_found", "model");
    tdl_openai_error("[]", 400, "invalid_json", NULL);
    /* a tool_choice naming a function that is not among the tools: the chat parser's check */
    char body[2048];
    snprintf(body, sizeof body, "{\"input\": \"x\", \"tools\": %s, \"tool_choice\": {\"type\": \"function\", \"name\": \"nope\"}}", tdl_rtools);
    tdl_openai_error(body, 400, "invalid_value", "tool_choice");
    /* without the key */
    th_resp r = th_http(tdl_srv.port, NULL, "/v1/responses", "{\"input\": \"x\"}", NULL);
    cr_assert_eq(r.status, 401);
    cr_assert(strstr(r.body, "\"invalid_api_key\""), "%s", r.body);
    th_resp_free(&r);
}

/* Expects an Anthropic-shaped error of type at status. */
static void tdl_anthropic_error(const char *path, const char *body, long status, const char *type, const char *auth)
{
    cJSON *o = tdl_post_auth(path, body, status, auth);
    cr_assert_str_eq(tdl_str(o, "type"), "error", "%s", body);
    cr_assert_str_eq(tdl_str(o, "error.type"), type, "%s", body);
    cr_assert(strlen(tdl_str(o, "error.message")) > 0);
    cr_assert_null(cJSON_GetObjectItem(o, "code"));
    cJSON_Delete(o);
}

Test(server_dialect, messages_errors_in_anthropic_shape)
{
    const char *p = "/v1/messages";
    tdl_anthropic_error(p, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4}", 400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": []}", 400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", 400,
                        "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", "
                           "\"source\": {}}]}]}", 400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
                           "[{\"type\": \"web_search_20250305\", \"name\": \"web_search\"}]}", 400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": 1.5}",
                        400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": "
                           "{\"type\": \"tool\", \"name\": \"nope\"}}", 400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"thinking\": "
                           "{\"type\": \"sometimes\"}}", 400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"container\": \"c\"}",
                        400, "invalid_request_error", NULL);
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"model\": \"claude-opus\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
                        404, "not_found_error", NULL);
    tdl_anthropic_error(p, "not json", 400, "invalid_request_error", NULL);
    tdl_anthropic_error("/v1/messages/count_tokens", "{\"messages\": 1}", 400, "invalid_request_error", NULL);
    /* admission errors of these routes are in Anthropic's shape too */
    tdl_anthropic_error(p, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 401,
                        "authentication_error", "x-api-key: wrong");
    th_resp r = th_http(tdl_srv.port, "GET", p, NULL, tdl_auth);
    cr_assert_eq(r.status, 405);
    cr_assert(strstr(r.body, "\"type\":\"error\""), "%s", r.body);
    th_resp_free(&r);
    /* Anthropic's clients send the key as x-api-key */
    cJSON *o = tdl_post_auth(p, "{\"max_tokens\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 200,
                             "x-api-key: sekret\r\nanthropic-version: 2023-06-01");
    cJSON_Delete(o);
    /* thinking enabled / disabled reach the template as enable_thinking (accepted by any template) */
    o = tdl_post(p, "{\"max_tokens\": 2, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 1024}, \"messages\": "
                    "[{\"role\": \"user\", \"content\": \"x\"}]}", 200);
    cJSON_Delete(o);
}

/* ---- reasoning ---------------------------------------------------------------------------------- */

Test(server_dialect, reasoning_items_and_thinking_blocks)
{
    /* deepseek_r1: the output starts inside the reasoning; a random model never closes it */
    th_server rs;
    static const char *const args[] = {"--kv-memory", "32MiB", "--reasoning-parser", "deepseek_r1", NULL};
    th_start(&rs, tdl_model, args, NULL, TH_WAIT_HEALTHY);
    th_resp r = th_http(rs.port, NULL, "/v1/responses", "{\"input\": \"x\", \"max_output_tokens\": 6, \"temperature\": 0}", NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *o = cJSON_Parse(r.body);
    cr_assert_str_eq(tdl_str(o, "output[0].type"), "reasoning");
    cr_assert_str_eq(tdl_str(o, "output[0].content[0].type"), "reasoning_text");
    char reasoning[512];
    snprintf(reasoning, sizeof reasoning, "%s", tdl_str(o, "output[0].content[0].text"));
    cr_assert_gt(strlen(reasoning), 0);
    cJSON_Delete(o);
    th_resp_free(&r);
    r = th_http(rs.port, NULL, "/v1/responses", "{\"input\": \"x\", \"max_output_tokens\": 6, \"temperature\": 0, \"stream\": true}", NULL);
    tdl_ev ev[64];
    int n = tdl_events(r.body, ev, 64);
    char text[512] = "";
    for (int i = 0; i < n; i++)
        if (!strcmp(ev[i].type, "response.reasoning_text.delta")) strcat(text, tdl_str(ev[i].data, "delta"));
    cr_assert_str_eq(text, reasoning);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    th_resp_free(&r);
    r = th_http(rs.port, NULL, "/v1/messages", "{\"max_tokens\": 6, \"temperature\": 0, \"messages\": [{\"role\": \"user\", "
                                               "\"content\": \"x\"}]}", NULL);
    o = cJSON_Parse(r.body);
    cr_assert_str_eq(tdl_str(o, "content[0].type"), "thinking");
    cr_assert_str_eq(tdl_str(o, "content[0].thinking"), reasoning);
    cJSON_Delete(o);
    th_resp_free(&r);
    r = th_http(rs.port, NULL, "/v1/messages", "{\"max_tokens\": 6, \"temperature\": 0, \"stream\": true, \"messages\": "
                                               "[{\"role\": \"user\", \"content\": \"x\"}]}", NULL);
    n = tdl_events(r.body, ev, 64);
    text[0] = 0;
    int sig = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(ev[i].type, "content_block_delta") && !strcmp(tdl_str(ev[i].data, "delta.type"), "thinking_delta"))
            strcat(text, tdl_str(ev[i].data, "delta.thinking"));
        if (!strcmp(ev[i].type, "content_block_delta") && !strcmp(tdl_str(ev[i].data, "delta.type"), "signature_delta")) sig++;
    }
    cr_assert_str_eq(text, reasoning);
    cr_assert_eq(sig, 1);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    th_resp_free(&r);
    /* a reasoning item given back in the input reaches the template as reasoning_content */
    r = th_http(rs.port, NULL, "/v1/responses",
                "{\"input\": [{\"role\": \"user\", \"content\": \"x\"}, {\"type\": \"reasoning\", \"id\": \"rs_1\", "
                "\"summary\": [], \"content\": [{\"type\": \"reasoning_text\", \"text\": \"hmm\"}]}, {\"role\": "
                "\"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"ok\"}]}, {\"role\": \"user\", "
                "\"content\": \"y\"}], \"max_output_tokens\": 2}", NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    th_resp_free(&r);
    th_stop(&rs);
}

Test(server_dialect, metrics_count_the_new_routes)
{
    th_resp r = th_http(tdl_srv.port, "GET", "/metrics", NULL, NULL);
    const char *k = "vllm:request_success_total{model_name=\"tiny\",engine=\"0\",finished_reason=\"length\"} ";
    const char *at = strstr(r.body, k);
    cr_assert_not_null(at, "%.400s", r.body);
    double before = atof(at + strlen(k));
    th_resp_free(&r);
    cJSON_Delete(tdl_post("/v1/responses", "{\"input\": \"x\", \"max_output_tokens\": 2}", 200));
    cJSON_Delete(tdl_post("/v1/messages", "{\"max_tokens\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 200));
    r = th_http(tdl_srv.port, "GET", "/metrics", NULL, NULL);
    at = strstr(r.body, k);
    cr_assert_eq(atof(at + strlen(k)), before + 2);
    th_resp_free(&r);
    char *log = th_log(&tdl_srv);
    cr_assert(log && strstr(log, "POST /v1/responses 200") && strstr(log, "POST /v1/messages 200"), "the access log");
    free(log);
}

/* Admission covers the new routes as the old ones: overload (503 with Retry-After, Anthropic's
 * overloaded_error on /v1/messages) and CORS headers. */
Test(server_dialect, overload_and_cors_cover_the_new_routes)
{
    th_server o;
    static const char *const args[] = {"--kv-memory", "32MiB", "--max-queued-requests", "0", "--allowed-origins",
                                       "https://app.example", NULL};
    th_start(&o, tdl_model, args, NULL, TH_WAIT_HEALTHY);
    const char *paths[] = {"/v1/responses", "/v1/messages"};
    const char *bodies[] = {"{\"input\": \"x\"}", "{\"max_tokens\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}"};
    for (int i = 0; i < 2; i++) {
        th_resp r = th_http(o.port, NULL, paths[i], bodies[i], "Origin: https://app.example");
        cr_assert_eq(r.status, 503, "%s: %ld %s", paths[i], r.status, r.body);
        cr_assert(strcasestr(r.headers, "Retry-After: 1"), "%s", r.headers);
        cr_assert(strcasestr(r.headers, "Access-Control-Allow-Origin: https://app.example"), "%s", r.headers);
        cJSON *e = cJSON_Parse(r.body);
        if (i == 0) cr_assert_str_eq(tdl_str(e, "error.code"), "server_is_overloaded");
        else cr_assert_str_eq(tdl_str(e, "error.type"), "overloaded_error");
        cJSON_Delete(e);
        th_resp_free(&r);
    }
    th_stop(&o);
}
