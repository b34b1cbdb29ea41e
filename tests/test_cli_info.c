/*
 * test_cli_info.c — `kvserve info` and `kvserve mkmodel` through the real binary (KVSERVE_BIN):
 * the KV formula numbers, JSON output, vocabulary-only files, and a truncated file refused with
 * exactly one line on stderr; int8 KV and the capacity at one window (--kv-window).
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include "tests/test_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *ci_bin(void)
{
    const char *b = getenv("KVSERVE_BIN");
    if (!b || access(b, X_OK)) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    return b;
}

/* A captured output file's text, or "" when the file is absent (malloc'd either way). */
static char *ci_read(const char *path)
{
    char *s = tu_read_file(path, NULL);
    return s ? s : calloc(1, 1);
}

/* Runs `kvserve ARGS`, capturing stdout and stderr (malloc'd); returns the exit status. */
static int ci_run(const char *args, char **out, char **err)
{
    const char *d = getenv("TMPDIR");
    char o[512], e[512], cmd[4096];
    snprintf(o, sizeof o, "%s/kvserve_ci_out_%d", d && *d ? d : "/tmp", (int)getpid());
    snprintf(e, sizeof e, "%s/kvserve_ci_err_%d", d && *d ? d : "/tmp", (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", ci_bin(), args, o, e);
    int st = system(cmd);
    *out = ci_read(o);
    *err = ci_read(e);
    unlink(o);
    unlink(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int ci_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

Test(cli_info, stories260k_kv_formula)
{
    char path[4096], args[4300];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    ci_bin();
    cr_assert_eq(access(path, R_OK), 0, "%s is missing (it is part of the repository)", path);
    char *out, *err;
    snprintf(args, sizeof args, "info -m '%s'", path);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "2 × 5 × 4 × 8 × 4 = 1280"), "%s", out);
    cr_assert(strstr(out, "(f16):  2 × 5 × 4 × 8 × 2 = 640"), "%s", out);
    cr_assert(strstr(out, "n_kv_heads 4, head_dim 8"), "%s", out);
    cr_assert(strstr(out, "F32: 48"), "%s", out);
    free(out);
    free(err);

    snprintf(args, sizeof args, "info --json -m '%s'", path);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cJSON *j = cJSON_Parse(out);
    cr_assert(j, "not JSON: %s", out);
    cJSON *kv = cJSON_GetObjectItem(j, "kv_bytes_per_token");
    cr_assert_eq(cJSON_GetObjectItem(kv, "f32")->valuedouble, 1280.0);
    cr_assert_eq(cJSON_GetObjectItem(kv, "f16")->valuedouble, 640.0);
    cr_assert_eq(cJSON_GetObjectItem(kv, "bf16")->valuedouble, 640.0);
    cr_assert_eq(cJSON_GetObjectItem(j, "data_offset")->valuedouble, 14240.0);
    cJSON_Delete(j);
    free(out);
    free(err);
}

/* The second tier's capacity: 1 MiB of host RAM holds 1048576 / (16 × 640) = 102 f16 blocks;
 * 2 MiB of disk 2097152 / (10240 + 160) = 201 block files. */
Test(cli_info, tier_capacity_in_tokens)
{
    char path[4096], args[4400];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    ci_bin();
    char *out, *err;
    snprintf(args, sizeof args, "info -m '%s' --kv-host-memory 1MiB --kv-disk-size 2MiB", path);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "tier capacity (f16):  host 102 blocks = 1632 tokens; disk 201 files = 3216 tokens"), "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "info --json -m '%s' --kv-host-memory 1MiB --kv-disk-size 2MiB --block-size 32", path);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cJSON *j = cJSON_Parse(out);
    cr_assert(j, "not JSON: %s", out);
    cJSON *f32 = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "kv_tier_capacity"), "f32");
    cr_assert_not_null(f32);
    /* f32 blocks of 32 tokens: 40960 bytes; files of 40960 + 88 + 4 × 32 + 8 = 41184 bytes */
    cr_assert_eq(cJSON_GetObjectItem(f32, "file_bytes")->valuedouble, 41184.0);
    cr_assert_eq(cJSON_GetObjectItem(f32, "host_tokens")->valuedouble, 25.0 * 32);
    cr_assert_eq(cJSON_GetObjectItem(f32, "disk_tokens")->valuedouble, 50.0 * 32);
    cJSON_Delete(j);
    free(out);
    free(err);
}

/* int8 KV with its scales, and capacity at one window: 256 KiB in blocks of 4 holds
 * 262144 / (4 × 400) = 163 int8 blocks (652 tokens), 32 blocks a window of 128: 5 sequences; f16
 * 262144 / (4 × 640) = 102 blocks, 3 sequences. At the full context of 512 (128 blocks) int8 holds one. */
Test(cli_info, int8_and_window_capacity)
{
    char path[4096], args[4400];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    ci_bin();
    char *out, *err;
    snprintf(args, sizeof args, "info -m '%s' --kv-window 128 --kv-memory 256KiB --block-size 4", path);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "(int8): 2 × 5 × 4 × (8 × 1 + 2) = 400; 652 tokens, 5 sequences at a window of 128 (4 sinks)"),
              "%s", out);
    cr_assert(strstr(out, "(f16):  2 × 5 × 4 × 8 × 2 = 640; 408 tokens, 3 sequences at a window of 128"), "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "info --json -m '%s' --kv-window 128 --kv-memory 256KiB --block-size 4", path);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cJSON *j = cJSON_Parse(out);
    cr_assert(j, "not JSON: %s", out);
    cJSON *i8 = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "kv_capacity"), "int8");
    cr_assert_not_null(i8);
    cr_assert_eq(cJSON_GetObjectItem(i8, "tokens")->valuedouble, 652.0);
    cr_assert_eq(cJSON_GetObjectItem(i8, "sequences_at_window")->valuedouble, 5.0);
    cr_assert_eq(cJSON_GetObjectItem(i8, "sequences_at_context")->valuedouble, 1.0); /* 163 / 128 */
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "kv_bytes_per_token"), "int8")->valuedouble, 400.0);
    cJSON_Delete(j);
    free(out);
    free(err);
    snprintf(args, sizeof args, "info -m '%s' --kv-window 1000", path); /* past the context of 512 */
    cr_assert_eq(ci_run(args, &out, &err), 1);
    cr_assert_eq(ci_lines(err), 1, "%s", err);
    cr_assert(strstr(err, "--kv-window 1000"), "%s", err);
    free(out);
    free(err);
}

Test(cli_info, truncated_file_one_line_error)
{
    char path[4096], tmp[512], args[1024];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    ci_bin();
    cr_assert_eq(access(path, R_OK), 0, "%s is missing (it is part of the repository)", path);
    char *whole = NULL;
    FILE *fp = fopen(path, "rb");
    cr_assert(fp);
    whole = malloc(1185440);
    size_t n = fread(whole, 1, 1185440, fp);
    fclose(fp);
    const char *d = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/kvserve_ci_trunc_%d.gguf", d && *d ? d : "/tmp", (int)getpid());
    size_t cuts[] = {3, 100, 9000, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        fp = fopen(tmp, "wb");
        cr_assert(fp && fwrite(whole, 1, cuts[i], fp) == cuts[i]);
        fclose(fp);
        char *out, *err;
        snprintf(args, sizeof args, "info -m '%s'", tmp);
        cr_assert_neq(ci_run(args, &out, &err), 0, "truncated at %zu accepted", cuts[i]);
        cr_assert_eq(ci_lines(err), 1, "stderr must be one line: %s", err);
        cr_assert(strstr(err, tmp), "names the file: %s", err);
        cr_assert_str_empty(out);
        free(out);
        free(err);
    }
    unlink(tmp);
    free(whole);
}

Test(cli_info, mkmodel_then_info)
{
    ci_bin();
    const char *d = getenv("TMPDIR");
    char tmp[512], args[1024];
    snprintf(tmp, sizeof tmp, "%s/kvserve_ci_mk_%d.gguf", d && *d ? d : "/tmp", (int)getpid());
    char *out, *err;
    snprintf(args, sizeof args, "mkmodel -o '%s' --dim 128 --layers 3 --heads 8 --kv-heads 2 "
             "--ffn 256 --vocab 600 --context 4096 --type q8_0 --arch qwen2 --seed 5", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "info -m '%s'", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    /* 2 × 3 layers × 2 kv heads × 16 head_dim × 4 bytes = 768 */
    cr_assert(strstr(out, "2 × 3 × 2 × 16 × 4 = 768"), "%s", out);
    cr_assert(strstr(out, "architecture:   qwen2"), "%s", out);
    cr_assert(strstr(out, "Q8_0: 23"), "%s", out);
    cr_assert(strstr(out, "NEOX"), "%s", out);
    free(out);
    free(err);
    unlink(tmp);
    /* Bad parameters are one line on stderr and a failure. */
    snprintf(args, sizeof args, "mkmodel -o '%s' --dim 100 --heads 3", tmp);
    cr_assert_neq(ci_run(args, &out, &err), 0);
    cr_assert_eq(ci_lines(err), 1, "%s", err);
    cr_assert_neq(access(tmp, F_OK), 0, "no file is left behind");
    free(out);
    free(err);
}

/* A mixture of experts and a latent-attention model made by mkmodel: the experts line with the
 * active parameters, the MLA latent line with what plain MHA would keep, and the JSON. */
Test(cli_info, moe_and_mla_lines)
{
    ci_bin();
    const char *d = getenv("TMPDIR");
    char tmp[512], args[1024];
    snprintf(tmp, sizeof tmp, "%s/kvserve_ci_moe_%d.gguf", d && *d ? d : "/tmp", (int)getpid());
    char *out, *err;
    snprintf(args, sizeof args, "mkmodel -o '%s' --arch qwen3moe --dim 64 --layers 2 --heads 4 --experts 16 "
             "--experts-used 4 --ffn 32", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    free(out), free(err);
    snprintf(args, sizeof args, "info -m '%s'", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    /* active: everything but the embedding, 4 of the 16 experts (each 3 × 64 × 32 weights) */
    cr_assert(strstr(out, "experts:        16 routed experts of width 32, 4 used per token"), "%s", out);
    size_t all = 0, active = 0;
    const char *at = strstr(out, "active parameters per token ");
    cr_assert(at && sscanf(at, "active parameters per token %zu of %zu", &active, &all) == 2, "%s", out);
    cr_assert_eq(all - active, 512u * 64 + 2u * 12 * 3 * 64 * 32, "%zu of %zu", active, all);
    free(out), free(err);
    snprintf(args, sizeof args, "mkmodel -o '%s' --arch deepseek2 --dim 64 --layers 3 --heads 4 --head-dim 16 "
             "--ffn 32 --experts 4", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    free(out), free(err);
    snprintf(args, sizeof args, "info -m '%s'", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    /* latent 4 × 16 = 64, RoPE 8: 72 values per token and layer; MHA: 4 × (16 + 8 + 16) = 160 */
    cr_assert(strstr(out, "MLA latent:     64 latent + 8 RoPE key = 72 values per token and layer, 432 bytes/token at f16"),
              "%s", out);
    cr_assert(strstr(out, "4 heads × (16 + 8 key + 16 value) = 160 values, 960 bytes/token"), "%s", out);
    cr_assert(strstr(out, "KV bytes per token (f16):  3 × 72 × 2 = 432"), "%s", out);
    free(out), free(err);
    snprintf(args, sizeof args, "info -m '%s' --json", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cJSON *j = cJSON_Parse(strrchr(out, '{') ? out : "{}");
    cr_assert_not_null(j);
    cr_assert_eq(cJSON_GetObjectItem(j, "kv_values_per_token_layer")->valueint, 72);
    cr_assert_eq(cJSON_GetObjectItem(j, "mha_kv_values_per_token_layer")->valueint, 160);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "hparams"), "mla")));
    cJSON_Delete(j);
    free(out), free(err);
    /* the latent's sizes from the command line: rank 128, a query LoRA of 96, value heads of 32 */
    snprintf(args, sizeof args, "mkmodel -o '%s' --arch deepseek2 --dim 64 --layers 3 --heads 4 --head-dim 16 "
             "--ffn 32 --experts 4 --kv-lora 128 --q-lora 96 --v-head 32 --shared-experts 2 --dense-lead 2", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    free(out), free(err);
    snprintf(args, sizeof args, "info -m '%s'", tmp);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "MLA latent:     128 latent + 8 RoPE key = 136 values per token and layer"), "%s", out);
    cr_assert(strstr(out, "(q_lora 96, qk_nope 16, v_head 32)"), "%s", out);
    cr_assert(strstr(out, "2 shared"), "%s", out);
    cr_assert(strstr(out, "the first 2 layers dense"), "%s", out);
    free(out), free(err);
    unlink(tmp);
}

Test(cli_info, vocab_only_file)
{
    char path[4096], args[4300];
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-gpt-2.gguf", tu_shared_dir());
    ci_bin();
    if (access(path, R_OK)) cr_skip_test("vocab files not found under KVSERVE_SHARED");
    char *out, *err;
    snprintf(args, sizeof args, "info -m '%s'", path);
    cr_assert_eq(ci_run(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "gpt2, 50257 tokens"), "%s", out);
    free(out);
    free(err);
}

/* `kvserve --version` (there was none): the release, the commit the binary was built from (the
 * checkout's HEAD when the tests run in one), and the backends built in. */
Test(cli_info, version)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "'%s' --version 2>&1", ci_bin());
    int st;
    char *out = tu_capture(cmd, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", out);
    cr_assert(!strncmp(out, "kvserve 0.", 10), "%s", out);
    cr_assert(strstr(out, "(commit "), "%s", out);
    cr_assert(strstr(out, "backends: cpu ("), "%s", out);
#ifdef KVSERVE_CUDA
    cr_assert(strstr(out, "cuda"), "a CUDA build names its backend: %s", out);
#endif
    int st2;
    char *head = tu_capture("git rev-parse --short=12 HEAD 2>/dev/null", &st2);
    if (WIFEXITED(st2) && WEXITSTATUS(st2) == 0 && strlen(head) >= 12) {
        head[12] = 0;
        cr_assert(strstr(out, head), "not the checkout's commit %s: %s", head, out);
    }
    free(head);
    free(out);
}

/* The commit of a build from a release tarball (`git archive`, no .git): the one git wrote into
 * .git_archival.txt, not "unknown", and never the commit of a repository the tarball was unpacked
 * inside (git asked from there answers for that repository). Runs the Makefile's print-version in
 * such a tree: this checkout's Makefile and VERSION, HEAD's archived .git_archival.txt, all inside
 * a repository of its own. */
Test(cli_info, version_in_a_release_tarball, .timeout = 60)
{
    if (access(".git", F_OK) || access("Makefile", R_OK)) cr_skip_test("not run from a git checkout's root");
    if (system("command -v git >/dev/null 2>&1 && command -v make >/dev/null 2>&1 && command -v tar >/dev/null 2>&1"))
        cr_skip_test("git, make or tar is not installed");
    char dir[] = "/tmp/kvserve-version-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[4096], cwd[1024];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd,
             "set -e; cd %s; git init -q outer; git -C outer -c user.name=t -c user.email=t@t commit -q --allow-empty -m outer;"
             " mkdir outer/src; cp '%s/Makefile' '%s/VERSION' outer/src/;"
             " git -C '%s' archive --worktree-attributes HEAD .git_archival.txt | tar -x -C outer/src",
             dir, cwd, cwd, cwd);
    int st;
    char *out = tu_capture(cmd, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "setting up the tarball tree: %s", out);
    free(out);
    char *head = tu_capture("git rev-parse HEAD", &st);
    char *outer = NULL, *version = tu_capture("cat VERSION", &st);
    snprintf(cmd, sizeof cmd, "git -C %s/outer rev-parse HEAD", dir);
    outer = tu_capture(cmd, &st);
    head[12] = outer[12] = 0;
    version[strcspn(version, "\n")] = 0;
    /* env -u: run from a parallel make, the inherited jobserver flags make make warn into the output */
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C %s/outer/src print-version 2>&1", dir);
    out = tu_capture(cmd, &st);
    char want[256];
    snprintf(want, sizeof want, "%s %s\n", version, head);
    cr_assert_str_eq(out, want, "a tarball of %s inside repository %s says: %s", head, outer, out);
    free(out);
    /* a tree copied without `git archive` (the placeholder unexpanded): unknown */
    snprintf(cmd, sizeof cmd, "cp .git_archival.txt %s/outer/src/ && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C %s/outer/src print-version 2>&1", dir, dir);
    out = tu_capture(cmd, &st);
    snprintf(want, sizeof want, "%s unknown\n", version);
    cr_assert_str_eq(out, want, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    free(head);
    free(outer);
    free(version);
}
