/*
 * gguf_write.c — the streaming GGUF writer (gguf_write.h).
 *
 * Metadata is serialised into a byte buffer as it is added; tensors are described by name, type
 * and shape, and their offsets follow from the shapes (each tensor starts at a multiple of the
 * alignment), so the header can be written before any data exists. Data rows come from a
 * callback and are converted to the tensor's type on the way out. Callers: model/mkmodel.c,
 * model/mkmodel_vocab.c, tests.
 */
#include "model/gguf_write.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "model/gguf.h"

#define GGUF_WRITE_ALIGN 32

typedef struct gguf__wtensor {
    char *name;
    int type;
    int n_dims;
    int64_t ne[4];
    uint64_t offset;  /* from the start of the data section */
    uint64_t n_bytes;
} gguf__wtensor;

struct gguf_writer {
    uint8_t *kv;          /* serialised metadata */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    gguf__wtensor *t;       /* [n_t] */
    int n_t, cap_t;
    uint64_t data_bytes;  /* size of the data section so far (aligned) */
    int failed;           /* sticky -ENOMEM */
};

static int append(gguf_writer *w, const void *p, size_t n)
{
    if (w->failed) return -ENOMEM;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = (w->kv_len + n) * 2 + 256;
        uint8_t *q = realloc(w->kv, cap);
        if (!q) {
            w->failed = 1;
            return -ENOMEM;
        }
        w->kv = q;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

static int append_u32(gguf_writer *w, uint32_t v) { return append(w, &v, 4); }
static int append_u64(gguf_writer *w, uint64_t v) { return append(w, &v, 8); }
static int append_str(gguf_writer *w, const char *s)
{
    size_t n = strlen(s);
    append_u64(w, n);
    return append(w, s, n);
}

static int append_key(gguf_writer *w, const char *key, uint32_t type)
{
    w->n_kv++;
    append_str(w, key);
    return append_u32(w, type);
}

gguf_writer *gguf_writer_create(void)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    if (gguf_put_u32(w, "general.alignment", GGUF_WRITE_ALIGN)) {
        gguf_writer_destroy(w);
        return NULL;
    }
    return w;
}

void gguf_writer_destroy(gguf_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

int gguf_put_u32(gguf_writer *w, const char *key, uint32_t v)
{
    append_key(w, key, GGUF_T_U32);
    return append_u32(w, v);
}

int gguf_put_i32(gguf_writer *w, const char *key, int32_t v)
{
    append_key(w, key, GGUF_T_I32);
    return append(w, &v, 4);
}

int gguf_put_u64(gguf_writer *w, const char *key, uint64_t v)
{
    append_key(w, key, GGUF_T_U64);
    return append_u64(w, v);
}

int gguf_put_f32(gguf_writer *w, const char *key, float v)
{
    append_key(w, key, GGUF_T_F32);
    return append(w, &v, 4);
}

int gguf_put_bool(gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    append_key(w, key, GGUF_T_BOOL);
    return append(w, &b, 1);
}

int gguf_put_str(gguf_writer *w, const char *key, const char *v)
{
    append_key(w, key, GGUF_T_STRING);
    return append_str(w, v);
}

int gguf_put_arr_str(gguf_writer *w, const char *key, const char *const *v, int64_t n)
{
    append_key(w, key, GGUF_T_ARRAY);
    append_u32(w, GGUF_T_STRING);
    append_u64(w, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) append_str(w, v[i]);
    return w->failed ? -ENOMEM : 0;
}

int gguf_put_arr_f32(gguf_writer *w, const char *key, const float *v, int64_t n)
{
    append_key(w, key, GGUF_T_ARRAY);
    append_u32(w, GGUF_T_F32);
    append_u64(w, (uint64_t)n);
    return append(w, v, (size_t)n * 4);
}

int gguf_put_arr_i32(gguf_writer *w, const char *key, const int32_t *v, int64_t n)
{
    append_key(w, key, GGUF_T_ARRAY);
    append_u32(w, GGUF_T_I32);
    append_u64(w, (uint64_t)n);
    return append(w, v, (size_t)n * 4);
}

int gguf_is_writable(int type)
{
    return type == DT_F32 || type == DT_F16 || type == DT_BF16 || type == DT_Q8_0;
}

int gguf_put_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne)
{
    if (!gguf_is_writable(type) || n_dims < 1 || n_dims > 4) return -EINVAL;
    int64_t rows = 1;
    for (int d = 1; d < n_dims; d++) {
        if (ne[d] < 1) return -EINVAL;
        rows *= ne[d];
    }
    size_t row = dt_row_bytes(type, ne[0]);
    if (ne[0] < 1 || !row) return -EINVAL;
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? 2 * w->cap_t : 64;
        gguf__wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) {
            w->failed = 1;
            return -ENOMEM;
        }
        w->t = t;
        w->cap_t = cap;
    }
    gguf__wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) {
        w->failed = 1;
        return -ENOMEM;
    }
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->offset = w->data_bytes;
    t->n_bytes = (uint64_t)row * (uint64_t)rows;
    w->data_bytes += (t->n_bytes + GGUF_WRITE_ALIGN - 1) / GGUF_WRITE_ALIGN * GGUF_WRITE_ALIGN;
    return w->n_t++;
}

void gguf_quantize_row(int type, const float *src, void *dst, int64_t n)
{
    switch (type) {
    case DT_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case DT_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = dt_f32_to_f16(src[i]);
        break;
    }
    case DT_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = dt_f32_to_bf16(src[i]);
        break;
    }
    case DT_Q8_0: {
        dt_block_q8_0 *b = dst;
        for (int64_t k = 0; k < n / DT_QK8_0; k++) {
            const float *x = src + k * DT_QK8_0;
            float amax = 0;
            for (int j = 0; j < DT_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
            float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            b[k].d = dt_f32_to_f16(d);
            for (int j = 0; j < DT_QK8_0; j++) b[k].q[j] = (int8_t)roundf(x[j] * id);
        }
        break;
    }
    default:
        break;
    }
}

static int write_pad(FILE *fp, uint64_t n)
{
    static const uint8_t zero[GGUF_WRITE_ALIGN];
    return n && fwrite(zero, 1, (size_t)n, fp) != n ? -1 : 0;
}

/* Header, metadata, tensor table and padding. */
static int write_header(const gguf_writer *w, FILE *fp, uint64_t *pos)
{
    uint32_t version = 3;
    uint64_t n_t = (uint64_t)w->n_t;
    int bad = fwrite("GGUF", 1, 4, fp) != 4 || fwrite(&version, 4, 1, fp) != 1 ||
              fwrite(&n_t, 8, 1, fp) != 1 || fwrite(&w->n_kv, 8, 1, fp) != 1 ||
              fwrite(w->kv, 1, w->kv_len, fp) != w->kv_len;
    uint64_t p = 24 + w->kv_len;
    for (int i = 0; i < w->n_t && !bad; i++) {
        const gguf__wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims, type = (uint32_t)t->type;
        bad |= fwrite(&len, 8, 1, fp) != 1 || fwrite(t->name, 1, len, fp) != len ||
               fwrite(&nd, 4, 1, fp) != 1 || fwrite(t->ne, 8, nd, fp) != nd ||
               fwrite(&type, 4, 1, fp) != 1 || fwrite(&t->offset, 8, 1, fp) != 1;
        p += 8 + len + 4 + 8 * nd + 4 + 8;
    }
    uint64_t pad = (GGUF_WRITE_ALIGN - p % GGUF_WRITE_ALIGN) % GGUF_WRITE_ALIGN;
    bad |= write_pad(fp, pad);
    *pos = p + pad;
    return bad ? -1 : 0;
}

static int write_data(const gguf_writer *w, FILE *fp, gguf_row_fn fn, void *ctx)
{
    int64_t max_ne0 = 1;
    for (int i = 0; i < w->n_t; i++) max_ne0 = w->t[i].ne[0] > max_ne0 ? w->t[i].ne[0] : max_ne0;
    float *row = malloc((size_t)max_ne0 * sizeof *row);
    void *bytes = malloc(dt_row_bytes(DT_F32, max_ne0));
    int rc = row && bytes ? 0 : -ENOMEM;
    for (int i = 0; i < w->n_t && !rc; i++) {
        const gguf__wtensor *t = &w->t[i];
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        size_t rb = dt_row_bytes(t->type, t->ne[0]);
        for (int64_t r = 0; r < rows && !rc; r++) {
            fn(ctx, i, r, row, t->ne[0]);
            gguf_quantize_row(t->type, row, bytes, t->ne[0]);
            if (fwrite(bytes, 1, rb, fp) != rb) rc = -EIO;
        }
        if (!rc && write_pad(fp, (GGUF_WRITE_ALIGN - t->n_bytes % GGUF_WRITE_ALIGN) % GGUF_WRITE_ALIGN)) rc = -EIO;
    }
    free(row);
    free(bytes);
    return rc;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_row_fn fn, void *ctx, char *err,
                     size_t err_len)
{
    if (w->failed) {
        snprintf(err, err_len, "%s: out of memory while building the metadata", path);
        return -ENOMEM;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        snprintf(err, err_len, "%s: cannot create: %s", tmp, strerror(errno));
        return -EIO;
    }
    char *iobuf = malloc((size_t)1 << 22);
    if (iobuf) setvbuf(fp, iobuf, _IOFBF, (size_t)1 << 22);
    uint64_t pos;
    int rc = write_header(w, fp, &pos) ? -EIO : write_data(w, fp, fn, ctx);
    int e = errno;
    if (fclose(fp) && !rc) {
        rc = -EIO;
        e = errno;
    }
    free(iobuf);
    if (!rc && rename(tmp, path)) {
        rc = -EIO;
        e = errno;
    }
    if (rc) {
        snprintf(err, err_len, "%s: write failed: %s", path,
                 rc == -ENOMEM ? "out of memory" : strerror(e));
        remove(tmp);
    }
    return rc;
}
