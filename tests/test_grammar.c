/*
 * test_grammar.c — the grammar engine (grammar/grammar.h): GBNF parsing and its errors, the
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

#include "model/gguf.h"
#include "base/buf.h"
#include "grammar/grammar.h"
#include "model/tokenizer.h"
#include "tests/grammar_harness.h"
#include "tests/test_util.h"

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
    tg_error("root ::= [a-z]{100000} [a-z]{100000} [a-z]{100000}", 0, 0, "too large");
    tg_error("root ::= ([a-z]{30}){100000} [a-z]{100000}", 0, 0, "too large");
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

/* Compares m's mask with the oracle; returns the allowed count. */
static int tg_check_mask(gr_matcher *m, const gh_voc *tv, uint32_t *mask, const char *ctx)
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
    gh_voc tv;
    gh_voc_make(&tv, alpha, NULL, &rng, 300);
    gr_grammar *g = tg_compile(src);
    uint32_t mask[GR_MASK_WORDS(GH_MAX_TOK)];
    for (int w = 0; w < walks; w++) {
        gr_matcher *m = gr_matcher_create(g, tv.v);
        char out[4096];
        size_t on = 0;
        out[0] = 0;
        for (int step = 0; step < max_steps; step++) {
            int n = tg_check_mask(m, &tv, mask, out);
            cr_assert(n > 0, "dead end after '%s'", out);
            int pick = (int)(tu_xorshift(&rng) % (uint64_t)n), t = -1;
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
    gh_voc_free(&tv);
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
    tg_walks(TG_JSON, "{}[],:\" \n\t0123456789-.abeflnrstu\\", tu_seed(0x6a501), 12, 60);
}

Test(grammar, masks_match_oracle_recursive_and_regular)
{
    tg_walks("root ::= expr\nexpr ::= expr [+*] term | term\nterm ::= [0-9]{1,3} | \"(\" expr \")\"", "()+*0123456789", tu_seed(0x6a502), 12, 40);
    tg_walks("root ::= [a-c]{2,4} (\"x\" | \"yz\")* \"\\u00e9\" [\\u20ac-\\u20ac]? \"!\"", "abcxyz!", tu_seed(0x6a503), 12, 30);
    tg_walks("root ::= (\"a\" | \"ab\" | \"abc\")+ \"\\\"\" | \"\\U0001F600\"+", "abc\"", tu_seed(0x6a504), 12, 30);
    /* a large part repeated many times becomes a called rule (not 400 copies) */
    tg_walks("root ::= (\"<\" [a-c]{8} (\">\" | \"/>\")){0,400} \".\"", "<>/abc.", tu_seed(0x6a505), 12, 40);
}

Test(grammar, masks_done_eog_and_dead_paths)
{
    uint64_t rng = 7;
    gh_voc tv;
    gh_voc_make(&tv, "ab", NULL, &rng, 20);
    gr_grammar *g = tg_compile("root ::= \"ab\"");
    gr_matcher *m = gr_matcher_create(g, tv.v);
    uint32_t mask[GR_MASK_WORDS(GH_MAX_TOK)];
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
    gh_voc_free(&tv);
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

/* ---- regexes against Python's re.fullmatch ------------------------------------------------ */

static const char *const TG_REGEXES[] = {
    "[a-c]{2,4}(x|yz)*", "\\d{3}-\\d{4}", "(ab|a)*b?", "[^a-c\\n]{1,3}[0-9]+", "\\w+@\\w+\\.(com|org)",
    "\\u00e9+\\u20ac?\\s[a-z]", "(a|b|c){0,3}\\.[0-9]{2}", "x*y*z*", "-?\\d+(\\.\\d+)?", "[A-Z][a-z]{1,3}( [A-Z][a-z]{1,3})?",
    "^(a|b)+c$", ".{2}x", "[\\d.-]+", "(?:ab){2}|(?P<n>z+)", NULL};

/* Appends s as a JSON string to b. */
static void tg_json_str(buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') buf_printf(b, "\\%c", c);
        else if (c < 0x20) buf_printf(b, "\\u%04x", c);
        else buf_put(b, s + i, 1);
    }
    buf_puts(b, "\"");
}

/* The k-th verdict of the JSON line `line` ({"ok": [...]}). */
static int tg_verdict(const char *line, int k)
{
    const char *p = strstr(line, "\"ok\": [");
    cr_assert_not_null(p, "bad reply: %s", line);
    p += 7;
    for (int i = 0; i < k; i++) p = strchr(p, ',') + 1;
    while (*p == ' ') p++;
    return *p == 't';
}

Test(grammar, regex_outputs_fullmatch_in_python)
{
    uint64_t seed = tu_seed(0x7e9e), rng = seed;
    fprintf(stderr, "grammar/regex: seed %llu (replay with KVSERVE_TEST_SEED)\n", (unsigned long long)seed);
    static const char *const extra[] = {"a-1", "-9", "yzx", ".c", "com", "@a", "b.", "1.", "Ab", " B", "ab", NULL};
    gh_voc tv;
    gh_voc_make(&tv, "abcdefghijklmnopqrstuvwxyzABZ0123456789-.@_ \n", extra, &rng, 120);
    /* the enumerated candidates: every string of up to 3 characters over this alphabet */
    static const char *const alpha[] = {"a", "b", "c", "x", "z", "0", "9", "-", ".", " ", "\xc3\xa9", "A"};
    const int na = 12;
    char (*cands)[16] = malloc(2000 * sizeof *cands);
    int nc = 0;
    for (int len = 0; len <= 3; len++) {
        int idx[3] = {0};
        for (;;) {
            cands[nc][0] = 0;
            for (int k = 0; k < len; k++) strcat(cands[nc], alpha[idx[k]]);
            nc++;
            int k = len - 1;
            while (k >= 0 && ++idx[k] == na) idx[k--] = 0;
            if (k < 0) break;
        }
    }
    buf q = {0};
    char outs[16][20][256];
    int n_out[16] = {0};
    int nr = 0;
    for (; TG_REGEXES[nr]; nr++) {
        gr_error e;
        gr_grammar *g = gr_compile_regex(TG_REGEXES[nr], strlen(TG_REGEXES[nr]), &e);
        cr_assert_not_null(g, "'%s': %s", TG_REGEXES[nr], e.msg);
        for (int w = 0; w < 20; w++)
            if (gh_generate(g, &tv, &rng, 8, 60, NULL, outs[nr][n_out[nr]], sizeof outs[nr][0])) n_out[nr]++;
        cr_assert_gt(n_out[nr], 10, "'%s': most generations should finish", TG_REGEXES[nr]);
        gr_unref(g);
        buf_puts(&q, "{\"re\": ");
        tg_json_str(&q, TG_REGEXES[nr], strlen(TG_REGEXES[nr]));
        buf_puts(&q, ", \"strings\": [");
        for (int i = 0; i < n_out[nr] + nc; i++) {
            const char *t = i < n_out[nr] ? outs[nr][i] : cands[i - n_out[nr]];
            if (i) buf_puts(&q, ", ");
            tg_json_str(&q, t, strlen(t));
        }
        buf_puts(&q, "]}\n");
    }
    char *input = buf_take(&q);
    char *reply = gh_python(input);
    free(input);
    char *line = reply;
    for (int r = 0; r < nr; r++) {
        char *nl = strchr(line, '\n');
        cr_assert_not_null(nl);
        *nl = 0;
        gr_grammar *g = gr_compile_regex(TG_REGEXES[r], strlen(TG_REGEXES[r]), NULL);
        for (int i = 0; i < n_out[r]; i++)
            cr_assert(tg_verdict(line, i), "'%s' generated '%s', which Python's re.fullmatch rejects", TG_REGEXES[r], outs[r][i]);
        for (int i = 0; i < nc; i++) {
            int py = tg_verdict(line, n_out[r] + i), ours = tg_match(g, cands[i], strlen(cands[i])) == 1;
            cr_assert_eq(ours, py, "'%s' on '%s': grammar %d, Python %d", TG_REGEXES[r], cands[i], ours, py);
        }
        gr_unref(g);
        line = nl + 1;
    }
    free(reply);
    free(cands);
    gh_voc_free(&tv);
}

/* ---- real vocabularies ------------------------------------------------------------------------ */

/* Loads ../shared/models/vocab/NAME's tokenizer (skips when absent). */
static tokenizer *tg_real_tok(const char *name, gguf_file **f)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/vocab/%s", tu_shared_dir(), name);
    if (access(path, R_OK)) cr_skip_test("%s is missing (the shared models folder is not here)", path);
    cr_assert_eq(gguf_open(path, f, err, sizeof err), 0, "%s", err);
    tokenizer *t = tok_create(*f, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    return t;
}

/* A few steps of a random walk under g on t's vocabulary; at each, the mask against the oracle
 * (a clone accepting each token) and the tokens whose bytes end inside a UTF-8 character. */
static void tg_real_walk(const char *name, const char *src, uint64_t seed)
{
    gguf_file *f;
    tokenizer *t = tg_real_tok(name, &f);
    int nv = tok_n_vocab(t);
    gr_vocab *v = gr_vocab_create(t, nv);
    cr_assert_not_null(v);
    gr_grammar *g = tg_compile(src);
    gr_matcher *m = gr_matcher_create(g, v);
    uint32_t *mask = malloc(GR_MASK_WORDS(nv) * sizeof *mask);
    uint64_t rng = seed;
    int partial = 0;
    for (int step = 0; step < 6; step++) {
        int n = gr_matcher_fill_mask(m, mask), count = 0;
        cr_assert(n > 0);
        for (int id = 0; id < nv; id++) {
            gr_matcher *c = gr_matcher_clone(m);
            int ok = gr_matcher_accept(c, id) == 0;
            gr_matcher_destroy(c);
            cr_assert_eq(gh_allowed(mask, id), ok, "%s step %d token %d ('%s'): mask %d, oracle %d", name, step, id, tok_piece(t, id),
                         gh_allowed(mask, id), ok);
            count += ok;
            if (ok && !partial) { /* a token ending inside a character (a lead byte without its tail) */
                char b[64];
                int l = tok_token_bytes(t, id, 0, b, sizeof b);
                partial = l > 0 && l <= 64 && ((unsigned char)b[l - 1] >= 0xC0 || ((unsigned char)b[l - 1] >= 0x80 && l == 1));
            }
        }
        cr_assert_eq(n, count);
        int pick = (int)(tu_xorshift(&rng) % (uint64_t)n), tk = -1;
        for (int id = 0; id < nv && tk < 0; id++)
            if (gh_allowed(mask, id) && pick-- == 0) tk = id;
        cr_assert_eq(gr_matcher_accept(m, tk), 0);
        if (gr_matcher_is_terminated(m)) break;
    }
    cr_assert(partial, "%s: some allowed token should end inside a UTF-8 character", name);
    free(mask);
    gr_matcher_destroy(m);
    gr_unref(g);
    gr_vocab_destroy(v);
    tok_destroy(t);
    gguf_close(f);
}

static const char TG_TEXT[] = "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,40} \"\\\"\"\n";

Test(grammar, masks_on_real_spm_vocabulary)
{
    tg_real_walk("ggml-vocab-llama-spm.gguf", TG_TEXT, tu_seed(41));
}

Test(grammar, masks_on_real_bpe_vocabulary)
{
    tg_real_walk("ggml-vocab-gpt-2.gguf", TG_TEXT, tu_seed(42));
}
