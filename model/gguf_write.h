/*
 * gguf_write.h — a small streaming GGUF (v3) writer, the counterpart of the reader in gguf.h.
 *
 * The writer keeps the metadata and the tensor table in memory, then writes the file in one pass:
 * header, metadata, tensor table, padding, and each tensor's rows as a callback produces them
 * (converted to the tensor's type on the way), so a multi-gigabyte model never sits in memory.
 * Used by the synthetic models (mkmodel.h) and by the tests that need a file of a given shape.
 */
#ifndef KVSERVE_GGUF_WRITE_H
#define KVSERVE_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct gguf_writer gguf_writer;

/* A new writer whose metadata already holds general.alignment = 32. NULL when out of memory. */
gguf_writer *gguf_writer_create(void);
void gguf_writer_destroy(gguf_writer *w);

/* Append one metadata key/value. Each returns 0 or -ENOMEM; a failure is also remembered and
 * makes gguf_writer_write fail, so callers may check only the final write. Strings are copied. */
int gguf_put_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_put_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_put_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_put_f32(gguf_writer *w, const char *key, float v);
int gguf_put_bool(gguf_writer *w, const char *key, int v);
int gguf_put_str(gguf_writer *w, const char *key, const char *v);
int gguf_put_arr_str(gguf_writer *w, const char *key, const char *const *v, int64_t n);
int gguf_put_arr_f32(gguf_writer *w, const char *key, const float *v, int64_t n);
int gguf_put_arr_i32(gguf_writer *w, const char *key, const int32_t *v, int64_t n);

/* 1 when tensors of type (enum dt_type) can be written: F32, F16, BF16, Q8_0; else 0. */
int gguf_is_writable(int type);

/* Append a tensor of type F32, F16, BF16 or Q8_0 (enum dt_type) and shape ne[0..n_dims) (GGML
 * order). Returns its index, or -EINVAL (bad type/shape: Q8_0 needs ne[0] % 32 == 0) / -ENOMEM. */
int gguf_put_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne);

/* Produces row `row` (ne[0] floats) of tensor `tensor`. Called in file order: tensors in the
 * order they were added, rows in increasing order. */
typedef void (*gguf_row_fn)(void *ctx, int tensor, int64_t row, float *dst, int64_t n);

/* Writes the file (through path.tmp, renamed into place at the end). 0, or -EIO/-ENOMEM with a
 * one-line message in err. The writer is unchanged and may be written again. */
int gguf_writer_write(gguf_writer *w, const char *path, gguf_row_fn fn, void *ctx, char *err,
                      size_t err_len);

/* Converts n floats to a row of the given type (F32, F16, BF16, or Q8_0 with d = max|x| / 127 and
 * q = round(x / d)); dst holds dt_row_bytes(type, n) bytes. */
void gguf_quantize_row(int type, const float *src, void *dst, int64_t n);

#endif
