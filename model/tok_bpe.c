/*
 * tok_bpe.c — byte-level BPE ("gpt2" tokenizer model), as llama.cpp's llm_tokenizer_bpe.
 *
 *   raw fragment ──pre-tokenizer (regexes of the family, in sequence)──► words
 *   word ──bytes_to_unicode──► symbols (one per byte-level character) ──merges by rank──► ids
 *
 * Each regex of a family splits every current word further: matches and the unmatched gaps
 * between them both become words, exactly like llama.cpp's unicode_regex_split, and a regex
 * only sees its own word (lookarounds stop at the word's edges). Regexes run through PCRE2 in
 * UTF + UCP mode with PCRE2_MATCH_INVALID_UTF, so invalid UTF-8 never matches and ends up in a
 * gap word of its own: every byte still round-trips. Merging pops the lowest rank first (the
 * leftmost on ties) from a heap over a linked list of symbols: O(n log n) per word.
 * Caller: tok_encode (tokenizer.c); tok__pretokenize is also used by the tests.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tok_internal.h"

/* ---- bytes_to_unicode --------------------------------------------------------------------- */

/* GPT-2 maps the printable Latin-1 bytes to themselves and the other 68 bytes, in order, to
 * U+0100..U+0143, so that every byte is a visible character. */
static int self_mapped(int b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

static uint32_t byte_cp(unsigned char b)
{
    if (self_mapped(b)) return b;
    uint32_t k = 0;
    for (int i = 0; i < b; i++)
        k += !self_mapped(i);
    return 256 + k;
}

int tok__byte_to_unicode(unsigned char b, char out[4])
{
    uint32_t cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

int tok__unicode_to_byte(uint32_t cp)
{
    if (cp < 256) return self_mapped((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = 0;
    for (int b = 0; b < 256; b++)
        if (!self_mapped(b) && k++ == cp - 256) return b;
    return -1;
}

/* ---- pre-tokenizers (the regexes as llama.cpp's llama-vocab.cpp defines them) -------------- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                                  \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"     \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"     \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pre_family {
    const char *names;           /* tokenizer.ggml.pre values, separated by '|' */
    const char *re[TOK__MAX_RE]; /* applied in sequence; unused slots NULL */
    int ignore_merges;           /* whole-word tokens bypass merging (Llama 3) */
} pre_family;

static const pre_family families[] = {
    {"gpt-2|phi-2|mpt|olmo|jais|roberta-bpe|jina-v1-en|jina-v2-code|jina-es|jina-de|"
     "jina-v2-es|jina-v2-de|gigachat|exaone4",
     {RE_GPT2},
     0},
    {"llama-bpe|llama3|llama-v3|falcon3|falcon-h1|pixtral", {RE_LLAMA3}, 1},
    {"dbrx|smaug-bpe|chatglm-bpe|glm4", {RE_LLAMA3}, 0},
    {"qwen2|deepseek-r1-qwen|stablelm2|megrez", {RE_QWEN2}, 0},
    {"starcoder|refact|smollm|command-r|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}, 0},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, 0},
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-"
      "\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}"
      "\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-"
      "\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}"
      "-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}"
      "\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-"
      "\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-"
      "\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-"
      "\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}"
      "\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-"
      "\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}"
      "\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}"
      "\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}"
      "\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}-"
      "\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}"
      "\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}]+",
      "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+",
      "\\s+$", "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+", "\\p{N}+"},
     0},
    {"deepseek-coder",
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+", "\\p{N}"},
     0},
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0},
};

static int name_in(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !memcmp(p, name, n)) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

int tok__bpe_init(tokenizer *t, const char *pre, char *err, size_t err_len)
{
    if (!pre || !*pre) pre = "gpt-2";
    const pre_family *fam = NULL;
    for (size_t i = 0; i < sizeof families / sizeof families[0] && !fam; i++)
        if (name_in(families[i].names, pre)) fam = &families[i];
    if (!fam) {
        if (err && err_len)
            snprintf(err, err_len,
                     "tokenizer: unsupported pre-tokenizer '%s' (tokenizer.ggml.pre); supported: "
                     "gpt-2, llama-bpe, qwen2, smollm, deepseek-llm, deepseek-coder, falcon, "
                     "starcoder, refact, mpt, default and their aliases",
                     pre);
        return -EINVAL;
    }
    snprintf(t->pre, sizeof t->pre, "%s", pre);
    t->ignore_merges = fam->ignore_merges;
    for (int i = 0; i < TOK__MAX_RE && fam->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile(
            (PCRE2_SPTR)fam->re[i], PCRE2_ZERO_TERMINATED,
            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        if (!re) {
            char msg[128];
            pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
            if (err && err_len)
                snprintf(err, err_len, "tokenizer: pre-tokenizer '%s' regex %d: %s at %zu", pre, i,
                         msg, (size_t)eo);
            return -EINVAL;
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
        t->re[t->n_re++] = re;
    }
    return 0;
}

void tok__bpe_fini(tokenizer *t)
{
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    t->n_re = 0;
}

/* ---- splitting --------------------------------------------------------------------------------
 */

typedef struct span_list {
    size_t *v; /* pairs: offset, length */
    size_t n, cap;
} span_list;

static int span_push(span_list *l, size_t off, size_t len)
{
    if (l->n + 2 > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = off;
    l->v[l->n++] = len;
    return 0;
}

/* Splits every span of in by re into out: matches and the gaps between them. */
static int split_spans(const char *text, const span_list *in, const pcre2_code *re,
                       pcre2_match_data *md, span_list *out)
{
    int rc = 0;
    for (size_t k = 0; k < in->n && !rc; k += 2) {
        size_t off = in->v[k], n = in->v[k + 1], pos = 0, last = 0;
        const PCRE2_SPTR subj = (PCRE2_SPTR)(text + off);
        while (pos < n && !rc) {
            int m = pcre2_match(re, subj, n, pos, 0, md, NULL);
            /* A JIT resource limit is not a verdict: ask the interpreter (heap-backed) again. */
            if (m < 0 && m != PCRE2_ERROR_NOMATCH)
                m = pcre2_match(re, subj, n, pos, PCRE2_NO_JIT, md, NULL);
            if (m < 0) break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* an empty match splits nothing: step over one character */
                size_t l = tok__utf8_len((unsigned char)text[off + ms]);
                pos = ms + (l < n - ms ? l : n - ms);
                continue;
            }
            if (ms > last) rc = span_push(out, off + last, ms - last);
            if (!rc) rc = span_push(out, off + ms, me - ms);
            last = pos = me;
        }
        if (!rc && last < n) rc = span_push(out, off + last, n - last);
    }
    return rc;
}

int tok__pretokenize(const tokenizer *t, const char *text, size_t len,
                     void (*fn)(void *ctx, size_t off, size_t len), void *ctx)
{
    span_list a = {0}, b = {0};
    pcre2_match_data *md = pcre2_match_data_create(16, NULL);
    int rc = md ? 0 : -ENOMEM;
    if (!rc && len) rc = span_push(&a, 0, len);
    for (int i = 0; i < t->n_re && !rc; i++) {
        b.n = 0;
        rc = split_spans(text, &a, t->re[i], md, &b);
        span_list tmp = a;
        a = b;
        b = tmp;
    }
    for (size_t k = 0; k < a.n && !rc; k += 2)
        fn(ctx, a.v[k], a.v[k + 1]);
    free(a.v);
    free(b.v);
    pcre2_match_data_free(md);
    return rc;
}

/* ---- merging ----------------------------------------------------------------------------------
 */

typedef struct bpe_ctx {
    const tokenizer *t;
    const char *text;
    tok__vec *out;
    char *w;      /* byte-level encoding of the current word */
    tok__sym *s;  /* symbols of the current word */
    size_t w_cap; /* bytes of w; s has as many entries */
    tok__heap h;
    int oom;
} bpe_ctx;

static void add_bigram(bpe_ctx *c, int l, int r)
{
    if (l < 0 || r < 0) return;
    int32_t rank = tok__merge_rank(c->t, c->s[l].id, c->s[r].id);
    if (rank < 0) return;
    tok__heap_push(&c->h, tok__bigram_make((uint32_t)rank, l, r, c->s[l].n + c->s[r].n));
}

/* Emits a symbol: its token, or the tokens of its characters when it is not one. */
static void emit_sym(bpe_ctx *c, const tok__sym *s)
{
    if (s->id >= 0) {
        tok__push(c->out, s->id);
        return;
    }
    for (int i = 0; i < s->n;) {
        const char *p = c->w + s->start + i;
        size_t l = tok__utf8_len((unsigned char)*p);
        if (l > (size_t)(s->n - i)) l = (size_t)(s->n - i);
        int32_t id = tok__lookup(c->t, p, l);
        if (id >= 0) tok__push(c->out, id);
        i += (int)l;
    }
}

static void merge_word(bpe_ctx *c, size_t off, size_t len)
{
    const tokenizer *t = c->t;
    if (c->oom) return;
    if (2 * len > c->w_cap) {
        size_t cap = 2 * len + 64;
        char *w = realloc(c->w, cap);
        if (w) c->w = w;
        tok__sym *s = realloc(c->s, cap * sizeof *s);
        if (s) c->s = s;
        if (!w || !s) {
            c->oom = 1;
            return;
        }
        c->w_cap = cap;
    }
    size_t wn = 0;
    for (size_t i = 0; i < len; i++)
        wn += (size_t)tok__byte_to_unicode((unsigned char)c->text[off + i], c->w + wn);
    if (t->ignore_merges) {
        int32_t id = tok__lookup(t, c->w, wn);
        if (id >= 0) {
            tok__push(c->out, id);
            return;
        }
    }
    tok__sym *s = c->s;
    int n = 0;
    for (size_t o = 0; o < wn; n++) {
        size_t l = tok__utf8_len((unsigned char)c->w[o]);
        if (l > wn - o) l = wn - o;
        s[n] = (tok__sym){n - 1, o + l == wn ? -1 : n + 1, (int)o, (int)l,
                          tok__lookup(t, c->w + o, l)};
        o += l;
    }
    c->h.n = 0;
    for (int i = 1; i < n; i++)
        add_bigram(c, i - 1, i);
    tok__bigram b;
    while (tok__heap_pop(&c->h, &b)) {
        int left = tok__bigram_left(&b);
        tok__sym *L = &s[left], *R = &s[b.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue;
        L->n += R->n;
        L->id = tok__lookup(t, c->w + L->start, (size_t)L->n);
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) s[R->next].prev = left;
        add_bigram(c, L->prev, left);
        add_bigram(c, left, L->next);
    }
    if (c->h.oom) c->oom = 1;
    for (int i = n ? 0 : -1; i != -1; i = s[i].next)
        emit_sym(c, &s[i]);
}

static void on_word(void *ctx, size_t off, size_t len)
{
    merge_word(ctx, off, len);
}

void tok__bpe_encode(const tokenizer *t, const char *text, size_t len, tok__vec *out)
{
    bpe_ctx c = {.t = t, .text = text, .out = out};
    if (tok__pretokenize(t, text, len, on_word, &c) || c.oom) out->oom = 1;
    free(c.w);
    free(c.s);
    free(c.h.v);
}
