/*
 * engine_streams.h — what the engine tests that run one workload two ways (speculation on and
 * off, overlap on and off) share: every choice's stream as the events gave it (tokens, log-probs,
 * text, end, usage), collected from engine_poll, and the check that two runs' streams are the
 * same. Included after tests/engine_harness.h.
 */
#ifndef KVSERVE_TESTS_ENGINE_STREAMS_H
#define KVSERVE_TESTS_ENGINE_STREAMS_H

#include <math.h>
#include <string.h>

#include "base/clock.h"
#include "tests/engine_harness.h"

typedef struct te_choice {
    int32_t toks[600];
    float lps[600];
    int32_t top0[600];
    int n_toks, n_events;
    char text[4096];
    int finish, stop_str;
    int32_t stop_token;
    engine_usage usage;
    double cum;
} te_choice;

typedef struct te_req {
    uint64_t id;
    int n;
    te_choice c[4];
} te_req;

/* Polls until n_final choices of reqs[0 .. n) have finished (120 s deadline). */
static inline void te_streams_collect(engine *e, te_req *reqs, int n, int n_final)
{
    int got = 0;
    int64_t deadline = clk_now_us() + 120000000;
    while (got < n_final) {
        engine_event *ev[64];
        int k = engine_poll(e, ev, 64);
        for (int i = 0; i < k; i++) {
            te_req *q = NULL;
            for (int j = 0; j < n; j++)
                if (reqs[j].id == ev[i]->id) q = &reqs[j];
            cr_assert_not_null(q);
            te_choice *c = &q->c[ev[i]->index];
            cr_assert_eq(c->finish, 0, "an event after the final one");
            for (int t = 0; t < ev[i]->n_tokens; t++) {
                cr_assert_lt(c->n_toks, 600);
                c->toks[c->n_toks] = ev[i]->tokens[t];
                c->lps[c->n_toks] = ev[i]->logprobs ? ev[i]->logprobs[t].logprob : 0.0f;
                c->top0[c->n_toks] = ev[i]->logprobs && ev[i]->logprobs[t].n_top ? ev[i]->logprobs[t].top_ids[0] : -1;
                c->n_toks++;
            }
            c->n_events++;
            c->cum = ev[i]->cum_logprob;
            strncat(c->text, ev[i]->text, sizeof c->text - strlen(c->text) - 1);
            if (ev[i]->finish) {
                c->finish = ev[i]->finish;
                c->stop_str = ev[i]->stop_str;
                c->stop_token = ev[i]->stop_token;
                c->usage = ev[i]->usage;
                got++;
            }
            engine_event_free(ev[i]);
        }
        if (k) continue;
        cr_assert_lt(clk_now_us(), deadline, "timed out (%d of %d choices finished)", got, n_final);
        pthread_mutex_lock(&te_w.mu);
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 50 * 1000000L;
        dl.tv_sec += dl.tv_nsec / 1000000000L;
        dl.tv_nsec %= 1000000000L;
        if (!te_w.n) pthread_cond_timedwait(&te_w.cv, &te_w.mu, &dl);
        te_w.n = 0;
        pthread_mutex_unlock(&te_w.mu);
    }
}

/* The two runs' streams are the same: tokens, log-probs, texts, ends, usage. */
static inline void te_streams_same(const te_req *a, const te_req *b, int n, const char *what)
{
    for (int r = 0; r < n; r++)
        for (int c = 0; c < a[r].n; c++) {
            const te_choice *x = &a[r].c[c], *y = &b[r].c[c];
            cr_assert_eq(x->n_toks, y->n_toks, "%s: request %d choice %d: %d tokens, then %d", what, r, c,
                         x->n_toks, y->n_toks);
            for (int t = 0; t < x->n_toks; t++) {
                cr_assert_eq(x->toks[t], y->toks[t], "%s: request %d choice %d token %d", what, r, c, t);
                cr_assert(x->lps[t] == y->lps[t] || (x->lps[t] != x->lps[t] && y->lps[t] != y->lps[t]),
                          "%s: request %d choice %d log-prob %d: %g vs %g", what, r, c, t, x->lps[t], y->lps[t]);
                cr_assert_eq(x->top0[t], y->top0[t]);
            }
            cr_assert_str_eq(x->text, y->text, "%s: request %d choice %d", what, r, c);
            cr_assert_eq(x->finish, y->finish, "%s: request %d choice %d", what, r, c);
            cr_assert_eq(x->stop_str, y->stop_str, "%s: request %d choice %d", what, r, c);
            cr_assert_eq(x->stop_token, y->stop_token, "%s: request %d choice %d", what, r, c);
            cr_assert_eq(x->usage.completion_tokens, y->usage.completion_tokens, "%s: request %d choice %d usage", what,
                         r, c);
            cr_assert(fabs(x->cum - y->cum) <= 1e-9 * (1 + fabs(x->cum)), "%s: request %d choice %d cum %g vs %g", what,
                      r, c, x->cum, y->cum);
        }
}

#endif
