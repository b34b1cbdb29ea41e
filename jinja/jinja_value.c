/*
 * jinja_value.c — the value model of the Jinja interpreter: the arena every value lives in,
 * errors, render contexts (their arena, limits and clock), growable strings in the arena
 * (base/buf.h, bounded by the output limit), strings (UTF-8, code-point indexed), lists,
 * insertion-ordered dicts, and Python's semantics for them: truth, ==, <, hashing, len(), `in`,
 * iteration (str and repr: jinja_repr.c). It calls no other file of the interpreter: a lazy
 * generator carries the function that makes its items.
 *
 * Invariants: a jinja_str's n_cp is its number of code points and s[len] is NUL; a dict's
 * entries are unique by Python equality (1 == 1.0 == True) and its index, when present, maps
 * every entry; nothing is ever freed before its arena. Called by the other jinja_*.c files.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

/* ---- arena -------------------------------------------------------------------------------- */

#define JJ_CHUNK_BYTES (64u * 1024u)

void *jj__arena_alloc(jj_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (a->head && a->head->cap - a->head->used >= n) {
        void *p = a->head->data + a->head->used;
        a->head->used += n;
        return p;
    }
    size_t cap = n > JJ_CHUNK_BYTES / 4 ? n : JJ_CHUNK_BYTES;
    if (a->limit_bytes && a->total_bytes + cap + sizeof(jj_chunk) > a->limit_bytes) return NULL;
    jj_chunk *k = malloc(sizeof *k + cap);
    if (!k) return NULL;
    k->cap = cap;
    k->used = n;
    a->total_bytes += cap + sizeof *k;
    if (n > JJ_CHUNK_BYTES / 4 && a->head) {
        /* a big block goes behind the current chunk, which keeps its free space */
        k->next = a->head->next;
        a->head->next = k;
    } else {
        k->next = a->head;
        a->head = k;
    }
    return k->data;
}

void jj__arena_free(jj_arena *a)
{
    jj_chunk *k = a->head;
    while (k) {
        jj_chunk *next = k->next;
        free(k);
        k = next;
    }
    a->head = NULL;
    a->total_bytes = 0;
}

/* ---- errors ------------------------------------------------------------------------------- */

static const char *const err_names[] = {
    "TemplateSyntaxError", "UndefinedError",
    "TypeError",           "ValueError",
    "SecurityError",       "TemplateRuntimeError",
    "raise_exception",     "ZeroDivisionError",
    "IndexError",          "KeyError",
    "OverflowError",       "AttributeError",
    "LimitError",          "MemoryError",
    "NotImplementedError", "TemplateAssertionError",
    "FilterArgumentError",
};

const char *jj__err_name(int kind)
{
    return kind >= 0 && kind < (int)(sizeof err_names / sizeof err_names[0]) ? err_names[kind]
                                                                             : "Error";
}

_Noreturn void jj__vraise(jj_catch *k, int kind, int line, const char *fmt, va_list ap)
{
    if (k->err) {
        snprintf(k->err->kind, sizeof k->err->kind, "%s", jj__err_name(kind));
        vsnprintf(k->err->message, sizeof k->err->message, fmt, ap);
        k->err->line = line;
    }
    k->code = kind == JJ_E_LIMIT ? -E2BIG : kind == JJ_E_MEMORY ? -ENOMEM : -EINVAL;
    longjmp(k->jb, 1);
}

_Noreturn void jj__raise(jinja_ctx *c, int kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jj__vraise(c->catch, kind, c->line, fmt, ap);
}

void jj__step(jinja_ctx *c)
{
    if (++c->steps > c->lim.max_steps)
        jj__raise(c, JJ_E_LIMIT,
                  "the template ran more than %llu steps (loop iterations and calls)",
                  (unsigned long long)c->lim.max_steps);
}

void *jj__alloc(jinja_ctx *c, size_t n)
{
    void *p = jj__arena_alloc(&c->arena, n);
    if (!p) {
        if (c->arena.limit_bytes && c->arena.total_bytes + n > c->arena.limit_bytes / 2)
            jj__raise(c, JJ_E_LIMIT, "the template used more than %zu bytes of memory",
                      c->arena.limit_bytes);
        jj__raise(c, JJ_E_MEMORY, "out of memory");
    }
    return p;
}

/* ---- render contexts ---------------------------------------------------------------------- */

jinja_ctx *jinja_ctx_create(const jinja_limits *lim)
{
    jinja_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (lim) c->lim = *lim;
    if (!c->lim.max_output_bytes) c->lim.max_output_bytes = 32u << 20;
    if (!c->lim.max_memory_bytes) c->lim.max_memory_bytes = (size_t)512 << 20;
    if (!c->lim.max_steps) c->lim.max_steps = 50000000;
    if (!c->lim.max_depth) c->lim.max_depth = 200;
    c->arena.limit_bytes = c->lim.max_memory_bytes;
    return c;
}

void jinja_ctx_destroy(jinja_ctx *c)
{
    if (!c) return;
    jj__arena_free(&c->arena);
    free(c);
}

void jinja_ctx_set_time(jinja_ctx *c, const struct tm *now)
{
    c->now = *now;
    c->have_now = 1;
}

/* ---- buffers ------------------------------------------------------------------------------ */

/* The allocator of a context's strings: arena blocks, bounded by the output limit. */
static char *arena_grow(void *ud, char *old, size_t len, size_t need, size_t cap)
{
    jinja_ctx *c = ud;
    if (need > c->lim.max_output_bytes)
        jj__raise(c, JJ_E_LIMIT, "the rendered text exceeds %zu bytes", c->lim.max_output_bytes);
    char *p = jj__alloc(c, cap);
    if (len) memcpy(p, old, len);
    return p;
}

void jj__buf_init(buf *b, jinja_ctx *c)
{
    *b = c ? (buf){.alloc = arena_grow, .ud = c} : (buf){0};
}

/* ---- UTF-8 and character classes ---------------------------------------------------------- */

uint32_t jj__utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = n - *i;
    uint32_t c = p[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > left) {
        *i += 1;
        return 0xFFFD;
    }
    if (len == 1) {
        *i += 1;
        return c;
    }
    uint32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80) {
            *i += 1;
            return 0xFFFD;
        }
        cp = cp << 6 | (p[k] & 0x3F);
    }
    *i += (size_t)len;
    return cp;
}

size_t jj__utf8_put(char *out, uint32_t cp)
{
    if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = 0xFFFD;
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t jj__cp_offset(const struct jinja_str *s, int64_t k)
{
    if (k <= 0) return 0;
    if ((size_t)k >= s->n_cp) return s->len;
    if (s->n_cp == s->len) return (size_t)k;
    size_t i = 0;
    while (k-- > 0 && i < s->len)
        jj__utf8_next(s->s, s->len, &i);
    return i;
}

int jj__is_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth
 * Latin; other scripts are returned unchanged. */
uint32_t jj__lower(uint32_t c)
{
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c >= 0x100 && c <= 0x137) return c | 1;
    if (c >= 0x139 && c <= 0x148) return (c & 1) ? c + 1 : c;
    if (c >= 0x14A && c <= 0x177) return c | 1;
    if (c == 0x178) return 0xFF;
    if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
    return c;
}

uint32_t jj__upper(uint32_t c)
{
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c >= 0x100 && c <= 0x137) return c & ~1u;
    if (c >= 0x139 && c <= 0x148) return (c & 1) ? c : c - 1;
    if (c >= 0x14A && c <= 0x177) return c & ~1u;
    if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c : c - 1;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
    return c;
}

/* ---- constructors ------------------------------------------------------------------------- */

jinja_value jinja_none(void)
{
    return (jinja_value){.kind = JINJA_NONE};
}

jinja_value jinja_bool(int b)
{
    return (jinja_value){.kind = JINJA_BOOL, .b = !!b};
}

jinja_value jinja_int(int64_t i)
{
    return (jinja_value){.kind = JINJA_INT, .i = i};
}

jinja_value jinja_float(double f)
{
    return (jinja_value){.kind = JINJA_FLOAT, .f = f};
}

jinja_value jinja_undefined(void)
{
    return (jinja_value){.kind = JINJA_UNDEFINED};
}

const jinja_value jj__missing = {.kind = JINJA__MISSING};

jinja_value jj__undef(jinja_ctx *c, int exc, const char *fmt, ...)
{
    jinja_value v = {.kind = JINJA_UNDEFINED};
    struct jinja_undef *u = jj__alloc(c, sizeof *u);
    char tmp[400];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    char *m = jj__alloc(c, (size_t)n + 1);
    memcpy(m, tmp, (size_t)n + 1);
    u->msg = m;
    u->exc = exc;
    v.u = u;
    return v;
}

_Noreturn void jj__undef_fail(jinja_ctx *c, jinja_value u)
{
    if (u.kind == JINJA_UNDEFINED && u.u) jj__raise(c, u.u->exc, "%s", u.u->msg);
    jj__raise(c, JJ_E_UNDEFINED, "a value is undefined");
}

static size_t count_cp(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

jinja_value jj__str_new(jinja_ctx *c, const char *s, size_t n)
{
    struct jinja_str *p = jj__alloc(c, sizeof *p + n + 1);
    p->len = n;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    p->n_cp = count_cp(s, n);
    return (jinja_value){.kind = JINJA_STR, .s = p};
}

jinja_value jj__str_cstr(jinja_ctx *c, const char *s)
{
    return jj__str_new(c, s, strlen(s));
}

jinja_value jj__str_buf(jinja_ctx *c, const buf *b)
{
    return jj__str_new(c, b->s ? b->s : "", b->len);
}

jinja_value jj__markup(jinja_value s)
{
    s.flags |= JINJA_F_MARKUP;
    return s;
}

jinja_value jj__list_new(jinja_ctx *c, int type, uint32_t cap)
{
    struct jinja_list *l = jj__alloc(c, sizeof *l);
    memset(l, 0, sizeof *l);
    l->type = (uint8_t)type;
    l->cap = cap;
    if (cap) l->v = jj__alloc(c, sizeof *l->v * cap);
    return (jinja_value){.kind = JINJA_LIST, .l = l};
}

jinja_value jj__copy_value(jinja_ctx *c, jinja_value v)
{
    if (v.kind == JINJA_LIST) {
        jinja_value l = jj__list_new(c, v.l->type, v.l->n);
        for (uint32_t i = 0; i < v.l->n; i++)
            l.l->v[i] = jj__copy_value(c, v.l->v[i]);
        l.l->n = v.l->n;
        memcpy(l.l->r, v.l->r, sizeof l.l->r);
        return l;
    }
    if (v.kind == JINJA_DICT) {
        jinja_value d = jj__dict_new(c, v.d->n);
        for (uint32_t i = 0; i < v.d->n; i++)
            jj__dict_set(c, d, v.d->e[i].k, jj__copy_value(c, v.d->e[i].v));
        return d;
    }
    return v;
}

jinja_value jj__list_of(jinja_ctx *c, int type, const jinja_value *v, uint32_t n)
{
    jinja_value l = jj__list_new(c, type, n);
    if (n) memcpy(l.l->v, v, sizeof *v * n);
    l.l->n = n;
    return l;
}

void jj__list_push(jinja_ctx *c, jinja_value lv, jinja_value v)
{
    struct jinja_list *l = lv.l;
    if (l->n == l->cap) {
        if (l->cap >= UINT32_MAX / 2) jj__raise(c, JJ_E_LIMIT, "list too long");
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        jinja_value *nv = jj__alloc(c, sizeof *nv * cap);
        if (l->n) memcpy(nv, l->v, sizeof *nv * l->n);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jinja_value jj__dict_new(jinja_ctx *c, uint32_t cap)
{
    struct jinja_dict *d = jj__alloc(c, sizeof *d);
    memset(d, 0, sizeof *d);
    d->cap = cap;
    if (cap) d->e = jj__alloc(c, sizeof *d->e * cap);
    return (jinja_value){.kind = JINJA_DICT, .d = d};
}

jinja_value jj__func_new(jinja_ctx *c, int type, const char *name, jj_native_fn fn,
                         jinja_value self)
{
    struct jinja_func *f = jj__alloc(c, sizeof *f);
    memset(f, 0, sizeof *f);
    f->type = (uint8_t)type;
    f->name = name;
    f->fn = fn;
    f->self = self;
    f->caller = (jinja_value){.kind = JINJA_UNDEFINED};
    return (jinja_value){.kind = JINJA_CALLABLE, .fn = f};
}

/* ---- hashing and dicts -------------------------------------------------------------------- */

uint32_t jj__hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_int(int64_t i)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

/* Python-consistent: equal values hash equally (1, 1.0 and True). */
static uint32_t hash_value(jinja_ctx *c, jinja_value v)
{
    switch (v.kind) {
    case JINJA_STR:
        return jj__hash_bytes(v.s->s, v.s->len);
    case JINJA_INT:
        return hash_int(v.i);
    case JINJA_BOOL:
        return hash_int(v.b);
    case JINJA_FLOAT:
        if (v.f == floor(v.f) && fabs(v.f) < 9.2e18) return hash_int((int64_t)v.f);
        {
            uint64_t bits;
            memcpy(&bits, &v.f, sizeof bits);
            return hash_int((int64_t)bits);
        }
    case JINJA_NONE:
        return 0x5bd1e995u;
    case JINJA_UNDEFINED:
        return 0x27d4eb2du;
    case JINJA_LIST:
        if (v.l->type == JJ_L_TUPLE) {
            uint32_t h = 0x345678u;
            for (uint32_t i = 0; i < v.l->n; i++)
                h = (h ^ hash_value(c, v.l->v[i])) * 1000003u;
            return h;
        }
        if (v.l->type == JJ_L_GEN) return hash_int((int64_t)(intptr_t)v.l); /* by identity */
        break;
    case JINJA_CALLABLE:
    case JINJA_NAMESPACE:
    case JINJA_LOOP:
        return hash_int((int64_t)(intptr_t)v.fn);
    default:
        break;
    }
    if (c) jj__raise(c, JJ_E_TYPE, "unhashable type: '%s'", jj__type_name(v));
    return 0;
}

static void dict_reindex(jinja_ctx *c, struct jinja_dict *d, uint32_t cap)
{
    uint32_t *ix = jj__alloc(c, sizeof *ix * cap);
    memset(ix, 0, sizeof *ix * cap);
    for (uint32_t i = 0; i < d->n; i++) {
        uint32_t h = d->e[i].hash & (cap - 1);
        while (ix[h])
            h = (h + 1) & (cap - 1);
        ix[h] = i + 1;
    }
    d->index = ix;
    d->index_cap = cap;
}

static jj_entry *dict_find_h(struct jinja_dict *d, jinja_value k, uint32_t h)
{
    if (d->index) {
        uint32_t m = d->index_cap - 1;
        for (uint32_t p = h & m; d->index[p]; p = (p + 1) & m) {
            jj_entry *e = &d->e[d->index[p] - 1];
            if (e->hash == h && jj__equal(e->k, k)) return e;
        }
        return NULL;
    }
    for (uint32_t i = 0; i < d->n; i++)
        if (d->e[i].hash == h && jj__equal(d->e[i].k, k)) return &d->e[i];
    return NULL;
}

jj_entry *jj__dict_find(jinja_ctx *c, jinja_value dv, jinja_value k)
{
    return dict_find_h(dv.d, k, hash_value(c, k));
}

jj_entry *jj__dict_find_str(jinja_value dv, const char *k, size_t n)
{
    struct jinja_dict *d = dv.d;
    uint32_t h = jj__hash_bytes(k, n);
    if (d->index) {
        uint32_t m = d->index_cap - 1;
        for (uint32_t p = h & m; d->index[p]; p = (p + 1) & m) {
            jj_entry *e = &d->e[d->index[p] - 1];
            if (e->hash == h && e->k.kind == JINJA_STR && e->k.s->len == n &&
                !memcmp(e->k.s->s, k, n))
                return e;
        }
        return NULL;
    }
    for (uint32_t i = 0; i < d->n; i++) {
        jj_entry *e = &d->e[i];
        if (e->hash == h && e->k.kind == JINJA_STR && e->k.s->len == n && !memcmp(e->k.s->s, k, n))
            return e;
    }
    return NULL;
}

void jj__dict_check(jinja_value dv)
{
    const struct jinja_dict *d = dv.d;
    assert(d->n <= d->cap);
    for (uint32_t i = 0; i < d->n; i++) {
        assert(d->e[i].hash == hash_value(NULL, d->e[i].k));
        for (uint32_t j = 0; j < i; j++)
            assert(!jj__equal(d->e[i].k, d->e[j].k));
    }
    if (!d->index) {
        assert(d->n <= 8);
        return;
    }
    assert((d->index_cap & (d->index_cap - 1)) == 0 && d->n * 2 <= d->index_cap);
    uint32_t seen = 0;
    for (uint32_t p = 0; p < d->index_cap; p++)
        if (d->index[p]) {
            assert(d->index[p] <= d->n);
            seen++;
        }
    assert(seen == d->n);
    for (uint32_t i = 0; i < d->n; i++)
        assert(dict_find_h((struct jinja_dict *)d, d->e[i].k, d->e[i].hash) == &d->e[i]);
}

void jj__dict_set(jinja_ctx *c, jinja_value dv, jinja_value k, jinja_value v)
{
    struct jinja_dict *d = dv.d;
    uint32_t h = hash_value(c, k);
    jj_entry *e = dict_find_h(d, k, h);
    if (e) {
        e->v = v;
        return;
    }
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 4;
        jj_entry *ne = jj__alloc(c, sizeof *ne * cap);
        if (d->n) memcpy(ne, d->e, sizeof *ne * d->n);
        d->e = ne;
        d->cap = cap;
    }
    d->e[d->n++] = (jj_entry){k, v, h};
    if (d->n > 8 && (!d->index || d->n * 2 > d->index_cap))
        dict_reindex(c, d, d->index_cap ? d->index_cap * 2 : 32);
    else if (d->index) {
        uint32_t m = d->index_cap - 1, p = h & m;
        while (d->index[p])
            p = (p + 1) & m;
        d->index[p] = d->n;
    }
}

/* ---- Python semantics --------------------------------------------------------------------- */

int jj__is_str(jinja_value v)
{
    return v.kind == JINJA_STR;
}

int jj__is_seq(jinja_value v)
{
    return v.kind == JINJA_LIST && (v.l->type == JJ_L_LIST || v.l->type == JJ_L_TUPLE);
}

static int is_num(jinja_value v)
{
    return v.kind == JINJA_INT || v.kind == JINJA_FLOAT || v.kind == JINJA_BOOL;
}

static double num_f(jinja_value v)
{
    return v.kind == JINJA_FLOAT ? v.f : v.kind == JINJA_INT ? (double)v.i : (double)v.b;
}

int jj__truthy(jinja_value v)
{
    switch (v.kind) {
    case JINJA_UNDEFINED:
    case JINJA_NONE:
        return 0;
    case JINJA_BOOL:
        return v.b;
    case JINJA_INT:
        return v.i != 0;
    case JINJA_FLOAT:
        return v.f != 0;
    case JINJA_STR:
        return v.s->len != 0;
    case JINJA_LIST:
        return v.l->type == JJ_L_GEN ? 1 : v.l->n != 0;
    case JINJA_DICT:
        return v.d->n != 0;
    default:
        return 1;
    }
}

int jj__equal(jinja_value a, jinja_value b)
{
    if (is_num(a) && is_num(b)) {
        if (a.kind != JINJA_FLOAT && b.kind != JINJA_FLOAT) {
            int64_t x = a.kind == JINJA_INT ? a.i : a.b, y = b.kind == JINJA_INT ? b.i : b.b;
            return x == y;
        }
        return num_f(a) == num_f(b);
    }
    if (a.kind != b.kind) return 0;
    switch (a.kind) {
    case JINJA_UNDEFINED:
    case JINJA_NONE:
        return 1;
    case JINJA_STR:
        return a.s->len == b.s->len && !memcmp(a.s->s, b.s->s, a.s->len);
    case JINJA_LIST: {
        if (a.l == b.l) return 1;
        int ta = a.l->type, tb = b.l->type;
        if (ta == JJ_L_GEN || tb == JJ_L_GEN || ta != tb || a.l->n != b.l->n) return 0;
        for (uint32_t i = 0; i < a.l->n; i++)
            if (!jj__equal(a.l->v[i], b.l->v[i])) return 0;
        return 1;
    }
    case JINJA_DICT: {
        if (a.d == b.d) return 1;
        if (a.d->n != b.d->n) return 0;
        for (uint32_t i = 0; i < a.d->n; i++) {
            jj_entry *e = dict_find_h(b.d, a.d->e[i].k, a.d->e[i].hash);
            if (!e || !jj__equal(e->v, a.d->e[i].v)) return 0;
        }
        return 1;
    }
    default:
        return a.fn == b.fn;
    }
}

int jj__compare(jinja_ctx *c, jinja_value a, jinja_value b)
{
    if (a.kind == JINJA_UNDEFINED) jj__undef_fail(c, a);
    if (b.kind == JINJA_UNDEFINED) jj__undef_fail(c, b);
    if (is_num(a) && is_num(b)) {
        if (a.kind != JINJA_FLOAT && b.kind != JINJA_FLOAT) {
            int64_t x = a.kind == JINJA_INT ? a.i : a.b, y = b.kind == JINJA_INT ? b.i : b.b;
            return x < y ? -1 : x > y;
        }
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y;
    }
    if (a.kind == JINJA_STR && b.kind == JINJA_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int r = memcmp(a.s->s, b.s->s, n);
        if (r) return r < 0 ? -1 : 1;
        return a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
    }
    if (a.kind == JINJA_LIST && b.kind == JINJA_LIST && a.l->type == b.l->type &&
        (a.l->type == JJ_L_LIST || a.l->type == JJ_L_TUPLE)) {
        uint32_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (uint32_t i = 0; i < n; i++)
            if (!jj__equal(a.l->v[i], b.l->v[i])) return jj__compare(c, a.l->v[i], b.l->v[i]);
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    jj__raise(c, JJ_E_TYPE, "'<' not supported between instances of '%s' and '%s'",
              jj__type_name(a), jj__type_name(b));
}

const char *jj__type_name(jinja_value v)
{
    static const char *const lt[] = {"list",      "tuple",       "generator", "dict_items",
                                     "dict_keys", "dict_values", "range"};
    switch (v.kind) {
    case JINJA_UNDEFINED:
        return "Undefined";
    case JINJA_NONE:
        return "NoneType";
    case JINJA_BOOL:
        return "bool";
    case JINJA_INT:
        return "int";
    case JINJA_FLOAT:
        return "float";
    case JINJA_STR:
        return v.flags & JINJA_F_MARKUP ? "Markup" : "str";
    case JINJA_LIST:
        return lt[v.l->type];
    case JINJA_DICT:
        return "dict";
    case JINJA_NAMESPACE:
        return "Namespace";
    case JINJA_CALLABLE:
        return v.fn->type == JJ_FN_MACRO    ? "Macro"
               : v.fn->type == JJ_FN_METHOD ? "builtin_function_or_method"
                                            : "function";
    case JINJA_LOOP:
        return "LoopContext";
    default:
        return "object";
    }
}

/* ---- iteration, len, in ------------------------------------------------------------------- */

void jj__force_gen(jinja_ctx *c, jinja_value g)
{
    struct jinja_list *l = g.l;
    jj_lazy_fn fn = l->lazy;
    l->lazy = NULL;
    jinja_value r = fn(c, l->lazy_in, l->lazy_args);
    if (r.kind == JINJA_LIST && r.l->lazy) jj__force_gen(c, r);
    l->v = r.l->v;
    l->n = r.l->n;
    l->cap = r.l->cap;
}

jinja_value jj__iter_list(jinja_ctx *c, jinja_value v)
{
    switch (v.kind) {
    case JINJA_LIST:
        if (v.l->type == JJ_L_GEN) {
            if (v.l->consumed) return jj__list_new(c, JJ_L_LIST, 0);
            if (v.l->lazy) jj__force_gen(c, v);
            v.l->consumed = 1;
        }
        return v;
    case JINJA_DICT: {
        jinja_value l = jj__list_new(c, JJ_L_LIST, v.d->n);
        for (uint32_t i = 0; i < v.d->n; i++)
            l.l->v[i] = v.d->e[i].k;
        l.l->n = v.d->n;
        return l;
    }
    case JINJA_STR: {
        jinja_value l = jj__list_new(c, JJ_L_LIST, (uint32_t)v.s->n_cp);
        size_t i = 0;
        while (i < v.s->len) {
            size_t start = i;
            jj__utf8_next(v.s->s, v.s->len, &i);
            jinja_value ch = jj__str_new(c, v.s->s + start, i - start);
            ch.flags = v.flags;
            l.l->v[l.l->n++] = ch;
        }
        return l;
    }
    case JINJA_UNDEFINED:
        return jj__list_new(c, JJ_L_LIST, 0);
    default:
        jj__raise(c, JJ_E_TYPE, "'%s' object is not iterable", jj__type_name(v));
    }
}

int64_t jj__len(jinja_ctx *c, jinja_value v)
{
    switch (v.kind) {
    case JINJA_STR:
        return (int64_t)v.s->n_cp;
    case JINJA_LIST:
        if (v.l->type != JJ_L_GEN) return v.l->n;
        break;
    case JINJA_DICT:
        return v.d->n;
    case JINJA_UNDEFINED:
        return 0;
    case JINJA_LOOP:
        return v.loop->items.l->n;
    default:
        break;
    }
    jj__raise(c, JJ_E_TYPE, "object of type '%s' has no len()", jj__type_name(v));
}

int jj__contains(jinja_ctx *c, jinja_value b, jinja_value a)
{
    switch (b.kind) {
    case JINJA_STR:
        if (a.kind != JINJA_STR)
            jj__raise(c, JJ_E_TYPE, "'in <string>' requires string as left operand, not %s",
                      jj__type_name(a));
        return a.s->len == 0 || memmem(b.s->s, b.s->len, a.s->s, a.s->len) != NULL;
    case JINJA_DICT:
        return jj__dict_find(c, b, a) != NULL;
    case JINJA_LIST: {
        jinja_value l = jj__iter_list(c, b);
        for (uint32_t i = 0; i < l.l->n; i++)
            if (jj__equal(l.l->v[i], a)) return 1;
        return 0;
    }
    case JINJA_UNDEFINED:
        return 0;
    default:
        jj__raise(c, JJ_E_TYPE, "argument of type '%s' is not iterable", jj__type_name(b));
    }
}
