/*
 * tok_internal.h — what the files of the tokenizer share (not a public interface). From the top:
 * tokenizer.c (construction, partitioning, decoding) calls the merge algorithms tok_spm.c and
 * tok_bpe.c; all three use the lookup tables (tok_vocab.c) and the growable arrays (tok_vec.c).
 *
 *   tokenizer
 *     pieces[n_vocab] ──► arena ("piece\0piece\0...")      scores, types: [n_vocab]
 *     ht: open-addressing table, piece bytes → id           (every non-empty piece)
 *     merges (BPE): open-addressing table, (left id, right id) → rank
 *     special[n_special]: control / unknown / user-defined ids, longest piece first
 *     eog[n_eog]: end-of-generation ids (never BOS)
 *     re[n_re]: the pre-tokenizer's regexes (BPE), applied in sequence
 *
 * Invariants: immutable after tok__create_spec returns; every id stored anywhere is in
 * [0, n_vocab). Encoding allocates its scratch per call, so one tokenizer serves many threads.
 * tok__create_spec is the constructor both tok_create (GGUF metadata) and the unit tests (arrays
 * written in the test) go through, so the tests exercise exactly the production path.
 */
#ifndef KVSERVE_TOK_INTERNAL_H
#define KVSERVE_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

#define TOK__MAX_RE 8

/* A tokenizer described by plain arrays (borrowed during tok__create_spec only). */
typedef struct tok_spec {
    int kind; /* enum tok_kind */
    int n_vocab;
    const char *const *pieces;  /* [n_vocab] token texts (may contain NUL bytes when lens given) */
    const uint32_t *piece_lens; /* [n_vocab] byte lengths, or NULL: strlen(pieces[i]) */
    const float *scores;        /* [n_vocab] or NULL (all 0) */
    const int32_t *types;       /* [n_vocab] enum tok_type, or NULL (all normal) */
    int n_merges;               /* BPE: "left right" strings, rank = index */
    const char *const *merges;
    const uint32_t *merge_lens; /* [n_merges] or NULL: strlen */
    const char *pre;            /* BPE pre-tokenizer name (tokenizer.ggml.pre), NULL = "gpt-2" */
    int32_t bos, eos, eot, eom, unk; /* -1 = absent (-2 = the model's default, see tokenizer.c) */
    int add_bos, add_eos;            /* -1 = the model's default */
    int add_space_prefix;            /* -1 = the model's default (SPM 1, BPE 0) */
} tok_spec;

/* Fills s with "everything absent / default". */
void tok__spec_init(tok_spec *s, int kind);

/* Builds a tokenizer from s. NULL with a one-line message in err on bad input. */
tokenizer *tok__create_spec(const tok_spec *s, char *err, size_t err_len);

/* A growable array of ids. */
typedef struct tok__vec {
    int32_t *v;
    size_t n, cap;
    int oom; /* set once an append failed; later appends are dropped */
} tok__vec;

/* Appends id (tok_vec.c). */
void tok__push(tok__vec *o, int32_t id);

/* A candidate merge of two adjacent symbols. The heap pops the smallest key first: the high 32
 * bits are the priority (SPM: the merged piece's score, negated and made sortable as an
 * integer; BPE: the merge rank), the low 32 bits the left symbol, so ties go leftmost and one
 * integer comparison orders two candidates. size is the merged length in bytes: a candidate is
 * stale once either symbol changed, which shows as a different sum. */
typedef struct tok__bigram {
    uint64_t key;
    int right;
    int size;
} tok__bigram;

static inline tok__bigram tok__bigram_make(uint32_t prio, int left, int right, int size)
{
    tok__bigram b = {(uint64_t)prio << 32 | (uint32_t)left, right, size};
    return b;
}

static inline int tok__bigram_left(const tok__bigram *b)
{
    return (int)(uint32_t)b->key;
}

typedef struct tok__heap {
    tok__bigram *v;
    size_t n, cap;
    int oom;
} tok__heap;

/* tok_vec.c: adds b. */
void tok__heap_push(tok__heap *h, tok__bigram b);
/* Pops the best bigram into *b; 0 when the heap is empty. */
int tok__heap_pop(tok__heap *h, tok__bigram *b);

/* Symbols of one word being merged: a doubly linked list over contiguous byte ranges. */
typedef struct tok__sym {
    int prev, next; /* neighbour indices, -1 at the ends */
    int start, n;   /* bytes [start, start + n) of the word; n == 0 once merged away */
    int32_t id;     /* BPE: the symbol's token id, -1 when the text is not a token */
} tok__sym;

struct pcre2_real_code_8;

struct tokenizer {
    int kind; /* enum tok_kind */
    int n_vocab;
    const char **pieces;    /* [n_vocab] NUL-terminated, into arena */
    uint32_t *piece_len;    /* [n_vocab] bytes */
    float *scores;          /* [n_vocab] */
    int32_t *types;         /* [n_vocab] enum tok_type */
    char *arena;            /* all pieces, each followed by a NUL */
    uint32_t max_piece_len; /* bytes of the longest piece */
    int32_t *ht;            /* [ht_mask + 1] piece → id, -1 = empty slot */
    uint32_t ht_mask;
    uint64_t *mkey;  /* [m_mask + 1] (left id << 32 | right id), UINT64_MAX = empty */
    int32_t *mrank;  /* [m_mask + 1] merge rank */
    uint32_t m_mask; /* 0 and no tables when there are no merges */
    int32_t bos, eos, eot, eom, unk; /* -1 = none */
    int add_bos, add_eos, add_space_prefix;
    int ignore_merges;    /* BPE (llama-bpe): a word that is itself a token is not merged */
    int32_t byte_id[256]; /* token of each raw byte (SPM <0xNN>, BPE its byte-level char); -1 */
    int32_t *special;     /* [n_special] control, unknown, user-defined ids, longest first */
    int n_special;
    int32_t *eog; /* [n_eog] */
    int n_eog;
    char pre[48]; /* pre-tokenizer name actually used (BPE) */
    struct pcre2_real_code_8 *re[TOK__MAX_RE];
    int n_re;
};

/* tok_vocab.c: copies s's pieces, scores and types into t and indexes the pieces by text (later
 * duplicates win, as in llama.cpp). 0 or -ENOMEM (t keeps what was allocated: tok_destroy frees it). */
int tok__vocab_build(tokenizer *t, const tok_spec *s);
/* tok_vocab.c: indexes s's "left right" merges by the ids of both sides (after
 * tok__vocab_build); a merge naming a piece not in the vocabulary is dropped, the first
 * occurrence of a pair keeps its rank. 0 or -ENOMEM. */
int tok__merges_build(tokenizer *t, const tok_spec *s);
/* tok_vocab.c: id of the piece s[0..len), or -1. */
int32_t tok__lookup(const tokenizer *t, const char *s, size_t len);
/* tok_vocab.c: rank of merging the tokens l and r, or -1. */
int32_t tok__merge_rank(const tokenizer *t, int32_t l, int32_t r);
/* Length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes). */
static inline size_t tok__utf8_len(unsigned char c)
{
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* SentencePiece BPE over one fragment of raw text: prepends the dummy-prefix space when
 * add_prefix, escapes spaces as U+2581 and merges. */
void tok__spm_encode(const tokenizer *t, const char *text, size_t len, int add_prefix,
                     tok__vec *out);

/* Byte-level BPE: compiles the pre-tokenizer named t->pre (0, or -EINVAL with err). */
int tok__bpe_init(tokenizer *t, const char *pre, char *err, size_t err_len);
void tok__bpe_fini(tokenizer *t);
/* Pre-tokenizes and merges one fragment of raw text. */
void tok__bpe_encode(const tokenizer *t, const char *text, size_t len, tok__vec *out);
/* The pre-tokenizer alone: splits text into words and calls fn(ctx, offset, len) for each, in
 * order, in bytes of the raw text (for tests). Returns 0 or -ENOMEM. */
int tok__pretokenize(const tokenizer *t, const char *text, size_t len,
                     void (*fn)(void *ctx, size_t off, size_t len), void *ctx);
/* UTF-8 encoding (2 bytes) of the byte-level BPE character for byte b; returns its length. */
int tok__byte_to_unicode(unsigned char b, char out[4]);
/* The byte a byte-level character (code point cp) stands for, or -1. */
int tok__unicode_to_byte(uint32_t cp);

#endif
