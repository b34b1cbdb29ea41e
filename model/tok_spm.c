/*
 * tok_spm.c — SentencePiece BPE ("llama" tokenizer model), as llama.cpp's llm_tokenizer_spm.
 *
 * The fragment (after the dummy prefix, with spaces escaped as U+2581) starts as one symbol per
 * UTF-8 character. Every adjacent pair whose concatenation is a vocabulary piece is a candidate,
 * keyed by that piece's score; the best candidate (highest score, leftmost on ties) is merged
 * and the new neighbours become candidates, until none is left: O(n log n) with a binary heap
 * over a linked list of symbols. A final symbol that is not a piece (only ever a single
 * character) is written as byte tokens <0xNN> (byte fallback), or <unk> when those are absent.
 * Caller: tok_encode (tokenizer.c).
 */
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

/* Maps a score to an integer that sorts like -score (so the best score pops first). */
static uint32_t score_prio(float score)
{
    float f = score == 0.0f ? 0.0f : -score;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* ---- SentencePiece merges ------------------------------------------------------------------- */

static void try_add(const tokenizer *t, const char *w, const tok__sym *s, int l, int r,
                    tok__heap *h)
{
    if (l < 0 || r < 0) return;
    int size = s[l].n + s[r].n;
    int32_t id = tok__lookup(t, w + s[l].start, (size_t)size);
    if (id < 0) return;
    tok__heap_push(h, tok__bigram_make(score_prio(t->scores[id]), l, r, size));
}

/* Writes symbol text that is not a piece as byte tokens. */
static void byte_fallback(const tokenizer *t, const char *p, int n, tok__vec *out)
{
    for (int i = 0; i < n; i++) {
        int32_t id = t->byte_id[(unsigned char)p[i]];
        if (id < 0) id = t->unk;
        if (id >= 0) tok__push(out, id);
    }
}

/* Escapes the fragment: optional dummy-prefix space, every ' ' → U+2581. */
static char *escape(const char *text, size_t len, int add_prefix, size_t *out_len)
{
    size_t spaces = (size_t)add_prefix;
    for (size_t i = 0; i < len; i++)
        spaces += text[i] == ' ';
    char *w = malloc(len + 2 * spaces + 1);
    if (!w) return NULL;
    size_t n = 0;
    if (add_prefix) {
        memcpy(w, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            w[n++] = text[i];
        }
    }
    *out_len = n;
    return w;
}

void tok__spm_encode(const tokenizer *t, const char *text, size_t len, int add_prefix,
                     tok__vec *out)
{
    size_t wn = 0;
    if (len > (size_t)1 << 28) {
        out->oom = 1;
        return;
    }
    char *w = escape(text, len, add_prefix, &wn);
    tok__sym *s = w ? malloc((wn ? wn : 1) * sizeof *s) : NULL;
    tok__heap h = {0};
    if (!s) {
        out->oom = 1;
        goto done;
    }
    int n = 0;
    for (size_t off = 0; off < wn; n++) {
        size_t l = tok__utf8_len((unsigned char)w[off]);
        if (l > wn - off) l = wn - off;
        s[n] = (tok__sym){n - 1, off + l == wn ? -1 : n + 1, (int)off, (int)l, -1};
        off += l;
    }
    for (int i = 1; i < n; i++)
        try_add(t, w, s, i - 1, i, &h);
    tok__bigram b;
    while (tok__heap_pop(&h, &b)) {
        int left = tok__bigram_left(&b);
        tok__sym *L = &s[left], *R = &s[b.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) s[R->next].prev = left;
        try_add(t, w, s, L->prev, left, &h);
        try_add(t, w, s, left, L->next, &h);
    }
    if (h.oom) out->oom = 1;
    for (int i = n ? 0 : -1; i != -1; i = s[i].next) {
        int32_t id = tok__lookup(t, w + s[i].start, (size_t)s[i].n);
        if (id >= 0)
            tok__push(out, id);
        else
            byte_fallback(t, w + s[i].start, s[i].n, out);
    }
done:
    free(h.v);
    free(s);
    free(w);
}
