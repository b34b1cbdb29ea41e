/*
 * fuzz_toolcall.c — libFuzzer target for the output parsers (server/toolcall/toolcall.c): any model
 * output under any call syntax and reasoning parser, fed in pieces whose sizes the input chooses,
 * must be read without a crash or a leak, and the stream's deltas must add up to exactly the final
 * content, reasoning and calls (names before arguments, calls in order).
 *
 * Input: byte 0 picks the syntax and the reasoning parser, byte 1 seeds the piece sizes, the
 * rest is the output.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fz_sum {
    char *content, *reasoning, *args[16];
    size_t nc, nr, na[16];
    int calls;
} fz_sum;

static void fz_add(char **b, size_t *n, const char *s, size_t k)
{
    char *p = realloc(*b, *n + k + 1);
    if (!p) abort();
    memcpy(p + *n, s, k);
    *n += k;
    p[*n] = 0;
    *b = p;
}

static void fz_emit(void *ud, const tc_delta *d)
{
    fz_sum *s = ud;
    if (d->kind == TC_D_CONTENT) fz_add(&s->content, &s->nc, d->text, d->len);
    if (d->kind == TC_D_REASONING) fz_add(&s->reasoning, &s->nr, d->text, d->len);
    if (d->kind == TC_D_CALL && d->index != s->calls++) abort(); /* calls come in order */
    if (d->kind == TC_D_ARGS) {
        if (d->index >= s->calls) abort(); /* arguments after their call's name */
        if (d->index < 16) fz_add(&s->args[d->index], &s->na[d->index], d->text, d->len);
    }
}

/* a[0..na) and b[0..nb) are the same bytes (a may be NULL when na is 0). */
static int fz_same(const char *a, size_t na, const char *b, size_t nb)
{
    return na == nb && (!na || !memcmp(a, b, na));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    int syntax = 1 + data[0] % TC_ARGS, reasoning = (data[0] / TC_ARGS) % 3;
    uint32_t rng = data[1] * 2654435761u + 1;
    tc_parser *p = tc_parser_create(syntax, reasoning, syntax == TC_ARGS ? "f" : NULL, data[1]);
    if (!p) return 0;
    /* the XML-parameter syntaxes re-type f's and g's string parameters */
    if (tc_parser_add_tool(p, "f", "{\"properties\": {\"a\": {\"type\": \"string\"}}}") ||
        tc_parser_add_tool(p, "g", "{\"properties\": {\"n\": {\"type\": [\"string\", \"null\"]}}}")) {
        tc_parser_destroy(p);
        return 0;
    }
    fz_sum s;
    memset(&s, 0, sizeof s);
    const char *out = (const char *)data + 2;
    size_t n = size - 2, at = 0;
    while (at < n) {
        rng = rng * 1103515245u + 12345u;
        size_t k = 1 + (rng >> 16) % 8;
        if (k > n - at) k = n - at;
        if (tc_parser_feed(p, out + at, k, 0, fz_emit, &s)) abort();
        at += k;
    }
    if (tc_parser_feed(p, "", 0, 1, fz_emit, &s)) abort();
    size_t len;
    const char *c = tc_parser_content(p, &len);
    if (!fz_same(s.content, s.nc, c, len)) abort();
    const char *r = tc_parser_reasoning(p, &len);
    if (r ? !fz_same(s.reasoning, s.nr, r, len) : s.nr != 0) abort();
    if (tc_parser_n_calls(p) != s.calls) abort();
    for (int i = 0; i < s.calls && i < 16; i++) {
        const tc_call *k = tc_parser_call(p, i);
        if (!k->name || !fz_same(s.args[i], s.na[i], k->args, k->args_len)) abort();
    }
    tc_parser_destroy(p);
    free(s.content);
    free(s.reasoning);
    for (int i = 0; i < 16; i++)
        free(s.args[i]);
    return 0;
}
