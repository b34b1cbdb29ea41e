/*
 * jinja_internal.h — what the files of the Jinja interpreter share (jinja/), from the bottom:
 *
 *   jinja_value.c    the arena, errors, contexts, strings / lists / dicts, Python truth,
 *                    equality, order, len, in, iteration
 *   jinja_repr.c     str(), repr(), float repr, escape()
 *   jinja_json.c     the JSON reader (order-keeping) and transformers' tojson writer
 *   jinja_lex.c      source → tokens (whitespace control, trim_blocks, lstrip_blocks, raw)
 *   jinja_builtins.c the names of the builtin filters and tests
 *   jinja_parse.c    tokens → AST (jj_node): expressions (jinja_parse.h: the parser's state)
 *   jinja_args.c     the natives' calling convention: argument binding, integer arguments
 *   jinja_ops.c      attributes, items, slices, operators
 *   jinja_methods.c  str / list / dict methods and the string helpers the filters share
 *   jinja_format.c   str.format, % formatting, the globals
 *   jinja_tests.c    the tests
 *   jinja_filters.c  the filters (jinja_filters_text.c: the text-layout ones)
 *   jinja_expr.c     expressions: scopes, names, calls, the evaluator
 *   jinja_stmt.c     statements, loops, macros
 *   jinja_fold.c     Jinja's optimizer: constant expressions evaluated at compile time
 *   jinja_parse_stmt.c  statements and the compile-time checks
 *   jinja_api.c      the public entry points (compile, render, building and reading values)
 *
 * A file calls only files above it in this list, but for two cycles, each explained at the top
 * of its files: jinja_expr.c <-> jinja_stmt.c, the interpreter's recursion (a macro call runs
 * statements, statements evaluate expressions), and jinja_ops.c -> jinja_methods.c ->
 * jinja_format.c -> jinja_ops.c (str.format looks its fields up as attributes, and a string's
 * attributes are its methods, format among them).
 *
 * Errors inside a render or a compile unwind with longjmp to the entry point (jj__raise): an
 * interpreter has hundreds of failure points and every allocation lives in an arena that the
 * entry point's caller frees, so nothing is left half-owned. Public functions still return 0 or
 * a negative errno. Names are interned per template so that scope lookups compare pointers.
 */
#ifndef KVSERVE_JINJA_INTERNAL_H
#define KVSERVE_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>

#include "base/buf.h"
#include "jinja/jinja.h"

/* ---- arena -------------------------------------------------------------------------------- */

typedef struct jj_chunk {
    struct jj_chunk *next;
    size_t used, cap; /* bytes of data[] in use / allocated */
    char data[];
} jj_chunk;

typedef struct jj_arena {
    jj_chunk *head;
    size_t total_bytes; /* all chunks together */
    size_t limit_bytes; /* 0: unlimited */
} jj_arena;

/* n bytes aligned to 16, or NULL past the limit or out of memory. */
void *jj__arena_alloc(jj_arena *a, size_t n);
void jj__arena_free(jj_arena *a);

/* ---- errors ------------------------------------------------------------------------------- */

enum jj_err {
    JJ_E_SYNTAX,    /* TemplateSyntaxError */
    JJ_E_UNDEFINED, /* UndefinedError */
    JJ_E_TYPE,      /* TypeError */
    JJ_E_VALUE,     /* ValueError */
    JJ_E_SECURITY,  /* SecurityError (the immutable sandbox) */
    JJ_E_RUNTIME,   /* TemplateRuntimeError */
    JJ_E_RAISE,     /* raise_exception(msg) from the template */
    JJ_E_ZERODIV,   /* ZeroDivisionError */
    JJ_E_INDEX,     /* IndexError */
    JJ_E_KEY,       /* KeyError */
    JJ_E_OVERFLOW,  /* OverflowError */
    JJ_E_ATTR,      /* AttributeError */
    JJ_E_LIMIT,     /* a bound of jinja_limits */
    JJ_E_MEMORY,    /* MemoryError */
    JJ_E_UNSUPPORTED,
    JJ_E_ASSERTION, /* TemplateAssertionError (a TemplateSyntaxError): unknown filter / test */
    JJ_E_FILTERARG  /* FilterArgumentError (a TemplateRuntimeError): bad arguments of a filter */
};

/* Where errors go: the jmp_buf of the current entry point and the error to fill. */
typedef struct jj_catch {
    jmp_buf jb;
    jinja_error *err;
    int code; /* the errno the entry point returns */
} jj_catch;

/* ---- strings, lists, dicts, callables --------------------------------------------------- */

struct jinja_str {
    size_t len;  /* bytes */
    size_t n_cp; /* code points (== len for ASCII) */
    char s[];    /* NUL-terminated */
};

enum jj_list_type {
    JJ_L_LIST,
    JJ_L_TUPLE,
    JJ_L_GEN,    /* a generator (select, map, …): iterable once, no len, no JSON */
    JJ_L_ITEMS,  /* dict_items */
    JJ_L_KEYS,   /* dict_keys */
    JJ_L_VALUES, /* dict_values */
    JJ_L_RANGE   /* range(a, b, step): items materialised, repr kept */
};

struct jj_callargs;

/* A filter's function: what a lazy generator runs when it is first iterated. */
typedef jinja_value (*jj_lazy_fn)(jinja_ctx *c, jinja_value in, const struct jj_callargs *a);

struct jinja_list {
    jinja_value *v; /* [cap] */
    uint32_t n, cap;
    uint8_t type;     /* enum jj_list_type */
    uint8_t consumed; /* generators: already iterated */
    int64_t r[3];     /* JJ_L_RANGE: start, stop, step */
    /* a generator made by a filter that has not run yet (Jinja's generator filters are lazy:
     * an error inside surfaces only when it is iterated): the filter's function (NULL: none),
     * its input and arguments. The generator carries the function rather than naming the
     * filter so that iterating it (jinja_value.c) needs nothing from jinja_filters.c. */
    jj_lazy_fn lazy;
    jinja_value lazy_in;
    const struct jj_callargs *lazy_args;
};

typedef struct jj_entry {
    jinja_value k, v;
    uint32_t hash;
} jj_entry;

struct jinja_dict {
    jj_entry *e; /* [cap], insertion order */
    uint32_t n, cap;
    uint32_t *index; /* open-addressing table of e indices + 1 (0: empty), when n > 8 */
    uint32_t index_cap;
};

struct jinja_undef {
    const char *msg; /* why it is undefined, for the error its use raises */
    int exc;         /* enum jj_err raised when used (UNDEFINED, or SECURITY for the sandbox) */
};

typedef struct jj_node jj_node;
typedef struct jj_scope jj_scope;
typedef struct jj_callargs jj_callargs;

enum jj_func_type {
    JJ_FN_GLOBAL, /* native: g(ctx, args) */
    JJ_FN_METHOD, /* bound method of self (str / list / dict / loop) */
    JJ_FN_MACRO,  /* a {% macro %} or a caller */
    JJ_FN_OBJECT  /* a cycler or joiner object's method */
};

typedef jinja_value (*jj_native_fn)(jinja_ctx *c, jinja_value self, const jj_callargs *a);

struct jinja_func {
    uint8_t type;         /* enum jj_func_type */
    const char *name;     /* for messages */
    jj_native_fn fn;      /* GLOBAL, METHOD, OBJECT */
    jinja_value self;     /* METHOD, OBJECT: the bound object */
    const jj_node *macro; /* MACRO: the S_MACRO / S_CALLBLOCK node */
    jj_scope *closure;    /* MACRO: the scope it was defined in */
    jinja_value caller;   /* MACRO: the caller passed by a call block (UNDEFINED: none) */
};

/* ---- templates ---------------------------------------------------------------------------- */

typedef struct jj_name {
    const char *s; /* interned: equal names are the same pointer within a template */
    uint32_t len, hash;
} jj_name;

/* Arguments of a call, filter or test as written: positional, keyword, *args, **kwargs. */
typedef struct jj_args {
    jj_node **pos;
    uint32_t n_pos;
    jj_name *kw_names;
    jj_node **kw;
    uint32_t n_kw;
    jj_node *star, *dstar; /* NULL when absent */
} jj_args;

enum jj_node_kind {
    /* expressions */
    N_CONST,    /* val */
    N_NAME,     /* name */
    N_GETATTR,  /* a.name */
    N_GETITEM,  /* a[b] */
    N_SLICE,    /* a:b:c inside [] (each may be NULL) */
    N_CALL,     /* a(args) */
    N_FILTER,   /* a | name(args); a NULL in a filter block; op = builtin index or -1 */
    N_TEST,     /* a is name(args); op = builtin index or -1 */
    N_NOT,      /* not a */
    N_NEG,      /* -a */
    N_POS,      /* +a */
    N_BINOP,    /* a op b: + - * / // % ** (op: a JJ_OP_*) */
    N_CONCAT,   /* items joined by ~ */
    N_AND,      /* a and b */
    N_OR,       /* a or b */
    N_COMPARE,  /* a, then items[i] compared with ops[i] */
    N_CONDEXPR, /* b if a else c (c may be NULL) */
    N_LIST,     /* [items] */
    N_TUPLE,    /* (items) */
    N_DICT,     /* {items[2i]: items[2i+1]} */
    N_NSREF,    /* assignment target ns.name: a = N_NAME, name */
    /* statements */
    S_DATA,        /* template text: val */
    S_OUTPUT,      /* {{ a }} */
    S_IF,          /* if a: body else orelse (elif is a nested S_IF in orelse) */
    S_FOR,         /* for a (target) in b (iter) [if c]: body else orelse; op = recursive */
    S_SET,         /* set a (target) = b */
    S_SETBLOCK,    /* set a (target) [| filter b]: body */
    S_MACRO,       /* macro name(params; defaults): body */
    S_CALLBLOCK,   /* call(params) b (a call): body is the caller */
    S_FILTERBLOCK, /* filter b (a filter chain, innermost input NULL): body */
    S_WITH,        /* with params = defaults: body */
    S_SCOPE,       /* body rendered in its own scope ({% generation %}) */
    S_BREAK,
    S_CONTINUE
};

enum jj_op {
    JJ_OP_ADD,
    JJ_OP_SUB,
    JJ_OP_MUL,
    JJ_OP_DIV,
    JJ_OP_FLOORDIV,
    JJ_OP_MOD,
    JJ_OP_POW,
    JJ_OP_EQ,
    JJ_OP_NE,
    JJ_OP_LT,
    JJ_OP_LE,
    JJ_OP_GT,
    JJ_OP_GE,
    JJ_OP_IN,
    JJ_OP_NOTIN
};

struct jj_node {
    uint8_t kind; /* enum jj_node_kind */
    int op;       /* see the kinds */
    int line;     /* 1-based template line */
    jj_node *a, *b, *c;
    jj_node **items; /* N_LIST, N_TUPLE, N_DICT, N_CONCAT, N_COMPARE operands */
    uint8_t *ops;    /* N_COMPARE: [n_items] JJ_OP_* */
    uint32_t n_items;
    jj_name name;
    jinja_value val;
    jj_args args;       /* N_CALL, N_FILTER, N_TEST, S_CALLBLOCK's call */
    jj_name *params;    /* S_MACRO, S_CALLBLOCK, S_WITH: parameter names */
    jj_node **defaults; /* [n_params]; NULL entries have no default */
    uint32_t n_params;
    int uses_caller, uses_varargs, uses_kwargs; /* S_MACRO: names its body reads */
    jj_node **body, **orelse;
    uint32_t n_body, n_orelse;
};

struct jinja_tmpl {
    jj_arena arena;
    jj_node **body;
    uint32_t n_body;
    jj_name *names; /* the intern table: [names_cap], open addressing */
    uint32_t n_names, names_cap;
};

/* ---- render context ----------------------------------------------------------------------- */

typedef struct jj_var {
    jj_name name;
    jinja_value v;
} jj_var;

/* Variables of one scope; lookups fall through to parent. */
struct jj_scope {
    jj_scope *parent;
    jj_var *v;
    uint32_t n, cap;
    int captured; /* a macro closes over it: do not reuse it for the next iteration */
};

struct jinja_loop {
    jinja_value items; /* the (filtered) list iterated */
    int64_t index0;
    int depth0;               /* recursive loops */
    const jj_node *node;      /* the S_FOR, for loop(...) recursion */
    jj_scope *scope;          /* where the loop was started */
    jinja_value changed_last; /* loop.changed(): the last arguments (MISSING: none yet) */
};

struct jinja_ctx {
    jj_arena arena;
    jinja_limits lim;
    jj_scope vars;   /* the render variables (jinja_ctx_set) */
    jj_catch *catch; /* the active entry point */
    const jinja_tmpl *tmpl;
    buf *out; /* where output goes now */
    uint64_t steps;
    int depth;
    int line;    /* the line being evaluated, for errors */
    int folding; /* jinja_fold.c evaluates a constant at compile time */
    int have_now;
    struct tm now;
};

/* ---- shared functions --------------------------------------------------------------------- */

/* Raises kind with a printf message at the current line: longjmp to the entry point. */
_Noreturn void jj__raise(jinja_ctx *c, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void jj__vraise(jj_catch *k, int kind, int line, const char *fmt, va_list ap);
const char *jj__err_name(int kind);
/* Counts one unit of work against max_steps. */
void jj__step(jinja_ctx *c);

/* Arena memory for a render: raises MemoryError past the limit. */
void *jj__alloc(jinja_ctx *c, size_t n);

/* Makes b an empty string (base/buf.h) in c's arena: growing it past the output limit
 * (max_output_bytes) raises LimitError, running out of memory raises as jj__alloc does, so its
 * oom is never set. With c NULL, an ordinary heap string (oom set on failure; free its s). */
void jj__buf_init(buf *b, jinja_ctx *c);

/* Values. */
extern const jinja_value jj__missing;
jinja_value jj__undef(jinja_ctx *c, int exc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
jinja_value jj__str_new(jinja_ctx *c, const char *s, size_t n);
jinja_value jj__str_cstr(jinja_ctx *c, const char *s);
jinja_value jj__str_buf(jinja_ctx *c, const buf *b);
jinja_value jj__markup(jinja_value s); /* the same string flagged Markup */
jinja_value jj__list_new(jinja_ctx *c, int type, uint32_t cap);
/* A new list of the given type holding a copy of v[0..n). */
jinja_value jj__list_of(jinja_ctx *c, int type, const jinja_value *v, uint32_t n);
void jj__list_push(jinja_ctx *c, jinja_value l, jinja_value v);
jinja_value jj__dict_new(jinja_ctx *c, uint32_t cap);
void jj__dict_set(jinja_ctx *c, jinja_value d, jinja_value k, jinja_value v);
/* The entry of key k in d, or NULL. Raises TypeError for an unhashable key. */
jj_entry *jj__dict_find(jinja_ctx *c, jinja_value d, jinja_value k);
jj_entry *jj__dict_find_str(jinja_value d, const char *k, size_t n);
/* Asserts a dict's invariants: unique keys, hashes matching, the index mapping every entry. */
void jj__dict_check(jinja_value d);
jinja_value jj__func_new(jinja_ctx *c, int type, const char *name, jj_native_fn fn,
                         jinja_value self);

int jj__is_str(jinja_value v);
int jj__is_seq(jinja_value v); /* list or tuple (not generators, not views) */
int jj__truthy(jinja_value v);
int jj__equal(jinja_value a, jinja_value b);
/* -1, 0, 1 as Python's <; raises TypeError for unorderable values. */
int jj__compare(jinja_ctx *c, jinja_value a, jinja_value b);
const char *jj__type_name(jinja_value v); /* Python's type(v).__name__ */
void jj__str(buf *b, jinja_value v);   /* Python str(v) */
void jj__repr(buf *b, jinja_value v);  /* Python repr(v) */
void jj__repr_float(buf *b, double f);
/* Runs the filter a lazy generator stands for, filling g with its items (jj__iter_list does). */
void jj__force_gen(jinja_ctx *c, jinja_value g);
/* Materialises something iterable as a list: list/tuple/views as is, dict keys, string
 * characters, a generator (marked consumed), undefined as empty; TypeError otherwise. */
jinja_value jj__iter_list(jinja_ctx *c, jinja_value v);
/* len(v), or TypeError. */
int64_t jj__len(jinja_ctx *c, jinja_value v);
/* Python's `a in b`. */
int jj__contains(jinja_ctx *c, jinja_value container, jinja_value item);
/* Raises the error an undefined value holds (or UndefinedError). */
_Noreturn void jj__undef_fail(jinja_ctx *c, jinja_value u);

/* UTF-8. */
uint32_t jj__utf8_next(const char *s, size_t n, size_t *i);        /* U+FFFD for bad bytes */
size_t jj__utf8_put(char *out, uint32_t cp);                       /* 1..4 bytes */
size_t jj__cp_offset(const struct jinja_str *s, int64_t cp_index); /* byte offset */
int jj__is_space(uint32_t cp);                                     /* Python str.isspace */
uint32_t jj__lower(uint32_t cp);
uint32_t jj__upper(uint32_t cp);

/* Markup escaping (& < > " '). */
jinja_value jj__escape(jinja_ctx *c, jinja_value v);

/* JSON (transformers' tojson). indent < 0: none; indent_str overrides spaces when not NULL. */
typedef struct jj_json_opts {
    int ensure_ascii;
    int indent;             /* -1: no newlines */
    const char *indent_str; /* a string indent (NULL: indent spaces) */
    const char *item_sep, *key_sep;
    int sort_keys;
} jj_json_opts;
void jj__json_opts_default(jj_json_opts *o);
/* Writes v; on a value JSON cannot hold, raises TypeError (c) or returns -EINVAL (c NULL). */
int jj__tojson(jinja_ctx *c, buf *b, jinja_value v, const jj_json_opts *o, int level);

/* Lexer / parser. */
enum jj_tok {
    T_EOF,
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP
};

/* Operator tokens (T_OP's op). */
enum jj_tok_op {
    TO_ADD,
    TO_SUB,
    TO_MUL,
    TO_DIV,
    TO_FLOORDIV,
    TO_MOD,
    TO_POW,
    TO_TILDE,
    TO_LBRACKET,
    TO_RBRACKET,
    TO_LPAREN,
    TO_RPAREN,
    TO_LBRACE,
    TO_RBRACE,
    TO_EQ,
    TO_NE,
    TO_GT,
    TO_GTEQ,
    TO_LT,
    TO_LTEQ,
    TO_ASSIGN,
    TO_DOT,
    TO_COLON,
    TO_PIPE,
    TO_COMMA,
    TO_SEMICOLON
};

typedef struct jj_token {
    uint8_t type; /* enum jj_tok */
    uint8_t op;   /* T_OP: enum jj_tok_op */
    int line;
    const char *s; /* T_DATA, T_NAME, T_STRING: the (decoded) text, in the template arena */
    size_t n;
    int64_t i; /* T_INT */
    double f;  /* T_FLOAT */
} jj_token;

/* Tokenizes src into t's arena: *toks[0..*n), ending with T_EOF. Syntax errors raise on k. */
void jj__lex(jinja_tmpl *t, jj_catch *k, const char *src, size_t len, jj_token **toks, uint32_t *n);
jinja_tmpl *jj__parse(const char *src, size_t len, jinja_error *err);
/* Jinja's optimizer over a parsed template: constant expressions become N_CONST (S_DATA for a
 * constant {{ }}). Out of memory raises on k. */
void jj__fold(jinja_tmpl *t, jj_catch *k);
/* A copy of v whose lists and dicts (at any depth) are new, in c's arena. */
jinja_value jj__copy_value(jinja_ctx *c, jinja_value v);
jj_name jj__intern(jinja_tmpl *t, jj_catch *k, const char *s, size_t n);
uint32_t jj__hash_bytes(const char *s, size_t n);

/* Attributes, items, slices, operators (jinja_ops.c). */
/* obj.name: the Python attribute, then the key; Undefined (raising when used) when neither. */
jinja_value jj__getattr(jinja_ctx *c, jinja_value obj, const char *name, size_t n);
/* obj[key]: the key or index, then the attribute; Undefined when neither. */
jinja_value jj__getitem(jinja_ctx *c, jinja_value obj, jinja_value key);
/* obj[lo:hi:st] (NONE for an absent bound), Python's own slice: TypeError when not sliceable. */
jinja_value jj__slice(jinja_ctx *c, jinja_value obj, jinja_value lo, jinja_value hi,
                      jinja_value st);
/* a op b for the arithmetic JJ_OP_* (+ - * / // % **). */
jinja_value jj__binop(jinja_ctx *c, int op, jinja_value a, jinja_value b);
/* a op b for the comparisons and memberships (JJ_OP_EQ .. JJ_OP_NOTIN). */
int jj__compare_op(jinja_ctx *c, int op, jinja_value a, jinja_value b);
/* -v (neg) or +v. */
jinja_value jj__unary(jinja_ctx *c, jinja_value v, int neg);

/* Expressions and statements (jinja_expr.c, jinja_stmt.c). */
jinja_value jj__eval(jinja_ctx *c, jj_scope *s, const jj_node *n);
jinja_value jj__call(jinja_ctx *c, jinja_value fn, const jj_callargs *a);
jinja_value jj__lookup(jj_scope *s, const jj_name *name); /* JINJA__MISSING when absent */
void jj__scope_set(jinja_ctx *c, jj_scope *s, const jj_name *name, jinja_value v);
jinja_value jj__call_macro(jinja_ctx *c, const struct jinja_func *f, const jj_callargs *a);
/* Runs a whole template with its output going to c->out. */
void jj__exec_template(jinja_ctx *c, const jinja_tmpl *t);
jinja_value jj__loop_call(jinja_ctx *c, jinja_value loop, const jj_callargs *a);
/* Applies the filter chain n (innermost input NULL: a filter block or {% set x | f %}) to in. */
jinja_value jj__filter_chain(jinja_ctx *c, jj_scope *s, const jj_node *n, jinja_value in);

/* Evaluated arguments. kw_names point to interned or literal strings. */
struct jj_callargs {
    jinja_value *pos;
    uint32_t n_pos;
    const char **kw_names;
    jinja_value *kw;
    uint32_t n_kw;
};

/* jinja_args.c: binds a to the parameter names params[0..n) (positional first, then by name)
 * into out[n]; unpassed ones are jj__missing. TypeError for extra or unknown arguments. */
void jj__bind(jinja_ctx *c, const char *fname, const char *const *params, int n,
              const jj_callargs *a, jinja_value *out);

/* The builtin filters and tests in the order of their indices: X(name, function). The names
 * are looked up (jinja_builtins.c) by the parser and by the `filter` and `test` tests, which
 * need no function; only jinja_filters.c and jinja_tests.c expand the functions. */
#define JJ__FILTERS(X)                  \
    X("abs", f_abs)                     \
    X("attr", f_attr)                   \
    X("batch", f_batch)                 \
    X("capitalize", f_capitalize)       \
    X("center", jj__f_center)           \
    X("count", f_length)                \
    X("d", f_default)                   \
    X("default", f_default)             \
    X("dictsort", f_dictsort)           \
    X("e", f_escape)                    \
    X("escape", f_escape)               \
    X("filesizeformat", f_unsupported)  \
    X("first", f_first)                 \
    X("float", f_float)                 \
    X("forceescape", f_forceescape)     \
    X("format", f_format)               \
    X("groupby", f_unsupported)         \
    X("indent", jj__f_indent)           \
    X("int", f_int)                     \
    X("items", f_items)                 \
    X("join", f_join)                   \
    X("last", f_last)                   \
    X("length", f_length)               \
    X("list", f_list)                   \
    X("lower", f_lower)                 \
    X("map", f_map)                     \
    X("max", f_max)                     \
    X("min", f_min)                     \
    X("pprint", f_pprint)               \
    X("random", f_unsupported)          \
    X("reject", f_reject)               \
    X("rejectattr", f_rejectattr)       \
    X("replace", f_replace)             \
    X("reverse", f_reverse)             \
    X("round", f_round)                 \
    X("safe", f_safe)                   \
    X("select", f_select)               \
    X("selectattr", f_selectattr)       \
    X("slice", f_slice)                 \
    X("sort", f_sort)                   \
    X("string", f_string)               \
    X("striptags", jj__f_striptags)     \
    X("sum", f_sum)                     \
    X("title", jj__f_title)             \
    X("tojson", f_tojson)               \
    X("trim", f_trim)                   \
    X("truncate", jj__f_truncate)       \
    X("unique", f_unique)               \
    X("upper", f_upper)                 \
    X("urlencode", jj__f_urlencode)     \
    X("urlize", f_unsupported)          \
    X("wordcount", jj__f_wordcount)     \
    X("wordwrap", f_unsupported)        \
    X("xmlattr", f_unsupported)

#define JJ__TESTS(X)                    \
    X("odd", t_odd)                     \
    X("even", t_even)                   \
    X("divisibleby", t_divisibleby)     \
    X("defined", t_defined)             \
    X("undefined", t_undefined)         \
    X("filter", t_filter)               \
    X("test", t_test)                   \
    X("none", t_none)                   \
    X("boolean", t_boolean)             \
    X("false", t_false)                 \
    X("true", t_true)                   \
    X("integer", t_integer)             \
    X("float", t_float)                 \
    X("lower", t_lower)                 \
    X("upper", t_upper)                 \
    X("string", t_string)               \
    X("mapping", t_mapping)             \
    X("number", t_number)               \
    X("sequence", t_sequence)           \
    X("iterable", t_iterable)           \
    X("callable", t_callable)           \
    X("sameas", t_sameas)               \
    X("escaped", t_escaped)             \
    X("in", t_in)                       \
    X("==", t_eq)                       \
    X("eq", t_eq)                       \
    X("equalto", t_eq)                  \
    X("!=", t_ne)                       \
    X("ne", t_ne)                       \
    X(">", t_gt)                        \
    X("gt", t_gt)                       \
    X("greaterthan", t_gt)              \
    X("ge", t_ge)                       \
    X(">=", t_ge)                       \
    X("<", t_lt)                        \
    X("lt", t_lt)                       \
    X("lessthan", t_lt)                 \
    X("<=", t_le)                       \
    X("le", t_le)

/* jinja_builtins.c: the index of a builtin filter / test by name, or -1. */
int jj__filter_index(const char *name);
int jj__test_index(const char *name);
/* Applies builtin filter / test idx (jinja_filters.c, jinja_tests.c). */
jinja_value jj__apply_filter(jinja_ctx *c, int idx, jinja_value v, const jj_callargs *a);
int jj__apply_test(jinja_ctx *c, int idx, jinja_value v, const jj_callargs *a);
/* A method of a str / list / dict value by name as a bound callable, or MISSING when the type
 * has no such attribute. Mutating list / dict methods come back as the sandbox's refusal. */
jinja_value jj__method(jinja_ctx *c, jinja_value self, const char *name, size_t n);
/* The global functions (range, dict, namespace, raise_exception, strftime_now, …). */
jinja_value jj__global(jinja_ctx *c, const char *name, size_t n);
/* jinja_args.c: calls fn, a callable that is not a macro (a bound method, a global, a
 * cycler's or joiner's method), as jj__call does; anything else that is not callable is a
 * TypeError. The builtins call natives through it, so they need no evaluator. */
jinja_value jj__call_native(jinja_ctx *c, jinja_value fn, const jj_callargs *a);
/* jinja_args.c: the native behind a Python method or global this interpreter does not
 * implement: calling it raises NotImplementedError naming the function (jj__call reads the
 * callable's name). */
jinja_value jj__unsupported(jinja_ctx *c, jinja_value self, const jj_callargs *a);
/* Python's "fmt % args" for strings (Markup: the arguments are escaped). */
jinja_value jj__percent_format(jinja_ctx *c, jinja_value fmt, jinja_value args);
/* jinja_ops.c: a Python attribute of obj that is not a dict key: a method, a namespace
 * attribute, a loop field; the sandbox's refusal for dunders; MISSING when there is none. */
jinja_value jj__py_attr(jinja_ctx *c, jinja_value obj, const char *name, size_t n);

/* String helpers shared by methods and filters. Results keep s's Markup flag. */
jinja_value jj__str_strip(jinja_ctx *c, jinja_value s, jinja_value chars, int left, int right);
jinja_value jj__str_case(jinja_ctx *c, jinja_value s,
                         int mode); /* 0 lower, 1 upper, 2 capitalize, 3 title, 4 swapcase */
jinja_value jj__str_replace(jinja_ctx *c, jinja_value s, jinja_value old, jinja_value rep,
                            int64_t count);
jinja_value jj__str_splitlines(jinja_ctx *c, jinja_value s, int keepends);
int jj__str_cased(jinja_value s, int upper); /* Python's islower (0) / isupper (1) */
/* Python str(v) as a value: Markup is dropped, as str() of a Markup gives a plain str. */
jinja_value jj__plain_str(jinja_ctx *c, jinja_value v);
/* Jinja's soft_str: strings (Markup included) as they are, anything else str(). */
jinja_value jj__soft_str(jinja_ctx *c, jinja_value v);
/* jinja_args.c: an integer argument (int or bool), or TypeError naming what. */
int64_t jj__int_arg(jinja_ctx *c, jinja_value v, const char *what);

#endif
