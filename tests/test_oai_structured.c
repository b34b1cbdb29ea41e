/*
 * test_oai_structured.c — the structured-output request fields (server/openai/oai_structured.c) and
 * constrained generation through the engine on stories260K:
 *
 *   - every spelling (response_format, guided_*, structured_outputs, grammar, json_schema)
 *     yields a grammar; conflicts and compile errors are 400s naming the field and the place;
 *   - the grammar cache returns the same compiled grammar for a repeated source;
 *   - completion rate: chat completions at temperature 1 under bounded schemas, max_tokens 400:
 *     at least 90 % finish with "stop", and every one of those parses and validates with
 *     Python's jsonschema; a max_tokens cut mid-structure ends with "length".
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "model/chat.h"
#include "server/openai/internal.h"
#include "server/openai/openai.h"
#include "tests/engine_harness.h"
#include "tests/grammar_harness.h"

static int tst_parse(int kind, const char *body, gr_cache *cache, oai_request *r, oai_error *e)
{
    oai_limits lim = {"stories260K", 512, cache};
    return oai_parse(kind, body, strlen(body), &lim, r, e);
}

static void tst_ok(int kind, const char *body, const char *accepted)
{
    oai_request r;
    oai_error e;
    cr_assert_eq(tst_parse(kind, body, NULL, &r, &e), 0, "%s: %s", body, e.message);
    cr_assert_not_null(r.grammar, "%s: no grammar", body);
    gr_vocab *v = gr_vocab_create_raw(0, NULL, NULL, NULL, 0);
    gr_matcher *m = gr_matcher_create(r.grammar, v);
    cr_assert_eq(gr_matcher_accept_bytes(m, accepted, strlen(accepted)), 0, "%s: '%s' refused", body, accepted);
    cr_assert(gr_matcher_is_accepting(m), "%s: '%s' incomplete", body, accepted);
    gr_matcher_destroy(m);
    gr_vocab_destroy(v);
    oai_request_free(&r);
}

static void tst_bad(int kind, const char *body, const char *param, const char *needle)
{
    oai_request r;
    oai_error e;
    cr_assert_neq(tst_parse(kind, body, NULL, &r, &e), 0, "%s should fail", body);
    cr_assert_eq(e.status, 400);
    cr_expect_str_eq(e.param, param, "%s: param '%s'", body, e.param);
    cr_expect(strstr(e.message, needle) != NULL, "%s: '%s' lacks '%s'", body, e.message, needle);
}

#define CHAT "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

Test(oai_structured, every_spelling)
{
    tst_ok(OAI_CHAT, "{" CHAT ",\"response_format\":{\"type\":\"json_object\"}}", "{\"a\": [1, {}]}");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"strict\":true,"
                           "\"schema\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\"}},\"required\":[\"k\"]}}}}",
           "{\"k\": 5}");
    tst_ok(OAI_CHAT, "{" CHAT ",\"response_format\":{\"type\":\"json_object\",\"schema\":{\"type\":\"boolean\"}}}", "true");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_json\":{\"type\":\"array\",\"maxItems\":1}}", "[null]");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_json\":\"{\\\"enum\\\":[\\\"a\\\"]}\"}", "\"a\"");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_regex\":\"[0-9]{2}-x\"}", "42-x");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_choice\":[\"yes\",\"no\"]}", "no");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_grammar\":\"root ::= \\\"a\\\"+\"}", "aaa");
    tst_ok(OAI_CHAT, "{" CHAT ",\"structured_outputs\":{\"json\":{\"type\":\"null\"}}}", "null");
    tst_ok(OAI_CHAT, "{" CHAT ",\"structured_outputs\":{\"regex\":\"a|b\"}}", "b");
    tst_ok(OAI_CHAT, "{" CHAT ",\"structured_outputs\":{\"choice\":[\"x\"]}}", "x");
    tst_ok(OAI_CHAT, "{" CHAT ",\"structured_outputs\":{\"grammar\":\"root ::= [a-c]\"}}", "c");
    tst_ok(OAI_CHAT, "{" CHAT ",\"structured_outputs\":{\"json_object\":true}}", "{}");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"ok\\\"\"}", "ok");
    tst_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"json_schema\":{\"const\":1}}", "1");
    /* text, null and absent fields constrain nothing */
    oai_request r;
    oai_error e;
    cr_assert_eq(tst_parse(OAI_CHAT, "{" CHAT ",\"response_format\":{\"type\":\"text\"},\"guided_json\":null}", NULL, &r, &e), 0);
    cr_assert_null(r.grammar);
    oai_request_free(&r);
}

Test(oai_structured, errors_name_field_and_place)
{
    tst_bad(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_regex\":\"a\",\"guided_choice\":[\"b\"]}", "guided_choice", "Only one structured output");
    tst_bad(OAI_CHAT, "{" CHAT ",\"response_format\":{\"type\":\"json_object\"},\"grammar\":\"root ::= \\\"a\\\"\"}", "grammar", "got 'response_format' and 'grammar'");
    tst_bad(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_regex\":\"ab(c\"}", "guided_regex", "at position 2: unclosed '('");
    tst_bad(OAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= a\\n  a ::= \\\"x\\\" b\"}", "grammar", "at line 2, column 13: undefined rule 'b'");
    tst_bad(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_json\":{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}}", "guided_json",
            "at properties.a: unsupported JSON Schema keyword 'not'");
    tst_bad(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_json\":\"{not json\"}", "guided_json", "not valid JSON");
    tst_bad(OAI_CHAT, "{" CHAT ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}",
            "response_format.json_schema.schema", "is required");
    tst_bad(OAI_CHAT, "{" CHAT ",\"response_format\":{\"type\":\"yaml\"}}", "response_format", "'yaml' is not supported");
    tst_bad(OAI_CHAT, "{" CHAT ",\"structured_outputs\":{\"structural_tag\":\"x\"}}", "structured_outputs.structural_tag", "not supported");
    tst_bad(OAI_CHAT, "{" CHAT ",\"guided_choice\":[1]}", "guided_choice", "array of strings");
    tst_bad(OAI_CHAT, "{" CHAT ",\"guided_regex\":\"\"}", "guided_regex", "non-empty string");
}

Test(oai_structured, cache_returns_the_compiled_grammar)
{
    gr_cache *c = gr_cache_create(8, 0);
    oai_request a, b;
    oai_error e;
    const char *body = "{\"prompt\":\"x\",\"guided_json\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}}}}";
    cr_assert_eq(tst_parse(OAI_COMPLETION, body, c, &a, &e), 0);
    /* the same schema written differently is the same canonical text */
    cr_assert_eq(tst_parse(OAI_COMPLETION, "{\"prompt\":\"y\",\"guided_json\":{ \"type\" : \"object\", \"properties\":{\"k\":{\"type\":\"string\"}}}}", c, &b, &e), 0);
    cr_assert_eq(a.grammar, b.grammar);
    oai_request_free(&b);
    /* the same text under another kind is another grammar */
    cr_assert_eq(tst_parse(OAI_COMPLETION, "{\"prompt\":\"y\",\"guided_regex\":\"{\\\"type\\\":\\\"object\\\",\\\"properties\\\":{\\\"k\\\":{\\\"type\\\":\\\"string\\\"}}}\"}", c, &b, &e), 0);
    cr_assert_neq(a.grammar, b.grammar);
    oai_request_free(&a);
    oai_request_free(&b);
    int n;
    int64_t lookups, hits;
    gr_cache_stats(c, &n, &lookups, &hits);
    cr_assert_eq(lookups, 3);
    cr_assert_eq(hits, 1);
    gr_cache_destroy(c);
}

/* The hook for grammars the server builds itself: cached by text, errors as 400s. */
Test(oai_structured, server_built_grammar_through_the_cache)
{
    gr_cache *c = gr_cache_create(4, 0);
    oai_limits lim = {"m", 512, c};
    oai_error e;
    const char *text = "root ::= \"<tool_call>\" [a-z]+ \"</tool_call>\"";
    gr_grammar *a = oai__grammar_gbnf(&lim, text, "tool_choice", &e), *b = oai__grammar_gbnf(&lim, text, "tool_choice", &e);
    cr_assert_not_null(a);
    cr_assert_eq(a, b, "the second compile is a cache hit");
    gr_unref(a);
    gr_unref(b);
    cr_assert_null(oai__grammar_gbnf(&lim, "root ::= x", "tool_choice", &e));
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.param, "tool_choice");
    cr_assert(strstr(e.message, "line 1, column 10: undefined rule 'x'") != NULL, "%s", e.message);
    gr_cache_destroy(c);
}

/* ---- completion rate on stories260K ---------------------------------------------------------- */

TestSuite(oai_structured_model, .init = te_setup, .fini = te_teardown, .timeout = 120);

static const char *const TST_SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},"
    "\"required\":[\"name\",\"age\"]}",
    "{\"type\":\"object\",\"properties\":{\"hero\":{\"type\":\"string\",\"maxLength\":16},\"mood\":{\"enum\":[\"happy\",\"sad\",\"angry\"]},"
    "\"friends\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":8},\"maxItems\":3}},\"required\":[\"hero\",\"mood\",\"friends\"]}",
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":50},\"minItems\":1,\"maxItems\":5}",
    "{\"type\":\"object\",\"properties\":{\"place\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":10},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\",\"zip\"]},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"place\",\"ok\"]}",
    "{\"type\":\"object\",\"properties\":{\"day\":{\"type\":\"string\",\"format\":\"date\"},\"count\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10},"
    "\"note\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":10},{\"type\":\"null\"}]}},\"required\":[\"day\",\"count\"]}",
    NULL};

/* Parses a chat request with schema as response_format and submits it with n choices. */
static uint64_t tst_submit(engine *e, const char *schema, int n, int max_tokens, uint64_t seed, gr_grammar **g_out)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about a character, as JSON.\"}],\"temperature\":1,"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"c\",\"schema\":%s}}}", schema);
    oai_request q;
    oai_error err;
    cr_assert_eq(tst_parse(OAI_CHAT, body, NULL, &q, &err), 0, "%s", err.message);
    chat_msg cm = {q.msgs[0].role, q.msgs[0].content};
    char e2[256];
    char *text = chat_render(chat_template_detect(NULL, te_tok), &cm, 1, 1, te_tok, 0, e2, sizeof e2);
    cr_assert_not_null(text, "%s", e2);
    int32_t ids[256];
    int n_ids = tok_encode(te_tok, text, strlen(text), 1, 1, ids, 256);
    cr_assert(n_ids > 0 && n_ids <= 256);
    free(text);
    engine_request r;
    memset(&r, 0, sizeof r);
    r.prompt = malloc(sizeof *r.prompt * (size_t)n_ids);
    memcpy(r.prompt, ids, sizeof *ids * (size_t)n_ids);
    r.n_prompt = n_ids;
    r.n = n;
    r.max_tokens = max_tokens;
    smp_params_default(&r.sampling);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.sampling.has_seed = 1;
    r.grammar = gr_ref(q.grammar);
    *g_out = gr_ref(q.grammar);
    oai_request_free(&q);
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    return id;
}

Test(oai_structured_model, completion_rate_on_stories260k)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)64 << 20, 1, 16, 512);
    static te_out outs[5];
    gr_grammar *g[5];
    int n_schemas = 0;
    for (; TST_SCHEMAS[n_schemas]; n_schemas++) {
        memset(&outs[n_schemas], 0, sizeof outs[0]);
        outs[n_schemas].id = tst_submit(e, TST_SCHEMAS[n_schemas], 12, 400, 1000 + (uint64_t)n_schemas, &g[n_schemas]);
    }
    te_collect(e, outs, n_schemas, n_schemas * 12);
    int stopped = 0, total = 0;
    buf q = {0};
    for (int s = 0; s < n_schemas; s++) {
        buf_printf(&q, "{\"schema\": %s, \"docs\": [", TST_SCHEMAS[s]);
        int k = 0;
        for (int c = 0; c < 12; c++) {
            total++;
            if (outs[s].finish[c] != ENGINE_FINISH_STOP) {
                cr_assert_eq(outs[s].finish[c], ENGINE_FINISH_LENGTH);
                continue;
            }
            stopped++;
            cJSON *js = cJSON_CreateString(outs[s].text[c]);
            char *jt = cJSON_PrintUnformatted(js);
            buf_printf(&q, "%s%s", k++ ? ", " : "", jt);
            free(jt);
            cJSON_Delete(js);
        }
        buf_puts(&q, "]}\n");
        gr_unref(g[s]);
    }
    fprintf(stderr, "oai_structured/completion_rate: %d of %d finished with stop\n", stopped, total);
    cr_assert_geq(stopped * 10, total * 9, "only %d of %d completions finished with stop", stopped, total);
    char *input = buf_take(&q);
    char *reply = gh_python(input);
    cr_assert_null(strstr(reply, "false"), "a completion does not validate:\n%s\n%s", input, reply);
    free(reply);
    free(input);
    /* a max_tokens cut inside the structure is 'length' */
    memset(&outs[0], 0, sizeof outs[0]);
    outs[0].id = tst_submit(e, TST_SCHEMAS[1], 2, 4, 7, &g[0]);
    te_collect(e, outs, 1, 2);
    for (int c = 0; c < 2; c++) cr_assert_eq(outs[0].finish[c], ENGINE_FINISH_LENGTH);
    gr_unref(g[0]);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_gt(st.grammar_masks, 0);
    engine_destroy(e, 0);
}

/* `kvserve generate --json-schema FILE` prints a document that validates; a bad grammar file is
 * a one-line error naming the place, exit status 1. */
Test(oai_structured_model, generate_cli_flags)
{
    TE_NEED_MODEL();
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || !*bin) bin = "build/kvserve";
    const char *dir = getenv("TMPDIR");
    char schema[512], gram[512], cmd[2048], out[4096] = "";
    snprintf(schema, sizeof schema, "%s/kvserve-gen-schema-%d.json", dir && *dir ? dir : "/tmp", (int)getpid());
    snprintf(gram, sizeof gram, "%s/kvserve-gen-grammar-%d.gbnf", dir && *dir ? dir : "/tmp", (int)getpid());
    FILE *f = fopen(schema, "w");
    fputs(TST_SCHEMAS[0], f);
    fclose(f);
    f = fopen(gram, "w");
    fputs("root ::= \"a\"\n  | b\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s/stories260K.gguf' -p 'Once upon a time' -n 300 --seed 5 --json-schema '%s' 2>/dev/null",
             bin, tu_data_dir(), schema);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    cr_assert_eq(pclose(p), 0);
    buf q = {0};
    cJSON *js = cJSON_CreateString(out);
    char *jt = cJSON_PrintUnformatted(js);
    buf_printf(&q, "{\"schema\": %s, \"docs\": [%s]}\n", TST_SCHEMAS[0], jt);
    free(jt);
    cJSON_Delete(js);
    char *input = buf_take(&q);
    char *reply = gh_python(input);
    cr_assert_null(strstr(reply, "false"), "generate printed '%s': %s", out, reply);
    free(reply);
    free(input);
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s/stories260K.gguf' --grammar '%s' 2>&1 >/dev/null", bin, tu_data_dir(), gram);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    cr_assert(strstr(out, ":2:5: undefined rule 'b'") != NULL, "%s", out);
    unlink(schema);
    unlink(gram);
}
