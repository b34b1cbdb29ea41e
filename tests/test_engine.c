/*
 * test_engine.c — the engine thread with the real CPU backend on stories260K.
 *
 * All golden cases submitted at once must reproduce their recorded greedy tokens exactly:
 * batched, with the prefix cache on and off, and with a KV pool so small that sequences are
 * preempted and recomputed. Also the API edges: max_tokens 0, cancellation, n > 1, stop strings,
 * invalid requests. Skips when the shared model directory is absent.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"

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

static void te_setup(void)
{
    const char *sh = getenv("KVSERVE_SHARED");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K.golden.json", sh && *sh ? sh : "../shared");
    FILE *fp = fopen(path, "rb");
    if (!fp) return;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *txt = malloc((size_t)n + 1);
    cr_assert_eq(fread(txt, 1, (size_t)n, fp), (size_t)n);
    txt[n] = 0;
    fclose(fp);
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
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", sh && *sh ? sh : "../shared");
    cr_assert_eq(model_load(path, &te_model, err, sizeof err), 0, "%s", err);
    te_tok = tok_create(te_model->gguf, err, sizeof err);
    cr_assert_not_null(te_tok, "%s", err);
}

static void te_teardown(void)
{
    tok_destroy(te_tok);
    model_destroy(te_model);
    te_tok = NULL;
    te_model = NULL;
}

TestSuite(engine, .init = te_setup, .fini = te_teardown, .timeout = 120);

#define TE_NEED_MODEL()                                                                      \
    do {                                                                                     \
        if (!te_model) cr_skip_test("stories260K not found under KVSERVE_SHARED");         \
    } while (0)

/* Wake-up: the engine thread signals, the test waits with a deadline. */
typedef struct te_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
} te_waiter;

static te_waiter te_w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void te_wake(void *ud)
{
    te_waiter *w = ud;
    pthread_mutex_lock(&w->mu);
    w->n++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static engine *te_engine(size_t kv_bytes, int prefix, int max_seqs, int batch_tokens)
{
    engine_config c;
    engine_config_default(&c);
    c.model = te_model;
    c.tok = te_tok;
    c.device = "cpu";
    c.n_threads = 1;
    c.kv_memory_bytes = kv_bytes;
    c.prefix_cache = prefix;
    c.max_seqs = max_seqs;
    c.max_batch_tokens = batch_tokens;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    c.quiet = 1;
    char err[256];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "engine_create: %s", err);
    return e;
}

static uint64_t te_submit(engine *e, const int32_t *prompt, int n_prompt, int max_tokens, int n,
                          float temp, const char *stop)
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
    r.sampling.seed = 1234;
    r.sampling.has_seed = 1;
    if (stop) {
        r.stop[0] = strdup(stop);
        r.n_stop = 1;
    }
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    return id;
}

/* What the events of one request/choice said. */
typedef struct te_out {
    uint64_t id;
    int32_t toks[16][600];
    int n_toks[16];
    char text[16][4096];
    int finish[16];
    engine_usage usage[16];
    int n_final;
} te_out;

/* Polls events into outs[] (matched by id) until n_final choices have finished in total. */
static void te_collect(engine *e, te_out *outs, int n_outs, int want_final)
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

/* Every golden case at once; returns the preemption count. */
static int64_t te_golden_all(size_t kv_bytes, int prefix, int batch_tokens)
{
    engine *e = te_engine(kv_bytes, prefix, 16, batch_tokens);
    static te_out outs[16];
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < te_n_cases; i++)
        outs[i].id = te_submit(e, te_cases[i].prompt, te_cases[i].n_prompt, te_cases[i].n_gen, 1, 0, NULL);
    te_collect(e, outs, te_n_cases, te_n_cases);
    for (int i = 0; i < te_n_cases; i++) {
        const te_case *t = &te_cases[i];
        cr_assert_eq(outs[i].finish[0], ENGINE_FINISH_LENGTH, "%s", t->name);
        cr_assert_eq(outs[i].n_toks[0], t->n_gen, "%s: %d tokens", t->name, outs[i].n_toks[0]);
        for (int k = 0; k < t->n_gen; k++)
            cr_assert_eq(outs[i].toks[0][k], t->gen[k], "%s (prefix %d, kv %zu): token %d is %d, golden %d",
                         t->name, prefix, kv_bytes, k, outs[i].toks[0][k], t->gen[k]);
        cr_assert_eq(outs[i].usage[0].prompt_tokens, t->n_prompt);
        cr_assert_eq(outs[i].usage[0].completion_tokens, t->n_gen);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_used, st.kv_blocks_cached, "blocks held after every request finished");
    cr_assert_eq(st.num_running + st.num_waiting, 0);
    engine_destroy(e, 1);
    return st.preemptions;
}

Test(engine, golden_batched_cache_off)
{
    TE_NEED_MODEL();
    cr_assert_eq(te_golden_all((size_t)16 << 20, 0, 128), 0);
}

Test(engine, golden_batched_cache_on)
{
    TE_NEED_MODEL();
    cr_assert_eq(te_golden_all((size_t)16 << 20, 1, 128), 0);
}

Test(engine, golden_under_preemption)
{
    TE_NEED_MODEL();
    /* 640 bytes per token in f16: 40 blocks of 16 tokens, the longest case needs 22. */
    size_t kv = 40 * 16 * 640;
    cr_assert_gt(te_golden_all(kv, 0, 64), 0, "the small pool must force preemption");
    cr_assert_gt(te_golden_all(kv, 1, 64), 0, "the small pool must force preemption (cache on)");
}

Test(engine, prefix_cache_shares_300_tokens)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 128);
    int32_t p[310];
    p[0] = 1;
    for (int i = 1; i < 310; i++) p[i] = 3 + (i * 37) % 500;
    static te_out outs[3];
    memset(outs, 0, sizeof outs);
    /* Two arrive together, the third after they finished. */
    p[300] = 7;
    outs[0].id = te_submit(e, p, 305, 4, 1, 0, NULL);
    p[300] = 8;
    outs[1].id = te_submit(e, p, 305, 4, 1, 0, NULL);
    te_collect(e, outs, 2, 2);
    p[300] = 9;
    outs[2].id = te_submit(e, p, 305, 4, 1, 0, NULL);
    te_collect(e, outs, 3, 1);
    cr_assert_lt(outs[0].usage[0].cached_tokens, 288);
    cr_assert_geq(outs[1].usage[0].cached_tokens, 288, "in-batch: %d", outs[1].usage[0].cached_tokens);
    cr_assert_geq(outs[2].usage[0].cached_tokens, 288, "later: %d", outs[2].usage[0].cached_tokens);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.prefix_cache_queries, 3 * 305);
    cr_assert_geq(st.prefix_cache_hits, 2 * 288);
    cr_assert_gt(st.kv_blocks_cached, 0);
    engine_destroy(e, 1);
}

Test(engine, api_edges)
{
    TE_NEED_MODEL();
    engine *e = te_engine((size_t)16 << 20, 1, 8, 64);
    const te_case *t = &te_cases[0];
    static te_out outs[4];
    memset(outs, 0, sizeof outs);
    /* max_tokens 0 finishes at once. */
    outs[0].id = te_submit(e, t->prompt, t->n_prompt, 0, 2, 0, NULL);
    /* Stop string: golden text of case 0 begins ", there was a little girl". */
    outs[1].id = te_submit(e, t->prompt, t->n_prompt, 40, 1, 0, "little");
    /* n = 3 sampled choices. */
    outs[2].id = te_submit(e, t->prompt, t->n_prompt, 20, 3, 1.0f, NULL);
    /* A long one, cancelled. */
    outs[3].id = te_submit(e, t->prompt, t->n_prompt, 400, 1, 0, NULL);
    engine_cancel(e, outs[3].id);
    te_collect(e, outs, 4, 2 + 1 + 3 + 1);
    cr_assert_eq(outs[0].finish[0], ENGINE_FINISH_LENGTH);
    cr_assert_eq(outs[0].finish[1], ENGINE_FINISH_LENGTH);
    cr_assert_eq(outs[0].n_toks[0], 0);
    cr_assert_eq(outs[1].finish[0], ENGINE_FINISH_STOP);
    cr_assert_str_eq(outs[1].text[0], ", there was a ");
    for (int c = 0; c < 3; c++) {
        cr_assert(outs[2].finish[c] == ENGINE_FINISH_LENGTH || outs[2].finish[c] == ENGINE_FINISH_STOP);
        cr_assert_leq(outs[2].n_toks[c], 20);
        cr_assert(outs[2].finish[c] == ENGINE_FINISH_STOP || outs[2].n_toks[c] == 20);
    }
    cr_assert_eq(outs[3].finish[0], ENGINE_FINISH_ABORT);
    cr_assert_lt(outs[3].n_toks[0], 400);
    /* Invalid requests are refused and nothing is queued. */
    engine_request r;
    memset(&r, 0, sizeof r);
    int32_t big[600] = {1};
    r.prompt = big;
    r.n_prompt = 500;
    r.n = 1;
    r.max_tokens = 100;
    smp_params_default(&r.sampling);
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), -EINVAL, "prompt + max_tokens beyond the context");
    r.n_prompt = 1;
    r.max_tokens = 1;
    big[0] = 512;
    cr_assert_eq(engine_submit(e, &r, &id), -EINVAL, "token id out of range");
    engine_stats st;
    engine_get_stats(e, &st);
    engine_destroy(e, 0);
}
