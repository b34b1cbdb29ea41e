/*
 * test_pool.c — pooled sequences (engine/pool.c) and the engine's pooled requests.
 *
 *   pool/        the accumulator against a brute-force model under random chunkings and
 *                recomputations (a preempted sequence computes its prompt again), with
 *                pool_acc_check after every operation; the classification head against a
 *                float64 computation, for both of llama.cpp's head shapes and the yes/no rows
 *   pool_engine/ pooled requests through the engine (CPU backend) against the float64 reference
 *                forward (tests/ref_forward.c): mean, cls, last and rank, prompts split over
 *                many steps, many at once under a KV budget that preempts, the prefix cache
 *                used (last) or not (mean), and kept or freed (cache_prompt)
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/device.h"
#include "engine/engine.h"
#include "engine/pool.h"
#include "model/mkmodel.h"
#include "tests/ref_forward.h"
#include "tests/server_harness.h"
#include "tests/test_util.h"

/* ---- the accumulator -------------------------------------------------------------------------- */

/* Row of position p, value i: a deterministic function, so a recomputation gives the same row. */
static float tp_val(int p, int i)
{
    return (float)sin(0.37 * p + 1.3 * i) + 0.01f * (float)p;
}

Test(pool, accumulator_matches_brute_force_under_random_chunks)
{
    uint64_t seed = tu_seed(0x5eedf00d), rng = seed;
    printf("pool accumulator seed %llu\n", (unsigned long long)seed);
    for (int iter = 0; iter < 400; iter++) {
        int kind = MODEL_POOL_MEAN + (int)(tu_xorshift(&rng) % 4), dim = 1 + (int)(tu_xorshift(&rng) % 9);
        int n = 1 + (int)(tu_xorshift(&rng) % 40), rank_last = (int)(tu_xorshift(&rng) % 2);
        pool_acc *a = pool_acc_create(kind, dim, n, rank_last);
        cr_assert_not_null(a);
        pool_acc_check(a);
        int start = 0; /* the chunks of one pass, from start; a pass may stop early (preempted) */
        while (!pool_acc_done(a)) {
            int pos = start;
            while (pos < n) {
                int k = 1 + (int)(tu_xorshift(&rng) % 9);
                if (pos + k > n) k = n - pos;
                float rows[9 * 9];
                for (int j = 0; j < k; j++)
                    for (int i = 0; i < dim; i++) rows[j * dim + i] = tp_val(pos + j, i);
                int wants = pool_acc_wants(a, pos, k);
                int before = a->next, had = a->have;
                pool_acc_add(a, rows, k, pos);
                pool_acc_check(a);
                cr_assert(wants || (a->next == before && a->have == had), "took rows it did not want");
                pos += k;
                if (tu_xorshift(&rng) % 5 == 0) break; /* preempted: computes again */
            }
            /* a recomputation starts over, from 0 when the pooling needs every row, else maybe
             * from a cached prefix */
            start = pool_acc_whole(a) ? 0 : (int)(tu_xorshift(&rng) % (size_t)n);
        }
        float got[9];
        pool_acc_result(a, got);
        int row = kind == MODEL_POOL_CLS ? 0 : kind == MODEL_POOL_LAST ? n - 1 : kind == MODEL_POOL_RANK ? (rank_last ? n - 1 : 0) : -1;
        for (int i = 0; i < dim; i++) {
            double want = 0;
            if (row >= 0) want = tp_val(row, i);
            else {
                for (int p = 0; p < n; p++) want += tp_val(p, i);
                want /= n;
            }
            cr_assert_float_eq(got[i], want, 1e-5, "seed %llu iter %d kind %d value %d: %g, want %g",
                               (unsigned long long)seed, iter, kind, i, got[i], want);
        }
        pool_acc_destroy(a);
    }
}

Test(pool, bad_arguments_are_refused)
{
    cr_assert_null(pool_acc_create(MODEL_POOL_NONE, 4, 4, 0));
    cr_assert_null(pool_acc_create(MODEL_POOL_RANK + 1, 4, 4, 0));
    cr_assert_null(pool_acc_create(MODEL_POOL_MEAN, 0, 4, 0));
    cr_assert_null(pool_acc_create(MODEL_POOL_MEAN, 4, 0, 0));
}

/* ---- models -------------------------------------------------------------------------------- */

/* A small model file of arch with pooling (NULL: none) and extra control tokens. */
static model *tp_model(const char *arch, const char *pooling, const char **extra, int n_extra, char *path,
                       size_t n)
{
    mkm_params p;
    mkm_params_default(&p);
    p.arch = arch;
    p.dim = 32;
    p.heads = 4;
    p.kv_heads = 2;
    p.layers = 2;
    p.vocab = 300;
    p.context = 256;
    p.pooling = pooling;
    p.extra_tokens = extra;
    p.n_extra = n_extra;
    p.norm_std = 0.1f;
    tu_write_mkmodel(&p, "pool", path, n);
    model *m;
    char err[256];
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
    return m;
}

/* The head of h applied by a float64 computation written from llama.cpp's build_pooling. */
static void tp_head_ref(const model *m, const pool_head *h, const float *row, double *out)
{
    int d = m->hp.n_embd;
    double x[64], y[64], *w = malloc(sizeof *w * (size_t)d);
    for (int i = 0; i < d; i++) x[i] = row[i];
    float tmp[64];
    if (m->cls.data) {
        for (int o = 0; o < d; o++) {
            model_tensor_row_f32(&m->cls, o, tmp);
            double s = m->cls_b.data ? ((const float *)m->cls_b.data)[o] : 0;
            for (int i = 0; i < d; i++) s += (double)tmp[i] * x[i];
            y[o] = tanh(s);
        }
        memcpy(x, y, sizeof x);
    }
    for (int o = 0; o < h->n_out; o++) {
        model_tensor_row_f32(&m->cls_out, o, tmp);
        double s = m->cls_out_b.data ? ((const float *)m->cls_out_b.data)[o] : 0;
        for (int i = 0; i < d; i++) s += (double)tmp[i] * x[i];
        out[o] = s;
    }
    free(w);
    if (!h->softmax) return;
    double z = 0;
    for (int o = 0; o < h->n_out; o++) z += exp(out[o]);
    for (int o = 0; o < h->n_out; o++) out[o] = exp(out[o]) / z;
}

Test(pool, classification_heads_match_a_float64_computation)
{
    const char *archs[] = {"qwen3", "llama"};
    for (int a = 0; a < 2; a++) {
        char path[512], err[256];
        model *m = tp_model(archs[a], "rank", NULL, 0, path, sizeof path);
        cr_assert_eq(m->hp.pooling, MODEL_POOL_RANK);
        pool_head h;
        cr_assert_eq(pool_head_init(&h, m, NULL, err, sizeof err), 0, "%s", err);
        int qwen3 = a == 0;
        cr_assert_eq(h.n_out, qwen3 ? 2 : 1);
        cr_assert_eq(h.softmax, qwen3);
        cr_assert_eq(h.last, qwen3, "qwen3 rerankers pool the last token, others the first");
        cr_assert_eq(!!m->cls.data, !qwen3);
        float row[32], got[2];
        double want[2];
        for (int i = 0; i < 32; i++) row[i] = tp_val(3, i);
        pool_head_apply(&h, row, got);
        tp_head_ref(m, &h, row, want);
        for (int o = 0; o < h.n_out; o++) cr_assert_float_eq(got[o], want[o], 1e-5, "%s output %d", archs[a], o);
        if (qwen3) cr_assert_float_eq(got[0] + got[1], 1.0, 1e-6);
        pool_head_fini(&h);
        model_destroy(m);
        unlink(path);
    }
}

Test(pool, yes_no_head_takes_the_lm_head_rows)
{
    char path[512], err[256];
    const char *extra[] = {"yes", "no"};
    model *m = tp_model("llama", NULL, extra, 2, path, sizeof path);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    cr_assert_not_null(tok, "%s", err);
    pool_head h;
    cr_assert_eq(pool_head_init(&h, m, tok, err, sizeof err), 0, "%s", err);
    cr_assert(h.softmax && h.last && h.n_out == 2 && !h.cls);
    float row[32], got[2], tmp[32];
    for (int i = 0; i < 32; i++) row[i] = tp_val(5, i);
    pool_head_apply(&h, row, got);
    double l[2];
    int32_t ids[2] = {tok_find(tok, "yes"), tok_find(tok, "no")};
    for (int o = 0; o < 2; o++) {
        model_tensor_row_f32(&m->output, ids[o], tmp);
        l[o] = 0;
        for (int i = 0; i < 32; i++) l[o] += (double)tmp[i] * row[i];
    }
    double p_yes = 1.0 / (1.0 + exp(l[1] - l[0]));
    cr_assert_float_eq(got[0], p_yes, 1e-5, "P(yes) %g, want %g", got[0], p_yes);
    pool_head_fini(&h);
    tok_destroy(tok);
    model_destroy(m);
    unlink(path);
    /* without such tokens and without cls.*: no reranker */
    m = tp_model("llama", NULL, NULL, 0, path, sizeof path);
    tok = tok_create(m->gguf, err, sizeof err);
    cr_assert_eq(pool_head_init(&h, m, tok, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "no reranker"), "%s", err);
    tok_destroy(tok);
    model_destroy(m);
    unlink(path);
}

/* ---- through the engine --------------------------------------------------------------------------- */

typedef struct tp_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
} tp_waiter;

static tp_waiter tp_w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void tp_wake(void *ud)
{
    tp_waiter *w = ud;
    pthread_mutex_lock(&w->mu);
    w->n++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int tp_overlap = ENGINE_OVERLAP_AUTO; /* the engines' --overlap */

static engine *tp_engine(const model *m, const tokenizer *tok, size_t kv_bytes, int batch_tokens, int prefix)
{
    engine_config c;
    engine_config_default(&c);
    c.overlap = tp_overlap;
    c.model = m;
    c.tok = tok;
    c.device = "cpu";
    c.n_threads = 1;
    c.make_backend = be_create;
    c.kv_memory_bytes = kv_bytes;
    c.kv_dtype = KV_F32;
    c.block_size = 4;
    c.max_seqs = 8;
    c.max_batch_tokens = batch_tokens;
    c.prefix_cache = prefix;
    c.quiet = 1;
    c.wake = tp_wake;
    c.wake_ud = &tp_w;
    char err[512];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    return e;
}

static uint64_t tp_submit(engine *e, const int32_t *prompt, int n, int pooling, int max_tokens, int cache_prompt)
{
    engine_request r;
    memset(&r, 0, sizeof r);
    r.prompt = malloc(sizeof *r.prompt * (size_t)n);
    memcpy(r.prompt, prompt, sizeof *r.prompt * (size_t)n);
    r.n_prompt = n;
    r.n = 1;
    r.max_tokens = max_tokens;
    r.pooling = pooling;
    r.cache_prompt = cache_prompt;
    smp_params_default(&r.sampling);
    r.sampling.temperature = 0;
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    return id;
}

typedef struct tp_res {
    uint64_t id;
    float v[64];
    int n, finish, cached;
} tp_res;

/* Collects the final events of n requests (res[i].id set) with a deadline. */
static void tp_collect(engine *e, tp_res *res, int n)
{
    int got = 0;
    int64_t dl = th_now_ms() + 60000;
    while (got < n) {
        engine_event *ev[32];
        int k = engine_poll(e, ev, 32);
        for (int i = 0; i < k; i++) {
            for (int j = 0; j < n; j++)
                if (res[j].id == ev[i]->id && ev[i]->finish) {
                    res[j].finish = ev[i]->finish;
                    res[j].cached = ev[i]->usage.cached_tokens;
                    res[j].n = ev[i]->n_pooled;
                    if (ev[i]->n_pooled) memcpy(res[j].v, ev[i]->pooled, sizeof(float) * (size_t)ev[i]->n_pooled);
                    got++;
                }
            engine_event_free(ev[i]);
        }
        if (k) continue;
        cr_assert_lt(th_now_ms(), dl, "timed out waiting for pooled results (%d of %d)", got, n);
        pthread_mutex_lock(&tp_w.mu);
        if (!tp_w.n) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&tp_w.cv, &tp_w.mu, &ts);
        }
        tp_w.n = 0;
        pthread_mutex_unlock(&tp_w.mu);
    }
}

/* The reference pooled vector of a prompt: the float64 forward's hidden rows, pooled. */
static void tp_ref_pool(const rf_model *rf, const model *m, const int32_t *prompt, int n, int kind, int last,
                        double *out)
{
    int d = m->hp.n_embd;
    rf_seq *s = rf_seq_create(rf, n + 1);
    double h[64];
    for (int i = 0; i < d; i++) out[i] = 0;
    for (int p = 0; p < n; p++) {
        rf_step_hidden(rf, s, prompt[p], NULL, h);
        int take = kind == MODEL_POOL_MEAN || (kind == MODEL_POOL_CLS && p == 0) ||
                   (kind == MODEL_POOL_LAST && p == n - 1) || (kind == MODEL_POOL_RANK && p == (last ? n - 1 : 0));
        for (int i = 0; take && i < d; i++) out[i] += kind == MODEL_POOL_MEAN ? h[i] / n : h[i];
    }
    rf_seq_destroy(s);
}

static double tp_cos(const float *a, const double *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += a[i] * b[i], aa += (double)a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

static int32_t tp_tok(uint64_t *rng)
{
    return 3 + (int32_t)(tu_xorshift(rng) % 290);
}

static void tp_chunks_and_preemption(void);

Test(pool_engine, mean_cls_last_match_the_reference_over_chunks_and_preemption, .timeout = 240)
{
    tp_chunks_and_preemption();
}

/* The same over the overlapped engine: a step's pooled rows are read right after its forward,
 * before the next step (launched ahead) can reuse their scratch. */
Test(pool_engine, overlapped_steps_pool_the_same, .timeout = 240)
{
    tp_overlap = ENGINE_OVERLAP_ON;
    tp_chunks_and_preemption();
}

static void tp_chunks_and_preemption(void)
{
    char path[512];
    model *m = tp_model("llama", "mean", NULL, 0, path, sizeof path);
    char err[256];
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    rf_model *rf = rf_create(m, KV_F32);
    uint64_t seed = tu_seed(77), rng = seed;
    printf("pool engine seed %llu\n", (unsigned long long)seed);
    /* 7 tokens a step: prompts span many steps; a KV budget of a few sequences preempts */
    engine *e = tp_engine(m, tok, 256 * 264, 7, 1); /* 256 bytes a token: 66 blocks */
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.overlap, tp_overlap == ENGINE_OVERLAP_ON);
    enum { N = 12 };
    int32_t prompts[N][60];
    int lens[N], kinds[N];
    tp_res res[N];
    memset(res, 0, sizeof res);
    for (int r = 0; r < N; r++) {
        lens[r] = 5 + (int)(tu_xorshift(&rng) % 50);
        kinds[r] = MODEL_POOL_MEAN + r % 3;
        for (int i = 0; i < lens[r]; i++) prompts[r][i] = tp_tok(&rng);
        res[r].id = tp_submit(e, prompts[r], lens[r], kinds[r], 0, r % 2);
    }
    tp_collect(e, res, N);
    for (int r = 0; r < N; r++) {
        double want[64];
        tp_ref_pool(rf, m, prompts[r], lens[r], kinds[r], 0, want);
        cr_assert_eq(res[r].finish, ENGINE_FINISH_STOP, "request %d finished with %d", r, res[r].finish);
        cr_assert_eq(res[r].n, 32);
        double c = tp_cos(res[r].v, want, 32);
        cr_assert_gt(c, 0.99999, "request %d (kind %d, %d tokens): cosine %.7f", r, kinds[r], lens[r], c);
        for (int i = 0; i < 32; i++)
            cr_assert_float_eq(res[r].v[i], want[i], 1e-3 * (1 + fabs(want[i])), "request %d value %d", r, i);
    }
    engine_destroy(e, 0);
    rf_destroy(rf);
    tok_destroy(tok);
    model_destroy(m);
    unlink(path);
}

Test(pool_engine, last_uses_the_prefix_cache_mean_does_not, .timeout = 120)
{
    char path[512], err[256];
    model *m = tp_model("llama", "mean", NULL, 0, path, sizeof path);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    rf_model *rf = rf_create(m, KV_F32);
    engine *e = tp_engine(m, tok, (size_t)8 << 20, 64, 1);
    int32_t p[40];
    uint64_t rng = 9;
    for (int i = 0; i < 40; i++) p[i] = tp_tok(&rng);
    tp_res g = {.id = tp_submit(e, p, 40, MODEL_POOL_NONE, 1, 0)}; /* a generation caches the prompt */
    tp_collect(e, &g, 1);
    tp_res r[3] = {{.id = tp_submit(e, p, 40, MODEL_POOL_LAST, 0, 0)},
                   {.id = tp_submit(e, p, 40, MODEL_POOL_MEAN, 0, 0)},
                   {.id = tp_submit(e, p, 40, MODEL_POOL_CLS, 0, 0)}};
    tp_collect(e, r, 3);
    cr_assert_gt(r[0].cached, 0, "last pooling took no cached prefix");
    cr_assert_eq(r[1].cached, 0, "mean pooling must compute every row");
    cr_assert_eq(r[2].cached, 0, "cls pooling must compute the first row");
    for (int k = 0; k < 3; k++) {
        double want[64];
        cr_assert_eq(r[k].finish, ENGINE_FINISH_STOP, "request %d finished with %d", k, r[k].finish);
        tp_ref_pool(rf, m, p, 40, k == 0 ? MODEL_POOL_LAST : k == 1 ? MODEL_POOL_MEAN : MODEL_POOL_CLS, 0, want);
        cr_assert_gt(tp_cos(r[k].v, want, 32), 0.99999, "request %d", k);
    }
    engine_destroy(e, 0);
    rf_destroy(rf);
    tok_destroy(tok);
    model_destroy(m);
    unlink(path);
}

/* Blocks the prefix cache holds once the engine is idle. */
static int64_t tp_cached_blocks(engine *e)
{
    engine_stats st;
    for (int i = 0; i < 100; i++) {
        engine_get_stats(e, &st);
        if (!st.num_running && !st.num_waiting) break;
        usleep(10000);
    }
    return st.kv_blocks_cached;
}

Test(pool_engine, cache_prompt_keeps_the_kv_else_it_is_freed, .timeout = 120)
{
    char path[512], err[256];
    model *m = tp_model("llama", "mean", NULL, 0, path, sizeof path);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    engine *e = tp_engine(m, tok, (size_t)8 << 20, 64, 1);
    int32_t p[33];
    uint64_t rng = 11;
    for (int i = 0; i < 33; i++) p[i] = tp_tok(&rng);
    tp_res r = {.id = tp_submit(e, p, 33, MODEL_POOL_MEAN, 0, 0)};
    tp_collect(e, &r, 1);
    cr_assert_eq(tp_cached_blocks(e), 0, "a pooled request without cache_prompt left blocks in the cache");
    r = (tp_res){.id = tp_submit(e, p, 33, MODEL_POOL_MEAN, 0, 1)};
    tp_collect(e, &r, 1);
    cr_assert_eq(tp_cached_blocks(e), 8, "cache_prompt: the 8 full blocks of 33 tokens stay cached");
    /* a generation over the same prompt now starts from them */
    tp_res g = {.id = tp_submit(e, p, 33, MODEL_POOL_NONE, 1, 0)};
    tp_collect(e, &g, 1);
    cr_assert_eq(g.cached, 32);
    engine_destroy(e, 0);
    tok_destroy(tok);
    model_destroy(m);
    unlink(path);
}

Test(pool_engine, rank_scores_match_the_reference_head, .timeout = 120)
{
    const char *archs[] = {"qwen3", "llama"};
    for (int a = 0; a < 2; a++) {
        char path[512], err[256];
        model *m = tp_model(archs[a], "rank", NULL, 0, path, sizeof path);
        tokenizer *tok = tok_create(m->gguf, err, sizeof err);
        rf_model *rf = rf_create(m, KV_F32);
        engine *e = tp_engine(m, tok, (size_t)8 << 20, 16, 1);
        pool_head h;
        cr_assert_eq(pool_head_init(&h, m, tok, err, sizeof err), 0, "%s", err);
        int32_t p[3][30];
        uint64_t rng = 21 + (uint64_t)a;
        tp_res r[3];
        memset(r, 0, sizeof r);
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < 30; i++) p[k][i] = tp_tok(&rng);
            r[k].id = tp_submit(e, p[k], 10 + 10 * k, MODEL_POOL_RANK, 0, 0);
        }
        tp_collect(e, r, 3);
        for (int k = 0; k < 3; k++) {
            double row[64], want[2];
            float rowf[64];
            tp_ref_pool(rf, m, p[k], 10 + 10 * k, MODEL_POOL_RANK, h.last, row);
            for (int i = 0; i < 32; i++) rowf[i] = (float)row[i];
            tp_head_ref(m, &h, rowf, want);
            cr_assert_eq(r[k].n, h.n_out);
            for (int o = 0; o < h.n_out; o++)
                cr_assert_float_eq(r[k].v[o], want[o], 1e-4, "%s request %d output %d: %g, want %g", archs[a], k, o,
                                   r[k].v[o], want[o]);
        }
        pool_head_fini(&h);
        engine_destroy(e, 0);
        rf_destroy(rf);
        tok_destroy(tok);
        model_destroy(m);
        unlink(path);
    }
}

Test(pool_engine, bad_pooled_requests_are_refused)
{
    char path[512], err[256];
    model *m = tp_model("llama", "mean", NULL, 0, path, sizeof path);
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    engine *e = tp_engine(m, tok, (size_t)8 << 20, 16, 1);
    int32_t p[3] = {5, 6, 7};
    engine_request r;
    uint64_t id;
    for (int c = 0; c < 3; c++) {
        memset(&r, 0, sizeof r);
        r.prompt = p;
        r.n_prompt = 3;
        r.n = c == 0 ? 2 : 1;        /* n > 1 */
        r.max_tokens = c == 1 ? 4 : 0; /* generates */
        r.pooling = c == 2 ? 9 : MODEL_POOL_MEAN;
        smp_params_default(&r.sampling);
        cr_assert_eq(engine_submit(e, &r, &id), -EINVAL, "case %d", c);
    }
    engine_destroy(e, 0);
    tok_destroy(tok);
    model_destroy(m);
    unlink(path);
}
