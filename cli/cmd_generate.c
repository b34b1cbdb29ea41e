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
 */
#include <errno.h>
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
#include "engine/forward.h"
#include "engine/sampler.h"
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
    /* streaming text */
    char pend[64]; /* held-back bytes of an unfinished UTF-8 character */
    int n_pend;
    int strip_space; /* drop the leading space of the first text produced */
} gen_state;

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

/* Loads everything and sizes the KV arena. 0, or -1 after printing the reason. */
static int gen__setup(gen_state *g, const cli_opts *o)
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
    g->geom = kv_geom_make(hp->n_layers, hp->n_kv_heads, hp->head_dim, o->block_size, kvd);

    /* Tokens that need KV: the prompt and every generated token but the last. */
    int64_t want = (int64_t)g->n_prompt + (g->n_predict > 0 ? g->n_predict - 1 : 0);
    int64_t cap_tokens = hp->n_ctx_train > 0 ? hp->n_ctx_train : want;
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
        g->n_predict = (int)(cap_tokens - g->n_prompt + 1);
        fprintf(stderr, "kvserve generate: -n capped to %d by the context or KV budget\n",
                g->n_predict);
        want = cap_tokens;
    }
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
                g->be->desc, kv_dtype_name(kvd), kv_bytes_per_token(&g->geom), (int)g->n_blocks,
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

static void gen__params(const cli_opts *o, smp_params *p, smp_rng *rng)
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

int cli_generate(cli_opts *o)
{
    const char *bad = gen__check_sampling(o);
    if (bad) {
        fprintf(stderr, "kvserve generate: %s\n", bad);
        return 2;
    }
    gen_state g;
    memset(&g, 0, sizeof g);
    if (gen__setup(&g, o)) {
        gen__fini(&g);
        return 1;
    }
    int n_vocab = g.m->hp.n_vocab;
    /* --json-schema / --grammar: a matcher over the model's vocabulary */
    gr_grammar *gram;
    double compile_ms;
    if (cli_grammar(o, "generate", &gram, &compile_ms)) {
        gen__fini(&g);
        return 1;
    }
    gr_vocab *gvoc = gram ? gr_vocab_create(g.tok, n_vocab) : NULL;
    gr_matcher *gm = gvoc ? gr_matcher_create(gram, gvoc) : NULL;
    uint32_t *mask = gm ? malloc(GR_MASK_WORDS(n_vocab) * sizeof *mask) : NULL;
    gr_unref(gram);
    if (gram && !mask) {
        fprintf(stderr, "kvserve generate: out of memory\n");
        gr_matcher_destroy(gm);
        gr_vocab_destroy(gvoc);
        gen__fini(&g);
        return 1;
    }
    int32_t *pos = malloc((size_t)g.chunk * sizeof *pos),
            *slots = malloc((size_t)g.chunk * sizeof *slots);
    smp_params sp;
    smp_rng rng;
    gen__params(o, &sp, &rng);
    const int32_t *eog;
    int n_eog = tok_eog_ids(g.tok, &eog);

    int rc = 0, n_gen = 0;
    double t0 = (clk_now_us() / 1e3);
    for (int start = 0; !rc && start < g.n_prompt; start += g.chunk) {
        int n = g.n_prompt - start < g.chunk ? g.n_prompt - start : g.chunk;
        rc = gen__step(&g, start, n, start + n == g.n_prompt, pos, slots);
    }
    double t1 = (clk_now_us() / 1e3), t_first = t1, t_last = t1;
    while (!rc && n_gen < g.n_predict) {
        smp_history h = {g.ids, g.n_prompt, g.ids + g.n_prompt, n_gen};
        smp_result res;
        if (gm && gr_matcher_fill_mask(gm, mask) <= 0) break; /* nothing can follow */
        smp_sample_masked(&sp, &rng, g.logits, n_vocab, &h, eog, n_eog, mask, &res);
        if (gm && gr_matcher_accept(gm, res.token)) break;
        if (!o->ignore_eos && tok_is_eog(g.tok, res.token)) break;
        g.ids[g.n_prompt + n_gen++] = res.token;
        if (o->ids) {
            printf(n_gen > 1 ? " %d" : "%d", res.token);
            fflush(stdout);
        } else {
            gen__emit_token(&g, res.token);
        }
        t_last = (clk_now_us() / 1e3);
        if (n_gen == 1) t_first = t_last;
        if (n_gen == g.n_predict) break;
        rc = gen__step(&g, g.n_prompt + n_gen - 1, 1, 1, pos, slots);
    }
    if (g.n_pend) fwrite(g.pend, 1, (size_t)g.n_pend, stdout);
    if (isatty(STDOUT_FILENO) || o->ids) putchar('\n');
    fflush(stdout);
    if (rc) fprintf(stderr, "kvserve generate: forward pass failed (%s)\n", strerror(-rc));

    /* decode = the n_gen - 1 steps between the first token (its logits came from the prefill)
     * and the last one, sampling and printing included */
    double prefill_ms = t1 - t0, decode_ms = t_last - t_first;
    double decode_tps = decode_ms > 0 ? (n_gen - 1) / (decode_ms / 1e3) : 0.0;
    char bound[192];
    gen__bound(&g, n_gen, decode_tps, bound, sizeof bound);
    fprintf(stderr,
            "{\"prompt_tokens\": %d, \"generated_tokens\": %d, \"prefill_ms\": %.3f, "
            "\"decode_ms\": %.3f, \"prefill_tokens_per_s\": %.2f, \"decode_tokens_per_s\": %.2f%s}\n",
            g.n_prompt, n_gen, prefill_ms, decode_ms, prefill_ms > 0 ? g.n_prompt / (prefill_ms / 1e3) : 0.0,
            decode_tps, bound);
    free(pos);
    free(slots);
    free(mask);
    gr_matcher_destroy(gm);
    gr_vocab_destroy(gvoc);
    gen__fini(&g);
    return rc ? 1 : 0;
}
