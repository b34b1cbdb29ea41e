/*
 * hash.c — hash_bytes and the 128-bit keys built on it (see hash.h).
 *
 * hash_bytes runs four independent 64-bit lanes over 32-byte stripes (multiply, rotate,
 * multiply: the lanes keep the multiplier busy), folds them, absorbs the tail and ends with a
 * full avalanche (every output bit depends on every input bit). Two lanes of different seeds
 * make a 128-bit key. Words are read in the host's byte order: keys and checksums are the same
 * on every little-endian machine, which is what the tier files assume.
 */
#include "cache/hash.h"

#include <string.h>

#define HASH_M1 0x9e3779b97f4a7c15ull
#define HASH_M2 0xbf58476d1ce4e5b9ull
#define HASH_M3 0x94d049bb133111ebull
#define HASH_M4 0xff51afd7ed558ccdull
#define HASH_M5 0xc4ceb9fe1a85ec53ull

static inline uint64_t hash__rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t hash__word(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t hash__lane(uint64_t acc, uint64_t w)
{
    acc += w * HASH_M2;
    acc = hash__rotl(acc, 31);
    return acc * HASH_M1;
}

/* Avalanche: each output bit flips with probability about 1/2 when any input bit does. */
static inline uint64_t hash__fmix(uint64_t x)
{
    x ^= x >> 33;
    x *= HASH_M4;
    x ^= x >> 33;
    x *= HASH_M5;
    x ^= x >> 33;
    return x;
}

uint64_t hash_bytes(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h;
    size_t left = n;
    if (left >= 32) {
        uint64_t v0 = seed + HASH_M1 + HASH_M2, v1 = seed + HASH_M2, v2 = seed, v3 = seed - HASH_M1;
        do {
            v0 = hash__lane(v0, hash__word(p));
            v1 = hash__lane(v1, hash__word(p + 8));
            v2 = hash__lane(v2, hash__word(p + 16));
            v3 = hash__lane(v3, hash__word(p + 24));
            p += 32;
            left -= 32;
        } while (left >= 32);
        h = hash__rotl(v0, 1) + hash__rotl(v1, 7) + hash__rotl(v2, 12) + hash__rotl(v3, 18);
        uint64_t v[4] = {v0, v1, v2, v3};
        for (int i = 0; i < 4; i++) h = (h ^ hash__lane(0, v[i])) * HASH_M1 + HASH_M3;
    } else {
        h = seed + HASH_M3;
    }
    h += (uint64_t)n;
    for (; left >= 8; left -= 8, p += 8) h = hash__rotl(h ^ hash__lane(0, hash__word(p)), 27) * HASH_M1 + HASH_M4;
    for (; left > 0; left--, p++) h = hash__rotl(h ^ (*p * HASH_M3), 11) * HASH_M1;
    return hash__fmix(h);
}

hash_key hash_key_of(const void *p, size_t n)
{
    hash_key k = {hash_bytes(p, n, HASH_M2), hash_bytes(p, n, HASH_M5)};
    return k;
}

hash_key hash_key_next(hash_key parent, const int32_t *tokens, int n)
{
    size_t len = (size_t)(n > 0 ? n : 0) * sizeof *tokens;
    uint64_t s0 = hash__fmix(parent.lo ^ hash__rotl(parent.hi, 29));
    uint64_t s1 = hash__fmix(parent.hi + parent.lo * HASH_M3 + HASH_M1);
    hash_key k = {hash_bytes(tokens, len, s0), hash_bytes(tokens, len, s1)};
    return k;
}

char *hash_key_hex(hash_key k, char *buf)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        buf[i] = digits[(k.hi >> (60 - 4 * i)) & 15];
        buf[16 + i] = digits[(k.lo >> (60 - 4 * i)) & 15];
    }
    buf[32] = 0;
    return buf;
}

void hash_init(hash_state *h)
{
    h->a = HASH_M2;
    h->b = HASH_M5;
    h->n = 0;
}

void hash_update(hash_state *h, const void *p, size_t n)
{
    h->a = hash_bytes(p, n, h->a ^ h->n);
    h->b = hash_bytes(p, n, h->b + h->n * HASH_M1);
    h->n += n;
}

hash_key hash_final(const hash_state *h)
{
    hash_key k = {hash__fmix(h->a ^ h->n), hash__fmix(h->b + h->n)};
    return k;
}
