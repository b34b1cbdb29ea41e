/*
 * test_chat.c — the model's own chat template (model/chat.c): every reference case of the
 * shared chat-templates folder rendered byte for byte (or failing where Python's Jinja2 fails)
 * through render-chat's entry point, a sample of them through the kvserve binary itself, and the
 * chat_tmpl of a GGUF: its tokenizer.chat_template with the vocabulary's BOS / EOS, the
 * tool_use variant when tools are passed, --chat-template as a name, @FILE and text, a
 * request's own template and kwargs, and the built-in fallback.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/mkmodel.h"
#include "model/chat.h"
#include "tests/test_util.h"

/* The render-chat input of case `cs` of a reference file (template text, the case's messages,
 * tools and add_generation_prompt, the file's bos / eos / date), as JSON that keeps the
 * numbers' int / float form. malloc'd. */
static char *tc_case_input(jinja_ctx *c, jinja_value file, jinja_value cs, const char *tmpl)
{
    jinja_value in, t;
    cr_assert_eq(jinja_dict(c, &in), 0);
    cr_assert_eq(jinja_str(c, tmpl, strlen(tmpl), &t), 0);
    jinja_dict_set(c, in, "template", t);
    static const char *const from_case[] = {"messages", "tools", "add_generation_prompt"};
    static const char *const from_file[] = {"bos_token", "eos_token", "date"};
    for (int i = 0; i < 3; i++) {
        jinja_value v = jinja_dict_get(cs, from_case[i]);
        if (v.kind != JINJA_UNDEFINED) jinja_dict_set(c, in, from_case[i], v);
        v = jinja_dict_get(file, from_file[i]);
        if (v.kind != JINJA_UNDEFINED) jinja_dict_set(c, in, from_file[i], v);
    }
    char *json = jinja_json_dump(in, 0);
    cr_assert_not_null(json);
    return json;
}

typedef struct tc_ref {
    char dir[1024];
    char **names; /* NAME of each NAME.json, sorted */
    int n;
} tc_ref;

static int tc_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The reference folder's file names; skips the test when it is absent. */
static void tc_ref_open(tc_ref *r)
{
    snprintf(r->dir, sizeof r->dir, "%s/chat-templates", tu_shared_dir());
    DIR *d = opendir(r->dir);
    if (!d) cr_skip_test("%s is absent: no reference chat templates to check", r->dir);
    r->names = NULL;
    r->n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        r->names = realloc(r->names, sizeof *r->names * (size_t)(r->n + 1));
        r->names[r->n++] = strndup(e->d_name, l - 5);
    }
    closedir(d);
    qsort(r->names, (size_t)r->n, sizeof *r->names, tc_cmp);
    if (!r->n) cr_skip_test("%s holds no reference cases", r->dir);
}

static void tc_ref_close(tc_ref *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->names[i]);
    free(r->names);
}

/* Loads NAME.json and NAME.jinja. */
static jinja_value tc_ref_load(const tc_ref *r, int i, jinja_ctx *c, char **tmpl)
{
    char path[1200];
    size_t len;
    snprintf(path, sizeof path, "%s/%s.json", r->dir, r->names[i]);
    char *json = tu_read_file(path, &len);
    cr_assert_not_null(json, "cannot read %s", path);
    jinja_value file;
    jinja_error err;
    cr_assert_eq(jinja_json_parse(c, json, len, &file, &err), 0, "%s: %s", path, err.message);
    free(json);
    snprintf(path, sizeof path, "%s/%s.jinja", r->dir, r->names[i]);
    *tmpl = tu_read_file(path, NULL);
    cr_assert_not_null(*tmpl, "cannot read %s", path);
    return file;
}

Test(chat, every_reference_case)
{
    tc_ref r;
    tc_ref_open(&r);
    int total = 0, errors = 0;
    for (int i = 0; i < r.n; i++) {
        jinja_ctx *c = jinja_ctx_create(NULL);
        char *tmpl;
        jinja_value file = tc_ref_load(&r, i, c, &tmpl), cases = jinja_dict_get(file, "cases");
        for (size_t k = 0; k < jinja_len(cases); k++) {
            jinja_value cs = jinja_list_at(cases, k);
            const char *name = jinja_str_bytes(jinja_dict_get(cs, "name"), NULL);
            char *in = tc_case_input(c, file, cs, tmpl), *out, err[1024];
            size_t out_len, want_len;
            int rc = chat_render_json(in, strlen(in), &out, &out_len, err, sizeof err);
            const char *want = jinja_str_bytes(jinja_dict_get(cs, "expected"), &want_len);
            const char *want_err = jinja_str_bytes(jinja_dict_get(cs, "error"), NULL);
            if (want) {
                cr_assert_eq(rc, 0, "%s %s: %s", r.names[i], name, err);
                cr_assert(out_len == want_len && !memcmp(out, want, want_len),
                          "%s %s: the rendering differs:\n--- got\n%s\n--- expected\n%s",
                          r.names[i], name, out, want);
                free(out);
            } else {
                cr_assert_neq(rc, 0, "%s %s rendered, but Jinja2 fails: %s", r.names[i], name,
                              want_err ? want_err : "?");
                /* the exception class matches (TemplateAssertionError is a syntax error) */
                size_t kl = strcspn(want_err, ":");
                cr_expect(!strncmp(err, want_err, kl) || !strncmp(err, "TemplateSyntaxError", 19),
                          "%s %s: %s, expected %s", r.names[i], name, err, want_err);
                errors++;
            }
            free(in);
            total++;
        }
        free(tmpl);
        jinja_ctx_destroy(c);
    }
    fprintf(stderr,
            "chat: %d reference cases of %d templates rendered exactly (%d expected errors)\n",
            total, r.n, errors);
    tc_ref_close(&r);
}

/* ---- through the binary -------------------------------------------------------------------- */

static const char *tc_bin(void)
{
    const char *b = getenv("KVSERVE_BIN");
    if (!b || access(b, X_OK)) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    return b;
}

/* Runs `kvserve render-chat` with input on stdin; its stdout (malloc'd) and exit status. */
static int tc_render_chat(const char *input, size_t len, char **out, size_t *out_len)
{
    char in[256], ob[256], cmd[1024];
    const char *d = getenv("TMPDIR");
    snprintf(in, sizeof in, "%s/kvserve_rc_in_%d", d && *d ? d : "/tmp", (int)getpid());
    snprintf(ob, sizeof ob, "%s/kvserve_rc_out_%d", d && *d ? d : "/tmp", (int)getpid());
    FILE *fp = fopen(in, "wb");
    cr_assert_not_null(fp);
    fwrite(input, 1, len, fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "'%s' render-chat <'%s' >'%s' 2>/dev/null", tc_bin(), in, ob);
    int st = system(cmd);
    *out = tu_read_file(ob, out_len);
    unlink(in);
    unlink(ob);
    cr_assert_not_null(*out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

Test(chat, render_chat_binary_samples)
{
    tc_bin();
    tc_ref r;
    tc_ref_open(&r);
    /* a rendering and an expected error from a few templates spread over the folder */
    int checked = 0;
    for (int i = 0; i < r.n; i += r.n / 5 + 1) {
        jinja_ctx *c = jinja_ctx_create(NULL);
        char *tmpl;
        jinja_value file = tc_ref_load(&r, i, c, &tmpl), cases = jinja_dict_get(file, "cases");
        int got_ok = 0, got_err = 0;
        for (size_t k = 0; k < jinja_len(cases) && !(got_ok && got_err); k++) {
            jinja_value cs = jinja_list_at(cases, k);
            size_t want_len, out_len;
            const char *want = jinja_str_bytes(jinja_dict_get(cs, "expected"), &want_len);
            if (want ? got_ok : got_err) continue;
            char *in = tc_case_input(c, file, cs, tmpl), *out;
            int st = tc_render_chat(in, strlen(in), &out, &out_len);
            if (want) {
                cr_assert_eq(st, 0, "%s: %s", r.names[i], out);
                cr_assert(out_len == want_len && !memcmp(out, want, want_len), "%s: %s", r.names[i],
                          out);
                got_ok = 1;
            } else {
                cr_assert_eq(st, 1, "%s: exit %d", r.names[i], st);
                cr_assert(!strncmp(out, "error: ", 7) && strchr(out, '\n') == out + out_len - 1,
                          "%s: not one error line: %s", r.names[i], out);
                got_err = 1;
            }
            checked++;
            free(in);
            free(out);
        }
        free(tmpl);
        jinja_ctx_destroy(c);
    }
    cr_assert_geq(checked, 5);
    tc_ref_close(&r);
}

Test(chat, render_chat_binary_inputs)
{
    char *out;
    size_t n;
    /* no newline is added; the date feeds strftime_now; extra keys are variables */
    const char *in = "{\"template\": \"{{ strftime_now('%d %b %Y') }}|{{ enable_thinking }}|"
                     "{{ tools is none }}{{ documents is none }}|{{ add_generation_prompt }}\", "
                     "\"date\": \"2024-02-29\", \"enable_thinking\": false, \"messages\": []}";
    cr_assert_eq(tc_render_chat(in, strlen(in), &out, &n), 0, "%s", out);
    cr_expect_str_eq(out, "29 Feb 2024|False|TrueTrue|False");
    free(out);
    static const char *const bad[] = {"not json", "[1]", "{\"messages\": []}",
                                      "{\"template\": \"{% if %}\"}",
                                      "{\"template\": \"x\", \"date\": \"yesterday\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(tc_render_chat(bad[i], strlen(bad[i]), &out, &n), 1, "%s", bad[i]);
        cr_expect(!strncmp(out, "error: ", 7), "%s: %s", bad[i], out);
        free(out);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "'%s' render-chat --help >/dev/null", tc_bin());
    cr_expect_eq(system(cmd), 0);
}

/* ---- chat_tmpl over a GGUF ---------------------------------------------------------------- */

static const char *const tc_hermes =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
static const char *const tc_tool_use =
    "{{ bos_token }}TOOLS {{ tools | map(attribute='function') | map(attribute='name') | list }}"
    "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}";

typedef struct tc_model {
    char path[256];
    gguf_file *gf;
    tokenizer *tok;
} tc_model;

static void tc_model_open(tc_model *m, const char *tmpl, const char *tool_use)
{
    mkm_params p;
    mkm_params_default(&p);
    p.layers = 1;
    p.dim = 32;
    p.heads = 2;
    p.vocab = 300;
    p.context = 64;
    static const char *extra[] = {"<|im_start|>", "<|im_end|>"};
    p.extra_tokens = extra;
    p.n_extra = 2;
    p.chat_template = tmpl;
    p.chat_template_tool_use = tool_use;
    tu_write_mkmodel(&p, "chat", m->path, sizeof m->path);
    char err[256];
    cr_assert_eq(gguf_open(m->path, &m->gf, err, sizeof err), 0, "%s", err);
    m->tok = tok_create(m->gf, err, sizeof err);
    cr_assert_not_null(m->tok, "%s", err);
}

static void tc_model_close(tc_model *m)
{
    tok_destroy(m->tok);
    gguf_close(m->gf);
    unlink(m->path);
}

/* Renders messages_json (and tools_json, kwargs_json when not NULL) with t. */
static int tc_render(const chat_tmpl *t, const char *messages_json, const char *tools_json,
                     const char *kwargs_json, const char *tmpl_text, char **out, int *bos,
                     char *err)
{
    jinja_ctx *c = jinja_ctx_create(NULL);
    jinja_error je;
    chat_vars v = {c, jinja_undefined(), jinja_undefined(), jinja_undefined(), 1, tmpl_text};
    cr_assert_eq(jinja_json_parse(c, messages_json, strlen(messages_json), &v.messages, &je), 0);
    if (tools_json)
        cr_assert_eq(jinja_json_parse(c, tools_json, strlen(tools_json), &v.tools, &je), 0);
    if (kwargs_json)
        cr_assert_eq(jinja_json_parse(c, kwargs_json, strlen(kwargs_json), &v.kwargs, &je), 0);
    size_t n;
    int rc = chat_tmpl_render(t, &v, out, &n, bos, err, 512);
    jinja_ctx_destroy(c);
    return rc;
}

static const char tc_msgs[] =
    "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi \"}, "
    "{\"type\": \"text\", \"text\": \"there\"}]}]";
static const char tc_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}]";

Test(chat, gguf_template_and_tool_use_variant)
{
    tc_model m;
    tc_model_open(&m, tc_hermes, tc_tool_use);
    char err[512];
    chat_config cfg = {NULL, m.gf, m.tok};
    chat_tmpl *t = chat_tmpl_create(&cfg, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    cr_expect(strstr(chat_tmpl_describe(t), "tool_use") != NULL, "%s", chat_tmpl_describe(t));
    char *out;
    int bos;
    const char *simple = "[{\"role\": \"user\", \"content\": \"Hi\"}]";
    cr_assert_eq(tc_render(t, simple, NULL, NULL, NULL, &out, &bos, err), 0, "%s", err);
    cr_expect_str_eq(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    cr_expect_eq(bos, 0, "a Jinja template writes its own BOS");
    free(out);
    /* with tools: the tool_use variant, bos / eos from the vocabulary */
    cr_assert_eq(tc_render(t, simple, tc_tools, NULL, NULL, &out, &bos, err), 0, "%s", err);
    char want[256];
    snprintf(want, sizeof want, "%sTOOLS ['get_weather'][user:Hi]%s",
             tok_piece(m.tok, tok_bos(m.tok)), tok_piece(m.tok, tok_eos(m.tok)));
    cr_expect_str_eq(out, want);
    free(out);
    /* a request names a variant, or brings its own template and kwargs */
    cr_assert_eq(tc_render(t, simple, NULL, NULL, "tool_use", &out, &bos, err), 0, "%s", err);
    cr_expect(strstr(out, "TOOLS []") != NULL, "%s", out);
    free(out);
    cr_assert_eq(
        tc_render(t, simple, NULL, "{\"enable_thinking\": false, \"add_generation_prompt\": 7}",
                  "{{ enable_thinking }} {{ add_generation_prompt }} {{ messages|length }}", &out,
                  &bos, err),
        0, "%s", err);
    cr_expect_str_eq(out, "False True 1", "kwargs are variables, the fixed ones win");
    free(out);
    cr_assert_eq(tc_render(t, simple, NULL, NULL, "{% for %}", &out, &bos, err), -EINVAL);
    cr_expect(strstr(err, "TemplateSyntaxError") != NULL, "%s", err);
    cr_assert_eq(tc_render(t, simple, NULL, NULL, "{{ raise_exception('nope') }}", &out, &bos, err),
                 -EINVAL);
    cr_expect(strstr(err, "raise_exception: nope") != NULL, "%s", err);
    chat_tmpl_destroy(t);
    tc_model_close(&m);
}

Test(chat, spec_name_file_text_and_fallback)
{
    tc_model m;
    tc_model_open(&m, NULL, NULL);
    char err[512], *out;
    int bos;
    /* no template in the GGUF: the built-in ChatML (the vocabulary has <|im_start|>), text parts
     * joined, the tokenizer adds BOS */
    chat_config cfg = {NULL, m.gf, m.tok};
    chat_tmpl *t = chat_tmpl_create(&cfg, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    cr_expect(strstr(chat_tmpl_describe(t), "built-in chatml") != NULL, "%s",
              chat_tmpl_describe(t));
    cr_assert_eq(tc_render(t, tc_msgs, NULL, NULL, NULL, &out, &bos, err), 0, "%s", err);
    cr_expect_str_eq(out, "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
    cr_expect_eq(bos, 1);
    free(out);
    cr_expect_eq(tc_render(t, tc_msgs, tc_tools, NULL, NULL, &out, &bos, err), -EINVAL);
    cr_expect(strstr(err, "tools") != NULL, "%s", err);
    chat_tmpl_destroy(t);
    /* a built-in by name, a text, @FILE */
    cfg.spec = "llama3";
    t = chat_tmpl_create(&cfg, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    cr_expect_str_eq(chat_tmpl_describe(t), "built-in llama3");
    chat_tmpl_destroy(t);
    cfg.spec = "{{ messages[0].content | length }}";
    t = chat_tmpl_create(&cfg, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    cr_assert_eq(tc_render(t, tc_msgs, NULL, NULL, NULL, &out, &bos, err), 0, "%s", err);
    cr_expect_str_eq(out, "2", "content parts reach a Jinja template as they are");
    free(out);
    chat_tmpl_destroy(t);
    char path[300], spec[310];
    snprintf(path, sizeof path, "%s.jinja", m.path);
    FILE *fp = fopen(path, "w");
    fputs("{% for m in messages %}{{ m.role|upper }}{% endfor %}\n", fp);
    fclose(fp);
    snprintf(spec, sizeof spec, "@%s", path);
    cfg.spec = spec;
    t = chat_tmpl_create(&cfg, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    cr_assert_eq(tc_render(t, tc_msgs, NULL, NULL, NULL, &out, &bos, err), 0, "%s", err);
    cr_expect_str_eq(out, "USER", "one trailing newline of the file is dropped");
    free(out);
    chat_tmpl_destroy(t);
    unlink(path);
    static const char *const bad[] = {"nosuchtemplate", "@/nonexistent/file.jinja", "{% if x %}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cfg.spec = bad[i];
        cr_expect_null(chat_tmpl_create(&cfg, err, sizeof err), "%s", bad[i]);
        cr_expect(*err, "%s: no message", bad[i]);
    }
    tc_model_close(&m);
}

Test(chat, mkmodel_stores_the_template_file)
{
    const char *bin = tc_bin();
    char dir[] = "/tmp/tchat_mk_XXXXXX", tmpl[300], model[300], cmd[1200];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(tmpl, sizeof tmpl, "%s/t.jinja", dir);
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    const char *text = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}\n";
    FILE *fp = fopen(tmpl, "w");
    fputs(text, fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd,
             "'%s' mkmodel -o '%s' --dim 32 --layers 1 --heads 2 --vocab 300 --chat-template '%s'",
             bin, model, tmpl);
    cr_assert_eq(system(cmd), 0);
    gguf_file *gf;
    char err[256];
    cr_assert_eq(gguf_open(model, &gf, err, sizeof err), 0, "%s", err);
    gguf_str s;
    cr_assert_eq(gguf_get_str(gf, "tokenizer.chat_template", &s), 0);
    cr_expect(s.len == strlen(text) && !memcmp(s.ptr, text, s.len), "the file's bytes, unchanged");
    gguf_close(gf);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel -o '%s' --chat-template '%s/missing' 2>/dev/null", bin,
             model, dir);
    cr_expect_neq(system(cmd), 0);
    unlink(model);
    unlink(tmpl);
    rmdir(dir);
}
