/*
 * oai_schema.c — JSON Schema (cJSON) → GBNF rules (oai_schema_gbnf in oai_schema.h).
 *
 * A depth-first walk writes, for each schema, a GBNF expression; objects write two rule
 * families per object (A_i: "no member yet, one must come", B_i: "after a member") so each
 * property is referenced a bounded number of times, $ref targets become named rules (so
 * recursive schemas are recursive rules), and shared pieces (whitespace, string characters, any
 * JSON value, formats) are written once on first use. Every rule name starts with the caller's
 * prefix. Errors name the schema path ("properties.a.items") and stop the walk.
 *
 * Called on the request-preparation thread (server/prep.c) and by tool-call code; no globals.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "server/openai/internal.h"
#include "server/openai/oai_schema.h"

#define SC_MAX_DEPTH 64

enum sc_shared { SH_WS, SH_CHAR, SH_STRING, SH_NUMBER, SH_INTEGER, SH_VALUE, SH_DATE, SH_TIME, SH_UUID, SH_EMAIL, SH_IPV4, SH_N };

typedef struct sc_ref {
    char *ptr;       /* the $ref string */
    int id;          /* rule PREFIX "ref" id */
    int done;
} sc_ref;

typedef struct sc {
    buf rules;
    const char *prefix;
    const cJSON *root;
    sc_ref *refs;
    int n_refs, cap_refs;
    int n_objs;
    unsigned shared;  /* bit per enum sc_shared written */
    char path[384];
    size_t path_len;
    char *err;
    size_t err_len;
    int failed;
    int depth;
} sc;

static int fail(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(sc *c, const char *fmt, ...)
{
    if (c->failed) return -1;
    c->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_len, "at %s: %s", c->path_len ? c->path : "the root", msg);
    return -1;
}

static size_t path_push(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t path_push(sc *c, const char *fmt, ...)
{
    size_t old = c->path_len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->path + old, sizeof c->path - old, fmt, ap);
    va_end(ap);
    if (n > 0) c->path_len = old + (size_t)n < sizeof c->path ? old + (size_t)n : sizeof c->path - 1;
    if (old == 0 && c->path[0] == '.') { /* no leading dot at the root */
        memmove(c->path, c->path + 1, c->path_len);
        c->path_len--;
    }
    return old;
}

static void path_pop(sc *c, size_t old)
{
    c->path_len = old;
    c->path[old] = 0;
}

/* ---- shared rules --------------------------------------------------------------------------- */

/* Writes shared rule k once; appends its name to e. */
static void shared(sc *c, int k, buf *e)
{
    static const char *const names[SH_N] = {"ws", "char", "string", "number", "integer", "value", "date", "time", "uuid", "email", "ipv4"};
    const char *p = c->prefix;
    if (!(c->shared & (1u << k))) {
        c->shared |= 1u << k;
        buf *r = &c->rules;
        switch (k) {
        case SH_WS: buf_printf(r, "%sws ::= ( \"\" | \" \" | \"\\n\" [ \\t]{0,20} )\n", p); break;
        case SH_CHAR:
            buf_printf(r, "%schar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n", p);
            break;
        case SH_STRING:
            shared(c, SH_CHAR, NULL);
            buf_printf(r, "%sstring ::= \"\\\"\" %schar* \"\\\"\"\n", p, p);
            break;
        case SH_NUMBER:
            buf_printf(r, "%snumber ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n", p);
            break;
        case SH_INTEGER: buf_printf(r, "%sinteger ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n", p); break;
        case SH_VALUE:
            shared(c, SH_WS, NULL);
            shared(c, SH_STRING, NULL);
            shared(c, SH_NUMBER, NULL);
            buf_printf(r, "%svalue ::= %sobject | %sarray | %sstring | %snumber | \"true\" | \"false\" | \"null\"\n", p, p, p, p, p);
            buf_printf(r, "%sobject ::= \"{\" %sws ( %sstring %sws \":\" %sws %svalue ( %sws \",\" %sws %sstring %sws \":\" %sws %svalue )* %sws )? \"}\"\n",
                       p, p, p, p, p, p, p, p, p, p, p, p, p);
            buf_printf(r, "%sarray ::= \"[\" %sws ( %svalue ( %sws \",\" %sws %svalue )* %sws )? \"]\"\n", p, p, p, p, p, p, p);
            break;
        case SH_DATE: /* days per month; February stops at 28 so every date exists */
            buf_printf(r, "%sdate ::= [1-9] [0-9]{3} \"-\" ( (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
                          "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) )\n", p);
            break;
        case SH_TIME:
            buf_printf(r, "%stime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
                          "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n", p);
            break;
        case SH_UUID:
            buf_printf(r, "%suuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n", p);
            break;
        case SH_EMAIL:
            buf_printf(r, "%semail ::= [A-Za-z0-9_%%+-]{1,32} (\".\" [A-Za-z0-9_%%+-]{1,32}){0,3} \"@\" "
                          "[A-Za-z0-9] ([A-Za-z0-9-]{0,30} [A-Za-z0-9])? (\".\" [A-Za-z0-9] ([A-Za-z0-9-]{0,30} [A-Za-z0-9])?){1,3}\n", p);
            break;
        case SH_IPV4:
            buf_printf(r, "%sipv4 ::= %soctet \".\" %soctet \".\" %soctet \".\" %soctet\n"
                          "%soctet ::= [0-9] | [1-9] [0-9] | \"1\" [0-9]{2} | \"2\" [0-4] [0-9] | \"25\" [0-5]\n", p, p, p, p, p, p);
            break;
        }
    }
    if (e) buf_printf(e, "%s%s", p, names[k]);
}

/* ---- JSON literals (enum, const) -------------------------------------------------------- */

static int valid_utf8(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int l = *u < 0x80 ? 1 : (*u >> 5) == 6 ? 2 : (*u >> 4) == 14 ? 3 : (*u >> 3) == 30 ? 4 : 0;
        if (!l) return 0;
        for (int i = 1; i < l; i++)
            if ((u[i] & 0xC0) != 0x80) return 0;
        u += l;
    }
    return 1;
}

/* A JSON string's text "…" for s (escapes as JSON requires, UTF-8 as is). */
static void json_string(buf *t, const char *s)
{
    buf_put(t, "\"", 1);
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u == '"' || *u == '\\') buf_printf(t, "\\%c", *u);
        else if (*u == '\n') buf_puts(t, "\\n");
        else if (*u == '\t') buf_puts(t, "\\t");
        else if (*u == '\r') buf_puts(t, "\\r");
        else if (*u < 0x20) buf_printf(t, "\\u%04x", *u);
        else buf_put(t, (const char *)u, 1);
    }
    buf_put(t, "\"", 1);
}

/* The compact JSON text of v. */
static int json_text(sc *c, const cJSON *v, buf *t)
{
    if (cJSON_IsNull(v)) buf_puts(t, "null");
    else if (cJSON_IsTrue(v)) buf_puts(t, "true");
    else if (cJSON_IsFalse(v)) buf_puts(t, "false");
    else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) buf_printf(t, "%lld", (long long)d);
        else buf_printf(t, "%.17g", d);
    } else if (cJSON_IsString(v)) {
        if (!valid_utf8(v->valuestring)) return fail(c, "a string of enum/const is not valid UTF-8");
        json_string(t, v->valuestring);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int obj = cJSON_IsObject(v), first = 1;
        buf_puts(t, obj ? "{" : "[");
        for (const cJSON *x = v->child; x; x = x->next) {
            if (!first) buf_puts(t, ",");
            first = 0;
            if (obj) {
                if (!valid_utf8(x->string)) return fail(c, "a key of enum/const is not valid UTF-8");
                json_string(t, x->string);
                buf_puts(t, ":");
            }
            if (json_text(c, x, t)) return -1;
        }
        buf_puts(t, obj ? "}" : "]");
    } else {
        return fail(c, "a value of enum/const is not JSON");
    }
    return 0;
}

static int literal_of(sc *c, const cJSON *v, buf *e)
{
    buf t = {0};
    int rc = json_text(c, v, &t);
    if (!rc && !t.oom) gr_buf_literal(e, t.s, t.len);
    free(t.s);
    return rc;
}

/* ---- keywords ------------------------------------------------------------------------------- */

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly", NULL};
static const char *const KEYWORDS[] = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
                                       "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static int in_list(const char *const *l, const char *s)
{
    for (; *l; l++)
        if (!strcmp(*l, s)) return 1;
    return 0;
}

/* Refuses unknown keywords; with `alone`, also any constraint beside it (other than
 * annotations and $defs). */
static int check_keywords(sc *c, const cJSON *s, const char *alone)
{
    for (const cJSON *k = s->child; k; k = k->next) {
        if (in_list(ANNOTATIONS, k->string)) continue;
        if (!in_list(KEYWORDS, k->string)) return fail(c, "unsupported JSON Schema keyword '%s'", k->string);
        if (alone && strcmp(k->string, alone) && strcmp(k->string, "$defs") && strcmp(k->string, "definitions"))
            return fail(c, "'%s' beside '%s' is not supported (put the constraints inside it)", k->string, alone);
    }
    return 0;
}

static const cJSON *kw(const cJSON *s, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A non-negative integer keyword into *out (absent: def). */
static int count_kw(sc *c, const cJSON *s, const char *name, long def, long *out)
{
    const cJSON *v = kw(s, name);
    *out = def;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) || v->valuedouble > 100000)
        return fail(c, "'%s' must be a whole number from 0 to 100000", name);
    *out = (long)v->valuedouble;
    return 0;
}

static int gen(sc *c, const cJSON *s, buf *e);

/* ---- strings -------------------------------------------------------------------------------- */

static int gen_string(sc *c, const cJSON *s, buf *e)
{
    const cJSON *fmt = kw(s, "format"), *pat = kw(s, "pattern");
    long mn, mx;
    if (count_kw(c, s, "minLength", 0, &mn) || count_kw(c, s, "maxLength", -1, &mx)) return -1;
    int lengths = kw(s, "minLength") || kw(s, "maxLength");
    if ((fmt || pat) && lengths) return fail(c, "minLength/maxLength together with %s are not supported", fmt ? "format" : "pattern");
    if (fmt && pat) return fail(c, "format together with pattern is not supported");
    buf_puts(e, "\"\\\"\" ");
    if (fmt) {
        static const struct { const char *name; int k; } fm[] = {{"date", SH_DATE}, {"time", SH_TIME}, {"uuid", SH_UUID}, {"email", SH_EMAIL}, {"ipv4", SH_IPV4}};
        if (!cJSON_IsString(fmt)) return fail(c, "'format' must be a string");
        int k = -1;
        for (size_t i = 0; i < sizeof fm / sizeof *fm; i++)
            if (!strcmp(fmt->valuestring, fm[i].name)) k = fm[i].k;
        if (!strcmp(fmt->valuestring, "date-time")) {
            shared(c, SH_DATE, e);
            buf_puts(e, " \"T\" ");
            shared(c, SH_TIME, e);
        } else if (k >= 0) {
            shared(c, k, e);
        } else {
            return fail(c, "unsupported format '%.60s' (supported: date, time, date-time, uuid, email, ipv4)", fmt->valuestring);
        }
    } else if (pat) {
        if (!cJSON_IsString(pat)) return fail(c, "'pattern' must be a string");
        gr_error ge;
        char *x = gr_regex_to_gbnf(pat->valuestring, strlen(pat->valuestring), GR_RE_JSON_SEARCH, &ge);
        if (!x) return fail(c, "pattern: %s at position %d", ge.msg, ge.pos);
        buf_puts(e, x);
        free(x);
    } else {
        if (mx >= 0 && mn > mx) return fail(c, "minLength is above maxLength");
        shared(c, SH_CHAR, e);
        if (mx < 0) buf_printf(e, mn ? "{%ld,}" : "*", mn);
        else buf_printf(e, "{%ld,%ld}", mn, mx);
    }
    buf_puts(e, " \"\\\"\"");
    return 0;
}

/* ---- numbers -------------------------------------------------------------------------------- */

/* One bound keyword (number; draft-4 boolean exclusives modify the plain bound) into *b. */
static int read_bound(sc *c, const cJSON *s, int upper, int integer, oai_bound *b)
{
    const cJSON *v = kw(s, upper ? "maximum" : "minimum"), *x = kw(s, upper ? "exclusiveMaximum" : "exclusiveMinimum");
    double val = 0;
    int set = 0, excl = 0;
    if (v) {
        if (!cJSON_IsNumber(v)) return fail(c, "'%s' must be a number", upper ? "maximum" : "minimum");
        val = v->valuedouble;
        set = 1;
    }
    if (x) {
        if (cJSON_IsBool(x)) {
            excl = set && cJSON_IsTrue(x);
        } else if (cJSON_IsNumber(x)) {
            if (!set || (upper ? x->valuedouble <= val : x->valuedouble >= val)) val = x->valuedouble, excl = 1;
            set = 1;
        } else {
            return fail(c, "'%s' must be a number", upper ? "exclusiveMaximum" : "exclusiveMinimum");
        }
    }
    b->set = set;
    b->excl = 0;
    if (!set) return 0;
    if (fabs(val) > 1e18) return fail(c, "bound %g is too large (the limit is 10^18)", val);
    double w = upper ? floor(val) : ceil(val);
    if (w != val) { /* a fractional bound: the whole numbers inside it, inclusive (a subset) */
        b->v = (int64_t)w;
        return 0;
    }
    b->v = (int64_t)val;
    if (excl && integer) b->v += upper ? -1 : 1;
    else b->excl = excl;
    return 0;
}

static int gen_number(sc *c, const cJSON *s, int integer, buf *e)
{
    oai_bound lo, hi;
    if (read_bound(c, s, 0, integer, &lo) || read_bound(c, s, 1, integer, &hi)) return -1;
    if (!lo.set && !hi.set) {
        shared(c, integer ? SH_INTEGER : SH_NUMBER, e);
        return 0;
    }
    if (lo.set && hi.set && (lo.v > hi.v || (lo.v == hi.v && (lo.excl || hi.excl)))) return fail(c, "no %s lies within the bounds", integer ? "integer" : "number");
    int rc = integer ? oai__int_range(e, &lo, &hi) : oai__number_range(e, &lo, &hi);
    return rc ? fail(c, "no %s lies within the bounds", integer ? "integer" : "number") : 0;
}

/* ---- arrays --------------------------------------------------------------------------------- */

static int gen_array(sc *c, const cJSON *s, buf *e)
{
    const cJSON *items = kw(s, "items"), *prefix = kw(s, "prefixItems");
    long mn, mx;
    if (count_kw(c, s, "minItems", 0, &mn) || count_kw(c, s, "maxItems", -1, &mx)) return -1;
    if (mx >= 0 && mn > mx) return fail(c, "minItems is above maxItems");
    if (prefix && !cJSON_IsArray(prefix)) return fail(c, "'prefixItems' must be an array of schemas");
    int m = prefix ? cJSON_GetArraySize(prefix) : 0, no_more = items && cJSON_IsFalse(items);
    if (no_more && mn > m) return fail(c, "minItems needs more items than prefixItems allows");
    long top = no_more && (mx < 0 || mx > m) ? m : mx; /* the most items possible (-1: unbounded) */
    if (top >= 0 && top < m) m = (int)top;
    buf it = {0};
    if (!no_more && (top < 0 || top > m)) {
        size_t old = path_push(c, ".items");
        int rc = items ? gen(c, items, &it) : (shared(c, SH_VALUE, &it), 0);
        path_pop(c, old);
        if (rc) {
            free(it.s);
            return -1;
        }
    }
    buf_puts(e, "( \"[\" ");
    shared(c, SH_WS, e);
    if (m == 0 && !it.s) { /* no item can be there */
        buf_puts(e, " \"]\" )");
        return 0;
    }
    if (mn == 0) buf_puts(e, " (");
    /* the prefix items in order, each optional once minItems is reached */
    int opened = 0;
    for (int j = 0; j < m; j++) {
        if (j) {
            if (j >= mn) buf_puts(e, " ("), opened++;
            buf_puts(e, " ");
            shared(c, SH_WS, e);
            buf_puts(e, " \",\" ");
            shared(c, SH_WS, e);
        }
        buf_puts(e, " ");
        size_t old = path_push(c, ".prefixItems[%d]", j);
        int rc = gen(c, cJSON_GetArrayItem(prefix, j), e);
        path_pop(c, old);
        if (rc) {
            free(it.s);
            return -1;
        }
    }
    if (it.s) { /* then items: the rest of minItems, up to maxItems */
        long need = mn > m ? mn - m : 0, most = top < 0 ? -1 : top - m;
        if (m == 0) { /* the first item has no comma */
            buf_printf(e, " (%s)", it.s);
            need = need ? need - 1 : 0;
            most = most < 0 ? -1 : most - 1;
        }
        buf_puts(e, " ( ");
        shared(c, SH_WS, e);
        buf_puts(e, " \",\" ");
        shared(c, SH_WS, e);
        buf_printf(e, " (%s) )", it.s);
        if (most < 0) buf_printf(e, need ? "{%ld,}" : "*", need);
        else buf_printf(e, "{%ld,%ld}", need, most);
    }
    for (int k = 0; k < opened; k++) buf_puts(e, " )?");
    buf_puts(e, " ");
    shared(c, SH_WS, e);
    if (mn == 0) buf_puts(e, " )?");
    buf_puts(e, " \"]\" )");
    free(it.s);
    return 0;
}

/* ---- objects -------------------------------------------------------------------------------- */

typedef struct sc_name {
    uint32_t cp[128];  /* code points of a declared property name */
    int len;
} sc_name;

/* The keys an extra property may have: strings of plain characters (no escapes) other than the
 * names v[0..n) (a trie walk: stop where no name ends, leave the trie with any other character,
 * or follow a child). */
static void not_names(buf *e, sc_name *const *v, int n, int depth)
{
    int ends = 0, nk = 0;
    uint32_t next[128];
    for (int i = 0; i < n; i++) {
        if (v[i]->len == depth) {
            ends = 1;
            continue;
        }
        int dup = 0;
        for (int k = 0; k < nk; k++) dup |= next[k] == v[i]->cp[depth];
        if (!dup && nk < 128) next[nk++] = v[i]->cp[depth];
    }
    buf_puts(e, "(");
    if (!ends) buf_puts(e, " \"\" |");
    buf_puts(e, " [^\"\\\\\\x00-\\x1F");
    for (int k = 0; k < nk; k++) gr_buf_cp(e, next[k]);
    buf_puts(e, "] [^\"\\\\\\x00-\\x1F]*");
    sc_name **sub = malloc(sizeof *sub * (n > 0 ? (size_t)n : 1));
    if (!sub) {
        e->oom = 1;
        return;
    }
    for (int k = 0; k < nk; k++) {
        int ns = 0;
        for (int i = 0; i < n; i++)
            if (v[i]->len > depth && v[i]->cp[depth] == next[k]) sub[ns++] = v[i];
        buf_puts(e, " | \"");
        gr_buf_cp(e, next[k]);
        buf_puts(e, "\" ");
        not_names(e, sub, ns, depth + 1);
    }
    free(sub);
    buf_puts(e, " )");
}

/* Decodes a property name into n; 0 when it has a character an extra key never has (so no
 * extra key can equal it), -1 when it is too long for the trie. */
static int name_cps(const char *s, sc_name *n)
{
    const unsigned char *u = (const unsigned char *)s;
    n->len = 0;
    while (*u) {
        int l = *u < 0x80 ? 1 : (*u >> 5) == 6 ? 2 : (*u >> 4) == 14 ? 3 : 4;
        uint32_t cp = l == 1 ? *u : *u & (0x3F >> (l - 1));
        for (int k = 1; k < l; k++) cp = (cp << 6) | (u[k] & 0x3F);
        if (cp < 0x20 || cp == '"' || cp == '\\') return 0;
        if (n->len == 128) return -1;
        n->cp[n->len++] = cp;
        u += l;
    }
    return 1;
}

/* The extra members' key-value expression (a key no declared name equals), into x. */
static int extra_kv(sc *c, const cJSON *props, const cJSON *add, buf *x)
{
    int n = props ? cJSON_GetArraySize(props) : 0, k = 0;
    sc_name *names = malloc(sizeof *names * (size_t)(n ? n : 1));
    sc_name **v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!names || !v) {
        free(names);
        free(v);
        x->oom = 1;
        return 0;
    }
    int rc = 0;
    for (const cJSON *p = props ? props->child : NULL; p && !rc; p = p->next) {
        int r = name_cps(p->string, &names[k]);
        if (r < 0) rc = fail(c, "property names longer than 128 characters are not supported with additionalProperties");
        if (r > 0) v[k] = &names[k], k++;
    }
    if (!rc) {
        buf_puts(x, "\"\\\"\" ");
        not_names(x, v, k, 0);
        buf_puts(x, " \"\\\"\" ");
        shared(c, SH_WS, x);
        buf_puts(x, " \":\" ");
        shared(c, SH_WS, x);
        buf_puts(x, " ");
        size_t old = path_push(c, ".additionalProperties");
        rc = cJSON_IsTrue(add) || !add ? (shared(c, SH_VALUE, x), 0) : gen(c, add, x);
        path_pop(c, old);
    }
    free(names);
    free(v);
    return rc;
}

static int is_required(const cJSON *req, const char *name)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, name)) return 1;
    return 0;
}

static void ws_comma_ws(sc *c, buf *b)
{
    shared(c, SH_WS, b);
    buf_puts(b, " \",\" ");
    shared(c, SH_WS, b);
}

static int gen_object(sc *c, const cJSON *s, buf *e)
{
    const cJSON *props = kw(s, "properties"), *req = kw(s, "required"), *add = kw(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' must be an array of names");
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add)) return fail(c, "'additionalProperties' must be a boolean or a schema");
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return fail(c, "'required' must be an array of names");
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return fail(c, "required property '%.60s' is not in 'properties'", r->valuestring);
    }
    int extras = add ? !cJSON_IsFalse(add) : !props; /* absent: none beside declared properties */
    int k = props ? cJSON_GetArraySize(props) : 0, id = ++c->n_objs, any_req = 0;
    const char *P = c->prefix;
    buf x = {0};
    if (extras && extra_kv(c, props, add, &x)) {
        free(x.s);
        return -1;
    }
    /* the members: KV_i, then A_i ("none yet, one must come") and B_i ("after one") */
    int i = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++) {
        if (!valid_utf8(p->string)) return free(x.s), fail(c, "a property name is not valid UTF-8");
        buf kv = {0}, key = {0};
        json_string(&key, p->string);
        gr_buf_literal(&kv, key.s, key.len);
        free(key.s);
        buf_puts(&kv, " ");
        shared(c, SH_WS, &kv);
        buf_puts(&kv, " \":\" ");
        shared(c, SH_WS, &kv);
        buf_puts(&kv, " ");
        size_t old = path_push(c, ".properties.%.60s", p->string);
        int rc = gen(c, p, &kv);
        path_pop(c, old);
        if (!rc) buf_printf(&c->rules, "%so%d-k%d ::= %s\n", P, id, i, kv.s ? kv.s : "\"\"");
        free(kv.s);
        if (rc) return free(x.s), -1;
        int rq = is_required(req, p->string);
        any_req |= rq;
        buf_printf(&c->rules, "%so%d-a%d ::= %so%d-k%d %so%d-b%d", P, id, i, P, id, i, P, id, i + 1);
        if (!rq && (i + 1 < k || extras)) buf_printf(&c->rules, " | %so%d-a%d", P, id, i + 1);
        buf_printf(&c->rules, "\n%so%d-b%d ::= (", P, id, i);
        ws_comma_ws(c, &c->rules);
        buf_printf(&c->rules, " %so%d-k%d)%s %so%d-b%d\n", P, id, i, rq ? "" : "?", P, id, i + 1);
    }
    buf_printf(&c->rules, "%so%d-b%d ::= ", P, id, k);
    if (extras) {
        buf_puts(&c->rules, "(");
        ws_comma_ws(c, &c->rules);
        buf_printf(&c->rules, " %s)*\n%so%d-a%d ::= %s %so%d-b%d\n", x.s, P, id, k, x.s, P, id, k);
    } else {
        buf_puts(&c->rules, "\"\"\n");
    }
    free(x.s);
    buf_puts(e, "( \"{\" ");
    shared(c, SH_WS, e);
    if (!k && !extras) {
        buf_puts(e, " \"}\" )");
        return 0;
    }
    buf_printf(e, any_req ? " %so%d-a0 " : " ( %so%d-a0 ", P, id);
    shared(c, SH_WS, e);
    buf_puts(e, any_req ? " \"}\" )" : " )? \"}\" )");
    return 0;
}

/* ---- references ----------------------------------------------------------------------------- */

/* The schema a local JSON pointer ("#", "#/$defs/a", "#/properties/x/items") names, or NULL. */
static const cJSON *resolve(const cJSON *root, const char *ptr)
{
    if (ptr[0] != '#') return NULL;
    const cJSON *cur = root;
    const char *p = ptr + 1;
    if (*p && *p != '/') return NULL;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof tok) tok[n++] = ch;
        }
        tok[n] = 0;
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else if (cJSON_IsArray(cur)) {
            char *end;
            long ix = strtol(tok, &end, 10);
            cur = *tok && !*end ? cJSON_GetArrayItem(cur, (int)ix) : NULL;
        } else {
            return NULL;
        }
        if (!cur) return NULL;
    }
    return cur;
}

static int gen_ref(sc *c, const cJSON *ref, buf *e)
{
    if (!cJSON_IsString(ref)) return fail(c, "'$ref' must be a string");
    const char *ptr = ref->valuestring;
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ptr, ptr)) {
            buf_printf(e, "%sref%d", c->prefix, c->refs[i].id);
            return 0;
        }
    const cJSON *target = resolve(c->root, ptr);
    if (!target) return fail(c, "'$ref' '%.80s' does not name a schema in this document (only local references are supported)", ptr);
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 8;
        sc_ref *v = realloc(c->refs, sizeof *v * (size_t)cap);
        if (!v) return fail(c, "out of memory");
        c->refs = v;
        c->cap_refs = cap;
    }
    int id = c->n_refs;
    if (!(c->refs[id].ptr = strdup(ptr))) return fail(c, "out of memory");
    c->refs[id].id = id;
    c->refs[id].done = 0;
    c->n_refs++;
    buf_printf(e, "%sref%d", c->prefix, id);
    buf body = {0};
    size_t old = path_push(c, ".$ref(%.80s)", ptr);
    int rc = gen(c, target, &body);
    path_pop(c, old);
    if (!rc) buf_printf(&c->rules, "%sref%d ::= %s\n", c->prefix, id, body.s ? body.s : "\"\"");
    free(body.s);
    return rc;
}

/* ---- the walk ------------------------------------------------------------------------------- */

enum { T_NULL = 1, T_BOOLEAN = 2, T_INTEGER = 4, T_NUMBER = 8, T_STRING = 16, T_ARRAY = 32, T_OBJECT = 64 };

static int type_bit(const char *t)
{
    static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

/* The types s allows: its "type", or those its keywords imply; 0 when anything goes. */
static int types_of(sc *c, const cJSON *s, int *out)
{
    const cJSON *t = kw(s, "type");
    *out = 0;
    if (cJSON_IsString(t)) {
        if (!(*out = type_bit(t->valuestring))) return fail(c, "unknown type '%.40s'", t->valuestring);
        return 0;
    }
    if (cJSON_IsArray(t)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, t) {
            int b = cJSON_IsString(x) ? type_bit(x->valuestring) : 0;
            if (!b) return fail(c, "'type' must name JSON types");
            *out |= b;
        }
        if (!*out) return fail(c, "'type' is an empty list");
        return 0;
    }
    if (t) return fail(c, "'type' must be a string or a list of strings");
    static const struct { const char *kw; int t; } implied[] = {
        {"properties", T_OBJECT}, {"required", T_OBJECT}, {"additionalProperties", T_OBJECT}, {"items", T_ARRAY}, {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY},
        {"maxItems", T_ARRAY}, {"minLength", T_STRING}, {"maxLength", T_STRING}, {"pattern", T_STRING}, {"format", T_STRING}, {"minimum", T_NUMBER},
        {"maximum", T_NUMBER}, {"exclusiveMinimum", T_NUMBER}, {"exclusiveMaximum", T_NUMBER}};
    for (size_t i = 0; i < sizeof implied / sizeof *implied; i++)
        if (kw(s, implied[i].kw)) *out |= implied[i].t;
    return 0;
}

/* 1 when JSON value v has one of the types (0: any). */
static int value_fits(const cJSON *v, int types)
{
    if (!types) return 1;
    if (cJSON_IsNull(v)) return types & T_NULL;
    if (cJSON_IsBool(v)) return types & T_BOOLEAN;
    if (cJSON_IsNumber(v)) return (types & T_NUMBER) || ((types & T_INTEGER) && v->valuedouble == floor(v->valuedouble));
    if (cJSON_IsString(v)) return types & T_STRING;
    if (cJSON_IsArray(v)) return types & T_ARRAY;
    return types & T_OBJECT;
}

/* enum / const: the listed values that fit the type, as literals. */
static int gen_values(sc *c, const cJSON *s, int types, buf *e)
{
    const cJSON *cv = kw(s, "const"), *ev = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_GetObjectItemCaseSensitive(s, "const")) cv = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (ev && (!cJSON_IsArray(ev) || !cJSON_GetArraySize(ev))) return fail(c, "'enum' must be a non-empty array");
    int n = 0;
    buf_puts(e, "(");
    for (const cJSON *v = cv ? cv : ev->child; v; v = cv ? NULL : v->next) {
        if (!value_fits(v, types)) continue;
        if (cv && ev) { /* both: const must be among the enum values */
            int in = 0;
            for (const cJSON *w = ev->child; w && !in; w = w->next) in = cJSON_Compare(v, w, 1);
            if (!in) continue;
        }
        buf_puts(e, n++ ? " | " : " ");
        if (literal_of(c, v, e)) return -1;
    }
    if (!n) return fail(c, "no value of %s fits the schema's type", cv ? "'const'" : "'enum'");
    buf_puts(e, " )");
    return 0;
}

static int gen_alternatives(sc *c, const cJSON *list, const char *name, buf *e)
{
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) return fail(c, "'%s' must be a non-empty array of schemas", name);
    buf_puts(e, "(");
    int i = 0;
    for (const cJSON *x = list->child; x; x = x->next, i++) {
        buf_puts(e, i ? " | " : " ");
        size_t old = path_push(c, ".%s[%d]", name, i);
        int rc = gen(c, x, e);
        path_pop(c, old);
        if (rc) return -1;
    }
    buf_puts(e, " )");
    return 0;
}

static int gen_inner(sc *c, const cJSON *s, buf *e)
{
    const cJSON *ref = kw(s, "$ref");
    if (ref) return check_keywords(c, s, "$ref") ? -1 : gen_ref(c, ref, e);
    if (check_keywords(c, s, NULL)) return -1;
    static const char *const combos[] = {"anyOf", "oneOf", "allOf"};
    for (int k = 0; k < 3; k++) {
        const cJSON *l = kw(s, combos[k]);
        if (!l) continue;
        if (check_keywords(c, s, combos[k])) return -1;
        if (k == 2 && (!cJSON_IsArray(l) || cJSON_GetArraySize(l) != 1))
            return fail(c, "'allOf' is supported with one schema only");
        return gen_alternatives(c, l, combos[k], e);
    }
    int types;
    if (types_of(c, s, &types)) return -1;
    if (cJSON_GetObjectItemCaseSensitive(s, "const") || kw(s, "enum")) return gen_values(c, s, types, e);
    if (!types) {
        shared(c, SH_VALUE, e);
        return 0;
    }
    if ((types & T_NUMBER) && (types & T_INTEGER)) types &= ~T_INTEGER;
    int n = 0;
    buf_puts(e, "(");
    for (int b = 1; b <= T_OBJECT; b <<= 1) {
        if (!(types & b)) continue;
        buf_puts(e, n++ ? " | " : " ");
        int rc = 0;
        switch (b) {
        case T_NULL: buf_puts(e, "\"null\""); break;
        case T_BOOLEAN: buf_puts(e, "(\"true\" | \"false\")"); break;
        case T_INTEGER: rc = gen_number(c, s, 1, e); break;
        case T_NUMBER: rc = gen_number(c, s, 0, e); break;
        case T_STRING: rc = gen_string(c, s, e); break;
        case T_ARRAY: rc = gen_array(c, s, e); break;
        case T_OBJECT: rc = gen_object(c, s, e); break;
        }
        if (rc) return -1;
    }
    buf_puts(e, " )");
    return 0;
}

static int gen(sc *c, const cJSON *s, buf *e)
{
    if (c->failed) return -1;
    if (cJSON_IsTrue(s)) {
        shared(c, SH_VALUE, e);
        return 0;
    }
    if (cJSON_IsFalse(s)) return fail(c, "the schema 'false' allows no value");
    if (!cJSON_IsObject(s)) return fail(c, "a schema must be an object or a boolean");
    if (++c->depth > SC_MAX_DEPTH) return fail(c, "schemas nested more than %d deep", SC_MAX_DEPTH);
    int rc = gen_inner(c, s, e);
    c->depth--;
    return rc;
}

char *oai_schema_gbnf(const cJSON *schema, const char *prefix, char *err, size_t err_len)
{
    sc c = {.prefix = prefix ? prefix : "", .root = schema, .err = err, .err_len = err_len};
    if (err_len) err[0] = 0;
    buf root = {0};
    int rc = gen(&c, schema, &root);
    if (!rc) buf_printf(&c.rules, "%sroot ::= %s\n", c.prefix, root.s ? root.s : "\"\"");
    free(root.s);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ptr);
    free(c.refs);
    if (!rc && (c.rules.oom || root.oom)) {
        snprintf(err, err_len, "out of memory");
        rc = -1;
    }
    if (rc) {
        free(c.rules.s);
        return NULL;
    }
    return buf_take(&c.rules);
}
