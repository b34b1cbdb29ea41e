/*
 * test_detok.c — the incremental detokenizer. Suite "detok" runs on the stories260K vocabulary
 * (SentencePiece with byte fallback: byte b is token b + 3) and skips when the shared model
 * directory is absent; suite "detok_bytes" runs on a vocabulary the test writes itself (mkmodel)
 * using byte tokens only, so it needs nothing from outside.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "model/mkmodel.h"
#include "engine/detok.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/test_util.h"

static tokenizer *td_tok;
static gguf_file *td_gguf;

static void td_setup(void)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    if (gguf_open(path, &td_gguf, err, sizeof err)) {
        td_gguf = NULL;
        return;
    }
    td_tok = tok_create(td_gguf, err, sizeof err);
    cr_assert_not_null(td_tok, "tok_create: %s", err);
}

static void td_teardown(void)
{
    tok_destroy(td_tok);
    if (td_gguf) gguf_close(td_gguf);
    td_tok = NULL;
    td_gguf = NULL;
}

#define TD_NEED_MODEL()                                                                      \
    do {                                                                                     \
        cr_assert_not_null(td_tok, "stories260K.gguf missing from KVSERVE_DATA (%s)", tu_data_dir()); \
    } while (0)

/* Pushes ids and concatenates the deltas into out; returns the index of the token that hit a
 * stop string, or -1. With flush, the end-of-choice flush is appended. */
static int td_run(detok *d, const int32_t *ids, int n, int flush, char *out, size_t cap,
                  char deltas[][64])
{
    size_t w = 0;
    int stop = -1;
    out[0] = 0;
    for (int i = 0; i < n && stop < 0; i++) {
        const char *t;
        size_t l;
        int rc = detok_push(d, ids[i], &t, &l);
        cr_assert_geq(rc, 0);
        cr_assert_eq(strlen(t), l);
        if (deltas) snprintf(deltas[i], 64, "%s", t);
        cr_assert_lt(w + l, cap);
        memcpy(out + w, t, l + 1);
        w += l;
        if (rc == 1) stop = i;
    }
    if (flush) {
        const char *t;
        size_t l;
        cr_assert_eq(detok_flush(d, &t, &l), 0);
        memcpy(out + w, t, l + 1);
    }
    return stop;
}

TestSuite(detok, .init = td_setup, .fini = td_teardown);

Test(detok, utf8_split_across_byte_tokens)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 403};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0, 0), 0);
    /* "▁a" then 🐱 = F0 9F 90 B1 as four byte-fallback tokens */
    int32_t ids[] = {261, 0xF0 + 3, 0x9F + 3, 0x90 + 3, 0xB1 + 3};
    char out[128], deltas[5][64];
    cr_assert_eq(td_run(&d, ids, 5, 1, out, sizeof out, deltas), -1);
    cr_assert_str_eq(deltas[0], " a");
    cr_assert_str_eq(deltas[1], "", "no delta may end inside a character");
    cr_assert_str_eq(deltas[2], "");
    cr_assert_str_eq(deltas[3], "");
    cr_assert_str_eq(deltas[4], "\xF0\x9F\x90\xB1");
    cr_assert_str_eq(out, " a\xF0\x9F\x90\xB1");
    detok_fini(&d);
}

Test(detok, stop_string_across_three_tokens)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    char *stop[] = {"nce upon a"};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, stop, 1, 0), 0);
    int32_t ids[] = {403, 407, 261, 378}; /* ▁Once ▁upon ▁a ▁time */
    char out[128], deltas[4][64];
    cr_assert_eq(td_run(&d, ids, 4, 0, out, sizeof out, deltas), 2, "the stop completes at ▁a");
    cr_assert_str_eq(deltas[0], " O", "'nce' could start the stop string: held back");
    cr_assert_str_eq(deltas[1], "");
    cr_assert_str_eq(deltas[2], "");
    cr_assert_str_eq(out, " O", "neither the stop string nor what follows is emitted");
    const char *t;
    size_t l;
    cr_assert_eq(detok_push(&d, 378, &t, &l), 1, "a stopped choice stays stopped");
    cr_assert_eq(l, 0);
    detok_fini(&d);
}

Test(detok, stop_prefix_that_diverges_is_emitted)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    char *stop[] = {"upon the", "zzz", NULL, ""};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, stop, 4, 0), 0);
    int32_t ids[] = {403, 407, 261}; /* ▁Once ▁upon ▁a */
    char out[128], deltas[3][64];
    cr_assert_eq(td_run(&d, ids, 3, 0, out, sizeof out, deltas), -1);
    cr_assert_str_eq(deltas[0], " Once");
    cr_assert_str_eq(deltas[1], " ", "'upon' could start 'upon the': held back");
    cr_assert_str_eq(deltas[2], "upon a", "the held text is emitted once it diverges");
    cr_assert_str_eq(out, " Once upon a");
    detok_fini(&d);
}

Test(detok, held_stop_prefix_flushed_at_finish)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    char *stop[] = {"upon the"};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, stop, 1, 0), 0);
    int32_t ids[] = {403, 407};
    char out[128];
    cr_assert_eq(td_run(&d, ids, 2, 1, out, sizeof out, NULL), -1);
    cr_assert_str_eq(out, " Once upon");
    detok_fini(&d);
}

Test(detok, max_tokens_inside_a_character)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0, 0), 0);
    int32_t ids[] = {261, 0xF0 + 3, 0x9F + 3};
    char out[128], deltas[3][64];
    cr_assert_eq(td_run(&d, ids, 3, 1, out, sizeof out, deltas), -1);
    cr_assert_str_eq(deltas[2], "");
    cr_assert_str_eq(out, " a\xEF\xBF\xBD", "a truncated character becomes one U+FFFD at the end");
    detok_fini(&d);
}

Test(detok, invalid_bytes_become_replacement)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0, 0), 0);
    int32_t ids[] = {0x80 + 3, 261, 0xFF + 3};
    char out[128];
    td_run(&d, ids, 3, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, "\xEF\xBF\xBD a\xEF\xBF\xBD");
    detok_fini(&d);
}

Test(detok, leading_space_after_bos_only)
{
    TD_NEED_MODEL();
    int32_t bos[] = {1}, two[] = {1, 291};
    int32_t ids[] = {403, 407};
    char out[128];
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, bos, 1, NULL, 0, 0), 0);
    td_run(&d, ids, 2, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, "Once upon", "SentencePiece drops the first space after a lone BOS");
    detok_fini(&d);
    cr_assert_eq(detok_init(&d, td_tok, two, 2, NULL, 0, 0), 0);
    td_run(&d, ids, 2, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, " Once upon");
    detok_fini(&d);
}

Test(detok, control_tokens_emit_nothing)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0, 0), 0);
    int32_t ids[] = {403, 1, 2, 407};
    char out[128];
    td_run(&d, ids, 4, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, " Once upon");
    detok_fini(&d);
}

/* ---- detok_bytes: a generated vocabulary, byte tokens only ---------------------------------- */

static tokenizer *tdb_tok;
static gguf_file *tdb_gguf;

static void tdb_setup(void)
{
    char path[1024], err[256];
    mkm_params p;
    mkm_params_default(&p);
    p.dim = 32;
    p.layers = 1;
    p.heads = 2;
    p.vocab = 300;
    p.context = 64;
    tu_write_mkmodel(&p, "detok", path, sizeof path);
    cr_assert_eq(gguf_open(path, &tdb_gguf, err, sizeof err), 0, "%s", err);
    unlink(path);
    tdb_tok = tok_create(tdb_gguf, err, sizeof err);
    cr_assert_not_null(tdb_tok, "tok_create: %s", err);
}

static void tdb_teardown(void)
{
    tok_destroy(tdb_tok);
    gguf_close(tdb_gguf);
}

/* Id of the byte token for b. */
static int32_t tdb_byte(int b)
{
    char piece[8];
    snprintf(piece, sizeof piece, "<0x%02X>", b);
    int32_t id = tok_find(tdb_tok, piece);
    cr_assert_geq(id, 0, "no byte token %s", piece);
    return id;
}

/* The byte tokens of a string. */
static int tdb_bytes(const char *s, int32_t *ids)
{
    int n = 0;
    for (; s[n]; n++) ids[n] = tdb_byte((unsigned char)s[n]);
    return n;
}

static detok tdb_d;

static void tdb_init(int n_stop, char *const *stop)
{
    int32_t prompt[2] = {tok_bos(tdb_tok), tdb_byte('x')};
    cr_assert_eq(detok_init(&tdb_d, tdb_tok, prompt, 2, stop, n_stop, 0), 0);
}

TestSuite(detok_bytes, .init = tdb_setup, .fini = tdb_teardown);

Test(detok_bytes, utf8_held_until_complete)
{
    tdb_init(0, NULL);
    int32_t ids[8];
    int n = tdb_bytes("a\xE2\x82\xAC", ids); /* a € */
    char out[64], deltas[8][64];
    td_run(&tdb_d, ids, n, 1, out, sizeof out, deltas);
    cr_assert_str_eq(deltas[0], "a");
    cr_assert_str_eq(deltas[1], "");
    cr_assert_str_eq(deltas[2], "");
    cr_assert_str_eq(deltas[3], "\xE2\x82\xAC");
    detok_fini(&tdb_d);
}

Test(detok_bytes, stop_string_over_three_tokens_and_diverging_prefix)
{
    char *stop[] = {"abc"};
    tdb_init(1, stop);
    int32_t ids[16];
    int n = tdb_bytes("xabyabc!", ids);
    char out[64], deltas[16][64];
    cr_assert_eq(td_run(&tdb_d, ids, n, 0, out, sizeof out, deltas), 6, "stops at the c of abc");
    cr_assert_str_eq(deltas[1], "", "'a' may start the stop string");
    cr_assert_str_eq(deltas[2], "");
    cr_assert_str_eq(deltas[3], "aby", "'ab' diverged: emitted");
    cr_assert_str_eq(out, "xaby");
    detok_fini(&tdb_d);
}

Test(detok_bytes, truncated_character_and_invalid_bytes)
{
    tdb_init(0, NULL);
    int32_t ids[8];
    int n = tdb_bytes("\x80z\xF0\x9F", ids);
    char out[64];
    td_run(&tdb_d, ids, n, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, "\xEF\xBF\xBDz\xEF\xBF\xBD");
    detok_fini(&tdb_d);
}

Test(detok_bytes, stop_string_of_a_multibyte_character)
{
    char *stop[] = {"\xE2\x82\xAC"}; /* the euro sign: matched on bytes */
    tdb_init(1, stop);
    int32_t ids[8];
    int n = tdb_bytes("ok\xE2\x82\xAC", ids);
    char out[64];
    cr_assert_eq(td_run(&tdb_d, ids, n, 0, out, sizeof out, NULL), 4);
    cr_assert_str_eq(out, "ok");
    detok_fini(&tdb_d);
}

/* include_stop keeps the matched stop string (and nothing after it); matched names it by its
 * index in the caller's list, which may hold more than four strings. */
Test(detok, include_stop_and_many_stops)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    char *stop[] = {"q", "w", "", "k", "y", "zz", "upon a", "x"};
    for (int inc = 0; inc < 2; inc++) {
        detok d;
        cr_assert_eq(detok_init(&d, td_tok, prompt, 2, stop, 8, inc), 0);
        int32_t ids[] = {403, 407, 261, 378}; /* ▁Once ▁upon ▁a ▁time */
        char out[128], deltas[4][64];
        cr_assert_eq(td_run(&d, ids, 4, 0, out, sizeof out, deltas), 2);
        cr_assert_eq(d.matched, 6);
        cr_assert_str_eq(out, inc ? " Once upon a" : " Once ");
        detok_fini(&d);
    }
}
