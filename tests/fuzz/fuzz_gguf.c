/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader: any input must either be refused with a
 * message or open into a file whose every key, value, array element and tensor byte is readable.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"

static uint64_t fz_walk_arr(const gguf_arr *a)
{
    uint64_t h = a->n;
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_T_STRING)
            for (uint64_t k = 0; k < a->strs[i].len; k++) h += (uint8_t)a->strs[i].ptr[k];
        else if (a->type == GGUF_T_ARRAY)
            h += fz_walk_arr(&a->arrs[i]);
        else
            h += (uint64_t)gguf_arr_i64(a, i) + (gguf_arr_f64(a, i) > 0);
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file *f;
    char err[512];
    if (gguf_open_mem(data, size, &f, err, sizeof err)) {
        if (!err[0] || strchr(err, '\n')) __builtin_trap();
        return 0;
    }
    volatile uint64_t h = 0;
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char key[256];
        gguf_str_copy(kv->key, key, sizeof key);
        if (strlen(key) == kv->key.len && gguf_find(f, key) != kv) __builtin_trap();
        uint32_t u;
        int64_t s;
        float fl;
        int b;
        gguf_str str;
        const gguf_arr *a;
        h += (uint64_t)gguf_get_u32(f, key, &u) + (uint64_t)gguf_get_i64(f, key, &s) +
             (uint64_t)gguf_get_f32(f, key, &fl) + (uint64_t)gguf_get_bool(f, key, &b) +
             (uint64_t)gguf_get_str(f, key, &str);
        if (!gguf_get_arr(f, key, &a)) h += fz_walk_arr(a);
        if (kv->type == GGUF_T_STRING)
            for (uint64_t k = 0; k < kv->v.str.len; k++) h += (uint8_t)kv->v.str.ptr[k];
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *p = t->data;
        for (uint64_t k = 0; k < t->n_bytes; k++) h += p[k];
        if ((const uint8_t *)t->data < data || (const uint8_t *)t->data + t->n_bytes > data + size)
            __builtin_trap();
    }
    (void)h;
    gguf_close(f);
    return 0;
}
