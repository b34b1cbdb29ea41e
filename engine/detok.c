/*
 * detok.c — incremental detokenizer (see detok.h).
 *
 * Invariant: pend holds exactly the decoded bytes not yet emitted, and none of the emitted text
 * can be the start of a stop string, because every tail of pend that is a proper prefix of a
 * stop string stays in pend. Emitted text is valid UTF-8: complete characters pass through,
 * invalid bytes become U+FFFD, and an incomplete character at the end waits (or, at the end of
 * the choice, becomes one U+FFFD).
 */
#include "engine/detok.h"

#include "model/utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of src[0..n) that form complete characters or invalid bytes; the rest (≤ 3 bytes) is
 * an incomplete but so far valid character. */
static size_t detok__complete_prefix(const char *src, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)src[n - back];
        if ((c & 0xC0) == 0x80) continue;
        int len = utf8_lead_len(c);
        if (len <= (int)back) return n;
        for (size_t k = 1; k < back; k++)
            if (!utf8_cont_ok(c, (int)k, (unsigned char)src[n - back + k])) return n;
        return n - back;
    }
    return n;
}

/* Writes src[0..n) to d->out as valid UTF-8 (invalid or truncated sequences → U+FFFD). */
static int detok__emit(detok *d, const char *src, size_t n, const char **delta, size_t *len)
{
    if (3 * n + 1 > d->out_cap) {
        size_t cap = 3 * n + 64;
        char *o = realloc(d->out, cap);
        if (!o) return -ENOMEM;
        d->out = o;
        d->out_cap = cap;
    }
    size_t w = utf8_sanitize_into(d->out, src, n);
    *delta = d->out;
    *len = w;
    return 0;
}

int detok_init(detok *d, const tokenizer *tok, const int32_t *prompt, int n_prompt,
               char *const *stop, int n_stop, int include_stop)
{
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->include_stop = include_stop;
    d->matched = -1;
    if (n_stop > 0) {
        d->stop = malloc((size_t)n_stop * sizeof *d->stop);
        d->stop_len = malloc((size_t)n_stop * sizeof *d->stop_len);
        d->stop_index = malloc((size_t)n_stop * sizeof *d->stop_index);
        if (!d->stop || !d->stop_len || !d->stop_index) {
            detok_fini(d);
            return -ENOMEM;
        }
    }
    for (int i = 0; i < n_stop; i++)
        if (stop[i] && stop[i][0]) {
            d->stop[d->n_stop] = stop[i];
            d->stop_index[d->n_stop] = i;
            d->stop_len[d->n_stop++] = strlen(stop[i]);
        }
    d->strip_first_space = tok && n_prompt == 1 && prompt[0] == tok_bos(tok) &&
                           tok_strips_space_after_bos(tok);
    d->pend_cap = 64;
    d->pend = malloc(d->pend_cap);
    d->out_cap = 256;
    d->out = malloc(d->out_cap);
    if (!d->pend || !d->out) {
        detok_fini(d);
        return -ENOMEM;
    }
    d->out[0] = 0;
    return 0;
}

void detok_fini(detok *d)
{
    free(d->pend);
    free(d->out);
    free(d->stop);
    free(d->stop_len);
    free(d->stop_index);
    memset(d, 0, sizeof *d);
}

/* Appends the bytes of token to pend. */
static int detok__append(detok *d, int32_t token)
{
    for (;;) {
        int cap = (int)(d->pend_cap - d->n_pend);
        int n = tok_token_bytes(d->tok, token, d->render_special, d->pend + d->n_pend, cap);
        if (n < 0) return 0; /* unknown id: no text */
        if (n <= cap) {
            if (d->strip_first_space && n > 0 && d->pend[d->n_pend] == ' ') {
                memmove(d->pend + d->n_pend, d->pend + d->n_pend + 1, (size_t)n - 1);
                n--;
            }
            d->strip_first_space = 0;
            d->n_pend += (size_t)n;
            return 0;
        }
        size_t c = d->pend_cap * 2 + (size_t)n;
        char *p = realloc(d->pend, c);
        if (!p) return -ENOMEM;
        d->pend = p;
        d->pend_cap = c;
    }
}

/* Longest tail of pend that is a proper prefix of some stop string. */
static size_t detok__stop_hold(const detok *d)
{
    size_t best = 0;
    for (int i = 0; i < d->n_stop; i++) {
        size_t m = d->stop_len[i] - 1;
        if (m > d->n_pend) m = d->n_pend;
        for (size_t k = m; k > best; k--)
            if (!memcmp(d->pend + d->n_pend - k, d->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

int detok_push(detok *d, int32_t token, const char **delta, size_t *delta_len)
{
    if (d->stopped) return detok__emit(d, "", 0, delta, delta_len) ? -ENOMEM : 1;
    if (detok__append(d, token)) return -ENOMEM;
    /* The earliest complete stop string ends the text there. */
    const char *first = NULL;
    int which = -1;
    for (int i = 0; i < d->n_stop; i++) {
        const char *p = memmem(d->pend, d->n_pend, d->stop[i], d->stop_len[i]);
        if (p && (!first || p < first)) {
            first = p;
            which = i;
        }
    }
    if (first) {
        size_t end = (size_t)(first - d->pend) + (d->include_stop ? d->stop_len[which] : 0);
        d->matched = d->stop_index[which];
        int rc = detok__emit(d, d->pend, end, delta, delta_len);
        d->n_pend = 0;
        d->stopped = 1;
        return rc ? rc : 1;
    }
    size_t safe = d->n_pend - detok__stop_hold(d);
    safe = detok__complete_prefix(d->pend, safe);
    int rc = detok__emit(d, d->pend, safe, delta, delta_len);
    if (rc) return rc;
    memmove(d->pend, d->pend + safe, d->n_pend - safe);
    d->n_pend -= safe;
    return 0;
}

int detok_flush(detok *d, const char **delta, size_t *delta_len)
{
    int rc = detok__emit(d, d->pend, d->stopped ? 0 : d->n_pend, delta, delta_len);
    d->n_pend = 0;
    return rc;
}
