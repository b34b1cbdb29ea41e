/*
 * test_tier_io.c — the second KV tier against a hostile or stalled file system (cache/tier_io.c,
 * cache/tier_disk.c): FIFOs, directories and links under block names are skipped and counted
 * without blocking or turning the tier off; a load stuck in a file operation completes as failed
 * at its deadline and its late result never reaches the block; a stuck I/O thread stalls the
 * tier (loads miss, writes skip) until it returns; tier_destroy returns within the deadline
 * whatever the thread is doing; and blocks of an earlier run load only once the model file's
 * hash vouches for them (an in-place edit that keeps the name, size and time deletes them).
 *
 * The stall is the I/O thread held by tier__test_hook, as a file operation on a hung NFS or
 * FUSE mount would hold it; everything is bounded by deadlines, nothing sleeps to synchronise.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cache/hash.h"
#include "cache/tier.h"
#include "cache/tier_internal.h"
#include "tests/test_util.h"

#define TI_BB 512 /* block bytes */
#define TI_BS 4   /* tokens per block */
#define TI_BLOCKS 8

static unsigned char ti_mem[TI_BLOCKS][TI_BB];

static int ti_out(void *ud, int32_t block, void *dst)
{
    memcpy(dst, ti_mem[block], TI_BB);
    return 0;
}

static int ti_in(void *ud, int32_t block, const void *src)
{
    memcpy(ti_mem[block], src, TI_BB);
    return 0;
}

static hash_key ti_key(int i)
{
    return hash_key_next(hash_key_of("ti-root", 7), (const int32_t[]){i, 7, 8, 9}, TI_BS);
}

static void ti_fill(int32_t block, int i)
{
    for (int b = 0; b < TI_BB; b++) ti_mem[block][b] = (unsigned char)(i * 31 + b);
}

static int ti_holds(int32_t block, int i)
{
    for (int b = 0; b < TI_BB; b++)
        if (ti_mem[block][b] != (unsigned char)(i * 31 + b)) return 0;
    return 1;
}

/* A disk-only tier on dir; plain malloc'd staging buffers, synchronous copies. */
static tier_config ti_config(const char *dir, int timeout_ms)
{
    tier_config c;
    memset(&c, 0, sizeof c);
    c.block_bytes = TI_BB;
    c.block_size = TI_BS;
    c.fingerprint = hash_key_of("ti-model", 8);
    c.disk_dir = dir;
    c.disk_bytes = 64 * tier_file_bytes(TI_BB, TI_BS);
    c.staging_bytes = 8 * TI_BB;
    c.copy = (tier_copy){ti_out, ti_in, 1, NULL, NULL, NULL, NULL};
    c.quiet = 1;
    c.io_timeout_ms = timeout_ms;
    return c;
}

static tier *ti_create(const tier_config *c)
{
    char err[512] = "";
    tier *t = tier_create(c, err, sizeof err);
    cr_assert_not_null(t, "tier_create: %s", err);
    return t;
}

static void ti_save(tier *t, int from, int to)
{
    const int32_t toks[TI_BS] = {0, 1, 2, 3};
    for (int k = from; k < to; k++) {
        ti_fill(1, k);
        tier_save(t, ti_key(k), hash_key_of("ti-root", 7), toks, 1);
        cr_assert_eq(tier_flush(t), 0);
        tier_done d[2];
        tier_poll(t, d, 2);
    }
}

/* Loads key i into block 0, polling up to limit_ms: 1 when it came back whole, 0 when it
 * failed, -1 when the tier does not have it; *ms gets how long the completion took. */
static int ti_load(tier *t, int i, int limit_ms, int64_t *ms)
{
    memset(ti_mem[0], 0, TI_BB);
    int64_t t0 = clk_now_ms();
    if (tier_load(t, ti_key(i), 0, 500u + (uint64_t)i) != 0) return -1;
    tier_done d[2];
    int n = 0;
    while (!(n = tier_poll(t, d, 2))) {
        cr_assert_lt(clk_now_ms() - t0, limit_ms, "load %d did not complete in %d ms", i, limit_ms);
        sched_yield();
    }
    if (ms) *ms = clk_now_ms() - t0;
    cr_assert_eq(n, 1);
    cr_assert_eq(d[0].tag, 500u + (uint64_t)i);
    return d[0].ok && ti_holds(0, i);
}

static void ti_path(const tier *t, int k, char *path, size_t n)
{
    char hex[33];
    hash_key_hex(ti_key(k), hex);
    snprintf(path, n, "%s/%.2s/%s.kvb", tier_disk_path(t), hex, hex);
}

/* ---- files that are not files --------------------------------------------------------------- */

/* Block files replaced while the tier runs (its index already holds them) by a FIFO, a directory
 * and a link: loads fail at once (a FIFO used to block the I/O thread in open() forever), writes
 * under those names are skipped, each is counted, and the tier stays on for the other blocks. */
Test(tier_io, fifos_directories_and_links_are_skipped, .timeout = 60)
{
    char dir[256], path[768];
    tu_mkdtemp("tier-fifo", dir, sizeof dir);
    tier_config c = ti_config(dir, 5000);
    tier *t = ti_create(&c);
    ti_save(t, 0, 5);
    ti_path(t, 0, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0644), 0, "mkfifo");
    ti_path(t, 1, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0755), 0);
    ti_path(t, 2, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(symlink("/dev/zero", path), 0);

    int64_t ms = 0;
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(ti_load(t, k, 4000, &ms), 0, "block %d is not a regular file: the load fails", k);
        cr_assert_lt(ms, 3000, "block %d: the failure took %lld ms", k, (long long)ms);
    }
    cr_assert_eq(ti_load(t, 3, 4000, NULL), 1, "a regular block still loads");
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_eq(st.files_skipped, 3, "%lld", (long long)st.files_skipped);
    cr_assert(st.disk_on, "a FIFO, a directory or a link does not turn the tier off");
    cr_assert_eq(st.io_timeouts, 0);

    /* Writing the directory's block again: its name is taken by the directory, so the block is
     * skipped (counted), and the tier stays on. */
    ti_save(t, 1, 2);
    tier_get_stats(t, &st);
    cr_assert(st.disk_on, "a directory named <key>.kvb does not turn the tier off");
    cr_assert_eq(st.files_skipped, 4, "%lld", (long long)st.files_skipped);
    cr_assert(!tier_has(t, ti_key(1)));
    ti_save(t, 5, 6);
    cr_assert(tier_has(t, ti_key(5)), "other blocks are still written");
    cr_assert_eq(ti_load(t, 5, 4000, NULL), 1);
    tier_check(t);
    tier_destroy(t);

    /* A restart: the scan skips and counts the odd names, never opens them. */
    t = ti_create(&c);
    tier_get_stats(t, &st);
    cr_assert_eq(st.files_skipped, 3, "%lld", (long long)st.files_skipped);
    cr_assert(!tier_has(t, ti_key(0)) && !tier_has(t, ti_key(1)) && !tier_has(t, ti_key(2)));
    cr_assert(tier_has(t, ti_key(3)) && tier_has(t, ti_key(5)));
    tier_check(t);
    tier_destroy(t);
    tu_rm_rf(dir);
}

/* ---- a stalled disk ---------------------------------------------------------------------------- */

/* The I/O thread held in its next file operation until released (a hung mount). */
static pthread_mutex_t ti_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ti_cv = PTHREAD_COND_INITIALIZER;
static int ti_hold, ti_held;
static atomic_int ti_in_hook;

static void ti_stall(int kind)
{
    pthread_mutex_lock(&ti_mu);
    if (ti_hold) {
        ti_held++;
        atomic_store(&ti_in_hook, 1);
        while (ti_hold) pthread_cond_wait(&ti_cv, &ti_mu);
        atomic_store(&ti_in_hook, 0);
    }
    pthread_mutex_unlock(&ti_mu);
}

static void ti_set_hold(int on)
{
    pthread_mutex_lock(&ti_mu);
    ti_hold = on;
    pthread_cond_broadcast(&ti_cv);
    pthread_mutex_unlock(&ti_mu);
}

/* A load stuck in its file operation completes as failed at its deadline, not later; the tier
 * is stalled meanwhile (the next load misses at once, writes are skipped), and when the
 * operation returns its late bytes never reach the block, which the caller has reused. */
Test(tier_io, a_stuck_load_misses_at_its_deadline, .timeout = 60)
{
    char dir[256];
    tu_mkdtemp("tier-stall", dir, sizeof dir);
    tier_config c = ti_config(dir, 400);
    tier *t = ti_create(&c);
    ti_save(t, 0, 3);
    tier__test_hook = ti_stall;
    ti_set_hold(1);
    int64_t ms = 0;
    cr_assert_eq(ti_load(t, 0, 5000, &ms), 0, "the stuck load completes as failed");
    cr_assert_geq(ms, 350, "not before its deadline: %lld ms", (long long)ms);
    cr_assert_lt(ms, 2000, "soon after its deadline (400 ms): %lld ms", (long long)ms);
    ti_fill(0, 42); /* the caller recomputes into its block */
    tier_stats st;
    int64_t t0 = clk_now_ms();
    do { /* the operation itself passes the deadline a moment after the load's */
        tier_done d[2];
        cr_assert_eq(tier_poll(t, d, 2), 0);
        tier_get_stats(t, &st);
        cr_assert_lt(clk_now_ms() - t0, 3000, "the tier never saw the I/O thread stuck");
        sched_yield();
    } while (!st.disk_stalled);
    cr_assert_eq(st.io_timeouts, 1);
    cr_assert(!tier_has(t, ti_key(1)), "a stalled tier offers nothing");
    cr_assert_eq(tier_load(t, ti_key(1), 2, 7), -ENOENT, "loads miss while stalled");
    int64_t skipped = st.writes_skipped;
    const int32_t toks[TI_BS] = {0};
    tier_save(t, ti_key(9), hash_key_of("ti-root", 7), toks, 1);
    tier_get_stats(t, &st);
    cr_assert_eq(st.writes_skipped, skipped + 1, "writes are skipped while stalled");

    ti_set_hold(0); /* the file system comes back: the late read must not write block 0 */
    t0 = clk_now_ms();
    do {
        tier_done d[2];
        cr_assert_eq(tier_poll(t, d, 2), 0, "no second completion for a load given up");
        tier_get_stats(t, &st);
        cr_assert_lt(clk_now_ms() - t0, 5000, "the tier did not leave the stalled state");
        sched_yield();
    } while (st.disk_stalled || tier_flush(t));
    cr_assert(ti_holds(0, 42), "the abandoned read wrote into the block after its deadline");
    cr_assert_eq(ti_load(t, 1, 5000, NULL), 1, "loads work again");
    tier__test_hook = NULL;
    tier_check(t);
    tier_destroy(t);
    tu_rm_rf(dir);
}

/* Loads queued behind a slow one are given up at their own deadlines, and a slow disk that is
 * not stuck (each operation well within the deadline) loses nothing. */
Test(tier_io, queued_loads_expire_in_time, .timeout = 60)
{
    char dir[256];
    tu_mkdtemp("tier-queue", dir, sizeof dir);
    tier_config c = ti_config(dir, 300);
    tier *t = ti_create(&c);
    ti_save(t, 0, 4);
    tier__test_hook = ti_stall;
    ti_set_hold(1);
    int64_t t0 = clk_now_ms();
    for (int k = 0; k < 4; k++) cr_assert_eq(tier_load(t, ti_key(k), 2 + k, 900u + (uint64_t)k), 0);
    int got = 0;
    tier_done d[8];
    while (got < 4) {
        int n = tier_poll(t, d + got, 8 - got);
        for (int i = got; i < got + n; i++) cr_assert_eq(d[i].ok, 0);
        got += n;
        cr_assert_lt(clk_now_ms() - t0, 3000, "%d of 4 loads completed", got);
        sched_yield();
    }
    int64_t ms = clk_now_ms() - t0;
    cr_assert_lt(ms, 2000, "4 loads behind a stuck one: %lld ms", (long long)ms);
    ti_set_hold(0);
    tier__test_hook = NULL;
    while (tier_flush(t)) sched_yield();
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_eq(st.io_timeouts, 4);
    for (int k = 0; k < 4; k++) cr_assert_eq(ti_load(t, k, 5000, NULL), 1, "block %d after the stall", k);
    tier_check(t);
    tier_destroy(t);
    tu_rm_rf(dir);
}

/* tier_destroy with the I/O thread stuck in a file operation (and writes queued behind it)
 * returns within about twice the deadline; the thread, released later, cleans up after itself. */
Test(tier_io, destroy_does_not_wait_for_a_stuck_thread, .timeout = 60)
{
    char dir[256];
    tu_mkdtemp("tier-orphan", dir, sizeof dir);
    tier_config c = ti_config(dir, 300);
    tier *t = ti_create(&c);
    ti_save(t, 0, 1);
    tier__test_hook = ti_stall;
    ti_set_hold(1);
    const int32_t toks[TI_BS] = {0};
    for (int k = 1; k < 4; k++) {
        ti_fill(1, k);
        tier_save(t, ti_key(k), hash_key_of("ti-root", 7), toks, 1);
    }
    int64_t t0 = clk_now_ms();
    while (!atomic_load(&ti_in_hook)) {
        cr_assert_lt(clk_now_ms() - t0, 5000, "the I/O thread never started the write");
        sched_yield();
    }
    t0 = clk_now_ms();
    tier_destroy(t);
    int64_t ms = clk_now_ms() - t0;
    cr_assert_lt(ms, 1500, "tier_destroy waited %lld ms for a stuck thread", (long long)ms);
    ti_set_hold(0); /* the thread returns, frees what it used and leaves */
    t0 = clk_now_ms();
    while (atomic_load(&ti_in_hook)) {
        cr_assert_lt(clk_now_ms() - t0, 5000);
        sched_yield();
    }
    tier__test_hook = NULL;
    /* A new tier on the folder works (the lock was released). */
    t = ti_create(&c);
    cr_assert(tier_has(t, ti_key(0)));
    tier_destroy(t);
    tu_rm_rf(dir);
}

/* A disk that is slow but never stuck: each write takes most of the deadline. */
static atomic_int ti_slow_in;
static void ti_slow(int kind)
{
    atomic_fetch_add(&ti_slow_in, 1);
    usleep(250 * 1000);
    atomic_fetch_sub(&ti_slow_in, 1);
}

/* tier_destroy with sixteen writes queued on a disk that takes 250 ms for each (under the 400 ms
 * deadline, so no job ever times out) returns within about twice the deadline, not after the
 * whole queue (4 s: a SIGTERM's exit used to wait for every write behind). */
Test(tier_io, destroy_bounds_a_slow_queue, .timeout = 60)
{
    char dir[256];
    tu_mkdtemp("tier-slow", dir, sizeof dir);
    tier_config c = ti_config(dir, 400);
    c.staging_bytes = 16 * TI_BB;
    tier *t = ti_create(&c);
    tier__test_hook = ti_slow;
    const int32_t toks[TI_BS] = {0};
    for (int k = 0; k < 16; k++) {
        ti_fill(1, k);
        tier_save(t, ti_key(k), hash_key_of("ti-root", 7), toks, 1);
    }
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_eq(st.writes_skipped, 0, "every write was queued");
    int64_t t0 = clk_now_ms();
    tier_destroy(t);
    int64_t ms = clk_now_ms() - t0;
    printf("tier_io: destroy with 16 slow writes queued: %lld ms (deadline 400 ms, 250 ms a write)\n", (long long)ms);
    cr_assert_lt(ms, 1500, "tier_destroy waited %lld ms for a slow queue", (long long)ms);
    t0 = clk_now_ms(); /* the thread left behind finishes its write and leaves */
    while (atomic_load(&ti_slow_in)) {
        cr_assert_lt(clk_now_ms() - t0, 5000);
        sched_yield();
    }
    tier__test_hook = NULL;
    t = ti_create(&c); /* the folder's lock was released */
    tier_destroy(t);
    tu_rm_rf(dir);
}

/* ---- blocks of earlier runs and the model's content ------------------------------------------- */

static tier_file_id ti_file_id(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return (tier_file_id){(uint64_t)st.st_size, (uint64_t)st.st_ino, (uint64_t)st.st_dev,
                          (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
}

static void ti_write_model(const char *path, unsigned char fill)
{
    FILE *f = fopen(path, "r+b");
    if (!f) f = fopen(path, "wb");
    cr_assert_not_null(f);
    static unsigned char b[3 << 20];
    memset(b, fill, sizeof b);
    cr_assert_eq(fwrite(b, 1, sizeof b, f), sizeof b);
    fclose(f);
}

/* Polls until the source's hash was applied. */
static void ti_wait_verified(tier *t)
{
    int64_t t0 = clk_now_ms();
    tier_stats st;
    for (;;) {
        tier_done d[2];
        tier_poll(t, d, 2);
        tier_get_stats(t, &st);
        if (st.verified) break;
        cr_assert_lt(clk_now_ms() - t0, 10000, "the model was not hashed in 10 s");
        sched_yield();
    }
}

/* A tier whose blocks are computed from a model file: blocks of the previous run are not loaded
 * until this run has hashed the file; the same content then loads them; content edited in place
 * with the name, size and time kept (what a sampling fingerprint missed) deletes them; and a run
 * that ends before its hash leaves no stamp, so the next one trusts nothing it finds. */
Test(tier_io, earlier_blocks_load_only_under_the_same_model_content, .timeout = 60)
{
    char dir[256], model[512];
    tu_mkdtemp("tier-verify", dir, sizeof dir);
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    ti_write_model(model, 1);
    struct stat st0;
    cr_assert_eq(stat(model, &st0), 0);
    tier_config c = ti_config(dir, 5000);
    c.source_path = model;
    c.source_id = ti_file_id(model);
    tier *t = ti_create(&c);
    ti_save(t, 0, 4);
    cr_assert_eq(ti_load(t, 1, 5000, NULL), 1, "this run's blocks load at once");
    ti_wait_verified(t);
    while (tier_flush(t)) sched_yield(); /* the stamp */
    tier_destroy(t);

    /* The same content: loadable once hashed. */
    t = ti_create(&c);
    tier_stats st;
    tier_get_stats(t, &st);
    cr_assert_eq(st.old_blocks, 4);
    ti_wait_verified(t);
    tier_get_stats(t, &st);
    cr_assert_eq(st.old_blocks, 0);
    cr_assert_eq(ti_load(t, 2, 5000, NULL), 1, "vouched for by the stamp");
    while (tier_flush(t)) sched_yield();
    tier_destroy(t);

    /* Edited in place: other bytes, same size, inode and time. */
    ti_write_model(model, 2);
    struct timespec times[2] = {st0.st_atim, st0.st_mtim};
    cr_assert_eq(utimensat(AT_FDCWD, model, times, 0), 0);
    tier_file_id id = ti_file_id(model);
    cr_assert(id.size == c.source_id.size && id.ino == c.source_id.ino && id.mtime_ns == c.source_id.mtime_ns);
    t = ti_create(&c);
    cr_assert(!tier_has(t, ti_key(2)), "not before the hash");
    cr_assert_eq(tier_load(t, ti_key(2), 0, 1), -ENOENT);
    ti_wait_verified(t);
    cr_assert(!tier_has(t, ti_key(2)), "other content: the old blocks are not used");
    tier_get_stats(t, &st);
    cr_assert_eq(st.disk_blocks, 0, "and deleted");
    ti_save(t, 7, 8); /* a block of the new content */
    while (tier_flush(t)) sched_yield();
    tier_destroy(t);

    /* A run that ends before its hash (the source cannot be read): no stamp is left, so the next
     * run deletes what it finds, even with the content of the last stamp. */
    tier_config bad = c;
    bad.source_path = "/nonexistent/model.gguf";
    t = ti_create(&bad);
    ti_wait_verified(t);
    tier_get_stats(t, &st);
    cr_assert_eq(st.old_blocks, 1, "unverifiable: kept, never loaded");
    cr_assert(!tier_has(t, ti_key(7)));
    tier_destroy(t);
    t = ti_create(&c);
    ti_wait_verified(t);
    cr_assert(!tier_has(t, ti_key(7)), "no stamp vouches for the folder");
    tier_check(t);
    tier_destroy(t);
    tu_rm_rf(dir);
}
