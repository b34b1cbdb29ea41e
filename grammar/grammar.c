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

gr_grammar *gr_compile_gbnf(const char *text, size_t len, const char *root, gr_error *err)
{
    gr_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    err->pos = -1;
    gr_rules R;
    int rr;
    if (gr__parse_gbnf(text, len, root, &R, &rr, err)) {
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
    int rc = gr__compile_rules(&R, rr, g, err);
    gr__rules_free(&R);
    if (rc) {
        pthread_mutex_destroy(&g->mu);
        free(g);
        line_col(text, len, err);
        return NULL;
    }
    return g;
}

/* Compiles generated text, dropping positions from its errors. */
static gr_grammar *compile_generated(char *text, gr_error *err)
{
    if (!text) {
        gr__fail(err, -1, "out of memory");
        return NULL;
    }
    gr_grammar *g = gr_compile_gbnf(text, strlen(text), "root", err);
    free(text);
    if (!g) err->pos = -1, err->line = err->col = 0;
    return g;
}

gr_grammar *gr_compile_regex(const char *re, size_t len, gr_error *err)
{
    gr_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    err->pos = -1;
    char *expr = gr_regex_to_gbnf(re, len, GR_RE_FULL, err);
    if (!expr) return NULL;
    buf b = {0};
    buf_puts(&b, "root ::= ");
    buf_puts(&b, expr);
    buf_puts(&b, "\n");
    free(expr);
    return compile_generated(buf_take(&b), err);
}

gr_grammar *gr_compile_choice(const char *const *choices, const size_t *lens, int n, gr_error *err)
{
    gr_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    err->pos = -1;
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
    return compile_generated(buf_take(&b), err);
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

/* ---- the LRU cache ---------------------------------------------------------------------------- */

typedef struct gr_centry {
    char *key;
    size_t len;
    uint64_t hash;
    gr_grammar *g;
    uint64_t used;   /* clock of the last get or put */
} gr_centry;

struct gr_cache {
    pthread_mutex_t mu;
    gr_centry *e;
    int n, max_entries;
    size_t max_bytes;
    uint64_t clock;
    int64_t lookups, hits;
};

static uint64_t key_hash(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

gr_cache *gr_cache_create(int max_entries, size_t max_bytes)
{
    gr_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->max_entries = max_entries > 0 ? max_entries : 1;
    c->max_bytes = max_bytes;
    c->e = calloc((size_t)c->max_entries + 1, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void gr_cache_destroy(gr_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        gr_unref(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int cache_find(const gr_cache *c, const char *key, size_t len, uint64_t h)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].len == len && !memcmp(c->e[i].key, key, len)) return i;
    return -1;
}

gr_grammar *gr_cache_get(gr_cache *c, const char *key, size_t len)
{
    uint64_t h = key_hash(key, len);
    pthread_mutex_lock(&c->mu);
    c->lookups++;
    int i = cache_find(c, key, len, h);
    gr_grammar *g = NULL;
    if (i >= 0) {
        c->hits++;
        c->e[i].used = ++c->clock;
        g = gr_ref(c->e[i].g);
    }
    pthread_mutex_unlock(&c->mu);
    return g;
}

static void cache_drop(gr_cache *c, int i)
{
    free(c->e[i].key);
    gr_unref(c->e[i].g);
    c->e[i] = c->e[--c->n];
}

void gr_cache_put(gr_cache *c, const char *key, size_t len, gr_grammar *g)
{
    uint64_t h = key_hash(key, len);
    char *k = malloc(len ? len : 1);
    if (!k) return; /* not cached: only a later compile is lost */
    memcpy(k, key, len);
    pthread_mutex_lock(&c->mu);
    int i = cache_find(c, key, len, h);
    if (i >= 0) cache_drop(c, i);
    c->e[c->n++] = (gr_centry){k, len, h, gr_ref(g), ++c->clock};
    for (;;) {
        size_t bytes = 0;
        for (int j = 0; j < c->n; j++) bytes += gr_grammar_bytes(c->e[j].g);
        if (c->n <= 1 || (c->n <= c->max_entries && (!c->max_bytes || bytes <= c->max_bytes))) break;
        int old = -1;
        for (int j = 0; j < c->n; j++)
            if (c->e[j].g != g && (old < 0 || c->e[j].used < c->e[old].used)) old = j;
        if (old < 0) break;
        cache_drop(c, old);
    }
    pthread_mutex_unlock(&c->mu);
}

void gr_cache_stats(gr_cache *c, int *entries, int64_t *lookups, int64_t *hits)
{
    pthread_mutex_lock(&c->mu);
    if (entries) *entries = c->n;
    if (lookups) *lookups = c->lookups;
    if (hits) *hits = c->hits;
    pthread_mutex_unlock(&c->mu);
}
