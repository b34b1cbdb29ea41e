/*
 * mkmodel.c — streaming GGUF writer and synthetic models of every architecture kvserve loads.
 *
 * Writer: metadata is serialised into a byte buffer as it is added; tensors are described by
 * name, type and shape, and their offsets follow from the shapes (each tensor starts at a
 * multiple of the alignment), so the header can be written before any data exists. Data rows
 * come from a callback and are converted to the tensor's type on the way out.
 *
 * Models: weights are normal(0, 0.02) from Box–Muller over splitmix64, one generator per tensor
 * seeded from (seed, tensor index), so a file is a pure function of its parameters. Norms are 1
 * (or 1 + normal(0, norm_std)). Each architecture gets the keys and tensors llama.cpp reads for
 * it (the tensor list of add_tensors, the keys of write_arch_keys). The vocabulary comes from
 * mkmodel_vocab.c. Callers: cli/cmd_mkmodel.c, tests, benchmarks.
 */
#include "model/mkmodel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/dtype.h"
#include "model/gguf.h"
#include "base/rng.h"
#include "model/mkmodel_internal.h"

#define MKM_ALIGN 32

typedef struct mkm__tensor {
    char *name;
    int type;
    int n_dims;
    int64_t ne[4];
    uint64_t offset;  /* from the start of the data section */
    uint64_t n_bytes;
} mkm__tensor;

struct mkm_writer {
    uint8_t *kv;          /* serialised metadata */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    mkm__tensor *t;       /* [n_t] */
    int n_t, cap_t;
    uint64_t data_bytes;  /* size of the data section so far (aligned) */
    int failed;           /* sticky -ENOMEM */
};

/* ---- writer ------------------------------------------------------------------------------- */

static int put(mkm_writer *w, const void *p, size_t n)
{
    if (w->failed) return -ENOMEM;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = (w->kv_len + n) * 2 + 256;
        uint8_t *q = realloc(w->kv, cap);
        if (!q) {
            w->failed = 1;
            return -ENOMEM;
        }
        w->kv = q;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

static int put_u32(mkm_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(mkm_writer *w, uint64_t v) { return put(w, &v, 8); }
static int put_str(mkm_writer *w, const char *s)
{
    size_t n = strlen(s);
    put_u64(w, n);
    return put(w, s, n);
}

static int put_key(mkm_writer *w, const char *key, uint32_t type)
{
    w->n_kv++;
    put_str(w, key);
    return put_u32(w, type);
}

mkm_writer *mkm_writer_create(void)
{
    mkm_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    if (mkm_kv_u32(w, "general.alignment", MKM_ALIGN)) {
        mkm_writer_destroy(w);
        return NULL;
    }
    return w;
}

void mkm_writer_destroy(mkm_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

int mkm_kv_u32(mkm_writer *w, const char *key, uint32_t v)
{
    put_key(w, key, GGUF_T_U32);
    return put_u32(w, v);
}

int mkm_kv_i32(mkm_writer *w, const char *key, int32_t v)
{
    put_key(w, key, GGUF_T_I32);
    return put(w, &v, 4);
}

int mkm_kv_u64(mkm_writer *w, const char *key, uint64_t v)
{
    put_key(w, key, GGUF_T_U64);
    return put_u64(w, v);
}

int mkm_kv_f32(mkm_writer *w, const char *key, float v)
{
    put_key(w, key, GGUF_T_F32);
    return put(w, &v, 4);
}

int mkm_kv_bool(mkm_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    put_key(w, key, GGUF_T_BOOL);
    return put(w, &b, 1);
}

int mkm_kv_str(mkm_writer *w, const char *key, const char *v)
{
    put_key(w, key, GGUF_T_STRING);
    return put_str(w, v);
}

int mkm_kv_arr_str(mkm_writer *w, const char *key, const char *const *v, int64_t n)
{
    put_key(w, key, GGUF_T_ARRAY);
    put_u32(w, GGUF_T_STRING);
    put_u64(w, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) put_str(w, v[i]);
    return w->failed ? -ENOMEM : 0;
}

int mkm_kv_arr_f32(mkm_writer *w, const char *key, const float *v, int64_t n)
{
    put_key(w, key, GGUF_T_ARRAY);
    put_u32(w, GGUF_T_F32);
    put_u64(w, (uint64_t)n);
    return put(w, v, (size_t)n * 4);
}

int mkm_kv_arr_i32(mkm_writer *w, const char *key, const int32_t *v, int64_t n)
{
    put_key(w, key, GGUF_T_ARRAY);
    put_u32(w, GGUF_T_I32);
    put_u64(w, (uint64_t)n);
    return put(w, v, (size_t)n * 4);
}

/* The types mkm_quantize_row can write. */
static int writable_type(int type)
{
    return type == DT_F32 || type == DT_F16 || type == DT_BF16 || type == DT_Q8_0;
}

int mkm_tensor(mkm_writer *w, const char *name, int type, int n_dims, const int64_t *ne)
{
    if (!writable_type(type) || n_dims < 1 || n_dims > 4) return -EINVAL;
    int64_t rows = 1;
    for (int d = 1; d < n_dims; d++) {
        if (ne[d] < 1) return -EINVAL;
        rows *= ne[d];
    }
    size_t row = dt_row_bytes(type, ne[0]);
    if (ne[0] < 1 || !row) return -EINVAL;
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? 2 * w->cap_t : 64;
        mkm__tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) {
            w->failed = 1;
            return -ENOMEM;
        }
        w->t = t;
        w->cap_t = cap;
    }
    mkm__tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) {
        w->failed = 1;
        return -ENOMEM;
    }
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->offset = w->data_bytes;
    t->n_bytes = (uint64_t)row * (uint64_t)rows;
    w->data_bytes += (t->n_bytes + MKM_ALIGN - 1) / MKM_ALIGN * MKM_ALIGN;
    return w->n_t++;
}

void mkm_quantize_row(int type, const float *src, void *dst, int64_t n)
{
    switch (type) {
    case DT_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case DT_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = dt_f32_to_f16(src[i]);
        break;
    }
    case DT_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = dt_f32_to_bf16(src[i]);
        break;
    }
    case DT_Q8_0: {
        dt_block_q8_0 *b = dst;
        for (int64_t k = 0; k < n / DT_QK8_0; k++) {
            const float *x = src + k * DT_QK8_0;
            float amax = 0;
            for (int j = 0; j < DT_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
            float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            b[k].d = dt_f32_to_f16(d);
            for (int j = 0; j < DT_QK8_0; j++) b[k].q[j] = (int8_t)roundf(x[j] * id);
        }
        break;
    }
    default:
        break;
    }
}

static int write_pad(FILE *fp, uint64_t n)
{
    static const uint8_t zero[MKM_ALIGN];
    return n && fwrite(zero, 1, (size_t)n, fp) != n ? -1 : 0;
}

/* Header, metadata, tensor table and padding. */
static int write_header(const mkm_writer *w, FILE *fp, uint64_t *pos)
{
    uint32_t version = 3;
    uint64_t n_t = (uint64_t)w->n_t;
    int bad = fwrite("GGUF", 1, 4, fp) != 4 || fwrite(&version, 4, 1, fp) != 1 ||
              fwrite(&n_t, 8, 1, fp) != 1 || fwrite(&w->n_kv, 8, 1, fp) != 1 ||
              fwrite(w->kv, 1, w->kv_len, fp) != w->kv_len;
    uint64_t p = 24 + w->kv_len;
    for (int i = 0; i < w->n_t && !bad; i++) {
        const mkm__tensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims, type = (uint32_t)t->type;
        bad |= fwrite(&len, 8, 1, fp) != 1 || fwrite(t->name, 1, len, fp) != len ||
               fwrite(&nd, 4, 1, fp) != 1 || fwrite(t->ne, 8, nd, fp) != nd ||
               fwrite(&type, 4, 1, fp) != 1 || fwrite(&t->offset, 8, 1, fp) != 1;
        p += 8 + len + 4 + 8 * nd + 4 + 8;
    }
    uint64_t pad = (MKM_ALIGN - p % MKM_ALIGN) % MKM_ALIGN;
    bad |= write_pad(fp, pad);
    *pos = p + pad;
    return bad ? -1 : 0;
}

static int write_data(const mkm_writer *w, FILE *fp, mkm_row_fn fn, void *ctx)
{
    int64_t max_ne0 = 1;
    for (int i = 0; i < w->n_t; i++) max_ne0 = w->t[i].ne[0] > max_ne0 ? w->t[i].ne[0] : max_ne0;
    float *row = malloc((size_t)max_ne0 * sizeof *row);
    void *bytes = malloc(dt_row_bytes(DT_F32, max_ne0));
    int rc = row && bytes ? 0 : -ENOMEM;
    for (int i = 0; i < w->n_t && !rc; i++) {
        const mkm__tensor *t = &w->t[i];
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        size_t rb = dt_row_bytes(t->type, t->ne[0]);
        for (int64_t r = 0; r < rows && !rc; r++) {
            fn(ctx, i, r, row, t->ne[0]);
            mkm_quantize_row(t->type, row, bytes, t->ne[0]);
            if (fwrite(bytes, 1, rb, fp) != rb) rc = -EIO;
        }
        if (!rc && write_pad(fp, (MKM_ALIGN - t->n_bytes % MKM_ALIGN) % MKM_ALIGN)) rc = -EIO;
    }
    free(row);
    free(bytes);
    return rc;
}

int mkm_writer_write(mkm_writer *w, const char *path, mkm_row_fn fn, void *ctx, char *err,
                     size_t err_len)
{
    if (w->failed) {
        snprintf(err, err_len, "%s: out of memory while building the metadata", path);
        return -ENOMEM;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        snprintf(err, err_len, "%s: cannot create: %s", tmp, strerror(errno));
        return -EIO;
    }
    char *iobuf = malloc((size_t)1 << 22);
    if (iobuf) setvbuf(fp, iobuf, _IOFBF, (size_t)1 << 22);
    uint64_t pos;
    int rc = write_header(w, fp, &pos) ? -EIO : write_data(w, fp, fn, ctx);
    int e = errno;
    if (fclose(fp) && !rc) {
        rc = -EIO;
        e = errno;
    }
    free(iobuf);
    if (!rc && rename(tmp, path)) {
        rc = -EIO;
        e = errno;
    }
    if (rc) {
        snprintf(err, err_len, "%s: write failed: %s", path,
                 rc == -ENOMEM ? "out of memory" : strerror(e));
        remove(tmp);
    }
    return rc;
}

/* ---- weights ------------------------------------------------------------------------------ */

enum { MKM_RANDOM = 0, MKM_ONES = 1, MKM_ROPE_FREQS = 2 };

typedef struct mkm__gen {
    const uint8_t *kind; /* [n_tensors] MKM_RANDOM, MKM_ONES or MKM_ROPE_FREQS */
    uint64_t seed;
    float norm_std;      /* MKM_ONES: 1 + normal(0, norm_std) */
    float rope_base;     /* MKM_ROPE_FREQS: the rope base and dims the factors are for */
    int rope_dims;
    int cur;             /* tensor the generator state belongs to, -1 none */
    uint64_t state;
    int have_spare;
    float spare;
} mkm__gen;

/* Box–Muller: two normals from two uniforms in (0, 1]. */
static float gen_normal(mkm__gen *g)
{
    if (g->have_spare) {
        g->have_spare = 0;
        return g->spare;
    }
    uint64_t r = rng_splitmix64(&g->state);
    float u1 = ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    float u2 = (float)((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    float rad = sqrtf(-2.0f * logf(u1));
    float sn, cs;
    sincosf(6.28318530718f * u2, &sn, &cs);
    g->spare = rad * sn;
    g->have_spare = 1;
    return rad * cs;
}

/* Llama 3.1's rope_freqs: per rotation pair, 1 for wavelengths below 8192/4, 8 above 8192/1,
 * and a smooth blend in between (the formula of the HF → GGUF converter, in float). */
static void llama3_factors(const mkm__gen *g, float *dst, int64_t n)
{
    const float factor = 8.0f, low = 1.0f, high = 4.0f, old_ctx = 8192.0f;
    for (int64_t i = 0; i < n; i++) {
        float freq = 1.0f / powf(g->rope_base, (float)(2 * i) / (float)g->rope_dims);
        float wavelen = 2.0f * (float)M_PI / freq;
        if (wavelen < old_ctx / high)
            dst[i] = 1.0f;
        else if (wavelen > old_ctx / low)
            dst[i] = factor;
        else {
            float smooth = (old_ctx / wavelen - low) / (high - low);
            dst[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

static void gen_row(void *ctx, int tensor, int64_t row, float *dst, int64_t n)
{
    mkm__gen *g = ctx;
    if (g->kind[tensor] == MKM_ROPE_FREQS) {
        llama3_factors(g, dst, n);
        return;
    }
    if (g->cur != tensor) {
        g->cur = tensor;
        g->state = g->seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(tensor + 1));
        g->have_spare = 0;
    }
    if (g->kind[tensor] == MKM_ONES) {
        for (int64_t i = 0; i < n; i++) dst[i] = g->norm_std > 0 ? 1.0f + g->norm_std * gen_normal(g) : 1.0f;
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = 0.02f * gen_normal(g);
}

/* ---- parameters and tensors --------------------------------------------------------------- */

void mkm_params_default(mkm_params *p)
{
    memset(p, 0, sizeof *p);
    p->arch = "llama";
    p->dim = 64;
    p->layers = 2;
    p->heads = 4;
    p->vocab = 512;
    p->context = 2048;
    p->type = DT_F32;
    p->seed = 1234;
    p->swa_pattern = -1;
}

static int file_type_of(int type)
{
    /* llama.cpp's "mostly" file types. */
    return type == DT_F16 ? 1 : type == DT_Q8_0 ? 7 : type == DT_BF16 ? 32 : 0;
}

/* What each architecture's files hold (the tensors llama.cpp's loader creates for it). */
typedef struct mkm__arch {
    const char *name;
    int qkv_bias;   /* q/k/v biases always */
    int qk_norm;    /* attn_q_norm / attn_k_norm */
    int post_norms; /* post_attention_norm / post_ffw_norm */
    int fused;      /* attn_qkv and gate+up in ffn_up (phi3) */
    int tie_always; /* no output.weight whatever p->tied says (gemma2) */
} mkm__arch;

static const mkm__arch mkm_arches[] = {
    {"llama", 0, 0, 0, 0, 0}, {"qwen2", 1, 0, 0, 0, 0},  {"qwen3", 0, 1, 0, 0, 0},
    {"gemma2", 0, 0, 1, 0, 1}, {"gemma3", 0, 1, 1, 0, 0}, {"phi3", 0, 0, 0, 1, 0},
};

static const mkm__arch *arch_of(const char *name)
{
    for (size_t i = 0; name && i < sizeof mkm_arches / sizeof mkm_arches[0]; i++)
        if (!strcmp(name, mkm_arches[i].name)) return &mkm_arches[i];
    return NULL;
}

/* The shape of a model once defaults are resolved. */
typedef struct mkm__shape {
    const mkm__arch *a;
    int ffn, kvh, hd, rope_dims;
} mkm__shape;

/* Adds every weight tensor; kind[i] says how to fill tensor i. 0 or -EINVAL/-ENOMEM. */
static int add_tensors(mkm_writer *w, const mkm_params *p, const mkm__shape *sh, uint8_t *kind, char *err,
                       size_t err_len)
{
    int64_t d = p->dim, q = (int64_t)sh->hd * p->heads, kv = (int64_t)sh->hd * sh->kvh, ff = sh->ffn;
    const mkm__arch *a = sh->a;
    int fused = a->fused || p->fused_qkv, bias = a->qkv_bias || p->qkv_bias;
    char name[64];
    int rc = 0;
#define T(nm, k, typ, ne0, ne1)                                                             \
    do {                                                                                    \
        int64_t ne_[2] = {ne0, ne1};                                                        \
        int r_ = rc ? rc : mkm_tensor(w, nm, typ, (ne1) != 0 ? 2 : 1, ne_);                    \
        if (r_ >= 0 && !rc) kind[r_] = k;                                                   \
        else if (!rc) {                                                                     \
            rc = r_;                                                                        \
            snprintf(err, err_len, "mkmodel: cannot add tensor '%s' [%lld, %lld] of type %s%s", \
                     nm, (long long)(ne0), (long long)(ne1), dt_name(typ),                   \
                     typ == DT_Q8_0 ? " (Q8_0 needs ne[0] % 32 == 0)" : "");                 \
        }                                                                                   \
    } while (0)
    T("token_embd.weight", MKM_RANDOM, p->type, d, p->vocab);
    T("output_norm.weight", MKM_ONES, DT_F32, d, 0);
    if (!p->tied && !a->tie_always) T("output.weight", MKM_RANDOM, p->type, d, p->vocab);
    if (p->rope_freqs) T("rope_freqs.weight", MKM_ROPE_FREQS, DT_F32, sh->rope_dims / 2, 0);
    for (int l = 0; l < p->layers && !rc; l++) {
#define L(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
        T(L("attn_norm.weight"), MKM_ONES, DT_F32, d, 0);
        if (fused) {
            T(L("attn_qkv.weight"), MKM_RANDOM, p->type, d, q + 2 * kv);
            if (bias) T(L("attn_qkv.bias"), MKM_RANDOM, DT_F32, q + 2 * kv, 0);
        } else {
            T(L("attn_q.weight"), MKM_RANDOM, p->type, d, q);
            T(L("attn_k.weight"), MKM_RANDOM, p->type, d, kv);
            T(L("attn_v.weight"), MKM_RANDOM, p->type, d, kv);
            if (bias) {
                T(L("attn_q.bias"), MKM_RANDOM, DT_F32, q, 0);
                T(L("attn_k.bias"), MKM_RANDOM, DT_F32, kv, 0);
                T(L("attn_v.bias"), MKM_RANDOM, DT_F32, kv, 0);
            }
        }
        if (a->qk_norm) {
            T(L("attn_q_norm.weight"), MKM_ONES, DT_F32, sh->hd, 0);
            T(L("attn_k_norm.weight"), MKM_ONES, DT_F32, sh->hd, 0);
        }
        T(L("attn_output.weight"), MKM_RANDOM, p->type, q, d);
        if (a->post_norms) T(L("post_attention_norm.weight"), MKM_ONES, DT_F32, d, 0);
        T(L("ffn_norm.weight"), MKM_ONES, DT_F32, d, 0);
        if (a->fused) {
            T(L("ffn_up.weight"), MKM_RANDOM, p->type, d, 2 * ff);
        } else {
            T(L("ffn_gate.weight"), MKM_RANDOM, p->type, d, ff);
            T(L("ffn_up.weight"), MKM_RANDOM, p->type, d, ff);
        }
        T(L("ffn_down.weight"), MKM_RANDOM, p->type, ff, d);
        if (a->post_norms) T(L("post_ffw_norm.weight"), MKM_ONES, DT_F32, d, 0);
#undef L
    }
#undef T
    return rc < 0 ? rc : 0;
}

/* Why the architecture options of p do not fit its architecture, or NULL. */
static const char *check_arch_options(const mkm_params *p, const mkm__shape *sh)
{
    const char *n = sh->a->name;
    int gemma = !strncmp(n, "gemma", 5), phi3 = !strcmp(n, "phi3"), llama = !strcmp(n, "llama");
    if (sh->rope_dims > sh->hd || sh->rope_dims < 2 || sh->rope_dims % 2)
        return "rope dims must be even and at most the head size";
    if (sh->rope_dims != sh->hd && !gemma && !phi3) return "partial rope needs gemma2, gemma3 or phi3";
    if ((p->swa_window || p->swa_pattern >= 0 || p->rope_base_swa > 0) && !gemma)
        return "sliding-window options need gemma2 or gemma3";
    if (p->swa_window < 0 || p->swa_pattern < -1) return "the window and its pattern must not be negative";
    if (p->attn_softcap < 0 || p->final_softcap < 0 || (p->attn_softcap > 0 && strcmp(n, "gemma2")))
        return "soft-caps must be positive, the attention soft-cap gemma2 only";
    if (p->final_softcap > 0 && !gemma) return "the final soft-cap needs gemma2 or gemma3";
    if (p->rope_freqs && !llama) return "rope_freqs.weight needs llama";
    if (p->rope_factor < 0 || p->rope_ctx_orig < 0 || p->rope_attn_factor < 0)
        return "rope scaling numbers must not be negative";
    return NULL;
}

static int check_params(const mkm_params *p, mkm__shape *sh, char *err, size_t err_len)
{
    memset(sh, 0, sizeof *sh);
    sh->a = arch_of(p->arch);
    sh->kvh = p->kv_heads ? p->kv_heads : p->heads;
    sh->ffn = p->ffn ? p->ffn : (4 * p->dim + 31) / 32 * 32;
    sh->hd = p->head_dim ? p->head_dim : p->heads > 0 ? p->dim / p->heads : 0;
    sh->rope_dims = p->rope_dims ? p->rope_dims : sh->hd;
    const char *why = NULL;
    if (!sh->a)
        why = "arch must be llama, qwen2, qwen3, gemma2, gemma3 or phi3";
    else if (p->dim < 1 || p->layers < 1 || p->heads < 1 || sh->kvh < 1 || sh->ffn < 1 || p->context < 1 ||
             p->head_dim < 0 || p->rope_dims < 0)
        why = "dim, layers, heads, kv heads, ffn, context, head dim and rope dims must be positive";
    else if (p->dim > (1 << 16) || p->layers > 1024 || sh->ffn > (1 << 18) || p->vocab > (1 << 22) ||
             sh->hd > 4096)
        why = "a dimension is too large";
    else if (!p->head_dim && p->dim % p->heads)
        why = "dim must be a multiple of heads (or give the head size)";
    else if (p->heads % sh->kvh)
        why = "heads must be a multiple of kv heads";
    else if (sh->hd % 2)
        why = "the head size must be even for RoPE";
    else if (!writable_type(p->type))
        why = "type must be F32, F16, BF16 or Q8_0";
    else if (p->type == DT_Q8_0 && (p->dim % 32 || sh->ffn % 32 || ((int64_t)sh->hd * p->heads) % 32))
        why = "Q8_0 needs dim, ffn and heads × head size to be multiples of 32";
    else if (p->n_extra < 0 || (p->n_extra && !p->extra_tokens))
        why = "bad extra token list";
    else
        why = check_arch_options(p, sh);
    if (why) {
        snprintf(err, err_len, "mkmodel: %s", why);
        return -EINVAL;
    }
    return 0;
}

/* The hyperparameter keys: the common ones, then each option that was set. */
static void write_arch_keys(mkm_writer *w, const mkm_params *p, const mkm__shape *sh)
{
    const char *a = p->arch;
    char key[128];
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    mkm_kv_u32(w, AK("context_length"), (uint32_t)p->context);
    mkm_kv_u32(w, AK("embedding_length"), (uint32_t)p->dim);
    mkm_kv_u32(w, AK("block_count"), (uint32_t)p->layers);
    mkm_kv_u32(w, AK("feed_forward_length"), (uint32_t)sh->ffn);
    mkm_kv_u32(w, AK("attention.head_count"), (uint32_t)p->heads);
    mkm_kv_u32(w, AK("attention.head_count_kv"), (uint32_t)sh->kvh);
    if (p->head_dim) {
        mkm_kv_u32(w, AK("attention.key_length"), (uint32_t)sh->hd);
        mkm_kv_u32(w, AK("attention.value_length"), (uint32_t)sh->hd);
    }
    mkm_kv_u32(w, AK("rope.dimension_count"), (uint32_t)sh->rope_dims);
    mkm_kv_f32(w, AK("rope.freq_base"), p->rope_base > 0 ? p->rope_base : 10000.0f);
    mkm_kv_f32(w, AK("attention.layer_norm_rms_epsilon"), p->rms_eps > 0 ? p->rms_eps : 1e-5f);
    mkm_kv_u32(w, AK("vocab_size"), (uint32_t)p->vocab);
    if (p->swa_window) mkm_kv_u32(w, AK("attention.sliding_window"), (uint32_t)p->swa_window);
    if (p->swa_pattern >= 0) mkm_kv_u32(w, AK("attention.sliding_window_pattern"), (uint32_t)p->swa_pattern);
    if (p->rope_base_swa > 0) mkm_kv_f32(w, AK("rope.freq_base_swa"), p->rope_base_swa);
    if (p->attn_softcap > 0) mkm_kv_f32(w, AK("attn_logit_softcapping"), p->attn_softcap);
    if (p->final_softcap > 0) mkm_kv_f32(w, AK("final_logit_softcapping"), p->final_softcap);
    if (p->rope_scaling) mkm_kv_str(w, AK("rope.scaling.type"), p->rope_scaling);
    if (p->rope_factor > 0) mkm_kv_f32(w, AK("rope.scaling.factor"), p->rope_factor);
    if (p->rope_ctx_orig > 0) mkm_kv_u32(w, AK("rope.scaling.original_context_length"), (uint32_t)p->rope_ctx_orig);
    if (p->rope_attn_factor > 0) mkm_kv_f32(w, AK("rope.scaling.attn_factor"), p->rope_attn_factor);
#undef AK
}

/* Tensors a model of p holds at most: 3 global + 16 per layer. */
static size_t max_tensors(const mkm_params *p)
{
    return 4 + (size_t)p->layers * 16;
}

int mkm_write(const char *path, const mkm_params *p, char *err, size_t err_len)
{
    mkm__shape sh;
    int rc = check_params(p, &sh, err, err_len);
    if (rc) return rc;
    mkm_writer *w = mkm_writer_create();
    uint8_t *kind = calloc(max_tensors(p), 1);
    if (!w || !kind) {
        snprintf(err, err_len, "mkmodel: out of memory");
        rc = -ENOMEM;
        goto out;
    }
    mkm_kv_str(w, "general.architecture", p->arch);
    mkm_kv_str(w, "general.name", p->name ? p->name : "mkmodel");
    mkm_kv_u32(w, "general.file_type", (uint32_t)file_type_of(p->type));
    write_arch_keys(w, p, &sh);
    if ((rc = mkm__write_vocab(w, p, err, err_len))) goto out;
    if ((rc = add_tensors(w, p, &sh, kind, err, err_len))) goto out;
    mkm__gen g = {.kind = kind, .seed = p->seed, .norm_std = p->norm_std,
                  .rope_base = p->rope_base > 0 ? p->rope_base : 10000.0f, .rope_dims = sh.rope_dims, .cur = -1};
    rc = mkm_writer_write(w, path, gen_row, &g, err, err_len);
out:
    free(kind);
    mkm_writer_destroy(w);
    return rc;
}
