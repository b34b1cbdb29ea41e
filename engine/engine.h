/*
 * engine.h — the inference engine as the server (and `kvserve bench`) uses it.
 *
 * Threading contract:
 *   - engine_create starts one engine thread that owns the scheduler, block pool, radix cache,
 *     backend and sampler; none of them is touched by any other thread.
 *   - engine_submit, engine_cancel, engine_poll, engine_stats may be called from any thread
 *     (they only touch the two queues and an atomic snapshot, under the engine's mutex).
 *   - Events are delivered into a queue; after adding events the engine thread calls
 *     cfg.wake(cfg.wake_ud) (the server calls uv_async_send there). The caller drains the queue
 *     with engine_poll on its own thread. wake must be cheap and must not call back into the
 *     engine.
 *   - engine_destroy is called by the thread that created the engine, once no other thread
 *     calls into it.
 */
#ifndef KVSERVE_ENGINE_H
#define KVSERVE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/finish.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "engine/sampler.h"
#include "model/tokenizer.h"

#define ENGINE_MAX_STOP 1024 /* stop strings per request */

enum engine_schedule { ENGINE_SCHED_FCFS = 0, ENGINE_SCHED_LPM = 1 };

/* Overlapped steps (engine/step.h): while the backend runs step n, the engine thread schedules
 * and launches step n + 1 and then applies step n's tokens. */
enum engine_overlap {
    ENGINE_OVERLAP_AUTO = 0, /* on where the backend samples and runs asynchronously (a GPU),
                                off on the CPU (whose steps do not run beside the engine thread) */
    ENGINE_OVERLAP_ON = 1,   /* on wherever the backend samples (be_ops.sample) */
    ENGINE_OVERLAP_OFF = 2,
};

/* The phases of a step as the engine thread spends its time (engine_stats.phase_*). */
enum engine_phase {
    ENGINE_PHASE_SCHEDULE = 0, /* the scheduler's plan and the sample phase's prepare (masks, rows) */
    ENGINE_PHASE_UPLOAD,       /* the batch built and handed to the backend (its metadata upload) */
    ENGINE_PHASE_FORWARD,      /* the forward queued or run, and the wait for the step's results */
    ENGINE_PHASE_SAMPLE,       /* the sampler's call (the CPU's sampling) and the sample phase's finish */
    ENGINE_PHASE_OUTPUT,       /* the results applied: stop rules, detokenising, events */
    ENGINE_PHASES
};
/* Lower-case names of the phases ("schedule", "upload", "forward", "sample", "output"). */
extern const char *const engine_phase_names[ENGINE_PHASES];

struct backend; /* engine/backend.h */

typedef struct engine_config {
    const model *model;          /* borrowed, outlives the engine */
    const tokenizer *tok;        /* borrowed, outlives the engine */
    const char *device;          /* "cpu", "cuda", "auto" */
    int n_threads;               /* CPU backend threads; ≤ 0: one per core */
    /* Creates the backend for device and n_threads (the wiring's factory: cli/device.c's
     * be_create, which knows the CPU and CUDA backends; the engine itself knows only
     * engine/backend.h). Required. NULL with a one-line message in err when the device is
     * unavailable. engine_create calls it once; the engine destroys what it returns. */
    struct backend *(*make_backend)(const char *device, int n_threads, char *err, size_t err_len);
    size_t kv_memory_bytes;      /* CPU KV budget */
    double gpu_memory_utilization; /* GPU: fraction of free memory for weights + KV */
    int kv_dtype;                /* enum kv_dtype */
    int block_size;              /* tokens per KV block */
    int kv_window;               /* > 0: attention sinks + window (StreamingLLM) for the layers
                                    that keep everything: a sequence keeps at most this many KV
                                    entries, its first kv_sinks tokens and the latest ones, and
                                    may run past the context; 0: off */
    int kv_sinks;                /* with kv_window: leading tokens kept (whole blocks) */
    int max_seqs;                /* running sequences cap */
    int max_batch_tokens;        /* tokens per step */
    int prefill_admit_tokens;    /* no further admission into a step holding this many prefill
                                    tokens; 0: 64 on CPU, no limit on GPU; < 0: no limit */
    int schedule;                /* enum engine_schedule */
    int prefix_cache;            /* 1: radix prefix cache on */
    int max_queued_requests;     /* waiting requests beyond which submit says -EAGAIN */
    int64_t max_queued_tokens;   /* waiting prompt tokens beyond which submit says -EAGAIN (a
                                    prompt longer than this alone is -E2BIG) */
    int max_model_len;           /* context limit in tokens; 0: the model's training context.
                                    Larger than that, or more than the KV budget holds for one
                                    sequence, fails engine_create */
    size_t kv_host_memory_bytes; /* second KV tier in host RAM (pinned on a GPU); 0: none */
    const char *kv_disk_dir;     /* second KV tier in files under this folder; NULL: none */
    size_t kv_disk_bytes;        /* its capacity; 0: half the free space, at most 64 GiB */
    double kv_disk_timeout_s;    /* a tier file operation's deadline (a load then recomputes);
                                  * 0: the tier's default (2 s) */
    void (*wake)(void *ud);      /* called on the engine thread after events are queued */
    void *wake_ud;
    int quiet;                   /* 1: no start-up log on stderr */
    int overlap;                 /* enum engine_overlap */
    int verbose;                 /* 1: a step-time breakdown on stderr every few seconds */
    /* Speculative decoding (engine/spec.h, docs/speculative.md). On, steps are synchronous. */
    int spec_method;             /* enum spec_method: 0 off, 1 ngram, 2 draft */
    int spec_k;                  /* num_speculative_tokens: most drafts per sequence and step (1 .. 16) */
    int spec_ngram_min;          /* ngram: shortest suffix looked up */
    int spec_ngram_max;          /* ngram: longest suffix looked up */
    int spec_disable_batch;      /* no proposals in a step with more decoding sequences than this
                                    (≤ 0: 3 on the CPU, 8 on a GPU) */
    const char *spec_draft_model; /* draft: the draft model's GGUF file (same vocabulary) */
} engine_config;

void engine_config_default(engine_config *c);

typedef struct engine engine;

/* Loads the backend, sizes and allocates the KV arena (logging the formula: bytes per token,
 * blocks, tokens of capacity, max sequences at the model's context) and starts the engine thread.
 * NULL with a one-line message in err on failure. */
engine *engine_create(const engine_config *cfg, char *err, size_t err_len);

/* Stops the engine thread. drain = 1: finish every submitted request first (new submissions are
 * refused with -ESHUTDOWN meanwhile); drain = 0: cancel everything now. Undelivered events are
 * freed. */
void engine_destroy(engine *e, int drain);

/* enum engine_finish (engine/finish.h): why a choice ended, on its final event. */

typedef struct engine_request {
    int32_t *prompt;           /* [n_prompt] token ids, BOS included if wanted; owned by the engine after submit */
    int n_prompt;              /* ≥ 1 */
    int n;                     /* choices (sequences) sharing the prompt, ≥ 1 */
    int max_tokens;            /* ≥ 0; prompt + max_tokens must fit the context (else -EINVAL) */
    smp_params sampling;       /* its arrays (bias, allowed ids, bad words, stop ids) are owned
                                  by the engine after submit */
    char **stop;               /* [n_stop] stop strings; the array and the strings are owned by
                                  the engine after submit (NULL when n_stop is 0) */
    int n_stop;                /* 0 .. ENGINE_MAX_STOP */
    int include_stop_str;      /* 1: a matched stop string, or the text of the stop token that
                                  ended the choice, stays in the text (vLLM's
                                  include_stop_str_in_output); 0: both are cut */
    int render_special;        /* 1: control tokens' text is in the output (vLLM's
                                  skip_special_tokens: false); the end-of-generation token that
                                  ends a choice is then cut like a stop token */
    int prompt_logprobs;       /* 1: score every prompt token (echo + logprobs, prompt_logprobs):
                                  is_prompt events carry them in order before any generated token,
                                  prompt index 0 with logprob NaN (it has none); the prompt is
                                  computed in full (no prefix-cache reuse); max_tokens may then be 0 */
    int prompt_top;            /* alternatives per scored prompt token (0 .. SMP_MAX_LOGPROBS);
                                  < 0: sampling.n_logprobs */
    int pooling;               /* enum model_pooling: NONE generates. Else a pooled request
                                  (embeddings, reranking: engine/pool.h): n 1, max_tokens 0, no
                                  grammar; its prompt is computed and its one final event carries
                                  the pooled vector (MEAN, CLS, LAST: n_embd floats of the hidden
                                  state after the final norm) or the classification head's outputs
                                  (RANK) in pooled, finish STOP */
    int cache_prompt;          /* pooled requests: 1 puts the computed full blocks into the prefix
                                  cache as a generation's are; 0 frees the KV when it ends */
    gr_grammar *grammar;       /* structured output: every choice's text must be a sentence of it
                                  (each choice its own matcher; end-of-generation only when
                                  complete); NULL: unconstrained. A reference the engine owns
                                  after submit (released with the request) */
} engine_request;

typedef struct engine_usage {
    int prompt_tokens;
    int completion_tokens;     /* of this choice */
    int cached_tokens;         /* prompt tokens served from the prefix cache */
} engine_usage;

typedef struct engine_timings {
    int64_t arrival_us;        /* CLOCK_MONOTONIC, microseconds */
    int64_t first_scheduled_us;
    int64_t first_token_us;
    int64_t finish_us;
} engine_timings;

/* One event: usually one generated token of one choice. */
typedef struct engine_event {
    uint64_t id;               /* request id from engine_submit */
    int index;                 /* choice index 0 .. n-1 */
    char *text;                /* UTF-8 delta safe to emit now (NUL-terminated; may be "") */
    size_t text_len;
    int n_tokens;              /* tokens this event reports (0 or 1; more for prompt logprobs) */
    int32_t *tokens;           /* [n_tokens] */
    smp_result *logprobs;      /* [n_tokens] when the request asked for logprobs, else NULL */
    int is_prompt;             /* 1: the tokens are scored prompt tokens (prompt_logprobs), sent
                                  to every choice */
    int finish;                /* enum engine_finish */
    int stop_str;              /* final event with finish STOP: index in the request's stop[] of
                                  the string that matched, else -1 */
    int32_t stop_token;        /* final event with finish STOP: the sampling.stop_ids id that
                                  ended the choice, else -1 (EOS and other end-of-generation
                                  tokens leave both at -1) */
    double cum_logprob;        /* sum of this choice's sampled-token logprobs so far */
    float *pooled;             /* a pooled request's final event: [n_pooled] (engine_request.pooling) */
    int n_pooled;
    engine_usage usage;        /* valid on the final event of a choice */
    engine_timings timings;    /* valid on the final event of a choice */
} engine_event;

/* Queues a request. On success returns 0, sets *id, and the engine owns req's arrays (req itself
 * is the caller's). On failure the caller keeps ownership and nothing was queued:
 * -EINVAL (bad request: empty prompt, token id out of range, prompt + max_tokens > context),
 * -E2BIG (the prompt alone is longer than max_queued_tokens: it could never be queued),
 * -EAGAIN (queue limits reached), -ESHUTDOWN (draining or stopped). */
int engine_submit(engine *e, engine_request *req, uint64_t *id);

/* Cancels a request in any phase; its blocks return to the pool at the next step and one final
 * ENGINE_FINISH_ABORT event per unfinished choice is queued. Unknown ids are ignored. */
void engine_cancel(engine *e, uint64_t id);

/* Moves up to max queued events into out[] and returns how many; never blocks. The caller owns
 * each event and frees it with engine_event_free. */
int engine_poll(engine *e, engine_event **out, int max);
void engine_event_free(engine_event *ev);

/* The idle engine thread wakes at least this often to refresh heartbeat_us. */
#define ENGINE_HEARTBEAT_MS 500

/* Histogram of tokens per engine step (vLLM's iteration_tokens_total): counts[i] steps with at
 * most bounds[i] tokens (and more than bounds[i-1]); counts[ENGINE_ITER_BUCKETS] above all. */
#define ENGINE_ITER_BUCKETS 13
extern const int engine_iter_bounds[ENGINE_ITER_BUCKETS];

/* Histogram of the engine thread's time per step in each phase (kvserve_step_seconds):
 * counts[i] steps whose phase took at most bounds[i] microseconds (and more than bounds[i-1]);
 * counts[ENGINE_STEP_BUCKETS] longer ones. */
#define ENGINE_STEP_BUCKETS 14
extern const int64_t engine_step_bounds_us[ENGINE_STEP_BUCKETS];

/* Histogram of tier load latencies: counts[i] loads that took at most bounds[i] microseconds
 * (and more than bounds[i-1]); counts[ENGINE_TIER_BUCKETS] longer ones. */
#define ENGINE_TIER_BUCKETS 12
extern const int64_t *const engine_tier_bounds_us;

typedef struct engine_stats {
    int alive;                     /* engine thread running and not failed */
    int64_t last_step_us;          /* CLOCK_MONOTONIC of the last completed step */
    int64_t heartbeat_us;          /* CLOCK_MONOTONIC of the engine loop's last pass: at least
                                      every ENGINE_HEARTBEAT_MS while idle; stale only when a
                                      step is stuck */
    int n_ctx;                     /* the context limit in effect (max_model_len) */
    int kv_window;                 /* > 0: sinks + window on: prompts are capped at n_ctx, outputs
                                      only by max_tokens */
    int num_running;
    int num_waiting;
    int64_t kv_blocks_total;
    int64_t kv_blocks_used;        /* by sequences or the cache */
    int64_t kv_blocks_cached;      /* held by the prefix cache (every layer group's) */
    int64_t kv_blocks_idle;        /* held by the prefix cache alone (evictable: vLLM counts these
                                      free); refreshed at most every 100 ms */
    size_t kv_bytes_per_token;     /* the formula's total, scales of int8/fp8 included */
    int64_t kv_capacity_tokens;
    int64_t kv_capacity_seqs;      /* sequences that fit at once at full context (or one window) */
    int block_size;
    int64_t prefix_cache_queries;  /* prompt tokens looked up */
    int64_t prefix_cache_hits;     /* prompt tokens found */
    int64_t prefix_cache_evictions;/* blocks evicted */
    int64_t preemptions;
    int64_t prompt_tokens;         /* total prompt tokens of finished requests */
    int64_t generation_tokens;     /* total generated tokens */
    int64_t steps;
    uint64_t iter_tokens[ENGINE_ITER_BUCKETS + 1]; /* steps by tokens computed */
    int64_t iter_tokens_sum;       /* tokens computed over all steps */
    int64_t grammar_masks;         /* token masks computed for constrained sequences */
    int64_t grammar_mask_us;       /* microseconds spent on them (engine thread) */
    int max_seqs;                  /* the running cap in effect (defaults resolved per device) */
    int max_batch_tokens;          /* the step token budget in effect */
    int overlap;                   /* 1 when steps overlap (engine_config.overlap resolved) */
    int64_t steps_overlapped;      /* steps launched while the previous one was in flight */
    int in_flight;                 /* steps launched whose results are not applied yet */
    int64_t tokens_dropped;        /* tokens computed for sequences that had finished meanwhile
                                      (a stop seen one step late, a cancel): never sent */
    int spec_method;               /* speculative decoding in effect (enum spec_method; 0 off) */
    int64_t spec_drafts;           /* vLLM's spec_decode_num_drafts: verify rows run */
    int64_t spec_draft_tokens;     /* draft tokens verified */
    int64_t spec_accepted;         /* of which accepted (each also a generated token) */
    uint64_t phase_hist[ENGINE_PHASES][ENGINE_STEP_BUCKETS + 1]; /* steps by phase time */
    int64_t phase_us[ENGINE_PHASES]; /* total time in each phase */
    /* the second KV tier (all 0 without one) */
    int tier_on;                   /* 1 when a tier is configured */
    int tier_disk_on;              /* 1 while its file tier works */
    int64_t tier_host_blocks, tier_host_capacity; /* blocks in the host tier / it holds */
    int64_t tier_disk_blocks, tier_disk_capacity; /* the same for the file tier */
    int64_t tier_hits_host, tier_hits_disk; /* blocks loaded back from each */
    int64_t tier_hit_tokens;       /* tokens loaded back */
    int64_t tier_loads;            /* sequences that loaded their prefix back */
    int64_t tier_load_failures;    /* blocks whose load failed (recomputed) */
    int64_t tier_bytes_written, tier_bytes_read;       /* file tier */
    int64_t tier_bytes_to_host, tier_bytes_from_host;  /* host tier */
    int64_t tier_writes_skipped;   /* write-behind skipped (no buffer or no room) */
    int64_t tier_files_ignored;    /* incomplete or corrupt files dropped */
    int64_t tier_files_skipped;    /* non-regular files under a block's name, skipped */
    int64_t tier_io_timeouts;      /* loads given up at their deadline (recomputed) */
    int tier_disk_stalled;         /* 1 while a file operation is stuck past its deadline */
    int tier_verified;             /* 1 once the model file's hash was applied to the blocks of
                                    * earlier runs (loadable or deleted) */
    int64_t tier_unverified_blocks; /* blocks of earlier runs the hash has not vouched for */
    uint64_t tier_load_hist[ENGINE_TIER_BUCKETS + 1]; /* loads by latency (engine_tier_bounds_us) */
    int64_t tier_load_us;          /* total latency of those loads */
} engine_stats;

void engine_get_stats(engine *e, engine_stats *out);


#endif
