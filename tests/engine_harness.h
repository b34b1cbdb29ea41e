/*
 * engine_harness.h — shared by the engine and prefix-cache tests: the stories260K golden cases,
 * an engine on the CPU backend, request submission and event collection with a deadline.
 * Everything is static, so each test file gets its own copy.
 */
#ifndef KVSERVE_TESTS_ENGINE_HARNESS_H
#define KVSERVE_TESTS_ENGINE_HARNESS_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/kv.h"
#include "cli/device.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "tests/test_util.h"

typedef struct te_case {
    char name[64];
    int32_t prompt[64];
    int n_prompt;
    int32_t gen[512];
    int n_gen;
} te_case;

static model *te_model;
static tokenizer *te_tok;
static te_case te_cases[16];
static int te_n_cases;

static inline void te_setup(void)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/stories260K.golden.json", tu_data_dir());
    char *txt = tu_read_file(path, NULL);
    if (!txt) return;
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    cr_assert_not_null(j);
    cJSON *c;
    te_n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
    {
        te_case *t = &te_cases[te_n_cases++];
        snprintf(t->name, sizeof t->name, "%s", cJSON_GetObjectItem(c, "name")->valuestring);
        cJSON *x;
        t->n_prompt = t->n_gen = 0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "prompt_token_ids")) t->prompt[t->n_prompt++] = x->valueint;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "generated_token_ids")) t->gen[t->n_gen++] = x->valueint;
    }
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    cr_assert_eq(model_load(path, &te_model, err, sizeof err), 0, "%s", err);
    te_tok = tok_create(te_model->gguf, err, sizeof err);
    cr_assert_not_null(te_tok, "%s", err);
}

static inline void te_teardown(void)
{
    tok_destroy(te_tok);
    model_destroy(te_model);
    te_tok = NULL;
    te_model = NULL;
}

/* Wake-up: the engine thread signals, the test waits with a deadline. */
typedef struct te_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
} te_waiter;

static te_waiter te_w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static inline void te_wake(void *ud)
{
    te_waiter *w = ud;
    pthread_mutex_lock(&w->mu);
    w->n++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The KV dtype the engines below use (a test may change it before creating one). */
static int te_kv_dtype = KV_F16;

/* The tests' engine configuration: the golden model on one CPU thread, quiet, kv_bytes of KV of
 * te_kv_dtype. */
static inline void te_config(engine_config *c, size_t kv_bytes)
{
    engine_config_default(c);
    c->model = te_model;
    c->tok = te_tok;
    c->device = "cpu";
    c->n_threads = 1;
    c->make_backend = be_create;
    c->kv_memory_bytes = kv_bytes;
    c->kv_dtype = te_kv_dtype;
    c->quiet = 1;
}

/* An engine on the golden model; max_model_len 0 keeps the model's context. */
static inline engine *te_engine_ctx(size_t kv_bytes, int prefix, int max_seqs, int batch_tokens,
                                    int max_model_len)
{
    engine_config c;
    te_config(&c, kv_bytes);
    c.prefix_cache = prefix;
    c.max_seqs = max_seqs;
    c.max_batch_tokens = batch_tokens;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    c.max_model_len = max_model_len;
    char err[512];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "engine_create: %s", err);
    return e;
}

static inline engine *te_engine(size_t kv_bytes, int prefix, int max_seqs, int batch_tokens)
{
    return te_engine_ctx(kv_bytes, prefix, max_seqs, batch_tokens, 0);
}

static inline uint64_t te_submit_seed(engine *e, const int32_t *prompt, int n_prompt, int max_tokens, int n,
                               float temp, const char *stop, uint64_t seed)
{
    engine_request r;
    memset(&r, 0, sizeof r);
    r.prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    memcpy(r.prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    r.n_prompt = n_prompt;
    r.n = n;
    r.max_tokens = max_tokens;
    smp_params_default(&r.sampling);
    r.sampling.temperature = temp;
    r.sampling.seed = seed;
    r.sampling.has_seed = 1;
    if (stop) {
        r.stop = malloc(sizeof *r.stop);
        r.stop[0] = strdup(stop);
        r.n_stop = 1;
    }
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    return id;
}

static inline uint64_t te_submit(engine *e, const int32_t *prompt, int n_prompt, int max_tokens, int n,
                          float temp, const char *stop)
{
    return te_submit_seed(e, prompt, n_prompt, max_tokens, n, temp, stop, 1234);
}

/* What the events of one request/choice said. */
typedef struct te_out {
    uint64_t id;
    int32_t toks[16][600];
    int n_toks[16];
    char text[16][4096];
    int finish[16];
    int stop_str[16];       /* the final event's stop_str / stop_token */
    int32_t stop_token[16];
    engine_usage usage[16];
    int n_final;
} te_out;

/* Polls events into outs[] (matched by id) until n_final choices have finished in total. */
static inline void te_collect(engine *e, te_out *outs, int n_outs, int want_final)
{
    int got = 0;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60;
    while (got < want_final) {
        engine_event *ev[64];
        int n = engine_poll(e, ev, 64);
        for (int i = 0; i < n; i++) {
            te_out *o = NULL;
            for (int k = 0; k < n_outs; k++)
                if (outs[k].id == ev[i]->id) o = &outs[k];
            cr_assert_not_null(o, "event for an unknown request");
            int c = ev[i]->index;
            cr_assert_eq(o->finish[c], 0, "event after the final one");
            for (int t = 0; t < ev[i]->n_tokens; t++) o->toks[c][o->n_toks[c]++] = ev[i]->tokens[t];
            strncat(o->text[c], ev[i]->text, sizeof o->text[c] - strlen(o->text[c]) - 1);
            if (ev[i]->finish) {
                o->finish[c] = ev[i]->finish;
                o->stop_str[c] = ev[i]->stop_str;
                o->stop_token[c] = ev[i]->stop_token;
                o->usage[c] = ev[i]->usage;
                o->n_final++;
                got++;
            }
            engine_event_free(ev[i]);
        }
        if (n) continue;
        pthread_mutex_lock(&te_w.mu);
        int rc = 0;
        while (!te_w.n && rc == 0) rc = pthread_cond_timedwait(&te_w.cv, &te_w.mu, &dl);
        te_w.n = 0;
        pthread_mutex_unlock(&te_w.mu);
        cr_assert_eq(rc, 0, "timed out waiting for engine events (%d of %d finished)", got, want_final);
    }
}


#define TE_NEED_MODEL()                                                                      \
    do {                                                                                     \
        cr_assert_not_null(te_model, "stories260K missing from KVSERVE_DATA (%s)", tu_data_dir()); \
    } while (0)

#endif
