/*
 * gr_mcache.c — the storage of the per-state token-mask cache (gr_mask.c computes what goes in
 * it): one gr_mcache per vocabulary a grammar was used with, holding each DFA state's accepted
 * and uncertain tokens once computed, and the byte count that bounds it.
 *
 * The cache hangs off its grammar (gr_grammar.caches) and is read and filled under the
 * grammar's lock; grammar.c frees it with the grammar and reads its size for the compiled-grammar
 * cache's accounting, gr_mask.c fills it. Keeping it here lets both call downwards.
 */
#include <pthread.h>
#include <stdlib.h>

#include "grammar/gr_internal.h"

void gr__smask_free(gr_smask *sm)
{
    if (!sm) return;
    free(sm->acc_bits);
    free(sm->acc_ids);
    free(sm->unc);
    free(sm);
}

void gr__mcache_free_all(gr_grammar *g)
{
    while (g->caches) {
        gr_mcache *c = g->caches;
        g->caches = c->next;
        for (int i = 0; i < g->n_states; i++) gr__smask_free(c->st[i]);
        free(c->st);
        free(c);
    }
}

size_t gr__mcache_bytes(gr_grammar *g)
{
    size_t n = 0;
    for (gr_mcache *c = g->caches; c; c = c->next) n += c->bytes;
    return n;
}

size_t gr_grammar_bytes(gr_grammar *g)
{
    pthread_mutex_lock(&g->mu);
    size_t n = g->bytes + gr__mcache_bytes(g);
    pthread_mutex_unlock(&g->mu);
    return n;
}

gr_mcache *gr__mcache_of(gr_grammar *g, const gr_vocab *v)
{
    for (gr_mcache *c = g->caches; c; c = c->next)
        if (c->v == v) return c;
    gr_mcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->st = calloc((size_t)g->n_states, sizeof *c->st);
    if (!c->st) {
        free(c);
        return NULL;
    }
    c->v = v;
    c->next = g->caches;
    g->caches = c;
    return c;
}
