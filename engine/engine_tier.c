/*
 * engine_tier.c — the second KV tier's set-up for a model on a backend (see engine_tier.h).
 *
 * The fingerprint (the root of every block's key, and the folder's name) is the model file's
 * identity — size, modification time, inode, device, metadata and tensor table — with the
 * backend and the KV geometry; the tier hashes the whole file in the background and uses blocks
 * of earlier runs only when that hash matches theirs (cache/tier.h), so an in-place edit that
 * keeps the name, size and time cannot bring back KV of the old weights, and a start-up never
 * waits for a read of the whole file.
 *
 * The copies go through the backend's kv_block_out / kv_block_in on layer group 0 (the engine
 * turns the tier off for a model with more than one layer group: it would have to carry every
 * group's companion of a cached block). On the CPU they are synchronous
 * memcpys into host memory the loads may also run on the tier's I/O thread; on a GPU they are
 * queued on the stream, their host buffers are pinned, and the backend's sync is the fence.
 */
#include "engine/engine_tier.h"

#include <stdio.h>
#include <string.h>

#include "model/gguf.h"

hash_key engine_tier_fingerprint(const model *m, const kv_geom *g, const char *backend_name)
{
    hash_state h;
    hash_init(&h);
    static const char tag[] = "kvserve KV tier blocks";
    int32_t v[] = {ENGINE_TIER_FORMAT, g->n_layers, g->n_kv_heads, g->head_dim, g->block_size, g->dtype,
                   kv_n_groups(g), g->rule[0].keep, g->rule[0].window, g->rule[0].sinks, g->latent};
    hash_update(&h, tag, sizeof tag);
    hash_update(&h, backend_name, strlen(backend_name) + 1);
    hash_update(&h, v, sizeof v);
    const gguf_file *f = m->gguf;
    const gguf_file_id *id = gguf_identity(f);
    uint64_t size = gguf_file_size(f);
    uint64_t ident[4] = {size, id->ino, id->dev, (uint64_t)id->mtime_ns};
    hash_update(&h, ident, sizeof ident);
    hash_update(&h, gguf_bytes(f), (size_t)gguf_data_offset(f)); /* metadata and tensor infos */
    return hash_final(&h);
}

static int eng__tier_out(void *ud, int32_t block, void *dst)
{
    backend *be = ud;
    return be->ops->kv_block_out(be, 0, block, dst);
}

static int eng__tier_in(void *ud, int32_t block, const void *src)
{
    backend *be = ud;
    return be->ops->kv_block_in(be, 0, block, src);
}

static int eng__tier_fence(void *ud)
{
    backend *be = ud;
    return be->ops->sync(be);
}

static void *eng__tier_alloc(void *ud, size_t bytes)
{
    backend *be = ud;
    return be->ops->host_alloc(be, bytes);
}

static void eng__tier_free(void *ud, void *p)
{
    backend *be = ud;
    be->ops->host_free(be, p);
}

tier *engine_tier_create(const engine_tier_config *c, backend *be, const model *m, const kv_geom *g, hash_key *root,
                         char *err, size_t err_len)
{
    tier_config tc;
    memset(&tc, 0, sizeof tc);
    tc.block_bytes = kv_group_bytes_per_block(g, 0);
    tc.block_size = g->block_size;
    tc.fingerprint = *root = engine_tier_fingerprint(m, g, be->name);
    tc.host_bytes = c->host_bytes;
    tc.disk_dir = c->disk_dir;
    tc.disk_bytes = c->disk_bytes;
    tc.copy = (tier_copy){eng__tier_out, eng__tier_in, be->kv_in_host, be->kv_in_host ? NULL : eng__tier_fence,
                          eng__tier_alloc, eng__tier_free, be};
    tc.wake = c->wake;
    tc.wake_ud = c->wake_ud;
    tc.quiet = c->quiet;
    tc.io_timeout_ms = c->io_timeout_ms;
    /* The tensor data's content vouches for blocks of earlier runs once the tier has hashed the
     * file in the background (a model read from memory has no file: nothing to hash). */
    const gguf_file_id *id = gguf_identity(m->gguf);
    if (id->ino || id->dev) {
        tc.source_path = m->path;
        tc.source_id = (tier_file_id){id->size, id->ino, id->dev, id->mtime_ns};
    }
    return tier_create(&tc, err, err_len);
}

void engine_tier_log(const tier *t, const kv_geom *g, hash_key root)
{
    tier_stats st;
    tier_get_stats(t, &st);
    char hex[33];
    hash_key_hex(root, hex);
    size_t bb = kv_group_bytes_per_block(g, 0);
    fprintf(stderr, "KV tier (model fingerprint %.12s, blocks of %d tokens, %zu bytes):", hex, g->block_size, bb);
    if (st.host_capacity)
        fprintf(stderr, " host RAM %lld blocks = %lld tokens;", (long long)st.host_capacity,
                (long long)st.host_capacity * g->block_size);
    if (st.disk_capacity)
        fprintf(stderr, " disk %s: %lld files of %zu bytes = %lld tokens, %lld found from an earlier run",
                tier_disk_path(t), (long long)st.disk_capacity, st.file_bytes,
                (long long)st.disk_capacity * g->block_size, (long long)st.disk_blocks);
    fputc('\n', stderr);
}
