/*
 * test_cuda.c — the CUDA backend's ops against the CPU backend on a GPU (suite "cuda").
 *
 * Compiled only in CUDA builds (KVSERVE_CUDA). Every test that needs a GPU skips with the reason
 * cuda_is_available gives when none is visible; the checks themselves are shared with the GPU
 * check program (cuda/check/kernel_checks.c), at small sizes here. `make test-cuda` runs them.
 * The availability tests run everywhere CUDA is built and check the no-GPU path: a clear
 * one-line error naming CUDA, and the CPU chosen under --device auto; so does the check that the
 * kernel table of every compute capability is complete.
 */
#ifdef KVSERVE_CUDA

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cli/device.h"
#include "cpu/cpu.h"
#include "cuda/check/kernel_checks.c"
#include "cuda/check/sample_checks.c"
#include "cuda/cuda_backend.h"
#include "engine/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "tests/test_util.h"

typedef struct tcu_env {
    kc_ctx c;
} tcu_env;

/* The op checks run the GPU backend with f32 activations (every kernel's f32 instantiation:
 * within f32 rounding of the CPU); act_type DT_BF16 gives the backend serving runs. */
static void tcu_open_act(tcu_env *e, uint64_t seed, const char *what, int act_type)
{
    char why[256];
    if (!cuda_is_available(why, sizeof why)) cr_skip_test("no GPU visible, %s not run (%s)", what, why);
    char err[256];
    memset(e, 0, sizeof *e);
    e->c.gpu = cuda_backend_create_act(0, act_type, err, sizeof err);
    cr_assert_not_null(e->c.gpu, "%s", err);
    e->c.cpu = cpu_backend_create(2);
    cr_assert_not_null(e->c.cpu);
    e->c.rng = seed;
    printf("cuda/%s seed %#llx on %s\n", what, (unsigned long long)seed, e->c.gpu->desc);
}

static void tcu_open(tcu_env *e, uint64_t seed, const char *what)
{
    tcu_open_act(e, seed, what, DT_F32);
}

static void tcu_close(tcu_env *e)
{
    be_destroy(e->c.gpu);
    be_destroy(e->c.cpu);
}

/* tests/data/stories260K.gguf, loaded (the environment is closed first when it cannot be). */
static model *tcu_stories(tcu_env *e)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    model *m = NULL;
    if (model_load(path, &m, err, sizeof err)) {
        tcu_close(e);
        cr_assert_fail("model_load %s: %s", path, err);
    }
    return m;
}

static void tcu_expect(kc_result r)
{
    printf("  %-34s err %.3g (tol %.3g) %s\n", r.name, r.err, r.tol, r.note);
    cr_expect(r.ok, "%s: relative error %.3g over tolerance %.3g (%s)", r.name, r.err, r.tol, r.note);
}

Test(cuda, unavailable_is_a_clean_error)
{
    char why[256] = "", err[256] = "";
    if (cuda_is_available(why, sizeof why)) {
        backend *be = cuda_backend_create(0, err, sizeof err);
        cr_assert_not_null(be, "%s", err);
        cr_assert_str_eq(be->name, "cuda");
        cr_assert_gt(be->ops->mem_available(be), 0);
        be_destroy(be);
        cr_assert_null(cuda_backend_create(1 << 20, err, sizeof err));
        cr_assert(strstr(err, "CUDA") != NULL);
        return;
    }
    cr_assert(strstr(why, "CUDA") != NULL, "the reason names CUDA: '%s'", why);
    cr_assert(strchr(why, '\n') == NULL, "one line: '%s'", why);
    cr_assert_null(cuda_backend_create(0, err, sizeof err));
    cr_assert(strstr(err, "CUDA") != NULL, "'%s'", err);
    cr_assert_null(be_create("cuda", 1, err, sizeof err));
    cr_assert(strstr(err, "CUDA") != NULL, "'%s'", err);
    backend *be = be_create("auto", 1, err, sizeof err);
    cr_assert_not_null(be, "auto falls back to the CPU");
    cr_assert_str_eq(be->name, "cpu");
    be_destroy(be);
}

/* The kernel table of each compute capability a device may report has every entry set
 * (cuda/kern.h): an entry added without its fill, or a quantised type without its per-type
 * kernels, fails here, on any machine that builds CUDA. */
Test(cuda, kernel_table_complete)
{
    static const int ccs[] = {70, 75, 80, 86, 87, 89, 90, 100, 103, 120, 121};
    for (size_t i = 0; i < sizeof ccs / sizeof ccs[0]; i++) {
        const char *missing = cuda_kern_missing(ccs[i]);
        cr_assert_null(missing, "sm_%d: the kernel table leaves %s empty", ccs[i], missing);
    }
}

Test(cuda, embed)
{
    tcu_env e;
    tcu_open(&e, 0xe3bed, "embed");
    for (int i = 0; i < KC_N_WEIGHT_TYPES; i++) tcu_expect(kc_check_embed(&e.c, kc_weight_types[i]));
    tcu_close(&e);
}

Test(cuda, rmsnorm)
{
    tcu_env e;
    tcu_open(&e, 0x4a5, "rmsnorm");
    tcu_expect(kc_check_rmsnorm(&e.c, 0));
    tcu_expect(kc_check_rmsnorm(&e.c, 1));
    tcu_close(&e);
}

Test(cuda, matmul)
{
    tcu_env e;
    tcu_open(&e, 0x3a73, "matmul");
    for (int i = 0; i < KC_N_WEIGHT_TYPES; i++) {
        int t = kc_weight_types[i];
        tcu_expect(kc_check_matmul(&e.c, t, 1, kc_n_in(t, 96), 80, 0));
        tcu_expect(kc_check_matmul(&e.c, t, 5, kc_n_in(t, 160), 77, 1));
        tcu_expect(kc_check_matmul(&e.c, t, 33, kc_n_in(t, 160), 72, 1));
    }
    tcu_expect(kc_check_qmatmul_multi(&e.c, 3, 512));
    tcu_expect(kc_check_qmatmul_multi(&e.c, 40, 512));
    tcu_close(&e);
}

Test(cuda, rope)
{
    tcu_env e;
    tcu_open(&e, 0x209e, "rope");
    for (int neox = 0; neox < 2; neox++) {
        tcu_expect(kc_check_rope(&e.c, neox, 0));
        tcu_expect(kc_check_rope(&e.c, neox, 1));
    }
    tcu_close(&e);
}

Test(cuda, elementwise_and_argmax)
{
    tcu_env e;
    tcu_open(&e, 0xe1e, "elementwise");
    tcu_expect(kc_check_elementwise(&e.c));
    tcu_expect(kc_check_argmax(&e.c));
    tcu_close(&e);
}

Test(cuda, sampler_matches_cpu)
{
    tcu_env e;
    tcu_open(&e, 0x5a3b1e, "sampler");
    tcu_expect(kc_check_sampler(&e.c));
    tcu_close(&e);
}

Test(cuda, store_kv)
{
    tcu_env e;
    tcu_open(&e, 0x5701e, "store_kv");
    tcu_expect(kc_check_store_kv(&e.c, KV_F16));
    tcu_expect(kc_check_store_kv(&e.c, KV_BF16));
    tcu_expect(kc_check_store_kv(&e.c, KV_F32));
    tcu_expect(kc_check_store_kv(&e.c, KV_I8));
    tcu_expect(kc_check_store_kv(&e.c, KV_FP8));
    tcu_close(&e);
}

Test(cuda, attention)
{
    tcu_env e;
    tcu_open(&e, 0xa77e, "attention");
    const kc_attn_case cases[] = {
        /* label, seqs, ctx, new tokens, heads, kv heads, head dim, KV, soft-cap, window, sinks,
         * kernels (1: the reference kernel) */
        {"decode", 5, 1, 90, 1, 1, 8, 4, 8, KV_F32, 0.0f, 0, 0, 0},          /* stories260K's shape */
        {"decode-long", 2, 600, 1500, 1, 1, 32, 4, 64, KV_F16, 0.0f, 0, 0, 0}, /* split-K */
        {"prefill", 3, 20, 300, 20, 70, 8, 8, 64, KV_F16, 0.0f, 0, 0, 0},     /* cached prefix + chunk, MHA */
        {"mixed", 6, 1, 400, 1, 40, 16, 2, 128, KV_BF16, 0.0f, 0, 0, 0},
        {"mixed-gqa8", 4, 30, 200, 1, 30, 32, 4, 64, KV_F32, 0.0f, 0, 0, 0},
        {"window", 4, 1, 400, 1, 40, 8, 2, 64, KV_F16, 0.0f, 33, 0, 0},
        {"window+softcap", 3, 600, 1500, 1, 1, 8, 4, 64, KV_F32, 20.0f, 100, 0, 0}, /* split-K past the window */
        {"mixed", 5, 1, 300, 1, 30, 8, 2, 64, KV_I8, 0.0f, 0, 0, 0},
        {"decode-long", 2, 600, 1500, 1, 1, 8, 2, 64, KV_I8, 0.0f, 0, 0, 0}, /* split-K */
        {"mixed", 5, 1, 300, 1, 30, 8, 4, 8, KV_FP8, 0.0f, 0, 0, 0},         /* scalar loads */
        {"window", 4, 1, 400, 1, 40, 8, 2, 64, KV_FP8, 0.0f, 33, 0, 0},
        {"mixed hd96", 4, 1, 300, 1, 40, 8, 8, 96, KV_F16, 0.0f, 0, 0, 0},
        {"sinks", 4, 40, 300, 1, 30, 8, 2, 64, KV_BF16, 0.0f, 0, 16, 0},
        {"sinks split-K", 2, 600, 1500, 1, 1, 8, 2, 128, KV_I8, 0.0f, 0, 4, 0},
        {"mixed", 5, 1, 300, 1, 30, 8, 2, 64, KV_F16, 0.0f, 0, 0, 1},        /* the reference kernel */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) tcu_expect(kc_check_attention(&e.c, &cases[i]));
    tcu_close(&e);
}

/* Greedy decode of three prompts in one varlen batch (prefill, then one token per sequence per
 * step) through engine/forward.c on backend be; ids[s][i] gets sequence s's i-th new token. */
#define TCU_SEQS 3
#define TCU_STEPS 48
static void tcu_generate(const model *m, backend *be, int kv_dtype, int32_t ids[TCU_SEQS][TCU_STEPS])
{
    const int bs = 16, stride = 8;
    static const int32_t prompts[TCU_SEQS][5] = {{1, 403, 407, 261, 378}, {1, 317, 269, 274, 287}, {1, 291, 280, 294, 0}};
    const int n_prompt[TCU_SEQS] = {5, 5, 4};
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, bs, kv_dtype);
    char err[256];
    const int32_t n_blocks = TCU_SEQS * stride;
    fwd *f = fwd_create(m, be, &g, &n_blocks, 64, TCU_SEQS, err, sizeof err);
    cr_assert_not_null(f, "%s", err);
    int32_t tokens[16], pos[16], slots[16], q_start[TCU_SEQS + 1], ctx[TCU_SEQS], rows[TCU_SEQS], bt[TCU_SEQS * 8];
    float *logits = malloc((size_t)TCU_SEQS * m->hp.n_vocab * sizeof *logits);
    for (int i = 0; i < TCU_SEQS * stride; i++) bt[i] = TCU_SEQS * stride - 1 - i; /* reversed pages */
    int len[TCU_SEQS] = {0};
    for (int st = 0; st <= TCU_STEPS; st++) {
        int n = 0;
        q_start[0] = 0;
        for (int s = 0; s < TCU_SEQS; s++) {
            int cnt = st == 0 ? n_prompt[s] : 1;
            for (int k = 0; k < cnt; k++, n++) {
                tokens[n] = st == 0 ? prompts[s][k] : ids[s][st - 1];
                pos[n] = len[s];
                slots[n] = cuda_kv_entry_slot(bt + s * stride, bs, len[s]);
                len[s]++;
            }
            ctx[s] = len[s];
            rows[s] = n - 1;
            q_start[s + 1] = n;
        }
        if (st == TCU_STEPS) break;
        be_batch b = {.n_tokens = n, .tokens = tokens, .positions = pos, .n_seqs = TCU_SEQS, .q_start = q_start, .n_logits = TCU_SEQS, .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = stride}}};
        cr_assert_eq(fwd_run(f, &b, logits), 0, "step %d", st);
        for (int s = 0; s < TCU_SEQS; s++) {
            const float *l = logits + (size_t)s * m->hp.n_vocab;
            int best = 0;
            for (int v = 1; v < m->hp.n_vocab; v++)
                if (l[v] > l[best]) best = v;
            ids[s][st] = best;
        }
    }
    free(logits);
    fwd_destroy(f);
}

/* The whole model graph on the GPU (eager and with CUDA graphs) must pick the CPU's tokens. */
Test(cuda, generate_matches_cpu, .timeout = 120)
{
    tcu_env e;
    tcu_open(&e, 1, "generate_matches_cpu");
    model *m = tcu_stories(&e);
    static int32_t want[TCU_SEQS][TCU_STEPS], got[TCU_SEQS][TCU_STEPS];
    const int kvs[2] = {KV_F32, KV_F16};
    for (int k = 0; k < 2; k++) {
        tcu_generate(m, e.c.cpu, kvs[k], want);
        for (int graphs = 0; graphs < 2; graphs++) {
            cuda_set_graphs(e.c.gpu, graphs);
            tcu_generate(m, e.c.gpu, kvs[k], got);
            for (int s = 0; s < TCU_SEQS; s++)
                for (int i = 0; i < TCU_STEPS; i++)
                    cr_assert_eq(got[s][i], want[s][i], "kv %s graphs %d: sequence %d token %d is %d, CPU %d",
                                 kv_dtype_name(kvs[k]), graphs, s, i, got[s][i], want[s][i]);
        }
        cuda_set_graphs(e.c.gpu, 0);
    }
    model_destroy(m);
    tcu_close(&e);
}

/* A synthetic model of every architecture, logits through the whole graph on both backends. */
Test(cuda, every_architecture)
{
    tcu_env e;
    tcu_open(&e, 0xa2c4, "every_architecture");
    for (int a = 0; a < KC_N_ARCHS; a++) tcu_expect(kc_check_arch(&e.c, a));
    tcu_expect(kc_check_arch_typed(&e.c, KC_ARCH_LLAMA, DT_Q8_0));
    tcu_close(&e);
}

/* bf16 activations, what serving runs: matmul of every weight type (matrix-vector kernels and
 * cuBLAS / the quantised GEMM) against float64, and every architecture's logits against the CPU
 * backend within the bf16 tolerance (kernel_checks.c). */
Test(cuda, bf16_ops_and_architectures, .timeout = 120)
{
    tcu_env e;
    tcu_open_act(&e, 0xbf16, "bf16_ops_and_architectures", DT_BF16);
    for (int i = 0; i < KC_N_WEIGHT_TYPES; i++) {
        int t = kc_weight_types[i];
        tcu_expect(kc_check_matmul(&e.c, t, 1, kc_n_in(t, 96), 80, 1));
        tcu_expect(kc_check_matmul(&e.c, t, 6, kc_n_in(t, 98), 40, 0));
        tcu_expect(kc_check_matmul(&e.c, t, 33, kc_n_in(t, 160), 72, 1));
    }
    /* f32 outputs (the MoE router's logits) on the dense, mmvq and mmq paths */
    tcu_expect(kc_check_matmul_f32(&e.c, DT_BF16, 1, 256, 48));
    tcu_expect(kc_check_matmul_f32(&e.c, DT_Q8_0, 4, 256, 48));
    tcu_expect(kc_check_matmul_f32(&e.c, DT_Q4_K, 40, 512, 32));
    for (int a = 0; a < KC_N_ARCHS; a++) tcu_expect(kc_check_arch(&e.c, a));
    tcu_expect(kc_check_arch_typed(&e.c, KC_ARCH_LLAMA, DT_Q8_0));
    tcu_close(&e);
}

/* With bf16 activations the tokens must not depend on CUDA graphs: every padded decode step runs
 * the kernels of its shape, captured, replayed or eager. */
Test(cuda, bf16_graphs_change_no_token, .timeout = 120)
{
    tcu_env e;
    tcu_open_act(&e, 2, "bf16_graphs_change_no_token", DT_BF16);
    model *m = tcu_stories(&e);
    static int32_t eager[TCU_SEQS][TCU_STEPS], graphs[TCU_SEQS][TCU_STEPS];
    cuda_set_graphs(e.c.gpu, 0);
    tcu_generate(m, e.c.gpu, KV_F16, eager);
    cuda_set_graphs(e.c.gpu, 1);
    tcu_generate(m, e.c.gpu, KV_F16, graphs);
    cr_assert_gt(cuda_graph_nodes(e.c.gpu), 0, "a decode step was captured");
    printf("  a captured decode step of 3 (padded to 4) sequences: %zu graph nodes\n", cuda_graph_nodes(e.c.gpu));
    for (int s = 0; s < TCU_SEQS; s++)
        for (int i = 0; i < TCU_STEPS; i++)
            cr_assert_eq(graphs[s][i], eager[s][i], "sequence %d token %d: %d with graphs, %d without", s, i,
                         graphs[s][i], eager[s][i]);
    model_destroy(m);
    tcu_close(&e);
}

/* A server stops reading the model file once the engine exists (model/gguf.h gguf_detach: the
 * tensor data becomes inaccessible, so that a file replaced under the server cannot fault it):
 * nothing on the GPU path with 16-bit activations may read the model's tensors after fwd_create,
 * neither a step nor the pooled hidden states (fwd_hidden normalises on the host: it read the
 * final norm's weights from the model's mapping, a SIGSEGV for every embeddings request). */
Test(cuda, nothing_reads_the_model_after_upload, .timeout = 120)
{
    tcu_env e;
    tcu_open_act(&e, 3, "nothing_reads_the_model_after_upload", DT_BF16);
    model *m = tcu_stories(&e);
    char err[512];
    kv_geom g = kv_geom_make(m->hp.n_layers, m->hp.n_kv_heads, m->hp.head_dim, 16, KV_F16);
    const int32_t n_blocks = 4;
    fwd *f = fwd_create(m, e.c.gpu, &g, &n_blocks, 64, 1, err, sizeof err);
    cr_assert_not_null(f, "%s", err);
    cr_assert_eq(gguf_detach(m->gguf), 0);
    int32_t tokens[5] = {1, 403, 407, 261, 378}, pos[5], slots[5], q_start[2] = {0, 5}, ctx[1] = {5}, rows[1] = {4};
    int32_t bt[4] = {3, 2, 1, 0};
    for (int i = 0; i < 5; i++) pos[i] = i, slots[i] = cuda_kv_entry_slot(bt, 16, i);
    be_batch b = {.n_tokens = 5, .tokens = tokens, .positions = pos, .n_seqs = 1, .q_start = q_start, .n_logits = 1,
                  .logit_rows = rows, .n_kv = 1, .kv = {{.slots = slots, .ctx_len = ctx, .block_table = bt, .bt_stride = 4}}};
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    float *h = malloc((size_t)5 * m->hp.n_embd * sizeof *h);
    cr_assert_eq(fwd_run(f, &b, logits), 0);
    cr_assert_eq(fwd_hidden(f, 5, h), 0);
    for (int i = 0; i < 5 * m->hp.n_embd; i++) cr_assert(isfinite(h[i]), "hidden state %d is %g", i, h[i]);
    free(logits);
    free(h);
    fwd_destroy(f);
    model_destroy(m);
    tcu_close(&e);
}

#endif
