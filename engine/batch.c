/*
 * batch.c — step → be_batch (see batch.h). Pure bookkeeping: positions are KV indices, the block
 * table rows are copied with a stride equal to the largest table in this step.
 */
#include "engine/batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int batch_init(batch_buf *bb, int max_tokens, int max_seqs, int max_logits)
{
    memset(bb, 0, sizeof *bb);
    bb->max_tokens = max_tokens;
    bb->max_seqs = max_seqs;
    bb->max_logits = max_logits;
    bb->tokens = malloc((size_t)max_tokens * sizeof(int32_t));
    bb->positions = malloc((size_t)max_tokens * sizeof(int32_t));
    bb->slots = malloc((size_t)max_tokens * sizeof(int32_t));
    bb->q_start = malloc((size_t)(max_seqs + 1) * sizeof(int32_t));
    bb->ctx_len = malloc((size_t)max_seqs * sizeof(int32_t));
    bb->logit_rows = malloc((size_t)max_logits * sizeof(int32_t));
    if (!bb->tokens || !bb->positions || !bb->slots || !bb->q_start || !bb->ctx_len ||
        !bb->logit_rows) {
        batch_fini(bb);
        return -ENOMEM;
    }
    return 0;
}

void batch_fini(batch_buf *bb)
{
    free(bb->tokens);
    free(bb->positions);
    free(bb->slots);
    free(bb->q_start);
    free(bb->ctx_len);
    free(bb->logit_rows);
    free(bb->block_table);
    memset(bb, 0, sizeof *bb);
}

int batch_build(batch_buf *bb, const batch_entry *e, int n, int block_size)
{
    if (n > bb->max_seqs) return -EINVAL;
    int n_tok = 0, stride = 1, n_rows = 0;
    for (int i = 0; i < n; i++) {
        n_tok += e[i].n_new;
        n_rows += e[i].lp_rows + e[i].samples;
        if (e[i].lp_rows && (e[i].lp_from < 0 || e[i].lp_from + e[i].lp_rows > e[i].n_new)) return -EINVAL;
        int nb = (e[i].s->n_computed + e[i].n_new + block_size - 1) / block_size;
        if (nb > stride) stride = nb;
    }
    if (n_tok > bb->max_tokens || n_rows > bb->max_logits) return -EINVAL;
    if ((int64_t)n * stride > bb->bt_cap) {
        int64_t cap = (int64_t)bb->max_seqs * stride;
        int32_t *bt = realloc(bb->block_table, (size_t)cap * sizeof *bt);
        if (!bt) return -ENOMEM;
        bb->block_table = bt;
        bb->bt_cap = cap;
    }
    int t = 0, n_logits = 0;
    for (int i = 0; i < n; i++) {
        const seq *s = e[i].s;
        int start = s->n_computed, end = start + e[i].n_new;
        bb->q_start[i] = t;
        bb->ctx_len[i] = end;
        int nb = (end + block_size - 1) / block_size;
        memcpy(bb->block_table + (int64_t)i * stride, s->block_table, (size_t)nb * sizeof(int32_t));
        for (int k = 0; k < e[i].lp_rows; k++) bb->logit_rows[n_logits++] = t + e[i].lp_from + k;
        for (int p = start; p < end; p++, t++) {
            bb->tokens[t] = s->tokens[p];
            bb->positions[t] = p;
            bb->slots[t] = s->block_table[p / block_size] * block_size + p % block_size;
        }
        if (e[i].samples) bb->logit_rows[n_logits++] = t - 1;
    }
    bb->q_start[n] = t;
    bb->b = (be_batch){
        .n_tokens = t,
        .tokens = bb->tokens,
        .positions = bb->positions,
        .slots = bb->slots,
        .n_seqs = n,
        .q_start = bb->q_start,
        .ctx_len = bb->ctx_len,
        .block_table = bb->block_table,
        .bt_stride = stride,
        .n_logits = n_logits,
        .logit_rows = bb->logit_rows,
    };
    return 0;
}
