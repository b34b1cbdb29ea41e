/*
 * pool.h — pooled sequences: the hidden states of a prefill-only sequence become one vector (an
 * embedding) or the outputs of a classification head (a reranker's relevance score).
 *
 *   prompt:  [ t0  t1  t2  ...........................  tN-1 ]   computed in chunks over steps
 *   rows:      h0  h1  h2  ...                           hN-1     after the final norm (fwd_hidden)
 *   mean:    Σ h_i / N          each position counted once, also when a preempted sequence
 *                               computes its prompt again
 *   cls:     h0                 last: hN-1
 *   rank:    head(h_r)          r = N-1 for qwen3 and the yes/no head, else 0
 *            head(h) = out · [tanh(cls · h + cls_b)] + out_b, then a softmax over the outputs for
 *            qwen3 and the yes/no head (llama.cpp's build_pooling; score = output 0)
 *
 * The accumulator lives with the engine's request; the engine calls pool_step after each
 * forward, for the plan's pooled sequences, and pool_acc_result once the prompt is done. The
 * head is built once from the model: its cls.* tensors, or (a generative model served with
 * rank pooling, Qwen3-Reranker's convention) the LM head's rows of the tokens "yes" and "no".
 * Engine thread only, but for pool_head_init (any thread: it reads the model and tokenizer).
 */
#ifndef KVSERVE_POOL_H
#define KVSERVE_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/batch.h"
#include "engine/forward.h"
#include "model/model.h"
#include "model/tokenizer.h"

typedef struct pool_acc {
    int kind;     /* enum model_pooling: MEAN, CLS, LAST or RANK */
    int dim;      /* row length (n_embd) */
    int n_prompt; /* positions of the prompt */
    int row;      /* CLS, LAST, RANK: the position whose row is kept */
    int next;     /* MEAN: positions 0 .. next - 1 are in sum */
    int have;     /* CLS, LAST, RANK: 1 once the row is kept */
    double *sum;  /* [dim] MEAN: the sum of rows 0 .. next - 1; else the kept row */
} pool_acc;

/* A new accumulator for a prompt of n_prompt positions pooled as kind; rank_last: RANK keeps
 * the last row (else the first). NULL on -ENOMEM or bad arguments. */
pool_acc *pool_acc_create(int kind, int dim, int n_prompt, int rank_last);
void pool_acc_destroy(pool_acc *a);

/* Rows [n][dim] of positions first .. first + n - 1 (in order, from a step's chunk): each
 * position the accumulator needs and does not hold yet is taken. */
void pool_acc_add(pool_acc *a, const float *rows, int n, int first);

/* 1 when every position it needs was seen. */
int pool_acc_done(const pool_acc *a);

/* 1 when a chunk of positions first .. first + n - 1 holds a row it still needs. */
int pool_acc_wants(const pool_acc *a, int first, int n);

/* 1 when the pooling needs rows a cached prefix would not give (mean; cls; rank of the first). */
int pool_acc_whole(const pool_acc *a);

/* The pooled vector (mean: the average) into out[dim]. */
void pool_acc_result(const pool_acc *a, float *out);

/* Asserts the invariants (next ≤ n_prompt; row inside the prompt; kind known). */
void pool_acc_check(const pool_acc *a);

/* A reranker's classification head in f32 host memory. */
typedef struct pool_head {
    int dim, n_out;
    float *cls, *cls_b; /* [dim][dim], [dim]: the dense layer before tanh, or NULL */
    float *out, *out_b; /* [n_out][dim], [n_out] or NULL (no bias) */
    float softcap;      /* > 0: out's values soft-capped first (the LM head's final soft-cap) */
    int softmax;        /* 1: softmax over the outputs */
    int last;           /* 1: the last row is pooled, 0: the first */
} pool_head;

/* The head of model m: its cls.* tensors, else the LM head's rows of the tokens "yes" and "no"
 * of tok. 0, or -EINVAL with err saying why (no head and no such tokens), or -ENOMEM. */
int pool_head_init(pool_head *h, const model *m, const tokenizer *tok, char *err, size_t err_len);
void pool_head_fini(pool_head *h);

/* The head's outputs for a pooled row[dim] into scores[n_out]. */
void pool_head_apply(const pool_head *h, const float *row, float *scores);

/* Host rows for pool_step, grown as needed. */
typedef struct pool_rows {
    float *v; /* [cap][dim] */
    int cap;
} pool_rows;

/* After a step's forward: the plan's pooled sequences (e[0 .. n), their accumulators in
 * seq->pool) take the rows of their new tokens that they need (fwd_hidden; only the leading
 * rows up to the last one needed are read back). Before the commit (n_computed is the chunk's
 * first position). 0, or a negative errno. */
int pool_step(fwd *f, const batch_entry *e, int n, int dim, pool_rows *buf);

#endif
