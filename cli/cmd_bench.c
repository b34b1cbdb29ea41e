/*
 * cmd_bench.c — `kvserve bench`: offline throughput of the engine, in the manner of nano-vllm's
 * bench. N requests with random prompts (token ids in [3, vocab)) and output lengths drawn from
 * --input-len / --output-len, greedy with ignore_eos, all submitted at once; --shared-prefix L
 * starts every prompt with the same L tokens; --turns T runs N conversations of T turns each,
 * where a turn's prompt is the previous prompt + its output + new tokens (so each turn can hit
 * the prefix cache on the whole history).
 *
 * Definitions: output tok/s = all output tokens ÷ (last completion − first submission); TTFT =
 * first token − submission, per request; TPOT = (finish − first token) ÷ (output tokens − 1);
 * prefix-cache hit rate = cached prompt tokens ÷ all prompt tokens. With --json the last stdout
 * line is one JSON object with these figures. --json-schema FILE / --grammar FILE constrain every
 * request (greedy and ignore_eos as before, so outputs keep their lengths): the report adds the
 * compile time and the mean mask time per constrained token.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "cli/cli.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/spec.h"
#include "model/model.h"
#include "model/tokenizer.h"

typedef struct bn_req {
    int conv, turn;
    uint64_t id;
    int32_t *prompt;          /* [n_prompt] kept to build the next turn */
    int n_prompt;
    int max_tokens;
    int32_t *out;             /* [max_tokens] generated ids */
    int n_out;
    int cached;
    int64_t arrival_us, first_token_us, finish_us;
    int in_flight;
} bn_req;

typedef struct bn_state {
    engine *e;
    const model *m;
    int n_vocab, n_ctx;
    int windowed;          /* --kv-window: the context caps prompts only */
    uint64_t rng;
    int in_min, in_max, out_min, out_max;
    int32_t *prefix;
    int n_prefix;
    bn_req *reqs;             /* [n_reqs_cap] */
    int n_reqs, n_reqs_cap;
    int turns;
    int truncated;            /* turns skipped because the history outgrew the context */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int woken;
    gr_grammar *grammar;      /* --json-schema / --grammar: constrains every request, or NULL */
    double compile_ms;        /* its compilation time */
} bn_state;

static int bn_draw(bn_state *b, int lo, int hi)
{
    return lo + (int)(rng_splitmix64(&b->rng) % (uint64_t)(hi - lo + 1));
}

/* "MIN:MAX" or "N". 0 or -EINVAL. */
static int bn_range(const char *s, int *lo, int *hi)
{
    char *end;
    long a = strtol(s, &end, 10), c = a;
    if (end == s) return -EINVAL;
    if (*end == ':') {
        const char *t = end + 1;
        c = strtol(t, &end, 10);
        if (end == t) return -EINVAL;
    }
    if (*end || a < 0 || c < a || c > 1 << 24) return -EINVAL;
    *lo = (int)a;
    *hi = (int)c;
    return 0;
}

static void bn_wake(void *ud)
{
    bn_state *b = ud;
    pthread_mutex_lock(&b->mu);
    b->woken = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Submits request r (its prompt built); 0 or a negative errno. */
static int bn_submit(bn_state *b, bn_req *r)
{
    engine_request q;
    memset(&q, 0, sizeof q);
    q.prompt = malloc((size_t)r->n_prompt * sizeof(int32_t));
    if (!q.prompt) return -ENOMEM;
    memcpy(q.prompt, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    q.n_prompt = r->n_prompt;
    q.n = 1;
    q.max_tokens = r->max_tokens;
    smp_params_default(&q.sampling);
    q.sampling.temperature = 0;
    q.sampling.ignore_eos = 1;
    q.sampling.has_seed = 1;
    q.sampling.seed = rng_splitmix64(&b->rng);
    q.grammar = gr_ref(b->grammar);
    int rc = engine_submit(b->e, &q, &r->id);
    if (rc) {
        free(q.prompt);
        gr_unref(q.grammar);
        return rc;
    }
    r->in_flight = 1;
    return 0;
}

/* Adds a request whose prompt is history[0..n_hist) + n_new random tokens; returns it, or NULL
 * when it would not fit the context (or on -ENOMEM). */
static bn_req *bn_add(bn_state *b, int conv, int turn, const int32_t *hist, int n_hist, int n_new)
{
    int out = bn_draw(b, b->out_min, b->out_max);
    if (b->windowed && n_hist + n_new > b->n_ctx) {
        if (turn > 0) return NULL;
        n_new = b->n_ctx - n_hist;
    } else if (!b->windowed && n_hist + n_new + out > b->n_ctx) {
        if (turn > 0) return NULL;
        /* First turns are clamped into the context: output first, then the prompt. */
        if (out > b->n_ctx / 2) out = b->n_ctx / 2;
        if (n_hist + n_new + out > b->n_ctx) n_new = b->n_ctx - out - n_hist;
        if (n_new < 0) return NULL;
    }
    bn_req *r = &b->reqs[b->n_reqs];
    memset(r, 0, sizeof *r);
    r->conv = conv;
    r->turn = turn;
    r->n_prompt = n_hist + n_new;
    r->max_tokens = out;
    r->prompt = malloc((size_t)(r->n_prompt ? r->n_prompt : 1) * sizeof(int32_t));
    r->out = malloc((size_t)(out ? out : 1) * sizeof(int32_t));
    if (!r->prompt || !r->out) {
        free(r->prompt);
        free(r->out);
        return NULL;
    }
    memcpy(r->prompt, hist, (size_t)n_hist * sizeof(int32_t));
    for (int i = n_hist; i < r->n_prompt; i++) r->prompt[i] = 3 + (int32_t)(rng_splitmix64(&b->rng) % (uint64_t)(b->n_vocab - 3));
    if (r->n_prompt < 1) {
        free(r->prompt);
        free(r->out);
        return NULL;
    }
    b->n_reqs++;
    return r;
}

/* The next turn of r's conversation, built from r's prompt and output, submitted. Returns 1
 * when a turn was submitted, 0 when the conversation is over, or a negative errno. */
static int bn_next_turn(bn_state *b, const bn_req *r)
{
    if (r->turn + 1 >= b->turns) return 0;
    int n_hist = r->n_prompt + r->n_out;
    int32_t *hist = malloc((size_t)n_hist * sizeof *hist);
    if (!hist) return -ENOMEM;
    memcpy(hist, r->prompt, (size_t)r->n_prompt * sizeof *hist);
    memcpy(hist + r->n_prompt, r->out, (size_t)r->n_out * sizeof *hist);
    int n_new = bn_draw(b, b->in_min > 1 ? b->in_min : 1, b->in_max > 1 ? b->in_max : 1);
    bn_req *nr = bn_add(b, r->conv, r->turn + 1, hist, n_hist, n_new);
    free(hist);
    if (!nr) {
        b->truncated += b->turns - r->turn - 1;
        return 0;
    }
    int rc = bn_submit(b, nr);
    return rc ? rc : 1;
}

static int bn_cmp_double(const void *a, const void *c)
{
    double x = *(const double *)a, y = *(const double *)c;
    return x < y ? -1 : x > y;
}

/* Drains events until every request (and every turn) finished. 0 or a negative errno. */
static int bn_run(bn_state *b)
{
    int open = 0;
    for (int i = 0; i < b->n_reqs; i++) open += b->reqs[i].in_flight;
    while (open > 0) {
        engine_event *ev[256];
        int n = engine_poll(b->e, ev, 256);
        for (int i = 0; i < n; i++) {
            bn_req *r = NULL;
            for (int k = b->n_reqs - 1; k >= 0 && !r; k--)
                if (b->reqs[k].in_flight && b->reqs[k].id == ev[i]->id) r = &b->reqs[k];
            if (r) {
                for (int t = 0; t < ev[i]->n_tokens && r->n_out < r->max_tokens; t++)
                    r->out[r->n_out++] = ev[i]->tokens[t];
                if (ev[i]->finish) {
                    if (ev[i]->finish != ENGINE_FINISH_LENGTH && ev[i]->finish != ENGINE_FINISH_STOP) {
                        fprintf(stderr, "kvserve bench: a request failed (finish %d)\n", ev[i]->finish);
                        for (int k = i; k < n; k++) engine_event_free(ev[k]);
                        return -EIO;
                    }
                    r->in_flight = 0;
                    open--;
                    r->cached = ev[i]->usage.cached_tokens;
                    r->arrival_us = ev[i]->timings.arrival_us;
                    r->first_token_us = ev[i]->timings.first_token_us;
                    r->finish_us = ev[i]->timings.finish_us;
                    int rc = bn_next_turn(b, r);
                    if (rc < 0) {
                        for (int k = i; k < n; k++) engine_event_free(ev[k]);
                        return rc;
                    }
                    open += rc;
                }
            }
            engine_event_free(ev[i]);
        }
        if (n) continue;
        pthread_mutex_lock(&b->mu);
        while (!b->woken) pthread_cond_wait(&b->cv, &b->mu);
        b->woken = 0;
        pthread_mutex_unlock(&b->mu);
    }
    return 0;
}

/* One short request before the clock starts, as nano-vllm's bench does: first-touch costs
 * (weight pages, KV pages, kernel scratch) are not part of any measured request. Its tokens
 * are random, so it leaves nothing in the prefix cache that a measured prompt could hit. */
static int bn_warmup(bn_state *b)
{
    int n = b->n_ctx / 4 < 64 ? b->n_ctx / 4 : 64;
    if (n < 1) n = 1;
    int32_t *p = malloc((size_t)n * sizeof *p);
    if (!p) return -ENOMEM;
    bn_req w = {.n_prompt = n, .max_tokens = 2, .prompt = p};
    int32_t out[2];
    w.out = out;
    for (int i = 0; i < n; i++) p[i] = 3 + (int32_t)(rng_splitmix64(&b->rng) % (uint64_t)(b->n_vocab - 3));
    bn_req *reqs = b->reqs; /* run the event loop over just this request */
    int n_reqs = b->n_reqs, turns = b->turns;
    b->reqs = &w;
    b->n_reqs = 1;
    b->turns = 1;
    int rc = bn_submit(b, &w);
    if (!rc) rc = bn_run(b);
    b->reqs = reqs;
    b->n_reqs = n_reqs;
    b->turns = turns;
    free(p);
    if (rc) fprintf(stderr, "kvserve bench: warm-up request failed: %s\n", strerror(-rc));
    return rc;
}

static void bn_report(bn_state *b, const cli_opts *o, int64_t t0, int max_seqs)
{
    int64_t t_end = t0, out_tok = 0, prompt_tok = 0, cached = 0;
    double *ttft = malloc((size_t)b->n_reqs * sizeof *ttft), tpot = 0;
    int n_tpot = 0;
    for (int i = 0; i < b->n_reqs; i++) {
        bn_req *r = &b->reqs[i];
        if (r->finish_us > t_end) t_end = r->finish_us;
        out_tok += r->n_out;
        prompt_tok += r->n_prompt;
        cached += r->cached;
        ttft[i] = r->first_token_us ? (double)(r->first_token_us - r->arrival_us) / 1e3 : 0;
        if (r->n_out > 1) {
            tpot += (double)(r->finish_us - r->first_token_us) / 1e3 / (r->n_out - 1);
            n_tpot++;
        }
    }
    double wall = (double)(t_end - t0) / 1e6, mean = 0;
    for (int i = 0; i < b->n_reqs; i++) mean += ttft[i];
    mean /= b->n_reqs;
    qsort(ttft, (size_t)b->n_reqs, sizeof *ttft, bn_cmp_double);
    double p50 = ttft[(b->n_reqs - 1) / 2], p99 = ttft[(int)((b->n_reqs - 1) * 0.99 + 0.5)];
    tpot = n_tpot ? tpot / n_tpot : 0;
    engine_stats st;
    engine_get_stats(b->e, &st);
    double hit = prompt_tok ? (double)cached / (double)prompt_tok : 0;
    double tps = wall > 0 ? (double)out_tok / wall : 0;
    printf("requests:            %d", b->n_reqs);
    if (b->turns > 1) printf(" (%d conversations × up to %d turns; %d turns cut by the context)", o->requests, b->turns, b->truncated);
    printf("\nprompt tokens:       %lld (cached %lld, hit rate %.3f)\n", (long long)prompt_tok, (long long)cached, hit);
    printf("output tokens:       %lld\n", (long long)out_tok);
    printf("wall time:           %.3f s\n", wall);
    printf("output throughput:   %.1f tok/s (total %.1f tok/s)\n", tps, wall > 0 ? (double)(out_tok + prompt_tok - cached) / wall : 0);
    printf("TTFT:                mean %.1f ms, p50 %.1f ms, p99 %.1f ms\n", mean, p50, p99);
    printf("TPOT:                mean %.2f ms\n", tpot);
    printf("preemptions:         %lld; steps %lld; max_seqs %d\n", (long long)st.preemptions, (long long)st.steps, max_seqs);
    double ph[ENGINE_PHASES];
    printf("step (engine thread): overlap %s; mean ms", st.overlap ? "on" : "off");
    for (int k = 0; k < ENGINE_PHASES; k++) {
        ph[k] = st.steps ? (double)st.phase_us[k] / 1e3 / (double)st.steps : 0;
        printf(" %s %.3f", engine_phase_names[k], ph[k]);
    }
    printf("\n");
    double acc = st.spec_draft_tokens ? (double)st.spec_accepted / (double)st.spec_draft_tokens : 0;
    if (st.spec_method)
        printf("speculative:         %s; %lld verify rows, %lld draft tokens, %lld accepted (%.3f)\n",
               spec_method_name(st.spec_method), (long long)st.spec_drafts, (long long)st.spec_draft_tokens,
               (long long)st.spec_accepted, acc);
    double mask_us = st.grammar_masks ? (double)st.grammar_mask_us / (double)st.grammar_masks : 0;
    if (b->grammar)
        printf("grammar:             compiled in %.2f ms; %lld masks, %.1f us per token\n", b->compile_ms,
               (long long)st.grammar_masks, mask_us);
    if (o->json)
        printf("{\"requests\": %d, \"prompt_tokens\": %lld, \"cached_tokens\": %lld, \"output_tokens\": %lld, "
               "\"wall_s\": %.6f, \"output_tokens_per_s\": %.3f, \"ttft_ms_mean\": %.3f, \"ttft_ms_p50\": %.3f, "
               "\"ttft_ms_p99\": %.3f, \"tpot_ms_mean\": %.4f, \"preemptions\": %lld, \"prefix_cache_hit_rate\": %.6f, "
               "\"steps\": %lld, \"max_seqs\": %d, \"turns\": %d, \"grammar_compile_ms\": %.3f, \"grammar_masks\": %lld, "
               "\"grammar_mask_us\": %.3f, \"overlap\": %d, \"tokens_dropped\": %lld, \"step_ms\": {\"schedule\": %.4f, "
               "\"upload\": %.4f, \"forward\": %.4f, \"sample\": %.4f, \"output\": %.4f}, \"speculative\": \"%s\", "
               "\"spec_drafts\": %lld, \"spec_draft_tokens\": %lld, \"spec_accepted_tokens\": %lld, "
               "\"spec_acceptance\": %.6f}\n",
               b->n_reqs, (long long)prompt_tok, (long long)cached, (long long)out_tok, wall, tps, mean, p50, p99,
               tpot, (long long)st.preemptions, hit, (long long)st.steps, max_seqs, b->turns, b->compile_ms,
               (long long)st.grammar_masks, mask_us, st.overlap, (long long)st.tokens_dropped,
               ph[ENGINE_PHASE_SCHEDULE], ph[ENGINE_PHASE_UPLOAD], ph[ENGINE_PHASE_FORWARD], ph[ENGINE_PHASE_SAMPLE],
               ph[ENGINE_PHASE_OUTPUT], spec_method_name(st.spec_method), (long long)st.spec_drafts,
               (long long)st.spec_draft_tokens, (long long)st.spec_accepted, acc);
    free(ttft);
}

/* Engine configuration from the shared options, and bench's own checks. 0 or -EINVAL with a
 * message. */
static int bn_config(const cli_opts *o, engine_config *c)
{
    if (cli_engine_config(o, "bench", c)) return -EINVAL;
    if (o->requests <= 0 || o->turns < 0 || o->shared_prefix < 0) {
        fprintf(stderr, "kvserve bench: bad --requests, --turns or --shared-prefix\n");
        return -EINVAL;
    }
    int64_t total = (int64_t)o->requests * (o->turns > 1 ? o->turns : 1);
    c->max_queued_requests = total + 16 > 1 << 30 ? 1 << 30 : (int)total + 16;
    c->max_queued_tokens = INT64_MAX / 2;
    return 0;
}

int cli_bench(cli_opts *o)
{
    bn_state b;
    memset(&b, 0, sizeof b);
    if (!o->model) {
        fprintf(stderr, "kvserve bench: -m MODEL is required\n");
        return 2;
    }
    if (bn_range(o->input_len, &b.in_min, &b.in_max) || bn_range(o->output_len, &b.out_min, &b.out_max)) {
        fprintf(stderr, "kvserve bench: --input-len and --output-len take MIN:MAX or N\n");
        return 2;
    }
    engine_config c;
    if (bn_config(o, &c)) return 2;
    if (cli_grammar(o, "bench", &b.grammar, &b.compile_ms)) return 1;
    char err[512];
    model *m = NULL;
    if (model_load(o->model, &m, err, sizeof err)) {
        fprintf(stderr, "kvserve bench: %s\n", err);
        gr_unref(b.grammar);
        return 1;
    }
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "kvserve bench: %s\n", err);
        model_destroy(m);
        gr_unref(b.grammar);
        return 1;
    }
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    c.model = m;
    c.tok = tok;
    c.wake = bn_wake;
    c.wake_ud = &b;
    int rc = 1;
    b.e = engine_create(&c, err, sizeof err);
    if (!b.e) {
        fprintf(stderr, "kvserve bench: %s\n", err);
        goto out;
    }
    b.n_vocab = m->hp.n_vocab;
    b.n_ctx = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 2048;
    engine_stats est;
    engine_get_stats(b.e, &est);
    b.windowed = est.kv_window > 0;
    b.rng = (uint64_t)(o->seed >= 0 ? o->seed : 0);
    b.turns = o->turns > 1 ? o->turns : 1;
    b.n_prefix = o->shared_prefix < b.n_ctx ? o->shared_prefix : b.n_ctx - 1;
    b.prefix = malloc((size_t)(b.n_prefix + 1) * sizeof(int32_t));
    b.n_reqs_cap = o->requests * b.turns;
    b.reqs = calloc((size_t)b.n_reqs_cap, sizeof *b.reqs);
    if (!b.prefix || !b.reqs) goto out;
    for (int i = 0; i < b.n_prefix; i++) b.prefix[i] = 3 + (int32_t)(rng_splitmix64(&b.rng) % (uint64_t)(b.n_vocab - 3));
    for (int i = 0; i < o->requests; i++) {
        int len = bn_draw(&b, b.in_min, b.in_max);
        int n_new = len > b.n_prefix ? len - b.n_prefix : 1;
        if (!bn_add(&b, i, 0, b.prefix, b.n_prefix, n_new)) {
            fprintf(stderr, "kvserve bench: request %d does not fit the context of %d tokens\n", i, b.n_ctx);
            goto out;
        }
    }
    if (bn_warmup(&b)) goto out;
    int64_t t0 = clk_now_us();
    for (int i = 0; i < b.n_reqs; i++) {
        int s = bn_submit(&b, &b.reqs[i]);
        if (s) {
            fprintf(stderr, "kvserve bench: submit failed: %s (prompt %d + output %d tokens)\n", strerror(-s),
                    b.reqs[i].n_prompt, b.reqs[i].max_tokens);
            goto out;
        }
    }
    if (bn_run(&b)) goto out;
    engine_stats st; /* for the resolved max_seqs */
    engine_get_stats(b.e, &st);
    bn_report(&b, o, t0, st.max_seqs);
    rc = 0;
out:
    engine_destroy(b.e, 0);
    for (int i = 0; i < b.n_reqs; i++) {
        free(b.reqs[i].prompt);
        free(b.reqs[i].out);
    }
    free(b.reqs);
    free(b.prefix);
    tok_destroy(tok);
    model_destroy(m);
    gr_unref(b.grammar);
    pthread_mutex_destroy(&b.mu);
    pthread_cond_destroy(&b.cv);
    return rc;
}
