/*
 * internal.h — what the files of openai/ share: the error shorthands and typed field readers,
 * token texts, vLLM's extra fields, the chat state, the chunk builder and the structured-output
 * compilers. cJSON appears here because they all speak it; nothing outside openai/ includes this
 * header (tests may). From the bottom up, each file calling only files listed before it:
 *
 *   oai_error.c        the error object, the 400 / 500 shorthands
 *   oai_read.c         typed field readers
 *   oai_token.c        token texts, text offsets, finish names
 *   oai_body.c         the body checks before cJSON reads it
 *   oai_numrange.c     GBNF for numeric ranges
 *   oai_schema.c       JSON Schema → GBNF
 *   oai_structured.c   the structured-output fields → a compiled grammar
 *   oai_fields.c       vLLM's request extensions and extra response fields
 *   oai_chat.c         tools, tool_choice, the template's inputs, the chat state of an answer
 *   oai_response.c     choice accumulation and every response builder
 *   oai_chat_stream.c  a chat answer's stream chunks
 *   openai.c           the request parsers
 *   oai_pool.c         embeddings, rerank and score bodies and answers
 *   oai_dialect.c      what the Responses and Messages APIs share: events, output items
 *   oai_responses.c    the Responses API (request → chat request; Response objects, events)
 *   oai_messages.c     Anthropic's Messages API (likewise)
 */
#ifndef KVSERVE_OAI_INTERNAL_H
#define KVSERVE_OAI_INTERNAL_H

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "server/openai/oai_dialect.h"
#include "server/openai/openai.h"

/* ---- errors (oai_error.c) ------------------------------------------------------------------ */

/* 400 invalid_type: "'param' must be WANT". Returns -EINVAL. */
int oai__bad_type(oai_error *e, const char *param, const char *want);
/* 400 invalid_value: "'param' WHAT". Returns -EINVAL. */
int oai__bad_value(oai_error *e, const char *param, const char *what);
/* 500 out of memory. Returns -EINVAL. */
int oai__oom(oai_error *e);

/* ---- typed fields (oai_read.c) -------------------------------------------------------------- */

/* 1 when a field is absent (NULL) or JSON null. */
int oai__is_absent(const cJSON *v);
/* Integer field of o in [lo, hi] into *out (left alone when absent or null). 0 or -EINVAL with
 * e filled (400 invalid_type / invalid_value naming the field). */
int oai__get_int(const cJSON *o, const char *name, int lo, int hi, int *out, oai_error *e);
/* The same for a long long field. */
int oai__get_ll(const cJSON *o, const char *name, long long lo, long long hi, long long *out,
                oai_error *e);
/* Number field in [lo, hi] into *out. 0 or -EINVAL. */
int oai__get_num(const cJSON *o, const char *name, double lo, double hi, float *out, oai_error *e);
/* Boolean field into *out (0/1). 0 or -EINVAL. */
int oai__get_bool(const cJSON *o, const char *name, int *out, oai_error *e);

/* ---- shared readers of openai.c ------------------------------------------------------------- */

/* A non-empty array of token ids, each in [0, lim->n_vocab), into a malloc'd *out[*n_out].
 * 0 or -EINVAL with e filled (400 naming param). */
int oai__parse_ids(const cJSON *a, const oai_limits *lim, const char *param, int32_t **out, int *n_out,
                   oai_error *e);

/* ---- token texts (oai_token.c) -------------------------------------------------------------- */

/* A token's text as logprobs show it (invalid UTF-8 → U+FFFD; "token_id:N" with token_ids).
 * raw, when not NULL, receives the token's bytes (at most 256) and *raw_len their count. */
cJSON *oai__token_string(const oai_resp *r, int32_t id, unsigned char *raw, int *raw_len);

/* ---- vLLM's fields (oai_fields.c) ----------------------------------------------------------- */

/* vLLM's sampling extensions of both endpoints into r: stop_token_ids, allowed_token_ids (token
 * ids below lim->n_vocab), include_stop_str_in_output, bad_words, prompt_logprobs,
 * truncate_prompt_tokens; 'suffix' is refused as vLLM refuses it. Records the names of fields
 * neither this file nor openai.c reads in r->ignored. 0 or -EINVAL with e filled. */
int oai__parse_vllm(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e);
/* Frees what oai__parse_vllm put in r. */
void oai__free_vllm(oai_request *r);

/* Adds "stop_reason" to a choice object: the matched stop string or stop token id of c when
 * finish is ENGINE_FINISH_STOP, else null. */
void oai__add_stop_reason(cJSON *choice, const oai_resp *r, const oai_choice *c, int finish);
/* vLLM's prompt_logprobs list for lps[0..n): null for the first prompt token, then per token
 * {"<id>": {"logprob", "rank", "decoded_token"}} for the prompt token and r->prompt_logprobs
 * alternatives. */
cJSON *oai__prompt_logprobs_json(const oai_resp *r, const oai_lp *lps, int n);

/* ---- the chat state of an answer (oai_chat.c; read by oai_chat_stream.c) ------------------- */

struct tc_parser;

struct oai_chat_state {
    struct tc_parser *p; /* the choice's reasoning and tool-call parser */
    int legacy;          /* the request used functions: answer with function_call */
    int parallel;        /* 0: only the first call is kept */
    int calls_only;      /* tool_choice "required": the grammar wrote a list of calls, nothing else:
                          * no content, and the message keeps only whole calls */
};

/* Calls in a tool_choice "required" list at most (the grammar's bound: a model that keeps
 * opening calls is stopped there). */
#define OAI_MAX_TOOL_CALLS 16

/* ---- the chunk builder (oai_response.c) ----------------------------------------------------- */

/* One chat stream chunk for choice c with the given delta object (consumed), the logprobs of
 * lps[0..n_lps) and finish (0: none). malloc'd "data: {...}\n\n", or NULL. */
char *oai__chat_chunk(const oai_resp *r, const oai_choice *c, cJSON *delta, const oai_lp *lps,
                      int n_lps, int finish);

/* ---- the Responses and Messages APIs (oai_dialect.c, oai_responses.c, oai_messages.c) ------ */

enum { DI_NONE = 0, DI_TEXT, DI_REASONING, DI_CALL }; /* what an open output item holds */

struct oai_dialect {
    int kind;             /* enum oai_dialect_kind */
    cJSON *echo;          /* Responses: the request fields a Response object echoes; else NULL */
    cJSON *history;       /* the conversation before the answer, as chat messages: the stored
                             one (previous_response_id) and this request's input, without the
                             instructions (which are not carried over) */
    int store;            /* Responses: keep the answer (store, default true) */
    int logprobs;         /* Responses: output_text logprobs with this many alternatives, or -1 */
    int max_output;       /* Responses: max_output_tokens, or -1 */
    /* streaming (loop thread) */
    int64_t seq;          /* Responses: sequence_number of the next event */
    int n_items;          /* output items (Anthropic: content blocks) opened so far */
    int open;             /* DI_*: what the open item holds */
    int open_call;        /* DI_CALL: the tool call's index */
    char open_id[64];     /* its item id (Responses) */
    char call_id[64];     /* DI_CALL: the call's id */
    char *call_name;      /* DI_CALL: the function's name (owned) */
    char *acc;            /* the open item's text so far (owned, NUL-terminated) */
    size_t acc_len;
    cJSON *done;          /* items (Anthropic: content blocks) closed so far, in streamed order */
    char *pend;           /* white space of the content held back between items (owned) */
    size_t pend_len;
    char *sse;            /* events being built (owned) */
    size_t sse_len;
    int oom;
};

/* A new dialect of kind (its JSON members empty). NULL on -ENOMEM. */
oai_dialect *oai__dialect_new(int kind);
/* A new event object whose first member is "type": type. */
cJSON *oai__di_new(const char *type);
/* Appends "event: TYPE\ndata: JSON\n\n" for data (consumed; made by oai__di_new), with the
 * sequence_number of a Responses event. */
void oai__di_event(oai_dialect *d, cJSON *data);
/* The events appended so far (malloc'd, the dialect's buffer reset), or NULL when none. */
char *oai__di_take(oai_dialect *d);
/* Appends n bytes to the open item's text. */
void oai__di_acc(oai_dialect *d, const char *s, size_t n);
/* An output item id: prefix + hex derived from the response id and index (stable, so the
 * stream's ids and the final object's agree). */
void oai__di_item_id(const oai_resp *r, const char *prefix, int index, char *out, size_t n);

/* What choice c said: its content, reasoning (NULL: none) and tool calls (n_calls of them; the
 * first one only without parallel calls). */
struct tc_call;
struct tc_delta;

typedef struct oai_di_out {
    const char *content, *reasoning;
    size_t content_len, reasoning_len;
    int n_calls;
    const struct tc_call *const *calls; /* [n_calls] borrowed from the choice's parser */
} oai_di_out;
/* Fills o; calls has room for n_cap. */
void oai__di_out(const oai_choice *c, oai_di_out *o, const struct tc_call **calls, int n_cap);
/* The chat message of the answer (assistant: content, tool_calls, reasoning_content). */
cJSON *oai__di_assistant(const oai_choice *c);

/* A string field of JSON text into a cJSON string (strndup of n bytes). */
cJSON *oai__di_str(const char *s, size_t n);

/* The top-level keys of root that fields[0 .. n_fields) does not name, comma-separated, into
 * *out (left as it is when there are none: the callers start from NULL). 0, or the OOM error. */
int oai__unknown_keys(const cJSON *root, const char *const *fields, size_t n_fields, char **out, oai_error *e);

/* The common end of a dialect's parse (Messages, Responses): the request root translated into
 * chat, rc what the translation returned. Notes root's keys that fields does not name, parses chat
 * as a chat completions request into out and hands it d; frees root and chat always, and d and
 * the notes on any failure. 0 or the failure's negative errno (e filled). */
int oai__dialect_finish(cJSON *root, cJSON *chat, oai_dialect *d, const char *const *fields, size_t n_fields, int rc,
                        const oai_limits *lim, oai_request *out, oai_error *e);

/* The dialects' own halves (oai_responses.c, oai_messages.c). */
const char *const *oai__responses_fields(size_t *n);
const char *const *oai__messages_fields(size_t *n);
char *oai__responses_json(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u);
void oai__responses_open(oai_dialect *d, const oai_resp *r);
void oai__responses_delta(oai_dialect *d, const oai_resp *r, const struct tc_delta *t, const oai_lp *lps, int n_lps);
void oai__responses_close_item(oai_dialect *d, const oai_resp *r);
char *oai__responses_close(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u);
void oai__responses_error(oai_dialect *d, const oai_resp *r, const oai_error *e);
char *oai__messages_json(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u);
void oai__messages_open(oai_dialect *d, const oai_resp *r, const oai_usage *u);
void oai__messages_delta(oai_dialect *d, const oai_resp *r, const struct tc_delta *t);
void oai__messages_close_item(oai_dialect *d);
char *oai__messages_close(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u);

/* ---- structured outputs (oai_structured.c, oai_schema.c, oai_numrange.c) ------------------- */

/* The response_format / guided_* / structured_outputs / grammar / json_schema fields into
 * r->grammar, compiled (through lim->grammars when set). At most one of them may constrain a
 * request. 0 or -EINVAL with e filled (400 naming the field, the position and the reason). */
int oai__parse_structured(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e);

/* Compiles GBNF text (start rule root) through lim->grammars (when set), for constraints the
 * server builds itself (a forced tool call: literal text around oai_schema_gbnf rules). Returns a
 * reference the caller owns, or NULL with e filled: 400 invalid_value naming param, with the
 * line, column and reason. */
gr_grammar *oai__grammar_gbnf(const oai_limits *lim, const char *text, const char *param, oai_error *e);

/* A bound of a numeric range: set = 0 for none; excl = 1 for an exclusive one. */
typedef struct oai_bound {
    int set;
    int64_t v;  /* |v| ≤ 10^18 */
    int excl;
} oai_bound;

struct buf; /* base/buf.h */

/* GBNF for the JSON integers in lo..hi (inclusive bounds), appended to e; -1 when empty. */
int oai__int_range(struct buf *e, const oai_bound *lo, const oai_bound *hi);
/* GBNF for the JSON numbers in lo..hi (whole bounds, each inclusive or exclusive); -1 when
 * empty. */
int oai__number_range(struct buf *e, const oai_bound *lo, const oai_bound *hi);

#endif
