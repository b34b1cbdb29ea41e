/*
 * grammar.h — grammar-constrained decoding: compiled context-free grammars over bytes and
 * per-sequence matchers that say which tokens may come next.
 *
 *   GBNF / EBNF text ─┐
 *   regex ────────────┼─► gr_grammar (immutable, reference-counted, shareable between threads)
 *   choice list ──────┘        │
 *                              ▼
 *   gr_vocab (the tokenizer's token bytes as a trie, one per model) + grammar ─► gr_matcher
 *        gr_matcher_fill_mask → bitmask over the vocabulary; gr_matcher_accept(token)
 *
 * A grammar is a pushdown automaton over bytes: each rule that is reached recursively (or is
 * large and used often) becomes a DFA whose edges are byte classes and calls of other rules;
 * every other rule is inlined. A matcher's state is a set of (DFA state, return stack) pairs.
 * Tokens are byte strings (SentencePiece ▁ is a space, byte-fallback and byte-level BPE tokens
 * are their bytes), so a token may end inside a UTF-8 character or straddle rule boundaries.
 * Per DFA state, the grammar caches (lazily, per vocabulary) which tokens are accepted whatever
 * the stack holds and which depend on it; a mask is then the union of a few cached bitmasks plus
 * a check of the stack-dependent tokens.
 *
 * The GBNF dialect (llama.cpp's, also used for vLLM's EBNF grammars):
 *   root ::= "text" rule-name [a-z0-9_] [^"\\] . ( group ) x* x+ x? x{2} x{2,} x{2,5} x{,5} | …
 *   # comments to the end of the line; rule names are letters, digits, '-' and '_'; literals take
 *   \n \r \t \\ \" \' \[ \] \- \xHH \uHHHH \UHHHHHHHH; classes and "." are over Unicode code
 *   points, matched as UTF-8. Newlines are blanks: a rule ends where the next `name ::=` begins.
 *   Left recursion (a rule reaching itself before consuming a byte) is an error.
 *
 * Composing grammars (e.g. a tool call: literal text around JSON arguments): write the pieces as
 * GBNF rules in one text. server/openai/oai_schema.h turns a JSON Schema into GBNF rules under a name
 * prefix, so a caller can write
 *     root ::= "<tool_call>{\"name\": \"get_weather\", \"arguments\": " args-root "}</tool_call>"
 * append oai_schema_gbnf(schema, "args-") and compile the whole text with gr_compile_gbnf (in
 * server/, oai__grammar_gbnf does it through the server's grammar cache and turns errors into
 * 400s); the engine constrains a request given engine_request.grammar. gr_regex_to_gbnf and
 * gr_gbnf_literal produce GBNF expressions for regexes and literal text, and gr_buf_literal and
 * gr_buf_cp write them into a growable string (base/buf.h).
 *
 * Limits: text nesting, rule count, repetition bounds, automaton states, table memory and
 * compile time are bounded (a clear error past them); at run time the stack depth and the
 * pairs of one configuration are bounded (paths beyond them are dropped: the mask then allows
 * less, never more).
 *
 * Threads: compiling is reentrant. A gr_grammar may be shared by several matchers and threads
 * (its mask cache has a lock). A gr_matcher belongs to one thread at a time.
 */
#ifndef KVSERVE_GRAMMAR_H
#define KVSERVE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

struct buf; /* base/buf.h */

typedef struct gr_grammar gr_grammar;
typedef struct gr_vocab gr_vocab;
typedef struct gr_matcher gr_matcher;
typedef struct gr_cache gr_cache;

/* A compilation's wall-clock budget when the caller gives no deadline. */
#define GR_COMPILE_MS 3000

/* Words of a token mask over n tokens: bit (id % 32) of word (id / 32) is token id. */
#define GR_MASK_WORDS(n) (((size_t)(n) + 31) / 32)

/* A compile error: where and why. */
typedef struct gr_error {
    int pos;        /* byte offset in the source text, -1 when not about one place */
    int line, col;  /* 1-based position in GBNF text; 0 for other sources */
    char msg[256];  /* one line, e.g. "undefined rule 'valeu'" */
    int timeout;    /* 1: the compilation ran out of its time budget */
} gr_error;

/* ---- compiling ---------------------------------------------------------------------------- */

/* Compiles GBNF text[0..len); root names the start rule (NULL: "root"). Returns a grammar with
 * one reference, or NULL with err filled (syntax, undefined or unproductive rules, left
 * recursion, limits) or on out of memory (err says so). The compilation stops at its wall-clock
 * budget, GR_COMPILE_MS from the call ("grammar too complex: compilation took more than N
 * ms"): every step whose cost the input controls is charged and the clock is read every few
 * tens of microseconds of work. */
gr_grammar *gr_compile_gbnf(const char *text, size_t len, const char *root, gr_error *err);
/* The same, stopping at deadline_us (base/clock.h's clk_now_us() microseconds; 0: GR_COMPILE_MS
 * from the call), so that a caller's other work (a schema's translation) shares one budget. */
gr_grammar *gr_compile_gbnf_by(const char *text, size_t len, const char *root, int64_t deadline_us, gr_error *err);

/* Compiles a regular expression that the whole output must match (Python re.fullmatch
 * semantics over the supported subset; see gr_regex_to_gbnf). NULL with err on error. */
gr_grammar *gr_compile_regex(const char *re, size_t len, gr_error *err);
gr_grammar *gr_compile_regex_by(const char *re, size_t len, int64_t deadline_us, gr_error *err);

/* Compiles "exactly one of these strings" (n ≥ 1; lens[i] bytes of choices[i]). */
gr_grammar *gr_compile_choice(const char *const *choices, const size_t *lens, int n,
                              gr_error *err);
gr_grammar *gr_compile_choice_by(const char *const *choices, const size_t *lens, int n, int64_t deadline_us,
                                 gr_error *err);

/* Takes another reference (returns g) / drops one (frees at zero). NULL is ignored. */
gr_grammar *gr_ref(gr_grammar *g);
void gr_unref(gr_grammar *g);

/* Bytes g holds (tables and cached masks), for cache accounting and logs. */
size_t gr_grammar_bytes(gr_grammar *g);

/* ---- GBNF pieces for composing grammars ------------------------------------------------------ */

enum gr_regex_mode {
    GR_RE_FULL = 0,        /* the text itself must match the whole regex */
    GR_RE_JSON_SEARCH = 1, /* the content of a JSON string literal (escapes written as JSON
                              requires: \" \\ \n \u0001 …) whose decoded value contains a match,
                              JSON Schema "pattern" semantics: unanchored unless ^ / $ */
};

/* A GBNF expression (a parenthesised group) for regex re[0..len). Supported: literals and
 * escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H…} \. \\ …), . (any character but \n), classes
 * [a-z] [^…] with \d \w \s \D \W \S inside or outside (\d = [0-9], \w = [A-Za-z0-9_], \s =
 * Unicode white space; \D and \W match ASCII characters only), groups ( ) (?: ) (?P<n> ) (?<n> ),
 * | and the quantifiers * + ? {m} {m,} {m,n} (lazy forms accepted, same language), ^ and $ at
 * the start and end of the pattern or of a top-level alternative. Anything else (lookaround,
 * backreferences, \b, flags) is an error naming it. Returns a malloc'd string, or NULL with err
 * (err->pos: the offset in re). */
char *gr_regex_to_gbnf(const char *re, size_t len, int mode, gr_error *err);

/* A GBNF literal "…" matching exactly s[0..len). malloc'd; NULL when out of memory or when s
 * is not valid UTF-8. */
char *gr_gbnf_literal(const char *s, size_t len);

/* Appends a GBNF literal "..." for the UTF-8 text s[0..n) to b (invalid UTF-8 sets b's oom). */
void gr_buf_literal(struct buf *b, const char *s, size_t n);
/* Appends code point c escaped as it may appear inside a GBNF literal or class. */
void gr_buf_cp(struct buf *b, uint32_t c);

/* ---- vocabularies ------------------------------------------------------------------------ */

/* The vocabulary of t as the matchers see it: n_vocab ids (the model's logit rows; ids without
 * a token in t are never allowed), each token's bytes (tok_token_bytes without special text:
 * control tokens have none and are never allowed by the grammar), and t's end-of-generation
 * ids, allowed exactly when the grammar is complete. NULL when out of memory. */
gr_vocab *gr_vocab_create(const tokenizer *t, int n_vocab);

/* The same from raw token bytes (tests, other tokenizers): bytes[i] of lens[i] bytes (lens[i]
 * 0 or bytes[i] NULL: never allowed), eog[0..n_eog). Everything is copied. */
gr_vocab *gr_vocab_create_raw(int n_vocab, const char *const *bytes, const int *lens,
                              const int32_t *eog, int n_eog);
void gr_vocab_destroy(gr_vocab *v);
int gr_vocab_size(const gr_vocab *v);

/* ---- matchers ---------------------------------------------------------------------------- */

/* A matcher at the start of g (takes its own reference); v is borrowed and must outlive it.
 * NULL when out of memory. */
gr_matcher *gr_matcher_create(gr_grammar *g, const gr_vocab *v);
/* An independent copy of m in the same state (n > 1 choices). NULL when out of memory. */
gr_matcher *gr_matcher_clone(const gr_matcher *m);
void gr_matcher_destroy(gr_matcher *m);

/* Writes the allowed next tokens into mask[GR_MASK_WORDS(n_vocab)]: tokens whose bytes can
 * continue the output, plus the end-of-generation ids when the output so far is complete.
 * Returns the number of allowed tokens (0: a dead end, e.g. the vocabulary cannot spell the
 * only continuation), or -ENOMEM (mask then allows nothing). */
int gr_matcher_fill_mask(gr_matcher *m, uint32_t *mask);

/* Advances by one token. An end-of-generation id is accepted only when the output is complete
 * (the matcher is then terminated and allows only end-of-generation ids). Returns 0, or
 * -EINVAL when the token is not allowed, or -ENOMEM; on failure the state is unchanged. */
int gr_matcher_accept(gr_matcher *m, int32_t token);

/* Advances by raw bytes (tests, forced text). Same results as gr_matcher_accept. */
int gr_matcher_accept_bytes(gr_matcher *m, const char *s, size_t n);

/* 1 when the output so far is a complete sentence of the grammar. */
int gr_matcher_is_accepting(const gr_matcher *m);
/* 1 when nothing but end-of-generation may follow (complete and no byte can extend it). */
int gr_matcher_is_done(const gr_matcher *m);
/* 1 when an end-of-generation token was accepted. */
int gr_matcher_is_terminated(const gr_matcher *m);

/* Asserts the matcher's invariants (pairs are byte-consuming states on valid stacks, no
 * duplicates, stacks well formed). */
void gr_matcher_check(const gr_matcher *m);

/* ---- a cache of compiled grammars -------------------------------------------------------- */

/* An LRU of compiled grammars keyed by their source text (with the caller's kind prefix), at
 * most max_entries grammars (0: none kept; compilations in flight are still shared) and
 * max_bytes of their memory, with GR_COMPILE_WORKERS low-priority threads that compile
 * (gr_cache_compile). Thread-safe. NULL on -ENOMEM. */
gr_cache *gr_cache_create(int max_entries, size_t max_bytes);
/* Stops compiling: queued compilations fail at once ("the server is stopping", their callers
 * return), and so does every later gr_cache_compile of a source not cached (*busy set); the
 * ones running end by their budget. Lookups still work. For a server that stops: its requests
 * then finish their preparation without waiting for a queue. */
void gr_cache_stop(gr_cache *c);
/* Stops (gr_cache_stop), waits for the running compilations (their budget) and for every caller
 * still in gr_cache_compile to leave, then frees the cache. No call may start after it began. */
void gr_cache_destroy(gr_cache *c);
/* A new reference to the grammar cached under key[0..len), or NULL. */
gr_grammar *gr_cache_get(gr_cache *c, const char *key, size_t len);
/* Caches g under key (the cache takes its own reference; an existing entry is replaced) and
 * evicts the least recently used entries beyond the bounds. */
void gr_cache_put(gr_cache *c, const char *key, size_t len, gr_grammar *g);
/* Compiles a source: fn(arg, deadline_us, err) returns a grammar with one reference, or NULL
 * with err filled, and must stop by deadline_us (clk_now_us() microseconds): pass it to the
 * gr_compile_*_by functions. */
typedef gr_grammar *(*gr_compile_fn)(void *arg, int64_t deadline_us, gr_error *err);

#define GR_COMPILE_WORKERS 2 /* compilations running at once, per cache */
#define GR_COMPILE_QUEUE 8   /* compilations waiting for a worker, beyond which one is refused */
#define GR_TIMEOUT_TTL_S 60  /* how long a compilation's timeout is remembered */

/* The grammar cached under key, or fn's on one of the cache's workers, with a budget of
 * GR_COMPILE_MS from when the worker starts it, while the caller waits; then cached under key,
 * a failure too (err; a timeout for GR_TIMEOUT_TTL_S: a busy machine may have caused it).
 * Callers of a key being compiled wait for that compilation. Returns a new reference, or NULL with err filled; *busy (may be NULL) is set to
 * 1 when nothing was tried — the queue is full, or the cache stopped (gr_cache_stop) before the
 * compilation ran — and err says so. arg must stay valid until the call returns. */
gr_grammar *gr_cache_compile(gr_cache *c, const char *key, size_t len, gr_compile_fn fn, void *arg,
                             gr_error *err, int *busy);

/* Entries, lookups and hits so far. */
void gr_cache_stats(gr_cache *c, int *entries, int64_t *lookups, int64_t *hits);

#endif
