/*
 * mkmodel_moe.c — the synthetic models' mixtures of experts and multi-head latent attention
 * (model/mkmodel.c calls it): the keys and tensors llama.cpp reads for qwen3moe, llama with
 * experts, deepseek2 (MLA, leading dense layers, shared experts, its routing options) and
 * gpt-oss (biased router and experts), so `kvserve mkmodel --arch qwen3moe --experts N
 * --experts-used K` makes a file of any shape for tests and benchmarks.
 */
#include <stdio.h>
#include <string.h>

#include "model/dtype.h"
#include "model/mkmodel_internal.h"

const char *mkm__moe_shape(const mkm_params *p, int hd, int rope, int ffn, mkm__moe *m)
{
    memset(m, 0, sizeof *m);
    const char *a = p->arch;
    int ds2 = !strcmp(a, "deepseek2"), required = ds2 || !strcmp(a, "qwen3moe") || !strcmp(a, "gpt-oss");
    if (p->experts < 0 || p->experts_used < 0) return "experts and experts used must not be negative";
    if (p->experts && !required && strcmp(a, "llama")) return "experts need llama, qwen3moe, deepseek2 or gpt-oss";
    if (p->experts_used && !p->experts && !required) return "experts used without experts";
    if (!p->experts && !required) return NULL;
    m->experts = p->experts ? p->experts : 8;
    m->used = p->experts_used ? p->experts_used : m->experts < 2 ? m->experts : 2;
    m->ff = ffn;
    if (m->used > m->experts || m->experts > 1024) return "need 1 ≤ experts used ≤ experts ≤ 1024";
    if (!ds2) return NULL;
    m->mla = 1;
    m->nope = hd;
    m->rope = rope != hd ? rope : (hd / 2 + 1) / 2 * 2;
    m->kv_lora = p->kv_lora ? p->kv_lora : 4 * hd;
    m->q_lora = p->q_lora;
    m->v_head = p->v_head ? p->v_head : hd;
    m->shared = p->shared_experts ? p->shared_experts : 1;
    m->dense_lead = p->dense_lead ? p->dense_lead : p->layers > 1;
    if (m->rope < 2 || m->rope % 2 || m->kv_lora < 1 || m->v_head < 1 || m->q_lora < 0 || m->dense_lead > p->layers)
        return "deepseek2 needs an even rope size, a positive kv lora rank and value head, at most layers dense";
    if (p->expert_groups > 1 && (m->experts % p->expert_groups || m->experts / p->expert_groups < 2 ||
                                 p->groups_used < 1 || p->groups_used > p->expert_groups))
        return "expert groups must divide the experts (two or more each), groups used between 1 and the groups";
    if (p->type == DT_Q8_0 && (hd % 32 || m->kv_lora % 32 || (p->heads * m->v_head) % 32 || m->q_lora % 32))
        return "Q8_0 needs the head size, the kv and q lora ranks and heads × value head to be multiples of 32";
    return NULL;
}

void mkm__moe_keys(gguf_writer *w, const mkm_params *p, const mkm__moe *m)
{
    char key[128];
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", p->arch, suffix), key)
    if (!m->experts) return;
    gguf_put_u32(w, AK("expert_count"), (uint32_t)m->experts);
    gguf_put_u32(w, AK("expert_used_count"), (uint32_t)m->used);
    if (strcmp(p->arch, "llama")) gguf_put_u32(w, AK("expert_feed_forward_length"), (uint32_t)m->ff);
    if (!m->mla) return;
    gguf_put_u32(w, AK("attention.q_lora_rank"), (uint32_t)m->q_lora);
    gguf_put_u32(w, AK("attention.kv_lora_rank"), (uint32_t)m->kv_lora);
    gguf_put_u32(w, AK("attention.key_length_mla"), (uint32_t)(m->nope + m->rope));
    gguf_put_u32(w, AK("attention.value_length_mla"), (uint32_t)m->v_head);
    gguf_put_u32(w, AK("expert_shared_count"), (uint32_t)m->shared);
    gguf_put_u32(w, AK("leading_dense_block_count"), (uint32_t)m->dense_lead);
    if (p->expert_scale > 0) gguf_put_f32(w, AK("expert_weights_scale"), p->expert_scale);
    if (p->expert_norm) gguf_put_bool(w, AK("expert_weights_norm"), 1);
    if (p->gating) gguf_put_u32(w, AK("expert_gating_func"), (uint32_t)p->gating);
    if (p->expert_groups) {
        gguf_put_u32(w, AK("expert_group_count"), (uint32_t)p->expert_groups);
        gguf_put_u32(w, AK("expert_group_used_count"), (uint32_t)p->groups_used);
    }
#undef AK
}

void mkm__mla_tensors(mkm__out *o, const mkm_params *p, const mkm__moe *m, int l)
{
    int64_t d = p->dim, H = p->heads, hq = m->nope + m->rope, r = m->kv_lora;
    char name[64];
#define L(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    if (m->q_lora) {
        mkm__tensor(o, L("attn_q_a.weight"), MKM_RANDOM, p->type, d, m->q_lora, 0);
        mkm__tensor(o, L("attn_q_a_norm.weight"), MKM_ONES, DT_F32, m->q_lora, 0, 0);
        mkm__tensor(o, L("attn_q_b.weight"), MKM_RANDOM, p->type, m->q_lora, H * hq, 0);
    } else {
        mkm__tensor(o, L("attn_q.weight"), MKM_RANDOM, p->type, d, H * hq, 0);
    }
    mkm__tensor(o, L("attn_kv_a_mqa.weight"), MKM_RANDOM, p->type, d, r + m->rope, 0);
    mkm__tensor(o, L("attn_kv_a_norm.weight"), MKM_ONES, DT_F32, r, 0, 0);
    mkm__tensor(o, L("attn_k_b.weight"), MKM_RANDOM, p->type, m->nope, r, H);
    mkm__tensor(o, L("attn_v_b.weight"), MKM_RANDOM, p->type, r, m->v_head, H);
    mkm__tensor(o, L("attn_output.weight"), MKM_RANDOM, p->type, H * m->v_head, d, 0);
#undef L
}

int mkm__moe_tensors(mkm__out *o, const mkm_params *p, const mkm__moe *m, int l)
{
    if (!m->experts || l < m->dense_lead) return 0;
    int64_t d = p->dim, E = m->experts, ff = m->ff, sh = (int64_t)m->shared * ff;
    int gpt = !strcmp(p->arch, "gpt-oss");
    char name[64];
#define L(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    mkm__tensor(o, L("ffn_gate_inp.weight"), MKM_ROUTER, DT_F32, d, E, 0);
    if (gpt) mkm__tensor(o, L("ffn_gate_inp.bias"), MKM_RANDOM, DT_F32, E, 0, 0);
    if (m->mla && p->sel_bias) mkm__tensor(o, L("exp_probs_b.bias"), MKM_RANDOM, DT_F32, E, 0, 0);
    mkm__tensor(o, L("ffn_gate_exps.weight"), MKM_RANDOM, p->type, d, ff, E);
    mkm__tensor(o, L("ffn_up_exps.weight"), MKM_RANDOM, p->type, d, ff, E);
    mkm__tensor(o, L("ffn_down_exps.weight"), MKM_RANDOM, p->type, ff, d, E);
    if (gpt) {
        mkm__tensor(o, L("ffn_gate_exps.bias"), MKM_RANDOM, DT_F32, ff, E, 0);
        mkm__tensor(o, L("ffn_up_exps.bias"), MKM_RANDOM, DT_F32, ff, E, 0);
        mkm__tensor(o, L("ffn_down_exps.bias"), MKM_RANDOM, DT_F32, d, E, 0);
    }
    if (m->mla && sh) {
        mkm__tensor(o, L("ffn_gate_shexp.weight"), MKM_RANDOM, p->type, d, sh, 0);
        mkm__tensor(o, L("ffn_up_shexp.weight"), MKM_RANDOM, p->type, d, sh, 0);
        mkm__tensor(o, L("ffn_down_shexp.weight"), MKM_RANDOM, p->type, sh, d, 0);
    }
#undef L
    return 1;
}
