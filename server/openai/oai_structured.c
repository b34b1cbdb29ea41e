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
 * LRU (lim->grammars) under its kind and canonical text, so a repeated schema costs a lookup.
 * Errors are 400s naming the field and, for grammars and regexes, where the text is wrong.
 * Runs on the request-preparation thread (the cache has its own lock).
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

static gr_grammar *compile_schema(const cJSON *schema, const so_src *s, oai_error *e)
{
    char err[384];
    cJSON *parsed = NULL;
    if (cJSON_IsString(schema)) { /* the schema as JSON text */
        parsed = cJSON_Parse(schema->valuestring);
        if (!parsed) return bad(e, s->param, "'%s' is not valid JSON%s", ""), NULL;
        schema = parsed;
    }
    char *text = oai_schema_gbnf(schema, "", err, sizeof err);
    cJSON_Delete(parsed);
    if (!text) return bad(e, s->param, "Invalid JSON schema in '%s': %s", err), NULL;
    gr_error ge;
    gr_grammar *g = gr_compile_gbnf(text, strlen(text), "root", &ge);
    free(text);
    if (!g) bad(e, s->param, "The JSON schema in '%s' cannot be compiled: %s", ge.msg);
    return g;
}

static gr_grammar *compile_gbnf(const char *text, const char *param, oai_error *e)
{
    gr_error ge;
    char where[320];
    gr_grammar *g = gr_compile_gbnf(text, strlen(text), "root", &ge);
    if (!g) {
        if (ge.line) snprintf(where, sizeof where, "at line %d, column %d: %.200s", ge.line, ge.col, ge.msg);
        else snprintf(where, sizeof where, "%.200s", ge.msg);
        bad(e, param, "Invalid grammar in '%s' %s", where);
    }
    return g;
}

gr_grammar *oai__grammar_gbnf(const oai_limits *lim, const char *text, const char *param, oai_error *e)
{
    size_t tl = strlen(text);
    char *key = malloc(tl + 2);
    if (!key) return oai__oom(e), NULL;
    key[0] = SO_GRAMMAR;
    memcpy(key + 1, text, tl + 1);
    gr_grammar *g = lim->grammars ? gr_cache_get(lim->grammars, key, tl + 1) : NULL;
    if (!g && (g = compile_gbnf(text, param, e)) && lim->grammars) gr_cache_put(lim->grammars, key, tl + 1, g);
    free(key);
    return g;
}

static gr_grammar *compile_source(const so_src *s, const cJSON *any_object, oai_error *e)
{
    gr_error ge;
    gr_grammar *g;
    char where[320];
    switch (s->kind) {
    case SO_SCHEMA: return compile_schema(s->any_object ? any_object : s->v, s, e);
    case SO_REGEX:
        g = gr_compile_regex(s->v->valuestring, strlen(s->v->valuestring), &ge);
        if (!g) {
            if (ge.pos >= 0) snprintf(where, sizeof where, "at position %d: %.200s", ge.pos, ge.msg);
            else snprintf(where, sizeof where, "%.200s", ge.msg);
            bad(e, s->param, "Invalid regex in '%s' %s", where);
        }
        return g;
    case SO_GRAMMAR: return compile_gbnf(s->v->valuestring, s->param, e);
    default: {
        int n = cJSON_GetArraySize(s->v);
        const char **ch = malloc(sizeof *ch * (size_t)n);
        size_t *len = malloc(sizeof *len * (size_t)n);
        if (!ch || !len) {
            free(ch);
            free(len);
            oai__oom(e);
            return NULL;
        }
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, s->v) {
            ch[i] = x->valuestring;
            len[i++] = strlen(x->valuestring);
        }
        g = gr_compile_choice(ch, len, n, &ge);
        free(ch);
        free(len);
        if (!g) bad(e, s->param, "Invalid choice list in '%s': %s", ge.msg);
        return g;
    }
    }
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
    gr_grammar *g = lim->grammars ? gr_cache_get(lim->grammars, key, tl + 1) : NULL;
    if (!g && (g = compile_source(&s, any_object, e)) && lim->grammars) gr_cache_put(lim->grammars, key, tl + 1, g);
    free(key);
    cJSON_Delete(any_object);
    if (!g) return -EINVAL;
    r->grammar = g;
    return 0;
}
