/*
 * rng.h — the project's one small deterministic generator, splitmix64: it seeds the sampler's
 * xoshiro256** streams (as xoshiro's authors recommend) and draws synthetic weights, benchmark
 * prompts and test data. A pure function of its state, so a seed replays a run exactly.
 */
#ifndef KVSERVE_RNG_H
#define KVSERVE_RNG_H

#include <stdint.h>

/* Advances *state and returns the next well-mixed 64-bit word. */
static inline uint64_t rng_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
