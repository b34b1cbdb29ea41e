/*
 * model.h — a Llama-family model bound to its GGUF file: hyperparameters and weight views.
 *
 * Architectures: "llama" (Llama 2/3, TinyLlama, Mistral, SmolLM; RoPE on adjacent pairs) and
 * "qwen2" (Q/K/V biases, NEOX RoPE on halves). The model's weight views point into the mapping
 * (zero copy); a backend packs, converts or uploads them as it likes. Matrices use GGML order: ne[0] = n_in (contiguous),
 * ne[1] = n_out, so row r of a matrix holds the n_in weights of output r.
 */
#ifndef KVSERVE_MODEL_H
#define KVSERVE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"

enum model_arch { MODEL_ARCH_LLAMA = 0, MODEL_ARCH_QWEN2 = 1 };

typedef struct model_tensor {
    const char *name;  /* borrowed from the model (NUL-terminated copy) */
    int type;          /* enum dt_type: any dt_is_supported type for matrices; F32 for norms/biases */
    int64_t ne[2];     /* ne[0] = contiguous (n_in), ne[1] = rows (n_out); 1-D: ne[1] = 1 */
    const void *data;  /* in the mapping; NULL when the tensor is absent (optional biases) */
    size_t row_bytes;  /* bytes of one row of ne[0] elements */
} model_tensor;

typedef struct model_layer {
    model_tensor attn_norm;      /* [n_embd] */
    model_tensor wq, wk, wv, wo; /* [n_embd → n_heads*head_dim], [→ kv_dim], [→ kv_dim], [q_dim → n_embd] */
    model_tensor bq, bk, bv;     /* qwen2 biases [q_dim], [kv_dim], [kv_dim]; data NULL for llama */
    model_tensor ffn_norm;       /* [n_embd] */
    model_tensor w_gate, w_up;   /* [n_embd → n_ff] */
    model_tensor w_down;         /* [n_ff → n_embd] */
} model_layer;

typedef struct model_hparams {
    int arch;            /* enum model_arch */
    char arch_name[32];
    char name[128];      /* general.name, or "" */
    int n_embd;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;        /* n_embd / n_heads unless attention.key_length says otherwise */
    int n_ff;
    int n_vocab;
    int n_ctx_train;     /* context_length */
    float rope_base;     /* rope.freq_base, default 10000 */
    int rope_dims;       /* rope.dimension_count, default head_dim */
    int rope_neox;       /* 1: rotate halves (qwen2); 0: adjacent pairs (llama GGUFs) */
    float rms_eps;       /* attention.layer_norm_rms_epsilon, default 1e-5 */
    int tied_output;     /* 1 when output.weight is absent and token_embd is reused */
    int file_type;       /* general.file_type, or -1 */
} model_hparams;

typedef struct model {
    model_hparams hp;
    gguf_file *gguf;         /* owned */
    char path[4096];
    model_tensor tok_embd;   /* [n_embd × n_vocab] (row t = embedding of token t) */
    model_tensor output_norm;/* [n_embd] */
    model_tensor output;     /* [n_embd → n_vocab]; equals tok_embd when tied */
    model_layer *layers;     /* [n_layers] */
} model;

/* Loads hyperparameters and binds every tensor by name with its shape checked. On failure returns
 * a negative errno and writes a one-line message naming the file and the problem (unsupported
 * architecture or tensor type, missing tensor, wrong shape, bad key) into err. */
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

#endif
