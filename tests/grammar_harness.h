/*
 * grammar_harness.h — shared by the structured-output tests: small vocabularies with tokens
 * that straddle grammar boundaries and split UTF-8 characters, random generation under a
 * grammar's masks, and reference verdicts from Python (tests/grammar_check.py: json +
 * jsonschema, re.fullmatch). Everything is static, so each test file gets its own copy.
 */
#ifndef KVSERVE_TESTS_GRAMMAR_HARNESS_H
#define KVSERVE_TESTS_GRAMMAR_HARNESS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "grammar/grammar.h"
#include "tests/test_util.h"

#define GH_MAX_TOK 1024

typedef struct gh_voc {
    char *tok[GH_MAX_TOK];
    int len[GH_MAX_TOK];
    int n;
    int32_t eog;
    gr_vocab *v;
} gh_voc;

static inline void gh_voc_add(gh_voc *tv, const char *s, int len)
{
    for (int k = 0; k < tv->n; k++)
        if (tv->len[k] == len && !memcmp(tv->tok[k], s, (size_t)len)) return;
    cr_assert_lt(tv->n, GH_MAX_TOK - 1);
    tv->tok[tv->n] = malloc((size_t)len + 1);
    memcpy(tv->tok[tv->n], s, (size_t)len);
    tv->tok[tv->n][len] = 0;
    tv->len[tv->n++] = len;
}

/* A vocabulary: every byte of alpha, the given extra tokens, multi-byte characters whole and
 * split (with each of their bytes as a token, as byte fallback and byte-level BPE have them),
 * n_random strings of 2..5 characters of alpha, and an end-of-generation id (last). */
static inline void gh_voc_make(gh_voc *tv, const char *alpha, const char *const *extra, uint64_t *rng, int n_random)
{
    memset(tv, 0, sizeof *tv);
    size_t na = strlen(alpha);
    for (size_t i = 0; i < na; i++) gh_voc_add(tv, alpha + i, 1);
    for (int i = 0; extra && extra[i]; i++) gh_voc_add(tv, extra[i], (int)strlen(extra[i]));
    static const char *const pieces[] = {"\xc3\xa9", "\xc3", "\xa9", "a\xc3", "\xa9" "b", "\xe2\x82\xac", "\xe2\x82", "\xac\"",
                                         "\xf0\x9f\x98\x80", "\xf0\x9f", "\x98\x80", NULL};
    for (int i = 0; pieces[i]; i++) {
        gh_voc_add(tv, pieces[i], (int)strlen(pieces[i]));
        for (const char *b = pieces[i]; *b; b++)
            if ((unsigned char)*b >= 0x80) gh_voc_add(tv, b, 1);
    }
    for (int i = 0; i < n_random && tv->n < GH_MAX_TOK - 2; i++) {
        int l = 2 + (int)(tu_xorshift(rng) % 4);
        char b[8];
        for (int k = 0; k < l; k++) b[k] = alpha[tu_xorshift(rng) % na];
        gh_voc_add(tv, b, l);
    }
    tv->eog = tv->n;
    tv->tok[tv->n] = NULL;
    tv->len[tv->n++] = 0;
    tv->v = gr_vocab_create_raw(tv->n, (const char *const *)tv->tok, tv->len, &tv->eog, 1);
    cr_assert_not_null(tv->v);
}

static inline void gh_voc_free(gh_voc *tv)
{
    for (int i = 0; i < tv->n; i++) free(tv->tok[i]);
    gr_vocab_destroy(tv->v);
}

static inline int gh_allowed(const uint32_t *mask, int t)
{
    return (mask[t >> 5] >> (t & 31)) & 1;
}

/* Generates under g: random allowed tokens (end-of-generation taken with probability 1/2 when
 * allowed; after soft_steps, tokens starting with one of `closers` are preferred) until
 * end-of-generation or max_steps. The text goes to out (NUL-terminated, at most cap - 1 bytes).
 * Returns 1 when generation ended with end-of-generation. */
static inline int gh_generate(gr_grammar *g, const gh_voc *tv, uint64_t *rng, int soft_steps, int max_steps,
                              const char *closers, char *out, size_t cap)
{
    gr_matcher *m = gr_matcher_create(g, tv->v);
    cr_assert_not_null(m);
    uint32_t mask[GR_MASK_WORDS(GH_MAX_TOK)];
    size_t on = 0;
    int done = 0;
    out[0] = 0;
    for (int step = 0; step < max_steps && !done; step++) {
        int n = gr_matcher_fill_mask(m, mask);
        cr_assert(n > 0, "dead end after '%s'", out);
        int t = -1;
        if (gh_allowed(mask, tv->eog) && tu_xorshift(rng) % 2) t = tv->eog;
        if (t < 0 && step >= soft_steps && closers) {
            int cand[GH_MAX_TOK], nc = 0;
            for (int k = 0; k < tv->n; k++)
                if (gh_allowed(mask, k) && tv->tok[k] && strchr(closers, tv->tok[k][0])) cand[nc++] = k;
            if (nc && tu_xorshift(rng) % 4) t = cand[tu_xorshift(rng) % (uint64_t)nc];
        }
        if (t < 0) {
            int pick = (int)(tu_xorshift(rng) % (uint64_t)n);
            for (int k = 0; k < tv->n && t < 0; k++)
                if (gh_allowed(mask, k) && pick-- == 0) t = k;
        }
        cr_assert_eq(gr_matcher_accept(m, t), 0);
        if (t == tv->eog) {
            done = 1;
        } else {
            cr_assert_lt(on + (size_t)tv->len[t], cap, "output too long for the test buffer");
            memcpy(out + on, tv->tok[t], (size_t)tv->len[t]);
            on += (size_t)tv->len[t];
            out[on] = 0;
        }
    }
    gr_matcher_destroy(m);
    return done;
}

/* Runs tests/grammar_check.py on the JSON lines in input; returns its stdout (malloc'd), or
 * skips the calling test when python3 or its jsonschema module is missing. */
static inline char *gh_python(const char *input)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0) cr_skip_test("python3 is not installed");
    const char *dir = getenv("TMPDIR");
    char in[480], out[512], cmd[1400];
    snprintf(in, sizeof in, "%s/kvserve-gh-in-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(in);
    cr_assert_geq(fd, 0);
    size_t n = strlen(input);
    cr_assert_eq(write(fd, input, n), (ssize_t)n);
    close(fd);
    snprintf(out, sizeof out, "%s.out", in);
    snprintf(cmd, sizeof cmd, "PYTHONIOENCODING=utf-8 python3 tests/grammar_check.py < '%s' > '%s'", in, out);
    int st = system(cmd);
    unlink(in);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
        unlink(out);
        cr_skip_test("Python's jsonschema is missing (Debian python3-jsonschema; scripts/deps.sh installs it)");
    }
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tests/grammar_check.py failed (status %d)", st);
    FILE *fp = fopen(out, "rb");
    cr_assert_not_null(fp);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    cr_assert_eq(fread(text, 1, (size_t)len, fp), (size_t)len);
    text[len] = 0;
    fclose(fp);
    unlink(out);
    return text;
}

#endif
