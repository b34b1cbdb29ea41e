/*
 * jinja_parse_stmt.c — Jinja's statements, and the parser's entry point jj__parse.
 *
 * for (target unpacking, an `if` filter, recursive, else), if / elif / else, set (names,
 * tuples, ns.attr; the block form with filters), macro (defaults; caller / varargs / kwargs
 * found in its body), call, filter, with, print, break / continue (loopcontrols, only inside a
 * for) and generation (transformers' AssistantTracker). Bodies are parsed up to their end
 * tags as Jinja's parse_statements does; an unknown or misplaced tag is a TemplateSyntaxError.
 * Expressions come from jinja_parse.c.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_parse.h"

/* ---- statements --------------------------------------------------------------------------- */

typedef struct body {
    jj_node **v;
    uint32_t n;
} body;

static body subparse(parser *p, const char *const *ends);

/* Parses the statements of a block up to one of ends (NULL-terminated); leaves the end name
 * as the current token. */
static body parse_statements(parser *p, const char *const *ends, int drop_needle)
{
    if (jj__p_is_op(jj__p_cur(p), TO_COLON)) jj__p_next(p);
    jj__p_expect_type(p, T_BLOCK_END, "end of statement block");
    body b = subparse(p, ends);
    if (jj__p_cur(p)->type == T_EOF) {
        char want[128] = "";
        for (int i = 0; ends[i]; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", i ? " or " : "",
                     ends[i]);
        jj__p_fail(p, "Unexpected end of template. Jinja was looking for the following tags: %s.",
                   want);
    }
    if (drop_needle) jj__p_next(p);
    return b;
}

/* The body of a block that is its own frame in Jinja (set block, filter, with, generation): not
 * soft (unknown filters are errors again), parsed up to {% end %} and stored in n->body;
 * keep_loop = 0 also forbids break / continue inside. */
static void frame_body(parser *p, jj_node *n, const char *end, int keep_loop)
{
    int soft = p->soft, in_loop = p->in_loop;
    p->soft = 0;
    if (!keep_loop) p->in_loop = 0;
    const char *ends[] = {end, NULL};
    body b = parse_statements(p, ends, 1);
    n->body = b.v;
    n->n_body = b.n;
    p->soft = soft;
    p->in_loop = in_loop;
}

/* Stores k parameter names and their default (or value) expressions in n. */
static void store_params(parser *p, jj_node *n, const jj_name *names, jj_node *const *vals,
                         uint32_t k)
{
    n->n_params = k;
    if (!k) return;
    n->params = jj__p_palloc(p, sizeof *n->params * k);
    n->defaults = jj__p_palloc(p, sizeof *n->defaults * k);
    memcpy(n->params, names, sizeof *names * k);
    memcpy(n->defaults, vals, sizeof *vals * k);
}

static jj_node *parse_for(parser *p, int line)
{
    jj_node *f = jj__p_node(p, S_FOR, line);
    f->a = jj__p_parse_assign_target(p, 1, 0, "in", 0);
    if (!jj__p_skip_name(p, "in")) jj__p_unexpected(p, "'in'");
    f->b = jj__p_parse_tuple(p, 0, 0, "recursive", NULL, 0);
    int soft = p->soft, in_loop = p->in_loop;
    p->soft = 0;
    if (jj__p_skip_name(p, "if")) f->c = jj__p_parse_expression(p, 1);
    f->op = jj__p_skip_name(p, "recursive");
    p->in_loop = 1;
    static const char *const ends[] = {"endfor", "else", NULL};
    body b = parse_statements(p, ends, 0);
    f->body = b.v;
    f->n_body = b.n;
    p->in_loop = in_loop;
    if (jj__p_is_name(jj__p_next(p), "else")) {
        static const char *const ends2[] = {"endfor", NULL};
        body e = parse_statements(p, ends2, 1);
        f->orelse = e.v;
        f->n_orelse = e.n;
    }
    p->soft = soft;
    return f;
}

static jj_node *parse_if(parser *p, int line)
{
    int soft = p->soft;
    p->soft = 1;
    jj_node *top = jj__p_node(p, S_IF, line), *n = top;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    for (;;) {
        n->a = jj__p_parse_tuple(p, 0, 0, NULL, NULL, 0);
        body b = parse_statements(p, ends, 0);
        n->body = b.v;
        n->n_body = b.n;
        jj_token *t = jj__p_next(p);
        if (jj__p_is_name(t, "elif")) {
            jj_node *e = jj__p_node(p, S_IF, t->line);
            n->orelse = jj__p_palloc(p, sizeof *n->orelse);
            n->orelse[0] = e;
            n->n_orelse = 1;
            n = e;
            continue;
        }
        if (jj__p_is_name(t, "else")) {
            body e = parse_statements(p, ends2, 1);
            n->orelse = e.v;
            n->n_orelse = e.n;
        }
        break;
    }
    p->soft = soft;
    return top;
}

static jj_node *parse_set(parser *p, int line)
{
    jj_node *target = jj__p_parse_assign_target(p, 1, 0, NULL, 1);
    if (jj__p_is_op(jj__p_cur(p), TO_ASSIGN)) {
        jj__p_next(p);
        jj_node *s = jj__p_node(p, S_SET, line);
        s->a = target;
        s->b = jj__p_parse_tuple(p, 0, 1, NULL, NULL, 0);
        return s;
    }
    jj_node *s = jj__p_node(p, S_SETBLOCK, line);
    s->a = target;
    int soft = p->soft;
    p->soft = 0;
    s->b = jj__p_parse_filter(p, NULL, 0);
    p->soft = soft;
    frame_body(p, s, "endset", 1);
    return s;
}

/* (a, b=default, …) of a macro or call block into n->params / n->defaults. */
static void parse_signature(parser *p, jj_node *n)
{
    jj_name names[64];
    jj_node *defs[64];
    uint32_t k = 0;
    int have_default = 0;
    jj__p_expect_op(p, TO_LPAREN, "'('");
    while (!jj__p_is_op(jj__p_cur(p), TO_RPAREN)) {
        if (k) jj__p_expect_op(p, TO_COMMA, "','");
        if (k >= 64) jj__p_fail(p, "too many parameters");
        jj_token *t = jj__p_expect_type(p, T_NAME, "a parameter name");
        names[k] = jj__p_pname(p, t->s, t->n);
        defs[k] = NULL;
        if (jj__p_is_op(jj__p_cur(p), TO_ASSIGN)) {
            jj__p_next(p);
            defs[k] = jj__p_parse_expression(p, 1);
            have_default = 1;
        } else if (have_default)
            jj__p_fail(p, "non-default argument follows default argument");
        k++;
    }
    jj__p_expect_op(p, TO_RPAREN, "')'");
    store_params(p, n, names, defs, k);
}

/* The body of a macro or call block: its own scope, no loop, special names tracked. */
static void parse_macro_body(parser *p, jj_node *m, const char *end)
{
    int soft = p->soft, in_loop = p->in_loop;
    jj_node *outer = p->macro;
    p->soft = 0;
    p->in_loop = 0;
    p->macro = m;
    const char *ends[] = {end, NULL};
    body b = parse_statements(p, ends, 1);
    m->body = b.v;
    m->n_body = b.n;
    p->macro = outer;
    p->soft = soft;
    p->in_loop = in_loop;
    for (uint32_t i = 0; i < m->n_params; i++) {
        const char *nm = m->params[i].s;
        if (!strcmp(nm, "caller") && m->uses_caller && !m->defaults[i])
            jj__p_fail(p,
                       "When defining macros or call blocks the special 'caller' argument must be "
                       "omitted or be given a default.");
        if (!strcmp(nm, "varargs")) m->uses_varargs = 0;
        if (!strcmp(nm, "kwargs")) m->uses_kwargs = 0;
        if (!strcmp(nm, "caller")) m->uses_caller = 0;
    }
}

static jj_node *parse_macro(parser *p, int line)
{
    jj_node *m = jj__p_node(p, S_MACRO, line);
    jj_token *t = jj__p_expect_type(p, T_NAME, "a macro name");
    m->name = jj__p_pname(p, t->s, t->n);
    int soft = p->soft;
    p->soft = 0;
    parse_signature(p, m);
    p->soft = soft;
    parse_macro_body(p, m, "endmacro");
    return m;
}

static jj_node *parse_call_block(parser *p, int line)
{
    jj_node *m = jj__p_node(p, S_CALLBLOCK, line);
    m->name = jj__p_pname(p, "caller", 6);
    if (jj__p_is_op(jj__p_cur(p), TO_LPAREN)) parse_signature(p, m);
    m->b = jj__p_parse_expression(p, 1);
    if (m->b->kind != N_CALL) jj__p_fail(p, "expected call");
    parse_macro_body(p, m, "endcall");
    return m;
}

static jj_node *parse_filter_block(parser *p, int line)
{
    jj_node *f = jj__p_node(p, S_FILTERBLOCK, line);
    int soft = p->soft;
    p->soft = 0;
    f->b = jj__p_parse_filter(p, NULL, 1);
    p->soft = soft;
    frame_body(p, f, "endfilter", 1);
    return f;
}

static jj_node *parse_with(parser *p, int line)
{
    jj_node *w = jj__p_node(p, S_WITH, line);
    jj_name names[64];
    jj_node *vals[64];
    uint32_t k = 0;
    while (jj__p_cur(p)->type != T_BLOCK_END) {
        if (k) jj__p_expect_op(p, TO_COMMA, "','");
        if (k >= 64) jj__p_fail(p, "too many targets");
        jj_token *t = jj__p_expect_type(p, T_NAME, "a name");
        names[k] = jj__p_pname(p, t->s, t->n);
        jj__p_expect_op(p, TO_ASSIGN, "'='");
        vals[k++] = jj__p_parse_expression(p, 1);
    }
    store_params(p, w, names, vals, k);
    frame_body(p, w, "endwith", 1);
    return w;
}

static jj_node *parse_scoped(parser *p, int line, const char *end)
{
    jj_node *s = jj__p_node(p, S_SCOPE, line);
    frame_body(p, s, end, 0);
    return s;
}

static jj_node *parse_statement(parser *p)
{
    jj_token *t = jj__p_cur(p);
    if (t->type != T_NAME) jj__p_fail(p, "tag name expected");
    int line = t->line;
    jj__p_enter(p);
    jj_node *n = NULL;
    jj__p_next(p);
    if (jj__p_is_name(t, "for"))
        n = parse_for(p, line);
    else if (jj__p_is_name(t, "if"))
        n = parse_if(p, line);
    else if (jj__p_is_name(t, "set"))
        n = parse_set(p, line);
    else if (jj__p_is_name(t, "macro"))
        n = parse_macro(p, line);
    else if (jj__p_is_name(t, "call"))
        n = parse_call_block(p, line);
    else if (jj__p_is_name(t, "filter"))
        n = parse_filter_block(p, line);
    else if (jj__p_is_name(t, "with"))
        n = parse_with(p, line);
    else if (jj__p_is_name(t, "generation"))
        n = parse_scoped(p, line, "endgeneration");
    else if (jj__p_is_name(t, "print")) {
        n = jj__p_node(p, S_OUTPUT, line);
        n->a = jj__p_parse_tuple(p, 0, 1, NULL, NULL, 0);
    } else if (jj__p_is_name(t, "break") || jj__p_is_name(t, "continue")) {
        if (!p->in_loop) jj__p_fail(p, "'%.*s' outside of a for loop", (int)t->n, t->s);
        n = jj__p_node(p, jj__p_is_name(t, "break") ? S_BREAK : S_CONTINUE, line);
    } else if (jj__p_is_name(t, "block") || jj__p_is_name(t, "extends") ||
               jj__p_is_name(t, "include") || jj__p_is_name(t, "import") ||
               jj__p_is_name(t, "from") || jj__p_is_name(t, "autoescape"))
        jj__p_fail(p, "the '%.*s' tag is not supported in chat templates", (int)t->n, t->s);
    else
        jj__p_fail(p, "Encountered unknown tag '%.*s'.", (int)(t->n > 60 ? 60 : t->n), t->s);
    p->depth--;
    return n;
}

static int at_end(parser *p, const char *const *ends)
{
    if (!ends) return 0;
    for (int i = 0; ends[i]; i++)
        if (jj__p_is_name(jj__p_cur(p), ends[i])) return 1;
    return 0;
}

static body subparse(parser *p, const char *const *ends)
{
    nvec out = {0};
    jj__p_enter(p);
    while (jj__p_cur(p)->type != T_EOF) {
        jj_token *t = jj__p_cur(p);
        if (t->type == T_DATA) {
            jj_node *d = jj__p_node(p, S_DATA, t->line);
            d->val = jj__p_const_str(p, t->s, t->n);
            jj__p_nv_push(p, &out, d);
            jj__p_next(p);
        } else if (t->type == T_VAR_BEGIN) {
            jj__p_next(p);
            jj_node *o = jj__p_node(p, S_OUTPUT, t->line);
            o->a = jj__p_parse_tuple(p, 0, 1, NULL, NULL, 0);
            jj__p_expect_type(p, T_VAR_END, "end of print statement");
            jj__p_nv_push(p, &out, o);
        } else if (t->type == T_BLOCK_BEGIN) {
            jj__p_next(p);
            if (at_end(p, ends)) break;
            jj__p_nv_push(p, &out, parse_statement(p));
            jj__p_expect_type(p, T_BLOCK_END, "end of statement block");
        } else
            jj__p_unexpected(p, "template data or a tag");
    }
    p->depth--;
    return (body){out.v, out.n};
}

jinja_tmpl *jj__parse(const char *src, size_t len, jinja_error *err)
{
    jinja_tmpl *volatile t = calloc(1, sizeof *t);
    if (!t) {
        if (err) {
            snprintf(err->kind, sizeof err->kind, "MemoryError");
            snprintf(err->message, sizeof err->message, "out of memory");
            err->line = 0;
        }
        return NULL;
    }
    jj_catch k = {.err = err};
    if (setjmp(k.jb)) {
        jj__arena_free(&t->arena);
        free(t);
        return NULL;
    }
    parser p = {.t = t, .k = &k};
    jj__lex(t, &k, src, len, &p.tk, &p.n);
    body b = subparse(&p, NULL);
    t->body = b.v;
    t->n_body = b.n;
    jj__fold(t, &k);
    return t;
}
