/*
 * test_golden.c — the real stories260K model must reproduce its recorded greedy outputs exactly.
 *
 * Through fwd directly (one sequence, default f16 KV, block size 16), at every SIMD level this
 * machine supports: every case of stories260K.golden.json, and the logits probe within its
 * tolerance. Through the CLI: `kvserve
 * generate` prints exactly the golden completion text. Skips (with a message) when the shared
 * model directory or the kvserve binary is absent.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/kv.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "model/model.h"
#include "tests/test_util.h"

#define TG_BLOCK 16

/* Loads the golden JSON and the model; skips the test when either is missing. */
static cJSON *tg_load(model **m)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K.golden.json", tu_data_dir());
    char *txt = tu_read_file(path, NULL);
    if (!txt)
        cr_assert_fail("%s is missing (it is part of the repository)", path);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    cr_assert_not_null(j, "golden JSON does not parse");
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    char err[512];
    int rc = model_load(path, m, err, sizeof err);
    cr_assert_eq(rc, 0, "model_load: %s", err);
    return j;
}

/* One sequence driven straight through fwd: block table 0..n_blocks-1, permuted so blocks are
 * not contiguous in the arena. */
typedef struct tg_seq {
    fwd *f;
    int32_t bt[64];
    int n_blocks;
    int len; /* tokens fed */
} tg_seq;

static void tg_seq_init(tg_seq *s, fwd *f, int n_blocks)
{
    s->f = f;
    s->n_blocks = n_blocks;
    s->len = 0;
    for (int i = 0; i < n_blocks; i++)
        s->bt[i] = (i * 7 + 3) % n_blocks; /* 7 is coprime to 32 */
}

/* Feeds n tokens; logits of the last n_logits of them into logits [n_logits][n_vocab]. */
static void tg_feed(tg_seq *s, const int32_t *toks, int n, int n_logits, float *logits)
{
    int32_t pos[512], slots[512], rows[512];
    cr_assert(n <= 512 && s->len + n <= s->n_blocks * TG_BLOCK);
    for (int i = 0; i < n; i++) {
        int p = s->len + i;
        pos[i] = p;
        slots[i] = s->bt[p / TG_BLOCK] * TG_BLOCK + p % TG_BLOCK;
    }
    for (int i = 0; i < n_logits; i++)
        rows[i] = n - n_logits + i;
    int32_t q_start[2] = {0, n}, ctx = s->len + n;
    be_batch b = {.n_tokens = n, .tokens = toks, .positions = pos, .n_seqs = 1, .q_start = q_start, .n_logits = n_logits, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = &ctx, .block_table = s->bt, .bt_stride = s->n_blocks}}};
    cr_assert_eq(fwd_run(s->f, &b, logits), 0);
    s->len += n;
}

static int tg_argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int tg_ids(const cJSON *arr, int32_t *out, int cap)
{
    int n = cJSON_GetArraySize(arr);
    cr_assert(n <= cap);
    for (int i = 0; i < n; i++)
        out[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return n;
}

static fwd *tg_fwd(const model *m, backend **be, int kv_dtype, int n_blocks, const tu_cpu_level *lv)
{
    *be = tu_cpu_backend(lv, 2);
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, TG_BLOCK, kv_dtype);
    char err[512];
    fwd *f = fwd_create(m, *be, &g, &n_blocks, 512, 8, err, sizeof err);
    cr_assert_not_null(f, "fwd_create: %s", err);
    return f;
}

Test(golden, greedy_cases)
{
    model *m;
    cJSON *j = tg_load(&m);
    backend *be;
    const int n_blocks = 512 / TG_BLOCK;
    int n_vocab = m->hp.n_vocab;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++) {
        fwd *f = tg_fwd(m, &be, KV_F16, n_blocks, &lv[li]);
        const cJSON *c;
        int n_cases = 0;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
        {
            const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
            int32_t ids[1024], want[1024];
            int n_prompt = tg_ids(cJSON_GetObjectItem(c, "prompt_token_ids"), ids, 1024);
            int n_want = tg_ids(cJSON_GetObjectItem(c, "generated_token_ids"), want, 1024);
            int max_new = cJSON_GetObjectItem(c, "max_new_tokens")->valueint;
            int stop_on_bos = cJSON_IsTrue(cJSON_GetObjectItem(c, "stop_on_bos"));
            cr_assert_eq(n_want, cJSON_GetObjectItem(c, "n_generated")->valueint);

            tg_seq s;
            tg_seq_init(&s, f, n_blocks);
            tg_feed(&s, ids, n_prompt, 1, logits);
            int n_gen = 0;
            while (n_gen < max_new) {
                int32_t t = tg_argmax(logits, n_vocab);
                if (stop_on_bos && t == 1) break;
                cr_assert(n_gen < n_want, "%s at %s: generated more than the %d golden tokens",
                          name, lv[li].name, n_want);
                cr_assert_eq(t, want[n_gen], "%s at %s: token %d is %d, golden %d", name,
                             lv[li].name, n_gen, t, want[n_gen]);
                ids[n_prompt + n_gen++] = t;
                if (n_gen == max_new) break;
                tg_feed(&s, &t, 1, 1, logits);
            }
            cr_assert_eq(n_gen, n_want, "%s: %d tokens generated, golden %d", name, n_gen, n_want);
            n_cases++;
        }
        cr_assert(n_cases >= 13, "only %d golden cases", n_cases);
        fwd_destroy(f);
        be_destroy(be);
    }
    free(logits);
    model_destroy(m);
    cJSON_Delete(j);
}

/* The probe's logits, one token per step and as one 8-token prefill, f32 and f16 KV. */
Test(golden, logits_probe)
{
    model *m;
    cJSON *j = tg_load(&m);
    const cJSON *probe = cJSON_GetObjectItem(j, "logits_probe");
    int32_t ids[8];
    int n = tg_ids(cJSON_GetObjectItem(probe, "input_token_ids"), ids, 8);
    double tol = cJSON_GetObjectItem(probe, "tolerance")->valuedouble;
    const cJSON *rows = cJSON_GetObjectItem(probe, "logits_by_position");
    int n_vocab = m->hp.n_vocab;
    float *logits = malloc((size_t)8 * n_vocab * sizeof *logits);
    int kvs[2] = {KV_F16, KV_F32};
    tu_cpu_level lv[TU_MAX_LEVELS];
    int n_lv = tu_cpu_levels(lv);
    for (int li = 0; li < n_lv; li++)
        for (int k = 0; k < 2; k++) {
            for (int mode = 0; mode < 2; mode++) {
                backend *be;
                fwd *f = tg_fwd(m, &be, kvs[k], 4, &lv[li]);
                tg_seq s;
                tg_seq_init(&s, f, 4);
                if (mode == 0)
                    for (int i = 0; i < n; i++)
                        tg_feed(&s, &ids[i], 1, 1, logits + (size_t)i * n_vocab);
                else
                    tg_feed(&s, ids, n, n, logits);
                double worst = 0.0;
                for (int p = 0; p < n; p++) {
                    const cJSON *row = cJSON_GetArrayItem(rows, p);
                    for (int v = 0; v < n_vocab; v++) {
                        double d = fabs(logits[(size_t)p * n_vocab + v] -
                                        cJSON_GetArrayItem(row, v)->valuedouble);
                        if (d > worst) worst = d;
                    }
                }
                /* The golden tolerance holds for f32 K/V; f16 K/V round each cached value by up to
                 * 2^-11 relative, which moves these logits by up to about 1e-2. */
                double lim = kvs[k] == KV_F32 ? tol : 20 * tol;
                printf("golden logits_probe %s kv %s %s: max |diff| %.3g\n", lv[li].name,
                       kv_dtype_name(kvs[k]), mode ? "prefill" : "step by step", worst);
                cr_assert(worst <= lim, "%s kv %s, %s: max |logit - golden| = %g > %g", lv[li].name,
                          kv_dtype_name(kvs[k]), mode ? "prefill" : "step by step", worst, lim);
                fwd_destroy(f);
                be_destroy(be);
            }
        }
    free(logits);
    model_destroy(m);
    cJSON_Delete(j);
}

/* Runs the kvserve binary; stdout into *out, last stderr line into *last_err. Exit status. */
static int tg_run_cli(const char *args, char **out, char **last_err)
{
    const char *bin = getenv("KVSERVE_BIN");
    char errpath[] = "/tmp/kvserve_golden_XXXXXX";
    int fd = mkstemp(errpath);
    cr_assert(fd >= 0);
    close(fd);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s generate %s 2>%s", bin, args, errpath);
    int st;
    *out = tu_capture(cmd, &st);
    char *e = tu_read_file(errpath, NULL);
    unlink(errpath);
    cr_assert_not_null(e);
    size_t el = strlen(e);
    while (el && e[el - 1] == '\n')
        e[--el] = 0;
    char *nl = strrchr(e, '\n');
    *last_err = strdup(nl ? nl + 1 : e);
    free(e);
    return st;
}

static const cJSON *tg_case(const cJSON *j, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(
        c, cJSON_GetObjectItem(j, "cases")) if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring,
                                                        name)) return c;
    cr_assert_fail("golden case %s missing", name);
    return NULL;
}

/* --cuda-graphs takes on or off; anything else is refused before a model is loaded, with a
 * one-line reason. */
Test(golden, cli_cuda_graphs_value)
{
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || access(bin, X_OK)) cr_skip_test("KVSERVE_BIN not set or not executable");
    char args[1024], *out, *last;
    snprintf(args, sizeof args, "-m %s/stories260K.gguf -n 1 --cuda-graphs maybe", tu_data_dir());
    int st = tg_run_cli(args, &out, &last);
    cr_assert_neq(st, 0, "an unknown --cuda-graphs value is refused");
    cr_assert(strstr(last, "--cuda-graphs") && strstr(last, "maybe"), "the reason names the flag: %s", last);
    free(out);
    free(last);
}

Test(golden, cli_generate)
{
    const char *bin = getenv("KVSERVE_BIN");
    if (!bin || access(bin, X_OK)) cr_skip_test("KVSERVE_BIN not set or not executable");
    model *m;
    cJSON *j = tg_load(&m);
    model_destroy(m);
    char args[2048];
    struct {
        const char *flags, *name, *field;
    } runs[] = {
        {"-p \"Once upon a time\" -n 60 --temperature 0", "once_upon_a_time_n64",
         "completion_text"},
        {"-n 64 --temperature 0 --threads 1 --kv-dtype f32 --cuda-graphs off", "empty_n64",
         "completion_text_stripped"},
        /* prefill in chunks of 3 with an odd block size */
        {"-p \"Tom said, \\\"Hi!\\\"\nThen\" -n 51 --temperature 0 --max-batch-tokens 3 "
         "--block-size 5",
         "quote_newline_n64", "completion_text"},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        snprintf(args, sizeof args, "-m %s/stories260K.gguf %s", tu_data_dir(), runs[r].flags);
        char *out, *last;
        int st = tg_run_cli(args, &out, &last);
        cr_assert_eq(st, 0, "kvserve generate %s exited with %d", args, st);
        const char *want =
            cJSON_GetObjectItem(tg_case(j, runs[r].name), runs[r].field)->valuestring;
        cr_assert_str_eq(out, want, "generate %s printed\n[%s]\nwanted\n[%s]", runs[r].flags, out,
                         want);
        cJSON *stats = cJSON_Parse(last);
        cr_assert_not_null(stats, "last stderr line is not JSON: %s", last);
        const char *keys[] = {"prompt_tokens", "generated_tokens", "prefill_tokens_per_s",
                              "decode_tokens_per_s"};
        for (int k = 0; k < 4; k++)
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(stats, keys[k])), "missing %s in %s",
                      keys[k], last);
        int n_new = cJSON_GetObjectItem(tg_case(j, runs[r].name), "max_new_tokens")->valueint;
        cr_assert_eq(cJSON_GetObjectItem(stats, "generated_tokens")->valueint, n_new);
        cJSON_Delete(stats);
        free(out);
        free(last);
    }
    /* --ids prints the same tokens as the golden ids */
    snprintf(args, sizeof args,
             "-m %s/stories260K.gguf -p \"The cat\" -n 61 --temperature 0 --ids",
             tu_data_dir());
    char *out, *last;
    cr_assert_eq(tg_run_cli(args, &out, &last), 0);
    const cJSON *ids = cJSON_GetObjectItem(tg_case(j, "the_cat_n64"), "generated_token_ids");
    char want[4096];
    size_t w = 0;
    for (int i = 0; i < cJSON_GetArraySize(ids); i++)
        w += (size_t)snprintf(want + w, sizeof want - w, i ? " %d" : "%d",
                              cJSON_GetArrayItem(ids, i)->valueint);
    snprintf(want + w, sizeof want - w, "\n");
    cr_assert_str_eq(out, want);
    free(out);
    free(last);
    cJSON_Delete(j);
}
