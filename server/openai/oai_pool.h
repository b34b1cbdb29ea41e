/*
 * oai_pool.h — the pooled routes at the edge: /v1/embeddings (OpenAI), /v1/rerank and /rerank
 * (Jina / Cohere, as vLLM and llama.cpp serve them) and /v1/score (vLLM). Request JSON → an
 * owned oai_pool_request; the engine's pooled vectors or scores → the response JSON.
 *
 *   embeddings:  input (string | string[] | int[] | int[][]) → one vector per input, truncated to
 *                `dimensions`, L2-normalised unless normalize is false, as floats or base64
 *                (little-endian float32, what the OpenAI SDKs ask for by default)
 *   rerank:      query + documents → relevance scores sorted best first, top_n of them
 *   score:       text_1 × text_2 (one against many, or pairwise) → scores in input order
 *
 * Like openai.h, nothing here touches the engine or the tokenizer: the server builds the
 * prompts (a reranker's template) and hands back the numbers. Called by server/pooled.c.
 */
#ifndef KVSERVE_OAI_POOL_H
#define KVSERVE_OAI_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "server/openai/openai.h"

enum oai_pool_kind { OAI_EMBED = 0, OAI_RERANK = 1, OAI_SCORE = 2 };

#define OAI_MAX_POOL_INPUTS 2048 /* inputs (documents, pairs) per request, OpenAI's limit */

typedef struct oai_pool_request {
    int kind;                 /* enum oai_pool_kind */
    char *model;              /* owned; NULL when absent or empty */
    oai_prompt *inputs;       /* [n_inputs] owned: embedding inputs, or the documents / text_2 */
    int n_inputs;
    char **queries;           /* [n_queries] owned: rerank's query (1), score's text_1 (1: paired
                                 with every input, else one per input) */
    int n_queries;
    int base64;               /* encoding_format "base64" */
    int dimensions;           /* > 0: vectors truncated to this many values; 0: all */
    int normalize;            /* 1 (default): embeddings L2-normalised (after truncation) */
    int add_special;          /* add_special_tokens (default 1): BOS / EOS around text inputs */
    int truncate_prompt_tokens; /* > 0: keep the last N tokens of each prompt */
    int cache_prompt;         /* 1: the prompts' KV stays in the prefix cache (default 0) */
    int top_n;                /* rerank: results returned (0: all) */
    int return_documents;     /* rerank: each result carries its document (default 1) */
    char *ignored;            /* owned: unknown top-level fields, comma-separated, or NULL */
} oai_pool_request;

/* Parses a body of route kind into *out (zeroed first). 0, or -EINVAL with e filled (400 naming
 * the field, 404 for another model); on failure *out holds nothing to free. */
int oai_parse_pool(int kind, const char *body, size_t len, const oai_limits *lim, oai_pool_request *out,
                   oai_error *e);
void oai_pool_request_free(oai_pool_request *r);

/* The query paired with input i. */
const char *oai_pool_query(const oai_pool_request *r, int i);

/* The request fields a route reads (a static table; its length in *n), for the docs check. */
const char *const *oai_pool_fields(int kind, size_t *n);

/* The embeddings list: vecs[i] has dim values (the model's); n_tokens: the prompt tokens of all
 * inputs. dimensions > dim is refused earlier (oai_pool_check_dim). malloc'd JSON or NULL. */
char *oai_embeddings_json(const oai_pool_request *q, const char *model_id, float *const *vecs, int dim,
                          int n_tokens);
/* 0 when q's dimensions fit a model of dim values, else -EINVAL with e filled (400). */
int oai_pool_check_dim(const oai_pool_request *q, int dim, oai_error *e);

/* rerank (sorted, top_n) or score (in order): scores[i] of input i. id: the response id. */
char *oai_rerank_json(const oai_pool_request *q, const char *id, const char *model_id, const float *scores,
                      int n_tokens);
char *oai_score_json(const oai_pool_request *q, const char *id, int64_t created, const char *model_id,
                     const float *scores, int n_tokens);

/* Base64 (RFC 4648, padded) of n bytes into a malloc'd string. */
char *oai_base64(const void *data, size_t n);

#endif
