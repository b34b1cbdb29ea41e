/*
 * rstore.c — the Responses store (see rstore.h): a chained hash of entries by id and an LRU
 * list, under one mutex. Entries are one allocation each (the id and both texts after the
 * header), so an entry's bytes are what it costs.
 */
#include "server/rstore.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct rs_entry {
    struct rs_entry *hnext;      /* chain */
    struct rs_entry *prev, *next; /* LRU: prev is more recent */
    size_t bytes;                /* what the entry counts: id + response + conversation */
    char *id, *response, *conversation; /* point into the allocation after the header */
} rs_entry;

struct rstore {
    pthread_mutex_t mu;
    rs_entry **buckets; /* [n_buckets] */
    int n_buckets;
    rs_entry *head, *tail;
    int count, max_entries;
    size_t bytes, max_bytes;
};

static uint64_t rs_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

rstore *rstore_create(int max_entries, size_t max_bytes)
{
    if (max_entries < 1) return NULL;
    rstore *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_buckets = 64;
    while (s->n_buckets < max_entries && s->n_buckets < (1 << 20)) s->n_buckets *= 2;
    s->buckets = calloc((size_t)s->n_buckets, sizeof *s->buckets);
    if (!s->buckets) {
        free(s);
        return NULL;
    }
    s->max_entries = max_entries;
    s->max_bytes = max_bytes;
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

void rstore_destroy(rstore *s)
{
    if (!s) return;
    for (rs_entry *e = s->head, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static rs_entry **rs_slot(rstore *s, const char *id)
{
    rs_entry **p = &s->buckets[rs_hash(id) & (uint64_t)(s->n_buckets - 1)];
    while (*p && strcmp((*p)->id, id)) p = &(*p)->hnext;
    return p;
}

static void rs_lru_unlink(rstore *s, rs_entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else s->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void rs_lru_front(rstore *s, rs_entry *e)
{
    e->prev = NULL;
    e->next = s->head;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

/* Unlinks e from its chain and the list and frees it. */
static void rs_drop(rstore *s, rs_entry *e)
{
    rs_entry **p = rs_slot(s, e->id);
    assert(*p == e);
    *p = e->hnext;
    rs_lru_unlink(s, e);
    s->count--;
    s->bytes -= e->bytes;
    free(e);
}

int rstore_put(rstore *s, const char *id, const char *response, const char *conversation)
{
    size_t li = strlen(id) + 1, lr = strlen(response) + 1, lc = strlen(conversation) + 1;
    size_t bytes = li + lr + lc;
    if (bytes > s->max_bytes) return -E2BIG;
    rs_entry *e = malloc(sizeof *e + bytes);
    if (!e) return -ENOMEM;
    e->id = (char *)(e + 1);
    e->response = e->id + li;
    e->conversation = e->response + lr;
    memcpy(e->id, id, li);
    memcpy(e->response, response, lr);
    memcpy(e->conversation, conversation, lc);
    e->bytes = bytes;
    e->prev = e->next = NULL;
    pthread_mutex_lock(&s->mu);
    rs_entry **p = rs_slot(s, id);
    if (*p) rs_drop(s, *p);
    p = rs_slot(s, id);
    e->hnext = NULL;
    *p = e;
    rs_lru_front(s, e);
    s->count++;
    s->bytes += bytes;
    while (s->count > s->max_entries || s->bytes > s->max_bytes) rs_drop(s, s->tail);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int rstore_get(rstore *s, const char *id, char **response, char **conversation)
{
    if (response) *response = NULL;
    if (conversation) *conversation = NULL;
    pthread_mutex_lock(&s->mu);
    rs_entry *e = *rs_slot(s, id);
    int rc = e ? 0 : -ENOENT;
    if (e) {
        char *r = response ? strdup(e->response) : NULL, *c = conversation ? strdup(e->conversation) : NULL;
        if ((response && !r) || (conversation && !c)) {
            free(r);
            free(c);
            rc = -ENOMEM;
        } else {
            rs_lru_unlink(s, e);
            rs_lru_front(s, e);
            if (response) *response = r;
            if (conversation) *conversation = c;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int rstore_delete(rstore *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    rs_entry *e = *rs_slot(s, id);
    if (e) rs_drop(s, e);
    pthread_mutex_unlock(&s->mu);
    return e ? 0 : -ENOENT;
}

int rstore_count(rstore *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t rstore_bytes(rstore *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->bytes;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void rstore_check(rstore *s)
{
    pthread_mutex_lock(&s->mu);
    int n = 0;
    size_t bytes = 0;
    for (rs_entry *e = s->head; e; e = e->next) {
        assert(e->prev ? e->prev->next == e : s->head == e);
        assert(e->next ? e->next->prev == e : s->tail == e);
        assert(*rs_slot(s, e->id) == e); /* in its chain, found by its id */
        assert(e->bytes == strlen(e->id) + strlen(e->response) + strlen(e->conversation) + 3);
        bytes += e->bytes;
        n++;
    }
    int in_chains = 0;
    for (int b = 0; b < s->n_buckets; b++)
        for (rs_entry *e = s->buckets[b]; e; e = e->hnext) {
            assert((rs_hash(e->id) & (uint64_t)(s->n_buckets - 1)) == (uint64_t)b);
            in_chains++;
        }
    assert(n == s->count && in_chains == n && bytes == s->bytes);
    assert(s->count <= s->max_entries && s->bytes <= s->max_bytes);
    pthread_mutex_unlock(&s->mu);
    (void)n;
    (void)in_chains;
    (void)bytes;
}
