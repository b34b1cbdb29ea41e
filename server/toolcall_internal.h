/*
 * toolcall_internal.h — what the files of the output parsers share (toolcall.c, the parsers;
 * toolcall_scan.c, buffers and JSON scanning; toolcall_tagged.c, the tagged syntaxes' markers). Nothing outside server/toolcall*.c
 * includes it.
 */
#ifndef KVSERVE_TOOLCALL_INTERNAL_H
#define KVSERVE_TOOLCALL_INTERNAL_H

#include <stddef.h>

#include "server/toolcall.h"

typedef struct tbuf {
    char *s;
    size_t n, cap;
} tbuf;

/* Appends s[0..n) (NUL-terminated after). 0 or -ENOMEM. */
int tc__tb_add(tbuf *b, const char *s, size_t n);
/* Removes the first k bytes. */
void tc__tb_drop(tbuf *b, size_t k);

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
/* Appends v[0..n) trimmed as a JSON value: itself when it is JSON already, else a string. */
void tc__json_value_of(tbuf *b, const char *v, size_t n);
/* memmem for a C-string needle. */
const char *tc__find(const char *s, size_t n, const char *needle);

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

#endif
