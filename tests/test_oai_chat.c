/*
 * test_oai_chat.c — tools and the template's inputs at the OpenAI edge (server/openai/oai_chat.c):
 * validation of tools / tool_choice / functions / chat_template fields (400s naming the field), the
 * values the template gets (parts joined, tool-call arguments parsed, legacy roles mapped, key
 * order and 1.0 kept), and the answer: message.tool_calls / function_call / reasoning_content with
 * finish_reason, and the stream's delta.tool_calls whose argument pieces add up to the non-streamed
 * arguments. No network, no model.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/oai_chat.h"
#include "server/openai/openai.h"
#include "server/toolcall/toolcall.h"

static const oai_limits toc_lim = {"tiny", 512, NULL};

static const char toc_tools[] = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                                "\"get_weather\", \"description\": \"d\", "
                                "\"parameters\": {\"type\": \"object\", \"properties\": "
                                "{\"location\": {\"type\": \"string\"}}}}}, "
                                "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

static int toc_parse(const char *body, oai_request *r, oai_error *e)
{
    return oai_parse(OAI_CHAT, body, strlen(body), &toc_lim, r, e);
}

static void toc_bad(const char *extra, const char *param)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], %s}",
             extra);
    oai_request r;
    oai_error e;
    cr_assert_neq(toc_parse(body, &r, &e), 0, "accepted: %s", body);
    cr_expect_eq(e.status, 400, "%s", body);
    cr_expect_str_eq(e.param, param, "%s: %s", body, e.message);
}

Test(oai_chat, field_validation)
{
    toc_bad("\"tools\": {}", "tools");
    toc_bad("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"\"}}]",
            "tools[0].function.name");
    toc_bad("\"tools\": [{\"type\": \"retrieval\"}]", "tools[0].type");
    toc_bad(
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": 3}}]",
        "tools[0].function.parameters");
    toc_bad("\"tool_choice\": \"required\"", "tool_choice");
    toc_bad("\"tool_choice\": \"sometimes\", \"tools\": [{\"function\": {\"name\": \"f\"}}]",
            "tool_choice");
    toc_bad("\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}, "
            "\"tools\": [{\"function\": {\"name\": \"f\"}}]",
            "tool_choice");
    toc_bad("\"functions\": [{\"name\": \"f\"}], \"tools\": [{\"function\": {\"name\": \"g\"}}]",
            "functions");
    toc_bad("\"function_call\": {\"name\": \"zz\"}, \"functions\": [{\"name\": \"f\"}]",
            "function_call");
    toc_bad("\"parallel_tool_calls\": \"yes\"", "parallel_tool_calls");
    toc_bad("\"chat_template\": 5", "chat_template");
    toc_bad("\"chat_template_kwargs\": [1]", "chat_template_kwargs");
}

Test(oai_chat, tools_and_choices)
{
    char body[2048];
    oai_request r;
    oai_error e;
    snprintf(
        body, sizeof body,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], %s, \"tool_choice\": "
        "{\"type\": "
        "\"function\", \"function\": {\"name\": \"now\"}}, \"parallel_tool_calls\": false, "
        "\"chat_template\": \"{{ 1 }}\", \"chat_template_kwargs\": {\"enable_thinking\": true}}",
        toc_tools);
    cr_assert_eq(toc_parse(body, &r, &e), 0, "%s", e.message);
    oai_chat *ch = r.chat;
    cr_assert_not_null(ch);
    cr_expect_eq(ch->n_tools, 2);
    cr_expect_str_eq(ch->tools[0].name, "get_weather");
    cr_expect_str_eq(ch->tools[0].parameters,
                     "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}}}");
    cr_expect_null(ch->tools[1].parameters);
    cr_expect_eq(ch->tool_choice, OAI_TOOLS_NAMED);
    cr_expect_eq(ch->named, 1);
    cr_expect_eq(ch->parallel_tool_calls, 0);
    cr_expect_eq(ch->legacy, 0);
    cr_expect_str_eq(ch->chat_template, "{{ 1 }}");
    oai_request_free(&r);
    /* the legacy fields map to tools / tool_choice */
    const char *legacy =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"functions\": [{\"name\": "
        "\"f\", "
        "\"parameters\": {\"type\": \"object\"}}], \"function_call\": {\"name\": \"f\"}}";
    cr_assert_eq(toc_parse(legacy, &r, &e), 0, "%s", e.message);
    cr_expect_eq(r.chat->n_tools, 1);
    cr_expect_eq(r.chat->tool_choice, OAI_TOOLS_NAMED);
    cr_expect_eq(r.chat->legacy, 1);
    oai_request_free(&r);
    const char *none =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": \"none\"}";
    cr_assert_eq(toc_parse(none, &r, &e), 0, "%s", e.message);
    cr_expect_eq(r.chat->tool_choice, OAI_TOOLS_NONE);
    oai_request_free(&r);
}

Test(oai_chat, template_values)
{
    const char *body = "{\"messages\": [{\"role\": \"system\", \"content\": [{\"type\": \"text\", "
                       "\"text\": \"Be \"}, {\"type\": \"text\", "
                       "\"text\": \"brief\"}]}, {\"role\": \"assistant\", \"content\": null, "
                       "\"tool_calls\": [{\"id\": \"c1\", \"type\": "
                       "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"b\\\": "
                       "1.0, \\\"a\\\": [2]}\"}}]}, "
                       "{\"role\": \"function\", \"name\": \"f\", \"content\": \"42\"}, {\"role\": "
                       "\"assistant\", \"content\": \"x\", "
                       "\"function_call\": {\"name\": \"g\", \"arguments\": \"not json\"}}], "
                       "\"functions\": [{\"name\": \"f\"}], \"chat_template_kwargs\": "
                       "{\"enable_thinking\": false}}";
    oai_request r;
    oai_error e;
    cr_assert_eq(toc_parse(body, &r, &e), 0, "%s", e.message);
    jinja_ctx *c = jinja_ctx_create(NULL);
    chat_vars v;
    cr_assert_eq(oai_chat_vars(r.chat, c, 1, &v, &e), 0, "%s", e.message);
    char *m = jinja_json_dump(v.messages, 0), *t = jinja_json_dump(v.tools, 0),
         *k = jinja_json_dump(v.kwargs, 0);
    cr_expect_str_eq(
        m,
        "[{\"role\": \"system\", \"content\": \"Be brief\"}, {\"role\": \"assistant\", "
        "\"content\": null, "
        "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
        "\"arguments\": "
        "{\"b\": 1.0, \"a\": [2]}}}]}, {\"role\": \"tool\", \"name\": \"f\", \"content\": \"42\"}, "
        "{\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": [{\"id\": \"call_3\", "
        "\"type\": "
        "\"function\", \"function\": {\"name\": \"g\", \"arguments\": \"not json\"}}]}]");
    cr_expect_str_eq(t, "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
    cr_expect_str_eq(k, "{\"enable_thinking\": false}");
    cr_expect_eq(v.add_generation_prompt, 1);
    free(m);
    free(t);
    free(k);
    jinja_ctx_destroy(c);
    oai_request_free(&r);
}

/* ---- the answer --------------------------------------------------------------------------- */

static oai_chat toc_chat(int syntax, int reasoning, int legacy)
{
    static oai_tool tools[] = {{"get_weather", NULL}};
    oai_chat ch;
    memset(&ch, 0, sizeof ch);
    ch.tools = tools;
    ch.n_tools = 1;
    ch.parallel_tool_calls = 1;
    ch.syntax = syntax;
    ch.reasoning = reasoning;
    ch.legacy = legacy;
    return ch;
}

static const oai_resp toc_resp = {OAI_CHAT, "chatcmpl-x", 1, "tiny", -1, 0,
                                  NULL,     NULL,         0, NULL,   -1};

/* The choice's non-streamed message and finish_reason, parsed. */
static cJSON *toc_message(oai_choice *c, const char **finish)
{
    oai_usage u = {1, 2, 0};
    char *json = oai_response_json(&toc_resp, c, 1, &u);
    cJSON *o = cJSON_Parse(json);
    free(json);
    cr_assert_not_null(o);
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    *finish = cJSON_GetObjectItem(ch, "finish_reason")->valuestring;
    return o;
}

static const char toc_output[] = "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                 "{\"location\": \"Paris\"}}\n</tool_call>";

Test(oai_chat, tool_calls_in_the_message)
{
    oai_chat ch = toc_chat(TC_HERMES, TC_REASON_NONE, 0);
    oai_choice c;
    memset(&c, 0, sizeof c);
    c.chat = oai_chat_state_create(&ch, 7);
    c.finish = ENGINE_FINISH_STOP;
    int oom;
    cr_assert_null(oai_chat_feed(NULL, &c, toc_output, strlen(toc_output), 1, NULL, 0, &oom));
    cr_assert_eq(oom, 0);
    const char *finish;
    cJSON *o = toc_message(&c, &finish);
    cr_expect_str_eq(finish, "tool_calls");
    cJSON *msg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    cr_expect_str_eq(cJSON_GetObjectItem(msg, "content")->valuestring, "Checking.");
    cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0);
    cr_assert_not_null(call);
    cr_expect_str_eq(cJSON_GetObjectItem(call, "type")->valuestring, "function");
    cr_expect(!strncmp(cJSON_GetObjectItem(call, "id")->valuestring, "call_", 5));
    cJSON *fn = cJSON_GetObjectItem(call, "function");
    cr_expect_str_eq(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather");
    cr_expect_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring,
                     "{\"location\": \"Paris\"}");
    cJSON_Delete(o);
    /* stopped by length: the call is reported, the finish reason stays */
    c.finish = ENGINE_FINISH_LENGTH;
    o = toc_message(&c, &finish);
    cr_expect_str_eq(finish, "length");
    cJSON_Delete(o);
    oai_choice_free(&c);
    /* the legacy shape */
    ch = toc_chat(TC_HERMES, TC_REASON_NONE, 1);
    c.chat = oai_chat_state_create(&ch, 7);
    c.finish = ENGINE_FINISH_STOP;
    oai_chat_feed(NULL, &c, toc_output + 9, strlen(toc_output) - 9, 1, NULL, 0, &oom);
    o = toc_message(&c, &finish);
    cr_expect_str_eq(finish, "function_call");
    msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
    cr_expect_str_eq(
        cJSON_GetObjectItem(cJSON_GetObjectItem(msg, "function_call"), "name")->valuestring,
        "get_weather");
    cr_expect_null(cJSON_GetObjectItem(msg, "tool_calls"));
    cJSON_Delete(o);
    oai_choice_free(&c);
}

/* The request's tool schemas reach the output parser: a string parameter of an XML-parameter
 * syntax stays a string though its text reads as a number. */
Test(oai_chat, tool_schemas_type_the_xml_parameters)
{
    oai_tool tools[] = {{"lookup", "{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":"
                                   "\"string\"},\"n\":{\"type\":\"integer\"}}}"}};
    oai_chat ch = toc_chat(TC_SEED_OSS, TC_REASON_NONE, 0);
    ch.tools = tools;
    oai_choice c;
    memset(&c, 0, sizeof c);
    c.chat = oai_chat_state_create(&ch, 7);
    cr_assert_not_null(c.chat);
    c.finish = ENGINE_FINISH_STOP;
    static const char out[] = "<seed:tool_call><function=lookup><parameter=zip>10001</parameter>"
                              "<parameter=n>2</parameter></function></seed:tool_call>";
    int oom;
    cr_assert_null(oai_chat_feed(NULL, &c, out, strlen(out), 1, NULL, 0, &oom));
    const char *finish;
    cJSON *o = toc_message(&c, &finish);
    cJSON *msg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0),
                                    "function");
    cr_assert_not_null(fn);
    cr_expect_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring,
                     "{\"zip\": \"10001\", \"n\": 2}");
    cJSON_Delete(o);
    oai_choice_free(&c);
}

Test(oai_chat, stream_deltas)
{
    oai_chat ch = toc_chat(TC_HERMES, TC_REASON_QWEN3, 0);
    oai_choice c;
    memset(&c, 0, sizeof c);
    c.chat = oai_chat_state_create(&ch, 7);
    static const char out[] =
        "<think>hm</think>Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"location\": \"Paris\"}}\n</tool_call>";
    char args[256] = "", reasoning[64] = "", content[64] = "", name[64] = "";
    int calls = 0;
    for (size_t i = 0; i < sizeof out - 1; i += 3) {
        size_t n = sizeof out - 1 - i < 3 ? sizeof out - 1 - i : 3;
        int oom;
        char *sse =
            oai_chat_feed(&toc_resp, &c, out + i, n, i + n == sizeof out - 1, NULL, 0, &oom);
        cr_assert_eq(oom, 0);
        for (char *p = sse; p && (p = strstr(p, "data: ")); p += 6) {
            cJSON *o = cJSON_Parse(p + 6);
            cr_assert_not_null(o, "%s", p);
            cJSON *d = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0),
                                           "delta");
            cJSON *x;
            if ((x = cJSON_GetObjectItem(d, "content"))) strcat(content, x->valuestring);
            if ((x = cJSON_GetObjectItem(d, "reasoning_content")))
                strcat(reasoning, x->valuestring);
            if ((x = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "tool_calls"), 0))) {
                cr_expect_eq(cJSON_GetObjectItem(x, "index")->valueint, 0);
                cJSON *fn = cJSON_GetObjectItem(x, "function");
                if (cJSON_GetObjectItem(x, "id")) {
                    calls++;
                    cr_expect_str_eq(cJSON_GetObjectItem(x, "type")->valuestring, "function");
                    strcat(name, cJSON_GetObjectItem(fn, "name")->valuestring);
                } else
                    cr_expect_null(cJSON_GetObjectItem(fn, "name"));
                strcat(args, cJSON_GetObjectItem(fn, "arguments")->valuestring);
            }
            cJSON_Delete(o);
        }
        free(sse);
    }
    cr_expect_eq(calls, 1);
    cr_expect_str_eq(name, "get_weather");
    cr_expect_str_eq(args, "{\"location\": \"Paris\"}");
    cr_expect_str_eq(reasoning, "hm");
    cr_expect_str_eq(content, "Checking.");
    c.finish = ENGINE_FINISH_STOP;
    char *fin = oai_chunk_sse(&toc_resp, &c, 0, "", 0, NULL, 0, 0, ENGINE_FINISH_STOP);
    cr_expect(strstr(fin, "\"finish_reason\":\"tool_calls\"") != NULL, "%s", fin);
    free(fin);
    const char *finish;
    cJSON *o = toc_message(&c, &finish);
    cJSON *msg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    cr_expect_str_eq(cJSON_GetObjectItem(msg, "reasoning_content")->valuestring, "hm");
    cJSON_Delete(o);
    oai_choice_free(&c);
}

Test(oai_chat, constrained_choices_compile_a_grammar)
{
    char body[2048];
    oai_request r;
    oai_error e;
    static const char *const choices[] = {
        "\"required\"", "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}"};
    for (int i = 0; i < 2; i++) {
        snprintf(
            body, sizeof body,
            "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], %s, \"tool_choice\": %s}",
            toc_tools, choices[i]);
        cr_assert_eq(toc_parse(body, &r, &e), 0, "%s", e.message);
        cr_expect_not_null(r.grammar, "tool_choice %s constrains the output", choices[i]);
        cr_expect_eq(r.chat->constrained, 1);
        oai_request_free(&r);
    }
    snprintf(
        body, sizeof body,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], %s, \"tool_choice\": \"auto\"}",
        toc_tools);
    cr_assert_eq(toc_parse(body, &r, &e), 0, "%s", e.message);
    cr_expect_null(r.grammar, "auto leaves decoding free");
    oai_request_free(&r);
    toc_bad("\"tools\": [{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
            "\"properties\": {\"x\": "
            "{\"type\": \"number\", \"multipleOf\": 3}}}}}], \"tool_choice\": \"required\"",
            "tools[0].function.parameters");
    toc_bad("\"tools\": [{\"function\": {\"name\": \"f\"}}], \"tool_choice\": \"required\", "
            "\"response_format\": "
            "{\"type\": \"json_object\"}",
            "tool_choice");
}
