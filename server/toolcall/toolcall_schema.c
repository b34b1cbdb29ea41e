/*
 * toolcall_schema.c — the request's tool schemas, as far as the output parsers use them: which
 * top-level parameters of each function are strings. The XML-parameter syntaxes write values
 * without quotes (<parameter=zip>01234</parameter>), so their readers take a value as JSON when
 * it is one; a parameter the schema types as a string is turned back into a JSON string here,
 * from the model's own text (01234 stays "01234", 1.50 stays "1.50"). Parameters the schema
 * does not type as "string" (or as ["string", "null"]) keep what the reader made of them.
 *
 * The store is one buffer of records: the function's name, NUL, each string parameter's name,
 * NUL, and an empty name closing the record.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

#include "server/toolcall/internal.h"

/* Whether a property's schema says its value is a string. */
static int is_string_type(const cJSON *prop)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(prop, "type"), *x;
    if (cJSON_IsString(t)) return !strcmp(t->valuestring, "string");
    if (!cJSON_IsArray(t)) return 0;
    int str = 0, other = 0;
    cJSON_ArrayForEach(x, t)
    {
        if (!cJSON_IsString(x)) return 0;
        if (!strcmp(x->valuestring, "string"))
            str = 1;
        else if (strcmp(x->valuestring, "null"))
            other = 1;
    }
    return str && !other;
}

int tc__schemas_add(buf *store, const char *name, const char *schema)
{
    if (!name || !schema) return 0;
    cJSON *root = cJSON_Parse(schema);
    if (!root) return 0; /* not JSON: nothing known about its types */
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(root, "properties"), *p;
    size_t mark = store->len;
    buf_put(store, name, strlen(name) + 1);
    cJSON_ArrayForEach(p, props)
    {
        if (p->string && *p->string && is_string_type(p))
            buf_put(store, p->string, strlen(p->string) + 1);
    }
    buf_put(store, "", 1);
    cJSON_Delete(root);
    if (!store->oom) return 0;
    /* unchanged on failure: the records before stay readable and later ones may still fit */
    store->len = mark;
    if (store->s) store->s[mark] = 0;
    store->oom = 0;
    return -ENOMEM;
}

/* The record of function fn[0..fnn), or NULL. */
static const char *record(const buf *store, const char *fn, size_t fnn)
{
    for (size_t i = 0; i < store->len;) {
        const char *r = store->s + i;
        size_t l = strlen(r);
        if (l == fnn && !memcmp(r, fn, fnn)) return r + l + 1;
        for (i += l + 1; i < store->len && store->s[i]; i += strlen(store->s + i) + 1) {
        }
        i++; /* the record's closing empty name */
    }
    return NULL;
}

static int is_string_param(const char *rec, const char *k, size_t kn)
{
    for (; *rec; rec += strlen(rec) + 1)
        if (strlen(rec) == kn && !memcmp(rec, k, kn)) return 1;
    return 0;
}

int tc__schemas_retype(const buf *store, const char *fn, size_t fnn, const char *a, size_t n,
                       buf *out)
{
    const char *rec = store->len ? record(store, fn, fnn) : NULL;
    if (!rec || !*rec) return 0;
    size_t i = tc__skip_ws(a, n, 0), from = 0;
    int changed = 0, done;
    if (i >= n || a[i] != '{') return 0;
    for (i++;;) {
        i = tc__skip_ws(a, n, i);
        if (i < n && a[i] == ',') i = tc__skip_ws(a, n, i + 1);
        if (i >= n || a[i] != '"') break;
        size_t ke = tc__skip_value(a, n, i, &done);
        if (ke == (size_t)-1 || !done) break;
        size_t v = tc__skip_ws(a, n, ke);
        if (v >= n || a[v] != ':') break;
        v = tc__skip_ws(a, n, v + 1);
        size_t ve = v < n ? tc__skip_value(a, n, v, &done) : (size_t)-1;
        if (ve == (size_t)-1 || !done) break;
        if (a[v] != '"' && is_string_param(rec, a + i + 1, ke - i - 2)) {
            buf_put(out, a + from, v - from);
            tc__json_str(out, a + v, ve - v);
            from = ve;
            changed = 1;
        }
        i = ve;
    }
    if (changed) buf_put(out, a + from, n - from);
    return changed && out->s && !out->oom;
}
