/*
 * backend.h — what the model graph (engine/forward.c) needs from a compute backend.
 *
 * Two backends implement it: cpu/ (always built; the numerical reference) and cuda/ (built when
 * nvcc exists). Nothing above this interface knows which one runs.
 *
 * Memory: weights, activations and the KV arena live in backend memory. forward.c never reads
 * them on the host: it passes the pointers the backend returned back into the ops. Only logits
 * (and batch metadata) cross.
 *
 * Element types between ops, row-major [rows][cols] everywhere:
 *   - activations (the GEMMs' inputs and outputs, q / k / v, attention's input and output, the
 *     feed-forward's hidden rows): the backend's act_type (struct backend): DT_F32 on the CPU,
 *     DT_BF16 on CUDA. bf16 rather than f16: it has f32's exponent range, so the activations of
 *     models that overflow f16 (Gemma's feed-forward, large residual outliers) stay finite, and
 *     it is the type of the served checkpoints, whose matrices cuBLAS multiplies with bf16
 *     activations without a conversion. The pointers are void * (forward.c never assumes f32).
 *   - the residual stream (embed's output, add's and add_rmsnorm's x, gather_rows, lm_head's
 *     input) is f32 on every backend: it carries the sum of every layer's contributions, and a
 *     16-bit sum would lose about 3 significant digits per add across the layers, for a saving
 *     of under 2% of a decode step's bytes (the weights dominate).
 *   - logits are f32 (lm_head writes them so; a backend with f32 activations gets them from
 *     matmul), and so is everything to_host copies.
 * A backend whose act_type is not DT_F32 must implement the ops that cross between the residual
 * stream and the activations (add_rmsnorm and lm_head): forward.c's unfused path passes the
 * residual to rmsnorm and matmul, which only an f32 backend can take (fwd_create checks).
 *
 * The varlen batch (vLLM style): one flat list of new tokens from any mix of sequences — prefill
 * chunks and single decode tokens. Sequence s owns tokens q_start[s] .. q_start[s+1]-1. The KV
 * cache is described per layer group (kv[g], cache/kv.h: layers sharing a retention rule share
 * blocks): in group g, sequence s has ctx_len[s] KV entries after this step (cached + new),
 * indexed through its block-table row: KV entry j lives in slot block_table[s][j / block_size] *
 * block_size + j % block_size of the group's arena. New token i of sequence s (i counted from 0
 * within the sequence) is KV entry ctx_len[s] - n_new[s] + i and attends causally to entries
 * 0 .. that index inclusive (narrowed by a layer's sliding window, be_attn). The RoPE position of
 * a token is positions[], which may exceed its KV index once a group has dropped entries: a
 * window keeps relative positions, so queries and the entries after the dropped ones meet at
 * their true distance. Attention sinks (the first sinks[s] entries, kept while later ones are
 * dropped: StreamingLLM) sit sink_shift[s] positions closer to the queries than their rotation
 * says; the attention op meets them with be_attn.q_sink (the queries rotated back by that shift,
 * rope_shift), so every entry is seen at its position within the cache.
 *
 * Threading: a backend is driven by one thread (the engine thread); ops run in call order
 * (a GPU backend may queue them asynchronously until logits_to_host or sync).
 */
#ifndef KVSERVE_BACKEND_H
#define KVSERVE_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cache/kv.h"
#include "engine/smp_rows.h"
#include "model/dtype.h"
#include "model/model.h"

/* One layer group's view of the batch's KV. */
typedef struct be_kv {
    const int32_t *slots;       /* [n_tokens] KV slot each token's K/V is written to (< 0: none) */
    const int32_t *ctx_len;     /* [n_seqs] KV entries after this step */
    const int32_t *block_table; /* [n_seqs][bt_stride] block ids */
    int32_t bt_stride;          /* row stride of block_table, ≥ max blocks of any sequence */
    const int32_t *sinks;       /* [n_seqs] leading entries met by the sink queries (0: none), or
                                   NULL when no sequence of the step has any */
    const int32_t *sink_shift;  /* [n_seqs] positions the sinks sit closer than their rotation says
                                   (with sinks; the rope_shift op's shift) */
} be_kv;

typedef struct be_batch {
    int32_t n_tokens;
    const int32_t *tokens;      /* [n_tokens] token ids */
    const int32_t *positions;   /* [n_tokens] RoPE positions */
    int32_t n_seqs;
    const int32_t *q_start;     /* [n_seqs + 1] token offsets; q_start[n_seqs] == n_tokens */
    int32_t n_logits;
    const int32_t *logit_rows;  /* [n_logits] token indices whose logits are wanted, in order */
    int32_t n_kv;               /* layer groups in kv (0 means 1) */
    be_kv kv[KV_MAX_GROUPS];    /* per layer group (cache/kv.h kv_group_of) */
} be_batch;

/* The view of group g (kv[0] when the batch describes one group). */
static inline const be_kv *be_batch_kv(const be_batch *b, int g)
{
    return &b->kv[b->n_kv > 1 ? g : 0];
}

/* A weight matrix or vector in backend memory. */
typedef struct be_weight {
    int type;      /* enum dt_type as stored by the backend (may differ from the file's) */
    int64_t n_in;  /* ne[0] */
    int64_t n_out; /* ne[1] (1 for vectors) */
    void *data;    /* backend memory; NULL = absent (optional bias) */
    void *extra;   /* backend-private (repacked copy, scales, ...) */
} be_weight;

/* Host/device marker for the small formulas below, which the CUDA kernels share. */
#ifdef __CUDACC__
#define BE_HOST_DEVICE __host__ __device__
#else
#define BE_HOST_DEVICE
#endif

/* Rotary position embedding of one layer (llama.cpp's rope with YaRN, as ggml computes it).
 * Pair i (0 ≤ i < rope_dims / 2) of a head rotates by the angle p · be_rope_freq(r, i, ff_i) at
 * position p, and cos and sin are both multiplied by mscale:
 *   f_i   = base^(−2i / rope_dims) / ff_i            (ff_i: freq_factors[i], or 1)
 *   mix_i = ext_factor · (1 − clamp((i − corr_lo) / max(0.001, corr_hi − corr_lo), 0, 1))
 *   freq  = f_i · (freq_scale · (1 − mix_i) + mix_i)
 * Plain RoPE: freq_scale 1, ext_factor 0, mscale 1, no freq_factors. A zero freq_scale or
 * mscale means 1, so a be_rope that names only the first five fields is plain RoPE. Dims past
 * rope_dims in each head pass through unchanged (partial rotary). */
typedef struct be_rope {
    int n_heads;    /* heads in the tensor being rotated */
    int head_dim;
    int rope_dims;  /* leading dims of each head that rotate (≤ head_dim, even) */
    float base;     /* theta base, e.g. 10000 */
    int neox;       /* 1: pairs (i, i + rope_dims/2); 0: adjacent pairs (2i, 2i+1) */
    float freq_scale; /* linear / YaRN interpolation: 1 / scaling factor (0 or 1: none) */
    float ext_factor; /* YaRN: weight of the extrapolated angle in the ramp (1), else 0 */
    float corr_lo, corr_hi; /* YaRN ramp: pairs below corr_lo extrapolate, above corr_hi interpolate */
    float mscale;   /* cos and sin multiplied by this (YaRN's attention factor; 0 or 1: none) */
    const be_weight *freq_factors; /* [rope_dims / 2] F32 divisors of each pair's frequency
                                      (rope_freqs.weight, Llama 3.x), or NULL */
} be_rope;

/* The angular frequency of pair i (radians per position) for frequency divisor ff (1 without
 * freq_factors), in double so that angles at long positions keep their accuracy. */
static inline BE_HOST_DEVICE double be_rope_freq(const be_rope *r, int i, float ff)
{
    double f = pow((double)r->base, -2.0 * i / r->rope_dims) / (double)ff;
    double fs = r->freq_scale != 0.0f ? (double)r->freq_scale : 1.0;
    if (r->ext_factor == 0.0f) return f * fs;
    double span = (double)r->corr_hi - (double)r->corr_lo;
    double y = (i - (double)r->corr_lo) / (span > 0.001 ? span : 0.001);
    double ramp = 1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y);
    double mix = ramp * (double)r->ext_factor;
    return f * (fs * (1.0 - mix) + mix);
}

/* The factor on cos and sin. */
static inline BE_HOST_DEVICE float be_rope_mscale(const be_rope *r)
{
    return r->mscale != 0.0f ? r->mscale : 1.0f;
}

/* How one layer attends (per-layer parameters of the attention op). The score of query q and
 * key k is s = scale · q·k, then s = softcap · tanh(s / softcap) when softcap > 0, then the
 * causal (and window) mask and the softmax. A query at KV index i of its sequence sees keys
 * j ≤ i, and with window > 0 only those with i − j < window (llama.cpp's standard sliding
 * window: the window counts the query itself). */
typedef struct be_attn {
    int n_heads;    /* query heads in q: a multiple of the KV heads (GQA groups) */
    float scale;    /* multiplies q·k, e.g. 1/sqrt(head_dim) */
    float softcap;  /* > 0: attention-logit soft-capping (Gemma 2); 0: off */
    int32_t window; /* > 0: sliding window of this many positions; 0: full causal */
    const void *q_sink;  /* when the layer's group view has sinks: the queries that meet them
                            (q after rope_shift, same shape and type as q); else NULL */
    const be_weight *head_sinks; /* [n_heads] F32 learned sink logits (gpt-oss), or NULL:
                            head h's softmax gets e^(sink_h − m) more in its denominator
                            (m = max(sink_h, the scores)) and no value, see be_attn_sink */
} be_attn;

/* The learned sink's share of a head's softmax: an online-softmax state (running max mx, sum l
 * of e^(s − mx), unnormalised output acc) meets sink logit s_k. The output is acc · the factor
 * returned: with m = max(mx, s_k), e^(mx − m) / (l · e^(mx − m) + e^(s_k − m)). */
static inline BE_HOST_DEVICE float be_attn_sink(float mx, float l, float sink)
{
    float m = mx > sink ? mx : sink, a = expf(mx - m);
    return a / (l * a + expf(sink - m));
}

/* tanh-approximated GELU: 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³))), as GeGLU uses it. */
static inline BE_HOST_DEVICE float be_gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* cap · tanh(x / cap): soft-capping of logits. */
static inline BE_HOST_DEVICE float be_softcap(float x, float cap)
{
    return cap * tanhf(x / cap);
}

/* ---- mixture of experts and multi-head latent attention --------------------------------------
 *
 * A MoE layer's FFN is one op (moe_ffn): the backend routes each row, groups the rows by expert
 * so that every chosen expert's weights are read once for all its rows (and an expert no row
 * chose is not read), runs the experts and sums their outputs with the routing weights. MLA
 * (multi-head latent attention, DeepSeek-V2/V3) caches one vector per token and layer — the
 * normed latent c and a RoPE key shared by all heads, a latent KV layout (cache/kv.h) — and
 * attends in the latent space: each head's key up-projection is absorbed into its query
 * (mla_qk), the attention op runs as MQA over the cached vectors (the value is the latent: the
 * first kv_lora values of each), and the value up-projection applies to the result (mla_out). */

/* How a router's logits pick experts and weigh them (llama.cpp's build_moe_ffn). */
typedef struct be_moe_rule {
    int n_expert, n_used; /* experts, and k of them per row */
    int gating;           /* enum model_gating */
    int norm;             /* 1: the k weights are divided by max(their sum, 6.103515625e-5) */
    float scale;          /* then multiplied by this unless it is 0 or 1 */
    int n_groups, n_group_used; /* > 1: grouped top-k (DeepSeek-V3); 0: none */
} be_moe_rule;

/* Routes one row: p = gating(logits) (softmax over all experts, sigmoid of each, or the logits
 * themselves), selection scores p + sel_bias (sel_bias [n_expert] or NULL); with groups, only the
 * n_group_used groups whose two best scores sum highest stay in the running; ids[0 .. k) = the k
 * best scores in descending order (the lower index first on ties), w[j] = p[ids[j]], softmaxed
 * among themselves for MODEL_GATING_SOFTMAX_WEIGHT, then normalised and scaled by the rule.
 * scr: 3 × n_expert floats. Host and device code share this one definition. */
static inline BE_HOST_DEVICE void be_moe_route(const be_moe_rule *r, const float *logits, const float *sel_bias,
                                               int32_t *ids, float *w, float *scr)
{
    int E = r->n_expert, k = r->n_used;
    float *p = scr, *s = scr + E, mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    for (int e = 0; e < E; e++) {
        float v = logits[e];
        if (r->gating == 1) v = expf(v - mx), sum += v;            /* softmax (MODEL_GATING_SOFTMAX) */
        else if (r->gating == 2) v = 1.0f / (1.0f + expf(-v));     /* sigmoid */
        p[e] = v;
    }
    for (int e = 0; e < E; e++) {
        if (r->gating == 1) p[e] /= sum;
        s[e] = p[e] + (sel_bias ? sel_bias[e] : 0.0f);
    }
    if (r->n_groups > 1) { /* only the groups with the best sums of their two best scores compete */
        int per = E / r->n_groups;
        float *gs = scr + 2 * E;
        for (int g = 0; g < r->n_groups; g++) {
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++)
                if (s[e] > a) b = a, a = s[e];
                else if (s[e] > b) b = s[e];
            gs[g] = a + b;
        }
        for (int kept = 0; kept < r->n_group_used; kept++) { /* a kept group's score becomes NaN */
            int best = -1;
            for (int g = 0; g < r->n_groups; g++)
                if (gs[g] == gs[g] && (best < 0 || gs[g] > gs[best])) best = g;
            if (best >= 0) gs[best] = NAN;
        }
        for (int g = 0; g < r->n_groups; g++)
            for (int e = g * per; gs[g] == gs[g] && e < (g + 1) * per; e++) s[e] = -INFINITY;
    }
    for (int j = 0; j < k; j++) {
        int best = 0;
        for (int e = 1; e < E; e++)
            if (s[e] > s[best]) best = e;
        ids[j] = best;
        w[j] = p[best];
        s[best] = -INFINITY;
    }
    if (r->gating == 3) { /* MODEL_GATING_SOFTMAX_WEIGHT: softmax over the k chosen */
        float m = w[0], t = 0.0f;
        for (int j = 1; j < k; j++) m = w[j] > m ? w[j] : m;
        for (int j = 0; j < k; j++) w[j] = expf(w[j] - m), t += w[j];
        for (int j = 0; j < k; j++) w[j] /= t;
    }
    if (r->norm) {
        float t = 0.0f;
        for (int j = 0; j < k; j++) t += w[j];
        t = t > 6.103515625e-5f ? t : 6.103515625e-5f;
        for (int j = 0; j < k; j++) w[j] /= t;
    }
    if (r->scale != 0.0f && r->scale != 1.0f)
        for (int j = 0; j < k; j++) w[j] *= r->scale;
}

/* A MoE layer's experts in backend memory. */
typedef struct be_moe {
    be_moe_rule rule;
    int act;          /* enum model_act: MODEL_ACT_SILU or MODEL_ACT_SWIGLU_OAI */
    float alpha, limit; /* SWIGLU_OAI: x = min(gate, limit), y = clamp(up, −limit, limit),
                           act = x · σ(alpha · x) · (y + 1) */
    const be_weight *sel_bias; /* [n_expert] F32 selection bias, or NULL */
    const be_weight *gate, *up, *down;       /* [n_expert] each: [n_embd → n_ff], [n_ff → n_embd] */
    const be_weight *b_gate, *b_up, *b_down; /* [n_expert] F32 biases each, or NULL */
    void *extra;      /* the backend's own per-layer state (moe_prepare), or NULL */
} be_moe;

/* An MLA layer's absorbed projections. */
typedef struct be_mla {
    int n_heads;
    int qk_nope, rope; /* q's per-head split: qk_nope dims without RoPE, then rope dims */
    int kv_lora;       /* the latent's size; a cached vector is kv_lora + rope values */
    int v_head;        /* per-head value size after the up-projection */
    float eps;         /* RMSNorm epsilon of the latent */
    const be_weight *kv_norm; /* [kv_lora] */
    const be_weight *k_b;     /* [n_heads]: [qk_nope → kv_lora] */
    const be_weight *v_b;     /* [n_heads]: [kv_lora → v_head] */
    be_rope rope_q, rope_k;   /* over the rope dims alone (head_dim = rope_dims = rope): n_heads
                                 heads for q, 1 for the key */
    void *extra;              /* the backend's own per-layer state (mla_prepare), or NULL */
} be_mla;

/* SwiGLU-OAI of one gate/up pair. */
static inline BE_HOST_DEVICE float be_swiglu_oai(float g, float u, float alpha, float limit)
{
    float x = g < limit ? g : limit, y = u < -limit ? -limit : u > limit ? limit : u;
    return x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
}
/* A layer's attention input projections for the fused qkv op: Q, K and V as n_w row blocks
 * that stack to [Wq; Wk; Wv] ([q_dim + 2 kv_dim][dim]): n_w = 1 when the backend stacked all
 * three at upload (weight_upload_cat), 2 for [Wq; Wk] and Wv, or [Wq] and [Wk; Wv], 3 when apart
 * (types differ). b[i] is the bias of w[i] (stacked alike), or NULL. */
typedef struct be_qkv {
    int n_w;
    const be_weight *w[3];
    const be_weight *b[3];
    const be_weight *q_norm, *k_norm; /* [head_dim] per-head RMSNorm (qwen3, gemma3), or NULL */
    float eps;                               /* their epsilon */
    const be_rope *rope_q, *rope_k;   /* the layer's RoPE of q and k */
} be_qkv;

/* The feed-forward's gate and up projections for the fused glu op: n_w = 1 when w[0] is
 * [Wgate; Wup] stacked by rows ([2 n_ff][dim]), 2 when apart; b[i] the bias of w[i] or NULL. */
typedef struct be_glu {
    int n_w;
    const be_weight *w[2];
    const be_weight *b[2];
    int gelu; /* 1: GELU(tanh)(gate) × up (GeGLU); 0: SiLU(gate) × up (SwiGLU) */
} be_glu;

typedef struct backend backend;

/* Matrices one matmul_multi call takes at most. */
#define BE_MATMUL_MULTI_MAX 4

typedef struct be_ops {
    void (*destroy)(backend *be);

    /* Copies or converts a model tensor into backend memory. The CPU keeps a view of the mapping
     * and, for matrices, a copy packed once into its GEMM panel layout (in extra); CUDA keeps
     * F32/F16/BF16 and expands Q8_0 to F16. 0 or a negative errno. */
    int (*weight_upload)(backend *be, const model_tensor *src, be_weight *dst);
    void (*weight_free)(backend *be, be_weight *w);

    /* Free device memory in bytes, or 0 when the KV budget comes from --kv-memory (CPU). */
    size_t (*mem_available)(backend *be);
    /* Allocates the KV arena of geometry g: n_blocks[k] blocks for layer group k (one entry per
     * kv_n_groups(g)), K and V for every layer of the group. 0 or a negative errno. */
    int (*kv_init)(backend *be, const kv_geom *g, const int32_t *n_blocks);
    /* Copies block src to block dst of layer group `group`, in each of its layers, K and V (n > 1
     * forks copy a partial block). */
    void (*kv_copy_block)(backend *be, int group, int32_t src, int32_t dst);
    /* The second KV tier's copies: block `block` of layer group `group` — K, V and any scales of
     * each of the group's layers, kv_group_bytes_per_block bytes in the arena's own tile order —
     * out to host memory dst, or in from src. On a device they are queued in order with the ops
     * around them and have completed once sync (or to_host) returns; on the CPU (kv_in_host)
     * they are done on return, and may run on another thread for a block no step uses. 0 or
     * -EIO. */
    int (*kv_block_out)(backend *be, int group, int32_t block, void *dst);
    int (*kv_block_in)(backend *be, int group, int32_t block, const void *src);
    /* Host memory those copies are fastest with (pinned on a GPU), or NULL; freed by host_free. */
    void *(*host_alloc)(backend *be, size_t bytes);
    void (*host_free)(backend *be, void *p);

    /* Activation scratch: n elements of the backend's act_type in backend memory, or NULL
     * (be_alloc_f32 below sizes f32 buffers: the residual stream, logits). */
    void *(*alloc)(backend *be, size_t n);
    void (*free)(backend *be, void *p);

    /* Starts a step: takes (and for a device, uploads) the batch metadata, and sets
     * be->step_rows, the rows the step's ops run over: b->n_tokens, or more when the backend pads
     * a pure-decode step (one token per sequence, each a logit row) to a shape it has captured
     * (CUDA graphs). The padded rows are tokens of sequences of their own that write no KV and
     * whose results nobody reads; forward.c passes step_rows as every op's row count (and as
     * n_logits), and copies only the batch's own logit rows to the host. The batch's arrays are
     * borrowed until the next begin. 0 or a negative errno. */
    int (*begin)(backend *be, const be_batch *b);

    /* out[i][:] = embedding row of the batch's token i (dequantised to f32): the residual stream. */
    void (*embed)(backend *be, const be_weight *emb, float *out);
    /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for n_rows rows of dim; x and out are
     * activations (act_type). out may equal x. */
    void (*rmsnorm)(backend *be, const void *x, const be_weight *w, float eps, int n_rows, int dim,
                    void *out);
    /* out[r][o] = sum_i x[r][i] * W[o][i] (+ bias[o]); x is [n_rows][w->n_in], out
     * [n_rows][w->n_out], both activations. */
    void (*matmul)(backend *be, const void *x, int n_rows, const be_weight *w, const be_weight *bias,
                   void *out);
    /* Optional (NULL: matmul n times): out[i] = matmul(x, w[i], bias[i]) for i < n ≤
     * BE_MATMUL_MULTI_MAX (4) matrices of one input length over the same rows (Q, K and V; gate and
     * up), each result exactly matmul's, in one pass of dispatch. bias[i] may be NULL. */
    void (*matmul_multi)(backend *be, const void *x, int n_rows, int n, const be_weight *const *w,
                         const be_weight *const *bias, void *const *out);
    /* Optional (NULL: matmul, which a backend with f32 activations needs, as its output is f32
     * already): matmul with the output out [n_rows][w->n_out] in f32, not rounded to the
     * activation type — for results read in f32, the MoE router's logits (a near tie rounded to
     * bf16 could route to another expert than the f32 reference). */
    void (*matmul_f32)(backend *be, const void *x, int n_rows, const be_weight *w, const be_weight *bias,
                       float *out);
    /* Rotates x [n_tokens][n_heads * head_dim] (activations) in place at the batch's positions. */
    void (*rope)(backend *be, void *x, const be_rope *r);
    /* out = x (rotated queries, [n_tokens][n_heads * head_dim]) rotated further by −sink_shift of
     * each token's sequence in layer group `group`: the angle −shift · be_rope_freq of every
     * pair, a pure rotation (mscale is not applied again). The queries then meet the group's
     * sinks at their position within the cache. Only called when the group view has sinks. */
    void (*rope_shift)(backend *be, const void *x, void *out, const be_rope *r, int group);
    /* Writes k and v [n_tokens][kv_dim] (activations) of layer into the KV arena at the batch's
     * slots (those of the layer's group). */
    void (*store_kv)(backend *be, int layer, const void *k, const void *v);
    /* Causal attention of q [n_tokens][a->n_heads * head_dim] over the paged KV of layer (its
     * group's view), with GQA (query head h reads kv head h / (n_heads / n_kv_heads)), the
     * scale, soft-cap and sliding window of *a (see be_attn), and a->q_sink for the sink
     * entries; out [n_tokens][n_heads * head_dim]. q and out are activations. */
    void (*attention)(backend *be, int layer, const void *q, const be_attn *a, void *out);
    /* gate[i] = silu(gate[i]) * up[i] for n elements (activations). */
    void (*silu_mul)(backend *be, void *gate, const void *up, int64_t n);
    /* gate[i] = gelu_tanh(gate[i]) * up[i] for n elements (GeGLU; activations). */
    void (*gelu_mul)(backend *be, void *gate, const void *up, int64_t n);
    /* x[i] *= s for n f32 elements (the residual stream: the embedding scale). */
    void (*scale)(backend *be, float *x, float s, int64_t n);
    /* x[i] = cap · tanh(x[i] / cap) for n f32 elements (logit soft-capping). */
    void (*softcap)(backend *be, float *x, float cap, int64_t n);
    /* x[i] += y[i] for n elements: x the f32 residual stream, y activations. */
    void (*add)(backend *be, float *x, const void *y, int64_t n);
    /* out[j][:] = x[logit_rows[j]][:] for the batch's logit rows (f32 rows of the residual). */
    void (*gather_rows)(backend *be, const float *x, int dim, float *out);
    /* Copies n floats of backend memory to the host, waiting for queued work. 0 or -EIO. */
    int (*to_host)(backend *be, const float *src, size_t n, float *dst);
    /* Waits for queued work. 0, or -EIO after a device error. */
    int (*sync)(backend *be);
    /* Optional (NULL: weight_upload serves): uploads a matrix that only embed reads (an
     * embedding not tied to the LM head), so that a backend can skip what it prepares for
     * matmul. Otherwise as weight_upload; weight_free frees it. */
    int (*embed_upload)(backend *be, const model_tensor *src, be_weight *dst);

    /* ---- sampling on the backend and overlapped steps (optional: both or neither) ----
     * The sampler as an op (engine/smp_rows.h defines what the rows compute): the logits stay
     * in backend memory and only token ids and the requested log-probs cross. The results go to
     * one of two slots, so that a step can be launched while the previous one's results are
     * still to be collected (the engine alternates them).
     *
     * Token references: a token id < 0 in a batch (be_batch.tokens) is -(1 + j): the token that
     * row j of the most recent sample call drew; begin() resolves it on the backend, so a step
     * may be begun before that sample's results were waited for. A row's `pending` refers to the
     * same results. */
    /* Queues the sampling of sb's rows over logits (backend memory, [n_logits][sb->n_vocab]: the
     * step's logit rows as the forward wrote them) after the step's ops, its results into slot
     * (0 or 1). sb and its arrays are borrowed until sample_wait of that slot. 0 or -EIO. */
    int (*sample)(backend *be, const float *logits, const smp_batch *sb, int slot);
    /* Waits for slot's sample: *ids [n_rows] its tokens, *lps [n_lp] its log-prob blocks (host
     * memory owned by the backend, valid until the slot's next sample). The only wait a step
     * needs. 0 or -EIO. */
    int (*sample_wait)(backend *be, int slot, const int32_t **ids, const smp_result **lps);

    /* ---- fused ops: optional (NULL: forward.c runs the ops above instead) ---- */

    /* Optional: n ≥ 2 matrices of one type and input width uploaded as one whose rows are theirs
     * in order (Q, K and V; gate and up), for the fused ops below, which take such stacks
     * (be_qkv, be_glu). A quantised matrix's rows are whole blocks, so the stack is a byte
     * concatenation of the rows. -EINVAL when the types or widths differ; else as weight_upload. */
    int (*weight_upload_cat)(backend *be, const model_tensor *const *src, int n, be_weight *dst);
    /* Optional: x[r] += y[r] (y NULL: no add) on the f32 residual stream, then out[r] =
     * rmsnorm(x[r]) · w as activations, for n_rows rows of dim: the residual add of one branch
     * and the norm before the next. out may not alias x or y. */
    void (*add_rmsnorm)(backend *be, float *x, const void *y, const be_weight *w, float eps, int n_rows,
                        int dim, void *out);
    /* Optional: the attention's inputs of layer: q, k, v = x · [Wq; Wk; Wv]ᵀ (+ biases), per-head
     * RMSNorm of q and k (p->q_norm, p->k_norm), RoPE of q and k at the batch's positions, and k
     * and v written into the layer's KV at the batch's slots (quantised for an int8 / fp8
     * cache); q [n_rows][q_dim] comes back (activations) for attention. x [n_rows][dim]. */
    void (*qkv)(backend *be, int layer, const void *x, int n_rows, const be_qkv *p, void *q);
    /* Optional: out [n_rows][n_ff] = act(x · Wgateᵀ (+ b)) × (x · Wupᵀ (+ b)), act SiLU or
     * GELU(tanh) (p->gelu); x [n_rows][dim] and out are activations. */
    void (*glu)(backend *be, const void *x, int n_rows, const be_glu *p, void *out);
    /* Optional: the logits of the batch's logit rows: for row j (token logit_rows[j]), h = x[t]
     * (+ y[t] when y is not NULL: the last layer's pending branch), then rmsnorm(h) · norm,
     * then · Wᵀ (+ bias), then cap · tanh(· / cap) when softcap > 0; logits [n_logits][w->n_out]
     * f32. x is the f32 residual stream (not written), y activations. */
    void (*lm_head)(backend *be, const float *x, const void *y, const be_weight *norm, float eps,
                    const be_weight *w, const be_weight *bias, float softcap, float *logits);
    /* ---- mixture of experts and multi-head latent attention (optional: a backend without them
     * cannot run those models, and forward says so) ---- */
    /* Prepares a MoE layer once its weights are uploaded (m->extra may take the backend's
     * state for it); 0 or a negative errno. moe_release frees what it made. */
    int (*moe_prepare)(backend *be, be_moe *m);
    void (*moe_release)(backend *be, be_moe *m);
    /* out [n_rows][n_embd] = Σ_j w_j · (down_e(act(gate_e·x + b, up_e·x + b)) + b_down_e), e = ids[j],
     * for each row x of x [n_rows][n_embd], routed by its logits (logits [n_rows][n_expert]:
     * the router's output) as be_moe_route defines; the k terms are added in selection order.
     * The rows are grouped by expert, so each chosen expert's weights are read once per call and
     * an expert no row chose is not read. x and out are activations (act_type), logits f32
     * (matmul_f32's output). */
    void (*moe_ffn)(backend *be, const void *x, int n_rows, const void *logits, const be_moe *m, void *out);
    /* The latent query and key of the batch's tokens from q [n_tokens][n_heads][qk_nope + rope]
     * and kv [n_tokens][kv_lora + rope]:
     *   k_lat[t]    = [ rmsnorm(kv[t][0 .. kv_lora)) · kv_norm ; rope_k(kv[t][kv_lora ..)) ]
     *   q_lat[t][h] = [ k_b[h] · q[t][h][0 .. qk_nope) ; rope_q(q[t][h][qk_nope ..)) ]
     * (q_lat [n_tokens][n_heads][kv_lora + rope], k_lat [n_tokens][kv_lora + rope]), at the
     * batch's positions. All four are activations (act_type). */
    /* Prepares an MLA layer once its weights are uploaded (m->extra may take the backend's state);
     * 0 or a negative errno. mla_release frees what it made. */
    int (*mla_prepare)(backend *be, be_mla *m);
    void (*mla_release)(backend *be, be_mla *m);
    void (*mla_qk)(backend *be, const void *q, const void *kv, const be_mla *m, void *q_lat, void *k_lat);
    /* out[t][h·v_head ..] = v_b[h] · o[t][h][0 .. kv_lora) for o [n_tokens][n_heads][kv_lora + rope]
     * (the latent attention's output; its last rope values of each head are not read); o and out
     * are activations. */
    void (*mla_out)(backend *be, const void *o, const be_mla *m, void *out);

    /* Optional (NULL: create another instance the usual way): a second backend of the same
     * device and settings that shares this one's execution resources — the CPU's worker
     * threads — for a model that runs in turn with this one on the same thread (a speculative
     * draft): the two never run ops at the same time. Destroyed on its own; NULL on failure. */
    backend *(*sibling)(backend *be);
} be_ops;

struct backend {
    const be_ops *ops;
    const char *name; /* "cpu" or "cuda" */
    char desc[128];   /* human-readable: threads and SIMD level, or GPU name and memory */
    int kv_in_host;   /* 1: the KV arena is host memory (block copies are plain memcpys) */
    int act_type;     /* enum dt_type of the activations between ops: DT_F32 or DT_BF16 */
    int32_t step_rows; /* rows the current step's ops run over (set by begin) */
    int32_t pad_rows_max; /* set by the caller before begin: the most rows its scratch holds, so
                             the most begin may pad a step to (0: no padding) */
};

/* Bytes of one activation element. */
static inline size_t be_act_bytes(const backend *be)
{
    return be->act_type == DT_F32 ? 4 : 2;
}

/* n f32 values of backend memory (the residual stream, logits) from the activation allocator,
 * or NULL. */
static inline float *be_alloc_f32(backend *be, size_t n)
{
    size_t es = be_act_bytes(be);
    return (float *)be->ops->alloc(be, (n * sizeof(float) + es - 1) / es);
}

/* Uploads model tensor t as *w (zeroed first). An absent tensor (t NULL, or without data: an
 * optional bias, norm or projection) leaves *w empty and returns 0; else the backend's
 * weight_upload result (0 or a negative errno). */
static inline int be_weight_upload_opt(backend *be, const model_tensor *t, be_weight *w)
{
    memset(w, 0, sizeof *w);
    return t && t->data ? be->ops->weight_upload(be, t, w) : 0;
}

/* Frees *w when it holds anything and empties it: safe on an empty or already released weight. */
static inline void be_weight_release(backend *be, be_weight *w)
{
    if (w->data || w->extra) be->ops->weight_free(be, w);
    memset(w, 0, sizeof *w);
}

static inline void be_destroy(backend *be)
{
    if (be) be->ops->destroy(be);
}

#endif
