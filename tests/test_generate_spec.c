/*
 * test_generate_spec.c — `kvserve generate --speculative ngram|draft` through the real binary
 * (KVSERVE_BIN): the request then runs through the engine, and its output must be the plain
 * loop's, byte for byte — greedy and seeded-sampled, as text and as --ids, under a JSON schema,
 * ending at an end-of-generation token or running past it with --ignore-eos — on stories260K
 * (the n-gram proposer, and stories260K as its own draft) and on a synthetic draft/target pair
 * made with `kvserve mkmodel --quiet-from`. The stats line's speculative counters must add up,
 * and bad speculative settings are refused with one line.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_util.h"

static const char *gs_bin(void)
{
    const char *b = getenv("KVSERVE_BIN");
    if (!b || access(b, X_OK)) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    return b;
}

/* One run of `kvserve generate ARGS`: its stdout, its whole stderr, the last stderr line parsed
 * (NULL when it is not JSON) and the exit status. */
typedef struct gs_out {
    char *out, *err;
    cJSON *stats;
    int status;
} gs_out;

static void gs_free(gs_out *r)
{
    free(r->out);
    free(r->err);
    cJSON_Delete(r->stats);
}

static gs_out gs_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static gs_out gs_run(const char *fmt, ...)
{
    char args[4096], cmd[8192], o[512], e[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *d = getenv("TMPDIR");
    snprintf(o, sizeof o, "%s/kvserve_gs_out_%d", d && *d ? d : "/tmp", (int)getpid());
    snprintf(e, sizeof e, "%s/kvserve_gs_err_%d", d && *d ? d : "/tmp", (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' generate %s >'%s' 2>'%s'", gs_bin(), args, o, e);
    int st = system(cmd);
    gs_out r = {tu_read_file(o, NULL), tu_read_file(e, NULL), NULL, WIFEXITED(st) ? WEXITSTATUS(st) : 128};
    unlink(o);
    unlink(e);
    cr_assert(r.out && r.err, "generate %s: no output files", args);
    size_t n = strlen(r.err);
    while (n && r.err[n - 1] == '\n') n--;
    size_t b = n;
    while (b && r.err[b - 1] != '\n') b--;
    char *last = strndup(r.err + b, n - b);
    r.stats = cJSON_Parse(last);
    free(last);
    return r;
}

static double gs_num(const gs_out *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(r->stats, key);
    cr_assert(cJSON_IsNumber(v), "no number %s in the stats line: %s", key, r->err);
    return v->valuedouble;
}

static const char *gs_str(const gs_out *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(r->stats, key);
    cr_assert(cJSON_IsString(v), "no string %s in the stats line: %s", key, r->err);
    return v->valuestring;
}

/* The stats line's counters agree with each other and name the method. */
static void gs_check_stats(const gs_out *r, const char *method)
{
    cr_assert_str_eq(gs_str(r, "speculative"), method, "%s", r->err);
    double drafts = gs_num(r, "spec_drafts"), tokens = gs_num(r, "spec_draft_tokens"),
           acc = gs_num(r, "spec_accepted_tokens");
    cr_assert(acc <= tokens && drafts <= tokens, "accepted %g, rows %g of %g draft tokens", acc, drafts, tokens);
    double want_rate = tokens > 0 ? acc / tokens : 0, want_per = drafts > 0 ? (drafts + acc) / drafts : 0;
    cr_assert(fabs(gs_num(r, "spec_acceptance") - want_rate) < 1e-5, "%s", r->err);
    cr_assert(fabs(gs_num(r, "spec_tokens_per_verify") - want_per) < 1e-3, "%s", r->err);
    for (const char *k = "prompt_tokens\0generated_tokens\0prefill_ms\0decode_ms\0decode_tokens_per_s\0"; *k;
         k += strlen(k) + 1)
        cr_assert(gs_num(r, k) >= 0, "%s", k);
}

/* Runs ARGS with --speculative off and with SPEC; both must succeed and print the same bytes.
 * Returns the speculative run's accepted tokens. */
static double gs_same(const char *args, const char *spec, const char *method)
{
    gs_out a = gs_run("%s --speculative off", args), b = gs_run("%s %s", args, spec);
    cr_assert_eq(a.status, 0, "generate %s: %s", args, a.err);
    cr_assert_eq(b.status, 0, "generate %s %s: %s", args, spec, b.err);
    cr_assert_str_eq(b.out, a.out, "generate %s %s printed\n[%s]\nwithout speculation\n[%s]", args, spec, b.out,
                     a.out);
    cr_assert(*a.out, "generate %s printed nothing", args);
    gs_check_stats(&a, "off");
    cr_assert_eq(gs_num(&a, "spec_drafts"), 0);
    gs_check_stats(&b, method);
    cr_assert_eq(gs_num(&b, "generated_tokens"), gs_num(&a, "generated_tokens"), "%s %s", args, spec);
    cr_assert_eq(gs_num(&b, "prompt_tokens"), gs_num(&a, "prompt_tokens"));
    double acc = gs_num(&b, "spec_accepted_tokens");
    gs_free(&a);
    gs_free(&b);
    return acc;
}

static void gs_stories(char *path, size_t n)
{
    snprintf(path, n, "%s/stories260K.gguf", tu_data_dir());
    cr_assert_eq(access(path, R_OK), 0, "%s is missing (it is part of the repository)", path);
}

/* A synthetic pair in dir: target.gguf (6 layers, 2.. quiet) and draft.gguf (its first 2). */
static void gs_pair(const char *dir)
{
    char cmd[2048];
    const char *common = "--dim 64 --heads 4 --vocab 320 --context 512 --seed 11";
    snprintf(cmd, sizeof cmd, "'%s' mkmodel -o '%s/target.gguf' %s --layers 6 --quiet-from 2 >/dev/null && "
             "'%s' mkmodel -o '%s/draft.gguf' %s --layers 2 >/dev/null",
             gs_bin(), dir, common, gs_bin(), dir, common);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(generate_spec, ngram_greedy_equals_plain)
{
    gs_bin();
    char m[512], args[4096];
    gs_stories(m, sizeof m);
    const char *runs[] = {
        "-p 'Once upon a time' -n 120 --temperature 0",
        "-n 64 --temperature 0 --threads 1 --kv-dtype f32",
        /* prefill in chunks of 3 with an odd block size */
        "-p 'Tom said, \"Hi!\"\nThen' -n 51 --temperature 0 --max-batch-tokens 3 --block-size 5",
        "-p 'The cat' -n 90 --temperature 0 --ids",
    };
    double accepted = 0;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(args, sizeof args, "-m '%s' %s", m, runs[i]);
        accepted += gs_same(args, "--speculative ngram", "ngram");
        accepted += gs_same(args, "--speculative ngram --num-speculative-tokens 1 --spec-ngram-min 1", "ngram");
        accepted += gs_same(args, "--speculative ngram --num-speculative-tokens 8", "ngram");
    }
    cr_assert_gt(accepted, 0, "stories260K's greedy text repeats itself: prompt lookup had guesses accepted");
}

Test(generate_spec, draft_greedy_equals_plain, .timeout = 120)
{
    gs_bin();
    char dir[256], m[512], args[4096], spec[1024];
    tu_mkdtemp("gspec", dir, sizeof dir);
    gs_pair(dir);
    snprintf(spec, sizeof spec, "--speculative draft --draft-model '%s/draft.gguf'", dir);
    /* as text: the synthetic vocabulary's byte tokens make split and invalid UTF-8, which the
     * streaming holds back and lets through the same way on both paths */
    snprintf(args, sizeof args, "-m '%s/target.gguf' -p 'hello world' -n 100 --temperature 0", dir);
    gs_same(args, spec, "draft");
    snprintf(args, sizeof args, "-m '%s/target.gguf' -p 'hello world' -n 100 --temperature 0.7 --seed 9", dir);
    gs_same(args, spec, "draft");
    snprintf(args, sizeof args, "-m '%s/target.gguf' -p 'hello world' -n 100 --temperature 0 --ids", dir);
    gs_same(args, spec, "draft");
    gs_out r = gs_run("%s %s", args, spec);
    cr_assert_gt(gs_num(&r, "spec_acceptance"), 0.5, "the quiet layers change little: the draft agrees: %s", r.err);
    cr_assert_gt(gs_num(&r, "spec_tokens_per_verify"), 1.5, "%s", r.err);
    gs_free(&r);
    /* --draft-model alone turns the draft on */
    snprintf(spec, sizeof spec, "--draft-model '%s/draft.gguf' --num-speculative-tokens 2", dir);
    r = gs_run("%s %s", args, spec);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(gs_str(&r, "speculative"), "draft");
    gs_free(&r);
    /* ... but an explicit --speculative off wins (the plain loop runs) */
    r = gs_run("%s %s --speculative off", args, spec);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(gs_str(&r, "speculative"), "off");
    gs_free(&r);

    /* a model is its own perfect draft: every greedy guess is accepted */
    gs_stories(m, sizeof m);
    snprintf(args, sizeof args, "-m '%s' -p 'Once upon a time' -n 100 --temperature 0", m);
    snprintf(spec, sizeof spec, "--speculative draft --draft-model '%s'", m);
    gs_same(args, spec, "draft");
    r = gs_run("%s %s", args, spec);
    cr_assert_gt(gs_num(&r, "spec_draft_tokens"), 50, "%s", r.err);
    cr_assert_eq(gs_num(&r, "spec_acceptance"), 1.0, "%s", r.err);
    gs_free(&r);
    tu_rm_rf(dir);
}

/* A seeded request draws each token with the key (seed, position) on both paths, so speculation
 * changes nothing of a sampled run either: with every filter, as text and ids, under a schema. */
Test(generate_spec, seeded_sampled_equals_plain, .timeout = 120)
{
    gs_bin();
    char m[512], args[4096], spec[1200];
    gs_stories(m, sizeof m);
    snprintf(spec, sizeof spec, "--speculative draft --draft-model '%s'", m);
    for (int seed = 1; seed <= 3; seed++) {
        snprintf(args, sizeof args,
                 "-m '%s' -p 'Once upon a time' -n 150 --temperature 0.9 --top-k 40 --top-p 0.95 --min-p 0.01 "
                 "--seed %d%s",
                 m, seed, seed == 2 ? " --ids" : "");
        gs_same(args, "--speculative ngram", "ngram");
        gs_same(args, spec, "draft");
    }
    /* the draft draws its guesses with the sequence's own sampler and key, so a model that is its
     * own draft has its sampled guesses accepted too (bar a low-bit difference on a near-tie) */
    snprintf(args, sizeof args, "-m '%s' -p 'Once upon a time' -n 150 --temperature 1.2 --seed 5 %s", m, spec);
    gs_out r = gs_run("%s", args);
    cr_assert_gt(gs_num(&r, "spec_draft_tokens"), 50, "%s", r.err);
    cr_assert_geq(gs_num(&r, "spec_acceptance"), 0.95, "%s", r.err);
    gs_free(&r);

    char dir[256], schema[300];
    tu_mkdtemp("gspec", dir, sizeof dir);
    snprintf(schema, sizeof schema, "%s/person.json", dir);
    FILE *f = fopen(schema, "w");
    cr_assert_not_null(f);
    fputs("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 10}, "
          "\"n\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 50}}, \"required\": [\"name\", \"n\"]}",
          f);
    fclose(f);
    for (int seed = 3; seed <= 4; seed++) {
        snprintf(args, sizeof args, "-m '%s' -p 'Once upon a time' -n 100 --json-schema '%s' --seed %d", m, schema,
                 seed);
        gs_same(args, "--speculative ngram", "ngram");
        gs_same(args, spec, "draft");
    }
    snprintf(args, sizeof args, "-m '%s' -p 'Once upon a time' -n 100 --json-schema '%s' --temperature 0", m, schema);
    gs_same(args, "--speculative ngram", "ngram");
    tu_rm_rf(dir);
}

/* The synthetic target draws its end-of-generation token now and then at a high temperature:
 * both paths stop before it (not printed, not counted), and --ignore-eos runs on through it. */
Test(generate_spec, end_of_generation, .timeout = 120)
{
    gs_bin();
    char dir[256], args[4096], spec[1024];
    tu_mkdtemp("gspec", dir, sizeof dir);
    gs_pair(dir);
    snprintf(spec, sizeof spec, "--speculative draft --draft-model '%s/draft.gguf'", dir);
    int stopped = 0;
    for (int seed = 1; seed <= 12 && stopped < 2; seed++) {
        snprintf(args, sizeof args, "-m '%s/target.gguf' -p 'hello world' -n 200 --temperature 1.5 --seed %d --ids",
                 dir, seed);
        gs_out r = gs_run("%s --speculative off", args);
        cr_assert_eq(r.status, 0, "%s", r.err);
        int n = (int)gs_num(&r, "generated_tokens");
        gs_free(&r);
        if (n >= 200) continue;
        stopped++;
        gs_same(args, spec, "draft");
        gs_same(args, "--speculative ngram", "ngram");
        char more[4200];
        snprintf(more, sizeof more, "%s --ignore-eos", args);
        gs_same(more, spec, "draft");
        r = gs_run("%s %s", more, spec);
        cr_assert_eq(gs_num(&r, "generated_tokens"), 200, "--ignore-eos: %s", r.err);
        gs_free(&r);
    }
    cr_assert_eq(stopped, 2, "two of twelve seeds end at an end-of-generation token before 200 tokens");
    tu_rm_rf(dir);
}

/* Bad settings are refused with one line; -n is capped to what the engine's context holds. */
Test(generate_spec, refusals_and_caps)
{
    gs_bin();
    char m[512], dir[256];
    gs_stories(m, sizeof m);
    gs_out r = gs_run("-m '%s' -n 4 --speculative sometimes", m);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--speculative") && strstr(r.err, "sometimes"), "%s", r.err);
    cr_assert(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "one line: %s", r.err);
    gs_free(&r);
    r = gs_run("-m '%s' -n 4 --speculative draft", m);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "--draft-model"), "the line says what is missing: %s", r.err);
    gs_free(&r);
    r = gs_run("-m '%s' -n 4 --speculative ngram --num-speculative-tokens 99", m);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "num-speculative-tokens"), "%s", r.err);
    gs_free(&r);
    tu_mkdtemp("gspec", dir, sizeof dir);
    gs_pair(dir);
    r = gs_run("-m '%s' -n 4 --speculative draft --draft-model '%s/draft.gguf'", m, dir);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "vocabulary"), "a draft with another vocabulary: %s", r.err);
    gs_free(&r);
    tu_rm_rf(dir);

    /* stories260K's context is 512: prompt + max_tokens must fit it, as the engine requires */
    r = gs_run("-m '%s' -p 'Once upon a time' -n 600 --temperature 0 --speculative ngram --ids", m);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "capped to 507"), "%s", r.err);
    cr_assert_eq(gs_num(&r, "generated_tokens"), 507, "%s", r.err);
    gs_free(&r);
}

/* serve, bench and generate build their engine configuration from the same options
 * (cli_engine_config): a bad value is refused by each with one line naming the flag and the
 * value, exit status 2, before anything is loaded. */
Test(generate_spec, engine_options_refused_by_name)
{
    gs_bin();
    char m[512], cmd[2048];
    gs_stories(m, sizeof m);
    const char *cmds[] = {"serve", "bench", "generate --speculative ngram"};
    const struct {
        const char *args, *flag, *val;
    } bad[] = {
        {"--kv-dtype f13", "--kv-dtype", "f13"},
        {"--speculative maybe", "--speculative", "maybe"},
        {"--block-size 0", "--block-size", NULL},
        {"--schedule random", "--schedule", "random"}, /* serve and bench only */
        {"--overlap sometimes", "--overlap", "sometimes"},
    };
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            if (c == 2 && i >= 3) continue; /* generate does not take --schedule, --overlap */
            const char *d = getenv("TMPDIR");
            char e[512];
            snprintf(e, sizeof e, "%s/kvserve_gs_refuse_%d", d && *d ? d : "/tmp", (int)getpid());
            snprintf(cmd, sizeof cmd, "'%s' %s -m '%s' %s >/dev/null 2>'%s'", gs_bin(), cmds[c], m, bad[i].args, e);
            int st = system(cmd);
            char *err = tu_read_file(e, NULL);
            unlink(e);
            cr_assert_not_null(err);
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s %s: status %d: %s", cmds[c], bad[i].args, st, err);
            cr_assert(strstr(err, bad[i].flag) && (!bad[i].val || strstr(err, bad[i].val)), "%s %s: %s", cmds[c],
                      bad[i].args, err);
            cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "%s %s: one line: %s", cmds[c], bad[i].args, err);
            free(err);
        }
}
