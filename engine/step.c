/*
 * step.c — the launched steps (see step.h): two slots, each with its sample phase, its batch
 * and, without a backend sampler, its host results; the oldest step in flight is the next to be
 * collected.
 *
 * Invariants: live[s] for each slot with a launched, uncollected step (n_flight of them, at most
 * two); next is the slot of the next launch and oldest that of the next collect; a slot's sample
 * phase and batch are not touched again before its step is collected (the backend borrows the
 * rows until sample_wait).
 */
#include "engine/step.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/engine.h"

struct stp {
    stp_config c;
    sampling *smp[2];        /* each slot's sample phase */
    batch_buf bb[2];         /* each slot's batch (the backend borrows it until the next begin) */
    sampling_plan plan[2];   /* each slot's prepared step */
    int live[2];
    int n_flight, oldest, next, last;
    /* without be_ops.sample: the logits on the host and the rows' results there */
    float *logits;           /* [max_logits][n_vocab] */
    int32_t *ids[2];         /* [max_logits] */
    smp_result *lps[2];      /* [max_logits] */
    smp_work work;
    int64_t us[ENGINE_PHASES];
};

stp *stp_create(const stp_config *c)
{
    stp *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->c = *c;
    int ok = 1;
    for (int k = 0; k < 2 && ok; k++) {
        p->smp[k] = sampling_create(c->n_vocab, c->eog, c->n_eog);
        ok = p->smp[k] && !batch_init(&p->bb[k], c->max_tokens, c->max_seqs, c->max_logits);
    }
    if (ok && !c->be->ops->sample) {
        size_t rows = (size_t)c->max_logits;
        p->logits = malloc(rows * (size_t)c->n_vocab * sizeof *p->logits);
        for (int k = 0; k < 2; k++) {
            p->ids[k] = malloc(rows * sizeof *p->ids[k]);
            p->lps[k] = malloc(rows * sizeof *p->lps[k]);
            ok &= p->ids[k] && p->lps[k];
        }
        ok = ok && p->logits && !smp_work_init(&p->work, c->n_vocab);
    }
    if (!ok) {
        stp_destroy(p);
        return NULL;
    }
    return p;
}

void stp_destroy(stp *p)
{
    if (!p) return;
    stp_abandon(p);
    for (int k = 0; k < 2; k++) {
        sampling_destroy(p->smp[k]);
        batch_fini(&p->bb[k]);
        free(p->ids[k]);
        free(p->lps[k]);
    }
    free(p->logits);
    smp_work_fini(&p->work);
    free(p);
}

int stp_can_overlap(const stp *p)
{
    return p->c.be->ops->sample != NULL;
}

/* The sampler over the forward's logits: the backend's op, or the rows run on the host. */
static int stp__sample(stp *p, int slot, const float *logits)
{
    backend *be = p->c.be;
    const smp_batch *rows = &p->plan[slot].rows;
    if (be->ops->sample) return be->ops->sample(be, logits, rows, slot);
    if (!logits) return be->ops->sync(be);
    int rc = be->ops->to_host(be, logits, (size_t)p->bb[slot].b.n_logits * (size_t)p->c.n_vocab, p->logits);
    if (!rc) smp_rows_run(rows, 0, rows->n_rows, p->logits, NULL, &p->work, p->ids[slot], p->lps[slot]);
    return rc;
}

int stp_launch(stp *p, const sched_plan *plan, const sampling_plan **sp)
{
    const kv_geom *g = p->c.g;
    backend *be = p->c.be;
    int slot = p->next;
    if (p->n_flight == 2 || p->live[slot]) return -EBUSY;
    int64_t t0 = clk_now_us();
    for (int i = 0; i < plan->n_copies; i++)
        be->ops->kv_copy_block(be, plan->copies[i].group, plan->copies[i].src, plan->copies[i].dst);
    int rc = sampling_prepare(p->smp[slot], plan->entries, plan->n_entries, &p->plan[slot]);
    if (rc) return rc;
    int64_t t1 = clk_now_us();
    rc = batch_build(&p->bb[slot], plan->entries, plan->n_entries, g->block_size, kv_n_groups(g), g->rule);
    if (!rc) rc = fwd_begin(p->c.f, &p->bb[slot].b);
    int64_t t2 = clk_now_us();
    const float *logits = NULL;
    if (!rc) rc = fwd_launch(p->c.f, &logits);
    /* pooled sequences take their hidden rows now, before the next step's forward can reuse the
     * scratch they are read from (a copy to the host: such a step waits for its forward) */
    if (!rc && p->c.pool) rc = pool_step(p->c.f, plan->entries, plan->n_entries, p->c.pool_dim, p->c.pool);
    int64_t t3 = clk_now_us();
    if (!rc) rc = stp__sample(p, slot, logits);
    int64_t t4 = clk_now_us();
    p->us[ENGINE_PHASE_SCHEDULE] += t1 - t0;
    p->us[ENGINE_PHASE_UPLOAD] += t2 - t1;
    p->us[ENGINE_PHASE_FORWARD] += t3 - t2;
    p->us[ENGINE_PHASE_SAMPLE] += t4 - t3;
    if (rc) {
        sampling_drop_children(p->smp[slot]);
        return rc;
    }
    p->live[slot] = 1;
    if (!p->n_flight++) p->oldest = slot;
    p->last = slot;
    p->next = slot ^ 1;
    *sp = &p->plan[slot];
    return 0;
}

void stp_adopted(stp *p)
{
    sampling_adopt(p->smp[p->last]);
}

int stp_in_flight(const stp *p)
{
    return p->n_flight;
}

int stp_must_collect(const stp *p)
{
    return p->n_flight > 0 && p->plan[p->oldest].sync;
}

/* Ends the oldest step in flight. */
static void stp__retire(stp *p)
{
    p->live[p->oldest] = 0;
    p->oldest ^= 1;
    p->n_flight--;
}

int stp_collect(stp *p, sampling_out **out)
{
    backend *be = p->c.be;
    int slot = p->oldest;
    if (!p->n_flight) return -EINVAL;
    const int32_t *ids = p->ids[slot];
    const smp_result *lps = p->lps[slot];
    int64_t t0 = clk_now_us();
    int rc = be->ops->sample_wait ? be->ops->sample_wait(be, slot, &ids, &lps) : 0;
    int64_t t1 = clk_now_us();
    if (rc) {
        sampling_drop_children(p->smp[slot]);
        stp__retire(p);
        return rc;
    }
    int n = sampling_finish(p->smp[slot], ids, lps, out);
    p->us[ENGINE_PHASE_FORWARD] += t1 - t0;
    p->us[ENGINE_PHASE_SAMPLE] += clk_now_us() - t1;
    stp__retire(p);
    return n;
}

void stp_abandon(stp *p)
{
    backend *be = p->c.be;
    while (p->n_flight) {
        int slot = p->oldest;
        const int32_t *ids;
        const smp_result *lps;
        if (be->ops->sample_wait) (void)be->ops->sample_wait(be, slot, &ids, &lps);
        sampling_drop_children(p->smp[slot]);
        stp__retire(p);
    }
}

void stp_take_times(stp *p, int64_t *us)
{
    for (int k = 0; k < ENGINE_PHASES; k++) {
        us[k] += p->us[k];
        p->us[k] = 0;
    }
}

void stp_get_stats(const stp *p, sampling_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < 2; k++) {
        sampling_stats s;
        sampling_get_stats(p->smp[k], &s);
        out->grammar_masks += s.grammar_masks;
        out->grammar_mask_us += s.grammar_mask_us;
    }
}
