/*
 * grammar.c — the grammar module's entry points: compiling GBNF, regex and choice lists,
 * reference counting and the LRU cache of compiled grammars. The small text and UTF-8 helpers
 * the other gr_*.c files share are in gr_util.c, below all of them.
 *
 * Every front end becomes GBNF text first (a regex through gr_regex.c, a choice list as
 * alternatives of literals), so one parser and one compiler serve them all, and a composed
 * grammar is just more text. Errors in generated text are reported without a position (it
 * would point into text the user never wrote).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

/* ---- compiling -------------------------------------------------------------------------------- */

static void line_col(const char *text, size_t len, gr_error *err)
{
    err->line = err->col = 0;
    if (err->pos < 0 || (size_t)err->pos > len) return;
    int line = 1, col = 1;
    for (int i = 0; i < err->pos; i++) {
        if (text[i] == '\n') line++, col = 1;
        else col++;
    }
    err->line = line;
    err->col = col;
}

/* GBNF text under budget b. */
static gr_grammar *compile_gbnf(const char *text, size_t len, const char *root, gr_budget *b, gr_error *err)
{
    gr_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    err->pos = -1;
    gr_rules R;
    int rr;
    if (gr__parse_gbnf(text, len, root, &R, &rr, b, err)) {
        line_col(text, len, err);
        return NULL;
    }
    gr_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        gr__rules_free(&R);
        gr__fail(err, -1, "out of memory");
        return NULL;
    }
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    int rc = gr__compile_rules(&R, rr, g, b, err);
    gr__rules_free(&R);
    if (rc) {
        pthread_mutex_destroy(&g->mu);
        free(g);
        line_col(text, len, err);
        return NULL;
    }
    return g;
}

gr_grammar *gr_compile_gbnf_by(const char *text, size_t len, const char *root, int64_t deadline_us, gr_error *err)
{
    gr_budget b;
    gr__budget_init(&b, deadline_us);
    return compile_gbnf(text, len, root, &b, err);
}

gr_grammar *gr_compile_gbnf(const char *text, size_t len, const char *root, gr_error *err)
{
    return gr_compile_gbnf_by(text, len, root, 0, err);
}

/* Compiles generated text, dropping positions from its errors. */
static gr_grammar *compile_generated(char *text, gr_budget *b, gr_error *err)
{
    if (!text) {
        gr__fail(err, -1, "out of memory");
        return NULL;
    }
    gr_grammar *g = compile_gbnf(text, strlen(text), "root", b, err);
    free(text);
    if (!g) err->pos = -1, err->line = err->col = 0;
    return g;
}

gr_grammar *gr_compile_regex_by(const char *re, size_t len, int64_t deadline_us, gr_error *err)
{
    gr_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    err->pos = -1;
    gr_budget bud;
    gr__budget_init(&bud, deadline_us);
    char *expr = gr__regex_to_gbnf(re, len, GR_RE_FULL, &bud, err);
    if (!expr) return NULL;
    buf b = {0};
    buf_puts(&b, "root ::= ");
    buf_puts(&b, expr);
    buf_puts(&b, "\n");
    free(expr);
    return compile_generated(buf_take(&b), &bud, err);
}

gr_grammar *gr_compile_regex(const char *re, size_t len, gr_error *err)
{
    return gr_compile_regex_by(re, len, 0, err);
}

gr_grammar *gr_compile_choice(const char *const *choices, const size_t *lens, int n, gr_error *err)
{
    return gr_compile_choice_by(choices, lens, n, 0, err);
}

gr_grammar *gr_compile_choice_by(const char *const *choices, const size_t *lens, int n, int64_t deadline_us,
                                 gr_error *err)
{
    gr_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    err->pos = -1;
    gr_budget bud;
    gr__budget_init(&bud, deadline_us);
    if (n < 1) {
        gr__fail(err, -1, "the choice list is empty");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < lens[i];) {
            uint32_t cp;
            int l = gr__utf8_decode((const unsigned char *)choices[i] + k, lens[i] - k, &cp);
            if (l < 0) {
                gr__fail(err, -1, "choice %d is not valid UTF-8 text", i);
                return NULL;
            }
            k += (size_t)l;
        }
    buf b = {0};
    buf_puts(&b, "root ::= ");
    for (int i = 0; i < n; i++) {
        if (i) buf_puts(&b, " | ");
        gr_buf_literal(&b, choices[i], lens[i]);
    }
    buf_puts(&b, "\n");
    return compile_generated(buf_take(&b), &bud, err);
}

char *gr_gbnf_literal(const char *s, size_t len)
{
    buf b = {0};
    gr_buf_literal(&b, s, len);
    return buf_take(&b);
}

gr_grammar *gr_ref(gr_grammar *g)
{
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void gr_unref(gr_grammar *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    gr__mcache_free_all(g);
    free(g->next);
    free(g->flags);
    free(g->rule_of);
    free(g->call_off);
    free(g->calls);
    free(g->rule_start);
    free(g->rule_called);
    for (int r = 0; g->rule_names && r < g->n_rules; r++) free(g->rule_names[r]);
    free(g->rule_names);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
