/*
 * seq.c — sequence storage: token and block-table arrays that grow by doubling.
 * The scheduler (sched.c) owns the meaning of the fields; this file only keeps memory right.
 */
#include "engine/seq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

seq *seq_create(const int32_t *prompt, int n_prompt, int max_tokens)
{
    seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    int cap = n_prompt + (max_tokens > 0 ? max_tokens : 0) + 1;
    s->tokens = malloc((size_t)cap * sizeof *s->tokens);
    if (!s->tokens) {
        free(s);
        return NULL;
    }
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    s->cap = cap;
    s->n_prompt = s->n_tokens = n_prompt;
    s->max_tokens = max_tokens;
    s->n_choices = 1;
    s->status = SEQ_WAITING;
    s->stop_token = -1;
    s->pending = -1;
    smp_params_default(&s->sp);
    return s;
}

void seq_destroy(seq *s)
{
    if (!s) return;
    free(s->tokens);
    for (int g = 0; g < KV_MAX_GROUPS; g++) free(s->kv[g].bt);
    gr_matcher_destroy(s->gm);
    free(s);
}

int seq_append(seq *s, int32_t token)
{
    if (s->n_tokens == s->cap) {
        int cap = s->cap * 2;
        int32_t *t = realloc(s->tokens, (size_t)cap * sizeof *t);
        if (!t) return -ENOMEM;
        s->tokens = t;
        s->cap = cap;
    }
    s->tokens[s->n_tokens++] = token;
    return 0;
}

int seq_reserve_blocks(seq *s, int g, int n)
{
    seq_kv *k = &s->kv[g];
    if (n <= k->cap) return 0;
    int cap = k->cap ? k->cap : 8;
    while (cap < n) cap *= 2;
    int32_t *b = realloc(k->bt, (size_t)cap * sizeof *b);
    if (!b) return -ENOMEM;
    k->bt = b;
    k->cap = cap;
    return 0;
}

seq *seq_clone(const seq *s)
{
    seq *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *s;
    c->tokens = malloc((size_t)s->cap * sizeof *c->tokens);
    memset(c->kv, 0, sizeof c->kv);
    c->gm = s->gm ? gr_matcher_clone(s->gm) : NULL;
    if (!c->tokens || (s->gm && !c->gm)) {
        free(c->tokens);
        gr_matcher_destroy(c->gm);
        free(c);
        return NULL;
    }
    memcpy(c->tokens, s->tokens, (size_t)s->n_tokens * sizeof *c->tokens);
    c->flights = 0;
    c->spec_state = NULL;
    return c;
}
