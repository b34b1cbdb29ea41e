/*
 * test_engine_tier.c — the second KV tier through the engine (engine/engine_tier.c) on the real
 * stories260K model: the fingerprint that names a model's blocks, greedy outputs with the tier
 * equal to those without it while prefixes are evicted and loaded back (f16, and int8 with its
 * scales, and under sinks + a window), a restart with the same folder that finds them
 * (cached_tokens counts them), and a geometry that must not.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli/device.h"
#include "engine/engine_tier.h"
#include "model/mkmodel.h"
#include "tests/engine_harness.h"

#define TET_DOC 100 /* tokens of each shared document */
#define TET_SUF 10
#define TET_GEN 16

TestSuite(engine_tier, .init = te_setup, .fini = te_teardown);

static uint64_t tet_mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

/* Document d (1 .. ) then suffix s: the BOS, TET_DOC - 1 document tokens, TET_SUF others. */
static int tet_prompt(int d, int s, int32_t *out)
{
    out[0] = 1;
    for (int i = 1; i < TET_DOC; i++) out[i] = 3 + (int32_t)(tet_mix((uint64_t)d * 1000 + (uint64_t)i) % 500);
    for (int i = 0; i < TET_SUF; i++) out[TET_DOC + i] = 3 + (int32_t)(tet_mix((uint64_t)s * 7777 + (uint64_t)i) % 500);
    return TET_DOC + TET_SUF;
}

/* A small pool (14 blocks: two documents) and the tiers asked for; window > 0: sinks (one
 * block) + a window of that many entries. */
static model *tet_model; /* the model tet_engine serves: te_model unless a test swaps it */

static engine *tet_engine(const char *dir, size_t host_bytes, int dtype, int window)
{
    engine_config c;
    engine_config_default(&c);
    c.model = tet_model ? tet_model : te_model;
    c.tok = te_tok;
    c.device = "cpu";
    c.n_threads = 1;
    c.make_backend = be_create;
    c.kv_dtype = dtype;
    kv_geom g = model_kv_geom(&te_model->hp, 16, dtype);
    c.kv_memory_bytes = 14 * 16 * kv_bytes_per_token(&g);
    c.max_model_len = 160;
    c.max_seqs = 4;
    c.max_batch_tokens = 64;
    c.kv_disk_dir = dir;
    c.kv_host_memory_bytes = host_bytes;
    c.kv_window = window;
    c.kv_sinks = window ? 16 : 0;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    c.quiet = 1;
    char err[512];
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "engine_create: %s", err);
    return e;
}

/* Runs document d with suffix s greedily to completion; out gets the tokens. */
static engine_usage tet_run(engine *e, int d, int s, int32_t *out)
{
    int32_t p[TET_DOC + TET_SUF];
    int n = tet_prompt(d, s, p);
    static te_out o;
    memset(&o, 0, sizeof o);
    o.id = te_submit(e, p, n, TET_GEN, 1, 0, NULL);
    te_collect(e, &o, 1, 1);
    cr_assert_eq(o.n_toks[0], TET_GEN);
    memcpy(out, o.toks[0], TET_GEN * sizeof *out);
    return o.usage[0];
}

/* Polls e's stats until its tier has applied the model file's hash (10 s at most). */
static void tet_wait_verified(engine *e)
{
    int64_t t0 = clk_now_ms();
    engine_stats st;
    for (engine_get_stats(e, &st); !st.tier_verified; engine_get_stats(e, &st)) {
        cr_assert_lt(clk_now_ms() - t0, 10000, "the tier did not hash the model in 10 s");
        sched_yield();
    }
}

/* Greedy outputs of KV dtype `dtype` with a tier (host RAM and files in dir) equal those without
 * one while documents are evicted and loaded back; tier hits count as cached tokens; after a
 * drain, a restart on the same folder loads a document back and generates the same tokens.
 * Returns the plain engine (for more checks; the caller destroys it). */
static engine *tet_equal_and_restart(const char *dir, int dtype)
{
    engine *plain = tet_engine(NULL, 0, dtype, 0);
    kv_geom g = model_kv_geom(&te_model->hp, 16, dtype);
    engine *tiered = tet_engine(dir, 4 * kv_bytes_per_block(&g), dtype, 0);
    int32_t a[TET_GEN], b[TET_GEN];
    static const int order[] = {1, 2, 3, 1, 4, 2, 3, 4, 1, 3};
    int cached_plain = 0, cached_tiered = 0;
    for (int i = 0; i < (int)(sizeof order / sizeof *order); i++) {
        cached_plain += tet_run(plain, order[i], i, a).cached_tokens;
        cached_tiered += tet_run(tiered, order[i], i, b).cached_tokens;
        cr_assert_arr_eq(a, b, sizeof a, "%s, request %d (document %d): outputs differ with the tier",
                         kv_dtype_name(dtype), i, order[i]);
    }
    engine_stats st;
    engine_get_stats(tiered, &st);
    cr_assert(st.tier_on && st.tier_disk_on);
    cr_assert_gt(st.tier_loads, 2, "documents came back from the tier: %lld loads", (long long)st.tier_loads);
    cr_assert_gt(cached_tiered, cached_plain, "tier hits count as cached tokens (%d vs %d)", cached_tiered, cached_plain);
    cr_assert_gt(st.tier_bytes_written, 0);
    cr_assert_eq(st.tier_load_failures, 0);
    engine_destroy(tiered, 1); /* a drain: pending writes reach the disk */

    /* A restart on the same folder: document 2's blocks are found on disk (once the tier has
     * hashed the model file and found the folder's stamp to match). */
    tiered = tet_engine(dir, 0, dtype, 0);
    tet_wait_verified(tiered);
    engine_usage u = tet_run(tiered, 2, 99, b);
    tet_run(plain, 2, 99, a);
    cr_assert_arr_eq(a, b, sizeof a, "%s: outputs after a restart differ", kv_dtype_name(dtype));
    cr_assert_eq(u.cached_tokens, TET_DOC / 16 * 16, "a restart loads the document back: %d cached", u.cached_tokens);
    engine_get_stats(tiered, &st);
    cr_assert_eq(st.tier_hit_tokens, TET_DOC / 16 * 16);
    engine_destroy(tiered, 1);
    return plain;
}

Test(engine_tier, greedy_outputs_equal_and_a_restart_finds_the_blocks)
{
    TE_NEED_MODEL();
    char dir[256];
    tu_mkdtemp("engine-tier", dir, sizeof dir);
    engine *plain = tet_equal_and_restart(dir, KV_F16);
    int32_t b[TET_GEN];

    /* Another KV geometry (f32) never loads those blocks. */
    engine *tiered = tet_engine(dir, 0, KV_F32, 0);
    engine_stats st;
    engine_get_stats(tiered, &st);
    cr_assert_eq(st.tier_disk_blocks, 0, "another geometry has a folder of its own");
    engine_usage u = tet_run(tiered, 2, 98, b);
    cr_assert_eq(u.cached_tokens, 0, "another dtype's blocks were loaded");
    engine_get_stats(tiered, &st);
    cr_assert_eq(st.tier_hit_tokens, 0);
    engine_destroy(tiered, 1);
    engine_destroy(plain, 0);
    tu_rm_rf(dir);
}

/* A quantised cache: a tier block carries each token's scales with its codes (a block loaded
 * without them would decode to other values and change the greedy outputs). */
Test(engine_tier, int8_kv_blocks_carry_their_scales)
{
    TE_NEED_MODEL();
    char dir[256];
    tu_mkdtemp("engine-tier-i8", dir, sizeof dir);
    engine_destroy(tet_equal_and_restart(dir, KV_I8), 0);
    tu_rm_rf(dir);
}

/* Sinks + a window shorter than the prompts: only the blocks a sequence computed before its
 * window moved enter the prefix cache (and so the tier); they come back and the outputs stay
 * those of the same window without a tier. */
Test(engine_tier, sinks_and_window)
{
    TE_NEED_MODEL();
    char dir[256];
    tu_mkdtemp("engine-tier-window", dir, sizeof dir);
    engine *plain = tet_engine(NULL, 0, KV_F16, 64), *tiered = tet_engine(dir, 0, KV_F16, 64);
    int32_t a[TET_GEN], b[TET_GEN];
    static const int order[] = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5};
    for (int i = 0; i < (int)(sizeof order / sizeof *order); i++) {
        tet_run(plain, order[i], i, a);
        tet_run(tiered, order[i], i, b);
        cr_assert_arr_eq(a, b, sizeof a, "request %d (document %d): outputs differ with the tier", i, order[i]);
    }
    engine_stats st;
    engine_get_stats(tiered, &st);
    cr_assert_gt(st.tier_loads, 0, "documents came back from the tier");
    cr_assert_eq(st.tier_load_failures, 0);
    engine_destroy(tiered, 1);
    engine_destroy(plain, 0);
    tu_rm_rf(dir);
}

/* A model with multi-head latent attention (a generated deepseek2): its latent blocks (one
 * vector per token and layer, half a K/V block's size and less) go out to the tier and come
 * back, f16 and int8, with outputs equal to those without a tier and a restart finding them. */
Test(engine_tier, latent_kv_blocks)
{
    TE_NEED_MODEL();
    mkm_params p;
    mkm_params_default(&p);
    p.arch = "deepseek2";
    p.dim = 64, p.layers = 2, p.heads = 4, p.head_dim = 16, p.ffn = 32, p.experts = 4, p.norm_std = 0.2f;
    char path[512], err[512];
    tu_write_mkmodel(&p, "tier-mla", path, sizeof path);
    model *saved = te_model, *m;
    tokenizer *saved_tok = te_tok;
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
    te_model = m;
    te_tok = tok_create(m->gguf, err, sizeof err);
    cr_assert_not_null(te_tok, "%s", err);
    kv_geom g = model_kv_geom(&m->hp, 16, KV_F16);
    cr_assert(g.latent == 64 && kv_bytes_per_token(&g) == 2u * 72 * 2, "the latent layout: %zu bytes/token",
              kv_bytes_per_token(&g));
    const int dtypes[] = {KV_F16, KV_I8};
    for (int i = 0; i < 2; i++) {
        char dir[256];
        tu_mkdtemp("engine-tier-mla", dir, sizeof dir);
        engine_destroy(tet_equal_and_restart(dir, dtypes[i]), 0);
        tu_rm_rf(dir);
    }
    tok_destroy(te_tok);
    model_destroy(m);
    te_model = saved, te_tok = saved_tok;
    unlink(path);
}

/* Negates every 4-byte value of bytes [off, off + n) of path outside the 16 chunks of 4 KiB the
 * fingerprint once sampled (so that such an edit kept the old fingerprint), keeping the file's
 * size, inode and modification time. */
static void tet_edit_between_samples(const char *path, size_t off, size_t n)
{
    struct stat st0;
    cr_assert_eq(stat(path, &st0), 0);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    unsigned char *b = malloc(n);
    cr_assert_not_null(b);
    cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
    cr_assert_eq(fread(b, 1, n, f), n);
    for (size_t i = 0; i + 4 <= n; i += 4) {
        int sampled = 0;
        for (int c = 0; c < 16 && !sampled; c++) {
            size_t at = (n - 4096) / 15 * (size_t)c;
            sampled = i + 4 > at && i < at + 4096;
        }
        if (!sampled) b[i + 3] ^= 0x80; /* the sign of a little-endian f32 */
    }
    cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
    struct timespec times[2] = {st0.st_atim, st0.st_mtim};
    cr_assert_eq(utimensat(AT_FDCWD, path, times, 0), 0);
    struct stat st1;
    cr_assert_eq(stat(path, &st1), 0);
    cr_assert(st1.st_ino == st0.st_ino && st1.st_size == st0.st_size &&
              st1.st_mtim.tv_sec == st0.st_mtim.tv_sec && st1.st_mtim.tv_nsec == st0.st_mtim.tv_nsec);
}

/* A model file edited in place between the bytes a sampling fingerprint read, with its name,
 * size, inode and time kept: a restart must not load the KV the old weights computed (it did,
 * and generated other text than without the tier); once the tier has hashed the new content,
 * the old blocks are deleted and the output is the new model's. */
Test(engine_tier, an_in_place_edit_never_brings_back_old_kv, .timeout = 120)
{
    TE_NEED_MODEL();
    char dir[256], path[600];
    tu_mkdtemp("engine-tier-edit", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    size_t len = 0;
    char *bytes = tu_read_file(te_model->path, &len);
    cr_assert_not_null(bytes);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, len, f), len);
    fclose(f);
    free(bytes);
    char err[256];
    cr_assert_eq(model_load(path, &tet_model, err, sizeof err), 0, "%s", err);
    size_t off = (size_t)((const char *)tet_model->tok_embd.data - (const char *)gguf_bytes(tet_model->gguf));
    size_t n = tet_model->tok_embd.row_bytes * (size_t)tet_model->tok_embd.ne[1];
    cr_assert_gt(n, 16 * 4096, "the embedding is larger than the samples");
    int32_t a[TET_GEN], b[TET_GEN];
    engine *e = tet_engine(dir, 0, KV_F16, 0);
    tet_run(e, 2, 5, a);
    tet_wait_verified(e); /* the run's stamp: the folder's blocks were computed from this content */
    engine_destroy(e, 1);
    model_destroy(tet_model);

    tet_edit_between_samples(path, off, n);
    cr_assert_eq(model_load(path, &tet_model, err, sizeof err), 0, "%s", err);
    engine *plain = tet_engine(NULL, 0, KV_F16, 0);
    tet_run(plain, 2, 5, a);
    engine_destroy(plain, 0);
    e = tet_engine(dir, 0, KV_F16, 0);
    engine_usage u = tet_run(e, 2, 5, b);
    cr_assert_eq(u.cached_tokens, 0, "KV of the old weights was loaded (%d tokens)", u.cached_tokens);
    cr_assert_arr_eq(a, b, sizeof a, "the output differs from the edited model's without the tier");
    tet_wait_verified(e);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.tier_hit_tokens, 0);
    u = tet_run(e, 2, 6, b); /* after the hash: still nothing of the old content */
    engine_get_stats(e, &st);
    cr_assert_eq(st.tier_hit_tokens, 0, "after the hash, old blocks were loaded");
    engine_destroy(e, 1);
    model_destroy(tet_model);
    tet_model = NULL;
    tu_rm_rf(dir);
}

Test(engine_tier, fingerprint_names_model_geometry_and_backend)
{
    TE_NEED_MODEL();
    kv_geom g = kv_geom_make(te_model->hp.n_layers, te_model->hp.n_kv_heads, te_model->hp.head_dim, 16, KV_F16);
    hash_key k = engine_tier_fingerprint(te_model, &g, "cpu");
    cr_assert(hash_key_eq(k, engine_tier_fingerprint(te_model, &g, "cpu")));
    cr_assert(!hash_key_eq(k, engine_tier_fingerprint(te_model, &g, "cuda")), "backend");
    kv_geom g2 = g;
    g2.dtype = KV_BF16;
    cr_assert(!hash_key_eq(k, engine_tier_fingerprint(te_model, &g2, "cpu")), "dtype");
    g2 = g;
    g2.block_size = 32;
    cr_assert(!hash_key_eq(k, engine_tier_fingerprint(te_model, &g2, "cpu")), "block size");
    g2 = g;
    g2.latent = 2;
    cr_assert(!hash_key_eq(k, engine_tier_fingerprint(te_model, &g2, "cpu")), "latent layout");
    /* The file's identity names the blocks (its content is the tier's hash's business): the
     * same file opened twice names the same ones; another file with the same bytes (another
     * inode), the same file touched (another time) or other weights name others. */
    char pa[512], pb[512], pc[512], err[256];
    mkm_params mp;
    mkm_params_default(&mp);
    tu_write_mkmodel(&mp, "fp-a", pa, sizeof pa);
    tu_write_mkmodel(&mp, "fp-b", pb, sizeof pb);
    mp.seed = 99;
    tu_write_mkmodel(&mp, "fp-c", pc, sizeof pc);
    model *ma, *ma2, *mb, *mc;
    cr_assert_eq(model_load(pa, &ma, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_load(pa, &ma2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_load(pb, &mb, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_load(pc, &mc, err, sizeof err), 0, "%s", err);
    kv_geom gm = kv_geom_make(ma->hp.n_layers, ma->hp.n_kv_heads, ma->hp.head_dim, 16, KV_F16);
    hash_key ka = engine_tier_fingerprint(ma, &gm, "cpu");
    cr_assert(hash_key_eq(ka, engine_tier_fingerprint(ma2, &gm, "cpu")), "the same file");
    cr_assert(!hash_key_eq(ka, engine_tier_fingerprint(mb, &gm, "cpu")), "another file, the same bytes");
    cr_assert(!hash_key_eq(ka, engine_tier_fingerprint(mc, &gm, "cpu")), "other weights");
    cr_assert(!hash_key_eq(ka, k));
    model_destroy(ma2);
    struct stat st;
    cr_assert_eq(stat(pa, &st), 0);
    struct timespec times[2] = {st.st_atim, {st.st_mtim.tv_sec + 1, st.st_mtim.tv_nsec}};
    cr_assert_eq(utimensat(AT_FDCWD, pa, times, 0), 0);
    cr_assert_eq(model_load(pa, &ma2, err, sizeof err), 0, "%s", err);
    cr_assert(!hash_key_eq(ka, engine_tier_fingerprint(ma2, &gm, "cpu")), "the same file, modified since");
    model_destroy(ma);
    model_destroy(ma2);
    model_destroy(mb);
    model_destroy(mc);
    unlink(pa);
    unlink(pb);
    unlink(pc);
}

Test(engine_tier, needs_the_prefix_cache)
{
    TE_NEED_MODEL();
    engine_config c;
    engine_config_default(&c);
    c.model = te_model;
    c.tok = te_tok;
    c.device = "cpu";
    c.n_threads = 1;
    c.make_backend = be_create;
    c.kv_memory_bytes = (size_t)4 << 20;
    c.prefix_cache = 0;
    c.kv_host_memory_bytes = (size_t)1 << 20;
    c.quiet = 1;
    char err[512] = "";
    cr_assert_null(engine_create(&c, err, sizeof err));
    cr_assert(strstr(err, "prefix cache"), "%s", err);

    /* A model with sliding-window layers keeps its KV in several layer groups: the prefix cache
     * is on (with each cached block's companions in the other groups), the tier, which carries
     * group 0's blocks only, stays off (a start-up line says so) and the engine runs. */
    mkm_params mp;
    mkm_params_default(&mp);
    mp.arch = "gemma3";
    mp.swa_window = 16;
    mp.swa_pattern = 2;
    char path[512];
    tu_write_mkmodel(&mp, "tier-swa", path, sizeof path);
    model *m;
    cr_assert_eq(model_load(path, &m, err, sizeof err), 0, "%s", err);
    tokenizer *tk = tok_create(m->gguf, err, sizeof err);
    cr_assert_not_null(tk, "%s", err);
    c.model = m;
    c.tok = tk;
    c.prefix_cache = 1;
    c.kv_disk_dir = NULL;
    c.wake = te_wake;
    c.wake_ud = &te_w;
    engine *e = engine_create(&c, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    engine_stats st;
    engine_get_stats(e, &st);
    cr_assert_eq(st.tier_on, 0, "the tier stays off with more than one layer group");
    int32_t p[40];
    for (int i = 0; i < 40; i++) p[i] = 3 + (i * 17) % 250;
    static te_out outs[2];
    memset(outs, 0, sizeof outs);
    for (int k = 0; k < 2; k++) {
        outs[k].id = te_submit(e, p, 20, 4, 1, 0, NULL);
        te_collect(e, outs, 2, 1);
    }
    cr_assert_gt(outs[1].usage[0].cached_tokens, 0, "the prefix cache is on");
    engine_destroy(e, 1);
    tok_destroy(tk);
    model_destroy(m);
    unlink(path);
}
