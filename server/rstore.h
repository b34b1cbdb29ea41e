/*
 * rstore.h — the Responses store: stored /v1/responses by id, for previous_response_id and
 * GET / DELETE /v1/responses/{id}. In memory, bounded by a number of entries and a number of
 * bytes; beyond either bound the least recently used entries are dropped (a GET or a
 * continuation uses an entry).
 *
 *   buckets[hash(id) % n_buckets] ──► entry ──► entry          (chains by id)
 *   lru: head (most recent) ⇄ entry ⇄ entry ⇄ … ⇄ tail (evicted first)
 *   entry: id, the response object (JSON text), the conversation (JSON text), bytes
 *
 * Invariants (rstore_check): every entry is in exactly one chain and once in the LRU list;
 * count and bytes are the sums over the entries; count ≤ max_entries and bytes ≤ max_bytes
 * after every call. A failed call changes nothing. Thread-safe: one mutex guards it all (the
 * loop thread answers GET / DELETE and stores answers; preparation workers read conversations).
 */
#ifndef KVSERVE_RSTORE_H
#define KVSERVE_RSTORE_H

#include <stddef.h>

typedef struct rstore rstore;

/* A store of at most max_entries entries and max_bytes bytes (ids and texts). NULL on -ENOMEM
 * or when max_entries < 1. */
rstore *rstore_create(int max_entries, size_t max_bytes);
void rstore_destroy(rstore *s);

/* Stores copies of response and conversation under id (replacing an entry of that id), as the
 * most recently used, then drops least recently used ones beyond the bounds. 0, -E2BIG (the
 * entry alone is larger than max_bytes: nothing stored) or -ENOMEM. */
int rstore_put(rstore *s, const char *id, const char *response, const char *conversation);

/* Copies of id's response and conversation (either out pointer may be NULL), and id becomes the
 * most recently used. 0, -ENOENT, or -ENOMEM. */
int rstore_get(rstore *s, const char *id, char **response, char **conversation);

/* Drops id. 0 or -ENOENT. */
int rstore_delete(rstore *s, const char *id);

int rstore_count(rstore *s);
size_t rstore_bytes(rstore *s);

/* Asserts the invariants above. */
void rstore_check(rstore *s);

#endif
