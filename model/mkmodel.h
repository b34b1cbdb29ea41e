/*
 * mkmodel.h — synthetic Llama-family models, written with the GGUF writer (gguf_write.h).
 *
 * mkm_write() builds a whole model of any architecture kvserve loads (llama, qwen2, qwen3,
 * gemma2, gemma3, phi3) with the keys and tensors llama.cpp reads for it: random weights
 * normal(0, 0.02) from a fixed-seed generator, norms 1 (or 1 + normal(0, norm_std)), biases
 * random, and a working vocabulary (SentencePiece "llama" or byte-level "gpt2" flavour). Each
 * architecture option (head size, partial RoPE, windows, soft-caps, RoPE scaling, fused
 * tensors) can be set so that tests cover shapes the reference files do not. Used by
 * `kvserve mkmodel`, the tests and the benchmarks.
 */
#ifndef KVSERVE_MKMODEL_H
#define KVSERVE_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct mkm_params {
    const char *arch;       /* "llama", "qwen2", "qwen3", "gemma2", "gemma3" or "phi3" */
    const char *name;       /* general.name; NULL: "mkmodel" */
    int dim;                /* embedding size */
    int layers;
    int heads;              /* query heads; dim % heads == 0 unless head_dim is set */
    int kv_heads;           /* 0: = heads; heads % kv_heads == 0 */
    int head_dim;           /* 0: dim / heads; else attention.key_length (qwen3, gemma, phi3) */
    int rope_dims;          /* 0: the head size; less rotates part of each head (gemma, phi3) */
    int swa_window;         /* gemma: attention.sliding_window (0: not written) */
    int swa_pattern;        /* gemma: attention.sliding_window_pattern (-1: not written) */
    float rope_base_swa;    /* gemma: rope.freq_base_swa (0: not written) */
    float attn_softcap;     /* gemma2: attn_logit_softcapping (0: not written) */
    float final_softcap;    /* gemma2/gemma3: final_logit_softcapping (0: not written) */
    const char *rope_scaling; /* rope.scaling.type, e.g. "linear" or "yarn" (NULL: not written) */
    float rope_factor;      /* rope.scaling.factor (0: not written) */
    int rope_ctx_orig;      /* rope.scaling.original_context_length (0: not written) */
    float rope_attn_factor; /* rope.scaling.attn_factor (0: not written) */
    int rope_freqs;         /* llama: 1 writes rope_freqs.weight with Llama 3.1's factors
                               (factor 8, low 1, high 4, original context 8192) */
    int fused_qkv;          /* 1: one attn_qkv instead of attn_q/k/v (phi3 always fuses) */
    int qkv_bias;           /* 1: q/k/v biases (qwen2 always has them) */
    float norm_std;         /* 0: norm weights 1; else 1 + normal(0, norm_std) */
    int quiet_from;         /* > 0: layers from this one on write attn_output and ffn_down scaled by
                               quiet_scale, so that they add little to the residual. Tensors are
                               seeded by (seed, index), so with the same seed such a model's first
                               quiet_from layers, embedding and head are those of the model with
                               quiet_from layers: a speculative-decoding target and its draft */
    float quiet_scale;      /* 0: 0.05 */
    int ffn;                /* 0: 4 × dim rounded up to a multiple of 32 */
    int vocab;              /* ≥ 3 + 256 + n_extra (spm) or 256 + n_extra + 1 (gpt2) */
    int context;            /* context_length */
    int type;               /* enum dt_type of the matrices: DT_F32, DT_F16, DT_BF16, DT_Q8_0 */
    uint64_t seed;          /* weights generator seed */
    float rope_base;        /* 0: 10000 */
    float rms_eps;          /* 0: 1e-5 */
    int tied;               /* 1: no output.weight (the embedding is reused) */
    const char *tokenizer;  /* "spm" (default when NULL) or "gpt2" */
    const char **extra_tokens; /* control tokens added after the byte tokens, e.g. "<|im_start|>" */
    int n_extra;
    const char *chat_template; /* written as tokenizer.chat_template when non-NULL */
    const char *chat_template_tool_use; /* tokenizer.chat_template.tool_use when non-NULL */
    const char *pooling;    /* <arch>.pooling_type by name: "none", "mean", "cls", "last" or
                               "rank" (NULL: not written). "rank" adds a classification head as
                               llama.cpp's converter writes it: for qwen3 Qwen3-Reranker's
                               (cls.output of the "yes" and "no" rows, output labels yes / no and
                               its tokenizer.chat_template.rerank), else a BERT-style one
                               (cls.weight / cls.bias, tanh, a one-output cls.output) */
} mkm_params;

/* Fills the defaults: llama, dim 64, 2 layers, 4 heads, vocab 512, context 2048, F32, seed 1234,
 * spm tokenizer, no extra tokens, no architecture options (swa_pattern -1). */
void mkm_params_default(mkm_params *p);

/* Writes a synthetic model to path. 0, or -EINVAL (bad parameters) / -EIO / -ENOMEM with a
 * one-line message in err. */
int mkm_write(const char *path, const mkm_params *p, char *err, size_t err_len);

#endif
