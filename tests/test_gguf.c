/*
 * test_gguf.c — the GGUF reader: every value type round-trips, the real stories260K parses, and
 * truncated, bit-flipped and absurd files fail cleanly with a one-line message.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mkmodel.h"
#include "model/dtype.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "tests/test_util.h"

/* A growable byte buffer used to hand-build GGUF files. */
typedef struct tg_buf {
    uint8_t *p;
    size_t n, cap;
} tg_buf;

static void tg_put(tg_buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void tg_u32(tg_buf *b, uint32_t v) { tg_put(b, &v, 4); }
static void tg_u64(tg_buf *b, uint64_t v) { tg_put(b, &v, 8); }
static void tg_str(tg_buf *b, const char *s)
{
    tg_u64(b, strlen(s));
    tg_put(b, s, strlen(s));
}
static void tg_pad(tg_buf *b, size_t a)
{
    static const uint8_t z[64];
    while (b->n % a) tg_put(b, z, 1);
}

/* Builds a small file with every value type, a nested array and three tensors. Tensor data:
 * "a" F32 [4,2] = 0..7, "b" F16 [3] = {1,-2,0.5}, "c" Q8_0 [32] with d = 0.5, q[i] = i - 16. */
static tg_buf tg_build_sample(void)
{
    tg_buf b = {0};
    tg_put(&b, "GGUF", 4);
    tg_u32(&b, 3);
    tg_u64(&b, 3);  /* tensors */
    tg_u64(&b, 15); /* kv */
    uint8_t u8 = 200; int8_t i8 = -5; uint16_t u16 = 60000; int16_t i16 = -30000;
    int32_t i32 = -123456; float f32 = 1.5f; uint8_t bo = 1; uint64_t u64 = 1ull << 40;
    int64_t i64 = -(1ll << 40); double f64 = 0.125;
    tg_str(&b, "t.u8"); tg_u32(&b, GGUF_T_U8); tg_put(&b, &u8, 1);
    tg_str(&b, "t.i8"); tg_u32(&b, GGUF_T_I8); tg_put(&b, &i8, 1);
    tg_str(&b, "t.u16"); tg_u32(&b, GGUF_T_U16); tg_put(&b, &u16, 2);
    tg_str(&b, "t.i16"); tg_u32(&b, GGUF_T_I16); tg_put(&b, &i16, 2);
    tg_str(&b, "t.u32"); tg_u32(&b, GGUF_T_U32); tg_u32(&b, 4000000000u);
    tg_str(&b, "t.i32"); tg_u32(&b, GGUF_T_I32); tg_put(&b, &i32, 4);
    tg_str(&b, "t.f32"); tg_u32(&b, GGUF_T_F32); tg_put(&b, &f32, 4);
    tg_str(&b, "t.bool"); tg_u32(&b, GGUF_T_BOOL); tg_put(&b, &bo, 1);
    tg_str(&b, "t.str"); tg_u32(&b, GGUF_T_STRING); tg_str(&b, "héllo");
    tg_str(&b, "t.u64"); tg_u32(&b, GGUF_T_U64); tg_u64(&b, u64);
    tg_str(&b, "t.i64"); tg_u32(&b, GGUF_T_I64); tg_put(&b, &i64, 8);
    tg_str(&b, "t.f64"); tg_u32(&b, GGUF_T_F64); tg_put(&b, &f64, 8);
    tg_str(&b, "t.arr_i32"); tg_u32(&b, GGUF_T_ARRAY); tg_u32(&b, GGUF_T_I32); tg_u64(&b, 3);
    for (int32_t v = -1; v <= 1; v++) tg_put(&b, &v, 4);
    tg_str(&b, "t.arr_str"); tg_u32(&b, GGUF_T_ARRAY); tg_u32(&b, GGUF_T_STRING); tg_u64(&b, 2);
    tg_str(&b, "x"); tg_str(&b, "");
    /* [[1,2],[]] as nested u16 arrays */
    tg_str(&b, "t.nested"); tg_u32(&b, GGUF_T_ARRAY); tg_u32(&b, GGUF_T_ARRAY); tg_u64(&b, 2);
    tg_u32(&b, GGUF_T_U16); tg_u64(&b, 2);
    uint16_t a1 = 1, a2 = 2;
    tg_put(&b, &a1, 2); tg_put(&b, &a2, 2);
    tg_u32(&b, GGUF_T_U16); tg_u64(&b, 0);
    /* tensor table */
    tg_str(&b, "a"); tg_u32(&b, 2); tg_u64(&b, 4); tg_u64(&b, 2); tg_u32(&b, DT_F32); tg_u64(&b, 0);
    tg_str(&b, "b"); tg_u32(&b, 1); tg_u64(&b, 3); tg_u32(&b, DT_F16); tg_u64(&b, 32);
    tg_str(&b, "c"); tg_u32(&b, 1); tg_u64(&b, 32); tg_u32(&b, DT_Q8_0); tg_u64(&b, 64);
    tg_pad(&b, 32);
    for (int i = 0; i < 8; i++) {
        float v = (float)i;
        tg_put(&b, &v, 4);
    }
    uint16_t h[3] = {0x3C00, 0xC000, 0x3800};
    tg_put(&b, h, 6);
    tg_pad(&b, 32);
    dt_block_q8_0 q = {.d = 0x3800};
    for (int i = 0; i < 32; i++) q.q[i] = (int8_t)(i - 16);
    tg_put(&b, &q, sizeof q);
    return b;
}

/* Touches everything an open file exposes (so ASan sees any out-of-bounds view). */
static uint64_t tg_walk(const gguf_file *f);

static uint64_t tg_walk_arr(const gguf_arr *a)
{
    uint64_t h = a->n;
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_T_STRING) {
            for (uint64_t k = 0; k < a->strs[i].len; k++) h += (uint8_t)a->strs[i].ptr[k];
        } else if (a->type == GGUF_T_ARRAY) {
            h += tg_walk_arr(&a->arrs[i]);
        } else {
            h += (uint64_t)gguf_arr_i64(a, i) + (uint64_t)(gguf_arr_f64(a, i) != 0);
        }
    }
    return h;
}

static uint64_t tg_walk(const gguf_file *f)
{
    uint64_t h = 0;
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        for (uint64_t k = 0; k < kv->key.len; k++) h += (uint8_t)kv->key.ptr[k];
        char key[300];
        gguf_str_copy(kv->key, key, sizeof key);
        cr_assert(gguf_find(f, key) != NULL);
        if (kv->type == GGUF_T_STRING)
            for (uint64_t k = 0; k < kv->v.str.len; k++) h += (uint8_t)kv->v.str.ptr[k];
        if (kv->type == GGUF_T_ARRAY) h += tg_walk_arr(&kv->v.arr);
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *p = t->data;
        for (uint64_t k = 0; k < t->n_bytes; k += 61) h += p[k];
        if (t->n_bytes) h += p[t->n_bytes - 1];
    }
    return h;
}

/* Opens a copy of buf[0..n) so that ASan catches any read past n. */
static int tg_open_copy(const uint8_t *buf, size_t n, char *err, size_t err_len, uint64_t *walk)
{
    uint8_t *copy = malloc(n ? n : 1);
    cr_assert(copy);
    memcpy(copy, buf, n);
    gguf_file *f = (gguf_file *)1;
    err[0] = 0;
    int rc = gguf_open_mem(copy, n, &f, err, err_len);
    if (rc == 0) {
        cr_assert(f != NULL);
        uint64_t h = tg_walk(f);
        if (walk) *walk = h;
        gguf_close(f);
    } else {
        cr_assert(f == NULL, "failed open must leave *out NULL");
        cr_assert(err[0] != 0, "a failure must say why");
        cr_assert(strchr(err, '\n') == NULL, "one line: %s", err);
    }
    free(copy);
    return rc;
}

Test(gguf, every_value_type)
{
    tg_buf b = tg_build_sample();
    gguf_file *f;
    char err[512];
    cr_assert_eq(gguf_open_mem(b.p, b.n, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_version(f), 3u);
    cr_assert_eq(gguf_n_kv(f), 15);
    cr_assert_eq(gguf_alignment(f), 32u);
    uint32_t u32;
    int64_t i64;
    float fl;
    int bo;
    gguf_str s;
    const gguf_arr *a;
    cr_assert_eq(gguf_get_u32(f, "t.u8", &u32), 0); cr_assert_eq(u32, 200u);
    cr_assert_eq(gguf_get_i64(f, "t.i8", &i64), 0); cr_assert_eq(i64, -5);
    cr_assert_eq(gguf_get_u32(f, "t.i8", &u32), -EINVAL, "negative does not fit u32");
    cr_assert_eq(gguf_get_u32(f, "t.u16", &u32), 0); cr_assert_eq(u32, 60000u);
    cr_assert_eq(gguf_get_i64(f, "t.i16", &i64), 0); cr_assert_eq(i64, -30000);
    cr_assert_eq(gguf_get_u32(f, "t.u32", &u32), 0); cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(gguf_get_i64(f, "t.i32", &i64), 0); cr_assert_eq(i64, -123456);
    cr_assert_eq(gguf_get_f32(f, "t.f32", &fl), 0); cr_assert_eq(fl, 1.5f);
    cr_assert_eq(gguf_get_f32(f, "t.u16", &fl), 0); cr_assert_eq(fl, 60000.0f);
    cr_assert_eq(gguf_get_bool(f, "t.bool", &bo), 0); cr_assert_eq(bo, 1);
    cr_assert_eq(gguf_get_str(f, "t.str", &s), 0); cr_assert(gguf_str_eq(s, "héllo"));
    cr_assert_eq(gguf_get_u32(f, "t.str", &u32), -EINVAL);
    cr_assert_eq(gguf_get_u32(f, "t.u64", &u32), -EINVAL, "2^40 does not fit u32");
    cr_assert_eq(gguf_get_i64(f, "t.u64", &i64), 0); cr_assert_eq(i64, 1ll << 40);
    cr_assert_eq(gguf_get_i64(f, "t.i64", &i64), 0); cr_assert_eq(i64, -(1ll << 40));
    cr_assert_eq(gguf_get_f32(f, "t.f64", &fl), 0); cr_assert_eq(fl, 0.125f);
    cr_assert_eq(gguf_get_u32(f, "missing", &u32), -ENOENT);
    cr_assert_eq(gguf_get_arr(f, "t.arr_i32", &a), 0);
    cr_assert_eq(a->type, GGUF_T_I32); cr_assert_eq(a->n, 3u);
    cr_assert_eq(gguf_arr_i64(a, 0), -1); cr_assert_eq(gguf_arr_i64(a, 2), 1);
    cr_assert_eq(gguf_arr_f64(a, 0), -1.0);
    cr_assert_eq(gguf_get_arr(f, "t.arr_str", &a), 0);
    cr_assert_eq(a->n, 2u); cr_assert(gguf_str_eq(a->strs[0], "x")); cr_assert(gguf_str_eq(a->strs[1], ""));
    cr_assert_eq(gguf_get_arr(f, "t.nested", &a), 0);
    cr_assert_eq(a->type, GGUF_T_ARRAY); cr_assert_eq(a->n, 2u);
    cr_assert_eq(a->arrs[0].n, 2u); cr_assert_eq(gguf_arr_i64(&a->arrs[0], 1), 2);
    cr_assert_eq(a->arrs[1].n, 0u);
    char buf[4];
    cr_assert_str_eq(gguf_str_copy(s, buf, sizeof buf), "h\xc3\xa9");

    cr_assert_eq(gguf_n_tensors(f), 3);
    cr_assert_eq(gguf_data_offset(f) % 32, 0u);
    const gguf_tensor *t = gguf_find_tensor(f, "a");
    cr_assert(t && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1);
    cr_assert_eq(t->n_bytes, 32u);
    float row[32];
    dt_to_f32(t->type, t->data, row, 8);
    for (int i = 0; i < 8; i++) cr_assert_eq(row[i], (float)i);
    t = gguf_find_tensor(f, "b");
    cr_assert(t && t->type == DT_F16 && t->n_bytes == 6);
    dt_to_f32(t->type, t->data, row, 3);
    cr_assert(row[0] == 1.0f && row[1] == -2.0f && row[2] == 0.5f);
    t = gguf_find_tensor(f, "c");
    cr_assert(t && t->type == DT_Q8_0 && t->n_bytes == 34);
    dt_to_f32(t->type, t->data, row, 32);
    for (int i = 0; i < 32; i++) cr_assert_eq(row[i], 0.5f * (float)(i - 16));
    cr_assert_null(gguf_find_tensor(f, "d"));
    gguf_close(f);
    free(b.p);
}

Test(gguf, truncated_everywhere)
{
    tg_buf b = tg_build_sample();
    char err[512];
    for (size_t n = 0; n < b.n; n++)
        cr_assert_neq(tg_open_copy(b.p, n, err, sizeof err, NULL), 0, "truncated at %zu opened", n);
    cr_assert_eq(tg_open_copy(b.p, b.n, err, sizeof err, NULL), 0, "%s", err);
    free(b.p);
}

Test(gguf, bit_flips_never_crash)
{
    tg_buf b = tg_build_sample();
    unsigned seed = 20261129;
    printf("gguf bit flips: seed %u\n", seed);
    srand(seed);
    char err[512];
    uint8_t *m = malloc(b.n);
    int opened = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(m, b.p, b.n);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++) m[(size_t)rand() % b.n] ^= (uint8_t)(1u << (rand() % 8));
        opened += tg_open_copy(m, b.n, err, sizeof err, NULL) == 0;
    }
    printf("gguf bit flips: %d of 20000 mutated files still opened\n", opened);
    free(m);
    free(b.p);
}

/* Replaces the 8 bytes at off with v and expects failure mentioning want. */
static void tg_expect_fail(const tg_buf *b, size_t off, const void *v, size_t n, const char *want)
{
    uint8_t *m = malloc(b->n);
    memcpy(m, b->p, b->n);
    memcpy(m + off, v, n);
    char err[512];
    int rc = tg_open_copy(m, b->n, err, sizeof err, NULL);
    cr_assert_neq(rc, 0, "expected failure (%s)", want);
    cr_assert(strstr(err, want), "message '%s' lacks '%s'", err, want);
    free(m);
}

/* Offset of the first occurrence of needle in the buffer. */
static size_t tg_find(const tg_buf *b, const char *needle, size_t n)
{
    for (size_t i = 0; i + n <= b->n; i++)
        if (!memcmp(b->p + i, needle, n)) return i;
    cr_assert_fail("needle not found");
    return 0;
}

Test(gguf, absurd_and_invalid)
{
    tg_buf b = tg_build_sample();
    uint64_t big = 1ull << 62;
    uint32_t v;
    tg_expect_fail(&b, 8, &big, 8, "tensor count");
    tg_expect_fail(&b, 16, &big, 8, "metadata count");
    tg_expect_fail(&b, 0, "GGUX", 4, "not a GGUF file");
    v = 1;
    tg_expect_fail(&b, 4, &v, 4, "version 1");
    v = 0x03000000;
    tg_expect_fail(&b, 4, &v, 4, "big-endian");
    /* array length of t.arr_i32 */
    size_t at = tg_find(&b, "t.arr_i32", 9) + 9 + 8;
    tg_expect_fail(&b, at, &big, 8, "t.arr_i32");
    /* string length of t.str's value */
    at = tg_find(&b, "t.str", 5) + 5 + 4;
    tg_expect_fail(&b, at, &big, 8, "t.str");
    /* value type of t.u32 */
    at = tg_find(&b, "t.u32", 5) + 5;
    v = 77;
    tg_expect_fail(&b, at, &v, 4, "unknown value type 77");
    /* duplicate key: rename t.i8 to t.u8 */
    at = tg_find(&b, "t.i8", 4);
    tg_expect_fail(&b, at, "t.u8", 4, "duplicate metadata key 't.u8'");
    /* tensor "b": dims, type, offset */
    at = tg_find(&b, "\x01\0\0\0\0\0\0\0b", 9) + 9;
    v = 5;
    tg_expect_fail(&b, at, &v, 4, "tensor 'b'");
    uint64_t ne = 1ull << 63;
    tg_expect_fail(&b, at + 4, &ne, 8, "tensor 'b'");
    v = 99;
    tg_expect_fail(&b, at + 12, &v, 4, "unknown tensor type 99");
    uint64_t off = 33;
    tg_expect_fail(&b, at + 16, &off, 8, "not a multiple of the alignment");
    off = 1ull << 40;
    tg_expect_fail(&b, at + 16, &off, 8, "extends past end of file");
    tg_expect_fail(&b, at - 1, "a", 1, "duplicate tensor name 'a'");
    /* q8_0 with ne[0] not a multiple of 32 */
    at = tg_find(&b, "\x01\0\0\0\0\0\0\0c", 9) + 9;
    ne = 33;
    tg_expect_fail(&b, at + 4, &ne, 8, "block size");
    free(b.p);
}

Test(gguf, alignment_key)
{
    for (int good = 0; good < 2; good++) {
        tg_buf b = {0};
        tg_put(&b, "GGUF", 4);
        tg_u32(&b, 2);
        tg_u64(&b, 1);
        tg_u64(&b, 1);
        tg_str(&b, "general.alignment");
        tg_u32(&b, GGUF_T_U32);
        tg_u32(&b, good ? 64 : 48);
        tg_str(&b, "w");
        tg_u32(&b, 1);
        tg_u64(&b, 4);
        tg_u32(&b, DT_F32);
        tg_u64(&b, 0);
        tg_pad(&b, 64);
        size_t data = b.n;
        float z[4] = {1, 2, 3, 4};
        tg_put(&b, z, 16);
        gguf_file *f;
        char err[256];
        int rc = gguf_open_mem(b.p, b.n, &f, err, sizeof err);
        if (good) {
            cr_assert_eq(rc, 0, "%s", err);
            cr_assert_eq(gguf_version(f), 2u);
            cr_assert_eq(gguf_alignment(f), 64u);
            cr_assert_eq(gguf_data_offset(f), data);
            gguf_close(f);
        } else {
            cr_assert_neq(rc, 0);
            cr_assert(strstr(err, "power of two"), "%s", err);
        }
        free(b.p);
    }
}

Test(gguf, stories260k)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    cr_assert_eq(access(path, R_OK), 0, "%s is missing (it is part of the repository)", path);
    gguf_file *f;
    char err[512];
    cr_assert_eq(gguf_open(path, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_version(f), 3u);
    cr_assert_eq(gguf_n_tensors(f), 48);
    cr_assert_eq(gguf_data_offset(f), 14240u);
    cr_assert_eq(gguf_file_size(f), 1185440u);
    gguf_str s;
    cr_assert_eq(gguf_get_str(f, "general.architecture", &s), 0);
    cr_assert(gguf_str_eq(s, "llama"));
    const gguf_arr *a;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &a), 0);
    cr_assert_eq(a->n, 512u);
    cr_assert(gguf_str_eq(a->strs[1], "<s>"));
    const gguf_tensor *t = gguf_find_tensor(f, "blk.4.ffn_down.weight");
    cr_assert(t && t->ne[0] == 172 && t->ne[1] == 64 && t->type == DT_F32);
    cr_assert_eq(t->n_bytes, 172u * 64 * 4);
    gguf_close(f);

    /* Truncated anywhere in the header/metadata/table, and a few places in the data. */
    size_t n;
    uint8_t *buf = (uint8_t *)tu_read_file(path, &n);
    for (size_t cut = 0; cut < 14240; cut++)
        cr_assert_neq(tg_open_copy(buf, cut, err, sizeof err, NULL), 0, "cut at %zu", cut);
    size_t cuts[] = {14240, 14241, 100000, 600000, n - 4, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        cr_assert_neq(tg_open_copy(buf, cuts[i], err, sizeof err, NULL), 0);
        cr_assert(strstr(err, "extends past end of file"), "%s", err);
    }
    /* The file on disk truncated: gguf_open names the file. */
    char tmp[] = "/tmp/kvserve_gguf_XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, buf, n - 100), (ssize_t)(n - 100));
    close(fd);
    cr_assert_neq(gguf_open(tmp, &f, err, sizeof err), 0);
    cr_assert(strstr(err, tmp) && strstr(err, "extends past end of file"), "%s", err);
    unlink(tmp);
    free(buf);
}

/* Row generator for the writer round trip: a different smooth pattern per tensor. */
static void tg_rows(void *ctx, int tensor, int64_t row, float *dst, int64_t n)
{
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        dst[i] = sinf((float)(tensor * 100 + row * 7 + i) * 0.37f) * (float)(tensor + 1);
}

static void tg_tmp(char *buf, size_t n, const char *tag)
{
    const char *d = getenv("TMPDIR");
    snprintf(buf, n, "%s/kvserve_gguf_%s_%d.gguf", d && *d ? d : "/tmp", tag, (int)getpid());
}

Test(gguf, writer_round_trip)
{
    gguf_writer *w = gguf_writer_create();
    cr_assert(w);
    const char *strs[] = {"alpha", "", "▁γ"};
    float fs[] = {1.5f, -2.25f};
    int32_t is[] = {7, -8, 9};
    cr_assert_eq(gguf_put_u32(w, "a.u32", 123456789u), 0);
    cr_assert_eq(gguf_put_i32(w, "a.i32", -42), 0);
    cr_assert_eq(gguf_put_u64(w, "a.u64", 1ull << 50), 0);
    cr_assert_eq(gguf_put_f32(w, "a.f32", 0.1f), 0);
    cr_assert_eq(gguf_put_bool(w, "a.bool", 1), 0);
    cr_assert_eq(gguf_put_str(w, "a.str", "text with ünïcode"), 0);
    cr_assert_eq(gguf_put_arr_str(w, "a.strs", strs, 3), 0);
    cr_assert_eq(gguf_put_arr_f32(w, "a.f32s", fs, 2), 0);
    cr_assert_eq(gguf_put_arr_i32(w, "a.i32s", is, 3), 0);
    const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0};
    const int64_t ne[3] = {64, 3, 2};
    char name[32];
    for (int t = 0; t < 4; t++) {
        snprintf(name, sizeof name, "t%d", t);
        cr_assert_eq(gguf_put_tensor(w, name, types[t], t == 3 ? 3 : 2, ne), t);
    }
    cr_assert_eq(gguf_put_tensor(w, "odd", DT_F32, 1, (int64_t[]){5}), 4);
    cr_assert_eq(gguf_put_tensor(w, "bad", DT_Q8_0, 1, (int64_t[]){33}), -EINVAL);
    cr_assert_eq(gguf_put_tensor(w, "bad", DT_Q4_0, 1, (int64_t[]){32}), -EINVAL);
    char path[512], err[512];
    tg_tmp(path, sizeof path, "rt");
    cr_assert_eq(gguf_writer_write(w, path, tg_rows, NULL, err, sizeof err), 0, "%s", err);
    gguf_writer_destroy(w);

    gguf_file *f;
    cr_assert_eq(gguf_open(path, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_n_kv(f), 10);
    cr_assert(gguf_str_eq(gguf_kv_at(f, 0)->key, "general.alignment"));
    uint32_t u;
    int64_t i64;
    float fl;
    int b;
    gguf_str s;
    const gguf_arr *a;
    cr_assert(!gguf_get_u32(f, "a.u32", &u) && u == 123456789u);
    cr_assert(!gguf_get_i64(f, "a.i32", &i64) && i64 == -42);
    cr_assert(!gguf_get_i64(f, "a.u64", &i64) && i64 == 1ll << 50);
    cr_assert(!gguf_get_f32(f, "a.f32", &fl) && fl == 0.1f);
    cr_assert(!gguf_get_bool(f, "a.bool", &b) && b == 1);
    cr_assert(!gguf_get_str(f, "a.str", &s) && gguf_str_eq(s, "text with ünïcode"));
    cr_assert(!gguf_get_arr(f, "a.strs", &a) && a->n == 3 && a->type == GGUF_T_STRING);
    for (int k = 0; k < 3; k++) cr_assert(gguf_str_eq(a->strs[k], strs[k]));
    cr_assert(!gguf_get_arr(f, "a.f32s", &a) && a->n == 2 && gguf_arr_f64(a, 1) == -2.25);
    cr_assert(!gguf_get_arr(f, "a.i32s", &a) && a->n == 3 && gguf_arr_i64(a, 1) == -8);
    cr_assert_eq(gguf_n_tensors(f), 5);
    float row[64];
    uint8_t want[256];
    for (int t = 0; t < 5; t++) {
        const gguf_tensor *gt = gguf_tensor_at(f, t);
        int type = t < 4 ? types[t] : DT_F32;
        int64_t ne0 = t < 4 ? 64 : 5, rows = t == 3 ? 6 : t < 4 ? 3 : 1;
        cr_assert_eq(gt->type, type);
        cr_assert_eq(gt->offset % 32, 0u);
        cr_assert_eq(gt->ne[0], ne0);
        size_t rb = dt_row_bytes(type, ne0);
        cr_assert_eq(gt->n_bytes, rb * (size_t)rows);
        for (int64_t r = 0; r < rows; r++) {
            tg_rows(NULL, t, r, row, ne0);
            gguf_quantize_row(type, row, want, ne0);
            cr_assert_arr_eq((const uint8_t *)gt->data + r * rb, want, rb, "tensor %d row %d", t,
                             (int)r);
        }
    }
    cr_assert_eq(gguf_tensor_at(f, 3)->ne[2], 2);
    gguf_close(f);
    unlink(path);
}

Test(gguf, mkmodel_file_round_trip)
{
    mkm_params p;
    mkm_params_default(&p);
    p.arch = "qwen2";
    p.type = DT_Q8_0;
    p.dim = 64;
    p.layers = 3;
    p.ffn = 128;
    p.vocab = 400;
    p.tokenizer = "gpt2";
    const char *extra[] = {"<|im_start|>", "<|im_end|>"};
    p.extra_tokens = extra;
    p.n_extra = 2;
    p.chat_template = "{% for message in messages %}<|im_start|>...";
    char path[512], err[512];
    tg_tmp(path, sizeof path, "mk");
    cr_assert_eq(mkm_write(path, &p, err, sizeof err), 0, "%s", err);
    size_t n;
    uint8_t *buf = (uint8_t *)tu_read_file(path, &n);
    unlink(path);
    cr_assert(buf);
    gguf_file *f;
    cr_assert_eq(gguf_open_mem(buf, n, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_n_tensors(f), 3 + 12 * 3);
    const gguf_arr *a;
    cr_assert(!gguf_get_arr(f, "tokenizer.ggml.tokens", &a) && a->n == 400);
    cr_assert(gguf_str_eq(a->strs[399], "<|im_end|>"));
    cr_assert(gguf_str_eq(a->strs[397], "<|endoftext|>"));
    uint32_t bos;
    cr_assert(!gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &bos) && bos == 397);
    gguf_str s;
    cr_assert(!gguf_get_str(f, "tokenizer.chat_template", &s));
    cr_assert(gguf_str_eq(s, p.chat_template));
    cr_assert(!gguf_get_arr(f, "tokenizer.ggml.merges", &a) && a->n > 0);
    const gguf_tensor *t = gguf_find_tensor(f, "blk.2.attn_norm.weight");
    cr_assert(t && t->type == DT_F32);
    for (int i = 0; i < 64; i++) cr_assert_eq(((const float *)t->data)[i], 1.0f);
    uint64_t data = gguf_data_offset(f);
    gguf_close(f);
    /* The same bytes again give the same file (deterministic writer). */
    cr_assert_eq(mkm_write(path, &p, err, sizeof err), 0, "%s", err);
    size_t n2;
    uint8_t *buf2 = (uint8_t *)tu_read_file(path, &n2);
    unlink(path);
    cr_assert(n2 == n && !memcmp(buf, buf2, n), "mkmodel output is not deterministic");
    free(buf2);
    /* Truncated anywhere in the header region, or in the data: refused. */
    for (size_t cut = 0; cut < data; cut += 1 + (cut > 4096) * 10)
        cr_assert_neq(tg_open_copy(buf, cut, err, sizeof err, NULL), 0, "cut at %zu", cut);
    for (size_t cut = data; cut < n; cut += (n - data) / 7 + 1)
        cr_assert_neq(tg_open_copy(buf, cut, err, sizeof err, NULL), 0, "cut at %zu", cut);
    free(buf);
}
