/*
 * tokenizer.c — building a tokenizer from GGUF metadata or arrays, special-token partitioning,
 * encoding dispatch and decoding. The two merge algorithms live in tok_spm.c (SentencePiece BPE)
 * and tok_bpe.c (byte-level BPE with a regex pre-tokenizer), the lookup tables they share in
 * tok_vocab.c and the growable arrays in tok_vec.c.
 *
 * Encoding follows llama.cpp's llama_vocab::tokenize, which the test vectors come from:
 *   1. the text is cut into fragments around special tokens (tok_partition): user-defined
 *      tokens always, control and unknown tokens only with parse_special; longest piece first;
 *   2. SPM: each raw fragment that starts the text or follows a special token gets the dummy
 *      prefix space (when add_space_prefix), spaces become U+2581, then score-driven merges;
 *      BPE: each raw fragment is pre-tokenized by the family's regexes and merged by rank;
 *   3. BOS first / EOS last when add_special and the metadata asks for them.
 * Invariants: see tok_internal.h. Callers: engine (prompts), server (tokenize routes), cli.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

/* ---- small helpers -------------------------------------------------------------------------- */

static void set_err(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    if (!err || !err_len) return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ---- construction --------------------------------------------------------------------------- */

void tok__spec_init(tok_spec *s, int kind)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->bos = s->eos = s->eot = s->eom = s->unk = -2;
    s->add_bos = s->add_eos = s->add_space_prefix = -1;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->piece_len[x], ly = t->piece_len[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int is_special_type(int type)
{
    return type == TOK_TYPE_CONTROL || type == TOK_TYPE_UNKNOWN || type == TOK_TYPE_USER_DEFINED;
}

static int build_specials(tokenizer *t)
{
    int n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        n += is_special_type(t->types[i]) && t->piece_len[i];
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    if (!t->special) return -ENOMEM;
    for (int i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->types[i]) && t->piece_len[i]) t->special[t->n_special++] = i;
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);
    return 0;
}

/* End-of-generation ids: eos, eot, eom, and the pieces llama.cpp recognises by their text. */
static int build_eog(tokenizer *t)
{
    static const char *const eog_text[] = {"<|eot_id|>",      "<|im_end|>",    "<|end|>",
                                           "<end_of_turn>",   "<|endoftext|>", "<|eom_id|>",
                                           "<|end_of_text|>", "<EOT>"};
    size_t n_text = sizeof eog_text / sizeof eog_text[0];
    t->eog = malloc((3 + n_text) * sizeof *t->eog);
    if (!t->eog) return -ENOMEM;
    int32_t cand[3 + sizeof eog_text / sizeof eog_text[0]];
    int nc = 0;
    cand[nc++] = t->eos;
    cand[nc++] = t->eot;
    cand[nc++] = t->eom;
    for (size_t i = 0; i < n_text; i++)
        cand[nc++] = tok__lookup(t, eog_text[i], strlen(eog_text[i]));
    for (int i = 0; i < nc; i++) {
        int32_t id = cand[i];
        /* BOS is never EOG unless the metadata names it eos/eot/eom too (GPT-2: bos == eos). */
        int dup = id < 0 || (id == t->bos && i >= 3);
        for (int j = 0; j < t->n_eog && !dup; j++)
            dup = t->eog[j] == id;
        if (!dup) t->eog[t->n_eog++] = id;
    }
    return 0;
}

static void build_byte_ids(tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id = -1;
        if (t->kind == TOK_KIND_SPM) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = tok__lookup(t, buf, 6);
            if (id < 0) {
                buf[0] = (char)b;
                id = tok__lookup(t, buf, 1);
            }
        } else {
            int n = tok__byte_to_unicode((unsigned char)b, buf);
            id = tok__lookup(t, buf, (size_t)n);
        }
        t->byte_id[b] = id;
    }
}

/* Resolves a special id from the spec: -2 = the model's default, out of range = none. */
static int32_t special_id(const tokenizer *t, int32_t v, int32_t spm_default)
{
    if (v == -2) v = t->kind == TOK_KIND_SPM ? spm_default : -1;
    return v >= 0 && v < t->n_vocab ? v : -1;
}

tokenizer *tok__create_spec(const tok_spec *s, char *err, size_t err_len)
{
    if (s->kind != TOK_KIND_SPM && s->kind != TOK_KIND_BPE) {
        set_err(err, err_len, "tokenizer: unsupported kind %d", s->kind);
        return NULL;
    }
    if (s->n_vocab <= 0 || s->n_vocab > (1 << 26)) {
        set_err(err, err_len, "tokenizer: bad vocabulary size %d", s->n_vocab);
        return NULL;
    }
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->kind = s->kind;
    t->n_vocab = s->n_vocab;
    if (tok__vocab_build(t, s) || tok__merges_build(t, s) || build_specials(t)) goto oom;
    t->bos = special_id(t, s->bos, 1);
    t->eos = special_id(t, s->eos, 2);
    t->eot = special_id(t, s->eot, -1);
    t->eom = special_id(t, s->eom, -1);
    t->unk = special_id(t, s->unk, 0);
    int spm = t->kind == TOK_KIND_SPM;
    t->add_space_prefix = s->add_space_prefix >= 0 ? s->add_space_prefix : spm;
    t->add_eos = s->add_eos > 0;
    t->add_bos = s->add_bos >= 0 ? s->add_bos : spm;
    if (build_eog(t)) goto oom;
    build_byte_ids(t);
    if (!spm) {
        if (tok__bpe_init(t, s->pre, err, err_len)) {
            tok_destroy(t);
            return NULL;
        }
        /* llama.cpp: the Llama-3 family adds BOS unless the metadata says otherwise. */
        if (s->add_bos < 0 && t->ignore_merges) t->add_bos = 1;
    }
    return t;
oom:
    tok_destroy(t);
    set_err(err, err_len, "tokenizer: out of memory");
    return NULL;
}

void tok_destroy(tokenizer *t)
{
    if (!t) return;
    tok__bpe_fini(t);
    free(t->pieces);
    free(t->piece_len);
    free(t->scores);
    free(t->types);
    free(t->arena);
    free(t->ht);
    free(t->mkey);
    free(t->mrank);
    free(t->special);
    free(t->eog);
    free(t);
}

/* ---- from GGUF ------------------------------------------------------------------------------ */

static int32_t gguf_id(const gguf_file *f, const char *key)
{
    int64_t v;
    int rc = gguf_get_i64(f, key, &v);
    if (rc == -ENOENT) return -2;
    if (rc || v < 0 || v > INT32_MAX) return -1;
    return (int32_t)v;
}

static int gguf_flag(const gguf_file *f, const char *key)
{
    int v;
    return gguf_get_bool(f, key, &v) ? -1 : v;
}

/* Reads the string array key into parallel pointer/length arrays (views into the mapping). */
static int str_array(const gguf_file *f, const char *key, int required, const char ***ptrs,
                     uint32_t **lens, int *n, char *err, size_t err_len)
{
    const gguf_arr *a;
    int rc = gguf_get_arr(f, key, &a);
    *n = 0;
    if (rc == -ENOENT && !required) return 0;
    if (rc || a->type != GGUF_T_STRING || a->n > (1u << 26)) {
        set_err(err, err_len, "tokenizer: %s is missing or not an array of strings", key);
        return -EINVAL;
    }
    *ptrs = malloc((a->n ? a->n : 1) * sizeof **ptrs);
    *lens = malloc((a->n ? a->n : 1) * sizeof **lens);
    if (!*ptrs || !*lens) return -ENOMEM;
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->strs[i].len > (1u << 20)) {
            set_err(err, err_len, "tokenizer: %s[%ld] is too long", key, (long)i);
            return -EINVAL;
        }
        (*ptrs)[i] = a->strs[i].ptr;
        (*lens)[i] = (uint32_t)a->strs[i].len;
    }
    *n = (int)a->n;
    return 0;
}

/* Reads an optional numeric array of exactly n elements (as float or int32). */
static int num_array(const gguf_file *f, const char *key, int n, float **fout, int32_t **iout,
                     char *err, size_t err_len)
{
    const gguf_arr *a;
    int rc = gguf_get_arr(f, key, &a);
    if (rc == -ENOENT) return 0;
    if (rc || a->n != (uint64_t)n || a->type == GGUF_T_STRING || a->type == GGUF_T_ARRAY) {
        set_err(err, err_len, "tokenizer: %s must be a numeric array of %d elements", key, n);
        return -EINVAL;
    }
    if (fout) {
        *fout = malloc((size_t)n * sizeof **fout);
        if (!*fout) return -ENOMEM;
        for (int i = 0; i < n; i++)
            (*fout)[i] = (float)gguf_arr_f64(a, (uint64_t)i);
    } else {
        *iout = malloc((size_t)n * sizeof **iout);
        if (!*iout) return -ENOMEM;
        for (int i = 0; i < n; i++) {
            int64_t v = gguf_arr_i64(a, (uint64_t)i);
            (*iout)[i] = v >= 0 && v <= 6 ? (int32_t)v : 0;
        }
    }
    return 0;
}

tokenizer *tok_create(const gguf_file *f, char *err, size_t err_len)
{
    char model[32], pre[64];
    gguf_str s;
    tok_spec sp;
    tokenizer *t = NULL;
    const char **pieces = NULL, **merges = NULL;
    uint32_t *plens = NULL, *mlens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    if (err && err_len) err[0] = 0;
    if (gguf_get_str(f, "tokenizer.ggml.model", &s)) {
        set_err(err, err_len, "tokenizer: no tokenizer.ggml.model in the file");
        return NULL;
    }
    gguf_str_copy(s, model, sizeof model);
    if (!strcmp(model, "llama"))
        tok__spec_init(&sp, TOK_KIND_SPM);
    else if (!strcmp(model, "gpt2"))
        tok__spec_init(&sp, TOK_KIND_BPE);
    else {
        set_err(err, err_len, "tokenizer: unsupported tokenizer.ggml.model '%s'", model);
        return NULL;
    }
    int n = 0, nm = 0;
    if (str_array(f, "tokenizer.ggml.tokens", 1, &pieces, &plens, &n, err, err_len)) goto out;
    if (n == 0) {
        set_err(err, err_len, "tokenizer: tokenizer.ggml.tokens is empty");
        goto out;
    }
    if (num_array(f, "tokenizer.ggml.scores", n, &scores, NULL, err, err_len) ||
        num_array(f, "tokenizer.ggml.token_type", n, NULL, &types, err, err_len))
        goto out;
    if (sp.kind == TOK_KIND_BPE) {
        if (str_array(f, "tokenizer.ggml.merges", 1, &merges, &mlens, &nm, err, err_len)) goto out;
        if (!gguf_get_str(f, "tokenizer.ggml.pre", &s)) sp.pre = gguf_str_copy(s, pre, sizeof pre);
    }
    sp.n_vocab = n;
    sp.pieces = pieces;
    sp.piece_lens = plens;
    sp.scores = scores;
    sp.types = types;
    sp.n_merges = nm;
    sp.merges = merges;
    sp.merge_lens = mlens;
    sp.bos = gguf_id(f, "tokenizer.ggml.bos_token_id");
    sp.eos = gguf_id(f, "tokenizer.ggml.eos_token_id");
    sp.eot = gguf_id(f, "tokenizer.ggml.eot_token_id");
    sp.eom = gguf_id(f, "tokenizer.ggml.eom_token_id");
    sp.unk = gguf_id(f, "tokenizer.ggml.unknown_token_id");
    sp.add_bos = gguf_flag(f, "tokenizer.ggml.add_bos_token");
    sp.add_eos = gguf_flag(f, "tokenizer.ggml.add_eos_token");
    sp.add_space_prefix = gguf_flag(f, "tokenizer.ggml.add_space_prefix");
    t = tok__create_spec(&sp, err, err_len);
out:
    if (!t && err && err_len && !err[0]) set_err(err, err_len, "tokenizer: out of memory");
    free(pieces);
    free(plens);
    free(merges);
    free(mlens);
    free(scores);
    free(types);
    return t;
}

/* ---- accessors ------------------------------------------------------------------------------ */

int tok_kind(const tokenizer *t)
{
    return t->kind;
}
int tok_n_vocab(const tokenizer *t)
{
    return t->n_vocab;
}

size_t tok_max_token_bytes(const tokenizer *t)
{
    return t->max_piece_len > 0 ? t->max_piece_len : 1;
}
int32_t tok_bos(const tokenizer *t)
{
    return t->bos;
}
int32_t tok_eos(const tokenizer *t)
{
    return t->eos;
}
int tok_add_bos(const tokenizer *t)
{
    return t->add_bos && t->bos >= 0;
}
int tok_add_eos(const tokenizer *t)
{
    return t->add_eos && t->eos >= 0;
}

int tok_eog_ids(const tokenizer *t, const int32_t **out)
{
    *out = t->eog;
    return t->n_eog;
}

int tok_is_eog(const tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

int tok_type(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->types[id] : 0;
}

const char *tok_piece(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->pieces[id] : "";
}

int32_t tok_find(const tokenizer *t, const char *s)
{
    return tok__lookup(t, s, strlen(s));
}

int tok_strips_space_after_bos(const tokenizer *t)
{
    return t->kind == TOK_KIND_SPM && t->add_space_prefix;
}

/* ---- encoding ------------------------------------------------------------------------------- */

/* A piece of the input: raw text [off, off + len) when id < 0, else one special token. */
typedef struct frag {
    size_t off, len;
    int32_t id;
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, size_t off, size_t len, int32_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        frag *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (frag){off, len, id};
    return 0;
}

/* Splits the raw fragments of *l around every occurrence of special token id. */
static int split_on(const char *text, frag_list *l, const char *p, size_t pl, int32_t id)
{
    frag_list o = {0};
    int rc = 0;
    for (size_t i = 0; i < l->n && !rc; i++) {
        frag f = l->v[i];
        if (f.id >= 0) {
            rc = frag_push(&o, f.off, f.len, f.id);
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        while (!rc && pos < end) {
            const char *m = memmem(text + pos, end - pos, p, pl);
            if (!m) break;
            size_t at = (size_t)(m - text);
            if (at > pos) rc = frag_push(&o, pos, at - pos, -1);
            if (!rc) rc = frag_push(&o, at, pl, id);
            pos = at + pl;
        }
        if (!rc && pos < end) rc = frag_push(&o, pos, end - pos, -1);
    }
    if (rc) {
        free(o.v);
        return rc;
    }
    free(l->v);
    *l = o;
    return 0;
}

/* llama.cpp's tokenizer_st_partition: special tokens, longest first, are cut out of the text. */
static int partition(const tokenizer *t, const char *text, size_t len, int parse_special,
                     frag_list *l)
{
    if (!len) return 0;
    int rc = frag_push(l, 0, len, -1);
    for (int k = 0; k < t->n_special && !rc; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->types[id] != TOK_TYPE_USER_DEFINED) continue;
        const char *p = t->pieces[id];
        size_t pl = t->piece_len[id];
        if (pl > len || !memmem(text, len, p, pl)) continue;
        rc = split_on(text, l, p, pl, id);
    }
    return rc;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
               int32_t *out, int cap)
{
    frag_list l = {0};
    tok__vec v = {0};
    if (len > (size_t)1 << 30) return -E2BIG;
    int rc = partition(t, text, len, parse_special, &l);
    if (rc) goto done;
    if (add_special && t->add_bos && t->bos >= 0) tok__push(&v, t->bos);
    int prev_special = 1; /* SPM: the dummy prefix goes on text that starts or follows a special */
    for (size_t i = 0; i < l.n; i++) {
        frag f = l.v[i];
        if (f.id >= 0) {
            tok__push(&v, f.id);
            prev_special = 1;
        } else if (t->kind == TOK_KIND_SPM) {
            tok__spm_encode(t, text + f.off, f.len, t->add_space_prefix && prev_special, &v);
            prev_special = 0;
        } else {
            tok__bpe_encode(t, text + f.off, f.len, &v);
        }
    }
    if (add_special && t->add_eos && t->eos >= 0) tok__push(&v, t->eos);
    if (v.oom)
        rc = -ENOMEM;
    else if (v.n > (size_t)INT32_MAX)
        rc = -E2BIG;
done:
    if (!rc) {
        size_t k = v.n < (size_t)(cap > 0 ? cap : 0) ? v.n : (size_t)(cap > 0 ? cap : 0);
        if (k) memcpy(out, v.v, k * sizeof *out);
        rc = (int)v.n;
    }
    free(l.v);
    free(v.v);
    return rc;
}

/* ---- decoding ------------------------------------------------------------------------------- */

/* Output cursor: the first skip bytes are dropped, then bytes go to buf while they fit; at counts
 * every byte that would have been written. */
typedef struct emit {
    char *buf;
    int cap, at, skip;
} emit;

static void put(emit *e, const char *s, int n)
{
    for (int i = 0; i < n; i++) {
        if (e->skip) {
            e->skip--;
            continue;
        }
        if (e->at < e->cap) e->buf[e->at] = s[i];
        e->at++;
    }
}

static int decode_utf8(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len = tok__utf8_len(s[0]);
    if (len > n || len == 1) {
        *cp = s[0];
        return 1;
    }
    uint32_t c = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++)
        c = c << 6 | (s[i] & 0x3f);
    *cp = c;
    return (int)len;
}

static void token_bytes(const tokenizer *t, int32_t id, int render_special, emit *e)
{
    if (id < 0 || id >= t->n_vocab) return;
    const char *p = t->pieces[id];
    int n = (int)t->piece_len[id], type = t->types[id];
    if (type == TOK_TYPE_CONTROL || type == TOK_TYPE_UNKNOWN) {
        if (render_special) put(e, p, n);
        return;
    }
    if (type == TOK_TYPE_USER_DEFINED) {
        put(e, p, n);
        return;
    }
    if (type == TOK_TYPE_UNUSED) return;
    if (t->kind == TOK_KIND_SPM) {
        if (type == TOK_TYPE_BYTE && n == 6 && !memcmp(p, "<0x", 3)) {
            char b = (char)strtol(p + 3, NULL, 16);
            put(e, &b, 1);
            return;
        }
        for (int i = 0; i < n;) {
            int esc = i + 3 <= n && !memcmp(p + i, "\xe2\x96\x81", 3);
            put(e, esc ? " " : p + i, 1);
            i += esc ? 3 : 1;
        }
        return;
    }
    for (int i = 0; i < n;) {
        uint32_t cp;
        int k = decode_utf8((const unsigned char *)p + i, (size_t)(n - i), &cp);
        int b = tok__unicode_to_byte(cp);
        char c = (char)b;
        put(e, b >= 0 ? &c : p + i, b >= 0 ? 1 : k);
        i += k;
    }
}

int tok_token_bytes(const tokenizer *t, int32_t id, int render_special, char *buf, int cap)
{
    emit e = {buf, cap > 0 ? cap : 0, 0, 0};
    token_bytes(t, id, render_special, &e);
    return e.at;
}

int tok_decode(const tokenizer *t, const int32_t *ids, int n, int skip_leading_space, char *buf,
               int cap)
{
    emit e = {buf, cap > 0 ? cap : 0, 0, 0};
    int strip_at = -1;
    if (skip_leading_space && tok_strips_space_after_bos(t) && n > 0)
        strip_at = ids[0] == t->bos && t->bos >= 0 ? 1 : 0;
    for (int i = 0; i < n; i++) {
        if (i == strip_at) {
            char c0 = 0;
            if (tok_token_bytes(t, ids[i], 0, &c0, 1) > 0 && c0 == ' ') e.skip = 1;
        }
        token_bytes(t, ids[i], 0, &e);
        e.skip = 0;
    }
    return e.at;
}
