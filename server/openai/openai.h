/*
 * openai.h — the OpenAI wire format at the edge: request JSON → owned structs, and the response,
 * chunk and error objects back to JSON text.
 *
 * Nothing here touches the network, the engine or the tokenizer: parsing validates types and
 * ranges that need no model (the vocabulary size and the context come in through oai_limits),
 * and the builders get token strings through a callback. That keeps the module testable without
 * a model and fuzzable on its own. cJSON stays inside server/; callers receive strings.
 */
#ifndef KVSERVE_OPENAI_H
#define KVSERVE_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "engine/sampler.h"

enum oai_kind { OAI_COMPLETION = 0, OAI_CHAT = 1 };

#define OAI_MAX_N 128        /* cap on n and best_of */
#define OAI_MAX_REQUEST_ID 128 /* bytes of a body's request_id */

/* An OpenAI-shaped error: {"error": {"message", "type", "param", "code"}} plus the HTTP status. */
typedef struct oai_error {
    int status;          /* HTTP status, e.g. 400 */
    const char *type;    /* static string: "invalid_request_error", "server_error", ... */
    const char *code;    /* static string or NULL (JSON null) */
    char param[128];     /* "" → JSON null */
    char message[512];
} oai_error;

/* Fills e; returns the (negative) value -EINVAL so parsers can `return oai_fail(...)`. */
int oai_fail(oai_error *e, int status, const char *type, const char *code, const char *param,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* One prompt of a completions request: text, or token ids given verbatim. */
typedef struct oai_prompt {
    char *text;          /* owned; NULL when the prompt was token ids */
    int32_t *ids;        /* owned; [n_ids] token ids (set by the parser for id prompts) */
    int n_ids;
} oai_prompt;

typedef struct oai_msg {
    char *role;          /* owned: system, developer, user, assistant, tool */
    char *content;       /* owned: the text parts concatenated ("" for null content) */
} oai_msg;

/* A parsed /v1/completions or /v1/chat/completions request. Every pointer is owned. */
typedef struct oai_request {
    int kind;                     /* enum oai_kind */
    char *model;                  /* NULL when absent or empty */
    oai_prompt *prompts;          /* completions: [n_prompts] */
    int n_prompts;
    oai_msg *msgs;                /* chat: [n_msgs] */
    int n_msgs;
    int add_generation_prompt;    /* chat: 1 unless the client says otherwise */
    int max_tokens;               /* -1 when absent (the caller picks the default) */
    int n;                        /* choices returned per prompt */
    int best_of;                  /* candidates generated per prompt (≥ n) */
    int stream;
    int include_usage;            /* stream_options.include_usage */
    int logprobs;                 /* -1: none; else alternatives per position (0..20) */
    int echo;                     /* completions: prepend the prompt (and its logprobs) */
    int token_ids;                /* return_tokens_as_token_ids (vLLM): logprob tokens as "token_id:N" */
    char **stop;                  /* [n_stop] non-empty stop strings (array and strings owned) */
    int n_stop;                   /* 0 .. ENGINE_MAX_STOP */
    smp_params sampling;          /* its arrays (logit_bias, allowed_token_ids, stop_token_ids)
                                     are owned by the request */
    /* vLLM's extensions (oai_fields.c) */
    int include_stop_str;         /* include_stop_str_in_output */
    int skip_special;             /* skip_special_tokens (default 1): 0 renders control tokens */
    char *request_id;             /* owned: vLLM's request_id (the response id's tail), or NULL */
    char **bad_words;             /* [n_bad_words] owned; tokenized when the prompt is */
    int n_bad_words;
    int prompt_logprobs;          /* -1: none; else alternatives per prompt token (0..20) */
    int truncate_prompt_tokens;   /* 0: off; else keep the last N prompt tokens */
    char *ignored;                /* owned: the unknown top-level fields, comma-separated, or NULL */
    gr_grammar *grammar;          /* structured output (oai_structured.c): a reference the
                                     request owns, NULL when unconstrained */
    struct oai_chat *chat;        /* chat: tools, tool_choice, the template's inputs (owned;
                                     oai_chat.h) */
    struct oai_dialect *dialect;  /* a Responses or Messages request answered in its own shape
                                     (owned; oai_dialect.h), NULL for chat completions */
} oai_request;

typedef struct oai_limits {
    const char *model_name;       /* the served model id; others are 404 */
    int n_vocab;                  /* token ids must be below this */
    gr_cache *grammars;           /* compiled structured-output grammars (borrowed; NULL: compile
                                     every time) */
} oai_limits;

/* The body checks every parser below starts with: valid UTF-8, no raw control character inside
 * a string, no NUL (raw or \u0000 in a string), nothing but white space after the top-level
 * object or array. 0, or -EINVAL with *err filled (400 invalid_json, or invalid_value for a NUL
 * in a string). */
int oai_validate_body(const char *body, size_t len, oai_error *err);

/* Parses body[0..len) as a request of the given kind into *out (zeroed first). Returns 0, or a
 * negative errno with *err filled (status 400 for bad JSON / types / values, 404 for an unknown
 * model); on failure *out holds nothing to free. Unknown fields are ignored. */
int oai_parse(int kind, const char *body, size_t len, const oai_limits *lim, oai_request *out,
              oai_error *err);
void oai_request_free(oai_request *r);

/* /tokenize and /detokenize bodies. */
typedef struct oai_tok_request {
    char *prompt;                 /* owned; NULL when messages were given */
    oai_msg *msgs;                /* owned; [n_msgs] */
    int n_msgs;
    int add_special;              /* add_special_tokens (default 1) */
    int add_generation_prompt;    /* default 1 */
    int32_t *tokens;              /* detokenize: owned [n_tokens] */
    int n_tokens;
    struct oai_chat *chat;        /* messages: the template's inputs (owned; oai_chat.h) */
} oai_tok_request;

int oai_parse_tokenize(const char *body, size_t len, oai_tok_request *out, oai_error *err);
int oai_parse_detokenize(const char *body, size_t len, const oai_limits *lim, oai_tok_request *out,
                         oai_error *err);
void oai_tok_request_free(oai_tok_request *r);

/* The top-level request fields some parser reads (server/openai/oai_fields.c's table), for the
 * documentation check: a static array of static strings; its length goes into *n. */
const char *const *oai_request_fields(size_t *n);

/* ---- responses ---------------------------------------------------------------------------- */

/* The bytes of one token for logprobs (tok_token_bytes in practice). Returns the length. */
typedef int (*oai_piece_fn)(void *ud, int32_t id, char *buf, int cap);

/* One reported position: a token, its log-prob (absent for a prompt's first token) and the
 * top alternatives (smp_result's arrays). */
typedef struct oai_lp {
    smp_result r;
    int has_logprob;              /* 0: JSON null (first prompt token) */
    int skip_space;               /* 1: the token starts the decoded text, which drops its leading
                                   * space (SentencePiece): it adds one character less */
} oai_lp;

/* Everything a choice accumulates until its response is written. */
typedef struct oai_choice {
    int index;                    /* index in the response */
    char *text;                   /* owned, NUL-terminated; full text for non-streamed responses */
    size_t text_len, text_cap;
    oai_lp *lps;                  /* owned [n_lps] (logprobs requested) */
    int n_lps, lps_cap;
    size_t text_offset;           /* completions logprobs: offset of the next token's text */
    int finish;                   /* enum engine_finish */
    int stop_kind;                /* enum oai_stop_kind: what finish STOP matched (stop_reason) */
    int stop_value;               /* OAI_STOP_STR: index in the request's stop[]; OAI_STOP_TOKEN: id */
    oai_lp *plps;                 /* owned [n_plps] scored prompt tokens (prompt_logprobs) */
    int n_plps, plps_cap;
    int n_tokens;                 /* generated tokens */
    double cum_logprob;           /* sum over generated tokens */
    int started;                  /* streaming: first chunk (chat role) went out */
    struct oai_chat_state *chat;  /* chat with tools or a reasoning parser: the reader of the
                                     output (owned; oai_chat.h), else NULL */
} oai_choice;

enum oai_stop_kind { OAI_STOP_NONE = 0, OAI_STOP_STR, OAI_STOP_TOKEN };

int oai_choice_append_text(oai_choice *c, const char *s, size_t n);
int oai_choice_append_lp(oai_choice *c, const smp_result *r, int has_logprob);
/* A scored prompt token for the prompt_logprobs field. 0 or -ENOMEM. */
int oai_choice_append_plp(oai_choice *c, const smp_result *r, int has_logprob);
void oai_choice_free(oai_choice *c);

/* What every response/chunk of one request shares. */
typedef struct oai_resp {
    int kind;                     /* enum oai_kind */
    const char *id;               /* "cmpl-…" / "chatcmpl-…" */
    int64_t created;              /* Unix seconds */
    const char *model;
    int logprobs;                 /* as in oai_request */
    int include_usage;            /* streaming: usage key present (null) on chunks */
    oai_piece_fn piece;
    void *piece_ud;
    int token_ids;                /* logprob tokens as "token_id:N" */
    char *const *stop;            /* the request's stop strings (stop_reason names them) */
    int prompt_logprobs;          /* -1: no prompt_logprobs field; else alternatives shown */
} oai_resp;

typedef struct oai_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;
} oai_usage;

/* "stop" / "length" / NULL (unfinished). */
const char *oai_finish_name(int finish);

/* The non-streamed response object with choices[0..n) in that order. malloc'd string. */
char *oai_response_json(const oai_resp *r, const oai_choice *choices, int n, const oai_usage *u);

/* One streamed chunk for choice c (its index, and its stop_reason once finish is set): text
 * delta (may be empty), the positions lps[0..n_lps) (when logprobs were asked), finish
 * (ENGINE_FINISH_NONE for none). Chat: role = 1 emits the role delta. A chat chunk carrying
 * finish has an empty delta. malloc'd "data: {...}\n\n". */
char *oai_chunk_sse(const oai_resp *r, const oai_choice *c, int role, const char *text, size_t len,
                    const oai_lp *lps, int n_lps, size_t text_offset, int finish);
/* The final usage chunk (choices: []), "data: {...}\n\n". */
char *oai_usage_chunk_sse(const oai_resp *r, const oai_usage *u);
/* {"key": "value"} with value's invalid UTF-8 bytes replaced by U+FFFD. malloc'd. */
char *oai_string_json(const char *key, const char *value);
/* {"error": {...}} as a malloc'd string. */
char *oai_error_json(const oai_error *e);

/* Completions logprobs fragment for positions lps[0..n) whose text starts at text_offset; the
 * offsets advance by each token's characters (oai_token_chars). Exposed for tests. malloc'd JSON. */
char *oai_logprobs_json(const oai_resp *r, const oai_lp *lps, int n, size_t text_offset);
/* Characters (code points) of UTF-8 text, and of token id's text as the logprobs show it: the
 * units of completions' text_offset (as in OpenAI's and vLLM's responses). */
size_t oai_text_chars(const char *s, size_t n);
size_t oai_token_chars(const oai_resp *r, int32_t id);
/* The characters position lp adds to the text: its token's, less the leading space the decoded
 * text drops (lp->skip_space). */
size_t oai_lp_chars(const oai_resp *r, const oai_lp *lp);

#endif
