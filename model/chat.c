/*
 * chat.c — the model's chat template, executed: a chat_tmpl holds the compiled Jinja template
 * (and its named variants) or a built-in fallback, and renders a conversation with the variables
 * transformers' apply_chat_template passes. Also `render-chat`'s JSON entry point.
 *
 * Which template: --chat-template when given (a built-in name, @FILE or a path, or the text);
 * else the GGUF's tokenizer.chat_template, with tokenizer.chat_template.NAME variants kept (a
 * request with tools renders with "tool_use" when there is one, as transformers picks it); else
 * the built-in family chat_template_detect picks (chat_builtin.c). A request may bring its own
 * template text or name a variant. Nothing here is mutable after creation, so one chat_tmpl
 * serves every thread; each render uses the caller's jinja_ctx. Callers: server/ (chat
 * completions, /tokenize), cli/ (render-chat, info), tests.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/chat.h"

#define CHAT_MAX_VARIANTS 16

typedef struct chat_variant {
    char *name; /* "default", "tool_use", … */
    char *text;
    jinja_tmpl *jt;
} chat_variant;

struct chat_tmpl {
    int builtin;                       /* CHAT_TMPL_* when there is no Jinja template, else -1 */
    chat_variant v[CHAT_MAX_VARIANTS]; /* v[0] is the default */
    int n_v;
    char *bos, *eos;      /* the vocabulary's texts (NULL: none) */
    const tokenizer *tok; /* borrowed (it outlives the template): the built-ins' BOS / EOS */
    char describe[160];
};

static void set_err(char *err, size_t n, const char *fmt, const char *a, const char *b)
{
    if (err && n) snprintf(err, n, fmt, a, b);
}

static char *read_text(const char *path, char *err, size_t err_len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, err_len, "cannot read the chat template file '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, fp);
        if (n < cap - 1) break;
        char *nb = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (!buf || bad) {
        free(buf);
        set_err(err, err_len, "cannot read the chat template file '%s'%s", path,
                bad ? ": read error" : ": too large or out of memory");
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

static int add_variant(chat_tmpl *t, const char *name, const char *text, size_t len, char *err,
                       size_t err_len)
{
    if (t->n_v >= CHAT_MAX_VARIANTS) return 0;
    chat_variant *v = &t->v[t->n_v];
    jinja_error je;
    v->jt = jinja_compile(text, len, &je);
    if (!v->jt) {
        char line[600];
        jinja_error_format(&je, line, sizeof line);
        set_err(err, err_len, "the chat template '%s' does not compile: %s", name, line);
        return -EINVAL;
    }
    v->name = strdup(name);
    v->text = malloc(len + 1);
    if (!v->name || !v->text) {
        jinja_tmpl_destroy(v->jt);
        free(v->name);
        free(v->text);
        set_err(err, err_len, "%s%s", "out of memory", "");
        return -ENOMEM;
    }
    memcpy(v->text, text, len);
    v->text[len] = 0;
    t->n_v++;
    return 0;
}

/* tokenizer.chat_template and every tokenizer.chat_template.NAME of the GGUF. */
static int add_gguf_variants(chat_tmpl *t, const gguf_file *f, char *err, size_t err_len)
{
    gguf_str s;
    if (!gguf_get_str(f, "tokenizer.chat_template", &s)) {
        int rc = add_variant(t, "default", s.ptr, s.len, err, err_len);
        if (rc) return rc;
    }
    static const char prefix[] = "tokenizer.chat_template.";
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char key[256];
        gguf_str_copy(kv->key, key, sizeof key);
        if (strncmp(key, prefix, sizeof prefix - 1) || !key[sizeof prefix - 1]) continue;
        if (gguf_get_str(f, key, &s)) continue;
        if (!t->n_v) { /* a named template without a default: the first one is the default */
            int rc = add_variant(t, "default", s.ptr, s.len, err, err_len);
            if (rc) return rc;
        }
        int rc = add_variant(t, key + sizeof prefix - 1, s.ptr, s.len, err, err_len);
        if (rc) return rc;
    }
    return 0;
}

static int is_file(const char *s)
{
    FILE *fp = strlen(s) < 4096 && !strstr(s, "{%") && !strstr(s, "{{") ? fopen(s, "rb") : NULL;
    if (fp) fclose(fp);
    return fp != NULL;
}

static int from_spec(chat_tmpl *t, const char *spec, char *err, size_t err_len)
{
    int b = chat_template_by_name(spec);
    if (b >= 0) {
        t->builtin = b;
        snprintf(t->describe, sizeof t->describe, "built-in %s", chat_template_name(b));
        return 0;
    }
    const char *path = spec[0] == '@' ? spec + 1 : is_file(spec) ? spec : NULL;
    if (!path && !strstr(spec, "{%") && !strstr(spec, "{{")) {
        set_err(err, err_len,
                "unknown chat template '%s' (a built-in name: chatml, llama2, llama3, mistral, "
                "zephyr, phi3, gemma, plain; @FILE; or a Jinja template text)%s",
                spec, "");
        return -EINVAL;
    }
    char *text = path ? read_text(path, err, err_len) : NULL;
    if (path && !text) return -EINVAL;
    int rc =
        add_variant(t, "default", text ? text : spec, strlen(text ? text : spec), err, err_len);
    free(text);
    if (!rc)
        snprintf(t->describe, sizeof t->describe, "jinja (%.120s)",
                 path ? path : "--chat-template text");
    return rc;
}

static char *token_text(const tokenizer *tok, int32_t id)
{
    return tok && id >= 0 && tok_piece(tok, id) ? strdup(tok_piece(tok, id)) : NULL;
}

chat_tmpl *chat_tmpl_create(const chat_config *cfg, char *err, size_t err_len)
{
    chat_tmpl *t = calloc(1, sizeof *t);
    if (!t) {
        set_err(err, err_len, "%s%s", "out of memory", "");
        return NULL;
    }
    t->builtin = -1;
    int rc = 0;
    if (cfg->spec && *cfg->spec)
        rc = from_spec(t, cfg->spec, err, err_len);
    else if (cfg->gguf) {
        rc = add_gguf_variants(t, cfg->gguf, err, err_len);
        if (!rc && t->n_v) {
            size_t o = (size_t)snprintf(t->describe, sizeof t->describe,
                                        "jinja (GGUF tokenizer.chat_template");
            for (int i = 1; i < t->n_v && o < sizeof t->describe; i++)
                o += (size_t)snprintf(t->describe + o, sizeof t->describe - o, ", +%s",
                                      t->v[i].name);
            if (o < sizeof t->describe) snprintf(t->describe + o, sizeof t->describe - o, ")");
        }
    }
    if (!rc && t->builtin < 0 && !t->n_v) {
        t->builtin = chat_template_detect(NULL, cfg->tok);
        snprintf(t->describe, sizeof t->describe, "built-in %s (the GGUF has no chat template)",
                 chat_template_name(t->builtin));
    }
    t->tok = cfg->tok;
    if (!rc && cfg->tok) {
        t->bos = token_text(cfg->tok, tok_bos(cfg->tok));
        t->eos = token_text(cfg->tok, tok_eos(cfg->tok));
    }
    if (rc) {
        chat_tmpl_destroy(t);
        return NULL;
    }
    return t;
}

void chat_tmpl_destroy(chat_tmpl *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_v; i++) {
        jinja_tmpl_destroy(t->v[i].jt);
        free(t->v[i].name);
        free(t->v[i].text);
    }
    free(t->bos);
    free(t->eos);
    free(t);
}

const char *chat_tmpl_describe(const chat_tmpl *t)
{
    return t->describe;
}

static const chat_variant *pick(const chat_tmpl *t, int tools)
{
    if (!t->n_v) return NULL;
    for (int i = 1; tools && i < t->n_v; i++)
        if (!strcmp(t->v[i].name, "tool_use")) return &t->v[i];
    return &t->v[0];
}

const char *chat_tmpl_source(const chat_tmpl *t, int tools)
{
    const chat_variant *v = pick(t, tools);
    return v ? v->text : NULL;
}

/* ---- rendering ---------------------------------------------------------------------------- */

static int has_tools(jinja_value tools)
{
    return tools.kind == JINJA_LIST && jinja_len(tools) > 0;
}

/* A message's content as one string: text parts joined, null as "". NULL when a part is not
 * text. */
static char *content_text(jinja_value content)
{
    size_t n;
    const char *s = jinja_str_bytes(content, &n);
    if (s) return strndup(s, n);
    if (content.kind == JINJA_NONE || content.kind == JINJA_UNDEFINED) return strdup("");
    if (content.kind != JINJA_LIST) return NULL;
    size_t total = 0;
    for (size_t i = 0; i < jinja_len(content); i++) {
        const char *p = jinja_str_bytes(jinja_dict_get(jinja_list_at(content, i), "text"), &n);
        if (!p) return NULL;
        total += n;
    }
    char *out = malloc(total + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < jinja_len(content); i++) {
        const char *p = jinja_str_bytes(jinja_dict_get(jinja_list_at(content, i), "text"), &n);
        memcpy(out + o, p, n);
        o += n;
    }
    out[o] = 0;
    return out;
}

static int render_builtin(const chat_tmpl *t, const chat_vars *v, char **out, size_t *out_len,
                          int *tokenizer_bos, char *err, size_t err_len)
{
    if (has_tools(v->tools)) {
        set_err(err, err_len,
                "the built-in %s chat template cannot express tools; serve with a Jinja template "
                "(--chat-template)%s",
                chat_template_name(t->builtin), "");
        return -EINVAL;
    }
    size_t n = jinja_len(v->messages);
    chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    char **texts = calloc(n ? n : 1, sizeof *texts);
    int rc = msgs && texts ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        jinja_value m = jinja_list_at(v->messages, i);
        msgs[i].role = jinja_str_bytes(jinja_dict_get(m, "role"), NULL);
        texts[i] = content_text(jinja_dict_get(m, "content"));
        msgs[i].content = texts[i];
        if (!texts[i]) rc = -EINVAL;
    }
    if (!rc) {
        /* The BOS text is written only when the tokenizer will not add BOS itself. */
        int tok_bos_added = t->tok && tok_add_bos(t->tok) && tok_bos(t->tok) >= 0;
        char *text = chat_render(t->builtin, msgs, (int)n, v->add_generation_prompt, t->tok,
                                 !tok_bos_added, err, err_len);
        if (!text)
            rc = -EINVAL;
        else {
            *out = text;
            *out_len = strlen(text);
            *tokenizer_bos = tok_bos_added;
        }
    } else if (rc == -EINVAL)
        set_err(err, err_len, "%s%s", "a message's content is not text", "");
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(msgs);
    return rc;
}

/* The variables transformers passes, into c: kwargs first, so that the fixed ones win. */
static int set_vars(jinja_ctx *c, const chat_vars *v, const char *bos, const char *eos)
{
    int rc = 0;
    for (size_t i = 0; !rc && v->kwargs.kind == JINJA_DICT && i < jinja_len(v->kwargs); i++) {
        const char *k = jinja_str_bytes(jinja_dict_key_at(v->kwargs, i), NULL);
        if (k) rc = jinja_ctx_set(c, k, jinja_dict_value_at(v->kwargs, i));
    }
    jinja_value tools = v->tools.kind == JINJA_UNDEFINED ? jinja_none() : v->tools;
    if (!rc) rc = jinja_ctx_set(c, "messages", v->messages);
    if (!rc) rc = jinja_ctx_set(c, "tools", tools);
    if (!rc && (v->kwargs.kind != JINJA_DICT ||
                jinja_dict_get(v->kwargs, "documents").kind == JINJA_UNDEFINED))
        rc = jinja_ctx_set(c, "documents", jinja_none());
    if (!rc) rc = jinja_ctx_set(c, "add_generation_prompt", jinja_bool(v->add_generation_prompt));
    jinja_value s;
    if (!rc && bos && !(rc = jinja_str(c, bos, strlen(bos), &s)))
        rc = jinja_ctx_set(c, "bos_token", s);
    if (!rc && eos && !(rc = jinja_str(c, eos, strlen(eos), &s)))
        rc = jinja_ctx_set(c, "eos_token", s);
    return rc;
}

static int render_jinja(const jinja_tmpl *jt, const chat_vars *v, const char *bos, const char *eos,
                        char **out, size_t *out_len, char *err, size_t err_len)
{
    int rc = set_vars(v->ctx, v, bos, eos);
    if (rc) {
        set_err(err, err_len, "%s%s", "out of memory", "");
        return rc;
    }
    jinja_error je;
    rc = jinja_render(jt, v->ctx, out, out_len, &je);
    if (rc && err && err_len) jinja_error_format(&je, err, err_len);
    return rc;
}

int chat_tmpl_render(const chat_tmpl *t, const chat_vars *v, char **out, size_t *out_len,
                     int *tokenizer_bos, char *err, size_t err_len)
{
    *out = NULL;
    *out_len = 0;
    *tokenizer_bos = 0;
    const chat_variant *var = NULL;
    jinja_tmpl *own = NULL;
    if (v->tmpl_text && *v->tmpl_text) {
        for (int i = 0; i < t->n_v && !var; i++)
            if (!strcmp(t->v[i].name, v->tmpl_text)) var = &t->v[i];
        if (!var) {
            int b = chat_template_by_name(v->tmpl_text);
            if (b >= 0) {
                chat_tmpl tmp = *t;
                tmp.builtin = b;
                return render_builtin(&tmp, v, out, out_len, tokenizer_bos, err, err_len);
            }
            jinja_error je;
            own = jinja_compile(v->tmpl_text, strlen(v->tmpl_text), &je);
            if (!own) {
                char line[600];
                jinja_error_format(&je, line, sizeof line);
                set_err(err, err_len, "the request's chat_template does not compile: %s%s", line,
                        "");
                return -EINVAL;
            }
        }
    } else
        var = pick(t, has_tools(v->tools));
    if (!var && !own) return render_builtin(t, v, out, out_len, tokenizer_bos, err, err_len);
    int rc = render_jinja(own ? own : var->jt, v, t->bos, t->eos, out, out_len, err, err_len);
    jinja_tmpl_destroy(own);
    return rc;
}

/* ---- render-chat -------------------------------------------------------------------------- */

/* "YYYY-MM-DD" → midnight of that day; 0 or -EINVAL. */
static int parse_date(jinja_value d, struct tm *tm)
{
    const char *s = jinja_str_bytes(d, NULL);
    int y, m, day;
    char tail;
    if (!s || sscanf(s, "%4d-%2d-%2d%c", &y, &m, &day, &tail) != 3 || m < 1 || m > 12 || day < 1 ||
        day > 31)
        return -EINVAL;
    memset(tm, 0, sizeof *tm);
    tm->tm_year = y - 1900;
    tm->tm_mon = m - 1;
    tm->tm_mday = day;
    tm->tm_isdst = -1;
    mktime(tm);
    return 0;
}

static int json_fail(char *err, size_t n, const char *what, const char *detail)
{
    set_err(err, n, "ValueError: %s%s", what, detail);
    return -EINVAL;
}

int chat_render_json(const char *json, size_t len, char **out, size_t *out_len, char *err,
                     size_t err_len)
{
    *out = NULL;
    *out_len = 0;
    jinja_ctx *c = jinja_ctx_create(NULL);
    if (!c) return -ENOMEM;
    jinja_value root;
    jinja_error je;
    int rc = jinja_json_parse(c, json, len, &root, &je);
    if (rc) {
        char line[600];
        jinja_error_format(&je, line, sizeof line);
        set_err(err, err_len, "the input is not JSON: %s%s", line, "");
        jinja_ctx_destroy(c);
        return rc;
    }
    size_t tlen;
    const char *ttext = jinja_str_bytes(jinja_dict_get(root, "template"), &tlen);
    if (root.kind != JINJA_DICT)
        rc = json_fail(err, err_len, "the input must be a JSON object", "");
    else if (!ttext)
        rc = json_fail(err, err_len, "'template' (the template text) is required", "");
    struct tm now;
    if (!rc && jinja_dict_get(root, "date").kind != JINJA_UNDEFINED) {
        if (parse_date(jinja_dict_get(root, "date"), &now))
            rc = json_fail(err, err_len, "'date' must be YYYY-MM-DD", "");
        else
            jinja_ctx_set_time(c, &now);
    }
    jinja_tmpl *jt = NULL;
    if (!rc) {
        jt = jinja_compile(ttext, tlen, &je);
        if (!jt) {
            jinja_error_format(&je, err, err_len);
            rc = -EINVAL;
        }
    }
    if (!rc) {
        jinja_value kw = jinja_undefined(), agp = jinja_dict_get(root, "add_generation_prompt");
        rc = jinja_dict(c, &kw);
        for (size_t i = 0; !rc && i < jinja_len(root); i++) {
            const char *k = jinja_str_bytes(jinja_dict_key_at(root, i), NULL);
            if (strcmp(k, "template") && strcmp(k, "date") && strcmp(k, "messages") &&
                strcmp(k, "tools") && strcmp(k, "add_generation_prompt"))
                rc = jinja_dict_set(c, kw, k, jinja_dict_value_at(root, i));
        }
        jinja_value msgs = jinja_dict_get(root, "messages");
        chat_vars v = {c,
                       msgs.kind == JINJA_UNDEFINED ? jinja_none() : msgs,
                       jinja_dict_get(root, "tools"),
                       kw,
                       jinja_bool(0).b,
                       NULL};
        if (agp.kind == JINJA_BOOL) v.add_generation_prompt = agp.b;
        if (!rc) rc = render_jinja(jt, &v, NULL, NULL, out, out_len, err, err_len);
    }
    jinja_tmpl_destroy(jt);
    jinja_ctx_destroy(c);
    return rc;
}
