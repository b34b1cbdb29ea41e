/*
 * kv.c — the KV memory formula as text, for the start-up line, `kvserve info` and the docs
 * (cache/kv.h holds the geometry and the arithmetic itself).
 */
#include <stdio.h>

#include "cache/kv.h"

int kv_formula(const kv_geom *g, int named, char *buf, size_t len)
{
    const char *L = named ? " layers" : "", *H = named ? " kv heads" : "", *D = named ? " head dim" : "";
    size_t b = kv_dtype_bytes(g->dtype);
    if (kv_dtype_is_quant(g->dtype))
        return snprintf(buf, len, "2 × %d%s × %d%s × (%d%s × %zu%s + %d%s)", g->n_layers, L, g->n_kv_heads, H,
                        g->head_dim, D, b, named ? " byte" : "", KV_SCALE_BYTES, named ? " scale bytes" : "");
    return snprintf(buf, len, "2 × %d%s × %d%s × %d%s × %zu%s", g->n_layers, L, g->n_kv_heads, H, g->head_dim, D,
                    b, named ? " bytes" : "");
}
