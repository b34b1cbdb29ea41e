/*
 * jinja.h — a Jinja2 template interpreter for chat templates, as Hugging Face transformers
 * renders them (apply_chat_template).
 *
 * The environment is transformers': ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, the loopcontrols extension (break / continue) and {% generation %}; Jinja's
 * default Undefined (printing it gives "", most other uses raise); the globals raise_exception,
 * strftime_now, namespace, range, dict, cycler and joiner; transformers' own tojson filter
 * (Python's json.dumps with ensure_ascii=False). Values follow Python: printing a list or dict
 * gives its repr, "a" + none is a TypeError, a set inside a for body or a macro is local to it.
 *
 *   text ──jinja_compile──► jinja_tmpl (immutable AST; share it between threads)
 *   jinja_ctx (one render: arena of values + variables) ──jinja_render(tmpl)──► malloc'd text
 *
 * A template is compiled once and rendered any number of times, from any thread, each render
 * with its own jinja_ctx. Every value lives in its context's arena and dies with it. Templates
 * and inputs are untrusted: output size, memory, loop iterations and call depth are bounded
 * (jinja_limits), and every failure is a jinja_error naming the Python exception class Jinja
 * would raise, the message and the template line.
 *
 * Callers: model/chat.c (chat rendering), cli/ (render-chat), tests.
 */
#ifndef KVSERVE_JINJA_H
#define KVSERVE_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Python-level value kinds. Lists carry a sub-type (list, tuple, generator, dict view). */
enum jinja_kind {
    JINJA_UNDEFINED = 0, /* Jinja's Undefined: a missing variable, attribute or key */
    JINJA_NONE,
    JINJA_BOOL,
    JINJA_INT,
    JINJA_FLOAT,
    JINJA_STR,       /* UTF-8; may be Markup (the |safe flag) */
    JINJA_LIST,      /* list, tuple, generator or dict view */
    JINJA_DICT,      /* insertion-ordered */
    JINJA_NAMESPACE, /* namespace(): attributes assignable with {% set ns.a = … %} */
    JINJA_CALLABLE,  /* macro, global function, bound method, loop.cycle, caller */
    JINJA_LOOP,      /* the loop variable of a for */
    JINJA__MISSING   /* internal: an argument that was not passed */
};

typedef struct jinja_value {
    uint8_t kind;  /* enum jinja_kind */
    uint8_t flags; /* JINJA_STR: JINJA_F_MARKUP */
    union {
        int b;                   /* JINJA_BOOL */
        int64_t i;               /* JINJA_INT */
        double f;                /* JINJA_FLOAT */
        struct jinja_str *s;     /* JINJA_STR */
        struct jinja_list *l;    /* JINJA_LIST */
        struct jinja_dict *d;    /* JINJA_DICT, JINJA_NAMESPACE */
        struct jinja_func *fn;   /* JINJA_CALLABLE */
        struct jinja_undef *u;   /* JINJA_UNDEFINED (NULL: a plain undefined) */
        struct jinja_loop *loop; /* JINJA_LOOP */
    };
} jinja_value;

#define JINJA_F_MARKUP 1

/* Bounds on one render (0 in a field: its default). */
typedef struct jinja_limits {
    size_t max_output_bytes; /* default 32 MiB: any rendered text, the result included */
    size_t max_memory_bytes; /* default 512 MiB: the context's arena, inputs included */
    uint64_t max_steps;      /* default 50,000,000: loop iterations + calls + filter items */
    int max_depth;           /* default 200: nested macro / caller / filter-block calls */
} jinja_limits;

/* A failure: exception class ("TemplateSyntaxError", "TypeError", "UndefinedError",
 * "SecurityError", "raise_exception", …), the message, and the template line (0: none). */
typedef struct jinja_error {
    char kind[32];
    char message[480];
    int line;
} jinja_error;

typedef struct jinja_tmpl jinja_tmpl;
typedef struct jinja_ctx jinja_ctx;

/* Compiles a template. src[0..len) is UTF-8 (it may hold NULs only inside text). Returns the
 * template, or NULL with *err filled (TemplateSyntaxError with its line; MemoryError). */
jinja_tmpl *jinja_compile(const char *src, size_t len, jinja_error *err);
void jinja_tmpl_destroy(jinja_tmpl *t);

/* A render context with the given limits (NULL: defaults); NULL when out of memory. */
jinja_ctx *jinja_ctx_create(const jinja_limits *lim);
void jinja_ctx_destroy(jinja_ctx *c);

/* Fixes the clock strftime_now() reads (local broken-down time); by default it reads the
 * current local time at each call. */
void jinja_ctx_set_time(jinja_ctx *c, const struct tm *now);

/* Sets a render variable (messages, tools, bos_token, …), replacing an earlier one of that
 * name. v must belong to this context (or be a scalar). 0, or -ENOMEM. */
int jinja_ctx_set(jinja_ctx *c, const char *name, jinja_value v);

/* Renders t with c's variables. On success *out is a malloc'd NUL-terminated string (the
 * caller frees it), *out_len its length, and 0 is returned. On failure returns -EINVAL (the
 * template raised or failed; *err says how), -E2BIG (a limit was reached; *err says which) or
 * -ENOMEM, and *out is NULL. A context may be rendered several times; values it allocated
 * stay until it is destroyed. */
int jinja_render(const jinja_tmpl *t, jinja_ctx *c, char **out, size_t *out_len, jinja_error *err);

/* ---- values (allocated in a context; scalars need none) ---------------------------------- */

jinja_value jinja_none(void);
jinja_value jinja_bool(int b);
jinja_value jinja_int(int64_t i);
jinja_value jinja_float(double f);
jinja_value jinja_undefined(void);

/* New string (copied), list or dict in c. 0, or -ENOMEM (or -E2BIG past the memory limit). */
int jinja_str(jinja_ctx *c, const char *s, size_t n, jinja_value *out);
int jinja_list(jinja_ctx *c, jinja_value *out);
int jinja_dict(jinja_ctx *c, jinja_value *out);
/* Appends v to list l. 0, or -ENOMEM. */
int jinja_list_push(jinja_ctx *c, jinja_value l, jinja_value v);
/* Sets d[key] = v (a new key goes last, an existing one keeps its place). 0, or -ENOMEM. */
int jinja_dict_set(jinja_ctx *c, jinja_value d, const char *key, jinja_value v);

/* Readers: the number of items of a list or dict (0 for anything else); item i of a list;
 * d[key] of a dict (JINJA_UNDEFINED when missing or d is not a dict); a string's bytes
 * (NULL when v is not a string) with its length in *len when len is not NULL. */
size_t jinja_len(jinja_value v);
jinja_value jinja_list_at(jinja_value l, size_t i);
jinja_value jinja_dict_get(jinja_value d, const char *key);
/* The i-th key / value of a dict in insertion order (i < jinja_len(d)). */
jinja_value jinja_dict_key_at(jinja_value d, size_t i);
jinja_value jinja_dict_value_at(jinja_value d, size_t i);
const char *jinja_str_bytes(jinja_value v, size_t *len);

/* Parses JSON text[0..len) into c, keeping object key order and Python's int / float split
 * (1 is an int, 1.0 a float); NaN / Infinity are accepted as Python's json does. 0, or -EINVAL
 * with *err saying where (ValueError), or -ENOMEM / -E2BIG. */
int jinja_json_parse(jinja_ctx *c, const char *text, size_t len, jinja_value *out,
                     jinja_error *err);

/* v as Python's json.dumps(v, ensure_ascii=False) would write it (", " and ": " separators);
 * compact = 1 writes "," and ":" instead. malloc'd, NUL-terminated; NULL when v holds something
 * JSON cannot express (undefined, a callable) or memory ran out. */
char *jinja_json_dump(jinja_value v, int compact);

/* One line "KIND: message (line N)" for an error (the line part only when known). */
void jinja_error_format(const jinja_error *e, char *buf, size_t n);

#endif
