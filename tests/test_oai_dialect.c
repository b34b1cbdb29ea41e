/*
 * test_oai_dialect.c — the Responses and Messages APIs at the edge (server/openai/oai_dialect.c,
 * oai_responses.c, oai_messages.c), in process: the chat request each body means (messages,
 * tools, choices, limits, formats, the stored conversation of previous_response_id), the errors
 * naming their fields, and the answers — whole and streamed — of a choice that called a tool,
 * whose streamed pieces add up to the whole. No network, no model.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/oai_chat.h"
#include "server/openai/oai_dialect.h"
#include "server/openai/openai.h"
#include "server/toolcall/toolcall.h"

static const oai_limits tod_lim = {"tiny", 512, NULL};

/* The messages the chat request carries (from the body it keeps), parsed. */
static cJSON *tod_chat_body(const oai_request *r)
{
    cr_assert_not_null(r->chat);
    cJSON *o = cJSON_ParseWithLength(r->chat->body, r->chat->body_len);
    cr_assert_not_null(o);
    return o;
}

static const char *tod_role(const cJSON *msgs, int i)
{
    return cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, i), "role")->valuestring;
}

static char *tod_stored(void *ud, const char *id)
{
    (void)ud;
    if (strcmp(id, "resp_old")) return NULL;
    return strdup("[{\"role\": \"user\", \"content\": \"earlier\"}, {\"role\": \"assistant\", \"content\": \"reply\"}]");
}

Test(oai_dialect, responses_body_becomes_a_chat_request)
{
    const char *body =
        "{\"model\": \"tiny\", \"instructions\": \"Be brief.\", \"previous_response_id\": \"resp_old\", \"input\": ["
        "{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"a\"}, {\"type\": \"input_text\", \"text\": \"b\"}]},"
        "{\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], \"content\": [{\"type\": \"reasoning_text\", \"text\": \"think\"}]},"
        "{\"type\": \"message\", \"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"c\"}]},"
        "{\"type\": \"function_call\", \"call_id\": \"call_1\", \"name\": \"f\", \"arguments\": \"{}\"},"
        "{\"type\": \"function_call_output\", \"call_id\": \"call_1\", \"output\": \"42\"}],"
        "\"tools\": [{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"type\": \"object\"}}],"
        "\"tool_choice\": {\"type\": \"function\", \"name\": \"f\"}, \"parallel_tool_calls\": false,"
        "\"max_output_tokens\": 9, \"temperature\": 0.5, \"top_p\": 0.9, \"seed\": 3, \"metadata\": {\"k\": \"v\"},"
        "\"include\": [\"message.output_text.logprobs\"], \"top_logprobs\": 2, \"store\": false, \"frobnicate\": 1}";
    oai_request r;
    oai_error e;
    cr_assert_eq(oai_parse_responses(body, strlen(body), &tod_lim, tod_stored, NULL, &r, &e), 0, "%s (%s)", e.message, e.param);
    cr_assert_eq(r.kind, OAI_CHAT);
    cr_assert_not_null(r.dialect);
    cr_assert_eq(oai_dialect_kind_of(r.dialect), OAI_DIALECT_RESPONSES);
    cr_assert_str_eq(oai_dialect_id_prefix(r.dialect), "resp_");
    cr_assert_eq(oai_dialect_stores(r.dialect), 0, "store false");
    cr_assert_eq(r.max_tokens, 9);
    cr_assert_float_eq(r.sampling.temperature, 0.5f, 1e-6);
    cr_assert(r.sampling.has_seed && r.sampling.seed == 3);
    cr_assert_eq(r.logprobs, 2);
    cr_assert_eq(r.chat->n_tools, 1);
    cr_assert_eq(r.chat->tool_choice, OAI_TOOLS_NAMED);
    cr_assert_eq(r.chat->parallel_tool_calls, 0);
    cr_assert_not_null(r.grammar, "a named tool choice constrains decoding");
    cr_assert_str_eq(r.ignored, "frobnicate");
    cJSON *chat = tod_chat_body(&r), *msgs = cJSON_GetObjectItem(chat, "messages");
    const char *roles[] = {"system", "user", "assistant", "user", "assistant", "tool"};
    cr_assert_eq(cJSON_GetArraySize(msgs), 6, "%s", cJSON_PrintUnformatted(msgs));
    for (int i = 0; i < 6; i++) cr_assert_str_eq(tod_role(msgs, i), roles[i], "message %d", i);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "content")->valuestring, "earlier");
    cJSON *a = cJSON_GetArrayItem(msgs, 4);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 3), "content")->valuestring, "ab", "parts joined");
    cr_assert_str_eq(cJSON_GetObjectItem(a, "content")->valuestring, "c");
    cr_assert_str_eq(cJSON_GetObjectItem(a, "reasoning_content")->valuestring, "think");
    cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "tool_calls"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(call, "id")->valuestring, "call_1");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(call, "function"), "name")->valuestring, "f");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 5), "tool_call_id")->valuestring, "call_1");
    cJSON_Delete(chat);
    /* the conversation for the store: the stored turns, this input, the answer; no instructions */
    oai_choice c;
    memset(&c, 0, sizeof c);
    oai_choice_append_text(&c, "done", 4);
    char *conv = oai_dialect_conversation(r.dialect, &c);
    cJSON *cv = cJSON_Parse(conv);
    cr_assert_eq(cJSON_GetArraySize(cv), 6, "2 stored, 3 of this input, the answer: %s", conv);
    cr_assert_str_eq(tod_role(cv, 0), "user");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cv, 5), "content")->valuestring, "done");
    cJSON_Delete(cv);
    free(conv);
    oai_choice_free(&c);
    oai_request_free(&r);
}

static void tod_bad_responses(const char *body, int status, const char *code, const char *param)
{
    oai_request r;
    oai_error e;
    cr_assert_neq(oai_parse_responses(body, strlen(body), &tod_lim, tod_stored, NULL, &r, &e), 0, "accepted: %s", body);
    cr_expect_eq(e.status, status, "%s: %s", body, e.message);
    cr_expect_str_eq(e.code ? e.code : "null", code, "%s: %s", body, e.message);
    cr_expect_str_eq(e.param, param, "%s: %s", body, e.message);
}

Test(oai_dialect, responses_errors_name_the_field)
{
    tod_bad_responses("{}", 400, "missing_required_parameter", "input");
    tod_bad_responses("{\"input\": null}", 400, "missing_required_parameter", "input");
    tod_bad_responses("{\"input\": [1]}", 400, "invalid_type", "input[0]");
    tod_bad_responses("{\"input\": [{\"role\": \"user\"}]}", 400, "missing_required_parameter", "input[0].content");
    tod_bad_responses("{\"input\": [{\"role\": \"user\", \"content\": 4}]}", 400, "invalid_type", "input[0].content");
    tod_bad_responses("{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_file\"}]}]}", 400, "invalid_value",
                      "input[0].content[0]");
    tod_bad_responses("{\"input\": [{\"type\": \"function_call_output\", \"call_id\": \"c\"}]}", 400,
                      "missing_required_parameter", "input[0].output");
    tod_bad_responses("{\"input\": [{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": 3, \"arguments\": \"{}\"}]}", 400,
                      "invalid_type", "input[0].name");
    tod_bad_responses("{\"input\": [{\"type\": \"reasoning\", \"content\": 3}]}", 400, "invalid_type", "input[0].content");
    tod_bad_responses("{\"input\": \"x\", \"tools\": 3}", 400, "invalid_type", "tools");
    tod_bad_responses("{\"input\": \"x\", \"tools\": [{\"type\": \"code_interpreter\"}]}", 400, "invalid_value", "tools[0].type");
    tod_bad_responses("{\"input\": \"x\", \"tools\": [{\"type\": \"function\", \"name\": \"f\", \"parameters\": 1}]}", 400,
                      "invalid_type", "tools[0].parameters");
    tod_bad_responses("{\"input\": \"x\", \"tool_choice\": 3}", 400, "invalid_type", "tool_choice");
    tod_bad_responses("{\"input\": \"x\", \"tool_choice\": {\"type\": \"function\"}}", 400, "invalid_type", "tool_choice");
    tod_bad_responses("{\"input\": \"x\", \"tool_choice\": \"required\"}", 400, "invalid_value", "tool_choice");
    tod_bad_responses("{\"input\": \"x\", \"text\": 3}", 400, "invalid_type", "text");
    tod_bad_responses("{\"input\": \"x\", \"text\": {\"format\": {}}}", 400, "invalid_type", "text.format");
    tod_bad_responses("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"schema\": {}, \"name\": 1}}}", 400,
                      "invalid_type", "text.format.name");
    tod_bad_responses("{\"input\": \"x\", \"include\": \"x\"}", 400, "invalid_type", "include");
    tod_bad_responses("{\"input\": \"x\", \"top_logprobs\": 21}", 400, "invalid_value", "top_logprobs");
    tod_bad_responses("{\"input\": \"x\", \"background\": 1}", 400, "invalid_type", "background");
    tod_bad_responses("{\"input\": \"x\", \"metadata\": 1}", 400, "invalid_type", "metadata");
    tod_bad_responses("{\"input\": \"x\", \"reasoning\": 1}", 400, "invalid_type", "reasoning");
    tod_bad_responses("{\"input\": \"x\", \"previous_response_id\": 1}", 400, "invalid_type", "previous_response_id");
    tod_bad_responses("{\"input\": \"x\", \"previous_response_id\": \"resp_gone\"}", 400, "previous_response_not_found",
                      "previous_response_id");
    tod_bad_responses("{\"input\": \"x\", \"top_p\": 0}", 400, "invalid_value", "top_p");
    tod_bad_responses("\"x\"", 400, "invalid_json", "");
    tod_bad_responses("{\"input\": \"\\u0000\"}", 400, "invalid_value", "");
}

Test(oai_dialect, messages_body_becomes_a_chat_request)
{
    const char *body =
        "{\"model\": \"tiny\", \"max_tokens\": 7, \"system\": [{\"type\": \"text\", \"text\": \"S1\"}, {\"type\": \"text\", \"text\": \"S2\"}],"
        "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": ["
        "{\"type\": \"thinking\", \"thinking\": \"hm\", \"signature\": \"x\"}, {\"type\": \"text\", \"text\": \"ok\"},"
        "{\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"f\", \"input\": {\"a\": 1}}]},"
        "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\", \"content\": \"r\"},"
        "{\"type\": \"text\", \"text\": \"more\"}]}],"
        "\"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}],"
        "\"tool_choice\": {\"type\": \"any\", \"disable_parallel_tool_use\": true}, \"stop_sequences\": [\"END\"],"
        "\"temperature\": 0.25, \"top_k\": 5, \"thinking\": {\"type\": \"disabled\"}, \"metadata\": {\"user_id\": \"u\"}}";
    oai_request r;
    oai_error e;
    cr_assert_eq(oai_parse_messages(body, strlen(body), &tod_lim, 0, &r, &e), 0, "%s (%s)", e.message, e.param);
    cr_assert_eq(oai_dialect_kind_of(r.dialect), OAI_DIALECT_MESSAGES);
    cr_assert_eq(r.max_tokens, 7);
    cr_assert_eq(r.n_stop, 1);
    cr_assert_str_eq(r.stop[0], "END");
    cr_assert_eq(r.sampling.top_k, 5);
    cr_assert_float_eq(r.sampling.temperature, 0.25f, 1e-6);
    cr_assert_eq(r.chat->tool_choice, OAI_TOOLS_REQUIRED);
    cr_assert_eq(r.chat->parallel_tool_calls, 0);
    cr_assert_null(r.ignored);
    cJSON *chat = tod_chat_body(&r), *msgs = cJSON_GetObjectItem(chat, "messages");
    const char *roles[] = {"system", "user", "assistant", "tool", "user"};
    cr_assert_eq(cJSON_GetArraySize(msgs), 5, "%s", cJSON_PrintUnformatted(msgs));
    for (int i = 0; i < 5; i++) cr_assert_str_eq(tod_role(msgs, i), roles[i], "message %d", i);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring, "S1\nS2");
    cJSON *a = cJSON_GetArrayItem(msgs, 2);
    cr_assert_str_eq(cJSON_GetObjectItem(a, "reasoning_content")->valuestring, "hm");
    cr_assert_str_eq(cJSON_GetObjectItem(a, "content")->valuestring, "ok");
    cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "tool_calls"), 0), "function");
    cr_assert_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"a\":1}");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 3), "tool_call_id")->valuestring, "toolu_1");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 4), "content")->valuestring, "more");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(chat, "chat_template_kwargs"), "enable_thinking")));
    cJSON_Delete(chat);
    oai_request_free(&r);
    /* count_tokens takes no max_tokens */
    const char *ct = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}";
    cr_assert_eq(oai_parse_messages(ct, strlen(ct), &tod_lim, 1, &r, &e), 0, "%s", e.message);
    oai_request_free(&r);
    cr_assert_neq(oai_parse_messages(ct, strlen(ct), &tod_lim, 0, &r, &e), 0);
    cr_assert_str_eq(e.param, "max_tokens");
}

static void tod_bad_messages(const char *extra, const char *param)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]%s%s}", extra,
             strstr(extra, "max_tokens") ? "" : ", \"max_tokens\": 4");
    oai_request r;
    oai_error e;
    cr_assert_neq(oai_parse_messages(body, strlen(body), &tod_lim, 0, &r, &e), 0, "accepted: %s", body);
    cr_expect_eq(e.status, 400, "%s", body);
    cr_expect_str_eq(e.param, param, "%s: %s", body, e.message);
    /* and in Anthropic's shape */
    char *j = oai_anthropic_error_json(&e);
    cJSON *o = cJSON_Parse(j);
    cr_expect_str_eq(cJSON_GetObjectItem(o, "type")->valuestring, "error");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "type")->valuestring, "invalid_request_error");
    cJSON_Delete(o);
    free(j);
}

Test(oai_dialect, messages_errors_name_the_field)
{
    tod_bad_messages(", \"max_tokens\": 0", "max_tokens");
    tod_bad_messages(", \"temperature\": 1.1", "temperature");
    tod_bad_messages(", \"stop_sequences\": \"x\"", "stop_sequences");
    tod_bad_messages(", \"stop_sequences\": [1]", "stop_sequences");
    tod_bad_messages(", \"system\": 1", "system");
    tod_bad_messages(", \"system\": [{\"type\": \"image\"}]", "system[0]");
    tod_bad_messages(", \"tools\": [{\"name\": \"f\"}]", "tools[0].input_schema");
    tod_bad_messages(", \"tools\": [{\"name\": \"\", \"input_schema\": {}}]", "tools[0].name");
    tod_bad_messages(", \"tools\": [{\"type\": \"bash_20250124\", \"name\": \"bash\"}]", "tools[0].type");
    tod_bad_messages(", \"tool_choice\": \"auto\"", "tool_choice");
    tod_bad_messages(", \"tool_choice\": {\"type\": \"some\"}", "tool_choice.type");
    tod_bad_messages(", \"tool_choice\": {\"type\": \"tool\"}", "tool_choice.name");
    tod_bad_messages(", \"tool_choice\": {\"type\": \"auto\", \"disable_parallel_tool_use\": 1}",
                     "tool_choice.disable_parallel_tool_use");
    tod_bad_messages(", \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 0}", "thinking.budget_tokens");
    tod_bad_messages(", \"thinking\": 1", "thinking");
    tod_bad_messages(", \"metadata\": 1", "metadata");
    tod_bad_messages(", \"mcp_servers\": []", "mcp_servers");
    oai_request r;
    oai_error e;
    const char *bad[][2] = {
        {"{\"max_tokens\": 4, \"messages\": 1}", "messages"},
        {"{\"max_tokens\": 4, \"messages\": [1]}", "messages[0]"},
        {"{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\"}]}", "messages[0].content"},
        {"{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_use\", \"id\": \"x\", "
         "\"name\": \"f\", \"input\": {}}]}]}", "messages[0].content[0].type"},
        {"{\"max_tokens\": 4, \"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"x\", "
         "\"name\": \"f\", \"input\": 1}]}]}", "messages[0].content[0].input"},
        {"{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": "
         "\"x\", \"content\": [{\"type\": \"image\"}]}]}]}", "messages[0].content[0].content[0]"},
        {"{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "messages[0].content[0]"},
        {"{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"document\"}]}]}",
         "messages[0].content[0].type"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_neq(oai_parse_messages(bad[i][0], strlen(bad[i][0]), &tod_lim, 0, &r, &e), 0, "accepted: %s", bad[i][0]);
        cr_expect_str_eq(e.param, bad[i][1], "%s: %s", bad[i][0], e.message);
    }
    /* the shapes of other statuses */
    oai_error er;
    const struct { int status; const char *type; } map[] = {
        {401, "authentication_error"}, {404, "not_found_error"}, {413, "request_too_large"},
        {503, "overloaded_error"}, {500, "api_error"}, {405, "invalid_request_error"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        oai_fail(&er, map[i].status, "x", NULL, NULL, "m");
        char *j = oai_anthropic_error_json(&er);
        cr_expect(strstr(j, map[i].type), "%d: %s", map[i].status, j);
        free(j);
    }
}

/* ---- answers ------------------------------------------------------------------------------------ */

static const char tod_output[] = "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";

/* A parsed request of kind with a tool f whose answer the Hermes parser reads. */
static void tod_request(int kind, oai_request *r)
{
    const char *resp = "{\"input\": \"x\", \"tools\": [{\"type\": \"function\", \"name\": \"f\"}], \"max_output_tokens\": 50}";
    const char *msg = "{\"max_tokens\": 50, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                      "\"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}]}";
    oai_error e;
    int rc = kind == OAI_DIALECT_RESPONSES ? oai_parse_responses(resp, strlen(resp), &tod_lim, NULL, NULL, r, &e)
                                           : oai_parse_messages(msg, strlen(msg), &tod_lim, 0, r, &e);
    cr_assert_eq(rc, 0, "%s", e.message);
    r->chat->syntax = TC_HERMES;
}

static const oai_resp tod_resp = {OAI_CHAT, "resp_1", 1, "tiny", -1, 0, NULL, NULL, 0, NULL, -1};

/* The whole answer of a choice fed tod_output in one piece. */
static cJSON *tod_whole(oai_request *r)
{
    oai_choice c;
    memset(&c, 0, sizeof c);
    c.chat = oai_chat_state_create(r->chat, 7);
    c.finish = ENGINE_FINISH_STOP;
    int oom;
    oai_chat_feed(NULL, &c, tod_output, strlen(tod_output), 1, NULL, 0, &oom);
    oai_usage u = {10, 5, 4};
    char *j = oai_dialect_json(r->dialect, &tod_resp, &c, &u);
    cJSON *o = cJSON_Parse(j);
    free(j);
    oai_choice_free(&c);
    cr_assert_not_null(o);
    return o;
}

/* The stream of the same answer fed a byte at a time: its events, parsed, into ev (≤ cap). */
static int tod_streamed(oai_request *r, cJSON **ev, int cap, cJSON **final)
{
    oai_choice c;
    memset(&c, 0, sizeof c);
    c.chat = oai_chat_state_create(r->chat, 7);
    oai_usage u = {10, 5, 4};
    char *all = oai_dialect_stream_open(r->dialect, &tod_resp, &u);
    size_t n = strlen(tod_output);
    for (size_t i = 0; i < n; i++) {
        int oom;
        char *s = oai_dialect_stream_feed(r->dialect, &tod_resp, &c, tod_output + i, 1, i + 1 == n, NULL, 0, &oom);
        cr_assert_eq(oom, 0);
        if (s) {
            all = realloc(all, strlen(all) + strlen(s) + 1);
            strcat(all, s);
            free(s);
        }
    }
    c.finish = ENGINE_FINISH_STOP;
    char *fj = NULL, *s = oai_dialect_stream_close(r->dialect, &tod_resp, &c, &u, &fj);
    all = realloc(all, strlen(all) + strlen(s) + 1);
    strcat(all, s);
    free(s);
    *final = cJSON_Parse(fj);
    free(fj);
    int k = 0;
    for (char *p = all; *p && k < cap;) {
        char *data = strstr(p, "\ndata: "), *end = strstr(p, "\n\n");
        cr_assert(!strncmp(p, "event: ", 7) && data && end);
        ev[k++] = cJSON_ParseWithLength(data + 7, (size_t)(end - data - 7));
        p = end + 2;
    }
    free(all);
    oai_choice_free(&c);
    return k;
}

static const char *tod_type(const cJSON *o)
{
    return cJSON_GetObjectItem(o, "type")->valuestring;
}

Test(oai_dialect, responses_answer_whole_and_streamed)
{
    oai_request r;
    tod_request(OAI_DIALECT_RESPONSES, &r);
    cJSON *o = tod_whole(&r), *out = cJSON_GetObjectItem(o, "output");
    cr_assert_str_eq(cJSON_GetObjectItem(o, "status")->valuestring, "completed");
    cr_assert_eq(cJSON_GetArraySize(out), 2);
    cr_assert_str_eq(tod_type(cJSON_GetArrayItem(out, 0)), "message");
    cr_assert_str_eq(tod_type(cJSON_GetArrayItem(out, 1)), "function_call");
    cJSON *call = cJSON_GetArrayItem(out, 1);
    const char *args = cJSON_GetObjectItem(call, "arguments")->valuestring;
    cr_assert_str_eq(cJSON_GetObjectItem(call, "name")->valuestring, "f");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "input_tokens")->valueint, 10);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "input_tokens_details"), "cached_tokens")->valueint, 4);
    cJSON *ev[256], *fin;
    oai_request r2;
    tod_request(OAI_DIALECT_RESPONSES, &r2);
    int n = tod_streamed(&r2, ev, 256, &fin);
    char text[256] = "", sargs[256] = "";
    for (int i = 0; i < n; i++) {
        cr_assert_eq(cJSON_GetObjectItem(ev[i], "sequence_number")->valueint, i);
        if (!strcmp(tod_type(ev[i]), "response.output_text.delta")) strcat(text, cJSON_GetObjectItem(ev[i], "delta")->valuestring);
        if (!strcmp(tod_type(ev[i]), "response.function_call_arguments.delta"))
            strcat(sargs, cJSON_GetObjectItem(ev[i], "delta")->valuestring);
    }
    cr_assert_str_eq(text, cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 0), "content"), 0), "text")->valuestring);
    cr_assert_str_eq(sargs, args, "streamed arguments add up");
    cr_assert_str_eq(tod_type(ev[n - 1]), "response.completed");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(fin, "output")), 2);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(fin, "output"), 1), "arguments")->valuestring, args);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i]);
    cJSON_Delete(fin);
    cJSON_Delete(o);
    oai_request_free(&r);
    oai_request_free(&r2);
}

Test(oai_dialect, messages_answer_whole_and_streamed)
{
    oai_request r;
    tod_request(OAI_DIALECT_MESSAGES, &r);
    cJSON *o = tod_whole(&r), *content = cJSON_GetObjectItem(o, "content");
    cr_assert_str_eq(cJSON_GetObjectItem(o, "stop_reason")->valuestring, "tool_use");
    cr_assert_eq(cJSON_GetArraySize(content), 2);
    cJSON *use = cJSON_GetArrayItem(content, 1);
    cr_assert_str_eq(tod_type(use), "tool_use");
    cr_assert(!strncmp(cJSON_GetObjectItem(use, "id")->valuestring, "toolu_", 6));
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(use, "input"), "location")->valuestring, "Paris");
    cJSON *usage = cJSON_GetObjectItem(o, "usage");
    cr_assert_eq(cJSON_GetObjectItem(usage, "input_tokens")->valueint, 6, "10 prompt tokens, 4 of them cached");
    cr_assert_eq(cJSON_GetObjectItem(usage, "cache_read_input_tokens")->valueint, 4);
    cJSON *ev[256], *fin;
    oai_request r2;
    tod_request(OAI_DIALECT_MESSAGES, &r2);
    int n = tod_streamed(&r2, ev, 256, &fin);
    char text[256] = "", json[256] = "";
    cr_assert_str_eq(tod_type(ev[0]), "message_start");
    for (int i = 0; i < n; i++) {
        if (strcmp(tod_type(ev[i]), "content_block_delta")) continue;
        cJSON *d = cJSON_GetObjectItem(ev[i], "delta");
        if (!strcmp(tod_type(d), "text_delta")) strcat(text, cJSON_GetObjectItem(d, "text")->valuestring);
        if (!strcmp(tod_type(d), "input_json_delta")) strcat(json, cJSON_GetObjectItem(d, "partial_json")->valuestring);
    }
    cr_assert_str_eq(text, cJSON_GetObjectItem(cJSON_GetArrayItem(content, 0), "text")->valuestring);
    cJSON *in = cJSON_Parse(json);
    cr_assert_str_eq(cJSON_GetObjectItem(in, "location")->valuestring, "Paris");
    cJSON_Delete(in);
    cr_assert_str_eq(tod_type(ev[n - 2]), "message_delta");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ev[n - 2], "delta"), "stop_reason")->valuestring, "tool_use");
    cr_assert_str_eq(tod_type(ev[n - 1]), "message_stop");
    cr_assert_str_eq(cJSON_GetObjectItem(fin, "stop_reason")->valuestring, "tool_use");
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i]);
    cJSON_Delete(fin);
    cJSON_Delete(o);
    oai_request_free(&r);
    oai_request_free(&r2);
}
