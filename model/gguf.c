/*
 * gguf.c — GGUF (v2, v3) reader over an mmap'd file or a caller's buffer.
 *
 * The file is untrusted. The parser walks it once with a bounds-checked cursor; every count is
 * compared with the bytes that remain before anything is allocated for it, so a hostile count
 * cannot make us allocate more than a small multiple of the file size. Every tensor's shape,
 * type, alignment and data range are checked at open, so code that holds a gguf_file may read
 * any tensor's n_bytes at data without further checks.
 *
 * Invariants of an open gguf_file: keys are unique, tensor names are unique, every tensor has
 * a type kvserve can size (dt_row_bytes), 1..4 dims with ne >= 0 and no overflow, an aligned
 * offset, and data + n_bytes inside the mapping. Strings are views into the mapping.
 *
 * Callers: model/model.c (weights and hyperparameters), model/tokenizer.c (vocabulary),
 * cli/cmd_info.c, the tests and the fuzz target.
 */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/dtype.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NEST 8 /* nested array depth we accept */

/* One allocation owned by the file (arrays of strings / nested arrays). */
typedef struct gguf__chunk {
    struct gguf__chunk *next;
    max_align_t data[];
} gguf__chunk;

struct gguf_file {
    const uint8_t *base; /* the bytes of the file */
    size_t size;         /* bytes in base */
    int mapped;          /* 1: base is our mmap and gguf_close unmaps it */
    int detached;        /* gguf_detach ran: the mapping is anonymous memory now */
    gguf_file_id id;     /* the file's identity at open */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    gguf_kv *kvs;         /* [n_kv] */
    int64_t n_tensors;
    gguf_tensor *tensors; /* [n_tensors] */
    uint32_t *kv_index;   /* open-addressing hash of key → index + 1; [kv_cap] */
    uint64_t kv_cap;      /* power of two */
    uint32_t *t_index;    /* same for tensor names; [t_cap] */
    uint64_t t_cap;
    gguf__chunk *chunks;  /* allocations to free */
};

/* Parsing cursor: reads never go past size; the first error wins. */
typedef struct gguf__rd {
    gguf_file *f;
    size_t off;
    const char *name; /* file name for messages */
    char ctx[300];    /* "key 'x'" or "tensor 'y'" while reading one, else "" */
    char *err;
    size_t err_len;
    int failed;
} gguf__rd;

static void rd_fail(gguf__rd *r, const char *fmt, ...)
{
    if (r->failed) return;
    r->failed = 1;
    if (!r->err || !r->err_len) return;
    int n = snprintf(r->err, r->err_len, "%s: %s%s", r->name, r->ctx, r->ctx[0] ? ": " : "");
    if (n < 0 || (size_t)n >= r->err_len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->err_len - (size_t)n, fmt, ap);
    va_end(ap);
}

static size_t rd_left(const gguf__rd *r)
{
    return r->f->size - r->off;
}

/* Copies n bytes at the cursor into dst and advances; what names the field for the message. */
static int rd_bytes(gguf__rd *r, void *dst, size_t n, const char *what)
{
    if (r->failed) return -1;
    if (rd_left(r) < n) {
        rd_fail(r, "truncated: %s at offset %zu needs %zu bytes, file size is %zu", what, r->off,
                n, r->f->size);
        return -1;
    }
    memcpy(dst, r->f->base + r->off, n);
    r->off += n;
    return 0;
}

static uint32_t rd_u32(gguf__rd *r, const char *what)
{
    uint32_t v = 0;
    rd_bytes(r, &v, 4, what);
    return v;
}

static uint64_t rd_u64(gguf__rd *r, const char *what)
{
    uint64_t v = 0;
    rd_bytes(r, &v, 8, what);
    return v;
}

static gguf_str rd_str(gguf__rd *r, const char *what)
{
    gguf_str s = {"", 0};
    size_t at = r->off;
    uint64_t len = rd_u64(r, what);
    if (r->failed) return s;
    if (len > rd_left(r)) {
        rd_fail(r, "truncated: %s at offset %zu has length %" PRIu64 ", only %zu bytes remain",
                what, at, len, rd_left(r));
        return s;
    }
    s.ptr = (const char *)r->f->base + r->off;
    s.len = len;
    r->off += len;
    return s;
}

/* Copies a name from the file for a message: control bytes become '?' so the message stays
 * one printable line. */
static char *msg_name(gguf_str s, char *buf, size_t buf_len)
{
    gguf_str_copy(s, buf, buf_len);
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return buf;
}

static void *file_alloc(gguf_file *f, size_t bytes)
{
    gguf__chunk *c = malloc(sizeof *c + (bytes ? bytes : 1));
    if (!c) return NULL;
    c->next = f->chunks;
    f->chunks = c;
    return c->data;
}

/* Bytes of one element of a fixed-size value type, 0 for string/array/unknown. */
static size_t vtype_size(int t)
{
    switch (t) {
    case GGUF_T_U8: case GGUF_T_I8: case GGUF_T_BOOL: return 1;
    case GGUF_T_U16: case GGUF_T_I16: return 2;
    case GGUF_T_U32: case GGUF_T_I32: case GGUF_T_F32: return 4;
    case GGUF_T_U64: case GGUF_T_I64: case GGUF_T_F64: return 8;
    default: return 0;
    }
}

/* Reads element i of fixed-size data p of type t, widened. */
static void scalar_at(int t, const uint8_t *p, uint64_t *u, int64_t *s, double *d)
{
    uint64_t uv = 0;
    int64_t sv = 0;
    double dv = 0;
    switch (t) {
    case GGUF_T_U8: case GGUF_T_BOOL: uv = p[0]; break;
    case GGUF_T_I8: sv = (int8_t)p[0]; break;
    case GGUF_T_U16: { uint16_t x; memcpy(&x, p, 2); uv = x; break; }
    case GGUF_T_I16: { int16_t x; memcpy(&x, p, 2); sv = x; break; }
    case GGUF_T_U32: { uint32_t x; memcpy(&x, p, 4); uv = x; break; }
    case GGUF_T_I32: { int32_t x; memcpy(&x, p, 4); sv = x; break; }
    case GGUF_T_U64: memcpy(&uv, p, 8); break;
    case GGUF_T_I64: memcpy(&sv, p, 8); break;
    case GGUF_T_F32: { float x; memcpy(&x, p, 4); dv = x; break; }
    case GGUF_T_F64: memcpy(&dv, p, 8); break;
    default: break;
    }
    if (u) *u = uv;
    if (s) *s = sv;
    if (d) *d = dv;
}

static int is_unsigned(int t)
{
    return t == GGUF_T_U8 || t == GGUF_T_U16 || t == GGUF_T_U32 || t == GGUF_T_U64;
}

static int is_signed(int t)
{
    return t == GGUF_T_I8 || t == GGUF_T_I16 || t == GGUF_T_I32 || t == GGUF_T_I64;
}

/* Reads the body of an array (after its own "array" type tag). */
static int read_arr(gguf__rd *r, gguf_arr *a, int depth)
{
    size_t at = r->off;
    memset(a, 0, sizeof *a);
    a->type = (int)rd_u32(r, "array element type");
    a->n = rd_u64(r, "array length");
    if (r->failed) return -1;
    if (depth >= GGUF_MAX_NEST) {
        rd_fail(r, "arrays nested deeper than %d at offset %zu", GGUF_MAX_NEST, at);
        return -1;
    }
    size_t esz = vtype_size(a->type);
    size_t min_elem = esz ? esz : a->type == GGUF_T_STRING ? 8 : a->type == GGUF_T_ARRAY ? 12 : 0;
    if (!min_elem) {
        rd_fail(r, "unknown array element type %d at offset %zu", a->type, at);
        return -1;
    }
    if (a->n > rd_left(r) / min_elem) {
        rd_fail(r, "array of %" PRIu64 " %s at offset %zu exceeds the %zu bytes left", a->n,
                gguf_type_name(a->type), at, rd_left(r));
        return -1;
    }
    if (esz) {
        a->data = r->f->base + r->off;
        r->off += (size_t)a->n * esz;
        return 0;
    }
    if (a->type == GGUF_T_STRING) {
        gguf_str *s = file_alloc(r->f, (size_t)a->n * sizeof *s);
        if (!s) {
            rd_fail(r, "out of memory");
            return -ENOMEM;
        }
        for (uint64_t i = 0; i < a->n && !r->failed; i++) s[i] = rd_str(r, "array string");
        a->strs = s;
        return r->failed ? -1 : 0;
    }
    gguf_arr *sub = file_alloc(r->f, (size_t)a->n * sizeof *sub);
    if (!sub) {
        rd_fail(r, "out of memory");
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < a->n && !r->failed; i++) read_arr(r, &sub[i], depth + 1);
    a->arrs = sub;
    return r->failed ? -1 : 0;
}

/* Reads one value of type kv->type at the cursor into kv. */
static int read_value(gguf__rd *r, gguf_kv *kv)
{
    size_t at = r->off;
    size_t esz = vtype_size(kv->type);
    if (esz) {
        uint8_t buf[8];
        if (rd_bytes(r, buf, esz, "value")) return -1;
        if (is_signed(kv->type))
            scalar_at(kv->type, buf, NULL, &kv->v.i64, NULL);
        else if (kv->type == GGUF_T_F32 || kv->type == GGUF_T_F64)
            scalar_at(kv->type, buf, NULL, NULL, &kv->v.f64);
        else
            scalar_at(kv->type, buf, &kv->v.u64, NULL, NULL);
        return 0;
    }
    if (kv->type == GGUF_T_STRING) {
        kv->v.str = rd_str(r, "string value");
        return r->failed ? -1 : 0;
    }
    if (kv->type == GGUF_T_ARRAY) return read_arr(r, &kv->v.arr, 0);
    rd_fail(r, "unknown value type %d at offset %zu", kv->type, at - 4);
    return -1;
}

static uint64_t hash_bytes(const char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* Builds an index of n names (got through name_at) into a fresh table; on a duplicate returns
 * the index of the second occurrence, or -1 when none, or -2 when out of memory. */
static int64_t build_index(gguf_file *f, int64_t n, gguf_str (*name_at)(gguf_file *, int64_t),
                           uint32_t **table, uint64_t *cap)
{
    uint64_t c = 16;
    while (c < (uint64_t)n * 2) c <<= 1;
    uint32_t *t = calloc(c, sizeof *t);
    if (!t) return -2;
    *table = t;
    *cap = c;
    for (int64_t i = 0; i < n; i++) {
        gguf_str s = name_at(f, i);
        uint64_t h = hash_bytes(s.ptr, s.len) & (c - 1);
        for (; t[h]; h = (h + 1) & (c - 1)) {
            gguf_str o = name_at(f, t[h] - 1);
            if (o.len == s.len && !memcmp(o.ptr, s.ptr, s.len)) return i;
        }
        t[h] = (uint32_t)(i + 1);
    }
    return -1;
}

static gguf_str kv_name(gguf_file *f, int64_t i)
{
    return f->kvs[i].key;
}

static gguf_str tensor_name(gguf_file *f, int64_t i)
{
    return f->tensors[i].name;
}

static int lookup(const uint32_t *t, uint64_t cap, const gguf_file *f, const char *c,
                  gguf_str (*name_at)(gguf_file *, int64_t))
{
    if (!t) return -1;
    size_t n = strlen(c);
    for (uint64_t h = hash_bytes(c, n) & (cap - 1); t[h]; h = (h + 1) & (cap - 1)) {
        gguf_str o = name_at((gguf_file *)f, t[h] - 1);
        if (o.len == n && !memcmp(o.ptr, c, n)) return (int)(t[h] - 1);
    }
    return -1;
}

/* Header and metadata. */
static int parse_kvs(gguf__rd *r)
{
    gguf_file *f = r->f;
    char key[256];
    size_t at = r->off;
    uint64_t n_kv = rd_u64(r, "metadata count");
    if (r->failed) return -1;
    /* Smallest key/value: 8 (key length) + 1 (key) + 4 (type) + 1 (u8 value). */
    if (n_kv > rd_left(r) / 14 || n_kv > (1u << 30)) {
        rd_fail(r, "metadata count %" PRIu64 " at offset %zu is impossible for the %zu bytes left",
                n_kv, at, rd_left(r));
        return -1;
    }
    f->kvs = calloc(n_kv ? n_kv : 1, sizeof *f->kvs);
    if (!f->kvs) {
        rd_fail(r, "out of memory for %" PRIu64 " metadata entries", n_kv);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        size_t kat = r->off;
        kv->key = rd_str(r, "metadata key");
        if (r->failed) return -1;
        msg_name(kv->key, key, sizeof key);
        snprintf(r->ctx, sizeof r->ctx, "key '%s'", key);
        if (kv->key.len == 0) {
            rd_fail(r, "empty metadata key at offset %zu", kat);
            return -1;
        }
        kv->type = (int)rd_u32(r, "value type");
        if (r->failed || read_value(r, kv)) return -1;
        f->n_kv = (int64_t)i + 1;
        r->ctx[0] = 0;
    }
    int64_t dup = build_index(f, f->n_kv, kv_name, &f->kv_index, &f->kv_cap);
    if (dup == -2) {
        rd_fail(r, "out of memory");
        return -ENOMEM;
    }
    if (dup >= 0) {
        rd_fail(r, "duplicate metadata key '%s'", msg_name(f->kvs[dup].key, key, sizeof key));
        return -1;
    }
    return 0;
}

/* general.alignment: an integer power of two (default 32). */
static int parse_alignment(gguf__rd *r)
{
    gguf_file *f = r->f;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return 0;
    uint64_t a;
    if (is_unsigned(kv->type)) {
        a = kv->v.u64;
    } else if (is_signed(kv->type) && kv->v.i64 > 0) {
        a = (uint64_t)kv->v.i64;
    } else {
        rd_fail(r, "general.alignment has type %s, expected an integer", gguf_type_name(kv->type));
        return -1;
    }
    if (a == 0 || (a & (a - 1)) || a > (1u << 30)) {
        rd_fail(r, "general.alignment %" PRIu64 " is not a power of two up to 2^30", a);
        return -1;
    }
    f->alignment = a;
    return 0;
}

/* Reads one tensor-table entry: name, shape and type (offset is checked later). */
static int parse_tensor_info(gguf__rd *r, gguf_tensor *t)
{
    char name[256];
    size_t at = r->off;
    t->name = rd_str(r, "tensor name");
    if (r->failed) return -1;
    msg_name(t->name, name, sizeof name);
    snprintf(r->ctx, sizeof r->ctx, "tensor '%s'", name);
    size_t dat = r->off;
    t->n_dims = rd_u32(r, "tensor dimension count");
    if (r->failed) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
        rd_fail(r, "entry at offset %zu has %" PRIu32 " dimensions (offset %zu), expected 1..%d",
                at, t->n_dims, dat, GGUF_MAX_DIMS);
        return -1;
    }
    int64_t n_elem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne = rd_u64(r, "tensor dimension");
        if (r->failed) return -1;
        if (ne > (uint64_t)INT64_MAX || (ne && (uint64_t)n_elem > (uint64_t)INT64_MAX / ne)) {
            rd_fail(r, "element count overflows (dimension %u = %" PRIu64 ")", d, ne);
            return -1;
        }
        t->ne[d] = (int64_t)ne;
        n_elem *= (int64_t)ne;
    }
    size_t tat = r->off;
    t->type = (int)rd_u32(r, "tensor type");
    t->offset = rd_u64(r, "tensor offset");
    if (r->failed) return -1;
    int be = dt_block_elems(t->type);
    if (be == 0) {
        rd_fail(r, "unknown tensor type %d (at offset %zu): cannot size its data", t->type, tat);
        return -1;
    }
    if (t->ne[0] % be) {
        rd_fail(r, "type %s with ne[0] = %" PRId64 ", not a multiple of its block size %d",
                dt_name(t->type), t->ne[0], be);
        return -1;
    }
    size_t row = dt_row_bytes(t->type, t->ne[0]);
    uint64_t rows = t->ne[0] ? (uint64_t)(n_elem / t->ne[0]) : 0;
    if (row && rows > UINT64_MAX / row) {
        rd_fail(r, "byte size overflows");
        return -1;
    }
    t->n_bytes = (uint64_t)row * rows;
    return 0;
}

static int parse_tensors(gguf__rd *r, uint64_t n_tensors)
{
    gguf_file *f = r->f;
    char name[256];
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors) {
        rd_fail(r, "out of memory for %" PRIu64 " tensors", n_tensors);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (parse_tensor_info(r, &f->tensors[i])) return -1;
        f->n_tensors = (int64_t)i + 1;
        r->ctx[0] = 0;
    }
    int64_t dup = build_index(f, f->n_tensors, tensor_name, &f->t_index, &f->t_cap);
    if (dup == -2) {
        rd_fail(r, "out of memory");
        return -ENOMEM;
    }
    if (dup >= 0) {
        rd_fail(r, "duplicate tensor name '%s'",
                msg_name(f->tensors[dup].name, name, sizeof name));
        return -1;
    }
    /* The data section starts at the first aligned offset after the tensor table. */
    uint64_t a = f->alignment;
    f->data_offset = ((uint64_t)r->off + a - 1) & ~(a - 1);
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        msg_name(t->name, name, sizeof name);
        if (t->offset % a) {
            rd_fail(r, "tensor '%s' data offset %" PRIu64 " is not a multiple of the alignment %"
                    PRIu64, name, t->offset, a);
            return -1;
        }
        uint64_t size = f->size;
        if (f->data_offset > size || t->offset > size - f->data_offset ||
            t->n_bytes > size - f->data_offset - t->offset) {
            rd_fail(r, "tensor '%s' data [offset %" PRIu64 " + %" PRIu64 " bytes] extends past "
                    "end of file (size %" PRIu64 ")", name, f->data_offset + t->offset,
                    t->n_bytes, size);
            return -1;
        }
        t->data = f->base + f->data_offset + t->offset;
    }
    return 0;
}

static int parse(gguf_file *f, const char *name, char *err, size_t err_len)
{
    gguf__rd r = {.f = f, .name = name, .err = err, .err_len = err_len};
    char magic[4];
    if (rd_bytes(&r, magic, 4, "magic")) return -EINVAL;
    if (memcmp(magic, "GGUF", 4)) {
        rd_fail(&r, "not a GGUF file (magic at offset 0 is not \"GGUF\")");
        return -EINVAL;
    }
    f->version = rd_u32(&r, "version");
    if (r.failed) return -EINVAL;
    if (f->version == 1) {
        rd_fail(&r, "GGUF version 1 is not supported (only versions 2 and 3)");
        return -EINVAL;
    }
    if (f->version != 2 && f->version != 3) {
        rd_fail(&r, "unsupported GGUF version %" PRIu32 " at offset 4%s (expected 2 or 3)",
                f->version, (f->version & 0xffff) == 0 ? ", a big-endian file?" : "");
        return -EINVAL;
    }
    size_t at = r.off;
    uint64_t n_tensors = rd_u64(&r, "tensor count");
    if (r.failed) return -EINVAL;
    /* Smallest tensor entry: 8 + 1 (name) + 4 (n_dims) + 8 (ne) + 4 (type) + 8 (offset). */
    if (n_tensors > rd_left(&r) / 33 || n_tensors > (1u << 30)) {
        rd_fail(&r, "tensor count %" PRIu64 " at offset %zu is impossible for the %zu bytes left",
                n_tensors, at, rd_left(&r));
        return -EINVAL;
    }
    int rc = parse_kvs(&r);
    if (!rc) rc = parse_alignment(&r);
    if (!rc) rc = parse_tensors(&r, n_tensors);
    if (rc) return rc == -ENOMEM ? -ENOMEM : -EINVAL;
    return 0;
}

static void free_parts(gguf_file *f)
{
    while (f->chunks) {
        gguf__chunk *c = f->chunks;
        f->chunks = c->next;
        free(c);
    }
    free(f->kvs);
    free(f->tensors);
    free(f->kv_index);
    free(f->t_index);
}

static int open_buf(const void *data, size_t size, int mapped, const char *name, gguf_file **out,
                    char *err, size_t err_len)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (err && err_len) snprintf(err, err_len, "%s: out of memory", name);
        return -ENOMEM;
    }
    f->base = data;
    f->size = size;
    int rc = parse(f, name, err, err_len);
    if (rc) {
        free_parts(f);
        free(f);
        return rc;
    }
    f->mapped = mapped;
    *out = f;
    return 0;
}

int gguf_open_mem(const void *data, size_t size, gguf_file **out, char *err, size_t err_len)
{
    *out = NULL;
    return open_buf(data, size, 0, "<memory>", out, err, err_len);
}

/* What a path is, in words, for the refusal of anything but a file or a block device. */
static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) ? "a character device" : "not a regular file";
}

int gguf_open(const char *path, gguf_file **out, char *err, size_t err_len)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (err && err_len) snprintf(err, err_len, "%s: cannot open: %s", path, strerror(e));
        return e == ENOENT ? -ENOENT : -EIO;
    }
    struct stat st = {0};
    uint64_t dev_size = 0;
    int ok = !fstat(fd, &st) && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
    if (ok && S_ISBLK(st.st_mode) && ioctl(fd, BLKGETSIZE64, &dev_size)) ok = 0;
    if (!ok) {
        if (err && err_len)
            snprintf(err, err_len, "%s: %s (a model must be a regular file or a block device)", path,
                     file_kind(st.st_mode));
        close(fd);
        return -EINVAL;
    }
    size_t size = S_ISBLK(st.st_mode) ? (size_t)dev_size : (size_t)st.st_size;
    if (size < 4) {
        if (err && err_len)
            snprintf(err, err_len, "%s: not a GGUF file (%zu bytes, too short for the header)",
                     path, size);
        close(fd);
        return -EINVAL;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        if (err && err_len) snprintf(err, err_len, "%s: mmap failed: %s", path, strerror(errno));
        return -EIO;
    }
    int rc = open_buf(map, size, 1, path, out, err, err_len);
    if (rc) munmap(map, size);
    else (*out)->id = (gguf_file_id){size, (uint64_t)st.st_ino, (uint64_t)st.st_dev,
                                     (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
    return rc;
}

const gguf_file_id *gguf_identity(const gguf_file *f)
{
    return &f->id;
}

int gguf_detach(gguf_file *f)
{
    if (!f->mapped || f->detached) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t all = (f->size + page - 1) / page * page;
    size_t head = (f->data_offset + page - 1) / page * page;
    if (head > all) head = all;
    void *copy = malloc(head ? head : 1);
    if (!copy) return -ENOMEM;
    uint8_t *base = (uint8_t *)f->base;
    memcpy(copy, base, head);
    /* Same addresses, other memory: anonymous and private, so no page comes from the file. */
    if (head && mmap(base, head, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
        free(copy);
        return -ENOMEM; /* (MAP_FIXED failed: the old mapping is still in place) */
    }
    memcpy(base, copy, head);
    free(copy);
    mprotect(base, head, PROT_READ);
    if (all > head)
        mmap(base + head, all - head, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    f->detached = 1;
    return 0;
}

void gguf_close(gguf_file *f)
{
    if (!f) return;
    if (f->mapped) munmap((void *)f->base, f->size);
    free_parts(f);
    free(f);
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
uint64_t gguf_file_size(const gguf_file *f) { return f->size; }
const void *gguf_bytes(const gguf_file *f) { return f->base; }
int64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
int64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }

const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i)
{
    return i >= 0 && i < f->n_kv ? &f->kvs[i] : NULL;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i)
{
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
    int i = lookup(f->kv_index, f->kv_cap, f, key, kv_name);
    return i >= 0 ? &f->kvs[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    int i = lookup(f->t_index, f->t_cap, f, name, tensor_name);
    return i >= 0 ? &f->tensors[i] : NULL;
}

/* The integer value of kv as signed/unsigned, with flags saying what range it fits. */
static int kv_int(const gguf_kv *kv, int64_t *s, uint64_t *u, int *fits_s, int *fits_u)
{
    if (is_unsigned(kv->type)) {
        *u = kv->v.u64;
        *fits_u = 1;
        *fits_s = kv->v.u64 <= (uint64_t)INT64_MAX;
        *s = *fits_s ? (int64_t)kv->v.u64 : 0;
        return 0;
    }
    if (is_signed(kv->type)) {
        *s = kv->v.i64;
        *fits_s = 1;
        *fits_u = kv->v.i64 >= 0;
        *u = *fits_u ? (uint64_t)kv->v.i64 : 0;
        return 0;
    }
    return -EINVAL;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -ENOENT;
    int64_t s;
    uint64_t u;
    int fs, fu;
    if (kv_int(kv, &s, &u, &fs, &fu) || !fu || u > UINT32_MAX) return -EINVAL;
    *out = (uint32_t)u;
    return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -ENOENT;
    int64_t s;
    uint64_t u;
    int fs, fu;
    if (kv_int(kv, &s, &u, &fs, &fu) || !fs) return -EINVAL;
    *out = s;
    return 0;
}

/* double → float without the undefined behaviour of an out-of-range conversion. */
static float to_f32(double d)
{
    if (d > FLT_MAX) return INFINITY;
    if (d < -FLT_MAX) return -INFINITY;
    return (float)d;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -ENOENT;
    if (kv->type == GGUF_T_F32 || kv->type == GGUF_T_F64)
        *out = to_f32(kv->v.f64);
    else if (is_unsigned(kv->type))
        *out = (float)kv->v.u64;
    else if (is_signed(kv->type))
        *out = (float)kv->v.i64;
    else
        return -EINVAL;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -ENOENT;
    if (kv->type == GGUF_T_BOOL || is_unsigned(kv->type))
        *out = kv->v.u64 != 0;
    else if (is_signed(kv->type))
        *out = kv->v.i64 != 0;
    else
        return -EINVAL;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -ENOENT;
    if (kv->type != GGUF_T_STRING) return -EINVAL;
    *out = kv->v.str;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, const gguf_arr **out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -ENOENT;
    if (kv->type != GGUF_T_ARRAY) return -EINVAL;
    *out = &kv->v.arr;
    return 0;
}

int gguf_str_eq(gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && !memcmp(s.ptr, c, n);
}

char *gguf_str_copy(gguf_str s, char *buf, size_t buf_len)
{
    if (!buf_len) return buf;
    size_t n = s.len < buf_len - 1 ? (size_t)s.len : buf_len - 1;
    if (n) memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return buf;
}

/* Reads element i of a fixed-size numeric array into whichever of *u, *s, *d its type fills.
 * Returns 'u' (unsigned or bool), 's' (signed), 'f' (float), or 0 when i or the type is invalid. */
static int arr_scalar(const gguf_arr *a, uint64_t i, uint64_t *u, int64_t *s, double *d)
{
    size_t esz = vtype_size(a->type);
    if (!esz || !a->data || i >= a->n) return 0;
    scalar_at(a->type, (const uint8_t *)a->data + i * esz, u, s, d);
    if (is_unsigned(a->type) || a->type == GGUF_T_BOOL) return 'u';
    return is_signed(a->type) ? 's' : 'f';
}

double gguf_arr_f64(const gguf_arr *a, uint64_t i)
{
    uint64_t u = 0;
    int64_t s = 0;
    double d = 0;
    switch (arr_scalar(a, i, &u, &s, &d)) {
    case 'u': return (double)u;
    case 's': return (double)s;
    case 'f': return d;
    default: return 0;
    }
}

int64_t gguf_arr_i64(const gguf_arr *a, uint64_t i)
{
    uint64_t u = 0;
    int64_t s = 0;
    double d = 0;
    switch (arr_scalar(a, i, &u, &s, &d)) {
    case 'u': return (int64_t)u;
    case 's': return s;
    case 'f': return d > -9.2e18 && d < 9.2e18 ? (int64_t)d : 0; /* NaN or out of range → 0 */
    default: return 0;
    }
}

const char *gguf_type_name(int type)
{
    switch (type) {
    case GGUF_T_U8: return "u8";
    case GGUF_T_I8: return "i8";
    case GGUF_T_U16: return "u16";
    case GGUF_T_I16: return "i16";
    case GGUF_T_U32: return "u32";
    case GGUF_T_I32: return "i32";
    case GGUF_T_F32: return "f32";
    case GGUF_T_BOOL: return "bool";
    case GGUF_T_STRING: return "string";
    case GGUF_T_ARRAY: return "array";
    case GGUF_T_U64: return "u64";
    case GGUF_T_I64: return "i64";
    case GGUF_T_F64: return "f64";
    default: return "unknown";
    }
}
