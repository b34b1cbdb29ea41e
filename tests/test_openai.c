/*
 * test_openai.c — request parsing/validation and response builders of server/openai/openai.c, and
 * the Prometheus text of server/metrics.c. No network, no model.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "server/metrics.h"
#include "server/openai/openai.h"

static const oai_limits oa_lim = {"tiny", 512, NULL};

static int oa_parse(int kind, const char *body, oai_request *r, oai_error *e)
{
    return oai_parse(kind, body, strlen(body), &oa_lim, r, e);
}

/* Parses a body that must fail with this status, code and param. */
static void oa_bad(int kind, const char *body, int status, const char *code, const char *param)
{
    oai_request r;
    oai_error e;
    cr_assert_neq(oa_parse(kind, body, &r, &e), 0, "accepted: %s", body);
    cr_assert_eq(e.status, status, "%s → %d %s", body, e.status, e.message);
    if (code) cr_assert_str_eq(e.code, code, "%s: %s", body, e.message);
    if (param) cr_assert_str_eq(e.param, param, "%s", body);
    char *j = oai_error_json(&e);
    cJSON *o = cJSON_Parse(j);
    const cJSON *er = cJSON_GetObjectItem(o, "error");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(er, "message")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(er, "type")));
    cr_assert(cJSON_GetObjectItem(er, "param") && cJSON_GetObjectItem(er, "code"));
    cJSON_Delete(o);
    free(j);
}

Test(openai, completion_defaults_and_fields)
{
    oai_request r;
    oai_error e;
    cr_assert_eq(oa_parse(OAI_COMPLETION, "{\"prompt\":\"hi\"}", &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_str_eq(r.prompts[0].text, "hi");
    cr_assert_eq(r.max_tokens, -1);
    cr_assert_eq(r.n, 1);
    cr_assert_eq(r.best_of, 1);
    cr_assert_eq(r.logprobs, -1);
    cr_assert_eq(r.sampling.n_logprobs, -1);
    cr_assert_float_eq(r.sampling.temperature, 1.0f, 1e-6);
    cr_assert_null(r.model);
    oai_request_free(&r);

    const char *b = "{\"model\":\"tiny\",\"prompt\":[[1,2,3],[4]],\"max_tokens\":7,\"temperature\":0,"
                    "\"top_p\":0.5,\"top_k\":40,\"min_p\":0.1,\"n\":2,\"best_of\":3,\"logprobs\":3,"
                    "\"echo\":true,\"stop\":[\"a\",\"bb\"],\"presence_penalty\":1,\"frequency_penalty\":-1,"
                    "\"repetition_penalty\":1.1,\"logit_bias\":{\"5\":-100,\"7\":2.5},\"seed\":42,"
                    "\"ignore_eos\":true,\"min_tokens\":2,\"user\":\"x\",\"unknown\":{\"a\":[1]}}";
    cr_assert_eq(oa_parse(OAI_COMPLETION, b, &r, &e), 0, "%s", e.message);
    cr_assert_str_eq(r.model, "tiny");
    cr_assert_eq(r.n_prompts, 2);
    cr_assert_null(r.prompts[0].text);
    cr_assert_eq(r.prompts[0].n_ids, 3);
    cr_assert_eq(r.prompts[0].ids[2], 3);
    cr_assert_eq(r.prompts[1].n_ids, 1);
    cr_assert_eq(r.max_tokens, 7);
    cr_assert_eq(r.n, 2);
    cr_assert_eq(r.best_of, 3);
    cr_assert_eq(r.logprobs, 3);
    cr_assert_eq(r.sampling.n_logprobs, 3);
    cr_assert_eq(r.echo, 1);
    cr_assert_eq(r.n_stop, 2);
    cr_assert_str_eq(r.stop[1], "bb");
    cr_assert_eq(r.sampling.top_k, 40);
    cr_assert_float_eq(r.sampling.min_p, 0.1f, 1e-6);
    cr_assert_float_eq(r.sampling.repetition_penalty, 1.1f, 1e-6);
    cr_assert_eq(r.sampling.n_logit_bias, 2);
    cr_assert_eq(r.sampling.bias_ids[1], 7);
    cr_assert_float_eq(r.sampling.bias_vals[1], 2.5f, 1e-6);
    cr_assert_eq(r.sampling.has_seed, 1);
    cr_assert_eq(r.sampling.seed, 42u);
    cr_assert_eq(r.sampling.ignore_eos, 1);
    cr_assert_eq(r.sampling.min_tokens, 2);
    oai_request_free(&r);

    cr_assert_eq(oa_parse(OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"],\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &r, &e), 0);
    cr_assert_eq(r.n_prompts, 2);
    cr_assert_str_eq(r.prompts[1].text, "b");
    cr_assert_eq(r.include_usage, 1);
    oai_request_free(&r);
    cr_assert_eq(oa_parse(OAI_COMPLETION, "{\"prompt\":[5,6],\"model\":\"\",\"top_k\":-1}", &r, &e), 0);
    cr_assert_eq(r.prompts[0].n_ids, 2);
    cr_assert_eq(r.sampling.top_k, 0);
    oai_request_free(&r);
    /* include_usage without stream is dropped */
    cr_assert_eq(oa_parse(OAI_COMPLETION, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", &r, &e), 0);
    cr_assert_eq(r.include_usage, 0);
    oai_request_free(&r);
}

/* Bodies are valid UTF-8 and carry no NUL, raw or escaped, anywhere: before, cJSON kept a NUL
 * as the end of the string and the prompt, a message or a stop string was silently cut there. */
Test(openai, body_utf8_and_nul)
{
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"caf\xc3\"}", 400, "invalid_json", NULL);
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"\xed\xa0\x80\"}", 400, "invalid_json", NULL);   /* a UTF-16 surrogate */
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"\xc0\xaf\"}", 400, "invalid_json", NULL);       /* overlong */
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\tb\"}", 400, "invalid_json", NULL);           /* raw control */
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"On\\u0000ce\"}", 400, "invalid_value", NULL);
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"Once\",\"stop\":[\"x\\u0000y\"]}", 400, "invalid_value", NULL);
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000\"}]}", 400, "invalid_value", NULL);
    oai_request r;
    oai_error e;
    static const char raw[] = "{\"prompt\":\"a\0b\"}";
    cr_assert_neq(oai_parse(OAI_COMPLETION, raw, sizeof raw - 1, &oa_lim, &r, &e), 0);
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.code, "invalid_json");
    /* an escaped backslash before "u0000" is text, and so is every valid character */
    cr_assert_eq(oa_parse(OAI_COMPLETION, "{\"prompt\":\"\\\\u0000 caf\xc3\xa9 \xf0\x9f\x98\x80 \\u00e9\"}", &r, &e), 0, "%s", e.message);
    cr_assert_str_eq(r.prompts[0].text, "\\u0000 caf\xc3\xa9 \xf0\x9f\x98\x80 \xc3\xa9");
    oai_request_free(&r);
}

/* One JSON value per body: trailing data ({...}xyz, a second object) is a 400 where the parser
 * used to read the first value and ignore the rest; white space after it is fine, and so are
 * brackets and braces inside strings. */
Test(openai, trailing_data_after_the_body)
{
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":1}xyz", 400, "invalid_json", NULL);
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\"}{\"prompt\":\"b\"}", 400, "invalid_json", NULL);
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\"} \"x\"", 400, "invalid_json", NULL);
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}]", 400, "invalid_json", NULL);
    oai_tok_request t;
    oai_error e;
    static const char tok[] = "{\"prompt\":\"a\"}0";
    cr_assert_neq(oai_parse_tokenize(tok, sizeof tok - 1, &t, &e), 0, "/tokenize too");
    cr_assert_str_eq(e.code, "invalid_json");
    oai_request r;
    cr_assert_eq(oa_parse(OAI_COMPLETION, "{\"prompt\":\"}{ ]\"} \r\n\t ", &r, &e), 0, "%s", e.message);
    cr_assert_str_eq(r.prompts[0].text, "}{ ]");
    oai_request_free(&r);
}

Test(openai, completion_errors)
{
    oa_bad(OAI_COMPLETION, "", 400, "invalid_json", NULL);
    oa_bad(OAI_COMPLETION, "{\"prompt\":", 400, "invalid_json", NULL);
    oa_bad(OAI_COMPLETION, "\"x\"", 400, "invalid_json", NULL);
    oa_bad(OAI_COMPLETION, "{}", 400, "missing_required_parameter", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":null}", 400, "missing_required_parameter", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":5}", 400, "invalid_type", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":[]}", 400, "invalid_value", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":[\"a\",1]}", 400, "invalid_type", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":[1,\"a\"]}", 400, "invalid_type", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":[1,2.5]}", 400, "invalid_type", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":[512]}", 400, "invalid_value", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":[-1]}", 400, "invalid_value", "prompt");
    oa_bad(OAI_COMPLETION, "{\"prompt\":[[1],[]]}", 400, "invalid_value", "prompt[1]");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"model\":\"other\"}", 404, "model_not_found", "model");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"model\":3}", 400, "invalid_type", "model");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":-1}", 400, "invalid_value", "max_tokens");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":1.5}", 400, "invalid_type", "max_tokens");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "invalid_type", "temperature");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":2.5}", 400, "invalid_value", "temperature");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"top_p\":0}", 400, "invalid_value", "top_p");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"top_k\":-2}", 400, "invalid_value", "top_k");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"min_p\":1.5}", 400, "invalid_value", "min_p");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"presence_penalty\":3}", 400, "invalid_value", "presence_penalty");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"repetition_penalty\":0}", 400, "invalid_value", "repetition_penalty");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"n\":0}", 400, "invalid_value", "n");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"n\":3,\"best_of\":2}", 400, "invalid_value", "best_of");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"best_of\":2,\"stream\":true}", 400, "invalid_value", "best_of");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":1}", 400, "invalid_type", "stream");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":21}", 400, "invalid_value", "logprobs");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stop\":5}", 400, "invalid_type", "stop");
    {   /* vLLM takes any number of stop strings; kvserve up to ENGINE_MAX_STOP */
        char big[ENGINE_MAX_STOP * 8 + 64];
        size_t o = (size_t)snprintf(big, sizeof big, "{\"prompt\":\"a\",\"stop\":[");
        for (int i = 0; i <= ENGINE_MAX_STOP; i++) o += (size_t)snprintf(big + o, sizeof big - o, "%s\"s%d\"", i ? "," : "", i);
        snprintf(big + o, sizeof big - o, "]}");
        oa_bad(OAI_COMPLETION, big, 400, "invalid_value", "stop");
    }
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"1\",2]}", 400, "invalid_type", "stop");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":[1]}", 400, "invalid_type", "logit_bias");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}", 400, "invalid_value", "logit_bias");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"512\":1}}", 400, "invalid_value", "logit_bias");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"1\":101}}", 400, "invalid_value", "logit_bias");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"1\":\"x\"}}", 400, "invalid_type", "logit_bias");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":3,\"min_tokens\":4}", 400, "invalid_value", "min_tokens");
    oa_bad(OAI_COMPLETION, "{\"prompt\":\"a\",\"seed\":\"x\"}", 400, "invalid_type", "seed");
}

Test(openai, chat_parsing)
{
    oai_request r;
    oai_error e;
    const char *b = "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":"
                    "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                    "{\"role\":\"assistant\",\"content\":null},{\"role\":\"user\",\"content\":\"c\"}],"
                    "\"max_completion_tokens\":9,\"max_tokens\":3,\"logprobs\":true,\"top_logprobs\":4,"
                    "\"response_format\":{\"type\":\"text\"},\"tools\":[]}";
    cr_assert_eq(oa_parse(OAI_CHAT, b, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_msgs, 4);
    cr_assert_str_eq(r.msgs[1].content, "ab");
    cr_assert_str_eq(r.msgs[2].content, "");
    cr_assert_str_eq(r.msgs[2].role, "assistant");
    cr_assert_eq(r.max_tokens, 9);
    cr_assert_eq(r.logprobs, 4);
    cr_assert_eq(r.add_generation_prompt, 1);
    oai_request_free(&r);
    cr_assert_eq(oa_parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3,\"logprobs\":true}", &r, &e), 0);
    cr_assert_eq(r.max_tokens, 3);
    cr_assert_eq(r.logprobs, 0);
    oai_request_free(&r);
    oa_bad(OAI_CHAT, "{}", 400, "missing_required_parameter", "messages");
    oa_bad(OAI_CHAT, "{\"messages\":{}}", 400, "invalid_type", "messages");
    oa_bad(OAI_CHAT, "{\"messages\":[]}", 400, "invalid_value", "messages");
    oa_bad(OAI_CHAT, "{\"messages\":[1]}", 400, "invalid_type", "messages[0]");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", 400, "invalid_type", "messages[0].role");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "invalid_value", "messages[0].role");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 400, "missing_required_parameter", "messages[0].content");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "invalid_type", "messages[0].content");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":"
                     "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"input_audio\",\"input_audio\":{}}]}]}",
           400, "invalid_value", "messages[1].content[1]");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 400, "invalid_type", "messages[0].content[0]");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}",
           400, "missing_required_parameter", "response_format.json_schema.schema");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\",\"function\":{}}]}",
           400, "invalid_type", "tools[0].function.name");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":0}", 400, "invalid_value", "max_completion_tokens");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":3}", 400, "invalid_value", "top_logprobs");
    oa_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":30}", 400, "invalid_value", "top_logprobs");
}

Test(openai, tokenize_bodies)
{
    oai_tok_request t;
    oai_error e;
    const char *b = "{\"prompt\":\"hi\",\"add_special_tokens\":false}";
    cr_assert_eq(oai_parse_tokenize(b, strlen(b), &t, &e), 0);
    cr_assert_str_eq(t.prompt, "hi");
    cr_assert_eq(t.add_special, 0);
    oai_tok_request_free(&t);
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    cr_assert_eq(oai_parse_tokenize(b, strlen(b), &t, &e), 0);
    cr_assert_eq(t.n_msgs, 1);
    oai_tok_request_free(&t);
    b = "{}";
    cr_assert_neq(oai_parse_tokenize(b, strlen(b), &t, &e), 0);
    b = "{\"tokens\":[1,2,3]}";
    cr_assert_eq(oai_parse_detokenize(b, strlen(b), &oa_lim, &t, &e), 0);
    cr_assert_eq(t.n_tokens, 3);
    oai_tok_request_free(&t);
    b = "{\"tokens\":[1,600]}";
    cr_assert_neq(oai_parse_detokenize(b, strlen(b), &oa_lim, &t, &e), 0);
    cr_assert_eq(e.status, 400);
}

/* Fake token pieces: id 1 → "a", id 2 → " b", id 3 → one invalid byte, others "<id>". */
static int oa_piece(void *ud, int32_t id, char *buf, int cap)
{
    (void)ud;
    const char *s = id == 1 ? "a" : id == 2 ? " b" : id == 3 ? "\xE6" : id == 4 ? "\xC3\xA9" : "?";
    int n = (int)strlen(s);
    memcpy(buf, s, (size_t)(n < cap ? n : cap));
    return n;
}

static oai_lp oa_lp(int32_t tok, float lp)
{
    oai_lp l;
    memset(&l, 0, sizeof l);
    l.r.token = tok;
    l.r.logprob = lp;
    l.r.n_top = 2;
    l.r.top_ids[0] = tok;
    l.r.top_logprobs[0] = lp;
    l.r.top_ids[1] = 2;
    l.r.top_logprobs[1] = -3;
    l.has_logprob = 1;
    return l;
}

Test(openai, response_shapes)
{
    oai_resp rs = {OAI_COMPLETION, "cmpl-1", 1700000000, "tiny", 1, 0, oa_piece, NULL, 0, NULL, -1};
    oai_choice c;
    memset(&c, 0, sizeof c);
    c.index = 0;
    c.finish = ENGINE_FINISH_LENGTH;
    oai_choice_append_text(&c, "a b", 3);
    oai_lp l1 = oa_lp(1, -0.5f), l2 = oa_lp(2, -1.0f);
    oai_lp le = oa_lp(4, -2.0f);
    oai_choice_append_lp(&c, &l1.r, 1);
    oai_choice_append_lp(&c, &l2.r, 1);
    oai_choice_append_lp(&c, &le.r, 1); /* "é": 2 bytes, 1 character */
    oai_choice_append_lp(&c, &l1.r, 1);
    oai_usage u = {5, 2, 3};
    char *s = oai_response_json(&rs, &c, 1, &u);
    cJSON *j = cJSON_Parse(s);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(ch, "text")->valuestring, "a b");
    cr_assert_str_eq(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "length");
    const cJSON *lp = cJSON_GetObjectItem(ch, "logprobs");
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "tokens"), 1)->valuestring, " b");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "text_offset"), 1)->valueint, 1);
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "text_offset"), 3)->valueint, 4,
                 "text_offset counts characters, not bytes");
    const cJSON *top0 = cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "top_logprobs"), 0);
    cr_assert_eq(cJSON_GetArraySize(top0), 1); /* logprobs = 1: the best alternative (= sampled) */
    const cJSON *us = cJSON_GetObjectItem(j, "usage");
    cr_assert_eq(cJSON_GetObjectItem(us, "total_tokens")->valueint, 7);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(us, "prompt_tokens_details"), "cached_tokens")->valueint, 3);
    cJSON_Delete(j);
    free(s);

    /* chat: message object, TokenLogprob with bytes, invalid UTF-8 token → U+FFFD */
    rs.kind = OAI_CHAT;
    rs.logprobs = 2;
    oai_lp l3 = oa_lp(3, -2.0f);
    oai_choice_append_lp(&c, &l3.r, 1);
    s = oai_response_json(&rs, &c, 1, &u);
    j = cJSON_Parse(s);
    cr_assert(j, "%s", s);
    ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "content")->valuestring, "a b");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "refusal")));
    const cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "logprobs"), "content");
    cr_assert_eq(cJSON_GetArraySize(content), 5);
    const cJSON *t2 = cJSON_GetArrayItem(content, 4);
    cr_assert_str_eq(cJSON_GetObjectItem(t2, "token")->valuestring, "\xEF\xBF\xBD");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(t2, "bytes"), 0)->valueint, 0xE6);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t2, "top_logprobs")), 2);
    cJSON_Delete(j);
    free(s);
    oai_choice_free(&c);
}

Test(openai, chunks)
{
    oai_resp rs = {OAI_CHAT, "chatcmpl-9", 5, "tiny", -1, 1, oa_piece, NULL, 0, NULL, -1};
    oai_choice c0 = {.index = 0}, c1 = {.index = 1};
    char *s = oai_chunk_sse(&rs, &c1, 1, "", 0, NULL, 0, 0, 0);
    cr_assert(!strncmp(s, "data: {", 7));
    cr_assert(!strcmp(s + strlen(s) - 2, "\n\n"));
    cr_assert(!strchr(s, '\n') || strchr(s, '\n') == s + strlen(s) - 2, "one line per event");
    cJSON *j = cJSON_Parse(s + 6);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion.chunk");
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cr_assert_eq(cJSON_GetObjectItem(c, "index")->valueint, 1);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "role")->valuestring, "assistant");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(c, "finish_reason")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "usage")));
    cJSON_Delete(j);
    free(s);
    s = oai_chunk_sse(&rs, &c0, 0, "", 0, NULL, 0, 0, ENGINE_FINISH_STOP);
    cr_assert(strstr(s, "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\""), "%s", s);
    free(s);
    s = oai_chunk_sse(&rs, &c0, 0, "he\"llo\n", 7, NULL, 0, 0, 0);
    cr_assert(strstr(s, "\"content\":\"he\\\"llo\\n\""), "%s", s);
    free(s);
    oai_usage u = {3, 4, 0};
    s = oai_usage_chunk_sse(&rs, &u);
    cr_assert(strstr(s, "\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7"), "%s", s);
    free(s);
    rs.kind = OAI_COMPLETION;
    rs.include_usage = 0;
    rs.logprobs = 0;
    oai_lp l = oa_lp(2, -1.0f);
    s = oai_chunk_sse(&rs, &c0, 0, " b", 2, &l, 1, 10, ENGINE_FINISH_LENGTH);
    j = cJSON_Parse(s + 6);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(c, "text")->valuestring, " b");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "logprobs"), "text_offset"), 0)->valueint, 10);
    cr_assert_null(cJSON_GetObjectItem(j, "usage"));
    cJSON_Delete(j);
    free(s);
}

Test(openai, metrics_text)
{
    met m;
    met_init(&m);
    met_observe(&m.ttft, 0.003);
    met_observe(&m.ttft, 1000);
    m.success[MET_STOP] = 3;
    engine_stats st;
    memset(&st, 0, sizeof st);
    st.alive = 1;
    st.num_running = 2;
    st.kv_blocks_total = 100;
    st.kv_blocks_used = 25;
    st.kv_bytes_per_token = 640;
    st.prompt_tokens = 11;
    char *t = met_render(&m, &st, "m\"x");
    cr_assert(strstr(t, "vllm:num_requests_running{model_name=\"m\\\"x\",engine=\"0\"} 2\n"), "%s", t);
    cr_assert(strstr(t, "vllm:kv_cache_usage_perc{model_name=\"m\\\"x\",engine=\"0\"} 0.25\n"));
    cr_assert(strstr(t, "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"m\\\"x\",engine=\"0\"} 11\n"));
    cr_assert(strstr(t, "vllm:request_success_total{model_name=\"m\\\"x\",engine=\"0\",finished_reason=\"stop\"} 3\n"));
    cr_assert(strstr(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",engine=\"0\",le=\"0.001\"} 0\n"));
    cr_assert(strstr(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",engine=\"0\",le=\"0.005\"} 1\n"));
    cr_assert(strstr(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",engine=\"0\",le=\"160.0\"} 1\n"));
    cr_assert(strstr(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",engine=\"0\",le=\"+Inf\"} 2\n"));
    cr_assert(strstr(t, "vllm:time_to_first_token_seconds_count{model_name=\"m\\\"x\",engine=\"0\"} 2\n"));
    cr_assert(strstr(t, "kvserve_kv_bytes_per_token{model_name=\"m\\\"x\",engine=\"0\"} 640\n"));
    free(t);
}
