/*
 * tok_vec.c — the two growable arrays that encoding fills: the ids of the result (tok__vec) and
 * the candidate merges of a word (tok__heap, a binary min-heap of bigrams). Both merge
 * algorithms (tok_spm.c, tok_bpe.c) and tok_encode (tokenizer.c) use them, so they live below
 * all three. An append that fails to grow sets the array's sticky oom flag and is dropped; the
 * caller checks the flag once at the end.
 */
#include <stdlib.h>

#include "model/tok_internal.h"

/* ---- ids ------------------------------------------------------------------------------------ */

void tok__push(tok__vec *o, int32_t id)
{
    if (o->oom) return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) {
            o->oom = 1;
            return;
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* ---- binary heap of bigrams ---------------------------------------------------------------- */

static int better(const tok__bigram *a, const tok__bigram *b)
{
    return a->key < b->key;
}

void tok__heap_push(tok__heap *h, tok__bigram b)
{
    if (h->oom) return;
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tok__bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) {
            h->oom = 1;
            return;
        }
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!better(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
}

int tok__heap_pop(tok__heap *h, tok__bigram *b)
{
    if (!h->n) return 0;
    *b = h->v[0];
    tok__bigram last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(&h->v[c + 1], &h->v[c])) c++;
        if (!better(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return 1;
}
