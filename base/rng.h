/*
 * rng.h — the project's deterministic generators, includable from C and from CUDA (host and
 * device code alike):
 *
 *   rng_splitmix64     a small sequential generator: synthetic weights, benchmark prompts, test
 *                      data. A pure function of its state, so a seed replays a run exactly.
 *   rng_philox4x32     Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 *                      3", SC'11; the generator of Random123, cuRAND and JAX): a counter-based
 *                      generator, a keyed bijection of a 128-bit counter. Nothing is carried from
 *                      one draw to the next, so any draw can be computed anywhere, in any order.
 *   rng_draw_uniform   the sampler's draws: one uniform double in [0, 1) per
 *                      (key, position, draw, stream) —
 *
 *        key     = the choice's seed (64 bits)
 *        counter = [ position | draw | stream | 0 ]   four 32-bit words
 *
 *   The sampler's key for choice c of a request with seed s is s + c, as vLLM seeds the choices
 *   of an n > 1 request (choice c draws what a single request with seed s + c would). position is
 *   the index of the token being drawn in its sequence (prompt + output), draw an index within
 *   the position (the sampler uses draw 0; a speculative step's acceptance tests can use draws
 *   1, 2, …), and stream separates the uses of one key (RNG_STREAM_SAMPLE for tokens; other
 *   values are free). Because a draw depends on nothing but these, the same seeded request gives
 *   the same tokens whatever else is batched with it, after a preemption, and on the CPU and the
 *   GPU.
 */
#ifndef KVSERVE_RNG_H
#define KVSERVE_RNG_H

#include <stdint.h>

#include "base/hd.h"

/* Advances *state and returns the next well-mixed 64-bit word. */
static inline BASE_HD uint64_t rng_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Philox-4x32-10: out = the 10-round bijection of ctr under key (Random123's philox4x32). */
static inline BASE_HD void rng_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The uses of one key (the counter's last word). */
enum rng_stream {
    RNG_STREAM_SAMPLE = 0, /* the sampler's token draws */
};

/* A uniform double in [0, 1) (53 random bits) for (key, position, draw) of a stream. */
static inline BASE_HD double rng_draw_uniform(uint64_t key, uint32_t position, uint32_t draw, uint32_t stream)
{
    uint32_t ctr[4] = {position, draw, stream, 0}, k[2] = {(uint32_t)key, (uint32_t)(key >> 32)}, o[4];
    rng_philox4x32(ctr, k, o);
    uint64_t bits = ((uint64_t)o[0] << 32 | o[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0); /* 2^-53 */
}

#endif
