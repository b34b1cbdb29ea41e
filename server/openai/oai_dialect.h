/*
 * oai_dialect.h — the two conversation APIs beside chat completions, at the edge: OpenAI's
 * Responses API (POST /v1/responses) and Anthropic's Messages API (POST /v1/messages).
 *
 *   request body ──oai_parse_responses / oai_parse_messages──► the chat completions request it
 *                  means (instructions / system, input items / content blocks → messages; function
 *                  tools, tool_choice, text.format → response_format, max_output_tokens /
 *                  max_tokens, stop_sequences …), parsed by the chat parser (oai_parse, kind
 *                  OAI_CHAT) into an oai_request whose `dialect` says how to answer
 *   the answer     (the chat choice: text, or the chat state's reasoning, content and calls)
 *                  ──oai_dialect_json──► a Response object / an Anthropic message
 *                  ──oai_dialect_stream_*──► Responses' typed events (response.created …
 *                  response.completed) / Anthropic's (message_start … message_stop)
 *
 * So tools reach the model's chat template exactly as chat completions' do (and are refused the
 * same way when it cannot express them), tool_choice "required" or naming a function constrains
 * decoding as there, and text.format / response_format go through the structured-output engine.
 * What neither API's subset here supports (hosted tools, files, images, background runs) is a
 * 400 naming the field. One choice per request (neither API has n).
 *
 * Streaming state lives in the dialect (the loop thread feeds it token by token); everything
 * else is a pure function of its inputs. Callers: server/prep.c (parse), server/gen.c (answers).
 */
#ifndef KVSERVE_OAI_DIALECT_H
#define KVSERVE_OAI_DIALECT_H

#include <stddef.h>
#include <stdint.h>

#include "server/openai/openai.h"

enum oai_dialect_kind { OAI_DIALECT_RESPONSES = 1, OAI_DIALECT_MESSAGES = 2 };

typedef struct oai_dialect oai_dialect;

/* previous_response_id: the stored conversation (a JSON array of chat messages, malloc'd) of a
 * response id, or NULL when none is stored. */
typedef char *(*oai_history_fn)(void *ud, const char *id);

/* A Responses body into *out (kind OAI_CHAT, out->dialect set). history may be NULL (nothing
 * stored). 0, or -EINVAL with e filled (400 naming the field; previous_response_id not found is
 * 400 previous_response_not_found; 404 for another model); on failure *out holds nothing. */
int oai_parse_responses(const char *body, size_t len, const oai_limits *lim, oai_history_fn history, void *ud,
                        oai_request *out, oai_error *e);
/* An Anthropic Messages body into *out (likewise). count_tokens: a /v1/messages/count_tokens
 * body (max_tokens not required). */
int oai_parse_messages(const char *body, size_t len, const oai_limits *lim, int count_tokens, oai_request *out,
                       oai_error *e);
void oai_dialect_free(oai_dialect *d);

/* The request fields each API reads (static tables; their length in *n), for the docs check. */
const char *const *oai_dialect_fields(int kind, size_t *n);

int oai_dialect_kind_of(const oai_dialect *d);
/* "resp_" or "msg_": the response id's prefix. */
const char *oai_dialect_id_prefix(const oai_dialect *d);
/* 1 when the answer is to be stored (Responses with store true). */
int oai_dialect_stores(const oai_dialect *d);

/* The whole answer of choice c (its chat state, when it has one, fed to the end): the Response
 * object (status completed, or incomplete at max_output_tokens) or the Anthropic message.
 * malloc'd JSON, or NULL. */
char *oai_dialect_json(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u);

/* The conversation after this answer (the history, this request's input and the answer as chat
 * messages) for the store: malloc'd JSON array, or NULL. */
char *oai_dialect_conversation(const oai_dialect *d, const oai_choice *c);

/* Streaming, each returning SSE text ("event: NAME\ndata: {…}\n\n" events, malloc'd) or NULL:
 * the opening events (response.created and response.in_progress / message_start); the events of
 * the next generated text of c (final = 1 with the last; lps[0..n_lps) its token's log-probs
 * when asked; *oom set when memory ran out); the closing ones, with the final object also in
 * *final_json (malloc'd) for the store; and an error after the events began. */
char *oai_dialect_stream_open(oai_dialect *d, const oai_resp *r, const oai_usage *u);
char *oai_dialect_stream_feed(oai_dialect *d, const oai_resp *r, oai_choice *c, const char *text, size_t n,
                              int final, const oai_lp *lps, int n_lps, int *oom);
char *oai_dialect_stream_close(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u,
                               char **final_json);
char *oai_dialect_stream_error(oai_dialect *d, const oai_resp *r, const oai_error *e);

/* An error in Anthropic's shape: {"type": "error", "error": {"type", "message"}} (the type from
 * the status: invalid_request_error, authentication_error, not_found_error, request_too_large,
 * overloaded_error, api_error, …). malloc'd. */
char *oai_anthropic_error_json(const oai_error *e);

/* /v1/messages/count_tokens' answer. malloc'd. */
char *oai_count_tokens_json(int n_tokens);

#endif
