/*
 * jinja_api.c — the public face of the Jinja interpreter (jinja/jinja.h): compiling, variables
 * of a render context, rendering, building and reading values, error lines. Contexts and the
 * plain value constructors (jinja_none, jinja_int, ...) are jinja_value.c's, since the
 * interpreter's own files create them too and must not call up into this file.
 *
 * Every entry point that can fail inside the interpreter sets a jj_catch first; errors longjmp
 * back to it and the entry point returns a negative errno with the context's arena still
 * owning whatever was allocated. Callers: model/chat.c, cli/, tests.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

/* ---- public API --------------------------------------------------------------------------- */

jinja_tmpl *jinja_compile(const char *src, size_t len, jinja_error *err)
{
    if (err) memset(err, 0, sizeof *err);
    return jj__parse(src, len, err);
}

void jinja_tmpl_destroy(jinja_tmpl *t)
{
    if (!t) return;
    jj__arena_free(&t->arena);
    free(t);
}

int jinja_ctx_set(jinja_ctx *c, const char *name, jinja_value v)
{
    jj_catch k = {0};
    c->catch = &k;
    if (setjmp(k.jb)) {
        c->catch = NULL;
        return k.code;
    }
    size_t n = strlen(name);
    char *copy = jj__alloc(c, n + 1);
    memcpy(copy, name, n + 1);
    jj_name nm = {copy, (uint32_t)n, jj__hash_bytes(copy, n)};
    jj__scope_set(c, &c->vars, &nm, v);
    c->catch = NULL;
    return 0;
}

int jinja_render(const jinja_tmpl *t, jinja_ctx *c, char **out, size_t *out_len, jinja_error *err)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    if (err) memset(err, 0, sizeof *err);
    jj_catch k = {.err = err};
    buf text;
    c->catch = &k;
    c->tmpl = t;
    c->steps = 0;
    c->depth = 0;
    c->line = 0;
    if (setjmp(k.jb)) {
        c->catch = NULL;
        c->out = NULL;
        return k.code;
    }
    jj__buf_init(&text, c);
    c->out = &text;
    jj__exec_template(c, t);
    char *res = malloc(text.len + 1);
    if (!res) {
        c->catch = NULL;
        return -ENOMEM;
    }
    if (text.len) memcpy(res, text.s, text.len);
    res[text.len] = 0;
    *out = res;
    if (out_len) *out_len = text.len;
    c->catch = NULL;
    c->out = NULL;
    return 0;
}

void jinja_error_format(const jinja_error *e, char *dst, size_t n)
{
    char msg[sizeof e->message];
    size_t i;
    for (i = 0; e->message[i] && i + 1 < sizeof msg; i++)
        msg[i] = (e->message[i] == '\n' || e->message[i] == '\r') ? ' ' : e->message[i];
    msg[i] = 0;
    if (e->line > 0)
        snprintf(dst, n, "%s: %s (template line %d)", e->kind, msg, e->line);
    else
        snprintf(dst, n, "%s: %s", e->kind, msg);
}

/* ---- values ------------------------------------------------------------------------------- */

/* Runs fn(c, arg) as an entry point: an error inside returns its errno. */
static int api_run(jinja_ctx *c, void (*fn)(jinja_ctx *c, void *arg), void *arg)
{
    jj_catch k = {0};
    c->catch = &k;
    if (setjmp(k.jb)) {
        c->catch = NULL;
        return k.code;
    }
    fn(c, arg);
    c->catch = NULL;
    return 0;
}

typedef struct api_args {
    const char *s;
    size_t n;
    jinja_value a, b;
    jinja_value *out;
} api_args;

static void do_str(jinja_ctx *c, void *p)
{
    api_args *x = p;
    *x->out = jj__str_new(c, x->s, x->n);
}

static void do_list(jinja_ctx *c, void *p)
{
    *((api_args *)p)->out = jj__list_new(c, JJ_L_LIST, 0);
}

static void do_dict(jinja_ctx *c, void *p)
{
    *((api_args *)p)->out = jj__dict_new(c, 0);
}

static void do_push(jinja_ctx *c, void *p)
{
    api_args *x = p;
    jj__list_push(c, x->a, x->b);
}

static void do_set(jinja_ctx *c, void *p)
{
    api_args *x = p;
    jj__dict_set(c, x->a, jj__str_cstr(c, x->s), x->b);
}

int jinja_str(jinja_ctx *c, const char *s, size_t n, jinja_value *out)
{
    api_args x = {.s = s, .n = n, .out = out};
    return api_run(c, do_str, &x);
}

int jinja_list(jinja_ctx *c, jinja_value *out)
{
    api_args x = {.out = out};
    return api_run(c, do_list, &x);
}

int jinja_dict(jinja_ctx *c, jinja_value *out)
{
    api_args x = {.out = out};
    return api_run(c, do_dict, &x);
}

int jinja_list_push(jinja_ctx *c, jinja_value l, jinja_value v)
{
    if (l.kind != JINJA_LIST) return -EINVAL;
    api_args x = {.a = l, .b = v};
    return api_run(c, do_push, &x);
}

int jinja_dict_set(jinja_ctx *c, jinja_value d, const char *key, jinja_value v)
{
    if (d.kind != JINJA_DICT) return -EINVAL;
    api_args x = {.s = key, .a = d, .b = v};
    return api_run(c, do_set, &x);
}

size_t jinja_len(jinja_value v)
{
    if (v.kind == JINJA_LIST) return v.l->n;
    if (v.kind == JINJA_DICT || v.kind == JINJA_NAMESPACE) return v.d->n;
    return 0;
}

jinja_value jinja_list_at(jinja_value l, size_t i)
{
    if (l.kind != JINJA_LIST || i >= l.l->n) return jinja_undefined();
    return l.l->v[i];
}

jinja_value jinja_dict_get(jinja_value d, const char *key)
{
    if (d.kind != JINJA_DICT) return jinja_undefined();
    jj_entry *e = jj__dict_find_str(d, key, strlen(key));
    return e ? e->v : jinja_undefined();
}

jinja_value jinja_dict_key_at(jinja_value d, size_t i)
{
    if (d.kind != JINJA_DICT || i >= d.d->n) return jinja_undefined();
    return d.d->e[i].k;
}

jinja_value jinja_dict_value_at(jinja_value d, size_t i)
{
    if (d.kind != JINJA_DICT || i >= d.d->n) return jinja_undefined();
    return d.d->e[i].v;
}

const char *jinja_str_bytes(jinja_value v, size_t *len)
{
    if (v.kind != JINJA_STR) return NULL;
    if (len) *len = v.s->len;
    return v.s->s;
}

char *jinja_json_dump(jinja_value v, int compact)
{
    buf b;
    jj_json_opts o;
    jj__json_opts_default(&o);
    if (compact) {
        o.item_sep = ",";
        o.key_sep = ":";
    }
    jj__buf_init(&b, NULL);
    if (jj__tojson(NULL, &b, v, &o, 0) || b.oom) {
        free(b.s);
        return NULL;
    }
    if (!b.s) return calloc(1, 1);
    return b.s;
}
