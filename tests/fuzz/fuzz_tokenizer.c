/*
 * fuzz_tokenizer.c — libFuzzer target for the tokenizers.
 *
 * The first input byte picks a mode, the rest is the payload:
 *   bit 0: byte-level BPE (llama-bpe pre-tokenizer) instead of SentencePiece
 *   bit 1: add_special     bit 2: parse_special
 *   bit 3: the payload is a GGUF file: tok_create must refuse it with a one-line message or
 *          build a tokenizer that encodes and decodes a fixed text without fault.
 * Otherwise the payload is text: every id must be in range, the count must not depend on the
 * buffer's size, and valid UTF-8 must decode back to itself when no control token is parsed
 * (SentencePiece: unless it holds U+2581, its space marker, or a user-defined token).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"
#include "model/tokenizer.h"

static tokenizer *fz_tok[2];

static void fz_build(void)
{
    static char bytes[256][8];
    static const char *const extra[] = {"<|im_start|>",
                                        "<|im_end|>",
                                        "<ud>",
                                        "ab",
                                        "abc",
                                        "\xe2\x96\x81"
                                        "a",
                                        "\xe2\x96\x81",
                                        "\xc4\xa0"
                                        "a"};
    static const int32_t xtype[] = {
        TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_USER_DEFINED, 1, 1, 1, 1, 1};
    static const char *const merges[] = {"a b", "ab c", "\xc4\xa0 a"};
    const char *pieces[3 + 256 + 8];
    int32_t types[3 + 256 + 8];
    float scores[3 + 256 + 8];
    for (int kind = 0; kind < 2; kind++) {
        int n = 0;
        if (kind == TOK_KIND_SPM) {
            pieces[n] = "<unk>", types[n++] = TOK_TYPE_UNKNOWN;
            pieces[n] = "<s>", types[n++] = TOK_TYPE_CONTROL;
            pieces[n] = "</s>", types[n++] = TOK_TYPE_CONTROL;
        }
        for (int b = 0; b < 256; b++) {
            if (kind == TOK_KIND_SPM) {
                static const char hex[] = "0123456789ABCDEF";
                char *p = bytes[b];
                memcpy(p, "<0x", 3);
                p[3] = hex[b >> 4], p[4] = hex[b & 15], p[5] = '>', p[6] = 0;
                types[n] = TOK_TYPE_BYTE;
            } else {
                int l = tok__byte_to_unicode((unsigned char)b, bytes[b]);
                bytes[b][l] = 0;
                types[n] = TOK_TYPE_NORMAL;
            }
            pieces[n++] = bytes[b];
        }
        for (int i = 0; i < 8; i++)
            pieces[n] = extra[i], types[n++] = xtype[i];
        for (int i = 0; i < n; i++)
            scores[i] = -(float)i;
        tok_spec s;
        tok__spec_init(&s, kind);
        s.n_vocab = n;
        s.pieces = pieces;
        s.types = types;
        s.scores = scores;
        s.merges = merges;
        s.n_merges = kind == TOK_KIND_BPE ? 3 : 0;
        s.pre = "llama-bpe";
        fz_tok[kind] = tok__create_spec(&s, NULL, 0);
        if (!fz_tok[kind]) __builtin_trap();
    }
}

static int fz_valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n) return 0;
        uint32_t cp = l == 1 ? c : (uint32_t)(c & (0x7f >> l));
        for (size_t k = 1; k < l; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) || (l == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += l;
    }
    return 1;
}

static int fz_has_user_defined(const tokenizer *t, const char *text, size_t len)
{
    for (int i = 0; i < t->n_special; i++) {
        int32_t id = t->special[i];
        if (t->types[id] == TOK_TYPE_USER_DEFINED &&
            memmem(text, len, t->pieces[id], t->piece_len[id]))
            return 1;
    }
    return 0;
}

static void fz_roundtrip(const tokenizer *t, const char *text, size_t len, int add, int special)
{
    int n = tok_encode(t, text, len, add, special, NULL, 0);
    if (n < 0) __builtin_trap();
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return;
    if (tok_encode(t, text, len, add, special, ids, n) != n) __builtin_trap();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(t)) __builtin_trap();
    int dl = tok_decode(t, ids, n, 1, NULL, 0);
    char *back = malloc((size_t)dl + 1);
    if (back && tok_decode(t, ids, n, 1, back, dl) != dl) __builtin_trap();
    /* SentencePiece reads a literal U+2581 as its space marker, so such text decodes with a
     * space instead, and it puts a dummy-prefix space after every special token (user-defined
     * ones included, as llama.cpp does): such texts are not expected to round-trip. */
    int spm_marker = tok_kind(t) == TOK_KIND_SPM &&
                     (memmem(text, len, "\xe2\x96\x81", 3) || fz_has_user_defined(t, text, len));
    if (back && !special && !spm_marker && fz_valid_utf8((const uint8_t *)text, len) &&
        (dl != (int)len || memcmp(back, text, len)))
        __builtin_trap();
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fz_tok[0]) fz_build();
    if (size < 1) return 0;
    int mode = data[0];
    const char *payload = (const char *)data + 1;
    size_t len = size - 1;
    if (mode & 8) {
        gguf_file *f;
        char err[512];
        if (gguf_open_mem(payload, len, &f, err, sizeof err)) return 0;
        tokenizer *t = tok_create(f, err, sizeof err);
        if (!t && (!err[0] || strchr(err, '\n'))) __builtin_trap();
        if (t) {
            static const char txt[] = "Hello <s> world\n\t12345 <|im_end|>";
            fz_roundtrip(t, txt, sizeof txt - 1, mode & 2, 1);
            tok_destroy(t);
        }
        gguf_close(f);
        return 0;
    }
    fz_roundtrip(fz_tok[mode & 1], payload, len, mode & 2, mode & 4);
    return 0;
}
