/*
 * tok_vocab.c — the tokenizer's two lookup tables, built once by tok__create_spec and read by
 * every encoder: piece text → id and (left id, right id) → merge rank, both open addressing
 * with linear probing over a power-of-two table at most half full (so a probe always ends at
 * an empty slot). Below tokenizer.c, tok_spm.c and tok_bpe.c, which all look pieces up.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static uint32_t table_size(size_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

int32_t tok__lookup(const tokenizer *t, const char *s, size_t len)
{
    if (len == 0 || len > t->max_piece_len) return -1;
    for (uint64_t i = hash_bytes(s, len) & t->ht_mask;; i = (i + 1) & t->ht_mask) {
        int32_t id = t->ht[i];
        if (id < 0) return -1;
        if (t->piece_len[id] == len && !memcmp(t->pieces[id], s, len)) return id;
    }
}

int32_t tok__merge_rank(const tokenizer *t, int32_t l, int32_t r)
{
    if (!t->m_mask || l < 0 || r < 0) return -1;
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint64_t i = hash_u64(key) & t->m_mask;; i = (i + 1) & t->m_mask) {
        if (t->mkey[i] == UINT64_MAX) return -1;
        if (t->mkey[i] == key) return t->mrank[i];
    }
}

/* Copies the pieces into one arena and indexes them by text. Later duplicates win, as in
 * llama.cpp's token_to_id map. */
int tok__vocab_build(tokenizer *t, const tok_spec *s)
{
    size_t total = 0;
    int n = s->n_vocab;
    t->pieces = calloc((size_t)n, sizeof *t->pieces);
    t->piece_len = calloc((size_t)n, sizeof *t->piece_len);
    t->scores = calloc((size_t)n, sizeof *t->scores);
    t->types = calloc((size_t)n, sizeof *t->types);
    if (!t->pieces || !t->piece_len || !t->scores || !t->types) return -ENOMEM;
    for (int i = 0; i < n; i++) {
        t->piece_len[i] = s->piece_lens ? s->piece_lens[i] : (uint32_t)strlen(s->pieces[i]);
        total += t->piece_len[i] + 1;
        t->scores[i] = s->scores ? s->scores[i] : 0.0f;
        t->types[i] = s->types ? s->types[i] : TOK_TYPE_NORMAL;
    }
    t->arena = malloc(total ? total : 1);
    t->ht_mask = table_size((size_t)n) - 1;
    t->ht = malloc(((size_t)t->ht_mask + 1) * sizeof *t->ht);
    if (!t->arena || !t->ht) return -ENOMEM;
    memset(t->ht, 0xff, ((size_t)t->ht_mask + 1) * sizeof *t->ht);
    char *p = t->arena;
    for (int i = 0; i < n; i++) {
        uint32_t len = t->piece_len[i];
        memcpy(p, s->pieces[i], len);
        p[len] = 0;
        t->pieces[i] = p;
        p += len + 1;
        if (len > t->max_piece_len) t->max_piece_len = len;
    }
    for (int i = 0; i < n; i++) {
        uint32_t len = t->piece_len[i];
        if (!len) continue;
        uint64_t h = hash_bytes(t->pieces[i], len) & t->ht_mask;
        for (;; h = (h + 1) & t->ht_mask) {
            int32_t id = t->ht[h];
            if (id < 0 || (t->piece_len[id] == len && !memcmp(t->pieces[id], t->pieces[i], len))) {
                t->ht[h] = i;
                break;
            }
        }
    }
    return 0;
}

/* Indexes "left right" merges by the ids of both sides; a merge naming a piece that is not in the
 * vocabulary can never apply and is dropped. The first occurrence of a pair keeps its rank. */
int tok__merges_build(tokenizer *t, const tok_spec *s)
{
    if (s->n_merges <= 0) return 0;
    t->m_mask = table_size((size_t)s->n_merges) - 1;
    t->mkey = malloc(((size_t)t->m_mask + 1) * sizeof *t->mkey);
    t->mrank = malloc(((size_t)t->m_mask + 1) * sizeof *t->mrank);
    if (!t->mkey || !t->mrank) return -ENOMEM;
    memset(t->mkey, 0xff, ((size_t)t->m_mask + 1) * sizeof *t->mkey);
    for (int i = 0; i < s->n_merges; i++) {
        const char *m = s->merges[i];
        size_t len = s->merge_lens ? s->merge_lens[i] : strlen(m);
        const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        int32_t l = tok__lookup(t, m, (size_t)(sp - m));
        int32_t r = tok__lookup(t, sp + 1, len - (size_t)(sp - m) - 1);
        if (l < 0 || r < 0) continue;
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        for (uint64_t h = hash_u64(key) & t->m_mask;; h = (h + 1) & t->m_mask) {
            if (t->mkey[h] == key) break;
            if (t->mkey[h] == UINT64_MAX) {
                t->mkey[h] = key;
                t->mrank[h] = i;
                break;
            }
        }
    }
    return 0;
}
