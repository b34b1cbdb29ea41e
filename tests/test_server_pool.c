/*
 * test_server_pool.c — /v1/embeddings, /v1/rerank (/rerank) and /v1/score over HTTP against
 * spawned servers:
 *
 *   - the tiny embedding and reranker models of tests/data against llama.cpp's answers on the
 *     same files (tests/data/README.md says how they were recorded): every vector's cosine at
 *     least 0.999 for mean, cls and last pooling, every relevance score within 5e-5
 *   - the embeddings API: float and base64 (the SDKs' default) agree, dimensions truncate and
 *     renormalise, normalize false, token-id inputs, several inputs, usage
 *   - rerank: sorted by score, top_n, return_documents, /rerank, /v1/score pairing
 *   - a generative model: 400 without --pooling; with --pooling mean embeddings and completions
 *     side by side; --pooling rank scores with its "yes"/"no" logits, or refuses to start
 *   - every error path a client can reach, in OpenAI's error shape
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/mkmodel.h"
#include "tests/server_harness.h"
#include "tests/test_util.h"

static th_server tsp_srv;

static void tsp_path(const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", tu_data_dir(), name);
}

static void tsp_start(const char *data_file, const char *const *args)
{
    char p[1024];
    tsp_path(data_file, p, sizeof p);
    if (access(p, R_OK)) cr_skip_test("%s missing", p);
    th_start(&tsp_srv, p, args, NULL, TH_WAIT_HEALTHY);
}

static void tsp_stop(void)
{
    th_stop(&tsp_srv);
}

TestSuite(server_pool, .fini = tsp_stop, .timeout = 120);

/* POSTs body to path and expects status; returns the parsed body. */
static cJSON *tsp_post(const char *path, const char *body, long status)
{
    th_resp r = th_http(tsp_srv.port, NULL, path, body, NULL);
    cr_assert_eq(r.status, status, "%s: %ld %.600s", path, r.status, r.body);
    cJSON *o = cJSON_Parse(r.body);
    cr_assert_not_null(o, "%.300s", r.body);
    th_resp_free(&r);
    return o;
}

/* Expects an OpenAI error with code (and param when not NULL). */
static void tsp_error(const char *path, const char *body, long status, const char *code, const char *param)
{
    cJSON *o = tsp_post(path, body, status);
    cJSON *e = cJSON_GetObjectItem(o, "error");
    cr_assert(cJSON_IsObject(e), "%s: no error object for %s", path, body);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    cJSON *c = cJSON_GetObjectItem(e, "code"), *p = cJSON_GetObjectItem(e, "param");
    cr_assert(cJSON_IsString(c) && !strcmp(c->valuestring, code), "%s: code %s, want %s (%s)", path,
              cJSON_IsString(c) ? c->valuestring : "null", code, body);
    if (param)
        cr_assert(cJSON_IsString(p) && !strcmp(p->valuestring, param), "%s: param %s, want %s", path,
                  cJSON_IsString(p) ? p->valuestring : "null", param);
    cJSON_Delete(o);
}

/* data[i].embedding as doubles (float arrays) into v; returns the length. */
static int tsp_vec(const cJSON *resp, int i, double *v, int cap)
{
    cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "data"), i);
    cr_assert_eq(cJSON_GetObjectItem(d, "index")->valueint, i);
    cr_assert_str_eq(cJSON_GetObjectItem(d, "object")->valuestring, "embedding");
    cJSON *e = cJSON_GetObjectItem(d, "embedding"), *x;
    int n = 0;
    cr_assert(cJSON_IsArray(e));
    cJSON_ArrayForEach(x, e)
    {
        cr_assert_lt(n, cap);
        v[n++] = x->valuedouble;
    }
    return n;
}

static double tsp_cos(const double *a, const double *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

static cJSON *tsp_ref(const char *name)
{
    char p[1024];
    tsp_path(name, p, sizeof p);
    char *t = tu_read_file(p, NULL);
    cr_assert_not_null(t, "%s", p);
    cJSON *o = cJSON_Parse(t);
    free(t);
    cr_assert_not_null(o);
    return o;
}

/* ---- against llama.cpp ------------------------------------------------------------------------ */

Test(server_pool, embeddings_match_llama_cpp_for_every_pooling, .timeout = 180)
{
    cJSON *ref = tsp_ref("embed-tiny.llamacpp.json");
    char *inputs = cJSON_PrintUnformatted(cJSON_GetObjectItem(ref, "inputs"));
    char body[4096];
    snprintf(body, sizeof body, "{\"input\": %s}", inputs);
    const char *pools[] = {"mean", "cls", "last"};
    for (int p = 0; p < 3; p++) {
        const char *const args[] = {"--pooling", pools[p], NULL};
        tsp_start("embed-tiny.gguf", p ? args : NULL); /* the file's own pooling is mean */
        cJSON *o = tsp_post("/v1/embeddings", body, 200);
        cJSON *want = cJSON_GetObjectItem(ref, pools[p]);
        int n = cJSON_GetArraySize(want);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "data")), n);
        char key[32];
        snprintf(key, sizeof key, "%s_tokens", pools[p]);
        cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")->valueint,
                     cJSON_GetObjectItem(ref, key)->valueint, "the same tokens as llama.cpp");
        for (int i = 0; i < n; i++) {
            double a[64], b[64];
            int d = tsp_vec(o, i, a, 64), k = 0;
            cJSON *x;
            cJSON_ArrayForEach(x, cJSON_GetArrayItem(want, i)) b[k++] = x->valuedouble;
            cr_assert_eq(d, k);
            double c = tsp_cos(a, b, d);
            cr_assert_geq(c, 0.999, "%s input %d: cosine %.6f with llama.cpp", pools[p], i, c);
        }
        if (p == 0) { /* the references differ between inputs: the check above can fail */
            double a[64], b[64];
            int k = 0;
            cJSON *x;
            cJSON_ArrayForEach(x, cJSON_GetArrayItem(want, 0)) a[k++] = x->valuedouble;
            k = 0;
            cJSON_ArrayForEach(x, cJSON_GetArrayItem(want, 4)) b[k++] = x->valuedouble;
            cr_assert_lt(tsp_cos(a, b, k), 0.9);
        }
        cJSON_Delete(o);
        th_stop(&tsp_srv);
    }
    free(inputs);
    cJSON_Delete(ref);
}

Test(server_pool, rerank_matches_llama_cpp_and_score_agrees)
{
    tsp_start("rerank-tiny.gguf", NULL);
    cJSON *ref = tsp_ref("rerank-tiny.llamacpp.json");
    char *q = cJSON_PrintUnformatted(cJSON_GetObjectItem(ref, "query"));
    char *docs = cJSON_PrintUnformatted(cJSON_GetObjectItem(ref, "documents"));
    char body[4096];
    snprintf(body, sizeof body, "{\"query\": %s, \"documents\": %s}", q, docs);
    cJSON *o = tsp_post("/v1/rerank", body, 200);
    cJSON *res = cJSON_GetObjectItem(o, "results"), *want = cJSON_GetObjectItem(ref, "results");
    int n = cJSON_GetArraySize(want);
    cr_assert_eq(cJSON_GetArraySize(res), n);
    double prev = 2, score[8];
    for (int i = 0; i < n; i++) {
        cJSON *r = cJSON_GetArrayItem(res, i);
        int idx = cJSON_GetObjectItem(r, "index")->valueint;
        double s = cJSON_GetObjectItem(r, "relevance_score")->valuedouble;
        cr_assert_leq(s, prev, "sorted best first");
        prev = s;
        score[idx] = s;
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "document"), "text")->valuestring,
                         cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "documents"), idx)->valuestring);
        cJSON *w;
        cJSON_ArrayForEach(w, want) if (cJSON_GetObjectItem(w, "index")->valueint == idx)
        {
            double ws = cJSON_GetObjectItem(w, "relevance_score")->valuedouble;
            cr_assert_float_eq(s, ws, 5e-5, "document %d: %.7f, llama.cpp %.7f", idx, s, ws);
        }
    }
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")->valueint,
                 cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "usage"), "prompt_tokens")->valueint);
    cJSON_Delete(o);
    /* top_n, no documents, the /rerank alias */
    snprintf(body, sizeof body, "{\"query\": %s, \"documents\": %s, \"top_n\": 2, \"return_documents\": false}", q, docs);
    o = tsp_post("/rerank", body, 200);
    res = cJSON_GetObjectItem(o, "results");
    cr_assert_eq(cJSON_GetArraySize(res), 2);
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 0), "document"));
    cJSON_Delete(o);
    /* score: text_1 against every text_2, in input order, the same numbers */
    snprintf(body, sizeof body, "{\"text_1\": %s, \"text_2\": %s}", q, docs);
    o = tsp_post("/v1/score", body, 200);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "object")->valuestring, "list");
    cJSON *data = cJSON_GetObjectItem(o, "data");
    cr_assert_eq(cJSON_GetArraySize(data), n);
    for (int i = 0; i < n; i++) {
        cJSON *d = cJSON_GetArrayItem(data, i);
        cr_assert_eq(cJSON_GetObjectItem(d, "index")->valueint, i);
        cr_assert_str_eq(cJSON_GetObjectItem(d, "object")->valuestring, "score");
        cr_assert_float_eq(cJSON_GetObjectItem(d, "score")->valuedouble, score[i], 1e-6);
    }
    cJSON_Delete(o);
    /* embeddings of a reranker: a 400 that says what it serves */
    tsp_error("/v1/embeddings", "{\"input\": \"x\"}", 400, "model_not_supported", "model");
    /* errors */
    tsp_error("/v1/rerank", "{\"documents\": [\"a\"]}", 400, "missing_required_parameter", "query");
    tsp_error("/v1/rerank", "{\"query\": \"a\"}", 400, "missing_required_parameter", "documents");
    tsp_error("/v1/rerank", "{\"query\": \"a\", \"documents\": []}", 400, "invalid_value", "documents");
    tsp_error("/v1/rerank", "{\"query\": 3, \"documents\": [\"a\"]}", 400, "invalid_type", "query");
    tsp_error("/v1/rerank", "{\"query\": \"a\", \"documents\": [7]}", 400, "invalid_type", "documents[0]");
    tsp_error("/v1/rerank", "{\"query\": \"a\", \"documents\": [\"b\"], \"top_n\": 0}", 400, "invalid_value", "top_n");
    tsp_error("/v1/rerank", "{\"query\": \"a\", \"documents\": [\"b\"], \"model\": \"other\"}", 404, "model_not_found", "model");
    tsp_error("/v1/score", "{\"text_1\": [\"a\", \"b\"], \"text_2\": [\"a\", \"b\", \"c\"]}", 400, "invalid_value", "text_2");
    tsp_error("/v1/score", "{\"text_2\": [\"a\"]}", 400, "missing_required_parameter", "text_1");
    tsp_error("/v1/score", "{\"text_1\": \"a\", \"text_2\": \"b\", \"truncate_prompt_tokens\": 100000}", 400,
              "invalid_value", "truncate_prompt_tokens");
    tsp_error("/v1/rerank", "[1]", 400, "invalid_json", NULL);
    /* documents as {"text": …} objects (Cohere's older shape) and pairwise score lists */
    o = tsp_post("/v1/rerank", "{\"query\": \"a\", \"documents\": [{\"text\": \"b\"}, \"c\"]}", 200);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "results")), 2);
    cJSON_Delete(o);
    o = tsp_post("/v1/score", "{\"text_1\": [\"a\", \"b\"], \"text_2\": [\"c\", \"d\"]}", 200);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "data")), 2);
    cJSON_Delete(o);
    free(q);
    free(docs);
    cJSON_Delete(ref);
}

/* ---- the embeddings API ---------------------------------------------------------------------- */

/* Decodes standard base64 into out; returns the byte count. */
static size_t tsp_unbase64(const char *s, unsigned char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    unsigned v = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(tab, *s);
        cr_assert_not_null(p, "not base64: %c", *s);
        v = v << 6 | (unsigned)(p - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(v >> bits);
        }
    }
    return n;
}

Test(server_pool, embeddings_api_formats_dimensions_and_inputs)
{
    tsp_start("embed-tiny.gguf", NULL);
    cJSON *f = tsp_post("/v1/embeddings", "{\"input\": [\"hello world\", \"bye\"], \"model\": \"embed-tiny\"}", 200);
    cr_assert_str_eq(cJSON_GetObjectItem(f, "object")->valuestring, "list");
    cr_assert_str_eq(cJSON_GetObjectItem(f, "model")->valuestring, "embed-tiny");
    double a[64], b[64];
    int d = tsp_vec(f, 0, a, 64);
    cr_assert_eq(d, 16);
    double nn = 0;
    for (int i = 0; i < d; i++) nn += a[i] * a[i];
    cr_assert_float_eq(nn, 1.0, 1e-5, "normalised by default");
    cJSON *u = cJSON_GetObjectItem(f, "usage");
    cr_assert_eq(cJSON_GetObjectItem(u, "prompt_tokens")->valueint, cJSON_GetObjectItem(u, "total_tokens")->valueint);
    /* base64: little-endian float32 of the same vector */
    cJSON *g = tsp_post("/v1/embeddings", "{\"input\": [\"hello world\"], \"encoding_format\": \"base64\"}", 200);
    const char *s = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "data"), 0), "embedding")->valuestring;
    unsigned char raw[256];
    cr_assert_eq(tsp_unbase64(s, raw), 16 * 4);
    for (int i = 0; i < 16; i++) {
        float x;
        uint32_t w = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                     (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&x, &w, 4);
        cr_assert_float_eq(x, a[i], 1e-6, "value %d", i);
    }
    cJSON_Delete(g);
    /* dimensions: the leading values, renormalised */
    g = tsp_post("/v1/embeddings", "{\"input\": \"hello world\", \"dimensions\": 5}", 200);
    cr_assert_eq(tsp_vec(g, 0, b, 64), 5);
    double n5 = 0;
    for (int i = 0; i < 5; i++) n5 += a[i] * a[i];
    for (int i = 0; i < 5; i++) cr_assert_float_eq(b[i], a[i] / sqrt(n5), 1e-5);
    cJSON_Delete(g);
    /* normalize false: the raw mean, a multiple of the normalised one */
    g = tsp_post("/v1/embeddings", "{\"input\": \"hello world\", \"normalize\": false}", 200);
    tsp_vec(g, 0, b, 64);
    double nb = 0;
    for (int i = 0; i < 16; i++) nb += b[i] * b[i];
    cr_assert(fabs(nb - 1) > 1e-3, "not normalised: %g", nb);
    for (int i = 0; i < 16; i++) cr_assert_float_eq(b[i] / sqrt(nb), a[i], 1e-5);
    cJSON_Delete(g);
    /* token ids: the ids of the text give its vector */
    th_resp t = th_http(tsp_srv.port, NULL, "/tokenize", "{\"prompt\": \"hello world\"}", NULL);
    cJSON *tj = cJSON_Parse(t.body);
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(tj, "tokens"));
    char body[2048];
    snprintf(body, sizeof body, "{\"input\": [%s, [1, 5]]}", ids);
    g = tsp_post("/v1/embeddings", body, 200);
    tsp_vec(g, 0, b, 64);
    cr_assert_gt(tsp_cos(a, b, 16), 0.999999);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g, "data")), 2);
    cJSON_Delete(g);
    snprintf(body, sizeof body, "{\"input\": %s}", ids);
    g = tsp_post("/v1/embeddings", body, 200);
    tsp_vec(g, 0, b, 64);
    cr_assert_gt(tsp_cos(a, b, 16), 0.999999);
    cJSON_Delete(g);
    /* truncate_prompt_tokens keeps the last N */
    g = tsp_post("/v1/embeddings", "{\"input\": \"one two three four five six\", \"truncate_prompt_tokens\": 3}", 200);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "usage"), "prompt_tokens")->valueint, 3);
    cJSON_Delete(g);
    /* cache_prompt is accepted (its effect is the engine's, tests/test_pool.c) */
    g = tsp_post("/v1/embeddings", "{\"input\": \"hello world\", \"cache_prompt\": true}", 200);
    tsp_vec(g, 0, b, 64);
    cr_assert_gt(tsp_cos(a, b, 16), 0.999999);
    cJSON_Delete(g);
    free(ids);
    cJSON_Delete(tj);
    th_resp_free(&t);
    cJSON_Delete(f);
    /* rerank on an embedding model: says it is no reranker */
    tsp_error("/v1/rerank", "{\"query\": \"a\", \"documents\": [\"b\"]}", 400, "model_not_supported", "model");
    tsp_error("/v1/score", "{\"text_1\": \"a\", \"text_2\": \"b\"}", 400, "model_not_supported", "model");
}

Test(server_pool, embeddings_errors)
{
    tsp_start("embed-tiny.gguf", NULL);
    tsp_error("/v1/embeddings", "{}", 400, "missing_required_parameter", "input");
    tsp_error("/v1/embeddings", "{\"input\": \"\"}", 400, "invalid_value", "input");
    tsp_error("/v1/embeddings", "{\"input\": [\"a\", \"\"]}", 400, "invalid_value", "input[1]");
    tsp_error("/v1/embeddings", "{\"input\": []}", 400, "invalid_value", "input");
    tsp_error("/v1/embeddings", "{\"input\": 5}", 400, "invalid_type", "input");
    tsp_error("/v1/embeddings", "{\"input\": [\"a\", [1]]}", 400, "invalid_type", "input");
    tsp_error("/v1/embeddings", "{\"input\": [1, 100000]}", 400, "invalid_value", "input");
    tsp_error("/v1/embeddings", "{\"input\": \"a\", \"encoding_format\": \"int8\"}", 400, "invalid_value", "encoding_format");
    tsp_error("/v1/embeddings", "{\"input\": \"a\", \"encoding_format\": 1}", 400, "invalid_type", "encoding_format");
    tsp_error("/v1/embeddings", "{\"input\": \"a\", \"dimensions\": 17}", 400, "invalid_value", "dimensions");
    tsp_error("/v1/embeddings", "{\"input\": \"a\", \"dimensions\": 0}", 400, "invalid_value", "dimensions");
    tsp_error("/v1/embeddings", "{\"input\": \"a\", \"normalize\": 1}", 400, "invalid_type", "normalize");
    tsp_error("/v1/embeddings", "{\"input\": \"a\", \"model\": \"gpt-4\"}", 404, "model_not_found", "model");
    tsp_error("/v1/embeddings", "{\"input\": \"a\", \"user\": 3}", 400, "invalid_type", "user");
    tsp_error("/v1/embeddings", "not json", 400, "invalid_json", NULL);
    char *big = malloc(4000);
    strcpy(big, "{\"input\": \"");
    for (int i = 0; i < 300; i++) strcat(big, "ab ");
    strcat(big, "\"}");
    tsp_error("/v1/embeddings", big, 400, "context_length_exceeded", "input[0]");
    free(big);
    th_resp r = th_http(tsp_srv.port, "GET", "/v1/embeddings", NULL, NULL);
    cr_assert_eq(r.status, 405);
    th_resp_free(&r);
}

/* ---- a generative model --------------------------------------------------------------------- */

Test(server_pool, generative_model_needs_pooling)
{
    th_start(&tsp_srv, NULL, NULL, NULL, TH_WAIT_HEALTHY); /* stories260K: no pooling type */
    tsp_error("/v1/embeddings", "{\"input\": \"Once upon a time\"}", 400, "model_not_supported", "model");
    tsp_error("/v1/rerank", "{\"query\": \"a\", \"documents\": [\"b\"]}", 400, "model_not_supported", "model");
    th_stop(&tsp_srv);
    const char *const args[] = {"--pooling", "mean", NULL};
    th_start(&tsp_srv, NULL, args, NULL, TH_WAIT_HEALTHY);
    cJSON *o = tsp_post("/v1/embeddings", "{\"input\": [\"Once upon a time\", \"The cat\"]}", 200);
    double a[128];
    cr_assert_eq(tsp_vec(o, 1, a, 128), 64, "stories260K's embedding size");
    cJSON_Delete(o);
    /* the same server keeps generating */
    o = tsp_post("/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4, \"temperature\": 0}", 200);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "completion_tokens")->valueint, 4);
    cJSON_Delete(o);
    th_stop(&tsp_srv);
    /* the queue limits cover the pooled routes */
    const char *const full[] = {"--pooling", "mean", "--max-queued-requests", "0", NULL};
    th_start(&tsp_srv, NULL, full, NULL, TH_WAIT_HEALTHY);
    tsp_error("/v1/embeddings", "{\"input\": \"x\"}", 503, "server_is_overloaded", NULL);
    th_stop(&tsp_srv);
}

Test(server_pool, rank_pooling_of_a_generative_model)
{
    /* a vocabulary with "yes" and "no": scored by their logits */
    mkm_params p;
    mkm_params_default(&p);
    static const char *extra[] = {"yes", "no"};
    p.extra_tokens = extra;
    p.n_extra = 2;
    char path[512];
    tu_write_mkmodel(&p, "yesno", path, sizeof path);
    const char *const args[] = {"--pooling", "rank", NULL};
    th_start(&tsp_srv, path, args, NULL, TH_WAIT_HEALTHY);
    cJSON *o = tsp_post("/v1/rerank", "{\"query\": \"q\", \"documents\": [\"a\", \"b b\", \"c c c\"]}", 200);
    cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(o, "results"))
    {
        double s = cJSON_GetObjectItem(r, "relevance_score")->valuedouble;
        cr_assert(s > 0 && s < 1, "P(yes) %g", s);
    }
    cJSON_Delete(o);
    th_stop(&tsp_srv);
    unlink(path);
    /* stories260K has neither a head nor such tokens: the server does not start */
    th_start(&tsp_srv, NULL, args, NULL, TH_WAIT_NONE);
    int st = th_signal_wait(&tsp_srv, 0, 20000);
    cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1, "the server should exit 1 (status %d)", st);
    char *log = th_log(&tsp_srv);
    cr_assert(log && strstr(log, "rank pooling: the model is no reranker"), "%s", log ? log : "");
    free(log);
    th_stop(&tsp_srv);
}

/* The official OpenAI Node SDK's embeddings.create (base64 by default, which it decodes). */
Test(server_pool, openai_sdk_embeddings)
{
    if (system("command -v node >/dev/null 2>&1") != 0 || access("tests/e2e/node_modules/openai/package.json", R_OK))
        cr_skip_test("node or tests/e2e/node_modules missing (run: cd tests/e2e && npm ci)");
    tsp_start("embed-tiny.gguf", NULL);
    char cmd[1024], log[400];
    snprintf(log, sizeof log, "%s/sdk.log", tsp_srv.dir);
    snprintf(cmd, sizeof cmd, "cd tests/e2e && KVSERVE_URL=http://127.0.0.1:%d/v1 KVSERVE_MODEL=embed-tiny KVSERVE_DIM=16 "
                              "timeout 60 node openai_embeddings.mjs > '%s' 2>&1", tsp_srv.port, log);
    int rc = system(cmd);
    char *out = tu_read_file(log, NULL);
    unlink(log);
    cr_assert_eq(rc, 0, "openai_embeddings.mjs failed:\n%s", out ? out : "");
    free(out);
}
