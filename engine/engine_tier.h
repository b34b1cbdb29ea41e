/*
 * engine_tier.h — how the engine sets up the second KV tier (cache/tier.h) for a model and a
 * backend: the fingerprint that names the model's blocks, the block copies over the backend, the
 * tier's creation and its start-up line. engine.c calls it; the tests use the fingerprint.
 */
#ifndef KVSERVE_ENGINE_TIER_H
#define KVSERVE_ENGINE_TIER_H

#include <stddef.h>

#include "cache/hash.h"
#include "cache/kv.h"
#include "cache/tier.h"
#include "engine/backend.h"
#include "model/model.h"

/* Version of what a tier block holds (the backend's tiles of K, V and scales, as kvserve computes
 * them); a change of the layout or of the arithmetic that fills it must bump it. */
#define ENGINE_TIER_FORMAT 1

/* The key of the empty prefix for model m with KV geometry g on backend `backend_name` ("cpu",
 * "cuda"): the format version, the backend, the geometry (layers, kv heads, head size, block
 * size, dtype, retention rule), the GGUF file's identity (size, modification time, inode,
 * device) and its metadata and tensor table byte for byte. Another model, geometry, dtype or
 * backend gives another key, so its blocks are never found; a file edited in place under the
 * same identity is caught by the tier's full hash (engine_tier_create). */
hash_key engine_tier_fingerprint(const model *m, const kv_geom *g, const char *backend_name);

typedef struct engine_tier_config {
    size_t host_bytes;    /* --kv-host-memory (0: no host tier) */
    const char *disk_dir; /* --kv-disk-dir (NULL: no file tier) */
    size_t disk_bytes;    /* --kv-disk-size (0: the tier's default) */
    void (*wake)(void *ud); /* the engine's wake-up when a load completes */
    void *wake_ud;
    int quiet;
    int io_timeout_ms;    /* --kv-disk-timeout (0: the tier's default) */
} engine_tier_config;

/* The tier of c for model m with geometry g (one layer group) on be, or NULL with a one-line
 * message in err. *root gets the fingerprint. The tier hashes m's file in the background
 * (m->path, checked against the identity it had when it was opened). */
tier *engine_tier_create(const engine_tier_config *c, backend *be, const model *m, const kv_geom *g, hash_key *root,
                         char *err, size_t err_len);

/* The start-up line: each tier's capacity in blocks and tokens, and what a restart found. */
void engine_tier_log(const tier *t, const kv_geom *g, hash_key root);

#endif
