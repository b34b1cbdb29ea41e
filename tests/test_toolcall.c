/*
 * test_toolcall.c — the output parsers (server/toolcall/toolcall.c) on scripted model outputs of
 * every call syntax and both reasoning parsers. Each output is fed whole, and again cut into random
 * pieces (seed printed): the fields must be the expected ones, the stream's deltas must add up to
 * exactly the same fields, and a call's name must come before any of its arguments. Then the
 * reference chat templates (../shared/chat-templates): the text a template writes for an assistant
 * turn with tool calls, read back by the parser its markers pick, gives those calls.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/chat.h"
#include "base/rng.h"
#include "server/toolcall/toolcall.h"
#include "tests/test_util.h"

typedef struct tt_case {
    int syntax, reasoning;
    const char *forced;
    const char *output;
    const char *content;        /* expected content */
    const char *reasoning_text; /* NULL: no reasoning field */
    const char *calls[3][2];    /* name, arguments */
} tt_case;

static const tt_case tt_cases[] = {
    /* hermes / Qwen */
    {TC_HERMES,
     0,
     NULL,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
     "\"Paris\"}}\n</tool_call>",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\"}"}}},
    {TC_HERMES,
     0,
     NULL,
     "Let me check.\n<tool_call>\n{\"arguments\": {\"a\": [1, {\"b\": \"}\"}]}, \"name\": "
     "\"f\"}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": "
     "1}\"}\n</tool_call>\n",
     "Let me check.\n",
     NULL,
     {{"f", "{\"a\": [1, {\"b\": \"}\"}]}"}, {"g", "{\"x\": 1}"}}},
    {TC_HERMES,
     0,
     NULL,
     "No tools needed: 1 < 2 and <tool is fine.",
     "No tools needed: 1 < 2 and <tool is fine.",
     NULL,
     {{0}}},
    {TC_HERMES,
     0,
     NULL,
     "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</"
     "parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\", \"days\": 3}"}}},
    {TC_HERMES,
     0,
     NULL,
     "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris, "
     "\"FR\"</arg_value>\n</tool_call>",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris, \\\"FR\\\"\"}"}}},
    {TC_HERMES,
     0,
     NULL,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 1",
     "",
     NULL,
     {{"f", "{\"q\": 1"}}},
    {TC_HERMES,
     0,
     NULL,
     "<tool_call>not json at all</tool_call> ok",
     "<tool_call>not json at all</tool_call> ok",
     NULL,
     {{0}}},
    {TC_HERMES,
     0,
     NULL,
     "Calling.\n<tool_calls>[{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"c1\"}, "
     "{\"name\": \"g\", \"arguments\": {}}]</tool_calls>\nok",
     "Calling.\nok",
     NULL,
     {{"f", "{\"a\": 1}"}, {"g", "{}"}}},
    {TC_HERMES,
     0,
     NULL,
     "<tool_calls>\n{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_calls>\"}}\n{\"name\": "
     "\"g\", \"arguments\": {\"n\": 2}}\n</tool_calls><tool_call>{\"name\": \"h\", "
     "\"arguments\": {}}</tool_call>",
     "",
     NULL,
     {{"f", "{\"s\": \"</tool_calls>\"}"}, {"g", "{\"n\": 2}"}, {"h", "{}"}}},
    /* Llama 3.x JSON */
    {TC_LLAMA3_JSON,
     0,
     NULL,
     "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\"}"}}},
    {TC_LLAMA3_JSON,
     0,
     NULL,
     "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
     "{\"k\": null}}",
     "",
     NULL,
     {{"a", "{}"}, {"b", "{\"k\": null}"}}},
    {TC_LLAMA3_JSON,
     0,
     NULL,
     "<function=get_weather>{\"location\": \"Paris <b>\"}</function>",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris <b>\"}"}}},
    {TC_LLAMA3_JSON,
     0,
     NULL,
     "<function=a>{\"x\": [1, 2]}</function>; <function=b>{}</function>\nDone.",
     "Done.",
     NULL,
     {{"a", "{\"x\": [1, 2]}"}, {"b", "{}"}}},
    {TC_LLAMA3_JSON,
     0,
     NULL,
     "<function=not a name>{}</function>",
     "<function=not a name>{}</function>",
     NULL,
     {{0}}},
    {TC_LLAMA3_JSON, 0, NULL, "The answer is {42}.", "The answer is {42}.", NULL, {{0}}},
    {TC_LLAMA3_JSON, 0, NULL, "{\"answer\": 42}", "{\"answer\": 42}", NULL, {{0}}},
    /* Mistral */
    {TC_MISTRAL,
     0,
     NULL,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}, "
     "{\"name\": \"t\", \"arguments\": {}}]",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\"}"}, {"t", "{}"}}},
    {TC_MISTRAL,
     0,
     NULL,
     "Sure. [TOOL_CALLS]get_weather[ARGS]{\"location\": "
     "\"Paris\"}[TOOL_CALLS]now[CALL_ID]abc123XYZ[ARGS]{}",
     "Sure. ",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\"}"}, {"now", "{}"}}},
    {TC_MISTRAL, 0, NULL, "Plain [TOOL answer", "Plain [TOOL answer", NULL, {{0}}},
    /* the generic JSON fallback */
    {TC_JSON,
     0,
     NULL,
     "```json\n[{\"name\": \"f\", \"arguments\": {\"x\": \"y\"}}]\n```",
     "",
     NULL,
     {{"f", "{\"x\": \"y\"}"}}},
    {TC_JSON,
     0,
     NULL,
     "{\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
     "\"{}\"}}]}",
     "",
     NULL,
     {{"f", "{}"}}},
    {TC_JSON,
     0,
     NULL,
     "{\"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": {\"n\": 2}}}",
     "",
     NULL,
     {{"g", "{\"n\": 2}"}}},
    {TC_JSON,
     0,
     NULL,
     "[{\"name\": \"f\", \"parameters\": {\"a\": 1}}, {\"name\": \"g\", \"parameters\": {\"b\": "
     "[2]}}]",
     "",
     NULL,
     {{"f", "{\"a\": 1}"}, {"g", "{\"b\": [2]}"}}},
    {TC_JSON, 0, NULL, "Hello there", "Hello there", NULL, {{0}}},
    /* cut short (finish_reason length) inside the second call of an array */
    {TC_JSON,
     0,
     NULL,
     "[{\"name\": \"f\", \"parameters\": {}}, {\"name\": \"g\", \"parameters\": {\"a\": [1",
     "",
     NULL,
     {{"f", "{}"}, {"g", "{\"a\": [1"}}},
    /* DeepSeek V3 / R1, V3.1 */
    {TC_DEEPSEEK,
     0,
     NULL,
     "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
     "```json\n{\"location\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
     "now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "Let me look.",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\"}"}, {"now", "{}"}}},
    {TC_DEEPSEEK,
     0,
     NULL,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"q\": \"<｜x\"}"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "",
     NULL,
     {{"get_weather", "{\"q\": \"<｜x\"}"}}},
    {TC_DEEPSEEK, 0, NULL, "No call <｜tool here.", "No call <｜tool here.", NULL, {{0}}},
    /* Kimi K2 */
    {TC_KIMI,
     0,
     NULL,
     "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
     "<|tool_call_argument_begin|>{\"location\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>"
     "functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
     "Sure.",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\"}"}, {"get_time", "{}"}}},
    {TC_KIMI,
     TC_REASON_QWEN3,
     NULL,
     "<think>plan</think><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": "
     "1}<|tool_call_end|>",
     "",
     "plan",
     {{"f", "{\"a\": 1}"}}},
    /* {"tool_calls": […]} holding no call objects: no call, even when it came in pieces (a call
     * begun while the object was incomplete is dropped) */
    {TC_LLAMA3_JSON, 0, NULL, "{\"tool_calls\": [Zunct]}", "", NULL, {{0}}},
    /* functionary v3.2 (the generation prompt ends in >>>) */
    {TC_FUNCTIONARY,
     0,
     NULL,
     "get_weather\n{\"location\": \"Paris\"}\n>>>now\n{}",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\"}"}, {"now", "{}"}}},
    {TC_FUNCTIONARY,
     0,
     NULL,
     "all\nHello >>>f\n{\"a\": 1}",
     "Hello ",
     NULL,
     {{"f", "{\"a\": 1}"}}},
    {TC_FUNCTIONARY, 0, NULL, "not a name\n{}", "not a name\n{}", NULL, {{0}}},
    /* a named tool choice: the output is the arguments */
    {TC_ARGS,
     0,
     "get_weather",
     "  {\"location\": \"Paris\", \"unit\": \"celsius\"}\n",
     "",
     NULL,
     {{"get_weather", "{\"location\": \"Paris\", \"unit\": \"celsius\"}"}}},
    /* reasoning */
    {TC_SYNTAX_NONE,
     TC_REASON_DEEPSEEK_R1,
     NULL,
     "Let me think.\nOK.</think>\n\nThe answer is 4.",
     "\n\nThe answer is 4.",
     "Let me think.\nOK.",
     {{0}}},
    {TC_SYNTAX_NONE, TC_REASON_DEEPSEEK_R1, NULL, "<think>hmm</think>yes", "yes", "hmm", {{0}}},
    {TC_SYNTAX_NONE, TC_REASON_DEEPSEEK_R1, NULL, "still thinking", "", "still thinking", {{0}}},
    {TC_SYNTAX_NONE,
     TC_REASON_QWEN3,
     NULL,
     "<think>\nplan\n</think>\n\nDone <b>",
     "\n\nDone <b>",
     "\nplan\n",
     {{0}}},
    {TC_SYNTAX_NONE,
     TC_REASON_QWEN3,
     NULL,
     "No thinking here </think>",
     "No thinking here </think>",
     NULL,
     {{0}}},
    {TC_HERMES,
     TC_REASON_QWEN3,
     NULL,
     "<think>need weather</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
     "{}}\n</tool_call>",
     "\n\n",
     "need weather",
     {{"w", "{}"}}},
};

/* the section syntaxes (toolcall_section.c): text around the sections, several calls, and
 * malformed sections, which stay content */
static const tt_case tt_section_cases[] = {
    {TC_NEMOTRON,
     0,
     NULL,
     "Sure.<TOOLCALL>[{\"name\": \"f\", \"arguments\": {\"a\": [1, \"]\"]}}, {\"name\": \"g\", "
     "\"arguments\": {}}]</TOOLCALL> done",
     "Sure.done",
     NULL,
     {{"f", "{\"a\": [1, \"]\"]}"}, {"g", "{}"}}},
    {TC_NEMOTRON,
     0,
     NULL,
     "a <TOOL b <TOOLCALL>[{\"name\": 3}]</TOOLCALL>",
     "a <TOOL b <TOOLCALL>[{\"name\": 3}]</TOOLCALL>",
     NULL,
     {{0}}},
    {TC_NEMOTRON,
     0,
     NULL,
     "<TOOLCALL>[{\"name\": \"f\", \"argu",
     "<TOOLCALL>[{\"name\": \"f\", \"argu",
     NULL,
     {{0}}},
    {TC_COMMAND_R,
     0,
     NULL,
     "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": "
     "{\"x\": \"y\"}}\n]<|END_ACTION|>",
     "",
     NULL,
     {{"f", "{\"x\": \"y\"}"}}},
    {TC_COMMAND_R,
     0,
     NULL,
     "Action:\n```json\n[\n    {\n        \"tool_name\": \"f\",\n        \"parameters\": "
     "{\"a\": 1}\n    }\n]```\nDone.",
     "Done.",
     NULL,
     {{"f", "{\"a\": 1}"}}},
    {TC_APERTUS,
     0,
     NULL,
     "Calling.\n<|tools_prefix|>[{\"f\": {\"a\": [1, 2]}}, {\"g\": {}}]<|tools_suffix|>",
     "Calling.\n",
     NULL,
     {{"f", "{\"a\": [1, 2]}"}, {"g", "{}"}}},
    {TC_APERTUS, 0, NULL, "<|tools_prefix|>[{\"f\"}]<|tools_suffix|>x",
     "<|tools_prefix|>[{\"f\"}]<|tools_suffix|>x", NULL, {{0}}},
    {TC_SEED_OSS,
     0,
     NULL,
     "Hi<seed:tool_call>\n<function=f>\n<parameter=a>\n12\n</parameter>\n<parameter=b>two "
     "words</parameter>\n</function>\n<function=g>\n</function>\n</seed:tool_call>",
     "Hi",
     NULL,
     {{"f", "{\"a\": 12, \"b\": \"two words\"}"}, {"g", "{}"}}},
    /* only strictly valid JSON is taken as JSON: other words are strings; keys always are */
    {TC_SEED_OSS,
     0,
     NULL,
     "<seed:tool_call><function=f><parameter=unit>fahrenheit</parameter><parameter=n>-0.5e3</"
     "parameter><parameter=t>true1</parameter><parameter=z>01</parameter></function></"
     "seed:tool_call>",
     "",
     NULL,
     {{"f", "{\"unit\": \"fahrenheit\", \"n\": -0.5e3, \"t\": \"true1\", \"z\": \"01\"}"}}},
    {TC_SEED_OSS, 0, NULL, "<seed:tool_call>f(1)</seed:tool_call>",
     "<seed:tool_call>f(1)</seed:tool_call>", NULL, {{0}}},
    {TC_MINICPM,
     0,
     NULL,
     "x <function name=\"f\"><param name=\"q\"><![CDATA[a < b\nc]]></param><param "
     "name=\"n\">true</param></function> y<function name=\"g\"></function>",
     "x y",
     NULL,
     {{"f", "{\"q\": \"a < b\\nc\", \"n\": true}"}, {"g", "{}"}}},
    {TC_MINICPM, 0, NULL, "<function name=f>", "<function name=f>", NULL, {{0}}},
    {TC_GEMMA4,
     0,
     NULL,
     "<|tool_call>call:f{a:<|\"|>x, y<|\"|>,b:3,<|\"|>c<|\"|>:{d:[true,<|\"|>z<|\"|>]}}<tool_call|>"
     "<|tool_call>call:g{}<tool_call|>ok",
     "ok",
     NULL,
     {{"f", "{\"a\":\"x, y\",\"b\":3,\"c\":{\"d\":[true,\"z\"]}}"}, {"g", "{}"}}},
    {TC_GEMMA4, 0, NULL, "<|tool_call>call:f{a<tool_call|>", "<|tool_call>call:f{a<tool_call|>",
     NULL, {{0}}},
    {TC_LFM2,
     0,
     NULL,
     "<|tool_call_start|>[f(a='it\\'s', b=2.5, c=None, d=[1, (2, 3)], e={'k': True}), "
     "g()]<|tool_call_end|>Done.",
     "Done.",
     NULL,
     {{"f", "{\"a\":\"it's\",\"b\":2.5,\"c\":null,\"d\":[1,[2,3]],\"e\":{\"k\":true}}"},
      {"g", "{}"}}},
    {TC_LFM2, 0, NULL, "<|tool_call_start|>[f(a=]<|tool_call_end|>",
     "<|tool_call_start|>[f(a=]<|tool_call_end|>", NULL, {{0}}},
    {TC_SOLAR,
     0,
     NULL,
     "<|tool_calls|><|tool_call:begin|>c1<|tool_call:name|>f<|tool_call:args|>{\"a\": "
     "1}<|tool_call:end|><|tool_call:begin|>c2<|tool_call:name|>g<|tool_call:args|>{}<|tool_"
     "call:end|><|calls|>",
     "",
     NULL,
     {{"f", "{\"a\": 1}"}, {"g", "{}"}}},
    {TC_DSML,
     0,
     NULL,
     "Let me look.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter "
     "name=\"s\" string=\"true\">42</｜DSML｜parameter>\n<｜DSML｜parameter name=\"n\" "
     "string=\"false\">42</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
     "Let me look.\n\n",
     NULL,
     {{"f", "{\"s\": \"42\", \"n\": 42}"}}},
    {TC_DSML,
     0,
     NULL,
     "<｜DSML｜tool_calls><｜DSML｜invoke name=\"g\"></｜DSML｜invoke></｜DSML｜tool_calls>",
     "",
     NULL,
     {{"g", "{}"}}},
    /* MiniMax-M3 inside hermes' <tool_call>: elements, nested values and lists of <item> */
    {TC_HERMES,
     0,
     NULL,
     "Sure.<tool_call>\n]<]minimax[>[<invoke name=\"f\">]<]minimax[>[<city>Paris, "
     "France]<]minimax[>[</city>]<]minimax[>[<days>3]<]minimax[>[</days>]<]minimax[>[<opts>]<]"
     "minimax[>[<item>]<]minimax[>[<k>a b]<]minimax[>[</k>]<]minimax[>[</item>]<]minimax[>[<item>"
     "2]<]minimax[>[</item>]<]minimax[>[</opts>]<]minimax[>[</invoke>\n]<]minimax[>[<invoke "
     "name=\"g\">]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
     "Sure.",
     NULL,
     {{"f", "{\"city\": \"Paris, France\", \"days\": 3, \"opts\": [{\"k\": \"a b\"}, 2]}"},
      {"g", "{}"}}},
    {TC_HERMES, 0, NULL, "<tool_call><invoke name=\"f\"><a>1</b></invoke></tool_call>",
     "<tool_call><invoke name=\"f\"><a>1</b></invoke></tool_call>", NULL, {{0}}},
    {TC_HY3,
     0,
     NULL,
     "ok<tool_calls:opensource>\n<tool_call:opensource>f<tool_sep:opensource>\n<arg_key:"
     "opensource>a</arg_key:opensource>\n<arg_value:opensource>x y</arg_value:opensource>\n<arg_"
     "key:opensource>n</arg_key:opensource>\n<arg_value:opensource>2</arg_value:opensource>\n</"
     "tool_call:opensource>\n<tool_call:opensource>g<tool_sep:opensource>\n</tool_call:"
     "opensource>\n</tool_calls:opensource>",
     "ok",
     NULL,
     {{"f", "{\"a\": \"x y\", \"n\": 2}"}, {"g", "{}"}}},
    {TC_KIMI_K3,
     0,
     NULL,
     "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" "
     "type=\"string\"<|sep|>12<|close|>argument<|sep|><|open|>argument key=\"b\" "
     "type=\"array\"<|sep|>[1, 2]<|close|>argument<|sep|><|close|>call<|sep|><|open|>call "
     "tool=\"g\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{\"k\": null}<|close|>json<|"
     "sep|><|close|>call<|sep|><|close|>tools<|sep|>",
     "",
     NULL,
     {{"f", "{\"a\": \"12\", \"b\": [1, 2]}"}, {"g", "{\"k\": null}"}}},
    {TC_GIGACHAT3,
     0,
     NULL,
     "function call<|role_sep|>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}<|message_sep|>\n\n",
     "",
     NULL,
     {{"f", "{\"a\": 1}"}}},
    {TC_GIGACHAT3,
     0,
     NULL,
     "Checking.<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"g\", \"arguments\": "
     "{}}<|message_sep|>",
     "Checking.",
     NULL,
     {{"g", "{}"}}},
    {TC_GIGACHAT3, 0, NULL, "function call<|role_sep|>\nnot json", "function call<|role_sep|>\nnot json",
     NULL, {{0}}},
    /* Muse Glimmer after its generation prompt <|start|>assistant: messages with headers */
    {TC_ATEM,
     0,
     NULL,
     " to=f<|message|><atem:function_calls>\n<atem:invoke name=\"f\">\n<atem:parameter "
     "name=\"a\">1</atem:parameter>\n<atem:parameter name=\"s\">x y</atem:parameter>\n</"
     "atem:invoke>\n</atem:function_calls><|eom|><|start|>assistant "
     "to=g<|message|><atem:function_calls><atem:invoke name=\"g\"></atem:invoke></"
     "atem:function_calls>",
     "",
     NULL,
     {{"f", "{\"a\": 1, \"s\": \"x y\"}"}, {"g", "{}"}}},
    {TC_ATEM, 0, NULL, " to=user<|message|>Hello there", "Hello there", NULL, {{0}}},
    {TC_ATEM, 0, NULL, " to=bad name<|message|>x", " to=bad name<|message|>x", NULL, {{0}}},
    {TC_GRANITE,
     0,
     NULL,
     "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": "
     "{}}]",
     "",
     NULL,
     {{"f", "{\"a\": 1}"}, {"g", "{}"}}},
    {TC_GRANITE,
     0,
     NULL,
     "<|tool_call|>[{\"name\": \"f\", \"arguments\": {}}]<|/tool_call|> and text",
     "and text",
     NULL,
     {{"f", "{}"}}},
    {TC_GRANITE, 0, NULL, "Plain <|tool_call|> text", "Plain <|tool_call|> text", NULL, {{0}}},
};

typedef struct tt_stream {
    char content[4096], reasoning[4096];
    char names[4][64], args[4][1024], ids[4][40];
    int n_calls, has_reasoning;
} tt_stream;

static void tt_emit(void *ud, const tc_delta *d)
{
    tt_stream *s = ud;
    switch (d->kind) {
    case TC_D_CONTENT:
        strncat(s->content, d->text, d->len);
        break;
    case TC_D_REASONING:
        s->has_reasoning = 1;
        strncat(s->reasoning, d->text, d->len);
        break;
    case TC_D_CALL:
        cr_assert_eq(d->index, s->n_calls, "calls come in order");
        snprintf(s->names[s->n_calls], sizeof s->names[0], "%s", d->name);
        snprintf(s->ids[s->n_calls], sizeof s->ids[0], "%s", d->id);
        s->n_calls++;
        break;
    default:
        cr_assert_lt(d->index, s->n_calls, "arguments of call %d before its name", d->index);
        strncat(s->args[d->index], d->text, d->len);
    }
}

/* Feeds c's output cut at random places (whole when rng is NULL; in two pieces at cut when cut
 * is set; a byte at a time when cut is (size_t)-1) and checks everything. */
static void tt_run(const tt_case *c, uint64_t *rng, uint64_t seed, size_t cut)
{
    tc_parser *p = tc_parser_create(c->syntax, c->reasoning, c->forced, 42);
    cr_assert_not_null(p);
    tt_stream st;
    memset(&st, 0, sizeof st);
    size_t n = strlen(c->output), at = 0;
    while (at < n) {
        size_t k = rng ? 1 + rng_splitmix64(rng) % 7 : cut == (size_t)-1 ? 1 : cut && !at ? cut : n;
        if (at + k > n) k = n - at;
        cr_assert_eq(tc_parser_feed(p, c->output + at, k, 0, tt_emit, &st), 0);
        at += k;
    }
    cr_assert_eq(tc_parser_feed(p, "", 0, 1, tt_emit, &st), 0);
    const char *what = c->output;
    size_t len;
    const char *content = tc_parser_content(p, &len);
    cr_expect_str_eq(content, c->content, "content of %s (seed %llu)", what,
                     (unsigned long long)seed);
    cr_expect_str_eq(st.content, content, "streamed content of %s (seed %llu)", what,
                     (unsigned long long)seed);
    const char *r = tc_parser_reasoning(p, &len);
    if (c->reasoning_text) {
        cr_assert_not_null(r, "no reasoning in %s", what);
        cr_expect_str_eq(r, c->reasoning_text, "reasoning of %s (seed %llu)", what,
                         (unsigned long long)seed);
        cr_expect_str_eq(st.reasoning, r, "streamed reasoning of %s", what);
    } else
        cr_expect_null(r, "reasoning in %s: %s", what, r);
    int want = 0;
    while (want < 3 && c->calls[want][0])
        want++;
    cr_assert_eq(tc_parser_n_calls(p), want, "calls in %s (seed %llu)", what,
                 (unsigned long long)seed);
    cr_assert_eq(st.n_calls, want, "streamed calls in %s", what);
    for (int i = 0; i < want; i++) {
        const tc_call *k = tc_parser_call(p, i);
        cr_expect_str_eq(k->name, c->calls[i][0], "%s", what);
        cr_expect_str_eq(k->args, c->calls[i][1], "arguments of call %d of %s (seed %llu)", i, what,
                         (unsigned long long)seed);
        cr_expect_str_eq(st.args[i], k->args, "streamed arguments of %s (seed %llu)", what,
                         (unsigned long long)seed);
        cr_expect_str_eq(st.names[i], k->name);
        cr_expect_str_eq(st.ids[i], k->id);
        cr_expect(strlen(k->id) == (c->syntax == TC_MISTRAL ? 9u : 29u), "id %s", k->id);
    }
    tc_parser_destroy(p);
}

Test(toolcall, every_syntax_whole)
{
    for (size_t i = 0; i < sizeof tt_cases / sizeof tt_cases[0]; i++)
        tt_run(&tt_cases[i], NULL, 0, 0);
}

Test(toolcall, every_syntax_in_random_pieces)
{
    uint64_t seed = (uint64_t)time(NULL), rng = seed;
    fprintf(stderr, "toolcall random pieces seed %llu\n", (unsigned long long)seed);
    for (int round = 0; round < 40; round++)
        for (size_t i = 0; i < sizeof tt_cases / sizeof tt_cases[0]; i++)
            tt_run(&tt_cases[i], &rng, seed, 0);
}

Test(toolcall, section_syntaxes_cut_everywhere)
{
    for (size_t i = 0; i < sizeof tt_section_cases / sizeof tt_section_cases[0]; i++) {
        const tt_case *c = &tt_section_cases[i];
        tt_run(c, NULL, 0, 0);
        tt_run(c, NULL, 0, (size_t)-1);
        for (size_t cut = 1; cut < strlen(c->output); cut++)
            tt_run(c, NULL, 0, cut);
    }
}

Test(toolcall, names_and_detection)
{
    cr_expect_eq(tc_syntax_by_name("hermes"), TC_HERMES);
    cr_expect_eq(tc_syntax_by_name("llama3_json"), TC_LLAMA3_JSON);
    cr_expect_eq(tc_syntax_by_name("mistral"), TC_MISTRAL);
    cr_expect_eq(tc_syntax_by_name("json"), TC_JSON);
    cr_expect_eq(tc_syntax_by_name("none"), TC_SYNTAX_NONE);
    cr_expect_eq(tc_syntax_by_name("deepseek_v3"), TC_DEEPSEEK);
    cr_expect_eq(tc_syntax_by_name("kimi_k2"), TC_KIMI);
    cr_expect_eq(tc_syntax_by_name("functionary"), TC_FUNCTIONARY);
    cr_expect_eq(tc_syntax_detect("{{ '>>>all\\n' + m.content }}"), TC_FUNCTIONARY);
    cr_expect_eq(tc_syntax_by_name("args"), -1);
    cr_expect_eq(tc_syntax_detect("{{ '<｜tool▁call▁begin｜>' }}"), TC_DEEPSEEK);
    cr_expect_eq(tc_syntax_detect("{{ '<|tool_call_begin|>' }}"), TC_KIMI);
    cr_expect_eq(tc_syntax_by_name("auto"), -2);
    cr_expect_eq(tc_syntax_by_name("xml"), -1);
    static const struct {
        const char *name, *marker;
        int syntax;
    } fam[] = {{"nemotron", "<TOOLCALL>[", TC_NEMOTRON},
               {"command_r", "'<|START_ACTION|>'", TC_COMMAND_R},
               {"command_r", "'Write \\'Action:\\' ... Action:\\n```json\\n[\\n'", TC_COMMAND_R},
               {"apertus", "<|tools_prefix|>", TC_APERTUS},
               {"seed_oss", "<seed:tool_call>", TC_SEED_OSS},
               {"minicpm", "<function name=\"f\"><param name=\"k\">", TC_MINICPM},
               {"gemma4", "{{ '<|tool_call>call:' + name }}", TC_GEMMA4},
               {"lfm2", "<|tool_call_start|>[", TC_LFM2},
               {"solar", "<|tool_calls|><|tool_call:begin|>", TC_SOLAR},
               {"dsml", "{% set t = '｜DSML｜' %}", TC_DSML},
               {"hy3", "{% set b = '<tool_calls{}>'.format(k) %}", TC_HY3},
               {"kimi_k3", "{{- '<|open|>' + tag -}}", TC_KIMI_K3},
               {"gigachat3", "role_sep=\"<|role_sep|>\n\"", TC_GIGACHAT3},
               {"granite", "respond with <|tool_call|> and", TC_GRANITE},
               {"atem", "{{- '<atem:function_calls>\\n<atem:invoke name=\"' }}", TC_ATEM}};
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        cr_expect_eq(tc_syntax_by_name(fam[i].name), fam[i].syntax, "%s", fam[i].name);
        cr_expect_str_eq(tc_syntax_name(fam[i].syntax), fam[i].name);
        cr_expect_eq(tc_syntax_detect(fam[i].marker), fam[i].syntax, "%s", fam[i].marker);
    }
    cr_expect_eq(tc_syntax_by_name("pythonic"), TC_LFM2);
    cr_expect_eq(tc_syntax_detect("{{ '<tool_call>' }}"), TC_HERMES);
    cr_expect_eq(tc_syntax_detect("{{ '\\n<tool_calls>[' }}"), TC_HERMES);
    cr_expect_eq(tc_syntax_detect("[TOOL_CALLS] ["), TC_MISTRAL);
    cr_expect_eq(tc_syntax_detect("<|start_header_id|>ipython"), TC_LLAMA3_JSON);
    cr_expect_eq(tc_syntax_detect("{{ messages }}"), TC_JSON);
    cr_expect_eq(tc_reasoning_by_name("deepseek_r1"), TC_REASON_DEEPSEEK_R1);
    cr_expect_eq(tc_reasoning_by_name("qwen3"), TC_REASON_QWEN3);
    cr_expect_eq(tc_reasoning_by_name("none"), TC_REASON_NONE);
    cr_expect_eq(tc_reasoning_by_name("gpt"), -1);
}

/* ---- the reference templates' own calls, read back ---------------------------------------- */

/* Renders messages[0..n) of a reference file's conversation (add_generation_prompt gen) through
 * render-chat's entry point; malloc'd, or NULL when the template fails. */
static char *tt_render(jinja_ctx *c, jinja_value file, const char *tmpl, jinja_value msgs,
                       size_t n, jinja_value tools, int gen)
{
    jinja_value in, t, l;
    cr_assert_eq(jinja_dict(c, &in), 0);
    cr_assert_eq(jinja_str(c, tmpl, strlen(tmpl), &t), 0);
    cr_assert_eq(jinja_list(c, &l), 0);
    for (size_t i = 0; i < n; i++)
        jinja_list_push(c, l, jinja_list_at(msgs, i));
    jinja_dict_set(c, in, "template", t);
    jinja_dict_set(c, in, "messages", l);
    jinja_dict_set(c, in, "tools", tools);
    jinja_dict_set(c, in, "add_generation_prompt", jinja_bool(gen));
    static const char *const from_file[] = {"bos_token", "eos_token", "date"};
    for (int i = 0; i < 3; i++)
        jinja_dict_set(c, in, from_file[i], jinja_dict_get(file, from_file[i]));
    char *json = jinja_json_dump(in, 0), *out, err[512];
    size_t len;
    int rc = chat_render_json(json, strlen(json), &out, &len, err, sizeof err);
    free(json);
    return rc ? NULL : out;
}

/* The message with its content "" instead of null (what many templates need to render it). */
static jinja_value tt_empty_content(jinja_ctx *c, jinja_value m)
{
    jinja_value d, e;
    cr_assert_eq(jinja_dict(c, &d), 0);
    cr_assert_eq(jinja_str(c, "", 0, &e), 0);
    for (size_t i = 0; i < jinja_len(m); i++) {
        const char *k = jinja_str_bytes(jinja_dict_key_at(m, i), NULL);
        jinja_dict_set(c, d, k, strcmp(k, "content") ? jinja_dict_value_at(m, i) : e);
    }
    return d;
}

/* A value as compact JSON (a string holding JSON parsed first); malloc'd. */
static char *tt_canonical(jinja_ctx *c, jinja_value v)
{
    size_t n;
    const char *s = jinja_str_bytes(v, &n);
    jinja_error err;
    if (s && jinja_json_parse(c, s, n, &v, &err)) return strdup("?");
    return jinja_json_dump(v, 1);
}

/* What case `ci`'s first assistant tool-call turn reads back as (with its content "" instead
 * of null when empty is set): 1 when the parser the template's markers pick finds exactly the
 * message's calls, 0 when not, -1 when the case has no such turn or the template fails on it. */
static int tt_read_back(const char *name, jinja_ctx *c, jinja_value file, const char *tmpl,
                        size_t ci, int empty)
{
    jinja_value cs = jinja_list_at(jinja_dict_get(file, "cases"), ci);
    jinja_value msgs = jinja_dict_get(cs, "messages"), tools = jinja_dict_get(cs, "tools");
    size_t k = 0;
    while (k < jinja_len(msgs) && !jinja_len(jinja_dict_get(jinja_list_at(msgs, k), "tool_calls")))
        k++;
    if (k == jinja_len(msgs)) return -1;
    jinja_value call_msg = jinja_list_at(msgs, k), calls = jinja_dict_get(call_msg, "tool_calls");
    char *pre = tt_render(c, file, tmpl, msgs, k, tools, 1);
    char *full = empty ? NULL : tt_render(c, file, tmpl, msgs, k + 1, tools, 0);
    if (!full && pre && empty) {
        jinja_value l;
        cr_assert_eq(jinja_list(c, &l), 0);
        for (size_t i = 0; i < k; i++)
            jinja_list_push(c, l, jinja_list_at(msgs, i));
        jinja_list_push(c, l, tt_empty_content(c, call_msg));
        full = tt_render(c, file, tmpl, l, k + 1, tools, 0);
    }
    int ok = -1;
    size_t at = 0;
    if (pre && full) {
        while (pre[at] && pre[at] == full[at])
            at++;
        /* a generation prompt the turn does not start with (e.g. an opened <think>): the
         * turn starts after the last line or tag both share */
        if (pre[at])
            while (at && full[at - 1] != '\n' && full[at - 1] != '>')
                at--;
        /* generation stops at the end-of-turn token: cut there */
        char *out = full + at;
        static const char *const eot[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>",
                                          "<|end|>", "<|end_of_text|>"};
        const char *eos = jinja_str_bytes(jinja_dict_get(file, "eos_token"), NULL), *cut;
        if (eos && *eos && (cut = strstr(out, eos))) full[cut - full] = 0;
        for (size_t i = 0; i < sizeof eot / sizeof eot[0]; i++)
            if ((cut = strstr(out, eot[i]))) full[cut - full] = 0;
        /* a template that does not write the calls (its model puts them in the content)
         * writes none: the turn must name the first call's function to count */
        const char *fn0 = jinja_str_bytes(
            jinja_dict_get(jinja_dict_get(jinja_list_at(calls, 0), "function"), "name"), NULL);
        if (fn0 && !strstr(out, fn0)) {
            free(pre);
            free(full);
            return -1;
        }
        tc_parser *p = tc_parser_create(tc_syntax_detect(tmpl), TC_REASON_NONE, NULL, 1);
        cr_assert_not_null(p);
        cr_assert_eq(tc_parser_feed(p, out, strlen(out), 1, NULL, NULL), 0);
        ok = tc_parser_n_calls(p) == (int)jinja_len(calls);
        for (int i = 0; ok && i < tc_parser_n_calls(p); i++) {
            jinja_value fn = jinja_dict_get(jinja_list_at(calls, (size_t)i), "function"), got;
            const tc_call *tc = tc_parser_call(p, i);
            jinja_error err;
            char *want = tt_canonical(c, jinja_dict_get(fn, "arguments")), *have = NULL;
            if (!jinja_json_parse(c, tc->args, tc->args_len, &got, &err))
                have = jinja_json_dump(got, 1);
            ok = !strcmp(tc->name, jinja_str_bytes(jinja_dict_get(fn, "name"), NULL)) && have &&
                 !strcmp(have, want);
            free(want);
            free(have);
        }
        if (!ok && tc_syntax_detect(tmpl) != TC_JSON)
            fprintf(stderr, "toolcall: %s (%s) does not read back its calls from %s\n", name,
                    tc_syntax_name(tc_syntax_detect(tmpl)), out);
        tc_parser_destroy(p);
    }
    free(pre);
    free(full);
    return ok;
}

Test(toolcall, reference_templates_read_back_their_calls)
{
    char dir[1024], path[sizeof dir + sizeof ((struct dirent *)0)->d_name + 16];
    snprintf(dir, sizeof dir, "%s/chat-templates", tu_shared_dir());
    DIR *d = opendir(dir);
    if (!d) cr_skip_test("%s is absent: no reference chat templates to read back", dir);
    int counts[TC_ARGS + 1][3] = {{0}}, bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *json = tu_read_file(path, &len);
        cr_assert_not_null(json, "cannot read %s", path);
        jinja_ctx *c = jinja_ctx_create(NULL);
        jinja_value file;
        jinja_error err;
        cr_assert_eq(jinja_json_parse(c, json, len, &file, &err), 0, "%s: %s", path, err.message);
        free(json);
        snprintf(path, sizeof path, "%s/%.*s.jinja", dir, (int)(l - 5), e->d_name);
        char *tmpl = tu_read_file(path, NULL);
        cr_assert_not_null(tmpl, "cannot read %s", path);
        /* the first conversation with calls that the template renders (as sent, else with
         * the calling message's content "") */
        int syntax = tc_syntax_detect(tmpl), r = -1;
        for (int empty = 0; empty < 2 && r < 0; empty++)
            for (size_t ci = 0; r < 0 && ci < jinja_len(jinja_dict_get(file, "cases")); ci++)
                r = tt_read_back(e->d_name, c, file, tmpl, ci, empty);
        counts[syntax][r + 1]++;
        /* the families whose syntax a parser is named for must read back what they write */
        if (r == 0 && syntax != TC_JSON) bad++;
        free(tmpl);
        jinja_ctx_destroy(c);
    }
    closedir(d);
    for (int s = TC_HERMES; s < TC_ARGS; s++)
        fprintf(stderr,
                "toolcall: %s templates: %d read back their calls, %d do not, %d write none\n",
                tc_syntax_name(s), counts[s][2], counts[s][1], counts[s][0]);
    cr_expect_eq(bad, 0, "%d templates of a named family do not read back their own calls", bad);
}

/* Feeds out whole to a parser of syntax that knows tool f's schema; the first call's args. */
static char *tt_typed(int syntax, const char *schema, const char *out)
{
    tc_parser *p = tc_parser_create(syntax, TC_REASON_NONE, NULL, 7);
    cr_assert_not_null(p);
    cr_assert_eq(tc_parser_add_tool(p, "other", "{\"properties\": {\"a\": {\"type\": \"string\"}}}"),
                 0);
    cr_assert_eq(tc_parser_add_tool(p, "f", schema), 0);
    cr_assert_eq(tc_parser_feed(p, out, strlen(out), 1, NULL, NULL), 0);
    cr_assert_eq(tc_parser_n_calls(p), 1, "%s", out);
    char *a = strdup(tc_parser_call(p, 0)->args);
    tc_parser_destroy(p);
    return a;
}

Test(toolcall, schema_string_parameters_stay_strings)
{
    static const char schema[] =
        "{\"type\": \"object\", \"properties\": {\"zip\": {\"type\": \"string\"}, \"n\": "
        "{\"type\": \"integer\"}, \"o\": {\"type\": [\"string\", \"null\"]}, \"a\": {\"type\": "
        "\"array\"}}}";
    static const struct {
        int syntax;
        const char *out, *want;
    } t[] = {
        {TC_SEED_OSS,
         "<seed:tool_call><function=f><parameter=zip>1.50</parameter><parameter=n>7</"
         "parameter><parameter=o>{\"a\": 1}</parameter><parameter=a>[1]</parameter><parameter=x>"
         "true</parameter></function></seed:tool_call>",
         "{\"zip\": \"1.50\", \"n\": 7, \"o\": \"{\\\"a\\\": 1}\", \"a\": [1], \"x\": true}"},
        {TC_HERMES, "<tool_call>\n<function=f>\n<parameter=zip>\n7\n</parameter>\n</function>\n</tool_call>",
         "{\"zip\": \"7\"}"},
        {TC_MINICPM, "<function name=\"f\"><param name=\"zip\">true</param><param name=\"n\">2</param></function>",
         "{\"zip\": \"true\", \"n\": 2}"},
        {TC_DSML,
         "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"zip\" "
         "string=\"false\">12</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
         "{\"zip\": \"12\"}"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char *a = tt_typed(t[i].syntax, schema, t[i].out);
        cr_expect_str_eq(a, t[i].want, "%s from %s", a, t[i].out);
        free(a);
        /* without a schema (or with one that is not JSON) the text's own reading stands */
        a = tt_typed(t[i].syntax, "{not json", t[i].out);
        cr_expect_neq(strstr(a, "\"zip\": \""), a + 1, "%s", a);
        free(a);
    }
}
