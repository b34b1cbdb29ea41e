/*
 * tier_disk.c — the file tier's files: one per block, written whole or not at all (a temporary
 * file renamed into place), checked on every read (sizes, fingerprint, key, two checksums), and
 * found again by a scan after a restart. The layout is in tier_disk.h.
 *
 * No fsync: a block file is a cache entry. After a crash a file is complete (renamed after its
 * last byte was written) or fails its size or checksum test and is deleted; both are safe.
 *
 * Only regular files are ever read or written: every open is O_NONBLOCK | O_NOFOLLOW and is
 * checked with fstat before a byte moves, so a FIFO, a device, a directory or a symbolic link
 * where a block file should be is reported (TIER__ENOTREG) instead of blocking the I/O thread
 * or being followed.
 *
 * Called from the tier's I/O thread (reads, writes, unlinks, the model stamp) and from
 * tier_create (open, scan); nothing here keeps state.
 */
#include "cache/tier_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#define TIER__SUFFIX ".kvb"
#define TIER__TMP ".tmp"

/* <root>/<first two hex digits>/<32 hex digits><suffix> */
static void tier__file_path(const char *root, hash_key key, const char *suffix, char *buf, size_t n)
{
    char hex[33];
    hash_key_hex(key, hex);
    snprintf(buf, n, "%s/%.2s/%s%s", root, hex, hex, suffix);
}

static void tier__put_u32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void tier__put_u64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static void tier__put_key(unsigned char *p, hash_key k)
{
    tier__put_u64(p, k.lo);
    tier__put_u64(p + 8, k.hi);
}

static uint32_t tier__get_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t tier__get_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static hash_key tier__get_key(const unsigned char *p)
{
    hash_key k = {tier__get_u64(p), tier__get_u64(p + 8)};
    return k;
}

/* Makes path a folder (an existing one is fine). 0 or a negative errno. */
static int tier__mkdir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
        return errno ? -errno : -ENOTDIR;
    }
    return -errno;
}

int tier__open_regular(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return errno == ELOOP || errno == ENXIO || errno == EISDIR ? TIER__ENOTREG : -errno;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? -errno : S_ISREG(st.st_mode) ? 0 : TIER__ENOTREG;
    if (rc) {
        close(fd);
        return rc;
    }
    /* Regular-file I/O ignores O_NONBLOCK; it is cleared anyway so that nothing depends on it. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

int tier__disk_open(const char *dir, hash_key fp, char **root, int *lock_fd, char *err, size_t err_len)
{
    char hex[33], path[PATH_MAX];
    hash_key_hex(fp, hex);
    int rc = tier__mkdir(dir);
    if (rc) {
        snprintf(err, err_len, "cannot create the KV disk tier folder %s: %s", dir, strerror(-rc));
        return rc;
    }
    if (snprintf(path, sizeof path, "%s/kvserve-%s", dir, hex) >= (int)sizeof path - 8) {
        snprintf(err, err_len, "the KV disk tier folder name %s is too long", dir);
        return -ENAMETOOLONG;
    }
    if ((rc = tier__mkdir(path))) {
        snprintf(err, err_len, "cannot create %s: %s", path, strerror(-rc));
        return rc;
    }
    char sub[PATH_MAX + 64];
    for (int i = 0; i < 256; i++) {
        snprintf(sub, sizeof sub, "%s/%02x", path, i);
        if ((rc = tier__mkdir(sub))) {
            snprintf(err, err_len, "cannot create %s: %s", sub, strerror(-rc));
            return rc;
        }
    }
    snprintf(sub, sizeof sub, "%s/lock", path);
    int fd = tier__open_regular(sub, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        snprintf(err, err_len, "cannot open %s: %s", sub, fd == TIER__ENOTREG ? "not a regular file" : strerror(-fd));
        return fd;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        snprintf(err, err_len, "the KV disk tier %s is in use by another process (one server per folder and model)",
                 path);
        close(fd);
        return rc;
    }
    char *r = strdup(path);
    if (!r) {
        close(fd);
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    *root = r;
    *lock_fd = fd;
    return 0;
}

/* The header of m for a block of n bytes with checksum sum, into h[tier__hdr_bytes]. */
static void tier__hdr_fill(unsigned char *h, const tier__meta *m, size_t n, uint64_t sum)
{
    size_t hb = tier__hdr_bytes(m->block_size), body = hb - 8;
    memset(h, 0, hb);
    memcpy(h, TIER__MAGIC, 8);
    tier__put_u32(h + 8, TIER__VERSION);
    tier__put_u32(h + 12, (uint32_t)hb);
    tier__put_key(h + 16, m->fp);
    tier__put_key(h + 32, m->key);
    tier__put_key(h + 48, m->parent);
    tier__put_u32(h + 64, (uint32_t)m->block_size);
    tier__put_u64(h + 72, (uint64_t)n);
    tier__put_u64(h + 80, sum);
    memcpy(h + TIER__HDR_FIXED, m->tokens, 4u * (size_t)m->block_size);
    tier__put_u64(h + body, hash_bytes(h, body, 0));
}

/* Writes all of iov or fails. 0 or a negative errno (a short write of a full disk: -ENOSPC). */
static int tier__writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (w == 0) return -ENOSPC;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

int tier__disk_write(const char *root, const tier__meta *m, const void *block, size_t n)
{
    size_t hb = tier__hdr_bytes(m->block_size);
    unsigned char *h = malloc(hb);
    if (!h) return -ENOMEM;
    tier__hdr_fill(h, m, n, hash_bytes(block, n, 0));
    char tmp[PATH_MAX], dst[PATH_MAX];
    tier__file_path(root, m->key, TIER__TMP, tmp, sizeof tmp);
    tier__file_path(root, m->key, TIER__SUFFIX, dst, sizeof dst);
    /* A leftover of an interrupted write is removed first: the new one is created exclusively,
     * so whatever else sits under that name (a FIFO, a directory) is never opened. */
    if (unlink(tmp) != 0 && errno != ENOENT && errno != EISDIR && errno != EPERM) {
        free(h);
        return -errno;
    }
    int fd = tier__open_regular(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644), rc = fd < 0 ? fd : 0;
    if (rc == -EEXIST) rc = TIER__ENOTREG; /* not a file, since unlink did not remove it */
    if (!rc) {
        struct iovec iov[2] = {{h, hb}, {(void *)block, n}};
        rc = tier__writev_all(fd, iov, 2);
        if (close(fd) != 0 && !rc) rc = -errno;
    }
    if (!rc && rename(tmp, dst) != 0) rc = errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST ? TIER__ENOTREG : -errno;
    if (rc && fd >= 0) unlink(tmp);
    free(h);
    return rc;
}

/* Reads exactly n bytes at off. 0, -EBADMSG (the file ends first) or a negative errno. */
static int tier__pread_all(int fd, void *buf, size_t n, off_t off)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (r == 0) return -EBADMSG;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

/* 0 when header h describes m's block of n bytes; -EBADMSG otherwise. *sum gets the block's
 * checksum. */
static int tier__hdr_check(const unsigned char *h, const tier__meta *m, size_t n, uint64_t *sum)
{
    size_t hb = tier__hdr_bytes(m->block_size);
    if (memcmp(h, TIER__MAGIC, 8) || tier__get_u32(h + 8) != TIER__VERSION || tier__get_u32(h + 12) != hb)
        return -EBADMSG;
    if (tier__get_u64(h + hb - 8) != hash_bytes(h, hb - 8, 0)) return -EBADMSG;
    if (!hash_key_eq(tier__get_key(h + 16), m->fp) || !hash_key_eq(tier__get_key(h + 32), m->key) ||
        tier__get_u32(h + 64) != (uint32_t)m->block_size || tier__get_u64(h + 72) != (uint64_t)n)
        return -EBADMSG;
    *sum = tier__get_u64(h + 80);
    return 0;
}

int tier__disk_read(const char *root, const tier__meta *m, void *block, size_t n)
{
    char path[PATH_MAX];
    tier__file_path(root, m->key, TIER__SUFFIX, path, sizeof path);
    int fd = tier__open_regular(path, O_RDONLY, 0);
    if (fd < 0) return fd;
    size_t hb = tier__hdr_bytes(m->block_size);
    unsigned char *h = malloc(hb);
    struct stat st;
    uint64_t sum = 0;
    int rc = h ? 0 : -ENOMEM;
    if (!rc && fstat(fd, &st) != 0) rc = -errno;
    if (!rc && (uint64_t)st.st_size != hb + n) rc = -EBADMSG;
    if (!rc) rc = tier__pread_all(fd, h, hb, 0);
    if (!rc) rc = tier__hdr_check(h, m, n, &sum);
    if (!rc) rc = tier__pread_all(fd, block, n, (off_t)hb);
    if (!rc && hash_bytes(block, n, 0) != sum) rc = -EBADMSG;
    if (!rc) futimens(fd, NULL); /* best effort: the LRU order a restart sees */
    free(h);
    close(fd);
    return rc;
}

int tier__disk_unlink(const char *root, hash_key key)
{
    char path[PATH_MAX];
    tier__file_path(root, key, TIER__SUFFIX, path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT) return -errno;
    return 0;
}

/* The key of a file name of 32 hex digits and the suffix, or -EINVAL. */
static int tier__parse_name(const char *name, hash_key *key)
{
    if (strlen(name) != 32 + strlen(TIER__SUFFIX) || strcmp(name + 32, TIER__SUFFIX)) return -EINVAL;
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -EINVAL;
        w[i / 16] = w[i / 16] << 4 | (uint64_t)d;
    }
    key->hi = w[0];
    key->lo = w[1];
    return 0;
}

static int tier__is_tmp(const char *name)
{
    size_t n = strlen(name), s = strlen(TIER__TMP);
    return n > s && !strcmp(name + n - s, TIER__TMP);
}

int tier__disk_scan(const char *root, size_t file_bytes, void (*found)(void *ud, hash_key key, int64_t mtime_ns),
                    void *ud, int64_t *n_ignored, int64_t *n_skipped)
{
    char sub[PATH_MAX + 64];
    for (int i = 0; i < 256; i++) {
        snprintf(sub, sizeof sub, "%s/%02x", root, i);
        DIR *d = opendir(sub);
        if (!d) return -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
            const char *name = de->d_name;
            hash_key key;
            struct stat st;
            int tmp = tier__is_tmp(name), blk = tier__parse_name(name, &key) == 0;
            if (!tmp && !blk) continue; /* not ours: left alone */
            if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            if (!S_ISREG(st.st_mode)) { /* never opened, never deleted: counted */
                (*n_skipped)++;
                continue;
            }
            if (blk && (uint64_t)st.st_size == file_bytes) {
                found(ud, key, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
                continue;
            }
            unlinkat(dirfd(d), name, 0); /* an interrupted write, or a block of another size */
            (*n_ignored)++;
        }
        closedir(d);
    }
    return 0;
}

/* <root>/model: which model content the folder's blocks were computed from. */
#define TIER__STAMP_MAGIC "KVSMODEL"
#define TIER__STAMP_BYTES 32

int tier__stamp_take(const char *root, hash_key *key)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model", root);
    int fd = tier__open_regular(path, O_RDONLY, 0);
    if (fd < 0) {
        if (fd == TIER__ENOTREG) return -EBADMSG;
        return fd;
    }
    unsigned char b[TIER__STAMP_BYTES];
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? -errno : st.st_size != TIER__STAMP_BYTES ? -EBADMSG : tier__pread_all(fd, b, sizeof b, 0);
    close(fd);
    if (!rc && (memcmp(b, TIER__STAMP_MAGIC, 8) || tier__get_u64(b + 24) != hash_bytes(b, 24, 0))) rc = -EBADMSG;
    if (!rc) *key = tier__get_key(b + 8);
    /* Until this run has hashed its own model, nothing vouches for the folder's blocks. */
    if (unlink(path) != 0 && errno != ENOENT && !rc) rc = -errno;
    return rc;
}

int tier__stamp_write(const char *root, hash_key key)
{
    char tmp[PATH_MAX], dst[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/model.tmp", root);
    snprintf(dst, sizeof dst, "%s/model", root);
    unsigned char b[TIER__STAMP_BYTES];
    memcpy(b, TIER__STAMP_MAGIC, 8);
    tier__put_key(b + 8, key);
    tier__put_u64(b + 24, hash_bytes(b, 24, 0));
    if (unlink(tmp) != 0 && errno != ENOENT) return -errno;
    int fd = tier__open_regular(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return fd == -EEXIST ? TIER__ENOTREG : fd;
    struct iovec iov = {b, sizeof b};
    int rc = tier__writev_all(fd, &iov, 1);
    if (close(fd) != 0 && !rc) rc = -errno;
    if (!rc && rename(tmp, dst) != 0) rc = -errno;
    if (rc) unlink(tmp);
    return rc;
}

int tier__disk_free(const char *root, uint64_t *free_bytes)
{
    struct statvfs sv;
    if (statvfs(root, &sv) != 0) return -errno;
    *free_bytes = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    return 0;
}
