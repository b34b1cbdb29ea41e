/*
 * test_cuda_host.c — the CUDA backend's host-side arithmetic (cuda/launch.h, formats.h,
 * kv_layout.h, meta.h, attn_plan.h, quant_formats.h), on the CPU.
 *
 * These run in every build, with or without CUDA: the same __host__ __device__ helpers run in the
 * kernels, so checking them here against the CPU backend and brute-force models covers the
 * launch geometry, batch-metadata packing, attention work lists, KV block layout, online-softmax
 * merge, RoPE angles and element conversions without a GPU. Random tests print their seed.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "cuda/attn_plan.h"
#include "cuda/formats.h"
#include "cuda/gemv_plan.h"
#include "cuda/kv_layout.h"
#include "cuda/launch.h"
#include "cuda/meta.h"
#include "cuda/quant_formats.h"
#include "cuda/quant_int.h"
#include "engine/backend.h"
#include "model/dtype.h"
#include "tests/test_util.h"

static uint64_t tch_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int tch_int(uint64_t *s, int lo, int hi) /* [lo, hi] */
{
    return lo + (int)(tch_rng(s) % (uint64_t)(hi - lo + 1));
}

static float tch_unif(uint64_t *s) /* [-1, 1) */
{
    return (float)((tch_rng(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* ---- launch geometry ------------------------------------------------------------------------ */

Test(cuda_host, grid_1d)
{
    cr_assert_eq(cuda_div_up(0, 256), 0);
    cr_assert_eq(cuda_div_up(1, 256), 1);
    cr_assert_eq(cuda_div_up(256, 256), 1);
    cr_assert_eq(cuda_div_up(257, 256), 2);
    cr_assert_eq(cuda_grid_1d(0, 256, 100), 1u, "an empty launch still needs one block");
    cr_assert_eq(cuda_grid_1d(1000, 256, 100), 4u);
    cr_assert_eq(cuda_grid_1d((int64_t)1 << 40, 256, 65535), 65535u, "capped for grid-stride loops");
}

Test(cuda_host, attn_tile_tokens)
{
    cr_assert_eq(cuda_attn_tile_tokens(1), CUDA_ATTN_ROWS);
    cr_assert_eq(cuda_attn_tile_tokens(8), CUDA_ATTN_ROWS / 8);
    cr_assert_eq(cuda_attn_tile_tokens(CUDA_ATTN_ROWS), 1);
    cr_assert_eq(cuda_attn_tile_tokens(64), 1, "a group larger than the row target still gets a token");
}

Test(cuda_host, attn_splits)
{
    uint64_t seed = 0x5eed5117ULL, s = seed;
    printf("cuda_host/attn_splits seed %#llx\n", (unsigned long long)seed);
    int32_t part;
    /* Short context: never split. */
    cr_assert_eq(cuda_attn_splits(1, 8, 100, 132, 1, 32, 128, &part), 1);
    cr_assert_geq(part, 100);
    /* A GPU already full of blocks: never split. */
    cr_assert_eq(cuda_attn_splits(256, 8, 100000, 132, 256, 32, 128, &part), 1);
    /* One long decode: split into partitions of at least the minimum. */
    int sp = cuda_attn_splits(1, 8, 32768, 132, 1, 32, 128, &part);
    cr_assert_gt(sp, 1);
    for (int it = 0; it < 20000; it++) {
        int n_items = tch_int(&s, 1, 600), n_kv = tch_int(&s, 1, 16), n_sm = tch_int(&s, 1, 200);
        int32_t max_kv = tch_int(&s, 1, 200000);
        int n_tokens = tch_int(&s, n_items, n_items * 4), n_heads = n_kv * tch_int(&s, 1, 8);
        int hd = 8 * tch_int(&s, 1, 32);
        sp = cuda_attn_splits(n_items, n_kv, max_kv, n_sm, n_tokens, n_heads, hd, &part);
        cr_assert_geq(sp, 1);
        cr_assert_eq(part % CUDA_ATTN_TK, 0, "partitions are whole KV tiles");
        cr_assert_geq((int64_t)sp * part, max_kv, "the partitions cover every key");
        cr_assert_lt((int64_t)(sp - 1) * part, max_kv, "no split is empty for the longest item");
        if (sp > 1) {
            cr_assert_lt((int64_t)n_items * n_kv, 2 * (int64_t)n_sm, "only under-filled launches split");
            cr_assert_geq(part, CUDA_ATTN_MIN_PART);
            size_t scratch = (size_t)n_tokens * n_heads * (hd + 2) * sizeof(float) * (size_t)sp;
            cr_assert_leq(scratch, CUDA_ATTN_SCRATCH_MAX);
        }
    }
}

Test(cuda_host, reduce_threads)
{
    for (int d = 1; d <= 512; d++) {
        int t = cuda_attn_reduce_threads(d);
        cr_assert(t % 32 == 0 && t >= 32 && t <= 128, "head_dim %d: %d threads", d, t);
        cr_assert(t >= d || t == 128, "head_dim %d: %d threads leave dims to loop over needlessly", d, t);
    }
}

Test(cuda_host, pure_decode_batches)
{
    int32_t tok[3] = {5, 6, 7}, pos[3] = {9, 3, 4}, slots[3] = {1, 2, 3}, q_start[4] = {0, 1, 2, 3};
    int32_t ctx[3] = {10, 4, 5}, bt[3] = {0, 1, 2}, rows[3] = {0, 1, 2};
    be_batch b = {.n_tokens = 3, .tokens = tok, .positions = pos, .n_seqs = 3, .q_start = q_start, .n_logits = 3, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = 1}}};
    cr_assert(cuda_batch_is_pure_decode(&b));
    rows[1] = 2;
    cr_assert(!cuda_batch_is_pure_decode(&b), "logit rows out of order");
    rows[1] = 1;
    b.n_logits = 2;
    cr_assert(!cuda_batch_is_pure_decode(&b), "a sequence without logits");
    b.n_logits = 3;
    int32_t q2[3] = {0, 2, 3};
    be_batch p = {.n_tokens = 3, .tokens = tok, .positions = pos, .n_seqs = 2, .q_start = q2, .n_logits = 2, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = 1}}};
    cr_assert(!cuda_batch_is_pure_decode(&p), "a prefill chunk");
    be_batch e = {.n_tokens = 0, .tokens = tok, .positions = pos, .n_seqs = 0, .q_start = q_start, .n_logits = 0, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = 1}}};
    cr_assert(!cuda_batch_is_pure_decode(&e), "an empty batch");
}

/* ---- KV block layout ------------------------------------------------------------------------ */

Test(cuda_host, kv_layout_bijective)
{
    cuda_kv_layout l = {3, 2, 8, 4, 5, 0, 2}; /* layers, kv heads, head_dim, block_size, n_blocks, no scales */
    int64_t total = cuda_kv_total_elems(&l);
    cr_assert_eq(total, 2 * 3 * 5 * 2 * 4 * 8);
    unsigned char *seen = calloc((size_t)total, 1);
    for (int layer = 0; layer < l.n_layers; layer++)
        for (int kind = 0; kind < 2; kind++)
            for (int32_t blk = 0; blk < l.n_blocks; blk++)
                for (int h = 0; h < l.n_kv_heads; h++)
                    for (int off = 0; off < l.block_size; off++)
                        for (int d = 0; d < l.head_dim; d++) {
                            int64_t i = cuda_kv_index(&l, layer, kind, blk, h, off, d);
                            cr_assert(i >= 0 && i < total);
                            cr_assert_eq(seen[i], 0, "two elements share index %lld", (long long)i);
                            seen[i] = 1;
                            int32_t slot = blk * l.block_size + off;
                            cr_assert_eq(cuda_kv_slot_index(&l, layer, kind, slot, h, d), i);
                        }
    free(seen);
}

/* A quantised layout: every (block, head) tile is its values then 2 × block_size bytes of
 * scales, with every byte of the arena owned by exactly one value or scale byte, and a tile's
 * size the formula's (cache/kv.h kv_tile_bytes). */
Test(cuda_host, kv_layout_quantised_bijective)
{
    kv_geom g = kv_geom_make(2, 3, 6, 5, KV_I8);
    cuda_kv_layout l = cuda_kv_layout_of(&g, 4);
    cr_assert_eq(l.tile_extra, 2 * 5);
    cr_assert_eq((size_t)cuda_kv_tile_elems(&l), kv_tile_bytes(&g));
    int64_t total = cuda_kv_total_elems(&l);
    cr_assert_eq((size_t)total, 4 * kv_bytes_per_block(&g), "%lld", (long long)total);
    unsigned char *seen = calloc((size_t)total, 1);
    for (int layer = 0; layer < l.n_layers; layer++)
        for (int kind = 0; kind < 2; kind++)
            for (int32_t blk = 0; blk < l.n_blocks; blk++)
                for (int h = 0; h < l.n_kv_heads; h++)
                    for (int off = 0; off < l.block_size; off++) {
                        for (int d = 0; d < l.head_dim; d++) {
                            int64_t i = cuda_kv_index(&l, layer, kind, blk, h, off, d);
                            cr_assert(i >= 0 && i < total && !seen[i]);
                            seen[i] = 1;
                        }
                        int64_t sc = cuda_kv_scale_index(&l, layer, kind, blk, h, off);
                        cr_assert(sc >= 0 && sc + 1 < total && !seen[sc] && !seen[sc + 1]);
                        seen[sc] = seen[sc + 1] = 1;
                    }
    for (int64_t i = 0; i < total; i++) cr_assert(seen[i], "byte %lld belongs to nothing", (long long)i);
    free(seen);
}

/* The f16 scale of a quantised vector and its reciprocal: amax / QMAX rounded up to an f16, and 0
 * for an all-zero vector (whose codes are then all 0). */
Test(cuda_host, kv_scale)
{
    float inv;
    cr_assert_eq(cuda_kv_scale(KV_I8, 0.0f, &inv), 0);
    cr_assert_eq(inv, 0.0f);
    cr_assert_eq(kv_i8_encode(3.0f, inv), 0);
    uint16_t h = cuda_kv_scale(KV_I8, 12.7f, &inv); /* the smallest f16 ≥ 12.7 / 127 */
    cr_assert_geq(cuda_f16_to_f32(h), 12.7f / 127);
    cr_assert_lt(cuda_f16_to_f32((uint16_t)(h - 1)), 12.7f / 127);
    cr_assert_float_eq(inv, 1.0f / cuda_f16_to_f32(h), 0);
    h = cuda_kv_scale(KV_FP8, 448.0f, &inv);
    cr_assert_eq(cuda_f16_to_f32(h), 1.0f);
    uint8_t le[2] = {(uint8_t)(h & 0xff), (uint8_t)(h >> 8)};
    cr_assert_eq(cuda_kv_load_scale(le), 1.0f);
}

/* Runs the emulation program named by environment variable env (make test sets it; the test is
 * skipped without it) with --quick and `extra` arguments, prints its output and requires it to
 * succeed. Returns the output (the caller frees it). */
static char *tch_emu(const char *env, const char *extra)
{
    const char *bin = getenv(env);
    if (!bin || !*bin) cr_skip_test("%s is not set to the emulation binary (make test sets it)", env);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --quick%s", bin, extra);
    int st = 0;
    char *out = tu_capture(cmd, &st);
    printf("%s", out);
    cr_assert_eq(st, 0, "emulated kernels failed (%s):\n%s", env, out);
    return out;
}

/* The attention kernels and the quantising store, the source nvcc compiles, under the CPU
 * emulation of cuda/check (attn_emu --quick: the emulated mma and ldmatrix against their layouts;
 * the reference kernel on f32, int8 and e4m3 arenas, vector and scalar load paths, split-K; the
 * tensor-core prefill and decode kernels on f16, bf16, int8 and e4m3 caches with split-K and
 * sinks, each element within the bound of its 16-bit arithmetic), against float64 and the codecs
 * of cache/kv.h. */
Test(cuda_host, kernels_under_emulation, .timeout = 120)
{
    char *out = tch_emu("KVSERVE_ATTN_EMU", "");
    cr_assert(strstr(out, "int8") && strstr(out, "fp8") && strstr(out, "f32"), "%s", out);
    cr_assert(strstr(out, "attn mma prefill") && strstr(out, "attn mma decode") && strstr(out, "vs their PTX layouts: ok"),
              "the tensor-core kernels ran: %s", out);
    free(out);
}

/* The CPU layout per layer and K/V is [n_blocks][n_kv_heads][block_size][head_dim] with every
 * layer's K then V: element (block, head, off, d) at the same offset on both backends. */
Test(cuda_host, kv_layout_matches_cpu)
{
    cuda_kv_layout l = {4, 3, 16, 16, 7, 0, 2};
    size_t plane = (size_t)l.n_blocks * l.n_kv_heads * l.block_size * l.head_dim;
    for (int layer = 0; layer < l.n_layers; layer++)
        for (int kind = 0; kind < 2; kind++) {
            size_t cpu_base = ((size_t)layer * 2 + kind) * plane;
            size_t cpu = cpu_base + (((size_t)5 * l.n_kv_heads + 2) * l.block_size + 9) * l.head_dim + 11;
            cr_assert_eq((size_t)cuda_kv_index(&l, layer, kind, 5, 2, 9, 11), cpu);
        }
    /* A (block, head) tile is contiguous: consecutive (off, d) are consecutive elements. */
    int64_t a = cuda_kv_index(&l, 1, 1, 3, 1, 0, 0);
    cr_assert_eq(cuda_kv_index(&l, 1, 1, 3, 1, l.block_size - 1, l.head_dim - 1), a + l.block_size * l.head_dim - 1);
    int32_t bt[3] = {6, 0, 4};
    cr_assert_eq(cuda_kv_entry_slot(bt, 16, 0), 96);
    cr_assert_eq(cuda_kv_entry_slot(bt, 16, 17), 1);
    cr_assert_eq(cuda_kv_entry_slot(bt, 16, 47), 79);
}

/* The second KV tier's block copies (cuda_kv_block_chunk_*): for random geometries, layer groups
 * and every KV dtype, a group's block is 2 × its layers chunks of n_kv_heads tiles, as many bytes
 * as the tier's block (kv_group_bytes_per_block); the chunks of all blocks tile the group's arena
 * exactly once, and each holds every value and every scale of its block's (layer, K|V). */
Test(cuda_host, kv_block_chunks_tile_the_arena)
{
    uint64_t seed = 0x7469657273ull;
    cr_log_info("seed %#llx", (unsigned long long)seed);
    static const int hds[] = {8, 64, 80, 128}, bss[] = {1, 7, 16};
    for (int it = 0; it < 60; it++) {
        kv_geom g = kv_geom_make(tch_int(&seed, 1, 6), tch_int(&seed, 1, 5), hds[tch_int(&seed, 0, 3)],
                                 bss[tch_int(&seed, 0, 2)], it % KV_N_DTYPES);
        g.n_groups = tch_int(&seed, 1, g.n_layers < 3 ? g.n_layers : 3);
        if (it % 3 == 2) g.n_kv_heads = 1, g.latent = g.head_dim - 4; /* MLA's latent layout: one plane */
        for (int l = 0; l < g.n_layers; l++) g.layer_group[l] = (uint8_t)(l < g.n_groups ? l : tch_int(&seed, 0, g.n_groups - 1));
        size_t es = kv_dtype_bytes(g.dtype);
        for (int k = 0; k < kv_n_groups(&g); k++) {
            cuda_kv_layout l = cuda_kv_layout_of(&g, tch_int(&seed, 1, 9));
            l.n_layers = kv_group_layers(&g, k); /* as kv_init lays out a group's arena */
            size_t chunk = cuda_kv_block_chunk_bytes(&l, es), total = (size_t)cuda_kv_total_elems(&l) * es;
            int kinds = cuda_kv_kinds(&l);
            cr_assert_eq(kinds, g.latent ? 1 : 2);
            cr_assert_eq((size_t)kinds * l.n_layers * chunk, kv_group_bytes_per_block(&g, k),
                         "%s, group %d: the host copy is the tier's block", kv_dtype_name(g.dtype), k);
            int n_chunks = kinds * l.n_layers * l.n_blocks;
            unsigned char *seen = calloc((size_t)n_chunks, 1);
            for (int32_t b = 0; b < l.n_blocks; b++)
                for (int p = 0; p < kinds * l.n_layers; p++) {
                    size_t at = cuda_kv_block_chunk_at(&l, es, b, p);
                    cr_assert_eq(at % chunk, 0);
                    cr_assert_lt(at / chunk, (size_t)n_chunks);
                    cr_assert_eq(seen[at / chunk]++, 0, "block %d plane %d overlaps another chunk", b, p);
                    for (int h = 0; h < l.n_kv_heads; h++) {
                        int off = tch_int(&seed, 0, l.block_size - 1), d = tch_int(&seed, 0, l.head_dim - 1);
                        size_t v = (size_t)cuda_kv_index(&l, p / kinds, p % kinds, b, h, off, d) * es;
                        cr_assert(v >= at && v + es <= at + chunk, "a value outside its block's chunk");
                        if (!kv_dtype_is_quant(g.dtype)) continue;
                        size_t sc = (size_t)cuda_kv_scale_index(&l, p / kinds, p % kinds, b, h, off);
                        cr_assert(sc >= at && sc + KV_SCALE_BYTES <= at + chunk, "a scale outside its block's chunk");
                    }
                }
            cr_assert_eq((size_t)n_chunks * chunk, total, "the chunks cover the arena");
            free(seen);
        }
    }
}

/* ---- batch metadata ------------------------------------------------------------------------- */

typedef struct tch_batch {
    be_batch b;
    int32_t tokens[512], positions[512], slots[512], q_start[33], ctx_len[32], bt[32 * 40], logit_rows[64];
    int32_t slots2[512], ctx2[32], bt2[32 * 40], sinks2[32], shift2[32]; /* a second layer group */
} tch_batch;

/* A random valid varlen batch: mixed decode tokens and prefill chunks over cached prefixes. */
static void tch_random_batch(uint64_t *s, tch_batch *t, int block_size)
{
    memset(t, 0, sizeof *t);
    int n_seqs = tch_int(s, 0, 32), n = 0;
    t->q_start[0] = 0;
    for (int q = 0; q < n_seqs; q++) {
        int n_new = tch_int(s, 0, 3) == 0 ? tch_int(s, 1, 14) : 1;
        if (n + n_new > 512) n_new = 0;
        int cached = tch_int(s, 0, 40 * block_size - n_new - 1);
        t->ctx_len[q] = cached + n_new;
        for (int j = 0; j < 40; j++) t->bt[q * 40 + j] = tch_int(s, 0, 999);
        for (int i = 0; i < n_new; i++) {
            t->tokens[n + i] = tch_int(s, 0, 31999);
            t->positions[n + i] = cached + i;
            t->slots[n + i] = cuda_kv_entry_slot(t->bt + q * 40, block_size, cached + i);
        }
        n += n_new;
        t->q_start[q + 1] = n;
    }
    int n_logits = n ? tch_int(s, 0, n < 64 ? n : 64) : 0;
    for (int j = 0; j < n_logits; j++) t->logit_rows[j] = tch_int(s, 0, n - 1);
    be_batch b = {.n_tokens = n, .tokens = t->tokens, .positions = t->positions, .n_seqs = n_seqs, .q_start = t->q_start, .n_logits = n_logits, .logit_rows = t->logit_rows, .n_kv = 1, .kv = {{.slots = t->slots, .ctx_len = t->ctx_len, .block_table = t->bt, .bt_stride = 40}}};
    t->b = b;
    if (tch_int(s, 0, 1)) { /* a second group whose window dropped entries: shorter caches, sinks */
        for (int q = 0; q < n_seqs; q++) {
            int n_new = t->q_start[q + 1] - t->q_start[q], drop = tch_int(s, 0, (t->ctx_len[q] - n_new) / block_size);
            t->ctx2[q] = t->ctx_len[q] - drop * block_size;
            t->sinks2[q] = drop ? block_size : 0;
            t->shift2[q] = drop * block_size;
            for (int j = 0; j < 40; j++) t->bt2[q * 40 + j] = tch_int(s, 0, 99);
            for (int i = 0; i < n_new; i++)
                t->slots2[t->q_start[q] + i] = cuda_kv_entry_slot(t->bt2 + q * 40, block_size, t->ctx2[q] - n_new + i);
        }
        t->b.n_kv = 2;
        t->b.kv[1] = (be_kv){.slots = t->slots2, .ctx_len = t->ctx2, .block_table = t->bt2, .bt_stride = 40,
                             .sinks = t->sinks2, .sink_shift = t->shift2};
    }
}

Test(cuda_host, meta_pack_random)
{
    uint64_t seed = 0xc0ffee1234ULL, s = seed;
    printf("cuda_host/meta_pack_random seed %#llx\n", (unsigned long long)seed);
    static tch_batch t;
    static int32_t buf[1 << 16];
    for (int it = 0; it < 2000; it++) {
        tch_random_batch(&s, &t, 16);
        const be_batch *b = &t.b;
        cuda_meta_layout L;
        cr_assert_eq(cuda_meta_plan(b, &L), 0);
        cr_assert_leq(L.total, (int32_t)(sizeof buf / sizeof buf[0]));
        for (int i = 0; i < L.total; i++) buf[i] = 0x7eadbeef; /* poison */
        cuda_meta_pack(b, &L, buf);
        int32_t want = 2 * b->n_tokens + b->n_seqs + 1 + b->n_logits;
        for (int g = 0; g < b->n_kv; g++)
            want += b->n_tokens + b->n_seqs + b->n_seqs * b->kv[g].bt_stride + (b->kv[g].sinks ? 2 * b->n_seqs : 0);
        cr_assert_eq(L.total, want);
        for (int i = 0; i < L.total; i++) cr_assert_neq(buf[i], 0x7eadbeef, "int %d of the buffer unwritten", i);
        for (int i = 0; i < b->n_tokens; i++) {
            cr_assert_eq(buf[L.tokens + i], b->tokens[i]);
            cr_assert_eq(buf[L.positions + i], b->positions[i]);
        }
        for (int q = 0; q <= b->n_seqs; q++) cr_assert_eq(buf[L.q_start + q], b->q_start[q]);
        for (int j = 0; j < b->n_logits; j++) cr_assert_eq(buf[L.logit_rows + j], b->logit_rows[j]);
        int32_t max_all = 0;
        cr_assert_eq(L.n_kv, b->n_kv);
        for (int g = 0; g < b->n_kv; g++) {
            const be_kv *v = &b->kv[g];
            const cuda_meta_kv *k = &L.kv[g];
            int32_t max_ctx = 0;
            for (int i = 0; i < b->n_tokens; i++) cr_assert_eq(buf[k->slots + i], v->slots[i]);
            for (int q = 0; q < b->n_seqs; q++) {
                cr_assert_eq(buf[k->ctx_len + q], v->ctx_len[q]);
                if (v->ctx_len[q] > max_ctx) max_ctx = v->ctx_len[q];
                for (int j = 0; j < v->bt_stride; j++)
                    cr_assert_eq(buf[k->block_table + q * v->bt_stride + j], v->block_table[q * v->bt_stride + j]);
                if (v->sinks) {
                    cr_assert_eq(buf[k->sinks + q], v->sinks[q]);
                    cr_assert_eq(buf[k->sink_shift + q], v->sink_shift[q]);
                }
            }
            cr_assert(v->sinks || (k->sinks < 0 && k->sink_shift < 0));
            cr_assert_eq(k->max_ctx, max_ctx);
            max_all = max_ctx > max_all ? max_ctx : max_all;
        }
        cr_assert_eq(L.max_ctx, max_all);
    }
}

Test(cuda_host, meta_plan_rejects_bad_batches)
{
    uint64_t s = 77;
    static tch_batch t;
    do tch_random_batch(&s, &t, 16);
    while (t.b.n_seqs < 2 || t.b.n_tokens < 2);
    cuda_meta_layout L;
    cr_assert_eq(cuda_meta_plan(&t.b, &L), 0);
    t.q_start[t.b.n_seqs] += 1; /* does not end at n_tokens */
    cr_assert_eq(cuda_meta_plan(&t.b, &L), -EINVAL);
    t.q_start[t.b.n_seqs] -= 1;
    int32_t c = t.ctx_len[0];
    t.ctx_len[0] = t.q_start[1] - t.q_start[0] - 1; /* fewer entries than new tokens */
    if (t.ctx_len[0] >= 0) cr_assert_eq(cuda_meta_plan(&t.b, &L), -EINVAL);
    t.ctx_len[0] = c;
    t.b.n_logits = 1;
    t.logit_rows[0] = t.b.n_tokens; /* out of range */
    cr_assert_eq(cuda_meta_plan(&t.b, &L), -EINVAL);
    t.logit_rows[0] = 0;
    cr_assert_eq(cuda_meta_plan(&t.b, &L), 0);
}

Test(cuda_host, meta_check_kv_bounds)
{
    uint64_t s = 0x6b76;
    static tch_batch t;
    const int32_t nb[2] = {1000, 100};
    for (int it = 0; it < 500; it++) {
        tch_random_batch(&s, &t, 16);
        /* tch_random_batch draws block ids below 1000 and contexts of at most 40 blocks */
        cr_assert_eq(cuda_meta_check_kv(&t.b, 16, nb), 0);
        if (t.b.n_seqs == 0) continue;
        int q = tch_int(&s, 0, t.b.n_seqs - 1);
        if (t.ctx_len[q] == 0) continue;
        int32_t keep = t.bt[q * 40];
        t.bt[q * 40] = 1000; /* first block of a sequence outside the arena */
        cr_assert_eq(cuda_meta_check_kv(&t.b, 16, nb), -EINVAL);
        t.bt[q * 40] = -1;
        cr_assert_eq(cuda_meta_check_kv(&t.b, 16, nb), -EINVAL);
        t.bt[q * 40] = keep;
        if (t.b.n_tokens > 0) {
            t.slots[0] = 1000 * 16;
            cr_assert_eq(cuda_meta_check_kv(&t.b, 16, nb), -EINVAL, "a slot past the arena");
        }
    }
}

/* ---- attention work list -------------------------------------------------------------------- */

Test(cuda_host, attn_plan_covers_every_token_once)
{
    uint64_t seed = 0xa77e9, s = seed;
    printf("cuda_host/attn_plan_covers_every_token_once seed %#llx\n", (unsigned long long)seed);
    static tch_batch t;
    static int32_t items[512 * 3], owner[512];
    for (int it = 0; it < 2000; it++) {
        tch_random_batch(&s, &t, 16);
        const be_batch *b = &t.b;
        int tile = cuda_attn_tile_tokens(tch_int(&s, 1, 40));
        int32_t n_exp = cuda_attn_count_items(b, tile), max_kv = -1;
        int32_t n = cuda_attn_plan(b, tile, items, &max_kv);
        cr_assert_eq(n, n_exp);
        cr_assert_leq(n, b->n_tokens, "at most one item per token (the metadata buffer reserves that)");
        for (int i = 0; i < b->n_tokens; i++) owner[i] = 0;
        int32_t mk = 0;
        for (int k = 0; k < n; k++) {
            int32_t q = items[3 * k], t0 = items[3 * k + 1], nt = items[3 * k + 2];
            cr_assert(q >= 0 && q < b->n_seqs);
            int32_t n_new = b->q_start[q + 1] - b->q_start[q];
            cr_assert(nt >= 1 && nt <= tile && t0 >= 0 && t0 + nt <= n_new);
            for (int i = 0; i < nt; i++) owner[b->q_start[q] + t0 + i]++;
            int32_t ctx = 0;
            for (int g = 0; g < b->n_kv; g++) ctx = b->kv[g].ctx_len[q] > ctx ? b->kv[g].ctx_len[q] : ctx;
            int32_t hi = ctx - n_new + t0 + nt;
            if (hi > mk) mk = hi;
        }
        for (int i = 0; i < b->n_tokens; i++) cr_assert_eq(owner[i], 1, "token %d covered %d times", i, owner[i]);
        cr_assert_eq(max_kv, mk);
    }
}

/* The tensor-core plan against a brute-force model: every (new token, query head of the group)
 * row of every sequence is in exactly one item; a sequence whose rows fit one m16 tile is one
 * decode item (decode items first), the others are runs of at most BR rows; the item list fits
 * the room begin() reserves; each kind's partitions are whole tiles that cover its longest item,
 * split only launches that leave the GPU under-filled, and size the scratch they report. */
Test(cuda_host, attn_tc_plan_covers_every_row_once)
{
    uint64_t seed = 0x7c91a, s = seed;
    printf("cuda_host/attn_tc_plan_covers_every_row_once seed %#llx\n", (unsigned long long)seed);
    static tch_batch t;
    static int32_t items[2 * (512 + 32) * 3], owner[512 * 128];
    const int dims[] = {64, 96, 128, 256};
    for (int it = 0; it < 3000; it++) {
        tch_random_batch(&s, &t, 16);
        const be_batch *b = &t.b;
        int d = dims[tch_int(&s, 0, 3)], gsize = tch_int(&s, 0, 3) ? tch_int(&s, 1, 16) : tch_int(&s, 17, 64);
        int n_kv = tch_int(&s, 1, 8), n_sm = tch_int(&s, 1, 160), br = CUDA_ATTN_PF_BR(d);
        int32_t bound = tch_int(&s, 0, 3) ? 0 : tch_int(&s, 1, 5000);
        cuda_attn_tc p;
        int32_t n = cuda_attn_tc_plan(b, gsize, n_kv, d, n_sm, bound, items, &p);
        cr_assert_eq(n, p.n_dec + p.n_pre);
        cr_assert_leq(n, 2 * (b->n_tokens + b->n_seqs), "the room begin() reserves");
        for (int i = 0; i < b->n_tokens * gsize; i++) owner[i] = 0;
        int32_t mk[2] = {0, 0};
        for (int k = 0; k < n; k++) {
            int32_t q = items[3 * k], r0 = items[3 * k + 1], nr = items[3 * k + 2];
            cr_assert(q >= 0 && q < b->n_seqs);
            int32_t n_new = b->q_start[q + 1] - b->q_start[q], rows = n_new * gsize, ctx = 0;
            cr_assert(nr >= 1 && r0 >= 0 && r0 + nr <= rows);
            if (k < p.n_dec) cr_assert(r0 == 0 && nr == rows && rows <= CUDA_ATTN_DEC_ROWS, "a decode item is a whole short sequence");
            else cr_assert(rows > CUDA_ATTN_DEC_ROWS && nr <= br && r0 % br == 0);
            for (int r = 0; r < nr; r++) owner[b->q_start[q] * gsize + r0 + r]++;
            for (int g = 0; g < b->n_kv; g++) ctx = b->kv[g].ctx_len[q] > ctx ? b->kv[g].ctx_len[q] : ctx;
            int32_t hi = ctx - n_new + (r0 + nr - 1) / gsize + 1, kind = k >= p.n_dec;
            if (hi > mk[kind]) mk[kind] = hi;
        }
        for (int i = 0; i < b->n_tokens * gsize; i++) cr_assert_eq(owner[i], 1, "row %d covered %d times", i, owner[i]);
        for (int kind = 0; kind < 2; kind++) {
            int sp = kind ? p.pre_splits : p.dec_splits, tile = kind ? CUDA_ATTN_PF_BC(d) : CUDA_ATTN_DEC_BC;
            int32_t part = kind ? p.pre_part : p.dec_part, ni = kind ? p.n_pre : p.n_dec;
            int32_t m = mk[kind] > bound ? mk[kind] : bound;
            size_t floats = kind ? p.pre_floats : p.dec_floats, rows = kind ? (size_t)br : CUDA_ATTN_DEC_ROWS;
            cr_assert_geq(sp, 1);
            cr_assert_eq(part % tile, 0, "partitions are whole tiles");
            /* a block's keys start at its first row's window start rounded down to a tile */
            cr_assert_geq((int64_t)sp * part, m, "the partitions cover every key");
            if (sp > 1) {
                cr_assert_lt((int64_t)ni * n_kv, 2 * (int64_t)n_sm, "only under-filled launches split");
                cr_assert_geq(part, CUDA_ATTN_MIN_PART);
                cr_assert_eq(floats, (size_t)ni * n_kv * sp * rows * (d + 2));
                cr_assert_leq(floats * sizeof(float), CUDA_ATTN_SCRATCH_MAX);
            } else {
                cr_assert_eq(floats, 0);
            }
        }
    }
}

/* The tensor-core kernels' shared memory: what their headers lay out, and within an H100's
 * 227 KiB (and an A100's 163 KiB) for every head dim, cache type and with sinks. */
Test(cuda_host, attn_tc_smem)
{
    /* prefill, head dim 128, f16: Q 128 rows + 2 × (K, V) of 48 rows, rows of 136 halves */
    cr_assert_eq(cuda_attn_pf_smem(128, 0, 0), (size_t)(128 + 4 * 48) * 136 * 2);
    /* decode, head dim 64, int8: Q fragments 64 × 32 bytes, 3 stages of 2 × 64 rows of 80 bytes
     * and 2 × 64 scales */
    cr_assert_eq(cuda_attn_dec_smem(64, 1, 0), (size_t)64 * 32 + 3 * (2 * 64 * 80 + 4 * 64));
    const int dims[] = {64, 96, 128, 256};
    for (int i = 0; i < 4; i++)
        for (int q = 0; q < 2; q++)
            for (int sinks = 0; sinks < 2; sinks++) {
                cr_assert_leq(cuda_attn_pf_smem(dims[i], q, sinks), (size_t)163 << 10, "hd %d", dims[i]);
                cr_assert_leq(cuda_attn_dec_smem(dims[i], q ? 1 : 2, sinks), (size_t)163 << 10, "hd %d", dims[i]);
                /* the decode block's warps merge through its stages at the end */
                cr_assert_geq(cuda_attn_dec_smem(dims[i], q ? 1 : 2, sinks),
                              (size_t)dims[i] * 32 * (sinks ? 2 : 1) + 4 * 16 * (dims[i] + 2) * 4);
            }
}

/* The dispatcher's geometry rule: the tensor-core kernels take head dims 64/96/128/256 with f16,
 * bf16, int8 or e4m3 caches whose tiles are 16-byte aligned (quantised: an even block size), when
 * the GPU gives a block enough shared memory; the reference kernel everything else. */
Test(cuda_host, attn_tc_refusal)
{
    const size_t h100 = 227 << 10;
    for (int d = 1; d <= 512; d++) {
        int ok = d == 64 || d == 96 || d == 128 || d == 256;
        size_t tile = (size_t)16 * d * 2;
        cr_assert_eq(cuda_attn_tc_refusal(d, KV_F16, 16, tile, h100) == NULL, ok, "head dim %d", d);
    }
    cr_assert_null(cuda_attn_tc_refusal(128, KV_BF16, 16, 16 * 128 * 2, h100));
    cr_assert_null(cuda_attn_tc_refusal(128, KV_I8, 16, 16 * (128 + 2), h100));
    cr_assert_null(cuda_attn_tc_refusal(256, KV_FP8, 32, 32 * (256 + 2), 163 << 10), "an A100 fits head dim 256");
    cr_assert_not_null(cuda_attn_tc_refusal(128, KV_F32, 16, 16 * 128 * 4, h100), "f32 keeps f32 products");
    cr_assert_not_null(cuda_attn_tc_refusal(64, KV_I8, 5, 5 * 66, h100), "odd block: tiles unaligned");
    cr_assert_not_null(cuda_attn_tc_refusal(64, KV_I8, 3, 208, h100), "an odd block size, however aligned");
    cr_assert_not_null(cuda_attn_tc_refusal(128, KV_F16, 16, 16 * 128 * 2, 99 << 10), "too little shared memory");
}

/* ---- online softmax ------------------------------------------------------------------------- */

/* Splits random scores into random contiguous partitions, reduces each to (m, l, o) in f32 and
 * merges them with cuda_softmax_merge in random order; compares with a float64 softmax. */
Test(cuda_host, softmax_merge)
{
    uint64_t seed = 0x50f7, s = seed;
    printf("cuda_host/softmax_merge seed %#llx\n", (unsigned long long)seed);
    enum { N = 300 };
    float sc[N], v[N];
    for (int it = 0; it < 3000; it++) {
        int n = tch_int(&s, 1, N);
        float spread = (float)tch_int(&s, 1, 60);
        for (int i = 0; i < n; i++) {
            sc[i] = tch_unif(&s) * spread;
            v[i] = tch_unif(&s);
        }
        double mx = -INFINITY, den = 0, num = 0;
        for (int i = 0; i < n; i++) mx = sc[i] > mx ? sc[i] : mx;
        for (int i = 0; i < n; i++) {
            den += exp(sc[i] - mx);
            num += exp(sc[i] - mx) * v[i];
        }
        float m = -INFINITY, l = 0, o = 0;
        int i0 = 0;
        while (i0 < n) {
            int len = tch_int(&s, 0, 40); /* empty partitions happen (splits past an item's end) */
            if (i0 + len > n) len = n - i0;
            float pm = -INFINITY, pl = 0, po = 0;
            for (int i = i0; i < i0 + len; i++) pm = sc[i] > pm ? sc[i] : pm;
            for (int i = i0; i < i0 + len; i++) {
                pl += expf(sc[i] - pm);
                po += expf(sc[i] - pm) * v[i];
            }
            float ca, cb;
            m = cuda_softmax_merge(m, &l, pm, pl, &ca, &cb);
            o = o * ca + po * cb;
            i0 += len;
        }
        cr_assert_float_eq(m, (float)mx, 0.0f);
        double ref = num / den;
        cr_assert(fabs(o / l - ref) <= 1e-5 * (1.0 + fabs(ref)), "merged %.9g vs %.9g", o / l, ref);
    }
    float ca, cb, l = 0;
    cr_assert(cuda_softmax_merge(-INFINITY, &l, -INFINITY, 0, &ca, &cb) == -INFINITY);
    cr_assert(ca == 0 && cb == 0 && l == 0, "two empty states stay empty, with no NaN");
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

/* The kernel's rotation of one token row (cuda__rope_row), written with the same helpers; ff: the
 * frequency factors (host copy) or NULL. */
static void tch_rope_row(float *x, int pos, const be_rope *r, const float *ff)
{
    int half = r->rope_dims / 2;
    for (int i = 0; i < half; i++) {
        double ang = (double)pos * be_rope_freq(r, i, ff ? ff[i] : 1.0f);
        float c = (float)cos(ang) * be_rope_mscale(r), sn = (float)sin(ang) * be_rope_mscale(r);
        int a, b;
        cuda_rope_pair(r->neox, r->rope_dims, i, &a, &b);
        for (int h = 0; h < r->n_heads; h++) {
            float *xh = x + h * r->head_dim, x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * sn;
            xh[b] = x0 * sn + x1 * c;
        }
    }
}

Test(cuda_host, rope_pairs_and_freqs)
{
    int a, b;
    cuda_rope_pair(0, 64, 5, &a, &b);
    cr_assert(a == 10 && b == 11);
    cuda_rope_pair(1, 64, 5, &a, &b);
    cr_assert(a == 5 && b == 37);
    be_rope r = {.n_heads = 1, .head_dim = 128, .rope_dims = 128, .base = 10000.0f};
    cr_assert_float_eq(be_rope_freq(&r, 0, 1.0f), 1.0, 0.0);
    for (int i = 0; i < 64; i++) {
        double ref = 1.0 / pow(10000.0, (2.0 * i) / 128.0);
        cr_assert(fabs(be_rope_freq(&r, i, 1.0f) - ref) <= 1e-15 * ref);
        /* a frequency factor divides; linear scaling multiplies by freq_scale */
        cr_assert(fabs(be_rope_freq(&r, i, 8.0f) - ref / 8) <= 1e-15 * ref);
        r.freq_scale = 0.25f;
        cr_assert(fabs(be_rope_freq(&r, i, 1.0f) - ref / 4) <= 1e-15 * ref);
        /* YaRN: pairs up to corr_lo keep the extrapolated frequency, from corr_hi on the
         * interpolated one, linearly mixed in between (ggml's rope_yarn_ramp) */
        r.ext_factor = 1.0f, r.corr_lo = 2.0f, r.corr_hi = 11.0f;
        double ramp = i <= 2 ? 1.0 : i >= 11 ? 0.0 : 1.0 - (i - 2.0) / 9.0;
        double want = ref * (0.25 * (1 - ramp) + ramp);
        cr_assert(fabs(be_rope_freq(&r, i, 1.0f) - want) <= 1e-15 * ref, "pair %d", i);
        r.freq_scale = 0.0f, r.ext_factor = 0.0f; /* 0 means no scaling */
        cr_assert(fabs(be_rope_freq(&r, i, 1.0f) - ref) <= 1e-15 * ref);
    }
    cr_assert_eq(be_rope_mscale(&r), 1.0f);
    r.mscale = 1.25f;
    cr_assert_eq(be_rope_mscale(&r), 1.25f);
}

/* Against the CPU backend's rope op, both layouts, partial rotation, long positions, and YaRN with
 * frequency factors and mscale. */
Test(cuda_host, rope_matches_cpu_backend)
{
    uint64_t seed = 0x209e, s = seed;
    printf("cuda_host/rope_matches_cpu_backend seed %#llx\n", (unsigned long long)seed);
    backend *be = cpu_backend_create(1);
    cr_assert_not_null(be);
    enum { T = 9, H = 4, D = 32 };
    int32_t pos[T], zeros[T] = {0}, q_start[2] = {0, T}, ctx[1] = {T};
    int32_t bt[1] = {0};
    static float x[T * H * D], ref[T * H * D];
    float ff[D / 2];
    for (int i = 0; i < D / 2; i++) ff[i] = 1.0f + (float)(i % 5);
    be_weight fw = {.type = DT_F32, .n_in = D / 2, .n_out = 1, .data = ff};
    for (int scaled = 0; scaled < 2; scaled++)
    for (int neox = 0; neox < 2; neox++)
        for (int rd = 16; rd <= D; rd += 16) {
            be_rope r = {.n_heads = H, .head_dim = D, .rope_dims = rd, .base = neox ? 1000000.0f : 10000.0f,
                         .neox = neox};
            if (scaled) {
                r.freq_scale = 0.125f, r.ext_factor = 1.0f, r.corr_lo = 1.0f, r.corr_hi = 5.0f;
                r.mscale = 1.2079f, r.freq_factors = &fw;
            }
            for (int t = 0; t < T; t++) pos[t] = t == 0 ? 0 : tch_int(&s, 1, 130000);
            for (int i = 0; i < T * H * D; i++) x[i] = ref[i] = tch_unif(&s);
            be_batch b = {.n_tokens = T, .tokens = zeros, .positions = pos, .n_seqs = 1, .q_start = q_start, .n_logits = 0, .logit_rows = NULL, .n_kv = 1, .kv = {{.slots = zeros, .ctx_len = ctx, .block_table = bt, .bt_stride = 1}}};
            cr_assert_eq(be->ops->begin(be, &b), 0);
            be->ops->rope(be, x, &r);
            for (int t = 0; t < T; t++) tch_rope_row(ref + t * H * D, pos[t], &r, scaled ? ff : NULL);
            for (int i = 0; i < T * H * D; i++)
                cr_assert(fabsf(x[i] - ref[i]) <= 2e-6f, "neox %d rope_dims %d elem %d: cpu %.9g cuda %.9g", neox, rd,
                          i, x[i], ref[i]);
        }
    be_destroy(be);
}

/* ---- scalar formats ------------------------------------------------------------------------- */

Test(cuda_host, f16_exhaustive)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float a = cuda_f16_to_f32((uint16_t)h), b = dt_f16_to_f32((uint16_t)h);
        if (isnan(b)) {
            cr_assert(isnan(a));
            continue;
        }
        cr_assert(memcmp(&a, &b, 4) == 0, "f16 %#x: %g vs %g", h, a, b);
        cr_assert_eq(cuda_f32_to_f16(a), (uint16_t)h, "round trip of %#x", h);
    }
}

Test(cuda_host, f32_to_16bit_matches_reference)
{
    uint64_t seed = 0xf1600d, s = seed;
    printf("cuda_host/f32_to_16bit_matches_reference seed %#llx\n", (unsigned long long)seed);
    const float special[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 65519.99f, 1e-8f, 5.96e-8f, 2.98e-8f,
                             2.9802322e-08f, 6.1e-5f, 6.097555e-05f, INFINITY, -INFINITY, 3.0e38f, -1e-45f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        cr_assert_eq(cuda_f32_to_f16(special[i]), dt_f32_to_f16(special[i]), "f16 of %g", special[i]);
        cr_assert_eq(cuda_f32_to_bf16(special[i]), dt_f32_to_bf16(special[i]), "bf16 of %g", special[i]);
    }
    for (int it = 0; it < 2000000; it++) {
        uint32_t u = (uint32_t)tch_rng(&s);
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) {
            cr_assert(isnan(cuda_f16_to_f32(cuda_f32_to_f16(f))));
            cr_assert(isnan(cuda_bf16_to_f32(cuda_f32_to_bf16(f))));
            continue;
        }
        cr_assert_eq(cuda_f32_to_f16(f), dt_f32_to_f16(f), "f16 of %a (%#x)", f, u);
        cr_assert_eq(cuda_f32_to_bf16(f), dt_f32_to_bf16(f), "bf16 of %a (%#x)", f, u);
        cr_assert(memcmp(&(float){cuda_bf16_to_f32((uint16_t)u)}, &(float){dt_bf16_to_f32((uint16_t)u)}, 4) == 0);
    }
}

Test(cuda_host, q8_0_matches_reference)
{
    uint64_t seed = 0x98, s = seed;
    printf("cuda_host/q8_0_matches_reference seed %#llx\n", (unsigned long long)seed);
    enum { NB = 8, N = NB * 32 };
    dt_block_q8_0 row[NB];
    float ref[N];
    for (int it = 0; it < 500; it++) {
        for (int b = 0; b < NB; b++) {
            row[b].d = dt_f32_to_f16(tch_unif(&s) * (it % 2 ? 1e-3f : 0.05f));
            for (int i = 0; i < 32; i++) row[b].q[i] = (int8_t)tch_int(&s, -128, 127);
        }
        dt_to_f32(DT_Q8_0, row, ref, N);
        for (int i = 0; i < N; i++) {
            float v = cuda_q8_0_value((const uint8_t *)row, i);
            cr_assert(memcmp(&v, &ref[i], 4) == 0, "q8_0 element %d: %g vs %g", i, v, ref[i]);
        }
    }
}

Test(cuda_host, silu_mul_matches_cpu_backend)
{
    uint64_t s = 0x5170;
    backend *be = cpu_backend_create(1);
    cr_assert_not_null(be);
    enum { N = 1000 };
    float g[N], u[N], ref[N];
    for (int i = 0; i < N; i++) {
        g[i] = tch_unif(&s) * 12.0f;
        u[i] = tch_unif(&s) * 3.0f;
        ref[i] = cuda_silu_mul(g[i], u[i]);
    }
    be->ops->silu_mul(be, g, u, N);
    for (int i = 0; i < N; i++) cr_assert(fabsf(g[i] - ref[i]) <= 1e-6f * (1.0f + fabsf(ref[i])));
    be_destroy(be);
}

/* Every quantised type's (and MXFP4's) 8-weight decoding (cuda/quant_formats.h, what the kernels
 * run) equals dt_to_f32 bit for bit, on random rows (random bytes, random finite scales). */
Test(cuda_host, quant_dequant8_matches_reference)
{
    uint64_t seed = 0x9a11, s = seed;
    printf("cuda_host/quant_dequant8_matches_reference seed %#llx\n", (unsigned long long)seed);
    const int types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_0, DT_IQ4_NL,
                         DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS, DT_MXFP4};
    enum { N = 512 };
    static uint8_t row[N / 32 * 210];
    float ref[N], v[8];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        int type = types[t];
        cr_assert(cuda_q_is_block(type) && cuda_q_is_quant(type) == (type != DT_MXFP4));
        cr_assert_eq(cuda_q_block_elems(type), dt_block_elems(type));
        cr_assert_eq((size_t)cuda_q_block_bytes(type), dt_block_bytes(type));
        for (int it = 0; it < 50; it++) {
            tu_random_blocks(type, N / dt_block_elems(type), &s, row);
            dt_to_f32(type, row, ref, N);
            for (int i0 = 0; i0 < N; i0 += 8) {
                cuda_q_dequant8(type, row, i0, v);
                for (int k = 0; k < 8; k++)
                    cr_assert(memcmp(&v[k], &ref[i0 + k], 4) == 0, "%s element %d: %g vs %g", dt_name(type),
                              i0 + k, v[k], ref[i0 + k]);
            }
        }
    }
}

/* The integer chunk form of every quantised type and MXFP4 (cuda/quant_int.h, what mmvq and mmq decode):
 * each weight rebuilt as (D · s[h]) · q − DM · m[h] from the lane's codes, the sub word and the
 * block scales equals dt_to_f32 bit for bit (both form it with the same f32 operations), on
 * random rows. Every lane's codes are checked, so a byte given to the wrong lane fails. */
Test(cuda_host, quant_int_chunks_match_reference)
{
    uint64_t seed = 0x1a7c4, s = seed;
    printf("cuda_host/quant_int_chunks_match_reference seed %#llx\n", (unsigned long long)seed);
    const int types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_0, DT_IQ4_NL,
                         DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS, DT_MXFP4};
    enum { N = 512 };
    static uint8_t row[N / 32 * 210];
    float ref[N];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int type = types[ti], be = cuda_q_block_elems(type), bb = cuda_q_block_bytes(type);
        cr_assert_eq(cuda_q_act_block(type), be);
        for (int it = 0; it < 50; it++) {
            tu_random_blocks(type, N / be, &s, row);
            dt_to_f32(type, row, ref, N);
            for (int i = 0; i < N; i++) {
                const uint8_t *b = row + (i / be) * bb;
                int j = i % be / 32, h = i % 32 / 16, t = i % 16 / 4;
                uint32_t q[2], sub = cuda_qi_sub(type, b, j);
                float d, dm;
                cuda_qi_ints(type, b, j, t, q);
                cuda_qi_scales(type, b, &d, &dm);
                int code = (int8_t)(q[h] >> 8 * (i % 4));
                float v = d * (float)cuda_qi_s(sub, h) * (float)code - dm * (float)cuda_qi_m(sub, h);
                cr_assert(memcmp(&v, &ref[i], 4) == 0, "%s element %d: %g vs %g", dt_name(type), i, v, ref[i]);
                if (!cuda_q_has_min(type)) cr_assert_eq(cuda_qi_m(sub, h), 0, "%s: a min without DM", dt_name(type));
                if (!cuda_q_split16(type)) cr_assert_eq(cuda_qi_s(sub, 0), cuda_qi_s(sub, 1));
            }
        }
    }
}

/* The byte helpers of the chunk form: prmt's selector semantics, the IQ4 code book through two
 * permutes, the byte-wise offset subtraction. */
Test(cuda_host, quant_int_byte_helpers)
{
    cr_assert_eq(cuda_prmt(0x33221100u, 0x77665544u, 0x7531u), 0x77553311u);
    cr_assert_eq(cuda_prmt(0x33221100u, 0x77665544u, 0x0000u), 0x00000000u);
    cr_assert_eq(cuda_prmt(0x33221100u, 0x77665544u, 0xFEDCu), 0x77665544u, "only the low 3 bits select");
    for (uint32_t v = 0; v < 1u << 16; v++) {
        uint32_t codes = (v & 0xF) | (v >> 4 & 0xF) << 8 | (v >> 8 & 0xF) << 16 | (v >> 12 & 0xF) << 24;
        uint32_t got = cuda_qi_iq4(codes);
        for (int k = 0; k < 4; k++) {
            int c = (int)(codes >> 8 * k & 0xF);
            cr_assert_eq((int8_t)(got >> 8 * k), dt_iq4nl_values[c], "code %d in byte %d", c, k);
        }
        uint32_t fp4 = cuda_qi_fp4(codes);
        for (int k = 0; k < 4; k++) {
            int c = (int)(codes >> 8 * k & 0xF);
            cr_assert_eq((int8_t)(fp4 >> 8 * k), dt_mxfp4_values[c], "fp4 code %d in byte %d", c, k);
        }
        uint32_t sixes = codes * 4 | 3 * 0x01010101u; /* 6-bit codes 3..63 */
        uint32_t off = cuda_qi_sub_off(sixes, 32);
        for (int k = 0; k < 4; k++) cr_assert_eq((int8_t)(off >> 8 * k), (int)(sixes >> 8 * k & 0xFF) - 32);
    }
}

/* The activation quantiser's reference is the CPU backend's block quantiser, bit for bit; the
 * permuted position is a bijection of each block of 32 that puts lane t's values 4t..4t+3 and
 * 16+4t..16+4t+3 at bytes 8t..8t+7. */
Test(cuda_host, quant_act_reference)
{
    uint64_t seed = 0xac7, s = seed;
    printf("cuda_host/quant_act_reference seed %#llx\n", (unsigned long long)seed);
    float x[256];
    int8_t q[256], r[256];
    for (int it = 0; it < 2000; it++) {
        int n = it % 2 ? 256 : 32;
        float scale = it % 7 == 0 ? 0.0f : powf(2.0f, (float)tch_int(&s, -20, 20));
        for (int i = 0; i < n; i++) x[i] = tch_unif(&s) * scale;
        if (it % 5 == 1) { /* the block's maximum and half of it: q = 63.5 up to rounding, a tie or nearly */
            x[0] = scale;
            x[n - 1] = -0.5f * scale;
        }
        float d = cuda_qa_quantise(x, n, q), dc = cpu__quantise_block(x, n, r);
        cr_assert(memcmp(&d, &dc, 4) == 0 && memcmp(q, r, (size_t)n) == 0, "block %d differs from the CPU's", it);
    }
    int seen[32] = {0};
    for (int i = 0; i < 32; i++) {
        int p = cuda_qa_pos(i);
        cr_assert(p >= 0 && p < 32 && !seen[p]++);
        int t = i % 16 / 4;
        cr_assert_eq(p / 8, t, "value %d belongs to lane %d", i, t);
        cr_assert_eq(p % 8, 4 * (i / 16) + i % 4);
    }
    cr_assert_eq(cuda_qa_bytes(DT_Q4_K, 3, 512), 3 * 512 + 3 * 2 * 4);
    cr_assert_eq(cuda_qa_bytes(DT_Q8_0, 1, 96), 96 + 3 * 4);
    cr_assert_eq(cuda_qa_scales_offset(1, 40) % 16, 0);
}

/* mmvq's split of a tile over blocks: at least 1, at most CUDA_MMVQ_MAX_SPLIT, never so fine that
 * a warp gets fewer than its minimum of weight blocks, and only for matrices too small to fill
 * the GPU. */
Test(cuda_host, mmvq_split)
{
    uint64_t s = 0x5911;
    cr_assert_eq(cuda_mmvq_split(128256, 16, 256, 132), 1, "an LM head fills the GPU");
    cr_assert_gt(cuda_mmvq_split(2048, 64, 32, 132), 1, "2048 rows do not");
    for (int it = 0; it < 100000; it++) {
        int be = it % 2 ? 256 : 32, n_sm = tch_int(&s, 1, 200);
        int64_t n_out = tch_int(&s, 1, 200000), n_blocks = tch_int(&s, 1, 2000);
        int sp = cuda_mmvq_split(n_out, n_blocks, be, n_sm);
        cr_assert(sp >= 1 && sp <= CUDA_MMVQ_MAX_SPLIT);
        if (sp > 1) {
            cr_assert_geq(n_blocks / ((int64_t)sp * CUDA_MMVQ_WARPS), be == 32 ? 4 : 1);
            cr_assert_lt(cuda_div_up(n_out, 16) * CUDA_MMVQ_WARPS * (sp - 1), (int64_t)n_sm * 24);
        }
    }
}

/* The quantised-weight kernels (cuda/qact_kernels.h, qmatvec_kernels.h, qgemm_kernels.h,
 * gather_kernels.h), the source nvcc compiles, under the CPU emulation of cuda/check (quant_emu
 * --quick: the activation quantiser, the integer matvec mmvq and GEMM mmq, the F16 tiles of the
 * other prefill path and the embedding for every type), against float64 and the host's
 * decoding. */
Test(cuda_host, quant_kernels_under_emulation, .timeout = 120)
{
    char *out = tch_emu("KVSERVE_QUANT_EMU", "");
    cr_assert(strstr(out, "Q6_K mmvq 8 rows") && strstr(out, "IQ4_XS mmq") && strstr(out, "qact bf16") &&
                  strstr(out, " 0 mismatches"),
              "%s", out);
    free(out);
}

/* The kernels of the other op families (cuda/norm_rope_kernels.h, elementwise_kernels.h,
 * gather_kernels.h, sample_kernels.h, gemm_kernels.h, kv_kernels.h), the source nvcc compiles,
 * under the CPU emulation of cuda/check (ops_emu --quick), against float64 and the host's
 * arithmetic. */
Test(cuda_host, op_kernels_under_emulation, .timeout = 120)
{
    char *out = tch_emu("KVSERVE_OPS_EMU", "");
    cr_assert(strstr(out, "rmsnorm") && strstr(out, "rope_shift") && strstr(out, "argmax") &&
                  strstr(out, "store_kv") && strstr(out, " 0 failed"),
              "%s", out);
    free(out);
}

/* The kernels of the decode path (cuda/gemv_kernels.h, fused_kernels.h) and the bf16
 * instantiations of the other families (norms with the residual add, RoPE, the K/V store, the
 * element-wise ops, conversions, attention), the source nvcc compiles, under the CPU emulation of
 * cuda/check (dense_emu --quick), against float64 references with derived tolerances. */
Test(cuda_host, dense_kernels_under_emulation, .timeout = 120)
{
    char *out = tch_emu("KVSERVE_DENSE_EMU", "");
    cr_assert(strstr(out, "gemv W bf16 x bf16 out bf16") && strstr(out, "silu stacked") && strstr(out, "gelu") &&
                  strstr(out, "qkv epilogue kv int8") && strstr(out, "qkv epilogue kv fp8") &&
                  strstr(out, "attention bf16") && strstr(out, " 0 failed"),
              "%s", out);
    free(out);
}

/* The mixture-of-experts and latent-attention kernels (cuda/moe_kernels.h, mla_kernels.h), the
 * source nvcc compiles, under the CPU emulation of cuda/check (moe_emu --quick): routing against
 * be_moe_route, the whole FFN in F32, Q8_0, Q4_K, Q6_K and MXFP4 against float64 with unchosen
 * experts unreadable, the grouped integer matvec of every quantised type and MXFP4 (decode with a
 * split, prefill-sized groups), MXFP4's 8-bit activations bit for bit, MLA's prep and attention
 * over f32 and int8 latent planes against float64. */
Test(cuda_host, moe_mla_kernels_under_emulation, .timeout = 180)
{
    char *out = tch_emu("KVSERVE_MOE_EMU", "");
    cr_assert(strstr(out, "route E 32") && strstr(out, "moe_ffn MXFP4") && strstr(out, "mla attention int8") &&
                  strstr(out, "grouped mmvq IQ4_XS") && strstr(out, "grouped mmvq MXFP4 E 4 tokens 8 k 4") &&
                  strstr(out, " 0 failed"),
              "%s", out);
    free(out);
}

/* The matrix-vector plan: every shape of a range of random ones is covered by its blocks, splits
 * K only by 1, 2 or 4, and short matrices split while tall ones do not. */
Test(cuda_host, gemv_plan)
{
    uint64_t seed = 0x67656d76ULL, s = seed;
    printf("cuda_host/gemv_plan seed %#llx\n", (unsigned long long)seed);
    for (int it = 0; it < 50000; it++) {
        int64_t n_out = tch_int(&s, 1, 300000), n_in = 8 * (int64_t)tch_int(&s, 1, 8192);
        int rows = tch_int(&s, 1, CUDA_GEMV_MAX_ROWS), glu = tch_int(&s, 0, 1), es = tch_int(&s, 0, 1) ? 2 : 4;
        int n_sm = tch_int(&s, 1, 200), ks;
        int64_t blocks;
        cuda_gemv_plan(n_out, n_in, glu, rows, es, n_sm, &ks, &blocks);
        int R = cuda_gemv_rows(rows), no = CUDA_GEMV_OUTPUTS(R, glu ? 2 : 1);
        cr_assert(R >= rows && R <= 8 && (R & (R - 1)) == 0);
        cr_assert(ks == 1 || ks == 2 || ks == 4);
        int64_t per_block = (CUDA_GEMV_THREADS / 32 / ks) * no;
        cr_assert_geq(blocks * per_block, n_out, "every output has a warp group");
        cr_assert_lt((blocks - 1) * per_block, n_out, "no block without outputs");
    }
    int ks;
    int64_t blocks;
    cuda_gemv_plan(2560, 2048, 0, 1, 2, 132, &ks, &blocks);
    cr_assert_gt(ks, 1, "a short matrix (QKV of a 1B model) splits K");
    cuda_gemv_plan(128256, 4096, 0, 1, 2, 132, &ks, &blocks);
    cr_assert_eq(ks, 1, "a tall one (an LM head) does not");
    cr_assert(cuda_gemv_vector_ok(2048, 2) && !cuda_gemv_vector_ok(2047, 2) && cuda_gemv_vector_ok(12, 4));
}

/* Prefill tiles: whole rows, within the scratch budget, 64-row multiples when possible. */
Test(cuda_host, quant_tile_rows)
{
    cr_assert_eq(cuda_q_tile_rows(2048, 32000, CUDA_Q_TILE_BYTES), 16384);
    cr_assert_eq(cuda_q_tile_rows(2048, 100, CUDA_Q_TILE_BYTES), 100);
    cr_assert_eq(cuda_q_tile_rows(5632, 2048, (size_t)5632 * 2 * 100), 64);
    cr_assert_eq(cuda_q_tile_rows(1 << 20, 10, 1000), 1, "at least one row");
    for (int64_t n_in = 256; n_in <= 65536; n_in *= 4) {
        int64_t r = cuda_q_tile_rows(n_in, 1 << 20, CUDA_Q_TILE_BYTES);
        cr_assert((size_t)r * n_in * 2 <= CUDA_Q_TILE_BYTES && r % 64 == 0);
    }
}

/* ---- the device sampler under emulation, on logits stories260K wrote ------------------------- */

#include "cli/device.h"
#include "engine/forward.h"
#include "model/tokenizer.h"

/* The logits of every position of a short story prompt, stories260K on the CPU backend, into path
 * (int32 n_rows, int32 n_vocab, then the rows as f32). 0, or -1 when the model is not there. */
static int tch_record_logits(const char *path)
{
    char mp[1024], err[256];
    snprintf(mp, sizeof mp, "%s/stories260K.gguf", tu_data_dir());
    model *m = NULL;
    if (model_load(mp, &m, err, sizeof err)) return -1;
    tokenizer *tk = tok_create(m->gguf, err, sizeof err);
    cr_assert_not_null(tk, "%s", err);
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    int32_t toks[64];
    int n = tok_encode(tk, text, strlen(text), 1, 0, toks, 64);
    cr_assert(n > 8 && n <= 64, "%d tokens", n);
    backend *be = be_create("cpu", 1, err, sizeof err);
    cr_assert_not_null(be, "%s", err);
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, 16, KV_F32);
    int32_t n_blocks = 4, pos[64], slots[64], q_start[2] = {0, n}, ctx[1] = {n}, bt[4] = {0, 1, 2, 3};
    for (int i = 0; i < n; i++) pos[i] = slots[i] = i;
    fwd *f = fwd_create(m, be, &g, &n_blocks, 64, 64, err, sizeof err);
    cr_assert_not_null(f, "%s", err);
    be_batch b = {.n_tokens = n, .tokens = toks, .positions = pos, .n_seqs = 1, .q_start = q_start, .n_logits = n,
                  .logit_rows = pos, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = 4}}};
    int32_t hdr[2] = {n, m->hp.n_vocab};
    float *l = malloc((size_t)n * (size_t)hdr[1] * sizeof *l);
    cr_assert_eq(fwd_run(f, &b, l), 0);
    FILE *o = fopen(path, "wb");
    cr_assert_not_null(o);
    cr_assert_eq(fwrite(hdr, sizeof hdr, 1, o), 1);
    cr_assert_eq(fwrite(l, sizeof *l, (size_t)n * (size_t)hdr[1], o), (size_t)n * (size_t)hdr[1]);
    fclose(o);
    free(l);
    fwd_destroy(f);
    be_destroy(be);
    tok_destroy(tk);
    model_destroy(m);
    return 0;
}

/* The device sampler (cuda/sample_kernels.h), the source nvcc compiles, under the CPU emulation
 * (sample_emu --quick) against the CPU's sampler on the same rows: every option, greedy and
 * seeded, random rows and rows stories260K's forward wrote. */
Test(cuda_host, sampler_kernels_under_emulation, .timeout = 240)
{
    char path[256], extra[300];
    snprintf(path, sizeof path, "/tmp/kvserve-sample-emu-%d.bin", (int)getpid());
    int recorded = tch_record_logits(path) == 0;
    snprintf(extra, sizeof extra, "%s%s", recorded ? " --logits " : "", recorded ? path : "");
    char *out = tch_emu("KVSERVE_SAMPLE_EMU", extra);
    if (recorded) remove(path);
    cr_assert(strstr(out, " 0 failed") && strstr(out, "top_p") && strstr(out, "pending"), "%s", out);
    cr_assert(!recorded || strstr(out, "recorded logits"), "%s", out);
    free(out);
}
