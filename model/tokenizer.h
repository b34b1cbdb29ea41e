/*
 * tokenizer.h — tokenizers built from a GGUF file's tokenizer.* metadata.
 *
 * Models: "llama" (SentencePiece BPE: scores, byte fallback, dummy prefix) and "gpt2" (byte-level
 * BPE with merges and a pre-tokenizer chosen by tokenizer.ggml.pre, regexes through PCRE2).
 * Only tokenizer.* keys are read, so vocabulary-only GGUF files work. A tokenizer is immutable
 * after creation and may be used from several threads at once.
 */
#ifndef KVSERVE_TOKENIZER_H
#define KVSERVE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

typedef struct tokenizer tokenizer;

enum tok_kind { TOK_KIND_SPM = 0, TOK_KIND_BPE = 1 };

/* Token types (tokenizer.ggml.token_type). */
enum tok_type {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Builds the tokenizer from f's metadata (f is only borrowed during the call). Returns NULL and a
 * one-line message in err when the metadata is missing or inconsistent or the model/pre-tokenizer
 * is unsupported. */
tokenizer *tok_create(const gguf_file *f, char *err, size_t err_len);
void tok_destroy(tokenizer *t);

int tok_kind(const tokenizer *t);
int tok_n_vocab(const tokenizer *t);
int32_t tok_bos(const tokenizer *t);     /* -1 when none */
int32_t tok_eos(const tokenizer *t);     /* -1 when none */
int tok_add_bos(const tokenizer *t);     /* tokenizer.ggml.add_bos_token (default per model) */
int tok_add_eos(const tokenizer *t);     /* tokenizer.ggml.add_eos_token (default 0) and an eos */
/* End-of-generation ids: eos, eot (tokenizer.ggml.eot_token_id), eom, and control tokens such as
 * <|im_end|>, <|eot_id|>, <end_of_turn>, <|end|> when present. Returns the count; ids in *out
 * (borrowed). BOS is among them only when the metadata also names it eos/eot/eom (GPT-2's
 * <|endoftext|> is both). */
int tok_eog_ids(const tokenizer *t, const int32_t **out);
int tok_is_eog(const tokenizer *t, int32_t id);
int tok_type(const tokenizer *t, int32_t id);
/* The raw piece string of a token as stored in the vocabulary (borrowed, NUL-terminated). */
const char *tok_piece(const tokenizer *t, int32_t id);
/* Id of a token whose piece equals s exactly, or -1. */
int32_t tok_find(const tokenizer *t, const char *s);

/* Encodes text[0..len) into ids.
 *   add_special: add BOS (and EOS) as the tokenizer's metadata says.
 *   parse_special: match control tokens (type 3) whole in the text; user-defined tokens
 *     (type 4) are always matched whole.
 * Writes up to cap ids into out and returns the total number of ids the text needs (which may
 * exceed cap: call again with a larger buffer), or a negative errno. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
               int32_t *out, int cap);

/* At most this many bytes of text become one token (the longest piece as stored, which is never
 * shorter than the text it stands for), so a text of n bytes needs at least n / this many
 * tokens: the cheap bound that refuses a prompt far beyond the context without encoding it. */
size_t tok_max_token_bytes(const tokenizer *t);

/* Raw bytes of one token: ▁ → space for SPM, byte tokens → their byte, byte-level BPE symbols →
 * their bytes, control tokens → nothing (unless render_special, then their text).
 * Writes up to cap bytes and returns the full length. */
int tok_token_bytes(const tokenizer *t, int32_t id, int render_special, char *buf, int cap);

/* Decodes ids into text (raw bytes, possibly invalid UTF-8 at the ends when a character is split).
 * skip_leading_space: SentencePiece's rule — drop the one leading space of the first piece when
 * it directly follows BOS (or starts the sequence). Returns the full length, writing up to cap. */
int tok_decode(const tokenizer *t, const int32_t *ids, int n, int skip_leading_space, char *buf,
               int cap);

/* 1 when a token's decoded text should have its leading space dropped because it directly follows
 * BOS at the start of a sequence (SPM with add_space_prefix); 0 for byte-level BPE. */
int tok_strips_space_after_bos(const tokenizer *t);

#endif
