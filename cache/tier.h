/*
 * tier.h — the second KV tier: full prefix-cache blocks kept outside the block pool, in host RAM
 * and in files, so that an evicted prefix comes back by a copy instead of a recomputation, and a
 * restarted server finds what the previous one wrote (warm restart).
 *
 *   engine thread                                     I/O thread
 *   tier_save(key, block)  ─copy out─► staging ─────► write <key>.tmp, rename to <key>.kvb
 *   tier_spill(key, block) ─copy out─► host slot          (a block's file is whole, with its
 *   tier_load(key, block, tag)                             checksum, or absent)
 *       host slot ─copy in─► block (done at once)
 *       file ────────────────────────────────────────► read, verify, copy in (when the copy
 *   tier_poll() ◄── completions: (tag, block, ok) ◄────     may run there, else the engine does)
 *
 * Blocks are named by hash.h keys: the model's fingerprint chained with the token prefix. The
 * file tier lives in <dir>/kvserve-<fingerprint>/, one file per block under a two-hex-digit
 * subfolder, so servers of other models (or geometries, dtypes) never see each other's blocks,
 * and a restart with the same model finds every block that was completely written.
 *
 * Levels: a block is in the host tier (a slot of host memory, pinned for a GPU), in the file
 * tier, in both, or absent; each tier drops its least recently used block when it is full (a
 * block being read stays). A write error or a full disk turns the file tier off with one log
 * line; loads of such blocks then fail and the caller recomputes them. Nothing here fails a
 * request.
 *
 * The file tier never waits on its files: only regular files are opened (a FIFO, a device or a
 * directory under a block's name is skipped and counted), every file job has a deadline
 * (io_timeout_ms), a load not done by then completes as failed (the caller recomputes; the
 * I/O thread's late result is dropped and never touches the block), and an I/O thread stuck in
 * one operation past the deadline puts the tier in a stalled state (loads miss, writes are
 * skipped, one log line) until the operation returns. tier_destroy waits for the I/O thread no
 * longer than the deadline: a thread stuck in a system call is left behind and frees what it
 * still uses when the call returns.
 *
 * Blocks of earlier runs: with source_path set, the file's whole content is hashed on a
 * background thread, and the folder's blocks from earlier runs are loaded only once that hash
 * equals the stamp the run that wrote them left (<folder>/model); when it differs they are
 * deleted. Blocks this run writes load at once, and the stamp is renewed once the hash is
 * known. So a model edited in place under an unchanged name, size and time never serves KV
 * computed from its old bytes.
 *
 * Copies between the KV arena and host memory go through tier_copy (the backend's
 * kv_block_out / kv_block_in behind the engine). A copy may complete asynchronously (a GPU
 * stream): a buffer filled by copy out is read only after a fence, and a buffer read by copy in
 * is reused only after one. tier_poll fences first when anything waits for it.
 *
 * Threading: every function here is for the engine thread; the tier's own I/O thread runs the
 * file jobs and calls copy.in only when copy.in_any_thread.
 */
#ifndef KVSERVE_TIER_H
#define KVSERVE_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "cache/hash.h"

/* How the tier moves one block between the KV arena and host memory. */
typedef struct tier_copy {
    /* Copies every byte of block `block` (K, V and scales of every layer) into dst[block_bytes].
     * May complete later (see fence). 0 or -EIO. Engine thread. */
    int (*out)(void *ud, int32_t block, void *dst);
    /* Copies src[block_bytes] into block `block`. May complete later. 0 or -EIO. Engine thread,
     * or the I/O thread when in_any_thread (the block is then used by no step until the load's
     * completion has been polled). */
    int (*in)(void *ud, int32_t block, const void *src);
    int in_any_thread;
    /* Waits until every copy issued so far has completed. NULL: copies are synchronous. 0 or
     * -EIO. Engine thread. */
    int (*fence)(void *ud);
    /* Host memory the copies can use (pinned for a GPU); NULL on failure. NULL functions:
     * aligned malloc and free. */
    void *(*host_alloc)(void *ud, size_t bytes);
    void (*host_free)(void *ud, void *p);
    void *ud;
} tier_copy;

/* A file's identity when it was read: a change of any field means other content. */
typedef struct tier_file_id {
    uint64_t size, ino, dev;
    int64_t mtime_ns;
} tier_file_id;

/* A file job's deadline without tier_config.io_timeout_ms. */
#define TIER_IO_TIMEOUT_MS 2000

typedef struct tier_config {
    size_t block_bytes;    /* bytes of one block: kv_bytes_per_block of the geometry */
    int block_size;        /* tokens per block (each file also records its block's tokens) */
    hash_key fingerprint;  /* the root of the keys; names the file tier's folder */
    size_t host_bytes;     /* host-RAM tier capacity; 0: none */
    const char *disk_dir;  /* file tier folder (created when missing); NULL or "": none */
    size_t disk_bytes;     /* file tier capacity; 0: TIER_DISK_DEFAULT */
    size_t staging_bytes;  /* host buffers for file writes and reads in flight; 0: 64 MiB,
                              at least TIER_MIN_STAGING blocks */
    tier_copy copy;
    void (*wake)(void *ud); /* called (on any of the tier's threads) after a load completes */
    void *wake_ud;
    int quiet;             /* 1: no log lines */
    int io_timeout_ms;     /* a file job's deadline; 0: TIER_IO_TIMEOUT_MS */
    const char *source_path; /* the file the blocks are computed from (the model): hashed in the
                              * background, its hash vouches for blocks of earlier runs; NULL:
                              * they load at once */
    tier_file_id source_id;  /* source_path's identity when it was read */
} tier_config;

/* Without --kv-disk-size: half of the file system's free space (counting this model's files
 * already there), at most this much. */
#define TIER_DISK_DEFAULT_MAX ((size_t)64 << 30)
#define TIER_MIN_STAGING 4

/* The file tier's capacity without --kv-disk-size for a folder on a file system with free_bytes
 * free and used_bytes already taken by this model's files. */
static inline size_t tier_disk_default(uint64_t free_bytes, uint64_t used_bytes)
{
    double half = ((double)free_bytes + (double)used_bytes) / 2;
    return half < (double)TIER_DISK_DEFAULT_MAX ? (size_t)half : TIER_DISK_DEFAULT_MAX;
}

enum tier_level { TIER_HOST = 0, TIER_DISK = 1 };

/* Bytes of one block's file: a header (key, parent key, fingerprint, tokens, checksums) then the
 * block's bytes. The file tier holds disk_bytes / this many blocks. */
size_t tier_file_bytes(size_t block_bytes, int block_size);

typedef struct tier tier;

/* Creates the tiers c asks for and starts the I/O thread. The file tier's folder is created
 * and scanned: complete files of this fingerprint are indexed (least recently written first),
 * leftovers of interrupted writes are deleted, files beyond the capacity are deleted oldest
 * first. NULL with a one-line message in err: no tier asked for, memory, or a folder that
 * cannot be created or is in use by another process. c is copied (disk_dir too). */
tier *tier_create(const tier_config *c, char *err, size_t err_len);

/* Finishes every queued write (and read), stops the I/O thread and frees everything. Loads not
 * yet polled are dropped. Bounded, to about twice the deadline: the queue gets one deadline in
 * all to drain, and when the I/O thread has not stopped one deadline later (a job stuck, or a
 * slow disk with writes still queued) the queued jobs are dropped and the thread is left behind
 * (it frees what it still uses when its system call returns; the copy functions and wake are
 * never called again). */
void tier_destroy(tier *t);

/* 1 when tier_load(key) would start a load (the host tier holds it, or the file tier has it or
 * is writing it). */
int tier_has(const tier *t, hash_key key);

/* A full block entered the prefix cache: write it behind to the file tier (copied out now into
 * a staging buffer, written by the I/O thread). Nothing happens without a file tier, when it
 * already has the block (it is marked used), or when no staging buffer is free (counted in
 * writes_skipped). parent is the key of the previous block (the fingerprint for the first);
 * tokens[block_size] are the block's tokens. */
void tier_save(tier *t, hash_key key, hash_key parent, const int32_t *tokens, int32_t block);

/* The block leaves the pool (prefix-cache eviction): copies it into the host tier, and writes
 * it to the file tier if it is not there yet. Returns 1 when the tier holds its data afterwards,
 * 0 when it is lost. */
int tier_spill(tier *t, hash_key key, hash_key parent, const int32_t *tokens, int32_t block);

/* Starts loading key into block (which the caller owns and no step uses until the completion).
 * 0: a completion with tag follows from tier_poll (from the host tier it is ready at once);
 * -ENOENT: the tier does not have key; -EBUSY: no staging buffer is free right now. */
int tier_load(tier *t, hash_key key, int32_t block, uint64_t tag);

typedef struct tier_done {
    uint64_t tag;   /* tier_load's */
    int32_t block;
    int ok;         /* 1: the block holds key's data; 0: the load failed (the caller recomputes) */
    int level;      /* enum tier_level it came from */
} tier_done;

/* Completes what the I/O thread finished (and fences when something waits for one): writes
 * become durable or turn the file tier off, loads are returned in out[0 .. max); loads past
 * their deadline complete as failed, and the stalled state and the source's verification are
 * updated. Returns the number of completed loads written to out; call again while it returns
 * max. */
int tier_poll(tier *t, tier_done *out, int max);

/* Loads started and not yet returned by tier_poll. */
int tier_loads_pending(const tier *t);

/* Waits until every write queued so far is on disk (or has failed); a drain calls it before the
 * process exits. 0, or -ETIMEDOUT when the I/O thread spent longer than the deadline on one job
 * (the rest is still queued). */
int tier_flush(tier *t);

/* Microseconds until the earliest deadline tier_poll acts on (a load's, the stalled check's), or
 * -1 when none: the caller sleeps no longer than this. */
int64_t tier_next_deadline_us(const tier *t);

typedef struct tier_stats {
    int64_t host_blocks, host_capacity;   /* blocks in the host tier / it holds */
    int64_t disk_blocks, disk_capacity;   /* the same for the file tier */
    int64_t hits_host, hits_disk;         /* blocks loaded back from each */
    int64_t load_failures;                /* loads that failed (the caller recomputed) */
    int64_t bytes_written, bytes_read;    /* file tier: whole files */
    int64_t bytes_to_host, bytes_from_host; /* host tier copies */
    int64_t writes_skipped;               /* write-behind skipped: no staging buffer, or no room */
    int64_t files_ignored;                /* files dropped as incomplete, corrupt or foreign */
    int64_t files_skipped;                /* non-regular files under a block's name, skipped */
    int64_t io_timeouts;                  /* loads given up at their deadline (recomputed) */
    int disk_on;                          /* 1 while the file tier works */
    int disk_stalled;                     /* 1 while the I/O thread is stuck past the deadline */
    int verified;                         /* 1 once the source's hash was applied (or none is
                                           * needed): blocks of earlier runs loadable or gone */
    int64_t old_blocks;                   /* blocks of earlier runs not vouched for (never
                                           * loaded; all of them until the hash is known) */
    size_t file_bytes;                    /* bytes of one block's file */
} tier_stats;

void tier_get_stats(const tier *t, tier_stats *out);

/* The file tier's folder for this fingerprint (NULL without one). Borrowed. */
const char *tier_disk_path(const tier *t);

/* Asserts the invariants: index and entries agree, each level's LRU list holds exactly its
 * blocks, host slots are used once, counts within capacity. */
void tier_check(const tier *t);

#endif
