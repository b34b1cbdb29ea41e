/*
 * engine_spec.h — the engine's speculative-decoding set-up: the proposer its configuration asks for
 * (engine/spec.h), created for the target's backend and KV geometry. engine.c calls it once while
 * it sizes the KV cache.
 */
#ifndef KVSERVE_ENGINE_SPEC_H
#define KVSERVE_ENGINE_SPEC_H

#include <stddef.h>

#include "cache/kv.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/spec.h"

/* The proposer of c->spec_method into *out (NULL when off) for a target on be with KV geometry g
 * and context n_ctx. A draft model is loaded and checked against the target's vocabulary, and its
 * KV share (and on a device its weights) comes out of *budget. Returns the draft rows a step may
 * verify (0 when off), or -1 with err filled (nothing created). */
int engine_spec_create(const engine_config *c, backend *be, const kv_geom *g, int n_ctx, size_t *budget,
                       spec_proposer **out, char *err, size_t err_len);

#endif
