/*
 * test_oai_schema.c — JSON Schema → grammar (server/openai/oai_schema.c).
 *
 *   - errors name the keyword and the schema path;
 *   - integer and number ranges against plain arithmetic on every value of a window;
 *   - random schemas over every supported keyword (a generator with a printed seed): hundreds
 *     of documents generated under their grammars on a small vocabulary must parse and
 *     validate with Python's jsonschema (tests/grammar_check.py);
 *   - completeness on small schemas: of an enumerated set of documents (written in the
 *     grammar's property order, compact or spaced), the grammar accepts exactly those Python
 *     calls valid, and every byte of them is allowed by the mask on the way.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/grammar.h"
#include "server/openai/oai_schema.h"
#include "tests/grammar_harness.h"

static gr_grammar *ts_compile(const char *schema_json, char *err, size_t err_len)
{
    cJSON *s = cJSON_Parse(schema_json);
    cr_assert_not_null(s, "bad test schema %s", schema_json);
    char *text = oai_schema_gbnf(s, "", err, err_len);
    cJSON_Delete(s);
    if (!text) return NULL;
    gr_error e;
    gr_grammar *g = gr_compile_gbnf(text, strlen(text), "root", &e);
    cr_assert_not_null(g, "generated grammar does not compile (%s):\n%s", e.msg, text);
    free(text);
    return g;
}

/* 1: complete, 0: prefix, -1: rejected. */
static int ts_match(gr_grammar *g, const char *s)
{
    gr_vocab *v = gr_vocab_create_raw(0, NULL, NULL, NULL, 0);
    gr_matcher *m = gr_matcher_create(g, v);
    int rc = gr_matcher_accept_bytes(m, s, strlen(s));
    int r = rc ? -1 : gr_matcher_is_accepting(m);
    gr_matcher_destroy(m);
    gr_vocab_destroy(v);
    return r;
}

static void ts_error(const char *schema, const char *needle)
{
    char err[384];
    gr_grammar *g = ts_compile(schema, err, sizeof err);
    cr_assert_null(g, "%s should be refused", schema);
    cr_expect(strstr(err, needle) != NULL, "%s: '%s' lacks '%s'", schema, err, needle);
}

Test(oai_schema, errors_name_keyword_and_path)
{
    ts_error("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"multipleOf\":3}}}", "at properties.a: unsupported JSON Schema keyword 'multipleOf'");
    ts_error("{\"type\":\"array\",\"items\":{\"uniqueItems\":true}}", "at items: unsupported JSON Schema keyword 'uniqueItems'");
    ts_error("{\"minProperties\":1}", "'minProperties'");
    ts_error("{\"$ref\":\"#/$defs/nope\"}", "does not name a schema");
    ts_error("{\"$ref\":\"http://example.com/s.json\"}", "only local references");
    ts_error("{\"type\":\"string\",\"format\":\"hostname\"}", "unsupported format 'hostname'");
    ts_error("{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "lookahead");
    ts_error("{\"type\":\"string\",\"pattern\":\"ab\",\"maxLength\":3}", "minLength/maxLength together with pattern");
    ts_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer lies within the bounds");
    ts_error("{\"type\":\"integer\",\"exclusiveMinimum\":4,\"exclusiveMaximum\":5}", "no integer");
    ts_error("{\"type\":\"objekt\"}", "unknown type 'objekt'");
    ts_error("{\"type\":\"object\",\"required\":[\"x\"]}", "required property 'x' is not in 'properties'");
    ts_error("{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", "'type' beside 'anyOf'");
    ts_error("{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":2}]}", "'allOf' is supported with one schema only");
    ts_error("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems is above maxItems");
    ts_error("{\"enum\":[1,2],\"type\":\"string\"}", "no value of 'enum' fits");
    ts_error("false", "allows no value");
    ts_error("{\"type\":\"string\",\"minLength\":-1}", "'minLength' must be a whole number");
}

Test(oai_schema, recursive_refs_and_composition_prefix)
{
    char err[384];
    gr_grammar *g = ts_compile("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                               "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":3}},\"required\":[\"v\"]}},"
                               "\"$ref\":\"#/$defs/node\"}", err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    cr_assert_eq(ts_match(g, "{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\":3,\"kids\":[]}]}"), 1);
    cr_assert_eq(ts_match(g, "{\"kids\": []}"), -1, "v is required and comes first");
    cr_assert_eq(ts_match(g, "{\"v\": 1} "), -1, "nothing follows the root value");
    gr_unref(g);
    /* composition: a tool call around schema rules with a prefix */
    cJSON *s = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12}},\"required\":[\"city\"]}");
    char *rules = oai_schema_gbnf(s, "args-", err, sizeof err);
    cJSON_Delete(s);
    cr_assert_not_null(rules, "%s", err);
    buf b = {0};
    buf_puts(&b, "root ::= \"<tool_call>{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" args-root \"}</tool_call>\"\n");
    buf_puts(&b, rules);
    free(rules);
    char *text = buf_take(&b);
    gr_error e;
    g = gr_compile_gbnf(text, strlen(text), NULL, &e);
    cr_assert_not_null(g, "%s", e.msg);
    free(text);
    cr_assert_eq(ts_match(g, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"), 1);
    cr_assert_eq(ts_match(g, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}"), -1);
    gr_unref(g);
}

/* ---- numeric ranges against arithmetic ------------------------------------------------------ */

Test(oai_schema, integer_and_number_ranges_exact)
{
    static const int bounds[] = {-1000, -101, -100, -99, -10, -9, -1, 0, 1, 7, 9, 10, 42, 99, 100, 101, 999, 1000};
    const int nb = (int)(sizeof bounds / sizeof *bounds);
    char schema[256], err[384], txt[64];
    int checked = 0;
    for (int i = 0; i < nb; i += 2)
        for (int j = i; j < nb; j += 3)
            for (int mode = 0; mode < 6; mode++) {
                int lo = bounds[i], hi = bounds[j], integer = mode < 3;
                int lx = mode % 3 == 1, hx = mode % 3 == 2;
                snprintf(schema, sizeof schema, "{\"type\":\"%s\",\"%s\":%d,\"%s\":%d}", integer ? "integer" : "number",
                         lx ? "exclusiveMinimum" : "minimum", lo, hx ? "exclusiveMaximum" : "maximum", hi);
                gr_grammar *g = ts_compile(schema, err, sizeof err);
                if (!g) { /* only an empty range may be refused */
                    cr_assert(lo == hi && (lx || hx), "%s refused: %s", schema, err);
                    continue;
                }
                for (int v = -1100; v <= 1100; v += (v > -120 && v < 120) ? 1 : 37) {
                    snprintf(txt, sizeof txt, "%d", v);
                    int want = (lx ? v > lo : v >= lo) && (hx ? v < hi : v <= hi);
                    cr_assert_eq(ts_match(g, txt) == 1, want, "%s on %s", schema, txt);
                    checked++;
                    if (integer) continue;
                    static const char *const fr[] = {".5", ".05", ".0", ".999"};
                    for (int f = 0; f < 4; f++) {
                        snprintf(txt, sizeof txt, "%s%d%s", v < 0 ? "-" : "", abs(v), fr[f]);
                        double x = strtod(txt, NULL);
                        int w = (lx ? x > lo : x >= lo) && (hx ? x < hi : x <= hi);
                        /* the grammar may write fewer numbers than the range holds, never more */
                        if (ts_match(g, txt) == 1) cr_assert(w, "%s accepts %s", schema, txt);
                        else cr_assert(!w || x == floor(x) || f == 2, "%s refuses %s", schema, txt);
                        checked++;
                    }
                }
                cr_assert_neq(ts_match(g, "-0"), 1, "never -0");
                gr_unref(g);
            }
    cr_assert_gt(checked, 10000);
}

/* ---- random schemas against Python's jsonschema -------------------------------------------- */

static const char *const TS_NAMES[] = {"id", "name", "tags", "kind", "n", "x", "ok", "when", "v\xc3\xa9", "a b"};

static cJSON *ts_schema(uint64_t *r, int depth, int *n_defs, cJSON *defs);

static cJSON *ts_string_schema(uint64_t *r)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "string");
    static const char *const pats[] = {"^[a-z]{2,4}$", "^\\d{3}-\\d{2}$", "ab", "^(yes|no)$", "^[A-Z][a-z]*\\.?$", "x\\d"};
    static const char *const fmts[] = {"date", "time", "date-time", "uuid", "email", "ipv4"};
    switch (tu_xorshift(r) % 4) {
    case 0: cJSON_AddStringToObject(s, "pattern", pats[tu_xorshift(r) % 6]); break;
    case 1: cJSON_AddStringToObject(s, "format", fmts[tu_xorshift(r) % 6]); break;
    default: {
        int mn = (int)(tu_xorshift(r) % 3);
        if (tu_xorshift(r) % 2) cJSON_AddNumberToObject(s, "minLength", mn);
        cJSON_AddNumberToObject(s, "maxLength", mn + (int)(tu_xorshift(r) % 6));
    }
    }
    return s;
}

static cJSON *ts_number_schema(uint64_t *r)
{
    cJSON *s = cJSON_CreateObject();
    int integer = (int)(tu_xorshift(r) % 2);
    cJSON_AddStringToObject(s, "type", integer ? "integer" : "number");
    int lo = (int)(tu_xorshift(r) % 2001) - 1000, span = (int)(tu_xorshift(r) % 500) + 2;
    if (tu_xorshift(r) % 4) cJSON_AddNumberToObject(s, tu_xorshift(r) % 3 ? "minimum" : "exclusiveMinimum", lo);
    if (tu_xorshift(r) % 4) cJSON_AddNumberToObject(s, tu_xorshift(r) % 3 ? "maximum" : "exclusiveMaximum", lo + span);
    if (!integer && tu_xorshift(r) % 4 == 0) { /* a fractional bound */
        cJSON_DeleteItemFromObject(s, "minimum");
        cJSON_DeleteItemFromObject(s, "exclusiveMinimum");
        cJSON_AddNumberToObject(s, "minimum", lo + 0.25);
    }
    return s;
}

static cJSON *ts_object_schema(uint64_t *r, int depth, int *n_defs, cJSON *defs)
{
    cJSON *s = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    cJSON_AddStringToObject(s, "type", "object");
    int k = 1 + (int)(tu_xorshift(r) % 4);
    int used = 0;
    for (int i = 0; i < k; i++) {
        int ni = (int)(tu_xorshift(r) % 10);
        if (used & (1 << ni)) continue;
        used |= 1 << ni;
        cJSON_AddItemToObject(props, TS_NAMES[ni], ts_schema(r, depth + 1, n_defs, defs));
        if (tu_xorshift(r) % 2) cJSON_AddItemToArray(req, cJSON_CreateString(TS_NAMES[ni]));
    }
    cJSON_AddItemToObject(s, "properties", props);
    cJSON_AddItemToObject(s, "required", req);
    switch (tu_xorshift(r) % 4) {
    case 0: cJSON_AddFalseToObject(s, "additionalProperties"); break;
    case 1: {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "type", "integer");
        cJSON_AddNumberToObject(a, "minimum", 0);
        cJSON_AddNumberToObject(a, "maximum", 9);
        cJSON_AddItemToObject(s, "additionalProperties", a);
        break;
    }
    default: break;
    }
    return s;
}

static cJSON *ts_array_schema(uint64_t *r, int depth, int *n_defs, cJSON *defs)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "array");
    int mn = (int)(tu_xorshift(r) % 3);
    if (tu_xorshift(r) % 3 == 0) {
        cJSON *p = cJSON_CreateArray();
        int m = 1 + (int)(tu_xorshift(r) % 2);
        for (int i = 0; i < m; i++) cJSON_AddItemToArray(p, ts_schema(r, depth + 1, n_defs, defs));
        cJSON_AddItemToObject(s, "prefixItems", p);
        if (tu_xorshift(r) % 2) cJSON_AddFalseToObject(s, "items"), mn = mn > m ? m : mn;
        else cJSON_AddItemToObject(s, "items", ts_schema(r, depth + 1, n_defs, defs));
    } else {
        cJSON_AddItemToObject(s, "items", ts_schema(r, depth + 1, n_defs, defs));
    }
    cJSON_AddNumberToObject(s, "minItems", mn);
    cJSON_AddNumberToObject(s, "maxItems", mn + (int)(tu_xorshift(r) % 3));
    return s;
}

static cJSON *ts_schema(uint64_t *r, int depth, int *n_defs, cJSON *defs)
{
    int pick = (int)(tu_xorshift(r) % (depth >= 3 ? 6 : 11));
    cJSON *s;
    switch (pick) {
    case 0: return ts_string_schema(r);
    case 1: return ts_number_schema(r);
    case 2: s = cJSON_CreateObject(); cJSON_AddStringToObject(s, "type", tu_xorshift(r) % 2 ? "boolean" : "null"); return s;
    case 3: {
        s = cJSON_CreateObject();
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateString("red"));
        cJSON_AddItemToArray(e, cJSON_CreateString("gr\"een"));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(3));
        cJSON_AddItemToArray(e, cJSON_CreateNull());
        cJSON_AddItemToObject(s, "enum", e);
        return s;
    }
    case 4: s = cJSON_CreateObject(); cJSON_AddStringToObject(s, "const", "fixed \xe2\x82\xac"); return s;
    case 5: return ts_string_schema(r);
    case 6: case 7: return ts_object_schema(r, depth, n_defs, defs);
    case 8: return ts_array_schema(r, depth, n_defs, defs);
    case 9: { /* anyOf / oneOf with branches of different types */
        s = cJSON_CreateObject();
        cJSON *l = cJSON_CreateArray();
        cJSON_AddItemToArray(l, ts_string_schema(r));
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "null");
        cJSON_AddItemToArray(l, b);
        cJSON_AddItemToObject(s, tu_xorshift(r) % 2 ? "anyOf" : "oneOf", l);
        return s;
    }
    default: { /* a definition used through $ref */
        char name[16], ref[32];
        snprintf(name, sizeof name, "d%d", (*n_defs)++);
        cJSON_AddItemToObject(defs, name, ts_schema(r, depth + 1, n_defs, defs));
        snprintf(ref, sizeof ref, "#/$defs/%s", name);
        s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "$ref", ref);
        return s;
    }
    }
}

static const char *const TS_EXTRA[] = {"{\"", "\":", "\": ", "\", \"", "},", "\"}", "true", "false", "null", "12", "-3", ".5",
                                       "e+", " \"", "\n  \"", ", ", "\\n", "\\u00", "\\\"", "20", "-0", "T1", ":00", "@a.", NULL};

Test(oai_schema, random_schemas_validate_in_python)
{
    uint64_t seed = tu_seed(0x5c4e3a), r = seed;
    fprintf(stderr, "oai_schema/random: seed %llu (replay with KVSERVE_TEST_SEED)\n", (unsigned long long)seed);
    gh_voc tv;
    gh_voc_make(&tv, "{}[],:\" \n\t0123456789-.+eEabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_%\\/T", TS_EXTRA, &r, 200);
    buf q = {0};
    int n_schemas = 50, n_docs = 0, unfinished = 0;
    char *doc = malloc(65536);
    for (int i = 0; i < n_schemas; i++) {
        int n_defs = 0;
        cJSON *defs = cJSON_CreateObject();
        cJSON *s = ts_schema(&r, 0, &n_defs, defs);
        if (n_defs) cJSON_AddItemToObject(s, "$defs", defs);
        else cJSON_Delete(defs);
        char *st = cJSON_PrintUnformatted(s);
        char err[384];
        gr_grammar *g = ts_compile(st, err, sizeof err);
        cr_assert_not_null(g, "schema %d refused: %s\n%s", i, err, st);
        buf_printf(&q, "{\"schema\": %s, \"docs\": [", st);
        int k = 0;
        for (int d = 0; d < 8; d++) {
            if (!gh_generate(g, &tv, &r, 40, 600, "\"}]0123456789", doc, 65536)) {
                unfinished++;
                continue;
            }
            cJSON *js = cJSON_CreateString(doc);
            char *jt = cJSON_PrintUnformatted(js);
            buf_printf(&q, "%s%s", k++ ? ", " : "", jt);
            free(jt);
            cJSON_Delete(js);
        }
        n_docs += k;
        buf_puts(&q, "]}\n");
        free(st);
        cJSON_Delete(s);
        gr_unref(g);
    }
    cr_assert_gt(n_docs, 300, "hundreds of documents (%d generated, %d unfinished)", n_docs, unfinished);
    char *input = buf_take(&q);
    char *reply = gh_python(input);
    /* every verdict must be true */
    char *bad = strstr(reply, "false");
    if (bad) {
        char *ls = bad;
        while (ls > reply && ls[-1] != '\n') ls--;
        int line = 0;
        for (char *p = reply; p < ls; p++) line += *p == '\n';
        char *in = input;
        for (int k = 0; k < line; k++) in = strchr(in, '\n') + 1;
        char *ie = strchr(in, '\n'), *le = strchr(ls, '\n');
        cr_assert_fail("a generated document does not validate (schema %d):\n%.*s\n%.*s", line, (int)(ie - in), in, (int)(le - ls), ls);
    }
    free(reply);
    free(input);
    free(doc);
    gh_voc_free(&tv);
}

/* ---- completeness on enumerated documents ------------------------------------------------- */

/* Every document of the set that Python calls valid is accepted (each byte allowed by the
 * mask on the way, as a one-byte token), and every accepted one is valid. */
static void ts_enumerate(const char *schema, const char *const *values_a, const char *const *values_b, const char *const *seps)
{
    char err[384];
    gr_grammar *g = ts_compile(schema, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    /* one-byte tokens for the mask check */
    char *tok[257];
    int len[257];
    for (int b = 0; b < 256; b++) {
        tok[b] = malloc(1);
        tok[b][0] = (char)b;
        len[b] = 1;
    }
    tok[256] = NULL;
    len[256] = 0;
    int32_t eog = 256;
    gr_vocab *v = gr_vocab_create_raw(257, (const char *const *)tok, len, &eog, 1);
    buf q = {0};
    char docs[4096][96];
    int nd = 0;
    buf_printf(&q, "{\"schema\": %s, \"docs\": [", schema);
    for (int s = 0; seps[s]; s++)
        for (int a = 0; values_a[a]; a++)
            for (int b = 0; values_b[b]; b++) {
                const char *sep = seps[s];
                if (!*values_a[a] && !*values_b[b]) snprintf(docs[nd], sizeof docs[0], "{%s}", sep);
                else if (!*values_a[a]) snprintf(docs[nd], sizeof docs[0], "{%s\"b\":%s%s%s}", sep, sep, values_b[b], sep);
                else if (!*values_b[b]) snprintf(docs[nd], sizeof docs[0], "{%s\"a\":%s%s%s}", sep, sep, values_a[a], sep);
                else snprintf(docs[nd], sizeof docs[0], "{%s\"a\":%s%s,%s\"b\":%s%s%s}", sep, sep, values_a[a], sep, sep, values_b[b], sep);
                cJSON *js = cJSON_CreateString(docs[nd]);
                char *jt = cJSON_PrintUnformatted(js);
                buf_printf(&q, "%s%s", nd ? ", " : "", jt);
                free(jt);
                cJSON_Delete(js);
                nd++;
            }
    buf_puts(&q, "]}\n");
    char *input = buf_take(&q);
    char *reply = gh_python(input);
    const char *p = strstr(reply, "\"ok\": [") + 7;
    uint32_t mask[GR_MASK_WORDS(257)];
    int n_valid = 0;
    for (int d = 0; d < nd; d++) {
        while (*p == ' ' || *p == ',') p++;
        int valid = *p == 't';
        p += valid ? 4 : 5; /* past true / false */
        n_valid += valid;
        int ours = ts_match(g, docs[d]) == 1;
        cr_assert_eq(ours, valid, "%s on %s: grammar %d, Python %d", schema, docs[d], ours, valid);
        if (!valid) continue;
        gr_matcher *m = gr_matcher_create(g, v);
        for (const char *c = docs[d]; *c; c++) {
            gr_matcher_fill_mask(m, mask);
            cr_assert(gh_allowed(mask, (unsigned char)*c), "%s: the mask forbids byte %d of %s", schema, (int)(c - docs[d]), docs[d]);
            cr_assert_eq(gr_matcher_accept(m, (unsigned char)*c), 0);
        }
        gr_matcher_fill_mask(m, mask);
        cr_assert(gh_allowed(mask, 256), "end of generation after the valid %s", docs[d]);
        gr_matcher_destroy(m);
    }
    cr_assert_gt(n_valid, 3);
    free(reply);
    free(input);
    for (int b = 0; b < 256; b++) free(tok[b]);
    gr_vocab_destroy(v);
    gr_unref(g);
}

Test(oai_schema, enumerated_documents_reachable_exactly)
{
    static const char *const seps[] = {"", " ", "\n  ", NULL};
    static const char *const va[] = {"", "1", "-2", "7", "12", "\"x\"", "1.5", "true", NULL};
    static const char *const vb[] = {"", "\"\"", "\"ab\"", "\"abcd\"", "null", "[]", "[1]", "[1,2]", "[1,2,3]", "\"\\u00e9\"", NULL};
    ts_enumerate("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-2,\"maximum\":9},"
                 "\"b\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"a\"]}",
                 va, vb, seps);
    ts_enumerate("{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"boolean\"},{\"enum\":[7,\"x\"]}]},"
                 "\"b\":{\"type\":[\"array\",\"null\"],\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}},"
                 "\"additionalProperties\":false}",
                 va, vb, seps);
}
