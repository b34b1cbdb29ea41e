/*
 * sched_harness.h — an engine step over a scheduler and a model the test supplies (a scripted
 * fake, or fwd_run), driven phase by phase as engine.c drives it: sched_schedule, the plan's
 * block copies, batch_build, the model's logit rows, sampling_step, sched_commit. Shared by the
 * scheduler, forward and KV-quality tests; everything is static, so each test file gets its own
 * copy.
 */
#ifndef KVSERVE_TESTS_SCHED_HARNESS_H
#define KVSERVE_TESTS_SCHED_HARNESS_H

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/batch.h"
#include "engine/sampling.h"
#include "engine/sched.h"

/* The model under the scheduler: the logit rows of a batch, and a block copy in layer group
 * `group` (what the engine does on the backend with the plan's copies). */
typedef struct sh_model {
    int (*run)(void *ud, const be_batch *b, float *logits); /* logits [b->n_logits][n_vocab]; 0 or -errno */
    void (*copy)(void *ud, int group, int32_t src, int32_t dst);
    void *ud;
} sh_model;

typedef struct sh_step {
    sched *sc;       /* borrowed */
    sh_model m;
    sampling *smp;
    batch_buf bb;
    float *logits;   /* [sched_max_logits(max_seqs)][n_vocab] */
    int block_size, n_groups;
    kv_rule rule[KV_MAX_GROUPS];
} sh_step;

/* A step driver for sc, created from config c (its geometry, limits and end-of-generation ids,
 * which must outlive the driver), over logit rows of n_vocab. */
static inline void sh_init(sh_step *h, sched *sc, const sched_config *c, int n_vocab, sh_model m)
{
    memset(h, 0, sizeof *h);
    h->sc = sc;
    h->m = m;
    h->block_size = c->block_size;
    h->n_groups = c->n_groups;
    memcpy(h->rule, c->rule, sizeof h->rule);
    h->smp = sampling_create(n_vocab, c->eog_ids, c->n_eog);
    h->logits = malloc((size_t)sched_max_logits(c->max_seqs) * (size_t)n_vocab * sizeof(float));
    cr_assert(h->smp && h->logits);
    cr_assert_eq(batch_init(&h->bb, c->max_batch_tokens, c->max_seqs, sched_max_logits(c->max_seqs)), 0);
}

static inline void sh_fini(sh_step *h)
{
    sampling_destroy(h->smp);
    batch_fini(&h->bb);
    free(h->logits);
    memset(h, 0, sizeof *h);
}

/* One step. Returns the number of results (≥ 0) and points *out at them (valid until the next
 * step); sequences that finished in it have status SEQ_FINISHED. Returns -EAGAIN when nothing
 * could be scheduled, or the model's negative errno (then nothing was committed). */
static inline int sh_step_run(sh_step *h, sampling_out **out)
{
    *out = NULL;
    sched_plan p;
    int rc = sched_schedule(h->sc, &p);
    if (rc) return rc;
    for (int i = 0; i < p.n_copies; i++) h->m.copy(h->m.ud, p.copies[i].group, p.copies[i].src, p.copies[i].dst);
    rc = batch_build(&h->bb, p.entries, p.n_entries, h->block_size, h->n_groups, h->rule);
    if (!rc) rc = h->m.run(h->m.ud, &h->bb.b, h->logits);
    if (rc) return rc;
    int n = sampling_step(h->smp, p.entries, p.n_entries, h->logits, out);
    if (n < 0) return n;
    rc = sched_commit(h->sc, *out, n);
    return rc ? rc : n;
}

#endif
