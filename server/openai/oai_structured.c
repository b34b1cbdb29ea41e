/*
 * oai_structured.c — the structured-output fields of both endpoints → a compiled grammar:
 *
 *   response_format        {"type": "text" | "json_object" | "json_schema", "json_schema":
 *                           {"name", "schema", "strict"}} (OpenAI); json_object may carry a
 *                           "schema" (llama.cpp)
 *   guided_json, guided_regex, guided_choice, guided_grammar            (vLLM, older spelling)
 *   structured_outputs     {"json" | "regex" | "choice" | "grammar" | "json_object": true}   (vLLM)
 *   grammar, json_schema   (llama.cpp's server: GBNF text, a schema)
 *
 * At most one of them may constrain a request. Schemas become GBNF through oai_schema.c, regexes
 * and choices through grammar/grammar.h; the compiled grammar is looked up first in the server's
 * LRU (lim->grammars) under its kind and canonical text, so a repeated schema costs a lookup,
 * and a source that failed costs one too (its error is cached). A miss compiles on the cache's
 * low-priority workers with a wall-clock budget of GR_COMPILE_MS, the schema's translation
 * included, while the request's preparation thread waits (gr_cache_compile). Errors are 400s
 * naming the field and, for grammars and regexes, where the text is wrong; 503 when too many
 * compilations are waiting. Runs on the request-preparation thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/internal.h"
#include "server/openai/oai_schema.h"

static const char ERR_INVALID[] = "invalid_request_error";

enum { SO_SCHEMA = 'j', SO_REGEX = 'r', SO_CHOICE = 'c', SO_GRAMMAR = 'g' };

/* One constraint found in the request. */
typedef struct so_src {
    int kind;                 /* SO_* */
    const cJSON *v;           /* the schema, regex, choice list or grammar text */
    char param[64];           /* the field it came from, for errors */
    int any_object;           /* json_object: v is NULL, any JSON object */
} so_src;

static int bad(oai_error *e, const char *param, const char *fmt, const char *detail)
{
    return oai_fail(e, 400, ERR_INVALID, "invalid_value", param, fmt, param, detail);
}

/* Records a constraint; a second one is an error. */
static int add_src(so_src *s, int *n, int kind, const cJSON *v, const char *param, oai_error *e)
{
    if (*n)
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", param,
                        "Only one structured output constraint may be given per request; got '%s' and '%s'", s->param, param);
    s->kind = kind;
    s->v = v;
    s->any_object = 0;
    snprintf(s->param, sizeof s->param, "%s", param);
    *n = 1;
    return 0;
}

static int want_string(const cJSON *v, const char *param, oai_error *e)
{
    if (!cJSON_IsString(v) || !*v->valuestring) return oai__bad_type(e, param, "a non-empty string");
    return 0;
}

static int want_choices(const cJSON *v, const char *param, oai_error *e)
{
    if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v)) return oai__bad_type(e, param, "a non-empty array of strings");
    const cJSON *x;
    cJSON_ArrayForEach(x, v) if (!cJSON_IsString(x)) return oai__bad_type(e, param, "a non-empty array of strings");
    return 0;
}

static int want_schema(const cJSON *v, const char *param, oai_error *e)
{
    if (!cJSON_IsObject(v) && !cJSON_IsBool(v) && !cJSON_IsString(v)) return oai__bad_type(e, param, "a JSON schema (an object, or its JSON text)");
    return 0;
}

static int parse_response_format(const cJSON *rf, so_src *s, int *n, oai_error *e)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsObject(rf) || !cJSON_IsString(t)) return oai__bad_type(e, "response_format", "an object with a 'type'");
    if (!strcmp(t->valuestring, "text")) return 0;
    if (!strcmp(t->valuestring, "json_object")) {
        const cJSON *sch = cJSON_GetObjectItemCaseSensitive(rf, "schema");
        if (sch && !cJSON_IsNull(sch)) return want_schema(sch, "response_format.schema", e) ? -EINVAL : add_src(s, n, SO_SCHEMA, sch, "response_format.schema", e);
        if (add_src(s, n, SO_SCHEMA, NULL, "response_format", e)) return -EINVAL;
        s->any_object = 1;
        return 0;
    }
    if (!strcmp(t->valuestring, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        if (!cJSON_IsObject(js))
            return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "response_format.json_schema",
                            "'response_format.json_schema' must be an object with a 'schema' when the type is 'json_schema'");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name"), *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
        if (name && !cJSON_IsNull(name) && !cJSON_IsString(name)) return oai__bad_type(e, "response_format.json_schema.name", "a string");
        if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict)) return oai__bad_type(e, "response_format.json_schema.strict", "a boolean");
        const cJSON *sch = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!sch || cJSON_IsNull(sch))
            return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "response_format.json_schema.schema",
                            "'response_format.json_schema.schema' is required");
        if (want_schema(sch, "response_format.json_schema.schema", e)) return -EINVAL;
        return add_src(s, n, SO_SCHEMA, sch, "response_format.json_schema.schema", e);
    }
    return oai_fail(e, 400, ERR_INVALID, "invalid_value", "response_format",
                    "response_format type '%.40s' is not supported (use 'text', 'json_object' or 'json_schema')", t->valuestring);
}

static int parse_structured_outputs(const cJSON *so, so_src *s, int *n, oai_error *e)
{
    if (!cJSON_IsObject(so)) return oai__bad_type(e, "structured_outputs", "an object");
    for (const cJSON *k = so->child; k; k = k->next) {
        if (cJSON_IsNull(k)) continue;
        char param[64];
        snprintf(param, sizeof param, "structured_outputs.%.40s", k->string);
        int rc;
        if (!strcmp(k->string, "json")) rc = want_schema(k, param, e) ? -EINVAL : add_src(s, n, SO_SCHEMA, k, param, e);
        else if (!strcmp(k->string, "regex")) rc = want_string(k, param, e) ? -EINVAL : add_src(s, n, SO_REGEX, k, param, e);
        else if (!strcmp(k->string, "choice")) rc = want_choices(k, param, e) ? -EINVAL : add_src(s, n, SO_CHOICE, k, param, e);
        else if (!strcmp(k->string, "grammar")) rc = want_string(k, param, e) ? -EINVAL : add_src(s, n, SO_GRAMMAR, k, param, e);
        else if (!strcmp(k->string, "json_object")) {
            if (!cJSON_IsBool(k)) return oai__bad_type(e, param, "a boolean");
            if (cJSON_IsFalse(k)) continue;
            rc = add_src(s, n, SO_SCHEMA, NULL, param, e);
            s->any_object = 1;
        } else if (!strcmp(k->string, "disable_fallback")) {
            continue; /* there is one backend: nothing to fall back from */
        } else {
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", param, "'%s' is not supported by this server", param);
        }
        if (rc) return rc;
    }
    return 0;
}

/* Finds the request's constraint (at most one). */
static int find_source(const cJSON *root, so_src *s, int *n, oai_error *e)
{
    static const struct { const char *field; int kind; } plain[] = {
        {"guided_json", SO_SCHEMA}, {"guided_regex", SO_REGEX}, {"guided_choice", SO_CHOICE},
        {"guided_grammar", SO_GRAMMAR}, {"grammar", SO_GRAMMAR}, {"json_schema", SO_SCHEMA}};
    int rc;
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (rf && !cJSON_IsNull(rf) && (rc = parse_response_format(rf, s, n, e))) return rc;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "structured_outputs");
    if (so && !cJSON_IsNull(so) && (rc = parse_structured_outputs(so, s, n, e))) return rc;
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, plain[i].field);
        if (!v || cJSON_IsNull(v)) continue;
        int k = plain[i].kind;
        rc = k == SO_SCHEMA ? want_schema(v, plain[i].field, e) : k == SO_CHOICE ? want_choices(v, plain[i].field, e) : want_string(v, plain[i].field, e);
        if (rc || (rc = add_src(s, n, k, v, plain[i].field, e))) return rc;
    }
    return 0;
}

/* ---- compiling --------------------------------------------------------------------------- */

/* A failure of the schema's translation rather than of the compilation (gr_error.line, a
 * convention of this file: the translator's errors have no position in GBNF text). */
enum { SO_BAD_JSON = -2, SO_BAD_SCHEMA = -1 };

/* What a compile worker needs for one source (gr_compile_fn's argument). */
typedef struct so_job {
    int kind;                 /* SO_*, or SO_GRAMMAR for the server's own tool-call text */
    const cJSON *v;           /* the source (read-only while the request waits) */
    const char *text;         /* SO_GRAMMAR: the GBNF text */
} so_job;

/* gr_compile_fn: the source into a grammar by deadline_us (the schema's translation included). */
static gr_grammar *so_compile(void *arg, int64_t deadline_us, gr_error *ge)
{
    const so_job *j = arg;
    char err[384];
    switch (j->kind) {
    case SO_SCHEMA: {
        cJSON *parsed = NULL;
        const cJSON *schema = j->v;
        if (cJSON_IsString(schema)) { /* the schema as JSON text */
            if (!(parsed = cJSON_Parse(schema->valuestring))) {
                ge->line = SO_BAD_JSON;
                return NULL;
            }
            schema = parsed;
        }
        /* (the translation is linear in the schema: $refs are translated once each) */
        char *text = oai_schema_gbnf(schema, "", err, sizeof err);
        cJSON_Delete(parsed);
        if (!text) {
            snprintf(ge->msg, sizeof ge->msg, "%.250s", err);
            ge->line = SO_BAD_SCHEMA;
            return NULL;
        }
        gr_grammar *g = gr_compile_gbnf_by(text, strlen(text), "root", deadline_us, ge);
        free(text);
        return g;
    }
    case SO_REGEX: return gr_compile_regex_by(j->v->valuestring, strlen(j->v->valuestring), deadline_us, ge);
    case SO_GRAMMAR: {
        const char *t = j->text ? j->text : j->v->valuestring;
        return gr_compile_gbnf_by(t, strlen(t), "root", deadline_us, ge);
    }
    default: {
        int n = cJSON_GetArraySize(j->v);
        const char **ch = malloc(sizeof *ch * (size_t)(n ? n : 1));
        size_t *len = malloc(sizeof *len * (size_t)(n ? n : 1));
        gr_grammar *g = NULL;
        if (!ch || !len) {
            snprintf(ge->msg, sizeof ge->msg, "out of memory");
        } else {
            int i = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, j->v) {
                ch[i] = x->valuestring;
                len[i++] = strlen(x->valuestring);
            }
            g = gr_compile_choice_by(ch, len, n, deadline_us, ge);
        }
        free(ch);
        free(len);
        return g;
    }
    }
}

/* The 400 (or 503) for a failed compilation of kind from param. */
static int so_error(int kind, const char *param, const gr_error *ge, int busy, oai_error *e)
{
    char where[320];
    if (busy) return oai_fail(e, 503, "server_error", "server_is_overloaded", param, "%s", ge->msg);
    if (!strcmp(ge->msg, "out of memory")) return oai__oom(e);
    switch (kind) {
    case SO_SCHEMA:
        if (ge->line == SO_BAD_JSON) return bad(e, param, "'%s' is not valid JSON%s", "");
        if (ge->line == SO_BAD_SCHEMA) return bad(e, param, "Invalid JSON schema in '%s': %s", ge->msg);
        return bad(e, param, "The JSON schema in '%s' cannot be compiled: %s", ge->msg);
    case SO_REGEX:
        if (ge->pos >= 0) snprintf(where, sizeof where, "at position %d: %.200s", ge->pos, ge->msg);
        else snprintf(where, sizeof where, "%.200s", ge->msg);
        return bad(e, param, "Invalid regex in '%s' %s", where);
    case SO_GRAMMAR:
        if (ge->line > 0) snprintf(where, sizeof where, "at line %d, column %d: %.200s", ge->line, ge->col, ge->msg);
        else snprintf(where, sizeof where, "%.200s", ge->msg);
        return bad(e, param, "Invalid grammar in '%s' %s", where);
    default: return bad(e, param, "Invalid choice list in '%s': %s", ge->msg);
    }
}

/* The grammar of job, cached under key[0..len) (kind, then the canonical text): compiled on the
 * cache's workers (or here, without a cache) with a wall-clock budget; its failure is cached too.
 * NULL with e filled. */
static gr_grammar *so_grammar(const oai_limits *lim, const char *key, size_t len, so_job *job, const char *param,
                              oai_error *e)
{
    gr_error ge;
    memset(&ge, 0, sizeof ge);
    ge.pos = -1;
    int busy = 0;
    gr_grammar *g = lim->grammars ? gr_cache_compile(lim->grammars, key, len, so_compile, job, &ge, &busy)
                                  : so_compile(job, 0, &ge);
    if (!g) so_error(job->kind, param, &ge, busy, e);
    return g;
}

gr_grammar *oai__grammar_gbnf(const oai_limits *lim, const char *text, const char *param, oai_error *e)
{
    size_t tl = strlen(text);
    char *key = malloc(tl + 2);
    if (!key) return oai__oom(e), NULL;
    key[0] = SO_GRAMMAR;
    memcpy(key + 1, text, tl + 1);
    so_job job = {SO_GRAMMAR, NULL, text};
    gr_grammar *g = so_grammar(lim, key, tl + 1, &job, param, e);
    free(key);
    return g;
}

int oai__parse_structured(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e)
{
    so_src s;
    int n = 0, rc = find_source(root, &s, &n, e);
    if (rc || !n) return rc;
    /* the cache key: kind, then the canonical text */
    cJSON *any_object = s.any_object ? cJSON_Parse("{\"type\": \"object\"}") : NULL;
    const cJSON *v = s.any_object ? any_object : s.v;
    char *text = cJSON_IsString(v) ? strdup(v->valuestring) : cJSON_PrintUnformatted(v);
    size_t tl = text ? strlen(text) : 0;
    char *key = text ? malloc(tl + 2) : NULL;
    if (!key) {
        free(text);
        cJSON_Delete(any_object);
        return oai__oom(e);
    }
    key[0] = (char)(s.kind == SO_SCHEMA && cJSON_IsString(v) ? 'J' : s.kind);
    memcpy(key + 1, text, tl + 1);
    free(text);
    so_job job = {s.kind, s.any_object ? any_object : s.v, NULL};
    gr_grammar *g = so_grammar(lim, key, tl + 1, &job, s.param, e);
    free(key);
    cJSON_Delete(any_object);
    if (!g) return -EINVAL;
    r->grammar = g;
    return 0;
}
