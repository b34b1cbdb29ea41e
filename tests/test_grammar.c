/*
 * test_grammar.c — the grammar engine (engine/grammar.h): GBNF parsing and its errors, the
 * languages of small grammars against hand-enumerated strings, and token masks against a
 * brute-force oracle.
 *
 * The oracle for a mask is the matcher's own byte stepping: token t is allowed exactly when a
 * clone of the matcher accepts t (end-of-generation exactly when the output is complete). The
 * mask takes another road (cached per-state splits of the vocabulary, uncertain tokens checked
 * against the stack), so random walks that compare the two at every step, on vocabularies with
 * tokens straddling rule boundaries and UTF-8 characters split across tokens, check the cache.
 * Seeds are printed and can be replayed with KVSERVE_TEST_SEED.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "tests/test_util.h"

static uint64_t tg_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t tg_seed(uint64_t fallback)
{
    const char *e = getenv("KVSERVE_TEST_SEED");
    return e && *e ? strtoull(e, NULL, 0) : fallback;
}

static gr_grammar *tg_compile(const char *src)
{
    gr_error e;
    gr_grammar *g = gr_compile_gbnf(src, strlen(src), NULL, &e);
    cr_assert_not_null(g, "compile failed at %d:%d: %s\n%s", e.line, e.col, e.msg, src);
    return g;
}

/* 1: s is a complete sentence, 0: a viable prefix, -1: rejected. */
static int tg_match(gr_grammar *g, const char *s, size_t n)
{
    gr_vocab *v = gr_vocab_create_raw(0, NULL, NULL, NULL, 0);
    gr_matcher *m = gr_matcher_create(g, v);
    cr_assert_not_null(m);
    int rc = gr_matcher_accept_bytes(m, s, n);
    gr_matcher_check(m);
    int r = rc ? -1 : gr_matcher_is_accepting(m);
    gr_matcher_destroy(m);
    gr_vocab_destroy(v);
    return r;
}

static void tg_expect(gr_grammar *g, const char *s, int want)
{
    int got = tg_match(g, s, strlen(s));
    cr_expect_eq(got, want, "'%s': got %d, want %d", s, got, want);
}

/* ---- parsing and errors ------------------------------------------------------------------ */

static void tg_error(const char *src, int line, int col, const char *needle)
{
    gr_error e;
    gr_grammar *g = gr_compile_gbnf(src, strlen(src), NULL, &e);
    cr_assert_null(g, "'%s' should not compile", src);
    gr_unref(g);
    cr_expect(strstr(e.msg, needle) != NULL, "'%s': message '%s' lacks '%s'", src, e.msg, needle);
    if (line) cr_expect(e.line == line && e.col == col, "'%s': at %d:%d, want %d:%d", src, e.line, e.col, line, col);
}

Test(grammar, syntax_errors_name_the_place)
{
    tg_error("root ::= \"a\" foo", 1, 14, "undefined rule 'foo'");
    tg_error("root ::= \"a\" (b", 1, 14, "unclosed '('");
    tg_error("root ::= \"abc", 1, 10, "unterminated literal");
    tg_error("root ::= [a-", 1, 10, "unterminated character class");
    tg_error("root ::= [z-a]", 1, 13, "reversed");
    tg_error("root ::= \"a\"\nroot ::= \"b\"", 2, 1, "defined twice");
    tg_error("root ::= \"a\"{3,1}", 1, 13, "max below min");
    tg_error("root ::= \"\\q\"", 1, 11, "unknown escape");
    tg_error("root ::= \"a\" )", 1, 14, "unmatched ')'");
    tg_error("start ::= \"a\"", 0, 0, "no rule 'root'");
    tg_error("root ::= \"a\" <tok>", 1, 14, "token references");
    tg_error("root ::= a\na ::= b \"x\" | \"y\"\nb ::= a \"z\"", 0, 0, "left-recursive");
    tg_error("root ::= \"a\" q\nq ::= \"b\" q", 0, 0, "cannot produce any text");
    tg_error("root ::= \"a\"{100001}", 1, 13, "repetition count");
    /* nesting and expansion are bounded */
    char deep[2000];
    int k = snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 300; i++) deep[k++] = '(';
    deep[k++] = '"';
    deep[k++] = 'a';
    deep[k++] = '"';
    for (int i = 0; i < 300; i++) deep[k++] = ')';
    deep[k] = 0;
    tg_error(deep, 0, 0, "nested too deeply");
    tg_error("root ::= (\"ab\"{1000}){1000}", 0, 0, "too large");
}

Test(grammar, languages_of_small_grammars)
{
    gr_grammar *g = tg_compile("root ::= \"a\" b* # comment\nb ::= \"b\" | [x-z]");
    tg_expect(g, "", 0);
    tg_expect(g, "a", 1);
    tg_expect(g, "abzb", 1);
    tg_expect(g, "ba", -1);
    tg_expect(g, "aw", -1);
    gr_unref(g);

    /* repetition bounds, optional parts, classes and "." over code points */
    g = tg_compile("root ::= [0-9]{2,3} (\"-\" [a-f]{2})? . [^a-z\\n]");
    tg_expect(g, "12xA", 1);
    tg_expect(g, "123-abéZ", 1);
    tg_expect(g, "1", 0);
    tg_expect(g, "123456", -1);
    tg_expect(g, "12-a", 0);
    tg_expect(g, "12xa", -1);
    tg_expect(g, "12x\n", -1);
    tg_expect(g, "12\xce", 0);     /* inside a two-byte character */
    tg_expect(g, "12\xce\xbb!", 1); /* λ then ! */
    tg_expect(g, "12\xff", -1);    /* never valid UTF-8 */
    tg_expect(g, "12\xed\xa0\x80", -1); /* an encoded surrogate */
    gr_unref(g);

    /* recursion: balanced parentheses, and direct left recursion rewritten */
    g = tg_compile("root ::= (\"(\" root \")\")*");
    tg_expect(g, "", 1);
    tg_expect(g, "(()())()", 1);
    tg_expect(g, "(()", 0);
    tg_expect(g, "())", -1);
    gr_unref(g);
    g = tg_compile("root ::= expr\nexpr ::= expr \"+\" term | expr \"-\" term | term\nterm ::= [0-9]+ | \"(\" expr \")\"");
    tg_expect(g, "1+2-(3+45)", 1);
    tg_expect(g, "1+", 0);
    tg_expect(g, "+1", -1);
    tg_expect(g, "(1+(2)", 0);
    gr_unref(g);

    /* ambiguity and nullable rules */
    g = tg_compile("root ::= (\"a\" | \"aa\" | e)* \"b\"\ne ::= \"\"?");
    tg_expect(g, "aaab", 1);
    tg_expect(g, "b", 1);
    tg_expect(g, "aaba", -1);
    gr_unref(g);

    /* rules spanning lines, xgrammar style, and single-quoted literals */
    g = tg_compile("root ::= 'x'\n   | \"y\"\n   | z\nz ::= \"\\u00e9\\x41\"");
    tg_expect(g, "x", 1);
    tg_expect(g, "y", 1);
    tg_expect(g, "\xc3\xa9" "A", 1);
    gr_unref(g);
}

Test(grammar, regex_and_choice_front_ends)
{
    gr_error e;
    gr_grammar *g = gr_compile_regex("(ab|c)+\\d{2}", 12, &e);
    cr_assert_not_null(g, "%s", e.msg);
    tg_expect(g, "abcab12", 1);
    tg_expect(g, "c1", 0);
    tg_expect(g, "12", -1);
    gr_unref(g);
    cr_assert_null(gr_compile_regex("a(?=b)", 6, &e));
    cr_expect_eq(e.pos, 1);
    cr_assert_null(gr_compile_regex("(a", 2, &e));
    cr_assert_null(gr_compile_regex("a\\1", 3, &e));
    cr_expect(strstr(e.msg, "backreferences") != NULL);
    const char *ch[] = {"yes", "no", "y\"es"};
    size_t len[] = {3, 2, 4};
    g = gr_compile_choice(ch, len, 3, &e);
    cr_assert_not_null(g, "%s", e.msg);
    tg_expect(g, "yes", 1);
    tg_expect(g, "y\"es", 1);
    tg_expect(g, "n", 0);
    tg_expect(g, "yess", -1);
    gr_unref(g);
    const char *bad[] = {"\xff"};
    size_t bl[] = {1};
    cr_assert_null(gr_compile_choice(bad, bl, 1, &e));
}

/* ---- masks against the oracle ---------------------------------------------------------------- */

typedef struct tg_voc {
    char *tok[600];
    int len[600];
    int n;
    int32_t eog;
    gr_vocab *v;
} tg_voc;

/* A vocabulary over alpha: every single byte of it, random strings of 2..5 of its characters,
 * the pieces of the multi-byte characters split in every way, and an end-of-generation id. */
static void tg_voc_make(tg_voc *tv, const char *alpha, uint64_t *rng, int n_random)
{
    memset(tv, 0, sizeof *tv);
    size_t na = strlen(alpha);
    for (size_t i = 0; i < na; i++) {
        char b[2] = {alpha[i], 0};
        int dup = 0;
        for (int k = 0; k < tv->n; k++) dup |= tv->len[k] == 1 && tv->tok[k][0] == b[0];
        if (dup) continue;
        tv->tok[tv->n] = strdup(b);
        tv->len[tv->n++] = 1;
    }
    /* multi-byte characters: whole, split, and glued to ASCII neighbours */
    const char *pieces[] = {"\xc3\xa9", "\xc3", "\xa9", "a\xc3", "\xa9" "b", "\xe2\x82\xac", "\xe2\x82", "\xac\"", "\xf0\x9f\x98\x80", "\xf0\x9f", "\x98\x80"};
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) {
        tv->tok[tv->n] = strdup(pieces[i]);
        tv->len[tv->n++] = (int)strlen(pieces[i]);
    }
    /* every byte of those as a token of its own, as byte fallback and byte-level BPE have */
    const char *high = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    for (const char *h = high; *h; h++) {
        tv->tok[tv->n] = malloc(2);
        tv->tok[tv->n][0] = *h;
        tv->tok[tv->n][1] = 0;
        tv->len[tv->n++] = 1;
    }
    for (int i = 0; i < n_random && tv->n < 590; i++) {
        int l = 2 + (int)(tg_rng(rng) % 4);
        char b[8];
        for (int k = 0; k < l; k++) b[k] = alpha[tg_rng(rng) % na];
        b[l] = 0;
        tv->tok[tv->n] = strdup(b);
        tv->len[tv->n++] = l;
    }
    tv->eog = tv->n;
    tv->tok[tv->n] = NULL;
    tv->len[tv->n++] = 0;
    tv->v = gr_vocab_create_raw(tv->n, (const char *const *)tv->tok, tv->len, &tv->eog, 1);
    cr_assert_not_null(tv->v);
}

static void tg_voc_free(tg_voc *tv)
{
    for (int i = 0; i < tv->n; i++) free(tv->tok[i]);
    gr_vocab_destroy(tv->v);
}

/* Compares m's mask with the oracle; returns the allowed count. */
static int tg_check_mask(gr_matcher *m, const tg_voc *tv, uint32_t *mask, const char *ctx)
{
    int n = gr_matcher_fill_mask(m, mask);
    cr_assert(n >= 0);
    int count = 0;
    for (int t = 0; t < tv->n; t++) {
        gr_matcher *c = gr_matcher_clone(m);
        cr_assert_not_null(c);
        int ok = gr_matcher_accept(c, t) == 0;
        gr_matcher_check(c);
        gr_matcher_destroy(c);
        int bit = (mask[t >> 5] >> (t & 31)) & 1;
        cr_assert_eq(bit, ok, "token %d '%s' after '%s': mask %d, oracle %d", t, tv->tok[t] ? tv->tok[t] : "<eog>", ctx, bit, ok);
        count += ok;
    }
    cr_assert_eq(n, count);
    return count;
}

/* Random walks: at each step the mask must equal the oracle; then a random allowed token. */
static void tg_walks(const char *src, const char *alpha, uint64_t seed, int walks, int max_steps)
{
    fprintf(stderr, "grammar/walks: seed %llu (replay with KVSERVE_TEST_SEED)\n", (unsigned long long)seed);
    uint64_t rng = seed;
    tg_voc tv;
    tg_voc_make(&tv, alpha, &rng, 300);
    gr_grammar *g = tg_compile(src);
    uint32_t mask[GR_MASK_WORDS(600)];
    for (int w = 0; w < walks; w++) {
        gr_matcher *m = gr_matcher_create(g, tv.v);
        char out[4096];
        size_t on = 0;
        out[0] = 0;
        for (int step = 0; step < max_steps; step++) {
            int n = tg_check_mask(m, &tv, mask, out);
            cr_assert(n > 0, "dead end after '%s'", out);
            int pick = (int)(tg_rng(&rng) % (uint64_t)n), t = -1;
            for (int k = 0; k < tv.n; k++)
                if ((mask[k >> 5] >> (k & 31)) & 1 && pick-- == 0) {
                    t = k;
                    break;
                }
            cr_assert_eq(gr_matcher_accept(m, t), 0);
            gr_matcher_check(m);
            if (t == tv.eog) break;
            if (on + (size_t)tv.len[t] < sizeof out - 1) {
                memcpy(out + on, tv.tok[t], (size_t)tv.len[t]);
                on += (size_t)tv.len[t];
                out[on] = 0;
            }
        }
        if (gr_matcher_is_terminated(m)) cr_assert_eq(tg_match(g, out, on), 1, "finished output '%s' is not in the language", out);
        gr_matcher_destroy(m);
    }
    gr_unref(g);
    tg_voc_free(&tv);
}

static const char TG_JSON[] =
    "root ::= value\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws (\",\" ws value ws)* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,5}) (\".\" [0-9]{1,3})?\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,3}\n";

Test(grammar, masks_match_oracle_json)
{
    tg_walks(TG_JSON, "{}[],:\" \n\t0123456789-.abeflnrstu\\", tg_seed(0x6a501), 12, 60);
}

Test(grammar, masks_match_oracle_recursive_and_regular)
{
    tg_walks("root ::= expr\nexpr ::= expr [+*] term | term\nterm ::= [0-9]{1,3} | \"(\" expr \")\"", "()+*0123456789", tg_seed(0x6a502), 12, 40);
    tg_walks("root ::= [a-c]{2,4} (\"x\" | \"yz\")* \"\\u00e9\" [\\u20ac-\\u20ac]? \"!\"", "abcxyz!", tg_seed(0x6a503), 12, 30);
    tg_walks("root ::= (\"a\" | \"ab\" | \"abc\")+ \"\\\"\" | \"\\U0001F600\"+", "abc\"", tg_seed(0x6a504), 12, 30);
}

Test(grammar, masks_done_eog_and_dead_paths)
{
    uint64_t rng = 7;
    tg_voc tv;
    tg_voc_make(&tv, "ab", &rng, 20);
    gr_grammar *g = tg_compile("root ::= \"ab\"");
    gr_matcher *m = gr_matcher_create(g, tv.v);
    uint32_t mask[GR_MASK_WORDS(600)];
    cr_assert_eq(gr_matcher_accept(m, tv.eog), -EINVAL, "end of generation before the output is complete");
    cr_assert_eq(gr_matcher_accept_bytes(m, "ab", 2), 0);
    cr_assert(gr_matcher_is_done(m));
    cr_assert_eq(gr_matcher_fill_mask(m, mask), 1, "only end of generation after a complete output");
    cr_assert((mask[tv.eog >> 5] >> (tv.eog & 31)) & 1);
    cr_assert_eq(gr_matcher_accept_bytes(m, "a", 1), -EINVAL);
    cr_assert_eq(gr_matcher_accept(m, tv.eog), 0);
    cr_assert(gr_matcher_is_terminated(m));
    cr_assert_eq(gr_matcher_fill_mask(m, mask), 1);
    gr_matcher_destroy(m);
    gr_unref(g);
    tg_voc_free(&tv);
}

Test(grammar, nesting_depth_is_bounded)
{
    gr_grammar *g = tg_compile("root ::= \"[\" root? \"]\"");
    char *s = malloc(10000);
    memset(s, '[', 5000);
    int r = tg_match(g, s, 5000);
    cr_expect_eq(r, -1, "nesting past the stack bound is refused, not crashed on");
    cr_expect_eq(tg_match(g, s, 1000), 0);
    free(s);
    gr_unref(g);
}

Test(grammar, cache_is_lru_by_key)
{
    gr_cache *c = gr_cache_create(2, 0);
    gr_grammar *a = tg_compile("root ::= \"a\""), *b = tg_compile("root ::= \"b\""), *d = tg_compile("root ::= \"d\"");
    gr_cache_put(c, "A", 1, a);
    gr_cache_put(c, "B", 1, b);
    gr_grammar *x = gr_cache_get(c, "A", 1); /* A is now the most recent */
    cr_assert_eq(x, a);
    gr_unref(x);
    gr_cache_put(c, "D", 1, d);
    cr_assert_null(gr_cache_get(c, "B", 1), "the least recently used entry is evicted");
    x = gr_cache_get(c, "A", 1);
    cr_assert_eq(x, a);
    gr_unref(x);
    int n;
    int64_t lookups, hits;
    gr_cache_stats(c, &n, &lookups, &hits);
    cr_assert_eq(n, 2);
    cr_assert_eq(lookups, 3);
    cr_assert_eq(hits, 2);
    gr_unref(a);
    gr_unref(b);
    gr_unref(d);
    gr_cache_destroy(c);
}
