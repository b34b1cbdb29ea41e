/*
 * oai_read.c — the typed readers of a request's JSON fields, which every parser of openai/ uses:
 * strict about the type and the range of a field, silent about one that is absent or null (the
 * output keeps its default). A field that does not fit is a 400 naming it (oai_error.c).
 */
#include <math.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "server/openai/internal.h"

int oai__is_absent(const cJSON *v)
{
    return !v || cJSON_IsNull(v);
}

int oai__get_ll(const cJSON *o, const char *name, long long lo, long long hi, long long *out,
                oai_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (oai__is_absent(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !isfinite(v->valuedouble))
        return oai__bad_type(e, name, "an integer");
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
        char what[96];
        snprintf(what, sizeof what, "must be between %lld and %lld", lo, hi);
        return oai__bad_value(e, name, what);
    }
    *out = (long long)v->valuedouble;
    return 0;
}

int oai__get_int(const cJSON *o, const char *name, int lo, int hi, int *out, oai_error *e)
{
    long long v = *out;
    int rc = oai__get_ll(o, name, lo, hi, &v, e);
    if (!rc) *out = (int)v;
    return rc;
}

int oai__get_num(const cJSON *o, const char *name, double lo, double hi, float *out, oai_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (oai__is_absent(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return oai__bad_type(e, name, "a number");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        char what[96];
        snprintf(what, sizeof what, "must be between %g and %g", lo, hi);
        return oai__bad_value(e, name, what);
    }
    *out = (float)v->valuedouble;
    return 0;
}

int oai__get_bool(const cJSON *o, const char *name, int *out, oai_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (oai__is_absent(v)) return 0;
    if (!cJSON_IsBool(v)) return oai__bad_type(e, name, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

