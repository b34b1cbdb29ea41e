/*
 * mkmodel_vocab.c — the working vocabularies of synthetic models (model/mkmodel.h): SentencePiece
 * ("llama": <unk> <s> </s>, the 256 byte tokens, pieces with scores) or byte-level BPE ("gpt2":
 * the 256 byte symbols, pieces with their merges, <|endoftext|>), plus the caller's extra
 * control tokens. The pieces are "▁" + letters, common English words with every prefix, then
 * every letter string by length, so that any requested size works and every piece can be
 * reached by merges. Deterministic: a vocabulary is a pure function of the parameters.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mkmodel.h"
#include "model/mkmodel_internal.h"

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
int mkm__write_vocab(gguf_writer *w, const mkm_params *p, char *err, size_t err_len)
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
        gguf_put_str(w, "tokenizer.ggml.model", v.gpt2 ? "gpt2" : "llama");
        gguf_put_str(w, "tokenizer.ggml.pre", v.gpt2 ? "gpt-2" : "default");
        gguf_put_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.n);
        if (!v.gpt2) gguf_put_arr_f32(w, "tokenizer.ggml.scores", v.score, v.n);
        gguf_put_arr_i32(w, "tokenizer.ggml.token_type", v.type, v.n);
        if (v.gpt2) gguf_put_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                   v.n_merges);
        gguf_put_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        gguf_put_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        if (!v.gpt2) gguf_put_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        gguf_put_bool(w, "tokenizer.ggml.add_bos_token", !v.gpt2);
        gguf_put_bool(w, "tokenizer.ggml.add_eos_token", 0);
        if (!v.gpt2) gguf_put_bool(w, "tokenizer.ggml.add_space_prefix", 1);
        if (p->chat_template) gguf_put_str(w, "tokenizer.chat_template", p->chat_template);
        if (p->chat_template_tool_use)
            gguf_put_str(w, "tokenizer.chat_template.tool_use", p->chat_template_tool_use);
    } else if (rc == -ENOMEM) {
        snprintf(err, err_len, "mkmodel: out of memory");
    }
    vocab_free(&v);
    return rc;
}

