/*
 * cmd_generate.c — `kvserve generate`: one prompt, one completion, streamed to stdout.
 *
 * The simplest complete path through the engine's parts, without the scheduler: model + tokenizer
 * from the GGUF, a backend, a KV arena just big enough for prompt + completion (--kv-memory only
 * caps it), prefill in chunks of up to --max-batch-tokens, then one decode step per token.
 * Text is written as it is produced; bytes of an unfinished UTF-8 character are held back until
 * the character completes. The last line on stderr is a JSON object with the timings.
 * --json-schema FILE / --grammar FILE constrain the completion (grammar/grammar.h): each token is
 * drawn under the matcher's mask, and the completion ends when the structure is complete.
 *
 * With --speculative ngram|draft (or --draft-model) the one request runs through the engine
 * instead (engine/engine.h, configured by cli_engine_config as `bench` is), so the scheduler's
 * verification, adaptive K and proposers are the ones `serve` uses. Everything else stays the
 * same: the prompt's tokens, the sampling parameters and the seed (the engine keys a draw by
 * seed and position as smp_sample_masked does here, so a seeded run prints the same tokens with
 * speculation on or off), the text printed from the tokens by the same code, and the stats line,
 * which then counts the drafts and what was accepted.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cache/block_pool.h"
#include "cache/kv.h"
#include "cli/device.h"
#include "cli/cli.h"
#include "cuda/cuda_backend.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "engine/spec.h"
#include "model/model.h"
#include "model/tokenizer.h"

/* Everything one generation holds; gen__fini releases what is set. */
typedef struct gen_state {
    model *m;
    tokenizer *tok;
    backend *be;
    fwd *f;
    block_pool *bp;
    kv_geom geom;
    int32_t *blocks; /* [n_blocks] the sequence's block table */
    int32_t n_blocks;
    int32_t *ids; /* [n_prompt + n_predict] prompt then generated ids */
    int n_prompt;
    int n_predict; /* after capping to context and KV */
    int chunk;     /* most tokens per prefill step */
    float *logits; /* [n_vocab] */
    int64_t cap_tokens; /* tokens the context and the --kv-memory cap hold */
    /* streaming text */
    char pend[64]; /* held-back bytes of an unfinished UTF-8 character */
    int n_pend;
    int strip_space; /* drop the leading space of the first text produced */
} gen_state;

/* What the stats line reports of a run, on either path. */
typedef struct gen_stats {
    int n_gen;             /* tokens generated (an ending end-of-generation token not counted) */
    int n_decode;          /* tokens drawn after the first one (an ending end-of-generation
                              token counted: the engine's timings include its step) */
    double prefill_ms;     /* start to the first token's logits (engine: submission to the
                              first token drawn) */
    double decode_ms;      /* first token to the last one (engine: as its timings say) */
    int spec_method;       /* enum spec_method: 0 on the plain loop */
    int64_t spec_drafts;   /* verify rows run */
    int64_t spec_draft_tokens, spec_accepted;
} gen_stats;

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8 character. */
static int gen__utf8_complete(const char *s, int n)
{
    int i = n - 1, back = 0;
    while (i >= 0 && back < 3 && ((unsigned char)s[i] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    if (i < 0) return n;
    unsigned char c = (unsigned char)s[i];
    int need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return (n - i) < need ? i : n;
}

/* Appends one token's bytes to the output, holding back an unfinished character. */
static void gen__emit_token(gen_state *g, int32_t id)
{
    char buf[256];
    int n = tok_token_bytes(g->tok, id, 0, buf, (int)sizeof buf);
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    const char *p = buf;
    if (g->strip_space && n > 0) {
        if (p[0] == ' ') {
            p++;
            n--;
        }
        g->strip_space = 0;
    }
    for (int i = 0; i < n; i++) {
        if (g->n_pend == (int)sizeof g->pend) { /* not UTF-8 after all: let it through */
            fwrite(g->pend, 1, (size_t)g->n_pend, stdout);
            g->n_pend = 0;
        }
        g->pend[g->n_pend++] = p[i];
    }
    int ok = gen__utf8_complete(g->pend, g->n_pend);
    if (ok > 0) {
        fwrite(g->pend, 1, (size_t)ok, stdout);
        memmove(g->pend, g->pend + ok, (size_t)(g->n_pend - ok));
        g->n_pend -= ok;
        fflush(stdout);
    }
}

static void gen__fini(gen_state *g)
{
    fwd_destroy(g->f);
    be_destroy(g->be);
    bp_destroy(g->bp);
    tok_destroy(g->tok);
    model_destroy(g->m);
    free(g->blocks);
    free(g->ids);
    free(g->logits);
}

/* Tokenizes the prompt into g->ids (BOS alone for an empty prompt). 0 or -1 after a message. */
static int gen__tokenize(gen_state *g, const cli_opts *o)
{
    const char *prompt = o->prompt ? o->prompt : "";
    size_t len = strlen(prompt);
    int n = len ? tok_encode(g->tok, prompt, len, 1, 0, NULL, 0) : 0;
    if (n < 0) {
        fprintf(stderr, "kvserve generate: cannot tokenize the prompt (%s)\n", strerror(-n));
        return -1;
    }
    if (n == 0 && tok_bos(g->tok) < 0) {
        fprintf(stderr, "kvserve generate: empty prompt and the model has no BOS token\n");
        return -1;
    }
    int cap = (n ? n : 1) + (o->n_predict > 0 ? o->n_predict : 0);
    g->ids = malloc((size_t)cap * sizeof *g->ids);
    if (!g->ids) return -1;
    if (n)
        tok_encode(g->tok, prompt, len, 1, 0, g->ids, n);
    else
        g->ids[0] = tok_bos(g->tok);
    g->n_prompt = n ? n : 1;
    g->n_predict = o->n_predict > 0 ? o->n_predict : 0;
    g->strip_space =
        g->n_prompt == 1 && g->ids[0] == tok_bos(g->tok) && tok_strips_space_after_bos(g->tok);
    return 0;
}

/* Loads the model and the tokenizer, tokenizes the prompt and caps -n by the context and the
 * --kv-memory cap. The plain loop needs KV for every token but the last (want = prompt + n - 1);
 * the engine holds a request to prompt + max_tokens ≤ its context (via_engine = 1: want = prompt + n).
 * 0, or -1 after printing the reason. */
static int gen__load(gen_state *g, const cli_opts *o, int via_engine)
{
    char err[512];
    if (!o->model) {
        fprintf(stderr, "kvserve generate: -m MODEL is required\n");
        return -1;
    }
    int rc = model_load(o->model, &g->m, err, sizeof err);
    if (rc) {
        fprintf(stderr, "kvserve generate: %s\n", err);
        return -1;
    }
    const model_hparams *hp = &g->m->hp;
    if (!(g->tok = tok_create(g->m->gguf, err, sizeof err))) {
        fprintf(stderr, "kvserve generate: %s\n", err);
        return -1;
    }
    if (gen__tokenize(g, o)) return -1;
    int kvd = kv_dtype_parse(o->kv_dtype);
    if (kvd < 0 || o->block_size <= 0) {
        fprintf(stderr, "kvserve generate: bad --kv-dtype '%s' or --block-size %d\n",
                o->kv_dtype ? o->kv_dtype : "", o->block_size);
        return -1;
    }
    g->geom = model_kv_geom(hp, o->block_size, kvd);

    int64_t want = (int64_t)g->n_prompt + (via_engine ? g->n_predict : g->n_predict > 0 ? g->n_predict - 1 : 0);
    /* the engine's context when the file names none */
    int64_t cap_tokens = hp->n_ctx_train > 0 ? hp->n_ctx_train : via_engine ? 2048 : want;
    if (o->kv_memory_bytes) {
        int64_t by_mem = kv_blocks_for_budget(&g->geom, o->kv_memory_bytes) * o->block_size;
        if (by_mem < cap_tokens) cap_tokens = by_mem;
    }
    if (g->n_prompt > cap_tokens) {
        fprintf(stderr,
                "kvserve generate: the prompt (%d tokens) exceeds the context or KV budget (%lld "
                "tokens)\n",
                g->n_prompt, (long long)cap_tokens);
        return -1;
    }
    if (want > cap_tokens) {
        g->n_predict = (int)(cap_tokens - g->n_prompt + (via_engine ? 0 : 1));
        fprintf(stderr, "kvserve generate: -n capped to %d by the context or KV budget\n",
                g->n_predict);
        want = cap_tokens;
    }
    g->cap_tokens = want;
    return 0;
}

/* The plain loop's backend, block pool and forward pass, with an arena just big enough. 0, or -1
 * after printing the reason. */
static int gen__setup_fwd(gen_state *g, const cli_opts *o)
{
    char err[512];
    const model_hparams *hp = &g->m->hp;
    int64_t want = g->cap_tokens;
    g->n_blocks = (int32_t)((want + o->block_size - 1) / o->block_size);
    g->chunk = o->max_batch_tokens > 0 ? o->max_batch_tokens : 512;
    if (g->chunk > g->n_prompt) g->chunk = g->n_prompt;

    if (be_set_cuda_graphs(o->cuda_graphs, err, sizeof err)) {
        fprintf(stderr, "kvserve generate: %s\n", err);
        return -1;
    }
    if (!(g->be = be_create(o->device, o->threads, err, sizeof err))) {
        fprintf(stderr, "kvserve generate: %s\n", err);
        return -1;
    }
    g->bp = bp_create(g->n_blocks);
    g->blocks = malloc((size_t)g->n_blocks * sizeof *g->blocks);
    g->logits = malloc((size_t)hp->n_vocab * sizeof *g->logits);
    if (!g->bp || !g->blocks || !g->logits || bp_alloc(g->bp, g->n_blocks, g->blocks)) {
        fprintf(stderr, "kvserve generate: out of memory\n");
        return -1;
    }
    g->f = fwd_create(g->m, g->be, &g->geom, &g->n_blocks, g->chunk, 1, err, sizeof err);
    if (!g->f) {
        fprintf(stderr, "kvserve generate: %s\n", err);
        return -1;
    }
    if (o->verbose)
        fprintf(stderr, "kvserve generate: %s; KV %s, %zu bytes/token, %d blocks of %d tokens\n",
                g->be->desc, kv_dtype_name(g->geom.dtype), kv_bytes_per_token(&g->geom), (int)g->n_blocks,
                o->block_size);
    return 0;
}

/* Runs ids[start .. start+n) at positions start.. ; logits of the last one when want_logits. */
static int gen__step(gen_state *g, int start, int n, int want_logits, int32_t *pos, int32_t *slots)
{
    int bs = g->geom.block_size;
    for (int i = 0; i < n; i++) {
        int p = start + i;
        pos[i] = p;
        slots[i] = g->blocks[p / bs] * bs + p % bs;
    }
    int32_t q_start[2] = {0, n}, ctx_len = start + n, row = n - 1;
    be_batch b = {
        .n_tokens = n,
        .tokens = g->ids + start,
        .positions = pos,
        .n_seqs = 1,
        .q_start = q_start,
        .n_logits = want_logits ? 1 : 0,
        .logit_rows = &row,
        .n_kv = 1,
        .kv = {{.slots = slots, .ctx_len = &ctx_len, .block_table = g->blocks, .bt_stride = g->n_blocks}},
    };
    return fwd_run(g->f, &b, g->logits);
}

/* The sampling parameters and the seed (--seed, or one drawn from the clock); *rng keyed by it. */
static void gen__params(const cli_opts *o, smp_params *p, smp_rng *rng, uint64_t *seed_out)
{
    smp_params_default(p);
    p->temperature = (float)o->temperature;
    p->top_p = (float)o->top_p;
    p->top_k = o->top_k;
    p->min_p = (float)o->min_p;
    uint64_t seed = (uint64_t)o->seed;
    if (o->seed < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    }
    smp_rng_seed(rng, seed);
    *seed_out = seed;
}

/* Prints the n_gen-th generated token (1-based): its id with --ids, else its text. */
static void gen__print(gen_state *g, const cli_opts *o, int32_t id, int n_gen)
{
    if (o->ids) {
        printf(n_gen > 1 ? " %d" : "%d", id);
        fflush(stdout);
    } else {
        gen__emit_token(g, id);
    }
}

/* The sampling options' ranges (as the server checks them): NULL, or what is wrong. */
static const char *gen__check_sampling(const cli_opts *o)
{
    if (!(o->temperature >= 0) || o->temperature > 1e6) return "--temperature must be 0 (greedy) or more";
    if (!(o->top_p > 0 && o->top_p <= 1)) return "--top-p must be in (0, 1]";
    if (o->top_k < 0) return "--top-k must be 0 (off) or more";
    if (!(o->min_p >= 0 && o->min_p <= 1)) return "--min-p must be in [0, 1]";
    if (o->n_predict < 0) return "-n must be 0 or more";
    return NULL;
}

/* On a GPU, the decode bound and how close the measured rate came to it, as JSON members (a
 * leading comma) in out; "" on the CPU. A decode token reads every weight of the model once
 * (fwd_weight_bytes_per_token) and the KV of its context, at the device's copy bandwidth
 * (cuda_copy_gbps: measured once with a device-to-device copy); the context is taken at its mean
 * over the decode steps. */
static void gen__bound(const gen_state *g, int n_gen, double decode_tps, char *out, size_t n)
{
    out[0] = 0;
    if (strcmp(g->be->name, "cuda") || n_gen < 2) return;
    double gbps = cuda_copy_gbps(g->be);
    if (!(gbps > 0)) return;
    double ctx = g->n_prompt + n_gen / 2.0;
    double bytes = fwd_weight_bytes_per_token(g->f) + (double)kv_bytes_per_token(&g->geom) * ctx;
    double bound = gbps * 1e9 / bytes;
    snprintf(out, n,
             ", \"copy_gb_per_s\": %.0f, \"bytes_per_token\": %.0f, \"bound_tokens_per_s\": %.2f, "
             "\"fraction_of_bound\": %.3f",
             gbps, bytes, bound, decode_tps / bound);
}

/* The plain loop: prefill in chunks, then one decode step per token, each drawn here. 0, or a
 * negative errno from the forward pass. */
static int gen__loop(gen_state *g, const cli_opts *o, gr_grammar *gram, gen_stats *st)
{
    int n_vocab = g->m->hp.n_vocab;
    /* --json-schema / --grammar: a matcher over the model's vocabulary */
    gr_vocab *gvoc = gram ? gr_vocab_create(g->tok, n_vocab) : NULL;
    gr_matcher *gm = gvoc ? gr_matcher_create(gram, gvoc) : NULL;
    uint32_t *mask = gm ? malloc(GR_MASK_WORDS(n_vocab) * sizeof *mask) : NULL;
    int32_t *pos = malloc((size_t)g->chunk * sizeof *pos), *slots = malloc((size_t)g->chunk * sizeof *slots);
    int rc = 0, n_gen = 0;
    if ((gram && !mask) || !pos || !slots) {
        fprintf(stderr, "kvserve generate: out of memory\n");
        rc = -ENOMEM;
        goto out;
    }
    smp_params sp;
    smp_rng rng;
    uint64_t seed;
    gen__params(o, &sp, &rng, &seed);
    const int32_t *eog;
    int n_eog = tok_eog_ids(g->tok, &eog);

    double t0 = (clk_now_us() / 1e3);
    for (int start = 0; !rc && start < g->n_prompt; start += g->chunk) {
        int n = g->n_prompt - start < g->chunk ? g->n_prompt - start : g->chunk;
        rc = gen__step(g, start, n, start + n == g->n_prompt, pos, slots);
    }
    double t1 = (clk_now_us() / 1e3), t_first = t1, t_last = t1;
    while (!rc && n_gen < g->n_predict) {
        smp_history h = {g->ids, g->n_prompt, g->ids + g->n_prompt, n_gen};
        smp_result res;
        if (gm && gr_matcher_fill_mask(gm, mask) <= 0) break; /* nothing can follow */
        smp_sample_masked(&sp, &rng, g->logits, n_vocab, &h, eog, n_eog, mask, &res);
        if (gm && gr_matcher_accept(gm, res.token)) break;
        if (!o->ignore_eos && tok_is_eog(g->tok, res.token)) break;
        g->ids[g->n_prompt + n_gen++] = res.token;
        gen__print(g, o, res.token, n_gen);
        t_last = (clk_now_us() / 1e3);
        if (n_gen == 1) t_first = t_last;
        if (n_gen == g->n_predict) break;
        rc = gen__step(g, g->n_prompt + n_gen - 1, 1, 1, pos, slots);
    }
    if (rc) fprintf(stderr, "kvserve generate: forward pass failed (%s)\n", strerror(-rc));
    /* decode = the n_gen - 1 steps between the first token (its logits came from the prefill)
     * and the last one, sampling and printing included */
    st->prefill_ms = t1 - t0;
    st->decode_ms = t_last - t_first;
    st->n_decode = n_gen > 1 ? n_gen - 1 : 0;
out:
    st->n_gen = n_gen;
    free(pos);
    free(slots);
    free(mask);
    gr_matcher_destroy(gm);
    gr_vocab_destroy(gvoc);
    return rc;
}

/* The engine path's wake-up: the engine thread signals that events are queued. */
typedef struct gen_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int woken;
} gen_waiter;

static void gen__wake(void *ud)
{
    gen_waiter *w = ud;
    pthread_mutex_lock(&w->mu);
    w->woken = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Waits for the engine's next wake-up, or a second (then the caller checks the engine is alive). */
static void gen__wait(gen_waiter *w)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_mutex_lock(&w->mu);
    while (!w->woken)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts)) break;
    w->woken = 0;
    pthread_mutex_unlock(&w->mu);
}

/* The request: generate's prompt, sampling parameters and seed, and the grammar. 0 or -ENOMEM. */
static int gen__request(const gen_state *g, const cli_opts *o, gr_grammar *gram, engine_request *q)
{
    memset(q, 0, sizeof *q);
    q->prompt = malloc((size_t)g->n_prompt * sizeof *q->prompt);
    if (!q->prompt) return -ENOMEM;
    memcpy(q->prompt, g->ids, (size_t)g->n_prompt * sizeof *q->prompt);
    q->n_prompt = g->n_prompt;
    q->n = 1;
    q->max_tokens = g->n_predict;
    smp_rng rng;
    uint64_t seed;
    gen__params(o, &q->sampling, &rng, &seed);
    q->sampling.seed = seed;
    q->sampling.has_seed = 1;
    q->sampling.ignore_eos = o->ignore_eos;
    q->grammar = gr_ref(gram);
    return 0;
}

/* Takes one event's tokens: prints each and counts it, but an end-of-generation token that ends
 * the run (as the plain loop stops before printing it). On the final event, the timings. Returns
 * the event's finish. */
static int gen__take(gen_state *g, const cli_opts *o, const engine_event *ev, int *n_drawn, gen_stats *st)
{
    for (int t = 0; t < ev->n_tokens && st->n_gen < g->n_predict; t++) {
        int32_t id = ev->tokens[t];
        ++*n_drawn;
        if (!o->ignore_eos && tok_is_eog(g->tok, id)) break;
        g->ids[g->n_prompt + st->n_gen++] = id;
        gen__print(g, o, id, st->n_gen);
    }
    if (ev->finish) {
        /* The engine's clock, not the arrival of events here: a step's tokens may be read
         * long after they were drawn. */
        const engine_timings *tm = &ev->timings;
        int64_t first = tm->first_token_us ? tm->first_token_us : tm->finish_us;
        st->prefill_ms = (double)(first - tm->arrival_us) / 1e3;
        st->decode_ms = *n_drawn > 1 ? (double)(tm->finish_us - first) / 1e3 : 0;
        st->n_decode = *n_drawn > 1 ? *n_drawn - 1 : 0;
    }
    return ev->finish;
}

/* Runs the request through engine e until its final event. 0, or -EIO when the engine failed or
 * stopped it. */
static int gen__drain(gen_state *g, const cli_opts *o, engine *e, gen_waiter *w, gen_stats *st)
{
    int finish = 0, n_drawn = 0;
    while (!finish) {
        engine_event *ev[64];
        int n = engine_poll(e, ev, 64);
        for (int i = 0; i < n; i++) {
            if (!finish) finish = gen__take(g, o, ev[i], &n_drawn, st);
            engine_event_free(ev[i]);
        }
        if (n || finish) continue;
        engine_stats es;
        engine_get_stats(e, &es);
        if (!es.alive) finish = ENGINE_FINISH_ERROR;
        else gen__wait(w);
    }
    if (finish == ENGINE_FINISH_STOP || finish == ENGINE_FINISH_LENGTH) return 0;
    fprintf(stderr, "kvserve generate: the engine %s the request\n",
            finish == ENGINE_FINISH_ABORT ? "cancelled" : "failed");
    return -EIO;
}

/* The speculative path: one request through an engine configured as `bench` configures it. 0, or
 * -1 after printing the reason. */
static int gen__engine(gen_state *g, const cli_opts *o, engine_config *c, gr_grammar *gram, gen_stats *st)
{
    gen_waiter w = {.woken = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    c->model = g->m;
    c->tok = g->tok;
    c->wake = gen__wake;
    c->wake_ud = &w;
    c->quiet = !o->verbose;
    /* the one request's length: the KV budget need hold no more than that */
    c->max_model_len = (int)(g->cap_tokens > 0 ? g->cap_tokens : 1);
    char err[512];
    int rc = -1;
    engine *e = engine_create(c, err, sizeof err);
    engine_request q;
    uint64_t id;
    if (!e) {
        fprintf(stderr, "kvserve generate: %s\n", err);
    } else if (gen__request(g, o, gram, &q)) {
        fprintf(stderr, "kvserve generate: out of memory\n");
    } else if ((rc = engine_submit(e, &q, &id))) {
        fprintf(stderr, "kvserve generate: the engine refused the request (%s)\n", strerror(-rc));
        free(q.prompt);
        gr_unref(q.grammar);
        rc = -1;
    } else {
        rc = gen__drain(g, o, e, &w, st) ? -1 : 0;
        engine_stats es;
        engine_get_stats(e, &es);
        st->spec_method = es.spec_method;
        st->spec_drafts = es.spec_drafts;
        st->spec_draft_tokens = es.spec_draft_tokens;
        st->spec_accepted = es.spec_accepted;
    }
    if (e) engine_destroy(e, 0);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}

/* The last line on stderr: the timings, the decode bound on a GPU (plain loop), and what
 * speculation drafted and had accepted. */
static void gen__report(const gen_state *g, const gen_stats *st)
{
    double decode_tps = st->decode_ms > 0 ? st->n_decode / (st->decode_ms / 1e3) : 0.0;
    char bound[192] = "";
    if (g->f) gen__bound(g, st->n_gen, decode_tps, bound, sizeof bound);
    double acc = st->spec_draft_tokens ? (double)st->spec_accepted / (double)st->spec_draft_tokens : 0;
    /* each verify row yields the token it computes plus its accepted drafts */
    double per_verify = st->spec_drafts ? (double)(st->spec_drafts + st->spec_accepted) / (double)st->spec_drafts : 0;
    fprintf(stderr,
            "{\"prompt_tokens\": %d, \"generated_tokens\": %d, \"prefill_ms\": %.3f, "
            "\"decode_ms\": %.3f, \"prefill_tokens_per_s\": %.2f, \"decode_tokens_per_s\": %.2f%s, "
            "\"speculative\": \"%s\", \"spec_drafts\": %lld, \"spec_draft_tokens\": %lld, "
            "\"spec_accepted_tokens\": %lld, \"spec_acceptance\": %.6f, \"spec_tokens_per_verify\": %.4f}\n",
            g->n_prompt, st->n_gen, st->prefill_ms, st->decode_ms,
            st->prefill_ms > 0 ? g->n_prompt / (st->prefill_ms / 1e3) : 0.0, decode_tps, bound,
            spec_method_name(st->spec_method), (long long)st->spec_drafts, (long long)st->spec_draft_tokens,
            (long long)st->spec_accepted, acc, per_verify);
}

int cli_generate(cli_opts *o)
{
    const char *bad = gen__check_sampling(o);
    if (bad) {
        fprintf(stderr, "kvserve generate: %s\n", bad);
        return 2;
    }
    engine_config ec;
    memset(&ec, 0, sizeof ec);
    if (cli_spec_config(o, &ec)) {
        fprintf(stderr, "kvserve generate: unknown --speculative '%s' (ngram, draft or off)\n", o->speculative);
        return 2;
    }
    int spec = ec.spec_method != SPEC_OFF;
    if (spec && cli_engine_config(o, "generate", &ec)) return 2;
    gen_state g;
    memset(&g, 0, sizeof g);
    if (gen__load(&g, o, spec) || (!spec && gen__setup_fwd(&g, o))) {
        gen__fini(&g);
        return 1;
    }
    gr_grammar *gram;
    double compile_ms;
    if (cli_grammar(o, "generate", &gram, &compile_ms)) {
        gen__fini(&g);
        return 1;
    }
    gen_stats st;
    memset(&st, 0, sizeof st);
    int rc = spec ? gen__engine(&g, o, &ec, gram, &st) : gen__loop(&g, o, gram, &st);
    gr_unref(gram);
    if (g.n_pend) fwrite(g.pend, 1, (size_t)g.n_pend, stdout);
    if (isatty(STDOUT_FILENO) || o->ids) putchar('\n');
    fflush(stdout);
    gen__report(&g, &st);
    gen__fini(&g);
    return rc ? 1 : 0;
}
