/*
 * jinja_lex.c — the Jinja lexer: template source → tokens, with the whitespace rules of
 * transformers' environment.
 *
 * Line breaks (\r\n, \r, \n) become \n and one trailing newline of the source is dropped
 * (keep_trailing_newline off). Text runs between tags become T_DATA after whitespace control:
 * a tag opened with '-' ({%-, {{-, {#-) strips all whitespace before it; lstrip_blocks strips
 * the spaces between a line start and a {% or {# tag (not {{, not {%+); a tag closed with '-'
 * strips all whitespace after it; trim_blocks drops the one newline after %} or #}. Comments
 * vanish and {% raw %} bodies are text. Inside tags: names, strings (Python escapes), ints
 * (0b / 0o / 0x, '_' separators), floats and operators; %} and }} only close a tag when
 * brackets are balanced. Called by jinja_parse.c; errors raise TemplateSyntaxError on the catch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

typedef struct lexer {
    jinja_tmpl *t;
    jj_catch *k;
    const char *s; /* normalised source */
    size_t n, pos;
    int line;
    int line_starting; /* the last thing consumed ended a line (or nothing was consumed) */
    jj_token *toks;
    uint32_t n_toks, cap;
} lexer;

static _Noreturn void lex_fail(lexer *lx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static _Noreturn void lex_fail(lexer *lx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jj__vraise(lx->k, JJ_E_SYNTAX, lx->line, fmt, ap);
}

static void *lex_alloc(lexer *lx, size_t n)
{
    void *p = jj__arena_alloc(&lx->t->arena, n);
    if (!p) {
        va_list ap;
        memset(&ap, 0, sizeof ap);
        jj__vraise(lx->k, JJ_E_MEMORY, lx->line, "out of memory", ap);
    }
    return p;
}

static jj_token *emit(lexer *lx, int type, int line)
{
    if (lx->n_toks == lx->cap) {
        uint32_t cap = lx->cap ? lx->cap * 2 : 256;
        jj_token *nt = lex_alloc(lx, sizeof *nt * cap);
        if (lx->n_toks) memcpy(nt, lx->toks, sizeof *nt * lx->n_toks);
        lx->toks = nt;
        lx->cap = cap;
    }
    jj_token *tk = &lx->toks[lx->n_toks++];
    memset(tk, 0, sizeof *tk);
    tk->type = (uint8_t)type;
    tk->line = line;
    return tk;
}

static int count_nl(const char *s, size_t a, size_t b)
{
    int n = 0;
    for (size_t i = a; i < b; i++)
        n += s[i] == '\n';
    return n;
}

/* Is the code point at byte i whitespace? Sets *w to its byte length. */
static int space_at(const char *s, size_t n, size_t i, size_t *w)
{
    size_t j = i;
    uint32_t cp = jj__utf8_next(s, n, &j);
    *w = j - i;
    return jj__is_space(cp);
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
    size_t w;
    while (i < n && space_at(s, n, i, &w))
        i += w;
    return i;
}

/* The end of text[a, b) without trailing whitespace (Python's rstrip). */
static size_t rstrip_end(const char *s, size_t a, size_t b)
{
    while (b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)s[st] & 0xC0) == 0x80)
            st--;
        size_t w;
        if (!space_at(s, b, st, &w) || st + w != b) break;
        b = st;
    }
    return b;
}

static int all_space(const char *s, size_t a, size_t b)
{
    if (a >= b) return 0;
    return skip_space(s, b, a) == b;
}

/* Emits text[a, b) as data after the whitespace control of the tag that follows it. */
static void emit_text(lexer *lx, size_t a, size_t b, char sign, int lstrip_ok)
{
    size_t end = b;
    if (sign == '-')
        end = rstrip_end(lx->s, a, b);
    else if (sign != '+' && lstrip_ok) {
        size_t l = b;
        while (l > a && lx->s[l - 1] != '\n')
            l--;
        if ((l > a || lx->line_starting) && all_space(lx->s, l, b)) end = l;
    }
    if (end > a) {
        jj_token *tk = emit(lx, T_DATA, lx->line);
        tk->s = lx->s + a;
        tk->n = end - a;
    }
    lx->line += count_nl(lx->s, a, b);
}

/* {% raw %} at q: returns the index just past its closing %} (0 when q is not a raw tag) and
 * the sign after {% in *sign. */
static size_t match_raw(const lexer *lx, size_t q, char *sign)
{
    const char *s = lx->s;
    size_t i = q + 2;
    *sign = 0;
    if (i < lx->n && (s[i] == '-' || s[i] == '+')) *sign = s[i++];
    i = skip_space(s, lx->n, i);
    if (i + 3 > lx->n || memcmp(s + i, "raw", 3)) return 0;
    i = skip_space(s, lx->n, i + 3);
    if (i + 3 <= lx->n && !memcmp(s + i, "-%}", 3)) return skip_space(s, lx->n, i + 3);
    if (i + 2 <= lx->n && !memcmp(s + i, "%}", 2)) return i + 2;
    return 0;
}

static void lex_raw(lexer *lx, size_t body)
{
    const char *s = lx->s;
    for (size_t i = body; i + 1 < lx->n; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t j = i + 2;
        char sign = 0;
        if (j < lx->n && (s[j] == '-' || s[j] == '+')) sign = s[j++];
        j = skip_space(s, lx->n, j);
        if (j + 6 > lx->n || memcmp(s + j, "endraw", 6)) continue;
        j = skip_space(s, lx->n, j + 6);
        size_t end;
        if (j + 3 <= lx->n && !memcmp(s + j, "+%}", 3))
            end = j + 3;
        else if (j + 3 <= lx->n && !memcmp(s + j, "-%}", 3))
            end = skip_space(s, lx->n, j + 3);
        else if (j + 2 <= lx->n && !memcmp(s + j, "%}", 2)) {
            end = j + 2;
            if (end < lx->n && s[end] == '\n') end++;
        } else
            continue;
        emit_text(lx, body, i, sign, 1);
        lx->line += count_nl(s, i, end);
        lx->line_starting = s[end - 1] == '\n';
        lx->pos = end;
        return;
    }
    lex_fail(lx, "Missing end of raw directive");
}

static void lex_comment(lexer *lx, size_t body)
{
    const char *s = lx->s;
    const char *e = body <= lx->n ? memmem(s + body, lx->n - body, "#}", 2) : NULL;
    if (!e) lex_fail(lx, "Missing end of comment tag");
    size_t at = (size_t)(e - s), end = at + 2;
    char sign = at > body ? s[at - 1] : 0;
    if (sign == '-')
        end = skip_space(s, lx->n, end);
    else if (sign != '+' && end < lx->n && s[end] == '\n')
        end++;
    lx->line += count_nl(s, body, end);
    lx->line_starting = s[end - 1] == '\n';
    lx->pos = end;
}

/* ---- tokens inside tags ------------------------------------------------------------------- */

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int is_name_start(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch >= 0x80;
}

/* (\d+_)*\d+ at i: the end, or i when there are no digits. */
static size_t digits(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && is_digit(s[j])) {
        while (j < n && is_digit(s[j]))
            j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) j++;
    }
    return j;
}

/* A float literal at i (not right after a '.'): its end, or 0. */
static size_t match_float(const lexer *lx, size_t i)
{
    const char *s = lx->s;
    if (i > 0 && s[i - 1] == '.') return 0;
    size_t j = digits(s, lx->n, i);
    if (j == i) return 0;
    size_t frac = 0;
    if (j + 1 < lx->n && s[j] == '.' && is_digit(s[j + 1])) frac = digits(s, lx->n, j + 1);
    size_t after = frac ? frac : j;
    if (after < lx->n && (s[after] == 'e' || s[after] == 'E')) {
        size_t k = after + 1;
        if (k < lx->n && (s[k] == '+' || s[k] == '-')) k++;
        size_t ed = digits(s, lx->n, k);
        if (ed > k) return ed;
    }
    return frac;
}

static int digit_val(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return 99;
}

/* An integer literal at i: sets *val, returns its end. */
static size_t lex_int(lexer *lx, size_t i, int64_t *val)
{
    const char *s = lx->s;
    int base = 10;
    size_t j = i;
    if (s[i] == '0' && i + 1 < lx->n) {
        char p = (char)(s[i + 1] | 0x20);
        base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
        if (base != 10) {
            size_t k = i + 2;
            if (k < lx->n && s[k] == '_') k++;
            if (k < lx->n && digit_val(s[k]) < base)
                j = k;
            else
                base = 10;
        }
    }
    uint64_t v = 0;
    if (base == 10 && s[j] == '0') {
        j++;
        while (j + 1 < lx->n && (s[j] == '0' || (s[j] == '_' && s[j + 1] == '0')))
            j++;
        *val = 0;
        return j;
    }
    while (j < lx->n) {
        if (s[j] == '_' && j + 1 < lx->n && digit_val(s[j + 1]) < base) j++;
        int d = digit_val(s[j]);
        if (d >= base) break;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base ||
            v * (uint64_t)base + (uint64_t)d > INT64_MAX)
            lex_fail(lx, "integer literal too large");
        v = v * (uint64_t)base + (uint64_t)d;
        j++;
    }
    *val = (int64_t)v;
    return j;
}

static int hexn(const char *s, size_t n, size_t i, int len, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < len; k++) {
        if (i + (size_t)k >= n) return 0;
        int d = digit_val(s[i + (size_t)k]);
        if (d > 15) return 0;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 1;
}

/* Decodes the body of a string literal s[a, b) with Python's escapes into the arena. */
static void decode_string(lexer *lx, jj_token *tk, size_t a, size_t b)
{
    const char *s = lx->s;
    char *out = lex_alloc(lx, (b - a) * 2 + 1);
    size_t o = 0;
    for (size_t i = a; i < b;) {
        if (s[i] != '\\' || i + 1 >= b) {
            out[o++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        uint32_t cp;
        i += 2;
        switch (e) {
        case '\\':
            out[o++] = '\\';
            break;
        case '\'':
            out[o++] = '\'';
            break;
        case '"':
            out[o++] = '"';
            break;
        case 'a':
            out[o++] = '\a';
            break;
        case 'b':
            out[o++] = '\b';
            break;
        case 'f':
            out[o++] = '\f';
            break;
        case 'n':
            out[o++] = '\n';
            break;
        case 'r':
            out[o++] = '\r';
            break;
        case 't':
            out[o++] = '\t';
            break;
        case 'v':
            out[o++] = '\v';
            break;
        case '\n':
            break;
        case 'x':
        case 'u':
        case 'U': {
            int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (!hexn(s, b, i, len, &cp)) lex_fail(lx, "truncated \\%c escape in a string", e);
            if (cp > 0x10FFFF) lex_fail(lx, "illegal Unicode character in a string");
            i += (size_t)len;
            o += jj__utf8_put(out + o, cp);
            break;
        }
        case 'N':
            lex_fail(lx, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < b && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += jj__utf8_put(out + o, cp);
            } else if ((unsigned char)e >= 0x80) {
                /* Jinja escapes non-ASCII as \xNN / \uNNNN before decoding, so "\é" ends up
                 * as a backslash and the escape's letters */
                size_t st = i - 1;
                uint32_t c2 = jj__utf8_next(s, b, &st);
                i = st;
                char tmp[16];
                int m = snprintf(tmp, sizeof tmp,
                                 c2 < 0x100     ? "\\x%02x"
                                 : c2 < 0x10000 ? "\\u%04x"
                                                : "\\U%08x",
                                 c2);
                memcpy(out + o, tmp, (size_t)m);
                o += (size_t)m;
            } else {
                out[o++] = '\\';
                out[o++] = e;
            }
        }
    }
    out[o] = 0;
    tk->s = out;
    tk->n = o;
}

static const struct {
    const char *text;
    uint8_t op;
} ops[] = {
    {"**", TO_POW},     {"//", TO_FLOORDIV}, {"==", TO_EQ},    {"!=", TO_NE},
    {">=", TO_GTEQ},    {"<=", TO_LTEQ},     {"+", TO_ADD},    {"-", TO_SUB},
    {"*", TO_MUL},      {"/", TO_DIV},       {"%", TO_MOD},    {"~", TO_TILDE},
    {"[", TO_LBRACKET}, {"]", TO_RBRACKET},  {"(", TO_LPAREN}, {")", TO_RPAREN},
    {"{", TO_LBRACE},   {"}", TO_RBRACE},    {"=", TO_ASSIGN}, {".", TO_DOT},
    {":", TO_COLON},    {"|", TO_PIPE},      {",", TO_COMMA},  {";", TO_SEMICOLON},
    {"<", TO_LT},       {">", TO_GT},
};

/* The closing tag at pos when brackets are balanced: its end, or 0. */
static size_t match_end(const lexer *lx, int block)
{
    const char *s = lx->s + lx->pos;
    size_t left = lx->n - lx->pos, p = lx->pos;
    if (block) {
        if (left >= 3 && !memcmp(s, "+%}", 3)) return p + 3;
        if (left >= 3 && !memcmp(s, "-%}", 3)) return skip_space(lx->s, lx->n, p + 3);
        if (left >= 2 && !memcmp(s, "%}", 2)) return p + 2 + (left > 2 && s[2] == '\n');
        return 0;
    }
    if (left >= 3 && !memcmp(s, "-}}", 3)) return skip_space(lx->s, lx->n, p + 3);
    if (left >= 2 && !memcmp(s, "}}", 2)) return p + 2;
    return 0;
}

static void lex_operator(lexer *lx, char *stack, int *depth)
{
    const char *s = lx->s + lx->pos;
    size_t left = lx->n - lx->pos;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        size_t l = strlen(ops[k].text);
        if (l > left || memcmp(s, ops[k].text, l)) continue;
        char ch = ops[k].text[0];
        if (l == 1 && (ch == '(' || ch == '[' || ch == '{')) {
            if (*depth >= 256) lex_fail(lx, "brackets nested too deeply");
            stack[(*depth)++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (l == 1 && (ch == ')' || ch == ']' || ch == '}')) {
            if (!*depth) lex_fail(lx, "unexpected '%c'", ch);
            char want = stack[--*depth];
            if (want != ch) lex_fail(lx, "unexpected '%c', expected '%c'", ch, want);
        }
        jj_token *tk = emit(lx, T_OP, lx->line);
        tk->op = ops[k].op;
        lx->pos += l;
        return;
    }
    lex_fail(lx, "unexpected char '%c' at %zu", *s, lx->pos);
}

/* Tokens of one {{ }} or {% %} tag, up to and including its end. */
static void lex_tag(lexer *lx, int block)
{
    const char *s = lx->s;
    char stack[256];
    int depth = 0;
    for (;;) {
        if (lx->pos >= lx->n) return; /* the parser reports the unexpected end */
        size_t end = depth ? 0 : match_end(lx, block);
        if (end) {
            emit(lx, block ? T_BLOCK_END : T_VAR_END, lx->line);
            lx->line += count_nl(s, lx->pos, end);
            lx->line_starting = s[end - 1] == '\n';
            lx->pos = end;
            return;
        }
        size_t p = lx->pos, w;
        if (space_at(s, lx->n, p, &w)) {
            size_t e = skip_space(s, lx->n, p);
            lx->line += count_nl(s, p, e);
            lx->pos = e;
            continue;
        }
        size_t fe = is_digit(s[p]) ? match_float(lx, p) : 0;
        if (fe) {
            jj_token *tk = emit(lx, T_FLOAT, lx->line);
            char tmp[128];
            size_t o = 0;
            for (size_t i = p; i < fe && o + 1 < sizeof tmp; i++)
                if (s[i] != '_') tmp[o++] = s[i];
            tmp[o] = 0;
            tk->f = strtod(tmp, NULL);
            lx->pos = fe;
        } else if (is_digit(s[p])) {
            jj_token *tk = emit(lx, T_INT, lx->line);
            lx->pos = lex_int(lx, p, &tk->i);
        } else if (is_name_start((unsigned char)s[p])) {
            size_t e = p;
            while (e < lx->n && (is_name_start((unsigned char)s[e]) || is_digit(s[e])))
                e++;
            jj_token *tk = emit(lx, T_NAME, lx->line);
            tk->s = s + p;
            tk->n = e - p;
            lx->pos = e;
        } else if (s[p] == '\'' || s[p] == '"') {
            size_t e = p + 1;
            while (e < lx->n && s[e] != s[p])
                e += s[e] == '\\' ? 2 : 1;
            if (e >= lx->n)
                lex_fail(lx, "unexpected char '%c' at %zu (an unterminated string)", s[p], p);
            jj_token *tk = emit(lx, T_STRING, lx->line);
            decode_string(lx, tk, p + 1, e);
            lx->line += count_nl(s, p, e);
            lx->pos = e + 1;
        } else
            lex_operator(lx, stack, &depth);
    }
}

/* ---- the root state ----------------------------------------------------------------------- */

static char *normalise(lexer *lx, const char *src, size_t len)
{
    char *out = lex_alloc(lx, len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            out[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else
            out[o++] = src[i];
    }
    if (o && out[o - 1] == '\n') o--;
    out[o] = 0;
    lx->n = o;
    return out;
}

void jj__lex(jinja_tmpl *t, jj_catch *k, const char *src, size_t len, jj_token **toks, uint32_t *n)
{
    lexer lx = {.t = t, .k = k, .line = 1, .line_starting = 1};
    lx.s = normalise(&lx, src, len);
    const char *s = lx.s;
    while (lx.pos < lx.n) {
        size_t q = lx.pos;
        while (q + 1 < lx.n &&
               !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#')))
            q++;
        if (q + 1 >= lx.n) {
            emit_text(&lx, lx.pos, lx.n, 0, 0);
            break;
        }
        char sign = 0;
        size_t raw_body = s[q + 1] == '%' ? match_raw(&lx, q, &sign) : 0;
        if (!raw_body && q + 2 < lx.n && (s[q + 2] == '-' || s[q + 2] == '+')) sign = s[q + 2];
        emit_text(&lx, lx.pos, q, sign, s[q + 1] != '{');
        size_t after = q + 2 + (sign ? 1 : 0);
        lx.line_starting = 0;
        if (raw_body) {
            lx.line += count_nl(s, q, raw_body);
            lx.line_starting = s[raw_body - 1] == '\n';
            lex_raw(&lx, raw_body);
        } else if (s[q + 1] == '#') {
            lx.pos = after;
            lex_comment(&lx, after);
        } else {
            int block = s[q + 1] == '%';
            emit(&lx, block ? T_BLOCK_BEGIN : T_VAR_BEGIN, lx.line);
            lx.pos = after;
            lex_tag(&lx, block);
        }
    }
    emit(&lx, T_EOF, lx.line);
    *toks = lx.toks;
    *n = lx.n_toks;
}
