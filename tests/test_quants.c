/*
 * test_quants.c — llama.cpp's quantised reference set (models/quants under the shared folder),
 * end to end: every qref-*.gguf there, whatever its types, must
 *   - dequantise the rows its *.dequant.json records to the same float32 values (gguf-py's
 *     dequantisation: equal up to float32 rounding, see qt_close), and
 *   - score, teacher-forced through the engine (prompt = llama.cpp's prompt + its generated ids,
 *     echo + logprobs with max_tokens 0), each generated token within mean |Δ| ≤ 0.03 and
 *     max |Δ| ≤ 0.15 of the log-probability llama.cpp's server gave it (*.llamacpp.json).
 * The files are found by listing the folder, so any file added there is checked too. Skips when
 * the folder is absent.
 */
#include <dirent.h>
#include <math.h>
#include <unistd.h>

#include "model/dtype.h"
#include "tests/engine_harness.h"

#define QT_MAX_FILES 64

/* The .gguf files of the reference folder that have the given companion (".dequant.json" or
 * ".llamacpp.json"), sorted; their stems (path without ".gguf") in stems[i]. Skips the test when
 * the folder is absent or holds none. */
static int qt_list(const char *companion, char stems[][1024])
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/models/quants", tu_shared_dir());
    DIR *d = opendir(dir);
    if (!d) cr_skip_test("%s not found (set KVSERVE_SHARED)", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < QT_MAX_FILES) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".gguf")) continue;
        char comp[2048];
        snprintf(stems[n], 1024, "%s/%.*s", dir, (int)(len - 5), e->d_name);
        snprintf(comp, sizeof comp, "%s%s", stems[n], companion);
        if (access(comp, R_OK) == 0) n++;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort: a stable order for messages */
        for (int j = i; j > 0 && strcmp(stems[j - 1], stems[j]) > 0; j--) {
            char tmp[1024];
            memcpy(tmp, stems[j], sizeof tmp);
            memcpy(stems[j], stems[j - 1], sizeof tmp);
            memcpy(stems[j - 1], tmp, sizeof tmp);
        }
    if (!n) cr_skip_test("no reference files with %s in %s", companion, dir);
    return n;
}

static cJSON *qt_json(const char *stem, const char *suffix)
{
    char path[2048];
    snprintf(path, sizeof path, "%s%s", stem, suffix);
    char *txt = tu_read_file(path, NULL);
    cr_assert_not_null(txt, "cannot read %s", path);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    cr_assert_not_null(j, "%s does not parse", path);
    return j;
}

/* The references hold 9 significant digits, which pin a float32 down exactly (so (float)want is
 * gguf-py's value). Ours is formed in the order GGML's C code forms it; gguf-py's numpy may
 * associate a product differently (d × (sc × q) instead of (d × sc) × q), which moves the result
 * by at most one rounding: half an ulp of the largest magnitude the block reaches, ≤ 2^-24 of it.
 * (Every file of the set agrees bit for bit today.) */
static int qt_close(float got, double want, double block_max)
{
    return fabs((double)got - (double)(float)want) <= block_max * 0x1p-24;
}

Test(quants, dequant_rows_match_gguf_py, .timeout = 120)
{
    static char stems[QT_MAX_FILES][1024];
    int n_files = qt_list(".dequant.json", stems);
    for (int fi = 0; fi < n_files; fi++) {
        char path[2048], err[512];
        snprintf(path, sizeof path, "%.1000s.gguf", stems[fi]);
        gguf_file *f;
        cr_assert_eq(gguf_open(path, &f, err, sizeof err), 0, "%s", err);
        cJSON *j = qt_json(stems[fi], ".dequant.json"), *t;
        int n_rows = 0;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(j, "tensors"))
        {
            const gguf_tensor *g = gguf_find_tensor(f, t->string);
            cr_assert_not_null(g, "%s: tensor %s missing", path, t->string);
            const char *type = cJSON_GetObjectItem(t, "type")->valuestring;
            cr_assert_str_eq(dt_name(g->type), type, "%s: %s", path, t->string);
            cr_assert(dt_is_supported(g->type), "%s: %s has unsupported type %s", path, t->string, type);
            size_t rb = dt_row_bytes(g->type, g->ne[0]);
            float *row = malloc((size_t)g->ne[0] * sizeof *row);
            cJSON *r;
            cJSON_ArrayForEach(r, cJSON_GetObjectItem(t, "rows"))
            {
                long idx = atol(r->string);
                cr_assert_eq(cJSON_GetArraySize(r), g->ne[0], "%s: %s row %ld", path, t->string, idx);
                dt_to_f32(g->type, (const uint8_t *)g->data + (size_t)idx * rb, row, g->ne[0]);
                int be = dt_block_elems(g->type);
                for (int64_t b0 = 0; b0 < g->ne[0]; b0 += be) {
                    double bmax = 0;
                    for (int64_t i = b0; i < b0 + be; i++)
                        bmax = fmax(bmax, fabs(cJSON_GetArrayItem(r, (int)i)->valuedouble));
                    for (int64_t i = b0; i < b0 + be; i++) {
                        double want = cJSON_GetArrayItem(r, (int)i)->valuedouble;
                        cr_assert(qt_close(row[i], want, bmax), "%s: %s (%s) row %ld [%ld]: %.9g, gguf-py %.9g",
                                  path, t->string, type, idx, (long)i, (double)row[i], want);
                    }
                }
                n_rows++;
            }
            free(row);
        }
        cr_assert_gt(n_rows, 0, "%s: no rows", path);
        cJSON_Delete(j);
        gguf_close(f);
    }
}

/* Scores prompt (n tokens) teacher-forced: logprobs[i] = log p(prompt[i] | prompt[0..i)). */
static void qt_score(engine *e, const int32_t *prompt, int n, float *logprobs)
{
    engine_request r;
    memset(&r, 0, sizeof r);
    r.prompt = malloc((size_t)n * sizeof *r.prompt);
    memcpy(r.prompt, prompt, (size_t)n * sizeof *r.prompt);
    r.n_prompt = n;
    r.n = 1;
    r.max_tokens = 0;
    r.prompt_logprobs = 1;
    smp_params_default(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.n_logprobs = 1;
    uint64_t id;
    cr_assert_eq(engine_submit(e, &r, &id), 0);
    int got = 0, done = 0;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60;
    while (!done) {
        engine_event *ev[16];
        int k = engine_poll(e, ev, 16);
        for (int i = 0; i < k; i++) {
            cr_assert_eq(ev[i]->id, id);
            if (ev[i]->is_prompt) {
                cr_assert_not_null(ev[i]->logprobs);
                for (int t = 0; t < ev[i]->n_tokens; t++, got++) {
                    cr_assert_lt(got, n);
                    cr_assert_eq(ev[i]->tokens[t], prompt[got]);
                    logprobs[got] = ev[i]->logprobs[t].logprob;
                }
            }
            if (ev[i]->finish) done = 1;
            engine_event_free(ev[i]);
        }
        if (k || done) continue;
        pthread_mutex_lock(&te_w.mu);
        int rc = 0;
        while (!te_w.n && rc == 0) rc = pthread_cond_timedwait(&te_w.cv, &te_w.mu, &dl);
        te_w.n = 0;
        pthread_mutex_unlock(&te_w.mu);
        cr_assert_eq(rc, 0, "timed out waiting for the scored prompt");
    }
    cr_assert_eq(got, n, "%d of %d prompt tokens scored", got, n);
}

/* Mean and max |Δ| of one file's generated-token logprobs against llama.cpp's. */
static void qt_teacher_forced(const char *stem, double *mean, double *max)
{
    char path[2048], err[512];
    snprintf(path, sizeof path, "%s.gguf", stem);
    cr_assert_eq(model_load(path, &te_model, err, sizeof err), 0, "%s", err);
    te_tok = tok_create(te_model->gguf, err, sizeof err);
    cr_assert_not_null(te_tok, "%s", err);
    engine *e = te_engine((size_t)8 << 20, 0, 4, 256);
    cJSON *j = qt_json(stem, ".llamacpp.json"), *res;
    double sum = 0, mx = 0;
    int n_steps = 0;
    cJSON_ArrayForEach(res, cJSON_GetObjectItem(j, "results"))
    {
        int32_t toks[512];
        float lp[512];
        int n = 0, n_prompt;
        cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(res, "prompt_tokens")) toks[n++] = x->valueint;
        n_prompt = n;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(res, "generated_tokens")) toks[n++] = x->valueint;
        cr_assert(n <= 512 && n > n_prompt);
        qt_score(e, toks, n, lp);
        int i = 0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(res, "steps"))
        {
            cr_assert_eq(cJSON_GetObjectItem(x, "id")->valueint, toks[n_prompt + i]);
            double d = fabs(lp[n_prompt + i] - cJSON_GetObjectItem(x, "logprob")->valuedouble);
            cr_assert(isfinite(d), "%s: step %d", path, i);
            sum += d;
            mx = fmax(mx, d);
            n_steps++;
            i++;
        }
    }
    cr_assert_gt(n_steps, 0, "%s: no steps", path);
    cJSON_Delete(j);
    engine_destroy(e, 0);
    te_teardown();
    *mean = sum / n_steps;
    *max = mx;
}

/* An int8 KV cache (one f16 scale per token and kv head) on the F32 reference file: within mean
 * 0.05 / max 0.3 of llama.cpp's logprobs, the bound for a quantised cache. */
Test(quants, int8_kv_teacher_forced_within_bounds, .timeout = 240)
{
    static char stems[QT_MAX_FILES][1024];
    int n_files = qt_list(".llamacpp.json", stems), found = 0;
    for (int fi = 0; fi < n_files; fi++) {
        const char *base = strrchr(stems[fi], '/') + 1;
        if (strcmp(base, "qref-f32")) continue;
        double mean, max;
        te_kv_dtype = KV_I8;
        qt_teacher_forced(stems[fi], &mean, &max);
        te_kv_dtype = KV_F16;
        printf("quants %s kv int8: |d logprob| mean %.4f max %.4f\n", base, mean, max);
        cr_assert(mean <= 0.05 && max <= 0.3, "%s kv int8: |d logprob| mean %.4f (<= 0.05), max %.4f (<= 0.3)", base,
                  mean, max);
        found = 1;
    }
    if (!found) cr_skip_test("qref-f32 is not in the quantised reference set");
}

Test(quants, teacher_forced_logprobs_match_llama_cpp, .timeout = 240)
{
    static char stems[QT_MAX_FILES][1024];
    int n_files = qt_list(".llamacpp.json", stems);
    for (int fi = 0; fi < n_files; fi++) {
        double mean, max;
        qt_teacher_forced(stems[fi], &mean, &max);
        const char *base = strrchr(stems[fi], '/') + 1;
        cr_log_info("%s: |Δ logprob| mean %.4f max %.4f", base, mean, max);
        cr_assert(mean <= 0.03 && max <= 0.15, "%s: |Δ logprob| mean %.4f (≤ 0.03), max %.4f (≤ 0.15)",
                  base, mean, max);
    }
}
