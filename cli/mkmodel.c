/*
 * mkmodel.c — streaming GGUF writer and synthetic Llama/Qwen2 models with working vocabularies.
 *
 * Writer: metadata is serialised into a byte buffer as it is added; tensors are described by
 * name, type and shape, and their offsets follow from the shapes (each tensor starts at a
 * multiple of the alignment), so the header can be written before any data exists. Data rows
 * come from a callback and are converted to the tensor's type on the way out.
 *
 * Models: weights are normal(0, 0.02) from Box–Muller over splitmix64, one generator per tensor
 * seeded from (seed, tensor index), so a file is a pure function of its parameters. Norms are 1.
 * The vocabulary is generated deterministically: control and byte tokens, the caller's extra
 * tokens, then pieces ("▁" + letters, common English words with every prefix, then every
 * letter string by length) so that any requested size works and every piece can be reached by
 * merges. Callers: cli/cmd_mkmodel.c, tests, benchmarks.
 */
#include "cli/mkmodel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/dtype.h"
#include "engine/gguf.h"
#include "engine/sampler.h"

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

enum { MKM_RANDOM = 0, MKM_ONES = 1 };

typedef struct mkm__gen {
    const uint8_t *kind; /* [n_tensors] MKM_RANDOM or MKM_ONES */
    uint64_t seed;
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
    uint64_t r = smp_splitmix64(&g->state);
    float u1 = ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    float u2 = (float)((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    float rad = sqrtf(-2.0f * logf(u1));
    float sn, cs;
    sincosf(6.28318530718f * u2, &sn, &cs);
    g->spare = rad * sn;
    g->have_spare = 1;
    return rad * cs;
}

static void gen_row(void *ctx, int tensor, int64_t row, float *dst, int64_t n)
{
    mkm__gen *g = ctx;
    if (g->kind[tensor] == MKM_ONES) {
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    }
    if (g->cur != tensor) {
        g->cur = tensor;
        g->state = g->seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(tensor + 1));
        g->have_spare = 0;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = 0.02f * gen_normal(g);
}

/* ---- vocabulary --------------------------------------------------------------------------- */

typedef struct mkm__vocab {
    char **tok;       /* [n] token texts (owned) */
    float *score;     /* [n] */
    int32_t *type;    /* [n] 1 normal, 2 unknown, 3 control, 6 byte */
    int n, cap;       /* cap = the requested vocabulary size */
    uint32_t *set;    /* hash of token text → index + 1; [set_cap] */
    uint64_t set_cap;
    char **merges;    /* gpt2: "left right" per merged token (owned) */
    int n_merges;
    int gpt2;
    char sym[256][4]; /* text of each byte in token form (gpt2 byte-level map, or spm: "▁" for ' ') */
    int oom;
} mkm__vocab;

static uint64_t vocab_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int vocab_has(const mkm__vocab *v, const char *s)
{
    for (uint64_t h = vocab_hash(s) & (v->set_cap - 1); v->set[h]; h = (h + 1) & (v->set_cap - 1))
        if (!strcmp(v->tok[v->set[h] - 1], s)) return 1;
    return 0;
}

/* Adds token s unless present or full: 1 added, 0 not, -ENOMEM. */
static int vocab_add(mkm__vocab *v, const char *s, float score, int type)
{
    if (v->n >= v->cap || vocab_has(v, s)) return 0;
    char *c = strdup(s);
    if (!c) return v->oom = -ENOMEM;
    uint64_t h = vocab_hash(s) & (v->set_cap - 1);
    while (v->set[h]) h = (h + 1) & (v->set_cap - 1);
    v->set[h] = (uint32_t)v->n + 1;
    v->tok[v->n] = c;
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
    return 1;
}

static void put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    } else {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        out[3] = 0;
    }
}

/* GPT-2's byte → printable code point map, in its token order: order[i] is the byte of id i. */
static void gpt2_bytes(mkm__vocab *v, uint8_t order[256])
{
    int n = 0, extra = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < 256; b++) {
            int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
            if (pass == 0 && printable) {
                put_utf8(v->sym[b], (unsigned)b);
                order[n++] = (uint8_t)b;
            } else if (pass == 1 && !printable) {
                put_utf8(v->sym[b], 256u + (unsigned)extra++);
                order[n++] = (uint8_t)b;
            }
        }
}

/* Token form of raw ASCII text s[0..len). */
static void to_token(const mkm__vocab *v, const char *s, size_t len, char *out, size_t out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        const char *t = v->sym[(uint8_t)s[i]];
        size_t n = strlen(t);
        if (o + n + 1 > out_len) break;
        memcpy(out + o, t, n);
        o += n;
    }
    out[o] = 0;
}

/* Offers raw piece s as a token: single symbols directly, longer ones only when their prefix
 * (all but the last byte) is a token, so that merges reach them. */
static void offer(mkm__vocab *v, const char *s)
{
    char tok[128], left[128], right[16];
    size_t len = strlen(s);
    to_token(v, s, len, tok, sizeof tok);
    if (v->n >= v->cap || vocab_has(v, tok)) return;
    if (len > 1) {
        to_token(v, s, len - 1, left, sizeof left);
        if (!vocab_has(v, left)) return;
        to_token(v, s + len - 1, 1, right, sizeof right);
        if (!vocab_has(v, right)) return;
    }
    int added = vocab_add(v, tok, -(float)v->n, 1);
    if (added == 1 && v->gpt2 && len > 1) {
        char *m = malloc(strlen(left) + strlen(right) + 2);
        if (!m) {
            v->oom = -ENOMEM;
            return;
        }
        sprintf(m, "%s %s", left, right);
        v->merges[v->n_merges++] = m;
    }
}

static const char mkm_letters[] = "etaoinshrdlcumwfgypbvkjxqz";

/* Fills the vocabulary with pieces until it is full. */
static void add_pieces(mkm__vocab *v)
{
    static const char *singles = " etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ"
                                 "0123456789.,!?'\"-:;()";
    static const char *words[] = {
        " the", " a", " and", " to", " was", " he", " she", " it", " of", " in", " they",
        " her", " his", " said", " with", " you", " that", " for", " on", " is", " one", " day",
        " once", " upon", " time", " there", " little", " girl", " boy", " named", " play",
        " happy", " big", " saw", " mom", " friend", " went", " very", " not", " but", " so",
        " Once", " The", " She", " He", " They", " Lily", " Tom", " hello", " world", "er",
        "in", "ing", "ed", "ly", "es", "re", "on", "an", "at", "en", "nd", "or", "th", "he",
    };
    char s[8];
    for (const char *c = singles; *c; c++) {
        s[0] = *c;
        s[1] = 0;
        offer(v, s);
    }
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        for (size_t k = 2; k <= n && k < sizeof s; k++) {
            memcpy(s, words[i], k);
            s[k] = 0;
            offer(v, s);
        }
    }
    /* Every letter string by length, word-initial first: enough for any vocabulary. */
    for (int len = 1; len <= 5 && v->n < v->cap && !v->oom; len++) {
        for (int initial = 1; initial >= 0 && v->n < v->cap; initial--) {
            int idx[5] = {0};
            for (;;) {
                int o = 0;
                if (initial) s[o++] = ' ';
                for (int k = 0; k < len; k++) s[o++] = mkm_letters[idx[k]];
                s[o] = 0;
                offer(v, s);
                if (v->n >= v->cap) return;
                int k = len - 1;
                while (k >= 0 && ++idx[k] == 26) idx[k--] = 0;
                if (k < 0) break;
            }
        }
    }
}

static void vocab_free(mkm__vocab *v)
{
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tok);
    free(v->score);
    free(v->type);
    free(v->set);
    free(v->merges);
}

/* Builds the vocabulary of p and writes the tokenizer.* keys. */
static int write_vocab(mkm_writer *w, const mkm_params *p, char *err, size_t err_len)
{
    mkm__vocab v = {.cap = p->vocab};
    v.gpt2 = p->tokenizer && !strcmp(p->tokenizer, "gpt2");
    if (p->tokenizer && !v.gpt2 && strcmp(p->tokenizer, "spm")) {
        snprintf(err, err_len, "mkmodel: tokenizer must be spm or gpt2, not '%s'", p->tokenizer);
        return -EINVAL;
    }
    int has_eot = 0;
    for (int i = 0; i < p->n_extra; i++) has_eot |= !strcmp(p->extra_tokens[i], "<|endoftext|>");
    int need = (v.gpt2 ? 256 + !has_eot : 259) + p->n_extra;
    if (p->vocab < need) {
        snprintf(err, err_len, "mkmodel: vocab %d is too small: this tokenizer needs at least %d",
                 p->vocab, need);
        return -EINVAL;
    }
    v.set_cap = 64;
    while (v.set_cap < 2 * (uint64_t)p->vocab) v.set_cap <<= 1;
    v.tok = calloc((size_t)p->vocab, sizeof *v.tok);
    v.score = calloc((size_t)p->vocab, sizeof *v.score);
    v.type = calloc((size_t)p->vocab, sizeof *v.type);
    v.set = calloc(v.set_cap, sizeof *v.set);
    v.merges = calloc((size_t)p->vocab, sizeof *v.merges);
    int rc = v.tok && v.score && v.type && v.set && v.merges ? 0 : -ENOMEM;
    int32_t bos = 1, eos = 2;
    char t[16];
    if (!rc && !v.gpt2) {
        for (int b = 0; b < 256; b++) snprintf(v.sym[b], sizeof v.sym[b], "%c", b ? b : ' ');
        strcpy(v.sym[' '], "\xe2\x96\x81"); /* ▁ */
        vocab_add(&v, "<unk>", 0, 2);
        vocab_add(&v, "<s>", 0, 3);
        vocab_add(&v, "</s>", 0, 3);
        for (int b = 0; b < 256; b++) {
            snprintf(t, sizeof t, "<0x%02X>", b);
            vocab_add(&v, t, 0, 6);
        }
        for (int i = 0; i < p->n_extra; i++)
            if (vocab_add(&v, p->extra_tokens[i], 0, 3) != 1 && !v.oom) rc = -EINVAL;
        add_pieces(&v);
    } else if (!rc) {
        uint8_t order[256];
        gpt2_bytes(&v, order);
        for (int i = 0; i < 256; i++) vocab_add(&v, v.sym[order[i]], 0, 1);
        v.cap = p->vocab - p->n_extra - !has_eot;
        add_pieces(&v);
        v.cap = p->vocab;
        if (!has_eot) vocab_add(&v, "<|endoftext|>", 0, 3);
        for (int i = 0; i < p->n_extra; i++)
            if (vocab_add(&v, p->extra_tokens[i], 0, 3) != 1 && !v.oom) rc = -EINVAL;
        for (int i = 0; i < v.n; i++)
            if (!strcmp(v.tok[i], "<|endoftext|>")) bos = eos = i;
    }
    if (!rc && v.oom) rc = -ENOMEM;
    if (rc == -EINVAL)
        snprintf(err, err_len, "mkmodel: an extra token is a duplicate of another token");
    else if (!rc && v.n != p->vocab) {
        snprintf(err, err_len, "mkmodel: could only generate %d of %d tokens", v.n, p->vocab);
        rc = -EINVAL;
    }
    if (!rc) {
        mkm_kv_str(w, "tokenizer.ggml.model", v.gpt2 ? "gpt2" : "llama");
        mkm_kv_str(w, "tokenizer.ggml.pre", v.gpt2 ? "gpt-2" : "default");
        mkm_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.n);
        if (!v.gpt2) mkm_kv_arr_f32(w, "tokenizer.ggml.scores", v.score, v.n);
        mkm_kv_arr_i32(w, "tokenizer.ggml.token_type", v.type, v.n);
        if (v.gpt2) mkm_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                   v.n_merges);
        mkm_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        mkm_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        if (!v.gpt2) mkm_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        mkm_kv_bool(w, "tokenizer.ggml.add_bos_token", !v.gpt2);
        mkm_kv_bool(w, "tokenizer.ggml.add_eos_token", 0);
        if (!v.gpt2) mkm_kv_bool(w, "tokenizer.ggml.add_space_prefix", 1);
        if (p->chat_template) mkm_kv_str(w, "tokenizer.chat_template", p->chat_template);
    } else if (rc == -ENOMEM) {
        snprintf(err, err_len, "mkmodel: out of memory");
    }
    vocab_free(&v);
    return rc;
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
}

static int file_type_of(int type)
{
    /* llama.cpp's "mostly" file types. */
    return type == DT_F16 ? 1 : type == DT_Q8_0 ? 7 : type == DT_BF16 ? 32 : 0;
}

/* Adds every weight tensor; kind[i] says how to fill tensor i. 0 or -EINVAL/-ENOMEM. */
static int add_tensors(mkm_writer *w, const mkm_params *p, int ffn, int kvh, uint8_t *kind,
                       char *err, size_t err_len)
{
    int64_t d = p->dim, hd = p->dim / p->heads, q = hd * p->heads, kv = hd * kvh, ff = ffn;
    char name[64];
    int rc = 0;
#define T(nm, k, typ, ne0, ne1)                                                             \
    do {                                                                                    \
        int64_t ne_[2] = {ne0, ne1};                                                        \
        int r_ = rc ? rc : mkm_tensor(w, nm, typ, ne1 ? 2 : 1, ne_);                        \
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
    if (!p->tied) T("output.weight", MKM_RANDOM, p->type, d, p->vocab);
    int qwen = !strcmp(p->arch, "qwen2");
    for (int l = 0; l < p->layers && !rc; l++) {
#define L(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
        T(L("attn_norm.weight"), MKM_ONES, DT_F32, d, 0);
        T(L("attn_q.weight"), MKM_RANDOM, p->type, d, q);
        T(L("attn_k.weight"), MKM_RANDOM, p->type, d, kv);
        T(L("attn_v.weight"), MKM_RANDOM, p->type, d, kv);
        if (qwen) {
            T(L("attn_q.bias"), MKM_RANDOM, DT_F32, q, 0);
            T(L("attn_k.bias"), MKM_RANDOM, DT_F32, kv, 0);
            T(L("attn_v.bias"), MKM_RANDOM, DT_F32, kv, 0);
        }
        T(L("attn_output.weight"), MKM_RANDOM, p->type, q, d);
        T(L("ffn_norm.weight"), MKM_ONES, DT_F32, d, 0);
        T(L("ffn_gate.weight"), MKM_RANDOM, p->type, d, ff);
        T(L("ffn_up.weight"), MKM_RANDOM, p->type, d, ff);
        T(L("ffn_down.weight"), MKM_RANDOM, p->type, ff, d);
#undef L
    }
#undef T
    return rc < 0 ? rc : 0;
}

static int check_params(const mkm_params *p, int *ffn, int *kvh, char *err, size_t err_len)
{
    *kvh = p->kv_heads ? p->kv_heads : p->heads;
    *ffn = p->ffn ? p->ffn : (4 * p->dim + 31) / 32 * 32;
    const char *why = NULL;
    if (!p->arch || (strcmp(p->arch, "llama") && strcmp(p->arch, "qwen2")))
        why = "arch must be llama or qwen2";
    else if (p->dim < 1 || p->layers < 1 || p->heads < 1 || *kvh < 1 || *ffn < 1 || p->context < 1)
        why = "dim, layers, heads, kv heads, ffn and context must be positive";
    else if (p->dim > (1 << 16) || p->layers > 1024 || *ffn > (1 << 18) || p->vocab > (1 << 22))
        why = "a dimension is too large";
    else if (p->dim % p->heads)
        why = "dim must be a multiple of heads";
    else if (p->heads % *kvh)
        why = "heads must be a multiple of kv heads";
    else if ((p->dim / p->heads) % 2)
        why = "the head size (dim / heads) must be even for RoPE";
    else if (!writable_type(p->type))
        why = "type must be F32, F16, BF16 or Q8_0";
    else if (p->type == DT_Q8_0 && (p->dim % 32 || *ffn % 32))
        why = "Q8_0 needs dim and ffn to be multiples of 32";
    else if (p->n_extra < 0 || (p->n_extra && !p->extra_tokens))
        why = "bad extra token list";
    if (why) {
        snprintf(err, err_len, "mkmodel: %s", why);
        return -EINVAL;
    }
    return 0;
}

int mkm_write(const char *path, const mkm_params *p, char *err, size_t err_len)
{
    int ffn, kvh;
    int rc = check_params(p, &ffn, &kvh, err, err_len);
    if (rc) return rc;
    mkm_writer *w = mkm_writer_create();
    uint8_t *kind = calloc(3 + (size_t)p->layers * 16, 1);
    if (!w || !kind) {
        snprintf(err, err_len, "mkmodel: out of memory");
        rc = -ENOMEM;
        goto out;
    }
    const char *a = p->arch;
    char key[128];
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    mkm_kv_str(w, "general.architecture", a);
    mkm_kv_str(w, "general.name", p->name ? p->name : "mkmodel");
    mkm_kv_u32(w, "general.file_type", (uint32_t)file_type_of(p->type));
    mkm_kv_u32(w, AK("context_length"), (uint32_t)p->context);
    mkm_kv_u32(w, AK("embedding_length"), (uint32_t)p->dim);
    mkm_kv_u32(w, AK("block_count"), (uint32_t)p->layers);
    mkm_kv_u32(w, AK("feed_forward_length"), (uint32_t)ffn);
    mkm_kv_u32(w, AK("attention.head_count"), (uint32_t)p->heads);
    mkm_kv_u32(w, AK("attention.head_count_kv"), (uint32_t)kvh);
    mkm_kv_u32(w, AK("rope.dimension_count"), (uint32_t)(p->dim / p->heads));
    mkm_kv_f32(w, AK("rope.freq_base"), p->rope_base > 0 ? p->rope_base : 10000.0f);
    mkm_kv_f32(w, AK("attention.layer_norm_rms_epsilon"), p->rms_eps > 0 ? p->rms_eps : 1e-5f);
    mkm_kv_u32(w, AK("vocab_size"), (uint32_t)p->vocab);
#undef AK
    if ((rc = write_vocab(w, p, err, err_len))) goto out;
    if ((rc = add_tensors(w, p, ffn, kvh, kind, err, err_len))) goto out;
    mkm__gen g = {.kind = kind, .seed = p->seed, .cur = -1};
    rc = mkm_writer_write(w, path, gen_row, &g, err, err_len);
out:
    free(kind);
    mkm_writer_destroy(w);
    return rc;
}
