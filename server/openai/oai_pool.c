/*
 * oai_pool.c — /v1/embeddings, /v1/rerank and /v1/score bodies and responses (see oai_pool.h).
 * Parsing is strict about the fields it reads and silent about others (collected for the
 * access log), as the main parser (openai.c) is.
 */
#include "server/openai/oai_pool.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/utf8.h"
#include "server/openai/internal.h"

#define ERR_INVALID "invalid_request_error"

static const char *const embed_fields[] = {
    "model", "input", "encoding_format", "dimensions", "user", "normalize", "add_special_tokens",
    "truncate_prompt_tokens", "cache_prompt",
};
static const char *const rerank_fields[] = {
    "model", "query", "documents", "top_n", "return_documents", "truncate_prompt_tokens", "cache_prompt",
};
static const char *const score_fields[] = {
    "model", "text_1", "text_2", "truncate_prompt_tokens", "cache_prompt",
};

const char *const *oai_pool_fields(int kind, size_t *n)
{
    if (kind == OAI_EMBED) {
        *n = sizeof embed_fields / sizeof embed_fields[0];
        return embed_fields;
    }
    if (kind == OAI_RERANK) {
        *n = sizeof rerank_fields / sizeof rerank_fields[0];
        return rerank_fields;
    }
    *n = sizeof score_fields / sizeof score_fields[0];
    return score_fields;
}

static int parse_model(const cJSON *root, const oai_limits *lim, oai_pool_request *r, oai_error *e)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (oai__is_absent(m)) return 0;
    if (!cJSON_IsString(m)) return oai__bad_type(e, "model", "a string");
    if (!*m->valuestring) return 0;
    if (lim->model_name && strcmp(m->valuestring, lim->model_name))
        return oai_fail(e, 404, ERR_INVALID, "model_not_found", "model",
                        "The model '%s' does not exist (this server serves '%s')", m->valuestring,
                        lim->model_name);
    return (r->model = strdup(m->valuestring)) ? 0 : oai__oom(e);
}

/* One text input into p (an empty one is refused, as OpenAI refuses it). */
static int text_input(const cJSON *v, const char *param, oai_prompt *p, oai_error *e)
{
    if (!*v->valuestring) return oai__bad_value(e, param, "must not be an empty string");
    return (p->text = strdup(v->valuestring)) ? 0 : oai__oom(e);
}

/* embeddings' input: a string, strings, token ids or lists of token ids. */
static int parse_input(const cJSON *root, const oai_limits *lim, oai_pool_request *r, oai_error *e)
{
    const char *want = "a string, an array of strings, an array of token ids or an array of token-id arrays";
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (oai__is_absent(in))
        return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "input", "'input' is required");
    if (cJSON_IsString(in)) {
        if (!(r->inputs = calloc(1, sizeof *r->inputs))) return oai__oom(e);
        r->n_inputs = 1;
        return text_input(in, "input", &r->inputs[0], e);
    }
    if (!cJSON_IsArray(in)) return oai__bad_type(e, "input", want);
    int n = cJSON_GetArraySize(in);
    if (n == 0) return oai__bad_value(e, "input", "must not be empty");
    if (cJSON_IsNumber(in->child)) {
        if (!(r->inputs = calloc(1, sizeof *r->inputs))) return oai__oom(e);
        r->n_inputs = 1;
        return oai__parse_ids(in, lim, "input", &r->inputs[0].ids, &r->inputs[0].n_ids, e);
    }
    if (n > OAI_MAX_POOL_INPUTS) return oai__bad_value(e, "input", "has more than 2048 inputs");
    if (!(r->inputs = calloc((size_t)n, sizeof *r->inputs))) return oai__oom(e);
    r->n_inputs = n;
    int i = 0, strings = cJSON_IsString(in->child);
    const cJSON *it;
    cJSON_ArrayForEach(it, in)
    {
        char param[48];
        snprintf(param, sizeof param, "input[%d]", i);
        int rc;
        if (strings && cJSON_IsString(it))
            rc = text_input(it, param, &r->inputs[i], e);
        else if (!strings && cJSON_IsArray(it))
            rc = oai__parse_ids(it, lim, param, &r->inputs[i].ids, &r->inputs[i].n_ids, e);
        else
            rc = oai__bad_type(e, "input", want);
        if (rc) return rc;
        i++;
    }
    return 0;
}

static int parse_embed(const cJSON *root, const oai_limits *lim, oai_pool_request *r, oai_error *e)
{
    int rc = parse_input(root, lim, r, e);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    if (!rc && !oai__is_absent(f)) {
        if (!cJSON_IsString(f)) return oai__bad_type(e, "encoding_format", "a string ('float' or 'base64')");
        if (!strcmp(f->valuestring, "base64")) r->base64 = 1;
        else if (strcmp(f->valuestring, "float"))
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", "encoding_format",
                            "'encoding_format' must be 'float' or 'base64', not '%.64s'", f->valuestring);
    }
    if (!rc) rc = oai__get_int(root, "dimensions", 1, 1 << 24, &r->dimensions, e);
    if (!rc) rc = oai__get_bool(root, "normalize", &r->normalize, e);
    if (!rc) rc = oai__get_bool(root, "add_special_tokens", &r->add_special, e);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "user");
    if (!rc && !oai__is_absent(u) && !cJSON_IsString(u)) rc = oai__bad_type(e, "user", "a string");
    return rc;
}

/* A list of strings (or a string: one) into out[n]; documents may be {"text": …} objects. */
static int parse_texts(const cJSON *v, const char *param, int objects, char ***out, int *n_out, oai_error *e)
{
    if (oai__is_absent(v))
        return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", param, "'%s' is required", param);
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) return oai__bad_type(e, param, "a string or an array of strings");
    if (n == 0) return oai__bad_value(e, param, "must not be empty");
    if (n > OAI_MAX_POOL_INPUTS) return oai__bad_value(e, param, "has more than 2048 entries");
    char **t = calloc((size_t)n, sizeof *t);
    if (!t) return oai__oom(e);
    *out = t;
    *n_out = n;
    int i = 0;
    const cJSON *it = cJSON_IsString(v) ? v : v->child;
    for (; it && i < n; it = cJSON_IsString(v) ? NULL : it->next, i++) {
        char p[64];
        snprintf(p, sizeof p, "%s[%d]", param, i);
        const cJSON *s = it;
        if (objects && cJSON_IsObject(it)) {
            s = cJSON_GetObjectItemCaseSensitive(it, "text");
            snprintf(p, sizeof p, "%s[%d].text", param, i);
        }
        if (!cJSON_IsString(s))
            return oai__bad_type(e, p, objects ? "a string or an object with a string 'text'" : "a string");
        if (!(t[i] = strdup(s->valuestring))) return oai__oom(e);
    }
    return 0;
}

/* The texts of texts[0 .. n) become r->inputs (ownership moves). */
static int texts_to_inputs(char **texts, int n, oai_pool_request *r, oai_error *e)
{
    r->inputs = calloc((size_t)n, sizeof *r->inputs);
    if (!r->inputs) {
        for (int i = 0; i < n; i++) free(texts[i]);
        free(texts);
        return oai__oom(e);
    }
    for (int i = 0; i < n; i++) r->inputs[i].text = texts[i];
    r->n_inputs = n;
    free(texts);
    return 0;
}

static int parse_rerank(const cJSON *root, oai_pool_request *r, oai_error *e)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "query");
    if (oai__is_absent(q))
        return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "query", "'query' is required");
    if (!cJSON_IsString(q)) return oai__bad_type(e, "query", "a string");
    char **docs = NULL;
    int n = 0;
    int rc = parse_texts(cJSON_GetObjectItemCaseSensitive(root, "documents"), "documents", 1, &docs, &n, e);
    if (rc) {
        for (int i = 0; docs && i < n; i++) free(docs[i]);
        free(docs);
        return rc;
    }
    if ((rc = texts_to_inputs(docs, n, r, e))) return rc;
    r->queries = calloc(1, sizeof *r->queries);
    if (!r->queries || !(r->queries[0] = strdup(q->valuestring))) return oai__oom(e);
    r->n_queries = 1;
    r->top_n = n;
    if ((rc = oai__get_int(root, "top_n", 1, 1 << 30, &r->top_n, e))) return rc;
    if (r->top_n > n) r->top_n = n;
    return oai__get_bool(root, "return_documents", &r->return_documents, e);
}

static int parse_score(const cJSON *root, oai_pool_request *r, oai_error *e)
{
    char **t2 = NULL;
    int n2 = 0;
    int rc = parse_texts(cJSON_GetObjectItemCaseSensitive(root, "text_1"), "text_1", 0, &r->queries,
                         &r->n_queries, e);
    if (!rc) rc = parse_texts(cJSON_GetObjectItemCaseSensitive(root, "text_2"), "text_2", 0, &t2, &n2, e);
    if (!rc && r->n_queries != 1 && r->n_queries != n2)
        rc = oai_fail(e, 400, ERR_INVALID, "invalid_value", "text_2",
                      "'text_1' has %d texts and 'text_2' %d: give one text_1 for all, or as many as text_2",
                      r->n_queries, n2);
    if (rc) {
        for (int i = 0; t2 && i < n2; i++) free(t2[i]);
        free(t2);
        return rc;
    }
    return texts_to_inputs(t2, n2, r, e);
}

int oai_parse_pool(int kind, const char *body, size_t len, const oai_limits *lim, oai_pool_request *out,
                   oai_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->normalize = 1;
    out->add_special = 1;
    out->return_documents = 1;
    if (oai_validate_body(body, len, e)) return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body is not valid JSON");
    int rc;
    if (!cJSON_IsObject(root)) {
        rc = oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body must be a JSON object");
    } else {
        rc = parse_model(root, lim, out, e);
        if (!rc) rc = kind == OAI_EMBED ? parse_embed(root, lim, out, e)
                      : kind == OAI_RERANK ? parse_rerank(root, out, e)
                                           : parse_score(root, out, e);
        if (!rc) rc = oai__get_int(root, "truncate_prompt_tokens", 1, 1 << 30, &out->truncate_prompt_tokens, e);
        if (!rc) rc = oai__get_bool(root, "cache_prompt", &out->cache_prompt, e);
        if (!rc) {
            size_t nf;
            const char *const *f = oai_pool_fields(kind, &nf);
            rc = oai__unknown_keys(root, f, nf, &out->ignored, e);
        }
    }
    cJSON_Delete(root);
    if (rc) oai_pool_request_free(out);
    return rc;
}

void oai_pool_request_free(oai_pool_request *r)
{
    free(r->model);
    for (int i = 0; r->inputs && i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].ids);
    }
    free(r->inputs);
    for (int i = 0; r->queries && i < r->n_queries; i++) free(r->queries[i]);
    free(r->queries);
    free(r->ignored);
    memset(r, 0, sizeof *r);
}

const char *oai_pool_query(const oai_pool_request *r, int i)
{
    return r->n_queries == 1 ? r->queries[0] : r->queries[i];
}

/* ---- responses ------------------------------------------------------------------------------ */

char *oai_base64(const void *data, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = 0;
    return out;
}

int oai_pool_check_dim(const oai_pool_request *q, int dim, oai_error *e)
{
    if (q->dimensions > dim)
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", "dimensions",
                        "'dimensions' (%d) is larger than the model's embedding size (%d)", q->dimensions, dim);
    return 0;
}

/* One embedding: the first d values, normalised when asked, as numbers or base64. */
static cJSON *embedding_value(const oai_pool_request *q, const float *v, int d)
{
    float *x = malloc(sizeof *x * (size_t)d);
    if (!x) return NULL;
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)v[i] * v[i];
    double k = q->normalize && ss > 0 ? 1.0 / sqrt(ss) : 1.0;
    for (int i = 0; i < d; i++) x[i] = (float)(v[i] * k);
    cJSON *out = NULL;
    if (q->base64) { /* little-endian float32, as the SDKs decode it */
        unsigned char *b = malloc((size_t)d * 4);
        for (int i = 0; b && i < d; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int k2 = 0; k2 < 4; k2++) b[i * 4 + k2] = (unsigned char)(u >> (8 * k2));
        }
        char *s = b ? oai_base64(b, (size_t)d * 4) : NULL;
        if (s) out = cJSON_CreateString(s);
        free(s);
        free(b);
    } else {
        out = cJSON_CreateArray();
        for (int i = 0; out && i < d; i++) cJSON_AddItemToArray(out, cJSON_CreateNumber(x[i]));
    }
    free(x);
    return out;
}

static cJSON *usage_obj(int n_tokens)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", n_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", n_tokens);
    return u;
}

/* The model name as the response shows it (valid UTF-8). */
static void add_model(cJSON *o, const char *model_id)
{
    char *m = utf8_sanitize(model_id, strlen(model_id));
    cJSON_AddStringToObject(o, "model", m ? m : "");
    free(m);
}

static char *print_free(cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *oai_embeddings_json(const oai_pool_request *q, const char *model_id, float *const *vecs, int dim, int n_tokens)
{
    int d = q->dimensions > 0 && q->dimensions < dim ? q->dimensions : dim;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < q->n_inputs; i++) {
        cJSON *it = cJSON_CreateObject(), *v = embedding_value(q, vecs[i], d);
        cJSON_AddStringToObject(it, "object", "embedding");
        cJSON_AddNumberToObject(it, "index", i);
        if (!v) {
            cJSON_Delete(it);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(it, "embedding", v);
        cJSON_AddItemToArray(data, it);
    }
    add_model(o, model_id);
    cJSON_AddItemToObject(o, "usage", usage_obj(n_tokens));
    return print_free(o);
}

/* The input text as a response shows it (valid UTF-8). */
static cJSON *text_value(const char *t)
{
    char *s = utf8_sanitize(t, strlen(t));
    cJSON *v = cJSON_CreateString(s ? s : "");
    free(s);
    return v;
}

char *oai_rerank_json(const oai_pool_request *q, const char *id, const char *model_id, const float *scores,
                      int n_tokens)
{
    int n = q->n_inputs;
    int *order = malloc(sizeof *order * (size_t)n);
    if (!order) return NULL;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) { /* stable: equal scores keep their input order */
        int k = order[i], j = i;
        while (j > 0 && scores[order[j - 1]] < scores[k]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "list");
    add_model(o, model_id);
    cJSON_AddItemToObject(o, "usage", usage_obj(n_tokens));
    cJSON *res = cJSON_AddArrayToObject(o, "results");
    for (int r = 0; r < q->top_n && r < n; r++) {
        int i = order[r];
        cJSON *it = cJSON_CreateObject();
        cJSON_AddNumberToObject(it, "index", i);
        cJSON_AddNumberToObject(it, "relevance_score", scores[i]);
        if (q->return_documents) {
            cJSON *doc = cJSON_AddObjectToObject(it, "document");
            cJSON_AddItemToObject(doc, "text", text_value(q->inputs[i].text ? q->inputs[i].text : ""));
        }
        cJSON_AddItemToArray(res, it);
    }
    free(order);
    return print_free(o);
}

char *oai_score_json(const oai_pool_request *q, const char *id, int64_t created, const char *model_id,
                     const float *scores, int n_tokens)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddNumberToObject(o, "created", (double)created);
    add_model(o, model_id);
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < q->n_inputs; i++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddNumberToObject(it, "index", i);
        cJSON_AddStringToObject(it, "object", "score");
        cJSON_AddNumberToObject(it, "score", scores[i]);
        cJSON_AddItemToArray(data, it);
    }
    cJSON *u = usage_obj(n_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", 0);
    cJSON_AddItemToObject(o, "usage", u);
    return print_free(o);
}
