/*
 * sampling.c — the sample phase of a step (see sampling.h): prompt scoring, grammar masks,
 * draws and forks over the plan's logit rows. The rows come in batch_build's order: per entry,
 * its prompt log-prob rows, then its sampling row when it samples.
 *
 * The results buffer is sized before anything is drawn, so the only failure left is a fork's
 * clone, which happens before any of that fork's draws.
 */
#include "engine/sampling.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/finish.h"

struct sampling {
    int n_vocab;
    const int32_t *eog_ids;  /* [n_eog] borrowed */
    int n_eog;
    float *scratch;          /* [n_vocab] a row the sampler may modify */
    uint32_t *mask;          /* [GR_MASK_WORDS(n_vocab)] the grammar mask being applied */
    sampling_out *out;       /* [cap] this step's results */
    int n_out, cap;
    sampling_stats st;
};

sampling *sampling_create(int n_vocab, const int32_t *eog_ids, int n_eog)
{
    sampling *sp = calloc(1, sizeof *sp);
    if (!sp) return NULL;
    sp->n_vocab = n_vocab;
    sp->eog_ids = eog_ids;
    sp->n_eog = n_eog;
    sp->scratch = malloc((size_t)n_vocab * sizeof *sp->scratch);
    sp->mask = malloc(GR_MASK_WORDS(n_vocab) * sizeof *sp->mask);
    if (!sp->scratch || !sp->mask) {
        sampling_destroy(sp);
        return NULL;
    }
    return sp;
}

void sampling_destroy(sampling *sp)
{
    if (!sp) return;
    free(sp->scratch);
    free(sp->mask);
    free(sp->out);
    free(sp);
}

void sampling_get_stats(const sampling *sp, sampling_stats *out)
{
    *out = sp->st;
}

/* Results the plan can produce: its rows, prompt token 0 once per scoring sequence, and one
 * draw per choice. */
static int sampling__bound(const batch_entry *e, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        const seq *s = e[i].s;
        k += e[i].lp_rows + (s->prompt_logprobs && s->plp_next == 0);
        if (e[i].samples) k += s->n_choices > 1 ? s->n_choices : 1;
    }
    return k;
}

/* Appends a result (room was made by sampling_step). */
static void sampling__add(sampling *sp, seq *s, seq *parent, const smp_result *r, int kind, int pos, int finish)
{
    sp->out[sp->n_out++] = (sampling_out){s, parent, *r, kind, pos, finish};
}

/* The grammar's mask for s's next token into sp->mask; returns the allowed count. */
static int sampling__mask(sampling *sp, seq *s)
{
    int64_t t0 = clk_now_us();
    int n = gr_matcher_fill_mask(s->gm, sp->mask);
    sp->st.grammar_masks++;
    sp->st.grammar_mask_us += clk_now_us() - t0;
    return n;
}

/* Draws s's next token from a logits row, under its grammar's mask when constrained, and has
 * the grammar accept it; a choice the grammar cannot continue halts instead. */
static void sampling__draw(sampling *sp, seq *s, seq *parent, const float *row)
{
    smp_result r = {0};
    memcpy(sp->scratch, row, (size_t)sp->n_vocab * sizeof(float));
    smp_history h = {s->tokens, s->n_prompt, s->tokens + s->n_prompt, seq_n_output(s)};
    const uint32_t *allow = NULL;
    if (s->gm) {
        if (sampling__mask(sp, s) == 0) {
            int finish = gr_matcher_is_accepting(s->gm) ? ENGINE_FINISH_STOP : ENGINE_FINISH_LENGTH;
            sampling__add(sp, s, parent, &r, SAMPLING_HALT, 0, finish);
            return;
        }
        allow = sp->mask;
    }
    smp_sample_masked(&s->sp, &s->rng, sp->scratch, sp->n_vocab, &h, sp->eog_ids, sp->n_eog, allow, &r);
    if (s->gm && gr_matcher_accept(s->gm, r.token)) {
        smp_result none = {0};
        sampling__add(sp, s, parent, &none, SAMPLING_HALT, 0, ENGINE_FINISH_ERROR);
        return;
    }
    sampling__add(sp, s, parent, &r, SAMPLING_TOKEN, 0, 0);
}

/* n > 1: s becomes choice 0 and n - 1 children are cloned from it (each with its own random
 * stream and grammar state); every choice draws from the row. 0 or -ENOMEM (no child made). */
static int sampling__fork(sampling *sp, seq *s, const float *row)
{
    int n = s->n_choices;
    seq *kids[n];
    kids[0] = s;
    for (int i = 1; i < n; i++) {
        seq *c = seq_clone(s);
        if (!c) {
            while (--i > 0) seq_destroy(kids[i]);
            return -ENOMEM;
        }
        c->n_choices = 1;
        c->index = s->index + i;
        smp_rng_seed(&c->rng, s->sp.seed + (uint64_t)c->index);
        kids[i] = c;
    }
    s->n_choices = 1;
    for (int i = 0; i < n; i++) sampling__draw(sp, kids[i], i ? s : NULL, row);
    return 0;
}

/* Scores the prompt tokens of e's log-prob rows, reporting prompt token 0 first while it is
 * unreported (also for a one-token prompt, which has no rows). Returns the next row. */
static const float *sampling__score(sampling *sp, const batch_entry *e, const float *row)
{
    seq *s = e->s;
    size_t nv = (size_t)sp->n_vocab;
    int first = s->prompt_logprobs && s->plp_next == 0, c0 = s->n_computed;
    smp_result r = {0};
    r.token = s->tokens[0];
    r.logprob = NAN;
    if (first && (e->lp_rows > 0 || c0 + e->n_new >= s->n_prompt))
        sampling__add(sp, s, NULL, &r, SAMPLING_PROMPT, 0, 0);
    for (int k = 0; k < e->lp_rows; k++, row += nv) {
        int j = c0 + e->lp_from + k + 1; /* the logits at position j - 1 score prompt token j */
        r = (smp_result){0};
        smp_score(row, sp->n_vocab, s->tokens[j], s->plp_top, &r);
        sampling__add(sp, s, NULL, &r, SAMPLING_PROMPT, j, 0);
    }
    return row;
}

/* Destroys the children the results name (a step that cannot be committed). */
static void sampling__drop_children(sampling *sp)
{
    for (int i = 0; i < sp->n_out; i++)
        if (sp->out[i].parent) seq_destroy(sp->out[i].s);
    sp->n_out = 0;
}

int sampling_step(sampling *sp, const batch_entry *e, int n, const float *logits, sampling_out **out)
{
    *out = NULL;
    sp->n_out = 0;
    int need = sampling__bound(e, n);
    if (need > sp->cap) {
        sampling_out *v = realloc(sp->out, (size_t)need * sizeof *v);
        if (!v) return -ENOMEM;
        sp->out = v;
        sp->cap = need;
    }
    const float *row = logits;
    for (int i = 0; i < n; i++) {
        seq *s = e[i].s;
        row = sampling__score(sp, &e[i], row);
        if (!e[i].samples) continue;
        const float *lr = row;
        row += sp->n_vocab;
        if (s->max_tokens == 0) { /* only scored: done without a token */
            smp_result none = {0};
            sampling__add(sp, s, NULL, &none, SAMPLING_END, 0, 0);
        } else if (s->n_choices > 1) {
            if (sampling__fork(sp, s, lr)) {
                sampling__drop_children(sp);
                return -ENOMEM;
            }
        } else {
            sampling__draw(sp, s, NULL, lr);
        }
    }
    *out = sp->out;
    return sp->n_out;
}
