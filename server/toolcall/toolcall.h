/*
 * toolcall.h — reading a chat model's output: reasoning inside <think>…</think>, and tool calls
 * in the call syntax of the model's family, into OpenAI's message fields, in full and as stream
 * deltas.
 *
 *   generated text ─► reasoning stage ──► reasoning_content
 *                          │ the rest
 *                          ▼
 *                     tool-call stage ──► content, tool_calls[i] = {id, name, arguments}
 *
 * Syntaxes: hermes (Qwen, Hermes: <tool_call>{"name": …, "arguments": {…}}</tool_call>, several
 * allowed; also a list <tool_calls>[{…}, …]</tool_calls> or one object a line inside it),
 * llama3_json (Llama 3.x: the output starts with {"name": …, "parameters": {…}}, optionally
 * after <|python_tag|>, or with Llama 3.1's custom-tool form <function=NAME>{…}</function>,
 * several separated by ';'), mistral ([TOOL_CALLS] followed by a
 * JSON array of {"name", "arguments"}, or by name[ARGS]{…} per call, optionally [CALL_ID]id),
 * json (the generic fallback: the output is a call object, an array of them, or
 * {"tool_calls": [...]}, optionally in a ``` fence; it is also what tool_choice "required"
 * constrains the output to), args (tool_choice naming a function: the whole output is that
 * function's arguments), deepseek_v3 (DeepSeek V3 / R1 / V3.1: <｜tool▁call▁begin｜>function
 * <｜tool▁sep｜>NAME and the arguments in a ```json fence, or NAME<｜tool▁sep｜>{…}, up to
 * <｜tool▁call▁end｜>) and kimi_k2 (<|tool_call_begin|>functions.NAME:0
 * <|tool_call_argument_begin|>{…}<|tool_call_end|>); the tagged ones give each call whole when
 * its closing marker arrives, and functionary (v3.2, after a generation prompt that ends in
 * >>>: NAME\n{…} per call, the next one after >>>, and all\n before text). The section syntaxes
 * (toolcall_section.c: nemotron, command_r, apertus, seed_oss, minicpm, gemma4, lfm2, solar,
 * dsml, hy3, kimi_k3, gigachat3, granite, atem) stream content up to their opening marker and give the calls of a section whole when
 * its closing marker arrives. A call object may also have OpenAI's shape {"function": {"name",
 * "arguments"}}. Arguments keep the model's own JSON text (a string value is decoded: it already
 * holds JSON), so the streamed pieces add up to exactly the non-streamed string.
 *
 * Reasoning parsers: deepseek_r1 (the output starts inside the reasoning, an opening <think>
 * optional, up to </think>; no </think> means all of it was reasoning) and qwen3 (reasoning only
 * when the output opens with <think>, up to </think> or the end).
 *
 * Streaming holds back only what could still turn into a marker or a call, so the concatenated
 * deltas equal the final fields. Pure functions of the text: no server state, any thread.
 */
#ifndef KVSERVE_TOOLCALL_H
#define KVSERVE_TOOLCALL_H

#include <stddef.h>
#include <stdint.h>

enum tc_syntax {
    TC_SYNTAX_NONE = 0,
    TC_HERMES,
    TC_LLAMA3_JSON,
    TC_MISTRAL,
    TC_JSON,
    TC_DEEPSEEK,
    TC_KIMI,
    TC_FUNCTIONARY,
    TC_NEMOTRON,
    TC_COMMAND_R,
    TC_APERTUS,
    TC_SEED_OSS,
    TC_MINICPM,
    TC_GEMMA4,
    TC_LFM2,
    TC_SOLAR,
    TC_DSML,
    TC_HY3,
    TC_KIMI_K3,
    TC_GIGACHAT3,
    TC_GRANITE,
    TC_ATEM,
    TC_ARGS /* last */
};
enum tc_reasoning { TC_REASON_NONE = 0, TC_REASON_DEEPSEEK_R1, TC_REASON_QWEN3 };

/* By name ("hermes", "llama3_json", "mistral", "json", "deepseek_v3", "kimi_k2", "functionary",
 * "nemotron", "command_r", "apertus", "seed_oss", "minicpm", "gemma4", "lfm2", "solar", "dsml",
 * "hy3", "kimi_k3", "gigachat3", "granite", "atem", "none"; "auto" is -2), or -1. */
int tc_syntax_by_name(const char *name);
const char *tc_syntax_name(int syntax);
/* The syntax a chat template teaches its model, from its markers (json when none is known). */
int tc_syntax_detect(const char *template_text);
/* "deepseek_r1", "qwen3" (and "none"), or -1. */
int tc_reasoning_by_name(const char *name);

enum tc_delta_kind {
    TC_D_CONTENT,   /* text: more content */
    TC_D_REASONING, /* text: more reasoning */
    TC_D_CALL,      /* a new tool call: index, id, name */
    TC_D_ARGS       /* text: more arguments of call index */
};

typedef struct tc_delta {
    int kind; /* enum tc_delta_kind */
    int index;
    const char *text;
    size_t len;
    const char *id, *name;
} tc_delta;

typedef void (*tc_emit_fn)(void *ud, const tc_delta *d);

typedef struct tc_call {
    char id[40];
    char *name; /* NUL-terminated, owned */
    char *args; /* NUL-terminated, owned ("" until arguments arrive) */
    size_t args_len;
} tc_call;

typedef struct tc_parser tc_parser;

/* A parser for one choice's output. forced_name: TC_ARGS's function (copied). id_seed makes
 * the call ids ("call_" + 24 characters; 9 alphanumerics for mistral). NULL when out of memory. */
tc_parser *tc_parser_create(int syntax, int reasoning, const char *forced_name, uint64_t id_seed);
void tc_parser_destroy(tc_parser *p);

/* Tells the parser function name's parameters schema (JSON Schema text, NULL: none): the
 * XML-parameter syntaxes (seed_oss, minicpm, dsml, and Qwen3-Coder's / GLM's bodies in hermes)
 * then give a parameter typed "string" as a string even when its text reads as a number, true
 * or an object. Call before the first feed. 0, or -ENOMEM (the parser unchanged). */
int tc_parser_add_tool(tc_parser *p, const char *name, const char *schema);

/* Feeds the next piece of output; final = 1 with the last one (n may be 0). Each delta goes to
 * emit (NULL: none) as it becomes certain. 0, or -ENOMEM (the parser is then unusable). */
int tc_parser_feed(tc_parser *p, const char *text, size_t n, int final, tc_emit_fn emit, void *ud);

/* What was read so far: the content, the reasoning (NULL when there was none) and the calls. */
const char *tc_parser_content(const tc_parser *p, size_t *len);
const char *tc_parser_reasoning(const tc_parser *p, size_t *len);
int tc_parser_n_calls(const tc_parser *p);
const tc_call *tc_parser_call(const tc_parser *p, int i);

#endif
