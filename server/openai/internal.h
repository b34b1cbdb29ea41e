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
 */
#ifndef KVSERVE_OAI_INTERNAL_H
#define KVSERVE_OAI_INTERNAL_H

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
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
