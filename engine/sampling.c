/*
 * sampling.c — the sample phase of a step (see sampling.h): prompt scoring, grammar masks,
 * forks and the rows a backend draws from, then the results. The logit rows come in
 * batch_build's order: per entry, its prompt log-prob rows, then its sampling row when it
 * samples.
 *
 * Every buffer is sized before anything is created, so the only failure left in prepare is a
 * fork's clone or the arena's growth; both leave no child behind.
 */
#include "engine/sampling.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/finish.h"

/* One result to be: its sequence and where its result comes from. */
typedef struct sampling_slot {
    seq *s, *parent;
    int kind;               /* enum sampling_kind */
    int pos;                /* SAMPLING_PROMPT: the prompt index */
    int finish;             /* SAMPLING_HALT decided at prepare */
    int32_t row;            /* its row, or -1 (a result made on the host) */
    int spec;               /* a verify row's index j within its sequence's run (sampling_out.spec) */
} sampling_slot;

struct sampling {
    int n_vocab;
    const int32_t *eog_ids;  /* [n_eog] borrowed */
    int n_eog;
    uint32_t *mask;          /* [GR_MASK_WORDS(n_vocab)] the grammar mask being applied */
    smp_arena arena;         /* the prepared rows' lists */
    smp_row *rows;           /* [cap] */
    sampling_slot *slots;    /* [cap] */
    sampling_draw *draws;    /* [cap] */
    sampling_out *out;       /* [cap] this step's results */
    int n_rows, n_slots, n_draws, n_lp, n_out, cap;
    int sync;
    int adopted;             /* the children of the last prepare joined the scheduler */
    smp_work work;           /* sampling_step's host run */
    int32_t *ids;            /* [cap] sampling_step's tokens */
    smp_result *lps;         /* [cap] sampling_step's log-prob blocks */
    sampling_stats st;
};

sampling *sampling_create(int n_vocab, const int32_t *eog_ids, int n_eog)
{
    sampling *sp = calloc(1, sizeof *sp);
    if (!sp) return NULL;
    sp->n_vocab = n_vocab;
    sp->eog_ids = eog_ids;
    sp->n_eog = n_eog;
    sp->mask = malloc(GR_MASK_WORDS(n_vocab) * sizeof *sp->mask);
    if (!sp->mask || smp_arena_init(&sp->arena, n_vocab) || smp_work_init(&sp->work, n_vocab)) {
        sampling_destroy(sp);
        return NULL;
    }
    return sp;
}

void sampling_destroy(sampling *sp)
{
    if (!sp) return;
    sampling_drop_children(sp);
    free(sp->mask);
    smp_arena_fini(&sp->arena);
    smp_work_fini(&sp->work);
    free(sp->rows);
    free(sp->slots);
    free(sp->draws);
    free(sp->out);
    free(sp->ids);
    free(sp->lps);
    free(sp);
}

void sampling_get_stats(const sampling *sp, sampling_stats *out)
{
    *out = sp->st;
}

/* Slots the plan can produce: its rows, prompt token 0 once per scoring sequence, and one
 * draw per choice. */
static int sampling__bound(const batch_entry *e, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        const seq *s = e[i].s;
        k += e[i].lp_rows + (s->prompt_logprobs && s->plp_next == 0);
        if (e[i].samples) k += (s->n_choices > 1 ? s->n_choices : 1) + e[i].n_draft;
    }
    return k;
}

/* Room for need slots, rows, draws and results. 0 or -ENOMEM. */
static int sampling__reserve(sampling *sp, int need)
{
    if (need <= sp->cap) return 0;
    int c = sp->cap ? sp->cap : 64;
    while (c < need) c *= 2;
    void *p[6] = {realloc(sp->rows, (size_t)c * sizeof *sp->rows), NULL, NULL, NULL, NULL, NULL};
    if (p[0]) sp->rows = p[0];
    if (p[0] && (p[1] = realloc(sp->slots, (size_t)c * sizeof *sp->slots))) sp->slots = p[1];
    if (p[1] && (p[2] = realloc(sp->draws, (size_t)c * sizeof *sp->draws))) sp->draws = p[2];
    if (p[2] && (p[3] = realloc(sp->out, (size_t)c * sizeof *sp->out))) sp->out = p[3];
    if (p[3] && (p[4] = realloc(sp->ids, (size_t)c * sizeof *sp->ids))) sp->ids = p[4];
    if (p[4] && (p[5] = realloc(sp->lps, (size_t)c * sizeof *sp->lps))) sp->lps = p[5];
    if (!p[5]) return -ENOMEM;
    sp->cap = c;
    return 0;
}

/* Appends a slot, counting a flight of its sequence. */
static void sampling__slot(sampling *sp, seq *s, seq *parent, int kind, int pos, int finish, int32_t row)
{
    sp->slots[sp->n_slots++] = (sampling_slot){s, parent, kind, pos, finish, row, 0};
    s->flights++;
}

static void sampling__draw_entry(sampling *sp, seq *s, seq *parent, int32_t row, int32_t scored)
{
    sp->draws[sp->n_draws++] = (sampling_draw){s, parent, row, scored};
}

/* The grammar's mask for s's next token into sp->mask; returns the allowed count. */
static int sampling__mask_of(sampling *sp, gr_matcher *gm)
{
    int64_t t0 = clk_now_us();
    int n = gr_matcher_fill_mask(gm, sp->mask);
    sp->st.grammar_masks++;
    sp->st.grammar_mask_us += clk_now_us() - t0;
    return n;
}

static int sampling__mask(sampling *sp, seq *s)
{
    return sampling__mask_of(sp, s->gm);
}

/* Fills row sp->rows[sp->n_rows]: s's token j places past its known ones (j > 0: a verify row,
 * whose history holds the drafts before it) from logit row lr. 0 or -ENOMEM. */
static int sampling__row(sampling *sp, seq *s, int32_t lr, int j, const uint32_t *allow)
{
    int pend = s->pending >= 0;
    smp_history h = {s->tokens, s->n_prompt, s->tokens + s->n_prompt, seq_n_output(s) - pend + j};
    smp_row *r = &sp->rows[sp->n_rows];
    if (smp_row_fill(r, &sp->arena, &s->sp, &s->rng, s->n_tokens + j, lr, &h, s->pending, sp->eog_ids, sp->n_eog,
                     allow))
        return -ENOMEM;
    r->lp = s->sp.n_logprobs >= 0 ? sp->n_lp++ : -1;
    return 0;
}

/* The SAMPLE row of s's next token from logit row lr, under its grammar's mask when
 * constrained; a choice the grammar cannot continue halts without a row. 0 or -ENOMEM. */
static int sampling__draw(sampling *sp, seq *s, seq *parent, int32_t lr)
{
    const uint32_t *allow = NULL;
    sp->sync |= s->gm != NULL || smp_params_has_long_bad_words(&s->sp);
    if (s->gm) {
        if (sampling__mask(sp, s) == 0) {
            int finish = gr_matcher_is_accepting(s->gm) ? ENGINE_FINISH_STOP : ENGINE_FINISH_LENGTH;
            sampling__slot(sp, s, parent, SAMPLING_HALT, 0, finish, -1);
            if (parent) sampling__draw_entry(sp, s, parent, -1, -1);
            return 0;
        }
        allow = sp->mask;
    }
    if (sampling__row(sp, s, lr, 0, allow)) return -ENOMEM;
    sampling__slot(sp, s, parent, SAMPLING_TOKEN, 0, 0, sp->n_rows);
    sampling__draw_entry(sp, s, parent, sp->n_rows, -1);
    sp->n_rows++;
    return 0;
}

/* A verify entry's rows (spec.h): row j draws the token at position n_tokens + j from logit row
 * lr + j, with the drafts d0 .. d(j-1) in its history and, when constrained, the mask of the
 * grammar state after them. Rows stop after the first draft the grammar refuses (no later row
 * could be accepted) and before a state that allows nothing (the next step halts there, as plain
 * decoding does). Row 0 is the sequence's ordinary draw. 0 or -ENOMEM. */
static int sampling__verify(sampling *sp, seq *s, int32_t lr, int nd)
{
    if (!s->gm) sp->sync = 1; /* the next proposal needs the accepted tokens */
    gr_matcher *gm = s->gm ? gr_matcher_clone(s->gm) : NULL;
    if (s->gm && !gm) return -ENOMEM;
    int rc = 0;
    for (int j = 0; j <= nd && !rc; j++) {
        const uint32_t *allow = NULL;
        if (gm) {
            sp->sync = 1;
            if (sampling__mask_of(sp, gm) == 0) {
                if (j == 0) rc = sampling__draw(sp, s, NULL, lr); /* halts without a row */
                break;
            }
            allow = sp->mask;
        }
        if (sampling__row(sp, s, lr + j, j, allow)) {
            rc = -ENOMEM;
            break;
        }
        sampling__slot(sp, s, NULL, SAMPLING_TOKEN, 0, 0, sp->n_rows);
        sp->slots[sp->n_slots - 1].spec = j;
        if (j == 0) sampling__draw_entry(sp, s, NULL, sp->n_rows, -1);
        sp->n_rows++;
        if (j < nd && gm && gr_matcher_accept(gm, s->draft[j])) break;
    }
    gr_matcher_destroy(gm);
    return rc;
}

/* n > 1: s becomes choice 0 and n - 1 children are cloned from it (each with its choice's key
 * and its own grammar state); every choice draws from logit row lr. 0 or -ENOMEM (no child). */
static int sampling__fork(sampling *sp, seq *s, int32_t lr)
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
        smp_rng_key(&c->rng, s->sp.seed, (uint32_t)c->index);
        kids[i] = c;
    }
    s->n_choices = 1;
    for (int i = 0; i < n; i++)
        if (sampling__draw(sp, kids[i], i ? s : NULL, lr)) {
            /* the children that drew are in the slots (the caller drops them); the rest go now */
            for (int j = i > 0 ? i : 1; j < n; j++) seq_destroy(kids[j]);
            s->n_choices = n;
            return -ENOMEM;
        }
    return 0;
}

/* The SCORE rows of e's prompt log-prob rows, reporting prompt token 0 first while it is
 * unreported (also for a one-token prompt, which has no rows). Returns the next logit row. */
static int32_t sampling__score(sampling *sp, const batch_entry *e, int32_t lr)
{
    seq *s = e->s;
    int first = s->prompt_logprobs && s->plp_next == 0, c0 = s->n_computed;
    int scored = -1;
    if (first && (e->lp_rows > 0 || c0 + e->n_new >= s->n_prompt)) {
        sampling__slot(sp, s, NULL, SAMPLING_PROMPT, 0, 0, -1);
        scored = 1;
    }
    for (int k = 0; k < e->lp_rows; k++, lr++) {
        int j = c0 + e->lp_from + k + 1; /* the logits at position j - 1 score prompt token j */
        smp_row *r = &sp->rows[sp->n_rows];
        memset(r, 0, sizeof *r);
        r->kind = SMP_ROW_SCORE;
        r->logits = lr;
        r->token = s->tokens[j];
        r->n_logprobs = s->plp_top < 0 ? 0 : s->plp_top < SMP_MAX_LOGPROBS ? s->plp_top : SMP_MAX_LOGPROBS;
        r->lp = sp->n_lp++;
        r->pending = r->fallback = r->mask = -1;
        sampling__slot(sp, s, NULL, SAMPLING_PROMPT, j, 0, sp->n_rows++);
        scored = j + 1;
    }
    if (scored >= 0) sampling__draw_entry(sp, s, NULL, -1, scored);
    return lr;
}

void sampling_adopt(sampling *sp)
{
    sp->adopted = 1;
}

void sampling_drop_children(sampling *sp)
{
    for (int i = 0; i < sp->n_slots; i++) {
        sampling_slot *sl = &sp->slots[i];
        if (sl->parent && !sp->adopted) {
            seq_destroy(sl->s);
            sl->s = NULL;
        } else if (sl->s) {
            sl->s->flights--;
        }
    }
    sp->n_slots = sp->n_rows = sp->n_draws = 0;
}

int sampling_prepare(sampling *sp, const batch_entry *e, int n, sampling_plan *p)
{
    memset(p, 0, sizeof *p);
    sp->n_rows = sp->n_slots = sp->n_draws = sp->n_lp = sp->n_out = 0;
    sp->sync = sp->adopted = 0;
    smp_arena_reset(&sp->arena);
    if (sampling__reserve(sp, sampling__bound(e, n))) return -ENOMEM;
    int32_t lr = 0;
    for (int i = 0; i < n; i++) {
        seq *s = e[i].s;
        lr = sampling__score(sp, &e[i], lr);
        if (!e[i].samples) continue;
        int32_t row = lr++;
        int rc = 0;
        if (s->max_tokens == 0) /* only scored: done without a token */
            sampling__slot(sp, s, NULL, SAMPLING_END, 0, 0, -1);
        else if (s->n_choices > 1)
            rc = sampling__fork(sp, s, row);
        else if (e[i].n_draft > 0)
            rc = sampling__verify(sp, s, row, e[i].n_draft);
        else
            rc = sampling__draw(sp, s, NULL, row);
        lr += e[i].n_draft;
        if (rc) {
            sampling_drop_children(sp);
            return rc;
        }
    }
    p->rows = (smp_batch){sp->n_rows, sp->rows, sp->arena.n, sp->arena.v, sp->n_lp, sp->n_vocab};
    p->draws = sp->draws;
    p->n_draws = sp->n_draws;
    p->sync = sp->sync;
    return 0;
}

/* The result of one slot. */
static sampling_out sampling__result(sampling *sp, const sampling_slot *sl, const int32_t *ids, const smp_result *lps)
{
    sampling_out o = {sl->s, sl->parent, {0}, sl->kind, sl->pos, sl->finish, sl->spec, 0, 0, -1};
    if (sl->row < 0) {
        if (sl->kind == SAMPLING_PROMPT) { /* prompt token 0: no log-prob */
            o.r.token = sl->s->tokens[0];
            o.r.logprob = NAN;
        }
        return o;
    }
    const smp_row *r = &sp->rows[sl->row];
    if (r->lp >= 0) o.r = lps[r->lp];
    o.r.token = r->kind == SMP_ROW_SCORE ? r->token : ids[sl->row];
    if (sl->kind == SAMPLING_TOKEN && sl->s->gm && gr_matcher_accept(sl->s->gm, o.r.token)) {
        memset(&o.r, 0, sizeof o.r);
        o.kind = SAMPLING_HALT;
        o.finish = ENGINE_FINISH_ERROR;
    }
    return o;
}

int sampling_finish(sampling *sp, const int32_t *ids, const smp_result *lps, sampling_out **out)
{
    int n = 0, alive = 0;
    for (int i = 0; i < sp->n_slots; i++) {
        const sampling_slot *sl = &sp->slots[i];
        /* a verify row counts only while every draft before it was drawn (spec.h) */
        int take = sl->spec == 0 || (alive && sp->out[n - 1].r.token == sl->s->draft[sl->spec - 1]);
        alive = 0;
        if (take) {
            sp->out[n] = sampling__result(sp, sl, ids, lps);
            alive = sp->out[n++].kind == SAMPLING_TOKEN;
        }
        sl->s->flights--;
    }
    sp->n_out = n;
    sp->n_slots = 0; /* the children now belong to the results */
    *out = sp->out;
    return sp->n_out;
}

int sampling_step(sampling *sp, const batch_entry *e, int n, const float *logits, sampling_out **out)
{
    *out = NULL;
    sampling_plan p;
    int rc = sampling_prepare(sp, e, n, &p);
    if (rc) return rc;
    smp_rows_run(&p.rows, 0, p.rows.n_rows, logits, NULL, &sp->work, sp->ids, sp->lps);
    return sampling_finish(sp, sp->ids, sp->lps, out);
}
