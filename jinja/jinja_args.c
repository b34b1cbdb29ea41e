/*
 * jinja_args.c — the calling convention of the native callables (filters, tests, methods,
 * globals): binding the arguments of a call to parameter names, reading an integer argument,
 * calling a native, and the native that stands for what this interpreter does not implement.
 * It calls nothing in jinja/ but the value model, so every builtin can use it.
 */
#include <assert.h>
#include <string.h>

#include "jinja/jinja_internal.h"

void jj__bind(jinja_ctx *c, const char *fname, const char *const *params, int n,
              const jj_callargs *a, jinja_value *out)
{
    for (int i = 0; i < n; i++)
        out[i] = jj__missing;
    if ((int)a->n_pos > n)
        jj__raise(c, JJ_E_TYPE, "%s() takes at most %d argument%s (%u given)", fname, n,
                  n == 1 ? "" : "s", a->n_pos);
    for (uint32_t i = 0; i < a->n_pos; i++)
        out[i] = a->pos[i];
    for (uint32_t k = 0; k < a->n_kw; k++) {
        int i = 0;
        while (i < n && strcmp(params[i], a->kw_names[k]))
            i++;
        if (i == n)
            jj__raise(c, JJ_E_TYPE, "%s() got an unexpected keyword argument '%s'", fname,
                      a->kw_names[k]);
        if (out[i].kind != JINJA__MISSING)
            jj__raise(c, JJ_E_TYPE, "%s() got multiple values for argument '%s'", fname, params[i]);
        out[i] = a->kw[k];
    }
}

int64_t jj__int_arg(jinja_ctx *c, jinja_value v, const char *what)
{
    if (v.kind == JINJA_INT) return v.i;
    if (v.kind == JINJA_BOOL) return v.b;
    if (v.kind == JINJA_UNDEFINED) jj__undef_fail(c, v);
    jj__raise(c, JJ_E_TYPE, "%s: '%s' object cannot be interpreted as an integer", what,
              jj__type_name(v));
}

jinja_value jj__unsupported(jinja_ctx *c, jinja_value self, const jj_callargs *a)
{
    (void)self;
    (void)a;
    jj__raise(c, JJ_E_UNSUPPORTED, "this function is not supported in chat templates");
}

jinja_value jj__call_native(jinja_ctx *c, jinja_value fn, const jj_callargs *a)
{
    jj__step(c);
    if (fn.kind == JINJA_UNDEFINED) jj__undef_fail(c, fn);
    if (fn.kind == JINJA_CALLABLE) {
        assert(fn.fn->type != JJ_FN_MACRO);
        if (fn.fn->fn == jj__unsupported) {
            if (fn.fn->type == JJ_FN_METHOD)
                jj__raise(c, JJ_E_UNSUPPORTED, "the %s method '%s' is not supported in chat templates",
                          jj__type_name(fn.fn->self), fn.fn->name);
            jj__raise(c, JJ_E_UNSUPPORTED, "the global '%s' is not supported in chat templates",
                      fn.fn->name);
        }
        return fn.fn->fn(c, fn.fn->self, a);
    }
    jj__raise(c, JJ_E_TYPE, "'%s' object is not callable", jj__type_name(fn));
}
