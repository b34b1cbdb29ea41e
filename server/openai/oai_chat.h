/*
 * oai_chat.h — chat completions beyond plain text, at the OpenAI edge: what the model's chat
 * template gets (the messages as sent, tools, a request's chat_template and
 * chat_template_kwargs, the legacy functions / function_call mapped to tools / tool_choice), and
 * what the answer becomes (reasoning_content, tool_calls, finish_reason "tool_calls"), whole or
 * as stream deltas.
 *
 *   request body ──oai_parse (validates; keeps a copy)──► oai_chat
 *   oai_chat ──oai_chat_vars──► chat_vars for model/chat.c (values re-read from the body, so key
 *                                order and 1 vs 1.0 reach the template as the client sent them)
 *   generated text ──oai_chat_feed (a toolcall/ parser per choice)──► deltas / message fields
 *
 * Text content parts are joined ("" between them) before the template sees them, and tool-call
 * arguments sent as JSON strings are handed to the template parsed, as vLLM does; everything
 * else is verbatim. Callers: openai.c (parse), oai_response.c (the message and finish of a
 * whole answer), server/prep.c (vars), server/gen.c (feeding choices). The functions are in
 * oai_chat.c, but for oai_chat_feed, the stream's chunks, in oai_chat_stream.c.
 */
#ifndef KVSERVE_OAI_CHAT_H
#define KVSERVE_OAI_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "model/chat.h"
#include "server/openai/openai.h"

enum oai_tool_choice { OAI_TOOLS_AUTO = 0, OAI_TOOLS_NONE, OAI_TOOLS_REQUIRED, OAI_TOOLS_NAMED };

typedef struct oai_tool {
    char *name;       /* owned */
    char *parameters; /* owned: the JSON Schema as compact JSON text, or NULL (any object) */
} oai_tool;

typedef struct oai_chat {
    char *body; /* owned copy of the request body */
    size_t body_len;
    oai_tool *tools; /* [n_tools] owned (from tools, or from the legacy functions) */
    int n_tools;
    int tool_choice;         /* enum oai_tool_choice */
    int named;               /* OAI_TOOLS_NAMED: the chosen tool's index */
    int parallel_tool_calls; /* default 1; 0 keeps at most one call */
    int legacy;              /* the request used functions: the answer uses message.function_call */
    char *chat_template;     /* owned: the request's chat_template, or NULL */
    /* set by the server when it prepares the request */
    int syntax;      /* enum tc_syntax of the output */
    int reasoning;   /* enum tc_reasoning */
    int constrained; /* the request's grammar is the tool choice's (oai__chat_grammar) */
} oai_chat;

/* Reads tools, tool_choice, parallel_tool_calls, functions, function_call, chat_template and
 * chat_template_kwargs of root (a chat or /tokenize body) into a new *out, keeping a copy of
 * body[0..len). 0, or -EINVAL with e filled (400 naming the field) and *out NULL. */
struct cJSON;
int oai__parse_chat(const struct cJSON *root, const char *body, size_t len, oai_chat **out,
                    oai_error *e);
void oai_chat_free(oai_chat *ch);

/* tool_choice "required" or naming a function: the grammar the output must follow, as vLLM
 * constrains it, into r->grammar (through lim->grammars when set): a named function's
 * arguments, a JSON object valid for its parameters schema; required, a JSON array of
 * {"name": …, "parameters": …} for one of the tools (one element unless parallel_tool_calls).
 * 0 (also when nothing is to constrain), or -EINVAL with e filled (400: a schema that cannot be
 * compiled, or another structured-output constraint in the same request). */
int oai__chat_grammar(const oai_limits *lim, oai_request *r, oai_error *e);

/* The template's variables for ch's request into v (values in c). 0, or -EINVAL / -ENOMEM
 * with e filled. */
int oai_chat_vars(const oai_chat *ch, jinja_ctx *c, int add_generation_prompt, chat_vars *v,
                  oai_error *e);

/* ---- the answer ------------------------------------------------------------------------- */

typedef struct oai_chat_state oai_chat_state;

/* A choice's reader of the model's output per ch's syntax and reasoning parser; seed varies the
 * call ids. NULL when out of memory. */
oai_chat_state *oai_chat_state_create(const oai_chat *ch, uint64_t seed);
void oai_chat_state_free(oai_chat_state *st);

/* Feeds the choice's next text (final = 1 with the last). Streaming (r not NULL): returns the
 * SSE chunks of the deltas this makes certain ("data: …\n\n" concatenated, malloc'd; the
 * logprobs lps[0..n_lps) ride on the first one, or on an empty one), or NULL when there are none
 * (or out of memory: *oom set). Not streaming: r NULL, returns NULL. */
char *oai_chat_feed(const oai_resp *r, oai_choice *c, const char *text, size_t n, int final,
                    const oai_lp *lps, int n_lps, int *oom);

/* For the response builders (oai_response.c): the message fields of a chat choice read by
 * c->chat, and its finish_reason ("tool_calls" / "function_call" when it called tools and
 * stopped). */
void oai__chat_message(struct cJSON *msg, const oai_choice *c);
const char *oai__chat_finish(const oai_choice *c, int finish);

#endif
