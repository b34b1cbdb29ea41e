/*
 * detok.h — incremental detokenizer: token ids in, UTF-8 text deltas out.
 *
 *   bytes so far:   "Hello wor" | "ld!\xF0\x9F"            pending (held back)
 *                    emitted      └ may still be a stop-string prefix, or an incomplete character
 *
 * Guarantees: a delta never ends inside a UTF-8 character (incomplete sequences wait for their
 * continuation bytes; invalid bytes become U+FFFD); any number of stop strings of any length
 * are matched across token boundaries, and any tail that could still grow into one is held back;
 * everything after the stop string is never emitted, and the stop string itself only with
 * include_stop. SentencePiece's rule
 * drops the leading space of the first generated piece when the prompt is BOS alone.
 * One detok per choice; engine thread only (the tokenizer is borrowed and immutable).
 */
#ifndef KVSERVE_DETOK_H
#define KVSERVE_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

typedef struct detok {
    const tokenizer *tok;      /* borrowed */
    const char **stop;         /* [n_stop] owned array of borrowed, non-empty strings */
    size_t *stop_len;          /* [n_stop] */
    int *stop_index;           /* [n_stop] position of each in the caller's list */
    int n_stop;
    int include_stop;          /* 1: the matched stop string is emitted (then nothing more) */
    int render_special;        /* 1: control tokens add their text (vLLM's skip_special_tokens:
                                  false); 0 (detok_init's default): they add nothing */
    int matched;               /* caller's index of the stop string that matched, else -1 */
    int strip_first_space;     /* 1 until the first token when the SPM rule applies */
    int stopped;               /* 1 after a stop string matched (nothing more is emitted) */
    char *pend;                /* [pend_cap] bytes decoded but not emitted */
    size_t n_pend, pend_cap;
    char *out;                 /* [out_cap] the last delta (NUL-terminated) */
    size_t out_cap;
} detok;

/* Sets up d for a choice whose prompt is prompt[0..n_prompt); stop strings stop[0..n_stop)
 * (NULL or "" entries ignored) are borrowed and must outlive d; include_stop keeps a matched
 * stop string in the text. 0 or -ENOMEM. */
int detok_init(detok *d, const tokenizer *tok, const int32_t *prompt, int n_prompt,
               char *const *stop, int n_stop, int include_stop);
void detok_fini(detok *d);

/* Adds one generated token. *delta (borrowed until the next call, NUL-terminated) receives the
 * text now safe to emit, *delta_len its length. Returns 1 when a stop string completed (the
 * delta ends just before it, or just after it with include_stop; d->matched names it, and the
 * choice is over), 0 otherwise, or -ENOMEM. */
int detok_push(detok *d, int32_t token, const char **delta, size_t *delta_len);

/* At the end of a choice (length, eog, abort): emits every held byte, an incomplete character
 * as U+FFFD. Same delta contract as detok_push. 0 or -ENOMEM. */
int detok_flush(detok *d, const char **delta, size_t *delta_len);

#endif
