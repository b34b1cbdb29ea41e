/*
 * test_oai_fields.c — vLLM's request extensions (server/openai/oai_fields.c) as vLLM handles them.
 *
 * Suite oai_fields: the parser (types, ranges, the names of ignored fields), no model. Suite
 * oai_fields_e2e: each field against the real server on the in-repo stories260K, checked
 * against greedy runs without the field: stop_token_ids (stop_reason = the id, the token's
 * text cut unless include_stop_str_in_output), any number of stop strings (stop_reason = the
 * string), allowed_token_ids, bad_words, prompt_logprobs (completions per choice, chat at the
 * top), truncate_prompt_tokens, skip_special_tokens, request_id, suffix and use_beam_search (400), and a
 * prompt longer than --max-queued-tokens (400, not 503, on an idle server).
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/openai/openai.h"
#include "tests/server_harness.h"
#include "tests/test_util.h"

static const oai_limits tf_lim = {"m", 512, NULL};

static int tf_parse(int kind, const char *body, oai_request *r, oai_error *e)
{
    return oai_parse(kind, body, strlen(body), &tf_lim, r, e);
}

static void tf_bad(int kind, const char *body, const char *param)
{
    oai_request r;
    oai_error e;
    cr_assert_neq(tf_parse(kind, body, &r, &e), 0, "accepted: %s", body);
    cr_assert_eq(e.status, 400, "%s: %d %s", body, e.status, e.message);
    if (param) cr_assert_str_eq(e.param, param, "%s: %s", body, e.message);
}

Test(oai_fields, parse)
{
    oai_request r;
    oai_error e;
    const char *b = "{\"prompt\":\"a\",\"stop_token_ids\":[3,7],\"allowed_token_ids\":[1,2,9],"
                    "\"include_stop_str_in_output\":true,\"bad_words\":[\"x y\",\"z\"],\"prompt_logprobs\":4,"
                    "\"truncate_prompt_tokens\":9,\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\"],"
                    "\"user\":\"u\",\"zz_unknown\":{\"a\":1}}";
    cr_assert_eq(tf_parse(OAI_COMPLETION, b, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.sampling.n_stop_ids, 2);
    cr_assert_eq(r.sampling.stop_ids[1], 7);
    cr_assert_eq(r.sampling.n_allowed, 3);
    cr_assert_eq(r.sampling.allowed_ids[2], 9);
    cr_assert_eq(r.include_stop_str, 1);
    cr_assert_eq(r.n_bad_words, 2);
    cr_assert_str_eq(r.bad_words[0], "x y");
    cr_assert_eq(r.prompt_logprobs, 4);
    cr_assert_eq(r.truncate_prompt_tokens, 9);
    cr_assert_eq(r.n_stop, 6, "more than four stop strings, as vLLM takes");
    cr_assert_str_eq(r.ignored, "user,zz_unknown");
    oai_request_free(&r);
    cr_assert_eq(tf_parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", &r, &e), 0);
    cr_assert_eq(r.prompt_logprobs, -1, "absent: no prompt_logprobs");
    cr_assert_null(r.ignored);
    oai_request_free(&r);
    cr_assert_eq(tf_parse(OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":true,\"prompt_logprobs\":0}", &r, &e), 0,
                 "0 is allowed with stream: %s", e.message);
    oai_request_free(&r);
}

Test(oai_fields, errors)
{
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stop_token_ids\":[512]}", "stop_token_ids");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stop_token_ids\":[-1]}", "stop_token_ids");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stop_token_ids\":3}", "stop_token_ids");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stop_token_ids\":[1.5]}", "stop_token_ids");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"allowed_token_ids\":[]}", "allowed_token_ids");
    tf_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"allowed_token_ids\":[600]}", "allowed_token_ids");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"include_stop_str_in_output\":1}", "include_stop_str_in_output");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"bad_words\":[\"a\",3]}", "bad_words");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"bad_words\":\"a\"}", "bad_words");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"prompt_logprobs\":21}", "prompt_logprobs");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"prompt_logprobs\":-1}", "prompt_logprobs");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":true,\"prompt_logprobs\":2}", "prompt_logprobs");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"truncate_prompt_tokens\":0}", "truncate_prompt_tokens");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"b\"}", "suffix");
    oai_request r;
    oai_error e;
    cr_assert_eq(tf_parse(OAI_COMPLETION, "{\"prompt\":\"a\",\"suffix\":null}", &r, &e), 0, "null suffix is absent");
    oai_request_free(&r);
    /* what kvserve lacks is refused by name; the values that ask for nothing are accepted */
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"use_beam_search\":true}", "use_beam_search");
    tf_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"priority\":-2}", "priority");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"priority\":1.5}", "priority");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"logits_processors\":[\"m.f\"]}", "logits_processors");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"skip_special_tokens\":0}", "skip_special_tokens");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"spaces_between_special_tokens\":\"no\"}", "spaces_between_special_tokens");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"length_penalty\":\"1\"}", "length_penalty");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"request_id\":5}", "request_id");
    tf_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"request_id\":\"\"}", "request_id");
    cr_assert_eq(tf_parse(OAI_COMPLETION, "{\"prompt\":\"a\",\"use_beam_search\":false,\"priority\":0,\"logits_processors\":[],"
                                          "\"length_penalty\":1.0,\"spaces_between_special_tokens\":false}", &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.skip_special, 1, "skip_special_tokens defaults to true");
    cr_assert_null(r.ignored, "%s", r.ignored);
    oai_request_free(&r);
    cr_assert_eq(tf_parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"skip_special_tokens\":false}", &r, &e), 0);
    cr_assert_eq(r.skip_special, 0);
    oai_request_free(&r);
}

/* ---- against the server ---------------------------------------------------------------------- */

static th_server tf_srv;
static cJSON *tf_gold;

static void tf_start(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/stories260K.golden.json", tu_data_dir());
    char *g = tu_read_file(p, NULL);
    cr_assert_not_null(g, "%s is missing", p);
    tf_gold = cJSON_Parse(g);
    free(g);
    static const char *const args[] = {"--kv-memory", "16MiB", "-v", NULL};
    th_start(&tf_srv, NULL, args, NULL, TH_WAIT_HEALTHY);
}

static void tf_stop(void)
{
    th_stop(&tf_srv);
    cJSON_Delete(tf_gold);
    tf_gold = NULL;
}

TestSuite(oai_fields_e2e, .init = tf_start, .fini = tf_stop, .timeout = 90);

/* POSTs body to path; the response must be 200 JSON. Returns it parsed (caller deletes). */
static cJSON *tf_ok(const char *path, const char *body)
{
    th_resp r = th_http(tf_srv.port, NULL, path, body, NULL);
    cr_assert_eq(r.status, 200, "%s → %ld %s", body, r.status, r.body);
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_not_null(j, "%s", r.body);
    th_resp_free(&r);
    return j;
}

static const cJSON *tf_choice(const cJSON *j)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
}

static const char *tf_text(const cJSON *j)
{
    return cJSON_GetObjectItem(tf_choice(j), "text")->valuestring;
}

/* The golden greedy ids of "Once upon a time". */
static const cJSON *tf_gen(void)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(tf_gold, "cases"))
    if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring, "once_upon_a_time_n64"))
        return cJSON_GetObjectItem(c, "generated_token_ids");
    cr_assert_fail("golden case missing");
    return NULL;
}

Test(oai_fields_e2e, stop_token_ids_and_include_stop_str)
{
    const cJSON *gen = tf_gen();
    int tok = cJSON_GetArrayItem(gen, 6)->valueint, at = 0;
    while (cJSON_GetArrayItem(gen, at)->valueint != tok) at++;
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":%d,\"temperature\":0}", at + 1);
    cJSON *full = tf_ok("/v1/completions", body);
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,"
                                "\"stop_token_ids\":[%d],\"ignore_eos\":true}", tok);
    cJSON *cut = tf_ok("/v1/completions", body);
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,"
                                "\"stop_token_ids\":[%d],\"include_stop_str_in_output\":true}", tok);
    cJSON *kept = tf_ok("/v1/completions", body);
    for (int k = 0; k < 2; k++) {
        const cJSON *c = tf_choice(k ? kept : cut);
        cr_assert_str_eq(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "stop");
        cr_assert_eq(cJSON_GetObjectItem(c, "stop_reason")->valueint, tok, "stop_reason is the token id");
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(c, "stop_reason")));
    }
    cr_assert_str_eq(tf_text(kept), tf_text(full), "include_stop_str_in_output keeps the token's text");
    const char *f = tf_text(full), *t = tf_text(cut);
    cr_assert(strlen(t) < strlen(f) && !strncmp(f, t, strlen(t)), "the stop token's text is cut: '%s' vs '%s'", t, f);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(tf_choice(full), "stop_reason")), "length: stop_reason null");
    cJSON_Delete(full);
    cJSON_Delete(cut);
    cJSON_Delete(kept);
}

Test(oai_fields_e2e, many_stop_strings_and_stop_reason)
{
    const char *b = "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,"
                    "\"stop\":[\"q1\",\"q2\",\"q3\",\"q4\",\"q5\",\"little\",\"q7\"]}";
    cJSON *j = tf_ok("/v1/completions", b);
    cr_assert_str_eq(tf_text(j), ", there was a ");
    cr_assert_str_eq(cJSON_GetObjectItem(tf_choice(j), "stop_reason")->valuestring, "little");
    cJSON_Delete(j);
    /* streamed: the final chunk carries the stop_reason; the others say null */
    th_resp r = th_http(tf_srv.port, NULL, "/v1/completions",
                        "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,\"stream\":true,"
                        "\"stop\":[\"q1\",\"q2\",\"q3\",\"q4\",\"little\"],\"include_stop_str_in_output\":true}", NULL);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"finish_reason\":\"stop\",\"stop_reason\":\"little\""), "%s", r.body);
    cr_assert(strstr(r.body, "\"finish_reason\":null,\"stop_reason\":null"), "%s", r.body);
    th_resp_free(&r);
}

Test(oai_fields_e2e, allowed_token_ids_and_bad_words)
{
    cJSON *j = tf_ok("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":1,"
                                         "\"seed\":3,\"allowed_token_ids\":[400,401,402],\"logprobs\":0,"
                                         "\"return_tokens_as_token_ids\":true}");
    const cJSON *t, *toks = cJSON_GetObjectItem(cJSON_GetObjectItem(tf_choice(j), "logprobs"), "tokens");
    cr_assert_eq(cJSON_GetArraySize(toks), 8);
    cJSON_ArrayForEach(t, toks)
    {
        int id = atoi(t->valuestring + strlen("token_id:"));
        cr_assert(id >= 400 && id <= 402, "token %s is not allowed", t->valuestring);
    }
    cJSON_Delete(j);
    cJSON *base = tf_ok("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0}");
    cr_assert(strstr(tf_text(base), "there"), "the greedy text has the word: %s", tf_text(base));
    cJSON *bad = tf_ok("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,"
                                           "\"bad_words\":[\"there\", \" \"]}");
    cr_assert_null(strstr(tf_text(bad), "there"), "bad word generated: %s", tf_text(bad));
    cJSON_Delete(base);
    cJSON_Delete(bad);
}

/* One prompt_logprobs list: null first, then one dict per prompt token holding that token (its
 * id as the key) and at most k alternatives, each with logprob, rank and decoded_token. */
static void tf_check_plp(const cJSON *plp, int n_prompt, int k, const int *ids)
{
    cr_assert(cJSON_IsArray(plp));
    cr_assert_eq(cJSON_GetArraySize(plp), n_prompt);
    cr_assert(cJSON_IsNull(cJSON_GetArrayItem(plp, 0)));
    for (int i = 1; i < n_prompt; i++) {
        const cJSON *d = cJSON_GetArrayItem(plp, i), *e;
        cr_assert(cJSON_IsObject(d));
        cr_assert_leq(cJSON_GetArraySize(d), k + 1);
        cr_assert_geq(cJSON_GetArraySize(d), k > 0 ? k : 1);
        if (ids) {
            char key[16];
            snprintf(key, sizeof key, "%d", ids[i]);
            cr_assert_not_null(cJSON_GetObjectItem(d, key), "position %d lacks its token %s", i, key);
        }
        cJSON_ArrayForEach(e, d)
        {
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(e, "logprob")) && cJSON_GetObjectItem(e, "logprob")->valuedouble <= 0);
            cr_assert(cJSON_GetObjectItem(e, "rank")->valueint >= 1);
            cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "decoded_token")));
        }
    }
}

Test(oai_fields_e2e, prompt_logprobs)
{
    static const int ids[] = {1, 403, 407, 261, 378}; /* "Once upon a time" with BOS */
    cJSON *j = tf_ok("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":2,\"temperature\":0,"
                                         "\"prompt_logprobs\":2,\"n\":2}");
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "choices")) tf_check_plp(cJSON_GetObjectItem(c, "prompt_logprobs"), 5, 2, ids);
    cr_assert_str_eq(tf_text(j), ", there", "scoring the prompt changes nothing generated");
    cJSON_Delete(j);
    j = tf_ok("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":1}");
    cr_assert_null(cJSON_GetObjectItem(tf_choice(j), "prompt_logprobs"), "absent unless asked");
    cJSON_Delete(j);
    j = tf_ok("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1,"
                                       "\"prompt_logprobs\":0}");
    const cJSON *plp = cJSON_GetObjectItem(j, "prompt_logprobs");
    cr_assert(cJSON_IsArray(plp), "chat: at the top of the response");
    tf_check_plp(plp, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens")->valueint, 0, NULL);
    cJSON_Delete(j);
    th_resp r = th_http(tf_srv.port, NULL, "/v1/completions",
                        "{\"prompt\":\"a\",\"stream\":true,\"prompt_logprobs\":1}", NULL);
    cr_assert_eq(r.status, 400, "not available when streaming (as vLLM): %s", r.body);
    th_resp_free(&r);
}

Test(oai_fields_e2e, truncate_prompt_tokens_and_suffix)
{
    cJSON *j = tf_ok("/v1/completions", "{\"prompt\":\"Once upon a time, there was\",\"max_tokens\":1,"
                                         "\"truncate_prompt_tokens\":3}");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens")->valueint, 3);
    cJSON_Delete(j);
    th_resp r = th_http(tf_srv.port, NULL, "/v1/completions",
                        "{\"prompt\":\"a\",\"truncate_prompt_tokens\":100000}", NULL);
    cr_assert_eq(r.status, 400, "beyond max_model_len: %s", r.body);
    th_resp_free(&r);
    r = th_http(tf_srv.port, NULL, "/v1/completions", "{\"prompt\":\"a\",\"suffix\":\"z\"}", NULL);
    cr_assert_eq(r.status, 400);
    cr_assert(strstr(r.body, "suffix is not currently supported"), "%s", r.body);
    th_resp_free(&r);
    /* the access log at -v names the fields nobody read */
    r = th_http(tf_srv.port, NULL, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1,\"frobnicate\":1}", NULL);
    cr_assert_eq(r.status, 200);
    th_resp_free(&r);
    int64_t deadline = th_now_ms() + 5000;
    char *log = NULL;
    while (th_now_ms() < deadline) {
        free(log);
        log = th_log(&tf_srv);
        if (log && strstr(log, "ignored=frobnicate")) break;
        usleep(20000);
    }
    cr_assert(log && strstr(log, "ignored=frobnicate"), "%s", log ? log : "");
    free(log);
}

/* skip_special_tokens: false renders control tokens (here the only allowed one, EOS); the EOS
 * that ends a choice is cut like a stop token unless include_stop_str_in_output. */
Test(oai_fields_e2e, skip_special_tokens)
{
    static const char head[] = "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0,\"allowed_token_ids\":[2]";
    char b[512];
    th_resp d = th_http(tf_srv.port, NULL, "/detokenize", "{\"tokens\":[2]}", NULL);
    cr_assert_eq(d.status, 200);
    cr_assert_str_eq(d.body, "{\"prompt\":\"\"}", "EOS is a control token: no text by default");
    th_resp_free(&d);
    snprintf(b, sizeof b, "%s,\"ignore_eos\":true}", head);
    cJSON *dflt = tf_ok("/v1/completions", b);
    cr_assert_str_eq(tf_text(dflt), "");
    snprintf(b, sizeof b, "%s,\"ignore_eos\":true,\"skip_special_tokens\":false}", head);
    cJSON *shown = tf_ok("/v1/completions", b);
    cr_assert_str_eq(tf_text(shown), "</s></s></s>");
    cr_assert_str_eq(cJSON_GetObjectItem(tf_choice(shown), "finish_reason")->valuestring, "length");
    snprintf(b, sizeof b, "%s,\"skip_special_tokens\":false}", head);
    cJSON *eos = tf_ok("/v1/completions", b);
    cr_assert_str_eq(tf_text(eos), "", "the EOS that stops is cut");
    cr_assert_str_eq(cJSON_GetObjectItem(tf_choice(eos), "finish_reason")->valuestring, "stop");
    snprintf(b, sizeof b, "%s,\"skip_special_tokens\":false,\"include_stop_str_in_output\":true}", head);
    cJSON *kept = tf_ok("/v1/completions", b);
    cr_assert_str_eq(tf_text(kept), "</s>");
    cJSON_Delete(dflt);
    cJSON_Delete(shown);
    cJSON_Delete(eos);
    cJSON_Delete(kept);
    th_resp r = th_http(tf_srv.port, NULL, "/v1/completions", "{\"prompt\":\"a\",\"use_beam_search\":true}", NULL);
    cr_assert_eq(r.status, 400, "%s", r.body);
    cr_assert(strstr(r.body, "beam search is not supported"), "%s", r.body);
    th_resp_free(&r);
}

/* The response id is the kind's prefix and the client's id: X-Request-Id, else request_id. */
Test(oai_fields_e2e, request_id)
{
    static const char b[] = "{\"prompt\":\"Once\",\"max_tokens\":1,\"request_id\":\"body-7\"}";
    cJSON *j = tf_ok("/v1/completions", b);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "id")->valuestring, "cmpl-body-7");
    cJSON_Delete(j);
    th_resp r = th_http(tf_srv.port, NULL, "/v1/completions", b, "X-Request-Id: hdr-9");
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"id\":\"cmpl-hdr-9\""), "the header wins: %s", r.body);
    th_resp_free(&r);
    r = th_http(tf_srv.port, NULL, "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"stream\":true,\"request_id\":\"c1\"}", NULL);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"id\":\"chatcmpl-c1\""), "every chunk: %s", r.body);
    th_resp_free(&r);
    /* without either, ids stay distinct */
    cJSON *a = tf_ok("/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":1}");
    cJSON *c = tf_ok("/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":1}");
    const char *ia = cJSON_GetObjectItem(a, "id")->valuestring, *ic = cJSON_GetObjectItem(c, "id")->valuestring;
    cr_assert(!strncmp(ia, "cmpl-", 5) && strcmp(ia, ic), "%s %s", ia, ic);
    cJSON_Delete(a);
    cJSON_Delete(c);
}

/* A prompt that could never fit the queue is a 400, not a 503 to retry forever. */
Test(oai_fields_e2e, prompt_beyond_queue_limit_is_400)
{
    th_server s;
    static const char *const args[] = {"--max-queued-tokens", "4", NULL};
    th_start(&s, NULL, args, NULL, TH_WAIT_HEALTHY);
    th_resp r = th_http(s.port, NULL, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":1}", NULL);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert_null(strstr(r.headers, "Retry-After"), "nothing to retry");
    th_resp_free(&r);
    r = th_http(s.port, NULL, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":1}", NULL);
    cr_assert_eq(r.status, 200, "a prompt within the limit still works: %s", r.body);
    th_resp_free(&r);
    th_stop(&s);
}
