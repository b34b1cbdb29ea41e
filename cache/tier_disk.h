/*
 * tier_disk.h — the second tier's block files (cache/tier_disk.c): their on-disk format and the
 * calls cache/tier.c (index, levels, I/O thread) makes to read, write, list and remove them.
 * Nothing outside cache/tier*.c includes it.
 *
 * A block file, little-endian, TIER__HDR_FIXED + 4 × block_size + 8 header bytes then the block:
 *
 *   0  magic "KVSTIER1"        8    48 parent key            16
 *   8  format version (u32)    4    64 block_size (u32)       4
 *  12  header bytes (u32)      4    68 reserved, 0 (u32)      4
 *  16  fingerprint            16    72 block bytes (u64)      8
 *  32  key                    16    80 block checksum (u64)   8
 *  88  tokens [block_size] (i32), then the header's own checksum (u64) over bytes 0 .. 88 + 4 × bs
 *
 * A file is used only when its size is exactly header + block bytes, both checksums match and
 * its fingerprint, key and block size are the ones asked for.
 */
#ifndef KVSERVE_TIER_DISK_H
#define KVSERVE_TIER_DISK_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/hash.h"

#define TIER__MAGIC "KVSTIER1"
#define TIER__VERSION 1u
#define TIER__HDR_FIXED 88

/* The result of a file operation that found something other than a regular file where a block
 * file (or the lock, or a temporary file) should be: a FIFO, a device, a socket, a directory or a
 * symbolic link. Nothing is read, written or deleted through it. */
#define TIER__ENOTREG (-EMEDIUMTYPE)

/* Bytes of a file's header for blocks of bs tokens. */
static inline size_t tier__hdr_bytes(int bs)
{
    return TIER__HDR_FIXED + 4u * (size_t)bs + 8u;
}

/* What a file says about its block. */
typedef struct tier__meta {
    hash_key fp, key, parent;
    int block_size;
    const int32_t *tokens; /* [block_size] */
} tier__meta;

/* Opens path (flags as open(2), plus O_NONBLOCK, O_NOFOLLOW and O_CLOEXEC, which never wait for
 * a FIFO's other end nor follow a link) and checks that it is a regular file. The descriptor, or
 * TIER__ENOTREG, or another negative errno. */
int tier__open_regular(const char *path, int flags, mode_t mode);

/* Creates (when missing) <dir>/kvserve-<fp hex>/ and its 256 subfolders and takes an exclusive
 * lock on its lock file. *root gets the folder's path (malloc'd), *lock_fd the lock's
 * descriptor. 0, or a negative errno with a one-line message in err. */
int tier__disk_open(const char *dir, hash_key fp, char **root, int *lock_fd, char *err, size_t err_len);

/* Writes m and the block's n bytes to <key>.tmp, then renames it to <key>.kvb: a reader never
 * sees a partial file. 0, TIER__ENOTREG (something that is not a file holds one of the two
 * names: the block is not written), or another negative errno (the temporary file removed). */
int tier__disk_write(const char *root, const tier__meta *m, const void *block, size_t n);

/* Reads key's file into block[n] and checks it against m (fingerprint, key, block size; the
 * parent and tokens are not compared). 0, -ENOENT (no file), -EBADMSG (truncated, corrupt or
 * not this block's: the caller deletes it), TIER__ENOTREG (not a regular file: never read), or
 * another negative errno (an I/O error). Marks the file as used now (its modification time
 * orders the LRU across restarts). */
int tier__disk_read(const char *root, const tier__meta *m, void *block, size_t n);

/* Removes key's file (absent is fine). 0 or a negative errno. */
int tier__disk_unlink(const char *root, hash_key key);

/* Visits the folder: calls found(ud, key, mtime) for each block file of exactly file_bytes
 * bytes, deletes leftover .tmp files and block files of any other size, and counts those in
 * *n_ignored; names of ours that are not regular files are left alone and counted in
 * *n_skipped. 0 or a negative errno. */
int tier__disk_scan(const char *root, size_t file_bytes, void (*found)(void *ud, hash_key key, int64_t mtime_ns),
                    void *ud, int64_t *n_ignored, int64_t *n_skipped);

/* The folder's model stamp (<root>/model: the hash of the model content its blocks were computed
 * from) into *key, removing it: until this run vouches again, no stamp stands for the folder.
 * 0, -ENOENT (none), -EBADMSG (damaged, or not a file), or another negative errno. */
int tier__stamp_take(const char *root, hash_key *key);
/* Writes the stamp (a temporary file renamed into place). 0 or a negative errno. */
int tier__stamp_write(const char *root, hash_key key);

/* Free bytes of the file system holding root, for an unprivileged writer. 0 or a negative errno. */
int tier__disk_free(const char *root, uint64_t *free_bytes);

#endif
