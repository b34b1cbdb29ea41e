/*
 * test_util.h — small helpers shared by the test files: where the test data lives and
 * reading a whole file. (No tests here; tests/test_util.c is linked into the test binary.)
 */
#ifndef KVSERVE_TEST_UTIL_H
#define KVSERVE_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "model/mkmodel.h"

/* The repository's test data folder (stories260K and its golden outputs): $KVSERVE_DATA when set
 * and non-empty, else "tests/data" (relative to the repository root, where `make test` runs). */
const char *tu_data_dir(void);

struct backend;

/* The shared data folder (reference sets too large for the repository): $KVSERVE_SHARED when set and non-empty, else "../shared". */
const char *tu_shared_dir(void);

/* Reads a whole file into a malloc'd, NUL-terminated buffer (the caller frees it) and stores its
 * length in *len when len is not NULL. NULL when the file cannot be opened or read. */
char *tu_read_file(const char *path, size_t *len);

/* Runs cmd through the shell and returns everything it wrote to stdout in a malloc'd,
 * NUL-terminated buffer (the caller frees it), its wait status in *status. Fails the calling
 * test when the command cannot be started. */
char *tu_capture(const char *cmd, int *status);

/* Makes a new empty folder $TMPDIR/kvserve-TAG-XXXXXX (/tmp when TMPDIR is unset) and puts its
 * path in path[0 .. n). Fails the calling test on any error. */
void tu_mkdtemp(const char *tag, char *path, size_t n);

/* Removes path and everything below it (files, folders; links are not followed). */
void tu_rm_rf(const char *path);

/* Writes the model p describes (mkm_write) to a new file $TMPDIR/kvserve-TAG-XXXXXX (/tmp when
 * TMPDIR is unset) and puts its path in path[0 .. n). Fails the calling test on any error. */
void tu_write_mkmodel(const mkm_params *p, const char *tag, char *path, size_t n);

/* The next value of the xorshift64 generator at *s (nonzero state), the randomised tests' own. */
uint64_t tu_xorshift(uint64_t *s);

/* A randomised test's seed: $KVSERVE_TEST_SEED when set and non-empty (any strtoull base), else
 * fallback. Tests print the seed they use so that a failure can be replayed. */
uint64_t tu_seed(uint64_t fallback);

/* Fills n_blocks blocks of a quantised type at dst with random bytes from *rng (splitmix64),
 * then sets every f16 field (scales, mins) to a random finite value of magnitude in
 * [2^-12, 2^-4] and either sign, so that values are finite and of sizes weights have. Every
 * bit pattern of the other bytes is a valid block. */
void tu_random_blocks(int type, int64_t n_blocks, uint64_t *rng, void *dst);

/* Only the second step of tu_random_blocks: sets the f16 fields of n_blocks blocks at dst to
 * random finite values and leaves every other byte as it is. */
void tu_random_block_scales(int type, int64_t n_blocks, uint64_t *rng, void *dst);

/* A configuration of the CPU backend's kernels: a SIMD level and the sub-features it uses. */
typedef struct tu_cpu_level {
    int isa;           /* enum cpu_isa */
    unsigned features; /* CPU_FEAT_* bits */
    char name[32];     /* e.g. "avx512+vnni", for messages */
} tu_cpu_level;

#define TU_MAX_LEVELS 8

/* Every configuration this machine can run, lowest first: scalar, then each supported level,
 * AVX-512 also without its sub-features (so an AVX-512 machine tests the kernels a CPU without
 * VNNI would use). Fills out[0 .. TU_MAX_LEVELS) and returns how many. */
int tu_cpu_levels(tu_cpu_level *out);

/* A CPU backend at configuration l with n_threads threads; fails the calling test when it
 * cannot be created. */
struct backend *tu_cpu_backend(const tu_cpu_level *l, int n_threads);

#endif
