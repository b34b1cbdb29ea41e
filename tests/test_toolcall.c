/*
 * test_toolcall.c — the output parsers (server/toolcall.c) on scripted model outputs of every
 * call syntax and both reasoning parsers. Each output is fed whole, and again cut into random
 * pieces (seed printed): the fields must be the expected ones, the stream's deltas must add up
 * to exactly the same fields, and a call's name must come before any of its arguments.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sampler.h"
#include "server/toolcall.h"

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

/* Feeds c's output cut at random places (whole when rng is NULL) and checks everything. */
static void tt_run(const tt_case *c, uint64_t *rng, uint64_t seed)
{
    tc_parser *p = tc_parser_create(c->syntax, c->reasoning, c->forced, 42);
    cr_assert_not_null(p);
    tt_stream st;
    memset(&st, 0, sizeof st);
    size_t n = strlen(c->output), at = 0;
    while (at < n) {
        size_t k = rng ? 1 + smp_splitmix64(rng) % 7 : n;
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
        tt_run(&tt_cases[i], NULL, 0);
}

Test(toolcall, every_syntax_in_random_pieces)
{
    uint64_t seed = (uint64_t)time(NULL), rng = seed;
    fprintf(stderr, "toolcall random pieces seed %llu\n", (unsigned long long)seed);
    for (int round = 0; round < 40; round++)
        for (size_t i = 0; i < sizeof tt_cases / sizeof tt_cases[0]; i++)
            tt_run(&tt_cases[i], &rng, seed);
}

Test(toolcall, names_and_detection)
{
    cr_expect_eq(tc_syntax_by_name("hermes"), TC_HERMES);
    cr_expect_eq(tc_syntax_by_name("llama3_json"), TC_LLAMA3_JSON);
    cr_expect_eq(tc_syntax_by_name("mistral"), TC_MISTRAL);
    cr_expect_eq(tc_syntax_by_name("json"), TC_JSON);
    cr_expect_eq(tc_syntax_by_name("none"), TC_SYNTAX_NONE);
    cr_expect_eq(tc_syntax_by_name("auto"), -2);
    cr_expect_eq(tc_syntax_by_name("xml"), -1);
    cr_expect_eq(tc_syntax_detect("{{ '<tool_call>' }}"), TC_HERMES);
    cr_expect_eq(tc_syntax_detect("[TOOL_CALLS] ["), TC_MISTRAL);
    cr_expect_eq(tc_syntax_detect("<|start_header_id|>ipython"), TC_LLAMA3_JSON);
    cr_expect_eq(tc_syntax_detect("{{ messages }}"), TC_JSON);
    cr_expect_eq(tc_reasoning_by_name("deepseek_r1"), TC_REASON_DEEPSEEK_R1);
    cr_expect_eq(tc_reasoning_by_name("qwen3"), TC_REASON_QWEN3);
    cr_expect_eq(tc_reasoning_by_name("none"), TC_REASON_NONE);
    cr_expect_eq(tc_reasoning_by_name("gpt"), -1);
}
