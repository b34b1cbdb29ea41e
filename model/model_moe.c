/*
 * model_moe.c — what the mixture-of-experts and latent-attention architectures add to loading:
 * their keys (llama.cpp's readings in src/llama-model.cpp, with its defaults and asserts) and
 * their tensors.
 *
 *  - experts (llama with expert_count, qwen3moe, deepseek2, gpt-oss): counts, the width of each
 *    expert, the routing rule (gating function, renormalisation, weight scale, grouped top-k,
 *    selection bias), leading dense layers and shared experts (deepseek2);
 *  - multi-head latent attention (deepseek2): the LoRA ranks, the per-head split of q into a
 *    part without RoPE and a RoPE part, the value head, the q·k scale with YaRN's log factor;
 *  - gpt-oss: its window on every other layer, the sinks, its clamped SwiGLU.
 *
 * The 3-D expert tensors ([n_in, n_out, n_expert], each expert's matrix a contiguous run of
 * rows) and MLA's per-head up-projections become one 2-D view per expert or head, taken from
 * the model's view array; nothing is copied. Called by model_hparams.c and model.c while
 * loading; the invariants of model.c hold for every view.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/gguf.h"
#include "model/model_internal.h"

#define MOE_MAX_EXPERTS 1024 /* llama.cpp's bound on expert_count */

/* A boolean key "<arch>.<suffix>" (absent: def). */
static int ld_bool(model__ld *ld, const char *a, const char *suffix, int def, int *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", a, suffix);
    int rc = gguf_get_bool(ld->f, key, out);
    if (rc == -ENOENT) *out = def, rc = 0;
    return rc ? model__fail(ld, -EINVAL, "key '%s' is not a boolean", key) : 0;
}

/* deepseek2's routing keys: gating function, renormalisation, weight scale, expert groups. */
static int read_deepseek2_routing(model__ld *ld, const char *a, model_hparams *hp)
{
    int rc, gating;
    if ((rc = model__ld_int(ld, a, "expert_gating_func", 0, 0, &gating)) ||
        (rc = ld_bool(ld, a, "expert_weights_norm", 0, &hp->expert_weights_norm)) ||
        (rc = model__ld_float(ld, a, "expert_weights_scale", 0.0f, 1, &hp->expert_weights_scale)) ||
        (rc = model__ld_int(ld, a, "expert_group_count", 0, 0, &hp->n_expert_groups)) ||
        (rc = model__ld_int(ld, a, "expert_group_used_count", 0, 0, &hp->n_group_used)))
        return rc;
    if (gating > MODEL_GATING_SOFTMAX_WEIGHT)
        return model__fail(ld, -EINVAL, "%s.expert_gating_func = %d is not a gating function llama.cpp knows", a,
                           gating);
    /* absent (0): softmax, except GLM-4.7-Lite's shape (47/48 layers, 154880 tokens): sigmoid */
    if (gating == 0)
        gating = (hp->n_layers == 47 || hp->n_layers == 48) && hp->n_vocab == 154880 ? MODEL_GATING_SIGMOID
                                                                                     : MODEL_GATING_SOFTMAX;
    hp->expert_gating = gating;
    if (hp->n_expert_groups <= 1) {
        hp->n_expert_groups = hp->n_group_used = 0;
        return 0;
    }
    int per = hp->n_expert / hp->n_expert_groups;
    if (hp->n_expert % hp->n_expert_groups || per < 2 || hp->n_group_used < 1 ||
        hp->n_group_used > hp->n_expert_groups || hp->n_expert_used > hp->n_group_used * per)
        return model__fail(ld, -EINVAL, "%d experts in %d groups, %d groups used, %d experts used: the groups must "
                           "divide the experts (two or more each) and the used groups hold the used experts",
                           hp->n_expert, hp->n_expert_groups, hp->n_group_used, hp->n_expert_used);
    return 0;
}

int model__read_moe(model__ld *ld, const char *a, model_hparams *hp)
{
    int rc;
    if ((rc = model__ld_int(ld, a, "expert_count", 0, 0, &hp->n_expert)) ||
        (rc = model__ld_int(ld, a, "expert_used_count", 0, 0, &hp->n_expert_used)))
        return rc;
    int required = hp->arch == MODEL_ARCH_QWEN3MOE || hp->arch == MODEL_ARCH_GPT_OSS;
    if (hp->n_expert == 0 && required)
        return model__fail(ld, -EINVAL, "%s.expert_count must be > 0 for architecture %s", a, a);
    if (hp->n_expert == 0) {
        if (hp->n_expert_used)
            return model__fail(ld, -EINVAL, "%s.expert_used_count = %d without experts", a, hp->n_expert_used);
        return 0;
    }
    if (hp->n_expert > MOE_MAX_EXPERTS || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
        return model__fail(ld, -EINVAL, "%s.expert_count = %d, expert_used_count = %d: need 1 ≤ used ≤ count ≤ %d", a,
                           hp->n_expert, hp->n_expert_used, MOE_MAX_EXPERTS);
    hp->expert_gating = MODEL_GATING_SOFTMAX;
    hp->expert_weights_norm = 1;
    switch (hp->arch) {
    case MODEL_ARCH_LLAMA: /* Mixtral: the experts have the FFN's width */
        hp->n_ff_exp = hp->n_ff;
        return 0;
    case MODEL_ARCH_QWEN3MOE: /* renormalised softmax, no scale (qwen3moe.cpp) */
        return model__ld_int(ld, a, "expert_feed_forward_length", hp->n_ff / hp->n_expert_used, 1, &hp->n_ff_exp);
    case MODEL_ARCH_GPT_OSS: /* top-k of the raw logits, softmaxed among themselves */
        hp->expert_gating = MODEL_GATING_SOFTMAX_WEIGHT;
        hp->expert_weights_norm = 0;
        return model__ld_int(ld, a, "expert_feed_forward_length", -1, 1, &hp->n_ff_exp);
    default: break;
    }
    /* deepseek2 */
    int nextn;
    if ((rc = model__ld_int(ld, a, "expert_feed_forward_length", -1, 1, &hp->n_ff_exp)) ||
        (rc = model__ld_int(ld, a, "expert_shared_count", -1, 0, &hp->n_expert_shared)) ||
        (rc = model__ld_int(ld, a, "leading_dense_block_count", 0, 0, &hp->n_layer_dense_lead)) ||
        (rc = model__ld_int(ld, a, "nextn_predict_layers", 0, 0, &nextn)) ||
        (rc = read_deepseek2_routing(ld, a, hp)))
        return rc;
    if (nextn)
        return model__fail(ld, -EINVAL, "%s.nextn_predict_layers = %d: multi-token-prediction layers are not supported",
                           a, nextn);
    if (hp->n_layer_dense_lead > hp->n_layers)
        return model__fail(ld, -EINVAL, "%s.leading_dense_block_count %d exceeds the %d layers", a,
                           hp->n_layer_dense_lead, hp->n_layers);
    if ((int64_t)hp->n_expert_shared * hp->n_ff_exp > MODEL__MAX_DIM)
        return model__fail(ld, -EINVAL, "the shared experts are too wide");
    hp->n_ff_shexp = hp->n_expert_shared * hp->n_ff_exp;
    return 0;
}

/* llama.cpp's "lite" DeepSeek shapes, which have no q LoRA and do not read its rank. */
static int deepseek2_is_lite(const model_hparams *hp)
{
    return hp->n_layers == 26 || hp->n_layers == 27 || (hp->n_layers == 48 && hp->n_vocab == 128256);
}

int model__read_mla(model__ld *ld, const char *a, model_hparams *hp)
{
    int rc, kv_lora, k_mla, v_mla, vlen = hp->kv_lora_rank; /* read_heads put value_length there */
    float log_mul;
    if ((rc = model__ld_int(ld, a, "attention.q_lora_rank", deepseek2_is_lite(hp) ? 0 : -1, 0, &hp->q_lora_rank)) ||
        (rc = model__ld_int(ld, a, "attention.kv_lora_rank", -1, 1, &kv_lora)) ||
        (rc = model__ld_int(ld, a, "attention.key_length_mla", 0, 0, &k_mla)) ||
        (rc = model__ld_int(ld, a, "attention.value_length_mla", 0, 0, &v_mla)) ||
        (rc = model__ld_float(ld, a, "rope.scaling.yarn_log_multiplier", 0.0f, 1, &log_mul)))
        return rc;
    if (!k_mla || !v_mla)
        return model__fail(ld, -EINVAL, "%s without attention.key_length_mla and value_length_mla stores the "
                           "un-split attn_kv_b (an older conversion), which kvserve does not support; convert it "
                           "with a current llama.cpp", a);
    if (hp->n_kv_heads != 1 || hp->head_dim != kv_lora + hp->rope_dims || vlen != kv_lora || k_mla <= hp->rope_dims)
        return model__fail(ld, -EINVAL, "MLA geometry: head_count_kv %d (must be 1), key_length %d (must be "
                           "kv_lora_rank %d + rope %d), value_length %d (must be kv_lora_rank), key_length_mla %d "
                           "(must exceed the rope dims)", hp->n_kv_heads, hp->head_dim, kv_lora, hp->rope_dims, vlen,
                           k_mla);
    if (hp->rope_scaling == MODEL_ROPE_SCALING_LINEAR && hp->rope_freq_scale != 1.0f)
        return model__fail(ld, -EINVAL, "%s with linear rope scaling is not supported (none or yarn)", a);
    hp->mla = 1;
    hp->kv_lora_rank = kv_lora;
    hp->qk_nope = k_mla - hp->rope_dims;
    hp->v_head_dim = v_mla;
    /* deepseek2.cpp: mscale = attn_factor · (1 + 0.1 · (log_mul / 0.1) · ln(1 / freq_scale)) and
     * q·k × mscale² / √(qk_nope + qk_rope); cos and sin keep attn_factor (model_layer_rope) */
    float mscale = hp->rope_attn_factor * (1.0f + log_mul * logf(1.0f / hp->rope_freq_scale));
    hp->attn_scale = mscale * mscale / sqrtf((float)k_mla);
    return 0;
}

int model__read_gpt_oss(model__ld *ld, const char *a, model_hparams *hp)
{
    int rc, pattern;
    if ((rc = model__ld_int(ld, a, "attention.sliding_window", -1, 1, &hp->swa_window)) ||
        (rc = model__ld_int(ld, a, "attention.sliding_window_pattern", 2, 0, &pattern)) ||
        (rc = model__ld_float(ld, a, "rope.freq_base_swa", hp->rope_base, 0, &hp->rope_base_swa)))
        return rc;
    if (pattern != 2)
        return model__fail(ld, -EINVAL, "%s.attention.sliding_window_pattern = %d: llama.cpp fixes gpt-oss's at 2 "
                           "(every even layer slides)", a, pattern);
    hp->swa_pattern = 2;
    hp->attn_sinks = 1;
    hp->ffn_act = MODEL_ACT_SWIGLU_OAI;
    return 0;
}

/* ---- tensors -------------------------------------------------------------------------------- */

size_t model__views_per_layer(const model_hparams *hp)
{
    return 6 * (size_t)hp->n_expert + (hp->mla ? 2 * (size_t)hp->n_heads : 0);
}

#define B(field, suffix, ne0, ne1, ne2, mat, opt)                                     \
    do {                                                                              \
        snprintf(n, sizeof n, "blk.%d.%s", i, suffix);                                \
        if (!rc) rc = model__bind(ld, field, n, ne0, ne1, ne2, mat, opt);             \
    } while (0)

/* n views of `rows` rows of t each: expert or head e's are rows [e·stride + off, … + rows), from
 * *views; NULL (and nothing taken) when t is absent. */
static model_tensor *split(const model_tensor *t, int n, int64_t stride, int64_t off, int64_t rows,
                           model_tensor **views)
{
    if (!t->data) return NULL;
    model_tensor *v = *views;
    for (int e = 0; e < n; e++) v[e] = model__view_rows(t, e * stride + off, rows);
    *views += n;
    return v;
}

/* The bias matrices of gpt-oss's experts ([width, n_expert], F32): one row per expert. */
static model_tensor *split_bias(const model_tensor *t, int n, int64_t off, int64_t width, model_tensor **views)
{
    if (!t->data) return NULL;
    model_tensor *v = *views;
    for (int e = 0; e < n; e++) {
        v[e] = model__view_rows(t, e, 1);
        v[e].ne[0] = width;
        v[e].data = (const float *)v[e].data + off;
        v[e].row_bytes = (size_t)width * sizeof(float);
    }
    *views += n;
    return v;
}

/* The routed experts: gate and up separately or fused (ffn_gate_up_exps: per expert its gate
 * rows, then its up rows), down, and gpt-oss's biases. */
static int bind_experts(model__ld *ld, model_hparams *hp, int i, model_layer *l, model_tensor **views)
{
    int64_t d = hp->n_embd, ff = hp->n_ff_exp, E = hp->n_expert;
    int gpt = hp->arch == MODEL_ARCH_GPT_OSS, rc = 0;
    char n[96];
    model_tensor gu, g, u, dn, bgu, bg, bu, bd;
    memset(&bgu, 0, sizeof bgu), memset(&bg, 0, sizeof bg), memset(&bu, 0, sizeof bu), memset(&bd, 0, sizeof bd);
    snprintf(n, sizeof n, "blk.%d.ffn_gate_up_exps.weight", i);
    int fused = gguf_find_tensor(ld->f, n) != NULL;
    if (fused) {
        B(&gu, "ffn_gate_up_exps.weight", d, 2 * ff, E, 1, 0);
        if (gpt) B(&bgu, "ffn_gate_up_exps.bias", 2 * ff, E, 1, 0, 0);
        g = u = gu;
        hp->fused_gate_up_exps = 1;
    } else {
        snprintf(n, sizeof n, "blk.%d.ffn_gate_exps.weight", i);
        if (!gguf_find_tensor(ld->f, n))
            return model__fail(ld, -EINVAL, "tensor '%s' is missing: experts without a gate (silu(up) alone) are "
                               "not supported", n);
        B(&g, "ffn_gate_exps.weight", d, ff, E, 1, 0);
        B(&u, "ffn_up_exps.weight", d, ff, E, 1, 0);
        if (gpt) {
            B(&bg, "ffn_gate_exps.bias", ff, E, 1, 0, 0);
            B(&bu, "ffn_up_exps.bias", ff, E, 1, 0, 0);
        }
    }
    B(&dn, "ffn_down_exps.weight", ff, d, E, 1, 0);
    if (gpt) B(&bd, "ffn_down_exps.bias", d, E, 1, 0, 0);
    if (rc) return rc;
    int64_t step = fused ? 2 * ff : ff;
    l->gate_exps = split(&g, (int)E, step, 0, ff, views);
    l->up_exps = split(&u, (int)E, step, fused ? ff : 0, ff, views);
    l->down_exps = split(&dn, (int)E, d, 0, d, views);
    l->b_gate_exps = split_bias(fused ? &bgu : &bg, (int)E, 0, ff, views);
    l->b_up_exps = split_bias(fused ? &bgu : &bu, (int)E, fused ? ff : 0, ff, views);
    l->b_down_exps = split_bias(&bd, (int)E, 0, d, views);
    return 0;
}

int model__bind_moe(model__ld *ld, model_hparams *hp, int i, model_layer *l, model_tensor **views)
{
    if (!model_layer_is_moe(hp, i)) return 0;
    int64_t d = hp->n_embd, E = hp->n_expert, fs = hp->n_ff_shexp;
    char n[96];
    int rc = 0;
    B(&l->gate_inp, "ffn_gate_inp.weight", d, E, 1, 1, 0);
    if (hp->arch == MODEL_ARCH_GPT_OSS) B(&l->gate_inp_b, "ffn_gate_inp.bias", E, 0, 1, 0, 0);
    if (hp->arch == MODEL_ARCH_DEEPSEEK2) B(&l->exp_probs_b, "exp_probs_b.bias", E, 0, 1, 0, 1);
    if (!rc) rc = bind_experts(ld, hp, i, l, views);
    if (fs > 0) {
        B(&l->gate_shexp, "ffn_gate_shexp.weight", d, fs, 1, 1, 0);
        B(&l->up_shexp, "ffn_up_shexp.weight", d, fs, 1, 1, 0);
        B(&l->down_shexp, "ffn_down_shexp.weight", fs, d, 1, 1, 0);
    }
    return rc;
}

int model__bind_mla(model__ld *ld, model_hparams *hp, int i, model_layer *l, model_tensor **views)
{
    int64_t d = hp->n_embd, H = hp->n_heads, hq = hp->qk_nope + hp->rope_dims, r = hp->kv_lora_rank;
    char n[96];
    int rc = 0;
    model_tensor kb, vb;
    if (hp->q_lora_rank > 0) {
        B(&l->wq_a, "attn_q_a.weight", d, hp->q_lora_rank, 1, 1, 0);
        B(&l->q_a_norm, "attn_q_a_norm.weight", hp->q_lora_rank, 0, 1, 0, 0);
        B(&l->wq_b, "attn_q_b.weight", hp->q_lora_rank, H * hq, 1, 1, 0);
    } else {
        B(&l->wq, "attn_q.weight", d, H * hq, 1, 1, 0);
    }
    B(&l->wkv_a, "attn_kv_a_mqa.weight", d, r + hp->rope_dims, 1, 1, 0);
    B(&l->kv_a_norm, "attn_kv_a_norm.weight", r, 0, 1, 0, 0);
    B(&kb, "attn_k_b.weight", hp->qk_nope, r, H, 1, 0);
    B(&vb, "attn_v_b.weight", r, hp->v_head_dim, H, 1, 0);
    B(&l->wo, "attn_output.weight", H * hp->v_head_dim, d, 1, 1, 0);
    if (rc) return rc;
    l->wk_b = split(&kb, (int)H, r, 0, r, views);
    l->wv_b = split(&vb, (int)H, hp->v_head_dim, 0, hp->v_head_dim, views);
    return 0;
}
#undef B
