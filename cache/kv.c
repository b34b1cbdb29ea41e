/*
 * kv.c — the KV memory formula as text, for the start-up line, `kvserve info` and the docs, and
 * the split of a KV budget between layer groups (cache/kv.h holds the geometry and the rest of
 * the arithmetic).
 */
#include <stdio.h>

#include "cache/kv.h"

int kv_formula(const kv_geom *g, int named, char *buf, size_t len)
{
    const char *L = named ? " layers" : "", *H = named ? " kv heads" : "", *D = named ? " head dim" : "";
    size_t b = kv_dtype_bytes(g->dtype);
    if (g->latent && named && kv_dtype_is_quant(g->dtype))
        return snprintf(buf, len, "%d layers × ((%d latent + %d rope) × %zu byte + %d scale bytes)", g->n_layers,
                        g->latent, g->head_dim - g->latent, b, KV_SCALE_BYTES);
    if (g->latent && named)
        return snprintf(buf, len, "%d layers × (%d latent + %d rope) × %zu bytes", g->n_layers, g->latent,
                        g->head_dim - g->latent, b);
    if (g->latent && kv_dtype_is_quant(g->dtype))
        return snprintf(buf, len, "%d × (%d × %zu + %d)", g->n_layers, g->head_dim, b, KV_SCALE_BYTES);
    if (g->latent) return snprintf(buf, len, "%d × %d × %zu", g->n_layers, g->head_dim, b);
    if (kv_dtype_is_quant(g->dtype))
        return snprintf(buf, len, "2 × %d%s × %d%s × (%d%s × %zu%s + %d%s)", g->n_layers, L, g->n_kv_heads, H,
                        g->head_dim, D, b, named ? " byte" : "", KV_SCALE_BYTES, named ? " scale bytes" : "");
    return snprintf(buf, len, "2 × %d%s × %d%s × %d%s × %zu%s", g->n_layers, L, g->n_kv_heads, H, g->head_dim, D,
                    b, named ? " bytes" : "");
}

int64_t kv_split_budget(const kv_geom *g, size_t budget_bytes, int64_t n_ctx, int max_chunk, int64_t *n_blocks)
{
    int ng = kv_n_groups(g);
    double per_seq = 0; /* bytes of one sequence at its largest, all groups */
    for (int k = 0; k < ng; k++)
        per_seq += (double)kv_group_seq_blocks(g, k, n_ctx, max_chunk) * (double)kv_group_bytes_per_block(g, k);
    if (ng == 1) {
        n_blocks[0] = kv_blocks_for_budget(g, budget_bytes);
        return per_seq > 0 ? n_blocks[0] / kv_group_seq_blocks(g, 0, n_ctx, max_chunk) : 0;
    }
    int64_t seqs = per_seq > 0 ? (int64_t)((double)budget_bytes / per_seq) : 0;
    double left = (double)budget_bytes;
    for (int k = 0; k < ng; k++) {
        n_blocks[k] = seqs * kv_group_seq_blocks(g, k, n_ctx, max_chunk);
        left -= (double)n_blocks[k] * (double)kv_group_bytes_per_block(g, k);
    }
    /* what is left over (less than one sequence) goes to the groups in the same proportions */
    double frac = per_seq > 0 && left > 0 ? left / per_seq : 0;
    for (int k = 0; k < ng; k++) n_blocks[k] += (int64_t)(frac * (double)kv_group_seq_blocks(g, k, n_ctx, max_chunk));
    return seqs;
}
