/*
 * internal.h — what the files of the output parsers share. From the bottom up:
 *
 *   toolcall_scan.c      JSON scanning and writing, names, markers, handing calls on
 *   toolcall_pyval.c     call bodies written as code (for toolcall_section.c)
 *   toolcall_tagged.c    the tagged syntaxes' markers and call bodies
 *   toolcall_section.c   the syntaxes read a whole section at a time
 *   toolcall_schema.c    the tool schemas' string parameters
 *   toolcall.c           the parsers of toolcall.h, over all of the above
 *
 * Each file calls only files listed before it. Nothing outside server/toolcall/
 * includes this header.
 */
#ifndef KVSERVE_TOOLCALL_INTERNAL_H
#define KVSERVE_TOOLCALL_INTERNAL_H

#include <stddef.h>

#include "base/buf.h"
#include "server/toolcall/toolcall.h"

int tc__is_ws(char c);
size_t tc__skip_ws(const char *s, size_t n, size_t i);
/* The end of the JSON value at s[i]; *done = 0 when s ends before the value does; (size_t)-1
 * when s[i] cannot start a JSON value. */
size_t tc__skip_value(const char *s, size_t n, size_t i, int *done);

/* How far a call object {"name": …, "arguments": …} starting at s[i] == '{' got. */
typedef struct jobj {
    int state;             /* 0: incomplete, 1: complete, -1: not a JSON object */
    size_t end;            /* complete: just past the '}' */
    size_t name_a, name_b; /* the name string's raw body */
    int name_done;
    size_t args_a, args_b; /* the arguments value (args_b: the scan end while incomplete) */
    int has_args, args_done;
    size_t fn_a, fn_b; /* "function": {...} (OpenAI's shape) */
    int fn_done;
    size_t tc_a, tc_b; /* "tool_calls": [...] */
    int tc_done;
} jobj;

/* Scans the object at s[i] == '{' as far as s[0..n) goes. */
void tc__scan_obj(const char *s, size_t n, size_t i, jobj *o);
/* Decodes a JSON string body s[0..n) (escapes, \u with surrogate pairs). malloc'd; NULL when
 * out of memory. */
char *tc__json_unescape(const char *s, size_t n, size_t *out_len);
/* Appends v[0..n) trimmed as a JSON value: itself when it is strictly valid JSON (a number,
 * true, an object …), else a string. */
void tc__json_value_of(buf *b, const char *v, size_t n);
/* memmem for a C-string needle. */
const char *tc__find(const char *s, size_t n, const char *needle);
/* Appends s[0..n) as a JSON string. */
void tc__json_str(buf *b, const char *s, size_t n);
/* A character of a function name (letters, digits, _ - . : and any non-ASCII byte). */
int tc__name_char(char c);
/* Whether s[0..n) has lit at i. */
int tc__at(const char *s, size_t n, size_t i, const char *lit);

/* The markers of a tagged call syntax (toolcall_tagged.c): calls inside an optional section,
 * each from call_open to call_close, its name before sep and its arguments after it. */
typedef struct tc_tags {
    const char *section_open, *call_open, *sep, *call_close, *section_close;
} tc_tags;

/* TC_DEEPSEEK's and TC_KIMI's markers; NULL for the other syntaxes. */
const tc_tags *tc__tags(int syntax);
/* Reads one complete call body s[0..n) (between call_open and call_close): the name is
 * s[*na..*nb), the arguments' text s[*aa..*ab) (a ``` fence removed). 1 when it is a call. */
int tc__tagged_body(const char *s, size_t n, const tc_tags *t, size_t *na, size_t *nb,
                    size_t *aa, size_t *ab);

/* ---- section syntaxes (toolcall_section.c, toolcall_pyval.c) ---- */

/* Receives one call read from a section: its name and its arguments as JSON text. */
typedef void (*tc_call_fn)(void *ud, const char *name, size_t name_len, const char *args,
                           size_t args_len);
/* A body reader: the number of calls in s[0..n), each handed to fn when fn is set, or -1 when
 * the text is not calls (fn may then have seen some: tc__section_read validates first). */
typedef int (*tc_read_fn)(const char *s, size_t n, tc_call_fn fn, void *ud);
/* Hands the call name[0..nn) with args to fn (when set): count + 1, or -1 when args failed
 * (out of memory) or the name is empty (toolcall_scan.c). */
int tc__give(tc_call_fn fn, void *ud, const char *name, size_t nn, buf *args, int count);

enum { TC_SECTION_PAIRS = 5 };

/* A syntax whose calls sit between an opening and a closing marker (one of several pairs; a
 * closing marker NULL: the end of the output; "": none, the opening marker alone is read). */
typedef struct tc_section {
    int syntax;
    const char *detect; /* what a chat template of the family contains */
    const char *open[TC_SECTION_PAIRS], *close[TC_SECTION_PAIRS];
    tc_read_fn read;  /* the body of the first pair, and of the others unless read2 is set */
    tc_read_fn read2; /* the body of the other pairs: 0 calls means the text is dropped */
} tc_section;

/* The section table's entry of syntax, or NULL. */
const tc_section *tc__section(int syntax);
/* The section syntax whose markers template text t writes, or -1. */
int tc__section_detect(const char *t);
/* Reads a complete section body of marker pair `pair`: its calls go to fn (all of them, or
 * none when the body is not calls). The number of calls (0: markup, dropped), or -1. */
int tc__section_read(const tc_section *x, int pair, const char *s, size_t n, tc_call_fn fn,
                     void *ud);

/* Appends <parameter=K>V</parameter>… of s[0..n) as a JSON object to args. 0, or -1. */
int tc__xml_params(const char *s, size_t n, buf *args);
/* A non-JSON call body inside hermes' <tool_call>: Qwen3-Coder's <function=NAME>
 * <parameter=K>V</parameter>…, GLM's NAME<arg_key>K</arg_key><arg_value>V</arg_value>… or
 * MiniMax-M3's elements. The number of calls handed to fn (when set), or -1. */
int tc__read_tool_call_body(const char *s, size_t n, tc_call_fn fn, void *ud);
/* MiniMax-M3's <invoke name="NAME"><K>V</K>…</invoke>… (its separator tokens dropped): the
 * number of calls handed to fn (when set), or -1. */
int tc__read_invoke_tree(const char *s, size_t n, tc_call_fn fn, void *ud);
/* Gemma 4's call:NAME{…} and Python's [NAME(k=v, …), …] bodies (toolcall_pyval.c). */
int tc__read_gemma4(const char *s, size_t n, tc_call_fn fn, void *ud);
int tc__read_pythonic(const char *s, size_t n, tc_call_fn fn, void *ud);

/* ---- the request's tool schemas (toolcall_schema.c) ---- */

/* Records which top-level parameters of function name the JSON Schema text schema types as
 * strings (nothing when schema is NULL or not JSON). 0, or -ENOMEM with store unchanged. */
int tc__schemas_add(buf *store, const char *name, const char *schema);
/* Arguments a[0..n) of function fn[0..fnn) with each string-typed parameter that holds a
 * non-string JSON value turned into a string of that value's text, appended to out: 1 when
 * something changed (out holds the new arguments), 0 when a stands as it is. */
int tc__schemas_retype(const buf *store, const char *fn, size_t fnn, const char *a, size_t n,
                       buf *out);

#endif
