/*
 * jinja_parse.h — what the two halves of the Jinja parser share: the parser state, the token
 * stream helpers and the expression entry points of jinja_parse.c, used by the statement parser
 * in jinja_parse_stmt.c. Every function raises TemplateSyntaxError on the parser's catch.
 */
#ifndef KVSERVE_JINJA_PARSE_H
#define KVSERVE_JINJA_PARSE_H

#include "jinja/jinja_internal.h"

#define JJ_MAX_NESTING 200

typedef struct parser {
    jinja_tmpl *t;
    jj_catch *k;
    jj_token *tk;
    uint32_t n, pos;
    int soft;       /* inside an if (or a conditional expression): unknown filters wait */
    int in_loop;    /* break / continue are allowed */
    int depth;      /* nesting, bounded */
    jj_node *macro; /* the macro being parsed (for caller / varargs / kwargs) */
} parser;

/* A growable array of node pointers in the template arena. */
typedef struct nvec {
    jj_node **v;
    uint32_t n, cap;
} nvec;

_Noreturn void jj__p_fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void jj__p_unexpected(parser *p, const char *want); /* "expected WANT, got X" */
void *jj__p_palloc(parser *p, size_t n);                      /* zeroed template memory */
jj_name jj__p_pname(parser *p, const char *s, size_t n);      /* an interned name */
jinja_value jj__p_const_str(parser *p, const char *s, size_t n);
jj_node *jj__p_node(parser *p, int kind, int line);
void jj__p_nv_push(parser *p, nvec *a, jj_node *x);
void jj__p_enter(parser *p); /* one nesting level deeper (bounded); callers decrement depth */

/* The token stream: current, next-after-current, consume (returns the consumed token). */
jj_token *jj__p_cur(parser *p);
jj_token *jj__p_look(parser *p);
jj_token *jj__p_next(parser *p);
int jj__p_is_op(const jj_token *t, int op);
int jj__p_is_name(const jj_token *t, const char *name);
int jj__p_skip_name(parser *p, const char *name); /* consumes the name when it is current */
void jj__p_expect_op(parser *p, int op, const char *what);
jj_token *jj__p_expect_type(parser *p, int type, const char *what);

/* Expressions (Jinja's parse_expression, parse_tuple, parse_filter, parse_assign_target). */
jj_node *jj__p_parse_expression(parser *p, int with_condexpr);
jj_node *jj__p_parse_tuple(parser *p, int simplified, int with_condexpr, const char *end1,
                           const char *end2, int explicit_parens);
jj_node *jj__p_parse_filter(parser *p, jj_node *in, int start_inline);
jj_node *jj__p_parse_assign_target(parser *p, int with_tuple, int name_only, const char *end1,
                                   int with_namespace);

#endif
