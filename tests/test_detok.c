/*
 * test_detok.c — the incremental detokenizer on the stories260K vocabulary (SentencePiece with
 * byte fallback: byte b is token b + 3). Skips when the shared model directory is absent.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/detok.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"

static tokenizer *td_tok;
static gguf_file *td_gguf;

static void td_setup(void)
{
    const char *sh = getenv("KVSERVE_SHARED");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", sh && *sh ? sh : "../shared");
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
        if (!td_tok) cr_skip_test("stories260K.gguf not found under KVSERVE_SHARED");      \
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
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0), 0);
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
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, stop, 1), 0);
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
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, stop, 4), 0);
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
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, stop, 1), 0);
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
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0), 0);
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
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0), 0);
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
    cr_assert_eq(detok_init(&d, td_tok, bos, 1, NULL, 0), 0);
    td_run(&d, ids, 2, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, "Once upon", "SentencePiece drops the first space after a lone BOS");
    detok_fini(&d);
    cr_assert_eq(detok_init(&d, td_tok, two, 2, NULL, 0), 0);
    td_run(&d, ids, 2, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, " Once upon");
    detok_fini(&d);
}

Test(detok, control_tokens_emit_nothing)
{
    TD_NEED_MODEL();
    int32_t prompt[] = {1, 291};
    detok d;
    cr_assert_eq(detok_init(&d, td_tok, prompt, 2, NULL, 0), 0);
    int32_t ids[] = {403, 1, 2, 407};
    char out[128];
    td_run(&d, ids, 4, 1, out, sizeof out, NULL);
    cr_assert_str_eq(out, " Once upon");
    detok_fini(&d);
}
