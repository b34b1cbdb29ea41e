/*
 * batch.c — step → be_batch (see batch.h). Pure bookkeeping: positions are token indices; in
 * each layer group the block table rows are copied with a stride equal to the largest table in
 * this step, and a token's cache index is its token index less the entries its group dropped.
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
    bb->q_start = malloc((size_t)(max_seqs + 1) * sizeof(int32_t));
    bb->logit_rows = malloc((size_t)max_logits * sizeof(int32_t));
    int ok = bb->tokens && bb->positions && bb->q_start && bb->logit_rows;
    for (int g = 0; g < KV_MAX_GROUPS && ok; g++) {
        batch_kv *k = &bb->kv[g];
        k->slots = malloc((size_t)max_tokens * sizeof(int32_t));
        k->ctx_len = malloc((size_t)max_seqs * sizeof(int32_t));
        k->sinks = malloc((size_t)max_seqs * sizeof(int32_t));
        k->sink_shift = malloc((size_t)max_seqs * sizeof(int32_t));
        ok = k->slots && k->ctx_len && k->sinks && k->sink_shift;
    }
    if (!ok) {
        batch_fini(bb);
        return -ENOMEM;
    }
    return 0;
}

void batch_fini(batch_buf *bb)
{
    free(bb->tokens);
    free(bb->positions);
    free(bb->q_start);
    free(bb->logit_rows);
    for (int g = 0; g < KV_MAX_GROUPS; g++) {
        batch_kv *k = &bb->kv[g];
        free(k->slots);
        free(k->ctx_len);
        free(k->sinks);
        free(k->sink_shift);
        free(k->block_table);
    }
    memset(bb, 0, sizeof *bb);
}

/* Cache entries of s in group g after its n_new tokens. */
static int batch__len(const seq *s, int g, int n_new, int bs)
{
    return s->n_computed + n_new - s->kv[g].dropped * bs;
}

/* The view of group g: block tables, slots of the new tokens, and the sinks of sequences whose
 * window has moved. 0 or -ENOMEM. */
static int batch__group(batch_buf *bb, const batch_entry *e, int n, int bs, int g, const kv_rule *rule)
{
    batch_kv *k = &bb->kv[g];
    int stride = 1, any_sinks = 0;
    for (int i = 0; i < n; i++) {
        int nb = (batch__len(e[i].s, g, e[i].n_new, bs) + bs - 1) / bs;
        if (nb > stride) stride = nb;
    }
    if ((int64_t)n * stride > k->bt_cap) {
        int64_t cap = (int64_t)bb->max_seqs * stride;
        int32_t *bt = realloc(k->block_table, (size_t)cap * sizeof *bt);
        if (!bt) return -ENOMEM;
        k->block_table = bt;
        k->bt_cap = cap;
    }
    int sink_len = rule ? kv_sink_blocks(rule, bs) * bs : 0;
    for (int i = 0, t = 0; i < n; i++) {
        const seq *s = e[i].s;
        const seq_kv *sk = &s->kv[g];
        int end = batch__len(s, g, e[i].n_new, bs), off = sk->dropped * bs;
        k->ctx_len[i] = end;
        memcpy(k->block_table + (int64_t)i * stride, sk->bt, (size_t)((end + bs - 1) / bs) * sizeof(int32_t));
        for (int p = s->n_computed; p < s->n_computed + e[i].n_new; p++, t++) {
            int j = p - off; /* the token's cache index */
            k->slots[t] = sk->bt[j / bs] * bs + j % bs;
        }
        k->sinks[i] = sk->dropped && sink_len ? sink_len : 0;
        k->sink_shift[i] = k->sinks[i] ? off : 0;
        any_sinks |= k->sinks[i] > 0;
    }
    bb->b.kv[g] = (be_kv){
        .slots = k->slots,
        .ctx_len = k->ctx_len,
        .block_table = k->block_table,
        .bt_stride = stride,
        .sinks = any_sinks ? k->sinks : NULL,
        .sink_shift = any_sinks ? k->sink_shift : NULL,
    };
    return 0;
}

int batch_build(batch_buf *bb, const batch_entry *e, int n, int block_size, int n_groups, const kv_rule *rules)
{
    if (n > bb->max_seqs) return -EINVAL;
    int n_tok = 0, n_rows = 0, ng = n_groups > 1 ? n_groups : 1;
    for (int i = 0; i < n; i++) {
        n_tok += e[i].n_new;
        n_rows += e[i].lp_rows + (e[i].samples ? 1 + e[i].n_draft : 0);
        if (e[i].lp_rows && (e[i].lp_from < 0 || e[i].lp_from + e[i].lp_rows > e[i].n_new)) return -EINVAL;
    }
    if (n_tok > bb->max_tokens || n_rows > bb->max_logits) return -EINVAL;
    for (int g = 0; g < ng; g++) {
        int rc = batch__group(bb, e, n, block_size, g, rules ? &rules[g] : NULL);
        if (rc) return rc;
    }
    int t = 0, n_logits = 0;
    for (int i = 0; i < n; i++) {
        const seq *s = e[i].s;
        int start = s->n_computed, end = start + e[i].n_new;
        bb->q_start[i] = t;
        for (int k = 0; k < e[i].lp_rows; k++) bb->logit_rows[n_logits++] = t + e[i].lp_from + k;
        for (int p = start; p < end; p++, t++) {
            bb->tokens[t] = s->tokens[p];
            bb->positions[t] = p;
        }
        if (e[i].samples) /* the verified drafts' rows, then the last token's */
            for (int r = e[i].n_draft; r >= 0; r--) bb->logit_rows[n_logits++] = t - 1 - r;
    }
    bb->q_start[n] = t;
    bb->b.n_tokens = t;
    bb->b.tokens = bb->tokens;
    bb->b.positions = bb->positions;
    bb->b.n_seqs = n;
    bb->b.q_start = bb->q_start;
    bb->b.n_logits = n_logits;
    bb->b.logit_rows = bb->logit_rows;
    bb->b.n_kv = ng;
    return 0;
}
