/*
 * model.h — a transformer model bound to its GGUF file: hyperparameters and weight views.
 *
 * Architectures, with what each adds to the Llama block (as llama.cpp defines them for GGUF):
 *
 *   llama   RoPE on adjacent pairs; optional output/FFN biases; rope_freqs.weight (Llama 3.x)
 *   qwen2   NeoX RoPE (halves); Q/K/V biases
 *   qwen3   NeoX RoPE; per-head RMSNorm of q and k before RoPE; key_length ≠ n_embd / n_head
 *   gemma2  GeGLU (tanh GELU), embedding × √n_embd, post-attention and post-FFN norms,
 *           attention and final logit soft-capping, sliding window on alternating layers
 *   gemma3  gemma2 without soft-caps (final one optional), plus q/k norms, a sliding-window
 *           pattern (5 of 6 layers by default) and a second RoPE base for the sliding layers
 *   phi3    fused attn_qkv and fused gate+up (ffn_up), partial NeoX RoPE
 *
 * Every arch accepts a fused blk.N.attn_qkv.weight (and .bias) instead of separate q/k/v, and
 * optional q/k/v biases, as llama.cpp does. RoPE scaling (rope.scaling.type linear or yarn,
 * rope_freqs.weight) works for every arch. A file holding a tensor the arch does not use, or
 * a hyperparameter kvserve does not implement, is refused at load with a message naming it.
 *
 * The model's weight views point into the mapping (zero copy); a fused tensor becomes views of
 * its row ranges (rows are contiguous), so the graph sees separate q/k/v and gate/up matrices.
 * A backend packs, converts or uploads them as it likes. Matrices use GGML order: ne[0] = n_in
 * (contiguous), ne[1] = n_out, so row r of a matrix holds the n_in weights of output r.
 */
#ifndef KVSERVE_MODEL_H
#define KVSERVE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2 = 1,
    MODEL_ARCH_QWEN3 = 2,
    MODEL_ARCH_GEMMA2 = 3,
    MODEL_ARCH_GEMMA3 = 4,
    MODEL_ARCH_PHI3 = 5,
};

/* The gated FFN's activation: down(act(gate) * up). */
enum model_act { MODEL_ACT_SILU = 0, MODEL_ACT_GELU_TANH = 1 };

/* How a sequence's hidden states become one vector (embeddings) or a score (rerankers): the
 * GGUF's <arch>.pooling_type, with llama.cpp's values. Pooling reads the hidden states after the
 * final norm: their mean over the sequence, the first token's (CLS) or the last token's; RANK
 * takes the first token's (the last one's for qwen3) through the classification head (cls.*). */
enum model_pooling {
    MODEL_POOL_NONE = 0,
    MODEL_POOL_MEAN = 1,
    MODEL_POOL_CLS = 2,
    MODEL_POOL_LAST = 3,
    MODEL_POOL_RANK = 4,
};

/* rope.scaling.type as read ("linear" is llama.cpp's default; without a factor it scales by 1). */
enum model_rope_scaling { MODEL_ROPE_SCALING_NONE = 0, MODEL_ROPE_SCALING_LINEAR = 1, MODEL_ROPE_SCALING_YARN = 2 };

typedef struct model_tensor {
    const char *name;  /* borrowed from the model (NUL-terminated copy) */
    int type;          /* enum dt_type: any dt_is_supported type for matrices; F32 for norms/biases */
    int64_t ne[2];     /* ne[0] = contiguous (n_in), ne[1] = rows (n_out); 1-D: ne[1] = 1 */
    const void *data;  /* in the mapping; NULL when the tensor is absent (optional tensors) */
    size_t row_bytes;  /* bytes of one row of ne[0] elements */
} model_tensor;

typedef struct model_layer {
    model_tensor attn_norm;      /* [n_embd] */
    model_tensor wq, wk, wv, wo; /* [n_embd → q_dim], [→ kv_dim], [→ kv_dim], [q_dim → n_embd];
                                    views of attn_qkv's rows when the file fuses them */
    model_tensor bq, bk, bv;     /* [q_dim], [kv_dim], [kv_dim]; data NULL when absent */
    model_tensor bo;             /* [n_embd] output bias (llama, optional) */
    model_tensor q_norm, k_norm; /* [head_dim] per-head RMSNorm of q and k (qwen3, gemma3) */
    model_tensor post_attn_norm; /* [n_embd] norm of the attention output (gemma2/3) */
    model_tensor ffn_norm;       /* [n_embd] */
    model_tensor w_gate, w_up;   /* [n_embd → n_ff]; views of ffn_up's two halves for phi3 */
    model_tensor w_down;         /* [n_ff → n_embd] */
    model_tensor b_gate, b_up, b_down; /* FFN biases (llama, optional) */
    model_tensor post_ffn_norm;  /* [n_embd] norm of the FFN output (gemma2/3) */
} model_layer;

typedef struct model_hparams {
    int arch;            /* enum model_arch */
    char arch_name[32];
    char name[128];      /* general.name, or "" */
    int n_embd;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;        /* attention.key_length, default n_embd / n_heads */
    int n_ff;
    int n_vocab;
    int n_ctx_train;     /* context_length */
    float rms_eps;       /* attention.layer_norm_rms_epsilon */
    int tied_output;     /* 1 when output.weight is absent and token_embd is reused */
    int file_type;       /* general.file_type, or -1 */

    /* RoPE (model_layer_rope gives one layer's numbers) */
    float rope_base;     /* rope.freq_base, default 10000 */
    float rope_base_swa; /* the sliding-window layers' base (gemma: rope.freq_base_swa) */
    int rope_dims;       /* rope.dimension_count, default head_dim (phi3/gemma: may be less) */
    int rope_neox;       /* 1: rotate halves (all but llama); 0: adjacent pairs */
    int rope_scaling;    /* enum model_rope_scaling */
    float rope_freq_scale;     /* 1 / rope.scaling.factor (1: no scaling) */
    float rope_freq_scale_swa; /* the same for sliding layers (gemma3: 1, they are not scaled) */
    float rope_attn_factor;    /* rope.scaling.attn_factor, default 1 */
    int rope_ctx_orig;   /* rope.scaling.original_context_length, default context_length (YaRN) */
    float yarn_beta_fast, yarn_beta_slow; /* YaRN ramp ends: 32 and 1 (llama.cpp's defaults) */
    int has_rope_freqs;  /* 1: rope_freqs.weight divides each pair's frequency */

    /* attention */
    float attn_scale;    /* multiplies q·k: 1/sqrt(head_dim), gemma "27B": 1/sqrt(n_embd/n_heads) */
    float attn_softcap;  /* gemma2's attention-logit soft-cap; 0: off */
    int swa_window;      /* sliding window of the windowed layers (positions); 0: none */
    int swa_pattern;     /* layer l slides iff swa_window > 0 and (pattern == 0 or l % pattern <
                            pattern − 1): see model_layer_window */
    int swa_ignored;     /* phi3: attention.sliding_window read and not applied (as llama.cpp) */
    int qk_norm;         /* 1: q_norm / k_norm per head before RoPE (qwen3, gemma3) */

    /* the rest of the block */
    float embd_scale;    /* token embeddings × this (gemma: sqrt(n_embd)); 1 otherwise */
    int post_norms;      /* 1: post_attn_norm and post_ffn_norm (gemma2/3) */
    int ffn_act;         /* enum model_act */
    float final_softcap; /* soft-cap of the final logits (gemma2; gemma3 optional); 0: off */
    int fused_qkv;       /* the file stores attn_qkv (fused), for info */
    int fused_gate_up;   /* the file stores gate and up in one ffn_up (phi3), for info */

    /* embeddings and rerankers */
    int pooling;         /* enum model_pooling: <arch>.pooling_type (NONE when absent) */
    int n_cls_out;       /* classifier outputs: <arch>.classifier.output_labels' count, else 1 */
} model_hparams;

typedef struct model {
    model_hparams hp;
    gguf_file *gguf;         /* owned */
    char path[4096];
    model_tensor tok_embd;   /* [n_embd × n_vocab] (row t = embedding of token t) */
    model_tensor output_norm;/* [n_embd] */
    model_tensor output;     /* [n_embd → n_vocab]; equals tok_embd when tied */
    model_tensor output_b;   /* [n_vocab] LM-head bias (qwen2, optional) */
    model_tensor rope_freqs; /* [rope_dims / 2] frequency divisors (llama, optional) */
    model_tensor cls, cls_b; /* [n_embd → n_embd], [n_embd]: a reranker's dense layer before
                                tanh (optional; llama.cpp's cls.weight / cls.bias) */
    model_tensor cls_out, cls_out_b; /* [n_embd → n_cls_out], [n_cls_out]: its output layer
                                (optional; cls.output.*; Qwen3-Reranker: the yes/no rows) */
    model_layer *layers;     /* [n_layers] */
} model;

/* One layer's RoPE, resolved from the hyperparameters (what backend.h's be_rope needs):
 * the angle of pair i at position p is p · f_i · (freq_scale · (1 − mix_i) + mix_i) with
 * f_i = base^(−2i/dims) / rope_freqs[i] and the YaRN ramp mix_i between corr_lo and corr_hi
 * (ext_factor 1 for yarn, else 0); cos and sin are multiplied by mscale. */
typedef struct model_rope {
    int dims, neox;
    float base, freq_scale, ext_factor, corr_lo, corr_hi, mscale;
} model_rope;

/* Loads hyperparameters and binds every tensor by name with its shape checked. On failure returns
 * a negative errno and writes a one-line message naming the file and the problem (unsupported
 * architecture or tensor type, missing or unused tensor, wrong shape, bad or unimplemented key)
 * into err. */
int model_load(const char *path, model **out, char *err, size_t err_len);

/* Same, from an already-open GGUF file whose ownership passes to the model on success. */
int model_load_gguf(gguf_file *f, const char *path, model **out, char *err, size_t err_len);

void model_destroy(model *m);

/* Dequantises row r of a matrix into dst[ne[0]] (exact; the reference for every kernel). */
void model_tensor_row_f32(const model_tensor *t, int64_t r, float *dst);

/* Total bytes of all weight data (what decode streams per token). */
size_t model_weight_bytes(const model *m);

/* Total number of weights (elements) of those tensors: 8 × bytes / elems is the bits per weight. */
size_t model_weight_elems(const model *m);

/* The sliding window of layer il in positions (a query sees itself and the window − 1 positions
 * before it), or 0 when the layer attends to its whole context. */
int model_layer_window(const model_hparams *hp, int il);

/* Number of layers with a sliding window. */
int model_n_swa_layers(const model_hparams *hp);

/* Layer il's RoPE: base, scaling, YaRN ramp and mscale as llama.cpp applies them. */
void model_layer_rope(const model_hparams *hp, int il, model_rope *out);

/* The attention scale, embedding scale and rope frequency scale with their defaults resolved
 * (a hand-filled model_hparams may leave them 0). */
float model_attn_scale(const model_hparams *hp);
float model_embd_scale(const model_hparams *hp);

/* One line naming what the architecture computes beyond a plain Llama block (q/k norm, GeGLU,
 * soft-caps, windows, RoPE kind and scaling, fused tensors), e.g. for the start-up log and
 * `kvserve info`. Returns buf. */
char *model_features(const model_hparams *hp, char *buf, size_t len);

/* Name of an enum model_rope_scaling value ("none", "linear", "yarn"). */
const char *model_rope_scaling_name(int scaling);

/* "none", "mean", "cls", "last", "rank" for an enum model_pooling, NULL for another value. */
const char *model_pooling_name(int pooling);
/* The enum model_pooling of a name above, or -1. */
int model_pooling_by_name(const char *name);

/* 1 when kvserve loads architecture `name` (general.architecture). */
int model_arch_is_supported(const char *name);

/* The KV formula split by layer type, for vec_bytes bytes per stored K (or V) vector of one kv
 * head (head_dim values and any scale: cache/kv.h's kv_vec_bytes): "N global layers × 2 × kv heads
 * × V = X bytes/token" and, with sliding-window layers, the same for them with their window (they
 * attend to the last `window` positions only). Returns buf. */
char *model_kv_by_layer_type(const model_hparams *hp, size_t vec_bytes, char *buf, size_t len);

#endif
