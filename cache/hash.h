/*
 * hash.h — the non-cryptographic hashes of the KV tiers: 64-bit checksums of block payloads and
 * 128-bit keys that name a cached block by everything its K/V depends on.
 *
 *   key(block 0)     = hash_key_next(root, tokens[0 .. bs))
 *   key(block i)     = hash_key_next(key(block i - 1), tokens[i·bs .. (i+1)·bs))
 *   root             = hash_key_of(fingerprint bytes: model weights, KV geometry, dtype, ...)
 *
 * so a key stands for the whole token prefix up to the end of its block under one model: two
 * servers with the same model and geometry compute the same keys, any other model computes
 * others. The hashes are fast (a few GB/s per core) and well mixed, not secure: a client that can
 * choose prompts to collide with another's 128-bit key is out of scope.
 *
 * Pure functions, any thread.
 */
#ifndef KVSERVE_HASH_H
#define KVSERVE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* A 128-bit key. All-zero is a valid key like any other. */
typedef struct hash_key {
    uint64_t lo, hi;
} hash_key;

/* 64-bit hash of n bytes at p under seed (any alignment). */
uint64_t hash_bytes(const void *p, size_t n, uint64_t seed);

/* The key of n bytes at p (a fingerprint: the root of a chain). */
hash_key hash_key_of(const void *p, size_t n);

/* The key of the block of n tokens that follows the prefix named by parent. */
hash_key hash_key_next(hash_key parent, const int32_t *tokens, int n);

static inline int hash_key_eq(hash_key a, hash_key b)
{
    return a.lo == b.lo && a.hi == b.hi;
}

/* Writes the key as 32 lowercase hex digits and a NUL into buf[33]; returns buf. */
char *hash_key_hex(hash_key k, char *buf);

/* Incremental form of hash_key_of, for a fingerprint gathered piece by piece. */
typedef struct hash_state {
    uint64_t a, b; /* the two lanes of the key */
    uint64_t n;    /* bytes absorbed */
} hash_state;

void hash_init(hash_state *h);
void hash_update(hash_state *h, const void *p, size_t n);
hash_key hash_final(const hash_state *h);

#endif
