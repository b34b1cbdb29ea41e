/*
 * gguf.h — read-only GGUF (v2, v3) files through mmap.
 *
 *   file:  magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *          n_kv × { string key | u32 value type | value }
 *          n_tensors × { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *          padding to general.alignment (default 32) | tensor data
 *
 * The file is untrusted: gguf_open bounds-checks every count, length, offset, shape and type, and
 * checks every tensor's offset + size against the file size, so a file that opens is safe to read
 * through the returned views. Strings are views into the mapping (not NUL-terminated): use
 * gguf_str helpers. Nothing here allocates per lookup.
 */
#ifndef KVSERVE_GGUF_H
#define KVSERVE_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_T_U8 = 0,
    GGUF_T_I8 = 1,
    GGUF_T_U16 = 2,
    GGUF_T_I16 = 3,
    GGUF_T_U32 = 4,
    GGUF_T_I32 = 5,
    GGUF_T_F32 = 6,
    GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8,
    GGUF_T_ARRAY = 9,
    GGUF_T_U64 = 10,
    GGUF_T_I64 = 11,
    GGUF_T_F64 = 12,
};

#define GGUF_MAX_DIMS 4

typedef struct gguf_file gguf_file;

/* A string inside the mapping: len bytes at ptr, not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

/* An array value. For fixed-size element types, data points at n packed little-endian elements.
 * For GGUF_T_STRING, strs[i] are the elements. For GGUF_T_ARRAY (nested), arrs[i] are the elements. */
typedef struct gguf_arr {
    int type;              /* element type (enum gguf_vtype) */
    uint64_t n;            /* number of elements */
    const void *data;      /* fixed-size elements, in the mapping (may be unaligned: memcpy) */
    const gguf_str *strs;  /* [n] when type == GGUF_T_STRING, else NULL */
    const struct gguf_arr *arrs; /* [n] when type == GGUF_T_ARRAY, else NULL */
} gguf_arr;

typedef struct gguf_kv {
    gguf_str key;
    int type; /* enum gguf_vtype */
    union {
        uint64_t u64; /* all unsigned integers and bool, widened */
        int64_t i64;  /* all signed integers, widened */
        double f64;   /* F32 and F64, widened */
        gguf_str str;
        gguf_arr arr;
    } v;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous dimension; unused dims are 1 */
    int type;                  /* enum dt_type */
    uint64_t offset;           /* relative to the start of the data section */
    const void *data;          /* into the mapping (a tensor type that cannot be sized is
                                * refused at open) */
    uint64_t n_bytes;
} gguf_tensor;

/* Opens and validates a GGUF file. On failure returns -EINVAL/-EIO/-ENOMEM, writes a one-line
 * message naming the problem and where (offset, key or tensor) into err, and *out is NULL. */
int gguf_open(const char *path, gguf_file **out, char *err, size_t err_len);

/* Same, over a caller-owned buffer that must outlive the file object (for fuzzing and tests). */
int gguf_open_mem(const void *data, size_t size, gguf_file **out, char *err, size_t err_len);

/* Unmaps and frees. NULL is allowed. */
void gguf_close(gguf_file *f);

/* The file's identity when gguf_open opened it: a change of any field means other content.
 * All zero for gguf_open_mem. */
typedef struct gguf_file_id {
    uint64_t size, ino, dev;
    int64_t mtime_ns;
} gguf_file_id;
const gguf_file_id *gguf_identity(const gguf_file *f);

/* Stops reading the file: the head (magic, metadata, tensor infos: everything before
 * gguf_data_offset) is copied into private memory at the same addresses, and the pages of the
 * tensor data are replaced by inaccessible anonymous ones. Afterwards a truncated, rewritten or
 * replaced file can neither fault this process (SIGBUS) nor change what it reads; every
 * pointer into the head (strings, arrays, gguf_bytes up to the data) stays valid, and no
 * tensor's data may be read again. For a server whose backend owns copies of the weights.
 * 0 (also for a file not mapped, or already detached) or -ENOMEM (unchanged). */
int gguf_detach(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f); /* byte offset of the data section in the file */
uint64_t gguf_file_size(const gguf_file *f);
/* The file's bytes (gguf_file_size of them: header, metadata, tensor infos, then the data at
 * gguf_data_offset), borrowed from the mapping. */
const void *gguf_bytes(const gguf_file *f);

int64_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i);
/* The key/value pair with this key, or NULL. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);

int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: 0 on success; -ENOENT when the key is absent; -EINVAL when present with an
 * incompatible type (integers convert among themselves when the value fits; get_f32 accepts
 * floats and integers; get_bool accepts bool and integers). *out untouched on failure. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
int gguf_get_arr(const gguf_file *f, const char *key, const gguf_arr **out);

/* 1 when s equals the NUL-terminated c. */
int gguf_str_eq(gguf_str s, const char *c);
/* Copies s into buf (truncating, always NUL-terminated); returns buf. */
char *gguf_str_copy(gguf_str s, char *buf, size_t buf_len);
/* Reads element i of a fixed-size numeric array as double / int64 (caller checks i < n). */
double gguf_arr_f64(const gguf_arr *a, uint64_t i);
int64_t gguf_arr_i64(const gguf_arr *a, uint64_t i);
/* Name of a value type ("u32", "string", ...). */
const char *gguf_type_name(int type);

#endif
