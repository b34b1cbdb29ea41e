/*
 * test_tier.c — the second KV tier (cache/tier.c, cache/tier_disk.c, cache/hash.c) on a fake KV
 * arena: blocks of bytes whose contents are a function of the key they hold, so every load is
 * checked byte for byte.
 *
 * Random operations (save, spill, load) run against a brute-force model of the two levels (an
 * LRU list of keys per level with its capacity) and tier_check after every one; the copies run
 * synchronously (as the CPU backend's) or deferred until a fence (as a GPU stream's, with the
 * staging buffers poisoned, so a write or read that did not wait for its fence shows). A
 * restart must find exactly the blocks that were on disk; truncated, corrupt and foreign files
 * are ignored; a failing file system turns the file tier off without failing anything else.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/hash.h"
#include "cache/tier.h"
#include "tests/test_util.h"

#define TT_BB 1000 /* block bytes: not a multiple of 8, so checksums meet their tails */
#define TT_BS 4    /* tokens per block */
#define TT_BLOCKS 8
#define TT_KEYS 40
#define TT_QUEUE 4096

static uint64_t tt_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the fake arena --------------------------------------------------------------------------- */

typedef struct tt_copy {
    int in;        /* 1: host → block, 0: block → host */
    int32_t block;
    void *host;
} tt_copy;

typedef struct tt_arena {
    unsigned char mem[TT_BLOCKS][TT_BB];
    int deferred;  /* 1: copies wait for a fence (a GPU stream) */
    tt_copy q[TT_QUEUE];
    int nq;
    int fences;
} tt_arena;

static void tt_run(tt_copy *c, tt_arena *a)
{
    if (c->in) memcpy(a->mem[c->block], c->host, TT_BB);
    else memcpy(c->host, a->mem[c->block], TT_BB);
}

static int tt_out(void *ud, int32_t block, void *dst)
{
    tt_arena *a = ud;
    tt_copy c = {0, block, dst};
    if (!a->deferred) tt_run(&c, a);
    else a->q[a->nq++] = c;
    cr_assert_leq(a->nq, TT_QUEUE);
    return 0;
}

static int tt_in(void *ud, int32_t block, const void *src)
{
    tt_arena *a = ud;
    tt_copy c = {1, block, (void *)src};
    if (!a->deferred) tt_run(&c, a);
    else a->q[a->nq++] = c;
    cr_assert_leq(a->nq, TT_QUEUE);
    return 0;
}

static int tt_fence(void *ud)
{
    tt_arena *a = ud;
    for (int i = 0; i < a->nq; i++) tt_run(&a->q[i], a);
    a->nq = 0;
    a->fences++;
    return 0;
}

/* Host buffers start poisoned: a file written before its copy completed holds the poison. */
static void *tt_alloc(void *ud, size_t n)
{
    void *p = malloc(n);
    if (p) memset(p, 0xab, n);
    return p;
}

static void tt_free(void *ud, void *p)
{
    free(p);
}

/* The pool reuses block: it gets other bytes, in stream order (after the copies queued before). */
static void tt_reuse(tt_arena *a, int32_t block)
{
    static unsigned char junk[TT_BB];
    memset(junk, 0x5a, sizeof junk);
    tt_in(a, block, junk);
}

static hash_key tt_key(int i)
{
    return hash_key_next(hash_key_of("tt-root", 7), (const int32_t[]){i, 2 * i, 3, 4}, TT_BS);
}

static void tt_content(int i, unsigned char *out)
{
    uint64_t s = 0x5eed0000u + (uint64_t)i;
    for (int b = 0; b < TT_BB; b++) out[b] = (unsigned char)tt_next(&s);
}

/* Puts key i's contents into block. */
static void tt_fill(tt_arena *a, int32_t block, int i)
{
    tt_content(i, a->mem[block]);
}

static int tt_holds(const tt_arena *a, int32_t block, int i)
{
    unsigned char want[TT_BB];
    tt_content(i, want);
    return memcmp(a->mem[block], want, TT_BB) == 0;
}

static tier_config tt_config(tt_arena *a, size_t host_blocks, const char *dir, size_t disk_blocks)
{
    tier_config c;
    memset(&c, 0, sizeof c);
    c.block_bytes = TT_BB;
    c.block_size = TT_BS;
    c.fingerprint = hash_key_of("tt-model", 8);
    c.host_bytes = host_blocks * TT_BB;
    c.disk_dir = dir;
    c.disk_bytes = disk_blocks * tier_file_bytes(TT_BB, TT_BS);
    c.staging_bytes = 4 * TT_BB;
    c.copy = (tier_copy){tt_out, tt_in, !a->deferred, a->deferred ? tt_fence : NULL, tt_alloc, tt_free, a};
    c.quiet = 1;
    return c;
}

static tier *tt_create(const tier_config *c)
{
    char err[512] = "";
    tier *t = tier_create(c, err, sizeof err);
    cr_assert_not_null(t, "tier_create: %s", err);
    tier_check(t);
    return t;
}

/* Polls until every load completed (deadline 10 s); returns the completions in out[0 .. n). */
static int tt_wait(tier *t, tier_done *out, int max)
{
    int n = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (tier_loads_pending(t) > 0) {
        n += tier_poll(t, out + n, max - n);
        clock_gettime(CLOCK_MONOTONIC, &now);
        cr_assert_lt(now.tv_sec - t0.tv_sec, 10, "loads did not complete");
        if (tier_loads_pending(t) > 0) sched_yield();
    }
    return n;
}

/* Loads key i into block 0 and says whether it came back whole (the arena synced first, as the
 * next step on a stream would be). */
static int tt_load(tier *t, tt_arena *a, int i)
{
    memset(a->mem[0], 0, TT_BB);
    int rc = tier_load(t, tt_key(i), 0, 1000u + (uint64_t)i);
    if (rc) return rc;
    tier_done d[4];
    int n = tt_wait(t, d, 4);
    cr_assert_eq(n, 1);
    cr_assert_eq(d[0].tag, 1000u + (uint64_t)i);
    cr_assert_eq(d[0].block, 0);
    if (a->deferred) tt_fence(a);
    if (!d[0].ok) return -EIO;
    cr_assert(tt_holds(a, 0, i), "block %d came back with other bytes", i);
    return 0;
}

/* ---- the model -------------------------------------------------------------------------------- */

/* An LRU list of keys with a capacity: keys[0] is the least recently used. */
typedef struct tt_lru {
    int keys[TT_KEYS];
    int n, cap;
} tt_lru;

static int tt_lru_find(const tt_lru *l, int k)
{
    for (int i = 0; i < l->n; i++)
        if (l->keys[i] == k) return i;
    return -1;
}

static void tt_lru_remove(tt_lru *l, int k)
{
    int i = tt_lru_find(l, k);
    if (i < 0) return;
    memmove(l->keys + i, l->keys + i + 1, (size_t)(l->n - i - 1) * sizeof *l->keys);
    l->n--;
}

/* Touches k, adding it (and dropping the least recently used when full) when add. */
static void tt_lru_use(tt_lru *l, int k, int add)
{
    int present = tt_lru_find(l, k) >= 0;
    if (!present && !add) return;
    tt_lru_remove(l, k);
    if (!present && l->n == l->cap) tt_lru_remove(l, l->keys[0]);
    if (l->cap > 0) l->keys[l->n++] = k;
}

static void tt_compare(const tier *t, const tt_lru *host, const tt_lru *disk)
{
    tier_check(t);
    for (int k = 0; k < TT_KEYS; k++) {
        int want = tt_lru_find(host, k) >= 0 || tt_lru_find(disk, k) >= 0;
        cr_assert_eq(tier_has(t, tt_key(k)), want, "key %d: tier says %d, the model %d", k, !want, want);
    }
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_eq(st.host_blocks, host->n);
    cr_assert_eq(st.disk_blocks, disk->n);
}

/* One random operation on keys of a small universe: save, spill or load, with the model. */
static void tt_random_op(tier *t, tt_arena *a, uint64_t *rng, tt_lru *host, tt_lru *disk, int with_disk)
{
    int k = (int)(tt_next(rng) % TT_KEYS), op = (int)(tt_next(rng) % 3);
    const int32_t toks[TT_BS] = {k, 1, 2, 3};
    hash_key parent = hash_key_of("tt-root", 7);
    int32_t blk = 1 + (int32_t)(tt_next(rng) % (TT_BLOCKS - 1));
    if (op == 0) { /* a block enters the prefix cache: write-behind */
        tt_fill(a, blk, k);
        tier_save(t, tt_key(k), parent, toks, blk);
        tt_reuse(a, blk); /* a copy that runs late would see this */
        if (with_disk) tt_lru_use(disk, k, 1);
        tier_flush(t);
        if (a->deferred) tt_fence(a);
    } else if (op == 1) { /* evicted from the pool */
        tt_fill(a, blk, k);
        int held = tier_spill(t, tt_key(k), parent, toks, blk);
        tt_reuse(a, blk);
        tt_lru_use(host, k, 1);
        if (with_disk) tt_lru_use(disk, k, 1);
        cr_assert_eq(held, 1);
        tier_flush(t);
        if (a->deferred) tt_fence(a);
    } else {
        int want = tt_lru_find(host, k) >= 0 || tt_lru_find(disk, k) >= 0;
        int rc = tt_load(t, a, k);
        cr_assert_eq(rc, want ? 0 : -ENOENT, "load of key %d: %d", k, rc);
        if (tt_lru_find(host, k) >= 0) tt_lru_use(host, k, 0);
        else tt_lru_use(disk, k, 0);
    }
    tt_compare(t, host, disk);
}

static void tt_random_run(int deferred, int host_blocks, int disk_blocks, uint64_t seed, int n_ops)
{
    char dir[256] = "";
    if (disk_blocks) tu_mkdtemp("tier", dir, sizeof dir);
    static tt_arena a;
    memset(&a, 0, sizeof a);
    a.deferred = deferred;
    tier_config c = tt_config(&a, (size_t)host_blocks, disk_blocks ? dir : NULL, (size_t)disk_blocks);
    tier *t = tt_create(&c);
    tt_lru host = {.cap = host_blocks}, disk = {.cap = disk_blocks};
    uint64_t rng = seed;
    fprintf(stderr, "tier random run: seed %llu, host %d, disk %d, %s copies\n", (unsigned long long)seed,
            host_blocks, disk_blocks, deferred ? "deferred" : "synchronous");
    for (int i = 0; i < n_ops; i++) tt_random_op(t, &a, &rng, &host, &disk, disk_blocks > 0);
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_gt(st.hits_host + st.hits_disk, 0, "the run must load something");
    cr_assert_eq(st.writes_skipped, 0);
    tier_destroy(t);
    if (disk_blocks) {
        /* A restart finds exactly what was on disk, and it loads back whole. */
        t = tt_create(&c);
        tt_lru none = {.cap = 0};
        tt_compare(t, &none, &disk);
        for (int i = 0; i < disk.n; i++) cr_assert_eq(tt_load(t, &a, disk.keys[i]), 0);
        tier_destroy(t);
        tu_rm_rf(dir);
    }
}

Test(tier, host_tier_against_model)
{
    tt_random_run(0, 5, 0, tu_seed(11), 400);
    tt_random_run(1, 5, 0, tu_seed(12), 400);
}

Test(tier, both_tiers_against_model_and_restart)
{
    tt_random_run(0, 3, 9, tu_seed(21), 300);
    tt_random_run(1, 3, 9, tu_seed(22), 300);
}

Test(tier, disk_tier_alone_against_model_and_restart)
{
    tt_random_run(0, 0, 7, tu_seed(31), 300);
}

/* ---- files ------------------------------------------------------------------------------------ */

static void tt_file(const char *root, int k, char *path, size_t n)
{
    char hex[33];
    hash_key_hex(tt_key(k), hex);
    snprintf(path, n, "%s/%.2s/%s.kvb", root, hex, hex);
}

/* Flips one byte of a file at off. */
static void tt_flip(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fseek(f, off, SEEK_SET), 0);
    int c = fgetc(f);
    cr_assert_neq(c, EOF);
    cr_assert_eq(fseek(f, off, SEEK_SET), 0);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void tt_save_keys(tier *t, tt_arena *a, int from, int to)
{
    const int32_t toks[TT_BS] = {0, 1, 2, 3};
    for (int k = from; k < to; k++) {
        tt_fill(a, 1, k);
        tier_save(t, tt_key(k), hash_key_of("tt-root", 7), toks, 1);
        tier_flush(t);
    }
}

Test(tier, corrupt_truncated_and_foreign_files_are_ignored)
{
    char dir[256], root[512], path[768];
    tu_mkdtemp("tier-bad", dir, sizeof dir);
    static tt_arena a;
    memset(&a, 0, sizeof a);
    tier_config c = tt_config(&a, 0, dir, 16);
    tier *t = tt_create(&c);
    tt_save_keys(t, &a, 0, 6);
    snprintf(root, sizeof root, "%s", tier_disk_path(t));
    tier_destroy(t);

    /* Another model's tier in the same folder: its blocks live elsewhere. */
    tier_config other = c;
    other.fingerprint = hash_key_of("another model", 13);
    t = tt_create(&other);
    tt_save_keys(t, &a, 6, 8);
    cr_assert_str_neq(tier_disk_path(t), root);
    tier_destroy(t);

    long hdr = (long)(tier_file_bytes(TT_BB, TT_BS) - TT_BB);
    tt_file(root, 0, path, sizeof path);
    tt_flip(path, hdr + 10); /* a block byte: the block checksum fails */
    tt_file(root, 1, path, sizeof path);
    cr_assert_eq(truncate(path, (off_t)tier_file_bytes(TT_BB, TT_BS) - 1), 0);
    tt_file(root, 2, path, sizeof path);
    tt_flip(path, 90); /* a token in the header: the header checksum fails */
    snprintf(path, sizeof path, "%s/00/0123.tmp", root); /* an interrupted write */
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs("partial", f);
    fclose(f);

    t = tt_create(&c);
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_eq(st.files_ignored, 2, "the truncated file and the leftover: %lld", (long long)st.files_ignored);
    cr_assert_eq(st.disk_blocks, 5);
    cr_assert(!tier_has(t, tt_key(1)), "a truncated file is not indexed");
    cr_assert(!tier_has(t, tt_key(6)) && !tier_has(t, tt_key(7)), "another model's blocks are not seen");
    cr_assert_eq(tt_load(t, &a, 0), -EIO, "a corrupt block does not load");
    cr_assert_eq(tt_load(t, &a, 2), -EIO, "a corrupt header does not load");
    cr_assert(!tier_has(t, tt_key(0)) && !tier_has(t, tt_key(2)), "failed files are forgotten");
    for (int k = 3; k < 6; k++) cr_assert_eq(tt_load(t, &a, k), 0, "block %d", k);
    tier_flush(t);
    tier_get_stats(t, &st);
    cr_assert_eq(st.files_ignored, 4);
    cr_assert_eq(st.load_failures, 2);
    cr_assert_eq(st.hits_disk, 3);
    cr_assert(st.disk_on, "a bad file does not turn the tier off");
    tier_check(t);
    tier_destroy(t);
    tt_file(root, 0, path, sizeof path);
    struct stat sb;
    cr_assert_neq(stat(path, &sb), 0, "a corrupt file is deleted");
    tu_rm_rf(dir);
}

Test(tier, failing_writes_turn_the_disk_tier_off)
{
    char dir[256];
    tu_mkdtemp("tier-full", dir, sizeof dir);
    static tt_arena a;
    memset(&a, 0, sizeof a);
    tier_config c = tt_config(&a, 2, dir, 16);
    tier *t = tt_create(&c);
    tt_save_keys(t, &a, 0, 2);
    cr_assert(tier_has(t, tt_key(0)));
    /* Files may not grow past 100 bytes now: every write fails (EFBIG), as a full disk's would. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    tt_save_keys(t, &a, 2, 3);
    setrlimit(RLIMIT_FSIZE, &old);
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_eq(st.disk_on, 0, "a failed write turns the file tier off");
    cr_assert_eq(st.disk_blocks, 0);
    for (int k = 0; k < 3; k++) cr_assert(!tier_has(t, tt_key(k)));
    tt_save_keys(t, &a, 3, 4); /* a no-op now */
    cr_assert_eq(tt_load(t, &a, 3), -ENOENT);
    /* The host tier goes on. */
    const int32_t toks[TT_BS] = {0};
    tt_fill(&a, 2, 9);
    cr_assert_eq(tier_spill(t, tt_key(9), hash_key_of("tt-root", 7), toks, 2), 1);
    cr_assert_eq(tt_load(t, &a, 9), 0);
    tier_check(t);
    tier_destroy(t);
    tu_rm_rf(dir);
}

Test(tier, one_process_per_folder_and_model)
{
    char dir[256], err[512] = "";
    tu_mkdtemp("tier-lock", dir, sizeof dir);
    static tt_arena a;
    memset(&a, 0, sizeof a);
    tier_config c = tt_config(&a, 0, dir, 4);
    tier *t = tt_create(&c);
    cr_assert_null(tier_create(&c, err, sizeof err));
    cr_assert(strstr(err, "in use"), "%s", err);
    tier_config none = c;
    none.disk_dir = NULL;
    cr_assert_null(tier_create(&none, err, sizeof err), "no tier at all is refused");
    tier_destroy(t);
    tu_rm_rf(dir);
}

Test(tier, keys_chain_and_checksums_see_every_byte)
{
    hash_key root = hash_key_of("model A", 7);
    int32_t toks[16];
    for (int i = 0; i < 16; i++) toks[i] = i * 7;
    hash_key k1 = hash_key_next(root, toks, 16);
    cr_assert(hash_key_eq(k1, hash_key_next(root, toks, 16)), "keys are a function of their inputs");
    cr_assert(!hash_key_eq(k1, hash_key_next(hash_key_of("model B", 7), toks, 16)), "another root, another key");
    for (int i = 0; i < 16; i++) { /* any token changes the key, and the next key in the chain */
        toks[i]++;
        hash_key k = hash_key_next(root, toks, 16);
        cr_assert(!hash_key_eq(k, k1));
        cr_assert(!hash_key_eq(hash_key_next(k, toks, 16), hash_key_next(k1, toks, 16)));
        toks[i]--;
    }
    unsigned char buf[333];
    for (int i = 0; i < 333; i++) buf[i] = (unsigned char)(i * 31);
    for (size_t n = 0; n <= sizeof buf; n += 37) { /* every length class: stripes, words, bytes */
        uint64_t h = hash_bytes(buf, n, 5);
        for (size_t i = 0; i < n; i++) {
            buf[i] ^= 1;
            cr_assert_neq(hash_bytes(buf, n, 5), h, "flipping byte %zu of %zu", i, n);
            buf[i] ^= 1;
        }
        cr_assert_neq(hash_bytes(buf, n, 6), h, "the seed matters");
    }
    char hex[33];
    hash_key_hex((hash_key){0x0123456789abcdefull, 0xfedcba9876543210ull}, hex);
    cr_assert_str_eq(hex, "fedcba98765432100123456789abcdef");
}
