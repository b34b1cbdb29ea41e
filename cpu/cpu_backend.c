/*
 * cpu_backend.c — the CPU implementation of engine/backend.h: the vtable, weights, the KV arena,
 * batch metadata and the trivial ops. The kernels live in matmul.c, attention.c and ops.c; the
 * workers in threadpool.c.
 *
 * Each backend runs the kernels of one SIMD level (cpu/cpu.h), chosen when it is created; its
 * table (cpu__kern, filled by isa.c) decides everything level-specific, including the layout
 * of packed weights. The backend owns every weight byte it reads after upload, so that the
 * model file may change or vanish under a running server (model/gguf.h gguf_detach): matrices
 * whose type has a packed layout at this level get a copy packed once at upload (extra: see
 * gemm_*.c; matmul reads only that), every other weight (norms, biases, embeddings, matrices
 * without a packed layout) a plain copy (data). Each copy is the size of the file's data, and
 * the mapping's pages are released after it (resident memory ≈ file size, not twice it); a
 * packed weight's data still points into the mapping and is never read. The one cost over
 * reading the mapping in place: a tied embedding is both a packed LM head and embed's plain
 * rows (forward.c uploads it twice), where embed used to fault in only the rows it read.
 * Backend memory is ordinary host memory, 64-byte aligned. The engine thread drives
 * the backend and takes part in every op as worker 0; ops are synchronous, so sync is a no-op.
 */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"
#include "model/dtype.h"

static cpu__backend *cb(backend *be)
{
    return (cpu__backend *)be;
}

static void cpu_destroy(backend *be)
{
    cpu__backend *c = cb(be);
    cpu__pool_destroy(c->pool);
    while (c->chunks) {
        cpu__chunk *k = c->chunks;
        c->chunks = k->next;
        free(k);
    }
    for (int i = 0; i < CPU__MAX_THREADS; i++) free(c->scratch[i].p);
    free(c->shared.p);
    free(c->tiles.p);
    free(c->groups.p);
    free(c->moe.p);
    free(c->mla.p);
    free(c->tok_seq);
    free(c->tok_kvpos);
    free(c->rope.tab.p);
    cpu__sampler_free(c);
    for (int k = 0; k < KV_MAX_GROUPS; k++) free(c->kv_mem[k]);
    free(c);
}

#define HUGE_PAGE ((size_t)2 << 20)
#define CHUNK_BYTES ((size_t)64 << 20)

/* bytes (64-byte aligned) for a packed copy from the newest chunk, or from a new one. NULL when
 * out of memory. */
static void *packed_alloc(cpu__backend *c, size_t bytes)
{
    size_t need = 64 + ((bytes + 63) & ~(size_t)63);
    cpu__chunk *k = c->chunks;
    if (!k || k->size - k->used < need) {
        size_t size = 64 + need > CHUNK_BYTES ? (64 + need + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1) : CHUNK_BYTES;
        k = aligned_alloc(HUGE_PAGE, size);
        if (!k) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(k, size, MADV_HUGEPAGE); /* a hint: without it the copies still work */
#endif
        *k = (cpu__chunk){.prev = NULL, .next = c->chunks, .size = size, .used = 64, .live = 0};
        if (c->chunks) c->chunks->prev = k;
        c->chunks = k;
    }
    char *p = (char *)k + k->used;
    k->used += need;
    k->live++;
    memcpy(p, &k, sizeof k);
    return p + 64;
}

/* 1 when [p, p + n) lies inside one read-only private mapping of a file (the model's mmap):
 * then its pages can be dropped and are read back from the file if touched again. Anything
 * else (heap memory, a writable or anonymous mapping) is 0: dropping it would lose data. */
static int in_file_mapping(const void *p, size_t n)
{
    FILE *fp = fopen("/proc/self/maps", "r");
    if (!fp) return 0;
    uintptr_t a = (uintptr_t)p, e = a + n;
    char line[512], perms[8];
    unsigned long lo, hi, off, inode;
    unsigned dmaj, dmin;
    int found = 0;
    while (!found && fgets(line, sizeof line, fp))
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &dmaj, &dmin, &inode) == 7 &&
            a >= lo && e <= hi)
            found = inode != 0 && perms[0] == 'r' && perms[1] == '-' && perms[3] == 'p';
    fclose(fp);
    return found;
}

/* Drops this process's copies of the whole pages of a tensor's data once a packed copy serves
 * matmul: resident memory then holds each weight once (the copy), not twice. */
static void release_mapping(const void *data, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)data + page - 1) & ~(page - 1), e = ((uintptr_t)data + bytes) & ~(page - 1);
    if (e > a && in_file_mapping(data, bytes)) madvise((void *)a, e - a, MADV_DONTNEED);
}

/* Uploads src: for matrices with a packed layout at this level when pack is set, the packed
 * copy, else a plain copy; the source pages are then released. */
static int upload(cpu__backend *c, const model_tensor *src, be_weight *dst, int pack)
{
    if (!dt_is_supported(src->type) || src->type < 0 || src->type >= CPU__MM_TYPES ||
        !c->k.mm[src->type].dot)
        return -EINVAL;
    if (src->ne[0] % dt_block_elems(src->type)) return -EINVAL;
    be_weight w = {.type = src->type, .n_in = src->ne[0], .n_out = src->ne[1], .data = (void *)src->data};
    /* Matrices get a copy in the layout of the level's GEMM, packed once here rather than on
     * every call; matmul.c uses it for every number of rows and never reads data. */
    const cpu__mm_packed *pk = &c->k.mm[w.type].packed;
    size_t bytes = pack && w.n_out > 1 && pk->run ? pk->bytes(w.n_in, w.n_out) : 0;
    size_t raw = src->row_bytes * (size_t)w.n_out;
    if (bytes) {
        w.extra = packed_alloc(c, bytes);
        if (!w.extra) return -ENOMEM;
        pk->pack(&w, w.extra);
    } else { /* everything else is read as the file has it: a copy the backend owns */
        void *own = packed_alloc(c, raw);
        if (!own) return -ENOMEM;
        memcpy(own, src->data, raw);
        w.data = own;
    }
    release_mapping(src->data, raw);
    *dst = w;
    return 0;
}

static int cpu_weight_upload(backend *be, const model_tensor *src, be_weight *dst)
{
    return upload(cb(be), src, dst, 1);
}

static int cpu_embed_upload(backend *be, const model_tensor *src, be_weight *dst)
{
    return upload(cb(be), src, dst, 0);
}

/* Returns p (from packed_alloc) to its chunk, freeing the chunk with its last copy. */
static void packed_free(cpu__backend *c, void *p)
{
    cpu__chunk *k;
    memcpy(&k, (char *)p - 64, sizeof k);
    if (--k->live == 0) {
        if (k->prev) k->prev->next = k->next;
        else c->chunks = k->next;
        if (k->next) k->next->prev = k->prev;
        free(k);
    }
}

static void cpu_weight_free(backend *be, be_weight *w)
{
    cpu__backend *c = cb(be);
    if (w->extra) packed_free(c, w->extra); /* data: the mapping's */
    else if (w->data) packed_free(c, w->data); /* data: our copy */
    w->data = NULL;
    w->extra = NULL;
}

static size_t cpu_mem_available(backend *be)
{
    return 0;
}

/* One allocation per layer group: its layers' K then V, each [n_blocks][n_kv_heads][tile] (the
 * latent layout: one plane per layer). All or nothing: on failure the previous arena stays. */
static int cpu_kv_init(backend *be, const kv_geom *g, const int32_t *n_blocks)
{
    cpu__backend *c = cb(be);
    int ng = kv_n_groups(g);
    if (g->n_layers <= 0 || g->n_layers > KV_MAX_LAYERS || g->n_kv_heads <= 0 || g->head_dim <= 0 ||
        g->block_size <= 0 || ng > KV_MAX_GROUPS || g->dtype < 0 || g->dtype >= KV_N_DTYPES ||
        (g->latent && (g->n_kv_heads != 1 || g->latent > g->head_dim)))
        return -EINVAL;
    void *mem[KV_MAX_GROUPS] = {NULL};
    size_t layer[KV_MAX_GROUPS];
    int rc = 0;
    for (int k = 0; k < ng && !rc; k++) {
        if (n_blocks[k] <= 0 || kv_group_layers(g, k) <= 0) {
            rc = -EINVAL;
            break;
        }
        layer[k] = ((size_t)n_blocks[k] * g->n_kv_heads * kv_tile_bytes(g) + 63) & ~(size_t)63;
        mem[k] = aligned_alloc(64, layer[k] * (size_t)kv_n_vecs(g) * (size_t)kv_group_layers(g, k));
        if (!mem[k]) rc = -ENOMEM;
    }
    if (rc) {
        for (int k = 0; k < ng; k++) free(mem[k]);
        return rc;
    }
    for (int k = 0; k < KV_MAX_GROUPS; k++) {
        free(c->kv_mem[k]);
        c->kv_mem[k] = k < ng ? mem[k] : NULL;
        c->n_blocks[k] = k < ng ? n_blocks[k] : 0;
        c->kv_layer_bytes[k] = k < ng ? layer[k] : 0;
    }
    int seen[KV_MAX_GROUPS] = {0};
    for (int l = 0; l < g->n_layers; l++) c->kv_index[l] = seen[kv_group_of(g, l)]++;
    c->kv = *g;
    c->group = -1;
    return 0;
}

static void cpu_kv_copy_block(backend *be, int group, int32_t src, int32_t dst)
{
    cpu__backend *c = cb(be);
    size_t bb = (size_t)c->kv.n_kv_heads * kv_tile_bytes(&c->kv);
    for (int l = 0; l < c->kv.n_layers; l++) {
        if (kv_group_of(&c->kv, l) != group) continue;
        char *k = cpu__kv_k(c, l), *v = cpu__kv_v(c, l);
        memcpy(k + (size_t)dst * bb, k + (size_t)src * bb, bb);
        if (!c->kv.latent) memcpy(v + (size_t)dst * bb, v + (size_t)src * bb, bb);
    }
}

/* Copies block `block` of layer group `group` between the arena and a host copy (out: arena →
 * host), chunk by chunk in layer order, K before V (the latent layout: its one plane), each chunk
 * n_kv_heads tiles long: the host copy is kv_group_bytes_per_block bytes. (Written as one loop with plain memcpy calls: a
 * version passing the copy as a function pointer was compiled to nothing by aarch64 gcc 12.) */
static void cpu__block_copy(cpu__backend *c, int group, int32_t block, char *host, int out)
{
    size_t bb = (size_t)c->kv.n_kv_heads * kv_tile_bytes(&c->kv), off = 0;
    for (int l = 0; l < c->kv.n_layers; l++) {
        if (kv_group_of(&c->kv, l) != group) continue;
        char *k = (char *)cpu__kv_k(c, l) + (size_t)block * bb;
        char *v = (char *)cpu__kv_v(c, l) + (size_t)block * bb;
        int two = !c->kv.latent;
        if (out) {
            memcpy(host + off, k, bb);
            if (two) memcpy(host + off + bb, v, bb);
        } else {
            memcpy(k, host + off, bb);
            if (two) memcpy(v, host + off + bb, bb);
        }
        off += (size_t)kv_n_vecs(&c->kv) * bb;
    }
}

static int cpu_kv_block_out(backend *be, int group, int32_t block, void *dst)
{
    cpu__backend *c = cb(be);
    if (group < 0 || group >= kv_n_groups(&c->kv) || block < 0 || block >= c->n_blocks[group]) return -EINVAL;
    cpu__block_copy(c, group, block, dst, 1);
    return 0;
}

static int cpu_kv_block_in(backend *be, int group, int32_t block, const void *src)
{
    cpu__backend *c = cb(be);
    if (group < 0 || group >= kv_n_groups(&c->kv) || block < 0 || block >= c->n_blocks[group]) return -EINVAL;
    cpu__block_copy(c, group, block, (char *)src, 0);
    return 0;
}

static void *cpu_host_alloc(backend *be, size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

/* n activations: f32 on the CPU. */
static void *cpu_alloc(backend *be, size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static void cpu_free(backend *be, void *p)
{
    free(p);
}

int cpu__select_group(cpu__backend *c, int g)
{
    const be_batch *b = &c->step;
    const be_kv *kv = be_batch_kv(b, g);
    if (c->group == g) return 0;
    c->batch = (cpu__batch){
        .n_tokens = b->n_tokens,
        .tokens = b->tokens,
        .positions = b->positions,
        .slots = kv->slots,
        .n_seqs = b->n_seqs,
        .q_start = b->q_start,
        .ctx_len = kv->ctx_len,
        .block_table = kv->block_table,
        .bt_stride = kv->bt_stride,
        .n_logits = b->n_logits,
        .logit_rows = b->logit_rows,
        .sinks = kv->sinks,
        .sink_shift = kv->sink_shift,
    };
    for (int s = 0; s < b->n_seqs; s++) {
        int n_new = b->q_start[s + 1] - b->q_start[s];
        for (int i = b->q_start[s]; i < b->q_start[s + 1]; i++) c->tok_kvpos[i] = kv->ctx_len[s] - n_new + (i - b->q_start[s]);
    }
    int rc = cpu__attention_plan(c);
    c->group = rc ? -1 : g;
    return rc;
}

/* Records the batch and, per token, its sequence; selects group 0's view (KV indices and the
 * attention plan), which a single-group model keeps for the whole step. */
static int cpu_begin(backend *be, const be_batch *b)
{
    cpu__backend *c = cb(be);
    if (b->n_tokens > c->tok_cap) {
        int32_t cap = b->n_tokens + b->n_tokens / 2 + 16;
        int32_t *s = malloc((size_t)cap * sizeof *s), *p = malloc((size_t)cap * sizeof *p);
        if (!s || !p) {
            free(s);
            free(p);
            return -ENOMEM;
        }
        free(c->tok_seq);
        free(c->tok_kvpos);
        c->tok_seq = s;
        c->tok_kvpos = p;
        c->tok_cap = cap;
    }
    c->step = *b;
    int rc = cpu__resolve_tokens(c, &c->step);
    if (rc) return rc;
    c->step_gen++;
    be->step_rows = b->n_tokens; /* the CPU never pads a step */
    for (int s = 0; s < b->n_seqs; s++)
        for (int i = b->q_start[s]; i < b->q_start[s + 1]; i++) c->tok_seq[i] = s;
    c->group = -1;
    return cpu__select_group(c, 0);
}

static void cpu_embed(backend *be, const be_weight *emb, float *out)
{
    cpu__embed(cb(be), emb, out);
}

static void cpu_rmsnorm(backend *be, const void *x, const be_weight *w, float eps, int n_rows,
                        int dim, void *out)
{
    cpu__rmsnorm(cb(be), x, w, eps, n_rows, dim, out);
}

static void cpu_matmul(backend *be, const void *x, int n_rows, const be_weight *w,
                       const be_weight *bias, void *out)
{
    cpu__matmul(cb(be), x, n_rows, w, bias, out);
}

static void cpu_matmul_multi(backend *be, const void *x, int n_rows, int n, const be_weight *const *w,
                             const be_weight *const *bias, void *const *out)
{
    cpu__matmul_multi(cb(be), x, n_rows, n, w, bias, (float *const *)out);
}

static void cpu_rope(backend *be, void *x, const be_rope *r)
{
    cpu__rope(cb(be), x, r);
}

static void cpu_rope_shift(backend *be, const void *x, void *out, const be_rope *r, int group)
{
    cpu__select_group(cb(be), group); /* the view's sink shifts are set even if planning fails */
    cpu__rope_shift(cb(be), x, out, r);
}

/* The layer's group view first (a no-op within a single-group model): its slots for the store,
 * its tables, KV indices and plan for attention (a failed plan poisons attention's output). */
static void cpu_store_kv(backend *be, int layer, const void *k, const void *v)
{
    cpu__select_group(cb(be), kv_group_of(&cb(be)->kv, layer));
    cpu__store_kv(cb(be), layer, k, v);
}

static void cpu_attention(backend *be, int layer, const void *q, const be_attn *a, void *out)
{
    cpu__select_group(cb(be), kv_group_of(&cb(be)->kv, layer));
    cpu__attention(cb(be), layer, q, a, out);
}

static void cpu_silu_mul(backend *be, void *gate, const void *up, int64_t n)
{
    cpu__silu_mul(cb(be), gate, up, n);
}

static void cpu_gelu_mul(backend *be, void *gate, const void *up, int64_t n)
{
    cpu__gelu_mul(cb(be), gate, up, n);
}

static void cpu_scale(backend *be, float *x, float s, int64_t n)
{
    cpu__scale(cb(be), x, s, n);
}

static void cpu_softcap(backend *be, float *x, float cap, int64_t n)
{
    cpu__softcap(cb(be), x, cap, n);
}

static void cpu_add(backend *be, float *x, const void *y, int64_t n)
{
    cpu__add(cb(be), x, y, n);
}

static void cpu_gather_rows(backend *be, const float *x, int dim, float *out)
{
    const cpu__batch *b = &cb(be)->batch;
    for (int j = 0; j < b->n_logits; j++)
        memmove(out + (size_t)j * dim, x + (size_t)b->logit_rows[j] * dim, (size_t)dim * sizeof(float));
}

static int cpu_moe_prepare(backend *be, be_moe *m)
{
    (void)be;
    m->extra = NULL; /* the CPU reads the experts' be_weights as they are */
    return 0;
}

static void cpu_moe_release(backend *be, be_moe *m)
{
    (void)be;
    m->extra = NULL;
}

static void cpu_moe_ffn(backend *be, const void *x, int n_rows, const void *logits, const be_moe *m, void *out)
{
    cpu__moe_ffn(cb(be), x, n_rows, logits, m, out);
}

static int cpu_mla_prepare(backend *be, be_mla *m)
{
    (void)be;
    m->extra = NULL;
    return 0;
}

static void cpu_mla_release(backend *be, be_mla *m)
{
    (void)be;
    m->extra = NULL;
}

static void cpu_mla_qk(backend *be, const void *q, const void *kv, const be_mla *m, void *q_lat, void *k_lat)
{
    cpu__mla_qk(cb(be), q, kv, m, q_lat, k_lat);
}

static void cpu_mla_out(backend *be, const void *o, const be_mla *m, void *out)
{
    cpu__mla_out(cb(be), o, m, out);
}

static int cpu_to_host(backend *be, const float *src, size_t n, float *dst)
{
    if (src != dst) memmove(dst, src, n * sizeof(float));
    return 0;
}

static int cpu_sync(backend *be)
{
    return 0;
}

static backend *cpu_sibling(backend *be);

static const be_ops cpu_ops = {
    .destroy = cpu_destroy,
    .weight_upload = cpu_weight_upload,
    .weight_free = cpu_weight_free,
    .mem_available = cpu_mem_available,
    .kv_init = cpu_kv_init,
    .kv_copy_block = cpu_kv_copy_block,
    .kv_block_out = cpu_kv_block_out,
    .kv_block_in = cpu_kv_block_in,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .begin = cpu_begin,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .matmul_multi = cpu_matmul_multi,
    .rope = cpu_rope,
    .rope_shift = cpu_rope_shift,
    .store_kv = cpu_store_kv,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .gelu_mul = cpu_gelu_mul,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .add = cpu_add,
    .gather_rows = cpu_gather_rows,
    .to_host = cpu_to_host,
    .sync = cpu_sync,
    .embed_upload = cpu_embed_upload,
    .sample = cpu__op_sample,
    .sample_wait = cpu__op_sample_wait,
    .moe_prepare = cpu_moe_prepare,
    .moe_release = cpu_moe_release,
    .moe_ffn = cpu_moe_ffn,
    .mla_prepare = cpu_mla_prepare,
    .mla_release = cpu_mla_release,
    .mla_qk = cpu_mla_qk,
    .mla_out = cpu_mla_out,
    .sibling = cpu_sibling,
};

static backend *cpu__backend_make(cpu__pool *pool, int n_threads, int isa, unsigned features);

/* be_ops.sibling: a backend of the same level and features on the same workers. */
static backend *cpu_sibling(backend *be)
{
    cpu__backend *c = cb(be);
    return cpu__backend_make(cpu__pool_share(c->pool), c->n_threads, c->k.isa, c->k.features);
}

backend *cpu__backend_create(int n_threads, int isa, unsigned features)
{
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > CPU__MAX_THREADS) n_threads = CPU__MAX_THREADS;
    return cpu__backend_make(cpu__pool_create(n_threads), n_threads, isa, features);
}

/* A backend on pool (owned from here on, NULL: none could start). */
static backend *cpu__backend_make(cpu__pool *pool, int n_threads, int isa, unsigned features)
{
    cpu__backend *c = pool ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        cpu__pool_destroy(pool);
        return NULL;
    }
    c->pool = pool;
    c->n_threads = n_threads;
    cpu__kern_init(&c->k, isa, features);
    c->base.ops = &cpu_ops;
    c->base.name = "cpu";
    c->base.kv_in_host = 1;
    c->base.act_type = DT_F32; /* the reference: activations stay f32 */
    char feat[32] = "";
    if (features & (CPU_FEAT_VNNI | CPU_FEAT_BF16 | CPU_FEAT_DOTPROD))
        snprintf(feat, sizeof feat, " (%s%s%s)", features & CPU_FEAT_VNNI ? "+vnni" : "",
                 features & CPU_FEAT_BF16 ? "+bf16" : "", features & CPU_FEAT_DOTPROD ? "+dotprod" : "");
    snprintf(c->base.desc, sizeof c->base.desc, "CPU, %d thread%s, %s%s", n_threads,
             n_threads == 1 ? "" : "s", cpu_isa_name(isa), feat);
    return &c->base;
}

/* The sub-features that level isa can use of those the CPU has. */
static unsigned features_for(int isa)
{
    unsigned f = cpu_isa_features();
    if (isa == CPU_ISA_AVX512) return f & (CPU_FEAT_VNNI | CPU_FEAT_BF16);
    if (isa == CPU_ISA_NEON) return f & CPU_FEAT_DOTPROD;
    return 0;
}

backend *cpu_backend_create_isa(int n_threads, int isa)
{
    if (!cpu_isa_supported(isa)) return NULL;
    return cpu__backend_create(n_threads, isa, features_for(isa));
}

backend *cpu_backend_create(int n_threads)
{
    int isa;
    char err[160];
    if (cpu_isa_default(&isa, err, sizeof err)) {
        fprintf(stderr, "kvserve: %s\n", err);
        return NULL;
    }
    return cpu_backend_create_isa(n_threads, isa);
}
